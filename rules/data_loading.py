"""ADV1xx: data loading (guide: "Data preloading")."""
from __future__ import annotations

from typing import Iterator

import libcst as cst

from advisor.context import MISSING, FileContext
from advisor.edits import set_keyword
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid

DATALOADER = "torch.utils.data.DataLoader"
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
POSITION = {"batch_size": 1, "num_workers": 5, "pin_memory": 7}


def dataset_on_gpu(ctx: FileContext, call: cst.Call) -> bool:
    """Whether the loader's dataset is built from tensors already on the GPU (pinning them fails)."""
    dataset = ctx.argument(call, "dataset", 0)
    if dataset is None or dataset is MISSING:
        return False
    definition = ctx.bound_call(dataset) if isinstance(dataset, cst.Name) else dataset
    if definition is None:
        return False
    for inner in ctx.walk(definition, cst.Call):
        func = inner.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("cuda", "to"):
            return True
    for name in ctx.walk(definition, cst.Name):
        bound = ctx.bound_call(name)
        if bound is not None and isinstance(bound.func, cst.Attribute) and bound.func.attr.value in ("cuda", "to"):
            return True
    return False


class DataLoaderPinMemory(Rule):
    code = "ADV101"
    name = "dataloader-pin-memory"
    summary = "A DataLoader feeding a CUDA model does not pin its host memory."
    guide = "Data preloading"
    fix_applicability = Applicability.SAFE
    why = """
        Batches produced in pageable host memory must be staged through a pinned buffer
        before the GPU can copy them, and the copy cannot overlap compute. The guide's
        *Data preloading* section: `DataLoader(pin_memory=True, ...)` "ensures the data
        gets preloaded into the pinned memory on CPU and typically leads to much faster
        transfers from CPU to GPU memory". Pinned batches also make
        `.to(device, non_blocking=True)` truly asynchronous (see ADV103).
    """
    example = """
        loader = DataLoader(dataset, batch_size=64, shuffle=True)
        for x, y in loader:
            x, y = x.to("cuda"), y.to("cuda")
    """
    use_instead = """
        loader = DataLoader(dataset, batch_size=64, shuffle=True, pin_memory=True)
    """
    silent_when = """
        - the file shows no CUDA device at all (CPU-only scripts);
        - `pin_memory` is passed in a way that cannot be read (`**kwargs` built at run
          time, a value from the command line);
        - the dataset is built from tensors that are already on the GPU.
    """
    valid = [
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=8, pin_memory=True)
            model = model.cuda()
            """
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=8)
            model = model.to("cpu")
            """,
            note="CPU-only script",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            kwargs = {"batch_size": 8}
            kwargs.update(extra)
            loader = DataLoader(ds, **kwargs)
            model = model.cuda()
            """,
            note="kwargs dict changed at run time: unknown",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            kwargs = {"batch_size": 8, "pin_memory": True}
            loader = DataLoader(ds, **kwargs)
            model = model.cuda()
            """,
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            ds = TensorDataset(x.cuda(), y.cuda())
            loader = DataLoader(ds, batch_size=8)
            """,
            note="data already on the GPU: pinning would fail",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=8, shuffle=True)
            device = torch.device("cuda")
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=8, shuffle=True, pin_memory=True)
            device = torch.device("cuda")
            """,
        ),
        Invalid(
            """
            import torch.utils.data as tud
            loader = tud.DataLoader(
                ds,
                batch_size=8,
            )
            x = x.cuda()
            """,
            fixed="""
            import torch.utils.data as tud
            loader = tud.DataLoader(
                ds,
                batch_size=8,
                pin_memory=True,
            )
            x = x.cuda()
            """,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader as DL
            loader = DL(ds, pin_memory=False)
            model.to("cuda:0")
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader as DL
            loader = DL(ds, pin_memory=True)
            model.to("cuda:0")
            """,
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.uses_cuda:
            return
        for call in ctx.calls(DATALOADER):
            pin = ctx.argument(call, "pin_memory", POSITION["pin_memory"])
            if pin is None or dataset_on_gpu(ctx, call):
                continue
            if pin is MISSING:
                message = "DataLoader without `pin_memory=True`: batches are copied to the GPU from pageable memory"
            else:
                value = ctx.values.resolve(pin)
                if value is None or value.value is not False or value.origin == "argparse default":
                    continue
                if ctx.keyword_arg(call, "pin_memory") is None:
                    continue  # set through **kwargs: advice only would need the dict edited
                message = "DataLoader with `pin_memory=False` on a CUDA script: pinned batches transfer faster"
            fix = self.fix("Set `pin_memory=True`", Edit(call, set_keyword(call, "pin_memory", "True")))
            yield self.report(call, message + " (guide: Data preloading)", fix)
