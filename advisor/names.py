"""Qualified names from a cheap import-alias table.

LibCST's QualifiedNameProvider runs full scope analysis, which costs several times
the parse itself. Training scripts bind library names through imports, so a table of
import aliases resolves ``nn.Linear``, ``DL`` or ``optim.AdamW`` to their qualified
names at a fraction of the cost. Names bound by anything other than an import
(locals, parameters) have no qualified name here, which is what rules want.
"""
from __future__ import annotations

from functools import lru_cache

import libcst as cst

# Names every module can read without binding them (its own attributes) and IPython's helpers:
# a read of one is no unbound name.
MODULE_NAMES = frozenset({
    "__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__", "__path__", "__builtins__",
    "__annotations__", "__cached__", "__debug__", "__dict__", "__class__", "get_ipython", "display",
})

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
    # where the class is defined (``from pytorch_lightning.trainer import Trainer``)
    "lightning.pytorch.trainer.trainer.Trainer": "lightning.pytorch.Trainer",
    "lightning.pytorch.trainer.Trainer": "lightning.pytorch.Trainer",
    "lightning.pytorch.core.module.LightningModule": "lightning.pytorch.LightningModule",
    "lightning.pytorch.core.LightningModule": "lightning.pytorch.LightningModule",
    "lightning.LightningModule": "lightning.pytorch.LightningModule",
    "lightning.Fabric": "lightning.fabric.Fabric",
    "lightning_fabric": "lightning.fabric",  # the standalone package
    "torch.nn.modules.linear.Linear": "torch.nn.Linear",
}


# Conventional spellings of library modules. A file that uses one of these names without binding
# it, next to ``from utils import *``, can only get it from the star import, and by convention it
# is this module (``utils.py`` did ``import torch.nn.functional as F``).
STAR_IMPORT_CONVENTIONS: dict[str, str] = {
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "optim": "torch.optim",
    "cudnn": "torch.backends.cudnn",
    "np": "numpy",
}
# Libraries whose star exports are their own functions, never those module aliases.
_STAR_EXPORTS_NO_ALIASES = ("torch", "numpy")


@lru_cache(maxsize=4096)
def canonical(qualname: str) -> str:
    # Up to three rewrites: ``pytorch_lightning.trainer.Trainer`` becomes
    # ``lightning.pytorch.trainer.Trainer``, then ``lightning.pytorch.Trainer``.
    for _ in range(3):
        for prefix, replacement in CANONICAL_PREFIXES.items():
            if qualname == prefix or qualname.startswith(prefix + "."):
                qualname = replacement + qualname[len(prefix):]
                break
        else:
            return qualname
    return qualname


_NAME, _ATTRIBUTE = cst.Name, cst.Attribute


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    # Class identity, not isinstance: LibCST's node classes are ABCs, whose failed isinstance
    # checks run in Python, and this is asked about every call of every file (neither class
    # has subclasses).
    node_type = node.__class__
    if node_type is _NAME:
        return node.value  # type: ignore[attr-defined]
    parts: list[str] = []
    while node_type is _ATTRIBUTE:
        parts.append(node.attr.value)  # type: ignore[attr-defined]
        node = node.value  # type: ignore[attr-defined]
        node_type = node.__class__
    if node_type is not _NAME:
        return None
    parts.append(node.value)  # type: ignore[attr-defined]
    parts.reverse()
    return ".".join(parts)


def _module_name(node: cst.BaseExpression) -> str:
    name = dotted_name(node)
    return name or ""


class ImportTable:
    """Local alias -> qualified name, for every import in the file (any depth)."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        # Top-level ``import x`` / ``import x as y`` statements, for the fixer.
        self.module_aliases: dict[str, str] = {}
        # Modules the file star-imports (``from utils.utils import *``), other than torch itself.
        self.star_modules: list[str] = []

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
        if isinstance(node.names, cst.ImportStar):
            module = "." * len(node.relative) + (_module_name(node.module) if node.module else "")
            if module.split(".")[0] not in _STAR_EXPORTS_NO_ALIASES and module not in self.star_modules:
                self.star_modules.append(module)
            return
        if node.relative or node.module is None:
            return
        module = _module_name(node.module)
        for alias in node.names:
            imported = _module_name(alias.name)
            local = imported
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.aliases[local] = f"{module}.{imported}"

    def assume_star_exports(self, unbound: set[str]) -> list[str]:
        """Resolve the conventional module names the file reads but never binds as those modules,
        when a star import is where they must come from. Returns the names added."""
        if not self.star_modules:
            return []
        added = [name for name in STAR_IMPORT_CONVENTIONS if name in unbound and name not in self.aliases]
        for name in added:
            self.aliases[name] = STAR_IMPORT_CONVENTIONS[name]
        return added

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
