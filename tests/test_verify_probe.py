"""ADV401's batch probe in verify mode, on CPU with real torch: the probe is forced on through
its testing aid, and the script itself decides what "fits" by raising torch's own
out-of-memory error above 16 samples per micro-batch, as a GPU that holds 16 would."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from test_verify import options

from advisor.engine import Settings
from advisor.rules.batch_size import larger_splits, probed_batch, target_split
from advisor.targets import ASSUMED
from advisor.verify import runner
from advisor.verify.runner import PROBE_ON_CPU_ENV, _rung_that_fits, headroom_note, verify

FITS_16 = '''\
import torch
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 64
torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(2048, 8)
y = x @ torch.randn(8, 1)
loader = DataLoader(TensorDataset(x, y), batch_size=1, shuffle=True)
model = torch.nn.Linear(8, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(100):
    for i, (inputs, targets) in enumerate(loader):
        if inputs.shape[0] > 16:
            raise torch.OutOfMemoryError("CUDA out of memory: this device holds 16 samples")
        loss = torch.nn.functional.mse_loss(model(inputs.to(device)), targets.to(device)) / ACCUMULATION_STEPS
        loss.backward()
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
'''


def settings() -> Settings:
    return Settings(codes=frozenset({"ADV401"}), target=ASSUMED)


def test_probe_ladder_keeps_the_effective_batch():
    assert larger_splits(1, 64) == [(8, 8), (16, 4), (32, 2), (64, 1)]
    assert larger_splits(1, 24) == [(8, 3)]  # 16 does not divide 24
    assert larger_splits(1, 10) == []  # 2 x 5 is the only larger split
    with probed_batch(16):
        assert target_split(1, 64) == (16, 4)
        assert target_split(1, 24) == (4, 6)  # 16 does not divide it: the static rebalancing
    assert target_split(1, 64) == (4, 16)


def test_probe_picks_the_largest_batch_that_fits(tmp_path, monkeypatch):
    monkeypatch.setenv(PROBE_ON_CPU_ENV, "1")
    script = tmp_path / "train.py"
    script.write_text(FITS_16)
    outcome = verify(str(script), settings(), options(tmp_path, steps=2, warmup=1, unsafe=True, baseline_runs=1))
    report = outcome.report
    # From ADV401's static 4 x 16 up, the per-device batch doubled until it no longer fits.
    assert [(e["batch"], e["accumulation"], e["status"]) for e in report["batch_probe"]] == [
        (4, 16, "ok"), (8, 8, "ok"), (16, 4, "ok"), (32, 2, "oom"),
    ]
    assert report["batch_split"] == {"original": [1, 64], "chosen": [16, 4], "probed": True}
    assert "batch split 16 x 4: the largest per-device batch that ran in the probe" in report["verdict"]
    assert report["applied"], report["verdict"]
    assert report["loss_parity"]
    assert report["patched"]["micro_steps"][-1] == 4
    text = script.read_text()
    assert "ACCUMULATION_STEPS = 4\n" in text and "batch_size=16," in text
    assert not list(tmp_path.glob(".advisor_verify_*"))


def test_the_first_rungs_memory_says_where_to_jump():
    """gpt2_trainer on an H100 (79.2 GiB): 8.08 GB at 4 x 8 with 2.3 GB resident; 32 x 1 then
    ran at 47.8 GB. The ladder's top that fits is the jump; a CPU run (no device memory) says nothing."""
    ladder = [(4, 8), (8, 4), (16, 2), (32, 1)]
    gib = 2**30
    run = {"peak_memory_bytes": 8.08e9, "resident_memory_bytes": 2.3e9, "device_memory_bytes": 79.2 * gib}
    assert _rung_that_fits(ladder, run) == 3
    assert _rung_that_fits(ladder, {**run, "device_memory_bytes": 20 * gib}) == 1  # (18 - 2.3) / 1.45 = 10 samples
    assert _rung_that_fits(ladder, {**run, "device_memory_bytes": 9 * gib}) == 0
    assert _rung_that_fits(ladder, {**run, "device_memory_bytes": None}) is None


def test_after_a_jump_the_probe_steps_down_until_a_split_runs(tmp_path, monkeypatch):
    """Where the first rung's memory predicts more than fits (here: everything), the probe walks
    down from the top rung through the runs that fail to the first that runs."""
    monkeypatch.setenv(PROBE_ON_CPU_ENV, "1")
    monkeypatch.setattr(runner, "_rung_that_fits", lambda ladder, run: len(ladder) - 1)
    script = tmp_path / "train.py"
    script.write_text(FITS_16)
    outcome = verify(str(script), settings(), options(tmp_path, steps=2, warmup=1, unsafe=True, baseline_runs=1))
    report = outcome.report
    assert [(e["batch"], e["accumulation"], e["status"]) for e in report["batch_probe"]] == [
        (4, 16, "ok"), (64, 1, "oom"), (32, 2, "oom"), (16, 4, "ok"),
    ]
    assert report["batch_split"] == {"original": [1, 64], "chosen": [16, 4], "probed": True}
    assert report["applied"], report["verdict"]


def test_no_probe_on_cpu(tmp_path, monkeypatch):
    monkeypatch.delenv(PROBE_ON_CPU_ENV, raising=False)
    script = tmp_path / "train.py"
    script.write_text(FITS_16)
    outcome = verify(str(script), settings(), options(tmp_path, steps=2, warmup=1, unsafe=True, baseline_runs=1))
    report = outcome.report
    assert report["batch_probe"] == []
    assert report["batch_split"] == {"original": [1, 64], "chosen": [4, 16], "probed": False}
    assert "batch probe needs CUDA" in report["verdict"]
    assert report["applied"], report["verdict"]
    assert "ACCUMULATION_STEPS = 16\n" in script.read_text()


def test_any_accumulation_is_probed_not_only_the_tiny_batches_adv401_reports(tmp_path, monkeypatch):
    """8 x 4 is no ADV401 finding, yet a GPU that holds 16 samples trains it faster as 16 x 2."""
    monkeypatch.setenv(PROBE_ON_CPU_ENV, "1")
    script = tmp_path / "train.py"
    script.write_text(FITS_16.replace("ACCUMULATION_STEPS = 64", "ACCUMULATION_STEPS = 4").replace("batch_size=1,", "batch_size=8,"))
    assert larger_splits(8, 4) == [(16, 2), (32, 1)]
    outcome = verify(str(script), settings(), options(tmp_path, steps=2, warmup=1, unsafe=True, baseline_runs=1))
    report = outcome.report
    assert [(e["batch"], e["accumulation"], e["status"]) for e in report["batch_probe"]] == [
        (8, 4, "ok"), (16, 2, "ok"), (32, 1, "oom"),
    ]
    assert report["batch_split"] == {"original": [8, 4], "chosen": [16, 2], "probed": True}
    assert report["applied"] and report["fixes"] == ["ADV401"], report["verdict"]
    assert report["patched"]["micro_steps"][-1] == 2
    text = script.read_text()
    assert "ACCUMULATION_STEPS = 2\n" in text and "batch_size=16," in text


def test_without_the_probe_a_split_adv401_does_not_report_is_left_alone(tmp_path):
    """Statically (and in verify without CUDA) 8 x 4 is nothing to fix: nothing changes."""
    script = tmp_path / "train.py"
    source = FITS_16.replace("ACCUMULATION_STEPS = 64", "ACCUMULATION_STEPS = 4").replace("batch_size=1,", "batch_size=8,")
    script.write_text(source)
    outcome = verify(str(script), settings(), options(tmp_path, steps=2, warmup=1, unsafe=True, baseline_runs=1))
    assert outcome.report["fixes"] == [] and script.read_text() == source


def test_headroom_note_estimates_the_batch_that_fits():
    gib = 2**30
    run = {
        "peak_memory_bytes": 7 * gib, "device_memory_bytes": 80 * gib, "resident_memory_bytes": 3 * gib,
        "steps_per_second": 2.0, "samples_per_second": 64.0, "micro_steps": [4, 4, 4],
    }
    # 32 samples per step over 4 micro-steps: 8 per micro-step, 0.5 GiB each above the 3 GiB resident.
    note = headroom_note(run)
    assert note.startswith("peak GPU memory 7.0 of 80.0 GiB (9%)")
    assert "a per-device batch of about 136 would fit where this step used 8" in note  # (72 - 3) / 0.5 = 138 -> 136
    assert headroom_note({**run, "peak_memory_bytes": 70 * gib}) == "peak GPU memory 70.0 of 80.0 GiB (88%)"
    assert headroom_note({**run, "device_memory_bytes": None}) is None
    # mlp_synthetic on an H100: 1% of the card; no six-digit batch is claimed.
    small = {**run, "peak_memory_bytes": 1.24e9, "resident_memory_bytes": 1.0e9, "device_memory_bytes": 79.2 * gib,
             "steps_per_second": 100.0, "samples_per_second": 51200.0, "micro_steps": [1, 1, 1]}
    assert "a per-device batch over 64 times the 512 this step used would fit" in headroom_note(small)


def test_a_probe_of_one_rung_says_why_it_went_no_further():
    """On an H200 the GPT-2 probe ran 8 x 4 alone because the budget held back the compiled
    patch's run; the note said "no larger split divides, or the budget did not pay": one of the two."""
    from advisor.verify.runner import _probe_note

    ran = [{"batch": 8, "accumulation": 4, "status": "ok", "steps_per_second": 5.2}]
    assert _probe_note((8, 4), ran, True, larger=True).endswith("(the --budget left did not pay for a larger split)")
    assert _probe_note((8, 1), ran, True, larger=False).endswith("(no larger split divides the effective batch)")
