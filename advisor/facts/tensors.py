"""Which expressions hold CUDA tensors, and which code runs on every training step.

:class:`TensorFacts` answers "is this a CUDA tensor?" for an expression, following names to
their bindings: tensors moved with ``.cuda()`` / ``.to(<GPU>)``, made with ``device=`` a GPU,
the outputs of a model on the GPU, the loss handed to ``backward()``, tensor methods of
those, the parameters and gradients of a model on the GPU. :class:`StepFacts` answers "does
this run on every training step, under no condition?" with one guard policy: a test that holds
on every step of a GPU run does not count as a condition ("is CUDA there?", "is this the main
process?", a logging interval of 1, the branch that holds every optimizer's step).
"""
from __future__ import annotations

import re
from functools import cached_property

import libcst as cst

from advisor.apis import ACCELERATOR, FABRIC, LIGHTNING_TRAINER
from advisor.context import FileContext
from advisor.facts import Tri
from advisor.names import dotted_name
from advisor.values import string_value

_LOOPS = (cst.For, cst.While)
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


# A test that only asks "is this the main process?": the code under it still runs every
# step (on that process, which the others then wait for).
_MAIN_PROCESS_NAME = re.compile(r"main_process|master|(^|_)rank$|^rank|get_rank|is_main|local_main|global_zero", re.I)


# Functions named for evaluation, debugging or tests: not the training step.
_EVALUATION_FUNCTION = re.compile(r"eval|valid|test|infer|predict|sampl|generat|debug", re.I)


# How loss objects are usually named (``criterion``, ``loss_fn``, ``mse_loss``...).
_LOSS_CALLABLE = re.compile(r"criterion|loss", re.I)


# -- what runs every training step ---------------------------------------------------------
class StepFacts:
    """Which code runs every training step, and under no ``if`` (see the module docstring)."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._periodic_exits: dict[int, int | None] = {}

    def step_of(self, node: cst.CSTNode, together: "tuple[cst.CSTNode, ...] | list[cst.CSTNode]" = ()) -> cst.CSTNode | None:
        """The training loop (or per-step hook) ``node`` runs in every step, outside any
        ``if``; None when it does not, or when that cannot be told. ``together``: nodes that do
        the same thing as ``node``; an ``if`` / ``else`` whose every branch holds one of them
        runs it every step (``loss_ema = loss.item()`` in one branch, ``0.9 * loss_ema + 0.1 *
        loss.item()`` in the other)."""
        region = self.ctx.loops.step_region(node)
        if region is None:
            return None
        sites = (*region.calls, node)
        for site in sites[1:]:
            function = self.ctx.enclosing(site, cst.FunctionDef)
            if not isinstance(function, cst.FunctionDef) or function is region.node:
                continue
            if _EVALUATION_FUNCTION.search(function.name.value):
                return None  # ``validate(model)`` called from the loop is evaluation, not the step
        if all(self._unconditional(site, region.node, together) for site in sites):
            return region.node
        return None

    def _exhaustive(self, branch_of: cst.If, together) -> bool:
        """An ``if`` / ``elif`` / ``else`` chain (from its head) every branch of which holds one of ``together``."""
        head = branch_of
        while isinstance(self.ctx.parent.get(head), cst.If) and self.ctx.parent[head].orelse is head:
            head = self.ctx.parent[head]
        branches: list[cst.CSTNode] = [head.body]
        current = head.orelse
        while isinstance(current, cst.If):
            branches.append(current.body)
            current = current.orelse
        if current is None:
            return False
        branches.append(current.body)
        return all(any(self.ctx.is_descendant(t, branch) for t in together) for branch in branches)

    def _unconditional(self, node: cst.CSTNode, root: cst.CSTNode, together=()) -> bool:
        """Nothing between ``node`` and ``root`` (or the function holding ``node``) can skip it:
        no ``if`` but a main-process test, no ``except``, conditional expression or short circuit."""
        child = node
        for ancestor in self.ctx.ancestors(node):
            if ancestor is root or isinstance(ancestor, cst.FunctionDef):
                return True
            if isinstance(ancestor, (cst.Lambda, cst.ClassDef, cst.ExceptHandler)):
                return False
            if (
                isinstance(ancestor, cst.If)
                and child is not ancestor.test
                and (child is not ancestor.body or not self._always_taken_on_gpu(ancestor.test))
                and (child is not ancestor.orelse or self.ctx.facts.devices.gpu_test(ancestor.test) is not Tri.NO)
                and (id(ancestor), id(child)) not in self._step_branches
                and not (together and self._exhaustive(ancestor, together))
            ):
                return False
            if isinstance(ancestor, cst.IfExp) and child is not ancestor.test:
                # ``f"{loss.item():.2f}" if a else f"{loss.item():.4f}"``: one of them runs.
                branches = (ancestor.body, ancestor.orelse)
                if not (together and all(any(t is b or self.ctx.is_descendant(t, b) for t in together) for b in branches)):
                    return False
            if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
                return False
            if isinstance(ancestor, cst.IndentedBlock) and self._after_periodic_exit(ancestor, child):
                return False
            child = ancestor
        return True

    def _after_periodic_exit(self, block: cst.IndentedBlock, statement: cst.CSTNode) -> bool:
        """An earlier statement of the block leaves unless the step is the N-th: ``if (step - 1)
        % self.demo_every != 0: return`` at the top of stable-audio-tools' demo callback, whose
        ``finally: torch.cuda.empty_cache()`` then runs every N steps, not every step."""
        exit_at = self._periodic_exits.get(id(block), -1)
        if exit_at == -1:
            exit_at = self._periodic_exits[id(block)] = self._periodic_exit_index(block)
        if exit_at is None:
            return False
        return any(s is statement for s in block.body[exit_at + 1 :])

    def _periodic_exit_index(self, block: cst.IndentedBlock) -> int | None:
        for index, earlier in enumerate(block.body):
            if not isinstance(earlier, cst.If) or earlier.orelse is not None:
                continue
            body = earlier.body.body if isinstance(earlier.body, cst.IndentedBlock) else ()
            last = body[-1] if body else None
            exits = isinstance(last, cst.SimpleStatementLine) and any(
                isinstance(small, (cst.Return, cst.Continue)) for small in last.body
            )
            if exits and any(
                isinstance(operation.operator, cst.Modulo) for operation in self.ctx.walk(earlier.test, cst.BinaryOperation)
            ):
                return index
        return None

    @cached_property
    def _step_branches(self) -> set[tuple[int, int]]:
        """The ``if`` branches (as ``(id(if), id(branch))``) that hold the step of every
        optimizer of a training loop: under ``if (i + 1) % accum == 0:`` with the
        ``optimizer.step()`` in it, code runs every optimizer step, which is the training step."""
        found: set[tuple[int, int]] = set()
        for loop in self.ctx.loops.training_loops:
            optimizers = set(loop.optimizers)
            stepped: dict[tuple[int, int], set[str]] = {}
            stepped_outside: dict[tuple[int, int], set[str]] = {}
            events = loop.of_kind("step")
            event_branches: list[tuple[str, set[tuple[int, int]]]] = []
            for event in events:
                branches: set[tuple[int, int]] = set()
                for node in {event.call, event.site or event.call}:
                    child: cst.CSTNode = node
                    for ancestor in self.ctx.ancestors(node):
                        if ancestor is loop.node:
                            break
                        if isinstance(ancestor, cst.If) and child is not ancestor.test:
                            branches.add((id(ancestor), id(child)))
                        child = ancestor
                event_branches.append((event.target or "", branches))
                for branch in branches:
                    stepped.setdefault(branch, set()).add(event.target or "")
            for branch in stepped:
                stepped_outside[branch] = {target for target, branches in event_branches if branch not in branches}
            # DeCLIP's ``if resume:`` steps the optimizer a second time after a loss spike: the
            # step that runs every iteration is outside it, so the branch is a rare one.
            found.update(
                branch for branch, targets in stepped.items()
                if optimizers and optimizers <= targets and not optimizers & stepped_outside[branch]
            )
        return found

    def _always_taken_on_gpu(self, test: cst.BaseExpression) -> bool:
        """A test that holds every step of a GPU run: "is this the main process?" (the
        others wait for it), "is CUDA there?", a logging interval of 1 (nanoGPT's
        ``iter_num % log_interval == 0`` with ``log_interval = 1``), or a switch that is on
        unless the command line turns it off."""
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            return self._always_taken_on_gpu(test.left) and self._always_taken_on_gpu(test.right)
        if every_step_interval(self.ctx, test) is not None:
            return True
        if self._on_by_default(test):
            return True
        if self.ctx.facts.devices.gpu_test(test, switches=True) is Tri.YES:
            return True
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            sides = (test.left, test.comparisons[0].comparator)
            if isinstance(test.comparisons[0].operator, cst.Equal) and any(
                isinstance(side, cst.SimpleString) and string_value(side) in ("cuda", "gpu") for side in sides
            ):
                return True  # ``device.type == "cuda"``
        return self._main_process_test(test)

    def _on_by_default(self, test: cst.BaseExpression) -> bool:
        """``if use_nextlat:`` with ``use_nextlat: bool = True`` a Fire parameter, ``if
        args.clip_grad:`` with ``--clip_grad`` defaulting to 3.0: the branch runs every step
        of a run with the script's defaults. Only a switch, not an interval: a test with
        ``%`` is a logging condition whatever its divisor resolves to."""
        if not isinstance(test, (cst.Name, cst.Attribute, cst.UnaryOperation)):
            return False
        resolved = self.ctx.values.resolve(test)
        if resolved is None or resolved.origin not in ("argparse default", "constant"):
            return False
        value = resolved.value
        return value is True or (isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0)

    def _main_process_test(self, test: cst.BaseExpression) -> bool:
        """``if accelerator.is_main_process:``, ``if rank == 0:``, ``if master_process:``."""
        if any(isinstance(op.operator, cst.Modulo) for op in self.ctx.walk(test, cst.BinaryOperation)):
            return False
        found = False
        for name in self.ctx.walk(test, cst.Name):
            parent = self.ctx.parent.get(name)
            if isinstance(parent, cst.Attribute) and parent.value is name:
                continue  # a receiver: ``accelerator`` of ``accelerator.is_main_process``
            if not _MAIN_PROCESS_NAME.search(name.value):
                return False
            found = True
        return found


# -- which expressions hold CUDA tensors ---------------------------------------------------
# Methods and attributes of a tensor whose result lives on the host (or is no tensor).
_HOST_METHODS = frozenset(
    {
        "item", "tolist", "cpu", "numpy", "size", "dim", "ndimension", "numel", "nelement", "element_size",
        "get_device", "data_ptr", "is_contiguous", "stride", "storage_offset", "is_floating_point",
        "is_complex", "keys", "items", "values", "state_dict", "parameters", "named_parameters", "tobytes",
    }
)


_HOST_ATTRIBUTES = frozenset(
    {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "layout", "names", "is_leaf", "grad_fn"}
)


# torch functions that make a new tensor on the CPU unless given ``device=``.
_FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "full", "eye", "arange", "range", "linspace", "logspace", "rand", "randn",
        "randint", "randperm", "tensor", "as_tensor", "from_numpy", "Tensor", "FloatTensor", "LongTensor",
    }
)


# Methods only modules have: their receiver is no tensor.
_MODULE_METHODS = (
    "parameters", "named_parameters", "train", "eval", "state_dict", "load_state_dict", "modules",
    "children", "zero_grad", "apply", "register_buffer", "named_modules",
)


_TORCH_HOST_FUNCTIONS = frozenset({"is_tensor", "numel", "is_floating_point", "is_complex", "save", "load"})


# Each step follows an expression into its parts or a name to an earlier binding, so the
# walk ends; the bound only cuts very long chains of assignments.
MAX_DEPTH = 40


_DEVICE_COMPARISONS = (cst.Equal, cst.NotEqual, cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)


# Seeding torch's generators: the program wants the same random numbers run after run.
_SEEDS_TORCH = re.compile(rb"\bmanual_seed(?:_all)?[ \t]*\(|\bseed_everything[ \t]*\(|\bset_seed[ \t]*\(|use_deterministic_algorithms\(")


# Asking for bitwise-reproducible runs, not only seeded ones.
_ASKS_DETERMINISM = re.compile(
    rb"cudnn\.deterministic[ \t]*=[ \t]*True|use_deterministic_algorithms\([ \t]*True|\bdeterministic[ \t]*=[ \t]*True"
)


class TensorFacts:
    """Which expressions of a file certainly hold CUDA tensors computed on the GPU."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._known: dict[cst.CSTNode, bool] = {}

    @cached_property
    def seeded(self) -> bool:
        """Whether the program seeds torch's random numbers (``torch.manual_seed(args.seed)``,
        ``seed_everything``, ``set_seed``), in this file or in a file that runs with it: a draw
        moved from the host generator to the GPU's then gives other numbers for the same seed."""
        ctx = self.ctx
        if _SEEDS_TORCH.search(ctx.source.encode("utf-8", "replace")):
            return True
        return ctx.project is not None and (ctx.project.neighbourhood_matches(_SEEDS_TORCH) or ctx.project.runners_match(_SEEDS_TORCH))

    @cached_property
    def deterministic(self) -> bool:
        """Whether the program asks for run-to-run identical results (``cudnn.deterministic =
        True``, ``torch.use_deterministic_algorithms(True)``, ``deterministic=True`` to Lightning
        or ``set_seed``), in this file or in a file that runs it."""
        ctx = self.ctx
        if _ASKS_DETERMINISM.search(ctx.source.encode("utf-8", "replace")):
            return True
        return ctx.project is not None and ctx.project.runners_match(_ASKS_DETERMINISM)

    @cached_property
    def gpu_placed(self) -> bool:
        """The file puts its model or data on a CUDA device, or hands them to a framework that does."""
        ctx = self.ctx
        if not ctx.facts.devices.gpu.yes:
            return False
        if ctx.method_calls("cuda") or ctx.calls(ACCELERATOR, FABRIC, LIGHTNING_TRAINER):
            return True
        return any(self._to_cuda(call) for call in ctx.method_calls("to"))

    def _to_cuda(self, call: cst.Call) -> bool:
        device = self.to_device(call)
        return device is not None and self.ctx.facts.devices.on_gpu(device)

    def to_device(self, call: cst.Call) -> cst.BaseExpression | None:
        return self.ctx.facts.devices.move_target(call)

    @cached_property
    def models(self) -> set[str]:
        """Spellings of the models (and tensors) moved to the GPU or handed to a framework that moves them."""
        ctx = self.ctx
        found: set[str] = set()
        for call in ctx.method_calls("cuda", "to"):
            assert isinstance(call.func, cst.Attribute)
            if call.func.attr.value == "to" and not self._to_cuda(call):
                continue
            receiver = dotted_name(call.func.value)
            if receiver:
                found.add(receiver)
            target = _assigned_to(ctx, call)
            if target:
                found.add(target)
        for call in ctx.method_calls("prepare", "setup", "setup_module"):
            assert isinstance(call.func, cst.Attribute)
            if not ctx.loops.is_framework(call.func.value):
                continue
            found.update(dotted_name(arg.value) or "" for arg in call.args)
            parent = ctx.parent.get(call)
            if isinstance(parent, cst.Assign):
                for target in parent.targets:
                    found.update(_target_spellings(target.target))
        for _ in range(2):  # model = DDP(model); model = torch.compile(model)
            for assign in ctx.nodes(cst.Assign):
                value = assign.value
                if isinstance(value, cst.Call) and value.args and dotted_name(value.args[0].value) in found:
                    for target in assign.targets:
                        found.update(_target_spellings(target.target))
        found.discard("")
        return found

    @cached_property
    def _loss_bindings(self) -> set[tuple[int, str]]:
        """The bindings of the losses handed to backward (``loss.backward()``,
        ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``), and of the
        loss a Lightning ``training_step`` returns."""
        found: set[tuple[int, str]] = set()
        ctx = self.ctx
        losses = [
            loss
            for call in ctx.method_calls("backward", "manual_backward") + ctx.calls("torch.autograd.backward")
            for loss in _backward_losses(ctx, call)
        ]
        # timm's ``loss_scaler(loss, optimizer)`` runs backward on its first argument.
        losses += [c.args[0].value for c in ctx.loops.scaler_steps if c.args and c.args[0].keyword is None]
        for loss in losses:
            if isinstance(loss, cst.Name):
                self._add_loss_binding(found, loss, 0)
        for function in ctx.nodes(cst.FunctionDef):
            if function.name.value != "training_step":
                continue
            for statement in ctx.walk(function, cst.Return):
                value = statement.value
                if isinstance(value, cst.Dict):  # ``return {"loss": loss, ...}``
                    value = next(
                        (
                            e.value
                            for e in value.elements
                            if isinstance(e, cst.DictElement) and ctx.values.value_of(e.key) == "loss"
                        ),
                        None,
                    )
                if isinstance(value, cst.Name):
                    self._add_loss_binding(found, value, 0)
        return found

    def _add_loss_binding(self, found: set[tuple[int, str]], name: cst.Name, depth: int) -> None:
        """The binding of the loss ``name``, and the earlier ones it rescales: ``loss /= k``,
        ``loss = loss.mean()`` keep the loss what it was before."""
        binding = self.reaching(name)
        if binding is None or depth > 4:
            return
        found.add((id(binding), name.value))
        if isinstance(binding, cst.AugAssign):
            earlier = binding.target
        elif isinstance(binding, cst.Assign) and len(binding.targets) == 1:
            uses = [n for n in self.ctx.walk(binding.value, cst.Name) if n.value == name.value and reads_variable(self.ctx, n)]
            earlier = uses[0] if uses and isinstance(binding.targets[0].target, cst.Name) else None
        else:
            earlier = None
        if isinstance(earlier, cst.Name) and earlier.value == name.value:
            self._add_loss_binding(found, earlier, depth + 1)

    def reaching(self, name: cst.Name) -> cst.CSTNode | None:
        """The statement that last bound ``name`` before this use, in source order, in its scope."""
        ctx = self.ctx
        use = ctx.order[name]
        best: cst.CSTNode | None = None
        for binding in ctx.lookup(name.value, name):
            node = binding.node
            if isinstance(node, cst.CompFor):
                owner = _comprehension_of(ctx, node)
                if owner is None or not ctx.is_descendant(name, owner):
                    continue
            elif isinstance(node, cst.For):
                if not ctx.is_descendant(name, node):
                    continue
            elif ctx.order[node] >= use or ctx.is_descendant(name, node) or self._other_branch(node, name):
                continue
            if best is None or ctx.order[node] > ctx.order[best]:
                best = node
        return best

    def _other_branch(self, binding: cst.CSTNode, use: cst.CSTNode) -> bool:
        """The binding is in a branch of an ``if`` whose ``elif`` / ``else`` holds the use: it
        never runs before it (``value = torch.stack(value)`` in the ``if``, ``torch.tensor(value)``
        under ``elif not isinstance(value, torch.Tensor)``)."""
        ctx = self.ctx
        for ancestor in ctx.ancestors(binding):
            if isinstance(ancestor, cst.If) and ancestor.orelse is not None and ctx.is_descendant(binding, ancestor.body):
                return ctx.is_descendant(use, ancestor.orelse)
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)) or ctx.is_descendant(use, ancestor):
                return False
        return False

    @cached_property
    def _modules(self) -> set[str]:
        """Spellings that are called (``model(x)``) or used like modules (``model.train()``):
        ``model = Net().to(device)`` moves a module, not a tensor."""
        found: set[str] = set()
        for call in self.ctx.nodes(cst.Call):
            spelling = dotted_name(call.func)
            if spelling:
                found.add(spelling)
        for call in self.ctx.method_calls(*_MODULE_METHODS):
            spelling = dotted_name(call.func.value)  # type: ignore[attr-defined]
            if spelling:
                found.add(spelling)
        return found

    def on_device(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether ``expr`` certainly holds a CUDA tensor (see the module docstring)."""
        if depth > MAX_DEPTH or not self.gpu_placed:
            return False
        known = self._known.get(expr)
        if known is None:
            known = self._known[expr] = self._on_device(expr, depth)
        return known

    def _on_device(self, expr: cst.BaseExpression, depth: int) -> bool:
        if isinstance(expr, cst.Name):
            return self._name_on_device(expr, depth)
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in _HOST_ATTRIBUTES:
                return False
            return self.on_device(expr.value, depth + 1)
        if isinstance(expr, cst.Subscript):
            return self.on_device(expr.value, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            return self.on_device(expr.left, depth + 1) or self.on_device(expr.right, depth + 1)
        if isinstance(expr, cst.UnaryOperation):
            return not isinstance(expr.operator, cst.Not) and self.on_device(expr.expression, depth + 1)
        if isinstance(expr, cst.Comparison):
            if not all(isinstance(c.operator, _DEVICE_COMPARISONS) for c in expr.comparisons):
                return False
            return self.on_device(expr.left, depth + 1) or any(
                self.on_device(c.comparator, depth + 1) for c in expr.comparisons
            )
        if isinstance(expr, cst.Call):
            return self._call_on_device(expr, depth)
        return False

    def _name_on_device(self, name: cst.Name, depth: int) -> bool:
        if name.value in self._modules:
            return False
        binding = self.reaching(name)
        if binding is None:
            return False
        if (id(binding), name.value) in self._loss_bindings:
            return True
        if isinstance(binding, (cst.Assign, cst.AnnAssign)):
            value = binding.value
            if value is None:
                return False
            targets = [t.target for t in binding.targets] if isinstance(binding, cst.Assign) else [binding.target]
            for target in targets:
                if isinstance(target, cst.Name) and target.value == name.value:
                    return self.on_device(value, depth + 1)
                unpacked = unpacked_element(target, value, name.value)
                if unpacked is not None:
                    element, index = unpacked
                    if element is value and isinstance(value, cst.Call):
                        return self._element_on_device(value, index, depth + 1)
                    return self.on_device(element, depth + 1)
            return False
        if isinstance(binding, cst.AugAssign) and isinstance(binding.target, cst.Name):
            if self.on_device(binding.value, depth + 1):
                return True
            return self._name_on_device(binding.target, depth + 1)
        if isinstance(binding, cst.NamedExpr):
            return self.on_device(binding.value, depth + 1)
        if isinstance(binding, (cst.For, cst.CompFor)):
            return (
                self._gpu_parameter(binding, name.value)
                or self._prepared_batch(binding, name.value)
                or self._value_of_device_mapping(binding, name.value, depth)
            )
        return False

    def _value_of_device_mapping(self, loop: cst.For | cst.CompFor, name: str, depth: int) -> bool:
        """``for k, v in losses.items()`` / ``for v in losses.values()`` (also through a named
        tuple's ``_asdict()``) over a CUDA mapping, a model's loss breakdown: ``v`` is on the device."""
        iterable = loop.iter
        if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)) or iterable.args:
            return False
        method = iterable.func.attr.value
        if method == "items":
            target = loop.target
            if not (isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2):
                return False
            second = target.elements[1].value
            if not (isinstance(second, cst.Name) and second.value == name):
                return False
        elif method == "values":
            if not (isinstance(loop.target, cst.Name) and loop.target.value == name):
                return False
        else:
            return False
        mapping = iterable.func.value
        if (
            isinstance(mapping, cst.Call)
            and isinstance(mapping.func, cst.Attribute)
            and mapping.func.attr.value == "_asdict"
            and not mapping.args
        ):
            mapping = mapping.func.value
        return self.on_device(mapping, depth + 1)

    def _prepared_batch(self, loop: cst.For | cst.CompFor, name: str) -> bool:
        """A batch drawn from a loader Accelerate or Fabric prepared (``fabric.setup_dataloaders``,
        ``accelerator.prepare``): the framework has put it on the device."""
        if not isinstance(loop, cst.For):
            return False
        loaders = self.ctx.facts.loaders
        source, indexed = loaders.unwrap(loop.iter)
        spellings = {dotted_name(source)}
        spellings |= {loaders.name(call) for call in loaders.behind(source) or ()}
        if not any(loaders.handed_to_framework(spelling) for spelling in spellings if spelling):
            if not loaders.prepared(source):
                return False
        from advisor.facts.loaders import batch_target, target_names

        target = batch_target(loop.target, indexed)
        return target is not None and name in target_names(target)

    def _gpu_parameter(self, loop: cst.For | cst.CompFor, name: str) -> bool:
        """``for p in model.parameters()`` (through ``list``/``filter``/``sorted``) or
        ``for n, p in model.named_parameters()`` over a model on the GPU: ``p`` (and
        ``p.grad``) is a CUDA tensor."""
        iterable = loop.iter
        while isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.args:
            if iterable.func.value not in ("list", "tuple", "sorted", "filter") or self.ctx.lookup(
                iterable.func.value, iterable.func
            ):
                return False
            iterable = iterable.args[-1].value if iterable.func.value == "filter" else iterable.args[0].value
        if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)):
            return False
        method = iterable.func.attr.value
        if dotted_name(iterable.func.value) not in self.models:
            return False
        target = loop.target
        if method == "parameters":
            return isinstance(target, cst.Name) and target.value == name
        if method == "named_parameters" and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
            second = target.elements[1].value
            return isinstance(second, cst.Name) and second.value == name
        return False

    def _call_on_device(self, call: cst.Call, depth: int) -> bool:
        ctx = self.ctx
        func = call.func
        qualname = ctx.qualname(func) or ""
        if qualname.startswith("torch."):
            last = qualname.rsplit(".", 1)[-1]
            if last in _FACTORIES:
                device = ctx.keyword_arg(call, "device")
                return device is not None and ctx.facts.devices.on_gpu(device.value)
            if last in _TORCH_HOST_FUNCTIONS or qualname.startswith(("torch.cuda.", "torch.distributed.")):
                return False
            return self._any_argument_on_device(call, depth) or self._takes_model_parameters(call)
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in _HOST_METHODS:
                return False
            if method == "cuda":
                return True
            if method == "to":
                device = self.to_device(call)
                if device is not None:
                    return ctx.facts.devices.on_gpu(device)
                return self.on_device(func.value, depth + 1)
            if self.on_device(func.value, depth + 1):
                return True  # a tensor method: ``loss.detach()``, ``outputs.argmax(1)``
        if self._is_model(func, call):
            return True
        if isinstance(func, cst.Name) and func.value == "next" and len(call.args) == 1 and not ctx.lookup("next", call):
            return ctx.facts.loaders.prepared(call.args[0].value)  # ``batch = next(train_iterator)``
        function = self._local_function(call)
        if function is not None:
            return self._returns_on_device(function, depth)
        if self._is_loss_callable(func):
            return self._any_argument_on_device(call, depth)
        return False

    def _local_function(self, call: cst.Call) -> cst.FunctionDef | None:
        """The ``def`` of this file a call runs: a name bound once to it, or ``self.method``."""
        func = call.func
        if isinstance(func, cst.Name):
            bindings = self.ctx.lookup(func.value, func)
            if len(bindings) == 1 and isinstance(bindings[0].node, cst.FunctionDef):
                return bindings[0].node
        elif isinstance(func, cst.Attribute) and dotted_name(func.value) == "self":
            cls = self.ctx.enclosing(call, cst.ClassDef)
            body = cls.body.body if isinstance(cls, cst.ClassDef) and isinstance(cls.body, cst.IndentedBlock) else ()
            return next((s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == func.attr.value), None)
        return None

    def _element_on_device(self, call: cst.Call, index: int, depth: int) -> bool:
        """Element ``index`` of what ``call`` returns: of each returned tuple, for a function of
        this file; else the call's own result (a model's outputs)."""
        function = self._local_function(call)
        if function is None:
            return self.on_device(call, depth)
        returns = self._returns(function)
        return bool(returns) and all(
            isinstance(r.value, cst.Tuple)
            and len(r.value.elements) > index
            and self.on_device(r.value.elements[index].value, depth + 1)
            for r in returns
        )

    def _returns(self, function: cst.FunctionDef) -> list[cst.Return]:
        return [r for r in self.ctx.walk(function, cst.Return) if self.ctx.scope_of.get(r) is function]

    def _returns_on_device(self, function: cst.FunctionDef, depth: int) -> bool:
        """Every ``return`` of ``function`` hands back a CUDA tensor (``return loss`` of a train step)."""
        returns = self._returns(function)
        return bool(returns) and all(r.value is not None and self.on_device(r.value, depth + 1) for r in returns)

    def _takes_model_parameters(self, call: cst.Call) -> bool:
        """``clip_grad_norm_(model.parameters(), 1.0)``: the norm lives where the model does."""
        for arg in call.args:
            value = arg.value
            if (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute)
                and value.func.attr.value == "parameters"
                and dotted_name(value.func.value) in self.models
            ):
                return True
        return False

    def _any_argument_on_device(self, call: cst.Call, depth: int) -> bool:
        for arg in call.args:
            value = arg.value
            values = [e.value for e in value.elements] if isinstance(value, (cst.List, cst.Tuple)) else [value]
            if any(not isinstance(v, cst.StarredElement) and self.on_device(v, depth + 1) for v in values):
                return True
        return False

    def _is_model(self, func: cst.BaseExpression, call: cst.Call) -> bool:
        """A model the file moved to the GPU, or the LightningModule itself in its ``training_step``."""
        spelling = dotted_name(func)
        if spelling is None:
            return False
        spelling = spelling.removesuffix(".forward")
        if spelling in self.models:
            return True
        function = self.ctx.enclosing(call, cst.FunctionDef)
        lightning_step = isinstance(function, cst.FunctionDef) and function.name.value == "training_step"
        if lightning_step and (spelling == "self" or spelling.startswith("self.") and spelling.count(".") == 1):
            cls = self.ctx.enclosing(function, cst.ClassDef)
            body = cls.body.body if isinstance(cls, cst.ClassDef) and isinstance(cls.body, cst.IndentedBlock) else ()
            methods = {s.name.value for s in body if isinstance(s, cst.FunctionDef)}
            return spelling == "self" or spelling.split(".")[1] not in methods
        return False

    def _is_loss_callable(self, func: cst.BaseExpression) -> bool:
        """``criterion(...)``, ``loss_fn(...)``, an ``nn.*Loss`` object, ``nn.CrossEntropyLoss()(...)``."""
        if isinstance(func, cst.Call):
            return (self.ctx.qualname(func.func) or "").startswith("torch.nn.")
        spelling = dotted_name(func)
        if spelling is None:
            return False
        bound = self.ctx.bound_call(func) if isinstance(func, cst.Name) else None
        if bound is not None and (self.ctx.qualname(bound.func) or "").startswith("torch.nn."):
            return True
        return bool(_LOSS_CALLABLE.search(spelling.split(".")[-1]))


def reads_variable(ctx: FileContext, name: cst.Name) -> bool:
    """A read of the variable, not the attribute or keyword of that name."""
    parent = ctx.parent.get(name)
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return False
    return not (isinstance(parent, cst.Arg) and parent.keyword is name)


def _comprehension_of(ctx: FileContext, clause: cst.CompFor) -> cst.CSTNode | None:
    node: cst.CSTNode | None = clause
    while isinstance(node, (cst.CompFor, cst.CompIf)):
        node = ctx.parent.get(node)
    return node


def _assigned_to(ctx: FileContext, call: cst.Call) -> str | None:
    parent = ctx.parent.get(call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        return dotted_name(parent.targets[0].target)
    return None


def _target_spellings(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        found: set[str] = set()
        for element in target.elements:
            found |= _target_spellings(element.value)
        return found
    spelling = dotted_name(target)
    return {spelling} if spelling else set()


def unpacked_element(
    target: cst.BaseExpression, value: cst.BaseExpression, name: str
) -> tuple[cst.BaseExpression, int] | None:
    """What ``name`` gets from ``a, b = value``, and at which position: the matching element
    of a tuple value, or the value itself when that is one call (``logits, loss = model(x, y)``),
    a subscript or a name (``loss, logits = outputs[:2]``): an element of what it holds."""
    if not isinstance(target, (cst.Tuple, cst.List)):
        return None
    names = [e.value for e in target.elements]
    if any(isinstance(n, cst.StarredElement) for n in names):
        return None
    index = next((i for i, n in enumerate(names) if isinstance(n, cst.Name) and n.value == name), None)
    if index is None:
        # ``loss, (ar_loss, kl_loss) = model(x)``: an element of an element.
        index = next((i for i, n in enumerate(names) if isinstance(n, (cst.Tuple, cst.List)) and _binds_name(n, name)), None)
        if index is None:
            return None
        if isinstance(value, (cst.Tuple, cst.List)):
            if len(value.elements) != len(names):
                return None
            return unpacked_element(names[index], value.elements[index].value, name)
        return (value, index) if isinstance(value, (cst.Call, cst.Subscript, cst.Name, cst.Attribute)) else None
    if isinstance(value, (cst.Tuple, cst.List)):
        if len(value.elements) != len(names) or any(isinstance(e, cst.StarredElement) for e in value.elements):
            return None
        return value.elements[index].value, index
    # ``loss, logits = outputs[:2]``, ``x, y = batch``: elements of the value itself.
    return (value, index) if isinstance(value, (cst.Call, cst.Subscript, cst.Name, cst.Attribute)) else None


def _binds_name(target: cst.BaseExpression, name: str) -> bool:
    if isinstance(target, cst.Name):
        return target.value == name
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_binds_name(e.value, name) for e in target.elements)
    return False


def _backward_losses(ctx: FileContext, call: cst.Call) -> list[cst.BaseExpression]:
    """The losses a backward call differentiates."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return [call.args[0].value] if call.args else []  # torch.autograd.backward(loss)
    receiver = func.value
    if func.attr.value == "manual_backward" or ctx.loops.is_framework(receiver):
        return [call.args[0].value] if call.args else []
    if (
        isinstance(receiver, cst.Call)
        and isinstance(receiver.func, cst.Attribute)
        and receiver.func.attr.value == "scale"
        and receiver.args
    ):
        return [receiver.args[0].value]
    return [receiver]


def every_step_interval(ctx: FileContext, test: cst.BaseExpression) -> cst.BaseExpression | None:
    """The divisor of ``step % k == 0`` (or ``not step % k``) when ``k`` is certainly 1."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        modulo = test.expression
    elif (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, cst.Equal)
        and ctx.values.value_of(test.comparisons[0].comparator) == 0
    ):
        modulo = test.left
    else:
        return None
    if not (isinstance(modulo, cst.BinaryOperation) and isinstance(modulo.operator, cst.Modulo)):
        return None
    divisor = ctx.values.resolve(modulo.right)
    if divisor is None or divisor.value != 1 or isinstance(divisor.value, bool):
        return None
    return modulo.right
