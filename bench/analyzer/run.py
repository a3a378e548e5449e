"""Time `advisor check` against TorchFix and Fixit on the same corpora, and tabulate files/s.

    python bench/analyzer/run.py                                   # everything, printed
    python bench/analyzer/run.py --out docs/performance.md         # ... and written there
    python bench/analyzer/run.py --sample 600 --out docs/performance.md
    python bench/analyzer/run.py --quick --no-peers                # a smoke run in seconds

Corpora, built in a work folder outside the repository (a temporary one unless --work-dir):
  fixtures  the repo's fixtures (fixtures/*.py, fixtures/lookalikes/*.py) copied into
            c0/, c1/, ... until there are --fixture-files of them (default 1,000);
  packages  the .py files of installed packages (--packages, default accelerate, transformers,
            torch), copied so that every tool sees the same files and advisor's default
            excludes (site-packages) do not apply; --sample N keeps N of them, evenly spread;
  scale     the fixtures copied to --scale-files (default 10,000): advisor only, for the
            warm-run and memory targets.

Each corpus root holds a pyproject.toml that pins the configuration: advisor with every rule
(`select = ["ALL"]`, no excludes) and its cache in that root; Fixit's built-in rules
(`enable = ["fixit.rules"]`, its default) with `root = true`, so no config further up applies.

The peers are installed into their own venvs (--peer-venv-dir, default
~/.cache/advisor-bench/venvs: torchfix/ and fixit/), reused when present. advisor is the one
installed next to the Python running this script.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

try:
    import psutil
except ImportError:  # the RSS column then reads n/a
    psutil = None

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURE_DIRS = ("fixtures", "fixtures/lookalikes")
DEFAULT_PACKAGES = ("accelerate", "transformers", "torch")
DEFAULT_VENV_DIR = Path.home() / ".cache" / "advisor-bench" / "venvs"
ALL_CORPORA = ("fixtures", "packages", "scale")

# Issue 5's targets; issue 11 raised the cold ratio from 10x to "stays at or above 12x" (what
# advisor had reached before project scope).
TARGET_COLD_RATIO = 12.0
TARGET_WARM_S = 2.0
TARGET_RSS_MB = 500.0
# Issue 11: project scope costs at most this much over analysing each file alone.
TARGET_PROJECT_OVERHEAD = 0.20
SCALE_TARGET_FILES = 10_000

# Both advisor and TorchFix skip files that cannot matter to them before parsing; the corpus
# description says how many files each prefilter lets through.
ADVISOR_RELEVANT = re.compile(rb"\b(torch|transformers|accelerate|lightning|pytorch_lightning|trl)\b")
RSS_POLL_S = 0.05

PYPROJECT = """\
# Written by bench/analyzer/run.py: pins every tool's configuration for this corpus.
[tool.advisor]
select = ["ALL"]

[tool.fixit]
root = true
enable = ["fixit.rules"]
"""


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- corpora -------------------------------------------------------------------------------
@dataclasses.dataclass
class Corpus:
    name: str
    root: Path
    description: str
    files: int = 0
    lines: int = 0
    bytes: int = 0
    mention_torch: int = 0  # files TorchFix parses (those containing "torch")
    advisor_relevant: int = 0  # files advisor's prefilter lets through

    def add(self, data: bytes) -> None:
        self.files += 1
        self.lines += data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)
        self.bytes += len(data)
        self.mention_torch += b"torch" in data
        self.advisor_relevant += ADVISOR_RELEVANT.search(data) is not None


def fixture_sources() -> list[tuple[str, bytes]]:
    """(path relative to a copy's folder, bytes) for every fixture script."""
    sources = []
    for folder in FIXTURE_DIRS:
        for path in sorted((REPO / folder).glob("*.py")):
            sources.append((str(path.relative_to(REPO / "fixtures")), path.read_bytes()))
    if not sources:
        raise SystemExit(f"no fixtures under {REPO / 'fixtures'}: run from a checkout of advisor")
    return sources


def start_corpus(name: str, root: Path, description: str) -> Corpus:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    return Corpus(name, root, description)


def build_fixture_corpus(name: str, root: Path, target_files: int) -> Corpus:
    sources = fixture_sources()
    copies = max(1, math.ceil(target_files / len(sources)))
    corpus = start_corpus(
        name, root, f"the repo's {len(sources)} fixture scripts (fixtures/, fixtures/lookalikes/) x {copies} "
        + ("copy" if copies == 1 else "copies") + " in c0/, c1/, ..."
    )
    for copy in range(copies):
        for relative, data in sources:
            destination = root / f"c{copy}" / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(data)
            corpus.add(data)
    return corpus


def package_sources(packages: list[str]) -> list[tuple[str, Path]]:
    """(package/relative/path.py, source) for every .py file of each package, in a stable order."""
    import importlib.util

    found = []
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(f"package {package!r} is not installed in {sys.executable}: pass --packages or --corpus")
        for location in spec.submodule_search_locations:
            location = Path(location)
            for directory, dirnames, filenames in os.walk(location):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for filename in sorted(filenames):
                    if filename.endswith(".py"):
                        path = Path(directory) / filename
                        found.append((f"{package}/{path.relative_to(location)}", path))
    return found


def evenly_spread(items: list, sample: int | None) -> list:
    """`sample` items at evenly spaced positions (all of them when sample is None or too big)."""
    if sample is None or sample >= len(items):
        return list(items)
    return [items[i * len(items) // sample] for i in range(sample)]


def build_package_corpus(root: Path, packages: list[str], sample: int | None) -> Corpus:
    sources = package_sources(packages)
    chosen = evenly_spread(sources, sample)
    versions = ", ".join(f"{p} {package_version(p)}" for p in packages)
    kept = "all their .py files"
    if len(chosen) < len(sources):
        kept = f"{len(chosen):,} of their {len(sources):,} .py files, evenly spread"
    corpus = start_corpus("packages", root, f"{versions}: {kept}")
    for relative, source in chosen:
        data = source.read_bytes()
        destination = root / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
        corpus.add(data)
    return corpus


def package_version(name: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


# -- running and timing --------------------------------------------------------------------
@dataclasses.dataclass
class RunResult:
    wall_s: float
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    tree_rss: int | None  # peak of the summed RSS of the process and all its descendants
    process_rss: int | None  # peak RSS of the largest single process in the tree


class RssPoller(threading.Thread):
    """Samples the RSS of a process tree until stopped; keeps the peaks."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid = pid
        self.tree_peak = 0
        self.process_peak = 0
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self.halt.is_set():
            try:
                processes = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            total = 0
            for process in processes:
                try:
                    rss = process.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                self.process_peak = max(self.process_peak, rss)
            self.tree_peak = max(self.tree_peak, total)
            self.halt.wait(RSS_POLL_S)


def run_command(command: list[str], cwd: Path, timeout: float, output_dir: Path) -> RunResult:
    """Run `command` with stdout and stderr to files (a peer's report can be large); time it."""
    output_dir.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = output_dir / "stdout.txt", output_dir / "stderr.txt"
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        poller = RssPoller(process.pid) if psutil is not None else None
        if poller is not None:
            poller.start()
        timed_out = False
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, 9)
            process.wait()
        wall = time.perf_counter() - started
        if poller is not None:
            poller.halt.set()
            poller.join()
    return RunResult(
        wall_s=wall,
        returncode=process.returncode,
        timed_out=timed_out,
        stdout=stdout_path.read_text(encoding="utf-8", errors="replace"),
        stderr=stderr_path.read_text(encoding="utf-8", errors="replace"),
        tree_rss=poller.tree_peak if poller is not None else None,
        process_rss=poller.process_peak if poller is not None else None,
    )


# -- tools -----------------------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    ok: bool
    findings: int | None = None
    checked: int | None = None  # files the tool itself says it analyzed, where it says
    problem: str = ""


@dataclasses.dataclass
class Tool:
    name: str
    version: str
    python: Path
    command: Callable[[Path], list[str]]
    judge: Callable[[RunResult], Outcome]
    invocation: str  # for the doc


def crash_text(result: RunResult) -> str:
    if result.timed_out:
        return f"timed out after {result.wall_s:.0f} s"
    tail = result.stderr.strip().splitlines()[-3:]
    return f"exit {result.returncode}: " + " / ".join(tail)


def judge_advisor(result: RunResult) -> Outcome:
    # 2 means some file could not be analyzed, which a real package tree may hold; with
    # --exit-zero, findings alone exit 0. A crash leaves no JSON report.
    if result.timed_out or result.returncode not in (0, 2):
        return Outcome(False, problem=crash_text(result))
    try:
        report = json.loads(result.stdout)
    except ValueError:
        return Outcome(False, problem="no JSON report: " + crash_text(result))
    errors = len(report.get("errors", []))
    return Outcome(True, findings=len(report["findings"]), problem=f"{errors} files not analyzed" if errors else "")


TORCHFIX_FINDING = re.compile(r"^.+:\d+:\d+: TOR\d+ ", re.M)
TORCHFIX_DONE = re.compile(r"Finished checking (\d+) files")


def judge_torchfix(result: RunResult) -> Outcome:
    # TorchFix exits 1 when some file failed to parse or transform, and silences those files'
    # errors; an uncaught exception exits 1 too, but never prints "Finished checking".
    done = TORCHFIX_DONE.search(result.stderr)
    no_candidates = result.returncode == 0 and not result.stderr.strip()  # no file mentions torch
    if result.timed_out or result.returncode not in (0, 1) or not (done or no_candidates):
        return Outcome(False, problem=crash_text(result))
    return Outcome(True, findings=len(TORCHFIX_FINDING.findall(result.stdout)),
                   checked=int(done.group(1)) if done else 0,
                   problem="some files failed" if result.returncode == 1 else "")


FIXIT_FINDING = re.compile(r"^.+@\d+:\d+ \w+: ", re.M)
FIXIT_DONE = re.compile(r"(\d+) files? (checked|clean)")


def judge_fixit(result: RunResult) -> Outcome:
    # Fixit's exit code is a bit set: 1 lint errors found, 2 some file failed.
    done = FIXIT_DONE.search(result.stderr)
    if result.timed_out or result.returncode not in (0, 1, 2, 3) or not done:
        return Outcome(False, problem=crash_text(result))
    return Outcome(True, findings=len(FIXIT_FINDING.findall(result.stdout)), checked=int(done.group(1)),
                   problem="some files failed" if result.returncode & 2 else "")


def script_of(python: Path, name: str) -> Path:
    return python.parent / name


def capture(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"? ({error})"
    return (done.stdout or done.stderr).strip()


def venv_facts(python: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, platform\n"
        "print(platform.python_version())\n"
        "print(m.version('libcst'))\n"
    )
    lines = capture([str(python), "-c", code]).splitlines()
    return {"python": lines[0] if lines else "?", "libcst": lines[1] if len(lines) > 1 else "?"}


def compile_advisor(python: Path) -> None:
    """Byte-compile advisor's modules and rules, as pip does when it installs a package: from
    an editable checkout under ``PYTHONDONTWRITEBYTECODE`` (these machines set it), every timed
    run would otherwise compile each module changed since its ``.pyc`` was written, which is
    most of a warm run's time (0.45 s of 1.4 s on the packages corpus)."""
    code = (
        "import compileall, os, advisor, advisor.rules\n"
        "for module in (advisor, advisor.rules):\n"
        "    compileall.compile_dir(os.path.dirname(module.__file__), quiet=1)\n"
    )
    subprocess.run([str(python), "-c", code], check=True)


def advisor_tool() -> Tool:
    python = Path(sys.executable)
    compile_advisor(python)
    script = script_of(python, "advisor")
    base = [str(script)] if script.exists() else [str(python), "-m", "advisor"]
    version = capture([*base, "--version"]).replace("advisor ", "")

    def command(path: Path) -> list[str]:
        # no --no-cache here: cold and warm runs add or leave it (see measure_advisor)
        return [*base, "check", "--select", "ALL", "--exit-zero", "--format", "json", str(path)]

    return Tool("advisor", version, python, command, judge_advisor,
                "advisor check --select ALL --exit-zero --format json [--no-cache] DIR")


def ensure_venv(directory: Path, requirement: str, script: str) -> Path:
    """A venv holding `requirement`; made and installed with pip once, reused afterwards."""
    python = directory / "bin" / "python"
    if script_of(python, script).exists():
        return python
    log(f"creating {directory} and installing {requirement} (once; reused afterwards)")
    directory.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(directory)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", requirement], check=True)
    return python


def torchfix_tool(venv_dir: Path) -> Tool:
    python = ensure_venv(venv_dir / "torchfix", "torchfix", "torchfix")
    script = str(script_of(python, "torchfix"))
    return Tool("TorchFix", capture([script, "--version"]), python, lambda path: [script, "--select=ALL", str(path)],
                judge_torchfix, "torchfix --select=ALL DIR")


def fixit_tool(venv_dir: Path) -> Tool:
    python = ensure_venv(venv_dir / "fixit", "fixit", "fixit")
    script = str(script_of(python, "fixit"))
    version = capture([script, "--version"]).rsplit(" ", 1)[-1]
    return Tool("Fixit", version, python, lambda path: [script, "lint", str(path)], judge_fixit, "fixit lint DIR")


def fixit_rules(python: Path, corpus_root: Path) -> dict:
    """The rules Fixit enables for a file in this corpus, and those it leaves out and why, asked of Fixit."""
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from fixit.config import collect_rules, generate_config\n"
        "config = generate_config(Path(sys.argv[1]))\n"
        "reasons = {}\n"
        "enabled = sorted(type(rule).__name__ for rule in collect_rules(config, debug_reasons=reasons))\n"
        "left_out = {getattr(r, '__name__', str(r)): why for r, why in reasons.items()}\n"
        "print(json.dumps({'enabled': enabled, 'left_out': left_out}))\n"
    )
    probe = corpus_root / "probe_for_fixit_rules.py"
    probe.write_text("", encoding="utf-8")
    try:
        return json.loads(capture([str(python), "-c", code, str(probe)]))
    except ValueError:
        return {"enabled": [], "left_out": {}}
    finally:
        probe.unlink()


def torchfix_rules(python: Path) -> list[str]:
    code = "from torchfix.torchfix import GET_ALL_ERROR_CODES as codes; print(*codes())"
    return capture([str(python), "-c", code]).split()


# -- measuring -------------------------------------------------------------------------------
@dataclasses.dataclass
class Row:
    tool: str
    mode: str  # cold, warm, first run
    corpus: str
    files: int
    lines: int
    walls: list[float]
    tree_rss: int | None
    process_rss: int | None
    findings: int | None
    checked: int | None
    note: str = ""
    failed: str = ""

    @property
    def median(self) -> float | None:
        return statistics.median(self.walls) if self.walls else None

    @property
    def files_per_s(self) -> float | None:
        return self.files / self.median if self.median else None

    @property
    def lines_per_s(self) -> float | None:
        return self.lines / self.median if self.median else None


def measure(tool: Tool, command: list[str], corpus: Corpus, mode: str, runs: int, options: argparse.Namespace,
            before_each: Callable[[], None] | None = None) -> Row:
    row = Row(tool.name, mode, corpus.name, corpus.files, corpus.lines, [], None, None, None, None)
    for index in range(runs):
        if not run_once(row, tool, command, corpus, index, runs, options, before_each):
            break
    return row


def run_once(row: Row, tool: Tool, command: list[str], corpus: Corpus, index: int, runs: int,
             options: argparse.Namespace, before_each: Callable[[], None] | None = None) -> bool:
    """One timed run added to ``row``; False when it failed (recorded in the row)."""
    if before_each is not None:
        before_each()
    outputs = options.work_dir / "outputs" / f"{tool.name}-{row.mode}-{corpus.name}-{index}".replace(" ", "_")
    result = run_command(command, corpus.root.parent, options.timeout, outputs)
    outcome = tool.judge(result)
    log(f"{tool.name:8} {row.mode:9} {corpus.name:8} run {index + 1}/{runs}: {result.wall_s:8.2f} s"
        + ("" if outcome.ok else f"  FAILED: {outcome.problem}"))
    if not outcome.ok:
        row.failed = outcome.problem
        return False
    row.walls.append(result.wall_s)
    if result.tree_rss is not None:
        row.tree_rss = max(row.tree_rss or 0, result.tree_rss)
        row.process_rss = max(row.process_rss or 0, result.process_rss or 0)
    row.findings, row.checked, row.note = outcome.findings, outcome.checked, outcome.problem
    return True


def measure_interleaved(tool: Tool, commands: list[tuple[list[str], str]], corpus: Corpus, runs: int,
                        options: argparse.Namespace) -> list[Row]:
    """Runs of several commands in turn (A B A B ...): a machine whose speed drifts during the
    measurement slows them alike, so their ratio, taken run by run, holds."""
    rows = [Row(tool.name, mode, corpus.name, corpus.files, corpus.lines, [], None, None, None, None)
            for _, mode in commands]
    for index in range(runs):
        for row, (command, _) in zip(rows, commands):
            if not row.failed:
                run_once(row, tool, command, corpus, index, runs, options)
    return rows


def clear_cache(corpus: Corpus) -> Callable[[], None]:
    return lambda: shutil.rmtree(corpus.root / ".advisor_cache", ignore_errors=True)


def measure_advisor(tool: Tool, corpus: Corpus, options: argparse.Namespace, cold: bool, warm: bool) -> list[Row]:
    rows = []
    command = tool.command(corpus.root)
    if cold:
        # With the same files each analysed alone: what project scope (issue 11) costs on top.
        rows.extend(measure_interleaved(
            tool, [([*command, "--no-cache"], "cold"), ([*command, "--no-cache", "--no-project"], "cold, alone")],
            corpus, options.runs, options,
        ))
    if warm:
        first = measure(tool, command, corpus, "first run", 1, options, before_each=clear_cache(corpus))
        if corpus.name == "scale" or first.failed:
            rows.append(first)  # on the scale corpus, the cold side of the memory target
        if not first.failed:
            rows.append(measure(tool, command, corpus, "warm", options.runs, options))
    return rows


def warm_up(tools: list[Tool], options: argparse.Namespace) -> None:
    """Run each tool once on one file, untimed, so no timed run pays for compiling bytecode."""
    corpus = start_corpus("warmup", options.work_dir / "warmup", "")
    relative, data = fixture_sources()[0]
    (corpus.root / Path(relative).name).write_bytes(data)
    for tool in tools:
        command = tool.command(corpus.root) + (["--no-cache"] if tool.name == "advisor" else [])
        run_command(command, options.work_dir, options.timeout, options.work_dir / "outputs" / f"warmup-{tool.name}")


# -- the machine -----------------------------------------------------------------------------
def first_line_starting(path: str, prefix: str) -> str | None:
    """The first line of a system file that starts with ``prefix``; None when it has none or
    cannot be read (not Linux)."""
    try:
        return next((line for line in Path(path).read_text().splitlines() if line.startswith(prefix)), None)
    except OSError:
        return None


def cpu_model() -> str:
    line = first_line_starting("/proc/cpuinfo", "model name")
    return line.split(":", 1)[1].strip() if line else platform.processor() or "?"


def memory_gib() -> str:
    line = first_line_starting("/proc/meminfo", "MemTotal:")
    return f"{int(line.split()[1]) / 2**20:.1f} GiB" if line else "?"


def os_name() -> str:
    line = first_line_starting("/etc/os-release", "PRETTY_NAME=")
    if line:
        return f"{line.split('=', 1)[1].strip(chr(34))}, Linux {platform.release()}"
    return platform.platform()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def checkout_state() -> str:
    """The commit of the checkout this script sits in, and whether it has uncommitted changes."""
    head = capture(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    if not re.fullmatch(r"[0-9a-f]{4,40}", head):
        return "unknown (not a git checkout)"
    dirty = capture(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    return head + (" with uncommitted changes" if dirty else "")


def advisor_fingerprint() -> str:
    """A digest of advisor's sources as the advisor under test sees them: a change mid-run spoils the results."""
    return capture([sys.executable, "-c", "from advisor.cache import rules_fingerprint; print(rules_fingerprint())"])


def busy(facts: dict) -> bool:
    """Whether something else kept the CPUs busy at the start or the end of the run."""
    loads = [facts.get("load_start", "?"), facts.get("load_end", "?")]
    return any(load != "?" and float(load.split(" / ")[0]) > facts["cores"] for load in loads)


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


# -- the report ------------------------------------------------------------------------------
def number(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def megabytes(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 1e6:,.0f}"


def tool_label(row: Row, tools: dict[str, Tool]) -> str:
    tool = tools[row.tool]
    return f"{tool.name} {tool.version}"


def advisor_cold(rows: list[Row], corpus: str) -> Row | None:
    matches = (r for r in rows if r.tool == "advisor" and r.mode == "cold" and r.corpus == corpus and not r.failed)
    return next(matches, None)


def ratio_text(row: Row, rows: list[Row]) -> str:
    if row.tool == "advisor" or row.failed:
        return ""
    ours = advisor_cold(rows, row.corpus)
    if ours is None or not ours.files_per_s or not row.files_per_s:
        return "n/a"
    return f"{ours.files_per_s / row.files_per_s:.1f}x"


def runs_text(row: Row) -> str:
    if not row.walls:
        return "0"
    if len(row.walls) == 1:
        return "1"
    return f"{len(row.walls)} ({seconds(min(row.walls))}-{seconds(max(row.walls))})"


def targets(rows: list[Row], corpora: dict[str, Corpus]) -> list[tuple[str, str, str]]:
    """(target, result, verdict) for each of issue 5's and issue 11's targets that this run measured."""
    out = []
    for corpus in ("fixtures", "packages"):
        peer = next((r for r in rows if r.tool == "TorchFix" and r.corpus == corpus and not r.failed), None)
        ours = advisor_cold(rows, corpus)
        if peer is None or ours is None or not peer.files_per_s or not ours.files_per_s:
            continue
        value = ours.files_per_s / peer.files_per_s
        out.append((f"cold run, {corpus} corpus: at least {TARGET_COLD_RATIO:.0f}x TorchFix's files/s",
                    f"{value:.1f}x ({number(ours.files_per_s)} vs {number(peer.files_per_s, 1)} files/s)",
                    "met" if value >= TARGET_COLD_RATIO else "not met"))
    for corpus in ("fixtures", "packages"):
        ours = advisor_cold(rows, corpus)
        alone = next((r for r in rows if r.tool == "advisor" and r.mode == "cold, alone" and r.corpus == corpus
                      and not r.failed), None)
        if ours is None or alone is None or not ours.median or not alone.median:
            continue
        if len(ours.walls) == len(alone.walls):  # interleaved runs: the median of the run-by-run ratios
            overhead = statistics.median(a / b for a, b in zip(ours.walls, alone.walls)) - 1
            how = "median of run-by-run ratios; "
        else:
            overhead = ours.median / alone.median - 1
            how = ""
        out.append((f"project scope, {corpus} corpus: at most {TARGET_PROJECT_OVERHEAD:.0%} over each file alone "
                    "(cold, `--no-project`, runs interleaved)",
                    f"{overhead:+.0%} ({how}medians {seconds(ours.median)} s vs {seconds(alone.median)} s)",
                    "met" if overhead <= TARGET_PROJECT_OVERHEAD else "not met"))
    scale = corpora.get("scale")
    if scale is None:
        return out

    def verdict(ok: bool) -> str:
        # a miss on fewer files is a miss on 10,000 too; a pass on fewer files proves nothing
        if not ok:
            return "not met"
        return "met" if scale.files >= SCALE_TARGET_FILES else f"not measured at {SCALE_TARGET_FILES:,} files"

    size = f"{scale.files:,} files" + ("" if scale.files >= SCALE_TARGET_FILES else f" (the target is {SCALE_TARGET_FILES:,})")
    scale_rows = [r for r in rows if r.tool == "advisor" and r.corpus == "scale" and not r.failed]
    warm = next((r for r in scale_rows if r.mode == "warm"), None)
    if warm is not None and warm.median is not None:
        out.append((f"warm run on an unchanged tree of {SCALE_TARGET_FILES:,} files: under {TARGET_WARM_S:.0f} s wall, "
                    "start-up included", f"{seconds(warm.median)} s on {size}", verdict(warm.median < TARGET_WARM_S)))
    measured = [r for r in scale_rows if r.tree_rss is not None]
    if measured:
        tree = max(r.tree_rss for r in measured)
        biggest = max(r.process_rss or 0 for r in measured)
        out.append((f"peak RSS over {SCALE_TARGET_FILES:,} files: under {TARGET_RSS_MB:.0f} MB",
                    f"{megabytes(tree)} MB for the whole process tree (largest single process {megabytes(biggest)} MB), "
                    f"over the first run and the warm runs, on {size}", verdict(tree / 1e6 < TARGET_RSS_MB)))
    return out


def render(rows: list[Row], corpora: dict[str, Corpus], tools: dict[str, Tool], facts: dict,
           options: argparse.Namespace) -> str:
    lines = [
        "# Analyzer performance: `advisor check` against TorchFix and Fixit",
        "",
        "<!-- Generated by bench/analyzer/run.py; rerun it rather than editing this file. -->",
        "",
        f"Measured {facts['date']} with one command (see [Reproducing](#reproducing)): every tool on the same "
        "files, on the same machine, in one run.",
        "",
    ]
    if options.note:
        lines += [f"> **{options.note}**", ""]
    if busy(facts):
        lines += [f"> The 1-minute load average ({facts['load_start']} at the start, {facts['load_end']} at the end) "
                  f"exceeded the {facts['cores']} usable cores: other work shared the CPUs, so these figures are noisy "
                  "and the tools ran under different loads.", ""]
    if facts.get("advisor_changed"):
        lines += ["> **advisor's sources changed while this ran, so its rows mix two versions (and warm runs may "
                  "have missed the cache): rerun.**", ""]
    lines += ["## Targets (issue 5)", ""]
    measured = targets(rows, corpora)
    if measured:
        lines += ["| target | result | |", "|---|---|---|"]
        lines += [f"| {t} | {r} | {v} |" for t, r, v in measured]
    else:
        lines.append("This run measured none of the targets (peers or the 10,000-file corpus were left out).")
    lines += [
        "",
        "## Results",
        "",
        "Wall time is the median of the runs, start-up included; files/s and lines/s divide the corpus's files "
        "and lines by it. The ratio is advisor's cold files/s over the peer's on the same corpus. "
        "Peak RSS is the whole process tree's (see [Method](#method)).",
        "",
        "| tool | run | corpus | files | lines | median wall s | files/s | lines/s | advisor / peer (files/s) "
        "| peak RSS MB | findings | runs (min-max s) |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for row in rows:
        if row.failed:
            lines.append(f"| {tool_label(row, tools)} | {row.mode} | {row.corpus} | {row.files:,} | {row.lines:,} | "
                         f"failed: {row.failed.replace('|', '/')} | | | | | | |")
            continue
        findings = number(row.findings)
        if row.note:
            findings += f" ({row.note})"
        lines.append(
            f"| {tool_label(row, tools)} | {row.mode} | {row.corpus} | {row.files:,} | {row.lines:,} | "
            f"{seconds(row.median)} | {number(row.files_per_s, 1)} | {number(row.lines_per_s)} | {ratio_text(row, rows)} | "
            f"{megabytes(row.tree_rss)} | {findings} | {runs_text(row)} |"
        )
    lines += ["", "## Corpora", ""]
    for corpus in corpora.values():
        lines.append(
            f"- **{corpus.name}**: {corpus.description}; {corpus.files:,} files, {corpus.lines:,} lines, "
            f"{corpus.bytes / 2**20:.1f} MiB. {corpus.advisor_relevant:,} files pass advisor's text prefilter "
            f"(they name torch, transformers, accelerate, lightning or trl); {corpus.mention_torch:,} contain "
            "\"torch\", the only files TorchFix parses."
        )
    lines += ["", "## Machine", ""]
    lines += [
        f"- CPU: {facts['cpu']}; {facts['cores']} usable cores (`os.sched_getaffinity`), {facts['cpu_count']} online",
        f"- memory: {facts['memory']}",
        f"- OS: {facts['os']}",
        f"- load average (1/5/15 min) at start: {facts['load_start']}; at the end: {facts['load_end']}",
    ]
    for tool in tools.values():
        venv = facts["venvs"][tool.name]
        where = f"this checkout, commit {facts['checkout']}, run by " if tool.name == "advisor" else ""
        lines.append(f"- {tool.name} {tool.version}: Python {venv['python']}, libcst {venv['libcst']} ({where}`{tool.python}`)")
    lines += ["", "## Method", ""]
    lines += [
        f"- advisor: `{tools['advisor'].invocation}`, every rule enabled ({facts['advisor_rules']} rules). "
        "**cold** adds `--no-cache`; **cold, alone** also `--no-project` (each file analysed alone, without "
        "its project's other modules); **first run** starts with no `.advisor_cache/` and fills it; **warm** "
        "reruns on the unchanged tree with that cache. The corpus root's pyproject.toml says "
        "`[tool.advisor] select = [\"ALL\"]` and holds the cache. Its modules are byte-compiled first, "
        "as an install compiles them (the peers' venvs were compiled by pip).",
    ]
    if "TorchFix" in tools:
        codes = facts.get("torchfix_rules") or []
        lines.append(f"- TorchFix: `{tools['TorchFix'].invocation}`: all {len(codes)} rules ({', '.join(codes)}), "
                     "including those off by default (TOR3, TOR4, TOR9). It parses only files containing \"torch\"; "
                     "\"findings\" counts its report lines.")
    if "Fixit" in tools:
        rules = facts.get("fixit_rules") or {"enabled": [], "left_out": {}}
        left_out = "; ".join(f"{name} left out ({why})" for name, why in sorted(rules["left_out"].items()))
        lines.append(
            f"- Fixit: `{tools['Fixit'].invocation}` with its built-in rules: with no config of its own, Fixit 2 "
            "enables the package `fixit.rules`, and the corpus root pins the same (`[tool.fixit] root = true`, "
            f"`enable = [\"fixit.rules\"]`). Asked for the rules it runs here, Fixit named {len(rules['enabled'])}: "
            f"{', '.join(rules['enabled']) or 'n/a'}{'; ' + left_out if left_out else ''}. The opt-in "
            "`fixit.rules.extra` is not enabled. \"findings\" counts its report lines."
        )
    lines += [
        "- Each tool uses every usable core, its own default (advisor `--jobs`, TorchFix `-j`, Fixit's process pool).",
        "- advisor's cold runs with and without project scope alternate (cold, alone, cold, alone, ...), so a "
        "machine whose speed drifts slows both alike; project scope's overhead is the median of their run-by-run ratios.",
        f"- Runs: advisor {options.runs} per measurement; peers {options.peer_runs_fixtures} on the fixtures corpus "
        f"and {options.peer_runs_packages} on the packages corpus (a TorchFix run over big real files takes minutes). "
        + ("" if options.quick else "Before timing, each tool ran once on one file, untimed, so no timed run compiles bytecode. ")
        + "A nonzero exit for findings or unparsable files is not a failure; a crash or a timeout "
        f"({options.timeout:.0f} s) is.",
        f"- Peak RSS: the process and all its descendants (pool workers) sampled every {RSS_POLL_S * 1000:.0f} ms "
        "with psutil, RSS summed over the tree; shared pages count once per process, so this is an upper bound. "
        "It is the maximum over the runs of that measurement.",
        "",
        "## Reproducing",
        "",
        "From a checkout, with advisor installed in the running Python (`pip install -e .`); the peers' venvs are "
        "created on first use:",
        "",
        "```sh",
        facts["command"],
        "```",
        "",
        "Options: `--corpus fixtures,packages,scale`, `--packages accelerate,transformers,torch`, `--sample N` "
        "(N files of the packages corpus, evenly spread), `--fixture-files N`, `--scale-files N`, `--runs N`, "
        "`--peer-runs N`, `--no-peers`, `--peer-venv-dir DIR`, `--work-dir DIR`, `--json FILE`, `--quick`. "
        "See bench/analyzer/README.md.",
        "",
    ]
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=None, help=f"comma separated, of {', '.join(ALL_CORPORA)} (default: all; "
                        "--quick: fixtures,scale)")
    parser.add_argument("--packages", default=",".join(DEFAULT_PACKAGES), help="installed packages for the packages corpus")
    parser.add_argument("--sample", type=int, help="keep N files of the packages corpus, evenly spread (default: all; --quick: 20)")
    parser.add_argument("--fixture-files", type=int, help="size of the fixtures corpus (default 1,000; --quick: 22)")
    parser.add_argument("--scale-files", type=int, help="size of the scale corpus (default 10,000; --quick: 44)")
    parser.add_argument("--runs", type=int, help="timed runs per advisor measurement (default 3; --quick: 1)")
    parser.add_argument("--peer-runs", type=int, help="timed runs per peer measurement (default 3 on fixtures, 1 on packages)")
    parser.add_argument("--no-peers", action="store_true", help="time advisor only (no venvs, no network)")
    parser.add_argument("--peer-venv-dir", type=Path, default=DEFAULT_VENV_DIR,
                        help="where the peers' venvs are (torchfix/, fixit/), created when missing")
    parser.add_argument("--work-dir", type=Path, help="where corpora go (default: a temporary folder, removed after)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before one run counts as failed")
    parser.add_argument("--out", type=Path, help="write the markdown report here (e.g. docs/performance.md)")
    parser.add_argument("--json", type=Path, help="write the measurements as JSON here")
    parser.add_argument("--note", help="a line shown at the top of the report (e.g. 'preliminary: shared machine')")
    parser.add_argument("--quick", action="store_true", help="tiny corpora and one run: a smoke test of the command")
    options = parser.parse_args(argv)
    quick = options.quick
    chosen = options.corpus or ("fixtures,scale" if quick else ",".join(ALL_CORPORA))
    options.corpora = [c.strip() for c in chosen.split(",") if c.strip()]
    unknown = sorted(set(options.corpora) - set(ALL_CORPORA))
    if unknown:
        parser.error(f"unknown corpus: {', '.join(unknown)} (choose from {', '.join(ALL_CORPORA)})")
    options.packages = [p.strip() for p in options.packages.split(",") if p.strip()]
    if options.sample is None and quick:
        options.sample = 20
    options.fixture_files = options.fixture_files or (22 if quick else 1000)
    options.scale_files = options.scale_files or (44 if quick else 10_000)
    options.runs = options.runs or (1 if quick else 3)
    options.peer_runs_fixtures = options.peer_runs or (1 if quick else 3)
    options.peer_runs_packages = options.peer_runs or 1
    for name in ("sample", "fixture_files", "scale_files", "runs", "peer_runs"):
        value = getattr(options, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return options


def inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    command = "python bench/analyzer/run.py" + ("" if not (argv if argv is not None else sys.argv[1:]) else
                                                " " + shlex.join(argv if argv is not None else sys.argv[1:]))
    temporary = options.work_dir is None
    options.work_dir = Path(tempfile.mkdtemp(prefix="advisor-bench-")) if temporary else options.work_dir.resolve()
    if inside(options.work_dir, REPO):
        # the repo's own pyproject.toml (its excludes, its cache) would apply to the corpora
        raise SystemExit(f"--work-dir must be outside the repository ({REPO})")
    options.work_dir.mkdir(parents=True, exist_ok=True)
    facts = {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "cpu_count": os.cpu_count(),
        "memory": memory_gib(),
        "os": os_name(),
        "load_start": load_average(),
        "command": command,
        "checkout": checkout_state(),
        "advisor_fingerprint": advisor_fingerprint(),
    }
    try:
        tools = {"advisor": advisor_tool()}
        from advisor.registry import all_rules

        facts["advisor_rules"] = len(all_rules())
        if not options.no_peers:
            tools["TorchFix"] = torchfix_tool(options.peer_venv_dir)
            tools["Fixit"] = fixit_tool(options.peer_venv_dir)
        facts["venvs"] = {name: venv_facts(tool.python) for name, tool in tools.items()}

        corpora: dict[str, Corpus] = {}
        if "fixtures" in options.corpora:
            corpora["fixtures"] = build_fixture_corpus("fixtures", options.work_dir / "fixtures", options.fixture_files)
        if "packages" in options.corpora:
            corpora["packages"] = build_package_corpus(options.work_dir / "packages", options.packages, options.sample)
        if "scale" in options.corpora:
            corpora["scale"] = build_fixture_corpus("scale", options.work_dir / "scale", options.scale_files)
        for corpus in corpora.values():
            log(f"corpus {corpus.name}: {corpus.files:,} files, {corpus.lines:,} lines in {corpus.root}")
        if "TorchFix" in tools:
            facts["torchfix_rules"] = torchfix_rules(tools["TorchFix"].python)
        if "Fixit" in tools and corpora:
            facts["fixit_rules"] = fixit_rules(tools["Fixit"].python, next(iter(corpora.values())).root)

        if not options.quick:
            warm_up(list(tools.values()), options)
        rows: list[Row] = []
        for corpus in corpora.values():
            rows += measure_advisor(tools["advisor"], corpus, options, cold=corpus.name != "scale", warm=True)
            if corpus.name == "scale":
                continue  # the scale corpus serves advisor's own targets; a peer would take an hour there
            runs = options.peer_runs_fixtures if corpus.name == "fixtures" else options.peer_runs_packages
            for name in ("TorchFix", "Fixit"):
                if name in tools:
                    rows.append(measure(tools[name], tools[name].command(corpus.root), corpus, "cold", runs, options))
        facts["load_end"] = load_average()
        facts["advisor_changed"] = advisor_fingerprint() != facts["advisor_fingerprint"]
        if facts["advisor_changed"]:
            log("advisor's sources changed during the run: its figures mix two versions")

        report = render(rows, corpora, tools, facts, options)
        print(report)
        if options.out is not None:
            options.out.parent.mkdir(parents=True, exist_ok=True)
            options.out.write_text(report, encoding="utf-8")
            log(f"wrote {options.out}")
        if options.json is not None:
            payload = {
                "facts": facts,
                "tools": {name: {"version": t.version, "invocation": t.invocation, "python": str(t.python)}
                          for name, t in tools.items()},
                "corpora": {name: {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(c).items()}
                            for name, c in corpora.items()},
                "rows": [{**dataclasses.asdict(r), "median_s": r.median, "files_per_s": r.files_per_s,
                          "lines_per_s": r.lines_per_s} for r in rows],
                "targets": [{"target": t, "result": r, "verdict": v} for t, r, v in targets(rows, corpora)],
            }
            options.json.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        return 1 if any(r.failed for r in rows if r.tool == "advisor") else 0
    finally:
        if temporary:
            shutil.rmtree(options.work_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
