"""Several processes: the process group, the DDP / FSDP wraps, and the samplers that shard data.

A file does *its own* data parallelism when it wraps a model in ``DistributedDataParallel`` or
FSDP itself: then it, not a framework, must shard the data (``DistributedSampler``), skip the
all-reduce on micro-steps that do not step (``no_sync()``) and reshuffle every epoch
(``set_epoch``). Accelerate, Lightning, Fabric, the HF ``Trainer`` and DeepSpeed's engine do
those for the scripts they drive, so a file that uses one of them is not one of these.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from advisor.apis import ACCELERATOR, DATA_PARALLEL, DISTRIBUTED_DATA_PARALLEL, FABRIC, LIGHTNING_TRAINER, TRAINING_ARGUMENTS
from advisor.names import dotted_name

if TYPE_CHECKING:
    from advisor.context import FileContext

INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
# FSDP2, which shards parameters into DTensors.
FULLY_SHARD = ("torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard")
FSDP = (
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    *FULLY_SHARD,
)
# Calls that turn a module's parameters into DTensors (tensor parallelism, FSDP2).
DTENSOR_SHARDING = (
    "torch.distributed.tensor.parallel.parallelize_module",
    "torch.distributed.tensor.parallel.api.parallelize_module",
    "torch.distributed.tensor.distribute_module",
    "torch.distributed._tensor.distribute_module",
    *FULLY_SHARD,
)
DISTRIBUTED_SAMPLERS = ("torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler")
# Frameworks that shard the data, sync gradients and reshuffle for the scripts they drive.
_FRAMEWORKS = (ACCELERATOR, FABRIC, LIGHTNING_TRAINER, "deepspeed.initialize", *TRAINING_ARGUMENTS)
# Calls that only iterate what they are given: a loader passed to them is not handed over.
_ITERATING = frozenset({"enumerate", "iter", "len", "zip", "tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "print", "next"})


_MACHINE_TEST = re.compile(r"cuda|gpu|device|platform|windows|darwin|nccl|backend", re.IGNORECASE)


@dataclass(frozen=True)
class Backend:
    call: cst.Call
    expr: cst.BaseExpression | None  # the backend argument as written; None when not passed
    value: str | None  # its value where it resolves to a string
    follows_availability: bool  # ``"nccl" if torch.cuda.is_available() else "gloo"``


class DistributedFacts:
    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx

    @cached_property
    def ddp_wraps(self) -> list[cst.Call]:
        return self.ctx.calls(*DISTRIBUTED_DATA_PARALLEL)

    @cached_property
    def dtensor_parameters(self) -> bool:
        """The file shards a module's parameters into DTensors (``parallelize_module``,
        ``fully_shard``): optimizers over them get DTensor parameters."""
        return bool(self.ctx.calls(*DTENSOR_SHARDING))

    @cached_property
    def fsdp_wraps(self) -> list[cst.Call]:
        return self.ctx.calls(*FSDP)

    @cached_property
    def data_parallel_wraps(self) -> list[cst.Call]:
        return self.ctx.calls(*DATA_PARALLEL)

    @cached_property
    def framework_driven(self) -> bool:
        """A framework owns the processes: Accelerate, Lightning, Fabric, the HF Trainer, DeepSpeed."""
        ctx = self.ctx
        return bool(ctx.calls(*_FRAMEWORKS)) or bool(ctx.facts.frameworks.hf_trainer_calls)

    @cached_property
    def hand_written(self) -> bool:
        """The file wraps a model in DDP or FSDP itself, with no framework driving it."""
        return bool(self.ddp_wraps or self.fsdp_wraps) and not self.framework_driven

    @cached_property
    def shards_data_itself(self) -> bool:
        """The file must split the data by rank itself: it wraps the model in DDP / FSDP by hand,
        or drives DeepSpeed's engine without handing it the data set (``training_data=``, with
        which DeepSpeed builds a distributed loader)."""
        if self.hand_written:
            return True
        ctx = self.ctx
        engines = ctx.calls("deepspeed.initialize")
        others = ctx.calls(ACCELERATOR, FABRIC, LIGHTNING_TRAINER, *TRAINING_ARGUMENTS) or ctx.facts.frameworks.hf_trainer_calls
        return bool(engines) and not others and all(ctx.keyword_arg(call, "training_data") is None for call in engines)

    @cached_property
    def accelerate_prepares_model(self) -> bool:
        """An ``Accelerator`` prepares the model (it wraps it in DDP on several processes)."""
        ctx = self.ctx
        if not ctx.calls(ACCELERATOR):
            return False
        return any(
            isinstance(call.func, cst.Attribute) and call.func.attr.value == "prepare" and call.args
            for call in ctx.method_calls("prepare")
        )

    @cached_property
    def wrapped_names(self) -> set[str]:
        """Names bound to a DDP / FSDP wrap (``model = DDP(model, ...)``, ``self.model = ...``)."""
        names: set[str] = set()
        for assign in self._wrap_assignments:
            for target in assign.targets:
                name = dotted_name(target.target)
                if name:
                    names.add(name)
        return names

    @cached_property
    def _wrap_assignments(self) -> list[cst.Assign]:
        """``model = DDP(model, ...)``, also as one side of a conditional expression
        (``DDP(model) if ddp else model``)."""
        wraps = set(self.ddp_wraps) | set(self.fsdp_wraps)
        return [
            assign for assign in self.ctx.nodes(cst.Assign)
            if assign.value in wraps
            or (isinstance(assign.value, cst.IfExp) and (assign.value.body in wraps or assign.value.orelse in wraps))
        ]

    def conditional_wrap(self, name: str) -> cst.CSTNode | None:
        """The ``if`` (or conditional expression) under which ``name`` is wrapped in DDP / FSDP,
        where the wrap is conditional (minimind's ``if ddp: model = DistributedDataParallel(model)``):
        on one GPU the module stays plain, without ``no_sync()``. None when it is always wrapped."""
        ctx = self.ctx
        for assign in self._wrap_assignments:
            if not any(dotted_name(t.target) == name for t in assign.targets):
                continue
            if isinstance(assign.value, cst.IfExp):
                return assign.value
            for ancestor in ctx.ancestors(assign):
                if isinstance(ancestor, cst.If) and ancestor not in ctx.main_guards:
                    return ancestor
        return None

    @cached_property
    def backends(self) -> list[Backend]:
        from advisor.context import MISSING

        ctx = self.ctx
        read = []
        for call in ctx.calls(INIT_PROCESS_GROUP):
            expr = ctx.argument(call, "backend", 0)
            expr = None if expr is MISSING else expr
            value = ctx.values.value_of(expr) if expr is not None else None
            read.append((call, expr, value if isinstance(value, str) else None))
        # Two calls with different backends: the file picks one per machine (``if platform.system()
        # == "Windows": ... "gloo" else: ... "nccl"``), as a conditional expression would.
        several = len({value for _, _, value in read}) > 1
        found = [
            Backend(
                call, expr, value,
                several or (expr is not None and self._follows_availability(expr)) or self._under_machine_test(call),
            )
            for call, expr, value in read
        ]
        return found

    def _under_machine_test(self, call: cst.Call) -> bool:
        """Inside an ``if`` that asks about the machine (CUDA, the platform, a device)."""
        for ancestor in self.ctx.ancestors(call):
            if isinstance(ancestor, cst.If) and _MACHINE_TEST.search(self.ctx.code(ancestor.test)):
                return True
        return False

    def _follows_availability(self, expr: cst.BaseExpression) -> bool:
        """The backend is chosen by what the machine has: a conditional on the device, or a name
        assigned such a conditional (or more than one value)."""
        ctx = self.ctx
        if isinstance(expr, cst.IfExp):
            return True
        if isinstance(expr, cst.Name):
            bindings = ctx.lookup(expr.value, expr)
            values = [b.value for b in bindings if b.value is not None]
            if len(bindings) > 1 or any(isinstance(v, cst.IfExp) for v in values):
                return True
        return False

    @cached_property
    def distributed_samplers(self) -> list[cst.Call]:
        return self.ctx.calls(*DISTRIBUTED_SAMPLERS)

    @cached_property
    def sets_epoch(self) -> bool:
        """Some ``.set_epoch(...)`` call in the file, on whatever receiver."""
        return bool(self.ctx.method_calls("set_epoch"))

    def handed_over(self, name: str, at: cst.CSTNode) -> bool | None:
        """Whether the value of ``name`` is passed to a function this file cannot see into: True
        when to a function of another project module that mentions ``set_epoch`` or to one
        outside the project (unknown); False when only to the file's own functions, to iteration
        helpers, or to project functions whose module never mentions it."""
        ctx = self.ctx
        scope = ctx.enclosing(at, cst.FunctionDef) or ctx.module
        for call in ctx.walk(scope, cst.Call):
            passed = any(
                not arg.star and dotted_name(arg.value) == name
                for arg in call.args
            )
            if not passed:
                continue
            callee = dotted_name(call.func) or ""
            if callee in _ITERATING or ctx.qualname(call.func) in _ITERATING or ctx.loops.callee(call) is not None:
                continue
            if callee.split(".")[-1] in ("DataLoader", "prepare"):
                continue
            project = ctx.project
            found = project.binding(call.func) if project is not None else None
            if found is None:
                return True  # a library or something this file cannot read
            other, _ = found
            if "set_epoch" in other.source:
                return True
        return False


# -- DeepSpeed ZeRO ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ZeroConfig:
    """A DeepSpeed config the file shows: a dict with ``zero_optimization`` in the file, or a
    JSON file it names (read as text, never run)."""

    stage: int  # 0 when the config has no ZeRO section or no stage
    offload_optimizer: bool
    offload_param: bool
    at: cst.CSTNode  # where to report: the dict's key, or the string naming the JSON file
    where: str  # how the message names it: 'ds_config.json line 12', 'the config dict'


_STAGE_LINE = re.compile(r'"stage"\s*:')


def zero_configs(ctx: "FileContext") -> list[ZeroConfig]:
    return ctx.memo(zero_configs, lambda: list(_zero_configs(ctx)))


def _zero_configs(ctx: "FileContext"):
    from advisor.facts.environment import named_json

    text = ctx.source
    if "zero_optimization" not in text and ".json" not in text:
        return
    seen: set[str] = set()
    for string in ctx.nodes(cst.SimpleString):
        value = ctx.values.value_of(string)
        if not isinstance(value, str):
            continue
        if value == "zero_optimization":
            parent = ctx.parent.get(string)
            if isinstance(parent, cst.DictElement) and parent.key is string:
                entries = ctx.values.dict_entries(parent.value)
                if entries is None:
                    continue
                config = {key: ctx.values.value_of(expr) for key, expr in entries.items()}
                for key in ("offload_optimizer", "offload_param"):
                    if key in entries:
                        nested = ctx.values.dict_entries(entries[key])
                        config[key] = {k: ctx.values.value_of(v) for k, v in (nested or {}).items()} if nested is not None else "unknown"
                found = _from_section(config, string, "the config dict")
                if found is not None:
                    yield found
        elif value.endswith(".json") and value not in seen:
            seen.add(value)
            found_json = named_json(ctx, value)
            if found_json is None:
                continue
            config, data = found_json
            if not isinstance(config, dict) or "zero_optimization" not in config:
                continue
            match = _STAGE_LINE.search(data)
            line = data.count("\n", 0, match.start()) + 1 if match else None
            found = _from_section(config["zero_optimization"], string, value + (f" line {line}" if line else ""))
            if found is not None:
                yield found


def shipped_zero3_config(ctx: "FileContext") -> str | None:
    """A DeepSpeed config with ZeRO stage 3 that the project ships, by its path from the root:
    ChatGLM-Finetuning's ``ds_zero3_offload.json``, which its README passes to ``train.py``
    through ``--ds_file``. Where the JSON a run uses is chosen on the command line, the
    project's own configs say which stages it runs under."""
    return next((path for path, stage in shipped_deepspeed_configs(ctx) if stage == 3), None)


def shipped_deepspeed_configs(ctx: "FileContext") -> list[tuple[str, object]]:
    """The DeepSpeed configs the project ships (JSON files with a ``zero_optimization``
    section, at its root or in a config folder there, two deep: LLaMA-MoE-v2's
    ``conf/deepspeed/``), with their ZeRO stage as written (``"auto"`` stays a string). Empty
    when there are none, or no project root to look in. Read once per file checked; each JSON
    through :func:`read_project_file`, so an edited config is seen and recorded for the cache."""
    project = getattr(ctx, "project", None)
    if project is None:
        return []
    return ctx.memo(shipped_deepspeed_configs, lambda: _find_deepspeed_configs(ctx, os.path.abspath(project.project.root)))


_DEEPSPEED_OPTION = re.compile(r"--deepspeed[= ]+[\"']?([^\s\"']+\.json)")


def launched_deepspeed_configs(ctx: "FileContext") -> list[tuple[str, object]] | None:
    """The DeepSpeed configs that the commands the project ships to run this file pass
    (``--deepspeed assets/ds_config_zero2.json`` in PandaLM's ``inst-tune.sh``), parsed, with
    the path as written; None unless there is such a command and each passes one the project
    holds (looked up beside the command's script, at the project's root, beside this file)."""
    from advisor.facts.environment import read_project_file

    view = getattr(ctx, "project", None)
    if view is None:
        return None
    launches = view.launch_commands()
    if not launches:
        return None
    root = os.path.abspath(view.project.root)
    found: list[tuple[str, object]] = []
    for script, command in launches:
        match = _DEEPSPEED_OPTION.search(command)
        if match is None:
            return None
        written = match.group(1)
        config = None
        for base in (os.path.dirname(script), root, os.path.dirname(os.path.abspath(ctx.path))):
            candidate = os.path.normpath(os.path.join(base, written))
            if candidate.startswith(root) and os.path.isfile(candidate):
                text = read_project_file(ctx, candidate)
                try:
                    config = json.loads(text) if text is not None else None
                except ValueError:
                    config = None
                break
        if not isinstance(config, dict):
            return None
        found.append((written, config))
    return found


def deepspeed_builds_the_optimizer(ctx: "FileContext") -> str | None:
    """The config (as the launch commands write it) when every command the project ships to run
    this file hands the Trainer a DeepSpeed config with its own ``optimizer`` section: DeepSpeed
    then builds the optimizer, and the Trainer's ``optim`` is not used."""
    configs = launched_deepspeed_configs(ctx)
    if not configs or not all(isinstance(config, dict) and isinstance(config.get("optimizer"), dict) for _, config in configs):
        return None
    return configs[0][0]


def imports_deepspeed(ctx: "FileContext") -> bool:
    """The file imports DeepSpeed itself (LLaVA's ``train.py``: ``from deepspeed import zero``
    to gather ZeRO-3 parameters for saving): it is written to run under it, whether or not its
    launch configs ship with it."""
    for node in ctx.nodes(cst.ImportFrom):
        module = dotted_name(node.module) if node.module is not None and not node.relative else None
        if module is not None and (module == "deepspeed" or module.startswith("deepspeed.")):
            return True
    return any(
        (dotted_name(alias.name) or "").split(".")[0] == "deepspeed" for node in ctx.nodes(cst.Import) for alias in node.names
    )


_CONFIG_FOLDER = re.compile(r"^(?:conf|configs?|ds_?configs?|deepspeed[\w-]*|ds|scripts?)$", re.I)


def _config_folders(folder: str) -> list[str]:
    from advisor.facts.environment import folder_listing

    def is_config_folder(name: str) -> bool:
        return bool(_CONFIG_FOLDER.match(name)) and os.path.isdir(os.path.join(folder, name))

    return [os.path.join(folder, n) for n in folder_listing(folder, "config folders", is_config_folder)]


def _find_deepspeed_configs(ctx: "FileContext", root: str) -> list[tuple[str, object]]:
    from advisor.facts.environment import folder_listing, read_project_file

    folders = [root]
    for parent in (root, *_config_folders(root)):  # LLaMA-MoE-v2's ``conf/deepspeed/``
        folders += [f for f in _config_folders(parent) if f not in folders]
    found: list[tuple[str, object]] = []
    for folder in folders:
        for name in folder_listing(folder, "json", lambda n: n.endswith(".json"))[:200]:
            path = os.path.join(folder, name)
            text = read_project_file(ctx, path)
            if text is None or "zero_optimization" not in text:
                continue
            try:
                config = json.loads(text)
            except ValueError:
                continue
            section = config.get("zero_optimization") if isinstance(config, dict) else None
            if isinstance(section, dict):
                found.append((os.path.relpath(path, root), section.get("stage", 0)))
    return found


def deepspeed_precision(ctx: "FileContext", call: cst.Call) -> tuple[str, str] | None:
    """The precision a ``TrainingArguments(deepspeed=...)`` config turns on itself, and where:
    ``("fp16", "ds_config_gpt_j.json")`` for ``"fp16": {"enabled": true}``. transformers raises
    when such a config and the arguments disagree; ``"auto"`` follows the arguments (None).
    ``("unknown", where)`` for a config that is given but cannot be read: a path from the
    command line (FinGPT's ``--ds_config``, whose launch script names a config with fp16 on),
    a file the project does not ship, a dict built at run time."""
    from advisor.facts.environment import named_json

    expr = ctx.argument(call, "deepspeed")
    if expr is None or not isinstance(expr, cst.BaseExpression):
        return None
    resolved = ctx.values.resolve(expr)
    value = resolved.value if resolved is not None else None
    if resolved is not None and (value is None or value is False or value == ""):
        return None  # no DeepSpeed in the run the code describes
    config: object = None
    where = ctx.snippet(expr, 40)
    if isinstance(value, str):
        found = named_json(ctx, value) if value.endswith(".json") else None
        config, where = (found[0], value) if found is not None else (None, value)
    else:  # a dict written in the script
        entries = ctx.values.dict_entries(expr)
        if entries is not None:
            config = {}
            for key in ("fp16", "bf16"):
                nested = ctx.values.dict_entries(entries[key]) if key in entries else None
                if nested is None:
                    if key in entries:
                        return "unknown", where
                    continue
                if "enabled" in nested:
                    config[key] = {"enabled": ctx.values.value_of(nested["enabled"])}
    if not isinstance(config, dict):
        return "unknown", where
    for key in ("fp16", "bf16"):
        section = config.get(key)
        if isinstance(section, dict) and section.get("enabled") is True:
            return key, where
    return None


def _from_section(section, at: cst.CSTNode, where: str) -> ZeroConfig | None:
    if not isinstance(section, dict):
        return None
    stage = section.get("stage", 0)
    if not isinstance(stage, int) or isinstance(stage, bool) or not 0 <= stage <= 3:
        return None  # "auto" or a value read at run time

    def offloads(key: str) -> bool | None:
        value = section.get(key)
        if value is None:
            return False
        if not isinstance(value, dict):
            return None
        device = value.get("device", "cpu")
        if not isinstance(device, str) or device == "auto":
            return None
        return device.lower() != "none"

    optimizer, param = offloads("offload_optimizer"), offloads("offload_param")
    if optimizer is None or param is None:
        return None
    return ZeroConfig(stage, optimizer, param, at, where)


MIXED_PRECISION_BYTES = (2, 2, 12)  # per parameter: 16-bit weights, 16-bit gradients, fp32 master + Adam's two moments


def zero_bytes_per_gpu(parameters: float, stage: int, gpus: int, offload_optimizer: bool, offload_param: bool) -> float:
    """Model states per GPU under ZeRO with mixed-precision Adam (the ZeRO paper's 2 + 2 + 12
    bytes per parameter): stage 1 shards the optimizer states, 2 the gradients too, 3 the
    weights too; offloading moves the states (and, at stage 3, the weights) to the CPU.
    Activations come on top."""
    weights, gradients, states = (parameters * b for b in MIXED_PRECISION_BYTES)
    if stage >= 1:
        states /= gpus
    if stage >= 2:
        gradients /= gpus
    if stage >= 3:
        weights /= gpus
    if offload_optimizer:
        states = 0.0
    if offload_param and stage >= 3:
        weights = 0.0
    return weights + gradients + states
