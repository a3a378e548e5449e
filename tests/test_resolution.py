"""The shared resolvers: qualified names through imports, and values through names."""
from __future__ import annotations

import textwrap

import libcst as cst

from advisor.context import MISSING, FileContext
from advisor.targets import ASSUMED


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
