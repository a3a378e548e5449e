"""Generates docs/rules.md from the rule classes: ``python -m advisor.docs > docs/rules.md``."""
from __future__ import annotations

from advisor.registry import all_rules


def rules_markdown() -> str:
    rules = all_rules()
    lines = [
        "# advisor rules",
        "",
        "Generated from the rule classes by `python -m advisor.docs > docs/rules.md`; a test fails when it is stale.",
        "",
        "| Code | Name | Fix | Guide section | Summary |",
        "|---|---|---|---|---|",
    ]
    for rule in rules:
        lines.append(
            f"| [{rule.code}](#{rule.code.lower()}-{rule.name}) | `{rule.name}` | {rule.fix_applicability.value} "
            f"| {rule.guide} | {rule.summary} |"
        )
    lines.append("")
    for rule in rules:
        lines.append(rule.documentation().replace(f"# {rule.code}", f"## {rule.code}", 1).replace("\n## ", "\n### "))
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.stdout.write(rules_markdown())
