"""``[tool.advisor]`` in the nearest pyproject.toml; the command line wins over it."""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KNOWN_KEYS = {
    "select", "extend-select", "ignore", "extend-ignore", "per-file-ignores", "gpu", "exclude", "extend-exclude",
    "torch-version", "gpus",
}
# Test code is left out of folder walks (a file named on the command line is still checked):
# tests pin fp16, run on the CPU and build loaders to test them, on purpose; a fix there
# defeats what the test checks. ``exclude`` replaces this list (``exclude = []`` checks tests
# too), ``extend-exclude`` adds to it, as in ruff.
DEFAULT_EXCLUDE = ("tests", "test", "testing", "test_*.py", "*_test.py", "conftest.py")
_CAPABILITY = re.compile(r"^\d{1,2}\.\d$")
_TORCH_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
# A GPU advisor has no profile for, described in config: ``gpu = { name = "...",
# compute-capability = "8.6", memory-gb = 48 }``.
GPU_KEYS = {"name", "compute-capability", "memory-gb"}


class ConfigError(ValueError):
    pass


@dataclass
class Config:
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)  # ``ignore`` and ``extend-ignore`` together
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    gpu: str | dict | None = None
    torch_version: str | None = None  # the oldest torch the code must run on (as ruff's target-version)
    gpus: int | None = None  # GPUs the training runs on, for the multi-GPU rules
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    path: Path | None = None  # the pyproject.toml it came from

    @property
    def root(self) -> Path:
        return self.path.parent if self.path else Path.cwd()


def find_pyproject(start: Path) -> Path | None:
    start = Path(os.path.realpath(start))  # unlike Path.resolve, never raises on a symlink loop
    directory = start if start.is_dir() else start.parent
    for candidate in (directory, *directory.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            try:
                data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                return pyproject  # load_config reports it
            tool = data.get("tool")
            if not isinstance(tool, dict) or "advisor" in tool:
                return pyproject  # load_config reports a `tool` that is not a table
    return None


def load_config(path: Path | None) -> Config:
    if path is None:
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from error
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: `tool` must be a table")
    section = tool.get("advisor")
    if section is None:
        return Config(path=path)
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [tool.advisor] must be a table")
    unknown = set(section) - KNOWN_KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) in [tool.advisor]: {', '.join(sorted(unknown))}")

    def str_list(key: str) -> list[str] | None:
        value = section.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: [tool.advisor] {key} must be a list of strings")
        return value

    per_file = section.get("per-file-ignores", {})
    if not isinstance(per_file, dict) or not all(
        isinstance(v, list) and all(isinstance(c, str) for c in v) for v in per_file.values()
    ):
        raise ConfigError(f"{path}: [tool.advisor] per-file-ignores must map globs to lists of codes")
    gpu = section.get("gpu")
    if isinstance(gpu, dict):
        _check_gpu_table(path, gpu)
    elif gpu is not None and not isinstance(gpu, str):
        raise ConfigError(f"{path}: [tool.advisor] gpu must be a GPU's name or a table (name, compute-capability, memory-gb)")
    torch_version = section.get("torch-version")
    if torch_version is not None and (not isinstance(torch_version, str) or not _TORCH_VERSION.match(torch_version)):
        raise ConfigError(f'{path}: [tool.advisor] torch-version must be a version string like "2.1"')
    gpus = section.get("gpus")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise ConfigError(f"{path}: [tool.advisor] gpus must be a positive whole number")
    return Config(
        gpus=gpus,
        torch_version=torch_version,
        select=str_list("select"),
        extend_select=str_list("extend-select") or [],
        ignore=(str_list("ignore") or []) + (str_list("extend-ignore") or []),
        per_file_ignores=per_file,
        gpu=gpu,
        exclude=_or_default(str_list("exclude"), DEFAULT_EXCLUDE) + (str_list("extend-exclude") or []),
        path=path,
    )


def _check_gpu_table(path: Path, gpu: dict) -> None:
    where = f"{path}: [tool.advisor] gpu"
    unknown = set(gpu) - GPU_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s): {', '.join(sorted(unknown))} (known: {', '.join(sorted(GPU_KEYS))})")
    if not isinstance(gpu.get("name"), str) or not gpu["name"].strip():
        raise ConfigError(f"{where}: `name` must be a non-empty string")
    capability = gpu.get("compute-capability")
    if not isinstance(capability, str) or not _CAPABILITY.match(capability):
        raise ConfigError(f"{where}: `compute-capability` must be a string like \"8.6\"")
    memory = gpu.get("memory-gb")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, float)) or memory <= 0):
        raise ConfigError(f"{where}: `memory-gb` must be a positive number")



def _or_default(value: list[str] | None, default: tuple[str, ...]) -> list[str]:
    return list(default) if value is None else value
