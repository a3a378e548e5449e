"""The rule API: what a rule is, what it reports, and how it proposes a fix.

A rule is one small class in ``rules/``. It declares its code, name, docs and
examples, and implements ``check(ctx)``, a generator of findings. The engine
discovers every subclass of :class:`Rule`; adding a rule never touches the engine.
"""
from __future__ import annotations

import enum
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterator, Sequence, Union

import libcst as cst

if TYPE_CHECKING:
    from advisor.context import FileContext


class Applicability(str, enum.Enum):
    """How far a fix may be trusted, as in ruff."""

    SAFE = "safe"  # same results, only faster or leaner
    UNSAFE = "unsafe"  # changes numerics, the process model or memory use
    # Unsafe, and it pays only at sizes a static reading cannot see (run length, per-sample cost):
    # applied only where ``advisor fix --verify --unsafe-fixes`` measures it.
    MEASURED = "measured"
    NONE = "none"  # advice only

    def __str__(self) -> str:  # pragma: no cover - cosmetic
        return self.value


Replacement = Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel]


@dataclass(frozen=True)
class Edit:
    """Replace one node of the original tree (by identity) with another, or remove it."""

    node: cst.CSTNode
    replacement: Replacement


@dataclass(frozen=True)
class Fix:
    applicability: Applicability
    description: str
    edits: tuple[Edit, ...]
    # Modules the edited code needs bound at top level (e.g. "torch"); the fixer adds
    # ``import torch`` only where the file does not already bind it.
    imports: tuple[str, ...] = ()
    # (package, version) the edited code needs (``("torch", "2.3")`` for ``torch.amp.GradScaler``):
    # where the project admits an older one, the engine withholds the fix and says why.
    requires: tuple[tuple[str, str], ...] = ()


@dataclass
class Finding:
    code: str
    name: str
    message: str
    node: cst.CSTNode
    fix: Fix | None = None
    path: str = ""
    line: int = 0
    column: int = 0
    end_line: int = 0
    end_column: int = 0

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.column, self.code)

    def as_advice(self, reason: str) -> "Finding":
        """The finding without its fix, saying why (before its closing guide reference)."""
        head, separator, guide = self.message.rpartition(" (guide: ")
        self.message = f"{head}; {reason}{separator}{guide}" if separator else f"{self.message}; {reason}"
        self.fix = None
        return self


@dataclass(frozen=True)
class Valid:
    """An example the rule must stay silent on."""

    code: str
    gpu: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Invalid:
    """An example the rule must report; ``fixed`` is the expected fix output, if any."""

    code: str
    fixed: str | None = None
    gpu: str | None = None
    count: int = 1
    # Whether the fix shown needs ``--unsafe-fixes``; None: as the rule's ``fix_applicability``.
    unsafe: bool | None = None
    note: str = ""


def _dedent(text: str) -> str:
    return textwrap.dedent(text).strip("\n") + "\n" if text else ""


class Rule:
    """Base class of every rule. Subclasses set the class attributes and ``check``."""

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    guide: ClassVar[str] = ""  # the guide's section this rule comes from
    fix_applicability: ClassVar[Applicability] = Applicability.NONE
    # Markdown sections for `advisor explain` and docs.
    why: ClassVar[str] = ""
    example: ClassVar[str] = ""
    use_instead: ClassVar[str] = ""
    silent_when: ClassVar[str] = ""
    # Where one case's fix is safer or riskier than ``fix_applicability`` says.
    fix_notes: ClassVar[str] = ""
    valid: ClassVar[Sequence[Valid]] = ()
    invalid: ClassVar[Sequence[Invalid]] = ()

    def check(self, ctx: "FileContext") -> Iterator[Finding]:  # pragma: no cover - abstract
        raise NotImplementedError

    def report(self, node: cst.CSTNode, message: str, fix: Fix | None = None) -> Finding:
        return Finding(code=self.code, name=self.name, message=message, node=node, fix=fix)

    @staticmethod
    def at_keyword(call: cst.Call, *keywords: str) -> cst.CSTNode:
        """Where a finding about a setting belongs: the first of ``keywords`` written in the call
        (``fp16=True`` on its own line), else the call. A suppression comment on the keyword's
        line or on the statement's first line silences it."""
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in keywords:
                return arg
        return call

    def fix(
        self,
        description: str,
        *edits: Edit,
        imports: Sequence[str] = (),
        applicability: Applicability | None = None,
        requires: Sequence[tuple[str, str]] = (),
    ) -> Fix:
        return Fix(
            applicability=applicability or self.fix_applicability,
            description=description,
            edits=tuple(edits),
            imports=tuple(imports),
            requires=tuple(requires),
        )

    @classmethod
    def documentation(cls) -> str:
        """The rule's full doc in Markdown, in ruff's shape."""
        parts = [f"# {cls.code} {cls.name}", "", cls.summary, ""]
        if cls.guide:
            parts += [f"Guide section: *{cls.guide}*", ""]
        if cls.why:
            parts += ["## Why is this bad?", _dedent(cls.why)]
        if cls.example:
            parts += ["## Example", "```python", _dedent(cls.example).rstrip("\n"), "```", ""]
        if cls.use_instead:
            parts += ["## Use instead", "```python", _dedent(cls.use_instead).rstrip("\n"), "```", ""]
        parts += ["## Fix safety", _fix_safety_text(cls.fix_applicability), ""]
        if cls.fix_notes:
            parts += [_dedent(cls.fix_notes)]
        if cls.silent_when:
            parts += ["## When it stays silent", _dedent(cls.silent_when)]
        return "\n".join(parts).rstrip("\n") + "\n"


def _fix_safety_text(applicability: Applicability) -> str:
    return {
        Applicability.SAFE: "The fix is **safe**: same results, only faster or leaner. `advisor fix` applies it.",
        Applicability.UNSAFE: (
            "The fix is **unsafe**: it can change numerics, the process model or memory use. "
            "It is applied only with `--unsafe-fixes`; `advisor fix --verify` applies it with evidence."
        ),
        Applicability.MEASURED: (
            "The fix is **measured**: it is unsafe (it can change numerics, the process model or memory "
            "use) and whether it pays depends on sizes advisor cannot read from the code (how long the run "
            "is, what each sample costs to load). `advisor fix --unsafe-fixes` leaves it as advice; "
            "`advisor fix --verify --unsafe-fixes` applies it, runs both versions and keeps it only where "
            "it is faster and trains the same."
        ),
        Applicability.NONE: "No automatic fix: the message says what to do.",
    }[applicability]
