"""Discovers the rules: every :class:`Rule` subclass in a module of ``advisor.rules``."""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from advisor.rule import Rule


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    package = importlib.import_module("advisor.rules")
    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"advisor.rules.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.code:
                if value.__module__ != module.__name__:
                    continue  # imported from elsewhere, counted where it is defined
                other = found.get(value.code)
                if other is not None and other is not value:
                    raise RuntimeError(f"rule code {value.code} defined twice: {other.__name__}, {value.__name__}")
                found[value.code] = value
    return tuple(found[code] for code in sorted(found))


def rule_by_code(code: str) -> type[Rule] | None:
    for rule in all_rules():
        if rule.code == code.upper() or rule.name == code:
            return rule
    return None


def select_codes(select: list[str] | None, ignore: list[str] | None) -> list[str]:
    """Codes enabled by ruff-style selectors: exact codes or prefixes (``ADV1``), ``ALL``."""
    codes = [rule.code for rule in all_rules()]
    chosen = [c for c in codes if _matches_any(c, select or ["ALL"])]
    return [c for c in chosen if not _matches_any(c, ignore or [])]


def _matches_any(code: str, selectors: list[str]) -> bool:
    return any(s.upper() == "ALL" or code.startswith(s.upper()) for s in selectors)


def unknown_selectors(selectors: list[str]) -> list[str]:
    codes = [rule.code for rule in all_rules()] + ["ADV000"]
    return [s for s in selectors if s.upper() != "ALL" and not any(c.startswith(s.upper()) for c in codes)]
