"""ADV202 / ADV203 / ADV206 beyond their own examples: the shared "trained on CUDA" premise,
how the fixes meet in the fixer's rounds, layouts the loop fix must keep, and look-alikes."""
from __future__ import annotations

import textwrap

import pytest

from advisor.context import FileContext
from advisor.facts.frameworks import ACCELERATE, DEEPSPEED, FABRIC_LOOP, HF_TRAINER, LIGHTNING_FIT, LOOP
from advisor.facts.precision import trains_in_fp32
from advisor.targets import ASSUMED
from helpers import fix, lint

GLOBAL = ["ADV202", "ADV203", "ADV206"]


def context(source: str) -> FileContext:
    return FileContext.from_source("snippet.py", textwrap.dedent(source), ASSUMED)


def cuda_training(ctx: FileContext):
    """The training sites the facts layer says run on a CUDA GPU."""
    return ctx.facts.frameworks.gpu_sites


def places_on_cuda(ctx: FileContext) -> bool:
    return ctx.facts.devices.places_on_gpu


def codes_of(source: str, codes=GLOBAL, gpu: str | None = None) -> list[str]:
    return [d.code for d in lint(source, codes=codes, gpu=gpu)]


def fixed(source: str, codes=GLOBAL, gpu: str | None = None) -> str:
    result = fix(source, codes=codes, unsafe=True, gpu=gpu)
    assert not result.dropped, result.dropped
    output = result.fixed.decode()
    compile(output, "fixed.py", "exec")
    again = fix(output, codes=codes, unsafe=True, gpu=gpu)
    assert again.fixed.decode() == output, "fix is not idempotent"
    return output


# -- the premise: where a file trains on CUDA -----------------------------------------------------
PLAIN_LOOP = """
import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 10)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for x, y in loader:
    x, y = x.to(device), y.to(device)
    optimizer.zero_grad()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize(
    "source,kind",
    [
        (PLAIN_LOOP, LOOP),
        (
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out")
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            HF_TRAINER,
        ),
        (
            """
            from accelerate import Accelerator
            accelerator = Accelerator()
            for batch in loader:
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
            """,
            ACCELERATE,
        ),
        (
            """
            import pytorch_lightning as pl
            trainer = pl.Trainer(gpus=2)
            trainer.fit(model, loader)
            """,
            LIGHTNING_FIT,
        ),
        (
            """
            import lightning as L
            L.Trainer().fit(model, loader)
            """,
            LIGHTNING_FIT,
        ),
        (
            """
            from lightning.fabric import Fabric
            fabric = Fabric(accelerator="cuda")
            for batch in loader:
                loss = model(batch)
                fabric.backward(loss)
                optimizer.step()
            """,
            FABRIC_LOOP,
        ),
        (
            """
            import deepspeed
            engine, optimizer, _, _ = deepspeed.initialize(model=model, config=cfg)
            for batch in loader:
                loss = engine(batch)
                engine.backward(loss)
                optimizer.step()
            """,
            DEEPSPEED,
        ),
    ],
)
def test_cuda_training_kinds(source, kind):
    assert [site.kind for site in cuda_training(context(source))] == [kind]


@pytest.mark.parametrize(
    "source",
    [
        """
        import torch
        model = Net()
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        """,
        """
        import torch
        model = Net().cuda().eval()
        with torch.no_grad():
            for x in loader:
                model(x.cuda())
        """,
        """
        from transformers import Trainer, TrainingArguments
        Trainer(model=model, args=TrainingArguments("out", use_cpu=True), train_dataset=ds).train()
        """,
        """
        import lightning as L
        L.Trainer(accelerator="cpu").fit(model, loader)
        """,
        """
        import pytorch_lightning as pl
        pl.Trainer().fit(model, loader)
        """,
        """
        from accelerate import Accelerator
        accelerator = Accelerator(cpu=True)
        for batch in loader:
            accelerator.backward(model(batch))
            optimizer.step()
        """,
    ],
    ids=["no-device", "inference", "trainer-cpu", "lightning-cpu", "lightning-1-default", "accelerate-cpu"],
)
def test_no_cuda_training(source):
    assert cuda_training(context(source)) == []


def test_a_loop_driven_by_an_engine_from_elsewhere_is_not_a_plain_loop():
    source = """
    import torch
    from helpers import accelerator
    model = model.to(accelerator.device)
    for x in loader:
        loss = model(x.cuda())
        accelerator.backward(loss)
        optimizer.step()
    """
    assert cuda_training(context(source)) == []


def test_a_gpu_index_is_a_cuda_device_even_without_other_cuda_mentions():
    source = """
    class Trainer:
        def __init__(self, model, gpu_id):
            self.model = model.to(gpu_id)
    """
    assert places_on_cuda(context(source))


@pytest.mark.parametrize(
    "call,fp32",
    [
        ('TrainingArguments("out")', True),
        ('TrainingArguments("out", bf16=False, fp16=False)', True),
        ('TrainingArguments("out", bf16=True)', False),
        ('TrainingArguments("out", fp16=args.fp16)', False),
        ('TrainingArguments("out", **config)', False),
        ('TrainingArguments("out", deepspeed="ds.json")', False),
    ],
)
def test_trainer_precision(call, fp32):
    source = f"""
    from transformers import Trainer, TrainingArguments
    args = {call}
    Trainer(model=model, args=args, train_dataset=ds).train()
    """
    ctx = context(source)
    assert any(trains_in_fp32(ctx, site) for site in cuda_training(ctx)) is fp32


# -- how the fixes meet ----------------------------------------------------------------------------
def test_plain_loop_gets_tf32_and_bf16_autocast_in_one_run():
    assert fixed(PLAIN_LOOP) == textwrap.dedent(
        """
        import torch
        import torch.nn as nn

        torch.set_float32_matmul_precision("high")

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 10)).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
            loss.backward()
            optimizer.step()
        """
    )


def test_after_the_autocast_fix_no_precision_rule_has_more_to_say():
    output = fixed(PLAIN_LOOP)
    codes = [d.code for d in lint(output, codes=["ADV201", "ADV202", "ADV203", "ADV204", "ADV205", "ADV206"])]
    assert codes == []


def test_trainer_gets_tf32_then_bf16():
    source = """
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    model = AutoModelForCausalLM.from_pretrained("gpt2")
    args = TrainingArguments("out", per_device_train_batch_size=8)
    Trainer(model=model, args=args, train_dataset=ds).train()
    """
    assert codes_of(source) == ["ADV202", "ADV203"]
    result = fixed(source)
    # TF32 through the process-wide setting: `TrainingArguments(tf32=True)` raises without an
    # Ampere GPU, and CPU CI runs the same script (issue 16).
    assert 'TrainingArguments("out", per_device_train_batch_size=8, bf16=True)' in result
    assert 'torch.set_float32_matmul_precision("high")' in result and "tf32=True" not in result


def test_safe_fixes_leave_the_precision_alone():
    result = fix(PLAIN_LOOP, codes=GLOBAL, unsafe=False)
    assert result.fixed.decode() == textwrap.dedent(PLAIN_LOOP)


def test_loop_fix_keeps_the_file_indentation_and_comments():
    source = (
        "import torch\n"
        "model = torch.nn.Linear(4096, 4096).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x, y in loader:\n"
        "  # forward pass\n"
        "  out = model(x.cuda())  # logits\n"
        "  loss = crit(out, y.cuda())\n"
        "  loss.backward()\n"
        "  opt.step()\n"
        "crit = torch.nn.CrossEntropyLoss()\n"
    )
    assert fixed(source, codes=["ADV203"]) == (
        "import torch\n"
        "model = torch.nn.Linear(4096, 4096).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x, y in loader:\n"
        "  # forward pass\n"
        '  with torch.autocast("cuda", dtype=torch.bfloat16):\n'
        "    out = model(x.cuda())  # logits\n"
        "    loss = crit(out, y.cuda())\n"
        "  loss.backward()\n"
        "  opt.step()\n"
        "crit = torch.nn.CrossEntropyLoss()\n"
    )


def test_loop_fix_uses_the_torch_import_of_the_function_it_edits():
    source = """
    def train(model, loader, opt):
        import torch
        model.cuda().train()
        for x in loader:
            loss = model(x.cuda()).mean()
            loss.backward()
            opt.step()

    import torchvision
    train(torchvision.models.resnet18(), loader, opt)
    """
    assert 'with torch.autocast("cuda", dtype=torch.bfloat16):' in fixed(source, codes=["ADV203"])


@pytest.mark.parametrize(
    "body",
    [
        # the model call is behind a condition
        """
        if use_aux:
            out = model(x.cuda())
        loss = crit(out, y.cuda())
        loss.backward()
        opt.step()
        """,
        # two backward passes (a GAN step)
        """
        out = model(x.cuda())
        loss = crit(out, y.cuda())
        loss.backward()
        aux = model(x.cuda()).mean()
        aux.backward()
        opt.step()
        """,
        # the backward runs in a helper
        """
        out = model(x.cuda())
        loss = crit(out, y.cuda())
        backward_and_step(loss, opt)
        """,
        # a statement that is not an assignment sits between the model call and the loss
        """
        out = model(x.cuda())
        print(out.shape)
        loss = crit(out, y.cuda())
        loss.backward()
        opt.step()
        """,
    ],
    ids=["conditional-forward", "two-backward", "helper-backward", "print-in-between"],
)
def test_loop_fix_only_where_the_forward_block_is_certain(body):
    source = (
        "import torch\n\n"
        "def backward_and_step(loss, opt):\n"
        "    loss.backward()\n"
        "    opt.step()\n\n"
        "model = Net().cuda()\n"
        "for x, y in loader:\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"
    )
    found = lint(source, codes=["ADV203"])
    assert [d.code for d in found] == ["ADV203"]
    assert fix(source, codes=["ADV203"], unsafe=True).fixed.decode() == source


# -- look-alikes -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "source",
    [
        # RL against a gym environment: small policy networks
        """
        import gym
        import torch
        import torch.nn as nn
        agent = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, n_actions)).to("cuda")
        for update in range(1000):
            loss = agent(obs.cuda()).mean()
            loss.backward()
            optimizer.step()
        """,
        # a toy model: every layer at most 64 wide
        """
        import torch
        model = torch.nn.Linear(20, 1).to(0)
        for x, y in loader:
            loss = (model(x.to(0)) - y.to(0)).pow(2).mean()
            loss.backward()
            optimizer.step()
        """,
        # precision handled by a helper module: a loss scaler named for it
        """
        import torch
        from util.misc import NativeScalerWithGradNormCount as NativeScaler
        model = Net().cuda()
        loss_scaler = NativeScaler()
        for x in loader:
            loss = model(x.cuda())
            loss.backward()
            optimizer.step()
        """,
        # a --amp option
        """
        import argparse
        import torch
        parser = argparse.ArgumentParser()
        parser.add_argument("--amp", action="store_true")
        args = parser.parse_args()
        model = Net().cuda()
        for x in loader:
            with maybe_mixed(args.amp):
                loss = model(x.cuda())
            loss.backward()
            optimizer.step()
        """,
        # Lightning's manual optimization
        """
        import torch
        class Module(LightningModule):
            def training_step(self, batch, batch_idx):
                for x in batch:
                    loss = self.net(x.cuda()).mean()
                    self.manual_backward(loss)
                    self.optimizers().step()
        """,
    ],
    ids=["gym", "toy", "loss-scaler", "amp-flag", "manual-backward"],
)
def test_global_precision_lookalikes_stay_silent(source):
    assert codes_of(source, codes=["ADV202", "ADV203"]) == []


def test_pure_fp16_model_is_reported_once_and_not_as_missing_mixed_precision():
    source = """
    import torch
    model = Net().cuda().half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = crit(model(x.cuda().half()), y.cuda())
        loss.backward()
        optimizer.step()
    """
    assert codes_of(source) == ["ADV206"]


def test_half_cast_message_points_to_autocast_with_a_scaler_without_bf16():
    source = """
    import torch
    model = Net().cuda()
    model.half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = crit(model(x.cuda().half()), y.cuda())
        loss.backward()
        optimizer.step()
    """
    (finding,) = lint(source, codes=["ADV206"], gpu="V100")
    assert "torch.float16" in finding.message and "GradScaler" in finding.message
    (finding,) = lint(source, codes=["ADV206"], gpu="A100")
    assert "torch.bfloat16" in finding.message


def test_half_cast_of_a_frozen_module_in_a_diffusion_script_is_silent():
    source = """
    import torch
    text_encoder.to(device, dtype=torch.float16)
    vae.half()
    unet.train()
    optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-4)
    for batch in loader:
        with torch.no_grad():
            latents = vae.encode(batch["pixels"].half()).latent_dist.sample()
            states = text_encoder(batch["ids"])[0]
        loss = unet(latents.float(), states.float()).sample.mean()
        loss.backward()
        optimizer.step()
    """
    assert codes_of(source, codes=["ADV206"]) == []


def test_half_model_given_to_a_trainer_subclass_is_reported():
    source = """
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    class WeightedTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False):
            return model(**inputs).loss

    model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.float16)
    trainer = WeightedTrainer(model=model, args=TrainingArguments("out"), train_dataset=ds)
    trainer.train()
    """
    (finding,) = lint(source, codes=["ADV206"])
    assert "`torch_dtype=torch.float16`" in finding.message and "`bf16=True`" in finding.message


@pytest.mark.parametrize("precision,fp32", [('"32-true"', True), ("32", True), ('"bf16-mixed"', False), ("64", False)])
def test_lightning_precision(precision, fp32):
    source = f"""
    import lightning as L
    trainer = L.Trainer(accelerator="gpu", precision={precision})
    trainer.fit(model, loader)
    """
    ctx = context(source)
    (site,) = cuda_training(ctx)
    assert trains_in_fp32(ctx, site) is fp32


def test_no_autocast_fix_where_torch_names_something_else():
    source = """
    def train(model, loader, opt, torch):
        model.train()
        for x in loader:
            loss = model(x.cuda()).mean()
            loss.backward()
            opt.step()
    """
    assert codes_of(source, codes=["ADV203"]) == ["ADV203"]
    assert fix(source, codes=["ADV203"], unsafe=True).fixed.decode() == textwrap.dedent(source)


# -- ADV203's autocast fix: only where every callee is known to run under CUDA autocast ------------
def _autocast_cuda_kernel(op, *tensors):
    """Run ``op`` through the kernel CUDA autocast registers for it, on CPU tensors: the kernel,
    not the device, decides whether autocast accepts the op."""
    import torch

    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)
    return op.redispatch(keys, *tensors)


def test_cuda_autocast_refuses_binary_cross_entropy_but_not_its_replacements():
    torch = pytest.importorskip("torch")
    probabilities, targets = torch.rand(4, 3), torch.rand(4, 3)
    with pytest.raises(RuntimeError, match="unsafe to autocast"):
        _autocast_cuda_kernel(torch.ops.aten.binary_cross_entropy.default, probabilities, targets)
    # What the message suggests instead, and the losses the fix does wrap, pass through it.
    _autocast_cuda_kernel(torch.ops.aten.binary_cross_entropy_with_logits.default, probabilities, targets)
    _autocast_cuda_kernel(torch.ops.aten.mse_loss.default, probabilities, targets)
    # CPU autocast has no such ban: a CPU run cannot show the crash, hence a static decision.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.nn.BCELoss()(probabilities, targets).dtype == torch.float32


BCE_VAE = """
import torch
import torch.nn.functional as F
from torch import nn

class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 784)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))

def loss_function(recon_x, x):
    return F.binary_cross_entropy(recon_x, x, reduction="sum")

model = VAE().cuda()
optimizer = torch.optim.Adam(model.parameters())
for data, _ in loader:
    data = data.cuda()
    optimizer.zero_grad()
    recon = model(data)
    loss = loss_function(recon, data)
    loss.backward()
    optimizer.step()
"""


def test_binary_cross_entropy_makes_the_loop_fix_advice_naming_the_logits_variant():
    (finding,) = lint(BCE_VAE, codes=["ADV203"])
    assert finding.fix_applicability is None
    assert "`BCEWithLogitsLoss`" in finding.message and "binary_cross_entropy_with_logits" in finding.message
    assert fixed(BCE_VAE, codes=["ADV203"]) == BCE_VAE


def test_binary_cross_entropy_in_a_lightning_module_keeps_the_precision_setting_as_advice():
    source = """
    import lightning as L
    import torch.nn.functional as F

    class Gan(L.LightningModule):
        def training_step(self, batch, batch_idx):
            return F.binary_cross_entropy(self.discriminator(batch), batch.new_ones(len(batch)))

    L.Trainer(accelerator="gpu").fit(Gan(), loader)
    """
    (finding,) = lint(source, codes=["ADV203"])
    assert finding.fix_applicability is None and "BCEWithLogitsLoss" in finding.message


MODEL_LOOP = """
import torch
import torch.nn as nn
{setup}
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    output = model(x.cuda())
    loss = criterion(output, y.cuda())
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize(
    "setup",
    [
        "from models import Darknet\nmodel = Darknet('yolov3.cfg').cuda()",
        "from models import *\nmodel = Darknet('yolov3.cfg').cuda()",
        "from .resnet import ResNet\nmodel = ResNet().cuda()",
        # A class of the file whose code reaches into the script's own project.
        (
            "from heads import YoloHead\n"
            "class Detector(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.head = YoloHead()\n"
            "    def forward(self, x):\n"
            "        return self.head(x)\n"
            "model = Detector().cuda()"
        ),
        "from builders import build_model\nmodel = build_model().cuda()",
    ],
    ids=["imported", "star-import", "relative", "local-class-with-imported-part", "imported-factory"],
)
def test_a_model_whose_code_is_not_in_the_file_gets_advice_only(setup):
    source = MODEL_LOOP.format(setup=setup)
    (finding,) = lint(source, codes=["ADV203"])
    assert finding.fix_applicability is None


@pytest.mark.parametrize(
    "setup",
    [
        "import torchvision\nmodel = torchvision.models.resnet50().cuda()",
        "import timm\nmodel = timm.create_model('resnet50').cuda()",
        (
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.fc = nn.Linear(4096, 1000)\n"
            "    def forward(self, x):\n"
            "        return self.fc(x.view(-1, 4096))\n"
            "model = Net().cuda()\n"
            "model = model.to('cuda')"
        ),
    ],
    ids=["torchvision", "timm", "local-class"],
)
def test_a_model_the_file_or_a_library_shows_gets_the_autocast_fix(setup):
    output = fixed(MODEL_LOOP.format(setup=setup), codes=["ADV203"])
    assert 'with torch.autocast("cuda", dtype=torch.bfloat16):' in output


def test_a_model_in_data_parallel_replicas_gets_autocast_advice():
    # DataParallel's replica threads enter autocast with its default float16 (parallel_apply):
    # bf16 around the wrapped model's call reaches the main thread only, with no GradScaler.
    source = MODEL_LOOP.format(setup="import timm\nmodel = nn.DataParallel(timm.create_model('resnet50')).cuda()")
    (finding,) = lint(source, codes=["ADV203"])
    assert finding.fix_applicability is None and "`nn.DataParallel`" in finding.message, finding.message


SMALL_MLP = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    def forward(self, x):
        return self.layers(x.view(-1, 784))

model = {build}.cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize("code", ["ADV202", "ADV203"])
def test_a_small_dense_network_gets_precision_advice_not_a_fix(code):
    # Held-out fix audits: readers judged bf16 and TF32 on a 784-64-64-10 MNIST MLP, a 2-100-3
    # spiral classifier or a 784-400-20 VAE doubtful: launch-bound steps, numbers changed for nothing.
    (finding,) = [d for d in lint(SMALL_MLP.format(build="Net()"), codes=frozenset({code}), gpu="A100")]
    assert finding.fix_applicability is None
    assert "the network is small (about 55,050 parameters, no layer wider than 784)" in finding.message


@pytest.mark.parametrize(
    "build",
    ["torch.load('net.pt')", "build_backbone()", "Net().to('cuda') if small else torchvision.models.resnet50()"],
    ids=["pickled", "unknown-factory", "library-model"],
)
def test_a_network_the_file_does_not_show_is_not_small(build):
    source = SMALL_MLP.format(build=build)
    if "torchvision" in build:
        source = "import torchvision\n" + source
    (finding,) = [d for d in lint(source, codes=frozenset({"ADV203"}), gpu="A100")]
    assert "the network is small" not in finding.message


def test_a_model_passed_by_the_files_caller_is_followed_to_its_constructor():
    source = """
    import torch
    import torchvision

    def train(loader, model, criterion, optimizer):
        for x, y in loader:
            output = model(x.cuda())
            loss = criterion(output, y.cuda())
            loss.backward()
            optimizer.step()

    def main():
        model = torchvision.models.resnet18().cuda()
        criterion = torch.nn.CrossEntropyLoss().cuda()
        train(loader, model, criterion, torch.optim.SGD(model.parameters(), lr=0.1))
    """
    assert "torch.autocast" in fixed(source, codes=["ADV203"])
    # The same helper with a caller passing a loss from the script's own project: advice only.
    imported = source.replace("torch.nn.CrossEntropyLoss().cuda()", "FocalLoss()").replace(
        "import torchvision\n", "import torchvision\n    from losses import FocalLoss\n"
    )
    (finding,) = lint(imported, codes=["ADV203"])
    assert finding.fix_applicability is None


# -- ADV203's premise: an explicit fp32 cast is not reduced precision -----------------------------
UNET_STYLE = """
import torch
from torch import nn
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
net = nn.Sequential(nn.Conv2d(3, 256, 3), nn.ReLU(), nn.Conv2d(256, 1, 1)).to(device)
optimizer = torch.optim.RMSprop(net.parameters(), lr=0.001)
criterion = nn.BCEWithLogitsLoss()
for imgs, true_masks in loader:
    imgs = imgs.to(device=device, dtype=torch.float32)
    mask_type = {mask_type}
    true_masks = true_masks.to(device=device, dtype=mask_type)
    masks_pred = net(imgs)
    loss = criterion(masks_pred, true_masks)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize(
    "mask_type,reported",
    [
        ("torch.float32 if net[-1].out_channels == 1 else torch.long", True),
        ("torch.float32", True),
        ("torch.float16 if args.half else torch.float32", False),
        ("args.mask_dtype", False),
    ],
)
def test_only_a_half_precision_dtype_counts_as_precision_handled(mask_type, reported):
    assert (codes_of(UNET_STYLE.format(mask_type=mask_type), codes=["ADV203"]) == ["ADV203"]) is reported


@pytest.mark.parametrize(
    "after",
    [
        "plt.plot(logits.data.cpu().numpy())\n",
        "import numpy as np\nscores = np.array(logits.detach().cpu())\n",
        "def show(images):\n    plt.imshow(images.cpu().numpy())\nshow(logits)\n",
    ],
)
def test_bf16_autocast_is_advice_where_the_steps_outputs_go_to_numpy(after):
    # NYU-DLSP20's notebooks plot `y_pred.data.cpu().numpy()` after the step: NumPy has no
    # bfloat16, so outputs made under bf16 autocast would raise there.
    source = "import matplotlib.pyplot as plt\n" + PLAIN_LOOP + after
    (finding,) = lint(source, codes=["ADV203"])
    assert finding.fix_applicability is None and "NumPy, which has no bfloat16" in finding.message
    (plain,) = lint("import matplotlib.pyplot as plt\n" + PLAIN_LOOP + "print(loss.item())\n", codes=["ADV203"])
    assert plain.fix_applicability is not None


@pytest.mark.parametrize("product, reported", [
    ("torch.matmul(intrinsics, extrinsics[:, :3, :4])", False),
    ("torch.matmul(rot.transpose(1, 2), xyz)", False),
    ("torch.matmul(q, k.transpose(-2, -1))", True),  # `transpose` is not a pose
    ("torch.matmul(rotary, x)", True),  # nor `rotary` a rotation
])
def test_camera_geometry_products_in_a_conv_net_are_not_tf32_work(product, reported):
    # PatchmatchNet: a conv net whose only matrix products apply 3x3 and 4x4 camera matrices.
    source = (
        "import torch\nimport torch.nn as nn\n\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.conv = nn.Conv2d(256, 512, 3)\n\n"
        f"    def forward(self, x, intrinsics, extrinsics, rot, xyz, q, k, rotary):\n        p = {product}\n        return self.conv(x) * p.mean()\n\n"
        "model = Net().cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for batch in loader:\n    model(*[t.cuda() for t in batch]).mean().backward()\n    optimizer.step()\n"
    )
    assert ("ADV202" in [d.code for d in lint(source, gpu="A100")]) is reported
