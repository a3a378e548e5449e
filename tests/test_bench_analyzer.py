"""The analyzer benchmark (bench/analyzer/run.py) builds its corpora right and reports what it ran.

Its figures are only as good as its bookkeeping: the files and lines it divides by, the runs it
takes the median of, the findings that show each run really analyzed the corpus. A quick run
with advisor alone (no peers: no venvs, no network) checks that bookkeeping; timings are never
asserted.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "bench" / "analyzer" / "run.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_analyzer_run", RUN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def fixture_scripts() -> list[Path]:
    return sorted((REPO / "fixtures").glob("*.py")) + sorted((REPO / "fixtures" / "lookalikes").glob("*.py"))


def line_count(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    out, report = tmp / "performance.md", tmp / "report.json"
    done = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--no-peers", "--work-dir", str(tmp / "work"),
         "--out", str(out), "--json", str(report), "--note", "smoke test"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    return done, out.read_text(encoding="utf-8"), json.loads(report.read_text(encoding="utf-8")), tmp / "work"


def test_quick_run_measures_cold_and_warm_on_fixtures_and_first_and_warm_on_scale(quick_run):
    _, _, report, _ = quick_run
    scripts = fixture_scripts()
    lines = sum(line_count(p) for p in scripts)
    rows = {(r["tool"], r["mode"], r["corpus"]): r for r in report["rows"]}
    # the first run (filling the cache) is reported on the scale corpus only, where it is the
    # cold side of the memory target
    assert set(rows) == {
        ("advisor", "cold", "fixtures"), ("advisor", "cold, alone", "fixtures"), ("advisor", "warm", "fixtures"),
        ("advisor", "first run", "scale"), ("advisor", "warm", "scale"),
    }
    # --quick: one copy of the fixtures, and two for the scale corpus
    for (_, _, corpus), row in rows.items():
        copies = 1 if corpus == "fixtures" else 2
        assert (row["files"], row["lines"]) == (copies * len(scripts), copies * lines)
        assert not row["failed"]
        assert len(row["walls"]) == 1 and row["median_s"] > 0
        assert row["files_per_s"] == pytest.approx(row["files"] / row["median_s"])
    # The fixtures have findings; a warm run answers from the cache with the same ones, and a
    # corpus of two copies has twice as many.
    cold = rows[("advisor", "cold", "fixtures")]["findings"]
    assert cold > 0
    assert rows[("advisor", "warm", "fixtures")]["findings"] == cold
    assert rows[("advisor", "cold, alone", "fixtures")]["findings"] == cold  # the fixtures import no sibling
    assert rows[("advisor", "first run", "scale")]["findings"] == 2 * cold
    assert rows[("advisor", "warm", "scale")]["findings"] == 2 * cold
    corpus = report["corpora"]["fixtures"]
    assert corpus["mention_torch"] == corpus["advisor_relevant"] == len(scripts)  # no prefilter skips a fixture
    from advisor.registry import all_rules

    assert report["facts"]["advisor_rules"] == len(all_rules())


def test_quick_run_writes_the_table_the_machine_and_the_command(quick_run):
    done, markdown, report, work = quick_run
    assert markdown.strip() == done.stdout.strip()  # --out writes what it prints
    assert "> **smoke test**" in markdown
    header = "| tool | run | corpus | files | lines | median wall s | files/s | lines/s |"
    assert header in markdown
    table = [line for line in markdown.splitlines() if line.startswith("| advisor ")]
    assert [line.split(" | ")[1:4] for line in table] == [
        ["cold", "fixtures", f"{len(fixture_scripts())}"],
        ["cold, alone", "fixtures", f"{len(fixture_scripts())}"],
        ["warm", "fixtures", f"{len(fixture_scripts())}"],
        ["first run", "scale", f"{2 * len(fixture_scripts())}"],
        ["warm", "scale", f"{2 * len(fixture_scripts())}"],
    ]
    # 44 files are not the 10,000 the targets speak of: the report says so rather than "met"
    assert "not measured at 10,000 files" in markdown
    assert "usable cores" in markdown and "libcst" in markdown
    assert "python bench/analyzer/run.py --quick --no-peers" in markdown
    # an explicit work folder is kept; the corpora pin their configuration
    assert (work / "fixtures" / "pyproject.toml").is_file()
    assert (work / "scale" / "c1" / "lookalikes").is_dir()


def test_package_corpus_is_an_even_deterministic_sample_counted_line_by_line(tmp_path):
    bench = load_bench()
    assert bench.evenly_spread(list(range(10)), 3) == [0, 3, 6]
    assert bench.evenly_spread(list(range(4)), 9) == [0, 1, 2, 3]
    first = bench.build_package_corpus(tmp_path / "a", ["accelerate"], 7)
    again = bench.build_package_corpus(tmp_path / "b", ["accelerate"], 7)
    copied = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.py"))
    assert copied == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*.py"))
    assert first.files == again.files == len(copied) == 7
    assert first.lines == sum(line_count(tmp_path / "a" / p) for p in copied)
    assert all(p.parts[0] == "accelerate" for p in copied)


def test_work_dir_inside_the_repository_is_refused():
    # the repo's pyproject.toml (its excludes, its cache) would apply to corpora built there
    done = subprocess.run([sys.executable, str(RUN), "--quick", "--no-peers", "--work-dir", str(REPO / "bench-work")],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode != 0
    assert "outside the repository" in done.stderr
    assert not (REPO / "bench-work").exists()
