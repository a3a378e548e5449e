"""Applies fixes: one transform per round, re-parse, re-lint, until nothing fixable is left.

A round takes every fix allowed by the applicability chosen whose edits do not overlap
an earlier fix's, applies them in one transform and checks that the result still
compiles. A fix that would leave invalid code is dropped and reported, never written.
Files are written atomically (temporary file in the same folder, fsync, rename) with
their mode kept.
"""
from __future__ import annotations

import contextlib
import difflib
import errno
import os
import signal
import stat
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import libcst as cst

from advisor.context import FileContext
from advisor.engine import (
    Diagnostic,
    FileError,
    Settings,
    attach_project,
    done_with,
    project_context,
    check_file,
    decode,
    map_files,
    place_in_cells,
    read_notebook,
    run_rules,
    source_encoding,
    to_diagnostic,
)
from advisor.edits import ReplaceNodes, keep_removed_comments, realign_trailing_comments
from advisor.limits import TOO_DEEP_FOR_LIBCST, from_recursion
from advisor.names import MODULE_NAMES, ImportTable
from advisor.notebooks import Notebook, NotebookError, cell_diff, is_notebook
from advisor.rule import Applicability, Finding, Fix

MAX_ROUNDS = 10


@dataclass
class AppliedFix:
    code: str
    line: int
    description: str
    # 0: a finding the check reported; later rounds: a fix the earlier ones made possible
    # (``non_blocking=True`` once the loader pins its memory).
    round: int = 0
    applicability: str = "safe"
    # The lines the fix's edits span, in that round's file (an import added at the top aside).
    first_line: int = 0
    last_line: int = 0


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
    # False when the loop stopped at MAX_ROUNDS with fixes still to apply.
    converged: bool = True
    # A notebook's code cells joined, as the fixes left them (``fixed`` is the notebook's bytes).
    fixed_python: bytes = b""

    @property
    def changed(self) -> bool:
        return self.fixed != self.original

    def diff(self) -> str:
        if is_notebook(self.path):
            return cell_diff(self.path, self.original, self.fixed)  # per cell, as ruff shows notebooks
        before = decode(self.original).splitlines(keepends=True)
        after = decode(self.fixed).splitlines(keepends=True)
        return "".join(difflib.unified_diff(before, after, f"a/{self.path}", f"b/{self.path}"))


def allowed(fix: Fix | None, unsafe: bool, measured: bool = False) -> bool:
    """Whether a fix is applied: safe ones always, unsafe ones with ``--unsafe-fixes``, measured
    ones only where ``fix --verify`` measures them (``measured``) with ``--unsafe-fixes``."""
    if fix is None or fix.applicability is Applicability.NONE or not fix.edits:
        return False
    if fix.applicability is Applicability.MEASURED:
        return unsafe and measured
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
    ctx: FileContext,
    findings: Sequence[Finding],
    unsafe: bool,
    blocked: frozenset | set = frozenset(),
    measured: bool = False,
) -> list[Finding]:
    chosen: list[Finding] = []
    for finding in findings:
        if not allowed(finding.fix, unsafe, measured) or _key(finding) in blocked:
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
    module = ctx.module.visit(ReplaceNodes(keep_removed_comments(ctx, replacements)))
    if imports:
        module = add_imports(module, imports)
    return realign_trailing_comments(ctx.module.code, module.code)


def _compiles(code: str, path: str, unbound_before: frozenset[str] | None = None) -> bool:
    """The code compiles, and (given the names the original read without binding them) reads no
    name that nothing binds any more: a fix that drops an import still in use (``from
    torch.cuda.amp import autocast`` above a ``with autocast():`` it did not rewrite) compiles,
    then raises NameError."""
    if _compile_error(code, path) is not None:
        return False
    if unbound_before is None:
        return True
    after = unbound_names(code)
    return after is None or after <= unbound_before


def unbound_names(code: str) -> frozenset[str] | None:
    """The names the code reads that it binds nowhere (scopes ignored) and that are not builtins;
    None where that cannot be told (a star import, ``globals()`` writes, code that does not parse)."""
    import ast
    import builtins

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    bound: set[str] = set(dir(builtins)) | MODULE_NAMES
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("globals", "locals", "vars", "exec"):
            return None
    return frozenset(read - bound)


def _compile_error(code: str, path: str) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the file's own warnings (invalid escapes) are not ours to print
            compile(code, path, "exec", dont_inherit=True)
    except SyntaxError as error:
        return f"{error.msg} (line {error.lineno})"
    except (ValueError, RecursionError, MemoryError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def fix_source(path: str, data: bytes, settings: Settings, unsafe: bool, measured: bool = False) -> FixResult:
    """Fix rounds over one file; a file that cannot be fixed safely comes back unchanged, with an error.
    A notebook's code cells are fixed as one source, and each edit goes back into its cell.
    ``measured``: the caller runs the result and measures it (``fix --verify``), so the fixes
    whose gain depends on sizes (:attr:`Applicability.MEASURED`) are applied too."""
    notebook = None
    if is_notebook(path):
        errors: list[FileError] = []
        notebook = read_notebook(path, data, errors)
        if notebook is None:
            return FixResult(path, original=data, fixed=data, errors=errors)
    try:
        result = _fix_rounds(path, data, settings, unsafe, notebook, measured)
    except UnicodeEncodeError as error:
        return FixResult(path, original=data, fixed=data, errors=[FileError(path, f"cannot fix: the fixed code cannot be written in {error.encoding}")])
    except Exception as error:
        if not from_recursion(error):
            raise
        return FixResult(path, original=data, fixed=data, errors=[FileError(path, TOO_DEEP_FOR_LIBCST)])
    if result.dropped and not result.applied:
        # Every fix "breaks" a file that did not compile to begin with: say so once instead.
        problem = _compile_error(notebook.python if notebook is not None else decode(data), path)
        if problem is not None:
            result.dropped = []
            result.errors.append(FileError(path, f"cannot fix: the file does not compile as it is: {problem}"))
    if result.changed and notebook is not None:
        try:
            result.fixed = notebook.with_python(result.fixed.decode("utf-8"))
        except NotebookError as error:
            _left_unchanged(result, settings, f"cannot fix: {error}")
            return result
        fixed_notebook = Notebook.from_bytes(result.fixed)
        if fixed_notebook.python == result.fixed_python.decode("utf-8"):
            result.remaining = [place_in_cells(fixed_notebook, d) for d in result.remaining]
        else:  # placeholders written differently after a fix moved them: place by a fresh check
            result.remaining = check_file(path, settings, result.fixed).diagnostics
    elif notebook is not None:
        result.remaining = [place_in_cells(notebook, d) for d in result.remaining]
    elif result.changed:
        encoding = source_encoding(data)
        if decode(data).encode(encoding) != data:
            # Rewriting would change bytes no fix touched (a codec that does not round-trip them).
            _left_unchanged(result, settings, f"cannot fix: its bytes do not survive a round trip through {encoding}")
    return result


def _left_unchanged(result: FixResult, settings: Settings, reason: str) -> None:
    """Report the file as it stays: its own findings remain, none applied."""
    result.fixed, result.applied = result.original, []
    result.remaining = check_file(result.path, settings, result.original).diagnostics
    result.errors.append(FileError(result.path, reason))


def _fix_rounds(
    path: str, data: bytes, settings: Settings, unsafe: bool, notebook: Notebook | None = None, measured: bool = False
) -> FixResult:
    """The fix rounds; for a notebook, ``fixed`` is its joined cells' source, fixed (utf-8)."""
    result = FixResult(path, original=data, fixed=data)
    ctx = project_context(path, data, settings, result.errors, notebook)
    if ctx is None:
        return result
    encoding = "utf-8" if notebook is not None else source_encoding(data)
    original_source = notebook.python if notebook is not None else decode(data)
    codes = settings.codes_for(path)
    blocked: set[tuple[str, str]] = set()  # fixes that broke the code: reported, never retried
    unbound = unbound_names(ctx.source)
    for round_number in range(MAX_ROUNDS):
        findings, errors = run_rules(ctx, codes)
        result.errors = errors
        chosen = choose_fixes(ctx, findings, unsafe, blocked, measured)
        if not chosen:
            break
        code = apply_fixes(ctx, chosen)
        if not _compiles(code, path, unbound):
            # Keep the fixes that are fine on their own; drop the ones that break the file.
            good = [f for f in chosen if _compiles(apply_fixes(ctx, [f]), path, unbound)]
            for finding in chosen:
                if finding not in good:
                    blocked.add(_key(finding))
                    where = f"line {finding.line}"
                    if notebook is not None:
                        where = "cell {}, line {}".format(*notebook.locate(ctx.source, finding.line))
                    result.dropped.append(f"{finding.code} at {where}: {finding.fix.description}")  # type: ignore[union-attr]
            if not good:
                continue
            code = apply_fixes(ctx, good)
            chosen = good
            if not _compiles(code, path, unbound):
                blocked.update(_key(f) for f in good)
                continue
        result.applied.extend(_applied(ctx, f, round_number) for f in chosen)
        try:
            fixed_ctx = FileContext.from_source(path, code, settings.target)
        except cst.ParserSyntaxError:
            break
        done_with(ctx)
        ctx = fixed_ctx
        attach_project(ctx, settings)  # every round sees the facts a fresh check would
    findings, errors = run_rules(ctx, codes)
    result.errors = errors
    result.converged = not choose_fixes(ctx, findings, unsafe, blocked, measured)
    result.remaining = [to_diagnostic(f) for f in findings]
    result.fixed = ctx.source.encode(encoding) if ctx.source != original_source else data
    if notebook is not None:
        result.fixed_python = ctx.source.encode(encoding)
    done_with(ctx)
    return result


def _applied(ctx: FileContext, finding: Finding, round_number: int) -> AppliedFix:
    fix = finding.fix
    assert fix is not None
    spans = [ctx.position(edit.node) for edit in fix.edits]
    return AppliedFix(
        finding.code, finding.line, fix.description, round_number, fix.applicability.value,
        first_line=min(span[0] for span in spans), last_line=max(span[2] for span in spans),
    )


class FileChanged(OSError):
    """The file no longer holds the bytes the fixes were computed from."""


def write_atomic(path: str, data: bytes, expected: bytes | None = None) -> None:
    """Write ``data`` to ``path`` so that a reader sees either the old or the new file.

    A symbolic link is written through: its target is replaced, the link stays a link. The
    target keeps its mode and owner; a read-only file is refused, not replaced behind its
    mode's back. With ``expected``, a file that no longer holds those bytes (edited
    meanwhile) is left alone. SIGINT and SIGTERM wait until the write is done or undone.
    """
    target = os.path.realpath(path)
    info = os.stat(target)
    if not info.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, "read-only file", path)
    with _signals_deferred():
        if expected is not None:
            with open(target, "rb") as handle:
                current = handle.read()
            if current == data:
                return  # another run wrote the same fixes
            if current != expected:
                raise FileChanged(errno.EAGAIN, "changed on disk while being fixed; left as it is", path)
        handle, temp = tempfile.mkstemp(prefix=".advisor-", suffix=".tmp", dir=os.path.dirname(target))
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
                written = os.fstat(out.fileno())
            os.chmod(temp, stat.S_IMODE(info.st_mode))
            if (written.st_uid, written.st_gid) != (info.st_uid, info.st_gid):
                try:
                    os.chown(temp, info.st_uid, info.st_gid)
                except PermissionError as error:
                    raise PermissionError(errno.EPERM, "cannot keep its owner and group in a rewritten copy", path) from error
            os.replace(temp, target)
        except BaseException:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise


DEFERRED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block is over, then deliver the first one received.

    Handlers run in the main thread only; elsewhere there is nothing to hold."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous: dict[int, object] = {}
    try:
        for signum in DEFERRED_SIGNALS:
            handler = signal.getsignal(signum)
            if handler is None:  # installed outside Python: cannot be put back, so leave it alone
                continue
            previous[signum] = handler
            signal.signal(signum, lambda number, frame: received.append(number))
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        if received:
            signal.raise_signal(received[0])


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
                write_atomic(path, result.fixed, expected=data)
                result.written = True
            except OSError as error:
                _left_unchanged(result, settings, f"cannot write: {error.strerror or error}")
        results.append(result)
    return results


def fix_paths(paths: Sequence[str], settings: Settings, unsafe: bool, write: bool, jobs: int | None = None) -> list[FixResult]:
    from advisor.project import forget_projects

    forget_projects()  # files may have changed since the last run in this process
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


def fix_finding(path: str, data: bytes, settings: Settings, diagnostic: Diagnostic) -> bytes | None:
    """The file with one finding's fix applied, the finding ``diagnostic`` reports (found again by
    its code and position: line and column, or in a notebook its cell, line and column in the
    cell), by the same transform as ``advisor fix`` (formatting and comments kept, imports added in
    the file's style), compiled before it is returned; a notebook's fixed cells go back into it
    as ``fix`` writes them. None when no such finding has a fix or the fix would break the code.
    The editor's code action for one finding (advisor.server)."""
    errors: list[FileError] = []
    notebook = read_notebook(path, data, errors) if is_notebook(path) else None
    if is_notebook(path) and notebook is None:
        return None

    def reported_at(finding: Finding) -> tuple:
        if notebook is not None:
            return (finding.code, *notebook.cell_position(finding.line, finding.column))
        return (finding.code, finding.line, finding.column)

    wanted = (
        (diagnostic.code, diagnostic.cell, diagnostic.cell_line, diagnostic.cell_column)
        if notebook is not None else (diagnostic.code, diagnostic.line, diagnostic.column)
    )
    try:
        ctx = project_context(path, data, settings, errors, notebook)
        if ctx is None:
            return None
        findings, _ = run_rules(ctx, settings.codes_for(path))
        finding = next((f for f in findings if allowed(f.fix, unsafe=True, measured=True) and reported_at(f) == wanted), None)
        if finding is None:
            return None
        fixed = apply_fixes(ctx, [finding])
        unbound = unbound_names(ctx.source)
    except Exception as error:
        if not from_recursion(error):
            raise
        return None
    if not _compiles(fixed, path, unbound):
        return None
    if notebook is not None:
        try:
            return notebook.with_python(fixed)
        except NotebookError:
            return None
    encoding = source_encoding(data)
    try:
        if decode(data).encode(encoding) != data:
            return None  # rewriting would change bytes no fix touched, as fix_source refuses
        return fixed.encode(encoding)
    except UnicodeEncodeError:
        return None
