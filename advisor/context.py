"""Everything rules know about one file, computed from a single parse.

The context walks the tree once and builds an index (nodes by type, parents, source
order, calls by qualified name and by method name, bindings per scope). Rules query
that index instead of walking the tree again; heavier facts (positions, the training
loop model, the value resolver) are computed lazily, once, when a rule first asks.
"""
from __future__ import annotations

import bisect
import dataclasses
import inspect
import operator
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, TypeVar

import libcst as cst

from advisor.positions import Positions
from advisor.names import STAR_IMPORT_CONVENTIONS, ImportTable, dotted_name
from advisor.targets import Target

if TYPE_CHECKING:
    from advisor.facts import Facts
    from advisor.loops import TrainingLoopModel
    from advisor.project import ProjectView
    from advisor.values import ValueResolver

N = TypeVar("N", bound=cst.CSTNode)
T = TypeVar("T")

ScopeNode = cst.CSTNode  # Module, FunctionDef, Lambda or ClassDef

_CUDA_STRING = re.compile(r"""^[rbuRBU]?(['"])(cuda(:\d+)?|gpu)\1$""")


class _Missing:
    """An argument that is certainly not passed (as opposed to unknown)."""

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING = _Missing()


@dataclass(frozen=True)
class Binding:
    """One way a name gets a value in a scope."""

    name: str
    scope: ScopeNode
    node: cst.CSTNode  # the statement or construct that binds
    value: cst.BaseExpression | None  # the assigned expression, for plain ``name = value``


# Trivia: whitespace and punctuation. The index skips them: no rule asks for their parent
# or order. The comments inside them are collected on demand (``FileContext.nodes(cst.Comment)``).
_TRIVIA = frozenset({
    cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.Newline, cst.TrailingWhitespace, cst.EmptyLine,
    cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual, cst.LeftParen, cst.RightParen,
    cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace, cst.RightCurlyBrace,
})
_SCOPES = (cst.Module, cst.FunctionDef, cst.Lambda, cst.ClassDef)
_VISITED_FIELD = re.compile(r'visit_\w+\(\s*self,\s*"(\w+)"')
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
_CHILD_GETTERS: dict[type, "Callable[[cst.CSTNode], tuple]"] = {}
# A field value that is not a node to walk: trivia, an absent optional child.
_NOT_A_CHILD = _TRIVIA | {type(None), cst.MaybeSentinel}


def _child_fields(node_type: type) -> tuple[str, ...]:
    """The fields of ``node_type`` that hold child nodes, in source order.

    LibCST's own traversal rebuilds every node it visits, which is most of the cost of a
    visitor; reading the fields directly is several times faster. The source order is the
    order in which the node's ``_visit_and_replace_children`` visits them."""
    fields = _CHILD_FIELDS.get(node_type)
    if fields is None:
        try:
            source = inspect.getsource(node_type._visit_and_replace_children)
            fields = tuple(dict.fromkeys(_VISITED_FIELD.findall(source)))
        except (OSError, TypeError):  # no source shipped: declaration order is nearly as good
            fields = tuple(f.name for f in dataclasses.fields(node_type))
        _CHILD_FIELDS[node_type] = fields
    return fields


def _build_index(ctx: "FileContext", module: cst.Module) -> None:
    """One pre-order walk that fills the context's index (parents, order, nodes by type,
    scopes, bindings, calls); iterative, so deep nesting cannot exhaust the stack.

    The stack holds ``(node, parent, scope)`` tuples for nodes to enter and the bare node where
    its subtree ends. This walk is a tenth of a check's time, so it reads child fields inline."""
    parent, order, end_order, by_type, scope_of = ctx.parent, ctx.order, ctx.end_order, ctx.by_type, ctx.scope_of
    calls_by_qualname, calls_by_method, imports = ctx._calls_by_qualname, ctx._calls_by_method, ctx.imports
    getters, trivia, not_a_child = _CHILD_GETTERS, _TRIVIA, _NOT_A_CHILD
    stack: list = [(module, None, module)]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        if item.__class__ is not tuple:
            end_order[item] = len(order) - 1
            continue
        node, parent_node, scope = item
        node_type = node.__class__
        if parent_node is not None:
            parent[node] = parent_node
        order[node] = len(order)
        by_type[node_type].append(node)
        if node_type is cst.Call:
            qualname = imports.qualname(node.func)
            if qualname:
                calls_by_qualname[qualname].append(node)
            if node.func.__class__ is cst.Attribute:
                calls_by_method[node.func.attr.value].append(node)
        elif node_type in _SCOPES:
            if node_type is not cst.Module and node_type is not cst.Lambda:
                ctx._bind(node.name.value, scope, node, None)
            scope = node
        elif node_type in _BINDERS:
            _BINDERS[node_type](ctx, node, scope)
        elif node_type is cst.SimpleString:
            if _CUDA_STRING.match(node.value):
                ctx._cuda_strings.append(node)
        scope_of[node] = scope
        push(node)
        getter = getters.get(node_type)
        if getter is None:
            getter = _child_getter(node_type)
        for value in reversed(getter(node)):
            value_type = value.__class__
            if value_type is tuple or value_type is list:
                for child in reversed(value):
                    if child.__class__ not in trivia:
                        push((child, node, scope))
            elif value_type not in not_a_child:
                push((value, node, scope))


def _child_getter(node_type: type) -> Callable[[cst.CSTNode], tuple]:
    """A function giving the values of ``node_type``'s child fields, as a tuple, in source order."""
    fields = _child_fields(node_type)
    if len(fields) > 1:
        getter = operator.attrgetter(*fields)
    elif fields:
        one = operator.attrgetter(fields[0])
        getter = lambda node: (one(node),)  # noqa: E731
    else:
        getter = lambda node: ()  # noqa: E731
    _CHILD_GETTERS[node_type] = getter
    return getter


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The node's children in source order."""
    getter = _CHILD_GETTERS.get(node.__class__) or _child_getter(node.__class__)
    children: list[cst.CSTNode] = []
    for value in getter(node):
        value_type = value.__class__
        if value_type is list or value_type is tuple:
            children.extend(value)
        elif value is not None and value_type is not cst.MaybeSentinel:
            children.append(value)
    return children


def _comments(module: cst.Module, parent: dict[cst.CSTNode, cst.CSTNode]) -> list[cst.Comment]:
    """Every comment, in source order. Comments live in whitespace, which the index skips: each
    is given the nearest indexed node above it as its parent (so that positioning a ``# noqa``
    regenerates its statement, not the whole file)."""
    found: list[cst.Comment] = []
    stack: list[tuple[cst.CSTNode, cst.CSTNode]] = [(module, module)]
    while stack:
        node, owner = stack.pop()
        if node.__class__ is cst.Comment:
            found.append(node)  # type: ignore[arg-type]
            parent[node] = owner
        else:
            if node in parent:
                owner = node
            stack.extend((child, owner) for child in reversed(_children(node)))
    return found


def _bind_import(ctx: "FileContext", node: cst.Import | cst.ImportFrom, scope: ScopeNode) -> None:
    ctx.imports.add(node)
    if isinstance(node, cst.ImportFrom) and isinstance(node.names, cst.ImportStar):
        return
    for alias in node.names:  # type: ignore[union-attr]
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            local = alias.asname.name.value
        else:
            local = (dotted_name(alias.name) or "").split(".")[0]
        if local:
            ctx._bind(local, scope, node, None)


def _bind_target(
    ctx: "FileContext", target: cst.BaseExpression, node: cst.CSTNode, value: cst.BaseExpression | None, scope: ScopeNode
) -> None:
    if isinstance(target, cst.Name):
        ctx._bind(target.value, scope, node, value)
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            inner = element.value
            if isinstance(inner, cst.StarredElement):
                inner = inner.value
            _bind_target(ctx, inner, node, None, scope)
    elif isinstance(target, cst.StarredElement):
        _bind_target(ctx, target.value, node, None, scope)
    elif isinstance(target, cst.Attribute):
        name = dotted_name(target.value)
        if name is not None:
            ctx.attribute_assignments[f"{name}.{target.attr.value}"].append(node)


def _bind_assign(ctx: "FileContext", node: cst.Assign, scope: ScopeNode) -> None:
    for target in node.targets:
        _bind_target(ctx, target.target, node, node.value if len(node.targets) == 1 else None, scope)


def _bind_global(ctx: "FileContext", node: cst.Global | cst.Nonlocal, scope: ScopeNode) -> None:
    for item in node.names:
        ctx.declared_global.add(item.name.value)


def _bind_with_item(ctx: "FileContext", node: cst.WithItem, scope: ScopeNode) -> None:
    if node.asname is not None:
        _bind_target(ctx, node.asname.name, node, None, scope)


# How each binding construct adds to the scope it appears in.
_BINDERS = {
    cst.Import: _bind_import,
    cst.ImportFrom: _bind_import,
    cst.Assign: _bind_assign,
    cst.AnnAssign: lambda ctx, node, scope: _bind_target(ctx, node.target, node, node.value, scope),
    cst.AugAssign: lambda ctx, node, scope: _bind_target(ctx, node.target, node, None, scope),
    cst.For: lambda ctx, node, scope: _bind_target(ctx, node.target, node, None, scope),
    cst.CompFor: lambda ctx, node, scope: _bind_target(ctx, node.target, node, None, scope),
    cst.WithItem: _bind_with_item,
    cst.NamedExpr: lambda ctx, node, scope: _bind_target(ctx, node.target, node, node.value, scope),
    cst.Param: lambda ctx, node, scope: ctx._bind(node.name.value, scope, node, None),
    cst.Global: _bind_global,
    cst.Nonlocal: _bind_global,
}


# What a context derives from its tree and keeps (cached properties holding a reference back).
_DERIVED = ("values", "loops", "facts", "_positions")


class FileContext:
    """One parsed file, its index and the shared resolvers. Built once per file."""

    def __init__(self, path: str, source: str, module: cst.Module, target: Target) -> None:
        self.path = path
        self.source = source
        self.module = module
        self.target = target
        self.imports = ImportTable()
        self.parent: dict[cst.CSTNode, cst.CSTNode] = {}
        self.order: dict[cst.CSTNode, int] = {}  # pre-order index: a subtree is a contiguous range
        self.end_order: dict[cst.CSTNode, int] = {}
        self.scope_of: dict[cst.CSTNode, ScopeNode] = {}
        self.by_type: dict[type, list[cst.CSTNode]] = defaultdict(list)
        self.bindings: dict[tuple[int, str], list[Binding]] = defaultdict(list)
        self.declared_global: set[str] = set()
        self.attribute_assignments: dict[str, list[cst.CSTNode]] = defaultdict(list)
        self._calls_by_qualname: dict[str, list[cst.Call]] = defaultdict(list)
        self._calls_by_method: dict[str, list[cst.Call]] = defaultdict(list)
        self._cuda_strings: list[cst.SimpleString] = []
        self._order_key_cache: dict[type, list[int]] = {}
        self._qualnames: dict[cst.CSTNode, str | None] = {}
        self._memo: dict[object, object] = {}
        self._check_memo: dict[object, object] = {}
        # The project the file belongs to (its sibling modules), when the engine knows it.
        self.project: "ProjectView | None" = None
        # Imports bind names before the calls that use them may be visited (imports
        # inside functions, or below a helper), so collect them first.
        for node in _top_level_imports(module):
            self.imports.add(node)
        _build_index(self, module)
        self._resolve_star_imports()

    def release_caches(self) -> None:
        """Drop what was derived from the tree (facts, resolvers, memos): they point back at the
        context, and a context that must wait for the cycle collector to be freed is walked by
        every full collection until then. Whoever still holds the context gets them recomputed."""
        self._memo.clear()
        self._check_memo.clear()
        for name in _DERIVED:
            self.__dict__.pop(name, None)

    def memo_for_this_check(self, key: object, compute: "Callable[[], T]") -> "T":
        """Like :meth:`memo`, for an answer that depends on files beyond the project's Python
        code (its requirements, READMEs, CI configuration): kept until the engine checks this
        context again (:meth:`begin_check`), since a context kept for its siblings outlives a
        change to those files."""
        try:
            return self._check_memo[key]  # type: ignore[return-value]
        except KeyError:
            value = self._check_memo[key] = compute()
            return value

    def begin_check(self) -> None:
        """A new check of this context starts: forget the answers of :meth:`memo_for_this_check`."""
        self._check_memo.clear()

    def memo(self, key: object, compute: "Callable[[], T]") -> "T":
        """A fact about this file that rules share, computed once. It lives and dies with the
        context: a module-level cache keyed by the context keeps every file's tree alive as
        soon as a cached value refers back to the context."""
        try:
            return self._memo[key]  # type: ignore[return-value]
        except KeyError:
            value = self._memo[key] = compute()
            return value

    def texts_with(self, pattern: "re.Pattern[bytes]", hint: bytes | None = None) -> "Iterator[tuple[str, bytes]]":
        """This file (as it reads now, earlier fixes included) when its text has ``pattern``,
        then every other Python file or YAML config of the project whose text has it, each with
        its text. ``hint``: a literal every match contains (:meth:`Project.texts_matching`)."""
        here = self.source.encode()
        if (hint is None or hint in here) and pattern.search(here):
            yield self.path, here
        if self.project is None:
            return
        mine = os.path.abspath(self.path)
        for path in self.project.texts_matching(pattern, hint):
            if os.path.abspath(path) != mine:
                yield path, self.project.project.text(path)

    @classmethod
    def from_source(cls, path: str, source: str, target: Target) -> "FileContext":
        return cls(path, source, cst.parse_module(source), target)

    def _resolve_star_imports(self) -> None:
        """``torch`` read but never bound, next to ``from utils.utils import *``: it comes from the
        star import, as the torch module. Calls are indexed again through the new aliases."""
        if not self.imports.star_modules:
            return
        bound = {name for _, name in self.bindings}
        read = {
            n.value
            for n in self.nodes(cst.Name)
            if n.value in STAR_IMPORT_CONVENTIONS and n.value not in bound and self.is_read(n)
        }
        if not self.imports.assume_star_exports(read):
            return
        self._calls_by_qualname.clear()
        for call in self.nodes(cst.Call):
            qualname = self.imports.qualname(call.func)
            if qualname:
                self._calls_by_qualname[qualname].append(call)

    # -- index queries -------------------------------------------------------------
    def _bind(self, name: str, scope: ScopeNode, node: cst.CSTNode, value: cst.BaseExpression | None) -> None:
        self.bindings[(id(scope), name)].append(Binding(name, scope, node, value))

    def nodes(self, node_type: type[N]) -> list[N]:
        if node_type is cst.Comment:
            return self._comments  # type: ignore[return-value]
        return self.by_type.get(node_type, [])  # type: ignore[return-value]

    @cached_property
    def _comments(self) -> list[cst.Comment]:
        return _comments(self.module, self.parent)

    def comments_matching(self, pattern: re.Pattern[str]) -> list[cst.Comment]:
        """The comments ``pattern`` finds something in. Collecting comments walks the whole
        tree, so the source text is searched first: in most files it holds no match at all."""
        if not pattern.search(self.source):
            return []
        return [comment for comment in self.nodes(cst.Comment) if pattern.search(comment.value)]

    def calls(self, *qualnames: str) -> list[cst.Call]:
        """Calls whose callee resolves to one of ``qualnames``, in source order."""
        found: list[cst.Call] = []
        for qualname in qualnames:
            found.extend(self._calls_by_qualname.get(qualname, ()))
        return sorted(found, key=self.order.__getitem__) if len(qualnames) > 1 else found

    def calls_with_prefix(self, prefix: str) -> list[cst.Call]:
        found = [c for q, cs in self._calls_by_qualname.items() if q.startswith(prefix) for c in cs]
        return sorted(found, key=self.order.__getitem__)

    @property
    def called_qualnames(self) -> Iterable[str]:
        """The qualified name of every callee the file calls (through its imports), once each."""
        return self._calls_by_qualname.keys()

    def method_calls(self, *methods: str) -> list[cst.Call]:
        """Calls of the form ``<anything>.method(...)``, in source order."""
        found: list[cst.Call] = []
        for method in methods:
            found.extend(self._calls_by_method.get(method, ()))
        return sorted(found, key=self.order.__getitem__) if len(methods) > 1 else found

    def qualname(self, node: cst.BaseExpression) -> str | None:
        # Rules ask for the same callees over and over; the imports are final once indexed.
        try:
            return self._qualnames[node]
        except KeyError:
            found = self._qualnames[node] = self.imports.qualname(node)
            return found

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent.get(node)
        while current is not None:
            yield current
            current = self.parent.get(current)

    def enclosing(self, node: cst.CSTNode, *types: type) -> cst.CSTNode | None:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, types):
                return ancestor
        return None

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The simple or compound statement that contains ``node``."""
        current: cst.CSTNode | None = node
        while current is not None and not isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            current = self.parent.get(current)
        return current

    def is_descendant(self, node: cst.CSTNode, ancestor: cst.CSTNode) -> bool:
        return self.order[ancestor] < self.order[node] <= self.end_order[ancestor]

    def walk(self, root: cst.CSTNode, node_type: type[N]) -> list[N]:
        """Nodes of ``node_type`` under ``root`` (inclusive), in source order, from the index."""
        nodes = self.nodes(node_type)
        keys = self._order_keys(node_type)
        start = bisect.bisect_left(keys, self.order[root])
        end = bisect.bisect_right(keys, self.end_order[root])
        return nodes[start:end]

    def within(self, root: cst.CSTNode, nodes: Sequence[N]) -> list[N]:
        """Those of ``nodes`` that lie under ``root``."""
        return [n for n in nodes if n is root or self.is_descendant(n, root)]

    def _order_keys(self, node_type: type) -> list[int]:
        keys = self._order_key_cache.get(node_type)
        if keys is None:
            keys = self._order_key_cache[node_type] = [self.order[n] for n in self.nodes(node_type)]
        return keys

    def lookup(self, name: str, at: cst.CSTNode) -> list[Binding]:
        """Bindings of ``name`` visible at ``at``: the innermost function that binds it, else the module."""
        scope = self.scope_of.get(at)
        while scope is not None:
            if not isinstance(scope, cst.ClassDef) or scope is self.scope_of.get(at):
                found = self.bindings.get((id(scope), name))
                if found and not (name in self.declared_global and scope is not self.module):
                    return found
            if scope is self.module:
                break
            scope = self.scope_of.get(self.parent.get(scope, self.module), self.module)
        return []

    def assignments_to_attribute(self, *names: str) -> list[cst.CSTNode]:
        """The statements assigning an attribute of one of ``names`` on anything
        (``args.gradient_checkpointing_kwargs = ...``, ``params.collate_fn = collate_dgl``)."""
        return [
            node
            for key, nodes in self.attribute_assignments.items()
            if key.rsplit(".", 1)[-1] in names
            for node in nodes
        ]

    def single_assignment(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value of ``name`` if it is bound exactly once, by ``name = value``."""
        bindings = self.lookup(name.value, name)
        if len(bindings) == 1 and bindings[0].value is not None:
            return bindings[0].value
        return None

    def assigned_name(self, node: cst.CSTNode) -> str | None:
        """The plain name ``node`` is assigned to on its own (``trainer = Trainer(...)``); None
        for a tuple, an attribute, several targets, or a value not assigned at all."""
        parent = self.parent.get(node)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
            return parent.targets[0].target.value
        return None

    def parameter_of(self, name: cst.Name) -> tuple[cst.Param, cst.FunctionDef, int] | None:
        """The positional parameter ``name`` is bound to, its function, and the position a caller
        passes it at (``self`` taken off for a method of a class body); None for anything else
        (a local, a keyword-only or ``*args`` parameter, a name bound more than once)."""
        bindings = self.lookup(name.value, name)
        if len(bindings) != 1 or not isinstance(bindings[0].node, cst.Param):
            return None
        param = bindings[0].node
        function = self.enclosing(param, cst.FunctionDef)
        if not isinstance(function, cst.FunctionDef) or param not in function.params.params:
            return None
        method = isinstance(self.enclosing(function, cst.ClassDef, cst.FunctionDef), cst.ClassDef)
        return param, function, list(function.params.params).index(param) - (1 if method else 0)

    def outermost_definition(self, node: cst.CSTNode) -> "cst.FunctionDef | cst.ClassDef | None":
        """The outermost ``def`` or ``class`` around ``node``; None at module level."""
        outermost = None
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                outermost = ancestor
        return outermost

    def passed_positions(self, function: cst.FunctionDef) -> dict[str, int | None]:
        """``function``'s parameters by name, each with the position a caller passes it at
        (``self`` taken off for a method of a class body); None for a keyword-only parameter
        and for ``self`` itself."""
        method = isinstance(self.enclosing(function, cst.ClassDef, cst.FunctionDef), cst.ClassDef)
        offset = 1 if method else 0
        positions: dict[str, int | None] = {
            p.name.value: (i - offset if i >= offset else None) for i, p in enumerate(function.params.params)
        }
        positions.update({p.name.value: None for p in function.params.kwonly_params})
        return positions

    def bound_call(self, expr: cst.BaseExpression, *qualnames: str) -> cst.Call | None:
        """The constructor call behind a name (``opt = torch.optim.AdamW(...)``), if it is one of ``qualnames``."""
        if isinstance(expr, cst.Name):
            value = self.single_assignment(expr)
            if isinstance(value, cst.Call) and (not qualnames or self.qualname(value.func) in qualnames):
                return value
        elif isinstance(expr, cst.Call) and (not qualnames or self.qualname(expr.func) in qualnames):
            return expr
        return None

    def base_qualnames(self, cls: cst.ClassDef, depth: int = 0) -> list[str]:
        """Qualified names of the library classes ``cls`` derives from, through the base
        classes the file defines itself (``class MyArgs(TrainingArguments)``, a subclass of it)."""
        found: list[str] = []
        if depth > 4:
            return found
        for base in cls.bases:
            if base.keyword is not None:
                continue  # ``metaclass=...``
            qualname = self.qualname(base.value)
            if qualname:
                found.append(qualname)
            elif isinstance(base.value, cst.Name):
                bindings = self.lookup(base.value.value, base.value)
                if len(bindings) == 1 and isinstance(bindings[0].node, cst.ClassDef):
                    found.extend(self.base_qualnames(bindings[0].node, depth + 1))
        return found

    # -- arguments -----------------------------------------------------------------
    def argument(
        self, call: cst.Call, keyword: str, position: int | None = None
    ) -> cst.BaseExpression | _Missing | None:
        """The expression passed for a parameter: the node, MISSING if certainly absent,
        or None if it may be passed in a way we cannot see (``*args``, unresolved ``**kw``).
        A keyword written out is authoritative: Python rejects a second value for it."""
        explicit = self.keyword_arg(call, keyword)
        if explicit is not None:
            return explicit.value
        positional = 0
        for arg in call.args:
            if arg.keyword is not None:
                if arg.keyword.value == keyword:
                    return arg.value
            elif arg.star == "*":
                if position is not None and positional <= position:
                    return None
            elif arg.star == "**":
                entry = self.values.dict_entry(arg.value, keyword)
                if entry is None:
                    return None
                if entry is not MISSING:
                    return entry
            else:
                if position is not None and positional == position:
                    return arg.value
                positional += 1
        return MISSING

    def keyword_arg(self, call: cst.Call, keyword: str) -> cst.Arg | None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == keyword:
                return arg
        return None

    # -- shared resolvers ----------------------------------------------------------
    @cached_property
    def values(self) -> "ValueResolver":
        from advisor.values import ValueResolver

        return ValueResolver(self)

    @cached_property
    def loops(self) -> "TrainingLoopModel":
        from advisor.loops import TrainingLoopModel

        return TrainingLoopModel(self)

    @cached_property
    def facts(self) -> "Facts":
        from advisor.facts import Facts

        return Facts(self)

    @cached_property
    def _positions(self) -> Positions:
        return Positions(self.source, self.module, self.parent)

    def position(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """1-based line and column of the start and end of ``node``, as LibCST's
        ``PositionProvider`` reports them (syntactic extent, without owned whitespace)."""
        return self._positions.of(node)

    def span(self, node: cst.CSTNode) -> tuple[int, int]:
        """Character offsets in :attr:`source` of ``node``'s syntactic extent (as :meth:`position`)."""
        return self._positions.range(node)

    def line_column(self, offset: int) -> tuple[int, int]:
        """1-based line and column of a character offset in :attr:`source`."""
        return self._positions.line_column(offset)

    # -- facts about the whole file -------------------------------------------------
    @cached_property
    def main_guards(self) -> list[cst.If]:
        """The module-level ``if __name__ == "__main__":`` statements."""
        return [s for s in self.module.body if isinstance(s, cst.If) and _is_main_test(s.test)]

    @cached_property
    def has_main_guard(self) -> bool:
        """``if __name__ == "__main__":`` at module level (safe for spawned DataLoader workers)."""
        return bool(self.main_guards)

    def runs_on_import(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` runs when the module is imported: outside any function and
        outside the body of the ``__main__`` guard (spawned worker processes re-import
        the main module, so such code runs again in each of them)."""
        if self.enclosing(node, cst.FunctionDef, cst.Lambda) is not None:
            return False
        return not any(node is g.body or self.is_descendant(node, g.body) for g in self.main_guards)

    # -- building code in the file's own style -------------------------------------------
    def reference(self, qualname: str, at: cst.CSTNode | None = None) -> tuple[cst.BaseExpression, tuple[str, ...]]:
        """An expression for ``qualname`` where ``at`` runs (module level when None), using the
        file's imports (``import torch as T`` stays ``T``), and the module the fixer must import
        when the import the file has does not reach ``at`` (``import torch`` inside another
        function) or there is none."""
        local = self.imports.local_name_for(qualname)
        if local is not None and self.imported_at(local.split(".")[0], self.module if at is None else at):
            return cst.parse_expression(local), ()
        module = qualname.split(".")[0]
        return cst.parse_expression(qualname), (module,)

    def imported_at(self, name: str, at: cst.CSTNode) -> bool:
        """Whether every binding of ``name`` that reaches ``at`` imports what the file's import
        table says ``name`` is: the table is file-wide, and two functions may import different
        things under one name (``from torch.cuda.amp import GradScaler`` in one, ``from
        torch.amp import GradScaler`` in another)."""
        bindings = self.lookup(name, at)
        for binding in bindings:
            if not isinstance(binding.node, (cst.Import, cst.ImportFrom)):
                return False
            table = ImportTable()
            table.add(binding.node)
            if table.aliases.get(name) != self.imports.aliases.get(name):
                return False
        if bindings and self.enclosing(at, cst.FunctionDef, cst.Lambda, cst.ClassDef) is None:
            # Module-level code runs in order: an import further down (a notebook's later cell)
            # is not bound yet where a statement goes after the first imports.
            line = self.position(at)[0]
            return any(self.position(binding.node)[0] <= line for binding in bindings)
        return bool(bindings)

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def snippet(self, node: cst.CSTNode, limit: int = 40) -> str:
        """``node``'s code on one line, cut to ``limit`` characters with ``...``: for messages."""
        text = " ".join(self.code(node).split())
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def is_read(self, name: cst.Name) -> bool:
        """Whether this occurrence of a name loads a variable: not the ``attr`` of ``x.attr``, a
        keyword's name, an assignment or annotated-assignment target, a parameter, the name of a
        ``def`` / ``class``, or a name in an import. ``x += 1`` loads ``x``."""
        parent = self.parent.get(name)
        if isinstance(parent, cst.Attribute):
            return parent.value is name
        if isinstance(parent, cst.Arg):
            return parent.keyword is not name
        if isinstance(parent, cst.AnnAssign):
            return parent.target is not name
        return not isinstance(
            parent, (cst.AssignTarget, cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias, cst.AsName, cst.ImportFrom)
        )


def _is_main_test(test: cst.BaseExpression) -> bool:
    from advisor.values import string_value  # values builds on this module

    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    left, right = test.left, test.comparisons[0].comparator
    names = {dotted_name(left), dotted_name(right)}
    strings = {
        string_value(n) for n in (left, right) if isinstance(n, cst.SimpleString)
    }
    return "__name__" in names and "__main__" in strings


def _top_level_imports(module: cst.Module) -> Iterable[cst.Import | cst.ImportFrom]:
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    yield small
