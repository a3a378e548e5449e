"""The facts layer: one model of the training program, shared by every rule.

Rules ask questions here instead of deriving their premises themselves. Each question has
one answer per file (computed once, on first use, and kept on the file's context):

- :mod:`advisor.facts.devices`: where work runs. Device expressions (``"cuda"``, an index,
  ``torch.device("cuda" if ... else "cpu")``, ``torch.accelerator``, ``LOCAL_RANK``,
  ``accelerator.device``), the frameworks' device settings, and the file's verdict: does
  it train on a CUDA GPU?
- :mod:`advisor.facts.frameworks`: who owns the training step: a hand-written loop, the HF
  ``Trainer`` (and TRL), Accelerate, Lightning, Fabric or DeepSpeed, and whether it runs.
- :mod:`advisor.facts.distributed`: several processes: the process group and its backend, the
  DDP / FSDP wraps a file makes itself, the samplers that shard the data.
- :mod:`advisor.facts.models`, :mod:`advisor.facts.loaders`, :mod:`advisor.facts.precision`,
  :mod:`advisor.facts.tensors`: the models trained and where, the DataLoaders and their
  roles, the precision regime, which expressions hold CUDA tensors.
- :mod:`advisor.facts.batches`: where a file holds a loader's batches and copies them to a GPU.

The answers to yes/no questions are tri-state (:class:`Answer`): yes, no or unknown, with the
node that decided it. A rule keeps its own policy for "unknown" (most stay silent).
"""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import libcst as cst

if TYPE_CHECKING:
    from advisor.context import FileContext

T = TypeVar("T")


class Tri(enum.Enum):
    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Answer:
    """A yes / no / unknown answer and the node (of this file, when there is one) that decided it."""

    tri: Tri
    evidence: cst.CSTNode | None = None
    because: str = ""

    @property
    def yes(self) -> bool:
        return self.tri is Tri.YES

    @property
    def no(self) -> bool:
        return self.tri is Tri.NO

    @property
    def unknown(self) -> bool:
        return self.tri is Tri.UNKNOWN

    def __bool__(self) -> bool:  # an Answer is not a bool: ask .yes / .no / .unknown
        raise TypeError("ask Answer.yes, .no or .unknown")


YES = Answer(Tri.YES)
NO = Answer(Tri.NO)
UNKNOWN = Answer(Tri.UNKNOWN)


def per_node(method: "Callable[[Any, cst.CSTNode], T]") -> "Callable[[Any, cst.CSTNode], T]":
    """A fact about one node of the file, computed once and kept on the facts object (which
    lives on the file's context): several rules, and each of a rule's fixes, ask it of the
    same loader or call."""
    name = method.__name__

    @functools.wraps(method)
    def kept(self: Any, node: cst.CSTNode) -> T:
        answers = self.__dict__.setdefault("_per_node", {})
        key = (name, node)
        try:
            return answers[key]
        except KeyError:
            value = answers[key] = method(self, node)
            return value

    return kept


def facts_of(ctx: "FileContext") -> "Facts":
    return ctx.facts


class Facts:
    """The facts about one file; each part is built on first use."""

    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx

    @property
    def devices(self):
        from advisor.facts.devices import DeviceFacts

        return self.ctx.memo(DeviceFacts, lambda: DeviceFacts(self.ctx))

    @property
    def loaders(self):
        from advisor.facts.loaders import LoaderFacts

        return self.ctx.memo(LoaderFacts, lambda: LoaderFacts(self.ctx))

    @property
    def batches(self):
        from advisor.facts.batches import BatchFacts

        return self.ctx.memo(BatchFacts, lambda: BatchFacts(self.ctx))

    @property
    def tensors(self):
        from advisor.facts.tensors import TensorFacts

        return self.ctx.memo(TensorFacts, lambda: TensorFacts(self.ctx))

    @property
    def steps(self):
        from advisor.facts.tensors import StepFacts

        return self.ctx.memo(StepFacts, lambda: StepFacts(self.ctx))

    @property
    def frameworks(self):
        from advisor.facts.frameworks import FrameworkFacts

        return self.ctx.memo(FrameworkFacts, lambda: FrameworkFacts(self.ctx))

    @property
    def distributed(self):
        from advisor.facts.distributed import DistributedFacts

        return self.ctx.memo(DistributedFacts, lambda: DistributedFacts(self.ctx))
