"""Batches: where a file holds a batch drawn from a DataLoader, and where it copies that batch
to a device.

"Which ``.to(device)`` calls copy this loader's batches?" has one answer here for every rule:
ADV103 makes those copies non-blocking, and ADV101 pins a loader without worker processes only
where such a copy is seen (pinning in the training process, right before a blocking copy, adds
a host copy and saves none). The batch is followed through unpacking (``x, y = batch``),
indexing, views of the same storage and the file's helper functions the loop hands it to.
"""
from __future__ import annotations

import re
import sys
from functools import cached_property
from typing import TYPE_CHECKING, Iterator

import libcst as cst

from advisor.apis import DATALOADER
from advisor.context import MISSING
from advisor.facts import per_node
from advisor.facts.loaders import LoaderFacts, batch_target, target_names

if TYPE_CHECKING:
    from advisor.context import FileContext


# Methods that return a view of a contiguous tensor: the same (pinned) memory.
_VIEWS = frozenset({"reshape", "view", "flatten", "unsqueeze", "squeeze"})
_SAME_STORAGE_FUNCTIONS = frozenset({"torch.autograd.Variable", *(f"torch.{view}" for view in _VIEWS if view != "view")})


class BatchScope:
    """The names in one loop body that hold (parts of) the batch the loop draws."""

    def __init__(
        self, ctx: "FileContext", loop: cst.For | cst.While | cst.FunctionDef, names: set[str], drawn: cst.Call | None = None
    ) -> None:
        self.ctx = ctx
        self.loop = loop  # the loop drawing the batch, or a helper it hands the batch to
        self.names = names
        self.drawn = drawn  # ``next(loader)`` used in place: the batch is that expression
        # ``x, y = batch`` / ``inputs = batch["input_ids"]``: still host tensors of the batch.
        assignments = [a for a in ctx.walk(loop.body, cst.Assign) if not self.outside(a)]
        for _ in range(2):
            for assign in assignments:
                if self._is_batch_value(assign.value):
                    for target in assign.targets:
                        self.names |= target_names(target.target)

    def outside(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is not run by the loop body itself (it sits in a nested def or class)."""
        for ancestor in self.ctx.ancestors(node):
            if ancestor is self.loop:
                return False
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return True
        return True

    def _is_batch_value(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        if isinstance(expr, (cst.Tuple, cst.List)) and expr.elements:
            return all(self.holds_batch(e.value, at) for e in expr.elements)
        return self.holds_batch(expr, at)

    def holds_batch(self, expr: cst.BaseExpression, at: cst.CSTNode | None) -> bool:
        """``batch``, ``batch[0]``, ``batch["x"]``, ``batch.x``, or ``v`` of ``for k, v in batch.items()``."""
        while True:
            if isinstance(expr, (cst.Subscript, cst.Attribute)):
                expr = expr.value
            elif (
                isinstance(expr, cst.Call)
                and self.ctx.qualname(expr.func) in _SAME_STORAGE_FUNCTIONS
                and expr.args
                and expr.args[0].keyword is None
            ):
                # ``Variable(inputs, requires_grad=True)``, ``torch.unsqueeze(inputs, 1)``: the same storage
                expr = expr.args[0].value
            elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _VIEWS:
                expr = expr.func.value  # ``images.reshape(-1, 784)``: a view of the pinned batch
            else:
                break
        if self.drawn is not None and expr is self.drawn:
            return True
        if not isinstance(expr, cst.Name):
            return False
        if expr.value in self.names:
            return at is None or not self._rebound(expr)
        return at is not None and self._comprehension_over_batch(expr.value, at)

    def _rebound(self, name: cst.Name) -> bool:
        """The name last got something else than the batch before this use (``batch_y =
        batch_y.float().to(device)``, then ``batch_y[:, -n:].to(device)`` copies a GPU tensor)."""
        binding = self.ctx.facts.tensors.reaching(name)
        if isinstance(binding, cst.For) and binding is not self.loop and not self.outside(binding):
            # openWakeWord's validation inside the training loop: ``for i, data in
            # enumerate(false_positive_val_data)`` draws another loader's batches into ``data``.
            return not self._is_batch_value(binding.iter, at=binding.iter)
        if not isinstance(binding, (cst.Assign, cst.AugAssign, cst.AnnAssign)) or self.outside(binding):
            return False
        if isinstance(binding, cst.AugAssign) or binding.value is None:
            return True
        value = binding.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "next":
            return False  # ``batch = next(data_iter)``: the draw itself
        # ``batch_y = batch_y[:, :, a:b]`` under ``if partial_train:`` slices whatever
        # ``batch_y`` was before it: the GPU copy made at the top of the loop (iTransformer).
        return not self._is_batch_value(value, at=value)

    def _comprehension_over_batch(self, name: str, at: cst.CSTNode) -> bool:
        for ancestor in self.ctx.ancestors(at):
            if ancestor is self.loop:
                return False
            if not isinstance(ancestor, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
                continue
            clause: cst.CompFor | None = ancestor.for_in
            while clause is not None:
                iterable, target = clause.iter, clause.target
                if (
                    isinstance(iterable, cst.Call)
                    and isinstance(iterable.func, cst.Attribute)
                    and iterable.func.attr.value in ("items", "values")
                    and not iterable.args
                ):
                    if iterable.func.attr.value == "items":
                        target = batch_target(target, indexed=True)
                    iterable = iterable.func.value
                if target is not None and name in target_names(target):
                    return self.holds_batch(iterable, ancestor)
                clause = clause.inner_for_in
        return False



# Reshaping calls that keep a strided view's layout problem: of a non-contiguous tensor they make
# a new, contiguous host tensor (``batch["labels"][:, 1:].reshape(-1)``).
_RESHAPES = frozenset({"reshape", "view", "flatten", "squeeze", "unsqueeze", "contiguous"})


def strided_view(expr: cst.BaseExpression) -> bool:
    """``x[:, 1:]``, ``x[..., 0]``, ``x[::2]``: a subscript that selects within a dimension past
    the first, or steps through one, and so may be a strided (non-contiguous) view; also such a
    view reshaped (``x[:, 1:].reshape(-1)``)."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _RESHAPES:
        expr = expr.func.value
    if not isinstance(expr, cst.Subscript):
        return False
    for position, element in enumerate(expr.slice):
        inner = element.slice
        if isinstance(inner, cst.Slice):
            if inner.step is not None or (position > 0 and (inner.lower is not None or inner.upper is not None)):
                return True
        elif position > 0 or (isinstance(inner, cst.Index) and isinstance(inner.value, cst.Ellipsis)):
            return True
    return False

def blocking_copy(ctx: "FileContext", call: cst.Call) -> bool:
    """``.to(<cuda device>)`` / ``.cuda()`` without ``non_blocking=True``."""
    if any(arg.star for arg in call.args):
        return False
    non_blocking = ctx.keyword_arg(call, "non_blocking")
    if non_blocking is not None and ctx.values.value_of(non_blocking.value) is not False:
        return False  # already set, or set from a value we cannot read
    positional = [arg.value for arg in call.args if arg.keyword is None]
    if len(positional) == 2 and isinstance(call.func, cst.Attribute) and call.func.attr.value == "to":
        if isinstance(ctx.values.value_of(positional[1]), bool):
            return False  # ``to(other, non_blocking)``
    return to_gpu(ctx, call)


def to_gpu(ctx: "FileContext", call: cst.Call) -> bool:
    """``.to(<cuda device>)`` / ``.cuda()`` / ``.type(torch.cuda.FloatTensor)``: a copy to the GPU,
    blocking or not."""
    if any(arg.star for arg in call.args) or not isinstance(call.func, cst.Attribute):
        return False
    positional = [arg.value for arg in call.args if arg.keyword is None]
    device_keyword = ctx.keyword_arg(call, "device")
    if call.func.attr.value == "type":  # ``imgs.type(torch.cuda.FloatTensor)``: a copy to the GPU
        dtype = ctx.keyword_arg(call, "dtype")
        target = dtype.value if dtype is not None else positional[0] if len(positional) == 1 else None
        return target is not None and ctx.facts.devices.cuda_tensor_type(target)
    if call.func.attr.value == "cuda":
        if len(positional) > 1:
            return False
        device = device_keyword.value if device_keyword else positional[0] if positional else None
        return device is None or ctx.facts.devices.on_gpu(device)
    if len(positional) > 2:
        return False
    device = device_keyword.value if device_keyword else positional[0] if positional else None
    devices = ctx.facts.devices
    return device is not None and not devices.is_dtype(device) and devices.on_gpu(device)


class BatchFacts:
    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx

    @cached_property
    def scopes(self) -> list[tuple[BatchScope, cst.BaseExpression]]:
        """Where the code holds a batch drawn from a loader, and the expression it draws from:
        ``for x, y in loader:``, and ``batch = next(data_iter)`` (``data_iter = iter(loader)``)
        in a loop, as in minGPT's trainer; ``next(loader).to(device)`` is a batch on its own."""
        ctx = self.ctx
        facts = ctx.facts.loaders
        found: list[tuple[BatchScope, cst.BaseExpression]] = []
        for loop in ctx.nodes(cst.For):
            source, indexed = facts.unwrap(loop.iter)
            target = batch_target(loop.target, indexed)
            names = target_names(target) if target is not None else set()
            if names:
                found.append((BatchScope(ctx, loop, names), source))
        for call in ctx.nodes(cst.Call):
            if not (isinstance(call.func, cst.Name) and call.func.value == "next") or ctx.lookup("next", call):
                continue
            if len(call.args) != 1 or call.args[0].keyword or call.args[0].star:
                continue
            loop = ctx.enclosing(call, cst.While, cst.For)
            if loop is None or ctx.enclosing(call, cst.FunctionDef) is not ctx.enclosing(loop, cst.FunctionDef):
                continue
            parent = ctx.parent.get(call)
            if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
                names = target_names(parent.targets[0].target)
                if names:
                    found.append((BatchScope(ctx, loop, names), call.args[0].value))
            else:
                found.append((BatchScope(ctx, loop, set(), drawn=call), call.args[0].value))
        return found

    def copies(self, scope: BatchScope, depth: int = 0) -> Iterator[tuple[cst.Call, BatchScope]]:
        """The ``.to()`` / ``.cuda()`` / ``.type()`` calls on the batch in the loop body, and in the
        functions of the file the loop hands the batch to (``calc_loss_batch(x, y, model, device)``)."""
        ctx = self.ctx
        for call in ctx.walk(scope.loop.body, cst.Call):
            if scope.outside(call):
                continue
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda", "type"):
                # ``batch.to(self.device)`` as a statement of its own moves an object in place:
                # KPConv's ``S3DISCustomBatch.to(self, device)``, which takes no ``non_blocking``.
                # A tensor's copy would be thrown away.
                in_place = isinstance(ctx.parent.get(call), cst.Expr)
                if scope.holds_batch(func.value, call) and not in_place:
                    yield call, scope
                continue
            inner = self._handed_to(scope, call) if depth < 2 else None
            if inner is not None:
                yield from self.copies(inner, depth + 1)

    def _handed_to(self, scope: BatchScope, call: cst.Call) -> BatchScope | None:
        """The batch scope of the function of the file ``call`` hands the batch to, or None."""
        ctx = self.ctx
        helper = ctx.loops.callee(call)
        if helper is None or helper is scope.loop:
            return None
        params = list(helper.params.params)
        offset = 1 if isinstance(ctx.parent.get(ctx.parent.get(helper)), cst.ClassDef) else 0
        handed: set[str] = set()
        for index, param in enumerate(params):
            passed = ctx.argument(call, param.name.value, index - offset if index >= offset else None)
            if isinstance(passed, cst.BaseExpression) and passed is not MISSING and scope.holds_batch(passed, call):
                handed.add(param.name.value)
        return BatchScope(ctx, helper, handed) if handed else None

    def _scopes_drawing_from(self, loader: cst.Call) -> list[BatchScope]:
        """The batch scopes of this file whose loop draws from ``loader`` (a loader of this file)."""
        facts = self.ctx.facts.loaders
        return [
            scope
            for scope, source in self.scopes
            if any(owner is facts and call is loader for owner, call in facts.feeding(source) or ())
        ]

    def copied_as_it_comes(self, loader: cst.Call) -> bool | None:
        """Whether a loop of this file copies ``loader``'s batch (or a view of it) to a device;
        None where no loop of the file draws from it."""
        scopes = self._scopes_drawing_from(loader)
        if not scopes:
            return None
        return any(True for scope in scopes for _ in self.copies(scope))

    def converted_before_every_copy(self, loader: cst.Call) -> bool:
        """Every copy to the GPU of ``loader``'s batches seen first converts them on the host
        (``v.float().to(self.device)``: DeepPurpose's float64 arrays, LTSF-Linear's
        ``batch_x.float().to(device)``) or computes on them there (DMD2's ``((data["images"] /
        255.0) * 2.0 - 1.0).to(device)``), and none copies the batch as it comes. The result is
        a new, unpinned tensor, so pinning the loader would not reach the copy. The copies are
        this file's loops over it, or, where it has none, the loops of the project files that
        import it and draw from it (the time-series libraries' ``data_provider`` returns the
        loader to ``exp/exp_main.py``, which copies ``batch_x.float().to(self.device)``)."""
        ctx = self.ctx
        drawing = [(self, scope) for scope in self._scopes_drawing_from(loader)]
        loaders = ctx.calls(DATALOADER)
        if not drawing and ctx.project is not None and loader in loaders:
            # The importer's answer names the loader in its own parse of this file: the same
            # call is the same one among the file's DataLoader calls (no positions: a file too
            # deep to regenerate whole still gets an answer).
            index = loaders.index(loader)

            def is_this_loader(owner: LoaderFacts, call: cst.Call) -> bool:
                theirs = owner.ctx.calls(DATALOADER)
                return owner.ctx.path == ctx.path and call in theirs and theirs.index(call) == index

            for other in ctx.project.importer_contexts(_COPIES):
                batches = other.facts.batches
                for scope, source in batches.scopes:
                    if any(is_this_loader(owner, call) for owner, call in other.facts.loaders.feeding(source) or ()):
                        drawing.append((batches, scope))
        converted = direct = 0
        for batches, scope in drawing:
            found = batches._conversions(scope)
            converted, direct = converted + found[0], direct + found[1]
        return converted > 0 and direct == 0

    def read_as_numpy(self, scope: BatchScope) -> bool:
        """A copy of the batch in ``scope`` is read with ``.numpy()`` later in the same body, the
        name not bound again in between (super-image's ``output_image``: ``inputs =
        inputs.to(device)``, then ``inputs.numpy()``). NumPy cannot read a CUDA tensor: the loop
        runs only where its device is the CPU."""
        ctx = self.ctx
        for call, owner in self.copies(scope):
            bound, name = _bound_name(ctx, call)
            if bound is None:
                continue
            for read in ctx.walk(owner.loop.body, cst.Call):
                func = read.func
                if (
                    isinstance(func, cst.Attribute)
                    and func.attr.value == "numpy"
                    and isinstance(func.value, cst.Name)
                    and func.value.value == name
                    and ctx.facts.tensors.reaching(func.value) is bound
                ):
                    return True
        return False

    @per_node
    def only_on_the_cpu(self, loader: cst.Call) -> bool:
        """Every loop of the file over ``loader`` reads a copy of its batch with ``.numpy()``
        (:meth:`read_as_numpy`): its batches never reach a GPU."""
        scopes = self._scopes_drawing_from(loader)
        return bool(scopes) and all(self.read_as_numpy(scope) for scope in scopes)

    @per_node
    def handed_to_numpy(self, loader: cst.Call) -> bool:
        """Every loop of the file over ``loader`` copies nothing of its batch to a device and hands
        the parts it passes on to functions of the project that make NumPy arrays of them first
        (TransUNet's ``test_single_volume``, copied into SSL4MIS, Swin-Unet and SAMed:
        ``image = image.squeeze(0).cpu().detach().numpy()``, then each slice is uploaded anew).
        Pinning the batch reaches no copy."""
        ctx = self.ctx
        scopes = self._scopes_drawing_from(loader)
        if not scopes:
            return False
        handed = 0
        for scope in scopes:
            if self._conversions(scope) != (0, 0):
                return False  # a part of the batch is copied here, as it comes or converted
            for call in ctx.walk(scope.loop.body, cst.Call):
                if scope.outside(call):
                    continue
                parts = [(i, arg) for i, arg in enumerate(call.args) if not arg.star and scope.holds_batch(arg.value, call)]
                if not parts:
                    continue
                if (ctx.qualname(call.func) or "").split(".")[0] in sys.stdlib_module_names:
                    continue  # ``os.path.split(case_name)``: the standard library moves nothing to a GPU
                if not isinstance(call.func, cst.Name):
                    return False  # ``model(images)``, a method: where the part goes is not seen
                found = ctx.facts.loaders.function_named(call.func)
                if found is None:
                    return False
                owner, function = found
                made = _made_numpy(owner, function)
                for index, arg in parts:
                    param = _parameter_for(function, index, arg)
                    if param is None or not (param in made or _left_on_host(owner, function, param)):
                        return False
                handed += 1
        return handed > 0

    def _conversions(self, scope: "BatchScope", depth: int = 0) -> tuple[int, int]:
        """(copies of the batch converted on the host first, copies of it as it comes) in
        ``scope``, and in the functions of the file it hands the batch to (MICN's
        ``self._process_one_batch(data, batch_x, ...)``, which does ``batch_x.float().to(...)``)."""
        ctx = self.ctx
        converted = direct = 0
        if depth < 2:
            for call in ctx.walk(scope.loop.body, cst.Call):
                inner = None if scope.outside(call) else self._handed_to(scope, call)
                if inner is not None:
                    more = self._conversions(inner, depth + 1)
                    converted, direct = converted + more[0], direct + more[1]
        copied = [call for call, _ in self.copies(scope, depth=2) if to_gpu(ctx, call)]
        # A strided view (MICN's ``batch_y[:, -pred_len:, f_dim:].to(device)``) is copied through
        # a contiguous host tensor made first: pinned memory does not reach that copy either.
        strided = sum(1 for call in copied if strided_view(call.func.value))  # type: ignore[attr-defined]
        direct += len(copied) - strided
        converted += strided + sum(1 for _ in self._converted_copies(scope))
        converted += self._recomputed_handed_to_copiers(scope)
        return converted, direct

    def _converted_copies(self, scope: "BatchScope") -> Iterator[cst.Call]:
        """Copies to the GPU in ``scope``'s loop of the batch converted or computed on first."""
        ctx = self.ctx
        for call in ctx.walk(scope.loop.body, cst.Call):
            if scope.outside(call) or not isinstance(call.func, cst.Attribute) or not to_gpu(ctx, call):
                continue
            receiver = call.func.value
            if isinstance(receiver, cst.Call) and ctx.qualname(receiver.func) == "torch.autograd.Variable" and receiver.args:
                receiver = receiver.args[0].value  # diffpool's ``Variable(data['adj'].float()).cuda()``
            if (
                isinstance(receiver, cst.Call)
                and isinstance(receiver.func, cst.Attribute)
                and receiver.func.attr.value in _HOST_CONVERSIONS
                and not receiver.args
                and scope.holds_batch(receiver.func.value, call)
            ) or _arithmetic_on(receiver, lambda leaf: scope.holds_batch(leaf, call)) or self._recomputed_from_batch(scope, receiver):
                yield call

    def blocking_host_copy_after(self, scope: "BatchScope", copy: cst.Call) -> cst.Call | None:
        """A blocking copy to the GPU, later in the same step than ``copy``, of a tensor the step
        made on the host: a part of the batch converted first (``frame.float().to(device)``), or
        a tensor built there (BEHRT's ``targets = torch.tensor(mlb.transform(targets.numpy()))``,
        then ``targets.to(device)``), before the step reads what ``copy`` made. From pageable
        memory the host waits for that copy, and so for ``copy``, queued before it: a
        non-blocking ``copy`` overlaps nothing."""
        ctx = self.ctx
        bound, name = _bound_name(ctx, copy)
        after = ctx.order[copy]
        if bound is None:
            # Handed on as it is copied (``model(x.cuda())``): the call reads it once its other
            # arguments are made, and a blocking copy among them (RLAIF-V's ``generate(input_ids=
            # batch["input_ids"].cuda(non_blocking=True), images=batch["images"].half().cuda())``)
            # comes first.
            arg = ctx.parent.get(copy)
            outer = ctx.parent.get(arg) if isinstance(arg, cst.Arg) else None
            if not isinstance(outer, cst.Call):
                return None
            reads = [ctx.end_order[outer]]
        else:
            # Only a copy before the step first reads this one: later, the copy has overlapped the
            # host work up to that read (ReSC's evaluation copies a visualisation image at its end).
            reads = [
                ctx.order[n] for n in ctx.walk(scope.loop.body, cst.Name)
                if n.value == name and ctx.order[n] > ctx.end_order[bound] and ctx.is_read(n)
            ]
        # A host sync on the way (``.cpu()``, ``.item()``: MakeItTalk's landmark pass) waits for
        # the copy there already; a blocking copy after it takes nothing more away.
        syncs = [
            ctx.order[c] for c in ctx.walk(scope.loop.body, cst.Call)
            if ctx.order[c] > after and isinstance(c.func, cst.Attribute) and c.func.attr.value in _HOST_SYNCS
        ]
        before = min(reads + syncs, default=ctx.end_order[scope.loop])
        # Only after: a blocking copy before this one (pointnet.pytorch's ``points, target =
        # points.cuda(), target.cuda()``, the points transposed) leaves this one to overlap the
        # kernel launches that follow it.
        within = lambda call: after < ctx.order[call] < before  # noqa: E731
        for call in self._converted_copies(scope):
            if within(call) and blocking_copy(ctx, call):
                return call
        for call in ctx.walk(scope.loop.body, cst.Call):
            if not within(call) or scope.outside(call) or not isinstance(call.func, cst.Attribute):
                continue
            if not blocking_copy(ctx, call):
                continue
            receiver = call.func.value
            if isinstance(receiver, cst.Name):
                binding = ctx.facts.tensors.reaching(receiver)
                if not isinstance(binding, cst.Assign) or scope.outside(binding):
                    continue
                receiver = binding.value
            if isinstance(receiver, cst.Call) and ctx.qualname(receiver.func) == "torch.autograd.Variable" and receiver.args:
                receiver = receiver.args[0].value  # deeplabv3's ``Variable(label_imgs.type(torch.LongTensor)).cuda()``
            if isinstance(receiver, cst.Call) and self._made_on_host(scope, receiver):
                return call
        return None

    def _made_on_host(self, scope: "BatchScope", value: cst.Call) -> bool:
        """``value`` makes a new host tensor: from Python or NumPy data (``torch.tensor(...)``
        without ``device=``), or a conversion of the batch on the host (``target.type(
        torch.LongTensor)``: SRe2L's ``train_KD.py``; ``labels.long()``)."""
        ctx = self.ctx
        if ctx.qualname(value.func) in _HOST_CONSTRUCTORS:
            return ctx.keyword_arg(value, "device") is None
        if not isinstance(value.func, cst.Attribute) or not scope.holds_batch(value.func.value, value):
            return False
        if value.func.attr.value in _HOST_CONVERSIONS:
            return not value.args
        if value.func.attr.value in _STRIDED_VIEWS:
            return True  # copied to the GPU, it is first made contiguous in pageable host memory
        if value.func.attr.value == "type" and len(value.args) == 1 and value.args[0].keyword is None:
            return (ctx.qualname(value.args[0].value) or "").startswith("torch.") and not ctx.facts.devices.cuda_tensor_type(
                value.args[0].value
            )
        return False

    def _recomputed_handed_to_copiers(self, scope: "BatchScope") -> int:
        """Calls in ``scope``'s loop that hand a function of the file a host tensor computed from
        the batch, which the function copies to the GPU (facenet-pytorch-glint360k's
        ``all_imgs = torch.cat((anc_imgs, pos_imgs, neg_imgs))``, then ``forward_pass(imgs=
        all_imgs, ...)``, which does ``imgs = imgs.cuda()``): the copy is of the new tensor."""
        ctx = self.ctx
        found = 0
        for call in ctx.walk(scope.loop.body, cst.Call):
            if scope.outside(call):
                continue
            helper = ctx.loops.callee(call)
            if helper is None or helper is scope.loop:
                continue
            offset = 1 if isinstance(ctx.parent.get(ctx.parent.get(helper)), cst.ClassDef) else 0
            for index, arg in enumerate(call.args):
                if arg.star or not self._recomputed_from_batch(scope, arg.value, new_name=True):
                    continue
                name = _parameter_for(helper, index, arg, offset)
                if name is not None and self._copies_parameter(helper, name):
                    found += 1
        return found

    def _copies_parameter(self, function: cst.FunctionDef, name: str) -> bool:
        """``function`` copies its parameter ``name`` to the GPU (``imgs.cuda()``)."""
        ctx = self.ctx
        return any(
            isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name)
            and call.func.value.value == name
            and to_gpu(ctx, call)
            for call in ctx.walk(function.body, cst.Call)
        )

    def _recomputed_from_batch(self, scope: "BatchScope", receiver: cst.BaseExpression, new_name: bool = False) -> bool:
        """``inputs = F.upsample(inputs, new_scale)`` and then ``inputs.cuda()`` (autodeeplab's
        multi-scale evaluation): the name last got a new host tensor computed from the batch, so
        the copy is of that tensor, not of the pinned batch. With ``new_name``, a name of its
        own that a torch function made from the batch (``all_imgs = torch.cat((anc, pos, neg))``)."""
        ctx = self.ctx
        if not isinstance(receiver, cst.Name) or (receiver.value not in scope.names and not new_name):
            return False
        binding = ctx.facts.tensors.reaching(receiver)
        if not isinstance(binding, cst.Assign) or scope.outside(binding):
            return False
        value = binding.value
        if not isinstance(value, cst.Call) or ctx.facts.devices.moves_off_cpu(value):
            return False
        if receiver.value not in scope.names and not (ctx.qualname(value.func) or "").startswith("torch."):
            return False
        if isinstance(value.func, cst.Name) and value.func.value == "next":
            return False
        if scope._is_batch_value(value, at=value):
            return False  # a view of the batch: the same pinned storage
        for arg in value.args[:1]:
            if arg.keyword is not None:
                continue
            parts = [e.value for e in arg.value.elements] if isinstance(arg.value, (cst.Tuple, cst.List)) else [arg.value]
            # ``torch.cat((anc_imgs, pos_imgs, neg_imgs))``: a new host tensor of the batch's parts
            if parts and all(scope.holds_batch(part, value) for part in parts):
                return True
        return False


def _bound_name(ctx: "FileContext", value: cst.BaseExpression) -> "tuple[cst.Assign, str] | tuple[None, None]":
    """The assignment that binds ``value`` and the name it binds: ``x = value``, or ``x`` in
    ``x, y = value, other``."""
    parent = ctx.parent.get(value)
    name = ctx.assigned_name(value)
    if name is not None:
        return parent, name  # type: ignore[return-value]
    if isinstance(parent, cst.Element):
        values = ctx.parent.get(parent)
        assign = ctx.parent.get(values)
        if isinstance(values, cst.Tuple) and isinstance(assign, cst.Assign) and len(assign.targets) == 1:
            targets = assign.targets[0].target
            if isinstance(targets, (cst.Tuple, cst.List)) and len(targets.elements) == len(values.elements):
                target = targets.elements[list(values.elements).index(parent)].value
                if isinstance(target, cst.Name):
                    return assign, target.value
    return None, None


def _parameter_for(function: cst.FunctionDef, index: int, arg: cst.Arg, offset: int = 0) -> str | None:
    """The name of ``function``'s parameter that ``arg`` (the ``index``-th argument) binds;
    ``offset`` 1 for a method called on its object (``self`` is not passed)."""
    if arg.keyword is not None:
        names = {p.name.value for p in (*function.params.params, *function.params.kwonly_params)}
        return arg.keyword.value if arg.keyword.value in names else None
    positional = [*function.params.posonly_params, *function.params.params]
    return positional[index + offset].name.value if index + offset < len(positional) else None


def _made_numpy(ctx: "FileContext", function: cst.FunctionDef) -> set[str]:
    """Parameters ``function`` rebinds, in a statement of its own body, to a NumPy array made
    from themselves (``image, label = image.squeeze(0).cpu().detach().numpy(), ...``)."""
    made: set[str] = set()
    for statement in function.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for assign in statement.body:
            if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
                continue
            target, value = assign.targets[0].target, assign.value
            pairs = (
                list(zip(target.elements, value.elements))
                if isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) and len(target.elements) == len(value.elements)
                else [(target, value)]
            )
            for name, expr in pairs:
                name = getattr(name, "value", name)
                expr = getattr(expr, "value", expr)
                if isinstance(name, cst.Name) and _numpy_of(expr) == name.value:
                    made.add(name.value)
    return made


def _numpy_of(expr: cst.BaseExpression) -> str | None:
    """``x`` for a chain of method calls on ``x`` with ``.numpy()`` in it
    (``x.squeeze(0).cpu().detach().numpy()``, then NumPy's own ``.squeeze(0)``)."""
    numpy = False
    node: cst.BaseExpression = expr
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        numpy = numpy or node.func.attr.value == "numpy"
        node = node.func.value
    return node.value if numpy and isinstance(node, cst.Name) else None


def _left_on_host(ctx: "FileContext", function: cst.FunctionDef, param: str) -> bool:
    """``param`` is never moved (``.to()``, ``.cuda()``) nor handed to another call as it is in
    ``function``: a case name used in a file name (``test_save_path + '/' + case``)."""
    for name in ctx.walk(function.body, cst.Name):
        if name.value != param or not ctx.is_read(name):
            continue
        holder = ctx.parent.get(name)
        if isinstance(holder, cst.Arg):
            return False
        if isinstance(holder, cst.Attribute) and holder.value is name and holder.attr.value in ("to", "cuda", "pin_memory"):
            return False
    return True


def _arithmetic_on(expr: cst.BaseExpression, is_batch) -> bool:
    """``expr`` is arithmetic (``+ - * /``, a unary minus) with a part of the batch among its
    operands: a new tensor, made where the batch is."""
    if isinstance(expr, cst.UnaryOperation):
        operands = [expr.expression]
    elif isinstance(expr, cst.BinaryOperation):
        operands = [expr.left, expr.right]
    else:
        return False
    return any(
        _arithmetic_on(operand, is_batch) if isinstance(operand, (cst.BinaryOperation, cst.UnaryOperation)) else is_batch(operand)
        for operand in operands
    )


# What an importer that copies batches has in its text.
_COPIES = re.compile(rb"\.(?:to|cuda)\(")
# Calls that wait for the GPU: what they read must be there.
_HOST_SYNCS = frozenset({"cpu", "item", "numpy", "tolist", "synchronize"})
# Tensors made from Python or NumPy data: on the host, in pageable memory.
_HOST_CONSTRUCTORS = frozenset({
    "torch.tensor", "torch.from_numpy", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor",
    "torch.IntTensor", "torch.DoubleTensor", "torch.BoolTensor", "torch.ByteTensor",
})
# Conversions that make a new host tensor unless the dtype already matches (float64 data made float32).
_HOST_CONVERSIONS = frozenset({"float", "double", "long", "int", "half", "bfloat16", "short", "bool", "byte"})
# Views whose elements are not contiguous (pointnet.pytorch's ``points.transpose(2, 1)``): a copy
# of one to the GPU makes a contiguous host tensor first, in pageable memory, and waits for it.
_STRIDED_VIEWS = frozenset({"transpose", "permute", "swapaxes", "swapdims"})
