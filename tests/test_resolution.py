"""The shared resolvers: qualified names through imports, and values through names."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from advisor.context import MISSING, FileContext
from advisor.targets import ASSUMED
from helpers import fix, lint


def ctx_for(source: str) -> FileContext:
    return FileContext.from_source("t.py", textwrap.dedent(source), ASSUMED)


def last_call(ctx: FileContext, name: str) -> cst.Call:
    calls = [c for c in ctx.nodes(cst.Call) if ctx.code(c.func).endswith(name)]
    return calls[-1]


def test_qualified_names_through_aliases():
    ctx = ctx_for(
        """
        import torch.optim as optim
        from torch.utils.data import DataLoader as DL
        import torch as T
        from torch import nn
        a = optim.AdamW(p)
        b = DL(ds)
        c = T.utils.data.DataLoader(ds)
        d = nn.Linear(3, 4)
        e = DataLoader(ds)
        """
    )
    assert len(ctx.calls("torch.optim.AdamW")) == 1
    assert len(ctx.calls("torch.utils.data.DataLoader")) == 2  # DL and T.utils..., not the unbound name
    assert len(ctx.calls("torch.nn.Linear")) == 1


def test_reference_keeps_the_files_import_style():
    ctx = ctx_for("import torch as T\nx = 1\n")
    expr, imports = ctx.reference("torch.bfloat16")
    assert ctx.module.code_for_node(expr) == "T.bfloat16" and imports == ()
    ctx = ctx_for("from torch import nn\n")
    expr, imports = ctx.reference("torch.bfloat16")
    assert ctx.module.code_for_node(expr) == "torch.bfloat16" and imports == ("torch",)


def test_values_through_constants_argparse_and_dicts():
    ctx = ctx_for(
        """
        import argparse
        BATCH = 4 * 2
        parser = argparse.ArgumentParser()
        parser.add_argument("--grad-accum", type=int, default=16)
        parser.add_argument("--fp16", action="store_true")
        parser.add_argument("--workers", dest="num_workers", default=BATCH)
        parser.add_argument("--lr", type=float)
        parser.set_defaults(lr=3e-4)
        args = parser.parse_args()
        cfg = {"batch_size": BATCH, "pin": True}
        kw = dict(batch_size=2, **cfg)
        use(args.grad_accum, args.fp16, args.num_workers, args.lr, cfg["batch_size"], args.unknown)
        """
    )
    call = last_call(ctx, "use")
    values = [ctx.values.resolve(a.value) for a in call.args]
    assert [v.value if v else None for v in values[:5]] == [16, False, 8, 3e-4, 8]
    assert values[0].origin == "argparse default"
    assert values[5] is None
    entries = ctx.values.dict_entries(cst.parse_expression("kw"))  # not in the tree: name lookup fails
    assert entries is None


def test_unknown_stays_unknown():
    ctx = ctx_for(
        """
        import torch
        x = 1
        if flag:
            x = 2
        def f():
            global y
            y = 3
        y = 1
        args = parser.parse_args(["--a"])
        kw = {"pin_memory": True}
        kw["pin_memory"] = False
        use(x, y, args.a, something.attr)
        loader = torch.utils.data.DataLoader(ds, **kw)
        loader2 = torch.utils.data.DataLoader(ds, *rest)
        loader3 = torch.utils.data.DataLoader(ds, 8)
        """
    )
    call = last_call(ctx, "use")
    assert [ctx.values.resolve(a.value) for a in call.args] == [None, None, None, None]
    loaders = ctx.calls("torch.utils.data.DataLoader")
    assert ctx.argument(loaders[0], "pin_memory", 7) is None  # dict mutated: unknowable
    assert ctx.argument(loaders[1], "pin_memory", 7) is None  # *rest could fill it
    assert ctx.argument(loaders[2], "pin_memory", 7) is MISSING
    assert ctx.values.value_of(ctx.argument(loaders[2], "batch_size", 1)) == 8


def test_kwargs_dict_resolves():
    ctx = ctx_for(
        """
        import torch
        kw = {"batch_size": 8, "pin_memory": False}
        loader = torch.utils.data.DataLoader(ds, **kw)
        """
    )
    (loader,) = ctx.calls("torch.utils.data.DataLoader")
    assert ctx.values.value_of(ctx.argument(loader, "pin_memory", 7)) is False


def test_function_scope_bindings():
    ctx = ctx_for(
        """
        import torch
        bs = 64
        def main():
            bs = 2
            use(bs)
        def other():
            use(bs)
        """
    )
    uses = [c for c in ctx.nodes(cst.Call) if ctx.code(c.func) == "use"]
    assert [ctx.values.value_of(c.args[0].value) for c in uses] == [2, 64]


def resolved(source: str, name: str = "use") -> list:
    """The values of the arguments of the last ``use(...)`` call, None where unknown."""
    ctx = ctx_for(source)
    call = last_call(ctx, name)
    return [ctx.values.value_of(a.value) if ctx.values.resolve(a.value) else None for a in call.args]


def origins(source: str) -> list:
    ctx = ctx_for(source)
    call = last_call(ctx, "use")
    return [getattr(ctx.values.resolve(a.value), "origin", None) for a in call.args]


# -- dataclass arguments (HfArgumentParser) -------------------------------------------------------
HF_ARGUMENTS = """
    from dataclasses import dataclass, field
    from typing import Optional
    import transformers
    from transformers import HfArgumentParser, TrainingArguments

    @dataclass
    class ModelArguments:
        model_name_or_path: Optional[str] = field(default="facebook/opt-125m")

    @dataclass
    class TrainArgs:
        batch_size: int = field(default=8, metadata={"help": "per-device batch"})
        lr: float = 3e-4
        data_path: str = field(metadata={"help": "required"})
        extra: list = field(default_factory=list)

    @dataclass
    class MoreArgs(TrainArgs):
        warmup: int = 100

    @dataclass
    class MyTrainingArguments(transformers.TrainingArguments):
        model_max_length: int = field(default=512)
"""


def test_hf_argument_parser_fields_are_argparse_defaults():
    source = HF_ARGUMENTS + """
    parser = HfArgumentParser((ModelArguments, TrainArgs, MoreArgs, MyTrainingArguments))
    model_args, train_args, more, training_args = parser.parse_args_into_dataclasses()
    use(model_args.model_name_or_path, train_args.batch_size, train_args.lr, more.batch_size, more.warmup,
        training_args.model_max_length, train_args.data_path, train_args.extra,
        training_args.per_device_train_batch_size, training_args.fp16)
    """
    assert resolved(source) == ["facebook/opt-125m", 8, 3e-4, 8, 100, 512, None, None, None, None]
    assert set(origins(source)[:6]) == {"argparse default"}


def test_training_arguments_from_the_command_line_stay_unknown():
    source = HF_ARGUMENTS + """
    parser = transformers.HfArgumentParser((TrainArgs, TrainingArguments))
    train_args, training_args = parser.parse_args_into_dataclasses(return_remaining_strings=True)[:2]
    args, targs = HfArgumentParser((TrainArgs, TrainingArguments)).parse_args_into_dataclasses()
    use(training_args.per_device_train_batch_size, targs.per_device_train_batch_size, targs.bf16, args.batch_size)
    """
    assert resolved(source) == [None, None, None, 8]


@pytest.mark.parametrize(
    "parse",
    [
        # a JSON / YAML / dict config sets values the file does not show
        "train_args, = parser.parse_json_file(json_file='args.json')",
        "train_args, = parser.parse_yaml_file('args.yaml')",
        "train_args, = parser.parse_dict(config)",
        "train_args, = parser.parse_args_into_dataclasses(args=['--batch_size', '4'])",
        # the transformers examples' "a .json file or the command line"
        """if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
    train_args, = parser.parse_json_file(json_file=sys.argv[1])
else:
    train_args, = parser.parse_args_into_dataclasses()""",
        # changed after parsing
        "train_args, = parser.parse_args_into_dataclasses()\ntrain_args.batch_size = 4",
        "train_args, = parser.parse_args_into_dataclasses()\nsetattr(train_args, name, 4)",
        "train_args, = parser.parse_args_into_dataclasses()\nvars(train_args).update(overrides)",
    ],
)
def test_dataclass_arguments_read_from_elsewhere_stay_unknown(parse):
    source = textwrap.dedent(HF_ARGUMENTS) + "import sys\nparser = HfArgumentParser(TrainArgs)\n" + parse + "\nuse(train_args.batch_size)\n"
    assert resolved(source) == [None]


def test_dataclass_instances_built_in_the_file():
    source = HF_ARGUMENTS + """
    default = TrainArgs()
    keyword = TrainArgs(batch_size=4)
    positional = TrainArgs(16, 1e-3)
    unknown = TrainArgs(**overrides)
    use(default.batch_size, keyword.batch_size, keyword.lr, positional.batch_size, positional.lr, unknown.batch_size)
    """
    assert resolved(source) == [8, 4, 3e-4, 16, 1e-3, None]
    assert origins(source)[0] == "constant"  # built in the file: not a command-line default


def test_post_init_that_changes_a_field_makes_it_unknown():
    source = """
    from dataclasses import dataclass

    @dataclass
    class Config:
        batch_size: int = 8
        lr: float = 1e-3

        def __post_init__(self):
            self.batch_size = self.batch_size * world_size

    cfg = Config()
    use(cfg.batch_size, cfg.lr)
    """
    assert resolved(source) == [None, 1e-3]


def test_config_classes_namespaces_and_easydicts():
    source = """
    import argparse
    from types import SimpleNamespace
    from easydict import EasyDict as edict

    class CFG:
        batch_size = 16
        epochs: int = 3

    class Derived(CFG):
        epochs = 5

    class WithInit:
        batch_size = 16
        def __init__(self, batch_size):
            self.batch_size = batch_size

    ns = SimpleNamespace(batch_size=32, lr=1e-3)
    defaults = argparse.Namespace(batch_size=24)
    cfg = edict({"batch_size": 12, "train": {"workers": 4}})
    changed = edict(batch_size=12)
    changed.update(overrides)
    use(CFG.batch_size, CFG.epochs, Derived.batch_size, Derived.epochs, ns.batch_size, defaults.batch_size,
        cfg.batch_size, cfg["batch_size"], WithInit(8).batch_size, changed.batch_size, ns.unknown)
    """
    assert resolved(source) == [16, 3, 16, 5, 32, 24, 12, 12, None, None, None]


def test_dict_config_subscripts():
    source = """
    config = dict(batch_size=8, workers=4)
    nested = {"train": config}
    use(config["batch_size"], dict(config)["workers"])
    """
    assert resolved(source) == [8, 4]


# -- names bound more than once, configurator globals ----------------------------------------------
def test_reassignments_resolve_when_every_reaching_value_agrees():
    source = """
    import os
    a = 1
    a = 2
    b = 8
    if big:
        b = 16
    c = 8
    if big:
        c = 8
    d = 8
    d *= 2
    e = 4
    for _ in range(3):
        e += 1
    f = 8
    try:
        f = int(os.environ["F"])
    except KeyError:
        pass
    g = 8
    use(a, b, c, d, e, f, g)
    g = 16
    """
    assert resolved(source) == [2, None, 8, 16, None, None, 8]


def test_a_later_binding_in_the_same_loop_reaches_the_read():
    source = """
    n = 1
    for step in range(10):
        use(n)
        n = 2
    """
    assert resolved(source) == [None]


def test_global_rebound_in_a_function_is_unknown():
    source = """
    batch_size = 12
    def shrink():
        global batch_size
        batch_size = 4
    use(batch_size)
    """
    assert resolved(source) == [None]


NANOGPT = """
    import os
    import torch
    out_dir = 'out'
    gradient_accumulation_steps = 5 * 8 # used to simulate larger batch sizes
    batch_size = 12 # if gradient_accumulation_steps > 1, this is the micro-batch size
    dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'
    config_keys = [k for k,v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
    exec(open('configurator.py').read()) # overrides from command line or config file
    config = {k: globals()[k] for k in config_keys} # will be useful for logging
    ddp = int(os.environ.get('RANK', -1)) != -1 # is this a ddp run?
    if ddp:
        ddp_world_size = int(os.environ['WORLD_SIZE'])
        assert gradient_accumulation_steps % ddp_world_size == 0
        gradient_accumulation_steps //= ddp_world_size
    else:
        ddp_world_size = 1
    tokens_per_iter = gradient_accumulation_steps * ddp_world_size * batch_size
    ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
"""


def test_nanogpt_configurator_globals_are_command_line_defaults():
    source = NANOGPT + "    use(batch_size, gradient_accumulation_steps, out_dir, ddp_world_size, dtype)\n"
    assert resolved(source) == [12, 40, "out", None, None]
    assert origins(source)[:3] == ["argparse default"] * 3
    ctx = ctx_for(source)
    value = ctx.values.resolve(last_call(ctx, "use").args[1].value)
    assert ctx.values.describe(value) == "the config default `gradient_accumulation_steps = 5 * 8` at line 5"


def test_globals_after_the_configurator_are_plain_constants():
    source = """
    batch_size = 12
    exec(open('configurator.py').read())
    block_size = 1024
    use(batch_size, block_size)
    """
    assert origins(source) == ["argparse default", "constant"]


def test_torch_dtype_lookup_follows_the_key():
    from advisor.facts.precision import resolve_dtype

    fixed = NANOGPT.replace("dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'", "dtype = 'float16'")
    ctx = ctx_for(fixed + "    use(ptdtype)\n")
    assert resolve_dtype(ctx, last_call(ctx, "use").args[0].value).name == "float16"
    # nanoGPT's own choice falls back to float16 only without bf16: not a known dtype
    ctx = ctx_for(NANOGPT + "    use(ptdtype)\n")
    assert resolve_dtype(ctx, last_call(ctx, "use").args[0].value) is None


def test_nanogpt_capability_fallback_stays_silent_for_adv201():
    source = textwrap.dedent(NANOGPT) + textwrap.dedent(
        """
        ctx = torch.amp.autocast(device_type='cuda', dtype=ptdtype)
        scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
        optimizer = torch.optim.AdamW(model.parameters(), fused=True)
        while True:
            with ctx:
                loss = model(X, Y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
        """
    )
    assert [d for d in lint(source, codes=["ADV201"])] == []
    assert len(lint(source.replace("dtype = 'bfloat16' if", "dtype = 'float16' #"), codes=["ADV201"])) == 1


def test_describe_names_where_a_value_is_set():
    source = HF_ARGUMENTS + """
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("-b", "--batch-size", type=int, default=50)
    args = parser.parse_args()
    (train_args,) = HfArgumentParser(TrainArgs).parse_args_into_dataclasses()
    kw = {"batch_size": 64}
    use(args.batch_size, train_args.batch_size, kw["batch_size"])
    """
    ctx = ctx_for(source)
    described = [ctx.values.describe(ctx.values.resolve(a.value)) for a in last_call(ctx, "use").args]
    assert described[0].startswith("the `--batch-size` default at line ")
    assert described[1].startswith("the `--batch_size` default (`TrainArgs.batch_size`) at line ")
    assert described[2].startswith('`"batch_size": 64` at line ')


# -- CUDA evidence and **kwargs reaching rules ------------------------------------------------------
@pytest.mark.parametrize("line", ["model.to(0)", "model.cuda(0)", "device = torch.device(0)"])
def test_integer_devices_are_cuda(line):
    assert ctx_for(f"import torch\n{line}\n").facts.devices.gpu.yes


def test_integer_device_lookalikes_are_not_cuda():
    assert not ctx_for("import torch\nmodel.to(device)\nx = x.to(torch.float16)\n").facts.devices.gpu.yes


def test_pin_memory_false_in_a_kwargs_dict_reaches_adv101():
    source = """
        import torch
        from torch.utils.data import DataLoader
        loader_kwargs = {"batch_size": 8, "pin_memory": False, "num_workers": 4}
        loader = DataLoader(ds, **loader_kwargs)
        model.to(0)
        """
    (finding,) = lint(source, codes=["ADV101"])
    assert "`pin_memory=False` from `**kwargs` (line 4)" in finding.message
    # An explicit False is the authors' choice (held-out fix audit 12: Uformer turned it off
    # after trying it): reported, never edited.
    assert finding.fix_applicability is None
    assert fix(source, codes=["ADV101"]).fixed.decode() == textwrap.dedent(source)


def test_pin_memory_false_through_a_shared_constant_is_advice_only():
    source = """
        import torch
        from torch.utils.data import DataLoader
        PIN = False
        loader = DataLoader(ds, **{"batch_size": 8, "pin_memory": PIN})
        model.cuda()
        """
    (finding,) = lint(source, codes=["ADV101"])
    assert finding.fix_applicability is None


# -- the training-loop model: helpers, trainer classes, framework hooks ------------------------------
def loop_lines(ctx: FileContext) -> list[int]:
    return [ctx.position(loop.node)[0] for loop in ctx.loops.training_loops]


def marked(ctx: FileContext, marker: str = "marker") -> cst.Call:
    return last_call(ctx, marker)


def test_training_step_in_a_helper_function():
    ctx = ctx_for(
        """
        import torch
        def train_step(batch):
            loss = model(batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            marker()
        for batch in loader:
            train_step(batch)
        """
    )
    (loop,) = ctx.loops.training_loops
    assert [(e.kind, e.via_helper.name.value) for e in loop.events] == [
        ("backward", "train_step"), ("step", "train_step"), ("zero_grad", "train_step")
    ]
    region = ctx.loops.step_region(marked(ctx))
    assert region.loop is loop and not region.framework and len(region.calls) == 1


def test_epoch_loop_calling_a_training_function_is_not_the_training_loop():
    ctx = ctx_for(
        """
        import torch
        def train_one_epoch(model, loader, optimizer):
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        for epoch in range(10):
            train_one_epoch(model, loader, optimizer)
            marker()
        """
    )
    assert loop_lines(ctx) == [4]
    assert not ctx.loops.per_step(marked(ctx))  # once per epoch


def test_trainer_class_methods_and_nested_helpers():
    ctx = ctx_for(
        """
        import torch
        class Trainer:
            def _backward(self, loss):
                self.scaler.scale(loss).backward()

            def train_step(self, batch):
                loss = self.model(batch)
                self._backward(loss)
                if self.should_step:
                    self.scaler.step(self.optimizer)
                    self.optimizer.zero_grad()
                    marker()

            def fit(self):
                for batch in self.loader:
                    self.train_step(batch)
        """
    )
    (loop,) = ctx.loops.training_loops
    kinds = [(e.kind, e.via_helper.name.value, e.conditional) for e in loop.events]
    assert kinds == [("backward", "_backward", False), ("step", "train_step", True), ("zero_grad", "train_step", True)]
    region = ctx.loops.step_region(marked(ctx))
    assert region.loop is loop and region.conditional


def test_function_defined_inside_the_training_function():
    ctx = ctx_for(
        """
        import torch
        def main():
            def step(batch):
                loss = model(batch)
                loss.backward()
                opt.step()
                opt.zero_grad()
            for batch in loader:
                step(batch)
        """
    )
    assert loop_lines(ctx) == [9]


def test_per_step_inside_and_outside_the_loop():
    ctx = ctx_for(
        """
        import torch
        def log(loss):
            marker()
        def evaluate():
            other()
        for epoch in range(3):
            for i, batch in enumerate(loader):
                loss = model(batch)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if i % 100 == 0:
                    log(loss)
            evaluate()
        """
    )
    region = ctx.loops.step_region(marked(ctx))
    assert region is not None and [ctx.code(g.test) for g in region.guards] == ["i % 100 == 0"]
    assert not ctx.loops.per_step(last_call(ctx, "other"))
    assert not ctx.loops.per_step(last_call(ctx, "enumerate"))  # the iterable runs once per epoch


def test_lightning_training_step_runs_every_step_but_is_no_training_loop():
    source = """
        import torch
        import lightning as L

        class Model(L.LightningModule):
            def training_step(self, batch, batch_idx):
                loss = self.compute(batch)
                marker()
                return loss

            def compute(self, batch):
                other()
                return self.net(batch).mean()

            def validation_step(self, batch, batch_idx):
                third()

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters())
        """
    ctx = ctx_for(source)
    assert ctx.loops.training_loops == []
    region = ctx.loops.step_region(marked(ctx))
    assert region.framework and isinstance(region.node, cst.FunctionDef) and region.node.name.value == "training_step"
    assert ctx.loops.per_step(last_call(ctx, "other"))  # a helper of training_step
    assert not ctx.loops.per_step(last_call(ctx, "third"))
    assert lint(source, codes=["ADV301"]) == []  # Lightning zeroes the gradients itself


def test_hf_trainer_subclass_compute_loss_and_callbacks():
    ctx = ctx_for(
        """
        from transformers import Trainer, TrainerCallback
        import pytorch_lightning as pl

        class MyTrainer(Trainer):
            def compute_loss(self, model, inputs, return_outputs=False):
                marker()

        class Logger(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                other()
            def on_epoch_end(self, args, state, control, **kwargs):
                third()

        class Watch(pl.Callback):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                fourth()
        """
    )
    assert ctx.loops.step_region(marked(ctx)).framework
    assert ctx.loops.per_step(last_call(ctx, "other"))
    assert not ctx.loops.per_step(last_call(ctx, "third"))
    assert ctx.loops.per_step(last_call(ctx, "fourth"))


def test_fabric_loop_like_accelerate():
    ctx = ctx_for(
        """
        import torch
        from lightning.fabric import Fabric
        fabric = Fabric(accelerator="cuda", precision="bf16-mixed")
        model, optimizer = fabric.setup(model, optimizer)
        train_loader = fabric.setup_dataloaders(train_loader)
        for batch in train_loader:
            loss = model(batch)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        """
    )
    (loop,) = ctx.loops.training_loops
    assert [e.kind for e in loop.events] == ["backward", "step", "zero_grad"]
    backward = loop.events[0].call
    assert ctx.loops.is_framework(backward.func.value) and ctx.facts.devices.gpu.yes


def test_loader_reaches_the_loop_through_a_parameter():
    ctx = ctx_for(
        """
        import torch
        from torch.utils.data import DataLoader
        def train(model, device, train_loader, optimizer):
            for data, target in train_loader:
                loss = model(data.to(device))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        train_loader = DataLoader(ds, batch_size=64)
        test_loader = DataLoader(ds_test, batch_size=1000)
        for epoch in range(10):
            train(model, device, train_loader, optimizer)
        """
    )
    (loader,) = ctx.facts.loaders.of_training_loops
    assert ctx.code(loader) == "DataLoader(ds, batch_size=64)"


def test_kwargs_dict_updated_with_other_keys_keeps_the_rest():
    # pytorch/examples mnist: the CUDA-only settings are merged in under a condition
    source = """
        import argparse
        import torch
        parser = argparse.ArgumentParser()
        parser.add_argument('--batch-size', type=int, default=50)
        args = parser.parse_args()
        train_kwargs = {'batch_size': args.batch_size}
        if use_cuda:
            cuda_kwargs = {'num_workers': 1, 'pin_memory': True, 'shuffle': True}
            train_kwargs.update(cuda_kwargs)
        train_kwargs["drop_last"] = True
        loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)
        """
    ctx = ctx_for(source)
    (loader,) = ctx.calls("torch.utils.data.DataLoader")
    assert ctx.values.value_of(ctx.argument(loader, "batch_size", 1)) == 50
    assert ctx.argument(loader, "pin_memory", 7) is None  # maybe set by the update
    assert ctx.argument(loader, "drop_last") is None  # written after construction
    assert ctx.argument(loader, "collate_fn", 6) is MISSING
    mutated = source.replace("train_kwargs[\"drop_last\"] = True", "train_kwargs[key] = value")
    ctx = ctx_for(mutated)
    (loader,) = ctx.calls("torch.utils.data.DataLoader")
    assert ctx.argument(loader, "batch_size", 1) is None  # an unknown key may be this one


def test_conditions_of_known_values():
    source = """
    import torch
    device = 'cuda'
    device_type = 'cuda' if 'cuda' in device else 'cpu'
    big = False
    batch = 64 if big else 16
    same = 8 if torch.cuda.is_available() else 8
    unknown = 'cuda' if torch.cuda.is_available() else 'cpu'
    workers = 4 if device == 'cuda' and not big else 0
    none = None
    checked = none is None
    use(device_type, batch, same, unknown, workers, checked, 1 < 2 < 3, big or 'x')
    """
    assert resolved(source) == ["cuda", 16, 8, None, 4, True, True, "x"]


def test_conditions_on_command_line_defaults_are_command_line_defaults():
    source = """
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cuda", action="store_true")
    args = parser.parse_args()
    pin = True if not args.no_cuda else False
    use(pin)
    """
    assert resolved(source) == [True] and origins(source) == ["argparse default"]


@pytest.mark.parametrize(
    "configurator",
    [
        # nanoGPT's configurator.py inlined
        """for arg in sys.argv[1:]:
    key, val = arg[2:].split('=')
    globals()[key] = literal_eval(val)""",
        "globals().update(load_overrides())",
        # in a function: it runs at a time the file does not show
        """def configure():
    for key, value in parse().items():
        globals()[key] = value""",
    ],
)
def test_configurators_that_write_globals(configurator):
    source = "import sys\nbatch_size = 12\n" + configurator + "\ndef f():\n    use(batch_size)\n"
    assert origins(source) == ["argparse default"]


def test_fire_parameters_are_command_line_defaults():
    source = """
    import os
    import fire

    def helper(batch_size=8):
        other(batch_size)

    def train(batch_size: int = 128, micro_batch_size: int = 4, base_model: str = ""):
        gradient_accumulation_steps = batch_size // micro_batch_size
        world_size = int(os.environ.get("WORLD_SIZE", 1))
        if world_size != 1:
            gradient_accumulation_steps = gradient_accumulation_steps // world_size
        use(micro_batch_size, gradient_accumulation_steps, base_model)

    if __name__ == "__main__":
        fire.Fire(train)
        helper(batch_size=64)
    """
    assert resolved(source) == [4, 32, ""]
    assert origins(source) == ["argparse default"] * 3
    assert resolved(source, "other") == [None]  # not run by Fire, and called with another value
    ctx = ctx_for(source)
    described = ctx.values.describe(ctx.values.resolve(last_call(ctx, "use").args[0].value))
    assert described.startswith("the `--micro_batch_size` default at line ")


def test_loader_reaches_a_method_through_its_parameter():
    ctx = ctx_for(
        """
        import torch
        from torch.utils.data import DataLoader
        class Runner:
            def train_epoch(self, loader):
                for x in loader:
                    self.model(x.cuda()).backward()
                    self.optimizer.step()
                    self.optimizer.zero_grad()

            def fit(self, ds):
                train_loader = DataLoader(ds, batch_size=48, shuffle=True)
                for epoch in range(3):
                    self.train_epoch(train_loader)
        """
    )
    (loader,) = ctx.facts.loaders.of_training_loops
    assert ctx.code(loader) == "DataLoader(ds, batch_size=48, shuffle=True)"


# The diffusers / transformers examples: ``def parse_args(input_args=None)`` parses
# ``input_args`` when given and the command line otherwise, and ``main(args)`` gets the result.
DIFFUSERS_ARGS = textwrap.dedent(
    """
    import argparse

    def parse_args(input_args=None):
        parser = argparse.ArgumentParser()
        parser.add_argument("--set_grads_to_none", action="store_true")
        parser.add_argument("--keep_on_gpu", action="store_false")
        parser.add_argument("--dataloader_num_workers", type=int, default=0)
        parser.add_argument("--local_rank", type=int, default=-1)
        if input_args is not None:
            args = parser.parse_args(input_args)
        else:
            args = parser.parse_args()
        env_local_rank = int(os.environ.get("LOCAL_RANK", -1))
        if env_local_rank != -1:
            args.local_rank = env_local_rank
        return args

    def main(args):
        use(args.set_grads_to_none, args.keep_on_gpu, args.dataloader_num_workers, args.local_rank)
    """
)


def test_parameter_that_every_call_gives_the_parsed_command_line():
    source = DIFFUSERS_ARGS + '\nif __name__ == "__main__":\n    args = parse_args()\n    main(args)\n'
    assert resolved(source) == [False, True, 0, None]  # ``local_rank`` is rewritten after parsing
    assert origins(source)[:3] == ["argparse default"] * 3
    assert resolved(DIFFUSERS_ARGS + "\nmain(parse_args())\n") == [False, True, 0, None]
    assert resolved(DIFFUSERS_ARGS + "\nmain(args=parse_args())\n") == [False, True, 0, None]


def test_a_method_of_the_same_name_is_not_a_use_of_the_function():
    # HeaRT's ``def train(model, optimizer, train_loader, args, device)`` calls ``model.train()``:
    # the method is not the function handed around as a value.
    source = DIFFUSERS_ARGS.replace("def main(args):", "def main(model, args):\n    model.main()") + (
        '\nif __name__ == "__main__":\n    args = parse_args()\n    main(net, args)\n'
    )
    assert resolved(source) == [False, True, 0, None]


@pytest.mark.parametrize(
    "caller",
    [
        "main(parse_args(['--set_grads_to_none']))",  # parses a list, not the command line
        "args = parse_args()\nmain(args)\nmain(other)",  # one call passes something else
        "args = parse_args()\nmp.spawn(main, args=(args,))",  # run by another API with other arguments
        "args = parse_args()\nmain(args)\nrunner = main",  # used as a value too
        (
            "args = parse_args()\nargs.set_grads_to_none = True\nargs.keep_on_gpu = False\n"
            "args.dataloader_num_workers = 4\nmain(args)"
        ),
        "main(*sys.argv)",
    ],
)
def test_parameters_given_something_else_stay_unknown(caller):
    assert resolved(DIFFUSERS_ARGS + "\n" + caller + "\n") == [None, None, None, None]


def test_adv304_reads_the_store_true_default_through_main_args():
    source = DIFFUSERS_ARGS + textwrap.dedent(
        """
        import torch

        def train(args, model, loader, optimizer):
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=args.set_grads_to_none)

        if __name__ == "__main__":
            args = parse_args()
            train(args, model, loader, optimizer)
        """
    )
    (finding,) = lint(source, ["ADV304"])
    assert "the `--set_grads_to_none` default at line 6" in finding.message
    assert finding.fix_applicability is None  # a command-line default: advice only


def test_the_parameter_a_name_is_bound_to_and_where_callers_pass_it():
    """``self`` is taken off only for a method of a class body: not for a function nested in a
    method, and also for a method of a class defined inside a function."""
    ctx = ctx_for(
        """
        def load(path, name):
            return name

        class Model:
            def build(self, name):
                def inner(prefix, name):
                    return name
                return name

        def factory():
            class Local:
                def make(self, name):
                    return name
        """
    )
    returned = [r.value for r in ctx.nodes(cst.Return) if isinstance(r.value, cst.Name)]
    found = {ctx.enclosing(name, cst.FunctionDef).name.value: ctx.parameter_of(name)[2] for name in returned}
    assert found == {"load": 1, "inner": 1, "build": 0, "make": 0}
    local = ctx_for("def f():\n    x = 1\n    return x\n")
    (value,) = [r.value for r in local.nodes(cst.Return)]
    assert local.parameter_of(value) is None


def test_an_override_under_a_flag_that_is_off_by_default_leaves_the_argparse_default():
    """``if args.tiny: args.batch_size = 2`` is what ``--tiny`` asks for, as ``--batch-size 2``
    would be; a flag reassigned under itself (``if args.fp16: args.fp16 = ...``) stays unknown."""
    ctx = ctx_for(
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--batch-size", type=int, default=8)
        parser.add_argument("--tiny", action="store_true")
        parser.add_argument("--fp16", action="store_true")
        parser.add_argument("--lr", type=float, default=0.1)
        args = parser.parse_args()
        if args.tiny:
            args.batch_size = 2
        if args.fp16:
            args.fp16 = available()
        args.lr = args.lr * 2
        print(args.batch_size, args.fp16, args.lr)
        """
    )
    printed = last_call(ctx, "print")
    batch, fp16, lr = (ctx.values.resolve(arg.value) for arg in printed.args)
    assert batch is not None and batch.value == 8 and batch.origin == "argparse default"
    assert fp16 is None
    assert lr is None  # set where every run sets it


def test_a_fallback_to_the_cpu_without_cuda_leaves_the_argparse_default():
    """PFLlib: ``if args.device == "cuda" and not torch.cuda.is_available(): args.device = "cpu"``
    runs only without CUDA; on the GPU machine the fixes are for, the default stands."""
    ctx = ctx_for(
        """
        import argparse
        import torch
        parser = argparse.ArgumentParser()
        parser.add_argument("--device", type=str, default="cuda")
        args = parser.parse_args()
        if args.device == "cuda" and not torch.cuda.is_available():
            args.device = "cpu"
        print(args.device)
        """
    )
    (device,) = (ctx.values.resolve(arg.value) for arg in last_call(ctx, "print").args)
    assert device is not None and device.value == "cuda"
