"""ADV301-ADV305: the optimizer step (guide: "Gradient Accumulation", "Mixed precision training").

When the gradients are zeroed, when the optimizer steps and what the loss is divided
by decide whether a training loop trains at all, or trains with the batch it claims.
These rules read the shared training-loop model (``ctx.loops``): the backward,
``step()`` and ``zero_grad()`` events of each loop, in order, with the ``if``/``with``
statements around them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Sequence

import libcst as cst

from advisor.context import MISSING, FileContext
from advisor.loops import Event, MicroStepLoop, TrainingLoop, fixed_at_one, is_scaler
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Fix, Invalid, Rule, Valid
from advisor.facts.models import strip_same_module_methods
from advisor.facts.precision import SCALER_ENABLED_POSITION, SCALERS
from advisor.values import string_value

GUIDE = "Gradient Accumulation"

# ``torch.nn.functional`` functions that compute a loss.
_FUNCTIONAL_LOSSES = frozenset(
    {
        "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
        "gaussian_nll_loss", "cosine_embedding_loss", "ctc_loss", "hinge_embedding_loss",
        "margin_ranking_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss",
        "multi_margin_loss", "soft_margin_loss", "triplet_margin_loss", "triplet_margin_with_distance_loss",
    }
)
# How loss objects are usually named: ``criterion``, ``loss_fn``, HF's ``loss_fct``...
_CRITERION = re.compile(
    r"^(criterion\w*|\w*_criterion|loss_fn\w*|loss_fct|loss_func|loss_function|lossfn|loss_fcn|\w*_loss_fn|\w*_loss_fct)$",
    re.I,
)
# Names that count steps: the modulo of an accumulation condition is taken of one of them.
_COUNTER = re.compile(r"step|iter|idx|index|batch|^(i|j|it|n|t)$", re.I)


def applies_to(ctx: FileContext, zero: Event, optimizer: str, loop_optimizers: Sequence[str]) -> bool:
    """Whether a ``zero_grad()`` clears ``optimizer``'s gradients.

    ``model.zero_grad()`` names no optimizer: it is taken to clear the one optimizer of a
    loop that has exactly one (and none of a loop with several: GANs), unless the
    optimizer's constructor is in the file and is built from other parameters (a frozen
    teacher or encoder zeroed on its own).
    """
    if zero.target is not None:
        return zero.target == optimizer
    if list(loop_optimizers) != [optimizer]:
        return False
    func = zero.call.func
    receiver = dotted_name(func.value) if isinstance(func, cst.Attribute) else None
    if receiver is not None and _zeroes_part_of_a_called_model(ctx, zero.call, receiver):
        return False
    constructors = ctx.loops.optimizer_constructors(optimizer)
    if receiver is None or not constructors:
        return True
    return any(_built_from(ctx, constructor, receiver) for constructor in constructors)


def _zeroes_part_of_a_called_model(ctx: FileContext, zero: cst.Call, receiver: str) -> bool:
    """``model.generator.zero_grad()`` where the same function runs ``model``: one part of
    the model the backward ran through, zeroed to keep it out of the one optimizer's step
    (TranAD's MAD-GAN trains the discriminator, then the generator, with one optimizer;
    FL-bench's FedPAC zeroes ``self.model.base`` to train only the classifier). The model
    runs as ``model(d)``, through one of its methods (``self.model.get_last_features(x)``) or
    through a part (``self.model.classifier(features)``); ``self`` alone is no such model."""
    whole, _, part = receiver.rpartition(".")
    if not whole or whole == "self" or not part:
        return False
    function = ctx.enclosing(zero, cst.FunctionDef)
    scope = function if isinstance(function, cst.FunctionDef) else ctx.module
    prefix = whole + "."
    for call in ctx.walk(scope, cst.Call):
        if call is zero:
            continue
        name = dotted_name(call.func)
        if name is not None and (name == whole or name.startswith(prefix)) and not name.endswith(".zero_grad"):
            return True
    return False


def _built_from(ctx: FileContext, constructor: cst.Call, module: str) -> bool:
    """Whether the optimizer's parameters may come from ``module`` (``model.parameters()``,
    param groups built from ``model.named_parameters()``). Unknown counts as yes."""
    roots: list[cst.CSTNode] = [arg.value for arg in constructor.args]
    for arg in constructor.args:
        if isinstance(arg.value, cst.Name):
            bindings = ctx.lookup(arg.value.value, arg.value)
            if any(b.value is None for b in bindings):
                return True  # built in a way we do not follow
            roots.extend(b.value for b in bindings if b.value is not None)
    for root in roots:
        for node in ctx.walk(root, cst.Name) + ctx.walk(root, cst.Attribute):  # type: ignore[operator]
            spelling = dotted_name(node)
            if spelling and (
                spelling == module
                or spelling.startswith(module + ".")
                or (spelling != "self" and module.startswith(spelling + "."))  # model.module.zero_grad()
            ):
                return True
    return False


def is_closure_step(event: Event) -> bool:
    """``optimizer.step(closure)`` (LBFGS): the closure zeroes, runs backward and is stepped."""
    func = event.call.func
    return (
        isinstance(func, cst.Attribute)
        and dotted_name(func.value) == event.target
        and bool(event.call.args)
    )


def steps_of(loop: TrainingLoop, optimizer: str) -> list[Event]:
    return [e for e in loop.events if e.kind == "step" and e.target == optimizer]


def _functions_with_backward(ctx: FileContext) -> set[str]:
    """Names of the functions (and methods) of the file that call a backward, themselves
    or through another function of the file."""
    names: set[str] = set()
    for call in ctx.method_calls("backward", "manual_backward") + ctx.calls("torch.autograd.backward"):
        for ancestor in ctx.ancestors(call):
            if isinstance(ancestor, cst.FunctionDef):
                names.add(ancestor.name.value)
    callers: dict[str, set[str]] = {}
    for function in ctx.nodes(cst.FunctionDef):
        for call in ctx.walk(function, cst.Call):
            name = dotted_name(call.func)
            if name is not None:
                callers.setdefault(name.split(".")[-1], set()).add(function.name.value)
    pending = list(names)
    while pending:
        for caller in callers.get(pending.pop(), ()):
            if caller not in names:
                names.add(caller)
                pending.append(caller)
    return names


def _gradients_made_in(ctx: FileContext, root: cst.CSTNode, low: int, high: int, wrapped: bool) -> bool:
    """Whether code in ``root`` between two positions may produce gradients we do not see
    as a backward event: a function of the file that calls ``backward()`` (not followed as
    a helper), ``torch.autograd.grad`` results written into ``.grad`` by hand."""
    def between(node: cst.CSTNode) -> bool:
        position = ctx.order[node]
        return (position > low or position < high) if wrapped else (low < position < high)

    hidden = _functions_with_backward(ctx)
    for call in ctx.walk(root, cst.Call):
        if not between(call):
            continue
        name = dotted_name(call.func)
        if name is not None and name.split(".")[-1] in hidden:
            return True
        if name is not None and "backward" in name.split(".")[-1].lower():
            # DARTS' ``architect.unrolled_backward(...)`` (another module) writes ``alpha.grad``;
            # pix2pix's ``self.backward_G()``: the name says it makes gradients.
            return True
        if ctx.qualname(call.func) == "torch.autograd.grad":
            return True
    return any(between(node) for node in _grad_writes(ctx) if ctx.is_descendant(node, root))


# Look-alikes shared by several rules of this family.
ACCELERATE_GUIDE_EXAMPLE = """
            from accelerate import Accelerator
            from torch.utils.data.dataloader import DataLoader

            dataloader = DataLoader(ds, batch_size=training_args.per_device_train_batch_size)
            accelerator = Accelerator(fp16=training_args.fp16)
            model, optimizer, dataloader = accelerator.prepare(model, adam_bnb_optim, dataloader)

            model.train()
            for step, batch in enumerate(dataloader, start=1):
                loss = model(**batch).loss
                loss = loss / training_args.gradient_accumulation_steps
                accelerator.backward(loss)
                if step % training_args.gradient_accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """

HF_NO_TRAINER_ACCUMULATION = """
            import torch
            for epoch in range(args.num_train_epochs):
                model.train()
                for step, batch in enumerate(train_dataloader):
                    batch = {k: v.to(device) for k, v in batch.items()}
                    outputs = model(**batch)
                    loss = outputs.loss
                    loss = loss / args.gradient_accumulation_steps
                    loss.backward()
                    if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                        optimizer.step()
                        lr_scheduler.step()
                        optimizer.zero_grad()
                        progress_bar.update(1)
                        completed_steps += 1
            """

DIVIDED_MODULO_ACCUMULATION = """
            import torch
            for i, (inputs, labels) in enumerate(dataloader):
                outputs = model(inputs)
                loss = criterion(outputs, labels) / accumulation_steps
                loss.backward()
                if (i + 1) % accumulation_steps == 0 or (i + 1) == len(dataloader):
                    optimizer.step()
                    optimizer.zero_grad()
            """


@dataclass
class Accumulation:
    """``step()`` that runs only every ``steps`` micro-steps, under ``guard``."""

    guard: cst.If
    steps: cst.BaseExpression  # k, as the file writes it
    step_events: list[Event]


def _modulo_test(test: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """``(counter, k)`` for ``counter % k == 0`` / ``0 == counter % k`` / ``not counter % k``,
    alone or as one operand of ``or`` / ``and`` (``... or last_batch``)."""
    if isinstance(test, cst.BooleanOperation):
        return _modulo_test(test.left) or _modulo_test(test.right)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = test.expression
        if isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Modulo):
            return inner.left, inner.right
        return None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        comparison = test.comparisons[0]
        if not isinstance(comparison.operator, cst.Equal):
            return None
        for modulo, zero in ((test.left, comparison.comparator), (comparison.comparator, test.left)):
            if (
                isinstance(modulo, cst.BinaryOperation)
                and isinstance(modulo.operator, cst.Modulo)
                and isinstance(zero, cst.Integer)
                and zero.evaluated_value == 0
            ):
                return modulo.left, modulo.right
    return None


def _counts_steps(ctx: FileContext, loop: TrainingLoop, counter: cst.BaseExpression) -> bool:
    """Whether ``counter`` counts the loop's micro-steps (not epochs): the loop's own index,
    a counter the loop increments, or a name that says so (``step``, ``batch_idx``, ``i``)."""
    spellings = {dotted_name(n) for n in ctx.walk(counter, cst.Attribute)} | {
        n.value for n in ctx.walk(counter, cst.Name)
    }
    spellings.discard(None)
    if any("epoch" in s.lower() for s in spellings):  # type: ignore[union-attr]
        return False
    node = loop.node
    if isinstance(node, cst.For) and any(n.value in spellings for n in ctx.walk(node.target, cst.Name)):
        return True
    for augmented in ctx.walk(node, cst.AugAssign):
        if dotted_name(augmented.target) in spellings:
            return True
    return any(_COUNTER.search(s.split(".")[-1]) for s in spellings)  # type: ignore[union-attr]


def _modulo_guard(ctx: FileContext, loop: TrainingLoop, step: Event) -> tuple[cst.If, cst.BaseExpression] | None:
    for guard in reversed(step.guards):
        if not ctx.is_descendant(step.call, guard.body):
            continue  # in the ``else`` branch
        found = _modulo_test(guard.test)
        if found is None:
            continue
        counter, steps = found
        if _counts_steps(ctx, loop, counter) and not fixed_at_one(ctx, steps):
            return guard, steps
    return None


def accumulation_of(ctx: FileContext, loop: TrainingLoop, optimizer: str) -> Accumulation | None:
    """Manual gradient accumulation for ``optimizer``: every ``step()`` sits under one
    ``if <counter> % k == 0`` of the loop, and a backward runs outside it (each micro-step).
    A backward under the same condition means no accumulation (a GAN generator trained
    every ``n_critic`` iterations)."""
    steps = steps_of(loop, optimizer)
    if not steps or any(e.via_helper or is_closure_step(e) for e in steps):
        return None
    guard: tuple[cst.If, cst.BaseExpression] | None = None
    for step in steps:
        found = _modulo_guard(ctx, loop, step)
        if found is None or (guard is not None and found[0] is not guard[0]):
            return None
        guard = found
    assert guard is not None
    backwards = [e for e in loop.events if e.kind == "backward"]
    inside = [e for e in backwards if ctx.is_descendant(e.site or e.call, guard[0])]
    if inside or not backwards:
        return None
    return Accumulation(guard[0], guard[1], steps)


# -- fixes: moving a statement -------------------------------------------------------------
def _alone_in_line(ctx: FileContext, call: cst.Call) -> cst.SimpleStatementLine | None:
    """The line holding ``call`` as its only statement, in an indented block."""
    statement = ctx.statement_of(call)
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if not isinstance(small, cst.Expr) or small.value is not call:
        return None
    if not isinstance(ctx.parent.get(statement), cst.IndentedBlock):
        return None
    return statement


def _anchor_line(ctx: FileContext, call: cst.Call) -> cst.SimpleStatementLine | None:
    """The line of ``call`` if a statement can go right after it (not a one-line ``if x: step()``)."""
    statement = ctx.statement_of(call)
    if isinstance(statement, cst.SimpleStatementLine) and isinstance(ctx.parent.get(statement), cst.IndentedBlock):
        return statement
    return None


def _insert_after(anchors: Sequence[cst.SimpleStatementLine], new: cst.SimpleStatementLine) -> list[Edit]:
    return [Edit(anchor, cst.FlattenSentinel([anchor, new])) for anchor in anchors]


def move_after(
    ctx: FileContext, moved: cst.SimpleStatementLine, anchors: Sequence[cst.SimpleStatementLine]
) -> tuple[Edit, ...] | None:
    """Edits that move ``moved`` right after each of ``anchors`` (or only remove it when
    ``anchors`` is empty). Comments above it travel with it; blank lines above it stay where
    they were, given to the statement that follows it. A removed statement leaves its
    comments behind, as ruff does: they may describe the lines that follow."""
    block = ctx.parent.get(moved)
    if not isinstance(block, cst.IndentedBlock) or len(block.body) < 2 or moved in anchors:
        return None
    leading = list(moved.leading_lines)
    blank_count = 0
    while blank_count < len(leading) and leading[blank_count].comment is None:
        blank_count += 1
    if not anchors:
        blank_count = len(leading)
    blank, kept = leading[:blank_count], leading[blank_count:]
    travelling = moved.with_changes(leading_lines=kept)
    index = next(i for i, s in enumerate(block.body) if s is moved)
    following = block.body[index + 1] if index + 1 < len(block.body) else None
    edits = [Edit(moved, cst.RemoveFromParent())]
    for anchor in anchors:
        kept_anchor = anchor
        if blank and anchor is following:
            kept_anchor = anchor.with_changes(leading_lines=blank + list(anchor.leading_lines))
        edits.append(Edit(anchor, cst.FlattenSentinel([kept_anchor, travelling])))
    if (
        blank
        and following is not None
        and following not in anchors
        and not any(ctx.is_descendant(anchor, following) for anchor in anchors)
    ):
        edits.append(Edit(following, following.with_changes(leading_lines=blank + list(following.leading_lines))))
    return tuple(edits)


# -- ADV301 -----------------------------------------------------------------------------------
def _grad_writes(ctx: FileContext) -> list[cst.Attribute]:
    """``.grad`` attributes written to: ``p.grad = None``, ``del p.grad``, ``p.grad += g``,
    ``p.grad.zero_()``, ``p.grad.data.copy_(g)``..."""
    written: list[cst.Attribute] = []
    for attribute in ctx.nodes(cst.Attribute):
        if attribute.attr.value == "grad" and _is_written(ctx, attribute):
            written.append(attribute)
    return written


def _is_written(ctx: FileContext, attribute: cst.Attribute) -> bool:
    node: cst.CSTNode = attribute
    parent = ctx.parent.get(node)
    while isinstance(parent, (cst.Attribute, cst.Call)):
        if isinstance(parent, cst.Attribute):
            if parent.value is not node:
                break
            if parent.attr.value.endswith("_") and not parent.attr.value.startswith("_"):
                return True  # an in-place method: zero_(), copy_(), add_()...
        elif parent.func is not node:
            break
        node, parent = parent, ctx.parent.get(parent)
    for ancestor in ctx.ancestors(attribute):
        if isinstance(ancestor, (cst.AssignTarget, cst.Del)):
            return True
        if isinstance(ancestor, (cst.AugAssign, cst.AnnAssign)):
            return attribute is ancestor.target or ctx.is_descendant(attribute, ancestor.target)
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            break
    return False


def _is_scaler_method(call: cst.Call) -> bool:
    func = call.func
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value in ("step", "unscale_", "update")
        and "scaler" in (dotted_name(func.value) or "").split(".")[-1].lower()
    )


def _optimizer_handed_over(ctx: FileContext, loop: TrainingLoop, optimizer: str) -> bool:
    """The loop passes the optimizer to some function, which may zero it."""
    for call in ctx.walk(loop.node, cst.Call):
        if _is_scaler_method(call):
            continue
        if any(dotted_name(arg.value) == optimizer for arg in call.args):
            return True
    return False


def _constructed_here(ctx: FileContext, optimizer: str) -> bool:
    known = ctx.loops.optimizer_names
    last = optimizer.split(".")[-1]
    return optimizer in known or last in {name.split(".")[-1] for name in known}


def _optimizes_own_tensors(ctx: FileContext, optimizer: str) -> str | None:
    """The tensor an optimizer built over a list of plain names updates (``Adam([theta])``),
    none of them a module's ``parameters()``: design variables or latents, not a model."""
    for call in ctx.loops.optimizer_constructors(optimizer):
        if not call.args or call.args[0].keyword is not None:
            continue
        handed = call.args[0].value
        if not isinstance(handed, (cst.List, cst.Tuple)) or not handed.elements:
            continue
        if all(isinstance(element, cst.Element) and isinstance(element.value, cst.Name) for element in handed.elements):
            return ", ".join(element.value.value for element in handed.elements)  # type: ignore[attr-defined]
    return None


def _rebound_in_loop(ctx: FileContext, loop: TrainingLoop, optimizer: str) -> bool:
    """A fresh optimizer every iteration: not a plain training loop (numeric checks, probes)."""
    if "." in optimizer:
        nodes = ctx.attribute_assignments.get(optimizer, [])
    else:
        nodes = [b.node for b in ctx.lookup(optimizer, loop.node)]
    return any(ctx.is_descendant(node, loop.node) for node in nodes)


def _bound_in_helper(ctx: FileContext, step: Event, optimizer: str) -> bool:
    """A step in a helper function where ``optimizer`` is the helper's own (a parameter, a
    local): not the loop's optimizer by certain identity (a fresh one per call, say)."""
    if step.via_helper is None:
        return False
    function = ctx.enclosing(step.call, cst.FunctionDef)
    head = optimizer.split(".")[0]
    if head == "self":
        return False  # ``self.optimizer``: the object's one optimizer
    if not isinstance(function, cst.FunctionDef):
        return True
    return any(binding.scope is function for binding in ctx.lookup(head, step.call))


def _in_subclass(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Inside a class with a base other than ``object``/``nn.Module``: a base class we
    cannot see may zero the gradients."""
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, cst.ClassDef):
            for base in ancestor.bases:
                qualname = ctx.qualname(base.value) or ""
                if dotted_name(base.value) != "object" and qualname != "torch.nn.Module":
                    return True
    return False


def _sibling_step(
    ctx: FileContext, zero_call: cst.Call, steps: dict[int, Event], events: Sequence[Event]
) -> Event | None:
    """The step among ``steps`` that a later statement of ``zero_call``'s own block makes,
    when nothing between them may make gradients or leave the block: no other event of
    the loop (backward, step, zero_grad), no
    ``torch.autograd.grad``, no function of the file that reaches a backward, no
    ``.grad`` written by hand, no ``return``/``break``/``continue``/``raise``."""
    line = ctx.statement_of(zero_call)
    block = ctx.parent.get(line) if line is not None else None
    if not isinstance(line, cst.SimpleStatementLine) or not isinstance(block, (cst.IndentedBlock, cst.Module)):
        return None
    index = next(
        (i for i, small in enumerate(line.body) if isinstance(small, cst.Expr) and small.value is zero_call), None
    )
    if index is None:
        return None
    position = next(i for i, statement in enumerate(block.body) if statement is line)
    following: list[cst.CSTNode] = list(line.body[index + 1 :])
    for statement in block.body[position + 1 :]:
        following.extend(statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement])
    hidden = _functions_with_backward(ctx)
    written = _grad_writes(ctx)
    event_calls = {id(e.call) for e in events}
    for node in following:
        if isinstance(node, cst.Expr) and id(node.value) in steps:
            return steps[id(node.value)]
        if isinstance(node, (cst.Return, cst.Break, cst.Continue, cst.Raise)):
            return None
        for call in ctx.walk(node, cst.Call):
            func = call.func
            name = (dotted_name(func) or "").split(".")[-1]
            method = func.attr.value if isinstance(func, cst.Attribute) else name
            if (
                id(call) in event_calls
                or "backward" in method.lower()
                or "closure" in method.lower()
                or name in hidden
                or ctx.qualname(func) in ("torch.autograd.grad", "torch.autograd.backward")
            ):
                return None
        if any(ctx.is_descendant(attribute, node) for attribute in written):
            return None
    return None


class ZeroGradOrder(Rule):
    code = "ADV301"
    name = "zero-grad-order"
    summary = "`zero_grad()` runs between `backward()` and `step()`, or a loop steps without ever zeroing."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        `optimizer.step()` applies whatever is in `.grad`. A `zero_grad()` placed after
        `backward()` and before `step()` wipes the gradients just computed: the model
        steps on zeros (or, with `set_to_none=True`, does not step at all) and silently
        does not train. A loop that never zeroes does the opposite: every step adds its
        gradients to all the previous ones.

        The guide's notes on *Gradient Accumulation* spell out the order: "Normal
        training flow: zero_grad then step ... Gradient accumulation process: step then
        zero_grad". Either way the gradients are zeroed *before* the next `backward()`,
        never between a `backward()` and the `step()` that should use it.
    """
    example = """
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
    """
    use_instead = """
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    silent_when = """
        - each optimizer zeroes its own gradients before its own backward (GANs: `opt_d` and
          `opt_g` each zero, step, in turn; `model.zero_grad()` is taken to clear an
          optimizer only in a loop with a single optimizer);
        - `zero_grad()`, a `backward()` or the `step()` in question sits under an `if`, in a
          `try`, in a nested loop, or in a helper function whose order is not certain; but
          a `zero_grad()` that follows a backward and is followed by the `step()` in the
          same block, under whatever `if`, is reported unless something between them may
          make gradients: a backward, a function of the file that reaches one,
          `torch.autograd.grad`, `.grad` written by hand, or a call whose name says backward;
        - `optimizer.step(closure)` (LBFGS): the closure zeroes and runs backward;
        - for a loop without `zero_grad()`: the file calls `zero_grad` anywhere, resets `.grad`
          by hand (`p.grad = None`, `p.grad.zero_()`), hands the optimizer to another function
          in the loop, builds no optimizer itself, subclasses a base class that may zero,
          or uses Lightning (a Fabric loop, `fabric.backward(loss)`, is checked: Fabric never
          zeroes gradients).
    """
    valid = [
        Valid(
            ACCELERATE_GUIDE_EXAMPLE,
            note="the guide's Using Accelerate example",
        ),
        Valid(
            HF_NO_TRAINER_ACCUMULATION,
            note="HF no_trainer style accumulation",
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.AdamW(model.parameters())
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            note="zero_grad, backward, step",
        ),
        Valid(
            """
            import torch
            from architect import Architect
            w_optim = torch.optim.SGD(model.weights(), 0.025)
            alpha_optim = torch.optim.Adam(model.alphas(), 3e-4)
            for (trn_X, trn_y), (val_X, val_y) in zip(train_loader, valid_loader):
                alpha_optim.zero_grad()
                architect.unrolled_backward(trn_X, trn_y, val_X, val_y, lr, w_optim)
                alpha_optim.step()
                w_optim.zero_grad()
                loss = model.criterion(model(trn_X), trn_y)
                loss.backward()
                w_optim.step()
            """,
            note="DARTS: a call of another module whose name says backward makes the alphas' gradients",
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.AdamW(model.parameters())
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            """,
            note="backward, step, zero_grad",
        ),
        Valid(
            """
            import torch
            for i, (imgs, _) in enumerate(dataloader):
                real = imgs.cuda()
                optimizer_D.zero_grad()
                d_loss = adversarial_loss(discriminator(real), valid) + adversarial_loss(discriminator(generator(z).detach()), fake)
                d_loss.backward()
                optimizer_D.step()
                optimizer_G.zero_grad()
                g_loss = adversarial_loss(discriminator(generator(z)), valid)
                g_loss.backward()
                optimizer_G.step()
            """,
            note="GAN: each optimizer zeroes its own gradients before its own backward",
        ),
        Valid(
            """
            import torch
            for i, data in enumerate(dataloader, 0):
                netD.zero_grad()
                errD_real = criterion(netD(real_cpu), label)
                errD_real.backward()
                errD_fake = criterion(netD(fake.detach()), label)
                errD_fake.backward()
                optimizerD.step()
                netG.zero_grad()
                errG = criterion(netD(fake), label)
                errG.backward()
                optimizerG.step()
            """,
            note="DCGAN tutorial: model.zero_grad() with two optimizers",
        ),
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for batch in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = model(**batch).loss
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                optimizer.zero_grad()
            """,
            note="GradScaler; scheduler.step() is not an optimizer step",
        ),
        Valid(
            """
            import torch
            while True:
                for micro_step in range(gradient_accumulation_steps):
                    with ctx:
                        logits, loss = model(X, Y)
                        loss = loss / gradient_accumulation_steps
                    X, Y = get_batch("train")
                    scaler.scale(loss).backward()
                if grad_clip != 0.0:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                iter_num += 1
            """,
            note="nanoGPT: backward in an inner micro-step loop",
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.LBFGS(model.parameters())
            for x, y in loader:
                def closure():
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    return loss
                optimizer.step(closure)
            """,
            note="LBFGS closure",
        ),
        Valid(
            """
            import torch
            for batch in loader:
                try:
                    loss = model(batch)
                    loss.backward()
                except torch.cuda.OutOfMemoryError:
                    optimizer.zero_grad()
                    continue
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="zero_grad in an OOM handler: not part of the normal order",
        ),
        Valid(
            """
            import torch
            def backprop(model, data, optimizer):
                for d in data:
                    model.discriminator.zero_grad()
                    _, real, fake = model(d)
                    dl = bcel(real, real_label) + bcel(fake, fake_label)
                    dl.backward()
                    model.generator.zero_grad()
                    optimizer.step()
                    z, _, fake = model(d)
                    tl = bcel(fake, real_label) + msel(z, d)
                    tl.backward()
                    model.discriminator.zero_grad()
                    optimizer.step()
            """,
            note="one optimizer, one part of the called model zeroed to keep it out of the step (TranAD's MAD-GAN)",
        ),
        Valid(
            """
            import torch
            class Client:
                def fit(self):
                    for x, y in self.trainloader:
                        x, y = x.to(self.device), y.to(self.device)
                        if self.classifier_rounds:
                            loss = self.criterion(self.model(x), y)
                            self.optimizer.zero_grad()
                            loss.backward()
                            self.model.base.zero_grad()
                            self.optimizer.step()
                        else:
                            features = self.model.get_last_features(x)
                            loss = self.criterion(self.model.classifier(features), y)
                            self.optimizer.zero_grad()
                            loss.backward()
                            self.model.classifier.zero_grad()
                            self.optimizer.step()
            """,
            note="a part of the model zeroed to train only the rest this round (FL-bench's FedPAC)",
        ),
        Valid(
            """
            import torch
            for step, batch in enumerate(loader):
                optimizer.zero_grad()
                if use_amp:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                optimizer.step()
            """,
            note="the backward is under an if, but it is there",
        ),
        Valid(
            """
            import torch
            def train_step(model, batch, optimizer):
                optimizer.zero_grad()
                loss = model(batch)
                loss.backward()
                optimizer.step()

            for batch in loader:
                train_step(model, batch, optimizer)
            """,
            note="helper function with the right order",
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                for p in model.parameters():
                    p.grad = None
            """,
            note="gradients reset by hand",
        ),
        Valid(
            """
            import torch
            import pytorch_lightning as pl
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            note="Lightning file: no missing-zero_grad advice",
        ),
        Valid(
            """
            import torch
            from apex import amp
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = criterion(model(x), y)
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
            """,
            note="the optimizer is handed to another function in the loop",
        ),
        Valid(
            """
            import torch
            def train(model, loader, optimizer):
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
            """,
            note="the optimizer comes from outside the file",
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.AdamW(model.parameters())
            for step, batch in enumerate(loader):
                optimizer.step()
                optimizer.zero_grad()
                loss = model(batch)
                loss.backward()
            """,
            note="step, zero_grad, backward: steps the previous iteration's gradients",
        ),
        Valid(
            """
            import torch
            for i, (imgs, _) in enumerate(dataloader):
                optimizer_D.zero_grad()
                loss_D = -torch.mean(discriminator(imgs)) + torch.mean(discriminator(generator(z).detach()))
                loss_D.backward()
                optimizer_D.step()
                if i % n_critic == 0:
                    optimizer_G.zero_grad()
                    loss_G = -torch.mean(discriminator(generator(z)))
                    loss_G.backward()
                    optimizer_G.step()
            """,
            note="WGAN: a guarded zero_grad with its own backward before the step",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            theta = torch.zeros(7, requires_grad=True, device="cuda")
            optimizer = torch.optim.Adam([theta], lr=1e-3)
            for ep in range(1000):
                drag, lift = solve(surrogate, mesh_of(theta))
                loss = (drag / lift) ** 2 + theta.norm()
                loss.backward()
                optimizer.step()
            """,
            note="an inverse design over the script's own tensor, whose protocol may let its gradient accumulate: advice, no edit (coral)",
        ),
        Invalid(
            """
            import torch
            for x, y in loader:
                x, y = x.cuda(), y.cuda()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.zero_grad()
                optimizer.step()
            """,
            fixed="""
            import torch
            for x, y in loader:
                x, y = x.cuda(), y.cuda()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch
            for batch in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(**batch).loss
                loss.backward()

                # start the next step clean
                model.zero_grad()
                optimizer.step()
                scheduler.step()
            """,
            fixed="""
            import torch
            for batch in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(**batch).loss
                loss.backward()

                optimizer.step()
                # start the next step clean
                model.zero_grad()
                scheduler.step()
            """,
            note="model.zero_grad() with one optimizer; comment travels, blank line stays",
        ),
        Invalid(
            """
            import torch
            for batch in loader:
                scaler.step(optimizer)
                scaler.update()
                with torch.autocast("cuda"):
                    loss = model(batch)
                scaler.scale(loss).backward()
                optimizer.zero_grad()
            """,
            fixed="""
            import torch
            for batch in loader:
                scaler.step(optimizer)
                optimizer.zero_grad()
                scaler.update()
                with torch.autocast("cuda"):
                    loss = model(batch)
                scaler.scale(loss).backward()
            """,
            note="around the loop: zero_grad at the end wipes what the next iteration steps",
        ),
        Invalid(
            """
            import torch
            def train_step(model, batch, optimizer):
                loss = model(batch)
                loss.backward()
                optimizer.zero_grad()
                optimizer.step()

            for batch in loader:
                train_step(model, batch, optimizer)
            """,
            fixed="""
            import torch
            def train_step(model, batch, optimizer):
                loss = model(batch)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()

            for batch in loader:
                train_step(model, batch, optimizer)
            """,
            note="inside a helper: backward, zero_grad, step in straight line",
        ),
        Invalid(
            """
            import torch
            import torch.optim as optim
            model = Net().cuda()
            optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            for epoch in range(10):
                for inputs, labels in trainloader:
                    outputs = model(inputs.cuda())
                    loss = criterion(outputs, labels.cuda())
                    loss.backward()
                    optimizer.step()
            """,
            fixed="""
            import torch
            import torch.optim as optim
            model = Net().cuda()
            optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            for epoch in range(10):
                for inputs, labels in trainloader:
                    outputs = model(inputs.cuda())
                    loss = criterion(outputs, labels.cuda())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="no zero_grad anywhere",
        ),
        Invalid(
            """
            import torch
            opt = torch.optim.Adam(model.parameters())
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y) / 4
                loss.backward()
                if (i + 1) % 4 == 0:
                    opt.step()
            """,
            fixed="""
            import torch
            opt = torch.optim.Adam(model.parameters())
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y) / 4
                loss.backward()
                if (i + 1) % 4 == 0:
                    opt.step()
                    opt.zero_grad()
            """,
            note="accumulation that never zeroes: the zero_grad goes under the condition",
        ),
        Invalid(
            """
            import torch
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y) / accumulation_steps
                loss.backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.zero_grad()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
            """,
            fixed="""
            import torch
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y) / accumulation_steps
                loss.backward()
                if (i + 1) % accumulation_steps == 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="under the accumulation condition: zeroed right before the step",
        ),
        Invalid(
            """
            import torch
            from lightning.fabric import Fabric
            fabric = Fabric(accelerator="gpu", precision="16-mixed")
            optimizer = torch.optim.Adam(model.parameters())
            model, optimizer = fabric.setup(model, optimizer)
            for batch in loader:
                loss = model(batch).mean()
                fabric.backward(loss)
                optimizer.step()
            """,
            fixed="""
            import torch
            from lightning.fabric import Fabric
            fabric = Fabric(accelerator="gpu", precision="16-mixed")
            optimizer = torch.optim.Adam(model.parameters())
            model, optimizer = fabric.setup(model, optimizer)
            for batch in loader:
                loss = model(batch).mean()
                fabric.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="Fabric never zeroes gradients (Lightning's Trainer does)",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        loops = ctx.loops.training_loops
        if not loops:
            return
        reported: set[cst.Call] = set()
        helpers_seen: set[cst.FunctionDef] = set()
        for loop in loops:
            if loop.scaler_owned:
                continue
            for optimizer in loop.optimizers:
                findings = [
                    *self._misplaced_in_loop(ctx, loop, optimizer),
                    *self._zeroed_right_before_step(ctx, loop, optimizer),
                ]
                for finding in findings:
                    if finding.node not in reported:
                        reported.add(finding.node)  # type: ignore[arg-type]
                        yield finding
            for event in loop.events:
                helper = event.via_helper
                if helper is None or helper in helpers_seen:
                    continue
                helpers_seen.add(helper)
                for finding in self._misplaced_in_helper(ctx, helper):
                    if finding.node not in reported:
                        reported.add(finding.node)  # type: ignore[arg-type]
                        yield finding
        yield from self._missing(ctx, loops)

    # A zero_grad followed, around the loop body, by the step with no backward in between.
    def _misplaced_in_loop(self, ctx: FileContext, loop: TrainingLoop, optimizer: str) -> Iterator[Finding]:
        position = ctx.loops.position
        relevant = [e for e in loop.events if e.kind == "backward" or (e.kind == "step" and e.target == optimizer)]
        if any(e.kind == "step" and is_closure_step(e) for e in relevant):
            return
        for zero in loop.events:
            if zero.kind != "zero_grad" or not zero.direct or not applies_to(ctx, zero, optimizer, loop.optimizers):
                continue
            after = [e for e in relevant if position(e) > position(zero)]
            wrapped = not after
            following = after[0] if after else (relevant[0] if relevant else None)
            if following is None or following.kind != "step" or not following.direct:
                continue
            low, high = ctx.order[zero.call], ctx.order[following.call]
            if _gradients_made_in(ctx, loop.node, low, high, wrapped):
                continue
            yield self._misplaced(ctx, zero, following)

    # ``zero_grad(); step()`` side by side in one block, under whatever ``if`` it sits:
    # the step can only see the zeroed gradients.
    def _zeroed_right_before_step(self, ctx: FileContext, loop: TrainingLoop, optimizer: str) -> Iterator[Finding]:
        own = [e for e in loop.events if e.via_helper is None]
        steps = {id(e.call): e for e in own if e.kind == "step" and e.target == optimizer}
        if any(is_closure_step(e) for e in steps.values()):
            return
        backwards = [ctx.loops.position(e) for e in loop.events if e.kind == "backward"]
        for zero in own:
            if zero.kind != "zero_grad" or not applies_to(ctx, zero, optimizer, loop.optimizers):
                continue
            # Only once this iteration's backward ran is there something to wipe: a
            # ``zero_grad(); step()`` ahead of it is a no-op step (to quiet the scheduler's
            # order warning), not a lost update.
            if not any(position < ctx.loops.position(zero) for position in backwards):
                continue
            step = _sibling_step(ctx, zero.call, steps, loop.events)
            if step is not None:
                yield self._misplaced(ctx, zero, step)

    # Inside a helper, only the straight order backward -> zero_grad -> step is certain.
    def _misplaced_in_helper(self, ctx: FileContext, helper: cst.FunctionDef) -> Iterator[Finding]:
        events = ctx.loops.function_events(helper)
        optimizers: list[str] = []
        for event in events:
            if event.kind == "step" and event.target and event.target not in optimizers:
                optimizers.append(event.target)
        for optimizer in optimizers:
            relevant = [e for e in events if e.kind == "backward" or (e.kind == "step" and e.target == optimizer)]
            if any(e.kind == "step" and is_closure_step(e) for e in relevant):
                continue
            for zero in events:
                if zero.kind != "zero_grad" or not zero.straight_line or not applies_to(ctx, zero, optimizer, optimizers):
                    continue
                before = [e for e in relevant if ctx.order[e.call] < ctx.order[zero.call]]
                after = [e for e in relevant if ctx.order[e.call] > ctx.order[zero.call]]
                if not before or not after or before[-1].kind != "backward":
                    continue
                following = after[0]
                if following.kind != "step" or not following.straight_line:
                    continue
                if _gradients_made_in(ctx, helper, ctx.order[zero.call], ctx.order[following.call], False):
                    continue
                yield self._misplaced(ctx, zero, following)

    def _misplaced(self, ctx: FileContext, zero: Event, step: Event) -> Finding:
        zero_code, step_code = ctx.code(zero.call), ctx.code(step.call)
        message = (
            f"`{zero_code}` clears the gradients between `backward()` and `{step_code}`: "
            f"the step gets no gradients; zero them after `step()` (guide: {GUIDE})"
        )
        fix: Fix | None = None
        moved, anchor = _alone_in_line(ctx, zero.call), _anchor_line(ctx, step.call)
        if moved is not None and anchor is not None:
            edits = move_after(ctx, moved, [anchor])
            if edits:
                fix = self.fix(f"Move `{zero_code}` after `{step_code}`", *edits)
        return self.report(zero.call, message, fix)

    # A loop that steps and never zeroes: gradients add up over the whole run.
    def _missing(self, ctx: FileContext, loops: Sequence[TrainingLoop]) -> Iterator[Finding]:
        if "zero_grad" in ctx.source or _grad_writes(ctx):
            return
        for loop in loops:
            if _in_subclass(ctx, loop.node) or ctx.facts.frameworks.lightning_owns(loop):
                continue
            for optimizer in loop.optimizers:
                steps = steps_of(loop, optimizer)
                if any(e.in_nested_loop or is_closure_step(e) or _bound_in_helper(ctx, e, optimizer) for e in steps):
                    continue
                if not _constructed_here(ctx, optimizer) or _rebound_in_loop(ctx, loop, optimizer):
                    continue
                if _optimizer_handed_over(ctx, loop, optimizer):
                    continue
                step_code = ctx.code(steps[0].call)
                message = (
                    f"`{step_code}` in a loop that never zeroes the gradients: each step adds them "
                    f"to all the previous ones; call `{optimizer}.zero_grad()` after it (guide: {GUIDE})"
                )
                anchors = [_anchor_line(ctx, e.call) for e in steps]
                fix: Fix | None = None
                designed = _optimizes_own_tensors(ctx, optimizer)
                if designed is not None:
                    # coral's and Geo-FNO's inverse design: ``Adam([theta])`` over the airfoil's
                    # parameters, whose gradient the protocol lets accumulate from step to step.
                    message = message.replace(
                        " (guide: ",
                        f"; it updates `{designed}`, a tensor of the script's own rather than a model's parameters "
                        "(an inverse design, a latent search), where the accumulation may be the method: the fix is "
                        "left as advice (guide: ",
                        1,
                    )
                    anchors = []
                if anchors and all(a is not None for a in anchors):
                    new = cst.parse_statement(f"{optimizer}.zero_grad()\n")
                    assert isinstance(new, cst.SimpleStatementLine)
                    fix = self.fix(
                        f"Insert `{optimizer}.zero_grad()` after `{step_code}`",
                        *_insert_after(list(dict.fromkeys(anchors)), new),  # type: ignore[arg-type]
                    )
                yield self.report(steps[0].call, message, fix)


# -- ADV302 -----------------------------------------------------------------------------------
class ZeroGradBreaksAccumulation(Rule):
    code = "ADV302"
    name = "zero-grad-breaks-accumulation"
    summary = "`step()` runs every k micro-steps but `zero_grad()` runs every micro-step."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        Gradient accumulation sums the gradients of k micro-batches in `.grad` and steps
        once: the guide's *Gradient Accumulation* section describes "performing forward and
        backward passes through the model and accumulating the gradients during the process.
        Once a sufficient number of gradients have been accumulated, the model's
        optimization step is executed", and its notes: "Gradient accumulation process: step
        then zero_grad". A `zero_grad()` that runs on every micro-step throws the sum away:
        each step sees only the last micro-batch, so the effective batch is k times smaller
        than configured while the run still pays for k forward and backward passes. The same
        holds when the micro-steps are an inner loop, as in nanoGPT
        (`for micro_step in range(gradient_accumulation_steps)`, then `step()`): a
        `zero_grad()` inside that loop wipes the micro-batches before it.
    """
    example = """
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = criterion(model(x), y) / accumulation_steps
            loss.backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
    """
    use_instead = """
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y) / accumulation_steps
            loss.backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
    """
    silent_when = """
        - the loop runs inside `with accelerator.accumulate(model)`: Accelerate's optimizer
          skips `zero_grad()` on micro-steps, so zeroing every iteration is correct there
          (Fabric's `no_backward_sync` and DDP's `no_sync()` skip only the all-reduce);
        - Lightning handles accumulation itself (`accumulate_grad_batches`); a Fabric loop
          (`fabric.backward(loss)`) is checked like a plain one;
        - the backward runs under the same condition as `step()` (a GAN generator trained
          every `n_critic` iterations): nothing is accumulated;
        - the modulo is of an epoch counter, k is fixed at 1, or the `zero_grad()` is itself
          conditional, in a `try`, a nested loop or a helper function;
        - `model.zero_grad()` in a loop with several optimizers;
        - for an inner micro-step loop: the `zero_grad()` is conditional (first micro-step
          only); the inner loop steps itself (a WGAN critic loop is the training loop);
          neither its variable nor k is named for accumulation (`micro_step`,
          `grad_accum_steps`: an inner loop over ensemble members or tasks sums on
          purpose); it may `break`, reads or writes `.grad` or calls `torch.autograd.grad`
          (adversarial attacks, meta-learning); it runs under an `if`; a backward runs
          outside it; the `step()` is conditional.
    """
    valid = [
        Valid(
            HF_NO_TRAINER_ACCUMULATION,
            note="HF no_trainer style accumulation",
        ),
        Valid(
            DIVIDED_MODULO_ACCUMULATION,
            note="the guide notes' accumulation loop",
        ),
        Valid(
            ACCELERATE_GUIDE_EXAMPLE,
            note="the guide's Using Accelerate example",
        ),
        Valid(
            """
            from accelerate import Accelerator
            accelerator = Accelerator(gradient_accumulation_steps=4)
            model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
            for step, batch in enumerate(loader):
                with accelerator.accumulate(model):
                    optimizer.zero_grad()
                    loss = model(**batch).loss
                    accelerator.backward(loss)
                    if step % 4 == 0:
                        optimizer.step()
                    scheduler.step()
            """,
            note="zero_grad every micro-step inside accelerator.accumulate is correct",
        ),
        Valid(
            """
            import torch
            for i, (imgs, _) in enumerate(dataloader):
                optimizer_D.zero_grad()
                loss_D = -torch.mean(discriminator(real_imgs)) + torch.mean(discriminator(fake_imgs))
                loss_D.backward()
                optimizer_D.step()
                optimizer_G.zero_grad()
                if i % opt.n_critic == 0:
                    gen_imgs = generator(z)
                    loss_G = -torch.mean(discriminator(gen_imgs))
                    loss_G.backward()
                    optimizer_G.step()
            """,
            note="WGAN: the generator's backward is under the same condition as its step",
        ),
        Valid(
            """
            import torch
            for step, batch in enumerate(loader):
                optimizer.zero_grad()
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                if step % args.logging_steps == 0:
                    print(loss.item())
            """,
            note="modulo for logging: step() is not under it",
        ),
        Valid(
            """
            import torch
            while True:
                for micro_step in range(gradient_accumulation_steps):
                    with ctx:
                        logits, loss = model(X, Y)
                        loss = loss / gradient_accumulation_steps
                    scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                if iter_num % log_interval == 0:
                    print(iter_num)
                iter_num += 1
            """,
            note="nanoGPT: accumulation in an inner loop",
        ),
        Valid(
            """
            import torch
            ACCUMULATION = 1
            for i, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                if (i + 1) % ACCUMULATION == 0:
                    optimizer.step()
            """,
            note="k fixed at 1: nothing to accumulate",
        ),
        Valid(
            """
            import torch
            for epoch in range(epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    if epoch % 2 == 0:
                        optimizer.step()
            """,
            note="modulo of the epoch, not of the micro-step",
        ),
        Valid(
            """
            import lightning as L
            fabric = L.Fabric()
            for i, batch in enumerate(loader):
                with fabric.no_backward_sync(model, enabled=((i + 1) % 4 != 0)):
                    loss = model(batch)
                    fabric.backward(loss / 4)
                if (i + 1) % 4 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="Fabric's accumulation: zeroed after the step",
        ),
        Valid(
            """
            import torch
            for i, batch in enumerate(loader):
                model.zero_grad()
                d_loss.backward()
                if i % 5 == 0:
                    opt_d.step()
                g_loss.backward()
                opt_g.step()
            """,
            note="model.zero_grad() with two optimizers",
        ),
        Valid(
            """
            import torch
            for i, (imgs, _) in enumerate(dataloader):
                for _ in range(n_critic):
                    optimizer_D.zero_grad()
                    loss_D = -torch.mean(discriminator(imgs)) + torch.mean(discriminator(generator(z).detach()))
                    loss_D.backward()
                    optimizer_D.step()
                optimizer_G.zero_grad()
                loss_G = -torch.mean(discriminator(generator(z)))
                loss_G.backward()
                optimizer_G.step()
            """,
            note="WGAN critic loop: the inner loop steps, it does not accumulate",
        ),
        Valid(
            """
            import torch
            for step in range(max_steps):
                for micro_step in range(1):
                    optimizer.zero_grad()
                    logits, loss = model(x, y)
                    loss.backward()
                optimizer.step()
            """,
            note="an inner loop of one micro-step",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            for i, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                x, y = x.cuda(), y.cuda()
                loss = criterion(model(x), y) / accumulation_steps
                loss.backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
            """,
            fixed="""
            import torch
            for i, (x, y) in enumerate(loader):
                x, y = x.cuda(), y.cuda()
                loss = criterion(model(x), y) / accumulation_steps
                loss.backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch
            for step, batch in enumerate(train_dataloader):
                outputs = model(**batch)
                loss = outputs.loss / args.gradient_accumulation_steps
                scaler.scale(loss).backward()
                if (step + 1) % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                    scaler.step(optimizer)
                    scaler.update()
                    lr_scheduler.step()

                model.zero_grad()
            """,
            fixed="""
            import torch
            for step, batch in enumerate(train_dataloader):
                outputs = model(**batch)
                loss = outputs.loss / args.gradient_accumulation_steps
                scaler.scale(loss).backward()
                if (step + 1) % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                    scaler.step(optimizer)
                    model.zero_grad()
                    scaler.update()
                    lr_scheduler.step()
            """,
            note="zero_grad after the condition, GradScaler",
        ),
        Invalid(
            """
            import torch
            global_step = 0
            for batch in loader:
                optimizer.zero_grad()
                loss = model(batch) / 8
                loss.backward()
                global_step += 1
                if global_step % 8 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            import torch
            global_step = 0
            for batch in loader:
                loss = model(batch) / 8
                loss.backward()
                global_step += 1
                if global_step % 8 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="already zeroed after the step: the every-step one only goes",
        ),
        Invalid(
            """
            from accelerate import Accelerator
            accelerator = Accelerator()
            for step, batch in enumerate(loader):
                optimizer.zero_grad()
                loss = model(**batch).loss / 4
                accelerator.backward(loss)
                if step % 4 == 0:
                    optimizer.step()
            """,
            fixed="""
            from accelerate import Accelerator
            accelerator = Accelerator()
            for step, batch in enumerate(loader):
                loss = model(**batch).loss / 4
                accelerator.backward(loss)
                if step % 4 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="Accelerate without accelerator.accumulate: its zero_grad runs every time",
        ),
        Invalid(
            """
            import torch
            for step in range(max_steps):
                for micro_step in range(grad_accum_steps):
                    optimizer.zero_grad()
                    x, y = train_loader.next_batch()
                    logits, loss = model(x, y)
                    loss = loss / grad_accum_steps
                    loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            """,
            fixed="""
            import torch
            for step in range(max_steps):
                for micro_step in range(grad_accum_steps):
                    x, y = train_loader.next_batch()
                    logits, loss = model(x, y)
                    loss = loss / grad_accum_steps
                    loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="nanoGPT-style inner micro-step loop",
        ),
        Invalid(
            """
            import lightning as L
            fabric = L.Fabric()
            for i, batch in enumerate(loader):
                optimizer.zero_grad()
                loss = model(batch)
                fabric.backward(loss)
                if (i + 1) % 4 == 0:
                    optimizer.step()
            """,
            fixed="""
            import lightning as L
            fabric = L.Fabric()
            for i, batch in enumerate(loader):
                loss = model(batch)
                fabric.backward(loss)
                if (i + 1) % 4 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="Fabric, unlike Accelerate's `accumulate`, never skips a `zero_grad()`",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        loops = ctx.loops.training_loops
        if not loops:
            return
        reported: set[cst.Call] = set()
        for loop in loops:
            if ctx.facts.frameworks.lightning_owns(loop) or loop.scaler_owned:
                continue
            for optimizer in loop.optimizers:
                accumulation = accumulation_of(ctx, loop, optimizer)
                if accumulation is None:
                    micro = ctx.loops.micro_step_loop(loop, optimizer)
                    if micro is not None:
                        for finding in self._wiped_in_micro_steps(ctx, loop, optimizer, micro):
                            if finding.node not in reported:
                                reported.add(finding.node)  # type: ignore[arg-type]
                                yield finding
                    continue
                for zero in loop.events:
                    if zero.kind != "zero_grad" or not zero.direct or zero.call in reported:
                        continue
                    if not applies_to(ctx, zero, optimizer, loop.optimizers) or ctx.loops.accumulate_context(
                        zero.call, accelerate_only=True
                    ):
                        continue
                    reported.add(zero.call)
                    yield self._report(ctx, loop, optimizer, accumulation, zero)

    # nanoGPT's shape: the micro-steps are an inner ``for micro_step in range(k)``.
    def _wiped_in_micro_steps(
        self, ctx: FileContext, loop: TrainingLoop, optimizer: str, micro: MicroStepLoop
    ) -> Iterator[Finding]:
        for zero in loop.events:
            if zero.kind != "zero_grad" or zero.via_helper is not None or not ctx.is_descendant(zero.call, micro.node):
                continue
            position = next(i for i, node in enumerate(zero.enclosing) if node is micro.node)
            inside = zero.enclosing[position + 1 :]
            if not all(isinstance(node, cst.With) for node in inside):
                continue  # conditional within the micro-steps (first micro-step only...)
            if not applies_to(ctx, zero, optimizer, loop.optimizers) or ctx.loops.accumulate_context(
                zero.call, accelerate_only=True
            ):
                continue
            steps = steps_of(loop, optimizer)
            zero_code, step_code, steps_code = ctx.code(zero.call), ctx.code(steps[0].call), ctx.code(micro.steps)
            message = (
                f"`{zero_code}` runs on every one of the `{steps_code}` micro-steps before `{step_code}`: "
                f"the step sees the last micro-batch's gradients only; zero them once, after `step()` (guide: {GUIDE})"
            )
            already = any(
                e.kind == "zero_grad"
                and e.direct
                and not ctx.is_descendant(e.call, micro.node)
                and applies_to(ctx, e, optimizer, loop.optimizers)
                for e in loop.events
            )
            fix: Fix | None = None
            moved = _alone_in_line(ctx, zero.call)
            anchors = [_anchor_line(ctx, e.call) for e in steps]
            if moved is not None and (already or all(a is not None for a in anchors)):
                targets = [] if already else list(dict.fromkeys(anchors))
                edits = move_after(ctx, moved, targets)  # type: ignore[arg-type]
                if edits:
                    description = (
                        f"Remove the every-micro-step `{zero_code}`"
                        if already
                        else f"Move `{zero_code}` after `{step_code}`, out of the micro-step loop"
                    )
                    fix = self.fix(description, *edits)
            yield self.report(zero.call, message, fix)

    def _report(
        self, ctx: FileContext, loop: TrainingLoop, optimizer: str, accumulation: Accumulation, zero: Event
    ) -> Finding:
        zero_code = ctx.code(zero.call)
        step_code = ctx.code(accumulation.step_events[0].call)
        steps_code = ctx.code(accumulation.steps)
        message = (
            f"`{zero_code}` runs every micro-step but `{step_code}` only every `{steps_code}`: each step "
            f"sees the last micro-batch's gradients only; zero them under the same `if`, after `step()` (guide: {GUIDE})"
        )
        last_step = max(ctx.order[e.call] for e in accumulation.step_events)
        steps = {id(e.call): e for e in accumulation.step_events}
        # A zero_grad right before the step under the condition counts too: ADV301 moves
        # it after the step, and two moved zero_grads would be one too many.
        already = any(
            e.kind == "zero_grad"
            and applies_to(ctx, e, optimizer, loop.optimizers)
            and ctx.is_descendant(e.call, accumulation.guard.body)
            and (ctx.order[e.call] > last_step or _sibling_step(ctx, e.call, steps, loop.events) is not None)
            for e in loop.events
        )
        fix: Fix | None = None
        moved = _alone_in_line(ctx, zero.call)
        anchors = [_anchor_line(ctx, e.call) for e in accumulation.step_events]
        if moved is not None and (already or all(a is not None for a in anchors)):
            edits = move_after(ctx, moved, [] if already else list(dict.fromkeys(anchors)))  # type: ignore[arg-type]
            if edits:
                description = (
                    f"Remove the every-step `{zero_code}`"
                    if already
                    else f"Move `{zero_code}` after `{step_code}`, under the accumulation condition"
                )
                fix = self.fix(description, *edits)
        return self.report(zero.call, message, fix)


# -- ADV303 -----------------------------------------------------------------------------------
def _local_function_names(ctx: FileContext) -> set[str]:
    return {f.name.value for f in ctx.nodes(cst.FunctionDef)}


def _mean_reduction(ctx: FileContext, call: cst.Call) -> bool:
    """A loss call or constructor that averages (no ``reduction="sum"``/``"none"``)."""
    reduction = ctx.argument(call, "reduction")
    if reduction is MISSING:
        return True
    value = ctx.values.resolve(reduction) if reduction is not None else None
    return value is not None and value.value == "mean"


def _is_loss_class(ctx: FileContext, call: cst.Call) -> bool:
    qualname = ctx.qualname(call.func) or ""
    return qualname.startswith("torch.nn.") and qualname.endswith("Loss") and _mean_reduction(ctx, call)


def _is_loss_source(ctx: FileContext, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """A value that is certainly a mean loss: ``criterion(...)``, ``F.cross_entropy(...)``,
    ``outputs.loss``, ``model(...).loss``, ``outputs[0]``, ``outputs["loss"]``, or a function of
    the file that visibly returns one unscaled."""
    if isinstance(expr, cst.Attribute):
        return expr.attr.value == "loss" and dotted_name(expr.value) != "self"
    if isinstance(expr, cst.Subscript):
        if len(expr.slice) != 1 or not isinstance(expr.slice[0].slice, cst.Index):
            return False
        index = expr.slice[0].slice.value
        is_first = isinstance(index, cst.Integer) and index.evaluated_value == 0
        is_loss_key = isinstance(index, cst.SimpleString) and string_value(index) == "loss"
        return (is_first or is_loss_key) and isinstance(expr.value, (cst.Name, cst.Call))
    if not isinstance(expr, cst.Call):
        return False
    func = expr.func
    if isinstance(func, cst.Attribute) and func.attr.value == "mean" and not expr.args:
        return _is_loss_source(ctx, func.value, depth)
    if isinstance(func, cst.Call):  # nn.CrossEntropyLoss()(logits, labels)
        return _is_loss_class(ctx, func)
    if not _mean_reduction(ctx, expr):
        return False
    qualname = ctx.qualname(func)
    if qualname is not None:
        if qualname.startswith("torch.nn.functional."):
            return qualname.rsplit(".", 1)[-1] in _FUNCTIONAL_LOSSES
        return False  # imported from elsewhere: a user function, which may divide
    name = dotted_name(func)
    if name is None:
        return False
    last = name.split(".")[-1]
    if last in _local_function_names(ctx):
        return _returns_mean_loss(ctx, expr, depth)  # the file's own function: it may divide
    if isinstance(func, cst.Name):
        # ``criterion = nn.CrossEntropyLoss(...).cuda()``, in one place or in each branch of an
        # ``if``: the constructors under ``.cuda()`` / ``.to()``.
        constructors = _criterion_constructors(ctx, func)
        built = [(c, ctx.qualname(c.func) if isinstance(c, cst.Call) else None) for c in constructors]
        # A criterion class of another module: how it reduces is not seen (cirtorch's
        # ContrastiveLoss sums over the tuple, and its gradients are meant to add up).
        if any(q is not None and not q.startswith("torch.nn.") for _, q in built):
            return False
        if any(q is not None and not _is_loss_class(ctx, c) for c, q in built):  # type: ignore[arg-type]
            return False
        if built and all(q is not None for _, q in built):
            return True  # every constructor a mean-reducing torch criterion
    for assignment in ctx.attribute_assignments.get(name, ()):
        value = getattr(assignment, "value", None)
        if isinstance(value, cst.Call) and not _mean_reduction(ctx, value):
            return False
    return bool(_CRITERION.match(last))


def _criterion_constructors(ctx: FileContext, name: cst.Name) -> list[cst.BaseExpression]:
    """What ``name`` is built from (under ``.cuda()`` / ``.to()``): its assignments, or, for a
    parameter of a function of the file, the assignments of the names its callers pass
    (cirtorch's ``train(train_loader, model, criterion, ...)`` from ``main``)."""
    def assigned_calls(spelling: cst.Name) -> list[cst.BaseExpression]:
        return [
            strip_same_module_methods(binding.value)
            for binding in ctx.lookup(spelling.value, spelling)
            if isinstance(binding.node, cst.Assign) and isinstance(binding.value, cst.Call)
        ]

    found = assigned_calls(name)
    parameter = ctx.parameter_of(name)
    if parameter is not None:
        param, function, position = parameter
        for call in ctx.loops.callers(function):
            passed = ctx.argument(call, param.name.value, position)
            if isinstance(passed, cst.Name):
                found += assigned_calls(passed)
    return found


def _returns_mean_loss(ctx: FileContext, call: cst.Call, depth: int) -> bool:
    """``loss_fn(logits, targets)`` of the file whose every ``return`` hands back a mean loss it
    does not scale (lit-llama's ``return F.cross_entropy(...)``, directly or through a name
    assigned once)."""
    function = ctx.loops.callee(call)
    if function is None or depth > 2:
        return False
    returns = [r for r in ctx.walk(function, cst.Return) if ctx.scope_of.get(r) is function]
    if not returns:
        return False
    for statement in returns:
        value = statement.value
        if isinstance(value, cst.Name):
            inside = [b for b in ctx.lookup(value.value, value) if b.scope is function]
            if len(inside) != 1 or not isinstance(inside[0].node, cst.Assign):
                return False
            value = inside[0].value
        if value is None or _scales(ctx, value) or not _is_loss_source(ctx, value, depth + 1):
            return False
    return True


def _scales(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """Any division or multiplication in ``value`` counts as scaling the loss."""
    for operation in ctx.walk(value, cst.BinaryOperation):
        if isinstance(operation.operator, (cst.Divide, cst.FloorDivide, cst.Multiply)):
            return True
    for call in ctx.walk(value, cst.Call):
        name = (dotted_name(call.func) or "").split(".")[-1]
        if name in ("div", "div_", "true_divide", "divide", "mul", "mul_", "multiply"):
            return True
    return False


def _mentions(ctx: FileContext, expr: cst.BaseExpression, variable: str) -> bool:
    """Whether ``expr`` reads ``variable`` (not an attribute or keyword of that name)."""
    for name in ctx.walk(expr, cst.Name):
        if name.value != variable:
            continue
        parent = ctx.parent.get(name)
        if isinstance(parent, cst.Attribute) and parent.attr is name:
            continue
        if isinstance(parent, cst.Arg) and parent.keyword is name:
            continue
        return True
    return False


def _unscaled_loss(ctx: FileContext, scope: cst.CSTNode, name: cst.Name) -> bool:
    """``name`` is assigned in ``scope`` (the loop that accumulates) from a recognisable
    mean loss and never divided there."""
    inside = [b for b in ctx.lookup(name.value, name) if ctx.is_descendant(b.node, scope)]
    if not inside:
        return False
    origins: list[cst.BaseExpression] = []
    for binding in inside:
        node, value = binding.node, binding.value
        if isinstance(node, cst.AugAssign):
            return False  # loss /= k, loss *= scale: scaled, or not ours to judge
        if not isinstance(node, (cst.Assign, cst.AnnAssign, cst.NamedExpr)) or value is None:
            return False  # unpacked, a loop target, a ``with ... as``: unknown
        if _scales(ctx, value):
            return False
        if not _mentions(ctx, value, name.value):
            origins.append(value)
    return bool(origins) and all(_is_loss_source(ctx, origin) for origin in origins)


def _accumulation_scope(
    ctx: FileContext, loop: TrainingLoop, optimizer: str
) -> tuple[cst.BaseExpression, cst.CSTNode] | None:
    """k and the loop whose iterations are the micro-steps: the training loop itself when
    ``step()`` sits under ``if i % k == 0``, the inner ``for micro_step in range(k)`` else."""
    accumulation = accumulation_of(ctx, loop, optimizer)
    if accumulation is not None:
        return accumulation.steps, loop.node
    micro = ctx.loops.micro_step_loop(loop, optimizer)
    if micro is not None:
        return micro.steps, micro.node
    return None


def _loss_at_backward(ctx: FileContext, call: cst.Call) -> tuple[cst.BaseExpression, bool] | None:
    """The loss expression a backward call takes, and whether dividing it needs parentheses."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "backward":
        return None
    receiver = func.value
    if ctx.loops.is_fabric(receiver):  # ``fabric.backward(loss)`` takes the loss undivided
        if len(call.args) < 1 or call.args[0].keyword is not None or call.args[0].star:
            return None
        return call.args[0].value, False
    if ctx.loops.is_framework(receiver):
        return None
    if (
        isinstance(receiver, cst.Call)
        and isinstance(receiver.func, cst.Attribute)
        and receiver.func.attr.value == "scale"
        and "scaler" in (dotted_name(receiver.func.value) or "").split(".")[-1].lower()
    ):
        if len(receiver.args) != 1 or receiver.args[0].keyword is not None or receiver.args[0].star:
            return None
        return receiver.args[0].value, False
    return receiver, True


class AccumulationLossNotScaled(Rule):
    code = "ADV303"
    name = "accumulation-loss-not-scaled"
    summary = "Manual gradient accumulation whose loss is not divided by the accumulation steps."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        With gradient accumulation, `.grad` holds the *sum* of k micro-batch gradients when
        `step()` runs. Each micro-batch loss is a mean over its own samples, so without
        dividing by k the update is k times the gradient of the effective batch: as if the
        learning rate were k times larger, and gradient clipping thresholds mean something
        else. The guide's notes on *Gradient Accumulation* divide every micro-batch loss
        ("Note that this is divided by the number of accumulated steps"), and so does its
        *Using 🤗 Accelerate* loop: "we normalize the loss, so we get the average at the
        end of accumulation and once we have enough steps we run the optimization":
        `loss = loss / training_args.gradient_accumulation_steps`.
    """
    example = """
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            loss.backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
    """
    use_instead = """
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            (loss / accumulation_steps).backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
    """
    silent_when = """
        - the loss is divided or multiplied anywhere in the loop (`loss = loss / k`,
          `loss /= k`, `(loss / k).backward()`, `scaler.scale(loss / k)`);
        - Accelerate does the backward (`accelerator.backward` divides by its own
          `gradient_accumulation_steps`) or the loop runs in `accelerator.accumulate`;
          Lightning (`accumulate_grad_batches`). Fabric does not divide:
          `fabric.backward(loss)` is checked like `loss.backward()`;
        - the loss comes from a function of another module, or of the file unless each of
          its `return`s visibly hands back an unscaled mean loss (it may divide), from a
          sum-reduced criterion (also under `.cuda()` / `.to()`), from a criterion class of
          another module (how it reduces is not seen: cirtorch's contrastive loss sums, and its
          gradients are meant to add up), or cannot be traced to a loss in the loop;
        - the modulo guards only logging, not `step()`; the backward runs under the same
          condition as `step()`; k is fixed at 1;
        - for an inner micro-step loop (`for micro_step in range(k)` holding every backward,
          `step()` after it), the same exceptions as ADV302: the inner loop steps itself, is
          not named for accumulation, may `break`, touches `.grad`; the loss is assigned
          outside it.

        - the file divides the learning rate by the same steps (`args.lr /= args.grad_loop`):
          summed gradients with a step scaled to match are the mean's update;

        (advice, no fix) the loop divides `loss.data` in place (`loss.data /= iter_size`): the
        logged value shrinks, but autograd never reads it and the gradients still add up, so
        the published learning rate was tuned on their sum; dividing the loss now would make
        every step `k` times smaller than the runs the project reports.
    """
    valid = [
        Valid(
            """
            import torch
            args.lr /= args.grad_loop
            optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
            model = Net().cuda()
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                if (i + 1) % args.grad_loop == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="the learning rate is divided by the steps instead (GraSP's fine-tuning)",
        ),
        Valid(
            """
            import lightning as L
            fabric = L.Fabric(accelerator="cuda")
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                fabric.backward(loss / accumulation_steps)
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="Fabric loop that divides the loss itself",
        ),
        Valid(
            ACCELERATE_GUIDE_EXAMPLE,
            note="the guide's Using Accelerate example",
        ),
        Valid(
            DIVIDED_MODULO_ACCUMULATION,
            note="divided where it is computed",
        ),
        Valid(
            """
            import torch
            for step, batch in enumerate(train_dataloader):
                outputs = model(**batch)
                loss = outputs.loss
                loss = loss / args.gradient_accumulation_steps
                loss.backward()
                if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                    optimizer.step()
                    lr_scheduler.step()
                    optimizer.zero_grad()
            """,
            note="HF no_trainer style",
        ),
        Valid(
            """
            import torch
            for step, batch in enumerate(loader):
                loss = model(**batch).loss
                if args.gradient_accumulation_steps > 1:
                    loss /= args.gradient_accumulation_steps
                scaler.scale(loss).backward()
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
            """,
            note="in-place division",
        ),
        Valid(
            """
            from accelerate import Accelerator
            accelerator = Accelerator(gradient_accumulation_steps=4)
            for step, batch in enumerate(dataloader, start=1):
                loss = model(**batch).loss
                accelerator.backward(loss)
                if step % 4 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="accelerator.backward divides by its gradient_accumulation_steps",
        ),
        Valid(
            """
            import torch
            for i, batch in enumerate(loader):
                loss = compute_loss(model, batch)
                loss.backward()
                if (i + 1) % grad_accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="loss from a user function, which may divide",
        ),
        Valid(
            """
            import torch
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                scaler.scale(loss / grad_accum).backward()
                if (i + 1) % grad_accum == 0:
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
            """,
            note="divided at the backward site",
        ),
        Valid(
            """
            import torch
            for step, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                if step % log_every == 0:
                    print(loss.item())
            """,
            note="modulo for logging only",
        ),
        Valid(
            """
            import torch
            criterion = torch.nn.CrossEntropyLoss(reduction="sum")
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                loss.backward()
                if (i + 1) % 4 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="sum-reduced loss: the scale is the author's choice",
        ),
        Valid(
            """
            import torch
            criterion = torch.nn.CrossEntropyLoss(reduction="sum").cuda()
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                loss.backward()
                if (i + 1) % 4 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="sum-reduced loss moved to the GPU: the constructor is read under `.cuda()`",
        ),
        Valid(
            """
            import torch
            from cirtorch.layers.loss import ContrastiveLoss, TripletLoss

            def train(loader, model, criterion, optimizer):
                for i, (x, y) in enumerate(loader):
                    loss = criterion(model(x), y)
                    loss.backward()
                    if (i + 1) % args.update_every == 0:
                        optimizer.step()
                        optimizer.zero_grad()

            def main():
                if args.loss == "contrastive":
                    criterion = ContrastiveLoss(margin=0.7).cuda()
                else:
                    criterion = TripletLoss(margin=0.1).cuda()
                train(loader, model, criterion, optimizer)
            """,
            note="a criterion class of another module: how it reduces is not seen (cirtorch's sums)",
        ),
        Valid(
            """
            import torch
            while True:
                for micro_step in range(gradient_accumulation_steps):
                    with ctx:
                        logits, loss = model(X, Y)
                        loss = loss / gradient_accumulation_steps
                    scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            """,
            note="nanoGPT",
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator(gradient_accumulation_steps=8)
            for step, batch in enumerate(loader):
                with accelerator.accumulate(model):
                    loss = model(**batch).loss
                    loss.backward()
                    if step % 8 == 0:
                        optimizer.step()
                    optimizer.zero_grad()
            """,
            note="inside accelerator.accumulate",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            for i, (x, y) in enumerate(loader):
                x, y = x.cuda(), y.cuda()
                loss = criterion(model(x), y)
                loss.backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            import torch
            for i, (x, y) in enumerate(loader):
                x, y = x.cuda(), y.cuda()
                loss = criterion(model(x), y)
                (loss / accumulation_steps).backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F
            for step, (x, y) in enumerate(loader):
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = F.cross_entropy(model(x), y)
                scaler.scale(loss).backward()
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    scaler.unscale_(optimizer)
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad(set_to_none=True)
            """,
            fixed="""
            import torch
            import torch.nn.functional as F
            for step, (x, y) in enumerate(loader):
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = F.cross_entropy(model(x), y)
                scaler.scale(loss / args.gradient_accumulation_steps).backward()
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    scaler.unscale_(optimizer)
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad(set_to_none=True)
            """,
            note="GradScaler: divided inside scale()",
        ),
        Invalid(
            """
            import torch
            for step, batch in enumerate(train_dataloader):
                batch = {k: v.to("cuda") for k, v in batch.items()}
                outputs = model(**batch)
                loss = outputs.loss
                loss.backward(retain_graph=False)
                if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                    optimizer.step()
                    lr_scheduler.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            import torch
            for step, batch in enumerate(train_dataloader):
                batch = {k: v.to("cuda") for k, v in batch.items()}
                outputs = model(**batch)
                loss = outputs.loss
                (loss / args.gradient_accumulation_steps).backward(retain_graph=False)
                if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                    optimizer.step()
                    lr_scheduler.step()
                    optimizer.zero_grad()
            """,
            note="HF no_trainer style without the division",
        ),
        Invalid(
            """
            import torch
            loss_fn = torch.nn.MSELoss()
            for i, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                loss.backward()
                if not (i + 1) % (accum_steps):
                    opt.step()
                    opt.zero_grad()
            """,
            fixed="""
            import torch
            loss_fn = torch.nn.MSELoss()
            for i, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                (loss / (accum_steps)).backward()
                if not (i + 1) % (accum_steps):
                    opt.step()
                    opt.zero_grad()
            """,
            note="`not i % k` and k's own spelling",
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F
            while True:
                for micro_step in range(gradient_accumulation_steps):
                    with ctx:
                        logits = model(X)
                        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), Y.view(-1))
                    X, Y = get_batch("train")
                    scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            """,
            fixed="""
            import torch
            import torch.nn.functional as F
            while True:
                for micro_step in range(gradient_accumulation_steps):
                    with ctx:
                        logits = model(X)
                        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), Y.view(-1))
                    X, Y = get_batch("train")
                    scaler.scale(loss / gradient_accumulation_steps).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            """,
            note="nanoGPT's micro-step loop without its division",
        ),
        Invalid(
            """
            import lightning as L
            import torch.nn.functional as F
            fabric = L.Fabric(accelerator="cuda", precision="bf16-true")
            for iter_num in range(max_iters):
                logits = model(input_ids)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
                fabric.backward(loss)
                if (iter_num + 1) % gradient_accumulation_iters == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            import lightning as L
            import torch.nn.functional as F
            fabric = L.Fabric(accelerator="cuda", precision="bf16-true")
            for iter_num in range(max_iters):
                logits = model(input_ids)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
                fabric.backward(loss / gradient_accumulation_iters)
                if (iter_num + 1) % gradient_accumulation_iters == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="`fabric.backward` does not divide (unlike `accelerator.backward`)",
        ),
        Invalid(
            """
            import torch
            model = Net().cuda()
            for i, (inputs, labels) in enumerate(loader):
                loss = criterion(model(inputs.cuda()), labels.cuda())
                loss.data /= iter_size
                loss.backward()
                if (i + 1) % iter_size == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="`loss.data /= k` scales the logged value only: reported, and dividing is advice (the learning rate was tuned on the sum)",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        loops = ctx.loops.training_loops
        if not loops:
            return
        reported: set[cst.Call] = set()
        for loop in loops:
            if ctx.facts.frameworks.lightning_owns(loop) or loop.scaler_owned:
                continue
            backwards = [e for e in loop.events if e.kind == "backward"]
            if any(
                isinstance(e.call.func, cst.Attribute)
                and ctx.loops.is_framework(e.call.func.value)
                and not ctx.loops.is_fabric(e.call.func.value)
                for e in backwards
            ):
                continue  # accelerator.backward divides by its own accumulation steps
            for optimizer in loop.optimizers:
                found_scope = _accumulation_scope(ctx, loop, optimizer)
                if found_scope is None:
                    continue
                steps, scope = found_scope
                if _learning_rate_divided_by(ctx, steps):
                    continue  # GraSP's ``args.lr /= args.grad_loop``: a summed gradient, a step to match
                for backward in backwards:
                    if backward.via_helper is not None or backward.call in reported:
                        continue
                    if not ctx.is_descendant(backward.call, scope) or ctx.loops.accumulate_context(
                        backward.call, accelerate_only=True
                    ):
                        continue
                    found = _loss_at_backward(ctx, backward.call)
                    if found is None:
                        continue
                    loss, parenthesize = found
                    if not isinstance(loss, cst.Name) or not _unscaled_loss(ctx, scope, loss):
                        continue
                    reported.add(backward.call)
                    yield self._report(ctx, steps, backward, loss, parenthesize, scope)

    def _report(
        self, ctx: FileContext, steps: cst.BaseExpression, backward: Event, loss: cst.Name, parenthesize: bool,
        scope: cst.CSTNode,
    ) -> Finding:
        steps_code = ctx.code(steps)
        divided = f"{loss.value} / {steps_code}"
        replacement = cst.parse_expression(f"({divided})" if parenthesize else divided)
        message = (
            f"`{loss.value}` goes to `backward()` undivided while gradients accumulate over `{steps_code}` "
            f"micro-steps: the step gets their sum, not their mean; divide it by `{steps_code}` (guide: {GUIDE})"
        )
        fix = self.fix(f"Divide `{loss.value}` by `{steps_code}` at the backward", Edit(loss, replacement))
        finding = self.report(backward.call, message, fix)
        divided_value = _value_divided_in_place(ctx, scope, loss.value)
        if divided_value is not None:
            # class-incremental-learning's ``loss.data /= iter_size``: the published runs stepped
            # on the sum, so dividing now shrinks every step the learning rate was tuned for.
            finding.as_advice(
                f"`{divided_value}` divides the logged value, not the gradients; the learning rate was tuned "
                f"on their sum, so dividing is left to the author"
            )
        return finding


_LEARNING_RATE = re.compile(r"(?:^|[._])(?:lr|learning_rate)$", re.I)


def _learning_rate_divided_by(ctx: FileContext, steps: cst.BaseExpression) -> bool:
    """The file divides a learning rate by the accumulation steps (``args.lr /= args.grad_loop``,
    ``lr=args.lr / accum``): the summed gradient meets a step scaled to match, as a mean would."""
    steps_code = ctx.code(steps)
    for aug in ctx.nodes(cst.AugAssign):
        if isinstance(aug.operator, cst.DivideAssign) and ctx.code(aug.value) == steps_code and _LEARNING_RATE.search(ctx.code(aug.target)):
            return True
    for operation in ctx.nodes(cst.BinaryOperation):
        if isinstance(operation.operator, cst.Divide) and ctx.code(operation.right) == steps_code and _LEARNING_RATE.search(ctx.code(operation.left)):
            return True
    return False


def _value_divided_in_place(ctx: FileContext, scope: cst.CSTNode, name: str) -> str | None:
    """The statement that divides ``name.data`` in place in ``scope`` (``loss.data /= k``,
    ``loss.data.div_(k)``, ``loss.data = loss.data / k``): the value changes, and autograd,
    which never reads it, still hands ``backward()`` a gradient of ones."""
    def is_data(node: cst.CSTNode) -> bool:
        return (
            isinstance(node, cst.Attribute) and node.attr.value == "data"
            and isinstance(node.value, cst.Name) and node.value.value == name
        )

    for aug in ctx.walk(scope, cst.AugAssign):
        if isinstance(aug.operator, cst.DivideAssign) and is_data(aug.target):
            return ctx.code(aug)
    for call in ctx.walk(scope, cst.Call):
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "div_" and is_data(call.func.value):
            return ctx.code(call)
    for assign in ctx.walk(scope, cst.Assign):
        if (
            len(assign.targets) == 1 and is_data(assign.targets[0].target)
            and isinstance(assign.value, cst.BinaryOperation) and isinstance(assign.value.operator, cst.Divide)
        ):
            return ctx.code(assign)
    return None


# -- ADV304 -------------------------------------------------------------------------------------
# CUDA graphs replay into the ``.grad`` tensors they captured: freeing them breaks the replay.
_CUDA_GRAPHS = (
    "torch.cuda.graph",
    "torch.cuda.CUDAGraph",
    "torch.cuda.make_graphed_callables",
    "torch.compiler.cudagraph_mark_step_begin",
)
_COMPILE_MODES_WITHOUT_GRAPHS = ("default", "max-autotune-no-cudagraphs")


def captures_cuda_graphs(ctx: FileContext) -> bool:
    """CUDA graphs captured by hand, or maybe by ``torch.compile`` (``mode="reduce-overhead"``,
    ``"max-autotune"``, a mode or ``options`` we cannot read)."""
    if ctx.calls(*_CUDA_GRAPHS):
        return True
    for call in ctx.calls("torch.compile"):
        mode = ctx.argument(call, "mode")
        if mode is None or ctx.argument(call, "options") is not MISSING:
            return True
        if mode is not MISSING and ctx.values.value_of(mode) not in _COMPILE_MODES_WITHOUT_GRAPHS:
            return True
    return False


def makes_gradients(ctx: FileContext) -> bool:
    """A backward the file runs itself (or Lightning's, which runs the standard one): the
    gradients are accumulated by autograd, not written by an engine of another module."""
    backward = ctx.method_calls("backward", "manual_backward") or ctx.calls("torch.autograd.backward")
    return bool(backward) or ctx.facts.frameworks.uses_lightning


def grad_reads(ctx: FileContext) -> list[cst.Attribute]:
    """``.grad`` read anywhere (``p.grad.norm()``, ``if p.grad is not None``), not written."""
    written = set(map(id, _grad_writes(ctx)))
    return [
        attribute
        for attribute in ctx.nodes(cst.Attribute)
        if attribute.attr.value == "grad"
        and id(attribute) not in written
        and ctx.qualname(attribute) != "torch.autograd.grad"
    ]


def _finds_unused_parameters(ctx: FileContext) -> bool:
    """``DistributedDataParallel(..., find_unused_parameters=True)``: some parameters get no
    gradient in some steps, and optimizers skip a ``None`` gradient but step a zero one."""
    for call in ctx.nodes(cst.Call):
        arg = ctx.keyword_arg(call, "find_unused_parameters")
        if arg is not None and ctx.values.value_of(arg.value) is not False:
            return True
    return False


class ZeroGradSetToNoneFalse(Rule):
    code = "ADV304"
    name = "zero-grad-set-to-none-false"
    summary = "`zero_grad(set_to_none=False)` fills every gradient with zeros instead of freeing it."
    guide = GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        `zero_grad()` runs once per optimizer step (the guide's *Gradient Accumulation*
        notes: "step then zero_grad"). With `set_to_none=False` it launches a memset over
        every gradient and keeps all gradient memory allocated through the next forward
        pass, where activations could have used it; the next `backward()` then adds into
        the zeros instead of writing the gradient. `set_to_none=True` frees the gradients
        and is the default since PyTorch 2.0: passing `False` opts back into the slower,
        larger behaviour.

        The two differ only for code that reads `.grad` before the next backward, or for
        parameters that get no gradient in some steps (torch optimizers step a zero
        gradient but skip a `None` one).
    """
    example = """
        for x, y in loader:
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)
    """
    use_instead = """
        for x, y in loader:
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    silent_when = """
        - `set_to_none` is `True`, absent, or cannot be resolved;
        - the file writes `.grad` anywhere (`p.grad.add_(...)`, `p.grad += g`,
          `p.grad = buffer`, `p.grad.data.copy_(...)`): such code may rely on zero-filled
          gradient tensors that stay in place;
        - the file captures CUDA graphs (`torch.cuda.graph`, `make_graphed_callables`,
          `torch.compile(mode="reduce-overhead")` or a compile mode it cannot read), which
          replay into the gradient tensors they captured;
        - the file runs no backward itself (gradients made by an engine of another module,
          which may write into them); Lightning's hooks count as a backward;
        - no CUDA device is shown.

        The fix is unsafe when the file reads `.grad` (`p.grad.norm()`,
        `if p.grad is not None`) or lets DDP find unused parameters: a parameter without
        a gradient in some step then reads `None` instead of zeros, and the optimizer
        skips it (no momentum or weight-decay update) instead of stepping it. A value
        that comes from a command-line default is reported without a fix.
    """
    valid = [
        Valid(
            """
            import torch
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            """,
            note="set_to_none=True",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="the default (True since torch 2.0)",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                optimizer.zero_grad(set_to_none=args.set_to_none)
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="value unknown",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                optimizer.zero_grad(set_to_none=False)
                for p in model.parameters():
                    p.grad.add_(prior_grads[p])
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="adds into the zero-filled gradients before backward",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                model.zero_grad(set_to_none=False)
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                for p, g in zip(model.parameters(), ema_grads):
                    p.grad += g
                optimizer.step()
            """,
            note="writes .grad in place",
        ),
        Valid(
            """
            import torch
            flat = torch.zeros(n_params, device="cuda")
            for p, view in zip(model.parameters(), views_of(flat)):
                p.grad = view
            for x, y in loader:
                optimizer.zero_grad(set_to_none=False)
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="gradients are views of a flat buffer that must stay in place",
        ),
        Valid(
            """
            import torch
            g = torch.cuda.CUDAGraph()
            optimizer.zero_grad(set_to_none=False)
            with torch.cuda.graph(g):
                loss = criterion(model(static_x), static_y)
                loss.backward()
                optimizer.step()
            """,
            note="CUDA graph capture",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
            """,
            note="CPU-only script",
        ),
        Valid(
            """
            import torch
            model = torch.compile(model, mode="reduce-overhead")
            for micro_steps in loader:
                optimizer.zero_grad(set_to_none=False)
                for x, y in micro_steps:
                    torch.compiler.cudagraph_mark_step_begin()
                    loss = criterion(model(x.cuda()), y.cuda())
                    loss.backward()
                optimizer.step()
            """,
            note="torch.compile's CUDA graphs: accumulation needs gradients that stay in place",
        ),
        Valid(
            """
            import torch
            for page in loader:
                optimizer.zero_grad(set_to_none=False)
                engine.backward_page(page.cuda())
                optimizer.step()
            """,
            note="gradients made by an engine of another module, which may add into them",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
            """,
            fixed="""
            import torch
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch
            SET_TO_NONE = False
            for x, y in loader:
                model.zero_grad(SET_TO_NONE)
                loss = criterion(model(x.to("cuda")), y.to("cuda"))
                loss.backward()
                optimizer.step()
            """,
            fixed="""
            import torch
            SET_TO_NONE = False
            for x, y in loader:
                model.zero_grad()
                loss = criterion(model(x.to("cuda")), y.to("cuda"))
                loss.backward()
                optimizer.step()
            """,
            note="model.zero_grad, positional, through a constant",
        ),
        Invalid(
            """
            import pytorch_lightning as pl
            class Module(pl.LightningModule):
                def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
                    optimizer.zero_grad(set_to_none=False)
            trainer = pl.Trainer(accelerator="gpu")
            """,
            fixed="""
            import pytorch_lightning as pl
            class Module(pl.LightningModule):
                def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
                    optimizer.zero_grad()
            trainer = pl.Trainer(accelerator="gpu")
            """,
            note="Lightning's zero_grad hook",
        ),
        Invalid(
            """
            import torch
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                norm = sum(p.grad.norm() ** 2 for p in model.parameters() if p.grad is not None)
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
            """,
            fixed="""
            import torch
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                norm = sum(p.grad.norm() ** 2 for p in model.parameters() if p.grad is not None)
                optimizer.step()
                optimizer.zero_grad()
            """,
            unsafe=True,
            note="reads .grad after backward: unsafe fix",
        ),
        Invalid(
            """
            import argparse
            import torch
            parser = argparse.ArgumentParser()
            parser.add_argument("--set-to-none", type=bool, default=False)
            args = parser.parse_args()
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=args.set_to_none)
            """,
            fixed=None,
            note="a command-line default: advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        calls = ctx.method_calls("zero_grad")
        if not calls or not ctx.facts.devices.gpu.yes or not makes_gradients(ctx):
            return
        if _grad_writes(ctx) or captures_cuda_graphs(ctx):
            return
        unsafe = bool(grad_reads(ctx)) or _finds_unused_parameters(ctx)
        for call in calls:
            argument = ctx.argument(call, "set_to_none", 0)
            if argument is None or argument is MISSING:
                continue
            value = ctx.values.resolve(argument)
            if value is None or value.value is not False:
                continue
            source = "" if value.node is argument else f" ({ctx.values.describe(value)})"
            message = (
                f"`zero_grad(set_to_none=False)`{source} zero-fills every gradient each step and keeps their memory "
                "through the forward pass; drop the argument (`set_to_none=True` is the default since "
                f"torch 2.0) (guide: {GUIDE})"
            )
            fix = None
            if value.origin != "argparse default" and len(call.args) == 1:
                fix = self.fix(
                    "Drop `set_to_none=False`",
                    Edit(call, call.with_changes(args=(), whitespace_before_args=cst.SimpleWhitespace(""))),
                    applicability=Applicability.UNSAFE if unsafe else None,
                )
            yield self.report(call, message, fix)


# -- ADV305 -------------------------------------------------------------------------------------
CLIP_FUNCTIONS = (
    "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad_value_",
    "torch.nn.utils.clip_grad_norm",
    "torch.nn.utils.clip_grad.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_value_",
)
PRECISION_GUIDE = "Mixed precision training"


def _scaler_calls_in(ctx: FileContext, scope: cst.CSTNode, method: str) -> list[tuple[cst.Call, str]]:
    """``<scaler>.method(...)`` calls in ``scope``'s own body (not nested functions), with the
    scaler's spelling."""
    found = []
    for call in ctx.method_calls(method):
        func = call.func
        if ctx.scope_of.get(call) is not scope or not isinstance(func, cst.Attribute):
            continue
        spelling = dotted_name(func.value)
        if spelling is not None and is_scaler(ctx, func.value):
            found.append((call, spelling))
    return found


def scaled_backwards(ctx: FileContext, scope: cst.CSTNode) -> list[tuple[cst.Call, str]]:
    """The ``scaler.scale(loss)`` calls of ``scaler.scale(loss).backward()`` in ``scope``."""
    found = []
    for call, spelling in _scaler_calls_in(ctx, scope, "scale"):
        outer = ctx.parent.get(call)
        backward = ctx.parent.get(outer) if outer is not None else None
        if (
            isinstance(outer, cst.Attribute)
            and outer.value is call
            and outer.attr.value == "backward"
            and isinstance(backward, cst.Call)
            and backward.func is outer
        ):
            found.append((call, spelling))
    return found


def _scaler_constructors(ctx: FileContext, receiver: cst.BaseExpression) -> list[cst.Call] | None:
    """The ``GradScaler(...)`` calls a scaler is bound to, or None when not all are visible."""
    if isinstance(receiver, cst.Name):
        call = ctx.bound_call(receiver, *SCALERS)
        return None if call is None else [call]
    spelling = dotted_name(receiver)
    assignments = ctx.attribute_assignments.get(spelling or "", [])
    calls = [a.value for a in assignments if isinstance(a, cst.Assign) and isinstance(a.value, cst.Call)]
    if not assignments or len(calls) != len(assignments) or any(ctx.qualname(c.func) not in SCALERS for c in calls):
        return None
    return calls


def scaler_disabled(ctx: FileContext, receiver: cst.BaseExpression) -> bool:
    """``GradScaler(enabled=False)`` written in the file (a literal or a constant), for every
    construction of the scaler. A command-line default is not: the flag exists to turn it on."""
    constructors = _scaler_constructors(ctx, receiver)
    if not constructors:
        return False
    for call in constructors:
        enabled = ctx.argument(call, "enabled", SCALER_ENABLED_POSITION.get(ctx.qualname(call.func) or ""))
        if enabled is None or enabled is MISSING:
            return False
        value = ctx.values.resolve(enabled)
        if value is None or value.value is not False or value.origin not in ("literal", "constant"):
            return False
    return True


def _same_branches(ctx: FileContext, earlier: cst.CSTNode, later: cst.CSTNode, scope: cst.CSTNode) -> bool:
    """Whether ``later`` lies in every ``if``/``elif``/``else`` branch that holds ``earlier``
    (up to ``scope``): whenever ``later`` runs, the code path went through ``earlier``'s."""
    for ancestor in ctx.ancestors(earlier):
        if ancestor is scope:
            return True
        parent = ctx.parent.get(ancestor)
        if isinstance(parent, cst.If) and ancestor in (parent.body, parent.orelse):
            if not ctx.is_descendant(later, ancestor):
                return False
    return True


def _calls_local_unscale(ctx: FileContext, scope: cst.CSTNode, low: int, high: int) -> bool:
    """A call, between two positions of ``scope``, of a function of this file that unscales."""
    for call in ctx.walk(scope, cst.Call):
        if not (low < ctx.order[call] < high) or not isinstance(call.func, cst.Name):
            continue
        for binding in ctx.lookup(call.func.value, call):
            if isinstance(binding.node, cst.FunctionDef) and ctx.within(binding.node, ctx.method_calls("unscale_")):
                return True
    return False


def _insert_before(line: cst.SimpleStatementLine, new: cst.SimpleStatementLine) -> Edit:
    """``new`` above ``line`` and the comments that describe ``line``: the blank lines above
    them go above ``new``, the comments stay with the line they were written for."""
    leading = list(line.leading_lines)
    first_comment = next((i for i, empty in enumerate(leading) if empty.comment is not None), len(leading))
    return Edit(
        line,
        cst.FlattenSentinel([
            new.with_changes(leading_lines=leading[:first_comment]),
            line.with_changes(leading_lines=leading[first_comment:]),
        ]),
    )


class ClipBeforeUnscale(Rule):
    code = "ADV305"
    name = "clip-before-unscale"
    summary = "Gradient clipping on GradScaler-scaled gradients: `scaler.unscale_(optimizer)` is missing before it."
    guide = PRECISION_GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        fp16 mixed precision (guide: *Mixed precision training*) multiplies the loss by
        the GradScaler's scale (65536 at first) before `backward()`, so every `.grad`
        holds the gradient times that scale until `scaler.step()` unscales it. Clipping
        in between compares `max_norm` with scaled gradients: the norm is thousands of
        times too large, so clipping fires on every step and shrinks the update far
        below what was asked (or, with `clip_grad_value_`, clips at the wrong value).
        PyTorch's AMP recipe calls `scaler.unscale_(optimizer)` right before clipping;
        `scaler.step()` then knows the gradients are already unscaled.
    """
    example = """
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """
    use_instead = """
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """
    silent_when = """
        - `scaler.unscale_(...)` runs before the clip in the same function, or a function of
          the file that unscales is called between the backward and the clip;
        - the clip does not sit between a `scaler.scale(loss).backward()` and a
          `scaler.step(optimizer)` of the same function (clipping in a helper, or on
          gradients that were not scaled);
        - the scaler is built disabled, `GradScaler(enabled=False)` as a literal or a constant.
          `enabled=args.fp16` and other values set at run time are reported: the clip is
          wrong whenever the scaler is on, and `unscale_` does nothing when it is off;
        - Accelerate (`accelerator.clip_grad_norm_` unscales itself), Lightning and Fabric.

        Reported without a fix when the clip's function steps several optimizers through
        the scaler, when the backward is under a branch the clip is not in (the scaler may
        not exist there), when `unscale_` comes only after the clip (move it up), or when
        the clip is not a statement of its own.
    """
    valid = [
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = criterion(model(x.cuda()), y.cuda())
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            """,
            note="PyTorch's AMP recipe",
        ),
        Valid(
            """
            import torch
            while True:
                for micro_step in range(gradient_accumulation_steps):
                    with ctx:
                        logits, loss = model(X, Y)
                        loss = loss / gradient_accumulation_steps
                    scaler.scale(loss).backward()
                if grad_clip != 0.0:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            """,
            note="nanoGPT",
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator(mixed_precision="fp16")
            for batch in loader:
                loss = model(**batch).loss
                accelerator.backward(loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="Accelerate unscales in its own clip_grad_norm_",
        ),
        Valid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler(enabled=False)
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            """,
            note="the scaler is disabled: scale() and step() pass through",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="no GradScaler",
        ),
        Valid(
            """
            import torch
            def train_one_epoch(model, loader, optimizer, scaler=None):
                for x, y in loader:
                    loss = criterion(model(x.cuda()), y.cuda())
                    if scaler is not None:
                        scaler.scale(loss).backward()
                        if args.clip_grad_norm is not None:
                            scaler.unscale_(optimizer)
                            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
                        scaler.step(optimizer)
                        scaler.update()
                    else:
                        loss.backward()
                        if args.clip_grad_norm is not None:
                            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
                        optimizer.step()
                    optimizer.zero_grad()
            """,
            note="torchvision's reference loop: the unscaled path clips plain gradients",
        ),
        Valid(
            """
            import torch
            def unscale_and_clip(scaler, optimizer, model):
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                scaler.scale(loss).backward()
                unscale_and_clip(scaler, optimizer, model)
                scaler.step(optimizer)
                scaler.update()
            """,
            note="a helper of the file unscales and clips",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            """,
            note="clipping after the step (no scaler.step after it): another problem, not this one",
        ),
        Valid(
            """
            import torch
            import lightning as L
            fabric = L.Fabric(precision="16-mixed")
            for x, y in loader:
                loss = criterion(model(x), y)
                fabric.backward(loss)
                fabric.clip_gradients(model, optimizer, max_norm=1.0)
                optimizer.step()
                optimizer.zero_grad()
            """,
            note="Fabric clips with its own unscaling",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = criterion(model(x.cuda()), y.cuda())
                scaler.scale(loss).backward()
                # keep updates bounded
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            """,
            fixed="""
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = criterion(model(x.cuda()), y.cuda())
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                # keep updates bounded
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch
            from torch.nn.utils import clip_grad_norm_
            scaler = torch.cuda.amp.GradScaler(enabled=args.fp16)
            for step, batch in enumerate(loader):
                with torch.cuda.amp.autocast(enabled=args.fp16):
                    loss = model(**batch).loss / args.gradient_accumulation_steps
                scaler.scale(loss).backward()
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    grad_norm = clip_grad_norm_(model.parameters(), args.max_grad_norm)
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
            """,
            fixed="""
            import torch
            from torch.nn.utils import clip_grad_norm_
            scaler = torch.cuda.amp.GradScaler(enabled=args.fp16)
            for step, batch in enumerate(loader):
                with torch.cuda.amp.autocast(enabled=args.fp16):
                    loss = model(**batch).loss / args.gradient_accumulation_steps
                scaler.scale(loss).backward()
                if (step + 1) % args.gradient_accumulation_steps == 0:
                    scaler.unscale_(optimizer)
                    grad_norm = clip_grad_norm_(model.parameters(), args.max_grad_norm)
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
            """,
            note="enabled from the command line; under the accumulation condition",
        ),
        Invalid(
            """
            import torch
            class Trainer:
                def train_step(self, batch):
                    with torch.autocast("cuda", dtype=torch.float16):
                        loss = self.model(batch)
                    self.scaler.scale(loss).backward()
                    torch.nn.utils.clip_grad_value_(self.model.parameters(), 0.5)
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                    self.optimizer.zero_grad()
            """,
            fixed="""
            import torch
            class Trainer:
                def train_step(self, batch):
                    with torch.autocast("cuda", dtype=torch.float16):
                        loss = self.model(batch)
                    self.scaler.scale(loss).backward()
                    self.scaler.unscale_(self.optimizer)
                    torch.nn.utils.clip_grad_value_(self.model.parameters(), 0.5)
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                    self.optimizer.zero_grad()
            """,
            note="a train_step method; clip_grad_value_",
        ),
        Invalid(
            """
            import torch
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                if use_amp:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if use_amp:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
            """,
            fixed=None,
            note="the scaled backward is in a branch the clip is not: no scaler to unscale on the other path",
        ),
        Invalid(
            """
            import torch
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.unscale_(optimizer)
                scaler.step(optimizer)
                scaler.update()
            """,
            fixed=None,
            note="unscale_ after the clip: move it up",
        ),
        Invalid(
            """
            import torch
            for real, z in loader:
                scaler.scale(loss_d).backward()
                torch.nn.utils.clip_grad_norm_(disc.parameters(), 1.0)
                scaler.step(opt_d)
                scaler.scale(loss_g).backward()
                torch.nn.utils.clip_grad_norm_(gen.parameters(), 1.0)
                scaler.step(opt_g)
                scaler.update()
            """,
            fixed=None,
            count=2,
            note="two optimizers through one scaler: which one to unscale is left to the author",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        clips = ctx.calls(*CLIP_FUNCTIONS)
        if not clips or ctx.facts.frameworks.uses_lightning:
            return
        for clip in clips:
            finding = self._check_clip(ctx, clip)
            if finding is not None:
                yield finding

    def _check_clip(self, ctx: FileContext, clip: cst.Call) -> Finding | None:
        scope = ctx.scope_of.get(clip)
        if not isinstance(scope, (cst.FunctionDef, cst.Module)):
            return None
        position = ctx.order[clip]
        earlier = [(c, s) for c, s in scaled_backwards(ctx, scope) if ctx.order[c] < position]
        if not earlier:
            return None
        scale_call, spelling = earlier[-1]
        receiver = scale_call.func.value  # type: ignore[attr-defined]
        steps = [(c, s) for c, s in _scaler_calls_in(ctx, scope, "step") if s == spelling and c.args]
        later_steps = [c for c, _ in steps if ctx.order[c] > position]
        if not later_steps or scaler_disabled(ctx, receiver):
            return None
        unscales = [c for c, s in _scaler_calls_in(ctx, scope, "unscale_") if s == spelling]
        if any(ctx.order[c] < position for c in unscales):
            return None
        if _calls_local_unscale(ctx, scope, ctx.order[scale_call], position):
            return None
        name = (ctx.qualname(clip.func) or "clip_grad_norm_").split(".")[-1]
        optimizers = {ctx.code(c.args[0].value) for c, _ in steps}
        optimizer = ctx.code(later_steps[0].args[0].value)  # the step these gradients go to
        message = (
            f"`{name}` runs on gradients still multiplied by the GradScaler's scale, so the clip threshold "
            f"means nothing; call `{spelling}.unscale_({optimizer})` right before it (guide: {PRECISION_GUIDE})"
        )
        if any(ctx.order[c] < ctx.order[later_steps[0]] for c in unscales):
            message = (
                f"`{name}` runs before `{spelling}.unscale_(...)`, on gradients still multiplied by the "
                f"GradScaler's scale; move the `unscale_` call above the clip (guide: {PRECISION_GUIDE})"
            )
            return self.report(clip, message)
        line = ctx.statement_of(clip)
        fixable = (
            len(optimizers) == 1
            and isinstance(line, cst.SimpleStatementLine)
            and isinstance(ctx.parent.get(line), (cst.IndentedBlock, cst.Module))
            and _same_branches(ctx, scale_call, clip, scope)
        )
        if not fixable:
            return self.report(clip, message)
        unscale = cst.parse_statement(f"{spelling}.unscale_({optimizer})")
        assert isinstance(line, cst.SimpleStatementLine) and isinstance(unscale, cst.SimpleStatementLine)
        fix = self.fix(
            f"Insert `{spelling}.unscale_({optimizer})` before `{name}`",
            _insert_before(line, unscale),
            # Ties this fix to the scaler's ``scale()`` call, which any fix removing the
            # scaler (ADV201, ADV205) rewrites: the two never land in the same round, and
            # the one that goes second sees the other's result (no scaler, or its unscale_).
            Edit(scale_call, scale_call),
        )
        return self.report(clip, message, fix)
