"""What verify shows: live progress while the runs go, the before/after table, the per-fix table
and the optional plot (matplotlib, an optional dependency)."""
from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from advisor.verify.compare import as_float, objective


class LiveProgress:
    """What verify shows while it runs, on stderr: on a terminal a progress bar per run in
    optimizer steps and a line as each run ends; elsewhere (a CI log, a GPU job's output) only the
    lines, so a long run still shows signs of life; with ``quiet`` (JSON output) nothing."""

    def __init__(self, console: Console, quiet: bool = False) -> None:
        self.console = console
        self.quiet = quiet
        self.live = console.is_terminal and not quiet
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description:<14}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("steps"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not self.live,
        )
        self.tasks: dict[str, int] = {}

    def __enter__(self) -> LiveProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def started(self, label: str, target: int) -> None:
        self.tasks[label] = self.progress.add_task(label, total=target)

    def stepped(self, label: str, steps: int) -> None:
        if label in self.tasks:
            self.progress.update(self.tasks[label], completed=steps)

    def finished(self, label: str, run: dict) -> None:
        if label in self.tasks:
            self.progress.remove_task(self.tasks.pop(label))
        if self.quiet:
            return
        status = run["status"]
        style = "green" if status == "ok" else "red"
        rate = run.get("steps_per_second")
        detail = f", {rate:.3g} steps/s" if rate else ""
        if run.get("wall_s") is not None:
            detail += f" ({run['wall_s']:.0f} s)"
        self.progress.console.print(f"  {escape(label)}: [{style}]{status}[/{style}] after {run['steps']} steps{detail}")


def _number(value: float | None, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}{unit}"


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def _change(before: float | None, after: float | None, higher_is_better: bool | None) -> str:
    if before is None or after is None or before == 0:
        return "-"
    ratio = after / before
    text = f"{ratio:.2f}x" if higher_is_better and ratio >= 1.05 else f"{ratio - 1:+.1%}"
    if higher_is_better is None or abs(ratio - 1) < 0.005:
        return text
    better = ratio > 1 if higher_is_better else ratio < 1
    style = "green" if better else "red"
    return f"[{style}]{text}[/{style}]"


def final_losses(report: dict) -> tuple[float | None, float | None]:
    """Last losses of baseline and patched, each as the mean over its step's micro-steps: one
    definition whatever the parity check compared (a loop that sums its micro-steps' losses
    showed 667.18 in one report and 41.699 in another for the same baseline)."""
    before = [v for v in objective(report["baseline"], True) if v is not None] if report.get("baseline") else []
    after = [v for v in objective(report["patched"], True) if v is not None] if report.get("patched") else []
    return (before[-1] if before else None), (after[-1] if after else None)


def results_table(report: dict) -> Table:
    baseline = report.get("baseline") or {}
    patched = report.get("patched") or {}
    table = Table(title="advisor fix --verify", title_justify="left")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("change", justify="right")
    table.add_row("status", baseline.get("status", "-"), patched.get("status", "-"), "")
    table.add_row("optimizer steps", str(baseline.get("steps", "-")), str(patched.get("steps", "-")), "")
    split = report.get("batch_split")
    if split:
        (batch, accumulation), (new_batch, new_accumulation) = split["original"], split["chosen"]
        how = "probed" if split.get("probed") else "static"
        table.add_row("batch x accumulation (ADV401)", f"{batch} x {accumulation}", f"{new_batch} x {new_accumulation}", how)
    for name, key, better in (("steps/s", "steps_per_second", True), ("samples/s", "samples_per_second", True)):
        b, a = baseline.get(key), patched.get(key)
        table.add_row(name, _number(b), _number(a), _change(b, a, better))
    for name, key in (("step time median", "median"), ("step time p90", "p90")):
        b = (baseline.get("step_time_ms") or {}).get(key)
        a = (patched.get("step_time_ms") or {}).get(key)
        table.add_row(name, _number(b, " ms"), _number(a, " ms"), _change(b, a, False))
    b, a = baseline.get("peak_memory_bytes"), patched.get("peak_memory_bytes")
    kind = {"cuda_allocated": "peak memory (CUDA)", "cpu_peak_rss": "peak memory (RSS)"}.get(baseline.get("memory_kind"), "peak memory")
    table.add_row(kind, _bytes(b), _bytes(a), _change(b, a, False))
    before, after = final_losses(report)
    table.add_row("final loss (mean per micro-step)", _number(before, digits=5), _number(after, digits=5), _change(before, after, None))
    skipped = (baseline.get("skipped_steps") or 0, patched.get("skipped_steps") or 0)
    if any(skipped):
        table.add_row("steps skipped by GradScaler", str(skipped[0]), str(skipped[1]), "")
    return table


def ablation_table(entries: Sequence[dict]) -> Table:
    table = Table(title="each fix alone", title_justify="left")
    table.add_column("fix")
    table.add_column("speedup", justify="right")
    table.add_column("loss parity")
    table.add_column("note")
    for entry in entries:
        parity = entry.get("loss_parity")
        parity_text = "-" if parity is None else ("[green]yes[/green]" if parity else "[red]no[/red]")
        speedup = entry.get("speedup")
        note = entry.get("note") or ("" if entry.get("status") == "ok" else f"run: {entry.get('status')}")
        if parity is False and entry.get("parity"):
            note = entry["parity"]
        table.add_row(entry["code"], f"{speedup:.2f}x" if speedup else "-", parity_text, escape(note))
    return table


def search_table(search: dict) -> Table:
    """The subsets measured when the whole patch did not hold, and what became of each fix."""
    table = Table(title="the whole patch did not hold: subsets measured", title_justify="left")
    table.add_column("fixes")
    table.add_column("status")
    table.add_column("speedup", justify="right")
    table.add_column("held")
    table.add_column("why not", overflow="fold")
    for trial in search.get("trials") or []:
        speedup = trial.get("speedup")
        held = "[green]yes[/green]" if trial.get("held") else "[red]no[/red]"
        table.add_row(
            ", ".join(trial["fixes"]), str(trial.get("status")), f"{speedup:.2f}x" if speedup else "-", held,
            "" if trial.get("held") else escape(trial.get("reason") or ""),
        )
    return table


def render(console: Console, report: dict) -> None:
    if report.get("baseline"):
        console.print(results_table(report))
    if report.get("search"):
        console.print(search_table(report["search"]))
    if report.get("ablation"):
        console.print(ablation_table(report["ablation"]))
    for label, run in (("original", report.get("baseline")), ("patched", report.get("patched"))):
        if run and run.get("status") != "ok" and run.get("error"):
            console.print(f"[bold red]{label} run:[/bold red]")
            console.print(run["error"], markup=False, highlight=False)
            output = run.get("output") or ""
            if output and output.strip() not in run["error"]:
                console.print("[dim]its last output:[/dim]")
                console.print(output, markup=False, highlight=False)
    style = "green" if report.get("applied") else ("yellow" if not report.get("fixes") else "red")
    console.print(f"[{style}]{escape(report['verdict'])}[/{style}]")


def matplotlib_missing() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return True
    return False


def plot(path: str, report: dict) -> None:
    """Loss curves (left) and steps per second (right) for every run that has them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    curves = []  # each step's loss as the mean over its micro-steps, as the table shows it
    if report.get("baseline"):
        for index, run in enumerate(report.get("baseline_runs") or [report["baseline"]]):
            curves.append((f"baseline{'' if index == 0 else f' {index + 1}'}", objective(run, True), run))
    if report.get("patched"):
        curves.append(("patched", objective(report["patched"], True), report["patched"]))
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, losses, _ in curves:
        points = [(i + 1, v) for i, v in enumerate(losses) if v is not None and as_float(v) == as_float(v)]
        if points:
            left.plot(*zip(*points), marker=".", label=label)
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_xlabel("optimizer step")
    left.set_ylabel("loss (mean per micro-step)")
    left.set_title("loss")
    left.legend()
    bars = [(label, run.get("steps_per_second") or 0.0) for label, _, run in curves]
    bars += [(f"only {e['code']}", e.get("steps_per_second") or 0.0) for e in report.get("ablation") or [] if e.get("steps_per_second")]
    right.bar([b[0] for b in bars], [b[1] for b in bars], color=["tab:gray" if b[0].startswith("baseline") else "tab:blue" for b in bars])
    right.set_ylabel("optimizer steps / s")
    right.set_title(f"throughput ({report.get('device') or 'unknown device'})")
    right.tick_params(axis="x", rotation=30)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
