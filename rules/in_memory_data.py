"""ADV105: a training DataLoader that indexes tensors held in memory one sample at a time
(guide: "Data preloading"; ADV101-ADV104 are in ``data_loading.py``)."""
from __future__ import annotations

from typing import Iterator

import libcst as cst

from advisor.apis import DATALOADER, DATALOADER_POSITION
from advisor.context import MISSING, FileContext
from advisor.edits import keyword_arg, remove_keyword
from advisor.names import canonical, dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid

GUIDE = "Data preloading"
_DATA = "torch.utils.data"
BATCH_SAMPLERS = (f"{_DATA}.BatchSampler", f"{_DATA}.sampler.BatchSampler")
# Samplers known to yield one index at a time: a BatchSampler around one gives whole batches.
PER_SAMPLE_SAMPLERS = frozenset(
    f"{_DATA}.{module}{name}"
    for module in ("", "sampler.")
    for name in ("RandomSampler", "SequentialSampler", "SubsetRandomSampler", "WeightedRandomSampler")
) | {f"{_DATA}.DistributedSampler", f"{_DATA}.distributed.DistributedSampler"}
# The arguments the rewrite moves into the BatchSampler or drops; positional, they would shift.
_MOVED = ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last", "generator")


class InMemoryDatasetPerSample(Rule):
    code = "ADV105"
    name = "in-memory-dataset-per-sample"
    summary = "A training DataLoader indexes and collates tensors held in memory one sample at a time."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        With a `batch_size`, a DataLoader asks its dataset for one sample at a time and
        stacks them with `default_collate`: a batch of 512 is 512 `__getitem__` calls and a
        `torch.stack` per field, in Python, on every step. When the data is already in
        memory as tensors (a `TensorDataset`, or a dataset whose `__getitem__` only indexes
        tensors it holds) that Python work is the whole cost of loading, and it runs in the
        training process while the GPU waits. The guide's *Data preloading* section is about
        feeding the GPU "at the maximum speed it can handle"; its remedies, pinned memory and
        worker processes, target data read from disk. They do not pay here: the batch is in
        RAM already, a pinning thread copies it once more while competing for the GIL with the
        per-sample indexing, and workers ship every batch back to the main process through
        shared memory (ADV101 and ADV102 stay silent on such loaders). A benchmark MLP trained
        from an in-memory `TensorDataset` (batch 512, most of its 11 ms step spent indexing and
        collating) ran 0.60x as fast on an H200 once pinning, `non_blocking` copies, compile,
        fused AdamW and bf16 were added to it: the per-sample loading stayed, and the pinning
        thread competed with it.

        What pays is indexing whole batches: `TensorDataset.__getitem__` returns
        `tuple(t[index] for t in tensors)`, so a list of indices gives a whole batch in one
        advanced-indexing operation per tensor. A `BatchSampler` passed as `sampler=` with
        `batch_size=None` turns automatic batching off, and the loader then calls
        `dataset[list_of_indices]` once per step. Or move the tensors to the GPU once, before
        training, and index them there.
    """
    example = """
        train_set = TensorDataset(features, labels)
        loader = DataLoader(train_set, batch_size=512, shuffle=True, drop_last=True)
        for x, y in loader:
            loss = loss_fn(model(x.cuda()), y.cuda())
    """
    use_instead = """
        train_set = TensorDataset(features, labels)
        loader = DataLoader(
            train_set,
            sampler=BatchSampler(RandomSampler(train_set), batch_size=512, drop_last=True),
            batch_size=None,
        )
    """
    fix_notes = """
        The fix is offered for a `TensorDataset` (it accepts a list of indices) named by a
        plain name, with the default `collate_fn` and no sampler of its own, in a loader that
        Accelerate or Fabric does not `prepare` and in a file that does not use Lightning
        (they rebuild the loader's sampler): it writes `sampler=BatchSampler(RandomSampler(ds), batch_size=B, drop_last=D)`
        (`SequentialSampler(ds)` without `shuffle`; `RandomSampler(ds) if flag else
        SequentialSampler(ds)` for `shuffle=flag`), `batch_size=None`, and drops `shuffle=` and
        `drop_last=`; a `generator=` is passed to the `RandomSampler` too and stays on the
        loader (which draws its workers' base seed from it first, as before). The batches
        are the same tensors in the same order for the same seed, with workers or without,
        and still lists (`default_convert` turns the tuple `TensorDataset` returns into a
        list, as `default_collate` does): the DataLoader builds exactly this `RandomSampler`
        and `BatchSampler` itself. The fix is **unsafe** because
        the loader's attributes change: `loader.batch_size` is `None` and `loader.sampler` is
        the `BatchSampler` (`len(loader.sampler)` counts batches, not samples).

        Advice only, saying what to do, for a dataset class of the file (its `__getitem__`
        may not accept a list: make it, then use the same sampler; one that copies each item
        to the GPU needs its data moved there once, or the copy made per batch), a dataset
        that is not a plain name (a call in the `DataLoader(...)` itself: the rewrite would
        evaluate it twice), a sampler of the loader's own (wrap it in a `BatchSampler`), and
        arguments passed positionally or whose values hold calls.
    """
    silent_when = """
        - the file shows no GPU, or the loader does not feed training (an evaluation loader,
          a Lightning test loader the file never runs);
        - the dataset is not tensors held in memory: files or images read and decoded in
          `__getitem__`, a tokenizer or transform per item, an `IterableDataset`;
        - the dataset holds GPU tensors (a `TensorDataset` of CUDA tensors, a class of the
          file that keeps its data on the GPU: ADV101's facts), or a `collate_fn` moves the
          batch there. A dataset class whose `__getitem__` indexes tensors held in host
          memory and then moves each item to the GPU itself (`return self.data[i:j].cuda()`)
          is reported: one small copy per sample, and the batch stacked on the GPU;
        - batches are not made one sample at a time: `batch_size=None`, `batch_size=1` (or
          missing: 1 is the default), a `batch_sampler=`, or a `sampler=` that is already a
          `BatchSampler`; a sampler or batch size the file does not show (`**kwargs`);
        - a `collate_fn=` is given: a custom collate expects a list of samples (and often pads
          samples of different lengths, which one indexing operation cannot batch);
          rewriting it is the author's work, and advice that cannot be followed as it is
          would be noise;
        - the loader is read once into a list that the training loop iterates (SpanBERT's
          `train_batches = [batch for batch in train_dataloader]`): it collates once, not
          every step;
        - the dataset is indices (`TensorDataset(torch.arange(n))`, BertGCN's index loaders): the
          step reads the data by them, and collating a few integers costs next to nothing beside it.
    """
    valid = [
        Valid(
            """
            import torch
            import torch.utils.data as Data

            train_idx = Data.TensorDataset(torch.arange(0, nb_train, dtype=torch.long))
            idx_loader_train = Data.DataLoader(train_idx, batch_size=64, shuffle=True)
            model = BertGCN().cuda()
            optimizer = torch.optim.Adam(model.parameters())
            for (idx,) in idx_loader_train:
                loss = model(graph, idx.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="a loader of indices into a graph the step reads: BertGCN",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            train_set = TensorDataset(torch.randn(1024, 16), torch.randint(0, 2, (1024,)))
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
            model = model.to("cpu")
            """,
            note="CPU-only script",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            train_set = TensorDataset(features, labels)
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True, collate_fn=pad_batch)
            model.cuda()
            """,
            note="a custom collate_fn expects a list of samples",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset
            train_set = TensorDataset(features, labels)
            train_loader = DataLoader(train_set, batch_sampler=BatchSampler(RandomSampler(train_set), 64, False))
            model.cuda()
            """,
            note="a batch_sampler: batches of indices, still collated per sample, but the author chose the batching",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset
            train_set = TensorDataset(features, labels)
            sampler = BatchSampler(RandomSampler(train_set), batch_size=64, drop_last=True)
            train_loader = DataLoader(train_set, sampler=sampler, batch_size=None)
            model.cuda()
            """,
            note="whole batches already",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            train_set = TensorDataset(features, labels)
            train_loader = DataLoader(train_set, shuffle=True)
            model.cuda()
            """,
            note="batch_size 1 (the default): one sample is the batch",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, IterableDataset

            class Stream(IterableDataset):
                def __init__(self, tokens):
                    self.tokens = tokens
                def __iter__(self):
                    for i in range(0, len(self.tokens), 128):
                        yield self.tokens[i : i + 128]

            train_loader = DataLoader(Stream(tokens), batch_size=32)
            model.cuda()
            """,
            note="an iterable dataset cannot be indexed",
        ),
        Valid(
            """
            import torch
            from PIL import Image
            from torch.utils.data import DataLoader, Dataset

            class Images(Dataset):
                def __init__(self, paths, labels):
                    self.paths, self.labels = paths, labels
                def __len__(self):
                    return len(self.paths)
                def __getitem__(self, i):
                    image = Image.open(self.paths[i]).convert("RGB")
                    return transform(image), self.labels[i]

            train_loader = DataLoader(Images(paths, labels), batch_size=64, shuffle=True)
            model.cuda()
            """,
            note="files decoded per item: workers and pinning pay there (ADV101, ADV102)",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            train_set = TensorDataset(features.cuda(), labels.cuda())
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
            """,
            note="the tensors are on the GPU already",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset

            class TextSampler(Dataset):
                def __init__(self, data, seq_len):
                    self.data, self.seq_len = data, seq_len
                def __len__(self):
                    return self.data.size(0) // self.seq_len
                def __getitem__(self, index):
                    start = index * self.seq_len
                    return self.data[start : start + self.seq_len + 1].long().cuda()

            train_loader = DataLoader(TextSampler(tokens.cuda(), 1024), batch_size=16, shuffle=True)
            """,
            note="the data handed to the dataset is on the GPU already: its `.cuda()` copies nothing",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            val_set = TensorDataset(features, labels)
            val_loader = DataLoader(val_set, batch_size=256)
            model.cuda()
            with torch.no_grad():
                for x, y in val_loader:
                    correct += (model(x.cuda()).argmax(1) == y.cuda()).sum()
            """,
            note="an evaluation loader",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            train_set = TensorDataset(features, labels)
            train_loader = DataLoader(train_set, batch_size=512, shuffle=True, drop_last=True)
            for x, y in train_loader:
                loss = loss_fn(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader, TensorDataset, BatchSampler, RandomSampler

            train_set = TensorDataset(features, labels)
            train_loader = DataLoader(train_set, sampler=BatchSampler(RandomSampler(train_set), batch_size=512, drop_last=True), batch_size=None)
            for x, y in train_loader:
                loss = loss_fn(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch

            def train(model, features, labels, args):
                dataset = torch.utils.data.TensorDataset(features, labels)
                loader = torch.utils.data.DataLoader(
                    dataset,
                    batch_size=args.batch_size,
                    num_workers=2,
                )
                for x, y in loader:
                    loss = model(x.to("cuda"), y.to("cuda"))
                    loss.backward()
                    optimizer.step()
            """,
            fixed="""
            import torch

            def train(model, features, labels, args):
                dataset = torch.utils.data.TensorDataset(features, labels)
                loader = torch.utils.data.DataLoader(
                    dataset,
                    sampler=torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(dataset), batch_size=args.batch_size, drop_last=False),
                    batch_size=None,
                    num_workers=2,
                )
                for x, y in loader:
                    loss = model(x.to("cuda"), y.to("cuda"))
                    loss.backward()
                    optimizer.step()
            """,
            note="no `shuffle`: the samples in order; the file's `torch.utils.data` spelling",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            g = torch.Generator().manual_seed(0)
            train_set = TensorDataset(x_train, y_train)
            train_loader = DataLoader(train_set, batch_size=128, shuffle=args.shuffle, generator=g)
            model = Net().cuda()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader, TensorDataset, BatchSampler, RandomSampler, SequentialSampler

            g = torch.Generator().manual_seed(0)
            train_set = TensorDataset(x_train, y_train)
            train_loader = DataLoader(train_set, sampler=BatchSampler(RandomSampler(train_set, generator=g) if args.shuffle else SequentialSampler(train_set), batch_size=128, drop_last=False), batch_size=None, generator=g)
            model = Net().cuda()
            """,
            note="`shuffle` from the command line, a `generator`",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset

            class TokenBlocks(Dataset):
                def __init__(self, tokens, block):
                    self.tokens, self.block = tokens, block
                def __len__(self):
                    return (len(self.tokens) - 1) // self.block
                def __getitem__(self, i):
                    chunk = self.tokens[i * self.block : (i + 1) * self.block + 1]
                    return chunk[:-1].long(), chunk[1:].long()

            train_loader = DataLoader(TokenBlocks(tokens, 256), batch_size=32, shuffle=True)
            model = GPT(config).to("cuda")
            """,
            note="a dataset class of the file: its `__getitem__` takes one index; advice only",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset

            class TextSampler(Dataset):
                def __init__(self, data, seq_len):
                    self.data, self.seq_len = data, seq_len
                def __len__(self):
                    return self.data.size(0) // self.seq_len
                def __getitem__(self, index):
                    start = torch.randint(0, self.data.size(0) - self.seq_len - 1, (1,))
                    return self.data[start : start + self.seq_len + 1].long().cuda()

            train_loader = DataLoader(TextSampler(data_train, 1024), batch_size=16, drop_last=True)
            """,
            note="each sample copied to the GPU by `__getitem__`: advice only",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

            train_set = TensorDataset(features, labels)
            sampler = DistributedSampler(train_set)
            train_loader = DataLoader(train_set, batch_size=64, sampler=sampler)
            model = model.cuda()
            """,
            note="a sampler of its own: wrap it in a BatchSampler; advice only",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            train_loader = DataLoader(TensorDataset(features, labels), batch_size=64, shuffle=True)
            model = model.cuda()
            """,
            note="the dataset is built in the call: the rewrite would build it twice; advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.calls(DATALOADER) or not ctx.facts.devices.gpu.yes:
            return
        loaders = ctx.facts.loaders
        for call in ctx.calls(DATALOADER):
            copies = loaders.copies_items_to_gpu(call)
            if not (copies or loaders.in_memory(call)) or not loaders.is_training(call):
                continue
            if (loaders.dataset_on_gpu(call) and not copies) or loaders.unused_lightning_loader(call):
                continue
            if loaders.index_dataset(call):
                continue  # BertGCN's ``TensorDataset(torch.arange(n))``: indices, read by a heavy step
            if not loaders.runs_for_training(call):
                continue
            if self._read_once_into_a_list(ctx, call):
                continue
            size = self._per_sample_batch(ctx, call)
            if size is None:
                continue
            sampler = ctx.argument(call, "sampler", DATALOADER_POSITION["sampler"])
            own_sampler = sampler is not MISSING and not _is_none(sampler)
            if own_sampler and not self._per_sample_sampler(ctx, sampler):
                continue
            batches = f"batches of {size}" if size else "every batch"
            order = "RandomSampler(ds)" if _needs_random(ctx, call) else "SequentialSampler(ds)"
            sampler_text = f"BatchSampler({'sampler' if own_sampler else order}, ...)"
            if copies:
                message = (
                    f"Training DataLoader calls {_getitem_of(ctx, call)}, which indexes tensors it holds in host "
                    f"memory and copies each sample to the GPU on its own, then stacks {batches} there "
                    f"on every step; move the tensors to the GPU once and index whole batches there, or index "
                    f"whole batches on the host (`sampler={sampler_text}`, `batch_size=None`) and copy each batch "
                    f"once (guide: {GUIDE})"
                )
                yield self.report(call, message)
                continue
            if loaders.in_memory_tensors(call):
                dataset = "tensor" if loaders.plain_tensor_dataset(call) else "`TensorDataset`"
                what = f"indexes its in-memory {dataset} one sample at a time"
                how = f"index whole batches with `sampler={sampler_text}` and `batch_size=None`"
            else:
                what = f"calls {_getitem_of(ctx, call)}, which only indexes tensors it holds, once per sample"
                how = f"make it accept a list of indices and pass `sampler={sampler_text}` with `batch_size=None`"
            message = (
                f"Training DataLoader {what} and collates {batches} in Python on every step; {how}, or keep the "
                f"tensors on the GPU and index them there (pinning and workers do not pay here) (guide: {GUIDE})"
            )
            fixable = not own_sampler and loaders.in_memory_tensors(call) and not _framework_loader(ctx, call)
            fix = self._fix(ctx, call) if fixable else None
            yield self.report(call, message, fix)

    @staticmethod
    def _read_once_into_a_list(ctx: FileContext, call: cst.Call) -> bool:
        """The loader is drawn from once, into a list the training loop then iterates
        (SpanBERT's ``train_batches = [batch for batch in train_dataloader]``): the per-sample
        collation runs once, not every step."""
        parent = ctx.parent.get(call)
        if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name)):
            return False
        name = parent.targets[0].target.value
        scope = ctx.enclosing(call, cst.FunctionDef) or ctx.module
        listed = False
        for use in ctx.walk(scope, cst.Name):
            if use.value != name or use is parent.targets[0].target:
                continue
            holder = ctx.parent.get(use)
            called = ctx.parent.get(holder) if isinstance(holder, cst.Arg) else None
            function = dotted_name(called.func) if isinstance(called, cst.Call) else None
            if isinstance(holder, cst.CompFor) and holder.iter is use and isinstance(ctx.parent.get(holder), cst.ListComp):
                listed = True
            elif function == "list":
                listed = True
            elif function != "len":
                return False  # iterated in a loop, handed on, or anything else
        return listed

    @staticmethod
    def _per_sample_batch(ctx: FileContext, call: cst.Call) -> int | None:
        """The batch size the loader collates sample by sample (0 when it is not known), None
        where it does not batch that way or the file does not show how it batches."""
        if ctx.argument(call, "batch_sampler", DATALOADER_POSITION["batch_sampler"]) is not MISSING:
            return None  # given (or maybe given, through ``**kwargs``)
        collate = ctx.argument(call, "collate_fn", DATALOADER_POSITION["collate_fn"])
        if collate is not MISSING:
            return None
        expr = ctx.argument(call, "batch_size", DATALOADER_POSITION["batch_size"])
        if expr is None or expr is MISSING:
            return None  # unknown, or the default 1
        value = ctx.values.resolve(expr)
        if value is None:
            return 0
        if type(value.value) is not int or value.value <= 1:
            return None  # ``batch_size=None``, 1
        return value.value

    @staticmethod
    def _per_sample_sampler(ctx: FileContext, sampler: cst.BaseExpression | None) -> bool:
        """A ``sampler=`` known to yield one index at a time (a RandomSampler, a DistributedSampler)."""
        if sampler is None:
            return False
        built = ctx.bound_call(sampler)
        return built is not None and ctx.qualname(built.func) in PER_SAMPLE_SAMPLERS

    def _fix(self, ctx: FileContext, call: cst.Call):
        """The batch-sampler rewrite, where it evaluates nothing twice and moves no positional argument."""
        dataset = ctx.argument(call, "dataset", 0)
        if not isinstance(dataset, cst.Name) or not call.args or call.args[0].value is not dataset:
            return None
        for arg in call.args[1:]:
            if arg.star:
                return None
            if arg.keyword is None:
                return None  # positional: ``DataLoader(ds, 64, True)``
        moved = {k: ctx.keyword_arg(call, k) for k in _MOVED}
        for keyword in ("sampler", "batch_sampler"):
            if moved[keyword] is not None and not _is_none(moved[keyword].value):
                return None
        for keyword in ("batch_size", "shuffle", "drop_last", "generator"):
            if moved[keyword] is not None and ctx.walk(moved[keyword].value, cst.Call):
                return None  # evaluated in another order, or twice (``generator=torch.Generator()``)
        names, edits, imports = _sampler_names(ctx, call)
        data = ctx.code(dataset)
        generator = moved["generator"]
        randomly = f"{names['RandomSampler']}({data}" + (f", generator={ctx.code(generator.value)})" if generator else ")")
        in_order = f"{names['SequentialSampler']}({data})"
        shuffle = moved["shuffle"]
        if shuffle is None or _literal(shuffle.value) in (False, None):
            order = in_order
        elif _literal(shuffle.value) is True:
            order = randomly
        else:
            order = f"{randomly} if {ctx.code(shuffle.value)} else {in_order}"
        drop_last = ctx.code(moved["drop_last"].value) if moved["drop_last"] is not None else "False"
        size = ctx.code(moved["batch_size"].value)  # type: ignore[union-attr]
        sampler = f"{names['BatchSampler']}({order}, batch_size={size}, drop_last={drop_last})"
        updated = call
        for keyword in ("shuffle", "drop_last", "sampler", "batch_sampler"):
            updated = remove_keyword(updated, keyword)
        args = list(updated.args)
        index = next(i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "batch_size")
        original = args[index]
        separator = args[index - 1].comma
        if not isinstance(separator, cst.Comma):
            separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        separator = _plain(separator)
        args[index : index + 1] = [
            keyword_arg("sampler", sampler).with_changes(comma=separator),
            original.with_changes(value=cst.Name("None")),
        ]
        return self.fix(
            "Index whole batches: `sampler=BatchSampler(...)`, `batch_size=None`",
            Edit(call, updated.with_changes(args=args)),
            *edits,
            imports=imports,
            # ``batch_size=None`` turns automatic batching off since torch 1.2; torch 1.0 builds
            # ``BatchSampler(sampler, None, ...)`` from it and raises (DeepBach pins 1.0.0).
            requires=[("torch", "1.2")],
        )


def _getitem_of(ctx: FileContext, call: cst.Call) -> str:
    """```Blocks.__getitem__``` for the dataset class of the file behind the loader."""
    dataset = ctx.argument(call, "dataset", 0)
    sources = ctx.facts.loaders.dataset_sources(dataset) if isinstance(dataset, cst.BaseExpression) else None
    names = sorted({dotted_name(s.func) or "" for s in sources or () if isinstance(s, cst.Call)} - {""})
    return " / ".join(f"`{n}.__getitem__`" for n in names) or "its `__getitem__`"


def _framework_loader(ctx: FileContext, call: cst.Call) -> bool:
    """A loader Accelerate or Fabric prepares, or one in a file that uses Lightning: they rebuild
    the loader's sampler (a ``DistributedSampler`` in place of ``sampler=`` on several devices
    would yield single samples again), so the rewrite is left to the author."""
    loaders = ctx.facts.loaders
    if loaders.handed_to_framework(loaders.name(call)):
        return True
    return any(canonical(target).startswith("lightning") for target in ctx.imports.aliases.values())


def _is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def _literal(expr: cst.BaseExpression) -> object:
    """``True`` / ``False`` / ``None`` written as such; anything else is returned as ``expr``."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    return expr


def _plain(comma: cst.Comma) -> cst.Comma:
    """A separator like ``comma`` without a comment on its line."""
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace) and (after.first_line.comment or after.empty_lines):
        return comma.with_changes(whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[]))
    return comma


_SAMPLER_CLASSES = ("BatchSampler", "RandomSampler", "SequentialSampler")


def _sampler_names(ctx: FileContext, call: cst.Call) -> tuple[dict[str, str], list[Edit], list[str]]:
    """How the fix spells the samplers at ``call``: a name the file already imports
    (``from torch.utils.data import BatchSampler``), else one added to the file's
    ``from torch.utils.data import ...`` at module level, else the dotted path through the
    file's ``import torch`` (``torch.utils.data.BatchSampler``); with the edit to the import
    statement, and the modules the fixer must import."""
    names: dict[str, str] = {}
    imports: list[str] = []
    missing: list[str] = []
    for cls in _SAMPLER_CLASSES:
        local = _imported_name(ctx, f"{_DATA}.{cls}", call)
        if local is not None:
            names[cls] = local
        else:
            missing.append(cls)
    edits: list[Edit] = []
    statement = _from_import(ctx, call) if missing else None
    if statement is not None and all(_unbound(ctx, cls) for cls in missing):
        needed = [cls for cls in missing if cls != "SequentialSampler" or _needs_sequential(ctx, call)]
        needed = [cls for cls in needed if cls != "RandomSampler" or _needs_random(ctx, call)]
        if needed:
            edits.append(Edit(statement, _with_names(statement, needed)))
        for cls in missing:
            names[cls] = cls
    else:
        for cls in missing:
            expr, modules = ctx.reference(f"{_DATA}.{cls}", call)
            names[cls] = ctx.code(expr)
            imports.extend(modules)
    return names, edits, list(dict.fromkeys(imports))


def _needs_random(ctx: FileContext, call: cst.Call) -> bool:
    """Whether the loader may shuffle: ``shuffle=`` given and not written ``False`` / ``None``."""
    shuffle = ctx.argument(call, "shuffle", DATALOADER_POSITION["shuffle"])
    return shuffle is not MISSING and (shuffle is None or _literal(shuffle) not in (False, None))


def _needs_sequential(ctx: FileContext, call: cst.Call) -> bool:
    """Whether the loader may keep the samples in order: ``shuffle=`` missing or not written ``True``."""
    shuffle = ctx.argument(call, "shuffle", DATALOADER_POSITION["shuffle"])
    return shuffle is MISSING or shuffle is None or _literal(shuffle) is not True


def _imported_name(ctx: FileContext, qualname: str, at: cst.CSTNode) -> str | None:
    """The name under which the file imported ``qualname`` itself, where it reaches ``at``."""
    for local, target in ctx.imports.aliases.items():
        if target in (qualname, qualname.replace(f"{_DATA}.", f"{_DATA}.sampler.")) and "." not in local:
            if ctx.imported_at(local, at):
                return local
    return None


def _unbound(ctx: FileContext, name: str) -> bool:
    """No name ``name`` anywhere in the file: importing it cannot shadow anything."""
    return not any(n.value == name for n in ctx.nodes(cst.Name))


def _from_import(ctx: FileContext, call: cst.Call) -> cst.ImportFrom | None:
    """A module-level ``from torch.utils.data import ...`` (names, not ``*``) before ``call``."""
    for statement in ctx.module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if (
                isinstance(small, cst.ImportFrom)
                and not small.relative
                and small.module is not None
                and dotted_name(small.module) == _DATA
                and not isinstance(small.names, cst.ImportStar)
                and ctx.order[small] < ctx.order[call]
            ):
                return small
    return None


def _with_names(statement: cst.ImportFrom, added: list[str]) -> cst.ImportFrom:
    """``statement`` importing ``added`` too, after its own names, in its layout."""
    names = list(statement.names)  # type: ignore[arg-type]
    last = names[-1]
    if isinstance(last.comma, cst.Comma):  # ``(\n    DataLoader,\n)``: one name a line, trailing comma
        previous = names[-2].comma if len(names) > 1 and isinstance(names[-2].comma, cst.Comma) else last.comma
        separator = _plain(previous)
        new = [cst.ImportAlias(name=cst.Name(n), comma=separator) for n in added]
        new[-1] = new[-1].with_changes(comma=last.comma)
        names[-1] = last.with_changes(comma=separator)
    else:
        previous = names[-2].comma if len(names) > 1 and isinstance(names[-2].comma, cst.Comma) else None
        separator = _plain(previous) if previous is not None else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        new = [cst.ImportAlias(name=cst.Name(n), comma=separator) for n in added]
        new[-1] = new[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        names[-1] = last.with_changes(comma=separator)
    return statement.with_changes(names=[*names, *new])
