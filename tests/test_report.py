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
