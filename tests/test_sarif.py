"""`advisor check --format sarif` against the official SARIF 2.1.0 schema and the spec's rules.

The schema (tests/data/sarif-schema-2.1.0.json, see tests/data/README.md) checks the shape.
What it cannot check is checked here by hand: results point at the right place, regions
follow SARIF's 1-based, end-exclusive columns, rule metadata covers every reported rule,
and artifact URIs are URI references (the schema's `format` only binds when optional
packages are installed, so it is not relied upon).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import urllib.parse
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra: pip install -e '.[test]'")

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = Path(__file__).resolve().parent / "data" / "sarif-schema-2.1.0.json"

FIXABLE = textwrap.dedent(
    """\
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=32)  # keep this comment
    model = model.cuda()
    """
)
CLEAN = FIXABLE.replace("batch_size=32)", "batch_size=32, pin_memory=True)")
# A fixed GPU keeps results independent of the machine the tests run on.
PYPROJECT = '[tool.advisor]\ngpu = "A100"\n'

# RFC 3986 URI-reference characters: unreserved, reserved, and percent-encoded octets.
URI_REFERENCE = re.compile(r"^(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?#\[\]]|%[0-9A-Fa-f]{2})*$")
TEXT_FINDING = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<column>\d+): (?P<code>ADV\d{3})\b")


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)


def assert_valid(validator, log: dict) -> None:
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.absolute_path))
    assert not errors, "SARIF log does not match the 2.1.0 schema:\n" + "\n".join(
        f"  /{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors
    )


def advisor(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "advisor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def sarif(*paths: str, cwd: Path) -> tuple[int, dict]:
    completed = advisor("check", "--format", "sarif", *paths, cwd=cwd)
    assert completed.returncode in (0, 1, 2), completed.stderr
    try:
        log = json.loads(completed.stdout)
    except json.JSONDecodeError as error:  # pragma: no cover - message for the failure
        pytest.fail(f"--format sarif did not print JSON ({error}):\n{completed.stdout}\n{completed.stderr}")
    return completed.returncode, log


def only_run(log: dict) -> dict:
    assert log["version"] == "2.1.0"
    if "$schema" in log:
        assert "2.1.0" in log["$schema"]
    assert len(log["runs"]) == 1, "one invocation of advisor is one run"
    return log["runs"][0]


def physical(result: dict) -> dict:
    assert result["locations"], f"{result['ruleId']}: a result without a location cannot be shown in code"
    return result["locations"][0]["physicalLocation"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "train.py").write_text(FIXABLE)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


@pytest.fixture
def fixture_scripts(tmp_path: Path) -> Path:
    """The repository's sample training scripts, away from its config (which excludes them)."""
    sources = sorted((REPO_ROOT / "fixtures").glob("*.py"))
    if not sources:
        pytest.skip("no fixture scripts in this checkout")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "scripts").mkdir()
    for source in sources:
        shutil.copy(source, tmp_path / "scripts" / source.name)
    return tmp_path


def test_report_with_findings_matches_the_schema(project: Path, validator):
    code, log = sarif("train.py", cwd=project)
    assert code == 1
    assert_valid(validator, log)
    run = only_run(log)
    assert run["tool"]["driver"]["name"] == "advisor"
    assert run["results"], "the script has an ADV101 problem"


def test_result_names_the_rule_and_the_exact_region(project: Path, validator):
    _, log = sarif("--select", "ADV101", "train.py", cwd=project)
    assert_valid(validator, log)
    (result,) = only_run(log)["results"]
    assert result["ruleId"] == "ADV101"
    assert result.get("level", "warning") in ("note", "warning", "error")
    assert "pin_memory=True" in result["message"]["text"]
    location = physical(result)
    assert location["artifactLocation"]["uri"] == "train.py"
    region = location["region"]
    assert (region["startLine"], region["startColumn"]) == (4, 10)
    # SARIF columns are 1-based and endColumn is the column just past the region.
    assert region.get("endLine", region["startLine"]) == 4
    line = FIXABLE.splitlines()[3]
    assert line[region["startColumn"] - 1 : region["endColumn"] - 1] == "DataLoader(dataset, batch_size=32)"


def test_rule_metadata_covers_every_reported_code(fixture_scripts: Path, validator):
    _, log = sarif("scripts", cwd=fixture_scripts)
    assert_valid(validator, log)
    run = only_run(log)
    rules = run["tool"]["driver"]["rules"]
    ids = [rule["id"] for rule in rules]
    assert len(ids) == len(set(ids)), "rule ids must be unique"
    assert all(re.fullmatch(r"ADV\d{3}", rule_id) for rule_id in ids), ids
    for rule in rules:
        assert rule["shortDescription"]["text"].strip(), rule["id"]
    assert run["results"], "the fixture scripts exist to have findings"
    for result in run["results"]:
        assert result["ruleId"] in ids, f"{result['ruleId']} is reported but has no rule metadata"
        if "ruleIndex" in result:
            assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        uri = physical(result)["artifactLocation"]["uri"]
        assert uri.startswith("scripts/") and URI_REFERENCE.match(uri), uri


def test_rule_metadata_describes_adv101(project: Path):
    _, log = sarif("train.py", cwd=project)
    rules = {rule["id"]: rule for rule in only_run(log)["tool"]["driver"]["rules"]}
    assert rules["ADV101"].get("name") == "dataloader-pin-memory"


def test_sarif_reports_what_the_text_format_reports(fixture_scripts: Path):
    text = advisor("check", "--no-color", "scripts", cwd=fixture_scripts)
    from_text = {
        (m["path"].replace("\\", "/"), int(m["line"]), int(m["column"]), m["code"])
        for m in map(TEXT_FINDING.match, text.stdout.splitlines())
        if m
    }
    _, log = sarif("scripts", cwd=fixture_scripts)
    from_sarif = set()
    for result in only_run(log)["results"]:
        location = physical(result)
        from_sarif.add(
            (
                urllib.parse.unquote(location["artifactLocation"]["uri"]),
                location["region"]["startLine"],
                location["region"]["startColumn"],
                result["ruleId"],
            )
        )
    assert from_text, text.stdout
    assert from_sarif == from_text


def test_clean_script_gives_an_empty_result_list(project: Path, validator):
    code, log = sarif("clean.py", cwd=project)
    assert code == 0
    assert_valid(validator, log)
    # An empty array, not a missing one: SARIF reads a missing `results` as "did not run".
    assert only_run(log)["results"] == []


def test_file_that_cannot_be_analyzed_is_a_notification(project: Path, validator):
    (project / "broken.py").write_text("import torch\ndef train(:\n")
    code, log = sarif("broken.py", "train.py", cwd=project)
    assert code == 2
    assert_valid(validator, log)
    run = only_run(log)
    assert [r["ruleId"] for r in run["results"]] == ["ADV101"], "other files are still analyzed"
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    notifications = invocation["toolExecutionNotifications"]
    assert any("broken.py" in n["message"]["text"] and n.get("level") == "error" for n in notifications)


def test_artifact_uri_is_percent_encoded(project: Path, validator):
    folder = project / "my scripts"
    folder.mkdir()
    (folder / "train.py").write_text(FIXABLE)
    _, log = sarif("--select", "ADV101", "my scripts/train.py", cwd=project)
    assert_valid(validator, log)
    (result,) = only_run(log)["results"]
    uri = physical(result)["artifactLocation"]["uri"]
    assert URI_REFERENCE.match(uri), f"{uri!r} is not a URI reference: SARIF URI-valued properties hold RFC 3986 URIs, spaces as %20"
    assert urllib.parse.unquote(uri) == "my scripts/train.py"
