"""Small, formatting-preserving builders for rule fixes.

Each returns a new node built from an original one; rules wrap them in
:class:`advisor.rule.Edit`. Commas, line breaks and comments of the original call
are kept, so a fix changes only what it must.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

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
    if isinstance(last.whitespace_after_arg, cst.ParenthesizedWhitespace):
        # ``)`` on its own line after the only argument (``.to(\n    device\n)``): the new
        # arguments go on the argument's line, and the line break stays before ``)``.
        rebuilt = [last.with_changes(comma=inline, whitespace_after_arg=cst.SimpleWhitespace(""))]
        for arg in new_args[:-1]:
            rebuilt.append(arg.with_changes(comma=inline))
        rebuilt.append(new_args[-1].with_changes(whitespace_after_arg=last.whitespace_after_arg))
        return call.with_changes(args=args[:-1] + rebuilt)
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
        if replacement is None:
            return updated_node
        return replacement(updated_node) if callable(replacement) else replacement


def nested_block(ctx: "FileContext", anchor: cst.CSTNode, body: Sequence[cst.BaseStatement]) -> cst.IndentedBlock:
    """A block for ``body`` nested under a new compound statement that takes ``anchor``'s place,
    indented by the same unit as the block around ``anchor``: in a file whose first indented
    block uses a tab (LibCST's default indent) but whose loop uses four spaces, the new block
    adds four spaces, not a tab."""
    around = ctx.parent.get(anchor)
    indent = around.indent if isinstance(around, cst.IndentedBlock) else None
    return cst.IndentedBlock(body=body, indent=indent)


def keep_removed_comments(ctx: "FileContext", replacements: dict[cst.CSTNode, object]) -> dict[cst.CSTNode, object]:
    """``replacements`` with the comment lines above each removed statement carried down to the
    next statement of its block that stays, so that no fix, and no combination of fixes, loses
    a comment the author wrote on its own line. A trailing comment on the removed line goes
    with it (it describes that line); comments a fix moved elsewhere itself are not carried."""
    removed = [
        node for node, new in replacements.items()
        if isinstance(new, cst.RemovalSentinel) and getattr(node, "leading_lines", None)
    ]
    if not removed:
        return replacements
    placed: set[int] = set()
    for new in replacements.values():
        for root in (new.nodes if isinstance(new, cst.FlattenSentinel) else (new,)):
            if isinstance(root, cst.CSTNode):
                placed.update(id(line) for line in _empty_lines(root))
    result = dict(replacements)
    for node in sorted(removed, key=lambda n: ctx.order.get(n, 0)):
        lines = list(node.leading_lines)  # type: ignore[attr-defined]
        first = next((i for i, line in enumerate(lines) if line.comment is not None and id(line) not in placed), None)
        if first is None:
            continue
        carried = [line for line in lines[first:] if id(line) not in placed]
        block = ctx.parent.get(node)
        body = list(getattr(block, "body", ()))
        if node not in body:
            continue
        following = next((s for s in body[body.index(node) + 1 :] if not isinstance(result.get(s), cst.RemovalSentinel)), None)
        if following is not None:
            # Applied to the statement as the other edits leave it: a fix inside it (the
            # ``autocast()`` of a ``with`` below a removed import) must not be undone.
            result[following] = _LeadingAdded(carried, result.get(following))
        elif isinstance(block, (cst.IndentedBlock, cst.Module)) and block not in result:
            # The last statements of the block go: the comments stay at the block's end.
            result[block] = _FooterAdded(carried)
    return result


class _LeadingAdded:
    """A replacement applied to the node as the other edits left it (or to its own replacement):
    comment lines carried down from a removed statement above it."""

    def __init__(self, lines: list[cst.EmptyLine], replacement: object = None) -> None:
        self.lines = lines
        self.replacement = replacement

    def __call__(self, updated: cst.CSTNode) -> object:
        replacement = self.replacement
        node = updated if replacement is None else replacement(updated) if callable(replacement) else replacement
        return _with_leading(node, self.lines)


class _FooterAdded:
    """A replacement applied to the node as the other edits left it: comment lines added to its footer."""

    def __init__(self, lines: list[cst.EmptyLine]) -> None:
        self.lines = lines

    def __call__(self, updated: cst.IndentedBlock | cst.Module) -> cst.CSTNode:
        return updated.with_changes(footer=[*self.lines, *updated.footer])


def _empty_lines(root: cst.CSTNode) -> Iterator[cst.EmptyLine]:
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.EmptyLine):
            yield node
        stack.extend(node.children)


def _with_leading(node: object, carried: list[cst.EmptyLine]) -> object:
    if isinstance(node, cst.FlattenSentinel) and node.nodes:
        return cst.FlattenSentinel([_with_leading(node.nodes[0], carried), *node.nodes[1:]])  # type: ignore[list-item]
    if isinstance(node, cst.CSTNode) and hasattr(node, "leading_lines"):
        return node.with_changes(leading_lines=[*carried, *node.leading_lines])  # type: ignore[attr-defined]
    return node


def realign_trailing_comments(original: str, fixed: str) -> str:
    """``fixed`` with the trailing comments of the lines a fix changed put back at the column
    they had, where the author aligned them (more than two spaces before the ``#``) and the new
    code leaves room: ``optim="adamw_torch_fused",  # ...`` keeps its comment in the column of
    its neighbours'."""
    import difflib

    old_lines = original.splitlines(keepends=True)
    new_lines = fixed.splitlines(keepends=True)
    pairs: list[tuple[int, int]] = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "replace" and i2 - i1 == j2 - j1:
            pairs.extend((i1 + k, j1 + k) for k in range(i2 - i1) if "#" in new_lines[j1 + k])
    if not pairs:
        return fixed
    old_comments = _comment_columns(original)
    new_comments = _comment_columns(fixed)
    for old_index, new_index in pairs:
        old_column = old_comments.get(old_index + 1)
        new_column = new_comments.get(new_index + 1)
        if old_column is None or new_column is None or old_column == new_column:
            continue
        old_line, new_line = old_lines[old_index], new_lines[new_index]
        # Two spaces is the usual gap; a wider one lines the comment up with its neighbours'.
        if old_line[old_column:] != new_line[new_column:] or not old_line[old_column - 3 : old_column].isspace():
            continue
        code = new_line[:new_column].rstrip()
        if not code or len(code) + 2 > old_column:
            continue
        new_lines[new_index] = code.ljust(old_column) + new_line[new_column:]
    return "".join(new_lines)


def _comment_columns(text: str) -> dict[int, int]:
    """The column of each trailing comment (after code on the same line), by line number."""
    import io
    import tokenize

    columns: dict[int, int] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT and token.line[: token.start[1]].strip():
                columns[token.start[0]] = token.start[1]
    except (tokenize.TokenError, SyntaxError):
        return {}
    return columns


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


def add_noqa(data: bytes, codes_by_line: dict[int, set[str]]) -> tuple[bytes, int, int]:
    """``data`` with ``# noqa: CODES`` on the given lines, the number of lines that got one,
    and the number that cannot take a comment (the line ends inside a string, or after a
    backslash). An existing ``# noqa: X`` takes the new codes; a bare ``# noqa`` covers all."""
    import io
    import tokenize

    from advisor.engine import decode, source_encoding
    from advisor.noqa import NOQA

    text = decode(data)
    ends: set[int] = set()  # lines whose end a comment may follow
    comments: dict[int, int] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL):
                ends.add(token.start[0])
            elif token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.start[1]
                ends.add(token.start[0])
    except (tokenize.TokenError, SyntaxError):
        return data, 0, len(codes_by_line)
    lines = text.splitlines(keepends=True)
    added = missed = 0
    for number, codes in sorted(codes_by_line.items()):
        if number not in ends or not 0 < number <= len(lines):
            missed += 1
            continue
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        newline = line[len(body):]
        column = comments.get(number)
        comment = body[column:] if column is not None else ""
        code = body[:column].rstrip() if column is not None else body.rstrip()
        existing = NOQA.search(comment)
        if existing is not None and existing.group("codes") is None:
            continue  # a bare ``# noqa`` silences everything already
        if existing is not None:
            known = [c.strip() for c in existing.group("codes").split(",")]
            merged = known + sorted(c for c in codes if c not in known)
            comment = comment[: existing.start()] + "# noqa: " + ", ".join(merged) + comment[existing.end():]
            lines[number - 1] = body[:column] + comment + newline
        else:
            directive = "# noqa: " + ", ".join(sorted(codes))
            lines[number - 1] = code + "  " + directive + ("  " + comment if comment else "") + newline
        added += 1
    return "".join(lines).encode(source_encoding(data)), added, missed
