"""Does `pin_memory=True` pay on a DataLoader without worker processes?

ADV101 (pin the loader's memory) is advice, not a fix, where the loader has no workers: there
the loader pins each batch in the training process itself, right before the copy it is meant to
speed up. This bench measures that premise on a GPU instead of arguing it. For each batch shape
it times a training loop (a worker-less loader, the host-to-device copy, one small model step)
under the four settings of `pin_memory` x `non_blocking`, interleaved and repeated, and prints
one JSON object with the median seconds per step of each setting and its ratio to the plain
loader (pin_memory=False, non_blocking=False).

    python bench/loader/pinning_without_workers.py              # on a GPU
    python bench/loader/pinning_without_workers.py --tiny       # plumbing check on the CPU

The samples are decoded-image-sized float tensors (3 x 224 x 224, collated 64 at a time: 38 MB a
batch) and token rows (1024 int64 ids, 32 at a time), each built by a map-style data set from
tensors held in memory, as a script's own `Dataset.__getitem__` would hand them over.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class InMemorySamples(Dataset):
    """One sample per index, copied out of a tensor held in memory (as a decoded cache hands it)."""

    def __init__(self, store: torch.Tensor, length: int):
        self.store = store
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return self.store[index % len(self.store)].clone()


def image_model():
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )


def token_model():
    return nn.Sequential(nn.Embedding(50257, 256), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))


def time_loop(loader, model, optimizer, device, non_blocking, steps):
    """Seconds per step over ``steps`` steps, after two warm-up steps."""
    durations = []
    batches = iter(loader)
    for step in range(steps + 2):
        start = time.perf_counter()
        batch = next(batches)
        batch = batch.to(device, non_blocking=non_blocking)
        loss = model(batch).float().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= 2:
            durations.append(time.perf_counter() - start)
    return sum(durations) / len(durations)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiny", action="store_true", help="small shapes on the CPU")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    if args.tiny:
        shapes = {"images": ((3, 32, 32), 8, torch.float32), "tokens": ((64,), 4, torch.int64)}
        args.steps, args.repeats = 3, 2
    else:
        shapes = {"images": ((3, 224, 224), 64, torch.float32), "tokens": ((1024,), 32, torch.int64)}
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "steps": args.steps, "repeats": args.repeats, "cases": {}}
    for name, (sample_shape, batch_size, dtype) in shapes.items():
        if dtype is torch.int64:
            store = torch.randint(0, 50257, (256, *sample_shape))
            model = token_model().to(device)
        else:
            store = torch.randn(256, *sample_shape)
            model = image_model().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        dataset = InMemorySamples(store, length=batch_size * (args.steps + 2))
        settings = [(pin, nb) for pin in (False, True) for nb in (False, True)]
        seconds = {f"pin={pin},non_blocking={nb}": [] for pin, nb in settings}
        time_loop(DataLoader(dataset, batch_size=batch_size), model, optimizer, device, False, 2)  # first-call costs
        for _ in range(args.repeats):
            for pin, nb in settings:  # interleaved, so drift on the machine hits every setting alike
                loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, pin_memory=pin and device.type == "cuda")
                seconds[f"pin={pin},non_blocking={nb}"].append(time_loop(loader, model, optimizer, device, nb, args.steps))
        plain = statistics.median(seconds["pin=False,non_blocking=False"])
        result["cases"][name] = {
            "batch": [batch_size, *sample_shape], "dtype": str(dtype).replace("torch.", ""),
            "batch_mb": round(batch_size * store[0].numel() * store.element_size() / 1e6, 2),
            "ms_per_step": {key: round(1e3 * statistics.median(values), 3) for key, values in seconds.items()},
            "speed_vs_plain": {key: round(plain / statistics.median(values), 3) for key, values in seconds.items()},
        }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
