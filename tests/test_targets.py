from __future__ import annotations

import pytest

from advisor.targets import ASSUMED, PROFILES, UnknownGPU, lookup, resolve_target


@pytest.mark.parametrize(
    "name,expected",
    [
        ("a100", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("A100-80GB", "A100-80GB"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA GeForce RTX 3090", "RTX3090"),
        ("rtx4090", "RTX4090"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("h200", "H200"),
        ("NVIDIA B200", "B200"),
    ],
)
def test_lookup(name, expected):
    assert lookup(name).name == expected


def test_capabilities():
    assert not PROFILES["V100"].bf16 and not PROFILES["T4"].bf16
    assert PROFILES["A10G"].bf16 and PROFILES["H100"].tf32
    assert PROFILES["H200"].memory_gb == 141
    assert ASSUMED.bf16 and ASSUMED.memory_gb is None


def test_precedence():
    assert resolve_target("h100", "v100", detect=False).source == "--gpu"
    target = resolve_target(None, "v100", detect=False)
    assert (target.name, target.source) == ("V100", "[tool.advisor] gpu")
    assert resolve_target(None, None, detect=False) is ASSUMED


def test_unknown_name():
    with pytest.raises(UnknownGPU, match="potato"):
        resolve_target("potato", None, detect=False)


def test_detection_without_a_gpu_falls_back():
    # This machine has no NVIDIA driver: NVML fails and the assumed target is used.
    target = resolve_target(None, None, detect=True)
    assert target is ASSUMED or target.source == "local GPU (NVML)"


def test_gpu_count_precedence_and_header(tmp_path, capsys):
    from advisor.cli import main
    from advisor.config import ConfigError, load_config

    assert resolve_target("H100", None, detect=False).gpus is None
    assert resolve_target("H100", None, detect=False, config_gpus=4).gpus == 4
    both = resolve_target("H100", None, detect=False, cli_gpus=8, config_gpus=4)
    assert (both.gpus, both.gpus_source) == (8, "--gpus")
    assert both.describe().endswith("; 8 GPUs, from --gpus")
    (tmp_path / "pyproject.toml").write_text("[tool.advisor]\ngpus = 2\n")
    (tmp_path / "train.py").write_text("import torch\n")
    assert load_config(tmp_path / "pyproject.toml").gpus == 2
    main(["check", str(tmp_path / "train.py"), "--config", str(tmp_path / "pyproject.toml"), "--gpu", "A100"])
    assert "2 GPUs, from [tool.advisor] gpus" in capsys.readouterr().out
    (tmp_path / "pyproject.toml").write_text("[tool.advisor]\ngpus = 0\n")
    with pytest.raises(ConfigError, match="gpus must be a positive whole number"):
        load_config(tmp_path / "pyproject.toml")
