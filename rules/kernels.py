"""ADV6xx: kernels and compilation (guide: "Optimizer choice", torch.compile, SDPA)."""
from __future__ import annotations

from typing import Iterator

import libcst as cst

from advisor.apis import TORCH_ADAM, TRAINING_ARGUMENTS
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
        if not on_owner:
            continue
        method = call.func.attr.value  # type: ignore[attr-defined]
        if method == "cpu":
            kinds.add("cpu")
        elif method == "cuda":
            kinds.add("accelerator")
        elif call.args and not call.args[0].star:
            first = call.args[0].value
            qualname = ctx.qualname(first) or ""
            if qualname.startswith("torch.") and qualname != "torch.device":
                continue  # ``.to(torch.bfloat16)`` changes the dtype, not the device
            kinds.add(_device_kind(ctx, first))
    return kinds


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
