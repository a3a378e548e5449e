"""Recall and precision of ``advisor check`` on real public training projects, against hand labels.

The corpus is ``labels/*.json``: for each project a repository, a pinned commit, the files a
reader reviewed in full and every problem they found (file, line, catalogue code), labelled
from ``../shared/RULES.md`` alone before advisor ran on them (PROTOCOL.md). Only the labels
live in this repository: the code is fetched.

    python bench/recall/run.py --out docs/recall.md
    python bench/recall/run.py --from-findings bench/recall/results/final.json   # rescore a saved run

For each project the pinned commit's Python files are written to a scratch folder (from a
local mirror of the repository, ``--mirror``, or a clone from GitHub into ``--cache``), a
``.git`` marker makes it a project root, and ``advisor check --format json`` runs over the
whole folder, so that modules see their siblings as they would in a user's checkout. Findings
in reviewed files are matched to labels of the same file and code: within ``LINE_WINDOW``
lines (``WIDE_WINDOW`` for codes whose anchor a reader may place on another line of the same
construct), one finding per label; ``FILE_LEVEL`` codes (one setting fixes the whole script)
count once per file. A finding that matches no label is *unlabelled*: ``adjudication.json``
records what a second reader judged it (``correct`` or ``wrong``); precision counts matched
findings and those judged correct.
"""
from __future__ import annotations

import argparse
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LINE_WINDOW = 3
WIDE_WINDOW = 15
WIDE = frozenset({"ADV203", "ADV602", "ADV705", "ADV604", "ADV303", "ADV301", "ADV302"})
FILE_LEVEL = frozenset({"ADV202", "ADV605"})
# Codes one setting per training site answers, whose finding sits on the setting
# (``Accelerator(...)``, ``TrainingArguments(...)``) or on the loop, and whose label a reader may
# put on the other, tens of lines away: matched anywhere in the file, still one finding a label.
SITE_LEVEL = frozenset({"ADV203"})
# Codes advisor implements; labels with other codes (ADV8xx) are reported apart.
IMPLEMENTED_PREFIXES = ("ADV1", "ADV2", "ADV3", "ADV4", "ADV5", "ADV6", "ADV7", "ADV8")
NOT_YET: frozenset[str] = frozenset()
_LISTED_LINES = re.compile(r"more reads? in this step: lines? ([\d, ]+)")
_PLACED_AT = re.compile(r"` at line (\d+)")


@dataclass(frozen=True)
class Label:
    repo: str
    path: str
    line: int
    code: str
    confidence: str
    note: str


@dataclass(frozen=True)
class Finding:
    repo: str
    path: str
    line: int
    code: str
    message: str

    @property
    def lines(self) -> tuple[int, ...]:
        """The lines the finding reports: its own, and those its message lists as further
        instances in the same place (ADV701 reports one read per step: "and 2 more reads in this
        step: lines 12, 14")."""
        listed = _LISTED_LINES.search(self.message)
        extra = tuple(int(n) for n in re.findall(r"\d+", listed.group(1))) if listed else ()
        # A value the message places elsewhere ("`batch_size = 100` at line 15"): the same finding.
        placed = tuple(int(n) for n in _PLACED_AT.findall(self.message))
        return (self.line, *extra, *placed)


@dataclass
class Project:
    repo: str
    commit: str
    kind: str
    entry_scripts: list[str]
    reviewed: list[str]
    labels: list[Label] = field(default_factory=list)


def load_projects(folder: Path) -> list[Project]:
    projects: list[Project] = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        for item in data["projects"]:
            project = Project(item["repo"], item["commit"], item.get("kind", ""), item["entry_scripts"], item["reviewed_files"])
            for label in item["labels"]:
                project.labels.append(
                    Label(item["repo"], label["path"], int(label["line"]), label["code"], label.get("confidence", "sure"), label.get("note", ""))
                )
            projects.append(project)
    return projects


def implemented(code: str) -> bool:
    return code.startswith(IMPLEMENTED_PREFIXES) and code not in NOT_YET


# -- the code ------------------------------------------------------------------------------------
def git_dir(repo: str, mirror: Path | None, cache: Path) -> Path:
    """A git directory holding ``repo``: the mirror's (``owner+name``), else a clone in ``cache``."""
    if mirror is not None:
        candidate = mirror / repo.replace("/", "+")
        for inner in (candidate, *sorted(candidate.glob("*.git")), *sorted(candidate.glob("*"))):
            if (inner / "HEAD").exists() and (inner / "objects").exists():
                return inner
    target = cache / repo.replace("/", "+")
    if not (target / "HEAD").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "--bare", "--quiet", f"https://github.com/{repo}", str(target)], check=True)
    return target


# What a checkout holds beside the code that advisor reads: YAML configs (which name the classes
# Hydra and ``instantiate_from_config`` build), requirement and build files, READMEs and install
# scripts (which say the versions a project runs), DeepSpeed / launcher JSON configs. Notebooks
# and data are left out: no reviewed file depends on them, and they are large.
_CHECKOUT_SUFFIXES = (".py", ".yaml", ".yml", ".txt", ".toml", ".cfg", ".md", ".rst", ".sh", ".json")
_CHECKOUT_NAMES = ("Dockerfile", "Makefile", "Pipfile")
_LARGEST_TEXT = 512 * 1024


def _wanted(path: str, size: int) -> bool:
    name = path.rsplit("/", 1)[-1]
    if path.endswith(".py"):
        return True
    return size <= _LARGEST_TEXT and (name.endswith(_CHECKOUT_SUFFIXES) or name.startswith(_CHECKOUT_NAMES))


def materialize(project: Project, source: Path, into: Path) -> Path:
    """The project's Python files and the text files of a checkout advisor reads (``_wanted``)
    at the pinned commit, under ``into`` / owner+name."""
    folder = into / project.repo.replace("/", "+")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    listed = subprocess.run(
        ["git", "--git-dir", str(source), "ls-tree", "-r", "-l", "-z", project.commit],
        check=True,
        capture_output=True,
    ).stdout.decode(errors="replace").split("\0")
    paths = []
    for entry in listed:
        meta, _, path = entry.partition("\t")
        fields = meta.split()
        if len(fields) == 4 and fields[1] == "blob" and fields[3].isdigit() and _wanted(path, int(fields[3])):
            paths.append(path)
    for start in range(0, len(paths), 200):
        archive = subprocess.run(
            ["git", "--git-dir", str(source), "archive", "--format=tar", project.commit, "--", *paths[start : start + 200]],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    (folder / ".git").mkdir()  # a project root, as in the user's checkout
    return folder


def run_advisor(folder: Path, command: list[str], gpu: str, project_scope: bool) -> list[dict]:
    args = [*command, "check", "--format", "json", "--no-cache", "--gpu", gpu, str(folder)]
    if not project_scope:
        args.insert(len(command) + 1, "--no-project")
    completed = subprocess.run(args, capture_output=True, text=True, cwd=folder)
    if completed.returncode not in (0, 1):
        sys.stderr.write(completed.stderr[-2000:])
    try:
        return json.loads(completed.stdout)["findings"]
    except (ValueError, KeyError):
        sys.stderr.write(f"no JSON from advisor on {folder}:\n{completed.stdout[-1000:]}{completed.stderr[-2000:]}\n")
        return []


# -- scoring -------------------------------------------------------------------------------------
def match(labels: list[Label], findings: list[Finding]) -> tuple[dict[Label, Finding], list[Finding]]:
    """Labels matched to findings of the same file and code (nearest line first), and the
    findings left over."""
    matched: dict[Label, Finding] = {}
    used: set[int] = set()
    by_key: dict[tuple[str, str], list[tuple[int, Finding]]] = defaultdict(list)
    for index, finding in enumerate(findings):
        by_key[(finding.path, finding.code)].append((index, finding))
    pairs = []
    for label in labels:
        for index, finding in by_key.get((label.path, label.code), ()):
            distance = min(abs(line - label.line) for line in finding.lines)
            window = 10**9 if label.code in FILE_LEVEL | SITE_LEVEL else WIDE_WINDOW if label.code in WIDE else LINE_WINDOW
            if distance <= window:
                pairs.append((distance, label.line, index, label, finding))
    # A finding answers one label, or every label on the lines it lists.
    capacity = {i: 1 + (len(_LISTED_LINES.findall(f.message)) and len(f.lines) - 1) for i, f in enumerate(findings)}
    for distance, _, index, label, finding in sorted(pairs, key=lambda p: (p[0], p[1], p[2])):
        if label in matched or capacity[index] == 0:
            continue
        matched[label] = finding
        capacity[index] -= 1
        used.add(index)
    # Labels are one per line: a second finding of the code on a matched line is the same label's.
    matched_lines = {(label.path, label.code, label.line) for label in matched}
    for index, finding in enumerate(findings):
        if index not in used and any((finding.path, finding.code, line) in matched_lines for line in finding.lines):
            used.add(index)
    rest = [f for i, f in enumerate(findings) if i not in used]
    return matched, rest


def collapse(labels: list[Label]) -> list[Label]:
    """One label per file for the codes a single setting fixes for the whole script."""
    seen: set[tuple[str, str, str]] = set()
    kept = []
    for label in sorted(labels, key=lambda l: (l.repo, l.path, l.line)):
        if label.code in FILE_LEVEL:
            key = (label.repo, label.path, label.code)
            if key in seen:
                continue
            seen.add(key)
        kept.append(label)
    return kept


def key_of(item: Label | Finding) -> str:
    return f"{item.repo}:{item.path}:{item.line}:{item.code}"


@dataclass
class Score:
    labels: Counter = field(default_factory=Counter)
    found: Counter = field(default_factory=Counter)
    findings: Counter = field(default_factory=Counter)
    correct: Counter = field(default_factory=Counter)
    wrong: Counter = field(default_factory=Counter)
    pending: Counter = field(default_factory=Counter)


def score(projects: list[Project], findings: dict[str, list[Finding]], adjudication: dict[str, str], confidence: str | None):
    result = Score()
    misses: list[Label] = []
    unlabelled: list[Finding] = []
    for project in projects:
        reviewed = set(project.reviewed)
        labels = collapse([l for l in project.labels if implemented(l.code) and (confidence is None or l.confidence == confidence)])
        found = [f for f in findings.get(project.repo, []) if f.path in reviewed]
        matched, rest = match(labels, found)
        for label in labels:
            result.labels[label.code] += 1
            if label in matched:
                result.found[label.code] += 1
            else:
                misses.append(label)
        for finding in found:
            result.findings[finding.code] += 1
        rest_ids = {id(f) for f in rest}
        for finding in found:
            if id(finding) not in rest_ids:
                result.correct[finding.code] += 1
        for finding in rest:
            verdict = adjudication.get(key_of(finding))
            if isinstance(verdict, dict):
                verdict = verdict.get("verdict")
            if verdict == "correct":
                result.correct[finding.code] += 1
            elif verdict == "wrong":
                result.wrong[finding.code] += 1
            else:
                result.pending[finding.code] += 1
                unlabelled.append(finding)
    return result, misses, unlabelled


def ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b else "-"


def table(result: Score) -> list[str]:
    codes = sorted(set(result.labels) | set(result.findings))
    rows = ["| rule | labels | found | recall | findings | correct | wrong | not judged | precision |", "|---|---|---|---|---|---|---|---|---|"]
    for code in codes:
        judged = result.correct[code] + result.wrong[code]
        rows.append(
            f"| {code} | {result.labels[code]} | {result.found[code]} | {ratio(result.found[code], result.labels[code])} "
            f"| {result.findings[code]} | {result.correct[code]} | {result.wrong[code]} | {result.pending[code]} "
            f"| {ratio(result.correct[code], judged)} |"
        )
    total = lambda counter: sum(counter.values())  # noqa: E731
    judged = total(result.correct) + total(result.wrong)
    rows.append(
        f"| **all** | {total(result.labels)} | {total(result.found)} | **{ratio(total(result.found), total(result.labels))}** "
        f"| {total(result.findings)} | {total(result.correct)} | {total(result.wrong)} | {total(result.pending)} "
        f"| **{ratio(total(result.correct), judged)}** |"
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=Path, default=HERE / "labels")
    parser.add_argument("--adjudication", type=Path, default=HERE / "adjudication.json")
    parser.add_argument("--mirror", type=Path, default=Path(os.environ.get("ADVISOR_MIRROR", "/work/.mirror")))
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "advisor-recall")
    parser.add_argument("--advisor", default=f"{sys.executable} -m advisor.cli", help="the command that runs advisor")
    parser.add_argument("--gpu", default="A100-80GB")
    parser.add_argument("--no-project", action="store_true", help="analyse each file alone (advisor's --no-project)")
    parser.add_argument("--confidence", choices=["sure", "likely"], help="score against these labels only")
    parser.add_argument("--only", action="append", help="projects (owner/name) to run")
    parser.add_argument("--findings", type=Path, help="write every finding here (JSON), for adjudication")
    parser.add_argument("--misses", type=Path, help="write the labels not found here (JSON)")
    parser.add_argument("--out", type=Path, help="write the report (Markdown) here")
    parser.add_argument("--keep", type=Path, help="write the projects' files here and keep them (default: a scratch folder)")
    parser.add_argument("--from-findings", type=Path, help="score the findings a --findings run wrote (results/*.json) instead of running advisor")
    args = parser.parse_args(argv)

    projects = [p for p in load_projects(args.labels) if not args.only or p.repo in args.only]
    adjudication = json.loads(args.adjudication.read_text()) if args.adjudication.exists() else {}
    mirror = args.mirror if args.mirror.exists() else None
    command = args.advisor.split()
    findings: dict[str, list[Finding]] = defaultdict(list)
    if args.from_findings:
        for item in json.loads(args.from_findings.read_text())["findings"]:
            findings[item["repo"]].append(Finding(**item))
    with tempfile.TemporaryDirectory(prefix="advisor-recall-") as scratch:
        for project in [] if args.from_findings else projects:
            folder = materialize(project, git_dir(project.repo, mirror, args.cache), args.keep or Path(scratch))
            raw = run_advisor(folder, command, args.gpu, not args.no_project)
            findings[project.repo] = [
                Finding(project.repo, os.path.relpath(os.path.join(folder, f["path"]), folder), f["line"], f["code"], f["message"])
                for f in raw
            ]
            print(f"{project.repo}: {len(raw)} findings", file=sys.stderr)

    result, misses, unlabelled = score(projects, findings, adjudication, args.confidence)
    scripts = sum(len(p.entry_scripts) for p in projects)
    files = sum(len(p.reviewed) for p in projects)
    lines = [
        f"{len(projects)} projects, {scripts} entry scripts, {files} reviewed files; "
        f"labels with codes advisor implements: {sum(result.labels.values())}"
        + (f" ({args.confidence} only)" if args.confidence else ""),
        "",
        *table(result),
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)
    if args.findings:
        everything = [f.__dict__ for fs in findings.values() for f in fs]
        args.findings.write_text(json.dumps({"findings": everything, "unlabelled": [f.__dict__ for f in unlabelled]}, indent=1))
    if args.misses:
        args.misses.write_text(json.dumps([m.__dict__ for m in misses], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
