"""The shared value resolver: what an expression evaluates to, where that is knowable.

Rules ask ``ctx.values.resolve(expr)`` and get a :class:`Value` or ``None`` for
unknown. Unknown is the normal answer for anything set outside the file or changed
along paths we do not follow: rules stay silent on it. Resolution sees through
literals, arithmetic, dict literals and ``dict(...)`` (including behind ``**kwargs``)
and ``d["key"]`` on them, and names:

- a name bound once, or several times where every binding that can reach the read
  gives the same value (``bs = 8`` then ``if big: bs = 16`` is unknown; ``bs *= 2``
  after ``bs = 8`` is 16). A name declared ``global`` anywhere is unknown. Dividing by
  the world size (``accum //= ddp_world_size``) is the identity on one GPU and is
  skipped;
- argparse defaults (``add_argument(..., default=)``, ``set_defaults``) read through
  ``args = parser.parse_args()``, and the parameter defaults of a function handed to
  ``fire.Fire`` / ``typer.run`` (alpaca-lora's ``def train(batch_size: int = 128, ...)``);
- dataclass fields: ``@dataclass class TrainArgs: batch_size: int = field(default=8)``
  read through ``HfArgumentParser((..., TrainArgs)).parse_args_into_dataclasses()``
  (argparse defaults under another name), or through an instance built in the file
  (``TrainArgs(batch_size=4)``). Fields a class inherits from ``TrainingArguments`` and
  other library classes stay unknown, and so does anything parsed from a JSON/YAML file;
- class attributes of a config class (``class CFG: batch_size = 16``, ``CFG.batch_size``)
  and ``SimpleNamespace`` / ``EasyDict`` / ``argparse.Namespace`` objects built in the file;
- nanoGPT-style module globals overridden by ``exec(open("configurator.py").read())``
  (or ``globals()[key] = value``): the values set before it are command-line defaults;
- conditions: ``a if test else b``, comparisons, ``and`` / ``or`` / ``not`` of known
  values. Run-time tests (``torch.cuda.is_available()``, ``is_bf16_supported()``) are
  unknown, and so is what depends on them.

``Value.origin`` says where the value was written. ``"argparse default"`` means any
default the command line can override (argparse, HfArgumentParser dataclass fields, Fire
parameters, globals before a configurator ``exec``): rules treat them alike, and
:meth:`ValueResolver.describe` names the setting for messages.
"""
from __future__ import annotations

import ast
import operator
import os
import re
import warnings
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

import libcst as cst

from advisor.context import MISSING
from advisor.names import dotted_name

if TYPE_CHECKING:
    from advisor.context import FileContext

_MAX_DEPTH = 12
# How code names a namespace of parsed options it is handed.
_OPTION_NAMESPACES = frozenset({"args", "opt", "opts", "options", "flags", "hparams", "hps", "FLAGS"})
# Ways a script fills its parsed options from elsewhere than its command line: a config file
# merged in, ``set_defaults``, an assignment through ``setattr``.
OPTIONS_SET_ELSEWHERE = re.compile(r"setattr\(|__dict__\.update|vars\(\w+\)\.update|set_defaults\(|\.update\(vars\(")
_ARITHMETIC = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.FloorDivide: operator.floordiv,
}
_AUGMENTED = {
    cst.AddAssign: operator.add,
    cst.SubtractAssign: operator.sub,
    cst.MultiplyAssign: operator.mul,
    cst.FloorDivideAssign: operator.floordiv,
}
_COMPARISONS = {
    cst.Equal: operator.eq,
    cst.NotEqual: operator.ne,
    cst.LessThan: operator.lt,
    cst.GreaterThan: operator.gt,
    cst.LessThanEqual: operator.le,
    cst.GreaterThanEqual: operator.ge,
    cst.In: lambda a, b: a in b,
    cst.NotIn: lambda a, b: a not in b,
    cst.Is: operator.is_,
    cst.IsNot: operator.is_not,
}
# Values a condition may compare: what literals evaluate to.
_PLAIN = (str, int, float, bool, type(None), tuple, list)
# Methods that change a dict in place: a dict that meets one is no longer knowable.
_MUTATORS = ("update", "setdefault", "pop", "popitem", "clear", "__setitem__")
# ``accum //= ddp_world_size``: each process's share of a global setting. On one GPU the
# world size is 1, so the share is the setting itself.
_WORLD_SIZE = re.compile(r"world_size|num_processes|n_?gpus?$|num_gpus|nprocs|num_devices", re.I)
# Attribute bags built from keywords or a dict: ``SimpleNamespace(batch_size=8)``.
_NAMESPACE_TYPES = (
    "types.SimpleNamespace",
    "argparse.Namespace",
    "easydict.EasyDict",
    "addict.Dict",
    "box.Box",
    "ml_collections.ConfigDict",
)
# Of those, the ones that are dicts too (``cfg["batch_size"]`` works).
_DICT_TYPES = ("easydict.EasyDict", "addict.Dict", "box.Box")
_HF_PARSERS = ("transformers.HfArgumentParser", "transformers.hf_argparser.HfArgumentParser", "trl.TrlParser")
_DATACLASS_DECORATORS = ("dataclasses.dataclass", "pydantic.dataclasses.dataclass")
_FIELD_FUNCTIONS = ("dataclasses.field",)
# Turn a function's parameters into command-line options, defaults included.
_CLI_RUNNERS = ("fire.Fire", "typer.run")


@dataclass(frozen=True)
class Value:
    value: Any
    # The node the value is written at: a fix that changes the value edits this node.
    node: cst.CSTNode
    # literal, constant, expression, dict entry, default (a library's default), or
    # argparse default: any default the command line can override (see the module doc).
    origin: str = "literal"


def string_value(node: cst.SimpleString) -> str | bytes:
    """The string's value; plain literals without escapes are sliced, since LibCST's
    ``evaluated_value`` runs ``ast.literal_eval`` and dominates resolution on long docstrings."""
    text = node.value
    if text[0] in "\"'" and "\\" not in text and "\r" not in text:
        quote = 3 if text[:3] in ('"""', "'''") else 1
        return text[quote:-quote]
    return _literal(text)


def concatenated_value(node: cst.ConcatenatedString) -> str | bytes | None:
    """``"a" "b"``'s value, as LibCST's ``evaluated_value`` gives it (None with an f-string or
    mixed str and bytes), through ``string_value``."""
    values = []
    for part in (node.left, node.right):
        if isinstance(part, cst.SimpleString):
            values.append(string_value(part))
        elif isinstance(part, cst.ConcatenatedString):
            values.append(concatenated_value(part))
        else:
            return None
    left, right = values
    if isinstance(left, str) and isinstance(right, str) or isinstance(left, bytes) and isinstance(right, bytes):
        return left + right
    return None


@lru_cache(maxsize=4096)
def _literal(text: str) -> str | bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an invalid escape is the file's business, not ours to print
        return ast.literal_eval(text)


class ValueResolver:
    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx
        self._argparse_cache: dict[str, list[cst.Call]] | None = None
        self._flags_asked: set[str] = set()  # attributes whose assignments are being weighed (see _assigned)

    # -- public ---------------------------------------------------------------------
    def resolve(self, expr: cst.BaseExpression | None, depth: int = 0) -> Value | None:
        if expr is None or depth > _MAX_DEPTH:
            return None
        try:
            return self._resolve(expr, depth)
        except (ValueError, TypeError, ArithmeticError, SyntaxError):
            return None

    def candidates(self, expr: cst.BaseExpression | None, depth: int = 0) -> set | None:
        """Every value ``expr`` can take when it is a choice between known values
        (``"cuda" if torch.cuda.is_available() else "cpu"`` gives ``{"cuda", "cpu"}``), also
        through a name bound once; ``None`` when any branch is unknown."""
        if expr is None or depth > _MAX_DEPTH:
            return None
        if isinstance(expr, cst.IfExp):
            body, orelse = self.candidates(expr.body, depth + 1), self.candidates(expr.orelse, depth + 1)
            return None if body is None or orelse is None else body | orelse
        if isinstance(expr, cst.Name):
            bound = self.ctx.single_assignment(expr)
            if isinstance(bound, cst.IfExp):
                return self.candidates(bound, depth + 1)
        resolved = self.resolve(expr, depth)
        if resolved is None or not isinstance(resolved.value, (str, int, float, bool, type(None))):
            return None
        return {resolved.value}

    def off_by_default(self, switch: cst.BaseExpression) -> str | None:
        """Where a switch (``FLASH``, ``self.flash``) is off unless the user turns it on, what
        it defaults to (``"0"``); None when any value the file gives it is not a falsy default.
        A name: every assignment of it in the file is a falsy literal or a falsy command-line
        default (``FLASH = 0`` then ``FLASH = args.flash``). ``self.x``: every ``self.x = ...``
        is a falsy literal, a parameter whose default is one (``flash=False``), or a
        ``config.x`` whose dataclass field in the file defaults to one."""
        ctx = self.ctx
        if isinstance(switch, cst.Name):
            values = [
                assign.value
                for assign in ctx.nodes(cst.Assign)
                for target in assign.targets
                if isinstance(target.target, cst.Name) and target.target.value == switch.value
            ]
        elif isinstance(switch, cst.Attribute) and isinstance(switch.value, cst.Name) and switch.value.value == "self":
            assignments = ctx.attribute_assignments.get(f"self.{switch.attr.value}", [])
            if not all(isinstance(a, cst.Assign) for a in assignments):
                return None
            values = [a.value for a in assignments]  # type: ignore[attr-defined]
        else:
            return None
        if not values:
            return None
        defaults = [self._falsy_default(value) for value in values]
        if any(d is None for d in defaults):
            return None
        return defaults[0]

    def _falsy_default(self, value: cst.BaseExpression) -> str | None:
        ctx = self.ctx
        resolved = self.resolve(value)
        if resolved is not None and resolved.origin in ("literal", "constant", "argparse default"):
            return repr(resolved.value) if not resolved.value and not isinstance(resolved.value, str) else None
        if isinstance(value, cst.Name):  # a parameter with a falsy default
            function = ctx.enclosing(value, cst.FunctionDef)
            if isinstance(function, cst.FunctionDef):
                for param in (*function.params.params, *function.params.kwonly_params):
                    if param.name.value == value.value and param.default is not None:
                        default = self.resolve(param.default)
                        if default is not None and default.value in (False, 0, None) and not isinstance(default.value, str):
                            return repr(default.value)
            return None
        if isinstance(value, cst.Attribute):  # ``config.flash``: a dataclass field of the file
            field_defaults = [
                node.value
                for node in ctx.nodes(cst.AnnAssign)
                if isinstance(node.target, cst.Name)
                and node.target.value == value.attr.value
                and node.value is not None
                and isinstance(ctx.enclosing(node, cst.ClassDef, cst.FunctionDef), cst.ClassDef)
            ]
            found = [self.resolve(d) for d in field_defaults]
            if found and all(f is not None and f.value in (False, 0, None) and not isinstance(f.value, str) for f in found):
                return repr(found[0].value)  # type: ignore[union-attr]
        return None

    def value_of(self, expr: cst.BaseExpression | None) -> Any:
        """Shortcut: the Python value, or ``None`` when unknown (only for non-None values)."""
        resolved = self.resolve(expr)
        return None if resolved is None else resolved.value

    def describe(self, value: Value) -> str:
        """Where ``value`` is written, for messages: ``the `--batch-size` default at line 30``,
        ``the `--batch_size` default (`TrainArgs.batch_size`) at line 9``,
        ``the config default `batch_size = 12` at line 48``, ```` `batch_size=12` at line 3````."""
        ctx = self.ctx
        node = value.node
        line = f" at line {ctx.position(node)[0]}"
        call = node if isinstance(node, cst.Call) else ctx.enclosing(node, cst.Call)
        if isinstance(call, cst.Call) and _method_name(call) == "add_argument":
            options = [
                string_value(a.value) for a in call.args if a.keyword is None and isinstance(a.value, cst.SimpleString)
            ]
            long_options = [o for o in options if isinstance(o, str) and o.startswith("--")]
            option = (long_options or options or [_argparse_dest(call)])[0]
            return f"the `{option}` default{line}"
        if isinstance(call, cst.Call) and _method_name(call) == "set_defaults":
            arg = ctx.enclosing(node, cst.Arg)
            keyword = arg.keyword.value if isinstance(arg, cst.Arg) and arg.keyword else "set_defaults"
            return f"the `{keyword}` default{line}"
        param = ctx.parent.get(node)
        if isinstance(param, cst.Param) and param.default is node:  # ``fire.Fire(train)``
            return f"the `--{param.name.value}` default{line}"
        statement = ctx.enclosing(node, cst.Assign, cst.AnnAssign)
        if isinstance(statement, (cst.Assign, cst.AnnAssign)) and _assigned_name(statement):
            name = _assigned_name(statement)
            cls = ctx.scope_of.get(statement)
            if isinstance(cls, cst.ClassDef):
                if value.origin == "argparse default":
                    return f"the `--{name}` default (`{cls.name.value}.{name}`){line}"
                return f"`{cls.name.value}.{name}`{line}"
            assigned = ctx.code(statement.value) if statement.value is not None else ""
            if value.origin == "argparse default" and self._config_overrides and cls is ctx.module:
                return f"the config default `{name} = {assigned}`{line}"  # the configurator may override it
            if statement.value is node:
                return f"`{name} = {assigned}`{line}"
        element = ctx.parent.get(node)
        if isinstance(element, cst.DictElement) and element.value is node:
            return f"`{ctx.code(element.key)}: {ctx.code(node)}`{line}"
        if isinstance(element, cst.Arg) and element.keyword is not None and element.value is node:
            return f"`{element.keyword.value}={ctx.code(node)}`{line}"
        return f"`{ctx.code(node)}`{line}"

    def dict_entries(self, expr: cst.BaseExpression, depth: int = 0) -> dict[str, cst.BaseExpression] | None:
        """Keyword entries of a dict behind ``**expr``, or None when they cannot all be known."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, cst.Name):
            if self._is_mutated(expr.value) or expr.value in self.ctx.declared_global:
                return None
            value = self.ctx.single_assignment(expr)
            return None if value is None else self.dict_entries(value, depth + 1)
        if isinstance(expr, cst.Dict):
            entries: dict[str, cst.BaseExpression] = {}
            for element in expr.elements:
                if isinstance(element, cst.StarredDictElement):
                    inner = self.dict_entries(element.value, depth + 1)
                    if inner is None:
                        return None
                    entries.update(inner)
                    continue
                key = self.resolve(element.key, depth + 1)
                if key is None or not isinstance(key.value, str):
                    return None
                entries[key.value] = element.value
            return entries
        if isinstance(expr, cst.Call) and (
            dotted_name(expr.func) == "dict" or self.ctx.qualname(expr.func) in _DICT_TYPES
        ):
            return self._call_entries(expr, depth)
        return None

    def _call_entries(self, call: cst.Call, depth: int) -> dict[str, cst.BaseExpression] | None:
        """Entries of ``dict(d, a=1, **e)`` / ``EasyDict({...})``: a leading positional dict,
        keywords and ``**`` dicts."""
        entries: dict[str, cst.BaseExpression] = {}
        for index, arg in enumerate(call.args):
            if arg.keyword is not None:
                entries[arg.keyword.value] = arg.value
            elif arg.star == "**" or (index == 0 and not arg.star):
                inner = self.dict_entries(arg.value, depth + 1)
                if inner is None:
                    return None
                entries.update(inner)
            else:
                return None
        return entries

    # -- cases ------------------------------------------------------------------------
    def _resolve(self, expr: cst.BaseExpression, depth: int) -> Value | None:
        if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary)):
            return Value(expr.evaluated_value, expr)
        if isinstance(expr, cst.SimpleString):
            return Value(string_value(expr), expr)
        if isinstance(expr, cst.ConcatenatedString):
            evaluated = concatenated_value(expr)
            return None if evaluated is None else Value(evaluated, expr)
        if isinstance(expr, cst.Name):
            if expr.value in ("True", "False", "None"):
                return Value({"True": True, "False": False, "None": None}[expr.value], expr)
            return self._resolve_name(expr, depth)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
            inner = self.resolve(expr.expression, depth + 1)
            if inner is None or not isinstance(inner.value, (int, float)) or isinstance(inner.value, bool):
                return None
            sign = -1 if isinstance(expr.operator, cst.Minus) else 1
            return Value(sign * inner.value, expr, inner.origin)
        if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _ARITHMETIC:
            left = self.resolve(expr.left, depth + 1)
            right = self.resolve(expr.right, depth + 1)
            if left is None or right is None:
                return None
            if not all(isinstance(v.value, int) and not isinstance(v.value, bool) for v in (left, right)):
                return None
            return Value(_ARITHMETIC[type(expr.operator)](left.value, right.value), expr, _combined_origin(left, right))
        if isinstance(expr, (cst.Tuple, cst.List)):
            items = []
            for element in expr.elements:
                if isinstance(element, cst.StarredElement):
                    return None
                item = self.resolve(element.value, depth + 1)
                if item is None:
                    return None
                items.append(item.value)
            return Value(tuple(items) if isinstance(expr, cst.Tuple) else items, expr)
        if isinstance(expr, cst.Attribute):
            return self._resolve_attribute(expr, depth)
        if isinstance(expr, cst.Subscript):
            return self._resolve_subscript(expr, depth)
        if isinstance(expr, (cst.IfExp, cst.Comparison, cst.BooleanOperation)) or (
            isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not)
        ):
            return self._resolve_condition(expr, depth)
        return None

    def _resolve_condition(self, expr: cst.BaseExpression, depth: int) -> Value | None:
        """``a if test else b`` with a known test (or equal branches), comparisons, ``and`` /
        ``or`` / ``not`` of known values. A result that depends on a command-line default is
        one too."""
        if isinstance(expr, cst.IfExp):
            test = self.resolve(expr.test, depth + 1)
            if test is None:
                body, orelse = self.resolve(expr.body, depth + 1), self.resolve(expr.orelse, depth + 1)
                if body is None or orelse is None or type(body.value) is not type(orelse.value):
                    return None
                if body.value != orelse.value:
                    return None
                return Value(body.value, expr, _combined_origin(body, orelse))
            chosen = self.resolve(expr.body if test.value else expr.orelse, depth + 1)
            return None if chosen is None else Value(chosen.value, chosen.node, _combined_origin(test, chosen))
        if isinstance(expr, cst.UnaryOperation):
            operand = self.resolve(expr.expression, depth + 1)
            if operand is None or not isinstance(operand.value, _PLAIN):
                return None
            return Value(not operand.value, expr, _combined_origin(operand))
        if isinstance(expr, cst.BooleanOperation):
            left = self.resolve(expr.left, depth + 1)
            if left is None or not isinstance(left.value, _PLAIN):
                return None
            decided = bool(left.value) if isinstance(expr.operator, cst.Or) else not left.value
            if decided:
                return Value(left.value, expr, _combined_origin(left))
            right = self.resolve(expr.right, depth + 1)
            return None if right is None else Value(right.value, expr, _combined_origin(left, right))
        assert isinstance(expr, cst.Comparison)
        left = self.resolve(expr.left, depth + 1)
        if left is None or not isinstance(left.value, _PLAIN):
            return None
        operands = [left]
        result = True
        for target in expr.comparisons:
            right = self.resolve(target.comparator, depth + 1)
            compare = _COMPARISONS.get(type(target.operator))
            if right is None or compare is None or not isinstance(right.value, _PLAIN):
                return None
            if isinstance(target.operator, (cst.Is, cst.IsNot)) and not (
                isinstance(left.value, (bool, type(None))) or isinstance(right.value, (bool, type(None)))
            ):
                return None  # identity of other values is the interpreter's business
            result = result and compare(left.value, right.value)
            operands.append(right)
            left = right
        return Value(bool(result), expr, _combined_origin(*operands))

    def _resolve_name(self, name: cst.Name, depth: int) -> Value | None:
        if name.value in self.ctx.declared_global:
            return None
        bindings = self.ctx.lookup(name.value, name)
        if len(bindings) == 1 and bindings[0].value is not None:
            resolved = self.resolve(bindings[0].value, depth + 1)
            if resolved is None:
                return None
            return self._named(resolved, resolved.node, bindings, name)
        if not bindings:
            return None
        if len(bindings) == 1 and isinstance(bindings[0].node, cst.Param):
            return self._command_line_parameter(bindings[0].node, depth)
        return self._reaching_value(name, bindings, depth)

    def _command_line_parameter(self, param: cst.Param, depth: int) -> Value | None:
        """A parameter of the function ``fire.Fire(train)`` / ``typer.run(train)`` turns into
        the command line (alpaca-lora): its default is a command-line default. Any other
        call of the function in the file may pass something else."""
        function = self.ctx.enclosing(param, cst.FunctionDef)
        if param.default is None or not isinstance(function, cst.FunctionDef) or self.ctx.loops.callers(function):
            return None
        for call in self.ctx.calls(*_CLI_RUNNERS):
            runs = call.args[0].value if call.args else None
            if isinstance(runs, cst.Name) and runs.value == function.name.value:
                if self.ctx.parent.get(function) is not self.ctx.module:
                    return None  # a nested function of the same name
                resolved = self.resolve(param.default, depth + 1)
                return None if resolved is None else Value(resolved.value, resolved.node, "argparse default")
        return None

    def _named(self, resolved: Value, node: cst.CSTNode, bindings: list, read: cst.Name) -> Value:
        origin = resolved.origin if resolved.origin != "literal" else "constant"
        if any(self._overridden_after(binding.node, read) for binding in bindings):
            origin = "argparse default"
        return Value(resolved.value, node, origin)

    def _reaching_value(self, name: cst.Name, bindings: list, depth: int) -> Value | None:
        """The value of a name bound several times, where every binding that can reach the
        read agrees. Bindings are taken in source order: an unconditional one replaces the
        possible values, one under ``if``/``for``/``try`` adds to them."""
        ctx = self.ctx
        scope = bindings[0].scope
        read_in_scope = ctx.scope_of.get(name) is scope
        possible: list[Value] | None = None
        reaching = []
        for binding in sorted(bindings, key=lambda b: ctx.order[b.node]):
            node = binding.node
            after_read = read_in_scope and ctx.end_order[node] >= ctx.order[name]
            if after_read and not self._share_loop(node, name, scope):
                continue
            conditional = after_read or self._conditional(node, scope)
            if isinstance(node, cst.AugAssign):
                if isinstance(node.operator, (cst.FloorDivideAssign, cst.DivideAssign)) and _world_size(node.value):
                    continue
                apply = _AUGMENTED.get(type(node.operator))
                operand = self.resolve(node.value, depth + 1)
                if apply is None or possible is None or operand is None or not _is_int(operand.value):
                    return None
                if self._in_loop(node, scope) or not all(_is_int(v.value) for v in possible):
                    return None
                updated = [Value(apply(v.value, operand.value), name, "expression") for v in possible]
                possible = possible + updated if conditional else updated
            elif isinstance(node, (cst.Assign, cst.AnnAssign)) and binding.value is not None:
                if _world_size_share(binding.value, name.value):
                    continue
                resolved = self.resolve(binding.value, depth + 1)
                if resolved is None:
                    return None
                possible = (possible or []) + [resolved] if conditional else [resolved]
            else:
                return None  # loop targets, imports, ``def``, unpacking: not a value we can follow
            reaching.append(binding)
        if not possible:
            return None
        first = possible[0]
        if any(type(v.value) is not type(first.value) or v.value != first.value for v in possible[1:]):
            return None
        # Several writes of the same value: no single node is "the" value a fix could edit.
        node = first.node if len(possible) == 1 else name
        return self._named(first, node, reaching, name)

    def _conditional(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """Whether ``node`` may not run when the code of ``scope`` around it runs."""
        for ancestor in self.ctx.ancestors(node):
            if ancestor is scope:
                return False
            if isinstance(ancestor, cst.If) and any(ancestor is guard for guard in self.ctx.main_guards):
                continue
            if isinstance(ancestor, cst.BaseCompoundStatement) and not isinstance(ancestor, cst.With):
                return True
        return False

    def _in_loop(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
        for ancestor in self.ctx.ancestors(node):
            if ancestor is scope:
                return False
            if isinstance(ancestor, (cst.For, cst.While)):
                return True
        return False

    def _share_loop(self, node: cst.CSTNode, read: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """A loop around both: a later binding reaches the read on the next iteration."""
        for ancestor in self.ctx.ancestors(read):
            if ancestor is scope:
                return False
            if isinstance(ancestor, (cst.For, cst.While)) and self.ctx.is_descendant(node, ancestor):
                return True
        return False

    # -- configurator globals (nanoGPT) ---------------------------------------------------
    @cached_property
    def _config_overrides(self) -> list[cst.CSTNode]:
        """What rewrites module globals with values from outside the file: a module-level
        ``exec(open("configurator.py").read())``, and ``globals()[k] = v`` /
        ``globals().update(...)`` anywhere (nanoGPT's configurator inlined). Each as the
        top-level statement that holds it, or as its function, which runs at a time we
        cannot tell."""
        found: list[cst.CSTNode] = []
        for call in self.ctx.nodes(cst.Call):
            if not isinstance(call.func, cst.Name) or call.func.value not in ("exec", "globals"):
                continue
            function = self.ctx.enclosing(call, cst.FunctionDef)
            if call.func.value == "exec":
                if function is None:
                    found.append(self._top_level(call))
            elif self._writes_through(call):
                found.append(function if function is not None else self._top_level(call))
        return found

    def _writes_through(self, globals_call: cst.Call) -> bool:
        """``globals()[k] = v``, ``globals()[k] += v``, ``globals().update(...)``."""
        parent = self.ctx.parent.get(globals_call)
        if isinstance(parent, cst.Subscript):
            holder = self.ctx.parent.get(parent)
            augmented = isinstance(holder, cst.AugAssign) and holder.target is parent
            return isinstance(holder, cst.AssignTarget) or augmented
        return (
            isinstance(parent, cst.Attribute)
            and parent.attr.value in ("update", "setdefault", "__setitem__")
            and isinstance(self.ctx.parent.get(parent), cst.Call)
        )

    def _top_level(self, node: cst.CSTNode) -> cst.CSTNode:
        current = node
        while self.ctx.parent.get(current) is not None and self.ctx.parent.get(current) is not self.ctx.module:
            current = self.ctx.parent[current]
        return current

    def _overridden_after(self, binding: cst.CSTNode, read: cst.CSTNode) -> bool:
        """A module-level binding followed by a configurator ``exec`` before the read."""
        if not self._config_overrides or self.ctx.scope_of.get(binding) is not self.ctx.module:
            return False
        read_in_module = self.ctx.scope_of.get(read) is self.ctx.module
        for statement in self._config_overrides:
            if isinstance(statement, cst.FunctionDef):
                return True
            if self.ctx.order[statement] > self.ctx.end_order[binding] and (
                not read_in_module or self.ctx.order[statement] < self.ctx.order[read]
            ):
                return True
        return False

    def _resolve_subscript(self, expr: cst.Subscript, depth: int) -> Value | None:
        if len(expr.slice) != 1 or not isinstance(expr.slice[0].slice, cst.Index):
            return None
        key = self.resolve(expr.slice[0].slice.value, depth + 1)
        if key is None or not isinstance(key.value, str):
            return None
        entry = self.dict_entry(expr.value, key.value, depth + 1)
        if entry is None or entry is MISSING:
            return None
        resolved = self.resolve(entry, depth + 1)
        if resolved is None:
            return None
        return Value(resolved.value, resolved.node, "dict entry")

    # -- attributes: argparse namespaces, dataclasses, config objects --------------------
    def _resolve_attribute(self, expr: cst.Attribute, depth: int) -> Value | None:
        if not isinstance(expr.value, cst.Name):
            held = expr.value
            if (
                isinstance(held, cst.Attribute) and isinstance(held.value, cst.Name) and held.value.value == "self"
                and held.attr.value in _OPTION_NAMESPACES
                and not self.ctx.attribute_assignments.get(f"self.{held.attr.value}.{expr.attr.value}")
                and self._handed_in(f"self.{held.attr.value}")
            ):
                return self._declared_elsewhere(expr.attr.value, depth)  # ``self.args.num_workers``
            return None
        return self._attribute(expr.value, expr.attr.value, depth)

    def attribute(self, namespace: cst.Name, dest: str) -> Value | None:
        """``namespace.dest``, for a name node of the file, as :meth:`resolve` reads attributes."""
        try:
            return self._attribute(namespace, dest, 0)
        except (ValueError, TypeError, ArithmeticError, SyntaxError):
            return None

    def _attribute(self, name: cst.Name, dest: str, depth: int) -> Value | None:
        namespace = name.value
        if self._assigned(f"{namespace}.{dest}") or self._set_dynamically(namespace):
            return None
        if self._is_argparse_namespace(name, dest):
            return self._argparse_default(dest, depth)
        imported = self._imported_namespace(name, dest, depth)
        if imported is not None:
            return imported
        found = self._object_attribute(name, dest, depth)
        if found is None and namespace in _OPTION_NAMESPACES:
            bindings = self.ctx.lookup(namespace, name)
            if len(bindings) == 1 and isinstance(bindings[0].node, cst.Param) and not self._passed_in_file(bindings[0].node):
                return self._declared_elsewhere(dest, depth)  # ``def data_provider(args, flag):``
        return found

    def _handed_in(self, attribute: str) -> bool:
        """Every assignment of ``attribute`` (``self.args``) in the file stores a parameter of the
        method it is in, as it came (``self.args = args``): not a config the class loads."""
        assignments = self.ctx.attribute_assignments.get(attribute, ())
        for node in assignments:
            value = node.value if isinstance(node, cst.Assign) else None
            if not isinstance(value, cst.Name):
                return False
            bindings = self.ctx.lookup(value.value, value)
            if len(bindings) != 1 or not isinstance(bindings[0].node, cst.Param):
                return False
        return True

    def _passed_in_file(self, param: cst.Param) -> bool:
        """The function of ``param`` is called in this file: its callers here say what it gets."""
        function = self.ctx.enclosing(param, cst.FunctionDef)
        return isinstance(function, cst.FunctionDef) and bool(self.ctx.loops.callers(function))

    def _declared_elsewhere(self, dest: str, depth: int) -> Value | None:
        """The default of ``--<dest>`` for a namespace of options this file is handed from
        elsewhere (``args`` a parameter of a function the file never calls, ``self.args``):
        where one script gives this file the option (:meth:`ProjectView.declaring_script`), sets its options nowhere
        but on its command line, and no file of the project assigns ``.<dest>`` (the
        Time-Series-Library layout: ``run.py`` parses ``--num_workers``, default 0;
        ``data_provider/data_factory.py`` builds ``DataLoader(num_workers=args.num_workers)``)."""
        view = self.ctx.project
        if view is None or not view.member or depth > _MAX_DEPTH:
            return None
        script = view.declaring_script(dest)
        if script is None or os.path.abspath(script) == os.path.abspath(self.ctx.path):
            return None
        other = view.context_of(script)
        if other is None or OPTIONS_SET_ELSEWHERE.search(other.source):
            return None
        if view.assigns_attribute(dest):
            return None  # ``args.num_workers = 4`` somewhere
        return other.values._argparse_default(dest, depth + 1)

    def _imported_namespace(self, name: cst.Name, dest: str, depth: int) -> Value | None:
        """``args.num_workers`` after ``from options import args``, where the project's
        ``options.py`` binds ``args = parser.parse_args()`` once: its argparse default
        (cv_practise's GAN trainer)."""
        view = self.ctx.project
        if view is None or depth > _MAX_DEPTH:
            return None
        bound = view.binding(name)
        if bound is None:
            return None
        other, binding = bound
        node = binding.node
        if other is self.ctx or not isinstance(node, cst.Assign) or len(node.targets) != 1:
            return None
        target = node.targets[0].target
        if not isinstance(target, cst.Name) or target.value != name.value:
            return None
        if not other.values._is_argparse_namespace(target, dest):
            return None
        if other.values._assigned(f"{target.value}.{dest}"):
            return None
        return other.values._argparse_default(dest, depth + 1)

    def _assigned(self, attribute: str) -> bool:
        """Whether the file sets ``attribute`` (``args.batch_size``) where a run without
        command-line flags would: an assignment under a flag that is off by default
        (``if args.tiny: args.batch_size = 2``) is one the user asks for, as ``--batch-size 2``."""
        assignments = self.ctx.attribute_assignments.get(attribute, ())
        if not assignments:
            return False
        if attribute in self._flags_asked:
            return True  # ``if args.fp16: args.fp16 = ...``: the flag itself is reassigned
        self._flags_asked.add(attribute)
        try:
            return any(not self._under_flag_off(node) for node in assignments)
        finally:
            self._flags_asked.discard(attribute)

    def _under_flag_off(self, node: cst.CSTNode) -> bool:
        """Under an ``if`` a run without flags on a GPU machine skips: a command-line flag that is
        off by default, or a test that holds only without CUDA (PFLlib's ``if args.device ==
        "cuda" and not torch.cuda.is_available(): args.device = "cpu"``, a fallback, as
        ``"cuda" if torch.cuda.is_available() else "cpu"`` is)."""
        child, parent = node, self.ctx.parent.get(node)
        while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module)):
            if isinstance(parent, cst.If) and child is parent.body:
                if self._only_without_cuda(parent.test):
                    return True
                test = self.resolve(parent.test)
                if test is not None and test.origin == "argparse default" and test.value is False:
                    return True
            child, parent = parent, self.ctx.parent.get(parent)
        return False

    def _only_without_cuda(self, test: cst.BaseExpression) -> bool:
        """``not torch.cuda.is_available()``, alone or as one operand of an ``and``."""
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            return self._only_without_cuda(test.left) or self._only_without_cuda(test.right)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = test.expression
            return isinstance(inner, cst.Call) and self.ctx.qualname(inner.func) == "torch.cuda.is_available"
        return False

    @cached_property
    def _parsed(self) -> list[tuple[cst.Name, cst.ClassDef | None]]:
        return self.parsed_dataclasses()

    def parsed_dataclasses(self) -> list[tuple[cst.Name, cst.ClassDef | None]]:
        """The names ``a, b = HfArgumentParser((A, B)).parse_args_into_dataclasses()`` binds,
        each with its dataclass (None for one defined outside the file). Only parses of the
        command line: ``parse_json_file`` / ``parse_yaml_file`` / ``parse_dict`` / TRL's
        ``parse_args_and_config`` and ``args=[...]`` set values the file does not show."""
        found: list[tuple[cst.Name, cst.ClassDef | None]] = []
        for call in self.ctx.method_calls("parse_args_into_dataclasses"):
            assign = self.ctx.parent.get(call)
            if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
                continue
            if any(arg.keyword is None or arg.keyword.value != "return_remaining_strings" for arg in call.args):
                continue
            target = assign.targets[0].target
            classes = self._parser_dataclasses(call.func.value)  # type: ignore[attr-defined]
            if not isinstance(target, (cst.Tuple, cst.List)) or classes is None:
                continue
            for element, cls in zip(target.elements, classes):
                if isinstance(element.value, cst.Name):
                    found.append((element.value, cls))
        return found

    def _set_dynamically(self, namespace: str) -> bool:
        """``setattr(args, ...)``, ``vars(args).update(...)``, ``args.__dict__.update(...)``."""
        if namespace in self._setattr_targets:
            return True
        for call in self.ctx.method_calls("update", "__setitem__", "setdefault"):
            owner = call.func.value  # type: ignore[attr-defined]
            if isinstance(owner, cst.Attribute) and owner.attr.value == "__dict__":
                if dotted_name(owner.value) == namespace:
                    return True
            if (
                isinstance(owner, cst.Call)
                and dotted_name(owner.func) == "vars"
                and owner.args
                and dotted_name(owner.args[0].value) == namespace
            ):
                return True
        return False

    @cached_property
    def _setattr_targets(self) -> set[str]:
        return {
            dotted_name(call.args[0].value) or ""
            for call in self.ctx.nodes(cst.Call)
            if isinstance(call.func, cst.Name) and call.func.value == "setattr" and call.args
        }

    def _object_attribute(self, name: cst.Name, dest: str, depth: int) -> Value | None:
        bindings = self.ctx.lookup(name.value, name)
        if len(bindings) != 1:
            return None
        binding = bindings[0]
        if isinstance(binding.node, cst.ClassDef):  # ``CFG.batch_size``
            return _as_constant(self._class_attribute(binding.node, dest, depth))
        if isinstance(binding.value, cst.Call):  # ``cfg = TrainConfig(...)`` / ``SimpleNamespace(...)``
            return self._constructed_attribute(binding.value, name.value, dest, depth)
        if isinstance(binding.node, cst.Assign) and binding.value is None:
            # ``model_args, train_args = parser.parse_args_into_dataclasses()``
            return self._parsed_dataclass_field(binding.node, name.value, dest, depth)
        return None

    def _constructed_attribute(self, call: cst.Call, namespace: str, dest: str, depth: int) -> Value | None:
        if self.ctx.qualname(call.func) in _NAMESPACE_TYPES:
            if self._is_mutated(namespace):
                return None
            entries = self._call_entries(call, depth)
            if entries is None or dest not in entries:
                return None
            return _as_constant(self.resolve(entries[dest], depth + 1))
        cls = self._local_class(call.func)
        if cls is None:
            return None
        if not self._is_dataclass(cls):
            # A plain class: its ``__init__`` decides, unless there is none to pass arguments to.
            return None if call.args else _as_constant(self._class_attribute(cls, dest, depth))
        position = self._field_position(cls, dest)
        if any(arg.keyword is None and not arg.star for arg in call.args) and position is None:
            return None
        explicit = self.ctx.argument(call, dest, position)
        if explicit is None:
            return None
        if explicit is not MISSING:
            return _as_constant(self.resolve(explicit, depth + 1))
        return _as_constant(self._class_attribute(cls, dest, depth))

    def _parsed_dataclass_field(self, assign: cst.Assign, name: str, dest: str, depth: int) -> Value | None:
        """A field of a dataclass that ``parse_args_into_dataclasses()`` fills from the command
        line (see :meth:`parsed_dataclasses`): its default is an argparse default."""
        for target, cls in self._parsed:
            if target.value != name or not self.ctx.is_descendant(target, assign):
                continue
            if cls is None:
                return None  # a library class (``TrainingArguments``): parsed from the command line
            value = self._class_attribute(cls, dest, depth)
            return None if value is None else Value(value.value, value.node, "argparse default")
        return None

    def _parser_dataclasses(self, receiver: cst.BaseExpression) -> list[cst.ClassDef | None] | None:
        """The dataclasses an ``HfArgumentParser`` is built from, in order; None for a class
        defined outside the file."""
        parser = self.ctx.bound_call(receiver, *_HF_PARSERS)
        if parser is None:
            return None
        types = self.ctx.argument(parser, "dataclass_types", 0)
        if types is None or types is MISSING:
            return None
        if isinstance(types, cst.Name) and not self._local_class(types):
            types = self.ctx.single_assignment(types)
        if isinstance(types, (cst.Tuple, cst.List)):
            elements = [e.value for e in types.elements if not isinstance(e, cst.StarredElement)]
            if len(elements) != len(types.elements):
                return None
        elif isinstance(types, (cst.Name, cst.Attribute)):
            elements = [types]
        else:
            return None
        return [self._local_class(element) for element in elements]

    def _local_class(self, expr: cst.BaseExpression) -> cst.ClassDef | None:
        if not isinstance(expr, cst.Name):
            return None
        bindings = self.ctx.lookup(expr.value, expr)
        if len(bindings) == 1 and isinstance(bindings[0].node, cst.ClassDef):
            return bindings[0].node
        return None

    def _is_dataclass(self, cls: cst.ClassDef) -> bool:
        for decorator in cls.decorators:
            target = decorator.decorator
            if isinstance(target, cst.Call):
                target = target.func
            if self.ctx.qualname(target) in _DATACLASS_DECORATORS:
                return True
        return False

    def _class_attribute(
        self, cls: cst.ClassDef, dest: str, depth: int, seen: frozenset[int] = frozenset()
    ) -> Value | None:
        """``dest`` as the class body sets it (a dataclass field default, a config class
        attribute), looked up through base classes defined in the file. A library base
        class or a method that sets ``self.<dest>`` (``__init__``, ``__post_init__``) makes
        it unknown."""
        if id(cls) in seen or len(seen) > 8:
            return None
        if any(self.ctx.is_descendant(node, cls) for node in self.ctx.attribute_assignments.get(f"self.{dest}", ())):
            return None
        statements = [s for s in _class_statements(cls) if _assigned_name(s) == dest]
        if len(statements) > 1:
            return None
        if statements:
            value = statements[0].value
            if value is None:
                return None  # ``batch_size: int``: a required field
            if isinstance(value, cst.Call) and self.ctx.qualname(value.func) in _FIELD_FUNCTIONS:
                default = self.ctx.keyword_arg(value, "default")
                return None if default is None else self.resolve(default.value, depth + 1)
            return self.resolve(value, depth + 1)
        for base in cls.bases:
            if base.keyword is not None:
                continue  # ``metaclass=...``
            if dotted_name(base.value) == "object":
                continue
            inherited = self._local_class(base.value)
            if inherited is None:
                return None  # a library base class may set it
            value = self._class_attribute(inherited, dest, depth, seen | {id(cls)})
            if value is not None:
                return value
        return None

    def _field_position(self, cls: cst.ClassDef, dest: str) -> int | None:
        """The positional index of a dataclass field, when the class has no bases to add fields."""
        if cls.bases:
            return None
        fields = [_assigned_name(s) for s in _class_statements(cls) if isinstance(s, cst.AnnAssign)]
        return fields.index(dest) if dest in fields else None

    # -- argparse -----------------------------------------------------------------------

    def _is_argparse_namespace(self, name: cst.Name, dest: str, depth: int = 0) -> bool:
        for binding in self.ctx.lookup(name.value, name):
            if isinstance(binding.node, cst.Param):
                return len(self.ctx.lookup(name.value, name)) == 1 and self._namespace_parameter(
                    binding.node, dest, depth
                )
            value = binding.value
            if value is None and isinstance(binding.node, cst.Assign):
                value = binding.node.value  # ``args, rest = parser.parse_known_args()``
                if isinstance(value, cst.Call) and _method_name(value) == "parse_known_args":
                    return len(self.ctx.lookup(name.value, name)) == 1 and not value.args
                return False
            if isinstance(value, cst.Subscript):  # parser.parse_known_args()[0]
                value = value.value
            if (
                isinstance(value, cst.Call)
                and _method_name(value) in ("parse_args", "parse_known_args")
                and not value.args
            ) or self._is_parse_args_helper_call(value, dest):
                return len(self.ctx.lookup(name.value, name)) == 1
        return False

    def _namespace_parameter(self, param: cst.Param, dest: str, depth: int) -> bool:
        """``def main(args):`` whose every call in the file passes the parsed command line
        (``main(args)`` after ``args = parse_args()``, ``main(parser.parse_args())``): the
        diffusers and transformers examples. A function also used as a value
        (``mp.spawn(main, ...)``, ``fire.Fire(main)``) gets its arguments from elsewhere."""
        function = self.ctx.enclosing(param, cst.FunctionDef)
        if depth > 3 or not isinstance(function, cst.FunctionDef) or param.star:
            return False
        params = function.params
        if not any(p is param for p in (*params.posonly_params, *params.params, *params.kwonly_params)):
            return False
        position = next((i for i, p in enumerate((*params.posonly_params, *params.params)) if p is param), None)
        calls = self.ctx.loops.callers(function)
        if not calls or self._function_references.get(function.name.value, 0) != len(calls) + 1:
            return False
        for call in calls:
            if not isinstance(call.func, cst.Name) or any(arg.star for arg in call.args):
                return False
            passed = next((a.value for a in call.args if a.keyword and a.keyword.value == param.name.value), None)
            if passed is None and position is not None:
                positional = [a.value for a in call.args if a.keyword is None]
                passed = positional[position] if position < len(positional) else None
            if isinstance(passed, cst.Name):
                if not self._is_argparse_namespace(passed, dest, depth + 1):
                    return False
            elif not (
                isinstance(passed, cst.Call)
                and (
                    (_method_name(passed) == "parse_args" and not passed.args)
                    or self._is_parse_args_helper_call(passed, dest)
                )
            ):
                return False
        return True

    @cached_property
    def _function_references(self) -> dict[str, int]:
        """How often each name occurs (a ``def``'s own name included): a function whose name
        occurs only in its ``def`` and its calls is not also handed around as a value."""
        counts: dict[str, int] = {}
        parent = self.ctx.parent
        for node in self.ctx.nodes(cst.Name):
            above = parent.get(node)
            if isinstance(above, cst.Attribute) and above.attr is node:
                continue  # ``model.train()`` names a method, not the file's ``def train``
            counts[node.value] = counts.get(node.value, 0) + 1
        return counts

    def _is_parse_args_helper_call(self, value: cst.BaseExpression | None, dest: str) -> bool:
        """``args = parse_args()`` where ``parse_args`` is a function of this file whose every
        ``return`` hands back ``parser.parse_args()`` untouched at ``dest``: the common way
        scripts (the transformers examples among them) build their namespace."""
        if not isinstance(value, cst.Call) or value.args or not isinstance(value.func, cst.Name):
            return False
        bindings = self.ctx.lookup(value.func.value, value.func)
        if len(bindings) != 1 or not isinstance(bindings[0].node, cst.FunctionDef):
            return False
        function = bindings[0].node
        returns = [r for r in self.ctx.walk(function, cst.Return) if self.ctx.scope_of.get(r) is function]
        if not returns:
            return False
        for statement in returns:
            returned = statement.value
            if isinstance(returned, cst.Name):
                if self._assigned(f"{returned.value}.{dest}"):
                    return False
                bindings = self.ctx.lookup(returned.value, returned)
                if not bindings or not all(
                    isinstance(b.node, cst.Assign) and self._parses_command_line(b.value, function) for b in bindings
                ):
                    return False
            elif not self._parses_command_line(returned, function):
                return False
        return True

    def _parses_command_line(self, value: cst.BaseExpression | None, helper: cst.FunctionDef) -> bool:
        """``parser.parse_args()``, or ``parser.parse_args(input_args)`` with ``input_args`` a
        parameter of the helper that defaults to None (the diffusers examples): called
        without arguments, both parse the command line."""
        if not isinstance(value, cst.Call) or _method_name(value) != "parse_args":
            return False
        if not value.args:
            return True
        if len(value.args) != 1 or value.args[0].keyword is not None or not isinstance(value.args[0].value, cst.Name):
            return False
        passed = value.args[0].value
        bindings = self.ctx.lookup(passed.value, passed)
        return (
            len(bindings) == 1
            and isinstance(bindings[0].node, cst.Param)
            and self.ctx.enclosing(bindings[0].node, cst.FunctionDef) is helper
            and isinstance(bindings[0].node.default, cst.Name)
            and bindings[0].node.default.value == "None"
        )

    def argparse_default(self, dest: str) -> Value | None:
        """The default of the file's one command-line option stored at ``dest`` (``--adam`` for
        ``opt.adam`` in a function the parsed options are handed to), None where there is none,
        or more than one."""
        return self._argparse_default(dest, 0)

    def _argparse_default(self, dest: str, depth: int) -> Value | None:
        defaults: list[cst.BaseExpression | Value] = []
        for call in self.ctx.method_calls("add_argument"):
            if _argparse_dest(call) != dest:
                continue
            default = self.ctx.keyword_arg(call, "default")
            if default is not None:
                defaults.append(default.value)
                continue
            action = self.ctx.keyword_arg(call, "action")
            action_value = self.resolve(action.value, depth + 1) if action else None
            if action_value is not None and action_value.value in ("store_true", "store_false"):
                defaults.append(Value(action_value.value == "store_false", call, "argparse default"))
            elif action is None:
                defaults.append(Value(None, call, "argparse default"))
            else:
                return None
        for call in self.ctx.method_calls("set_defaults"):
            arg = self.ctx.keyword_arg(call, dest)
            if arg is not None:
                defaults = [arg.value]
            elif any(a.star for a in call.args):
                return None
        if len(defaults) != 1:
            return None
        default = defaults[0]
        if isinstance(default, Value):
            return default
        resolved = self.resolve(default, depth + 1)
        if resolved is None:
            return None
        return Value(resolved.value, resolved.node, "argparse default")

    def dict_entry(self, expr: cst.BaseExpression, key: str, depth: int = 0) -> cst.BaseExpression | Any:
        """The expression a dict behind ``**expr`` (or ``expr[key]``) holds at ``key``, MISSING
        when it certainly has no such key, None when that cannot be known. Unlike
        :meth:`dict_entries`, changes to other keys do not matter: after
        ``kw = {"batch_size": n}`` and ``if cuda: kw.update({"pin_memory": True})``,
        ``batch_size`` is ``n`` and ``pin_memory`` is unknown."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, cst.Name):
            if expr.value in self.ctx.declared_global or not self._untouched(expr.value, key, depth):
                return None
            value = self.ctx.single_assignment(expr)
            return None if value is None else self.dict_entry(value, key, depth + 1)
        found: Any = MISSING
        if isinstance(expr, cst.Dict):
            for element in expr.elements:
                if isinstance(element, cst.StarredDictElement):
                    inner = self.dict_entry(element.value, key, depth + 1)
                    if inner is None:
                        return None
                    found = inner if inner is not MISSING else found
                    continue
                written = self.resolve(element.key, depth + 1)
                if written is None:
                    return None  # a key we cannot read may be this one
                if written.value == key:
                    found = element.value
            return found
        if isinstance(expr, cst.Call) and (
            dotted_name(expr.func) == "dict" or self.ctx.qualname(expr.func) in _DICT_TYPES
        ):
            for index, arg in enumerate(expr.args):
                if arg.keyword is not None:
                    found = arg.value if arg.keyword.value == key else found
                elif arg.star == "**" or (index == 0 and not arg.star):
                    inner = self.dict_entry(arg.value, key, depth + 1)
                    if inner is None:
                        return None
                    found = inner if inner is not MISSING else found
                else:
                    return None
            return found
        return None

    def _untouched(self, name: str, key: str, depth: int) -> bool:
        """Whether nothing in the file may change ``name[key]`` in place: updates with dicts
        that certainly lack the key, and writes or deletes of other keys, leave it alone."""
        for call in self.ctx.method_calls(*_MUTATORS):
            if not (isinstance(call.func, cst.Attribute) and dotted_name(call.func.value) == name):
                continue
            method = call.func.attr.value
            if method == "update":
                for index, arg in enumerate(call.args):
                    if arg.keyword is not None:
                        if arg.keyword.value == key:
                            return False
                    elif arg.star == "**" or (index == 0 and not arg.star):
                        if self.dict_entry(arg.value, key, depth + 1) is not MISSING:
                            return False
                    else:
                        return False
            elif method in ("setdefault", "pop", "__setitem__"):
                written = self.resolve(call.args[0].value, depth + 1) if call.args else None
                if written is None or written.value == key:
                    return False
            else:
                return False
        for assign in self.ctx.nodes(cst.Assign) + self.ctx.nodes(cst.AugAssign):
            targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
            for target in targets:
                if isinstance(target, cst.Subscript) and dotted_name(target.value) == name:
                    if self._subscript_key(target, depth) in (None, key):
                        return False
        for delete in self.ctx.nodes(cst.Del):
            if isinstance(delete.target, cst.Subscript) and dotted_name(delete.target.value) == name:
                if self._subscript_key(delete.target, depth) in (None, key):
                    return False
        return True

    def _subscript_key(self, target: cst.Subscript, depth: int) -> str | None:
        if len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Index):
            return None
        written = self.resolve(target.slice[0].slice.value, depth + 1)
        return written.value if written is not None and isinstance(written.value, str) else None

    def _is_mutated(self, name: str) -> bool:
        for call in self.ctx.method_calls(*_MUTATORS):
            if isinstance(call.func, cst.Attribute) and dotted_name(call.func.value) == name:
                return True
        for assign in self.ctx.nodes(cst.Assign) + self.ctx.nodes(cst.AugAssign):
            targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
            for target in targets:
                if isinstance(target, cst.Subscript) and dotted_name(target.value) == name:
                    return True
        for delete in self.ctx.nodes(cst.Del):
            if isinstance(delete.target, cst.Subscript) and dotted_name(delete.target.value) == name:
                return True
        return False


def _combined_origin(*values: Value) -> str:
    return "argparse default" if any(v.origin == "argparse default" for v in values) else "expression"


def _as_constant(value: Value | None) -> Value | None:
    """A literal read through a name or an attribute is a constant."""
    if value is None or value.origin != "literal":
        return value
    return Value(value.value, value.node, "constant")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _world_size(expr: cst.BaseExpression) -> bool:
    return bool(_WORLD_SIZE.search((dotted_name(expr) or "").split(".")[-1]))


def _world_size_share(value: cst.BaseExpression, name: str) -> bool:
    """``accum = accum // world_size``."""
    return (
        isinstance(value, cst.BinaryOperation)
        and isinstance(value.operator, (cst.FloorDivide, cst.Divide))
        and isinstance(value.left, cst.Name)
        and value.left.value == name
        and _world_size(value.right)
    )


def _class_statements(cls: cst.ClassDef) -> list[cst.Assign | cst.AnnAssign]:
    """The plain assignments of a class body (fields and class attributes)."""
    found: list[cst.Assign | cst.AnnAssign] = []
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            found.extend(s for s in statement.body if isinstance(s, (cst.Assign, cst.AnnAssign)))
    return found


def _assigned_name(statement: cst.Assign | cst.AnnAssign) -> str | None:
    if isinstance(statement, cst.AnnAssign):
        return statement.target.value if isinstance(statement.target, cst.Name) else None
    if len(statement.targets) == 1 and isinstance(statement.targets[0].target, cst.Name):
        return statement.targets[0].target.value
    return None


def _method_name(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _argparse_dest(call: cst.Call) -> str | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dest":
            return string_value(arg.value) if isinstance(arg.value, cst.SimpleString) else None
    options = [
        string_value(arg.value)
        for arg in call.args
        if arg.keyword is None and not arg.star and isinstance(arg.value, cst.SimpleString)
    ]
    if not options:
        return None
    long_options = [o for o in options if o.startswith("--")]
    chosen = long_options[0][2:] if long_options else options[0].lstrip("-")
    return chosen.replace("-", "_")
