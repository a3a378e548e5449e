"""Shared helpers for tests: lint or fix a snippet in memory, as the CLI would."""
from __future__ import annotations

import textwrap

from advisor.engine import Settings, check_file
from advisor.fixer import fix_source
from advisor.registry import all_rules
from advisor.targets import ASSUMED, Target, resolve_target


def target_for(gpu: str | None) -> Target:
    return ASSUMED if gpu is None else resolve_target(gpu, None, detect=False)


def settings(codes=None, gpu: str | None = None) -> Settings:
    if codes is None:
        codes = [r.code for r in all_rules()]
    return Settings(codes=frozenset(codes), target=target_for(gpu))


def lint(source: str, codes=None, gpu: str | None = None, path: str = "snippet.py"):
    source = textwrap.dedent(source)
    result = check_file(path, settings(codes, gpu), data=source.encode())
    assert not result.errors, result.errors
    return result.diagnostics


def fix(
    source: str, codes=None, gpu: str | None = None, unsafe: bool = True, path: str = "snippet.py", measured: bool = False
):
    """As ``advisor fix`` (``--unsafe-fixes`` by default); ``measured``: as ``fix --verify``, which
    also applies the fixes whose gain it measures."""
    source = textwrap.dedent(source)
    return fix_source(path, source.encode(), settings(codes, gpu), unsafe, measured=measured)
