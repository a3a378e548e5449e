"""Fixes only where their premise holds (issue 16): each wrong edit of the fix audit, reduced
to a few lines, must not come back."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from helpers import fix, lint
from test_cli import run

LOOP = """
import torch
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for x, y in loader:
    loss = model(x.cuda()).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def codes(source: str, gpu: str = "A100") -> list[str]:
    return sorted(d.code for d in lint(source, gpu=gpu))


def only(source: str, code: str, script: Path):
    """The one finding of ``code`` in ``source``, checked as the file ``script`` of its project."""
    (finding,) = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == code]
    return finding


def test_fused_is_not_offered_where_deepspeed_offloads_the_optimizer(tmp_path):
    plugin = """
        import torch
        from accelerate import Accelerator
        from accelerate.utils import DeepSpeedPlugin
        accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3, offload_optimizer_device="cpu"))
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """
    assert "ADV601" not in codes(plugin)
    assert "ADV601" in codes(plugin.replace('offload_optimizer_device="cpu"', 'offload_optimizer_device="none"'))
    config = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    (tmp_path / "ds_config.json").write_text(json.dumps(config))
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch
        import deepspeed
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        engine, optimizer, _, _ = deepspeed.initialize(model=model, config="ds_config.json")
    """))
    assert "ADV601" not in [d.code for d in lint(script.read_text(), gpu="A100", path=str(script))]


def test_tf32_for_the_trainer_never_goes_into_training_arguments():
    """`TrainingArguments(tf32=True)` raises on a machine without an Ampere GPU, as CPU CI is."""
    source = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        args = TrainingArguments("out", per_device_train_batch_size=8, bf16=False, fp16=False)
        Trainer(model=model, args=args, train_dataset=ds).train()
    """
    fixed = fix(source, codes=["ADV202"], gpu="A100").fixed.decode()
    assert "tf32=True" not in fixed and 'torch.set_float32_matmul_precision("high")' in fixed


def test_test_code_is_left_out_of_folder_walks(tmp_path, capsys):
    body = textwrap.dedent(LOOP)
    (tmp_path / "train.py").write_text(body)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_train.py").write_text(body)
    (tmp_path / "test_smoke.py").write_text(body)
    (tmp_path / "conftest.py").write_text(body)
    code, out, _ = run(["check", ".", "-q", "--select", "ADV601"], capsys, tmp_path)
    assert [line.split(":")[0].removeprefix("./") for line in out.splitlines()] == ["train.py"]
    # Named on the command line, a test file is checked, as any excluded file is.
    code, out, _ = run(["check", "test_smoke.py", "-q", "--select", "ADV601"], capsys, tmp_path)
    assert out.startswith("test_smoke.py:")
    # `exclude` replaces the default list: `exclude = []` checks the tests too.
    (tmp_path / "pyproject.toml").write_text("[tool.advisor]\nexclude = []\n")
    code, out, _ = run(["check", ".", "-q", "--select", "ADV601"], capsys, tmp_path)
    assert len(out.splitlines()) == 4
    (tmp_path / "pyproject.toml").write_text('[tool.advisor]\nextend-exclude = ["train.py"]\n')
    code, out, _ = run(["check", ".", "-q", "--select", "ADV601"], capsys, tmp_path)
    assert out == "" and code == 0


ACCELERATE_SCRIPT = """
import torch
from accelerate import Accelerator

accelerator = Accelerator()
model = Net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
"""


@pytest.mark.parametrize(
    "requirements, config, fixed, says",
    [
        ("torch>=1.13\naccelerate\n", None, False, "the fix needs torch >= 2.4, and the project's requirements allow torch>=1.13"),
        (None, "2.1", False, "the fix needs torch >= 2.4, and [tool.advisor] torch-version is 2.1"),
        ("torch\n", None, True, "torch >= 2.4: the optimizer is built before the model moves"),  # a bare name: current torch
        ("torch>=2.4\n", None, True, "torch >= 2.4: the optimizer is built before the model moves"),
        (None, None, True, "torch >= 2.4: the optimizer is built before the model moves"),
    ],
)
def test_fused_on_an_optimizer_built_on_cpu_parameters_reads_the_torch_requirement(
    tmp_path, capsys, requirements, config, fixed, says
):
    """Before 2.4, torch has no fused CPU kernel: `fused=True` raises when the optimizer is
    built before the model moves to the GPU (here: before `accelerator.prepare`). Where the
    project admits an older torch, the fix is withheld and the finding says why."""
    (tmp_path / ".git").mkdir()
    if requirements is not None:
        (tmp_path / "requirements.txt").write_text(requirements)
    if config is not None:
        (tmp_path / "pyproject.toml").write_text(f'[tool.advisor]\ntorch-version = "{config}"\n')
    (tmp_path / "train.py").write_text(ACCELERATE_SCRIPT)
    code, out, _ = run(["check", "train.py", "--select", "ADV601", "--output-format", "json", "--gpu", "A100"], capsys, tmp_path)
    (finding,) = json.loads(out)["findings"]
    if fixed:
        assert finding["fix"]["applicability"] == "safe" and says in finding["fix"]["description"]
    else:
        assert finding["fix"] is None and says in finding["message"]


def test_fused_after_the_model_is_on_the_gpu_needs_torch_2(tmp_path):
    """`fused=True` for AdamW on CUDA came with torch 2.0 (Adam's with 1.13)."""
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
    script = tmp_path / "train.py"
    script.write_text(source)
    (tmp_path / "requirements.txt").write_text("torch>=2.0\n")
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability == "safe" and finding.fix_description == "Pass `fused=True`"
    (tmp_path / "requirements.txt").write_text("torch>=1.8\n")
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None
    assert "the fix needs torch >= 2.0, and the project's requirements allow torch>=1.8" in finding.message


def test_deprecated_amp_api_is_kept_where_the_project_allows_an_old_torch(tmp_path):
    source = "import torch\nmodel = Net().cuda()\nscaler = torch.cuda.amp.GradScaler()\n"
    script = tmp_path / "train.py"
    script.write_text(source)
    (tmp_path / "requirements.txt").write_text("torch>=1.8.0\n")
    finding = only(source, "ADV204", script)
    assert finding.fix_applicability is None and "needs torch >= 2.3" in finding.message


def test_code_written_for_xla_or_neuron_gets_no_cuda_fixes():
    neuron = """
        import torch
        import torch.utils.checkpoint
        import torch_xla.core.xla_model as xm
        from torch.utils.data import DataLoader

        class Block(torch.nn.Module):
            def forward(self, x):
                return torch.utils.checkpoint.checkpoint(self.inner, x)

        device = "cuda" if torch.cuda.is_available() else xm.xla_device()
        model = Net().to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        loader = DataLoader(ds, batch_size=8)
        for x in loader:
            model(x.to(device)).sum().backward()
            xm.optimizer_step(optimizer)
    """
    assert codes(neuron) == []
    # Lightning code that supports TPUs: `fused=True` raises on XLA.
    lightning = """
        import torch
        import pytorch_lightning as pl
        from pytorch_lightning.accelerators import TPUAccelerator

        class LM(pl.LightningModule):
            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=1e-4)

        torch.cuda.empty_cache()
        pl.Trainer(accelerator="auto").fit(LM())
    """
    assert "ADV601" not in codes(lightning)


def test_reinforcement_learning_networks_are_not_compiled():
    source = """
        import gymnasium as gym
        import torch
        from torch import nn

        env = gym.make("CartPole-v1")
        q_network = nn.Sequential(nn.Linear(4, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 2)).cuda()
        optimizer = torch.optim.Adam(q_network.parameters(), lr=2.5e-4, fused=True)
        for step in range(10000):
            loss = q_network(torch.as_tensor(obs, device="cuda")).sum()
            loss.backward()
            optimizer.step()
    """
    assert "ADV602" not in codes(source)


def test_in_place_compile_needs_a_torch_the_project_allows(tmp_path):
    """`nn.Module.compile()` came with torch 2.2."""
    source = textwrap.dedent("""
        import torch
        from torch import nn
        net = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)).cuda()
        net.compile()
    """)
    probe = """
        import torch
        from torch import nn
        net = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)).cuda()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x in loader:
            net(x.cuda()).sum().backward()
            opt.step()
        torch.save(net.state_dict(), "net.pt")
    """
    (tmp_path / ".git").mkdir()
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(probe))
    findings = [d for d in lint(probe, gpu="A100", path=str(script)) if d.code == "ADV602"]
    if findings and "compile()" in findings[0].message:  # the in-place form is what this script gets
        assert findings[0].fix_applicability == "unsafe"
        (tmp_path / "requirements.txt").write_text("torch>=2.0\n")
        finding = only(probe, "ADV602", script)
        assert finding.fix_applicability is None
        assert "the fix needs torch >= 2.2, and the project's requirements allow torch>=2.0" in finding.message
    assert source  # the in-place form itself is a compile: nothing to report
    assert "ADV602" not in codes(source)


@pytest.mark.parametrize(
    "readme, floor",
    [
        ("## Requirements\n* 64-bit Python 3.7 and PyTorch 1.7.1.\n", "torch>=1.7.1"),
        ("The code has been developed for PyTorch version 1.7.1 and torchvision version 0.8.2.\n", "torch>=1.7.1"),
        ("Install [Pytorch](https://pytorch.org/)>=1.8.0 following official instructions:\n", "torch>=1.8.0"),
        ("```\nconda install pytorch==1.8.0 torchvision==0.9.0 cudatoolkit=10.2 -c pytorch\n```\n", "torch>=1.8.0"),
    ],
)
def test_install_instructions_declare_the_torch_a_project_runs(tmp_path, readme, floor):
    """Research code often states its torch in the README only; where no requirement file names
    torch, the install instructions do."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text(readme)
    source = "import torch\nmodel = Net().cuda()\nscaler = torch.cuda.amp.GradScaler()\n"
    script = tmp_path / "train.py"
    script.write_text(source)
    finding = only(source, "ADV204", script)
    assert finding.fix_applicability is None and f"allow {floor}" in finding.message
    (tmp_path / "requirements.txt").write_text("torch>=2.4\n")  # a requirement file wins over prose
    finding = only(source, "ADV204", script)
    assert finding.fix_applicability == "safe"


def test_a_model_files_own_smoke_test_is_not_compiled(tmp_path, capsys):
    (tmp_path / "unet.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class UNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 320, 3)
                self.proj = nn.Linear(320, 1280)

            def forward(self, x):
                return self.proj(self.conv(x).mean((2, 3)))

        if __name__ == "__main__":  # memory check, eager on purpose
            unet = UNet().cuda()
            optimizer = torch.optim.AdamW(unet.parameters(), fused=True)
            for step in range(10):
                unet(torch.randn(1, 4, 64, 64, device="cuda")).sum().backward()
                optimizer.step()
    """))
    (tmp_path / "train.py").write_text("from unet import UNet\n")
    code, out, _ = run(["check", ".", "-q", "--select", "ADV602"], capsys, tmp_path)
    assert out == ""


def test_a_move_to_an_intel_gpu_keeps_fused_out():
    """A script that can move its model to an Intel GPU may run there: ADV601 stays out, as for
    XLA (the device is read from the move's argument, not from the call's text)."""
    source = """
        import torch
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        if on_intel:
            model.to("xpu:0", non_blocking=True)
    """
    assert "ADV601" not in codes(source)
    assert "ADV601" in codes(source.replace('"xpu:0"', '"cuda:0"'))


def test_a_module_deep_in_a_project_runs_with_the_roots_requirements(tmp_path):
    # LAVIS vendors mmseg seven folders below the requirements.txt that allows torch 1.10,
    # whose checkpoint() takes no use_reentrant keyword.
    source = textwrap.dedent(
        """
        import torch.utils.checkpoint as cp
        import torch.nn as nn

        class Block(nn.Module):
            def forward(self, x):
                if self.with_cp and x.requires_grad:
                    return cp.checkpoint(self._inner_forward, x)
                return self._inner_forward(x)
        """
    )
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch>=1.10.0\n")
    deep = tmp_path / "lavis" / "common" / "annotator" / "uniformer" / "mmseg" / "models" / "backbones"
    deep.mkdir(parents=True)
    script = deep / "resnet.py"
    script.write_text(source)
    findings = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV502"]
    assert findings and all(d.fix_applicability is None for d in findings)
    assert "the fix needs torch >= 1.11" in findings[0].message


def test_a_predict_loader_assigned_from_a_private_method_is_left_alone_when_nothing_predicts():
    # stable-diffusion's main.py: ``self.predict_dataloader = self._predict_dataloader``, and
    # the script never calls trainer.predict.
    source = """
        import pytorch_lightning as pl
        from torch.utils.data import DataLoader

        class DataModuleFromConfig(pl.LightningDataModule):
            def __init__(self, train, predict=None):
                super().__init__()
                self.train_dataloader = self._train_dataloader
                if predict is not None:
                    self.predict_dataloader = self._predict_dataloader

            def _train_dataloader(self):
                return DataLoader(self.datasets["train"], batch_size=8, num_workers=4, shuffle=True)

            def _predict_dataloader(self):
                return DataLoader(self.datasets["predict"], batch_size=8, num_workers=4)

        trainer = pl.Trainer(accelerator="gpu")
        trainer.fit(model, DataModuleFromConfig(train_config))
    """
    lines = [d.line for d in lint(source, codes=["ADV101"], gpu="A100")]
    assert lines == [13]  # the training loader only
    # Lightning 1.x builds the Trainer from the command line; the main.py in question does.
    built = source.replace('pl.Trainer(accelerator="gpu")', "pl.Trainer.from_argparse_args(opt, gpus=1)")
    assert [d.line for d in lint(built, codes=["ADV101"], gpu="A100")] == [13]
