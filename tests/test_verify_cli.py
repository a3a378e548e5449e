"""`advisor fix --verify` from the command line: interface, exit codes, report file."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_verify import TRAIN, assert_report_contract, environment

from advisor.cli import main
from advisor.verify.command import split_script_args


def run(args, capsys, cwd: Path):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        code = main(args)
    finally:
        os.chdir(old)
    out, err = capsys.readouterr()
    return code, out, err


def test_script_arguments_follow_the_double_dash():
    assert split_script_args(["fix", "--verify", "t.py", "--steps", "3", "--", "--lr", "1", "--", "x"]) == (
        ["fix", "--verify", "t.py", "--steps", "3"],
        ["--lr", "1", "--", "x"],
    )
    # Without --verify, `--` keeps its usual meaning for PATHS.
    assert split_script_args(["check", "--", "-odd.py"]) == (["check", "--", "-odd.py"], [])


@pytest.mark.parametrize(
    "args, message",
    [
        (["fix", "--steps", "3", "train.py"], "--steps only with --verify"),
        (["fix", "--report", "r.json", "train.py"], "--report only with --verify"),
        (["fix", "--verify", "missing.py"], "script not found"),
        (["fix", "--verify", "train.py", "other.py"], "takes one script"),
        (["fix", "--verify"], "exactly one script"),
        (["fix", "--verify", "train.py", "--diff"], "--diff and --verify"),
        (["fix", "--verify", "train.py", "--steps", "1"], "--steps must be at least 2"),
        (["fix", "--verify", "train.py", "--timeout", "0"], "--timeout must be positive"),
        (["fix", "--verify", "train.py", "--budget", "-5"], "--budget must be positive"),
        (["fix", "--budget", "60", "train.py"], "--budget only with --verify"),
        (["fix", "--output-format", "json", "train.py"], "--output-format only with --verify"),
        (["fix", "--launcher", "torchrun", "train.py"], "--launcher only with --verify"),
        (["fix", "--verify", "train.py", "--launcher", " "], "--launcher needs a command"),
    ],
)
def test_usage_errors_exit_2(tmp_path, capsys, args, message):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "other.py").write_text(TRAIN)
    code, _, err = run(args, capsys, tmp_path)
    assert code == 2
    assert message in err
    assert (tmp_path / "train.py").read_text() == TRAIN


def test_plot_without_matplotlib_is_a_usage_error(tmp_path, capsys):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        (tmp_path / "train.py").write_text(TRAIN)
        code, _, err = run(["fix", "--verify", "train.py", "--plot", "p.png"], capsys, tmp_path)
        assert code == 2 and "needs matplotlib" in err
    else:
        pytest.skip("matplotlib is installed")


def test_nothing_to_fix_exits_0_without_running(tmp_path, capsys):
    (tmp_path / "clean.py").write_text("import torch\n\nprint(torch.zeros(1))\n")
    code, out, _ = run(["fix", "--verify", "clean.py", "--report", "r.json"], capsys, tmp_path)
    assert code == 0 and "nothing to fix" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["fixes"] == [] and report["applied"] is False and report["baseline"] is None


def test_verify_end_to_end(tmp_path, capsys, monkeypatch):
    """Script arguments after `--` reach the script (it requires `--lr`), the report is written,
    the patch is applied, and a non-terminal output carries no progress display."""
    for key, value in environment(tmp_path).items():
        monkeypatch.setenv(key, value)
    script = tmp_path / "train.py"
    script.write_text(TRAIN.replace('"--lr", type=float, default=0.05', '"--lr", type=float, required=True'))
    code, out, err = run(
        ["fix", "--verify", "train.py", "--steps", "3", "--warmup", "1", "--report", "report.json", "--no-color", "--", "--lr", "0.05"],
        capsys,
        tmp_path,
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert code == 0, report["verdict"]
    assert_report_contract(report)
    assert report["applied"] and report["script"] == "train.py"
    assert "fused=" in script.read_text()
    for row in ("steps/s", "samples/s", "step time median", "step time p90", "peak memory", "final loss"):
        assert row in out
    assert "CPU timings do not predict GPU gains" in out
    assert "\r" not in err and "\x1b" not in err


def test_fix_without_verify_never_imports_torch(tmp_path):
    """The verify options live on `advisor fix`; `fix` itself must stay static and torch-free."""
    script = tmp_path / "train.py"
    script.write_text("import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(d, num_workers=2)\nm = m.cuda()\n")
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    for name in ("torch", "transformers", "accelerate"):
        (blocker / f"{name}.py").write_text(f"raise ImportError('advisor must not import {name}')\n")
    env = {"PYTHONPATH": str(blocker), "PATH": "/usr/bin:/bin"}
    completed = subprocess.run(
        [sys.executable, "-m", "advisor", "fix", "--diff", str(script)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert completed.returncode == 1, completed.stderr
    assert "pin_memory=True" in completed.stdout


FOREVER_WITH_PID = TRAIN.replace(
    "torch.manual_seed(0)\n",
    "import os, pathlib\npathlib.Path(os.environ['PID_FILE']).write_text(str(os.getpid()))\ntorch.manual_seed(0)\n",
).replace("        optimizer.step()\n", "        optimizer.step()\n        import time; time.sleep(0.5)\n")


def test_sigterm_to_advisor_takes_the_run_down_and_leaves_the_file(tmp_path):
    """A cancelled CI job sends SIGTERM: the script's process must not outlive advisor, the
    patched copy must go, and the user's file stays as it was."""
    import signal
    import time

    from test_verify import alive

    script = tmp_path / "train.py"
    script.write_text(FOREVER_WITH_PID)
    pid_file = tmp_path / "script.pid"
    env = environment(tmp_path)
    env["PID_FILE"] = str(pid_file)
    advisor = subprocess.Popen(
        [sys.executable, "-m", "advisor", "fix", "--verify", "train.py", "--steps", "1000", "--timeout", "300", "--no-color"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pid_file.exists(), "the baseline run never started"
    time.sleep(1.0)
    advisor.send_signal(signal.SIGTERM)
    advisor.wait(timeout=60)
    assert advisor.returncode != 0
    assert not alive(int(pid_file.read_text()))
    assert script.read_text() == FOREVER_WITH_PID
    assert sorted(p.name for p in tmp_path.glob(".advisor_verify_*")) == []


def test_json_output_is_the_report_and_nothing_else(tmp_path, capsys, monkeypatch):
    """`--output-format json`: stdout parses as the report, stderr stays empty (no progress, no
    run lines); in text mode off a terminal, each run's line still shows on stderr."""
    for key, value in environment(tmp_path).items():
        monkeypatch.setenv(key, value)
    (tmp_path / "train.py").write_text(TRAIN)
    code, out, err = run(
        ["fix", "--verify", "train.py", "--steps", "2", "--warmup", "1", "--budget", "300", "--output-format", "json"],
        capsys, tmp_path,
    )
    report = json.loads(out)
    assert code == 0 and report["applied"], report["verdict"]
    assert_report_contract(report)
    assert report["budget_s"] == 300 and report["wall_s"] > 0
    assert err == ""
    (tmp_path / "train.py").write_text(TRAIN)
    code, out, err = run(["fix", "--verify", "train.py", "--steps", "2", "--warmup", "1", "--no-color"], capsys, tmp_path)
    assert code == 0
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    assert [line.split(":")[0] for line in lines] == ["baseline", "patched", "baseline 2"], err
    assert all(" ok after 3 steps" in line for line in lines)
