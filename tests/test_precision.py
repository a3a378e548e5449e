"""ADV201 / ADV204 / ADV205 beyond their own examples: how their fixes meet in the fixer's
rounds, the shared GradScaler removal, and look-alikes that must stay silent."""
from __future__ import annotations

import textwrap

from helpers import fix, lint

PRECISION = ["ADV201", "ADV204", "ADV205"]


def codes_of(diagnostics):
    return [d.code for d in diagnostics]


def fixed(source: str, codes=PRECISION, unsafe: bool = True, gpu: str | None = None) -> str:
    result = fix(source, codes=codes, unsafe=unsafe, gpu=gpu)
    assert not result.dropped, result.dropped
    output = result.fixed.decode()
    compile(output, "fixed.py", "exec")
    again = fix(output, codes=codes, unsafe=unsafe, gpu=gpu)
    assert again.fixed.decode() == output, "fix is not idempotent"
    return output


DEPRECATED_FP16_LOOP = """
from torch.cuda.amp import autocast, GradScaler
import torch

def train(model, loader, opt):
    scaler = GradScaler()
    for x, y in loader:
        with autocast():
            loss = model(x.cuda())
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
"""


def test_adv201_then_adv204_converge_to_bf16_without_scaler():
    assert fixed(DEPRECATED_FP16_LOOP) == textwrap.dedent(
        """
        import torch

        def train(model, loader, opt):
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x.cuda())
                loss.backward()
                opt.step()
                opt.zero_grad()
        """
    )


def test_safe_fixes_only_modernise_the_api():
    result = fix(DEPRECATED_FP16_LOOP, codes=PRECISION, unsafe=False)
    assert result.fixed.decode() == textwrap.dedent(
        """
        import torch

        def train(model, loader, opt):
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = model(x.cuda())
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
        """
    )
    assert codes_of(result.remaining) == ["ADV201"]


def test_all_rules_together_leave_no_precision_finding():
    result = fix(DEPRECATED_FP16_LOOP, codes=None, unsafe=True)
    output = result.fixed.decode()
    compile(output, "fixed.py", "exec")
    assert not [d for d in result.remaining if d.code.startswith("ADV20")]
    assert "scaler" not in output and "torch.cuda.amp" not in output
    assert fix(output, codes=None, unsafe=True).fixed.decode() == output


def test_two_fp16_sites_switch_dtype_then_adv205_drops_the_scaler():
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    for x in finetune_loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    """
    result = fix(source, codes=PRECISION)
    assert [a.code for a in result.applied] == ["ADV201", "ADV201", "ADV205"]
    assert result.fixed.decode() == textwrap.dedent(
        """
        import torch
        for x in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            loss.backward()
            opt.step()
        for x in finetune_loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            loss.backward()
            opt.step()
        """
    )


def test_inference_autocast_keeps_fp16_and_does_not_hold_the_scaler():
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        model(x)
    """
    assert [d.line for d in lint(source, codes=["ADV201"])] == [5]
    result = fix(source, codes=PRECISION)
    assert [a.code for a in result.applied] == ["ADV201"]
    assert result.fixed.decode() == textwrap.dedent(
        """
        import torch
        for x in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            loss.backward()
            opt.step()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
            model(x)
        """
    )


def test_training_engine_that_hides_backward_in_a_loss_scaler_object():
    # timm / DeiT style: ``loss_scaler(loss, optimizer)`` calls backward() out of sight.
    source = """
    import torch

    def train_one_epoch(model, criterion, loader, optimizer, loss_scaler):
        for samples, targets in loader:
            with torch.cuda.amp.autocast():
                loss = criterion(model(samples), targets)
            optimizer.zero_grad()
            loss_scaler(loss, optimizer, parameters=model.parameters())

    @torch.no_grad()
    def evaluate(model, loader):
        for images, target in loader:
            with torch.cuda.amp.autocast():
                output = model(images)
    """
    assert [d.line for d in lint(source, codes=["ADV201"])] == [6]


def test_scaler_with_other_uses_is_kept_and_reported_by_adv205_without_fix():
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    torch.save(scaler.state_dict(), "scaler.pt")
    """
    result = fix(source, codes=PRECISION)
    output = result.fixed.decode()
    assert "dtype=torch.bfloat16" in output and "scaler.scale(loss).backward()" in output
    assert [(d.code, d.fix_description) for d in result.remaining] == [("ADV205", None)]


def test_scaler_passed_to_a_function_is_kept():
    source = """
    import torch
    def step(model, x, opt, scaler):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    scaler = torch.amp.GradScaler("cuda")
    step(model, x, opt, scaler)
    """
    diagnostics = lint(source, codes=["ADV205"])
    assert [(d.code, d.fix_description) for d in diagnostics] == [("ADV205", None)]
    assert fixed(source) == textwrap.dedent(source)


def test_scaler_stored_on_an_object_is_kept():
    source = """
    import torch
    class Trainer:
        def __init__(self):
            self.scaler = torch.amp.GradScaler("cuda")
        def step(self, x):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
    """
    output = fixed(source)
    assert "dtype=torch.bfloat16" in output and "self.scaler.step(self.opt)" in output


def test_removal_never_leaves_an_empty_block():
    source = """
    import torch
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
            scaler.scale(loss).backward()
        if use_amp:
            scaler.update()
        else:
            scaler.unscale_(opt); scaler.update()
        if clip: scaler.unscale_(opt)
        scaler.step(opt)
    """
    assert fixed(source) == textwrap.dedent(
        """
        import torch
        for x in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
                loss.backward()
            if use_amp:
                pass
            else:
                pass
            if clip: pass
            opt.step()
        """
    )


def test_plumbing_on_one_line_and_expressions_needing_parentheses():
    source = """
    import torch
    scaler = torch.amp.GradScaler()
    for x in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16): loss = model(x); scaler.scale(loss * 2).backward(retain_graph=True)
        result = scaler.step(self.optimizers[0]); scaler.update()  # step
    """
    assert fixed(source) == textwrap.dedent(
        """
        import torch
        for x in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16): loss = model(x); (loss * 2).backward(retain_graph=True)
            result = self.optimizers[0].step()  # step
        """
    )


def test_two_scalers_of_a_gan_both_go():
    source = """
    import torch
    scaler_g = torch.amp.GradScaler("cuda")
    scaler_d = torch.amp.GradScaler("cuda")
    for real in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            d_loss = disc_loss(real)
        scaler_d.scale(d_loss).backward()
        scaler_d.step(opt_d)
        scaler_d.update()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            g_loss = gen_loss(real)
        scaler_g.scale(g_loss).backward()
        scaler_g.step(opt_g)
        scaler_g.update()
    """
    output = fixed(source)
    assert "scaler" not in output
    assert "d_loss.backward()" in output and "opt_g.step()" in output


def test_deprecated_import_kept_while_another_use_remains():
    source = """
    from torch.cuda.amp import autocast
    import torch
    with autocast(dtype=torch.bfloat16):
        a = 1
    with autocast(dtype=torch.bfloat16):
        b = 2
    """
    output = fixed(source, codes=["ADV204"])
    assert output.count('torch.autocast("cuda", dtype=torch.bfloat16)') == 2


def test_import_under_try_is_left_alone():
    source = """
    try:
        from torch.cuda.amp import autocast
    except ImportError:
        autocast = None
    with autocast(dtype=torch.bfloat16):
        a = 1
    """
    output = fixed(source, codes=["ADV204"])
    assert "from torch.cuda.amp import autocast" in output
    assert 'with torch.autocast("cuda", dtype=torch.bfloat16):' in output
    assert output.lstrip().startswith("import torch\n")


def test_lightning_precision_from_an_int_argparse_default_is_advice_only():
    source = """
    import argparse
    import lightning as L
    p = argparse.ArgumentParser()
    p.add_argument("--precision", type=int, default=16)
    args = p.parse_args()
    trainer = L.Trainer(precision=args.precision)
    """
    diagnostics = lint(source, codes=["ADV201"])
    assert [(d.code, d.fix_description) for d in diagnostics] == [("ADV201", None)]


def test_training_arguments_in_a_dict_literal_and_accelerate_constant():
    source = """
    from transformers import TrainingArguments
    from accelerate import Accelerator
    MIXED_PRECISION = 'fp16'
    kwargs = {"output_dir": "out", "fp16": True}
    args = TrainingArguments(**kwargs)
    accelerator = Accelerator(mixed_precision=MIXED_PRECISION)
    """
    assert fixed(source) == textwrap.dedent(
        """
        from transformers import TrainingArguments
        from accelerate import Accelerator
        MIXED_PRECISION = 'bf16'
        kwargs = {"output_dir": "out", "bf16": True}
        args = TrainingArguments(**kwargs)
        accelerator = Accelerator(mixed_precision=MIXED_PRECISION)
        """
    )


def test_message_names_the_target():
    source = """
    from transformers import TrainingArguments
    args = TrainingArguments("out", fp16=True)
    """
    (diagnostic,) = lint(source, codes=["ADV201"], gpu="A100")
    assert "A100-80GB" in diagnostic.message
    assert diagnostic.message.endswith("(guide: Mixed precision training)")


def test_targets_without_bf16_keep_fp16_but_adv204_still_applies():
    source = """
    import torch
    scaler = torch.cuda.amp.GradScaler()
    for x in loader:
        with torch.cuda.amp.autocast():
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    """
    for gpu in ("V100", "T4"):
        assert codes_of(lint(source, codes=PRECISION, gpu=gpu)) == ["ADV204", "ADV204"]
        output = fixed(source, gpu=gpu)
        assert 'torch.autocast("cuda")' in output and 'torch.amp.GradScaler("cuda")' in output


def test_bf16_capability_fallback_with_a_flag_name():
    source = """
    import torch
    use_bf16 = torch.cuda.is_bf16_supported()
    if use_bf16:
        amp = torch.autocast("cuda", dtype=torch.bfloat16)
    else:
        amp = torch.autocast("cuda", dtype=torch.float16)
    scaler = torch.amp.GradScaler("cuda", enabled=not use_bf16)
    with amp:
        loss = model(x)
    scaler.scale(loss).backward()
    """
    assert lint(source, codes=PRECISION) == []


def test_unknown_dtype_or_device_is_silent():
    for source in (
        """
        import torch
        with torch.autocast("cuda", dtype=getattr(torch, args.dtype)):
            loss = model(x)
        loss.backward()
        """,
        """
        import torch
        with torch.autocast(device.type, dtype=torch.float16):
            loss = model(x)
        loss.backward()
        """,
        """
        import torch
        amp_kwargs = make_kwargs()
        with torch.autocast("cuda", **amp_kwargs):
            loss = model(x)
        loss.backward()
        """,
    ):
        assert lint(source, codes=PRECISION) == []


def test_adv205_silent_when_the_scaler_escapes_the_file():
    for use in ("train_one_epoch(model, loader, scaler)", "state = {'scaler': scaler}"):
        source = f"""
        import torch
        from engine import train_one_epoch
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
        {use}
        """
        assert lint(source, codes=["ADV205"]) == [], use


def test_adv205_reports_a_scaler_on_self_without_fix():
    source = """
    import torch
    class Trainer:
        def __init__(self):
            self.scaler = torch.amp.GradScaler("cuda")
        def step(self, x):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = self.model(x)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
    """
    assert [(d.code, d.fix_description) for d in lint(source, codes=["ADV205"])] == [("ADV205", None)]


PROBE = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    model = build_backbone().cuda()
    linear_classifier = nn.Linear(768, 1000).cuda()
    optimizer = torch.optim.SGD(linear_classifier.parameters(), lr=0.01)
    for inp, target in loader:
        inp, target = inp.cuda(non_blocking=True), target.cuda(non_blocking=True)
        with torch.no_grad():
            output = model(inp)
        output = linear_classifier(output)
        loss = nn.CrossEntropyLoss()(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """
)


def test_a_linear_probe_on_frozen_features_gets_advice_not_a_head_only_autocast():
    """DINO's eval_linear.py (held-out 40): the backbone runs under no_grad, and the fix's
    autocast would wrap the linear head alone, which gains nothing and changes the probe's numbers."""
    (finding,) = [d for d in lint(PROBE, codes=frozenset({"ADV203"}), gpu="A100")]
    assert finding.fix_applicability is None and "would not reach" in finding.message, finding.message


def test_a_distillation_teacher_under_no_grad_keeps_the_fix():
    """The teacher's logits go to the loss; the student's forward is in the region and pays."""
    distill = PROBE.replace("output = model(inp)", "teacher_logits = model(inp)").replace(
        "output = linear_classifier(output)\n    loss = nn.CrossEntropyLoss()(output, target)",
        "output = linear_classifier(inp)\n    loss = nn.MSELoss()(output, teacher_logits)",
    )
    (finding,) = [d for d in lint(distill, codes=frozenset({"ADV203"}), gpu="A100")]
    assert finding.fix_applicability is not None, finding.message
