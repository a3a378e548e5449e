"""Verify mode on CPU with real torch, transformers and accelerate: scripts really run, in
subprocesses, under the harness. No mocks; each run is a few optimizer steps on a tiny model."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from advisor.engine import Settings
from advisor.fixer import AppliedFix, fix_source
from advisor.registry import all_rules
from advisor.targets import ASSUMED
from advisor.verify.compare import loss_parity, slower_beyond_noise
from advisor.verify.runner import VerifyOptions, run_variant, verify, verify_patch

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RUN_KEYS = {"status", "steps", "steps_per_second", "samples_per_second", "step_time_ms", "peak_memory_bytes", "losses"}
REPORT_KEYS = {"device", "script", "fixes", "baseline", "patched", "speedup", "loss_parity", "applied", "verdict", "ablation"}


def environment(home: Path) -> dict[str, str]:
    return {
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(home / "hf-home"),
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }


def options(tmp_path: Path, **changes) -> VerifyOptions:
    values = {"steps": 3, "warmup": 1, "timeout": 120, "env": environment(tmp_path)}
    values.update(changes)
    return VerifyOptions(**values)


# A regression trained the way scripts commonly are; it would run 1000 epochs. Its samples are
# decoded one by one (JSON lines), as a text data set's are: the data loading fixes pay there.
TRAIN = '''\
import argparse
import json

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--epochs", type=int, default=1000)
args = parser.parse_args()


class JsonLines(Dataset):
    def __init__(self, lines):
        self.lines = lines

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, index):
        sample = json.loads(self.lines[index])
        return torch.tensor(sample["x"]), torch.tensor(sample["y"])


torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(512, 16)
y = x @ torch.randn(16, 1)
lines = [json.dumps({"x": a, "y": b}) for a, b in zip(x.tolist(), y.tolist())]
loader = DataLoader(JsonLines(lines), batch_size=32, shuffle=True)
model = torch.nn.Linear(16, 1).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
for epoch in range(args.epochs):
    for inputs, targets in loader:
        inputs, targets = inputs.to(device), targets.to(device)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


def alive(pid: int) -> bool:
    """A process that still runs (a zombie waiting for init to reap it does not)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.1)
    return True


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def assert_run_contract(run: dict) -> None:
    assert set(run) >= RUN_KEYS
    assert run["status"] in ("ok", "error", "timeout", "oom", "no_steps")
    assert isinstance(run["steps"], int)
    for key in ("steps_per_second", "samples_per_second", "peak_memory_bytes"):
        assert run[key] is None or (isinstance(run[key], (int, float)) and run[key] >= 0), key
    assert set(run["step_time_ms"]) == {"median", "p90"}
    for value in run["step_time_ms"].values():
        assert value is None or isinstance(value, float)
    for loss in run["losses"]:
        assert loss is None or isinstance(loss, float) or loss in ("nan", "inf", "-inf")


def assert_report_contract(report: dict) -> None:
    assert set(report) >= REPORT_KEYS
    assert isinstance(report["device"], str)
    assert isinstance(report["script"], str)
    assert isinstance(report["fixes"], list) and all(isinstance(c, str) and c.startswith("ADV") for c in report["fixes"])
    for side in ("baseline", "patched"):
        assert_run_contract(report[side])
    assert report["speedup"] is None or isinstance(report["speedup"], float)
    assert isinstance(report["loss_parity"], bool)
    assert isinstance(report["applied"], bool)
    assert isinstance(report["verdict"], str) and report["verdict"]
    for entry in report["ablation"]:
        assert {"code", "speedup", "loss_parity"} <= set(entry)
    json.loads(json.dumps(report, allow_nan=False))  # strict JSON: no bare NaN


# -- the harness -------------------------------------------------------------------------


def test_endless_script_is_stopped_after_warmup_plus_steps(tmp_path):
    # `except Exception` around the step cannot swallow the stop, and the loop never ends by itself.
    # The script imports a module next to it while the working directory is elsewhere.
    write(tmp_path, "constants.py", "LR = 0.01\n")
    script = write(tmp_path, "forever.py", '''\
import torch
from constants import LR

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=LR)
x = torch.randn(64, 8)
y = x.sum(1, keepdim=True)
while True:
    try:
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    except Exception:
        pass
''')
    run = run_variant(str(script), str(script), options(tmp_path, steps=4, warmup=2), "baseline")
    assert_run_contract(run)
    assert run["status"] == "ok" and run["completed"]
    assert run["steps"] == 6
    assert len(run["losses"]) == 6 and all(math.isfinite(v) for v in run["losses"])
    assert run["losses"][-1] < run["losses"][0]
    assert len(run["step_times_ms"]) == 4  # between steps 2..6, after the warm-up
    assert run["steps_per_second"] > 0 and run["step_time_ms"]["median"] > 0
    assert run["samples_per_second"] is None  # no DataLoader: the batch size is unknown
    assert run["peak_memory_bytes"] > 0 and run["memory_kind"] == "cpu_peak_rss"
    assert run["device"] == "cpu"


def test_a_short_window_runs_on_until_it_lasts_the_minimum(tmp_path, monkeypatch):
    """Fast steps: the window of N steps runs on until it lasts ``min_window_s``, at most ten
    times N steps (on CUDA; the CPU run here asks for it through the testing switch)."""
    script = write(tmp_path, "fast.py", '''\
import time
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 4)
for _ in range(100000):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(0.02)
''')
    monkeypatch.setenv("ADVISOR_VERIFY_WINDOW_ON_CPU", "1")
    run = run_variant(str(script), str(script), options(tmp_path, steps=3, warmup=1, min_window_s=0.3), "baseline")
    assert run["status"] == "ok" and run["completed"]
    assert 1 + 3 < run["steps"] <= 1 + 30
    assert sum(run["step_times_ms"]) >= 300
    capped = run_variant(str(script), str(script), options(tmp_path, steps=2, warmup=1, min_window_s=60), "capped")
    assert capped["status"] == "ok" and capped["steps"] == 1 + 20
    monkeypatch.delenv("ADVISOR_VERIFY_WINDOW_ON_CPU")
    plain = run_variant(str(script), str(script), options(tmp_path, steps=3, warmup=1, min_window_s=60), "cpu")
    assert plain["steps"] == 4  # a CPU run measures the steps asked for


def test_accumulation_grad_scaler_skips_and_sys_exit(tmp_path):
    # Two micro-steps per optimizer step with the loss divided; a CPU GradScaler whose first
    # two steps see inf gradients and are skipped; the script exits with sys.exit(0) early.
    script = write(tmp_path, "scaled.py", '''\
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu")
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
updates = 0
for index, (inputs, targets) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    if index < 4:
        loss = loss * float("inf")
    scaler.scale(loss / 2).backward()
    if index % 2 == 1:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        updates += 1
        if updates == 3:
            sys.exit(0)
''')
    run = run_variant(str(script), str(script), options(tmp_path, steps=10, warmup=1), "baseline")
    assert run["status"] == "ok" and not run["completed"]
    assert run["steps"] == 3 and run["skipped_steps"] == 2
    assert run["micro_steps"] == [2, 2, 2]
    assert run["losses"][:2] == ["inf", "inf"]
    # The GradScaler's scale (65536) is taken off: the loss is the objective's, summed over micro-steps.
    assert 0.01 < run["losses"][2] < 20
    assert run["samples_per_second"] and run["samples_per_second"] > 0


def test_hf_trainer_is_measured(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    script = FIXTURES / "hf_trainer.py"
    args = ["--num-blocks", "256", "--use-cpu", "--output-dir", str(tmp_path / "out")]
    run = run_variant(str(script), str(script), options(tmp_path, steps=2, warmup=0, script_args=args), "baseline")
    assert run["status"] == "ok", run["error"]
    assert run["steps"] == 2 and run["completed"]
    assert run["micro_steps"] == [64, 64]  # 1 x 64 accumulation: one optimizer step each 64 backward calls
    # The Trainer's own scaling makes the per-step objective the mean token loss: about ln(8192).
    assert all(8.0 < loss < 10.0 for loss in run["losses"])
    assert run["samples_per_second"] > 0 and run["steps_per_second"] > 0


def test_accelerate_loop_is_measured(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    script = FIXTURES / "accelerate_loop.py"
    run = run_variant(str(script), str(script), options(tmp_path, steps=2, warmup=1, script_args=["--train-size", "256"]), "baseline")
    assert run["status"] == "ok", run["error"]
    assert run["steps"] == 3 and run["micro_steps"] == [4, 4, 4]
    assert all(0.3 < loss < 1.2 for loss in run["losses"])  # binary classification, about ln 2
    assert run["samples_per_second"] > 0


# -- decisions: the file is written only when the patch holds -----------------------------


def test_correct_patch_is_applied_and_report_follows_contract(tmp_path):
    script = write(tmp_path, "train.py", TRAIN)
    outcome = verify(str(script), Settings(codes=frozenset(r.code for r in all_rules()), target=ASSUMED), options(tmp_path))
    report = outcome.report
    assert_report_contract(report)
    assert report["applied"] and outcome.exit_code == 0, report["verdict"]
    # Safe fixes only: no torch.compile; the loader has no workers, so pinning it is advice.
    assert "ADV601" in report["fixes"] and "ADV602" not in report["fixes"] and "ADV101" not in report["fixes"]
    assert report["loss_parity"] is True
    assert report["device"] == "cpu" and "CPU timings do not predict GPU gains" in report["verdict"]
    assert report["baseline"]["losses"][0] == report["patched"]["losses"][0]
    assert len(report["baseline_runs"]) == 2 and report["baseline"]["samples_per_second"] > 0
    assert "fused=" in script.read_text() and "torch.compile" not in script.read_text()
    assert not list(tmp_path.glob(".advisor_verify_*")), "the temporary patched script must be removed"


@pytest.mark.parametrize(
    "name, change, expected",
    [
        ("lr x100", lambda s: s.replace('default=0.05', 'default=5.0'), "loss parity failed"),
        ("nan", lambda s: s.replace("optimizer.zero_grad()", "loss = loss * float('nan')\n        optimizer.zero_grad()"), "nan"),
    ],
)
def test_broken_patch_fails_parity_and_leaves_the_file(tmp_path, name, change, expected):
    script = write(tmp_path, "train.py", TRAIN)
    before = script.read_bytes()
    patched = change(TRAIN).encode()
    outcome = verify_patch(str(script), before, patched, [AppliedFix("ADV601", 17, "test")], options(tmp_path, baseline_runs=1))
    report = outcome.report
    assert_report_contract(report)
    assert report["patched"]["status"] == "ok"
    assert report["loss_parity"] is False and not report["applied"] and outcome.exit_code == 1
    assert expected in report["verdict"] and "unchanged" in report["verdict"]
    assert script.read_bytes() == before


FAILURES = {
    "error": ("        optimizer.step()\n", "        optimizer.step()\n        raise RuntimeError('patched script broke')\n",
              "patched script broke"),
    "oom": ("        optimizer.step()\n", "        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')\n",
            "out of memory"),
    "no_steps": ("for epoch in range(args.epochs):", "for epoch in range(0):", "never took an optimizer step"),
    # A hung script with a child process of its own: both must go when the timeout hits.
    "timeout": ("torch.manual_seed(0)\n",
                ("torch.manual_seed(0)\nimport subprocess, time\nchild = subprocess.Popen(['sleep', '300'])\n"
                "open('child.pid', 'w').write(str(child.pid))\ntime.sleep(300)\n"), "--timeout"),
}


@pytest.mark.parametrize("status", sorted(FAILURES))
def test_failing_patched_run_leaves_the_file_untouched(tmp_path, status, monkeypatch):
    old, new, message = FAILURES[status]
    monkeypatch.chdir(tmp_path)  # the script keeps the caller's working directory
    script = write(tmp_path, "train.py", TRAIN)
    before = script.read_bytes()
    assert old in TRAIN
    patched = TRAIN.replace(old, new, 1).encode()
    started = time.monotonic()
    outcome = verify_patch(str(script), before, patched, [AppliedFix("ADV601", 17, "test")], options(tmp_path, timeout=12))
    report = outcome.report
    assert report["patched"]["status"] == status, report["patched"]
    assert not report["applied"] and outcome.exit_code == 1
    assert message in report["verdict"] + (report["patched"].get("error") or "")
    assert script.read_bytes() == before
    assert len(report["baseline_runs"]) == 1  # no second baseline for a patch that failed
    assert not list(tmp_path.glob(".advisor_verify_*"))
    if status == "timeout":
        assert time.monotonic() - started < 60
        pid = int((tmp_path / "child.pid").read_text())
        assert not alive(pid), "the script's child must go with its process group"
    if status == "error":
        assert "train.py (patched)" in report["patched"]["error"]  # not the temporary file's name


def test_original_that_crashes_gets_a_verdict_not_a_traceback(tmp_path):
    script = write(tmp_path, "train.py", TRAIN.replace("args = parser.parse_args()", "args = parser.parse_args()\nraise SystemExit(3)"))
    before = script.read_bytes()
    outcome = verify_patch(str(script), before, before.replace(b"lr=args.lr", b"lr=args.lr, fused=True"), [AppliedFix("ADV601", 1, "x")], options(tmp_path))
    assert outcome.report["baseline"]["status"] == "error"
    assert outcome.report["patched"] is None
    assert "the original script crashed" in outcome.report["verdict"] and "status 3" in outcome.report["verdict"]
    assert script.read_bytes() == before and outcome.exit_code == 1


def test_plain_pytorch_fixture_patch_holds(tmp_path):
    """The fixture's full unsafe patch (bf16, rebalanced 4 x 16 batch, zero_grad moved, loss divided,
    workers, compile, fused AdamW) trains the same on CPU, and is written."""
    script = tmp_path / "plain_pytorch.py"
    script.write_bytes((FIXTURES / "plain_pytorch.py").read_bytes())
    settings = Settings(codes=frozenset(r.code for r in all_rules()), target=ASSUMED)
    expected = fix_source(str(script), script.read_bytes(), settings, unsafe=True, measured=True).fixed
    outcome = verify(
        str(script), settings, options(tmp_path, steps=2, unsafe=True, baseline_runs=1, script_args=["--train-size", "256"])
    )
    report = outcome.report
    assert report["applied"], report["verdict"]
    assert {"ADV302", "ADV303", "ADV401"} <= set(report["fixes"])
    assert report["baseline"]["micro_steps"][0] == 64 and report["patched"]["micro_steps"][0] == 16
    # ADV303 divides the loss: the baseline's per-step sum of 64 undivided losses is compared as a mean.
    assert report["parity"]["baseline_as_mean"] and not report["parity"]["patched_as_mean"]
    assert script.read_bytes() == expected


# -- parity rules, on recorded numbers ----------------------------------------------------


def _run(losses, micro=1):
    return {"status": "ok", "losses": losses, "micro_steps": [micro] * len(losses)}


def test_parity_tolerance_follows_baseline_noise_and_precision():
    steady = [_run([2.0, 1.8, 1.6]), _run([2.0, 1.8, 1.6])]
    assert loss_parity(steady, _run([2.0, 1.81, 1.61]), []).ok
    assert not loss_parity(steady, _run([2.0, 1.87, 1.67]), []).ok  # 4% off a deterministic baseline
    assert loss_parity(steady, _run([2.0, 1.87, 1.67]), ["ADV201"]).ok  # fp16 -> bf16 allowance
    noisy = [_run([2.0, 1.8, 1.6]), _run([2.0, 1.83, 1.65])]
    assert loss_parity(noisy, _run([2.0, 1.9, 1.7]), []).ok  # within 4x the baseline's own noise
    assert not loss_parity(steady, _run([2.0, "nan", 1.6]), []).ok
    # A fix that corrects the update may learn faster, not slower; step 1 must match regardless.
    assert loss_parity(steady, _run([2.0, 1.2, 0.9]), ["ADV302"]).ok
    assert not loss_parity(steady, _run([2.6, 1.8, 1.6]), ["ADV302"]).ok
    # Rebalanced accumulation: a loop without division keeps the mean per micro-step comparable.
    assert loss_parity([_run([128.0, 120.0], micro=64)] * 2, _run([32.0, 30.0], micro=16), ["ADV401"]).ok


def test_parity_of_a_loss_near_zero_is_measured_against_the_curve():
    """cnn_synthetic on an H100: the loss falls from 2.34 to 0.0004 within the run, where 0.0009
    against 0.0014 is rounding, not a different training; a patched run that stops learning is not."""
    mastered = [_run([2.34, 1.10, 0.089, 0.00094]), _run([2.34, 1.10, 0.089, 0.00094])]
    assert loss_parity(mastered, _run([2.34, 1.10, 0.089, 0.00146]), ["ADV203"]).ok
    assert not loss_parity(mastered, _run([2.34, 1.10, 0.089, 0.5]), ["ADV203"]).ok
    assert not loss_parity(mastered, _run([2.34, 1.60, 0.9, 0.4]), ["ADV203"]).ok


def test_parity_allows_for_reordered_arithmetic_as_for_a_coarser_precision():
    """cnn_synthetic on an H200 (bench/verify/records/h200-2026-11-27/search/): two baseline runs
    agree at step 3, where the loss falls from 2.34 to 0.09; torch.compile alone and
    cudnn.benchmark alone part from them there as far as bf16 autocast does. A different
    random stream (workers, ADV102) parts far more, and stays a failure."""
    baseline = [_run([2.3426, 1.1037, 0.0885, 0.0116, 0.0081]), _run([2.3426, 1.1037, 0.0885, 0.0116, 0.0079])]
    compiled = _run([2.3426, 1.1040, 0.0841, 0.0110, 0.0080])
    benchmarked = _run([2.3426, 1.1041, 0.0839, 0.0109, 0.0080])
    assert not loss_parity(baseline, compiled, []).ok  # the bare 2% floor
    assert loss_parity(baseline, compiled, ["ADV602"]).ok
    assert loss_parity(baseline, benchmarked, ["ADV605"]).ok
    assert loss_parity(baseline, _run([2.3423, 1.1081, 0.0835, 0.0104, 0.0083]), ["ADV601", "ADV203"]).ok
    other_stream = _run([2.3426, 1.0412, 0.0535, 0.0090, 0.0070])
    assert not loss_parity(baseline, other_stream, ["ADV102", "ADV602", "ADV605"]).ok


def test_slower_means_beyond_the_baseline_noise():
    assert slower_beyond_noise(0.90, noise=0.01)
    assert not slower_beyond_noise(0.99, noise=0.0)  # within the 2% floor
    assert not slower_beyond_noise(0.93, noise=0.04)  # within twice the baseline's own spread
    assert not slower_beyond_noise(None, noise=0.0)  # not measured: not a reason to reject


def test_final_loss_has_one_definition_whatever_parity_compared():
    """A loop that sums its micro-steps' losses: the table shows the mean per micro-step
    either way (it showed 667.18 in one report and 41.699 in another for one baseline)."""
    from advisor.verify.display import final_losses

    run = {"losses": [700.0, 667.18], "micro_steps": [16, 16]}
    for as_mean in (False, True):
        report = {"baseline": run, "patched": run, "parity": {"baseline_as_mean": as_mean, "patched_as_mean": as_mean}}
        before, after = final_losses(report)
        assert before == after == pytest.approx(667.18 / 16)
