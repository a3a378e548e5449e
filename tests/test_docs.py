"""Documentation generated from the rules stays in step with them."""
from __future__ import annotations

from pathlib import Path

import pytest

from advisor.docs import rules_markdown
from advisor.registry import all_rules

ROOT = Path(__file__).resolve().parent.parent


def test_rules_doc_is_fresh():
    committed = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert committed == rules_markdown(), "docs/rules.md is stale: run `python -m advisor.docs > docs/rules.md`"


def test_readme_lists_every_rule():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [rule.code for rule in all_rules() if f"| {rule.code} |" not in readme]
    assert not missing, f"README rule table lacks {missing}"


def test_every_rule_cites_the_guide_in_its_message_docs():
    for rule in all_rules():
        assert rule.guide, rule.code
        assert rule.code.startswith("ADV") and len(rule.code) == 6


def test_readme_terminal_example_is_real_output():
    """The README shows `advisor check` on a shipped fixture: it must be what advisor prints."""
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = "$ advisor check fixtures/plain_pytorch.py\n"
    start = readme.index(command) + len(command)
    shown = readme[start : readme.index("```", start)]
    completed = subprocess.run(
        [sys.executable, "-m", "advisor", "check", "--no-color", "fixtures/plain_pytorch.py"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert completed.returncode == 1
    if completed.stdout.splitlines()[0] != shown.splitlines()[0]:
        pytest.skip("this machine has a GPU: the example was taken with the assumed target")
    assert shown == completed.stdout
