"""The benchmark scripts (bench/verify/) and their `advisor fix --unsafe-fixes` versions train.

The benchmark is only as good as its scripts: each must run as written and after advisor
rewrote it, or the GPU table would measure a crash. Here each runs on the CPU with `--tiny`
for two optimizer steps, like tests/test_scripts_run.py does for the fixtures, and each
must still show the problems it was written to show.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import settings
from test_scripts_run import TIMEOUT_S, _environment

from advisor.engine import check_file
from advisor.fixer import fix_source

BENCH = Path(__file__).resolve().parent.parent / "bench" / "verify"

# What each script needs, the arguments of a two-step CPU run, and the findings it was
# written to show (a subset: rule refinements may add more).
SCRIPTS = {
    # No ADV101 / ADV102: the data set is an in-memory TensorDataset, indexed one sample at a
    # time (ADV105; pinning and workers do not pay there).
    "mlp_synthetic": (("torch",), [], {"ADV105", "ADV203", "ADV601", "ADV602", "ADV701"}),
    "cnn_synthetic": (("torch",), [], {"ADV101", "ADV102", "ADV203", "ADV601", "ADV602", "ADV605", "ADV701"}),
    "gpt2_plain_loop": (
        ("torch", "transformers"),
        [],
        # No ADV101 / ADV102: its __getitem__ only indexes tokens it holds in memory (ADV105, like mlp_synthetic).
        {"ADV105", "ADV201", "ADV204", "ADV403", "ADV601", "ADV602", "ADV701"},
    ),
    # transformers refuses bf16 (the fixed version) without a GPU unless told to use the CPU.
    "gpt2_trainer": (
        ("torch", "transformers", "accelerate"),
        ["--use-cpu"],
        {"ADV104", "ADV201", "ADV401", "ADV403", "ADV601", "ADV602"},
    ),
    # No ADV101 / ADV102: SyntheticSentences.__getitem__ only indexes tensors it holds (ADV105, like mlp_synthetic).
    "accelerate_loop": (("torch", "transformers", "accelerate"), [], {"ADV105", "ADV201", "ADV601", "ADV701"}),
}


def test_every_bench_script_is_tested():
    assert {p.stem for p in BENCH.glob("*.py")} - {"run"} == set(SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_bench_script_shows_its_problems(name):
    path = BENCH / f"{name}.py"
    result = check_file(str(path), settings(), data=path.read_bytes())
    assert not result.errors
    assert SCRIPTS[name][2] <= {d.code for d in result.diagnostics}


@pytest.mark.parametrize("version", ["original", "fixed"])
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_bench_script_trains(name, version, tmp_path):
    modules, extra_args, _ = SCRIPTS[name]
    for module in modules:
        pytest.importorskip(module)
    source = (BENCH / f"{name}.py").read_bytes()
    if version == "fixed":
        fixed = fix_source(f"{name}.py", source, settings(), unsafe=True)
        assert not fixed.errors and not fixed.dropped
        assert fixed.fixed != source
        source = fixed.fixed
    script = tmp_path / f"{name}.py"
    script.write_bytes(source)
    env = _environment(tmp_path)
    # torch.compile (a fix) works on the CPU but compiling takes most of a smoke run's time;
    # tests/test_scripts_run.py already runs compiled fixtures.
    env["TORCH_COMPILE_DISABLE"] = "1"
    completed = subprocess.run(
        [sys.executable, str(script), "--tiny", "--max-steps", "2", *extra_args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert completed.returncode == 0, f"{version} {name} failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-5000:]}"


def _load_runner():
    spec = importlib.util.spec_from_file_location("bench_verify_run", BENCH / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(steps_per_second: float, peak_bytes: int) -> dict:
    return {
        "status": "ok", "steps": 30, "steps_per_second": steps_per_second, "samples_per_second": None,
        "step_time_ms": {"median": 1000 / steps_per_second, "p90": 1100 / steps_per_second},
        "peak_memory_bytes": peak_bytes, "losses": [10.9, 8.2],
    }


def test_runner_renders_a_gpu_report_into_its_block(tmp_path):
    runner = _load_runner()
    record = {
        "date": "2026-01-01", "steps": 30, "warmup": 10, "versions": {},
        "meta": {"parameters": 124_000_000, "tokens_per_sample": 1024, "samples_per_step": 32},
        "report": {
            "device": "NVIDIA H100 80GB HBM3", "script": "gpt2_plain_loop.py", "fixes": ["ADV201", "ADV601"],
            "baseline": _run(2.0, 20 * 2**30), "patched": _run(3.0, 16 * 2**30), "speedup": 1.5,
            "loss_parity": True, "applied": True, "verdict": "applied",
            "ablation": [{"code": "ADV201", "speedup": 1.0, "loss_parity": True},
                         {"code": "ADV601", "speedup": 1.1, "loss_parity": True}],
        },
    }
    block, section = runner.render({"gpt2_plain_loop": record})
    assert section == "gpu"
    # 6 x 124M parameters x (2 steps/s x 32 samples x 1024 tokens) / 989 TFLOPS (H100 SXM, dense bf16)
    assert f"{100 * 6 * 124e6 * 2 * 32 * 1024 / 989e12:.1f}% →" in block
    assert "| **1.50x** | ADV201 1.00x, ADV601 1.10x |" in block
    out = tmp_path / "benchmarks.md"
    out.write_text("intro\n<!-- bench-results:gpu start -->\npending\n<!-- bench-results:gpu end -->\n"
                   "<!-- bench-results:cpu start -->\ncpu table\n<!-- bench-results:cpu end -->\n")
    runner.write_markdown(out, block, section)
    text = out.read_text()
    assert "pending" not in text and "cpu table" in text and text.startswith("intro\n") and block in text
