"""Models: where a model is built (a class of the file or of its project, torchvision, timm,
transformers), whether an optimizer stepped in a training loop trains it, where it is placed
(through the device facts), what it is handed to (Accelerate, Fabric, DeepSpeed, DDP,
``torch.compile``, TorchScript), and what it is made of (a conv net, a sequence model).

``trained_models`` is the one answer to "which models does this file train, and on a GPU?":
a model is *trained* when an optimizer of a training loop steps its parameters
(``optimizer = AdamW(model.parameters())``; nanoGPT's ``model.configure_optimizers()``), and
is followed back through names, ``.to(device)`` chains, factory functions of the file,
wrappers (DDP, PEFT, compile) and framework hand-overs to the call that builds it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from advisor.apis import ACCELERATOR, DATA_PARALLEL, DISTRIBUTED_DATA_PARALLEL, FABRIC
from advisor.context import MISSING, FileContext
from advisor.facts.branches import calls_of, exclusive_branches
from advisor.facts.devices import Where, join
from advisor.facts.loaders import defining_class, local_class
from advisor.names import dotted_name

if TYPE_CHECKING:
    from advisor.model_sizes import ModelSize

PARAMS_POSITION = 0
# What a module defining an ``nn.Module`` class must say (a text test before parsing it).
_MODULE_TEXT = re.compile(rb"Module")
_PARALLEL_TEXT = re.compile(rb"DataParallel")


def _placements(ctx: FileContext, owner: str, scope_node: cst.CSTNode) -> set[Where]:
    """Where ``owner`` (``model``) is moved: ``.cpu()``, ``.cuda()``, ``.to(x)`` on it or on its constructor."""
    kinds: set[Where] = set()
    roots: list[cst.CSTNode] = []
    if "." not in owner:
        for binding in ctx.lookup(owner, scope_node):
            if binding.value is not None:
                roots.append(binding.value)
    for call in ctx.method_calls("to", "cuda", "cpu"):
        receiver = call.func.value  # type: ignore[attr-defined]
        on_owner = dotted_name(receiver) == owner or any(call is root or ctx.is_descendant(call, root) for root in roots)
        if on_owner:
            kinds |= _move_kinds(ctx, call)
    return kinds


def _move_kinds(ctx: FileContext, call: cst.Call) -> set[Where]:
    """Where a ``.cpu()`` / ``.cuda()`` / ``.to(x)`` call moves its receiver; the empty set for
    anything else (``.to(torch.bfloat16)`` changes the dtype)."""
    kind = ctx.facts.devices.move(call)
    return set() if kind is None else {kind}


def _framework_device(ctx: FileContext, framework: str) -> Where | None:
    """Where every Accelerator / Fabric of the file is told to run, when the file says."""
    calls = ctx.calls(ACCELERATOR) if framework == "accelerate" else ctx.calls(FABRIC)
    if not calls:
        return None
    kind = join(ctx.facts.devices.framework_setting(call) for call in calls)
    return kind if kind.decided else None


# Factories that make a fresh tensor on the CPU unless given a ``device=``.
_TENSOR_FACTORIES = frozenset({
    "torch.tensor", "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.rand", "torch.randn",
    "torch.Tensor", "torch.FloatTensor",
})


def params_clearly_on_cpu(ctx: FileContext, call: cst.Call) -> bool:
    """The optimizer's ``model.parameters()`` belong to a model only ever moved to the CPU, or
    its parameters are tensors made on the spot on the CPU (FlowSite's ``Adam([torch.tensor([1.0])],
    lr=1)``, an optimizer kept only to drive a learning-rate schedule)."""
    params = ctx.argument(call, "params", PARAMS_POSITION)
    if params is None or params is MISSING:
        return False
    if isinstance(params, (cst.List, cst.Tuple)) and params.elements and all(
        isinstance(e, cst.Element) and isinstance(e.value, cst.Call) and ctx.qualname(e.value.func) in _TENSOR_FACTORIES
        and ctx.keyword_arg(e.value, "device") is None
        for e in params.elements
    ):
        return True
    owners = []
    for inner in ctx.walk(params, cst.Call):
        func = inner.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("parameters", "named_parameters"):
            owner = dotted_name(func.value)
            if owner:
                owners.append(owner)
    return any(_placements(ctx, owner, call) == {Where.CPU} for owner in owners)


# Deep-learning frameworks beside torch whose modules a script may run next to a torch model
# (SINet-V2's ``utils/fps.py`` times a Jittor port against the torch model): torch's autograd
# switches, devices and loaders mean nothing to them.
OTHER_FRAMEWORKS = ("jittor", "paddle", "mindspore", "oneflow", "tensorflow", "keras", "jax", "flax", "mxnet")


def built_by_another_framework(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """``expr`` (a name bound once) is built by a class of another framework:
    ``jittor_model = jt_Network()`` with ``from jittor.lib.network import Network as jt_Network``."""
    call = ctx.bound_call(expr)
    qualname = ctx.qualname(call.func) if call is not None else None
    return qualname is not None and qualname.split(".", 1)[0] in OTHER_FRAMEWORKS


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


_OFFLOADING_STRATEGIES = ("deepspeed_stage_2_offload", "deepspeed_stage_3_offload", "deepspeed_stage_3_offload_nvme")


def deepspeed_offloads_optimizer(ctx: FileContext) -> bool:
    """The file has DeepSpeed keep the optimizer on the CPU (or NVMe): it then runs its own
    ``DeepSpeedCPUAdam`` instead of the torch optimizer the script builds, so ``fused=`` means
    nothing there. Seen in an Accelerate ``DeepSpeedPlugin(offload_optimizer_device=...)``, a
    Lightning ``DeepSpeedStrategy(offload_optimizer=True)`` or offloading strategy name, or a
    DeepSpeed config with an ``offload_optimizer`` section: a dict in the file, or a JSON file
    next to it that the file names (read as text, never run)."""
    return ctx.memo(deepspeed_offloads_optimizer, lambda: _offloads(ctx))


def _offloads(ctx: FileContext) -> bool:
    text = ctx.source
    if "offload" not in text and ".json" not in text:
        return False
    for call in ctx.nodes(cst.Call):
        for arg in call.args:
            if arg.keyword is None:
                continue
            name = arg.keyword.value
            if name == "offload_optimizer_device" or name == "offload_optimizer":
                value = ctx.values.value_of(arg.value)
                if value not in (None, "none", False):
                    return True
                if value is None and not isinstance(arg.value, (cst.SimpleString, cst.Name)):
                    return True  # read at run time: DeepSpeed may well offload
    for string in ctx.nodes(cst.SimpleString):
        value = ctx.values.value_of(string)
        if not isinstance(value, str):
            continue
        if value in _OFFLOADING_STRATEGIES:
            return True
        if value == "offload_optimizer":  # a config dict's key
            parent = ctx.parent.get(string)
            if isinstance(parent, cst.DictElement) and parent.key is string:
                entries = ctx.values.dict_entries(parent.value) if isinstance(parent.value, cst.Dict) else None
                device = entries.get("device") if entries else None
                if entries is None or (device is not None and ctx.values.value_of(device) != "none"):
                    return True
        if value.endswith(".json") and _json_offloads(ctx, value):
            return True
    return False


def _json_offloads(ctx: FileContext, name: str) -> bool:
    from advisor.facts.environment import named_json

    found = named_json(ctx, name)
    config = found[0] if found is not None else None
    zero = config.get("zero_optimization") if isinstance(config, dict) else None
    offload = zero.get("offload_optimizer") if isinstance(zero, dict) else None
    return isinstance(offload, dict) and str(offload.get("device", "cpu")).lower() != "none"


# Methods that hand back their receiver: ``Net().to(device)``, ``model.cuda()``, ``model.train()``.
_SAME_MODULE_METHODS = frozenset(
    {"to", "cuda", "cpu", "half", "float", "bfloat16", "double", "train", "requires_grad_", "to_empty", "type"}
)


PEFT_WRAPPERS = (
    "peft.get_peft_model",
    "peft.prepare_model_for_kbit_training",
    "peft.prepare_model_for_int8_training",
    "peft.PeftModel.from_pretrained",
)


JIT = ("torch.jit.script", "torch.jit.trace", "torch.jit.trace_module")


TORCH_COMPILE = "torch.compile"


# torch.nn classes that are not a model on their own.
_NOT_A_MODEL = re.compile(r"^(Parameter\w*|Buffer|Module|ModuleList|ModuleDict|\w*Loss|DataParallel)$")


_HF_MODEL_CLASS = re.compile(r"Model|For[A-Z]|^Autoencoder")


_HF_NOT_A_MODEL = re.compile(r"^DataCollator|Config$|Tokenizer(Fast)?$|Processor$|Extractor$|Pipeline$|Scheduler$|Trainer$")


_HF_LOADERS = ("from_pretrained", "from_config", "from_single_file")


QUANTIZED_LOAD = ("load_in_8bit", "load_in_4bit", "quantization_config")
# Sharded data parallel wrappers: torch's FSDP (compiled only with ``use_orig_params=True``) and
# fairscale's, whose forward swaps ``p.data`` between shards (pycls, behind ``cfg.FSDP.ENABLED``).
SHARDED_DATA_PARALLEL = (
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_shard",
    "torch.distributed._composable.fsdp.fully_shard",
    "fairscale.nn.FullyShardedDataParallel",
    "fairscale.nn.data_parallel.FullyShardedDataParallel",
    "fairscale.nn.data_parallel.fully_sharded_data_parallel.FullyShardedDataParallel",
)


def loads_quantized(ctx: FileContext) -> bool:
    """The file loads a model in 8 or 4 bits (bitsandbytes, QLoRA): memory is what it was
    written around (a small per-device batch, no compile of the quantized kernels)."""
    if ctx.calls("transformers.BitsAndBytesConfig", *PEFT_WRAPPERS[1:3]):
        return True
    return any(
        arg.keyword is not None and arg.keyword.value in QUANTIZED_LOAD
        for call in ctx.method_calls("from_pretrained")
        for arg in call.args
    )


# A module that loads bitsandbytes-quantized weights (QLoRA), read before parsing it.
_QUANTIZED_LOAD_TEXT = re.compile(rb"BitsAndBytesConfig|load_in_4bit|load_in_8bit")


def quantized_beside(ctx: FileContext) -> bool:
    """A module that runs with this one (:meth:`Project.neighbourhood`) loads a model in 8 or 4
    bits: maestro's QLoRA strategy loads its model in ``checkpoints.py`` for the training
    module to optimise."""
    return ctx.project is not None and ctx.project.neighbourhood_matches(_QUANTIZED_LOAD_TEXT)


def recomputes_activations(ctx: FileContext) -> bool:
    """The file turns gradient checkpointing on (``model.gradient_checkpointing_enable()``,
    ``torch.utils.checkpoint``, ``gradient_checkpointing=True`` / ``use_gradient_checkpointing=True``):
    it trades speed for activation memory, so its small per-device batch is memory's choice
    (yarn's 1 x 8 over 65k-token sequences)."""
    if ctx.method_calls("gradient_checkpointing_enable"):
        return True
    if ctx.calls("torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"):
        return True
    for arg in ctx.nodes(cst.Arg):
        if arg.keyword is not None and arg.keyword.value in ("gradient_checkpointing", "use_gradient_checkpointing"):
            value = ctx.values.resolve(arg.value)
            if value is not None and value.value is True:
                return True
    return False


# Keywords that give the tokens of one training sample: a trainer config's (``SFTConfig(
# max_length=...)``, ``GRPOConfig(max_completion_length=...)``), a tokenizer's, a data set's.
_SAMPLE_LENGTH_KEYWORDS = frozenset({
    "max_length", "max_seq_length", "max_seq_len", "max_completion_length", "model_max_length", "block_size",
    "seq_len", "seq_length", "context_length", "cutoff_len",
})
# From this many tokens a sample, a batch of one is likely what fits: attention scores and
# logits grow with the length (GRPO's 16k-token completions, Gemma-3's 8k SFT samples).
LONG_SAMPLE_TOKENS = 4096


def long_samples(ctx: FileContext) -> tuple[int, cst.Arg] | None:
    """The longest sample length, in tokens, the file gives a config, tokenizer or data set
    (``SFTConfig(max_length=8192)``; ``max_completion_length=args.max_completion_length``
    with an argparse default of 16384), where it is at least :data:`LONG_SAMPLE_TOKENS`."""
    found: tuple[int, cst.Arg] | None = None
    for arg in ctx.nodes(cst.Arg):
        if arg.keyword is None or arg.keyword.value not in _SAMPLE_LENGTH_KEYWORDS:
            continue
        resolved = ctx.values.resolve(arg.value)
        length = resolved.value if resolved is not None else None
        if isinstance(length, int) and not isinstance(length, bool) and length >= LONG_SAMPLE_TOKENS:
            if found is None or length > found[0]:
                found = (length, arg)
    return found


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
    # What it is handed to: "accelerate", "fabric", "deepspeed", "jit", "compile", "data_parallel", "ddp", "fsdp".
    handed_to: set[str] = field(default_factory=set)
    placements: set[Where] = field(default_factory=set)  # where it is moved, as the device facts tell it
    quantized: bool = False  # loaded in 8/4 bit (bitsandbytes)
    # Every spelling the trace followed (``model`` in ``main``, the ``model`` parameter of ``train``...).
    spellings: set[str] = field(default_factory=set)

    @property
    def on_cuda(self) -> bool:
        """Moved to a CUDA GPU (an unresolved ``.to(device)`` in a GPU file counts; the CPU, MPS
        or XLA do not)."""
        return any(kind not in (Where.CPU, Where.OTHER) for kind in self.placements)


@dataclass
class Trace:
    builds: list[ModelBuild] = field(default_factory=list)
    handed_to: set[str] = field(default_factory=set)
    placements: set[Where] = field(default_factory=set)
    quantized: bool = False
    seen: set[tuple[str, int]] = field(default_factory=set)
    # The parameters the trace reached (function, name): a model a caller hands over.
    parameters: set[tuple[cst.FunctionDef, str]] = field(default_factory=set)


def trained_models(ctx: FileContext) -> list[TrainedModel]:
    """The models this file builds and trains in a file that trains on a GPU: an optimizer
    stepped in a training loop updates their parameters. One entry per model; whether it is
    really on the GPU (``on_cuda``) and what it is handed to are left to the rules."""
    return ctx.memo(trained_models, lambda: _find_trained_models(ctx))


def trace_builds(ctx: FileContext, spelling: str, at: cst.CSTNode) -> list["ModelBuild"]:
    """The model constructors ``spelling`` (seen at ``at``) goes back to."""
    trace = Trace()
    trace_model(ctx, spelling, at, trace, None, 0)
    return trace.builds


def _find_trained_models(ctx: FileContext) -> list[TrainedModel]:
    if not _stepped_optimizer_names(ctx) or not ctx.facts.devices.gpu.yes:  # the cheap question first
        return _handed_to_project_trainers(ctx, [])
    models: list[TrainedModel] = []
    for optimizer, owners in _stepped_optimizers(ctx):
        for owner, at in owners:
            trace = Trace()
            trace_model(ctx, owner, at, trace, None, 0)
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
    return _handed_to_project_trainers(ctx, models)


def _handed_to_project_trainers(ctx: FileContext, models: list[TrainedModel]) -> list[TrainedModel]:
    """``models``, and the models this file builds and hands to a trainer of another project
    module that steps their parameters itself: minGPT's ``Trainer(config, model, dataset).run()``,
    improved-diffusion's ``TrainLoop(model=model, ...).run_loop()``. Where the trainer moves or
    wraps the model counts as if this file did."""
    if ctx.project is None:
        return models
    for call, other, function in ctx.facts.frameworks.delegated_training:
        arguments, cls = ctx.facts.frameworks.handed_over_through(call)
        for name, (position, inside) in trainer_parameters(other, function, cls).items():
            passed = ctx.argument(arguments, name, position)
            spelling = dotted_name(passed) if isinstance(passed, cst.BaseExpression) else None
            if spelling is None:
                continue
            trace = Trace()
            trace_model(ctx, spelling, arguments, trace, None, 0)
            if not trace.builds or any({b.call for b in m.builds} & {b.call for b in trace.builds} for m in models):
                continue
            spellings = {s for s, _ in trace.seen} | {b.name for b in trace.builds if b.name}
            models.append(
                TrainedModel(
                    spelling,
                    arguments,
                    trace.builds,
                    trace.handed_to | inside.handed_to,
                    trace.placements | inside.placements,
                    trace.quantized or inside.quantized,
                    spellings,
                )
            )
    return models


def trainer_parameters(
    ctx: FileContext, function: cst.FunctionDef, cls: cst.ClassDef | None
) -> dict[str, tuple[int | None, Trace]]:
    """The parameters of a trainer of this file (``function``, or ``cls`` through its
    ``__init__``) that receive the model it trains: an optimizer stepped in a training loop of
    the function (of the class) updates their parameters. Each with the position callers pass
    it at (None: keyword only) and the trace inside, which tells where the trainer moves it."""

    def find() -> dict[str, tuple[int | None, Trace]]:
        scope: cst.CSTNode = cls if cls is not None else function
        entry = function if cls is None else _method_of(cls, "__init__")
        if entry is None:
            return {}
        positions = ctx.passed_positions(entry)
        found: dict[str, tuple[int | None, Trace]] = {}
        for optimizer, owners in _stepped_optimizers(ctx):
            if not ctx.is_descendant(optimizer, scope):
                continue
            for owner, at in owners:
                trace = Trace()
                trace_model(ctx, owner, at, trace, None, 0)
                for reached, name in trace.parameters:
                    if reached is entry and name in positions and name not in found and not trace.builds:
                        found[name] = (positions[name], trace)
        return found

    return ctx.memo(("trainer parameters", function, cls), find)


def _method_of(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return next((s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == name), None)


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
        # ``optimizer = set_optimizer(opt, model)``: a factory of the file or the project
        for call in _factory_calls(ctx, target):
            if call not in seen:
                seen.add(call)
                owners = _factory_owners(ctx, call)
                if owners:
                    found.append((call, owners))
    return found


def _factory_calls(ctx: FileContext, target: str) -> list[cst.Call]:
    """Calls of a function assigned to ``target`` (``optimizer = build_optimizer(args, model)``)."""
    calls = []
    for assign in ctx.nodes(cst.Assign):
        if len(assign.targets) != 1 or not isinstance(assign.value, cst.Call):
            continue
        bound = dotted_name(assign.targets[0].target)
        if bound and bound.split(".")[-1] == target.split(".")[-1] and isinstance(assign.value.func, (cst.Name, cst.Attribute)):
            calls.append(assign.value)
    return calls


def _factory_owners(ctx: FileContext, call: cst.Call) -> list[tuple[str, cst.CSTNode]]:
    """The models whose parameters a factory function's returned optimizer updates, as the
    caller spells them: ``model`` for ``set_optimizer(opt, model)`` returning
    ``optim.SGD(model.parameters(), ...)``."""
    owners = _factory_owners_of_function(ctx, call)
    if owners:
        return owners
    # The parameters handed to it (``Lion(model.parameters())``, ``instantiate_optimizer(name, model.parameters())``).
    found: list[tuple[str, cst.CSTNode]] = []
    for arg in call.args:
        if any(
            isinstance(c.func, cst.Attribute) and c.func.attr.value in ("parameters", "named_parameters")
            for c in ctx.walk(arg.value, cst.Call)
        ):
            found.extend(o for o in _parameter_owners(ctx, arg.value) if all(o[0] != k for k, _ in found))
    if found:
        return found
    # A library factory (timm's ``create_optimizer(args, model)``): its model argument.
    if ctx.loops.callee(call) is not None or "optim" not in (dotted_name(call.func) or "").split(".")[-1].lower():
        return []
    return [
        (spelling, call)
        for arg in call.args
        if arg.keyword is None and (spelling := dotted_name(arg.value)) is not None and "." not in spelling
    ]


def _factory_owners_of_function(ctx: FileContext, call: cst.Call) -> list[tuple[str, cst.CSTNode]]:
    """The owners a factory of the file or the project returns an optimizer for."""
    function: cst.FunctionDef | None = ctx.loops.callee(call)
    other = ctx
    if function is None and ctx.project is not None:
        found = ctx.project.binding(call.func)
        if found is not None and isinstance(found[1].node, cst.FunctionDef):
            other, function = found[0], found[1].node
    if function is None:
        return []
    params = [p.name.value for p in function.params.params]
    owners: list[tuple[str, cst.CSTNode]] = []
    for statement in other.walk(function, cst.Return):
        value = statement.value
        if isinstance(value, cst.Name):  # ``optimizer = optim.SGD(...)`` ... ``return optimizer``
            value = other.single_assignment(value)
        if not isinstance(value, cst.Call) or not (other.qualname(value.func) or "").startswith("torch.optim."):
            continue
        argument = other.argument(value, "params", PARAMS_POSITION)
        if not isinstance(argument, cst.BaseExpression) or argument is MISSING:
            continue
        for owner, _ in _parameter_owners(other, argument):
            head = owner.split(".")[0]
            if head not in params:
                continue
            passed = ctx.argument(call, head, params.index(head))
            spelling = dotted_name(passed) if isinstance(passed, cst.BaseExpression) else None
            if spelling is not None and all(spelling != known for known, _ in owners):
                owners.append((spelling + owner[len(head):], call))
    return owners


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
    # ``engine.train(model, loader, optimizer)``: a function of another project module steps it.
    for call, other, function in ctx.facts.frameworks.delegated_training:
        for name, position in other.facts.frameworks.stepped_parameters(function).items():
            passed = ctx.argument(call, name, position)
            spelling = dotted_name(passed) if isinstance(passed, cst.BaseExpression) else None
            if spelling is not None and spelling not in names:
                names.append(spelling)
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
        elif not (ctx.qualname(func) or "").startswith("torch."):
            # A param-group builder: ``param_groups_lrd(model_without_ddp, ...)``,
            # ``optim_factory.add_weight_decay(model, ...)``. Its model is what the trace will confirm.
            for arg in call.args:
                owner = dotted_name(arg.value) if arg.keyword is None and not arg.star else None
                if owner is not None and "." not in owner and all(owner != known for known, _ in owners):
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
        # ``AdamW(self.master_params)`` with ``self.master_params = self.model_params`` and
        # ``self.model_params = list(self.model.parameters())`` (improved-diffusion's TrainLoop).
        for attribute in ctx.walk(params, cst.Attribute):
            spelling = dotted_name(attribute)
            parent = ctx.parent.get(attribute)
            if spelling is None or spelling.count(".") != 1 or not spelling.startswith("self."):
                continue
            if isinstance(parent, cst.Attribute) and parent.value is attribute:
                continue  # ``self.model.parameters()``: read above
            for assignment in ctx.attribute_assignments.get(spelling, ()):
                if isinstance(assignment, cst.Assign) and len(assignment.targets) == 1:
                    for owner, at in _parameter_owners(ctx, assignment.value, depth + 1):
                        if all(owner != known for known, _ in owners):
                            owners.append((owner, at))
    return owners


# Libraries that read a module's ``forward`` signature (torchdyn decides from it whether the
# vector field takes ``t``): ``torch.compile``'s wrapper has ``forward(*args, **kwargs)``.
_SIGNATURE_READERS = ("torchdyn.", "torchdiffeq.", "torchsde.")


def handed_to_signature_reader(ctx: FileContext, spelling: str) -> str | None:
    """The library call ``spelling`` (a model's name) is passed to that inspects its signature
    (``NeuralODE(model, solver="dopri5")``), by qualified name; None if there is none."""
    for call in ctx.nodes(cst.Call):
        qualname = ctx.qualname(call.func) or ""
        if qualname.startswith(_SIGNATURE_READERS) and any(
            dotted_name(arg.value) == spelling for arg in call.args if not arg.star
        ):
            return qualname
    return None


def built_before_gpu_move(ctx: FileContext, optimizer: cst.Call) -> bool:
    """The optimizer is constructed while its model's parameters are still on the CPU: the
    file moves the model to a GPU only after it (``.cuda()`` later, ``accelerator.prepare``).
    ``fused=True`` is checked against the parameters at construction, and torch before 2.4
    has no fused CPU kernel: it raises there. Lightning's ``configure_optimizers`` runs after
    the model is placed."""
    if _fsdp_offloads_parameters(ctx):
        return True  # FSDP keeps the parameters on the CPU between uses
    function = ctx.enclosing(optimizer, cst.FunctionDef)
    if isinstance(function, cst.FunctionDef) and function.name.value == "configure_optimizers":
        return False
    if isinstance(function, cst.FunctionDef) and function.name.value == "__init__":
        cls = ctx.parent.get(ctx.parent.get(function))
        if isinstance(cls, cst.ClassDef) and cls in ctx.facts.frameworks.lightning_modules:
            return True  # Latte: built in the LightningModule's __init__, before Lightning places it
    params = ctx.argument(optimizer, "params", PARAMS_POSITION)
    if not isinstance(params, cst.BaseExpression) or params is MISSING:
        return False
    owners = _parameter_owners(ctx, params)
    if not owners:
        # Time-LLM: AdamW over a list the loop gathered from ``model.parameters()``, handed
        # with the model to ``accelerator.prepare`` below, which places them. audiolm's
        # ``get_optimizer(params, ...)``: the callers hand the parameters in, and its trainers
        # build it before ``.cuda()``: where they are at construction cannot be told.
        return _prepared_after(ctx, optimizer) or (
            isinstance(function, cst.FunctionDef)
            and _derived_from_parameters(ctx, params, function)
            and not _callers_hand_gpu_parameters(ctx, function)
        )
    return not all(_on_gpu_before(ctx, owner, optimizer) for owner, _ in owners)


def _callers_hand_gpu_parameters(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """Every call of ``function`` seen (in its file and in the files importing it) hands it the
    parameters of models already on a GPU there (Score-Entropy's ``get_optimizer(config,
    chain(score_model.parameters(), noise.parameters()))`` after both moved)."""
    calls = calls_of(ctx, function)
    if not calls:
        return False
    for other, call in calls:
        owners = [owner for arg in call.args if not arg.star for owner, _ in _parameter_owners(other, arg.value)]
        if not owners or not all(_on_gpu_before(other, owner, call) for owner in owners):
            return False
    return True


def _derived_from_parameters(ctx: FileContext, expr: cst.BaseExpression, function: cst.FunctionDef) -> bool:
    """``expr`` reads a parameter of ``function``, directly or through the function's own
    assignments (``params = list(filter(..., params))``, ``[{"params": wd_params}, ...]``)."""
    derived = {param.name.value for param in (*function.params.params, *function.params.posonly_params, *function.params.kwonly_params)}
    derived.discard("self")
    assignments = [
        node for node in ctx.walk(function.body, cst.Assign)
        if ctx.enclosing(node, cst.FunctionDef) is function
    ]
    for _ in range(3):  # a few hops: params -> wd_params -> groups
        for node in assignments:
            if any(n.value in derived for n in ctx.walk(node.value, cst.Name)):
                for target in node.targets:
                    derived.update(n.value for n in ctx.walk(target.target, cst.Name))
    return any(n.value in derived for n in ctx.walk(expr, cst.Name))


def _prepared_after(ctx: FileContext, optimizer: cst.Call) -> bool:
    """The optimizer is handed to ``accelerator.prepare`` / ``deepspeed.initialize`` later in its
    function: what it optimizes is placed there, after its construction."""
    binding = ctx.parent.get(optimizer)
    names = {dotted_name(t.target) for t in binding.targets} if isinstance(binding, cst.Assign) else set()
    names.discard(None)
    if not names:
        return False
    scope = ctx.enclosing(optimizer, cst.FunctionDef) or ctx.module
    position = ctx.order[optimizer]
    for call in ctx.walk(scope, cst.Call):
        if ctx.order[call] <= position:
            continue
        method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
        if method == "prepare" or (ctx.qualname(call.func) or "") == "deepspeed.initialize":
            if any(dotted_name(arg.value) in names for arg in call.args):
                return True
    return False


# ``gradient_clip_val`` set to a value that is not visibly zero: ``=1.0``, ``: 400`` in a
# Hydra config, ``=args.clip``; a dataclass field's default ``gradient_clip_val: float = 0`` is not.
_LIGHTNING_CLIP = re.compile(rb"gradient_clip_val[\"']?[ \t]*(?::[ \t]*[\w\[\]., ]+?[ \t]*=|[:=])?[ \t]*(?P<value>[^\s,)#]*)")
_ZERO = frozenset({b"0", b"0.", b"0.0", b"None", b"null", b"~", b"'0'", b'"0"'})


def complex_parameters(ctx: FileContext) -> bool:
    """The file, or a project module it imports, creates complex tensors as weights
    (``dtype=torch.cfloat``: a Fourier neural operator's spectral convolution). The fused Adam
    and AdamW kernels take real floating-point parameters only and raise for these."""
    def find() -> bool:
        if _COMPLEX_DTYPE.search(ctx.source.encode("utf-8", "replace")):
            return True
        return ctx.project is not None and ctx.project.imports_match(_COMPLEX_DTYPE, depth=4)

    return ctx.memo(complex_parameters, find)


_COMPLEX_DTYPE = re.compile(rb"dtype[ \t]*=[ \t]*torch\.(?:cfloat|cdouble|complex64|complex128)\b")


def complex_parameters_elsewhere(ctx: FileContext) -> str | None:
    """A module the file imports by a name that resolves only from another folder of the
    project creates complex weights (:func:`complex_parameters`), itself or through a module it
    imports the same way; its path, relative to the project's root. CNO's
    ``_OtherModels/TrainFNO.py`` imports ``Problems.FNOBenchmarks``, which lives in
    ``CNO2d_classic/`` and builds ``FNOModules.FNO2d`` with ``torch.cfloat`` spectral weights:
    scripts of such repositories run after being copied beside the modules they name."""
    view = ctx.project
    if view is None or not view.member or not view.texts_matching(_COMPLEX_DTYPE):
        return None
    project = view.project
    seen: set[str] = set()
    level = _modules_named_in(project, ctx.source.encode("utf-8", "replace"))
    for _ in range(2):
        following: list[str] = []
        for path in level:
            if path in seen or project.is_test_code(path):
                continue
            seen.add(path)
            view.consulted.add(path)
            text = project.text(path)
            if _COMPLEX_DTYPE.search(text):
                return os.path.relpath(path, project.root)
            following += _modules_named_in(project, text)
        level = following
    return None


_IMPORTED_MODULE = re.compile(rb"^[ \t]*(?:from[ \t]+([A-Za-z_][\w.]*)[ \t]+import|import[ \t]+([A-Za-z_][\w.]*))", re.M)


def _modules_named_in(project, text: bytes) -> list[str]:
    """The project files whose path ends in a module name ``text`` imports
    (``Problems.FNOBenchmarks``: any ``.../Problems/FNOBenchmarks.py``)."""
    found: list[str] = []
    for match in _IMPORTED_MODULE.finditer(text):
        module = (match.group(1) or match.group(2)).decode()
        tail = os.sep + module.replace(".", os.sep)
        found += [p for p in project.files if p.endswith(tail + ".py") or p.endswith(tail + os.sep + "__init__.py")]
    return found


def lightning_refuses_fused(ctx: FileContext, optimizer: cst.Call) -> bool:
    """The optimizer is a LightningModule's (built in ``configure_optimizers``) and the program
    clips gradients through the Trainer (``gradient_clip_val`` to anything but a visible zero,
    in this file, in a script that imports it, or in a YAML config of the project): Lightning's
    mixed precision plugin raises for a fused optimizer there ("does not allow for gradient
    clipping because it performs unscaling of gradients internally"), in ``16-mixed`` and
    ``bf16-mixed`` alike."""
    function = ctx.enclosing(optimizer, cst.FunctionDef)
    if not (isinstance(function, cst.FunctionDef) and function.name.value == "configure_optimizers"):
        return False
    found = [m for m in _LIGHTNING_CLIP.finditer(ctx.source.encode("utf-8", "replace"))]
    view = ctx.project
    if view is not None and view.member:
        # The Trainer is built by a script that imports the module (or one importing that),
        # with settings from the project's YAML configs (Hydra, Lightning CLI).
        view.asked_importers = True
        for path in [*view.project.importers_around(view.path), *view.configs_matching(_LIGHTNING_CLIP)]:
            view.consulted.add(path)
            found.extend(_LIGHTNING_CLIP.finditer(view.project.text(path)))
    return any(match.group("value").rstrip(b"\"'") not in _ZERO for match in found)


def _fsdp_offloads_parameters(ctx: FileContext) -> bool:
    """``FSDP(..., cpu_offload=CPUOffload(offload_params=True))``, also behind a config switch."""
    for call in ctx.calls("torch.distributed.fsdp.CPUOffload", "torch.distributed.fsdp.fully_sharded_data_parallel.CPUOffload"):
        value = ctx.argument(call, "offload_params", 0)
        if value is MISSING:
            continue
        if not (isinstance(value, cst.Name) and value.value == "False"):
            return True
    return False


def _on_gpu_before(ctx: FileContext, owner: str, at: cst.CSTNode) -> bool:
    """Whether ``owner`` is on a GPU (or a device chosen at run time) by the time ``at`` runs."""
    position = ctx.order[at]
    bindings = [b for b in ctx.lookup(owner, at) if b.value is not None] if "." not in owner else []
    # A model built again after a move is on the CPU again (moment's notebook reloads it with
    # ``from_pretrained`` in a later cell, then builds the optimizer): only moves after the
    # last binding before ``at`` count.
    # A wrapper of the same model (``model = DDP(model)``, ``get_peft_model(model, ...)``,
    # ``torch.compile(model)``) keeps its placement: only a binding that does not read it builds anew.
    earlier = [
        ctx.order[b.node] for b in bindings
        if b.node in ctx.order and ctx.order[b.node] < position
        and not any(n.value == owner for n in ctx.walk(b.value, cst.Name))
    ]
    since = max(earlier, default=-1)
    roots = [b.value for b in bindings]
    for root in roots:  # ``from_pretrained(..., device_map="auto")`` builds it on the GPU
        if isinstance(root, cst.Call) and ctx.keyword_arg(root, "device_map") is not None:
            return True
    for call in ctx.method_calls("to", "cuda"):
        if ctx.order[call] >= position or ctx.order[call] < since or exclusive_branches(ctx, call, at):
            continue
        receiver = call.func.value  # type: ignore[attr-defined]
        if dotted_name(receiver) == owner or any(call is root or ctx.is_descendant(call, root) for root in roots):
            if any(kind.gpu or kind is Where.NAMED for kind in _move_kinds(ctx, call)):
                return True
    for call in ctx.nodes(cst.Call):
        if ctx.order[call] < position and not exclusive_branches(ctx, call, at) and framework_hand_over(ctx, call) is not None:
            if any(dotted_name(arg.value) == owner for arg in call.args if not arg.star):
                return True
    return False


def _model_of(owner: str) -> str:
    """The model a parameter owner belongs to: ``model`` for ``model.fc`` (a fine-tuned head) and
    ``model.module`` (DDP's inner module), ``self.net`` for ``self.net.head``."""
    parts = owner.split(".")
    keep = 2 if parts[0] == "self" else 1
    return ".".join(parts[:keep])


def trace_model(
    ctx: FileContext,
    spelling: str,
    at: cst.CSTNode,
    trace: Trace,
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
    trace: Trace,
    outer: tuple[str, cst.CSTNode] | None,
    depth: int,
) -> None:
    trace.placements |= _chain_placements(ctx, value)
    value = strip_same_module_methods(value)
    inner = dotted_name(value)
    if inner is not None:
        if inner != spelling:  # ``model = net.to(device)``: ``model`` is what gets trained
            trace_model(ctx, inner, value, trace, outer or (spelling, binding), depth + 1)
        return
    if not isinstance(value, cst.Call):
        return
    if (ctx.qualname(value.func) or "") in SHARDED_DATA_PARALLEL:  # before fairscale's class reads as a model
        trace.handed_to.add("fsdp")
        module = first_argument(ctx, value, "module")
        wrapped = dotted_name(module) if module is not None else None
        if wrapped is not None:
            trace_model(ctx, wrapped, value, trace, outer, depth + 1)
        return
    wrapper = parallel_wrapper(ctx, value)
    kind = model_build_kind(ctx, value) if wrapper is None else None
    if kind is not None:
        name, node = outer or (spelling, binding)
        trace.builds.append(ModelBuild(value, kind, name, node))
        if kind == "transformers":
            if any(ctx.argument(value, keyword) is not MISSING for keyword in QUANTIZED_LOAD):
                trace.quantized = True
            device_map = ctx.argument(value, "device_map")
            if device_map is not MISSING:
                resolved = ctx.values.resolve(device_map) if device_map is not None else None
                trace.placements.add(Where.CPU if resolved is not None and resolved.value == "cpu" else Where.CUDA_IF_AVAILABLE)
        return
    qualname = ctx.qualname(value.func) or ""
    wrapped: cst.BaseExpression | None = None
    if wrapper is not None:
        if not _only_with_several_gpus(ctx, value):
            trace.handed_to.add(wrapper)
        wrapped = first_argument(ctx, value, "module")
    elif qualname in PEFT_WRAPPERS:
        # The PEFT model is the one trained: it is "built" where the wrapper's result is bound.
        wrapped = first_argument(ctx, value, "model")
        outer = outer or (spelling, binding)
    elif qualname == TORCH_COMPILE:
        trace.handed_to.add("compile")
        wrapped = first_argument(ctx, value, "model")
    elif qualname in JIT:
        trace.handed_to.add("jit")
    elif qualname == "deepspeed.initialize":
        trace.handed_to.add("deepspeed")
    elif framework_hand_over(ctx, value) is not None:
        trace.handed_to.add(framework_hand_over(ctx, value))  # type: ignore[arg-type]
        wrapped = value.args[0].value if len(value.args) == 1 and not value.args[0].star else None
    elif isinstance(value.func, cst.Name):
        _trace_factory(ctx, value, outer or (spelling, binding), trace, depth)
    inner = dotted_name(wrapped) if wrapped is not None else None
    if inner is not None:
        trace_model(ctx, inner, value, trace, outer, depth + 1)


def _trace_unpacked(
    ctx: FileContext, node: cst.Assign, spelling: str, trace: Trace, outer, depth: int
) -> None:
    target, value = node.targets[0].target, node.value
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
        # ``model, config = self.model, self.config`` (minGPT's ``Trainer.run``)
        names = [dotted_name(e.value) for e in target.elements]
        if spelling in names and len(names) == len(value.elements) and not any(
            isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)
        ):
            inner = dotted_name(value.elements[names.index(spelling)].value)
            if inner is not None and inner != spelling:
                trace_model(ctx, inner, value, trace, outer or (spelling, node), depth + 1)
        return
    if not isinstance(target, (cst.Tuple, cst.List)) or not isinstance(value, cst.Call):
        return
    qualname = ctx.qualname(value.func) or ""
    if qualname == "deepspeed.initialize":
        trace.handed_to.add("deepspeed")
        return
    framework = framework_hand_over(ctx, value)
    if framework is None:
        _trace_returned_element(ctx, node, spelling, trace, outer, depth)
        return
    trace.handed_to.add(framework)
    names = [dotted_name(e.value) for e in target.elements]
    if spelling in names and names.index(spelling) < len(value.args):
        arg = value.args[names.index(spelling)]
        inner = dotted_name(arg.value) if not arg.star else None
        if inner is not None:
            trace_model(ctx, inner, value, trace, outer, depth + 1)


def _only_with_several_gpus(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Under ``if torch.cuda.device_count() > 1:``: on one GPU the wrapper is not used."""
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, cst.If) and any(
            ctx.qualname(call.func) == "torch.cuda.device_count" for call in ctx.walk(ancestor.test, cst.Call)
        ):
            return ctx.is_descendant(node, ancestor.body)
    return False


def _trace_returned_element(ctx: FileContext, node: cst.Assign, spelling: str, trace: Trace, outer, depth: int) -> None:
    """``model, criterion = set_model(opt)`` where ``set_model`` is a function of the file: follow
    the element of what it returns (``return model, criterion``) into the function."""
    target, value = node.targets[0].target, node.value
    assert isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, cst.Call)
    function = ctx.loops.callee(value)
    names = [dotted_name(e.value) for e in target.elements]
    if spelling not in names:
        return
    index = names.index(spelling)
    if function is None:
        _trace_project_factory(ctx, value, (index, len(names)), trace, outer or (spelling, node), depth)
        return
    for statement in ctx.walk(function, cst.Return):
        returned = statement.value
        if ctx.scope_of.get(statement) is not function or not isinstance(returned, cst.Tuple):
            continue
        if len(returned.elements) != len(names):
            continue
        inner = dotted_name(returned.elements[index].value)
        if inner is not None:
            trace_model(ctx, inner, returned, trace, outer or (spelling, node), depth + 1)


def _trace_parameter(ctx: FileContext, param: cst.Param, trace: Trace, depth: int) -> None:
    """A model that arrives as a function parameter: follow what the file's callers pass."""
    function = ctx.scope_of.get(param)
    if not isinstance(function, cst.FunctionDef):
        return
    trace.parameters.add((function, param.name.value))
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
            trace_model(ctx, inner, call, trace, None, depth + 1)


def _trace_project_factory(
    ctx: FileContext, call: cst.Call, element: tuple[int, int] | None, trace: Trace, outer, depth: int
) -> None:
    """``model, diffusion = create_model_and_diffusion(...)`` (``element``: the index and count
    of the names unpacked) or ``model = build_model(...)``, where the function is in another
    module of the project and returns a model it builds: the call is the model's build, of a
    class of the project ("imported"), and where that function moves or wraps it counts."""
    if ctx.project is None or depth > _MAX_TRACE_DEPTH or not isinstance(call.func, (cst.Name, cst.Attribute)):
        return
    found = ctx.project.binding(call.func)
    if found is None or not isinstance(found[1].node, cst.FunctionDef) or found[0] is ctx:
        return
    other, function = found[0], found[1].node
    inner = Trace()
    for statement in other.walk(function, cst.Return):
        returned = statement.value
        if other.scope_of.get(statement) is not function or returned is None:
            continue
        if element is not None:
            if not isinstance(returned, cst.Tuple) or len(returned.elements) != element[1]:
                continue
            returned = returned.elements[element[0]].value
        _trace_value(other, returned, "", statement, inner, None, depth + 1)
    if inner.builds:
        name, binding = outer
        trace.builds.append(ModelBuild(call, "imported", name, binding))
        trace.placements |= inner.placements
        trace.handed_to |= inner.handed_to
        trace.quantized = trace.quantized or inner.quantized


def _trace_factory(ctx: FileContext, call: cst.Call, outer, trace: Trace, depth: int) -> None:
    """``model = build_model(args)`` where ``build_model`` is a function of this file."""
    bindings = ctx.lookup(call.func.value, call)  # type: ignore[attr-defined]
    if len(bindings) == 1 and isinstance(bindings[0].node, (cst.ImportFrom, cst.Import)):
        _trace_project_factory(ctx, call, None, trace, outer, depth)
        return
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


def strip_same_module_methods(value: cst.BaseExpression) -> cst.BaseExpression:
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in _SAME_MODULE_METHODS
    ):
        value = value.func.value
    return value


def first_argument(ctx: FileContext, call: cst.Call, keyword: str) -> cst.BaseExpression | None:
    argument = ctx.argument(call, keyword, 0)
    return argument if isinstance(argument, cst.BaseExpression) else None


def framework_hand_over(ctx: FileContext, call: cst.Call) -> str | None:
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
    calls += ctx.calls("deepspeed.initialize", *JIT, TORCH_COMPILE)
    for call in calls:
        if not any(dotted_name(arg.value) == spelling for arg in call.args):
            continue
        qualname = ctx.qualname(call.func) or ""
        if qualname == "deepspeed.initialize":
            found.add("deepspeed")
        elif qualname in JIT:
            found.add("jit")
        elif qualname == TORCH_COMPILE:
            found.add("compile")
        else:
            framework = framework_hand_over(ctx, call)
            if framework is not None:
                found.add(framework)
    return found


def local_module_classes(ctx: FileContext) -> dict[str, cst.ClassDef]:
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


def is_module_class(ctx: FileContext, cls: cst.ClassDef, depth: int = 0) -> bool:
    """Whether ``cls`` is an ``nn.Module`` subclass: through this file's classes, or through a base
    class of another module of the project (RecBole's ``class DCN(ContextRecommender)``), also
    by way of a class of this file whose base is one (DeepRobust's ``Metattack(BaseMeta)``,
    ``BaseMeta(BaseAttack)``, ``BaseAttack(Module)`` in the package)."""
    if cls.name.value in local_module_classes(ctx):
        return True
    if any(project_class(ctx, base.value) is not None for base in cls.bases):
        return True
    if depth >= 3:
        return False
    for base in cls.bases:
        if isinstance(base.value, cst.Name):
            local = [b.node for b in ctx.lookup(base.value.value, cls)]
            if len(local) == 1 and isinstance(local[0], cst.ClassDef) and local[0] is not cls:
                if is_module_class(ctx, local[0], depth + 1):
                    return True
    return False


def model_build_kind(ctx: FileContext, call: cst.Call) -> str | None:
    """What kind of model constructor ``call`` is, or None when it is not one."""
    func = call.func
    if isinstance(func, cst.Subscript) and _registry(ctx, func.value):
        return "registry"
    if project_class(ctx, func) is not None:
        return "imported"
    if isinstance(func, cst.Name):
        bindings = ctx.lookup(func.value, call)
        if func.value in local_module_classes(ctx) and all(isinstance(b.node, cst.ClassDef) for b in bindings):
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


# Calls that take a model without running its forward.
_NOT_RUNNING = frozenset({
    "save", "load_state_dict", "state_dict", "parameters", "named_parameters", "clip_grad_norm_", "clip_grad_value_",
    "print", "len", "isinstance", "getattr", "setattr", "hasattr", "copy", "deepcopy", "update", "step", "watch",
    "unwrap_model", "save_model", "save_checkpoint", "log", "zero_grad", "train", "eval",
})


def called_directly(ctx: FileContext, model: TrainedModel) -> bool:
    """Whether the file runs the model through ``model(...)``: ``torch.compile`` wraps ``forward``,
    so a model driven only through other methods (``agent.get_action_and_value(obs)``) would not
    run compiled code at all."""
    if any(
        dotted_name(call.func) in model.spellings for call in ctx.nodes(cst.Call) if not isinstance(call.func, cst.Call)
    ):
        return True
    # Wrapped by a module the file calls (``ar = AutoregressiveWrapper(model)``, then ``ar(x)``).
    wrappers = set()
    for call in ctx.nodes(cst.Call):
        parent = ctx.parent.get(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and any(
            dotted_name(arg.value) in model.spellings for arg in call.args
        ):
            wrappers.add(dotted_name(parent.targets[0].target))
    wrappers.discard(None)
    if wrappers and any(dotted_name(call.func) in wrappers for call in ctx.nodes(cst.Call)):
        return True
    # Handed to a function every training step (``diffusion.training_losses(model, x, t)``), which runs it.
    for loop in ctx.loops.training_loops:
        for call in ctx.walk(loop.node.body, cst.Call):
            if any(dotted_name(arg.value) in model.spellings for arg in call.args):
                func = dotted_name(call.func) or ""
                if func.split(".")[-1] not in _NOT_RUNNING:
                    return True
    # Handed to a training function (or a trainer's constructor) of another project module, which runs it.
    frameworks = ctx.facts.frameworks
    return any(
        dotted_name(arg.value) in model.spellings
        for call, _, _ in frameworks.delegated_training
        for arg in frameworks.handed_over_through(call)[0].args
    )


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
# ``rcnn`` only as a detector's name (``FasterRCNN``, ``maskrcnn_resnet50``), not ``EncoderCNN``.
_DETECTION_NAME = re.compile(r"darknet|yolo|(^|_|faster|mask|keypoint|cascade)r_?cnn|retina|ssd|fcos|detr|detector", re.IGNORECASE)


# Segmentation models: trained on the dataset's image sizes unless the file resizes or crops to one.
_SEGMENTATION_NAME = re.compile(r"unet|segnet|deeplab|pspnet|linknet|seg(?!uen)|fcn", re.IGNORECASE)


# Transforms that give every image one size: a crop of a fixed size, a resize to a (height, width).
_FIXED_SIZE_TRANSFORMS = frozenset({"Resize", "CenterCrop", "RandomCrop", "RandomResizedCrop", "RandomSizedCrop"})


# A class named for a vision transformer (``VisionTransformer``, ``SwinTransformer``, ``ViT``,
# ``vit_base``): its patch embedding is a convolution, the rest attention.
_TRANSFORMER_NAME = re.compile(r"[Ff]ormer|Swin|swin|DeiT|Deit|BEiT|Beit|XCiT|CaiT|LeViT|MViT|Mixer|(?:^|_)[Vv]i[Tt](?:$|_|[A-Z0-9])")


def _cnn_name(text: str) -> bool:
    return bool(_CNN_NAME.search(text)) and not _NOT_CNN_NAME.search(text)


# torchvision data sets whose images all have one size.
_FIXED_SIZE_DATASETS = frozenset(
    f"torchvision.datasets.{name}"
    for name in ("MNIST", "FashionMNIST", "KMNIST", "EMNIST", "QMNIST", "CIFAR10", "CIFAR100", "SVHN", "STL10")
)


def fixed_input_size(ctx: FileContext) -> bool:
    """Whether the file's images have one size: it resizes or crops them to one
    (``Resize((256, 256))``, ``RandomCrop(224)``, albumentations' ``A.Resize(256, 256)``;
    torchvision's ``Resize(256)`` only fixes the shorter side), or trains on a torchvision data
    set of one image size (MNIST, CIFAR-10, SVHN, ...)."""
    if ctx.calls(*_FIXED_SIZE_DATASETS):
        return True
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
        if _variable_size_model(ctx, name.rsplit(".", 1)[-1]) or _TRANSFORMER_NAME.search(name.rsplit(".", 1)[-1]):
            return False  # a ViT's patch embedding is a convolution; the model is a transformer
        found_class = project_class(ctx, call.func)
        if found_class is not None:  # the class is in the project: read its layers
            other, cls = found_class
            layers: set[str] = set()
            _layers_under(other, cls, layers, set())
            if not layers:  # a wrapper (``DDPM(eps_model=NaiveUnet(...))``): the model it is given
                return _wraps_conv_net(ctx, call)
            return _convolutional(ctx, other, cls, layers)
        built = build_classes(ctx, build)  # a factory function's model
        if built:
            layers = set()
            for other, cls in built:
                if _TRANSFORMER_NAME.search(cls.name.value):
                    return False
                if _variable_size_model(ctx, cls.name.value) and not _denoiser(other, cls):
                    return False
                _layers_under(other, cls, layers, set())
                if not _convolutional(ctx, other, cls, layers):
                    return False
            return True
        return _cnn_name(name) or _wraps_conv_net(ctx, call)
    if build.kind in ("local", "torch.nn"):
        found: set[str] = set()
        root: cst.CSTNode = call
        if build.kind == "local":
            class_name = call.func.value  # type: ignore[attr-defined]
            if _variable_size_model(ctx, class_name) or _TRANSFORMER_NAME.search(class_name):
                return False
            root = local_module_classes(ctx)[call.func.value]  # type: ignore[attr-defined]
        _layers_under(ctx, root, found, set())
        if not found and build.kind == "local":  # a wrapper (``DDPM(eps_model=DummyEpsModel(1))``)
            return _wraps_conv_net(ctx, call)
        return "conv" in found and "sequence" not in found
    return False


# The arguments a denoising network's forward takes besides the image (improved-diffusion's
# ``forward(self, x, timesteps, y=None)``, EDM's ``sigma``).
_DENOISER_ARGUMENT = re.compile(r"^(t|timesteps?|time|sigmas?|noise_levels?|noise_labels)$")


def _denoiser(ctx: FileContext, cls: cst.ClassDef) -> bool:
    """A diffusion model's UNet (its ``forward`` takes the timestep): it denoises images of the one
    size it generates, unlike a segmentation UNet fed the data set's own sizes."""
    forward = _method_of(cls, "forward")
    return forward is not None and any(_DENOISER_ARGUMENT.match(p.name.value) for p in forward.params.params[1:])


# The first argument of an embedding of class labels (a class-conditional generator's), not of tokens.
_LABEL_COUNT = re.compile(r"class|label", re.IGNORECASE)


def _label_embedding(ctx: FileContext, call: cst.Call) -> bool:
    count = ctx.argument(call, "num_embeddings", 0)
    return isinstance(count, cst.BaseExpression) and bool(_LABEL_COUNT.search(ctx.code(count)))


def _convolutional(ctx: FileContext, other: FileContext, cls: cst.ClassDef, layers: set[str]) -> bool:
    """Whether a project class whose layers are ``layers`` is a conv net of one input size: its
    own convolutions, as before; convolutions only helpers of other modules build (a backbone
    factory) count where one size is shown (a denoiser, a CNN's name, the file's fixed-size
    transforms): stereo-transformer's STTR, fed random crop sizes, builds its convolutions
    through ``build_backbone``."""
    if layers & {"sequence", "sequence elsewhere"}:
        return False
    if "conv" in layers:
        return True
    return "conv elsewhere" in layers and (_denoiser(other, cls) or _cnn_name(cls.name.value) or fixed_input_size(ctx))


def _wraps_conv_net(ctx: FileContext, call: cst.Call) -> bool:
    """A model built from another one passed to its constructor, which is a conv net."""
    for arg in call.args:
        inner = arg.value
        if isinstance(inner, cst.Call):
            kind = model_build_kind(ctx, inner)
            if kind is not None and conv_net(ctx, ModelBuild(inner, kind, "", inner)):
                return True
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
            classes = local_module_classes(ctx)
            if local in classes:
                _layers_under(ctx, classes[local], found, seen)
    for call in ctx.walk(root, cst.Call):
        qualname = ctx.qualname(call.func) or ""
        if qualname in _CONV_LAYERS:
            found.add("conv")
        elif qualname in _SEQUENCE_LAYERS and not _label_embedding(ctx, call):
            found.add("sequence")
        elif qualname.startswith("torchvision.models.") or qualname in ("timm.create_model", "timm.models.create_model"):
            kind = "torchvision" if qualname.startswith("torchvision.") else "timm"
            if conv_net(ctx, ModelBuild(call, kind, "", call)):
                found.add("conv")
        elif isinstance(call.func, cst.Name):
            bindings = ctx.lookup(call.func.value, call)
            if len(bindings) == 1 and isinstance(bindings[0].node, (cst.ClassDef, cst.FunctionDef)):
                _layers_under(ctx, bindings[0].node, found, seen)
            elif len(bindings) == 1 and isinstance(bindings[0].node, cst.ImportFrom) and len(seen) < _LAYER_NODES:
                # a layer helper of another project module (``conv_nd`` of improved-diffusion's
                # ``nn.py``); not a block class of one (CMGAN's ``ConformerBlock``, whose position
                # embedding is no token input), read as before: by its name alone
                elsewhere = defined_elsewhere(ctx, call)
                if elsewhere is not None and isinstance(elsewhere[1], cst.FunctionDef):
                    there: set[str] = set()
                    _layers_under(elsewhere[0], elsewhere[1], there, seen)
                    found.update(f"{layer} elsewhere" if not layer.endswith(" elsewhere") else layer for layer in there)


# Definitions visited when reading a model's layers through other modules: a model class
# reaches a few dozen; a bound keeps a package's web of helpers from being read whole.
_LAYER_NODES = 200


def project_class(ctx: FileContext, func: cst.BaseExpression) -> tuple[FileContext, cst.ClassDef] | None:
    """The ``nn.Module`` class of another module of the project that ``func`` names
    (``from models import ResNet18``, ``models.resnet.ResNet18``, a star import): its module's
    context and its ``class`` statement."""
    if ctx.project is None or not isinstance(func, (cst.Name, cst.Attribute)):
        return None
    last = func.value if isinstance(func, cst.Name) else func.attr.value
    if not last[:1].isupper():
        return None
    found = ctx.project.binding(func, _MODULE_TEXT)
    if found is None:
        return None
    other, binding = found
    node = binding.node
    if not isinstance(node, cst.ClassDef) or node.name.value not in local_module_classes(other):
        return None
    return other, node


def defined_elsewhere(ctx: FileContext, call: cst.Call) -> tuple[FileContext, cst.ClassDef | cst.FunctionDef] | None:
    """The ``def`` or ``class`` another module of the project binds to the name ``call`` calls
    (``conv_nd(...)`` from improved-diffusion's ``.nn``), with that module's context."""
    if ctx.project is None or not isinstance(call.func, (cst.Name, cst.Attribute)):
        return None
    found = ctx.project.binding(call.func)
    if found is None or found[0] is ctx or not isinstance(found[1].node, (cst.ClassDef, cst.FunctionDef)):
        return None
    return found[0], found[1].node


def factory_classes(
    ctx: FileContext, call: cst.Call, element: tuple[int, int] | None = None, depth: int = 0
) -> list[tuple[FileContext, cst.ClassDef]]:
    """The ``nn.Module`` classes of the project whose instance ``call`` returns, through the
    factory functions of this file or of other project modules that build it
    (improved-diffusion's ``model, diffusion = create_model_and_diffusion(...)`` returns the
    model ``create_model`` builds, a ``UNetModel`` of ``unet.py``). ``element``: the index and
    count of the names the call's result is unpacked into."""
    found_class = project_class(ctx, call.func)
    if found_class is not None:
        return [found_class] if element is None else []
    if isinstance(call.func, cst.Name) and element is None and call.func.value in local_module_classes(ctx):
        return [(ctx, local_module_classes(ctx)[call.func.value])]
    if depth > 3:
        return []
    function: tuple[FileContext, cst.CSTNode] | None = None
    if isinstance(call.func, cst.Name):
        bindings = ctx.lookup(call.func.value, call)
        if len(bindings) == 1 and isinstance(bindings[0].node, cst.FunctionDef):
            function = (ctx, bindings[0].node)
    if function is None:
        elsewhere = defined_elsewhere(ctx, call)
        if elsewhere is not None and isinstance(elsewhere[1], cst.FunctionDef):
            function = elsewhere
    if function is None:
        return []
    other, node = function
    classes: list[tuple[FileContext, cst.ClassDef]] = []
    for statement in other.walk(node, cst.Return):
        returned = statement.value
        if returned is None or other.scope_of.get(statement) is not node:
            continue
        if element is not None:
            if not isinstance(returned, cst.Tuple) or len(returned.elements) != element[1]:
                continue
            returned = returned.elements[element[0]].value
        returned = strip_same_module_methods(returned)
        values = [returned]
        if isinstance(returned, cst.Name):
            values = [b.value for b in other.lookup(returned.value, statement) if b.value is not None]
        for value in values:
            value = strip_same_module_methods(value)
            if isinstance(value, cst.Call):
                classes.extend(c for c in factory_classes(other, value, None, depth + 1) if c not in classes)
    return classes


def build_classes(ctx: FileContext, build: ModelBuild) -> list[tuple[FileContext, cst.ClassDef]]:
    """The project classes of the model ``build`` makes: its own class, or those its factory
    function returns (the element of a tuple its result is unpacked into)."""
    element = None
    binding = build.binding
    if isinstance(binding, cst.Assign) and binding.value is build.call and len(binding.targets) == 1:
        target = binding.targets[0].target
        if isinstance(target, (cst.Tuple, cst.List)):
            names = [dotted_name(e.value) for e in target.elements]
            if build.name not in names or any(isinstance(e, cst.StarredElement) for e in target.elements):
                return []
            element = (names.index(build.name), len(names))
    return factory_classes(ctx, build.call, element)


def parallel_wrapper(ctx: FileContext, call: cst.Call) -> str | None:
    """"data_parallel" or "ddp" when ``call`` wraps a model in ``nn.DataParallel`` /
    ``DistributedDataParallel`` or in a class of the file or project derived from one
    (EfficientDet's ``CustomDataParallel``); None otherwise."""
    qualname = ctx.qualname(call.func) or ""
    if qualname in DATA_PARALLEL:
        return "data_parallel"
    if qualname in DISTRIBUTED_DATA_PARALLEL:
        return "ddp"
    found = defining_class(ctx, call.func, _PARALLEL_TEXT)
    if found is None:
        return None
    owner, cls = found
    bases = owner.base_qualnames(cls)
    if any(base in DATA_PARALLEL for base in bases):
        return "data_parallel"
    if any(base in DISTRIBUTED_DATA_PARALLEL for base in bases):
        return "ddp"
    return None


def _registry(ctx: FileContext, table: cst.BaseExpression) -> bool:
    """A table of model constructors indexed by name: a module's ``__dict__``
    (``models.__dict__[args.arch]``) or a dict literal of the file or its project
    (``DiT_models = {"DiT-XL/2": DiT_XL_2, ...}``)."""
    if isinstance(table, cst.Attribute) and table.attr.value == "__dict__":
        return True
    if not isinstance(table, cst.Name):
        return False
    value = ctx.single_assignment(table)
    if isinstance(value, cst.Dict):
        return True
    if value is None and ctx.project is not None:
        found = ctx.project.definition(table)
        return found is not None and isinstance(found[1], cst.Dict)
    return False


# -- pretrained models and their size -------------------------------------------------------
_MODEL_CLASS = re.compile(r"Model|For[A-Z]")
_NOT_MODEL_CLASS = re.compile(r"Tokenizer|Config|Processor|Extractor|PeftModel")


def is_model_load(ctx: FileContext, call: cst.Call) -> bool:
    """``<transformers model class>.from_pretrained(...)``."""
    parts = (ctx.qualname(call.func) or "").split(".")
    if parts[0] != "transformers" or len(parts) < 3 or parts[-1] != "from_pretrained":
        return False
    return bool(_MODEL_CLASS.search(parts[-2])) and not _NOT_MODEL_CLASS.search(parts[-2])


def model_loads(ctx: FileContext) -> list[cst.Call]:
    return [call for call in ctx.method_calls("from_pretrained") if is_model_load(ctx, call)]


def remote_code_load(ctx: FileContext) -> cst.Call | None:
    """A model load that may run the model's own code from its Hub repository
    (``trust_remote_code=True``, or a value not seen to be False): its modeling code, not
    transformers', decides how it checkpoints and what it does with the keywords it is given."""
    for call in model_loads(ctx):
        trusted = ctx.keyword_arg(call, "trust_remote_code")
        if trusted is not None and ctx.values.value_of(trusted.value) is not False:
            return call
    return None


def pretrained_model_id(ctx: FileContext, expr: cst.BaseExpression) -> str | None:
    """The string ``expr`` holds; for a parameter of a loader function (``def load(name):
    return AutoModel.from_pretrained(name)``), the argument of its one call in the file."""
    value = ctx.values.value_of(expr)
    if isinstance(value, str):
        return value
    found = ctx.parameter_of(expr) if isinstance(expr, cst.Name) else None
    if found is None:
        return None
    param, function, position = found
    callers = ctx.loops.callers(function)
    if len(callers) != 1:
        return None
    argument = ctx.argument(callers[0], param.name.value, position)
    if argument is None or argument is MISSING:
        return None
    value = ctx.values.value_of(argument)  # type: ignore[arg-type]
    return value if isinstance(value, str) else None


def pretrained_sizes(ctx: FileContext) -> list[tuple[cst.Call, "ModelSize"]]:
    """Every ``<transformers model>.from_pretrained(id)`` of the file whose id tells its size."""
    from advisor.model_sizes import model_size

    found = []
    for call in model_loads(ctx):
        expr = ctx.argument(call, "pretrained_model_name_or_path", 0)
        if expr is None or expr is MISSING:
            continue
        name = pretrained_model_id(ctx, expr)  # type: ignore[arg-type]
        size = model_size(name) if name else None
        if size is not None:
            found.append((call, size))
    return found


def fits_raw_parameters(ctx: FileContext) -> str | None:
    """The class of this file that every trained model is built from, where it holds only raw
    ``nn.Parameter`` tensors and builds no layer (EigenTrajectory's ``curve_fitting``: a
    ``Model`` of control points fitted to trajectories by a matrix product): a numerical fit,
    not a network, whose precision is the result. None where a model has layers or is not a
    class of this file."""
    return ctx.memo(fits_raw_parameters, lambda: _find_raw_parameter_fit(ctx))


def _find_raw_parameter_fit(ctx: FileContext) -> str | None:
    models = trained_models(ctx)
    if not models or not all(model.builds for model in models):
        return None
    found = None
    for model in models:
        for build in model.builds:
            cls = local_class(ctx, build.call.func) if build.kind == "local" else None
            if cls is None or not _only_raw_parameters(ctx, cls):
                return None
            found = cls.name.value
    return found


def _only_raw_parameters(ctx: FileContext, cls: cst.ClassDef) -> bool:
    """``cls`` derives from ``nn.Module`` alone, and its ``__init__`` makes ``nn.Parameter``
    attributes and calls nothing of ``torch.nn`` besides (no layer, no other class of the file)."""
    if len(cls.bases) != 1 or ctx.qualname(cls.bases[0].value) != "torch.nn.Module":
        return False
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    inits = [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"]
    if len(inits) != 1:
        return False
    parameters = 0
    for call in ctx.walk(inits[0], cst.Call):
        qualname = ctx.qualname(call.func) or ""
        if qualname == "torch.nn.Parameter":
            parameters += 1
        elif qualname.startswith("torch.nn.") and not qualname.startswith("torch.nn.init."):
            return False
        elif isinstance(call.func, cst.Name) and any(isinstance(b.node, cst.ClassDef) for b in ctx.lookup(call.func.value, call)):
            return False
    return parameters > 0
