"""A repeatable audit of ``advisor fix --unsafe-fixes`` on real repositories (issue 16).

Compiling is not the bar; being right is. This runs the fixer over the Python files of the
repositories in ``SOURCES.json`` (each at a pinned commit, fetched, never committed here), with
unsafe fixes on, as a user who runs ``advisor fix --unsafe-fixes .`` in a checkout would, and
writes a stratified sample of the edits it applied, each with its diff hunk, for a reader who
did not write the rules to judge: ``correct``, ``wrong`` or ``doubtful``, and whether a wrong
edit would raise at run time. The verdicts are scored per rule.

    python bench/fix_audit/run.py --label first-pass              # fix, sample, write results/
    python bench/fix_audit/run.py --score results/verdicts-first-pass.json
    python bench/fix_audit/run.py --carry results/verdicts-X-first.json results/sample-X-first.json results/sample-X-after.json
    python bench/fix_audit/run.py --tally stop26 stop27     # two versions of the code over every held-out set run under both

The whole run also checks what needs no reader: every fixed file compiles and a second run
changes nothing.
"""
from __future__ import annotations

import argparse
import collections
import difflib
import fnmatch
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from advisor.config import find_pyproject, load_config  # noqa: E402
from advisor.engine import Settings, discover  # noqa: E402
from advisor.fixer import FixResult, decode, fix_paths, fix_source  # noqa: E402
from advisor.registry import all_rules  # noqa: E402
from advisor.targets import resolve_target  # noqa: E402

CONTEXT_LINES = 6
# What a checkout has that fixes read: the code and notebooks, the declared requirements and install
# instructions (version-dependent fixes), DeepSpeed and Accelerate configs.
PROJECT_FILES = (
    "*.py", "*requirement*.txt", "*requirements*.lock", "pyproject*.toml", "setup.cfg", "settings.ini", "*.yml", "*.json", "*.yaml",
    "README*", "INSTALL*", "get_started*", "getting_started*", "Dockerfile*", "*.ipynb", "*spec*.txt", "conda*.txt", "*.sh",
    "poetry.lock", "uv.lock", "environment*.txt",
)
PER_RULE_CAP = 18  # so that the common rules do not crowd the rare ones out of the sample
PER_FILE_CAP = 4


@dataclass
class Edit:
    id: str
    repo: str
    path: str
    code: str
    line: int
    description: str
    applicability: str
    hunk: str
    test_or_package: str  # "test", "package" or "script": where the edit was made


def resolve_git_dir(repo: str, git_dir: str | None) -> str:
    """The git directory of ``repo``: the one SOURCES names, else the fetch mirror's
    (``/work/.mirror/owner+name``, or a folder inside it), else a bare clone in the cache."""
    mirror = Path(os.environ.get("ADVISOR_MIRROR", "/work/.mirror")) / repo.replace("/", "+")
    for base in ([Path(git_dir)] if git_dir else []) + [mirror]:
        for inner in (base, *sorted(base.glob("*")), *sorted(base.glob("*/.git"))):
            if (inner / "HEAD").exists() and (inner / "objects").exists():
                return str(inner)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "advisor-fix-audit" / repo.replace("/", "+")
    if not (cache / "HEAD").exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "--bare", "--quiet", f"https://github.com/{repo}", str(cache)], check=True)
    return str(cache)


def materialize(repo: str, commit: str, git_dir: str | None, into: Path) -> Path:
    git_dir = resolve_git_dir(repo, git_dir)
    folder = into / repo.replace("/", "+")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    listed = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", "-z", commit], check=True, capture_output=True
    ).stdout.decode().split("\0")
    # Named one by one: a fetched mirror may lack its largest blobs (notebooks, weights).
    # Case-insensitively: XMem's install notes are `docs/GETTING_STARTED.md`.
    paths = [
        p for p in listed
        if p and (
            any(fnmatch.fnmatch(os.path.basename(p).lower(), pattern.lower()) for pattern in PROJECT_FILES)
            or re.search(r"(^|/)requirements/[^/]+\.(txt|in)$", p)  # lightning-bolts' requirements/base.txt
        )
    ]
    checked = subprocess.run(
        ["git", "--git-dir", git_dir, "cat-file", "--batch-check"],
        input="".join(f"{commit}:{p}\n" for p in paths), capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    paths = [p for p, line in zip(paths, checked) if not line.endswith("missing")]
    for start in range(0, len(paths), 200):
        archive = subprocess.run(
            ["git", "--git-dir", git_dir, "archive", "--format=tar", commit, "--", *paths[start : start + 200]],
            check=True, capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
    (folder / ".git").mkdir()  # a project root, as in the user's checkout
    return folder


_TEST_PATH = re.compile(r"(^|/)(tests?|testing)(/|$)|(^|/)test_[^/]*\.py$|_test\.py$")


def kind_of(relative: str, text: str) -> str:
    if _TEST_PATH.search(relative):
        return "test"
    if "__main__" in text or "argparse" in text or re.search(r"^for |^\s*trainer\.fit\(|^\s*trainer\.train\(", text, re.M):
        return "script"
    return "package"


def hunks(result: FixResult, relative: str) -> list[tuple[int, int, int, int, str]]:
    """(old start, old end, new start, new end, text) for each hunk of the file's diff."""
    before = decode(result.original).splitlines(keepends=True)
    after = decode(result.fixed).splitlines(keepends=True)
    if relative.endswith(".ipynb") and result.fixed_python:
        # A notebook's fixes are placed by lines of its joined code cells, not of its JSON.
        from advisor.notebooks import Notebook

        before = Notebook.from_bytes(result.original).python.splitlines(keepends=True)
        after = result.fixed_python.decode("utf-8").splitlines(keepends=True)
    found = []
    for group in difflib.SequenceMatcher(None, before, after, autojunk=False).get_grouped_opcodes(CONTEXT_LINES):
        first, last = group[0], group[-1]
        text = [f"@@ -{first[1] + 1},{last[2] - first[1]} +{first[3] + 1},{last[4] - first[3]} @@ {relative}\n"]
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                text += [" " + line for line in before[i1:i2]]
                continue
            text += ["-" + line for line in before[i1:i2]]
            text += ["+" + line for line in after[j1:j2]]
        found.append((first[1] + 1, last[2], first[3] + 1, last[4], "".join(t if t.endswith("\n") else t + "\n" for t in text)))
    return found


def edits_of(repo: str, folder: Path, results: list[FixResult]) -> list[Edit]:
    edits: list[Edit] = []
    for result in results:
        if not result.applied:
            continue
        relative = os.path.relpath(result.path, folder)
        file_hunks = hunks(result, relative)
        if not file_hunks:
            continue
        kind = kind_of(relative, decode(result.original))
        for index, applied in enumerate(result.applied):
            # Where the fix's edits are (the first round's lines are the original's; later
            # rounds' are close to them): the hunk that overlaps them, else the nearest.
            low, high = applied.first_line or applied.line, applied.last_line or applied.line

            def distance(h: tuple[int, int, int, int, str]) -> int:
                if (h[0] <= high and low <= max(h[1], h[0])) or (h[2] <= high and low <= max(h[3], h[2])):
                    return 0
                return min(abs(low - h[0]), abs(low - h[2]), abs(high - h[1]), abs(high - h[3]))

            hunk = min(file_hunks, key=distance)
            edits.append(Edit(
                id=f"{repo}:{relative}:{applied.line}:{applied.code}:{index}",
                repo=repo, path=relative, code=applied.code, line=applied.line, description=applied.description,
                applicability=applied.applicability, hunk=hunk[4], test_or_package=kind,
            ))
    return edits


def sample(edits: list[Edit], size: int, seed: int) -> list[Edit]:
    """Rules in turn, at most ``PER_RULE_CAP`` edits of a rule and ``PER_FILE_CAP`` of a file;
    where that leaves the sample short of ``size``, the common rules fill it up."""
    chosen = _sample(edits, size, seed, PER_RULE_CAP, PER_FILE_CAP)
    if len(chosen) < size:
        chosen = _sample(edits, size, seed, size, 2 * PER_FILE_CAP)
    return chosen


def _sample(edits: list[Edit], size: int, seed: int, rule_cap: int, file_cap: int) -> list[Edit]:
    rng = random.Random(seed)
    by_rule: dict[str, list[Edit]] = collections.defaultdict(list)
    for edit in edits:
        by_rule[edit.code].append(edit)
    for bucket in by_rule.values():
        rng.shuffle(bucket)
    chosen: list[Edit] = []
    per_file: collections.Counter = collections.Counter()
    per_rule: collections.Counter = collections.Counter()
    while len(chosen) < size and any(by_rule.values()):
        for code in sorted(by_rule):
            bucket = by_rule[code]
            while bucket:
                edit = bucket.pop()
                if per_file[(edit.repo, edit.path)] < file_cap and per_rule[code] < rule_cap:
                    chosen.append(edit)
                    per_file[(edit.repo, edit.path)] += 1
                    per_rule[code] += 1
                    break
            if len(chosen) >= size:
                break
        if all(per_rule[c] >= rule_cap or not by_rule[c] for c in by_rule):
            break
    return sorted(chosen, key=lambda e: e.id)


def run(args: argparse.Namespace) -> int:
    sources = json.loads(Path(args.sources).read_text())
    codes = frozenset(rule.code for rule in all_rules())
    target = resolve_target(args.gpu, None, detect=False)
    scratch = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fix-audit-"))
    scratch.mkdir(parents=True, exist_ok=True)
    all_edits: list[Edit] = []
    totals = collections.Counter()
    not_compiling: list[str] = []
    not_idempotent: list[str] = []
    for source in sources:
        folder = materialize(source["repo"], source["commit"], source.get("git_dir"), scratch)
        settings = Settings(codes=codes, target=target, root=str(folder))
        # As ``advisor fix .`` in the checkout: the project's own [tool.advisor] exclude, else the
        # default one, which leaves test code out.
        config = load_config(find_pyproject(folder))
        files, _ = discover([str(folder)], config.exclude, str(folder))
        results = fix_paths(files, settings, unsafe=True, write=False, jobs=args.jobs)
        for result in results:
            if not result.changed:
                continue
            fixed_copy = scratch / "fixed" / folder.name / os.path.relpath(result.path, folder)
            fixed_copy.parent.mkdir(parents=True, exist_ok=True)
            fixed_copy.write_bytes(result.fixed)  # for the reader: the whole file after the fixes
            totals["files changed"] += 1
            totals["fixes applied"] += len(result.applied)
            fixed = decode(result.fixed)
            try:
                compile(fixed, result.path, "exec", dont_inherit=True)
            except SyntaxError as error:
                not_compiling.append(f"{result.path}: {error}")
            again = fix_source(result.path, result.fixed, settings, True)
            if again.changed:
                not_idempotent.append(result.path)
        totals["files"] += len(files)
        edits = edits_of(source["repo"], folder, results)
        all_edits.extend(edits)
        print(f"{source['repo']}: {len(files)} files, {sum(1 for r in results if r.changed)} changed, {len(edits)} edits", file=sys.stderr)
    chosen = sorted(all_edits, key=lambda e: e.id) if args.all else sample(all_edits, args.size, args.seed)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    payload = {
        "label": args.label,
        "gpu": target.name,
        "totals": dict(totals),
        "edits_by_rule": dict(collections.Counter(e.code for e in all_edits)),
        "not_compiling": not_compiling,
        "not_idempotent": not_idempotent,
        "sample": [edit.__dict__ for edit in chosen],
    }
    (out / f"sample-{args.label}.json").write_text(json.dumps(payload, indent=2) + "\n")
    with open(out / f"sample-{args.label}.md", "w") as handle:
        handle.write(
            f"# Fix audit sample: {args.label}\n\n{len(chosen)} of {len(all_edits)} applied edits. The files as they "
            f"were: {scratch}/<owner+name>/<path>; after every fix: {scratch}/fixed/<owner+name>/<path>.\n\n"
        )
        for edit in chosen:
            handle.write(
                f"## {edit.id}\n\n{edit.code} ({edit.applicability}): {edit.description}; "
                f"{edit.test_or_package} code\n\n```diff\n{edit.hunk}```\n\n"
            )
    print(json.dumps({k: payload[k] for k in ("totals", "edits_by_rule")}, indent=2))
    print(f"not compiling: {len(not_compiling)}, not idempotent: {len(not_idempotent)}; sample of {len(chosen)} in {out}")
    return 0


def score(path: Path) -> int:
    """Per rule: correct / wrong / doubtful, from a verdicts file ``{id: {"verdict": ..., "raises": bool}}``."""
    verdicts = json.loads(path.read_text())
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    raising = []
    for edit_id, verdict in verdicts.items():
        code = edit_id.split(":")[3]
        table[code][verdict["verdict"]] += 1
        if verdict["verdict"] == "wrong" and verdict.get("raises"):
            raising.append(edit_id)
    print("| rule | correct | wrong | doubtful |\n|---|--:|--:|--:|")
    total = collections.Counter()
    for code in sorted(table):
        counts = table[code]
        total.update(counts)
        print(f"| {code} | {counts['correct']} | {counts['wrong']} | {counts['doubtful']} |")
    judged = sum(total.values())
    print(f"| **all** ({judged}) | {total['correct']} ({total['correct'] / judged:.0%}) | {total['wrong']} | {total['doubtful']} |")
    print(f"wrong edits that raise at run time: {len(raising)}" + ("".join(f"\n- {r}" for r in raising)))
    return 0


def _changed_lines(hunk: str, line: int) -> list[str]:
    """The block of removed and added lines of a hunk at or next to the edit's line (the
    context, and the other edits the hunk holds, may change with other fixes)."""
    rows = hunk.splitlines()
    match = re.match(r"@@ -(\d+)", rows[0]) if rows else None
    if match is None:
        return rows
    old = int(match.group(1))  # the original's line number of the next context or removed row
    blocks: list[list] = []  # [first old line, last old line, rows]
    in_block = False
    for row in rows[1:]:
        if row[:1] in "+-":
            if not in_block:
                blocks.append([old, old - 1, []])
                in_block = True
            blocks[-1][2].append(row)
            if row[0] == "-":
                blocks[-1][1] = old
                old += 1
        else:
            in_block = False
            old += 1
    near = [block for first, last, block in blocks if first - 1 <= line <= max(last, first) + 1]
    return near[0] if near else [r for r in rows[1:] if r[:1] in "+-"]


def carry(verdicts_path: Path, first_path: Path, now_path: Path) -> int:
    """The verdicts of an earlier round carried to a later run of the same repositories: an
    edit of the first sample that the later run still makes (same file, rule and line) keeps
    its verdict; the others are gone; edits the first sample did not hold are listed as not
    judged. A measure of the changes on repositories that drove them, not a held-out one."""
    verdicts = json.loads(verdicts_path.read_text())
    first = json.loads(first_path.read_text())["sample"]
    now = json.loads(now_path.read_text())["sample"]
    key = lambda edit: (edit["repo"], edit["path"], edit["code"], edit["line"])  # noqa: E731
    made = {key(edit): edit for edit in now}
    judged = {key(edit) for edit in first if edit["id"] in verdicts}
    kept: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    gone: collections.Counter = collections.Counter()
    changed: list[str] = []  # made still, but differently: the verdict does not carry
    for edit in first:
        verdict = verdicts.get(edit["id"])
        if verdict is None:
            continue
        later = made.get(key(edit))
        if later is None:
            gone[verdict["verdict"]] += 1
        elif _changed_lines(later["hunk"], later["line"]) != _changed_lines(edit["hunk"], edit["line"]):
            changed.append(later["id"])
        else:
            kept[edit["code"]][verdict["verdict"]] += 1
    print("| rule | correct | wrong | doubtful |\n|---|--:|--:|--:|")
    total: collections.Counter = collections.Counter()
    for code in sorted(kept):
        total.update(kept[code])
        print(f"| {code} | {kept[code]['correct']} | {kept[code]['wrong']} | {kept[code]['doubtful']} |")
    count = sum(total.values())
    share = f"{total['correct'] / count:.0%}" if count else "-"
    print(f"| **still made** ({count}) | {total['correct']} ({share}) | {total['wrong']} | {total['doubtful']} |")
    print(f"no longer made: {dict(gone)}")
    print(f"made differently, to judge again: {len(changed)}" + "".join(f"\n- {c}" for c in changed))
    unjudged = [edit["id"] for edit in now if key(edit) not in judged]
    print(f"made now, not in the judged sample: {len(unjudged)}" + "".join(f"\n- {u}" for u in unjudged[:20]))
    return 0


def tally(labels: list[str], results: Path = HERE / "results") -> int:
    """Every held-out set run under each of ``labels`` (``sample-heldoutN-LABEL.json``), scored
    with the verdicts its edits were given when they were judged (at first look, or judged again
    after a change: any ``verdicts-heldoutN-*.json`` with its sample), matched by file, rule,
    line and changed lines. Edits no reader judged are counted apart. Compares two versions of
    the code on the same repositories without a new reading."""
    def key(edit: dict) -> tuple:
        return (edit["repo"], edit["path"], edit["code"], edit["line"], tuple(_changed_lines(edit["hunk"], edit["line"])))

    sets = sorted(
        {int(m.group(1)) for label in labels for p in results.glob(f"sample-heldout*-{label}.json")
         if (m := re.match(rf"sample-heldout(\d+)-{re.escape(label)}\.json$", p.name))}
    )
    totals = {label: collections.Counter() for label in labels}
    print("| set | " + " | ".join(f"{label}: correct / wrong (raise) / doubtful / not judged" for label in labels) + " |")
    print("|---|" + "---|" * len(labels))
    for n in sets:
        known: dict[tuple, dict] = {}
        for verdicts_path in sorted(results.glob(f"verdicts-heldout{n}-*.json")):
            verdicts = json.loads(verdicts_path.read_text())
            for sample_path in sorted(results.glob(f"sample-heldout{n}-*.json")):
                for edit in json.loads(sample_path.read_text())["sample"]:
                    if edit["id"] in verdicts and verdicts_path.name.endswith("-first.json") == sample_path.name.endswith("-first.json"):
                        known.setdefault(key(edit), verdicts[edit["id"]])
        row = []
        for label in labels:
            path = results / f"sample-heldout{n}-{label}.json"
            if not path.exists():
                row.append("-")
                continue
            count: collections.Counter = collections.Counter()
            for edit in json.loads(path.read_text())["sample"]:
                verdict = known.get(key(edit))
                count["not judged" if verdict is None else verdict["verdict"]] += 1
                if verdict is not None and verdict["verdict"] == "wrong" and verdict.get("raises"):
                    count["raises"] += 1
            totals[label].update(count)
            row.append(f"{count['correct']} / {count['wrong']} ({count['raises']}) / {count['doubtful']} / {count['not judged']}")
        print(f"| {n} | " + " | ".join(row) + " |")
    for label, count in totals.items():
        judged = count["correct"] + count["wrong"] + count["doubtful"]
        share = f"{count['correct'] / judged:.1%}" if judged else "-"
        print(f"{label}: {count['correct']} correct of {judged} judged ({share}), {count['wrong']} wrong "
              f"({count['raises']} raise), {count['doubtful']} doubtful, {count['not judged']} not judged")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default="run")
    parser.add_argument("--sources", default=str(HERE / "SOURCES.json"))
    parser.add_argument("--gpu", default="A100-80GB")
    parser.add_argument("--size", type=int, default=120)
    parser.add_argument("--all", action="store_true", help="every applied edit, not a sample (a small corpus)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--keep", help="folder for the repositories' files (default: a temporary one)")
    parser.add_argument("--score", type=Path, help="score a verdicts file instead of running")
    parser.add_argument(
        "--carry", nargs=3, type=Path, metavar=("VERDICTS", "FIRST_SAMPLE", "LATER_SAMPLE"),
        help="carry the verdicts of FIRST_SAMPLE's edits to a later run of the same repositories",
    )
    parser.add_argument(
        "--tally", nargs="+", metavar="LABEL",
        help="score every held-out set's sample-heldoutN-LABEL.json with the verdicts its edits already have",
    )
    args = parser.parse_args(argv)
    if args.tally:
        return tally(args.tally)
    if args.score:
        return score(args.score)
    if args.carry:
        return carry(*args.carry)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
