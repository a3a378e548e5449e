"""Orchestrates verify mode: patch, run each variant in its own subprocess, compare, decide.

The patched source is written to a temporary file next to the original
(``.advisor_verify_<name>_*.py``, so relative imports and paths resolve the same) and deleted
afterwards. Runs, in this order: baseline, patched, baseline again (interleaved, so that a drift
of the machine does not favour one side), then with ``ablate`` each fix alone. The original is
rewritten, atomically, only when the patched run completed, its losses match the baseline's
within tolerance and, on CUDA and unless ``keep_slower``, it is not slower beyond the baseline's
own noise. In every other case the file is left byte for byte as it was.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from advisor.engine import Settings, analyzable_context
from advisor.fixer import AppliedFix, FixResult, fix_source, write_atomic
from advisor.rules.batch_size import AccumulationSplit, larger_splits, probed_batch, rebalanced
from advisor.verify import DEFAULT_STEPS, DEFAULT_TIMEOUT_S, DEFAULT_WARMUP
from advisor.verify.compare import (
    loss_parity,
    percentile,
    slower_beyond_noise,
    speed_noise,
)
from advisor.verify.processes import RUN_MARKER, descendants, kill_all, marked, new_marker

STATUSES = ("ok", "error", "timeout", "oom", "no_steps")
KILL_GRACE_S = 5.0
LOG_TAIL_LINES = 20
ADVISOR_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# ADV401's batch probe: a few steps per split are enough to see the memory a batch needs.
PROBE_STEPS = 2
PROBE_TIMEOUT_S = 300.0
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
    patch: Callable[[int, str | None], FixResult]  # (per-device batch, only this fix or None for all)


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
    workdir = tempfile.mkdtemp(prefix="advisor-verify-")
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
                    "result": result_path,
                    "progress_fd": write_fd,
                    "pythonpath_added": ADVISOR_ROOT,
                },
                handle,
            )
        env = dict(os.environ)
        env.update(options.env or {})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ADVISOR_ROOT, env.get("PYTHONPATH")) if p)
        marker = env[RUN_MARKER] = new_marker()
        reader = threading.Thread(target=_read_progress, args=(read_fd, label, observer, stop, last), daemon=True)
        reader.start()
        timed_out = False
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", HARNESS_BOOTSTRAP, config_path],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
                env=env,
            )
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
    observer.finished(label, run)
    return run


def _outcome(result_path: str, log_path: str, returncode: int, timed_out: bool, progress: int, options: VerifyOptions) -> dict:
    raw = None
    if os.path.exists(result_path):
        try:
            with open(result_path) as handle:
                raw = json.load(handle)
        except (OSError, ValueError):
            raw = None
    if timed_out:
        message = f"no result after --timeout {options.timeout:g} s; the run was stopped"
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


def verify_patch(
    path: str,
    original: bytes,
    patched: bytes,
    fixes: Sequence[AppliedFix],
    options: VerifyOptions,
    observer: Observer | None = None,
    ablations: Callable[[str], bytes] | None = None,
    batch_probe: BatchProbe | None = None,
) -> VerifyOutcome:
    """Measures ``patched`` against the file at ``path`` (whose bytes are ``original``), decides and
    writes. ``ablations(code)`` gives the source with only that fix, for ``options.ablate``; with
    ``batch_probe`` ADV401's split is first probed for the largest per-device batch that runs."""
    observer = observer or _Silent()
    codes = fix_codes(fixes)
    display = f"{path} (patched)"
    runs: dict[str, dict] = {}

    def baseline_run(index: int) -> dict:
        label = "baseline" if index == 0 else f"baseline {index + 1}"
        runs[label] = run_variant(path, path, options, label, observer)
        return runs[label]

    def patched_run(label: str, source: bytes, run_options: VerifyOptions = options) -> dict:
        with _TempScript(path, source) as temp:
            runs[label] = run_variant(temp, path, run_options, label, observer, display_path=display)
        return runs[label]

    baselines = [baseline_run(0)]
    patched_result: dict | None = None
    probe_entries: list[dict] = []
    split = batch_probe.default if batch_probe else None
    notes: list[str] = []
    if batch_probe is not None and baselines[0]["status"] == "ok":
        # After the first baseline, which tells the device and spares the probe when the script fails anyway.
        if _is_cuda(baselines[0].get("device")) or os.environ.get(PROBE_ON_CPU_ENV) == "1":
            split, probe_entries = _probe_split(batch_probe, options, patched_run)
            if split != batch_probe.default:
                chosen = batch_probe.patch(split[0], None)
                patched, fixes, codes = chosen.fixed, chosen.applied, fix_codes(chosen.applied)
                probed_batch_size = split[0]

                def ablations(code: str) -> bytes:
                    return batch_probe.patch(probed_batch_size, code).fixed
            notes.append(_probe_note(split, probe_entries))
        else:
            notes.append(
                f"ADV401 kept its static split {split[0]} x {split[1]}: the batch probe needs CUDA "
                "(CPU memory says nothing about what fits on a GPU)"
            )
    if baselines[0]["status"] == "ok":
        patched_result = patched_run("patched", patched)
        if patched_result["status"] == "ok":
            for index in range(1, max(1, options.baseline_runs)):
                baselines.append(baseline_run(index))
    baseline = pool(baselines)
    device = next((r.get("device") for r in runs.values() if r.get("device")), None) or "unknown"
    cuda = _is_cuda(device)

    parity = None
    speedup = None
    applied = False
    if baseline["status"] != "ok":
        verdict = f"not applied: the original script {_failure(baseline)} under verify, so there is nothing to compare with"
    elif patched_result is None or patched_result["status"] != "ok":
        verdict = f"not applied: the patched script {_failure(patched_result or empty_run('error'))}"
    else:
        parity = loss_parity(baselines, patched_result, codes)
        speedup = speedup_of(baseline, patched_result)
        noise = speed_noise(baselines)
        slower = cuda and slower_beyond_noise(speedup, noise)
        if not patched_result.get("completed") or not baseline.get("completed"):
            notes.append(
                f"the script finished by itself after {min(baseline['steps'], patched_result['steps'])} steps, "
                f"before {options.warmup} + {options.steps}"
            )
        speed_text = f"{speedup:.2f}x steps/s" if speedup else "speed not measured (fewer than warm-up + 2 steps)"
        if speedup and len(baselines) > 1:
            speed_text += f" (baseline noise {noise:.1%})"
        if not parity.ok:
            verdict = f"not applied: loss parity failed: {parity.reason}"
        elif slower and not options.keep_slower:
            verdict = f"not applied: the patched script is slower, {speed_text}; --keep-slower keeps it anyway"
        else:
            kept = " (slower than the baseline, kept by --keep-slower)" if slower else ""
            verdict = f"{speed_text}{kept}; {parity.reason}"
            applied = True
    if applied:
        try:
            with open(path, "rb") as handle:
                current = handle.read()
        except OSError as error:
            current = None
            verdict = f"not applied: cannot read {path} again: {error.strerror or error}"
            applied = False
        if applied and current != original:
            verdict = f"not applied: {path} changed while verify ran"
            applied = False
        if applied:
            try:
                write_atomic(path, patched)
                verdict = f"applied {len(codes)} fix{'es' if len(codes) != 1 else ''} ({', '.join(codes)}): {verdict}"
            except OSError as error:
                verdict = f"not applied: cannot write {path}: {error.strerror or error}"
                applied = False
    if not applied:
        verdict += f"; {path} is unchanged"
    if not cuda and parity is not None:
        notes.append(CPU_NOTE)
    if notes:
        verdict += "; " + "; ".join(notes)

    ablation: list[dict] = []
    if options.ablate and ablations is not None and baselines[0]["status"] == "ok":
        for code in codes:
            source = ablations(code)
            if source == original:
                ablation.append({"code": code, "speedup": None, "loss_parity": None, "status": None,
                                 "note": "changes nothing on its own (it follows from another fix)"})
                continue
            label = f"only {code}"
            run = patched_run(label, source)
            entry = {"code": code, "speedup": speedup_of(baseline, run), "status": run["status"],
                     "steps_per_second": run.get("steps_per_second"), "peak_memory_bytes": run.get("peak_memory_bytes")}
            if run["status"] == "ok":
                entry_parity = loss_parity(baselines, run, [code])
                entry.update(loss_parity=entry_parity.ok, parity=entry_parity.reason)
            else:
                entry.update(loss_parity=False, parity=f"the run {_failure(run)}")
            ablation.append(entry)

    report = {
        "device": device,
        "script": path,
        "fixes": codes,
        "baseline": baseline,
        "patched": patched_result,
        "speedup": speedup,
        "loss_parity": bool(parity and parity.ok),
        "applied": applied,
        "verdict": verdict,
        "ablation": ablation,
        "applied_fixes": [dataclasses.asdict(f) for f in fixes],
        "baseline_runs": baselines,
        "parity": parity.as_dict() if parity else None,
        "steps": options.steps,
        "warmup": options.warmup,
        "cuda": cuda,
        "batch_probe": probe_entries,
    }
    if batch_probe is not None and split is not None:
        report["batch_split"] = {"original": list(batch_probe.original), "chosen": list(split), "probed": bool(probe_entries)}
    return VerifyOutcome(report, applied, 0 if applied else 1, runs)


def _probe_split(
    probe: BatchProbe, options: VerifyOptions, patched_run: Callable[[str, bytes, VerifyOptions], dict]
) -> tuple[tuple[int, int], list[dict]]:
    """Runs the whole patch for a few steps at each larger split, doubling the per-device batch
    until a run fails (out of memory, most likely); the largest that ran, else the static split."""
    probe_options = dataclasses.replace(options, steps=PROBE_STEPS, timeout=min(options.timeout, PROBE_TIMEOUT_S))
    chosen = probe.default
    entries: list[dict] = []
    for batch, accumulation in probe.larger:
        run = patched_run(f"probe {batch} x {accumulation}", probe.patch(batch, None).fixed, probe_options)
        entry = {"batch": batch, "accumulation": accumulation, "status": run["status"],
                 "peak_memory_bytes": run.get("peak_memory_bytes")}
        entries.append(entry)
        if run["status"] != "ok":
            entry["error"] = _failure(run)
            break
        chosen = (batch, accumulation)
    return chosen, entries


def _probe_note(split: tuple[int, int], entries: list[dict]) -> str:
    if any(e["status"] == "ok" for e in entries):
        note = f"ADV401 split {split[0]} x {split[1]}: the largest per-device batch that ran in the probe"
    else:
        note = f"ADV401 kept its static split {split[0]} x {split[1]}"
    failed = next((e for e in entries if e["status"] != "ok"), None)
    if failed is not None:
        note += f" ({failed['batch']} x {failed['accumulation']} {failed['error']})"
    elif not entries:
        note += " (no larger split divides the effective batch)"
    return note


def verify(path: str, settings: Settings, options: VerifyOptions, observer: Observer | None = None) -> VerifyOutcome:
    """Patches ``path`` with the fixer (safe fixes, plus unsafe ones with ``options.unsafe``) and verifies it."""
    with open(path, "rb") as handle:
        original = handle.read()
    result = fix_source(path, original, settings, options.unsafe)
    if result.errors and not result.changed:
        message = "; ".join(f"{e.message}" for e in result.errors)
        return VerifyOutcome(_nothing_report(path, f"not verified: {path} could not be analyzed: {message}"), False, 2)
    if not result.changed:
        hint = "" if options.unsafe else " (unsafe fixes may apply with --unsafe-fixes)"
        return VerifyOutcome(_nothing_report(path, f"nothing to fix in {path}{hint}"), False, 0)

    def patch(batch: int | None, code: str | None) -> FixResult:
        chosen = settings
        if code is not None:
            chosen = dataclasses.replace(settings, codes=frozenset({code}) & settings.codes_for(path))
        with probed_batch(batch) if batch is not None else contextlib.nullcontext():
            return fix_source(path, original, chosen, options.unsafe)

    def only(code: str) -> bytes:
        return patch(None, code).fixed

    probe = None
    split = _accumulation_split(path, original, settings) if "ADV401" in fix_codes(result.applied) else None
    if split is not None:
        probe = BatchProbe(split, rebalanced(*split) or split, larger_splits(*split), patch)
    return verify_patch(path, original, result.fixed, result.applied, options, observer, only, probe)


def _accumulation_split(path: str, original: bytes, settings: Settings) -> tuple[int, int] | None:
    """ADV401's (batch, accumulation) in the original, the first one its fix can rewrite."""
    ctx = analyzable_context(path, original, settings.target, [])
    splits = AccumulationSplit().fixable_splits(ctx) if ctx is not None else []
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
