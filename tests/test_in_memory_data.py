"""ADV105 beyond its own examples: the batch-sampler rewrite yields the same batches (real
torch), the way it spells the samplers, and ADV101-ADV103 staying silent on loaders over
tensors held in memory, where ADV105 is the advice."""
from __future__ import annotations

import textwrap

import pytest

from helpers import fix, lint

torch = pytest.importorskip("torch")

DATA_LOADING = ["ADV101", "ADV102", "ADV103", "ADV104", "ADV105"]


def codes(source: str, selected=DATA_LOADING) -> list[str]:
    return [d.code for d in lint(source, codes=selected)]


def fixed(source: str, selected=("ADV105",)) -> str:
    result = fix(source, codes=list(selected), unsafe=True)
    assert not result.dropped and not result.errors, (result.dropped, result.errors)
    return result.fixed.decode()


# -- the rewrite trains on the same batches -----------------------------------------------------
LOADER_SCRIPT = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    def build(features, labels, flag, g):
        train_set = TensorDataset(features, labels)
        train_loader = DataLoader(train_set, batch_size=4{arguments})
        return train_loader

    def train(model, loader, optimizer):
        for x, y in loader:
            loss = model(x.cuda(), y.cuda())
            loss.backward()
            optimizer.step()
"""


def _batches(source: str, flag: bool, seed: int) -> list[list[torch.Tensor]]:
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "loader.py", "exec"), namespace)
    features = torch.arange(30, dtype=torch.float32).reshape(10, 3)
    labels = torch.arange(10) * 7
    generator = torch.Generator().manual_seed(seed + 1)
    loader = namespace["build"](features, labels, flag, generator)
    torch.manual_seed(seed)
    drawn = []
    for _epoch in range(3):
        drawn.extend(list(batch) for batch in loader)
    return drawn


@pytest.mark.parametrize("shuffle", [None, "True", "False", "flag"])
@pytest.mark.parametrize("drop_last", [None, "True", "False"])
@pytest.mark.parametrize("generator", [False, True])
def test_batch_sampler_rewrite_yields_the_same_batches(shuffle, drop_last, generator):
    arguments = ""
    if shuffle is not None:
        arguments += f", shuffle={shuffle}"
    if drop_last is not None:
        arguments += f", drop_last={drop_last}"
    if generator:
        arguments += ", generator=g"
    source = LOADER_SCRIPT.format(arguments=arguments)
    assert "ADV105" in codes(source)
    rewritten = fixed(source)
    assert "batch_size=None" in rewritten and "BatchSampler(" in rewritten
    assert "shuffle=" not in rewritten.split("BatchSampler(")[1] and "drop_last=True, batch_size=None" not in rewritten
    for flag in (True, False):
        for seed in (0, 3):
            before, after = _batches(source, flag, seed), _batches(rewritten, flag, seed)
            assert len(before) == len(after)
            for old, new in zip(before, after):
                assert type(old) is type(new)
                assert len(old) == len(new)
                for a, b in zip(old, new):
                    assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_rewrite_with_workers_yields_the_same_batches():
    source = LOADER_SCRIPT.format(arguments=", shuffle=True, drop_last=True, num_workers=2, generator=g")
    rewritten = fixed(source)
    before, after = _batches(source, True, 5), _batches(rewritten, True, 5)
    assert [[t.tolist() for t in b] for b in before] == [[t.tolist() for t in b] for b in after]


# -- how the samplers are spelled ---------------------------------------------------------------
def test_names_join_a_parenthesized_import_one_a_line():
    source = """
        import torch
        from torch.utils.data import (
            DataLoader,
            TensorDataset,
        )
        train_set = TensorDataset(x, y)
        train_loader = DataLoader(
            train_set,
            batch_size=64,  # per GPU
            shuffle=True,
            pin_memory=False,
        )
        model.cuda()
    """
    assert fixed(source) == textwrap.dedent(
        """
        import torch
        from torch.utils.data import (
            DataLoader,
            TensorDataset,
            BatchSampler,
            RandomSampler,
        )
        train_set = TensorDataset(x, y)
        train_loader = DataLoader(
            train_set,
            sampler=BatchSampler(RandomSampler(train_set), batch_size=64, drop_last=False),
            batch_size=None,  # per GPU
            pin_memory=False,
        )
        model.cuda()
        """
    )


def test_names_the_file_imports_are_used_as_they_are():
    source = """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from torch.utils.data.sampler import BatchSampler as Batches, SequentialSampler
        train_set = TensorDataset(x, y)
        train_loader = DataLoader(train_set, batch_size=64)
        model.cuda()
    """
    assert fixed(source) == textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from torch.utils.data.sampler import BatchSampler as Batches, SequentialSampler
        train_set = TensorDataset(x, y)
        train_loader = DataLoader(train_set, sampler=Batches(SequentialSampler(train_set), batch_size=64, drop_last=False), batch_size=None)
        model.cuda()
        """
    )


def test_a_name_the_file_binds_otherwise_is_not_imported_over_it():
    source = """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from mylib import RandomSampler
        train_set = TensorDataset(x, y)
        train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
        model.cuda()
    """
    out = fixed(source)
    assert "sampler=torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(train_set)" in out
    assert "from torch.utils.data import DataLoader, TensorDataset\n" in out


def test_two_training_loaders_are_both_rewritten():
    source = """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        train_a = TensorDataset(x, y)
        train_b = TensorDataset(u, v)
        train_loader_a = DataLoader(train_a, batch_size=64, shuffle=True)
        train_loader_b = DataLoader(train_b, batch_size=32)
        model.cuda()
    """
    out = fixed(source)
    assert "from torch.utils.data import DataLoader, TensorDataset, BatchSampler, RandomSampler, SequentialSampler\n" in out
    assert out.count("batch_size=None") == 2
    compile(out, "fixed.py", "exec")


@pytest.mark.parametrize(
    "loader",
    [
        "DataLoader(train_set, 64, True)",  # positional: they would shift
        "DataLoader(train_set, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(0))",
        "DataLoader(make_set(x, y), batch_size=64, shuffle=True)",  # a call: it would build the data twice
        "DataLoader(train_set, batch_size=64, shuffle=True, **extra)",
    ],
)
def test_advice_only_where_the_rewrite_would_change_evaluation(loader):
    source = f"""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        train_set = TensorDataset(x, y)

        def make_set(features, labels):
            return TensorDataset(features, labels)

        train_loader = {loader}
        model.cuda()
    """
    found = [d for d in lint(source, codes=["ADV105"])]
    if "**extra" in loader:
        assert found == []  # ``**extra`` may hold a collate_fn or a batch_sampler
        return
    assert len(found) == 1 and found[0].fix_applicability in (None, "none"), found
    assert fixed(source) == textwrap.dedent(source)


def test_a_loader_accelerate_prepares_gets_advice_only():
    source = """
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, TensorDataset
        accelerator = Accelerator()
        train_set = TensorDataset(x, y)
        train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
        model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
        for x, y in train_loader:
            loss = model(x, y)
            accelerator.backward(loss)
            optimizer.step()
    """
    found = lint(source, codes=["ADV105"])
    assert [d.code for d in found] == ["ADV105"]
    assert fixed(source) == textwrap.dedent(source)


# -- ADV101-ADV103 stay silent where ADV105 is the advice ---------------------------------------
IN_MEMORY_LOOP = """
    import torch
    from torch.utils.data import DataLoader, Dataset, TensorDataset

    class Blocks(Dataset):
        def __init__(self, tokens, block):
            self.tokens, self.block = tokens, block
        def __len__(self):
            return len(self.tokens) // self.block
        def __getitem__(self, i):
            return self.tokens[i * self.block : (i + 1) * self.block].long()

    def main():
        device = torch.device("cuda")
        train_loader = DataLoader({dataset}, batch_size=64, shuffle=True{pin})
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = model(x, y)
            loss.backward()
            optimizer.step()

    if __name__ == "__main__":
        main()
"""


@pytest.mark.parametrize("dataset", ["TensorDataset(features, labels)", "Blocks(tokens, 256)"])
def test_pinning_workers_and_non_blocking_are_silent_on_in_memory_tensors(dataset):
    source = IN_MEMORY_LOOP.format(dataset=dataset, pin="")
    assert codes(source) == ["ADV105"]


@pytest.mark.parametrize("dataset", ["TensorDataset(features, labels)", "Blocks(tokens, 256)"])
def test_explicit_pin_memory_false_is_not_reversed_on_in_memory_tensors(dataset):
    source = IN_MEMORY_LOOP.format(dataset=dataset, pin=", pin_memory=False")
    assert codes(source) == ["ADV105"]


def test_a_pinned_in_memory_loader_still_gets_non_blocking_copies():
    source = IN_MEMORY_LOOP.format(dataset="TensorDataset(features, labels)", pin=", pin_memory=True")
    assert sorted(codes(source)) == ["ADV103", "ADV103", "ADV105"]


def test_tensors_unpacked_from_the_dataset_and_a_raise_still_only_index():
    # egnn's NBodyDataset: `loc, vel = self.data`, then `loc[i]`, and a `raise Exception(...)`
    # for an unknown partition name: no I/O per item.
    source = IN_MEMORY_LOOP.replace(
        "return self.tokens[i * self.block : (i + 1) * self.block].long()",
        "tokens, block = self.tokens, self.block\n"
        "            if block <= 0:\n"
        "                raise Exception('Wrong block %s' % block)\n"
        "            return tokens[i * block : (i + 1) * block].long()",
    ).replace("self.tokens, self.block = tokens, block", "self.tokens, self.block = tokens, block\n            self.data = (tokens, block)")
    assert codes(source.format(dataset="Blocks(tokens, 256)", pin="")) == ["ADV105"]
    unpacked = source.replace("tokens, block = self.tokens, self.block", "tokens, block = self.data")
    assert codes(unpacked.format(dataset="Blocks(tokens, 256)", pin="")) == ["ADV105"]


def test_data_read_per_item_is_still_pinned():
    source = IN_MEMORY_LOOP.replace(
        "return self.tokens[i * self.block : (i + 1) * self.block].long()",
        "return torch.load(self.files[i])",
    ).format(dataset="Blocks(tokens, 256)", pin="")
    found = lint(source, codes=DATA_LOADING)
    assert sorted({d.code for d in found}) == ["ADV101", "ADV102", "ADV103"]
    # No workers: pinning and the non-blocking copies are advice until they come.
    assert all(d.fix_applicability is None for d in found if d.code in ("ADV101", "ADV103"))
    with_workers = source.replace("shuffle=True)", "shuffle=True, num_workers=4)")
    result = fixed(with_workers, selected=DATA_LOADING)
    assert "num_workers=4, pin_memory=True)" in result and "x.to(device, non_blocking=True)" in result


def test_a_training_loader_wrapped_in_cycle_is_known_by_its_name():
    source = """
        import torch
        from torch.utils.data import DataLoader, Dataset

        class TextSampler(Dataset):
            def __init__(self, data, seq_len):
                self.data, self.seq_len = data, seq_len
            def __len__(self):
                return self.data.size(0) // self.seq_len
            def __getitem__(self, index):
                start = torch.randint(0, self.data.size(0) - self.seq_len - 1, (1,))
                return self.data[start : start + self.seq_len + 1].long()

        def cycle(loader):
            while True:
                yield from loader

        train_loader = cycle(DataLoader(TextSampler(data_train, 1024), batch_size=4, drop_last=True))
        val_loader = cycle(DataLoader(TextSampler(data_val, 1024), batch_size=4, drop_last=True))
        model = model.cuda()
        for step in range(100):
            loss = model(next(train_loader).cuda())
            loss.backward()
            optim.step()
    """
    found = lint(source, codes=DATA_LOADING)
    assert [(d.code, d.line) for d in found] == [("ADV105", 18)]


def test_a_tensor_handed_to_the_loader_as_its_data_set_is_in_memory():
    # ULTRA's `DataLoader(torch.cat([data.target_edge_index, ...]).t(), batch_size, sampler=...)`
    # over a graph the caller moved to the GPU: pinning such a batch raises, workers cannot use CUDA.
    source = IN_MEMORY_LOOP.format(dataset="torch.cat([edges, types.unsqueeze(0)]).t()", pin="")
    found = lint(source, codes=DATA_LOADING)
    assert [d.code for d in found] == ["ADV105"]
    assert "in-memory tensor one sample" in found[0].message


def test_a_loader_read_once_into_a_list_collates_once():
    # SpanBERT's run_squad.py: train_batches = [batch for batch in train_dataloader], then
    # every epoch shuffles and iterates the list.
    source = """
        import random
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        def main():
            model.cuda()
            train_data = TensorDataset(all_input_ids, all_input_mask, all_labels)
            train_dataloader = DataLoader(train_data, batch_size=32)
            train_batches = [batch for batch in train_dataloader]
            steps = len(train_dataloader) * epochs
            for epoch in range(epochs):
                random.shuffle(train_batches)
                for step, batch in enumerate(train_batches):
                    loss = model(*[t.cuda() for t in batch])
                    loss.backward()
                    optimizer.step()

        if __name__ == "__main__":
            main()
    """
    assert "ADV105" not in [d.code for d in lint(source, gpu="A100")]
    iterated = source.replace("for step, batch in enumerate(train_batches):", "for step, batch in enumerate(train_dataloader):")
    assert "ADV105" in [d.code for d in lint(iterated, gpu="A100")]
