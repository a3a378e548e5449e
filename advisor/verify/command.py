"""``advisor fix --verify SCRIPT [options] [-- SCRIPT ARGS...]``: the command-line half.

Exit codes: 0 when the patch was applied or there was nothing to fix, 1 when the patch was
rejected (the file is unchanged), 2 on usage errors (no torch, a missing script, bad options).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shlex
import signal
import threading
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from advisor.engine import Settings
from advisor.verify import DEFAULT_STEPS, DEFAULT_TIMEOUT_S, DEFAULT_WARMUP

# Options that only mean something with --verify; their argparse default is None so that a
# stray one without --verify is reported instead of ignored.
VERIFY_ONLY = ("steps", "warmup", "timeout", "budget", "ablate", "report", "plot", "keep_slower", "output_format", "launcher")


def add_arguments(fix: argparse.ArgumentParser) -> None:
    group = fix.add_argument_group("verify", "run the original and the patched script and keep the patch only if it trains the same")
    group.add_argument(
        "--verify", nargs="?", const=True, default=None, metavar="SCRIPT",
        help="measure the fixes on SCRIPT (arguments for it after --) and write them only if they hold",
    )
    group.add_argument("--steps", type=int, default=None, help=f"measured optimizer steps per run (default {DEFAULT_STEPS})")
    group.add_argument("--warmup", type=int, default=None, help=f"optimizer steps before measuring (default {DEFAULT_WARMUP})")
    group.add_argument("--timeout", type=float, default=None, help=f"seconds per run before it is stopped (default {DEFAULT_TIMEOUT_S:g})")
    group.add_argument(
        "--budget", type=float, default=None, metavar="SECONDS",
        help="seconds for all the runs together: the baseline and the patch first, then what the rest pays for "
        "(a second baseline, the search for the best subset, the batch probe, --ablate)",
    )
    group.add_argument("--ablate", action="store_true", default=None, help="also run each fix alone")
    group.add_argument(
        "--launcher", default=None, metavar="COMMAND",
        help='run every variant through a launcher, e.g. "torchrun --nproc_per_node 2" or "accelerate launch"; '
        "steps are counted on every rank, the slowest rank's step time is reported, loss parity is checked on rank 0",
    )
    group.add_argument(
        "--output-format", choices=("text", "json"), default=None,
        help="text (default): tables and a line per run on stderr; json: the report on stdout and nothing else",
    )
    group.add_argument("--report", type=Path, default=None, metavar="PATH.json", help="write the JSON report")
    group.add_argument("--plot", type=Path, default=None, metavar="PATH.png", help="draw loss curves and throughput (needs matplotlib)")
    group.add_argument("--keep-slower", action="store_true", default=None, help="apply a patch that trains the same even if it is slower")


def split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """``advisor fix --verify train.py -- --lr 1e-3``: what follows ``--`` belongs to the script."""
    if "--" not in argv:
        return argv, []
    index = argv.index("--")
    if not any(a == "--verify" or a.startswith("--verify=") for a in argv[:index]):
        return argv, []
    return argv[:index], argv[index + 1 :]


def stray_options(args: argparse.Namespace) -> list[str]:
    return [f"--{name.replace('_', '-')}" for name in VERIFY_ONLY if getattr(args, name, None) is not None]


def script_of(args: argparse.Namespace, usage_error: type[Exception]) -> str:
    """The one script to verify: ``--verify SCRIPT`` or ``--verify`` with a single PATH."""
    given_paths = [p for p in args.paths if p != "."]
    if args.verify is True:
        if len(given_paths) != 1:
            raise usage_error("--verify takes exactly one script: advisor fix --verify SCRIPT [-- ARGS...]")
        script = given_paths[0]
    else:
        if given_paths:
            raise usage_error(f"--verify takes one script; unexpected path(s): {', '.join(given_paths)}")
        script = str(args.verify)
    if getattr(args, "diff", False):
        raise usage_error("--diff and --verify do not combine: --verify writes only a patch that held")
    if not os.path.isfile(script):
        raise usage_error(f"script not found: {script}")
    if importlib.util.find_spec("torch") is None:
        raise usage_error("--verify runs the script and needs torch: pip install 'advisor[verify]'")
    steps = DEFAULT_STEPS if args.steps is None else args.steps
    warmup = DEFAULT_WARMUP if args.warmup is None else args.warmup
    timeout = DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout
    if steps < 2:
        raise usage_error("--steps must be at least 2 (step times are measured between steps)")
    if warmup < 0:
        raise usage_error("--warmup cannot be negative")
    if timeout <= 0:
        raise usage_error("--timeout must be positive")
    if args.budget is not None and args.budget <= 0:
        raise usage_error("--budget must be positive")
    if args.launcher is not None and not shlex.split(args.launcher):
        raise usage_error("--launcher needs a command, e.g. \"torchrun --nproc_per_node 2\"")
    if args.plot is not None:
        from advisor.verify.display import matplotlib_missing

        if matplotlib_missing():
            raise usage_error("--plot needs matplotlib, which is not installed: pip install matplotlib")
    args.steps, args.warmup, args.timeout = steps, warmup, timeout
    return script


@contextlib.contextmanager
def _sigterm_unwinds():
    """SIGTERM (a CI job cancelled, ``kill``) unwinds like Ctrl-C, so the runner takes the
    script's process group down with it and removes the patched copy; by default the signal
    would end advisor at once and leave the run going in its own session."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_verify(args: argparse.Namespace, script: str, settings: Settings, console: Console, error_console: Console) -> int:
    from advisor.verify.display import LiveProgress, plot, render
    from advisor.verify.runner import VerifyOptions, verify

    options = VerifyOptions(
        steps=args.steps,
        warmup=args.warmup,
        timeout=args.timeout,
        unsafe=bool(args.unsafe_fixes),
        ablate=bool(args.ablate),
        keep_slower=bool(args.keep_slower),
        budget=args.budget,
        launcher=tuple(shlex.split(args.launcher)) if args.launcher else (),
        script_args=tuple(getattr(args, "script_args", ()) or ()),
    )
    as_json = args.output_format == "json"
    if not as_json:
        console.print(f"[dim]target: {escape(settings.target.describe())}[/dim]")
        budget = f"; budget {options.budget:g} s" if options.budget else ""
        console.print(
            f"[dim]verifying {escape(script)}: {options.warmup} warm-up + {options.steps} measured optimizer steps per run, "
            f"baseline twice, patched once{', each fix alone' if options.ablate else ''}{budget}[/dim]"
        )
    with _sigterm_unwinds(), LiveProgress(error_console, quiet=as_json) as progress:
        outcome = verify(script, settings, options, progress)
    report = outcome.report
    if as_json:
        console.file.write(json.dumps(report, indent=2) + "\n")
    else:
        if report.get("applied_fixes"):
            codes = ", ".join(report["fixes"])
            console.print(f"[dim]fixes measured: {escape(codes)}[/dim]")
        render(console, report)
    if args.report is not None:
        args.report.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.plot is not None and report.get("baseline"):
        plot(str(args.plot), report)
    return outcome.exit_code
