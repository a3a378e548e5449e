"""The precision regime: autocast regions and their dtypes, GradScalers, half weights, what the
frameworks are told (``TrainingArguments(bf16=...)``, ``Accelerator(mixed_precision=...)``,
Lightning ``precision=``), whether the file touches reduced precision at all, whether a site
certainly trains in full fp32, and what the model computes (matmuls, convolutions) for TF32.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from advisor.apis import ACCELERATOR, DATA_PARALLEL, FABRIC, LIGHTNING_TRAINER, TRAINING_ARGUMENTS
from advisor.context import MISSING, FileContext
from advisor.facts.frameworks import ACCELERATE, DELEGATED, FABRIC_LOOP, HF_TRAINER, LIGHTNING_FIT, LOOP, TrainingSite
from advisor.names import dotted_name
from advisor.values import string_value

if TYPE_CHECKING:
    from advisor.loops import TrainingLoop


AUTOCAST = "torch.autocast"  # torch.amp.autocast is folded into it by the import table


CUDA_AUTOCAST = "torch.cuda.amp.autocast"


CUDA_SCALER = "torch.cuda.amp.GradScaler"


AMP_SCALER = "torch.amp.GradScaler"


SCALERS = (CUDA_SCALER, AMP_SCALER, "torch.GradScaler")


FP16 = "float16"


BF16 = "bfloat16"


TORCH_DTYPES = {
    "torch.float16": FP16,
    "torch.half": FP16,
    "torch.bfloat16": BF16,
    "torch.float32": "float32",
    "torch.float": "float32",
    "torch.float64": "float64",
    "torch.double": "float64",
}


# Parameter positions: torch.autocast(device_type, dtype, enabled, cache_enabled) and
# torch.cuda.amp.autocast(enabled, dtype, cache_enabled).
AUTOCAST_POSITION = {"device_type": 0, "dtype": 1, "enabled": 2}


CUDA_AUTOCAST_PARAMETERS = ("enabled", "dtype", "cache_enabled")


# GradScaler(init_scale, growth_factor, backoff_factor, growth_interval, enabled); torch.amp's
# takes ``device`` first.
SCALER_ENABLED_POSITION = {CUDA_SCALER: 4, AMP_SCALER: 5, "torch.GradScaler": 5}


# A test that names one of these chooses between bf16 and something else: fp16 under it is
# the user's choice or the fallback for GPUs without bf16, never an oversight.
_BF16_CHOICE = re.compile(r"bf16|bfloat16|get_device_capability", re.IGNORECASE)


# A test that names one of these makes a GradScaler conditional on fp16 being used.
_FP16_CHOICE = re.compile(r"fp16|float16|half", re.IGNORECASE)


# Keywords that load or compute model weights in a dtype (from_pretrained, BitsAndBytesConfig).
_WEIGHT_DTYPE_KEYWORDS = ("torch_dtype", "bnb_4bit_compute_dtype")


# -- what a file's autocasts do ---------------------------------------------------------------
@dataclass(frozen=True)
class Dtype:
    """A dtype as the code spells it, and where a fix would change it."""

    name: str  # "float16", "bfloat16", ...
    # The node that decides it: a ``torch.float16`` reference, or the string key of a
    # ``{"float16": torch.float16, ...}[key]`` lookup. None when the argument is absent.
    node: cst.CSTNode | None = None
    # For a dict lookup: the key that selects bf16 in the same dict, if there is one.
    bf16_key: str | None = None


@dataclass(frozen=True)
class Autocast:
    call: cst.Call
    deprecated: bool  # torch.cuda.amp.autocast
    device: str | None  # "cuda", "cpu", ... or None when unknown
    dtype: Dtype | None  # None when unknown
    disabled: bool  # ``enabled=False``: no autocast region at all

    @property
    def on_cuda(self) -> bool:
        return self.device is not None and self.device.startswith("cuda")

    @property
    def certainly_not_cuda(self) -> bool:
        return self.disabled or (self.device is not None and not self.on_cuda)

    @property
    def fp16(self) -> bool:
        return not self.disabled and self.on_cuda and self.dtype is not None and self.dtype.name == FP16

    @property
    def bf16(self) -> bool:
        return not self.disabled and self.dtype is not None and self.dtype.name == BF16


_FP16_NAME = re.compile(r"fp16|float16|half", re.I)


def fp16_flag(ctx: FileContext, call: cst.Call) -> str | None:
    """The flag, named for fp16, that turns this autocast on (``enabled=args.fp16``, or
    ``enabled=self.use_amp`` with ``self.use_amp = args.fp16``): the user asked for fp16 by
    that name, and bf16 under ``--fp16`` would be a surprise. None otherwise."""
    enabled = ctx.argument(call, "enabled", 0 if (ctx.qualname(call.func) or "").startswith("torch.cuda.amp") else 2)
    if not isinstance(enabled, cst.BaseExpression) or enabled is MISSING:
        return None
    expr: cst.BaseExpression | None = enabled
    for _ in range(4):
        if expr is None:
            return None
        for node in [*ctx.walk(expr, cst.Attribute), *ctx.walk(expr, cst.Name)]:
            spelling = dotted_name(node)
            if spelling is not None and _FP16_NAME.search(spelling.split(".")[-1]):
                return spelling
        spelling = dotted_name(expr)
        if isinstance(expr, cst.Name):
            expr = ctx.single_assignment(expr)
        elif spelling is not None and isinstance(expr, cst.Attribute):
            assignments = ctx.attribute_assignments.get(spelling, [])
            expr = assignments[0].value if len(assignments) == 1 and isinstance(assignments[0], cst.Assign) else None
        else:
            return None
    return None


def resolve_dtype(ctx: FileContext, expr: cst.BaseExpression, depth: int = 0) -> Dtype | None:
    """The torch dtype ``expr`` evaluates to: ``torch.float16``, a name bound once to one,
    or a lookup ``{"float16": torch.float16, ...}[key]`` with a known key. Else None."""
    if depth > 8:
        return None
    if isinstance(expr, (cst.Name, cst.Attribute)):
        qualname = ctx.qualname(expr)
        if qualname in TORCH_DTYPES:
            return Dtype(TORCH_DTYPES[qualname], expr)
    if isinstance(expr, cst.Name):
        if expr.value in ctx.declared_global:
            return None
        value = ctx.single_assignment(expr)
        return None if value is None else resolve_dtype(ctx, value, depth + 1)
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        key = ctx.values.resolve(expr.slice[0].slice.value)
        entries = ctx.values.dict_entries(expr.value)
        if key is None or not isinstance(key.value, str) or entries is None or key.value not in entries:
            return None
        chosen = resolve_dtype(ctx, entries[key.value], depth + 1)
        if chosen is None:
            return None
        bf16_key = None
        for other, value in entries.items():
            resolved = resolve_dtype(ctx, value, depth + 1)
            if resolved is not None and resolved.name == BF16:
                bf16_key = other
                break
        return Dtype(chosen.name, key.node, bf16_key)
    return None


def autocasts(ctx: FileContext) -> list[Autocast]:
    """Every ``torch.autocast`` / ``torch.cuda.amp.autocast`` call, read as far as it can be."""
    found = []
    for call in ctx.calls(AUTOCAST, CUDA_AUTOCAST):
        deprecated = ctx.qualname(call.func) == CUDA_AUTOCAST
        if deprecated:
            device: str | None = "cuda"
            enabled = ctx.argument(call, "enabled", 0)
        else:
            device_arg = ctx.argument(call, "device_type", AUTOCAST_POSITION["device_type"])
            device_value = ctx.values.resolve(device_arg) if device_arg else None
            device = device_value.value if device_value is not None and isinstance(device_value.value, str) else None
            if device is None and device_arg:
                device = _device_under_guard(ctx, call, device_arg)
            enabled = ctx.argument(call, "enabled", AUTOCAST_POSITION["enabled"])
        disabled = False
        if enabled is not MISSING and enabled is not None:
            enabled_value = ctx.values.resolve(enabled)
            disabled = enabled_value is not None and enabled_value.value is False
        dtype_arg = ctx.argument(call, "dtype", AUTOCAST_POSITION["dtype"])
        dtype: Dtype | None
        if dtype_arg is None:
            dtype = None
        elif dtype_arg is MISSING:
            # No dtype: float16 on CUDA, bfloat16 on CPU (torch's autocast defaults).
            if device is None:
                dtype = None
            else:
                dtype = Dtype(FP16 if device.startswith("cuda") else BF16)
        else:
            dtype = resolve_dtype(ctx, dtype_arg)
        found.append(Autocast(call, deprecated, device, dtype, disabled))
    return found


def _device_under_guard(ctx: FileContext, call: cst.Call, device: cst.BaseExpression) -> str | None:
    """The one device ``device`` can still name where ``call`` runs: nanoGPT's
    ``device_type = "cuda" if ... else "cpu"`` read under ``... if device_type == "cpu" else``."""
    if not isinstance(device, cst.Name):
        return None
    possible = ctx.values.candidates(device)
    if not possible or not all(isinstance(value, str) for value in possible):
        return None
    child: cst.CSTNode = call
    for ancestor in ctx.ancestors(call):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            compared = _compared_to(ancestor.test, device.value)
            if compared is not None:
                value, equal = compared
                in_body = child is ancestor.body
                possible = {v for v in possible if (v == value) == (equal == in_body)}
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            break
        child = ancestor
    return next(iter(possible)) if len(possible) == 1 else None


def _compared_to(test: cst.BaseExpression, name: str) -> tuple[str, bool] | None:
    """``(value, True)`` for ``name == "value"``, ``(value, False)`` for ``name != "value"``."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    target = test.comparisons[0]
    if not (isinstance(test.left, cst.Name) and test.left.value == name):
        return None
    if not isinstance(target.comparator, cst.SimpleString) or not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
        return None
    return string_value(target.comparator), isinstance(target.operator, cst.Equal)


def under_bf16_choice(ctx: FileContext, node: cst.CSTNode | None) -> bool:
    """Whether ``node`` sits in a branch of an ``if`` / conditional expression whose chain of
    tests mentions bf16 (``torch.cuda.is_bf16_supported()``, ``args.bf16``, ...)."""
    return _under_choice(ctx, node, _BF16_CHOICE)


def _under_choice(ctx: FileContext, node: cst.CSTNode | None, pattern: re.Pattern) -> bool:
    if node is None:
        return False
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            if any(_mentions(ctx, test, pattern) for test in _chain_tests(ctx, ancestor)):
                return True
    return False


def _chain_tests(ctx: FileContext, node: cst.If | cst.IfExp) -> list[cst.BaseExpression]:
    # Climb to the head of an if/elif chain, then collect every test down the chain.
    while True:
        parent = ctx.parent.get(node)
        if isinstance(node, cst.If) and isinstance(parent, cst.If) and parent.orelse is node:
            node = parent
        elif isinstance(node, cst.IfExp) and isinstance(parent, cst.IfExp) and parent.orelse is node:
            node = parent
        else:
            break
    tests = []
    current: cst.CSTNode | None = node
    while isinstance(current, (cst.If, cst.IfExp)):
        tests.append(current.test)
        current = current.orelse
    return tests


def _mentions(ctx: FileContext, expr: cst.BaseExpression, pattern: re.Pattern, depth: int = 0) -> bool:
    for string in ctx.walk(expr, cst.SimpleString):
        if pattern.search(string.value):
            return True
    for name in ctx.walk(expr, cst.Name):
        if pattern.search(name.value):
            return True
        if depth == 0:  # ``use_bf16 = torch.cuda.is_bf16_supported()`` ... ``if use_bf16:``
            value = ctx.single_assignment(name)
            if value is not None and _mentions(ctx, value, pattern, depth + 1):
                return True
    return False


# Quantized-weight libraries whose kernels take float16 activations only.
_FP16_KERNEL_LIBRARIES = ("auto_gptq.", "gptqmodel.", "awq.", "transformers.GPTQConfig", "transformers.AwqConfig")


def _casts_or_loads_half(ctx: FileContext) -> bool:
    """``model.half()``, or 8-bit weights (``load_in_8bit=True``), whose LLM.int8 matmuls
    bitsandbytes computes in float16."""
    if any(not call.args for call in ctx.method_calls("half")):
        return True
    for arg in ctx.nodes(cst.Arg):
        if arg.keyword is not None and arg.keyword.value == "load_in_8bit":
            value = ctx.values.resolve(arg.value)
            if value is None or value.value:
                return True
    return False


def half_weights(ctx: FileContext) -> bool:
    """Whether the model itself is loaded or cast to float16 (``torch_dtype=torch.float16``,
    ``bnb_4bit_compute_dtype=torch.float16``, ``.half()``, ``.to(torch.float16)``, GPTQ / AWQ
    quantized weights, whose kernels take float16 only, 8-bit weights, whose LLM.int8 matmuls
    bitsandbytes computes in float16): switching only the mixed-precision
    setting to bf16 would leave it half done, or feed those kernels the wrong dtype."""
    for arg in ctx.nodes(cst.Arg):
        keyword = arg.keyword.value if arg.keyword is not None else None
        call = ctx.parent.get(arg)
        loads = (
            keyword == "dtype"
            and isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "from_pretrained"
        )
        if keyword in _WEIGHT_DTYPE_KEYWORDS or loads:
            dtype = resolve_dtype(ctx, arg.value)
            if dtype is not None and dtype.name == FP16:
                return True
    if _casts_or_loads_half(ctx):
        return True
    if ctx.method_calls("from_quantized") or any(q.startswith(_FP16_KERNEL_LIBRARIES) for q in ctx.called_qualnames):
        return True  # GPTQ / AWQ kernels compute in float16: the activations must stay float16
    for call in ctx.method_calls("to"):
        for arg in call.args:
            dtype = resolve_dtype(ctx, arg.value)
            if dtype is not None and dtype.name == FP16:
                return True
    return False


def trains_within(ctx: FileContext, root: cst.CSTNode) -> bool:
    """A backward pass, a GradScaler call or an optimizer step / zero_grad under ``root``."""
    if ctx.within(root, ctx.method_calls("backward") + ctx.calls("torch.autograd.backward", *SCALERS)):
        return True
    for call in ctx.within(root, ctx.method_calls("step", "zero_grad")):
        receiver = dotted_name(call.func.value) if isinstance(call.func, cst.Attribute) else None
        if receiver is not None and ctx.loops.is_optimizer(receiver):
            return True
    return False


def file_trains(ctx: FileContext) -> bool:
    """A backward pass, a GradScaler or an optimizer being stepped or zeroed somewhere: autocast
    here serves training, not only inference. The optimizer counts on its own for training
    engines that hand the loss to a scaler object defined elsewhere (``loss_scaler(loss,
    optimizer)`` in timm, DeiT, MAE), which runs ``backward()`` out of sight."""
    return trains_within(ctx, ctx.module)


# Functions named for evaluation or sampling: ``evaluate``, ``log_validation``, ``generate_samples``.
_INFERENCE_FUNCTION = re.compile(r"val|test|infer|pred|sampl|generat", re.IGNORECASE)


def in_inference_function(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Whether ``node`` sits in a function named for evaluation or sampling (``log_validation``,
    ``evaluate``, ``generate_images``) that neither trains itself nor belongs to a training loop:
    such a function serves inference even when the training loop calls it every N steps."""
    function = ctx.enclosing(node, cst.FunctionDef)
    if not isinstance(function, cst.FunctionDef) or not _INFERENCE_FUNCTION.search(function.name.value):
        return False
    if trains_within(ctx, function):
        return False
    return not any(ctx.is_descendant(function, loop.node) for loop in ctx.loops.training_loops)


# Methods that draw samples from a trained model (a diffusion inferer's ``sample``, a language
# model's ``generate``): the code around them is inference.
_SAMPLING_METHODS = frozenset({"sample", "sample_loop", "p_sample_loop", "ddim_sample_loop", "generate"})


def autocast_for_sampling(ctx: FileContext, autocast: cst.Call) -> bool:
    """Whether the ``with`` block ``autocast`` opens draws samples and runs no backward:
    ``image = inferer.sample(...)``, ``model.generate(...)``, or a denoising step in a loop over
    ``scheduler.timesteps`` (MONAI's generative tutorials, sampling an image to show every N
    epochs). That is inference, where float16 is as fast as bf16 and more precise."""
    item = ctx.parent.get(autocast)
    block = ctx.parent.get(item) if isinstance(item, cst.WithItem) else None
    if not isinstance(block, cst.With):
        return False
    calls = list(ctx.walk(block.body, cst.Call))
    if any(isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward" for call in calls):
        return False
    if any("loss" in name.value.lower() for assign in ctx.walk(block.body, cst.Assign) for target in assign.targets
           for name in ctx.walk(target.target, cst.Name)):
        return False  # a loss made beside the samples: the backward may come after the block
    if any(isinstance(call.func, cst.Attribute) and call.func.attr.value in _SAMPLING_METHODS for call in calls):
        return True
    for ancestor in ctx.ancestors(block):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(ancestor, cst.For) and (dotted_name(_iterated(ancestor.iter)) or "").endswith("timesteps"):
            return True
    return False


def _iterated(expr: cst.BaseExpression) -> cst.BaseExpression:
    """What ``enumerate(x)`` / ``tqdm(x)`` / ``reversed(x)`` walks: ``x``."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("enumerate", "tqdm", "reversed", "list") and expr.args:
        expr = expr.args[0].value
    return expr


# -- removing GradScaler plumbing -----------------------------------------------------------------
def scaler_calls(ctx: FileContext) -> list[cst.Call]:
    return ctx.calls(*SCALERS)


def precision_reassigned(ctx: FileContext, call: cst.Call) -> bool:
    """``args = TrainingArguments(fp16=True)`` followed by ``args.fp16 = ...`` / ``args.bf16 = ...``:
    the value at the call is not the one training runs with."""
    assign = ctx.parent.get(call)
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or assign.value is not call:
        return False
    name = dotted_name(assign.targets[0].target)
    return name is not None and any(ctx.attribute_assignments.get(f"{name}.{field}") for field in ("fp16", "bf16"))


# Lightning's full-precision spellings (its default is "32-true").
_LIGHTNING_FP32 = (32, "32", "32-true")


# Identifiers and strings that show the file deals with reduced precision somewhere: an
# ``--amp`` / ``--fp16`` flag, a loss scaler from a helper module, a dtype chosen at run time.
_REDUCED_PRECISION_TOKEN = re.compile(
    r"(^|_)(amp|fp16|bf16|fp8|float16|bfloat16|autocast|mixed_precision|half_precision|loss_scale)(_|$)", re.I
)


_REDUCED_PRECISION_PART = re.compile(r"(grad|loss|native|amp)_?scaler|autocast|mixedprecision", re.I)


_REDUCED_PRECISION_STRING = re.compile(
    r"^-*(fp16|bf16|fp8|amp|float16|bfloat16|16-mixed|bf16-mixed|16-true|bf16-true|mixed[-_]precision)$", re.I
)


_REDUCED_PRECISION_MODULES = ("apex.amp", "apex.fp16_utils", "deepspeed.", "transformer_engine.", "bitsandbytes.")


QUANTIZED_LOADING = ("load_in_8bit", "load_in_4bit", "quantization_config")


_FRAMEWORK_CONFIGS = (*TRAINING_ARGUMENTS, ACCELERATOR, LIGHTNING_TRAINER, FABRIC)


def reduced_precision_in_file(ctx: FileContext) -> bool:
    """Whether anything in the file may run the model below fp32, outside the framework
    settings :func:`trains_in_fp32` reads: an autocast or GradScaler of any spelling,
    ``.half()`` / ``.bfloat16()``, a ``torch.float16`` / ``torch.bfloat16`` reference,
    weights loaded with a dtype other than fp32 or quantized, apex / DeepSpeed /
    Transformer Engine / FSDP ``MixedPrecision``, or a name or string such as ``args.amp``,
    ``use_fp16``, ``"--bf16"``, ``loss_scaler``: precision handled, or chosen at run time."""
    return ctx.memo(reduced_precision_in_file, lambda: _find_reduced_precision(ctx))


def _find_reduced_precision(ctx: FileContext) -> bool:
    for qualname in ctx.called_qualnames:
        if qualname.startswith(_REDUCED_PRECISION_MODULES) or _REDUCED_PRECISION_PART.search(qualname):
            return True
    if ctx.method_calls("autocast") or ctx.method_calls("bfloat16"):
        return True
    if _casts_or_loads_half(ctx):
        return True
    for node in ctx.nodes(cst.Attribute):
        if TORCH_DTYPES.get(ctx.qualname(node) or "") in (FP16, BF16):
            return True
    for name in ctx.nodes(cst.Name):
        if TORCH_DTYPES.get(ctx.qualname(name) or "") in (FP16, BF16):
            return True
        if not (_REDUCED_PRECISION_TOKEN.search(name.value) or _REDUCED_PRECISION_PART.search(name.value)):
            continue
        if isinstance(ctx.parent.get(name), (cst.ImportAlias, cst.AsName)):
            continue  # ``from apex import amp`` alone uses nothing; a use of ``amp`` is read below
        holder = ctx.parent.get(name)
        if isinstance(holder, cst.Arg) and holder.keyword is name:
            call = ctx.parent.get(holder)
            if isinstance(call, cst.Call) and ctx.qualname(call.func) in _FRAMEWORK_CONFIGS:
                continue  # ``fp16=`` of a framework call: read by trains_in_fp32
            if _switched_off(ctx, holder.value):
                continue  # ``dict(bf16=False)``: says fp32, not the opposite
        return True
    for string in ctx.nodes(cst.SimpleString):
        value = string_value(string)
        if isinstance(value, str) and _REDUCED_PRECISION_STRING.match(value.strip()):
            holder = ctx.parent.get(string)
            if isinstance(holder, cst.DictElement) and holder.key is string and _switched_off(ctx, holder.value):
                continue
            return True
    for arg in ctx.nodes(cst.Arg):
        keyword = arg.keyword.value if arg.keyword is not None else None
        if keyword in QUANTIZED_LOADING:
            return True
        if keyword in ("torch_dtype", "dtype"):
            call = ctx.parent.get(arg)
            method = call.func.attr.value if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) else None
            if method in ("from_pretrained", "from_config", "to") and not _is_full_precision(ctx, arg.value):
                return True
    return False


def _switched_off(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    value = ctx.values.resolve(expr)
    return value is not None and value.origin != "argparse default" and (value.value is False or value.value == "no")


def _is_full_precision(ctx: FileContext, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """``torch.float32`` / ``"float32"`` / any other non-half torch dtype (``torch.long``), or
    another tensor's ``.dtype`` (``mask.to(dtype=scores.dtype)`` follows, it does not choose).
    A conditional is full precision when every branch is (``torch.float32 if binary else
    torch.long``, Pytorch-UNet's mask dtype); a name bound once is judged by its value."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "dtype":
        return True
    if depth > 8:
        return False
    if isinstance(expr, cst.IfExp):
        return _is_full_precision(ctx, expr.body, depth + 1) and _is_full_precision(ctx, expr.orelse, depth + 1)
    dtype = resolve_dtype(ctx, expr)
    if dtype is not None:
        return dtype.name not in (FP16, BF16)
    if isinstance(expr, cst.Name) and expr.value not in ctx.declared_global:
        value = ctx.single_assignment(expr)
        if isinstance(value, (cst.IfExp, cst.Name, cst.Attribute)):
            return _is_full_precision(ctx, value, depth + 1)
    value = ctx.values.value_of(expr)
    if isinstance(value, str):
        return value in ("float32", "float", "fp32", "float64")
    qualname = ctx.qualname(expr) or ""
    return qualname.startswith("torch.") and qualname not in TORCH_DTYPES


def trains_in_fp32(ctx: FileContext, site: TrainingSite) -> bool:
    """Whether ``site`` certainly trains in full fp32: nothing in the file touches reduced
    precision (:func:`reduced_precision_in_file`) and the framework's own setting is known
    to be fp32 (``TrainingArguments`` without ``bf16`` / ``fp16``, ``Accelerator(mixed_precision=
    "no")``, Lightning without ``precision`` or with ``"32-true"``). Unknown is not fp32: a
    setting behind unresolved ``**kwargs`` or a command-line flag, an ``Accelerator()`` left to
    ``accelerate launch``, a DeepSpeed config, recent TRL configs (which default to bf16)."""
    if reduced_precision_in_file(ctx) or _double_precision(ctx):
        return False
    if site.kind == LOOP:
        return True
    if site.kind == DELEGATED:
        other = site.elsewhere
        return other is not None and not reduced_precision_in_file(other) and not _double_precision(other)
    if site.config is None:
        return False
    if site.kind == HF_TRAINER:
        return _trainer_in_fp32(ctx, site.config)
    if site.kind == ACCELERATE:
        if ctx.argument(site.config, "fp16") is not MISSING:
            return False  # the pre-0.5 ``Accelerator(fp16=...)`` spelling
        value = known_setting(ctx, site.config, "mixed_precision")
        return value is not None and value.value == "no"
    if site.kind in (LIGHTNING_FIT, FABRIC_LOOP):
        if ctx.argument(site.config, "plugins") is not MISSING:
            return False
        precision = ctx.argument(site.config, "precision")
        if precision is MISSING:
            return True
        value = known_setting(ctx, site.config, "precision")
        return value is not None and not isinstance(value.value, bool) and value.value in _LIGHTNING_FP32
    return False


# Accelerator arguments that bring their own precision (a DeepSpeed / FSDP / Megatron plugin).
_NAMES_THE_LAUNCHER = re.compile(r"accelerate\s+(launch|config)\b")
_ACCELERATE_PRECISION_CARRIERS = ("fp16", "deepspeed_plugin", "fsdp_plugin", "megatron_lm_plugin")


def precision_left_to_launcher(ctx: FileContext, site: TrainingSite) -> bool:
    """An ``Accelerator(...)`` that does not say ``mixed_precision``, in a file that touches no
    reduced precision: ``accelerate launch`` and its config decide, and a plain ``python
    train.py`` (or a config answering "no") trains in full fp32."""
    if site.kind != ACCELERATE or not isinstance(site.config, cst.Call):
        return False
    call = site.config
    if any(arg.star for arg in call.args) or ctx.argument(call, "mixed_precision") is not MISSING:
        return False
    if any(ctx.argument(call, keyword) is not MISSING for keyword in _ACCELERATE_PRECISION_CARRIERS):
        return False
    if "ACCELERATE_MIXED_PRECISION" in ctx.source:
        return False  # set through the environment, by the script itself
    if _NAMES_THE_LAUNCHER.search(ctx.source):
        return False  # "run with `accelerate launch`": the author relies on its config
    return not reduced_precision_in_file(ctx) and not _double_precision(ctx)


def _double_precision(ctx: FileContext) -> bool:
    """A model trained in float64 (scientific code): ``torch.set_default_dtype(...)`` /
    ``set_default_tensor_type(...)`` chosen in the file, or ``.double()`` /
    ``.to(torch.float64)`` on a module that a training loop trains. ``correct.double()`` on a
    metric is not."""
    if ctx.calls("torch.set_default_dtype", "torch.set_default_tensor_type"):
        return True
    trained = {module for loop in ctx.loops.training_loops for module in trained_modules(ctx, loop)}
    for call in ctx.method_calls("double", "to"):
        method = call.func.attr.value  # type: ignore[attr-defined]
        double = (method == "double" and not call.args) or any(
            (arg.keyword is None or arg.keyword.value == "dtype")
            and (resolve_dtype(ctx, arg.value) or Dtype("")).name == "float64"
            for arg in call.args
        )
        subject = cast_subject(ctx, call) if double else None
        if subject is not None and any(same_module(subject, module) for module in trained):
            return True
    return False


def known_setting(ctx: FileContext, call: cst.Call, keyword: str):
    """The value written in the file for ``keyword`` (not a command-line default), or None."""
    argument = ctx.argument(call, keyword)
    if argument is None or argument is MISSING:
        return None
    value = ctx.values.resolve(argument)
    if value is None or value.origin == "argparse default":
        return None
    return value


def _trainer_in_fp32(ctx: FileContext, call: cst.Call) -> bool:
    trl = (ctx.qualname(call.func) or "").startswith("trl.")
    for keyword in ("bf16", "fp16"):
        argument = ctx.argument(call, keyword)
        if argument is None:
            return False
        if argument is MISSING:
            if trl and keyword == "bf16":
                return False  # recent TRL configs turn bf16 on when neither is set
            continue
        value = known_setting(ctx, call, keyword)
        if value is None or value.value is not False:
            return False
    deepspeed = ctx.argument(call, "deepspeed")
    if deepspeed is None:
        return False
    if deepspeed is not MISSING:
        value = ctx.values.resolve(deepspeed)
        if value is None or value.value is not None:
            return False  # the DeepSpeed config decides the precision
    if precision_reassigned(ctx, call):
        return False
    return not any(
        ctx.keyword_arg(replace, field) for replace in ctx.calls("dataclasses.replace") for field in ("bf16", "fp16")
    )


# -- whether the training is worth the advice (ADV202, ADV203) --------------------------------------
# Reinforcement learning against environments and meta-learning inner loops: small networks whose
# step time is the environment or the adaptation loop, where reduced precision is not the practice.
_SMALL_NETWORK_LIBRARIES = (
    "gym", "gymnasium", "envpool", "pettingzoo", "dm_control", "stable_baselines3", "learn2learn", "higher",
)


_LAYER_SIZE_ARGUMENTS = {
    "torch.nn.Linear": ("in_features", "out_features"),
    "torch.nn.Conv1d": ("in_channels", "out_channels"),
    "torch.nn.Conv2d": ("in_channels", "out_channels"),
    "torch.nn.Conv3d": ("in_channels", "out_channels"),
    "torch.nn.ConvTranspose2d": ("in_channels", "out_channels"),
    "torch.nn.LSTM": ("input_size", "hidden_size"),
    "torch.nn.GRU": ("input_size", "hidden_size"),
}


_TOY_WIDTH = 64


_MODEL_LIBRARIES = ("transformers.", "torchvision.models.", "timm.", "diffusers.", "sentence_transformers.")


def small_network_training(ctx: FileContext) -> bool:
    """Whether the file trains networks too small for GPU precision advice to matter: an RL
    or meta-learning script (gym, gymnasium, learn2learn, ...), or a toy whose every layer
    is at most 64 wide (``nn.Linear(20, 1)`` in a tutorial) with no library model besides."""
    if any(target.split(".")[0] in _SMALL_NETWORK_LIBRARIES for target in ctx.imports.aliases.values()):
        return True
    if any(q.startswith(_MODEL_LIBRARIES) for q in ctx.called_qualnames):
        return False
    layers = ctx.calls(*_LAYER_SIZE_ARGUMENTS)
    if not layers:
        return False
    for layer in layers:
        for position, keyword in enumerate(_LAYER_SIZE_ARGUMENTS[ctx.qualname(layer.func) or ""]):
            argument = ctx.argument(layer, keyword, position)
            size = ctx.values.value_of(argument) if argument else None
            if not isinstance(size, int) or size > _TOY_WIDTH:
                return False
    return True


# A network this small keeps a GPU waiting on kernel launches, not on arithmetic: the tensor cores
# bf16 and TF32 reach cannot show (readers of the fix audits judged such edits doubtful: a
# 784-64-64-10 MNIST MLP, a 2-100-3 spiral classifier, a 784-400-20 VAE).
_SMALL_NETWORK_PARAMETERS = 1_000_000
_SMALL_NETWORK_WIDTH = 1024
_DENSE_LAYERS = {
    "torch.nn.Linear": lambda i, o: i * o + o,
    "torch.nn.LSTM": lambda i, h: 4 * (i * h + h * h + 2 * h),
    "torch.nn.GRU": lambda i, h: 3 * (i * h + h * h + 2 * h),
    "torch.nn.RNN": lambda i, h: i * h + h * h + 2 * h,
}
_DENSE_LAYER_SIZES = {**_LAYER_SIZE_ARGUMENTS, "torch.nn.RNN": ("input_size", "hidden_size")}
# Layers whose cost depends on more than their sizes (an image's area, a sequence's length).
_NOT_DENSE = ("torch.nn.MultiheadAttention", "torch.nn.Transformer", "torch.nn.TransformerEncoderLayer",
              "torch.nn.TransformerDecoderLayer", "torch.nn.functional.scaled_dot_product_attention")


def small_dense_network(ctx: FileContext) -> tuple[int, int] | None:
    """(parameters, widest layer) where the file's networks are small dense ones built here:
    every layer a ``Linear`` or a recurrent layer of sizes the file gives, under a million
    parameters in all and none wider than 1024, no convolution, attention layer, library model
    or model class of another module. None otherwise."""
    def find() -> tuple[int, int] | None:
        from advisor.facts.models import model_build_kind

        qualnames = ctx.called_qualnames
        if any(q.startswith(_MODEL_LIBRARIES) or _CONV.match(q) or q in _NOT_DENSE for q in qualnames):
            return None
        if any(model_build_kind(ctx, call) not in (None, "local", "torch.nn") for call in ctx.nodes(cst.Call)):
            return None  # a model whose layers another module builds
        if any(_moved_from_unknown_code(ctx, move) for move in ctx.method_calls("cuda", "to")):
            return None  # ``build_backbone().cuda()``: a network the file does not show
        layers = ctx.calls(*_DENSE_LAYERS)
        if not layers:
            return None
        total = widest = 0
        for layer in layers:
            qualname = ctx.qualname(layer.func) or ""
            sizes = []
            for position, keyword in enumerate(_DENSE_LAYER_SIZES[qualname]):
                argument = ctx.argument(layer, keyword, position)
                size = ctx.values.value_of(argument) if isinstance(argument, cst.BaseExpression) and argument is not MISSING else None
                if not isinstance(size, int) or isinstance(size, bool):
                    return None
                sizes.append(size)
            total += _DENSE_LAYERS[qualname](*sizes)
            widest = max(widest, *sizes)
        if total >= _SMALL_NETWORK_PARAMETERS or widest > _SMALL_NETWORK_WIDTH:
            return None
        return total, widest

    return ctx.memo(small_dense_network, find)


def _moved_from_unknown_code(ctx: FileContext, move: cst.Call) -> bool:
    """Whether what ``move`` (``x.cuda()``, ``x.to(...)``) moves may be built by code the file
    does not show: a function's result (``build_backbone()``), directly or through a name."""
    from advisor.facts.models import model_build_kind

    receiver = move.func.value  # type: ignore[attr-defined]
    values: list[cst.BaseExpression] = [receiver]
    if isinstance(receiver, cst.Name):
        values = [b.value for b in ctx.lookup(receiver.value, move) if b.value is not None]
    for value in values:
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("cuda", "to", "train", "eval"):
            value = value.func.value
        if not isinstance(value, cst.Call) or model_build_kind(ctx, value) in ("local", "torch.nn"):
            continue
        qualname = ctx.qualname(value.func)
        if qualname in ("torch.load", "torch.jit.load", "torch.hub.load", "torch.load_state_dict_from_url"):
            return True  # a pickled or hub model
        if qualname is not None and qualname.split(".")[0] in ("torch", "numpy", "builtins"):
            continue
        if qualname is None and isinstance(value.func, cst.Attribute):
            continue  # a method of a value (``x.float()``)
        return True
    return False


# -- what the model computes in fp32 (ADV202) --------------------------------------------------------
_LINEAR = ("torch.nn.Linear", "torch.nn.LazyLinear", "torch.nn.Bilinear", "torch.nn.functional.linear")


_MATMUL = (
    "torch.nn.MultiheadAttention",
    "torch.nn.Transformer",
    "torch.nn.TransformerEncoder",
    "torch.nn.TransformerDecoder",
    "torch.nn.TransformerEncoderLayer",
    "torch.nn.TransformerDecoderLayer",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.matmul",
    "torch.bmm",
    "torch.mm",
    "torch.einsum",
    "torch.baddbmm",
    "torch.addmm",
    "torch.addbmm",
)


_MATMUL_METHODS = ("matmul", "bmm", "mm")


_CONV = re.compile(r"^torch\.nn\.(functional\.)?(Lazy)?[Cc]onv(Transpose)?[123]d$|^torchvision\.models\.")


# torchvision / timm model names of vision transformers (vit_b_16, swin_t, deit_small_patch16_224).
_ATTENTION_ARCHITECTURE = re.compile(r"^(vit|deit|beit|eva|swin|maxvit|cait|xcit|levit|mvit)", re.I)


# transformers.GPT2LMHeadModel, AutoModelForCausalLM.from_pretrained, BertForMaskedLM.from_config...
_TRANSFORMERS_MODEL = re.compile(r"^transformers\.\w*(Model|For[A-Z]\w*|LMHead\w*)(\.from_pretrained|\.from_config)?$")


_MATMUL_LIBRARIES = ("sentence_transformers.", "peft.")


def fp32_matmul_model(ctx: FileContext) -> bool:
    """Whether the model the file builds is matmul-heavy (see :func:`_fp32_matmul_model`); a model
    class of another project module counts by what its module builds."""
    return ctx.memo(fp32_matmul_model, lambda: _fp32_matmul_model(ctx, follow_project=True))


def _fp32_matmul_model(ctx: FileContext, follow_project: bool) -> bool:
    """Whether the model the file builds is matmul-heavy: attention, ``@`` / ``torch.matmul``,
    a transformers (or sentence-transformers) model, a ViT-like torchvision / timm model, or
    ``nn.Linear`` layers in a file without convolutions. A conv net with a linear classifier
    head is not: cuDNN convolutions already use TF32 by default."""
    linear = conv = geometry = False
    for qualname in ctx.called_qualnames:
        if qualname in _PLAIN_PRODUCTS and all(_camera_geometry(ctx, call) for call in ctx.calls(qualname)):
            geometry = True  # PatchmatchNet's ``torch.matmul(intrinsics, extrinsics)``: decided below
            continue
        if qualname in _MATMUL or _TRANSFORMERS_MODEL.match(qualname) or qualname.startswith(_MATMUL_LIBRARIES):
            return True
        if qualname.startswith("torchvision.models.") and _ATTENTION_ARCHITECTURE.search(qualname.rsplit(".", 1)[-1]):
            return True
        if qualname == "timm.create_model":
            for call in ctx.calls(qualname):
                name = ctx.values.value_of(call.args[0].value) if call.args else None
                if isinstance(name, str) and _ATTENTION_ARCHITECTURE.search(name):
                    return True
        linear = linear or qualname in _LINEAR
        conv = conv or bool(_CONV.match(qualname))
    products = [op for op in ctx.nodes(cst.BinaryOperation) if isinstance(op.operator, cst.MatrixMultiply)]
    # ``torch.sparse.mm(adj, emb)`` (LightGCN's propagation): sparse kernels, which TF32 does not touch.
    products += [call for call in ctx.method_calls(*_MATMUL_METHODS) if not (ctx.qualname(call.func) or "").startswith("torch.sparse.")]
    if any(not _camera_geometry(ctx, product) for product in products):
        return True
    geometry = geometry or bool(products)
    if geometry and not conv:
        return True  # only a conv net's own convolutions make camera products too small to count
    if linear and not conv:
        return True
    if follow_project and not linear and not conv and ctx.project is not None:
        # The model class lives in a module of the project (``from models import ViT``): what
        # that class builds (an encoder's convolutions do not hide a decoder's matmuls).
        from advisor.facts.models import build_classes, project_class, trained_models

        for call in ctx.nodes(cst.Call):
            found = project_class(ctx, call.func)
            if found is not None and found[0] is not ctx:
                other, cls = found
                if other.memo(("fp32 matmuls", cls), lambda: _class_matmuls(other, cls, set())):
                    return True
        # A model a factory function of the project builds (``create_model_and_diffusion``).
        for model in trained_models(ctx):
            for build in model.builds:
                if build.kind != "imported":
                    continue
                for other, cls in build_classes(ctx, build):
                    if other is not ctx and other.memo(("fp32 matmuls", cls), lambda: _class_matmuls(other, cls, set())):
                        return True
    return False


# The plain matrix products, which also apply camera geometry (3x3 and 4x4 matrices).
_PLAIN_PRODUCTS = frozenset({"torch.matmul", "torch.bmm", "torch.mm"})
# Words of operand names for camera geometry (``src_proj``, ``intrinsics_l``, ``rot``): whole
# words of a snake_case name, so that ``transpose`` is not a pose nor ``rotary`` a rotation.
_CAMERA_WORDS = frozenset({
    "proj", "projection", "intrinsic", "intrinsics", "extrinsic", "extrinsics", "rot", "rotation", "pose", "poses",
    "homography", "homographies", "cam", "camera", "c2w", "w2c",
})


def _camera_geometry(ctx: FileContext, product: cst.CSTNode) -> bool:
    """A matrix product of camera geometry: an operand named for it (``torch.matmul(src_proj,
    torch.inverse(ref_proj))``, ``torch.matmul(rot, xyz)``: multi-view stereo's homography
    warping). Products of 3x3 and 4x4 matrices are no work for the tensor cores, and TF32
    rounding moves the warped sample positions."""
    if isinstance(product, cst.BinaryOperation):
        operands = [product.left, product.right]
    elif isinstance(product, cst.Call):
        operands = [arg.value for arg in product.args if arg.keyword is None]
        if isinstance(product.func, cst.Attribute) and product.func.attr.value in _MATMUL_METHODS:
            operands.append(product.func.value)
    else:
        return False
    for operand in operands:
        while isinstance(operand, (cst.Call, cst.Subscript)):
            if isinstance(operand, cst.Subscript):
                operand = operand.value  # ``proj[:, :, :3, :4]``
            elif (ctx.qualname(operand.func) or "").startswith("torch.") and operand.args:
                operand = operand.args[0].value  # ``torch.inverse(ref_proj)``
            elif isinstance(operand.func, cst.Attribute):
                operand = operand.func.value  # ``rot.transpose(1, 2)``
            else:
                break
        name = dotted_name(operand)
        if name and _CAMERA_WORDS.intersection(name.rsplit(".", 1)[-1].lower().split("_")):
            return True
    return False


def _class_matmuls(ctx: FileContext, root: cst.CSTNode, seen: set[cst.CSTNode], depth: int = 0) -> bool:
    """Whether a model class (and the classes and helpers of its file it builds) computes matmuls:
    attention, ``@``, ``matmul``, or linear layers without convolutions; products of camera
    geometry (:func:`_camera_geometry`) only without convolutions."""
    linear = conv = geometry = False
    pending = [root]
    while pending and depth < 200:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        depth += 1
        for op in ctx.walk(node, cst.BinaryOperation):
            if isinstance(op.operator, cst.MatrixMultiply):
                if not _camera_geometry(ctx, op):
                    return True
                geometry = True
        for call in ctx.walk(node, cst.Call):
            qualname = ctx.qualname(call.func) or ""
            if qualname.startswith("torch.sparse."):
                continue
            if qualname in _PLAIN_PRODUCTS or (isinstance(call.func, cst.Attribute) and call.func.attr.value in _MATMUL_METHODS):
                if not _camera_geometry(ctx, call):
                    return True
                geometry = True
                continue
            if qualname in _MATMUL or _TRANSFORMERS_MODEL.match(qualname):
                return True
            linear = linear or qualname in _LINEAR
            conv = conv or bool(_CONV.match(qualname))
            if isinstance(call.func, cst.Name):
                bindings = ctx.lookup(call.func.value, call)
                if len(bindings) == 1 and isinstance(bindings[0].node, (cst.ClassDef, cst.FunctionDef)):
                    pending.append(bindings[0].node)
    return (linear or geometry) and not conv


_TF32_NAME = re.compile(r"tf32|float32_matmul_precision|fp32_precision", re.I)


def tf32_configured(ctx: FileContext) -> bool:
    """Whether the file says anything about TF32: ``allow_tf32``, ``set_float32_matmul_precision``,
    ``fp32_precision``, a Trainer ``tf32=``, a ``--tf32`` flag. Enabled, disabled on purpose or
    set from a value we cannot read, it is the author's choice."""
    if any(_TF32_NAME.search(name.value) for name in ctx.nodes(cst.Name)):
        return True
    for string in ctx.nodes(cst.SimpleString):
        value = string_value(string)
        if isinstance(value, str) and "tf32" in value.lower():
            return True
    # lingua's ``apps/*/train.py``: ``lingua/distributed.py``, which it runs, sets
    # ``allow_tf32`` from a ``matmul_allow_tf32`` option that is off by default.
    return ctx.project is not None and (
        ctx.project.neighbourhood_matches(_TF32_SETTING) or ctx.project.runners_match(_TF32_SETTING)
    )


def tf32_set_elsewhere(ctx: FileContext) -> str | None:
    """A Python file of the project that sets TF32 and imports modules by a name computed at run
    time, where no file seen running this one sets it (:func:`tf32_configured`): a TF32 policy
    of the project's, applied by a script that may load this module (mammoth's ``main.py`` sets
    the matmul precision under its ``-O`` switch and loads every model module through
    ``importlib``). A script that sets TF32 for itself alone (flow_matching's text example beside
    its notebooks) is not one. Its path, relative to the project's root. Those files join the
    result's dependencies; a file that starts setting TF32 later is seen when this file or its
    dependencies change."""
    view = ctx.project
    if view is None or not view.member:
        return None
    for path in view.texts_matching(_TF32_SETTING, _TF32_SETTING_HINTS):
        if (
            path.endswith(".py")
            and os.path.abspath(path) != os.path.abspath(ctx.path)
            and view.project.imports_by_name(path)
            and not view.project.is_test_code(path)
        ):
            view.consulted.add(path)
            return os.path.relpath(path, view.project.root)
    return None


# TF32 turned off on purpose: ``allow_tf32 = False``, the "highest" fp32 matmul precision.
# A statement of its own, not a mention in a docstring or a string.
_TF32_OFF = re.compile(
    rb"^[ \t]*[\w.]*\ballow_tf32[ \t]*=[ \t]*False\b|^[ \t]*[\w.]*set_float32_matmul_precision\([ \t]*[\"']highest[\"']",
    re.M,
)


def tf32_turned_off_in_project(ctx: FileContext) -> str | None:
    """A Python file of the project that turns TF32 off on purpose (edm2's training loop:
    ``torch.backends.cuda.matmul.allow_tf32 = False``): the authors chose fp32 matmuls, for
    numerics a script beside it shares (its toy example's ground-truth scores). Its path,
    relative to the project's root; it joins the result's dependencies."""
    view = ctx.project
    if view is None or not view.member:
        return None
    for path in view.texts_matching(_TF32_OFF, (b"allow_tf32", b"set_float32_matmul_precision")):
        if not path.endswith(".py") or os.path.abspath(path) == os.path.abspath(ctx.path) or view.project.is_test_code(path):
            continue
        other = view.context_of(path)  # the text matched; the code must say it (not a docstring's example)
        if other is not None and _turns_tf32_off(other):
            return os.path.relpath(path, view.project.root)
    return None


def _turns_tf32_off(ctx: FileContext) -> bool:
    for assign in ctx.nodes(cst.Assign):
        if any(isinstance(t.target, cst.Attribute) and t.target.attr.value == "allow_tf32" for t in assign.targets):
            if isinstance(assign.value, cst.Name) and assign.value.value == "False":
                return True
    for call in ctx.method_calls("set_float32_matmul_precision"):
        if call.args and isinstance(call.args[0].value, cst.SimpleString) and string_value(call.args[0].value) == "highest":
            return True
    return False


def runs_fft(ctx: FileContext) -> bool:
    """The program computes FFTs (``torch.fft.rfft``, ``torch.stft``) in this file or in the
    project modules it imports: cuFFT takes no bf16 input, so bf16 autocast makes them raise
    ("Unsupported dtype BFloat16"), where fp16 and fp32 run (FEDformer's Fourier blocks).
    Asked once per file however many findings ask it."""
    return ctx.memo(runs_fft, lambda: _in_file_or_imports(ctx, _FFT_CALL, b"fft"))


def runs_cudnn_rnn(ctx: FileContext) -> bool:
    """The file, or a project module that runs with it, builds a recurrent layer (``nn.LSTM``,
    ``nn.GRU``, ``nn.RNN``). Autocast runs cuDNN RNNs in float16 whatever dtype it was given
    (``_cudnn_rnn_cast_reflatten`` in ATen's ``AutocastRNN.cpp`` casts to half), so bf16 autocast
    over one is fp16 without the GradScaler bf16 drops. Asked once per file."""
    return ctx.memo(runs_cudnn_rnn, lambda: _in_file_or_imports(ctx, _RNN_LAYER, (b"LSTM", b"GRU", b"RNN")))


def runs_cupy_kernels(ctx: FileContext) -> bool:
    """The file, or a project module it imports, runs CuPy kernels (``import cupy``,
    spikingjelly's ``backend='cupy'`` neurons): hand-written CUDA code that takes float32 and
    float16, and raises on bf16 (``NotImplementedError`` in spikingjelly's neurons, SpikeGPT's
    copy of it). Asked once per file."""
    return ctx.memo(runs_cupy_kernels, lambda: _in_file_or_imports(ctx, _CUPY, b"cupy"))


def replicates_in_threads(ctx: FileContext) -> bool:
    """The file wraps a model in ``nn.DataParallel``, whose replicas run in threads that enter
    autocast afresh with its default dtype, float16 (``torch.amp.autocast(device_type,
    enabled=autocast_enabled)`` in ``parallel_apply``): a bf16 autocast around the wrapped
    model's call reaches the main thread only (cav-mae's four-GPU runs)."""
    return ctx.memo(replicates_in_threads, lambda: bool(ctx.calls(*DATA_PARALLEL)))


def _in_file_or_imports(ctx: FileContext, pattern: "re.Pattern[bytes]", hint: "bytes | tuple[bytes, ...] | None" = None) -> bool:
    """``pattern`` is in this file's text, in a project module it imports, or in one that runs
    in the same program (:meth:`ProjectView.runs_with_match`): CorrNet's ``seq_scripts.py``
    trains the model ``main.py`` builds from ``slr_network.py``, whose ``BiLSTM`` it never imports."""
    if pattern.search(ctx.source.encode("utf-8", "replace")):
        return True
    return ctx.project is not None and (ctx.project.imports_match(pattern) or ctx.project.runs_with_match(pattern, hint))


def casts_data_to_fp16(ctx: FileContext) -> bool:
    """A project module this file imports casts arrays or tensors to float16 itself
    (``batch[key].astype(np.float16)`` when AMP is on: pydreamer's preprocessing): the program's
    fp16 regime reaches past the autocast, and bf16 autocast over float16 inputs mixes the two
    half types. The file's own casts are :func:`half_weights`'s."""
    return ctx.memo(
        casts_data_to_fp16, lambda: ctx.project is not None and ctx.project.imports_match(_FP16_CAST)
    )


_FP16_CAST = re.compile(
    rb"""\.astype\([ \t]*(?:np\.|numpy\.)?(?:float16|half)\b|\.astype\([ \t]*["']float16["']"""
    rb"""|\.to\([ \t]*(?:dtype[ \t]*=[ \t]*)?torch\.(?:float16|half)\b"""
)


# ``nn.LSTM(...)``, or the class looked up by its name (CorrNet's ``BiLSTMLayer``:
# ``getattr(nn, self.rnn_type)(...)`` with ``rnn_type='LSTM'``).
_RNN_LAYER = re.compile(
    rb"\bnn\.(?:LSTM|GRU|RNN)[ \t]*\("
    rb"|(?s:\bgetattr\([ \t]*(?:torch\.)?nn[ \t]*,.{0,2000}?[\"'](?:LSTM|GRU|RNN)[\"']"
    rb"|[\"'](?:LSTM|GRU|RNN)[\"'].{0,2000}?\bgetattr\([ \t]*(?:torch\.)?nn[ \t]*,)"
)
_FFT_CALL = re.compile(rb"\bfft\.(?:i?r?fft[n2]?|i?hfft[n2]?)[ \t]*\(|\bstft[ \t]*\(")
# ``functional.set_backend(model, 'cupy', instance=neuron.IFNode)``: spikingjelly's other spelling
# (Spiking-RepVGG, behind the ``--model.cupy`` its README passes).
_CUPY = re.compile(
    rb"^[ \t]*(?:import[ \t]+cupy\b|from[ \t]+cupy\b)|\bbackend[ \t]*=[ \t]*[\"']cupy[\"']|\bset_backend\([^)\n]*[\"']cupy[\"']",
    re.M,
)


_TF32_SETTING = re.compile(rb"\ballow_tf32\b|set_float32_matmul_precision\(|\bfp32_precision\b")
_TF32_SETTING_HINTS = (b"allow_tf32", b"set_float32_matmul_precision", b"fp32_precision")


def trainer_compiles(ctx: FileContext, call: cst.Call) -> bool:
    """``torch_compile`` on (or unknown): transformers then turns TF32 on itself."""
    for keyword in ("torch_compile", "torch_compile_backend", "torch_compile_mode"):
        argument = ctx.argument(call, keyword)
        if argument is None:
            return True
        if argument is MISSING:
            continue
        value = ctx.values.resolve(argument)
        if value is None or value.value not in (False, None):
            return True
    return False


# -- the model a training loop runs (ADV203's fix, ADV206) ----------------------------------------
# Calls that make the optimizer's tensors copies of the model's (fp32 master weights).
_PARAMETER_COPIES = ("clone", "float", "double", "type", "deepcopy")


def parameter_owners(ctx: FileContext, optimizer: cst.Call) -> tuple[set[str], bool]:
    """The modules whose ``.parameters()`` / ``.named_parameters()`` an optimizer constructor
    receives (``model``, ``self.net``), seen through one name (``params = [...]``); and
    whether those tensors are copies (``p.clone().float()``: master weights kept apart)."""
    params = ctx.argument(optimizer, "params", 0)
    if params is None or params is MISSING:
        return set(), False
    roots: list[cst.CSTNode] = [params]
    for name in ctx.walk(params, cst.Name):
        holder = ctx.parent.get(name)
        if isinstance(holder, cst.Attribute):
            continue  # ``model`` of ``model.parameters()``: the module itself
        value = ctx.single_assignment(name)
        if value is not None:
            roots.append(value)
    owners: set[str] = set()
    copies = False
    for root in roots:
        for call in ctx.walk(root, cst.Call):
            func = call.func
            method = func.attr.value if isinstance(func, cst.Attribute) else dotted_name(func)
            if method in ("parameters", "named_parameters") and isinstance(func, cst.Attribute):
                owner = dotted_name(func.value)
                if owner:
                    owners.add(owner)
            elif method and method.split(".")[-1] in _PARAMETER_COPIES:
                copies = True
    return owners, copies


def trained_modules(ctx: FileContext, loop: TrainingLoop) -> set[str]:
    """Spellings of the modules a training loop may run: the owners of the parameters its
    optimizers step, and anything the file treats as a module (``.train()``, ``.eval()``,
    ``.parameters()``, ``.named_parameters()``; a trainer's ``.train()`` aside)."""
    modules: set[str] = set()
    for optimizer in loop.optimizers:
        for constructor in ctx.loops.optimizer_constructors(optimizer):
            modules |= parameter_owners(ctx, constructor)[0]
    for call in ctx.method_calls("train", "eval", "parameters", "named_parameters"):
        receiver = chain_base(call.func.value)  # type: ignore[attr-defined]
        if receiver and "trainer" not in receiver.lower():
            modules.add(receiver)
    return modules


def calls_module(ctx: FileContext, statement: cst.CSTNode, modules: set[str]) -> bool:
    for call in ctx.walk(statement, cst.Call):
        spelling = dotted_name(call.func)
        if spelling in modules or (spelling and spelling.endswith(".forward") and spelling[: -len(".forward")] in modules):
            return True
    return False


def binds(ctx: FileContext, statement: cst.CSTNode, spelling: str) -> bool:
    """Whether ``statement`` assigns ``spelling`` (``loss``, ``self.loss``), alone or unpacked."""
    for node in [*ctx.walk(statement, cst.Assign), *ctx.walk(statement, cst.AugAssign), *ctx.walk(statement, cst.AnnAssign)]:
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        for target in targets:
            if any(dotted_name(n) == spelling for n in [*ctx.walk(target, cst.Name), *ctx.walk(target, cst.Attribute)]):
                return True
    return False


def cast_subject(ctx: FileContext, call: cst.Call) -> str | None:
    """The module a cast applies to: the name it is assigned to (``model = Net().cuda().half()``,
    ``model = DDP(model.half())``), or the receiver of a cast written as a statement
    (``model.half()``, ``self.model.to(device).half()``)."""
    statement = next((a for a in ctx.ancestors(call) if isinstance(a, cst.BaseSmallStatement)), None)
    if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
        return dotted_name(statement.targets[0].target)
    if isinstance(statement, cst.Expr) and isinstance(call.func, cst.Attribute):
        return chain_base(call.func.value)
    return None


def chain_base(receiver: cst.BaseExpression) -> str | None:
    """``model`` of ``model.cuda().train()``: the object at the start of a method chain."""
    while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
        receiver = receiver.func.value
    return dotted_name(receiver)


def same_module(a: str, b: str) -> bool:
    return a == b or a.split(".")[-1] == b.split(".")[-1]


def under_fp16_choice(ctx: FileContext, node: cst.CSTNode | None) -> bool:
    """Whether ``node`` sits in a branch of an ``if`` / conditional expression whose chain of
    tests mentions fp16 (``if args.fp16:``): a GradScaler there is conditional on fp16."""
    return _under_choice(ctx, node, _FP16_CHOICE)
