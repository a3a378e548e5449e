"""Snapshot tests over the realistic training scripts in ``fixtures/``.

For every ``fixtures/**/X.py``:

- ``X.expected`` holds what ``advisor check`` reports with every rule on the default
  (assumed Ampere-or-newer) target, one ``LINE:COL: CODE message`` per line;
- ``X.fixed`` holds what ``advisor fix --unsafe-fixes`` makes of it.

The fixed file must compile, leave no fixable finding behind, and a second fix run must
change nothing. Scripts under ``SILENT`` must produce no finding at all; this is checked
on its own, so regenerating the snapshots cannot quietly accept a false positive.

Regenerate the snapshots after a deliberate change with::

    ADVISOR_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_fixtures.py

and read the diff: every new line is a claim about a real script.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.engine import Diagnostic, check_file
from advisor.fixer import fix_source
from helpers import settings

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
UPDATE = os.environ.get("ADVISOR_UPDATE_SNAPSHOTS") == "1"

# Scripts that do nothing wrong: any finding on them is a false positive.
SILENT = {"clean.py", "cpu_only.py"}
# Look-alikes are real-shaped scripts built around code that resembles a problem and is not
# one. Each must stay silent on the rules its look-alike probes, and on every rule it was
# verified silent against when it was written; what other rules find in it (a real
# script has more than one trait) is in its snapshot, and each such line was read.
FOUNDATION_CODES = {
    "ADV101", "ADV102", "ADV103", "ADV104", "ADV201", "ADV204", "ADV205",
    "ADV301", "ADV302", "ADV303", "ADV401", "ADV601",
}
LOOKALIKES = {
    "lookalikes/accelerate_accumulate.py": FOUNDATION_CODES | {"ADV203", "ADV602"},
    "lookalikes/bf16_fallback.py": FOUNDATION_CODES | {"ADV202", "ADV203", "ADV206"},
    "lookalikes/gan_two_optimizers.py": FOUNDATION_CODES,
    "lookalikes/hf_argparser.py": FOUNDATION_CODES | {"ADV202", "ADV203", "ADV402", "ADV502", "ADV602"},
    "lookalikes/lightning_cli.py": FOUNDATION_CODES | {"ADV203", "ADV402", "ADV701"},
    "lookalikes/log_interval_item.py": FOUNDATION_CODES | {"ADV701", "ADV706"},
    "lookalikes/mnist_kwargs.py": FOUNDATION_CODES,
    "lookalikes/nanogpt_style.py": FOUNDATION_CODES | {"ADV202", "ADV203", "ADV602"},
    "lookalikes/third_party_optimizers.py": FOUNDATION_CODES | {"ADV504"},
    "lookalikes/trainer_bf16_fallback.py": FOUNDATION_CODES | {"ADV202", "ADV203"},
    "lookalikes/trainer_vars_args.py": FOUNDATION_CODES | {"ADV202", "ADV203", "ADV402", "ADV602"},
}
# Scripts that must be reported, and the codes each must at least carry: a rule that
# goes quiet on its headline case fails here even if someone regenerates the snapshots.
REQUIRED_CODES = {
    "plain_pytorch.py": {"ADV101", "ADV102", "ADV201", "ADV204", "ADV302", "ADV303", "ADV401", "ADV601"},
    "hf_trainer.py": {"ADV104", "ADV201", "ADV401", "ADV601"},
    "accelerate_loop.py": {"ADV105", "ADV201", "ADV601"},
    "nanogpt_globals.py": {"ADV201", "ADV204", "ADV305", "ADV403", "ADV601", "ADV604", "ADV704"},
    "hf_no_trainer.py": {"ADV101", "ADV102", "ADV201", "ADV401", "ADV505", "ADV601", "ADV701", "ADV705"},
    "trainer_dataclass_args.py": {"ADV401", "ADV403", "ADV601", "ADV603"},
    "lightning_module.py": {"ADV101", "ADV201", "ADV601", "ADV605", "ADV701"},
    "gan_loop.py": {"ADV105", "ADV203", "ADV601", "ADV602", "ADV605", "ADV701", "ADV704"},
    "hand_attention.py": {"ADV202", "ADV203", "ADV601", "ADV602", "ADV604"},
}


def _fixture_names() -> list[str]:
    return sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*.py"))


FIXTURE_NAMES = _fixture_names()


def format_findings(diagnostics: list[Diagnostic]) -> str:
    lines = [f"{d.line}:{d.column}: {d.code} {d.message}" for d in sorted(diagnostics, key=Diagnostic.sort_key)]
    return "".join(line + "\n" for line in lines)


def check(name: str) -> list[Diagnostic]:
    path = FIXTURES / name
    result = check_file(str(path), settings())
    assert not result.errors, [e.message for e in result.errors]
    return result.diagnostics


def fix(name: str, data: bytes):
    return fix_source(str(FIXTURES / name), data, settings(), unsafe=True)


def compare_snapshot(snapshot: Path, actual: str) -> None:
    if UPDATE:
        snapshot.write_text(actual, encoding="utf-8")
        return
    assert snapshot.exists(), f"{snapshot.name} is missing: run with ADVISOR_UPDATE_SNAPSHOTS=1"
    assert actual == snapshot.read_text(encoding="utf-8"), f"{snapshot.name} differs from the snapshot"


def test_every_fixture_is_listed():
    listed = set(REQUIRED_CODES) | SILENT | set(LOOKALIKES)
    assert listed == set(FIXTURE_NAMES), "new fixture: say whether it is silent, a look-alike, or what it needs"


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_findings_match_snapshot(name):
    compare_snapshot((FIXTURES / name).with_suffix(".expected"), format_findings(check(name)))


@pytest.mark.parametrize("name", sorted(SILENT))
def test_silent_fixture_reports_nothing(name):
    assert format_findings(check(name)) == ""


@pytest.mark.parametrize("name", sorted(LOOKALIKES))
def test_lookalike_stays_silent_on_the_rules_it_probes(name):
    wrong = sorted({d.code for d in check(name)} & LOOKALIKES[name])
    assert not wrong, f"{name}: false positives {wrong}"


@pytest.mark.parametrize("name", sorted(REQUIRED_CODES))
def test_problem_fixture_reports_its_headline_problems(name):
    missing = REQUIRED_CODES[name] - {d.code for d in check(name)}
    assert not missing, f"{name}: no {sorted(missing)} finding"


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fix_matches_snapshot(name):
    original = (FIXTURES / name).read_bytes()
    result = fix(name, original)
    assert not result.errors, [e.message for e in result.errors]
    assert not result.dropped, f"fixes that would have broken the file: {result.dropped}"
    fixed = result.fixed.decode("utf-8")
    compare_snapshot((FIXTURES / name).with_suffix(".fixed"), fixed)

    compile(fixed, name, "exec", dont_inherit=True)
    # What is left with a fix is only what `fix --verify` measures first (compile, workers).
    fixable = [
        f"{d.line}: {d.code} {d.fix_description}" for d in result.remaining if d.fix_applicability not in (None, "measured")
    ]
    assert not fixable, f"fixable findings left after fixing: {fixable}"

    again = fix(name, result.fixed)
    assert again.fixed == result.fixed, "a second fix run changed the file again"
    assert not again.applied


@pytest.mark.parametrize("name", sorted(SILENT))
def test_silent_fixture_is_left_unchanged(name):
    original = (FIXTURES / name).read_bytes()
    assert fix(name, original).fixed == original


# -- the same through the command line ------------------------------------------------------
# An explicit `--gpu A100` keeps the run independent of the machine's own GPU; A100 has the
# assumed target's capabilities, so the findings and fixes are the same (messages name the GPU).
CLI_GPU = "A100"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "advisor", *args, "--gpu", CLI_GPU, "--no-color"],
        cwd=cwd, capture_output=True, text=True, timeout=120,
    )


def _expected_positions(name: str) -> list[tuple[int, int, str]]:
    expected = (FIXTURES / name).with_suffix(".expected").read_text(encoding="utf-8").splitlines()
    positions = []
    for line in expected:
        where, rest = line.split(": ", 1)
        row, column = where.split(":")
        positions.append((int(row), int(column), rest.split(" ", 1)[0]))
    return positions


@pytest.mark.parametrize("name", sorted(REQUIRED_CODES))
def test_cli_check_reports_the_snapshot(name):
    completed = _cli("check", "--format", "json", "--exit-zero", f"fixtures/{name}", cwd=FIXTURES.parent)
    assert completed.returncode == 0, completed.stderr
    findings = json.loads(completed.stdout)["findings"]
    assert sorted((f["line"], f["column"], f["code"]) for f in findings) == sorted(_expected_positions(name))


@pytest.mark.parametrize("name", sorted(REQUIRED_CODES))
def test_cli_fix_writes_the_snapshot(name, tmp_path):
    copy = tmp_path / Path(name).name
    shutil.copyfile(FIXTURES / name, copy)
    completed = _cli("fix", "--unsafe-fixes", copy.name, cwd=tmp_path)
    assert completed.returncode in (0, 1), completed.stderr
    assert copy.read_text(encoding="utf-8") == (FIXTURES / name).with_suffix(".fixed").read_text(encoding="utf-8")
