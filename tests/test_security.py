"""`advisor check` and `advisor fix` read code; they never run it, import it, or reach the network.

tests/test_packaging.py already blocks torch and runs `check`; these go further: a project
whose every file (and a local `torch.py`) leaves a marker when executed is checked, fixed
and diffed from inside the project, and the framework modules and sockets are watched
while the CLI runs with torch importable.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
HEAVY = ("torch", "transformers", "accelerate", "lightning", "pytorch_lightning", "bitsandbytes", "trl")


def marker_code(markers: Path, name: str) -> str:
    return f"import pathlib; pathlib.Path({str(markers / name)!r}).write_text('executed')\n"


def test_analyzed_project_is_never_executed_nor_imported(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    train = marker_code(markers, "train.py") + (FIXTURES / "plain_pytorch.py").read_text()
    (project / "train.py").write_text(train)
    # Modules that advisor would pick up from the project if it ever imported by name from there.
    for name in ("torch", "transformers", "accelerate", "lightning", "__init__", "conftest", "setup", "rules"):
        (project / f"{name}.py").write_text(marker_code(markers, name) + "import torch\nx = torch.zeros(1).cuda()\n")
    console_script = Path(sys.executable).parent / "advisor"
    runs = [
        [str(console_script), "check", "--no-cache", "."],
        [sys.executable, "-m", "advisor", "check", "--no-cache", "."],  # the project folder is sys.path[0]
        [sys.executable, "-m", "advisor", "fix", "--diff", "--unsafe-fixes", "."],
        [str(console_script), "fix", "--unsafe-fixes", "-j", "2", "."],
    ]
    outputs = []
    for command in runs:
        completed = subprocess.run([*command, "--gpu", "A100"], cwd=project, capture_output=True, text=True, timeout=300)
        assert completed.returncode in (0, 1), completed.stderr
        outputs.append(completed.stdout)
    assert sorted(p.name for p in markers.iterdir()) == []
    assert "train.py:68:20: ADV101" in outputs[0] and outputs[0] == outputs[1]  # the rules ran (line 67 of plain_pytorch.py, after the marker)
    assert "+import pathlib; pathlib.Path(" not in outputs[2] and "fused=True" in outputs[2]
    fixed = (project / "train.py").read_text()
    assert fixed != train and fixed.startswith(marker_code(markers, "train.py"))


WATCH = textwrap.dedent(
    """\
    import json, socket, sys
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(repr(args[:2]))
        raise OSError("network access from advisor")

    socket.socket.connect = socket.socket.connect_ex = refuse
    socket.create_connection = socket.getaddrinfo = refuse
    from advisor.cli import main
    codes = [main(["check", "--no-cache", "-j", "1", "."]), main(["fix", "--unsafe-fixes", "-j", "1", "."])]
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
    print(json.dumps({{"codes": codes, "heavy": heavy, "network": attempts}}), file=sys.stderr)
    """
)


def test_check_and_fix_import_no_framework_and_open_no_connection(tmp_path):
    """With torch and transformers importable, `check` and `fix` leave them unimported and
    touch no socket, on scripts that exercise PyTorch, Trainer, Accelerate and Lightning rules."""
    for name in ("plain_pytorch.py", "hf_trainer.py", "accelerate_loop.py", "lightning_module.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    completed = subprocess.run(
        [sys.executable, "-c", WATCH.format(heavy=set(HEAVY))], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    report = json.loads(completed.stderr.strip().splitlines()[-1])
    assert report["codes"][0] == 1 and report["codes"][1] in (0, 1), completed.stdout
    assert report["heavy"] == []
    assert report["network"] == []
    assert "Fixed" in completed.stdout and " 0 files" not in completed.stdout
