"""ADV101-ADV104 beyond their own examples: linking loaders to loops, process-model
safety of the worker fixes, and how the data-loading fixes combine."""
from __future__ import annotations

import textwrap

from helpers import fix, lint

DATA_LOADING = ["ADV101", "ADV102", "ADV103", "ADV104"]


def codes(source: str, selected=DATA_LOADING) -> list[str]:
    return [d.code for d in lint(source, codes=selected)]


def fixed(source: str, selected=DATA_LOADING) -> str:
    """As ``fix --verify --unsafe-fixes`` patches the script: workers are a measured fix."""
    result = fix(source, codes=selected, unsafe=True, measured=True)
    assert not result.dropped, result.dropped
    return result.fixed.decode()


# -- ADV102 ------------------------------------------------------------------------------------
def test_evaluation_loaders_are_not_training_loaders():
    source = """
        import torch
        from torch.utils.data import DataLoader

        def main():
            val_loader = DataLoader(val_set, batch_size=64)
            test_loader = DataLoader(test_set, batch_size=64, shuffle=True)
            predict_dataloader = DataLoader(ds, batch_size=64)
            model.cuda()

        if __name__ == "__main__":
            main()
    """
    assert codes(source, ["ADV102"]) == []


def test_loader_iterated_by_training_loop_is_training_even_with_a_neutral_name():
    source = """
        import torch
        from torch.utils.data import DataLoader

        def main():
            loader = DataLoader(ds, batch_size=64)
            for x, y in loader:
                loss = model(x.cuda()).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()

        if __name__ == "__main__":
            main()
    """
    assert codes(source, ["ADV102"]) == ["ADV102"]


def test_loader_on_self_attribute_and_lightning_hook():
    source = """
        import lightning.pytorch as pl
        from torch.utils.data import DataLoader

        class Data(pl.LightningDataModule):
            def train_dataloader(self):
                return DataLoader(self.train_set, batch_size=32)

            def val_dataloader(self):
                return DataLoader(self.val_set, batch_size=32)

        if __name__ == "__main__":
            pl.Trainer(accelerator="gpu").fit(Model(), Data())
    """
    found = lint(source, codes=["ADV102"])
    assert [d.line for d in found] == [7]
    assert "num_workers=4" in fixed(source, ["ADV102"])


def test_module_level_loader_gets_advice_even_with_a_main_guard():
    # Spawned workers re-import the script: a loader built at import time is rebuilt in each.
    source = """
        import torch
        from torch.utils.data import DataLoader

        train_loader = DataLoader(train_set, batch_size=64, shuffle=True)

        def main():
            model.cuda()

        if __name__ == "__main__":
            main()
    """
    (finding,) = lint(source, codes=["ADV102"])
    assert "__main__" in finding.message
    assert finding.fix_applicability is None
    assert fixed(source, ["ADV102"]) == textwrap.dedent(source)


def test_loader_inside_main_guard_is_fixed():
    source = """
        import torch
        from torch.utils.data import DataLoader

        if __name__ == "__main__":
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True, persistent_workers=False)
            model.cuda()
    """
    assert "DataLoader(train_set, batch_size=64, shuffle=True, persistent_workers=False, num_workers=4)" in fixed(
        source, ["ADV102"]
    )


def test_constant_zero_is_advice_not_a_rewrite_of_the_call():
    source = """
        import torch
        from torch.utils.data import DataLoader

        NUM_WORKERS = 0

        def main():
            train_loader = DataLoader(train_set, batch_size=64, num_workers=NUM_WORKERS)
            model.cuda()

        if __name__ == "__main__":
            main()
    """
    (finding,) = lint(source, codes=["ADV102"])
    assert "where it is defined" in finding.message
    assert finding.fix_applicability is None


def test_positional_num_workers_zero_is_replaced():
    source = """
        import torch
        from torch.utils.data import DataLoader

        def main():
            train_loader = DataLoader(train_set, 64, True, None, None, 0)
            model.cuda()

        if __name__ == "__main__":
            main()
    """
    assert "DataLoader(train_set, 64, True, None, None, 4, persistent_workers=True)" in fixed(source, ["ADV102"])


def test_streaming_datasets_are_left_alone():
    source = """
        import torch
        from datasets import load_dataset
        from torch.utils.data import DataLoader

        def main():
            ds = load_dataset("allenai/c4", "en", split="train", streaming=True)
            ds = ds.map(tokenize)
            train_loader = DataLoader(ds, batch_size=8)
            model.cuda()

        if __name__ == "__main__":
            main()
    """
    assert codes(source, ["ADV102"]) == []


# -- ADV103 ------------------------------------------------------------------------------------
def test_only_batch_tensors_moved_to_cuda_are_reported():
    source = """
        import torch
        from torch.utils.data import DataLoader

        device = torch.device("cuda")
        loader = DataLoader(ds, batch_size=64, pin_memory=True)
        for step, batch in enumerate(loader):
            inputs = batch["input_ids"]
            inputs = inputs.to(device)
            labels = batch["labels"].to(device=device)
            mask = torch.ones(4).to(device)
            pair = tuple(t.to(device) for t in batch["pair"])
            step_tensor = torch.tensor(step).to(device)
            half = inputs.to(torch.float16)
            cpu_copy = labels.to("cpu")

            def helper(x):
                return x.to(device)
    """
    found = lint(source, codes=["ADV103"])
    assert [d.line for d in found] == [9, 10, 12]


def test_enumerate_without_unpacking_is_not_a_batch():
    source = """
        import torch
        from torch.utils.data import DataLoader

        loader = DataLoader(ds, batch_size=64, pin_memory=True)
        for pair in enumerate(loader):
            pair[1].cuda()
    """
    assert codes(source, ["ADV103"]) == []


def test_argparse_pinning_and_cuda_device_from_argparse():
    source = """
        import argparse
        import torch
        from torch.utils.data import DataLoader

        parser = argparse.ArgumentParser()
        parser.add_argument("--no-pin", dest="pin", action="store_false")
        parser.add_argument("--device", default="cuda:1")
        args = parser.parse_args()
        loader = DataLoader(ds, batch_size=64, pin_memory=args.pin)
        for x, y in loader:
            x = x.to(args.device)
    """
    assert codes(source, ["ADV103"]) == ["ADV103"]


def test_fabric_prepared_loader_is_left_alone():
    source = """
        import torch
        from lightning.fabric import Fabric
        from torch.utils.data import DataLoader

        fabric = Fabric(accelerator="cuda")
        loader = DataLoader(ds, batch_size=64, pin_memory=True)
        dataloader = fabric.setup_dataloaders(loader)
        for x, y in loader:
            x = x.cuda()
    """
    assert codes(source, ["ADV103"]) == []


# -- ADV104 ------------------------------------------------------------------------------------
def test_trainer_settings_silent_cases():
    source = """
        from transformers import TrainingArguments

        a = TrainingArguments(output_dir="out", no_cuda=True)
        b = TrainingArguments(output_dir="out", use_cpu=args_cpu)
        c = TrainingArguments(output_dir="out", dataloader_num_workers=2)
        d = TrainingArguments(output_dir="out")
        d.set_dataloader(num_workers=8)
    """
    assert codes(source, ["ADV104"]) == []


def test_pinning_from_a_visible_dict_is_advice():
    source = """
        from transformers import TrainingArguments

        def main():
            config = {"output_dir": "out", "dataloader_pin_memory": False, "dataloader_num_workers": 4}
            args = TrainingArguments(**config)

        if __name__ == "__main__":
            main()
    """
    (finding,) = lint(source, codes=["ADV104"])
    assert "where it is defined" in finding.message
    assert finding.fix_applicability is None


# -- the fixes together ------------------------------------------------------------------------
def test_data_loading_fixes_combine_on_a_tutorial_script():
    source = """
        import torch
        import torchvision

        def main():
            device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
            trainloader = torch.utils.data.DataLoader(trainset, batch_size=4, shuffle=True)
            for epoch in range(2):
                for i, data in enumerate(trainloader, 0):
                    inputs, labels = data[0].to(device), data[1].to(device)
                    optimizer.zero_grad()
                    loss = criterion(net(inputs), labels)
                    loss.backward()
                    optimizer.step()

        if __name__ == "__main__":
            main()
    """
    result = fixed(source)
    assert (
        "DataLoader(trainset, batch_size=4, shuffle=True, num_workers=4, persistent_workers=True, pin_memory=torch.cuda.is_available())"
        in result
    )
    assert "data[0].to(device, non_blocking=True), data[1].to(device, non_blocking=True)" in result
    # In rounds: the workers first (ADV102), then pinning (ADV101) and the copies (ADV103): CIFAR's
    # batches are not known to be large, so pinning waits for the workers.
    assert codes(result) == []


def test_local_collate_fn_blocks_the_worker_fix():
    source = """
        import torch
        from torch.utils.data import DataLoader

        def get_dataloaders(tokenizer, batch_size):
            def collate_fn(examples):
                return tokenizer.pad(examples, return_tensors="pt")

            train_dataloader = DataLoader(ds["train"], shuffle=True, collate_fn=collate_fn, batch_size=batch_size)
            other = DataLoader(ds["train"], shuffle=True, collate_fn=lambda b: b, batch_size=batch_size)
            fine = DataLoader(ds["train"], shuffle=True, collate_fn=default_collate, batch_size=batch_size)
            return train_dataloader, other, fine

        if __name__ == "__main__":
            torch.cuda.set_device(0)
    """
    found = lint(source, codes=["ADV102"])
    assert [d.fix_applicability for d in found] == [None, None, "measured"]
    assert "`collate_fn` is a module-level function" in found[0].message


# -- batches on the GPU before the loader yields them ------------------------------------------
def test_collate_fn_that_moves_batches_to_cuda_silences_pinning_and_workers():
    # beyond-nanogpt's shape: the lambda calls a module-level function that returns `.cuda()`.
    source = """
        import torch
        from torch.utils.data import DataLoader

        def collate_batch(batch, tokenizer):
            encoded = tokenizer([item["text"] for item in batch], padding=True, return_tensors="pt")
            return encoded["input_ids"].cuda()

        if __name__ == "__main__":
            model = Transformer(config).to("cuda")
            dataloader = DataLoader(
                stories, batch_size=64, shuffle=True, collate_fn=lambda batch: collate_batch(batch, tok)
            )
            for batch in dataloader:
                loss = model(batch).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
    """
    assert codes(source) == []


def test_collate_fn_variants_that_touch_the_device():
    source = """
        import functools
        import torch
        from torch.utils.data import DataLoader, Dataset

        class PadToDevice:
            def __init__(self, device):
                self.device = device
            def __call__(self, batch):
                return torch.stack(batch).to(self.device, non_blocking=True)

        def to_device(batch, device):
            return [torch.as_tensor(x, device=device) for x in batch]

        class Frames(Dataset):
            def collate(self, batch):
                return self._stack(batch)
            def _stack(self, batch):
                return torch.stack(batch).cuda()

        frames = Frames()
        a = DataLoader(ds, batch_size=8, collate_fn=PadToDevice("cuda"))
        b = DataLoader(ds, batch_size=8, collate_fn=functools.partial(to_device, device="cuda"))
        c = DataLoader(frames, batch_size=8, collate_fn=frames.collate)
        collator = PadToDevice(torch.device("cuda"))
        d = DataLoader(ds, batch_size=8, collate_fn=collator)
    """
    assert codes(source, ["ADV101"]) == []


def test_cpu_collate_functions_and_library_collators_are_still_reported():
    source = """
        import torch
        from torch.utils.data import DataLoader
        from transformers import DataCollatorWithPadding, default_data_collator
        from utils import collate_fn as imported_collate

        def to_cpu(batch):
            return torch.stack(batch).to("cpu").to(dtype=torch.float16)

        a = DataLoader(ds, batch_size=8, collate_fn=DataCollatorWithPadding(tokenizer))
        b = DataLoader(ds, batch_size=8, collate_fn=default_data_collator)
        c = DataLoader(ds, batch_size=8, collate_fn=to_cpu)
        d = DataLoader(ds, batch_size=8, collate_fn=imported_collate)
        model.cuda()
    """
    assert codes(source, ["ADV101"]) == ["ADV101"] * 4


def test_dataset_class_that_moves_items_to_the_device():
    source = """
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Base(Dataset):
            def __getitem__(self, i):
                return self.x[i].to(self.device), self.y[i].to(self.device)

        class Pairs(Base):
            def __len__(self):
                return len(self.x)

        def main():
            train_loader = DataLoader(Pairs(), batch_size=32, shuffle=True)
            model.cuda()

        if __name__ == "__main__":
            main()
    """
    assert codes(source) == []


def test_dataset_that_loads_its_items_onto_the_gpu_is_not_pinned():
    # Text-To-Video-Finetuning's CachedDataset: torch.load(path, map_location='cuda:0') per item;
    # pinning its batches raises "cannot pin 'torch.cuda.FloatTensor'".
    source = """
        import torch
        from torch.utils.data import DataLoader, Dataset

        class CachedDataset(Dataset):
            def __getitem__(self, index):
                return torch.load(self.files[index], map_location="cuda:0")

        def main():
            loader = DataLoader(CachedDataset(), batch_size=1, shuffle=True, num_workers=4)
            model.cuda()
            for batch in loader:
                model(batch).mean().backward()

        if __name__ == "__main__":
            main()
    """
    assert "ADV101" not in codes(source)
    assert "ADV101" in codes(source.replace('map_location="cuda:0"', 'map_location="cpu"'))


def test_device_collator_with_hf_trainer_gets_no_loader_settings_advice():
    source = """
        import torch
        from transformers import Trainer, TrainingArguments

        def collate(features):
            return {k: torch.stack([f[k] for f in features]).cuda() for k in features[0]}

        def main():
            args = TrainingArguments("out", dataloader_pin_memory=False)
            Trainer(model=model, args=args, data_collator=collate).train()

        if __name__ == "__main__":
            main()
    """
    assert codes(source, ["ADV104"]) == []


def test_pinned_loader_with_device_collate_gets_no_non_blocking_advice():
    source = """
        import torch
        from torch.utils.data import DataLoader

        def collate(batch):
            return torch.stack(batch).cuda()

        loader = DataLoader(ds, batch_size=8, pin_memory=True, collate_fn=collate)
        for x in loader:
            x = x.to("cuda")
    """
    assert codes(source, ["ADV103"]) == []


# -- in-memory datasets seen through functions -------------------------------------------------
def test_tensor_dataset_through_a_function_and_a_parameter_gets_no_workers():
    # run_glue (2019): `train(args, train_dataset, ...)`, the dataset from `load_and_cache_examples()`.
    source = """
        import torch
        from torch.utils.data import DataLoader, RandomSampler, TensorDataset

        def load_and_cache_examples(args, evaluate=False):
            features = torch.load(args.cache)
            all_input_ids = torch.tensor([f.input_ids for f in features], dtype=torch.long)
            dataset = TensorDataset(all_input_ids)
            return dataset

        def train(args, train_dataset, model):
            train_sampler = RandomSampler(train_dataset)
            train_dataloader = DataLoader(train_dataset, sampler=train_sampler, batch_size=args.batch_size)
            for batch in train_dataloader:
                loss = model(batch[0].to(args.device))[0]
                loss.backward()
                optimizer.step()
                model.zero_grad()

        def main():
            model.to(torch.device("cuda"))
            train_dataset = load_and_cache_examples(args)
            train(args, train_dataset, model)

        if __name__ == "__main__":
            main()
    """
    assert codes(source, ["ADV102"]) == []


def test_map_style_dataset_through_a_parameter_still_gets_workers():
    source = """
        import torch
        from torch.utils.data import DataLoader
        from torchvision.datasets import ImageFolder

        def train(train_set, model):
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
            for x, y in train_loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()

        def main():
            train(ImageFolder("data/train"), model.cuda())

        if __name__ == "__main__":
            main()
    """
    assert codes(source, ["ADV102"]) == ["ADV102"]


# -- evaluation loaders and unused Lightning loaders ---------------------------------------------
def test_shuffled_loader_inside_an_evaluation_function_is_not_a_training_loader():
    source = """
        import torch
        from torch.utils.data import DataLoader

        def evaluate(model, dataset, batch_size=50):
            loader = DataLoader(dataset, shuffle=True, batch_size=batch_size, num_workers=0)
            return sum(model(x.cuda()).item() for x, in loader)

        @torch.no_grad()
        def sample_batches(dataset):
            loader = DataLoader(dataset, shuffle=True, batch_size=8)
            return next(iter(loader))

        def train_and_evaluate(dataset):
            loader = DataLoader(dataset, shuffle=True, batch_size=8)

        if __name__ == "__main__":
            main()
    """
    assert codes(source, ["ADV102"]) == ["ADV102"]  # only the one in train_and_evaluate()


def test_lightning_test_loader_kept_when_it_may_be_used():
    module = """
        import pytorch_lightning as pl
        import torch

        class Classifier(pl.LightningModule):
            def test_dataloader(self):
                return torch.utils.data.DataLoader(self.test_set, batch_size=8)

            def predict_dataloader(self):
                return torch.utils.data.DataLoader(self.test_set, batch_size=8)
    """
    # No Trainer in the file: the module is driven from elsewhere.
    assert codes(module + "\n        model = Classifier().cuda()\n", ["ADV101"]) == ["ADV101", "ADV101"]
    with_cli = module + """
        from pytorch_lightning.cli import LightningCLI
        trainer = pl.Trainer(accelerator="gpu")
        LightningCLI(Classifier)
    """
    assert codes(with_cli, ["ADV101"]) == ["ADV101", "ADV101"]
    predicts = module + """
        trainer = pl.Trainer(accelerator="gpu")
        trainer.fit(Classifier())
        predictions = trainer.predict(ckpt_path="best")
    """
    found = lint(predicts, codes=["ADV101"])
    assert [d.line for d in found] == [10]  # predict_dataloader only


def test_small_batches_without_workers_wait_for_them_and_decoded_images_do_not():
    """Measured on an H200: pinning in the training process made a step 1.27x faster on 38.5 MB
    image batches and 0.85x on 0.26 MB token batches (bench/loader/)."""
    tokens = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(dataset, batch_size=32, shuffle=True)
        for batch in loader:
            inputs = {"input_ids": batch[0].to("cuda"), "attention_mask": batch[1].to("cuda")}
            loss = model(**inputs).loss
        """
    )
    found = {d.code: d for d in lint(tokens, codes=DATA_LOADING)}
    assert found["ADV101"].fix_applicability is None and "workers first" in found["ADV101"].message
    assert found["ADV103"].fix_applicability is None
    with_workers = tokens.replace("shuffle=True)", "shuffle=True, num_workers=4)")
    assert "num_workers=4, pin_memory=True)" in fixed(with_workers)
    images = tokens.replace('inputs = {"input_ids": batch[0].to("cuda"), "attention_mask": batch[1].to("cuda")}', 'images = batch[0].to("cuda")')
    images = images.replace("model(**inputs).loss", "model(images).loss")
    assert "shuffle=True, pin_memory=True)" not in fixed(images)  # nothing shows the batches' size
    folder = images.replace(
        "from torch.utils.data import DataLoader\n",
        "from torch.utils.data import DataLoader\nfrom torchvision.datasets import ImageFolder\ndataset = ImageFolder('train')\n",
    )
    result = fixed(folder)
    assert "shuffle=True, pin_memory=True)" in result and 'batch[0].to("cuda", non_blocking=True)' in result
    # A data set class of the file whose module opens image files.
    decoded = images.replace(
        "from torch.utils.data import DataLoader\n",
        "from torch.utils.data import DataLoader, Dataset\nfrom PIL import Image\n\n"
        "class Photos(Dataset):\n    def __init__(self, paths):\n        self.paths = paths\n"
        "    def __len__(self):\n        return len(self.paths)\n"
        "    def __getitem__(self, i):\n        return to_tensor(Image.open(self.paths[i]))\n\n"
        "dataset = Photos(paths)\n",
    )
    assert "shuffle=True, pin_memory=True)" in fixed(decoded)


def test_a_collate_factory_that_batches_graphs_is_not_pinned(tmp_path):
    """GCC: `collate_fn=labeled_batcher() if args.finetune else batcher()`, each factory returning
    an inner function that batches DGL graphs: pinning skips graphs, and `.to(device,
    non_blocking=True)` on a DGL 0.4 graph raises."""
    source = textwrap.dedent(
        """
        import dgl
        import torch

        def batcher():
            def batcher_dev(batch):
                graph_q, graph_k = zip(*batch)
                graph_q, graph_k = dgl.batch(graph_q), dgl.batch(graph_k)
                return graph_q, graph_k
            return batcher_dev

        def labeled_batcher():
            def batcher_dev(batch):
                graph_q, label = zip(*batch)
                graph_q = dgl.batch(graph_q)
                return graph_q, torch.LongTensor(label)
            return batcher_dev

        loader = torch.utils.data.DataLoader(dataset, batch_size=32, num_workers=4,
                                             collate_fn=labeled_batcher() if finetune else batcher())
        for graph_q, graph_k in loader:
            graph_q = graph_q.to(torch.device("cuda"))
        """
    )
    assert not {"ADV101", "ADV103"} & set(codes(source))


def test_a_loader_whose_batches_are_converted_before_every_copy_is_not_pinned():
    """DeepPurpose and LTSF-Linear: `v_d.float().to(self.device)` of float64 batches; the
    conversion makes a new host tensor, so a pinned batch never reaches the copy."""
    source = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader
        from torchvision.datasets import ImageFolder
        loader = DataLoader(ImageFolder("train"), batch_size=64, shuffle=True, num_workers=4)
        for v_d, label in loader:
            score = model(v_d.float().to("cuda"))
            loss = loss_fn(score, label.float().to("cuda"))
        """
    )
    (finding,) = [d for d in lint(source, codes=DATA_LOADING) if d.code == "ADV101"]
    assert finding.fix_applicability is None and "converts or computes on them on the host first" in finding.message
    direct = source.replace('model(v_d.float().to("cuda"))', 'model(v_d.to("cuda").float())')
    (finding,) = [d for d in lint(direct, codes=DATA_LOADING) if d.code == "ADV101"]
    assert finding.fix_applicability is not None


def test_conversions_in_a_method_the_loop_hands_the_batch_to_count_and_strided_views_are_copied_through_the_host():
    """MICN (the Informer layout): the loop hands the batch to `self._process_one_batch`, which
    converts each part (`batch_x.float().to(self.device)`) and copies a strided view of the
    converted target (`batch_y[:, -pred_len:, :]`): no copy reads the pinned batch."""
    source = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader

        class Exp:
            def train(self):
                loader = DataLoader(WindowFiles(), batch_size=32, shuffle=True, num_workers=4)
                for batch_x, batch_y in loader:
                    pred, true = self._process_one_batch(batch_x, batch_y)
                    loss = criterion(pred, true)
                    loss.backward()

            def _process_one_batch(self, batch_x, batch_y):
                batch_x = batch_x.float().to(self.device)
                outputs = self.model(batch_x)
                batch_y = batch_y[:, -self.pred_len:, :].to(self.device)
                return outputs, batch_y
        """
    ).replace("self.device", '"cuda"')
    (finding,) = [d for d in lint(source, codes=DATA_LOADING) if d.code == "ADV101"]
    assert finding.fix_applicability is None and "converts or computes on them on the host first" in finding.message
    # The batch copied as it comes in the method: pinning reaches it.
    direct = source.replace('batch_x = batch_x.float().to("cuda")', 'batch_x = batch_x.to("cuda")')
    (finding,) = [d for d in lint(direct, codes=DATA_LOADING) if d.code == "ADV101"]
    assert finding.fix_applicability is not None


def test_an_identity_collate_is_not_pinned_unless_the_batch_is_copied_as_it_comes():
    """CodeReviewer: `def fn(features): return features`, then `torch.tensor([ex.source_ids for ex
    in examples]).to(local_rank)`: the batch is a list of the data set's objects, rebuilt on the host."""
    source = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader

        def fn(features):
            return features

        loader = DataLoader(dataset, batch_size=16, num_workers=4, collate_fn=fn)
        for examples in loader:
            ids = torch.tensor([ex.source_ids for ex in examples], dtype=torch.long).to("cuda")
        """
    )
    assert "ADV101" not in codes(source)
    per_item = source.replace(
        'ids = torch.tensor([ex.source_ids for ex in examples], dtype=torch.long).to("cuda")',
        'ids = examples.to("cuda")',
    )
    assert "ADV101" in codes(per_item)
    # torchvision's VideoClips (copied into PVDM): the identity collate has a docstring.
    documented = source.replace("def fn(features):\n", 'def fn(features):\n    """Dummy collate."""\n')
    assert "ADV101" not in codes(documented)


def test_non_blocking_copies_stay_advice_where_the_script_may_pick_mps():
    # seed-vc's train.py: args.device = "mps" when torch.backends.mps.is_available(); a
    # non-blocking copy to MPS can corrupt data (pytorch#139550).
    source = """
        import torch
        from torch.utils.data import DataLoader

        def main():
            device = "mps" if torch.backends.mps.is_available() else "cuda"
            loader = DataLoader(data, batch_size=64, num_workers=4, pin_memory=True)
            model.to(device)
            for x, y in loader:
                loss = model(x.to(device)).mean()
                loss.backward()
                optimizer.step()

        if __name__ == "__main__":
            main()
    """
    (finding,) = [d for d in lint(textwrap.dedent(source), gpu="A100") if d.code == "ADV103"]
    assert finding.fix_applicability is None and "pytorch#139550" in finding.message


def test_a_later_blocking_copy_of_a_host_tensor_makes_non_blocking_copies_advice():
    # SRe2L's train_KD.py: ``target = target.type(torch.LongTensor)``, then a blocking
    # ``target.cuda()`` after ``data.cuda()``: the host waits for it, and for the copy before it.
    later = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader

        loader = DataLoader(train_set, batch_size=64, num_workers=4, pin_memory=True)
        for data, target in loader:
            target = target.type(torch.LongTensor)
            data, target = data.cuda(), target.cuda()
            model(data).sum().backward()
        """
    )
    (finding,) = [d for d in lint(later, gpu="A100") if d.code == "ADV103"]
    assert finding.fix_applicability is None and "`target.cuda()` (line 8)" in finding.message
    # The host tensor copied first: the batch's copy after it still overlaps what follows.
    earlier = later.replace("data, target = data.cuda(), target.cuda()", "target = target.cuda()\n    data = data.cuda()")
    (finding,) = [d for d in lint(earlier, gpu="A100") if d.code == "ADV103"]
    assert finding.fix_applicability == "safe"
    # deeplabv3: the conversion inside torch 0.3's `Variable(...)` wrapper, copied at once.
    wrapped = later.replace(
        "    target = target.type(torch.LongTensor)\n    data, target = data.cuda(), target.cuda()\n",
        "    data = Variable(data).cuda()\n    target = Variable(target.type(torch.LongTensor)).cuda()\n",
    ).replace("import torch\n", "import torch\nfrom torch.autograd import Variable\n", 1)
    (finding,) = [d for d in lint(wrapped, gpu="A100") if d.code == "ADV103"]
    assert finding.fix_applicability is None and "(line 9)" in finding.message, finding.message


def test_a_batch_name_a_nested_loop_draws_into_is_another_loaders_batch():
    # openWakeWord's train_model: `for step, data in enumerate(X)` trains, and at validation
    # steps `for i, data in enumerate(false_positive_val_data)` draws an in-memory loader's
    # batches into the same name: those copies are not the training loader's.
    source = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        def train_model(model, X, val_data):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for step, data in enumerate(X):
                x, y = data[0].to("cuda"), data[1].to("cuda")
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                if step % 100 == 0:
                    for i, data in enumerate(val_data):
                        with torch.no_grad():
                            x_val = data[0].to("cuda")
                            model(x_val)

        X = DataLoader(AudioClips(), batch_size=None, num_workers=8, pin_memory=True)
        val_data = DataLoader(TensorDataset(torch.from_numpy(features)), batch_size=1024)
        train_model(Net().cuda(), X, val_data)
        """
    )
    found = [(d.code, d.line) for d in lint(source, gpu="A100") if d.code == "ADV103"]
    assert found == [("ADV103", 8), ("ADV103", 8)], found


def test_a_loader_whose_batches_go_to_another_process_through_a_queue_is_not_pinned():
    # CAT's decode.py: a producer process draws batches, moves them into shared memory and
    # puts them on a multiprocessing queue for the GPU workers; page-locked memory does not
    # survive the trip. A thread's queue.Queue keeps the tensors as they are: pinning pays.
    source = textwrap.dedent(
        """
        import torch
        import torch.multiprocessing as mp
        from torch.utils.data import DataLoader

        def dataserver(args, q: mp.Queue):
            loader = DataLoader(ScpDataset(args.input_scp), batch_size=8, num_workers=4, collate_fn=pad)
            for batch in loader:
                for k in batch:
                    if isinstance(k, torch.Tensor):
                        k.share_memory_()
                q.put(batch, block=True)

        def worker(gpu, q):
            model = build_model().cuda(gpu)
            while True:
                batch = q.get()
                model(batch[0].to(gpu))

        if __name__ == "__main__":
            q = mp.Queue(maxsize=1)
            mp.Process(target=dataserver, args=(args, q)).start()
            mp.spawn(worker, nprocs=2, args=(q,))
        """
    )
    assert "ADV101" not in codes(source)
    threaded = source.replace("import torch.multiprocessing as mp\n", "import queue\nimport torch.multiprocessing as mp\n").replace("q: mp.Queue", "q: queue.Queue")
    assert "ADV101" in codes(threaded)


def test_a_copy_handed_to_a_call_beside_a_blocking_host_copy_is_advice():
    # RLAIF-V's llava15_gen_data.py: `model.generate(input_ids=batch["input_ids"].cuda(),
    # images=batch["images"].half().cuda(), ...)`. The call runs once both arguments are made,
    # and the second is a blocking copy of a tensor converted on the host: a non-blocking
    # first copy overlaps nothing.
    source = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(GenDataset(), batch_size=8, num_workers=4, pin_memory=True)
        model = build().cuda()
        for batch in loader:
            output = model.generate(input_ids=batch["input_ids"].cuda(), images=batch["images"].{images}.cuda())
            loss = output.loss
            loss.backward()
        """
    )
    (converted,) = [d for d in lint(source.format(images="half()"), gpu="A100") if d.code == "ADV103" and d.column < 60]
    assert converted.fix_applicability is None and "with a blocking `batch[\"images\"].half().cuda()`" in converted.message, converted.message
    plain = [d for d in lint(source.format(images="contiguous()"), gpu="A100") if d.code == "ADV103"]
    assert plain and all(d.fix_applicability is not None for d in plain), [d.message for d in plain]
