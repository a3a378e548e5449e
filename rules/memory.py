"""ADV5xx: memory (guide: "Gradient Checkpointing", "Optimizer choice", "Using 🤗 PEFT",
"DeepSpeed ZeRO", "torch.empty_cache_steps").

ADV501, ADV503 and ADV504 share one reading of a file: which pretrained model
(``from_pretrained("<hub id>")``) is fully fine-tuned, by what (an HF Trainer and its
``TrainingArguments``, or a torch optimizer over its parameters), in which precision and
with which optimizer; and from that, the bytes per parameter the guide's numbers give for
weights, gradients and optimizer states. Activations are never in that estimate: it is a
lower bound for "does not fit" and only ADV503, which must bound them from above, adds an
upper estimate of them for the few models whose shape it knows.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from advisor.apis import TORCH_ADAM, TRAINING_ARGUMENTS
from advisor.context import MISSING, FileContext
from advisor.facts import Tri
from advisor.facts.distributed import shipped_zero3_config
from advisor.facts.environment import older_allowed
from advisor.facts.models import is_model_load, model_loads, pretrained_model_id, remote_code_load
from advisor.facts.precision import autocasts, resolve_dtype
from advisor.edits import remove_keyword, set_keyword, string_like
from advisor.model_sizes import ModelSize, model_size
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid
from advisor.targets import PROFILES, Target

GB = 1e9

GUIDE_FIT = "Optimizer choice, Using PEFT, DeepSpeed ZeRO"
GUIDE_CHECKPOINTING = "Gradient Checkpointing"
GUIDE_ACCUMULATION = "Gradient Accumulation"
GUIDE_8BIT = "8-bit Adam"
GUIDE_EMPTY_CACHE = "torch.empty_cache_steps"

# -- bytes per parameter (guide: "Optimizer choice", "Using PEFT"; the model-memory anatomy) -----------
# Optimizer state per fp32 parameter: Adam keeps two fp32 moments (8), 8-bit Adam one byte
# each (2), Adafactor "slightly more than 4", SGD with momentum one buffer (4).
OPTIMIZER_STATE_BYTES = {
    "adamw": 8.0,
    "nadam": 8.0,
    "radam": 8.0,
    "adamax": 8.0,
    "adadelta": 8.0,
    "adamw_8bit": 2.0,
    "adafactor": 4.0,
    "sgd_momentum": 4.0,
    "rmsprop": 4.0,
    "adagrad": 4.0,
    "sgd": 0.0,
}
OPTIMIZER_LABELS = {
    "adamw": "AdamW",
    "nadam": "NAdam",
    "radam": "RAdam",
    "adamax": "Adamax",
    "adadelta": "Adadelta",
    "adamw_8bit": "8-bit AdamW",
    "adafactor": "Adafactor",
    "sgd_momentum": "SGD with momentum",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
    "sgd": "plain SGD",
}
# Trainer ``optim`` values and the state they keep.
TRAINER_OPTIMS = {
    "adamw_torch": "adamw",
    "adamw_torch_fused": "adamw",
    "adamw_hf": "adamw",
    "adamw_apex_fused": "adamw",
    "adamw_anyprecision": "adamw",
    "adamw_torch_xla": "adamw",
    "adamw_torch_npu_fused": "adamw",
    "paged_adamw_32bit": "adamw",
    "adamw_bnb_8bit": "adamw_8bit",
    "adamw_8bit": "adamw_8bit",
    "paged_adamw_8bit": "adamw_8bit",
    "ademamix_8bit": "adamw_8bit",
    "adafactor": "adafactor",
    "sgd": "sgd",
    "adagrad": "adagrad",
    "rmsprop": "rmsprop",
}
# ``optim`` values that are torch's AdamW, which ADV504 may switch to 8-bit states.
TORCH_ADAMW_OPTIMS = ("adamw_torch", "adamw_torch_fused", "adamw_hf")
EIGHT_BIT_TRAINER_OPTIM = "adamw_bnb_8bit"
LORA_BYTES = 2.0  # frozen 16-bit base weights; the adapters add a few percent
QLORA_BYTES = 0.55  # 4-bit base weights plus their quantization constants
TRAINERS = (
    "transformers.Trainer",
    "transformers.Seq2SeqTrainer",
    "trl.SFTTrainer",
    "trl.DPOTrainer",
    "trl.ORPOTrainer",
    "trl.KTOTrainer",
    "trl.CPOTrainer",
    "trl.RewardTrainer",
    "trl.GRPOTrainer",
)
# Methods that return the same model (moved, cast or switched to train mode).
_SAME_MODEL_METHODS = ("to", "cuda", "train", "half", "bfloat16", "float", "requires_grad_")
# Libraries and names that mean the weights are not all trained on one device: adapters,
# sharding across GPUs, or frozen parts. The estimate of full fine-tuning does not apply.
_NOT_FULL_ON_ONE_GPU_MODULES = (
    "peft",
    "unsloth",
    "deepspeed",
    "accelerate",
    "torch.distributed.fsdp",
    "torch.distributed._composable",
    "torch.distributed.tensor",
    "fairscale",
    "colossalai",
    "lightning",
    "pytorch_lightning",
)
_ADAPTED_OR_FROZEN_NAME = re.compile(r"lora|peft|adapter|freeze(?!_support)|frozen", re.IGNORECASE)


def gigabytes(value: float) -> str:
    amount = value / GB
    return f"~{amount:.1f} GB" if amount < 10 else f"~{amount:.0f} GB"


@dataclass(frozen=True)
class Precision:
    """How the trained weights are held."""

    half_weights: bool  # 16-bit weights (and so 16-bit gradients and optimizer states)
    mixed: bool  # fp32 weights with a 16-bit copy for autocast (guide: 1.5x the model)
    note: str  # how the message says it


def state_bytes(precision: Precision, optimizer: str | None) -> float:
    """Bytes per parameter for weights, gradients and optimizer state (no activations).
    An unknown optimizer counts as none: the estimate stays a lower bound."""
    optimizer_bytes = OPTIMIZER_STATE_BYTES.get(optimizer or "", 0.0)
    if precision.half_weights:
        # torch optimizers keep their state in the parameters' dtype; 8-bit states stay 8-bit.
        optimizer_bytes = optimizer_bytes if optimizer == "adamw_8bit" else optimizer_bytes / 2
        return 2 + 2 + optimizer_bytes
    return 4 + (2 if precision.mixed else 0) + 4 + optimizer_bytes


@dataclass
class FullFineTune:
    """A pretrained model whose every weight is trained on each GPU, and how."""

    size: ModelSize
    load: cst.CSTNode  # the ``from_pretrained`` call, or the model id handed to a trainer
    precision: Precision
    optimizer: str | None
    # Where the optimizer is chosen, when it is torch's AdamW: the constructor, or the
    # ``TrainingArguments`` call (``optim`` unset or an ``adamw_torch*`` value).
    adamw_site: cst.Call | None = None
    trainer: cst.Call | None = None
    training_args: cst.Call | None = None
    # The expressions that name the model (``model``, ``self.model``): where
    # ``gradient_checkpointing_enable()`` may be called on it.
    model_names: set[str] = field(default_factory=set)
    optimizer_call: cst.Call | None = None

    @property
    def bytes_per_parameter(self) -> float:
        return state_bytes(self.precision, self.optimizer)

    @property
    def total(self) -> float:
        return self.size.parameters * self.bytes_per_parameter

    def total_with(self, optimizer: str) -> float:
        return self.size.parameters * state_bytes(self.precision, optimizer)


def capacity(target: Target) -> tuple[float, str]:
    """The memory to compare with, and how the message names it. Without a known target, the
    largest single GPU known: what does not fit there fits on no single GPU."""
    if target.memory_gb:
        return target.memory_gb * GB, f"the {target.name}'s {target.memory_gb:g} GB"
    largest = max((p for p in PROFILES.values() if p.memory_gb), key=lambda p: p.memory_gb or 0)
    return (largest.memory_gb or 0) * GB, f"any single GPU (the largest, {largest.name}, has {largest.memory_gb:g} GB)"


# -- which pretrained model is fully fine-tuned -----------------------------------------------------
def full_fine_tunes(ctx: FileContext) -> list[FullFineTune]:
    """Every pretrained model of known size that the file fully fine-tunes on one GPU (or one
    replica per GPU, as DDP does). Empty where adapters, quantized or frozen weights, sharding
    (DeepSpeed, FSDP, ``device_map``) or a launcher config the file cannot show may be involved."""
    return ctx.memo(full_fine_tunes, lambda: [] if _not_full_on_one_gpu(ctx) else list(_full_fine_tunes(ctx)))


def _not_full_on_one_gpu(ctx: FileContext) -> bool:
    for node in [*ctx.nodes(cst.Import), *ctx.nodes(cst.ImportFrom)]:
        if isinstance(node, cst.Import):
            modules = [dotted_name(alias.name) or "" for alias in node.names]
        else:
            modules = [dotted_name(node.module) or ""] if node.module is not None else []
        if any(m == p or m.startswith(p + ".") for m in modules for p in _NOT_FULL_ON_ONE_GPU_MODULES):
            return True
    if any(_ADAPTED_OR_FROZEN_NAME.search(n.value) for n in ctx.nodes(cst.Name)):
        return True
    if any(key.endswith(".requires_grad") for key, nodes in ctx.attribute_assignments.items() if nodes):
        return True
    return bool(ctx.method_calls("requires_grad_"))


@dataclass(frozen=True)
class _Load:
    size: ModelSize
    precision: Precision


def _read_load(ctx: FileContext, call: cst.Call) -> _Load | None:
    """The model's size and weight precision, when it is loaded whole onto one device."""
    model_id = ctx.argument(call, "pretrained_model_name_or_path", 0)
    if model_id is None or model_id is MISSING:
        return None
    resolved = pretrained_model_id(ctx, model_id)  # type: ignore[arg-type]
    if resolved is None:
        return None
    size = model_size(resolved)
    if size is None:
        return None
    for keyword in ("load_in_8bit", "load_in_4bit", "quantization_config", "tp_plan", "device_mesh"):
        expr = ctx.argument(call, keyword)
        if expr is None:
            return None
        if expr is not MISSING:
            value = ctx.values.resolve(expr)  # type: ignore[arg-type]
            if value is None or value.value not in (False, None):
                return None
    if not _single_device(ctx, ctx.argument(call, "device_map")):
        return None
    return _Load(size, _weights_precision(ctx, call, size))


def _single_device(ctx: FileContext, expr) -> bool:
    """``device_map`` absent or naming one device: ``"cuda"``, ``0``, ``{"": 0}``. ``"auto"``
    spreads the model over every GPU (or offloads it): not one GPU holding all of it."""
    if expr is MISSING:
        return True
    if expr is None:
        return False
    entries = ctx.values.dict_entries(expr)
    if entries is not None:
        return set(entries) == {""}
    value = ctx.values.resolve(expr)
    if value is None:
        return False
    if isinstance(value.value, int) and not isinstance(value.value, bool):
        return True
    return isinstance(value.value, str) and re.fullmatch(r"cuda(:\d+)?|\d+", value.value) is not None


def _weights_precision(ctx: FileContext, call: cst.Call, size: ModelSize) -> Precision:
    """16-bit unless the weights certainly load in fp32: every doubt takes the smaller estimate.
    Without a dtype, transformers 4 loads fp32 and transformers 5 the checkpoint's own dtype
    (``dtype="auto"``): fp32 for a checkpoint stored in fp32, else the lower, 16-bit, figure."""
    requested: object = None
    for keyword in ("dtype", "torch_dtype"):
        expr = ctx.argument(call, keyword)
        if expr is MISSING:
            continue
        if expr is not None:
            dtype = resolve_dtype(ctx, expr)  # type: ignore[arg-type]
            requested = dtype.name if dtype is not None else ctx.values.value_of(expr)  # type: ignore[arg-type]
        requested = requested or "unknown"
        break
    if requested in ("float32", "float"):
        return Precision(False, False, "fp32")
    if requested in ("float16", "bfloat16"):
        return Precision(True, False, f"{requested} weights")
    if requested in (None, "auto") and size.half_checkpoint is False:
        return Precision(False, False, "fp32")
    if requested in (None, "auto") and size.half_checkpoint:
        return Precision(True, False, "the checkpoint's 16-bit weights")
    return Precision(True, False, "assuming 16-bit weights")


def _cast_to_half(ctx: FileContext, names: set[str]) -> bool:
    for call in ctx.method_calls("half", "bfloat16", "to"):
        receiver = dotted_name(call.func.value)  # type: ignore[attr-defined]
        if receiver not in names:
            continue
        method = call.func.attr.value  # type: ignore[attr-defined]
        if method in ("half", "bfloat16"):
            return True
        for arg in call.args:
            dtype = resolve_dtype(ctx, arg.value)
            if dtype is not None and dtype.name in ("float16", "bfloat16"):
                return True
    return False


def _loads_behind(
    ctx: FileContext, expr: cst.BaseExpression, depth: int = 0, seen: frozenset = frozenset()
) -> set[cst.Call] | None:
    """The ``from_pretrained`` calls a model expression holds, through rebindings that keep the
    model (``model.to(device)``, ``DDP(model)``, ``torch.compile(model)``); None when any binding
    is something else (``model = Net()``, a parameter) or cannot be followed."""
    if depth > 6:
        return None
    while (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in _SAME_MODEL_METHODS
    ):
        expr = expr.func.value
    if isinstance(expr, cst.Call):
        if is_model_load(ctx, expr):
            return {expr}
        return _returned_loads(ctx, expr, depth, seen)
    name = dotted_name(expr)
    if name is None:
        return None
    if isinstance(expr, cst.Name):
        values = []
        for binding in ctx.lookup(expr.value, expr):
            if binding.value is not None:
                values.append(binding.value)
            elif not (isinstance(binding.node, cst.Assign) and _wraps(binding.node.value, name)):
                return None  # a parameter, a loop target, an unpacking of something else
    else:
        assignments = ctx.attribute_assignments.get(name, [])
        if not assignments or not all(isinstance(a, cst.Assign) and len(a.targets) == 1 for a in assignments):
            return None
        values = [a.value for a in assignments]  # type: ignore[attr-defined]
    if not values:
        return None
    loads: set[cst.Call] = set()
    for value in values:
        if id(value) in seen:
            continue
        if _wraps(value, name):
            continue
        inner = _loads_behind(ctx, value, depth + 1, seen | {id(value)})
        if inner is None:
            return None
        loads |= inner
    return loads


def _wraps(value: cst.BaseExpression, name: str) -> bool:
    """``DDP(model, ...)``, ``torch.compile(model)``, ``model.to(device)``: the same model again."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _SAME_MODEL_METHODS:
        value = value.func.value
    if dotted_name(value) == name:
        return True
    return isinstance(value, cst.Call) and any(dotted_name(arg.value) == name for arg in value.args)


def _returned_loads(ctx: FileContext, call: cst.Call, depth: int, seen: frozenset) -> set[cst.Call] | None:
    """``model = load_model(args)``: the loads a function of this file returns, when each of its
    ``return`` statements hands back one."""
    if not isinstance(call.func, cst.Name):
        return None
    bindings = ctx.lookup(call.func.value, call)
    if len(bindings) != 1 or not isinstance(bindings[0].node, cst.FunctionDef):
        return None
    function = bindings[0].node
    returns = [r for r in ctx.walk(function, cst.Return) if ctx.scope_of.get(r) is function]
    if not returns:
        return None
    loads: set[cst.Call] = set()
    for statement in returns:
        value = statement.value
        if isinstance(value, cst.Tuple) and value.elements:
            value = value.elements[0].value  # ``return model, tokenizer``
        if value is None:
            return None
        inner = _loads_behind(ctx, value, depth + 1, seen)
        if inner is None:
            return None
        loads |= inner
    return loads


def _full_fine_tunes(ctx: FileContext) -> Iterator[FullFineTune]:
    read = {call: _read_load(ctx, call) for call in model_loads(ctx)}
    yield from _trainer_fine_tunes(ctx, read)
    yield from _loop_fine_tunes(ctx, read)


def _single_load(ctx: FileContext, expr: cst.BaseExpression, read: dict) -> tuple[cst.Call, _Load] | None:
    loads = _loads_behind(ctx, expr)
    if not loads or len(loads) != 1:
        return None
    load = next(iter(loads))
    facts = read.get(load)
    return None if facts is None else (load, facts)


def _model_names(ctx: FileContext, load: cst.Call) -> set[str]:
    """The name the loaded model is bound to (``model``, ``self.model``), through a method
    chain (``.from_pretrained(...).to(device)``)."""
    node: cst.CSTNode = load
    parent = ctx.parent.get(node)
    while (isinstance(parent, cst.Attribute) and parent.value is node) or (
        isinstance(parent, cst.Call) and parent.func is node
    ):
        node, parent = parent, ctx.parent.get(parent)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        name = dotted_name(parent.targets[0].target)
        if name:
            return {name}
    return set()


def _local_trainer_classes(ctx: FileContext) -> set[str]:
    """Classes of this file that subclass a trainer (``class MyTrainer(Trainer)``)."""
    found = set()
    for cls in ctx.nodes(cst.ClassDef):
        if any(ctx.qualname(base.value) in TRAINERS for base in cls.bases):
            found.add(cls.name.value)
    return found


def _trainer_calls(ctx: FileContext) -> list[cst.Call]:
    calls = list(ctx.calls(*TRAINERS))
    local = _local_trainer_classes(ctx)
    calls += [c for c in ctx.nodes(cst.Call) if isinstance(c.func, cst.Name) and c.func.value in local]
    return calls


def _trainer_runs(ctx: FileContext, trainer: cst.Call) -> bool:
    """``trainer.train()`` (or ``Trainer(...).train()``) somewhere in the file."""
    parent = ctx.parent.get(trainer)
    if isinstance(parent, cst.Attribute) and parent.attr.value == "train":
        return True
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        name = dotted_name(parent.targets[0].target)
        return any(
            dotted_name(c.func.value) == name  # type: ignore[attr-defined]
            for c in ctx.method_calls("train")
        )
    return False


def _trainer_fine_tunes(ctx: FileContext, read: dict) -> Iterator[FullFineTune]:
    for trainer in _trainer_calls(ctx):
        if not _trainer_runs(ctx, trainer):
            continue
        model_expr = ctx.argument(trainer, "model", 0)
        if model_expr is None or model_expr is MISSING:
            continue
        setup = _training_arguments(ctx, trainer)
        if setup is None:
            continue
        training_args, optimizer, adamw_site, mixed = setup
        model_id = ctx.values.resolve(model_expr)  # type: ignore[arg-type]
        names: set[str] = set()
        if model_id is not None and isinstance(model_id.value, str):
            size = model_size(model_id.value)  # SFTTrainer(model="Qwen/Qwen2.5-0.5B")
            if size is None:
                continue
            load: cst.CSTNode = model_expr  # type: ignore[assignment]
            precision = Precision(True, False, "assuming 16-bit weights")
        else:
            found = _single_load(ctx, model_expr, read)  # type: ignore[arg-type]
            if found is None:
                continue
            load, facts = found
            size, precision = facts.size, facts.precision
            names = _model_names(ctx, load) | {dotted_name(model_expr) or ""}  # type: ignore[arg-type]
            names.discard("")
            if not precision.half_weights and _cast_to_half(ctx, names):
                precision = Precision(True, False, "16-bit weights")
        if not precision.half_weights and mixed:
            precision = Precision(False, True, "mixed precision")
        optimizer_call = None
        override = ctx.argument(trainer, "optimizers")
        if override is None:
            continue
        if override is not MISSING:
            optimizer, adamw_site, optimizer_call = _trainer_optimizers(ctx, override)
        yield FullFineTune(size, load, precision, optimizer, adamw_site, trainer, training_args, names, optimizer_call)


def _training_arguments(ctx: FileContext, trainer: cst.Call):
    """(TrainingArguments call, optimizer kind, AdamW site, mixed precision) when every setting
    that shards or offloads the model is visibly off; None otherwise."""
    args_expr = ctx.argument(trainer, "args", 1)
    if args_expr is None or args_expr is MISSING:
        return None
    call = ctx.bound_call(args_expr, *TRAINING_ARGUMENTS)  # type: ignore[arg-type]
    if call is None:
        return None
    holder = dotted_name(args_expr) if not isinstance(args_expr, cst.Call) else None  # type: ignore[arg-type]
    if holder and any(ctx.attribute_assignments.get(f"{holder}.{f}") for f in ("deepspeed", "fsdp", "optim", "bf16", "fp16")):
        return None
    for keyword in ("deepspeed", "fsdp", "fsdp_config", "use_cpu", "no_cuda"):
        expr = ctx.argument(call, keyword)
        if expr is None:
            return None
        if expr is not MISSING:
            value = ctx.values.resolve(expr)  # type: ignore[arg-type]
            if value is None or value.value not in (None, False, "", [], ()):
                return None
    optim = ctx.argument(call, "optim")
    if optim is None:
        return None
    if optim is MISSING:
        optimizer, adamw_site = "adamw", call  # recent transformers default to adamw_torch_fused
    else:
        value = ctx.values.value_of(optim)  # type: ignore[arg-type]
        if isinstance(value, str):
            optimizer = TRAINER_OPTIMS.get(value)
            adamw_site = call if value in TORCH_ADAMW_OPTIMS else None
        else:
            optimizer, adamw_site = None, None
    mixed = any(_resolves_true(ctx, call, flag) for flag in ("bf16", "fp16"))
    return call, optimizer, adamw_site, mixed


def _resolves_true(ctx: FileContext, call: cst.Call, keyword: str) -> bool:
    expr = ctx.argument(call, keyword)
    return expr is not None and expr is not MISSING and ctx.values.value_of(expr) is True  # type: ignore[arg-type]


def _trainer_optimizers(ctx: FileContext, override: cst.BaseExpression):
    """``Trainer(optimizers=(opt, sched))``: the optimizer kind, AdamW site and constructor."""
    if isinstance(override, cst.Name):
        override = ctx.single_assignment(override) or override
    if isinstance(override, cst.Tuple) and override.elements:
        constructor = ctx.bound_call(override.elements[0].value)
        if constructor is not None:
            kind = optimizer_kind(ctx, constructor)
            site = constructor if ctx.qualname(constructor.func) in ADAMW_CONSTRUCTORS else None
            return kind, site, constructor
    return None, None, None


ADAMW_CONSTRUCTORS = (*TORCH_ADAM, "transformers.AdamW", "transformers.optimization.AdamW")
_OPTIMIZER_PREFIXES = ("torch.optim.", "bitsandbytes.optim.", "transformers.", "apex.optimizers.")


def optimizer_kind(ctx: FileContext, call: cst.Call) -> str | None:
    qualname = ctx.qualname(call.func) or ""
    last = qualname.split(".")[-1]
    if qualname in ADAMW_CONSTRUCTORS or qualname == "apex.optimizers.FusedAdam":
        return "adamw"
    if qualname.startswith("bitsandbytes.optim."):
        if "8bit" in last:
            return "adamw_8bit" if "Adam" in last else None
        return "adamw" if last in ("Adam", "AdamW", "PagedAdamW", "PagedAdamW32bit", "AdamW32bit", "Adam32bit") else None
    if last == "Adafactor" and qualname.startswith("transformers."):
        return "adafactor"
    if qualname == "torch.optim.SGD":
        momentum = ctx.argument(call, "momentum", 2)
        if momentum is MISSING:
            return "sgd"
        value = ctx.values.value_of(momentum)  # type: ignore[arg-type]
        if isinstance(value, (int, float)):
            return "sgd_momentum" if value else "sgd"
        return None
    if qualname in ("torch.optim.RMSprop", "torch.optim.Adagrad", "torch.optim.NAdam", "torch.optim.RAdam", "torch.optim.Adamax", "torch.optim.Adadelta"):
        return last.lower()
    return None


def _optimizer_constructors(ctx: FileContext) -> list[cst.Call]:
    calls = []
    for prefix in _OPTIMIZER_PREFIXES:
        for call in ctx.calls_with_prefix(prefix):
            qualname = ctx.qualname(call.func) or ""
            if "lr_scheduler" in qualname or "swa_utils" in qualname:
                continue
            if prefix == "transformers." and qualname.split(".")[-1] not in ("AdamW", "Adafactor"):
                continue
            if call not in calls:
                calls.append(call)
    return calls


def _parameter_owners(ctx: FileContext, params: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The modules whose ``.parameters()`` / ``.named_parameters()`` the optimizer gets, also
    through a name bound once (``grouped = [{"params": [p for n, p in model.named_parameters() ...]}]``)."""
    roots = [params]
    if isinstance(params, cst.Name):
        value = ctx.single_assignment(params)
        if value is not None:
            roots.append(value)
    owners = []
    for root in roots:
        for call in ctx.walk(root, cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("parameters", "named_parameters"):
                owners.append(func.value)
    return owners


def _loop_fine_tunes(ctx: FileContext, read: dict) -> Iterator[FullFineTune]:
    if not ctx.loops.training_loops or not ctx.facts.devices.gpu.yes:
        return  # no GPU shown: the state lives in host memory
    mixed = any(site.fp16 or site.bf16 for site in autocasts(ctx))
    for constructor in _optimizer_constructors(ctx):
        params = ctx.argument(constructor, "params", 0)
        if params is None or params is MISSING:
            continue
        owners = _parameter_owners(ctx, params)  # type: ignore[arg-type]
        if len(owners) != 1:
            continue
        found = _single_load(ctx, owners[0], read)
        if found is None:
            continue
        load, facts = found
        names = _model_names(ctx, load) | {dotted_name(owners[0]) or ""}
        names.discard("")
        precision = facts.precision
        if not precision.half_weights and _cast_to_half(ctx, names):
            precision = Precision(True, False, "16-bit weights")
        if not precision.half_weights and mixed:
            precision = Precision(False, True, "mixed precision")
        kind = optimizer_kind(ctx, constructor)
        site = constructor if ctx.qualname(constructor.func) in ADAMW_CONSTRUCTORS else None
        yield FullFineTune(facts.size, load, precision, kind, site, None, None, names, constructor)


# -- ADV501 and ADV504 split the "does not fit" case between them ------------------------------------
def eight_bit_rescues(setup: FullFineTune, memory: float) -> bool:
    """ADV504's case: torch's AdamW where 8-bit states alone bring the model state under ``memory``."""
    return (
        setup.optimizer == "adamw"
        and setup.adamw_site is not None
        and setup.total > memory
        and setup.total_with("adamw_8bit") <= memory
    )


def _options(setup: FullFineTune) -> list[tuple[float, str]]:
    params = setup.size.parameters
    current = setup.bytes_per_parameter
    options = [
        (params * QLORA_BYTES, "QLoRA"),
        (params * LORA_BYTES, "LoRA"),
    ]
    offload = 4.0 if (setup.precision.half_weights or setup.precision.mixed) else 8.0
    if offload < current:
        options.append((params * offload, "ZeRO-Offload"))
    for optimizer in ("adamw_8bit", "adafactor"):
        bytes_ = state_bytes(setup.precision, optimizer)
        if bytes_ < current:
            options.append((params * bytes_, OPTIMIZER_LABELS[optimizer]))
    return sorted(options)


def _breakdown(setup: FullFineTune) -> str:
    precision, optimizer = setup.precision, setup.optimizer
    optimizer_bytes = setup.bytes_per_parameter - (4 if precision.half_weights else 8 + (2 if precision.mixed else 0))
    weights = "2" if precision.half_weights else ("4+2" if precision.mixed else "4")
    gradients = "2" if precision.half_weights else "4"
    state = f"{OPTIMIZER_LABELS[optimizer]} states {optimizer_bytes:g}" if optimizer else "optimizer states not counted"
    return f"{setup.bytes_per_parameter:g} bytes/param: weights {weights}, gradients {gradients}, {state}"


def _optimizer_phrase(setup: FullFineTune) -> str:
    return f"with {OPTIMIZER_LABELS[setup.optimizer]}" if setup.optimizer else "with any optimizer"


class ModelDoesNotFit(Rule):
    code = "ADV501"
    name = "model-does-not-fit"
    summary = "Full fine-tuning of a model whose weights, gradients and optimizer states alone exceed the GPU's memory."
    guide = GUIDE_FIT
    fix_applicability = Applicability.NONE
    why = """
        Full fine-tuning keeps, for every parameter, the weights, their gradients and the
        optimizer's state on the GPU. The guide's numbers: AdamW in mixed precision takes 18
        bytes per parameter (fp32 weights 4 and their 16-bit copy 2, gradients 4, two fp32
        moments 8), 16 in fp32, and 8 when the weights themselves are 16-bit. A 7B model
        needs about 121 GB in mixed precision before a single activation is stored: it runs
        out of memory on any 80 GB GPU, whatever the batch size.

        The estimate uses the model id (`from_pretrained("meta-llama/Llama-2-7b-hf")`): a
        table of common models, or the size written in the name (`-7b`, `1.3B`, `350m`,
        `8x7B`). It is a lower bound: activations, the CUDA context and fragmentation come on
        top. The message ranks what would fit, with each option's estimated footprint: LoRA
        or QLoRA (only adapters are trained; the frozen base is 2 or ~0.5 bytes/param),
        DeepSpeed ZeRO-Offload (optimizer states in CPU RAM), 8-bit AdamW (2 bytes of state),
        Adafactor (~4). Gradient checkpointing only trims activations and cannot make the
        model state fit. When 8-bit AdamW alone would be enough, ADV504 reports it on the
        optimizer instead, with a fix.
    """
    example = """
        model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
        args = TrainingArguments("out", bf16=True, per_device_train_batch_size=4)
        Trainer(model=model, args=args, train_dataset=ds).train()
    """
    use_instead = """
        model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", dtype=torch.bfloat16)
        model = get_peft_model(model, LoraConfig(r=16, task_type="CAUSAL_LM"))
        args = TrainingArguments("out", bf16=True, per_device_train_batch_size=4)
        Trainer(model=model, args=args, train_dataset=ds).train()
    """
    silent_when = """
        - the model id is not a literal the file resolves (constant, argparse default) or its
          size is unknown (no table entry, no size in the name), or the model is built from a
          config;
        - the model is not trained in the file: no `Trainer(...).train()` with it, no
          optimizer over its parameters in a file with a training loop (inference scripts);
        - only part of it is trained: PEFT/LoRA (anything named `peft`, `lora`, `adapter`),
          unsloth, frozen parameters (`requires_grad = False`, `requires_grad_()`, `freeze`),
          quantized loading (`load_in_4bit`, `quantization_config`);
        - the model may be sharded or offloaded: DeepSpeed, FSDP, tensor parallelism,
          `device_map="auto"`, `TrainingArguments(deepspeed=...)` / `fsdp=`, Accelerate or
          Lightning (whose launch config may shard it), or `TrainingArguments` that the file
          does not build with visible arguments (`HfArgumentParser`);
        - the estimate fits. Without `--gpu` the target's memory is unknown and only a model
          that fits no single GPU (more than the largest known, 180 GB) is reported. Where
          the dtype is unknown, or defaults to the checkpoint's 16-bit one (transformers 5
          loads `dtype="auto"`), the smaller 16-bit estimate is used.
    """
    valid = [
        Valid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            args = TrainingArguments("out", bf16=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="T4",
            note="124M parameters: ~2 GB of model state",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM
            from peft import LoraConfig, get_peft_model
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
            model = get_peft_model(model, LoraConfig(r=8))
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for batch in loader:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            gpu="A10",
            note="LoRA: only the adapters are trained",
        ),
        Valid(
            """
            import torch
            from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments
            bnb = BitsAndBytesConfig(load_in_4bit=True)
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf", quantization_config=bnb)
            args = TrainingArguments("out", bf16=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="A10",
            note="quantized weights cannot be fully fine-tuned: the file trains adapters",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
            args = TrainingArguments("out", bf16=True, deepspeed="ds_zero3_offload.json")
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="A100-80GB",
            note="DeepSpeed ZeRO shards and offloads the state",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments
            parser = HfArgumentParser(TrainingArguments)
            (training_args,) = parser.parse_args_into_dataclasses()
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
            Trainer(model=model, args=training_args, train_dataset=ds).train()
            """,
            gpu="A100-80GB",
            note="arguments from the command line may add --deepspeed or --fsdp",
        ),
        Valid(
            """
            import torch
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf", device_map="auto")
            with torch.no_grad():
                out = model.generate(**inputs)
            """,
            note="inference only",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
            targs = TrainingArguments("out", bf16=True)
            Trainer(model=model, args=targs, train_dataset=ds).train()
            """,
            gpu="T4",
            note="model id unknown",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
            args = TrainingArguments("out", bf16=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            note="no target: 7B fits the largest GPUs",
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator
            from transformers import AutoModelForCausalLM
            accelerator = Accelerator(mixed_precision="bf16")
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf")
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
            model, optimizer = accelerator.prepare(model, optimizer)
            for batch in loader:
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()
            """,
            gpu="A100-80GB",
            note="the accelerate launch config may use DeepSpeed or FSDP",
        ),
        Valid(
            """
            import torch
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
            for param in model.model.parameters():
                param.requires_grad = False
            optimizer = torch.optim.AdamW(model.lm_head.parameters(), lr=1e-4)
            for batch in loader:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            gpu="A10",
            note="frozen backbone: only the head is trained",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", torch_dtype=torch.float32)
            args = TrainingArguments("out", bf16=True, per_device_train_batch_size=4)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="A100-80GB",
            note="121 GB in mixed precision; 8-bit AdamW (81 GB) would not fit either",
        ),
        Invalid(
            """
            import torch
            from transformers import AutoModelForCausalLM

            MODEL = "mistralai/Mistral-7B-v0.1"

            def main():
                model = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.bfloat16).cuda()
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
                for batch in loader:
                    loss = model(**batch).loss
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            gpu="RTX4090",
            note="bf16 weights: 8 bytes/param, 58 GB on a 24 GB GPU",
        ),
        Invalid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf")
            args = TrainingArguments("out", bf16=True, optim="adafactor")
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            note="no target needed: ~414 GB fits no single GPU",
        ),
        Invalid(
            """
            import argparse
            import torch
            from transformers import AutoModelForSeq2SeqLM

            parser = argparse.ArgumentParser()
            parser.add_argument("--model", default="google/flan-t5-xl")
            args = parser.parse_args()

            def load(name):
                return AutoModelForSeq2SeqLM.from_pretrained(name)

            model = load(args.model).to("cuda")
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            for batch in loader:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            gpu="T4",
            fixed=None,
            note="argparse default through a loader function; SGD with momentum in fp32: 12 bytes/param",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        memory, where = capacity(ctx.target)
        reported: set[cst.CSTNode] = set()
        for setup in sorted(full_fine_tunes(ctx), key=lambda s: s.total):
            if setup.load in reported or setup.total <= memory or eight_bit_rescues(setup, memory):
                continue
            reported.add(setup.load)
            options = ", ".join(f"{label} {gigabytes(total)}" for total, label in _options(setup))
            message = (
                f"`{setup.size.model_id}` (~{setup.size.described} params) needs at least {gigabytes(setup.total)} "
                f"for full fine-tuning {_optimizer_phrase(setup)}, {setup.precision.note} ({_breakdown(setup)}; "
                f"activations extra), more than {where}. Model state with {options}; "
                f"gradient checkpointing trims only activations (guide: {GUIDE_FIT})"
            )
            yield self.report(setup.load, message)


class OptimizerMemory(Rule):
    code = "ADV504"
    name = "optimizer-memory"
    summary = "AdamW's 8 bytes/param of state make a model not fit where 8-bit AdamW would."
    guide = GUIDE_8BIT
    fix_applicability = Applicability.UNSAFE
    why = """
        AdamW keeps two fp32 moments per parameter: 8 bytes, almost half of the 18 bytes/param
        of mixed-precision training. bitsandbytes' 8-bit AdamW quantizes both moments to one
        byte each (2 bytes/param) and dequantizes them only for the update; the guide's
        example: for a 3B model, 24 GB of AdamW state become 6 GB. When the model state does
        not fit the GPU with AdamW but does with 8-bit states, that is the smallest change
        that makes the run possible, and it keeps full fine-tuning.

        This rule reports that case on the optimizer (or on `TrainingArguments`, whose
        default optimizer is AdamW); ADV501 reports the models that 8-bit states alone
        cannot rescue, on the model load. The estimate has no activations: check the batch
        still fits.
    """
    example = """
        model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b").cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """
    use_instead = """
        import bitsandbytes as bnb
        model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b").cuda()
        optimizer = bnb.optim.AdamW8bit(model.parameters(), lr=1e-4)
    """
    silent_when = """
        - ADV501's premise does not hold (unknown size, inference only, PEFT/LoRA, quantized
          or frozen weights, DeepSpeed/FSDP/Accelerate/`device_map="auto"`, unknown
          `TrainingArguments`), or the model already fits with AdamW;
        - 8-bit states would not make it fit either (ADV501 reports it, with the other options);
        - the optimizer is not torch's AdamW/Adam (bitsandbytes, Adafactor, apex, SGD...), or
          the Trainer's `optim` is set to anything but `adamw_torch`, `adamw_torch_fused`,
          `adamw_hf`, or an `optimizers=` override that is not torch's AdamW.

        The fix replaces `torch.optim.AdamW(...)` with `bnb.optim.AdamW8bit(...)` (same
        positional order and defaults; `fused`/`foreach` dropped; no fix with `maximize`,
        `capturable`, `differentiable` or unknown `**kwargs`) and sets `optim="adamw_bnb_8bit"`
        for the Trainer. It needs `bitsandbytes` installed and changes the optimizer's numerics.
    """
    valid = [
        Valid(
            """
            import torch
            from transformers import AutoModelForSeq2SeqLM
            model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b").cuda()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for batch in loader:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            gpu="A100-80GB",
            note="46 GB fits 80 GB",
        ),
        Valid(
            """
            import torch
            import bitsandbytes as bnb
            from transformers import AutoModelForSeq2SeqLM
            model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b").cuda()
            optimizer = bnb.optim.AdamW8bit(model.parameters(), lr=1e-4)
            for batch in loader:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            gpu="A100-40GB",
            note="already 8-bit",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
            args = TrainingArguments("out", bf16=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="RTX4090",
            note="8-bit states do not make 7B fit 24 GB: ADV501's case",
        ),
        Valid(
            """
            from transformers import AutoModelForSeq2SeqLM, Trainer, TrainingArguments
            model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b")
            args = TrainingArguments("out", bf16=True, optim=cli.optim)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="A100-40GB",
            note="optimizer chosen on the command line",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from transformers import AutoModelForSeq2SeqLM
            model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b").cuda()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            for batch in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            fixed="""
            import torch
            from transformers import AutoModelForSeq2SeqLM
            import bitsandbytes
            model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b").cuda()
            optimizer = bitsandbytes.optim.AdamW8bit(model.parameters(), lr=1e-4)
            for batch in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            gpu="A100-40GB",
            unsafe=True,
            note="51 GB with AdamW, 34 GB with 8-bit states",
        ),
        Invalid(
            """
            from transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments
            model = AutoModelForSeq2SeqLM.from_pretrained("google/flan-t5-xl")
            args = Seq2SeqTrainingArguments(
                output_dir="out",
                bf16=True,
            )
            Seq2SeqTrainer(model=model, args=args, train_dataset=ds).train()
            """,
            fixed="""
            from transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments
            model = AutoModelForSeq2SeqLM.from_pretrained("google/flan-t5-xl")
            args = Seq2SeqTrainingArguments(
                output_dir="out",
                bf16=True,
                optim="adamw_bnb_8bit",
            )
            Seq2SeqTrainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="A100-40GB",
            unsafe=True,
            note="the Trainer's default optimizer is AdamW",
        ),
        Invalid(
            """
            import bitsandbytes as bnb
            import torch
            from transformers import AutoModelForSeq2SeqLM, Trainer, TrainingArguments
            model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b")
            args = TrainingArguments("out", bf16=True, optim='adamw_torch')
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            fixed="""
            import bitsandbytes as bnb
            import torch
            from transformers import AutoModelForSeq2SeqLM, Trainer, TrainingArguments
            model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b")
            args = TrainingArguments("out", bf16=True, optim='adamw_bnb_8bit')
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="A100-40GB",
            unsafe=True,
        ),
        Invalid(
            """
            import torch
            from transformers import AutoModelForSeq2SeqLM
            model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b").cuda()
            optimizer = torch.optim.AdamW(model.parameters(), 1e-4, maximize=True)
            for batch in loader:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            fixed=None,
            gpu="A100-40GB",
            note="fp32: 46 GB vs 34 GB; `maximize` has no 8-bit twin: advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        memory, where = capacity(ctx.target)
        reported: set[cst.CSTNode] = set()
        for setup in full_fine_tunes(ctx):
            site = setup.adamw_site
            if site is None or site in reported or not eight_bit_rescues(setup, memory):
                continue
            reported.add(site)
            is_trainer = ctx.qualname(site.func) in TRAINING_ARGUMENTS
            spelling = "the Trainer's default AdamW" if is_trainer else f"`{dotted_name(site.func) or 'AdamW'}`"
            if is_trainer and ctx.argument(site, "optim") is not MISSING:
                spelling = f"`optim=\"{ctx.values.value_of(ctx.argument(site, 'optim'))}\"`"  # type: ignore[arg-type]
            use = '`optim="adamw_bnb_8bit"`' if is_trainer else "`bnb.optim.AdamW8bit`"
            message = (
                f"{spelling} keeps 8 bytes/param of state: full fine-tuning of `{setup.size.model_id}` "
                f"(~{setup.size.described} params, {setup.precision.note}) needs at least {gigabytes(setup.total)}, "
                f"more than {where}; 8-bit AdamW ({use}) cuts the states to 2 bytes/param, "
                f"{gigabytes(setup.total_with('adamw_8bit'))} (activations extra) (guide: {GUIDE_8BIT})"
            )
            edit = self._trainer_edit(ctx, site) if is_trainer else self._constructor_edit(ctx, site)
            fix = None
            if edit is not None:
                edit, imports = edit
                fix = self.fix("Use 8-bit AdamW states (bitsandbytes)", edit, imports=imports)
            yield self.report(site, message, fix)

    @staticmethod
    def _trainer_edit(ctx: FileContext, call: cst.Call):
        optim = ctx.argument(call, "optim")
        if optim is MISSING:
            return Edit(call, set_keyword(call, "optim", f'"{EIGHT_BIT_TRAINER_OPTIM}"')), ()
        resolved = ctx.values.resolve(optim)  # type: ignore[arg-type]
        if resolved is None or not isinstance(resolved.node, cst.SimpleString):
            return None
        return Edit(resolved.node, string_like(resolved.node, EIGHT_BIT_TRAINER_OPTIM)), ()

    @staticmethod
    def _constructor_edit(ctx: FileContext, call: cst.Call):
        qualname = ctx.qualname(call.func)
        if qualname not in TORCH_ADAM or any(arg.star for arg in call.args):
            return None  # transformers.AdamW takes ``correct_bias``, which bitsandbytes does not
        for keyword in ("maximize", "capturable", "differentiable"):
            if ctx.argument(call, keyword) is not MISSING:
                return None
        target = "bitsandbytes.optim.Adam8bit" if qualname == "torch.optim.Adam" else "bitsandbytes.optim.AdamW8bit"
        func, imports = ctx.reference(target, call)
        args = [a for a in call.args if not (a.keyword is not None and a.keyword.value in ("fused", "foreach"))]
        if len(args) < len(call.args) and args:
            args[-1] = args[-1].with_changes(comma=call.args[-1].comma)
        return Edit(call, call.with_changes(func=func, args=args)), imports


# -- ADV503 -------------------------------------------------------------------------------------------
# Guide: "if the preferred batch size fits into memory, there's no reason to apply
# memory-optimizing techniques because they can slow down the training."
COMFORT = 0.5  # state plus an upper estimate of activations under half the memory


def activation_bytes(setup: FullFineTune, batch: int) -> float | None:
    """An upper estimate of one step's activations at ``batch`` sequences of the model's
    longest length, without checkpointing: per layer s*b*h*(34 + 5*a*s/h) bytes in 16-bit
    (Korthikanti et al.), twice that in fp32, plus fp32 logits, their softmax and gradient."""
    arch = setup.size.architecture
    if arch is None or arch.max_positions is None:
        return None
    s, h, a = arch.max_positions, arch.hidden, arch.heads
    per_layer = s * batch * h * (34 + 5 * a * s / h)
    if not (setup.precision.half_weights or setup.precision.mixed):
        per_layer *= 2
    return arch.layers * per_layer + s * batch * arch.vocab * 12


class NeedlessMemorySaving(Rule):
    code = "ADV503"
    name = "needless-memory-saving"
    summary = "Gradient checkpointing or accumulation on a model that fits the GPU comfortably without it."
    guide = f"{GUIDE_CHECKPOINTING}, {GUIDE_ACCUMULATION}"
    fix_applicability = Applicability.NONE
    why = """
        Gradient checkpointing recomputes the forward pass during backward (the guide: about
        20% slower); gradient accumulation runs several small forward/backward passes per
        optimizer step instead of one large one. Both trade speed for memory, and the guide
        is explicit: "if the preferred batch size fits into memory, there's no reason to apply
        memory-optimizing techniques because they can slow down the training".

        The rule reports them only where a generous estimate fits: the model is in advisor's
        table with its shape (BERT, RoBERTa, GPT-2, BART, OPT-125m...), the target GPU is
        known (`--gpu`), and the model state plus an upper estimate of the activations (every
        sequence at the model's longest length, no checkpointing) stays under half of the
        GPU's memory at the requested batch (for accumulation: at the whole effective batch).
        Activations grow with batch x sequence length: larger batches or longer sequences
        than the script's may need the technique again.
    """
    example = """
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        args = TrainingArguments("out", per_device_train_batch_size=8, gradient_checkpointing=True)
    """
    use_instead = """
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        args = TrainingArguments("out", per_device_train_batch_size=8)
    """
    silent_when = """
        - no `--gpu` / configured target (the memory is unknown), or the model's shape is not
          in the table (its activations cannot be bounded: T5 and rotary-position models
          take any sequence length), or its id is unknown;
        - ADV501's premise does not hold (PEFT, quantized or frozen weights, sharding,
          Accelerate, unknown `TrainingArguments`);
        - the batch or the accumulation steps are unknown;
        - the estimate does not stay under half the GPU's memory;
        - a per-device batch of 1-2 with 8+ accumulation steps: ADV401 reports the split.
    """
    valid = [
        Valid(
            """
            from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments
            model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
            args = TrainingArguments("out", per_device_train_batch_size=8, gradient_checkpointing=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            note="no target: the memory is unknown",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2-large")
            args = TrainingArguments("out", per_device_train_batch_size=16, gradient_checkpointing=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="A100-80GB",
            note="16 x 1024 tokens of GPT-2 large activations do not fit comfortably",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
            args = TrainingArguments("out", per_device_train_batch_size=8, gradient_checkpointing=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="H100",
            note="rotary positions: the sequence length, and so the activations, are unbounded",
        ),
        Valid(
            """
            from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments
            model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
            args = TrainingArguments("out", per_device_train_batch_size=args_batch, gradient_accumulation_steps=4)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="A100-80GB",
            note="unknown batch",
        ),
        Valid(
            """
            from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments
            model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
            args = TrainingArguments("out", per_device_train_batch_size=1, gradient_accumulation_steps=64)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="A100-80GB",
            note="1 x 64: ADV401 reports the split",
        ),
    ]
    invalid = [
        Invalid(
            """
            from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments
            model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
            args = TrainingArguments("out", per_device_train_batch_size=8, gradient_checkpointing=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="RTX4090",
            note="~2 GB of state, at most ~7 GB of activations: far under 24 GB",
        ),
        Invalid(
            """
            from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments
            model = AutoModelForSequenceClassification.from_pretrained("roberta-base")
            args = TrainingArguments("out", per_device_train_batch_size=16, gradient_accumulation_steps=2, bf16=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            gpu="A100-80GB",
            note="the effective batch of 32 fits in one pass",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("distilgpt2").to("cuda")
            model.gradient_checkpointing_enable()
            loader = DataLoader(ds, batch_size=4, shuffle=True)
            optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
            for batch in loader:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            gpu="A100-40GB",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.target.memory_gb:
            return
        memory = ctx.target.memory_gb * GB
        reported: set[cst.CSTNode] = set()
        for setup in full_fine_tunes(ctx):
            batch = self._batch(ctx, setup)
            if batch is None or activation_bytes(setup, 1) is None:
                continue
            for site in self._checkpointing_sites(ctx, setup):
                estimate = activation_bytes(setup, batch) or 0.0
                if site in reported or setup.total + estimate > COMFORT * memory:
                    continue
                reported.add(site)
                yield self.report(site, self._message(ctx, setup, batch, estimate, "checkpointing"))
            accumulation = self._accumulation(ctx, setup)
            if accumulation is None:
                continue
            steps, site = accumulation
            if steps <= 1 or (batch <= 2 and steps >= 8) or site in reported:
                continue
            estimate = activation_bytes(setup, batch * steps) or 0.0
            if setup.total + estimate > COMFORT * memory:
                continue
            reported.add(site)
            yield self.report(site, self._message(ctx, setup, batch, estimate, "accumulation", steps))

    def _message(self, ctx: FileContext, setup: FullFineTune, batch: int, estimate: float, kind: str, steps: int = 1) -> str:
        arch = setup.size.architecture
        assert arch is not None
        head = f"`{setup.size.model_id}` (~{setup.size.described} params)"
        where = f"half the {ctx.target.name}'s {ctx.target.memory_gb:g} GB"
        if kind == "checkpointing":
            return (
                f"Gradient checkpointing on {head}, which fits without it: model state {gigabytes(setup.total)} plus at "
                f"most {gigabytes(estimate)} of activations at batch {batch} x {arch.max_positions} tokens stays under "
                f"{where}; recomputing the forward costs ~20% speed: drop it unless batch or sequences grow "
                f"(guide: {GUIDE_CHECKPOINTING})"
            )
        return (
            f"Gradient accumulation ({steps} steps of batch {batch}) on {head}: the whole batch of {batch * steps} x "
            f"{arch.max_positions} tokens needs at most {gigabytes(estimate)} of activations with a model state of "
            f"{gigabytes(setup.total)}, under {where}: use a per-device batch of {batch * steps} without "
            f"accumulation (guide: {GUIDE_ACCUMULATION})"
        )

    @staticmethod
    def _batch(ctx: FileContext, setup: FullFineTune) -> int | None:
        if setup.training_args is not None:
            expr = ctx.argument(setup.training_args, "per_device_train_batch_size")
            if expr is None:
                return None
            value = 8 if expr is MISSING else ctx.values.value_of(expr)  # type: ignore[arg-type]
        else:
            loaders: list[cst.Call] = []
            for loop in ctx.loops.training_loops:
                calls = ctx.facts.loaders.behind(loop.iterable) if loop.iterable is not None else None
                if calls is None:
                    return None
                loaders.extend(c for c in calls if c not in loaders)
            batch = ctx.facts.loaders.single_batch(loaders)
            value = None if batch is None else batch.value
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    @staticmethod
    def _checkpointing_sites(ctx: FileContext, setup: FullFineTune) -> list[cst.CSTNode]:
        sites: list[cst.CSTNode] = []
        if setup.training_args is not None:
            for keyword in ("gradient_checkpointing", "activation_checkpointing"):
                arg = ctx.keyword_arg(setup.training_args, keyword)
                if arg is not None and ctx.values.value_of(arg.value) is True:
                    sites.append(arg)
        for call in ctx.method_calls("gradient_checkpointing_enable", "activation_checkpointing_enable"):
            if dotted_name(call.func.value) in setup.model_names:  # type: ignore[attr-defined]
                sites.append(call)
        return sites

    @staticmethod
    def _accumulation(ctx: FileContext, setup: FullFineTune) -> tuple[int, cst.CSTNode] | None:
        if setup.training_args is not None:
            expr = ctx.argument(setup.training_args, "gradient_accumulation_steps")
            if expr is None or expr is MISSING:
                return None
            value = ctx.values.value_of(expr)  # type: ignore[arg-type]
            site: cst.CSTNode = ctx.keyword_arg(setup.training_args, "gradient_accumulation_steps") or setup.training_args
        else:
            divisors = [ctx.loops.accumulation_divisor(loop) for loop in ctx.loops.training_loops]
            if len(divisors) != 1 or divisors[0] is None:
                return None
            value, site = ctx.values.value_of(divisors[0]), divisors[0]
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        return value, site


# -- ADV502 -------------------------------------------------------------------------------------------
TORCH_CHECKPOINT = "torch.utils.checkpoint.checkpoint"
TORCH_CHECKPOINT_SEQUENTIAL = "torch.utils.checkpoint.checkpoint_sequential"
PREPARE_KBIT = ("peft.prepare_model_for_kbit_training", "peft.utils.prepare_model_for_kbit_training", "peft.utils.other.prepare_model_for_kbit_training")
# prepare_model_for_kbit_training(model, use_gradient_checkpointing=True, gradient_checkpointing_kwargs=None)
# ``torch.utils.checkpoint.checkpoint``'s own keywords; any other goes to the checkpointed function.
CHECKPOINT_OWN_KEYWORDS = frozenset({"use_reentrant", "preserve_rng_state", "context_fn", "determinism_check", "debug"})
PREPARE_KBIT_POSITION = {"use_gradient_checkpointing": 1, "gradient_checkpointing_kwargs": 2}
# PEFT's name for it before 0.6 (removed since): it calls ``gradient_checkpointing_enable()`` with
# no kwargs and takes none to pass.
PREPARE_INT8 = ("peft.prepare_model_for_int8_training", "peft.utils.prepare_model_for_int8_training", "peft.utils.other.prepare_model_for_int8_training")
# ``gradient_checkpointing_kwargs`` arrived in transformers 4.35 (TrainingArguments and
# ``gradient_checkpointing_enable``); before 5, leaving it out means ``{"use_reentrant": True}``.
TRANSFORMERS_KWARGS = ("transformers", "4.35")
NON_REENTRANT = '{"use_reentrant": False}'


def _quantized_load(ctx: FileContext) -> bool:
    if ctx.calls("transformers.BitsAndBytesConfig"):
        return True
    for call in model_loads(ctx):
        for keyword in ("load_in_4bit", "load_in_8bit", "quantization_config"):
            if ctx.keyword_arg(call, keyword) is not None:
                return True
    return False


def _with_non_reentrant_entry(ctx: FileContext, expr: cst.BaseExpression) -> Edit | None:
    """The edit adding ``"use_reentrant": False`` to the dict literal (or ``dict(...)``) ``expr`` holds."""
    node = expr
    if isinstance(node, cst.Name):
        node = ctx.single_assignment(node) or node
    if isinstance(node, cst.Call) and dotted_name(node.func) == "dict":
        return Edit(node, set_keyword(node, "use_reentrant", "False"))
    if not isinstance(node, cst.Dict):
        return None
    keys = [e.key for e in node.elements if isinstance(e, cst.DictElement)]
    key = string_like(keys[0] if keys else cst.SimpleString('""'), "use_reentrant")
    entry = cst.DictElement(key, cst.Name("False"))
    elements = list(node.elements)
    if not elements:
        return Edit(node, node.with_changes(elements=[entry]))
    last = elements[-1]
    if isinstance(last.comma, cst.Comma):
        # A trailing comma: one entry a line, usually. The new entry takes the old one's
        # separator from the entries before it, or the layout after ``{``.
        previous = elements[-2].comma if len(elements) > 1 else None
        separator = previous if isinstance(previous, cst.Comma) else cst.Comma(whitespace_after=node.lbrace.whitespace_after)
        elements[-1] = last.with_changes(comma=separator)
        elements.append(entry.with_changes(comma=last.comma))
    else:
        elements[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        elements.append(entry)
    return Edit(node, node.with_changes(elements=elements))


class CheckpointingReentrant(Rule):
    code = "ADV502"
    name = "checkpointing-reentrant"
    summary = "Activation checkpointing that runs torch's reentrant variant."
    guide = GUIDE_CHECKPOINTING
    fix_applicability = Applicability.SAFE
    why = """
        `torch.utils.checkpoint.checkpoint` and `checkpoint_sequential` still default to the
        reentrant implementation when `use_reentrant` is not passed (torch 2.13 warns on every
        call and says the argument will become required). PyTorch recommends
        `use_reentrant=False`: it stops recomputation as soon as the needed activations are
        rebuilt, supports keyword arguments, `torch.autograd.grad` and nested checkpoints,
        works with DDP without `static_graph`, and computes gradients for the checkpointed
        parameters even when no input requires grad (the reentrant one silently drops them).

        transformers 5 already passes `use_reentrant=False` from
        `gradient_checkpointing_enable()` / `TrainingArguments(gradient_checkpointing=True)`,
        so those are not reported; but a `gradient_checkpointing_kwargs` dict without the key
        replaces that default and falls back to torch's reentrant one, and so does PEFT's
        `prepare_model_for_kbit_training(model)` (it passes `{}` and adds an
        input-gradient hook that only the reentrant variant needs).
    """
    example = """
        from torch.utils.checkpoint import checkpoint
        hidden = checkpoint(block, hidden)
    """
    use_instead = """
        from torch.utils.checkpoint import checkpoint
        hidden = checkpoint(block, hidden, use_reentrant=False)
    """
    silent_when = """
        - `use_reentrant` is passed (either value: `True` is an explicit choice), or may be
          passed through unknown `**kwargs`;
        - `model.gradient_checkpointing_enable()` / `TrainingArguments(gradient_checkpointing=True)`
          without kwargs (transformers 5 defaults to non-reentrant), or with a dict that
          cannot be resolved; the Trainer turns an empty dict into the default too. Where the
          project's requirements admit transformers 4 (`transformers==4.31.0`,
          `transformers>=4.28`), whose default is `{"use_reentrant": True}`, they are
          reported, and so is a `TrainingArguments` dataclass field defaulting to True and
          PEFT's old `prepare_model_for_int8_training`; the kwargs fix needs transformers
          4.35, so it is advice where an older one is admitted;
        - `prepare_model_for_kbit_training(..., use_gradient_checkpointing=False)`, or in a
          file that loads no quantized model (PEFT then enables no checkpointing);
        - other libraries' checkpoint functions (DeepSpeed, fairscale, Megatron);
        - the file is written for an XLA / Neuron / HPU device too (it imports `torch_xla`,
          `neuronx_distributed`, ...): torch_xla's checkpoint raises on `use_reentrant=False`.
          A `torch.xpu` branch is not such a device: torch's eager XPU backend runs torch's
          own checkpoint.

        The fix is advice where the project ships a DeepSpeed config with ZeRO stage 3 (a JSON
        at its root or in a config folder there): non-reentrant recomputation has reported
        failures on the parameters ZeRO-3 partitions, and which config a run uses is chosen on
        the command line. It is advice too where the call passes keywords on to the function,
        and for `prepare_model_for_kbit_training` where the model runs its own code from the
        Hub (`trust_remote_code=True`: ChatGLM's keeps torch's reentrant checkpoint whatever
        the kwargs say, and peft, told non-reentrant, skips the input-gradient hook that one
        needs).
    """
    valid = [
        Valid(
            """
            import torch.utils.checkpoint
            out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            """
        ),
        Valid(
            """
            from torch.utils.checkpoint import checkpoint
            out = checkpoint(block, x, use_reentrant=True)
            """,
            note="an explicit choice",
        ),
        Valid(
            """
            from torch.utils.checkpoint import checkpoint
            out = checkpoint(block, x, **ckpt_kwargs)
            """,
            note="unknown kwargs may carry use_reentrant",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            model.gradient_checkpointing_enable()
            args = TrainingArguments("out", gradient_checkpointing=True)
            """,
            note="transformers 5 defaults to use_reentrant=False",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", gradient_checkpointing=True, gradient_checkpointing_kwargs={})
            """,
            note="the Trainer turns an empty dict into the non-reentrant default",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", gradient_checkpointing=False, gradient_checkpointing_kwargs={"preserve_rng_state": False})
            """,
            note="checkpointing off",
        ),
        Valid(
            """
            from peft import prepare_model_for_kbit_training
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            model = prepare_model_for_kbit_training(model)
            """,
            note="no quantized model: PEFT enables no checkpointing",
        ),
        Valid(
            """
            from peft import prepare_model_for_kbit_training
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("m", load_in_4bit=True)
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
            """,
        ),
        Valid(
            """
            import deepspeed
            out = deepspeed.checkpointing.checkpoint(block, x)
            """,
            note="DeepSpeed's own checkpoint",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch.utils.checkpoint as cp
            def forward(self, x):
                for block in self.blocks:
                    x = cp.checkpoint(block, x)
                return x
            """,
            fixed="""
            import torch.utils.checkpoint as cp
            def forward(self, x):
                for block in self.blocks:
                    x = cp.checkpoint(block, x, use_reentrant=False)
                return x
            """,
        ),
        Invalid(
            """
            import torch.utils.checkpoint
            def custom_forward(*inputs):
                return block(*inputs)
            hidden = torch.utils.checkpoint.checkpoint(custom_forward, hidden, timestep=timestep)
            """,
            note="keywords for the function: only the non-reentrant variant passes them on, so no fix",
        ),
        Invalid(
            """
            import torch.utils.checkpoint
            from diffusers.utils import is_torch_version
            if is_torch_version(">=", "1.11.0"):
                hidden = torch.utils.checkpoint.checkpoint(block, hidden, use_reentrant=False)
            else:
                hidden = torch.utils.checkpoint.checkpoint(block, hidden)
            """,
            note="the branch for older torch: advice, no edit (Moore-AnimateAnyone, hallo)",
        ),
        Invalid(
            """
            from torch.utils.checkpoint import checkpoint_sequential
            out = checkpoint_sequential(self.layers, 4, x)
            """,
            fixed="""
            from torch.utils.checkpoint import checkpoint_sequential
            out = checkpoint_sequential(self.layers, 4, x, use_reentrant=False)
            """,
        ),
        Invalid(
            """
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'preserve_rng_state': False})
            """,
            fixed="""
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'preserve_rng_state': False, 'use_reentrant': False})
            """,
            note="a kwargs dict without the key replaces transformers' non-reentrant default",
        ),
        Invalid(
            """
            from transformers import TrainingArguments
            gc_kwargs = dict(preserve_rng_state=False)
            args = TrainingArguments("out", gradient_checkpointing=True, gradient_checkpointing_kwargs=gc_kwargs)
            """,
            fixed="""
            from transformers import TrainingArguments
            gc_kwargs = dict(preserve_rng_state=False, use_reentrant=False)
            args = TrainingArguments("out", gradient_checkpointing=True, gradient_checkpointing_kwargs=gc_kwargs)
            """,
        ),
        Invalid(
            """
            import torch
            from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
            from transformers import AutoModelForCausalLM, BitsAndBytesConfig
            bnb_config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", quantization_config=bnb_config)
            model = prepare_model_for_kbit_training(model)
            model = get_peft_model(model, LoraConfig(r=8))
            """,
            fixed="""
            import torch
            from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
            from transformers import AutoModelForCausalLM, BitsAndBytesConfig
            bnb_config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", quantization_config=bnb_config)
            model = prepare_model_for_kbit_training(model, gradient_checkpointing_kwargs={"use_reentrant": False})
            model = get_peft_model(model, LoraConfig(r=8))
            """,
            note="PEFT passes {} and torch falls back to reentrant",
        ),
        Invalid(
            """
            from peft import prepare_model_for_kbit_training
            from transformers import AutoModel, BitsAndBytesConfig
            q_config = BitsAndBytesConfig(load_in_4bit=True)
            model = AutoModel.from_pretrained("THUDM/chatglm2-6b", quantization_config=q_config, trust_remote_code=True)
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
            """,
            note="the model's own code checkpoints reentrantly whatever the kwargs say: advice, no edit (FinGPT's ChatGLM2 notebook)",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if ctx.facts.devices.other_runtime:
            return  # torch_xla's checkpoint raises on use_reentrant=False, and Neuron scripts swap it in
        yield from self._torch_checkpoints(ctx)
        yield from self._transformers_kwargs(ctx)
        yield from self._prepare_kbit(ctx)
        yield from self._transformers_4_defaults(ctx)

    def _torch_checkpoints(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(TORCH_CHECKPOINT, TORCH_CHECKPOINT_SEQUENTIAL):
            sequential = ctx.qualname(call.func) == TORCH_CHECKPOINT_SEQUENTIAL
            if ctx.argument(call, "use_reentrant", 3 if sequential else None) is not MISSING:
                continue
            spelling = dotted_name(call.func) or "checkpoint"
            message = (
                f"`{spelling}(...)` without `use_reentrant` runs the reentrant variant (torch warns it will "
                f"require the argument); pass `use_reentrant=False`, the recommended one (guide: {GUIDE_CHECKPOINTING})"
            )
            fix = self.fix(
                "Pass `use_reentrant=False`", Edit(call, set_keyword(call, "use_reentrant", "False")), requires=[("torch", "1.11")]
            )
            forwarded = [arg.keyword.value for arg in call.args if arg.keyword is not None and arg.keyword.value not in CHECKPOINT_OWN_KEYWORDS]
            if forwarded:
                # The reentrant variant refuses keywords for the function; the other passes them on,
                # and a ``custom_forward(*inputs)`` then raises (Moore-AnimateAnyone's transformer_3d).
                message = message.replace(" (guide: ", f"; the call also passes `{forwarded[0]}=`, which only the non-reentrant variant hands to the function, so the fix is left as advice (guide: ", 1)
                fix = None
            zero3 = shipped_zero3_config(ctx) if fix is not None else None
            if zero3 is not None:
                # ChatGLM-Finetuning: non-reentrant recomputation meets parameters ZeRO-3 has
                # already re-partitioned (reported failures: "weight must be 2-D").
                message = message.replace(" (guide: ", f"; the project trains under DeepSpeed ZeRO-3 (`{zero3}`), where non-reentrant checkpointing has reported failures on partitioned parameters: try it there first, so the fix is left as advice (guide: ", 1)
                fix = None
            yield self.report(call, message, fix)

    def _transformers_kwargs(self, ctx: FileContext) -> Iterator[Finding]:
        sites: list[tuple[cst.Call, cst.BaseExpression, bool]] = []
        for call in ctx.method_calls("gradient_checkpointing_enable", "activation_checkpointing_enable"):
            method = call.func.attr.value  # type: ignore[attr-defined]
            keyword = "gradient_checkpointing_kwargs" if method == "gradient_checkpointing_enable" else "activation_checkpointing_kwargs"
            expr = ctx.argument(call, keyword, 0)
            if expr is not None and expr is not MISSING:
                sites.append((call, expr, True))  # type: ignore[arg-type]
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            for switch, keyword in (
                ("gradient_checkpointing", "gradient_checkpointing_kwargs"),
                ("activation_checkpointing", "activation_checkpointing_kwargs"),
            ):
                expr = ctx.argument(call, keyword)
                if expr is None or expr is MISSING or not _resolves_true(ctx, call, switch):
                    continue
                sites.append((call, expr, False))  # type: ignore[arg-type]
        for call, expr, empty_counts in sites:
            entries = ctx.values.dict_entries(expr)
            if entries is None or "use_reentrant" in entries or (not entries and not empty_counts):
                continue
            message = (
                "A checkpointing kwargs dict without `\"use_reentrant\"` replaces transformers' non-reentrant "
                f"default with torch's reentrant one; add `\"use_reentrant\": False` (guide: {GUIDE_CHECKPOINTING})"
            )
            edit = _with_non_reentrant_entry(ctx, expr)
            fix = self.fix('Add `"use_reentrant": False`', edit) if edit is not None else None
            yield self.report(call, message, fix)

    def _prepare_kbit(self, ctx: FileContext) -> Iterator[Finding]:
        calls = ctx.calls(*PREPARE_KBIT)
        if not calls or not _quantized_load(ctx):
            return
        for call in calls:
            enabled = ctx.argument(call, "use_gradient_checkpointing", PREPARE_KBIT_POSITION["use_gradient_checkpointing"])
            if enabled is None or (enabled is not MISSING and ctx.values.value_of(enabled) is not True):  # type: ignore[arg-type]
                continue
            kwargs = ctx.argument(call, "gradient_checkpointing_kwargs", PREPARE_KBIT_POSITION["gradient_checkpointing_kwargs"])
            if kwargs is None:
                continue
            if kwargs is MISSING:
                edit: Edit | None = Edit(call, set_keyword(call, "gradient_checkpointing_kwargs", NON_REENTRANT))
            else:
                entries = ctx.values.dict_entries(kwargs)  # type: ignore[arg-type]
                if entries is None or "use_reentrant" in entries:
                    continue
                edit = _with_non_reentrant_entry(ctx, kwargs)  # type: ignore[arg-type]
            message = (
                "`prepare_model_for_kbit_training` enables reentrant checkpointing (and an input-gradient hook it "
                f"needs); pass `gradient_checkpointing_kwargs={NON_REENTRANT}` (guide: {GUIDE_CHECKPOINTING})"
            )
            # peft 0.6 added ``gradient_checkpointing_kwargs`` (huggingface/peft#1036).
            fix = self.fix("Use non-reentrant checkpointing", edit, requires=[("peft", "0.6")]) if edit is not None else None
            remote = remote_code_load(ctx) if fix is not None else None
            if remote is not None:
                # FinGPT's ChatGLM2 notebook: the model's own code keeps torch's reentrant
                # checkpoint and ignores the kwargs, while peft, told non-reentrant, skips the
                # input-gradient hook: the frozen 4-bit embeddings then leave backward nothing.
                message = message.replace(" (guide: ", f"; the model runs its own code from its Hub repository (`trust_remote_code=`), which may checkpoint its own way and ignore the kwargs, and peft then skips the input-gradient hook that reentrant checkpointing needs, so the fix is left as advice (guide: ", 1)
                fix = None
            again = self._reenabled_reentrant(ctx) if fix is not None else None
            if again is not None:
                # LLM-Finetuning-Toolkit (transformers 4.40): peft then skips the input-gradient
                # hook, the Trainer turns reentrant checkpointing back on, and backward raises.
                message = message.replace(" (guide: ", f"; {again} enables checkpointing again with transformers' default, reentrant before transformers 5, and without the input-gradient hook this would skip: set `gradient_checkpointing_kwargs` there too, so the fix is left as advice (guide: ", 1)
                fix = None
            yield self.report(call, message, fix)

    def _transformers_4_defaults(self, ctx: FileContext) -> Iterator[Finding]:
        """Checkpointing switched on without kwargs where the project runs transformers 4:
        ``gradient_checkpointing_enable()`` then passes ``{"use_reentrant": True}`` (qlora and
        TinyLlama pin 4.31; alpaca-lora's PEFT calls it for them)."""
        if not (
            ctx.calls(*TRAINING_ARGUMENTS)
            or ctx.facts.frameworks.parsed_training_arguments
            or ctx.method_calls("gradient_checkpointing_enable")
            or ctx.calls(*PREPARE_INT8)
        ):
            return
        older = older_allowed(ctx, "transformers", "5.0")
        if older is None:
            return  # transformers 5 passes use_reentrant=False itself
        if any(function.name.value == "gradient_checkpointing_enable" for function in ctx.nodes(cst.FunctionDef)):
            return  # the file's own method of that name
        tail = f"; with transformers before 5 ({older}), that means `{{\"use_reentrant\": True}}`: torch's reentrant variant"
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            if not _resolves_true(ctx, call, "gradient_checkpointing") or ctx.argument(call, "gradient_checkpointing_kwargs") is not MISSING:
                continue
            yield self._without_kwargs(call, "`gradient_checkpointing=True`", tail)
        if not ctx.assignments_to_attribute("gradient_checkpointing_kwargs"):
            for name in ctx.facts.frameworks.parsed_training_arguments:
                switch = ctx.values.attribute(name, "gradient_checkpointing")
                if switch is None or switch.value is not True or ctx.values.attribute(name, "gradient_checkpointing_kwargs") is not None:
                    continue
                message = (
                    f"The training arguments' `gradient_checkpointing` defaults to True and no "
                    f"`gradient_checkpointing_kwargs` is set{tail}; give the dataclass a "
                    f"`gradient_checkpointing_kwargs` defaulting to `{NON_REENTRANT}` (transformers >= 4.35) "
                    f"(guide: {GUIDE_CHECKPOINTING})"
                )
                yield self.report(ctx.statement_of(switch.node) or switch.node, message)
                break  # one dataclass field, however many names parse it
        if not any(q.split(".")[0] in ("transformers", "peft") for q in ctx.imports.aliases.values()):
            return
        for call in ctx.method_calls("gradient_checkpointing_enable"):
            if not call.args:
                yield self._without_kwargs(call, "`gradient_checkpointing_enable()`", tail)
        if not _quantized_load(ctx):
            return
        for call in ctx.calls(*PREPARE_INT8):
            enabled = ctx.argument(call, "use_gradient_checkpointing", 1)
            if enabled is None or (enabled is not MISSING and ctx.values.value_of(enabled) is not True):  # type: ignore[arg-type]
                continue
            message = (
                f"`prepare_model_for_int8_training` calls `gradient_checkpointing_enable()` without kwargs{tail}; "
                f"PEFT 0.6 renamed it `prepare_model_for_kbit_training`, which takes "
                f"`gradient_checkpointing_kwargs={NON_REENTRANT}` (guide: {GUIDE_CHECKPOINTING})"
            )
            yield self.report(call, message)

    def _without_kwargs(self, call: cst.Call, switch: str, tail: str) -> Finding:
        """``switch`` (a ``TrainingArguments`` or ``gradient_checkpointing_enable()`` call) turns
        checkpointing on without kwargs: the fix passes the non-reentrant ones."""
        message = (
            f"{switch} without `gradient_checkpointing_kwargs`{tail}; pass "
            f"`gradient_checkpointing_kwargs={NON_REENTRANT}` (guide: {GUIDE_CHECKPOINTING})"
        )
        edit = Edit(call, set_keyword(call, "gradient_checkpointing_kwargs", NON_REENTRANT))
        return self.report(call, message, self.fix("Use non-reentrant checkpointing", edit, requires=[TRANSFORMERS_KWARGS]))

    @staticmethod
    def _reenabled_reentrant(ctx: FileContext) -> str | None:
        """A later ``TrainingArguments(gradient_checkpointing=...)`` / ``gradient_checkpointing_enable()``
        of the file without ``gradient_checkpointing_kwargs``, on a transformers older than 5
        (whose default is the reentrant variant); what it is, or None."""
        if older_allowed(ctx, "transformers", "5.0") is None:
            return None
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            enabled = ctx.argument(call, "gradient_checkpointing")
            if enabled is MISSING or ctx.argument(call, "gradient_checkpointing_kwargs") is not MISSING:
                continue
            if enabled is not None and ctx.values.value_of(enabled) is False:  # type: ignore[arg-type]
                continue
            return f"`{dotted_name(call.func) or 'TrainingArguments'}(gradient_checkpointing=...)`"
        for call in ctx.method_calls("gradient_checkpointing_enable"):
            if not call.args:
                return "`gradient_checkpointing_enable()`"
        return None


# -- ADV505 -------------------------------------------------------------------------------------------
EMPTY_CACHE = (
    "torch.cuda.empty_cache",
    "torch.cuda.memory.empty_cache",
    "torch.accelerator.empty_cache",
    "torch.accelerator.memory.empty_cache",
    "torch.xpu.empty_cache",
    "torch.mps.empty_cache",
)
def _removal(ctx: FileContext, statement: cst.CSTNode) -> Edit | None:
    """Remove a statement and keep the code valid: a device check left empty goes too, an
    emptied block gets ``pass``."""
    parent = ctx.parent.get(statement)
    if isinstance(statement, cst.SimpleStatementSuite) or (
        isinstance(parent, cst.IndentedBlock) and len(parent.body) == 1
    ):
        owner = parent if isinstance(statement, cst.SimpleStatementSuite) else ctx.parent.get(parent)
        if (
            isinstance(owner, cst.If)
            and owner.orelse is None
            and ctx.facts.devices.gpu_test(owner.test, switches=True) is not Tri.UNKNOWN
            and isinstance(ctx.parent.get(owner), (cst.IndentedBlock, cst.Module))
        ):
            return _removal(ctx, owner)
        if isinstance(statement, cst.SimpleStatementSuite):
            return Edit(statement, statement.with_changes(body=[cst.Pass()]))
        if isinstance(statement, cst.SimpleStatementLine):
            return Edit(statement, statement.with_changes(body=[cst.Pass()]))
        return Edit(statement, cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=statement.leading_lines))  # type: ignore[attr-defined]
    if isinstance(parent, cst.Module) and len(parent.body) == 1:
        return None
    return Edit(statement, cst.RemoveFromParent())


def remove_call_statement(ctx: FileContext, call: cst.Call) -> Edit | None:
    """The edit removing the statement ``call`` forms (``torch.cuda.empty_cache()`` alone)."""
    expr = ctx.parent.get(call)
    if not isinstance(expr, cst.Expr) or expr.value is not call:
        return None
    line = ctx.parent.get(expr)
    if not isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return None
    if len(line.body) > 1:
        kept = [s for s in line.body if s is not expr]
        kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return Edit(line, line.with_changes(body=kept))
    return _removal(ctx, line)


# A comment that ties an ``empty_cache()`` call to a reported problem: a link, or an issue named.
# A belief ("against OOM") is what the rule's message answers; a documented workaround is not.
_MEMORY_NOTE = re.compile(r"(?i)https?://|\bissues?\b|(?<![\w#])#\d{2,}\b")


class EmptyCacheInLoop(Rule):
    code = "ADV505"
    name = "empty-cache-in-loop"
    summary = "`torch.cuda.empty_cache()` on every training step."
    guide = GUIDE_EMPTY_CACHE
    fix_applicability = Applicability.UNSAFE
    why = """
        `torch.cuda.empty_cache()` returns the caching allocator's free blocks to the driver.
        The next step needs the same memory again and gets it through `cudaMalloc`, which
        synchronizes the device; the guide puts the cost at ~10% slower training. It frees no
        memory that live tensors hold, so it cannot prevent an out-of-memory error that the
        allocator's own retry (it empties the cache itself before failing) would not. Where
        fragmentation really causes OOMs, empty the cache every N steps
        (`torch_empty_cache_steps=N` for the Trainer), or set
        `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    """
    example = """
        for batch in loader:
            loss = model(batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            torch.cuda.empty_cache()
    """
    use_instead = """
        for batch in loader:
            loss = model(batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    silent_when = """
        - the call is under a condition: `if step % 100 == 0`, `if torch.cuda.memory_allocated() > limit`,
          a flag (only `if torch.cuda.is_available():` and other device checks are seen through);
        - in an `except` handler (recovery from an OOM), before or after the loop, in an
          evaluation loop, or in an epoch loop around a helper that holds the step loop;
        - `torch_empty_cache_steps` larger than 1;
        - the file places its work on the CPU, or no file of its project moves anything to a
          device: without CUDA work the call releases nothing.

        The fix removes the call (and a device check left empty; `pass` where a block would
        be emptied). `torch_empty_cache_steps=1` loses its argument. Where a comment above the
        call in its function ties it to a reported problem (a link, an issue), it is the
        author's documented workaround: reported, left as advice. A comment that only states
        the belief ("against OOM") does not stop the fix: that belief is what the message answers.
    """
    valid = [
        Valid(
            """
            import torch
            for step, batch in enumerate(loader):
                loss = model(batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if loss.item() > 2 * running_loss:
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    torch.cuda.empty_cache()
                    model.load_state_dict(torch.load(last_checkpoint))
            """,
            note="a recovery branch that steps again: the every-iteration step is outside it (DeCLIP's `if resume:`)",
        ),
        Valid(
            """
            import torch
            for step, batch in enumerate(loader):
                loss = model(batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if step % 100 == 0:
                    torch.cuda.empty_cache()
            """
        ),
        Valid(
            """
            import torch

            def maybe_demo(step):
                if (step - 1) % demo_every != 0:
                    return
                sample(model)
                torch.cuda.empty_cache()

            model = Net().cuda()
            for step, batch in enumerate(loader):
                loss = model(batch.cuda()).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                maybe_demo(step)
            """,
            note="a helper that returns unless the step is the N-th runs every N steps (stable-audio-tools' demos)",
        ),
        Valid(
            """
            import torch
            device = torch.device("cpu")
            model = Net().to(device)
            for batch in loader:
                loss = model(batch.to(device)).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            """,
            note="nothing runs on CUDA: the call releases nothing (GMAN-PyTorch trains on the CPU)",
        ),
        Valid(
            """
            import torch
            for batch in loader:
                try:
                    loss = model(batch).loss
                    loss.backward()
                    optimizer.step()
                except torch.cuda.OutOfMemoryError:
                    torch.cuda.empty_cache()
                optimizer.zero_grad()
            """,
            note="recovery from an OOM",
        ),
        Valid(
            """
            import torch
            for batch in loader:
                loss = model(batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if torch.cuda.memory_allocated() > 22e9:
                    torch.cuda.empty_cache()
            """,
            note="only when memory runs short",
        ),
        Valid(
            """
            import torch
            def train_one_epoch(loader):
                for batch in loader:
                    model(batch).loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            for epoch in range(10):
                train_one_epoch(loader)
                torch.cuda.empty_cache()
            """,
            note="once per epoch",
        ),
        Valid(
            """
            import torch

            class BudgetedFTQ:
                def run(self):
                    for self.epoch in range(self.epochs):
                        self._epoch()

                def _epoch(self):
                    self._fit(self.compute_targets())

                def compute_targets(self):
                    with torch.no_grad():
                        values = self.net(self.states)
                    torch.cuda.empty_cache()
                    return values

                def _fit(self, targets):
                    for _ in range(self.regression_epochs):
                        self._gradient_step(targets)
                    torch.cuda.empty_cache()

                def _gradient_step(self, targets):
                    loss = self.loss(self.net(self.states), targets)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            """,
            note="once per fitted-Q iteration, around a helper whose own loop holds the step (rl-agents' BFTQ)",
        ),
        Valid(
            """
            import torch
            model.eval()
            for batch in loader:
                with torch.no_grad():
                    outputs.append(model(batch))
                torch.cuda.empty_cache()
            """,
            note="inference loop",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", torch_empty_cache_steps=50)
            """
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from transformers import Trainer

            class DPOTrainer(Trainer):
                def training_step(self, model, inputs):
                    # fix memory increasing issue: https://github.com/huggingface/trl/issues/1377
                    loss = super().training_step(model, inputs)
                    torch.cuda.empty_cache()
                    return loss
            """,
            note="a comment points to the issue it works around (VL-RLHF): the author's documented workaround, advice",
        ),
        Invalid(
            """
            import torch
            for batch in loader:
                loss = model(batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                torch.cuda.empty_cache()
            """,
            fixed="""
            import torch
            for batch in loader:
                loss = model(batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            unsafe=True,
        ),
        Invalid(
            """
            import gc
            import torch
            for step, batch in enumerate(loader):
                loss = model(batch).loss / accum
                loss.backward()
                if (step + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                gc.collect(); torch.cuda.empty_cache()
            """,
            fixed="""
            import gc
            import torch
            for step, batch in enumerate(loader):
                loss = model(batch).loss / accum
                loss.backward()
                if (step + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                gc.collect()
            """,
            count=2,
            unsafe=True,
            note="a device check is not a guard; two calls on every micro-step",
        ),
        Invalid(
            """
            import torch
            from torch.cuda import empty_cache

            class Runner:
                def train_step(self, batch):
                    loss = self.model(batch).loss
                    loss.backward()
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                    with torch.no_grad():
                        empty_cache()

                def fit(self, loader):
                    for batch in loader:
                        self.train_step(batch)
            """,
            fixed="""
            import torch
            from torch.cuda import empty_cache

            class Runner:
                def train_step(self, batch):
                    loss = self.model(batch).loss
                    loss.backward()
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                    with torch.no_grad():
                        pass

                def fit(self, loader):
                    for batch in loader:
                        self.train_step(batch)
            """,
            unsafe=True,
            note="in a helper the loop calls every step",
        ),
        Invalid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", bf16=True, torch_empty_cache_steps=1)
            """,
            fixed="""
            from transformers import TrainingArguments
            args = TrainingArguments("out", bf16=True)
            """,
            unsafe=True,
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        calls = ctx.calls(*EMPTY_CACHE)
        devices = ctx.facts.devices
        if calls and devices.gpu.no and (devices.placements or devices.project_places_nothing):
            calls = []  # the work is placed on the CPU, or nothing is placed anywhere (GMAN-PyTorch): it releases nothing
        if calls:
            for call in (c for c in calls if ctx.facts.steps.step_of(c) is not None):
                spelling = dotted_name(call.func) or "empty_cache"
                message = (
                    f"`{spelling}()` runs on every training step: the next step must `cudaMalloc` the freed blocks "
                    f"again (~10% slower); remove it, or empty the cache every N steps (guide: {GUIDE_EMPTY_CACHE})"
                )
                edit = remove_call_statement(ctx, call)
                fix = self.fix(f"Remove `{spelling}()`", edit) if edit is not None else None
                finding = self.report(call, message, fix)
                if fix is not None and self._explained(ctx, call):
                    finding = finding.as_advice("a comment above it points to a reported issue: the author's documented workaround, left to them")
                yield finding
        yield from self._trainer_every_step(ctx)

    @staticmethod
    def _explained(ctx: FileContext, call: cst.Call) -> bool:
        """A comment in the function, above the call, that points to an issue (VL-RLHF's ``# fix
        memory increasing issue: https://github.com/huggingface/trl/issues/1377``)."""
        function = ctx.enclosing(call, cst.FunctionDef)
        if not isinstance(function, cst.FunctionDef):
            return False
        comments = ctx.comments_matching(_MEMORY_NOTE)
        if not comments:
            return False
        start, line = ctx.position(function)[0], ctx.position(call)[0]
        return any(start <= ctx.position(comment)[0] <= line for comment in comments)

    def _trainer_every_step(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            expr = ctx.argument(call, "torch_empty_cache_steps")
            if expr is None or expr is MISSING or ctx.values.value_of(expr) != 1:  # type: ignore[arg-type]
                continue
            message = (
                "`torch_empty_cache_steps=1` empties the CUDA cache after every step (~10% slower); drop it, or "
                f"use a larger interval where fragmentation causes OOMs (guide: {GUIDE_EMPTY_CACHE})"
            )
            arg = ctx.keyword_arg(call, "torch_empty_cache_steps")
            fix = None
            if arg is not None and isinstance(arg.value, cst.Integer):
                fix = self.fix("Drop `torch_empty_cache_steps=1`", Edit(call, remove_keyword(call, "torch_empty_cache_steps")))
            yield self.report(call, message, fix)
