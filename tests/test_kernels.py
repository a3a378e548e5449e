"""ADV601 beyond its own examples: spellings of torch's Adam, Trainer `optim`, silences."""
from __future__ import annotations

import textwrap

import pytest

from helpers import fix, lint

CODE = "ADV601"


def findings(source: str):
    return [d for d in lint(source, codes=[CODE]) if d.code == CODE]


def fixed(source: str) -> str:
    return fix(source, codes=[CODE], unsafe=False).fixed.decode()


@pytest.mark.parametrize(
    "imports,spelling",
    [
        ("import torch", "torch.optim.Adam"),
        ("import torch.optim as optim", "optim.AdamW"),
        ("from torch.optim import AdamW as A", "A"),
        ("from torch.optim.adamw import AdamW", "AdamW"),
    ],
)
def test_torch_adam_spellings_get_fused(imports, spelling):
    source = f"{imports}\nmodel = Net().to('cuda')\nopt = {spelling}(model.parameters(), lr=1e-3)\n"
    (finding,) = findings(source)
    assert finding.message.startswith(f"`{spelling}` without `fused=True`")
    assert finding.message.endswith("(guide: Optimizer choice)")
    assert finding.fix_applicability == "safe"
    assert f"{spelling}(model.parameters(), lr=1e-3, fused=True)" in fixed(source)


@pytest.mark.parametrize(
    "call",
    [
        "torch.optim.AdamW(model.parameters(), fused=None)",
        "torch.optim.AdamW(model.parameters(), foreach=True)",
        "torch.optim.AdamW(model.parameters(), **{'lr': 1e-3, 'fused': True})",
        "torch.optim.AdamW(model.parameters(), differentiable=flag)",
        "torch.optim.AdamW(optim_groups, lr=lr, **extra_args)",
        "torch.optim.Adagrad(model.parameters())",
    ],
)
def test_explicit_or_unknown_choices_are_silent(call):
    source = f"""
        import torch
        use_fused = torch.cuda.is_available()
        extra_args = dict(fused=True) if use_fused else dict()
        model = Net().cuda()
        opt = {call}
        """
    assert findings(source) == []


def test_differentiable_false_is_still_reported():
    source = "import torch\nmodel = Net().cuda()\nopt = torch.optim.Adam(model.parameters(), differentiable=False)\n"
    assert len(findings(source)) == 1


def test_model_moved_only_to_the_cpu_is_silent():
    source = """
        import torch
        cpu = torch.device("cpu")
        teacher = Net().cuda()
        student = Net()
        student.to(cpu)
        opt = torch.optim.AdamW(student.parameters())
        """
    assert findings(source) == []


def test_dtype_cast_is_not_a_device_move():
    source = """
        import torch
        model = Net().to(torch.bfloat16).cuda()
        opt = torch.optim.AdamW(model.parameters())
        """
    assert len(findings(source)) == 1


def test_optimizer_handed_to_deepspeed_is_silent():
    source = """
        import torch
        import deepspeed
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters())
        engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=cfg)
        """
    assert findings(source) == []


def test_trainer_optim_in_a_dict_is_edited_in_place():
    source = """
        from transformers import Trainer, TrainingArguments
        config = {"output_dir": "out", "optim": "adamw_torch"}
        args = TrainingArguments(**config)
        """
    (finding,) = findings(source)
    assert finding.message.startswith('`optim="adamw_torch"` picks the unfused AdamW')
    assert fixed(source) == textwrap.dedent(source).replace('"adamw_torch"', '"adamw_torch_fused"')


@pytest.mark.parametrize(
    "optim",
    ['"adamw_torch_fused"', '"adafactor"', '"adamw_bnb_8bit"', "cli_choice", "OptimizerNames.ADAFACTOR"],
)
def test_other_trainer_optimizers_are_silent(optim):
    source = f"""
        from transformers import TrainingArguments
        from transformers.training_args import OptimizerNames
        args = TrainingArguments("out", optim={optim})
        """
    assert findings(source) == []


def test_fixes_are_idempotent():
    source = """
        import torch
        from transformers import TrainingArguments
        model = Net().cuda()
        opt = torch.optim.Adam(model.parameters())
        args = TrainingArguments("out", optim="adamw_hf")
        """
    once = fixed(source)
    assert "fused=True" in once and '"adamw_torch_fused"' in once
    assert findings(once) == []
    assert fixed(once) == once


def test_adv605_lightning_gpus_argument_means_gpu_training():
    # Lightning 1.x: `Trainer(gpus=1)` trains on the GPU whatever `accelerator` the expression picks.
    source = """
        import pytorch_lightning as pl
        import torch
        import torchvision

        class CoolSystem(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.backbone = torchvision.models.resnet18(pretrained=True)

        def main():
            model = CoolSystem()
            trainer = pl.Trainer(max_epochs=10, gpus=1, precision=16,
                                 accelerator='cuda' if torch.cuda.is_available() else 'cpu')
            trainer.fit(model)
    """
    assert [d.code for d in lint(source, codes=["ADV605"])] == ["ADV605"]
    no_gpus = source.replace("gpus=1", "gpus=0")
    assert lint(no_gpus, codes=["ADV605"]) == []
    unreadable = source.replace("gpus=1, ", "")
    assert lint(unreadable, codes=["ADV605"]) == []


def test_no_compile_points_at_the_network_a_wrapper_wraps():
    source = textwrap.dedent(
        """
        import torch
        from models import TransformerWrapper, AutoregressiveWrapper
        model = TransformerWrapper(num_tokens=256, depth=6)
        model = AutoregressiveWrapper(model).cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for x in loader:
            model(x.cuda()).backward()
            optimizer.step()
        """
    )
    found = [d for d in lint(source, codes=["ADV602"]) if d.code == "ADV602"]
    assert [d.line for d in found] == [4]
    assert "model = torch.compile(model)" in fix(source, codes=["ADV602"], unsafe=True, measured=True).fixed.decode().splitlines()[5]


def test_no_compile_points_at_the_base_network_of_a_differently_named_wrapper():
    source = textwrap.dedent(
        """
        import torch
        from models import TransformerWrapper, AutoregressiveWrapper
        base_model = TransformerWrapper(num_tokens=256, depth=6)
        model = AutoregressiveWrapper(base_model, pad_value=0).cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for x in loader:
            model(x.cuda()).backward()
            optimizer.step()
        """
    )
    assert [d.line for d in lint(source, codes=["ADV602"]) if d.code == "ADV602"] == [4]


@pytest.mark.parametrize(
    "choice,line",
    [
        ('parser.add_argument("--test_mode", action="store_true")', 11),  # the else branch runs by default
        ('parser.add_argument("--test_mode", action="store_false")', 9),
    ],
)
def test_no_compile_points_at_the_build_the_defaults_run(choice, line):
    source = textwrap.dedent(
        f"""
        import argparse
        import torch
        from models import GPTModel
        parser = argparse.ArgumentParser()
        {choice}
        args = parser.parse_args()
        if args.test_mode:
            model = GPTModel(TINY)
        else:
            model = GPTModel(GPT2_SMALL)
        model.cuda()
        optimizer = torch.optim.AdamW(model.parameters(), fused=True)
        for x in loader:
            model(x.cuda()).backward()
            optimizer.step()
        """
    )
    assert [d.line for d in lint(source, codes=["ADV602"]) if d.code == "ADV602"] == [line]
