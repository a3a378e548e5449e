"""Which branch of an ``if``/``elif`` chain a script runs with its defaults.

Scripts often build alternatives in branches picked on the command line (``if args.test_mode:``
a tiny model, ``else:`` the real one; ``if args.model == "bert":`` ...). Where the tests resolve
with the defaults (argparse defaults included, :mod:`advisor.values`), a finding about "the"
model or "the" config points at the branch that runs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

import libcst as cst

if TYPE_CHECKING:
    from advisor.context import FileContext


def run_by_default(ctx: "FileContext", nodes: Sequence[cst.CSTNode]) -> cst.CSTNode | None:
    """Among ``nodes`` (alternatives in the branches of one ``if``/``elif`` chain), the last one
    in the branch the defaults take; None when they are not such alternatives, or the tests do
    not resolve."""
    if len(nodes) < 2:
        return None
    first = min(nodes, key=ctx.order.__getitem__)
    for head in if_chain_heads(ctx, first):
        branches = {id(node): branch_of(ctx, head, node) for node in nodes}
        if None in branches.values():
            continue
        if len(set(branches.values())) < 2:
            return None
        taken = taken_branch(ctx, head)
        chosen = [node for node in nodes if branches[id(node)] == taken]
        return max(chosen, key=ctx.order.__getitem__) if taken is not None and chosen else None
    return None


def if_chain_heads(ctx: "FileContext", node: cst.CSTNode) -> Iterator[cst.If]:
    """The ``if``/``elif`` chains around ``node`` in its function, innermost first, each by its
    first ``if``."""
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return
        if isinstance(ancestor, cst.If) and not isinstance(ctx.parent.get(ancestor), cst.If):
            yield ancestor


def branch_of(ctx: "FileContext", head: cst.If, node: cst.CSTNode) -> int | None:
    """Which branch of the chain starting at ``head`` holds ``node`` (None: outside the chain)."""
    branch: cst.CSTNode | None = head
    index = 0
    while isinstance(branch, (cst.If, cst.Else)):
        orelse = branch.orelse if isinstance(branch, cst.If) else None
        if ctx.is_descendant(node, branch) and not (orelse is not None and ctx.is_descendant(node, orelse)):
            return index
        branch = orelse
        index += 1
    return None


def taken_branch(ctx: "FileContext", head: cst.If) -> int | None:
    """Which branch of an ``if``/``elif`` chain runs when every test resolves (command-line
    defaults included); None when one cannot be told."""
    branch: cst.CSTNode | None = head
    index = 0
    while isinstance(branch, cst.If):
        value = ctx.values.resolve(branch.test)
        if value is None or not isinstance(value.value, (bool, int, str, type(None))):
            return None
        if value.value:
            return index
        branch = branch.orelse
        index += 1
    return index if isinstance(branch, cst.Else) else None
