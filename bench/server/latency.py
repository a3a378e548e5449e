"""How long an editor waits for advisor's diagnostics after a change (issue 13: under 200 ms for a
1,000-line file on a 2-core machine).

    python bench/server/latency.py                     # 30 changes, the default debounce
    python bench/server/latency.py --changes 50 --debounce-ms 0

The file is the fixtures' four largest training scripts one after the other (999 lines, 26
findings), copied into a temporary project. pygls's language client starts ``python -m advisor
server`` over stdio, as an editor does, opens the file, then sends one change at a time (a
character typed into a comment, then removed, so that the findings stay the same) and measures,
from just before the ``didChange`` is written to the arrival of the ``publishDiagnostics`` for that
version: what the user waits for, the debounce, the JSON-RPC round trip and the check together.
The same text checked in this process (``check_file`` with the bytes, as the server does) is
measured too: the part of the wait that is analysis.

Each change waits for the diagnostics of the one before, so that no check is skipped or merged.
The machine's load average is printed: the figures are only comparable at the same load.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ("nanogpt_globals.py", "hf_no_trainer.py", "gan_loop.py", "hand_attention.py")


def thousand_lines() -> str:
    """The fixtures' largest scripts joined (a ``from __future__`` import may only come first)."""
    parts = [(REPO / "fixtures" / name).read_text() for name in SCRIPTS]
    return "".join(line for part in parts for line in part.splitlines(keepends=True) if not line.startswith("from __future__"))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def summary(name: str, values: list[float]) -> str:
    return (
        f"{name}: median {statistics.median(values):.0f} ms, p90 {percentile(values, 0.9):.0f} ms, "
        f"min {min(values):.0f} ms, max {max(values):.0f} ms ({len(values)} changes)"
    )


def in_process(path: Path, text: str, repeats: int) -> list[float]:
    sys.path.insert(0, str(REPO))
    from advisor.cli import _settings, build_parser
    from advisor.engine import _collect_less_often, check_file

    _collect_less_often()  # as the server does
    settings, _ = _settings(build_parser().parse_args(["check", str(path)]))
    check_file(str(path), settings, data=text.encode())  # the first check imports and builds the rules: not a change's cost
    times = []
    for index in range(repeats):
        data = (text + "#" * (index % 2)).encode()
        start = time.perf_counter()
        check_file(str(path), settings, data=data)
        times.append((time.perf_counter() - start) * 1000)
    return times


async def through_the_server(root: Path, text: str, changes: int, debounce_ms: int | None) -> tuple[list[float], int]:
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("advisor-latency", "1")
    arrived: dict[int | None, float] = {}
    counts: dict[int | None, int] = {}
    signal = asyncio.Event()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def published(params: types.PublishDiagnosticsParams) -> None:
        arrived[params.version] = time.perf_counter()
        counts[params.version] = len(params.diagnostics)
        signal.set()

    async def wait_for(version: int) -> float:
        while version not in arrived:
            signal.clear()
            await asyncio.wait_for(signal.wait(), 60)
        return arrived[version]

    await client.start_io(sys.executable, "-m", "advisor", "server", cwd=str(root), env={**os.environ, "PYTHONPATH": str(REPO)})
    options = {} if debounce_ms is None else {"debounceMs": debounce_ms}
    await client.initialize_async(types.InitializeParams(
        process_id=os.getpid(), root_uri=root.as_uri(), capabilities=types.ClientCapabilities(), initialization_options=options,
    ))
    client.initialized(types.InitializedParams())
    uri = (root / "train.py").as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
    ))
    await wait_for(1)
    last_line = len(text.splitlines())  # a new line after the last: a comment typed, then removed
    waits = []
    for version in range(2, changes + 2):
        typed = version % 2 == 0
        change = types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(last_line, 0), end=types.Position(last_line, 0 if typed else 1)),
            text="#" if typed else "",
        )
        start = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[change]
        ))
        waits.append((await wait_for(version) - start) * 1000)
    findings = counts[changes + 1]
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return waits, findings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=30)
    parser.add_argument("--debounce-ms", type=int, help="the server's debounce (default: the server's own)")
    args = parser.parse_args()
    text = thousand_lines()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "pyproject.toml").write_text("[tool.advisor]\n")
        path = root / "train.py"
        path.write_text(text)
        print(f"file: {len(text.splitlines())} lines; machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
        waits, findings = asyncio.run(through_the_server(root, text, args.changes, args.debounce_ms))
        debounce = "the default debounce" if args.debounce_ms is None else f"debounce {args.debounce_ms} ms"
        print(summary(f"change -> diagnostics through the server ({debounce}, {findings} findings)", waits))
        print(summary("check_file of the same text in this process", in_process(path, text, args.changes)))
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
