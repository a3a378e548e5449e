"""Small, formatting-preserving builders for rule fixes.

Each returns a new node built from an original one; rules wrap them in
:class:`advisor.rule.Edit`. Commas, line breaks and comments of the original call
are kept, so a fix changes only what it must.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import libcst as cst

from advisor.rule import Edit

if TYPE_CHECKING:
    from advisor.context import FileContext

_NO_SPACE = cst.SimpleWhitespace("")


def keyword_arg(name: str, value: cst.BaseExpression | str) -> cst.Arg:
    if isinstance(value, str):
        value = cst.parse_expression(value)
    return cst.Arg(
        keyword=cst.Name(name),
        value=value,
        equal=cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE),
    )


def set_keyword(call: cst.Call, name: str, value: cst.BaseExpression | str) -> cst.Call:
    """``call`` with ``name=value``: replaces the keyword's value if present, else appends it."""
    if isinstance(value, str):
        value = cst.parse_expression(value)
    for index, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == name:
            args = list(call.args)
            args[index] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    return append_args(call, [keyword_arg(name, value)])


def append_args(call: cst.Call, new_args: Sequence[cst.Arg]) -> cst.Call:
    """Append arguments, following the call's layout (one line, or one argument a line)."""
    args = list(call.args)
    new_args = list(new_args)
    if not new_args:
        return call
    # Keyword arguments must come before ``**kwargs``; positional order is kept otherwise.
    insert_at = len(args)
    while insert_at > 0 and args[insert_at - 1].star == "**":
        insert_at -= 1
    if not args:
        return call.with_changes(args=new_args)
    if insert_at < len(args):
        # Before ``**kwargs``: take the separator that precedes it, so that a call written
        # one argument a line stays that way.
        previous = args[insert_at - 1].comma if insert_at > 0 else None
        separator = (
            _without_comment(previous)
            if isinstance(previous, cst.Comma)
            else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
        for i, arg in enumerate(new_args):
            new_args[i] = arg.with_changes(comma=separator)
        return call.with_changes(args=args[:insert_at] + new_args + args[insert_at:])
    last = args[-1]
    previous = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else None
    if isinstance(last.comma, cst.Comma):
        # Trailing comma: usually one argument per line. Reuse the separator between
        # earlier arguments so the new ones line up, and keep the trailing comma last.
        # A comment after the old last argument stays on its line.
        separator = _without_comment(previous or last.comma)
        last_comma, closing = _keep_comment(separator, last.comma)
        rebuilt = [last.with_changes(comma=last_comma)]
        for arg in new_args[:-1]:
            rebuilt.append(arg.with_changes(comma=separator))
        rebuilt.append(new_args[-1].with_changes(comma=closing))
        return call.with_changes(args=args[:-1] + rebuilt)
    if previous is not None and isinstance(last.whitespace_after_arg, cst.ParenthesizedWhitespace):
        # One argument a line, no trailing comma, ``)`` on its own line.
        separator = _without_comment(previous)
        closing_line = cst.Comma(whitespace_after=last.whitespace_after_arg)
        last_comma, closing_line = _keep_comment(separator, closing_line)
        rebuilt = [last.with_changes(comma=last_comma, whitespace_after_arg=cst.SimpleWhitespace(""))]
        for arg in new_args[:-1]:
            rebuilt.append(arg.with_changes(comma=separator))
        rebuilt.append(new_args[-1].with_changes(whitespace_after_arg=closing_line.whitespace_after))
        return call.with_changes(args=args[:-1] + rebuilt)
    inline = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    rebuilt = [last.with_changes(comma=inline)]
    for arg in new_args[:-1]:
        rebuilt.append(arg.with_changes(comma=inline))
    rebuilt.append(new_args[-1])
    return call.with_changes(args=args[:-1] + rebuilt)


def _without_comment(comma: cst.Comma) -> cst.Comma:
    """A separator to copy between new arguments: the layout of ``comma`` without its comment."""
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace) and (after.first_line.comment or after.empty_lines):
        plain = after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
        return comma.with_changes(whitespace_after=plain)
    return comma


def _keep_comment(separator: cst.Comma, closing: cst.Comma) -> tuple[cst.Comma, cst.Comma]:
    """Move the comment that ends the old last argument's line from ``closing`` (now after the
    new last argument) onto ``separator`` (now after the old last argument)."""
    after = closing.whitespace_after
    if (
        isinstance(after, cst.ParenthesizedWhitespace)
        and after.first_line.comment is not None
        and isinstance(separator.whitespace_after, cst.ParenthesizedWhitespace)
    ):
        kept = separator.with_changes(
            whitespace_after=separator.whitespace_after.with_changes(first_line=after.first_line)
        )
        return kept, closing.with_changes(whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace()))
    return separator, closing


def remove_keyword(call: cst.Call, name: str) -> cst.Call:
    args = list(call.args)
    for index, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            removed = args.pop(index)
            if index == len(args) and args:
                # The removed argument was last: the new last one takes its comma (or none).
                args[-1] = args[-1].with_changes(comma=removed.comma)
            return call.with_changes(args=args)
    return call


def rename_keyword(call: cst.Call, old: str, new: str, value: cst.BaseExpression | str | None = None) -> cst.Call:
    if isinstance(value, str):
        value = cst.parse_expression(value)
    args = []
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == old:
            arg = arg.with_changes(keyword=cst.Name(new))
            if value is not None:
                arg = arg.with_changes(value=value)
        args.append(arg)
    return call.with_changes(args=args)


def string_like(original: cst.BaseExpression, text: str) -> cst.SimpleString:
    """A string literal for ``text`` in the quote style of ``original``."""
    quote = '"'
    prefix = ""
    if isinstance(original, cst.SimpleString):
        quote = original.quote
        prefix = original.prefix.replace("b", "").replace("B", "")
        if "r" in prefix.lower():
            prefix = ""
    return cst.SimpleString(f"{prefix}{quote}{text}{quote}")


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def statement(code: str) -> cst.SimpleStatementLine:
    parsed = cst.parse_statement(code)
    assert isinstance(parsed, cst.SimpleStatementLine)
    return parsed


class ReplaceNodes(cst.CSTTransformer):
    """Replaces nodes of a tree, matched by identity, with their replacements."""

    def __init__(self, replacements: dict[cst.CSTNode, object]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        replacement = self.replacements.get(original_node)
        return updated_node if replacement is None else replacement


def combine_edits(ctx: "FileContext", edits: Sequence[Edit]) -> list[Edit] | None:
    """One fix's edits with nested ones folded into the edit that contains them, so that the
    fixer, which replaces the outer node whole, keeps both. None if an edit would be lost
    (it lies inside a removed node)."""
    ordered = sorted(edits, key=lambda e: ctx.order[e.node])
    result: list[Edit] = []
    for edit in ordered:
        outer = next((e for e in result if ctx.is_descendant(edit.node, e.node) or e.node is edit.node), None)
        if outer is None:
            result.append(edit)
            continue
        if outer.node is edit.node or not isinstance(outer.replacement, cst.CSTNode):
            return None
        merged = outer.replacement.visit(ReplaceNodes({edit.node: edit.replacement}))
        result[result.index(outer)] = Edit(outer.node, merged)
    return result


def lines_removed_with(ctx: FileContext, smalls: Sequence[cst.CSTNode]) -> set[cst.CSTNode]:
    """The statement lines that go entirely when ``smalls`` are removed."""
    lines: dict[cst.CSTNode, int] = {}
    for small in smalls:
        line = ctx.parent.get(small)
        if line is not None:
            lines[line] = lines.get(line, 0) + 1
    return {line for line, count in lines.items() if count == len(line.body)}  # type: ignore[attr-defined]


def remove_statements(ctx: FileContext, smalls: Sequence[cst.BaseSmallStatement]) -> list[Edit]:
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
            edits.append(Edit(line, as_pass(line)))  # ``if x: scaler.update()``
        else:
            whole_lines.append(line)  # type: ignore[arg-type]
    by_block: dict[cst.CSTNode, list[cst.SimpleStatementLine]] = {}
    for line in whole_lines:
        by_block.setdefault(ctx.parent[line], []).append(line)
    for block, lines in by_block.items():
        emptied = isinstance(block, cst.IndentedBlock) and len(lines) == len(block.body)
        for index, line in enumerate(sorted(lines, key=ctx.order.__getitem__)):
            if emptied and index == 0:
                edits.append(Edit(line, as_pass(line)))
            else:
                edits.append(Edit(line, cst.RemoveFromParent()))
    return edits


def as_pass(line: cst.SimpleStatementLine | cst.SimpleStatementSuite) -> cst.CSTNode:
    return line.with_changes(body=[cst.Pass()], trailing_whitespace=cst.TrailingWhitespace())
