"""Runs one training script for W + N optimizer steps and writes what it measured as JSON.

    python -c HARNESS_BOOTSTRAP CONFIG.json      (runner.HARNESS_BOOTSTRAP; by hand: python -m advisor.verify.harness)

CONFIG holds ``script`` (the file to run), ``argv0`` (what the script sees as ``sys.argv[0]``),
``args``, ``steps``, ``warmup``, ``result`` (where to write the JSON), ``progress_fd`` (a pipe
the parent reads step counts from, or null) and ``pythonpath_added`` (a ``PYTHONPATH`` entry the
parent added so that this module is importable, removed again before the script runs).

The script runs as ``__main__`` through ``runpy.run_path``, with its folder first on
``sys.path`` and the caller's working directory kept, as ``python SCRIPT ARGS`` would run it. The
working directory is not on ``sys.path`` (the bootstrap takes it off before anything is imported),
so a ``json.py`` or ``advisor.py`` there is not run, as ``python SCRIPT`` would not run it either.
Instrumentation, all process-global so it sees plain loops, HF ``Trainer`` and Accelerate alike:

- a global optimizer step post-hook counts optimizer steps. Only the first optimizer that steps
  is counted (a GAN's second optimizer, or Accelerate's wrapper around the inner optimizer,
  would count twice). ``GradScaler.step`` is wrapped so that a step it skips because of inf/NaN
  gradients still counts, as a skipped step.
- ``Tensor.backward`` and ``torch.autograd.backward`` are wrapped to keep the loss: the scalar
  passed to backward, with a GradScaler's scale taken off, summed on the device over the
  micro-steps of each optimizer step (the objective whose gradient the step applies). Nothing
  is read back to the host until the end, so recording never adds a synchronisation.
- the DataLoader iterator's ``__next__`` is wrapped to count samples (the first dimension of the
  first tensor of each batch), which gives samples per second when batches come from a DataLoader.
- at step W the peak-memory counters are reset (CUDA allocator peak, or the process's peak RSS
  through ``/proc/self/clear_refs``); at step W + N a ``StopRun`` (a ``BaseException``, so the
  script's ``except Exception`` cannot swallow it) ends the run. On CUDA a window shorter than
  ``min_window_s`` runs on, up to ``max_steps`` measured steps: 15 steps of 10 ms are 0.15 s,
  where one late kernel launch moved an MLP's rate by 40% between two runs of the same script
  (mlp_synthetic on an H100); a step of 100 ms fills the window with the N steps asked for.
- step times: a CUDA event is recorded at each step from step W on (no synchronisation; one at
  the end reads them all); on the CPU, ``perf_counter``.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import runpy
import signal
import sys
import time
import traceback
import weakref

import torch

TRACEBACK_LINES = 25
# CUDA's allocator says "out of memory"; the CPU's DefaultCPUAllocator raises a plain
# RuntimeError that says "can't allocate memory" (older torch: "not enough memory"); a DataLoader
# worker killed by SIGKILL, which nothing but the kernel's out-of-memory killer sends unasked,
# is "killed by signal: Killed" (the main process's own SIGKILL is judged by the runner).
OOM_MESSAGES = ("out of memory", "can't allocate memory", "not enough memory", "killed by signal: killed")


class StopRun(BaseException):
    """W + N optimizer steps are done. Not an ``Exception``: the script cannot catch it by accident."""


class RunTimeout(BaseException):
    """The parent ran out of patience (``--timeout``) and sent SIGTERM."""


def batch_size_of(batch) -> int | None:
    """First dimension of the first tensor found in a batch (tensor, sequence or mapping)."""
    stack = [batch]
    seen = 0
    while stack and seen < 64:
        item = stack.pop(0)
        seen += 1
        if isinstance(item, torch.Tensor):
            return int(item.shape[0]) if item.dim() >= 1 else None
        if isinstance(item, (list, tuple)):
            stack[:0] = list(item)
        elif hasattr(item, "keys") and hasattr(item, "__getitem__"):
            try:
                stack[:0] = [item[key] for key in item]
            except Exception:  # a mapping-like object that refuses: not a batch we understand
                return None
    return None


class Recorder:
    def __init__(
        self, steps: int, warmup: int, progress_fd: int | None, min_window_s: float = 0.0,
        max_steps: int | None = None, window_on_cpu: bool = False,
    ) -> None:
        self.warmup = warmup
        self.target = warmup + steps
        self.min_window_s = min_window_s
        self.limit = warmup + max(max_steps or steps, steps)
        self.window_on_cpu = window_on_cpu
        self.steps = 0
        self.skipped = 0
        self.primary = None  # the optimizer whose steps are counted
        self.done = False
        self.progress_fd = progress_fd
        if progress_fd is not None:
            try:
                os.set_blocking(progress_fd, False)
            except OSError:
                self.progress_fd = None
        # Losses: one device scalar per step (None when no scalar went through backward).
        self.pending = None
        self.micro = 0
        self.losses: list = []
        self.micro_steps: list[int] = []
        self.scaled: dict[int, tuple] = {}  # id(scaled loss) -> (weakref to it, the unscaled loss)
        self.in_backward = 0
        self.step_seen = False  # set by the post-hook, read by the GradScaler.step wrapper
        # Timing, from step max(W, 1) on.
        self.cuda = False
        self.events: list = []
        self.wall: list[float] = []
        self.samples = 0
        self.samples_at: list[int] = []

    # -- optimizer steps ---------------------------------------------------------------
    def on_optimizer_step(self, optimizer, args, kwargs) -> None:
        self.step_seen = True
        if self.primary is None:
            self.primary = optimizer
        elif optimizer is not self.primary:
            return
        self.count_step(skipped=False)

    def count_step(self, skipped: bool) -> None:
        if self.done:
            raise StopRun
        self.steps += 1
        if skipped:
            self.skipped += 1
        self.losses.append(self.pending)
        self.micro_steps.append(self.micro)
        self.pending = None
        self.micro = 0
        self.scaled.clear()
        if self.steps >= max(self.warmup, 1):
            if self.steps == max(self.warmup, 1):
                self.start_window()
            if self.cuda:
                event = torch.cuda.Event(enable_timing=True)
                event.record()
                self.events.append(event)
            self.wall.append(time.perf_counter())
            self.samples_at.append(self.samples)
        self.report_progress()
        if self.steps >= self.target and not self.window_too_short():
            self.done = True
            raise StopRun

    def window_too_short(self) -> bool:
        """Whether the measured window is still shorter than ``min_window_s`` and may run on."""
        if self.steps >= self.limit or not self.min_window_s or not (self.cuda or self.window_on_cpu):
            return False
        return len(self.wall) < 2 or self.wall[-1] - self.wall[0] < self.min_window_s

    def start_window(self) -> None:
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            # Between two steps: the weights, the optimizer's state, what the script keeps. What the
            # peak adds to it is the step's own (activations, mostly): what a larger batch grows.
            self.resident_memory = int(torch.cuda.memory_allocated())
        else:
            reset_peak_rss()

    def report_progress(self) -> None:
        if self.progress_fd is None:
            return
        try:
            os.write(self.progress_fd, f"{self.steps}\n".encode())
        except (BlockingIOError, BrokenPipeError, OSError):
            pass  # progress is cosmetic; never let it slow or break the run

    # -- losses ------------------------------------------------------------------------
    def on_backward(self, tensor) -> None:
        if self.in_backward or not isinstance(tensor, torch.Tensor) or tensor.numel() != 1:
            return
        value = tensor
        entry = self.scaled.get(id(tensor))
        if entry is not None and entry[0]() is tensor:
            value = entry[1]
        value = value.detach().reshape(()).to(torch.float32, copy=True)
        self.pending = value if self.pending is None else self.pending + value
        self.micro += 1

    def on_scale(self, outputs, scaled) -> None:
        if isinstance(outputs, torch.Tensor) and isinstance(scaled, torch.Tensor) and scaled is not outputs:
            self.scaled[id(scaled)] = (weakref.ref(scaled), outputs.detach())

    # -- results -----------------------------------------------------------------------
    def results(self) -> dict:
        if self.cuda:
            torch.cuda.synchronize()
            step_times = [a.elapsed_time(b) for a, b in zip(self.events, self.events[1:])]
            timing = "cuda_events"
        else:
            step_times = [(b - a) * 1000.0 for a, b in zip(self.wall, self.wall[1:])]
            timing = "wall"
        window_s = sum(step_times) / 1000.0
        samples = self.samples_at[-1] - self.samples_at[0] if len(self.samples_at) > 1 else 0
        # CUDA may be in use although the measured window never started (fewer than W steps).
        cuda_used = self.cuda or (torch.cuda.is_available() and torch.cuda.is_initialized())
        return {
            "steps": self.steps,
            "skipped_steps": self.skipped,
            "step_times_ms": step_times,
            "timing": timing,
            "window_seconds": window_s,
            "window_samples": samples or None,
            "losses": [_number(loss) for loss in self.losses],
            "micro_steps": self.micro_steps,
            "device": device_name(cuda_used),
            **peak_memory(cuda_used),
            "resident_memory_bytes": getattr(self, "resident_memory", None) if self.cuda else None,
            "device_memory_bytes": device_memory(cuda_used),
        }


def _number(value) -> float | str | None:
    """A loss for strict JSON: a float, or "nan" / "inf" / "-inf"."""
    if value is None:
        return None
    number = float(value.item())
    if math.isfinite(number):
        return number
    if math.isnan(number):
        return "nan"
    return "inf" if number > 0 else "-inf"


def reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # resets VmHWM, the peak resident set size (Linux >= 4.0)
    except OSError:
        pass


def peak_memory(cuda: bool) -> dict:
    if cuda:
        return {"peak_memory_bytes": int(torch.cuda.max_memory_allocated()), "memory_kind": "cuda_allocated"}
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return {"peak_memory_bytes": int(line.split()[1]) * 1024, "memory_kind": "cpu_peak_rss"}
    except OSError:
        pass
    try:
        import resource

        kilobytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return {"peak_memory_bytes": int(kilobytes) * 1024, "memory_kind": "cpu_peak_rss"}
    except (ImportError, OSError):
        return {"peak_memory_bytes": None, "memory_kind": None}


def device_memory(cuda: bool) -> int | None:
    if not cuda:
        return None
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)


def device_name(cuda: bool) -> str:
    if cuda:
        return torch.cuda.get_device_name(torch.cuda.current_device())
    return "cpu"


def install(recorder: Recorder) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(recorder.on_optimizer_step)

    tensor_backward = torch.Tensor.backward
    autograd_backward = torch.autograd.backward

    def backward(self, *args, **kwargs):
        recorder.on_backward(self)
        recorder.in_backward += 1
        try:
            return tensor_backward(self, *args, **kwargs)
        finally:
            recorder.in_backward -= 1

    def functional_backward(tensors, *args, **kwargs):
        if isinstance(tensors, torch.Tensor):
            recorder.on_backward(tensors)
        elif isinstance(tensors, (list, tuple)) and len(tensors) == 1:
            recorder.on_backward(tensors[0])
        recorder.in_backward += 1
        try:
            return autograd_backward(tensors, *args, **kwargs)
        finally:
            recorder.in_backward -= 1

    torch.Tensor.backward = backward
    torch.autograd.backward = functional_backward

    from torch.amp.grad_scaler import GradScaler

    scaler_scale = GradScaler.scale
    scaler_step = GradScaler.step

    def scale(self, outputs):
        scaled = scaler_scale(self, outputs)
        recorder.on_scale(outputs, scaled)
        return scaled

    def step(self, optimizer, *args, **kwargs):
        recorder.step_seen = False
        result = scaler_step(self, optimizer, *args, **kwargs)
        if not recorder.step_seen:  # inf/NaN gradients: the scaler skipped optimizer.step()
            if recorder.primary is None:
                recorder.primary = optimizer
            if optimizer is recorder.primary:
                recorder.count_step(skipped=True)
        return result

    GradScaler.scale = scale
    GradScaler.step = step

    from torch.utils.data.dataloader import _BaseDataLoaderIter

    loader_next = _BaseDataLoaderIter.__next__

    from torch.utils.data import BatchSampler

    def counting_next(self):
        batch = loader_next(self)
        # A loader batches (it collates samples) or its sampler hands whole batches of indices
        # to a data set that indexes them at once (``sampler=BatchSampler(...), batch_size=None``).
        if getattr(self, "_auto_collation", False) or isinstance(getattr(self, "_index_sampler", None), BatchSampler):
            size = batch_size_of(batch)
            if size:
                recorder.samples += size
        return batch

    _BaseDataLoaderIter.__next__ = counting_next


def _raise_timeout(signum, frame):
    raise RunTimeout


def _tail(exc: BaseException) -> str:
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip().splitlines()
    return "\n".join(lines[-TRACEBACK_LINES:])


def _is_oom(exc: BaseException) -> bool:
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t)
    while exc is not None:
        if isinstance(exc, (oom_types, MemoryError)):
            return True
        if isinstance(exc, RuntimeError) and any(s in str(exc).lower() for s in OOM_MESSAGES):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def run(config: dict) -> dict:
    recorder = Recorder(
        int(config["steps"]), int(config["warmup"]), config.get("progress_fd"),
        min_window_s=float(config.get("min_window_s") or 0.0), max_steps=config.get("max_steps"),
        window_on_cpu=bool(config.get("window_on_cpu")),
    )
    install(recorder)
    signal.signal(signal.SIGTERM, _raise_timeout)
    script = os.path.abspath(config["script"])
    sys.argv = [config.get("argv0") or script, *config.get("args", [])]
    sys.path.insert(0, os.path.dirname(script))
    status, error = "ok", None
    try:
        runpy.run_path(script, run_name="__main__")
    except StopRun:
        pass
    except RunTimeout:
        status, error = "timeout", "stopped by --timeout"
    except SystemExit as exc:
        if exc.code not in (None, 0):
            status, error = "error", f"the script exited with status {exc.code!r}"
    except BaseException as exc:  # the script's own failure, reported rather than raised
        status = "oom" if _is_oom(exc) else "error"
        error = _tail(exc)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if recorder.done:
        status, error = "ok", None  # whatever its clean-up did after the last counted step
    elif status == "ok" and recorder.steps == 0:
        status, error = "no_steps", "the script ended without taking an optimizer step"
    try:
        measured = recorder.results()
    except BaseException as exc:  # a broken CUDA context cannot be synchronised: keep what we know
        measured = {"steps": recorder.steps, "skipped_steps": recorder.skipped, "losses": [], "device": "unknown",
                    "measure_error": _tail(exc)}
        if status == "ok":
            status, error = "error", measured["measure_error"]
    return {"status": status, "error": error, "completed": recorder.done, **measured}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as handle:
        config = json.load(handle)
    added = config.get("pythonpath_added")
    if added:
        sys.path[:] = [p for p in sys.path if p != added]
        parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != added]
        if parts:
            os.environ["PYTHONPATH"] = os.pathsep.join(parts)
        else:
            os.environ.pop("PYTHONPATH", None)
    # Under a launcher every rank runs this harness: each writes its own result, and rank 0
    # reports progress through the named pipe the runner reads.
    rank = int(os.environ.get("RANK", "0") or 0)
    result_path = config["result"] + (f".rank{rank}" if config.get("per_rank") else "")
    if config.get("progress_fifo") and rank == 0:
        try:
            config["progress_fd"] = os.open(config["progress_fifo"], os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            config["progress_fd"] = None
    result = run(config)
    temp = result_path + ".tmp"
    with open(temp, "w") as handle:
        json.dump(result, handle)
    os.replace(temp, result_path)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    # Skip interpreter teardown: the script's atexit handlers, non-daemon threads and worker
    # shutdown could hang after the run was cut short; the parent kills what is left.
    os._exit(0)


if __name__ == "__main__":
    main()
