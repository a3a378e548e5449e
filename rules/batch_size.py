"""ADV4xx: batch size and accumulation (guide: "Batch size choice", "Gradient Accumulation")."""
from __future__ import annotations

import contextlib
import os
import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from advisor.apis import ACCELERATOR, FABRIC, LIGHTNING_FP16, LIGHTNING_TRAINER, TRAINING_ARGUMENTS
from advisor.context import MISSING, FileContext
from advisor.edits import set_keyword
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid
from advisor.facts.branches import run_by_default
from advisor.facts.precision import autocasts, half_weights, scaler_calls
from advisor.facts.models import loads_quantized, long_samples, recomputes_activations
from advisor.values import Value

# TrainingArguments defaults, used when an argument is certainly not passed.
TRAINER_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}

SMALL_BATCH = 2  # a per-device batch this small leaves the GPU mostly idle...
LONG_ACCUMULATION = 8  # ...and this many micro-steps per optimizer step make it the common case
PREFERRED_BATCH = 4  # the guide's example: 1 x 64 -> 4 x 16
# How scripts that draw their own batches (nanoGPT's ``get_batch``) name the per-step batch.
_STEP_BATCH_NAME = re.compile(r"^(micro_?)?batch_size$|^(per_device_)?train_batch_size$|^batch_size_per_(gpu|device)$")
# ``labels = torch.arange(logits.size(0))``: the targets of an in-batch contrastive loss
# (CLIP, SimCLR, InfoNCE), where every other sample of the micro-batch is a negative.
_IN_BATCH_TARGETS = re.compile(r"^[^#\n]*\b(?:labels?|targets?)\s*=\s*torch\.arange\(", re.M)
_IN_BATCH_TARGETS_TEXT = re.compile(_IN_BATCH_TARGETS.pattern.encode(), re.M)


def _compares_within_batch(ctx: FileContext) -> bool:
    """The file, or a module that runs in the same program, builds in-batch contrastive targets."""
    if _IN_BATCH_TARGETS.search(ctx.source):
        return True
    project = ctx.project
    return project is not None and project.runs_with_match(_IN_BATCH_TARGETS_TEXT, b"torch.arange(")


@dataclass(frozen=True)
class Split:
    """A per-device batch and the accumulation steps it is paired with."""

    batch: Value
    accumulation: Value
    report_at: cst.CSTNode
    # Literals equal to the accumulation elsewhere in the loop (``loss / 64`` next to
    # ``% 64``): editing one of them alone would change the loss scale.
    accumulation_repeated: bool = False


def rebalanced(batch: int, accumulation: int) -> tuple[int, int] | None:
    """A larger per-device batch and fewer steps with the same product, if there is one."""
    product = batch * accumulation
    for new_batch in (PREFERRED_BATCH, 2):
        if new_batch > batch and product % new_batch == 0:
            return new_batch, product // new_batch
    return None


# The per-device batch `advisor fix --verify` found to fit; ADV401's fix targets it instead of
# the static rebalancing while set (see ``probed_batch``).
_PROBED_BATCH: ContextVar[int | None] = ContextVar("adv401_probed_batch", default=None)


@contextlib.contextmanager
def probed_batch(batch: int) -> Iterator[None]:
    """Within this block ADV401's fix rewrites the split to per-device ``batch``, keeping the
    effective batch, wherever ``batch`` divides it; elsewhere it keeps the default rebalancing."""
    token = _PROBED_BATCH.set(batch)
    try:
        yield
    finally:
        _PROBED_BATCH.reset(token)


def _probe_rebalances(batch: int, accumulation: int) -> bool:
    wanted = _PROBED_BATCH.get()
    product = batch * accumulation
    return wanted is not None and accumulation >= 2 and batch < wanted <= product and product % wanted == 0


def target_split(batch: int, accumulation: int) -> tuple[int, int] | None:
    """The split ADV401's fix writes: the probed per-device batch when one is set and fits, else ``rebalanced``."""
    product = batch * accumulation
    wanted = _PROBED_BATCH.get()
    if wanted is not None and batch < wanted <= product and product % wanted == 0:
        return wanted, product // wanted
    return rebalanced(batch, accumulation)


def is_small_split(batch: int, accumulation: int) -> bool:
    """What ADV401 reports by itself: a per-device batch of one or two with many accumulation steps."""
    return 1 <= batch <= SMALL_BATCH and accumulation >= LONG_ACCUMULATION


def probe_start(batch: int, accumulation: int) -> tuple[int, int]:
    """The split verify's probe starts from: ADV401's static rebalancing for a split it reports,
    else the script's own split."""
    return (rebalanced(batch, accumulation) if is_small_split(batch, accumulation) else None) or (batch, accumulation)


def larger_splits(batch: int, accumulation: int) -> list[tuple[int, int]]:
    """The splits verify's probe tries after ``probe_start``: its per-device batch doubled
    while that divides the effective batch (if 2k divides it, so does k: the first miss ends it)."""
    if accumulation < 2:
        return []
    default = probe_start(batch, accumulation)
    if is_small_split(batch, accumulation) and default == (batch, accumulation):
        return []  # no static rebalancing to start from (1 x 9)
    product = batch * accumulation
    splits = []
    size = default[0] * 2
    while size <= product and product % size == 0:
        splits.append((size, product // size))
        size *= 2
    return splits


def _int_value(value: Value | None) -> int | None:
    if value is None or type(value.value) is not int:
        return None
    return value.value


def _resolve_argument(ctx: FileContext, call: cst.Call, keyword: str, default: int | None) -> Value | None:
    expr = ctx.argument(call, keyword)
    if expr is None:
        return None
    if expr is MISSING:
        return None if default is None else Value(default, call, "default")
    return ctx.values.resolve(expr)


def _assigned_later(ctx: FileContext, *fields: str) -> bool:
    """``args.gradient_accumulation_steps = ...`` somewhere: the constructor's value may not be the one used."""
    return bool(ctx.assignments_to_attribute(*fields))


def _field_true(ctx: FileContext, name: cst.Name, field: str) -> bool:
    value = ctx.values.attribute(name, field)
    return value is not None and bool(value.value)


def _derived_from_batch(ctx: FileContext, split: Split, product: int) -> bool:
    """``accum = total // batch``: the accumulation is computed from the batch literal itself."""
    node = split.accumulation.node
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.FloorDivide)):
        return False
    total, divisor = ctx.values.resolve(node.left), ctx.values.resolve(node.right)
    return (
        total is not None
        and divisor is not None
        and divisor.node is split.batch.node
        and total.value == product
        and total.node is not split.batch.node
    )


def step_batch_setting(ctx: FileContext, loop) -> Value | None:
    """The batch a training loop draws without a DataLoader (nanoGPT: ``batch_size`` read by
    ``get_batch`` every step): every read of a setting named like a batch size in code that
    runs every step of ``loop`` agrees on one value. None when there are none, or any is
    unknown or different."""
    reads: list[cst.BaseExpression] = []
    for name in ctx.nodes(cst.Name):
        if _STEP_BATCH_NAME.match(name.value) and ctx.is_read(name):
            reads.append(name)
    for attribute in ctx.nodes(cst.Attribute):
        if _STEP_BATCH_NAME.match(attribute.attr.value) and isinstance(attribute.value, cst.Name):
            reads.append(attribute)
    found: Value | None = None
    for read in reads:
        region = ctx.loops.step_region(read)
        if region is None or region.loop is not loop:
            continue
        value = ctx.values.resolve(read)
        if value is None or (found is not None and value.node is not found.node):
            return None
        found = value
    return found


class AccumulationSplit(Rule):
    code = "ADV401"
    name = "accumulation-split"
    summary = "A tiny per-device batch with many accumulation steps: same effective batch, poor GPU use."
    guide = "Gradient Accumulation"
    fix_applicability = Applicability.UNSAFE
    why = """
        Each accumulation step is a full forward and backward pass. With one or two
        samples per pass the GPU's kernels are too small to fill it, and the per-step
        overhead (kernel launches, Python, the data loader) is paid 64 times per optimizer
        step instead of 16. The guide's *Gradient Accumulation* section: "If you would like
        to train with batches of size 64, do not set the `per_device_train_batch_size` to 1
        and `gradient_accumulation_steps` to 64. Instead, keep `per_device_train_batch_size=4`
        and set `gradient_accumulation_steps=16`. This results in the same effective batch
        size while making better use of the available GPU resources." (*Batch size choice*:
        pick the per-device batch first, then accumulate only to reach the effective batch.)
    """
    example = """
        args = TrainingArguments(
            "out",
            per_device_train_batch_size=1,
            gradient_accumulation_steps=64,
        )
    """
    use_instead = """
        args = TrainingArguments(
            "out",
            per_device_train_batch_size=4,
            gradient_accumulation_steps=16,
        )
    """
    silent_when = """
        - either value is unknown: read from the command line without a visible default,
          passed through `**kwargs` that cannot be resolved, or changed after construction
          (a `TrainingArguments` parsed by `HfArgumentParser` counts only for the fields a
          subclass in the file declares; nanoGPT-style globals count with the values set
          before the configurator, a division by the world size being the identity on one GPU);
        - accumulation is below 8 steps, or the per-device batch is already above 2
          (`4 x 16` is the guide's own recommendation);
        - the loader does not batch by `batch_size` (a `batch_sampler`, `batch_size=None`, a
          `collate_fn=lambda ...` that unwraps batches the dataset builds itself);
        - the training DataLoader cannot be told apart (several candidates);
        - the file shows no CUDA device (CPU-only scripts).

        The fix keeps the effective batch (the product) and edits only integer literals it
        can see, both of them, so the product cannot drift. A larger per-device batch uses
        more memory, so the fix is unsafe; `advisor fix --verify` tries it and finds the
        largest per-device batch that fits. Where the script is visibly written around its
        memory (a model loaded in 8 or 4 bits, gradient checkpointing turned on, samples of
        4,096 tokens or more: `max_length=8192`, `max_completion_length=16384`), the finding
        is advice: the small batch is likely memory's choice. Where the program's loss compares
        the samples of a micro-batch with each other (`labels = torch.arange(...)` over a
        similarity matrix: in-batch negatives), a larger batch changes the objective: advice
        too. Where the method needs one sample per step
        (per-sample generators, some GANs), accumulation over 8+ steps is rare; suppress
        the finding with `# noqa: ADV401` where it is intended.
    """
    valid = [
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", per_device_train_batch_size=4, gradient_accumulation_steps=16)
            """,
            note="the guide's recommended split",
        ),
        Valid(
            """
            import torch
            from data import make_stream
            BATCH_SIZE = 2
            GRADIENT_ACCUMULATE_EVERY = 8
            stream = make_stream(BATCH_SIZE * 4)
            model.cuda()
            for i in range(NUM_BATCHES):
                for __ in range(GRADIENT_ACCUMULATE_EVERY):
                    loss = model(next(stream).cuda())
                    (loss / GRADIENT_ACCUMULATE_EVERY).backward()
                optim.step()
                optim.zero_grad()
            """,
            note="micro-steps draw from a stream of unknown batch size, not a DataLoader",
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", per_device_train_batch_size=1, gradient_accumulation_steps=4)
            """,
            note="short accumulation",
        ),
        Valid(
            """
            import sys
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", per_device_train_batch_size=1, gradient_accumulation_steps=int(sys.argv[1]))
            """,
            note="accumulation from the command line: unknown",
        ),
        Valid(
            """
            import argparse
            from transformers import TrainingArguments
            parser = argparse.ArgumentParser()
            parser.add_argument("--grad_accum", type=int, required=True)
            args = parser.parse_args()
            training_args = TrainingArguments("out", per_device_train_batch_size=1, gradient_accumulation_steps=args.grad_accum)
            """,
            note="required command-line option without a default: unknown",
        ),
        Valid(
            """
            from transformers import HfArgumentParser, Trainer, TrainingArguments
            (training_args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
            trainer = Trainer(model=model, args=training_args)
            """,
            note="arguments parsed from the command line",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", gradient_accumulation_steps=16, **config)
            """,
            note="batch size may come from an unknown **config",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", per_device_train_batch_size=1, gradient_accumulation_steps=64)
            args.per_device_train_batch_size = find_batch_size()
            """,
            note="changed after construction",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=1)
            accum = 16
            for i, (x, y) in enumerate(loader):
                loss = model(x, y) / accum
                loss.backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="CPU-only script",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=None)
            for i, batch in enumerate(loader):
                loss = model(batch.cuda())
                (loss / 16).backward()
                if (i + 1) % 16 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="batch_size=None: the dataset yields whole batches",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, collate_fn=lambda items: items[0])
            for i, batch in enumerate(loader):
                loss = model(batch.cuda())
                (loss / 16).backward()
                if (i + 1) % 16 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="the collate function unwraps batches built by the dataset",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            train_loader = DataLoader(train_ds, batch_size=1)
            val_loader = DataLoader(val_ds, batch_size=1)
            loader = train_loader if training else val_loader
            for i, (x, y) in enumerate(loader):
                loss = model(x.cuda(), y.cuda()) / 16
                loss.backward()
                if (i + 1) % 16 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="the training loader cannot be told",
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator
            from torch.utils.data import DataLoader
            accelerator = Accelerator(gradient_accumulation_steps=16)
            train_loader = DataLoader(ds, batch_size=4, shuffle=True)
            model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
            for batch in train_loader:
                with accelerator.accumulate(model):
                    loss = model(**batch).loss
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="batch 4 x 16",
        ),
    ]
    invalid = [
        Invalid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments(
                "out",
                per_device_train_batch_size=1,
                gradient_accumulation_steps=64,  # effective batch 64
            )
            """,
            fixed="""
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments(
                "out",
                per_device_train_batch_size=4,
                gradient_accumulation_steps=16,  # effective batch 64
            )
            """,
        ),
        Invalid(
            """
            from transformers import AutoModelForCausalLM, BitsAndBytesConfig, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("m", quantization_config=BitsAndBytesConfig(load_in_4bit=True))
            args = TrainingArguments("out", per_device_train_batch_size=1, gradient_accumulation_steps=8)
            """,
            note="a 4-bit (QLoRA) model is written around its memory: advice, no edit",
        ),
        Invalid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", per_device_train_batch_size=1, gradient_accumulation_steps=8, gradient_checkpointing=True)
            """,
            note="gradient checkpointing already trades speed for memory: the batch of 1 is memory's choice, advice (yarn)",
        ),
        Invalid(
            """
            from trl import SFTConfig
            args = SFTConfig("out", bf16=True, max_length=8192, per_device_train_batch_size=1, gradient_accumulation_steps=8)
            """,
            note="8k-token samples: the batch of 1 is likely memory's choice, advice (TRL's Gemma-3 SFT)",
        ),
        Invalid(
            """
            import argparse
            from transformers import Seq2SeqTrainingArguments
            BATCH_SIZE = 2
            parser = argparse.ArgumentParser()
            parser.add_argument("--accum", type=int, default=16)
            cli = parser.parse_args()
            settings = {"per_device_train_batch_size": BATCH_SIZE, "gradient_accumulation_steps": cli.accum}
            args = Seq2SeqTrainingArguments(output_dir="out", **settings)
            """,
            fixed="""
            import argparse
            from transformers import Seq2SeqTrainingArguments
            BATCH_SIZE = 4
            parser = argparse.ArgumentParser()
            parser.add_argument("--accum", type=int, default=8)
            cli = parser.parse_args()
            settings = {"per_device_train_batch_size": BATCH_SIZE, "gradient_accumulation_steps": cli.accum}
            args = Seq2SeqTrainingArguments(output_dir="out", **settings)
            """,
            note="constant, argparse default and a **dict",
        ),
        Invalid(
            """
            import torch
            from accelerate import Accelerator
            from torch.utils.data import DataLoader
            accelerator = Accelerator(gradient_accumulation_steps=32)
            train_loader = DataLoader(ds, batch_size=1, shuffle=True)
            model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
            for batch in train_loader:
                with accelerator.accumulate(model):
                    loss = model(**batch).loss
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            import torch
            from accelerate import Accelerator
            from torch.utils.data import DataLoader
            accelerator = Accelerator(gradient_accumulation_steps=8)
            train_loader = DataLoader(ds, batch_size=4, shuffle=True)
            model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
            for batch in train_loader:
                with accelerator.accumulate(model):
                    loss = model(**batch).loss
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            ACCUMULATION_STEPS = 64
            loader = DataLoader(ds, batch_size=1, shuffle=True)
            model = Net().cuda()
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x.cuda()), y.cuda()) / ACCUMULATION_STEPS
                loss.backward()
                if (i + 1) % ACCUMULATION_STEPS == 0 or i + 1 == len(loader):
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            ACCUMULATION_STEPS = 16
            loader = DataLoader(ds, batch_size=4, shuffle=True)
            model = Net().cuda()
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x.cuda()), y.cuda()) / ACCUMULATION_STEPS
                loss.backward()
                if (i + 1) % ACCUMULATION_STEPS == 0 or i + 1 == len(loader):
                    optimizer.step()
                    optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=1)
            for i, (x, y) in enumerate(loader):
                loss = model(x.cuda(), y.cuda()) / 16
                loss.backward()
                if (i + 1) % 16 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed=None,
            note="16 is written twice: editing one literal would change the loss scale, advice only",
        ),
        Invalid(
            """
            import torch
            batch_size = 1
            gradient_accumulation_steps = 64
            block_size = 1024
            exec(open("configurator.py").read())
            def get_batch():
                ix = torch.randint(len(data) - block_size, (batch_size,))
                return torch.stack([data[i:i + block_size] for i in ix]).to("cuda")
            while True:
                for micro_step in range(gradient_accumulation_steps):
                    loss = model(get_batch()) / gradient_accumulation_steps
                    loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            """,
            fixed="""
            import torch
            batch_size = 4
            gradient_accumulation_steps = 16
            block_size = 1024
            exec(open("configurator.py").read())
            def get_batch():
                ix = torch.randint(len(data) - block_size, (batch_size,))
                return torch.stack([data[i:i + block_size] for i in ix]).to("cuda")
            while True:
                for micro_step in range(gradient_accumulation_steps):
                    loss = model(get_batch()) / gradient_accumulation_steps
                    loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            """,
            note="nanoGPT: config globals, a micro-step loop, batches drawn by `get_batch`",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            BATCH_SIZE = 2
            GRADIENT_ACCUMULATE_EVERY = 8

            def cycle(loader):
                while True:
                    for data in loader:
                        yield data

            train_loader = cycle(DataLoader(train_dataset, batch_size=BATCH_SIZE, drop_last=True))
            model.cuda()
            for i in range(NUM_BATCHES):
                for __ in range(GRADIENT_ACCUMULATE_EVERY):
                    loss = model(next(train_loader).cuda())
                    (loss / GRADIENT_ACCUMULATE_EVERY).backward()
                optim.step()
                optim.zero_grad()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            BATCH_SIZE = 4
            GRADIENT_ACCUMULATE_EVERY = 4

            def cycle(loader):
                while True:
                    for data in loader:
                        yield data

            train_loader = cycle(DataLoader(train_dataset, batch_size=BATCH_SIZE, drop_last=True))
            model.cuda()
            for i in range(NUM_BATCHES):
                for __ in range(GRADIENT_ACCUMULATE_EVERY):
                    loss = model(next(train_loader).cuda())
                    (loss / GRADIENT_ACCUMULATE_EVERY).backward()
                optim.step()
                optim.zero_grad()
            """,
            note="x-transformers: micro-steps that draw `next(...)` from one DataLoader",
        ),
        Invalid(
            """
            from dataclasses import dataclass, field
            import transformers
            from transformers import HfArgumentParser, Trainer

            @dataclass
            class TrainingArguments(transformers.TrainingArguments):
                per_device_train_batch_size: int = field(default=1)
                gradient_accumulation_steps: int = field(default=32)

            (training_args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
            trainer = Trainer(model=model, args=training_args)
            """,
            fixed="""
            from dataclasses import dataclass, field
            import transformers
            from transformers import HfArgumentParser, Trainer

            @dataclass
            class TrainingArguments(transformers.TrainingArguments):
                per_device_train_batch_size: int = field(default=4)
                gradient_accumulation_steps: int = field(default=8)

            (training_args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
            trainer = Trainer(model=model, args=training_args)
            """,
            note="defaults of the script's own TrainingArguments subclass (Alpaca, FastChat)",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=1)
            accum = 9
            for step, batch in enumerate(loader):
                loss = model(batch.to("cuda")) / accum
                loss.backward()
                if step % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed=None,
            note="1 x 9 has no larger even split: advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for split, batch, accumulation in self._small_splits(ctx):
            yield self._finding(ctx, split, batch, accumulation)

    def probeable_splits(self, ctx: FileContext) -> list[tuple[int, int]]:
        """(batch, accumulation) of each split verify's probe can rewrite: any accumulation whose
        per-device batch can double within the effective batch (8 x 4 -> 16 x 2 -> 32 x 1), not
        only the tiny batches ADV401 reports by itself."""
        found = []
        for split, batch, accumulation in self._small_splits(ctx, every=True):
            ladder = larger_splits(batch, accumulation)
            if ladder and self._rebalancing_edits(ctx, split, *ladder[0]):
                found.append((batch, accumulation))
        return found

    def _small_splits(self, ctx: FileContext, every: bool = False) -> Iterator[tuple[Split, int, int]]:
        """The splits ADV401 reports: tiny batches with long accumulation; under verify's probe
        also any other the probed batch rebalances; with ``every``, every split that accumulates."""
        seen: set[tuple[int, int]] = set()
        for split in self._splits(ctx):
            batch, accumulation = _int_value(split.batch), _int_value(split.accumulation)
            if batch is None or accumulation is None:
                continue
            if every:
                if batch < 1 or accumulation < 2:
                    continue
            elif not (is_small_split(batch, accumulation) or _probe_rebalances(batch, accumulation)):
                continue
            key = (id(split.batch.node), id(split.accumulation.node))
            if key in seen:
                continue
            seen.add(key)
            yield split, batch, accumulation

    def _finding(self, ctx: FileContext, split: Split, batch: int, accumulation: int) -> Finding:
        product = batch * accumulation
        target = target_split(batch, accumulation)
        if target is None:
            message = (
                f"Per-device batch {batch} with {accumulation} accumulation steps underuses the GPU: raise the "
                f"batch and cut the steps, keeping the effective batch {product}; "
                "`advisor fix --verify` finds the largest batch that fits (guide: Gradient Accumulation)"
            )
            return self.report(split.report_at, message)
        new_batch, new_accumulation = target
        message = (
            f"Per-device batch {batch} with {accumulation} accumulation steps underuses the GPU: rebalance "
            f"`{batch} x {accumulation} -> {new_batch} x {new_accumulation}` (same effective batch {product}); "
            "`advisor fix --verify` finds the largest batch that fits (guide: Gradient Accumulation)"
        )
        edits = self._rebalancing_edits(ctx, split, new_batch, new_accumulation)
        fix = None
        if edits and loads_quantized(ctx):
            # philschmid's QLoRA notebook: an 8B model in 4 bits on a 24 GB GPU, where 1 x 8 is
            # what fits; a larger batch is for `--verify` to try, not to write.
            message = message.replace(" (guide: ", "; the model is loaded quantized, written around its memory, so the fix is left as advice (guide: ", 1)
        elif edits and recomputes_activations(ctx):
            # yarn's finetune.py: 1 x 8 over 65k-token sequences with checkpointing on; 4 x 2 runs out of memory.
            message = message.replace(
                " (guide: ",
                "; the script already recomputes activations to save memory (gradient checkpointing), so the "
                "batch is likely memory's choice and the fix is left as advice (guide: ",
                1,
            )
        elif edits and (long := long_samples(ctx)) is not None:
            # TRL's sudoku GRPO (16k-token completions) and Gemma-3 SFT (8k, eager attention):
            # at batch 4 the logits or attention scores of a micro-batch run out of memory.
            message = message.replace(
                " (guide: ",
                f"; its samples run to {long[0]} tokens (`{long[1].keyword.value}=`), where attention scores and "  # type: ignore[union-attr]
                "logits grow with the length, so the batch is likely memory's choice and the fix is left as advice (guide: ",
                1,
            )
        elif edits and _compares_within_batch(ctx):
            # RecFormer: its contrastive loss scores each sample against the others of its
            # micro-batch (``labels = torch.arange(cos_sim.size(0))``); 4 x 4 is not 2 x 8 there.
            message = message.replace(
                " (guide: ",
                "; the program's loss compares the samples of a batch with each other (`labels = torch.arange(...)`, "
                "in-batch negatives), so a larger batch changes the objective and the fix is left as advice (guide: ",
                1,
            )
        elif edits:
            fix = self.fix(f"Rebalance to batch {new_batch} x {new_accumulation} accumulation steps", *edits)
        return self.report(split.report_at, message, fix)

    @staticmethod
    def _rebalancing_edits(ctx: FileContext, split: Split, new_batch: int, new_accumulation: int) -> tuple[Edit, ...]:
        """Edits of integer literals only, so that the product cannot drift; none when that is not possible."""
        batch_node, accumulation_node = split.batch.node, split.accumulation.node
        if not isinstance(batch_node, cst.Integer) or split.accumulation_repeated:
            return ()
        batch_edit = Edit(batch_node, cst.Integer(str(new_batch)))
        if isinstance(accumulation_node, cst.Integer) and accumulation_node is not batch_node:
            return (batch_edit, Edit(accumulation_node, cst.Integer(str(new_accumulation))))
        if _derived_from_batch(ctx, split, new_batch * new_accumulation):
            return (batch_edit,)  # ``accum = total // batch`` follows the new batch by itself
        return ()

    # -- where a batch and its accumulation come from ----------------------------------------------
    def _splits(self, ctx: FileContext) -> Iterator[Split]:
        yield from self._trainer_splits(ctx)
        if not (ctx.loops.training_loops or ctx.calls(ACCELERATOR, LIGHTNING_TRAINER)) or not ctx.facts.devices.gpu.yes:
            return
        yield from self._accelerator_splits(ctx)
        yield from self._lightning_splits(ctx)
        yield from self._loop_splits(ctx)
        yield from self._micro_step_splits(ctx)

    def _trainer_splits(self, ctx: FileContext) -> Iterator[Split]:
        # A TrainingArguments object means the HF Trainer, which takes the GPU by itself.
        if _assigned_later(ctx, *TRAINER_DEFAULTS):
            return
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            if not ctx.facts.devices.framework_setting(call).gpu:
                continue
            batch, accumulation = (
                _resolve_argument(ctx, call, field, default) for field, default in TRAINER_DEFAULTS.items()
            )
            if batch is not None and accumulation is not None:
                # At the keyword written out (``gradient_accumulation_steps=64`` on its own line),
                # where a suppression comment would go.
                yield Split(batch, accumulation, self.at_keyword(call, *TRAINER_DEFAULTS))
        for name in ctx.facts.frameworks.parsed_training_arguments:
            if not ctx.facts.devices.parsed_arguments_setting(name).gpu:
                continue
            batch, accumulation = (ctx.values.attribute(name, field) for field in TRAINER_DEFAULTS)
            if batch is not None and accumulation is not None:
                yield Split(batch, accumulation, ctx.statement_of(batch.node) or batch.node)

    @staticmethod
    def _maybe_true(ctx: FileContext, call: cst.Call, keyword: str) -> bool:
        """``use_cpu=<unknown or true>`` written out; one hidden in unknown ``**kwargs`` is not assumed."""
        expr = ctx.argument(call, keyword)
        if expr is MISSING or expr is None:
            return False
        resolved = ctx.values.resolve(expr)
        return resolved is None or bool(resolved.value)

    def _accelerator_splits(self, ctx: FileContext) -> Iterator[Split]:
        calls = ctx.calls(ACCELERATOR)
        if not calls:
            return
        batch = ctx.facts.loaders.single_batch(ctx.facts.loaders.of_training_loops)
        if batch is None:
            return
        for call in calls:
            accumulation = _resolve_argument(ctx, call, "gradient_accumulation_steps", 1)
            if accumulation is not None:
                yield Split(batch, accumulation, self.at_keyword(call, "gradient_accumulation_steps"))

    def _lightning_splits(self, ctx: FileContext) -> Iterator[Split]:
        trainers = ctx.calls(LIGHTNING_TRAINER)
        if not trainers:
            return
        batch = ctx.facts.loaders.single_batch(ctx.facts.loaders.lightning_training)
        if batch is None:
            return
        for call in trainers:
            accumulation = _resolve_argument(ctx, call, "accumulate_grad_batches", 1)
            if accumulation is not None:
                yield Split(batch, accumulation, self.at_keyword(call, "accumulate_grad_batches"))

    def _loop_splits(self, ctx: FileContext) -> Iterator[Split]:
        for loop in ctx.loops.training_loops:
            if not isinstance(loop.node, cst.For):
                continue
            divisor = ctx.loops.accumulation_divisor(loop)
            if divisor is None:
                continue
            accumulation = ctx.values.resolve(divisor)
            loaders = ctx.facts.loaders.behind(loop.node.iter)
            batch = ctx.facts.loaders.single_batch(loaders)
            if accumulation is None or batch is None or loaders is None:
                continue
            repeated = any(
                node is not accumulation.node and node.evaluated_value == accumulation.value
                for node in ctx.walk(loop.node, cst.Integer)
            )
            yield Split(batch, accumulation, loaders[0], accumulation_repeated=repeated)

    def _micro_step_splits(self, ctx: FileContext) -> Iterator[Split]:
        """nanoGPT: ``for micro_step in range(gradient_accumulation_steps)`` around batches the
        script draws itself, sized by a ``batch_size`` setting."""
        for loop in ctx.loops.training_loops:
            for optimizer in loop.optimizers:
                micro = ctx.loops.micro_step_loop(loop, optimizer)
                if micro is None:
                    continue
                accumulation = ctx.values.resolve(micro.steps)
                batch = step_batch_setting(ctx, loop) or self._drawn_batch(ctx, micro.node)
                if accumulation is None or batch is None:
                    continue
                repeated = any(
                    node is not accumulation.node and node.evaluated_value == accumulation.value
                    for node in ctx.walk(loop.node, cst.Integer)
                )
                yield Split(batch, accumulation, micro.steps, accumulation_repeated=repeated)
                break


    @staticmethod
    def _drawn_batch(ctx: FileContext, micro: cst.For) -> Value | None:
        """The batch size of the one DataLoader the micro-steps draw from with ``next(...)``
        (x-transformers: ``model(next(train_loader))`` over ``cycle(DataLoader(...))``)."""
        drawn = [call for call in ctx.walk(micro.body, cst.Call) if dotted_name(call.func) == "next" and call.args]
        loaders = {id(loader): loader for call in drawn for loader in ctx.facts.loaders.behind(call.args[0].value) or ()}
        if not drawn or any(not ctx.facts.loaders.behind(call.args[0].value) for call in drawn):
            return None
        return ctx.facts.loaders.single_batch(list(loaders.values()))


# -- ADV402 -------------------------------------------------------------------------------------
BATCH_GUIDE = "Batch size choice"
BATCH_MULTIPLE = 8  # the guide: "Often it's a multiple of 8"
# Smaller batches are a method's choice (or ADV401's business when accumulated), and a
# multiple of 8 would mean several times the memory.
SMALL_TRAINING_BATCH = 8


@dataclass(frozen=True)
class TrainingBatch:
    """A per-device training batch size, where to report it, and whether it runs in fp16."""

    value: Value
    report_at: cst.CSTNode
    fp16: bool


def _resolves_to(ctx: FileContext, call: cst.Call, keyword: str, accepted: tuple, position: int | None = None) -> bool:
    expr = ctx.argument(call, keyword, position)
    if expr is None or expr is MISSING:
        return False
    value = ctx.values.resolve(expr)
    return value is not None and type(value.value) in (int, str, bool) and value.value in accepted


def _loop_fp16(ctx: FileContext) -> bool:
    """fp16 mixed precision in a hand-written loop: a float16 CUDA autocast, or an
    Accelerator / Fabric set to fp16."""
    if any(site.fp16 for site in autocasts(ctx)):
        return True
    if any(_resolves_to(ctx, call, "mixed_precision", ("fp16",)) for call in ctx.calls(ACCELERATOR)):
        return True
    return any(_resolves_to(ctx, call, "precision", LIGHTNING_FP16) for call in ctx.calls(FABRIC, LIGHTNING_TRAINER))


def training_batches(ctx: FileContext) -> Iterator[TrainingBatch]:
    """The per-device training batch sizes the file sets, where they can be told: the
    ``per_device_train_batch_size`` of a ``TrainingArguments`` (HF Trainer, TRL), the
    ``batch_size`` of the one DataLoader the training loops iterate (Accelerate, Fabric and
    plain loops alike), or the one a Lightning ``Trainer`` fits on."""
    if not _assigned_later(ctx, "per_device_train_batch_size"):
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            if not ctx.facts.devices.framework_setting(call).gpu:
                continue
            if AccumulationSplit._maybe_true(ctx, call, "auto_find_batch_size"):
                continue  # the Trainer picks the batch at run time
            field = "per_device_train_batch_size"
            batch = _resolve_argument(ctx, call, field, TRAINER_DEFAULTS[field])
            if batch is not None:
                yield TrainingBatch(batch, call, _resolves_to(ctx, call, "fp16", (True,)))
        for name in ctx.facts.frameworks.parsed_training_arguments:
            if not ctx.facts.devices.parsed_arguments_setting(name).gpu or _field_true(ctx, name, "auto_find_batch_size"):
                continue
            batch = ctx.values.attribute(name, "per_device_train_batch_size")
            if batch is not None:
                yield TrainingBatch(batch, ctx.statement_of(batch.node) or batch.node, _field_true(ctx, name, "fp16"))
    if not (ctx.loops.training_loops or ctx.calls(LIGHTNING_TRAINER)) or not ctx.facts.devices.gpu.yes:
        return
    fp16 = _loop_fp16(ctx)
    loaders = ctx.facts.loaders.of_training_loops if ctx.loops.training_loops else None
    batch = ctx.facts.loaders.single_batch(loaders)
    if batch is not None and loaders:
        yield TrainingBatch(batch, loaders[0], fp16)
    if ctx.calls(LIGHTNING_TRAINER):
        loaders = ctx.facts.loaders.lightning_training
        batch = ctx.facts.loaders.single_batch(loaders)
        if batch is not None and loaders:
            yield TrainingBatch(batch, loaders[0], fp16)


def batch_multiple(ctx: FileContext, fp16: bool, size: int) -> int:
    """The multiple the guide asks of a batch: 8, or the target's fp16 multiple (64 on
    A100-class GPUs) for an fp16 batch that is already that large: rounding a smaller one
    up to 64 could multiply its memory."""
    multiple = ctx.target.fp16_multiple if fp16 else BATCH_MULTIPLE
    return multiple if size >= multiple else BATCH_MULTIPLE


class BatchNotMultipleOf8(Rule):
    code = "ADV402"
    name = "batch-not-multiple-of-8"
    summary = "A training batch size that is not a multiple of 8 (of 64 for fp16 on A100-class GPUs)."
    guide = BATCH_GUIDE
    fix_applicability = Applicability.NONE
    why = """
        Matrix multiplications run on tensor cores in tiles, and a batch dimension that is
        not a multiple of the tile leaves part of the last tile empty (NVIDIA's "dimension
        quantization" and "batch size" notes). The guide's *Batch size choice* section:
        "It is recommended to use batch sizes and input/output neuron counts that are of
        size 2^N. Often it's a multiple of 8, but it can be higher depending on the hardware
        being used and the model's dtype ... for fp16 data type a multiple of 8 is
        recommended, unless it's an A100 GPU, in which case use multiples of 64."
    """
    example = """
        parser.add_argument("--batch-size", type=int, default=50)
        args = parser.parse_args()
        train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    """
    use_instead = """
        parser.add_argument("--batch-size", type=int, default=56)
    """
    silent_when = """
        - the batch size is unknown: computed at run time, read from the command line
          without a default, a `TrainingArguments` parsed from the command line or a
          config file, a batch sampler, several candidate training loaders;
        - the batch is smaller than 8: one or two samples per step are a method's choice
          (or ADV401's business when accumulated), and a multiple of 8 would be several
          times the memory;
        - the loader is only used for evaluation, or the file shows no CUDA device;
        - batches a script draws itself (nanoGPT's `get_batch`): a language model's
          matmuls see batch x sequence length rows, and the sequence length keeps them aligned.

        The multiple is 8. With `--gpu` set to an A100-class GPU (A100, H100, H200, B200)
        and fp16 mixed precision in the file, a batch of 64 or more is held to a multiple
        of 64, as the guide says; a smaller one only to 8, since rounding it up to 64
        could multiply its memory. No fix: a different batch size changes the
        optimization (learning rate, steps per epoch), and only the author can pick it.
    """
    valid = [
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
            model = Net().cuda()
            for x, y in train_loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            train_loader = DataLoader(train_set, batch_size=4, shuffle=True)
            model = Net().cuda()
            for x, y in train_loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="a batch smaller than 8 is the author's choice",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
            test_loader = DataLoader(test_set, batch_size=1000)
            model = Net().cuda()
            for x, y in train_loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            with torch.no_grad():
                for x, y in test_loader:
                    correct += (model(x.cuda()).argmax(1) == y.cuda()).sum()
            """,
            note="the evaluation loader's batch size does not matter for training speed",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            train_loader = DataLoader(train_set, batch_size=50, shuffle=True)
            model = Net()
            for x, y in train_loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="CPU-only script",
        ),
        Valid(
            """
            import sys
            import torch
            from torch.utils.data import DataLoader
            train_loader = DataLoader(train_set, batch_size=int(sys.argv[1]), shuffle=True)
            model = Net().cuda()
            for x, y in train_loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="batch size from the command line without a default: unknown",
        ),
        Valid(
            """
            from transformers import HfArgumentParser, Trainer, TrainingArguments
            (training_args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
            trainer = Trainer(model=model, args=training_args)
            """,
            note="TrainingArguments parsed from the command line: unknown",
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", per_device_train_batch_size=12, use_cpu=True)
            """,
            note="the Trainer runs on the CPU",
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", per_device_train_batch_size=12, auto_find_batch_size=True)
            """,
            note="the Trainer lowers the batch at run time until it fits",
        ),
        Valid(
            """
            import torch
            batch_size = 12
            block_size = 1024
            def get_batch():
                ix = torch.randint(len(data) - block_size, (batch_size,))
                return torch.stack([data[i:i + block_size] for i in ix]).cuda()
            while True:
                loss = model(get_batch())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="nanoGPT's own batches: batch x sequence length rows, aligned by the sequence length",
        ),
    ]
    invalid = [
        Invalid(
            """
            import argparse
            import torch
            from torch.utils.data import DataLoader
            parser = argparse.ArgumentParser()
            parser.add_argument("--batch-size", type=int, default=50)
            args = parser.parse_args()
            train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
            model = Net().cuda()
            for x, y in train_loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", per_device_train_batch_size=12, gradient_accumulation_steps=2)
            trainer = Trainer(model=model, args=args, train_dataset=train_ds)
            """,
        ),
        Invalid(
            """
            from dataclasses import dataclass, field
            import torch
            from accelerate import Accelerator
            from torch.utils.data import DataLoader
            from transformers import HfArgumentParser

            @dataclass
            class TrainArgs:
                batch_size: int = field(default=20, metadata={"help": "per-device batch"})

            (train_args,) = HfArgumentParser(TrainArgs).parse_args_into_dataclasses()
            accelerator = Accelerator()
            train_loader = DataLoader(train_ds, batch_size=train_args.batch_size, shuffle=True)
            model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
            for batch in train_loader:
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="a dataclass field default read through HfArgumentParser",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def train(model, loader, optimizer):
                for x, y in loader:
                    loss = criterion(model(x.cuda()), y.cuda())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()

            class CFG:
                batch_size = 100
                epochs = 10

            train_loader = DataLoader(train_set, batch_size=CFG.batch_size, shuffle=True)
            model = Net().cuda()
            for epoch in range(CFG.epochs):
                train(model, train_loader, optimizer)
            """,
            note="a config class attribute, the loader handed to a training function",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        seen: set[int] = set()
        for batch in training_batches(ctx):
            size = _int_value(batch.value)
            if size is None or size < SMALL_TRAINING_BATCH or id(batch.value.node) in seen:
                continue
            multiple = batch_multiple(ctx, batch.fp16, size)
            if size % multiple == 0:
                continue
            seen.add(id(batch.value.node))
            yield self.report(batch.report_at, self._message(ctx, batch, size, multiple))

    @staticmethod
    def _message(ctx: FileContext, batch: TrainingBatch, size: int, multiple: int) -> str:
        source = f" ({ctx.values.describe(batch.value)})"
        argument = ctx.parent.get(batch.value.node)
        if isinstance(argument, cst.Arg) and ctx.parent.get(argument) is batch.report_at:
            source = ""  # written in the call the finding points at
        higher = -(-size // multiple) * multiple
        lower = size // multiple * multiple
        choice = f"use {higher}" + (f" (or {lower} if {higher} does not fit)" if lower >= SMALL_TRAINING_BATCH else "")
        why = "" if multiple == BATCH_MULTIPLE else f", the guide's multiple for fp16 on {ctx.target.name}"
        return (
            f"Training batch size {size}{source} is not a multiple of {multiple}{why}: {choice} so that "
            f"tensor-core tiles are full (guide: {BATCH_GUIDE})"
        )


# -- ADV403 -------------------------------------------------------------------------------------
DIMS_GUIDE = "Batch size choice"
LINEAR = "torch.nn.Linear"
EMBEDDING = "torch.nn.Embedding"
# A vocabulary must be a multiple of the target's tensor-core multiple (the guide: 8 for
# fp16, 64 on A100-class GPUs). It is padded to a multiple of 64, right on every GPU, as
# nanoGPT's 50257 -> 50304.
VOCAB_MULTIPLE = 64
SMALL_VOCAB = 1000  # below this the vocabulary matmul is too small to matter (char-level models)
# Hidden widths: tensor cores need 16-bit dimensions in multiples of 8; narrower layers are
# too small for the misalignment to cost much.
WIDTH_MULTIPLE = 8
SMALL_WIDTH = 256
# ``vocab_size`` defaults of the transformers configs whose default is not a multiple of 64.
CONFIG_VOCAB_DEFAULTS = {
    "transformers.GPT2Config": 50257,
    "transformers.GPTNeoConfig": 50257,
    "transformers.OPTConfig": 50272,
    "transformers.GPTJConfig": 50400,
    "transformers.RobertaConfig": 50265,
    "transformers.BartConfig": 50265,
    "transformers.BertConfig": 30522,
    "transformers.DistilBertConfig": 30522,
    "transformers.ElectraConfig": 30522,
    "transformers.AlbertConfig": 30000,
}
# Models with an output layer over the vocabulary: transformers' by class name, the user's by
# the usual names of language models.
_TRANSFORMERS_LM = re.compile(r"LMHead|CausalLM|MaskedLM|ForPreTraining|ConditionalGeneration|Seq2SeqLM")
_USER_LM = re.compile(r"GPT|LM|LanguageModel|Llama|Decoder")
# Configs of tokenizers, whose vocabulary is trained, not padded.
_TOKENIZER = re.compile(r"token|sentencepiece|bpe|wordpiece|unigram", re.IGNORECASE)
# Where a name holding the vocabulary size may be read without changing meaning once padded.
_SHAPE_METHODS = ("view", "reshape")


@dataclass(frozen=True)
class VocabSite:
    """A place that sets the vocabulary size: the value, the node a fix rewrites, and how."""

    size: int
    report_at: cst.CSTNode
    value: Value | None  # None: a config default, fixed by adding ``vocab_size=``
    call: cst.Call | None = None  # the config call, for a default


def _next_multiple(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _int_of(ctx: FileContext, expr: cst.BaseExpression | None) -> Value | None:
    if expr is None or expr is MISSING:
        return None
    value = ctx.values.resolve(expr)
    return value if value is not None and type(value.value) is int else None


def _layer_sizes(ctx: FileContext, qualname: str, keyword: str, position: int) -> list[tuple[cst.Call, Value]]:
    found = []
    for call in ctx.calls(qualname):
        value = _int_of(ctx, ctx.argument(call, keyword, position))
        if value is not None:
            found.append((call, value))
    return found


def _config_name(ctx: FileContext, func: cst.BaseExpression) -> str:
    """The callee's own name, seen through import aliases (``GPT2Config as Cfg`` is ``GPT2Config``)."""
    return (ctx.qualname(func) or dotted_name(func) or "").split(".")[-1]


def _is_from_pretrained(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "from_pretrained"


def _feeds_pretrained(ctx: FileContext, node: cst.CSTNode, name: str | None = None) -> bool:
    """The config built at ``node`` (or held by ``name``) comes from or goes to
    ``from_pretrained``: its vocabulary must match the checkpoint's."""
    holders: list[cst.CSTNode] = [node]
    name = name or ctx.assigned_name(node)
    if name is not None:
        holders += [n for n in ctx.nodes(cst.Name) if n.value == name]
        if any(_is_from_pretrained(b.value) for b in ctx.lookup(name, node) if b.value is not None):
            return True
    for holder in holders:
        for ancestor in ctx.ancestors(holder):
            if _is_from_pretrained(ancestor):
                return True
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                break
    return False


def _consumers(ctx: FileContext, node: cst.CSTNode, name: str | None, depth: int = 0) -> list[cst.Call]:
    """The calls that take the config built at ``node`` or held by ``name``, also inside the
    file's functions it is handed to (``main(GPT_CONFIG_124M)`` then ``GPTModel(gpt_config)``)."""
    holders: list[cst.CSTNode] = [node]
    if name is not None:
        holders += [n for n in ctx.nodes(cst.Name) if n.value == name]
    return _calls_taking(ctx, holders, depth)


def _calls_taking(ctx: FileContext, holders: list[cst.CSTNode], depth: int) -> list[cst.Call]:
    found = []
    for holder in holders:
        arg = ctx.parent.get(holder)
        call = ctx.parent.get(arg) if isinstance(arg, cst.Arg) and arg.value is holder else None
        if not isinstance(call, cst.Call):
            continue
        found.append(call)
        function = ctx.loops.callee(call) if depth < 2 else None
        param = _parameter_for(function, call, arg) if function is not None else None  # type: ignore[arg-type]
        if param is not None:
            inside = [n for n in ctx.walk(function, cst.Name) if n.value == param and ctx.is_read(n)]
            found += [c for c in _calls_taking(ctx, inside, depth + 1) if c not in found]
    return found


def _parameter_for(function: cst.FunctionDef, call: cst.Call, arg: cst.Arg) -> str | None:
    """The name of the parameter of ``function`` that ``arg`` of ``call`` binds."""
    if arg.keyword is not None:
        return arg.keyword.value
    if arg.star:
        return None
    positional = [a for a in call.args if a.keyword is None]
    if any(a.star for a in positional[: positional.index(arg) + 1]):
        return None
    params = list(function.params.posonly_params) + list(function.params.params)
    index = positional.index(arg)
    return params[index].name.value if index < len(params) else None


def _builds_language_model(ctx: FileContext, node: cst.CSTNode, name: str | None) -> bool:
    """Whether the config goes to a model with an output layer over the vocabulary: a
    transformers class named for it (``GPT2LMHeadModel``, ``AutoModelForCausalLM.from_config``,
    ``BertForMaskedLM``), or a class of the user's named like a language model (``GPT``) or
    in a file whose own ``nn.Linear`` projects onto a ``vocab_size``. ``BertModel`` or
    ``...ForSequenceClassification`` only look tokens up: no vocabulary matmul to speed up."""
    for call in _consumers(ctx, node, name):
        qualname = ctx.qualname(call.func)
        if qualname is not None and qualname.startswith("transformers."):
            if _TRANSFORMERS_LM.search(qualname):
                return True
            continue
        if _USER_LM.search(_config_name(ctx, call.func)) or _vocabulary_head_in_file(ctx):
            return True
    return False


def _vocabulary_head_in_file(ctx: FileContext) -> bool:
    """An ``nn.Linear`` of the file projecting onto a vocabulary (``vocab_size``,
    ``cfg["vocab_size"]``)."""
    for call in ctx.calls(LINEAR):
        out = ctx.argument(call, "out_features", 1)
        if out is None or out is MISSING:
            continue
        if isinstance(out, cst.Subscript) and len(out.slice) == 1 and isinstance(out.slice[0].slice, cst.Index):
            key = ctx.values.value_of(out.slice[0].slice.value)
            if isinstance(key, str) and "vocab" in key.lower():
                return True
        if "vocab" in (dotted_name(out) or "").split(".")[-1].lower():
            return True
    return False


def _config_sites(ctx: FileContext) -> Iterator[VocabSite]:
    """``GPT2Config(vocab_size=...)``, a transformers config left at a default such as 50257,
    ``config.vocab_size = ...``, and ``vocab_size: int = ...`` in a ``*Config`` dataclass,
    each for a config that builds a language model."""
    if ctx.method_calls("resize_token_embeddings"):
        return  # the embedding is resized afterwards: the config's size is not the one trained
    reassigned = any(key.endswith(".vocab_size") for key in ctx.attribute_assignments)
    for call in ctx.nodes(cst.Call):
        config = _config_name(ctx, call.func)
        if not config.endswith("Config") or _TOKENIZER.search(config) or _feeds_pretrained(ctx, call):
            continue
        if not _builds_language_model(ctx, call, ctx.assigned_name(call)):
            continue
        if any(arg.keyword is not None and arg.keyword.value in _LABEL_COUNTS for arg in call.args):
            continue  # a classifier (SpikeGPT's ``GPTConfig(..., num_classes=2)``): its head is over labels
        argument = ctx.argument(call, "vocab_size")
        if argument is None:
            continue
        if argument is MISSING:
            default = CONFIG_VOCAB_DEFAULTS.get(ctx.qualname(call.func) or "")
            positional = any(arg.keyword is None for arg in call.args)
            if default is not None and not positional and not reassigned:
                yield VocabSite(default, call, None, call)
            continue
        value = _int_of(ctx, argument)
        if value is not None:
            yield VocabSite(value.value, call, value)
    for key, nodes in ctx.attribute_assignments.items():
        owner, _, field = key.rpartition(".")
        if field != "vocab_size" or "config" not in owner.split(".")[-1].lower() or len(nodes) != 1:
            continue
        node, root = nodes[0], owner.split(".")[0]
        if (
            isinstance(node, cst.Assign)
            and len(node.targets) == 1
            and not _feeds_pretrained(ctx, node, root)
            and _builds_language_model(ctx, node, root)
        ):
            value = _int_of(ctx, node.value)
            if value is not None:
                yield VocabSite(value.value, node, value)
    yield from _dataclass_default_sites(ctx, reassigned)
    yield from _dict_config_sites(ctx)


_VOCAB_KEYS = ("vocab_size", "n_vocab")
# A config that counts labels builds a classifier: the vocabulary only sizes a lookup table.
_LABEL_COUNTS = ("num_classes", "num_labels", "n_classes", "n_labels")
# A model whose weights come from a checkpoint must keep the checkpoint's vocabulary.
_LOADS_WEIGHTS = re.compile(r"load_state_dict|load_weights|load_checkpoint|from_pretrained|load_model")


def _dict_config_sites(ctx: FileContext) -> Iterator[VocabSite]:
    """``GPT_CONFIG = {"vocab_size": 50257, ...}`` handed to a language model class
    (``GPTModel(GPT_CONFIG)``), in a file that trains it from scratch (no weights loaded)."""
    loads = [call for call in ctx.nodes(cst.Call) if _LOADS_WEIGHTS.search(dotted_name(call.func) or "")]
    for element in ctx.nodes(cst.DictElement):
        key = ctx.values.value_of(element.key) if isinstance(element.key, (cst.SimpleString, cst.Name)) else None
        if key not in _VOCAB_KEYS or not isinstance(element.value, cst.Integer):
            continue
        literal = ctx.parent.get(element)
        if not isinstance(literal, cst.Dict) or not _builds_language_model(ctx, literal, ctx.assigned_name(literal)):
            continue
        if loads and not _built_without_weights(ctx, _consumers(ctx, literal, ctx.assigned_name(literal)), loads):
            continue
        value = Value(element.value.evaluated_value, element.value)
        yield VocabSite(value.value, element, value)


def _built_without_weights(ctx: FileContext, consumers: list[cst.Call], loads: list[cst.Call]) -> bool:
    """Some model build among ``consumers`` sits in a function (or the module level) that loads
    no weights: that one trains from scratch (gpt_train.py's ``main()``), whatever a later block
    loads for inference."""
    def scope(node: cst.CSTNode) -> cst.CSTNode:
        return ctx.enclosing(node, cst.FunctionDef) or ctx.module

    loading = {id(scope(call)) for call in loads}
    builds = [call for call in consumers if ctx.loops.callee(call) is None]  # not the file's helper functions
    return any(id(scope(call)) not in loading for call in builds)


# Models whose vocabulary is only looked up: text encoders, and classifiers (a reward model's
# ``AutoModelForSequenceClassification``) whose head is over labels, not tokens.
_TEXT_ENCODER = re.compile(
    r"CLIPTextModel|T5EncoderModel|TextModel\b|TextEncoder|BertModel\b|\bEncoderModel\b"
    r"|For(?:Sequence|Token)Classification|ForQuestionAnswering|ForMultipleChoice"
)


def _text_encoder(ctx: FileContext, call: cst.Call) -> bool:
    """The resized model is a text encoder (CLIP's, T5's encoder, BERT's bare model) or a
    classifier: it looks tokens up and has no output layer over the vocabulary."""
    receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
    spelling = dotted_name(receiver) if receiver is not None else None
    if spelling is None:
        return False
    if _TEXT_ENCODER.search(spelling.split(".")[-1].replace("_", "")) or "text_encoder" in spelling:
        return True
    values = [b.value for b in ctx.lookup(spelling, call) if b.value is not None] if "." not in spelling else [
        a.value for a in ctx.attribute_assignments.get(spelling, []) if isinstance(a, cst.Assign)
    ]
    return any(_TEXT_ENCODER.search(ctx.code(value)) for value in values)


_RESIZE = re.compile(rb"resize_token_embeddings\(")
_TRAINS = re.compile(rb"\.backward\(|Trainer\(|\.step\(")


def _loads_at_the_tokenizer_size(ctx: FileContext) -> str | None:
    """Another file of the project that resizes a model's embeddings without padding and does
    not train (a test or inference script that loads what this one saves), by name, where this
    file trains a PEFT adapter (saved apart from the base model the other file resizes); None.
    A fully fine-tuned model loads at its saved size, and a resize after it only trims rows."""
    if "peft" not in ctx.source:
        return None
    for path, text in ctx.texts_with(_RESIZE, b"resize_token_embeddings("):
        if path != ctx.path and path.endswith(".py") and b"pad_to_multiple_of" not in text and not _TRAINS.search(text):
            return os.path.basename(path)
    return None


def _resized_to_tokenizer(ctx: FileContext) -> Iterator[cst.Call]:
    """``model.resize_token_embeddings(len(tokenizer))`` without ``pad_to_multiple_of``: the
    vocabulary becomes the tokenizer's length, 32001 once a pad token is added to LLaMA's."""
    for call in ctx.method_calls("resize_token_embeddings"):
        size = ctx.argument(call, "new_num_tokens", 0)
        if not isinstance(size, cst.BaseExpression) or size is MISSING:
            continue
        if ctx.argument(call, "pad_to_multiple_of", 1) is not MISSING:
            continue
        known = ctx.values.resolve(size)
        if known is not None:
            if type(known.value) is int and known.value % VOCAB_MULTIPLE == 0:
                continue
        elif not (isinstance(size, cst.Call) and dotted_name(size.func) == "len"):
            continue
        yield call


def _dataclass_default_sites(ctx: FileContext, reassigned: bool) -> Iterator[VocabSite]:
    """``vocab_size: int = 50257`` in a ``*Config`` class of the file that every construction
    in the file leaves at its default."""
    if reassigned:
        return
    for cls in ctx.nodes(cst.ClassDef):
        if not cls.name.value.endswith("Config") or _TOKENIZER.search(cls.name.value):
            continue
        field = next(
            (
                s.body[0]
                for s in cls.body.body
                if isinstance(s, cst.SimpleStatementLine)
                and isinstance(s.body[0], cst.AnnAssign)
                and isinstance(s.body[0].target, cst.Name)
                and s.body[0].target.value == "vocab_size"
            ),
            None,
        )
        if not isinstance(field, cst.AnnAssign) or not isinstance(field.value, cst.Integer):
            continue
        constructions = [c for c in ctx.nodes(cst.Call) if isinstance(c.func, cst.Name) and c.func.value == cls.name.value]
        if constructions and all(
            not c.args or (ctx.argument(c, "vocab_size") is MISSING and all(a.keyword is not None for a in c.args))
            for c in constructions
        ) and any(_builds_language_model(ctx, c, ctx.assigned_name(c)) for c in constructions):
            yield VocabSite(field.value.evaluated_value, field, Value(field.value.evaluated_value, field.value))


def _tied_head_sites(ctx: FileContext) -> Iterator[VocabSite]:
    """``nn.Embedding(V, d)`` with an ``nn.Linear(d, V)`` in the same file: a language-model
    head whose matmul runs over the vocabulary."""
    embeddings = _layer_sizes(ctx, EMBEDDING, "num_embeddings", 0)
    heads = _layer_sizes(ctx, LINEAR, "out_features", 1)
    sizes = {value.value for _, value in embeddings} & {value.value for _, value in heads}
    for call, value in sorted(embeddings + heads, key=lambda pair: ctx.order[pair[0]]):
        if value.value in sizes:
            yield VocabSite(value.value, call, value)


def _fixable_literal(ctx: FileContext, value: Value, sites: list[VocabSite]) -> bool:
    """Whether rewriting the literal behind ``value`` pads every use: written in place, or a
    constant that is read only where a vocabulary size is set (or a tensor reshaped by it)."""
    if not isinstance(value.node, cst.Integer) or value.origin not in ("literal", "constant"):
        return False
    if value.origin == "literal":
        return True
    assign = ctx.parent.get(value.node)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)):
        return False
    name = assign.targets[0].target.value
    for read in ctx.nodes(cst.Name):
        if read.value != name or read is assign.targets[0].target:
            continue
        if any(ctx.is_descendant(read, site.report_at) for site in sites):
            continue
        call = ctx.enclosing(read, cst.Call)
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value in _SHAPE_METHODS:
            continue
        return False
    return True


def _hidden_widths(ctx: FileContext, skip: set[int]) -> Iterator[tuple[cst.Call, int]]:
    """Widths that one ``nn.Linear`` produces and another consumes: chosen by the author."""
    outputs = _layer_sizes(ctx, LINEAR, "out_features", 1)
    inputs = {value.value for _, value in _layer_sizes(ctx, LINEAR, "in_features", 0)}
    seen: set[int] = set()
    for call, value in outputs:
        width = value.value
        if width in inputs and width not in seen and width not in skip:
            seen.add(width)
            if width >= SMALL_WIDTH and width % WIDTH_MULTIPLE:
                yield call, width


def _uses_half_precision(ctx: FileContext) -> bool:
    """fp16/bf16 matmuls: an autocast to either, a GradScaler, or float16 weights."""
    return any(site.fp16 or site.bf16 for site in autocasts(ctx)) or bool(scaler_calls(ctx)) or half_weights(ctx)


class DimsNotTensorCoreFriendly(Rule):
    code = "ADV403"
    name = "dims-not-tensor-core-friendly"
    summary = "A vocabulary size (or a hidden width) that tensor cores cannot tile: not a multiple of 8 (64 on A100-class GPUs)."
    guide = DIMS_GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        The guide's *Batch size choice*: use "input/output neuron counts" that are
        multiples of 8, "but it can be higher depending on the hardware being used and
        the model's dtype ... for fp16 data type a multiple of 8 is recommended, unless
        it's an A100 GPU, in which case use multiples of 64". Tensor-core GEMM kernels
        tile the matrix; a dimension that is not a multiple of the tile wastes the last
        tile or falls back to slower kernels.

        The largest matmul of a language model is its output projection over the
        vocabulary, and GPT-2's 50257 is odd: nanoGPT pads it to 50304 (the next multiple
        of 64) and reports a clear speed-up. The tokenizer never produces the extra ids, so
        their logits are only learned down; that changes the softmax's denominator a little
        at the start, hence an unsafe fix.
    """
    example = """
        config = GPT2Config(vocab_size=50257, n_layer=12)
        model = GPT2LMHeadModel(config).cuda()
    """
    use_instead = """
        config = GPT2Config(vocab_size=50304, n_layer=12)
        model = GPT2LMHeadModel(config).cuda()
    """
    silent_when = """
        Reported: vocabulary sizes of 1000 or more that are not a multiple of the target's
        tensor-core multiple (8; 64 on A100, H100 and newer datacenter GPUs), set by a
        `*Config(vocab_size=...)` call (a transformers config left at a default such as
        GPT-2's 50257 counts), `config.vocab_size = ...`, a `vocab_size: int = ...` field of
        a `*Config` dataclass that the file never overrides, when the config builds a language
        model; or an `nn.Embedding(V, d)` next to an `nn.Linear(d, V)` head. The fix pads to
        the next multiple of 64, right on every GPU.

        Advice only: a hidden width of 256 or more that one `nn.Linear` produces and another
        consumes, not a multiple of 8, in a file that trains in fp16/bf16 (an architecture
        choice: no fix).

        Silent when:
        - the file does not train on CUDA (a model file trained elsewhere);
        - the size is unknown (`len(tokenizer)`, a config attribute), or below 1000
          (char-level vocabularies: the matmul is small);
        - the config goes to `from_pretrained` or comes from it (the checkpoint fixes the
          vocabulary), or the embeddings are resized later (`resize_token_embeddings`);
        - the config builds no output layer over the vocabulary: a transformers class not
          named for one (`BertModel`, `...ForSequenceClassification` only look tokens up), a
          class of the user's not named like a language model (`GPT`, `...LM`, `Decoder`) in
          a file with no `nn.Linear(..., vocab_size)`, or a config that counts labels
          (`GPTConfig(vocab_size=50277, num_classes=2)`: a classifier); or it configures a
          tokenizer;
        - an `nn.Embedding` has no matching `nn.Linear` head (a lookup table is not a matmul),
          or an `nn.Linear` output has no matching embedding: the number of classes of a
          classifier is fixed by the task, and padding it would change what the model predicts;
        - widths below 256, layer inputs fixed by the data, fp32-only training;
        - `resize_token_embeddings(len(tokenizer))` of a text encoder (CLIP's, T5's encoder) or
          a classifier (a reward model's `AutoModelForSequenceClassification`): no output
          layer over the vocabulary. Where the file sets embedding rows by index
          itself (`get_input_embeddings().weight[-n:] = mean`, a `len(tokenizer)` mask), the
          finding is advice without a fix: padded rows would take those places. So it is
          where the file trains a PEFT adapter and another file of the project resizes the
          base model to `len(tokenizer)` without training (LC-Rec's `test.py`): an adapter
          saved with padded embedding rows would not load there.

        The fix pads the literal (a constant only when every read of it sets the vocabulary
        or reshapes by it); a command-line default is reported without a fix.
    """
    valid = [
        Valid(
            """
            import torch
            from src.model_classify import GPT, GPTConfig
            model = GPT(GPTConfig(vocab_size=50277, ctx_len=1024, n_layer=24, n_embd=768, num_classes=2)).cuda()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="a config that counts labels builds a classifier: the vocabulary only sizes a lookup (SpikeGPT's NLU scripts)",
        ),
        Valid(
            """
            from transformers import AutoModelForSequenceClassification, AutoTokenizer
            tokenizer = AutoTokenizer.from_pretrained("meta-llama/Meta-Llama-3-8B")
            tokenizer.add_special_tokens({"pad_token": "[PAD]"})
            model = AutoModelForSequenceClassification.from_pretrained("meta-llama/Meta-Llama-3-8B", num_labels=1)
            model.resize_token_embeddings(len(tokenizer))
            """,
            note="a reward model: its head is over one label, the vocabulary is only looked up",
        ),
        Valid(
            """
            import torch
            from transformers import CLIPTextModel, CLIPTokenizer
            tokenizer.add_tokens(["<cat-toy>"])
            text_encoder.resize_token_embeddings(len(tokenizer))
            token_embeds = text_encoder.get_input_embeddings().weight.data
            token_embeds[placeholder_id] = token_embeds[initializer_id]
            text_encoder.cuda()
            for batch in loader:
                loss = text_encoder(batch["input_ids"].cuda())[0].mean()
                loss.backward()
                optimizer.step()
            """,
            note="textual inversion works on the embedding rows by index: padding would break it",
        ),
        Valid(
            """
            import torch
            from gpt import GPTModel

            BASE_CONFIG = {"vocab_size": 50257, "context_length": 1024, "emb_dim": 768}
            model = GPTModel(BASE_CONFIG)
            load_weights_into_gpt(model, params)
            model.to("cuda")
            optimizer = torch.optim.AdamW(model.parameters(), fused=True)
            for input_batch, target_batch in train_loader:
                model(input_batch.cuda()).mean().backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="weights loaded from a checkpoint: the vocabulary must stay the checkpoint's",
        ),
        Valid(
            """
            import transformers
            model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)
            transformers.Trainer(model=model, args=args, train_dataset=ds).train()
            """,
        ),
        Valid(
            """
            import torch
            from transformers import GPT2Config, GPT2LMHeadModel
            config = GPT2Config(vocab_size=50304)
            model = GPT2LMHeadModel(config).cuda()
            loss = model(**batch).loss
            loss.backward()
            """,
            note="already padded",
        ),
        Valid(
            """
            import torch
            from transformers import GPT2Config, GPT2LMHeadModel
            config = GPT2Config(vocab_size=len(tokenizer))
            model = GPT2LMHeadModel(config).cuda()
            loss = model(**batch).loss
            loss.backward()
            """,
            note="unknown size",
        ),
        Valid(
            """
            import torch
            from transformers import AutoConfig, AutoModelForCausalLM
            config = AutoConfig.from_pretrained("gpt2", vocab_size=50257)
            model = AutoModelForCausalLM.from_pretrained("gpt2", config=config).cuda()
            loss = model(**batch).loss
            loss.backward()
            """,
            note="a pretrained checkpoint fixes the vocabulary",
        ),
        Valid(
            """
            import torch
            from transformers import GPT2Config, GPT2LMHeadModel
            config = GPT2Config(vocab_size=50257)
            model = GPT2LMHeadModel.from_pretrained("gpt2", config=config).cuda()
            loss = model(**batch).loss
            loss.backward()
            """,
            note="config handed to from_pretrained",
        ),
        Valid(
            """
            import torch
            from transformers import GPT2Config, GPT2LMHeadModel
            model = GPT2LMHeadModel(GPT2Config()).cuda()
            model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)
            loss = model(**batch).loss
            loss.backward()
            """,
            note="the config's 50257 is resized afterwards, to a padded tokenizer length",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.Sequential(nn.Linear(2048, 1000), nn.ReLU(), nn.Linear(1000, 21843)).cuda()
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            """,
            note="a classifier's 21843 classes are fixed by the task; 1000 is a multiple of 8",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            users = nn.Embedding(6040, 32).cuda()
            items = nn.Embedding(3706, 32).cuda()
            loss = ((users(u) * items(i)).sum(-1) - r).pow(2).mean()
            loss.backward()
            optimizer.step()
            """,
            note="embedding lookups without an output matmul over them",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            vocab_size = 65
            emb = nn.Embedding(vocab_size, 384)
            head = nn.Linear(384, vocab_size)
            model = nn.Sequential(emb, head).cuda()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            """,
            note="a char-level vocabulary: too small to matter",
        ),
        Valid(
            """
            import torch.nn as nn
            class GPTConfig:
                vocab_size: int = 50257
            class GPT(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.wte = nn.Embedding(config.vocab_size, config.n_embd)
                    self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            """,
            note="a model file: trained elsewhere",
        ),
        Valid(
            """
            import torch
            from dataclasses import dataclass
            @dataclass
            class GPTConfig:
                vocab_size: int = 50257
            model = GPT(GPTConfig(vocab_size=50304)).cuda()
            logits, loss = model(x, y)
            loss.backward()
            """,
            note="the dataclass default is overridden where it is built",
        ),
        Valid(
            """
            from tokenizers import ByteLevelBPETokenizer
            import torch
            tokenizer = ByteLevelBPETokenizer()
            tokenizer.train(files, vocab_size=52000)
            loss = model(x.cuda()).loss
            loss.backward()
            """,
            note="a tokenizer's training vocabulary, not a layer",
        ),
        Valid(
            """
            import torch
            from transformers import BertConfig, BertForSequenceClassification, Trainer
            model = BertForSequenceClassification(BertConfig(num_hidden_layers=4, num_labels=3))
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            note="a classifier only looks its 30522 tokens up: no matmul over the vocabulary",
        ),
        Valid(
            """
            import torch
            config = TokenizerConfig(vocab_size=52000)
            tokenizer = train_tokenizer(config)
            model = GPT(GPTConfig(vocab_size=52032)).cuda()
            loss = model(x, y)
            loss.backward()
            """,
            note="a tokenizer's config; the model's vocabulary is padded",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.Sequential(nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10)).cuda()
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            """,
            note="fp32 training: the hidden width 500 is left alone",
        ),
        Valid(
            """
            import torch
            from transformers import GPT2Config, GPT2LMHeadModel
            config = GPT2Config(vocab_size=50257)
            model = GPT2LMHeadModel(config)
            loss = model(**batch).loss
            loss.backward()
            """,
            note="no CUDA device",
        ),
    ]
    invalid = [
        Invalid(
            """
            import transformers
            model = transformers.AutoModelForCausalLM.from_pretrained("huggyllama/llama-7b")
            num_new_tokens = tokenizer.add_special_tokens({"pad_token": "[PAD]"})
            model.resize_token_embeddings(len(tokenizer))
            input_embeddings = model.get_input_embeddings().weight.data
            input_embeddings[-num_new_tokens:] = input_embeddings[:-num_new_tokens].mean(dim=0, keepdim=True)
            transformers.Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            fixed=None,
            note="new rows set from the end: padding would move them; advice only",
        ),
        Invalid(
            """
            import torch
            from gpt import GPTModel

            GPT_CONFIG_124M = {"vocab_size": 50257, "context_length": 1024, "emb_dim": 768}
            model = GPTModel(GPT_CONFIG_124M).to("cuda")
            optimizer = torch.optim.AdamW(model.parameters(), fused=True)
            for input_batch, target_batch in train_loader:
                loss = model(input_batch.cuda()).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            fixed="""
            import torch
            from gpt import GPTModel

            GPT_CONFIG_124M = {"vocab_size": 50304, "context_length": 1024, "emb_dim": 768}
            model = GPTModel(GPT_CONFIG_124M).to("cuda")
            optimizer = torch.optim.AdamW(model.parameters(), fused=True)
            for input_batch, target_batch in train_loader:
                loss = model(input_batch.cuda()).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            unsafe=True,
            note="a dict config handed to a language model trained from scratch",
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Model(nn.Module):
                def __init__(self, cfg):
                    super().__init__()
                    self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
                    self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

                def forward(self, idx):
                    return self.out_head(self.tok_emb(idx))

            def main(gpt_config):
                model = Model(gpt_config).to("cuda")
                optimizer = torch.optim.AdamW(model.parameters(), fused=True)
                for x, y in train_loader:
                    loss = nn.functional.cross_entropy(model(x.cuda()).flatten(0, 1), y.cuda().flatten())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                return model

            if __name__ == "__main__":
                CONFIG = {"vocab_size": 50257, "emb_dim": 768}
                model = main(CONFIG)
                torch.save(model.state_dict(), "model.pth")
                model = Model(CONFIG)
                model.load_state_dict(torch.load("model.pth"))
            """,
            fixed="""
            import torch
            from torch import nn

            class Model(nn.Module):
                def __init__(self, cfg):
                    super().__init__()
                    self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
                    self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

                def forward(self, idx):
                    return self.out_head(self.tok_emb(idx))

            def main(gpt_config):
                model = Model(gpt_config).to("cuda")
                optimizer = torch.optim.AdamW(model.parameters(), fused=True)
                for x, y in train_loader:
                    loss = nn.functional.cross_entropy(model(x.cuda()).flatten(0, 1), y.cuda().flatten())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                return model

            if __name__ == "__main__":
                CONFIG = {"vocab_size": 50304, "emb_dim": 768}
                model = main(CONFIG)
                torch.save(model.state_dict(), "model.pth")
                model = Model(CONFIG)
                model.load_state_dict(torch.load("model.pth"))
            """,
            unsafe=True,
            note="handed to the function that builds and trains the model from scratch; the weights loaded afterwards are its own",
        ),
        Invalid(
            """
            import transformers
            tokenizer.add_special_tokens({"pad_token": "[PAD]"})
            model.resize_token_embeddings(len(tokenizer))
            trainer = transformers.Trainer(model=model, args=args, train_dataset=ds)
            trainer.train()
            """,
            fixed="""
            import transformers
            tokenizer.add_special_tokens({"pad_token": "[PAD]"})
            model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)
            trainer = transformers.Trainer(model=model, args=args, train_dataset=ds)
            trainer.train()
            """,
            unsafe=True,
            note="the vocabulary follows the tokenizer's length: 32001 after a pad token",
        ),
        Invalid(
            """
            import torch
            from transformers import GPT2Config, GPT2LMHeadModel, Trainer
            config = GPT2Config(vocab_size=50257, n_layer=6)
            model = GPT2LMHeadModel(config)
            trainer = Trainer(model=model, args=training_args, train_dataset=ds)
            trainer.train()
            """,
            fixed="""
            import torch
            from transformers import GPT2Config, GPT2LMHeadModel, Trainer
            config = GPT2Config(vocab_size=50304, n_layer=6)
            model = GPT2LMHeadModel(config)
            trainer = Trainer(model=model, args=training_args, train_dataset=ds)
            trainer.train()
            """,
        ),
        Invalid(
            """
            import torch
            import transformers
            config = transformers.GPT2Config(n_layer=6, n_head=8)
            model = transformers.GPT2LMHeadModel(config).cuda()
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            """,
            fixed="""
            import torch
            import transformers
            config = transformers.GPT2Config(n_layer=6, n_head=8, vocab_size=50304)
            model = transformers.GPT2LMHeadModel(config).cuda()
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            """,
            note="GPT2Config's default vocab_size is 50257",
        ),
        Invalid(
            """
            import torch
            from transformers import GPT2Config as Cfg, GPT2LMHeadModel
            config = Cfg(n_layer=6, n_head=8)
            model = GPT2LMHeadModel(config).cuda()
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            """,
            fixed="""
            import torch
            from transformers import GPT2Config as Cfg, GPT2LMHeadModel
            config = Cfg(n_layer=6, n_head=8, vocab_size=50304)
            model = GPT2LMHeadModel(config).cuda()
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            """,
            note="an import alias is still GPT2Config (found by tests/test_fuzz.py)",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            VOCAB_SIZE = 50257
            class LM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.wte = nn.Embedding(VOCAB_SIZE, 768)
                    self.lm_head = nn.Linear(768, VOCAB_SIZE, bias=False)
                    self.lm_head.weight = self.wte.weight
            model = LM().to("cuda")
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, VOCAB_SIZE), y.view(-1))
            loss.backward()
            optimizer.step()
            """,
            fixed="""
            import torch
            import torch.nn as nn
            VOCAB_SIZE = 50304
            class LM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.wte = nn.Embedding(VOCAB_SIZE, 768)
                    self.lm_head = nn.Linear(768, VOCAB_SIZE, bias=False)
                    self.lm_head.weight = self.wte.weight
            model = LM().to("cuda")
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, VOCAB_SIZE), y.view(-1))
            loss.backward()
            optimizer.step()
            """,
            note="tied embedding and head through a constant",
        ),
        Invalid(
            """
            import torch
            from dataclasses import dataclass
            @dataclass
            class GPTConfig:
                block_size: int = 1024
                vocab_size: int = 50257 # GPT-2's tokenizer
            model = GPT(GPTConfig(block_size=512)).cuda()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits, loss = model(x, y)
            loss.backward()
            optimizer.step()
            """,
            fixed="""
            import torch
            from dataclasses import dataclass
            @dataclass
            class GPTConfig:
                block_size: int = 1024
                vocab_size: int = 50304 # GPT-2's tokenizer
            model = GPT(GPTConfig(block_size=512)).cuda()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits, loss = model(x, y)
            loss.backward()
            optimizer.step()
            """,
            note="build-nanogpt's GPTConfig default",
        ),
        Invalid(
            """
            import torch
            VOCAB = 50257
            config = BertConfig(vocab_size=VOCAB)
            model = BertForMaskedLM(config).cuda()
            ids = torch.randint(0, VOCAB, (8, 128), device="cuda")
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            """,
            fixed=None,
            note="the constant also draws token ids: reported without a fix",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            model = nn.Sequential(nn.Linear(784, 500), nn.GELU(), nn.Linear(500, 10)).cuda()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            """,
            fixed=None,
            note="a bf16 hidden width of 500: advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not (ctx.facts.frameworks.trains and ctx.facts.devices.gpu.yes):
            return
        by_size: dict[int, list[VocabSite]] = {}
        for site in [*_config_sites(ctx), *_tied_head_sites(ctx)]:
            by_size.setdefault(site.size, []).append(site)
        multiple = max(WIDTH_MULTIPLE, ctx.target.fp16_multiple)
        for size, sites in by_size.items():
            if size >= SMALL_VOCAB and size % multiple:
                yield self._vocab_finding(ctx, size, sites, multiple)
        rows_by_index = bool(ctx.method_calls("get_input_embeddings", "get_output_embeddings"))
        for call in _resized_to_tokenizer(ctx):
            if _text_encoder(ctx, call):
                continue  # no output layer over the vocabulary: a lookup table is not a matmul
            message = (
                f"`{ctx.code(call.func)}({ctx.code(call.args[0].value)})` sizes the vocabulary to the tokenizer "
                f"(32001 once a pad token is added to LLaMA's 32000): the output matmul misses tensor-core-friendly "
                f"shapes; pass `pad_to_multiple_of={VOCAB_MULTIPLE}`"
            )
            if rows_by_index:
                # The script sets embedding rows by index (the new tokens' rows as the mean, a
                # ``len(tokenizer)`` mask): padded rows would take those places. Advice only.
                message += ", and index the new tokens' rows from `len(tokenizer)`, not from the end"
                yield self.report(call, f"{message} (guide: {DIMS_GUIDE})")
                continue
            edit = Edit(call, set_keyword(call, "pad_to_multiple_of", str(VOCAB_MULTIPLE)))
            # 4.32 added the argument, but until 4.34 the config kept the unpadded size, so the
            # saved model does not load again (trlx pins 4.32.0).
            fix = self.fix(f"Pass `pad_to_multiple_of={VOCAB_MULTIPLE}`", edit, requires=[("transformers", "4.34")])
            finding = self.report(call, f"{message} (guide: {DIMS_GUIDE})", fix)
            loader = _loads_at_the_tokenizer_size(ctx)
            if loader is not None:
                # LC-Rec's test.py resizes the base model to len(tokenizer) before loading the
                # adapter that lora_finetune.py saves with its embedding rows.
                finding.as_advice(
                    f"`{loader}` resizes the embeddings to the tokenizer's length without training: a checkpoint "
                    f"saved at the padded size would not load there; pad both"
                )
            yield finding
        if _uses_half_precision(ctx):
            for call, width in _hidden_widths(ctx, skip=set(by_size)):
                suggested = _next_multiple(width, max(WIDTH_MULTIPLE, ctx.target.fp16_multiple))
                message = (
                    f"Hidden width {width} (an `nn.Linear` output that feeds another) is not a multiple of "
                    f"{WIDTH_MULTIPLE}: 16-bit matmuls cannot use tensor cores fully; consider {suggested} "
                    f"(guide: {DIMS_GUIDE})"
                )
                yield self.report(call, message)

    def _vocab_finding(self, ctx: FileContext, size: int, sites: list[VocabSite], multiple: int) -> Finding:
        padded = _next_multiple(size, VOCAB_MULTIPLE)
        # The site the defaults run (``if args.debug:`` a tiny config, ``else:`` the real one), else the first.
        chosen = run_by_default(ctx, [site.report_at for site in sites])
        first = next((site for site in sites if site.report_at is chosen), None) or min(
            sites, key=lambda site: ctx.order[site.report_at]
        )
        message = (
            f"Vocabulary size {size} is not a multiple of {multiple}: the output matmul over the "
            f"vocabulary misses tensor-core-friendly shapes; pad it to {padded} (a multiple of "
            f"{VOCAB_MULTIPLE}, right for every GPU) with ids the tokenizer never produces (guide: {DIMS_GUIDE})"
        )
        edits: dict[cst.CSTNode, Edit] = {}
        for site in sites:
            if site.value is None:
                assert site.call is not None
                edits[site.call] = Edit(site.call, set_keyword(site.call, "vocab_size", str(padded)))
            elif _fixable_literal(ctx, site.value, sites):
                node = site.value.node
                edits[node] = Edit(node, cst.Integer(str(padded)))
            else:
                return self.report(first.report_at, message)
        fix = self.fix(f"Pad the vocabulary to {padded}", *edits.values())
        return self.report(first.report_at, message, fix)
