"""Run `advisor fix --verify --unsafe-fixes --ablate` on every benchmark script and tabulate the results.

    python bench/verify/run.py                       # full sizes: meant for a GPU
    python bench/verify/run.py --tiny                # tiny sizes on the CPU: a plumbing check
    python bench/verify/run.py --only gpt2_plain_loop --reports-dir bench-reports
    python bench/verify/run.py --render-only --reports-dir bench-reports --out docs/benchmarks.md

Each script is copied to a fresh temporary folder first, so verify's patch lands on the copy
and the scripts here stay as they are. Every script gets one record, `<reports-dir>/<name>.json`:
verify's JSON report (the contract of `advisor fix --verify --report`) plus what the runner
knows (arguments, the script's model size, exit code, wall time). The markdown table is rendered
from every record in the folder, so a GPU session limited to minutes per command can run the
scripts one at a time (`--only`) into the same folder and render once at the end.

Time is bounded: `--budget` (420 s by default at full size) is shared among the scripts by
weight, what one leaves unspent going to the next, and each `advisor fix --verify` gets its share
as its own `--budget` (the baseline and the whole patch first; a second baseline, the search for
the best subset, the batch probe and the per-fix runs only as far as the budget pays). Each run's
line is printed as it ends, so a long job shows signs of life. advisor need not be installed:
the runner puts this checkout first on PYTHONPATH (python with libcst, rich and torch is enough).

The GPT-style scripts append `{"parameters", "tokens_per_sample", "samples_per_step"}` to the
file named by ADVISOR_BENCH_META; the model FLOP utilisation is then
6 x parameters x tokens per second / the GPU's dense bf16 peak (advisor/targets.py).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))  # advisor.targets, from the checkout this runner sits in

from advisor.targets import lookup  # noqa: E402

SCRIPTS = ("mlp_synthetic", "cnn_synthetic", "gpt2_plain_loop", "gpt2_trainer", "accelerate_loop")
# Shares of the total --budget: the GPT-2 scripts compile a 124M-parameter model in their patched
# runs, the others compile small ones; the Trainer script also pays ~15 s of start-up per run
# (H100, 2026-11-27: 29 s for a 20-step baseline) and probes its batch split. What a script
# leaves unspent goes to the ones after it.
BUDGET_WEIGHTS = {"mlp_synthetic": 1, "cnn_synthetic": 1, "gpt2_plain_loop": 2, "gpt2_trainer": 3, "accelerate_loop": 1}
# One H100 or H200 runs all five in 8 minutes: 440 s for the runs, the rest for the runner
# (on an H100 the whole bench took 427 s at a budget of 420).
DEFAULT_BUDGET_S = 440.0

# The H100 profile's peak is the SXM5 part's; the PCIe card is slower (datasheet: 1513 TFLOPS
# bf16 with sparsity, so 756 dense).
H100_PCIE_BF16_TFLOPS = 756.0

START = "<!-- bench-results:{section} start -->"
END = "<!-- bench-results:{section} end -->"


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def script_args(name: str, tiny: bool, cuda: bool) -> list[str]:
    args = ["--tiny"] if tiny else []
    if name == "gpt2_trainer" and not cuda:
        # transformers refuses bf16 (the patched version) without a GPU unless told to use the CPU
        args.append("--use-cpu")
    return args


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    # `python -m advisor` runs this checkout's advisor, installed or not
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def budget_shares(names: list[str], total: float | None, spent: dict[str, float]) -> float | None:
    """The next script's budget: its weight's share of what is left of ``total``."""
    if total is None:
        return None
    left = [name for name in names if name not in spent]
    weights = sum(BUDGET_WEIGHTS[name] for name in left)
    remaining = max(total - sum(spent.values()), 0.0)
    return round(remaining * BUDGET_WEIGHTS[left[0]] / weights, 1) if weights else None


def relay(stream, name: str, lines: list[str]) -> None:
    """verify's line per finished run, shown as it comes: a GPU job's log shows signs of life."""
    for line in stream:
        lines.append(line)
        if line.strip():
            print(f"[bench] {name}: {line.rstrip()}", flush=True)


def verify_one(name: str, options: argparse.Namespace, cuda: bool, reports_dir: Path, budget: float | None = None) -> dict:
    """Verify one script on a temporary copy; return its record (also written to reports_dir)."""
    args = script_args(name, options.tiny, cuda)
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        workdir = Path(tmp)
        script = workdir / f"{name}.py"
        shutil.copyfile(HERE / f"{name}.py", script)
        report_path = workdir / "report.json"
        meta_path = workdir / "meta.jsonl"
        command = [
            sys.executable, "-m", "advisor", "fix", "--verify", str(script), "--unsafe-fixes",
            "--steps", str(options.steps), "--warmup", str(options.warmup), "--timeout", str(options.timeout),
            "--report", str(report_path),
        ]
        if options.ablate:
            command.append("--ablate")
        if budget is not None:
            command += ["--budget", f"{budget:g}"]
        if options.plot:
            command += ["--plot", str(reports_dir / f"{name}.png")]
        command += ["--", *args]
        env = environment()
        env["ADVISOR_BENCH_META"] = str(meta_path)
        started = time.monotonic()
        with subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
            errors: list[str] = []
            reader = threading.Thread(target=relay, args=(process.stderr, name, errors), daemon=True)
            reader.start()
            stdout = process.stdout.read()
            process.wait()
            reader.join()
        completed = subprocess.CompletedProcess(command, process.returncode, stdout, "".join(errors))
        wall_s = time.monotonic() - started
        report = json.loads(report_path.read_text()) if report_path.exists() else None
        record = {
            "script": f"bench/verify/{name}.py",
            "command": options.command,
            "args": args,
            "steps": options.steps,
            "warmup": options.warmup,
            "ablate": options.ablate,
            "budget_s": budget,
            "exit_code": completed.returncode,
            "wall_s": round(wall_s, 1),
            "date": datetime.date.today().isoformat(),
            "versions": versions(),
            "meta": read_meta(meta_path),
            "report": report,
            # verify's own screen output says why when there is no report
            "output_tail": None if report is not None else (completed.stdout[-2000:] + completed.stderr[-4000:]),
        }
    (reports_dir / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def read_meta(path: Path) -> dict | None:
    """The script's model size. Every run appends a line; the smallest parameter count is the
    baseline's (a padded vocabulary adds parameters that do no useful work)."""
    if not path.exists():
        return None
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return min(lines, key=lambda meta: meta["parameters"]) if lines else None


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for module in ("advisor", "torch", "transformers", "accelerate"):
        try:
            found[module] = __import__(module).__version__
        except Exception:
            pass
    return found


# ---------------------------------------------------------------- rendering


def peak_tflops(device: str | None) -> float | None:
    profile = lookup(device) if device else None
    if profile is None:
        return None
    if profile.name == "H100" and "pcie" in device.lower():
        return H100_PCIE_BF16_TFLOPS
    return profile.bf16_tflops


def on_gpu(device: str | None) -> bool:
    return bool(device) and not device.strip().lower().startswith("cpu")


def number(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def ratio(value) -> str:
    return "—" if value is None else f"{value:.2f}x"


def memory(run: dict | None) -> str:
    value = (run or {}).get("peak_memory_bytes")
    if value is None:
        return "—"
    return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.0f} MiB"


def samples_per_second(run: dict | None, meta: dict | None) -> float | None:
    """Exact from the script's own samples per optimizer step where it says; else verify's figure."""
    run = run or {}
    if meta and meta.get("samples_per_step") and run.get("steps_per_second"):
        return run["steps_per_second"] * meta["samples_per_step"]
    return run.get("samples_per_second")


def mfu(run: dict | None, meta: dict | None, peak: float | None) -> float | None:
    if not meta or not peak or not run or run.get("status") != "ok":
        return None
    samples = samples_per_second(run, meta)
    if samples is None:
        return None
    tokens_per_second = samples * meta["tokens_per_sample"]
    return 6 * meta["parameters"] * tokens_per_second / (peak * 1e12)


def cell(text) -> str:
    # verify names the file it ran: the temporary copy, whose folder means nothing here
    text = re.sub(r"\S*[/\\]bench-[a-z0-9_]+-[^/\\\s]+[/\\]", "", str(text))
    return text.replace("|", "\\|").replace("\n", " ")


def status(run: dict | None) -> str:
    if not run:
        return "—"
    return "" if run.get("status") == "ok" else f" ({run.get('status')})"


def ablation_entry(entry: dict) -> str:
    text = f"{entry.get('code')} {ratio(entry.get('speedup'))}"
    if entry.get("speedup") is None and entry.get("note"):
        return f"{entry.get('code')}: {entry['note']}"
    if entry.get("status") not in (None, "ok"):
        return f"{text} ({entry['status']})"
    return text + (" (parity fails)" if entry.get("loss_parity") is False else "")


def summary_row(name: str, record: dict) -> str:
    report = record.get("report")
    if not report:
        why = (record.get("output_tail") or "").strip().splitlines()
        reason = f"no report (exit {record.get('exit_code')}): {cell(why[-1] if why else '')}"
        return f"| `{name}` |" + " — |" * 9 + f" {reason} |"
    baseline, patched, meta = report.get("baseline"), report.get("patched"), record.get("meta")
    peak = peak_tflops(report.get("device"))
    per_fix = ", ".join(ablation_entry(entry) for entry in report.get("ablation") or []) or "—"
    if meta and peak:
        before, after = mfu(baseline, meta, peak), mfu(patched, meta, peak)
        utilisation = f"{number(before and 100 * before, 1)}% → {number(after and 100 * after, 1)}%"
    else:
        utilisation = "—"
    parity = {True: "yes", False: "**no**"}.get(report.get("loss_parity"), "—")
    applied = " (written)" if report.get("applied") else " (not written)"
    return (
        f"| `{name}` | {cell(report.get('device', '—'))} | {', '.join(report.get('fixes') or []) or '—'}{applied} "
        f"| {number((baseline or {}).get('steps_per_second'))}{status(baseline)} "
        f"| {number((patched or {}).get('steps_per_second'))}{status(patched)} "
        f"| **{ratio(report.get('speedup'))}** | {per_fix} | {memory(baseline)} → {memory(patched)} "
        f"| {parity} | {utilisation} | {cell(report.get('verdict', '—'))} |"
    )


def detail_rows(name: str, record: dict) -> list[str]:
    report = record.get("report") or {}
    rows = []
    for variant in ("baseline", "patched"):
        run = report.get(variant)
        if not run:
            continue
        step_time = run.get("step_time_ms") or {}
        losses = run.get("losses") or []
        rows.append(
            f"| `{name}` | {variant} | {run.get('status', '—')} | {run.get('steps', '—')} "
            f"| {number(run.get('steps_per_second'))} | {number(samples_per_second(run, record.get('meta')), 1)} "
            f"| {number(step_time.get('median'), 1)} / {number(step_time.get('p90'), 1)} | {memory(run)} "
            f"| {number(losses[-1], 4) if losses and isinstance(losses[-1], (int, float)) else '—'} |"
        )
    return rows


def render(records: dict[str, dict]) -> tuple[str, str]:
    """The markdown block for these records, and its section name ("gpu" or "cpu")."""
    devices = sorted({(r.get("report") or {}).get("device") or "unknown" for r in records.values()})
    cpu = not any(on_gpu(d) for d in devices if d != "unknown")
    first = next(iter(records.values()))
    versions_text = ", ".join(f"{k} {v}" for k, v in first.get("versions", {}).items())
    lines = []
    if cpu:
        lines += [
            "**CPU plumbing check, not performance.** These runs use `--tiny` models on a CPU: they show",
            "that verify runs every script, patches it, and compares loss. CPU timings do not predict GPU",
            "gains (pinned memory, fused AdamW, bf16 and `torch.compile` are GPU optimisations), so the",
            "speedups below mean nothing for a GPU.",
            "",
        ]
    window = " (more where they took under 2 s on CUDA: the steps column says how many)" if any(
        (run or {}).get("steps", 0) > (r.get("warmup") or 0) + (r.get("steps") or 0)
        for r in records.values() for run in ((r.get("report") or {}).get("baseline"), (r.get("report") or {}).get("patched"))
    ) else ""
    lines += [
        f"Device: {', '.join(devices)}. Date: {first.get('date')}. "
        f"Command: `{first.get('command') or 'python bench/verify/run.py'}`",
        f"({first.get('warmup')} warm-up + {first.get('steps')} measured optimizer steps per run{window}; {versions_text}).",
        "",
        "| script | device | fixes | baseline steps/s | patched steps/s | speedup | per fix (ablation) "
        "| peak memory before → after | loss parity | MFU before → after | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [summary_row(name, record) for name, record in records.items()]
    lines += [
        "",
        "| script | run | status | steps | steps/s | samples/s | step ms median / p90 | peak memory | final loss |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, record in records.items():
        lines += detail_rows(name, record)
    return "\n".join(lines) + "\n", "cpu" if cpu else "gpu"


def write_markdown(out: Path, block: str, section: str) -> None:
    """Replace this section's block between its markers; append it (with markers) if absent."""
    start, end = START.format(section=section), END.format(section=section)
    wrapped = f"{start}\n{block}{end}"
    text = out.read_text() if out.exists() else ""
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: wrapped, text, count=1)
    else:
        text = (text.rstrip("\n") + "\n\n" if text else "") + wrapped + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def load_records(reports_dir: Path) -> dict[str, dict]:
    return {
        name: json.loads((reports_dir / f"{name}.json").read_text())
        for name in SCRIPTS
        if (reports_dir / f"{name}.json").exists()
    }


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="measured optimizer steps per run (15; 5 with --tiny)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up optimizer steps per run (5; 2 with --tiny)")
    parser.add_argument("--timeout", type=int, default=None, help="seconds per run (900; 300 with --tiny)")
    parser.add_argument(
        "--budget", type=float, default=None,
        help=f"seconds for every script's runs together, shared by weight ({DEFAULT_BUDGET_S:g}; none with --tiny)",
    )
    parser.add_argument("--tiny", action="store_true", help="pass --tiny to every script: a CPU plumbing check")
    parser.add_argument("--only", nargs="+", choices=SCRIPTS, help="run these scripts only")
    parser.add_argument("--no-ablate", dest="ablate", action="store_false", help="skip the per-fix runs")
    parser.add_argument("--plot", action="store_true", help="also draw <reports-dir>/<script>.png")
    parser.add_argument("--reports-dir", type=Path, help="keep the records here (default: a temporary folder)")
    parser.add_argument("--render-only", action="store_true", help="run nothing: render the records in --reports-dir")
    parser.add_argument("--out", type=Path, help="markdown file to write the table into (docs/benchmarks.md)")
    options = parser.parse_args(argv)
    options.steps = options.steps or (5 if options.tiny else 15)
    options.warmup = options.warmup if options.warmup is not None else (2 if options.tiny else 5)
    if options.budget is None and not options.tiny:
        options.budget = DEFAULT_BUDGET_S
    options.timeout = options.timeout or (300 if options.tiny else 900)
    if options.render_only and options.reports_dir is None:
        parser.error("--render-only needs --reports-dir")
    return options


def main(argv=None) -> int:
    options = parse_args(argv)
    options.command = " ".join(["python bench/verify/run.py", *(sys.argv[1:] if argv is None else argv)])
    temporary = None
    if options.reports_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="bench-reports-")
        options.reports_dir = Path(temporary.name)
    options.reports_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    if not options.render_only:
        cuda = cuda_available()
        names = list(options.only or SCRIPTS)
        spent: dict[str, float] = {}
        for name in names:
            budget = budget_shares(names, options.budget, spent)
            print(f"[bench] {name}: advisor fix --verify{f' --budget {budget:g}' if budget else ''} ...", flush=True)
            record = verify_one(name, options, cuda, options.reports_dir, budget)
            spent[name] = record["wall_s"]
            report = record["report"]
            if report is None:
                failures += 1
                print(f"[bench] {name}: no report (exit {record['exit_code']})\n{record['output_tail']}", flush=True)
            else:
                print(f"[bench] {name}: speedup {ratio(report.get('speedup'))}, {report.get('verdict')} "
                      f"({record['wall_s']} s)", flush=True)
    records = load_records(options.reports_dir)
    if not records:
        print("[bench] no records to render", file=sys.stderr)
        return 1
    block, section = render(records)
    print(block)
    if options.out:
        write_markdown(options.out, block, section)
        print(f"[bench] wrote the {section} table into {options.out}")
    if temporary is None:
        print(f"[bench] records in {options.reports_dir}")
    else:
        temporary.cleanup()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
