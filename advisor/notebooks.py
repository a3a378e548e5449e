"""Jupyter notebooks (``.ipynb``): their code cells as one Python source, and a fixed source back
into the cells.

A notebook runs its code cells in order in one interpreter, so a device chosen in cell 2 and the
training loop of cell 5 are one program: the rules see the code cells joined, in order, as one
file (markdown and raw cells left out). Between cells goes a marker comment line, so that every
line of the joined source knows its cell and its line there, and so that a fix's inserted lines
fall on one side of a cell boundary. LibCST keeps comments, and the marker lines must come back
from a fix exactly as they went in, once each and in order; otherwise the fix is refused for the
notebook (never a notebook with its cells shuffled).

IPython syntax is not Python: ``%magic``, ``!shell``, ``obj?``, ``x = !cmd``, ``x = %magic`` at the
start of a logical line are masked (replaced by a placeholder line: a comment, or ``pass`` where a
block needs a statement) before LibCST sees them, and restored byte for byte when a fixed source is
written back. A cell magic that runs the cell as something else than Python in this interpreter
(``%%bash``, ``%%writefile``, ``%%html``, ``%%script``, ... anything but the few in
``PYTHON_CELL_MAGICS``) takes the whole cell out.

Reading needs the standard library's ``json`` only (no nbformat in the core install). Writing
splices each changed cell's ``source`` value into the file's text, in the style the file uses (a
list of lines or one string, its indentation, ASCII escapes or not): every byte outside the edited
sources stays as it was, whatever tool wrote the notebook, and an unchanged notebook is never
rewritten.
"""
from __future__ import annotations

import ast
import difflib
import json
import re
import warnings
from dataclasses import dataclass
from typing import Callable
from json.decoder import scanstring

NOTEBOOK_SUFFIX = ".ipynb"
# Cell magics whose cell is still Python, run in this interpreter: the cell is analysed with its
# first line masked. Any other cell magic (%%bash, %%writefile, %%html, %%script, %%cython, ...)
# takes its cell out.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "memit", "px"})
_BOM = "\ufeff"
_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line breaks Python's tokenizer knows (positions.py's)
_WHITESPACE = re.compile(r"[ \t\n\r]*")
# `files = !ls`, `a, b = %sx cmd`: an assignment from a shell command or a magic.
_ASSIGNED_ESCAPE = re.compile(r"[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*[!%]")
# IPython's automagic: a line magic or shell alias called without its `%` (`pip install x`, `cd ..`,
# `ls -la`). Masked only when the line does not compile as Python (`ls in paths` is Python).
_AUTOMAGIC_NAMES = (
    r"(?:pip|conda|mamba|cd|pwd|ls|ll|env|set_env|mkdir|rmdir|rm|cp|mv|cat|clear|less|more|man|time|timeit|"
    r"matplotlib|load_ext|reload_ext|autoreload|run|history|who|whos|xdel|reset|store|sx|system|bookmark|"
    r"config|alias|unalias|pdb|prun|tensorflow_version|tensorboard)[ \t]+[\w\-./~\"'$]"
)
_AUTOMAGIC = re.compile(_AUTOMAGIC_NAMES)
# A line that may be IPython syntax: most cells have none, and skip the line-by-line scan.
_MAYBE_IPYTHON = re.compile(
    r"^[ \t]*(?:[%!?]|[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*[!%]|" + _AUTOMAGIC_NAMES + r")"
    r"|\?[ \t]*(?:#.*)?$",
    re.M,
)
# A cell magic on the cell's first line that is neither blank nor a comment.
# A cell's first line that is not blank or a comment opens a cell magic (``%%bash``). Read line by
# line: one regular expression over the leading lines backtracks exponentially on a cell of
# many ``\r\n`` lines (each matched as one line break or as two).
_CELL_MAGIC = re.compile(r"%%[ \t]*(\w*)")
_NON_ASCII_ESCAPE = re.compile(r"\\u(?:00[89a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]|[1-9a-fA-F][0-9a-fA-F]{2})[0-9a-fA-F]")
_DECODER = json.JSONDecoder()
# A cell compiled alone, as IPython compiles it (top-level `await` allowed), to an AST only.
_COMPILE_CELL = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
# The pieces of a JSON object, whitespace included, matched at once (a notebook has tens of
# thousands of small members: one regular expression each instead of a scan per token).
_OBJECT_OPENING = re.compile(r"\{[ \t\n\r]*(\}[ \t\n\r]*)?")
_KEY = re.compile(r'[ \t\n\r]*("((?:[^"\\\x00-\x1f]|\\.)*)")[ \t\n\r]*:[ \t\n\r]*')
_AFTER_MEMBER = re.compile(r"[ \t\n\r]*([,}])[ \t\n\r]*")
# What a Python line's brackets and strings are made of, for the IPython-escape scanner.
_CODE_SPECIAL = re.compile(r"""[#'"()\[\]{}]""")
_STRING_REST = {  # the rest of a string up to its closing quote, escapes skipped
    '"': re.compile(r'[^\\"]*(?:\\.[^\\"]*)*"'),
    "'": re.compile(r"[^\\']*(?:\\.[^\\']*)*'"),
    '"""': re.compile(r'[^\\"]*(?:(?:\\.|"(?!""))[^\\"]*)*"""', re.S),
    "'''": re.compile(r"[^\\']*(?:(?:\\.|'(?!''))[^\\']*)*'''", re.S),
}


def is_notebook(path: str) -> bool:
    return path.lower().endswith(NOTEBOOK_SUFFIX)


class NotebookError(ValueError):
    """A notebook that cannot be read as nbformat 4, or a fixed source that cannot go back into it."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


@dataclass
class CodeCell:
    index: int  # 0-based, among all the notebook's cells (markdown and raw ones count)
    source: str
    stored_as_list: bool  # "source": ["line\n", ...] (nbformat's way) or one string
    value_span: tuple[int, int]  # where the "source" value is in the file's text
    # Each JSON string of the value: where its opening quote and its end are in the text, and
    # how many characters it decodes to.
    pieces: list[tuple[int, int, int]]
    key_start: int  # where the "source" key starts (its indentation, for an empty list's layout)
    cell_start: int  # where the cell's "{" is


@dataclass
class _Masked:
    """An IPython line replaced by a placeholder in the joined source."""

    original: str  # the line as the cell has it, without its line break
    indent: str  # the placeholder's indentation
    first_of_escape: bool  # False: a backslash continuation line of the escape above it


class Notebook:
    """A notebook's code cells as one Python source (``python``), and the way back."""

    def __init__(self, text: str, has_bom: bool, cells: list[CodeCell]) -> None:
        self.text = text
        self.has_bom = has_bom
        self.cells = cells  # the code cells analysed, in order (a cell magic's cells left out)
        self._build_python()

    # -- reading --------------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, data: bytes) -> "Notebook":
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise NotebookError(f"cannot decode: a notebook is UTF-8 JSON ({error.reason} at byte {error.start})") from error
        has_bom = text.startswith(_BOM)
        if has_bom:
            text = text[1:]
        if not text.strip():
            return cls(text, has_bom, [])  # an empty file (as editors create them): nothing to check
        try:
            return cls(text, has_bom, _code_cells(text))
        except _Malformed as problem:
            try:
                json.loads(text)
            except json.JSONDecodeError as error:  # the standard library's message and position
                raise NotebookError(f"not a notebook: invalid JSON: {error.msg}", error.lineno, error.colno) from error
            except RecursionError as error:
                raise NotebookError("not a notebook: JSON nested too deeply") from error
            raise NotebookError(f"not a notebook: {problem}") from problem
        except RecursionError as error:
            raise NotebookError("not a notebook: JSON nested too deeply") from error

    def _build_python(self) -> None:
        token = "advisor-notebook"
        while any(token in cell.source for cell in self.cells):
            token += "-"  # a notebook that quotes our marker: the marker changes, never its meaning
        self._token = token
        self._marker = re.compile(rf"# {re.escape(token)} cell (\d+)$")
        self._placeholder = re.compile(rf"(?:pass\s+)?# {re.escape(token)} ipython (\d+)$")
        lines: list[str] = []
        origins: list[tuple[int, int]] = []  # per joined line: (position in self.cells, line in the cell; 0: marker)
        self._masked: list[_Masked] = []
        self._cell_lines: list[list[str]] = []
        self._added_newline: list[bool] = []
        for position, cell in enumerate(self.cells):
            lines.append(f"# {token} cell {position}\n")
            origins.append((position, 0))
            cell_lines = _split_lines(cell.source)
            self._cell_lines.append(cell_lines)
            # The cell's last line has no line break (Jupyter writes none): the joined source
            # gives it one, which goes when the cell is written back. An empty cell written
            # back with code follows the same convention.
            added = not cell_lines or not cell_lines[-1].endswith(("\n", "\r"))
            self._added_newline.append(added)
            python_lines = self._masked_lines(cell_lines) if _MAYBE_IPYTHON.search(cell.source) else cell_lines
            for number, line in enumerate(python_lines, start=1):
                lines.append(line)
                origins.append((position, number))
            if added and cell_lines:
                lines[-1] += "\n"
        self.python = "".join(lines)
        self._origins = origins

    def _masked_lines(self, cell_lines: list[str]) -> list[str]:
        """The cell's lines with IPython escapes replaced by placeholders (same count of lines)."""
        out: list[str] = []
        scanner = _LogicalLines()
        first = _first_code_line(cell_lines)
        escape_continues: _Masked | None = None
        for number, line in enumerate(cell_lines):
            body, ending = _without_ending(line)
            stripped = body.lstrip(" \t")
            indent = body[: len(body) - len(stripped)]
            if escape_continues is not None:
                masked = _Masked(body, escape_continues.indent, first_of_escape=False)
            elif scanner.at_start and _is_ipython(stripped, number == first, scanner):
                masked = _Masked(body, indent, first_of_escape=True)
            else:
                scanner.feed(body)
                out.append(line)
                continue
            escape_continues = masked if body.endswith("\\") else None
            self._masked.append(masked)
            statement = "pass  " if masked.indent else ""  # a block must keep a statement
            out.append(f"{masked.indent}{statement}# {self._token} ipython {len(self._masked) - 1}{ending or ''}")
        return out

    # -- positions ------------------------------------------------------------------------
    def cell_position(self, line: int, column: int) -> tuple[int, int, int]:
        """(cell number, line, column) of a 1-based line and column of ``python``; the cell number
        is 1-based among all the notebook's cells, as Jupyter and VS Code show them."""
        position, cell_line, column = self._cell_line(line, column)
        return self.cells[position].index + 1, cell_line, column

    def file_position(self, line: int, column: int) -> tuple[int, int]:
        """The 1-based line and column in the notebook file's text where that character is stored."""
        position, cell_line, column = self._cell_line(line, column)
        cell = self.cells[position]
        lines = self._cell_lines[position]
        offset = sum(len(text) for text in lines[: cell_line - 1]) + column - 1
        raw = _raw_offset(self.text, cell, min(offset, len(cell.source)))
        # Counted for the few positions reported, not indexed: a notebook's text is mostly
        # outputs (images in base64), and a table of its line starts cost more than the rules.
        line_start = self.text.rfind("\n", 0, raw) + 1
        return self.text.count("\n", 0, raw) + 1, raw - line_start + 1

    def _cell_line(self, line: int, column: int) -> tuple[int, int, int]:
        if not self._origins:
            raise ValueError("a notebook without code cells has no positions")
        position, cell_line = self._origins[min(max(line, 1), len(self._origins)) - 1]
        if cell_line == 0:  # a marker line (nothing is reported there): the cell's start
            return position, 1, 1
        return position, cell_line, column

    def locate(self, python: str, line: int) -> tuple[int, int]:
        """(cell number, line in the cell) of a line of ``python``, this notebook's joined cells as
        fixes left them (a dropped fix of a later round is reported where it was)."""
        position, marker_line = 0, 0
        for number, text in enumerate(_split_lines(python)[:line], start=1):
            marker = self._marker.match(text.strip())
            if marker is not None:
                position, marker_line = int(marker.group(1)), number
        cell = self.cells[min(position, len(self.cells) - 1)]
        return cell.index + 1, max(line - marker_line, 1)

    def first_cell_syntax_error(self) -> tuple[str, int, int] | None:
        """Python's syntax error in the first cell that does not compile on its own, at its line and
        column of ``python``: a cell that ends inside a string is reported there, not in the cell
        where the joined source gives up (Jupyter runs each cell alone). None where every cell
        compiles alone."""
        lines = _split_lines(self.python)
        markers = [number for number, (_, cell_line) in enumerate(self._origins) if cell_line == 0] + [len(lines)]
        for start, end in zip(markers, markers[1:]):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # invalid escapes and the like: not ours to print
                    compile("".join(lines[start + 1 : end]), "<cell>", "exec", _COMPILE_CELL, dont_inherit=True)
            except SyntaxError as error:
                return f"syntax error: {error.msg}", start + 1 + (error.lineno or 1), error.offset or 1
            except (ValueError, RecursionError, MemoryError, OverflowError):
                return None
        return None

    def python_line(self, cell_number: int, cell_line: int) -> int | None:
        """The 1-based line of ``python`` that holds line ``cell_line`` of cell ``cell_number``."""
        for number, (position, line) in enumerate(self._origins, start=1):
            if self.cells[position].index + 1 == cell_number and line == cell_line:
                return number
        return None

    # -- writing --------------------------------------------------------------------------
    def with_python(self, python: str) -> bytes:
        """The notebook's bytes with ``python`` (this notebook's ``python``, fixed) put back into
        its cells: only the ``source`` values of the cells that changed are rewritten."""
        sources = self._sources_from(python)
        text = self.text
        ensure_ascii = _writes_ascii(text)
        for cell, source in sorted(zip(self.cells, sources), key=lambda pair: -pair[0].value_span[0]):
            if source == cell.source:
                continue
            start, end = cell.value_span
            text = text[:start] + self._encode_source(cell, source, ensure_ascii) + text[end:]
        data = ((_BOM if self.has_bom else "") + text).encode("utf-8")
        rewritten = Notebook.from_bytes(data)
        if [c.index for c in rewritten.cells] != [c.index for c in self.cells] or [c.source for c in rewritten.cells] != sources:
            raise NotebookError("the fixed cells do not read back as written")  # a bug of ours, never a broken notebook
        return data

    def _sources_from(self, python: str) -> list[str]:
        """Each analysed cell's new source, from a fixed joined source whose marker lines and
        placeholders are intact (else NotebookError)."""
        sources: list[list[str]] = [[] for _ in self.cells]
        position = -1
        before_first: list[str] = []  # lines a fix put above the first marker: the first cell's
        next_masked = 0
        for line in _split_lines(python):
            body, ending = _without_ending(line)
            stripped = body.strip()
            marker = self._marker.match(stripped)
            if marker is not None:
                if body != stripped or int(marker.group(1)) != position + 1:
                    raise NotebookError("a fix moved the boundary between two cells")
                position += 1
                if position == 0:
                    sources[0].extend(before_first)
                continue
            placeholder = self._placeholder.match(stripped)
            if placeholder is not None:
                if int(placeholder.group(1)) != next_masked:
                    raise NotebookError("a fix moved an IPython line (magic or shell command)")
                masked = self._masked[next_masked]
                next_masked += 1
                indent = body[: len(body) - len(body.lstrip(" \t"))]
                if indent == masked.indent or not masked.first_of_escape:
                    restored = masked.original
                else:  # a fix re-indented the block around it: the line follows
                    restored = indent + masked.original.lstrip(" \t")
                line = restored + (ending or "")
            elif self._token in line:
                raise NotebookError("a fix changed a cell marker")
            (sources[position] if position >= 0 else before_first).append(line)
        if position != len(self.cells) - 1 or next_masked != len(self._masked):
            raise NotebookError("a fix removed a cell boundary or an IPython line")
        result = []
        for lines, added in zip(sources, self._added_newline):
            source = "".join(lines)
            if added and source.endswith("\n"):
                source = source[:-1]  # the line break the joined source gave the cell's last line
            result.append(source)
        return result

    def _encode_source(self, cell: CodeCell, source: str, ensure_ascii: bool) -> str:
        if not cell.stored_as_list:
            return json.dumps(source, ensure_ascii=ensure_ascii)
        items = [json.dumps(line, ensure_ascii=ensure_ascii) for line in source.splitlines(True)]  # as nbformat splits
        if not items:
            return "[]"
        text, (start, end), pieces = self.text, cell.value_span, cell.pieces
        if pieces:
            opening = text[start + 1 : pieces[0][0]]
            closing = text[pieces[-1][1] : end - 1]
            between = text[pieces[0][1] : pieces[1][0]] if len(pieces) > 1 else "," + opening
        else:  # an empty list: the layout nbformat gives a list at this depth
            key_line = text.rfind("\n", 0, cell.key_start) + 1
            cell_line = text.rfind("\n", 0, cell.cell_start) + 1
            key_indent = text[key_line : cell.key_start]
            if "\n" not in text[cell.cell_start : cell.key_start] or key_indent.strip(" \t"):
                opening, between, closing = "", ", ", ""  # a compact file
            else:
                unit = key_indent[len(text[cell_line : cell.cell_start]) :] or " "
                opening, closing = "\n" + key_indent + unit, "\n" + key_indent
                between = "," + opening
        return "[" + opening + between.join(items) + closing + "]"

    def cell_sources(self) -> dict[int, str]:
        """Each analysed cell's source by its 1-based number among all cells."""
        return {cell.index + 1: cell.source for cell in self.cells}


# -- the file's JSON, with the places of the sources ---------------------------------------
class _Malformed(Exception):
    """Not the JSON shape of an nbformat 4 notebook (the message says what)."""


def _skip(text: str, index: int) -> int:
    return _WHITESPACE.match(text, index).end()  # type: ignore[union-attr]


def _members(
    text: str, index: int, scanners: "dict[str, Callable[[str, int], tuple[object, int]]] | None" = None
) -> tuple[dict[str, tuple[object, int, int, int]], int]:
    """The members of the JSON object at ``text[index]``: key -> (value, key start, value start,
    value end), and where the object ends (after the whitespace that follows). A key of
    ``scanners`` has its value read by its scanner instead of decoded (the cells: read once)."""
    opening = _OBJECT_OPENING.match(text, index)
    if opening is None:
        raise _Malformed("expected a JSON object")
    members: dict[str, tuple[object, int, int, int]] = {}
    if opening.group(1):
        return members, opening.end()
    index = opening.end()
    while True:
        key = _KEY.match(text, index)
        if key is None:
            raise _Malformed("expected a key and ':'")
        name = key.group(2) if "\\" not in key.group(2) else json.loads(key.group(1))
        scanner = scanners.get(name) if scanners else None
        value, end = (scanner or _DECODER.raw_decode)(text, key.end())
        members[name] = (value, key.start(1), key.end(), end)
        after = _AFTER_MEMBER.match(text, end)
        if after is None:
            raise _Malformed("expected ',' or '}'")
        index = after.end()
        if after.group(1) == "}":
            return members, index


def _cell_members(text: str, index: int) -> tuple[list[tuple[dict, int]], int]:
    """The ``cells`` array: each cell's members and where its ``{`` is."""
    if text[index : index + 1] != "[":
        raise _Malformed("`cells` is not a list")
    cells = []
    index = _skip(text, index + 1)
    if text[index : index + 1] == "]":
        return cells, index + 1
    while True:
        fields, end = _members(text, index)
        cells.append((fields, index))
        separator = text[end : end + 1]
        index = _skip(text, end + 1)
        if separator == "]":
            return cells, end + 1
        if separator != ",":
            raise _Malformed("expected ',' or ']' between cells")


def _code_cells(text: str) -> list[CodeCell]:
    try:
        members, end = _members(text, _skip(text, 0), {"cells": _cell_members})
    except (ValueError, IndexError) as error:  # json.JSONDecodeError is a ValueError
        raise _Malformed(str(error)) from error
    if end != len(text):
        raise _Malformed("extra data after the notebook")
    version = members.get("nbformat", (None,))[0]
    if "worksheets" in members or (isinstance(version, int) and not isinstance(version, bool) and version < 4):
        raise NotebookError(
            f"nbformat {version if isinstance(version, int) else 3} notebooks are not supported: convert it to nbformat 4 "
            "(`jupyter nbconvert --to notebook --inplace FILE`)"
        )
    if version != 4 or isinstance(version, bool):
        raise NotebookError(f"not an nbformat 4 notebook (`nbformat` is {json.dumps(version)})")
    if "cells" not in members:
        raise NotebookError("not a notebook: no `cells` list")
    if not _is_python(members.get("metadata", ({},))[0]):
        return []  # an R or Julia notebook: nothing of advisor's business
    cells: list[CodeCell] = []
    for number, (fields, cell_start) in enumerate(members["cells"][0]):  # type: ignore[arg-type]
        if fields.get("cell_type", (None,))[0] != "code":
            continue
        if "source" not in fields:
            raise NotebookError(f"cell {number + 1}: a code cell without `source`")
        value, key_start, start, end = fields["source"]
        cell = _code_cell(text, number, value, key_start, start, end, cell_start)
        if _analysed(cell.source):
            cells.append(cell)
    return cells


def _code_cell(text: str, number: int, value: object, key_start: int, start: int, end: int, cell_start: int) -> CodeCell:
    if isinstance(value, str):
        return CodeCell(number, value, False, (start, end), [(start, end, len(value))], key_start, cell_start)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise NotebookError(f"cell {number + 1}: `source` must be a string or a list of strings")
    pieces = []
    index = _skip(text, start + 1)
    for item in value:
        piece_start = index
        _, index = scanstring(text, index + 1)
        pieces.append((piece_start, index, len(item)))
        index = _skip(text, index)
        if text[index] == ",":
            index = _skip(text, index + 1)
    return CodeCell(number, "".join(value), True, (start, end), pieces, key_start, cell_start)


def _is_python(metadata: object) -> bool:
    """False only where the notebook says its language and it is not Python."""
    if not isinstance(metadata, dict):
        return True
    for key, field in (("kernelspec", "language"), ("language_info", "name")):
        value = metadata.get(key)
        if isinstance(value, dict) and isinstance(value.get(field), str):
            return value[field].strip().lower() in ("python", "python3", "python2", "ipython", "")
    return True


def _analysed(source: str) -> bool:
    """False for a cell whose cell magic runs it as something else than Python here."""
    for line in _NEWLINE.split(source):
        line = line.lstrip(" \t")
        if line and not line.startswith("#"):
            magic = _CELL_MAGIC.match(line)
            return magic is None or magic.group(1) in PYTHON_CELL_MAGICS
    return True


def _raw_offset(text: str, cell: CodeCell, offset: int) -> int:
    """Where character ``offset`` of the cell's source is in the file's text (escapes counted)."""
    for number, (piece_start, piece_end, length) in enumerate(cell.pieces, start=1):
        if offset > length or (offset == length and number < len(cell.pieces)):  # a line's start: the next string
            offset -= length
            continue
        index = piece_start + 1
        for _ in range(offset):
            if text[index] != "\\":
                index += 1
            elif text[index + 1] != "u":
                index += 2
            else:
                code = int(text[index + 2 : index + 6], 16)
                index += 6
                if 0xD800 <= code < 0xDC00 and text.startswith("\\u", index):
                    index += 6  # a surrogate pair is one character
        return index
    return cell.pieces[-1][1] - 1 if cell.pieces else cell.value_span[0]


def _writes_ascii(text: str) -> bool:
    """Whether the file writes non-ASCII characters as ``\\u`` escapes (Jupyter writes them as they are)."""
    return text.isascii() and _NON_ASCII_ESCAPE.search(text) is not None


# -- IPython syntax -----------------------------------------------------------------------
def _split_lines(text: str) -> list[str]:
    lines, start = [], 0
    for match in _NEWLINE.finditer(text):
        lines.append(text[start : match.end()])
        start = match.end()
    if start < len(text):
        lines.append(text[start:])
    return lines


def _without_ending(line: str) -> tuple[str, str | None]:
    match = _NEWLINE.search(line)
    return (line, None) if match is None else (line[: match.start()], match.group())


def _first_code_line(lines: list[str]) -> int | None:
    """The first line that is neither blank nor a comment (Colab's `#@title` may precede `%%time`)."""
    return next((number for number, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")), None)


def _is_ipython(stripped: str, first_line: bool, scanner: "_LogicalLines") -> bool:
    """Whether a line that starts a logical line is IPython syntax rather than Python."""
    if not stripped:
        return False
    if stripped.startswith("%%"):
        return first_line  # a cell magic only opens a cell; elsewhere IPython rejects it too
    if stripped[0] in "%!?":
        return True
    if _ASSIGNED_ESCAPE.match(stripped):
        return True
    if _AUTOMAGIC.match(stripped) and not _compiles(stripped):
        return True
    return scanner.ends_with_question_mark(stripped)  # `obj?`, `obj??`: help


def _compiles(line: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like: not ours to print
            compile(line, "<cell line>", "exec", dont_inherit=True)
    except SyntaxError:
        return False
    except (ValueError, RecursionError, MemoryError, OverflowError):
        return True  # not a syntax matter: leave the line to the parser
    return True


class _LogicalLines:
    """Tracks, line by line, whether the next line starts a logical line: not inside brackets, a
    string or a backslash continuation (IPython escapes count only there)."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote: str | None = None
        self.continued = False

    @property
    def at_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def feed(self, line: str) -> None:
        self._scan(line, record=True)

    def ends_with_question_mark(self, line: str) -> bool:
        return self._scan(line, record=False) == "?"

    def _scan(self, line: str, record: bool) -> str:
        """The last character of code (outside strings and comments); with ``record``, the state
        after the line is kept. Regular expressions jump from one bracket, quote or ``#`` to the
        next (a loop over characters in Python was most of the time a notebook took to read)."""
        depth, quote, index, comment = self.depth, self.quote, 0, None
        while True:
            if quote is not None:
                closing = _STRING_REST[quote].match(line, index)
                if closing is None:
                    break  # the string goes on past this line
                index, quote = closing.end(), None
                continue
            special = _CODE_SPECIAL.search(line, index)
            if special is None:
                break
            char, index = special.group(), special.end()
            if char == "#":
                comment = special.start()
                break
            if char in "([{":
                depth += 1
            elif char in ")]}":
                depth = max(0, depth - 1)
            else:
                quote = char * 3 if line.startswith(char * 3, special.start()) else char
                index = special.start() + len(quote)
        if record:
            continued = comment is None and line.endswith("\\")
            if quote is not None and len(quote) == 1 and not continued:
                quote = None  # an unterminated one-line string: a syntax error, not our business
            self.depth, self.quote, self.continued = depth, quote, continued
        return "" if quote is not None else line[:comment].rstrip()[-1:]


# -- diff ---------------------------------------------------------------------------------
def cell_diff(path: str, original: bytes, fixed: bytes) -> str:
    """A unified diff per changed cell, as ruff shows notebooks (``a/train.ipynb:cell 4``)."""
    before = Notebook.from_bytes(original).cell_sources()
    after = Notebook.from_bytes(fixed).cell_sources()
    parts = []
    for number in sorted(set(before) | set(after)):
        old, new = before.get(number, ""), after.get(number, "")
        if old == new:
            continue
        old_lines, new_lines = _diff_lines(old), _diff_lines(new)
        parts.append("".join(difflib.unified_diff(old_lines, new_lines, f"a/{path}:cell {number}", f"b/{path}:cell {number}")))
    return "".join(parts)


def _diff_lines(source: str) -> list[str]:
    lines = _split_lines(source)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"  # a cell's last line seldom ends with a line break: no "no newline" noise
    return lines
