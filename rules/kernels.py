"""ADV6xx: kernels and compilation (guide: "Optimizer choice", torch.compile, SDPA)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from advisor.apis import ACCELERATOR, FABRIC, LIGHTNING_TRAINER, TORCH_ADAM, TRAINING_ARGUMENTS
from advisor.context import MISSING, FileContext
from advisor.edits import set_keyword, string_like
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid

# Trainer optimizers that run one small kernel per parameter tensor, and their fused twin.
UNFUSED_TRAINER_OPTIMS = ("adamw_torch", "adamw_hf")
FUSED_TRAINER_OPTIM = "adamw_torch_fused"
UNFUSED_ENUM_MEMBERS = ("ADAMW_TORCH", "ADAMW_HF")
FUSED_ENUM_MEMBER = "ADAMW_TORCH_FUSED"
# Adam(params, lr, betas, eps, weight_decay, amsgrad, *, foreach, ..., differentiable, fused)
PARAMS_POSITION = 0
GUIDE = "Optimizer choice"


def _device_kind(ctx: FileContext, expr: cst.BaseExpression) -> str | None:
    """"cpu" or "accelerator" for a ``.to(...)`` argument, None when it cannot be told."""
    resolved = ctx.values.resolve(expr)
    if resolved is not None and isinstance(resolved.value, str):
        return "cpu" if resolved.value.split(":")[0] == "cpu" else "accelerator"
    call = ctx.bound_call(expr, "torch.device")
    if call is not None and call.args:
        return _device_kind(ctx, call.args[0].value)
    return None


def _placements(ctx: FileContext, owner: str, scope_node: cst.CSTNode) -> set[str | None]:
    """Where ``owner`` (``model``) is moved: ``.cpu()``, ``.cuda()``, ``.to(x)`` on it or on its constructor."""
    kinds: set[str | None] = set()
    moves = ctx.method_calls("to", "cuda", "cpu")
    roots: list[cst.CSTNode] = []
    if "." not in owner:
        for binding in ctx.lookup(owner, scope_node):
            if binding.value is not None:
                roots.append(binding.value)
    for call in moves:
        receiver = call.func.value  # type: ignore[attr-defined]
        on_owner = dotted_name(receiver) == owner or any(call is root or ctx.is_descendant(call, root) for root in roots)
        if on_owner:
            kinds |= _move_kinds(ctx, call)
    return kinds


def _move_kinds(ctx: FileContext, call: cst.Call) -> set[str | None]:
    """{"cpu"} / {"accelerator"} / {None} (unknown device) for a ``.cpu()`` / ``.cuda()`` /
    ``.to(x)`` call, the empty set for anything else (``.to(torch.bfloat16)`` changes the dtype)."""
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
    if method == "cpu":
        return {"cpu"}
    if method == "cuda":
        return {"accelerator"}
    if method == "to" and call.args and not call.args[0].star:
        first = call.args[0].value
        qualname = ctx.qualname(first) or ""
        if qualname.startswith("torch.") and qualname != "torch.device":
            return set()
        return {_device_kind(ctx, first)}
    return set()


def params_clearly_on_cpu(ctx: FileContext, call: cst.Call) -> bool:
    """The optimizer's ``model.parameters()`` belong to a model only ever moved to the CPU."""
    params = ctx.argument(call, "params", PARAMS_POSITION)
    if params is None or params is MISSING:
        return False
    owners = []
    for inner in ctx.walk(params, cst.Call):
        func = inner.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("parameters", "named_parameters"):
            owner = dotted_name(func.value)
            if owner:
                owners.append(owner)
    return any(_placements(ctx, owner, call) == {"cpu"} for owner in owners)


def handed_to_deepspeed(ctx: FileContext, call: cst.Call) -> bool:
    """``deepspeed.initialize(optimizer=opt)`` wraps the optimizer and owns where its state lives."""
    parent = ctx.parent.get(call)
    name = None
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        name = dotted_name(parent.targets[0].target)
    for ds_call in ctx.calls("deepspeed.initialize"):
        for arg in ds_call.args:
            if arg.value is call or (name is not None and dotted_name(arg.value) == name):
                return True
    return False


class AdamNotFused(Rule):
    code = "ADV601"
    name = "adam-not-fused"
    summary = "torch's Adam/AdamW on CUDA parameters without the fused implementation."
    guide = GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        Without `fused=` or `foreach=`, `torch.optim.Adam` / `AdamW` pick the multi-tensor
        `foreach` path: several kernel launches per group of parameters and per state update.
        `fused=True` does the whole update in one kernel per parameter group and reads each
        tensor once, and it supports GradScaler's unscale-and-skip inside the kernel. The
        guide's *Optimizer choice* section lists `adamw_torch_fused` among the Trainer's
        optimizers; the fused implementation is the same AdamW arithmetic, only faster.

        For the Trainer, `optim="adamw_torch"` (and the removed `adamw_hf`) choose the
        unfused optimizer explicitly; recent transformers already default to
        `adamw_torch_fused`, so an unset `optim` is fine.
    """
    example = """
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    """
    use_instead = """
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    """
    silent_when = """
        - the file shows no CUDA device (CPU-only scripts), or the optimized model is only
          ever moved to the CPU;
        - `fused=` or `foreach=` is passed (either value: an explicit choice), or
          `differentiable=True` (which fused does not support), or the arguments come
          through `**kwargs` that cannot be resolved;
        - the optimizer is not torch's Adam: bitsandbytes (`bnb.optim.AdamW8bit`), apex
          `FusedAdam`, DeepSpeed `DeepSpeedCPUAdam`, `transformers.AdamW`, `SGD`...;
        - the optimizer is handed to `deepspeed.initialize`, which owns its state;
        - `TrainingArguments` without `optim`, with an `optim` read from the command line,
          or with `use_cpu=True`.

        The fused kernels need parameters in a floating point dtype on a supported device
        (CUDA; the CPU since torch 2.4).
    """
    valid = [
        Valid(
            """
            import torch
            model = Net().cuda()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
            """
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
            """,
            note="an explicit implementation choice",
        ),
        Valid(
            """
            import torch
            model = Net()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            """,
            note="CPU-only script",
        ),
        Valid(
            """
            import torch
            model = Net().to("cpu")
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            torch.cuda.empty_cache()
            """,
            note="the optimized model stays on the CPU",
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            optimizer = torch.optim.AdamW(model.parameters(), **opt_kwargs)
            """,
            note="unknown **kwargs may carry fused/foreach",
        ),
        Valid(
            """
            import torch
            import bitsandbytes as bnb
            model = Net().cuda()
            optimizer = bnb.optim.AdamW8bit(model.parameters(), lr=1e-3)
            """,
            note="bitsandbytes, not torch's Adam",
        ),
        Valid(
            """
            import torch
            from deepspeed.ops.adam import DeepSpeedCPUAdam
            from apex.optimizers import FusedAdam
            model = Net().cuda()
            cpu_adam = DeepSpeedCPUAdam(model.parameters(), lr=1e-3)
            fused_adam = FusedAdam(model.parameters(), lr=1e-3)
            """,
            note="DeepSpeed and apex optimizers",
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            """,
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            meta_opt = torch.optim.Adam(model.parameters(), lr=1e-3, differentiable=True)
            """,
            note="differentiable optimizers cannot be fused",
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", bf16=True)
            """,
            note="unset optim: recent transformers default to adamw_torch_fused",
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", optim="adamw_torch", use_cpu=True)
            """,
            note="CPU training",
        ),
        Valid(
            """
            from transformers import HfArgumentParser, TrainingArguments
            parser = HfArgumentParser(TrainingArguments)
            args = TrainingArguments("out", optim=cli_optim)
            """,
            note="optim chosen elsewhere: unknown",
        ),
    ]
    invalid = [
        Invalid(
            """
            from dataclasses import dataclass, field
            import transformers

            @dataclass
            class TrainingArguments(transformers.TrainingArguments):
                optim: str = field(default="adamw_torch")

            parser = transformers.HfArgumentParser((TrainingArguments,))
            (training_args,) = parser.parse_args_into_dataclasses()
            trainer = transformers.Trainer(model=model, args=training_args, train_dataset=ds)
            trainer.train()
            """,
            fixed="""
            from dataclasses import dataclass, field
            import transformers

            @dataclass
            class TrainingArguments(transformers.TrainingArguments):
                optim: str = field(default="adamw_torch_fused")

            parser = transformers.HfArgumentParser((TrainingArguments,))
            (training_args,) = parser.parse_args_into_dataclasses()
            trainer = transformers.Trainer(model=model, args=training_args, train_dataset=ds)
            trainer.train()
            """,
            note="the script's TrainingArguments subclass (Alpaca) declares the default",
        ),
        Invalid(
            """
            import torch
            model = Net().cuda()
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
            """,
            fixed="""
            import torch
            model = Net().cuda()
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, fused=True)
            """,
        ),
        Invalid(
            """
            import torch
            from torch import optim as O
            device = torch.device("cuda")
            model.to(device)
            config = {"lr": 1e-3, "betas": (0.9, 0.95)}
            optimizer = O.Adam(
                model.parameters(),
                **config,
            )
            """,
            fixed="""
            import torch
            from torch import optim as O
            device = torch.device("cuda")
            model.to(device)
            config = {"lr": 1e-3, "betas": (0.9, 0.95)}
            optimizer = O.Adam(
                model.parameters(),
                fused=True,
                **config,
            )
            """,
            note="import alias; a visible **dict without fused/foreach",
        ),
        Invalid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments(output_dir="out", optim='adamw_torch', bf16=True)
            """,
            fixed="""
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments(output_dir="out", optim='adamw_torch_fused', bf16=True)
            """,
        ),
        Invalid(
            """
            import argparse
            from transformers import Trainer, TrainingArguments
            parser = argparse.ArgumentParser()
            parser.add_argument("--optim", default="adamw_hf")
            cli = parser.parse_args()
            args = TrainingArguments(output_dir="out", optim=cli.optim)
            """,
            fixed="""
            import argparse
            from transformers import Trainer, TrainingArguments
            parser = argparse.ArgumentParser()
            parser.add_argument("--optim", default="adamw_torch_fused")
            cli = parser.parse_args()
            args = TrainingArguments(output_dir="out", optim=cli.optim)
            """,
            note="the value's own literal is edited, here an argparse default",
        ),
        Invalid(
            """
            from transformers import TrainingArguments
            from transformers.training_args import OptimizerNames
            args = TrainingArguments("out", optim=OptimizerNames.ADAMW_TORCH)
            """,
            fixed="""
            from transformers import TrainingArguments
            from transformers.training_args import OptimizerNames
            args = TrainingArguments("out", optim=OptimizerNames.ADAMW_TORCH_FUSED)
            """,
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if ctx.uses_cuda:
            yield from self._check_torch_adam(ctx)
        yield from self._check_trainer(ctx)

    def _check_torch_adam(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(*TORCH_ADAM):
            if any(ctx.argument(call, keyword) is not MISSING for keyword in ("fused", "foreach")):
                continue  # an explicit choice, or unknowable through **kwargs
            differentiable = ctx.argument(call, "differentiable")
            if differentiable is not MISSING:
                resolved = ctx.values.resolve(differentiable)  # type: ignore[arg-type]
                if resolved is None or resolved.value is not False:
                    continue
            if params_clearly_on_cpu(ctx, call) or handed_to_deepspeed(ctx, call):
                continue
            spelling = dotted_name(call.func) or "Adam"
            message = (
                f"`{spelling}` without `fused=True`: the unfused update launches many small kernels "
                f"per step; pass `fused=True` (guide: {GUIDE})"
            )
            fix = self.fix("Pass `fused=True`", Edit(call, set_keyword(call, "fused", "True")))
            yield self.report(call, message, fix)

    def _check_trainer(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            if any(self._maybe_true(ctx, call, flag) for flag in ("use_cpu", "no_cuda")):
                continue
            optim = ctx.argument(call, "optim")
            if optim is None or optim is MISSING:
                continue
            edit = self._fused_optim_edit(ctx, optim)
            if edit is None:
                continue
            shown = ctx.code(optim) if isinstance(edit.replacement, cst.Name) else f'"{ctx.values.value_of(optim)}"'
            message = (
                f"`optim={shown}` picks the unfused AdamW; use "
                f'`optim="{FUSED_TRAINER_OPTIM}"` (guide: {GUIDE})'
            )
            yield self.report(call, message, self.fix(f'Use `optim="{FUSED_TRAINER_OPTIM}"`', edit))
        yield from self._check_parsed_training_arguments(ctx)

    def _check_parsed_training_arguments(self, ctx: FileContext) -> Iterator[Finding]:
        """The script's own ``TrainingArguments`` subclass declares ``optim`` with an unfused
        default (Alpaca, FastChat): the default is what runs unless the command line says otherwise."""
        from advisor.rules.batch_size import parsed_training_arguments

        reported: set[int] = set()
        for name in parsed_training_arguments(ctx):
            if any(self._field_maybe_true(ctx, name, flag) for flag in ("use_cpu", "no_cuda")):
                continue
            optim = ctx.values.attribute(name, "optim")
            if optim is None or optim.value not in UNFUSED_TRAINER_OPTIMS or not isinstance(optim.node, cst.SimpleString):
                continue
            if id(optim.node) in reported:
                continue
            reported.add(id(optim.node))
            message = (
                f'The script\'s `TrainingArguments` default `optim="{optim.value}"` picks the unfused AdamW; '
                f'default to `"{FUSED_TRAINER_OPTIM}"` (guide: {GUIDE})'
            )
            edit = Edit(optim.node, string_like(optim.node, FUSED_TRAINER_OPTIM))
            yield self.report(optim.node, message, self.fix(f'Default to `optim="{FUSED_TRAINER_OPTIM}"`', edit))

    @staticmethod
    def _field_maybe_true(ctx: FileContext, name: cst.Name, field_name: str) -> bool:
        value = ctx.values.attribute(name, field_name)
        return value is not None and bool(value.value)

    def _fused_optim_edit(self, ctx: FileContext, optim: cst.BaseExpression) -> Edit | None:
        """The edit turning the ``optim`` value into the fused optimizer, where it is written in this file."""
        member = optim
        if isinstance(member, cst.Name):
            member = ctx.single_assignment(member) or member
        if isinstance(member, cst.Attribute):
            qualname = ctx.qualname(member) or ""
            if qualname.rsplit(".", 1)[-1] in UNFUSED_ENUM_MEMBERS and qualname.split(".")[-2:-1] == ["OptimizerNames"]:
                return Edit(member.attr, cst.Name(FUSED_ENUM_MEMBER))
        resolved = ctx.values.resolve(optim)
        if resolved is None or resolved.value not in UNFUSED_TRAINER_OPTIMS:
            return None
        if not isinstance(resolved.node, cst.SimpleString):
            return None
        return Edit(resolved.node, string_like(resolved.node, FUSED_TRAINER_OPTIM))

    @staticmethod
    def _maybe_true(ctx: FileContext, call: cst.Call, keyword: str) -> bool:
        """``use_cpu=<unknown or true>`` written out; one hidden in unknown ``**kwargs`` is not assumed."""
        expr = ctx.argument(call, keyword)
        if expr is MISSING or expr is None:
            return False
        resolved = ctx.values.resolve(expr)
        return resolved is None or bool(resolved.value)


# == Models trained on CUDA: the premise of ADV602 (torch.compile) and ADV605 (cuDNN autotuner) ====
COMPILE_GUIDE = "Using torch.compile"
# The HF guide has no cuDNN section: the advice is PyTorch's own tuning guide.
CUDNN_GUIDE = "PyTorch performance tuning guide, cuDNN auto-tuner"

# Methods that hand back their receiver: ``Net().to(device)``, ``model.cuda()``, ``model.train()``.
_SAME_MODULE_METHODS = frozenset(
    {"to", "cuda", "cpu", "half", "float", "bfloat16", "double", "train", "requires_grad_", "to_empty", "type"}
)
_DATA_PARALLEL = ("torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel")
_DISTRIBUTED_DATA_PARALLEL = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
)
_PEFT_WRAPPERS = (
    "peft.get_peft_model",
    "peft.prepare_model_for_kbit_training",
    "peft.prepare_model_for_int8_training",
    "peft.PeftModel.from_pretrained",
)
_JIT = ("torch.jit.script", "torch.jit.trace", "torch.jit.trace_module")
TORCH_COMPILE = "torch.compile"
# torch.nn classes that are not a model on their own.
_NOT_A_MODEL = re.compile(r"^(Parameter\w*|Buffer|Module|ModuleList|ModuleDict|\w*Loss|DataParallel)$")
_HF_MODEL_CLASS = re.compile(r"Model|For[A-Z]|^Autoencoder")
_HF_NOT_A_MODEL = re.compile(r"^DataCollator|Config$|Tokenizer(Fast)?$|Processor$|Extractor$|Pipeline$|Scheduler$|Trainer$")
_HF_LOADERS = ("from_pretrained", "from_config", "from_single_file")
_QUANTIZED_LOAD = ("load_in_8bit", "load_in_4bit", "quantization_config")
_MAX_TRACE_DEPTH = 6
# CapWords, with at least one lower-case letter: ``Net``, ``ResNet18``, not ``CONFIG``.
_CLASS_NAME = re.compile(r"^_?[A-Z][A-Za-z0-9_]*[a-z][A-Za-z0-9_]*$")
# Published libraries (not the script's own project): their classes are not models, or are
# recognised above by their own names.
KNOWN_LIBRARIES = frozenset(
    {
        "torch", "torchvision", "transformers", "diffusers", "timm", "accelerate", "lightning",
        "lightning_fabric", "peft", "trl", "deepspeed", "apex", "bitsandbytes", "datasets", "numpy",
        "pandas", "sklearn", "scipy", "PIL", "tqdm", "wandb", "tensorboard", "tensorboardX", "mlflow",
        "argparse", "collections", "dataclasses", "pathlib", "typing", "functools", "itertools", "logging",
        "json", "os", "sys", "re", "math", "random", "time", "copy", "enum", "contextlib", "abc", "gym",
        "gymnasium", "stable_baselines3", "omegaconf", "hydra", "einops", "evaluate", "huggingface_hub",
        "safetensors", "tokenizers", "sentencepiece", "onnx", "onnxruntime", "tensorflow", "keras", "jax",
        "flax", "optax", "unsloth", "torchmetrics", "ema_pytorch", "torch_ema",
    }
)


@dataclass(frozen=True)
class ModelBuild:
    """Where a model is built: ``model = Net().to(device)`` has call ``Net()``, name ``model``."""

    call: cst.Call
    # "local" (an nn.Module class of this file), "imported" (a class of the script's project),
    # "torch.nn", "torchvision", "timm", "transformers" (also diffusers)
    kind: str
    name: str  # the spelling bound to the model where it is built (the caller's, for a factory function)
    binding: cst.CSTNode  # the assignment that binds ``name``


@dataclass
class TrainedModel:
    """An ``nn.Module`` built in this file whose parameters an optimizer steps in a training loop."""

    name: str  # as the optimizer's parameters spell it (``model``, ``self.net``)
    optimizer: cst.Call
    builds: list[ModelBuild] = field(default_factory=list)
    # What it is handed to: "accelerate", "fabric", "deepspeed", "jit", "compile", "data_parallel", "ddp".
    handed_to: set[str] = field(default_factory=set)
    placements: set[str | None] = field(default_factory=set)  # as ``_placements`` tells them
    quantized: bool = False  # loaded in 8/4 bit (bitsandbytes)
    # Every spelling the trace followed (``model`` in ``main``, the ``model`` parameter of ``train``...).
    spellings: set[str] = field(default_factory=set)

    @property
    def on_cuda(self) -> bool:
        """Moved somewhere other than the CPU (an unresolved ``.to(device)`` in a CUDA file counts)."""
        return bool(self.placements - {"cpu"})


@dataclass
class _Trace:
    builds: list[ModelBuild] = field(default_factory=list)
    handed_to: set[str] = field(default_factory=set)
    placements: set[str | None] = field(default_factory=set)
    quantized: bool = False
    seen: set[tuple[str, int]] = field(default_factory=set)


def cuda_trained_models(ctx: FileContext) -> list[TrainedModel]:
    """The models this file builds and trains on CUDA: an optimizer stepped in a training loop
    updates their parameters, and the file shows a CUDA device. One entry per model; whether it
    is really on the GPU (``on_cuda``) and what it is handed to are left to the rules."""
    return ctx.memo(cuda_trained_models, lambda: _find_trained_models(ctx) if ctx.uses_cuda else [])


def _find_trained_models(ctx: FileContext) -> list[TrainedModel]:
    models: list[TrainedModel] = []
    for optimizer, owners in _stepped_optimizers(ctx):
        for owner, at in owners:
            trace = _Trace()
            _trace_model(ctx, owner, at, trace, None, 0)
            if not trace.builds:
                continue
            for framework in trace.handed_to & {"accelerate", "fabric"}:
                device = _framework_device(ctx, framework)
                if device is not None:
                    trace.placements.add(device)  # the framework moves the model itself
            if any({b.call for b in m.builds} & {b.call for b in trace.builds} for m in models):
                continue  # one entry per model, however many optimizers update it
            spellings = {spelling for spelling, _ in trace.seen} | {b.name for b in trace.builds if b.name}
            models.append(
                TrainedModel(
                    owner, optimizer, trace.builds, trace.handed_to, trace.placements, trace.quantized, spellings
                )
            )
    return models


def _stepped_optimizers(ctx: FileContext) -> list[tuple[cst.Call, list[tuple[str, cst.CSTNode]]]]:
    """Optimizers stepped in a training loop, each with the models whose parameters it updates."""
    found: list[tuple[cst.Call, list[tuple[str, cst.CSTNode]]]] = []
    seen: set[cst.Call] = set()
    for target in _stepped_optimizer_names(ctx):
        constructors = ctx.loops.optimizer_constructors(target)
        for call in constructors:
            if call not in seen:
                seen.add(call)
                params = ctx.argument(call, "params", PARAMS_POSITION)
                if params is not None and params is not MISSING:
                    found.append((call, _parameter_owners(ctx, params)))
        if constructors:
            continue
        # nanoGPT / minGPT: ``optimizer = model.configure_optimizers(...)``
        for call in _configure_optimizers_calls(ctx, target):
            if call not in seen:
                seen.add(call)
                receiver = dotted_name(call.func.value)  # type: ignore[attr-defined]
                if receiver:
                    found.append((call, [(receiver, call)]))
    return found


def _stepped_optimizer_names(ctx: FileContext) -> list[str]:
    """Optimizers a training loop steps: those of the innermost loops (``ctx.loops``), and those an
    enclosing loop steps too (a GAN's generator step after the critic's inner loop)."""
    names: list[str] = []
    loops = ctx.loops.training_loops
    for loop in loops:
        names.extend(t for t in loop.optimizers if t not in names)
    for call in ctx.method_calls("step"):
        receiver = dotted_name(call.func.value)  # type: ignore[attr-defined]
        if receiver is None or receiver in names or not ctx.loops.is_optimizer(receiver):
            continue
        outer = [a for a in ctx.ancestors(call) if isinstance(a, (cst.For, cst.While))]
        if any(ctx.is_descendant(loop.node, o) for loop in loops for o in outer):
            names.append(receiver)
    return names


def _configure_optimizers_calls(ctx: FileContext, target: str) -> list[cst.Call]:
    calls = []
    for call in ctx.method_calls("configure_optimizers"):
        parent = ctx.parent.get(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            bound = dotted_name(parent.targets[0].target)
            if bound and bound.split(".")[-1] == target.split(".")[-1]:
                calls.append(call)
    return calls


def _parameter_owners(ctx: FileContext, params: cst.BaseExpression, depth: int = 0) -> list[tuple[str, cst.CSTNode]]:
    """``model`` for ``model.parameters()`` / ``model.named_parameters()`` anywhere in ``params``,
    also through names bound once (``params = [p for p in model.parameters() if p.requires_grad]``)."""
    owners: list[tuple[str, cst.CSTNode]] = []
    for call in ctx.walk(params, cst.Call):
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("parameters", "named_parameters"):
            owner = dotted_name(func.value)
            if owner is not None:
                owner = _model_of(owner)
                if all(owner != known for known, _ in owners):
                    owners.append((owner, call))
    if depth < 3:
        for name in ctx.walk(params, cst.Name):
            parent = ctx.parent.get(name)
            if isinstance(parent, cst.Attribute) and (parent.attr is name or parent.value is name):
                continue
            value = ctx.single_assignment(name)
            if value is not None:
                for owner, at in _parameter_owners(ctx, value, depth + 1):
                    if all(owner != known for known, _ in owners):
                        owners.append((owner, at))
    return owners


def _model_of(owner: str) -> str:
    """The model a parameter owner belongs to: ``model`` for ``model.fc`` (a fine-tuned head) and
    ``model.module`` (DDP's inner module), ``self.net`` for ``self.net.head``."""
    parts = owner.split(".")
    keep = 2 if parts[0] == "self" else 1
    return ".".join(parts[:keep])


def _trace_model(
    ctx: FileContext,
    spelling: str,
    at: cst.CSTNode,
    trace: _Trace,
    outer: tuple[str, cst.CSTNode] | None,
    depth: int,
) -> None:
    """Follow what ``spelling`` (seen at ``at``) is bound to, back to the model's constructor.

    ``outer`` is the caller's (name, assignment) when the trace went into a factory function:
    the model is then built, for the rules' purposes, where the caller binds its result."""
    key = (spelling, id(ctx.scope_of.get(at)))
    if depth > _MAX_TRACE_DEPTH or key in trace.seen:
        return
    trace.seen.add(key)
    trace.placements |= _placements(ctx, spelling, at)
    trace.handed_to |= _hand_overs(ctx, spelling)
    if "." in spelling:
        for node in ctx.attribute_assignments.get(spelling, ()):
            if isinstance(node, cst.Assign) and len(node.targets) == 1:
                _trace_value(ctx, node.value, spelling, node, trace, outer, depth)
        return
    for binding in ctx.lookup(spelling, at):
        node = binding.node
        if binding.value is not None:
            _trace_value(ctx, binding.value, spelling, node, trace, outer, depth)
        elif isinstance(node, cst.Assign) and len(node.targets) == 1:
            # ``model, optimizer = accelerator.prepare(model, optimizer)``: follow the same position
            _trace_unpacked(ctx, node, spelling, trace, outer, depth)
        elif isinstance(node, cst.Param):
            _trace_parameter(ctx, node, trace, depth)


def _trace_value(
    ctx: FileContext,
    value: cst.BaseExpression,
    spelling: str,
    binding: cst.CSTNode,
    trace: _Trace,
    outer: tuple[str, cst.CSTNode] | None,
    depth: int,
) -> None:
    trace.placements |= _chain_placements(ctx, value)
    value = _strip_same_module_methods(value)
    inner = dotted_name(value)
    if inner is not None:
        if inner != spelling:  # ``model = net.to(device)``: ``model`` is what gets trained
            _trace_model(ctx, inner, value, trace, outer or (spelling, binding), depth + 1)
        return
    if not isinstance(value, cst.Call):
        return
    kind = model_build_kind(ctx, value)
    if kind is not None:
        name, node = outer or (spelling, binding)
        trace.builds.append(ModelBuild(value, kind, name, node))
        if kind == "transformers":
            if any(ctx.argument(value, keyword) is not MISSING for keyword in _QUANTIZED_LOAD):
                trace.quantized = True
            device_map = ctx.argument(value, "device_map")
            if device_map is not MISSING:
                resolved = ctx.values.resolve(device_map) if device_map is not None else None
                trace.placements.add("cpu" if resolved is not None and resolved.value == "cpu" else "accelerator")
        return
    qualname = ctx.qualname(value.func) or ""
    wrapped: cst.BaseExpression | None = None
    if qualname in _DATA_PARALLEL + _DISTRIBUTED_DATA_PARALLEL:
        trace.handed_to.add("data_parallel" if qualname in _DATA_PARALLEL else "ddp")
        wrapped = _first_argument(ctx, value, "module")
    elif qualname in _PEFT_WRAPPERS:
        # The PEFT model is the one trained: it is "built" where the wrapper's result is bound.
        wrapped = _first_argument(ctx, value, "model")
        outer = outer or (spelling, binding)
    elif qualname == TORCH_COMPILE:
        trace.handed_to.add("compile")
        wrapped = _first_argument(ctx, value, "model")
    elif qualname in _JIT:
        trace.handed_to.add("jit")
    elif qualname == "deepspeed.initialize":
        trace.handed_to.add("deepspeed")
    elif _framework_hand_over(ctx, value) is not None:
        trace.handed_to.add(_framework_hand_over(ctx, value))  # type: ignore[arg-type]
        wrapped = value.args[0].value if len(value.args) == 1 and not value.args[0].star else None
    elif isinstance(value.func, cst.Name):
        _trace_factory(ctx, value, outer or (spelling, binding), trace, depth)
    inner = dotted_name(wrapped) if wrapped is not None else None
    if inner is not None:
        _trace_model(ctx, inner, value, trace, outer, depth + 1)


def _trace_unpacked(
    ctx: FileContext, node: cst.Assign, spelling: str, trace: _Trace, outer, depth: int
) -> None:
    target, value = node.targets[0].target, node.value
    if not isinstance(target, (cst.Tuple, cst.List)) or not isinstance(value, cst.Call):
        return
    qualname = ctx.qualname(value.func) or ""
    if qualname == "deepspeed.initialize":
        trace.handed_to.add("deepspeed")
        return
    framework = _framework_hand_over(ctx, value)
    if framework is None:
        return
    trace.handed_to.add(framework)
    names = [dotted_name(e.value) for e in target.elements]
    if spelling in names and names.index(spelling) < len(value.args):
        arg = value.args[names.index(spelling)]
        inner = dotted_name(arg.value) if not arg.star else None
        if inner is not None:
            _trace_model(ctx, inner, value, trace, outer, depth + 1)


def _trace_parameter(ctx: FileContext, param: cst.Param, trace: _Trace, depth: int) -> None:
    """A model that arrives as a function parameter: follow what the file's callers pass."""
    function = ctx.scope_of.get(param)
    if not isinstance(function, cst.FunctionDef):
        return
    positional = list(function.params.params)
    index = next((i for i, p in enumerate(positional) if p is param), None)
    callee = function.name.value
    if callee == "__init__":
        owner = ctx.enclosing(function, cst.ClassDef)
        if not isinstance(owner, cst.ClassDef):
            return
        callee, index = owner.name.value, None if index is None else index - 1
    for call in ctx.nodes(cst.Call):
        if not (isinstance(call.func, cst.Name) and call.func.value == callee):
            continue
        passed = ctx.argument(call, param.name.value, index)
        inner = dotted_name(passed) if isinstance(passed, cst.BaseExpression) else None
        if inner is not None:
            _trace_model(ctx, inner, call, trace, None, depth + 1)


def _trace_factory(ctx: FileContext, call: cst.Call, outer, trace: _Trace, depth: int) -> None:
    """``model = build_model(args)`` where ``build_model`` is a function of this file."""
    bindings = ctx.lookup(call.func.value, call)  # type: ignore[attr-defined]
    if len(bindings) != 1 or not isinstance(bindings[0].node, cst.FunctionDef):
        return
    function = bindings[0].node
    for statement in ctx.walk(function, cst.Return):
        if ctx.scope_of.get(statement) is function and statement.value is not None:
            _trace_value(ctx, statement.value, "", statement, trace, outer, depth + 1)


def _chain_placements(ctx: FileContext, value: cst.BaseExpression) -> set[str | None]:
    """Devices of the moves chained on a constructor: ``Net().to(device).train()``."""
    kinds: set[str | None] = set()
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in _SAME_MODULE_METHODS
    ):
        kinds |= _move_kinds(ctx, value)
        value = value.func.value
    return kinds


def _strip_same_module_methods(value: cst.BaseExpression) -> cst.BaseExpression:
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in _SAME_MODULE_METHODS
    ):
        value = value.func.value
    return value


def _first_argument(ctx: FileContext, call: cst.Call, keyword: str) -> cst.BaseExpression | None:
    argument = ctx.argument(call, keyword, 0)
    return argument if isinstance(argument, cst.BaseExpression) else None


def _framework_hand_over(ctx: FileContext, call: cst.Call) -> str | None:
    """"accelerate" for ``accelerator.prepare(...)``, "fabric" for ``fabric.setup(...)``."""
    func = call.func
    if not isinstance(func, cst.Attribute) or not ctx.loops.is_framework(func.value):
        return None
    method = func.attr.value
    if method in ("prepare", "prepare_model"):
        return "accelerate" if ctx.bound_call(func.value, FABRIC) is None else None
    if method in ("setup", "setup_module"):
        return "fabric"
    return None


def _hand_overs(ctx: FileContext, spelling: str) -> set[str]:
    """Frameworks ``spelling`` is passed to without being rebound (``deepspeed.initialize(model=model)``)."""
    found: set[str] = set()
    calls = ctx.method_calls("prepare", "prepare_model", "setup", "setup_module")
    calls += ctx.calls("deepspeed.initialize", *_JIT, TORCH_COMPILE)
    for call in calls:
        if not any(dotted_name(arg.value) == spelling for arg in call.args):
            continue
        qualname = ctx.qualname(call.func) or ""
        if qualname == "deepspeed.initialize":
            found.add("deepspeed")
        elif qualname in _JIT:
            found.add("jit")
        elif qualname == TORCH_COMPILE:
            found.add("compile")
        else:
            framework = _framework_hand_over(ctx, call)
            if framework is not None:
                found.add(framework)
    return found


def _framework_device(ctx: FileContext, framework: str) -> str | None:
    """"cpu" when every Accelerator / Fabric of the file is told to use the CPU, "accelerator"
    when none is, None when that cannot be read."""
    if framework == "accelerate":
        calls = ctx.calls(ACCELERATOR)
        keyword = "cpu"
    else:
        calls = ctx.calls(FABRIC)
        keyword = "accelerator"
    if not calls:
        return None
    kinds = set()
    for call in calls:
        argument = ctx.argument(call, keyword)
        if argument is MISSING:
            kinds.add("accelerator")
            continue
        value = ctx.values.value_of(argument) if argument is not None else None
        if framework == "accelerate":
            kinds.add("cpu" if value is True else "accelerator" if value is False else None)
        else:
            kinds.add(None if value is None else "cpu" if value == "cpu" else "accelerator")
    return kinds.pop() if len(kinds) == 1 else None


def _local_module_classes(ctx: FileContext) -> dict[str, cst.ClassDef]:
    """Classes of this file that are ``nn.Module`` subclasses, directly or through each other."""
    classes = {c.name.value: c for c in ctx.nodes(cst.ClassDef)}
    modules: dict[str, cst.ClassDef] = {}
    changed = True
    while changed:
        changed = False
        for name, cls in classes.items():
            if name in modules:
                continue
            for base in cls.bases:
                qualname = ctx.qualname(base.value) or ""
                if (
                    qualname.startswith("torch.nn.")
                    or qualname == "lightning.pytorch.LightningModule"
                    or (qualname.startswith("transformers.") and "PreTrainedModel" in qualname)
                    or dotted_name(base.value) in modules
                ):
                    modules[name] = cls
                    changed = True
                    break
    return modules


def model_build_kind(ctx: FileContext, call: cst.Call) -> str | None:
    """What kind of model constructor ``call`` is, or None when it is not one."""
    func = call.func
    if isinstance(func, cst.Name):
        bindings = ctx.lookup(func.value, call)
        if func.value in _local_module_classes(ctx) and all(isinstance(b.node, cst.ClassDef) for b in bindings):
            return "local"
        if _imported_class(ctx, func, bindings):
            return "imported"
    qualname = ctx.qualname(func)
    if not qualname:
        return None
    parts = qualname.split(".")
    if qualname in ("timm.create_model", "timm.models.create_model"):
        return "timm"
    if parts[0] == "torchvision" and len(parts) >= 3 and parts[1] == "models":
        return "torchvision" if parts[-1][:1].islower() and parts[-1] not in ("list_models", "get_weight") else None
    if parts[0] in ("transformers", "diffusers") and len(parts) >= 2:
        cls = parts[-2] if parts[-1] in _HF_LOADERS else parts[-1]
        if cls[:1].isupper() and _HF_MODEL_CLASS.search(cls) and not _HF_NOT_A_MODEL.search(cls):
            return "transformers"
        return None
    if len(parts) == 3 and parts[:2] == ["torch", "nn"] and parts[2][:1].isupper() and not _NOT_A_MODEL.match(parts[2]):
        return "torch.nn"
    if parts[0] not in KNOWN_LIBRARIES and _CLASS_NAME.match(parts[-1]) and not _HF_NOT_A_MODEL.search(parts[-1]):
        return "imported"
    return None


def _imported_class(ctx: FileContext, func: cst.Name, bindings) -> bool:
    """``ResNet18()`` of a class the script imports from its own project (``from models import
    ResNet18``, ``from .net import Net``, ``from models import *``): its parameters going to an
    optimizer and the object to a device make it an ``nn.Module`` whose code lives elsewhere."""
    if not _CLASS_NAME.match(func.value) or _HF_NOT_A_MODEL.search(func.value):
        return False
    if not bindings:
        return any(isinstance(node.names, cst.ImportStar) for node in ctx.nodes(cst.ImportFrom))
    if not all(isinstance(b.node, cst.ImportFrom) for b in bindings):
        return False
    return all(b.node.relative for b in bindings)  # type: ignore[attr-defined]


# -- what the file already decided about compilation ---------------------------------------------
def compiles_something(ctx: FileContext) -> bool:
    """``torch.compile`` / ``torch._dynamo`` anywhere (a call, a decorator, a reference), or a
    module's in-place ``.compile()``: the script made its compilation choice."""
    for node in ctx.nodes(cst.Attribute) + ctx.nodes(cst.Name):
        qualname = ctx.qualname(node)
        if qualname and (qualname == TORCH_COMPILE or qualname.startswith(("torch._dynamo", "torch._inductor"))):
            return True
    for call in ctx.method_calls("compile"):
        if ctx.qualname(call.func.value) is None:  # type: ignore[attr-defined]
            return True  # ``model.compile()``, not ``re.compile(...)``
    return False


def called_directly(ctx: FileContext, model: TrainedModel) -> bool:
    """Whether the file runs the model through ``model(...)``: ``torch.compile`` wraps ``forward``,
    so a model driven only through other methods (``agent.get_action_and_value(obs)``) would not
    run compiled code at all."""
    return any(
        dotted_name(call.func) in model.spellings for call in ctx.nodes(cst.Call) if not isinstance(call.func, cst.Call)
    )


_PACK_PADDED_SEQUENCE = "torch.nn.utils.rnn.pack_padded_sequence"
# Calls that turn tensor values into Python numbers, or pick one of them, for a loop bound.
_HOST_NUMBER_METHODS = frozenset({"item", "tolist"})
_HOST_NUMBER_FUNCTIONS = frozenset({"max", "min", "int"})


def steps_over_data_lengths(ctx: FileContext, model: TrainedModel) -> bool:
    """Whether the model runs a Python loop as long as its batch's longest sequence (a step-by-step
    decoder): ``for t in range(max(decode_lengths))`` over ``lengths.tolist()`` in the ``forward``
    of its class in this file, or, for a class defined elsewhere, lengths it returns that the file
    packs its outputs with (``scores, ..., decode_lengths, ... = decoder(...)`` then
    ``pack_padded_sequence(scores, decode_lengths)``). Dynamo specializes on those Python
    numbers and recompiles for nearly every batch."""
    classes = _local_module_classes(ctx)
    for build in model.builds:
        cls = classes.get(build.call.func.value) if build.kind == "local" else None  # type: ignore[attr-defined]
        if cls is not None and _forward_loops_over_data(ctx, cls):
            return True
    return _packs_with_returned_lengths(ctx, model)


def _forward_loops_over_data(ctx: FileContext, cls: cst.ClassDef) -> bool:
    forward = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"), None)
    if forward is None:
        return False
    # Names that hold the inputs or something computed from them, in source order, and those of
    # them that are Python numbers read from the inputs (``n = int(lengths.max())``).
    derived = {p.name.value for p in forward.params.params[1:]}
    host_numbers: set[str] = set()
    for assign in ctx.walk(forward, cst.Assign):
        if _host_number_of(ctx, assign.value, derived, host_numbers):
            for target in assign.targets:
                host_numbers |= set(_bound_names(target.target))
        if any(n.value in derived for n in ctx.walk(assign.value, cst.Name)):
            for target in assign.targets:
                derived |= set(_bound_names(target.target))
    for loop in ctx.walk(forward, cst.For):
        bound = loop.iter
        if isinstance(bound, cst.Call) and isinstance(bound.func, cst.Name) and bound.func.value == "range":
            if _host_number_of(ctx, bound, derived, host_numbers):
                return True
    return False


def _host_number_of(ctx: FileContext, expr: cst.BaseExpression, derived: set[str], host_numbers: set[str]) -> bool:
    """Whether ``expr`` is a Python number read from the inputs: ``max(lengths.tolist())``,
    ``steps.item()``, or a name already known to be one."""
    names = {n.value for n in ctx.walk(expr, cst.Name)}
    if names & host_numbers:
        return True
    if not names & derived:
        return False
    for call in ctx.walk(expr, cst.Call):
        func = call.func
        if (isinstance(func, cst.Attribute) and func.attr.value in _HOST_NUMBER_METHODS) or (
            isinstance(func, cst.Name) and func.value in _HOST_NUMBER_FUNCTIONS
        ):
            return True
    return False


def _bound_names(target: cst.BaseExpression) -> list[str]:
    """The plain names an assignment target binds (``a``, ``a, (b, *c)``), not ``self.x`` / ``x[i]``."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, cst.StarredElement):
        return _bound_names(target.value)
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _bound_names(element.value)]
    return []


def _packs_with_returned_lengths(ctx: FileContext, model: TrainedModel) -> bool:
    packs = ctx.calls(_PACK_PADDED_SEQUENCE)
    if not packs:
        return False
    for assign in ctx.nodes(cst.Assign):
        value = assign.value
        if not (isinstance(value, cst.Call) and dotted_name(value.func) in model.spellings):
            continue
        returned = {
            name
            for target in assign.targets
            if isinstance(target.target, (cst.Tuple, cst.List))
            for name in _bound_names(target.target)
        }
        scope = ctx.scope_of.get(assign)
        for call in packs:
            lengths = ctx.argument(call, "lengths", 1)
            if isinstance(lengths, cst.Name) and lengths.value in returned and ctx.scope_of.get(call) is scope:
                return True
    return False


def _double_backward(ctx: FileContext) -> bool:
    """Gradients of gradients (WGAN-GP penalties, MAML): compiled graphs do not support them."""
    if ctx.calls("torch.autograd.grad", "torch.func.grad", "torch.func.functional_call"):
        return True
    return any(
        arg.keyword is not None and arg.keyword.value == "create_graph" for call in ctx.nodes(cst.Call) for arg in call.args
    )


def _uses_library(ctx: FileContext, *modules: str) -> bool:
    return any(target.split(".")[0] in modules for target in ctx.imports.aliases.values())


def hf_trainer_calls(ctx: FileContext) -> list[cst.Call]:
    """``Trainer(...)`` of transformers or TRL, or of a class of this file that subclasses one."""
    def is_trainer(qualname: str) -> bool:
        return qualname.split(".")[0] in ("transformers", "trl") and qualname.endswith("Trainer")

    local = {
        c.name.value
        for c in ctx.nodes(cst.ClassDef)
        if any(is_trainer(ctx.qualname(base.value) or "") for base in c.bases)
    }
    found = []
    for call in ctx.nodes(cst.Call):
        qualname = ctx.qualname(call.func) or ""
        if is_trainer(qualname) or (isinstance(call.func, cst.Name) and call.func.value in local):
            found.append(call)
    return found


def _trainer_trains(ctx: FileContext) -> bool:
    """A transformers / TRL ``Trainer`` of the file whose ``train()`` is called."""
    trainers = hf_trainer_calls(ctx)
    for call in ctx.method_calls("train"):
        receiver = call.func.value  # type: ignore[attr-defined]
        if receiver in trainers or ctx.bound_call(receiver) in trainers:
            return True
        if "trainer" in (dotted_name(receiver) or "").split(".")[-1].lower() and trainers:
            return True
    return False


def _quantized_loading(ctx: FileContext) -> bool:
    if ctx.calls("transformers.BitsAndBytesConfig", *_PEFT_WRAPPERS[1:3]):
        return True
    return any(
        arg.keyword is not None and arg.keyword.value in _QUANTIZED_LOAD
        for call in ctx.method_calls("from_pretrained")
        for arg in call.args
    )


# -- where ``model = torch.compile(model)`` can go ----------------------------------------------------
_BLOCKS = (cst.IndentedBlock, cst.Module)
_HAND_OVER_CALLS = _DATA_PARALLEL + _DISTRIBUTED_DATA_PARALLEL + _JIT + (TORCH_COMPILE, "deepspeed.initialize")


def _is_hand_over(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """``DDP(model)``, ``accelerator.prepare(model)``, ``torch.compile(model)``...: compile goes before."""
    value = _strip_same_module_methods(value)
    if not isinstance(value, cst.Call):
        return False
    return (ctx.qualname(value.func) or "") in _HAND_OVER_CALLS or _framework_hand_over(ctx, value) is not None


def _mentions(ctx: FileContext, name: str, scope: cst.CSTNode) -> list[cst.CSTNode]:
    """Reads and writes of ``name`` (``model``, ``self.model``) in ``scope`` itself, in source order."""
    if "." in name:
        return [a for a in ctx.walk(scope, cst.Attribute) if dotted_name(a) == name and ctx.scope_of.get(a) is scope]
    found: list[cst.CSTNode] = []
    for node in ctx.walk(scope, cst.Name):
        if node.value != name or ctx.scope_of.get(node) is not scope:
            continue
        parent = ctx.parent.get(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            continue
        if isinstance(parent, (cst.Arg, cst.Param)) and getattr(parent, "keyword", None) is node:
            continue
        if isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias)):
            continue
        found.append(node)
    return found


def _mention_role(ctx: FileContext, mention: cst.CSTNode, name: str) -> str:
    """"prepare" when ``mention`` gets the model ready (moves it, loads weights, sets attributes,
    rebinds it to a transformed model, calls a method for its effect), "read" when it only reads
    from it (``model.parameters()``, ``model.config``), "use" when it runs the model or hands it to
    something that keeps it (DDP, a framework, a training function)."""
    statement = ctx.statement_of(mention)
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and dotted_name(small.targets[0].target) == name:
            return "use" if _is_hand_over(ctx, small.value) else "prepare"
    parent = ctx.parent.get(mention)
    if not (isinstance(parent, cst.Attribute) and parent.value is mention):
        return "use"
    outer: cst.CSTNode = parent
    while isinstance(ctx.parent.get(outer), cst.Attribute):
        outer = ctx.parent[outer]
    holder = ctx.parent.get(outer)
    if isinstance(holder, cst.AssignTarget):
        return "prepare"  # ``model.config.use_cache = False``
    if isinstance(holder, cst.Call) and holder.func is outer:
        if isinstance(outer, cst.Attribute) and outer.attr.value in ("forward", "generate"):
            return "use"
        return "prepare" if isinstance(ctx.parent.get(holder), cst.Expr) else "read"
    return "read"


def _training_start(ctx: FileContext, scope: cst.CSTNode, after: int) -> cst.CSTNode | None:
    """The first training loop of ``scope`` after position ``after``, or call of a same-file function
    that holds one."""
    starts: list[cst.CSTNode] = []
    training_functions = {
        f.name.value
        for loop in ctx.loops.training_loops
        for f in [ctx.enclosing(loop.node, cst.FunctionDef)]
        if isinstance(f, cst.FunctionDef)
    }
    for loop in ctx.loops.training_loops:
        if ctx.scope_of.get(loop.node) is scope:
            starts.append(loop.node)
    for call in ctx.walk(scope, cst.Call):
        if isinstance(call.func, cst.Name) and call.func.value in training_functions and ctx.scope_of.get(call) is scope:
            starts.append(call)
    later = [s for s in starts if ctx.order[s] > after]
    return min(later, key=ctx.order.__getitem__) if later else None


def _outermost_loop(ctx: FileContext, node: cst.CSTNode, scope: cst.CSTNode, start: cst.CSTNode) -> cst.CSTNode:
    """``node``, or the outermost loop of ``scope`` around it that does not also hold ``start``
    (a model built per fold of a cross-validation loop is prepared and trained per fold)."""
    found = node
    for ancestor in ctx.ancestors(node):
        if ancestor is scope or ctx.is_descendant(start, ancestor):
            break
        if isinstance(ancestor, (cst.For, cst.While)):
            found = ancestor
    return found


def compile_anchor(ctx: FileContext, build: ModelBuild) -> cst.BaseStatement | None:
    """The statement after which compiling the model is right: after it is built, moved, loaded
    and otherwise prepared, before it is run, wrapped (DDP, a framework) or trained, and outside
    any loop. None when no such statement exists (built in a loop, prepared across scopes)."""
    name, scope = build.name, ctx.scope_of.get(build.binding)
    start = ctx.statement_of(build.binding)
    if not name or scope is None or start is None:
        return None
    after = ctx.end_order[start]
    mentions = [m for m in _mentions(ctx, name, scope) if ctx.order[m] > after]
    use = _training_start(ctx, scope, after)
    for mention in mentions:
        if use is not None and ctx.order[mention] >= ctx.order[use]:
            break
        if _mention_role(ctx, mention, name) == "use":
            use = mention
            break
    # Preparing the model inside the loop that runs it (``model.train()`` each epoch) is not setup.
    cutoff = ctx.order[_outermost_loop(ctx, use, scope, start)] if use is not None else None
    last: cst.CSTNode = start
    for mention in mentions:
        if cutoff is not None and ctx.order[mention] >= cutoff:
            break
        if _mention_role(ctx, mention, name) == "prepare":
            last = ctx.statement_of(mention) or last
    anchor = _statement_in_common_block(ctx, last, use)
    if anchor is None or _outermost_loop(ctx, anchor, scope, start) is not anchor:
        return None
    return anchor


def _statement_in_common_block(ctx: FileContext, last: cst.CSTNode, use: cst.CSTNode | None) -> cst.BaseStatement | None:
    """The statement holding ``last`` that sits in the innermost block also holding ``use``."""
    child: cst.CSTNode = last
    for ancestor in ctx.ancestors(last):
        if isinstance(ancestor, _BLOCKS) and (use is None or ctx.is_descendant(use, ancestor)):
            return child if isinstance(child, cst.BaseStatement) else None
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return None
        child = ancestor
    return None


def _reaches_into_module(ctx: FileContext, name: str, after: int) -> bool:
    """State dicts saved or loaded, or attributes set on ``name`` after ``after``: a wrapper from
    ``torch.compile`` would prefix the keys with ``_orig_mod.`` or take the attribute itself."""
    for call in ctx.method_calls("state_dict", "load_state_dict"):
        receiver = dotted_name(call.func.value) or ""  # type: ignore[attr-defined]
        last = receiver.removesuffix(".module").split(".")[-1]
        if not last or ctx.loops.is_optimizer(last) or re.search(r"sched|scaler|ema|optim", last, re.IGNORECASE):
            continue
        return True
    for call in ctx.calls("torch.save"):
        if call.args and dotted_name(call.args[0].value) == name:
            return True
    for key, nodes in ctx.attribute_assignments.items():
        if key.startswith(name + ".") and any(ctx.order[n] > after for n in nodes):
            return True
    return False


# Where a model goes that decides compilation for it, or does not work with it: Accelerate's
# launcher config sets ``dynamo_backend``, DeepSpeed's config has its own compile section,
# TorchScript is another compiler, and ``nn.DataParallel`` replicas do not run compiled code.
_COMPILE_DECIDED_ELSEWHERE = frozenset({"accelerate", "deepspeed", "jit", "compile", "data_parallel"})


class NoTorchCompile(Rule):
    code = "ADV602"
    name = "no-torch-compile"
    summary = "A model trained on CUDA is never compiled with `torch.compile`."
    guide = COMPILE_GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        Eager PyTorch launches one kernel per operation and pays Python overhead for each.
        `torch.compile` captures the model's forward (and, through AOTAutograd, its backward)
        as graphs and lets TorchInductor fuse pointwise operations and normalisations into
        generated Triton kernels. The guide's *Using torch.compile* section: it "can optimize
        your code by adding a single line of code: `model = torch.compile(model)`", or
        `torch_compile=True` in `TrainingArguments` for the `Trainer`.

        The fix is unsafe: the first steps are slower while graphs compile, new input shapes
        recompile, and numerics can differ in the last bits. `torch.compile(model)` returns
        a wrapper whose `state_dict()` keys start with `_orig_mod.` and which takes attributes
        set on it itself; where the file saves or loads state dicts or sets attributes on the
        model after the compile point, the fix uses the in-place `model.compile()` instead,
        which keeps keys and identity. The compile goes after the model is built, moved,
        loaded and wrapped in PEFT, and before `DistributedDataParallel` wraps it.
    """
    example = """
        model = Net().to("cuda")
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        for x, y in loader:
            loss = F.cross_entropy(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    use_instead = """
        model = Net().to("cuda")
        model = torch.compile(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        for x, y in loader:
            ...
    """
    silent_when = """
        - the file leaves a compile commented out (`# model = torch.compile(model)`): the
          author tried it and decided;
        - the file compiles anything already (`torch.compile` of the model, of a submodule or a
          function, `@torch.compile`, `model.compile()`, `torch._dynamo`): a choice was made;
        - the model is not built in the file (it arrives from a caller or a factory of another
          module), is not stepped by an optimizer in a training loop, or stays on the CPU (no
          `.to(device)` / `.cuda()` / `device_map`, or only `.cpu()`), or the file shows no CUDA;
        - the model is handed to Accelerate (`accelerator.prepare`: `accelerate launch` and its
          config choose `dynamo_backend`), DeepSpeed (its config has a compile section), or
          TorchScript (`torch.jit.script` / `trace`);
        - Lightning's `Trainer` runs the loop (what `training_step` calls decides what a
          compile would reach), or the model is loaded in 8/4 bit, or the file uses Unsloth
          (which compiles itself);
        - the file takes gradients of gradients (`torch.autograd.grad`, `create_graph=True`:
          WGAN-GP penalties, MAML), which compiled graphs do not support;
        - the model steps through the batch's longest sequence in Python (a captioning or
          seq2seq decoder): its `forward` in the file loops over `range(max(lengths.tolist()))`,
          `range(steps.item())` or `range(int(...))` of its inputs, or it returns the lengths
          the file passes to `pack_padded_sequence`; Dynamo would recompile for nearly every batch;
        - `TrainingArguments` set `torch_compile` / `torch_compile_backend` / `torch_compile_mode`,
          come from the command line or unreadable `**kwargs`, train on the CPU, or use DeepSpeed.
    """
    valid = [
        Valid(
            """
            import torch
            model = Net().cuda()
            # model = torch.compile(model)  # recompiles on every new sequence length
            optimizer = torch.optim.AdamW(model.parameters(), fused=True)
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="compile left commented out: a decision",
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            model = torch.compile(model)
            optimizer = torch.optim.AdamW(model.parameters())
            for x, y in loader:
                loss = model(x.cuda()).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            if args.compile:
                model.compile()
            optimizer = torch.optim.AdamW(model.parameters())
            for x, y in loader:
                model(x).backward()
                optimizer.step()
            """,
            note="in-place compile, under a flag: a decision either way",
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            model.encoder = torch.compile(model.encoder)
            optimizer = torch.optim.AdamW(model.parameters())
            for x, y in loader:
                model(x).backward()
                optimizer.step()
            """,
            note="a compiled submodule is a decision",
        ),
        Valid(
            """
            import torch
            model = Net()
            optimizer = torch.optim.AdamW(model.parameters())
            for x, y in loader:
                model(x).backward()
                optimizer.step()
            """,
            note="CPU-only script",
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator()
            model = Net()
            optimizer = torch.optim.AdamW(model.parameters())
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for x, y in loader:
                accelerator.backward(model(x))
                optimizer.step()
            """,
            note="Accelerate: `accelerate launch` / its config can enable dynamo",
        ),
        Valid(
            """
            import torch
            import deepspeed
            model = Net().cuda()
            optimizer = torch.optim.AdamW(model.parameters())
            engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer)
            for x in loader:
                engine.backward(engine(x))
                optimizer.step()
            """,
            note="DeepSpeed owns the model",
        ),
        Valid(
            """
            import torch
            model = torch.jit.script(Net().cuda())
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x).backward()
                optimizer.step()
            """,
            note="TorchScript",
        ),
        Valid(
            """
            import torch
            critic = Critic().cuda()
            optimizer = torch.optim.Adam(critic.parameters())
            for real in loader:
                grads = torch.autograd.grad(critic(real).sum(), real, create_graph=True)[0]
                penalty = ((grads.norm(2, dim=1) - 1) ** 2).mean()
                penalty.backward()
                optimizer.step()
            """,
            note="double backward (gradient penalty) is not supported by compiled graphs",
        ),
        Valid(
            """
            import torch
            def train(model, loader):
                optimizer = torch.optim.AdamW(model.parameters())
                for x in loader:
                    model(x.cuda()).backward()
                    optimizer.step()
            """,
            note="the model comes from elsewhere",
        ),
        Valid(
            """
            from transformers import HfArgumentParser, Trainer, TrainingArguments
            parser = HfArgumentParser(TrainingArguments)
            (training_args,) = parser.parse_args_into_dataclasses()
            Trainer(model=model, args=training_args).train()
            """,
            note="arguments from the command line: `--torch_compile` may be passed",
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", torch_compile_backend="inductor")
            Trainer(model=model, args=args).train()
            """,
            note="a backend implies torch_compile",
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", bf16=True, **extra)
            Trainer(model=model, args=args).train()
            """,
            note="unknown **kwargs may carry torch_compile",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("m", quantization_config=BitsAndBytesConfig(load_in_4bit=True))
            args = TrainingArguments("out", bf16=True)
            Trainer(model=model, args=args).train()
            """,
            note="bitsandbytes-quantized model",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", bf16=True)
            """,
            note="no Trainer trains with these arguments here",
        ),
        Valid(
            """
            import torch
            from torch import nn

            class Decoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.cell = nn.LSTMCell(512, 512)
                    self.fc = nn.Linear(512, 10000)

                def forward(self, features, captions, lengths):
                    lengths, order = lengths.sort(descending=True)
                    decode_lengths = (lengths - 1).tolist()
                    h, c = features, features
                    for t in range(max(decode_lengths)):
                        h, c = self.cell(captions[:, t], (h, c))
                    return self.fc(h), decode_lengths

            decoder = Decoder().cuda()
            optimizer = torch.optim.Adam(decoder.parameters())
            for feats, caps, lens in loader:
                scores, _ = decoder(feats.cuda(), caps.cuda(), lens.cuda())
                scores.sum().backward()
                optimizer.step()
            """,
            note="a step loop as long as the batch's longest caption: recompiles for nearly every batch",
        ),
        Valid(
            """
            import torch
            from torch.nn.utils.rnn import pack_padded_sequence
            from models import DecoderWithAttention
            decoder = DecoderWithAttention(512, 512, 10000).cuda()
            optimizer = torch.optim.Adam(decoder.parameters())
            for imgs, caps, caplens in loader:
                scores, caps_sorted, decode_lengths = decoder(imgs.cuda(), caps.cuda(), caplens.cuda())
                scores, _ = pack_padded_sequence(scores, decode_lengths, batch_first=True)
                criterion(scores, caps_sorted).backward()
                optimizer.step()
            """,
            note="the model returns the lengths its output is packed with: a variable-length step decoder",
        ),
    ]
    invalid = [
        Invalid(
            """
            def batches():
                import torch
                return [torch.randn(8, 4) for _ in range(10)]

            def train():
                from torch import nn, optim
                model = nn.Linear(4, 4).to("cuda")
                opt = optim.SGD(model.parameters(), lr=0.1)
                for x in batches():
                    model(x.cuda()).sum().backward()
                    opt.step()
                    opt.zero_grad()
            """,
            fixed="""
            import torch
            def batches():
                import torch
                return [torch.randn(8, 4) for _ in range(10)]

            def train():
                from torch import nn, optim
                model = nn.Linear(4, 4).to("cuda")
                model = torch.compile(model)
                opt = optim.SGD(model.parameters(), lr=0.1)
                for x in batches():
                    model(x.cuda()).sum().backward()
                    opt.step()
                    opt.zero_grad()
            """,
            unsafe=True,
            note="`import torch` inside another function does not reach the fix: imported at the top (tests/test_fuzz.py)",
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Stack(nn.Module):
                def __init__(self, n_layers):
                    super().__init__()
                    self.n_layers = n_layers
                    self.layers = nn.ModuleList(nn.Linear(256, 256) for _ in range(n_layers))

                def forward(self, x):
                    n = int(self.n_layers)
                    for i in range(n):
                        x = self.layers[i](x)
                    return x

            model = Stack(4).cuda()
            optimizer = torch.optim.Adam(model.parameters())
            for x in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            from torch import nn

            class Stack(nn.Module):
                def __init__(self, n_layers):
                    super().__init__()
                    self.n_layers = n_layers
                    self.layers = nn.ModuleList(nn.Linear(256, 256) for _ in range(n_layers))

                def forward(self, x):
                    n = int(self.n_layers)
                    for i in range(n):
                        x = self.layers[i](x)
                    return x

            model = Stack(4).cuda()
            model = torch.compile(model)
            optimizer = torch.optim.Adam(model.parameters())
            for x in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
            note="a loop over a fixed number of layers does not depend on the batch",
        ),
        Invalid(
            """
            import torch
            from models import Net
            model = Net().to("cuda")
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            fixed="""
            import torch
            from models import Net
            model = Net().to("cuda")
            model = torch.compile(model)
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch as T
            from torch.nn.parallel import DistributedDataParallel as DDP
            from .resnet import ResNet

            def main(rank):
                T.cuda.set_device(rank)
                net = ResNet()
                if args.resume:
                    net.load_state_dict(T.load(args.resume))
                net.to(rank)
                params = [p for p in net.parameters() if p.requires_grad]
                net = DDP(net, device_ids=[rank])
                opt = T.optim.SGD(params, lr=0.1)
                for x, y in loader:
                    net(x).backward()
                    opt.step()
            """,
            fixed="""
            import torch as T
            from torch.nn.parallel import DistributedDataParallel as DDP
            from .resnet import ResNet

            def main(rank):
                T.cuda.set_device(rank)
                net = ResNet()
                if args.resume:
                    net.load_state_dict(T.load(args.resume))
                net.to(rank)
                net.compile()
                params = [p for p in net.parameters() if p.requires_grad]
                net = DDP(net, device_ids=[rank])
                opt = T.optim.SGD(params, lr=0.1)
                for x, y in loader:
                    net(x).backward()
                    opt.step()
            """,
            note="after weights and device, before DDP; state dicts in play: in place",
        ),
        Invalid(
            """
            import torch
            from torchvision import models
            device = torch.device("cuda")
            model = models.resnet50(weights=None)
            model.to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            train(model, optimizer)
            def train(model, optimizer):
                for x, y in loader:
                    model(x).backward()
                    optimizer.step()
            """,
            fixed="""
            import torch
            from torchvision import models
            device = torch.device("cuda")
            model = models.resnet50(weights=None)
            model.to(device)
            model = torch.compile(model)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            train(model, optimizer)
            def train(model, optimizer):
                for x, y in loader:
                    model(x).backward()
                    optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch
            from nets import Discriminator, Generator
            generator = Generator().cuda()
            discriminator = Discriminator().cuda()
            opt_g = torch.optim.Adam(generator.parameters())
            opt_d = torch.optim.Adam(discriminator.parameters())
            for real in loader:
                discriminator(real).mean().backward()
                opt_d.step()
                discriminator(generator(z)).mean().backward()
                opt_g.step()
            """,
            count=2,
            fixed="""
            import torch
            from nets import Discriminator, Generator
            generator = Generator().cuda()
            generator = torch.compile(generator)
            discriminator = Discriminator().cuda()
            discriminator = torch.compile(discriminator)
            opt_g = torch.optim.Adam(generator.parameters())
            opt_d = torch.optim.Adam(discriminator.parameters())
            for real in loader:
                discriminator(real).mean().backward()
                opt_d.step()
                discriminator(generator(z)).mean().backward()
                opt_g.step()
            """,
            note="one finding per model",
        ),
        Invalid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments(output_dir="out", bf16=True)
            trainer = Trainer(model=model, args=args, train_dataset=ds)
            trainer.train()
            """,
            fixed="""
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments(output_dir="out", bf16=True, torch_compile=True)
            trainer = Trainer(model=model, args=args, train_dataset=ds)
            trainer.train()
            """,
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if compiles_something(ctx) or _uses_library(ctx, "unsloth") or _compile_commented_out(ctx):
            return
        yield from self._training_arguments(ctx)
        if _double_backward(ctx):
            return
        for model in cuda_trained_models(ctx):
            if not model.on_cuda or model.quantized or model.handed_to & _COMPILE_DECIDED_ELSEWHERE:
                continue
            if not called_directly(ctx, model) or steps_over_data_lengths(ctx, model):
                continue
            build = min(model.builds, key=lambda b: ctx.order[b.binding])
            name = build.name or model.name
            anchor = compile_anchor(ctx, build)
            in_place = _reaches_into_module(ctx, name, ctx.end_order[anchor] if anchor else ctx.order[build.binding])
            if in_place:
                advice = f"compile it in place with `{name}.compile()` (keeps its `state_dict()` keys)"
            else:
                advice = f"add `{name} = torch.compile({name})`"
            message = (
                f"`{name}` is trained on CUDA without `torch.compile`: it runs eagerly, one kernel per "
                f"operation; {advice} once it is built and moved (guide: {COMPILE_GUIDE})"
            )
            fix = self._fix(ctx, name, anchor, in_place) if anchor is not None else None
            yield self.report(build.call, message, fix)

    def _fix(self, ctx: FileContext, name: str, anchor: cst.BaseStatement, in_place: bool):
        if in_place:
            statement = cst.parse_statement(f"{name}.compile()\n")
            description = f"Compile `{name}` in place once it is built and moved"
            imports: tuple[str, ...] = ()
        else:
            compile_fn, imports = ctx.reference(TORCH_COMPILE, anchor)
            statement = cst.parse_statement(f"{name} = {ctx.code(compile_fn)}({name})\n")
            description = f"Insert `{name} = torch.compile({name})` once it is built and moved"
        return self.fix(description, Edit(anchor, cst.FlattenSentinel([anchor, statement])), imports=imports)

    def _training_arguments(self, ctx: FileContext) -> Iterator[Finding]:
        if not _trainer_trains(ctx) or _quantized_loading(ctx):
            return
        if any(key.rsplit(".", 1)[-1].startswith("torch_compile") for key in ctx.attribute_assignments):
            return
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            if any(AdamNotFused._maybe_true(ctx, call, flag) for flag in ("use_cpu", "no_cuda")):
                continue
            settings = ("torch_compile", "torch_compile_backend", "torch_compile_mode", "deepspeed")
            if any(ctx.argument(call, keyword) is not MISSING for keyword in settings):
                continue
            callee = ctx.code(call.func).split(".")[-1]
            message = (
                f"`{callee}` without `torch_compile=True`: the Trainer runs the model eagerly; "
                f"set `torch_compile=True` (guide: {COMPILE_GUIDE})"
            )
            fix = self.fix("Set `torch_compile=True`", Edit(call, set_keyword(call, "torch_compile", "True")))
            yield self.report(call, message, fix)


# -- ADV605: conv nets and the cuDNN autotuner --------------------------------------------------------
_CONV_LAYERS = frozenset(
    f"torch.nn.{layer}"
    for layer in (
        "Conv2d", "Conv3d", "ConvTranspose2d", "ConvTranspose3d",
        "LazyConv2d", "LazyConv3d", "LazyConvTranspose2d", "LazyConvTranspose3d",
    )
)
# Layers of models whose inputs usually vary in length from batch to batch (tokens, audio frames):
# the autotuner would benchmark again for every new shape.
_SEQUENCE_LAYERS = frozenset(
    f"torch.nn.{layer}"
    for layer in ("Embedding", "EmbeddingBag", "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell")
)
_CNN_NAME = re.compile(
    r"resnet|resnext|efficientnet|convnext|regnet|mobilenet|densenet|vgg|alexnet|inception|googlenet|"
    r"xception|shufflenet|squeezenet|mnasnet|dla|dpn|ghostnet|mixnet|hrnet|darknet|nfnet|rexnet|senet|"
    r"res2net|resnest|repvgg|cspnet|unet|r3d|r2plus1d|mc3_|s3d|cnn|convnet",
    re.IGNORECASE,
)
_NOT_CNN_NAME = re.compile(
    r"vit|deit|swin|beit|mixer|former|coat|levit|xcit|cait|eva|mvit|detr|rcnn|retina|ssd|fcos|yolo|"
    r"text|sentence|seq|word|char|token|audio|speech|wav|lstm|gru|rnn",
    re.IGNORECASE,
)
# Detection models (multi-scale training, images resized per batch) by the name of their class
# (timm's and torchvision's ``darknet53`` / ``cspdarknet53`` are classifiers: not asked).
_DETECTION_NAME = re.compile(r"darknet|yolo|rcnn|retina|ssd|fcos|detr|detector", re.IGNORECASE)
# Segmentation models: trained on the dataset's image sizes unless the file resizes or crops to one.
_SEGMENTATION_NAME = re.compile(r"unet|segnet|deeplab|pspnet|linknet|seg(?!uen)|fcn", re.IGNORECASE)
# Transforms that give every image one size: a crop of a fixed size, a resize to a (height, width).
_FIXED_SIZE_TRANSFORMS = frozenset({"Resize", "CenterCrop", "RandomCrop", "RandomResizedCrop", "RandomSizedCrop"})
# ``# cudnn.benchmark = True  # faster, but more memory`` left commented out: a choice made.
_CUDNN_SETTING_COMMENT = re.compile(r"cudnn\.(benchmark|deterministic)\b|\bbenchmark\s*=\s*(True|False)\b")
CUDNN_BENCHMARK = "torch.backends.cudnn.benchmark"
# ``# model = torch.compile(model)`` left commented out: the author tried it and decided.
_COMPILE_COMMENT = re.compile(r"\btorch\.compile\(|\.compile\(\)|\btorch_compile\s*=")


def _compile_commented_out(ctx: FileContext) -> bool:
    return bool(ctx.comments_matching(_COMPILE_COMMENT))


def _cnn_name(text: str) -> bool:
    return bool(_CNN_NAME.search(text)) and not _NOT_CNN_NAME.search(text)


def fixed_input_size(ctx: FileContext) -> bool:
    """Whether the file resizes or crops its images to one size: ``Resize((256, 256))``,
    ``RandomCrop(224)``, albumentations' ``A.Resize(256, 256)`` (torchvision's ``Resize(256)``
    only fixes the shorter side)."""
    for call in ctx.nodes(cst.Call):
        name = (dotted_name(call.func) or "").rsplit(".", 1)[-1]
        if name not in _FIXED_SIZE_TRANSFORMS:
            continue
        sizes = [ctx.values.value_of(arg.value) for arg in call.args[:2] if arg.keyword is None]
        if name == "Resize":
            fixed = len(sizes) == 2 or (len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) and len(sizes[0]) == 2)
        else:
            fixed = bool(sizes)
        flat = [v for size in sizes for v in (size if isinstance(size, (tuple, list)) else (size,))]
        if fixed and all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
            return True
    return False


def _variable_size_model(ctx: FileContext, class_name: str) -> bool:
    """A detection model, or a segmentation model fed the dataset's own image sizes."""
    if _DETECTION_NAME.search(class_name):
        return True
    return bool(_SEGMENTATION_NAME.search(class_name)) and not fixed_input_size(ctx)


def conv_net(ctx: FileContext, build: ModelBuild) -> bool:
    """Whether the model ``build`` makes is a convolutional net with fixed-size inputs: 2-D/3-D
    convolutions (its own layers, a torchvision / timm CNN, a class named like one), and no
    embedding or recurrent layers (sequence models, whose input lengths vary)."""
    call = build.call
    if build.kind == "torchvision":
        qualname = ctx.qualname(call.func) or ""
        if ".detection." in qualname or ".segmentation." in qualname or ".optical_flow." in qualname:
            return False  # variable image sizes
        return _cnn_name(qualname.rsplit(".", 1)[-1])
    if build.kind == "timm":
        name = ctx.argument(call, "model_name", 0)
        value = ctx.values.value_of(name) if isinstance(name, cst.BaseExpression) else None
        return isinstance(value, str) and _cnn_name(value)
    if build.kind == "imported":
        name = dotted_name(call.func) or ""
        return _cnn_name(name) and not _variable_size_model(ctx, name.rsplit(".", 1)[-1])
    if build.kind in ("local", "torch.nn"):
        found: set[str] = set()
        root: cst.CSTNode = call
        if build.kind == "local":
            if _variable_size_model(ctx, call.func.value):  # type: ignore[attr-defined]
                return False
            root = _local_module_classes(ctx)[call.func.value]  # type: ignore[attr-defined]
        _layers_under(ctx, root, found, set())
        return "conv" in found and "sequence" not in found
    return False


def _layers_under(ctx: FileContext, root: cst.CSTNode, found: set[str], seen: set[cst.CSTNode]) -> None:
    """Collect "conv" / "sequence" for the layers ``root`` builds, through the classes and helper
    functions of this file it calls (``conv_bn(...)``, ``BasicBlock(...)``) and its local base classes."""
    if root in seen:
        return
    seen.add(root)
    if isinstance(root, cst.ClassDef):
        for base in root.bases:
            local = dotted_name(base.value)
            classes = _local_module_classes(ctx)
            if local in classes:
                _layers_under(ctx, classes[local], found, seen)
    for call in ctx.walk(root, cst.Call):
        qualname = ctx.qualname(call.func) or ""
        if qualname in _CONV_LAYERS:
            found.add("conv")
        elif qualname in _SEQUENCE_LAYERS:
            found.add("sequence")
        elif qualname.startswith("torchvision.models.") or qualname in ("timm.create_model", "timm.models.create_model"):
            kind = "torchvision" if qualname.startswith("torchvision.") else "timm"
            if conv_net(ctx, ModelBuild(call, kind, "", call)):
                found.add("conv")
        elif isinstance(call.func, cst.Name):
            bindings = ctx.lookup(call.func.value, call)
            if len(bindings) == 1 and isinstance(bindings[0].node, (cst.ClassDef, cst.FunctionDef)):
                _layers_under(ctx, bindings[0].node, found, seen)


def cudnn_choice_made(ctx: FileContext) -> bool:
    """The file sets or reads ``cudnn.benchmark`` / ``cudnn.deterministic`` / ``cudnn.enabled``, asks
    for deterministic algorithms, or passes ``benchmark=`` / ``deterministic=`` to anything
    (Lightning's ``Trainer``, ``set_seed(..., deterministic=True)``)."""
    for node in ctx.nodes(cst.Attribute):
        qualname = ctx.qualname(node) or ""
        if qualname.startswith("torch.backends.cudnn.") and qualname.split(".")[3] in (
            "benchmark", "deterministic", "enabled", "flags",
        ):
            return True
    if ctx.calls("torch.use_deterministic_algorithms", "transformers.enable_full_determinism"):
        return True
    if ctx.comments_matching(_CUDNN_SETTING_COMMENT):
        return True
    return any(
        arg.keyword is not None and arg.keyword.value in ("benchmark", "deterministic", "cudnn_benchmark")
        for call in ctx.nodes(cst.Call)
        for arg in call.args
    )


def after_imports_anchor(ctx: FileContext) -> cst.SimpleStatementLine | None:
    """The last top-level import line before the module's first definition or block: a statement
    inserted after it runs once, on import, with the file's imports bound."""
    found = None
    for statement in ctx.module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            if all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body):
                found = statement
            continue
        if isinstance(statement, cst.Try) and all(
            isinstance(line, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in line.body)
            for line in statement.body.body
        ):
            continue  # ``try: import x`` / ``except ImportError:``
        break
    return found


def setting_after_imports(ctx: FileContext, qualname: str, value: str) -> tuple[Edit, tuple[str, ...]] | None:
    """The edit that sets ``qualname = value`` right after the file's imports, spelled with its
    import aliases, and the modules to import for it."""
    anchor = after_imports_anchor(ctx)
    if anchor is None:
        return None
    reference, imports = ctx.reference(qualname, anchor)
    statement = cst.parse_statement(f"{ctx.code(reference)} = {value}\n")
    statement = statement.with_changes(leading_lines=[cst.EmptyLine()])  # set apart from the imports
    return Edit(anchor, cst.FlattenSentinel([anchor, statement])), imports


class CudnnBenchmark(Rule):
    code = "ADV605"
    name = "cudnn-benchmark"
    summary = "A conv net is trained on CUDA without `torch.backends.cudnn.benchmark = True`."
    guide = CUDNN_GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        cuDNN has several algorithms for each convolution, and the fastest depends on the
        layer's shapes and the GPU. By default PyTorch picks one by heuristics. With
        `torch.backends.cudnn.benchmark = True` it times the candidates the first time it
        meets an input shape and caches the winner, which often speeds up convolutions
        noticeably for the rest of training. PyTorch's performance tuning guide recommends
        it for convolutional networks ("Enable cuDNN auto-tuner").

        The benefit assumes input shapes repeat: each new shape is benchmarked again, so
        models fed variable-length inputs (token sequences, audio) can get slower. This
        rule only looks at conv nets (2-D/3-D convolutions, no embedding or recurrent
        layers). The fix is unsafe: the chosen algorithms, and so the last bits of the
        results, may differ from run to run.
    """
    example = """
        import torch
        import torchvision

        model = torchvision.models.resnet50().cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    """
    use_instead = """
        import torch
        import torchvision

        torch.backends.cudnn.benchmark = True

        model = torchvision.models.resnet50().cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    """
    silent_when = """
        - the file decides about cuDNN already: it sets or reads `cudnn.benchmark`,
          `cudnn.deterministic` or `cudnn.enabled` (whatever value), calls
          `torch.use_deterministic_algorithms`, passes `benchmark=` / `deterministic=`
          (Lightning's `Trainer`, seeding helpers), or leaves such a setting commented out
          (`# cudnn.benchmark = True`);
        - no conv net is trained here on CUDA: CPU-only scripts, models only evaluated, models
          with 1-D convolutions only, or with embeddings or recurrent layers (variable-length
          inputs), transformers (ViT, Swin), models whose class is defined elsewhere with a
          name that does not say CNN;
        - the images vary in size: torchvision detection and segmentation models, classes named
          for detection (Darknet, YOLO, R-CNN, SSD, RetinaNet, DETR: multi-scale training), and
          segmentation models (UNet, DeepLab, `...Seg...`) in a file that neither resizes nor
          crops its images to one size (`Resize((256, 256))`, `RandomCrop(512)`);
        - Lightning's `Trainer` is built from unreadable arguments, runs on the CPU, or the
          model is driven by `LightningCLI` (trainer flags come from the config).
    """
    valid = [
        Valid(
            """
            import torch
            import torchvision
            torch.backends.cudnn.benchmark = True
            model = torchvision.models.resnet18().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
        ),
        Valid(
            """
            import torch
            import torchvision
            torch.backends.cudnn.deterministic = True
            model = torchvision.models.resnet18().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
            note="determinism chosen: benchmark would defeat it",
        ),
        Valid(
            """
            import torch
            import torchvision
            torch.backends.cudnn.deterministic = args.torch_deterministic
            model = torchvision.models.resnet18().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
            note="a choice on the command line",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class TextCNN(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(30000, 128)
                    self.conv = nn.Conv2d(1, 100, (3, 128))
            model = TextCNN().cuda()
            optimizer = torch.optim.Adam(model.parameters())
            for x, y in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
            note="token inputs: lengths vary between batches",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Mlp(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(784, 10)
            model = Mlp().cuda()
            optimizer = torch.optim.Adam(model.parameters())
            for x, y in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
            note="no convolutions",
        ),
        Valid(
            """
            import torch
            import torchvision
            model = torchvision.models.resnet18()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
            """,
            note="CPU-only script",
        ),
        Valid(
            """
            import torch
            import torchvision
            model = torchvision.models.detection.fasterrcnn_resnet50_fpn().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            for images, targets in loader:
                sum(model(images, targets).values()).backward()
                optimizer.step()
            """,
            note="detection models resize images to varying sizes",
        ),
        Valid(
            """
            import lightning as L
            from models import LitResNet
            trainer = L.Trainer(accelerator="gpu", deterministic=True)
            trainer.fit(LitResNet())
            """,
            note="Lightning determinism",
        ),
        Valid(
            """
            import torch
            from unet import UNet
            net = UNet(n_channels=3, n_classes=1).cuda()
            # cudnn.benchmark = True  # faster convolutions, but more memory
            optimizer = torch.optim.RMSprop(net.parameters(), lr=0.001)
            for imgs, masks in loader:
                criterion(net(imgs.cuda()), masks.cuda()).backward()
                optimizer.step()
            """,
            note="the setting left commented out: the author decided",
        ),
        Valid(
            """
            import torch
            from unet import UNet
            net = UNet(n_channels=3, n_classes=1).cuda()
            optimizer = torch.optim.RMSprop(net.parameters(), lr=0.001)
            for imgs, masks in loader:
                criterion(net(imgs.cuda()), masks.cuda()).backward()
                optimizer.step()
            """,
            note="a segmentation net fed the dataset's image sizes",
        ),
        Valid(
            """
            import torch
            from models import Darknet
            model = Darknet("config/yolov3.cfg").cuda()
            optimizer = torch.optim.Adam(model.parameters())
            for imgs, targets in loader:
                model(imgs.cuda(), targets.cuda()).backward()
                optimizer.step()
            """,
            note="a detector: multi-scale training changes the image size",
        ),
        Valid(
            """
            import torch
            import torchvision
            model = torchvision.models.resnet18().cuda()
            model.eval()
            with torch.inference_mode():
                for x in loader:
                    print(model(x.cuda()).argmax(1))
            """,
            note="inference only",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            import torchvision

            model = torchvision.models.resnet50().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            import torchvision

            torch.backends.cudnn.benchmark = True

            model = torchvision.models.resnet50().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
        ),
        Invalid(
            """
            \"\"\"Train a small CNN.\"\"\"
            import torch.nn as nn
            import torch.backends.cudnn as cudnn
            from torch import optim

            def conv_bn(cin, cout):
                return nn.Sequential(nn.Conv2d(cin, cout, 3), nn.BatchNorm2d(cout))

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.features = nn.Sequential(conv_bn(3, 32), conv_bn(32, 64))

            def main():
                model = Net().to("cuda")
                opt = optim.Adam(model.parameters())
                for x, y in loader:
                    model(x).sum().backward()
                    opt.step()
            """,
            fixed="""
            \"\"\"Train a small CNN.\"\"\"
            import torch.nn as nn
            import torch.backends.cudnn as cudnn
            from torch import optim

            cudnn.benchmark = True

            def conv_bn(cin, cout):
                return nn.Sequential(nn.Conv2d(cin, cout, 3), nn.BatchNorm2d(cout))

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.features = nn.Sequential(conv_bn(3, 32), conv_bn(32, 64))

            def main():
                model = Net().to("cuda")
                opt = optim.Adam(model.parameters())
                for x, y in loader:
                    model(x).sum().backward()
                    opt.step()
            """,
            note="convolutions through a helper; the file's `cudnn` alias",
        ),
        Invalid(
            """
            from torch import nn, optim
            generator = nn.Sequential(nn.ConvTranspose2d(100, 64, 4), nn.Tanh()).cuda()
            opt = optim.Adam(generator.parameters())
            for z in noise:
                generator(z).mean().backward()
                opt.step()
            """,
            fixed="""
            from torch import nn, optim
            import torch

            torch.backends.cudnn.benchmark = True
            generator = nn.Sequential(nn.ConvTranspose2d(100, 64, 4), nn.Tanh()).cuda()
            opt = optim.Adam(generator.parameters())
            for z in noise:
                generator(z).mean().backward()
                opt.step()
            """,
            note="`import torch` added for the setting",
        ),
        Invalid(
            """
            import lightning as L
            import torch.nn as nn

            class LitNet(L.LightningModule):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 16, 3)

            trainer = L.Trainer(accelerator="gpu", max_epochs=10)
            trainer.fit(LitNet(), datamodule=dm)
            """,
            fixed="""
            import lightning as L
            import torch.nn as nn

            class LitNet(L.LightningModule):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 16, 3)

            trainer = L.Trainer(accelerator="gpu", max_epochs=10, benchmark=True)
            trainer.fit(LitNet(), datamodule=dm)
            """,
        ),
        Invalid(
            """
            import torch
            import torchvision.transforms as T
            from unet import UNet
            transform = T.Compose([T.Resize((256, 256)), T.ToTensor()])
            net = UNet(n_channels=3, n_classes=1).cuda()
            optimizer = torch.optim.Adam(net.parameters())
            for imgs, masks in loader:
                criterion(net(imgs.cuda()), masks.cuda()).backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            import torchvision.transforms as T
            from unet import UNet

            torch.backends.cudnn.benchmark = True
            transform = T.Compose([T.Resize((256, 256)), T.ToTensor()])
            net = UNet(n_channels=3, n_classes=1).cuda()
            optimizer = torch.optim.Adam(net.parameters())
            for imgs, masks in loader:
                criterion(net(imgs.cuda()), masks.cuda()).backward()
                optimizer.step()
            """,
            note="a segmentation net on images resized to one size",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.uses_cuda or cudnn_choice_made(ctx):
            return
        for trainer in ctx.calls(LIGHTNING_TRAINER):
            model = self._lightning_conv_net(ctx, trainer)
            if model is not None:
                message = (
                    f"`{model}` is a conv net trained on the GPU by a Lightning `Trainer` without "
                    f"`benchmark=True`: cuDNN does not pick the fastest convolution algorithms; "
                    f"pass `benchmark=True` (guide: {CUDNN_GUIDE})"
                )
                fix = self.fix("Pass `benchmark=True`", Edit(trainer, set_keyword(trainer, "benchmark", "True")))
                yield self.report(trainer, message, fix)
                return
        for model in cuda_trained_models(ctx):
            build = next((b for b in model.builds if conv_net(ctx, b)), None)
            if build is None or not model.on_cuda:
                continue
            spelling = build.name or model.name
            message = (
                f"`{spelling}` is a conv net trained on CUDA without `torch.backends.cudnn.benchmark = True`: "
                f"cuDNN does not pick the fastest convolution algorithms; set it after the imports "
                f"(guide: {CUDNN_GUIDE})"
            )
            setting = setting_after_imports(ctx, CUDNN_BENCHMARK, "True")
            fix = None
            if setting is not None:
                edit, imports = setting
                fix = self.fix("Set `torch.backends.cudnn.benchmark = True` after the imports", edit, imports=imports)
            yield self.report(build.call, message, fix)
            return  # one global setting: one finding per file

    @staticmethod
    def _lightning_conv_net(ctx: FileContext, trainer: cst.Call) -> str | None:
        """The conv net a GPU Lightning ``Trainer`` fits, by its spelling."""
        accelerator = ctx.argument(trainer, "accelerator")
        if accelerator is None:
            return None
        # Lightning 1.x: ``Trainer(gpus=1)`` (also ``-1``, ``[0, 1]``, ``"0,1"``) trains on GPUs.
        gpus = ctx.argument(trainer, "gpus")
        gpus_value = ctx.values.value_of(gpus) if isinstance(gpus, cst.BaseExpression) else None
        asks_gpus = (type(gpus_value) is int and gpus_value != 0) or (
            isinstance(gpus_value, (str, list, tuple)) and gpus_value not in ("", "0", [], ())
        )
        if type(gpus_value) is int and gpus_value == 0:
            return None
        if accelerator is not MISSING and not asks_gpus:
            value = ctx.values.value_of(accelerator)
            if not isinstance(value, str) or value.split(":")[0] not in ("auto", "gpu", "cuda"):
                return None
        if any(ctx.argument(trainer, keyword) is None for keyword in ("benchmark", "deterministic")):
            return None  # could be passed through unreadable **kwargs
        for fit in ctx.method_calls("fit"):
            model = ctx.argument(fit, "model", 0)
            if not isinstance(model, cst.BaseExpression):
                continue
            if isinstance(model, cst.Call):
                kind = model_build_kind(ctx, model)
                builds = [ModelBuild(model, kind, "", model)] if kind else []
            else:
                spelling = dotted_name(model)
                if spelling is None:
                    continue
                trace = _Trace()
                _trace_model(ctx, spelling, fit, trace, None, 0)
                builds = trace.builds
            for build in builds:
                if conv_net(ctx, build):
                    return dotted_name(build.call.func) or ctx.code(model)
        return None


# -- ADV606: compiled modules that never run ------------------------------------------------------------
def _read_anywhere(ctx: FileContext, name: str) -> bool:
    return any(n.value == name and ctx.is_read(n) for n in ctx.nodes(cst.Name))


def _read_after(ctx: FileContext, spelling: str, scope: cst.CSTNode, after: int) -> bool:
    """Whether ``spelling`` (a name or ``self.model``) is read in ``scope`` after position ``after``."""
    if "." in spelling:
        return True  # an attribute outlives the statement
    for node in ctx.walk(scope, cst.Name):
        if node.value != spelling or not ctx.is_read(node):
            continue
        if ctx.scope_of.get(node) is scope and ctx.order[node] > after:
            return True
        if scope is ctx.module and ctx.scope_of.get(node) is not scope:
            bindings = ctx.lookup(spelling, node)
            if bindings and all(b.scope is ctx.module for b in bindings):
                return True  # a function of the module reads the global
    return False


def _is_built_model(ctx: FileContext, spelling: str, at: cst.CSTNode) -> bool:
    """Whether ``spelling`` is a model built in this file (an ``nn.Module``, not a function)."""
    trace = _Trace()
    _trace_model(ctx, spelling, at, trace, None, 0)
    return bool(trace.builds)


def _without_first_argument(call: cst.Call) -> list[cst.Arg]:
    args = [a for a in call.args if not (a.keyword is not None and a.keyword.value == "model")]
    if len(args) == len(call.args) and args and args[0].keyword is None and not args[0].star:
        args = args[1:]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return args


def _file_trains(ctx: FileContext) -> bool:
    return bool(ctx.loops.training_loops) or bool(hf_trainer_calls(ctx))


class CompileWithoutEffect(Rule):
    code = "ADV606"
    name = "compile-without-effect"
    summary = "`torch.compile(model)` whose compiled module is never what runs."
    guide = COMPILE_GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        `torch.compile(model)` does not change `model`: it returns a new, compiled module
        (an `OptimizedModule` wrapping the original) and only calls through that object run
        compiled code. The guide's one line is `model = torch.compile(model)`, with the
        assignment. A bare `torch.compile(model)` statement, a compiled module bound to a
        name nothing reads, or a compile that runs after a `Trainer` has already taken the
        eager module, pay for nothing: training runs eagerly.

        (`model.compile()`, without assignment, is the in-place form and is fine.)

        The fix assigns the result to the name that is trained; it is unsafe because the
        model then runs compiled (compile time, recompilations, `_orig_mod.` prefixed
        `state_dict()` keys).
    """
    example = """
        model = Net().cuda()
        torch.compile(model)
        for x, y in loader:
            loss_fn(model(x), y).backward()
    """
    use_instead = """
        model = Net().cuda()
        model = torch.compile(model)
        for x, y in loader:
            loss_fn(model(x), y).backward()
    """
    silent_when = """
        - the result is assigned and read (`model = torch.compile(model)`, `compiled(x)`),
          returned, passed on, or stored on an attribute;
        - `torch.compile` decorates a function, or the in-place `model.compile()` is used;
        - the compile comes after `accelerator.prepare(model)` or `fabric.setup(model)` and its
          result is what the loop calls (compiling the prepared module is supported);
        - a `Trainer` built before the compile is given the compiled model later.
    """
    valid = [
        Valid(
            """
            import torch
            model = Net().cuda()
            model = torch.compile(model, mode="max-autotune")
            for x in loader:
                model(x).backward()
            """,
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            model.compile()
            for x in loader:
                model(x).backward()
            """,
            note="in-place compile",
        ),
        Valid(
            """
            import torch

            @torch.compile
            def train_step(model, x):
                return model(x).sum()
            """,
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            compiled = torch.compile(model)
            for x in loader:
                compiled(x).backward()
            """,
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator()
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            model = torch.compile(model)
            for x in loader:
                accelerator.backward(model(x))
                optimizer.step()
            """,
            note="the prepared model is compiled and that is what runs",
        ),
        Valid(
            """
            import torch
            from transformers import Trainer
            model = torch.compile(model)
            trainer = Trainer(model=model, args=args)
            trainer.train()
            """,
        ),
        Valid(
            """
            import torch
            def build(cfg):
                return torch.compile(Net(cfg))
            """,
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            model = Net().cuda()
            torch.compile(model)
            for x in loader:
                model(x).backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            model = Net().cuda()
            model = torch.compile(model)
            for x in loader:
                model(x).backward()
                optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch
            model = Net().cuda()
            compiled_model = torch.compile(model)
            for x in loader:
                model(x).backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            model = Net().cuda()
            model = torch.compile(model)
            for x in loader:
                model(x).backward()
                optimizer.step()
            """,
            note="the compiled module is never used",
        ),
        Invalid(
            """
            import torch
            from transformers import Trainer, TrainingArguments
            trainer = Trainer(model=model, args=TrainingArguments("out"))
            model = torch.compile(model)
            trainer.train()
            """,
            fixed=None,
            note="the Trainer keeps the eager module; moving the compile is left to the author",
        ),
        Invalid(
            """
            import torch
            def setup(model):
                torch.compile(model)
            """,
            fixed=None,
            note="rebinding a parameter would not reach the caller: advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(TORCH_COMPILE):
            parent = ctx.parent.get(call)
            argument = _first_argument(ctx, call, "model")
            spelling = dotted_name(argument) if argument is not None else None
            shown = f"torch.compile({spelling})" if spelling else "torch.compile(...)"
            if isinstance(parent, cst.Expr):
                yield self._discarded(ctx, call, parent, spelling, shown)
            elif isinstance(parent, cst.Assign) and len(parent.targets) == 1:
                target = parent.targets[0].target
                if isinstance(target, cst.Name) and not _read_anywhere(ctx, target.value) and _file_trains(ctx):
                    yield self._unused(ctx, call, target, spelling, shown)
                elif isinstance(target, cst.Name) and spelling == target.value:
                    trainer = self._trainer_before(ctx, call, spelling)
                    if trainer is not None:
                        message = (
                            f"`{spelling}` is compiled after `{ctx.code(trainer.func)}(...)` took the eager module: "
                            f"the Trainer trains the uncompiled model; compile before building the Trainer, or "
                            f"set `torch_compile=True` in its arguments (guide: {COMPILE_GUIDE})"
                        )
                        yield self.report(call, message)

    def _discarded(self, ctx: FileContext, call: cst.Call, expr: cst.Expr, spelling: str | None, shown: str) -> Finding:
        message = (
            f"`{shown}` discards its result: compiling returns a new module and leaves the original eager"
            + (f"; write `{spelling} = {shown}`" if spelling else "; keep the result and run it")
            + f" (guide: {COMPILE_GUIDE})"
        )
        fix = None
        statement = ctx.statement_of(call)
        scope = ctx.scope_of.get(call)
        if spelling and statement is not None and scope is not None and _read_after(
            ctx, spelling, scope, ctx.end_order[statement]
        ):
            if _reaches_into_module(ctx, spelling, ctx.end_order[statement]) and _is_built_model(ctx, spelling, call):
                # ``model.compile(...)`` compiles in place and keeps the state_dict keys the file relies on.
                in_place = cst.Call(
                    func=cst.Attribute(value=cst.parse_expression(spelling), attr=cst.Name("compile")),
                    args=_without_first_argument(call),
                )
                fix = self.fix(f"Compile `{spelling}` in place", Edit(expr, expr.with_changes(value=in_place)))
            else:
                assign = cst.Assign(
                    targets=[cst.AssignTarget(target=cst.parse_expression(spelling))],
                    value=call,
                    semicolon=expr.semicolon,
                )
                fix = self.fix(f"Assign the result: `{spelling} = {shown}`", Edit(expr, assign))
        return self.report(call, message, fix)

    def _unused(self, ctx: FileContext, call: cst.Call, target: cst.Name, spelling: str | None, shown: str) -> Finding:
        message = (
            f"`{target.value} = {shown}` is never used: the eager module is what runs; "
            + (f"write `{spelling} = {shown}`" if spelling else f"run `{target.value}`")
            + f" (guide: {COMPILE_GUIDE})"
        )
        fix = None
        statement = ctx.statement_of(call)
        scope = ctx.scope_of.get(call)
        if spelling and statement is not None and scope is not None and _read_after(
            ctx, spelling, scope, ctx.end_order[statement]
        ):
            fix = self.fix(f"Bind the compiled module to `{spelling}`", Edit(target, cst.parse_expression(spelling)))
        return self.report(call, message, fix)

    @staticmethod
    def _trainer_before(ctx: FileContext, call: cst.Call, spelling: str) -> cst.Call | None:
        """An HF ``Trainer`` of the same scope, built before ``call`` with ``model=spelling``, that is
        not given the compiled model afterwards."""
        scope = ctx.scope_of.get(call)
        before, after = None, False
        for trainer in hf_trainer_calls(ctx):
            if ctx.scope_of.get(trainer) is not scope:
                continue
            model = ctx.argument(trainer, "model", 0)
            if not isinstance(model, cst.BaseExpression) or dotted_name(model) != spelling:
                continue
            if ctx.order[trainer] < ctx.order[call]:
                before = trainer
            else:
                after = True
        if before is None or after:
            return None
        for key, nodes in ctx.attribute_assignments.items():
            if key.rsplit(".", 1)[-1] in ("model", "model_wrapped") and any(ctx.order[n] > ctx.order[call] for n in nodes):
                return None  # ``trainer.model = model``
        return before
