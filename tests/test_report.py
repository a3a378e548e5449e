"""The JSON writer behind `--format json` and `--format sarif` spells what `json.dumps(indent=2)` spells."""
from __future__ import annotations

import json

import pytest

from advisor.report import indented_json

PAYLOADS = [
    {},
    [],
    "plain",
    0,
    None,
    {"findings": [], "errors": [], "target": {}},
    {"message": "quotes \" backslash \\ newline \n tab \t non-ASCII é 漢 \u2028 control \x01"},
    {"numbers": [1, -2, 2.5, 1e-300, 10**20], "flags": [True, False, None]},
    {"nested": {"deeper": [[], [{}], [[1, [2, {"k": "v"}]]]]}},
    {1: "int key", True: "bool key", None: "null key", 2.5: "float key"},
    ("a", "tuple"),
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_same_text_as_the_standard_library(payload):
    assert indented_json(payload) == json.dumps(payload, indent=2)


def test_piped_text_is_what_rich_would_print():
    """Piped output skips rich's markup round trip for the findings; the text must not change."""
    import io

    from rich.console import Console

    from advisor.engine import Diagnostic
    from advisor.report import render_text
    from helpers import target_for

    findings = [
        Diagnostic("train.py", 3, 5, 3, 9, "ADV101", "pin", "DataLoader without `pin_memory=True` [brackets] \\[x] (guide: Data preloading)", "safe"),
        Diagnostic("nb.ipynb", 7, 1, 7, 2, "ADV701", "sync", "`loss.item()` makes the CPU wait: [bold]not markup[/bold] é 漢", None,
                   cell=2, cell_line=3, cell_column=1),
        Diagnostic("a path/with [odd] name.py", 1, 1, 1, 2, "ADV204", "amp", "`torch.cuda.amp.GradScaler(...)` is deprecated", "unsafe"),
    ]
    target = target_for("A100")
    piped = io.StringIO()
    render_text(Console(file=piped, highlight=False, no_color=True, soft_wrap=True, emoji=False), findings, [], target)
    recorded = Console(file=io.StringIO(), record=True, highlight=False, no_color=True, soft_wrap=True, emoji=False)
    render_text(recorded, findings, [], target)
    assert piped.getvalue() == recorded.export_text()
    assert "train.py:3:5: ADV101 [*] DataLoader" in piped.getvalue()


def test_indented_json_spells_keys_as_json_dumps_does_whatever_came_before():
    # Escaped keys are reused across calls; 1 and True are one dict key with two spellings.
    import json

    from advisor.report import indented_json

    for value in ({True: "a"}, {1: "b"}, {"path": "x", "line": 1}, {1.5: None}):
        assert indented_json(value) == json.dumps(value, indent=2)


def test_json_report_is_what_json_dumps_writes_for_every_kind_of_finding():
    """`to_json` writes each finding from a template: the text must stay that of
    `json.dumps(payload, indent=2)` for findings with and without fixes, edits and cells."""
    from advisor.engine import Diagnostic, FileError
    from advisor.report import to_json
    from helpers import target_for

    findings = [
        Diagnostic("train.py", 3, 5, 3, 9, "ADV101", "pin", "quotes \" backslash \\ é 漢 \u2028", "safe", "Pass `pin_memory=True`",
                   [{"start": [3, 5], "end": [3, 9], "text": "x\n"}]),
        Diagnostic("b.py", 1, 1, 1, 2, "ADV204", "amp", "deprecated", "unsafe", "Rename", None),
        Diagnostic("c.py", 10, 1, 12, 2, "ADV701", "sync", "no fix", None),
        Diagnostic("nb.ipynb", 7, 1, 7, 2, "ADV701", "sync", "in a cell", None, cell=2, cell_line=3, cell_column=1,
                   cell_end_line=3, cell_end_column=4),
    ]
    errors = [FileError("bad.py", "cannot parse", "E999", 2, 3)]
    for diagnostics, errs in ((findings, errors), ([], []), (findings[:1], [])):
        text = to_json(diagnostics, errs, target_for("A100"))
        assert text == json.dumps(json.loads(text), indent=2)
        assert [f["code"] for f in json.loads(text)["findings"]] == [d.code for d in diagnostics]
