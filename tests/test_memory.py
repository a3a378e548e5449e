"""ADV5xx beyond the rules' own examples: the model-size table, how ADV501 and ADV504 split
the "does not fit" case, fixes that meet other rules' fixes, and the shapes of real scripts."""
from __future__ import annotations

import textwrap

import pytest

from advisor.model_sizes import describe_count, model_size
from helpers import fix, lint

MEMORY_CODES = ["ADV501", "ADV502", "ADV503", "ADV504", "ADV505"]


def codes_of(source: str, gpu: str | None = None, codes=MEMORY_CODES) -> list[str]:
    return [d.code for d in lint(source, codes=codes, gpu=gpu)]


# -- model sizes ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "model_id,expected,source",
    [
        ("gpt2", 124e6, "table"),
        ("openai-community/gpt2-medium", 355e6, "table"),
        ("meta-llama/Llama-2-7b-hf", 6.74e9, "table"),
        ("meta-llama/Llama-2-70b-chat-hf", 69.0e9, "table"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7e9, "table"),
        ("bigscience/bloom-7b1", 7.07e9, "table"),
        ("bigscience/bloom", 176e9, "table"),
        ("google/flan-t5-xl", 2.85e9, "table"),
        ("microsoft/Phi-3-mini-128k-instruct", 3.82e9, "table"),
        ("bert-base-uncased-finetuned-sst2", 110e6, "table"),
        ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", 1.1e9, "name"),
        ("Salesforce/codegen-350M-mono", 350e6, "name"),
        ("org/some-model-13b-v2", 13e9, "name"),
        ("bloom-2b5", 2.5e9, "name"),
        ("Qwen/Qwen3-30B-A3B", 30e9, "name"),
        ("foo/Bar-8x3B", 8 * 3e9 * 0.8, "name"),
    ],
)
def test_model_size(model_id, expected, source):
    size = model_size(model_id)
    assert size is not None and size.source == source
    assert size.parameters == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize(
    "model_id",
    [
        "sentence-transformers/all-MiniLM-L6-v2",  # L6 is layers, not a size
        "meta-llama/Llama-3.1-8B-Instruct-4bit"[:-5] + "-int4",  # sized by name: still known
        "distill-70b-into-8b",  # two sizes: unknown
        "my-model-4bit",
        "roberta-128k",
        "",
    ],
)
def test_model_size_unknown_or_unambiguous(model_id):
    size = model_size(model_id)
    if model_id.startswith("meta-llama"):
        assert size is not None and size.parameters == pytest.approx(8.03e9, rel=0.01)
    else:
        assert size is None


def test_small_classics_know_their_shape():
    gpt2 = model_size("gpt2")
    assert gpt2 is not None and gpt2.architecture is not None and gpt2.architecture.max_positions == 1024
    assert model_size("t5-base").architecture is None  # relative positions: no length cap
    assert describe_count(6.74e9) == "6.7B" and describe_count(124e6) == "124M" and describe_count(176e9) == "176B"


# -- ADV501 and ADV504 never both report one model ------------------------------------------------------
TRAINER_T5_3B = """
from transformers import AutoModelForSeq2SeqLM, Trainer, TrainingArguments
model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b")
args = TrainingArguments("out", bf16=True)
Trainer(model=model, args=args, train_dataset=ds).train()
"""


@pytest.mark.parametrize(
    "gpu,expected",
    [
        ("A100-80GB", []),  # 51 GB fits
        ("A100-40GB", ["ADV504"]),  # 51 GB with AdamW, 34 GB with 8-bit states
        ("RTX4090", ["ADV501"]),  # 8-bit states (34 GB) do not fit 24 GB either
    ],
)
def test_does_not_fit_is_one_finding(gpu, expected):
    assert codes_of(TRAINER_T5_3B, gpu=gpu, codes=["ADV501", "ADV504"]) == expected


def test_adv501_ranks_the_options_by_footprint():
    [finding] = lint(TRAINER_T5_3B, codes=["ADV501"], gpu="RTX4090")
    message = finding.message
    assert "needs at least ~51 GB" in message and "18 bytes/param" in message
    order = [message.index(label) for label in ("QLoRA ~", "LoRA ~", "ZeRO-Offload ~", "8-bit AdamW ~", "Adafactor ~")]
    assert order == sorted(order)
    assert "gradient checkpointing trims only activations" in message


def test_adv504_fix_meets_adv601_fused_fix():
    source = """
    import torch
    from transformers import AutoModelForSeq2SeqLM
    model = AutoModelForSeq2SeqLM.from_pretrained("t5-3b").cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    """
    result = fix(source, codes=["ADV504", "ADV601"], gpu="A100-40GB")
    fixed = result.fixed.decode()
    assert "bitsandbytes.optim.AdamW8bit(model.parameters(), lr=1e-4)" in fixed
    assert "fused" not in fixed
    again = fix(fixed, codes=["ADV504", "ADV601"], gpu="A100-40GB")
    assert again.fixed.decode() == fixed


def test_adv501_sees_a_ddp_wrapped_model_handed_to_the_trainer():
    # The shape of a real script: bf16 weights, DDP, the Trainer's default AdamW.
    source = """
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    model_name = "MLP-KTLim/llama-3-Korean-Bllossom-8B"
    model = AutoModelForCausalLM.from_pretrained(model_name, torch_dtype=torch.bfloat16)
    model.to(device)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    training_args = TrainingArguments(output_dir="./results", per_device_train_batch_size=1, fp16=True)
    trainer = Trainer(model=model, args=training_args, train_dataset=ds)
    trainer.train()
    """
    [finding] = lint(source, codes=["ADV501"], gpu="A100-40GB")
    assert "~64 GB" in finding.message and "8 bytes/param" in finding.message
    assert codes_of(source, gpu="A100-80GB", codes=["ADV501", "ADV504"]) == []


@pytest.mark.parametrize(
    "variation",
    [
        'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf", device_map="auto")',
        'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf", **load_kwargs)',
        'model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf", load_in_8bit=True)',
        "model = AutoModelForCausalLM.from_config(config)",
    ],
)
def test_adv501_silent_where_the_model_is_not_whole_on_one_gpu(variation):
    source = f"""
    import torch
    from transformers import AutoModelForCausalLM
    {variation}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for batch in loader:
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    """
    assert codes_of(source, gpu="RTX4090", codes=["ADV501", "ADV504"]) == []


def test_adv501_follows_self_attributes_in_a_trainer_class():
    source = """
    import torch
    from transformers import AutoModelForCausalLM

    class Finetuner:
        def __init__(self):
            self.model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf").cuda()
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-5)

        def fit(self, loader):
            for batch in loader:
                self.model(**batch).loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()
    """
    # 13B with the checkpoint's 16-bit weights: 104 GB with AdamW, 78 GB with 8-bit states.
    assert codes_of(source, gpu="A100-80GB", codes=["ADV501", "ADV504"]) == ["ADV504"]
    assert codes_of(source, gpu="A100-40GB", codes=["ADV501", "ADV504"]) == ["ADV501"]


def test_unknown_optimizer_counts_weights_and_gradients_only():
    source = """
    from lion_pytorch import Lion
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-13b-hf")
    optimizer = Lion(model.parameters(), lr=1e-5)
    for batch in loader:
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    """
    # Lion is no optimizer advisor knows: it is not even found as the model's optimizer.
    assert codes_of(source, gpu="RTX4090", codes=["ADV501"]) == []


# -- ADV503 ---------------------------------------------------------------------------------------------------
def test_adv503_manual_accumulation_loop():
    source = """
    import torch
    from torch.utils.data import DataLoader
    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained("distilbert-base-uncased").cuda()
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    accumulation_steps = 4
    for step, batch in enumerate(loader):
        loss = model(**batch).loss / accumulation_steps
        loss.backward()
        if (step + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    findings = lint(source, codes=["ADV503"], gpu="A100-80GB")
    assert [f.code for f in findings] == ["ADV503"]
    assert "batch of 32" in findings[0].message
    assert codes_of(source, gpu="T4", codes=["ADV503"]) == []  # 32 x 512 tokens in fp32 does not fit comfortably


# -- ADV502 ---------------------------------------------------------------------------------------------------
def test_adv502_multiline_dict_keeps_its_layout():
    source = """
    from transformers import TrainingArguments
    args = TrainingArguments(
        "out",
        gradient_checkpointing=True,
        gradient_checkpointing_kwargs={
            "preserve_rng_state": False,
        },
    )
    """
    fixed = fix(source, codes=["ADV502"]).fixed.decode()
    assert fixed == textwrap.dedent(
        """
        from transformers import TrainingArguments
        args = TrainingArguments(
            "out",
            gradient_checkpointing=True,
            gradient_checkpointing_kwargs={
                "preserve_rng_state": False,
                "use_reentrant": False,
            },
        )
        """
    )


TRANSFORMERS_4_ARGUMENTS = """
import transformers
from dataclasses import dataclass, field
from transformers import AutoModelForCausalLM, HfArgumentParser

@dataclass
class TrainingArguments(transformers.Seq2SeqTrainingArguments):
    gradient_checkpointing: bool = field(default=True, metadata={"help": "You want to use this."})

(training_args,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses()
model = AutoModelForCausalLM.from_pretrained("gpt2")
args = transformers.TrainingArguments("out", gradient_checkpointing=True)
model.gradient_checkpointing_enable()
"""


def _project_with(tmp_path, requirements: str | None, source: str):
    from advisor.project import forget_projects

    (tmp_path / ".git").mkdir(exist_ok=True)
    if requirements is not None:
        (tmp_path / "requirements.txt").write_text(requirements)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    forget_projects()
    return script


@pytest.mark.parametrize("requirements", [None, "transformers\n", "transformers>=5.0\n"])
def test_adv502_trusts_transformers_5_defaults(tmp_path, requirements):
    """transformers 5 passes `use_reentrant=False` itself: switching checkpointing on without
    kwargs is right there, and on a project that says nothing advisor assumes a current release."""
    script = _project_with(tmp_path, requirements, TRANSFORMERS_4_ARGUMENTS)
    assert [d for d in lint(TRANSFORMERS_4_ARGUMENTS, codes=["ADV502"], path=str(script))] == []


def test_adv502_reports_the_reentrant_default_of_transformers_4(tmp_path):
    """qlora and TinyLlama pin transformers 4.31, where `gradient_checkpointing_enable()` with no
    kwargs means `{"use_reentrant": True}`: the dataclass default, the TrainingArguments call and
    the model's call each switch it on. `gradient_checkpointing_kwargs` came with 4.35, so with
    4.31 pinned the fixes are advice; with `>=4.35` allowed they are edits."""
    script = _project_with(tmp_path, "transformers==4.31.0\n", TRANSFORMERS_4_ARGUMENTS)
    findings = lint(TRANSFORMERS_4_ARGUMENTS, codes=["ADV502"], path=str(script))
    assert [d.line for d in findings] == [8, 12, 13]
    assert all("transformers==4.31.0" in d.message and d.fix_applicability is None for d in findings)
    assert "the fix needs transformers >= 4.35" in findings[1].message
    (tmp_path / "requirements.txt").write_text("transformers>=4.38,<5\n")
    findings = lint(TRANSFORMERS_4_ARGUMENTS, codes=["ADV502"], path=str(script))
    assert [(d.line, d.fix_applicability) for d in findings] == [(8, None), (12, "safe"), (13, "safe")]
    fixed = fix(TRANSFORMERS_4_ARGUMENTS, codes=["ADV502"], path=str(script)).fixed.decode()
    assert 'transformers.TrainingArguments("out", gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False})' in fixed
    assert 'model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})' in fixed


def test_adv502_transformers_4_look_alikes(tmp_path):
    explicit = """
    import transformers
    args = transformers.TrainingArguments("out", gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True})
    off = transformers.TrainingArguments("out")
    """
    own_method = """
    import transformers
    class Wrapper:
        def gradient_checkpointing_enable(self):
            self.inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    Wrapper().gradient_checkpointing_enable()
    """
    set_later = TRANSFORMERS_4_ARGUMENTS.replace(
        "model = AutoModelForCausalLM", 'training_args.gradient_checkpointing_kwargs = {"use_reentrant": False}\nmodel = AutoModelForCausalLM'
    )
    for source in (explicit, own_method):
        script = _project_with(tmp_path, "transformers==4.31.0\n", source)
        assert [d.line for d in lint(source, codes=["ADV502"], path=str(script))] == []
    script = _project_with(tmp_path, "transformers==4.31.0\n", set_later)
    assert [d.line for d in lint(set_later, codes=["ADV502"], path=str(script))] == [13, 14]  # the calls, not the field


def test_adv502_old_peft_int8_preparation_under_transformers_4(tmp_path):
    """alpaca-lora: `prepare_model_for_int8_training(model)` (PEFT before 0.6) switches on
    checkpointing with transformers' default; advice to move to the kbit variant's kwargs."""
    source = """
    from peft import prepare_model_for_int8_training
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM.from_pretrained("m", load_in_8bit=True)
    model = prepare_model_for_int8_training(model)
    """
    script = _project_with(tmp_path, "transformers>=4.28.0\n", source)
    (finding,) = lint(source, codes=["ADV502"], path=str(script))
    assert finding.line == 5 and finding.fix_applicability is None and "prepare_model_for_kbit_training" in finding.message
    script = _project_with(tmp_path, "transformers>=5\n", source)
    assert lint(source, codes=["ADV502"], path=str(script)) == []


def test_adv502_intel_xpu_branches_do_not_silence_it(tmp_path):
    """qlora counts `torch.xpu` devices beside CUDA: torch's eager XPU backend runs torch's own
    checkpoint, so only another runtime's import (torch_xla, Neuron) keeps the rule out."""
    xpu = "import torch\nn_gpus = torch.xpu.device_count() if torch.xpu.is_available() else 0\n" + TRANSFORMERS_4_ARGUMENTS
    script = _project_with(tmp_path, "transformers==4.31.0\n", xpu)
    assert len(lint(xpu, codes=["ADV502"], path=str(script))) == 3
    xla = "import torch_xla.core.xla_model as xm\n" + TRANSFORMERS_4_ARGUMENTS
    script = _project_with(tmp_path, "transformers==4.31.0\n", xla)
    assert lint(xla, codes=["ADV502"], path=str(script)) == []


# -- ADV505 ---------------------------------------------------------------------------------------------------
def test_adv505_removes_a_device_check_left_empty():
    source = """
    import torch
    for batch in loader:
        loss = model(batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if torch.cuda.is_available(): torch.cuda.empty_cache()
        log(loss)
    """
    fixed = fix(source, codes=["ADV505"]).fixed.decode()
    assert "empty_cache" not in fixed and "is_available" not in fixed and "log(loss)" in fixed
    compile(fixed, "fixed.py", "exec")


def test_adv505_in_a_lightning_training_step():
    source = """
    import torch
    import lightning as L

    class Model(L.LightningModule):
        def training_step(self, batch, batch_idx):
            loss = self.net(batch).mean()
            torch.cuda.empty_cache()
            return loss
    """
    assert codes_of(source, codes=["ADV505"]) == ["ADV505"]


@pytest.mark.parametrize("test, expected", [("step_failed", []), ("not torch.cuda.is_available()", ["ADV505"])])
def test_adv505_in_else_branch_and_conditional_expression(test, expected):
    # An else is conditional, unless its test is one no GPU run passes: then it runs every step
    # there, as the body of `if torch.cuda.is_available():` does (llm.c: `if device == "mps":
    # ... elif device == "cuda":`).
    source = f"""
    import torch
    for batch in loader:
        loss = model(batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if {test}:
            pass
        else:
            torch.cuda.empty_cache()
        torch.cuda.empty_cache() if low_memory else None
    """
    assert codes_of(source, codes=["ADV505"]) == expected
