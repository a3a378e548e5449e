"""What a notebook costs `advisor check`, next to a script of the same code.

    python bench/notebooks/speed.py [--corpus /tmp/nb_corpus] [--repeat 3]

For every notebook of the corpus (bench/notebooks/run.py extracts it) whose code cells the
engine analyses (they mention torch, transformers, ...), the same code is written out as a
script: the notebook's joined cells (``Notebook.python``, byte for byte what the rules see).
Both go through ``check_file`` with every rule, each file alone (no project scope, no cache:
the analysis itself), best of ``--repeat`` runs, in this one process. Printed: the total and
the median per file for notebooks and for their scripts, the ratio, and how much of a
notebook's time is reading its JSON (``Notebook.from_bytes``) - outputs and images included,
which a script does not have.

A measurement for docs, not a test: timings vary with the machine and its load.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from advisor.engine import RELEVANT_TEXT, Settings, check_file  # noqa: E402
from advisor.notebooks import Notebook, NotebookError  # noqa: E402
from advisor.registry import all_rules  # noqa: E402
from advisor.targets import resolve_target  # noqa: E402


def best_of(repeat: int, action) -> float:
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        timings.append(time.perf_counter() - start)
    return min(timings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=Path("/tmp/nb_corpus"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    settings = Settings(
        codes=frozenset(rule.code for rule in all_rules()), target=resolve_target("A100", None, detect=False), project_scope=False
    )
    notebook_times, script_times, reading_times, sizes = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="advisor-nb-speed-") as scratch:
        for index, path in enumerate(sorted(args.corpus.rglob("*.ipynb"))):
            data = path.read_bytes()
            try:
                notebook = Notebook.from_bytes(data)
            except NotebookError:
                continue
            if not RELEVANT_TEXT.search(notebook.python):
                continue
            script = Path(scratch) / f"{index}.py"
            script.write_text(notebook.python, encoding="utf-8")
            script_bytes = script.read_bytes()
            if check_file(str(path), settings, data).errors:
                continue  # a syntax error stops both early: not a like-for-like pair
            notebook_times.append(best_of(args.repeat, lambda: check_file(str(path), settings, data)))
            script_times.append(best_of(args.repeat, lambda: check_file(str(script), settings, script_bytes)))
            reading_times.append(best_of(args.repeat, lambda: Notebook.from_bytes(data)))
            sizes.append((len(data), len(script_bytes)))
    count = len(notebook_times)
    total_notebook, total_script, total_reading = sum(notebook_times), sum(script_times), sum(reading_times)
    print(f"notebooks analysed: {count} (JSON {sum(s[0] for s in sizes) / 1e6:.1f} MB, their code {sum(s[1] for s in sizes) / 1e6:.2f} MB)")
    print(f"notebook: {total_notebook:.2f} s in all, median {statistics.median(notebook_times) * 1e3:.1f} ms per file")
    print(f"script of the same code: {total_script:.2f} s in all, median {statistics.median(script_times) * 1e3:.1f} ms per file")
    print(f"ratio notebook / script: {total_notebook / total_script:.3f} (total), "
          f"{statistics.median(n / s for n, s in zip(notebook_times, script_times)):.3f} (median of per-file ratios)")
    print(f"reading the notebook's JSON and joining its cells: {total_reading:.2f} s in all, "
          f"median {statistics.median(reading_times) * 1e3:.2f} ms per file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
