"""ADV701-ADV706: host-device synchronisation and overhead.

The HF guide has nothing on these; they come from PyTorch's *Performance Tuning Guide*
(pytorch.org/tutorials/recipes/recipes/tuning_guide.html), whose section titles the
rules cite: "Avoid unnecessary CPU-GPU synchronization", "Disable debugging APIs",
"Create tensors directly on the target device", "Disable gradient calculation for
validation or inference"; and from the ``torch.tensor`` docs ("always copies data").

Two shared models sit under the rules:

- :class:`_StepModel` tells which code runs every training step, unconditionally: where
  ``ctx.loops.step_region`` finds it (a training loop's body, a helper called from it, a
  framework's per-step hook), plus loops that hand the loss and the optimizer to a
  timm-style ``loss_scaler(loss, optimizer)`` (DeiT, MAE), which the shared loop model
  does not count as training loops. Code under an ``if`` (a ``step % log_every``
  condition, a debug flag) does not run every step, except under a bare "main process"
  test or on the branch that holds the optimizer step (``if (i + 1) % accum == 0:``
  around ``optimizer.step()`` runs every optimizer step); nor does a helper named for
  evaluation.
- :class:`TensorFacts` tells which expressions certainly hold CUDA tensors made in the step:
  the loss handed to backward, the output of a model moved to the GPU, a tensor moved
  with ``.to(device)`` / ``.cuda()``, and what torch ops, tensor methods, losses and
  arithmetic make of them. Anything else (a value from a helper of unknown return, a
  loop target, a parameter) is unknown, and unknown means silent.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterator, Sequence

import libcst as cst

from advisor.apis import DATALOADER, LIGHTNING_TRAINER
from advisor.context import MISSING, FileContext
from advisor.edits import keyword_arg, nested_block, remove_keyword, remove_statements, set_keyword
from advisor.facts.branches import before_its_loop, runs_every_step, runs_once
from advisor.facts.loaders import batch_target, target_names
from advisor.facts.models import built_by_another_framework
from advisor.facts.precision import file_trains, trains_within
from advisor.facts.tensors import MAX_DEPTH, TensorFacts, every_step_interval, reads_variable, unpacked_element
from advisor.loops import NO_GRAD, under_no_grad
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid

SYNC_GUIDE = "Avoid unnecessary CPU-GPU synchronization"
DEBUG_GUIDE = "Disable debugging APIs"
COPY_GUIDE = "torch.tensor always copies data"
DEVICE_GUIDE = "Create tensors directly on the target device"
NO_GRAD_GUIDE = "Disable gradient calculation for validation or inference"

# ``device=`` on factories, ``torch.no_grad()``, ``non_blocking=``, ``Tensor.to``: the torch 0.4 API
# (pytorch-semantic-segmentation's README asks for PyTorch 0.2.0).
TORCH_0_4 = (("torch", "0.4"),)

_LOOPS = (cst.For, cst.While)
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)

# -- ADV701 ----------------------------------------------------------------------------------
_SYNC_METHODS = ("item", "tolist", "cpu", "to")


@dataclass(frozen=True)
class _Sync:
    node: cst.CSTNode  # where to report
    what: str  # how the message names it


def _builtin(ctx: FileContext, call: cst.Call, *names: str) -> bool:
    func = call.func
    return isinstance(func, cst.Name) and func.value in names and not ctx.lookup(func.value, func)


def _string_format(call: cst.Call) -> bool:
    """``"...".format(...)``."""
    func = call.func
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value == "format"
        and isinstance(func.value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _sync_sites(ctx: FileContext, found: TensorFacts) -> Iterator[_Sync]:
    """Every place that reads a CUDA tensor back to the host, in source order."""
    sites: list[_Sync] = []
    for call in ctx.method_calls(*_SYNC_METHODS):
        assert isinstance(call.func, cst.Attribute)
        method = call.func.attr.value
        if method == "to":
            device = found.to_device(call)
            kind = ctx.values.value_of(device) if device is not None else None
            if not (isinstance(kind, str) and kind.split(":")[0] == "cpu"):
                continue
        elif method in ("item", "tolist") and call.args:
            continue
        if found.on_device(call.func.value):
            sites.append(_Sync(call, f"`{ctx.snippet(call)}`"))
    for call in ctx.nodes(cst.Call):
        if _builtin(ctx, call, "float", "int", "bool") and len(call.args) == 1 and not call.args[0].star:
            if found.on_device(call.args[0].value):
                sites.append(_Sync(call, f"`{ctx.snippet(call)}`"))
        elif _builtin(ctx, call, "print"):
            if any(arg.keyword is None and not arg.star and found.on_device(arg.value) for arg in call.args):
                sites.append(_Sync(call, f"`{ctx.snippet(call)}` of a CUDA tensor"))
        elif _string_format(call) and any(found.on_device(arg.value) for arg in call.args if not arg.star):
            sites.append(_Sync(call, "formatting a CUDA tensor with `str.format`"))
    for part in ctx.nodes(cst.FormattedStringExpression):
        if found.on_device(part.expression):
            sites.append(_Sync(part, f"formatting `{ctx.snippet(part.expression)}` in an f-string"))
    for operation in ctx.nodes(cst.BinaryOperation):
        if isinstance(operation.operator, cst.Modulo) and isinstance(
            operation.left, (cst.SimpleString, cst.ConcatenatedString)
        ):
            right = operation.right
            values = [e.value for e in right.elements] if isinstance(right, cst.Tuple) else [right]
            if any(found.on_device(v) for v in values):
                sites.append(_Sync(operation, "formatting a CUDA tensor with `%`"))
    for statement in [*ctx.nodes(cst.If), *ctx.nodes(cst.While), *ctx.nodes(cst.Assert)]:
        test = statement.test
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test = test.expression
        if found.on_device(test):
            sites.append(_Sync(test, f"branching on the CUDA tensor `{ctx.snippet(test)}`"))
    yield from sorted(sites, key=lambda s: ctx.order[s.node])


class SyncInLoop(Rule):
    code = "ADV701"
    name = "sync-in-loop"
    summary = "A CUDA tensor is read back to the host (`.item()`, `.cpu()`, `print`) every training step."
    guide = SYNC_GUIDE
    fix_applicability = Applicability.NONE
    why = """
        CUDA work is asynchronous: the CPU queues kernels and runs ahead while the GPU
        computes. Reading a value back (`loss.item()`, `.cpu()`, `.tolist()`, `float(t)`,
        `print(t)`, an f-string of a tensor, `if t > 0:`) makes the CPU wait until the GPU has
        finished everything queued so far; the GPU then idles while the CPU prepares the
        next step. PyTorch's *Performance Tuning Guide*, "Avoid unnecessary CPU-GPU
        synchronization", lists exactly these. Once per step it costs a few percent on a
        large model and much more on a small one; logging every N steps, or accumulating
        the running loss on the device (`running_loss += loss.detach()`), keeps the queue full.
    """
    example = """
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            running_loss += loss.item()
    """
    use_instead = """
        running_loss = torch.zeros((), device=device)
        for step, (x, y) in enumerate(loader):
            ...
            running_loss += loss.detach()
            if step % log_every == 0:
                print(running_loss.item() / (step + 1))
    """
    silent_when = """
        - the read-back is under an `if` (`if step % log_every == 0:`, a debug flag off by
          default; a switch the command line leaves on, `if args.log_parts:` with a default
          of `True`, runs every step and is reported), in an `except` branch, or outside the training step (epoch-level code, evaluation
          functions, a `torch.no_grad()` evaluation loop). An `if` that also holds the
          optimizer step of every optimizer of the loop (`if (i + 1) % accum_steps == 0:`
          around `optimizer.step()`) is no logging interval: code under it runs every
          optimizer step, and is reported;
        - the read feeds a check that stops training on a NaN or infinite loss:
          `if not math.isfinite(loss.item()): sys.exit(1)`, or `loss_value = loss.item()`
          then such a check of `loss_value` (DINO, DeiT, MAE), `assert torch.isfinite(loss)`,
          with `isfinite`/`isnan`/`isinf` and a body that raises, exits, breaks, continues or
          returns. Stopping on divergence needs the value every step; like a debug switch,
          it is the author's choice;
        - the tensor is not certainly a CUDA tensor made in the step: the file puts nothing on
          a GPU, the value comes from a function of unknown return, a loop target, a parameter;
        - Lightning's `self.log("loss", loss)` (no read-back) instead of `loss.item()`.

        One finding per training step: the first read-back in the step is reported, and the
        others of the same step are listed in its message ("and 2 more reads in this step:
        lines 83, 90"). The first one waits for the GPU; a later one waits again when GPU work
        was queued in between (a second forward, backward, the optimizer step), and not when
        it re-reads a value already synced. Either way, logging every N steps (or keeping the
        values on the device) removes them all.
    """
    valid = [
        Valid(
            """
            import torch
            device = torch.device("cuda")
            model = Net().to(device)
            for step, (x, y) in enumerate(loader):
                x, y = x.to(device), y.to(device)
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if step % log_every == 0:
                    print(f"step {step}: {loss.item():.4f}")
            """,
            note="logged every N steps",
        ),
        Valid(
            """
            import argparse
            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--debug", action="store_true")
            parser.add_argument("--log_every", type=int, default=1)
            args = parser.parse_args()
            model = Net().cuda()
            for step, (x, y) in enumerate(loader):
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if args.debug:
                    print(loss.item())
            """,
            note="a debug switch off by default",
        ),
        Valid(
            """
            import torch
            model = Net()
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                running_loss += loss.item()
            """,
            note="CPU-only script",
        ),
        Valid(
            """
            import torch
            if torch.cuda.is_available():
                torch.cuda.manual_seed(0)
            model = Net()
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
            """,
            note="CUDA is mentioned, but nothing is placed on it: a CPU loss",
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            for x, y in loader:
                x, y = x.cuda(), y.cuda()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                running_loss += loss.detach()
                stats = compute_stats(x)
                total += stats.item()
                count += len(x)
                print(model)
            print(running_loss.item())
            """,
            note="accumulated on the device; a helper of unknown return; epoch-level code",
        ),
        Valid(
            """
            import torch
            model = Net().cuda()

            def evaluate(model, loader):
                model.eval()
                total = 0.0
                with torch.no_grad():
                    for x, y in loader:
                        total += criterion(model(x.cuda()), y.cuda()).item()
                return total

            for epoch in range(10):
                for x, y in loader:
                    loss = criterion(model(x.cuda()), y.cuda())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                print(evaluate(model, val_loader))
            """,
            note="evaluation loop",
        ),
        Valid(
            """
            import lightning as L
            import torch.nn.functional as F

            class Model(L.LightningModule):
                def training_step(self, batch, batch_idx):
                    x, y = batch
                    loss = F.cross_entropy(self(x), y)
                    self.log("train_loss", loss)
                    return loss

            L.Trainer(accelerator="gpu").fit(Model(), loader)
            """,
            note="Lightning logs the tensor without reading it back",
        ),
        Valid(
            """
            import torch
            model = Net().to("cuda")
            for step, batch in enumerate(loader):
                loss = model(batch.to("cuda"))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                try:
                    check(loss)
                except ValueError:
                    print(loss.item())
            """,
            note="only when something goes wrong",
        ),
        Valid(
            """
            import math
            import sys
            import torch
            model = Net().cuda()
            for samples, targets in loader:
                with torch.autocast("cuda"):
                    loss = criterion(model(samples.cuda()), targets.cuda())
                loss_value = loss.item()
                if not math.isfinite(loss_value):
                    print(f"Loss is {loss_value}, stopping training")
                    sys.exit(1)
                optimizer.zero_grad()
                loss_scaler(loss, optimizer, parameters=model.parameters())
                metric_logger.update(loss=loss_value)
            """,
            note="a guard that stops on a NaN loss (DeiT, MAE): the read is its purpose",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            log_interval = 1
            model = GPT(config).to("cuda")
            for iter_num in range(max_iters):
                logits, loss = model(X, Y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if iter_num % log_interval == 0:
                    lossf = loss.item()
                    print(f"iter {iter_num}: loss {lossf:.4f}")
            """,
            note="a logging interval of 1 is every step (nanoGPT's default)",
        ),
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = Net().to(device)
            for epoch in range(10):
                running_loss = 0.0
                for inputs, labels in loader:
                    inputs, labels = inputs.to(device), labels.to(device)
                    optimizer.zero_grad()
                    outputs = model(inputs)
                    loss = criterion(outputs, labels)
                    loss.backward()
                    optimizer.step()
                    running_loss += loss.item()
                    _, predicted = outputs.max(1)
                    correct += predicted.eq(labels).sum().item()
                print(running_loss / len(loader))
            """,
            note="one finding per step, which lists the second read",
        ),
        Invalid(
            """
            import torch
            from tqdm import tqdm

            def train_step(model, batch, optimizer):
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                return loss

            model = AutoModelForCausalLM.from_pretrained("gpt2").cuda()
            for batch in tqdm(loader):
                batch = {k: v.cuda() for k, v in batch.items()}
                loss = train_step(model, batch, optimizer)
                print(f"loss {loss:.3f}")
            """,
            note="formatting a tensor reads it back too",
        ),
        Invalid(
            """
            import lightning as L
            import torch.nn.functional as F

            class Model(L.LightningModule):
                def training_step(self, batch, batch_idx):
                    x, y = batch
                    loss = F.cross_entropy(self(x), y)
                    self.log("train_loss", loss.item())
                    return loss

            L.Trainer(accelerator="gpu").fit(Model(), loader)
            """,
        ),
        Invalid(
            """
            import torch
            from accelerate import Accelerator

            accelerator = Accelerator()
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for batch in loader:
                outputs = model(**batch)
                loss = outputs.loss
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                if accelerator.is_main_process:
                    progress.set_postfix(loss=loss.detach().float().item())
            """,
            note="the main process still syncs every step",
        ),
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            model = Net().cuda()
            for i, (x, y) in enumerate(loader):
                with torch.autocast("cuda"):
                    loss = criterion(model(x.cuda()), y.cuda()) / accum_steps
                scaler.scale(loss).backward()
                if (i + 1) % accum_steps == 0:
                    scaler.unscale_(optimizer)
                    total_norm = 0.0
                    for p in model.parameters():
                        total_norm += p.grad.norm(2).item() ** 2
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
            """,
            note="the accumulation boundary is the optimizer step, not a logging interval",
        ),
        Invalid(
            """
            import os
            import torch
            import torch.distributed as dist

            def train(model, loader, optimizer):
                dist.init_process_group("nccl")
                local_rank = int(os.environ["LOCAL_RANK"])
                totals = torch.zeros(2, device=local_rank)
                for batch in loader:
                    batch = {k: v.to(local_rank) for k, v in batch.items()}
                    loss = model(**batch)["loss"]
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                    totals[0] += loss.item()
            """,
            note="NCCL runs on GPUs only; an int device is a GPU index",
        ),
        Invalid(
            """
            import fire
            import torch

            def train(epochs: int = 10, log_parts: bool = True):
                model = Net().cuda()
                for batch in loader:
                    loss, parts = model(batch.cuda())
                    if log_parts:
                        stats = {k: v.item() for k, v in parts.items()}
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()

            if __name__ == "__main__":
                fire.Fire(train)
            """,
            note="a switch the command line leaves on by default runs every step (x-transformers' `use_nextlat`)",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        found = ctx.facts.tensors
        if not found.gpu_placed:
            return
        steps = ctx.facts.steps
        by_step: dict[cst.CSTNode, list[tuple[_Sync, cst.CSTNode]]] = {}
        sites = list(_sync_sites(ctx, found))
        every = tuple(site.node for site in sites)
        for site in sites:
            step = steps.step_of(site.node, together=every)
            statement = ctx.statement_of(site.node)
            if step is None or statement is None or _stops_on_nonfinite(ctx, found, site.node):
                continue
            by_step.setdefault(step, []).append((site, statement))
        # One finding per step: the first read waits for the GPU; the others are listed in it
        # (they wait too when GPU work was queued in between, and go with the same fix).
        for reads in by_step.values():
            reads.sort(key=lambda read: _position_in_step(ctx, read[0].node))
            first, statement = reads[0]
            lines: list[int] = []
            for site, _ in reads[1:]:
                line = ctx.position(site.node)[0]
                if line not in lines and line != ctx.position(first.node)[0]:
                    lines.append(line)
            yield self.report(first.node, self._message(ctx, first, statement, lines))

    @staticmethod
    def _message(ctx: FileContext, site: _Sync, statement: cst.CSTNode, more: Sequence[int] = ()) -> str:
        accumulates = isinstance(statement, cst.SimpleStatementLine) and any(
            isinstance(small, cst.AugAssign) and ctx.is_descendant(site.node, small) for small in statement.body
        )
        interval = _interval_of_one(ctx, site.node)
        if interval is not None:
            advice = f"its logging interval `{ctx.code(interval)}` is 1: raise it, or keep the value on the device"
        elif accumulates:
            advice = "accumulate on the device (`total += loss.detach()`) and read it back every N steps"
        else:
            advice = "read it back every N steps (`if step % log_every == 0:`) or keep it on the device"
        also = ""
        if more:
            reads = "read" if len(more) == 1 else "reads"
            lines = ("line " if len(more) == 1 else "lines ") + ", ".join(map(str, more))
            also = f" (and {len(more)} more {reads} in this step: {lines})"
        return (
            f"{site.what[0].upper()}{site.what[1:]} makes the CPU wait for the GPU every training step{also}; "
            f"{advice} (guide: {SYNC_GUIDE})"
        )


def _interval_of_one(ctx: FileContext, node: cst.CSTNode) -> cst.BaseExpression | None:
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return None
        if isinstance(ancestor, cst.If):
            tests = [ancestor.test]
            while tests:
                test = tests.pop()
                if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
                    tests += [test.left, test.right]
                elif (divisor := every_step_interval(ctx, test)) is not None:
                    return divisor
    return None


def _position_in_step(ctx: FileContext, node: cst.CSTNode) -> tuple[int, int]:
    """Where a read happens in its step: at the helper call of the loop body that runs it, or itself."""
    region = ctx.loops.step_region(node)
    if region is not None and region.calls:
        return ctx.order[region.calls[0]], ctx.order[node]
    return ctx.order[node], ctx.order[node]


# What a script calls to stop when the loss is NaN or infinite (DINO, DeiT, MAE).
_FINITENESS_CHECKS = frozenset({"isfinite", "isnan", "isinf"})
_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})


def _stops_on_nonfinite(ctx: FileContext, found: TensorFacts, read: cst.CSTNode) -> bool:
    """``read`` feeds a check that stops training on a NaN or infinite value:
    ``if not math.isfinite(loss.item()): sys.exit(1)``, ``assert not torch.isnan(loss)``, or
    ``loss_value = loss.item()`` followed by such a check of ``loss_value``. The read is the
    guard's purpose, like a debug switch the author turned on."""
    for ancestor in ctx.ancestors(read):
        if isinstance(ancestor, (cst.If, cst.Assert)) and (
            read is ancestor.test or ctx.is_descendant(read, ancestor.test)
        ):
            return _finiteness_guard(ctx, ancestor, read)
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            break
    statement = ctx.statement_of(read)
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return False
    assign = statement.body[0]
    if not (
        isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)
    ):
        return False
    name = assign.targets[0].target.value
    scope = ctx.scope_of.get(statement)
    for guard in [*ctx.nodes(cst.If), *ctx.nodes(cst.Assert)]:
        if ctx.order[guard] <= ctx.order[statement] or ctx.scope_of.get(guard) is not scope:
            continue
        for use in ctx.walk(guard.test, cst.Name):
            if use.value != name or not reads_variable(ctx, use) or found.reaching(use) is not assign:
                continue
            if _finiteness_guard(ctx, guard, use):
                return True
    return False


def _called_name(call: cst.Call) -> str | None:
    """``isnan`` of ``math.isnan(x)``, ``torch.isnan(x)``, ``x.detach().isnan()``."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else None


def _finiteness_guard(ctx: FileContext, guard: cst.If | cst.Assert, read: cst.CSTNode) -> bool:
    """``guard`` tests ``read`` with ``isfinite`` / ``isnan`` / ``isinf`` and stops (asserts,
    or its body raises, exits, breaks, continues or returns)."""
    checked = any(
        _called_name(call) in _FINITENESS_CHECKS
        and (call is read or ctx.is_descendant(read, call) or ctx.is_descendant(call, read))
        for call in ctx.walk(guard.test, cst.Call)
    )
    if not checked:
        return False
    if isinstance(guard, cst.Assert):
        return True
    if isinstance(guard.body, cst.SimpleStatementSuite):  # ``if not math.isfinite(v): sys.exit(1)``
        smalls = list(guard.body.body)
    else:
        smalls = [small for line in guard.body.body if isinstance(line, cst.SimpleStatementLine) for small in line.body]
    for small in smalls:
        if isinstance(small, (cst.Raise, cst.Break, cst.Continue, cst.Return)):
            return True
        call = small.value if isinstance(small, cst.Expr) else None
        if isinstance(call, cst.Call) and (ctx.qualname(call.func) or dotted_name(call.func)) in _EXITS:
            return True
    return False


# -- ADV706 ----------------------------------------------------------------------------------
_CLOCKS = (
    "time.time", "time.perf_counter", "time.monotonic", "time.process_time", "time.time_ns", "time.perf_counter_ns",
)


class SynchronizeInLoop(Rule):
    code = "ADV706"
    name = "synchronize-in-loop"
    summary = "`torch.cuda.synchronize()` runs every training step."
    guide = SYNC_GUIDE
    fix_applicability = Applicability.NONE
    why = """
        `torch.cuda.synchronize()` blocks the CPU until every kernel queued on the GPU has
        finished. In the training loop it empties the GPU's work queue once per step: the
        GPU idles while the CPU loads the next batch and launches the next kernels. PyTorch's
        *Performance Tuning Guide* ("Avoid unnecessary CPU-GPU synchronization") asks to let
        the CPU run ahead. The default stream needs no explicit synchronisation for correct
        results. Scripts usually synchronise to time the step: time every N steps instead,
        or record `torch.cuda.Event(enable_timing=True)` pairs and read them at logging time.
    """
    example = """
        for x, y in loader:
            t0 = time.time()
            loss = model(x.cuda(), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            torch.cuda.synchronize()
            step_time = time.time() - t0
    """
    use_instead = """
        for step, (x, y) in enumerate(loader):
            loss = model(x.cuda(), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if step % log_every == 0:
                torch.cuda.synchronize()
                print((time.time() - t0) / log_every)
                t0 = time.time()
    """
    silent_when = """
        - the call is under an `if` (a logging or profiling interval, a benchmark flag), but
          not the `if` that holds the optimizer step (`if (i + 1) % accum_steps == 0:`), which
          runs every optimizer step;
        - it is outside the training step: setup, epoch-level code, evaluation, a benchmark
          loop that does not train.
    """
    valid = [
        Valid(
            """
            import time
            import torch
            for step, (x, y) in enumerate(loader):
                loss = model(x.cuda(), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if step % 100 == 0:
                    torch.cuda.synchronize()
                    print(time.time() - t0)
            torch.cuda.synchronize()
            """,
            note="every N steps; after training",
        ),
        Valid(
            """
            import torch
            model = model.cuda().eval()
            with torch.no_grad():
                for x in loader:
                    start = time.perf_counter()
                    model(x.cuda())
                    torch.cuda.synchronize()
                    latencies.append(time.perf_counter() - start)
            """,
            note="an inference benchmark: no training step",
        ),
    ]
    invalid = [
        Invalid(
            """
            import time
            import torch
            for step in range(max_steps):
                t0 = time.time()
                x, y = train_loader.next_batch()
                logits, loss = model(x.to("cuda"), y.to("cuda"))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                torch.cuda.synchronize()
                dt = time.time() - t0
            """,
            note="timing every step (build-nanogpt)",
        ),
        Invalid(
            """
            import torch

            def train_one_epoch(model, criterion, data_loader, optimizer, device, loss_scaler):
                for samples, targets in data_loader:
                    samples = samples.to(device, non_blocking=True)
                    with torch.cuda.amp.autocast():
                        loss = criterion(model(samples), targets.to(device))
                    optimizer.zero_grad()
                    loss_scaler(loss, optimizer, parameters=model.parameters())
                    torch.cuda.synchronize()
            """,
            note="DeiT: timm's loss_scaler runs backward and step",
        ),
        Invalid(
            """
            import time
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
            for step in range(num_iterations):
                t0 = time.time()
                x, y = train_loader.next_batch()
                _, loss = model(x.to(device), y.to(device))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if device == "mps":
                    torch.mps.synchronize()
                elif device == "cuda":
                    torch.cuda.synchronize()
                t1 = time.time()
            """,
            note="llm.c: the branch a GPU run takes is no interval",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        steps = ctx.facts.steps
        calls = {
            *ctx.calls("torch.cuda.synchronize", "torch.accelerator.synchronize"),
            *ctx.method_calls("synchronize"),
        }
        for call in sorted(calls, key=ctx.order.__getitem__):
            if not self._synchronizes_device(ctx, call) or steps.step_of(call) is None:
                continue
            timing = self._times_step(ctx, call)
            advice = (
                "to time the step, synchronise every N steps or use `torch.cuda.Event(enable_timing=True)`"
                if timing
                else "drop it, or synchronise only every N steps"
            )
            yield self.report(
                call,
                f"`{ctx.snippet(call)}` every training step stalls the CPU until the GPU drains its queue; "
                f"{advice} (guide: {SYNC_GUIDE})",
            )

    @staticmethod
    def _synchronizes_device(ctx: FileContext, call: cst.Call) -> bool:
        """``torch.cuda.synchronize()`` / ``torch.accelerator.synchronize()`` /
        ``torch.cuda.current_stream().synchronize()``."""
        qualname = ctx.qualname(call.func)
        if qualname in ("torch.cuda.synchronize", "torch.accelerator.synchronize"):
            return True
        func = call.func
        return (
            isinstance(func, cst.Attribute)
            and func.attr.value == "synchronize"
            and isinstance(func.value, cst.Call)
            and ctx.qualname(func.value.func) == "torch.cuda.current_stream"
        )

    @staticmethod
    def _times_step(ctx: FileContext, call: cst.Call) -> bool:
        """A clock is read right after the call, in the same block (``t1 = time.time()``)."""
        statement = ctx.statement_of(call)
        block = ctx.parent.get(statement) if statement is not None else None
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)) or statement not in body:
            return False
        following = body[body.index(statement) + 1 : body.index(statement) + 3]
        return any(ctx.qualname(c.func) in _CLOCKS for s in following for c in ctx.walk(s, cst.Call))


# -- ADV702 ----------------------------------------------------------------------------------
_SET_ANOMALY = ("torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly")
_DETECT_ANOMALY = ("torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly")
# Functions where anomaly detection is the point: a debugging helper, a test.
_DEBUG_FUNCTION = re.compile(r"debug|test|check|anomal|diagnos", re.I)


class AnomalyDetectionOn(Rule):
    code = "ADV702"
    name = "anomaly-detection-on"
    summary = "Autograd anomaly detection is switched on for training."
    guide = DEBUG_GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        Anomaly detection records a Python traceback for every operation of the forward
        pass and checks every gradient of the backward pass for NaN, reading it back to the
        host: training runs several times slower. PyTorch's *Performance Tuning Guide*,
        "Disable debugging APIs", asks to switch it off for regular training runs. It does
        not change what is computed, so removing it gives the same results.
    """
    example = """
        torch.autograd.set_detect_anomaly(True)
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
    """
    use_instead = """
        if args.debug:
            torch.autograd.set_detect_anomaly(True)
    """
    silent_when = """
        - the switch is under an `if` (a `--debug` flag), or in a function named for
          debugging or testing;
        - its argument is not certainly true (`set_detect_anomaly(args.detect_anomaly)` with
          an unknown or false value), or it switches detection off;
        - the file does not train (no backward pass, optimizer step or `Trainer.fit`).
    """
    valid = [
        Valid(
            """
            import torch
            if args.debug:
                torch.autograd.set_detect_anomaly(True)
            loss.backward()
            optimizer.step()
            """,
            note="a debug switch",
        ),
        Valid(
            """
            import torch
            torch.autograd.set_detect_anomaly(False)
            torch.autograd.set_detect_anomaly(args.detect_anomaly)
            loss.backward()
            optimizer.step()
            """,
            note="switched off; unknown value",
        ),
        Valid(
            """
            import torch

            def debug_nan(model, batch):
                with torch.autograd.detect_anomaly():
                    model(batch).sum().backward()
            """,
            note="a debugging helper",
        ),
        Valid(
            """
            import torch
            torch.autograd.set_detect_anomaly(True)
            with torch.no_grad():
                print(model(x))
            """,
            note="the file does not train",
        ),
        Valid(
            """
            import lightning as L
            trainer = L.Trainer(detect_anomaly=args.debug)
            trainer.fit(model)
            """,
            note="a command-line switch",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch

            torch.autograd.set_detect_anomaly(True)  # find the NaN
            model = Net()

            def main():
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()

            if __name__ == "__main__":
                main()
            """,
            fixed="""
            import torch
            model = Net()

            def main():
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()

            if __name__ == "__main__":
                main()
            """,
        ),
        Invalid(
            """
            import torch

            def train(model, loader, optimizer):
                for x, y in loader:
                    # forward
                    with torch.autograd.detect_anomaly(check_nan=True):
                        loss = criterion(model(x), y)
                        # backward
                        loss.backward()
                    optimizer.step()
            """,
            fixed="""
            import torch

            def train(model, loader, optimizer):
                for x, y in loader:
                    # forward
                    loss = criterion(model(x), y)
                    # backward
                    loss.backward()
                    optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch

            def main():
                with torch.autograd.set_detect_anomaly(True), torch.autocast("cuda"):
                    train(model)
                torch.autograd.set_detect_anomaly(mode=True)

            def train(model):
                loss.backward()
                optimizer.step()
            """,
            fixed="""
            import torch

            def main():
                with torch.autocast("cuda"):
                    train(model)

            def train(model):
                loss.backward()
                optimizer.step()
            """,
            count=2,
        ),
        Invalid(
            """
            import pytorch_lightning as pl
            trainer = pl.Trainer(max_epochs=3, detect_anomaly=True)
            trainer.fit(model, datamodule=dm)
            """,
            fixed="""
            import pytorch_lightning as pl
            trainer = pl.Trainer(max_epochs=3)
            trainer.fit(model, datamodule=dm)
            """,
        ),
        Invalid(
            """
            import torch
            DETECT_ANOMALY = True
            torch.autograd.set_detect_anomaly(DETECT_ANOMALY)
            loss.backward()
            optimizer.step()
            """,
            note="a constant that is on: advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        trains = file_trains(ctx) or bool(ctx.method_calls("fit"))
        if not trains:
            return
        for call in ctx.calls(*_SET_ANOMALY, *_DETECT_ANOMALY):
            if self._deliberate(ctx, call):
                continue
            item = ctx.parent.get(call)
            if isinstance(item, cst.WithItem):
                finding = self._context_manager(ctx, call, item)
            else:
                finding = self._switch(ctx, call)
            if finding is not None:
                yield finding
        for call in ctx.calls(LIGHTNING_TRAINER):
            argument = ctx.argument(call, "detect_anomaly")
            if argument is None or argument is MISSING or self._deliberate(ctx, call):
                continue
            value = ctx.values.resolve(argument)
            if value is None or value.value is not True:
                continue
            fix = None
            if value.origin == "literal" and ctx.keyword_arg(call, "detect_anomaly") is not None:
                fix = self.fix("Remove `detect_anomaly=True`", Edit(call, remove_keyword(call, "detect_anomaly")))
            yield self.report(
                argument,
                f"Lightning `Trainer(detect_anomaly=True)` runs autograd anomaly detection on every step, "
                f"several times slower; keep it for debugging runs (guide: {DEBUG_GUIDE})",
                fix,
            )

    def _deliberate(self, ctx: FileContext, call: cst.Call) -> bool:
        """Under an ``if`` (other than the ``__main__`` guard), or in a debugging / test function."""
        for ancestor in ctx.ancestors(call):
            if isinstance(ancestor, (cst.If, cst.IfExp)) and ancestor not in ctx.main_guards:
                return True
            if isinstance(ancestor, cst.FunctionDef) and _DEBUG_FUNCTION.search(ancestor.name.value):
                return True
        return False

    def _switch(self, ctx: FileContext, call: cst.Call) -> Finding | None:
        if ctx.qualname(call.func) not in _SET_ANOMALY:
            return None  # ``detect_anomaly()`` outside ``with`` does nothing
        mode = ctx.argument(call, "mode", 0)
        if mode is None or mode is MISSING:
            return None
        value = ctx.values.resolve(mode)
        if value is None or value.value is not True:
            return None
        statement = ctx.parent.get(call)
        fix = None
        if isinstance(statement, cst.Expr) and value.origin == "literal":
            fix = self.fix("Remove the call", *remove_statements(ctx, [statement]))
        how = "" if value.origin == "literal" else f" (`{ctx.snippet(mode)}` is true)"
        return self.report(
            call,
            f"`{ctx.snippet(call.func)}(True)`{how} slows every training step several times over: "
            f"switch anomaly detection on only to debug (guide: {DEBUG_GUIDE})",
            fix,
        )

    def _context_manager(self, ctx: FileContext, call: cst.Call, item: cst.WithItem) -> Finding | None:
        if ctx.qualname(call.func) in _SET_ANOMALY:
            mode = ctx.argument(call, "mode", 0)
            value = ctx.values.resolve(mode) if isinstance(mode, cst.BaseExpression) else None
            if value is None or value.value is not True:
                return None
        statement = ctx.parent.get(item)
        fix = None
        if isinstance(statement, cst.With) and item.asname is None:
            edit = _without_item(statement, item)
            if edit is not None:
                fix = self.fix("Remove the anomaly-detection context", edit)
        return self.report(
            call,
            f"`with {ctx.snippet(call.func)}(...)` slows every training step several times over: "
            f"switch anomaly detection on only to debug (guide: {DEBUG_GUIDE})",
            fix,
        )


def _without_item(statement: cst.With, item: cst.WithItem) -> Edit | None:
    """``statement`` without ``item``: the other items kept, or the body in its place."""
    items = [i for i in statement.items if i is not item]
    if items:
        if statement.items[-1] is item:
            items[-1] = items[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return Edit(statement, statement.with_changes(items=items))
    body = statement.body
    if isinstance(body, cst.SimpleStatementSuite):
        line = cst.SimpleStatementLine(body=body.body, leading_lines=statement.leading_lines)
        return Edit(statement, line)
    if not isinstance(body, cst.IndentedBlock) or any(line.comment for line in body.footer):
        return None
    statements = list(body.body)
    leading = list(statement.leading_lines)
    if body.header.comment is not None:
        leading.append(cst.EmptyLine(comment=body.header.comment))
    statements[0] = statements[0].with_changes(leading_lines=[*leading, *statements[0].leading_lines])
    return Edit(statement, cst.FlattenSentinel(statements))


# -- ADV704 ----------------------------------------------------------------------------------
# Factories whose values do not depend on the device: creating them on the GPU gives the same tensor.
_EXACT_FACTORIES = ("zeros", "ones", "empty", "full", "eye", "arange")
# Random factories draw from the device's own generator: the same seed gives other numbers.
_RANDOM_FACTORIES = ("rand", "randn", "randint", "randperm")
# Float sequences may round differently on the GPU.
_SEQUENCE_FACTORIES = ("linspace", "logspace")
# Arguments that make the host tensor deliberate, or that the moved tensor would not keep.
_HOST_ONLY_ARGUMENTS = ("device", "out", "pin_memory", "requires_grad", "generator")
# Filling with 0/1 is exact in every dtype: a dtype of ``.to()`` can move into the factory.
_CONSTANT_FACTORIES = ("zeros", "ones", "empty", "eye")
# Conversions that give the same values wherever the tensor lives: moving the tensor before or
# after them is the same.
_MOVABLE_CONVERSIONS = frozenset({
    "long", "float", "int", "bool", "half", "double", "bfloat16", "short", "byte", "view", "reshape",
    "unsqueeze", "squeeze", "flatten", "t", "contiguous",
})


def _replaced(expr: cst.BaseExpression, old: cst.CSTNode, new: cst.CSTNode) -> cst.BaseExpression:
    """``expr`` with its node ``old`` replaced by ``new``."""
    from advisor.edits import ReplaceNodes

    return expr.visit(ReplaceNodes({old: new}))  # type: ignore[return-value]


class HostAllocThenCopy(Rule):
    code = "ADV704"
    name = "host-alloc-then-copy"
    summary = "A new tensor is created on the CPU and then copied to the GPU (`torch.zeros(n).cuda()`)."
    guide = DEVICE_GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        `torch.zeros(n).cuda()` allocates and fills the tensor in host memory, then copies
        it to the GPU, synchronously for pageable memory. `torch.zeros(n, device="cuda")`
        creates it on the GPU directly. PyTorch's *Performance Tuning Guide*, "Create tensors
        directly on the target device", recommends it for every factory that takes
        `device=`. In a model's `forward` or the training loop this runs every step.
    """
    example = """
        mask = torch.ones(seq_len, seq_len).to(device).tril()
        positions = torch.arange(seq_len).cuda()
    """
    use_instead = """
        mask = torch.ones(seq_len, seq_len, device=device).tril()
        positions = torch.arange(seq_len, device="cuda")
    """
    silent_when = """
        - the factory already gets `device=`, `out=`, `pin_memory=`, `requires_grad=` (the
          moved tensor would not be a leaf) or a CPU `generator=`;
        - the `.to()` argument is not visibly a device (`.to(torch.float16)`, `.to(other)`),
          or resolves to the CPU. `.to(z)` of a tensor the function is given (read there as
          `z.shape`, `z.view(...)`: taming-transformers' quantizer) takes its device and
          dtype, and is reported: the fix passes `device=z.device, dtype=z.dtype`;
        - something happens between the factory and the copy (`torch.ones(n).tril().cuda()`),
          other than elementwise math with Python numbers (`torch.exp(-math.log(p) *
          torch.arange(half) / half).to(t.device)`, reported with an unsafe fix: the math then
          runs on the GPU and may round differently);
        - the device is a parameter that defaults to `None` and that no call of its function
          or class in the file passes (an attention layer building its rotary embedding
          without a device): `.to(None)` copies nothing;
        - a script shows no CUDA device at all (a file that only defines modules is checked:
          its `forward` runs wherever the model is). An NCCL process group shows one: NCCL
          only runs on CUDA devices. `.to(t.device)` of a tensor the function is given counts
          as the GPU only in a file that trains there or whose importers do, and never in a
          data collator (a `collate_fn`, a `__call__` of a `...Collator` class, a function only
          they call): it batches the data set's CPU tensors.

        The fix is safe for `zeros`, `ones`, `empty`, `full`, `eye` and `arange` without a
        step; for random factories (`rand`, `randn`, `randint`, `randperm`) it is unsafe: the
        GPU generator gives other numbers for the same seed, and where the program seeds torch
        (`torch.manual_seed`, `seed_everything`, `set_seed`, here or in a file that runs with
        this one) it is withheld: reproducible runs are what seeding asks for. It is withheld
        too where the draw is made once (module level, a smoke test, a probe at start-up: not
        in a `forward`, a training step, or a function of the file one of them calls): one
        copy saved is not worth other numbers.
        `linspace`/`logspace` and a stepped `arange` may round differently, so they are unsafe too.
        Any factory's fix is withheld where the code is seen to run once: a module's
        `__init__` (a KV cache), a function that sets up the run's processes
        (`init_distributed`, `setup_ddp`), exports the model (the dummy input of
        `torch.onnx.export`) or hooks its layers to measure it (thop's `profile`, a FLOPs
        counter: one dummy input per model), a script's top level outside a loop, or a lazy
        initialisation (an optimizer's `if len(state) == 0:`, `if key not in self.cache:`
        that fills the cache, `if not self.initialized:` where a method sets the flag,
        `if self.x is None:` that assigns it, or a function called only under one), a data
        set's own methods other than those serving items, called from its `__init__` (a
        `download()` that parses raw records once, loop and all), or once a
        call of a decoding function (`generate`, a beam search) before its decoding loop (a
        token buffer), unless the code is seen to run every training step. A helper
        with no loop of its own keeps the fix: a `forward` in another file may call it every step.
    """
    valid = [
        Valid(
            """
            import torch
            device = torch.device("cuda")
            y_test = torch.empty(0).to(device)
            y_pred = torch.empty((0, 10)).to(device)
            for x, y in loader:
                y_test = torch.cat([y_test, y.to(device)], dim=0)
            """,
            note="tensors with no elements: nothing is filled or copied (saint's accumulators)",
        ),
        Valid(
            """
            import torch
            x = torch.zeros(4, 4, device="cuda")
            y = torch.zeros(4, 4).to(torch.float16)
            z = torch.zeros(4, 4).to(other)
            w = torch.zeros(4, 4, pin_memory=True).cuda(non_blocking=True)
            v = torch.zeros(4, 4, requires_grad=True).cuda()
            u = torch.randn(4, generator=g).cuda()
            t = torch.zeros(4).to("cpu")
            """,
            note="already on the device; dtype or tensor targets; deliberate host tensors; CPU",
        ),
        Valid(
            """
            import torch
            model = Net().cuda()

            def padding(n, like):
                return torch.zeros(n).to(like)
            """,
            note="`.to(like)` of a parameter the function never reads as a tensor: a device, a dtype or a tensor",
        ),
        Valid(
            """
            import torch
            model = Net().cuda()

            def padding(inputs, pad_id, cutoff):
                tokens = torch.ones(len(inputs), cutoff).long().to(inputs[0].device) * pad_id
                for i, toks in enumerate(inputs):
                    tokens[i, -len(toks):] = toks
                return tokens

            class DataCollatorForSupervisedDataset:
                def __call__(self, instances):
                    return dict(input_ids=padding([i["input_ids"] for i in instances], 0, 256))
            """,
            note="a helper only a data collator calls: it batches the data set's CPU tensors in the loader (RRHF)",
        ),
        Valid(
            """
            import torch
            mask = torch.ones(8, 8).tril().cuda()
            data = torch.tensor([1, 2, 3]).cuda()
            """,
            note="the copied tensor is not the fresh one; data from a Python list",
        ),
        Valid(
            """
            import torch
            from torch import nn

            class RotaryEmbedding(nn.Module):
                def __init__(self, dim, base=10000, device=None):
                    super().__init__()
                    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float().to(device) / dim))
                    self.register_buffer("inv_freq", inv_freq)

            class Attention(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.rotary = RotaryEmbedding(dim)

            model = Attention(64).cuda()
            """,
            note="`device=None` that no caller passes: `.to(None)` copies nothing (yarn's, GaLore's rotary embeddings)",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class Embedding(nn.Module):
                def forward(self, t, weights):
                    freqs = torch.exp(weights * torch.arange(64, dtype=torch.float32)).to(t.device)
                    return t[:, None] * freqs[None]

            model = Embedding().cuda()
            """,
            note="the math meets another tensor (`weights`), which may be on the host",
        ),
    ]
    invalid = [
        Invalid(
            """
            import math
            import torch
            import torch.nn as nn

            class TimestepEmbedder(nn.Module):
                def timestep_embedding(self, t, dim, max_period=10000):
                    half = dim // 2
                    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half).to(device=t.device)
                    return torch.cat([torch.cos(t[:, None] * freqs), torch.sin(t[:, None] * freqs)], dim=-1)

            model = TimestepEmbedder().cuda()
            """,
            fixed="""
            import math
            import torch
            import torch.nn as nn

            class TimestepEmbedder(nn.Module):
                def timestep_embedding(self, t, dim, max_period=10000):
                    half = dim // 2
                    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32, device=t.device) / half)
                    return torch.cat([torch.cos(t[:, None] * freqs), torch.sin(t[:, None] * freqs)], dim=-1)

            model = TimestepEmbedder().cuda()
            """,
            unsafe=True,
            note="DiT's timestep embedding, every forward: the frequencies made and computed on the device",
        ),
        Invalid(
            """
            import numpy as np
            import torch

            cuda = torch.cuda.is_available()
            Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
            for imgs, _ in dataloader:
                z = Tensor(np.random.normal(0, 1, (imgs.shape[0], 100)))
                loss = adversarial_loss(discriminator(generator(z)), valid)
                loss.backward()
                optimizer.step()
            """,
            note="the legacy typed constructor copies a NumPy array to the GPU every step (advice only)",
        ),
        Invalid(
            """
            import torch

            class LLaMA:
                def generate(self, prompts, max_gen_len):
                    tokens = torch.zeros((len(prompts), max_gen_len)).long().cuda()
                    for cur_pos in range(1, max_gen_len):
                        logits = self.model(tokens[:, :cur_pos])
                        tokens[:, cur_pos] = logits[:, -1].argmax(-1)
                    return tokens
            """,
            note="LLaMA's `generate`: the buffer is made once a call, before the decoding loop does the work (advice only)",
        ),
        Invalid(
            """
            import torch

            def load(name, device="cuda", jit=False):
                model = torch.jit.load(name, map_location=device if jit else "cpu").eval()
                device_holder = torch.jit.trace(lambda: torch.ones([]).to(torch.device(device)), example_inputs=[])
                return model, device_holder
            """,
            note="a lambda `torch.jit.trace` runs once to record its device (OpenAI CLIP's `load`): advice only",
        ),
        Invalid(
            """
            import torch
            DEVICE = "cuda"
            for i in range(100):
                prefix = torch.ones((8, 1)).long().to(DEVICE)
                lengths = torch.arange(8).view(-1, 1).to(DEVICE)
            """,
            fixed="""
            import torch
            DEVICE = "cuda"
            for i in range(100):
                prefix = torch.ones((8, 1), device=DEVICE).long()
                lengths = torch.arange(8, device=DEVICE).view(-1, 1)
            """,
            count=2,
            note="conversions between the factory and the move stay, after it",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class VectorQuantizer(nn.Module):
                def forward(self, z):
                    z = z.permute(0, 2, 3, 1).contiguous()
                    encodings = torch.zeros(z.shape[0], self.n_e).to(z)
                    return encodings

            model = VectorQuantizer().cuda()
            """,
            fixed="""
            import torch
            import torch.nn as nn

            class VectorQuantizer(nn.Module):
                def forward(self, z):
                    z = z.permute(0, 2, 3, 1).contiguous()
                    encodings = torch.zeros(z.shape[0], self.n_e, device=z.device, dtype=z.dtype)
                    return encodings

            model = VectorQuantizer().cuda()
            """,
            note="`.to(z)` of the tensor the forward is given: its device and dtype (taming-transformers' quantizer)",
        ),
        Invalid(
            """
            import torch

            def sample(n, size, device):
                return torch.randn(n, *size).to(device)

            for step in range(steps):
                loss = model(sample(8, (3, 32, 32), "cuda")).sum()
                loss.backward()
                optimizer.step()
            """,
            fixed="""
            import torch

            def sample(n, size, device):
                return torch.randn(n, *size, device=device)

            for step in range(steps):
                loss = model(sample(8, (3, 32, 32), "cuda")).sum()
                loss.backward()
                optimizer.step()
            """,
            unsafe=True,
            note="a shape spread with `*` keeps its place before `device=`",
        ),
        Invalid(
            """
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            for tokens in batches:
                positions = torch.arange(seq_len).to(device)
                hidden = torch.zeros(batch, dim).cuda()
                ones = torch.ones(
                    batch,
                    dim,
                ).to(device, non_blocking=True)
            """,
            fixed="""
            import torch
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            for tokens in batches:
                positions = torch.arange(seq_len, device=device)
                hidden = torch.zeros(batch, dim, device="cuda")
                ones = torch.ones(
                    batch,
                    dim,
                    device=device,
                )
            """,
            count=3,
        ),
        Invalid(
            """
            import torch

            class Attention(torch.nn.Module):
                def __init__(self, max_batch, max_len, heads, dim):
                    super().__init__()
                    self.cache_k = torch.zeros(max_batch, max_len, heads, dim).cuda()
            """,
            note="made once, in `__init__`: one copy saved would not show, so the fix is left as advice (LLaMA's KV cache)",
        ),
        Invalid(
            """
            import torch
            import torch.distributed as dist

            def init_worker_distributed_environment(rank, world_size):
                dist.init_process_group("nccl", rank=rank, world_size=world_size)
                dist.all_reduce(torch.zeros(1).cuda())
            """,
            note="a warm-up all-reduce in a function that sets up the processes: made once, so the fix is left as advice (vLLM's worker)",
        ),
        Invalid(
            """
            import torch

            class Model(torch.nn.Module):
                def export(self, size, path):
                    dummy = torch.zeros(1, 3, *size).cuda()
                    torch.onnx.export(self.cuda(), dummy, path)
            """,
            note="the dummy input of a model export, made once: the fix is left as advice (retinanet-examples)",
        ),
        Invalid(
            """
            import torch

            class PersonActivity:
                def __init__(self, root, download=False):
                    self.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
                    if download:
                        self.download()

                def download(self):
                    for line in open(self.raw_file):
                        vals = [torch.zeros(len(self.tag_ids), 3).to(self.device)]

                def __getitem__(self, index):
                    return self.data[index]
            """,
            note="a data set's `download`, which its `__init__` calls to parse the raw records once: advice only (latent_ode)",
        ),
        Invalid(
            """
            import torch

            class Block(torch.nn.Module):
                def forward(self, x):
                    mask = torch.full((x.size(1), x.size(1)), float("-inf")).to(x.device, torch.float16)
                    eye = torch.eye(x.size(1)).to(x.device, dtype=torch.bfloat16)
                    return x + mask + eye
            """,
            fixed="""
            import torch

            class Block(torch.nn.Module):
                def forward(self, x):
                    mask = torch.full((x.size(1), x.size(1)), float("-inf"), device=x.device).to(torch.float16)
                    eye = torch.eye(x.size(1), device=x.device, dtype=torch.bfloat16)
                    return x + mask + eye
            """,
            count=2,
        ),
        Invalid(
            """
            import torch
            for real, _ in loader:
                noise = torch.randn(16, 100, 1, 1).cuda(0)
                loss = criterion(netD(netG(noise)), real.cuda(0))
                loss.backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            for real, _ in loader:
                noise = torch.randn(16, 100, 1, 1, device="cuda:0")
                loss = criterion(netD(netG(noise)), real.cuda(0))
                loss.backward()
                optimizer.step()
            """,
            unsafe=True,
            note="random numbers come from the GPU generator: unsafe",
        ),
        Invalid(
            """
            import torch
            noise = torch.randn(16, 100, 1, 1).cuda(0)
            """,
            note="drawn once, not every step: one copy saved is not worth other numbers (advice)",
        ),
        Invalid(
            """
            import torch
            torch.manual_seed(args.seed)
            sign_flip = torch.rand(pos_enc.size(1)).cuda()
            """,
            note="a seeded program: the fix would change every draw, so it is advice (benchmarking-gnns)",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if ctx.facts.devices.runs_without_gpu:
            return
        for copy in ctx.method_calls("cuda", "to"):
            assert isinstance(copy.func, cst.Attribute)
            factory, conversions = self._factory_behind(copy.func.value)
            qualname = (ctx.qualname(factory.func) or "") if factory is not None else ""
            kind = qualname[len("torch.") :] if qualname.startswith("torch.") else ""
            if factory is None or kind not in (*_EXACT_FACTORIES, *_RANDOM_FACTORIES, *_SEQUENCE_FACTORIES):
                yield from self._scalar_math_of_a_factory(ctx, copy)
                continue
            if any(arg.star == "**" for arg in factory.args) or any(ctx.keyword_arg(factory, k) for k in _HOST_ONLY_ARGUMENTS):
                continue
            if _empty_shape(factory, kind) and not runs_every_step(ctx, copy):
                # ``torch.empty(0).to(device)`` once per evaluation (saint's accumulators): nothing
                # is filled or copied; in a ``forward`` (DINO's MultiCropWrapper) it is still a
                # host allocation and a copy call every step.
                continue
            target = self._target(ctx, copy)
            if target is None:
                continue
            device, dtype = target
            fix = self._fix(ctx, copy, factory, kind, device, dtype) if device is not None else None
            method = copy.func.attr.value
            shown = "".join(f".{name}()" for name in conversions)
            seeded = ""
            if kind in _RANDOM_FACTORIES and ctx.facts.tensors.seeded:
                # Reproducible runs are what seeding asks for; the fix would change every draw.
                fix = None
                seeded = (
                    "; the program seeds torch, and the GPU's generator gives other numbers for the same "
                    "seed, so this is advice"
                )
            elif kind in _RANDOM_FACTORIES and fix is not None and not runs_every_step(ctx, copy):
                # A draw made once (a smoke test's input, a probe at start-up) saves one copy, and
                # the GPU's generator would change its numbers: not worth an edit.
                fix = None
                seeded = (
                    "; it is not seen to run every step (in a `forward`, a training step or a function of the file "
                    "they call), and the GPU's generator would give other numbers, so this is advice"
                )
            elif fix is not None and runs_once(ctx, copy):
                # A model's ``__init__``, a ``generate``'s token buffer before its loop, an
                # optimizer's state made once per parameter: one copy saved, nothing a run
                # would show, so the code is left as its author wrote it.
                fix = None
                seeded = (
                    "; it runs once (a module's `__init__`, a script's top level, a lazy initialisation), "
                    "where one copy saved would not show, so this is advice"
                )
            elif fix is not None and (caller := before_its_loop(ctx, copy)) is not None:
                # LLaMA's ``generate``: the token buffer is made once a call, then the decoding
                # loop does the work; one copy saved would not show beside it.
                fix = None
                seeded = (
                    f"; it runs once a call of `{caller.name.value}`, before the loop that does its work, "
                    f"where one copy saved would not show, so this is advice"
                )
            yield self.report(
                copy,
                f"`torch.{kind}(...){shown}.{method}(...)` fills the tensor in host memory and then copies it to "
                f"the GPU; create it there with `device=`{seeded} (guide: {DEVICE_GUIDE})",
                fix,
            )

        yield from self._legacy_constructors(ctx)

    def _scalar_math_of_a_factory(self, ctx: FileContext, copy: cst.Call) -> Iterator[Finding]:
        """``torch.exp(-math.log(p) * torch.arange(half, dtype=torch.float32) / half).to(t.device)``
        (the timestep embedding of every diffusion model, run in each forward): a factory under
        elementwise math with Python numbers, built and computed on the host, then copied. Made
        on the device, the math runs there too; unsafe, as it may round differently."""
        math = copy.func.value  # type: ignore[attr-defined]
        if not (isinstance(math, (cst.Call, cst.BinaryOperation, cst.UnaryOperation))):
            return
        factories: list[cst.Call] = []
        if not _scalar_math(ctx, math, factories) or len(factories) != 1:
            return
        (factory,) = factories
        qualname = ctx.qualname(factory.func) or ""
        kind = qualname[len("torch.") :]
        if kind not in (*_EXACT_FACTORIES, *_SEQUENCE_FACTORIES):
            return
        if any(arg.star for arg in factory.args) or any(ctx.keyword_arg(factory, k) for k in _HOST_ONLY_ARGUMENTS):
            return
        target = self._target(ctx, copy)
        if target is None or target[1] is not None:
            return  # a dtype too: the math would run in another dtype
        device = target[0]
        fix = None
        if device is not None:
            moved = _replaced(math, factory, set_keyword(factory, "device", device))
            fix = self.fix(
                "Create the tensor on the device and compute there (rounding can differ on the GPU)",
                Edit(copy, moved),
                applicability=Applicability.UNSAFE,
                requires=TORCH_0_4,
            )
        method = copy.func.attr.value  # type: ignore[attr-defined]
        yield self.report(
            copy,
            f"`torch.{kind}(...)` and the math on it run in host memory, then `.{method}(...)` copies the result to "
            f"the GPU; create it there with `device=` (guide: {DEVICE_GUIDE})",
            fix,
        )

    def _legacy_constructors(self, ctx: FileContext) -> Iterator[Finding]:
        """``Tensor(np.ones(shape))`` with ``Tensor = torch.cuda.FloatTensor`` (old GAN scripts):
        NumPy fills the array on the host and the constructor copies it to the GPU, every step.
        Advice only: the NumPy random stream differs from the GPU's."""
        for call in ctx.nodes(cst.Call):
            if not call.args or call.args[0].keyword is not None or call.args[0].star:
                continue
            data = call.args[0].value
            if not (isinstance(data, cst.Call) and (ctx.qualname(data.func) or "").startswith("numpy.")):
                continue
            if not ctx.facts.devices.cuda_tensor_type(call.func) or ctx.facts.steps.step_of(call) is None:
                continue
            made = (ctx.qualname(data.func) or "numpy").split(".", 1)[1]
            yield self.report(
                call,
                f"`{ctx.snippet(call.func, 30)}(np.{made}(...))` fills the array in host memory and copies it to the GPU "
                f"every training step; create it there (`torch.ones(..., device=...)`, `torch.randn(..., device=...)`) "
                f"(guide: {DEVICE_GUIDE})",
            )

    @staticmethod
    def _factory_behind(expr: cst.BaseExpression) -> tuple[cst.Call | None, list[str]]:
        """The factory call under conversions that commute with a device move
        (``torch.ones(n).long().to(device)``), and the conversions' names, outermost last."""
        conversions: list[str] = []
        while (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in _MOVABLE_CONVERSIONS
        ):
            conversions.append(expr.func.attr.value)
            expr = expr.func.value
        return (expr if isinstance(expr, cst.Call) else None), list(reversed(conversions))

    @staticmethod
    def _target(
        ctx: FileContext, copy: cst.Call
    ) -> tuple[cst.BaseExpression | None, cst.BaseExpression | None] | None:
        """The device (and dtype) a ``.cuda(...)`` / ``.to(...)`` call moves to, when it only moves;
        the device is None when it cannot be written as ``device=`` (``.cuda(args.gpu)`` is the
        current GPU when ``args.gpu`` is None, ``device=None`` the CPU)."""
        assert isinstance(copy.func, cst.Attribute)
        if any(arg.star for arg in copy.args):
            return None
        keywords = {arg.keyword.value: arg.value for arg in copy.args if arg.keyword is not None}
        positional = [arg.value for arg in copy.args if arg.keyword is None]
        if set(keywords) - {"device", "dtype", "non_blocking"}:
            return None
        if copy.func.attr.value == "cuda":
            if "dtype" in keywords or len(positional) > 1 or ("device" in keywords and positional):
                return None
            index = keywords.get("device") or (positional[0] if positional else None)
            if index is None:
                return cst.SimpleString('"cuda"'), None
            value = ctx.values.resolve(index)
            if value is not None and type(value.value) is int and value.origin == "literal":
                return cst.SimpleString(f'"cuda:{value.value}"'), None
            if value is not None and type(value.value) in (int, str) and value.origin != "argparse default":
                return index, None
            return None, None
        device = keywords.get("device")
        dtype = keywords.get("dtype")
        rest = positional
        if device is None and rest:
            device, rest = rest[0], rest[1:]
        if rest and dtype is None and ctx.facts.devices.is_dtype(rest[0]):
            dtype, rest = rest[0], rest[1:]
        if rest or device is None or ctx.facts.devices.is_dtype(device):
            return None
        if isinstance(device, cst.Name) and ctx.facts.devices.left_none(device):
            return None  # ``.to(device)`` with ``device=None`` from every caller: no copy at all
        if dtype is None and not keywords and _tensor_argument(ctx, device):
            # ``torch.zeros(n).to(z)``: z's device and dtype (taming's quantizer, in its forward).
            assert isinstance(device, cst.Name)
            return cst.Attribute(device, cst.Name("device")), cst.Attribute(device, cst.Name("dtype"))
        if not (ctx.facts.devices.on_gpu(device) or _argument_device(ctx, device)):
            return None
        if isinstance(device, cst.Attribute) and device.attr.value == "device" and _collates(ctx, copy):
            return None  # RRHF's ``padding(inputs, ...)`` of a data collator: its tensors are the CPU's
        return device, dtype

    def _fix(
        self,
        ctx: FileContext,
        copy: cst.Call,
        factory: cst.Call,
        kind: str,
        device: cst.BaseExpression,
        dtype: cst.BaseExpression | None,
    ):
        created = set_keyword(factory, "device", device)
        receiver = copy.func.value  # type: ignore[attr-defined]
        if receiver is not factory:  # ``torch.ones(n, device=d).long()``: the conversions stay
            created = _replaced(receiver, factory, created)
        replacement: cst.BaseExpression = created
        if dtype is not None:
            if kind in _CONSTANT_FACTORIES and ctx.keyword_arg(factory, "dtype") is None and receiver is factory:
                replacement = set_keyword(created, "dtype", dtype)
            else:
                replacement = cst.Call(func=cst.Attribute(value=created, attr=cst.Name("to")), args=[cst.Arg(dtype)])
        exact = kind in _EXACT_FACTORIES and not (kind == "arange" and self._stepped(ctx, factory))
        applicability = Applicability.SAFE if exact else Applicability.UNSAFE
        description = "Create the tensor on the device" + (
            "" if exact else " (random numbers or rounding can differ on the GPU)"
        )
        return self.fix(description, Edit(copy, replacement), applicability=applicability, requires=TORCH_0_4)

    @staticmethod
    def _stepped(ctx: FileContext, factory: cst.Call) -> bool:
        positional = [arg for arg in factory.args if arg.keyword is None]
        return len(positional) > 2 or ctx.keyword_arg(factory, "step") is not None


_COLLATOR = re.compile(r"collat", re.IGNORECASE)


def _collates(ctx: FileContext, node: cst.CSTNode, depth: int = 0) -> bool:
    """``node`` runs in a data collator (the ``__call__`` of a class named for collation, a
    ``collate_fn``), or in a function of the file only collators call: it batches the items a
    data set made, on the CPU, in the loader."""
    function = ctx.enclosing(node, cst.FunctionDef)
    if not isinstance(function, cst.FunctionDef):
        return False
    if _COLLATOR.search(function.name.value):
        return True
    cls = ctx.enclosing(function, cst.ClassDef)
    if isinstance(cls, cst.ClassDef) and function.name.value == "__call__" and _COLLATOR.search(cls.name.value):
        return True
    callers = ctx.loops.callers(function) if depth < 2 else []
    return bool(callers) and all(_collates(ctx, call, depth + 1) for call in callers)


def _empty_shape(factory: cst.Call, kind: str) -> bool:
    """A size of ``0`` written out (``torch.empty(0)``, ``torch.zeros((0, 4))``): a tensor with no elements."""
    if kind not in ("zeros", "ones", "empty", "full", "randn", "rand"):
        return False  # ``arange(0, n)``, ``randint(0, k, size)``: a 0 there is no size
    positional = [arg.value for arg in factory.args if arg.keyword is None and not arg.star]
    if kind == "full":
        positional = positional[:1]  # ``full(size, fill_value)``
    sizes = positional[0].elements if len(positional) == 1 and isinstance(positional[0], (cst.Tuple, cst.List)) else None
    values = [element.value for element in sizes] if sizes is not None else positional
    return any(isinstance(value, cst.Integer) and value.evaluated_value == 0 for value in values)


def _argument_device(ctx: FileContext, device: cst.BaseExpression) -> bool:
    """``t.device`` of a tensor the function is given (``timestep_embedding(t, dim)``), in a
    file whose code runs on the GPU (it trains there, or the scripts importing it do): the
    model's inputs are on the GPU there, and where one is not, the edit changes nothing."""
    if not (isinstance(device, cst.Attribute) and device.attr.value == "device" and isinstance(device.value, cst.Name)):
        return False
    if not ctx.facts.devices.gpu.yes:
        return False
    bindings = ctx.lookup(device.value.value, device.value)
    return len(bindings) == 1 and isinstance(bindings[0].node, cst.Param) and device.value.value != "self"


# What only a tensor has among the values ``.to()`` takes (a device, a dtype, a tensor).
_TENSOR_ATTRIBUTES = frozenset({
    "shape", "size", "device", "dtype", "view", "reshape", "permute", "dim", "ndim", "numel", "unsqueeze", "squeeze", "transpose",
    "contiguous", "flatten", "detach", "clone", "sum", "mean", "norm", "abs", "new_zeros", "new_ones", "new_full",
})


def _tensor_argument(ctx: FileContext, target: cst.BaseExpression) -> bool:
    """``target`` is a tensor the function is given (``z`` of a quantizer's ``forward(self, z)``,
    read as ``z.shape`` or ``z.view(...)`` there), in a file whose code runs on the GPU: ``.to(z)``
    takes z's device and dtype, and the model's inputs are on the GPU there."""
    if not isinstance(target, cst.Name) or target.value in ("self", "cls") or not ctx.facts.devices.gpu.yes:
        return False
    bindings = ctx.lookup(target.value, target)
    if not any(isinstance(b.node, cst.Param) for b in bindings):
        return False
    if not all(isinstance(b.node, cst.Param) or _method_chain_on(b.value, target.value) for b in bindings):
        return False  # rebound to something else than the tensor reshaped (``z = z.permute(...)``, ``x[:, None]``)
    function = ctx.enclosing(target, cst.FunctionDef)
    if function is None:
        return False
    return any(
        isinstance(node.value, cst.Name) and node.value.value == target.value and node.attr.value in _TENSOR_ATTRIBUTES
        for node in ctx.walk(function, cst.Attribute)
    )


def _method_chain_on(value: cst.BaseExpression | None, name: str) -> bool:
    """``value`` is ``name.a(...).b(...)`` or ``name[:, :, None]``: the name's value reshaped."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) or isinstance(value, cst.Subscript):
        value = value.value if isinstance(value, cst.Subscript) else value.func.value  # type: ignore[union-attr]
    return isinstance(value, cst.Name) and value.value == name


# Elementwise torch functions that give a tensor of the same device as their input.
_ELEMENTWISE = frozenset(("exp", "log", "sin", "cos", "sqrt", "rsqrt", "sigmoid", "tanh", "pow", "exp2", "log2"))
_SCALAR_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Power)


def _scalar_math(ctx: FileContext, expr: cst.BaseExpression, factories: list[cst.Call], depth: int = 0) -> bool:
    """Whether ``expr`` is elementwise math over torch factories and Python numbers only
    (collecting the factories): numbers, ``math.*`` calls, names bound once to integer
    arithmetic (``half = dim // 2``) or to a known number; no other tensor that could live
    on the host and meet a device tensor."""
    if depth > 12:
        return False
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return _scalar_math(ctx, expr.expression, factories, depth + 1)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _SCALAR_OPERATORS):
        return _scalar_math(ctx, expr.left, factories, depth + 1) and _scalar_math(ctx, expr.right, factories, depth + 1)
    if isinstance(expr, cst.Call):
        qualname = ctx.qualname(expr.func) or ""
        if qualname.startswith("math.") and not any(arg.star for arg in expr.args):
            return all(_python_number(ctx, arg.value) for arg in expr.args)
        last = qualname.rsplit(".", 1)[-1]
        if qualname.startswith("torch.") and last in (*_EXACT_FACTORIES, *_SEQUENCE_FACTORIES):
            factories.append(expr)
            return True
        if qualname == f"torch.{last}" and last in _ELEMENTWISE and len(expr.args) == 1 and expr.args[0].keyword is None:
            return _scalar_math(ctx, expr.args[0].value, factories, depth + 1)
        return False
    return _python_number(ctx, expr)


def _python_number(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return _python_number(ctx, expr.expression)
    value = ctx.values.resolve(expr)
    if value is not None and type(value.value) in (int, float):
        return True
    if isinstance(expr, cst.Name):
        bindings = ctx.lookup(expr.value, expr)
        if len(bindings) == 1 and isinstance(bindings[0].node, cst.Param):
            default = bindings[0].node.default  # ``max_period=10000``
            return default is not None and isinstance(default, (cst.Integer, cst.Float))
        bound = ctx.single_assignment(expr)
        if isinstance(bound, cst.BinaryOperation) and isinstance(bound.operator, cst.FloorDivide):
            return isinstance(bound.right, cst.Integer)  # ``half = dim // 2``
        if isinstance(bound, cst.Call) and isinstance(bound.func, cst.Name) and bound.func.value in ("int", "len", "float"):
            return not ctx.lookup(bound.func.value, bound.func)
    return False


# -- ADV705 ----------------------------------------------------------------------------------
_SET_GRAD_ENABLED = (
    "torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled",
)
# Code that needs gradients in an evaluation pass: attribution, adversarial examples.
_GRADIENT_CALLS = ("torch.autograd.grad", "torch.enable_grad", "torch.autograd.enable_grad", "torch.autograd.backward")
# Method names too common to say what an object is: a trainer's ``step`` takes gradients, a
# metric's ``update`` does not.
_GENERIC_METHODS = frozenset({
    "forward", "__call__", "step", "update", "train", "eval", "append", "add", "extend", "log", "compute", "reset",
    "to", "cuda", "cpu", "item", "run", "predict", "evaluate", "test", "generate", "sample", "encode", "decode",
    "backward", "zero_grad", "save", "load", "print", "write", "format", "get", "set", "apply", "detach",
})


def _takes_gradients(ctx: FileContext, function: cst.FunctionDef, depth: int) -> bool:
    """``function`` of another module calls ``torch.autograd.grad`` / ``.backward()``, itself or
    through one more function (:func:`_calls_gradient_helper` at ``depth + 1``)."""
    if ctx.within(function, ctx.calls(*_GRADIENT_CALLS)) or ctx.within(function, ctx.method_calls("backward")):
        return True
    return _calls_gradient_helper(ctx, function, depth + 1)


_AUTOGRAD_GRAD_TEXT = re.compile(rb"\bautograd\.grad\s*\(|\bfrom\s+torch\.autograd\s+import\b[^\n]*\bgrad\b")


def _differentiates_in_forward(ctx: FileContext) -> bool:
    """A module the file imports (directly or through others) takes gradients inside a model's
    ``forward`` (``torch.autograd.grad``), or in a method a ``forward`` there calls:
    an interatomic potential's forces are minus the energy's gradient, computed by the model
    (SevenNet's ``ForceOutput``); an SDF network's normals are its gradient (VolSDF's
    ``get_outputs``, which the renderer's ``forward`` calls). Its evaluation needs autograd,
    and ``no_grad`` raises there. A module that imports others by name (VolSDF's
    ``utils.get_class(conf.model_class)``) may reach any of the project's."""
    view = ctx.project
    if view is None:
        return False

    def find() -> bool:
        project = view.project
        candidates = set(view.texts_matching(_AUTOGRAD_GRAD_TEXT, b"autograd"))
        if not candidates:
            return False
        # Only modules the file imports, directly or through others (DIG's explainers, which
        # differentiate in their own forward, are not what its ProNet example evaluates).
        own = os.path.abspath(ctx.path)
        reached, todo = {own}, _defining_modules(ctx)
        by_name = project.imports_by_name(own)
        while todo and len(reached) < 400:
            path = todo.pop()
            if path in reached:
                continue
            reached.add(path)
            by_name = by_name or project.imports_by_name(path)
            todo.extend(project.imports(path))
        for path in candidates if by_name else candidates & reached:
            other = ctx if path == os.path.abspath(ctx.path) else view.context_of(path)
            if other is not None and _differentiating_forward(other):
                return True
        return False

    return ctx.memo(_differentiates_in_forward, find)


def _defining_modules(ctx: FileContext) -> list[str]:
    """The project modules the file's imports reach: for ``from package import Name``, the
    module that defines ``Name`` rather than the package's ``__init__`` and everything it
    re-exports (x-transformers' ``train_parity.py`` imports ``TransformerWrapper``; the
    package's ``__init__`` also exports an XL wrapper whose training differentiates). Where a
    name does not resolve to a definition, the package's ``__init__`` stays."""
    view = ctx.project
    project = view.project
    own = os.path.abspath(ctx.path)
    imported = project.imports(own)
    packages = {path for path in imported if os.path.basename(path) == "__init__.py"}
    if not packages:
        return list(imported)
    narrowed: list[str] = []
    whole: set[str] = set()
    for node in ctx.nodes(cst.Import):  # ``import package``: all of it
        for alias in node.names:
            path = project.module_path(dotted_name(alias.name) or "", 0, own)
            if path in packages:
                whole.add(path)
    for node in ctx.nodes(cst.ImportFrom):
        module = dotted_name(node.module) if node.module is not None else ""
        package = project.module_path(module or "", len(node.relative), own) if module or node.relative else None
        if package not in packages:
            continue
        if isinstance(node.names, cst.ImportStar):
            whole.add(package)
            continue
        for alias in node.names:
            local = alias.asname.name if alias.asname is not None else alias.name
            bound = view.binding(local) if isinstance(local, cst.Name) else None
            if bound is None or not isinstance(bound[1].node, (cst.FunctionDef, cst.ClassDef)):
                whole.add(package)  # a module or a value by name: the package as a whole
            elif os.path.abspath(bound[0].path) not in narrowed:
                narrowed.append(os.path.abspath(bound[0].path))
    kept = [path for path in imported if path not in packages or path in whole]
    return kept + [path for path in narrowed if path not in kept]


def _differentiating_forward(ctx: FileContext) -> bool:
    """The file calls ``torch.autograd.grad`` in a ``forward``, or in a method that a
    ``forward`` of the file calls (``self.implicit_network.get_outputs(points)``)."""
    methods: set[str] = set()
    for call in ctx.calls("torch.autograd.grad"):
        function = ctx.enclosing(call, cst.FunctionDef)
        if isinstance(function, cst.FunctionDef):
            if function.name.value == "forward":
                return True
            methods.add(function.name.value)
    if not methods:
        return False
    for forward in ctx.nodes(cst.FunctionDef):
        if forward.name.value != "forward":
            continue
        for call in ctx.walk(forward, cst.Call):
            if isinstance(call.func, cst.Attribute) and call.func.attr.value in methods:
                return True
    return False


def _method_of_constructed(ctx: FileContext, call: cst.Call) -> tuple[FileContext, cst.FunctionDef] | None:
    """The method ``call`` runs on an object the function built from a project class:
    ``adversary.generate(...)`` after ``adversary = PGD(self.model)``, with ``PGD`` a class of
    a project module that defines ``generate``."""
    func = call.func
    if ctx.project is None or not isinstance(func, cst.Attribute) or not isinstance(func.value, cst.Name):
        return None
    built = ctx.single_assignment(func.value)
    if not isinstance(built, cst.Call) or not isinstance(built.func, (cst.Name, cst.Attribute)):
        return None
    found = ctx.project.binding(built.func)
    if found is None or not isinstance(found[1].node, cst.ClassDef):
        return None
    method = next(
        (s for s in found[1].node.body.body if isinstance(s, cst.FunctionDef) and s.name.value == func.attr.value), None
    )
    return (found[0], method) if method is not None else None


# Libraries whose attribution maps backpropagate through the model themselves: MONAI's
# ``GradCAM`` (its ``__call__`` runs ``backward()``), captum, pytorch-grad-cam, torchcam.
_GRADIENT_ATTRIBUTION = re.compile(
    r"^(?:monai\.visualize\.(?:class_activation_maps\.)?(?:GradCAM|GradCAMpp)$|captum\.attr\.|pytorch_grad_cam\.|torchcam\.methods\.)"
)


def _runs_gradient_attribution(ctx: FileContext, root: cst.CSTNode) -> bool:
    """``root`` calls an attribution object of such a library (``cam = monai.visualize.GradCAM(
    nn_module=model, ...)``, then ``cam(x=image)``: MONAI's lung-lesion tutorial), which takes
    gradients of the model's output: under ``torch.no_grad()`` it raises."""
    for call in ctx.walk(root, cst.Call):
        made: cst.BaseExpression | None = call.func
        if isinstance(made, cst.Name):
            made = ctx.single_assignment(made)
        elif isinstance(made, cst.Attribute) and isinstance(made.value, cst.Name):
            made = ctx.single_assignment(made.value)  # ``ig.attribute(x)``
        if isinstance(made, cst.Call) and _GRADIENT_ATTRIBUTION.match(ctx.qualname(made.func) or ""):
            return True
    return False


def _calls_gradient_helper(ctx: FileContext, root: cst.CSTNode, depth: int) -> bool:
    """``root`` calls a function that takes gradients (``torch.autograd.grad``, ``.backward()``),
    directly or through one more such function: of the file, or of a project module it imports
    (StudioGAN's ``sample.generate_images``, whose latent optimisation calls ``autograd.grad``
    under a config switch)."""
    if ctx.project is not None and depth < 2:
        for call in ctx.walk(root, cst.Call):
            if not isinstance(call.func, (cst.Attribute, cst.Name)) or ctx.loops.callee(call) is not None:
                continue
            found = ctx.project.binding(call.func)
            if found is not None and isinstance(found[1].node, cst.FunctionDef):
                if _takes_gradients(found[0], found[1].node, depth):
                    return True
            elif found is None and (typed := _method_of_constructed(ctx, call)) is not None:
                # DeepRobust's ``adversary = PGD(self.model)``, then ``adversary.generate(...)``,
                # whose ``pgd_attack`` calls ``loss.backward()``.
                if _takes_gradients(*typed, depth):
                    return True
            elif found is None and isinstance(call.func, cst.Attribute) and call.func.attr.value not in _GENERIC_METHODS:
                # DM-Improves-AT's ``self.eval_attack.perturb(x, y)``: an object the file cannot
                # type, whose project classes' ``perturb`` runs PGD (``loss.backward()``).
                if any(_takes_gradients(other, method, depth) for other, method in ctx.project.methods_named(call.func.attr.value)):
                    return True
    gradient_calls = ctx.calls(*_GRADIENT_CALLS)
    backwards = ctx.method_calls("backward")
    if not gradient_calls and not backwards and (ctx.project is None or depth >= 1):
        return False
    for call in ctx.walk(root, cst.Call):
        helper = ctx.loops.callee(call)
        if helper is None or helper is root:
            continue
        if ctx.within(helper, gradient_calls) or ctx.within(helper, backwards):
            return True
        if depth < 1 and _calls_gradient_helper(ctx, helper, depth + 1):
            return True  # a helper of the file, or what it calls in the project (DeepRobust's ``adv_data``)
    return False


def grad_disabled(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Autograd is off where ``node`` runs: ``torch.no_grad()`` / ``inference_mode()`` /
    ``set_grad_enabled(<not certainly true>)`` around it, as ``with`` or decorator; or the
    author chose when it is (StudioGAN's ``with torch.no_grad() if not requires_grad else
    dummy_context_mgr():``, on where latent optimisation takes gradients)."""
    if under_no_grad(ctx, node):
        return True
    for ancestor in ctx.ancestors(node):
        managers: list[cst.BaseExpression] = []
        if isinstance(ancestor, cst.With):
            managers = [item.item for item in ancestor.items]
            for manager in managers:
                if isinstance(manager, cst.IfExp) and any(
                    isinstance(branch, cst.Call) and ctx.qualname(branch.func) in NO_GRAD
                    for branch in (manager.body, manager.orelse)
                ):
                    return True
        elif isinstance(ancestor, cst.FunctionDef):
            managers = [decorator.decorator for decorator in ancestor.decorators]
        for manager in managers:
            if isinstance(manager, cst.Call) and ctx.qualname(manager.func) in _SET_GRAD_ENABLED:
                mode = ctx.argument(manager, "mode", 0)
                if not isinstance(mode, cst.BaseExpression) or ctx.values.value_of(mode) is not True:
                    return True
    return False



def _calls_a_callback(ctx: FileContext, root: cst.CSTNode) -> bool:
    """``root`` hands the model it evaluates to a function its enclosing function is given
    (Torch-Pruning's ``measure_latency(model, inputs, run_fn=None)`` runs ``run_fn(model,
    inputs)``, which the project's own test hands a step with ``loss.backward()``): what that
    function does with the model is not seen. A loss it is given (``criterion(output, y)``)
    gets outputs, not the model."""
    function = ctx.enclosing(root, cst.FunctionDef)
    if not isinstance(function, cst.FunctionDef):
        return False
    parameters = {
        param.name.value
        for param in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)
    }
    evaluated = {
        dotted_name(call.func.value)  # type: ignore[attr-defined]
        for call in ctx.walk(function, cst.Call)
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "eval"
    } - {None}
    return any(
        isinstance(call.func, cst.Name) and call.func.value in parameters
        and any(dotted_name(arg.value) in evaluated for arg in call.args)
        for call in ctx.walk(root, cst.Call)
    )


def _signature_read(ctx: FileContext, name: str) -> bool:
    """Whether the project reads the parameters of a function called ``name`` with
    ``inspect.getfullargspec`` / ``getargspec`` (SmoothDARTS' ENAS driver asks whether
    ``'split'`` is among the arguments of ``self.model.evaluate``). Neither looks through a
    decorator's wrapper: under ``@torch.no_grad()`` they see ``(*args, **kwargs)``."""
    pattern = re.compile(rb"\bget(?:full)?argspec\([^)\n]*\b" + re.escape(name.encode()) + rb"\b")
    return next(ctx.texts_with(pattern, b"argspec("), None) is not None

class EvalWithoutNoGrad(Rule):
    code = "ADV705"
    name = "eval-without-no-grad"
    summary = "An evaluation loop (`model.eval()`) runs its forward passes with autograd on."
    guide = NO_GRAD_GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        `model.eval()` switches dropout and batch norm to inference behaviour; it does not
        turn off autograd. Without `torch.no_grad()` every forward pass of the evaluation
        loop records the graph and keeps the activations it would need for a backward pass
        that never comes: slower, and much more memory (an evaluation batch that fits in
        training may run out of memory here). PyTorch's *Performance Tuning Guide*, "Disable
        gradient calculation for validation or inference".

        The fix uses `torch.no_grad()` rather than `torch.inference_mode()`: tensors made
        under inference mode cannot later be saved for backward or changed in place outside
        it, so `no_grad` is the one that cannot change what the rest of the script does. It
        decorates the evaluation function (`@torch.no_grad()`) when the whole function
        evaluates, and wraps the loop in `with torch.no_grad():` otherwise.
    """
    example = """
        def evaluate(model, loader):
            model.eval()
            correct = 0
            for x, y in loader:
                correct += (model(x.cuda()).argmax(1) == y.cuda()).sum()
            return correct
    """
    use_instead = """
        @torch.no_grad()
        def evaluate(model, loader):
            model.eval()
            ...
    """
    silent_when = """
        - the loop calls a function its enclosing function is given (`run_fn(model, inputs)`
          in a latency benchmark): that function may run a backward pass;
        - the forward pass already runs under `torch.no_grad()`, `torch.inference_mode()` or
          `torch.set_grad_enabled(False)` (a `with`, a decorator, also spelled so in a file
          that never imports `torch`, or the call site of the
          evaluation function: `with torch.no_grad(): evaluate(model, loader)`, in the file
          or, for a module-level function the file never calls, at every call in the project
          files that import it);
        - the loop needs gradients: it calls `backward()`, `torch.autograd.grad`,
          `torch.enable_grad()`, touches `requires_grad` or `.grad` (attribution,
          adversarial examples), calls an attribution object of a library that backpropagates
          itself (MONAI's `GradCAM`, captum, pytorch-grad-cam), or it is a training loop (an evaluation loop nested in the
          training loop is reported when an `if` of the step runs it, every N steps); also through a function of the
          project it calls, or a method of an object the file cannot type whose project
          classes do (an attack's `perturb`);
        - the model is built by another framework (`jt_Network()` from `jittor`, Paddle,
          MindSpore, TensorFlow): `torch.no_grad()` does not reach it;
        - a module the file imports (directly or through others) takes `torch.autograd.grad`
          in its `forward`: an interatomic potential's forces are the energy's gradient, and
          under `torch.no_grad()` its evaluation raises. For `from package import Name`, the
          module that defines `Name` counts, not everything the package's `__init__` exports;
        - the model's parameters are frozen (`model.requires_grad_(False)`, or
          `requires_grad = False` in a loop over its `parameters()` / `named_parameters()`);
        - the model is switched back with `model.train()` before the loop, or the loop only
          calls `model.generate(...)` (already without gradients);
        - the file builds `Variable(x, volatile=True)` (or `volatile=` a flag): the way torch
          before 0.4, which had no `no_grad`, turned autograd off. The script is written for
          that torch, and its author did turn autograd off;
        - the loop is in a function every training step calls (Text-To-Video-Finetuning's
          `finetune_unet`, which switches the UNet to `eval()` under an option and then computes
          the loss the step backpropagates): its result may need gradients.
    """
    valid = [
        Valid(
            """
            import torch
            import jittor as jt
            from jittor.lib.network import Network as jt_Network

            jittor_model = jt_Network()
            jittor_model.eval()
            for i in range(100):
                jittor_result = jittor_model(jittor_test_img)
                jittor_result[0].sync()
            """,
            note="a Jittor model timed beside a torch one (SINet-V2's `fps.py`): torch's `no_grad` does not reach it",
        ),
        Valid(
            """
            import torch.optim as optim

            class Classifier:
                def eval(self, data_loader):
                    self.net.eval()
                    with torch.no_grad():
                        for batch in data_loader:
                            outputs = self.net(batch.x.to(self.device))
            """,
            note="`torch.no_grad()` by name in a file that never binds `torch` (scArches' classifier): autograd is off as written",
        ),
        Valid(
            """
            import torch

            class FROMP(torch.optim.Optimizer):
                def jacobian(self, loss, outputs):
                    return torch.autograd.grad(loss, outputs, retain_graph=True)

                def update_fisher(self, loader):
                    self.model.eval()
                    for x, y in loader:
                        logits = self.model(x.cuda())
                        self.fisher += self.jacobian(logits.sum(), self.outputs)[0] ** 2
            """,
            note="the loop takes gradients through a method of the file (continual-learning's FROMP)",
        ),
        Valid(
            """
            import torch

            def evaluate(model, loader):
                model.eval()
                with torch.no_grad():
                    for x, y in loader:
                        out = model(x)
            """,
        ),
        Valid(
            """
            import torch

            def evaluate(model, loader):
                model.eval()
                return [model(x) for x in loader]

            def test(model, loader):
                model.eval()
                for x in loader:
                    model(x)

            with torch.no_grad():
                evaluate(model, loader)
                test(model, loader)
            """,
            note="the caller turns autograd off",
        ),
        Valid(
            """
            import torch

            def saliency(model, loader):
                model.eval()
                for x, y in loader:
                    x.requires_grad_(True)
                    model(x)[0, y].backward()
                    maps.append(x.grad.abs())
            """,
            note="gradient-based attribution",
        ),
        Valid(
            """
            import monai
            import torch

            model.eval()
            cam = monai.visualize.GradCAM(nn_module=model, target_layers="class_layers.relu")
            for image in images:
                prediction = model(image.cuda()).argmax(1)
                maps.append(cam(x=image.cuda(), class_idx=None))
            """,
            note="an attribution library's object backpropagates itself: under `no_grad` it raises (MONAI's lung-lesion tutorial)",
        ),
        Valid(
            """
            import torch

            teacher.eval()
            teacher.requires_grad_(False)
            for x, y in loader:
                soft = teacher(x)
                loss = kd_loss(student(x), soft, y)
                loss.backward()
                optimizer.step()
            """,
            note="a frozen teacher in a training loop",
        ),
        Valid(
            """
            import torch

            model.eval()
            for k, v in model.named_parameters():
                v.requires_grad = False
            for img in test_images:
                restored = model(img.cuda())
                save(restored.cpu())
            """,
            note="every parameter frozen first (KAIR's test scripts): autograd records nothing",
        ),
        Valid(
            """
            import torch

            @torch.set_grad_enabled(False)
            def validate(model, loader):
                model.eval()
                for x in loader:
                    model(x)

            model.eval()
            model.train()
            for x in loader:
                model(x).sum().backward()
            """,
            note="grad disabled by decorator; train() before the loop",
        ),
        Valid(
            """
            import torch
            from torch.autograd import Variable

            def get_batch(source, i, evaluation=False):
                return Variable(source[i : i + 35], volatile=evaluation)

            def evaluate(data_source):
                model.eval()
                total_loss = 0
                for i in range(0, data_source.size(0) - 1, 35):
                    data = get_batch(data_source, i, evaluation=True)
                    total_loss += criterion(model(data), targets).data
                return total_loss[0] / len(data_source)
            """,
            note="torch before 0.4: `volatile=True` turns autograd off",
        ),
        Valid(
            """
            import torch

            for step, (x, y) in enumerate(loader):
                model.train()
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if step % 100 == 0:
                    model.eval()
                    for xs, ys in probe_loader:
                        probe_loss = criterion(model(xs.cuda()), ys.cuda())
                        probe_loss.backward()
                        probe_optimizer.step()
            """,
            note="a loop every N steps that trains a probe: it needs the gradients",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch

            for i in range(num_batches):
                model.train()
                seq, labels = next(train_dl)
                loss = model(seq.cuda(), labels.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if (i + 1) % EVAL_EVERY == 0:
                    model.eval()
                    for length, eval_dl in eval_dls.items():
                        seq, labels = next(eval_dl)
                        logits = model(seq.cuda())
                        print(length, (logits.argmax(-1) != labels.cuda()).float().mean().item())
            """,
            fixed="""
            import torch

            for i in range(num_batches):
                model.train()
                seq, labels = next(train_dl)
                loss = model(seq.cuda(), labels.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if (i + 1) % EVAL_EVERY == 0:
                    model.eval()
                    with torch.no_grad():
                        for length, eval_dl in eval_dls.items():
                            seq, labels = next(eval_dl)
                            logits = model(seq.cuda())
                            print(length, (logits.argmax(-1) != labels.cuda()).float().mean().item())
            """,
            note="an evaluation every N steps inside the training loop (x-transformers' train_parity.py)",
        ),
        Invalid(
            """
            import torch

            def evaluate(model, loader, device):
                model.eval()
                correct = 0
                for x, y in loader:
                    x, y = x.to(device), y.to(device)
                    correct += (model(x).argmax(1) == y).sum().item()
                return correct / len(loader.dataset)
            """,
            fixed="""
            import torch

            @torch.no_grad()
            def evaluate(model, loader, device):
                model.eval()
                correct = 0
                for x, y in loader:
                    x, y = x.to(device), y.to(device)
                    correct += (model(x).argmax(1) == y).sum().item()
                return correct / len(loader.dataset)
            """,
        ),
        Invalid(
            """
            import torch as T

            for epoch in range(10):
                model.train()
                for x, y in train_loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                # validate
                model.eval()
                for x, y in val_loader:
                    val_loss += criterion(model(x), y)
            """,
            fixed="""
            import torch as T

            for epoch in range(10):
                model.train()
                for x, y in train_loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                # validate
                model.eval()
                with T.no_grad():
                    for x, y in val_loader:
                        val_loss += criterion(model(x), y)
            """,
        ),
        Invalid(
            """
            from transformers import AutoModelForSequenceClassification

            class Trainer:
                def validate(self):
                    self.model.eval()
                    for batch in self.val_loader:
                        outputs = self.model(**batch)
                        self.metric.add_batch(predictions=outputs.logits.argmax(-1), references=batch["labels"])
            """,
            fixed="""
            from transformers import AutoModelForSequenceClassification
            import torch

            class Trainer:
                @torch.no_grad()
                def validate(self):
                    self.model.eval()
                    for batch in self.val_loader:
                        outputs = self.model(**batch)
                        self.metric.add_batch(predictions=outputs.logits.argmax(-1), references=batch["labels"])
            """,
            note="`import torch` is added",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if self._grad_off_globally(ctx) or self._volatile_variables(ctx):
            return
        switches = self._mode_switches(ctx)
        reported: set[cst.CSTNode] = set()
        for call in ctx.nodes(cst.Call):
            model = self._forward_of(call)
            if model is None or model not in switches:
                continue
            switch = self._last_switch(ctx, switches[model], call)
            if switch is None or not self._is_eval(ctx, switch):
                continue
            loop = self._evaluation_loop(ctx, call, switch)
            if loop is None or loop in reported:
                continue
            reported.add(loop)
            if self._needs_gradients(ctx, loop, model) or self._grad_off_at(ctx, call):
                continue
            if built_by_another_framework(ctx, call.func) or _differentiates_in_forward(ctx):
                continue
            if self._part_of_a_training_step(ctx, loop):
                continue
            yield self.report(
                call,
                f"`{model}.eval()` leaves autograd on: this evaluation loop records the graph and keeps "
                f"activations; run it under `torch.no_grad()` (guide: {NO_GRAD_GUIDE})",
                self._fix(ctx, loop),
            )

    @staticmethod
    def _volatile_variables(ctx: FileContext) -> bool:
        """``Variable(x, volatile=True)`` (or ``volatile=evaluation``): how torch before 0.4,
        which had no ``no_grad``, turned autograd off. The author did; the script is written
        for that torch."""
        for call in ctx.nodes(cst.Call):
            volatile = ctx.keyword_arg(call, "volatile")
            name = dotted_name(call.func) or ""
            if volatile is not None and name.rsplit(".", 1)[-1] == "Variable":
                if ctx.values.value_of(volatile.value) is not False:
                    return True
        return False

    @staticmethod
    def _grad_off_globally(ctx: FileContext) -> bool:
        """``torch.set_grad_enabled(False)`` as a statement: off for what follows."""
        for call in ctx.calls(*_SET_GRAD_ENABLED):
            mode = ctx.argument(call, "mode", 0)
            if isinstance(ctx.parent.get(call), cst.Expr) and not (
                isinstance(mode, cst.BaseExpression) and ctx.values.value_of(mode) is True
            ):
                return True
        return False

    @staticmethod
    def _mode_switches(ctx: FileContext) -> dict[str, list[cst.Call]]:
        """``model.eval()`` / ``model.train(...)`` calls by the model's spelling."""
        found: dict[str, list[cst.Call]] = {}
        for call in ctx.method_calls("eval", "train"):
            assert isinstance(call.func, cst.Attribute)
            spelling = dotted_name(call.func.value)
            if spelling is not None and not (call.func.attr.value == "eval" and call.args):
                found.setdefault(spelling, []).append(call)
        return found

    @staticmethod
    def _forward_of(call: cst.Call) -> str | None:
        """The model a call runs forward: ``model(x)``, ``self.model(**batch)``, ``model.forward(x)``."""
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "forward":
            func = func.value
        return dotted_name(func)

    @staticmethod
    def _last_switch(ctx: FileContext, switches: Sequence[cst.Call], call: cst.Call) -> cst.Call | None:
        """The last ``eval()``/``train()`` of the model before ``call``, in the same function."""
        scope = ctx.enclosing(call, cst.FunctionDef, cst.Lambda)
        before = [
            s
            for s in switches
            if ctx.order[s] < ctx.order[call] and ctx.enclosing(s, cst.FunctionDef, cst.Lambda) is scope
        ]
        return max(before, key=ctx.order.__getitem__) if before else None

    @staticmethod
    def _is_eval(ctx: FileContext, switch: cst.Call) -> bool:
        assert isinstance(switch.func, cst.Attribute)
        if switch.func.attr.value == "eval":
            return True
        mode = ctx.argument(switch, "mode", 0)
        return isinstance(mode, cst.BaseExpression) and ctx.values.value_of(mode) is False

    @staticmethod
    def _evaluation_loop(ctx: FileContext, call: cst.Call, switch: cst.Call) -> cst.For | cst.While | None:
        """The outermost loop around ``call`` that starts after ``switch``, in the same function."""
        found = None
        for ancestor in ctx.ancestors(call):
            if isinstance(ancestor, _SCOPES):
                break
            if isinstance(ancestor, _LOOPS) and ctx.order[ancestor] > ctx.order[switch]:
                found = ancestor
        if found is None:
            return None
        if ctx.loops.loop_of(found) is not None:
            # An evaluation every N steps inside the training loop (x-transformers'
            # ``if (i + 1) % EVAL_EVERY == 0: model.eval(); for ...``): under an ``if`` of the
            # step, not the step itself.
            region = ctx.loops.step_region(found)
            if region is None or not region.guards or region.calls:
                return None
        return found

    @staticmethod
    def _needs_gradients(ctx: FileContext, root: cst.CSTNode, model: str | None) -> bool:
        """``root`` trains or computes gradients (itself or in a function of the file it calls:
        FROMP's ``self.cac_grad(...)`` wraps ``torch.autograd.grad``), or ``model`` is frozen."""
        if trains_within(ctx, root) or ctx.within(root, ctx.calls(*_GRADIENT_CALLS)):
            return True
        if _calls_gradient_helper(ctx, root, 0):
            return True
        if _calls_a_callback(ctx, root):
            return True
        if _runs_gradient_attribution(ctx, root):
            return True
        if any(a.attr.value in ("grad", "requires_grad") for a in ctx.walk(root, cst.Attribute)):
            return True
        if ctx.within(root, ctx.method_calls("requires_grad_", "retain_grad")):
            return True
        if any(arg.keyword is not None and arg.keyword.value == "volatile" for arg in ctx.walk(root, cst.Arg)):
            return True  # pre-0.4 ``Variable(x, volatile=True)``
        if model is None:
            return False
        for call in ctx.method_calls("requires_grad_"):
            receiver = call.func.value  # type: ignore[attr-defined]
            while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
                receiver = receiver.func.value  # ``model.eval().requires_grad_(False)``
            if dotted_name(receiver) == model:
                return True
        for loop in ctx.nodes(cst.For):
            iterable = loop.iter
            if (
                isinstance(iterable, cst.Call)
                and isinstance(iterable.func, cst.Attribute)
                # KAIR's test scripts: ``for k, v in model.named_parameters(): v.requires_grad = False``
                and iterable.func.attr.value in ("parameters", "named_parameters")
                and dotted_name(iterable.func.value) == model
                and any(a.attr.value == "requires_grad" for a in ctx.walk(loop.body, cst.Attribute))
            ):
                return True
        return False

    @staticmethod
    def _part_of_a_training_step(ctx: FileContext, loop: cst.For | cst.While) -> bool:
        """The loop is in a function a training step calls, whose result the step may take
        gradients of: Text-To-Video-Finetuning's ``finetune_unet`` switches the UNet to
        ``eval()`` under an ``eval_train`` option, then computes the loss the step backpropagates."""
        function = ctx.enclosing(loop, cst.FunctionDef)
        if not isinstance(function, cst.FunctionDef):
            return False
        for caller in ctx.loops.callers(function):
            region = ctx.loops.step_region(caller)
            if region is not None and not region.guards:
                return True  # every step, not a validation every N steps
        return False

    @staticmethod
    def _other_loops(ctx: FileContext, function: cst.FunctionDef, loop: cst.For | cst.While) -> bool:
        """``function`` loops elsewhere than in ``loop``: it does more than this evaluation
        (DALLE2's ``train()`` runs the training loop, whose trainer steps it cannot see, and
        the validation loop in turns), so a decorator would turn autograd off for all of it."""
        return any(
            other is not loop and not ctx.is_descendant(other, loop)
            for other in (*ctx.walk(function, cst.For), *ctx.walk(function, cst.While))
        )

    @staticmethod
    def _grad_off_at(ctx: FileContext, call: cst.Call) -> bool:
        """Autograd is off around ``call``, or around a call of a function that holds it."""
        if grad_disabled(ctx, call):
            return True
        for function in ctx.ancestors(call):
            if not isinstance(function, cst.FunctionDef):
                continue
            name = function.name.value
            sites = ctx.method_calls(name) + [c for c in ctx.nodes(cst.Call) if isinstance(c.func, cst.Name) and c.func.value == name]
            if any(grad_disabled(ctx, site) for site in sites):
                return True
            if not sites and ctx.project is not None and ctx.parent.get(function) is ctx.module:
                # res-loglikelihood-regression's ``validate(...)``, which ``scripts/train.py``
                # calls only under ``with torch.no_grad():``.
                imported = ctx.project.calls_from_importers(name)
                if imported and all(grad_disabled(other, site) for other, site in imported):
                    return True
        return False

    def _fix(self, ctx: FileContext, loop: cst.For | cst.While):
        reference, imports = ctx.reference("torch.no_grad", loop)
        no_grad = cst.Call(func=reference)
        function = ctx.enclosing(loop, *_SCOPES)
        if (
            isinstance(function, cst.FunctionDef)
            and function.asynchronous is None
            and not self._needs_gradients(ctx, function, None)
            and not self._other_loops(ctx, function, loop)
            and not _signature_read(ctx, function.name.value)
        ):
            # A decorator runs where the ``def`` is, not in the body: an ``import torch`` inside
            # the function does not reach it (pytorch-playground's ``utee/misc.py``).
            outer, imports = ctx.reference("torch.no_grad", function)
            decorated = function.with_changes(decorators=[*function.decorators, cst.Decorator(cst.Call(func=outer))])
            description = "Decorate the evaluation function with `@torch.no_grad()`"
            # ``no_grad`` as a decorator came with torch 0.4.1 (awd-lstm-lm asks for "PyTorch 0.4").
            return self.fix(description, Edit(function, decorated), imports=imports, requires=[("torch", "0.4.1")])
        if not isinstance(ctx.parent.get(loop), (cst.IndentedBlock, cst.Module)) or self._backward_after(ctx, loop):
            return None
        wrapped = cst.With(
            items=[cst.WithItem(no_grad)],
            body=nested_block(ctx, loop, [loop.with_changes(leading_lines=[])]),
            leading_lines=loop.leading_lines,
        )
        return self.fix("Run the evaluation loop under `torch.no_grad()`", Edit(loop, wrapped), imports=imports, requires=TORCH_0_4)

    @staticmethod
    def _backward_after(ctx: FileContext, loop: cst.CSTNode) -> bool:
        """A backward pass after the loop in its scope, outside any training loop: it might
        differentiate something the loop computed."""
        scope = ctx.enclosing(loop, *_SCOPES) or ctx.module
        for call in ctx.within(scope, ctx.method_calls("backward") + ctx.calls("torch.autograd.backward")):
            if ctx.order[call] > ctx.end_order[loop] and ctx.loops.loop_of(call) is None:
                return True
        return False


# -- ADV703 ----------------------------------------------------------------------------------
def _known_not_a_tensor(ctx: FileContext, call: cst.Call, data: cst.BaseExpression) -> bool:
    """``call`` runs only where ``data`` is not a tensor: under ``if not isinstance(data,
    torch.Tensor):`` or in the ``else`` of ``if isinstance(data, torch.Tensor):``
    (pytorch_geometric_temporal's ``lambda_max``, a float or a tensor)."""
    spelled = ctx.code(data)
    for ancestor in ctx.ancestors(call):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if not isinstance(ancestor, cst.If):
            continue
        test, negated = ancestor.test, False
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, negated = test.expression, True
        if not (isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == "isinstance"):
            continue
        if len(test.args) != 2 or ctx.code(test.args[0].value) != spelled or "Tensor" not in ctx.code(test.args[1].value):
            continue
        in_body = ctx.is_descendant(call, ancestor.body)
        if in_body == negated:
            return True
    return False


# torch functions that always return a new tensor that shares memory with nothing else.
_FRESH_TENSOR_FUNCTIONS = frozenset(
    {
        "zeros", "ones", "empty", "full", "eye", "arange", "linspace", "logspace", "rand", "randn", "randint",
        "randperm", "tensor", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
        "randint_like", "stack", "cat", "concat", "concatenate", "matmul", "mm", "bmm", "einsum", "outer",
        "exp", "log", "sqrt", "abs", "sigmoid", "tanh", "softmax", "log_softmax", "relu", "clamp", "clip",
        "cumsum", "argmax", "argmin", "where", "multinomial", "bernoulli", "cdist", "clone",
    }
)
# torch functions that return a tensor which may share memory with their input.
_ALIASING_TENSOR_FUNCTIONS = frozenset(
    {"as_tensor", "from_numpy", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "t", "narrow"}
)
# Tensor methods that return a tensor.
_TENSOR_METHODS = frozenset(
    {
        "float", "half", "double", "long", "int", "bool", "bfloat16", "to", "cuda", "cpu", "detach", "clone",
        "contiguous", "view", "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose", "t", "sum",
        "mean", "abs", "exp", "log", "softmax", "log_softmax", "argmax", "argmin", "clamp", "sigmoid", "expand",
        "repeat", "masked_fill", "type_as", "view_as", "expand_as", "pow", "sqrt", "neg", "round", "floor",
    }
)
# torchvision datasets whose items are ``(image, int label)``: with a ``transform`` the
# default collate turns both into tensors.
_IMAGE_DATASETS = frozenset(
    f"torchvision.datasets.{name}"
    for name in (
        "MNIST", "FashionMNIST", "KMNIST", "EMNIST", "QMNIST", "CIFAR10", "CIFAR100", "SVHN", "STL10",
        "ImageFolder", "DatasetFolder", "ImageNet", "Caltech101", "Food101", "Flowers102", "OxfordIIITPet",
    )
)
_REPEATED_FUNCTION = frozenset({"__getitem__", "forward", "training_step", "validation_step", "test_step"})


_SEQUENCE_LITERALS = (cst.List, cst.ListComp, cst.Tuple, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _operands(operation: cst.BinaryOperation) -> Iterator[cst.BaseExpression]:
    """The leaves of a chain of binary operations (``a * b + c + d``)."""
    for side in (operation.left, operation.right):
        if isinstance(side, cst.BinaryOperation) and not side.lpar:
            yield from _operands(side)
        else:
            yield side


class _Tensors:
    """Which expressions are certainly tensors (on any device)."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.devices = ctx.facts.tensors

    def is_tensor(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        if depth > MAX_DEPTH:
            return False
        ctx = self.ctx
        if isinstance(expr, cst.Name):
            return self._name_is_tensor(expr, depth)
        if isinstance(expr, cst.Subscript):
            return self.is_tensor(expr.value, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            if any(isinstance(side, _SEQUENCE_LITERALS) for side in _operands(expr)):
                return False  # ``[IGNORE_ID] * (1 + lengths[i]) + tokens.tolist()``: list repetition and concatenation (CosyVoice)
            return self.is_tensor(expr.left, depth + 1) or self.is_tensor(expr.right, depth + 1)
        if isinstance(expr, cst.Attribute):
            return expr.attr.value in ("data", "T", "mT") and self.is_tensor(expr.value, depth + 1)
        if not isinstance(expr, cst.Call):
            return False
        qualname = ctx.qualname(expr.func) or ""
        if qualname.startswith("torch."):
            last = qualname[len("torch.") :]
            return last in _FRESH_TENSOR_FUNCTIONS or last in _ALIASING_TENSOR_FUNCTIONS
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in _TENSOR_METHODS:
            return self.is_tensor(func.value, depth + 1)
        return False

    def is_fresh(self, expr: cst.BaseExpression) -> bool:
        """A new tensor nothing else refers to: the result of a torch function that never aliases."""
        qualname = self.ctx.qualname(expr.func) if isinstance(expr, cst.Call) else None
        return bool(qualname) and qualname.startswith("torch.") and qualname[len("torch.") :] in _FRESH_TENSOR_FUNCTIONS

    def _name_is_tensor(self, name: cst.Name, depth: int) -> bool:
        binding = self.devices.reaching(name)
        if isinstance(binding, (cst.Assign, cst.AnnAssign)) and binding.value is not None:
            targets = [t.target for t in binding.targets] if isinstance(binding, cst.Assign) else [binding.target]
            for target in targets:
                if isinstance(target, cst.Name) and target.value == name.value:
                    return self.is_tensor(binding.value, depth + 1)
                unpacked = unpacked_element(target, binding.value, name.value)
                if unpacked is not None and unpacked[0] is not binding.value:
                    return self.is_tensor(unpacked[0], depth + 1)
            return False
        if isinstance(binding, cst.For):
            return name.value in self._batch_names(binding)
        return False

    def _batch_names(self, loop: cst.For) -> set[str]:
        """Names of the loop target that hold tensors of a batch: every element of a batch
        from a ``TensorDataset`` or a torchvision image dataset with the default collate."""
        source, indexed = self.ctx.facts.loaders.unwrap(loop.iter)
        loaders = self.ctx.facts.loaders.behind(source)
        if not loaders or not all(self._collates_tensors(call) for call in loaders):
            return set()
        target = batch_target(loop.target, indexed)
        if not isinstance(target, (cst.Tuple, cst.List)):
            return set()  # ``for batch in loader``: a list, not a tensor
        return target_names(target)

    def _collates_tensors(self, call: cst.Call) -> bool:
        if self.ctx.qualname(call.func) != DATALOADER:
            return False
        collate = self.ctx.argument(call, "collate_fn", 6)
        if collate is not MISSING:
            return False
        dataset = self.ctx.facts.loaders.dataset(call)
        if dataset is None:
            return False
        qualname = self.ctx.qualname(dataset.func)
        if qualname == "torch.utils.data.TensorDataset":
            return True
        if qualname in _IMAGE_DATASETS:
            transform = self.ctx.argument(dataset, "transform")
            target_transform = self.ctx.argument(dataset, "target_transform")
            return isinstance(transform, cst.BaseExpression) and target_transform is MISSING
        return False


class TensorCopyInLoop(Rule):
    code = "ADV703"
    name = "tensor-copy-in-loop"
    summary = "`torch.tensor(x)` on something that is already a tensor, in code that runs repeatedly."
    guide = COPY_GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        `torch.tensor()` always copies its data; given a tensor it allocates a new one,
        copies every element and detaches the result (PyTorch warns: "To copy construct from
        a tensor, it is recommended to use sourceTensor.detach().clone()"). In a loop, over
        every batch, that is an extra allocation and a full copy each time. A batch from a
        `TensorDataset` or a torchvision dataset is already a tensor: use it as it is, or
        convert it with `x.to(dtype)` / `x.to(device)`.

        The fix writes the call as what it does, `x.detach().clone()` (with `dtype=`/`device=`:
        `x.detach().to(..., copy=True)`), so the results stay exactly the same; drop the copy
        yourself where nothing modifies the tensor in place. When `x` is a new tensor that
        nothing else refers to (`torch.tensor(torch.stack(rows))`), the copy cannot matter and
        the fix drops it: `torch.stack(rows).detach()`.
    """
    example = """
        loader = DataLoader(TensorDataset(features, labels), batch_size=64)
        for x, y in loader:
            y = torch.tensor(y, dtype=torch.long)
    """
    use_instead = """
        for x, y in loader:
            y = y.long()
    """
    silent_when = """
        - `x` is not certainly a tensor: a list, a NumPy array, a value from a function of
          unknown return, a batch of a dataset whose items the file does not show, a loader
          with a `collate_fn`;
        - the call does not run repeatedly (not in a loop, `__getitem__`, `forward` or a step hook).

        No fix when the call passes `requires_grad=` or `pin_memory=`.
    """
    valid = [
        Valid(
            """
            import torch

            class ChebConv(torch.nn.Module):
                def forward(self, x, lambda_max=None):
                    for layer in self.layers:
                        if lambda_max is None:
                            lambda_max = torch.tensor(2.0, dtype=x.dtype, device=x.device)
                        if not isinstance(lambda_max, torch.Tensor):
                            lambda_max = torch.tensor(lambda_max, dtype=x.dtype, device=x.device)
                        x = layer(x, lambda_max)
                    return x
            """,
            note="only where it is not a tensor (a float): there `torch.tensor` is the conversion",
        ),
        Valid(
            """
            import torch
            lengths = torch.tensor([3, 4])
            tokens = torch.randint(0, 10, (2, 5))
            for i in range(2):
                target = torch.tensor([-100] * (1 + lengths[i]) + tokens[i].tolist() + [eos])
            """,
            note="a list repeated and concatenated with a tensor's `.tolist()`: a Python list, not a tensor (CosyVoice)",
        ),
        Valid(
            """
            import torch
            for tokens, label in samples:
                x = torch.tensor(tokens)
                y = torch.tensor(label, dtype=torch.long)
            """,
            note="Python data",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(text_dataset, batch_size=8, collate_fn=collate)
            for ids, labels in loader:
                labels = torch.tensor(labels)
            """,
            note="batches of a dataset the file does not show",
        ),
        Valid(
            """
            import torch
            mean = torch.tensor(torch.ones(3) * 0.5)
            """,
            note="runs once",
        ),
        Valid(
            """
            import torch
            for key, value in inputs.items():
                if isinstance(value, list) and isinstance(value[0], torch.Tensor):
                    value = torch.stack(value)
                elif not isinstance(value, torch.Tensor):
                    value = torch.tensor(value)
            """,
            note="the tensor is bound in another branch: here `value` is a list or a number (LLaMA-Factory)",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            loader = DataLoader(TensorDataset(features, targets), batch_size=64, shuffle=True)
            for epoch in range(10):
                for x, y in loader:
                    y = torch.tensor(y, dtype=torch.long)
                    x = torch.tensor(x)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            loader = DataLoader(TensorDataset(features, targets), batch_size=64, shuffle=True)
            for epoch in range(10):
                for x, y in loader:
                    y = y.detach().to(dtype=torch.long, copy=True)
                    x = x.detach().clone()
            """,
            count=2,
        ),
        Invalid(
            """
            import torch
            from torchvision import datasets, transforms

            train_set = datasets.MNIST("data", train=True, transform=transforms.ToTensor())
            train_loader = torch.utils.data.DataLoader(train_set, batch_size=64)
            for i, (images, labels) in enumerate(train_loader):
                onehot = torch.tensor(torch.eye(10)[labels], device="cuda")
            """,
            fixed="""
            import torch
            from torchvision import datasets, transforms

            train_set = datasets.MNIST("data", train=True, transform=transforms.ToTensor())
            train_loader = torch.utils.data.DataLoader(train_set, batch_size=64)
            for i, (images, labels) in enumerate(train_loader):
                onehot = torch.eye(10)[labels].detach().to(device="cuda", copy=True)
            """,
        ),
        Invalid(
            """
            import torch

            class Dataset(torch.utils.data.Dataset):
                def __getitem__(self, index):
                    row = torch.stack([self.a[index], self.b[index]])
                    return torch.tensor(torch.cat([row, row]))
            """,
            fixed="""
            import torch

            class Dataset(torch.utils.data.Dataset):
                def __getitem__(self, index):
                    row = torch.stack([self.a[index], self.b[index]])
                    return torch.cat([row, row]).detach()
            """,
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        tensors = _Tensors(ctx)
        for call in ctx.calls("torch.tensor"):
            data = ctx.argument(call, "data", 0)
            if not isinstance(data, cst.BaseExpression) or not self._repeated(ctx, call):
                continue
            if not tensors.is_tensor(data) or _known_not_a_tensor(ctx, call, data):
                continue
            yield self.report(
                call,
                f"`torch.tensor({ctx.snippet(data, 30)})` copies a tensor on every iteration; use it as it is, "
                f"or convert it with `.to(dtype)` / `.to(device)` (guide: {COPY_GUIDE})",
                self._fix(ctx, call, data, tensors.is_fresh(data)),
            )

    @staticmethod
    def _repeated(ctx: FileContext, node: cst.CSTNode) -> bool:
        """In a loop or comprehension of its own function, or in a function that runs per item or step."""
        for ancestor in ctx.ancestors(node):
            if isinstance(ancestor, (*_LOOPS, *_COMPREHENSIONS)):
                return True
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return isinstance(ancestor, cst.FunctionDef) and ancestor.name.value in _REPEATED_FUNCTION
        return False

    def _fix(self, ctx: FileContext, call: cst.Call, data: cst.BaseExpression, fresh: bool):
        keywords = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
        positional = [arg for arg in call.args if arg.keyword is None]
        if len(positional) != 1 or positional[0].star or set(keywords) - {"data", "dtype", "device"}:
            return None
        receiver = data if isinstance(data, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not data.lpar else (
            data.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        )
        detached = cst.Call(func=cst.Attribute(value=receiver, attr=cst.Name("detach")))
        conversion = [keyword_arg(k, keywords[k]) for k in ("device", "dtype") if k in keywords]
        if fresh:
            replacement: cst.BaseExpression = detached
            if conversion:
                replacement = cst.Call(func=cst.Attribute(value=detached, attr=cst.Name("to")), args=conversion)
            description = "Use the new tensor without copying it again"
        elif conversion:
            args = [*conversion, keyword_arg("copy", "True")]
            replacement = cst.Call(func=cst.Attribute(value=detached, attr=cst.Name("to")), args=args)
            description = "Spell the copy `x.detach().to(..., copy=True)`"
        else:
            replacement = cst.Call(func=cst.Attribute(value=detached, attr=cst.Name("clone")))
            description = "Spell the copy `x.detach().clone()`"
        return self.fix(description, Edit(call, replacement), requires=TORCH_0_4)

