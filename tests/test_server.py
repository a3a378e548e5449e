"""``advisor server`` (issue 13), driven the way an editor drives it: pygls's language client
starts ``python -m advisor server`` and talks LSP to it over stdio. The diagnostics are compared
with what ``advisor check`` reports, and every edit is applied to the text and the result read."""
from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pygls")
from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from advisor.cli import build_parser, _settings  # noqa: E402
from advisor.engine import check_file  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# Waits for the server: generous, as the test machine may be busy; a failure says what was missing.
WAIT_SECONDS = 60

# ADV101 (safe fix), ADV102 (unsafe fix under a __main__ guard: none here, advice), ADV601 (safe).
TRAIN = textwrap.dedent(
    """\
    import torch
    from torch.utils.data import DataLoader

    model = model.cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset, batch_size=32, num_workers=2)
    for x, y in loader:
        loss = model(x.cuda()).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    """
)


class Editor:
    """An LSP client session with the server, keeping the last diagnostics published per URI."""

    def __init__(
        self, root: Path, options: dict | None = None, encodings: list[str] | None = None, watches_files: bool = False
    ) -> None:
        self.root = root
        self.options = options
        self.encodings = encodings
        self.watches_files = watches_files
        self.registrations: list[types.Registration] = []
        self.client = LanguageClient("advisor-tests", "1")
        self.published: dict[str, types.PublishDiagnosticsParams] = {}
        self.history: list[tuple[str, int | None]] = []  # (uri, version) of every publication
        self.messages: list[str] = []
        self.changed = asyncio.Event()
        self.versions: dict[str, int] = {}
        self.texts: dict[str, str] = {}

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(params: types.PublishDiagnosticsParams) -> None:
            self.published[params.uri] = params
            self.history.append((params.uri, params.version))
            self.changed.set()

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def shown(params: types.ShowMessageParams) -> None:
            self.messages.append(params.message)
            self.changed.set()

        @self.client.feature(types.CLIENT_REGISTER_CAPABILITY)
        def register(params: types.RegistrationParams) -> None:
            self.registrations.extend(params.registrations)
            self.changed.set()

    async def __aenter__(self) -> "Editor":
        await self.client.start_io(sys.executable, "-m", "advisor", "server", cwd=str(self.root))
        general = types.GeneralClientCapabilities(position_encodings=self.encodings) if self.encodings else None
        workspace = types.WorkspaceClientCapabilities(
            did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True)
        ) if self.watches_files else None
        self.initialized = await asyncio.wait_for(self.client.initialize_async(types.InitializeParams(
            process_id=None,
            root_uri=self.root.as_uri(),
            capabilities=types.ClientCapabilities(general=general, workspace=workspace),
            initialization_options=self.options,
        )), WAIT_SECONDS)
        self.client.initialized(types.InitializedParams())
        return self

    async def __aexit__(self, *exc_info) -> None:
        await asyncio.wait_for(self.client.shutdown_async(None), WAIT_SECONDS)
        self.client.exit(None)
        await self.client.stop()

    def uri(self, name: str) -> str:
        return (self.root / name).as_uri()

    def open(self, name: str, text: str | None = None) -> str:
        uri = self.uri(name)
        text = (self.root / name).read_text() if text is None else text
        self.versions[uri], self.texts[uri] = 1, text
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        ))
        return uri

    def change(self, uri: str, start: tuple[int, int], end: tuple[int, int], new_text: str) -> None:
        """An incremental change, as editors send them (0-based line and character)."""
        self.versions[uri] += 1
        self.texts[uri] = apply_edits(self.texts[uri], [types.TextEdit(range=lsp_range(start, end), new_text=new_text)])
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[types.TextDocumentContentChangePartial(range=lsp_range(start, end), text=new_text)],
        ))

    async def diagnostics(self, uri: str, version: int | None = None) -> list[types.Diagnostic]:
        """The diagnostics published for ``uri`` (for its ``version``, when given)."""
        async def arrived() -> list[types.Diagnostic]:
            while True:
                found = self.published.get(uri)
                if found is not None and (version is None or found.version == version):
                    return found.diagnostics
                self.changed.clear()
                await self.changed.wait()

        return await asyncio.wait_for(arrived(), WAIT_SECONDS)

    async def registered(self) -> list[types.Registration]:
        """The capabilities the server registered, once it has registered some."""
        async def arrived() -> list[types.Registration]:
            while not self.registrations:
                self.changed.clear()
                await self.changed.wait()
            return self.registrations

        return await asyncio.wait_for(arrived(), WAIT_SECONDS)

    async def actions(self, uri: str, at: types.Range, only: list[str] | None = None) -> list[types.CodeAction]:
        found = await asyncio.wait_for(self.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=at,
            context=types.CodeActionContext(diagnostics=[], only=only),
        )), WAIT_SECONDS)
        return list(found or [])

    async def hover(self, uri: str, line: int, character: int) -> types.Hover | None:
        return await asyncio.wait_for(self.client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character)
        )), WAIT_SECONDS)


def lsp_range(start: tuple[int, int], end: tuple[int, int]) -> types.Range:
    return types.Range(start=types.Position(*start), end=types.Position(*end))


def offset(text: str, position: types.Position) -> int:
    """The offset of an LSP position (UTF-16 units; the tests' text is ASCII where it matters)."""
    lines = text.splitlines(keepends=True)
    return sum(len(line) for line in lines[: position.line]) + position.character


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply edits as an editor does: all positions refer to the text before any of them."""
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(text, edit.range.start)] + edit.new_text + text[offset(text, edit.range.end):]
    return text


def edited(text: str, action: types.CodeAction) -> str:
    assert action.edit is not None and action.edit.document_changes, action
    (change,) = action.edit.document_changes
    return apply_edits(text, list(change.edits))


def check_json(path: Path, *options: str) -> list[dict]:
    """What ``advisor check`` reports for the file, as (code, line, column, end, message)."""
    args = build_parser().parse_args(["check", str(path), *options])
    settings, _ = _settings(args)
    return [
        (d.code, d.line, d.column, d.end_line, d.end_column, d.message)
        for d in sorted(check_file(str(path), settings).diagnostics, key=lambda d: d.sort_key())
    ]


def as_check(diagnostics: list[types.Diagnostic]) -> list[tuple]:
    """LSP diagnostics in ``check``'s terms (1-based lines and columns)."""
    return sorted(
        (d.code, d.range.start.line + 1, d.range.start.character + 1, d.range.end.line + 1, d.range.end.character + 1, d.message)
        for d in diagnostics
    )


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.advisor]\n")
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def test_open_publishes_what_check_reports_with_code_link_and_severity(project):
    async def scenario():
        async with Editor(project) as editor:
            capabilities = editor.initialized.capabilities
            assert capabilities.code_action_provider and capabilities.hover_provider
            return await editor.diagnostics(editor.open("train.py"), 1)

    diagnostics = run(scenario())
    assert as_check(diagnostics) == sorted(check_json(project / "train.py"))
    assert {d.code for d in diagnostics} >= {"ADV101", "ADV601"}
    pin = next(d for d in diagnostics if d.code == "ADV101")
    assert pin.source == "advisor" and pin.severity == types.DiagnosticSeverity.Warning
    assert pin.code_description.href.endswith("docs/rules.md#adv101-dataloader-pin-memory")
    # The anchor is a heading of docs/rules.md.
    assert "## ADV101 dataloader-pin-memory" in (REPO / "docs" / "rules.md").read_text()


def test_change_is_checked_on_the_text_in_the_editor_not_on_disk(project):
    # On disk the loader turns pinning off (ADV101); the editor's change `False` -> `True ` keeps
    # the file's size, which is all a cache keyed on the file's size and mtime would see.
    unpinned = TRAIN.replace("num_workers=2)", "num_workers=2, pin_memory=False)")
    (project / "train.py").write_text(unpinned)
    line = unpinned.splitlines().index("loader = DataLoader(dataset, batch_size=32, num_workers=2, pin_memory=False)")
    column = unpinned.splitlines()[line].index("False")

    async def scenario():
        async with Editor(project) as editor:
            uri = editor.open("train.py")
            first = await editor.diagnostics(uri, 1)
            editor.change(uri, (line, column), (line, column + 5), "True ")
            second = await editor.diagnostics(uri, 2)
            editor.change(uri, (line, column), (line, column + 5), "False")
            third = await editor.diagnostics(uri, 3)
            return first, second, third, editor.texts[uri]

    first, second, third, text = run(scenario())
    assert "ADV101" in {d.code for d in first}
    assert "ADV101" not in {d.code for d in second}
    assert "ADV101" in {d.code for d in third}
    assert as_check(third) == sorted(check_json(project / "train.py"))
    assert text == unpinned


def test_syntax_error_is_an_error_diagnostic_and_an_untitled_buffer_is_checked(project):
    async def scenario():
        async with Editor(project) as editor:
            broken = await editor.diagnostics(editor.open("broken.py", "import torch\nx = (\n"), 1)
            untitled = "untitled:Untitled-1"  # never saved: no path, no project
            editor.client.text_document_did_open(types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=untitled, language_id="python", version=1, text=TRAIN)
            ))
            return broken, await editor.diagnostics(untitled, 1)

    (diagnostic,), untitled = run(scenario())
    assert diagnostic.code == "ADV000" and diagnostic.severity == types.DiagnosticSeverity.Error
    assert diagnostic.message.startswith("syntax error")
    assert (diagnostic.range.start.line, diagnostic.range.start.character) == (1, 4)
    assert as_check(untitled) == sorted(check_json(project / "train.py", "--no-project"))


def test_fix_actions_apply_the_same_fix_as_advisor_fix(project):
    async def scenario():
        async with Editor(project) as editor:
            uri = editor.open("train.py")
            diagnostics = await editor.diagnostics(uri, 1)
            pin = next(d for d in diagnostics if d.code == "ADV101")
            at_pin = await editor.actions(uri, pin.range)
            fix_all = await editor.actions(uri, lsp_range((0, 0), (0, 0)), only=["source.fixAll"])
            quick_only = await editor.actions(uri, pin.range, only=[types.CodeActionKind.QuickFix])
            return at_pin, fix_all, quick_only

    at_pin, fix_all, quick_only = run(scenario())
    titles = [a.title for a in at_pin]
    assert "Fix ADV101: set `pin_memory=True`" in titles and "Suppress ADV101 on this line" in titles
    fix = next(a for a in at_pin if a.title.startswith("Fix ADV101"))
    assert fix.is_preferred and fix.kind == types.CodeActionKind.QuickFix
    assert fix.diagnostics and fix.diagnostics[0].code == "ADV101"
    # Only this finding's fix: the optimizer stays unfused.
    assert edited(TRAIN, fix) == TRAIN.replace("num_workers=2)", "num_workers=2, pin_memory=True)")
    suppress = next(a for a in at_pin if a.title == "Suppress ADV101 on this line")
    assert edited(TRAIN, suppress) == TRAIN.replace("num_workers=2)\n", "num_workers=2)  # noqa: ADV101\n")
    assert all(a.kind == types.CodeActionKind.QuickFix for a in quick_only)
    assert not any(a.kind == "source.fixAll.advisor" for a in quick_only)

    (everything,) = fix_all
    assert everything.kind == "source.fixAll.advisor" and everything.title == "Fix all safe advisor findings"
    expected = subprocess_fix(project, TRAIN)
    assert edited(TRAIN, everything) == expected
    assert "pin_memory=True" in expected and "fused=True" in expected


def subprocess_fix(project: Path, text: str) -> str:
    """``advisor fix -`` on the text: what the command line writes."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "advisor", "fix", "-", "--stdin-filename", str(project / "train.py"), "-q"],
        input=text, capture_output=True, text=True, cwd=project, check=False,
    )
    return done.stdout


def test_unsafe_fix_is_labelled_and_not_preferred(project):
    # An fp16 autocast on a bf16 GPU: ADV201's fix (bf16) changes numerics.
    source = textwrap.dedent(
        """\
        import torch

        model = model.cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        for x in data:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """
    )

    async def scenario():
        async with Editor(project, options={"gpu": "A100"}) as editor:
            uri = editor.open("amp.py", source)
            diagnostics = await editor.diagnostics(uri, 1)
            finding = next(d for d in diagnostics if d.code == "ADV201")
            return await editor.actions(uri, finding.range)

    actions = run(scenario())
    fix = next(a for a in actions if a.title.startswith("Fix ADV201"))
    assert fix.title.endswith("(unsafe fix)") and not fix.is_preferred
    assert "torch.bfloat16" in edited(source, fix)


def test_hover_shows_the_rules_documentation(project):
    (project / "train.py").write_text(TRAIN.replace(", num_workers=2)", ")"))  # two findings on the loader

    async def scenario():
        async with Editor(project) as editor:
            uri = editor.open("train.py")
            diagnostics = await editor.diagnostics(uri, 1)
            pin = next(d for d in diagnostics if d.code == "ADV101")
            on_finding = await editor.hover(uri, pin.range.start.line, pin.range.start.character + 2)
            elsewhere = await editor.hover(uri, 0, 0)
            return on_finding, elsewhere

    on_finding, elsewhere = run(scenario())
    from advisor.registry import rule_by_code

    assert on_finding.contents.kind == types.MarkupKind.Markdown
    # The loader holds two findings (ADV101, ADV102): the documentation of each, in turn.
    assert on_finding.contents.value == "\n---\n\n".join(rule_by_code(c).documentation() for c in ("ADV101", "ADV102"))
    assert elsewhere is None


def test_settings_from_pyproject_are_reread_and_options_act_as_the_command_line(project):
    async def scenario():
        async with Editor(project, options={"ignore": ["ADV601"]}, watches_files=True) as editor:
            uri = editor.open("train.py")
            first = {d.code for d in await editor.diagnostics(uri, 1)}
            # A client that can watch files is asked to watch pyproject.toml.
            (registration,) = await editor.registered()
            assert registration.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES
            # (the options arrive as JSON: the client does not know their type)
            assert "**/pyproject.toml" in [w["globPattern"] for w in registration.register_options["watchers"]]
            (project / "pyproject.toml").write_text('[tool.advisor]\nignore = ["ADV101"]\n')
            editor.client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[
                types.FileEvent(uri=editor.uri("pyproject.toml"), type=types.FileChangeType.Changed)
            ]))
            editor.change(uri, (0, 0), (0, 0), "")  # a new version, to wait for its diagnostics
            second = {d.code for d in await editor.diagnostics(uri, 2)}
            (project / "pyproject.toml").write_text('[tool.advisor]\nselect = ["NOPE9"]\n')
            editor.client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[
                types.FileEvent(uri=editor.uri("pyproject.toml"), type=types.FileChangeType.Changed)
            ]))
            editor.change(uri, (0, 0), (0, 0), "")
            third = await editor.diagnostics(uri, 3)
            # No notification this time (a client that watches no files): the next check sees
            # that the file changed.
            (project / "pyproject.toml").write_text('[tool.advisor]\nselect = ["ADV2"]\n')
            editor.change(uri, (0, 0), (0, 0), "")
            fourth = {d.code for d in await editor.diagnostics(uri, 4)}
            return first, second, third, fourth, editor.messages

    first, second, third, fourth, messages = run(scenario())
    assert "ADV101" in first and "ADV601" not in first
    assert "ADV101" not in second and "ADV601" not in second
    # An invalid configuration: said once, as a message, and no findings.
    assert not third and any("unknown rule code(s)" in m and "NOPE9" in m for m in messages)
    assert fourth == {"ADV203"}


def test_positions_follow_the_clients_encoding(project):
    # A non-BMP character before the finding: 2 UTF-16 units, 1 code point, 4 UTF-8 bytes.
    source = TRAIN.replace("loader = DataLoader(", 'x = "\U0001F600"; loader = DataLoader(')

    async def scenario(encodings):
        async with Editor(project, encodings=encodings) as editor:
            chosen = editor.initialized.capabilities.position_encoding
            diagnostics = await editor.diagnostics(editor.open("emoji.py", source), 1)
            return chosen, next(d for d in diagnostics if d.code == "ADV101").range.start.character

    assert run(scenario(None)) == (types.PositionEncodingKind.Utf16, source.splitlines()[5].index("DataLoader") + 1)
    assert run(scenario([types.PositionEncodingKind.Utf32])) == (
        types.PositionEncodingKind.Utf32, source.splitlines()[5].index("DataLoader")
    )


def test_notebook_cells_get_their_own_diagnostics(project):
    cells = ["import torch\nfrom torch.utils.data import DataLoader\nmodel = model.cuda()", "# Data", "loader = DataLoader(ds, batch_size=8, num_workers=2)\nfor x in loader:\n    model(x.cuda()).sum().backward()"]
    notebook_uri = (project / "train.ipynb").as_uri()

    async def scenario():
        async with Editor(project) as editor:
            cell_uris = [f"vscode-notebook-cell:{notebook_uri}#cell{i}" for i in range(len(cells))]
            editor.client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
                notebook_document=types.NotebookDocument(
                    uri=notebook_uri, notebook_type="jupyter-notebook", version=1,
                    cells=[
                        types.NotebookCell(kind=types.NotebookCellKind.Markup if i == 1 else types.NotebookCellKind.Code, document=uri)
                        for i, uri in enumerate(cell_uris)
                    ],
                ),
                cell_text_documents=[
                    types.TextDocumentItem(uri=uri, language_id="markdown" if i == 1 else "python", version=1, text=text)
                    for i, (uri, text) in enumerate(zip(cell_uris, cells))
                ],
            ))
            first = await editor.diagnostics(cell_uris[0])
            third = await editor.diagnostics(cell_uris[2])
            hover = await editor.hover(cell_uris[2], 0, 12)
            pin = next(d for d in third if d.code == "ADV101")
            actions = await editor.actions(cell_uris[2], pin.range)
            fix_all = await editor.actions(cell_uris[2], lsp_range((0, 0), (0, 0)), only=["source.fixAll.advisor"])
            # The loader pinned in the third cell, as an editor sends a cell's text change.
            del editor.published[cell_uris[2]]
            editor.client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
                notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook_uri, version=2),
                change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
                    types.NotebookDocumentCellContentChanges(
                        document=types.VersionedTextDocumentIdentifier(uri=cell_uris[2], version=2),
                        changes=[types.TextDocumentContentChangePartial(range=lsp_range((0, 51), (0, 51)), text=", pin_memory=True")],
                    )
                ])),
            ))
            after_change = await editor.diagnostics(cell_uris[2])
            return first, third, hover, after_change, actions, fix_all, cell_uris

    first, third, hover, after_change, actions, fix_all, cell_uris = run(scenario())
    pin = next(d for d in third if d.code == "ADV101")
    assert (pin.range.start.line, pin.range.start.character) == (0, 9)  # in the cell, not in the joined code
    assert hover is not None and "ADV101" in hover.contents.value
    assert not any(d.code == "ADV101" for d in first)
    # Pinned now, so its batch's blocking copy is worth `non_blocking=True`.
    assert {d.code for d in after_change} == {"ADV103"}

    # Code actions edit the cells, never the notebook's joined code.
    def cell_edits(action: types.CodeAction) -> dict[str, str]:
        return {
            change.text_document.uri: apply_edits(cells[cell_uris.index(change.text_document.uri)], list(change.edits))
            for change in action.edit.document_changes
        }

    fix = next(a for a in actions if a.title == "Fix ADV101: set `pin_memory=True`")
    assert cell_edits(fix) == {cell_uris[2]: cells[2].replace("num_workers=2)", "num_workers=2, pin_memory=True)")}
    suppress = next(a for a in actions if a.title == "Suppress ADV101 on this line")
    assert cell_edits(suppress) == {cell_uris[2]: cells[2].replace("num_workers=2)", "num_workers=2)  # noqa: ADV101")}
    (everything,) = fix_all
    assert cell_edits(everything) == {
        cell_uris[2]: cells[2].replace("num_workers=2)", "num_workers=2, pin_memory=True)").replace("x.cuda()", "x.cuda(non_blocking=True)")
    }


def test_core_install_works_without_pygls_and_the_server_says_what_to_install(tmp_path):
    import subprocess

    # Modules named pygls and lsprotocol that cannot be imported stand for an install without the extra.
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    for name in ("pygls", "lsprotocol"):
        (blocker / f"{name}.py").write_text(f"raise ImportError('no {name} here', name='{name}')\n")
    (tmp_path / "train.py").write_text(TRAIN)
    env = {"PYTHONPATH": str(blocker), "PATH": "/usr/bin:/bin"}

    def advisor(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "advisor", *args], capture_output=True, text=True, cwd=tmp_path, env=env, check=False
        )

    served = advisor("server")
    assert served.returncode == 2 and served.stdout == ""
    assert "pip install 'advisor[server]'" in served.stderr
    checked = advisor("check", "train.py", "-q")
    assert checked.returncode == 1 and "ADV101" in checked.stdout
    import tomllib

    core = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in core if d.lower().startswith(("pygls", "lsprotocol"))]


def test_changes_in_quick_succession_make_one_check_and_save_rechecks(project):
    async def scenario():
        async with Editor(project, options={"debounceMs": 1000}) as editor:
            uri = editor.open("train.py")
            await editor.diagnostics(uri, 1)
            for _ in range(3):  # three keystrokes well within the wait
                editor.change(uri, (0, 0), (0, 0), "#")
            after_typing = await editor.diagnostics(uri, 4)
            del editor.published[uri]
            editor.client.text_document_did_save(types.DidSaveTextDocumentParams(
                text_document=types.TextDocumentIdentifier(uri=uri)
            ))
            after_saving = await editor.diagnostics(uri, 4)
            return [version for _, version in editor.history], after_typing, after_saving

    published, after_typing, after_saving = run(scenario())
    assert published == [1, 4, 4]
    assert as_check(after_typing) == as_check(after_saving)
