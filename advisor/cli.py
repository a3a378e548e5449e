"""Command line: ``advisor check | fix | clean | rules | explain | server``, modelled on ruff.

Exit codes: 0 clean, 1 findings, 2 usage error or a file that could not be analyzed.
``advisor fix --verify`` (advisor/verify/command.py): 0 applied or nothing to fix, 1 rejected.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

from rich.console import Console

from advisor import __version__
from advisor.cache import CACHE_DIR_NAME, Cache
from advisor.cache import clean as cache_clean
from advisor.config import Config, ConfigError, find_pyproject, load_config
from advisor.engine import Settings, check_paths, discover
from advisor.notebooks import is_notebook
from advisor.registry import select_codes, unknown_selectors
from advisor.report import FORMATS, explain, render_text, rules_json, rules_table, statistics, to_github, to_json, to_sarif, where
from advisor.targets import UnknownGPU, resolve_target

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    pass


# --verify runs the script as a process under a harness; a notebook is not one program run from
# the top (magics, shell escapes, cells run in the order someone clicked them), so what would be
# measured is not what the notebook does.
NOTEBOOK_VERIFY_REFUSED = (
    "--verify runs a Python script in a process of its own, and {script} is a notebook: its magics, "
    "shell escapes and cell-by-cell state make it a different program when run top to bottom. "
    "Use `advisor fix` on it (or `--diff` to review), or export it to a script "
    "(`jupyter nbconvert --to script`) and verify that"
)


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value!r}")
    return number


def _codes_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="advisor",
        description="Static performance advice and fixes for PyTorch and Hugging Face training scripts.",
    )
    parser.add_argument("--version", action="version", version=f"advisor {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "paths", nargs="*", default=["."], metavar="PATH", help="files or folders (default: .); - reads stdin"
        )
        sub.add_argument(
            "--select", type=_codes_list, action="extend",
            help="codes or prefixes to enable, comma separated (e.g. ADV1,ADV201); repeated, they add up; "
            "replaces [tool.advisor] select",
        )
        sub.add_argument(
            "--extend-select", type=_codes_list, action="extend", default=[], help="codes to enable on top of the selection"
        )
        sub.add_argument("--ignore", type=_codes_list, action="extend", default=[], help="codes or prefixes to disable")
        sub.add_argument(
            "--extend-ignore", type=_codes_list, action="extend", default=[], help="the same as --ignore (ruff's spelling)"
        )
        sub.add_argument(
            "--force-exclude", action="store_true",
            help="apply [tool.advisor] exclude to files named on the command line too (pre-commit names them)",
        )
        sub.add_argument("-q", "--quiet", action="store_true", help="print the findings and nothing else")
        sub.add_argument("--stdin-filename", help="the path of the code read from stdin, for config and the report")
        sub.add_argument(
            "--show-fixes", action="store_true", help="list the fixes applied, by file and rule"
        )
        sub.add_argument(
            "--exit-non-zero-on-fix", action="store_true", help="exit 1 when a fix was applied, even if nothing remains"
        )
        sub.add_argument("--gpu", help="target GPU (e.g. A100, H100, V100, T4, RTX4090); default: config, then local GPU")
        sub.add_argument(
            "--gpus", type=_positive_int, metavar="N",
            help="GPUs the training runs on, for the multi-GPU rules; default: config, then the local count",
        )
        sub.add_argument("--config", type=Path, help="pyproject.toml to read [tool.advisor] from")
        sub.add_argument("--jobs", "-j", type=int, help="worker processes (default: one per core)")
        sub.add_argument("--no-color", action="store_true", help="plain text output")
        sub.add_argument(
            "--no-project",
            action="store_true",
            help="analyse each file alone, without the project's sibling modules it imports or that import it",
        )

    check = commands.add_parser("check", help="report findings")
    common(check)
    check.add_argument("--output-format", "--format", dest="format", choices=FORMATS, default="text", help="output format")
    check.add_argument("--fix", action="store_true", help="apply the safe fixes, then report what remains")
    check.add_argument("--unsafe-fixes", action="store_true", help="with --fix or --diff: the unsafe fixes too")
    check.add_argument("--diff", action="store_true", help="show the fixes as a unified diff; write nothing")
    check.add_argument("--statistics", action="store_true", help="count the findings per rule instead of listing them")
    check.add_argument("--add-noqa", action="store_true", help="add `# noqa: CODE` to every line with a finding")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings")
    check.add_argument("--output", "-o", type=Path, help="write the report to a file")
    check.add_argument("--no-cache", action="store_true", help=f"neither read nor write {CACHE_DIR_NAME}/")

    fix = commands.add_parser("fix", help="apply fixes (safe ones by default)")
    common(fix)
    fix.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes")
    fix.add_argument("--diff", action="store_true", help="show the changes as a unified diff; write nothing")
    from advisor.verify.command import add_arguments as add_verify_arguments  # torch-free

    add_verify_arguments(fix)

    clean = commands.add_parser("clean", help=f"remove the results cache ({CACHE_DIR_NAME}/ at the project root)")
    clean.add_argument("paths", nargs="*", default=["."], metavar="PATH", help="where to find the project (default: .)")
    clean.add_argument("--config", type=Path, help="pyproject.toml whose folder holds the cache")
    rules = commands.add_parser("rules", help="list the rules")
    rules.add_argument("--output-format", "--format", dest="format", choices=("text", "json"), default="text")
    server = commands.add_parser(
        "server", help="a Language Server Protocol server over stdio, for editors (needs advisor[server])"
    )
    # Editors' LSP clients often pass --stdio; it is the only transport, so it is accepted and changes nothing.
    server.add_argument("--stdio", action="store_true", help=argparse.SUPPRESS)
    explain_parser = commands.add_parser("explain", help="show a rule's documentation")
    explain_parser.add_argument("code", help="rule code or name, e.g. ADV101, or ADV000 (files that cannot be analyzed)")
    return parser


def _settings(args: argparse.Namespace) -> tuple[Settings, Config]:
    named = args.stdin_filename if _reads_stdin(args) and args.stdin_filename else (args.paths[0] if args.paths else None)
    config_path = args.config or find_pyproject(Path(named) if named and named != "-" else Path.cwd())
    if args.config is not None and not args.config.is_file():
        raise UsageError(f"config file not found: {args.config}")
    config = load_config(config_path)
    select = args.select if args.select else config.select
    extend = list(config.extend_select) + list(args.extend_select)
    ignore = list(config.ignore) + list(args.ignore) + list(args.extend_ignore)
    sources = [
        ("--select", args.select or []), ("--extend-select", args.extend_select), ("--ignore", args.ignore),
        ("--extend-ignore", args.extend_ignore),
    ]
    sources += [
        (f"[tool.advisor] select ({config.path})", config.select or []),
        (f"[tool.advisor] extend-select ({config.path})", config.extend_select),
        (f"[tool.advisor] ignore ({config.path})", config.ignore),
    ]
    sources += [(f"[tool.advisor] per-file-ignores[{pattern!r}] ({config.path})", codes) for pattern, codes in config.per_file_ignores.items()]
    for origin, selectors in sources:
        unknown = unknown_selectors(selectors)
        if unknown:
            raise UsageError(f"unknown rule code(s) in {origin}: {', '.join(unknown)}")
    target = resolve_target(args.gpu, config.gpu, cli_gpus=getattr(args, "gpus", None), config_gpus=config.gpus)
    if config.torch_version:
        target = replace(target, torch_version=config.torch_version)
    per_file = tuple((pattern, frozenset(c.upper() for c in codes)) for pattern, codes in config.per_file_ignores.items())
    codes = set(select_codes(select, ignore))
    if extend:
        codes |= set(select_codes(extend, ignore))
    settings = Settings(
        codes=frozenset(codes),
        target=target,
        per_file_ignores=per_file,
        root=str(config.root),
        project_scope=not getattr(args, "no_project", False),
    )
    return settings, config


def _console(args: argparse.Namespace, stream=None) -> Console:
    no_color = getattr(args, "no_color", False) or "NO_COLOR" in os.environ
    return Console(file=stream or sys.stdout, highlight=False, no_color=no_color, soft_wrap=True, emoji=False)


def _warn_if_no_python(args: argparse.Namespace, files: list[str], errors: list) -> None:
    # As ruff does: an empty selection is not an error (exit 0), but it is worth a word.
    if not files and not errors:
        print(f"advisor: warning: no Python files found under {', '.join(args.paths)}", file=sys.stderr)


def _reads_stdin(args: argparse.Namespace) -> bool:
    return list(getattr(args, "paths", [])) == ["-"]


def _stdin_name(args: argparse.Namespace) -> str:
    return args.stdin_filename or "-"


def _files(args: argparse.Namespace, config: Config) -> tuple[list[str], list]:
    if "-" in args.paths:
        raise UsageError("`-` (stdin) must be the only path")
    files, errors = discover(args.paths, config.exclude, str(config.root), force_exclude=args.force_exclude)
    named = set(args.paths)
    missing = [e for e in errors if e.path in named and e.message.startswith("no such file or directory")]
    for error in missing:  # a usage error, as a mistyped path is, not a finding in a file that is not there
        print(f"advisor: error: {error.path}: {error.message}", file=sys.stderr)
    args.usage_errors = bool(missing)
    errors = [e for e in errors if e not in missing]
    if not args.force_exclude and not missing:
        _warn_if_no_python(args, files, errors)
    return files, errors


def _stdin_excluded(args: argparse.Namespace, config: Config) -> bool:
    """``--force-exclude`` with a ``--stdin-filename`` that ``exclude`` matches: nothing to do."""
    from advisor.engine import is_excluded

    return bool(args.force_exclude and args.stdin_filename and is_excluded(args.stdin_filename, config.exclude, str(config.root)))


def run_check(args: argparse.Namespace) -> int:
    if args.fix or args.diff:
        return _run_fixes(args, unsafe=args.unsafe_fixes, diff=args.diff)
    if args.add_noqa:
        return _add_noqa(args)
    settings, config = _settings(args)
    if _reads_stdin(args):
        from advisor.engine import check_file

        data = sys.stdin.buffer.read()
        if _stdin_excluded(args, config):
            return EXIT_CLEAN
        if not args.stdin_filename:
            settings = replace(settings, project_scope=False)
        results = [check_file(_stdin_name(args), settings, data=data)]
        errors: list = []
    else:
        if args.format == "json" and not args.statistics:
            settings = replace(settings, fix_edits=True)  # the fixes' text edits, as ruff's JSON has
        files, errors = _files(args, config)
        cache = None if args.no_cache else Cache(config.root, settings)
        with _progress(args, len(files)) as advance:
            results = check_paths(files, settings, args.jobs, cache=cache, progress=advance)
    diagnostics = sorted((d for r in results for d in r.diagnostics), key=lambda d: d.sort_key())
    errors += [e for r in results for e in r.errors]
    _report(args, diagnostics, errors, settings)
    if errors or getattr(args, "usage_errors", False):
        return EXIT_ERROR
    if diagnostics and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _add_noqa(args: argparse.Namespace) -> int:
    """ruff's ``--add-noqa``: a ``# noqa: CODE`` on each line that holds a finding (merged into
    a ``# noqa`` already there), so that a rule can be turned on in an old codebase at once."""
    from advisor.edits import add_noqa
    from advisor.fixer import write_atomic

    if _reads_stdin(args):
        raise UsageError("--add-noqa edits files: it does not read stdin")
    settings, config = _settings(args)
    files, errors = _files(args, config)
    results = check_paths(files, settings, args.jobs, cache=None)
    added = skipped = 0
    for result in results:
        if not result.diagnostics:
            continue
        with open(result.path, "rb") as handle:
            original = handle.read()
        if is_notebook(result.path):
            updated, count, missed = _add_noqa_to_notebook(original, result.diagnostics)
            added += count
            skipped += missed
            if updated != original:
                write_atomic(result.path, updated, expected=original)
            continue
        codes_by_line: dict[int, set[str]] = {}
        for diagnostic in result.diagnostics:
            codes_by_line.setdefault(diagnostic.line, set()).add(diagnostic.code)
        updated, count, missed = add_noqa(original, codes_by_line)
        added += count
        skipped += missed
        if updated != original:
            write_atomic(result.path, updated, expected=original)
    errors += [e for r in results for e in r.errors]
    for error in errors:
        print(f"{error.path}:{where(error)}: {error.code} {error.message}", file=sys.stderr)
    if not args.quiet:
        print(f"Added {added} noqa directive{'s' if added != 1 else ''}."
              + (f" {skipped} line{'s' if skipped != 1 else ''} could not take one (inside a string or after a backslash)." if skipped else ""))
    return EXIT_ERROR if errors else EXIT_CLEAN


def _add_noqa_to_notebook(original: bytes, diagnostics: list) -> tuple[bytes, int, int]:
    """``--add-noqa`` in a notebook's cells: the comments go on the lines of the joined cells, which
    go back into their cells (the JSON around them untouched)."""
    from advisor.edits import add_noqa
    from advisor.notebooks import Notebook, NotebookError

    notebook = Notebook.from_bytes(original)
    codes_by_line: dict[int, set[str]] = {}
    for diagnostic in diagnostics:
        line = notebook.python_line(diagnostic.cell, diagnostic.cell_line)
        if line is not None:
            codes_by_line.setdefault(line, set()).add(diagnostic.code)
    updated, count, missed = add_noqa(notebook.python.encode("utf-8"), codes_by_line)
    try:
        return notebook.with_python(updated.decode("utf-8")), count, missed
    except NotebookError:  # never expected: comments added at ends of lines keep every marker
        return original, 0, count + missed


def _report(
    args: argparse.Namespace, diagnostics: list, errors: list, settings: Settings, stream=None, footer: bool = True
) -> None:
    """The findings in the chosen format, to ``--output`` or ``stream`` (stdout); text ends with
    a count unless ``footer`` is off (after fixes, the fix summary says it)."""
    quiet = args.quiet
    if args.statistics:
        text = statistics(diagnostics, errors, as_json=args.format == "json")
    elif args.format == "text" and args.output is None:
        render_text(
            _console(args, stream), diagnostics, errors, settings.target, show_header=not quiet,
            show_footer=footer and not quiet,
        )
        return
    elif args.format == "json":
        text = to_json(diagnostics, errors, settings.target)
    elif args.format == "sarif":
        text = to_sarif(diagnostics, errors, settings.target)
    elif args.format == "github":
        text = to_github(diagnostics, errors)
    else:
        import io

        buffer = io.StringIO()
        render_text(
            Console(file=buffer, no_color=True, highlight=False, soft_wrap=True, emoji=False),
            diagnostics, errors, settings.target, show_header=not quiet, show_footer=footer and not quiet,
        )
        text = buffer.getvalue().rstrip("\n")
    if args.output is not None:
        try:
            args.output.write_text(text + "\n", encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot write the report to {args.output}: {error.strerror or error}") from error
    else:
        (stream or sys.stdout).write(text + ("\n" if text else ""))


PROGRESS_MIN_FILES = 50


@contextlib.contextmanager
def _progress(args: argparse.Namespace, total: int) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on stderr for long text-format runs on a terminal; nothing otherwise."""
    if args.format != "text" or total < PROGRESS_MIN_FILES or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = _console(args, sys.stderr)
    with Progress(
        TextColumn("checking"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True
    ) as progress:
        task = progress.add_task("check", total=total)
        yield lambda n: progress.advance(task, n)


def run_clean(args: argparse.Namespace) -> int:
    if args.config is not None and not args.config.is_file():
        raise UsageError(f"config file not found: {args.config}")
    config = load_config(args.config or find_pyproject(Path(args.paths[0])))
    if cache_clean(config.root):
        print(f"Removed {config.root / CACHE_DIR_NAME}")
    return EXIT_CLEAN


def _report_dropped(console: Console, results) -> None:
    from advisor.fixer import MAX_ROUNDS

    for result in results:
        for dropped in result.dropped:
            console.print(f"{result.path}: fix dropped, it would break the code: {dropped}", style="yellow", markup=False)
        if not result.converged:
            console.print(f"{result.path}: fixes still pending after {MAX_ROUNDS} rounds; run advisor fix again", style="yellow", markup=False)


def run_fix(args: argparse.Namespace) -> int:
    from advisor.verify import command as verify_command

    if args.verify is not None:
        script = verify_command.script_of(args, UsageError)
        if is_notebook(script):
            raise UsageError(NOTEBOOK_VERIFY_REFUSED.format(script=script))
        args.paths = [script]
        settings, _ = _settings(args)
        return verify_command.run_verify(args, script, settings, _console(args), _console(args, sys.stderr))
    stray = verify_command.stray_options(args)
    if stray:
        raise UsageError(f"{', '.join(stray)} only with --verify SCRIPT")
    args.format, args.output, args.statistics = "text", None, False
    return _run_fixes(args, unsafe=args.unsafe_fixes, diff=args.diff)


def _run_fixes(args: argparse.Namespace, unsafe: bool, diff: bool) -> int:
    """``advisor fix`` and ``advisor check --fix`` / ``--diff``: fix, then report what remains."""
    from advisor.fixer import fix_paths, fix_source

    settings, config = _settings(args)
    if _reads_stdin(args):
        data = sys.stdin.buffer.read()
        if _stdin_excluded(args, config):
            sys.stdout.buffer.write(b"" if diff else data)
            return EXIT_CLEAN
        if not args.stdin_filename:
            settings = replace(settings, project_scope=False)
        results = [fix_source(_stdin_name(args), data, settings, unsafe)]
        errors: list = []
        if not diff:
            sys.stdout.buffer.write(results[0].fixed)  # the fixed code is the output; the report goes to stderr
    else:
        files, errors = _files(args, config)
        results = fix_paths(files, settings, unsafe=unsafe, write=not diff, jobs=args.jobs)
    report_stream = sys.stderr if _reads_stdin(args) and not diff else None
    console = _console(args, report_stream)
    errors += [e for r in results for e in r.errors]
    remaining = sorted((d for r in results for d in r.remaining), key=lambda d: d.sort_key())
    applied = [(r.path, a) for r in results for a in r.applied]
    if diff:
        for result in results:
            if result.changed:
                sys.stdout.write(result.diff())
        _report_dropped(console, results)
        if not args.quiet:
            console.print(f"{len(applied)} fix{'es' if len(applied) != 1 else ''} would be applied.", style="dim")
        if errors or getattr(args, "usage_errors", False):
            return EXIT_ERROR
        return EXIT_FINDINGS if any(r.changed for r in results) else EXIT_CLEAN
    _report(args, remaining, errors, settings, stream=report_stream, footer=False)
    _report_dropped(console, results)
    if args.show_fixes and applied:
        _show_fixes(console, applied)
    if not args.quiet:
        console.print(_fixed_summary(args, results, applied, remaining, unsafe), markup=False)
    if errors or getattr(args, "usage_errors", False):
        return EXIT_ERROR
    if remaining and not getattr(args, "exit_zero", False):
        return EXIT_FINDINGS
    return EXIT_FINDINGS if applied and args.exit_non_zero_on_fix else EXIT_CLEAN


SERVER_NEEDS_PYGLS = (
    "`advisor server` needs pygls and lsprotocol, which the core install leaves out: "
    "pip install 'advisor[server]'"
)


def run_server() -> int:
    """The language server; its libraries are imported only here, so that the core install works without them."""
    try:
        from advisor.server import main as serve
    except ImportError as error:
        if error.name is not None and error.name.split(".")[0] not in ("pygls", "lsprotocol", "cattrs"):
            raise
        print(f"advisor: error: {SERVER_NEEDS_PYGLS} ({error})", file=sys.stderr)
        return EXIT_ERROR
    return serve()


def _fixed_summary(args: argparse.Namespace, results, applied, remaining, unsafe: bool) -> str:
    files_changed = sum(1 for r in results if r.written or (r.changed and _reads_stdin(args)))
    message = f"Fixed {len(applied)} finding{'s' if len(applied) != 1 else ''} in {files_changed} file{'s' if files_changed != 1 else ''}"
    follow_on = sum(1 for _, a in applied if a.round > 0)
    if follow_on:
        # ``check`` counts what it sees now; a fix can make another possible (a pinned loader's
        # copies become non-blocking), so the two counts differ by these.
        message += f" ({follow_on} of them made possible by the others)"
    message += f"; {len(remaining)} remaining"
    pending_unsafe = sum(1 for d in remaining if d.fix_applicability == "unsafe")
    pending_measured = sum(1 for d in remaining if d.fix_applicability == "measured")
    pending = []
    if pending_unsafe and not unsafe:
        pending.append(f"{pending_unsafe} fixable with --unsafe-fixes")
    if pending_measured:
        pending.append(f"{pending_measured} with fix --verify --unsafe-fixes")
    if pending:
        message += f" ({'; '.join(pending)})"
    return message + "."


def _show_fixes(console: Console, applied) -> None:
    """As ruff's ``--show-fixes``: per file, how many fixes of each rule."""
    from collections import Counter

    from advisor.registry import rule_by_code

    console.print(f"Fixed {len(applied)} finding{'s' if len(applied) != 1 else ''}:", markup=False)
    by_file: dict[str, Counter] = {}
    for path, fix in applied:
        by_file.setdefault(path, Counter())[fix.code] += 1
    for path, counts in by_file.items():
        console.print(f"- {path}:", markup=False)
        for code, count in sorted(counts.items()):
            rule = rule_by_code(code)
            console.print(f"    {count} × {code} ({rule.name if rule else code})", markup=False)


def main(argv: Sequence[str] | None = None) -> int:
    from advisor.verify.command import split_script_args

    parser = build_parser()
    argv, script_args = split_script_args(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    args.script_args = script_args
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    try:
        with _sigterm_interrupts():
            return _run_command(parser, args)
    except (UsageError, ConfigError, UnknownGPU) as error:
        print(f"advisor: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("advisor: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("advisor: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM


def _run_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "check":
        return run_check(args)
    if args.command == "fix":
        return run_fix(args)
    if args.command == "clean":
        return run_clean(args)
    if args.command == "server":
        return run_server()
    if args.command == "rules":
        if args.format == "json":
            sys.stdout.write(rules_json() + "\n")
        else:
            rules_table(Console(highlight=False, emoji=False))
        return EXIT_CLEAN
    if args.command == "explain":
        if not explain(Console(highlight=False, soft_wrap=True, emoji=False), args.code):
            print(f"advisor: unknown rule {args.code!r}; see `advisor rules`", file=sys.stderr)
            return EXIT_ERROR
        return EXIT_CLEAN
    return EXIT_ERROR  # pragma: no cover


class Terminated(BaseException):
    """SIGTERM, raised where the program is so that it unwinds like Ctrl-C: temporary
    files removed, pending work cancelled (a BaseException, so no ``except Exception`` eats it)."""


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is None:
        yield  # no handler can be installed here, or the one there cannot be put back
        return

    def interrupt(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
