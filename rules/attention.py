"""ADV603-ADV604: attention kernels (guide: "Using PyTorch native attention and Flash Attention").

ADV603 finds Hugging Face models loaded with the eager attention implementation;
ADV604 finds attention written out by hand (``softmax(q @ k^T * scale) @ v``) and, where
the computation has the canonical form, rewrites it to one
``F.scaled_dot_product_attention`` call.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from advisor.context import MISSING, FileContext
from advisor.edits import ReplaceNodes, string_like
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid
from advisor.values import string_value

GUIDE = "Using PyTorch native attention and Flash Attention"
SDPA = "torch.nn.functional.scaled_dot_product_attention"


# -- ADV603 --------------------------------------------------------------------------------
ATTN_SETTING = ("attn_implementation", "_attn_implementation")
# Model families whose transformers classes have no SDPA path (loading them with "sdpa"
# raises), or for which Hugging Face recommends eager attention for training (Gemma 2/3
# soft-cap the attention logits). A file naming one of them chose eager on purpose.
EAGER_BY_DESIGN = re.compile(
    r"gemma[-_ ]?[23](?!\d*b)|vaultgemma|t5gemma|gpt[-_]?oss|bloom|codegen|gpt[-_]?neo(?!x)|gpt[-_]?j[-_]"
    r"|\bmpt[-_]|deberta|longformer|xlnet|reformer|xglm|\bled[-_]|long[-_]?t5|switch[-_]|big[-_]?bird"
    r"|flaubert|canine|funnel|mpnet|rembert|roformer|squeezebert|convbert|layoutlmv[23]|markuplm|tapas"
    r"|\bxlm[-_](?!roberta)",
    re.I,
)
# Outputs that hold attention weights, which SDPA cannot return.
ATTENTION_OUTPUTS = ("attentions", "cross_attentions", "encoder_attentions", "decoder_attentions")


def needs_attention_weights(ctx: FileContext) -> bool:
    """The script asks the model for its attention weights (``output_attentions=True``,
    ``outputs.attentions``): only eager attention can return them."""
    for arg in ctx.nodes(cst.Arg):
        if arg.keyword is not None and arg.keyword.value == "output_attentions" and not _is_false(ctx, arg.value):
            return True
    for element in ctx.nodes(cst.DictElement):
        key = ctx.values.resolve(element.key)
        if key is not None and key.value == "output_attentions" and not _is_false(ctx, element.value):
            return True
    for qualified, assignments in ctx.attribute_assignments.items():
        if qualified.endswith(".output_attentions"):
            for assignment in assignments:
                value = getattr(assignment, "value", None)
                if value is None or not _is_false(ctx, value):
                    return True
    for attribute in ctx.nodes(cst.Attribute):
        if attribute.attr.value in ATTENTION_OUTPUTS:
            return True
    return any(string_value(s) in ATTENTION_OUTPUTS for s in ctx.nodes(cst.SimpleString))


def _is_false(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    resolved = ctx.values.resolve(expr)
    return resolved is not None and resolved.value in (False, None)


def _eager_by_design(ctx: FileContext) -> bool:
    return any(
        isinstance(value := string_value(s), str) and EAGER_BY_DESIGN.search(value)
        for s in ctx.nodes(cst.SimpleString)
    )


def _attention_settings(ctx: FileContext) -> Iterator[cst.BaseExpression]:
    """Every expression the file gives as an attention implementation: keyword arguments
    (``from_pretrained``, ``AutoConfig``, TRL ``ModelConfig``, ``dict(...)`` kwargs),
    dict entries, ``config._attn_implementation = ...`` and ``set_attn_implementation(...)``."""
    for arg in ctx.nodes(cst.Arg):
        if arg.keyword is not None and arg.keyword.value in ATTN_SETTING:
            yield arg.value
    for element in ctx.nodes(cst.DictElement):
        if isinstance(element.key, cst.SimpleString) and string_value(element.key) in ATTN_SETTING:
            yield element.value
    for assign in ctx.nodes(cst.Assign):
        for target in assign.targets:
            if isinstance(target.target, cst.Attribute) and target.target.attr.value in ATTN_SETTING:
                if (dotted_name(target.target) or "").split(".")[0] != "self":
                    yield assign.value  # ``self...._attn_implementation = ...``: a library configuring itself
    for call in ctx.method_calls("set_attn_implementation"):
        if call.args and call.args[0].keyword is None and not call.args[0].star:
            yield call.args[0].value


class EagerAttention(Rule):
    code = "ADV603"
    name = "eager-attention"
    summary = 'A Hugging Face model loaded with `attn_implementation="eager"`.'
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        Eager attention computes `softmax(QK^T / sqrt(d)) V` as separate matmul, softmax and
        dropout kernels and keeps the full sequence x sequence score matrix of every head in
        memory for the backward pass. `attn_implementation="sdpa"` runs
        `torch.nn.functional.scaled_dot_product_attention`, which dispatches to FlashAttention
        or memory-efficient kernels: faster, and memory linear in the sequence length. The
        guide's *Using PyTorch native attention and Flash Attention* section: transformers
        uses SDPA by default where a model supports it, so an explicit `"eager"` opts out.

        The fix is unsafe: the kernels round differently, and a model class without an SDPA
        path (transformers raises at load time) needs eager; dropping the argument lets
        transformers pick SDPA where it exists and eager elsewhere. Eager is also the only
        implementation that returns attention weights.
    """
    example = """
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", attn_implementation="eager")
    """
    use_instead = """
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", attn_implementation="sdpa")
    """
    silent_when = """
        - the value is not `"eager"` (`"sdpa"`, `"flash_attention_2"`, `"flex_attention"`...), or
          cannot be resolved (read from the command line without a default, computed);
        - the script needs attention weights: `output_attentions=True` (or an unresolved value)
          anywhere, `config.output_attentions = True`, or reads `outputs.attentions`;
        - the file names a model family with no SDPA implementation in transformers
          (GPT-J, GPT-Neo, BLOOM, MPT, DeBERTa, Longformer, XLNet...) or one for which
          eager is the recommended training setting (Gemma 2 and 3, gpt-oss);
        - the script is CPU-only: no CUDA device, Trainer, Accelerate or `device_map` anywhere;
        - a class sets its own `self...._attn_implementation` (library code forcing a sub-model
          that has no other implementation).
    """
    valid = [
        Valid(
            """
            from transformers import PretrainedConfig
            class MatcherConfig(PretrainedConfig):
                def __init__(self, detector_config=None, **kwargs):
                    super().__init__(**kwargs)
                    self.detector_config.attn_implementation = "eager"
            """,
            note="library code configuring its own sub-model",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", attn_implementation="sdpa", device_map="auto")
            other = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", attn_implementation="flash_attention_2", device_map="auto")
            """,
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation=args.attn, device_map="auto")
            """,
            note="value read from the command line: unknown",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", attn_implementation="eager", device_map="auto")
            out = model(**batch, output_attentions=True)
            """,
            note="attention weights are needed: only eager returns them",
        ),
        Valid(
            """
            from transformers import AutoModel
            model = AutoModel.from_pretrained("bert-base-uncased", attn_implementation="eager").cuda()
            maps = model(**inputs).attentions
            """,
            note="reads the attention maps",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("google/gemma-2-9b", attn_implementation="eager", device_map="auto")
            """,
            note="Gemma 2: eager is the recommended training setting",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("EleutherAI/gpt-j-6b", attn_implementation="eager", device_map="auto")
            """,
            note="GPT-J has no SDPA path in transformers",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM
            if __name__ == "__main__":
                model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", attn_implementation="eager")
                print(model.generate(**inputs))
            """,
            note="CPU-only script",
        ),
    ]
    invalid = [
        Invalid(
            """
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", attn_implementation="eager", device_map="auto")
            """,
            fixed="""
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", attn_implementation="sdpa", device_map="auto")
            """,
            unsafe=True,
        ),
        Invalid(
            """
            import argparse
            from transformers import AutoModelForSequenceClassification, Trainer
            parser = argparse.ArgumentParser()
            parser.add_argument("--attn_implementation", default='eager')
            args = parser.parse_args()
            model = AutoModelForSequenceClassification.from_pretrained(args.model, attn_implementation=args.attn_implementation)
            trainer = Trainer(model=model, args=training_args)
            """,
            fixed="""
            import argparse
            from transformers import AutoModelForSequenceClassification, Trainer
            parser = argparse.ArgumentParser()
            parser.add_argument("--attn_implementation", default='sdpa')
            args = parser.parse_args()
            model = AutoModelForSequenceClassification.from_pretrained(args.model, attn_implementation=args.attn_implementation)
            trainer = Trainer(model=model, args=training_args)
            """,
            unsafe=True,
            note="an argparse default; the Trainer puts the model on the GPU",
        ),
        Invalid(
            """
            import torch
            from transformers import AutoConfig, AutoModelForCausalLM
            model_kwargs = dict(torch_dtype=torch.bfloat16, attn_implementation="eager")
            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", **model_kwargs).to("cuda")
            config = AutoConfig.from_pretrained("Qwen/Qwen2.5-0.5B")
            config._attn_implementation = "eager"
            """,
            fixed="""
            import torch
            from transformers import AutoConfig, AutoModelForCausalLM
            model_kwargs = dict(torch_dtype=torch.bfloat16, attn_implementation="sdpa")
            model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", **model_kwargs).to("cuda")
            config = AutoConfig.from_pretrained("Qwen/Qwen2.5-0.5B")
            config._attn_implementation = "sdpa"
            """,
            count=2,
            unsafe=True,
            note="a kwargs dict and a config attribute",
        ),
        Invalid(
            """
            from trl import SFTConfig, SFTTrainer
            config = SFTConfig(output_dir="out", model_init_kwargs={"attn_implementation": "eager"})
            """,
            fixed="""
            from trl import SFTConfig, SFTTrainer
            config = SFTConfig(output_dir="out", model_init_kwargs={"attn_implementation": "sdpa"})
            """,
            unsafe=True,
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        settings = list(_attention_settings(ctx))
        if not settings or needs_attention_weights(ctx) or _eager_by_design(ctx) or ctx.facts.devices.runs_without_gpu:
            return
        seen: set[int] = set()
        for expr in settings:
            resolved = ctx.values.resolve(expr)
            if resolved is None or resolved.value != "eager" or id(resolved.node) in seen:
                continue
            seen.add(id(resolved.node))
            where = " (the default of its command-line option)" if resolved.origin == "argparse default" else ""
            message = (
                f'`attn_implementation="eager"`{where} computes attention as separate matmul and softmax '
                f'kernels over the full score matrix; use `"sdpa"` (guide: {GUIDE})'
            )
            fix = None
            if isinstance(resolved.node, cst.SimpleString):
                fix = self.fix('Use `"sdpa"` attention', Edit(resolved.node, string_like(resolved.node, "sdpa")))
            yield self.report(expr, message, fix)


# -- ADV604: the shape of a hand-written attention ------------------------------------------
SOFTMAX_FUNCTIONS = ("torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax")
DROPOUT_FUNCTIONS = ("torch.nn.functional.dropout", "torch.dropout")
MATMUL_FUNCTIONS = ("torch.matmul", "torch.bmm", "torch.mm")
# Matmuls that only take tensors of one rank: it tells which dims a transpose swaps.
MATMUL_RANK = {"torch.bmm": 3, "bmm": 3, "torch.mm": 2, "mm": 2}
EINSUM_FUNCTIONS = ("torch.einsum",)
# Reshapes of the score matrix (Swin's windows): still attention, no longer the canonical form.
SCORE_RESHAPES = ("view", "reshape", "contiguous", "permute", "transpose", "flatten", "unflatten", "squeeze", "unsqueeze")
CAST_METHODS = ("float", "half", "bfloat16", "double", "to", "type", "type_as")
# Calls, attributes and strings that show a fused attention path next to the manual one.
FUSED_ATTENTION = (
    "scaled_dot_product_attention",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "memory_efficient_attention",
    "flex_attention",
    "ALL_ATTENTION_FUNCTIONS",
    "sdpa_attention_forward",
)
# Function or class names that say the manual computation is deliberate (a reference or
# the eager alternative of a dispatching model).
DELIBERATE = re.compile(r"(^|_)(eager|naive|reference|ref|slow|manual|math|vanilla)($|_)", re.I)
NEG_INF_LITERAL = -1e9
_NO_CACHE = re.compile(r"cache|past", re.I)


@dataclass
class Step:
    """One operation between the scores and the softmax, or between the softmax and ``@ v``."""

    kind: str  # scale, mask_add, masked_fill, cast, dropout, other
    node: cst.CSTNode
    operand: cst.BaseExpression | None = None  # scale factor, divisor, additive mask
    divide: bool = False
    fill_condition: cst.BaseExpression | None = None
    fill_value: cst.BaseExpression | None = None


@dataclass
class Scores:
    node: cst.BaseExpression  # ``q @ k.transpose(-2, -1)``
    query: cst.BaseExpression | None
    key: cst.BaseExpression | None  # the key before its transpose
    exact: bool  # a matmul over exactly the last two dims of known tensors
    rank: int | None = None  # known from ``torch.bmm`` (3) or a full ``permute``


@dataclass
class Attention:
    softmax: cst.Call
    scores: Scores
    before: list[Step]  # scores -> softmax, innermost first
    after: list[Step]  # softmax -> value matmul
    output: cst.BaseExpression  # ``att @ v``
    value: cst.BaseExpression
    canonical_output: bool  # ``@``/``torch.matmul``/``torch.bmm``, not einsum
    softmax_last_dim: bool  # dim=-1, no dtype
    statements: list[cst.CSTNode] = field(default_factory=list)  # assignments the chain runs through
    chain_names: list[cst.Name] = field(default_factory=list)  # the Name nodes it flows through


def _int_value(ctx: FileContext, expr: cst.BaseExpression | None) -> int | None:
    if expr is None:
        return None
    resolved = ctx.values.resolve(expr)
    if resolved is None or isinstance(resolved.value, bool) or not isinstance(resolved.value, int):
        return None
    return resolved.value


def _positional(call: cst.Call, index: int, keyword: str | None = None) -> cst.BaseExpression | None:
    if keyword is not None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == keyword:
                return arg.value
    plain = [arg for arg in call.args if arg.keyword is None]
    if any(arg.star for arg in plain[: index + 1]):
        return None
    return plain[index].value if index < len(plain) else None


def _method(call: cst.CSTNode, *names: str) -> bool:
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value in names


def _is_library_call(ctx: FileContext, call: cst.Call) -> bool:
    """``F.softmax(x)`` rather than ``x.softmax()``: the callee is a module function."""
    qualname = ctx.qualname(call.func)
    return qualname is not None and qualname.startswith("torch")


def _transposed_key(
    ctx: FileContext, expr: cst.BaseExpression, rank: int | None
) -> tuple[cst.BaseExpression, bool, int | None] | None:
    """For ``k.transpose(-2, -1)`` (and spellings): ``k``, whether the transpose is known to
    swap exactly the last two dims, and the rank where the spelling tells it."""
    if isinstance(expr, cst.Attribute) and expr.attr.value in ("mT", "T"):
        return expr.value, expr.attr.value == "mT" or rank == 2, rank
    if not isinstance(expr, cst.Call) or not isinstance(expr.func, cst.Attribute):
        return None
    method = expr.func.attr.value
    receiver = expr.func.value
    if _is_library_call(ctx, expr):
        return None
    if method == "t" and not expr.args:
        return receiver, rank == 2, rank
    if method in ("transpose", "swapaxes", "swapdims") and len(expr.args) == 2:
        dims = {_int_value(ctx, arg.value) for arg in expr.args}
        if dims == {-2, -1}:
            return receiver, True, rank
        if dims in ({1, 2}, {2, 3}):
            return receiver, rank == max(dims) + 1, rank
        return None
    if method == "permute" and expr.args:
        dims = [_int_value(ctx, arg.value) for arg in expr.args]
        if None in dims or len(dims) < 2:
            return None
        full = len(dims)
        expected = list(range(full - 2)) + [full - 1, full - 2]
        return (receiver, True, full) if dims == expected else None
    return None


def _einsum_scores(ctx: FileContext, call: cst.Call) -> bool:
    """``einsum("bhid,bhjd->bhij", q, k)``: one index contracted, the output ending in the
    query's own index then the key's (any layout: ``"bdi,bdj->bij"`` too)."""
    spec = _einsum_spec(ctx, call)
    if spec is None or len(call.args) != 3:
        return False
    (left, right), out = spec
    contracted = [c for c in left if c in right and c not in out]
    own_left = [c for c in left if c not in right]
    own_right = [c for c in right if c not in left]
    return len(contracted) == 1 and len(own_left) == 1 and len(own_right) == 1 and out.endswith(own_left[0] + own_right[0])


def _einsum_values(ctx: FileContext, call: cst.Call, weights: cst.Arg) -> bool:
    """``einsum("bhij,bhjd->bhid", att, v)`` (either operand order): the weights' last index,
    the one the softmax normalized, is contracted with v."""
    spec = _einsum_spec(ctx, call)
    if spec is None or len(call.args) != 3 or weights not in (call.args[1], call.args[2]):
        return False
    (left, right), out = spec
    mine, other = (left, right) if weights is call.args[1] else (right, left)
    return bool(mine) and mine[-1] in other and mine[-1] not in out


def _einsum_spec(ctx: FileContext, call: cst.Call) -> tuple[tuple[str, str], str] | None:
    if ctx.qualname(call.func) not in EINSUM_FUNCTIONS or not call.args:
        return None
    spec = ctx.values.resolve(call.args[0].value)
    if spec is None or not isinstance(spec.value, str) or "->" not in spec.value:
        return None
    inputs, _, out = spec.value.replace(" ", "").replace("...", "").partition("->")
    operands = inputs.split(",")
    if len(operands) != 2:
        return None
    return (operands[0], operands[1]), out


def _matmul_operands(
    ctx: FileContext, node: cst.CSTNode
) -> tuple[cst.BaseExpression, cst.BaseExpression, int | None] | None:
    """(left, right, rank where the function fixes it) of ``a @ b``, ``torch.matmul(a, b)``,
    ``torch.bmm(a, b)``, ``torch.mm(a, b)``, ``a.matmul(b)``, ``a.bmm(b)``."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return node.left, node.right, None
    if not isinstance(node, cst.Call):
        return None
    qualname = ctx.qualname(node.func)
    if qualname in MATMUL_FUNCTIONS and len(node.args) == 2 and not any(a.star or a.keyword for a in node.args):
        return node.args[0].value, node.args[1].value, MATMUL_RANK.get(qualname)
    if _method(node, "matmul", "bmm", "mm") and not _is_library_call(ctx, node) and len(node.args) == 1:
        return node.func.value, node.args[0].value, MATMUL_RANK.get(node.func.attr.value)  # type: ignore[attr-defined]
    return None


def _scores(ctx: FileContext, expr: cst.BaseExpression) -> Scores | None:
    operands = _matmul_operands(ctx, expr)
    if operands is not None:
        query, transposed, rank = operands
        key = _transposed_key(ctx, transposed, rank)
        if key is None and isinstance(transposed, cst.Name):
            value = ctx.single_assignment(transposed)
            inner = _transposed_key(ctx, value, rank) if value is not None else None
            if inner is not None:
                return Scores(expr, query, transposed, False, inner[2])
        if key is None:
            return None
        return Scores(expr, query, key[0], key[1], key[2])
    if isinstance(expr, cst.Call) and _einsum_scores(ctx, expr):
        return Scores(expr, None, None, False)
    return None


def _reaching_bindings(ctx: FileContext, name: cst.Name) -> list[cst.CSTNode]:
    """The bindings of a local name that may give it its value at this use, latest first:
    earlier bindings count until one that runs unconditionally before the use; a binding in
    the other branch of an ``if``/``else`` than the use never does (an ``x = f(x)`` statement
    binds after its right-hand side runs)."""
    position = ctx.order[name]
    candidates = [
        binding.node
        for binding in ctx.lookup(name.value, name)
        if ctx.order[binding.node] < position
        and not (isinstance(binding.node, (cst.Assign, cst.AugAssign)) and ctx.is_descendant(name, binding.node))
    ]
    reaching: list[cst.CSTNode] = []
    for node in sorted(candidates, key=ctx.order.__getitem__, reverse=True):
        if _exclusive_branches(ctx, node, name):
            continue
        reaching.append(node)
        if isinstance(node, cst.Param):
            break
        statement = ctx.statement_of(node)
        block = ctx.parent.get(statement) if statement is not None else None
        if block is not None and ctx.is_descendant(name, block):
            break
    return reaching


def _exclusive_branches(ctx: FileContext, binding: cst.CSTNode, use: cst.CSTNode) -> bool:
    for ancestor in ctx.ancestors(binding):
        if isinstance(ancestor, cst.If) and ctx.is_descendant(use, ancestor):
            if ctx.is_descendant(binding, ancestor.body) != ctx.is_descendant(use, ancestor.body):
                return True
    return False


def _binding_before(ctx: FileContext, name: cst.Name) -> cst.CSTNode | None:
    """The assignment a local name's value most recently comes from, before its use."""
    reaching = _reaching_bindings(ctx, name)
    return reaching[0] if reaching else None


class _Tracer:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    # backward: softmax input -> scores
    def scores(self, expr: cst.BaseExpression, depth: int = 0) -> tuple[Scores, list[Step], list, list] | None:
        """(scores, steps innermost first, statements, names) for the softmax input ``expr``."""
        ctx = self.ctx
        if depth > 24:
            return None
        found = _scores(ctx, expr)
        if found is not None:
            return found, [], [], []
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and not _is_library_call(ctx, expr):
            method = expr.func.attr.value
            if method in CAST_METHODS:
                return self._then(self.scores(expr.func.value, depth + 1), Step("cast", expr))
            if method in SCORE_RESHAPES:
                return self._then(self.scores(expr.func.value, depth + 1), Step("other", expr))
            if method in ("masked_fill", "masked_fill_") and len(expr.args) == 2:
                step = Step("masked_fill", expr, fill_condition=expr.args[0].value, fill_value=expr.args[1].value)
                return self._then(self.scores(expr.func.value, depth + 1), step)
        if isinstance(expr, cst.Call) and ctx.qualname(expr.func) == "torch.where" and len(expr.args) == 3:
            # ``torch.where(causal_mask, scores, mask_value)`` (GPT-2's eager path)
            step = Step("other", expr)
            return self._then(self.scores(expr.args[1].value, depth + 1), step)
        if isinstance(expr, cst.BinaryOperation):
            operator = expr.operator
            if isinstance(operator, cst.Multiply):
                for inner, factor in ((expr.left, expr.right), (expr.right, expr.left)):
                    traced = self.scores(inner, depth + 1)
                    if traced is not None:
                        return self._then(traced, Step("scale", expr, operand=factor))
            elif isinstance(operator, cst.Divide):
                return self._then(self.scores(expr.left, depth + 1), Step("scale", expr, expr.right, divide=True))
            elif isinstance(operator, cst.Add):
                for inner, mask in ((expr.left, expr.right), (expr.right, expr.left)):
                    traced = self.scores(inner, depth + 1)
                    if traced is not None:
                        return self._then(traced, Step("mask_add", expr, operand=mask))
            return None
        if isinstance(expr, cst.Name):
            binding = _binding_before(ctx, expr)
            if isinstance(binding, cst.Assign) and len(binding.targets) == 1 and isinstance(binding.targets[0].target, cst.Name):
                traced = self.scores(binding.value, depth + 1)
                if traced is None:
                    return None
                scores, steps, statements, names = traced
                return scores, steps, statements + [binding], names + [binding.targets[0].target, expr]
            if isinstance(binding, cst.AugAssign) and isinstance(binding.target, cst.Name):
                traced = self.scores(binding.target, depth + 1)
                if traced is None:
                    return None
                operator = binding.operator
                if isinstance(operator, cst.MultiplyAssign):
                    step = Step("scale", binding, operand=binding.value)
                elif isinstance(operator, cst.DivideAssign):
                    step = Step("scale", binding, operand=binding.value, divide=True)
                elif isinstance(operator, cst.AddAssign):
                    step = Step("mask_add", binding, operand=binding.value)
                else:
                    return None
                scores, steps, statements, names = traced
                return scores, steps + [step], statements + [binding], names + [expr]
        return None

    @staticmethod
    def _then(traced, step: Step):
        if traced is None:
            return None
        scores, steps, statements, names = traced
        return scores, steps + [step], statements, names

    # forward: softmax -> value matmul
    def values(self, node: cst.BaseExpression, depth: int = 0):
        """(output, value, canonical, steps, statements, names) where the weights ``node`` meet v."""
        ctx = self.ctx
        if depth > 24:
            return None
        parent = ctx.parent.get(node)
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.MatrixMultiply):
            return (parent, parent.right, True, [], [], []) if parent.left is node else None
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Multiply):
            return self._prepend(self.values(parent, depth + 1), Step("other", parent))  # a head mask
        if isinstance(parent, cst.Attribute) and parent.value is node:
            call = ctx.parent.get(parent)
            if not isinstance(call, cst.Call) or call.func is not parent:
                return None
            if parent.attr.value in CAST_METHODS:
                return self._prepend(self.values(call, depth + 1), Step("cast", call))
            operands = _matmul_operands(ctx, call)
            if operands is not None:
                return call, operands[1], True, [], [], []
            if parent.attr.value == "masked_fill" or parent.attr.value == "masked_fill_":
                return self._prepend(self.values(call, depth + 1), Step("other", call))
            return None
        if isinstance(parent, cst.Arg) and parent.keyword is None:
            call = ctx.parent.get(parent)
            if not isinstance(call, cst.Call) or not call.args:
                return None
            operands = _matmul_operands(ctx, call)
            if operands is not None:
                return (call, operands[1], True, [], [], []) if call.args[0] is parent else None
            if _einsum_values(ctx, call, parent):
                value = call.args[2] if call.args[1] is parent else call.args[1]
                return call, value.value, False, [], [], []
            if call.args[0] is parent and self.is_dropout(call):
                return self._prepend(self.values(call, depth + 1), Step("dropout", call))
            return None
        if isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1:
            target = parent.targets[0].target
            if not isinstance(target, cst.Name):
                return None
            for use in self.uses_of(parent, target):
                found = self.values(use, depth + 1)
                if found is not None:
                    output, value, canonical, steps, statements, names = found
                    return output, value, canonical, steps, [parent] + statements, [target, use] + names
        return None

    @staticmethod
    def _prepend(found, step: Step):
        if found is None:
            return None
        output, value, canonical, steps, statements, names = found
        return output, value, canonical, [step] + steps, statements, names

    def uses_of(self, assign: cst.Assign, target: cst.Name) -> list[cst.Name]:
        ctx = self.ctx
        scope = ctx.scope_of.get(assign)
        root = scope if scope is not None else ctx.module
        uses = []
        for name in ctx.walk(root, cst.Name):
            if name.value != target.value or name is target or ctx.order[name] <= ctx.order[assign]:
                continue
            if not _is_variable(ctx, name) or ctx.scope_of.get(name) is not scope:
                continue
            if any(binding is assign for binding in _reaching_bindings(ctx, name)):
                uses.append(name)
        return uses

    def is_dropout(self, call: cst.Call) -> bool:
        ctx = self.ctx
        if ctx.qualname(call.func) in DROPOUT_FUNCTIONS:
            return True
        if self.module_attribute(call, "torch.nn.Dropout") is not None:
            return True
        # ``self.attn_drop(att)`` built elsewhere, or a dropout module passed in (``dropout(p_attn)``)
        callee = call.func.attr if isinstance(call.func, cst.Attribute) else call.func
        return isinstance(callee, cst.Name) and "drop" in callee.value.lower() and len(call.args) == 1

    def module_attribute(self, call: cst.Call, qualname: str) -> cst.Call | None:
        """The constructor of ``self.<attr>`` when every assignment of it in the enclosing class
        builds ``qualname`` (``self.attn_drop = nn.Dropout(p)``)."""
        ctx = self.ctx
        func = call.func
        if not isinstance(func, cst.Attribute) or not isinstance(func.value, cst.Name):
            return None
        owner = ctx.enclosing(call, cst.ClassDef)
        if owner is None:
            return None
        constructors = []
        for assignment in ctx.attribute_assignments.get(f"{func.value.value}.{func.attr.value}", ()):
            if ctx.enclosing(assignment, cst.ClassDef) is not owner:
                continue
            value = getattr(assignment, "value", None)
            if not isinstance(value, cst.Call) or ctx.qualname(value.func) != qualname:
                return None
            constructors.append(value)
        return constructors[0] if len(constructors) == 1 else None


def _is_variable(ctx: FileContext, name: cst.Name) -> bool:
    """A Name that reads or binds a variable (not ``obj.name`` nor a keyword ``name=``)."""
    parent = ctx.parent.get(name)
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return False
    if isinstance(parent, (cst.Arg, cst.Param)) and getattr(parent, "keyword", None) is name:
        return False
    return not isinstance(parent, (cst.ImportAlias, cst.FunctionDef, cst.ClassDef))


# -- ADV604: which softmax calls to start from ------------------------------------------------
@dataclass
class _Softmax:
    call: cst.Call
    input: cst.BaseExpression
    dim: int
    has_dtype: bool


def _softmaxes(ctx: FileContext, tracer: _Tracer) -> Iterator[_Softmax]:
    for call in ctx.calls(*SOFTMAX_FUNCTIONS):
        found = _softmax_of(ctx, call, _positional(call, 0, "input"), ctx.argument(call, "dim", 1))
        if found is not None:
            yield found
    for call in ctx.method_calls("softmax"):
        if ctx.qualname(call.func) is None:
            found = _softmax_of(ctx, call, call.func.value, ctx.argument(call, "dim", 0))  # type: ignore[attr-defined]
            if found is not None:
                yield found
    modules = {
        key.split(".", 1)[1]
        for key, assignments in ctx.attribute_assignments.items()
        if key.count(".") == 1
        and any(
            isinstance(getattr(a, "value", None), cst.Call) and ctx.qualname(a.value.func) == "torch.nn.Softmax"  # type: ignore[union-attr]
            for a in assignments
        )
    }
    for call in ctx.method_calls(*sorted(modules)):
        constructor = tracer.module_attribute(call, "torch.nn.Softmax")
        if constructor is not None and len(call.args) == 1 and not call.args[0].keyword:
            found = _softmax_of(ctx, call, call.args[0].value, ctx.argument(constructor, "dim", 0), constructor)
            if found is not None:
                yield found


def _softmax_of(ctx, call, input_expr, dim, constructor=None) -> _Softmax | None:
    if input_expr is None or dim is None or dim is MISSING:
        return None  # an implicit dim is not attention's "over the keys"
    value = _int_value(ctx, dim)  # type: ignore[arg-type]
    if value is None or (value < 0 and value != -1):
        return None
    has_dtype = ctx.keyword_arg(call, "dtype") is not None or (
        constructor is not None and ctx.keyword_arg(constructor, "dtype") is not None
    )
    return _Softmax(call, input_expr, value, has_dtype)


def _deliberately_manual(ctx: FileContext, node: cst.CSTNode) -> bool:
    """A fused attention path next to this one (nanoGPT's ``if self.flash: ... else:``, HF's
    attention dispatch), or a function/class whose name says it is the eager/reference one."""
    for owner in (ctx.enclosing(node, cst.FunctionDef), ctx.enclosing(node, cst.ClassDef)):
        words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", owner.name.value) if owner is not None else ""  # type: ignore[attr-defined]
        if DELIBERATE.search(words):
            return True
    owner_class = ctx.enclosing(node, cst.ClassDef)
    region = owner_class if owner_class is not None else ctx.module
    if any(name.value in FUSED_ATTENTION for name in ctx.walk(region, cst.Name)):
        return True
    if any("attn_implementation" in name.value for name in ctx.nodes(cst.Name)):
        return True  # a model that dispatches on ``config._attn_implementation``: eager is one choice
    return any(string_value(s) in FUSED_ATTENTION for s in ctx.walk(region, cst.SimpleString))


def _fused_path_off_by_default(ctx: FileContext, node: cst.CSTNode) -> str | None:
    """The switch in front of a fused path beside this manual one, when it is off unless
    turned on (llm.c's ``if FLASH: sdpa else: manual`` with ``FLASH = 0`` and ``--flash``
    defaulting to 0; ``if self.flash: return self.flash_attn(...)`` with ``flash=False``):
    the manual code is what runs by default. Its description (``FLASH`` is 0), or None."""
    switch: cst.If | None = None
    for ancestor in ctx.ancestors(node):
        if isinstance(ancestor, cst.If) and ancestor.orelse is not None and ctx.order[node] >= ctx.order[ancestor.orelse]:
            switch = ancestor
            break
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            break
    if switch is None:  # an early return: ``if self.flash: return self.flash_attn(q, k, v)``
        function = ctx.enclosing(node, cst.FunctionDef)
        statement = ctx.statement_of(node)
        if not isinstance(function, cst.FunctionDef) or statement is None:
            return None
        for candidate in ctx.walk(function, cst.If):
            if ctx.order[candidate] < ctx.order[statement] and ctx.end_order[candidate] < ctx.order[statement]:
                if candidate.orelse is None and ctx.walk(candidate.body, cst.Return):
                    switch = candidate
    if switch is None or not _calls_fused(ctx, switch.body):
        return None
    test = switch.test
    while isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        test = test.left  # ``if self.flash and not exists(bias)``: off when the switch is
    default = ctx.values.off_by_default(test)
    return None if default is None else f"`{ctx.code(test)}` is {default} unless turned on"


def _calls_fused(ctx: FileContext, block: cst.CSTNode) -> bool:
    for call in ctx.walk(block, cst.Call):
        name = call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", "")
        if name in FUSED_ATTENTION or "flash" in str(name).lower():
            return True
    return False


class ManualAttention(Rule):
    code = "ADV604"
    name = "manual-attention"
    summary = "Attention written out by hand: `softmax(q @ k.transpose(-2, -1) * scale) @ v`."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        Written out, attention is at least four kernels (scores matmul, scale/mask, softmax,
        dropout, weights matmul) and materializes the `T x T` score and probability matrices
        of every head, in the forward pass and again for the backward. PyTorch's
        `torch.nn.functional.scaled_dot_product_attention` (SDPA) computes the same
        `softmax(q k^T * scale + mask) v` in one fused FlashAttention or memory-efficient
        kernel, without storing those matrices: the guide's *Using PyTorch native attention
        and Flash Attention* section. The speed-up grows with the sequence length; it helps
        inference as well as training.

        The fix is unsafe (the fused kernels round differently and draw dropout differently)
        and is offered only for the canonical form: `q @ k.transpose(-2, -1)` (or `.mT`,
        `torch.matmul`, 3-D `torch.bmm`, whose operands get a heads dimension of one,
        `q.unsqueeze(1)`: the fused kernels take only 4-D tensors), one scale factor, an optional causal mask from a
        `torch.tril` buffer (`masked_fill(tril == 0, -inf)`) or an additive mask,
        `softmax(dim=-1)`, an optional `nn.Dropout` / `F.dropout`, then `@ v`, in straight-line
        statements of one block, with the weights used nowhere else. It passes `scale=` unless
        the scale is `1 / sqrt(q.size(-1))` (SDPA's default), `is_causal=True` for the tril
        mask, and `dropout_p=<p> if self.training else 0.0` so dropout stays off in eval.
        Anything else is reported with advice only: einsum forms, casts around the softmax
        (`.float()` ... `.type_as(q)`), other masks, and weights that escape (returned,
        stored on `self`, appended, logged): SDPA cannot return them.
    """
    example = """
        def forward(self, x):
            q, k, v = self.qkv(x).split(self.n_embd, dim=2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
    """
    use_instead = """
        def forward(self, x):
            q, k, v = self.qkv(x).split(self.n_embd, dim=2)
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_dropout.p if self.training else 0.0, is_causal=True)
    """
    silent_when = """
        - the manual code is only the fallback or the alternative of a fused path: the class (or,
          outside a class, the file) also calls or names `scaled_dot_product_attention`,
          `flash_attn_func`, xformers' `memory_efficient_attention`, `flex_attention` or HF's
          `ALL_ATTENTION_FUNCTIONS`; or the function/class is named as the eager, naive or
          reference implementation. Where the switch in front of the fused path is off unless
          the user turns it on (`if FLASH: ... else:` with `FLASH = 0` and `--flash` defaulting
          to 0; `if self.flash: return ...` with `flash=False`), the manual code is what runs:
          that is reported, as advice to turn the fused path on by default;
        - the softmax is not attention's: no `q @ k^T`-shaped scores before it (a classifier's
          logits, `wei = torch.zeros(T, T)` averaging), or its result does not go into `@ v`
          (contrastive or distillation logits, sampling probabilities, attention weights that
          are only returned);
        - the softmax runs over another dim than the last, or its dim is implicit or unknown;
        - the file is a CPU-only script (it runs, with no CUDA device or GPU framework
          anywhere). Files that only define models are checked: their importer picks the device.
    """
    valid = [
        Valid(
            """
            import math
            import torch
            import torch.nn as nn
            from torch.nn import functional as F

            class CausalSelfAttention(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.attn_dropout = nn.Dropout(config.dropout)
                    self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
                    if not self.flash:
                        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size))

                def forward(self, q, k, v):
                    T = q.size(-2)
                    if self.flash:
                        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)
                    else:
                        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                        att = F.softmax(att, dim=-1)
                        att = self.attn_dropout(att)
                        y = att @ v
                    return y
            """,
            note="nanoGPT: the manual path is only the fallback when SDPA is missing",
        ),
        Valid(
            """
            import torch.nn as nn
            import torch.nn.functional as F

            class Classifier(nn.Module):
                def forward(self, x):
                    logits = self.head(self.body(x))
                    return F.softmax(logits, dim=-1)
            """,
            note="a classifier's softmax",
        ),
        Valid(
            """
            import torch
            import torch.nn.functional as F

            def clip_loss(image_emb, text_emb, temperature):
                logits = image_emb @ text_emb.T / temperature
                labels = torch.arange(len(logits), device=logits.device)
                probs = logits.softmax(dim=-1)
                return F.cross_entropy(logits, labels), probs
            """,
            note="contrastive logits: no `@ v` after the softmax",
        ),
        Valid(
            """
            import torch
            from torch.nn import functional as F
            T = 8
            tril = torch.tril(torch.ones(T, T))
            wei = torch.zeros((T, T))
            wei = wei.masked_fill(tril == 0, float("-inf"))
            wei = F.softmax(wei, dim=-1)
            xbow = wei @ x
            """,
            note="averaging with a masked softmax: no q @ k^T scores",
        ),
        Valid(
            """
            import torch.nn as nn

            class Attention(nn.Module):
                def forward(self, q, k, v):
                    att = (q @ k.transpose(-2, -1)) * self.scale
                    att = att.softmax(dim=1)
                    return att @ v
            """,
            note="softmax over another dim than the keys'",
        ),
        Valid(
            """
            import math
            import torch
            import torch.nn.functional as F

            def reference_attention(q, k, v):
                return F.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1) @ v

            def test_sdpa_matches():
                q = k = v = torch.randn(2, 4, 8, 16)
                torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v), reference_attention(q, k, v))
            """,
            note="a reference implementation to test SDPA against",
        ),
        Valid(
            """
            import math
            import torch
            import torch.nn as nn

            class Head(nn.Module):
                def forward(self, q, k, v):
                    att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
                    return att @ v

            def main():
                model = Head()
                for x in data:
                    loss = model(x, x, x).sum()
                    loss.backward()
                    optimizer.step()

            if __name__ == "__main__":
                main()
            """,
            note="CPU-only training script",
        ),
    ]
    invalid = [
        Invalid(
            """
            import argparse
            import math
            import torch.nn as nn
            import torch.nn.functional as F

            FLASH = 0

            class CausalSelfAttention(nn.Module):
                def forward(self, q, k, v):
                    T = q.size(-2)
                    if FLASH:
                        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    else:
                        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                        att = F.softmax(att, dim=-1)
                        y = att @ v
                    return y

            if __name__ == "__main__":
                parser = argparse.ArgumentParser()
                parser.add_argument("--flash", type=int, default=0)
                args = parser.parse_args()
                FLASH = args.flash
                model = GPT().cuda()
            """,
            fixed=None,
            note="llm.c: the fused path is opt-in (`--flash` defaults to 0): the manual one runs by default",
        ),
        Invalid(
            """
            import torch.nn as nn
            import torch.nn.functional as F

            class Attend(nn.Module):
                def __init__(self, dropout=0.0, flash=False):
                    super().__init__()
                    self.flash = flash

                def flash_attn(self, q, k, v):
                    return F.scaled_dot_product_attention(q, k, v)

                def forward(self, q, k, v):
                    if self.flash:
                        return self.flash_attn(q, k, v)
                    sim = (q @ k.transpose(-2, -1)) * self.scale
                    attn = sim.softmax(dim=-1)
                    return attn @ v
            """,
            fixed=None,
            note="`flash=False` by default: the early return to SDPA is opt-in",
        ),
        Invalid(
            """
            import math
            import torch
            import torch.nn as nn
            from torch.nn import functional as F

            class CausalSelfAttention(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
                    self.attn_dropout = nn.Dropout(config.dropout)
                    self.n_head = config.n_head
                    self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size))

                def forward(self, x):
                    B, T, C = x.size()
                    q, k, v = self.c_attn(x).split(C, dim=2)
                    k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                    q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                    v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                    # causal self-attention
                    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                    att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                    att = F.softmax(att, dim=-1)
                    att = self.attn_dropout(att)
                    y = att @ v
                    return y.transpose(1, 2).contiguous().view(B, T, C)
            """,
            fixed="""
            import math
            import torch
            import torch.nn as nn
            from torch.nn import functional as F

            class CausalSelfAttention(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
                    self.attn_dropout = nn.Dropout(config.dropout)
                    self.n_head = config.n_head
                    self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size)).view(1, 1, config.block_size, config.block_size))

                def forward(self, x):
                    B, T, C = x.size()
                    q, k, v = self.c_attn(x).split(C, dim=2)
                    k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                    q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                    v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                    # causal self-attention
                    y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_dropout.p if self.training else 0.0, is_causal=True)
                    return y.transpose(1, 2).contiguous().view(B, T, C)
            """,
            unsafe=True,
            note="minGPT: causal tril buffer, default scale, dropout module",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            from torch.nn import functional as F

            class Head(nn.Module):
                def __init__(self, head_size):
                    super().__init__()
                    self.key = nn.Linear(n_embd, head_size, bias=False)
                    self.query = nn.Linear(n_embd, head_size, bias=False)
                    self.value = nn.Linear(n_embd, head_size, bias=False)
                    self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))
                    self.dropout = nn.Dropout(dropout)

                def forward(self, x):
                    B, T, C = x.shape
                    k = self.key(x)
                    q = self.query(x)
                    wei = q @ k.transpose(-2, -1) * C**-0.5
                    wei = wei.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
                    wei = F.softmax(wei, dim=-1)
                    wei = self.dropout(wei)
                    v = self.value(x)
                    out = wei @ v
                    return out

            model = Head(16).to("cuda")
            """,
            fixed="""
            import torch
            import torch.nn as nn
            from torch.nn import functional as F

            class Head(nn.Module):
                def __init__(self, head_size):
                    super().__init__()
                    self.key = nn.Linear(n_embd, head_size, bias=False)
                    self.query = nn.Linear(n_embd, head_size, bias=False)
                    self.value = nn.Linear(n_embd, head_size, bias=False)
                    self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))
                    self.dropout = nn.Dropout(dropout)

                def forward(self, x):
                    B, T, C = x.shape
                    k = self.key(x)
                    q = self.query(x)
                    v = self.value(x)
                    out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout.p if self.training else 0.0, is_causal=True, scale=C**-0.5)
                    return out

            model = Head(16).to("cuda")
            """,
            unsafe=True,
            note="Karpathy's Head: the scale uses C, not the head size, so it is passed as is",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Attention(nn.Module):
                def __init__(self, dim, heads=8, dim_head=64, dropout=0.0):
                    super().__init__()
                    self.scale = dim_head ** -0.5
                    self.attend = nn.Softmax(dim=-1)
                    self.dropout = nn.Dropout(dropout)

                def forward(self, q, k, v):
                    dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
                    attn = self.attend(dots)
                    attn = self.dropout(attn)
                    out = torch.matmul(attn, v)
                    return out
            """,
            fixed="""
            import torch
            import torch.nn as nn

            class Attention(nn.Module):
                def __init__(self, dim, heads=8, dim_head=64, dropout=0.0):
                    super().__init__()
                    self.scale = dim_head ** -0.5
                    self.attend = nn.Softmax(dim=-1)
                    self.dropout = nn.Dropout(dropout)

                def forward(self, q, k, v):
                    out = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout.p if self.training else 0.0, scale=self.scale)
                    return out
            """,
            unsafe=True,
            note="vit-pytorch: nn.Softmax module, torch.matmul, a model-only file",
        ),
        Invalid(
            """
            import math
            import torch
            import torch.nn.functional as F

            class Attention(torch.nn.Module):
                def forward(self, xq, keys, values, mask):
                    scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
                    if mask is not None:
                        scores = scores + mask
                    scores = F.softmax(scores.float(), dim=-1).type_as(xq)
                    output = torch.matmul(scores, values)
                    return output
            """,
            note="Llama reference: fp32 softmax and casts, advice only",
        ),
        Invalid(
            """
            import torch.nn as nn

            class Attention(nn.Module):
                def forward(self, x):
                    q, k, v = self.qkv(x).unbind(0)
                    attn = (q @ k.transpose(-2, -1)) * self.scale
                    attn = attn.softmax(dim=-1)
                    attn = self.attn_drop(attn)
                    x = (attn @ v).transpose(1, 2)
                    return self.proj(x), attn
            """,
            note="the weights are returned: advice only",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Attention(nn.Module):
                def forward(self, q, k, v):
                    sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.scale
                    attn = sim.softmax(dim=-1)
                    return torch.einsum("b h i j, b h j d -> b h i d", attn, v)
            """,
            note="einsum form: advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not (ctx.calls_with_prefix("torch") or ctx.method_calls("softmax")) or ctx.facts.devices.runs_without_gpu:
            return
        tracer = _Tracer(ctx)
        seen: set[int] = set()
        for softmax in _softmaxes(ctx, tracer):
            if id(softmax.call) in seen:
                continue
            seen.add(id(softmax.call))
            attention = self._attention(ctx, tracer, softmax)
            if attention is None or id(attention.output) in seen:
                continue
            switched_off = None
            if _deliberately_manual(ctx, softmax.call):
                switched_off = _fused_path_off_by_default(ctx, softmax.call)
                if switched_off is None:
                    continue
            seen.add(id(attention.output))  # one finding per computation (Swin softmaxes in two branches)
            if switched_off is not None:
                message = (
                    "hand-written attention runs by default: the fused path beside it is off "
                    f"({switched_off}); turn it on by default (guide: {GUIDE})"
                )
                yield self.report(softmax.call, message)
                continue
            rewrite = _SdpaFix(ctx, tracer, attention)
            fix = rewrite.build(self)
            note = ""
            if fix is None and _weights_escape(ctx, attention):
                note = " (it does not return the attention weights, which this code also uses)"
            elif fix is None and rewrite.padding_mask():
                note = " with the mask as a boolean `attn_mask` (True where attention is allowed)"
            message = (
                "hand-written attention: `softmax(q @ k^T) @ v` runs as several kernels and stores the full "
                f"score matrix; use `F.scaled_dot_product_attention`{note} (guide: {GUIDE})"
            )
            yield self.report(softmax.call, message, fix)

    @staticmethod
    def _attention(ctx: FileContext, tracer: _Tracer, softmax: _Softmax) -> Attention | None:
        backward = tracer.scores(softmax.input)
        if backward is None:
            return None
        forward = tracer.values(softmax.call)
        if forward is None:
            return None
        scores, before, statements_before, names_before = backward
        over_keys = softmax.dim == -1 or (scores.rank is not None and softmax.dim == scores.rank - 1)
        if not over_keys:
            return None  # over another dim, or a positive dim of a tensor of unknown rank
        output, value, canonical, after, statements_after, names_after = forward
        return Attention(
            softmax=softmax.call,
            scores=scores,
            before=before,
            after=after,
            output=output,
            value=value,
            canonical_output=canonical,
            softmax_last_dim=not softmax.has_dtype,
            statements=statements_before + statements_after,
            chain_names=names_before + names_after,
        )


# -- ADV604: the rewrite ---------------------------------------------------------------------
def _function_scope(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode:
    scope = ctx.scope_of.get(node)
    return scope if scope is not None else ctx.module


def _escaping_names(ctx: FileContext, attention: Attention) -> bool:
    """A scores/weights variable is read or rebound somewhere the chain does not account for
    (``return y, att``, ``self.att = att``, ``maps.append(att)``, ``att.masked_fill_(...)``)."""
    chain = {id(name) for name in attention.chain_names}
    variables = {name.value for name in attention.chain_names}
    # ``att.masked_fill(mask, torch.finfo(att.dtype).min)`` reads the scores' dtype only.
    fill_values = [s.fill_value for s in attention.before if s.kind == "masked_fill" and s.fill_value is not None]
    scope = _function_scope(ctx, attention.softmax)
    for name in ctx.walk(scope, cst.Name):
        if name.value in variables and id(name) not in chain and _is_variable(ctx, name):
            if not any(ctx.is_descendant(name, value) for value in fill_values):
                return True
    return False


def _weights_escape(ctx: FileContext, attention: Attention) -> bool:
    """A scores/weights variable flows out of the computation: read by a statement that is
    not itself one more step of it (``return y, att``, ``self.att = att``, ``maps.append(att)``)."""
    chain = {id(name) for name in attention.chain_names}
    variables = {name.value for name in attention.chain_names}
    scope = _function_scope(ctx, attention.softmax)
    for name in ctx.walk(scope, cst.Name):
        if name.value not in variables or id(name) in chain or not _is_variable(ctx, name):
            continue
        statement = ctx.statement_of(name)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else []
        if isinstance(small, cst.AugAssign):
            targets = [small.target]
        if any(isinstance(t, cst.Name) and t.value in variables for t in targets) or name in targets:
            continue
        if isinstance(statement, cst.If) and ctx.is_descendant(name, statement.test):
            continue
        return True
    return False


def _variables_in(ctx: FileContext, *exprs: cst.CSTNode | None) -> list[cst.Name]:
    found = []
    for expr in exprs:
        if expr is not None:
            found.extend(n for n in ctx.walk(expr, cst.Name) if _is_variable(ctx, n))
    return found


def _plain(expr: cst.BaseExpression | None) -> bool:
    """Names, attributes and subscripts only: moving it to a later statement evaluates the same."""
    if isinstance(expr, cst.Name):
        return True
    if isinstance(expr, cst.Attribute):
        return _plain(expr.value)
    if isinstance(expr, cst.Subscript):
        return _plain(expr.value) and all(
            not isinstance(element.slice, cst.Index) or _plain(element.slice.value) or isinstance(element.slice.value, cst.Integer)
            for element in expr.slice
        )
    return False


def _normal(code: str) -> str:
    return re.sub(r"\s+", "", code)


def _code(ctx: FileContext, node: cst.CSTNode) -> str:
    text = ctx.code(node).strip()
    return f"({text})" if "\n" in text and not (text.startswith("(") and text.endswith(")")) else text


class _SdpaFix:
    """Decides whether an attention chain has the canonical form and builds the rewrite."""

    def __init__(self, ctx: FileContext, tracer: _Tracer, attention: Attention) -> None:
        self.ctx = ctx
        self.tracer = tracer
        self.attention = attention

    def build(self, rule: Rule):
        ctx, attention = self.ctx, self.attention
        scores = attention.scores
        if not (scores.exact and attention.canonical_output and attention.softmax_last_dim):
            return None
        if not (_plain(scores.query) and _plain(scores.key)):
            return None
        keywords = self._keywords()
        if keywords is None:
            return None
        lines = self._lines()
        if lines is None or _escaping_names(ctx, attention):
            return None
        removed, final_line = lines
        if not self._operands_stable(removed, final_line, keywords[1]):
            return None
        spelling, imports = ctx.reference(SDPA, final_line)
        arguments = [_code(ctx, scores.query), _code(ctx, scores.key), _code(ctx, attention.value)]
        after = ""
        if scores.rank == 3:
            # ``torch.bmm`` of [batch, length, dim] tensors: SDPA's fused kernels take only 4-D
            # ones ([batch, heads, length, dim]; pytorch-frame's tutorial attention would run the
            # same math kernels). A heads dimension of one reaches them; a 3-D mask would then
            # broadcast against the batch, so masks stay advice.
            if any(name == "attn_mask" for name, _ in keywords[0]):
                return None
            operands = (scores.query, scores.key, attention.value)
            arguments = [f"{text}.unsqueeze(1)" if _plain(node) else f"({text}).unsqueeze(1)" for text, node in zip(arguments, operands)]
            after = ".squeeze(1)"
        arguments += [f"{name}={value}" for name, value in keywords[0]]
        call = cst.parse_expression(f"{ctx.code(spelling)}({', '.join(arguments)}){after}")
        edits = [Edit(line, cst.RemoveFromParent()) for line in removed]
        # The comments above the removed lines now sit above the call, after the spacing that
        # preceded the first of them.
        comments = [
            empty
            for line in removed
            for empty in getattr(line, "leading_lines", ())
            if empty.comment is not None
        ]
        if comments and isinstance(final_line, cst.SimpleStatementLine):
            spacing = [e for e in getattr(removed[0], "leading_lines", ()) if e.comment is None][:1]
            own = [e for e in final_line.leading_lines if e.comment is not None]
            inner = final_line.visit(ReplaceNodes({attention.output: call}))
            edits.append(Edit(final_line, inner.with_changes(leading_lines=[*spacing, *comments, *own])))
        else:
            edits.append(Edit(attention.output, call))
        # SDPA came with torch 2.0, its ``scale=`` keyword with 2.1 (MedSAM's README installs 2.0).
        scaled = any(name == "scale" for name, _ in keywords[0])
        requires = [("torch", "2.1" if scaled else "2.0")]
        return rule.fix("Use `F.scaled_dot_product_attention`", *edits, imports=imports, requires=requires)

    # -- keyword arguments of the SDPA call --------------------------------------------------
    def _keywords(self) -> tuple[list[tuple[str, str]], list[cst.CSTNode]] | None:
        """([(keyword, code)], the expressions they move) or None when the form is not canonical."""
        ctx, attention = self.ctx, self.attention
        moved: list[cst.CSTNode] = [attention.scores.query, attention.scores.key]  # type: ignore[list-item]
        scale: Step | None = None
        mask: Step | None = None
        for step in attention.before:
            if step.kind == "scale" and scale is None and mask is None:
                scale = step
            elif step.kind in ("mask_add", "masked_fill") and mask is None:
                mask = step
            else:
                return None
        keywords: list[tuple[str, str]] = []
        if mask is not None and mask.kind == "mask_add":
            keywords.append(("attn_mask", _code(ctx, mask.operand)))  # type: ignore[arg-type]
            moved.append(mask.operand)  # type: ignore[arg-type]
        dropout = self._dropout()
        if dropout is None:
            return None
        if dropout[0]:
            keywords.append(("dropout_p", dropout[0]))
            moved.extend(dropout[1])
        if mask is not None and mask.kind == "masked_fill":
            if not self._causal(mask):
                return None
            keywords.append(("is_causal", "True"))
            moved.append(mask.fill_condition)  # type: ignore[arg-type]
        if scale is None:
            keywords.append(("scale", "1.0"))
        elif not self._default_scale(scale):
            if not self._scalar(scale.operand):  # type: ignore[arg-type]
                return None  # SDPA's scale is a float: a tensor factor (learned temperature, 0/1 mask) is not one

            keywords.append(("scale", self._scale_code(scale)))
            moved.append(scale.operand)  # type: ignore[arg-type]
        return keywords, moved

    def _dropout(self) -> tuple[str, list[cst.CSTNode]] | None:
        """("<p> if self.training else 0.0", moved expressions), ("", []) without dropout."""
        ctx, tracer = self.ctx, self.tracer
        steps = self.attention.after
        if not steps:
            return "", []
        if len(steps) != 1 or steps[0].kind != "dropout":
            return None
        call = steps[0].node
        assert isinstance(call, cst.Call)
        if ctx.qualname(call.func) in DROPOUT_FUNCTIONS:
            functional = ctx.qualname(call.func) == "torch.nn.functional.dropout"
            p = ctx.argument(call, "p", 1)
            training = ctx.argument(call, "training" if functional else "train", 2)
            if p is None or training is None or (not functional and (p is MISSING or training is MISSING)):
                return None
            p_code = "0.5" if p is MISSING else _code(ctx, p)
            moved = [] if p is MISSING else [p]
            if training is MISSING:
                return p_code, moved
            flag = ctx.values.resolve(training)
            if flag is not None and flag.value is True:
                return p_code, moved
            if flag is not None and flag.value is False:
                return "", []
            return f"{p_code} if {_code(ctx, training)} else 0.0", moved + [training]
        if tracer.module_attribute(call, "torch.nn.Dropout") is None or len(call.args) != 1:
            return None
        module = call.func
        assert isinstance(module, cst.Attribute) and isinstance(module.value, cst.Name)
        owner = module.value.value
        return f"{owner}.{module.attr.value}.p if {owner}.training else 0.0", [module]

    def _default_scale(self, step: Step) -> bool:
        """``1 / math.sqrt(q.size(-1))`` and its spellings: SDPA's own default."""
        ctx, scores = self.ctx, self.attention.scores
        heads = {_normal(ctx.code(e)) for e in (scores.query, scores.key) if e is not None}
        dims = {f"{h}.size(-1)" for h in heads} | {f"{h}.shape[-1]" for h in heads}

        shapes = {f"{h}.shape" for h in heads} | {f"{h}.size()" for h in heads}

        def is_dim(expr: cst.BaseExpression) -> bool:
            if _normal(ctx.code(expr)).strip("()") in dims or _normal(ctx.code(expr)) in dims:
                return True
            if not isinstance(expr, cst.Name):
                return False
            # ``_, _, _, c_per_head = q.shape`` (SAM's attention), or ``d = q.size(-1)``.
            bindings = ctx.lookup(expr.value, expr)
            if len(bindings) != 1 or not isinstance(bindings[0].node, cst.Assign):
                return False
            assign = bindings[0].node
            if bindings[0].value is not None:
                return _normal(ctx.code(bindings[0].value)) in dims
            target = assign.targets[0].target if len(assign.targets) == 1 else None
            if not isinstance(target, (cst.Tuple, cst.List)) or _normal(ctx.code(assign.value)) not in shapes:
                return False
            last = target.elements[-1].value if target.elements else None
            return isinstance(last, cst.Name) and last.value == expr.value

        def is_sqrt_dim(expr: cst.BaseExpression) -> bool:
            if isinstance(expr, cst.Call) and (ctx.qualname(expr.func) or "").split(".")[-1] == "sqrt" and len(expr.args) == 1:
                return is_dim(expr.args[0].value)
            if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Power):
                return is_dim(expr.left) and ctx.values.value_of(expr.right) is None and _normal(ctx.code(expr.right)).strip("()") in ("0.5", "1/2")
            return False

        operand = step.operand
        assert operand is not None
        if step.divide:
            return is_sqrt_dim(operand)
        if isinstance(operand, cst.BinaryOperation) and isinstance(operand.operator, cst.Divide):
            one = ctx.values.resolve(operand.left)
            return one is not None and one.value == 1 and is_sqrt_dim(operand.right)
        if isinstance(operand, cst.BinaryOperation) and isinstance(operand.operator, cst.Power):
            return is_dim(operand.left) and _normal(ctx.code(operand.right)).strip("()") in ("-0.5", "-1/2")
        return False

    def _scalar(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """``expr`` is a Python number, as SDPA's ``scale`` must be: literals, arithmetic,
        ``math.sqrt``, sizes (``C`` from ``B, T, C = x.shape``), config attributes, and
        ``self.<name>`` set from such in the class; not tensors (``self.logit_scale.exp()``)."""
        ctx = self.ctx
        if depth > 8:
            return False
        if isinstance(expr, (cst.Integer, cst.Float)):
            return True
        if isinstance(expr, cst.UnaryOperation):
            return self._scalar(expr.expression, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            return self._scalar(expr.left, depth + 1) and self._scalar(expr.right, depth + 1)
        if isinstance(expr, cst.Call):
            qualname = ctx.qualname(expr.func) or dotted_name(expr.func) or ""
            if _method(expr, "size") and not _is_library_call(ctx, expr):
                return True
            scalar_function = qualname.startswith(("math.", "numpy.")) or qualname in ("float", "int", "pow", "abs")
            return scalar_function and all(self._scalar(arg.value, depth + 1) for arg in expr.args)
        if isinstance(expr, cst.Subscript):
            return _is_shape(expr.value)
        if isinstance(expr, cst.Attribute):
            if "mask" in expr.attr.value.lower():
                return False
            if dotted_name(expr.value) == "self":
                values = self._class_values(expr)
                return bool(values) and all(v is not None and self._scalar(v, depth + 1) for v in values)
            return dotted_name(expr) is not None and not (ctx.qualname(expr) or "").startswith("torch")
        if isinstance(expr, cst.Name):
            if "mask" in expr.value.lower():
                return False
            reaching = _reaching_bindings(ctx, expr)
            if not reaching:
                return False
            for binding in reaching:
                if isinstance(binding, cst.Param):
                    continue  # a number passed in (``scaling``, ``d_k``); masks were ruled out by name
                if not isinstance(binding, cst.Assign):
                    return False
                if len(binding.targets) == 1 and isinstance(binding.targets[0].target, cst.Name):
                    if not self._scalar(binding.value, depth + 1):
                        return False
                elif not (_is_shape(binding.value) or _method(binding.value, "size")):
                    return False  # ``B, T, C = x.size()`` unpacks ints
            return True
        return False

    def _class_values(self, attribute: cst.Attribute) -> list[cst.BaseExpression | None]:
        owner = self.ctx.enclosing(attribute, cst.ClassDef)
        assignments = self.ctx.attribute_assignments.get(f"self.{attribute.attr.value}", ())
        return [getattr(a, "value", None) for a in assignments if self.ctx.enclosing(a, cst.ClassDef) is owner]

    def _scale_code(self, step: Step) -> str:
        operand = step.operand
        assert operand is not None
        code = _code(self.ctx, operand)
        if not step.divide:
            return code
        atomic = isinstance(operand, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float)) or (
            isinstance(operand, cst.BinaryOperation) and isinstance(operand.operator, cst.Power)
        )
        return f"1 / {code}" if atomic or operand.lpar else f"1 / ({code})"

    def padding_mask(self) -> bool:
        """A ``masked_fill`` mask that is not the causal one: SDPA takes it as ``attn_mask``, but
        its fully masked rows (all keys padding) come out differently, so no automatic rewrite."""
        return any(s.kind == "masked_fill" and not self._causal(s) for s in self.attention.before)

    # -- the causal mask -------------------------------------------------------------------
    def _causal(self, step: Step) -> bool:
        ctx = self.ctx
        if not _negative_infinity(ctx, step.fill_value):
            return False
        function = ctx.enclosing(step.node, cst.FunctionDef)
        if function is not None and any(_NO_CACHE.search(n.value) for n in _variables_in(ctx, function.params)):
            return False  # a KV cache: query and key lengths may differ, unlike is_causal's square mask
        condition = step.fill_condition
        if isinstance(condition, cst.Comparison) and len(condition.comparisons) == 1:
            comparison = condition.comparisons[0]
            if isinstance(comparison.operator, cst.Equal):
                number = ctx.values.resolve(comparison.comparator)
                if number is not None and number.value == 0 and not isinstance(number.value, bool):
                    return self._triangle(condition.left, "tril")
                if number is not None and number.value == 1 and not isinstance(number.value, bool):
                    return self._triangle(condition.left, "triu")
            return False
        if isinstance(condition, cst.UnaryOperation) and isinstance(condition.operator, cst.BitInvert):
            return self._triangle(condition.expression, "tril")
        if _method(condition, "logical_not") and not condition.args:  # type: ignore[union-attr]
            return self._triangle(condition.func.value, "tril")  # type: ignore[union-attr]
        return condition is not None and self._triangle(condition, "triu")

    def _triangle(self, expr: cst.BaseExpression, kind: str, depth: int = 0) -> bool:
        """``expr`` is a square ``torch.tril(torch.ones(n, n))`` (``kind="tril"``) or
        ``torch.triu(torch.ones(n, n), diagonal=1)`` mask, sliced to ``[..., :T, :T]`` at most."""
        ctx = self.ctx
        if depth > 8:
            return False
        if isinstance(expr, cst.Subscript):
            if not _square_slice(ctx, expr):
                return False
            expr = expr.value
        expr = _strip_reshapes(ctx, expr)
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            source = self._buffer(expr)
            return source is not None and self._triangle(source, kind, depth + 1)
        if isinstance(expr, cst.Name):
            binding = _binding_before(ctx, expr)
            if isinstance(binding, cst.Assign) and len(binding.targets) == 1:
                return self._triangle(binding.value, kind, depth + 1)
            return False
        return _triangle_constructor(ctx, expr, kind)

    def _buffer(self, attribute: cst.Attribute) -> cst.BaseExpression | None:
        """What ``self.<name>`` holds: its ``register_buffer("<name>", value)`` or its one assignment in the class."""
        ctx = self.ctx
        owner = ctx.enclosing(attribute, cst.ClassDef)
        if owner is None:
            return None
        name = attribute.attr.value
        found: list[cst.BaseExpression] = []
        for call in ctx.method_calls("register_buffer"):
            if ctx.enclosing(call, cst.ClassDef) is owner and len(call.args) >= 2:
                key = ctx.values.resolve(call.args[0].value)
                if key is not None and key.value == name:
                    found.append(call.args[1].value)
        for assignment in ctx.attribute_assignments.get(f"{dotted_name(attribute.value)}.{name}", ()):
            if ctx.enclosing(assignment, cst.ClassDef) is owner:
                found.append(getattr(assignment, "value", None))  # type: ignore[arg-type]
        return found[0] if len(found) == 1 and found[0] is not None else None

    # -- where the statements are --------------------------------------------------------
    def _lines(self) -> tuple[list[cst.CSTNode], cst.CSTNode] | None:
        """(statements to remove, the statement that keeps the SDPA call), all in one block."""
        ctx, attention = self.ctx, self.attention
        final_line = ctx.statement_of(attention.output)
        if final_line is None:
            return None
        block = ctx.parent.get(final_line)
        removed: list[cst.CSTNode] = []
        for assignment in attention.statements:
            line = ctx.parent.get(assignment)
            if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1 or line is final_line:
                return None
            if ctx.parent.get(line) is block:
                removed.append(line)
                continue
            guard = self._mask_guard(line)
            if guard is None or ctx.parent.get(guard) is not block:
                return None
            removed.append(guard)
        ordered = sorted(set(removed), key=ctx.order.__getitem__)
        if any(ctx.order[line] > ctx.order[final_line] for line in ordered):
            return None
        return ordered, final_line

    def _mask_guard(self, line: cst.SimpleStatementLine) -> cst.If | None:
        """``if mask is not None: scores = scores + mask``: SDPA takes ``attn_mask=None`` too."""
        ctx = self.ctx
        body = ctx.parent.get(line)
        guard = ctx.parent.get(body) if isinstance(body, cst.IndentedBlock) else None
        if not isinstance(guard, cst.If) or guard.orelse is not None or len(body.body) != 1:  # type: ignore[union-attr]
            return None
        test = guard.test
        if not (
            isinstance(test, cst.Comparison)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.IsNot)
            and dotted_name(test.comparisons[0].comparator) == "None"
        ):
            return None
        steps = [s for s in self.attention.before if ctx.is_descendant(s.node, line)]
        if len(steps) != 1 or steps[0].kind != "mask_add":
            return None
        operand = steps[0].operand
        if operand is None or _normal(ctx.code(operand)) != _normal(ctx.code(test.left)):
            return None
        return guard

    def _operands_stable(self, removed: list[cst.CSTNode], final_line: cst.CSTNode, moved: list[cst.CSTNode]) -> bool:
        """No variable the moved expressions read is rebound between where they were and the final
        line; and a moved call (``self.get_bias(x.device)``) moves past no other statement."""
        ctx = self.ctx
        end = ctx.order[final_line]
        if any(ctx.walk(expr, cst.Call) for expr in moved if expr is not None):
            block = ctx.parent.get(final_line)
            body = list(getattr(block, "body", ()))
            if final_line not in body or removed[0] not in body:
                return False
            between = body[body.index(removed[0]) : body.index(final_line)]
            if any(line not in removed for line in between):
                return False
        for name in _variables_in(ctx, *moved):
            start = ctx.order[ctx.statement_of(name) or name]
            for binding in ctx.lookup(name.value, name):
                position = ctx.order[binding.node]
                if start < position < end and not any(
                    binding.node is line or ctx.is_descendant(binding.node, line) for line in removed
                ):
                    return False
        return True


def _is_shape(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Attribute) and expr.attr.value == "shape"


def _square_slice(ctx: FileContext, subscript: cst.Subscript) -> bool:
    """``[:, :, :T, :T]`` / ``[:T, :T]``: leading full slices, the same bound on the last two."""
    bounds = []
    for element in subscript.slice:
        part = element.slice
        if not isinstance(part, cst.Slice) or part.lower is not None or part.step is not None:
            return False
        bounds.append(None if part.upper is None else _normal(ctx.code(part.upper)))
    if len(bounds) < 2:
        return False
    *leading, rows, columns = bounds
    return all(b is None for b in leading) and rows == columns


_RESHAPES = ("view", "reshape", "unsqueeze", "bool", "to", "cuda", "type", "float", "int", "long", "byte", "contiguous")


def _strip_reshapes(ctx: FileContext, expr: cst.BaseExpression) -> cst.BaseExpression:
    while True:
        if _method(expr, *_RESHAPES) and not _is_library_call(ctx, expr):  # type: ignore[arg-type]
            expr = expr.func.value  # type: ignore[attr-defined]
        elif isinstance(expr, cst.Subscript) and all(
            isinstance(e.slice, cst.Index) and dotted_name(e.slice.value) == "None"
            or isinstance(e.slice, cst.Slice) and e.slice.lower is None and e.slice.upper is None
            for e in expr.slice
        ):
            expr = expr.value
        else:
            return expr


def _triangle_constructor(ctx: FileContext, expr: cst.BaseExpression, kind: str) -> bool:
    if not isinstance(expr, cst.Call):
        return False
    qualname = ctx.qualname(expr.func)
    if qualname == f"torch.{kind}":
        ones = _positional(expr, 0, "input")
        diagonal = ctx.argument(expr, "diagonal", 1)
    elif _method(expr, kind) and not _is_library_call(ctx, expr):
        ones = expr.func.value  # type: ignore[attr-defined]
        diagonal = ctx.argument(expr, "diagonal", 0)
    else:
        return False
    wanted = 0 if kind == "tril" else 1
    if diagonal is None or (diagonal is MISSING and wanted != 0):
        return False
    if diagonal is not MISSING and _int_value(ctx, diagonal) != wanted:  # type: ignore[arg-type]
        return False
    if not isinstance(ones, cst.Call) or ctx.qualname(ones.func) != "torch.ones":
        return False
    sizes = [arg.value for arg in ones.args if arg.keyword is None]
    if len(sizes) == 1 and isinstance(sizes[0], (cst.Tuple, cst.List)):
        sizes = [element.value for element in sizes[0].elements]
    return len(sizes) == 2 and _normal(ctx.code(sizes[0])) == _normal(ctx.code(sizes[1]))


def _negative_infinity(ctx: FileContext, expr: cst.BaseExpression | None, depth: int = 0) -> bool:
    """``float("-inf")``, ``-math.inf``, ``torch.finfo(x.dtype).min`` or a literal <= -1e9."""
    if expr is None or depth > 4:
        return False
    if isinstance(expr, cst.Call) and dotted_name(expr.func) == "float" and len(expr.args) == 1:
        text = ctx.values.resolve(expr.args[0].value)
        return text is not None and isinstance(text.value, str) and text.value.strip().lower() in ("-inf", "-infinity")
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = expr.expression
        if isinstance(inner, cst.Call) and dotted_name(inner.func) == "float" and len(inner.args) == 1:
            text = ctx.values.resolve(inner.args[0].value)
            return text is not None and isinstance(text.value, str) and text.value.strip().lower() in ("inf", "infinity")
        if (ctx.qualname(inner) or "").split(".")[-1] == "inf" and (ctx.qualname(inner) or "").split(".")[0] in ("torch", "math", "numpy"):
            return True
    if isinstance(expr, cst.Attribute) and expr.attr.value == "min" and isinstance(expr.value, cst.Call):
        return ctx.qualname(expr.value.func) == "torch.finfo"
    if isinstance(expr, cst.Name):
        value = ctx.single_assignment(expr)
        if value is not None:
            return _negative_infinity(ctx, value, depth + 1)
    number = ctx.values.resolve(expr)
    return number is not None and isinstance(number.value, (int, float)) and not isinstance(number.value, bool) and number.value <= NEG_INF_LITERAL
