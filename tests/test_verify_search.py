"""When the whole patch does not hold, verify keeps the best subset of its fixes that does: on the
CPU with real torch, each fix a real edit of a real script (one trains the same, one crashes, one
changes the training, one only applies on top of another), and a time budget that stops the search."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from test_verify import TRAIN, options, write

from advisor.fixer import AppliedFix, FixResult
from advisor.verify import runner
from advisor.verify.runner import verify_patch
from advisor.verify.search import BUDGET_SPENT

# Each fix as an edit of TRAIN; ADV103 only has something to change once ADV602's line is there.
EDITS = {
    "ADV601": ("lr=args.lr)", "lr=args.lr, foreach=True)"),  # trains the same
    "ADV602": ("model = torch.nn.Linear(16, 1).to(device)\n",
               "model = torch.nn.Linear(16, 1).to(device)\nraise RuntimeError('compiled model broke')\n"),  # crashes
    "ADV203": ('default=0.05', 'default=5.0'),  # another training
}
FOLLOWER = ("raise RuntimeError('compiled model broke')\n", "raise RuntimeError('compiled model broke, twice')\n")


def patch_with(codes: frozenset[str]) -> FixResult:
    source = TRAIN
    applied = []
    for code, (old, new) in EDITS.items():
        if code in codes:
            source = source.replace(old, new, 1)
            applied.append(AppliedFix(code, 1, f"edit {code}"))
    if "ADV103" in codes and FOLLOWER[0] in source:
        source = source.replace(*FOLLOWER)
        applied.append(AppliedFix("ADV103", 1, "edit ADV103"))
    data = source.encode()
    return FixResult("train.py", TRAIN.encode(), data, applied, [], [])


ALL = frozenset({"ADV601", "ADV602", "ADV103", "ADV203"})


def test_the_best_subset_is_written_and_each_dropped_fix_says_why(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    whole = patch_with(ALL)
    outcome = verify_patch(
        str(script), TRAIN.encode(), whole.fixed, whole.applied, options(tmp_path, baseline_runs=1), subset=patch_with
    )
    report = outcome.report
    assert outcome.applied and outcome.exit_code == 0, report["verdict"]
    assert script.read_bytes() == patch_with(frozenset({"ADV601"})).fixed
    assert report["fixes"] == ["ADV601"] and [f["code"] for f in report["applied_fixes"]] == ["ADV601"]
    assert report["patched"]["status"] == "ok" and report["loss_parity"]
    search = report["search"]
    assert search["whole_patch"]["patched"]["status"] == "error" and "compiled model broke" in search["whole_patch"]["reason"]
    assert search["kept"] == ["ADV601"]
    dropped = {entry["code"]: entry["reason"] for entry in search["dropped"]}
    assert dropped["ADV602"].startswith("alone, the patch crashed") and "compiled model broke" in dropped["ADV602"]
    assert dropped["ADV203"].startswith("alone, the patch loss parity failed")
    assert dropped["ADV103"] == "changes nothing without ADV203, ADV602"
    # Each fix alone once, the follower never alone (its patch alone is the original); then the fixes
    # that held alone with the follower, whose source is ADV601's alone: not run again.
    assert [trial["fixes"] for trial in search["trials"]] == [["ADV601"], ["ADV602"], ["ADV203"], ["ADV103", "ADV601"]]
    assert set(outcome.runs) == {"baseline", "patched", "only ADV601", "only ADV602", "only ADV203"}
    assert "1 of 4 fixes are kept" in report["verdict"] and "the whole patch crashed" in report["verdict"]
    assert report["verdict"].startswith("applied 1 fix (ADV601)")
    json.dumps(report, allow_nan=False)
    assert not list(tmp_path.glob(".advisor_verify_*"))


def test_no_subset_holds_and_the_file_is_untouched(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    broken = frozenset({"ADV602", "ADV203"})
    whole = patch_with(broken)
    outcome = verify_patch(
        str(script), TRAIN.encode(), whole.fixed, whole.applied, options(tmp_path, baseline_runs=1), subset=patch_with
    )
    report = outcome.report
    assert not outcome.applied and outcome.exit_code == 1
    assert script.read_text() == TRAIN
    assert "no subset of the fixes holds either" in report["verdict"] and "train.py is unchanged" in report["verdict"]
    assert report["search"]["kept"] == []


class FakeClock:
    """Time that passes only while a script runs: 30 s per run, whatever the machine."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_the_budget_stops_the_search_and_names_what_it_did_not_measure(tmp_path, monkeypatch):
    clock = FakeClock()
    real_run = runner.run_variant

    def run_for_30_s(*args, **kwargs):
        run = real_run(*args, **kwargs)
        clock.now += 30.0
        return run

    monkeypatch.setattr(runner, "run_variant", run_for_30_s)
    monkeypatch.setattr(runner, "time", clock)
    script = write(tmp_path, "train.py", TRAIN)
    whole = patch_with(ALL)
    # 70 s: the baseline and the whole patch (30 s each) fit, a third run of 30 s does not.
    outcome = verify_patch(
        str(script), TRAIN.encode(), whole.fixed, whole.applied, options(tmp_path, baseline_runs=2, budget=70),
        subset=patch_with,
    )
    report = outcome.report
    assert not outcome.applied and script.read_text() == TRAIN
    assert report["search"]["trials"] == []
    assert report["search"]["stopped"] == "the time budget was spent while running each fix alone"
    assert {entry["reason"] for entry in report["search"]["dropped"]} <= {BUDGET_SPENT, "changes nothing on its own"}
    assert "the search stopped early" in report["verdict"]


def test_a_whole_patch_that_holds_needs_no_search(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    good = patch_with(frozenset({"ADV601"}))
    outcome = verify_patch(
        str(script), TRAIN.encode(), good.fixed, good.applied, options(tmp_path, baseline_runs=1), subset=patch_with
    )
    assert outcome.applied and outcome.report["search"] is None
    assert set(outcome.runs) == {"baseline", "patched"}


# Two fixes that hold alone and clash together (each is fine; both at once crash).
CLASH = {
    "ADV605": ("torch.manual_seed(0)\n", "torch.manual_seed(0)\nCLASH = 1\n"),
    "ADV606": ("model = torch.nn.Linear(16, 1).to(device)\n",
               "model = torch.nn.Linear(16, 1).to(device)\nif 'CLASH' in globals():\n    raise RuntimeError('these two fixes clash')\n"),
}


def patch_of(edits: dict[str, tuple[str, str]]):
    """The ``subset`` function of a patch made of ``edits`` (code -> (old, new) in TRAIN)."""

    def patch(codes: frozenset[str]) -> FixResult:
        source = TRAIN
        applied = []
        for code, (old, new) in edits.items():
            if code in codes:
                source = source.replace(old, new, 1)
                applied.append(AppliedFix(code, 1, f"edit {code}"))
        return FixResult("train.py", TRAIN.encode(), source.encode(), applied, [], [])

    return patch


clash_patch = patch_of({"ADV601": EDITS["ADV601"], **CLASH})


def test_fixes_that_clash_are_found_by_adding_them_one_at_a_time(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    whole = clash_patch(frozenset({"ADV601", "ADV605", "ADV606"}))
    outcome = verify_patch(
        str(script), TRAIN.encode(), whole.fixed, whole.applied, options(tmp_path, baseline_runs=1), subset=clash_patch
    )
    report = outcome.report
    assert outcome.applied, report["verdict"]
    assert report["fixes"] == ["ADV601", "ADV605"]
    assert script.read_bytes() == clash_patch(frozenset({"ADV601", "ADV605"})).fixed
    dropped = {entry["code"]: entry["reason"] for entry in report["search"]["dropped"]}
    assert dropped == {"ADV606": "with ADV601, ADV605, the patch crashed (RuntimeError: these two fixes clash)"}
    # Alone x 3, all three together (crashes: the same source as the whole patch, not run again),
    # then ADV601 + ADV605; adding ADV606 is the whole patch again.
    assert set(outcome.runs) == {"baseline", "patched", "only ADV601", "only ADV605", "only ADV606", "with ADV605"}


# A fix known to part the loss curve (workers draw other random numbers), and one that does not.
STREAM = {
    "ADV601": EDITS["ADV601"],
    "ADV102": ("torch.manual_seed(0)\n", "torch.manual_seed(1)\n"),  # another random stream: other data, other init
    "ADV203": EDITS["ADV203"],
}


stream_patch = patch_of(STREAM)


def test_a_patch_that_parts_the_curve_is_tried_without_the_likely_cause_first(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    whole = stream_patch(frozenset({"ADV601", "ADV102"}))
    outcome = verify_patch(
        str(script), TRAIN.encode(), whole.fixed, whole.applied, options(tmp_path, baseline_runs=1), subset=stream_patch
    )
    report = outcome.report
    assert outcome.applied, report["verdict"]
    assert report["fixes"] == ["ADV601"] and script.read_bytes() == stream_patch(frozenset({"ADV601"})).fixed
    dropped = {entry["code"]: entry["reason"] for entry in report["search"]["dropped"]}
    assert dropped["ADV102"].startswith("left out first (worker processes draw")
    # One run beyond the baseline and the whole patch, not one per fix.
    assert set(outcome.runs) == {"baseline", "patched", "without ADV102"}


def test_when_the_likely_cause_is_not_the_cause_the_search_goes_on(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    whole = stream_patch(frozenset({"ADV601", "ADV102", "ADV203"}))
    outcome = verify_patch(
        str(script), TRAIN.encode(), whole.fixed, whole.applied, options(tmp_path, baseline_runs=1), subset=stream_patch
    )
    report = outcome.report
    assert outcome.applied, report["verdict"]
    assert report["fixes"] == ["ADV601"]
    dropped = {entry["code"]: entry["reason"] for entry in report["search"]["dropped"]}
    assert dropped["ADV102"].startswith("alone, the patch loss parity failed")
    assert dropped["ADV203"].startswith("alone, the patch loss parity failed")
    assert [trial["fixes"] for trial in report["search"]["trials"]][0] == ["ADV203", "ADV601"]
    assert {"without ADV102", "only ADV601", "only ADV102", "only ADV203"} <= set(outcome.runs)
