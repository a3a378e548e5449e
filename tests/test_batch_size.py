"""ADV401 beyond its own examples: sources of the two values, fix shapes, silence."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from advisor.loops import modulo_divisor
from advisor.rules.batch_size import rebalanced
from helpers import fix, lint

CODE = "ADV401"


def findings(source: str):
    return [d for d in lint(source, codes=[CODE]) if d.code == CODE]


def fixed(source: str) -> str:
    return fix(source, codes=[CODE], unsafe=True).fixed.decode()


@pytest.mark.parametrize(
    "batch,accumulation,expected",
    [(1, 64, (4, 16)), (2, 16, (4, 8)), (1, 8, (4, 2)), (2, 8, (4, 4)), (1, 10, (2, 5)), (1, 9, None), (2, 9, None)],
)
def test_rebalance_keeps_the_product(batch, accumulation, expected):
    assert rebalanced(batch, accumulation) == expected


@pytest.mark.parametrize(
    "test",
    ["(i + 1) % k == 0", "0 == step % k", "not (i + 1) % k", "(i + 1) % k == 0 or i + 1 == len(loader)"],
)
def test_modulo_guard_spellings(test):
    divisor = modulo_divisor(cst.parse_expression(test))
    assert isinstance(divisor, cst.Name) and divisor.value == "k"


@pytest.mark.parametrize("test", ["i % k != 0", "i % k == 1", "i > k"])
def test_not_an_accumulation_guard(test):
    assert modulo_divisor(cst.parse_expression(test)) is None


def test_message_shows_the_split_and_the_guide():
    (finding,) = findings(
        """
        from transformers import TrainingArguments
        args = TrainingArguments("out", per_device_train_batch_size=1, gradient_accumulation_steps=64)
        """
    )
    assert "`1 x 64 -> 4 x 16`" in finding.message
    assert "advisor fix --verify" in finding.message
    assert finding.message.endswith("(guide: Gradient Accumulation)")
    assert finding.fix_applicability == "unsafe"


def test_explicit_keywords_are_known_next_to_unknown_kwargs():
    # Python rejects a second value for a keyword written out, so **default_args cannot override it.
    source = """
        from transformers import TrainingArguments
        args = TrainingArguments(per_device_train_batch_size=1, gradient_accumulation_steps=64, **default_args)
        """
    assert len(findings(source)) == 1
    assert "per_device_train_batch_size=4, gradient_accumulation_steps=16, **default_args" in fixed(source)


@pytest.mark.parametrize(
    "arguments",
    [
        "gradient_accumulation_steps=64",  # default batch 8
        "per_device_train_batch_size=1",  # default accumulation 1
        "per_device_train_batch_size=1, gradient_accumulation_steps=64, use_cpu=True",
        "per_device_train_batch_size=1, gradient_accumulation_steps=64, no_cuda=cli.cpu",
        "per_device_train_batch_size=batch, gradient_accumulation_steps=64",
    ],
)
def test_trainer_silences(arguments):
    assert findings(f'from transformers import TrainingArguments\nargs = TrainingArguments("out", {arguments})\n') == []


def test_accumulation_computed_from_the_batch_edits_only_the_batch():
    source = """
        import torch
        from torch.utils.data import DataLoader
        batch_size = 1
        effective = 64
        accum = effective // batch_size
        loader = DataLoader(ds, batch_size=batch_size)
        for i, (x, y) in enumerate(loader):
            (model(x.cuda(), y.cuda()) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
        """
    assert len(findings(source)) == 1
    assert fixed(source) == textwrap.dedent(source).replace("batch_size = 1", "batch_size = 4")


def test_loader_behind_self_attribute_and_tqdm():
    source = """
        import torch
        from torch.utils.data import DataLoader
        from tqdm import tqdm

        class Runner:
            def __init__(self, ds):
                self.loader = DataLoader(ds, batch_size=2, shuffle=True)

            def train(self):
                for i, batch in enumerate(tqdm(self.loader)):
                    self.model(batch.cuda()).backward()
                    if (i + 1) % 16 == 0:
                        self.optimizer.step()
                        self.optimizer.zero_grad()
        """
    out = fixed(source)
    assert "DataLoader(ds, batch_size=4, shuffle=True)" in out
    assert "(i + 1) % 8 == 0" in out


def test_accelerate_resume_pattern():
    source = """
        import argparse
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        parser = argparse.ArgumentParser()
        parser.add_argument("--per_device_train_batch_size", type=int, default=1)
        parser.add_argument("--gradient_accumulation_steps", type=int, default=32)
        args = parser.parse_args()
        accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
        train_dataloader = DataLoader(train_ds, shuffle=True, collate_fn=collator, batch_size=args.per_device_train_batch_size)
        eval_dataloader = DataLoader(eval_ds, collate_fn=collator, batch_size=8)
        model, optimizer, train_dataloader, eval_dataloader = accelerator.prepare(
            model, optimizer, train_dataloader, eval_dataloader
        )
        for epoch in range(3):
            if resume_step:
                active_dataloader = accelerator.skip_first_batches(train_dataloader, resume_step)
            else:
                active_dataloader = train_dataloader
            for step, batch in enumerate(active_dataloader):
                with accelerator.accumulate(model):
                    accelerator.backward(model(**batch).loss)
                    optimizer.step()
                    optimizer.zero_grad()
        """
    out = fixed(source)
    assert 'default=4)\nparser.add_argument("--gradient_accumulation_steps", type=int, default=8)' in out


def test_lightning_trainer_with_train_dataloader_hook():
    source = """
        import lightning as L
        from torch.utils.data import DataLoader

        class Model(L.LightningModule):
            def train_dataloader(self):
                return DataLoader(self.ds, batch_size=1)

        trainer = L.Trainer(accumulate_grad_batches=32)
        trainer.fit(Model())
        """
    out = fixed(source)
    assert "batch_size=4" in out and "accumulate_grad_batches=8" in out


def test_missing_loader_batch_size_is_reported_without_a_fix():
    source = """
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(ds, shuffle=True)
        for i, x in enumerate(loader):
            model(x.cuda()).backward()
            if (i + 1) % 32 == 0:
                optimizer.step()
                optimizer.zero_grad()
        """
    (finding,) = findings(source)
    assert finding.fix_applicability is None
    assert fixed(source) == textwrap.dedent(source)


@pytest.mark.parametrize(
    "loop",
    [
        # a while loop: nothing tells which loader it draws from
        """
        it = iter(loader)
        i = 0
        while i < steps:
            model(next(it).cuda()).backward()
            if (i + 1) % 16 == 0:
                optimizer.step()
                optimizer.zero_grad()
            i += 1
        """,
        # steps every iteration: no accumulation
        """
        for i, x in enumerate(loader):
            model(x.cuda()).backward()
            optimizer.step()
            optimizer.zero_grad()
        """,
        # the loader comes in as a parameter
        """
        def train(data):
            for i, x in enumerate(data):
                model(x.cuda()).backward()
                if (i + 1) % 16 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
        """,
        # batches come from a batch sampler
        """
        loader = DataLoader(ds, batch_sampler=sampler)
        for i, x in enumerate(loader):
            model(x.cuda()).backward()
            if (i + 1) % 16 == 0:
                optimizer.step()
                optimizer.zero_grad()
        """,
    ],
)
def test_loop_silences(loop):
    header = "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=1)\n"
    assert findings(header + textwrap.dedent(loop)) == []


def test_fix_is_idempotent_and_the_result_is_silent():
    source = """
        from transformers import TrainingArguments
        args = TrainingArguments("out", per_device_train_batch_size=2, gradient_accumulation_steps=32)
        """
    once = fixed(source)
    assert "per_device_train_batch_size=4, gradient_accumulation_steps=16" in once
    assert findings(once) == []
    assert fixed(once) == once


# -- ADV401 on scripts that draw their own batches (nanoGPT) ---------------------------------------
NANOGPT_LOOP = """
    import os
    import torch
    gradient_accumulation_steps = {accumulation}
    batch_size = {batch}
    block_size = 1024
    exec(open('configurator.py').read())
    ddp = int(os.environ.get('RANK', -1)) != -1
    if ddp:
        ddp_world_size = int(os.environ['WORLD_SIZE'])
        gradient_accumulation_steps //= ddp_world_size
    def get_batch(split):
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([data[i:i + block_size] for i in ix])
        return x.pin_memory().to('cuda', non_blocking=True)
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    X = get_batch('train')
    while True:
        for micro_step in range(gradient_accumulation_steps):
            loss = model(X) / gradient_accumulation_steps
            X = get_batch('train')
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
"""


def test_nanogpt_globals_reach_adv401():
    source = NANOGPT_LOOP.format(accumulation=64, batch=1)
    (finding,) = findings(source)
    assert "`1 x 64 -> 4 x 16`" in finding.message
    out = fixed(source)
    assert "gradient_accumulation_steps = 16\n" in out and "batch_size = 4\n" in out


def test_nanogpt_defaults_are_silent():
    assert findings(NANOGPT_LOOP.format(accumulation="5 * 8", batch=12)) == []


def test_nanogpt_batch_changed_at_run_time_is_unknown():
    source = NANOGPT_LOOP.format(accumulation=64, batch=1).replace(
        "    block_size = 1024\n", "    block_size = 1024\n    if small:\n        batch_size = 2\n"
    )
    assert findings(source) == []


# -- ADV402 -----------------------------------------------------------------------------------------
def batch_findings(source: str, gpu: str | None = None):
    return [d for d in lint(source, codes=["ADV402"], gpu=gpu) if d.code == "ADV402"]


LOOP = """
    import argparse
    import torch
    from torch.utils.data import DataLoader
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default={batch})
    args = parser.parse_args()
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=1000)
    model = Net().cuda()
    for x, y in train_loader:
        {forward}
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
FP32 = "loss = criterion(model(x.cuda()), y.cuda())"
FP16 = """with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x.cuda()), y.cuda())"""


def test_message_says_the_size_its_source_and_the_next_multiple():
    (finding,) = batch_findings(LOOP.format(batch=50, forward=FP32))
    assert finding.message.startswith("Training batch size 50 (the `--batch-size` default at line 6)")
    assert "not a multiple of 8: use 56 (or 48 if 56 does not fit)" in finding.message
    assert finding.message.endswith("(guide: Batch size choice)")
    assert finding.fix_applicability is None


@pytest.mark.parametrize("batch", [1, 2, 5, 7, 8, 16, 64, 256])
def test_small_and_aligned_batches_are_silent(batch):
    assert batch_findings(LOOP.format(batch=batch, forward=FP32)) == []


def test_fp16_on_an_a100_wants_multiples_of_64():
    (finding,) = batch_findings(LOOP.format(batch=96, forward=FP16), gpu="A100")
    assert "not a multiple of 64, the guide's multiple for fp16 on A100-80GB: use 128 (or 64" in finding.message
    # the same batch in fp32, or on a GPU whose multiple is 8, is aligned
    assert batch_findings(LOOP.format(batch=96, forward=FP32), gpu="A100") == []
    assert batch_findings(LOOP.format(batch=96, forward=FP16), gpu="T4") == []
    # below 64 only the multiple of 8 applies: rounding 32 up to 64 could double the memory
    assert batch_findings(LOOP.format(batch=32, forward=FP16), gpu="A100") == []


def test_trainer_batches():
    template = 'from transformers import Trainer, TrainingArguments\nargs = TrainingArguments("out", {arguments})\n'
    (finding,) = batch_findings(template.format(arguments="per_device_train_batch_size=12"))
    assert "Training batch size 12 is not a multiple of 8: use 16 (or 8 if 16 does not fit)" in finding.message
    for silent in ("gradient_accumulation_steps=4", "per_device_train_batch_size=32", "per_device_eval_batch_size=12"):
        assert batch_findings(template.format(arguments=silent)) == []


def test_lightning_train_dataloader():
    source = """
        import lightning as L
        from torch.utils.data import DataLoader

        class Model(L.LightningModule):
            def train_dataloader(self):
                return DataLoader(self.train_ds, batch_size=100, shuffle=True)

            def val_dataloader(self):
                return DataLoader(self.val_ds, batch_size=100)

        trainer = L.Trainer(accelerator="gpu")
        trainer.fit(Model())
        """
    (finding,) = batch_findings(source)
    assert "Training batch size 100 is not a multiple of 8: use 104" in finding.message


def test_several_training_loaders_or_a_runtime_batch_are_silent():
    several = LOOP.format(batch=50, forward=FP32).replace(
        "    for x, y in train_loader:", "    for x, y in (train_loader if warm else test_loader):"
    )
    assert batch_findings(several) == []
    runtime = LOOP.format(batch=50, forward=FP32).replace("batch_size=args.batch_size", "batch_size=args.batch_size * world")
    assert batch_findings(runtime) == []


TRAINING_ARGUMENTS_SUBCLASS = """
    from dataclasses import dataclass, field
    from typing import Optional
    import transformers
    from transformers import HfArgumentParser, Trainer

    @dataclass
    class ModelArguments:
        model_name_or_path: Optional[str] = field(default="facebook/opt-125m")

    @dataclass
    class TrainingArguments(transformers.TrainingArguments):
        optim: str = field(default="adamw_torch")
        per_device_train_batch_size: int = field(default={batch})
        gradient_accumulation_steps: int = field(default={accumulation})

    def train():
        parser = HfArgumentParser((ModelArguments, TrainingArguments))
        model_args, training_args = parser.parse_args_into_dataclasses()
        trainer = Trainer(model=model, args=training_args, train_dataset=ds)
        trainer.train()
"""


def test_training_arguments_subclass_fields_reach_adv401():
    source = TRAINING_ARGUMENTS_SUBCLASS.format(batch=2, accumulation=16)
    (finding,) = findings(source)
    assert "`2 x 16 -> 4 x 8`" in finding.message
    out = fixed(source)
    assert "field(default=4)" in out and "field(default=8)" in out


def test_training_arguments_subclass_without_the_accumulation_field_is_silent():
    source = TRAINING_ARGUMENTS_SUBCLASS.format(batch=1, accumulation=16).replace(
        "        gradient_accumulation_steps: int = field(default=16)\n", ""
    )
    assert findings(source) == []  # inherited from TrainingArguments: set on the command line


def test_training_arguments_subclass_batch_reaches_adv402():
    (finding,) = batch_findings(TRAINING_ARGUMENTS_SUBCLASS.format(batch=12, accumulation=4))
    assert "Training batch size 12 (the `--per_device_train_batch_size` default" in finding.message
