"""Who owns the training step: a hand-written loop, the HF ``Trainer`` (and TRL's trainers),
Accelerate, Lightning, Fabric or DeepSpeed; whether it really runs, and where.

A *training site* (:class:`TrainingSite`) is one place a file trains a model: a training loop
(``ctx.loops``), a ``TrainingArguments`` whose trainer runs ``train()``, an ``Accelerator`` /
``Fabric`` / ``deepspeed.initialize`` driving a loop, or a Lightning ``Trainer`` that ``fit``s.
Each site carries where it runs (:class:`advisor.facts.devices.Where`) as the device facts
tell it, so that every rule gets the same answer to "is this trained on a GPU?".
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from advisor.apis import ACCELERATOR, FABRIC, LIGHTNING_TRAINER_BUILDERS, TRAINING_ARGUMENTS
from advisor.facts.devices import Where
from advisor.loops import TrainingLoop
from advisor.names import dotted_name

if TYPE_CHECKING:
    from advisor.context import FileContext

# Who runs the training step at a site.
LOOP = "loop"  # a hand-written training loop
HF_TRAINER = "trainer"  # transformers TrainingArguments / TRL config + trainer.train()
ACCELERATE = "accelerate"  # an Accelerator driving a training loop
LIGHTNING_FIT = "lightning"  # a Lightning Trainer that fits
FABRIC_LOOP = "fabric"  # a Lightning Fabric driving a training loop
DEEPSPEED = "deepspeed"  # deepspeed.initialize driving a training loop
DELEGATED = "delegated"  # a call to a function of another project module that runs a training loop

_HF_TRAINER_QUALNAME = re.compile(r"^(transformers|trl)\.(\w+\.)*\w*Trainer$")
LIGHTNING_MODULES = ("lightning.pytorch.LightningModule", "lightning.pytorch.LightningDataModule")
# What a module that runs a training loop must say somewhere (a text test before parsing it).
# A module that can hold a training loop shows a backward pass and an optimizer step (or a
# timm-style loss scaler, which does both) somewhere in its text.
_TRAINS = re.compile(
    rb"\A(?=[\s\S]*?(?:backward\s*\(|scaler\w*\s*\())(?=[\s\S]*?(?:\.step\s*\(|scaler\w*\s*\())"
)


# What a file that hands training to another module names: an optimizer or a trainer to pass,
# a ``train...(`` / ``fit(`` / ``run(`` call. Files without any of these are not parsed for it.
_HANDS_OVER_TRAINING = re.compile(r"optim|[Tt]rainer|[Tt]rain\w*\(|\bfit\(|\.run\w*\(")


def is_hf_trainer_class(qualname: str | None) -> bool:
    """``transformers.Trainer`` / ``Seq2SeqTrainer`` and TRL's ``*Trainer`` classes."""
    return bool(qualname) and bool(_HF_TRAINER_QUALNAME.match(qualname or "")) and not (qualname or "").endswith(
        "Callback"
    )


@dataclass(frozen=True, eq=False)
class TrainingSite:
    """One place where a file trains a model.

    ``kind`` says who runs the training step (the constants above); ``anchor`` is where a
    finding about this training belongs (the loop, or the framework's constructor call);
    ``config`` is the framework call that holds its settings (``TrainingArguments(...)``,
    ``Accelerator(...)``, Lightning ``Trainer(...)`` / ``Fabric(...)``,
    ``deepspeed.initialize(...)``), None for a hand-written loop; ``loops`` the training
    loops it drives, where the file has them; ``where`` where it runs."""

    kind: str
    anchor: cst.CSTNode
    config: cst.Call | None = None
    loops: tuple[TrainingLoop, ...] = ()
    where: Where = Where.UNKNOWN
    # For a delegated site: the project module whose function runs the loop.
    elsewhere: "FileContext | None" = None

    @property
    def on_gpu(self) -> bool:
        return self.where.gpu


@dataclass(frozen=True)
class _MethodBinding:
    """A method of a class of another module, as a binding the callers can read ``.node`` of."""

    node: cst.FunctionDef
    value: None = None
    # The call that built the instance (``Trainer(config, model, dataset)``) and its class.
    constructor: cst.Call | None = None
    owner: cst.ClassDef | None = None


class FrameworkFacts:
    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx
        self._constructors: dict[cst.Call, tuple[cst.Call, cst.ClassDef]] = {}

    # -- HF Trainer and TRL -----------------------------------------------------------------
    @cached_property
    def local_hf_trainer_classes(self) -> set[str]:
        """Classes of this file that subclass an HF / TRL trainer (``class MyTrainer(Trainer)``)."""
        return {
            cls.name.value
            for cls in self.ctx.nodes(cst.ClassDef)
            if any(is_hf_trainer_class(q) for q in self.ctx.base_qualnames(cls))
        }

    def is_hf_trainer_call(self, call: cst.Call) -> bool:
        func = call.func
        if is_hf_trainer_class(self.ctx.qualname(func)):
            return True
        return isinstance(func, cst.Name) and func.value in self.local_hf_trainer_classes

    @cached_property
    def hf_trainer_calls(self) -> list[cst.Call]:
        """``Trainer(...)`` of transformers or TRL, or of a class of this file that subclasses one."""
        return [call for call in self.ctx.nodes(cst.Call) if self.is_hf_trainer_call(call)]

    def runs(self, call: cst.Call, method: str) -> bool:
        """``x = Framework(...); x.<method>(...)``, or ``Framework(...).<method>(...)``."""
        ctx = self.ctx
        parent = ctx.parent.get(call)
        if isinstance(parent, cst.Attribute) and parent.value is call and parent.attr.value == method:
            return True
        if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and parent.value is call):
            return False
        name = dotted_name(parent.targets[0].target)
        return name is not None and any(
            isinstance(c.func, cst.Attribute) and dotted_name(c.func.value) == name for c in ctx.method_calls(method)
        )

    @cached_property
    def hf_trainer_trains(self) -> bool:
        """Whether the file runs ``train()`` on an HF / TRL trainer: one of its trainer calls, or a
        receiver named for a trainer (built elsewhere). ``TrainingArguments`` alone may serve evaluation."""
        if any(self.runs(call, "train") for call in self.hf_trainer_calls):
            return True
        for call in self.ctx.method_calls("train"):
            receiver = call.func.value  # type: ignore[attr-defined]
            if "trainer" in (dotted_name(receiver) or "").split(".")[-1].lower():
                bound = self.ctx.bound_call(receiver)
                if bound is None or self.is_hf_trainer_call(bound):
                    return True
        return False

    def _only_evaluates(self, arguments: cst.Call) -> bool:
        """Every trainer seen taking these ``TrainingArguments`` only evaluates or predicts: none
        runs ``train()`` (granite-tsfm's notebook evaluates the published PatchTST with one set of
        arguments, then trains another model with a second)."""
        users = [trainer for trainer in self.hf_trainer_calls if self._arguments_of(trainer) is arguments]
        if not users or any(self.runs(trainer, "train") for trainer in users):
            return False
        return all(self.runs(trainer, "evaluate") or self.runs(trainer, "predict") for trainer in users)

    def _arguments_of(self, trainer: cst.Call) -> cst.Call | None:
        """The ``TrainingArguments(...)`` call a trainer's ``args`` is, directly or through the
        name's last assignment before the trainer in the same scope (a notebook reuses ``train_args``)."""
        ctx = self.ctx
        value = ctx.argument(trainer, "args", 1)
        if isinstance(value, cst.Call):
            return value
        if not isinstance(value, cst.Name):
            return None
        before = [
            b.value for b in ctx.lookup(value.value, trainer)
            if isinstance(b.node, cst.Assign) and b.value is not None and ctx.order[b.node] < ctx.order[trainer]
        ]
        if not before:
            return None
        latest = max(before, key=lambda v: ctx.order[v])
        return latest if isinstance(latest, cst.Call) else None

    @cached_property
    def parsed_training_arguments(self) -> list[cst.Name]:
        """Names bound by ``HfArgumentParser(...).parse_args_into_dataclasses()`` to the file's own
        ``TrainingArguments`` subclass (Alpaca, FastChat): the fields it declares have defaults
        the file shows; the ones it inherits stay unknown."""
        found = []
        for name, cls in self.ctx.values.parsed_dataclasses():
            if cls is not None and any(q in TRAINING_ARGUMENTS for q in self.ctx.base_qualnames(cls)):
                found.append(name)
        return found

    @cached_property
    def trains(self) -> bool:
        """Anything in the file trains: a backward pass, a GradScaler, an optimizer stepped or
        zeroed, an HF / TRL trainer or a Lightning ``Trainer``."""
        from advisor.facts.precision import file_trains

        return file_trains(self.ctx) or bool(self.hf_trainer_calls) or bool(self.lightning_trainers)

    # -- Lightning ------------------------------------------------------------------------------
    @cached_property
    def lightning_trainers(self) -> list[cst.Call]:
        return self.ctx.calls(*LIGHTNING_TRAINER_BUILDERS)

    def lightning_fits(self, call: cst.Call) -> bool:
        return self.runs(call, "fit")

    @cached_property
    def uses_lightning(self) -> bool:
        """Lightning and Fabric own the loop, accumulation and zeroing (or the file is theirs)."""
        return any(
            target.split(".")[0] in ("lightning", "pytorch_lightning", "lightning_fabric")
            for target in self.ctx.imports.aliases.values()
        )

    def fabric_loop(self, loop: TrainingLoop) -> bool:
        """A loop whose backward is ``fabric.backward(loss)``: Fabric scales the loss for mixed
        precision only. It never zeroes gradients and, unlike ``accelerator.backward``, does not
        divide by accumulation steps, so the loop is judged like one calling ``loss.backward()``."""
        return any(
            isinstance(e.call.func, cst.Attribute) and self.ctx.loops.is_fabric(e.call.func.value)
            for e in loop.events
            if e.kind == "backward"
        )

    def lightning_owns(self, loop: TrainingLoop) -> bool:
        """Whether Lightning may zero and accumulate for ``loop`` (the file uses Lightning and the
        loop is not a Fabric loop)."""
        return self.uses_lightning and not self.fabric_loop(loop)

    @cached_property
    def lightning_modules(self) -> list[cst.ClassDef]:
        """The file's ``LightningModule`` / ``LightningDataModule`` classes (also through its own bases)."""
        return [
            cls
            for cls in self.ctx.nodes(cst.ClassDef)
            if any(q in LIGHTNING_MODULES for q in self.ctx.base_qualnames(cls))
        ]

    # -- training sites -------------------------------------------------------------------------
    @cached_property
    def sites(self) -> list[TrainingSite]:
        """Where the file trains a model, in order of discovery:

        - ``TrainingArguments`` (or a TRL config) in a file that runs ``trainer.train()``;
        - an ``Accelerator``, a ``Fabric`` or ``deepspeed.initialize`` with a training loop or a
          framework ``backward``;
        - a Lightning ``Trainer`` that ``fit``s;
        - a training loop that no framework drives.

        Inference-only files give nothing."""
        ctx = self.ctx
        devices = ctx.facts.devices
        loops = tuple(ctx.loops.training_loops)
        trains = bool(loops) or ctx.loops.framework_backward
        found: list[TrainingSite] = []
        if self.hf_trainer_trains:
            for call in ctx.calls(*TRAINING_ARGUMENTS):
                if not self._only_evaluates(call):
                    found.append(TrainingSite(HF_TRAINER, call, call, (), devices.framework_setting(call)))
        if trains:
            for call in ctx.calls(ACCELERATOR):
                found.append(TrainingSite(ACCELERATE, call, call, loops, devices.framework_setting(call)))
            for call in ctx.calls(FABRIC):
                found.append(TrainingSite(FABRIC_LOOP, call, call, loops, devices.framework_setting(call)))
            for call in ctx.calls("deepspeed.initialize"):
                found.append(TrainingSite(DEEPSPEED, call, call, loops, Where.CUDA))
        for call in self.lightning_trainers:
            if self.lightning_fits(call):
                found.append(TrainingSite(LIGHTNING_FIT, call, call, (), devices.framework_setting(call)))
        where = Where.CUDA if devices.places_on_gpu else Where.UNKNOWN
        if loops and not ctx.calls(ACCELERATOR, FABRIC, "deepspeed.initialize"):
            for loop in loops:
                if not self.framework_backward(loop):
                    found.append(TrainingSite(LOOP, loop.node, None, (loop,), where))
        for call, other, _ in self.delegated_training:
            # The loop runs in the other module: where it puts the model when this file does not say.
            delegated = where if where is not Where.UNKNOWN else Where.CUDA_IF_AVAILABLE if other.facts.devices.gpu.yes else where
            if delegated is not Where.CUDA and self._hands_over_the_cpu(call):
                delegated = Where.CPU
            found.append(TrainingSite(DELEGATED, call, None, (), delegated, other))
        return found

    # -- training in another module of the project ----------------------------------------------
    @cached_property
    def delegated_training(self) -> list[tuple[cst.Call, "FileContext", cst.FunctionDef]]:
        """Calls of this file to a function of another project module that runs a training loop
        (``engine.train_step(model, loader, loss_fn, optimizer, device)``): the call, the other
        module's context and the function."""
        project = self.ctx.project
        if project is None or not _HANDS_OVER_TRAINING.search(self.ctx.source) or not self.ctx.facts.devices.runs:
            return []  # only a file that runs hands its training over
        found = []
        # One resolution per spelling and scope: a file calls the same few names many times.
        resolutions: dict[tuple[str | None, int], object] = {}
        for call in self.ctx.nodes(cst.Call):
            if not isinstance(call.func, (cst.Name, cst.Attribute)):
                continue
            key = (dotted_name(call.func), id(self.ctx.scope_of.get(call)))
            if key[0] is None or key not in resolutions:
                # ``trainer.run()``: the receiver's one assignment in this scope decides, the same
                # for every call of that spelling here.
                resolutions[key] = project.binding(call.func, _TRAINS) or self._project_method(call)
            resolved = resolutions[key]
            if resolved is None:
                continue
            other, binding = resolved
            if isinstance(binding.node, cst.FunctionDef) and other.facts.frameworks.function_trains(binding.node):
                found.append((call, other, binding.node))
                if isinstance(binding, _MethodBinding) and binding.constructor is not None:
                    self._constructors[call] = (binding.constructor, binding.owner)
        return found

    def _hands_over_the_cpu(self, call: cst.Call) -> bool:
        """A file that names only CPU devices hands one to the trainer (augmented-neural-odes'
        notebook: ``device = torch.device('cpu')``, then ``Trainer(model, optimizer, device)``):
        the other module puts the model where it is told."""
        devices = self.ctx.facts.devices
        if not devices.gpu.no:
            return False
        built, _ = self.handed_over_through(call)
        handed = (call,) if built is call else (call, built)  # ``Trainer(model, opt, device).train(...)``
        return any(devices.where(arg.value) is Where.CPU for each in handed for arg in each.args)

    def handed_over_through(self, call: cst.Call) -> tuple[cst.Call, cst.ClassDef | None]:
        """For a call of :attr:`delegated_training`, the call whose arguments the trainer receives
        and the trainer's class: ``Trainer(config, model, dataset)`` and ``Trainer`` for
        ``trainer.run()``; the call itself and None for a function."""
        self.delegated_training  # noqa: B018 (fills ``_constructors``)
        return self._constructors.get(call, (call, None))

    def _project_method(self, call: cst.Call):
        """``trainer.run()`` where ``trainer = Trainer(...)`` builds a class of another project
        module (minGPT's ``Trainer``), or ``Trainer(...).run()``: that module's context and the
        method's binding."""
        func = call.func
        if not isinstance(func, cst.Attribute):
            return None
        # ``TrainLoop(...).run_loop()`` (improved-diffusion) builds and runs in one expression.
        built = func.value if isinstance(func.value, cst.Call) else None
        if built is None and isinstance(func.value, cst.Name):
            built = self.ctx.single_assignment(func.value)
        if not isinstance(built, cst.Call) or not isinstance(built.func, (cst.Name, cst.Attribute)):
            return None
        found = self.ctx.project.binding(built.func, _TRAINS)  # type: ignore[union-attr]
        if found is None or not isinstance(found[1].node, cst.ClassDef):
            return None
        other, binding = found
        cls = binding.node
        body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
        for statement in body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == func.attr.value:
                return other, _MethodBinding(statement, None, built, cls)
        return None

    def function_trains(self, function: cst.FunctionDef, depth: int = 0) -> bool:
        """Whether a training loop of this file runs inside ``function``, or in a function of the
        file it calls (``train()`` calling ``train_step()`` every epoch)."""
        ctx = self.ctx
        if any(ctx.is_descendant(loop.node, function) for loop in ctx.loops.training_loops):
            return True
        if depth >= 3:
            return False
        for call in ctx.walk(function, cst.Call):
            callee = ctx.loops.callee(call)
            if callee is not None and callee is not function and self.function_trains(callee, depth + 1):
                return True
        return False

    def stepped_parameters(self, function: cst.FunctionDef, depth: int = 0) -> dict[str, int | None]:
        """The parameters of ``function`` (name -> position, as callers pass them) that a training
        loop inside it steps as an optimizer."""
        positions = self.ctx.passed_positions(function)
        found: dict[str, int | None] = {}
        for loop in self.ctx.loops.training_loops:
            if self.ctx.is_descendant(loop.node, function):
                for optimizer in loop.optimizers:
                    if optimizer in positions:
                        found[optimizer] = positions[optimizer]
        if depth < 3:
            # ``train(model, loader, optimizer)`` passing its parameter on to ``train_step``.
            for call in self.ctx.walk(function, cst.Call):
                callee = self.ctx.loops.callee(call)
                if callee is None or callee is function:
                    continue
                for name, position in self.stepped_parameters(callee, depth + 1).items():
                    passed = self.ctx.argument(call, name, position)
                    spelling = dotted_name(passed) if isinstance(passed, cst.BaseExpression) else None
                    if spelling in positions and spelling not in found:
                        found[spelling] = positions[spelling]
        return found

    def framework_backward(self, loop: TrainingLoop) -> bool:
        """A loop whose backward belongs to an engine built elsewhere: ``accelerator.backward(loss)``,
        ``fabric.backward``, a DeepSpeed ``model_engine.backward(loss)``, Lightning's
        ``self.manual_backward(loss)``. That engine owns the device and the precision."""
        for event in loop.of_kind("backward"):
            func = event.call.func
            if not isinstance(func, cst.Attribute):
                continue
            if func.attr.value == "manual_backward" or self.ctx.loops.is_framework(func.value):
                return True
            if "engine" in (dotted_name(func.value) or "").split(".")[-1].lower():
                return True
        return False

    @cached_property
    def gpu_sites(self) -> list[TrainingSite]:
        """The training sites that run on a CUDA GPU."""
        return [site for site in self.sites if site.on_gpu]
