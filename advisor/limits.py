"""Sources nested too deeply for LibCST, caught before LibCST crashes on them.

LibCST's native parser recurses once per nesting level: thousands of nested brackets,
``lambda:`` or ``elif`` crash the whole process (a stack overflow, not an exception), and a
long ``a + a + ...`` chain takes minutes. CPython's own parser fails cleanly on all of these
(``too many nested parentheses``, RecursionError, MemoryError), so it is the judge: a file
Python itself cannot parse for depth is reported, never handed to LibCST.

Asking CPython costs about a tenth of LibCST's parse, so it is asked only when a cheap scan
finds what deep nesting needs: a long physical line, deep brackets, a long run of
bracketed or backslash-continued lines, or many ``elif``. About 1 file in 100 of torch and
transformers makes the scan ask; the scan itself costs well under 1% of a check.

Shallower trees can still be too deep for LibCST's recursive code generator (a chain of
a few hundred ``elif`` or ``and``): that surfaces as a RecursionError, which the engine and
the fixer report as ``TOO_DEEP_FOR_LIBCST`` for that file.
"""
from __future__ import annotations

import ast
import re
import warnings
from itertools import accumulate, compress, repeat
from operator import sub

LONG_LINE = 2_000  # bytes on one physical line
DEEP_BRACKETS = 50  # brackets open at once (Python allows 200)
LONG_CONTINUATION = 500  # physical lines inside one bracketed or backslash-continued expression
MANY_ELIF = 500  # each ``elif`` nests one level deeper in the tree

TOO_DEEP_FOR_LIBCST = "nested too deeply for LibCST to analyze (RecursionError)"
# Python's messages for nesting beyond its tokenizer's limits.
NESTING_SYNTAX_ERRORS = ("too many nested parentheses", "too many levels of indentation")

_KEPT = b"([{)]}\n"
_DROP = bytes(b for b in range(256) if b not in _KEPT)
_DELTA = tuple(1 if b in b"([{" else -1 if b in b")]}" else 0 for b in range(256))
_IS_NEWLINE = tuple(b == ord("\n") for b in range(256))
_BACKSLASH_CONTINUATION = re.compile(rb"\\\r?\n")


def nesting_error(data: bytes, source: str) -> tuple[str, int, int] | None:
    """(message, line, column) when Python's parser gives up on the source's depth; else None.

    Other syntax errors are left to LibCST, which also parses syntax newer than the running
    Python."""
    if not might_be_deep(data):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the file's own warnings (invalid escapes) are not ours to print
            ast.parse(source)
    except (RecursionError, MemoryError) as error:
        return f"nested too deeply to analyze: Python's own parser fails with {type(error).__name__}", 1, 1
    except SyntaxError as error:
        if error.msg in NESTING_SYNTAX_ERRORS:
            return f"syntax error: {error.msg}", error.lineno or 1, error.offset or 1
    return None


def might_be_deep(data: bytes) -> bool:
    """True for every source deep enough to hurt LibCST (and for some harmless ones).

    Brackets inside strings and comments count too; where they do not balance, the shift
    they cause is measured away, so they neither hide real depth nor fake a long bracketed
    region (unbalanced ones placed inside such a region can still split it: only a file
    built to dodge the scan does that). The work is done by C loops (translate, accumulate,
    split); a Python loop over every bracket costs several times more.
    """
    if data.count(b"elif") >= MANY_ELIF:
        return True
    if max(map(len, data.split(b"\n"))) > LONG_LINE:
        return True
    structure = data.translate(None, _DROP)
    if structure:
        depths = list(accumulate(map(_DELTA.__getitem__, structure)))
        if min(depths) < 0 or depths[-1] != 0:
            depths = _above_stray_brackets(depths)
        if max(depths) > DEEP_BRACKETS:
            return True
        at_line_ends = compress(depths, map(_IS_NEWLINE.__getitem__, structure))
        inside_brackets = bytes(map(min, at_line_ends, repeat(1)))  # 1 for each line ending inside brackets
        if max(map(len, inside_brackets.split(b"\0"))) > LONG_CONTINUATION:
            return True
    run, previous_end = 0, -1
    for match in _BACKSLASH_CONTINUATION.finditer(data):
        consecutive = previous_end >= 0 and data.find(b"\n", previous_end, match.start()) == -1
        run = run + 1 if consecutive else 1
        if run > LONG_CONTINUATION:
            return True
        previous_end = match.end()
    return False


def _above_stray_brackets(depths: list[int]) -> list[int]:
    """Bracket depth with the shifts of unbalanced brackets (in strings, comments) taken out.

    A stray opener raises the count for the rest of the file, a stray closer lowers it; the
    level a region returns to is the larger of the lowest level before it and the lowest
    level after it, so measuring from there undoes both shifts."""
    lowest_before = accumulate(depths, min)
    lowest_after = reversed(list(accumulate(reversed(depths), min)))
    return list(map(sub, depths, map(max, lowest_before, lowest_after)))


def from_recursion(error: BaseException) -> bool:
    """Whether ``error`` is a RecursionError, or was raised while one unwound: LibCST's
    codegen context managers turn some into a KeyError on the way out."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, RecursionError):
            return True
        seen.add(id(current))
        current = current.__context__
    return False
