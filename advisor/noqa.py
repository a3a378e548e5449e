"""The suppression comments, in one place for the engine, the fixer's ``--add-noqa`` and ADV001.

- ``# noqa`` / ``# noqa: ADV101, ADV102`` and ``# advisor: ignore`` / ``# advisor: ignore[ADV101]``
  on a line: that line (and, for a finding inside a statement, the statement's first line);
- ``# advisor: noqa`` / ``# advisor: noqa: ADV101`` on a line of its own: the whole file.
"""
from __future__ import annotations

import re

NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?", re.I)
ADVISOR_IGNORE = re.compile(r"#\s*advisor:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.I)
LINE_SUPPRESSIONS = (NOQA, ADVISOR_IGNORE)
FILE_NOQA = re.compile(r"#\s*advisor:\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?\s*$", re.I)
FILE_NOQA_MENTION = re.compile(r"#\s*advisor:\s*noqa", re.I)
OWN_LINE_FILE_NOQA = re.compile(r"^[ \t]*(#[ \t]*advisor:[ \t]*noqa[^\n]*)$", re.I | re.M)


def suppressed(line_text: str, code: str) -> bool:
    """Whether a line-level suppression on ``line_text`` silences ``code``."""
    for pattern in LINE_SUPPRESSIONS:
        match = pattern.search(line_text)
        if match is None:
            continue
        codes = match.group("codes")
        if codes is None:
            return True
        if code in {c.strip().upper() for c in codes.split(",")}:
            return True
    return False


def named_codes(text: str) -> re.Match[str] | None:
    """The first line-level suppression in ``text`` that names codes (its ``codes`` group)."""
    for pattern in LINE_SUPPRESSIONS:
        match = pattern.search(text)
        if match is not None and match.group("codes") is not None:
            return match
    return None
