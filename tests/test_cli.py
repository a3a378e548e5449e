"""The command line as a user drives it: exit codes, formats, config, suppressions, fix."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from advisor.cli import main

PROBLEM = textwrap.dedent(
    """\
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=32, num_workers=2)  # keep this comment
    model = model.cuda()
    """
)
CLEAN = textwrap.dedent(
    """\
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=32, num_workers=2, pin_memory=True)
    model = model.cuda()
    """
)


def run(args, capsys, cwd: Path):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        code = main(args)
    finally:
        os.chdir(old)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(PROBLEM)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def test_exit_codes_and_text_format(project, capsys):
    code, out, _ = run(["check", "train.py", "--select", "ADV101"], capsys, project)
    assert code == 1
    assert "train.py:4:10: ADV101 [*] DataLoader without `pin_memory=True`" in out
    assert "1 finding, 1 fixable." in out
    assert "target:" in out.splitlines()[0]
    code, out, _ = run(["check", "clean.py"], capsys, project)
    assert code == 0 and "All checks passed." in out


def test_positions_are_printed_as_numbers_not_emoji_codes(tmp_path, capsys):
    # Rich reads ``:100:`` as an emoji code; a finding on line 100 must still print its line.
    (tmp_path / "train.py").write_text("import torch\n" + "\n" * 98 + "loader = torch.utils.data.DataLoader(ds, num_workers=2)\nx.cuda()\n")
    code, out, _ = run(["check", "train.py", "--select", "ADV101"], capsys, tmp_path)
    assert code == 1
    assert "train.py:100:10: ADV101" in out


def test_folder_walk_skips_virtualenvs_and_caches(project, capsys):
    for folder in (".venv", "build", "__pycache__", ".git"):
        (project / folder).mkdir()
        (project / folder / "train.py").write_text(PROBLEM)
    code, out, _ = run(["check", ".", "--format", "json"], capsys, project)
    paths = {f["path"] for f in json.loads(out)["findings"]}
    assert paths == {"./train.py"}


def test_json_contract(project, capsys):
    code, out, _ = run(["check", "train.py", "--format", "json", "--gpu", "A100"], capsys, project)
    payload = json.loads(out)
    assert set(payload) == {"version", "target", "findings", "errors"}
    assert payload["target"] == {"gpu": "A100-80GB", "source": "--gpu"}
    (finding,) = [f for f in payload["findings"] if f["code"] == "ADV101"]
    assert set(finding) == {
        "path", "line", "column", "end_line", "end_column", "code", "name", "message", "fix",
    }
    assert finding["fix"]["applicability"] == "safe"
    assert (finding["line"], finding["column"]) == (4, 10)


def test_github_annotations(project, capsys):
    code, out, _ = run(["check", "train.py", "--format", "github", "--select", "ADV101"], capsys, project)
    assert out.startswith("::warning file=train.py,line=4,col=10,")
    assert "title=ADV101 dataloader-pin-memory::ADV101 " in out


def test_select_ignore_prefixes_and_unknown_codes(project, capsys):
    assert run(["check", "train.py", "--select", "ADV1"], capsys, project)[0] == 1
    assert run(["check", "train.py", "--ignore", "ADV1", "--select", "ADV1"], capsys, project)[0] == 0
    code, _, err = run(["check", "train.py", "--select", "ADV999"], capsys, project)
    assert code == 2 and "ADV999" in err


def test_unknown_gpu_is_a_usage_error(project, capsys):
    code, _, err = run(["check", "train.py", "--gpu", "potato"], capsys, project)
    assert code == 2 and "potato" in err


@pytest.mark.parametrize("comment", ["# noqa: ADV101", "# noqa", "# advisor: ignore[ADV101]", "# advisor: ignore"])
def test_suppression_comments(tmp_path, capsys, comment):
    (tmp_path / "t.py").write_text(PROBLEM.replace("# keep this comment", comment))
    code, out, _ = run(["check", "t.py", "--select", "ADV101"], capsys, tmp_path)
    assert code == 0, out


def test_suppression_of_other_code_does_not_hide(tmp_path, capsys):
    (tmp_path / "t.py").write_text(PROBLEM.replace("# keep this comment", "# noqa: ADV102"))
    assert run(["check", "t.py", "--select", "ADV101"], capsys, tmp_path)[0] == 1


def test_suppression_on_first_line_of_multiline_call(tmp_path, capsys):
    source = PROBLEM.replace(
        "loader = DataLoader(dataset, batch_size=32, num_workers=2)  # keep this comment",
        "loader = DataLoader(  # noqa: ADV101\n    dataset,\n    batch_size=32,\n)",
    )
    (tmp_path / "t.py").write_text(source)
    assert run(["check", "t.py", "--select", "ADV101"], capsys, tmp_path)[0] == 0


def test_pyproject_config(project, capsys):
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [tool.advisor]
            ignore = ["ADV101"]
            gpu = "V100"
            exclude = ["vendored"]
            [tool.advisor.per-file-ignores]
            "scripts/*.py" = ["ADV1"]
            """
        )
    )
    (project / "vendored").mkdir()
    (project / "vendored" / "x.py").write_text(PROBLEM)
    code, out, _ = run(["check", ".", "--format", "json"], capsys, project)
    payload = json.loads(out)
    assert payload["target"] == {"gpu": "V100", "source": "[tool.advisor] gpu"}
    assert not [f for f in payload["findings"] if f["code"] == "ADV101"]
    assert not [f for f in payload["findings"] if "vendored" in f["path"]]
    # the command line wins over the config
    code, out, _ = run(["check", "train.py", "--select", "ADV101", "--gpu", "H100", "--format", "json"], capsys, project)
    assert json.loads(out)["target"]["gpu"] == "H100"


def test_per_file_ignores(project, capsys):
    (project / "pyproject.toml").write_text('[tool.advisor]\n[tool.advisor.per-file-ignores]\n"scripts/*.py" = ["ADV1"]\n')
    (project / "scripts").mkdir()
    (project / "scripts" / "t.py").write_text(PROBLEM)
    code, out, _ = run(["check", "scripts", "--select", "ADV101"], capsys, project)
    assert code == 0, out


def test_invalid_config_is_a_clear_error(project, capsys):
    (project / "pyproject.toml").write_text("[tool.advisor]\nselekt = ['ADV1']\n")
    code, _, err = run(["check", "train.py"], capsys, project)
    assert code == 2 and "selekt" in err
    (project / "pyproject.toml").write_text("[tool.advisor]\nselect = ['ADV1', 'XYZ9']\n")
    code, _, err = run(["check", "train.py"], capsys, project)
    assert code == 2 and "XYZ9" in err


def test_unparseable_file_is_reported_not_a_crash(tmp_path, capsys):
    (tmp_path / "broken.py").write_text("import torch\nx = (\n")
    (tmp_path / "nul.py").write_bytes(b"import torch\x00\n")
    (tmp_path / "latin.py").write_bytes(b"import torch\nname = '\xe9'\n")
    code, out, err = run(["check", "."], capsys, tmp_path)
    assert code == 2
    assert "ADV000" in out and "broken.py" in out and "nul.py" in out and "latin.py" in out
    assert "Traceback" not in out + err


def test_missing_path(tmp_path, capsys):
    code, out, err = run(["check", "nope.py"], capsys, tmp_path)
    assert code == 2 and "no such file" in err


def test_files_without_torch_are_skipped(tmp_path, capsys):
    (tmp_path / "other.py").write_text("loader = DataLoader(ds, num_workers=2)\nx.cuda()\n")
    assert run(["check", "other.py"], capsys, tmp_path)[0] == 0


def test_fix_writes_atomically_keeps_mode_and_comments(project, capsys):
    path = project / "train.py"
    os.chmod(path, 0o750)
    code, out, _ = run(["fix", "train.py", "--select", "ADV101"], capsys, project)
    assert code == 0, out
    text = path.read_text()
    assert "DataLoader(dataset, batch_size=32, num_workers=2, pin_memory=True)  # keep this comment" in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o750
    assert not [p for p in os.listdir(project) if p.startswith(".advisor-")]
    before = path.read_bytes()
    code, out, _ = run(["fix", "train.py", "--select", "ADV101"], capsys, project)
    assert code == 0 and path.read_bytes() == before


def test_fix_diff_writes_nothing(project, capsys):
    before = (project / "train.py").read_bytes()
    code, out, _ = run(["fix", "train.py", "--diff", "--select", "ADV101"], capsys, project)
    assert code == 1
    assert "+loader = DataLoader(dataset, batch_size=32, num_workers=2, pin_memory=True)" in out
    assert (project / "train.py").read_bytes() == before


def test_rules_and_explain(capsys, tmp_path):
    code, out, _ = run(["rules"], capsys, tmp_path)
    assert code == 0 and "ADV101" in out
    code, out, _ = run(["explain", "ADV101"], capsys, tmp_path)
    assert code == 0
    for heading in ("Why is this bad?", "Example", "Use instead", "Fix safety", "When it stays silent"):
        assert heading in out
    assert run(["explain", "ADV999"], capsys, tmp_path)[0] == 2


def test_python_dash_m_entry_point(project):
    completed = subprocess.run(
        [sys.executable, "-m", "advisor", "check", "train.py", "--select", "ADV101"],
        cwd=project, capture_output=True, text=True,
    )
    assert completed.returncode == 1
    assert "ADV101" in completed.stdout


def test_parallel_run_matches_serial(tmp_path, capsys):
    for i in range(20):
        (tmp_path / f"t{i:02d}.py").write_text(PROBLEM)
    _, serial, _ = run(["check", ".", "--format", "json", "-j", "1"], capsys, tmp_path)
    _, parallel, _ = run(["check", ".", "--format", "json", "-j", "2"], capsys, tmp_path)
    assert json.loads(serial) == json.loads(parallel)
    assert len(json.loads(serial)["findings"]) >= 20


def test_parallel_fix_rewrites_every_file(tmp_path, capsys):
    for i in range(12):
        (tmp_path / f"t{i:02d}.py").write_text(PROBLEM)
    code, out, _ = run(["fix", ".", "--select", "ADV101", "-j", "2"], capsys, tmp_path)
    assert code == 0, out
    for i in range(12):
        assert "pin_memory=True" in (tmp_path / f"t{i:02d}.py").read_text()
    assert "Fixed 12 findings in 12 files" in out


def test_exclude_patterns_match_as_fnmatch_did(tmp_path):
    # The patterns are joined into one expression (a walk asks for every file and folder);
    # globs relative to the root, bare names anywhere, and folder prefixes all still match.
    from advisor.engine import is_excluded

    root = str(tmp_path)
    cases = [
        ("tests/test_a.py", ["tests"], True),
        ("pkg/tests/helpers.py", ["tests"], False),  # a folder name matches the folder itself (the walk prunes it)
        ("pkg/tests", ["tests"], True),
        ("pkg/test_model.py", ["test_*.py"], True),
        ("pkg/model_test.py", ["*_test.py"], True),
        ("pkg/model.py", ["test_*.py", "*_test.py", "conftest.py"], False),
        ("vendor/lib/x.py", ["vendor/"], True),
        ("vendor/lib/x.py", ["vendor/*"], True),
        ("src/vendor.py", ["vendor"], False),
        ("a/b/c.py", ["a/*/c.py"], True),
        ("notes[1].py", ["notes[[]1].py"], True),
    ]
    for relative, patterns, expected in cases:
        assert is_excluded(os.path.join(root, relative), patterns, root) is expected, (relative, patterns)
        assert is_excluded(os.path.join(root, relative), [], root) is False
