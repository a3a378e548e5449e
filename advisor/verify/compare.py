"""Loss parity and speed comparison between baseline and patched runs (pure Python, no torch).

Loss parity compares the per-step objective (see harness) of the patched run with the baseline,
step by step over the steps both runs took: both runs see the same seeds and the same data in the
same order, so at step k they are comparable. The tolerance at step k is the largest of

- NOISE_FACTOR x the baseline's own run-to-run noise up to step k (its two runs differ on a GPU
  through non-deterministic kernels, and that difference grows as training goes on), and
- RELATIVE_FLOOR (CPU runs are bit-for-bit deterministic: a zero noise would reject every
  reordering of a floating-point sum),

plus an arithmetic allowance when the patch changes the precision (fp32 or fp16 to bf16, TF32
matmuls) or the order of the arithmetic (``torch.compile``'s fused kernels, cuDNN's benchmarked
convolution algorithms, the fused attention kernel). Rounding that differs by one ulp per
operation parts the curves as much as a coarser precision does once training amplifies it: on
an H200, cnn_synthetic's loss at step 3 (where it falls from 2.34 to 0.09) was 4.3% off with
bf16 autocast, 3.8% with ``torch.compile`` alone and 4.0% with ``cudnn.benchmark`` alone, while
two baseline runs agreed to the digit (bench/verify/records/h200-2026-11-27/search/). A NaN or
inf in the patched losses fails parity outright.

Differences are relative to the baseline's loss at that step, but never to less than
SCALE_FLOOR of its loss at step 1: a task the model masters within the run (cnn_synthetic on an
H100: 2.34 at step 1, 0.0004 at step 14) leaves a loss whose relative differences are rounding
(0.0009 against 0.0014 is 54% of the loss and 0.02% of the curve's height).

Fixes that change the objective's scale on purpose are normalised: ADV303 divides each
micro-step's loss by the accumulation steps, so the baseline's per-step sum is compared as a mean.
When the number of micro-steps per optimizer step changes (ADV401's rebalanced batch), a loop
that divides its loss keeps the sum comparable and one that does not keeps the mean comparable:
the one that agrees at step 1, before any update, is used.

Fixes that correct the update itself (zero_grad in the wrong place, clipping scaled gradients,
an undivided accumulated loss) make the baseline train wrongly: from step 2 on the patched run
may legitimately learn faster, so there the check is one-sided (not worse than the baseline
beyond the tolerance, widened by UPDATE_ALLOWANCE since a corrected gradient follows another
path). Step 1 is computed before any update and must match either way.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

NOISE_FACTOR = 4.0
RELATIVE_FLOOR = 0.02
# Allowance added to the tolerance when a fix changes the precision the loss is computed in, or
# the order of its arithmetic (the module docstring says why the two are alike).
ARITHMETIC_ALLOWANCE = {
    "ADV201": 0.03,  # fp16 -> bf16 autocast: 8 bits of mantissa instead of 11
    "ADV203": 0.03,  # fp32 -> bf16 autocast
    "ADV202": 0.01,  # fp32 -> TF32 matmuls: 10 bits of mantissa
    "ADV206": 0.03,
    "ADV602": 0.03,  # torch.compile: fused kernels, other reduction orders
    "ADV604": 0.03,  # hand-written attention -> the fused SDPA kernel
    "ADV605": 0.03,  # cudnn.benchmark: the fastest convolution algorithm, not the default one
}
# Fixes after which the baseline's per-step objective is the sum of undivided micro-step losses
# and the patched one their mean.
SUM_TO_MEAN = frozenset({"ADV303"})
# Fixes after which the baseline's updates are wrong, so the curves may part from step 2 on.
UPDATE_FIXES = frozenset({"ADV301", "ADV302", "ADV303", "ADV305"})
UPDATE_ALLOWANCE = 0.10
# Of the baseline's step-1 loss: the smallest scale a difference is measured against.
SCALE_FLOOR = 0.05
SPEED_FLOOR = 0.02  # smallest slowdown treated as real on CUDA, whatever the measured noise
SPEED_NOISE_FACTOR = 2.0


def as_float(value) -> float | None:
    """A recorded loss: a number, the strings "nan" / "inf" / "-inf", or None (no loss seen)."""
    if value is None:
        return None
    if isinstance(value, str):
        return float(value)
    return float(value)


def objective(run: dict, as_mean: bool = False) -> list[float | None]:
    losses = [as_float(v) for v in run.get("losses") or []]
    if not as_mean:
        return losses
    micro = run.get("micro_steps") or []
    return [
        None if loss is None else (loss / micro[i] if i < len(micro) and micro[i] else loss)
        for i, loss in enumerate(losses)
    ]


def _relative(a: float, b: float, floor: float = 0.0) -> float:
    scale = max(abs(a), abs(b), floor, 1e-8)
    return abs(a - b) / scale


def _scale_floor(reference: Sequence[Sequence[float | None]]) -> float:
    """SCALE_FLOOR of the baseline's first recorded loss (the mean over its runs)."""
    firsts = [next((v for v in run if v is not None), None) for run in reference]
    firsts = [v for v in firsts if v is not None]
    return SCALE_FLOOR * abs(sum(firsts) / len(firsts)) if firsts else 0.0


@dataclass
class Parity:
    ok: bool
    reason: str
    worst_step: int | None = None  # 1-based
    worst_difference: float | None = None  # relative, at worst_step
    tolerance: float | None = None  # at worst_step
    noise: float | None = None  # the baseline's largest relative run-to-run difference
    compared_steps: int = 0
    baseline_as_mean: bool = False  # per-step losses compared as means over micro-steps
    patched_as_mean: bool = False

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "worst_step": self.worst_step,
            "worst_difference": self.worst_difference,
            "tolerance": self.tolerance,
            "noise": self.noise,
            "compared_steps": self.compared_steps,
            "baseline_as_mean": self.baseline_as_mean,
            "patched_as_mean": self.patched_as_mean,
        }


def arithmetic_allowance(codes: Iterable[str]) -> float:
    return max((ARITHMETIC_ALLOWANCE.get(code, 0.0) for code in codes), default=0.0)


def normalisation(baselines: Sequence[dict], patched: dict, codes: Iterable[str]) -> tuple[bool, bool]:
    """(baseline as mean, patched as mean) for comparing per-step losses; see the module docstring."""
    if set(codes) & SUM_TO_MEAN:
        return True, False
    first = lambda run: (run.get("micro_steps") or [None])[0]
    if not baselines or first(baselines[0]) == first(patched):
        return False, False
    best, best_difference = (False, False), math.inf
    for as_mean in (False, True):
        before, after = objective(baselines[0], as_mean), objective(patched, as_mean)
        if before and after and before[0] is not None and after[0] is not None:
            difference = _relative(before[0], after[0])
            if difference < best_difference:
                best, best_difference = (as_mean, as_mean), difference
    return best


def _first_non_finite(losses: Sequence[float | None]) -> tuple[int, float] | None:
    return next(((step, v) for step, v in enumerate(losses, 1) if v is not None and not math.isfinite(v)), None)


def loss_parity(baselines: Sequence[dict], patched: dict, codes: Iterable[str]) -> Parity:
    codes = set(codes)
    one_sided = bool(codes & UPDATE_FIXES)
    baseline_as_mean, patched_as_mean = normalisation(baselines, patched, codes)
    reference = [objective(run, baseline_as_mean) for run in baselines]
    candidate = objective(patched, patched_as_mean)
    patched_bad = _first_non_finite(candidate)
    baseline_bad = min(filter(None, map(_first_non_finite, reference)), default=None)
    # A baseline that diverges as early as the patch does is the script's fault, not the patch's.
    if baseline_bad and (patched_bad is None or baseline_bad[0] <= patched_bad[0]):
        step, value = baseline_bad
        return Parity(False, f"the baseline loss is already {value} at step {step}: nothing to compare with", worst_step=step)
    if patched_bad:
        step, value = patched_bad
        return Parity(False, f"the patched loss is {value} at step {step}", worst_step=step)
    length = min([len(candidate)] + [len(r) for r in reference])
    allowance = arithmetic_allowance(codes)
    noise_so_far = 0.0
    compared = 0
    floor = _scale_floor(reference)
    worst: tuple[float, int, float, float] | None = None  # (difference / tolerance, step, difference, tolerance)
    for index in range(length):
        values = [r[index] for r in reference]
        if any(v is None for v in values) or candidate[index] is None:
            continue
        for a in values:
            for b in values:
                noise_so_far = max(noise_so_far, _relative(a, b, floor))
        low, high = min(values), max(values)
        value = candidate[index]
        if value > high:
            outside = value - high
        elif value < low and not (one_sided and index > 0):
            outside = low - value
        else:
            outside = 0.0
        difference = outside / max(abs(sum(values) / len(values)), floor, 1e-8)
        tolerance = max(NOISE_FACTOR * noise_so_far, RELATIVE_FLOOR) + allowance
        if one_sided and index > 0:
            tolerance += UPDATE_ALLOWANCE
        compared += 1
        ratio = difference / tolerance
        if worst is None or ratio > worst[0]:
            worst = (ratio, index + 1, difference, tolerance)
    if not compared:
        return Parity(False, "no loss was seen going through backward() in both runs: parity cannot be checked")
    assert worst is not None
    ratio, step, difference, tolerance = worst
    if ratio > 1.0:
        base = sum(r[step - 1] for r in reference) / len(reference)  # type: ignore[misc]
        reason = (
            f"the patched loss is {candidate[step - 1]:.6g} at step {step} against {base:.6g} for the baseline: "
            f"{difference:.1%} off, tolerance {tolerance:.1%}"
        )
        return Parity(False, reason, step, difference, tolerance, noise_so_far, compared, baseline_as_mean, patched_as_mean)
    if one_sided:
        reason = (
            f"losses no worse than the baseline over {compared} steps (worst {difference:.2%} above at step {step}, "
            f"tolerance {tolerance:.1%}; lower is fine after step 1, the fixes correct the updates)"
        )
    else:
        reason = f"losses match the baseline over {compared} steps (worst {difference:.2%} at step {step}, tolerance {tolerance:.1%})"
    return Parity(True, reason, step, difference, tolerance, noise_so_far, compared, baseline_as_mean, patched_as_mean)


def speed_noise(baselines: Sequence[dict]) -> float:
    rates = [run.get("steps_per_second") for run in baselines]
    rates = [r for r in rates if r]
    if len(rates) < 2:
        return 0.0
    mean = sum(rates) / len(rates)
    return (max(rates) - min(rates)) / mean


def slower_beyond_noise(speedup: float | None, noise: float) -> bool:
    if speedup is None:
        return False
    return speedup < 1.0 - max(SPEED_NOISE_FACTOR * noise, SPEED_FLOOR)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
