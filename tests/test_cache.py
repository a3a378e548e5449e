"""The results cache of `advisor check`: reused when nothing that decides the results changed, never trusted blindly."""
from __future__ import annotations

import io
import json
import os
import textwrap
from pathlib import Path

import pytest

from advisor import cache as cache_module
from advisor import engine
from advisor.cache import CACHE_DIR_NAME, Cache
from advisor.cli import main
from advisor.engine import Settings, check_paths
from advisor.targets import resolve_target

PROBLEM = textwrap.dedent(
    """\
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=32, num_workers=2)  # keep this comment
    model = model.cuda()
    """
)
FIXED = PROBLEM.replace("num_workers=2)", "num_workers=2, pin_memory=True)")
BROKEN = "import torch\ndef f(:\n"


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
    (tmp_path / "pyproject.toml").write_text("[tool.advisor]\n")
    (tmp_path / "train.py").write_text(PROBLEM)
    (tmp_path / "other.py").write_text(PROBLEM.replace("dataset", "data"))
    (tmp_path / "broken.py").write_text(BROKEN)
    return tmp_path


@pytest.fixture
def analyzed(monkeypatch) -> list[str]:
    """Paths the engine really analyzes from now on (the cache answers the others)."""
    calls: list[str] = []
    real = engine.check_file

    def recording(path, settings, data=None):
        calls.append(os.path.basename(path))
        return real(path, settings, data)

    monkeypatch.setattr(engine, "check_file", recording)
    return calls


@pytest.mark.parametrize("output_format", ["text", "json", "sarif"])
def test_a_second_run_reuses_every_result_and_prints_the_same(project, capsys, analyzed, output_format):
    args = ["check", ".", "--format", output_format, "-j", "1"]
    first = run(args, capsys, project)
    assert sorted(analyzed) == ["broken.py", "other.py", "train.py"]
    assert (project / CACHE_DIR_NAME / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (project / CACHE_DIR_NAME / ".gitignore").read_text().splitlines()[-1] == "*"
    analyzed.clear()
    second = run(args, capsys, project)
    assert analyzed == []
    assert second == first
    assert first[0] == 2  # the syntax error is cached too, and still fails the run
    assert "broken.py" in first[1]


def test_cached_diagnostics_round_trip_every_field(project):
    settings = Settings(codes=frozenset(["ADV101", "ADV102"]), target=resolve_target("A100", None), root=str(project))
    paths = [str(project / name) for name in ("train.py", "broken.py")]
    cold = check_paths(paths, settings, jobs=1, cache=Cache(project, settings))
    warm_cache = Cache(project, settings)
    warm = check_paths(paths, settings, jobs=1, cache=warm_cache)
    assert (warm_cache.hits, warm_cache.misses) == (2, 0)
    assert warm == cold
    assert any(d.fix_applicability == "safe" and d.fix_description for d in warm[0].diagnostics)
    assert warm[1].errors and warm[1].errors[0].line == 2


def test_the_same_file_named_another_way_reports_its_own_name(project, capsys):
    run(["check", "train.py", "--select", "ADV101"], capsys, project)
    _, out, _ = run(["check", "./train.py", "--select", "ADV101"], capsys, project)
    assert "./train.py:4:10: ADV101" in out


def test_a_changed_file_is_analyzed_again(project, capsys, analyzed):
    run(["check", ".", "-j", "1"], capsys, project)
    (project / "train.py").write_text(FIXED)
    analyzed.clear()
    _, out, _ = run(["check", ".", "--select", "ADV101", "-j", "1"], capsys, project)
    _, expected, _ = run(["check", ".", "--select", "ADV101", "--no-cache", "-j", "1"], capsys, project)
    assert out == expected
    assert "train.py:4" not in out and "other.py:4:10: ADV101" in out


@pytest.mark.parametrize("changed", [["--select", "ADV101"], ["--ignore", "ADV102"], ["--gpu", "V100"]])
def test_other_settings_do_not_reuse_results(project, capsys, analyzed, changed):
    run(["check", ".", "--gpu", "A100", "-j", "1"], capsys, project)
    analyzed.clear()
    run(["check", ".", "--gpu", "A100", "-j", "1", *changed], capsys, project)
    assert sorted(analyzed) == ["broken.py", "other.py", "train.py"]


def test_where_the_target_came_from_does_not_matter(project, capsys, analyzed):
    (project / "pyproject.toml").write_text('[tool.advisor]\ngpu = "A100"\n')
    _, from_config, _ = run(["check", ".", "-j", "1"], capsys, project)
    analyzed.clear()
    _, from_flag, _ = run(["check", ".", "--gpu", "A100", "-j", "1"], capsys, project)
    assert analyzed == []
    assert from_flag.splitlines()[1:] == from_config.splitlines()[1:]


def test_editing_a_rule_invalidates_the_cache(project, capsys, analyzed, monkeypatch):
    run(["check", ".", "-j", "1"], capsys, project)
    monkeypatch.setattr(cache_module, "rules_fingerprint", lambda: "a rule was edited")
    analyzed.clear()
    run(["check", ".", "-j", "1"], capsys, project)
    assert sorted(analyzed) == ["broken.py", "other.py", "train.py"]


def test_no_cache_writes_nothing(project, capsys):
    code, _, _ = run(["check", ".", "--no-cache"], capsys, project)
    assert code == 2
    assert not (project / CACHE_DIR_NAME).exists()


def test_clean_removes_the_cache(project, capsys):
    run(["check", "."], capsys, project)
    assert (project / CACHE_DIR_NAME).is_dir()
    code, out, _ = run(["clean"], capsys, project)
    assert code == 0 and "Removed" in out
    assert not (project / CACHE_DIR_NAME).exists()
    assert run(["clean"], capsys, project)[0] == 0  # nothing to remove is fine


@pytest.mark.parametrize(
    "garbage",
    [
        "{not json",
        '{"entries": []}',
        "CORRUPT_ROWS",
    ],
)
def test_a_corrupt_cache_is_recomputed(project, capsys, analyzed, garbage):
    _, first, _ = run(["check", ".", "-j", "1"], capsys, project)
    [cache_file] = (project / CACHE_DIR_NAME).glob("*/*.json")
    if garbage == "CORRUPT_ROWS":
        payload = json.loads(cache_file.read_text())
        for entry in payload["entries"].values():
            entry["diagnostics"] = [["line?", *row[1:]] for row in entry["diagnostics"]] or [[1]]
        garbage = json.dumps(payload)
    cache_file.write_text(garbage)
    analyzed.clear()
    _, second, _ = run(["check", ".", "-j", "1"], capsys, project)
    assert second == first
    assert sorted(analyzed) == ["broken.py", "other.py", "train.py"]
    analyzed.clear()
    run(["check", ".", "-j", "1"], capsys, project)
    assert analyzed == []  # and rewritten


def test_an_unwritable_cache_does_not_fail_the_run(project, capsys):
    (project / CACHE_DIR_NAME).write_text("a file where the folder should be")
    _, expected, _ = run(["check", ".", "--no-cache"], capsys, project)
    code, out, err = run(["check", "."], capsys, project)
    assert (code, out, err) == (2, expected, "")


def test_misses_go_to_the_process_pool(project, capsys):
    for index in range(12):
        (project / f"script_{index}.py").write_text(PROBLEM)
    args = ["check", ".", "--format", "json", "-j", "2"]
    _, cold, _ = run(args, capsys, project)
    assert cold == run(args + ["--no-cache"], capsys, project)[1]
    (project / "script_3.py").write_text(FIXED)
    _, warm, _ = run(args, capsys, project)
    assert warm == run(args + ["--no-cache"], capsys, project)[1] != cold


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("output_format, shown", [("text", True), ("json", False), ("sarif", False), ("github", False)])
def test_progress_bar_only_for_text_on_a_terminal(project, capsys, monkeypatch, output_format, shown):
    for index in range(50):
        (project / f"script_{index}.py").write_text(PROBLEM)
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    run(["check", ".", "--format", output_format, "--no-cache", "-j", "1"], capsys, project)
    assert bool(terminal.getvalue()) is shown


def test_no_progress_bar_when_stderr_is_not_a_terminal(project, capsys):
    for index in range(60):
        (project / f"script_{index}.py").write_text(PROBLEM)
    _, _, err = run(["check", ".", "--no-cache", "-j", "1"], capsys, project)
    assert err == ""
