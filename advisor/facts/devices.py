"""Where work runs: device expressions, the frameworks' device settings, and the file's verdict.

One answer for every spelling of a device a training script uses:

- strings and indices: ``"cuda"``, ``"cuda:1"``, ``0``, ``f"cuda:{rank}"``, ``"cpu"``, ``"mps"``;
- ``torch.device(...)`` of any of them, ``torch.cuda.current_device()``;
- the script's own choice: ``"cuda" if torch.cuda.is_available() else "cpu"``, and
  ``torch.accelerator.current_accelerator()`` (recent PyTorch examples), which pick CUDA
  whenever there is a GPU;
- ranks: ``int(os.environ["LOCAL_RANK"])``, ``args.local_rank``: a CUDA device index;
- frameworks: ``accelerator.device`` (``Accelerator(cpu=True)`` is the CPU), ``fabric.device``,
  a Lightning ``Trainer(accelerator=...)``, ``TrainingArguments(use_cpu=...)``, ``device_map``;
- names bound once to any of these, argparse defaults (``--device`` defaulting to ``"cuda"``),
  the parameters of the file's functions (what every caller passes), and names imported from
  the project's own modules (``from config import DEVICE``);
- a variable named like a device (``device``, ``args.gpu``, ``self.rank``) whose value cannot be
  read: :attr:`Where.NAMED`, a device the file's other evidence decides.

The file's verdict (:attr:`DeviceFacts.gpu`) asks every placement the file makes (``.to``,
``.cuda()``, ``device=``, framework settings, NCCL, DataParallel) and answers yes when one
of them is a GPU, no when all of them name the CPU or another accelerator (MPS, XLA), and
otherwise looks at weaker evidence (CUDA APIs that do work on a GPU, ``"cuda"`` strings), at
the project's scripts that import the file, and finally at whether the file runs at all.
"""
from __future__ import annotations

import enum
import re
from functools import cached_property
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

import libcst as cst

from advisor.apis import DATA_PARALLEL, DISTRIBUTED_DATA_PARALLEL
from advisor.facts import NO, UNKNOWN, Answer, Tri
from advisor.names import dotted_name

if TYPE_CHECKING:
    from advisor.context import FileContext


# A test that holds only with several processes or GPUs.
_SEVERAL_PROCESSES = re.compile(r"WORLD_SIZE|world_size|device_count\(|is_initialized\(|\bdistributed\b|\bddp\b", re.I)


class Where(enum.Enum):
    """Where a device expression puts work."""

    CUDA = "cuda"  # certainly a CUDA GPU
    CUDA_IF_AVAILABLE = "cuda if available"  # the script's own choice: CUDA whenever there is a GPU
    CPU = "cpu"
    OTHER = "other"  # MPS, XLA, XPU, NPU, HPU (the meta device holds no work: unknown)
    NAMED = "named"  # a variable named like a device whose value cannot be read
    UNKNOWN = "unknown"

    @property
    def gpu(self) -> bool:
        """Runs on a CUDA GPU (when the machine has one)."""
        return self in (Where.CUDA, Where.CUDA_IF_AVAILABLE)

    @property
    def decided(self) -> bool:
        return self not in (Where.NAMED, Where.UNKNOWN)


_GPU_STRINGS = re.compile(r"^(cuda|gpu)(:\d+)?$")
# ``os.environ["CUDA_LAUNCH_BLOCKING"] = "1"``, ``os.environ.setdefault("CUDA_LAUNCH_BLOCKING", "1")``.
_LAUNCH_BLOCKING = re.compile(r"""^[^#\n]*CUDA_LAUNCH_BLOCKING['"]\s*\]?\s*[=,]\s*['"]?1\b""", re.M)
_OTHER_STRINGS = re.compile(r"^(mps|xla|xpu|npu|hpu|tpu|ipu|mtia|privateuseone)(:\d+)?$")
# How scripts name a device variable (``device``, ``args.gpu``, ``local_rank``, ``self.dev``); the
# ones that name a GPU (or a GPU index: a rank) are CUDA devices whatever their value.
DEVICE_NAME = re.compile(r"device|gpu|cuda|rank|^dev$", re.I)
GPU_NAME = re.compile(r"gpu|cuda|rank", re.I)
# Names of tests that only ask whether a GPU is there (``use_cuda``, ``args.cuda``, ``on_gpu``).
_GPU_TEST_NAME = re.compile(r"^(use_)?(cuda|gpu)$|^(is|on)_(cuda|gpu)$|^has_(cuda|gpu)$|^cuda_available$", re.I)
DTYPE_NAMES = frozenset({
    "float", "float16", "half", "bfloat16", "float32", "float64", "double", "int", "int8", "int16", "int32",
    "int64", "long", "short", "uint8", "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
})
_PLACES_ANYTHING = re.compile(
    rb"\.cuda\(|\bdevice\s*=|[\"']cuda"
    rb"|\.to\((?!\s*(?:dtype\s*=|torch\.(?:u?int\d*|float\d*|bool|long|half|double|bfloat16|complex\d*)\s*\)))"
)
# Calls that release cached GPU memory: no-ops where nothing ran on CUDA, so no sign that anything does.
_CACHE_HOUSEKEEPING = frozenset({"torch.cuda.empty_cache", "torch.cuda.ipc_collect"})
_AVAILABILITY_TESTS = ("torch.cuda.is_available", "torch.accelerator.is_available", "torch.backends.cuda.is_built")
# An argparse ``Namespace`` written out by hand (notebooks that mimic a script's arguments).
_NAMESPACES = frozenset({"argparse.Namespace", "types.SimpleNamespace"})
_ACCELERATOR_DEVICES = ("torch.accelerator.current_accelerator", "torch.accelerator.current_device_index")
_XLA_DEVICES = ("torch_xla.core.xla_model.xla_device", "torch_xla.device", "torch_xla.core.xla_model.device")
_MAX_DEPTH = 8
# Runtimes of other accelerators: a file that imports one is written for that device.
_OTHER_RUNTIMES = frozenset({
    "torch_xla", "torch_neuronx", "neuronx_distributed", "torch_neuron", "habana_frameworks", "torch_npu",
    "intel_extension_for_pytorch", "optimum_neuron", "optimum_habana",
})
_OTHER_RUNTIME_TEXT = re.compile(
    r"torch_xla|neuronx|torch_neuron|habana_frameworks|torch_npu|intel_extension_for_pytorch|optimum\.(neuron|habana)"
    r"|TPUAccelerator|XLAAccelerator|HPUAccelerator|tpu_cores"
)
_NON_CUDA_DEVICE = re.compile(r"^(xpu|npu|hpu|xla)")
_LIGHTNING_ACCELERATOR_MODULES = frozenset({
    "pytorch_lightning.accelerators", "lightning.pytorch.accelerators", "lightning.fabric.accelerators",
})
_OTHER_LIGHTNING_ACCELERATORS = frozenset({"TPUAccelerator", "XLAAccelerator", "HPUAccelerator"})


def join(kinds: Iterable[Where]) -> Where:
    """One answer for an expression that can be any of ``kinds`` (the branches of a choice,
    the values every caller passes)."""
    kinds = set(kinds)
    if not kinds:
        return Where.UNKNOWN
    if len(kinds) == 1:
        return kinds.pop()
    if Where.CUDA in kinds or Where.CUDA_IF_AVAILABLE in kinds:
        return Where.CUDA_IF_AVAILABLE  # a GPU on some path: the script's choice, made at run time
    if kinds <= {Where.CPU, Where.OTHER}:
        return Where.OTHER if Where.OTHER in kinds else Where.CPU
    if Where.NAMED in kinds:
        return Where.NAMED
    return Where.UNKNOWN


def device_of_string(text: str) -> Where:
    text = text.strip().lower()
    if _GPU_STRINGS.match(text):
        return Where.CUDA
    if text.split(":")[0] == "cpu":
        return Where.CPU
    if _OTHER_STRINGS.match(text):
        return Where.OTHER
    if text == "auto":
        return Where.CUDA_IF_AVAILABLE
    return Where.UNKNOWN


def _named(name: str) -> Where:
    """A device variable whose value cannot be read, by its name: ``gpu_id``, ``args.cuda``,
    ``local_rank`` name a GPU (an index); ``device`` could be anything."""
    if GPU_NAME.search(name):
        return Where.CUDA
    return Where.NAMED if DEVICE_NAME.search(name) else Where.UNKNOWN


def _is_flag(expr: cst.BaseExpression) -> bool:
    """A switch (``args.cuda``, ``not no_cuda``), not a condition computed from the run (``step % 10 == 0``)."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        expr = expr.expression
    return isinstance(expr, (cst.Name, cst.Attribute))


_SETS_VISIBLE_DEVICES = re.compile(
    rb"environ\[[ \t]*[\"']CUDA_VISIBLE_DEVICES[\"'][ \t]*\][ \t]*=(?!=)|environ\.setdefault\([ \t]*[\"']CUDA_VISIBLE_DEVICES"
)


class DeviceFacts:
    """Where the work of one file runs."""

    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx
        self._kinds: dict[cst.CSTNode, Where] = {}
        self._asking_branches = False

    # -- one expression ---------------------------------------------------------------------
    def where(self, expr: cst.BaseExpression | None) -> Where:
        """Where a device expression (``.to(x)``'s ``x``, a ``device=`` value) puts work."""
        if expr is None:
            return Where.UNKNOWN
        return self._where(expr, 0)

    def _where(self, expr: cst.BaseExpression, depth: int) -> Where:
        if depth > _MAX_DEPTH:
            return Where.UNKNOWN
        known = self._kinds.get(expr)
        if known is None:
            self._kinds[expr] = Where.UNKNOWN  # a cycle through names reads as unknown
            known = self._kinds[expr] = self._classify(expr, depth)
        return known

    def _classify(self, expr: cst.BaseExpression, depth: int) -> Where:
        ctx = self.ctx
        if isinstance(expr, cst.IfExp):
            if self.gpu_test(expr.test) is Tri.NO and self._where(expr.orelse, depth + 1) is Where.CPU:
                # ``"cuda" if args.cuda else "cpu"`` where the switch is off (a hand-written
                # ``Namespace(cuda=False)``): the branch taken is the CPU's.
                return Where.CPU
            return join((self._where(expr.body, depth + 1), self._where(expr.orelse, depth + 1)))
        if isinstance(expr, cst.FormattedString):
            first = expr.parts[0] if expr.parts else None
            if isinstance(first, cst.FormattedStringText):
                return device_of_string(first.value.split("{")[0].rstrip(":") or first.value)
            return Where.UNKNOWN
        if isinstance(expr, cst.Call):
            return self._call_device(expr, depth)
        value = ctx.values.resolve(expr)
        if value is not None:
            if isinstance(value.value, str):
                return device_of_string(value.value)
            if type(value.value) is int:
                return Where.CUDA  # a device index
            return Where.UNKNOWN
        if isinstance(expr, cst.Name):
            return self._name_device(expr, depth)
        if isinstance(expr, cst.Attribute):
            return self._attribute_device(expr, depth)
        return Where.UNKNOWN

    def _call_device(self, call: cst.Call, depth: int) -> Where:
        ctx = self.ctx
        qualname = ctx.qualname(call.func) or ""
        if qualname == "torch.device":
            if not call.args:
                return Where.UNKNOWN
            first = call.args[0].value
            inner = self._where(first, depth + 1)
            return Where.NAMED if inner is Where.UNKNOWN else inner
        if qualname in ("torch.cuda.current_device", "torch.cuda.device"):
            return Where.CUDA
        if qualname in _ACCELERATOR_DEVICES:
            return Where.CUDA_IF_AVAILABLE
        if qualname in _XLA_DEVICES or qualname.startswith("torch_xla."):
            return Where.OTHER
        if qualname in ("torch.mps.current_device",):
            return Where.OTHER
        if isinstance(call.func, cst.Name) and call.func.value == "int" and not ctx.lookup("int", call.func):
            return Where.CUDA  # ``int(os.environ["LOCAL_RANK"])``: a device index
        if qualname in ("os.environ.get", "os.getenv") and call.args:
            key = ctx.values.value_of(call.args[0].value)
            if isinstance(key, str) and "RANK" in key:
                return Where.NAMED
        imported = self._imported_value(call.func)
        if imported is not None:
            return imported
        returned = self._returned_device(call, depth)
        if returned is not None:
            return returned
        name = (dotted_name(call.func) or "").split(".")[-1]
        return _named(name) if name else Where.UNKNOWN

    def _returned_device(self, call: cst.Call, depth: int) -> Where | None:
        """What a function of the file or its project returns as a device (``dist_util.dev()``,
        ``get_device()``): the devices of its ``return`` statements."""
        ctx = self.ctx
        function = ctx.loops.callee(call)
        owner = ctx
        if function is None and ctx.project is not None and isinstance(call.func, (cst.Name, cst.Attribute)):
            found = ctx.project.binding(call.func)
            if found is not None and isinstance(found[1].node, cst.FunctionDef):
                owner, function = found[0], found[1].node
        if function is None:
            return None
        values = [r.value for r in owner.walk(function, cst.Return) if r.value is not None and owner.scope_of.get(r) is function]
        if not values:
            return None
        devices = owner.facts.devices
        found_kind = join(devices._where(value, depth + 1) for value in values)
        return found_kind if found_kind is not Where.UNKNOWN else None

    def _name_device(self, name: cst.Name, depth: int) -> Where:
        ctx = self.ctx
        bindings = self._live(ctx.lookup(name.value, name), lambda b: b.node)
        values = [b.value for b in bindings if b.value is not None]
        if bindings and len(values) == len(bindings):
            found = join(self._where(v, depth + 1) for v in values)
            if found is not Where.UNKNOWN:
                return found
        if len(bindings) == 1 and isinstance(bindings[0].node, cst.Param):
            passed = self._passed_for(bindings[0].node, depth)
            if passed is not None and passed.decided:
                return passed
        if len(bindings) == 1 and isinstance(bindings[0].node, (cst.ImportFrom, cst.Import)):
            imported = self._imported_value(name)
            if imported is not None:
                return imported
        return _named(name.value)

    def _attribute_device(self, expr: cst.Attribute, depth: int) -> Where:
        owner = expr.value
        if expr.attr.value == "device":
            framework = self._framework_object_device(owner)
            if framework is not None:
                return framework
        imported = self._imported_value(expr)
        if imported is not None:
            return imported
        spelling = dotted_name(expr) or ""
        assignments = self._live(self.ctx.attribute_assignments.get(spelling, []), lambda a: a)
        values = [a.value for a in assignments if isinstance(a, cst.Assign) and len(a.targets) == 1]
        if values and len(values) == len(assignments):
            found = join(self._where(v, depth + 1) for v in values)
            if found.decided:
                return found
        return _named(expr.attr.value)

    def _framework_object_device(self, owner: cst.BaseExpression) -> Where | None:
        """``accelerator.device`` / ``fabric.device``: where the framework object was told to run."""
        ctx = self.ctx
        from advisor.apis import ACCELERATOR, FABRIC

        bound = ctx.bound_call(owner, ACCELERATOR, FABRIC)
        if bound is None:
            name = (dotted_name(owner) or "").split(".")[-1]
            calls = ctx.calls(ACCELERATOR) if name == "accelerator" else ctx.calls(FABRIC) if name == "fabric" else []
            if not calls:
                return Where.CUDA_IF_AVAILABLE if name in ("accelerator", "fabric") else None
            return join(self.framework_setting(c) for c in calls)
        return self.framework_setting(bound)

    def _passed_for(self, param: cst.Param, depth: int) -> Where | None:
        """What every call of the file passes for ``param`` of one of its functions."""
        ctx = self.ctx
        function = ctx.scope_of.get(param)
        if not isinstance(function, cst.FunctionDef):
            return None
        callers = ctx.loops.callers(function)
        if not callers:
            return None
        positional = list(function.params.params)
        index = next((i for i, p in enumerate(positional) if p is param), None)
        if index is not None and isinstance(ctx.parent.get(ctx.parent.get(function)), cst.ClassDef):
            index -= 1
        from advisor.context import MISSING

        kinds = []
        for caller in callers:
            passed = ctx.argument(caller, param.name.value, index if index is not None and index >= 0 else None)
            if passed is None:
                return None
            if passed is MISSING:
                if param.default is None:
                    return None
                passed = param.default
            kinds.append(self._where(passed, depth + 1))  # type: ignore[arg-type]
        return join(kinds)

    def _imported_value(self, expr: cst.BaseExpression) -> Where | None:
        """A name the file imports from its project (``from config import DEVICE``)."""
        project = self.ctx.project
        if project is None:
            return None
        found = project.definition(expr)
        if found is None:
            return None
        other, value = found
        if value is None:
            return None
        kind = other.facts.devices.where(value)
        return kind if kind is not Where.UNKNOWN else None

    # -- moves ------------------------------------------------------------------------------
    def is_dtype(self, expr: cst.BaseExpression) -> bool:
        spelling = self.ctx.qualname(expr) or dotted_name(expr) or ""
        last = spelling.split(".")[-1]
        return (spelling.startswith("torch.") and last in DTYPE_NAMES) or last.endswith("dtype")

    def move_target(self, call: cst.Call) -> cst.BaseExpression | None:
        """The device of ``x.to(device, ...)`` (positional or ``device=``); None for ``.to(dtype)``,
        ``.to(*args)``, ``.to(other_tensor)`` spelled as a dtype."""
        keyword = self.ctx.keyword_arg(call, "device")
        if keyword is not None:
            return keyword.value
        if any(arg.star for arg in call.args):
            return None
        positional = [arg.value for arg in call.args if arg.keyword is None]
        if not positional or self.is_dtype(positional[0]):
            return None
        return positional[0]

    def move(self, call: cst.Call) -> Where | None:
        """Where ``.to(...)`` / ``.cuda()`` / ``.cpu()`` moves its receiver; None when the call
        moves nothing (``.to(torch.bfloat16)``, any other method)."""
        func = call.func
        if not isinstance(func, cst.Attribute):
            return None
        method = func.attr.value
        if method == "cuda":
            return Where.CUDA
        if method == "cpu":
            return Where.CPU
        if method == "to":
            if any(arg.star for arg in call.args):
                return Where.UNKNOWN
            target = self.move_target(call)
            return None if target is None else self.where(target)
        return None

    def cuda_tensor_type(self, expr: cst.BaseExpression) -> bool:
        """``torch.cuda.FloatTensor`` (the legacy typed tensors of CUDA), or a name bound to one
        (``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``)."""
        candidates = [expr]
        if isinstance(expr, cst.Name):
            value = self.ctx.single_assignment(expr)
            if value is not None:
                candidates = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
        return any(
            (self.ctx.qualname(c) or "").startswith("torch.cuda.") and (self.ctx.qualname(c) or "").endswith("Tensor")
            for c in candidates
        )

    def moves_off_cpu(self, call: cst.Call) -> bool:
        """A call that may put tensors on an accelerator: ``.cuda()``, ``.to(device)`` (not
        ``.to(torch.long)`` nor ``.to("cpu")``), one given a ``device=`` other than the CPU, or
        ``torch.load`` onto one (``map_location='cuda:0'``: Text-To-Video-Finetuning's cached latents)."""
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("cuda", "to"):
            kind = self.move(call)
            return kind is not None and kind is not Where.CPU
        if self.ctx.qualname(func) == "torch.load":
            location = self.ctx.keyword_arg(call, "map_location")
            return location is not None and self.where(location.value) in (Where.CUDA, Where.CUDA_IF_AVAILABLE, Where.NAMED)
        device = self.ctx.keyword_arg(call, "device")
        return device is not None and self.where(device.value) is not Where.CPU

    # -- tests ---------------------------------------------------------------------------------
    def gpu_test(self, test: cst.BaseExpression, depth: int = 0, switches: bool = False) -> Tri:
        """Whether a condition holds on a run with a GPU: ``torch.cuda.is_available()``,
        ``use_cuda`` (bound to it, or named so), ``device.type == "cuda"`` and ``args.cuda`` are
        yes; ``device == "cpu"`` and ``not torch.cuda.is_available()`` are no; anything else unknown.
        With ``switches``, the unknown part of an ``and`` next to a GPU test is taken as a switch
        that is on unless the user turns it off (``not args.no_cuda and torch.cuda.is_available()``)."""
        ctx = self.ctx
        if depth > _MAX_DEPTH:
            return Tri.UNKNOWN
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self.gpu_test(test.expression, depth + 1, switches)
            return {Tri.YES: Tri.NO, Tri.NO: Tri.YES}.get(inner, Tri.UNKNOWN)
        if isinstance(test, cst.BooleanOperation):
            left = self.gpu_test(test.left, depth + 1, switches)
            right = self.gpu_test(test.right, depth + 1, switches)
            if isinstance(test.operator, cst.And):
                if Tri.NO in (left, right):
                    return Tri.NO
                if left is Tri.YES and right is Tri.YES:
                    return Tri.YES
                if switches and (
                    (left is Tri.YES and _is_flag(test.right)) or (right is Tri.YES and _is_flag(test.left))
                ):
                    return Tri.YES
                return Tri.UNKNOWN
            return Tri.YES if Tri.YES in (left, right) else Tri.NO if left is Tri.NO and right is Tri.NO else Tri.UNKNOWN
        if isinstance(test, cst.Call):
            qualname = ctx.qualname(test.func) or ""
            return Tri.YES if qualname in _AVAILABILITY_TESTS else Tri.UNKNOWN
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            return self._device_comparison(test)
        if isinstance(test, (cst.Name, cst.Attribute)):
            spelling = dotted_name(test) or ""
            if isinstance(test, cst.Name):
                value = ctx.single_assignment(test)
                if value is not None:
                    return self.gpu_test(value, depth + 1, switches)
                if self._every_caller_passes_off(test):
                    return Tri.NO
            else:
                assignments = ctx.attribute_assignments.get(spelling, [])
                if self._namespace_switch_off(test, assignments):
                    return Tri.NO
                if len(assignments) == 1 and isinstance(assignments[0], cst.Assign):
                    return self.gpu_test(assignments[0].value, depth + 1, switches)
            if _GPU_TEST_NAME.match(spelling.split(".")[-1]):
                return Tri.YES
        return Tri.UNKNOWN

    def _every_caller_passes_off(self, name: cst.Name) -> bool:
        """``name`` is a parameter that every call seen (in its file and in the project files
        importing it) passes as ``False`` / ``0`` / ``None``, or leaves at such a default:
        DeepFM's ``__init__(..., use_cuda=True)``, built once, in ``main.py``, as
        ``DeepFM(feature_sizes, use_cuda=False)``."""
        ctx = self.ctx
        bindings = ctx.lookup(name.value, name)
        if len(bindings) != 1 or not isinstance(bindings[0].node, cst.Param):
            return False
        param = bindings[0].node
        return ctx.memo(("every caller passes off", param), lambda: self._passed_off(param))

    def _passed_off(self, param: cst.Param) -> bool:
        from advisor.context import MISSING
        from advisor.facts.branches import constructions_of

        ctx = self.ctx
        function = ctx.enclosing(param, cst.FunctionDef)
        if not isinstance(function, cst.FunctionDef) or param.star:
            return False
        position = ctx.passed_positions(function).get(param.name.value)
        calls = constructions_of(ctx, function)
        if not calls:
            return False
        for other, call in calls:
            if any(arg.star for arg in call.args):
                return False
            passed = other.argument(call, param.name.value, position)
            if passed is MISSING:
                passed, other = param.default, ctx
            value = other.values.resolve(passed) if isinstance(passed, cst.BaseExpression) else None
            if value is None or isinstance(value.value, str) or value.value not in (False, 0, None):
                return False
        return True

    def _namespace_switch_off(self, test: cst.Attribute, assignments: list) -> bool:
        """``args.cuda`` where ``args = Namespace(..., cuda=False, ...)`` and every later
        assignment sets it to ``False`` too (PyTorchNLPBook's notebooks: ``if not
        torch.cuda.is_available(): args.cuda = False``): the switch is off, the run is on the CPU."""
        ctx = self.ctx
        if not isinstance(test.value, cst.Name):
            return False
        built = ctx.single_assignment(test.value)
        if not (isinstance(built, cst.Call) and (ctx.qualname(built.func) or "") in _NAMESPACES):
            return False
        keyword = ctx.keyword_arg(built, test.attr.value)
        if keyword is None or not all(isinstance(a, cst.Assign) for a in assignments):
            return False  # not set in the constructor, or changed by ``+=`` / an annotation
        values = [keyword.value, *(a.value for a in assignments)]
        return all(isinstance(v, cst.Name) and v.value == "False" for v in values)

    def _device_comparison(self, test: cst.Comparison) -> Tri:
        operator = test.comparisons[0].operator
        if isinstance(operator, (cst.In, cst.NotIn)):
            return self._device_membership(test)
        if not isinstance(operator, (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot)):
            return Tri.UNKNOWN
        sides = (test.left, test.comparisons[0].comparator)
        strings = [s for s in sides if isinstance(s, (cst.SimpleString, cst.ConcatenatedString))]
        if len(strings) != 1:
            return Tri.UNKNOWN
        text = self.ctx.values.value_of(strings[0])
        if not isinstance(text, str):
            return Tri.UNKNOWN
        kind = device_of_string(text)
        if not kind.decided:
            return Tri.UNKNOWN
        equal = isinstance(operator, (cst.Equal, cst.Is))
        return Tri.YES if kind.gpu == equal else Tri.NO

    def _device_membership(self, test: cst.Comparison) -> Tri:
        """``device not in ["cpu"]`` (Lightning's DQN tutorial, before ``state.cuda(device)``):
        membership in a literal collection of device strings that are all GPUs or all not."""
        collection = test.comparisons[0].comparator
        if not isinstance(collection, (cst.List, cst.Tuple, cst.Set)) or not collection.elements:
            return Tri.UNKNOWN
        kinds = set()
        for element in collection.elements:
            text = self.ctx.values.value_of(element.value) if isinstance(element.value, cst.SimpleString) else None
            if not isinstance(text, str) or not (kind := device_of_string(text)).decided:
                return Tri.UNKNOWN
            kinds.add(kind.gpu)
        if len(kinds) != 1:
            return Tri.UNKNOWN
        member = isinstance(test.comparisons[0].operator, cst.In)
        return Tri.YES if kinds.pop() == member else Tri.NO

    # -- framework settings --------------------------------------------------------------------
    def framework_setting(self, call: cst.Call) -> Where:
        """Where a framework object is told to run: an ``Accelerator`` (``cpu=``), a Lightning
        ``Trainer`` / ``Fabric`` (``accelerator=``, Lightning 1's ``gpus=``), ``TrainingArguments``
        and TRL configs (``use_cpu=`` / ``no_cuda=``). Left to the framework, each picks CUDA
        whenever there is a GPU."""
        from advisor.apis import ACCELERATOR, FABRIC, LIGHTNING_TRAINER_BUILDERS, TRAINING_ARGUMENTS

        qualname = self.ctx.qualname(call.func) or ""
        if qualname == ACCELERATOR:
            return self._flag_setting(call, ("cpu",))
        if qualname in TRAINING_ARGUMENTS:
            return self._flag_setting(call, ("use_cpu", "no_cuda"))
        if qualname in (*LIGHTNING_TRAINER_BUILDERS, FABRIC):
            return self._lightning_setting(call)
        return Where.UNKNOWN

    def parsed_arguments_setting(self, name: cst.Name) -> Where:
        """Where the script's own ``TrainingArguments`` subclass, parsed from the command line,
        runs by default: the CPU when its ``use_cpu`` / ``no_cuda`` field defaults to true."""
        for flag in ("use_cpu", "no_cuda"):
            value = self.ctx.values.attribute(name, flag)
            if value is not None and value.value:
                return Where.CPU
        return Where.CUDA_IF_AVAILABLE

    def _flag_setting(self, call: cst.Call, flags: tuple[str, ...]) -> Where:
        from advisor.context import MISSING

        found = Where.CUDA_IF_AVAILABLE
        for flag in flags:
            argument = self.ctx.argument(call, flag)
            if argument is MISSING or argument is None:
                continue  # not set, or hidden in ``**kwargs``: not assumed
            value = self.ctx.values.resolve(argument)
            if value is None:
                return Where.UNKNOWN
            if value.value:
                return Where.CPU if value.origin != "argparse default" else Where.UNKNOWN
        return found

    def _lightning_setting(self, call: cst.Call) -> Where:
        from advisor.context import MISSING

        ctx = self.ctx
        gpus = ctx.argument(call, "gpus")
        if gpus is None:
            return Where.UNKNOWN
        if gpus is not MISSING:  # Lightning 1.x: ``gpus=N`` chooses; 0 or None is the CPU
            value = ctx.values.resolve(gpus)
            if value is None:
                return Where.UNKNOWN
            gpus_value = value.value
            if isinstance(gpus_value, bool) or gpus_value is None:
                return Where.CPU
            if isinstance(gpus_value, int):
                return Where.CUDA if gpus_value != 0 else Where.CPU
            if isinstance(gpus_value, (list, tuple)):
                return Where.CUDA if gpus_value else Where.CPU
            if isinstance(gpus_value, str):
                return Where.CPU if gpus_value.strip() in ("", "0") else Where.CUDA
            return Where.UNKNOWN
        accelerator = ctx.argument(call, "accelerator")
        if accelerator is None:
            return Where.UNKNOWN
        if accelerator is MISSING:
            # Fabric has always defaulted to "auto"; the Trainer did from Lightning 2.
            from advisor.apis import FABRIC

            fabric = self.ctx.qualname(call.func) == FABRIC
            return Where.CUDA_IF_AVAILABLE if fabric or self._lightning_2(call) else Where.UNKNOWN
        value = ctx.values.resolve(accelerator)
        if value is None or not isinstance(value.value, str):
            return Where.UNKNOWN
        kind = device_of_string(value.value)
        return kind if value.origin != "argparse default" or kind.gpu else Where.UNKNOWN

    def _lightning_2(self, call: cst.Call) -> bool:
        """Lightning 2 picks the GPU by itself (``accelerator="auto"``); Lightning 1 defaulted to
        the CPU. The ``lightning`` package is 2.x; ``pytorch_lightning`` is either, and a 2.x-only
        spelling in the call (``precision="16-mixed"``) tells."""
        from advisor.context import MISSING

        packages = {target.split(".")[0] for target in self.ctx.imports.aliases.values()}
        if "lightning" in packages and "pytorch_lightning" not in packages:
            return True
        precision = self.ctx.argument(call, "precision")
        if isinstance(precision, cst.BaseExpression) and precision is not MISSING:
            value = self.ctx.values.value_of(precision)
            return isinstance(value, str) and "-" in value
        return False

    # -- the file's verdict ----------------------------------------------------------------------
    @cached_property
    def placements(self) -> list[tuple[Where, cst.CSTNode]]:
        """Every place the file sends work to a device, with where it goes, in source order."""
        from advisor.apis import ACCELERATOR, FABRIC, LIGHTNING_TRAINER_BUILDERS, TRAINING_ARGUMENTS

        ctx = self.ctx
        found: list[tuple[Where, cst.CSTNode]] = []
        for call in ctx.method_calls("to", "cuda"):
            kind = self.move(call)
            if kind is not None:
                found.append((kind, call))
        for arg in ctx.nodes(cst.Arg):
            if arg.keyword is None or arg.keyword.value not in ("device", "device_map"):
                continue
            call = ctx.parent.get(arg)
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "to":
                continue  # counted as a move
            if arg.keyword.value == "device_map":
                kind = self._device_map(arg.value)
            else:
                kind = self.where(arg.value)
            found.append((kind, arg))
        for call in ctx.calls("torch.device", "torch.cuda.set_device", *_ACCELERATOR_DEVICES, *_XLA_DEVICES):
            qualname = ctx.qualname(call.func)
            kind = Where.CUDA if qualname == "torch.cuda.set_device" else self.where(call)
            found.append((kind, call))
        for call in ctx.calls(ACCELERATOR, FABRIC, *LIGHTNING_TRAINER_BUILDERS, *TRAINING_ARGUMENTS):
            found.append((self.framework_setting(call), call))
        for call in ctx.calls("deepspeed.initialize", *DATA_PARALLEL):
            found.append((Where.CUDA, call))
        for call in ctx.calls(*DISTRIBUTED_DATA_PARALLEL):
            if ctx.keyword_arg(call, "device_ids") is not None:
                found.append((Where.CUDA, call))
        for call in ctx.calls("torch.distributed.init_process_group"):
            from advisor.context import MISSING

            backend = ctx.argument(call, "backend", 0)
            if isinstance(backend, cst.BaseExpression) and backend is not MISSING:
                value = ctx.values.value_of(backend)
                if value == "nccl":
                    found.append((Where.CUDA, call))
        if self._hf_trainer_without_arguments():
            found.append((Where.CUDA_IF_AVAILABLE, self._hf_trainer_without_arguments()))
        found = [(kind, node) for kind, node in found if not (kind.gpu and self._branch_off_with_a_gpu(node))]
        found.sort(key=lambda item: ctx.order.get(item[1], 0))
        return found

    def _live(self, items: list, node_of) -> list:
        """``items`` (bindings, assignments) without those in a branch that does not run with a
        GPU (:meth:`_branch_off_with_a_gpu`), unless that leaves none."""
        if len(items) < 2 or self._asking_branches:
            return items
        self._asking_branches = True  # a branch's test may name the device being resolved
        try:
            live = [item for item in items if not self._branch_off_with_a_gpu(node_of(item))]
        finally:
            self._asking_branches = False
        return live or items

    def _branch_off_with_a_gpu(self, node: cst.CSTNode) -> bool:
        """``node`` is in the body of an ``if`` whose test does not hold on a run with a GPU
        (:meth:`gpu_test`): DeepFM's ``if use_cuda and torch.cuda.is_available(): self.device =
        torch.device('cuda')`` where every caller passes ``use_cuda=False``."""
        ctx = self.ctx
        for ancestor in ctx.ancestors(node):
            if isinstance(ancestor, cst.If) and ctx.is_descendant(node, ancestor.body):
                if self.gpu_test(ancestor.test) is Tri.NO:
                    return True
        return False

    def _hf_trainer_without_arguments(self) -> cst.Call | None:
        from advisor.apis import TRAINING_ARGUMENTS

        if self.ctx.calls(*TRAINING_ARGUMENTS):
            return None
        trainers = self.ctx.facts.frameworks.hf_trainer_calls
        return trainers[0] if trainers else None

    def _device_map(self, expr: cst.BaseExpression) -> Where:
        ctx = self.ctx
        entries = ctx.values.dict_entries(expr)
        if entries is not None:
            return join(self.where(v) for v in entries.values()) if entries else Where.UNKNOWN
        value = ctx.values.resolve(expr)
        if value is None:
            return Where.CUDA_IF_AVAILABLE  # ``device_map=args.device_map``: accelerate places it
        if isinstance(value.value, str):
            return device_of_string(value.value)
        if type(value.value) is int:
            return Where.CUDA
        return Where.UNKNOWN

    @cached_property
    def cuda_apis(self) -> list[cst.CSTNode]:
        """References to ``torch.cuda`` APIs (seeding included: a script seeds CUDA where it
        expects a GPU; where every device it names is the CPU or MPS, the placements decide)."""
        ctx = self.ctx
        found: list[cst.CSTNode] = []
        for node in ctx.nodes(cst.Attribute):
            qualname = ctx.qualname(node)
            if not qualname or not qualname.startswith("torch.cuda."):
                continue
            parent = ctx.parent.get(node)
            if isinstance(parent, cst.Attribute) and parent.value is node:
                continue  # the inner part of a longer reference: the outer one decides
            if qualname in _AVAILABILITY_TESTS and self._answer_unread(node):
                continue  # Person_reID's prepare_static.py: ``use_gpu = torch.cuda.is_available()``, never read
            if (qualname in _CACHE_HOUSEKEEPING or (qualname in _AVAILABILITY_TESTS and self._guards_only_housekeeping(node))) and self.project_places_nothing:
                continue  # GMAN's ``if torch.cuda.is_available(): torch.cuda.empty_cache()``: a no-op without CUDA work
            found.append(node)
        return found

    @cached_property
    def project_places_nothing(self) -> bool:
        """No file of the project moves anything to a device or names CUDA as one (no
        ``.cuda(``, ``.to(``, ``device=``, ``"cuda"``): GMAN-PyTorch trains on the CPU, and its
        step's ``torch.cuda.empty_cache()`` is no sign of a GPU there."""
        project = self.ctx.project
        return project is not None and not project.texts_matching(_PLACES_ANYTHING)

    def _guards_only_housekeeping(self, func: cst.CSTNode) -> bool:
        """``if torch.cuda.is_available(): torch.cuda.empty_cache()``: a test whose ``if`` does
        nothing but release the caching allocator's memory."""
        ctx = self.ctx
        call = ctx.parent.get(func)
        statement = ctx.parent.get(call) if isinstance(call, cst.Call) else None
        if not isinstance(statement, cst.If) or statement.test is not call or statement.orelse is not None:
            return False
        calls = list(ctx.walk(statement.body, cst.Call))
        return bool(calls) and all(ctx.qualname(c.func) in _CACHE_HOUSEKEEPING for c in calls)

    def _answer_unread(self, func: cst.CSTNode) -> bool:
        """``name = torch.cuda.is_available()`` where the file never reads ``name``: a question
        whose answer nothing uses says nothing about where the work runs."""
        ctx = self.ctx
        call = ctx.parent.get(func)
        if not isinstance(call, cst.Call) or call.func is not func:
            return False
        assign = ctx.parent.get(call)
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            return False
        name = assign.targets[0].target.value
        return not any(n.value == name and ctx.is_read(n) for n in ctx.nodes(cst.Name))

    @cached_property
    def gpu(self) -> Answer:
        """Does this file's work run on a CUDA GPU?"""
        found = self._gpu()
        if found.yes and self.other_accelerator_only and not self.always_cuda:
            return Answer(Tri.NO, found.evidence, "written for another accelerator (XLA, Neuron, HPU, NPU, XPU)")
        return found

    def _gpu(self) -> Answer:
        placements = self.placements
        for kind, node in placements:
            if kind.gpu:
                return Answer(Tri.YES, node, "a placement on a CUDA device")
        named = [node for kind, node in placements if kind is Where.NAMED]
        elsewhere = [node for kind, node in placements if kind in (Where.CPU, Where.OTHER)]
        weak = self.cuda_apis[:1] or self.ctx._cuda_strings[:1] or self.ctx.method_calls("cuda")[:1]
        if weak and (named or not elsewhere):
            return Answer(Tri.YES, weak[0], "a CUDA API or device string")
        if elsewhere:
            return Answer(Tri.NO, elsewhere[0], "every device the file names is the CPU or another accelerator")
        project = self.ctx.project
        if project is not None:
            imported_by = project.importer_gpu()
            if imported_by is not None:
                return imported_by
        if named:
            return Answer(Tri.UNKNOWN, named[0], "a device chosen at run time")
        if self.runs:
            return Answer(Tri.NO, None, "a script that runs with no sign of a GPU")
        return Answer(Tri.UNKNOWN, None, "nothing in the file says where it runs")

    @cached_property
    def library_module(self) -> bool:
        """A module of the project that other files import and that has no ``__main__`` guard:
        process-wide settings (TF32, the cuDNN autotuner) belong in the scripts that run it."""
        ctx = self.ctx
        return ctx.project is not None and not ctx.has_main_guard and ctx.project.imported()

    @cached_property
    def runs(self) -> bool:
        """Whether the file is a script that does something when run (a ``__main__`` guard, a
        training loop, top-level loops or calls), not only definitions."""
        ctx = self.ctx
        if ctx.has_main_guard or ctx.loops.training_loops:
            return True
        for statement in ctx.module.body:
            if isinstance(statement, (cst.For, cst.While)):
                return True
            if isinstance(statement, cst.SimpleStatementLine) and any(
                isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) for small in statement.body
            ):
                return True
        return False

    @cached_property
    def other_runtime(self) -> bool:
        """The file imports another accelerator's own runtime (XLA / TPU, Neuron, Gaudi, Ascend,
        IPEX; a branch included), names Lightning's TPU / XLA / HPU accelerators or asks for TPU
        cores: code that swaps in that runtime's own kernels. ``torch.xpu`` and an ``"xpu"``
        device alone are torch's eager XPU backend, which runs torch's own code paths."""
        return bool(self._other_runtime_imports) or self._asks_for_tpu_cores

    @cached_property
    def other_accelerator(self) -> bool:
        """The file can run on an accelerator other than a CUDA GPU: it imports an XLA / TPU,
        AWS Neuron, Intel Gaudi (HPU), Ascend (NPU) or Intel XPU runtime (anywhere, a branch
        included), names Lightning's TPU / XLA / HPU accelerators, or asks for TPU cores.
        Fixes that raise there (``fused=True``, ``use_reentrant=False`` on XLA) stay out."""
        if self._other_runtime_imports or self._asks_for_tpu_cores:
            return True
        # Intel XPU / Ascend NPU / Gaudi HPU reached through torch itself: ``torch.xpu.set_device``,
        # ``model.to("xpu:0")``.
        ctx = self.ctx
        if ctx.calls_with_prefix("torch.xpu.") or ctx.calls_with_prefix("torch.npu.") or ctx.calls_with_prefix("torch.hpu."):
            return True
        for kind, node in self.placements:
            if kind is not Where.OTHER or not isinstance(node, cst.Call) or not node.args:
                continue
            is_move = isinstance(node.func, cst.Attribute) and node.func.attr.value in ("to", "cuda")
            device = self.move_target(node) if is_move else node.args[0].value  # ``torch.device("xpu")``
            name = ctx.values.value_of(device) if device is not None else None
            if isinstance(name, str) and _NON_CUDA_DEVICE.match(name):
                return True
        return False

    @cached_property
    def other_accelerator_only(self) -> bool:
        """The file is written for another accelerator: it imports that runtime at module level
        (``import torch_xla.core.xla_model as xm`` at the top, as Neuron and TPU scripts do), not
        only in a branch that handles it next to CUDA."""
        return any(self.ctx.enclosing(node, cst.FunctionDef, cst.If, cst.Try) is None for node in self._other_runtime_imports)

    @cached_property
    def _other_runtime_imports(self) -> list[cst.CSTNode]:
        ctx = self.ctx
        if not _OTHER_RUNTIME_TEXT.search(ctx.source):
            return []
        found: list[cst.CSTNode] = []
        for node in [*ctx.nodes(cst.Import), *ctx.nodes(cst.ImportFrom)]:
            if isinstance(node, cst.ImportFrom):
                names = [dotted_name(node.module) or ""] if node.module is not None and not node.relative else []
                if names and names[0] in _LIGHTNING_ACCELERATOR_MODULES and isinstance(node.names, Sequence):
                    lightning = [f"{names[0]}.{alias.name.value}" for alias in node.names if isinstance(alias.name, cst.Name)]
                    if any(name.rsplit(".", 1)[-1] in _OTHER_LIGHTNING_ACCELERATORS for name in lightning):
                        found.append(node)
                    continue
            else:
                names = [dotted_name(alias.name) or "" for alias in node.names]
            if any(name.split(".")[0] in _OTHER_RUNTIMES for name in names):
                found.append(node)
        return found

    @cached_property
    def _asks_for_tpu_cores(self) -> bool:
        return "tpu_cores" in self.ctx.source and any(
            arg.keyword is not None and arg.keyword.value == "tpu_cores" for arg in self.ctx.nodes(cst.Arg)
        )

    @cached_property
    def cpu_by_default(self) -> bool:
        """The script picks its device with a switch whose default is the CPU: ``"cuda" if
        args.backend == "gpu" and torch.cuda.is_available() else "cpu"`` with ``--backend``
        defaulting to ``"cpu"`` (pytorch/examples' language_translation). It runs on a GPU only
        when told to, so a fix must also hold for the CPU run."""
        ctx = self.ctx
        if "cpu" not in ctx.source:
            return False
        for choice in ctx.nodes(cst.IfExp):
            body, orelse = ctx.values.value_of(choice.body), ctx.values.value_of(choice.orelse)
            if not (isinstance(body, str) and isinstance(orelse, str)):
                continue
            kinds = (device_of_string(body), device_of_string(orelse))
            if Where.CPU not in kinds or not any(kind.gpu for kind in kinds):
                continue
            test = ctx.values.resolve(choice.test)
            if test is not None and isinstance(test.value, bool):
                return kinds[0 if test.value else 1] is Where.CPU
        return False

    @cached_property
    def always_cuda(self) -> bool:
        """The file puts work on a CUDA device with no CPU fallback of its own: a placement that
        is CUDA whatever the machine (``.cuda()``, ``"cuda"``), not under a test for a GPU. A fix
        that is only right with a GPU (``pin_memory=True`` warns on every CPU run) is written
        plainly here, and conditioned on ``torch.cuda.is_available()`` elsewhere."""
        for kind, node in self.placements:
            if kind is Where.CUDA and not self._under_gpu_test(node) and not self._only_with_several_processes(node):
                return True
        return False

    def _only_with_several_processes(self, node: cst.CSTNode) -> bool:
        """Under ``if int(os.environ.get("WORLD_SIZE", "1")) > 1:`` (or a device count, an
        initialised process group): ml-mdm's ``DistributedDataParallel(..., device_ids=[local_rank])``,
        which a run on one machine without a GPU never reaches."""
        ctx = self.ctx
        for ancestor in ctx.ancestors(node):
            if isinstance(ancestor, cst.If) and ctx.is_descendant(node, ancestor.body):
                if _SEVERAL_PROCESSES.search(ctx.code(ancestor.test)):
                    return True
        return False

    @cached_property
    def sets_visible_devices(self) -> bool:
        """The program picks its GPUs by setting ``CUDA_VISIBLE_DEVICES`` in code, in this file or
        a file that runs with it (sudo_rm_rf's ``run_*.py``, after building the loaders in another
        module). CUDA reads the variable once, when it starts: a ``torch.cuda.is_available()``
        that runs before the assignment fixes which GPUs the process sees."""
        ctx = self.ctx
        if _SETS_VISIBLE_DEVICES.search(ctx.source.encode("utf-8", "replace")):
            return True
        return ctx.project is not None and ctx.project.runs_with_match(_SETS_VISIBLE_DEVICES)

    @cached_property
    def launch_blocking(self) -> bool:
        """The file sets ``CUDA_LAUNCH_BLOCKING=1`` (Dinomaly's scripts, a debugging switch left
        on): every kernel launch then waits for the GPU, and nothing overlaps a copy."""
        return _LAUNCH_BLOCKING.search(self.ctx.source) is not None

    @cached_property
    def may_pick_mps(self) -> bool:
        """The file asks whether Apple's MPS is there (``torch.backends.mps.is_available()``):
        it may run on it."""
        return bool(self.ctx.calls("torch.backends.mps.is_available", "torch.mps.is_available"))

    @cached_property
    def falls_back_to_cpu(self) -> bool:
        """The file chooses CUDA only where a GPU is found (``"cuda" if torch.cuda.is_available()
        else "cpu"``) and places nothing on CUDA unconditionally: on a machine without one it
        runs on the CPU."""
        return not self.always_cuda and any(
            kind is Where.CUDA_IF_AVAILABLE or (kind is Where.CUDA and self._under_gpu_test(node))
            for kind, node in self.placements
        )

    def _under_gpu_test(self, node: cst.CSTNode) -> bool:
        ctx = self.ctx
        return any(
            isinstance(ancestor, (cst.If, cst.IfExp))
            and ctx.is_descendant(node, ancestor.body)
            and self.gpu_test(ancestor.test, switches=True) is Tri.YES
            for ancestor in ctx.ancestors(node)
        )

    @cached_property
    def runs_without_gpu(self) -> bool:
        """A script that runs with no GPU shown: the verdict is no, or the script runs and
        where it runs is chosen at run time. A module that only defines things is neither: it
        runs wherever its importer puts it."""
        return self.gpu.no or (self.gpu.unknown and self.runs)

    @cached_property
    def places_on_gpu(self) -> bool:
        """Whether the file itself moves work onto a CUDA device (``.to``, ``.cuda()``, ``device=``,
        DataParallel), not only a framework that would: a device variable counts in a GPU file."""
        from advisor.apis import ACCELERATOR, FABRIC, LIGHTNING_TRAINER_BUILDERS, TRAINING_ARGUMENTS

        frameworks = set(self.ctx.calls(ACCELERATOR, FABRIC, *LIGHTNING_TRAINER_BUILDERS, *TRAINING_ARGUMENTS))
        frameworks.update(self.ctx.facts.frameworks.hf_trainer_calls)
        for kind, node in self.placements:
            if node in frameworks:
                continue
            if kind.gpu or (kind is Where.NAMED and self.gpu.yes):
                return True
        return False

    def gpu_moves(self) -> Iterator[cst.Call]:
        """The ``.to(...)`` / ``.cuda()`` calls that move something to a CUDA device (a device
        variable counts where the file trains on a GPU)."""
        named_counts = self.gpu.yes
        for call in self.ctx.method_calls("to", "cuda"):
            kind = self.move(call)
            if kind is not None and (kind.gpu or (kind is Where.NAMED and named_counts)):
                yield call

    def left_none(self, name: cst.Name) -> bool:
        """A parameter that defaults to ``None`` (``def __init__(self, dim, device=None)``) which no
        call of its function or class in the file passes, where the file has such calls and no
        importer uses the class or function: ``.to(device)`` there moves nothing (the rotary
        embeddings of HF-style modeling files, built by the attention layer without a device)."""
        from advisor.context import MISSING

        ctx = self.ctx
        found = ctx.parameter_of(name)
        if found is None:
            return False
        param, function, index = found
        if not (isinstance(param.default, cst.Name) and param.default.value == "None"):
            return False
        cls = ctx.enclosing(function, cst.ClassDef, cst.FunctionDef)
        if isinstance(cls, cst.ClassDef) and function.name.value == "__init__":
            owner = cls.name.value
            calls = [c for c in ctx.nodes(cst.Call) if isinstance(c.func, cst.Name) and c.func.value == owner]
            if any(owner in (dotted_name(base.value) or "") for other in ctx.nodes(cst.ClassDef) for base in other.bases):
                return False  # a subclass may hand it a device through ``super().__init__``
        else:
            owner = function.name.value
            calls = ctx.loops.callers(function)
        if not calls or (ctx.project is not None and ctx.project.used_by_importers(owner)):
            return False
        return all(ctx.argument(call, name.value, index) is MISSING for call in calls)

    def on_gpu(self, expr: cst.BaseExpression) -> bool:
        """A device expression that is a CUDA device, or a device variable (``device``,
        ``x.device``, ``args.gpu``) in a file not known to run on the CPU only."""
        kind = self.where(expr)
        return kind.gpu or (kind is Where.NAMED and not self.gpu.no)


__all__ = ["DeviceFacts", "Where", "join", "device_of_string", "NO", "UNKNOWN"]
