"""The engine: find files, parse each once, run every enabled rule over one shared context.

Files are processed in parallel (a process pool sized to the machine) once there are
enough of them to pay for the workers. Rules are instantiated once per process.
"""
from __future__ import annotations

import fnmatch
import functools
import gc
import io
import os
import re
import stat as stat_module
import tokenize
import warnings
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import libcst as cst
from libcst import CSTNode

from advisor.context import FileContext
from advisor.fix_premises import withhold_where_premises_fail
from advisor.limits import TOO_DEEP_FOR_LIBCST, from_recursion, nesting_error
from advisor.registry import all_rules
from advisor.noqa import FILE_NOQA, FILE_NOQA_MENTION, OWN_LINE_FILE_NOQA, suppressed
from advisor.notebooks import Notebook, NotebookError, is_notebook
from advisor.rule import Applicability, Finding, Rule
from advisor.targets import Target, notebook_target

if TYPE_CHECKING:
    from advisor.cache import Cache

# A file that mentions none of these cannot hold a finding: skip it before parsing.
RELEVANT = re.compile(rb"\b(torch|transformers|accelerate|lightning|pytorch_lightning|trl)\b")
RELEVANT_TEXT = re.compile(RELEVANT.pattern.decode())  # the same, for a notebook's joined cells
_IMPORTS_SOMETHING = re.compile(rb"(?m)^[ \t]*(?:from|import)[ \t]")
SKIPPED_DIRS = {
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "env", ".env", ".tox", ".nox",
    "build", "dist", "site-packages", "node_modules", ".mypy_cache", ".pytest_cache",
    ".ruff_cache", ".advisor_cache", ".eggs", ".ipynb_checkpoints",
}
UNUSED_NOQA = "ADV001"  # judged after every other rule ran (advisor/rules/suppressions.py)
PARALLEL_THRESHOLD = 8


@dataclass(frozen=True)
class Settings:
    codes: frozenset[str]
    target: Target
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...] = ()
    root: str = "."
    # Analyse each file with its project's sibling modules (advisor.project); off: each file alone.
    project_scope: bool = True
    # Each fix's text edit in the diagnostics (for JSON output, as ruff's), at one code
    # generation per fixable finding: only when asked for.
    fix_edits: bool = False

    def codes_for(self, path: str) -> frozenset[str]:
        codes = self.codes
        if self.per_file_ignores:
            relative = _relative(path, self.root)
            for pattern, ignored in self.per_file_ignores:
                if fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(os.path.basename(path), pattern):
                    codes = frozenset(c for c in codes if not any(c.startswith(i) for i in ignored))
        return codes


@dataclass
class Diagnostic:
    """A finding as reported: plain data, safe to send between processes."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    message: str
    fix_applicability: str | None = None
    fix_description: str | None = None
    # [{"content", "location": {"row", "column"}, "end_location": {...}}], 1-based, when asked for
    fix_edits: list | None = None
    # In a notebook, ``line`` and ``column`` are where the code is stored in the .ipynb file's
    # text (what SARIF and GitHub annotations point at); these say where it is in its cell: the
    # cell's 1-based number among all the notebook's cells, and line and column in the cell.
    cell: int | None = None
    cell_line: int | None = None
    cell_column: int | None = None
    cell_end_line: int | None = None
    cell_end_column: int | None = None

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.column, self.code)


@dataclass
class FileError:
    path: str
    message: str
    code: str = "ADV000"
    line: int = 1
    column: int = 1
    cell: int | None = None  # in a notebook (a syntax error in a cell): as Diagnostic's
    cell_line: int | None = None
    cell_column: int | None = None


@dataclass
class FileResult:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    # The project's other files the analysis read (absolute path -> digest of their bytes), and
    # the files that import this one when their verdict was asked: a cached result holds only
    # while they are unchanged.
    dependencies: dict[str, str] = field(default_factory=dict)
    importers: list[str] | None = None
    # Whether running the project runs this file, where a fix asked: "yes", "no" or "unknown";
    # and whether the project uses each of its top-level functions and classes a fix asked about.
    reached: str | None = None
    called: dict[str, bool] | None = None
    mentions: dict[str, int] | None = None  # how often other files name each name a fix asked about
    project_stamp: str | None = None  # the project's files when those were asked (Project.stamp)
    # Whether a fix asked what the project's text says anywhere (``texts_matching``): then any
    # change to the project's files (another stamp) makes the result stale.
    asked_texts: bool = False


# -- files ------------------------------------------------------------------------------
def is_excluded(path: str, exclude: Sequence[str], root: str) -> bool:
    """Whether ``exclude`` (globs relative to the project root, or file and folder names) matches ``path``."""
    if not exclude:
        return False
    globs, prefixes = _exclude_matcher(tuple(exclude))
    relative = os.path.normcase(_relative(path, root))
    name = os.path.normcase(os.path.basename(path.rstrip(os.sep)))
    return globs.match(relative) is not None or globs.match(name) is not None or relative.startswith(prefixes)


@functools.lru_cache(maxsize=64)
def _exclude_matcher(exclude: tuple[str, ...]) -> "tuple[re.Pattern[str], tuple[str, ...]]":
    """The patterns as one regular expression (``fnmatch``'s, joined: a walk asks for every
    file and folder) and as folder prefixes."""
    globs = re.compile("|".join(fnmatch.translate(os.path.normcase(pattern)) for pattern in exclude))
    return globs, tuple(pattern.rstrip("/") + "/" for pattern in exclude)


def discover(
    paths: Sequence[str], exclude: Sequence[str] = (), root: str = ".", force_exclude: bool = False
) -> tuple[list[str], list[FileError]]:
    """The Python files and notebooks under ``paths``. A file named explicitly is checked even where
    ``exclude`` matches it, unless ``force_exclude`` (pre-commit names files one by one)."""
    files: list[str] = []
    errors: list[FileError] = []
    seen: set[tuple[int, int] | str] = set()

    def excluded(path: str) -> bool:
        return is_excluded(path, exclude, root)

    def unreadable(error: OSError) -> None:  # a folder that cannot be listed is an error, not silently empty
        errors.append(FileError(error.filename or str(error), f"cannot read: {error.strerror or error}"))

    for given in paths:
        if not os.path.exists(given):
            broken_link = " (a broken symbolic link or a loop of them)" if os.path.islink(given) else ""
            errors.append(FileError(given, "no such file or directory" + broken_link))
            continue
        if os.path.isfile(given):
            if force_exclude and excluded(given):
                continue
            key, _ = _identity(given)
            if key not in seen:
                seen.add(key)
                files.append(given)  # named explicitly: checked even if it would be excluded
            continue
        if not os.path.isdir(given):
            errors.append(FileError(given, "not a regular file or a folder"))  # a FIFO would block the read
            continue
        for directory, dirnames, filenames in os.walk(given, followlinks=False, onerror=unreadable):
            dirnames[:] = sorted(
                d for d in dirnames if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
                and not excluded(os.path.join(directory, d))
            )
            for filename in sorted(filenames):
                if not filename.endswith((".py", ".pyi", ".ipynb")):  # notebooks too, as ruff
                    continue
                path = os.path.join(directory, filename)
                key, status = _identity(path)
                if key in seen or excluded(path):
                    continue
                if status is not None and not stat_module.S_ISREG(status.st_mode):
                    continue  # a FIFO or socket named *.py: reading it could block forever
                seen.add(key)
                files.append(path)
    return files, errors


def _identity(path: str) -> "tuple[tuple[int, int] | str, os.stat_result | None]":
    """The file a path leads to, whatever links and spellings lead there (one stat, where
    ``realpath`` takes one per path component), and its status; a broken link (reading it
    reports the error) is known by where it points."""
    try:
        status = os.stat(path)
    except OSError:
        return os.path.realpath(path), None
    return (status.st_dev, status.st_ino), status


def _relative(path: str, root: str) -> str:
    absolute, top = os.path.abspath(path), os.path.abspath(root)
    if absolute == top:
        return "."
    inside = top.rstrip(os.sep) + os.sep
    if absolute.startswith(inside):
        return absolute[len(inside):].replace(os.sep, "/")
    return Path(path).as_posix()


def source_encoding(data: bytes) -> str:
    """The encoding a PEP 263 coding cookie or a BOM declares (utf-8 otherwise)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return encoding


def decode(data: bytes) -> str:
    """Source text honouring a PEP 263 coding cookie and a BOM."""
    return data.decode(source_encoding(data))


# -- rules --------------------------------------------------------------------------------
_RULE_INSTANCES: dict[str, Rule] | None = None


def rule_instances() -> dict[str, Rule]:
    global _RULE_INSTANCES
    if _RULE_INSTANCES is None:
        _RULE_INSTANCES = {rule.code: rule() for rule in all_rules()}
    return _RULE_INSTANCES


class AnalysisError(Exception):
    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


def _parse_module(source: str) -> cst.Module:
    """``cst.parse_module`` without re-validating each node the parser builds.

    Node constructors validate their fields (balanced parentheses, required whitespace); a
    tree straight from the parser is valid by construction, and the checks cost about a
    tenth of the parse. LibCST's own ``__post_init__`` notes the same. Nodes that rules and
    fixes build later are validated as usual."""
    post_init = CSTNode.__dict__["__post_init__"]
    CSTNode.__post_init__ = _skip_validation  # type: ignore[method-assign]
    try:
        return cst.parse_module(source)
    finally:
        CSTNode.__post_init__ = post_init  # type: ignore[method-assign]


def _skip_validation(self: CSTNode) -> None:
    pass


def _hash_nodes_by_identity() -> None:
    """Give every node class CPython's own identity hash and equality in place of LibCST's.

    LibCST nodes are equal only to themselves and hash as ``id(self)``, but through Python
    methods that each node class carries in its own ``__dict__``; the index, the facts layer
    and every rule key dictionaries by node, so those calls were a twentieth of a check's time
    (1.8 million for 220 fixture files). ``object``'s hash and equality are the same relation
    (identity), computed in C."""
    libcst_hash, libcst_eq = CSTNode.__dict__["__hash__"], CSTNode.__dict__["__eq__"]
    pending: list[type] = [CSTNode]
    while pending:
        node_class = pending.pop()
        pending.extend(node_class.__subclasses__())
        if node_class.__dict__.get("__hash__") is libcst_hash:
            node_class.__hash__ = object.__hash__  # type: ignore[method-assign,assignment]
        if node_class.__dict__.get("__eq__") is libcst_eq:
            node_class.__eq__ = object.__eq__  # type: ignore[method-assign,assignment]


_hash_nodes_by_identity()


def parse(path: str, data: bytes, target: Target) -> FileContext:
    """One parse per file. Raises AnalysisError for files that cannot be analyzed."""
    if b"\x00" in data:
        raise AnalysisError("source contains a null byte")
    try:
        source = decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        raise AnalysisError(f"cannot decode: {error}") from error
    return parse_source(path, source, target, data)


def parse_source(path: str, source: str, target: Target, data: bytes | None = None) -> FileContext:
    """``parse`` of text already decoded (a notebook's joined cells; ``data``: the bytes it came
    from, when it came from a file's bytes)."""
    if data is None:
        if "\x00" in source:
            raise AnalysisError("source contains a null byte")
        data = source.encode("utf-8", "surrogatepass")
    too_deep = nesting_error(data, source)
    if too_deep is not None:
        raise AnalysisError(*too_deep)
    try:
        module = _parse_module(source)
    except cst.ParserSyntaxError as error:
        python = _python_syntax_error(source, path)
        if python is not None:  # Python's message and position, as the user's editor shows them
            raise AnalysisError(*python) from error
        first_line = error.message.splitlines()[0] if error.message else "invalid syntax"
        raise AnalysisError(f"syntax error: {first_line}", error.raw_line, error.raw_column + 1) from error
    except (RecursionError, MemoryError) as error:
        raise AnalysisError(f"cannot parse: {type(error).__name__}") from error
    return FileContext(path, source, module, target)


def _python_syntax_error(source: str, path: str) -> tuple[str, int, int] | None:
    """What Python's compiler says of a file LibCST rejects (compiled only, never run), or None
    where Python accepts it (syntax newer than LibCST's grammar: LibCST's message stands)."""
    import ast

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(source, path)
    except SyntaxError as error:
        return f"syntax error: {error.msg}", error.lineno or 1, error.offset or 1
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


def mentions_torch(data: bytes) -> bool:
    return RELEVANT.search(data) is not None


def worth_analysing(path: str, data: bytes, settings: Settings) -> bool:
    """The prefilter: the file names torch or a library built on it, or, with project scope, it
    imports a module of its project that does. An entry script can build and train its model
    only through its package (improved-diffusion's ``scripts/image_train.py`` never names torch:
    ``create_model_and_diffusion``, ``model.to(dist_util.dev())``, ``TrainLoop(...).run_loop()``)."""
    if RELEVANT.search(data):
        return True
    if not settings.project_scope or is_notebook(path) or not _IMPORTS_SOMETHING.search(data):
        return False
    from advisor.project import project_for

    return project_for(path, settings.target, parse).imports_relevant(os.path.abspath(path))


def analyzable_context(
    path: str,
    data: bytes,
    target: Target,
    errors: list[FileError],
    notebook: Notebook | None = None,
    relevant: bool | None = None,
) -> FileContext | None:
    """The file's context, or None: skipped by the prefilter (``relevant``, when the caller
    has asked :func:`worth_analysing`), or unparseable (added to ``errors``). A notebook's
    context is that of its code cells joined (``notebook.python``)."""
    if notebook is not None:
        if not RELEVANT_TEXT.search(notebook.python):
            return None
        try:
            return parse_source(path, notebook.python, notebook_target(notebook.text, target))
        except AnalysisError as error:
            message, line, column = str(error), error.line, error.column
            if message.startswith("syntax error"):  # the cell that breaks, as Jupyter would run it
                message, line, column = notebook.first_cell_syntax_error() or (message, line, column)
            errors.append(notebook_error(path, notebook, message, line, column))
            return None
    if not (RELEVANT.search(data) if relevant is None else relevant):
        return None
    try:
        return parse(path, data, target)
    except AnalysisError as error:
        errors.append(FileError(path, str(error), line=error.line, column=error.column))
        return None


def read_notebook(path: str, data: bytes, errors: list[FileError]) -> Notebook | None:
    """The notebook in ``data``, or None with the reason added to ``errors``."""
    try:
        return Notebook.from_bytes(data)
    except NotebookError as error:
        errors.append(FileError(path, str(error), line=error.line, column=error.column))
        return None


def notebook_error(path: str, notebook: Notebook, message: str, line: int, column: int) -> FileError:
    """An error at a line and column of the notebook's joined cells, placed in its cell and file."""
    if not notebook.cells:
        return FileError(path, message)
    cell, cell_line, cell_column = notebook.cell_position(line, column)
    file_line, file_column = notebook.file_position(line, column)
    return FileError(path, message, line=file_line, column=file_column, cell=cell, cell_line=cell_line, cell_column=cell_column)


def place_in_cells(notebook: Notebook, diagnostic: Diagnostic) -> Diagnostic:
    """A diagnostic positioned in the joined cells, positioned in its cell and in the file."""
    line, column, end_line, end_column = diagnostic.line, diagnostic.column, diagnostic.end_line, diagnostic.end_column
    diagnostic.cell, diagnostic.cell_line, diagnostic.cell_column = notebook.cell_position(line, column)
    end_cell, diagnostic.cell_end_line, diagnostic.cell_end_column = notebook.cell_position(end_line, end_column)
    if end_cell != diagnostic.cell:  # a range cannot cross cells; never expected, kept within the cell
        diagnostic.cell_end_line, diagnostic.cell_end_column = diagnostic.cell_line, diagnostic.cell_column
        end_line, end_column = line, column
    diagnostic.line, diagnostic.column = notebook.file_position(line, column)
    diagnostic.end_line, diagnostic.end_column = notebook.file_position(end_line, end_column)
    diagnostic.fix_edits = None  # edits of the joined cells would not apply to the file: `fix --diff` shows them
    return diagnostic


_OFFERED_BYTES = 16 * 1024


def attach_project(ctx: FileContext, settings: Settings, data: bytes | None = None) -> None:
    """Give the file its project (advisor.project). With ``data``, the bytes on disk the context
    was parsed from, the context is offered to its siblings too."""
    if not settings.project_scope:
        return
    from advisor.project import ProjectView, project_for

    project = project_for(ctx.path, settings.target, parse)
    ctx.project = ProjectView(project, ctx)
    if data is None:
        return
    try:
        stat = os.stat(ctx.path)
    except OSError:
        return
    # Offered only when small (a config, a dataset module): a checked file is seldom asked for
    # again, and every tree kept alive is walked by each full garbage collection.
    if stat.st_size == len(data) and len(data) <= _OFFERED_BYTES:
        project.keep(os.path.abspath(ctx.path), (stat.st_mtime_ns, stat.st_size), ctx)


def project_context(
    path: str, data: bytes, settings: Settings, errors: list[FileError], notebook: Notebook | None = None
) -> FileContext | None:
    """The file's context within its project: one already parsed in this process as another
    file's dependency is reused. A notebook imports its project's modules, but none imports it,
    so it is neither looked up among them nor offered to them."""
    if notebook is not None:
        ctx = analyzable_context(path, data, settings.target, errors, notebook)
        if ctx is not None:
            attach_project(ctx, settings)
        return ctx
    relevant = worth_analysing(path, data, settings)
    if settings.project_scope and relevant:
        from advisor.project import project_for

        cached = project_for(path, settings.target, parse).cached(os.path.abspath(path), len(data))
        # The same size on disk is not the same text: an editor's unsaved buffer (advisor server)
        # that changed `0` to `4` has the size of the file it came from.
        if cached is not None and cached.project is not None and _same_text(cached, data):
            cached.path = path  # reported as the caller names it
            return cached
    ctx = analyzable_context(path, data, settings.target, errors, relevant=relevant)
    if ctx is not None:
        attach_project(ctx, settings, data)
    return ctx


def done_with(ctx: FileContext) -> None:
    """The caller is finished with ``ctx``: drop what was derived from its tree, unless its
    project keeps it for the project's other files. The derived facts point back at the
    context, so without this every tree waits for the cycle collector, and every collection
    until then walks it again (a sixth of a cold check of library code)."""
    view = ctx.project
    if view is None or not view.project.keeps(ctx):
        ctx.release_caches()


def _same_text(ctx: FileContext, data: bytes) -> bool:
    try:
        return ctx.source == decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return False


def dependencies_of(ctx: FileContext) -> tuple[dict[str, str], list[str] | None, str | None]:
    """What the file's results depend on besides its own bytes (see FileResult)."""
    view = ctx.project
    if view is None:
        return {}, None, None
    from advisor.cache import digest

    own = os.path.abspath(ctx.path)
    found: dict[str, str] = {}
    for path in view.consulted_files():
        if path == own:
            continue
        try:
            with open(path, "rb") as handle:
                found[path] = digest(handle.read())
        except OSError:
            found[path] = ""
    importers = view.project.importers.get(own, []) if view.asked_importers else None
    reached = reach_word(view.project.reached(own)) if view.asked_reached else None
    return found, (sorted(importers) if importers is not None else None), reached


def reach_word(reached: bool | None) -> str:
    return "unknown" if reached is None else "yes" if reached else "no"


def file_suppressions(ctx: FileContext) -> frozenset[str] | None:
    """The codes a file-level directive turns off (``ALL`` for a bare one), None without one.
    Only a comment on a line of its own counts, as ruff's ``# ruff: noqa``."""
    if "advisor" not in ctx.source:
        return None
    own_lines = {m.group(1).rstrip() for m in OWN_LINE_FILE_NOQA.finditer(ctx.source)}
    found: set[str] = set()
    for comment in ctx.comments_matching(FILE_NOQA_MENTION):  # a real comment, not text in a string
        match = FILE_NOQA.match(comment.value)
        if match is None or comment.value.rstrip() not in own_lines:
            continue
        codes = match.group("codes")
        found |= {"ALL"} if codes is None else {c.strip().upper() for c in codes.split(",")}
    return frozenset(found) if found else None


def run_rules(ctx: FileContext, codes: Iterable[str]) -> tuple[list[Finding], list[FileError]]:
    """Every enabled rule over one context; findings positioned and filtered by suppressions."""
    findings: list[Finding] = []
    errors: list[FileError] = []
    instances = rule_instances()
    lines: list[str] | None = None
    ctx.begin_check()
    off = file_suppressions(ctx)
    if off is not None:
        codes = [] if "ALL" in off else [c for c in codes if c not in off]
    codes = sorted(codes)
    used: set[tuple[int, str]] = set()  # (line, code) of the suppressions that silenced something
    ran: list[str] = []
    for code in codes:
        rule = instances.get(code)
        if rule is None:
            continue
        try:
            produced = list(rule.check(ctx))
        except Exception as error:  # a rule bug must never take the run down
            errors.append(FileError(ctx.path, f"internal error in {code}: {type(error).__name__}: {error}"))
            continue
        ran.append(code)
        for finding in produced:
            if finding.fix is not None:
                try:
                    withhold_where_premises_fail(ctx, finding)
                except Exception as error:  # a bug in a premise check keeps the finding, never the fix
                    if from_recursion(error):
                        raise
                    errors.append(FileError(ctx.path, f"internal error checking {code}'s fix: {type(error).__name__}: {error}"))
                    finding.as_advice("its premises could not be checked, so the fix is left as advice")
            finding.path = ctx.path
            finding.line, finding.column, finding.end_line, finding.end_column = ctx.position(finding.node)
            if lines is None:
                lines = ctx.source.splitlines()
            # A suppression on the reported line, or on the first line of its statement (a
            # keyword of a call that spans lines is reported on its own line).
            candidates = {finding.line}
            statement = ctx.statement_of(finding.node)
            if statement is not None and statement is not finding.node:
                candidates.add(ctx.position(statement)[0])
            silenced_by = next((n for n in sorted(candidates) if 0 < n <= len(lines) and suppressed(lines[n - 1], finding.code)), None)
            if silenced_by is None:
                findings.append(finding)
            else:
                used.add((silenced_by, finding.code))
    if UNUSED_NOQA in ran:
        from advisor.rules.suppressions import unused_suppressions

        for finding in unused_suppressions(ctx, ran, used):
            finding.path = ctx.path
            finding.line, finding.column, finding.end_line, finding.end_column = ctx.position(finding.node)
            findings.append(finding)
    findings.sort(key=Finding.sort_key)
    return _dedupe(findings), errors


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple] = set()
    unique = []
    for finding in findings:
        key = (finding.code, finding.line, finding.column, finding.message)
        if key not in seen:
            seen.add(key)
            unique.append(finding)
    return unique


def to_diagnostic(finding: Finding) -> Diagnostic:
    fix = finding.fix
    return Diagnostic(
        path=finding.path,
        line=finding.line,
        column=finding.column,
        end_line=finding.end_line,
        end_column=finding.end_column,
        code=finding.code,
        name=finding.name,
        message=finding.message,
        fix_applicability=fix.applicability.value if fix and fix.applicability is not Applicability.NONE else None,
        fix_description=fix.description if fix and fix.applicability is not Applicability.NONE else None,
    )


def check_file(path: str, settings: Settings, data: bytes | None = None) -> FileResult:
    result = FileResult(path)
    try:
        if data is None:
            with open(path, "rb") as handle:
                data = handle.read()
    except OSError as error:
        result.errors.append(FileError(path, f"cannot read: {error.strerror or error}"))
        return result
    notebook = None
    if is_notebook(path):
        notebook = read_notebook(path, data, result.errors)
        if notebook is None:
            return result
    try:
        ctx = project_context(path, data, settings, result.errors, notebook)
        if ctx is None:
            return result
        findings, errors = run_rules(ctx, settings.codes_for(path))
        result.dependencies, result.importers, result.reached = dependencies_of(ctx)
        if ctx.project is not None and ctx.project.asked_called:
            result.called = dict(ctx.project.asked_called)
        if ctx.project is not None and ctx.project.asked_mentions:
            result.mentions = dict(ctx.project.asked_mentions)
        if ctx.project is not None and ctx.project.asked_texts:
            result.asked_texts = True
        if result.reached is not None or result.called or result.mentions or result.asked_texts:
            result.project_stamp = ctx.project.project.stamp  # type: ignore[union-attr]
    except Exception as error:
        if not from_recursion(error):
            raise
        result.errors.append(FileError(path, TOO_DEEP_FOR_LIBCST))
        return result
    result.diagnostics = [to_diagnostic(f) for f in findings]
    if settings.fix_edits and notebook is None:
        for finding, diagnostic in zip(findings, result.diagnostics):
            if diagnostic.fix_applicability is not None:
                # Expression-level fixes only (most: a keyword set, a name swapped): generating
                # the whole file again per finding made JSON output four times slower. Fixes that
                # add or remove statements or imports come without edits (``advisor fix --diff``).
                diagnostic.fix_edits = _expression_edits(ctx, finding)
    if notebook is not None:
        result.diagnostics = [place_in_cells(notebook, d) for d in result.diagnostics]
    result.errors.extend(errors)
    done_with(ctx)
    return result


def _expression_edits(ctx: FileContext, finding: Finding) -> list[dict] | None:
    """The fix's edits as text edits of the expressions they replace, without generating the
    whole file again (most fixes set a keyword or swap a name); None where that does not hold
    (statements, imports to add, text that does not read back the same)."""
    fix = finding.fix
    if fix is None or fix.imports:
        return None
    edits: list[dict] = []
    for edit in fix.edits:
        if not isinstance(edit.node, cst.BaseExpression) or not isinstance(edit.replacement, cst.BaseExpression):
            return None
        start, end = ctx.span(edit.node)
        old = ctx.source[start:end]
        if old != ctx.module.code_for_node(edit.node):
            return None
        new = ctx.module.code_for_node(edit.replacement)
        same_start = len(os.path.commonprefix([old, new]))
        same_end = len(os.path.commonprefix([old[same_start:][::-1], new[same_start:][::-1]]))
        edits.append({
            "content": new[same_start : len(new) - same_end],
            "location": _row_column(ctx, start + same_start),
            "end_location": _row_column(ctx, end - same_end),
        })
    return edits or None


def _row_column(ctx: FileContext, offset: int) -> dict:
    row, column = ctx.line_column(offset)
    return {"row": row, "column": column}


def _check_chunk(args: tuple[list[str], Settings]) -> list[FileResult]:
    paths, settings = args
    return [check_file(path, settings) for path in paths]


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# Allocations between two young-generation garbage collections while files are analysed
# (CPython's default is 700). A parse allocates hundreds of thousands of nodes that all stay
# alive until the file is done; collecting every 700 of them re-examines the same live trees
# over and over (a sixth of a check's time on bench/analyzer's corpora). The garbage they
# leave is collected all the same, later: peak memory moves by a few per cent.
_YOUNG_COLLECTION_EVERY = 50_000


def _collect_less_often() -> None:
    threshold = gc.get_threshold()
    if threshold[0] and threshold[0] < _YOUNG_COLLECTION_EVERY:  # 0: the host turned collection off
        gc.set_threshold(_YOUNG_COLLECTION_EVERY, *threshold[1:])


@contextmanager
def _collecting_less_often() -> Iterator[None]:
    threshold = gc.get_threshold()
    _collect_less_often()
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


def map_files(func, paths: Sequence[str], settings: Settings, jobs: int | None = None) -> Iterator:
    """Apply ``func(chunk, settings)`` over files, in a process pool when it pays."""
    jobs = default_jobs() if jobs is None else jobs
    if jobs <= 1 or len(paths) < PARALLEL_THRESHOLD:
        with _collecting_less_often():
            yield from func((list(paths), settings))
        return
    chunk_size = max(1, min(64, len(paths) // (jobs * 4) or 1))
    chunks = [(list(paths[i : i + chunk_size]), settings) for i in range(0, len(paths), chunk_size)]
    with ProcessPoolExecutor(max_workers=jobs, initializer=_collect_less_often) as pool:
        for results in pool.map(func, chunks):
            yield from results


def _check_chunk_with_digest(args: tuple[list[str], Settings]) -> list[tuple[FileResult, str | None]]:
    """Like ``_check_chunk``, with the digest of the very bytes analyzed (None when unreadable)."""
    from advisor.cache import digest

    paths, settings = args
    results = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            results.append((check_file(path, settings), None))
            continue
        results.append((check_file(path, settings, data), digest(data)))
    return results


def check_paths(
    paths: Sequence[str],
    settings: Settings,
    jobs: int | None = None,
    cache: "Cache | None" = None,
    progress: Callable[[int], None] | None = None,
) -> list[FileResult]:
    """Check files; with a cache, only the misses are analyzed (in the pool when it pays).

    ``progress(n)`` is told each time ``n`` more files are done.
    """
    from advisor.project import forget_projects

    forget_projects()  # files may have changed since the last run in this process
    if cache is None:
        results = []
        for result in map_files(_check_chunk, paths, settings, jobs):
            results.append(result)
            if progress is not None:
                progress(1)
        return results
    from advisor.cache import digest

    done: dict[int, FileResult] = {}
    misses: list[int] = []
    for index, path in enumerate(paths):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            misses.append(index)  # check_file reports it
            continue
        if not worth_analysing(path, data, settings):
            done[index] = FileResult(path)  # the prefilter is cheaper than a cache lookup
            continue
        cached = cache.get(path, digest(data))
        if cached is None:
            misses.append(index)
        else:
            done[index] = cached
    if progress is not None and done:
        progress(len(done))
    miss_paths = [paths[i] for i in misses]
    for index, (result, content_digest) in zip(misses, map_files(_check_chunk_with_digest, miss_paths, settings, jobs)):
        done[index] = result
        if content_digest is not None:
            cache.put(result, content_digest)
        if progress is not None:
            progress(1)
    cache.save()
    return [done[i] for i in range(len(paths))]
