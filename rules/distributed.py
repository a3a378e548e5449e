"""Beyond one GPU: data parallelism done by hand (ADV801-ADV806).

The premises come from :mod:`advisor.facts.distributed`: a file that wraps its model in DDP or
FSDP itself (no Accelerate, Lightning, Fabric, HF Trainer or DeepSpeed engine driving it) owns
sharding the data, skipping the all-reduce of micro-steps and reshuffling every epoch.
"""
from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from advisor.apis import DATALOADER
from advisor.context import MISSING, FileContext
from advisor.edits import expression, nested_block, remove_keyword, set_keyword, statement
from advisor.facts.branches import calls_of
from advisor.facts.distributed import DISTRIBUTED_SAMPLERS
from advisor.facts.precision import file_trains
from advisor.loops import TrainingLoop, modulo_divisor
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid

GUIDE = "Multi-GPU training (PyTorch DDP notes; guide: DeepSpeed ZeRO)"
_EVALUATION = re.compile(r"eval|test|predict|infer|valid|generate|sample", re.IGNORECASE)
DDP_FIND_UNUSED = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "lightning.pytorch.strategies.DDPStrategy",
    "accelerate.utils.DistributedDataParallelKwargs",
    "accelerate.DistributedDataParallelKwargs",
)


class DataParallel(Rule):
    code = "ADV801"
    name = "data-parallel"
    summary = "`nn.DataParallel` drives every GPU from one Python process; DDP runs one process per GPU."
    guide = GUIDE
    why = """
        `nn.DataParallel` runs in one process: on every forward it copies the model's
        weights to each GPU, scatters the batch, gathers the outputs on the first GPU and
        computes the loss there, and one Python thread per GPU competes for the GIL. The
        first GPU holds more memory than the others and the others wait for it. PyTorch's
        documentation recommends `DistributedDataParallel` instead "even on a single node":
        one process per GPU, weights replicated once, gradients all-reduced in buckets while
        the backward pass still runs.
    """
    example = """
        model = nn.DataParallel(model).cuda()
    """
    use_instead = """
        # torchrun --nproc_per_node=<GPUs> train.py
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(model.to(local_rank), device_ids=[local_rank])
        loader = DataLoader(dataset, batch_size=per_gpu_batch, sampler=DistributedSampler(dataset))
    """
    silent_when = """
        - the file trains nothing (inference with `DataParallel` keeps only the scatter cost), or
          the wrap is in an evaluation or inference function (`evaluate()`, `predict()`) or under
          an `if` about testing (`if args.do_test:`);
        - `device_ids` names a single GPU: nothing runs in parallel.
    """
    valid = [
        Valid(
            """
            import torch.nn as nn
            model = nn.DataParallel(model).cuda()
            model.eval()
            with torch.no_grad():
                for x in loader:
                    print(model(x.cuda()))
            """,
            note="inference only",
        ),
        Valid(
            """
            import torch
            model = torch.nn.DataParallel(model, device_ids=[0]).cuda()
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="one device",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            import torch.nn as nn
            model = nn.DataParallel(model).cuda()
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        frameworks = ctx.facts.frameworks
        if not (ctx.loops.training_loops or frameworks.trains or frameworks.delegated_training):
            return
        for call in ctx.facts.distributed.data_parallel_wraps:
            function = ctx.enclosing(call, cst.FunctionDef)
            if isinstance(function, cst.FunctionDef) and _EVALUATION.search(function.name.value):
                continue  # wrapped for evaluation or inference: the training wrap is reported where it is
            if any(isinstance(a, cst.If) and _EVALUATION.search(ctx.code(a.test)) for a in ctx.ancestors(call)):
                continue  # ``if args.do_test:``
            devices = ctx.argument(call, "device_ids", 1)
            if isinstance(devices, (cst.List, cst.Tuple)) and len(devices.elements) == 1:
                continue
            yield self.report(
                call,
                "`nn.DataParallel` drives every GPU from one process: it replicates the model and "
                "scatters each batch on every step, gathers on the first GPU, and its threads share "
                "one GIL; use `DistributedDataParallel`, one process per GPU, launched with "
                "`torchrun --nproc_per_node=<GPUs> train.py` (and a `DistributedSampler` for the data)",
            )


class FindUnusedParameters(Rule):
    code = "ADV802"
    name = "ddp-find-unused-parameters"
    summary = "`find_unused_parameters=True` makes DDP traverse the autograd graph after every forward."
    guide = GUIDE
    why = """
        With `find_unused_parameters=True`, DDP walks the autograd graph from the outputs
        after every forward pass to mark the parameters that will get no gradient, so
        that their buckets are not waited for. The walk costs time on every step, and
        it delays the all-reduce of the buckets it marks. Most models use every
        parameter on every step and need none of it; DDP raises an error that names the
        unused parameters when one does not get a gradient, so dropping the flag is
        safe to try. Where some parameters really go unused, the same set on every step,
        `static_graph=True` finds them once, on the first iteration.
    """
    example = """
        model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)
    """
    use_instead = """
        model = DDP(model, device_ids=[local_rank])
        # some parameters unused, the same ones every step:
        model = DDP(model, device_ids=[local_rank], static_graph=True)
    """
    silent_when = """
        - the value is not `True` (or an argparse default of `True`), or cannot be read;
        - the file trains nothing (no backward): DDP searches only when gradients flow;
        - `static_graph=True` is passed too: the graph is walked once.

        Also read: Lightning's `DDPStrategy(find_unused_parameters=True)` and
        `strategy="ddp_find_unused_parameters_true"`, Accelerate's
        `DistributedDataParallelKwargs(find_unused_parameters=True)`, and
        `TrainingArguments(ddp_find_unused_parameters=True)`.
    """
    valid = [
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[rank])
            """
        ),
        Valid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[rank], find_unused_parameters=True)
            model.eval()
            with torch.no_grad():
                for batch in test_loader:
                    predictions.append(model(**batch))
            """,
            note="an inference script: no gradients, no search",
        ),
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[rank], find_unused_parameters=args.find_unused)
            """,
            note="a value the file does not know",
        ),
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[rank], find_unused_parameters=True, static_graph=True)
            """,
            note="static graph: the walk happens once",
        ),
    ]
    invalid = [
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[rank], find_unused_parameters=True)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """
        ),
        Invalid(
            """
            import lightning as L
            trainer = L.Trainer(accelerator="gpu", devices=4, strategy="ddp_find_unused_parameters_true")
            """,
            note="Lightning's strategy name",
        ),
        Invalid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", ddp_find_unused_parameters=True)
            Trainer(model=model, args=args, train_dataset=train_set).train()
            """
        ),
    ]

    MESSAGE = (
        "`find_unused_parameters=True` makes DDP walk the autograd graph after every forward pass; "
        "drop it if every parameter gets a gradient each step (DDP names the ones that do not), "
        "or pass `static_graph=True` where the same parameters go unused every step"
    )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        from advisor.apis import LIGHTNING_TRAINER, TRAINING_ARGUMENTS

        # DDP looks for unused parameters only when gradients flow: an evaluation or inference
        # script pays nothing for the flag.
        if not _may_train(ctx):
            return
        for call in ctx.calls(*DDP_FIND_UNUSED):
            if self._true(ctx, call, "find_unused_parameters") and not self._true(ctx, call, "static_graph"):
                yield self.report(self.at_keyword(call, "find_unused_parameters"), self.MESSAGE)
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            if self._true(ctx, call, "ddp_find_unused_parameters"):
                yield self.report(self.at_keyword(call, "ddp_find_unused_parameters"), self.MESSAGE)
        for call in ctx.calls(LIGHTNING_TRAINER):
            strategy = ctx.argument(call, "strategy")
            if strategy is not None and strategy is not MISSING and ctx.values.value_of(strategy) == "ddp_find_unused_parameters_true":
                yield self.report(self.at_keyword(call, "strategy"), self.MESSAGE)

    @staticmethod
    def _true(ctx: FileContext, call: cst.Call, keyword: str) -> bool:
        arg = ctx.keyword_arg(call, keyword)
        return arg is not None and ctx.values.value_of(arg.value) is True


def _may_train(ctx: FileContext) -> bool:
    """The file trains, or hands training to code it builds an optimizer for: not an evaluation
    or inference script (no loop that steps, no backward, no optimizer)."""
    frameworks = ctx.facts.frameworks
    return bool(
        ctx.loops.training_loops
        or frameworks.trains
        or frameworks.delegated_training
        or ctx.method_calls("backward")
        or ctx.calls_with_prefix("torch.optim.")
    )


class AccumulationWithoutNoSync(Rule):
    code = "ADV803"
    name = "ddp-accumulation-without-no-sync"
    summary = "Gradient accumulation under DDP all-reduces the gradients on every micro-step, not only the last."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        DDP all-reduces the gradients during every `backward()`. When a loop accumulates
        gradients over k micro-steps before `optimizer.step()`, only the last all-reduce
        is needed: the first k - 1 send the whole gradient over the interconnect for
        nothing (the guide's *Gradient Accumulation* trades steps for memory; the
        communication should not multiply with it). `model.no_sync()` skips the
        all-reduce: gradients accumulate locally and the next synchronised backward
        reduces their sum. The forward pass must run inside the context too.
    """
    example = """
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y) / accumulation_steps
            loss.backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
    """
    use_instead = """
        for i, (x, y) in enumerate(loader):
            with (model.no_sync() if (i + 1) % accumulation_steps != 0 else contextlib.nullcontext()):
                loss = criterion(model(x), y) / accumulation_steps
                loss.backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
    """
    silent_when = """
        - the model is not wrapped in DDP / FSDP by the file itself, and not prepared by
          Accelerate in a loop that counts its micro-steps by hand (Accelerate's `accumulate`,
          Lightning, Fabric's `no_backward_sync`, the HF Trainer and DeepSpeed skip the
          all-reduce themselves);
        - the backward already runs under a `no_sync()` context (or one named for the sync,
          EDM's `ddp_sync`), the file mentions `no_sync` anywhere (a caller may wrap the step
          function in it), or the file sets `require_backward_grad_sync` (nanoGPT's way);
        - the loop steps on every iteration (no accumulation).

        The fix wraps the loop body from its first statement to the backward in
        `with (model.no_sync() if not <step condition> else contextlib.nullcontext()):`;
        it is unsafe because the gradients of the micro-steps are then reduced once, as a
        sum, which is the same in exact arithmetic but not bit for bit. It is offered only
        where the loop body up to the backward has no `break` / `continue` / `return` and the
        step condition reads nothing assigned before it in the body; elsewhere the finding
        is advice.
    """
    valid = [
        Valid(
            """
            import contextlib
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model.cuda(), device_ids=[rank])
            for i, (x, y) in enumerate(loader):
                with model.no_sync() if (i + 1) % accum != 0 else contextlib.nullcontext():
                    loss = criterion(model(x.cuda()), y.cuda()) / accum
                    loss.backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="no_sync already",
        ),
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model.cuda(), device_ids=[rank])
            for idx, (x, y) in enumerate(loader):
                loss = criterion(model(x.cuda()), y.cuda())
                loss_scaler(loss, optimizer, parameters=model.parameters(), update_grad=True)
            """,
            note="a loss scaler that steps every time",
        ),
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model.cuda(), device_ids=[rank])
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="no accumulation",
        ),
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model.cuda(), device_ids=[rank])
            for step in range(max_steps):
                for micro_step in range(accum):
                    model.require_backward_grad_sync = micro_step == accum - 1
                    loss = model(*get_batch())
                    loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="nanoGPT's require_backward_grad_sync",
        ),
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from utils import misc
            ddp = DDP(net.cuda(), device_ids=[rank])
            while True:
                optimizer.zero_grad(set_to_none=True)
                for round_idx in range(num_accumulation_rounds):
                    with misc.ddp_sync(ddp, round_idx == num_accumulation_rounds - 1):
                        loss = loss_fn(net=ddp, images=next(batches))
                        loss.sum().backward()
                optimizer.step()
            """,
            note="EDM: a helper named for the sync calls no_sync on the rounds that do not step",
        ),
        Valid(
            """
            from accelerate import Accelerator
            accelerator = Accelerator(gradient_accumulation_steps=4)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for x, y in loader:
                with accelerator.accumulate(model):
                    loss = criterion(model(x), y)
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="Accelerate skips the all-reduce itself",
        ),
    ]
    invalid = [
        Invalid(
            """
            from accelerate import Accelerator
            accelerator = Accelerator()
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y) / accum
                accelerator.backward(loss)
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed=None,
            note="accumulation counted by hand under Accelerate: advice to use accelerator.accumulate",
        ),
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model.cuda(), device_ids=[rank])
            for idx, (x, y) in enumerate(loader):
                loss = criterion(model(x.cuda()), y.cuda()) / accumulation_steps
                loss_scaler(loss, optimizer, parameters=model.parameters(), update_grad=(idx + 1) % accumulation_steps == 0)
                if (idx + 1) % accumulation_steps == 0:
                    optimizer.zero_grad()
            """,
            fixed=None,
            note="timm's loss scaler told when to step (Swin): advice",
        ),
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model.cuda(), device_ids=[rank])
            for step in range(max_steps):
                for micro_step in range(grad_accum_steps):
                    loss = model(*get_batch()) / grad_accum_steps
                    loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            fixed=None,
            note="nanoGPT's micro-step loop without require_backward_grad_sync: advice",
        ),
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model.cuda(), device_ids=[rank])
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x.cuda()), y.cuda()) / accum
                loss.backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            import contextlib
            model = DDP(model.cuda(), device_ids=[rank])
            for i, (x, y) in enumerate(loader):
                with (model.no_sync() if not ((i + 1) % accum == 0) else contextlib.nullcontext()):
                    loss = criterion(model(x.cuda()), y.cuda()) / accum
                    loss.backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model.cuda(), device_ids=[rank])
            step = 0
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda()) / accum
                loss.backward()
                step += 1
                if step % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed=None,
            note="the step condition reads a counter the body changes first: advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        facts = ctx.facts.distributed
        accelerate = not facts.hand_written and facts.accelerate_prepares_model
        if not (facts.hand_written or accelerate) or self._syncs_by_flag(ctx):
            return
        if facts.hand_written and "no_sync" in ctx.source:
            return  # the file skips the all-reduce somewhere (a caller's ``with model.no_sync():``)
        models = sorted(facts.wrapped_names)
        for loop in ctx.loops.training_loops:
            divisor = ctx.loops.accumulation_divisor(loop)
            micro = None
            by_scaler = False
            if divisor is None:
                micro = next(filter(None, (ctx.loops.micro_step_loop(loop, o) for o in loop.optimizers)), None)
                by_scaler = micro is None and self._scaler_accumulates(ctx, loop)
                if micro is None and not by_scaler:
                    continue
            for event in loop.of_kind("backward"):
                if micro is None and event.in_nested_loop or ctx.loops.accumulate_context(event.call):
                    continue
                if by_scaler and not event.by_scaler:
                    continue
                if self._under_sync_helper(ctx, event.call):
                    continue
                if accelerate:
                    message = (
                        "Gradient accumulation counted by hand under Accelerate: on several GPUs every "
                        "micro-step's backward all-reduces the gradients, though only the one before "
                        "`optimizer.step()` needs to; run each micro-step under `accelerator.accumulate(model)` "
                        "(with `Accelerator(gradient_accumulation_steps=k)`), or `accelerator.no_sync(model)`"
                    )
                    yield self.report(event.call, message)
                    continue
                name = models[0] if len(models) == 1 else "model"
                message = (
                    f"Gradient accumulation under DDP: every micro-step's `backward()` all-reduces the gradients, "
                    f"though only the one before `optimizer.step()` needs to; run the other micro-steps "
                    f"(forward and backward) under `{name}.no_sync()`"
                )
                fix = self._fix(ctx, loop, event, models[0]) if len(models) == 1 and micro is None and not by_scaler else None
                guard = ctx.facts.distributed.conditional_wrap(name) if fix is not None else None
                if guard is not None:
                    # minimind: `if ddp: model = DistributedDataParallel(...)`; a one-GPU run
                    # keeps the plain module, which has no `no_sync()` and would raise.
                    test = guard.test if isinstance(guard, (cst.If, cst.IfExp)) else guard
                    message += f"; `{name}` is wrapped only when `{' '.join(ctx.code(test).split())[:40]}`, so the fix is left as advice"
                    fix = None
                yield self.report(event.call, message, fix)
                break  # one finding per loop: the fp16 and fp32 branches' backwards are one problem

    @staticmethod
    def _scaler_accumulates(ctx: FileContext, loop: TrainingLoop) -> bool:
        """timm's loss scaler (Swin, DeiT, MAE) steps when told: ``loss_scaler(loss, optimizer,
        update_grad=(idx + 1) % accumulation_steps == 0)``."""
        for event in loop.of_kind("backward"):
            if not event.by_scaler:
                continue
            update = ctx.keyword_arg(event.call, "update_grad")
            if update is not None and modulo_divisor(update.value) is not None:
                return True
        return False

    @staticmethod
    def _under_sync_helper(ctx: FileContext, node: cst.CSTNode) -> bool:
        """Inside ``with misc.ddp_sync(ddp, last_round):`` or another context manager of the
        project named for the gradient sync (EDM's way to call ``no_sync`` on some rounds)."""
        return any("sync" in (dotted_name(call.func) or "").split(".")[-1].lower() for call in ctx.loops.context_calls(node))

    @staticmethod
    def _syncs_by_flag(ctx: FileContext) -> bool:
        return any(attribute.attr.value == "require_backward_grad_sync" for attribute in ctx.nodes(cst.Attribute))

    def _fix(self, ctx: FileContext, loop: TrainingLoop, backward, model: str):
        body = loop.node.body
        if not isinstance(body, cst.IndentedBlock) or backward.via_helper is not None or not backward.straight_line:
            return None
        statements = list(body.body)
        if backward.statement not in statements:
            return None
        end = statements.index(backward.statement)
        steps = [e for e in loop.of_kind("step") if not e.in_nested_loop]
        guard = steps[0].guards[0] if steps and steps[0].guards else None
        if guard is None or guard not in statements or statements.index(guard) <= end:
            return None
        if modulo_divisor(guard.test) is None:
            return None
        wrapped = statements[: end + 1]
        for node in wrapped:
            if ctx.walk(node, cst.Break) or ctx.walk(node, cst.Continue) or ctx.walk(node, cst.Return):
                return None
        read = {n.value for n in ctx.walk(guard.test, cst.Name)}
        for node in statements[: statements.index(guard)]:
            for target in ctx.walk(node, cst.AssignTarget) + ctx.walk(node, cst.AugAssign):
                written = target.target if isinstance(target, (cst.AssignTarget, cst.AugAssign)) else None
                if written is not None and {n.value for n in ctx.walk(written, cst.Name)} & read:
                    return None
        nullcontext, imports = ctx.reference("contextlib.nullcontext", loop.node)
        condition = ctx.code(guard.test)
        header = expression(
            f"({model}.no_sync() if not ({condition}) else {ctx.code(nullcontext)}())"
        )
        first = wrapped[0]
        with_block = cst.With(
            items=[cst.WithItem(item=header)],
            body=nested_block(ctx, first, [
                wrapped[0].with_changes(leading_lines=[]) if hasattr(wrapped[0], "leading_lines") else wrapped[0],
                *wrapped[1:],
            ]),
            leading_lines=getattr(first, "leading_lines", ()),
        )
        edits = [Edit(first, with_block)] + [Edit(node, cst.RemovalSentinel.REMOVE) for node in wrapped[1:]]
        return self.fix(
            f"Run the micro-steps that do not step under `{model}.no_sync()`", *edits, imports=imports or ("contextlib",)
        )


class WithoutDistributedSampler(Rule):
    code = "ADV804"
    name = "ddp-without-distributed-sampler"
    summary = "A DDP training DataLoader without a `DistributedSampler`: every rank reads the same data."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        DDP runs one process per GPU, each with its own copy of the DataLoader. Without a
        sampler that gives each rank its own share of the indices, every rank draws the
        whole data set, in the same order when the seeds match: N GPUs train N times on
        the same batches, an epoch takes as long as on one GPU, and the effective batch
        is N copies of one batch. `DistributedSampler` splits the indices by rank (and
        shuffles them, with `set_epoch` each epoch).
    """
    example = """
        model = DDP(model.to(rank), device_ids=[rank])
        loader = DataLoader(dataset, batch_size=32, shuffle=True)
    """
    use_instead = """
        model = DDP(model.to(rank), device_ids=[rank])
        loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
    """
    silent_when = """
        - the file does not wrap a model in DDP / FSDP itself, nor drive DeepSpeed's engine
          without `training_data=` (Accelerate's `prepare`, Lightning, Fabric, the HF Trainer
          and DeepSpeed given the data set shard it themselves);
        - the loader is given a `sampler=` or `batch_sampler=` (the file chose how to split);
        - the data set is an `IterableDataset` (it must shard itself by rank), or a `Subset`
          whose indices the rank picks (`Subset(dataset, range(rank * n, (rank + 1) * n))`);
        - the loader is not a training loader, or which loader trains cannot be told.

        The fix moves `shuffle` into the sampler (`DistributedSampler` shuffles by default) and
        is unsafe: each rank then sees 1/N of the data per epoch, so an epoch has N times
        fewer steps (learning-rate schedules counted in epochs change). Offered only where
        the data set is a plain name or attribute (it is written twice) and the file's
        `init_process_group` runs before the loader is built, in the same function or above
        it at module level, under no `if` the loader is not under too (a `DistributedSampler`
        reads the world size when it is built: before the process group exists it raises, as in
        a script whose `if ddp: init_process_group(...)` leaves plain `python train.py` without
        one; DeepSpeed's `initialize` creates the group after the loaders a script builds, so
        there it is advice).
    """
    valid = [
        Valid(
            """
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader, Subset

            def main(rank, world_size):
                dist.init_process_group("nccl", rank=rank, world_size=world_size)
                model = DDP(Net().to(rank), device_ids=[rank])
                per_gpu = len(dataset) // world_size
                dataset_train = Subset(dataset, range(rank * per_gpu, (rank + 1) * per_gpu))
                loader = DataLoader(dataset_train, batch_size=8, shuffle=True, num_workers=4)
                for x, y in loader:
                    loss = model(x.to(rank), y.to(rank))
                    loss.backward()
                    optimizer.step()
            """,
            note="each rank reads its own Subset: sharded by hand (BackgroundMattingV2)",
        ),
        Valid(
            """
            import deepspeed
            engine, optimizer, loader, _ = deepspeed.initialize(
                model=model, model_parameters=model.parameters(), training_data=dataset, config=ds_config
            )
            for x, y in loader:
                loss = engine(x, y)
                engine.backward(loss)
                engine.step()
            """,
            note="DeepSpeed builds the distributed loader from training_data",
        ),
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader, DistributedSampler
            model = DDP(model.to(rank), device_ids=[rank])
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, batch_size=32, sampler=sampler)
            for epoch in range(10):
                sampler.set_epoch(epoch)
                for x, y in loader:
                    loss = criterion(model(x.to(rank)), y.to(rank))
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader
            model = model.cuda()
            loader = DataLoader(dataset, batch_size=32, shuffle=True)
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="one process",
        ),
        Valid(
            """
            from accelerate import Accelerator
            from torch.utils.data import DataLoader
            accelerator = Accelerator()
            loader = DataLoader(dataset, batch_size=32, shuffle=True)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for x, y in loader:
                loss = criterion(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="Accelerate shards the prepared loader",
        ),
    ]
    invalid = [
        Invalid(
            """
            import deepspeed
            from torch.utils.data import DataLoader
            engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
            loader = DataLoader(dataset, batch_size=32, shuffle=True)
            for x, y in loader:
                loss = engine(x.to(engine.device), y.to(engine.device))
                engine.backward(loss)
                engine.step()
            """,
            fixed=None,
            note="DeepSpeed's engine without training_data= leaves the data to the script; advice, "
            "since the process group is created inside initialize",
        ),
        Invalid(
            """
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader
            dist.init_process_group("nccl")
            model = DDP(model.to(rank), device_ids=[rank])
            loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=4)
            for x, y in loader:
                loss = criterion(model(x.to(rank)), y.to(rank))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            fixed="""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader
            dist.init_process_group("nccl")
            model = DDP(model.to(rank), device_ids=[rank])
            loader = DataLoader(dataset, batch_size=32, num_workers=4, sampler=torch.utils.data.DistributedSampler(dataset))
            for x, y in loader:
                loss = criterion(model(x.to(rank)), y.to(rank))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        facts = ctx.facts.distributed
        if not facts.shards_data_itself:
            return
        loaders = ctx.facts.loaders
        for call in ctx.calls(DATALOADER):
            if not loaders.is_training(call):
                continue
            if ctx.argument(call, "sampler", 2) is not MISSING or ctx.argument(call, "batch_sampler", 3) is not MISSING:
                continue
            if loaders.file_streams_data or loaders.sharded_by_rank(call):
                continue
            yield self.report(
                call,
                "DDP training DataLoader without a `DistributedSampler`: every rank reads the whole data set, "
                "so N GPUs train on the same batches; pass `sampler=DistributedSampler(dataset)` "
                "(it shuffles; call `sampler.set_epoch(epoch)` each epoch)",
                self._fix(ctx, call),
            )

    def _fix(self, ctx: FileContext, call: cst.Call):
        if not _after_process_group(ctx, call):
            return None  # DistributedSampler reads the world size when it is built
        dataset = ctx.argument(call, "dataset", 0)
        if dataset is None or dataset is MISSING or dotted_name(dataset) is None:
            return None
        shuffle = ctx.argument(call, "shuffle", 2)
        if shuffle is not MISSING and shuffle is not None and not isinstance(shuffle, cst.Name):
            return None
        if any(arg.star for arg in call.args):
            return None
        shuffled = shuffle is not MISSING and shuffle is not None and ctx.values.value_of(shuffle) is True
        sampler, imports = ctx.reference(DISTRIBUTED_SAMPLERS[0], call)
        sampler_code = f"{ctx.code(sampler)}({ctx.code(dataset)}{'' if shuffled else ', shuffle=False'})"
        if shuffle is not MISSING and shuffle is not None and not shuffled and ctx.values.value_of(shuffle) is not False:
            sampler_code = f"{ctx.code(sampler)}({ctx.code(dataset)}, shuffle={ctx.code(shuffle)})"
        new = remove_keyword(call, "shuffle") if ctx.keyword_arg(call, "shuffle") is not None else call
        new = set_keyword(new, "sampler", expression(sampler_code))
        return self.fix("Pass `sampler=DistributedSampler(dataset)`", Edit(call, new), imports=imports)


def _after_process_group(ctx: FileContext, node: cst.CSTNode) -> bool:
    """An ``init_process_group`` runs before ``node`` whenever ``node`` runs: earlier in the
    same function, or at module level above it (DeepSpeed's engine creates the group inside
    ``initialize``, after the loaders a script builds for it), and under no ``if`` that ``node``
    is not under too (baby-llama2-chinese: ``if ddp: init_process_group(...)``, the loader
    built for both cases, where a plain ``python sft.py`` would raise in the sampler)."""
    from advisor.facts.distributed import INIT_PROCESS_GROUP

    scope = ctx.enclosing(node, cst.FunctionDef)
    line = ctx.position(node)[0]
    for init in ctx.calls(INIT_PROCESS_GROUP):
        init_scope = ctx.enclosing(init, cst.FunctionDef)
        if ctx.position(init)[0] >= line or not (init_scope is scope or init_scope is None):
            continue
        conditions = []
        for ancestor in ctx.ancestors(init):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(ancestor, (cst.If, cst.Try, cst.While, cst.For)):
                conditions.append(ancestor)
        if all(ctx.is_descendant(node, condition) for condition in conditions):
            return True
    return False


class GlooOnCuda(Rule):
    code = "ADV805"
    name = "gloo-on-cuda"
    summary = "`init_process_group(\"gloo\")` in a CUDA training script: NCCL is the backend for GPU collectives."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        Gloo all-reduces CUDA tensors by copying them to host memory and back; NCCL runs
        the collectives on the GPUs over NVLink / InfiniBand. For DDP on GPUs PyTorch's
        documentation says to use NCCL; with Gloo the gradient all-reduce of every step
        goes through the CPU and the PCIe bus.
    """
    example = """
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        model = DDP(model.to(rank), device_ids=[rank])
    """
    use_instead = """
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        model = DDP(model.to(rank), device_ids=[rank])
    """
    silent_when = """
        - the backend follows the machine (`"nccl" if torch.cuda.is_available() else "gloo"`,
          a variable set in more than one place, `"gloo"` under an `if` about the platform or
          the device, another `init_process_group` with another backend) or cannot be read;
        - the file does not train on CUDA; or the group is set up by a function only this file
          calls, in a file that trains nothing (a `__main__` self-test of a data module that
          prints what each rank's sampler loads).

        The fix writes `"cpu:gloo,cuda:nccl"` (torch 2.0 or later): NCCL for CUDA tensors,
        Gloo still for the collectives a script runs on CPU tensors (an `all_reduce` of a metric
        kept on the CPU, which plain `"nccl"` would fail on). Where the script falls back to the
        CPU when there is no GPU, it writes `"cpu:gloo,cuda:nccl" if torch.cuda.is_available()
        else "gloo"`, following it. Unsafe: the process group's communicator changes.
    """
    valid = [
        Valid(
            """
            import torch
            import torch.distributed as dist
            import torch.multiprocessing as mp
            from torch.utils.data import DataLoader, DistributedSampler

            def setup(rank, world_size):
                dist.init_process_group("gloo", rank=rank, world_size=world_size)

            def worker(rank, world_size):
                setup(rank, world_size)
                torch.cuda.set_device(rank)
                sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
                for batch in DataLoader(dataset, batch_size=4, sampler=sampler):
                    print(rank, batch["path"])

            if __name__ == "__main__":
                mp.spawn(worker, args=(2,), nprocs=2)
            """,
            note="a data module's self-test, which trains nothing (SRe2L's `multi_gpu/data_utils.py`)",
        ),
        Valid(
            """
            import torch
            import torch.distributed as dist
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
            model = model.cuda()
            """
        ),
        Valid(
            """
            import torch.distributed as dist
            dist.init_process_group("gloo")
            model = model.to("cpu")
            """,
            note="CPU training",
        ),
        Valid(
            """
            import platform
            import torch
            from torch.distributed import init_process_group
            if platform.system() == "Windows":
                init_process_group(backend="gloo", rank=rank, world_size=world_size)
            else:
                init_process_group(backend="nccl", rank=rank, world_size=world_size)
            torch.cuda.set_device(rank)
            """,
            note="gloo only where NCCL does not exist",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            import torch.distributed as dist
            dist.init_process_group("gloo")
            device = "cuda" if torch.cuda.is_available() else "cpu"
            model = model.to(device)
            """,
            fixed="""
            import torch
            import torch.distributed as dist
            dist.init_process_group("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
            device = "cuda" if torch.cuda.is_available() else "cpu"
            model = model.to(device)
            """,
            note="the script falls back to the CPU: the backend follows it",
        ),
        Invalid(
            """
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)
            model = DDP(model.to(rank), device_ids=[rank])
            """,
            fixed="""
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            dist.init_process_group(backend="cpu:gloo,cuda:nccl", rank=rank, world_size=world_size)
            model = DDP(model.to(rank), device_ids=[rank])
            """,
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.facts.devices.gpu.yes:
            return
        for backend in ctx.facts.distributed.backends:
            if backend.value != "gloo" or backend.follows_availability or backend.expr is None:
                continue
            if _group_for_a_self_test(ctx, backend.call):
                continue
            fix = None
            if isinstance(backend.expr, cst.SimpleString):
                nccl = backend.expr.with_changes(value=backend.expr.value.replace("gloo", "cpu:gloo,cuda:nccl"))
                if ctx.facts.devices.always_cuda:
                    fix = self.fix(
                        'Use NCCL for CUDA tensors: `"cpu:gloo,cuda:nccl"`', Edit(backend.expr, nccl), requires=(("torch", "2.0"),)
                    )
                else:
                    # The script falls back to the CPU, where NCCL does not exist: follow its choice.
                    available, imports = ctx.reference("torch.cuda.is_available", backend.call)
                    choice = expression(f"{ctx.code(nccl)} if {ctx.code(available)}() else {ctx.code(backend.expr)}")
                    fix = self.fix(
                        'Use NCCL for CUDA tensors where CUDA is available', Edit(backend.expr, choice), imports=imports,
                        requires=(("torch", "2.0"),),
                    )
            yield self.report(
                backend.expr,
                'The "gloo" backend all-reduces CUDA tensors through host memory on every step; '
                'use "nccl" for GPU training ("cpu:gloo,cuda:nccl" if the script also reduces CPU tensors)',
                fix,
            )


def _group_for_a_self_test(ctx: FileContext, call: cst.Call) -> bool:
    """The process group is set up by a function only this file calls, in a file that trains
    nothing and hands no training elsewhere (SRe2L's ``multi_gpu/data_utils.py``: a ``__main__``
    test that prints the paths each rank's sampler loads, over Gloo)."""
    if ctx.facts.frameworks.sites or file_trains(ctx):
        return False
    function = ctx.enclosing(call, cst.FunctionDef)
    if function is None:
        return False
    callers = calls_of(ctx, function)
    return bool(callers) and all(owner is ctx for owner, _ in callers)


class SamplerWithoutSetEpoch(Rule):
    code = "ADV806"
    name = "sampler-without-set-epoch"
    summary = "A shuffled `DistributedSampler` without `set_epoch(epoch)`: the same order every epoch."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        `DistributedSampler` shuffles with a generator seeded by `seed + epoch`, and the
        epoch only changes when the script calls `sampler.set_epoch(epoch)`. Without it,
        every epoch draws the same permutation: each rank sees the same samples in the
        same order, and the batches are the same every epoch, which usually trains
        worse than a fresh shuffle (PyTorch's documentation: "calling the `set_epoch()`
        method at the beginning of each epoch before creating the DataLoader iterator is
        necessary to make shuffling work properly across multiple epochs").
    """
    example = """
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        for epoch in range(epochs):
            for x, y in loader:
                ...
    """
    use_instead = """
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for x, y in loader:
                ...
    """
    silent_when = """
        - the sampler does not shuffle (`shuffle=False`) or its `shuffle` cannot be read;
        - the file calls `set_epoch` anywhere;
        - the file does not iterate the sampler's loader in a loop over epochs (a factory that
          returns the loader, an evaluation loader, a loader drawn from forever): the loop that
          should call `set_epoch` is not here to judge;
        - the sampler or its loader is handed to a function of a library, or of a project
          module that mentions `set_epoch`: it may be called there.

        The fix inserts `<sampler>.set_epoch(<epoch>)` at the top of the loop over epochs
        around the loop over the loader (`<loader>.sampler.set_epoch(...)` where the sampler's
        name is not bound there); unsafe, since the data order changes from the second epoch
        on. It is advice where the sampler is a `DistributedSampler` on one path only
        (`RandomSampler(...) if local_rank == -1 else DistributedSampler(...)`, a sampler made
        under an `if`): a `RandomSampler` has no `set_epoch`; and where the loop around is not
        a count of epochs (`for data_name in self.data`) or builds the sampler itself: there is
        no epoch number to pass, or no sampler yet at the top of the loop.
    """
    valid = [
        Valid(
            """
            from torch.utils.data import DataLoader, DistributedSampler
            sampler = DistributedSampler(dataset, shuffle=False)
            loader = DataLoader(dataset, batch_size=32, sampler=sampler)
            for epoch in range(10):
                for x, y in loader:
                    train_step(x, y)
            """,
            note="no shuffle",
        ),
        Valid(
            """
            from torch.utils.data import DataLoader, DistributedSampler
            loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
            for epoch in range(10):
                loader.sampler.set_epoch(epoch)
                for x, y in loader:
                    train_step(x, y)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader, DistributedSampler
            def build_loader(dataset, batch_size):
                sampler = DistributedSampler(dataset, shuffle=True)
                return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
            """,
            note="a factory: the epoch loop, and its set_epoch, are in the module that calls it",
        ),
        Valid(
            """
            from torch.utils.data import DataLoader, DistributedSampler
            from trainer_lib import train_one_epoch
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, batch_size=32, sampler=sampler)
            for epoch in range(10):
                train_one_epoch(model, loader, epoch)
            """,
            note="handed to a library function, which may call set_epoch",
        ),
    ]
    invalid = [
        Invalid(
            """
            from torch.utils.data import DataLoader, DistributedSampler
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, batch_size=32, sampler=sampler)
            for epoch in range(10):
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            from torch.utils.data import DataLoader, DistributedSampler
            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, batch_size=32, sampler=sampler)
            for epoch in range(10):
                sampler.set_epoch(epoch)
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch
            train_loader = torch.utils.data.DataLoader(
                train_set, batch_size=64, sampler=torch.utils.data.distributed.DistributedSampler(train_set)
            )
            for epoch in range(start_epoch, epochs):
                model.train()
                for images, target in train_loader:
                    train_step(images, target)
            """,
            fixed="""
            import torch
            train_loader = torch.utils.data.DataLoader(
                train_set, batch_size=64, sampler=torch.utils.data.distributed.DistributedSampler(train_set)
            )
            for epoch in range(start_epoch, epochs):
                train_loader.sampler.set_epoch(epoch)
                model.train()
                for images, target in train_loader:
                    train_step(images, target)
            """,
            note="an unnamed sampler: through the loader",
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader, DistributedSampler, RandomSampler
            train_sampler = RandomSampler(train_set) if args.local_rank == -1 else DistributedSampler(train_set)
            train_loader = DataLoader(train_set, batch_size=64, sampler=train_sampler)
            for epoch in range(epochs):
                for batch in train_loader:
                    loss = model(**batch).loss
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed=None,
            note="a RandomSampler on one path has no set_epoch: advice",
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader, DistributedSampler
            while global_step < total_step:
                for data_name in data_names:
                    train_data = load_data(data_name)
                    train_sample = DistributedSampler(train_data)
                    train_loader = DataLoader(train_data, sampler=train_sample, batch_size=64)
                    for batch in train_loader:
                        loss = model(**batch).loss
                        loss.backward()
                        optimizer.step()
                        optimizer.zero_grad()
            """,
            fixed=None,
            note="a loop over data set names that builds the sampler: no epoch to pass, no sampler at its top (ProphetNet's GENIE): advice",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        facts = ctx.facts.distributed
        if not facts.distributed_samplers or facts.sets_epoch:
            return
        for sampler in facts.distributed_samplers:
            shuffle = ctx.argument(sampler, "shuffle", 3)
            if shuffle is None or (shuffle is not MISSING and ctx.values.value_of(shuffle) is not True):
                continue
            sampler_name, loader_name, loader = self._names(ctx, sampler)
            # The premise is the epoch loop: where the loader is only built here (a factory
            # that returns it), the loop that would call set_epoch is elsewhere.
            found = self._epoch_loop(ctx, loader) if loader is not None else None
            if found is None or not ctx.facts.loaders.is_training(loader):
                continue
            epoch_loop, iterated = found
            if any(name and facts.handed_over(name, sampler) for name in (sampler_name, loader_name)):
                continue
            yield self.report(
                sampler,
                "Shuffled `DistributedSampler` without `set_epoch(epoch)`: it draws the same permutation "
                "every epoch; call `sampler.set_epoch(epoch)` at the start of each epoch",
                self._fix(ctx, sampler, sampler_name, iterated, epoch_loop),
            )

    @staticmethod
    def _always_distributed(ctx: FileContext, sampler: cst.Call, sampler_name: str | None) -> bool:
        """The loader's sampler is this DistributedSampler on every path: assigned directly (not
        one branch of a conditional), its name bound once, the loader built once."""
        parent = ctx.parent.get(sampler)
        if isinstance(parent, cst.Arg):
            parent = ctx.parent.get(parent)
            return isinstance(parent, cst.Call)  # ``DataLoader(..., sampler=DistributedSampler(...))``
        statement_ = ctx.statement_of(sampler)
        if not (isinstance(statement_, cst.SimpleStatementLine) and isinstance(statement_.body[0], cst.Assign)):
            return False
        if statement_.body[0].value is not sampler or ctx.enclosing(statement_, cst.If) is not None:
            return False
        return not (sampler_name and "." not in sampler_name and len(ctx.lookup(sampler_name, sampler)) != 1)

    @staticmethod
    def _reaches(ctx: FileContext, name: str, loop: cst.For) -> bool:
        """``name`` is bound where ``loop`` runs: in its function, or at module level."""
        return "." not in name and bool(ctx.lookup(name, loop))

    @staticmethod
    def _epoch_loop(ctx: FileContext, loader: cst.Call) -> tuple[cst.For, str] | None:
        """The ``for epoch in ...`` around a loop over this loader (and only this one), in this
        file, with the loader as the loop spells it."""
        loaders = ctx.facts.loaders
        for loop in ctx.nodes(cst.For):
            iterated, _ = loaders.unwrap(loop.iter)
            name = dotted_name(iterated)
            if name is None or loaders.behind(iterated) != [loader]:
                continue
            outer = ctx.enclosing(loop, cst.For)
            if isinstance(outer, cst.For) and isinstance(outer.target, cst.Name):
                return outer, name
        return None

    @staticmethod
    def _names(ctx: FileContext, sampler: cst.Call) -> tuple[str | None, str | None, cst.Call | None]:
        """The name the sampler is bound to, and the name and call of the loader it is passed to."""
        sampler_name = loader_name = None
        loader = None
        statement_ = ctx.statement_of(sampler)
        if isinstance(statement_, cst.SimpleStatementLine) and isinstance(statement_.body[0], cst.Assign):
            assign = statement_.body[0]
            value = assign.value
            # ``RandomSampler(ds) if local_rank == -1 else DistributedSampler(ds)`` names it too.
            chosen = value is sampler or (isinstance(value, cst.IfExp) and sampler in (value.body, value.orelse))
            if chosen and len(assign.targets) == 1:
                sampler_name = dotted_name(assign.targets[0].target)
        for call in ctx.calls(DATALOADER):
            value = ctx.argument(call, "sampler", 2)
            if value is sampler or (sampler_name and isinstance(value, cst.BaseExpression) and dotted_name(value) == sampler_name):
                outer = ctx.statement_of(call)
                if isinstance(outer, cst.SimpleStatementLine) and isinstance(outer.body[0], cst.Assign):
                    assign = outer.body[0]
                    if assign.value is call and len(assign.targets) == 1:
                        loader_name = dotted_name(assign.targets[0].target)
                        loader = call
        return sampler_name, loader_name, loader

    def _fix(self, ctx: FileContext, sampler: cst.Call, sampler_name: str | None, loader_name: str, epoch_loop: cst.For):
        """``loader_name``: the loader as the loop over it spells it."""
        body = epoch_loop.body
        if not isinstance(body, cst.IndentedBlock) or not body.body or not isinstance(epoch_loop.target, cst.Name):
            return None
        if not self._always_distributed(ctx, sampler, sampler_name):
            return None  # ``RandomSampler(...) if local_rank == -1 else DistributedSampler(...)``: no set_epoch there
        if ctx.is_descendant(sampler, epoch_loop) or not _counts(ctx, epoch_loop.iter):
            # ProphetNet's GENIE builds the sampler in the loop over data set names: the top of
            # the loop is before the sampler exists, and a name is no epoch.
            return None
        if sampler_name and self._reaches(ctx, sampler_name, epoch_loop):
            receiver = sampler_name
        else:
            receiver = f"{loader_name}.sampler"
        new = statement(f"{receiver}.set_epoch({epoch_loop.target.value})")
        first = body.body[0]
        return self.fix(
            f"Call `{receiver}.set_epoch({epoch_loop.target.value})` at the start of each epoch",
            Edit(first, cst.FlattenSentinel([new, first])),
        )


def _counts(ctx: FileContext, iterable: cst.BaseExpression) -> bool:
    """``range(...)``, also behind a progress bar (``tqdm(range(...))``, ``trange(...)``): the
    loop's target is a number."""
    while isinstance(iterable, cst.Call) and (dotted_name(iterable.func) or "").split(".")[-1] == "tqdm" and iterable.args:
        iterable = iterable.args[0].value
    return isinstance(iterable, cst.Call) and (dotted_name(iterable.func) or "").split(".")[-1] in ("range", "trange")


GB = 1e9
# A ZeRO choice is judged on model states only (weights, gradients, Adam states): activations
# come on top, so "fits" leaves half the GPU to them, and "cannot fit" means the states alone
# exceed the whole GPU.
FITS_SHARE = 0.5
LARGE_WORLD = 64  # what "any number of GPUs" means for stage 1's sharded optimizer states


class ZeroStageChoice(Rule):
    code = "ADV807"
    name = "zero-stage-choice"
    summary = "A DeepSpeed ZeRO stage or offload that does not match the model's size on the target GPUs."
    guide = "DeepSpeed ZeRO"
    why = """
        The guide's *DeepSpeed ZeRO* section: "If your model fits onto a single GPU and you
        have enough space to fit a small batch size, you don't need to use DeepSpeed as it'll
        only slow things down. If the model doesn't fit onto a single GPU or you can't fit a
        small batch, you can leverage DeepSpeed ZeRO + CPU Offload, or NVMe Offload for much
        larger models." Training with mixed precision and Adam keeps 16 bytes of model
        states per parameter (16-bit weights and gradients, fp32 master weights and two
        moments). ZeRO stage 1 shards the optimizer states over the GPUs, stage 2 the
        gradients too, stage 3 the weights too; offloading moves the optimizer step (and at
        stage 3 the weights) to the CPU, over PCIe, which is much slower than the GPU. So
        offload on a model whose states fit the GPUs without it costs speed for nothing,
        and stage 0 or 1 on a model whose states cannot fit runs out of memory.
    """
    example = """
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        args = TrainingArguments("out", deepspeed="ds_offload.json")  # stage 3, offload_optimizer: cpu
    """
    use_instead = """
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        args = TrainingArguments("out", deepspeed="ds_stage2.json")  # stage 2, no offload (or plain DDP)
    """
    silent_when = """
        - the model's size is not known from the file (a Hub id advisor knows, or a size in
          its name: `-7b`, `1.3B`);
        - the config cannot be read (`"auto"` values, a file that is not there, a path built
          at run time);
        - for "offload is not needed": the target GPU's memory is not known (`--gpu`, config
          or a local GPU), or the states without offload need more than half the GPU (the
          rest is for activations). With the number of GPUs unknown (`--gpus`), one is assumed,
          which is where sharding helps least;
        - for "cannot fit": the states fit the GPU at the config's stage on the number of GPUs
          given (unknown: on any number). With no target GPU the largest known GPU is used.
    """
    valid = [
        Valid(
            """
            from transformers import AutoModelForCausalLM
            ds = {"zero_optimization": {"stage": 2}}
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
            """,
            gpu="A100-80GB",
            note="stage 2 without offload: 7B needs 14 GB + 98 GB / N per GPU; not judged without --gpus for the offload question",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM
            ds = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf")
            """,
            gpu="A100-80GB",
            note="70B: 1.1 TB of states, offload is what makes it fit",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM
            ds = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
            model = AutoModelForCausalLM.from_pretrained(args.model)
            """,
            gpu="A100-80GB",
            note="model size unknown",
        ),
    ]
    invalid = [
        Invalid(
            """
            from transformers import AutoModelForCausalLM
            ds = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            """,
            gpu="A100-80GB",
            note="124M parameters: 2 GB of states on one GPU; offload only slows it",
        ),
        Invalid(
            """
            from transformers import AutoModelForCausalLM
            ds = {"zero_optimization": {"stage": 1}}
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-70b-hf")
            """,
            gpu="A100-80GB",
            note="70B at stage 1: 280 GB of weights and gradients on every GPU",
        ),
        Invalid(
            """
            from transformers import AutoModelForCausalLM, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf")
            args = TrainingArguments("out", deepspeed={"zero_optimization": {"stage": 0}})
            """,
            note="13B without sharding: 208 GB of states on every GPU, more than any GPU has",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        from advisor.facts.distributed import zero_bytes_per_gpu, zero_configs
        from advisor.facts.models import pretrained_sizes
        from advisor.model_sizes import describe_count

        configs = zero_configs(ctx)
        if not configs:
            return
        sizes = pretrained_sizes(ctx)
        if not sizes:
            return
        model = max((size for _, size in sizes), key=lambda size: size.parameters)
        parameters = model.parameters
        target = ctx.target
        gpus = target.gpus
        count = f"{gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "one GPU (no --gpus)"
        for config in configs:
            if config.offload_optimizer or config.offload_param:
                if not target.memory_gb or target.source == "assumed":
                    continue
                needed = zero_bytes_per_gpu(parameters, config.stage, gpus or 1, False, False)
                if needed <= FITS_SHARE * target.memory_gb * GB:
                    what = "the optimizer" + (" and the weights" if config.offload_param else "")
                    yield self.report(
                        config.at,
                        f"ZeRO offload on a model that fits: {model.model_id} ({describe_count(parameters)} parameters) "
                        f"needs about {needed / GB:.0f} GB per GPU for its model states at stage {config.stage} "
                        f"without offload on {count}, of the {target.name}'s {target.memory_gb:g} GB; offloading "
                        f"{what} ({config.where}) moves every optimizer step to the CPU over PCIe: remove it "
                        "(guide: DeepSpeed ZeRO)",
                    )
                continue
            if config.stage >= 2:
                continue
            memory_gb = target.memory_gb if target.memory_gb and target.source != "assumed" else None
            if memory_gb is None:
                from advisor.targets import PROFILES

                memory_gb = max(p.memory_gb or 0 for p in PROFILES.values())
            needed = zero_bytes_per_gpu(parameters, config.stage, gpus or LARGE_WORLD, False, False)
            if needed <= memory_gb * GB:
                continue
            suggestion = next(
                (
                    f"stage {stage}{' with optimizer offload' if offload else ''} "
                    f"(about {zero_bytes_per_gpu(parameters, stage, gpus or 8, offload, False) / GB:.0f} GB per GPU "
                    f"on {gpus or 8} GPUs)"
                    for stage, offload in ((2, False), (3, False), (3, True))
                    if zero_bytes_per_gpu(parameters, stage, gpus or 8, offload, False) <= FITS_SHARE * memory_gb * GB
                ),
                "stage 3 with parameter and optimizer offload",
            )
            yield self.report(
                config.at,
                f"ZeRO stage {config.stage} ({config.where}) keeps {'all model states' if config.stage == 0 else 'the weights and gradients'} "
                f"whole on every GPU: {model.model_id} ({describe_count(parameters)} parameters) needs about "
                f"{needed / GB:.0f} GB per GPU for them, more than {memory_gb:g} GB: it runs out of memory; use "
                f"{suggestion} (guide: DeepSpeed ZeRO)",
            )
