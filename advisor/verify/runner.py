"""Orchestrates verify mode: patch, run each variant in its own subprocess, compare, decide.

The patched source is written to a temporary file next to the original
(``.advisor_verify_<name>_*.py``, so relative imports and paths resolve the same) and deleted
afterwards. Runs, in this order: baseline, patched, baseline again (interleaved, so that a drift
of the machine does not favour one side), then with ``ablate`` each fix alone. The original is
rewritten, atomically, only when the patched run completed, its losses match the baseline's
within tolerance and, on CUDA and unless ``keep_slower``, it measured faster than the baseline.
In every other case the file is left byte for byte as it was.
"""
from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from advisor.engine import Settings, analyzable_context
from advisor.fixer import AppliedFix, FixResult, fix_source, write_atomic
from advisor.rule import Applicability
from advisor.targets import detect_local
from advisor.rules.batch_size import AccumulationSplit, larger_splits, probe_start, probed_batch
from advisor.verify import DEFAULT_STEPS, DEFAULT_TIMEOUT_S, DEFAULT_WARMUP
from advisor.verify.compare import (
    loss_parity,
    percentile,
    slower_beyond_noise,
    speed_noise,
)
from advisor.verify.processes import RUN_MARKER, descendants, kill_all, marked, new_marker
from advisor.verify.search import BUDGET_SPENT, Judgement, SearchResult, best_subset

STATUSES = ("ok", "error", "timeout", "oom", "no_steps")
KILL_GRACE_S = 5.0
LOG_TAIL_LINES = 20
ADVISOR_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# ADV401's batch probe: a few steps per split are enough to see the memory a batch needs.
PROBE_STEPS = 2
PROBE_WARMUP = 1  # the first step allocates; memory is known after the second
PROBE_WINDOW_S = 1.0  # enough to rank the splits by speed
# torch.compile's fix, and how long compiling adds to a run. A fixed cost, not a factor: on an
# H200 (2026-11-27) the compiled patch took 47 s against an eager 22 s (GPT-2), 50 s against 23 s
# (the Trainer's GPT-2) and 34 s against 11 s (cnn_synthetic); on an H100 51 s against 24 s and
# 39 s against 12 s. Eager + 30 s covers each; 3x the eager run held back 66 s for GPT-2's 47,
# which left its probe no room for the larger split it was there to try.
COMPILE_CODE = "ADV602"
COMPILE_S = 30.0
PROBE_WITHOUT = frozenset({COMPILE_CODE})  # see _probe_split
PROBE_TIMEOUT_S = 300.0
# Every run of a verify compiles the same model (baseline aside): inductor's on-disk caches of
# compiled graphs and their autograd halves, shared between processes, let the second and later
# runs load what the first compiled. On by default in recent torch; said here for older ones.
COMPILE_CACHES = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
# A measured window of fast steps runs on until it lasts MIN_WINDOW_S, up to MAX_STEPS_FACTOR
# times the steps asked for (a CUDA run only: CPU timings decide nothing).
MIN_WINDOW_S = 2.0
MAX_STEPS_FACTOR = 10
# Testing aid: the CUDA-only minimum window on a CPU run.
WINDOW_ON_CPU_ENV = "ADVISOR_VERIFY_WINDOW_ON_CPU"
# Testing aid: probe on a machine without CUDA, whose memory says nothing about a GPU's.
PROBE_ON_CPU_ENV = "ADVISOR_VERIFY_PROBE_ON_CPU"
# `python -m` would put the working directory first on sys.path and import the caller's json.py,
# math.py or advisor.py in place of the real ones before the script even starts (`-P` needs
# Python 3.11); `-c` puts "" there, taken off before anything else is imported.
HARNESS_BOOTSTRAP = (
    "import sys\n"
    "if sys.path and sys.path[0] == '':\n"
    "    del sys.path[0]\n"
    "from advisor.verify.harness import main\n"
    "main()\n"
)


@dataclass
class VerifyOptions:
    steps: int = DEFAULT_STEPS
    warmup: int = DEFAULT_WARMUP
    timeout: float = DEFAULT_TIMEOUT_S
    unsafe: bool = False
    ablate: bool = False
    keep_slower: bool = False
    script_args: Sequence[str] = ()
    env: Mapping[str, str] | None = None  # extra environment variables for the runs
    baseline_runs: int = 2
    budget: float | None = None  # seconds for all the runs together; None: each run's timeout bounds it
    # On CUDA the measured window runs on past ``steps`` until it lasts this long (see harness).
    min_window_s: float = MIN_WINDOW_S
    # A launcher the runs go through, split as a shell would (``torchrun --nproc_per_node 2``):
    # every rank runs the harness, counts its steps and writes its own result.
    launcher: tuple[str, ...] = ()


# A run given less than this is not started: it could not even import torch and take a step.
MIN_RUN_S = 10.0


class Observer(Protocol):
    def started(self, label: str, target: int) -> None: ...
    def stepped(self, label: str, steps: int) -> None: ...
    def finished(self, label: str, run: dict) -> None: ...


class _Silent:
    def started(self, label: str, target: int) -> None:
        pass

    def stepped(self, label: str, steps: int) -> None:
        pass

    def finished(self, label: str, run: dict) -> None:
        pass


@dataclass
class BatchProbe:
    """ADV401's split as found, as its static fix writes it, the larger ones to try (per-device
    batch doubled), and the fixer's patch with ADV401 at a given per-device batch."""

    original: tuple[int, int]
    default: tuple[int, int]
    larger: list[tuple[int, int]]
    patch: Callable[[int, frozenset[str] | None], FixResult]  # (per-device batch, only these fixes or None for all)


@dataclass
class VerifyOutcome:
    report: dict
    applied: bool
    exit_code: int
    runs: dict[str, dict] = field(default_factory=dict)  # every run by label, for display and plots


# -- one run --------------------------------------------------------------------------------


def empty_run(status: str, steps: int = 0, error: str | None = None) -> dict:
    return {
        "status": status,
        "steps": steps,
        "steps_per_second": None,
        "samples_per_second": None,
        "step_time_ms": {"median": None, "p90": None},
        "peak_memory_bytes": None,
        "losses": [],
        "skipped_steps": 0,
        "error": error,
    }


def summarize(raw: dict) -> dict:
    """The harness's measurements as a report RUN."""
    times = [float(t) for t in raw.get("step_times_ms") or []]
    window = sum(times) / 1000.0
    samples = raw.get("window_samples")
    run = empty_run(raw.get("status", "error"), int(raw.get("steps") or 0), raw.get("error"))
    run.update(
        steps_per_second=len(times) / window if window > 0 else None,
        samples_per_second=samples / window if samples and window > 0 else None,
        step_time_ms={"median": percentile(times, 0.5), "p90": percentile(times, 0.9)},
        peak_memory_bytes=raw.get("peak_memory_bytes"),
        losses=raw.get("losses") or [],
        skipped_steps=int(raw.get("skipped_steps") or 0),
        completed=bool(raw.get("completed")),
        micro_steps=raw.get("micro_steps") or [],
        step_times_ms=times,
        memory_kind=raw.get("memory_kind"),
        timing=raw.get("timing"),
        device=raw.get("device"),
        ranks=raw.get("ranks"),
        rank_steps=raw.get("rank_steps"),
        resident_memory_bytes=raw.get("resident_memory_bytes"),
        device_memory_bytes=raw.get("device_memory_bytes"),
    )
    return run


def _log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 16384))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_run(process: subprocess.Popen, marker: str) -> None:
    """SIGKILL to everything the run started: its process group, the processes that carry its
    marker, and, while the harness lives, every process below it (a child started in a session
    and an environment of its own)."""
    below = descendants(process.pid) if process.returncode is None else []  # a reaped pid may be reused
    _kill_group(process.pid, signal.SIGKILL)
    kill_all(below)
    kill_all(marked(marker))


def _read_progress(fd: int, label: str, observer: Observer, stop: threading.Event, last: list[int]) -> None:
    buffer = b""
    while not stop.is_set():
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return
        if not chunk:
            return
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        if lines:
            try:
                last[0] = int(lines[-1])
            except ValueError:
                continue
            observer.stepped(label, last[0])


def run_variant(
    script: str,
    argv0: str,
    options: VerifyOptions,
    label: str,
    observer: Observer | None = None,
    display_path: str | None = None,
) -> dict:
    """Runs ``script`` under the harness in a fresh process group; never raises for the script's faults."""
    observer = observer or _Silent()
    observer.started(label, options.warmup + options.steps)
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="advisor-verify-")
    if options.launcher:
        # The launcher starts the ranks itself and closes inherited descriptors: rank 0 reports
        # progress through a named pipe. The write end held here keeps the pipe from reading
        # as ended before rank 0 opens it.
        fifo = os.path.join(workdir, "progress")
        os.mkfifo(fifo)
        read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        write_fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    else:
        fifo = None
        read_fd, write_fd = os.pipe()
    stop = threading.Event()
    last = [0]
    try:
        config_path = os.path.join(workdir, "config.json")
        result_path = os.path.join(workdir, "result.json")
        log_path = os.path.join(workdir, "output.log")
        with open(config_path, "w") as handle:
            json.dump(
                {
                    "script": os.path.abspath(script),
                    "argv0": argv0,
                    "args": list(options.script_args),
                    "steps": options.steps,
                    "warmup": options.warmup,
                    "min_window_s": options.min_window_s,
                    "max_steps": options.steps * MAX_STEPS_FACTOR,
                    "window_on_cpu": os.environ.get(WINDOW_ON_CPU_ENV) == "1",
                    "result": result_path,
                    "progress_fd": None if fifo else write_fd,
                    "progress_fifo": fifo,
                    "per_rank": bool(options.launcher),
                    "pythonpath_added": ADVISOR_ROOT,
                },
                handle,
            )
        env = dict(os.environ)
        for name, value in COMPILE_CACHES.items():
            env.setdefault(name, value)  # the user's own setting wins
        env.update(options.env or {})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ADVISOR_ROOT, env.get("PYTHONPATH")) if p)
        marker = env[RUN_MARKER] = new_marker()
        reader = threading.Thread(target=_read_progress, args=(read_fd, label, observer, stop, last), daemon=True)
        reader.start()
        timed_out = False
        with open(log_path, "wb") as log:
            if options.launcher:
                bootstrap = os.path.join(workdir, "advisor_verify_harness.py")
                with open(bootstrap, "w") as handle:
                    handle.write(HARNESS_BOOTSTRAP)
                command = [*launcher_command(options.launcher), bootstrap, config_path]
            else:
                command = [sys.executable, "-c", HARNESS_BOOTSTRAP, config_path]
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=() if fifo else (write_fd,),
                start_new_session=True,
                env=env,
            )
            if not fifo:
                os.close(write_fd)
                write_fd = -1
            try:
                try:
                    process.wait(timeout=options.timeout)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _kill_group(process.pid, signal.SIGTERM)  # the harness writes what it has
                    try:
                        process.wait(timeout=KILL_GRACE_S)
                    except subprocess.TimeoutExpired:
                        _kill_run(process, marker)
                        process.wait()
            except BaseException:  # Ctrl-C in advisor: take the whole run down with it
                _kill_run(process, marker)
                process.wait()
                raise
            finally:
                _kill_run(process, marker)  # DataLoader workers and other leftovers
        stop.set()
        reader.join(timeout=1.0)
        run = _outcome(result_path, log_path, process.returncode, timed_out, last[0], options)
    finally:
        stop.set()
        for fd in (read_fd, write_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
    if display_path and run.get("error"):
        run["error"] = run["error"].replace(os.path.abspath(script), display_path)
    run["wall_s"] = round(time.monotonic() - started, 2)
    observer.finished(label, run)
    return run


_RENDEZVOUS = frozenset({"--standalone", "--rdzv-endpoint", "--rdzv-backend", "--master-port", "--master-addr", "--nnodes"})


def launcher_command(launcher: Sequence[str]) -> list[str]:
    """The launcher, run by this interpreter where it is torch's or Accelerate's (``torchrun``
    on PATH may belong to another environment)."""
    words = list(launcher)
    if words and os.path.basename(words[0]) == "torchrun":
        options = words[1:]
        # One node and no rendezvous given: --standalone picks a free port, so that a run never
        # meets a port the previous one (or anything else) still holds.
        chosen = any(w.split("=")[0].replace("_", "-") in _RENDEZVOUS for w in options)
        return [sys.executable, "-m", "torch.distributed.run", *([] if chosen else ["--standalone"]), *options]
    if len(words) > 1 and os.path.basename(words[0]) == "accelerate" and words[1] == "launch":
        return [sys.executable, "-m", "accelerate.commands.launch", *words[2:]]
    return words


def combine_ranks(ranks: list[dict]) -> dict:
    """One run from every rank's result: the slowest rank's time for each step (a step ends
    when the last rank ends it), the fewest steps, rank 0's losses, the largest peak memory,
    and the worst status."""
    first = dict(ranks[0])
    failed = next((r for r in ranks if r.get("status") != "ok"), None)
    if failed is not None:
        first.update(status=failed.get("status"), error=failed.get("error"), completed=False)
    times = [r.get("step_times_ms") or [] for r in ranks]
    count = min(len(t) for t in times)
    first["step_times_ms"] = [max(t[i] for t in times) for i in range(count)]
    first["steps"] = min(int(r.get("steps") or 0) for r in ranks)
    first["completed"] = all(r.get("completed") for r in ranks)
    memories = [r.get("peak_memory_bytes") for r in ranks if r.get("peak_memory_bytes") is not None]
    first["peak_memory_bytes"] = max(memories) if memories else None
    samples = [r.get("window_samples") for r in ranks]
    first["window_samples"] = sum(samples) if all(samples) else None  # every rank draws its own batches
    first["ranks"] = len(ranks)
    first["rank_steps"] = [int(r.get("steps") or 0) for r in ranks]
    return first


def _read_results(result_path: str) -> dict | None:
    """The harness's result; under a launcher, every rank's (``result.json.rank<N>``) combined."""
    paths = [result_path] if os.path.exists(result_path) else []
    if not paths:
        paths = sorted(glob.glob(result_path + ".rank*"), key=lambda p: int(p.rsplit("rank", 1)[1]))
    ranks = []
    for path in paths:
        try:
            with open(path) as handle:
                ranks.append(json.load(handle))
        except (OSError, ValueError):
            return None
    if not ranks:
        return None
    return ranks[0] if len(ranks) == 1 and paths[0] == result_path else combine_ranks(ranks)


def _outcome(result_path: str, log_path: str, returncode: int, timed_out: bool, progress: int, options: VerifyOptions) -> dict:
    raw = _read_results(result_path)
    if timed_out:
        message = f"no result after --timeout {options.timeout:.4g} s; the run was stopped"
        if raw is not None and not raw.get("completed"):
            run = summarize(raw)
            run.update(status="timeout", error=message)
            return run
        if raw is None:
            run = empty_run("timeout", progress, message)
            run["output"] = _log_tail(log_path)  # where it hung, when the script said
            return run
    if raw is None:
        # The verdict quotes the error's last line: the cause goes there, the script's output apart.
        if returncode == -signal.SIGKILL:
            run = empty_run("oom", progress, "killed by SIGKILL, most likely by the kernel's out-of-memory killer")
        else:
            ended = f"killed by signal {-returncode}" if returncode < 0 else f"ended with status {returncode}"
            run = empty_run("error", progress, f"the process {ended} without writing results: os._exit, or a crash in native code")
        run["output"] = _log_tail(log_path)
        return run
    run = summarize(raw)
    if run["status"] != "ok":
        run["output"] = _log_tail(log_path)  # the script's last words: argparse errors, warnings
        if not run.get("error"):
            run["error"] = run["output"]
    return run


# -- the comparison -----------------------------------------------------------------------


def pool(runs: Sequence[dict]) -> dict:
    """The baseline as reported: both runs' step times pooled, mean rates, highest peak memory."""
    first = runs[0]
    failed = next((r for r in runs if r["status"] != "ok"), None)
    if failed is not None or len(runs) == 1:
        return dict(failed or first)
    times = [t for r in runs for t in r.get("step_times_ms") or []]
    pooled = dict(first)

    def mean(key: str):
        values = [r[key] for r in runs if r.get(key)]
        return sum(values) / len(values) if len(values) == len(runs) else None

    memories = [r["peak_memory_bytes"] for r in runs if r.get("peak_memory_bytes") is not None]
    pooled.update(
        steps_per_second=mean("steps_per_second"),
        samples_per_second=mean("samples_per_second"),
        step_time_ms={"median": percentile(times, 0.5), "p90": percentile(times, 0.9)},
        peak_memory_bytes=max(memories) if memories else None,
        step_times_ms=times,
    )
    return pooled


def speedup_of(baseline: dict, patched: dict) -> float | None:
    before, after = baseline.get("steps_per_second"), patched.get("steps_per_second")
    if not before or not after or baseline["status"] != "ok" or patched["status"] != "ok":
        return None
    return after / before


def fix_codes(fixes: Sequence[AppliedFix]) -> list[str]:
    return list(dict.fromkeys(f.code for f in fixes))


def _failure(run: dict) -> str:
    status = run["status"]
    what = {
        "error": "crashed",
        "timeout": "hit the --timeout",
        "oom": "ran out of memory",
        "no_steps": "never took an optimizer step",
    }.get(status, status)
    error = (run.get("error") or "").strip()
    last = error.splitlines()[-1] if error else ""
    return f"{what}" + (f" ({last})" if last and status != "no_steps" else "")


def _is_cuda(device: str | None) -> bool:
    return bool(device) and device not in ("cpu", "unknown")


CPU_NOTE = "measured on the CPU: CPU timings do not predict GPU gains, so speed did not decide"


class _TempScript:
    """The patched source next to the original, removed on exit whatever happens."""

    def __init__(self, original: str, source: bytes) -> None:
        folder = os.path.dirname(os.path.abspath(original))
        stem = os.path.splitext(os.path.basename(original))[0]
        handle, self.path = tempfile.mkstemp(prefix=f".advisor_verify_{stem}_", suffix=".py", dir=folder)
        with os.fdopen(handle, "wb") as out:
            out.write(source)

    def __enter__(self) -> str:
        return self.path

    def __exit__(self, *exc) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class _Session:
    """The runs of one verify: the baselines, every patched source (measured once), the budget.

    The first baseline and the whole patch always run (within what is left of the budget); every
    further run (a second baseline, the search, the probe, the ablation) starts only when the
    budget left pays for one more run as long as the longest so far."""

    def __init__(self, path: str, original: bytes, options: VerifyOptions, observer: Observer) -> None:
        self.path = path
        self.original = original
        self.options = options
        self.observer = observer
        self.deadline = time.monotonic() + options.budget if options.budget else None
        self.runs: dict[str, dict] = {}
        self.measured: dict[bytes, dict] = {}
        self.baselines: list[dict] = []
        self.longest_s = 0.0
        self.skipped: list[str] = []  # runs the budget did not pay for, for the verdict

    # -- time ---------------------------------------------------------------------------------
    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def next_run_s(self) -> float:
        """What the next full-length run is expected to take: as long as the longest so far."""
        return max(self.longest_s, MIN_RUN_S)

    def affords_another(self, reserve_s: float = 0.0, expected_s: float | None = None) -> bool:
        """Whether the budget left pays for one more run (``expected_s`` long, or as long as the
        longest so far) and still keeps ``reserve_s`` for later ones."""
        remaining = self.remaining()
        return remaining is None or remaining - reserve_s >= max(expected_s or self.next_run_s(), MIN_RUN_S)

    # -- runs ---------------------------------------------------------------------------------
    def baseline(self) -> dict:
        label = "baseline" if not self.baselines else f"baseline {len(self.baselines) + 1}"
        run = self._run(label, self.path, None, self.options)
        self.baselines.append(run)
        return run

    def patched(self, label: str, source: bytes, run_options: VerifyOptions | None = None, reserve_s: float = 0.0) -> dict:
        """The patched source's run; a source already measured with the default options is not run
        again. ``reserve_s`` of the budget is kept for the runs that must come after this one."""
        if run_options is None and source in self.measured:
            return self.measured[source]
        with _TempScript(self.path, source) as temp:
            run = self._run(label, temp, f"{self.path} (patched)", run_options or self.options, reserve_s)
        if run_options is None:
            self.measured[source] = run
        return run

    def _run(self, label: str, script: str, display: str | None, run_options: VerifyOptions, reserve_s: float = 0.0) -> dict:
        remaining = self.remaining()
        if remaining is not None:
            remaining -= reserve_s
        if remaining is not None and remaining < MIN_RUN_S:
            run = empty_run("timeout", error=f"not run: the --budget of {self.options.budget:g} s was spent")
            self.skipped.append(label)
        else:
            if remaining is not None:
                run_options = dataclasses.replace(run_options, timeout=min(run_options.timeout, remaining))
            started = time.monotonic()
            run = run_variant(script, self.path, run_options, label, self.observer, display_path=display)
            if run_options.steps == self.options.steps:  # a probe's short run says little about the next
                self.longest_s = max(self.longest_s, time.monotonic() - started)
        self.runs[label] = run
        return run

    # -- judging --------------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return next((r.get("device") for r in self.runs.values() if r.get("device")), None) or "unknown"

    @property
    def cuda(self) -> bool:
        return _is_cuda(self.device)

    @property
    def noise(self) -> float:
        return speed_noise(self.baselines)

    def judge(self, run: dict, codes: Sequence[str]) -> Judgement:
        if run["status"] != "ok":
            return Judgement(run, False, _failure(run), None, kind="run")
        parity = loss_parity(self.baselines, run, codes)
        speedup = speedup_of(pool(self.baselines), run)
        speed = f"{speedup:.2f}x steps/s" if speedup else "speed not measured (fewer than warm-up + 2 steps)"
        if speedup and len(self.baselines) > 1:
            speed += f" (baseline noise {self.noise:.1%})"
        if not parity.ok:
            return Judgement(run, False, f"loss parity failed: {parity.reason}", speedup, kind="parity", parity=parity)
        if self.cuda and not self.options.keep_slower and speedup is not None:
            if slower_beyond_noise(speedup, self.noise):
                return Judgement(run, False, f"slower, {speed}", speedup, kind="slower", parity=parity)
            if speedup < 1.0:
                # Within the noise, yet below the baseline: not the proof of a gain that writing asks for
                # (accelerate_loop on an H100: 0.85x at 16% baseline noise was written).
                return Judgement(run, False, f"not faster, {speed}", speedup, kind="slower", parity=parity)
        return Judgement(run, True, speed, speedup, parity=parity)


def verify_patch(
    path: str,
    original: bytes,
    patched: bytes,
    fixes: Sequence[AppliedFix],
    options: VerifyOptions,
    observer: Observer | None = None,
    subset: Callable[[frozenset[str]], FixResult] | None = None,
    batch_probe: BatchProbe | None = None,
) -> VerifyOutcome:
    """Measures ``patched`` against the file at ``path`` (whose bytes are ``original``), decides and
    writes. ``subset(codes)`` is the fixer's patch with only those fixes: with it, a patch that does
    not hold is searched for its best subset that does (see ``search``), and ``options.ablate``
    measures each fix alone. With ``batch_probe`` the accumulation split is first probed."""
    session = _Session(path, original, options, observer or _Silent())
    codes = fix_codes(fixes)
    notes: list[str] = []
    baseline_first = session.baseline()
    probe_entries: list[dict] = []
    split = batch_probe.default if batch_probe else None
    if batch_probe is not None and baseline_first["status"] == "ok":
        # After the first baseline, which tells the device and spares the probe when the script fails anyway.
        if _is_cuda(baseline_first.get("device")) or os.environ.get(PROBE_ON_CPU_ENV) == "1":
            split, probe_entries = _probe_split(batch_probe, session, codes)
            if split != batch_probe.default:
                chosen = batch_probe.patch(split[0], None)
                patched, fixes, codes = chosen.fixed, chosen.applied, fix_codes(chosen.applied)
                probed_batch_size = split[0]

                def subset(selected: frozenset[str]) -> FixResult:
                    return batch_probe.patch(probed_batch_size, selected)
            notes.append(_probe_note(split, probe_entries, session.cuda, larger=bool(batch_probe.larger)))
        else:
            notes.append(
                f"batch split kept at {split[0]} x {split[1]}: the batch probe needs CUDA "
                "(CPU memory says nothing about what fits on a GPU)"
            )
    full: Judgement | None = None
    unchanged = patched == original  # only the batch probe had something to try, and it kept the split
    if baseline_first["status"] == "ok" and not unchanged:
        full_run = session.patched("patched", patched)
        if full_run["status"] == "ok":
            for _ in range(1, max(1, options.baseline_runs)):
                if not session.affords_another():
                    notes.append("the baseline ran once: the --budget left did not pay for a second run")
                    break
                session.baseline()
        full = session.judge(full_run, codes)
    baseline = pool(session.baselines)

    written: tuple[list[str], bytes, Sequence[AppliedFix], Judgement] | None = None
    search: SearchResult | None = None
    if unchanged and baseline["status"] == "ok":
        verdict = "nothing to change: " + (
            "the script's own batch split is the best the probe found" if probe_entries else "the batch probe did not run"
        )
    elif baseline["status"] != "ok":
        verdict = f"not applied: the original script {_failure(baseline)} under verify, so there is nothing to compare with"
    else:
        assert full is not None
        if full.held:
            written = (codes, patched, fixes, full)
        elif subset is not None and len(codes) > 1:
            search = best_subset(
                codes, original, lambda selected: subset(selected).fixed,
                lambda label, source, selected: _measured(session, label, source, selected), session.cuda, session.noise,
                failure=full.kind,
            )
            if search.best is not None:
                best = subset(search.best.codes)
                written = (fix_codes(best.applied), best.fixed, best.applied, search.best.judgement)
        if written is None:
            verdict = "not applied: " + (full.reason if full.kind == "parity" else _rejection(full, "the patched script"))
            if full.kind == "slower":
                verdict += "; --keep-slower keeps it anyway"
            if search is not None:
                verdict += f"; no subset of the fixes holds either: {_dropped_text(search)}"
        else:
            written_codes, _, _, judgement = written
            assert judgement.parity is not None
            verdict = f"{judgement.reason}; {judgement.parity.reason}"
            if judgement.speedup and session.cuda and slower_beyond_noise(judgement.speedup, session.noise):
                verdict = verdict.replace(judgement.reason, f"{judgement.reason} (slower than the baseline, kept by --keep-slower)", 1)
            if search is not None:
                verdict += f"; {_rejection(full, 'the whole patch')}, so {len(written_codes)} of {len(codes)} fixes are kept; dropped: {_dropped_text(search)}"
            if not judgement.run.get("completed") or not baseline.get("completed"):
                notes.append(
                    f"the script finished by itself after {min(baseline['steps'], judgement.run['steps'])} steps, "
                    f"before {options.warmup} + {options.steps}"
                )
    applied = False
    if written is not None:
        written_codes, source, _, _ = written
        applied, verdict = _write(path, original, source, written_codes, verdict)
    if not applied:
        verdict += f"; {path} is unchanged"
    if not session.cuda and full is not None and full.run["status"] == "ok":
        notes.append(CPU_NOTE)
    shown = written[3] if written is not None else full
    ablation = _ablation(session, codes, subset) if options.ablate and subset is not None and baseline["status"] == "ok" else []
    if session.cuda and not probe_entries and shown is not None and shown.run.get("status") == "ok":
        headroom = headroom_note(shown.run)
        if headroom:
            notes.append(headroom)
    if session.skipped:
        notes.append(f"the --budget of {options.budget:g} s did not pay for: {', '.join(session.skipped)}")
    if search is not None and search.stopped:
        notes.append(f"the search stopped early: {search.stopped}")
    if notes:
        verdict += "; " + "; ".join(dict.fromkeys(notes))

    report = {
        "device": session.device,
        "script": path,
        "fixes": written[0] if written is not None else codes,
        "baseline": baseline,
        "patched": shown.run if shown is not None else None,
        "speedup": shown.speedup if shown is not None else None,
        "loss_parity": bool(shown is not None and shown.parity is not None and shown.parity.ok),
        "applied": applied,
        "verdict": verdict,
        "ablation": ablation,
        "applied_fixes": [dataclasses.asdict(f) for f in (written[2] if written is not None else fixes)],
        "baseline_runs": session.baselines,
        "parity": shown.parity.as_dict() if shown is not None and shown.parity is not None else None,
        "steps": options.steps,
        "warmup": options.warmup,
        "cuda": session.cuda,
        "batch_probe": probe_entries,
        "budget_s": options.budget,
        "launcher": " ".join(options.launcher) or None,
        "wall_s": round(sum(r.get("wall_s") or 0.0 for r in session.runs.values()), 2),
        "search": None,
    }
    if search is not None:
        report["search"] = {
            "whole_patch": {"fixes": codes, "patched": full.run if full else None, "reason": full.reason if full else None},
            "kept": sorted(search.best.codes) if search.best else [],
            "dropped": [{"code": code, "reason": reason} for code, reason in search.dropped.items()],
            "trials": search.trials,
            "stopped": search.stopped,
        }
    if batch_probe is not None and split is not None:
        report["batch_split"] = {"original": list(batch_probe.original), "chosen": list(split), "probed": bool(probe_entries)}
    return VerifyOutcome(report, applied, 0 if applied or unchanged and baseline["status"] == "ok" else 1, session.runs)


USABLE_MEMORY = 0.9  # of the device's memory: the allocator's fragmentation and the CUDA context need the rest
HEADROOM_MULTIPLE_SHOWN = 64  # beyond this many times the batch, the estimate is said as "over"


def _batch_that_fits(run: dict, batch: int) -> float | None:
    """The per-device batch that would fit in USABLE_MEMORY of the device, where the run's step
    used ``batch`` samples and the step's own memory (the peak less what stays between steps)
    grows with the batch; None where the run does not tell (no device memory: a CPU)."""
    peak, total, resident = run.get("peak_memory_bytes"), run.get("device_memory_bytes"), run.get("resident_memory_bytes")
    if not peak or not total or resident is None or peak <= resident or batch < 1:
        return None
    per_sample = (peak - resident) / batch
    return (USABLE_MEMORY * total - resident) / per_sample


def headroom_note(run: dict) -> str | None:
    """Where no batch was probed: how much of the GPU the step used and, if the step's own memory
    (the peak less what stays between steps) grows with the batch, the per-device batch that would fit."""
    peak, total = run.get("peak_memory_bytes"), run.get("device_memory_bytes")
    if not peak or not total:
        return None
    note = f"peak GPU memory {peak / 2**30:.1f} of {total / 2**30:.1f} GiB ({peak / total:.0%})"
    resident = run.get("resident_memory_bytes")
    rate, samples_rate, micro = run.get("steps_per_second"), run.get("samples_per_second"), run.get("micro_steps") or []
    if resident is None or not rate or not samples_rate or not micro or peak <= resident:
        return note
    per_step = sorted(micro)[len(micro) // 2]
    batch = round(samples_rate / rate / max(per_step, 1))
    if batch < 1:
        return note
    fits = int(_batch_that_fits(run, batch))  # type: ignore[arg-type]
    if fits >= 8:
        fits -= fits % 8  # the guide: a multiple of 8
    if fits >= 2 * batch:
        # mlp_synthetic on an H100 used 1% of the card: "about 2045184" claimed a precision the
        # estimate does not have, past any batch a data set of that script holds.
        if fits <= HEADROOM_MULTIPLE_SHOWN * batch:
            estimate = f"a per-device batch of about {fits} would fit where this step used {batch}"
        else:
            estimate = f"a per-device batch over {HEADROOM_MULTIPLE_SHOWN} times the {batch} this step used would fit"
        note += (
            f"; {estimate} (if its memory "
            "grows with the batch): the guide's first technique is to fill the GPU, then accumulate only "
            "to reach the effective batch you want"
        )
    return note


def _measured(session: _Session, label: str, source: bytes, codes: frozenset[str]) -> Judgement | None:
    if source not in session.measured and not session.affords_another():
        return None
    return session.judge(session.patched(label, source), sorted(codes))


def _rejection(judgement: Judgement, subject: str) -> str:
    """Why a patch did not hold, as the verdict says it: "the patched script crashed (...)"."""
    if judgement.kind == "parity":
        return f"{subject} failed loss parity ({judgement.reason.removeprefix('loss parity failed: ')})"
    if judgement.kind == "slower":
        return f"{subject} is {judgement.reason}"
    return f"{subject} {judgement.reason}"


def _dropped_text(search: SearchResult) -> str:
    return ", ".join(f"{code} ({reason})" for code, reason in search.dropped.items())


def _write(path: str, original: bytes, source: bytes, codes: Sequence[str], verdict: str) -> tuple[bool, str]:
    """Writes the patch that held, atomically, unless the file changed while verify ran."""
    try:
        with open(path, "rb") as handle:
            current = handle.read()
    except OSError as error:
        return False, f"not applied: cannot read {path} again: {error.strerror or error}"
    if current != original:
        return False, f"not applied: {path} changed while verify ran"
    try:
        write_atomic(path, source)
    except OSError as error:
        return False, f"not applied: cannot write {path}: {error.strerror or error}"
    return True, f"applied {len(codes)} fix{'es' if len(codes) != 1 else ''} ({', '.join(codes)}): {verdict}"


def _ablation(session: _Session, codes: Sequence[str], subset: Callable[[frozenset[str]], FixResult]) -> list[dict]:
    """Each fix alone (the runs the search made are not made again)."""
    entries: list[dict] = []
    for code in codes:
        source = subset(frozenset({code})).fixed
        if source == session.original:
            entries.append({"code": code, "speedup": None, "loss_parity": None, "status": None,
                            "note": "changes nothing on its own (it follows from another fix)"})
            continue
        judgement = _measured(session, f"only {code}", source, frozenset({code}))
        if judgement is None:
            entries.append({"code": code, "speedup": None, "loss_parity": None, "status": None, "note": BUDGET_SPENT})
            continue
        run = judgement.run
        entry = {"code": code, "speedup": judgement.speedup, "status": run["status"],
                 "steps_per_second": run.get("steps_per_second"), "peak_memory_bytes": run.get("peak_memory_bytes")}
        if judgement.parity is not None:
            entry.update(loss_parity=judgement.parity.ok, parity=judgement.parity.reason)
        else:
            entry.update(loss_parity=False, parity=f"the run {judgement.reason}")
        entries.append(entry)
    return entries


def _probe_split(probe: BatchProbe, session: _Session, codes: Sequence[str]) -> tuple[tuple[int, int], list[dict]]:
    """Runs the whole patch for a few steps at the starting split and at larger ones (the
    per-device batch doubled, the effective batch kept). On CUDA the first run's memory says
    which rung should fit: the probe jumps there and steps down while a run fails (out of
    memory most likely), then the fastest that ran wins. Without that memory figure (a CPU, a
    testing aid) it climbs rung by rung until a run fails, and the largest that ran wins."""
    options = session.options
    probe_options = dataclasses.replace(
        options, steps=PROBE_STEPS, warmup=min(options.warmup, PROBE_WARMUP), timeout=min(options.timeout, PROBE_TIMEOUT_S),
        min_window_s=min(options.min_window_s, PROBE_WINDOW_S),
    )
    # Without torch.compile: compiling costs a minute and more per rung (each batch shape compiles
    # anew), while memory and the splits' relative speed show without it. The patch that is
    # measured and written afterwards compiles at the split the probe chose.
    probe_codes = (frozenset(codes) | {AccumulationSplit.code}) - PROBE_WITHOUT
    reserve = _patched_estimate(session, codes)  # the whole patch must still run after the probe
    ladder = [probe.default, *probe.larger]
    entries: list[dict] = []
    probe_s: list[float] = []

    def attempt(rung: int) -> dict | None:
        expected = max(probe_s, default=session.next_run_s())
        if not session.affords_another(reserve, expected):
            return None
        batch, accumulation = ladder[rung]
        source = probe.patch(batch, probe_codes).fixed
        started = time.monotonic()
        run = session.patched(f"probe {batch} x {accumulation}", source, probe_options, reserve_s=reserve)
        probe_s.append(time.monotonic() - started)
        entry = {"batch": batch, "accumulation": accumulation, "status": run["status"],
                 "steps_per_second": run.get("steps_per_second"), "peak_memory_bytes": run.get("peak_memory_bytes")}
        if run["status"] != "ok":
            entry["error"] = _failure(run)
        entries.append(entry)
        return run

    first = attempt(0)
    predicted = _rung_that_fits(ladder, first) if first is not None and first["status"] == "ok" else None
    if predicted is not None:
        for rung in range(predicted, 0, -1):  # down from the predicted rung until one runs
            run = attempt(rung)
            if run is None or run["status"] == "ok":
                break
    elif first is not None and first["status"] == "ok":
        for rung in range(1, len(ladder)):
            run = attempt(rung)
            if run is None or run["status"] != "ok":
                break
    ran = [e for e in entries if e["status"] == "ok"]
    if not ran:
        return probe.default, entries
    if session.cuda:
        best = max(ran, key=lambda e: e["steps_per_second"] or 0.0)
    else:
        best = max(ran, key=lambda e: e["batch"])
    return (best["batch"], best["accumulation"]), entries


def _rung_that_fits(ladder: Sequence[tuple[int, int]], run: dict) -> int | None:
    """The highest rung whose per-device batch the first rung's memory says fits the device
    (:func:`_batch_that_fits`); None where the run does not tell."""
    fits = _batch_that_fits(run, ladder[0][0])
    if fits is None:
        return None
    return max((rung for rung, (batch, _) in enumerate(ladder) if batch <= fits), default=0)


def _patched_estimate(session: _Session, codes: Sequence[str]) -> float:
    """What the whole patch's run is expected to take: as long as the longest run so far, plus
    COMPILE_S where the patch compiles the model."""
    return session.next_run_s() + (COMPILE_S if COMPILE_CODE in codes else 0.0)


def _probe_note(split: tuple[int, int], entries: list[dict], cuda: bool, larger: bool = True) -> str:
    if any(e["status"] == "ok" for e in entries):
        how = "the fastest" if cuda else "the largest"
        note = f"batch split {split[0]} x {split[1]}: {how} per-device batch that ran in the probe"
    else:
        note = f"batch split kept at {split[0]} x {split[1]}"
    failed = next((e for e in entries if e["status"] != "ok"), None)
    if failed is not None:
        note += f" ({failed['batch']} x {failed['accumulation']} {failed['error']})"
    elif len(entries) < 2:
        note += " (the --budget left did not pay for a larger split)" if larger else " (no larger split divides the effective batch)"
    return note


def verify(path: str, settings: Settings, options: VerifyOptions, observer: Observer | None = None) -> VerifyOutcome:
    """Patches ``path`` with the fixer (safe fixes, plus unsafe and measured ones with
    ``options.unsafe``: verify is what measures them) and verifies it."""
    with open(path, "rb") as handle:
        original = handle.read()
    result = fix_source(path, original, settings, options.unsafe, measured=True)
    if result.errors and not result.changed:
        message = "; ".join(f"{e.message}" for e in result.errors)
        return VerifyOutcome(_nothing_report(path, f"not verified: {path} could not be analyzed: {message}"), False, 2)
    split = _accumulation_split(path, original, settings, options.unsafe)
    if not result.changed and not (split is not None and (detect_local() or os.environ.get(PROBE_ON_CPU_ENV) == "1")):
        hint = "" if options.unsafe else " (unsafe fixes may apply with --unsafe-fixes)"
        return VerifyOutcome(_nothing_report(path, f"nothing to fix in {path}{hint}"), False, 0)

    def patch(batch: int | None, codes: frozenset[str] | None) -> FixResult:
        chosen = settings
        if codes is not None:
            chosen = dataclasses.replace(settings, codes=frozenset(codes) & settings.codes_for(path))
        with probed_batch(batch) if batch is not None else contextlib.nullcontext():
            return fix_source(path, original, chosen, options.unsafe, measured=True)

    def subset(codes: frozenset[str]) -> FixResult:
        return patch(None, codes)

    probe = None
    if split is not None:
        probe = BatchProbe(split, probe_start(*split), larger_splits(*split), patch)
    return verify_patch(path, original, result.fixed, result.applied, options, observer, subset, probe)


def _accumulation_split(path: str, original: bytes, settings: Settings, unsafe: bool) -> tuple[int, int] | None:
    """The first (batch, accumulation) of the original that ADV401's fix can rewrite to a larger
    per-device batch, where its fix may apply at all."""
    rule = AccumulationSplit()
    if rule.code not in settings.codes_for(path) or not (unsafe or rule.fix_applicability is Applicability.SAFE):
        return None
    ctx = analyzable_context(path, original, settings.target, [])
    splits = rule.probeable_splits(ctx) if ctx is not None else []
    return splits[0] if splits else None


def _nothing_report(path: str, verdict: str) -> dict:
    return {
        "device": None,
        "script": path,
        "fixes": [],
        "baseline": None,
        "patched": None,
        "speedup": None,
        "loss_parity": True,
        "applied": False,
        "verdict": verdict,
        "ablation": [],
    }
