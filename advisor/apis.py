"""Qualified names and signatures of the library APIs rules look for, in one place.

Spellings are canonical (see advisor.names.CANONICAL_PREFIXES): ``pytorch_lightning.Trainer``
and ``lightning.Trainer`` both arrive as ``lightning.pytorch.Trainer``.
"""
from __future__ import annotations

DATALOADER = "torch.utils.data.DataLoader"
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
DATALOADER_POSITION = {
    "dataset": 0,
    "batch_size": 1,
    "shuffle": 2,
    "sampler": 3,
    "batch_sampler": 4,
    "num_workers": 5,
    "collate_fn": 6,
    "pin_memory": 7,
}

# HF TrainingArguments and the TRL configs that subclass it (and keep its defaults).
TRAINING_ARGUMENTS = (
    "transformers.TrainingArguments",
    "transformers.Seq2SeqTrainingArguments",
    "trl.SFTConfig",
    "trl.DPOConfig",
    "trl.GRPOConfig",
    "trl.KTOConfig",
    "trl.ORPOConfig",
    "trl.CPOConfig",
    "trl.RewardConfig",
)
ACCELERATOR = "accelerate.Accelerator"
LIGHTNING_TRAINER = "lightning.pytorch.Trainer"
# Lightning 1.x also builds it from the command line: ``Trainer.from_argparse_args(opt, **kwargs)``.
LIGHTNING_TRAINER_BUILDERS = (LIGHTNING_TRAINER, f"{LIGHTNING_TRAINER}.from_argparse_args")
# Lightning's fp16 spellings of ``Trainer(precision=...)`` / ``Fabric(precision=...)``.
LIGHTNING_FP16 = (16, "16", "16-mixed", "16-true")
FABRIC = "lightning.fabric.Fabric"
TORCH_ADAM = ("torch.optim.Adam", "torch.optim.AdamW")
DATA_PARALLEL = ("torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel")
DISTRIBUTED_DATA_PARALLEL = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
)
