"""DataLoaders: which ``DataLoader(...)`` an iterable is, its role (training or evaluation), its
dataset (in memory, iterable, on the GPU), its settings, and who consumes it.

"Which loader does this loop draw from?" has one answer (:meth:`LoaderFacts.behind`) for every
rule: through ``enumerate`` / ``tqdm`` wrappers, names, ``self.x`` attributes, unpacking from
``accelerator.prepare`` / ``fabric.setup_dataloaders``, and parameters (what every caller of
the file passes; a function called from nowhere the file shows matches by the parameter's name).
A loader is a *training* loader (:meth:`LoaderFacts.is_training`) when a training loop draws
from it, when Lightning trains on it (``train_dataloader()``, ``fit(train_dataloaders=...)``),
or when it is named or shuffled like one outside evaluation code.
"""
from __future__ import annotations

import functools
import os
import re
from functools import cached_property
from typing import TYPE_CHECKING, Callable

import libcst as cst

from advisor.apis import DATALOADER, DATALOADER_POSITION, LIGHTNING_TRAINER_BUILDERS
from advisor.context import MISSING
from advisor.facts import per_node
from advisor.facts.devices import Where
from advisor.facts.environment import declares_at_least
from advisor.loops import under_no_grad
from advisor.names import dotted_name
from advisor.project import MODULE_LEVEL
from advisor.values import Value

if TYPE_CHECKING:
    from advisor.context import FileContext

_TRAINING_NAME = re.compile(r"train", re.I)
_EVALUATION_NAME = re.compile(r"val|eval|test|dev(?!ice)|infer|pred|score|calib", re.I)
_PROGRESS_WRAPPERS = ("tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.rich.tqdm", "rich.progress.track")
# ``cycle(loader)``: itertools' or the usual ``def cycle(dl): while True: yield from dl``.
_ITERATION_WRAPPERS = {"enumerate", "tqdm", "iter", "cycle", "track", "progress_bar", "skip_first_batches"}
# A module whose text has no DataLoader cannot return one: not parsed for that question.
_BUILDS_LOADERS = re.compile(rb"DataLoader\(")
# Datasets that must not get workers blindly: iterable ones yield every sample once per
# worker unless they shard themselves; in-memory tensors are indexed faster in-process.
_ITERABLE_PREFIXES = ("webdataset.", "torchdata.", "torch.utils.data.datapipes.", "streaming.")
_ITERABLE_DATASETS = (
    "trl.ConstantLengthDataset",
    "trl.trainer.ConstantLengthDataset",
    "trl.trainer.utils.ConstantLengthDataset",
)
IN_MEMORY_DATASETS = ("torch.utils.data.TensorDataset",)
# Data sets of torchvision that decode an image file per item.
IMAGE_FOLDER_DATASETS = frozenset(
    f"torchvision.datasets.{name}"
    for name in (
        "ImageFolder", "DatasetFolder", "folder.ImageFolder", "ImageNet", "CocoDetection", "CocoCaptions",
        "VOCSegmentation", "VOCDetection", "Cityscapes", "CelebA", "LSUN", "Places365", "StanfordCars",
        "Flowers102", "Food101", "OxfordIIITPet", "INaturalist", "SBDataset", "WIDERFace",
    )
)
# A module that decodes image files: PIL, OpenCV, imageio, scikit-image, torchvision.io.
_DECODES_IMAGES = re.compile(r"\bImage\.open\s*\(|\bcv2\.imread\s*\(|\bimread\s*\(|\bread_image\s*\(|\bdecode_(?:image|jpeg|png)\s*\(|\bpil_loader\s*\(|\bdefault_loader\s*\(")
# The methods through which a Dataset class hands out (or prepares) its items.
_ITEM_METHODS = ("__init__", "__getitem__", "__getitems__", "__iter__", "__next__")
# How deep calls to the file's own functions are followed.
_CALL_DEPTH = 3
# Lightning hooks whose loaders only ``trainer.test(...)`` / ``trainer.predict(...)`` draw from.
_LIGHTNING_ON_DEMAND_LOADERS = {"test_dataloader": "test", "predict_dataloader": "predict"}
_LIGHTNING_MODULES = ("LightningModule", "LightningDataModule")
_PREPARE_METHODS = ("prepare", "prepare_data_loader", "setup_dataloaders")
# The text of a file that may copy a batch to a device.
# What an in-memory dataset's ``__getitem__`` may call and still only index what it holds.
# A process's rank, by the names scripts give it: ``rank``, ``local_rank``, ``args.gpu_rank``.
_RANK = re.compile(r"rank", re.I)
_CHEAP_BUILTINS = frozenset({"len", "int", "float", "min", "max", "range", "slice", "tuple", "list", "super"})
# Torch functions that return a new tensor from data (a loader over one indexes it in memory).
_TENSOR_BUILDERS = frozenset(
    f"torch.{name}" for name in (
        "cat", "concat", "concatenate", "stack", "hstack", "vstack", "tensor", "as_tensor", "from_numpy",
        "arange", "randn", "rand", "randint", "randperm", "zeros", "ones", "empty", "full", "linspace",
    )
)
_CHEAP_TENSOR_METHODS = frozenset({
    "long", "float", "int", "bool", "half", "clone", "contiguous", "view", "reshape", "unsqueeze", "squeeze",
    "size", "item", "numel", "flatten", "t", "transpose", "permute", "type", "tolist", "copy",
})
def builtin_call(ctx: "FileContext", expr: cst.BaseExpression, *names: str) -> bool:
    """``range(...)`` / ``list(...)`` calling the builtin (the file binds no such name)."""
    return (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Name)
        and expr.func.value in names
        and not ctx.lookup(expr.func.value, expr.func)
    )


def local_class(ctx: "FileContext", expr: cst.BaseExpression) -> cst.ClassDef | None:
    if isinstance(expr, cst.Name):
        bindings = ctx.lookup(expr.value, expr)
        if len(bindings) == 1 and isinstance(bindings[0].node, cst.ClassDef):
            return bindings[0].node
    return None


def defining_class(
    ctx: "FileContext", func: cst.BaseExpression, needle: "re.Pattern[bytes] | None" = None
) -> "tuple[FileContext, cst.ClassDef] | None":
    """The class a call of ``func`` builds, with the context of the file defining it: a class of
    this file, else of another module of the project (whose text must match ``needle``)."""
    cls = local_class(ctx, func)
    if cls is not None:
        return ctx, cls
    if ctx.project is None or not isinstance(func, (cst.Name, cst.Attribute)):
        return None
    found = ctx.project.binding(func, needle)
    if found is None or not isinstance(found[1].node, cst.ClassDef):
        return None
    return found[0], found[1].node


def class_methods(ctx: "FileContext", cls: cst.ClassDef, names: tuple[str, ...], depth: int = 0) -> list[cst.FunctionDef]:
    """``cls``'s methods of these names, its own or those of base classes the file defines."""
    if depth > 3 or not isinstance(cls.body, cst.IndentedBlock):
        return []
    found = [s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value in names]
    for base in cls.bases:
        inner = local_class(ctx, base.value)
        if inner is not None:
            found.extend(class_methods(ctx, inner, names, depth + 1))
    return found


# A ``pin_memory=`` argument commented out inside the DataLoader call.
_COMMENTED_PIN = re.compile(r"#\s*pin_memory\s*=")


def _commented_in(ctx: "FileContext", call: cst.Call, pattern: re.Pattern[str]) -> bool:
    """A comment matching ``pattern`` on the lines of ``call`` (positions only where one matches:
    they walk the statement, which a file nested too deep for that cannot afford)."""
    comments = ctx.comments_matching(pattern)
    if not comments:
        return False
    first, _, last, _ = ctx.position(call)
    return any(first <= ctx.position(comment)[0] <= last for comment in comments)


# torchvision's data sets of image files, whose items are PIL images unless a transform makes tensors.
_IMAGE_FOLDERS = frozenset({
    "torchvision.datasets.ImageFolder", "torchvision.datasets.DatasetFolder",
    "torchvision.datasets.folder.ImageFolder", "torchvision.datasets.folder.DatasetFolder",
})
# Transforms that take a PIL image and give one back.
_PIL_TRANSFORMS = frozenset(
    f"torchvision.transforms.{name}" for name in (
        "Resize", "CenterCrop", "RandomCrop", "RandomResizedCrop", "RandomHorizontalFlip", "RandomVerticalFlip",
        "ColorJitter", "Grayscale", "RandomGrayscale", "RandomRotation", "Pad", "FiveCrop", "TenCrop",
    )
)


# Decoded images a batch that pinning in the training process pays for: the measured 38.5 MB
# batches were 64 images of 224 x 224; half as many is the least taken on trust.
_LARGE_IMAGE_BATCH = 32


class LoaderFacts:
    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx
        # While ``feeding`` runs: factory functions of other project modules are followed, and
        # the loaders found there are kept with the facts of the file that builds them.
        self._across = False
        self._foreign: dict[cst.Call, LoaderFacts] = {}

    def feeding(self, expr: cst.BaseExpression) -> list[tuple["LoaderFacts", cst.Call]] | None:
        """The DataLoaders an iterated expression can be, each with the facts of the file that
        builds it: as :meth:`behind`, and through factory functions of other project modules
        (``data_loader = get_loader(...)`` with ``get_loader`` in ``data_loader.py``)."""
        self._across, self._foreign = True, {}
        try:
            calls = self.behind(expr)
        finally:
            self._across = False
        if calls is None:
            return None
        return [(self._foreign.get(call, self), call) for call in calls]

    # -- which loader -----------------------------------------------------------------------
    def unwrap(self, expr: cst.BaseExpression) -> tuple[cst.BaseExpression, bool]:
        """The loader behind ``enumerate(...)`` / ``tqdm(...)``, and whether an index comes first."""
        ctx = self.ctx
        indexed = False
        while isinstance(expr, cst.Call) and expr.args and expr.args[0].keyword is None and not expr.args[0].star:
            callee = dotted_name(expr.func)
            if callee == "enumerate":
                indexed = True
            elif callee != "tqdm" and ctx.qualname(expr.func) not in _PROGRESS_WRAPPERS:
                break
            expr = expr.args[0].value
        return expr, indexed

    def behind(
        self, expr: cst.BaseExpression, depth: int = 0, visiting: frozenset[int] = frozenset()
    ) -> list[cst.Call] | None:
        """The ``DataLoader(...)`` calls an iterated expression can be, or None if any path is unknown.

        Sees through ``enumerate``/``tqdm``, names, ``accelerator.prepare`` /
        ``fabric.setup_dataloaders`` (called on the loader, or unpacked), ``self.x``
        attributes, and parameters (``def train(model, train_loader)``) through the file's
        calls of the function; a function the file never calls matches by the parameter's
        name with the loaders the file assigns to that name. A binding met again while
        resolving itself (``loader = prepare(loader)``) adds nothing."""
        ctx = self.ctx
        if depth > 8:
            return None
        if isinstance(expr, cst.Call):
            if ctx.qualname(expr.func) == DATALOADER:
                return [expr]
            func_name = (dotted_name(expr.func) or "").split(".")[-1]
            if func_name in _ITERATION_WRAPPERS and expr.args and not expr.args[0].star:
                return self.behind(expr.args[0].value, depth + 1, visiting)
            if ctx.qualname(expr.func) in _PROGRESS_WRAPPERS and expr.args and not expr.args[0].star:
                return self.behind(expr.args[0].value, depth + 1, visiting)
            if func_name in _PREPARE_METHODS and len(expr.args) == 1 and not expr.args[0].star:
                return self.behind(expr.args[0].value, depth + 1, visiting)
            return self._returned_by(expr, None, depth, visiting)
        if isinstance(expr, cst.Name):
            bindings = ctx.lookup(expr.value, expr)
            if not bindings:
                return None
            if all(isinstance(b.node, cst.Param) for b in bindings):
                found = self._passed_as(bindings[0].node, depth, visiting)  # type: ignore[arg-type]
                return found if found is not None else self._assigned_by_name(expr.value)
            found: list[cst.Call] = []
            for binding in bindings:
                if id(binding.node) in visiting:
                    continue
                inner_visiting = visiting | {id(binding.node)}
                if binding.value is not None:
                    inner = self.behind(binding.value, depth + 1, inner_visiting)
                elif isinstance(binding.node, cst.Assign):
                    inner = self._unpacked_from_prepare(binding.node, expr.value, depth, inner_visiting)
                    if inner is None:
                        inner = self._unpacked_from_function(binding.node, expr.value, depth, inner_visiting)
                elif isinstance(binding.node, cst.Param):
                    inner = self._passed_as(binding.node, depth, inner_visiting)
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
                target = assignment.targets[0].target
                if isinstance(target, (cst.Tuple, cst.List)):
                    inner = self._unpacked_from_prepare(assignment, name or "", depth, visiting | {id(assignment)})
                else:
                    inner = self.behind(assignment.value, depth + 1, visiting | {id(assignment)})
                if inner is None:
                    return None
                found.extend(c for c in inner if c not in found)
            return found
        return None

    def _unpacked_from_prepare(
        self, assign: cst.Assign, name: str, depth: int, visiting: frozenset[int]
    ) -> list[cst.Call] | None:
        """``model, opt, train_loader = accelerator.prepare(model, opt, train_loader)``: the matching argument."""
        call = assign.value
        if len(assign.targets) != 1 or not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
            return None
        if call.func.attr.value not in _PREPARE_METHODS:
            return None
        target = assign.targets[0].target
        if not isinstance(target, (cst.Tuple, cst.List)):
            return None
        names = [dotted_name(e.value) if not isinstance(e, cst.StarredElement) else None for e in target.elements]
        if name not in names or None in names or len(names) != len(call.args):
            return None
        if any(arg.star or arg.keyword for arg in call.args):
            return None
        return self.behind(call.args[names.index(name)].value, depth + 1, visiting)

    def _returned_by(
        self, call: cst.Call, index: int | None, depth: int, visiting: frozenset[int]
    ) -> list[cst.Call] | None:
        """The loaders a function of the file returns (``make_loader(...)``); with ``index``, the
        element of the tuple it returns (``train_loader, val_loader = set_loader(opt)``)."""
        ctx = self.ctx
        function = ctx.loops.callee(call)
        if function is None and self._across and ctx.project is not None:
            return self._returned_by_module(call, index)
        if function is None or id(function) in visiting:
            return None
        return self._returns_of(function, index, depth, visiting)

    def _returned_by_module(self, call: cst.Call, index: int | None) -> list[cst.Call] | None:
        """The loaders a function of another project module returns (one module away)."""
        found = self.ctx.project.binding(call.func, _BUILDS_LOADERS)  # type: ignore[union-attr]
        if found is None or not isinstance(found[1].node, cst.FunctionDef):
            return None
        other = found[0].facts.loaders
        calls = other._returns_of(found[1].node, index, 0, frozenset())
        for built in calls or ():
            self._foreign[built] = other
        return calls

    def _returns_of(
        self, function: cst.FunctionDef, index: int | None, depth: int, visiting: frozenset[int]
    ) -> list[cst.Call] | None:
        ctx = self.ctx
        returns = [r for r in ctx.walk(function, cst.Return) if ctx.scope_of.get(r) is function and r.value is not None]
        if not returns:
            return None
        found: list[cst.Call] = []
        for statement in returns:
            value = statement.value
            if index is not None:
                if not isinstance(value, cst.Tuple) or len(value.elements) <= index:
                    return None
                value = value.elements[index].value
            inner = self.behind(value, depth + 1, visiting | {id(function)})  # type: ignore[arg-type]
            if inner is None:
                return None
            found.extend(c for c in inner if c not in found)
        return found

    def _unpacked_from_function(
        self, assign: cst.Assign, name: str, depth: int, visiting: frozenset[int]
    ) -> list[cst.Call] | None:
        """``train_loader, val_loader = set_loader(opt)`` with ``set_loader`` a function of the file."""
        call = assign.value
        if len(assign.targets) != 1 or not isinstance(call, cst.Call):
            return None
        target = assign.targets[0].target
        if not isinstance(target, (cst.Tuple, cst.List)):
            return None
        names = [dotted_name(e.value) if not isinstance(e, cst.StarredElement) else None for e in target.elements]
        if name not in names:
            return None
        return self._returned_by(call, names.index(name), depth, visiting)

    def _passed_as(self, param: cst.Param, depth: int, visiting: frozenset[int]) -> list[cst.Call] | None:
        """The loaders every call of the file passes for ``param``; None when the function is
        called from nowhere the file shows, or any call passes something unknown."""
        ctx = self.ctx
        function = ctx.enclosing(param, cst.FunctionDef)
        if not isinstance(function, cst.FunctionDef):
            return None
        positional = list(function.params.params)
        if not any(p is param for p in positional):
            return None
        callers = ctx.loops.callers(function)
        position = next(i for i, p in enumerate(positional) if p is param)
        method = isinstance(ctx.parent.get(ctx.parent.get(function)), cst.ClassDef)  # def -> body -> class
        if not callers:
            if self._across and ctx.project is not None and ctx.enclosing(function, cst.FunctionDef) is None:
                return self._passed_by_importers(function, param, position - 1 if method else position, method)
            return None
        if method:
            position -= 1  # ``self.train(loader)``: ``self`` is not passed
        found: list[cst.Call] = []
        for call in callers:
            passed = ctx.argument(call, param.name.value, position if position >= 0 else None)
            if passed is None or passed is MISSING:
                return None
            inner = self.behind(passed, depth + 1, visiting)
            if inner is None:
                return None
            found.extend(c for c in inner if c not in found)
        return found

    def _passed_by_importers(
        self, function: cst.FunctionDef, param: cst.Param, position: int, method: bool = False
    ) -> list[cst.Call] | None:
        """The loaders the project files importing this module pass for ``param`` of its function
        (``engine.train(model, train_dataloader, ...)`` in ``train.py``), or of a method of its
        class called on an instance (``SimCLR(...).train(train_loader)``)."""
        project = self.ctx.project
        assert project is not None
        if method:
            cls = self.ctx.parent.get(self.ctx.parent.get(function))
            if not isinstance(cls, cst.ClassDef) or position < 0:
                return None
            calls = project.method_calls_from_importers(cls.name.value, function.name.value)
        else:
            calls = project.calls_from_importers(function.name.value)
        if not calls:
            return None
        found: list[cst.Call] = []
        for other_ctx, call in calls:
            passed = other_ctx.argument(call, param.name.value, position)
            if passed is None or passed is MISSING:
                return None
            pairs = other_ctx.facts.loaders.feeding(passed)
            if pairs is None:
                return None
            for facts, built in pairs:
                self._foreign[built] = facts
                if built not in found:
                    found.append(built)
        return found

    def _assigned_by_name(self, name: str) -> list[cst.Call] | None:
        """The DataLoaders the file assigns to ``name`` anywhere, when every binding of that name
        that is not a parameter is one (a loader handed to a function called from elsewhere)."""
        ctx = self.ctx
        calls: list[cst.Call] = []
        for (_, bound), found in ctx.bindings.items():
            if bound != name:
                continue
            for binding in found:
                if isinstance(binding.node, cst.Param):
                    continue
                value = binding.value
                if not (isinstance(value, cst.Call) and ctx.qualname(value.func) == DATALOADER):
                    return None
                calls.append(value)
        return calls or None

    def prepared(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether iterating ``expr`` yields batches a framework has put on the device: a loader
        returned by ``fabric.setup_dataloaders(...)`` / ``accelerator.prepare(...)`` (directly,
        unpacked, or handed in as a parameter by every caller of the file), seen through
        ``iter`` / ``cycle`` / ``CycleIterator`` / ``enumerate`` / ``tqdm``."""
        ctx = self.ctx
        if depth > 6:
            return False
        if isinstance(expr, cst.Call):
            func_name = (dotted_name(expr.func) or "").split(".")[-1]
            if func_name in _PREPARE_METHODS and isinstance(expr.func, cst.Attribute):
                return ctx.loops.is_framework(expr.func.value) and not any(
                    ctx.keyword_arg(expr, keyword) is not None for keyword in ("move_to_device", "device_placement")
                )
            wrapper = func_name in _ITERATION_WRAPPERS or func_name == "CycleIterator"
            if wrapper:
                return bool(expr.args) and not expr.args[0].star and self.prepared(expr.args[0].value, depth + 1)
            return self._returns_prepared(expr, None, depth)
        if not isinstance(expr, cst.Name):
            return False
        bindings = ctx.lookup(expr.value, expr)
        if len(bindings) > 1:  # rebound in straight-line code: the last binding before this use
            before = [b for b in bindings if ctx.order[b.node] < ctx.order[expr] and not isinstance(b.node, cst.Param)]
            blocks = {id(ctx.parent.get(ctx.statement_of(b.node))) for b in bindings}
            bindings = before[-1:] if len(blocks) == 1 else []
        if len(bindings) != 1:
            return False
        binding = bindings[0]
        if isinstance(binding.node, cst.Param):
            return self._prepared_by_callers(binding.node, depth)
        if binding.value is not None:
            return self.prepared(binding.value, depth + 1)
        assign = binding.node
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Tuple):
            # ``train_dl, val_dl = fabric.setup_dataloaders(train_dl, val_dl)``
            value = assign.value
            names = [dotted_name(e.value) for e in assign.targets[0].target.elements]
            if expr.value not in names or not isinstance(value, cst.Call):
                return False
            if self.prepared(value, depth + 1):
                return True
            return self._returns_prepared(value, names.index(expr.value), depth)  # ``= get_dataloaders(...)``
        return False

    def _returns_prepared(self, call: cst.Call, index: int | None, depth: int) -> bool:
        """A function of the file whose every ``return`` gives (at ``index`` of its tuple) a prepared loader."""
        ctx = self.ctx
        function = ctx.loops.callee(call)
        if function is None:
            return False
        returns = [r for r in ctx.walk(function, cst.Return) if ctx.scope_of.get(r) is function and r.value is not None]
        for statement in returns:
            value = statement.value
            if index is not None:
                if not isinstance(value, cst.Tuple) or len(value.elements) <= index:
                    return False
                value = value.elements[index].value
            if not self.prepared(value, depth + 1):  # type: ignore[arg-type]
                return False
        return bool(returns)

    def _prepared_by_callers(self, param: cst.Param, depth: int) -> bool:
        ctx = self.ctx
        function = ctx.enclosing(param, cst.FunctionDef)
        if not isinstance(function, cst.FunctionDef) or not any(p is param for p in function.params.params):
            return False
        callers = ctx.loops.callers(function)
        position = next(i for i, p in enumerate(function.params.params) if p is param)
        if isinstance(ctx.parent.get(ctx.parent.get(function)), cst.ClassDef):
            position -= 1
        passed = [ctx.argument(call, param.name.value, position if position >= 0 else None) for call in callers]
        return bool(passed) and all(
            isinstance(arg, cst.BaseExpression) and arg is not MISSING and self.prepared(arg, depth + 1) for arg in passed
        )

    def name(self, call: cst.Call) -> str | None:
        """What the file calls a DataLoader: the name it is assigned to (``train_loader``,
        ``self.train_loader``), or the function that returns it (``train_dataloader``); through
        an iteration wrapper (``train_loader = cycle(DataLoader(...))``)."""
        ctx = self.ctx
        parent = ctx.parent.get(call)
        wrapper = ctx.parent.get(parent) if isinstance(parent, cst.Arg) else None
        if (
            isinstance(wrapper, cst.Call)
            and wrapper.args
            and wrapper.args[0] is parent
            and parent.keyword is None
            and not parent.star
            and dotted_name(wrapper.func) in _ITERATION_WRAPPERS
        ):
            return self.name(wrapper)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            return dotted_name(parent.targets[0].target)
        if isinstance(parent, cst.AnnAssign):
            return dotted_name(parent.target)
        values = ctx.parent.get(parent) if isinstance(parent, cst.Element) else None
        if isinstance(values, cst.Tuple):  # ``train_loader, val_loader = DataLoader(...), DataLoader(...)``
            assign = ctx.parent.get(values)
            if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
                target = assign.targets[0].target
                if isinstance(target, cst.Tuple) and len(target.elements) == len(values.elements):
                    index = list(values.elements).index(parent)
                    return dotted_name(target.elements[index].value)
        if isinstance(parent, cst.Return):
            function = ctx.enclosing(call, cst.FunctionDef)
            return function.name.value if isinstance(function, cst.FunctionDef) else None
        return None

    def handed_to_framework(self, spelling: str | None, methods: tuple[str, ...] = _PREPARE_METHODS) -> bool:
        """Whether ``accelerator.prepare(...)`` / ``fabric.setup_dataloaders(...)`` (or only the
        ``methods`` named) takes the loader spelled ``spelling``: the framework then places
        batches on the device itself."""
        if spelling is None:
            return False
        for call in self.ctx.method_calls(*methods):
            if any(dotted_name(arg.value) == spelling for arg in call.args):
                return True
        return False

    # -- roles ----------------------------------------------------------------------------------
    @cached_property
    def training_iterations(self) -> dict[cst.Call, list[cst.For]]:
        """DataLoaders that training loops draw batches from, with the loops that do."""
        ctx = self.ctx
        found: dict[cst.Call, list[cst.For]] = {}
        for loop in ctx.loops.training_loops:
            for node in [loop.node, *ctx.ancestors(loop.node)]:
                if not isinstance(node, cst.For):
                    continue
                for call in self.behind(node.iter) or ():
                    found.setdefault(call, []).append(node)
        return found

    @cached_property
    def lightning_training(self) -> list[cst.Call] | None:
        """The DataLoaders a Lightning ``Trainer`` trains on: returned by ``train_dataloader()``
        hooks or passed to ``fit(train_dataloaders=...)``. None when one of them is unknown."""
        ctx = self.ctx
        candidates: list[cst.Call] = []
        for function in ctx.nodes(cst.FunctionDef):
            if function.name.value == "train_dataloader":
                for ret in ctx.walk(function, cst.Return):
                    calls = self.behind(ret.value) if ret.value is not None else None
                    if calls is None:
                        return None
                    candidates.extend(c for c in calls if c not in candidates)
        for fit in ctx.method_calls("fit"):
            expr = ctx.argument(fit, "train_dataloaders", 1)
            if expr is None:
                return None
            if expr is MISSING:
                continue
            calls = self.behind(expr)
            if calls is None:
                return None
            candidates.extend(c for c in calls if c not in candidates)
        return candidates

    @cached_property
    def of_training_loops(self) -> list[cst.Call] | None:
        """The DataLoaders the file's training loops iterate, if that is knowable."""
        found: list[cst.Call] = []
        for loop in self.ctx.loops.training_loops:
            iterable = loop.iterable
            if iterable is None:
                return None
            calls = self.behind(iterable)
            if calls is None:
                return None
            found.extend(c for c in calls if c not in found)
        return found or None

    def is_training(self, call: cst.Call) -> bool:
        """A loader that feeds training: drawn by a training loop, trained on by Lightning, or
        named / shuffled like a training loader outside evaluation code."""
        if call in self.training_iterations or call in (self.lightning_training or ()):
            return True
        return self._looks_like_training(call)

    def _looks_like_training(self, call: cst.Call) -> bool:
        ctx = self.ctx
        # A loader built inside ``evaluate()`` / under ``@torch.inference_mode()`` draws evaluation
        # batches, whatever it is called and even when shuffled (to sample random batches).
        function = ctx.enclosing(call, cst.FunctionDef)
        if isinstance(function, cst.FunctionDef):
            scope = function.name.value
            if _EVALUATION_NAME.search(scope) and not _TRAINING_NAME.search(scope):
                return False
        if under_no_grad(ctx, call):
            return False
        name = (self.name(call) or "").split(".")[-1]
        if _EVALUATION_NAME.search(name):
            return False
        if _TRAINING_NAME.search(name):
            return True
        shuffle = ctx.argument(call, "shuffle", DATALOADER_POSITION["shuffle"])
        return shuffle is not None and shuffle is not MISSING and ctx.values.value_of(shuffle) is True

    def unused_lightning_loader(self, call: cst.Call) -> bool:
        """A loader built in a LightningModule's (or DataModule's) ``test_dataloader()`` /
        ``predict_dataloader()`` in a file that builds its ``Trainer`` and never calls
        ``trainer.test`` / ``trainer.predict``: no batch of it ever reaches the GPU. Without a
        Trainer in the file, or with ``LightningCLI`` (its ``test`` subcommand), it may be used."""
        ctx = self.ctx
        function = ctx.enclosing(call, cst.FunctionDef)
        # ``_predict_dataloader``, assigned to ``self.predict_dataloader`` when a config asks
        # for one (the latent-diffusion family's DataModuleFromConfig), plays the same role.
        hook = function.name.value.lstrip("_") if isinstance(function, cst.FunctionDef) else ""
        if hook not in _LIGHTNING_ON_DEMAND_LOADERS:
            return False
        cls = ctx.enclosing(function, cst.ClassDef)
        if not isinstance(cls, cst.ClassDef) or ctx.enclosing(function, cst.FunctionDef) is not None:
            return False
        if not any(
            q.split(".")[0] == "lightning" and q.rsplit(".", 1)[-1] in _LIGHTNING_MODULES for q in ctx.base_qualnames(cls)
        ):
            return False
        if not ctx.calls(*LIGHTNING_TRAINER_BUILDERS) or any(
            "LightningCLI" in q for q in ctx.called_qualnames
        ):
            return False
        return not ctx.method_calls(_LIGHTNING_ON_DEMAND_LOADERS[hook])

    # -- settings ---------------------------------------------------------------------------------
    def runs_for_training(self, call: cst.Call) -> bool:
        """Whether the loader is built where training code runs: in a file that trains on a GPU
        itself, or, in a module that takes the GPU from the scripts importing it, at module level
        or in a function of the module that it calls or that an importer uses
        (``create_dataloader_v1`` imported by ``gpt_train.py``)."""
        ctx = self.ctx
        devices = ctx.facts.devices
        if not devices.gpu.because.startswith("imported by") or ctx.project is None:
            return True
        if any(ctx.is_descendant(call, guard) for guard in ctx.main_guards):
            return False  # a data set module's own smoke test (Latte's ``datasets/*.py``): imported, it does not run
        function = ctx.enclosing(call, cst.FunctionDef)
        while isinstance(function, cst.FunctionDef):
            outer = ctx.enclosing(function, cst.FunctionDef)
            if outer is None:
                break
            function = outer
        if not isinstance(function, cst.FunctionDef):
            return True
        cls = ctx.enclosing(function, cst.ClassDef)
        name = cls.name.value if isinstance(cls, cst.ClassDef) else function.name.value
        uses = [
            n for n in ctx.nodes(cst.Name)
            if n.value == name and ctx.is_read(n) and not ctx.is_descendant(n, function)
        ]
        if ctx.project.used_by_importers(name):
            return True
        # dlrm's ``_test_bin``, called only from the data module's own ``__main__`` block: a
        # self-test, which the importer's GPU does not reach.
        in_main = lambda node: any(ctx.is_descendant(node, guard) for guard in ctx.main_guards)  # noqa: E731
        callers = ctx.loops.callers(function)
        return any(not in_main(c) for c in callers) or any(not in_main(n) for n in uses)

    def pin_unset(self, call: cst.Call) -> bool:
        """``pin_memory`` certainly not passed: the loader does not pin, and nobody chose that."""
        return self.ctx.argument(call, "pin_memory", DATALOADER_POSITION["pin_memory"]) is MISSING

    @per_node
    def pinnable(self, call: cst.Call) -> bool:
        """A loader whose batches pinning would speed up: host data read or decoded per item,
        not indices, built where training runs, and not a Lightning loader that never runs.
        Not a loader over tensors held in memory (:meth:`in_memory`): its batch is in RAM
        already, and a pinning thread that copies it once more competes for the GIL with
        the per-sample indexing that makes most of its cost (ADV105 is the advice there)."""
        if self.dataset_on_gpu(call) or self.index_dataset(call) or self.unused_lightning_loader(call):
            return False
        if self.makes_cuda_tensors_by_default:
            return False  # the data set's tensors may be made on the GPU: pinning one raises
        if self.text_dataset(call) or self.in_memory(call) or self.collates_into_lists(call) or self.collates_unpinnable(call):
            return False
        if self.yields_images_untransformed(call):
            return False  # PIL images: no tensor to pin
        if self.items_read_no_data(call) or self._python_sequence_dataset(call):
            return False  # a Python list: items held in memory (cached latents), or not tensors at all
        if self.only_counted(call) or self.batches_stay_on_host(call) or self.never_read(call) or self.reads_one_batch(call):
            return False
        if self.ctx.facts.batches.handed_to_numpy(call):
            return False  # a helper of the project makes NumPy arrays of the batch (TransUNet's test_single_volume)
        if self.ctx.facts.batches.only_on_the_cpu(call):
            return False  # its copies are read by NumPy: the device is the CPU
        return self.runs_for_training(call)

    @per_node
    def never_read(self, call: cst.Call) -> bool:
        """The loader is bound to plain names that nothing reads, beside a loader the file does
        read: not this file (residual-flows' ``qualitative_samples.py`` builds a ``train_loader``
        per data set and draws only from its ``test_loader``), nor, for a module-level name,
        another file of the project."""
        ctx = self.ctx
        parent = ctx.parent.get(call)
        if not isinstance(parent, cst.Assign) or not all(isinstance(t.target, cst.Name) for t in parent.targets):
            return False
        reads = self._plain_name_reads(call)
        if reads is not None and not all(self._in_a_function_nothing_calls(read) for read in reads[1]):
            return False
        # Only beside a loader the file does read, or a loop over the loader's own data set (Long-CLIP's
        # CIFAR evaluation iterates ``testset`` one image at a time): a file that reads none (a
        # snippet, a module whose loaders a framework draws from by convention) shows nothing
        # about what is used.
        if not any(other is not call and self._plain_name_reads(other) is not None for other in ctx.calls(DATALOADER)):
            dataset = ctx.argument(call, "dataset", 0)
            if not (
                isinstance(dataset, cst.Name)
                and any(isinstance(loop.iter, cst.Name) and loop.iter.value == dataset.value for loop in ctx.nodes(cst.For))
            ):
                return False
        scope = ctx.enclosing(call, cst.FunctionDef, cst.Lambda, cst.ClassDef)
        if isinstance(scope, cst.ClassDef):
            return False  # a class attribute, read as ``self.loader``
        if scope is not None:
            return True  # a local name: no other file can read it
        if ctx.project is None:
            return False  # a module-level name another file may import
        return not any(ctx.project.mentions_outside(t.target.value) for t in parent.targets)  # type: ignore[attr-defined]

    def pins_in_training_process(self, call: cst.Call) -> bool:
        """The loader has no worker processes (``num_workers`` not set, or 0): it pins each batch
        in the training process itself, right before the step copies it."""
        workers = self.ctx.argument(call, "num_workers", DATALOADER_POSITION["num_workers"])
        if workers is None:
            return False  # ``**kwargs``: not known
        if workers is MISSING:
            return True
        value = self.ctx.values.resolve(workers)
        if value is None and isinstance(workers, cst.Name):
            # torch-rechub's ``generate_dataloader(self, batch_size=32, num_workers=0, ...)``: a
            # library method whose callers keep its default; the default is what runs unless told.
            bound = self.ctx.parameter_of(workers)
            default = bound[0].default if bound is not None else None
            value = self.ctx.values.resolve(default) if default is not None else None
        return value is not None and type(value.value) is int and value.value == 0

    def decodes_images(self, call: cst.Call) -> bool:
        """The loader's data set decodes image files per item: a torchvision folder data set
        (``ImageFolder``, ``CocoDetection``, ...), or a class of the project whose module opens
        images (``Image.open``, ``cv2.imread``, ``read_image``). Its batches are large (64
        samples of 3 x 224 x 224 float32: 38.5 MB), unlike token rows or MNIST-sized arrays."""
        dataset = self.ctx.argument(call, "dataset", 0)
        if dataset is None or dataset is MISSING:
            return False
        sources = self.dataset_sources(dataset)
        if not sources:
            return False
        for source in sources:
            if not isinstance(source, cst.Call):
                return False
            if self.ctx.qualname(source.func) in IMAGE_FOLDER_DATASETS:
                continue
            found = self.dataset_class(source)
            if found is None or not _DECODES_IMAGES.search(found[0].ctx.source):
                return False
        return True

    def pinning_withheld(self, call: cst.Call) -> str | None:  # not kept per node: it reads the requirements
        """Why pinning this loader (``pin_memory`` unset) is advice and not an edit, as a phrase
        for the message; None where ADV101 pins it. ADV103 asks the same question: its
        non-blocking copies pay only from memory ADV101 pins, so a loader left unpinned leaves
        them as advice too (proxynca_pp's ``# pin_memory = True`` in the call)."""
        ctx = self.ctx
        tuples = self.collates_tuples(call)
        if tuples is not None and not declares_at_least(ctx, "torch", "2.10"):
            # ImageReward's SDXL trainers (from diffusers' script): ``batch["original_sizes"]``
            # holds ``(height, width)`` tuples that the step adds to a tuple.
            return (
                f"its `collate_fn` hands on the items' `{tuples}` tuples as they are, and before torch 2.10 "
                "pinning rebuilds every tuple of a batch as a list, so code that adds them to a tuple "
                "raises; the project does not require torch >= 2.10"
            )
        if _commented_in(ctx, call, _COMMENTED_PIN):
            # ``# pin_memory=True,`` left in the call (simple-faster-rcnn): tried and turned off.
            return "`pin_memory` is commented out in the call: the author's choice"
        if ctx.facts.batches.converted_before_every_copy(call):
            return (
                "every copy of its batches converts or computes on them on the host first "
                "(`x.float().to(device)`), which makes a new, unpinned tensor: pinning would not reach the "
                "copy; convert on the GPU (`x.to(device).float()`), then pin"
            )
        if not self.pinning_pays(call):
            return (
                "without worker processes it would pin each batch in the training process, which pays on "
                "large batches (decoded images) and costs on small ones (token ids, MNIST-sized arrays), "
                "and nothing here shows which: give it workers first (ADV102), then pin"
            )
        return None

    @per_node
    def pinning_pays(self, call: cst.Call) -> bool:
        """Whether pinning would make the loader's batches reach the GPU sooner. With worker
        processes it does: the loader pins in a thread of its own while the step runs. Without
        them the loader pins each batch in the training process, right before the copy: on an
        H200 (bench/loader/) that made a step 1.27x faster on 38.5 MB image batches (64 images
        of 224 x 224) and 0.85x on 0.26 MB token batches; readers of real repositories judged it
        no gain on MNIST- and CIFAR-sized batches, and on decoded images a few at a time (12 of
        the 14 such edits of held-out sets 100-135: MCNN's and RD4AD's batches of one, pose
        tensors). So without workers it pays where the batches are decoded image files
        (:meth:`decodes_images`) and the loader's ``batch_size`` is known to be 32 or more, and
        not where nothing shows their size."""
        if not self.pins_in_training_process(call):
            return True
        if not self.decodes_images(call):
            return False
        size = self.batch(call)
        return size is not None and isinstance(size.value, int) and size.value >= _LARGE_IMAGE_BATCH

    def batches_stay_on_host(self, call: cst.Call) -> bool:
        """Every loop of the file over the loader only measures its batches on the host
        (``img.shape``, ``len(x)``: torchvision's ``_compute_aspect_ratios_slow``, which loads
        each image to read its height and width) or keeps them in a host list
        (``self.materialized.append(batch)``: STEGO's ``MaterializedDataset`` loads a data set
        into memory once) or reduces them there (``mean[i] += inputs[:, i].mean()``: the
        ``get_mean_and_std`` of many CIFAR repositories). Batches drawn by ``next()`` from an
        ``iter(loader)`` count too (mmt's ``evaluate.py`` keeps only ``batch["seq"].numpy()``
        as the ground truth and generates from tokens made on the device). Nothing goes to a
        GPU; pinning copies every batch once more, into page-locked memory, for nothing."""
        ctx = self.ctx
        local = self._local_reads(call)
        if local is None:
            return False
        names, reads, _ = local
        drawn = 0
        for read in reads:
            if _argument_of_builtin(ctx, read, ("len",)):
                continue
            batches = self._drawn_by_next(read, names)
            if batches is None:
                return False  # also handed elsewhere, or drawn from in a way not followed here
            for batch, body in batches:
                drawn += 1
                if not batch or not self._only_read_on_host(body, batch):
                    return False
        return drawn > 0

    def _drawn_by_next(self, read: cst.Name, names: frozenset[str]) -> "list[tuple[set[str], cst.CSTNode]] | None":
        """The batch names a read of the loader binds and where they are used: the target of
        ``for batch in loader`` (its body), or the names ``batch = next(it)`` binds from an
        ``it = iter(loader)`` (the function around it); None for any other read."""
        ctx = self.ctx
        loop = self._loop_over(read)
        if loop is not None and any(_iterates(loop.iter, name) for name in names):
            return [(target_names(loop.target), loop.body)]
        arg = ctx.parent.get(read)
        made = ctx.parent.get(arg) if isinstance(arg, cst.Arg) else None
        if not (_argument_of_builtin(ctx, read, ("iter",)) and len(made.args) == 1):  # type: ignore[union-attr]
            return None
        bound = ctx.parent.get(made)
        if not (isinstance(bound, cst.Assign) and len(bound.targets) == 1 and isinstance(bound.targets[0].target, cst.Name)):
            return None
        iterator = bound.targets[0].target.value
        body = ctx.enclosing(bound, cst.FunctionDef) or ctx.module
        found: list[tuple[set[str], cst.CSTNode]] = []
        for use in ctx.walk(body, cst.Name):
            if use.value != iterator or use is bound.targets[0].target or not ctx.is_read(use):
                continue
            if not _argument_of_builtin(ctx, use, ("next",)):
                return None
            step = ctx.parent.get(ctx.parent.get(ctx.parent.get(use)))
            if not (isinstance(step, cst.Assign) and len(step.targets) == 1):
                return None
            found.append((target_names(step.targets[0].target), body))
        return found or None

    def _only_read_on_host(self, body: cst.CSTNode, batch: set[str]) -> bool:
        """Every read of the ``batch`` names in ``body`` measures, keeps or reduces it on the host."""
        ctx = self.ctx
        for use in ctx.walk(body, cst.Name):
            if use.value not in batch or not ctx.is_read(use) or self._rebound_to_a_copy(use, body):
                continue
            holder = ctx.parent.get(use)
            if isinstance(holder, cst.Attribute) and holder.value is use and holder.attr.value in _MEASURES:
                continue
            if not _argument_of_builtin(ctx, use, ("len", "print")) and not _appended(ctx, use) and not _reduced_on_host(ctx, use):
                if not _joined_on_host(ctx, use) and not _sent_to_another_process(ctx, use) and not _shared_in_place(ctx, use):
                    return False
        return True

    def _rebound_to_a_copy(self, use: cst.Name, body: cst.CSTNode) -> bool:
        """``use`` reads what an assignment in ``body`` rebound its name to, a moved copy:
        ``label = torch.cat(label, dim=0).cuda()`` then ``loss_fn(output, label)``."""
        ctx = self.ctx
        reaching = ctx.facts.tensors.reaching(use)
        if not isinstance(reaching, cst.Assign) or not ctx.is_descendant(reaching, body):
            return False
        return any(
            isinstance(call.func, cst.Attribute) and call.func.attr.value in ("cuda", "to")
            for call in ctx.walk(reaching.value, cst.Call)
        )

    @cached_property
    def makes_cuda_tensors_by_default(self) -> bool:
        """The file makes new tensors on the GPU by default: ``torch.set_default_tensor_type(
        'torch.cuda.FloatTensor')`` or ``torch.set_default_device('cuda')`` (maskrcnn-pytorch's
        ``--device cuda``): what a data set builds is then a CUDA tensor, which a loader cannot
        pin. Only this file's own call counts: TabSurvey's DeepGBM module sets it at import, but
        its registry imports that module only when DeepGBM is the model chosen."""
        return _CUDA_BY_DEFAULT.search(self.ctx.source.encode()) is not None or self._imported_setting_cuda_default()

    @cached_property
    def _names_called(self) -> frozenset[str]:
        """The names the file calls, as functions (``initialize()``) or methods (``opt.initialize()``)."""
        return frozenset(
            call.func.attr.value if isinstance(call.func, cst.Attribute) else call.func.value
            for call in self.ctx.nodes(cst.Call)
            if isinstance(call.func, (cst.Attribute, cst.Name))
        )

    def _imported_setting_cuda_default(self) -> bool:
        """A project module this file imports at its top sets GPU tensors as the default, at
        import, or in a function or method this file calls (TextSnake's
        ``BaseOptions.initialize()``, which train, eval and demo scripts call first). An import
        inside a function, under a registry's switch (TabSurvey's DeepGBM), does not count."""
        ctx = self.ctx
        view = ctx.project
        if view is None:
            return False
        for path in view.project.imports(view.path, top_level=True):
            if _CUDA_BY_DEFAULT.search(view.project.text(path)) is None:
                continue
            other = view.context_of(path)
            if other is None:
                continue
            for call in other.calls(*_DEFAULT_SETTERS):
                if _CUDA_BY_DEFAULT.search(other.code(call).encode()) is None:
                    continue
                function = other.enclosing(call, cst.FunctionDef)
                if function is None or function.name.value in self._names_called:
                    return True
        return False

    def reads_one_batch(self, call: cst.Call) -> bool:
        """Every read of the loader draws one batch: ``next(iter(loader))`` outside a loop, or a
        ``for`` loop over it whose body ends in a ``break`` it cannot skip (DG-Net's figure
        scripts read their structure loader so, and break out of the content loop after the
        first batch). Pinning one batch costs what it saves."""
        ctx = self.ctx
        local = self._local_reads(call)
        if local is None:
            return False
        names, reads, scope = local
        # A notebook rebinds ``loader`` cell after cell: only the reads of this binding count.
        # A read in another function (called later, perhaps) counts whichever binding it meets.
        reads = [
            read for read in reads
            if _latest_binding(ctx, read) is call
            or (ctx.enclosing(read, cst.FunctionDef) is not scope and any(b.value is call for b in ctx.lookup(read.value, read)))
        ]
        drawn = 0
        for read in reads:
            if _argument_of_builtin(ctx, read, ("len",)):
                continue
            loop = self._loop_over(read)
            if loop is not None:
                if not any(_iterates(loop.iter, name) for name in names) or not _breaks_after_first(ctx, loop):
                    return False
                drawn += 1
                continue
            if not _argument_of_builtin(ctx, read, ("iter",)):
                return False
            made = ctx.parent.get(ctx.parent.get(read))  # the ``iter(loader)`` call
            holder = ctx.parent.get(made)
            if isinstance(holder, cst.Attribute) and holder.attr.value == "next" and isinstance(ctx.parent.get(holder), cst.Call):
                drawn_by = holder  # ``images, labels = iter(loader).next()`` (torch before 1.13; BiT's colab)
            elif _argument_of_builtin(ctx, made, ("next",)):
                drawn_by = made  # ``next(iter(loader))``
            else:
                return False
            if ctx.enclosing(drawn_by, cst.For, cst.While, cst.FunctionDef) is not scope:
                return False  # drawn again on every pass of a loop
            drawn += 1
        return drawn > 0

    def _local_reads(self, call: cst.Call) -> "tuple[frozenset[str], list[cst.Name], cst.FunctionDef | None] | None":
        """The plain names ``call`` is bound to, their reads, and the function around the binding;
        the reads only in that function where there is one: a local name is another function's
        loader elsewhere (AWP's misc.py has ``get_mean_and_std`` and
        ``get_mean_and_std_modified``, each with its own ``dataloader``)."""
        bound = self._plain_name_reads(call)
        if bound is None:
            return None
        names, reads = bound
        scope = self.ctx.enclosing(call, cst.FunctionDef)
        if scope is not None:
            reads = [read for read in reads if self.ctx.is_descendant(read, scope)]
        return names, reads, scope  # type: ignore[return-value]

    def _loop_over(self, read: cst.Name) -> cst.For | None:
        """The ``for`` loop whose iterable holds ``read`` (``for x in loader``, ``enumerate(loader)``)."""
        ctx = self.ctx
        return next((loop for loop in ctx.nodes(cst.For) if read is loop.iter or ctx.is_descendant(read, loop.iter)), None)

    def only_counted(self, call: cst.Call) -> bool:
        """The loader is bound to a name the file only hands to ``len()``: it is never iterated
        (minimind's ``loader_for_count``, built to count the steps of an epoch)."""
        bound = self._plain_name_reads(call)
        return bound is not None and all(_argument_of_builtin(self.ctx, read, ("len",)) for read in bound[1])

    def _in_a_function_nothing_calls(self, node: cst.CSTNode) -> bool:
        """``node`` is in an undecorated module-level function that nothing in the project calls
        (GANet's ``val()``, whose one call in ``__main__`` is commented out)."""
        ctx = self.ctx
        outermost = ctx.outermost_definition(node)
        if not isinstance(outermost, cst.FunctionDef) or outermost.decorators or ctx.project is None:
            return False
        if ctx.parent.get(outermost) is not ctx.module:
            return False
        return not ctx.project.called(outermost.name.value, kind=MODULE_LEVEL)

    def _plain_name_reads(self, call: cst.Call) -> "tuple[frozenset[str], list[cst.Name]] | None":
        """The plain names ``call`` is assigned to (``loader = DataLoader(...)``, or
        ``dataloader = trainloader = DataLoader(...)``) and every read of them in the file; None
        for any other binding, or names never read."""
        ctx = self.ctx
        parent = ctx.parent.get(call)
        if not isinstance(parent, cst.Assign) or not all(isinstance(t.target, cst.Name) for t in parent.targets):
            return None
        names = frozenset(t.target.value for t in parent.targets)  # type: ignore[attr-defined]
        reads = [n for n in ctx.nodes(cst.Name) if n.value in names and ctx.is_read(n)]
        return (names, reads) if reads else None

    def items_read_no_data(self, call: cst.Call) -> bool:
        """The loader's dataset is a class of the project whose ``__getitem__`` reads nothing by
        its index and makes nothing: DreamBooth's ``PromptDataset`` returns ``{"prompt":
        self.prompt, "index": index}``. Its batches are the same strings and the indices:
        nothing to pin, nothing for workers to load."""
        classes = self.dataset_classes(call)
        if classes is None:
            return False
        for owner, cls in classes:
            getters = class_methods(owner.ctx, cls, ("__getitem__",))
            if len(getters) != 1 or not _reads_nothing_by_index(owner.ctx, getters[0]):
                return False
        return True

    def pinned(self, call: cst.Call) -> bool:
        """Whether a DataLoader certainly pins its batches whenever a GPU is there."""
        from advisor.facts import Tri

        ctx = self.ctx
        pin = ctx.argument(call, "pin_memory", DATALOADER_POSITION["pin_memory"])
        if pin is None or pin is MISSING:
            return False
        value = ctx.values.resolve(pin)
        if value is not None:
            return value.value is True
        return ctx.facts.devices.gpu_test(pin, switches=True) is Tri.YES

    def batch(self, loader: cst.Call) -> Value | None:
        """The loader's ``batch_size``, DataLoader's default 1 when absent, None when unknown or not batching."""
        ctx = self.ctx
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

    def single_batch(self, loaders: list[cst.Call] | None) -> Value | None:
        if not loaders or len(loaders) != 1:
            return None
        return self.batch(loaders[0])

    # -- datasets --------------------------------------------------------------------------------
    def dataset(self, call: cst.Call) -> cst.Call | None:
        """The call that builds the loader's dataset, where the file shows it."""
        dataset = self.ctx.argument(call, "dataset", 0)
        if dataset is None or dataset is MISSING:
            return None
        return self.ctx.bound_call(dataset)

    def _dataset_expression(self, call: cst.Call) -> cst.BaseExpression | None:
        """The expression the loader's dataset is, seen through a name bound once."""
        dataset = self.ctx.argument(call, "dataset", 0)
        if dataset is None or dataset is MISSING:
            return None
        if isinstance(dataset, cst.Name):
            return self.ctx.single_assignment(dataset) or self._straight_line_value(dataset)
        return dataset

    def _straight_line_value(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value of ``name`` where a script or notebook binds it several times, each by a
        statement of the module's own body as the use is: the last one bound before the use
        (facenet-pytorch's ``finetune.ipynb`` rebinds ``dataset`` for its second loader)."""
        ctx = self.ctx
        statement = self._module_statement(name)
        bindings = ctx.lookup(name.value, name)
        if statement is None or not bindings or any(self._module_statement(b.node) is None for b in bindings):
            return None
        before = [b for b in bindings if ctx.order[b.node] < ctx.order[statement]]
        return max(before, key=lambda b: ctx.order[b.node]).value if before else None

    def _module_statement(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The statement of the module's body that holds ``node`` directly (not under a block)."""
        ctx = self.ctx
        for ancestor in ctx.ancestors(node):
            parent = ctx.parent.get(ancestor)
            if parent is ctx.module:
                return ancestor if isinstance(ancestor, cst.SimpleStatementLine) else None
        return None

    def index_dataset(self, call: cst.Call) -> bool:
        """A loader over ``range(n)`` (or ``list(range(n))``, or a ``TensorDataset`` of one
        ``torch.arange``: BertGCN's index loaders): its batches are integer indices, not the
        training data, so neither pinning nor workers change what reaches the GPU, and indexing
        them one at a time costs next to nothing beside the step that reads the data by them."""
        ctx = self.ctx
        dataset = self._dataset_expression(call)
        if dataset is None:
            return False
        if builtin_call(ctx, dataset, "list", "tuple") and len(dataset.args) == 1:  # type: ignore[attr-defined]
            dataset = dataset.args[0].value  # type: ignore[attr-defined]
        if builtin_call(ctx, dataset, "range"):
            return True
        sources = self.dataset_sources(dataset)
        return bool(sources) and all(
            isinstance(source, cst.Call)
            and ctx.qualname(source.func) == "torch.utils.data.TensorDataset"
            and len(source.args) == 1
            and isinstance(source.args[0].value, cst.Call)
            and ctx.qualname(source.args[0].value.func) == "torch.arange"
            for source in sources
        )

    def yields_images_untransformed(self, call: cst.Call) -> bool:
        """A loader over a torchvision ``ImageFolder`` (``DatasetFolder``) whose ``transform`` makes
        no tensor: none, or transforms of PIL images only (``transforms.Resize((512, 512))``,
        a ``Compose`` without ``ToTensor``), batched by a ``collate_fn`` of its own (the default
        one raises on PIL images). Its items are PIL images, which that ``collate_fn`` hands on
        as they are (facenet-pytorch's examples feed them to MTCNN): pinning has no tensor to pin."""
        ctx = self.ctx
        collate = ctx.argument(call, "collate_fn", DATALOADER_POSITION["collate_fn"])
        if collate is None or collate is MISSING:
            return False  # the default collate_fn raises on PIL images: something else makes tensors
        dataset = self._dataset_expression(call)
        if not isinstance(dataset, cst.Call) or ctx.qualname(dataset.func) not in _IMAGE_FOLDERS:
            return False
        transform = ctx.argument(dataset, "transform", 1)
        if transform is MISSING or (isinstance(transform, cst.Name) and transform.value == "None"):
            return True
        if not isinstance(transform, cst.Call):
            return False
        steps = [transform]
        if (ctx.qualname(transform.func) or "").endswith(".Compose"):
            listed = transform.args[0].value if transform.args else None
            if not isinstance(listed, (cst.List, cst.Tuple)):
                return False
            steps = [element.value for element in listed.elements]
        return all(
            isinstance(step, cst.Call) and (ctx.qualname(step.func) or "") in _PIL_TRANSFORMS for step in steps
        )

    def text_dataset(self, call: cst.Call) -> bool:
        """A loader over a Python list of strings (prompts): its batches are lists of str, which
        pinning leaves as they are; the tensors reach the GPU after a tokenizer makes them."""
        dataset = self._dataset_expression(call)
        if not isinstance(dataset, (cst.List, cst.Tuple)) or not dataset.elements:
            return False
        return all(
            isinstance(element, cst.Element)
            and isinstance(element.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
            for element in dataset.elements
        )

    def collates_into_lists(self, call: cst.Call) -> bool:
        """A ``collate_fn`` of the project that only gathers the items into Python containers
        (``{key: [item[key] for item in batch]}``) and makes no tensor: the batch is a dict or
        list of whatever the dataset yields (PIL images, strings, ids), batched into tensors
        later, if at all. Pinning has no batch to pin there. A lambda is not taken: ``lambda
        b: b[0]`` hands over a batch the dataset made."""
        ctx = self.ctx
        collate = ctx.argument(call, "collate_fn", DATALOADER_POSITION["collate_fn"])
        if _zip_lambda(collate):
            return True  # awni/speech: ``collate_fn=lambda batch: zip(*batch)``
        if _identity_lambda(collate):
            # sqlova's ``collate_fn=lambda x: x``: the batch is the list of the data set's items
            # (raw JSON records), turned into tensors later, if at all. Not with
            # ``batch_size=None`` (Cutie's GUI reader): each item is handed on as it is, tensors and all.
            size = ctx.argument(call, "batch_size", DATALOADER_POSITION["batch_size"])
            resolved = ctx.values.resolve(size) if isinstance(size, cst.BaseExpression) and size is not MISSING else None
            if size is None or (resolved is not None and resolved.value is None):
                return False
            return ctx.facts.batches.copied_as_it_comes(call) is not True
        if collate is None or collate is MISSING or not isinstance(collate, cst.Name):
            return False
        found = self.function_named(collate)
        if found is None:
            return False
        if _returns_its_parameter(found[1]):
            # CodeReviewer's ``def fn(features): return features``: the batch is the list of the
            # data set's items, which a loop stacks or rebuilds on the host (``torch.tensor([f.source_ids
            # for f in examples])``) into new, unpinned tensors; unless a loop of the file is seen
            # copying the batch as it comes, pinning has nothing to reach.
            return ctx.facts.batches.copied_as_it_comes(call) is not True
        return _gathers_only(*found)

    def sharded_by_rank(self, call: cst.Call) -> bool:
        """The loader's data set is a ``Subset`` whose indices the rank picks
        (BackgroundMattingV2: ``Subset(dataset, range(rank * n, (rank + 1) * n))``): each
        process already reads its own share, as a ``DistributedSampler`` would arrange."""
        ctx = self.ctx
        dataset = ctx.argument(call, "dataset", 0)
        if dataset is None or dataset is MISSING:
            return False
        sources = list(self.dataset_sources(dataset) or ())
        if not sources and isinstance(dataset, cst.Name):
            # ``dataset_train = Subset(dataset_train, ...)`` rebinds the name: the binding just before the loader speaks.
            line = ctx.position(call)[0]
            before = [b for b in ctx.lookup(dataset.value, dataset) if b.value is not None and ctx.position(b.node)[0] < line]
            if before:
                sources = [max(before, key=lambda b: ctx.position(b.node)[0]).value]
        return any(
            isinstance(source, cst.Call)
            and (ctx.qualname(source.func) or dotted_name(source.func) or "").split(".")[-1] == "Subset"
            and len(source.args) >= 2
            and any(_RANK.search(ctx.code(node)) for node in ctx.walk(source.args[1].value, cst.Name))
            for source in sources
        )

    def refuses_non_blocking(self, call: cst.Call) -> str | None:
        """A ``to()`` of the project's classes that takes no ``non_blocking`` (maskrcnn-benchmark's
        ``BoxList.to(self, device)``, copied into graph-rcnn), where the loader's batches come from
        a ``collate_fn`` of its own: a part of the batch may be such an object, and
        ``non_blocking=True`` raises a ``TypeError`` there. Named as ``Class.to``; None otherwise."""
        ctx = self.ctx
        collate = ctx.argument(call, "collate_fn", DATALOADER_POSITION["collate_fn"])
        if collate is None or collate is MISSING or ctx.project is None:
            return None
        for owner, method in ctx.project.methods_named("to"):
            params = method.params
            if params.star_kwarg is not None:
                continue
            names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
            if "non_blocking" in names:
                continue
            cls = owner.enclosing(method, cst.ClassDef)
            if not isinstance(cls, cst.ClassDef) or _model_like(owner, cls):
                continue  # setfit's ``SetFitModel.to(self, device)`` moves a model, not a batch
            if not _built_outside_itself(owner, cls):
                continue  # P2PNet's ``NestedTensor``: only its own ``to()`` makes one, so no batch is one
            return f"{cls.name.value}.to"
        return None

    def collates_unpinnable(self, call: cst.Call) -> bool:
        """A ``collate_fn`` that batches into an object without the ``pin_memory()`` method a
        DataLoader pins through: graphs (``dgl.batch(graphs)``, PyG's ``Batch.from_data_list``)
        or DETR's ``NestedTensor`` of padded images (``nested_tensor_from_tensor_list``).
        Pinning reaches only the labels beside it. The function may be a method of the data
        set (``collate_fn=dataset.collate``): every method of that name in the modules the file
        imports, and theirs, must do so."""
        functions = self._loader_collate_functions(call)
        return bool(functions) and all(_returns_unpinnable_batch(owner, function) for owner, function in functions)

    @cached_property
    def tokenizes_to_tensors(self) -> bool:
        """The file has a tokenizer make tensors (``return_tensors="pt"``): what it returns is a
        transformers ``BatchEncoding``."""
        return any(
            arg.keyword is not None and arg.keyword.value == "return_tensors" for arg in self.ctx.nodes(cst.Arg)
        )

    def may_yield_batch_encoding(self, source: cst.BaseExpression, loop: cst.CSTNode, moved: cst.BaseExpression) -> bool:
        """``moved``, a name ``loop`` (drawing from ``source``) unpacks, may be a tokenizer's
        ``BatchEncoding``: the file tokenizes to tensors and every loader behind ``source`` has
        a ``collate_fn`` of its own, which may hand items on as they are (contrastors' WinoGAViL
        loader: ``collate_fn=lambda batch: batch[0]`` over items whose text is
        ``tokenizer([prompt])``). The default collate rebuilds a mapping as a ``dict``."""
        ctx = self.ctx
        if not isinstance(moved, cst.Name) or not self.tokenizes_to_tensors:
            return False
        if not isinstance(loop, cst.For) or moved.value not in target_names(loop.target):
            return False
        loaders = self.feeding(source)
        collate = lambda c: ctx.argument(c, "collate_fn", DATALOADER_POSITION["collate_fn"])  # noqa: E731
        return bool(loaders) and all(collate(c) not in (None, MISSING) for _, c in loaders)

    def collates_batch_encoding(self, call: cst.Call) -> bool:
        """A ``collate_fn`` of the project that returns a transformers ``BatchEncoding``
        (pytorch_neural_crf's ``return BatchEncoding(encoded_inputs, tensor_type="pt")``), which
        code reads by attribute (``batch.input_ids``). Before torch 1.11 (pytorch#67831) pinning
        rebuilt a mapping as a plain ``dict``, and those reads raise."""
        functions = self._loader_collate_functions(call)
        # Any: where ``dataset.collate_fn`` may be one of several methods of that name, one that
        # makes a ``BatchEncoding`` is enough to hold the fix to its version.
        return bool(functions) and any(_returns_batch_encoding(owner, function) for owner, function in functions)

    def collates_tuples(self, call: cst.Call) -> str | None:
        """The batch entry (``"original_sizes"``) a ``collate_fn`` of the project gathers from
        its items as they are (``[example["original_sizes"] for example in examples]``) where
        the file stores tuples under that key (diffusers' SDXL scripts, copied into ImageReward:
        ``original_sizes.append((image.height, image.width))``). Before torch 2.10 pinning
        rebuilt every tuple of a batch as a list (pytorch#48419), and the step's
        ``original_size + crops_coords_top_left + target_size`` raises; None where none is seen."""
        functions = self._loader_collate_functions(call)
        for owner, function in functions or ():
            held = _keys_holding_tuples(owner)
            if not held:
                continue
            for comp in owner.walk(function, cst.ListComp):
                item = comp.elt
                if not (isinstance(item, cst.Subscript) and isinstance(item.value, cst.Name)):
                    continue
                if item.value.value not in target_names(comp.for_in.target):
                    continue
                key = _string_key(owner, item)
                if key in held:
                    return key
        return None

    def _loader_collate_functions(self, call: cst.Call) -> "list[tuple[FileContext, cst.FunctionDef]] | None":
        """The functions the loader's ``collate_fn`` can be (:meth:`_collate_functions`)."""
        collate = self.ctx.argument(call, "collate_fn", DATALOADER_POSITION["collate_fn"])
        return self._collate_functions(collate) if isinstance(collate, cst.BaseExpression) else None

    def _collate_functions(self, collate: cst.BaseExpression) -> "list[tuple[FileContext, cst.FunctionDef]] | None":
        """The functions a ``collate_fn`` argument can be: a function of the project, a method of
        that name, ``functools.partial`` of one, either branch of a conditional, or the inner
        function a factory of the project returns (GCC's ``collate_fn=labeled_batcher() if
        args.finetune else batcher()``, each returning its ``batcher_dev``); None when unknown."""
        ctx = self.ctx
        if isinstance(collate, cst.IfExp):
            body, orelse = self._collate_functions(collate.body), self._collate_functions(collate.orelse)
            return body + orelse if body and orelse else None
        if isinstance(collate, cst.Call) and ctx.qualname(collate.func) == "functools.partial" and collate.args:
            return self._collate_functions(collate.args[0].value)
        if isinstance(collate, cst.Call) and isinstance(collate.func, cst.Name):
            factory = self.function_named(collate.func)
            inner = _returned_inner_function(factory[1]) if factory is not None else None
            return [(factory[0], inner)] if factory is not None and inner is not None else None
        if isinstance(collate, cst.Name):
            found = self.function_named(collate)
            return [found] if found is not None else None
        if isinstance(collate, cst.Attribute) and ctx.project is not None:
            bound = ctx.project.binding(collate)  # ``utils.collate_fn`` of ``import util.misc as utils``
            if bound is not None and isinstance(bound[1].node, cst.FunctionDef):
                return [(bound[0], bound[1].node)]
            return ctx.project.methods_named(collate.attr.value) or self._assigned_to_attribute(collate.attr.value)
        return None

    def _assigned_to_attribute(self, attribute: str) -> "list[tuple[FileContext, cst.FunctionDef]] | None":
        """The functions the project's files assign to an attribute of that name: grail's trainer
        reads ``collate_fn=self.params.collate_fn``, which ``train.py`` sets with
        ``params.collate_fn = collate_dgl``. None when any assignment is not a function of the
        project, or there is none."""
        view = self.ctx.project
        found: list[tuple[FileContext, cst.FunctionDef]] = []
        for path in view.texts_matching(_attribute_assignment(attribute), attribute.encode()):
            other = view.context_of(path) if os.path.abspath(path) != os.path.abspath(self.ctx.path) else self.ctx
            if other is None:
                return None
            for node in other.assignments_to_attribute(attribute):
                value = node.value if isinstance(node, (cst.Assign, cst.AnnAssign)) else None
                function = other.facts.loaders.function_named(value) if isinstance(value, cst.Name) else None
                if function is None:
                    return None
                found.append(function)
        return found or None

    def function_named(self, name: cst.Name) -> "tuple[FileContext, cst.FunctionDef] | None":
        """The ``def`` a name binds once: in this file, or in the project module it is imported
        from; with the context of the file that defines it."""
        ctx = self.ctx
        bindings = ctx.lookup(name.value, name)
        if len(bindings) != 1:
            return None
        node = bindings[0].node
        if isinstance(node, cst.FunctionDef):
            return ctx, node
        if isinstance(node, cst.ImportFrom) and ctx.project is not None:
            found = ctx.project.binding(name)
            if found is not None and isinstance(found[1].node, cst.FunctionDef):
                return found[0], found[1].node
        return None

    def _python_sequence_dataset(self, call: cst.Call) -> bool:
        """A dataset written as a Python list / tuple (literal or comprehension) or a range:
        its items are already in memory, and indexing them in-process is cheaper than workers."""
        dataset = self._dataset_expression(call)
        return isinstance(dataset, (cst.List, cst.Tuple, cst.ListComp)) or self.index_dataset(call)

    @cached_property
    def file_streams_data(self) -> bool:
        """Whether the file uses iterable / streaming datasets anywhere (``IterableDataset``,
        ``load_dataset(..., streaming=True)``, ``to_iterable_dataset()``, TRL's packed
        ``ConstantLengthDataset``, WebDataset, torchdata). ``streaming=args.streaming`` counts:
        the command line may turn it on, whatever the flag's default."""
        ctx = self.ctx
        if any(n.value == "IterableDataset" for n in ctx.nodes(cst.Name)):
            return True
        if any(a.attr.value in ("IterableDataset", "to_iterable_dataset") for a in ctx.nodes(cst.Attribute)):
            return True
        for arg in ctx.nodes(cst.Arg):
            if arg.keyword is not None and arg.keyword.value == "streaming":
                value = ctx.values.resolve(arg.value)
                if value is None or value.value is not False or value.origin == "argparse default":
                    return True
        if ctx.calls(*_ITERABLE_DATASETS):
            return True
        return any(ctx.calls_with_prefix(prefix) for prefix in _ITERABLE_PREFIXES)

    @per_node
    def in_memory_tensors(self, call: cst.Call) -> bool:
        """A ``TensorDataset`` (also one a function of the file builds and returns, or one handed
        in as a parameter)."""
        dataset = self.ctx.argument(call, "dataset", 0)
        if dataset is None or dataset is MISSING:
            return False
        return any(
            isinstance(source, cst.Call)
            and (self.ctx.qualname(source.func) in IN_MEMORY_DATASETS or self._tensor_itself(source))
            for source in self.dataset_sources(dataset) or ()
        )

    def plain_tensor_dataset(self, call: cst.Call) -> bool:
        """The loader's data set is a tensor itself, not a ``Dataset`` (:meth:`_tensor_itself`)."""
        dataset = self.ctx.argument(call, "dataset", 0)
        if dataset is None or dataset is MISSING:
            return False
        sources = self.dataset_sources(dataset) or ()
        return bool(sources) and all(isinstance(s, cst.Call) and self._tensor_itself(s) for s in sources)

    def _tensor_itself(self, source: cst.Call) -> bool:
        """A tensor handed to the loader as its data set (ULTRA's ``DataLoader(torch.cat([...]).t(),
        ...)``): indexed in memory like a ``TensorDataset``, and as likely on the GPU already."""
        while isinstance(source.func, cst.Attribute) and source.func.attr.value in _CHEAP_TENSOR_METHODS:
            if not isinstance(source.func.value, cst.Call):
                return False
            source = source.func.value
        return (self.ctx.qualname(source.func) or "") in _TENSOR_BUILDERS

    @per_node
    def in_memory(self, call: cst.Call) -> bool:
        """The loader's dataset is tensors held in memory: a ``TensorDataset``
        (:meth:`in_memory_tensors`) or a class of the file that only indexes them
        (:meth:`indexes_memory`). Each item costs a few tensor operations in Python."""
        return self.in_memory_tensors(call) or self.indexes_memory(call)

    def unsuited_to_workers(self, call: cst.Call) -> bool:
        """Iterable datasets (each worker would replay the stream) and in-memory datasets
        (tensor datasets, Python sequences, a class of the file that only indexes what it holds)."""
        if self.file_streams_data or self._python_sequence_dataset(call):
            return True
        return self.in_memory(call)

    def copies_items_to_gpu(self, call: cst.Call) -> bool:
        """The loader's dataset is a class of the file whose ``__getitem__`` indexes data it holds
        in host memory and moves each item to a device itself (``return self.data[i:j].cuda()``):
        one small host-to-device copy per sample, and the batch stacked on the GPU. Not where the
        data it is given is on the GPU already (``TextSampler(data.cuda(), n)``)."""
        if not self.indexes_memory(call, moving=True) or self.indexes_memory(call):
            return False
        dataset = self.ctx.argument(call, "dataset", 0)
        sources = self.dataset_sources(dataset) if isinstance(dataset, cst.BaseExpression) else None
        return bool(sources) and not any(self._gpu_tensor_dataset(source) for source in sources)

    def indexes_memory(self, call: cst.Call, moving: bool = False) -> bool:
        """The loader's dataset is a class of the project whose ``__getitem__`` only indexes or
        slices data it holds (``self.data[i : i + n].long()``), with no I/O, decoding or transform:
        each item costs a few tensor operations, which worker processes would only add to. With
        ``moving``, a move of the item to a device (``.cuda()``, ``.to(device)``) is allowed too."""
        classes = self.dataset_classes(call)
        if classes is None:
            return False
        for owner, cls in classes:
            getters = class_methods(owner.ctx, cls, ("__getitem__", "__getitems__"))
            if not getters or not all(owner._only_indexes(getter, moving) for getter in getters):
                return False
        return True

    def shards_by_worker(self, call: cst.Call) -> bool:
        """The loader's data set splits its data between worker processes itself: its class's
        module reads ``get_worker_info()`` (lit-gpt's ``PackedDataset`` shards its files by rank
        and worker, and needs enough files for every worker). Adding workers changes which
        worker reads what, and may leave one without files."""
        classes = self.dataset_classes(call)
        return bool(classes) and any("get_worker_info" in owner.ctx.source for owner, _ in classes)

    def dataset_classes(self, call: cst.Call) -> "list[tuple[LoaderFacts, cst.ClassDef]] | None":
        """The classes the loader's data set is built from (:meth:`dataset_class`), or None
        unless every source the file shows is a call of such a class."""
        dataset = self.ctx.argument(call, "dataset", 0)
        if dataset is None or dataset is MISSING:
            return None
        sources = self.dataset_sources(dataset) or ()
        classes = [self.dataset_class(s) for s in sources if isinstance(s, cst.Call)]
        if not classes or any(found is None for found in classes):
            return None
        return classes  # type: ignore[return-value]

    def dataset_class(self, source: cst.Call) -> "tuple[LoaderFacts, cst.ClassDef] | None":
        """The class a dataset is built from, with the loader facts of the file defining it: a
        class of this file, or of another module of the project (``gail.ExpertDataset(...)``)."""
        found = defining_class(self.ctx, source.func)
        if found is None:
            return None
        owner, cls = found
        return (self if owner is self.ctx else owner.facts.loaders), cls

    def _only_indexes(self, getter: cst.FunctionDef, moving: bool = False) -> bool:
        ctx = self.ctx
        # ``loc, vel, edges = self.data`` then ``loc[i]`` (egnn's NBodyDataset): the same held tensors.
        def of_self(value: cst.BaseExpression) -> bool:
            if isinstance(value, cst.Tuple):
                return bool(value.elements) and all(of_self(element.value) for element in value.elements)
            return isinstance(value, cst.Attribute) and dotted_name(value.value) == "self"

        held = {
            name
            for assign in ctx.walk(getter, cst.Assign)
            if of_self(assign.value)
            for target in assign.targets
            for name in target_names(target.target)
        }
        if not any(
            (isinstance(sub.value, cst.Attribute) and dotted_name(sub.value.value) == "self")
            or (isinstance(sub.value, cst.Name) and sub.value.value in held)
            for sub in ctx.walk(getter, cst.Subscript)
        ):
            return False
        raised = {id(call) for statement in ctx.walk(getter, cst.Raise) for call in ctx.walk(statement, cst.Call)}
        for inner in ctx.walk(getter, cst.Call):
            if id(inner) in raised:
                continue  # ``raise Exception("Wrong dataset partition")``: not work done per item
            func = inner.func
            qualname = ctx.qualname(func) or ""
            if qualname.startswith("torch.") and qualname.split(".")[1] not in ("load", "hub", "from_file"):
                continue
            if isinstance(func, cst.Name) and func.value in _CHEAP_BUILTINS and not ctx.lookup(func.value, func):
                continue
            if isinstance(func, cst.Attribute) and func.attr.value in _CHEAP_TENSOR_METHODS:
                continue
            if moving and ctx.facts.devices.moves_off_cpu(inner):
                continue
            return False
        return True

    def dataset_sources(self, expr: cst.BaseExpression, depth: int = 0) -> list[cst.BaseExpression] | None:
        """The expressions a dataset argument can be, seen through names bound once, the
        parameters of the file's functions (what each call of the file passes) and the
        ``return`` statements of the file's own functions (``load_and_cache_examples(...)``);
        None when some path cannot be followed."""
        ctx = self.ctx
        if depth > 6:
            return None
        if isinstance(expr, cst.Name):
            bindings = ctx.lookup(expr.value, expr)
            if len(bindings) != 1:
                return None
            binding = bindings[0]
            if binding.value is not None:
                return self.dataset_sources(binding.value, depth + 1)
            if isinstance(binding.node, cst.Param):
                return self._sources_passed_for(binding.node, depth)
            paired = _paired_value(binding.node, expr.value)
            if paired is not None:
                # ``local_train_ds, local_val_ds = dset_train, dset_val`` (the Kaggle ensembler)
                return self.dataset_sources(paired, depth + 1)
            return None
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            # PiSSA's ``DataLoader(self.odd_dataset, ...)``, set in ``__init__`` to a ``TensorDataset``
            assigned = self._assigned_to_self(expr)
            if not assigned:
                return [expr] if assigned is not None else None
            found = []
            for value in assigned:
                inner = self.dataset_sources(value, depth + 1)
                if inner is None:
                    return None
                found.extend(inner)
            return found
        if isinstance(expr, cst.Call):
            function = ctx.loops.callee(expr)
            if function is None:
                return [expr]
            returns = [r for r in ctx.walk(function, cst.Return) if ctx.scope_of.get(r) is function]
            if not returns:
                return None
            found: list[cst.BaseExpression] = []
            for statement in returns:
                if statement.value is None:
                    return None
                inner = self.dataset_sources(statement.value, depth + 1)
                if inner is None:
                    return None
                found.extend(inner)
            return found
        return [expr]

    def _assigned_to_self(self, attribute: cst.Attribute) -> list[cst.BaseExpression] | None:
        """The values the methods of the enclosing class assign to ``self.<attr>``; None when one
        is assigned some other way (unpacked, augmented) and so cannot be read."""
        ctx = self.ctx
        cls = ctx.enclosing(attribute, cst.ClassDef)
        if not isinstance(cls, cst.ClassDef):
            return []
        name = attribute.attr.value

        def is_it(target: cst.BaseExpression) -> bool:
            return (
                isinstance(target, cst.Attribute)
                and isinstance(target.value, cst.Name)
                and target.value.value == "self"
                and target.attr.value == name
            )

        values: list[cst.BaseExpression] = []
        for node in ctx.walk(cls, cst.Assign):
            for target in node.targets:
                if is_it(target.target):
                    values.append(node.value)
                elif isinstance(target.target, (cst.Tuple, cst.List)) and any(is_it(e.value) for e in target.target.elements):
                    return None
        for node in (*ctx.walk(cls, cst.AnnAssign), *ctx.walk(cls, cst.AugAssign)):
            if is_it(node.target):
                if isinstance(node, cst.AugAssign) or node.value is None:
                    return None
                values.append(node.value)
        return values

    def _sources_passed_for(self, param: cst.Param, depth: int) -> list[cst.BaseExpression] | None:
        """What every call of the file passes for ``param`` of one of its functions."""
        ctx = self.ctx
        function = ctx.enclosing(param, cst.FunctionDef)
        if not isinstance(function, cst.FunctionDef):
            return None
        positional = list(function.params.params)
        index = next((i for i, p in enumerate(positional) if p is param), None)
        callers = ctx.loops.callers(function)
        if not callers:
            return None
        if index is not None and isinstance(ctx.parent.get(ctx.parent.get(function)), cst.ClassDef):
            index -= 1  # ``self.train(dataset)``: ``self`` is not passed
        found: list[cst.BaseExpression] = []
        for caller in callers:
            passed = ctx.argument(caller, param.name.value, index if index is not None and index >= 0 else None)
            if passed is None or passed is MISSING:
                return None
            inner = self.dataset_sources(passed, depth + 1)
            if inner is None:
                return None
            found.extend(inner)
        return found

    def _gpu_tensor_dataset(self, definition: cst.BaseExpression) -> bool:
        """A dataset expression built from tensors moved with ``.cuda()`` / ``.to(...)`` or made
        with ``device=`` a GPU."""
        ctx = self.ctx
        devices = ctx.facts.devices
        for inner in ctx.walk(definition, cst.Call):
            func = inner.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("cuda", "to"):
                return True
            device = ctx.keyword_arg(inner, "device")
            if device is not None and devices.where(device.value).gpu:
                return True
        for name in ctx.walk(definition, cst.Name):
            bound = ctx.bound_call(name)
            if bound is None:
                continue
            if isinstance(bound.func, cst.Attribute) and bound.func.attr.value in ("cuda", "to"):
                return True
            device = ctx.keyword_arg(bound, "device")
            if device is not None and devices.where(device.value).gpu:
                return True
            if isinstance(bound.func, cst.Name):
                # The Kaggle ensembler's ``XnumpyToTensor(x, args)``: ``torch.from_numpy(x).cuda()``
                # under ``if args.use_cuda``, then returned; its TensorDataset holds GPU tensors.
                found = self.function_named(bound.func)
                if found is not None and _returns_moved(found[0], found[1]):
                    return True
        return False

    @per_node
    def dataset_on_gpu(self, call: cst.Call) -> bool:
        """Whether the loader's batches are on the GPU before it yields them: the dataset holds
        GPU tensors, or its items or its ``collate_fn`` are moved there. Pinning such a batch
        raises ("only dense CPU tensors can be pinned"), and a forked worker cannot use CUDA."""
        ctx = self.ctx
        dataset = ctx.argument(call, "dataset", 0)
        if dataset is not None and dataset is not MISSING:
            definition = ctx.bound_call(dataset) if isinstance(dataset, cst.Name) else dataset
            if definition is not None and self._gpu_tensor_dataset(definition):
                return True
            sources = self.dataset_sources(dataset)
            for source in sources or ():
                if self._gpu_tensor_dataset(source) or self._items_on_device(source) or self._given_a_device(source):
                    return True
            opaque = sources is None or any(
                isinstance(s, (cst.Name, cst.Attribute, cst.IfExp, cst.Subscript)) or self._project_factory(s) for s in sources
            )
            if opaque and self.project_builds_items_on_device:
                return True  # a data set the file cannot see, in a project whose data sets make CUDA items
        collate = ctx.argument(call, "collate_fn", DATALOADER_POSITION["collate_fn"])
        if collate is None or collate is MISSING:
            return False
        if self.callable_moves_to_device(collate):
            return True
        # collie's ``collate_fn=self.collate_fn``, stored from a parameter its callers fill with
        # the trainer's default ``ColliePadder()``, which pads on the GPU.
        return isinstance(collate, (cst.Name, cst.Attribute, cst.Subscript)) and self.project_collates_on_device

    def _given_a_device(self, source: cst.BaseExpression) -> bool:
        """A data set built with a device other than the CPU (nice-slam's ``get_dataset(cfg,
        args, scale, device=self.device)``): its items are made there."""
        if not isinstance(source, cst.Call):
            return False
        device = self.ctx.argument(source, "device")
        if device is None or device is MISSING or (isinstance(device, cst.Name) and device.value == "None"):
            return False
        return self.ctx.facts.devices.where(device) is not Where.CPU  # unread: it may well be the GPU

    def _project_factory(self, source: cst.BaseExpression) -> bool:
        """A call of a function of the file or the project that builds the data set: what it
        builds is not seen here."""
        if not isinstance(source, cst.Call):
            return False
        if self.ctx.loops.callee(source) is not None:
            return True
        view = self.ctx.project
        found = view.binding(source.func) if view is not None and isinstance(source.func, (cst.Name, cst.Attribute)) else None
        return found is not None and isinstance(found[1].node, cst.FunctionDef)

    def _items_on_device(self, source: cst.BaseExpression) -> bool:
        """A dataset of a class of the project that moves its data or items to a device."""
        if not isinstance(source, cst.Call):
            return False
        found = self.dataset_class(source)
        if found is None:
            return False
        owner, cls = found
        return any(owner.runs_device_move(m) for m in class_methods(owner.ctx, cls, _ITEM_METHODS))

    @cached_property
    def project_builds_items_on_device(self) -> bool:
        """Whether a dataset class of the files that run with this one (:meth:`Project.neighbourhood`)
        makes its items on a device itself (RWKV's ``torch.tensor(dix, device=torch.device("cuda"))``
        in ``__getitem__``): a loader whose data set the file cannot see (a trainer's
        ``self.train_dataset``) may draw from it."""
        project = self.ctx.project
        if project is None:
            return False
        for other in project.neighbour_contexts(_MAY_MAKE_DEVICE_ITEMS):
            for cls in other.nodes(cst.ClassDef):
                getters = class_methods(other, cls, ("__getitem__", "__getitems__", "__iter__"))
                if any(other.facts.loaders.runs_device_move(g) for g in getters):
                    return True
        return False

    @cached_property
    def project_collates_on_device(self) -> bool:
        """Whether a collator built as a ``collate_fn`` in the files that run with this one
        (an argument, or a parameter's default: collie's ``train_dataset_collate_fn=ColliePadder()``)
        moves the batch to a device: a loader handed its ``collate_fn`` through parameters
        (``collate_fn=self.collate_fn``) may be given that one."""
        project = self.ctx.project
        if project is None:
            return False
        for other in project.neighbour_contexts(_BUILDS_A_COLLATOR.search):
            built = [
                param.default for param in other.nodes(cst.Param)
                if isinstance(param.default, cst.Call) and "collate" in param.name.value
            ] + [
                arg.value for arg in other.nodes(cst.Arg)
                if arg.keyword is not None and "collate" in arg.keyword.value and isinstance(arg.value, cst.Call)
            ]
            if any(other.facts.loaders.callable_moves_to_device(value) for value in built):
                return True
        return False

    def callable_moves_to_device(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether a collate function the file defines moves the batch to a device: a lambda or
        a function of the file (and the functions of the file they call), ``partial(f, ...)``, an
        instance of a class of the file with such a ``__call__``, or a method (``dataset.collate_fn``).
        Library collators (``DataCollatorWithPadding``, ``default_data_collator``) and functions
        imported from other modules are taken as CPU ones."""
        ctx = self.ctx
        if depth > 4:
            return False
        if isinstance(expr, cst.Lambda):
            return self.runs_device_move(expr.body)
        if isinstance(expr, cst.Call):
            if ctx.qualname(expr.func) == "functools.partial" and expr.args:
                device = ctx.keyword_arg(expr, "device")
                if device is not None and ctx.facts.devices.where(device.value) is not Where.CPU:
                    return True  # ``partial(collate, device=device)``: it is told where to put the batch
                return self.callable_moves_to_device(expr.args[0].value, depth + 1)
            # A collator class of this file, or one imported from the project (grit's
            # ``collate_fn=NoCapsCollator(device)``, whose ``__call__`` moves the samples).
            found = defining_class(ctx, expr.func)
            if found is None:
                return False
            owner, cls = found
            facts = self if owner is ctx else owner.facts.loaders
            return any(facts.runs_device_move(m) for m in class_methods(owner, cls, ("__call__",)))
        if isinstance(expr, cst.Name):
            bindings = ctx.lookup(expr.value, expr)
            if len(bindings) > 1:  # chosen in branches: every choice moves the batch
                return all(
                    b.value is not None and self.callable_moves_to_device(b.value, depth + 1) for b in bindings
                )
            if len(bindings) != 1:
                return False
            binding = bindings[0]
            if isinstance(binding.node, (cst.FunctionDef, cst.ImportFrom)):
                found = self.function_named(expr)  # here, or a collate function of another project module
                return found is not None and found[0].facts.loaders.runs_device_move(found[1])
            return binding.value is not None and self.callable_moves_to_device(binding.value, depth + 1)
        if isinstance(expr, cst.Attribute):
            owner = expr.value
            if isinstance(owner, cst.Name) and owner.value == "self":
                cls = ctx.enclosing(expr, cst.ClassDef)
            else:
                built = ctx.bound_call(owner)
                cls = local_class(ctx, built.func) if built is not None else None
            if isinstance(cls, cst.ClassDef):
                return any(self.runs_device_move(m) for m in class_methods(ctx, cls, (expr.attr.value,)))
            assignments = ctx.attribute_assignments.get(dotted_name(expr) or "", [])
            values = [a.value for a in assignments if isinstance(a, cst.Assign)]
            return any(self.callable_moves_to_device(v, depth + 1) for v in values)
        if isinstance(expr, cst.Subscript):
            # grit's ``collate_fn=collators['train']`` from ``collators = {'train':
            # PairedCollator(field, device=device), ...}``: the entry named, or every entry.
            table = ctx.single_assignment(expr.value) if isinstance(expr.value, cst.Name) else None
            if not isinstance(table, cst.Dict) or not table.elements:
                return False
            key = ctx.values.resolve(expr.slice[0].slice.value) if isinstance(expr.slice[0].slice, cst.Index) else None
            entries = [e for e in table.elements if isinstance(e, cst.DictElement)]
            if len(entries) != len(table.elements):
                return False  # ``**others``: entries not seen
            if key is not None:
                named = [e for e in entries if (v := ctx.values.resolve(e.key)) is not None and v.value == key.value]
                entries = named or entries
            return all(self.callable_moves_to_device(e.value, depth + 1) for e in entries)
        return False

    def runs_device_move(self, root: cst.CSTNode, depth: int = 0) -> bool:
        """Whether ``root`` moves tensors to a device, itself or through the file's own functions it calls."""
        ctx = self.ctx
        devices = ctx.facts.devices
        for call in ctx.walk(root, cst.Call):
            if devices.moves_off_cpu(call):
                return True
            if depth < _CALL_DEPTH:
                function = ctx.loops.callee(call)
                if function is not None and function is not root and self.runs_device_move(function, depth + 1):
                    return True
        return False

    # -- the process model --------------------------------------------------------------------------
    def spawn_safe(self, *nodes: cst.CSTNode) -> bool:
        """Whether worker processes may be started: the script guards its entry point and
        none of ``nodes`` runs at import time (a spawned worker re-imports the main module)."""
        return self.ctx.has_main_guard and not any(self.ctx.runs_on_import(node) for node in nodes)

    def local_callable(self, call: cst.Call) -> str | None:
        """The keyword (``collate_fn``, ``worker_init_fn``) of a DataLoader given a lambda or a
        function defined inside another function: neither can be pickled for a spawned worker."""
        ctx = self.ctx
        for keyword in ("collate_fn", "worker_init_fn"):
            argument = ctx.argument(call, keyword, 6 if keyword == "collate_fn" else None)
            if argument is None or argument is MISSING:
                continue
            if isinstance(argument, cst.Lambda):
                return keyword
            if isinstance(argument, cst.Name):
                for binding in ctx.lookup(argument.value, argument):
                    nested = isinstance(binding.node, cst.FunctionDef) and binding.scope is not ctx.module
                    if nested or isinstance(binding.value, cst.Lambda):
                        return keyword
        return None


# -- the batch a loop draws ------------------------------------------------------------------------
# Attributes that measure a batch without moving or computing with it.
_MEASURES = frozenset({"shape", "size", "dtype", "ndim", "numel", "dim"})


def _argument_of_builtin(ctx: "FileContext", node: cst.CSTNode, builtins: tuple[str, ...]) -> bool:
    """``node`` is an argument of a call to one of ``builtins`` (``len(loader)``)."""
    arg = ctx.parent.get(node)
    call = ctx.parent.get(arg) if isinstance(arg, cst.Arg) else None
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value in builtins


# Reductions whose result stays where the tensor is: statistics of a batch computed on the host.
_HOST_REDUCTIONS = frozenset({"mean", "std", "sum", "var", "min", "max", "numpy", "tolist"})


def _reduced_on_host(ctx: "FileContext", node: cst.CSTNode) -> bool:
    """``node`` (or a slice of it, ``inputs[:, i, :, :]``) is reduced by a method whose result is
    not moved (``.mean()``, ``.std()``, ``.numpy()``): a statistic taken on the host."""
    holder = ctx.parent.get(node)
    while isinstance(holder, cst.Subscript) and holder.value is node:
        node, holder = holder, ctx.parent.get(holder)
    if not (isinstance(holder, cst.Attribute) and holder.value is node and holder.attr.value in _HOST_REDUCTIONS):
        return False
    call = ctx.parent.get(holder)
    if not isinstance(call, cst.Call) or call.func is not holder:
        return False
    after = ctx.parent.get(call)
    return not (isinstance(after, cst.Attribute) and after.value is call and after.attr.value in ("to", "cuda"))


_JOINS = ("torch.cat", "torch.concat", "torch.concatenate", "torch.stack", "torch.hstack", "torch.vstack")


def _joined_on_host(ctx: "FileContext", node: cst.CSTNode) -> bool:
    """``node`` (or a part of it, ``pair1[0]``) goes into ``torch.cat`` / ``torch.stack``, which
    makes a new tensor in pageable host memory: StrongSORT's AFLink copies
    ``torch.cat((pair1[0], pair2[0], ...)).cuda()``, never the pinned batch itself."""
    holder = ctx.parent.get(node)
    while isinstance(holder, (cst.Subscript, cst.SubscriptElement, cst.Index)):
        holder = ctx.parent.get(holder)
    while isinstance(holder, (cst.Element, cst.Tuple, cst.List)):
        holder = ctx.parent.get(holder)
    call = ctx.parent.get(holder) if isinstance(holder, cst.Arg) else None
    return isinstance(call, cst.Call) and ctx.qualname(call.func) in _JOINS and call.args[0] is holder


_PROCESS_QUEUES = frozenset({"multiprocessing.Queue", "torch.multiprocessing.Queue", "multiprocessing.SimpleQueue", "torch.multiprocessing.SimpleQueue"})


def _sent_to_another_process(ctx: "FileContext", node: cst.CSTNode) -> bool:
    """``node`` is the first argument of ``q.put(node)`` on a multiprocessing queue (a name
    bound to ``mp.Queue(...)`` or annotated ``mp.Queue``): the batch reaches the consumer through
    shared memory, not the page-locked buffer pinning made (CAT's ``dataserver`` producer)."""
    arg = ctx.parent.get(node)
    call = ctx.parent.get(arg) if isinstance(arg, cst.Arg) else None
    if not (
        isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value in ("put", "put_nowait")
        and call.args and call.args[0] is arg and isinstance(call.func.value, cst.Name)
    ):
        return False
    queue = call.func.value
    for binding in ctx.lookup(queue.value, queue):
        made = binding.node
        if isinstance(made, cst.Param) and made.annotation is not None:
            if ctx.qualname(made.annotation.annotation) in _PROCESS_QUEUES:
                return True
        elif isinstance(made, cst.Assign) and isinstance(made.value, cst.Call) and ctx.qualname(made.value.func) in _PROCESS_QUEUES:
            return True
    return False


def _shared_in_place(ctx: "FileContext", node: cst.CSTNode) -> bool:
    """``node`` is what ``for part in node:`` walks, to move each tensor part into shared memory
    (``part.share_memory_()``, under an ``isinstance`` test) before it goes to another process."""
    loop = ctx.parent.get(node)
    if not isinstance(loop, cst.For) or loop.iter is not node or not isinstance(loop.target, cst.Name):
        return False
    part = loop.target.value
    reads = [use for use in ctx.walk(loop.body, cst.Name) if use.value == part and ctx.is_read(use)]
    shared = False
    for use in reads:
        holder = ctx.parent.get(use)
        if isinstance(holder, cst.Attribute) and holder.attr.value == "share_memory_":
            shared = True
        elif not _argument_of_builtin(ctx, use, ("isinstance",)):
            return False
    return shared


def _appended(ctx: "FileContext", node: cst.CSTNode) -> bool:
    """``node`` is the one argument of ``<list>.append(node)``: kept as it is, on the host."""
    arg = ctx.parent.get(node)
    call = ctx.parent.get(arg) if isinstance(arg, cst.Arg) else None
    return (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "append"
        and len(call.args) == 1
        and ctx.parent.get(call) is not None
        and isinstance(ctx.parent.get(call), cst.Expr)
    )


def _returns_moved(ctx: "FileContext", function: cst.FunctionDef) -> bool:
    """The function returns a name it binds to a tensor moved to the GPU (``x = t.cuda()`` ...
    ``return x``), or returns such a move itself."""
    devices = ctx.facts.devices
    moved: set[str] = set()
    for assign in ctx.walk(function, cst.Assign):
        value = assign.value
        if isinstance(value, cst.Call) and devices.moves_off_cpu(value):
            for target in assign.targets:
                moved |= target_names(target.target)
    for ret in ctx.walk(function, cst.Return):
        value = ret.value
        if isinstance(value, cst.Name) and value.value in moved:
            return True
        if isinstance(value, cst.Call) and devices.moves_off_cpu(value):
            return True
    return False


def _paired_value(node: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    """The element of ``a, b = x, y`` that ``name`` takes; None for any other binding."""
    if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
        return None
    target, value = node.targets[0].target, node.value
    if not (isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List))):
        return None
    if len(target.elements) != len(value.elements) or any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)):
        return None
    for left, right in zip(target.elements, value.elements):
        if isinstance(left.value, cst.Name) and left.value.value == name:
            return right.value
    return None


# ``torch.set_default_tensor_type('torch.cuda.FloatTensor')`` / ``torch.set_default_device("cuda")``.
_CUDA_BY_DEFAULT = re.compile(
    rb"^[^#\n]*\bset_default_(?:tensor_type\(\s*['\"]?torch\.cuda\.|device\(\s*['\"]cuda)", re.M
)


_DEFAULT_SETTERS = ("torch.set_default_tensor_type", "torch.set_default_device")


def _latest_binding(ctx: "FileContext", read: cst.Name) -> cst.BaseExpression | None:
    """The value of the last assignment to ``read``'s name that comes before it in the file
    (a notebook binds ``loader`` again cell after cell); None where none does."""
    before = [b for b in ctx.lookup(read.value, read) if b.value is not None and ctx.order[b.value] < ctx.order[read]]
    return max(before, key=lambda b: ctx.order[b.value]).value if before else None


def _breaks_after_first(ctx: "FileContext", loop: cst.For) -> bool:
    """The loop's body ends in a ``break`` and has no ``continue`` of its own: one pass."""
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    if not body or not isinstance(body[-1], cst.SimpleStatementLine) or not any(isinstance(s, cst.Break) for s in body[-1].body):
        return False
    for node in ctx.walk(loop.body, cst.Continue):
        if ctx.enclosing(node, cst.For, cst.While) is loop:
            return False
    return True


def _iterates(expr: cst.BaseExpression, name: str) -> bool:
    """``for ... in name`` / ``enumerate(name)`` / ``tqdm(name)``."""
    if isinstance(expr, cst.Name):
        return expr.value == name
    return (
        isinstance(expr, cst.Call)
        and (dotted_name(expr.func) or "").rsplit(".", 1)[-1] in ("enumerate", "tqdm")
        and bool(expr.args)
        and isinstance(expr.args[0].value, cst.Name)
        and expr.args[0].value.value == name
    )


def target_names(target: cst.BaseExpression) -> set[str]:
    """The plain names a loop or assignment target binds."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        names: set[str] = set()
        for element in target.elements:
            names |= target_names(element.value)
        return names
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return set()


def batch_target(target: cst.BaseExpression, indexed: bool) -> cst.BaseExpression | None:
    """The part of a loop target that holds the batch (``(x, y)`` in ``for i, (x, y) in enumerate(...)``)."""
    if not indexed:
        return target
    if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
        return target.elements[1].value
    return None


# ``collate_fn=Padder(...)`` or ``train_collate_fn: Callable = Padder()``: a collator built as a collate function.
_BUILDS_A_COLLATOR = re.compile(rb"collate_fn\w*[ \t]*(?::[^=\n]*)?=[ \t]*[A-Za-z_][\w.]*\(")


def _MAY_MAKE_DEVICE_ITEMS(text: bytes) -> bool:
    """A module that may define a data set making its items on a device: it defines
    ``__getitem__`` / ``__iter__`` and names CUDA or a device (read before parsing it)."""
    return (b"__getitem__" in text or b"__iter__" in text) and (b"cuda" in text or b"device" in text)


# Calls that move items into Python containers without making a tensor.
_GATHERING_CALLS = frozenset(
    ("len", "list", "dict", "tuple", "zip", "range", "enumerate", "sorted", "isinstance", "set", "getattr")
)
_GATHERING_METHODS = frozenset(("keys", "items", "values", "append", "extend", "get", "pop", "update", "setdefault"))
_CONTAINERS = (cst.Dict, cst.List, cst.Tuple, cst.DictComp, cst.ListComp)


def _reads_nothing_by_index(ctx: "FileContext", getter: cst.FunctionDef) -> bool:
    """A ``__getitem__(self, index)`` that makes nothing (container builtins only) and uses its
    index for nothing but handing it back: no subscript, slice or call takes it."""
    params = getter.params.params
    if len(params) != 2:
        return False
    index = params[1].name.value
    if not _only_gathering_calls(ctx, getter):
        return False
    for use in ctx.walk(getter.body, cst.Name):
        if use.value != index:
            continue
        parent = ctx.parent.get(use)
        # ``example["index"] = index`` / ``return self.prompt, index``: handed back as it is
        if isinstance(parent, (cst.Assign, cst.Element, cst.DictElement, cst.Return)):
            continue
        return False
    return True


def _only_gathering_calls(ctx: "FileContext", function: cst.FunctionDef) -> bool:
    for call in ctx.walk(function, cst.Call):
        func = call.func
        if isinstance(func, cst.Name) and func.value in _GATHERING_CALLS:
            continue
        if isinstance(func, cst.Attribute) and func.attr.value in _GATHERING_METHODS:
            continue
        return False
    return True


# Libraries whose batched graphs a DataLoader cannot pin (no ``pin_memory()`` method).
_GRAPH_LIBRARIES = ("dgl.", "torch_geometric.")


# DETR and its descendants (Deformable DETR, DINO-DETR, DAB-DETR) batch images this way.
_NESTED_TENSOR_BUILDERS = frozenset({"nested_tensor_from_tensor_list", "NestedTensor"})


@functools.lru_cache(maxsize=32)
def _attribute_assignment(attribute: str) -> "re.Pattern[bytes]":
    """``<something>.<attribute> = <name>`` in a file's text."""
    return re.compile(rb"\.[ \t]*" + re.escape(attribute.encode()) + rb"[ \t]*=[ \t]*[A-Za-z_]")


def _returned_inner_function(factory: cst.FunctionDef) -> cst.FunctionDef | None:
    """The function defined in ``factory``'s body that ``factory`` returns by name."""
    body = factory.body.body if isinstance(factory.body, cst.IndentedBlock) else ()
    inner = {statement.name.value: statement for statement in body if isinstance(statement, cst.FunctionDef)}
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Return) and isinstance(small.value, cst.Name) and small.value.value in inner:
                    return inner[small.value.value]
    return None


def _names_bound_to(ctx: "FileContext", function: cst.FunctionDef, made: Callable[[cst.BaseExpression], bool]) -> set[str]:
    """The plain names ``function`` assigns a value ``made`` accepts to (``x = dgl.batch(...)``)."""
    return {
        target.target.value
        for assign in ctx.walk(function, cst.Assign)
        if made(assign.value)
        for target in assign.targets
        if isinstance(target.target, cst.Name)
    }


def _string_key(ctx: "FileContext", subscript: cst.Subscript) -> str | None:
    """The string ``key`` of ``x[key]``; None for any other subscript."""
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    value = ctx.values.resolve(subscript.slice[0].slice.value)
    return value.value if value is not None and isinstance(value.value, str) else None


def _keys_holding_tuples(ctx: "FileContext") -> set[str]:
    """The keys the file stores tuples under: ``x[key] = (a, b)``, or ``x[key] = sizes`` where
    ``sizes.append((h, w))`` (or a name bound to a tuple) fills the list."""
    def is_tuple(value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Name):
            value = ctx.single_assignment(value)
        return isinstance(value, cst.Tuple)

    filled = {
        call.func.value.value
        for call in ctx.nodes(cst.Call)
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "append" and isinstance(call.func.value, cst.Name)
        and len(call.args) == 1 and is_tuple(call.args[0].value)
    }
    keys: set[str] = set()
    for assign in ctx.nodes(cst.Assign):
        value = assign.value
        if not (isinstance(value, cst.Tuple) or (isinstance(value, cst.Name) and value.value in filled)):
            continue
        for target in assign.targets:
            if isinstance(target.target, cst.Subscript):
                key = _string_key(ctx, target.target)
                if key is not None:
                    keys.add(key)
    return keys


def _returns_batch_encoding(ctx: "FileContext", function: cst.FunctionDef) -> bool:
    """Every ``return`` of ``function`` hands back a ``BatchEncoding(...)`` it builds, directly
    or through a name bound to one."""

    def built(expr: cst.BaseExpression | None) -> bool:
        return isinstance(expr, cst.Call) and (dotted_name(expr.func) or "").rsplit(".", 1)[-1] == "BatchEncoding"

    encodings = _names_bound_to(ctx, function, built)
    returns = [r.value for r in ctx.walk(function, cst.Return)]
    return bool(returns) and all(
        built(value) or (isinstance(value, cst.Name) and value.value in encodings) for value in returns
    )


def _built_outside_itself(ctx: "FileContext", cls: cst.ClassDef) -> bool:
    """Some project file calls ``cls`` by name outside the class's own body (CrowdCounting-P2PNet
    keeps DETR's ``NestedTensor`` class, but its ``nested_tensor_from_tensor_list`` returns a
    plain tensor: only ``NestedTensor.to`` builds one)."""
    name = cls.name.value
    call = re.compile(rb"(?<![\w.])" + re.escape(name.encode()) + rb"\(")
    view = ctx.project
    if view is None:
        return True
    inside = len(call.findall(ctx.code(cls).encode("utf-8", "replace")))
    total = 0
    for path in view.texts_matching(call):
        if path.endswith(".py"):
            view.consulted.add(path)
            total += len(call.findall(view.project.text(path)))
    return total > inside


def _zip_lambda(expr) -> bool:
    """``lambda batch: zip(*batch)``: the batch is a ``zip`` iterator, which pinning hands on as
    it is (it pins tensors in lists, tuples and dicts, not in iterators)."""
    if not isinstance(expr, cst.Lambda) or len(expr.params.params) != 1 or expr.params.star_arg is not cst.MaybeSentinel.DEFAULT:
        return False
    body = expr.body
    return (
        isinstance(body, cst.Call)
        and isinstance(body.func, cst.Name)
        and body.func.value == "zip"
        and len(body.args) == 1
        and body.args[0].star == "*"
        and isinstance(body.args[0].value, cst.Name)
        and body.args[0].value.value == expr.params.params[0].name.value
    )


def _identity_lambda(expr) -> bool:
    """``lambda x: x``."""
    if not isinstance(expr, cst.Lambda) or len(expr.params.params) != 1 or expr.params.star_arg is not cst.MaybeSentinel.DEFAULT:
        return False
    return isinstance(expr.body, cst.Name) and expr.body.value == expr.params.params[0].name.value


def _returns_unpinnable_batch(ctx: "FileContext", function: cst.FunctionDef) -> bool:
    """Every ``return`` of ``function`` hands back a graph a graph library built (``return
    batched_graph, labels`` with ``batched_graph = dgl.batch(graphs)``) or a plain dataclass,
    or the function builds a ``NestedTensor`` (``batch[0] = nested_tensor_from_tensor_list(batch[0])``)."""
    for called in ctx.walk(function, cst.Call):
        built = (dotted_name(called.func) or "").rsplit(".", 1)[-1]
        if built in _NESTED_TENSOR_BUILDERS or built.startswith("nested_tensor_from_"):  # ReferFormer: ``..._videos_list``
            return True

    def graph_call(expr: cst.BaseExpression) -> bool:
        return isinstance(expr, cst.Call) and (ctx.qualname(expr.func) or "").startswith(_GRAPH_LIBRARIES)

    def plain_call(expr: cst.BaseExpression) -> bool:
        return isinstance(expr, cst.Call) and _builds_plain_object(ctx, expr)

    def tensor_call(expr: cst.BaseExpression) -> bool:
        return isinstance(expr, cst.Call) and (ctx.qualname(expr.func) or "").startswith(("torch.", "numpy."))

    graphs = _names_bound_to(ctx, function, graph_call)
    for assign in ctx.walk(function, cst.Assign):  # ``graph_q, graph_k = dgl.batch(graph_q), dgl.batch(graph_k)``
        if isinstance(assign.value, cst.Tuple) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Tuple):
            for name, value in zip(assign.targets[0].target.elements, assign.value.elements):
                if isinstance(name.value, cst.Name) and graph_call(value.value):
                    graphs.add(name.value.value)
    plain, tensors = _names_bound_to(ctx, function, plain_call), _names_bound_to(ctx, function, tensor_call)
    returns = [r for r in ctx.walk(function, cst.Return) if r.value is not None]
    if not returns:
        return False
    for returned in returns:
        value = returned.value
        if isinstance(value, cst.Call) and _builds_plain_dataclass(ctx, value):
            continue  # trlx's ``ILQLBatch(...)``: pinning returns a dataclass as it is
        parts = _tuple_parts(value)  # grail: ``return (batched_graph_pos, r_labels_pos), g_labels_pos, ...``
        if any(graph_call(part) or (isinstance(part, cst.Name) and part.value in graphs) for part in parts):
            continue
        # fcos-pytorch: ``return imgs, targets, ids`` with ``imgs = image_list(...)`` an
        # ``ImageList``; not where a tensor the function stacks rides beside a plain object.
        if any(plain_call(part) or (isinstance(part, cst.Name) and part.value in plain) for part in parts) and not any(
            tensor_call(part) or (isinstance(part, cst.Name) and part.value in tensors) for part in parts
        ):
            continue
        return False
    return True


def _builds_plain_object(ctx: "FileContext", call: cst.Call, depth: int = 0) -> bool:
    """``call`` builds an instance of a plain class of the project (no base class, no
    ``pin_memory`` method, not a model), or calls a function of the file whose every ``return``
    does (fcos-pytorch's ``image_list(...)`` returning ``ImageList(batch, sizes)``): a
    DataLoader's pinning passes such an object through untouched."""
    cls = local_class(ctx, call.func)
    if cls is not None:
        return (
            not any(ctx.code(base.value) not in ("object",) for base in cls.bases)
            and not cls.decorators
            and not class_methods(ctx, cls, ("pin_memory",))
            and not _model_like(ctx, cls)
        )
    if depth or not isinstance(call.func, cst.Name):
        return False
    bindings = ctx.lookup(call.func.value, call)
    if len(bindings) != 1 or not isinstance(bindings[0].node, cst.FunctionDef):
        return False
    returns = [r.value for r in ctx.walk(bindings[0].node, cst.Return)]
    return bool(returns) and all(isinstance(r, cst.Call) and _builds_plain_object(ctx, r, depth + 1) for r in returns)


def _tuple_parts(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The leaves of a (nested) tuple expression, or the expression itself."""
    if not isinstance(value, cst.Tuple):
        return [value]
    return [leaf for element in value.elements for leaf in _tuple_parts(element.value)]


def _builds_plain_dataclass(ctx: "FileContext", call: cst.Call) -> bool:
    """``call`` builds an instance of a ``@dataclass`` of the project without a ``pin_memory``
    method: a DataLoader's pinning passes such an object through untouched."""
    found = defining_class(ctx, call.func)
    if found is None:
        return False
    cls = found[1]
    if not any((dotted_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "").endswith("dataclass") for d in cls.decorators):
        return False
    return not any(isinstance(s, cst.FunctionDef) and s.name.value == "pin_memory" for s in cls.body.body)


def _model_like(ctx: "FileContext", cls: cst.ClassDef) -> bool:
    """A class that is a model rather than a batch: named or derived like one (``...Model``,
    ``nn.Module``), or with a model's methods (``forward``, ``fit``, ``predict``)."""
    spelled = [cls.name.value, *(ctx.code(base.value) for base in cls.bases)]
    if any("Model" in text or "Module" in text for text in spelled):
        return True
    return any(
        isinstance(statement, cst.FunctionDef) and statement.name.value in ("forward", "fit", "predict", "__call__")
        for statement in cls.body.body
    )


def _returns_its_parameter(function: cst.FunctionDef) -> bool:
    """``def fn(features): return features``: an identity collate."""
    params = function.params.params
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else ()
    if body and function.get_docstring() is not None:
        body = body[1:]  # torchvision's ``_collate_fn``: a docstring, then ``return x``
    if len(params) != 1 or len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
        return False
    (statement,) = body[0].body if len(body[0].body) == 1 else (None,)
    return isinstance(statement, cst.Return) and isinstance(statement.value, cst.Name) and statement.value.value == params[0].name.value


def _gathers_only(ctx: "FileContext", function: cst.FunctionDef) -> bool:
    """Whether ``function`` calls nothing but container builtins and methods and returns only
    container displays or comprehensions (or names bound to one in the function)."""
    if not _only_gathering_calls(ctx, function):
        return False
    containers = {
        target.target.value
        for assign in ctx.walk(function, cst.Assign)
        if isinstance(assign.value, _CONTAINERS)
        for target in assign.targets
        if isinstance(target.target, cst.Name)
    }
    returns = list(ctx.walk(function, cst.Return))
    return bool(returns) and all(
        isinstance(r.value, _CONTAINERS) or (isinstance(r.value, cst.Name) and r.value.value in containers)
        for r in returns
    )
