"""Qualified names from a cheap import-alias table.

LibCST's QualifiedNameProvider runs full scope analysis, which costs several times
the parse itself. Training scripts bind library names through imports, so a table of
import aliases resolves ``nn.Linear``, ``DL`` or ``optim.AdamW`` to their qualified
names at a fraction of the cost. Names bound by anything other than an import
(locals, parameters) have no qualified name here, which is what rules want.
"""
from __future__ import annotations

import libcst as cst

# Public re-exports and their implementation paths, folded to one spelling so that a
# rule matches ``torch.utils.data.DataLoader`` however the file imported it.
CANONICAL_PREFIXES: dict[str, str] = {
    "torch.utils.data.dataloader.DataLoader": "torch.utils.data.DataLoader",
    "torch.optim.adam.Adam": "torch.optim.Adam",
    "torch.optim.adamw.AdamW": "torch.optim.AdamW",
    "torch.optim.sgd.SGD": "torch.optim.SGD",
    "torch.amp.autocast_mode.autocast": "torch.autocast",
    "torch.amp.autocast": "torch.autocast",
    "torch.cuda.amp.autocast_mode.autocast": "torch.cuda.amp.autocast",
    "torch.cuda.amp.grad_scaler.GradScaler": "torch.cuda.amp.GradScaler",
    "torch.amp.grad_scaler.GradScaler": "torch.amp.GradScaler",
    "transformers.training_args.TrainingArguments": "transformers.TrainingArguments",
    "transformers.training_args_seq2seq.Seq2SeqTrainingArguments": "transformers.Seq2SeqTrainingArguments",
    "transformers.trainer.Trainer": "transformers.Trainer",
    "accelerate.accelerator.Accelerator": "accelerate.Accelerator",
    "pytorch_lightning": "lightning.pytorch",
    "lightning.Trainer": "lightning.pytorch.Trainer",
    "lightning.LightningModule": "lightning.pytorch.LightningModule",
    "lightning.Fabric": "lightning.fabric.Fabric",
    "torch.nn.modules.linear.Linear": "torch.nn.Linear",
}


def canonical(qualname: str) -> str:
    for prefix, replacement in CANONICAL_PREFIXES.items():
        if qualname == prefix or qualname.startswith(prefix + "."):
            return replacement + qualname[len(prefix):]
    return qualname


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def _module_name(node: cst.BaseExpression) -> str:
    name = dotted_name(node)
    return name or ""


class ImportTable:
    """Local alias -> qualified name, for every import in the file (any depth)."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        # Top-level ``import x`` / ``import x as y`` statements, for the fixer.
        self.module_aliases: dict[str, str] = {}

    def add(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = _module_name(alias.name)
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local = alias.asname.name.value
                    self.aliases[local] = full
                    self.module_aliases.setdefault(full, local)
                else:
                    head = full.split(".")[0]
                    self.aliases[head] = head
                    self.module_aliases.setdefault(head, head)
            return
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = _module_name(node.module)
        for alias in node.names:
            imported = _module_name(alias.name)
            local = imported
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.aliases[local] = f"{module}.{imported}"

    def qualname(self, node: cst.BaseExpression) -> str | None:
        name = dotted_name(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        target = self.aliases.get(head)
        if target is None:
            return None
        return canonical(f"{target}.{rest}" if rest else target)

    def local_name_for(self, qualname: str) -> str | None:
        """How this file spells ``qualname`` with the imports it already has, if it can."""
        for local, target in self.aliases.items():
            if canonical(target) == qualname:
                return local
        best: tuple[int, str] | None = None
        for local, target in self.aliases.items():
            if qualname.startswith(target + "."):
                candidate = local + qualname[len(target):]
                if best is None or len(target) > best[0]:
                    best = (len(target), candidate)
        return best[1] if best else None
