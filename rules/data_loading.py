"""ADV1xx: data loading (guide: "Data preloading")."""
from __future__ import annotations

from typing import Iterator

import libcst as cst

from advisor.apis import DATALOADER, DATALOADER_POSITION, TRAINING_ARGUMENTS
from advisor.context import MISSING, FileContext
from advisor.edits import append_args, keyword_arg, set_keyword
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid
from advisor.facts.batches import blocking_copy, strided_view
from advisor.values import Value, string_value

GUIDE = "Data preloading"
# The guide's own example value. More workers rarely help a single GPU and each one
# holds a copy of the dataset object; the docs say to tune it.
SUGGESTED_WORKERS = 4

def _replace_argument(call: cst.Call, old: cst.BaseExpression, new: str) -> cst.Call:
    """``call`` with the argument whose value is ``old`` given the value ``new``."""
    args = [a.with_changes(value=cst.parse_expression(new)) if a.value is old else a for a in call.args]
    return call.with_changes(args=args)


def _is_zero(value: Value) -> bool:
    return type(value.value) is int and value.value == 0


def _argparse_option(ctx: FileContext, value: Value) -> str | None:
    """``--num_workers`` for a value that is an argparse default, as the file spells the option."""
    call = value.node if isinstance(value.node, cst.Call) else ctx.enclosing(value.node, cst.Call)
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument":
        for arg in call.args:
            if arg.keyword is None and isinstance(arg.value, cst.SimpleString):
                option = string_value(arg.value)
                if isinstance(option, str) and option.startswith("--"):
                    return option
    return None


def _default_phrase(ctx: FileContext, value: Value, setting: str) -> str:
    option = _argparse_option(ctx, value)
    return f"`{option}` defaults to 0" if option else f"`{setting}` defaults to 0 on the command line"


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
    fix_notes = """
        An explicit `pin_memory=False` is the author's choice (host RAM may be tight, or it
        was tried and turned off): it is reported as advice, never edited; so is a
        `# pin_memory=True` left commented out in the call. Where the script falls back to the CPU itself
        (`torch.device("cuda" if torch.cuda.is_available() else "cpu")`, Accelerate, Lightning's
        `"auto"`), the fix writes `pin_memory=torch.cuda.is_available()`, so that CPU runs do
        not warn that no accelerator is found; `pin_memory=True` where the script always uses
        CUDA, or where the program sets `CUDA_VISIBLE_DEVICES` itself: CUDA reads it once, when
        it starts, and an `is_available()` at the loader may run before the assignment.

        A `collate_fn` of the project that returns a transformers `BatchEncoding` is pinned
        only where the project's torch is 1.11 or later: earlier versions pin a mapping into a
        plain `dict`, and `batch.input_ids` raises (pytorch#67831). One that hands on tuples
        the file builds (diffusers' SDXL `original_sizes`) is pinned only where the project
        requires torch 2.10 or later: before, pinning rebuilt every tuple of a batch as a
        list, and `original_size + crops_coords_top_left + target_size` raises (pytorch#48419).
        A `num_workers` taken from a parameter whose default is 0 counts as no workers.

        A loader without worker processes (`num_workers` unset or 0) pins each batch in the
        training process itself, right before the copy to the GPU. On an H200
        (`bench/loader/pinning_without_workers.py`, records in `bench/loader/records/`) that made
        a training step 1.27x faster on batches of 64 image-sized samples (38.5 MB), 1.30x with
        non-blocking copies, and 0.85x on batches of 32 token rows (0.26 MB: 0.3 ms more a
        step); readers of real repositories judged it no gain on MNIST- and CIFAR-sized batches.
        So without workers the fix is applied where the data set decodes image files per item
        (a torchvision folder data set, or a data set class whose module opens images) and the
        loader's `batch_size` is known to be 32 or more (readers judged 12 of 14 such edits of
        batches of one to a few images no gain), and is advice elsewhere: workers first (ADV102, which `advisor fix` applies to training
        loaders; the next round then pins them, and ADV103 makes their copies non-blocking).

        Where every copy of the loader's batches seen in the file converts them on the host
        first (`x.float().to(device)`, as code whose data sets return float64 arrays does) or
        computes on them there (`((x / 255.0) * 2.0 - 1.0).to(device)`, or `torch.cat` of its
        parts handed to a function of the file that copies the result), the result is a new,
        unpinned tensor and pinning cannot reach the copy: advice, convert on the GPU instead
        (`x.to(device).float()`).
    """
    silent_when = """
        - the file shows no CUDA device at all (CPU-only scripts);
        - `pin_memory` is passed in a way that cannot be read (`**kwargs` built at run
          time, a value from the command line);
        - the batches are on the GPU before the loader yields them: the dataset is built
          from GPU tensors, or a dataset class of the project moves its data or items to a
          device, or the `collate_fn` (a lambda, a function or a callable class of the
          file, and the file's functions they call; a collator picked from a dict of them,
          or a collator class of the project) does, or the file makes CUDA tensors by
          default (`torch.set_default_tensor_type('torch.cuda.FloatTensor')`): pinning a GPU
          tensor raises "only dense CPU tensors can be pinned". Library collators and collate
          functions imported from other modules are taken as CPU ones. Where the file cannot see
          which data set the loader gets (a trainer's `self.train_dataset`) and a data set
          class of the project makes its items on a device, the loader may draw from it:
          silent too; so is a loader handed its `collate_fn` (`collate_fn=self.collate_fn`)
          where a collator the project builds as a `collate_fn` (collie's trainer default
          `ColliePadder()`) moves the batch to a device;
        - the dataset is `range(n)`: the batches are integer indices, not the data; or a
          Python list of strings (prompts): pinning leaves strings as they are; or the
          `collate_fn` (`lambda x: x`, or a function of the project) only gathers the items into Python lists
          and dicts and makes no tensor: the batch is the dataset's items as they are (PIL
          images, strings), made into tensors later, if at all; or it is `lambda batch:
          zip(*batch)`, whose `zip` iterator pinning hands on untouched; or the dataset's
          `__getitem__` reads nothing by its index (DreamBooth's `PromptDataset` returns the
          prompt and the index); or the dataset is a Python list the file builds (a literal,
          a comprehension, or `[]` filled with `.append`: cached latents, items in memory);
        - the dataset is tensors held in memory: a `TensorDataset` (also one a function of
          the file builds, one handed in as a parameter, or one the class keeps in an attribute
          its methods set), or a dataset class of the file
          whose `__getitem__` only indexes or slices tensors it holds. The batch is in RAM
          already and its copy to the GPU is small; pinning adds one more copy, in a thread
          that competes for the GIL with the per-sample indexing that is most of such a
          loader's cost (a benchmark MLP on an in-memory `TensorDataset` ran 0.60x as fast
          on an H200 once pinning, `non_blocking` copies and the other fixes were applied,
          its per-sample loading left as it was). ADV105 says what pays there:
          indexing whole batches, or keeping the tensors on the GPU. An explicit
          `pin_memory=False` is left alone there too;
        - the loader is a Lightning `test_dataloader()` / `predict_dataloader()` and the
          file builds its `Trainer` but never calls `trainer.test` / `trainer.predict`
          (nor uses `LightningCLI`): no batch of it reaches the GPU;
        - the loader is only counted (`len(loader)`), or every loop over it keeps its
          batches on the host: it measures them (`img.shape`, `len(x)`), reduces them there
          (`mean[i] += inputs[:, i].mean()`, a data set's statistics) or appends them to a
          list (a data set loaded into memory once), or hands its parts to a function of the
          project that makes NumPy arrays of them first (TransUNet's `test_single_volume`,
          copied into many segmentation repositories), or reads its copy with `.numpy()`
          (`inputs = inputs.to(device)` then `inputs.numpy()`: NumPy cannot read a CUDA
          tensor, so the loop only runs on the CPU): pinning would copy each batch into
          page-locked memory for nothing (batches drawn by `next()` from an `iter(loader)`
          too); or every read of it draws one batch (`next(iter(loader))` outside a loop,
          a loop that ends in `break`); or nothing reads the name it is bound to, beside a
          loader the file does read (a `train_loader` built per data set where only the
          `test_loader` is drawn from) or beside a loop over the loader's own data set
          (`for image, label in testset:`), and, at module level, no other file names it.
    """
    valid = [
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            train_loader = DataLoader(train_data, batch_size=32, shuffle=True, num_workers=4, collate_fn=lambda x: x)
            for batch in train_loader:
                nlu = [example["question"] for example in batch]
                tokens = torch.tensor([tokenize(q) for q in nlu]).cuda()
                model(tokens).sum().backward()
            """,
            note="`collate_fn=lambda x: x`: the batch is the data set's records, made into tensors later (sqlova)",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(dataset, batch_size=8, shuffle=True, num_workers=4, collate_fn=lambda batch: zip(*batch))
            for inputs, labels in loader:
                x = torch.from_numpy(collate_inputs(inputs)).cuda()
                model(x).sum().backward()
            """,
            note="`collate_fn=lambda batch: zip(*batch)`: pinning hands a zip iterator on as it is (awni/speech)",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset


            class Data:
                def __init__(self, x, y):
                    self.train_set = TensorDataset(x, y)

                def loader(self):
                    return DataLoader(self.train_set, batch_size=64, num_workers=2)


            model = Net().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in Data(xs, ys).loader():
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
            note="a `TensorDataset` the class keeps in `self.train_set`: tensors in memory, read through the attribute (PiSSA)",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            def output_image(model, eval_dataset):
                device = "cuda:0" if torch.cuda.is_available() else "cpu"
                for inputs, labels in DataLoader(eval_dataset, batch_size=1, num_workers=4):
                    inputs = inputs.to(device)
                    preds = model(inputs)
                    save(preds.cpu().numpy(), inputs.numpy())
            """,
            note="the copy is read with `.numpy()`: the loop only runs where the device is the CPU (super-image's test.py)",
        ),
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
            index_loader = DataLoader(range(len(ds)), batch_size=8, shuffle=True)
            for indices in index_loader:
                batch = features[indices].cuda()
            """,
            note="a loader of indices: the data reaches the GPU another way",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            prompts = ["Translate to French: cheese", "Translate to French: bread"]
            loader = DataLoader(prompts, batch_size=8)
            for batch in loader:
                ids = tokenizer(batch, return_tensors="pt", padding=True).input_ids.cuda()
            """,
            note="a loader of strings: the tokenizer makes the tensors",
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
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset
            train_set = TensorDataset(features, labels)
            loader = DataLoader(train_set, batch_size=512, shuffle=True, drop_last=True)
            for x, y in loader:
                x, y = x.to("cuda"), y.to("cuda")
            """,
            note="tensors held in memory: pinning does not pay there (ADV105 is the advice)",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset

            class Windows(Dataset):
                def __init__(self, series, width):
                    self.series, self.width = series, width
                def __len__(self):
                    return len(self.series) - self.width
                def __getitem__(self, i):
                    window = self.series[i : i + self.width + 1]
                    return window[:-1].float(), window[-1].float()

            loader = DataLoader(Windows(series, 64), batch_size=128, shuffle=True, pin_memory=False)
            model = model.cuda()
            """,
            note="a dataset class that only slices tensors it holds: `pin_memory=False` stays",
        ),
        Valid(
            """
            import torch

            def gather(batch):
                collated = {}
                for key in batch[0].keys():
                    collated[key] = [item[key] for item in batch]
                return collated

            loader = torch.utils.data.DataLoader(captions, batch_size=32, collate_fn=gather)
            for batch in loader:
                images = torch.stack([processor(image) for image in batch["image"]]).cuda()
            """,
            note="a collate_fn that only gathers items into lists (images, strings): no tensor batch to pin",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import Dataset

            class PromptDataset(Dataset):
                def __init__(self, prompt, num_samples):
                    self.prompt = prompt
                    self.num_samples = num_samples
                def __len__(self):
                    return self.num_samples
                def __getitem__(self, index):
                    example = {}
                    example["prompt"] = self.prompt
                    example["index"] = index
                    return example

            loader = torch.utils.data.DataLoader(PromptDataset(args.class_prompt, 100), batch_size=4)
            pipeline.to("cuda")
            for example in loader:
                images = pipeline(example["prompt"]).images
            """,
            note="items are the same prompt and the index: nothing read, nothing to pin",
        ),
        Valid(
            """
            import torch

            cached = []
            with torch.no_grad():
                for item in dataset:
                    item["latents"] = vae.encode(item["pixels"].to("cuda")).latent_dist.sample()
                    cached.append(item)
            loader = torch.utils.data.DataLoader(cached, batch_size=8, shuffle=True)
            for batch in loader:
                loss = unet(batch["latents"].cuda()).sum()
                loss.backward()
            """,
            note="a list the file fills (cached latents, here on the GPU): held in memory, not pinned",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            def collate_batch(batch, tokenizer):
                encoded = tokenizer([item["text"] for item in batch], padding=True, return_tensors="pt")
                return encoded["input_ids"].cuda()

            loader = DataLoader(stories, batch_size=64, collate_fn=lambda batch: collate_batch(batch, tokenizer))
            """,
            note="collate_fn returns CUDA tensors: pinning them raises",
        ),
        Valid(
            """
            import torch
            from functools import partial
            from torch.utils.data import DataLoader
            from utils import pad_and_stack

            device = torch.device("cuda")
            collate = partial(pad_and_stack, pad_id=0, device=device)
            loader = DataLoader(samples, batch_size=32, shuffle=True, collate_fn=collate)
            """,
            note="a collate function told the device (`partial(..., device=device)`) puts batches there",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset

            class OnDevice(Dataset):
                def __init__(self, frames, device):
                    self.frames = torch.as_tensor(frames, device=device)
                def __getitem__(self, i):
                    return self.frames[i]
                def __len__(self):
                    return len(self.frames)

            loader = DataLoader(OnDevice(frames, "cuda"), batch_size=32, shuffle=True)
            """,
            note="the dataset class keeps its data on the GPU",
        ),
        Valid(
            """
            import pytorch_lightning as pl
            import torch

            class Classifier(pl.LightningModule):
                def train_dataloader(self):
                    return torch.utils.data.DataLoader(self.train_set, batch_size=32, shuffle=True, pin_memory=True)

                def test_dataloader(self):
                    return torch.utils.data.DataLoader(self.test_set, batch_size=8)

            trainer = pl.Trainer(accelerator="gpu", devices=1)
            trainer.fit(Classifier())
            """,
            note="Lightning test loader that only `trainer.test` would use, and the file never calls it",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            from torchvision import datasets, transforms

            device = torch.device("cuda")
            dataset = datasets.ImageFolder(root, transform=transforms.Resize((512, 512)))
            loader = DataLoader(dataset, batch_size=16, num_workers=8, collate_fn=collate_pil)
            for images, paths in loader:
                detect_faces(images, paths, device)
            """,
            note="an `ImageFolder` whose transform makes no tensor: its items are PIL images, nothing to pin (facenet-pytorch)",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            from torchvision import datasets, transforms

            device = torch.device("cuda")
            dataset = datasets.ImageFolder(root)
            loader = DataLoader(dataset, batch_size=16, num_workers=8, collate_fn=collate_pil)
            for images, paths in loader:
                crop_faces(images, paths, device)
            dataset = datasets.ImageFolder(root + "_cropped", transform=transforms.ToTensor())
            loader = DataLoader(dataset, batch_size=16, num_workers=8)
            for x, y in loader:
                embed(x.to(device))
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            from torchvision import datasets, transforms

            device = torch.device("cuda")
            dataset = datasets.ImageFolder(root)
            loader = DataLoader(dataset, batch_size=16, num_workers=8, collate_fn=collate_pil)
            for images, paths in loader:
                crop_faces(images, paths, device)
            dataset = datasets.ImageFolder(root + "_cropped", transform=transforms.ToTensor())
            loader = DataLoader(dataset, batch_size=16, num_workers=8, pin_memory=True)
            for x, y in loader:
                embed(x.to(device))
            """,
            note="a script that rebinds its data set: the first gives PIL images, the second tensors (facenet-pytorch's notebooks)",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=4)
            device = torch.device("cuda")
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=4, pin_memory=True)
            device = torch.device("cuda")
            """,
            note="worker processes: the loader pins in a thread of its own, and the copy needs no staging",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=8, shuffle=True)
            device = torch.device("cuda")
            """,
            note="no workers, and nothing shows the batches are large: pinning in the training process is advice",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ReviewDataset("train.jsonl"), batch_size=16, shuffle=True)
            for batch in loader:
                out = model(input_ids=batch["input_ids"].to("cuda"))
            """,
            note="token ids without workers: small batches, where pinning in the training process costs more than it saves",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            from torchvision import datasets
            train_set = datasets.ImageFolder("data/train", transform=augment)
            loader = DataLoader(train_set, batch_size=64, shuffle=True)
            device = torch.device("cuda")
            """,
            """
            import torch
            from torch.utils.data import DataLoader
            from torchvision import datasets
            train_set = datasets.ImageFolder("data/train", transform=augment)
            loader = DataLoader(train_set, batch_size=64, shuffle=True, pin_memory=True)
            device = torch.device("cuda")
            """,
            note="no workers, but decoded image files: large batches, where pinning pays even in the training process (measured)",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            from torchvision import datasets
            train_set = datasets.ImageFolder("data/train", transform=augment)
            loader = DataLoader(train_set, batch_size=1, shuffle=True)
            device = torch.device("cuda")
            """,
            note="no workers, decoded images one at a time (MCNN): pinning in the training process is advice",
        ),
        Invalid(
            """
            import torch.utils.data as tud
            loader = tud.DataLoader(
                ds,
                batch_size=8,
                num_workers=2,
            )
            for x in loader:
                x = x.cuda()
            """,
            fixed="""
            import torch.utils.data as tud
            loader = tud.DataLoader(
                ds,
                batch_size=8,
                num_workers=2,
                pin_memory=True,
            )
            for x in loader:
                x = x.cuda()
            """,
            note="a call over several lines gets the keyword on a line of its own",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader as DL
            loader = DL(ds, pin_memory=False)
            model.to("cuda:0")
            """,
            note="`pin_memory=False` written out is a choice: reported, left as advice",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, batch_size=1, shuffle=True,
                                # pin_memory=True,
                                num_workers=4)
            model = model.cuda()
            """,
            note="`pin_memory=True` left commented out in the call (simple-faster-rcnn): a choice, advice",
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader
            from models import Net
            import torch as th

            device = th.device("cuda" if th.cuda.is_available() else "cpu")
            model = Net().to(device)
            loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=4)
            for x, y in loader:
                loss = model(x.to(device), y.to(device))
            """,
            fixed="""
            from torch.utils.data import DataLoader
            from models import Net
            import torch as th

            device = th.device("cuda" if th.cuda.is_available() else "cpu")
            model = Net().to(device)
            loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=4, pin_memory=th.cuda.is_available())
            for x, y in loader:
                loss = model(x.to(device), y.to(device))
            """,
            note="the script falls back to the CPU: pin only when CUDA is there (no warning on CPU runs)",
        ),
        Invalid(
            """
            import torch
            from torch.nn.utils.rnn import pad_sequence
            from torch.utils.data import DataLoader

            def collate(batch):
                tokens = pad_sequence([torch.tensor(t) for t, _ in batch], batch_first=True)
                return tokens.to(torch.long), torch.tensor([label for _, label in batch])

            loader = DataLoader(samples, batch_size=16, collate_fn=collate, num_workers=2)
            model.cuda()
            """,
            fixed="""
            import torch
            from torch.nn.utils.rnn import pad_sequence
            from torch.utils.data import DataLoader

            def collate(batch):
                tokens = pad_sequence([torch.tensor(t) for t, _ in batch], batch_first=True)
                return tokens.to(torch.long), torch.tensor([label for _, label in batch])

            loader = DataLoader(samples, batch_size=16, collate_fn=collate, num_workers=2, pin_memory=True)
            model.cuda()
            """,
            note="a collate_fn that stays on the CPU (`.to(torch.long)` only converts the dtype)",
        ),
        Invalid(
            """
            import lightning as L
            import torch

            class Classifier(L.LightningModule):
                def test_dataloader(self):
                    return torch.utils.data.DataLoader(self.test_set, batch_size=8, num_workers=4)

            trainer = L.Trainer(accelerator="gpu")
            trainer.fit(Classifier())
            trainer.test(ckpt_path="best")
            """,
            fixed="""
            import lightning as L
            import torch

            class Classifier(L.LightningModule):
                def test_dataloader(self):
                    return torch.utils.data.DataLoader(self.test_set, batch_size=8, num_workers=4, pin_memory=True)

            trainer = L.Trainer(accelerator="gpu")
            trainer.fit(Classifier())
            trainer.test(ckpt_path="best")
            """,
            note="`trainer.test` draws from the test loader",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.calls(DATALOADER) or not ctx.facts.devices.gpu.yes:
            return
        loaders = ctx.facts.loaders
        for call in ctx.calls(DATALOADER):
            pin = ctx.argument(call, "pin_memory", DATALOADER_POSITION["pin_memory"])
            if pin is None or not loaders.pinnable(call):
                continue
            if ctx.facts.devices.always_cuda or ctx.facts.devices.sets_visible_devices:
                # Under a ``CUDA_VISIBLE_DEVICES`` the program sets itself, ``is_available()`` at
                # the loader could start CUDA before that choice (sudo_rm_rf's data modules).
                pinned, imports = "True", ()
            else:
                available, imports = ctx.reference("torch.cuda.is_available", call)
                pinned = ctx.code(available) + "()"
            if pin is MISSING:
                message = "DataLoader without `pin_memory=True`: batches are copied to the GPU from pageable memory"
                edit = Edit(call, set_keyword(call, "pin_memory", pinned))
                if loaders.collates_batch_encoding(call):
                    # Before torch 1.11 pinning rebuilt a ``BatchEncoding`` as a plain dict, and
                    # ``batch.input_ids`` raises (pytorch_neural_crf under its "PyTorch >= 1.6.0").
                    fix = self.fix(
                        f"Set `pin_memory={pinned}` (torch >= 1.11: earlier versions pin a `BatchEncoding` into a plain dict)",
                        edit, imports=imports, requires=[("torch", "1.11")],
                    )
                else:
                    fix = self.fix(f"Set `pin_memory={pinned}`", edit, imports=imports)
                finding = self.report(call, message + " (guide: Data preloading)", fix)
                withheld = loaders.pinning_withheld(call)
                if withheld is not None:
                    finding = finding.as_advice(withheld)
                yield finding
                continue
            value = ctx.values.resolve(pin)
            if value is None or value.value is not False or value.origin == "argparse default":
                continue
            # ``pin_memory=False`` written out is the author's choice (host RAM may be tight, or
            # Uformer's authors turned it off after trying it): reported, never edited.
            message = (
                "DataLoader with `pin_memory=False` on a CUDA script: pinned batches transfer faster; "
                "the setting is explicit, so the fix is left as advice"
            )
            if ctx.keyword_arg(call, "pin_memory") is None:
                where = f"`pin_memory=False` from `**kwargs` (line {ctx.position(value.node)[0]})"
                yield self.report(call, message.replace("`pin_memory=False`", where) + " (guide: Data preloading)")
                continue
            yield self.report(self.at_keyword(call, "pin_memory"), message + " (guide: Data preloading)")


class DataLoaderSyncLoading(Rule):
    code = "ADV102"
    name = "dataloader-sync-loading"
    summary = "A training DataLoader loads every batch in the main process (`num_workers` missing or 0)."
    guide = GUIDE
    fix_applicability = Applicability.MEASURED
    why = """
        With `num_workers=0` (the default) the training process reads, decodes, augments
        and collates every batch itself, between two training steps, while the GPU
        waits. The guide's *Data preloading* section: "By default, everything happens in
        the main process, and it might not be able to read the data from disk fast
        enough, and thus create a bottleneck, leading to GPU under-utilization", and it
        recommends `DataLoader(num_workers=4, ...)` to "spawn several workers to preload
        data faster". `persistent_workers=True` keeps the workers alive between epochs
        instead of starting them again each epoch.

        The fix is unsafe because it changes the process model: workers are separate
        processes. Where processes are started with *spawn* (macOS, Windows, or a CUDA
        program that sets it), every worker re-imports the main script, so the training
        code must sit under `if __name__ == "__main__":`. The fix is offered only for
        such scripts, and only where `collate_fn` / `worker_init_fn` can be pickled (not a
        lambda or a function nested in another), and not where the data set splits its
        files between workers itself (`get_worker_info()`: more workers change which worker
        reads what); otherwise the message says what to do first. Four workers is the
        guide's example: watch GPU utilisation and tune it. Whether workers pay depends on
        what a sample costs to load (decoding and augmenting images, against indexing
        pre-tokenized ids), which the code rarely shows, so the fix is also measured:
        `advisor fix --verify --unsafe-fixes` applies it and keeps it where the run is
        faster; plain `fix` leaves it as advice.
    """
    example = """
        def main():
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True, pin_memory=True)
            for x, y in train_loader:
                ...

        if __name__ == "__main__":
            main()
    """
    use_instead = """
        def main():
            train_loader = DataLoader(
                train_set, batch_size=64, shuffle=True, pin_memory=True,
                num_workers=4, persistent_workers=True,
            )
    """
    silent_when = """
        - the file shows no CUDA device at all (CPU-only scripts);
        - the DataLoader is not a training one: not iterated by a training loop, not named
          like one (`train_loader`, `train_dataloader()`), not shuffled; evaluation loaders
          (`val_loader`, `test_loader`, a loader built inside `evaluate()` or under
          `@torch.no_grad()` / `@torch.inference_mode()`, even a shuffled one) are left alone;
        - `num_workers` cannot be read (`**kwargs` changed at run time as in the PyTorch
          MNIST example's `train_kwargs.update(cuda_kwargs)`, `os.cpu_count()`, a config
          file), or resolves to more than 0;
        - the dataset is an `IterableDataset` (or a streaming / WebDataset pipeline, or
          unknown in a file that uses iterable datasets): each worker would replay the
          whole stream unless the dataset shards itself;
        - the dataset is a `TensorDataset` of in-memory tensors (also when a function of
          the file builds and returns it, or it is handed in as a parameter), a Python
          list / tuple / `range`, or tensors already on the GPU: indexing them in-process
          is cheaper than shipping batches between processes; likewise a dataset class of
          the file whose `__getitem__` only indexes or slices tensors it holds
          (`self.data[i : i + block]`), with no I/O, decoding or transform (ADV105 says
          what pays there: indexing whole batches);
        - the dataset or `collate_fn` moves batches to the GPU (as for ADV101): a forked
          worker process cannot use CUDA.

        Accelerate, Lightning and Fabric do not add workers: loaders they wrap are checked
        like any other.
    """
    valid = [
        Valid(
            """
            import torch
            from torchvision import datasets, transforms

            def main():
                use_cuda = torch.cuda.is_available()
                device = torch.device("cuda" if use_cuda else "cpu")
                train_kwargs = {"batch_size": 64}
                if use_cuda:
                    cuda_kwargs = {"num_workers": 1, "pin_memory": True, "shuffle": True}
                    train_kwargs.update(cuda_kwargs)
                dataset1 = datasets.MNIST("../data", train=True, download=True, transform=transforms.ToTensor())
                train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)

            if __name__ == "__main__":
                main()
            """,
            note="PyTorch MNIST example: the kwargs dict is updated at run time",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            model = Net()
            train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
            for x, y in train_loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="CPU-only script",
        ),
        Valid(
            """
            import argparse
            import torch
            from torch.utils.data import DataLoader

            parser = argparse.ArgumentParser()
            parser.add_argument("-j", "--workers", type=int, default=4)
            args = parser.parse_args()
            train_loader = DataLoader(train_set, batch_size=256, shuffle=True, num_workers=args.workers)
            model = model.cuda()
            """,
            note="argparse default above 0",
        ),
        Valid(
            """
            import os
            import torch
            from torch.utils.data import DataLoader

            train_loader = DataLoader(train_set, batch_size=256, shuffle=True, num_workers=os.cpu_count() // 2)
            val_loader = DataLoader(val_set, batch_size=512)
            device = torch.device("cuda")
            """,
            note="value known only at run time; the evaluation loader is not a training one",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, IterableDataset

            class ShardedStream(IterableDataset):
                def __iter__(self):
                    yield from read_shards()

            loader = DataLoader(ShardedStream(), batch_size=32)
            for batch in loader:
                loss = model(batch.cuda()).mean()
                loss.backward()
                optimizer.step()
            """,
            note="iterable dataset: each worker would replay the stream",
        ),
        Valid(
            """
            import argparse
            import torch
            from datasets import load_dataset
            from torch.utils.data import DataLoader

            parser = argparse.ArgumentParser()
            parser.add_argument("--streaming", action="store_true")
            args = parser.parse_args()
            train_data = load_dataset("c4", "en", split="train", streaming=args.streaming)
            train_loader = DataLoader(train_data, batch_size=8)
            device = torch.device("cuda")
            """,
            note="streamed when the command line says so: unknown, so no workers advice",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            train_set = TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train))
            train_loader = DataLoader(train_set, batch_size=128, shuffle=True)
            model = model.to("cuda")
            """,
            note="in-memory tensors: indexing them in-process is cheap",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, Dataset

            class CharBlocks(Dataset):
                def __init__(self, text, block):
                    self.data = torch.tensor([ord(c) for c in text])
                    self.block = block
                def __len__(self):
                    return len(self.data) - self.block
                def __getitem__(self, i):
                    chunk = self.data[i : i + self.block + 1]
                    return chunk[:-1].long(), chunk[1:].long()

            loader = DataLoader(CharBlocks(text, 256), batch_size=64, shuffle=True)
            for x, y in loader:
                model(x.cuda(), y.cuda()).backward()
            """,
            note="a dataset class that only slices a tensor it holds: as cheap as a TensorDataset",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            def main():
                samples = [(torch.randn(16), label) for label in range(256)]
                train_loader = DataLoader(samples, batch_size=32, shuffle=True)
                shuffled_ids = DataLoader(list(range(1024)), batch_size=64, shuffle=True)
                model.cuda()

            if __name__ == "__main__":
                main()
            """,
            note="Python sequences already in memory",
        ),
        Valid(
            """
            import json
            import torch
            from torch.utils.data import DataLoader

            config = json.load(open("config.json"))
            train_loader = DataLoader(train_set, batch_size=16, num_workers=config["num_workers"])
            model.cuda()
            """,
            note="value from a config file",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            @torch.inference_mode()
            def evaluate(model, dataset, max_batches=None):
                loader = DataLoader(dataset, shuffle=True, batch_size=50, num_workers=0)
                for i, (x, y) in enumerate(loader):
                    losses.append(model(x.to("cuda"), y.to("cuda")).item())

            if __name__ == "__main__":
                main()
            """,
            note="an evaluation loader, shuffled only to sample random batches",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, RandomSampler, TensorDataset

            def load_examples(path):
                features = torch.load(path)
                return TensorDataset(features["input_ids"], features["labels"])

            def train(args, train_dataset, model):
                train_dataloader = DataLoader(train_dataset, sampler=RandomSampler(train_dataset), batch_size=32)
                for batch in train_dataloader:
                    loss = model(*(t.to(args.device) for t in batch)).loss
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()

            def main():
                model = Model().to("cuda")
                train_dataset = load_examples("cached_train")
                train(args, train_dataset, model)

            if __name__ == "__main__":
                main()
            """,
            note="in-memory TensorDataset built by a function and handed in as a parameter",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def main():
                device = torch.device("cuda")
                train_loader = DataLoader(train_set, batch_size=64, shuffle=True, pin_memory=True)
                for x, y in train_loader:
                    ...

            if __name__ == "__main__":
                main()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def main():
                device = torch.device("cuda")
                train_loader = DataLoader(train_set, batch_size=64, shuffle=True, pin_memory=True, num_workers=4, persistent_workers=True)
                for x, y in train_loader:
                    ...

            if __name__ == "__main__":
                main()
            """,
        ),
        Invalid(
            """
            import torch
            import torch.utils.data as tud

            def train(model, device, loader, optimizer):
                for step, (images, targets) in enumerate(loader):
                    loss = model(images.to(device), targets.to(device))
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()

            def main():
                loader = tud.DataLoader(
                    dataset,
                    batch_size=32,
                    num_workers=0,  # TODO: tune
                )
                train(model.cuda(), "cuda", loader, optimizer)

            if __name__ == "__main__":
                main()
            """,
            fixed="""
            import torch
            import torch.utils.data as tud

            def train(model, device, loader, optimizer):
                for step, (images, targets) in enumerate(loader):
                    loss = model(images.to(device), targets.to(device))
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()

            def main():
                loader = tud.DataLoader(
                    dataset,
                    batch_size=32,
                    num_workers=4,  # TODO: tune
                    persistent_workers=True,
                )
                train(model.cuda(), "cuda", loader, optimizer)

            if __name__ == "__main__":
                main()
            """,
            note="loader handed to the training function by name",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader_kwargs = {"batch_size": 128, "shuffle": True}
            loader = DataLoader(train_set, **loader_kwargs)
            model = model.cuda()
            """,
            fixed=None,
            note="no `__main__` guard: advice only",
        ),
        Invalid(
            """
            import argparse
            import torch
            from torch.utils.data import DataLoader

            def main():
                parser = argparse.ArgumentParser()
                parser.add_argument("--num_workers", type=int, default=0)
                args = parser.parse_args()
                train_dataloader = DataLoader(train_set, batch_size=8, num_workers=args.num_workers)
                model.to("cuda")

            if __name__ == "__main__":
                main()
            """,
            fixed=None,
            note="argparse default 0: advice to change the default",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def main():
                loader_kwargs = dict(batch_size=128, shuffle=True, pin_memory=True)
                loader = DataLoader(train_set, **loader_kwargs)
                model = model.cuda()

            if __name__ == "__main__":
                main()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def main():
                loader_kwargs = dict(batch_size=128, shuffle=True, pin_memory=True)
                loader = DataLoader(train_set, num_workers=4, persistent_workers=True, **loader_kwargs)
                model = model.cuda()

            if __name__ == "__main__":
                main()
            """,
            note="settings in a visible dict: the keywords go before `**`",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.calls(DATALOADER) or not ctx.facts.devices.gpu.yes:
            return
        loaders = ctx.facts.loaders
        for call in ctx.calls(DATALOADER):
            loops = loaders.training_iterations.get(call)
            if not loaders.is_training(call):
                continue
            workers = ctx.argument(call, "num_workers", DATALOADER_POSITION["num_workers"])
            if workers is None or loaders.dataset_on_gpu(call) or loaders.unsuited_to_workers(call):
                continue
            if not loaders.runs_for_training(call):
                continue
            written_here = workers is MISSING
            value = None
            if workers is MISSING:
                problem = "`num_workers` not set"
            else:
                value = ctx.values.resolve(workers)
                if value is None or not _is_zero(value):
                    continue
                written_here = any(arg.value is value.node for arg in call.args)
                if value.origin == "argparse default":
                    problem = _default_phrase(ctx, value, "num_workers")
                else:
                    problem = "`num_workers=0`"
            head = f"Training DataLoader loads batches in the main process ({problem}): the GPU waits for data"
            advice = f"set `num_workers={SUGGESTED_WORKERS}` and `persistent_workers=True`"
            if not written_here:
                from_argparse = value is not None and value.origin == "argparse default"
                where = "make its default" if from_argparse else "set it where it is defined to"
                message = f"{head}; {where} {SUGGESTED_WORKERS} and pass `persistent_workers=True`"
                fix = None
            elif not loaders.spawn_safe(call, *(loops or ())):
                message = (
                    f"{head}; {advice} once the entry point runs under `if __name__ == \"__main__\":` "
                    "(worker processes re-import the script)"
                )
                fix = None
            elif loaders.shards_by_worker(call):
                message = (
                    f"{head}; {advice} once the data set's split of its files between workers "
                    "(`get_worker_info()`) is known to hold for that many"
                )
                fix = None
            elif (local := loaders.local_callable(call)) is not None:
                message = (
                    f"{head}; {advice} once `{local}` is a module-level function "
                    "(worker processes started with spawn must pickle it)"
                )
                fix = None
            else:
                message = f"{head}; {advice}"
                fix = self.fix(
                    f"Set `num_workers={SUGGESTED_WORKERS}` and `persistent_workers=True`",
                    Edit(call, self._with_workers(ctx, call, workers)),
                    requires=[("torch", "1.7")],  # ``persistent_workers`` came with torch 1.7
                )
            yield self.report(call, f"{message} (guide: {GUIDE})", fix)

    @staticmethod
    def _with_workers(ctx: FileContext, call: cst.Call, workers) -> cst.Call:
        added = []
        if workers is MISSING:
            added.append(keyword_arg("num_workers", str(SUGGESTED_WORKERS)))
            updated = call
        else:
            updated = _replace_argument(call, ctx.values.resolve(workers).node, str(SUGGESTED_WORKERS))
        if ctx.argument(call, "persistent_workers") is MISSING:
            added.append(keyword_arg("persistent_workers", "True"))
        return append_args(updated, added)


class BlockingHostToDeviceCopy(Rule):
    code = "ADV103"
    name = "blocking-host-to-device-copy"
    summary = "A batch from a pinned (or soon pinned) DataLoader is copied to the GPU without `non_blocking=True`."
    guide = GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        Pinning a loader's memory (`pin_memory=True`, the guide's *Data preloading*
        advice) is what makes host-to-device copies fast and lets them run
        asynchronously. A plain `.to(device)` / `.cuda()` still makes the host wait until
        the copy is done before it can queue the forward pass. With
        `non_blocking=True` the copy is queued on the current stream and the CPU goes on
        preparing the next kernels; kernels on the same stream still run after the copy,
        so results are the same.
    """
    example = """
        loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
    """
    use_instead = """
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    """
    fix_notes = """
        Where the loader does not pin and ADV101 pins it, `advisor fix` makes its copies
        non-blocking in the same run: from pageable memory a non-blocking copy still blocks.
        Where ADV101 is advice (a loader without workers whose batches are not known to be
        large), so are its copies here; once the loader has workers, `advisor fix` pins it and
        makes the copies non-blocking in the same run. Where the file has a tokenizer make
        tensors (`return_tensors="pt"`) and the loader's own `collate_fn` hands items on as they
        are, a part of the batch the loop unpacks may be a `BatchEncoding`, whose `.to()` takes
        `non_blocking` from transformers 4.48 on: the fix needs a transformers the project
        allows.
    """
    silent_when = """
        - the loader's `pin_memory` is set to something other than `True` on purpose
          (`pin_memory=False`, a value that cannot be read). A loader that does not set
          it at all is reported with ADV101, and its copies here: pinning and
          non-blocking copies go together, and `advisor fix` applies both in one run;
        - Accelerate or Fabric prepares the loader (it places batches itself);
        - the call converts the dtype (`.to(torch.float16)`) or moves to a device that is
          not CUDA (`.to("cpu")`, a `device` that resolves to `"cpu"`), or to something
          that is not visibly a device (`x.to(other_tensor)`);
        - the tensor is not the batch itself (a model, a tensor computed in the loop,
          `batch[0].float().to(device)`; a view of it, `x.reshape(-1, 784)` / `.view` /
          `.flatten` / `.unsqueeze` / `.squeeze`, is the same pinned memory and is reported);
        - `non_blocking` is already passed, or passed a value that cannot be read;
        - the call's result is thrown away (`batch.to(device)` as a statement of its own): the
          batch is an object that moves itself in place, whose `to()` may take no
          `non_blocking` (KPConv's collate classes); a tensor's copy would be lost;
        - (advice, no fix) the loader has a `collate_fn` of its own and a class of the project
          defines a `to()` that takes no `non_blocking` (maskrcnn-benchmark's `BoxList.to(self,
          device)`): a part of the batch may be one, and the keyword would raise;
        - the batch is on the GPU already (the dataset or `collate_fn` moves it there);
        - a copy of the batch is read with `.numpy()` later in the loop: NumPy cannot read a
          CUDA tensor, so the loop only runs where its device is the CPU;
        - (advice, no fix) a blocking copy of a tensor the step made on the host follows in the
          same step (`targets = torch.tensor(mlb.transform(targets.numpy()))`, then
          `targets.to(device)`; `target.type(torch.LongTensor).cuda()`; a transposed or permuted
          part of the batch, `points.transpose(2, 1).cuda()`, which is made contiguous in pageable
          memory before it is copied): from pageable memory the host waits for it, and for every
          copy queued before it;
        - (advice, no fix) the copied tensor is a strided view of the batch (`ids[:, :-1]`,
          `targets[:, 1:, :]`): torch first copies it into a new, unpinned host tensor, so the
          copy blocks even when asked not to (copy the whole tensor, then slice on the GPU);
        - (advice, no fix) the script sets `CUDA_LAUNCH_BLOCKING=1` (a debugging switch left in
          Dinomaly's scripts): every CUDA call waits for the GPU, and a non-blocking copy overlaps
          nothing;
        - (advice, no fix) the loader does not set `pin_memory` and ADV101 leaves pinning it as
          advice (`pin_memory` commented out in the call, no workers on batches not known to be
          large): from pageable memory a non-blocking copy still waits;
        - the loader does not pin and ADV101 leaves it so, also where it is built in another file
          that a run over the folder leaves out by default (`test_utils.py`): over tensors held in memory
          (a `TensorDataset`, a dataset class that only indexes tensors it holds) a
          non-blocking copy from pageable memory gains nothing, and ADV105 is the advice.
    """
    valid = [
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            device = "cuda:0" if torch.cuda.is_available() else "cpu"
            loader = DataLoader(eval_set, batch_size=1, pin_memory=True)
            for inputs, labels in loader:
                inputs, labels = inputs.to(device), labels.to(device)
                preds = model(inputs)
                labels = labels.to(device)
                show(inputs.numpy(), labels)
            """,
            note="`inputs.numpy()` after the copy: the loop only runs on the CPU",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64, shuffle=True, pin_memory=False)
            for x, y in loader:
                x, y = x.to("cuda"), y.to("cuda")
            """,
            note="pinning turned off on purpose: the copies stay as they are",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=32, pin_memory=True)
            for batch_x, batch_y in loader:
                batch_x = batch_x.float().to("cuda", non_blocking=True)
                batch_y = batch_y.float().to("cuda", non_blocking=True)
                outputs = model(batch_x)
                batch_y = batch_y[:, -pred_len:].to("cuda")
            """,
            note="`batch_y` is on the GPU already when it is sliced and moved again (Time-Series-Library)",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=32, pin_memory=True)
            for batch_x, batch_y in loader:
                batch_y = batch_y.float().to("cuda", non_blocking=True)
                if partial_train:
                    batch_y = batch_y[:, :, start:end]
                outputs = model(batch_x.to("cuda", non_blocking=True))
                batch_y = batch_y[:, -pred_len:].to("cuda")
            """,
            note="a slice, under an `if`, of the GPU copy is still on the GPU (iTransformer)",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=32, pin_memory=True)
            for img, label in loader:
                img = torch.cat([img, img.flip(dims=[-1])], dim=0)
                img = img.to("cuda")
            """,
            note="the tensor copied is a new one the loop made, not the pinned batch (U-ViT)",
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator
            from torch.utils.data import DataLoader

            accelerator = Accelerator()
            train_loader = DataLoader(train_set, batch_size=16, pin_memory=True)
            model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
            for batch in train_loader:
                batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            """,
            note="Accelerate prepares the loader",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            device = torch.device("cuda")
            loader = DataLoader(train_set, batch_size=64, pin_memory=True)
            for images, labels in loader:
                images = images.to(device, non_blocking=True).to(torch.float16)
                labels = labels.to(torch.long)
                model.to(device)
                logits = model(images)
                logits.to(device)
            """,
            note="already non-blocking; dtype conversions; not the batch",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            device = "cpu"
            model = model.cuda()
            loader = DataLoader(train_set, batch_size=64, pin_memory=True)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
            """,
            note="the device resolves to the CPU",
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            kwargs = {"batch_size": 64}
            if torch.cuda.is_available():
                kwargs.update({"num_workers": 1, "pin_memory": True})
            loader = DataLoader(train_set, **kwargs)
            for data, target in loader:
                data, target = data.to("cuda"), target.to("cuda")
            """,
            note="pinning set at run time: unknown",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64, num_workers=3, pin_memory=True)
            for step, batch in enumerate(loader):
                age_ids, input_ids, targets = batch
                targets = torch.tensor(mlb.transform(targets.numpy()), dtype=torch.float32)
                age_ids = age_ids.to("cuda")
                input_ids = input_ids.to("cuda")
                targets = targets.to("cuda")
                loss = model(input_ids, age_ids, labels=targets)
                loss.backward()
            """,
            count=2,
            note="a tensor made on the host is copied blocking after the batch: it waits for the batch's copies, advice only (BEHRT)",
        ),
        Invalid(
            """
            import torch
            from torch.autograd import Variable
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=8, pin_memory=True)
            for batch in loader:
                inputs = torch.unsqueeze(batch["input"], 1)
                inputs = Variable(inputs, requires_grad=True)
                inputs = inputs.cuda()
                model(inputs).sum().backward()
            """,
            fixed="""
            import torch
            from torch.autograd import Variable
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=8, pin_memory=True)
            for batch in loader:
                inputs = torch.unsqueeze(batch["input"], 1)
                inputs = Variable(inputs, requires_grad=True)
                inputs = inputs.cuda(non_blocking=True)
                model(inputs).sum().backward()
            """,
            note="`torch.unsqueeze` and `Variable` keep the pinned storage (s4's speech-commands trainer)",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
            data_iter = iter(loader)
            for step in range(max_steps):
                try:
                    batch = next(data_iter)
                except StopIteration:
                    data_iter = iter(loader)
                    batch = next(data_iter)
                x, y = [t.to("cuda") for t in batch]
                model(x, y).backward()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
            data_iter = iter(loader)
            for step in range(max_steps):
                try:
                    batch = next(data_iter)
                except StopIteration:
                    data_iter = iter(loader)
                    batch = next(data_iter)
                x, y = [t.to("cuda", non_blocking=True) for t in batch]
                model(x, y).backward()
            """,
            note="batches drawn with `next()` from an iterator over the loader (minGPT's trainer)",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = cycle(DataLoader(train_set, batch_size=4, pin_memory=True))
            while True:
                data = next(loader).to("cuda")
                model(data).backward()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            loader = cycle(DataLoader(train_set, batch_size=4, pin_memory=True))
            while True:
                data = next(loader).to("cuda", non_blocking=True)
                model(data).backward()
            """,
            note="`next(loader)` copied as it is drawn",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            device = torch.device("cuda")
            loader = DataLoader(mnist, batch_size=100, shuffle=True, pin_memory=True)
            for images, labels in loader:
                images = images.reshape(-1, 28 * 28).to(device)
                model(images).sum().backward()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            device = torch.device("cuda")
            loader = DataLoader(mnist, batch_size=100, shuffle=True, pin_memory=True)
            for images, labels in loader:
                images = images.reshape(-1, 28 * 28).to(device, non_blocking=True)
                model(images).sum().backward()
            """,
            note="a reshaped batch is a view of the same pinned memory",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4)
            for x, y in loader:
                x, y = x.to("cuda"), y.to("cuda")
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4)
            for x, y in loader:
                x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
            """,
            count=2,
            note="a loader that does not set `pin_memory`: ADV101 pins it, and its copies go with it",
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(
                train_set,
                batch_size=64,
                num_workers=4,
                # pin_memory=True
            )
            for x, y in loader:
                x, y = x.cuda(), y.cuda()
            """,
            count=2,
            note="`pin_memory` commented out in the call (proxynca_pp): ADV101 leaves the pinning as advice, and so do its copies",
        ),
        Invalid(
            """
            import torch
            import torch.utils.data

            device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
            trainloader = torch.utils.data.DataLoader(trainset, batch_size=4, shuffle=True, num_workers=2, pin_memory=True)
            for epoch in range(2):
                for i, data in enumerate(trainloader, 0):
                    inputs, labels = data[0].to(device), data[1].to(device)
                    optimizer.zero_grad()
            """,
            fixed="""
            import torch
            import torch.utils.data

            device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
            trainloader = torch.utils.data.DataLoader(trainset, batch_size=4, shuffle=True, num_workers=2, pin_memory=True)
            for epoch in range(2):
                for i, data in enumerate(trainloader, 0):
                    inputs, labels = data[0].to(device, non_blocking=True), data[1].to(device, non_blocking=True)
                    optimizer.zero_grad()
            """,
            count=2,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader
            from tqdm.auto import tqdm

            loader = DataLoader(tokenized, batch_size=8, collate_fn=collator, pin_memory=True)
            model.to("cuda")
            for batch in tqdm(loader, desc="train"):
                batch = {k: v.to("cuda") for k, v in batch.items()}
                outputs = model(**batch)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader
            from tqdm.auto import tqdm

            loader = DataLoader(tokenized, batch_size=8, collate_fn=collator, pin_memory=True)
            model.to("cuda")
            for batch in tqdm(loader, desc="train"):
                batch = {k: v.to("cuda", non_blocking=True) for k, v in batch.items()}
                outputs = model(**batch)
            """,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            def train(model, train_loader, optimizer):
                for x, y in train_loader:
                    x, y = x.cuda(), y.cuda(non_blocking=False)
                    optimizer.zero_grad()

            use_cuda = not no_cuda and torch.cuda.is_available()
            train_loader = DataLoader(train_set, batch_size=64, pin_memory=use_cuda)
            train(model, train_loader, optimizer)
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            def train(model, train_loader, optimizer):
                for x, y in train_loader:
                    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                    optimizer.zero_grad()

            use_cuda = not no_cuda and torch.cuda.is_available()
            train_loader = DataLoader(train_set, batch_size=64, pin_memory=use_cuda)
            train(model, train_loader, optimizer)
            """,
            count=2,
            note="pinned whenever CUDA is there; loader handed to a function by name",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.method_calls("to", "cuda", "type") or not ctx.facts.devices.gpu.yes:
            return  # no copy to report
        reported: set[cst.Call] = set()
        batches = ctx.facts.batches
        for scope, source in batches.scopes:
            unpinned = self._unpinned(ctx, source)
            if unpinned is None or batches.read_as_numpy(scope):
                continue
            for call, scope in batches.copies(scope):
                func = call.func
                if call in reported or not blocking_copy(ctx, call):
                    continue
                reported.add(call)
                copy = f"`.{func.attr.value}()`"
                requires = [("torch", "0.4")]  # ``async=True`` before 0.4
                if ctx.facts.loaders.may_yield_batch_encoding(source, scope.loop, func.value):
                    # The batch may be a tokenizer's ``BatchEncoding``, whose ``.to()`` takes
                    # ``non_blocking`` from transformers 4.48 on (contrastors pins 4.45.2).
                    requires.append(("transformers", "4.48"))
                fix = self.fix(
                    "Pass `non_blocking=True`", Edit(call, set_keyword(call, "non_blocking", "True")), requires=requires
                )
                if unpinned == "no workers":
                    # From pageable memory a non-blocking copy still blocks: the edit waits for the pinning.
                    fix = None
                    message = (
                        f"Batch copied to the GPU with a blocking {copy} from a DataLoader without worker processes "
                        f"that does not pin its memory: give it workers (ADV102), then pin it (ADV101) and pass "
                        f"`non_blocking=True`, so the copy overlaps host work; advice until then (guide: {GUIDE})"
                    )
                elif unpinned not in ("pinned", "pinned by ADV101"):
                    fix = None
                    message = (
                        f"Batch copied to the GPU with a blocking {copy} from a DataLoader that does not pin its "
                        f"memory: pin it (ADV101) and pass `non_blocking=True`, so the copy overlaps host work; "
                        f"ADV101 leaves the pinning as advice ({unpinned}), so this is advice too (guide: {GUIDE})"
                    )
                elif unpinned == "pinned by ADV101":
                    message = (
                        f"Batch copied to the GPU with a blocking {copy} from a DataLoader that does not pin its "
                        f"memory (ADV101): pin the loader and pass `non_blocking=True`, so the copy overlaps "
                        f"host work (guide: {GUIDE})"
                    )
                else:
                    message = (
                        f"Batch from a pinned DataLoader copied with a blocking {copy}: pass `non_blocking=True` "
                        f"so the copy overlaps host work (guide: {GUIDE})"
                    )
                finding = self.report(call, message, fix)
                refusing = next(
                    (found for owner, c in ctx.facts.loaders.feeding(source) or () if (found := owner.refuses_non_blocking(c))),
                    None,
                )
                if fix is not None and refusing is not None:
                    # graph-rcnn: ``targets = [target.to(device) for target in targets]``, each a
                    # ``BoxList`` whose ``to(self, device)`` raises on ``non_blocking``.
                    finding.as_advice(
                        f"the loader's own `collate_fn` may batch objects of the project, and `{refusing}` takes no "
                        f"`non_blocking`, so the fix is left as advice"
                    )
                waiting = batches.blocking_host_copy_after(scope, call) if fix is not None else None
                if waiting is not None:
                    # BEHRT: ``targets = torch.tensor(mlb.transform(targets.numpy()))``, then a
                    # blocking ``targets.to(device)``, which waits for the copies queued before it.
                    finding.as_advice(
                        f"the step also copies a tensor made on the host with a blocking "
                        f"`{ctx.snippet(waiting)}` (line {ctx.position(waiting)[0]}), which the host waits for: "
                        f"pin that one too, or the non-blocking copy overlaps nothing, so the fix is left as advice"
                    )
                moved_module = _helper_also_moves_a_model(ctx, call) if fix is not None else None
                if moved_module is not None:
                    # GCE-GNN: ``trans_to_cuda(variable)`` copies the batches and, in main.py, the
                    # model; ``nn.Module.cuda()`` takes no ``non_blocking`` and raises.
                    finding.as_advice(
                        f"the copy is in a helper that also moves a model (`{moved_module}`), whose `.{func.attr.value}()` "
                        f"takes no `non_blocking`, so the fix is left as advice"
                    )
                if fix is not None and strided_view(func.value):
                    # minimal-llama's ``batch["input_ids"][:, :-1].to(device)``: torch copies a
                    # strided view into a new, contiguous and unpinned host tensor first, so the
                    # copy blocks anyway (and before torch 1.3 an asynchronous one raised on it,
                    # pytorch#10690: SemGCN's 1.1.0).
                    finding.as_advice(
                        f"`{ctx.snippet(func.value)}` is a strided view of the batch, which torch first copies into a "
                        f"new, unpinned host tensor, so the copy blocks even with `non_blocking=True`: copy the whole "
                        f"tensor without blocking, then slice it on the GPU; the fix is left as advice"
                    )
                if fix is not None and ctx.facts.devices.launch_blocking:
                    # Dinomaly: ``os.environ['CUDA_LAUNCH_BLOCKING'] = "1"`` in every script's ``__main__``.
                    finding.as_advice(
                        "the script sets `CUDA_LAUNCH_BLOCKING=1`, under which every CUDA call waits for the GPU and a "
                        "non-blocking copy overlaps nothing (drop that debugging switch first), so the fix is left as advice"
                    )
                if fix is not None and ctx.facts.devices.may_pick_mps:
                    # seed-vc: ``args.device = "mps"`` where Apple's GPU is found; there a non-blocking
                    # copy from pageable memory can read freed storage (pytorch#139550, #189690).
                    finding.as_advice(
                        "the script runs on Apple's MPS where it finds one, and a non-blocking copy to MPS can "
                        "corrupt data (pytorch#139550): pass `non_blocking=device.type == \"cuda\"` by hand"
                    )
                yield finding


    @staticmethod
    def _unpinned(ctx: FileContext, source: cst.BaseExpression) -> str | None:
        """How the loaders behind ``source`` hold their batches: ``"pinned"`` when every one pins
        them; ``"pinned by ADV101"`` when none sets ``pin_memory`` and ADV101 pins them (in this
        file or the one that builds it); ``"no workers"`` when ADV101 leaves them as advice for
        want of workers (batches without workers that nothing shows to be large); why not, when
        it leaves them so for another reason (``pin_memory`` commented out:
        :meth:`~advisor.facts.loaders.LoaderFacts.pinning_withheld`); None otherwise (a choice made, batches
        already on the GPU, a framework placing them)."""
        facts = ctx.facts.loaders
        loaders = facts.feeding(source)
        if not loaders:
            return None
        if all(owner.pinned(c) for owner, c in loaders):
            state = "pinned"
        elif all(
            owner.pin_unset(c) and owner.pinnable(c) and owner.ctx.facts.devices.gpu.yes and not _left_out(ctx, owner.ctx)
            for owner, c in loaders
        ):
            # ADV101 pins it: the copies go with it, in the same run; or, without workers on batches
            # not known to be large, both wait for the workers.
            withheld = next((reason for owner, c in loaders if (reason := owner.pinning_withheld(c))), None)
            if withheld is None:
                state = "pinned by ADV101"
            elif not all(owner.pinning_pays(c) for owner, c in loaders):
                state = "no workers"  # the usual reason, said the usual way
            else:
                state = withheld
        else:
            return None
        if any(owner.dataset_on_gpu(c) for owner, c in loaders):
            return None  # the batch is on the GPU already: its ``.to()`` copies nothing
        spellings = {dotted_name(source), *(owner.name(c) for owner, c in loaders if owner is facts)}
        if any(facts.handed_to_framework(spelling) for spelling in spellings):
            return None
        return state


def _left_out(ctx: FileContext, owner: FileContext) -> bool:
    """``owner`` is another file, one that a run over the folder leaves out by default (CNO's
    ``test_and_fine_tune_utils/test_utils.py`` builds the loader ``TestCNO_ALL.py`` copies from;
    ``test_*.py`` is a default exclusion): ADV101 does not pin its loader there."""
    return owner is not ctx and ctx.project is not None and ctx.project.project.is_test_code(owner.path)


# -- ADV104 ------------------------------------------------------------------------------------


def _set_elsewhere(ctx: FileContext, setting: str) -> bool:
    """``args.dataloader_num_workers = 8``, ``args.set_dataloader(...)`` or
    ``dataclasses.replace(args, dataloader_num_workers=...)`` change the value after construction."""
    if any(key.endswith("." + setting) for key in ctx.attribute_assignments):
        return True
    if ctx.method_calls("set_dataloader"):
        return True
    return any(ctx.keyword_arg(call, setting) for call in ctx.calls("dataclasses.replace"))


def _device_collator_in_file(ctx: FileContext) -> bool:
    """``Trainer(data_collator=...)`` (or any ``collate_fn=``) given a collator of the file that
    moves batches to a device."""
    return any(
        arg.keyword is not None
        and arg.keyword.value in ("data_collator", "collate_fn")
        and ctx.facts.loaders.callable_moves_to_device(arg.value)
        for arg in ctx.nodes(cst.Arg)
    )


class TrainerDataLoaderSettings(Rule):
    code = "ADV104"
    name = "trainer-dataloader-settings"
    summary = "`TrainingArguments` load data in the main process or turn off pinned memory."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        The `Trainer` builds its DataLoaders from `TrainingArguments`. The guide's *Data
        preloading* section: "When using `Trainer`, the corresponding `TrainingArguments`
        are: `dataloader_pin_memory` (`True` by default), and `dataloader_num_workers`
        (defaults to `0`)". With 0 workers every batch is tokenized, collated and padded
        in the training process while the GPU waits; with pinning off, host-to-device
        copies are slower. The guide's example sets `dataloader_pin_memory=True` and
        `dataloader_num_workers=4`.

        Setting workers is unsafe because workers are separate processes: under the
        *spawn* start method they re-import the main script, so worker settings are
        only written where the script guards its entry point with
        `if __name__ == "__main__":`, and they pay only where a sample costs something to
        load, which the code rarely shows: a fix that sets workers is measured
        (`advisor fix --verify --unsafe-fixes` applies it and keeps it where the run is
        faster). A fix that only turns an explicit `dataloader_pin_memory=False` back on is
        unsafe: it reverses the author's choice.
    """
    example = """
        args = TrainingArguments(output_dir="out", per_device_train_batch_size=16, bf16=True)
    """
    use_instead = """
        args = TrainingArguments(
            output_dir="out", per_device_train_batch_size=16, bf16=True,
            dataloader_num_workers=4, dataloader_pin_memory=True,
        )
    """
    silent_when = """
        - the arguments are built from a dict that cannot be read (`TrainingArguments(**vars(args))`,
          `TrainingArguments(**config)` loaded from a file) or parsed from the command line
          (`HfArgumentParser(...).parse_args_into_dataclasses()`);
        - training runs on the CPU (`use_cpu=True`, `no_cuda=True`) or that choice cannot be read;
        - `dataloader_num_workers` resolves above 0, or cannot be read;
        - the file changes the settings after construction (`args.dataloader_num_workers = 8`,
          `args.set_dataloader(...)`, `dataclasses.replace(...)`);
        - a `data_collator` of the file moves batches to the GPU (pinning GPU tensors fails,
          and a forked worker cannot use CUDA);
        - (workers only) the file streams its data: an `IterableDataset`, TRL's packed
          `ConstantLengthDataset`, or `load_dataset(..., streaming=...)` that is on or chosen on
          the command line. Each worker would replay the stream unless the dataset shards itself.
    """
    valid = [
        Valid(
            """
            import argparse
            from transformers import Trainer, TrainingArguments

            parser = argparse.ArgumentParser()
            parser.add_argument("--output_dir", default="out")
            args = parser.parse_args()
            training_args = TrainingArguments(**vars(args))
            """,
            note="settings from the command line",
        ),
        Valid(
            """
            import json
            from transformers import TrainingArguments

            with open("train_config.json") as handle:
                config = json.load(handle)
            training_args = TrainingArguments(**config)
            """,
            note="settings from a config file",
        ),
        Valid(
            """
            from transformers import HfArgumentParser, Trainer, TrainingArguments

            parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
            model_args, data_args, training_args = parser.parse_args_into_dataclasses()
            trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset)
            """,
            note="parsed from the command line: nothing to flag",
        ),
        Valid(
            """
            from transformers import TrainingArguments

            args = TrainingArguments(output_dir="out", use_cpu=True)
            """,
            note="CPU training",
        ),
        Valid(
            """
            import os
            from transformers import TrainingArguments

            NUM_WORKERS = 8
            args = TrainingArguments(output_dir="out", dataloader_num_workers=NUM_WORKERS)
            eval_args = TrainingArguments(output_dir="out", dataloader_num_workers=os.cpu_count())
            """,
        ),
        Valid(
            """
            from transformers import TrainingArguments

            args = TrainingArguments(output_dir="out", per_device_train_batch_size=8)
            args.dataloader_num_workers = 8
            """,
            note="set after construction",
        ),
        Valid(
            """
            import argparse
            from datasets import load_dataset
            from transformers import TrainingArguments
            from trl import SFTTrainer
            from trl.trainer import ConstantLengthDataset

            parser = argparse.ArgumentParser()
            parser.add_argument("--streaming", action="store_true")
            args = parser.parse_args()
            data = load_dataset("lvwerra/stack-exchange-paired", split="train", streaming=args.streaming)
            train_dataset = ConstantLengthDataset(tokenizer, data, seq_length=1024)
            training_args = TrainingArguments(output_dir="out", bf16=True)
            trainer = SFTTrainer(model=model, args=training_args, train_dataset=train_dataset)
            """,
            note="a packed iterable dataset, streamed when the command line says so: workers would replay it",
        ),
    ]
    invalid = [
        Invalid(
            """
            from transformers import Trainer, TrainingArguments

            def main():
                args = TrainingArguments(
                    output_dir="out",
                    per_device_train_batch_size=16,
                    bf16=True,
                )
                Trainer(model=model, args=args, train_dataset=train_dataset).train()

            if __name__ == "__main__":
                main()
            """,
            fixed="""
            from transformers import Trainer, TrainingArguments

            def main():
                args = TrainingArguments(
                    output_dir="out",
                    per_device_train_batch_size=16,
                    bf16=True,
                    dataloader_num_workers=4,
                )
                Trainer(model=model, args=args, train_dataset=train_dataset).train()

            if __name__ == "__main__":
                main()
            """,
        ),
        Invalid(
            """
            import transformers

            if __name__ == "__main__":
                args = transformers.Seq2SeqTrainingArguments("out", dataloader_num_workers=0, dataloader_pin_memory=False)
            """,
            fixed="""
            import transformers

            if __name__ == "__main__":
                args = transformers.Seq2SeqTrainingArguments("out", dataloader_num_workers=4, dataloader_pin_memory=True)
            """,
        ),
        Invalid(
            """
            from transformers import TrainingArguments

            args = TrainingArguments(output_dir="out", dataloader_pin_memory=False)
            """,
            fixed="""
            from transformers import TrainingArguments

            args = TrainingArguments(output_dir="out", dataloader_pin_memory=True)
            """,
            note="no `__main__` guard: pinning is fixed (unsafe: it reverses an explicit setting), workers are advice",
        ),
        Invalid(
            """
            from transformers import AutoModelForCausalLM
            from trl import SFTConfig

            def build():
                defaults = dict(output_dir="out", learning_rate=2e-5)
                return SFTConfig(**defaults)

            if __name__ == "__main__":
                build()
            """,
            fixed="""
            from transformers import AutoModelForCausalLM
            from trl import SFTConfig

            def build():
                defaults = dict(output_dir="out", learning_rate=2e-5)
                return SFTConfig(dataloader_num_workers=4, **defaults)

            if __name__ == "__main__":
                build()
            """,
            note="visible dict behind `**`",
        ),
        Invalid(
            """
            import argparse
            from transformers import TrainingArguments

            def main():
                parser = argparse.ArgumentParser()
                parser.add_argument("--num_workers", type=int, default=0)
                cli = parser.parse_args()
                args = TrainingArguments(output_dir="out", dataloader_num_workers=cli.num_workers)

            if __name__ == "__main__":
                main()
            """,
            fixed=None,
            note="argparse default 0: advice to change the default",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        # A collator of the file that returns GPU tensors: pinning them fails, workers cannot use CUDA.
        if _device_collator_in_file(ctx):
            return
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            if not ctx.facts.devices.framework_setting(call).gpu:
                continue
            problems: list[str] = []
            advice: list[str] = []
            updated = call

            pin = ctx.argument(call, "dataloader_pin_memory")
            if pin is not None and pin is not MISSING and not _set_elsewhere(ctx, "dataloader_pin_memory"):
                value = ctx.values.resolve(pin)
                if value is not None and value.value is False and value.origin != "argparse default":
                    problems.append(
                        "`dataloader_pin_memory=False` copies batches from pageable memory (the fix overrides "
                        "an explicit setting)"
                    )
                    if any(arg.value is value.node for arg in call.args):
                        updated = _replace_argument(updated, value.node, "True")
                    else:
                        advice.append("set `dataloader_pin_memory=True` where it is defined")

            workers = ctx.argument(call, "dataloader_num_workers")
            # Workers would replay a streamed dataset unless it shards itself: no advice there.
            streams = ctx.facts.loaders.file_streams_data
            if workers is not None and not streams and not _set_elsewhere(ctx, "dataloader_num_workers"):
                value = None if workers is MISSING else ctx.values.resolve(workers)
                if workers is MISSING or (value is not None and _is_zero(value)):
                    if value is None:
                        detail = "`dataloader_num_workers` not set (default 0)"
                    elif value.origin == "argparse default":
                        detail = _default_phrase(ctx, value, "dataloader_num_workers")
                    else:
                        detail = "`dataloader_num_workers=0`"
                    problems.append(f"{detail}, the Trainer loads batches in the training process")
                    wanted = f"`dataloader_num_workers={SUGGESTED_WORKERS}`"
                    if value is not None and not any(arg.value is value.node for arg in call.args):
                        from_argparse = value.origin == "argparse default"
                        where = "make its default" if from_argparse else "set it where it is defined to"
                        advice.append(f"{where} {SUGGESTED_WORKERS}")
                    elif not ctx.facts.loaders.spawn_safe(call):
                        advice.append(
                            f"set {wanted} once the entry point runs under `if __name__ == \"__main__\":` "
                            "(worker processes re-import the script)"
                        )
                    elif updated is not call:
                        # Pinning back on is unsafe, workers are measured: one fix each, the pin
                        # first; the workers' fix comes in the next round, where it is measured.
                        advice.append(f"then {wanted}")
                    else:
                        if value is None:
                            added = keyword_arg("dataloader_num_workers", str(SUGGESTED_WORKERS))
                            updated = append_args(updated, [added])
                        else:
                            updated = _replace_argument(updated, value.node, str(SUGGESTED_WORKERS))

            if not problems:
                continue
            callee = ctx.code(call.func).split(".")[-1]
            message = f"`{callee}`: " + "; ".join(problems)
            fix = None
            if updated is not call:
                changed = _settings_changed(call, updated)
                message += f"; set {changed}"
                # Workers change the process model, and pay only where samples cost something to
                # load (measured); pinning memory here reverses an explicit
                # ``dataloader_pin_memory=False`` (the default pins): the author's choice.
                workers = "dataloader_num_workers" in changed
                fix = self.fix(
                    f"Set {changed}",
                    Edit(call, updated),
                    applicability=Applicability.MEASURED if workers else Applicability.UNSAFE,
                )
            if advice:
                message += "; " + "; ".join(advice)
            yield self.report(self.at_keyword(call, "dataloader_pin_memory", "dataloader_num_workers"), f"{message} (guide: {GUIDE})", fix)


def _settings_changed(before: cst.Call, after: cst.Call) -> str:
    """The keywords a fix writes, as the message shows them (``dataloader_num_workers=4``)."""
    old = {arg.keyword.value: cst.Module([]).code_for_node(arg.value) for arg in before.args if arg.keyword}
    new = [
        f"`{arg.keyword.value}={cst.Module([]).code_for_node(arg.value)}`"
        for arg in after.args
        if arg.keyword and old.get(arg.keyword.value) != cst.Module([]).code_for_node(arg.value)
    ]
    return " and ".join(new)


def _helper_also_moves_a_model(ctx: FileContext, copy: cst.Call) -> str | None:
    """Where ``copy`` moves a parameter of the function around it (``def trans_to_cuda(variable):
    return variable.cuda()``), a call of that function, in its file or a file importing it, that
    passes a model: ``trans_to_cuda(CombineGraph(...))`` (as the caller spells it)."""
    from advisor.facts.branches import calls_of
    from advisor.facts.models import model_build_kind, trace_builds

    receiver = copy.func.value if isinstance(copy.func, cst.Attribute) else None
    bound = ctx.parameter_of(receiver) if isinstance(receiver, cst.Name) else None
    if bound is None:
        return None
    param, function, position = bound
    for other, call in calls_of(ctx, function):
        passed = other.argument(call, param.name.value, position)
        if isinstance(passed, cst.Call) and model_build_kind(other, passed) is not None:
            return other.snippet(call)
        spelling = dotted_name(passed) if isinstance(passed, cst.BaseExpression) else None
        if spelling is not None and trace_builds(other, spelling, call):
            return other.snippet(call)
    return None
