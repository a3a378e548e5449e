"""Applies fixes: one transform per round, re-parse, re-lint, until nothing fixable is left.

A round takes every fix allowed by the applicability chosen whose edits do not overlap
an earlier fix's, applies them in one transform and checks that the result still
compiles. A fix that would leave invalid code is dropped and reported, never written.
Files are written atomically (temporary file in the same folder, fsync, rename) with
their mode kept.
"""
from __future__ import annotations

import difflib
import os
import stat
import tempfile
from dataclasses import dataclass, field
from typing import Sequence

import libcst as cst

from advisor.context import FileContext
from advisor.engine import (
    Diagnostic,
    FileError,
    Settings,
    analyzable_context,
    decode,
    map_files,
    run_rules,
    source_encoding,
    to_diagnostic,
)
from advisor.edits import ReplaceNodes
from advisor.names import ImportTable
from advisor.rule import Applicability, Finding, Fix

MAX_ROUNDS = 10


@dataclass
class AppliedFix:
    code: str
    line: int
    description: str


@dataclass
class FixResult:
    path: str
    original: bytes = b""
    fixed: bytes = b""
    applied: list[AppliedFix] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # fixes that would have broken the code
    remaining: list[Diagnostic] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    written: bool = False

    @property
    def changed(self) -> bool:
        return self.fixed != self.original

    def diff(self) -> str:
        before = decode(self.original).splitlines(keepends=True)
        after = decode(self.fixed).splitlines(keepends=True)
        return "".join(difflib.unified_diff(before, after, f"a/{self.path}", f"b/{self.path}"))


def allowed(fix: Fix | None, unsafe: bool) -> bool:
    if fix is None or fix.applicability is Applicability.NONE or not fix.edits:
        return False
    return fix.applicability is Applicability.SAFE or unsafe


def _overlaps(ctx: FileContext, a: Fix, b: Fix) -> bool:
    for edit_a in a.edits:
        for edit_b in b.edits:
            x, y = edit_a.node, edit_b.node
            if x is y or ctx.is_descendant(x, y) or ctx.is_descendant(y, x):
                return True
    return False


def _key(finding: Finding) -> tuple[str, str]:
    return (finding.code, finding.fix.description if finding.fix else "")


def choose_fixes(
    ctx: FileContext, findings: Sequence[Finding], unsafe: bool, blocked: frozenset | set = frozenset()
) -> list[Finding]:
    chosen: list[Finding] = []
    for finding in findings:
        if not allowed(finding.fix, unsafe) or _key(finding) in blocked:
            continue
        if any(_overlaps(ctx, finding.fix, other.fix) for other in chosen):  # type: ignore[arg-type]
            continue
        chosen.append(finding)
    return chosen


def add_imports(module: cst.Module, modules: Sequence[str]) -> cst.Module:
    """``import X`` for each module the file does not bind at top level, after its imports."""
    table = ImportTable()
    insert_at = 0
    for index, statement in enumerate(module.body):
        if isinstance(statement, cst.SimpleStatementLine):
            smalls = statement.body
            if all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in smalls):
                for small in smalls:
                    table.add(small)
                insert_at = index + 1
                continue
            if index == 0 and len(smalls) == 1 and isinstance(smalls[0], cst.Expr) and isinstance(
                smalls[0].value, (cst.SimpleString, cst.ConcatenatedString)
            ):
                insert_at = 1  # after the docstring
                continue
        if insert_at or index > 0:
            break
    missing = [m for m in dict.fromkeys(modules) if table.aliases.get(m) != m]
    if not missing:
        return module
    new_statements = [cst.parse_statement(f"import {m}") for m in missing]
    body = list(module.body)
    return module.with_changes(body=body[:insert_at] + new_statements + body[insert_at:])


def apply_fixes(ctx: FileContext, chosen: Sequence[Finding]) -> str:
    replacements: dict[cst.CSTNode, object] = {}
    imports: list[str] = []
    for finding in chosen:
        assert finding.fix is not None
        for edit in finding.fix.edits:
            replacements[edit.node] = edit.replacement
        imports.extend(finding.fix.imports)
    module = ctx.module.visit(ReplaceNodes(replacements))
    if imports:
        module = add_imports(module, imports)
    return module.code


def _compiles(code: str, path: str) -> bool:
    try:
        compile(code, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def fix_source(path: str, data: bytes, settings: Settings, unsafe: bool) -> FixResult:
    result = FixResult(path, original=data, fixed=data)
    ctx = analyzable_context(path, data, settings.target, result.errors)
    if ctx is None:
        return result
    encoding = source_encoding(data)
    codes = settings.codes_for(path)
    blocked: set[tuple[str, str]] = set()  # fixes that broke the code: reported, never retried
    for _ in range(MAX_ROUNDS):
        findings, errors = run_rules(ctx, codes)
        result.errors = errors
        chosen = choose_fixes(ctx, findings, unsafe, blocked)
        if not chosen:
            break
        code = apply_fixes(ctx, chosen)
        if not _compiles(code, path):
            # Keep the fixes that are fine on their own; drop the ones that break the file.
            good = [f for f in chosen if _compiles(apply_fixes(ctx, [f]), path)]
            for finding in chosen:
                if finding not in good:
                    blocked.add(_key(finding))
                    result.dropped.append(f"{finding.code} at line {finding.line}: {finding.fix.description}")  # type: ignore[union-attr]
            if not good:
                continue
            code = apply_fixes(ctx, good)
            chosen = good
            if not _compiles(code, path):
                blocked.update(_key(f) for f in good)
                continue
        result.applied.extend(AppliedFix(f.code, f.line, f.fix.description) for f in chosen)  # type: ignore[union-attr]
        try:
            ctx = FileContext.from_source(path, code, settings.target)
        except cst.ParserSyntaxError:
            break
    findings, errors = run_rules(ctx, codes)
    result.errors = errors
    result.remaining = [to_diagnostic(f) for f in findings]
    result.fixed = ctx.source.encode(encoding) if ctx.source != decode(data) else data
    return result


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees either the old or the new file."""
    directory = os.path.dirname(os.path.abspath(path))
    mode = stat.S_IMODE(os.stat(path).st_mode)
    handle, temp = tempfile.mkstemp(prefix=".advisor-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def _fix_chunk(args: tuple[tuple[list[str], bool, bool], Settings]) -> list[FixResult]:
    (paths, unsafe, write), settings = args
    results = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as error:
            results.append(FixResult(path, errors=[FileError(path, f"cannot read: {error.strerror or error}")]))
            continue
        result = fix_source(path, data, settings, unsafe)
        if write and result.changed:
            try:
                write_atomic(path, result.fixed)
                result.written = True
            except OSError as error:
                result.errors.append(FileError(path, f"cannot write: {error.strerror or error}"))
        results.append(result)
    return results


def fix_paths(paths: Sequence[str], settings: Settings, unsafe: bool, write: bool, jobs: int | None = None) -> list[FixResult]:
    if (jobs or 0) == 1 or len(paths) < 8:
        return _fix_chunk(((list(paths), unsafe, write), settings))
    return list(map_files(_FixChunk(unsafe, write), paths, settings, jobs))


class _FixChunk:
    """Picklable worker for the process pool."""

    def __init__(self, unsafe: bool, write: bool) -> None:
        self.unsafe = unsafe
        self.write = write

    def __call__(self, args: tuple[list[str], Settings]) -> list[FixResult]:
        paths, settings = args
        return _fix_chunk(((paths, self.unsafe, self.write), settings))
