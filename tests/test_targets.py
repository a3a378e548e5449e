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
