"""`advisor fix --verify --launcher "torchrun --nproc_per_node 2"`: every variant runs as two
processes over gloo on the CPU, with real torch and its real launcher."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from test_verify import environment, options

from advisor.engine import Settings
from advisor.registry import all_rules
from advisor.targets import ASSUMED
from advisor.verify.runner import combine_ranks, launcher_command, verify

# A DDP script as torchrun runs it: the rank and world from the environment, a sharded loader.
DDP_SCRIPT = '''\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if torch.cuda.is_available() else torch.device("cpu")
    x = torch.randn(1024, 8)
    y = x @ torch.randn(8, 1)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=16, sampler=sampler)
    model = DDP(torch.nn.Linear(8, 1).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs.to(device)), targets.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def test_launcher_words_run_with_this_interpreter():
    import sys

    assert launcher_command(["torchrun", "--nproc_per_node", "2"]) == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"
    ]
    assert "--standalone" not in launcher_command(["torchrun", "--master_port=29600", "--nproc_per_node", "2"])
    assert launcher_command(["accelerate", "launch", "--num_processes", "2"])[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert launcher_command(["mpirun", "-n", "2", "python"]) == ["mpirun", "-n", "2", "python"]


def test_ranks_combine_into_the_slowest_rank_and_rank_zero_losses():
    fast = {"status": "ok", "steps": 5, "step_times_ms": [10.0, 10.0, 10.0], "losses": [1.0, 0.5], "completed": True,
            "peak_memory_bytes": 100, "window_samples": 48}
    slow = {"status": "ok", "steps": 5, "step_times_ms": [12.0, 9.0, 15.0], "losses": [9.0, 9.0], "completed": True,
            "peak_memory_bytes": 300, "window_samples": 48}
    run = combine_ranks([fast, slow])
    assert run["step_times_ms"] == [12.0, 10.0, 15.0] and run["losses"] == [1.0, 0.5]
    assert run["peak_memory_bytes"] == 300 and run["window_samples"] == 96 and run["ranks"] == 2
    broken = combine_ranks([fast, {**slow, "status": "error", "error": "rank 1 broke", "steps": 2}])
    assert broken["status"] == "error" and broken["error"] == "rank 1 broke" and broken["rank_steps"] == [5, 2]


def test_verify_through_torchrun_counts_steps_on_both_ranks(tmp_path):
    script = tmp_path / "train_ddp.py"
    script.write_text(DDP_SCRIPT)
    env = environment(tmp_path)
    env.update(MASTER_ADDR="127.0.0.1")
    settings = Settings(codes=frozenset(r.code for r in all_rules()), target=ASSUMED)
    outcome = verify(
        str(script), settings,
        options(tmp_path, steps=3, warmup=1, baseline_runs=1, timeout=180, env=env,
                launcher=("torchrun", "--nproc_per_node", "2")),
    )
    report = outcome.report
    assert report["launcher"] == "torchrun --nproc_per_node 2"
    for side in ("baseline", "patched"):
        run = report[side]
        assert run["status"] == "ok", run.get("error") or run.get("output")
        assert run["ranks"] == 2 and run["rank_steps"] == [4, 4]
        assert run["completed"]
    assert report["applied"], report["verdict"]
    assert "fused=True" in script.read_text()


def test_accelerate_launch_runs_every_rank(tmp_path):
    """`accelerate launch --multi_gpu --num_processes 2` (torch's launcher underneath, on the CPU
    here): both ranks run the harness and count their steps."""
    pytest.importorskip("accelerate")
    from advisor.verify.runner import run_variant

    script = tmp_path / "train_ddp.py"
    script.write_text(DDP_SCRIPT)
    run = run_variant(
        str(script), str(script),
        options(tmp_path, steps=3, warmup=1, timeout=180, launcher=("accelerate", "launch", "--multi_gpu", "--num_processes", "2")),
        "baseline",
    )
    assert run["status"] == "ok", run.get("error") or run.get("output")
    assert run["ranks"] == 2 and run["rank_steps"] == [4, 4]
