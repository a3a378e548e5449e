"""ADV403 beyond its own examples: which sizes count as a vocabulary, how a fix pads
every place that sets one, and the hidden-width advice per target."""
from __future__ import annotations

import textwrap

from helpers import fix, lint


def findings(source: str, gpu: str | None = None):
    return [d for d in lint(source, codes=["ADV403"], gpu=gpu) if d.code == "ADV403"]


def fixed(source: str) -> str:
    result = fix(source, codes=["ADV403"], unsafe=True)
    output = result.fixed.decode()
    compile(output, "fixed.py", "exec")
    assert fix(output, codes=["ADV403"], unsafe=True).fixed.decode() == output, "fix is not idempotent"
    return output


def test_embedding_and_head_literals_are_padded_together():
    source = """
        import torch
        import torch.nn as nn
        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.wte = nn.Embedding(50257, 768)
                self.lm_head = nn.Linear(768, 50257, bias=False)
        model = LM().cuda()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        """
    (finding,) = findings(source)
    assert finding.line == 7 and "50304" in finding.message
    output = fixed(source)
    assert "nn.Embedding(50304, 768)" in output and "nn.Linear(768, 50304, bias=False)" in output


def test_config_attribute_assignment():
    source = """
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
        config = GPT2Config(n_layer=4)
        config.vocab_size = 50257
        model = GPT2LMHeadModel(config).cuda()
        loss = model(**batch).loss
        loss.backward()
        """
    (finding,) = findings(source)
    assert finding.line == 5
    assert "config.vocab_size = 50304\n" in fixed(source)


def test_command_line_vocabulary_is_advice_only():
    source = """
        import argparse
        import torch
        import torch.nn as nn
        parser = argparse.ArgumentParser()
        parser.add_argument("--vocab-size", type=int, default=32001)
        args = parser.parse_args()
        emb = nn.Embedding(args.vocab_size, 512)
        head = nn.Linear(512, args.vocab_size)
        model = nn.Sequential(emb, head).cuda()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        """
    (finding,) = findings(source)
    assert "32064" in finding.message and finding.fix_applicability is None


def test_positional_config_arguments_are_unknown():
    source = """
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(some_value)).cuda()
        loss = model(**batch).loss
        loss.backward()
        """
    assert findings(source) == []


def test_config_passed_through_unknown_kwargs_is_unknown():
    source = """
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(**model_args)).cuda()
        loss = model(**batch).loss
        loss.backward()
        """
    assert findings(source) == []


def test_hidden_width_suggestion_follows_the_target():
    source = """
        import torch
        import torch.nn as nn
        model = nn.Sequential(nn.Linear(1024, 1500), nn.GELU(), nn.Linear(1500, 1024)).cuda()
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x.cuda()), y.cuda())
        scaler.scale(loss).backward()
        """
    (v100,) = findings(source, gpu="V100")
    (a100,) = findings(source, gpu="A100")
    assert "consider 1504" in v100.message and "consider 1536" in a100.message
    assert v100.fix_applicability is None


def test_small_and_aligned_widths_are_silent():
    source = """
        import torch
        import torch.nn as nn
        model = nn.Sequential(nn.Linear(20, 100), nn.ReLU(), nn.Linear(100, 400), nn.Linear(400, 3)).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        """
    assert findings(source) == []


def test_head_without_embedding_is_a_class_count():
    source = """
        import torch
        import torch.nn as nn
        backbone.fc = nn.Linear(2048, 50257)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(backbone(x.cuda()), y.cuda())
        loss.backward()
        """
    assert findings(source) == []


def test_unsafe_only():
    source = """
        import torch
        from transformers import BertConfig, BertForMaskedLM, Trainer
        model = BertForMaskedLM(BertConfig(num_hidden_layers=4))
        Trainer(model=model, args=args, train_dataset=ds).train()
        """
    (finding,) = findings(source)
    assert finding.fix_applicability == "unsafe" and "30528" in finding.message
    assert fix(source, codes=["ADV403"], unsafe=False).fixed.decode() == textwrap.dedent(source)


def test_config_of_a_checkpoint_is_silent():
    source = """
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        config = AutoConfig.from_pretrained("gpt2")
        config.vocab_size = 50257
        model = AutoModelForCausalLM.from_config(config).cuda()
        loss = model(**batch).loss
        loss.backward()
        """
    assert findings(source) == []


def test_multiple_of_8_vocabulary_is_reported_only_on_a100_class_targets():
    source = """
        import torch
        from transformers import OPTConfig, OPTForCausalLM
        model = OPTForCausalLM(OPTConfig(num_hidden_layers=2)).cuda()
        loss = model(**batch).loss
        loss.backward()
        """
    assert findings(source) == []  # 50272 = 8 x 6284
    assert findings(source, gpu="V100") == []
    (finding,) = findings(source, gpu="H100")
    assert "not a multiple of 64" in finding.message and "50304" in finding.message


def test_vocabulary_finding_points_at_the_config_the_defaults_run():
    source = textwrap.dedent(
        """
        import argparse
        import torch
        from gpt import GPTModel
        parser = argparse.ArgumentParser()
        parser.add_argument("--debug", action="store_true")
        args = parser.parse_args()
        if args.debug:
            CONFIG = {"vocab_size": 50257, "emb_dim": 12, "n_layers": 2}
        else:
            CONFIG = {"vocab_size": 50257, "emb_dim": 768, "n_layers": 12}
        model = GPTModel(CONFIG).to("cuda")
        optimizer = torch.optim.AdamW(model.parameters(), fused=True)
        for x in loader:
            model(x.cuda()).mean().backward()
            optimizer.step()
        """
    )
    found = [d for d in lint(source, codes=["ADV403"]) if d.code == "ADV403"]
    assert [d.line for d in found] == [11]
    fixed = fix(source, codes=["ADV403"], unsafe=True).fixed.decode()
    assert fixed.count('"vocab_size": 50304') == 2
