"""The GPU a script is checked against.

Precedence: ``--gpu NAME`` > ``[tool.advisor] gpu`` > the local GPU through NVML >
an assumed Ampere-or-newer GPU. Every report says which target was used and why.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Target:
    name: str
    compute_capability: tuple[int, int]
    memory_gb: float | None
    bf16: bool
    tf32: bool
    source: str = "assumed"
    # Tensor-core friendly multiple for fp16 batch sizes and dims (guide: "Batch size choice").
    fp16_multiple: int = 8
    # Dense (no sparsity) tensor-core peak in TFLOPS for bf16, fp16 where the GPU has no bf16
    # (V100, T4): the denominator of model FLOP utilisation in bench/verify. None: not published.
    bf16_tflops: float | None = None
    # The oldest torch the project must run on (``[tool.advisor] torch-version``); None: its
    # declared requirements decide, else a current release is assumed.
    torch_version: str | None = None
    # How many GPUs the training runs on (``--gpus``, ``[tool.advisor] gpus``, else NVML's count
    # of the local ones); None: not known, and rules that need it assume what is safe.
    gpus: int | None = None
    gpus_source: str | None = None

    @property
    def ampere_or_newer(self) -> bool:
        return self.compute_capability >= (8, 0)

    def describe(self) -> str:
        """One short line: what the checks assume, and where that came from."""
        count = f"; {self.gpus} GPU{'s' if self.gpus != 1 else ''}, from {self.gpus_source}" if self.gpus else ""
        if self.source == ASSUMED.source:
            return "Ampere or newer, assumed (no --gpu, no [tool.advisor] gpu, no local GPU)" + count
        memory = f", {self.memory_gb:g} GB" if self.memory_gb else ""
        cc = ".".join(map(str, self.compute_capability))
        return f"{self.name} (sm {cc}{memory}{', bf16' if self.bf16 else ', no bf16'}), from {self.source}" + count


def _profile(name: str, cc: tuple[int, int], memory: float | None, multiple: int = 8, tflops: float | None = None) -> Target:
    return Target(
        name=name, compute_capability=cc, memory_gb=memory, bf16=cc >= (8, 0), tf32=cc >= (8, 0), fp16_multiple=multiple,
        bf16_tflops=tflops,
    )


# Peaks from NVIDIA's datasheets and architecture whitepapers, halved where a sheet quotes
# sparsity: V100 SXM2 (fp16), T4 (fp16), A10, A100, L4, GA102 (RTX 3090, fp32 accumulate),
# Ada (RTX 4090, fp32 accumulate), H100 SXM5, H200 SXM, HGX B200. NVIDIA publishes no A10G sheet.
# The workstation and data-centre cards people rent (A6000, A40, L40S, ...) carry their compute
# capability and memory, which is what the rules read; their peaks are left out (None) rather
# than guessed. AMD's MI300X is not here: the rules speak of CUDA, cuDNN and TF32 as NVIDIA has them.
PROFILES: dict[str, Target] = {
    t.name: t
    for t in (
        _profile("V100", (7, 0), 32, tflops=125),
        _profile("T4", (7, 5), 16, tflops=65),
        _profile("A10", (8, 6), 24, tflops=125),
        _profile("A10G", (8, 6), 24),
        _profile("A4000", (8, 6), 16),
        _profile("A5000", (8, 6), 24),
        _profile("A6000", (8, 6), 48),
        _profile("A40", (8, 6), 48),
        _profile("A100-40GB", (8, 0), 40, 64, tflops=312),
        _profile("A100-80GB", (8, 0), 80, 64, tflops=312),
        _profile("L4", (8, 9), 24, tflops=121),
        _profile("L40", (8, 9), 48),
        _profile("L40S", (8, 9), 48),
        _profile("RTX6000-Ada", (8, 9), 48),
        _profile("RTX3080", (8, 6), 10),
        _profile("RTX3090", (8, 6), 24, tflops=71),
        _profile("RTX4080", (8, 9), 16),
        _profile("RTX4090", (8, 9), 24, tflops=165),
        _profile("RTX5090", (12, 0), 32),
        _profile("H100", (9, 0), 80, 64, tflops=989),
        _profile("H200", (9, 0), 141, 64, tflops=989),
        _profile("GH200", (9, 0), 96, 64),
        _profile("B100", (10, 0), 192, 64),
        _profile("B200", (10, 0), 180, 64, tflops=2250),
    )
}

ASSUMED = Target(
    name="Ampere or newer (assumed)",
    compute_capability=(8, 0),
    memory_gb=None,
    bf16=True,
    tf32=True,
    source="no --gpu, no [tool.advisor] gpu, no local GPU found",
)


def _normalise(name: str) -> str:
    """Lower case, separators as single spaces: ``NVIDIA A100-SXM4-40GB`` -> ``nvidia a100 sxm4 40gb``."""
    return re.sub(r"[-_\s]+", " ", name.lower()).strip()


def lookup(name: str, memory_gb: float | None = None) -> Target | None:
    """A profile from a user-given or NVML-reported name (``a100``, ``NVIDIA A100-SXM4-40GB``, ``rtx 4090``)."""
    key = _normalise(name)
    if "a100" in key:
        forty = re.search(r"40 ?gb", key) or (memory_gb is not None and memory_gb < 60)
        return PROFILES["A100-40GB" if forty else "A100-80GB"]
    if re.search(r"(rtx ?)?6000 ?ada", key):  # "NVIDIA RTX 6000 Ada Generation"
        return PROFILES["RTX6000-Ada"]
    profiles = ("gh200", "h200", "h100", "b200", "b100", "v100", "t4", "l40s", "l40", "l4", "a10g", "a10",
                "a4000", "a5000", "a6000", "a40")
    for profile in profiles:  # (?<!...) keeps "gh200" from reading as "h200", "a40" from "a4000"
        if re.search(rf"(?<![a-z0-9]){profile}(?![0-9a-z])", key):
            return PROFILES[profile.upper()]
    for profile in ("3080", "3090", "4080", "4090", "5090"):
        if re.search(rf"(?<![0-9]){profile}(?![0-9])", key):
            return PROFILES[f"RTX{profile}"]
    return None


# Colab saves the runtime a notebook last ran on in its metadata: ``"colab": {"gpuType": "T4"}``.
_COLAB_GPU = re.compile(r'(?<!\\)"gpuType"\s*:\s*"([^"\\]{1,40})"')


def notebook_target(text: str, target: Target) -> Target:
    """The GPU a notebook says it runs on (nanoVLM's Colab notebook: a T4, no bf16), where the
    target is only assumed; the given target otherwise (``--gpu``, config and NVML win)."""
    if target.source != ASSUMED.source or "gpuType" not in text:
        return target
    saved = _COLAB_GPU.search(text)
    profile = lookup(saved.group(1)) if saved else None
    if profile is None:
        return target
    return replace(
        profile,
        source=f"the notebook's saved Colab runtime ({saved.group(1)})",
        torch_version=target.torch_version,
        gpus=target.gpus,
        gpus_source=target.gpus_source,
    )


def described(table: dict, source: str) -> Target:
    """A GPU the user describes in config (``name``, ``compute-capability``, ``memory-gb``)."""
    major, minor = (int(part) for part in table["compute-capability"].split("."))
    memory = table.get("memory-gb")
    return Target(
        name=table["name"].strip(),
        compute_capability=(major, minor),
        memory_gb=float(memory) if memory is not None else None,
        bf16=(major, minor) >= (8, 0),
        tf32=(major, minor) >= (8, 0),
        source=source,
    )


def detect_local() -> Target | None:
    """The first local NVIDIA GPU through NVML, or None (no driver, no GPU, no pynvml)."""
    try:
        import pynvml  # nvidia-ml-py
    except Exception:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            return None
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        raw_name = pynvml.nvmlDeviceGetName(handle)
        name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
        memory_gb = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 1e9
        try:
            cc = tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
        except Exception:
            cc = None
        count = int(pynvml.nvmlDeviceGetCount())
        profile = lookup(name, memory_gb)
        if profile is not None:
            return replace(
                profile, name=name, memory_gb=round(memory_gb, 1), source="local GPU (NVML)", gpus=count,
                gpus_source="local GPUs (NVML)",
            )
        if cc is None:
            return None
        return Target(
            name=name,
            compute_capability=(int(cc[0]), int(cc[1])),
            memory_gb=round(memory_gb, 1),
            bf16=cc >= (8, 0),
            tf32=cc >= (8, 0),
            source="local GPU (NVML)",
            gpus=count,
            gpus_source="local GPUs (NVML)",
        )
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


class UnknownGPU(ValueError):
    pass


def resolve_target(
    cli_gpu: str | None,
    config_gpu: "str | dict | None",
    detect: bool = True,
    cli_gpus: int | None = None,
    config_gpus: int | None = None,
) -> Target:
    """The target GPU and how many of them: ``--gpus`` > ``[tool.advisor] gpus`` > NVML's count
    of the local GPUs (when the local GPU is the target) > unknown."""
    target = _resolve_gpu(cli_gpu, config_gpu, detect)
    if cli_gpus is not None:
        return replace(target, gpus=cli_gpus, gpus_source="--gpus")
    if config_gpus is not None:
        return replace(target, gpus=config_gpus, gpus_source="[tool.advisor] gpus")
    return target


def _resolve_gpu(cli_gpu: str | None, config_gpu: "str | dict | None", detect: bool = True) -> Target:
    if not cli_gpu and isinstance(config_gpu, dict):
        return described(config_gpu, "[tool.advisor] gpu")
    for name, source in ((cli_gpu, "--gpu"), (config_gpu, "[tool.advisor] gpu")):
        if name and isinstance(name, str):
            profile = lookup(name)
            if profile is None:
                known = ", ".join(PROFILES)
                raise UnknownGPU(f"unknown GPU {name!r} (from {source}); known: {known}")
            return replace(profile, source=source)
    if detect:
        local = detect_local()
        if local is not None:
            return local
    return ASSUMED
