"""argparse defaults behind the common `args = parse_args()` helper function."""
from __future__ import annotations

import textwrap

import libcst as cst

from advisor.context import FileContext
from advisor.targets import ASSUMED

HELPER = """
import argparse

def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--use-cpu", action="store_true")
    {body}

def main():
    args = parse_args()
    use(args.batch_size, args.use_cpu)
"""


def resolved(body: str):
    source = textwrap.dedent(HELPER).replace("{body}", textwrap.dedent(body).strip().replace("\n", "\n    "))
    ctx = FileContext.from_source("t.py", source, ASSUMED)
    call = [c for c in ctx.nodes(cst.Call) if ctx.code(c.func) == "use"][0]
    return [ctx.values.value_of(arg.value) for arg in call.args]


def test_defaults_through_a_helper_returning_parse_args():
    assert resolved("return parser.parse_args()") == [8, False]


def test_defaults_through_a_helper_returning_its_namespace():
    assert resolved("args = parser.parse_args()\nif args.batch_size < 1:\n    raise SystemExit\nreturn args") == [8, False]


def test_a_value_changed_in_the_helper_is_unknown():
    assert resolved("args = parser.parse_args()\nargs.batch_size = 2 * args.batch_size\nreturn args") == [None, False]


def test_a_helper_that_parses_given_argv_is_unknown():
    assert resolved("return parser.parse_args(['--batch-size', '4'])") == [None, None]


def test_a_helper_with_another_return_is_unknown():
    assert resolved("if x:\n    return load_config()\nreturn parser.parse_args()") == [None, None]
