"""Consistency as a property: a script whose device, loader, model or framework is spelled in
equivalent ways gets the same findings, because every rule asks one facts layer.

Each case here was a contradiction once (issue 11): the same file got different answers to
"does this train on a GPU?" from different rules.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from advisor.engine import Settings, check_paths
from advisor.registry import all_rules
from advisor.targets import ASSUMED
from helpers import lint

ALL = frozenset(rule.code for rule in all_rules())

# A hand-written loop that gives most device-dependent rules something to say.
LOOP = """
import os
import argparse
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

{setup}

def main():
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(loss.item())


if __name__ == "__main__":
    main()
"""

CUDA_IF_AVAILABLE = 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'
GPU_SPELLINGS = {
    "torch.accelerator": (
        "device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() "
        'else torch.device("cpu")'
    ),
    "string": 'device = "cuda"',
    "index": "device = 0",
    "indexed string": 'device = "cuda:0"',
    "local rank": 'device = int(os.environ["LOCAL_RANK"])',
    "nccl rank": 'dist.init_process_group("nccl")\nlocal_rank = int(os.environ["LOCAL_RANK"])\ndevice = local_rank',
    "current device": "device = torch.cuda.current_device()",
    "argparse default": (
        'parser = argparse.ArgumentParser()\nparser.add_argument("--device", default="cuda")\n'
        "args = parser.parse_args()\ndevice = torch.device(args.device)"
    ),
}
CPU_SPELLINGS = {
    "cpu": 'device = "cpu"',
    "mps or cpu next to cuda seeding": (
        'torch.cuda.manual_seed_all(0)\ndevice = torch.device("mps" if torch.backends.mps.is_available() else "cpu")'
    ),
    "xla": "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()",
}


def codes(source: str, path: str = "train.py") -> set[str]:
    return {d.code for d in lint(textwrap.dedent(source), path=path)}


def test_the_reference_spelling_gets_the_device_dependent_advice():
    found = codes(LOOP.format(setup=CUDA_IF_AVAILABLE))
    assert {"ADV101", "ADV102", "ADV103", "ADV202", "ADV203", "ADV601", "ADV602", "ADV701"} <= found


@pytest.mark.parametrize("spelling", sorted(GPU_SPELLINGS))
def test_every_gpu_spelling_gets_the_same_findings(spelling):
    assert codes(LOOP.format(setup=GPU_SPELLINGS[spelling])) == codes(LOOP.format(setup=CUDA_IF_AVAILABLE))


@pytest.mark.parametrize("spelling", sorted(CPU_SPELLINGS))
def test_every_cpu_spelling_gets_no_gpu_advice(spelling):
    assert codes(LOOP.format(setup=CPU_SPELLINGS[spelling])) == set()


# -- frameworks told to use the CPU ------------------------------------------------------------
LIGHTNING = """
import lightning as L
import torch
from torch.utils.data import DataLoader


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        print(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=64, shuffle=True)


if __name__ == "__main__":
    trainer = L.Trainer({accelerator}max_epochs=3)
    trainer.fit(Classifier())
"""


def test_lightning_on_the_cpu_gets_no_gpu_advice():
    assert codes(LIGHTNING.format(accelerator='accelerator="cpu", ')) == set()


def test_lightning_on_the_gpu_or_left_to_auto_gets_the_same_advice():
    on_gpu = codes(LIGHTNING.format(accelerator='accelerator="gpu", '))
    assert {"ADV101", "ADV102", "ADV601", "ADV701"} <= on_gpu
    assert codes(LIGHTNING.format(accelerator="")) == on_gpu


ACCELERATE = """
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

def main():
    accelerator = Accelerator({cpu})
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(10))
    optimizer = torch.optim.AdamW(model.parameters())
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        print(loss.item())

if __name__ == "__main__":
    main()
"""


def test_accelerate_on_the_cpu_gets_no_gpu_advice():
    assert codes(ACCELERATE.format(cpu="cpu=True")) == set()


def test_accelerate_prepared_loader_is_a_training_loader_for_every_rule():
    found = codes(ACCELERATE.format(cpu=""))
    # ADV401 always found the loader through ``prepare``; ADV102 now does too.
    assert {"ADV101", "ADV102", "ADV601", "ADV605", "ADV701"} <= found


# -- a device in a sibling module ----------------------------------------------------------------
def project_codes(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    (tmp_path / ".git").mkdir(parents=True)
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    settings = Settings(codes=ALL, target=ASSUMED)
    results = check_paths([str(tmp_path / name) for name in sorted(files)], settings, jobs=1)
    return {Path(r.path).name: {d.code for d in r.diagnostics} for r in results}


def test_a_device_from_a_config_module_is_the_device_written_inline(tmp_path):
    inline = codes(LOOP.format(setup='DEVICE = torch.device("cuda")\ndevice = DEVICE'))
    found = project_codes(
        tmp_path,
        {
            "config.py": 'import torch\nDEVICE = torch.device("cuda")\n',
            "train.py": LOOP.format(setup="from config import DEVICE\ndevice = DEVICE"),
        },
    )
    assert found["train.py"] == inline


def test_a_module_that_moves_to_a_device_parameter_takes_its_importers_verdict(tmp_path):
    engine = """
        import torch

        def train_step(model, loader, loss_fn, optimizer, device):
            total = 0.0
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = loss_fn(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.item()
            return total
        """
    train = """
        import torch
        import engine

        if __name__ == "__main__":
            device = {device}
            model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.Linear(1024, 10)).to(device)
            optimizer = torch.optim.AdamW(model.parameters())
            engine.train_step(model, loader, torch.nn.CrossEntropyLoss(), optimizer, device)
        """
    on_gpu = project_codes(tmp_path / "gpu", {"engine.py": engine, "train.py": train.format(device='"cuda"')})
    assert {"ADV203", "ADV701"} <= on_gpu["engine.py"]
    assert {"ADV202", "ADV601", "ADV602"} <= on_gpu["train.py"]
    on_cpu = project_codes(tmp_path / "cpu", {"engine.py": engine, "train.py": train.format(device='"cpu"')})
    assert on_cpu == {"engine.py": set(), "train.py": set()}


def test_loader_factories_of_a_module_count_only_when_training_uses_them(tmp_path):
    data = """
        import torch
        from torch.utils.data import DataLoader

        def create_dataloader(dataset, batch_size):
            return DataLoader(dataset, batch_size=batch_size, shuffle=True)

        def create_debug_dataloader(dataset):
            return DataLoader(dataset, batch_size=2, shuffle=True)
        """
    train = """
        import torch
        from data import create_dataloader

        def train(model, dataset, device):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in create_dataloader(dataset, 64):
                loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()

        if __name__ == "__main__":
            train(Net().to("cuda"), load(), "cuda")
        """
    (tmp_path / ".git").mkdir()
    (tmp_path / "data.py").write_text(textwrap.dedent(data))
    (tmp_path / "train.py").write_text(textwrap.dedent(train))
    settings = Settings(codes=ALL, target=ASSUMED)
    results = check_paths([str(tmp_path / "data.py"), str(tmp_path / "train.py")], settings, jobs=1)
    lines = {(Path(r.path).name, d.code, d.line) for r in results for d in r.diagnostics}
    assert ("data.py", "ADV101", 6) in lines and ("data.py", "ADV102", 6) in lines
    assert not {finding for finding in lines if finding[0] == "data.py" and finding[2] == 9}


def test_batches_of_a_loader_built_in_another_module_are_copied_without_blocking(tmp_path):
    """The loader comes from a factory of ``data_setup.py``; the loop that copies its batches is
    in ``engine.py``, called from ``train.py`` (the going_modular layout)."""
    files = {
        "data_setup.py": """
            from torch.utils.data import DataLoader

            def create_dataloaders(train_set, test_set, batch_size):
                train = DataLoader(train_set, batch_size=batch_size, shuffle=True, num_workers=4, pin_memory=True)
                test = DataLoader(test_set, batch_size=batch_size, num_workers=4, pin_memory=True)
                return train, test
            """,
        "engine.py": """
            import torch

            def train(model, train_dataloader, optimizer, device):
                for X, y in train_dataloader:
                    X, y = X.to(device), y.to(device)
                    loss = torch.nn.functional.cross_entropy(model(X), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
        "train.py": """
            import torch
            import data_setup, engine

            device = "cuda"
            train_dataloader, test_dataloader = data_setup.create_dataloaders(train_set, test_set, 32)
            model = Net().to(device)
            engine.train(model, train_dataloader, torch.optim.SGD(model.parameters(), lr=0.1), device)
            """,
        "loop.py": """
            import torch
            from data_setup import create_dataloaders

            train_loader, _ = create_dataloaders(train_set, test_set, 32)
            model = Net().cuda()
            for images, labels in train_loader:
                loss = model(images.cuda(), labels.cuda())
                loss.backward()
            """,
    }
    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    settings = Settings(codes=frozenset({"ADV103"}), target=ASSUMED)
    results = check_paths([str(tmp_path / name) for name in sorted(files)], settings, jobs=1)
    lines = sorted((Path(r.path).name, d.line) for r in results for d in r.diagnostics)
    assert lines == [("engine.py", 6), ("engine.py", 6), ("loop.py", 8), ("loop.py", 8)]
    alone = Settings(codes=frozenset({"ADV103"}), target=ASSUMED, project_scope=False)
    assert not any(r.diagnostics for r in check_paths([str(tmp_path / n) for n in sorted(files)], alone, jobs=1))


def test_tf32_is_reported_in_the_script_that_builds_the_model_not_in_its_library(tmp_path):
    library = """
        import torch

        def train_model_simple(model, train_loader, optimizer, device, num_epochs):
            for epoch in range(num_epochs):
                for input_batch, target_batch in train_loader:
                    loss = torch.nn.functional.cross_entropy(model(input_batch.to(device)), target_batch.to(device))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
        """
    script = """
        import torch
        from previous_chapters import train_model_simple

        class GPTModel(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = torch.nn.Sequential(torch.nn.Linear(768, 3072), torch.nn.GELU(), torch.nn.Linear(3072, 768))

            def forward(self, x):
                return self.layers(x)

        if __name__ == "__main__":
            device = torch.device("cuda")
            model = GPTModel().to(device)
            optimizer = torch.optim.AdamW(model.parameters(), fused=True)
            train_model_simple(model, train_loader, optimizer, device, num_epochs=10)
        """
    found = project_codes(tmp_path, {"previous_chapters.py": library, "gpt_train.py": script})
    assert "ADV202" in found["gpt_train.py"]
    assert "ADV202" not in found["previous_chapters.py"] and "ADV203" in found["previous_chapters.py"]


def test_a_method_of_a_trainer_class_sees_the_loader_its_importer_passes(tmp_path):
    """SimCLR's layout: ``run.py`` builds a pinned loader and calls ``simclr.train(loader)`` on an
    instance of the class ``simclr.py`` defines; the copies in the method go without blocking."""
    files = {
        "trainer.py": """
            import torch

            class Trainer:
                def __init__(self, model):
                    self.model = model.cuda()

                def train(self, train_loader):
                    for images, labels in train_loader:
                        images = images.to("cuda")
                        loss = self.model(images).sum()
                        loss.backward()
            """,
        "run.py": """
            import torch
            from trainer import Trainer

            loader = torch.utils.data.DataLoader(train_set, batch_size=64, num_workers=4, pin_memory=True)
            trainer = Trainer(Net())
            trainer.train(loader)
            """,
    }
    assert "ADV103" in project_codes(tmp_path / "pinned", files)["trainer.py"]
    files["run.py"] = files["run.py"].replace("pin_memory=True", "pin_memory=False")
    assert "ADV103" not in project_codes(tmp_path / "unpinned", files)["trainer.py"]


def test_each_file_alone_without_project_scope(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "config.py").write_text('import torch\nDEVICE = torch.device("cuda")\n')
    (tmp_path / "train.py").write_text(textwrap.dedent(LOOP.format(setup="from config import DEVICE\ndevice = DEVICE")))
    alone = Settings(codes=ALL, target=ASSUMED, project_scope=False)
    (result,) = check_paths([str(tmp_path / "train.py")], alone, jobs=1)
    assert {d.code for d in result.diagnostics} == set()


# -- findings about a setting sit at its keyword --------------------------------------------------
TRAINER = """
from transformers import Trainer, TrainingArguments
args = TrainingArguments(
    output_dir="out",
    fp16=True,{fp16_comment}
    optim="adamw_torch",
){call_comment}
Trainer(model=model, args=args, train_dataset=ds).train()
"""


def test_a_keyword_finding_is_reported_at_the_keyword():
    found = {d.code: d.line for d in lint(TRAINER.format(fp16_comment="", call_comment=""))}
    assert found["ADV201"] == 5 and found["ADV601"] == 6


@pytest.mark.parametrize(
    "fp16_comment, call_comment",
    [("  # noqa: ADV201", ""), ("", "  # noqa: ADV201")],
    ids=["on the keyword's line", "on the statement's first line"],
)
def test_a_keyword_finding_is_suppressed_on_its_line_or_the_statements_first_line(fp16_comment, call_comment):
    source = TRAINER.format(fp16_comment=fp16_comment, call_comment="")
    if call_comment:
        source = source.replace("args = TrainingArguments(", "args = TrainingArguments(" + call_comment)
    codes_found = {d.code for d in lint(source)}
    assert "ADV201" not in codes_found and "ADV601" in codes_found
