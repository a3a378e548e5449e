"""Which branch of an ``if``/``elif`` chain a script runs with its defaults.

Scripts often build alternatives in branches picked on the command line (``if args.test_mode:``
a tiny model, ``else:`` the real one; ``if args.model == "bert":`` ...). Where the tests resolve
with the defaults (argparse defaults included, :mod:`advisor.values`), a finding about "the"
model or "the" config points at the branch that runs.

And which code runs once however long the program runs (:func:`runs_once`): a module's
``__init__``, a script's top level, a lazy initialisation behind ``if len(state) == 0:``.
"""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import libcst as cst

from advisor.names import dotted_name
from advisor.values import OPTIONS_SET_ELSEWHERE

if TYPE_CHECKING:
    from advisor.context import FileContext


def run_by_default(ctx: "FileContext", nodes: Sequence[cst.CSTNode]) -> cst.CSTNode | None:
    """Among ``nodes`` (alternatives in the branches of one ``if``/``elif`` chain), the last one
    in the branch the defaults take; None when they are not such alternatives, or the tests do
    not resolve."""
    if len(nodes) < 2:
        return None
    first = min(nodes, key=ctx.order.__getitem__)
    for head in if_chain_heads(ctx, first):
        branches = {id(node): branch_of(ctx, head, node) for node in nodes}
        if None in branches.values():
            continue
        if len(set(branches.values())) < 2:
            return None
        taken = taken_branch(ctx, head)
        chosen = [node for node in nodes if branches[id(node)] == taken]
        return max(chosen, key=ctx.order.__getitem__) if taken is not None and chosen else None
    return None


def if_chain_heads(ctx: "FileContext", node: cst.CSTNode) -> Iterator[cst.If]:
    """The ``if``/``elif`` chains around ``node`` in its function, innermost first, each by its
    first ``if``."""
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return
        if isinstance(ancestor, cst.If) and not isinstance(ctx.parent.get(ancestor), cst.If):
            yield ancestor


def branch_of(ctx: "FileContext", head: cst.If, node: cst.CSTNode) -> int | None:
    """Which branch of the chain starting at ``head`` holds ``node`` (None: outside the chain)."""
    branch: cst.CSTNode | None = head
    index = 0
    while isinstance(branch, (cst.If, cst.Else)):
        orelse = branch.orelse if isinstance(branch, cst.If) else None
        if ctx.is_descendant(node, branch) and not (orelse is not None and ctx.is_descendant(node, orelse)):
            return index
        branch = orelse
        index += 1
    return None


def exclusive_branches(ctx: "FileContext", first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """``first`` and ``second`` sit in different branches of one ``if``/``elif``/``else``
    chain in their function: a run takes one of them (moment's classifier:
    ``accelerator.prepare`` in the fine-tuning branch, the plain optimizer in the ``else``)."""
    for head in if_chain_heads(ctx, first):
        taken = branch_of(ctx, head, first)
        other = branch_of(ctx, head, second)
        if taken is not None and other is not None:
            return taken != other
    return False


def taken_branch(ctx: "FileContext", head: cst.If) -> int | None:
    """Which branch of an ``if``/``elif`` chain runs when every test resolves (command-line
    defaults included); None when one cannot be told."""
    branch: cst.CSTNode | None = head
    index = 0
    while isinstance(branch, cst.If):
        value = ctx.values.resolve(branch.test)
        if value is None or not isinstance(value.value, (bool, int, str, type(None))):
            return None
        if value.value:
            return index
        branch = branch.orelse
        index += 1
    return index if isinstance(branch, cst.Else) else None


# A test that reads a library's version: ``is_torch_version(">=", "1.11.0")``,
# ``version.parse(torch.__version__) >= version.parse("2.0")``, ``TORCH_VERSION < (1, 12)``.
_VERSION_TEST = re.compile(r"__version__|\bversion\b|_version\b|Version\(|is_torch_(?:greater|less)\w*|\bTORCH_\w*VERSION|\bTORCH_\d", re.I)
_NEWER_WHEN_TRUE = {">=": True, ">": True, "<": False, "<=": False}


def in_older_version_branch(ctx: "FileContext", node: cst.CSTNode) -> cst.If | None:
    """The ``if`` whose branch for older library versions holds ``node`` (diffusers' ``else:``
    after ``if is_torch_version(">=", "1.11.0"):``): the authors wrote that code for versions a
    fix may not fit. A version test whose direction cannot be read counts for both branches."""
    for ancestor in ctx.ancestors(node):
        if not isinstance(ancestor, cst.If) or ctx.is_descendant(node, ancestor.test):
            continue
        in_body = ctx.is_descendant(node, ancestor.body)
        if not in_body and not (ancestor.orelse is not None and ctx.is_descendant(node, ancestor.orelse)):
            continue
        if not _VERSION_TEST.search(ctx.code(ancestor.test)):
            continue
        newer_when_true = _newer_when_true(ctx, ancestor.test)
        if newer_when_true is None or newer_when_true != in_body:
            return ancestor
    return None


def _newer_when_true(ctx: "FileContext", test: cst.BaseExpression) -> bool | None:
    """Whether the test holds for the newer versions; None when that cannot be read."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _newer_when_true(ctx, test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.Call):
        name = (dotted_name(test.func) or "").rsplit(".", 1)[-1]
        if name.startswith(("is_torch_greater", "is_torch_at_least")):
            return True
        if name.startswith("is_torch_less"):
            return False
        if name.endswith("_version") and test.args and isinstance(test.args[0].value, cst.SimpleString):
            return _NEWER_WHEN_TRUE.get(test.args[0].value.evaluated_value)  # type: ignore[arg-type]
        return None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        operator = ctx.code(test.comparisons[0].operator).strip()
        newer = _NEWER_WHEN_TRUE.get(operator)
        if newer is None:
            return None
        left_fixed, right_fixed = _literal_version(test.left), _literal_version(test.comparisons[0].comparator)
        if left_fixed == right_fixed:
            return None
        return newer if right_fixed else not newer  # ``"1.11" <= torch.__version__`` reads the other way
    return None


def dormant_flag(ctx: "FileContext", node: cst.CSTNode) -> str | None:
    """Why the branch that holds ``node`` never runs, or None: it tests ``False`` (nice-slam's
    "naive implementation" under ``if False:``); a parameter of its function that nothing turns
    on (``if denoise_to_zero:`` in a function whose ``denoise_to_zero=False`` no call in the
    project passes: DPM-Solver's final denoising step, vendored by so-vits-svc, Lumina and
    instruct-pix2pix, none of which sets it); a module constant set off and never changed
    (DeepfakeBench's ``using_ckpt = False``); or an attribute of its class that nothing turns
    on (:func:`_attribute_never_on`: a Swin block's ``self.use_checkpoint``, an HF-style
    ``self.gradient_checkpointing``). A parameter's name must appear in the project only
    inside its function, and no call seen may reach it by position."""
    view = ctx.project
    if view is None or not view.member or view.reached() is not True:
        return None  # a library's callers, which advisor cannot see, may set it
    function = ctx.enclosing(node, cst.FunctionDef)
    for ancestor in ctx.ancestors(node):
        if ancestor is function:
            return None
        if (
            isinstance(ancestor, cst.If) and ancestor.orelse is not None
            and ctx.is_descendant(node, ancestor.orelse) and _literally_true(ancestor.test)
        ):
            # Robust-Lane-Detection's ``if args.model == 'SegNet-ConvLSTM' or 'UNet-ConvLSTM':``.
            return f"the code is in the `else` of `if {ctx.snippet(ancestor.test, 60)}:`, whose test is always true"
        if not isinstance(ancestor, cst.If) or not ctx.is_descendant(node, ancestor.body):
            continue
        if _literally_false(ancestor.test):
            return f"the code is under `if {ctx.code(ancestor.test)}:`, which never runs"
        for flag in _needs_set(ancestor.test, _plain_or_self_attribute, _at_least_one):
            if isinstance(flag, cst.Name):
                if isinstance(function, cst.FunctionDef) and _never_turned_on(ctx, function, flag.value):
                    return (
                        f"the code runs only when `{flag.value}` is set, which its default leaves off and nothing "
                        f"in the project passes"
                    )
                if isinstance(function, cst.FunctionDef) and _every_call_turns_off(ctx, function, flag.value):
                    return f"the code runs only when `{flag.value}` is set, which every call of `{function.name.value}` turns off"
                if _constant_off(ctx, flag):
                    return f"the code runs only when `{flag.value}` is set, which the module sets off and nothing changes"
            elif isinstance(flag, cst.Attribute) and isinstance(function, cst.FunctionDef):
                why = _attribute_never_on(ctx, function, flag.attr.value)
                if why is not None:
                    return f"the code runs only when `self.{flag.attr.value}` is set, {why}"
        for option in _needs_set(ancestor.test, _parsed_option, _above_zero):
            why = _option_never_passed(ctx, option)
            if why is not None:
                return why
        for option in _needs_set(ancestor.test, _options_held_by_self, _above_zero):
            why = _held_option_never_passed(ctx, option)
            if why is not None:
                return why
        if isinstance(function, cst.FunctionDef):
            choice = _choice_never_made(ctx, function, ancestor.test)
            if choice is not None:
                return choice
    return None


def _option_never_passed(ctx: "FileContext", option: cst.Attribute) -> str | None:
    """Why a command-line option is off in every documented run, or None: it defaults off
    (``action="store_true"``, ``default=None`` / ``0``), the project ships commands that run
    this file (shell scripts, a README) and none of them passes it, and the script sets its
    options nowhere else (CVPR19_Incremental_Learning's ``--amr_loss``, which ``run.sh`` never
    passes: the trainer it selects does not run as documented)."""
    view = ctx.project
    resolved = ctx.values.resolve(option)
    if resolved is None and isinstance(option.value, cst.Name):
        bindings = ctx.lookup(option.value.value, option)
        if bindings and all(isinstance(binding.node, cst.Param) for binding in bindings):
            # yolov7's ``train(hyp, opt, ...)``: the options parsed in ``__main__``, handed over.
            resolved = ctx.values.argparse_default(option.attr.value)
    if view is None or resolved is None or resolved.origin != "argparse default":
        return None
    if not _off(resolved.value):
        return None
    spellings = option_spellings(ctx, resolved.node)
    why = _no_launch_passes(spellings, view.launch_commands(), ctx.path) if spellings else None
    if why is None:
        return None
    name = option.attr.value
    if OPTIONS_SET_ELSEWHERE.search(ctx.source) or any(
        isinstance(target.target, cst.Attribute) and target.target.attr.value == name
        for assign in ctx.nodes(cst.Assign) for target in assign.targets
    ):
        return None
    return why


def _no_launch_passes(spellings: tuple[str, ...], launches: list[tuple[str, str]], script: str) -> str | None:
    """Why an option is off in every documented run of ``script``: the project ships commands
    that run it (``launches``) and none passes any of the option's ``spellings``; None where
    there are none (a script run by hand may be given any option) or one passes it."""
    if not spellings or not launches:
        return None
    if any(re.search(r"(?<![\w-])" + re.escape(spelled) + r"(?![\w-])", command) for _, command in launches for spelled in spellings):
        return None
    name = script.replace("\\", "/").rsplit("/", 1)[-1]
    return f"the code runs only with `{spellings[0]}`, which no command the project ships to run `{name}` passes"


def _options_held_by_self(node: cst.BaseExpression) -> bool:
    """``self.args.use_amp``: an option of parsed options an object keeps (the Time-Series-Library
    family's ``Exp_Main(args)``)."""
    return (
        isinstance(node, cst.Attribute) and isinstance(node.value, cst.Attribute)
        and isinstance(node.value.value, cst.Name) and node.value.value.value == "self"
    )


def _held_option_never_passed(ctx: "FileContext", option: cst.Attribute) -> str | None:
    """Why ``self.args.<dest>`` is off in every documented run, or None: the script that gives
    this file ``--<dest>`` (:meth:`ProjectView.declaring_script`) defaults it off, and the commands the project ships run that
    script without it (SegRNN's and MICN's ``--use_amp``: ``run_longExp.py`` builds
    ``Exp_Main(args)``, whose methods test ``self.args.use_amp``); nothing in the project
    assigns the attribute, and no config names it on."""
    view = ctx.project
    if view is None or not view.member:
        return None
    dest = option.attr.value
    script = view.declaring_script(dest)
    if script is None:
        return None
    other = ctx if os.path.abspath(script) == os.path.abspath(ctx.path) else view.context_of(script)
    if other is None:
        return None
    resolved = other.values.argparse_default(dest)
    if resolved is None or resolved.origin != "argparse default" or not _off(resolved.value):
        return None
    view.asked_texts = True
    why = _no_launch_passes(option_spellings(other, resolved.node), view.project.launch_commands(script), script)
    if why is None or OPTIONS_SET_ELSEWHERE.search(other.source):
        return None
    if view.assigns_attribute(dest):
        return None  # ``args.use_amp = True`` somewhere
    if view.configs_matching(_on_in_config(dest)):
        return None
    return why


def _off(value: object) -> bool:
    """An option's default that leaves it off: ``None``, ``False``, zero."""
    return value is None or value is False or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0)


def option_spellings(ctx: "FileContext", node: cst.CSTNode) -> tuple[str, ...]:
    """The spellings (``--amr_loss``, ``-a``) of the ``add_argument`` call that ``node`` is, or
    whose ``default=`` it is."""
    call = node if isinstance(node, cst.Call) else None
    if call is None:
        arg = ctx.parent.get(node)
        holder = ctx.parent.get(arg) if isinstance(arg, cst.Arg) else None
        call = holder if isinstance(holder, cst.Call) else None
    if call is None or not isinstance(call.func, cst.Attribute) or call.func.attr.value != "add_argument":
        return ()
    return tuple(
        value for value in (ctx.values.value_of(arg.value) for arg in call.args if arg.keyword is None)
        if isinstance(value, str) and value.startswith("-")
    )


# What a string parameter is compared after: ``method.lower() == "sinkhorn"``.
_CASE_FOLDS = {"lower": str.lower, "casefold": str.casefold, "upper": str.upper, "strip": str.strip}


def _choice_never_made(ctx: "FileContext", function: cst.FunctionDef, test: cst.BaseExpression) -> str | None:
    """Why a test of a string parameter never holds, or None: ``method.lower() ==
    "sinkhorn_stabilized"`` where ``method`` defaults to another string and the project writes
    the value compared with nowhere else, in code, configs, scripts or documents, so no caller
    and no documented command can choose it (DM-Count's ``sinkhorn`` dispatch, whose callers
    all take the default ``"sinkhorn"``)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    operator, wanted = test.comparisons[0].operator, test.comparisons[0].comparator
    if not isinstance(operator, cst.Equal) or not isinstance(wanted, cst.SimpleString):
        return None
    tested, fold = test.left, None
    if isinstance(tested, cst.Call) and not tested.args and isinstance(tested.func, cst.Attribute):
        fold = _CASE_FOLDS.get(tested.func.attr.value)
        if fold is None:
            return None
        tested = tested.func.value
    if not isinstance(tested, cst.Name):
        return None
    found = _parameter(function, tested.value)
    value = wanted.evaluated_value
    if found is None or not isinstance(found[0].default, cst.SimpleString) or not isinstance(value, str) or not value:
        return None
    default = found[0].default.evaluated_value
    if not isinstance(default, str) or (fold(default) if fold else default) == value:
        return None
    view = ctx.project
    assert view is not None
    if view.value_written(value) > 1:
        return None  # a caller, a config or a documented command may choose it
    return (
        f"the code runs only when `{tested.value}` is {wanted.value}, which its default {found[0].default.value} "
        f"is not and nothing in the project chooses"
    )


def _literally_true(test: cst.BaseExpression) -> bool:
    """A test that holds whatever the names in it hold: ``True``, a non-zero number, a non-empty
    string, or an ``or`` with one of them (``x == 'a' or 'b'``, meant as ``x in ('a', 'b')``)."""
    if isinstance(test, cst.BooleanOperation):
        return isinstance(test.operator, cst.Or) and (_literally_true(test.left) or _literally_true(test.right))
    if isinstance(test, cst.Name):
        return test.value == "True"
    if isinstance(test, (cst.Integer, cst.SimpleString)):
        try:
            return bool(test.evaluated_value)
        except Exception:  # noqa: BLE001 - a literal Python cannot evaluate: not known
            return False
    return False


def _literally_false(test: cst.BaseExpression) -> bool:
    return isinstance(test, cst.Name) and test.value == "False" or isinstance(test, cst.Integer) and test.value == "0"


def _needs_set(
    test: cst.BaseExpression,
    subject: Callable[[cst.BaseExpression], bool],
    enough: Callable[[cst.BaseOperator, int], bool],
) -> Iterator[cst.BaseExpression]:
    """The ``subject`` expressions a test needs set: ``flag``, ``flag is not None``, a
    comparison with an integer that ``enough`` accepts (earthformer's ``checkpoint_level >= 2``),
    either side of an ``and``."""
    if subject(test):
        yield test
    elif isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        yield from _needs_set(test.left, subject, enough)
        yield from _needs_set(test.right, subject, enough)
    elif isinstance(test, cst.Comparison) and subject(test.left) and len(test.comparisons) == 1:
        operator, comparator = test.comparisons[0].operator, test.comparisons[0].comparator
        if isinstance(operator, cst.IsNot) and isinstance(comparator, cst.Name) and comparator.value == "None":
            yield test.left
        elif isinstance(comparator, cst.Integer) and enough(operator, int(comparator.value)):
            yield test.left


def _at_least_one(operator: cst.BaseOperator, value: int) -> bool:
    """``>= k`` with k at least 1, ``> k`` with k at least 0: a flag or level of a function's."""
    return isinstance(operator, cst.GreaterThanEqual) and value >= 1 or isinstance(operator, cst.GreaterThan) and value >= 0


def _above_zero(operator: cst.BaseOperator, value: int) -> bool:
    """``> 0`` only: a parsed option (``args.rs_ratio > 0``)."""
    return isinstance(operator, cst.GreaterThan) and value == 0


def _parsed_option(node: cst.BaseExpression) -> bool:
    """``args.amr_loss``: an attribute of a name other than ``self``."""
    return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value != "self"


def _plain_or_self_attribute(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) or (
        isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"
    )


_FALSY = frozenset({"False", "None"})


def _falsy(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Name) and node.value in _FALSY or isinstance(node, cst.Integer) and node.value == "0"


def _constant_off(ctx: "FileContext", flag: cst.Name) -> bool:
    """``flag`` is a module constant bound once, to ``False`` / ``None`` / ``0``, that no other
    file names and no function rebinds (``global``)."""
    bindings = ctx.lookup(flag.value, flag)
    if len(bindings) != 1 or bindings[0].value is None or not _falsy(bindings[0].value):
        return False
    if ctx.outermost_definition(bindings[0].value) is not None:
        return False  # a local of a function, not a module constant
    if re.search(rb"\bglobal\b[^\n]*\b" + re.escape(flag.value.encode()) + rb"\b", ctx.source.encode()):
        return False
    view = ctx.project
    return view is not None and not view.mentions_outside(flag.value)


def _attribute_never_on(ctx: "FileContext", function: cst.FunctionDef, attribute: str) -> str | None:
    """Why ``self.<attribute>``, tested in a method of a module-level class, is never set, or
    None: the class's ``__init__`` sets it off, and HF's ``gradient_checkpointing_enable()`` or
    ``TrainingArguments`` (which turn ``gradient_checkpointing`` on) appear nowhere in the
    project; or it sets it from a parameter whose default is off and that every construction
    in the project leaves off, itself or through a parameter of its own that nothing turns on
    (GeoSeg's ``SwinTransformer(use_checkpoint=False)`` hands ``use_checkpoint`` to each
    ``BasicLayer``; DCSwin builds it without one). Nothing else in the project may assign the
    attribute anything but off, and no config may name it on."""
    cls = ctx.enclosing(function, cst.ClassDef, cst.FunctionDef)
    if not isinstance(cls, cst.ClassDef) or ctx.enclosing(cls, cst.ClassDef, cst.FunctionDef) is not None:
        return None
    view = ctx.project
    assert view is not None
    init = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)
    if init is None:
        return None
    values = [
        a.value for a in ctx.walk(cls, cst.Assign)
        for t in a.targets
        if isinstance(t.target, cst.Attribute) and t.target.attr.value == attribute
        and isinstance(t.target.value, cst.Name) and t.target.value.value == "self"
    ]
    if not values or any(ctx.enclosing(v, cst.FunctionDef) is not init for v in values):
        return None
    parameters = [v for v in values if not _falsy(v)]
    # Set on from outside (``model.use_checkpoint = True``); another class's own ``self.x = x``
    # sets its own attribute.
    setting = re.compile(rb"(?<!\bself)\." + re.escape(attribute.encode()) + rb"[ \t]*=(?!=)[ \t]*(?!False\b|None\b|0\b)")
    if attribute != "gradient_checkpointing" and view.texts_matching(setting):
        return None  # (HF's own ``module.gradient_checkpointing = value`` runs only when enabled)
    if view.configs_matching(_on_in_config(attribute)):
        return None
    if not parameters:
        if attribute == "gradient_checkpointing" and view.texts_matching(_HF_CHECKPOINTING):
            return None
        if attribute != "gradient_checkpointing" and view.texts_matching(re.compile(rb"\bsetattr\(")):
            return None
        return "which its class sets off and nothing in the project turns on"
    if len(parameters) != 1 or not isinstance(parameters[0], cst.Name):
        return None
    name = parameters[0].value
    if not _parameter_never_on(ctx, init, name, 0):
        return None
    return f"which its class takes from `{name}`, left off by its default and by every construction in the project"


def _literal_keywords(ctx: "FileContext", spread: cst.BaseExpression) -> dict[str, cst.BaseExpression] | None:
    """The keywords ``**spread`` hands over, where ``spread`` is a name bound once to
    ``dict(a=..., b=...)`` or ``{"a": ..., "b": ...}`` (TinyViT's ``kwargs = dict(...,
    use_checkpoint=use_checkpoint)``); None for anything else."""
    if not isinstance(spread, cst.Name):
        return None
    bindings = ctx.lookup(spread.value, spread)
    if len(bindings) != 1 or bindings[0].value is None:
        return None
    value = bindings[0].value
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict":
        if any(arg.keyword is None for arg in value.args):
            return None
        return {arg.keyword.value: arg.value for arg in value.args if arg.keyword is not None}
    if isinstance(value, cst.Dict):
        entries: dict[str, cst.BaseExpression] = {}
        for element in value.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                return None
            key = element.key.evaluated_value
            if not isinstance(key, str):
                return None
            entries[key] = element.value
        return entries
    return None


# What turns an HF model's ``gradient_checkpointing`` on: its enabling method, the Trainer's
# argument (also on the command line of a script that parses ``TrainingArguments``).
_HF_CHECKPOINTING = re.compile(rb"gradient_checkpointing_enable|TrainingArguments|HfArgumentParser|\bgradient_checkpointing\s*[=:]\s*True")


def _on_in_config(name: str) -> "re.Pattern[bytes]":
    """``name: true`` (or any value but off) in a YAML config."""
    return re.compile(rb"^[ \t-]*" + re.escape(name.encode()) + rb"[ \t]*:[ \t]*(?!(?:false|False|null|None|~|0)[ \t]*(?:#|$))\S", re.M)


def _parameter_never_on(ctx: "FileContext", function: cst.FunctionDef, name: str, depth: int) -> bool:
    """``name`` is a parameter of ``function`` (an ``__init__``) whose default is off and that
    every construction seen leaves off: not passed, passed off, or passed a parameter of the
    calling function that is never on in turn. At least one construction must be seen, none
    may hand over ``**kwargs``, and no project text may set the name on (``use_checkpoint=True``)."""
    if depth > 3:
        return False
    found = _parameter(function, name)
    if found is None or not _falsy(found[0].default):
        return False
    index = found[1]
    view = ctx.project
    if view is None or view.builds_by_name:
        return False
    on = re.compile(rb"\b" + re.escape(name.encode()) + rb"[ \t]*=(?!=)[ \t]*(?!False\b|None\b|0\b)(?:True\b|[1-9]|\w+\.)")
    if view.texts_matching(on) or view.configs_matching(_on_in_config(name)):
        return False
    positional = [*function.params.posonly_params, *function.params.params]
    skipped = 1 if positional and positional[0].name.value in ("self", "cls") else 0
    constructions = constructions_of(ctx, function)
    if not constructions:
        return False
    for other, call in constructions:
        if any(arg.star == "*" for arg in call.args):
            return False
        passed = next((arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == name), None)
        for spread in (arg.value for arg in call.args if arg.star == "**"):
            entries = _literal_keywords(other, spread)
            if entries is None:
                return False  # ``**config``: a key of a YAML file may turn it on
            passed = entries.get(name, passed)
        given = [arg for arg in call.args if arg.keyword is None]
        if passed is None and index is not None and len(given) + skipped > index:
            passed = given[index - skipped].value
        if passed is None or _falsy(passed):
            continue
        caller = other.enclosing(call, cst.FunctionDef)
        if not isinstance(passed, cst.Name) or not isinstance(caller, cst.FunctionDef):
            return False
        if not _parameter_never_on(other, caller, passed.value, depth + 1):
            return False
    return True


def _never_turned_on(ctx: "FileContext", function: cst.FunctionDef, name: str) -> bool:
    """``name`` is a parameter of ``function`` with a falsy default (``False``, ``None``, ``0``)
    that no code of the project can set: named nowhere outside the function, and no call seen
    passes it by position or hands over ``**kwargs``."""
    found = _parameter(function, name)
    if found is None or not _falsy(found[0].default):
        return False
    index = found[1]
    positional = [*function.params.posonly_params, *function.params.params]
    view = ctx.project
    assert view is not None
    mentions_in = view.project.mentions_in
    if view.mentions_outside(name) or mentions_in(name, ctx.source) > mentions_in(name, ctx.code(function)):
        return False  # named elsewhere: a caller's keyword, a config key
    method = ctx.enclosing(function, cst.ClassDef, cst.FunctionDef)
    skipped = 1 if isinstance(method, cst.ClassDef) and positional and positional[0].name.value in ("self", "cls") else 0
    for _other, call in calls_of(ctx, function):
        given = [arg for arg in call.args if arg.keyword is None]
        if any(arg.star for arg in given):
            return False  # ``**config``: a key of a YAML file may turn it on
        if index is not None and len(given) + skipped > index:
            return False
    return True


def _every_call_turns_off(ctx: "FileContext", function: cst.FunctionDef, name: str) -> bool:
    """``name`` is a parameter of ``function`` that every call seen (one at least, in its file
    and in the project files importing it) passes as ``False`` / ``None`` / ``0``, whatever its
    default: NotaGen's ``prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)``
    of its own function whose default is ``True``. The function is named nowhere but in those
    calls (a callback, a registry, a config could call it otherwise)."""
    found = _parameter(function, name)
    if found is None or _falsy(found[0].default):
        return False  # a default that is off: :func:`_never_turned_on`'s question
    index = found[1]
    calls = calls_of(ctx, function)
    if not calls:
        return False
    view = ctx.project
    assert view is not None
    if view.mentions_outside(function.name.value) > sum(1 for other, _ in calls if other is not ctx):
        return False  # named in another file beyond the calls seen
    if sum(1 for n in ctx.nodes(cst.Name) if n.value == function.name.value) != 1 + sum(1 for other, _ in calls if other is ctx):
        return False  # named in its own file beyond its ``def`` and the calls seen
    positional = [*function.params.posonly_params, *function.params.params]
    method = ctx.enclosing(function, cst.ClassDef, cst.FunctionDef)
    skipped = 1 if isinstance(method, cst.ClassDef) and positional and positional[0].name.value in ("self", "cls") else 0
    position = None if index is None else index - skipped
    for other, call in calls:
        if any(arg.star for arg in call.args):
            return False
        passed = other.argument(call, name, position)
        if not isinstance(passed, cst.BaseExpression) or not _falsy(passed):
            return False
    return True


def _parameter(function: cst.FunctionDef, name: str) -> tuple[cst.Param, int | None] | None:
    """``function``'s parameter ``name`` and the position a call passes it at (None: keyword only)."""
    positional = [*function.params.posonly_params, *function.params.params]
    for index, param in enumerate(positional):
        if param.name.value == name:
            return param, index
    keyword = next((param for param in function.params.kwonly_params if param.name.value == name), None)
    return (keyword, None) if keyword is not None else None


def _literal_version(node: cst.BaseExpression) -> bool:
    """A version written out: ``"2.0"``, ``(1, 12)``, ``version.parse("2.0")``."""
    if isinstance(node, (cst.SimpleString, cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.Tuple):
        return bool(node.elements) and all(_literal_version(element.value) for element in node.elements)
    if isinstance(node, cst.Call):
        return bool(node.args) and all(_literal_version(arg.value) for arg in node.args)
    return False


def runs_once(ctx: "FileContext", node: cst.CSTNode, depth: int = 0) -> bool:
    """Code seen to run once however long the program runs: a module's ``__init__`` (a KV
    cache, a buffer), the ``__init__`` of another class the file does not build every step (a
    federated client, a replay buffer, a GUI), a script's top level outside any loop, a lazy
    initialisation (see :func:`lazily_initialised`), or a function whose every call seen, in
    its file and in the project files importing it, runs once (RecBole's ``get_history_info``
    from ``__init__``; OpenPCDet's ``generate_anchors`` from a head's ``__init__`` in another
    module). A function nobody is seen calling is not: a ``forward`` in a file that is not
    read may call it every step, and the absence of a loop proves nothing."""
    if lazily_initialised(ctx, node):
        return True
    function = ctx.enclosing(node, cst.FunctionDef, cst.Lambda)
    if function is None:
        return not any(isinstance(a, _REPEATING) for a in ctx.ancestors(node))
    if not isinstance(function, cst.FunctionDef):
        # CLIP's ``load``: ``torch.jit.trace(lambda: torch.ones([]).to(torch.device(device)), ...)``
        # traces the lambda once, to read the device node it records.
        arg = ctx.parent.get(function)
        traced = ctx.parent.get(arg) if isinstance(arg, cst.Arg) else None
        return isinstance(traced, cst.Call) and ctx.qualname(traced.func) in _EXPORTS
    if function.name.value == "__init__":
        from advisor.facts.models import is_module_class  # models asks the branch facts too

        cls = ctx.enclosing(function, cst.ClassDef)
        if not isinstance(cls, cst.ClassDef):
            return False
        if is_module_class(ctx, cls) or _serves_items(cls):
            return True  # a model or a data set is built once a run, not every step
        if depth >= 2:
            return False
        name = cls.name.value
        built = [(ctx, c) for c in ctx.nodes(cst.Call) if isinstance(c.func, cst.Name) and c.func.value == name]
        if ctx.project is not None and ctx.enclosing(cls, cst.FunctionDef, cst.ClassDef) is None:
            built += ctx.project.calls_from_importers(name, defined_by=(cst.ClassDef,))
        return bool(built) and all(runs_once(other, call, depth + 1) for other, call in built)
    if depth >= 2 or (_repeats_within(ctx, node, function) and not _prepares_data(ctx, function)):
        return False  # a loop in a function called once may be the training loop itself
    if _SETS_UP_PROCESSES.match(function.name.value):
        return True  # vLLM's ``init_worker_distributed_environment``: a warm-up all-reduce at start-up
    if any(ctx.qualname(call.func) in _EXPORTS for call in ctx.walk(function, cst.Call)):
        return True  # retinanet-examples' ``Model.export``: the dummy input of one ``torch.onnx.export``
    if _hooks_the_model(ctx, function):
        return True  # thop's ``profile``: hooks on every layer, one dummy input, the FLOPs summed
    callers = calls_of(ctx, function)
    return bool(callers) and all(
        lazily_initialised(other, call) or runs_once(other, call, depth + 1) for other, call in callers
    )


# Functions that set up the processes of a run, called once at start-up: ``init_distributed``,
# ``setup_ddp``, ``init_worker_distributed_environment``, ``init_process_group``.
_SETS_UP_PROCESSES = re.compile(
    r"^_*(init|initiali[sz]e|setup|set_up)_(\w+_)?(distributed|dist|process_group|processes|ddp|nccl|"
    r"environment|env)(_\w+)?$"
)


_MODEL_HOOKS = frozenset({"register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook"})


def _hooks_the_model(ctx: "FileContext", function: cst.FunctionDef) -> bool:
    """A function that registers hooks on a model's layers (itself or in a function it
    defines, ``model.apply(add_hooks)``): it measures or inspects the model once (a FLOPs
    counter, a profile), where a training step that added hooks would add them again each step."""
    return any(
        isinstance(call.func, cst.Attribute) and call.func.attr.value in _MODEL_HOOKS
        for call in ctx.walk(function, cst.Call)
    )


# Exporting a model runs once: its inputs are dummies traced through it.
_EXPORTS = frozenset({
    "torch.onnx.export", "torch.onnx.dynamo_export", "torch.export.export", "torch.jit.trace", "torch.jit.trace_module",
})


# Autoregressive decoding: ``generate``, ``primed_generate``, ``beam_search``, ``greedy_search``.
_DECODING_FUNCTION = re.compile(r"generate|_search$|^search$")


def before_its_loop(ctx: "FileContext", node: cst.CSTNode) -> cst.FunctionDef | None:
    """The decoding function whose work is a loop that ``node`` runs before, once a call: a
    ``generate``'s token buffer before its decoding loop (LLaMA's and its copies', audiocraft's).
    Not code seen to run every training step. (Any function's allocation before its loop was
    tried: readers judged most of what it withheld correct, FourCastNet's inference buffers
    and tabnet's masks among them.)"""
    function = ctx.enclosing(node, cst.FunctionDef, cst.Lambda)
    if not isinstance(function, cst.FunctionDef) or not _DECODING_FUNCTION.search(function.name.value):
        return None
    if _repeats_within(ctx, node, function):
        return None
    after = ctx.order[node]
    loops = [
        loop for loop in (*ctx.within(function, ctx.nodes(cst.For)), *ctx.within(function, ctx.nodes(cst.While)))
        if ctx.order[loop] > after and ctx.enclosing(loop, cst.FunctionDef, cst.Lambda) is function
    ]
    if not loops or runs_every_step(ctx, node):
        return None
    return function


# What a data set class runs per item or per batch: the rest of its methods prepare data.
_PER_ITEM_METHODS = frozenset({"__getitem__", "__getitems__", "__iter__", "__next__", "__len__", "__call__"})


def _prepares_data(ctx: "FileContext", function: cst.FunctionDef) -> bool:
    """``function`` is a method of a data set class (one with ``__getitem__``) that serves no
    item: latent_ode's ``PersonActivity.download``, which its ``__init__`` calls to parse the raw
    files once. Its loops walk records, not training steps."""
    if function.name.value in _PER_ITEM_METHODS or "collate" in function.name.value:
        return False
    cls = ctx.enclosing(function, cst.ClassDef, cst.FunctionDef)
    return isinstance(cls, cst.ClassDef) and _serves_items(cls)


def _serves_items(cls: cst.ClassDef) -> bool:
    """A data set class: it defines ``__getitem__``."""
    return any(isinstance(statement, cst.FunctionDef) and statement.name.value == "__getitem__" for statement in cls.body.body)


def _repeats_within(ctx: "FileContext", node: cst.CSTNode, function: cst.FunctionDef) -> bool:
    for ancestor in ctx.ancestors(node):
        if ancestor is function:
            return False
        if isinstance(ancestor, _REPEATING):
            return True
    return False


def calls_of(ctx: "FileContext", function: cst.FunctionDef) -> list[tuple["FileContext", cst.Call]]:
    """The calls of ``function`` seen: in its file, and in the project files importing it."""
    return [(ctx, call) for call in ctx.loops.callers(function)] + _calls_from_importers(ctx, function)


def constructions_of(ctx: "FileContext", function: cst.FunctionDef) -> list[tuple["FileContext", cst.Call]]:
    """For the ``__init__`` of a module-level class, the calls that build the class: in its file
    (by its plain name) and in the project files importing it; for any other function, its calls."""
    if function.name.value != "__init__":
        return calls_of(ctx, function)
    cls = ctx.enclosing(function, cst.ClassDef, cst.FunctionDef)
    if not isinstance(cls, cst.ClassDef) or ctx.enclosing(cls, cst.ClassDef, cst.FunctionDef) is not None:
        return []
    name = cls.name.value
    found = [(ctx, call) for call in ctx.nodes(cst.Call) if isinstance(call.func, cst.Name) and call.func.value == name]
    if ctx.project is not None:
        found += ctx.project.calls_from_importers(name, (cst.ClassDef,))
    return found


def _calls_from_importers(ctx: "FileContext", function: cst.FunctionDef) -> list[tuple["FileContext", cst.Call]]:
    """The calls of a module's function, or of a top-level class's method, in the project files
    that import its module (as far as :class:`~advisor.project.ProjectView` can follow them)."""
    view = ctx.project
    if view is None or function.name.value.startswith("__"):
        return []
    scope = ctx.enclosing(function, cst.ClassDef, cst.FunctionDef)
    if scope is None:
        return view.calls_from_importers(function.name.value)
    if isinstance(scope, cst.ClassDef) and ctx.enclosing(scope, cst.FunctionDef, cst.ClassDef) is None:
        return view.method_calls_from_importers(scope.name.value, function.name.value)
    return []


_REPEATING = (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def runs_every_step(ctx: "FileContext", node: cst.CSTNode, depth: int = 0) -> bool:
    """Code seen to run every training step: in a training step, in a module's ``forward``,
    or in a function that one of those calls, in this file or (for a module's function or a
    class's method) in a project file that imports it (``query_ball_point`` called from a
    model's ``forward`` in ``models/pointnet2.py``). Unlike :func:`runs_once`, absence of
    evidence is a no: a helper nothing is seen calling per step is not hot."""
    function = ctx.enclosing(node, cst.FunctionDef)
    if isinstance(function, cst.FunctionDef) and function.name.value == "forward":
        return True
    if ctx.loops.per_step(node):
        return True
    if not isinstance(function, cst.FunctionDef) or depth >= 2:
        return False
    return any(runs_every_step(other, call, depth + 1) for other, call in calls_of(ctx, function))


def lazily_initialised(ctx: "FileContext", node: cst.CSTNode) -> bool:
    """Under an ``if`` that runs once however often its function does: an optimizer's
    ``if len(state) == 0:``, a cache's ``if key not in self.cache:`` that fills it, a flag's
    ``if not self.initialized:`` that some method sets, ``if self.x is None:`` that assigns it."""
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if not isinstance(ancestor, cst.If) or not ctx.is_descendant(node, ancestor.body):
            continue
        test = ancestor.test
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            flag = dotted_name(test.expression)
            if flag and flag.startswith("self.") and _assigned_true(ctx, flag):
                return True
            continue
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            continue
        operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
        left = test.left
        if (
            isinstance(operator, cst.Equal)
            and isinstance(right, cst.Integer)
            and right.evaluated_value == 0
            and isinstance(left, cst.Call)
            and isinstance(left.func, cst.Name)
            and left.func.value == "len"
        ):
            return True
        # An attribute of the object, kept between calls: a parameter's ``if mask is None:``
        # runs on every call that omits it (T5's default attention mask).
        if isinstance(operator, cst.NotIn) and _kept(right) and _stores_into(ctx, ancestor.body, ctx.code(right)):
            return True
        if isinstance(operator, cst.Is) and isinstance(right, cst.Name) and right.value == "None" and _kept(left):
            name = dotted_name(left)
            if name and any(dotted_name(t.target) == name for a in ctx.walk(ancestor.body, cst.Assign) for t in a.targets):
                return True
    return False


def _kept(expr: cst.BaseExpression) -> bool:
    return (dotted_name(expr) or "").startswith("self.")


def _assigned_true(ctx: "FileContext", flag: str) -> bool:
    return any(
        isinstance(assign.value, cst.Name)
        and assign.value.value == "True"
        and any(dotted_name(t.target) == flag for t in assign.targets)
        for assign in ctx.nodes(cst.Assign)
    )


def _stores_into(ctx: "FileContext", body: cst.CSTNode, container: str) -> bool:
    """``container[...] = ...`` under ``body``."""
    return any(
        isinstance(t.target, cst.Subscript) and ctx.code(t.target.value) == container
        for assign in ctx.walk(body, cst.Assign)
        for t in assign.targets
    )
