"""When the whole patch does not hold, the best subset of its fixes that does.

A patch is all or nothing only for the file: its fixes are independent edits, and one that
crashes, changes the training or slows the script down must not cost the user the others. The
search, given the fixes of a patch that failed:

0. when the patch failed in a way a few fixes are known for (SUSPECTS: workers draw the data set's
   random numbers from streams of their own, so the curve parts; ``torch.compile`` of a short step
   costs more than it saves), runs the patch without those fixes first, in one run: when it
   holds, that is the answer (cnn_synthetic on an H200: workers changed the augmentation; the
   MLP: compile slowed a 10 ms step), found for one run instead of n + 1;
1. runs each fix alone (its patch with only that code enabled): a fix that crashes, fails loss
   parity or, on CUDA, is slower than the baseline beyond its noise is dropped, with that reason;
   a fix whose patch alone changes nothing (``non_blocking=True`` needs the pinned loader of
   another fix) follows the others and is tried last;
2. runs the patch without the fixes that failed alone, in one run: when it holds, that is the
   answer (the common case: one fix broke the patch);
3. otherwise adds the fixes that held alone one at a time, on CUDA fastest first (on a CPU speed
   does not decide, so in the patch's order), keeping each one whose addition still holds and,
   on CUDA, is not slower than the subset without it beyond the baseline's noise (forward
   selection: a fix that only pays with another is kept when it comes after it).

That is n + 1 runs for n fixes in the common case, at most 2n (a source measured once is never
measured again), each
within the time budget: when the budget cannot pay for the next run, the search stops with what it
has, and every fix it did not reach is named as not measured.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from advisor.verify.compare import Parity, slower_beyond_noise


@dataclass
class Judgement:
    """One patched run against the baseline: whether it holds, and why not or how fast."""

    run: dict
    held: bool
    reason: str  # why it did not hold ("crashed (...)", "loss parity failed: ..."), else the speed
    speedup: float | None
    kind: str | None = None  # what failed: "run", "parity" or "slower"; None when it held
    parity: Parity | None = None


@dataclass
class Subset:
    codes: frozenset[str]
    source: bytes
    judgement: Judgement


@dataclass
class SearchResult:
    best: Subset | None  # None: no fix holds on its own
    dropped: dict[str, str] = field(default_factory=dict)  # code -> why it is not in the best subset
    trials: list[dict] = field(default_factory=list)  # every subset measured, in order, for the report
    stopped: str | None = None  # why the search ended before trying every fix


BUDGET_SPENT = "not measured: the time budget was spent"

# Per way a whole patch fails (Judgement.kind), the fixes known to cause it, and why.
SUSPECTS: dict[str, dict[str, str]] = {
    "parity": {
        "ADV102": "worker processes draw the data set's random numbers from streams of their own",
    },
    "slower": {
        "ADV602": "torch.compile pays only where a step's kernels outweigh its guards and launches",
        "ADV102": "worker processes pay only where loading a batch costs more than handing it over",
    },
}


def best_subset(
    codes: Sequence[str],
    original: bytes,
    source_of: Callable[[frozenset[str]], bytes],
    measure: Callable[[str, bytes, frozenset[str]], Judgement | None],
    cuda: bool,
    noise: float,
    failure: str | None = None,
) -> SearchResult:
    """``source_of(codes)`` is the patch with only those fixes; ``measure(label, source, codes)``
    runs and judges it against the baseline (None when the budget cannot pay for the run);
    ``failure`` is how the whole patch failed (Judgement.kind)."""
    result = SearchResult(best=None)
    suspects = {code: why for code, why in SUSPECTS.get(failure or "", {}).items() if code in codes}
    if suspects and len(suspects) < len(codes):
        together = frozenset(codes) - set(suspects)
        source = source_of(together)
        if source != original:
            judgement = measure("without " + ", ".join(sorted(suspects)), source, together)
            if judgement is None:
                result.stopped = "the time budget was spent while leaving the likely causes out"
                for code in codes:
                    result.dropped[code] = BUDGET_SPENT
                return result
            result.trials.append(_trial(together, judgement))
            if judgement.held:
                for code, why in suspects.items():
                    result.dropped[code] = f"left out first ({why}): the patch without it holds"
                for code in sorted(together):
                    if source_of(together - {code}) == source:
                        result.dropped[code] = _follows(codes, together - {code})
                kept = frozenset(c for c in together if c not in result.dropped)
                result.best = Subset(kept, source, judgement)
                return result
    alone: dict[str, Judgement] = {}
    followers: list[str] = []

    def record(codes_: frozenset[str], judgement: Judgement) -> None:
        result.trials.append(_trial(codes_, judgement))

    for code in codes:
        only = frozenset({code})
        source = source_of(only)
        if source == original:
            followers.append(code)
            continue
        judgement = measure(f"only {code}", source, only)
        if judgement is None:
            result.stopped = "the time budget was spent while running each fix alone"
            break
        record(only, judgement)
        alone[code] = judgement
        if not judgement.held:
            result.dropped[code] = f"alone, the patch {judgement.reason}"

    held_alone = [code for code in codes if code in alone and alone[code].held]
    if not result.stopped and held_alone:
        # The common case first: the patch without the fixes that failed alone, in one run.
        together = frozenset(held_alone) | frozenset(followers)
        source = source_of(together)
        judgement = measure("without " + ", ".join(sorted(set(codes) - together)), source, together)
        if judgement is None:
            result.stopped = "the time budget was spent while combining the fixes"
        else:
            record(together, judgement)
            if judgement.held:
                for code in followers:
                    if source_of(together - {code}) == source:
                        result.dropped[code] = _follows(codes, together)
                kept = frozenset(c for c in together if c not in result.dropped)
                result.best = Subset(kept, source, judgement)
                return result
    if cuda:  # fastest first, so that the subset is built around what pays most
        held_alone.sort(key=lambda code: -(alone[code].speedup or 0.0))
    best: Subset | None = None
    for code in held_alone + followers:
        if result.stopped:
            break
        chosen = best.codes if best else frozenset()
        trial = chosen | {code}
        source = source_of(trial)
        if source == (best.source if best else original):
            result.dropped[code] = _follows(codes, chosen | {code}) if best else "changes nothing on its own"
            continue
        judgement = alone[code] if best is None and code in alone else measure(f"with {code}", source, trial)
        if judgement is None:
            result.stopped = "the time budget was spent while combining the fixes"
            break
        if trial != frozenset({code}):
            record(trial, judgement)
        if not judgement.held:
            result.dropped[code] = f"with {', '.join(sorted(chosen))}, the patch {judgement.reason}"
            continue
        if cuda and best is not None and _slower_than(judgement, best.judgement, noise):
            result.dropped[code] = (
                f"adds no speed: {judgement.speedup:.2f}x with it, {best.judgement.speedup:.2f}x without"
            )
            continue
        best = Subset(trial, source, judgement)
    for code in codes:
        if code not in result.dropped and (best is None or code not in best.codes):
            result.dropped[code] = BUDGET_SPENT
    result.best = best
    return result


def _trial(codes: frozenset[str], judgement: Judgement) -> dict:
    return {
        "fixes": sorted(codes),
        "status": judgement.run.get("status"),
        "speedup": judgement.speedup,
        "held": judgement.held,
        "reason": judgement.reason,
    }


def _slower_than(candidate: Judgement, incumbent: Judgement, noise: float) -> bool:
    if not candidate.speedup or not incumbent.speedup:
        return False
    return slower_beyond_noise(candidate.speedup / incumbent.speedup, noise)


def _follows(codes: Sequence[str], kept: frozenset[str]) -> str:
    return f"changes nothing without {', '.join(sorted(set(codes) - kept))}"
