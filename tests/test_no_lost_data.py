"""`advisor fix` never loses a byte: atomic writes, interrupted runs, concurrent runs.

A user's file ends every run holding either its old bytes or its fixed bytes, never a mix,
never a leftover temporary file next to it, and keeps its mode, its owner and its links.
"""
from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.fixer import FileChanged, write_atomic

ROOT = Path(__file__).resolve().parent.parent
PLAIN = (ROOT / "fixtures" / "plain_pytorch.py").read_bytes()
GPU = ["--gpu", "A100"]  # the same target on any machine, whatever GPU it has


def temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.startswith(".advisor-") and p.name.endswith(".tmp")]


def fixed_bytes(tmp_path: Path, capsys, *flags: str) -> bytes:
    """What `advisor fix` makes of plain_pytorch.py, computed on a copy of its own."""
    sample = tmp_path / "sample" / "train.py"
    sample.parent.mkdir()
    sample.write_bytes(PLAIN)
    assert main(["fix", *GPU, *flags, str(sample)]) in (0, 1)
    capsys.readouterr()
    new = sample.read_bytes()
    assert new != PLAIN
    return new


def make_tree(folder: Path, count: int) -> list[Path]:
    folder.mkdir(exist_ok=True)
    paths = [folder / f"train_{i:03d}.py" for i in range(count)]
    for path in paths:
        path.write_bytes(PLAIN)
    return paths


def advisor_process(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "advisor", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def assert_old_or_new(paths: list[Path], old: bytes, new: bytes) -> tuple[int, int]:
    counts = [0, 0]
    for path in paths:
        data = path.read_bytes()
        assert data in (old, new), f"{path.name} holds neither its old nor its fixed bytes"
        counts[data == new] += 1
    return counts[0], counts[1]


# -- write_atomic --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755, 0o2775])
def test_atomic_write_keeps_mode_and_leaves_no_temporary_file(tmp_path, mode):
    path = tmp_path / "train.py"
    path.write_bytes(b"old\n")
    os.chmod(path, mode)
    write_atomic(str(path), b"new\n")
    assert path.read_bytes() == b"new\n"
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert temp_files(tmp_path) == []


def test_failed_write_leaves_the_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "train.py"
    path.write_bytes(b"old\n")

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(str(path), b"new\n")
    assert path.read_bytes() == b"old\n"
    assert temp_files(tmp_path) == []


def test_ctrl_c_during_a_write_waits_for_the_write(tmp_path, monkeypatch):
    """SIGINT in the middle of a write is delivered once the new file is in place."""
    path = tmp_path / "train.py"
    path.write_bytes(b"old\n")
    real_fsync = os.fsync

    def interrupted_fsync(fd):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler would run here if the signal were not held
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", interrupted_fsync)
    # A test runner started in the background (`cmd &`, nohup) ignores SIGINT: take Ctrl-C as a
    # terminal's process does, and put the runner's own disposition back afterwards.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            write_atomic(str(path), b"new\n")
        assert path.read_bytes() == b"new\n"
        assert temp_files(tmp_path) == []
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_file_edited_while_being_fixed_is_left_alone(tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes(b"edited by the user\n")
    with pytest.raises(FileChanged):
        write_atomic(str(path), b"fixed\n", expected=b"what advisor read\n")
    assert path.read_bytes() == b"edited by the user\n"
    write_atomic(str(path), b"edited by the user\n", expected=b"what advisor read\n")  # same bytes: nothing to do
    assert temp_files(tmp_path) == []


def test_read_only_file_is_refused_not_replaced(tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes(b"old\n")
    os.chmod(path, 0o444)
    with pytest.raises(PermissionError, match="read-only"):
        write_atomic(str(path), b"new\n")
    assert path.read_bytes() == b"old\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o444


def test_fix_writes_through_a_symlink_and_keeps_it(tmp_path, capsys, monkeypatch):
    """As ruff does, a link is fixed through: the target gets the fixes, the link stays a link."""
    new = fixed_bytes(tmp_path, capsys)
    project = tmp_path / "project"
    (project / "real").mkdir(parents=True)
    target = project / "real" / "train.py"
    target.write_bytes(PLAIN)
    os.chmod(target, 0o640)
    link = project / "link.py"
    link.symlink_to(Path("real") / "train.py")
    monkeypatch.chdir(project)
    assert main(["fix", *GPU, "link.py"]) in (0, 1)
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "train.py")
    assert target.read_bytes() == new
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert temp_files(project) == []
    # A folder holding both the link and its target fixes the file once and keeps the link.
    target.write_bytes(PLAIN)
    capsys.readouterr()
    assert main(["fix", *GPU, "."]) in (0, 1)
    assert "in 1 file;" in capsys.readouterr().out
    assert link.is_symlink() and target.read_bytes() == new


# -- interrupted and concurrent runs ------------------------------------------------------
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_interrupted_fix_leaves_every_file_old_or_new(tmp_path, capsys, jobs):
    """SIGINT or SIGTERM at a random moment after the first file is written: every file is
    old or fixed, no temporary file remains, and advisor says it was interrupted."""
    new = fixed_bytes(tmp_path, capsys)
    rng = random.Random(int(jobs))
    for signum in (signal.SIGINT, signal.SIGTERM):
        paths = make_tree(tmp_path / "tree", 30)
        process = advisor_process("fix", *GPU, "-j", jobs, "tree", cwd=tmp_path)
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            if any(p.read_bytes() != PLAIN for p in paths):
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.3))
        still_running = process.poll() is None
        process.send_signal(signum)
        out, err = process.communicate(timeout=120)
        assert "Traceback" not in err, err
        if still_running and process.returncode not in (0, 1):  # it may have just finished
            assert process.returncode == 128 + signum, (process.returncode, err)
            assert "advisor: interrupted" in err or "advisor: terminated" in err
        assert_old_or_new(paths, PLAIN, new)
        assert temp_files(tmp_path) == []


@pytest.mark.parametrize("after_tokens", [1, 40, 400, 1500])
def test_an_interrupt_while_positions_are_computed_propagates_unchanged(monkeypatch, after_tokens):
    """Ctrl-C or SIGTERM may land inside the codegen that computes positions. The interrupt
    must reach the CLI as itself: a bookkeeping error raised while unwinding would replace it
    and print a traceback (CI caught exactly that, with SIGTERM, once)."""
    from advisor import positions
    from advisor.engine import parse
    from tests.helpers import target_for

    ctx = parse("train.py", PLAIN, target_for("A100"))
    add_token = positions._OffsetRecordingState.add_token
    count = [0]

    def interrupted(self, value):
        count[0] += 1
        if count[0] == after_tokens:
            raise KeyboardInterrupt
        add_token(self, value)

    monkeypatch.setattr(positions._OffsetRecordingState, "add_token", interrupted)
    with pytest.raises(KeyboardInterrupt) as raised:
        ctx.position(ctx.module)  # the whole file's code is generated
    assert raised.value.__context__ is None


def test_concurrent_fix_runs_never_corrupt_a_file(tmp_path, capsys):
    new = fixed_bytes(tmp_path, capsys)
    paths = make_tree(tmp_path / "tree", 10)
    runs = [advisor_process("fix", *GPU, "-j", "1", "tree", cwd=tmp_path) for _ in range(3)]
    outcomes = [(*run.communicate(timeout=300), run.returncode) for run in runs]
    for out, err, returncode in outcomes:
        assert returncode in (0, 1), err
        assert "Traceback" not in err and "changed on disk" not in out
    assert assert_old_or_new(paths, PLAIN, new) == (0, len(paths))
    for path in paths:
        compile(path.read_bytes(), str(path), "exec")
    assert temp_files(tmp_path) == []
