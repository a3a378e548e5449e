"""Comments survive fixes, alone and combined (issue 14): the author's own-line comments are
all in the fixed file, once, whatever fixes ran and in whatever order; a trailing comment keeps
its column where the author aligned it."""
from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from helpers import fix, settings
from advisor.fixer import fix_source

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(p for p in (ROOT / "fixtures").rglob("*.py"))
NOTE = re.compile(r"# note \d+\b")


def _annotated(source: str) -> str:
    """``source`` with a comment ``# note N`` on its own line above every statement."""
    starts = {node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.stmt)}
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    for number, line in enumerate(lines, start=1):
        if number in starts:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# note {number}\n")
        out.append(line)
    return "".join(out)


def _notes(text: str) -> list[str]:
    return sorted(NOTE.findall(text))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_every_own_line_comment_survives_all_fixes_at_once(path):
    source = _annotated(path.read_text(encoding="utf-8"))
    result = fix_source(str(path.name), source.encode(), settings(gpu="H100"), True)
    fixed = result.fixed.decode()
    assert _notes(fixed) == _notes(source)
    compile(fixed, path.name, "exec")


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_every_own_line_comment_survives_safe_then_unsafe_fixes(path):
    source = _annotated(path.read_text(encoding="utf-8"))
    first = fix_source(path.name, source.encode(), settings(gpu="H100"), False).fixed
    second = fix_source(path.name, first, settings(gpu="H100"), True).fixed.decode()
    assert _notes(second) == _notes(source)


def test_the_comment_above_a_clip_survives_unscale_and_bf16_in_one_run():
    source = """
        import torch

        scaler = torch.cuda.amp.GradScaler()
        for x, y in loader:
            x = x.cuda()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).sum()
            scaler.scale(loss).backward()
            # clip to keep the warm-up stable (see issue #123)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """
    one_shot = fix(source, gpu="H100", unsafe=True).fixed.decode()
    assert "    # clip to keep the warm-up stable (see issue #123)\n    torch.nn.utils.clip_grad_norm_" in one_shot
    assert "GradScaler" not in one_shot and "bfloat16" in one_shot


def test_unscale_goes_above_the_comment_that_describes_the_clip():
    source = """
        import torch

        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = model(x.cuda()).sum()
            scaler.scale(loss).backward()

            # clip to keep the warm-up stable
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
    """
    fixed = fix(source, codes=["ADV305"], gpu="H100").fixed.decode()
    assert (
        "    scaler.scale(loss).backward()\n\n    scaler.unscale_(optimizer)\n"
        "    # clip to keep the warm-up stable\n    torch.nn.utils.clip_grad_norm_"
    ) in fixed


def test_a_removed_last_statement_leaves_its_comment_at_the_end_of_the_block():
    source = """
        import torch

        model = model.cuda()
        for batch in loader:
            loss = model(batch.cuda()).sum()
            loss.backward()
            optimizer.step()
            # free cached blocks so the next step has room
            torch.cuda.empty_cache()
        print("done")
    """
    fixed = fix(source, gpu="H100", unsafe=True).fixed.decode()
    assert "empty_cache" not in fixed
    assert "    optimizer.step()\n    # free cached blocks so the next step has room\nprint(\"done\")" in fixed


def test_an_aligned_trailing_comment_keeps_its_column():
    source = """
        from transformers import TrainingArguments

        args = TrainingArguments(
            output_dir="out",
            optim="adamw_torch",                # keep the optimizer explicit
            per_device_train_batch_size=8,      # fits on the card
        )
    """
    fixed = fix(source, codes=["ADV601"], gpu="H100").fixed.decode()
    assert '    optim="adamw_torch_fused",          # keep the optimizer explicit\n' in fixed


def test_a_single_space_comment_is_not_realigned():
    source = """
        from transformers import TrainingArguments
        args = TrainingArguments(output_dir="out", optim="adamw_torch") # explicit
    """
    fixed = fix(source, codes=["ADV601"], gpu="H100").fixed.decode()
    assert 'optim="adamw_torch_fused") # explicit\n' in fixed
