"""ADV603/ADV604 beyond their own examples.

The ADV604 rewrites are checked by running them: each source defines an attention module,
the fix turns it into ``F.scaled_dot_product_attention``, and both versions run on the CPU
with the same weights and inputs (dropout off) and must agree.
"""
from __future__ import annotations

import textwrap

import pytest
import torch

from helpers import fix, lint

EAGER = "ADV603"
MANUAL = "ADV604"


def findings(source: str, code: str):
    return [d for d in lint(source, codes=[code]) if d.code == code]


def fixed(source: str, code: str = MANUAL) -> str:
    return fix(source, codes=[code], unsafe=True).fixed.decode()


# -- ADV604: the rewrite computes the same attention ----------------------------------------
HEADER = """
import math
import torch
import torch.nn as nn
from torch.nn import functional as F
"""

MODULES = {
    "mingpt_causal": """
        class Attn(nn.Module):
            def __init__(self, dim=16, heads=2, block=12, dropout=0.0):
                super().__init__()
                self.qkv = nn.Linear(dim, 3 * dim)
                self.attn_dropout = nn.Dropout(dropout)
                self.n_head = heads
                self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

            def forward(self, x, mask=None):
                B, T, C = x.size()
                q, k, v = self.qkv(x).split(C, dim=2)
                q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                att = F.softmax(att, dim=-1)
                att = self.attn_dropout(att)
                y = att @ v
                return y.transpose(1, 2).contiguous().view(B, T, C)
        """,
    "karpathy_head_scale_by_width": """
        class Attn(nn.Module):
            def __init__(self, dim=16, head_size=4, block=12, dropout=0.0):
                super().__init__()
                self.key = nn.Linear(dim, head_size, bias=False)
                self.query = nn.Linear(dim, head_size, bias=False)
                self.value = nn.Linear(dim, head_size, bias=False)
                self.register_buffer("tril", torch.tril(torch.ones(block, block)))
                self.dropout = nn.Dropout(dropout)

            def forward(self, x, mask=None):
                B, T, C = x.shape
                k = self.key(x)
                q = self.query(x)
                # (B, T, T) affinities
                wei = q @ k.transpose(-2, -1) * C**-0.5
                wei = wei.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
                wei = F.softmax(wei, dim=-1)
                wei = self.dropout(wei)
                v = self.value(x)
                out = wei @ v
                return out
        """,
    "vit_softmax_module": """
        class Attn(nn.Module):
            def __init__(self, dim=16, heads=2, dropout=0.0):
                super().__init__()
                self.heads = heads
                self.scale = (dim // heads) ** -0.5 * 1.5
                self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
                self.attend = nn.Softmax(dim=-1)
                self.dropout = nn.Dropout(dropout)

            def forward(self, x, mask=None):
                B, N, C = x.shape
                q, k, v = self.to_qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
                dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
                attn = self.attend(dots)
                attn = self.dropout(attn)
                out = torch.matmul(attn, v)
                return out.transpose(1, 2).reshape(B, N, C)
        """,
    "additive_mask_guarded": """
        class Attn(nn.Module):
            def __init__(self, dim=16, heads=2):
                super().__init__()
                self.heads = heads
                self.head_dim = dim // heads
                self.wqkv = nn.Linear(dim, 3 * dim)

            def forward(self, x, mask=None):
                B, T, C = x.shape
                xq, keys, values = self.wqkv(x).view(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
                scores = torch.matmul(xq, keys.transpose(-2, -1)) / math.sqrt(self.head_dim)
                if mask is not None:
                    scores = scores + mask
                scores = F.softmax(scores, dim=-1)
                output = torch.matmul(scores, values)
                return output.transpose(1, 2).reshape(B, T, C)
        """,
    "bmm_functional_dropout": """
        class Attn(nn.Module):
            def __init__(self, dim=16, dropout=0.0):
                super().__init__()
                self.proj = nn.Linear(dim, 3 * dim)
                self.p = dropout
                self.d = dim

            def forward(self, x, mask=None):
                q, k, v = self.proj(x).chunk(3, dim=-1)
                w = torch.bmm(q, k.transpose(1, 2)) / (self.d ** 0.5 + 1.0)
                w = torch.softmax(w, dim=2)
                w = F.dropout(w, p=self.p, training=self.training)
                return torch.bmm(w, v)
        """,
    "prescaled_query_no_scale": """
        class Attn(nn.Module):
            def __init__(self, dim=16, heads=2):
                super().__init__()
                self.heads = heads
                self.scale = (dim // heads) ** -0.5
                self.qkv = nn.Linear(dim, 3 * dim)
                self.attn_drop = nn.Dropout(0.0)

            def forward(self, x, mask=None):
                B, N, C = x.shape
                qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
                q, k, v = qkv.unbind(0)
                q = q * self.scale
                attn = q @ k.transpose(-2, -1)
                attn = attn.softmax(dim=-1)
                attn = self.attn_drop(attn)
                x = (attn @ v).transpose(1, 2).reshape(B, N, C)
                return x
        """,
    "local_causal_mask_mT": """
        class Attn(nn.Module):
            def __init__(self, dim=16):
                super().__init__()
                self.qkv = nn.Linear(dim, 3 * dim)

            def forward(self, x, mask=None):
                T = x.size(1)
                q, k, v = self.qkv(x).chunk(3, dim=-1)
                causal = torch.tril(torch.ones(T, T, device=x.device))
                a = q @ k.mT / math.sqrt(q.size(-1))
                a = a.masked_fill(causal == 0, torch.finfo(a.dtype).min)
                a = torch.softmax(a, dim=-1)
                return a @ v
        """,
    "mm_2d_per_sequence": """
        class Attn(nn.Module):
            def __init__(self, dim=16):
                super().__init__()
                self.qkv = nn.Linear(dim, 3 * dim)

            def forward(self, x, mask=None):
                outs = []
                for seq in x:
                    q, k, v = self.qkv(seq).chunk(3, dim=-1)
                    w = torch.mm(q, k.t()) / math.sqrt(q.size(1))
                    w = F.softmax(w, dim=1)
                    outs.append(torch.mm(w, v))
                return torch.stack(outs)
        """,
    "one_expression": """
        class Attn(nn.Module):
            def __init__(self, dim=16):
                super().__init__()
                self.qkv = nn.Linear(dim, 3 * dim)
                self.scale = 0.3

            def forward(self, x, mask=None):
                q, k, v = self.qkv(x).chunk(3, dim=-1)
                y = F.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1) @ v
                return y
        """,
    "permute_key_triu_mask": """
        class Attn(nn.Module):
            def __init__(self, dim=16, heads=2, block=12):
                super().__init__()
                self.heads = heads
                self.qkv = nn.Linear(dim, 3 * dim)
                self.register_buffer("future", torch.triu(torch.ones(block, block, dtype=torch.bool), diagonal=1))

            def forward(self, x, mask=None):
                B, T, C = x.shape
                q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
                att = torch.matmul(q, k.permute(0, 1, 3, 2))
                att /= math.sqrt(C // self.heads)
                att = att.masked_fill(self.future[:T, :T], float("-inf"))
                att = att.softmax(-1)
                return torch.matmul(att, v).transpose(1, 2).reshape(B, T, C)
        """,
}


def _module_class(source: str):
    namespace: dict = {}
    exec(compile(source, "attention_module.py", "exec"), namespace)  # noqa: S102 - our own test source
    return namespace["Attn"]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_rewrite_is_reported_and_computes_the_same_attention(name):
    source = HEADER + textwrap.dedent(MODULES[name])
    (finding,) = findings(source, MANUAL)
    assert finding.fix_applicability == "unsafe"
    rewritten = fixed(source)
    assert "scaled_dot_product_attention" in rewritten and "softmax" not in rewritten, rewritten
    assert findings(rewritten, MANUAL) == []

    original_class, rewritten_class = _module_class(source), _module_class(rewritten)
    torch.manual_seed(0)
    original = original_class()
    candidate = rewritten_class()
    candidate.load_state_dict(original.state_dict())
    x = torch.randn(3, 7, 16)
    masks = [None]
    if name == "additive_mask_guarded":
        masks.append(torch.randn(3, 2, 7, 7))
    for train in (False, True):  # dropout p is 0: training mode must agree too
        original.train(train)
        candidate.train(train)
        for mask in masks:
            with torch.no_grad():
                expected, got = original(x, mask), candidate(x, mask)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_rewrite_turns_dropout_off_in_eval():
    source = HEADER + textwrap.dedent(MODULES["mingpt_causal"])
    rewritten = fixed(source)
    assert "dropout_p=self.attn_dropout.p if self.training else 0.0" in rewritten
    torch.manual_seed(0)
    original = _module_class(source)(dropout=0.5).eval()
    candidate = _module_class(rewritten)(dropout=0.5).eval()
    candidate.load_state_dict(original.state_dict())
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(candidate(x), original(x), rtol=1e-5, atol=1e-6)


def test_rewrite_keeps_comments_and_passes_non_default_scale():
    rewritten = fixed(HEADER + textwrap.dedent(MODULES["karpathy_head_scale_by_width"]))
    assert "# (B, T, T) affinities\n" in rewritten
    assert "scale=C**-0.5" in rewritten
    assert "is_causal=True" in rewritten
    assert "v = self.value(x)\n" in rewritten


def test_default_scale_is_not_passed_and_unscaled_scores_get_scale_one():
    assert "scale=" not in fixed(HEADER + textwrap.dedent(MODULES["mingpt_causal"]))
    assert "scale=1.0" in fixed(HEADER + textwrap.dedent(MODULES["prescaled_query_no_scale"]))
    assert "scale=1 / (self.d ** 0.5 + 1.0)" in fixed(HEADER + textwrap.dedent(MODULES["bmm_functional_dropout"]))


def test_guarded_additive_mask_becomes_attn_mask():
    rewritten = fixed(HEADER + textwrap.dedent(MODULES["additive_mask_guarded"]))
    assert "if mask is not None" not in rewritten
    assert "attn_mask=mask" in rewritten


def test_fix_adds_nothing_when_torch_is_imported_plainly():
    source = """
        import torch

        def attend(q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
        """
    assert "return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0)" in fixed(source)


# -- ADV604: advice only --------------------------------------------------------------------
ADVICE_ONLY = {
    "weights_returned": """
        def forward(self, q, k, v):
            att = (q @ k.transpose(-2, -1)) * self.scale
            att = att.softmax(dim=-1)
            return att @ v, att
        """,
    "weights_stored": """
        def forward(self, q, k, v):
            att = (q @ k.transpose(-2, -1)) * self.scale
            att = att.softmax(dim=-1)
            self.last_attention = att
            return att @ v
        """,
    "weights_appended": """
        def forward(self, q, k, v, maps):
            att = F.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
            maps.append(att)
            return att @ v
        """,
    "weights_logged": """
        def forward(self, q, k, v):
            att = F.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
            wandb.log({"attention": att})
            return att @ v
        """,
    "padding_mask_fill": """
        def forward(self, q, k, v, mask):
            att = q @ k.transpose(-2, -1) * self.scale
            att = att.masked_fill(mask == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            return att @ v
        """,
    "fp32_softmax": """
        def forward(self, q, k, v):
            att = q @ k.transpose(-2, -1) * self.scale
            att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
            return att @ v
        """,
    "mask_before_scale": """
        def forward(self, q, k, v, bias):
            att = (q @ k.transpose(-2, -1) + bias) * self.scale
            return att.softmax(dim=-1) @ v
        """,
    "transpose_2_3_rank_unknown": """
        def forward(self, q, k, v):
            att = torch.matmul(q, k.transpose(2, 3)) * self.scale
            return torch.matmul(att.softmax(dim=-1), v)
        """,
    "unknown_dropout_module": """
        def forward(self, q, k, v):
            att = (q @ k.transpose(-2, -1)) * self.scale
            att = att.softmax(dim=-1)
            att = self.attn_drop(att)
            return att @ v
        """,
    "kv_cache_causal": """
        def forward(self, q, k, v, past_kv=None):
            T = q.size(-2)
            att = (q @ k.transpose(-2, -1)) * self.scale
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = att.softmax(dim=-1)
            return att @ v
        """,
    "moved_call_past_other_statement": """
        def forward(self, q, k, v, x):
            att = q @ k.transpose(-2, -1) * self.scale + self.position_bias(x.device)
            self.calls += 1
            att = att.softmax(dim=-1)
            return att @ v
        """,
    "learned_temperature": """
        def forward(self, q, k, v):
            att = (q @ k.transpose(-2, -1)) * self.logit_scale.exp()
            att = att.softmax(dim=-1)
            return att @ v
        """,
    "multiplicative_mask": """
        def forward(self, q, k, v, mask):
            att = (q @ k.transpose(-2, -1)) * mask + (1.0 - mask) * -10000.0
            att = att.softmax(dim=-1)
            return att @ v
        """,
    "query_rebound_in_between": """
        def forward(self, q, k, v):
            att = (q @ k.transpose(-2, -1)) * self.scale
            att = att.softmax(dim=-1)
            q = self.next_query(q)
            return att @ v, q
        """,
}


@pytest.mark.parametrize("name", sorted(ADVICE_ONLY))
def test_non_canonical_forms_are_reported_without_a_fix(name):
    body = textwrap.indent(textwrap.dedent(ADVICE_ONLY[name]), "    ")
    source = (
        HEADER
        + "class Attn(nn.Module):\n"
        + "    def __init__(self):\n"
        + "        super().__init__()\n"
        + "        self.register_buffer('bias', torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8))\n"
        + body
    )
    (finding,) = findings(source, MANUAL)
    assert finding.fix_applicability is None, name
    assert fixed(source) == source


def test_escaping_weights_are_named_in_the_message():
    source = HEADER + "class A(nn.Module):\n" + textwrap.indent(textwrap.dedent(ADVICE_ONLY["weights_returned"]), "    ")
    (finding,) = findings(source, MANUAL)
    assert "does not return the attention weights" in finding.message
    assert finding.message.endswith("(guide: Using PyTorch native attention and Flash Attention)")


# -- ADV604: look-alikes and deliberate manual attention stay silent --------------------------
SILENT = {
    "hf_output_attentions_branch": """
        class Attention(nn.Module):
            def forward(self, q, k, v, output_attentions=False):
                if output_attentions:
                    w = F.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
                    return w @ v, w
                return F.scaled_dot_product_attention(q, k, v), None
        """,
    "eager_function_of_a_dispatching_model": """
        def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
            attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
            if attention_mask is not None:
                attn_weights = attn_weights + attention_mask
            attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
            attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
            return torch.matmul(attn_weights, value), attn_weights
        """,
    "flash_attn_alternative": """
        from flash_attn import flash_attn_func

        class Attention(nn.Module):
            def forward(self, q, k, v):
                if self.use_flash:
                    return flash_attn_func(q, k, v)
                att = (q @ k.transpose(-2, -1)) * self.scale
                return att.softmax(dim=-1) @ v
        """,
    "knowledge_distillation": """
        def kd_loss(student_logits, teacher_logits, T):
            p = F.softmax(teacher_logits / T, dim=-1)
            return F.kl_div(F.log_softmax(student_logits / T, dim=-1), p, reduction="batchmean")
        """,
    "sampling": """
        @torch.no_grad()
        def sample(model, idx, temperature=1.0):
            logits = model(idx)[:, -1, :] / temperature
            probs = F.softmax(logits, dim=-1)
            return torch.multinomial(probs, num_samples=1)
        """,
    "policy_head": """
        class Policy(nn.Module):
            def forward(self, x):
                scores = self.affine2(F.relu(self.affine1(x)))
                return F.softmax(scores, dim=1)
        """,
    "contrastive_similarity_then_loss": """
        def info_nce(q, k, temperature=0.07):
            logits = torch.mm(q, k.t()) / temperature
            prob = logits.softmax(dim=-1)
            return -(prob.diag().log()).mean()
        """,
    "attention_weights_only": """
        class Pool(nn.Module):
            def forward(self, q, k):
                att = F.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
                return att
        """,
    "implicit_softmax_dim": """
        class Attention(nn.Module):
            def forward(self, q, k, v):
                return F.softmax(q @ k.transpose(-2, -1)) @ v
        """,
    "softmax_over_queries": """
        class Attention(nn.Module):
            def forward(self, q, k, v):
                return F.softmax(q @ k.transpose(-2, -1), dim=-2) @ v
        """,
    "slot_attention_softmax_over_slots": """
        class SlotAttention(nn.Module):
            def forward(self, q, k, v):
                dots = torch.einsum("bid,bjd->bij", q, k) * self.scale
                attn = dots.softmax(dim=1) + self.eps
                attn = attn / attn.sum(dim=-1, keepdim=True)
                return torch.einsum("bjd,bij->bid", v, attn)
        """,
    "moe_router": """
        class Router(nn.Module):
            def forward(self, x, expert_outputs):
                gates = F.softmax(x @ self.w_gate, dim=-1)
                return gates @ expert_outputs
        """,
    "linear_attention": """
        class LinearAttention(nn.Module):
            def forward(self, q, k, v):
                q = q.softmax(dim=-1)
                k = k.softmax(dim=-2)
                context = torch.einsum("bhdn,bhen->bhde", k, v)
                return torch.einsum("bhde,bhdn->bhen", context, q)
        """,
    "naive_reference_class": """
        class NaiveAttention(nn.Module):
            def forward(self, q, k, v):
                return F.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1) @ v
        """,
}


@pytest.mark.parametrize("name", sorted(SILENT))
def test_look_alikes_are_silent(name):
    assert findings(HEADER + textwrap.dedent(SILENT[name]), MANUAL) == [], name


def test_cpu_only_script_is_silent_but_model_file_is_reported():
    model = HEADER + textwrap.dedent(
        """
        class Attn(nn.Module):
            def forward(self, q, k, v):
                return F.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1) @ v
        """
    )
    assert len(findings(model, MANUAL)) == 1
    script = model + "\nif __name__ == '__main__':\n    print(Attn()(x, x, x))\n"
    assert findings(script, MANUAL) == []
    on_gpu = model + "\nif __name__ == '__main__':\n    print(Attn().cuda()(x, x, x))\n"
    assert len(findings(on_gpu, MANUAL)) == 1


@pytest.mark.parametrize(
    "scores,softmax,output",
    [
        ("q @ k.transpose(-2, -1) * self.scale", "F.softmax(att, dim=-1)", "att @ v"),
        ("torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)", "torch.softmax(att, -1)", "torch.matmul(att, v)"),
        ("q.matmul(k.mT) * d ** -0.5", "att.softmax(dim=-1)", "att.matmul(v)"),
        ("torch.bmm(q, k.transpose(1, 2))", "F.softmax(att, dim=2)", "torch.bmm(att, v)"),
        ("torch.einsum('bhid,bhjd->bhij', q, k) * self.scale", "att.softmax(dim=-1)", "torch.einsum('bhij,bhjd->bhid', att, v)"),
        ("q @ k.T / 8", "nn.functional.softmax(att, dim=-1)", "att @ v"),
        ("torch.einsum('bdi,bdj->bij', q, k)", "att.softmax(-1)", "torch.einsum('bdj,bij->bdi', v, att)"),
        ("torch.einsum('...id,...jd->...ij', q, k)", "att.softmax(-1)", "torch.einsum('...ij,...jd->...id', att, v)"),
    ],
)
def test_spellings_are_reported_once(scores, softmax, output):
    source = HEADER + textwrap.dedent(
        f"""
        def attend(q, k, v, d):
            att = {scores}
            att = {softmax}
            return {output}
        """
    )
    assert len(findings(source, MANUAL)) == 1


def test_softmax_in_two_branches_is_one_finding():
    source = HEADER + textwrap.dedent(
        """
        class WindowAttention(nn.Module):
            def __init__(self):
                super().__init__()
                self.softmax = nn.Softmax(dim=-1)

            def forward(self, q, k, v, bias, mask=None):
                q = q * self.scale
                attn = q @ k.transpose(-2, -1)
                attn = attn + bias.unsqueeze(0)
                if mask is not None:
                    nW = mask.shape[0]
                    attn = attn.view(-1, nW, 4, 8, 8) + mask.unsqueeze(1).unsqueeze(0)
                    attn = attn.view(-1, 4, 8, 8)
                    attn = self.softmax(attn)
                else:
                    attn = self.softmax(attn)
                return (attn @ v).transpose(1, 2)
        """
    )
    (finding,) = findings(source, MANUAL)
    assert finding.fix_applicability is None
    assert "does not return" not in finding.message


def test_two_attention_computations_are_two_findings():
    source = HEADER + textwrap.dedent(
        """
        class Block(nn.Module):
            def forward(self, x, ctx):
                a = F.softmax(x @ x.transpose(-2, -1) * self.s, dim=-1) @ x
                b = F.softmax(a @ ctx.transpose(-2, -1) * self.s, dim=-1) @ ctx
                return b
        """
    )
    assert len(findings(source, MANUAL)) == 2


# -- ADV603 ---------------------------------------------------------------------------------
LOAD = 'from transformers import AutoModelForCausalLM\nmodel = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", {kw}, device_map="auto")\n'


@pytest.mark.parametrize(
    "extra",
    [
        "",
        "config.output_attentions = False\n",
        "outputs = model(**batch, output_attentions=False)\n",
    ],
)
def test_eager_is_reported_and_fixed(extra):
    source = LOAD.format(kw="attn_implementation='eager'") + extra
    (finding,) = findings(source, EAGER)
    assert finding.fix_applicability == "unsafe"
    assert finding.message.endswith("(guide: Using PyTorch native attention and Flash Attention)")
    assert "attn_implementation='sdpa'" in fixed(source, EAGER)


@pytest.mark.parametrize(
    "kw,extra",
    [
        ("attn_implementation='sdpa'", ""),
        ("attn_implementation='flash_attention_2'", ""),
        ("attn_implementation='flex_attention'", ""),
        ("attn_implementation=attn", ""),
        ("attn_implementation='eager' if args.viz else 'sdpa'", ""),
        ("attn_implementation='eager'", "outputs = model(**batch, output_attentions=args.viz)\n"),
        ("attn_implementation='eager'", "model.config.output_attentions = True\n"),
        ("attn_implementation='eager'", "maps = out['attentions']\n"),
        ("attn_implementation='eager', device_map='cpu', output_hidden_states=True", "if __name__ == '__main__':\n    main()\n"),
    ],
)
def test_eager_silences(kw, extra):
    source = LOAD.replace(', device_map="auto"', "") if "device_map" in kw else LOAD
    assert findings(source.format(kw=kw) + extra, EAGER) == []


@pytest.mark.parametrize(
    "model_id",
    ["google/gemma-2-2b-it", "google/gemma-3-1b-it", "openai/gpt-oss-20b", "bigscience/bloom-560m", "microsoft/deberta-v3-base"],
)
def test_eager_by_design_families_are_silent(model_id):
    source = LOAD.replace("Qwen/Qwen2.5-0.5B", model_id).format(kw="attn_implementation='eager'")
    assert findings(source, EAGER) == []


def test_gemma_one_is_not_gemma_two():
    source = LOAD.replace("Qwen/Qwen2.5-0.5B", "google/gemma-2b").format(kw="attn_implementation='eager'")
    assert len(findings(source, EAGER)) == 1


def test_eager_through_set_attn_implementation_and_config():
    source = """
        from transformers import AutoConfig, AutoModel
        config = AutoConfig.from_pretrained("bert-base-uncased", attn_implementation="eager")
        model = AutoModel.from_pretrained("bert-base-uncased", config=config).cuda()
        model.set_attn_implementation("eager")
        """
    assert len(findings(source, EAGER)) == 2
    assert fixed(source, EAGER).count('"sdpa"') == 2


def test_one_literal_used_twice_is_one_finding():
    source = """
        from transformers import AutoModel
        ATTN = "eager"
        a = AutoModel.from_pretrained("bert-base-uncased", attn_implementation=ATTN).cuda()
        b = AutoModel.from_pretrained("roberta-base", attn_implementation=ATTN).cuda()
        """
    assert len(findings(source, EAGER)) == 1
    assert 'ATTN = "sdpa"' in fixed(source, EAGER)


def test_a_3d_bmm_attention_gets_a_heads_dimension_of_one():
    # pytorch-frame's tutorial: `x_query.bmm(x_key.transpose(2, 1))` on [batch, columns, channels];
    # SDPA's fused kernels take only 4-D tensors, so the rewrite adds a heads dimension of one
    # (the equivalence with the original is checked with the other modules above).
    rewritten = fixed(HEADER + textwrap.dedent(MODULES["bmm_functional_dropout"]))
    assert "(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)," in rewritten and ").squeeze(1)" in rewritten, rewritten
