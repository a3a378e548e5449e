"""The core install stays light: no torch, and the rules ship inside the advisor namespace."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "accelerate", "bitsandbytes")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (found,) = out.glob("advisor-*.whl")
    return found


def test_core_requirements_pull_no_torch(wheel):
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith("METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    core = [l for l in lines if l.startswith("Requires-Dist:") and "extra ==" not in l]
    assert core, "no core requirements found"
    for line in core:
        name = line.split(":", 1)[1].strip().split()[0].split(";")[0]
        assert not name.lower().startswith(HEAVY), f"core install pulls {name}"
    assert any("libcst" in l for l in core) and any("rich" in l for l in core) and any("nvidia-ml-py" in l for l in core)


def test_rules_ship_under_advisor_namespace(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "advisor/rules/__init__.py" in names
    assert "advisor/rules/data_loading.py" in names
    assert not [n for n in names if n.startswith("rules/")], "a top-level `rules` package would land in site-packages"


def test_check_runs_without_torch_importable(tmp_path):
    """`advisor check` must not import torch (static means static): block it and run."""
    script = tmp_path / "train.py"
    script.write_text("import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(d)\nm = m.cuda()\n")
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    for name in HEAVY:
        (blocker / f"{name}.py").write_text(f"raise ImportError('advisor must not import {name}')\n")
    env = {"PYTHONPATH": str(blocker), "PATH": "/usr/bin:/bin"}
    completed = subprocess.run(
        [sys.executable, "-m", "advisor", "check", str(script), "--format", "json"],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert completed.returncode == 1, completed.stderr
    assert "ADV101" in completed.stdout


def test_analyzed_code_is_never_executed(tmp_path):
    marker = tmp_path / "executed"
    script = tmp_path / "train.py"
    script.write_text(f"import torch\nopen({str(marker)!r}, 'w').write('ran')\nx = torch.zeros(1).cuda()\n")
    subprocess.run([sys.executable, "-m", "advisor", "check", str(script)], capture_output=True, cwd=tmp_path)
    subprocess.run([sys.executable, "-m", "advisor", "fix", "--unsafe-fixes", str(script)], capture_output=True, cwd=tmp_path)
    assert not marker.exists()


PLAIN_CHECKOUT_IMPORT = """
import sys
# As on a machine where advisor was never installed: no editable-install finder, nothing cached.
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "") + repr(f)]
for name in [n for n in sys.modules if n == "advisor" or n.startswith("advisor.")]:
    del sys.modules[name]
sys.path.insert(0, sys.argv[1])
import advisor.rules.batch_size
import advisor.engine
print(advisor.rules.batch_size.__file__)
print(len(advisor.engine.rule_instances()))
"""


def test_plain_checkout_imports_the_rules(tmp_path):
    """bench/verify runs from a checkout on PYTHONPATH where advisor is not installed: the rules
    beside the package must import as ``advisor.rules`` there too."""
    checkout = tmp_path / "checkout"
    archive = subprocess.run(["git", "-C", str(ROOT), "ls-files", "advisor", "rules"], capture_output=True, text=True, check=True)
    for name in archive.stdout.split():
        target = checkout / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / name).read_bytes())
    completed = subprocess.run(
        [sys.executable, "-c", PLAIN_CHECKOUT_IMPORT, str(checkout)], capture_output=True, text=True, cwd=tmp_path
    )
    assert completed.returncode == 0, completed.stderr
    module_file, rule_count = completed.stdout.split()
    assert Path(module_file).is_relative_to(checkout / "rules")
    assert int(rule_count) > 30
