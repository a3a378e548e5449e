"""advisor over real code at scale: `check` and `fix --unsafe-fixes` on copies of the Python
sources of the installed torch, transformers and accelerate, and of advisor's own fixtures.

    python bench/robustness/run.py                           # every corpus; prints the tables
    python bench/robustness/run.py --out docs/robustness.md  # ... and writes the figures section
    python bench/robustness/run.py --corpus accelerate       # one corpus (repeatable)
    python bench/robustness/run.py --keep /tmp/corpus        # keep the copies to look at

Each corpus is copied into a temporary folder, then the real command line runs over the
copy, as a user would run it over a repository:

1. ``advisor check --no-cache --format json --exit-zero`` (every rule);
2. ``advisor fix --unsafe-fixes`` (writes the copies);
3. ``advisor fix --unsafe-fixes --diff`` (a second fix: must have nothing left to do).

What must hold, each counted, the run failing (exit 1) on any count that is not zero:

- no crash: no traceback, no exit code other than 0, 1 or 2, no "internal error in ADVxxx";
- errors (ADV000) only for files that Python itself cannot compile;
- no broken fix: every changed file compiles and reads no name that nothing defines where
  the original read none; no fix dropped by the fixer because it would not have compiled;
- idempotent: the second fix changes nothing (and ``--diff`` writes nothing);
- converged: no file's fix loop stopped at its round limit with fixes pending.
"""
from __future__ import annotations

import argparse
import builtins
import collections
import datetime
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import symtable
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))  # the advisor of the checkout this runner sits in

from advisor.engine import RELEVANT  # noqa: E402

PACKAGES = ("torch", "transformers", "accelerate")
CORPORA = (*PACKAGES, "fixtures")
SECTION_START = "<!-- corpus-figures:start -->"
SECTION_END = "<!-- corpus-figures:end -->"
# Read without being bound in the file, and still defined: a module's own attributes.
MODULE_NAMES = frozenset({
    "__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__path__",
    "__builtins__", "__annotations__", "__cached__", "__dict__", "__module__", "__qualname__", "__class__",
})


# -- corpora ----------------------------------------------------------------------------
@dataclass
class Corpus:
    name: str
    sources: dict[str, Path]  # where each file goes in the copy -> where it comes from

    @property
    def files(self) -> list[str]:
        return sorted(self.sources)


def _python_files(root: Path) -> dict[str, Path]:
    return {
        path.relative_to(root).as_posix(): path
        for path in root.rglob("*")
        if path.suffix in (".py", ".pyi") and path.is_file() and "__pycache__" not in path.parts
    }


def package_root(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{name} is not installed: pip install -e '.[test]'")
    return Path(spec.origin).parent


def package_corpus(name: str) -> Corpus:
    return Corpus(name, _python_files(package_root(name)))


def fixtures_corpus() -> Corpus:
    root = REPO / "fixtures"
    return Corpus("fixtures", {p.relative_to(root).as_posix(): p for p in [*root.glob("*.py"), *root.glob("lookalikes/*.py")]})


def corpus_named(name: str) -> Corpus:
    return fixtures_corpus() if name == "fixtures" else package_corpus(name)


# -- what a fixed file may not do ---------------------------------------------------------
def compiles(data: bytes, path: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in old files
            compile(data, path, "exec", dont_inherit=True)
    except Exception:  # SyntaxError, ValueError (null bytes), RecursionError, MemoryError
        return False
    return True


def undefined_names(source: str | bytes, path: str = "<source>") -> set[str]:
    """Names the file reads from the global namespace that nothing in it binds (builtins aside).

    symtable is CPython's own scope analysis: a fix that uses ``torch`` without importing it,
    or a helper it never defined, shows up here while still compiling."""
    top = symtable.symtable(source.decode("utf-8", "replace") if isinstance(source, bytes) else source, path, "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    read: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        for symbol in table.get_symbols():
            if symbol.is_declared_global() and symbol.is_assigned():
                defined.add(symbol.get_name())
            if symbol.is_referenced() and (table is top or symbol.is_global()):
                read.add(symbol.get_name())
    return {name for name in read - defined - MODULE_NAMES if not hasattr(builtins, name)}


def new_undefined_names(pair: tuple[str, bytes, bytes]) -> tuple[str, list[str]]:
    path, before, after = pair
    try:
        introduced = undefined_names(after, path) - undefined_names(before, path)
    except (SyntaxError, ValueError, RecursionError):
        return path, ["<symtable failed>"]
    return path, sorted(introduced)


# -- one corpus ---------------------------------------------------------------------------
@dataclass
class Figures:
    name: str
    files: int = 0
    lines: int = 0
    analyzed: int = 0  # files the prefilter lets through (they mention torch & co.)
    findings: int = 0
    findings_by_code: collections.Counter = field(default_factory=collections.Counter)
    fixes_applied: int = 0
    files_changed: int = 0
    uncompilable: list[str] = field(default_factory=list)  # originals Python cannot compile
    errors: list[str] = field(default_factory=list)  # "path: message" from check or fix
    crashes: list[str] = field(default_factory=list)
    errors_on_compilable: list[str] = field(default_factory=list)
    broken_fixes: list[str] = field(default_factory=list)
    dropped_fixes: list[str] = field(default_factory=list)
    non_idempotent: list[str] = field(default_factory=list)
    non_converged: list[str] = field(default_factory=list)
    seconds: dict[str, tuple[float, float]] = field(default_factory=dict)  # step -> (wall, CPU)

    MUST_BE_ZERO = ("crashes", "errors_on_compilable", "broken_fixes", "dropped_fixes", "non_idempotent", "non_converged")

    def violations(self) -> list[str]:
        return [f"{self.name}: {kind}: {item}" for kind in self.MUST_BE_ZERO for item in getattr(self, kind)]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _advisor(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, tuple[float, float]]:
    """Run the command line; returns its result and (wall, CPU) seconds, worker processes included."""
    env = dict(os.environ, NO_COLOR="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start, cpu = time.perf_counter(), _children_cpu()
    completed = subprocess.run(
        [sys.executable, "-m", "advisor", *args], cwd=cwd, env=env, capture_output=True, text=True, errors="replace"
    )
    return completed, (time.perf_counter() - start, _children_cpu() - cpu)


_INTERNAL = re.compile(r"internal error in ADV\d+")
_TRACEBACK = "Traceback (most recent call last)"
_FIXED = re.compile(r"^Fixed (\d+) findings? in (\d+) files?", re.MULTILINE)
_DROPPED = re.compile(r"^(.*?): fix dropped, it would break the code: (.*)$", re.MULTILINE)
_PENDING = re.compile(r"^(.*?): fixes still pending after", re.MULTILINE)
_ERROR_LINE = re.compile(r"^(.*?):\d+:\d+: ADV000 (.*)$", re.MULTILINE)
_DIFF_FILE = re.compile(r"^--- a/(.*)$", re.MULTILINE)


def _crashed(step: str, completed: subprocess.CompletedProcess, figures: Figures) -> None:
    output = completed.stdout + completed.stderr
    if _TRACEBACK in output:
        tail = output[output.index(_TRACEBACK):].strip().splitlines()[-1]
        figures.crashes.append(f"{step}: traceback: {tail}")
    if completed.returncode not in (0, 1, 2):
        figures.crashes.append(f"{step}: exit code {completed.returncode}")
    for match in sorted(set(_INTERNAL.findall(output))):
        figures.crashes.append(f"{step}: {match}")


def _digests(folder: Path, files: list[str]) -> dict[str, str]:
    return {rel: hashlib.sha256((folder / rel).read_bytes()).hexdigest() for rel in files}


def run_corpus(corpus: Corpus, work: Path, jobs: int | None = None, log=print) -> Figures:
    """Copy ``corpus`` under ``work``, check it, fix it twice, and count what went wrong."""
    figures = Figures(corpus.name)
    copy = work / corpus.name
    # Robustness is about every file, the libraries' tests included (a project leaves those
    # out by default: [tool.advisor] exclude replaces that list).
    work.mkdir(parents=True, exist_ok=True)
    (work / "pyproject.toml").write_text("[tool.advisor]\nexclude = []\n")
    originals: dict[str, bytes] = {}
    for rel in corpus.files:
        data = corpus.sources[rel].read_bytes()
        originals[rel] = data
        target = copy / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        figures.files += 1
        figures.lines += data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        figures.analyzed += bool(RELEVANT.search(data))
        if not compiles(data, rel):
            figures.uncompilable.append(rel)
    uncompilable = set(figures.uncompilable)
    common = ["--no-color"] + (["--jobs", str(jobs)] if jobs else [])
    prefix = corpus.name + "/"

    def relative(path: str) -> str:
        return path.removeprefix(prefix)

    def sort_errors(step: str, errors: list[tuple[str, str]]) -> None:
        for path, message in errors:
            rel = relative(path)
            figures.errors.append(f"{step}: {rel}: {message}")
            if rel not in uncompilable and not _INTERNAL.search(message):
                figures.errors_on_compilable.append(f"{step}: {rel}: {message}")

    # 1. check
    log(f"[{corpus.name}] advisor check over {figures.files} files ...")
    completed, figures.seconds["check"] = _advisor(["check", corpus.name, "--no-cache", "--format", "json", "--exit-zero", *common], work)
    _crashed("check", completed, figures)
    try:
        report = json.loads(completed.stdout)
    except json.JSONDecodeError:
        figures.crashes.append(f"check: no JSON report (exit {completed.returncode}): {completed.stderr.strip()[-300:]}")
        report = {"findings": [], "errors": []}
    figures.findings = len(report["findings"])
    figures.findings_by_code = collections.Counter(f["code"] for f in report["findings"])
    sort_errors("check", [(e["path"], e["message"]) for e in report["errors"]])
    if completed.returncode == 2 and not report["errors"]:
        figures.crashes.append("check: exit code 2 without an error reported")

    # 2. fix
    log(f"[{corpus.name}] advisor fix --unsafe-fixes ...")
    completed, figures.seconds["fix"] = _advisor(["fix", corpus.name, "--unsafe-fixes", *common], work)
    _crashed("fix", completed, figures)
    summary = _FIXED.search(completed.stdout)
    if summary is None:
        figures.crashes.append(f"fix: no summary line (exit {completed.returncode})")
    else:
        figures.fixes_applied = int(summary.group(1))
    figures.dropped_fixes += [f"{relative(p)}: {what}" for p, what in _DROPPED.findall(completed.stdout)]
    figures.non_converged += [relative(p) for p in _PENDING.findall(completed.stdout)]
    fix_errors = [(p, m) for p, m in _ERROR_LINE.findall(completed.stdout) if not _INTERNAL.search(m)]
    sort_errors("fix", [(p, m) for p, m in fix_errors if f"check: {relative(p)}: {m}" not in figures.errors])
    if completed.returncode == 2 and not _ERROR_LINE.search(completed.stdout):
        figures.crashes.append("fix: exit code 2 without an error reported")

    changed = [rel for rel in corpus.files if (copy / rel).read_bytes() != originals[rel]]
    figures.files_changed = len(changed)
    if summary is not None and int(summary.group(2)) != len(changed):
        figures.crashes.append(f"fix: says {summary.group(2)} files were changed, {len(changed)} were")
    for rel in changed:
        if not compiles((copy / rel).read_bytes(), rel):
            figures.broken_fixes.append(f"{rel}: does not compile")
    pairs = [(rel, originals[rel], (copy / rel).read_bytes()) for rel in changed if rel not in uncompilable]
    if pairs:
        with ProcessPoolExecutor(max_workers=jobs or None) as pool:
            for rel, names in pool.map(new_undefined_names, pairs, chunksize=8):
                if names:
                    figures.broken_fixes.append(f"{rel}: reads names nothing defines: {', '.join(names)}")

    # 3. fix again: nothing may be left to do
    log(f"[{corpus.name}] advisor fix --unsafe-fixes --diff (again) ...")
    before = _digests(copy, corpus.files)
    completed, figures.seconds["fix again"] = _advisor(["fix", corpus.name, "--unsafe-fixes", "--diff", *common], work)
    _crashed("fix again", completed, figures)
    figures.non_idempotent += [relative(p) for p in _DIFF_FILE.findall(completed.stdout)]
    if _digests(copy, corpus.files) != before:
        figures.crashes.append("fix --diff wrote files")
    return figures


# -- report -------------------------------------------------------------------------------
def _total(all_figures: list[Figures]) -> Figures:
    total = Figures("total")
    for f in all_figures:
        for name in ("files", "lines", "analyzed", "findings", "fixes_applied", "files_changed"):
            setattr(total, name, getattr(total, name) + getattr(f, name))
        total.findings_by_code.update(f.findings_by_code)
        total.uncompilable.extend(f"{f.name}/{path}" for path in f.uncompilable)
        for name in ("errors", *Figures.MUST_BE_ZERO):
            getattr(total, name).extend(getattr(f, name))
        for step, (wall, cpu) in f.seconds.items():
            total_wall, total_cpu = total.seconds.get(step, (0.0, 0.0))
            total.seconds[step] = (total_wall + wall, total_cpu + cpu)
    return total


def tables(all_figures: list[Figures]) -> str:
    rows = [*all_figures, _total(all_figures)] if len(all_figures) > 1 else all_figures

    def row(cells) -> str:
        return "| " + " | ".join(str(c) for c in cells) + " |"

    def bold(f: Figures, value) -> str:
        return f"**{value}**" if f.name == "total" else str(value)

    out = [
        row(["corpus", "files", "lines", "analyzed", "findings", "fixes applied", "files changed",
             "check s (CPU s)", "fix s (CPU s)", "fix again s (CPU s)"]),
        row(["---"] + ["---:"] * 9),
    ]
    for f in rows:
        out.append(row([bold(f, f.name), f"{f.files:,}", f"{f.lines:,}", f"{f.analyzed:,}", f"{f.findings:,}",
                        f"{f.fixes_applied:,}", f"{f.files_changed:,}",
                        *("{:.0f} ({:.0f})".format(*f.seconds.get(step, (0, 0))) for step in ("check", "fix", "fix again"))]))
    out += [
        "",
        row(["corpus", "files Python cannot compile", "ADV000 errors", "crashes", "errors on files that compile",
             "broken fixes", "dropped fixes", "non-idempotent", "non-converged"]),
        row(["---"] + ["---:"] * 8),
    ]
    for f in rows:
        out.append(row([bold(f, f.name), len(f.uncompilable), len(f.errors), len(f.crashes),
                        len(f.errors_on_compilable), len(f.broken_fixes), len(f.dropped_fixes),
                        len(f.non_idempotent), len(f.non_converged)]))
    return "\n".join(out)


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        memory = f", {kib / 2**20:.0f} GiB memory"
    except (OSError, IndexError, ValueError):
        pass
    return f"{platform.system()} {platform.machine()}, {cpu}, {cores} cores{memory}, Python {platform.python_version()}"


def versions() -> str:
    parts = []
    for name in ("advisor", "libcst", *PACKAGES):
        try:
            parts.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return ", ".join(parts)


def section(all_figures: list[Figures], command: str, wall: float) -> str:
    total = _total(all_figures)
    top = ", ".join(f"{code} {count:,}" for code, count in total.findings_by_code.most_common(10))
    lines = [
        SECTION_START,
        f"Measured {datetime.date.today().isoformat()} with `{command}` ({wall / 60:.0f} min in all) on {machine()};",
        f"{versions()}. Rules: all; target: advisor's default (no `--gpu`, no GPU on the machine).",
        "",
        tables(all_figures),
        "",
        f"Most frequent findings: {top or 'none'}.",
    ]
    if total.uncompilable:
        lines += ["", f"Files Python {platform.python_version()} cannot compile (the only files allowed an ADV000 error): "
                  + ", ".join(f"`{p}`" for p in total.uncompilable) + "."]
    lines.append(SECTION_END)
    return "\n".join(lines)


def write_section(doc: Path, text: str) -> None:
    """Replace the figures section of ``doc`` (between the markers), leaving the rest alone."""
    if doc.exists():
        current = doc.read_text(encoding="utf-8")
        if SECTION_START in current and SECTION_END in current:
            head, rest = current.split(SECTION_START, 1)
            tail = rest.split(SECTION_END, 1)[1]
            doc.write_text(head + text + tail, encoding="utf-8")
            return
        doc.write_text(current.rstrip("\n") + "\n\n" + text + "\n", encoding="utf-8")
        return
    doc.write_text("# Robustness\n\n" + text + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="append", choices=CORPORA, help="corpus to run (default: all)")
    parser.add_argument("--out", type=Path, help="markdown file whose figures section to (re)write")
    parser.add_argument("--jobs", type=int, help="advisor's worker processes (default: one per core)")
    parser.add_argument("--keep", type=Path, help="work in this folder (created) and keep it")
    args = parser.parse_args(argv)
    names = args.corpus or list(CORPORA)
    start = time.perf_counter()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        work = args.keep
    else:
        work = Path(tempfile.mkdtemp(prefix="advisor-corpus-"))
    try:
        all_figures = [run_corpus(corpus_named(name), work, args.jobs, log=lambda m: print(m, file=sys.stderr, flush=True)) for name in names]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    wall = time.perf_counter() - start
    print(tables(all_figures))
    violations = [v for f in all_figures for v in f.violations()]
    for violation in violations:
        print(f"FAIL {violation}")
    if args.out:
        command = "python bench/robustness/run.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
        write_section(args.out, section(all_figures, command, wall))
        print(f"wrote the figures section of {args.out}")
    print(f"{'FAILED' if violations else 'OK'}: {len(violations)} violation(s) in {wall:.0f} s")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
