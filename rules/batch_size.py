"""ADV4xx: batch size and accumulation (guide: "Batch size choice", "Gradient Accumulation")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from advisor.apis import ACCELERATOR, DATALOADER, DATALOADER_POSITION, LIGHTNING_TRAINER, TRAINING_ARGUMENTS
from advisor.context import MISSING, FileContext
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid
from advisor.values import Value

# TrainingArguments defaults, used when an argument is certainly not passed.
TRAINER_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}

SMALL_BATCH = 2  # a per-device batch this small leaves the GPU mostly idle...
LONG_ACCUMULATION = 8  # ...and this many micro-steps per optimizer step make it the common case
PREFERRED_BATCH = 4  # the guide's example: 1 x 64 -> 4 x 16
# Wrappers that keep iterating the loader they are given.
_ITERATION_WRAPPERS = {"enumerate", "tqdm", "iter", "track", "progress_bar", "skip_first_batches"}


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
    return any(key.rsplit(".", 1)[-1] in fields and nodes for key, nodes in ctx.attribute_assignments.items())


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


# -- which DataLoader a loop or framework trains on ------------------------------------------
def loader_calls(
    ctx: FileContext, expr: cst.BaseExpression, depth: int = 0, visiting: frozenset[int] = frozenset()
) -> list[cst.Call] | None:
    """The ``DataLoader(...)`` calls behind a loop's iterable, or None if any path is unknown.

    Sees through ``enumerate``/``tqdm``, names bound once or through
    ``accelerator.prepare`` / ``fabric.setup_dataloaders`` unpacking, and ``self.x`` attributes.
    A binding met again while resolving itself (``loader = prepare(loader)``) adds nothing.
    """
    if depth > 8:
        return None
    if isinstance(expr, cst.Call):
        if ctx.qualname(expr.func) == DATALOADER:
            return [expr]
        func_name = (dotted_name(expr.func) or "").split(".")[-1]
        if func_name in _ITERATION_WRAPPERS and expr.args and not expr.args[0].star:
            return loader_calls(ctx, expr.args[0].value, depth + 1, visiting)
        if func_name in ("prepare", "setup_dataloaders") and len(expr.args) == 1 and not expr.args[0].star:
            return loader_calls(ctx, expr.args[0].value, depth + 1, visiting)
        return None
    if isinstance(expr, cst.Name):
        bindings = ctx.lookup(expr.value, expr)
        if not bindings:
            return None
        found: list[cst.Call] = []
        for binding in bindings:
            if id(binding.node) in visiting:
                continue
            inner_visiting = visiting | {id(binding.node)}
            if binding.value is not None:
                inner = loader_calls(ctx, binding.value, depth + 1, inner_visiting)
            elif isinstance(binding.node, cst.Assign):
                inner = _unpacked_from_prepare(ctx, binding.node, expr.value, depth, inner_visiting)
            else:
                inner = None
            if inner is None:
                return None
            found.extend(c for c in inner if c not in found)
        return found
    if isinstance(expr, cst.Attribute):
        name = dotted_name(expr)
        assignments = ctx.attribute_assignments.get(name or "", [])
        if not assignments:
            return None
        found = []
        for assignment in assignments:
            if id(assignment) in visiting:
                continue
            if not isinstance(assignment, cst.Assign) or len(assignment.targets) != 1:
                return None
            inner = loader_calls(ctx, assignment.value, depth + 1, visiting | {id(assignment)})
            if inner is None:
                return None
            found.extend(c for c in inner if c not in found)
        return found
    return None


def _unpacked_from_prepare(
    ctx: FileContext, assign: cst.Assign, name: str, depth: int, visiting: frozenset[int]
) -> list[cst.Call] | None:
    """``model, opt, train_loader = accelerator.prepare(model, opt, train_loader)``: the matching argument."""
    call = assign.value
    if len(assign.targets) != 1 or not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
        return None
    if call.func.attr.value not in ("prepare", "setup_dataloaders"):
        return None
    target = assign.targets[0].target
    if not isinstance(target, (cst.Tuple, cst.List)):
        return None
    names = [dotted_name(e.value) if not isinstance(e, cst.StarredElement) else None for e in target.elements]
    if name not in names or None in names or len(names) != len(call.args):
        return None
    if any(arg.star or arg.keyword for arg in call.args):
        return None
    return loader_calls(ctx, call.args[names.index(name)].value, depth + 1, visiting)


def loader_batch(ctx: FileContext, loader: cst.Call) -> Value | None:
    """The loader's ``batch_size``, DataLoader's default 1 when absent, None when unknown or not batching."""
    if ctx.argument(loader, "batch_sampler", DATALOADER_POSITION["batch_sampler"]) is not MISSING:
        return None  # batches come from the sampler
    collate = ctx.argument(loader, "collate_fn", DATALOADER_POSITION["collate_fn"])
    if collate is None or isinstance(collate, cst.Lambda):
        return None  # ``collate_fn=lambda x: x[0]``: the dataset yields whole batches
    expr = ctx.argument(loader, "batch_size", DATALOADER_POSITION["batch_size"])
    if expr is None:
        return None
    if expr is MISSING:
        if collate is not MISSING:
            return None
        return Value(1, loader, "default")
    return ctx.values.resolve(expr)


def single_loader_batch(ctx: FileContext, loaders: list[cst.Call] | None) -> Value | None:
    if not loaders or len(loaders) != 1:
        return None
    return loader_batch(ctx, loaders[0])


def training_loader_of_loops(ctx: FileContext) -> list[cst.Call] | None:
    """The one DataLoader the file's training loops iterate, if that is knowable."""
    found: list[cst.Call] = []
    for loop in ctx.loops.training_loops:
        iterable = loop.iterable
        if iterable is None:
            return None
        calls = loader_calls(ctx, iterable)
        if calls is None:
            return None
        found.extend(c for c in calls if c not in found)
    return found or None


# -- accumulation as written by hand ----------------------------------------------------------
def modulo_divisor(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """``k`` in ``(i + 1) % k == 0`` (alone, or one side of ``and``/``or``)."""
    if isinstance(test, cst.BooleanOperation):
        return modulo_divisor(test.left) or modulo_divisor(test.right)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = test.expression
        if isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Modulo):
            return inner.right
        return None
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    comparison = test.comparisons[0]
    if not isinstance(comparison.operator, cst.Equal):
        return None
    for side, other in ((test.left, comparison.comparator), (comparison.comparator, test.left)):
        if (
            isinstance(side, cst.BinaryOperation)
            and isinstance(side.operator, cst.Modulo)
            and isinstance(other, cst.Integer)
            and other.evaluated_value == 0
        ):
            return side.right
    return None


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
          passed through `**kwargs` that cannot be resolved, or changed after construction;
        - accumulation is below 8 steps, or the per-device batch is already above 2
          (`4 x 16` is the guide's own recommendation);
        - the loader does not batch by `batch_size` (a `batch_sampler`, `batch_size=None`, a
          `collate_fn=lambda ...` that unwraps batches the dataset builds itself);
        - the training DataLoader cannot be told apart (several candidates);
        - the file shows no CUDA device (CPU-only scripts).

        The fix keeps the effective batch (the product) and edits only integer literals it
        can see, both of them, so the product cannot drift. A larger per-device batch uses
        more memory, so the fix is unsafe; `advisor fix --verify` tries it and finds the
        largest per-device batch that fits. Where the method needs one sample per step
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
        seen: set[tuple[int, int]] = set()
        for split in self._splits(ctx):
            batch, accumulation = _int_value(split.batch), _int_value(split.accumulation)
            if batch is None or accumulation is None:
                continue
            if not (1 <= batch <= SMALL_BATCH and accumulation >= LONG_ACCUMULATION):
                continue
            key = (id(split.batch.node), id(split.accumulation.node))
            if key in seen:
                continue
            seen.add(key)
            yield self._finding(ctx, split, batch, accumulation)

    def _finding(self, ctx: FileContext, split: Split, batch: int, accumulation: int) -> Finding:
        product = batch * accumulation
        target = rebalanced(batch, accumulation)
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
        if edits:
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
        if not ctx.uses_cuda:
            return
        yield from self._accelerator_splits(ctx)
        yield from self._lightning_splits(ctx)
        yield from self._loop_splits(ctx)

    def _trainer_splits(self, ctx: FileContext) -> Iterator[Split]:
        # A TrainingArguments object means the HF Trainer, which takes the GPU by itself.
        if _assigned_later(ctx, *TRAINER_DEFAULTS):
            return
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            if any(self._maybe_true(ctx, call, flag) for flag in ("use_cpu", "no_cuda")):
                continue
            batch, accumulation = (
                _resolve_argument(ctx, call, field, default) for field, default in TRAINER_DEFAULTS.items()
            )
            if batch is not None and accumulation is not None:
                yield Split(batch, accumulation, call)

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
        batch = single_loader_batch(ctx, training_loader_of_loops(ctx))
        if batch is None:
            return
        for call in calls:
            accumulation = _resolve_argument(ctx, call, "gradient_accumulation_steps", 1)
            if accumulation is not None:
                yield Split(batch, accumulation, call)

    def _lightning_splits(self, ctx: FileContext) -> Iterator[Split]:
        trainers = ctx.calls(LIGHTNING_TRAINER)
        if not trainers:
            return
        candidates: list[cst.Call] = []
        for function in ctx.nodes(cst.FunctionDef):
            if function.name.value == "train_dataloader":
                for ret in ctx.walk(function, cst.Return):
                    calls = loader_calls(ctx, ret.value) if ret.value is not None else None
                    if calls is None:
                        return
                    candidates.extend(c for c in calls if c not in candidates)
        for fit in ctx.method_calls("fit"):
            expr = ctx.argument(fit, "train_dataloaders", 1)
            if expr is None:
                return
            if expr is MISSING:
                continue
            calls = loader_calls(ctx, expr)
            if calls is None:
                return
            candidates.extend(c for c in calls if c not in candidates)
        batch = single_loader_batch(ctx, candidates)
        if batch is None:
            return
        for call in trainers:
            accumulation = _resolve_argument(ctx, call, "accumulate_grad_batches", 1)
            if accumulation is not None:
                yield Split(batch, accumulation, call)

    def _loop_splits(self, ctx: FileContext) -> Iterator[Split]:
        for loop in ctx.loops.training_loops:
            if not isinstance(loop.node, cst.For):
                continue
            divisor = self._accumulation_divisor(ctx, loop)
            if divisor is None:
                continue
            accumulation = ctx.values.resolve(divisor)
            loaders = loader_calls(ctx, loop.node.iter)
            batch = single_loader_batch(ctx, loaders)
            if accumulation is None or batch is None or loaders is None:
                continue
            repeated = any(
                node is not accumulation.node and node.evaluated_value == accumulation.value
                for node in ctx.walk(loop.node, cst.Integer)
            )
            yield Split(batch, accumulation, loaders[0], accumulation_repeated=repeated)

    @staticmethod
    def _accumulation_divisor(ctx: FileContext, loop) -> cst.BaseExpression | None:
        """``k`` of the ``if (i + 1) % k == 0`` that guards every optimizer step of the loop."""
        steps = [e for e in loop.of_kind("step", direct_only=True) if not e.in_nested_loop]
        if not steps or ctx.loops.accumulate_context(steps[0].call):
            return None
        divisors = []
        for event in steps:
            found = next((d for d in (modulo_divisor(g.test) for g in event.guards) if d is not None), None)
            if found is None:
                return None
            divisors.append(found)
        first = ctx.code(divisors[0])
        return divisors[0] if all(ctx.code(d) == first for d in divisors) else None
