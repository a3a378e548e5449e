"""The shared value resolver: what an expression evaluates to, where that is knowable.

Rules ask ``ctx.values.resolve(expr)`` and get a :class:`Value` or ``None`` for
unknown. Unknown is the normal answer for anything set outside the file or changed
along paths we do not follow: rules stay silent on it. Resolution sees through
literals, module constants and simple assignments bound exactly once, argparse
defaults (``add_argument(..., default=)``, ``set_defaults``), dict literals and
``dict(...)`` (including behind ``**kwargs``), and ``d["key"]`` on such dicts.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import libcst as cst

from advisor.names import dotted_name

if TYPE_CHECKING:
    from advisor.context import FileContext

_MAX_DEPTH = 12
_ARITHMETIC = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.FloorDivide: operator.floordiv,
}
# Methods that change a dict in place: a dict that meets one is no longer knowable.
_MUTATORS = ("update", "setdefault", "pop", "popitem", "clear", "__setitem__")


@dataclass(frozen=True)
class Value:
    value: Any
    # The node the value is written at: a fix that changes the value edits this node.
    node: cst.CSTNode
    origin: str = "literal"  # literal, constant, argparse default, dict entry


class ValueResolver:
    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx
        self._argparse_cache: dict[str, list[cst.Call]] | None = None

    # -- public ---------------------------------------------------------------------
    def resolve(self, expr: cst.BaseExpression | None, depth: int = 0) -> Value | None:
        if expr is None or depth > _MAX_DEPTH:
            return None
        try:
            return self._resolve(expr, depth)
        except (ValueError, TypeError, ArithmeticError, SyntaxError):
            return None

    def value_of(self, expr: cst.BaseExpression | None) -> Any:
        """Shortcut: the Python value, or ``None`` when unknown (only for non-None values)."""
        resolved = self.resolve(expr)
        return None if resolved is None else resolved.value

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
        if isinstance(expr, cst.Call) and dotted_name(expr.func) == "dict":
            entries = {}
            for arg in expr.args:
                if arg.keyword is not None:
                    entries[arg.keyword.value] = arg.value
                elif arg.star == "**":
                    inner = self.dict_entries(arg.value, depth + 1)
                    if inner is None:
                        return None
                    entries.update(inner)
                else:
                    return None
            return entries
        return None

    # -- cases ------------------------------------------------------------------------
    def _resolve(self, expr: cst.BaseExpression, depth: int) -> Value | None:
        if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary)):
            return Value(expr.evaluated_value, expr)
        if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
            evaluated = expr.evaluated_value
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
            return Value(_ARITHMETIC[type(expr.operator)](left.value, right.value), expr, "expression")
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
        return None

    def _resolve_name(self, name: cst.Name, depth: int) -> Value | None:
        if name.value in self.ctx.declared_global:
            return None
        value = self.ctx.single_assignment(name)
        if value is None:
            return None
        resolved = self.resolve(value, depth + 1)
        if resolved is None:
            return None
        origin = resolved.origin if resolved.origin != "literal" else "constant"
        return Value(resolved.value, resolved.node, origin)

    def _resolve_subscript(self, expr: cst.Subscript, depth: int) -> Value | None:
        if len(expr.slice) != 1 or not isinstance(expr.slice[0].slice, cst.Index):
            return None
        key = self.resolve(expr.slice[0].slice.value, depth + 1)
        if key is None or not isinstance(key.value, str):
            return None
        entries = self.dict_entries(expr.value, depth + 1)
        if entries is None or key.value not in entries:
            return None
        resolved = self.resolve(entries[key.value], depth + 1)
        if resolved is None:
            return None
        return Value(resolved.value, resolved.node, "dict entry")

    # -- argparse -----------------------------------------------------------------------
    def _resolve_attribute(self, expr: cst.Attribute, depth: int) -> Value | None:
        if not isinstance(expr.value, cst.Name):
            return None
        namespace = expr.value.value
        dest = expr.attr.value
        if self.ctx.attribute_assignments.get(f"{namespace}.{dest}"):
            return None
        if not self._is_argparse_namespace(expr.value, dest):
            return None
        return self._argparse_default(dest, depth)

    def _is_argparse_namespace(self, name: cst.Name, dest: str) -> bool:
        for binding in self.ctx.lookup(name.value, name):
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
                if self.ctx.attribute_assignments.get(f"{returned.value}.{dest}"):
                    return False
                returned = self.ctx.single_assignment(returned)
            if not (
                isinstance(returned, cst.Call)
                and _method_name(returned) == "parse_args"
                and not returned.args
            ):
                return False
        return True

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


def _method_name(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _argparse_dest(call: cst.Call) -> str | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dest":
            return arg.value.evaluated_value if isinstance(arg.value, cst.SimpleString) else None
    options = [
        arg.value.evaluated_value
        for arg in call.args
        if arg.keyword is None and not arg.star and isinstance(arg.value, cst.SimpleString)
    ]
    if not options:
        return None
    long_options = [o for o in options if o.startswith("--")]
    chosen = long_options[0][2:] if long_options else options[0].lstrip("-")
    return chosen.replace("-", "_")
