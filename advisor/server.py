"""``advisor server``: a Language Server Protocol server over stdio (pygls).

What an editor gets, from the same engine and fixer as ``check`` and ``fix``:

- diagnostics for open Python files and Jupyter notebooks (LSP 3.17 notebook documents), on
  open, on change (debounced) and on save: the rule's code, a link to its documentation, the
  positions and messages ``check`` reports;
- code actions: each fixable finding's fix (safe ones preferred, unsafe ones labelled), "Fix
  all safe" for the file (``source.fixAll.advisor``), and "Suppress CODE on this line"
  (``# noqa: CODE``);
- hover on a finding: ``advisor explain CODE``.

Settings come from ``[tool.advisor]`` as ``check`` reads them, re-read when the pyproject.toml
changes (its mtime, looked at on every check, or ``workspace/didChangeWatchedFiles``); the
client's ``initializationOptions`` stand for the command line (``gpu``, ``gpus``, ``select``,
``extendSelect``, ``ignore``, ``projectScope``, ``debounceMs``).

Checks run one at a time on a thread of their own (the engine keeps per-process caches that
are not shared between threads), so the connection keeps answering while a file is analysed.
pygls is an optional dependency (``pip install 'advisor[server]'``): nothing else imports this
module.
"""
from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from advisor import __version__
from advisor.config import ConfigError, find_pyproject
from advisor.engine import Diagnostic, FileError, Settings, _collect_less_often, check_file, decode, source_encoding
from advisor.targets import UnknownGPU

SOURCE = "advisor"
FIX_ALL_KIND = "source.fixAll.advisor"
# Where each rule's documentation is read, by its heading's anchor: the repository that the
# README's pre-commit section installs from (pyproject.toml declares no project URL).
RULES_DOCUMENTATION = "https://github.com/advisor-dev/advisor/blob/main/docs/rules.md"
# Changes closer together than this make one check. Short, so that the diagnostics still
# follow a change within the 200 ms budget (bench/server/latency.py); the clients' own
# change batching does most of the coalescing.
DEFAULT_DEBOUNCE_MS = 30
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # LSP's line terminators (str.splitlines knows more)


@dataclass
class ClientOptions:
    """The client's ``initializationOptions``: what a command line would say."""

    gpu: str | None = None
    gpus: int | None = None
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    project_scope: bool = True
    debounce_ms: int = DEFAULT_DEBOUNCE_MS

    @classmethod
    def from_json(cls, options: Any) -> "ClientOptions":
        if not isinstance(options, dict):
            return cls()

        def codes(key: str) -> list[str]:
            value = options.get(key) or []
            if isinstance(value, str):
                value = [part for part in value.split(",")]
            return [str(code).strip() for code in value if str(code).strip()]

        gpus = options.get("gpus")
        debounce = options.get("debounceMs", DEFAULT_DEBOUNCE_MS)
        return cls(
            gpu=str(options["gpu"]) if options.get("gpu") else None,
            gpus=gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 else None,
            select=codes("select") or None,
            extend_select=codes("extendSelect"),
            ignore=codes("ignore"),
            project_scope=options.get("projectScope", True) is not False,
            debounce_ms=debounce if isinstance(debounce, int) and not isinstance(debounce, bool) and debounce >= 0 else DEFAULT_DEBOUNCE_MS,
        )


@dataclass
class Checked:
    """One check of one version of a document: what ``check`` reported for that text."""

    version: int | None
    text: str
    data: bytes
    path: str
    settings: Settings | None
    diagnostics: list[Diagnostic]
    errors: list[FileError]
    # A notebook's: its cells' URIs, in order (a finding's ``cell`` is its 1-based number here).
    cell_uris: list[str] | None = None
    # Fixed texts computed for this version: editors ask for code actions at every cursor move,
    # and "Fix all" runs every fix round.
    fixed: dict[tuple, bytes | None] = field(default_factory=dict)

    def once(self, key: tuple, compute: Callable[[], bytes | None]) -> bytes | None:
        if key not in self.fixed:
            self.fixed[key] = compute()
        return self.fixed[key]


# -- text and positions ----------------------------------------------------------------------
def lsp_lines(text: str) -> list[str]:
    """The document's lines as LSP counts them, without their line breaks."""
    return _LINE_BREAK.split(text)


def client_column(line_text: str, column: int, encoding: str) -> int:
    """A 0-based column in code points turned into the client's position encoding."""
    prefix = line_text[:column]
    if encoding == types.PositionEncodingKind.Utf8:
        return len(prefix.encode("utf-8"))
    if encoding == types.PositionEncodingKind.Utf32:
        return len(prefix)
    return len(prefix.encode("utf-16-le", "surrogatepass")) // 2


def server_column(line_text: str, units: int, encoding: str) -> int:
    """A client column (in its encoding's units) turned into a 0-based column in code points."""
    if encoding == types.PositionEncodingKind.Utf32:
        return min(units, len(line_text))
    counted = 0
    for index, char in enumerate(line_text):
        if counted >= units:
            return index
        if encoding == types.PositionEncodingKind.Utf8:
            counted += len(char.encode("utf-8"))
        else:
            counted += 2 if ord(char) > 0xFFFF else 1
    return len(line_text)


def to_position(lines: Sequence[str], line: int, column: int, encoding: str) -> types.Position:
    """advisor's 1-based line and column (code points) as an LSP position, clamped to the text."""
    row = min(max(line - 1, 0), max(len(lines) - 1, 0))
    text = lines[row] if lines else ""
    return types.Position(line=row, character=client_column(text, min(max(column - 1, 0), len(text)), encoding))


def offset_position(text: str, lines: Sequence[str], offset: int, encoding: str) -> types.Position:
    """The LSP position of a character offset in ``text``."""
    row = 0
    start = 0
    for match in _LINE_BREAK.finditer(text, 0, offset):
        if match.end() > offset:
            break
        row += 1
        start = match.end()
    return types.Position(line=row, character=client_column(lines[row], offset - start, encoding))


def text_edits(old: str, new: str, encoding: str) -> list[types.TextEdit]:
    """The edits that turn ``old`` into ``new``: one per run of changed lines, so that an
    import added at the top and a keyword set on line 80 stay two small edits."""
    old_lines = old.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    starts = [0]
    for line in old_lines:
        starts.append(starts[-1] + len(line))
    lines = lsp_lines(old)
    edits = []
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        edits.append(types.TextEdit(
            range=types.Range(
                start=offset_position(old, lines, starts[i1], encoding),
                end=offset_position(old, lines, starts[i2], encoding),
            ),
            new_text="".join(new_lines[j1:j2]),
        ))
    return edits


def as_bytes(text: str) -> bytes:
    """The editor's text as the bytes a file holding it would have (its coding cookie honoured)."""
    data = text.encode("utf-8", "surrogatepass")
    try:
        encoding = source_encoding(data)
        return data if encoding in ("utf-8", "utf-8-sig") else text.encode(encoding)
    except (SyntaxError, LookupError, UnicodeEncodeError):
        return data


def lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


# -- the server ------------------------------------------------------------------------------
class AdvisorServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "advisor",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[
                    types.NotebookDocumentFilterWithCells(
                        notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(language="python")]
                    )
                ],
                save=True,
            ),
        )
        self.options = ClientOptions()
        # One thread: the engine's caches (projects, parsed siblings) belong to one thread at a time.
        self.analysis = ThreadPoolExecutor(max_workers=1, thread_name_prefix="advisor-check")
        self.checked: dict[str, Checked] = {}  # by document (or notebook) URI
        self.pending: dict[str, asyncio.Task] = {}
        self._pyproject_of_folder: dict[str, Path | None] = {}
        self._settings: dict[tuple, Settings | str] = {}
        self._reported_problems: set[str] = set()

    # -- settings
    def settings_for(self, path: str) -> Settings | str:
        """The settings ``advisor check PATH`` would use, with the client's options as its command
        line; a string says why there are none (an invalid ``[tool.advisor]``)."""
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in self._pyproject_of_folder:
            self._pyproject_of_folder[folder] = find_pyproject(Path(folder))
        pyproject = self._pyproject_of_folder[folder]
        try:
            status = pyproject.stat() if pyproject is not None else None
        except OSError:
            status = None
        key = (str(pyproject), status and (status.st_mtime_ns, status.st_size))
        found = self._settings.get(key)
        if found is None:
            found = self._settings[key] = self._read_settings(path)
        return found

    def _read_settings(self, path: str) -> Settings | str:
        from advisor.cli import UsageError, _settings

        options = self.options
        args = argparse.Namespace(
            stdin_filename=None, paths=[path], config=None, select=options.select,
            extend_select=options.extend_select, ignore=options.ignore, extend_ignore=[],
            gpu=options.gpu, gpus=options.gpus, no_project=not options.project_scope,
        )
        try:
            settings, _ = _settings(args)
        except (UsageError, ConfigError, UnknownGPU) as error:
            return str(error)
        return settings

    def forget_settings(self) -> None:
        self._pyproject_of_folder.clear()
        self._settings.clear()

    # -- checks
    def check_text(self, path: str | None, text: str, version: int | None) -> Checked:
        """``check`` of the text as the editor has it (runs on the analysis thread)."""
        data = as_bytes(text)
        settings = self.settings_for(path or os.path.join(os.getcwd(), "untitled.py"))
        if isinstance(settings, str):
            return Checked(version, text, data, path or "untitled.py", None, [], [FileError(path or "untitled.py", settings)])
        if path is None:  # an unsaved buffer belongs to no project
            settings = replace(settings, project_scope=False)
        try:
            result = check_file(path or "untitled.py", settings, data=data)
        except Exception as error:  # an engine bug must not leave the editor with stale findings and no word
            failure = FileError(path or "untitled.py", f"internal error: {type(error).__name__}: {error}")
            return Checked(version, text, data, path or "untitled.py", settings, [], [failure])
        return Checked(version, text, data, path or "untitled.py", settings, result.diagnostics, result.errors)

    async def run_analysis(self, function: Callable, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.analysis, function, *args)

    def encoding(self) -> str:
        return self.workspace.position_encoding or types.PositionEncodingKind.Utf16

    def lsp_diagnostic(self, lines: Sequence[str], diagnostic: Diagnostic | FileError, line: int, column: int,
                       end_line: int | None = None, end_column: int | None = None) -> types.Diagnostic:
        encoding = self.encoding()
        start = to_position(lines, line, column, encoding)
        if end_line is None:  # an error: to the end of its line, so that it can be seen
            end = types.Position(line=start.line, character=client_column(lines[start.line] if lines else "", 10**9, encoding))
        else:
            end = to_position(lines, end_line, end_column or column, encoding)
        code = diagnostic.code
        problem = isinstance(diagnostic, FileError)
        # A heading's anchor, as GitHub makes it: `## ADV101 dataloader-pin-memory`.
        anchor = "" if problem else f"#{code}-{diagnostic.name}".lower()
        return types.Diagnostic(
            range=types.Range(start=start, end=end),
            message=diagnostic.message,
            severity=types.DiagnosticSeverity.Error if problem else types.DiagnosticSeverity.Warning,
            code=code,
            code_description=types.CodeDescription(href=RULES_DOCUMENTATION + anchor),
            source=SOURCE,
            # An unused `# noqa` is drawn faded, as unused code is.
            tags=[types.DiagnosticTag.Unnecessary] if code == "ADV001" else None,
            data={"fixApplicability": diagnostic.fix_applicability} if not problem else None,
        )

    def text_diagnostics(self, checked: Checked) -> list[types.Diagnostic]:
        lines = lsp_lines(checked.text)
        found = [
            self.lsp_diagnostic(lines, d, d.line, d.column, d.end_line, d.end_column) for d in checked.diagnostics
        ]
        if checked.settings is not None:  # else an invalid configuration, said once by report_problems
            found += [self.lsp_diagnostic(lines, e, e.line, e.column) for e in checked.errors]
        return found

    def publish(self, uri: str, version: int | None, diagnostics: list[types.Diagnostic]) -> None:
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=diagnostics)
        )

    def report_problems(self, checked: Checked) -> None:
        """An invalid configuration is said once, as a message, not as a finding in every file."""
        if checked.settings is None and checked.errors:
            message = checked.errors[0].message
            if message not in self._reported_problems:
                self._reported_problems.add(message)
                self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"advisor: {message}"))

    async def check_document(self, uri: str) -> Checked | None:
        """Check the document's current text and publish, unless it changed meanwhile."""
        if uri in self.workspace.notebook_documents:
            return await self.check_notebook(uri)
        document = self.workspace.text_documents.get(uri)
        if document is None:
            return None
        version, text = document.version, document.source
        checked = await self.run_analysis(self.check_text, document.path, text, version)
        current = self.workspace.text_documents.get(uri)
        if current is None or current.version != version:
            return checked  # a newer change has its own check coming
        self.checked[uri] = checked
        self.report_problems(checked)
        self.publish(uri, version, self.text_diagnostics(checked))
        return checked

    def schedule(self, uri: str, delay: float) -> None:
        """Check ``uri`` after ``delay`` seconds; a later change restarts the wait."""
        previous = self.pending.pop(uri, None)
        if previous is not None:
            previous.cancel()

        async def later() -> None:
            if delay:
                await asyncio.sleep(delay)
            await self.check_document(uri)

        task = asyncio.get_running_loop().create_task(later())
        self.pending[uri] = task
        task.add_done_callback(lambda done: self.pending.pop(uri, None) if self.pending.get(uri) is done else None)

    async def current(self, uri: str) -> Checked | None:
        """The check of the document's current version (run now if the last one is older)."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        if notebook is not None:
            uri = notebook.uri
        checked = self.checked.get(uri)
        version = self.version_of(uri)
        if checked is None or checked.version != version:
            checked = await self.check_document(uri)
        return checked

    def version_of(self, uri: str) -> int | None:
        if uri in self.workspace.notebook_documents:
            return self.workspace.notebook_documents[uri].version
        document = self.workspace.text_documents.get(uri)
        return document.version if document is not None else None

    def recheck_all(self) -> None:
        for uri in list(self.workspace.text_documents) + list(self.workspace.notebook_documents):
            if self.workspace.get_notebook_document(cell_uri=uri) is None:  # a cell is checked with its notebook
                self.schedule(uri, 0)

    # -- notebooks
    def notebook_json(self, uri: str) -> tuple[str, list[str]]:
        """The notebook as an .ipynb file would hold it (every cell, in order) and its cells' URIs."""
        notebook = self.workspace.notebook_documents[uri]
        cells, uris = [], []
        for cell in notebook.cells:
            document = self.workspace.text_documents.get(cell.document)
            source = document.source if document is not None else ""
            kind = "code" if cell.kind == types.NotebookCellKind.Code else "markdown"
            entry: dict[str, Any] = {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
            if kind == "code":
                entry.update(execution_count=None, outputs=[])
            cells.append(entry)
            uris.append(cell.document)
        content = {
            "cells": cells, "nbformat": 4, "nbformat_minor": 5,
            "metadata": {"language_info": {"name": "python"}},
        }
        return json.dumps(content, indent=1), uris

    async def check_notebook(self, uri: str) -> Checked | None:
        notebook = self.workspace.notebook_documents.get(uri)
        if notebook is None:
            return None
        version = notebook.version
        content, cell_uris = self.notebook_json(uri)
        path = to_fs_path(uri) or "untitled.ipynb"
        if not path.endswith(".ipynb"):
            path += ".ipynb"
        checked = await self.run_analysis(self.check_text, path, content, version)
        checked.cell_uris = cell_uris
        current = self.workspace.notebook_documents.get(uri)
        if current is None or current.version != version:
            return checked
        self.checked[uri] = checked
        self.report_problems(checked)
        per_cell: dict[str, list[types.Diagnostic]] = {cell: [] for cell in cell_uris}
        errors = checked.errors if checked.settings is not None else []
        for item in [*checked.diagnostics, *errors]:
            if item.cell is None or not 0 < item.cell <= len(cell_uris):
                continue
            cell_uri = cell_uris[item.cell - 1]
            document = self.workspace.text_documents.get(cell_uri)
            lines = lsp_lines(document.source if document is not None else "")
            if isinstance(item, FileError):
                per_cell[cell_uri].append(self.lsp_diagnostic(lines, item, item.cell_line or 1, item.cell_column or 1))
            else:
                per_cell[cell_uri].append(self.lsp_diagnostic(
                    lines, item, item.cell_line, item.cell_column, item.cell_end_line, item.cell_end_column
                ))
        for cell_uri, diagnostics in per_cell.items():
            self.publish(cell_uri, None, diagnostics)
        return checked

    # -- code actions
    def shown_in(self, uri: str, checked: Checked) -> list[tuple[Diagnostic, types.Diagnostic]]:
        """The findings shown in document ``uri`` (a file, or one notebook cell), with their LSP form."""
        if checked.cell_uris is None:
            lines = lsp_lines(checked.text)
            return [
                (d, self.lsp_diagnostic(lines, d, d.line, d.column, d.end_line, d.end_column)) for d in checked.diagnostics
            ]
        if uri not in checked.cell_uris:
            return []
        number = checked.cell_uris.index(uri) + 1
        document = self.workspace.text_documents.get(uri)
        lines = lsp_lines(document.source if document is not None else "")
        return [
            (d, self.lsp_diagnostic(lines, d, d.cell_line, d.cell_column, d.cell_end_line, d.cell_end_column))
            for d in checked.diagnostics if d.cell == number
        ]

    def finding_actions(self, uri: str, checked: Checked, wanted: types.Range, only: list[str] | None) -> list[types.CodeAction]:
        """Fix and suppression actions for the findings that ``wanted`` touches (runs on the analysis thread)."""
        from advisor.cli import _add_noqa_to_notebook
        from advisor.edits import add_noqa
        from advisor.fixer import fix_finding

        actions: list[types.CodeAction] = []
        if checked.settings is None or not _wanted(only, types.CodeActionKind.QuickFix):
            return actions
        for diagnostic, lsp in self.shown_in(uri, checked):
            if not _touches(lsp.range, wanted):
                continue
            if diagnostic.fix_applicability is not None:
                fixed = checked.once(
                    ("fix", diagnostic.code, diagnostic.line, diagnostic.column),
                    lambda: fix_finding(checked.path, checked.data, checked.settings, diagnostic),
                )
                if fixed is not None:
                    unsafe = diagnostic.fix_applicability in ("unsafe", "measured")
                    title = f"Fix {diagnostic.code}: {lower_first(diagnostic.fix_description or diagnostic.name)}"
                    label = {"unsafe": " (unsafe fix)", "measured": " (unsafe fix; its gain depends on sizes: `fix --verify` measures it)"}
                    actions.append(types.CodeAction(
                        title=title + label.get(diagnostic.fix_applicability or "", ""),
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[lsp],
                        is_preferred=not unsafe,
                        edit=self.workspace_edit(uri, checked, fixed),
                    ))
            def suppressed() -> bytes | None:
                if checked.cell_uris is None:
                    updated, added, _ = add_noqa(checked.data, {diagnostic.line: {diagnostic.code}})
                else:
                    updated, added, _ = _add_noqa_to_notebook(checked.data, [diagnostic])
                return updated if added else None

            updated = checked.once(("noqa", diagnostic.code, diagnostic.line), suppressed)
            if updated is not None:
                actions.append(types.CodeAction(
                    title=f"Suppress {diagnostic.code} on this line",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[lsp],
                    edit=self.workspace_edit(uri, checked, updated),
                ))
        return actions

    def fix_all_action(self, uri: str, checked: Checked) -> types.CodeAction | None:
        """Every safe fix, as ``advisor fix`` applies them (runs on the analysis thread)."""
        from advisor.fixer import fix_source

        if checked.settings is None or not any(d.fix_applicability == "safe" for d in checked.diagnostics):
            return None

        def all_safe_fixes() -> bytes | None:
            result = fix_source(checked.path, checked.data, checked.settings, unsafe=False)
            return result.fixed if result.changed and not result.errors else None

        fixed = checked.once(("all safe",), all_safe_fixes)
        if fixed is None:
            return None
        return types.CodeAction(title="Fix all safe advisor findings", kind=FIX_ALL_KIND, edit=self.workspace_edit(uri, checked, fixed))

    def workspace_edit(self, uri: str, checked: Checked, fixed: bytes) -> types.WorkspaceEdit:
        """The edits that turn the checked text into ``fixed`` (a file's bytes; for a notebook, the
        .ipynb's bytes: an edit for each cell whose source changed)."""
        encoding = self.encoding()
        if checked.cell_uris is None:
            return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=checked.version),
                edits=text_edits(checked.text, decode(fixed), encoding),
            )])
        from advisor.notebooks import Notebook

        changes = []
        for number, source in Notebook.from_bytes(fixed).cell_sources().items():
            cell_uri = checked.cell_uris[number - 1]
            document = self.workspace.text_documents.get(cell_uri)
            if document is None or document.source == source:
                continue
            changes.append(types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=cell_uri, version=document.version),
                edits=text_edits(document.source, source, encoding),
            ))
        return types.WorkspaceEdit(document_changes=changes)

    def code_actions(self, uri: str, checked: Checked, wanted: types.Range, only: list[str] | None) -> list[types.CodeAction]:
        actions = self.finding_actions(uri, checked, wanted, only)
        if _wanted(only, FIX_ALL_KIND):
            fix_all = self.fix_all_action(uri, checked)
            if fix_all is not None:
                actions.append(fix_all)
        return actions


def _wanted(only: list[str] | None, kind: str) -> bool:
    """Whether the client asked for actions of ``kind`` (``only`` lists kinds or their prefixes)."""
    return not only or any(kind == k or kind.startswith(k + ".") for k in only)


def _touches(found: types.Range, wanted: types.Range) -> bool:
    def key(position: types.Position) -> tuple[int, int]:
        return (position.line, position.character)

    return key(found.start) <= key(wanted.end) and key(wanted.start) <= key(found.end)


def create_server() -> AdvisorServer:
    server = AdvisorServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: AdvisorServer, params: types.InitializeParams) -> None:
        ls.options = ClientOptions.from_json(params.initialization_options)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: AdvisorServer, params: types.InitializedParams) -> None:
        watched = ls.client_capabilities.workspace and ls.client_capabilities.workspace.did_change_watched_files
        if watched and watched.dynamic_registration:
            await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
                id="advisor-pyproject",
                method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=[
                    types.FileSystemWatcher(glob_pattern="**/pyproject.toml"),
                    types.FileSystemWatcher(glob_pattern="**/*.py"),
                ]),
            )]))

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: AdvisorServer, params: types.DidOpenTextDocumentParams) -> None:
        if ls.workspace.get_notebook_document(cell_uri=params.text_document.uri) is None:
            ls.schedule(params.text_document.uri, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: AdvisorServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        notebook = ls.workspace.get_notebook_document(cell_uri=uri)
        ls.schedule(notebook.uri if notebook is not None else uri, ls.options.debounce_ms / 1000)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: AdvisorServer, params: types.DidSaveTextDocumentParams) -> None:
        await ls.run_analysis(_forget_projects)  # the project's files on disk changed: read them again
        ls.recheck_all()

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    async def did_close(ls: AdvisorServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        task = ls.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        ls.checked.pop(uri, None)
        ls.publish(uri, None, [])

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    async def notebook_open(ls: AdvisorServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri, 0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    async def notebook_change(ls: AdvisorServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri, ls.options.debounce_ms / 1000)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    async def notebook_save(ls: AdvisorServer, params: types.DidSaveNotebookDocumentParams) -> None:
        await ls.run_analysis(_forget_projects)
        ls.recheck_all()

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    async def notebook_close(ls: AdvisorServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.checked.pop(params.notebook_document.uri, None)
        for cell in params.cell_text_documents:
            ls.publish(cell.uri, None, [])

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    async def watched_files_changed(ls: AdvisorServer, params: types.DidChangeWatchedFilesParams) -> None:
        ls.forget_settings()
        await ls.run_analysis(_forget_projects)
        ls.recheck_all()

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]),
    )
    async def code_action(ls: AdvisorServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        uri = params.text_document.uri
        checked = await ls.current(uri)
        if checked is None:
            return None
        return await ls.run_analysis(ls.code_actions, uri, checked, params.range, params.context.only)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: AdvisorServer, params: types.HoverParams) -> types.Hover | None:
        return await hover_at(ls, params.text_document.uri, params.position)

    return server


async def hover_at(ls: AdvisorServer, uri: str, position: types.Position) -> types.Hover | None:
    """``advisor explain CODE`` for each finding under the cursor."""
    from advisor.registry import rule_by_code
    from advisor.report import ADV000_DOC

    checked = await ls.current(uri)
    if checked is None:
        return None
    shown = [(d.code, lsp.range) for d, lsp in ls.shown_in(uri, checked)]
    if checked.cell_uris is None and checked.settings is not None:
        lines = lsp_lines(checked.text)
        shown += [(e.code, ls.lsp_diagnostic(lines, e, e.line, e.column).range) for e in checked.errors if e.code == "ADV000"]
    here = types.Range(start=position, end=position)
    documentation: list[str] = []
    found_range = None
    for code, span in shown:
        if not _touches(span, here):
            continue
        rule = rule_by_code(code)
        text = ADV000_DOC if code == "ADV000" else (rule.documentation() if rule is not None else None)
        if text and text not in documentation:
            documentation.append(text)
            found_range = found_range or span
    if not documentation:
        return None
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n---\n\n".join(documentation)),
        range=found_range,
    )


def _forget_projects() -> None:
    from advisor.project import forget_projects

    forget_projects()


def main() -> int:
    """Serve one client over stdin and stdout until it says ``exit``."""
    _collect_less_often()  # the whole process analyses files: collect as ``check``'s workers do
    create_server().start_io()
    return 0
