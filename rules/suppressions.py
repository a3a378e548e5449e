"""ADV001: suppression comments that suppress nothing (ruff's RUF100).

A ``# noqa: ADV101`` outlives the code it was written for: the loader got pinned, the line
moved, the rule learned to stay silent there. Left in place, it hides the next real finding
on that line. This rule reports advisor codes in ``# noqa`` / ``# advisor: ignore[...]``
comments that are not advisor's, and enabled ones that suppressed nothing on their line.
Whether a code suppressed something is known only after every other rule ran: the engine
asks :func:`unused_suppressions` then (``advisor.engine.run_rules``).
"""
from __future__ import annotations

import re
from typing import Iterable, Iterator

import libcst as cst

from advisor.context import FileContext
from advisor.noqa import named_codes
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid

_MENTION = re.compile(r"#\s*(noqa:|advisor:\s*ignore\[)", re.I)  # a text test before the comments are walked


class UnusedNoqa(Rule):
    code = "ADV001"
    name = "unused-noqa"
    summary = "A `# noqa` names an advisor code that does not exist or suppresses nothing on its line."
    guide = "Suppression comments (ruff's RUF100)"
    fix_applicability = Applicability.SAFE
    why = """
        A suppression comment is a promise that a finding on this line is known and accepted.
        Once the finding is gone (the code was fixed, the line moved, the rule stopped
        firing there) the comment promises nothing and silently hides the next finding of
        that code on the line; a code advisor does not have (`ADV999`, a typo) never
        suppressed anything. ruff's RUF100 does the same for its codes.
    """
    example = """
        loader = DataLoader(ds, batch_size=64, pin_memory=True)  # noqa: ADV101
        model = Net().cuda()  # noqa: ADV10l
    """
    use_instead = """
        loader = DataLoader(ds, batch_size=64, pin_memory=True)
        model = Net().cuda()
    """
    silent_when = """
        - the code is not advisor's (`# noqa: E501` is another linter's business);
        - the code is not enabled in this run (`--select ADV1` says nothing of `ADV601`);
        - a bare `# noqa` or `# advisor: ignore` (every rule on the line) or a file-level
          `# advisor: noqa`.

        The fix removes the unused codes from a comment that names others too; a comment
        left naming nothing is reported without a fix (delete it).
    """
    valid = [
        Valid(
            """
            import torch
            x = compute()  # noqa: E501
            y = compute()  # noqa
            """,
            note="other linters' codes, and a bare noqa",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            x = compute()  # noqa: ADV999, E501
            """,
            fixed="""
            import torch
            x = compute()  # noqa: E501
            """,
            note="ADV999 is not a code of advisor's",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        """Codes that are not advisor's; the unused ones come from :func:`unused_suppressions`."""
        from advisor.registry import all_rules

        known = {rule.code for rule in all_rules()} | {"ADV000"}
        for comment, codes in _suppression_comments(ctx):
            unknown = [c for c in codes if c.upper().startswith("ADV") and c.upper() not in known]
            if unknown:
                yield self._finding(comment, codes, unknown, "not a code of advisor's")

    def _finding(self, comment: cst.Comment, codes: list[str], dropped: list[str], why: str) -> Finding:
        shown = ", ".join(dropped)
        message = f"`# noqa` names {shown}, {why}: remove {'it' if len(dropped) == 1 else 'them'}"
        kept = [c for c in codes if c not in dropped]
        fix = None
        if kept:  # the comment keeps its other codes; one left empty is the author's to remove
            match = named_codes(comment.value)
            assert match is not None
            value = comment.value[: match.start("codes")] + ", ".join(kept) + comment.value[match.end("codes") :]
            fix = self.fix(f"Remove {shown} from the comment", Edit(comment, comment.with_changes(value=value)))
        return self.report(comment, message, fix)


def _suppression_comments(ctx: FileContext) -> Iterator[tuple[cst.Comment, list[str]]]:
    for comment in ctx.comments_matching(_MENTION):
        match = named_codes(comment.value)
        if match is not None:
            yield comment, [c.strip() for c in match.group("codes").split(",")]


def unused_suppressions(ctx: FileContext, enabled: Iterable[str], used: set[tuple[int, str]]) -> list[Finding]:
    """Enabled advisor codes in suppression comments that suppressed no finding on their line."""
    enabled = {c.upper() for c in enabled}
    rule = UnusedNoqa()
    found: list[Finding] = []
    for comment, codes in _suppression_comments(ctx):
        line = ctx.position(comment)[0]
        unused = [c for c in codes if c.upper() in enabled and c.upper() != rule.code and (line, c.upper()) not in used]
        if unused:
            found.append(rule._finding(comment, codes, unused, "which suppresses nothing on this line"))
    return found
