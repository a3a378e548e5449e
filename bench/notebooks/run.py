"""advisor over real Jupyter notebooks: `check` and `fix --unsafe-fixes` on every notebook of the
repositories in SOURCES.json (not committed: extracted from their git history at the commit named).

    python bench/notebooks/run.py --extract-from /work/.mirror   # extract, then run
    python bench/notebooks/run.py --corpus /tmp/nb_corpus         # run on an extracted corpus

``--extract-from DIR`` reads ``DIR/<owner>+<name>/repo`` (a bare git directory holding the
commit) and writes each ``*.ipynb`` of that commit to ``<corpus>/<owner>+<name>/<path>``; blobs
the git directory lacks (large files left out of a snapshot) are counted and skipped.

The corpus is copied to a temporary folder and the real command line runs over the copy:

1. ``advisor check --no-cache --format json --exit-zero --gpu A100``;
2. ``advisor fix --unsafe-fixes --gpu A100`` (writes the copies);
3. ``advisor fix --unsafe-fixes --diff --gpu A100`` (a second fix must have nothing left to do).

What must hold, each counted, the run failing (exit 1) on any count that is not zero:

- no crash: no traceback, no exit code other than 0, 1 or 2, no "internal error in ADVxxx";
- every fixed notebook is valid JSON and valid nbformat 4 (against nbformat's own JSON schemas,
  tests/data/nbformat.v4.{0-5}.schema.json, the one of the notebook's minor version, when jsonschema is installed);
- nothing changed outside code cells' sources: the file's text with those values cut out is the
  same byte for byte, and (independently of advisor's scanner) ``json.loads`` of both, sources
  removed, is equal, key order included;
- idempotent: the second fix changes nothing;
- an unchanged notebook reads and writes back byte for byte (``Notebook.with_python`` of its
  own joined cells).
"""
from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from advisor.notebooks import Notebook, NotebookError  # noqa: E402

SOURCES = Path(__file__).with_name("SOURCES.json")
SCHEMAS = REPO_ROOT / "tests" / "data"


def extract(mirror: Path, corpus: Path) -> dict[str, int]:
    missing: dict[str, int] = {}
    for source in json.loads(SOURCES.read_text()):
        repo, commit = source["repo"], source["commit"]
        git_dir = mirror / repo.replace("/", "+") / "repo"
        target = corpus / repo.replace("/", "+")
        listing = subprocess.run(
            ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-z", commit], capture_output=True, check=True
        ).stdout.decode()
        missing[repo] = 0
        for entry in filter(None, listing.split("\0")):
            meta, path = entry.split("\t", 1)
            if not path.endswith(".ipynb"):
                continue
            blob = meta.split()[2]
            shown = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "blob", blob], capture_output=True)
            if shown.returncode != 0:
                missing[repo] += 1
                continue
            destination = target / path
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(shown.stdout)
    return missing


def advisor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "advisor", *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=3600
    )


def crashed(completed: subprocess.CompletedProcess) -> bool:
    return completed.returncode not in (0, 1, 2) or "Traceback" in completed.stderr or "internal error in ADV" in (
        completed.stdout + completed.stderr
    )


def _schema_validators():
    try:
        import jsonschema
    except ImportError:
        return None
    validators = {}
    for minor in range(6):
        schema = json.loads((SCHEMAS / f"nbformat.v4.{minor}.schema.json").read_text())
        validators[minor] = jsonschema.validators.validator_for(schema)(schema)
    return validators


def invalid_nbformat(data: bytes, validators) -> str | None:
    try:
        document = json.loads(data)
    except ValueError as error:
        return f"invalid JSON: {error}"
    if validators is None:
        return None
    minor = document.get("nbformat_minor", 4)
    errors = list(validators[min(max(minor, 0), 5) if isinstance(minor, int) else 4].iter_errors(document))
    return f"nbformat 4: {errors[0].message}" if errors else None


def _without_code_sources(document: dict) -> dict:
    for cell in document.get("cells", []):
        if cell.get("cell_type") == "code":
            cell.pop("source", None)
    return document


def changed_outside_sources(before: bytes, after: bytes) -> str | None:
    """What changed besides code cells' sources, or None."""
    if json.dumps(_without_code_sources(json.loads(before))) != json.dumps(_without_code_sources(json.loads(after))):
        return "the JSON differs outside code cells' sources"
    old, new = Notebook.from_bytes(before), Notebook.from_bytes(after)
    if [c.index for c in old.cells] != [c.index for c in new.cells]:
        return "other cells analysed after the fix"

    def skeleton(notebook: Notebook) -> str:
        text = notebook.text
        for cell in reversed(notebook.cells):
            start, end = cell.value_span
            text = text[:start] + text[end:]
        return text

    if skeleton(old) != skeleton(new) or old.has_bom != new.has_bom:
        return "bytes differ outside code cells' sources"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=Path("/tmp/nb_corpus"))
    parser.add_argument("--extract-from", type=Path, help="a folder of bare git directories (<owner>+<name>/repo)")
    args = parser.parse_args()
    if args.extract_from:
        missing = extract(args.extract_from, args.corpus)
        print("blobs missing from the snapshots (skipped):", missing)
    must_be_zero = (
        "crashes", "invalid notebooks after fix", "changes outside code cells' sources",
        "not idempotent (second fix changes something)", "unchanged notebook not written back byte for byte",
    )
    counts: collections.Counter = collections.Counter({key: 0 for key in must_be_zero})
    problems: list[str] = []
    validators = _schema_validators()
    with tempfile.TemporaryDirectory(prefix="advisor-notebooks-") as scratch:
        work = Path(scratch) / "corpus"
        shutil.copytree(args.corpus, work)
        notebooks = sorted(work.rglob("*.ipynb"))
        originals = {path: path.read_bytes() for path in notebooks}
        counts["notebooks"] = len(notebooks)
        for path, data in originals.items():
            try:
                notebook = Notebook.from_bytes(data)
            except NotebookError as error:
                counts["unreadable notebooks (reported as ADV000)"] += 1
                problems.append(f"unreadable (reported): {path.relative_to(work)}: {error}")
                continue
            counts["code cells analysed"] += len(notebook.cells)
            if notebook.with_python(notebook.python) != data:
                counts["unchanged notebook not written back byte for byte"] += 1
                problems.append(f"round trip: {path.relative_to(work)}")

        check = advisor("check", str(work), "--no-cache", "--format", "json", "--exit-zero", "--gpu", "A100")
        counts["crashes"] += crashed(check)
        report = json.loads(check.stdout) if check.stdout.strip() else {"findings": [], "errors": []}
        counts["findings"] = len(report["findings"])
        counts["notebooks with findings"] = len({f["path"] for f in report["findings"]})
        for error in report["errors"]:
            kind = error["message"].split(":")[0]
            counts[f"errors: {kind}"] += 1
            problems.append(f"error (reported): {Path(error['path']).relative_to(work)}: {error['message']}")

        fix = advisor("fix", str(work), "--unsafe-fixes", "--gpu", "A100")
        counts["crashes"] += crashed(fix)
        fix_output = fix.stdout + fix.stderr
        counts["notebooks a fix was refused for (cannot fix: ..., left as they were)"] = fix_output.count("cannot fix:")
        counts["fixes dropped (they would not compile)"] = fix_output.count("fix dropped")
        problems += [f"fix: {line}" for line in fix_output.splitlines() if "cannot fix:" in line or "fix dropped" in line]
        for path, before in originals.items():
            after = path.read_bytes()
            if after == before:
                continue
            counts["notebooks changed by fix"] += 1
            invalid = invalid_nbformat(after, validators)
            if invalid and invalid_nbformat(before, validators):
                counts["notebooks changed by fix, invalid before it already (same outside sources)"] += 1
            elif invalid:
                counts["invalid notebooks after fix"] += 1
                problems.append(f"invalid: {path.relative_to(work)}: {invalid}")
                continue
            outside = changed_outside_sources(before, after)
            if outside:
                counts["changes outside code cells' sources"] += 1
                problems.append(f"outside sources: {path.relative_to(work)}: {outside}")
        again = advisor("fix", str(work), "--unsafe-fixes", "--diff", "--gpu", "A100")
        counts["crashes"] += crashed(again)
        counts["not idempotent (second fix changes something)"] = sum(1 for line in again.stdout.splitlines() if line.startswith("--- a/"))
        applied = fix.stdout.strip().splitlines()[-1] if fix.stdout.strip() else ""
    print(f"schema validation: {'nbformat 4.0-4.5 JSON schemas' if validators else 'skipped (no jsonschema)'}")
    print(f"fix summary: {applied}")
    for key, value in counts.items():
        print(f"{key}: {value}")
    for problem in sorted(problems, key=lambda text: text.startswith("error (reported)"))[:40]:
        print("  " + problem)
    return 1 if any(counts[key] for key in must_be_zero) else 0


if __name__ == "__main__":
    sys.exit(main())
