"""Every rule's own valid/invalid examples, turned into tests (as in Fixit)."""
from __future__ import annotations

import textwrap

import pytest

from advisor.registry import all_rules
from helpers import fix, lint


def _cases(kind: str):
    for rule in all_rules():
        for index, example in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, example, id=f"{rule.code}-{kind}-{index}")


@pytest.mark.parametrize("rule,example", list(_cases("valid")))
def test_valid_example_is_silent(rule, example):
    found = [d for d in lint(example.code, codes=[rule.code], gpu=example.gpu) if d.code == rule.code]
    assert found == [], f"{rule.code} must stay silent ({example.note}):\n{example.code}"


@pytest.mark.parametrize("rule,example", list(_cases("invalid")))
def test_invalid_example_is_reported(rule, example):
    found = [d for d in lint(example.code, codes=[rule.code], gpu=example.gpu) if d.code == rule.code]
    assert len(found) == example.count, f"{rule.code} expected {example.count} finding(s), got {found}"


@pytest.mark.parametrize("rule,example", list(_cases("invalid")))
def test_invalid_example_fix_output(rule, example):
    """The example's fixed code is what ``fix --verify --unsafe-fixes`` applies: every fix,
    the measured ones included."""
    result = fix(example.code, codes=[rule.code], gpu=example.gpu, unsafe=True, measured=True)
    fixed = result.fixed.decode()
    if example.fixed is None:
        assert fixed == textwrap.dedent(example.code), f"{rule.code} has no fix here but changed the code"
        return
    assert fixed == textwrap.dedent(example.fixed)
    compile(fixed, "fixed.py", "exec")
    again = fix(fixed, codes=[rule.code], gpu=example.gpu, unsafe=True, measured=True)
    assert again.fixed.decode() == fixed, "fix is not idempotent"


@pytest.mark.parametrize("rule,example", [c for c in _cases("invalid") if c.values[1].fixed is not None])
def test_measured_fixes_wait_for_a_measurement(rule, example):
    """A measured fix (its gain depends on sizes the code does not show) is left as advice by
    ``fix --unsafe-fixes``; only ``fix --verify`` applies it."""
    found = [d for d in lint(example.code, codes=[rule.code], gpu=example.gpu) if d.code == rule.code]
    if not any(d.fix_applicability == "measured" for d in found):
        return
    plain = fix(example.code, codes=[rule.code], gpu=example.gpu, unsafe=True).fixed.decode()
    assert plain != textwrap.dedent(example.fixed), f"{rule.code}: a measured fix was applied without a measurement"


def test_every_rule_has_examples_and_docs():
    for rule in all_rules():
        assert rule.valid, f"{rule.code} has no valid examples"
        assert rule.invalid, f"{rule.code} has no invalid examples"
        for attribute in ("name", "summary", "guide", "why", "example", "use_instead", "silent_when"):
            assert getattr(rule, attribute), f"{rule.code} lacks {attribute}"


@pytest.mark.parametrize("rule,example", [c for c in _cases("invalid") if c.values[1].fixed is not None])
def test_invalid_example_fix_safety(rule, example):
    """An example of an unsafe fix (the rule's, or one marked ``unsafe``) is not fixed without
    ``--unsafe-fixes``; any other is fixed in full by the safe fixes alone (what the pre-commit
    hook applies)."""
    from advisor.rule import Applicability

    safe = fix(example.code, codes=[rule.code], gpu=example.gpu, unsafe=False).fixed.decode()
    risky = (Applicability.UNSAFE, Applicability.MEASURED)
    unsafe = example.unsafe if example.unsafe is not None else rule.fix_applicability in risky
    if unsafe:
        assert safe != textwrap.dedent(example.fixed), f"{rule.code}: marked unsafe, but the safe fixes make the change"
    else:
        assert safe == textwrap.dedent(example.fixed), f"{rule.code}: the safe fixes alone do not give the fixed code"
