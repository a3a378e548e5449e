"""The shared model of "the training loop", so that rules do not each guess.

A training loop is the innermost ``for``/``while`` that reaches both a backward call
(``loss.backward()``, ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``,
``fabric.backward(loss)``) and an optimizer ``step()``, either in its own body or through
helper functions of the same file called from it: ``train_step(batch)``, a function
defined in the enclosing one, ``self.train_step(batch)`` on the class the loop sits in,
and the helpers those call (a few levels deep). A loop whose helper runs a training loop
of its own (``for epoch ...: train_one_epoch(model, loader, opt)``) is an epoch loop, not
a training loop: the events belong to the helper's loop. For each loop the model lists
the events in source order, with the statements and conditions they sit under, and
tells when the loop accumulates gradients through an inner micro-step loop (nanoGPT).

"Does this code run every training step?" is :meth:`TrainingLoopModel.per_step` (and
:meth:`TrainingLoopModel.step_region` for where and under which ``if`` statements): code in a
training loop's body, in a helper called from it (through up to three helpers), or
in a hook a framework calls every step, where the framework itself runs
backward, step and zero_grad: Lightning's ``training_step`` (and the per-batch hooks of
a ``LightningModule`` or ``Callback``), the ``training_step`` / ``compute_loss`` of an HF
``Trainer`` subclass, a ``TrainerCallback``'s ``on_step_*``. Those hooks are not
training loops: rules about the order of backward/step/zero_grad never see them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Iterator, Literal

import libcst as cst

from advisor.names import dotted_name

if TYPE_CHECKING:
    from advisor.context import FileContext

EventKind = Literal["backward", "step", "zero_grad"]

_LOOPS = (cst.For, cst.While)
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_OPTIMIZER_NAME = re.compile(r"(^|_)(optim|optimizer|optimiser|opt)(s|\d*)?($|_)|optimizer|optimiser", re.I)
_NOT_OPTIMIZER_NAME = re.compile(r"sched|scaler|lr_|warmup|env|game|sim", re.I)
_OPTIMIZER_QUALNAMES = (
    "torch.optim.",
    "bitsandbytes.optim.",
    "transformers.AdamW",
    "transformers.Adafactor",
    "transformers.optimization.",
    "apex.optimizers.",
    "deepspeed.ops.adam.",
)
# Frameworks whose backward() owns loss scaling; Accelerate's also divides by its accumulation
# steps, Fabric's does not (see ``is_fabric``).
FABRIC = "lightning.fabric.Fabric"
FRAMEWORK_BACKWARD = ("accelerate.Accelerator", FABRIC)
# How a micro-step loop says what it is: ``for micro_step in range(grad_accum_steps)``.
_ACCUMULATION_NAME = re.compile(r"accum|micro", re.I)
# How deep helper calls are followed from a loop body (``train_step`` -> ``_backward``...).
_HELPER_DEPTH = 3
# Base classes whose methods of these names a framework calls once (or more) per training
# step, running backward / step / zero_grad itself (canonical spellings, see advisor.names).
_LIGHTNING_BATCH_HOOKS = (
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
)
_HF_TRAINER_HOOKS = ("training_step", "compute_loss")
_PER_STEP_HOOKS: dict[str, tuple[str, ...]] = {
    "lightning.pytorch.LightningModule": ("training_step", "optimizer_step", "backward", *_LIGHTNING_BATCH_HOOKS),
    "lightning.pytorch.Callback": _LIGHTNING_BATCH_HOOKS,
    "lightning.pytorch.callbacks.Callback": _LIGHTNING_BATCH_HOOKS,
    "transformers.Trainer": _HF_TRAINER_HOOKS,
    "transformers.Seq2SeqTrainer": _HF_TRAINER_HOOKS,
    "transformers.TrainerCallback": (
        "on_step_begin",
        "on_step_end",
        "on_substep_end",
        "on_pre_optimizer_step",
        "on_optimizer_step",
    ),
}
_TRL_TRAINER = re.compile(r"^trl\.(\w+\.)*\w*Trainer$")


@dataclass
class Event:
    kind: EventKind
    call: cst.Call
    # Which optimizer (step, zero_grad) by its spelling, e.g. "optimizer" or "self.opt";
    # None when it cannot be told (``model.zero_grad()`` applies to any optimizer).
    target: str | None
    statement: cst.CSTNode  # the statement of the loop body (any depth) that holds the call
    guards: tuple[cst.If, ...]  # ``if`` statements between the loop and the call
    in_nested_loop: bool
    via_helper: cst.FunctionDef | None = None
    # Compound statements between the loop (or the helper's ``def``) and the call,
    # outermost first: ``with``, ``if``, ``try``, nested loops...
    enclosing: tuple[cst.BaseCompoundStatement, ...] = ()
    # Where the event happens in the loop body: the call itself, or the call of the
    # helper that holds it. Events are ordered by it.
    site: cst.CSTNode | None = None
    # A timm-style ``loss_scaler(loss, optimizer)`` runs backward and (maybe) step in one call.
    by_scaler: bool = False
    # The calls of helpers it is reached through, outermost first (``_epoch()``, ``self._fit()``,
    # ``self._gradient_step()``).
    chain: tuple[cst.Call, ...] = ()

    @property
    def conditional(self) -> bool:
        return bool(self.guards)

    @property
    def straight_line(self) -> bool:
        """Runs every time its body runs: only ``with`` blocks around it (no ``if``, ``try``, loop)."""
        return all(isinstance(node, cst.With) for node in self.enclosing)

    @property
    def direct(self) -> bool:
        """A straight-line statement of the loop body itself, not inside a helper."""
        return self.via_helper is None and self.straight_line


@dataclass
class TrainingLoop:
    node: cst.For | cst.While
    events: list[Event] = field(default_factory=list)

    def of_kind(self, kind: EventKind, direct_only: bool = False) -> list[Event]:
        return [e for e in self.events if e.kind == kind and not (direct_only and e.via_helper)]

    @property
    def iterable(self) -> cst.BaseExpression | None:
        return self.node.iter if isinstance(self.node, cst.For) else None

    @property
    def optimizers(self) -> list[str]:
        seen: list[str] = []
        for event in self.events:
            if event.kind == "step" and event.target and event.target not in seen:
                seen.append(event.target)
        return seen

    @property
    def scaler_owned(self) -> bool:
        """Backward and step run inside a loss-scaler object of the script (timm's
        ``NativeScaler``, DeiT, MAE), which decides when it steps (``update_grad=``): the order
        of the calls is not the loop's to judge."""
        return any(event.by_scaler for event in self.events)


@dataclass(frozen=True)
class StepRegion:
    """Where a node runs every training step (see :meth:`TrainingLoopModel.step_region`)."""

    # The training loop, or the hook function a framework calls every step.
    node: cst.CSTNode
    loop: TrainingLoop | None
    # Helper calls from the region down to the function holding the node, outermost first.
    calls: tuple[cst.Call, ...] = ()
    # ``if`` statements between the region and the node, at every call site on the way.
    guards: tuple[cst.If, ...] = ()
    # The framework runs backward, step and zero_grad (a Lightning / Trainer hook).
    framework: bool = False

    @property
    def conditional(self) -> bool:
        return bool(self.guards)


@dataclass
class MicroStepLoop:
    """Gradient accumulation through an inner loop (nanoGPT): the training loop steps once
    per iteration, after ``for micro_step in range(k)`` ran every backward of it."""

    node: cst.For
    steps: cst.BaseExpression  # k, as ``range(k)`` spells it


def fixed_at_one(ctx: "FileContext", steps: cst.BaseExpression) -> bool:
    """k that is fixed at 1 in the file: every micro-step steps, nothing accumulates.
    A command-line default of 1 is not fixed: the loop is written for larger values."""
    value = ctx.values.resolve(steps)
    return value is not None and value.value == 1 and value.origin != "argparse default"


class TrainingLoopModel:
    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx

    # -- what objects are -----------------------------------------------------------------
    @cached_property
    def _constructors(self) -> dict[str, list[cst.Call]]:
        found: dict[str, list[cst.Call]] = {}
        for prefix in _OPTIMIZER_QUALNAMES:
            for call in self.ctx.calls_with_prefix(prefix):
                qualname = self.ctx.qualname(call.func) or ""
                if "scheduler" in qualname.lower() or ".swa_utils." in qualname:
                    continue
                target = _assigned_name(self.ctx, call)
                if target:
                    found.setdefault(target, []).append(call)
        return found

    @cached_property
    def optimizer_names(self) -> set[str]:
        """Names bound to an optimizer constructor (``optimizer = torch.optim.AdamW(...)``)."""
        return set(self._constructors)

    def optimizer_constructors(self, spelling: str) -> list[cst.Call]:
        """The constructor calls assigned to ``spelling`` (``self.opt`` also matches ``opt = ...``)."""
        exact = self._constructors.get(spelling)
        if exact:
            return list(exact)
        last = spelling.split(".")[-1]
        return [c for name, calls in self._constructors.items() if name.split(".")[-1] == last for c in calls]

    def is_optimizer(self, spelling: str) -> bool:
        last = spelling.split(".")[-1]
        if spelling in self.optimizer_names or last in self.optimizer_names:
            return True
        return bool(_OPTIMIZER_NAME.search(last)) and not _NOT_OPTIMIZER_NAME.search(last)

    def is_framework(self, receiver: cst.BaseExpression) -> bool:
        """``accelerator`` / ``fabric`` objects, by constructor or by their usual names."""
        call = self.ctx.bound_call(receiver, *FRAMEWORK_BACKWARD)
        if call is not None:
            return True
        name = dotted_name(receiver) or ""
        return name.split(".")[-1] in ("accelerator", "fabric")

    def is_fabric(self, receiver: cst.BaseExpression) -> bool:
        """A Lightning ``Fabric`` among :meth:`is_framework`'s objects. Unlike ``accelerator.backward``,
        ``fabric.backward(loss)`` does not divide by accumulation steps, and Fabric never zeroes gradients."""
        if self.ctx.bound_call(receiver, FABRIC) is not None:
            return True
        name = dotted_name(receiver) or ""
        return name.split(".")[-1] == "fabric" and self.ctx.bound_call(receiver, *FRAMEWORK_BACKWARD) is None

    @cached_property
    def framework_backward(self) -> bool:
        return any(
            isinstance(c.func, cst.Attribute) and self.is_framework(c.func.value)
            for c in self.ctx.method_calls("backward")
        )

    # -- events -------------------------------------------------------------------------------
    def _event_for(self, call: cst.Call) -> tuple[EventKind, str | None] | None:
        func = call.func
        if not isinstance(func, cst.Attribute):
            if self.ctx.qualname(func) == "torch.autograd.backward":
                return ("backward", None)
            return None
        method = func.attr.value
        receiver = dotted_name(func.value)
        # loss.backward(), scaler.scale(loss).backward(), accelerator.backward(loss),
        # Lightning's self.manual_backward(loss)
        if method in ("backward", "manual_backward"):
            return ("backward", None)
        if method == "zero_grad":
            if receiver is None:
                return None
            return ("zero_grad", receiver if self.is_optimizer(receiver) else None)
        if method == "step":
            if receiver is None:
                return None
            if is_scaler(self.ctx, func.value) and call.args:
                inner = dotted_name(call.args[0].value)
                return ("step", inner) if inner else None
            if self.is_optimizer(receiver):
                return ("step", receiver)
        return None

    @cached_property
    def scaler_steps(self) -> dict[cst.Call, str]:
        """timm's ``loss_scaler(loss, optimizer, ...)`` (DeiT, MAE): one call of an object named
        for a scaler runs backward and step. Each call, with the optimizer it steps."""
        found: dict[cst.Call, str] = {}
        for call in self.ctx.nodes(cst.Call):
            name = (dotted_name(call.func) or "").split(".")[-1].lower()
            if "scaler" not in name or (
                isinstance(call.func, cst.Attribute) and call.func.attr.value in ("scale", "step", "update", "unscale_")
            ):
                continue
            for arg in call.args:
                spelling = dotted_name(arg.value) if arg.keyword is None else None
                if spelling and self.is_optimizer(spelling):
                    found[call] = spelling
                    break
        return found

    def _events_under(self, root: cst.CSTNode, loop: cst.CSTNode | None) -> list[Event]:
        events: list[Event] = []
        calls = self.ctx.method_calls("backward", "manual_backward", "step", "zero_grad")
        described_calls = [(call, self._event_for(call)) for call in calls + self.ctx.calls("torch.autograd.backward")]
        for call, optimizer in self.scaler_steps.items():
            described_calls += [(call, ("backward", None)), (call, ("step", optimizer))]
        for call, described in described_calls:
            if described is None or not self.ctx.is_descendant(call, root):
                continue
            path = self._scope_path(call, root)
            statement = self.ctx.statement_of(call)
            if path is None or statement is None or statement is root:
                continue  # in a nested scope, or in the loop's own header
            guards, enclosing, nested = path
            events.append(
                Event(
                    described[0],
                    call,
                    described[1],
                    statement,
                    tuple(guards),
                    nested,
                    enclosing=tuple(enclosing),
                    site=call,
                    by_scaler=call in self.scaler_steps,
                )
            )
        events.sort(key=lambda e: (self.ctx.order[e.call], e.kind != "backward"))
        return events

    def position(self, event: Event) -> tuple[int, int]:
        """Sort key of an event in its loop: where it happens in the body, then in its helper."""
        return (self.ctx.order[event.site or event.call], self.ctx.order[event.call])

    def function_events(self, function: cst.FunctionDef) -> list[Event]:
        """Events in ``function``'s own body, their guards and ``enclosing`` counted from its ``def``."""
        return self._events_under(function, None)

    # -- the file's call graph --------------------------------------------------------------
    def callee(self, call: cst.Call) -> cst.FunctionDef | None:
        """The function of this file a call runs: ``helper(...)`` where ``helper`` is bound once,
        to a ``def`` (module level or in an enclosing function), or ``self.method(...)`` on the
        class the call sits in (or a base class of the file)."""
        func = call.func
        if isinstance(func, cst.Name):
            bindings = self.ctx.lookup(func.value, func)
            if len(bindings) == 1 and isinstance(bindings[0].node, cst.FunctionDef):
                return bindings[0].node
            return None
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            cls = self.ctx.enclosing(call, cst.ClassDef)
            if isinstance(cls, cst.ClassDef):
                return self._method(cls, func.attr.value, 0)
        return None

    def _method(self, cls: cst.ClassDef, name: str, depth: int) -> cst.FunctionDef | None:
        if depth > 3 or not isinstance(cls.body, cst.IndentedBlock):
            return None
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
                return statement
        for base in cls.bases:
            bindings = self.ctx.lookup(base.value.value, base.value) if isinstance(base.value, cst.Name) else []
            if len(bindings) == 1 and isinstance(bindings[0].node, cst.ClassDef):
                found = self._method(bindings[0].node, name, depth + 1)
                if found is not None:
                    return found
        return None

    @cached_property
    def _callers(self) -> dict[int, list[cst.Call]]:
        """Call sites of each function of the file (by ``id`` of its ``def``)."""
        found: dict[int, list[cst.Call]] = {}
        for call in self.ctx.nodes(cst.Call):
            function = self.callee(call)
            if function is not None and not self.ctx.is_descendant(call, function):
                found.setdefault(id(function), []).append(call)
        return found

    def callers(self, function: cst.FunctionDef) -> list[cst.Call]:
        """The calls of the file that run ``function`` (as :meth:`callee` resolves them)."""
        return list(self._callers.get(id(function), ()))

    def _calls_in(self, root: cst.CSTNode) -> list[cst.Call]:
        """Calls that run when ``root`` runs: not those inside nested ``def``/``lambda``/``class``."""
        return [c for c in self.ctx.walk(root, cst.Call) if self._scope_path(c, root) is not None]

    def _scope_path(
        self, node: cst.CSTNode, root: cst.CSTNode
    ) -> tuple[list[cst.If], list[cst.BaseCompoundStatement], bool] | None:
        """The ``if`` statements and compound statements between ``root`` and ``node``
        (outermost first), and whether a loop is among them; None when a nested scope is
        in the way."""
        guards: list[cst.If] = []
        enclosing: list[cst.BaseCompoundStatement] = []
        nested = False
        for ancestor in self.ctx.ancestors(node):
            if ancestor is root:
                break
            if isinstance(ancestor, _SCOPES):
                return None
            if isinstance(ancestor, cst.BaseCompoundStatement):
                enclosing.append(ancestor)
            if isinstance(ancestor, cst.If):
                guards.append(ancestor)
            elif isinstance(ancestor, _LOOPS):
                nested = True
        return list(reversed(guards)), list(reversed(enclosing)), nested

    def _helper_events(self, loop: cst.CSTNode) -> list[Event]:
        events: list[Event] = []
        for call in self.ctx.walk(loop, cst.Call):
            statement = self.ctx.statement_of(call)
            for event in self._called_events(call, 1, frozenset({id(loop)})):
                event.statement = statement or event.statement
                event.site = call
                event.chain = (call, *event.chain)
                events.append(event)
        return events

    def _called_events(self, call: cst.Call, depth: int, visiting: frozenset[int]) -> list[Event]:
        """Events in the helper ``call`` runs and, through their calls, in the helpers it calls;
        guards and enclosing statements of the inner call sites are kept with the events."""
        helper = self.callee(call)
        if helper is None or id(helper) in visiting or self.ctx.is_descendant(call, helper):
            return []
        events = self._events_under(helper, None)
        for event in events:
            event.via_helper = helper
        if depth < _HELPER_DEPTH:
            for inner in self._calls_in(helper):
                path = self._scope_path(inner, helper)
                if path is None:
                    continue
                guards, enclosing, nested = path
                for event in self._called_events(inner, depth + 1, visiting | {id(helper)}):
                    event.guards = (*guards, *event.guards)
                    event.enclosing = (*enclosing, *event.enclosing)
                    event.in_nested_loop = event.in_nested_loop or nested
                    event.site = inner
                    event.chain = (inner, *event.chain)
                    events.append(event)
        return sorted(events, key=lambda e: (self.ctx.order[e.site or e.call], self.ctx.order[e.call]))

    @cached_property
    def training_loops(self) -> list[TrainingLoop]:
        reached: dict[int, list[Event]] = {}
        nodes: list[cst.CSTNode] = [node for loop_type in _LOOPS for node in self.ctx.nodes(loop_type)]
        for node in nodes:
            events = self._events_under(node, node) + self._helper_events(node)
            kinds = {e.kind for e in events}
            if "backward" in kinds and "step" in kinds:
                reached[id(node)] = events
        loop_nodes = [n for n in nodes if id(n) in reached]
        candidates: list[TrainingLoop] = []
        for node in loop_nodes:
            # Events of a helper that runs a training loop of its own belong to that loop:
            # ``for epoch ...: train_one_epoch(...)`` is an epoch loop, and so is rl-agents'
            # ``for self.epoch ...: self._epoch()`` whose ``_fit`` loops over ``_gradient_step()``.
            events = [
                e
                for e in reached[id(node)]
                if e.via_helper is None
                or not any(
                    other is not node and self.ctx.is_descendant(site, other) for other in loop_nodes for site in (e.call, *e.chain[1:])
                )
            ]
            kinds = {e.kind for e in events}
            if "backward" in kinds and "step" in kinds:
                # Helper events sit where the helper is called, in the helper's own order.
                candidates.append(TrainingLoop(node, sorted(events, key=self.position)))
        # Keep the innermost: an epoch loop around a step loop is not itself the step loop.
        innermost = [
            loop
            for loop in candidates
            if not any(other is not loop and self.ctx.is_descendant(other.node, loop.node) for other in candidates)
        ]
        return sorted(innermost, key=lambda l: self.ctx.order[l.node])

    def micro_step_loop(self, loop: TrainingLoop, optimizer: str) -> MicroStepLoop | None:
        """The inner loop ``loop`` accumulates ``optimizer``'s gradients through, if any.

        Every ``step()`` of ``optimizer`` is a straight-line statement of ``loop``, every
        backward of ``loop`` sits in one ``for <micro> in range(k)`` that is itself a
        straight-line statement of it, and the loop or k is named for accumulation
        (``micro_step``, ``grad_accum_steps``): an inner loop over tasks or ensemble
        members sums their gradients on purpose. Not accumulation: k fixed at 1, an inner
        loop that ``break``s (a retry), that steps any optimizer, or that reads or writes
        ``.grad`` by hand or calls ``torch.autograd.grad`` (adversarial or meta-learning
        inner loops)."""
        steps = [e for e in loop.events if e.kind == "step" and e.target == optimizer]
        backwards = [e for e in loop.events if e.kind == "backward"]
        if not steps or not backwards or not all(e.direct for e in steps):
            return None
        inner = self._enclosing_for(backwards[0], loop)
        if inner is None or not all(self.ctx.is_descendant(e.site or e.call, inner) for e in backwards):
            return None
        if any(self.ctx.is_descendant(e.site or e.call, inner) for e in loop.events if e.kind == "step"):
            return None
        k = _range_count(inner.iter)
        if k is None or fixed_at_one(self.ctx, k):
            return None
        named = [n.value for n in self.ctx.walk(inner.target, cst.Name)] + [(dotted_name(k) or "").split(".")[-1]]
        if not any(_ACCUMULATION_NAME.search(name) for name in named):
            return None
        if inner.orelse is not None or self._breaks(inner) or self._touches_gradients(inner):
            return None
        return MicroStepLoop(inner, k)

    def _enclosing_for(self, event: Event, loop: TrainingLoop) -> cst.For | None:
        """The ``for`` between ``loop`` and ``event`` when it is the only compound statement
        there besides ``with`` blocks, and runs every iteration of ``loop``."""
        site = event.site or event.call
        found: cst.For | None = None
        for ancestor in self.ctx.ancestors(site):
            if ancestor is loop.node:
                return found
            if isinstance(ancestor, _SCOPES):
                return None
            if found is None:
                if isinstance(ancestor, cst.For):
                    found = ancestor
            elif isinstance(ancestor, cst.BaseCompoundStatement) and not isinstance(ancestor, cst.With):
                return None  # the inner loop is itself under an ``if``/``try``/loop
        return None

    def _breaks(self, inner: cst.For) -> bool:
        """Whether ``inner`` may stop before k iterations: a ``break`` of its own, a ``return``."""
        exits: list[cst.CSTNode] = [*self.ctx.walk(inner.body, cst.Break), *self.ctx.walk(inner.body, cst.Return)]
        for node in exits:
            stops = _LOOPS + _SCOPES if isinstance(node, cst.Break) else _SCOPES
            owner = next((a for a in self.ctx.ancestors(node) if isinstance(a, stops)), None)
            if owner is inner or (
                isinstance(node, cst.Return) and (owner is None or not self.ctx.is_descendant(owner, inner))
            ):
                return True
        return False

    def _touches_gradients(self, inner: cst.For) -> bool:
        if any(a.attr.value == "grad" for a in self.ctx.walk(inner, cst.Attribute)):
            return True
        return any(self.ctx.qualname(c.func) == "torch.autograd.grad" for c in self.ctx.walk(inner, cst.Call))

    def accumulation_divisor(self, loop: TrainingLoop) -> cst.BaseExpression | None:
        """``k`` of the ``if (i + 1) % k == 0`` that guards every optimizer step of the loop."""
        steps = [e for e in loop.of_kind("step", direct_only=True) if not e.in_nested_loop]
        if not steps or self.accumulate_context(steps[0].call):
            return None
        divisors = []
        for event in steps:
            found = next((d for d in (modulo_divisor(g.test) for g in event.guards) if d is not None), None)
            if found is None:
                return None
            divisors.append(found)
        first = self.ctx.code(divisors[0])
        return divisors[0] if all(self.ctx.code(d) == first for d in divisors) else None

    def loop_of(self, node: cst.CSTNode) -> TrainingLoop | None:
        for loop in self.training_loops:
            if self.ctx.is_descendant(node, loop.node):
                return loop
        return None

    def accumulate_context(self, node: cst.CSTNode, accelerate_only: bool = False) -> bool:
        """Whether ``node`` runs inside ``with accelerator.accumulate(...)`` / ``fabric.no_backward_sync``
        (DDP's ``no_sync()``): a sign of gradient accumulation. ``accelerate_only``: only Accelerate's
        ``accumulate``, under which its prepared optimizer skips ``step()`` / ``zero_grad()`` on
        micro-steps; Fabric's and DDP's contexts only skip the gradient all-reduce."""
        methods = ("accumulate",) if accelerate_only else ("accumulate", "no_backward_sync", "no_sync")
        return any(
            isinstance(call.func, cst.Attribute) and call.func.attr.value in methods for call in self.context_calls(node)
        )

    def context_calls(self, node: cst.CSTNode) -> Iterator[cst.Call]:
        """The calls in the items of the ``with`` statements around ``node``, innermost first;
        ``with model.no_sync() if not last else nullcontext():`` gives both calls."""
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, cst.With):
                for item in ancestor.items:
                    yield from [item.item] if isinstance(item.item, cst.Call) else self.ctx.walk(item.item, cst.Call)

    # -- what runs every training step -------------------------------------------------------
    def per_step(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` runs every training step (possibly under an ``if``: see
        :meth:`step_region` for the guards)."""
        return self.step_region(node) is not None

    def step_region(self, node: cst.CSTNode) -> StepRegion | None:
        """Where ``node`` runs every training step: in the body of a training loop, in a
        function of the file called from one (through up to a few helpers), or in a hook a
        framework calls every step (Lightning ``training_step``, an HF ``Trainer`` subclass's
        ``compute_loss``...). None when it does not, or when that cannot be told."""
        return self._step_region(node, 0, frozenset())

    def _step_region(self, node: cst.CSTNode, depth: int, visiting: frozenset[int]) -> StepRegion | None:
        function: cst.FunctionDef | None = None
        guards: list[cst.If] = []
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, _LOOPS):
                loop = self._loop_at(ancestor)
                if loop is not None and self._in_loop_body(node, ancestor):
                    return StepRegion(ancestor, loop, guards=tuple(reversed(guards)))
            if isinstance(ancestor, cst.If):
                guards.append(ancestor)
            if isinstance(ancestor, (cst.Lambda, cst.ClassDef)):
                return None
            if isinstance(ancestor, cst.FunctionDef):
                function = ancestor
                break
        if function is None or id(function) in visiting:
            return None
        inside = tuple(reversed(guards))
        if self._is_per_step_hook(function):
            return StepRegion(function, None, guards=inside, framework=True)
        if depth >= _HELPER_DEPTH:
            return None
        for call in self._callers.get(id(function), ()):
            outer = self._step_region(call, depth + 1, visiting | {id(function)})
            if outer is not None:
                return StepRegion(
                    outer.node,
                    outer.loop,
                    calls=(*outer.calls, call),
                    guards=(*outer.guards, *inside),
                    framework=outer.framework,
                )
        return None

    def _loop_at(self, node: cst.CSTNode) -> TrainingLoop | None:
        return next((loop for loop in self.training_loops if loop.node is node), None)

    def _in_loop_body(self, node: cst.CSTNode, loop: cst.For | cst.While) -> bool:
        """In the part of a loop that runs every iteration: the body (and a ``while`` test),
        not the iterable, the target or the ``else``."""
        if self.ctx.is_descendant(node, loop.body) or node is loop.body:
            return True
        return isinstance(loop, cst.While) and (node is loop.test or self.ctx.is_descendant(node, loop.test))

    def _is_per_step_hook(self, function: cst.FunctionDef) -> bool:
        cls = self.ctx.parent.get(self.ctx.parent.get(function))  # def -> IndentedBlock -> class
        if not isinstance(cls, cst.ClassDef):
            return False
        name = function.name.value
        return any(name in hooks for hooks in self._framework_bases(cls))

    def _framework_bases(self, cls: cst.ClassDef) -> list[tuple[str, ...]]:
        """The per-step hook names of the framework classes ``cls`` derives from."""
        found: list[tuple[str, ...]] = []
        for qualname in self.ctx.base_qualnames(cls):
            if qualname in _PER_STEP_HOOKS:
                found.append(_PER_STEP_HOOKS[qualname])
            elif _TRL_TRAINER.match(qualname):
                found.append(_HF_TRAINER_HOOKS)
        return found

    def iterated_loaders(self) -> list[cst.BaseExpression]:
        """The iterables the training loops draw batches from (``for batch in loader``)."""
        found = []
        for loop in self.training_loops:
            for node in [loop.node, *self.ctx.ancestors(loop.node)]:
                if isinstance(node, cst.For):
                    found.append(node.iter)
        return found


def _assigned_name(ctx: "FileContext", call: cst.Call) -> str | None:
    parent = ctx.parent.get(call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        return dotted_name(parent.targets[0].target)
    if isinstance(parent, cst.AnnAssign):
        return dotted_name(parent.target)
    return None


def _range_count(iterable: cst.BaseExpression) -> cst.BaseExpression | None:
    """k of ``range(k)`` / ``range(0, k)`` when it is a name, an attribute or an integer."""
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "range"):
        return None
    args = iterable.args
    if any(arg.keyword is not None or arg.star for arg in args):
        return None
    if len(args) == 2 and isinstance(args[0].value, cst.Integer) and args[0].value.evaluated_value == 0:
        args = args[1:]
    if len(args) != 1 or not isinstance(args[0].value, (cst.Name, cst.Attribute, cst.Integer)):
        return None
    return args[0].value


def is_scaler(ctx: "FileContext", receiver: cst.BaseExpression) -> bool:
    """A GradScaler: bound to its constructor, or named like one (``scaler``, ``self.grad_scaler``)."""
    if ctx.bound_call(receiver, "torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.GradScaler"):
        return True
    name = dotted_name(receiver) or ""
    return "scaler" in name.split(".")[-1].lower()


NO_GRAD = ("torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad")


def under_no_grad(ctx: "FileContext", node: cst.CSTNode) -> bool:
    """Whether ``node`` runs with autograd off: inside ``with torch.no_grad():`` /
    ``torch.inference_mode()``, or in a function decorated with either."""
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, cst.With):
            for item in ancestor.items:
                managed = item.item.func if isinstance(item.item, cst.Call) else item.item
                if _names_no_grad(ctx, managed):
                    return True
        elif isinstance(ancestor, cst.FunctionDef):
            for decorator in ancestor.decorators:
                expression = decorator.decorator
                expression = expression.func if isinstance(expression, cst.Call) else expression
                if _names_no_grad(ctx, expression):
                    return True
                # A project's own wrapper named for it (YOLOv5's ``@smart_inference_mode()``,
                # which picks ``torch.inference_mode`` or ``torch.no_grad`` by version).
                spelling = (dotted_name(expression) or "").rsplit(".", 1)[-1]
                if _NO_GRAD_WRAPPER.search(spelling):
                    return True
    return False


_NO_GRAD_WRAPPER = re.compile(r"inference_mode|no_grad", re.I)


def _names_no_grad(ctx: "FileContext", expression: cst.BaseExpression) -> bool:
    """``torch.no_grad`` by import, or by spelling where the file never binds ``torch`` (scArches'
    ``classifier.py`` writes ``with torch.no_grad():`` and imports only ``torch.optim as optim``;
    the name fails at run time either way, and the author meant autograd off)."""
    qualname = ctx.qualname(expression)
    if qualname is not None:
        return qualname in NO_GRAD
    return dotted_name(expression) in NO_GRAD


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
