"""Line and column of any node, as LibCST's ``PositionProvider`` reports them, for a fraction
of the cost.

``PositionProvider`` regenerates the whole file and tracks lines and columns token by token.
advisor needs positions only for the nodes it reports, usually a few statements per file, so
it regenerates only the innermost statement that holds the node:

- A statement in a block (the module's body or an indented block) starts its generated code
  at the start of a line: its leading blank lines and comments, its indentation, its tokens.
  Python's own parser (``ast``, in C, a tenth of LibCST's time) says on which line the
  statement's first token is; walking LibCST's and ``ast``'s statement lists side by side
  gives that line to every LibCST statement.
- The statement's code is generated alone, with the indentation of its enclosing blocks,
  recording each node's character range, and is **checked against the source text** at the
  offset the line gives. Only a match is used; anything else (code ``ast`` cannot parse on
  this Python, lists that do not line up, a line continuation before the first token) falls
  back to regenerating the whole file, which is always right.
"""
from __future__ import annotations

import ast
import bisect
import dataclasses
import re
import warnings
from contextlib import contextmanager
from typing import Iterator, Sequence

import libcst as cst
from libcst._nodes.internal import CodegenState

_NEWLINE = re.compile(r"\r\n?|\n")

Range = tuple[int, int]
# A statement's first-token line, the indentation of its enclosing blocks, and how many whole
# lines (its leading blank lines and comments, those of its first decorator) its code emits first.
Anchor = tuple[int, tuple[str, ...], int]

_COMPOUND: dict[type, tuple[type, ...]] = {
    cst.If: (ast.If,),
    cst.For: (ast.For, ast.AsyncFor),
    cst.While: (ast.While,),
    cst.Try: (ast.Try,),
    cst.With: (ast.With, ast.AsyncWith),
    cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef),
    cst.ClassDef: (ast.ClassDef,),
}
if hasattr(ast, "Match"):
    _COMPOUND[cst.Match] = (ast.Match,)
if hasattr(ast, "TryStar"):
    _COMPOUND[cst.TryStar] = (ast.TryStar,)


class Positions:
    """Character ranges of nodes, computed on demand and turned into lines and columns."""

    def __init__(self, source: str, module: cst.Module, parent: dict[cst.CSTNode, cst.CSTNode]) -> None:
        self.source = source
        self.module = module
        self.parent = parent
        self.ranges: dict[cst.CSTNode, Range] = {}
        self._whole_file_done = False
        self._anchors: dict[cst.CSTNode, Anchor] | None = None
        self._line_starts: list[int] | None = None

    def of(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """1-based line and column of the start and end of ``node`` (its syntactic extent,
        without the whitespace it owns)."""
        start, end = self.range(node)
        return (*self.line_column(start), *self.line_column(end))

    def line_column(self, offset: int) -> tuple[int, int]:
        """1-based line and column of a character offset of the source."""
        line_starts = self.line_starts
        line = bisect.bisect_right(line_starts, offset)
        return line, offset - line_starts[line - 1] + 1

    def range(self, node: cst.CSTNode) -> Range:
        found = self.ranges.get(node)
        if found is None:
            line_statement = self._line_statement(node)
            if line_statement is None or not self._record_by_search(line_statement) or node not in self.ranges:
                statement = self._enclosing_anchor(node)
                if statement is not None:
                    recorded = self._record_statement(statement)
                else:  # a comment above the first statement or below the last (a licence header)
                    recorded = self._record_header_and_footer()
                if not recorded or node not in self.ranges:
                    self._record_whole_file()
            found = self.ranges[node]
        return found

    @property
    def line_starts(self) -> list[int]:
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in _NEWLINE.finditer(self.source)]
        return self._line_starts

    # -- regenerating code ---------------------------------------------------------------
    def _new_state(self) -> "_OffsetRecordingState":
        return _OffsetRecordingState(default_indent=self.module.default_indent, default_newline=self.module.default_newline)

    def _record_whole_file(self) -> None:
        if self._whole_file_done:
            return
        state = self._new_state()
        self.module._codegen(state)
        self.ranges.update(state.ranges)
        self._whole_file_done = True

    def _record_header_and_footer(self) -> bool:
        """Regenerate the module's leading and trailing lines, which open and close the file;
        False if their code does not match the source there."""
        state = self._new_state()
        for line in self.module.header:
            line._codegen(state)
        if not self.source.startswith("".join(state.tokens)):
            return False
        footer = self._new_state()
        for line in self.module.footer:
            line._codegen(footer)
        code = "".join(footer.tokens)
        if not self.source.endswith(code):
            return False
        shift = len(self.source) - len(code)
        self.ranges.update(state.ranges)
        self.ranges.update({node: (start + shift, end + shift) for node, (start, end) in footer.ranges.items()})
        return True

    def _record_by_search(self, statement: cst.CSTNode) -> bool:
        """Regenerate one statement and find its code in the source: where it occurs once, at the
        start of a line, that is where the statement is (it cannot be elsewhere), and Python's
        parser need not be asked for lines. False where it occurs twice or not at all."""
        state = self._new_state()
        state.indent_tokens = list(self._indents(statement))
        statement._codegen(state)
        code = "".join(state.tokens)
        start = self.source.find(code) if code else -1
        if start < 0 or (start and self.source[start - 1] not in "\r\n") or self.source.find(code, start + 1) >= 0:
            return False
        self.ranges.update({node: (begin + start, end + start) for node, (begin, end) in state.ranges.items()})
        return True

    def _line_statement(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The innermost statement around ``node`` that starts a line of its own (in the module's
        body or an indented block), None for a node outside every statement."""
        current: cst.CSTNode | None = node
        parent = self.parent
        while current is not None:
            holder = parent.get(current)
            if isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and (
                isinstance(holder, (cst.Module, cst.IndentedBlock))
            ):
                return current
            current = holder
        return None

    def _indents(self, statement: cst.CSTNode) -> tuple[str, ...]:
        """The indentation of the blocks around ``statement``, outermost first."""
        found: list[str] = []
        current = self.parent.get(statement)
        while current is not None:
            if isinstance(current, cst.IndentedBlock):
                found.append(current.indent if current.indent is not None else self.module.default_indent)
            current = self.parent.get(current)
        return tuple(reversed(found))

    def _record_statement(self, statement: cst.CSTNode) -> bool:
        """Regenerate one statement where the source says it is; False if the code does not
        match the source there."""
        line, indents, lines_before = self.anchors[statement]
        first_line = line - lines_before
        if not 1 <= first_line <= len(self.line_starts):
            return False
        state = self._new_state()
        state.indent_tokens = list(indents)
        state.offset = start = self.line_starts[first_line - 1]
        statement._codegen(state)
        if not self.source.startswith("".join(state.tokens), start):
            return False
        self.ranges.update(state.ranges)
        return True

    # -- where statements start ------------------------------------------------------------
    def _enclosing_anchor(self, node: cst.CSTNode) -> cst.CSTNode | None:
        anchors = self.anchors
        current: cst.CSTNode | None = node
        while current is not None:
            if current in anchors:
                return current
            current = self.parent.get(current)
        return None

    @property
    def anchors(self) -> dict[cst.CSTNode, Anchor]:
        if self._anchors is None:
            self._anchors = _statement_anchors(self.source, self.module)
        return self._anchors


class _Misaligned(Exception):
    """LibCST's and ``ast``'s statements do not line up: use no anchor at all."""


def _statement_anchors(source: str, module: cst.Module) -> dict[cst.CSTNode, Anchor]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like: not ours to report
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    anchors: dict[cst.CSTNode, Anchor] = {}
    try:
        _walk_statements(module.body, tree.body, (), module.default_indent, anchors)
    except (_Misaligned, RecursionError):
        return {}
    return anchors


def _walk_statements(
    statements: Sequence[cst.BaseStatement], nodes: list[ast.stmt], indents: tuple[str, ...], default_indent: str, anchors: dict
) -> None:
    index = 0
    for statement in statements:
        if index >= len(nodes):
            raise _Misaligned
        node = nodes[index]
        if isinstance(statement, cst.SimpleStatementLine):
            anchors[statement] = (node.lineno, indents, len(statement.leading_lines))
            index += len(statement.body)  # `a = 1; b = 2` is one line, two ast statements
            continue
        expected = _COMPOUND.get(type(statement))
        if expected is None or not isinstance(node, expected):
            raise _Misaligned
        index += 1
        line, lines_before = node.lineno, len(statement.leading_lines)
        decorators = getattr(statement, "decorators", ())
        if decorators:
            line = node.decorator_list[0].lineno  # type: ignore[attr-defined]
            lines_before += len(decorators[0].leading_lines)
        anchors[statement] = (line, indents, lines_before)
        _walk_compound(statement, node, indents, default_indent, anchors)
    if index != len(nodes):
        raise _Misaligned


def _walk_suite(suite: cst.BaseSuite, nodes: list[ast.stmt], indents: tuple[str, ...], default_indent: str, anchors: dict) -> None:
    if isinstance(suite, cst.IndentedBlock):
        indent = suite.indent if suite.indent is not None else default_indent
        _walk_statements(suite.body, nodes, (*indents, indent), default_indent, anchors)
    # a one-line suite (`if x: y`) holds no statement that starts a line of its own


def _walk_else(orelse: cst.CSTNode | None, nodes: list[ast.stmt], indents: tuple[str, ...], default_indent: str, anchors: dict) -> None:
    if orelse is None:
        if nodes:
            raise _Misaligned
    elif isinstance(orelse, cst.If):  # elif: an `if` alone in ast's orelse
        if len(nodes) != 1 or not isinstance(nodes[0], ast.If):
            raise _Misaligned
        _walk_compound(orelse, nodes[0], indents, default_indent, anchors)
    else:
        _walk_suite(orelse.body, nodes, indents, default_indent, anchors)  # type: ignore[attr-defined]


def _walk_compound(statement: cst.CSTNode, node: ast.stmt, indents: tuple[str, ...], default_indent: str, anchors: dict) -> None:
    if isinstance(statement, (cst.Try, getattr(cst, "TryStar", cst.Try))):
        _walk_suite(statement.body, node.body, indents, default_indent, anchors)  # type: ignore[attr-defined]
        handlers = node.handlers  # type: ignore[attr-defined]
        if len(statement.handlers) != len(handlers):  # type: ignore[attr-defined]
            raise _Misaligned
        for handler, handler_node in zip(statement.handlers, handlers):  # type: ignore[attr-defined]
            _walk_suite(handler.body, handler_node.body, indents, default_indent, anchors)
        _walk_else(statement.orelse, node.orelse, indents, default_indent, anchors)  # type: ignore[attr-defined]
        _walk_else(statement.finalbody, node.finalbody, indents, default_indent, anchors)  # type: ignore[attr-defined]
        return
    if hasattr(cst, "Match") and isinstance(statement, cst.Match):
        cases = node.cases  # type: ignore[attr-defined]
        if len(statement.cases) != len(cases):
            raise _Misaligned
        for case, case_node in zip(statement.cases, cases):
            _walk_suite(case.body, case_node.body, indents, default_indent, anchors)
        return
    _walk_suite(statement.body, node.body, indents, default_indent, anchors)  # type: ignore[attr-defined]
    if isinstance(statement, (cst.If, cst.For, cst.While)):
        _walk_else(statement.orelse, node.orelse, indents, default_indent, anchors)  # type: ignore[attr-defined]


@dataclasses.dataclass
class _OffsetRecordingState(CodegenState):
    """Codegen that records each node's character range, the way LibCST's
    ``PositionProvidingCodegenState`` does, but as offsets: no line bookkeeping per token,
    which makes it several times cheaper. Offsets become lines once, per finding."""

    offset: int = 0
    ranges: dict = dataclasses.field(default_factory=dict)
    starts: list = dataclasses.field(default_factory=list)

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)
        for token in self.indent_tokens:
            self.offset += len(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    def pop_trailing_newline(self) -> None:
        if self.tokens:
            self.offset -= len(self.tokens.pop())

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.starts.append(self.offset)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.starts.pop()
        if node not in self.ranges:  # a syntactic range recorded inside wins
            self.ranges[node] = (start, self.offset)

    @contextmanager
    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> Iterator[None]:
        start = self.offset
        # Not in a ``finally``: if codegen is interrupted (Ctrl-C, SIGTERM), the inner
        # nodes were never recorded and the interruption must propagate unchanged.
        yield
        end = self.offset
        if start_node is not None:
            start = self.ranges[start_node][0]
        if end_node is not None:
            end = self.ranges[end_node][1]
        self.ranges[node] = (start, end)
