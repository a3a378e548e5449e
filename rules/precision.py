"""ADV2xx: precision (guide: "Mixed precision training", fp16 / bf16 / tf32).

ADV201 (fp16 where bf16 is available), ADV204 (the deprecated ``torch.cuda.amp`` API)
and ADV205 (a GradScaler next to bf16 autocast) share two pieces defined here: the
reading of every ``autocast`` in a file (device, dtype, enabled) and the removal of
GradScaler plumbing, so that the three rules agree on what a file does and their
fixes converge in the fixer's rounds instead of undoing each other.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Sequence

import libcst as cst

from advisor.apis import ACCELERATOR, TRAINING_ARGUMENTS
from advisor.context import MISSING, FileContext
from advisor.edits import combine_edits, set_keyword, string_like
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid

GUIDE = "Mixed precision training"

AUTOCAST = "torch.autocast"  # torch.amp.autocast is folded into it by the import table
CUDA_AUTOCAST = "torch.cuda.amp.autocast"
CUDA_SCALER = "torch.cuda.amp.GradScaler"
AMP_SCALER = "torch.amp.GradScaler"
SCALERS = (CUDA_SCALER, AMP_SCALER, "torch.GradScaler")
LIGHTNING = ("lightning.pytorch.Trainer", "lightning.fabric.Fabric")

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
# Lightning's half-precision spellings, and their bf16 twin of the same Lightning generation:
# "bf16-mixed" exists only from Lightning 2.0, the legacy "bf16" in every version.
LIGHTNING_BF16 = {16: "bf16", "16": "bf16", "16-mixed": "bf16-mixed"}

# A test that names one of these chooses between bf16 and something else: fp16 under it is
# the user's choice or the fallback for GPUs without bf16, never an oversight.
_BF16_CHOICE = re.compile(r"bf16|bfloat16|get_device_capability", re.IGNORECASE)
# A test that names one of these makes a GradScaler conditional on fp16 being used.
_FP16_CHOICE = re.compile(r"fp16|float16|half", re.IGNORECASE)
# Keywords that load or compute model weights in a dtype (from_pretrained, BitsAndBytesConfig).
_WEIGHT_DTYPE_KEYWORDS = ("torch_dtype", "bnb_4bit_compute_dtype")


def _message(text: str) -> str:
    return f"{text} (guide: {GUIDE})"


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


def half_weights(ctx: FileContext) -> bool:
    """Whether the model itself is loaded or cast to float16 (``torch_dtype=torch.float16``,
    ``bnb_4bit_compute_dtype=torch.float16``, ``.half()``, ``.to(torch.float16)``): switching
    only the mixed-precision setting to bf16 would leave it half done."""
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
    if any(not call.args for call in ctx.method_calls("half")):
        return True
    for call in ctx.method_calls("to"):
        for arg in call.args:
            dtype = resolve_dtype(ctx, arg.value)
            if dtype is not None and dtype.name == FP16:
                return True
    return False


_HALF_WEIGHTS = "; the model is also loaded or cast in float16: move it to bf16 too"


def _resolves_true(ctx: FileContext, call: cst.Call, keyword: str, position: int | None = None) -> bool:
    argument = ctx.argument(call, keyword, position)
    if argument is None or argument is MISSING:
        return False
    return ctx.values.value_of(argument) is True


def _trains_within(ctx: FileContext, root: cst.CSTNode) -> bool:
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
    return _trains_within(ctx, ctx.module)


# Functions named for evaluation or sampling: ``evaluate``, ``log_validation``, ``generate_samples``.
_INFERENCE_FUNCTION = re.compile(r"val|test|infer|pred|sampl|generat", re.IGNORECASE)


def in_inference_function(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Whether ``node`` sits in a function named for evaluation or sampling (``log_validation``,
    ``evaluate``, ``generate_images``) that neither trains itself nor belongs to a training loop:
    such a function serves inference even when the training loop calls it every N steps."""
    function = ctx.enclosing(node, cst.FunctionDef)
    if not isinstance(function, cst.FunctionDef) or not _INFERENCE_FUNCTION.search(function.name.value):
        return False
    if _trains_within(ctx, function):
        return False
    return not any(ctx.is_descendant(function, loop.node) for loop in ctx.loops.training_loops)


_NO_GRAD = ("torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad")


def under_no_grad(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Whether ``node`` runs with autograd off: inside ``with torch.no_grad():`` /
    ``torch.inference_mode()``, or in a function decorated with either."""
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, cst.With):
            for item in ancestor.items:
                managed = item.item.func if isinstance(item.item, cst.Call) else item.item
                if ctx.qualname(managed) in _NO_GRAD:
                    return True
        elif isinstance(ancestor, cst.FunctionDef):
            for decorator in ancestor.decorators:
                expression = decorator.decorator
                expression = expression.func if isinstance(expression, cst.Call) else expression
                if ctx.qualname(expression) in _NO_GRAD:
                    return True
    return False


# -- removing GradScaler plumbing -----------------------------------------------------------------
def scaler_calls(ctx: FileContext) -> list[cst.Call]:
    return ctx.calls(*SCALERS)


@dataclass
class ScalerUsage:
    """What a file does with one GradScaler."""

    # Edits that drop the scaler and its plumbing, when every use is a standard one.
    removal: list[Edit] | None
    # Whether the scaler may be used where this file cannot see (passed to a function
    # defined elsewhere, stored in a container, created conditionally).
    escapes: bool


def scaler_usage(ctx: FileContext, scaler: cst.Call) -> ScalerUsage:
    """How the GradScaler built by ``scaler`` is used.

    The standard uses can be removed: ``scaler = GradScaler(...)`` goes,
    ``scaler.scale(loss).backward()`` becomes ``loss.backward()``, ``scaler.step(opt)``
    becomes ``opt.step()``, ``scaler.update()`` and ``scaler.unscale_(opt)`` go. Any other
    use (``state_dict()``, ``get_scale()``, passing it on, a second binding) keeps the
    scaler. Only plain names are removed: an attribute such as ``self.scaler`` may be read
    from outside the file.
    """
    assign = ctx.parent.get(scaler)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.value is scaler):
        return ScalerUsage(None, escapes=True)
    target = assign.targets[0].target
    if isinstance(target, cst.Attribute):
        spelling = dotted_name(target)
        for occurrence in ctx.nodes(cst.Attribute):
            if occurrence is target or occurrence.attr.value != target.attr.value:
                continue
            if spelling is None or dotted_name(occurrence) != spelling:
                return ScalerUsage(None, escapes=True)  # ``other.scaler``: cannot tell them apart
            if _method_called_on(ctx, occurrence) is None:
                return ScalerUsage(None, escapes=True)
        return ScalerUsage(None, escapes=False)
    if not isinstance(target, cst.Name):
        return ScalerUsage(None, escapes=True)
    removed: list[cst.BaseSmallStatement] = [assign]
    replaced: list[Edit] = []
    standard = True
    for occurrence in ctx.nodes(cst.Name):
        if occurrence.value != target.value or occurrence is target:
            continue
        parent = ctx.parent.get(occurrence)
        if isinstance(parent, cst.Attribute) and parent.attr is occurrence:
            continue  # ``other.scaler``: a different object
        if isinstance(parent, cst.Arg) and parent.keyword is occurrence:
            continue  # ``f(scaler=...)``: a keyword, not a use
        use = _standard_scaler_use(ctx, occurrence)
        if isinstance(use, Edit):
            replaced.append(use)
            continue
        if use is not None:
            removed.append(use)
            continue
        standard = False
        if not (
            _method_called_on(ctx, occurrence) is not None
            or isinstance(parent, cst.Param)
            or _passed_to_local_function(ctx, occurrence)
        ):
            return ScalerUsage(None, escapes=True)
    if not standard:
        return ScalerUsage(None, escapes=False)
    edits = replaced + _removal_edits(ctx, removed)
    import_edit = drop_import_of(ctx, scaler.func, removed_lines=_lines_of(ctx, removed))
    if import_edit is not None:
        edits.append(import_edit)
    return ScalerUsage(combine_edits(ctx, edits), escapes=False)


def remove_scaler_plumbing(ctx: FileContext, scaler: cst.Call) -> list[Edit] | None:
    """Edits that drop a GradScaler whose only uses are the standard ones, or None."""
    return scaler_usage(ctx, scaler).removal


def _method_called_on(ctx: FileContext, receiver: cst.BaseExpression) -> cst.Call | None:
    attribute = ctx.parent.get(receiver)
    if isinstance(attribute, cst.Attribute) and attribute.value is receiver:
        call = ctx.parent.get(attribute)
        if isinstance(call, cst.Call) and call.func is attribute:
            return call
    return None


def _passed_to_local_function(ctx: FileContext, name: cst.Name) -> bool:
    """``train(model, scaler)`` where ``train`` is a function of this file: its uses are visible."""
    arg = ctx.parent.get(name)
    call = ctx.parent.get(arg) if isinstance(arg, cst.Arg) and arg.value is name else None
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name):
        return False
    bindings = ctx.lookup(call.func.value, call)
    return bool(bindings) and all(isinstance(b.node, cst.FunctionDef) for b in bindings)


def _standard_scaler_use(ctx: FileContext, name: cst.Name) -> Edit | cst.BaseSmallStatement | None:
    """For ``name`` used as ``name.method(...)`` in a standard way: the edit that replaces
    the call, or the statement to remove. None for any other use."""
    attribute = ctx.parent.get(name)
    if not isinstance(attribute, cst.Attribute) or attribute.value is not name:
        return None
    call = ctx.parent.get(attribute)
    if not isinstance(call, cst.Call) or call.func is not attribute:
        return None
    method = attribute.attr.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    only_one_positional = len(call.args) == 1 and len(positional) == 1
    if method == "scale":
        # scaler.scale(loss).backward(...) -> loss.backward(...)
        outer = ctx.parent.get(call)
        backward = ctx.parent.get(outer) if outer is not None else None
        if not (
            only_one_positional
            and isinstance(outer, cst.Attribute)
            and outer.value is call
            and outer.attr.value == "backward"
            and isinstance(backward, cst.Call)
            and backward.func is outer
        ):
            return None
        return Edit(call, _atom(positional[0].value))
    if method == "step":
        if not only_one_positional:
            return None
        optimizer = _atom(positional[0].value)
        step = cst.Attribute(value=optimizer, attr=cst.Name("step"))
        return Edit(call, call.with_changes(func=step, args=(), whitespace_before_args=cst.SimpleWhitespace("")))
    if method in ("update", "unscale_"):
        expected = 0 if method == "update" else 1
        if len(call.args) != expected or (expected and not only_one_positional):
            return None
        statement = ctx.parent.get(call)
        if not isinstance(statement, cst.Expr) or statement.value is not call:
            return None
        return statement
    return None


_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.Integer, cst.Float)


def _atom(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` parenthesised where it would bind wrongly in front of ``.method()``."""
    if isinstance(expr, _ATOMS) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _lines_of(ctx: FileContext, smalls: Sequence[cst.CSTNode]) -> set[cst.CSTNode]:
    """The statement lines that go entirely when ``smalls`` are removed."""
    lines: dict[cst.CSTNode, int] = {}
    for small in smalls:
        line = ctx.parent.get(small)
        if line is not None:
            lines[line] = lines.get(line, 0) + 1
    return {line for line, count in lines.items() if count == len(line.body)}  # type: ignore[attr-defined]


def _removal_edits(ctx: FileContext, smalls: Sequence[cst.BaseSmallStatement]) -> list[Edit]:
    """Edits removing small statements without leaving an empty block or a dangling ``;``."""
    by_line: dict[cst.CSTNode, list[cst.BaseSmallStatement]] = {}
    for small in smalls:
        line = ctx.parent.get(small)
        if isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            by_line.setdefault(line, []).append(small)
    edits: list[Edit] = []
    whole_lines: list[cst.SimpleStatementLine] = []
    for line, removed in by_line.items():
        kept = [s for s in line.body if s not in removed]  # type: ignore[attr-defined]
        if kept:
            kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            edits.append(Edit(line, line.with_changes(body=kept)))
        elif isinstance(line, cst.SimpleStatementSuite):
            edits.append(Edit(line, _as_pass(line)))  # ``if x: scaler.update()``
        else:
            whole_lines.append(line)  # type: ignore[arg-type]
    by_block: dict[cst.CSTNode, list[cst.SimpleStatementLine]] = {}
    for line in whole_lines:
        by_block.setdefault(ctx.parent[line], []).append(line)
    for block, lines in by_block.items():
        emptied = isinstance(block, cst.IndentedBlock) and len(lines) == len(block.body)
        for index, line in enumerate(sorted(lines, key=ctx.order.__getitem__)):
            if emptied and index == 0:
                edits.append(Edit(line, _as_pass(line)))
            else:
                edits.append(Edit(line, cst.RemoveFromParent()))
    return edits


def _as_pass(line: cst.SimpleStatementLine | cst.SimpleStatementSuite) -> cst.CSTNode:
    return line.with_changes(body=[cst.Pass()], trailing_whitespace=cst.TrailingWhitespace())


def drop_import_of(
    ctx: FileContext, func: cst.BaseExpression, removed_lines: set[cst.CSTNode] | frozenset = frozenset()
) -> Edit | None:
    """When ``func`` is a name bound only by ``from m import name`` and used nowhere else,
    the edit that takes it out of that import (the whole import when it is the last name)."""
    if not isinstance(func, cst.Name):
        return None
    bindings = ctx.lookup(func.value, func)
    if len(bindings) != 1 or not isinstance(bindings[0].node, cst.ImportFrom):
        return None
    statement = bindings[0].node
    if isinstance(statement.names, cst.ImportStar):
        return None
    for name in ctx.nodes(cst.Name):
        if name is func or name.value != func.value or ctx.is_descendant(name, statement):
            continue
        parent = ctx.parent.get(name)
        if isinstance(parent, cst.Attribute) and parent.attr is name:
            continue
        if isinstance(parent, cst.Arg) and parent.keyword is name:
            continue
        return None
    aliases = list(statement.names)
    index = next(
        (
            i
            for i, alias in enumerate(aliases)
            if (alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else alias.name.value)
            == func.value
        ),
        None,
    )
    if index is None:
        return None
    if len(aliases) > 1:
        removed = aliases.pop(index)
        if index == len(aliases):
            aliases[-1] = aliases[-1].with_changes(comma=removed.comma)
        return Edit(statement, statement.with_changes(names=aliases))
    line = ctx.parent.get(statement)
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    block = ctx.parent.get(line)
    if isinstance(block, cst.IndentedBlock) and all(s is line or s in removed_lines for s in block.body):
        return None  # the import would leave its block empty (e.g. under ``try:``)
    return Edit(line, cst.RemoveFromParent())


def _scaler_removals(ctx: FileContext) -> tuple[list[Edit], bool]:
    """Edits dropping every GradScaler of the file that can be dropped; and whether all could."""
    edits: list[Edit] = []
    complete = True
    for scaler in scaler_calls(ctx):
        removal = remove_scaler_plumbing(ctx, scaler)
        if removal is None:
            complete = False
        else:
            edits.extend(removal)
    return edits, complete


# -- ADV201 ----------------------------------------------------------------------------------------
class Fp16OnBf16Gpu(Rule):
    code = "ADV201"
    name = "fp16-on-bf16-gpu"
    summary = "fp16 mixed precision on a GPU that supports bf16."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        fp16 has a 5-bit exponent: values above 65504 overflow and small gradients
        underflow, which is why fp16 training needs a `GradScaler` (loss scaling, inf/NaN
        checks, skipped steps). The guide's *Mixed precision training* section: on Ampere
        or newer hardware "you can use bf16 for mixed precision training", which has "a
        much bigger dynamic range" (about fp32's), and the GPU guide adds that bf16 works
        "without adding any loss scaling methods like you would with fp16". Same tensor
        core speed, fewer NaN surprises, less code.
    """
    example = """
        scaler = torch.cuda.amp.GradScaler()
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(x.cuda()), y.cuda())
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

        args = TrainingArguments("out", fp16=True)
    """
    use_instead = """
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

        args = TrainingArguments("out", bf16=True)
    """
    silent_when = """
        - the target GPU has no bf16 (`--gpu V100`, `--gpu T4`): fp16 is the right choice there;
        - fp16 is the other branch of a bf16 choice: `torch.bfloat16 if
          torch.cuda.is_bf16_supported() else torch.float16`, `if args.bf16: ... else: ...`;
        - the file also sets up bf16 the same way elsewhere (`Accelerator(mixed_precision="bf16")`,
          `TrainingArguments(bf16=True)`, Lightning `precision="bf16-mixed"`): a script that
          builds both precisions (a test of each, a choice of runs) uses fp16 on purpose;
        - the dtype, device or value cannot be read (`dtype=ptdtype` chosen at run time,
          `torch.autocast(device_type=device.type)`, `TrainingArguments(**vars(args))`,
          precision set by a launcher or `LightningCLI`);
        - the autocast runs on the CPU or is disabled (`enabled=False`), or the framework is
          told to use the CPU (`use_cpu=True`, `Accelerator(cpu=True)`, `accelerator="cpu"`);
        - the autocast serves inference: the file never trains (no `backward()`, GradScaler or
          optimizer step), or the autocast runs under `torch.no_grad()` /
          `torch.inference_mode()` (a `with` block or a decorated function), or in a function
          named for evaluation or sampling (`log_validation`, `evaluate`, `generate_samples`)
          that runs no backward pass or optimizer step, or the Lightning `Trainer` only runs
          `test` / `validate` / `predict`: fp16 inference is fine.

        Where the model itself is loaded or cast in float16 (`torch_dtype=torch.float16`,
        `bnb_4bit_compute_dtype=torch.float16`, `.half()`), the finding comes without a fix:
        switching only the mixed-precision flag would leave the job half done.

        The fix switches to bf16 and, for `autocast`, removes the GradScaler when its only
        uses are `scale(loss).backward()`, `step(opt)`, `update()` and `unscale_(opt)`; a
        scaler used in any other way (checkpointed, queried, passed on) is kept, and ADV205
        reports it afterwards.
    """
    valid = [
        Valid(
            """
            import torch
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x.cuda())
                loss.backward()
            """,
        ),
        Valid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = model(x.cuda())
                scaler.scale(loss).backward()
            """,
            gpu="V100",
            note="no bf16 on Volta: fp16 is intended",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", fp16=True)
            """,
            gpu="T4",
            note="no bf16 on Turing: fp16 is intended",
        ),
        Valid(
            """
            import torch
            amp_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            for x, y in loader:
                with torch.autocast("cuda", dtype=amp_dtype):
                    loss = model(x.cuda())
                loss.backward()
            """,
            note="fp16 only as the fallback of a bf16 capability check",
        ),
        Valid(
            """
            import torch
            from transformers import TrainingArguments
            if torch.cuda.is_bf16_supported():
                args = TrainingArguments("out", bf16=True)
            else:
                args = TrainingArguments("out", fp16=True)
            """,
            note="fp16 in the else branch of a capability check",
        ),
        Valid(
            """
            import torch
            dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'
            ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
            ctx = torch.amp.autocast(device_type='cuda', dtype=ptdtype)
            scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
            with ctx:
                loss = model(x)
            scaler.scale(loss).backward()
            """,
            note="nanoGPT: dtype chosen at run time",
        ),
        Valid(
            """
            import torch
            device_type = "cuda" if torch.cuda.is_available() else "cpu"
            with torch.autocast(device_type=device_type, dtype=torch.float16):
                loss = model(x)
            loss.backward()
            """,
            note="device unknown",
        ),
        Valid(
            """
            import torch
            with torch.autocast("cpu"):
                loss = model(x)
            loss.backward()
            """,
            note="CPU autocast defaults to bfloat16",
        ),
        Valid(
            """
            import torch
            with torch.autocast("cuda", enabled=False):
                loss = model(x)
            loss.backward()
            """,
            note="autocast disabled",
        ),
        Valid(
            """
            import torch
            model = model.cuda().eval()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
                logits = model(x.cuda())
            """,
            note="inference only: fp16 is as fast and more precise",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments(**vars(cli_args))
            """,
            note="precision from the command line",
        ),
        Valid(
            """
            import argparse
            from transformers import TrainingArguments
            parser = argparse.ArgumentParser()
            parser.add_argument("--fp16", action="store_true")
            args = parser.parse_args()
            training_args = TrainingArguments("out", fp16=args.fp16)
            """,
            note="argparse flag defaults to False",
        ),
        Valid(
            """
            from accelerate import Accelerator
            accelerator = Accelerator(mixed_precision=args.mixed_precision)
            """,
            note="value unknown",
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator
            mixed_precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
            accelerator = Accelerator(mixed_precision=mixed_precision)
            """,
        ),
        Valid(
            """
            import lightning as L
            trainer = L.Trainer(precision="bf16-mixed")
            """,
        ),
        Valid(
            """
            import torch
            if args.precision == "fp16":
                amp = torch.autocast("cuda", dtype=torch.float16)
            elif args.precision == "bf16":
                amp = torch.autocast("cuda", dtype=torch.bfloat16)
            with amp:
                loss = model(x)
            loss.backward()
            """,
            note="the script offers bf16: fp16 is the user's choice",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", fp16=True, use_cpu=True)
            """,
            note="told to run on the CPU",
        ),
        Valid(
            """
            import lightning as L
            trainer = L.Trainer(accelerator="cpu", precision=16)
            """,
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator

            def check_bf16_training():
                accelerator = Accelerator(mixed_precision="bf16")
                train(accelerator)

            def check_fp16_training():
                accelerator = Accelerator(mixed_precision="fp16")
                train(accelerator)
            """,
            note="both precisions set up on purpose, one after the other",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            bf16_args = TrainingArguments("out-bf16", bf16=True)
            fp16_args = TrainingArguments("out-fp16", fp16=True)
            """,
            note="the file builds both precisions",
        ),
        Valid(
            """
            import torch
            from transformers import TrainingArguments
            training_args = TrainingArguments("out", fp16=True)
            if torch.cuda.get_device_capability()[0] >= 8:
                training_args.fp16 = False
                training_args.bf16 = True
            """,
            note="precision changed after construction",
        ),
        Valid(
            """
            import torch

            def log_validation(pipeline, prompts):
                images = []
                for prompt in prompts:
                    with torch.autocast("cuda"):
                        images.append(pipeline(prompt).images[0])
                return images

            for step, batch in enumerate(loader):
                loss = unet(batch.cuda()).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if step % 500 == 0:
                    log_validation(pipeline, prompts)
            """,
            note="the autocast samples images in a validation function that trains nothing",
        ),
        Valid(
            """
            import lightning.pytorch as pl
            trainer = pl.Trainer(accelerator="gpu", precision=16)
            trainer.test(model, dataloaders=test_loader)
            """,
            note="the Trainer only tests: fp16 inference",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = loss_fn(model(x.cuda()), y.cuda())
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
            """,
            fixed="""
            import torch
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = loss_fn(model(x.cuda()), y.cuda())
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch as T
            from torch.cuda.amp import autocast, GradScaler
            scaler = GradScaler()
            for x, y in loader:
                with autocast():
                    loss = model(x.cuda()) / accumulation_steps
                scaler.scale(loss / 2).backward()
                if (step + 1) % accumulation_steps == 0:
                    scaler.step(opt)
                    scaler.update()
            """,
            fixed="""
            import torch as T
            from torch.cuda.amp import autocast
            for x, y in loader:
                with autocast(dtype=T.bfloat16):
                    loss = model(x.cuda()) / accumulation_steps
                (loss / 2).backward()
                if (step + 1) % accumulation_steps == 0:
                    opt.step()
            """,
            note="deprecated autocast without dtype is fp16; ADV204 modernises it in a later round",
        ),
        Invalid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for batch in loader:
                with torch.amp.autocast(device_type="cuda"):
                    loss = model(batch)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                if step % 100 == 0:
                    torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, "ckpt.pt")
            """,
            fixed="""
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for batch in loader:
                with torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16):
                    loss = model(batch)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                if step % 100 == 0:
                    torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, "ckpt.pt")
            """,
            note="the scaler is checkpointed: only the dtype changes",
        ),
        Invalid(
            """
            import torch
            AMP_DTYPE = torch.half
            scaler = torch.cuda.amp.GradScaler()
            for x in loader:
                with torch.autocast("cuda", AMP_DTYPE):
                    loss = model(x)
                scaler.scale(loss).backward()
                scaler.step(opt); scaler.update()
            """,
            fixed="""
            import torch
            AMP_DTYPE = torch.bfloat16
            for x in loader:
                with torch.autocast("cuda", AMP_DTYPE):
                    loss = model(x)
                loss.backward()
                opt.step()
            """,
        ),
        Invalid(
            """
            from transformers import TrainingArguments, Trainer
            args = TrainingArguments(
                output_dir="out",
                per_device_train_batch_size=8,
                fp16=True,
            )
            """,
            fixed="""
            from transformers import TrainingArguments, Trainer
            args = TrainingArguments(
                output_dir="out",
                per_device_train_batch_size=8,
                bf16=True,
            )
            """,
        ),
        Invalid(
            """
            import transformers
            config = dict(output_dir="out", fp16=True, fp16_full_eval=True)
            args = transformers.Seq2SeqTrainingArguments(**config)
            """,
            fixed="""
            import transformers
            config = dict(output_dir="out", bf16=True, fp16_full_eval=True)
            args = transformers.Seq2SeqTrainingArguments(**config)
            """,
        ),
        Invalid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", fp16=True, bf16=False, fp16_full_eval=True)
            """,
            fixed="""
            from transformers import TrainingArguments
            args = TrainingArguments("out", fp16=False, bf16=True, fp16_full_eval=True)
            """,
        ),
        Invalid(
            """
            import argparse
            from accelerate import Accelerator
            parser = argparse.ArgumentParser()
            parser.add_argument("--mixed_precision", type=str, default="fp16", choices=["no", "fp16", "bf16"])
            args = parser.parse_args()
            accelerator = Accelerator(mixed_precision=args.mixed_precision)
            """,
            fixed="""
            import argparse
            from accelerate import Accelerator
            parser = argparse.ArgumentParser()
            parser.add_argument("--mixed_precision", type=str, default="bf16", choices=["no", "fp16", "bf16"])
            args = parser.parse_args()
            accelerator = Accelerator(mixed_precision=args.mixed_precision)
            """,
        ),
        Invalid(
            """
            import pytorch_lightning as pl
            trainer = pl.Trainer(accelerator="gpu", precision=16)
            """,
            fixed="""
            import pytorch_lightning as pl
            trainer = pl.Trainer(accelerator="gpu", precision="bf16")
            """,
        ),
        Invalid(
            """
            import pytorch_lightning as pl
            trainer = pl.Trainer(accelerator="gpu", precision=16)
            trainer.fit(model, train_loader)
            trainer.test(model, test_loader)
            """,
            fixed="""
            import pytorch_lightning as pl
            trainer = pl.Trainer(accelerator="gpu", precision="bf16")
            trainer.fit(model, train_loader)
            trainer.test(model, test_loader)
            """,
            note="fits before it tests: a training run",
        ),
        Invalid(
            """
            import torch

            def train_and_validate(model, loader, optimizer):
                for x, y in loader:
                    with torch.autocast("cuda", dtype=torch.float16):
                        loss = model(x.cuda(), y.cuda())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            import torch

            def train_and_validate(model, loader, optimizer):
                for x, y in loader:
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = model(x.cuda(), y.cuda())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="named for validation too, but it trains",
        ),
        Invalid(
            """
            from lightning.pytorch import Trainer
            trainer = Trainer(devices=1, precision='16-mixed')
            """,
            fixed="""
            from lightning.pytorch import Trainer
            trainer = Trainer(devices=1, precision='bf16-mixed')
            """,
        ),
        Invalid(
            """
            import torch
            dtype = 'float16'
            ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
            ctx = torch.amp.autocast(device_type='cuda', dtype=ptdtype)
            scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
            with ctx:
                loss = model(x)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            """,
            fixed="""
            import torch
            dtype = 'bfloat16'
            ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
            ctx = torch.amp.autocast(device_type='cuda', dtype=ptdtype)
            with ctx:
                loss = model(x)
            loss.backward()
            optimizer.step()
            """,
            note="nanoGPT with the dtype fixed to float16",
        ),
        Invalid(
            """
            import torch
            from transformers import AutoModelForCausalLM, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.float16)
            args = TrainingArguments("out", fp16=True)
            """,
            fixed=None,
            note="weights loaded in float16: advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.target.bf16:
            return
        yield from self._autocasts(ctx)
        yield from self._training_arguments(ctx)
        yield from self._accelerators(ctx)
        yield from self._lightning(ctx)

    def _gpu(self, ctx: FileContext) -> str:
        return ctx.target.name

    # -- torch.autocast -------------------------------------------------------------------------
    def _autocasts(self, ctx: FileContext) -> Iterator[Finding]:
        if not file_trains(ctx):
            return
        sites = autocasts(ctx)
        for site in sites:
            if not site.fp16 or under_bf16_choice(ctx, site.call) or under_bf16_choice(ctx, site.dtype.node):
                continue
            if under_no_grad(ctx, site.call) or in_inference_function(ctx, site.call):
                continue  # inference: fp16 is as fast as bf16 and more precise
            spelling = "torch.cuda.amp.autocast" if site.deprecated else "torch.autocast"
            if site.dtype.node is None:
                message = (
                    f"`{spelling}` without `dtype` runs in float16 on CUDA, and {self._gpu(ctx)} supports bf16: "
                    "pass `dtype=torch.bfloat16` and drop the GradScaler"
                )
            else:
                message = (
                    f"float16 autocast on a bf16-capable GPU ({self._gpu(ctx)}): use `torch.bfloat16`, "
                    "which keeps fp32's range and needs no GradScaler"
                )
            fix = self._autocast_fix(ctx, site, sites)
            if half_weights(ctx):
                message, fix = message + _HALF_WEIGHTS, None
            yield self.report(site.call, _message(message), fix)

    def _autocast_fix(self, ctx: FileContext, site: Autocast, sites: list[Autocast]):
        assert site.dtype is not None
        imports: tuple[str, ...] = ()
        if site.dtype.node is None:
            bf16, imports = ctx.reference("torch.bfloat16")
            edit = Edit(site.call, set_keyword(site.call, "dtype", bf16))
        elif site.dtype.bf16_key is None and isinstance(site.dtype.node, (cst.Name, cst.Attribute)):
            bf16, imports = ctx.reference("torch.bfloat16")
            edit = Edit(site.dtype.node, bf16)
        elif site.dtype.bf16_key is not None and isinstance(site.dtype.node, cst.SimpleString):
            edit = Edit(site.dtype.node, string_like(site.dtype.node, site.dtype.bf16_key))
        else:
            return None
        # The scaler can go only if no other autocast may still run in float16 once this one is bf16.
        others_bf16 = all(
            other is site
            or other.certainly_not_cuda
            or other.bf16
            or (other.dtype is not None and other.dtype.node is not None and other.dtype.node is site.dtype.node)
            or under_no_grad(ctx, other.call)  # no backward runs there: it never needed the scaler
            for other in sites
        )
        scaler_edits, complete = _scaler_removals(ctx) if others_bf16 else ([], False)
        edits = combine_edits(ctx, [edit, *scaler_edits]) if scaler_edits else None
        if edits is None:
            edits = [edit]
            scaler_edits = []
        if scaler_edits and complete:
            description = "Use bf16 autocast and remove the GradScaler"
        elif scaler_edits:
            description = "Use bf16 autocast and remove the GradScalers that have no other use"
        else:
            description = "Use bf16 autocast"
        return self.fix(description, *edits, imports=imports)

    # -- TrainingArguments ---------------------------------------------------------------------
    def _training_arguments(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            fp16 = ctx.argument(call, "fp16")
            if fp16 is None or fp16 is MISSING:
                continue
            value = ctx.values.resolve(fp16)
            if value is None or value.value is not True:
                continue
            if under_bf16_choice(ctx, call) or under_bf16_choice(ctx, value.node):
                continue
            if _resolves_true(ctx, call, "use_cpu") or _resolves_true(ctx, call, "no_cuda"):
                continue
            if _precision_reassigned(ctx, call) or self._other_call_sets(ctx, TRAINING_ARGUMENTS, "bf16", (True,)):
                continue
            backend = ctx.argument(call, "half_precision_backend")
            if backend is None or (backend is not MISSING and ctx.values.value_of(backend) not in ("auto", "cuda_amp")):
                continue  # apex or an unknown backend: bf16 may not be available through it
            bf16 = ctx.argument(call, "bf16")
            if bf16 is None:
                continue
            if bf16 is not MISSING:
                bf16_value = ctx.values.resolve(bf16)
                if bf16_value is None or bf16_value.value is not False:
                    continue
            message = (
                f"`fp16=True` on a bf16-capable GPU ({self._gpu(ctx)}): use `bf16=True`, "
                "as fast, with fp32's range and no loss scaling"
            )
            fix = self._training_arguments_fix(ctx, call, fp16, bf16)
            if half_weights(ctx):
                message, fix = message + _HALF_WEIGHTS, None
            yield self.report(call, _message(message), fix)

    def _training_arguments_fix(self, ctx: FileContext, call: cst.Call, fp16, bf16):
        if bf16 is MISSING:
            edit = _rename_keyword_of(ctx, fp16, "bf16")
            return None if edit is None else self.fix("Use `bf16=True` instead of `fp16=True`", edit)
        # ``fp16=True, bf16=False`` written out: swap the two literals.
        if _is_literal(fp16, "True") and _is_literal(bf16, "False"):
            return self.fix(
                "Set `bf16=True` and `fp16=False`",
                Edit(fp16, fp16.with_changes(value="False")),
                Edit(bf16, bf16.with_changes(value="True")),
            )
        return None

    # -- Accelerate ----------------------------------------------------------------------------
    def _accelerators(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(ACCELERATOR):
            argument = ctx.argument(call, "mixed_precision")
            if argument is None or argument is MISSING:
                continue
            value = ctx.values.resolve(argument)
            if value is None or value.value != "fp16":
                continue
            if under_bf16_choice(ctx, call) or under_bf16_choice(ctx, value.node) or _resolves_true(ctx, call, "cpu"):
                continue
            if self._other_call_sets(ctx, (ACCELERATOR,), "mixed_precision", ("bf16",)):
                continue
            fix = None
            if isinstance(value.node, cst.SimpleString):
                fix = self.fix('Use `mixed_precision="bf16"`', Edit(value.node, string_like(value.node, "bf16")))
            message = f'`mixed_precision="fp16"` on a bf16-capable GPU ({self._gpu(ctx)}): use `"bf16"`'
            if half_weights(ctx):
                message, fix = message + _HALF_WEIGHTS, None
            yield self.report(call, _message(message), fix)

    # -- Lightning -----------------------------------------------------------------------------
    def _lightning(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(*LIGHTNING):
            argument = ctx.argument(call, "precision")
            if argument is None or argument is MISSING:
                continue
            value = ctx.values.resolve(argument)
            if value is None or isinstance(value.value, bool) or value.value not in LIGHTNING_BF16:
                continue
            if under_bf16_choice(ctx, call) or under_bf16_choice(ctx, value.node):
                continue
            if self._other_call_sets(ctx, LIGHTNING, "precision", _LIGHTNING_BF16_SPELLINGS):
                continue
            accelerator = ctx.argument(call, "accelerator")
            if accelerator is None or (accelerator is not MISSING and ctx.values.value_of(accelerator) == "cpu"):
                continue
            if _evaluation_only_trainer(ctx, call):
                continue
            replacement = LIGHTNING_BF16[value.value]
            fix = None
            if isinstance(value.node, cst.SimpleString):
                fix = self.fix(f'Use `precision="{replacement}"`', Edit(value.node, string_like(value.node, replacement)))
            elif isinstance(value.node, cst.Integer) and value.origin != "argparse default":
                # An argparse default would go through ``type=int``: a string there breaks the parser.
                fix = self.fix(f'Use `precision="{replacement}"`', Edit(value.node, cst.SimpleString(f'"{replacement}"')))
            message = f"`precision={ctx.code(value.node)}` is fp16 on a bf16-capable GPU ({self._gpu(ctx)}): use `\"{replacement}\"`"
            if half_weights(ctx):
                message, fix = message + _HALF_WEIGHTS, None
            yield self.report(call, _message(message), fix)


    @staticmethod
    def _other_call_sets(ctx: FileContext, qualnames: Sequence[str], keyword: str, bf16_values: tuple) -> bool:
        """Whether the file also builds one of ``qualnames`` in bf16 (``Accelerator(mixed_precision=
        "bf16")`` beside the fp16 one): a script that sets up both precisions, such as a test of
        each or a choice between runs, uses fp16 on purpose where it does."""
        for other in ctx.calls(*qualnames):
            argument = ctx.argument(other, keyword)
            if argument is None or argument is MISSING:
                continue
            value = ctx.values.resolve(argument)
            if value is None:
                continue
            if value.value is True and True in bf16_values:
                return True
            if isinstance(value.value, str) and value.value in bf16_values:
                return True
        return False


_LIGHTNING_BF16_SPELLINGS = ("bf16", "bf16-mixed", "bf16-true")
_LIGHTNING_EVALUATION = ("test", "validate", "predict")


def _evaluation_only_trainer(ctx: FileContext, call: cst.Call) -> bool:
    """``trainer = Trainer(precision=16)`` that the file only runs ``test`` / ``validate`` /
    ``predict`` on, never ``fit``: fp16 serves inference there."""
    assign = ctx.parent.get(call)
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or assign.value is not call:
        return False
    name = dotted_name(assign.targets[0].target)
    if name is None:
        return False
    uses = [
        c
        for c in ctx.method_calls("fit", *_LIGHTNING_EVALUATION)
        if isinstance(c.func, cst.Attribute) and dotted_name(c.func.value) == name
    ]
    return bool(uses) and all(c.func.attr.value in _LIGHTNING_EVALUATION for c in uses)  # type: ignore[union-attr]


def _precision_reassigned(ctx: FileContext, call: cst.Call) -> bool:
    """``args = TrainingArguments(fp16=True)`` followed by ``args.fp16 = ...`` / ``args.bf16 = ...``:
    the value at the call is not the one training runs with."""
    assign = ctx.parent.get(call)
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or assign.value is not call:
        return False
    name = dotted_name(assign.targets[0].target)
    return name is not None and any(ctx.attribute_assignments.get(f"{name}.{field}") for field in ("fp16", "bf16"))


def _is_literal(node, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _rename_keyword_of(ctx: FileContext, value: cst.BaseExpression, new: str) -> Edit | None:
    """Rename the keyword or dict key that ``value`` is passed under: ``fp16=v`` in a call or
    ``dict(...)``, or ``"fp16": v`` in a dict literal."""
    holder = ctx.parent.get(value)
    if isinstance(holder, cst.Arg) and holder.keyword is not None and holder.value is value:
        return Edit(holder.keyword, cst.Name(new))
    if isinstance(holder, cst.DictElement) and isinstance(holder.key, cst.SimpleString) and holder.value is value:
        return Edit(holder.key, string_like(holder.key, new))
    return None


# -- ADV204 ----------------------------------------------------------------------------------------
class DeprecatedAmpApi(Rule):
    code = "ADV204"
    name = "deprecated-amp-api"
    summary = "`torch.cuda.amp.autocast` / `torch.cuda.amp.GradScaler` are deprecated."
    guide = GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        Since PyTorch 2.4, `torch.cuda.amp.autocast(...)` and `torch.cuda.amp.GradScaler(...)`
        emit a `FutureWarning`: they are thin wrappers kept for old code, and the
        device-generic `torch.autocast("cuda", ...)` / `torch.amp.GradScaler("cuda", ...)`
        replace them with the same behaviour. Moving now keeps the *Mixed precision
        training* setup working when the wrappers are removed, and makes the device (and
        the dtype choice of ADV201) explicit.
    """
    example = """
        from torch.cuda.amp import autocast, GradScaler
        scaler = GradScaler()
        with autocast(dtype=torch.bfloat16):
            loss = model(x)
    """
    use_instead = """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
    """
    silent_when = """
        - the code already uses `torch.autocast` / `torch.amp.GradScaler`;
        - `torch.cpu.amp` or other device-specific modules (not this rule's API).

        `torch.amp.GradScaler` needs PyTorch 2.3 or newer, `torch.autocast` 1.10.
        Positional arguments are passed on by name (`torch.cuda.amp.autocast(True)` becomes
        `torch.autocast("cuda", enabled=True)`); an autocast called with `*args` is
        reported without a fix. The `from torch.cuda.amp import ...` line goes once
        nothing else uses the names it binds.
    """
    valid = [
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            """,
        ),
        Valid(
            """
            import torch
            with torch.cpu.amp.autocast():
                loss = model(x)
            """,
            note="CPU autocast is not this rule's API",
        ),
        Valid(
            """
            from torch.amp import autocast, GradScaler
            scaler = GradScaler()
            with autocast("cuda"):
                loss = model(x)
            """,
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler(init_scale=2.0**14)
            with torch.cuda.amp.autocast(dtype=torch.bfloat16):
                loss = model(x)
            """,
            fixed="""
            import torch
            scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            """,
            count=2,
        ),
        Invalid(
            """
            from torch.cuda.amp import autocast, GradScaler
            scaler = GradScaler()
            for x in loader:
                with autocast():
                    loss = model(x)
                scaler.scale(loss).backward()
            """,
            fixed="""
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for x in loader:
                with torch.autocast("cuda"):
                    loss = model(x)
                scaler.scale(loss).backward()
            """,
            count=2,
        ),
        Invalid(
            """
            import torch as T
            from torch.cuda import amp
            with amp.autocast(True, T.float16):
                loss = model(x)
            """,
            fixed="""
            import torch as T
            from torch.cuda import amp
            with T.autocast("cuda", enabled=True, dtype=T.float16):
                loss = model(x)
            """,
        ),
        Invalid(
            """
            import torch
            with torch.cuda.amp.autocast(
                enabled=use_amp,
                dtype=torch.bfloat16,
            ):
                loss = model(x)
            """,
            fixed="""
            import torch
            with torch.autocast(
                "cuda",
                enabled=use_amp,
                dtype=torch.bfloat16,
            ):
                loss = model(x)
            """,
        ),
        Invalid(
            """
            import torch
            with torch.cuda.amp.autocast(*amp_args):
                loss = model(x)
            """,
            fixed=None,
            note="positional arguments unknown: no fix",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(CUDA_AUTOCAST, CUDA_SCALER):
            if ctx.qualname(call.func) == CUDA_AUTOCAST:
                message = "`torch.cuda.amp.autocast(...)` is deprecated: use `torch.autocast(\"cuda\", ...)`"
                fix = self._autocast_fix(ctx, call)
            else:
                message = "`torch.cuda.amp.GradScaler(...)` is deprecated: use `torch.amp.GradScaler(\"cuda\", ...)`"
                fix = self._scaler_fix(ctx, call)
            yield self.report(call, _message(message), fix)

    def _autocast_fix(self, ctx: FileContext, call: cst.Call):
        args = []
        for index, arg in enumerate(call.args):
            if arg.star:
                return None
            if arg.keyword is None:
                if index >= len(CUDA_AUTOCAST_PARAMETERS):
                    return None
                arg = arg.with_changes(
                    keyword=cst.Name(CUDA_AUTOCAST_PARAMETERS[index]),
                    equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
                    ),
                )
            args.append(arg)
        func, imports = ctx.reference(AUTOCAST)
        return self._device_first(ctx, call, func, args, imports, 'Use `torch.autocast("cuda", ...)`')

    def _scaler_fix(self, ctx: FileContext, call: cst.Call):
        # torch.amp.GradScaler takes ``device`` first and then the same parameters in order.
        func, imports = ctx.reference(AMP_SCALER)
        return self._device_first(ctx, call, func, list(call.args), imports, 'Use `torch.amp.GradScaler("cuda", ...)`')

    def _device_first(self, ctx, call, func, args, imports, description):
        if isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
            separator = cst.Comma(whitespace_after=call.whitespace_before_args)  # one argument a line
        else:
            separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        device = cst.Arg(cst.SimpleString('"cuda"'), comma=separator if args else cst.MaybeSentinel.DEFAULT)
        edits = [Edit(call, call.with_changes(func=func, args=[device, *args]))]
        import_edit = drop_import_of(ctx, call.func)
        if import_edit is not None:
            edits.append(import_edit)
        return self.fix(description, *edits, imports=imports)


# -- ADV205 ----------------------------------------------------------------------------------------
class GradScalerWithBf16(Rule):
    code = "ADV205"
    name = "gradscaler-with-bf16"
    summary = "A GradScaler in a file whose autocast runs in bf16."
    guide = GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        Loss scaling exists because fp16 gradients underflow. bf16 has fp32's exponent
        range, so the guide's GPU page notes that bf16 needs no "loss scaling methods like
        you would with fp16" (*Mixed precision training*, bf16). A GradScaler next to bf16
        autocast still multiplies the loss, unscales every gradient, checks them all for
        inf/NaN and synchronises with the host each step: pure overhead.
    """
    example = """
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """
    use_instead = """
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
        loss.backward()
        optimizer.step()
    """
    silent_when = """
        - any autocast in the file may run in float16 (dtype unknown, default fp16 on CUDA,
          or a bf16/fp16 choice made at run time);
        - the scaler is disabled or only enabled for fp16: `GradScaler(enabled=False)`,
          `GradScaler(enabled=(dtype == "float16"))` (nanoGPT) is correct code, and so is a
          scaler created under `if args.fp16:`;
        - there is no bf16 autocast at all;
        - the scaler may serve code outside the file: passed to a function imported from
          elsewhere, stored in a container, created conditionally.

        The fix removes the scaler when its only uses are `scale(loss).backward()`,
        `step(opt)`, `update()` and `unscale_(opt)`; a scaler that is checkpointed, queried
        or passed on is reported without a fix.
    """
    valid = [
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x)
            scaler.scale(loss).backward()
            """,
        ),
        Valid(
            """
            import torch
            dtype = 'bfloat16' if torch.cuda.is_bf16_supported() else 'float16'
            ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
            ctx = torch.amp.autocast(device_type='cuda', dtype=ptdtype)
            scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
            with ctx:
                loss = model(x)
            scaler.scale(loss).backward()
            """,
            note="nanoGPT: the scaler only runs for float16",
        ),
        Valid(
            """
            import torch
            dtype = torch.bfloat16
            scaler = torch.cuda.amp.GradScaler(enabled=(dtype == torch.float16))
            with torch.autocast("cuda", dtype=dtype):
                loss = model(x)
            scaler.scale(loss).backward()
            """,
            note="enabled only for float16",
        ),
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda", enabled=False)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            scaler.scale(loss).backward()
            """,
        ),
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            with torch.autocast("cuda"):
                aux = head(x)
            scaler.scale(loss + aux).backward()
            """,
            note="another autocast runs in float16",
        ),
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=amp_dtype):
                loss = model(x)
            scaler.scale(loss).backward()
            """,
            note="dtype unknown",
        ),
        Valid(
            """
            import torch
            scaler = None
            if args.fp16:
                scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            loss.backward()
            """,
            note="a scaler kept for an fp16 path",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x, y)
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            """,
            fixed="""
            import torch
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x, y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            """,
        ),
        Invalid(
            """
            import torch
            from torch.amp import GradScaler
            AMP_DTYPE = torch.bfloat16
            scaler = GradScaler()
            for x in loader:
                with torch.autocast(device_type="cuda", dtype=AMP_DTYPE):
                    loss = model(x)
                scaler.scale(loss).backward()
                if clip:
                    scaler.unscale_(opt)
                scaler.step(opt)
                scaler.update()
            """,
            fixed="""
            import torch
            AMP_DTYPE = torch.bfloat16
            for x in loader:
                with torch.autocast(device_type="cuda", dtype=AMP_DTYPE):
                    loss = model(x)
                loss.backward()
                if clip:
                    pass
                opt.step()
            """,
        ),
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            print(scaler.get_scale())
            """,
            fixed=None,
            note="the scaler is queried: reported without a fix",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        scalers = scaler_calls(ctx)
        if not scalers:
            return
        sites = autocasts(ctx)
        if not any(site.bf16 and not site.certainly_not_cuda for site in sites):
            return
        if not all(site.bf16 or site.certainly_not_cuda for site in sites):
            return
        for scaler in scalers:
            qualname = ctx.qualname(scaler.func) or ""
            enabled = ctx.argument(scaler, "enabled", SCALER_ENABLED_POSITION.get(qualname))
            if enabled is None:
                continue
            if enabled is not MISSING:
                value = ctx.values.resolve(enabled)
                if value is None or value.value is not True:
                    continue
            if _under_choice(ctx, scaler, _FP16_CHOICE):
                continue  # ``if args.fp16: scaler = GradScaler()``: kept for an fp16 path
            usage = scaler_usage(ctx, scaler)
            if usage.escapes:
                continue  # it may serve float16 code this file cannot see
            fix = self.fix("Remove the GradScaler", *usage.removal) if usage.removal else None
            message = "GradScaler with bf16 autocast: bf16 needs no loss scaling; remove the scaler"
            if fix is None:
                message += " and every use of it"
            yield self.report(scaler, _message(message), fix)
