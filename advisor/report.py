"""Output formats: text (rich), JSON, SARIF 2.1.0 and GitHub Actions annotations."""
from __future__ import annotations

import json
import urllib.parse
from typing import Sequence

from rich.console import Console
from rich.markup import escape

from advisor import __version__
from advisor.engine import Diagnostic, FileError
from advisor.registry import all_rules, rule_by_code
from advisor.targets import Target

FORMATS = ("text", "json", "sarif", "github")
INFORMATION_URI = "https://github.com/advisor-dev/advisor"


def summary_counts(diagnostics: Sequence[Diagnostic]) -> tuple[int, int, int, int]:
    """All findings, and how many have a safe, an unsafe and a measured fix."""
    safe = sum(1 for d in diagnostics if d.fix_applicability == "safe")
    unsafe = sum(1 for d in diagnostics if d.fix_applicability == "unsafe")
    measured = sum(1 for d in diagnostics if d.fix_applicability == "measured")
    return len(diagnostics), safe, unsafe, measured


def footer(diagnostics: Sequence[Diagnostic], errors: Sequence[FileError]) -> str:
    total, safe, unsafe, measured = summary_counts(diagnostics)
    if not total and not errors:
        return "All checks passed."
    text = f"{total} finding{'s' if total != 1 else ''}, {safe} fixable"
    if unsafe:
        text += f"; {unsafe} more with --unsafe-fixes"
    if measured:
        text += f"; {measured} more with fix --verify --unsafe-fixes"
    text += "."
    if errors:
        text += f" {len(errors)} file{'s' if len(errors) != 1 else ''} could not be analyzed."
    return text


def render_text(
    console: Console,
    diagnostics: Sequence[Diagnostic],
    errors: Sequence[FileError],
    target: Target,
    show_footer: bool = True,
    show_header: bool = True,
) -> None:
    if show_header:
        console.print(f"[dim]target: {escape(target.describe())}[/dim]")
    for error in errors:
        console.print(f"[bold]{escape(error.path)}[/bold]:{where(error)}: [bold red]{error.code}[/bold red] {escape(error.message)}")
    if not console.is_terminal and not console.record and console.soft_wrap:
        # Piped or redirected: rich would only strip the styles again, one line at a time, and
        # that is most of a warm run over a large tree (1.9 of 3.2 s for 6,500 findings).
        console.file.write(
            "".join(
                f"{d.path}:{where(d)}: {d.code}{' [*]' if d.fix_applicability == 'safe' else ''} {d.message}\n"
                for d in diagnostics
            )
        )
    else:
        for d in diagnostics:
            marker = " [cyan]\\[*][/cyan]" if d.fix_applicability == "safe" else ""
            console.print(
                f"[bold]{escape(d.path)}[/bold]:{where(d)}: [bold red]{d.code}[/bold red]{marker} {escape(d.message)}",
                soft_wrap=True,
            )
    if show_footer:
        console.print(footer(diagnostics, errors))


def where(item: Diagnostic | FileError) -> str:
    """``line:column``, or in a notebook ``cell 4:line:column`` (the line and column in the cell), as ruff."""
    if item.cell is not None:
        return f"cell {item.cell}:{item.cell_line}:{item.cell_column}"
    return f"{item.line}:{item.column}"


def _cell_fields(d: Diagnostic) -> dict:
    """A notebook finding's cell and its range in the cell; nothing for a .py file (its JSON stays as it was)."""
    if d.cell is None:
        return {}
    return {
        "cell": d.cell, "cell_line": d.cell_line, "cell_column": d.cell_column,
        "cell_end_line": d.cell_end_line, "cell_end_column": d.cell_end_column,
    }


def _error_json(e: FileError) -> dict:
    error = {"path": e.path, "message": e.message}
    if e.cell is not None:
        error.update(cell=e.cell, cell_line=e.cell_line, cell_column=e.cell_column)
    return error


def to_json(diagnostics: Sequence[Diagnostic], errors: Sequence[FileError], target: Target) -> str:
    """The report as ``json.dumps(payload, indent=2)`` would write it, character for character;
    each finding is written from one template (a warm run on 10,000 files reports 30,000)."""
    parts = ['{\n  "version": ', _escape(__version__), ',\n  "target": ']
    _write_json({"gpu": target.name, "source": target.source}, "\n  ", parts)
    parts.append(',\n  "findings": ')
    if diagnostics:
        separator = "[\n    "
        for d in diagnostics:
            parts.append(separator)
            _write_finding(d, parts)
            separator = ",\n    "
        parts.append("\n  ]")
    else:
        parts.append("[]")
    parts.append(',\n  "errors": ')
    _write_json([_error_json(e) for e in errors], "\n  ", parts)
    parts.append("\n}")
    return "".join(parts)


def _write_finding(d: Diagnostic, parts: list[str]) -> None:
    """One finding of :func:`to_json`, at its depth in the report."""
    parts.append(
        f'{{\n      "path": {_escape(d.path)},\n      "line": {_int(d.line)},\n      "column": {_int(d.column)},'
        f'\n      "end_line": {_int(d.end_line)},\n      "end_column": {_int(d.end_column)},'
        f'\n      "code": {_escape(d.code)},\n      "name": {_escape(d.name)},\n      "message": {_escape(d.message)},'
        '\n      "fix": '
    )
    if d.fix_applicability is None:
        parts.append("null")
    else:
        _write_json(_fix_json(d), "\n      ", parts)
    for key, value in _cell_fields(d).items():
        parts.append(f',\n      "{key}": ')
        _write_json(value, "\n      ", parts)
    parts.append("\n    }")


def _int(value: object) -> str:
    """A position as the standard encoder writes it (an int; anything else as json.dumps would)."""
    return int.__repr__(value) if value.__class__ is int else json.dumps(value)  # type: ignore[arg-type]


def _fix_json(d: Diagnostic) -> dict:
    fix: dict = {"applicability": d.fix_applicability, "description": d.fix_description}
    if d.fix_edits is not None:
        fix["edits"] = d.fix_edits
    return fix


def indented_json(value: object) -> str:
    """``json.dumps(value, indent=2)``, character for character, for the JSON types reports use.

    With ``indent``, the standard library falls back to its pure-Python encoder, a generator per
    value: on 30,000 findings that was most of a warm run. Strings still go through its C escaping."""
    parts: list[str] = []
    _write_json(value, "\n", parts)
    return "".join(parts)


_escape = json.encoder.encode_basestring_ascii  # what json.dumps uses (ensure_ascii=True)
# Dictionary keys as written, with their ": ": a report repeats the same dozen keys per finding.
_KEYS: dict[str, str] = {}


def _write_json(value: object, newline: str, parts: list[str]) -> None:
    kind = value.__class__
    if kind is str:
        parts.append(_escape(value))  # type: ignore[arg-type]
    elif kind is dict:
        if not value:
            parts.append("{}")
            return
        inner = newline + "  "
        separator = "{" + inner
        for key, item in value.items():  # type: ignore[attr-defined]
            parts.append(separator)
            escaped = _KEYS.get(key) if key.__class__ is str else None
            if escaped is None:
                escaped = _escape(key if key.__class__ is str else json.dumps(key)) + ": "
                if key.__class__ is str and len(_KEYS) < 4096:  # 1 and True are one dict key, two spellings
                    _KEYS[key] = escaped
            parts.append(escaped)
            _write_json(item, inner, parts)
            separator = "," + inner
        parts.append(newline + "}")
    elif kind is list or kind is tuple:
        if not value:
            parts.append("[]")
            return
        inner = newline + "  "
        separator = "[" + inner
        for item in value:  # type: ignore[attr-defined]
            parts.append(separator)
            _write_json(item, inner, parts)
            separator = "," + inner
        parts.append(newline + "]")
    elif kind is int:
        parts.append(int.__repr__(value))  # type: ignore[arg-type]  # as the standard encoder spells it
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    else:  # floats and the rest: the standard encoder's spelling
        parts.append(json.dumps(value))


def to_sarif(diagnostics: Sequence[Diagnostic], errors: Sequence[FileError], target: Target) -> str:
    rules = list(all_rules())
    index = {rule.code: i for i, rule in enumerate(rules)}
    descriptors = [
        {
            "id": rule.code,
            "name": rule.name,
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.summary},
            "help": {"text": rule.summary, "markdown": rule.documentation()},
            "defaultConfiguration": {"level": "warning"},
            "properties": {"fix": rule.fix_applicability.value, "guide": rule.guide},
        }
        for rule in rules
    ]
    results = []
    for d in diagnostics:
        result = {
            "ruleId": d.code,
            "level": "warning",
            "message": {"text": d.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _uri(d.path)},
                        "region": {
                            "startLine": d.line,
                            "startColumn": d.column,
                            "endLine": d.end_line,
                            "endColumn": d.end_column,
                        },
                    }
                }
            ],
        }
        if d.code in index:
            result["ruleIndex"] = index[d.code]
        if d.fix_applicability:
            result["properties"] = {"fix": {"applicability": d.fix_applicability, "description": d.fix_description}}
        if d.cell is not None:  # the region is in the .ipynb file's text; the cell, for people
            result.setdefault("properties", {})["cell"] = {
                "index": d.cell, "startLine": d.cell_line, "startColumn": d.cell_column,
                "endLine": d.cell_end_line, "endColumn": d.cell_end_column,
            }
        results.append(result)
    notifications = [
        {
            "level": "error",
            "message": {"text": f"{e.path}: {e.message}"},
            "descriptor": {"id": e.code},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(e.path)}}}],
        }
        for e in errors
    ]
    run = {
        "tool": {
            "driver": {
                "name": "advisor",
                "version": __version__,
                "informationUri": INFORMATION_URI,
                "rules": descriptors,
            }
        },
        "results": results,
        "invocations": [
            {
                "executionSuccessful": not errors,
                "toolExecutionNotifications": notifications,
            }
        ],
        "properties": {"target": {"gpu": target.name, "source": target.source}},
    }
    sarif = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [run],
    }
    return indented_json(sarif)


def _uri(path: str) -> str:
    """A relative URI reference (RFC 3986), as SARIF requires: ``my scripts/t.py`` -> ``my%20scripts/t.py``."""
    return urllib.parse.quote(path.replace("\\", "/").removeprefix("./"), safe="/")


def _github_escape(text: str, property_value: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def to_github(diagnostics: Sequence[Diagnostic], errors: Sequence[FileError]) -> str:
    lines = []
    for e in errors:
        in_cell = f"{where(e)}: " if e.cell is not None else ""
        lines.append(
            f"::error file={_github_escape(e.path, True)},line={e.line},col={e.column},title={e.code}"
            f"::{_github_escape(in_cell + e.message)}"
        )
    for d in diagnostics:
        in_cell = f"{where(d)}: " if d.cell is not None else ""  # the line in the .ipynb file is JSON: say the cell
        lines.append(
            f"::warning file={_github_escape(d.path, True)},line={d.line},col={d.column},"
            f"endLine={d.end_line},endColumn={d.end_column},title={d.code} {_github_escape(d.name, True)}"
            f"::{_github_escape(in_cell + d.code + ' ' + d.message)}"
        )
    return "\n".join(lines)


def statistics(diagnostics: Sequence[Diagnostic], errors: Sequence[FileError], as_json: bool = False) -> str:
    """ruff's ``--statistics``: one row per rule, most frequent first: count, code, ``[*]`` when
    every finding of it has a safe fix, name."""
    from collections import Counter

    counts = Counter(d.code for d in diagnostics)
    counts.update(e.code for e in errors)
    safe = {d.code for d in diagnostics if d.fix_applicability == "safe"} - {
        d.code for d in diagnostics if d.fix_applicability != "safe"
    }
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    names = {d.code: d.name for d in diagnostics}
    names.update({e.code: "file-not-analyzed" for e in errors})
    if as_json:
        return indented_json([
            {"code": code, "name": names[code], "count": count, "fixable": code in safe} for code, count in rows
        ])
    width = max((len(str(count)) for _, count in rows), default=1)
    return "\n".join(
        f"{count:>{width}}\t{code}\t{'[*] ' if code in safe else '    '}{names[code]}" for code, count in rows
    )


def rules_json() -> str:
    return indented_json([
        {
            "code": rule.code,
            "name": rule.name,
            "summary": rule.summary,
            "fix": rule.fix_applicability.value,
            "guide": rule.guide,
        }
        for rule in all_rules()
    ])


ADV000_DOC = """# ADV000 file-not-analyzed

A file advisor could not analyze: a syntax error (reported at the line and column Python
gives, with Python's message), bytes that do not decode in the file's declared encoding, a file
that cannot be read, or code nested too deeply for the parser. It is reported as an error, and
`advisor check` exits 2.

## Fix safety
No automatic fix: correct the file, or exclude it (`[tool.advisor] exclude`).
"""


def rules_table(console: Console) -> None:
    from rich.table import Table

    table = Table(title="advisor rules", show_lines=False)
    for column in ("Code", "Name", "Fix", "Guide section", "Summary"):
        table.add_column(column, overflow="fold")
    for rule in all_rules():
        table.add_row(rule.code, rule.name, rule.fix_applicability.value, rule.guide, rule.summary)
    console.print(table)


def explain(console: Console, code: str) -> bool:
    if code.strip().upper() == "ADV000":
        documentation = ADV000_DOC
    else:
        rule = rule_by_code(code)
        if rule is None:
            return False
        documentation = rule.documentation()
    if console.is_terminal:
        from rich.markdown import Markdown

        console.print(Markdown(documentation))
    else:
        console.print(documentation, markup=False, highlight=False, soft_wrap=True)
    return True
