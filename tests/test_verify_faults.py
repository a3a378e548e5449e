"""Verify mode when the user's script misbehaves: it runs out of memory, is killed, leaves with
`os._exit` or `sys.exit`, hangs and ignores SIGTERM, diverges to NaN, changes directory, or
leaves DataLoader workers, a multiprocessing child, a process in a session of its own and a
daemon behind; or advisor itself is interrupted. Each gets a clear verdict and exit code, no
process of the run outlives advisor, and the user's file stays byte for byte as it was with no
patched copy left next to it. Real torch on the CPU, real subprocesses, a few steps each.

Covered elsewhere, not repeated here (tests/test_verify.py, test_verify_cli.py): a crash
(`SystemExit(3)`) of the original; the patched script crashing, raising torch's out-of-memory
error, taking no step, or hanging with a child (all: the patch is not written); a patch whose
losses go NaN; `sys.exit(0)` after a few steps; SIGTERM to advisor during the baseline run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")

from test_verify import environment, options

from advisor.cli import main
from advisor.engine import Settings
from advisor.fixer import AppliedFix, fix_source
from advisor.registry import all_rules
from advisor.targets import ASSUMED
from advisor.verify import runner
from advisor.verify.runner import verify_patch

# Every run starts DataLoader workers, a multiprocessing child that would sleep past the run,
# a process in a session of its own (out of the run's process group) and a daemon that forked
# twice (re-parented to init once its parent exits), and records them all in $RUN_RECORD.
# `# FAULT` is where a test puts what goes wrong, after the first optimizer step.
SCRIPT = '''\
import json
import multiprocessing
import os
import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def linger():
    time.sleep(300)


def leave_processes_behind(loader):
    batches = iter(loader)  # starts the persistent workers
    child = multiprocessing.get_context("fork").Process(target=linger)
    child.start()
    detached = subprocess.Popen(["sleep", "300"], start_new_session=True)
    daemon = subprocess.run(
        ["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, start_new_session=True
    )
    pids = [os.getpid(), child.pid, detached.pid, int(daemon.stdout), *(w.pid for w in batches._workers)]
    with open(os.environ["RUN_RECORD"], "a") as handle:
        handle.write(json.dumps({"pgid": os.getpgid(0), "pids": pids, "cwd": os.getcwd()}) + "\\n")


torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(512, 8)
y = x @ torch.randn(8, 1)
loader = DataLoader(TensorDataset(x, y), batch_size=16, num_workers=2, persistent_workers=True, multiprocessing_context="fork")
model = torch.nn.Linear(8, 1).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
leave_processes_behind(loader)
for epoch in range(1000):
    for inputs, targets in loader:
        inputs, targets = inputs.to(device), targets.to(device)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # FAULT
'''


def script_with(fault: str, before_first_step: bool = False) -> str:
    if before_first_step:
        return SCRIPT.replace("leave_processes_behind(loader)\n", f"leave_processes_behind(loader)\n{fault}\n")
    indented = "".join(f"        {line}\n" for line in fault.strip("\n").splitlines())
    return SCRIPT.replace("        # FAULT\n", indented)


def run_environment(tmp_path: Path) -> dict[str, str]:
    env = environment(tmp_path)
    env["RUN_RECORD"] = str(tmp_path / "processes.jsonl")
    return env


def recorded(tmp_path: Path) -> list[dict]:
    record = tmp_path / "processes.jsonl"
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def survivors(runs: list[dict]) -> list[str]:
    """Live processes that any recorded run started, or that sit in any run's process group."""
    pids = {pid for run in runs for pid in run["pids"]}
    groups = {run["pgid"] for run in runs}
    left = []
    for process in psutil.process_iter(["pid", "status", "cmdline"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:  # dead, waiting for its parent to reap it
                continue
            if process.pid in pids or os.getpgid(process.pid) in groups:
                left.append(f"{process.pid} {' '.join(process.info['cmdline'] or [])}")
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return left


def assert_nothing_survives(runs: list[dict]) -> None:
    assert runs, "the script never recorded its processes"
    deadline = time.monotonic() + 5  # SIGKILL is sent before advisor returns; dying takes a moment
    while survivors(runs) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert survivors(runs) == []


def verify_cli(args: list[str], cwd: Path, monkeypatch, capsys) -> tuple[int, dict, str]:
    monkeypatch.chdir(cwd)
    code = main(["fix", "--verify", *args, "--steps", "2", "--warmup", "1", "--report", "report.json", "--no-color"])
    out = capsys.readouterr().out
    return code, json.loads((cwd / "report.json").read_text()), out


# What goes wrong in the original, after its first optimizer step; each run must end with the
# status and the verdict shown, exit code 1, and nothing left running.
FAULTS = {
    # Memory really runs out: the address space is capped a little above what the process uses,
    # and the script keeps what it allocates, as a leak of activations would.
    "memory exhausted": (
        '''
import resource
in_use = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (in_use + (256 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
kept = []
while True:
    kept.append(torch.empty(64 << 20, dtype=torch.uint8))
''',
        "oom", "ran out of memory (RuntimeError:",
    ),
    # The kernel's out-of-memory killer sends SIGKILL: no traceback, no result.
    "killed": ("os.kill(os.getpid(), 9)", "oom", "ran out of memory (killed by SIGKILL"),
    # The out-of-memory killer picks a DataLoader worker: torch raises in the main process.
    "worker killed": (
        "os.kill(loader._iterator._workers[0].pid, 9)\ntime.sleep(1)", "oom", "ran out of memory (RuntimeError: DataLoader worker",
    ),
    "os._exit": ("os._exit(0)", "error", "crashed (the process ended with status 0 without writing results"),
    "sys.exit before a step": ("sys.exit(0)", "no_steps", "never took an optimizer step"),
    # Catches SIGTERM and carries on, and nothing else interrupts it (torch's SIGCHLD handler
    # would raise once the workers die): only SIGKILL, after the grace period, ends it.
    "hang ignoring SIGTERM": (
        '''
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGCHLD, signal.SIG_DFL)
open(os.environ["RUN_RECORD"] + ".hung", "w").close()
while True:
    time.sleep(0.1)
''',
        "timeout", "hit the --timeout (no result after --timeout 8 s",
    ),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_faults_of_the_original_get_a_verdict_and_leave_nothing_behind(tmp_path, monkeypatch, capsys, fault):
    code_text, status, message = FAULTS[fault]
    source = script_with(code_text, before_first_step=fault == "sys.exit before a step")
    script = tmp_path / "train.py"
    script.write_text(source)
    for key, value in run_environment(tmp_path).items():
        monkeypatch.setenv(key, value)
    timeout = ["--timeout", "8"] if status == "timeout" else []
    monkeypatch.setattr(runner, "KILL_GRACE_S", 1.0)  # the harness's time to write its result after SIGTERM
    code, report, out = verify_cli(["train.py", *timeout], tmp_path, monkeypatch, capsys)
    assert code == 1
    assert report["baseline"]["status"] == status, report["baseline"]
    assert report["patched"] is None and not report["applied"]
    assert report["verdict"].startswith(f"not applied: the original script {message}"), report["verdict"]
    assert "not applied: the original script" in " ".join(out.split())
    assert_nothing_survives(recorded(tmp_path))
    if status == "timeout":
        assert Path(str(tmp_path / "processes.jsonl") + ".hung").exists(), "the timeout hit before the script hung"
    assert script.read_text() == source
    expected = {"processes.jsonl", "report.json", "train.py"} | ({"processes.jsonl.hung"} if status == "timeout" else set())
    assert {p.name for p in tmp_path.iterdir()} == expected


def test_baseline_that_diverges_is_blamed_not_the_patch(tmp_path):
    """The original's loss goes NaN at step 2: the patch, NaN too, is not what failed."""
    source = script_with("model.weight.data.fill_(float('nan'))")  # the weights blow up in the first update
    script = tmp_path / "train.py"
    script.write_text(source)
    before = script.read_bytes()
    patched = before.replace(b"lr=0.05)", b"lr=0.05, foreach=True)")
    outcome = verify_patch(
        str(script), before, patched, [AppliedFix("ADV601", 21, "test")],
        options(tmp_path, steps=2, warmup=1, baseline_runs=1, env=run_environment(tmp_path)),
    )
    report = outcome.report
    assert report["baseline"]["status"] == "ok" and report["baseline"]["losses"][1] == "nan"
    assert report["patched"]["losses"][1] == "nan"
    assert "loss parity failed: the baseline loss is already nan at step 2" in report["verdict"]
    assert outcome.exit_code == 1 and script.read_bytes() == before
    assert_nothing_survives(recorded(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["processes.jsonl", "train.py"]


def test_verify_runs_exactly_the_named_script_from_anywhere(tmp_path, monkeypatch, capsys):
    """A script under a path with spaces, brackets and non-ASCII letters, named relative to a
    working directory that holds a json.py, math.py and advisor.py, next to a sibling and a
    sitecustomize.py, all with side effects; the script changes directory and leaves processes
    behind. Only the named script runs (as the original and the patched copy), the patch is
    applied exactly as `advisor fix` writes it, and no copy or process is left."""
    for key, value in run_environment(tmp_path).items():
        monkeypatch.setenv(key, value)
    ran = tmp_path / "ran"
    ran.mkdir()
    trap = "open({!r}, 'w').close()\n"
    for name in ("json.py", "math.py", "advisor.py", "sitecustomize.py"):
        (tmp_path / name).write_text(trap.format(str(ran / f"cwd {name}")))
    folder = tmp_path / "runs [v2]" / "été"
    folder.mkdir(parents=True)
    for name in ("sibling.py", "sitecustomize.py", "usercustomize.py"):
        (folder / name).write_text(trap.format(str(ran / f"sibling {name}")))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    source = SCRIPT.replace("torch.manual_seed(0)\n", f"os.chdir({str(elsewhere)!r})\ntorch.manual_seed(0)\n")
    script = folder / "entraîner ça.py"
    script.write_text(source)
    settings = Settings(codes=frozenset(r.code for r in all_rules()), target=ASSUMED)
    expected = fix_source(str(script), script.read_bytes(), settings, unsafe=False)
    relative = os.path.join("runs [v2]", "été", "entraîner ça.py")
    code, report, _ = verify_cli([relative], tmp_path, monkeypatch, capsys)
    assert code == 0, report["verdict"]
    assert report["applied"] and report["script"] == relative
    codes = sorted({fix.code for fix in expected.applied})
    plural = "es" if len(codes) != 1 else ""
    assert report["verdict"].startswith(f"applied {len(codes)} fix{plural} ({', '.join(codes)})"), report["verdict"]
    assert script.read_bytes() == expected.fixed
    assert sorted(p.name for p in ran.iterdir()) == [], "only the named script may run"
    runs = recorded(tmp_path)
    assert len(runs) == 3 and {run["cwd"] for run in runs} == {str(elsewhere)}  # baseline, patched, baseline 2
    assert_nothing_survives(runs)
    assert sorted(p.name for p in folder.iterdir()) == ["entraîner ça.py", "sibling.py", "sitecustomize.py", "usercustomize.py"]
    assert list(elsewhere.iterdir()) == []


def test_ctrl_c_during_the_patched_run_takes_it_down_and_removes_the_copy(tmp_path):
    """SIGINT while the patched copy runs (test_verify_cli covers SIGTERM during the baseline):
    advisor exits 130, the copy is removed, nothing of the run survives, the file is unchanged."""
    # The patched copy announces itself and then trains slowly, so advisor is caught mid-run.
    source = script_with("if PATCHED:\n    time.sleep(30)").replace(
        "leave_processes_behind(loader)\n",
        "leave_processes_behind(loader)\n"
        "PATCHED = os.path.basename(__file__).startswith('.advisor_verify_')\n"
        "if PATCHED:\n"
        "    open(os.environ['RUN_RECORD'] + '.patched', 'w').close()\n",
    )
    script = tmp_path / "train.py"
    script.write_text(source)
    env = run_environment(tmp_path)
    advisor = subprocess.Popen(
        [sys.executable, "-m", "advisor", "fix", "--verify", "train.py", "--steps", "2", "--warmup", "1", "--no-color"],
        cwd=tmp_path, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        # A test runner started in the background (`cmd &`, nohup) ignores SIGINT, and children
        # inherit that: give the advisor process a Ctrl-C it can receive, as a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    announced = Path(env["RUN_RECORD"] + ".patched")
    deadline = time.monotonic() + 120
    while not announced.exists() and advisor.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert announced.exists(), "the patched run never started"
    assert [p.name for p in tmp_path.glob(".advisor_verify_*")], "the patched copy runs from next to the script"
    advisor.send_signal(signal.SIGINT)
    _, err = advisor.communicate(timeout=60)
    assert advisor.returncode == 130 and "interrupted" in err
    assert len(recorded(tmp_path)) == 2  # the baseline, then the patched copy
    assert_nothing_survives(recorded(tmp_path))
    assert script.read_text() == source
    assert sorted(p.name for p in tmp_path.iterdir()) == ["processes.jsonl", "processes.jsonl.patched", "train.py"]
