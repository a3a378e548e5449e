"""ADV602 (no-torch-compile), ADV605 (cudnn-benchmark), ADV606 (compile-without-effect) beyond
their own examples: how models are recognised, where the compile goes, and what keeps them silent."""
from __future__ import annotations

import textwrap

import pytest

from helpers import fix, lint


def findings(source: str, code: str):
    return [d for d in lint(source, codes=[code]) if d.code == code]


def fixed(source: str, code: str) -> str:
    """As ``fix --verify --unsafe-fixes`` patches the script: the compile is a measured fix."""
    return fix(source, codes=[code], unsafe=True, measured=True).fixed.decode()


LOOP = """
for x, y in loader:
    loss = loss_fn({model}(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def script(setup: str, model: str = "model", imports: str = "import torch\nfrom models import Net") -> str:
    return f"{imports}\n{textwrap.dedent(setup).strip()}\n{LOOP.format(model=model).lstrip()}"


# -- ADV602 ----------------------------------------------------------------------------------------
def test_message_and_fix_safety():
    (finding,) = findings(script('model = Net().to("cuda")\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)'), "ADV602")
    assert finding.message.startswith("`model` is trained on CUDA without `torch.compile`")
    assert finding.message.endswith("(guide: Using torch.compile)")
    assert finding.fix_applicability == "measured"
    source = script('model = Net().to("cuda")\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)')
    assert "torch.compile" not in fix(source, codes=["ADV602"], unsafe=True).fixed.decode()  # only where measured


def test_compile_goes_after_the_last_move_and_weights_before_the_optimizer():
    source = script(
        """
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = Net()
        model.apply(init_weights)
        model.to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """
    )
    assert "model.to(device)\nmodel = torch.compile(model)\noptimizer = " in fixed(source, "ADV602")


def test_import_alias_is_used():
    source = script(
        'model = Net().cuda()\noptimizer = T.optim.SGD(model.parameters(), lr=0.1)',
        imports="import torch as T\nfrom models import Net",
    )
    assert "model = T.compile(model)\n" in fixed(source, "ADV602")


def test_state_dict_saved_later_compiles_in_place():
    source = script('model = Net().cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)')
    source += 'torch.save(model.state_dict(), "ckpt.pt")\n'
    (finding,) = findings(source, "ADV602")
    assert "`model.compile()`" in finding.message
    assert "model = Net().cuda()\nmodel.compile()\n" in fixed(source, "ADV602")


def test_attribute_model_in_a_trainer_class():
    source = """
        import torch
        from models import Net

        class Trainer:
            def __init__(self, device):
                self.model = Net().to(device)
                self.optimizer = torch.optim.AdamW(self.model.parameters())

            def fit(self, loader):
                for x in loader:
                    self.model(x.cuda()).sum().backward()
                    self.optimizer.step()
        """
    out = fixed(source, "ADV602")
    assert "self.model = Net().to(device)\n        self.model = torch.compile(self.model)\n" in out


def test_model_built_by_a_factory_of_the_file():
    source = """
        import torch
        from models import Net

        def build_model(args):
            return Net(args.width).cuda()

        def main(args):
            model = build_model(args)
            optimizer = torch.optim.AdamW(model.parameters())
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
        """
    assert "model = build_model(args)\n    model = torch.compile(model)\n" in fixed(source, "ADV602")


def test_model_handed_to_a_training_function():
    source = """
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            pass

        def train(model, optimizer, loader):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()

        def main():
            model = Net().to("cuda")
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                model.train()
                train(model, optimizer, loader)
        """
    out = fixed(source, "ADV602")
    assert 'model = Net().to("cuda")\n    model = torch.compile(model)\n    optimizer' in out


def test_peft_model_is_compiled_after_the_wrap():
    source = """
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        base = AutoModelForCausalLM.from_pretrained("gpt2")
        model = get_peft_model(base, LoraConfig(r=8))
        model.to("cuda")
        optimizer = torch.optim.AdamW(model.parameters())
        for batch in loader:
            model(**batch).loss.backward()
            optimizer.step()
        """
    assert 'model.to("cuda")\nmodel = torch.compile(model)\noptimizer' in fixed(source, "ADV602")


def test_model_built_per_fold_is_compiled_per_fold():
    source = """
        import torch
        from models import Net
        for fold in range(5):
            model = Net().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loaders[fold]:
                model(x).sum().backward()
                optimizer.step()
        """
    assert "    model = Net().cuda()\n    model = torch.compile(model)\n" in fixed(source, "ADV602")


def test_hf_model_with_device_map_in_a_plain_loop():
    source = """
        import torch
        from transformers import AutoModelForSequenceClassification
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased", device_map="cuda")
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
        for batch in loader:
            model(**batch).loss.backward()
            optimizer.step()
        """
    assert len(findings(source, "ADV602")) == 1


@pytest.mark.parametrize(
    "setup",
    [
        'model = Net().cpu()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\ntorch.cuda.empty_cache()',
        'model = nn.DataParallel(Net()).cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)',
        'model = Net().cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nfn = torch.compile(loss_fn)',
        (
            'model = Net().cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'fabric = Fabric()\nmodel, optimizer = fabric.setup(model, optimizer)\nmodel = torch.compile(model)'
        ),
    ],
    ids=["cpu", "data-parallel", "something-compiled", "compiled-after-setup"],
)
def test_silent(setup):
    imports = "import torch\nimport torch.nn as nn\nfrom lightning import Fabric\nfrom models import Net"
    assert findings(script(setup, imports=imports), "ADV602") == []


def test_model_driven_only_through_other_methods_is_silent():
    source = """
        import torch
        from models import Agent
        agent = Agent(envs).cuda()
        optimizer = torch.optim.Adam(agent.parameters())
        for step in range(1000):
            _, logprob, value = agent.get_action_and_value(obs)
            (-logprob.mean() + value.mean()).backward()
            optimizer.step()
        """
    assert findings(source, "ADV602") == []


def test_quantized_hf_model_is_silent():
    source = """
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained("m", load_in_8bit=True, device_map="auto")
        optimizer = torch.optim.AdamW(model.parameters())
        for batch in loader:
            model(**batch).loss.backward()
            optimizer.step()
        """
    assert findings(source, "ADV602") == []


@pytest.mark.parametrize(
    "arguments,expected",
    [
        ('"out", bf16=True', 1),
        ('"out", use_cpu=True', 0),
        ('"out", deepspeed="ds.json"', 0),
        ('"out", torch_compile=False', 0),
        ('"out", torch_compile_mode="max-autotune"', 0),
    ],
)
def test_training_arguments(arguments, expected):
    source = f"""
        from transformers import Trainer, TrainingArguments
        args = TrainingArguments({arguments})
        Trainer(model=model, args=args).train()
        """
    assert len(findings(source, "ADV602")) == expected


def test_trainer_that_only_evaluates_is_silent():
    source = """
        from transformers import Trainer, TrainingArguments
        trainer = Trainer(model=model, args=TrainingArguments("out", bf16=True))
        print(trainer.evaluate())
        """
    assert findings(source, "ADV602") == []


def test_trl_config_and_trainer():
    source = """
        from trl import SFTConfig, SFTTrainer
        config = SFTConfig(output_dir="out", bf16=True)
        SFTTrainer(model="Qwen/Qwen2-0.5B", args=config, train_dataset=ds).train()
        """
    assert "SFTConfig(output_dir=\"out\", bf16=True, torch_compile=True)" in fixed(source, "ADV602")


def test_unsloth_is_silent():
    source = """
        from unsloth import FastLanguageModel
        from transformers import Trainer, TrainingArguments
        Trainer(model=model, args=TrainingArguments("out", bf16=True)).train()
        """
    assert findings(source, "ADV602") == []


# -- ADV605 ----------------------------------------------------------------------------------------
def test_cudnn_message():
    source = script(
        "model = torchvision.models.resnet18().cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        imports="import torch\nimport torchvision",
    )
    (finding,) = findings(source, "ADV605")
    assert finding.message.startswith("`model` is a conv net trained on CUDA without `torch.backends.cudnn.benchmark")
    assert finding.message.endswith("(guide: PyTorch performance tuning guide, cuDNN auto-tuner)")


@pytest.mark.parametrize(
    "name,expected",
    [("resnet50d", 1), ("efficientnet_b0", 1), ("vit_base_patch16_224", 0), ("swin_tiny_patch4_window7_224", 0)],
)
def test_timm_models_by_name(name, expected):
    source = script(
        f'model = timm.create_model("{name}").cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)',
        imports="import torch\nimport timm",
    )
    assert len(findings(source, "ADV605")) == expected


def test_accelerate_prepared_conv_net():
    source = """
        import torch
        import timm
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = timm.create_model("resnet50d", pretrained=True)
        optimizer = torch.optim.AdamW(model.parameters())
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for x, y in loader:
            accelerator.backward(model(x).sum())
            optimizer.step()
        """
    assert len(findings(source, "ADV605")) == 1


@pytest.mark.parametrize(
    "extra",
    [
        "accelerate.utils.set_seed(0, deterministic=True)",
        "torch.use_deterministic_algorithms(True)",
        "if __name__ == '__main__':\n    torch.backends.cudnn.benchmark = args.benchmark",
    ],
)
def test_cudnn_choices_keep_it_silent(extra):
    source = script(
        "model = torchvision.models.resnet18().cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        imports="import torch\nimport torchvision\nimport accelerate",
    ) + extra + "\n"
    assert findings(source, "ADV605") == []


def test_conv1d_only_model_is_silent():
    source = """
        import torch
        import torch.nn as nn
        class AudioNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv1d(1, 32, 9)
        model = AudioNet().cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for wave in loader:
            model(wave).sum().backward()
            optimizer.step()
        """
    assert findings(source, "ADV605") == []


def test_lightning_trainer_on_cpu_is_silent():
    source = """
        import lightning as L
        import torch.nn as nn
        class LitNet(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 16, 3)
        L.Trainer(accelerator="cpu").fit(LitNet())
        """
    assert findings(source, "ADV605") == []


def test_one_cudnn_finding_per_file():
    source = """
        import torch
        import torchvision
        netG = torchvision.models.resnet18().cuda()
        netD = torchvision.models.resnet18().cuda()
        opt_g = torch.optim.Adam(netG.parameters())
        opt_d = torch.optim.Adam(netD.parameters())
        for x in loader:
            netD(netG(x)).sum().backward()
            opt_d.step()
            opt_g.step()
        """
    assert len(findings(source, "ADV605")) == 1


# -- ADV606 ----------------------------------------------------------------------------------------
def test_discarded_compile_at_module_level_read_by_a_function():
    source = """
        import torch
        from models import Net
        model = Net().cuda()
        torch.compile(model, mode="reduce-overhead")

        def train():
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
        """
    (finding,) = findings(source, "ADV606")
    assert finding.message.startswith('`torch.compile(model)` discards its result')
    assert 'model = torch.compile(model, mode="reduce-overhead")\n' in fixed(source, "ADV606")


def test_trainer_given_the_compiled_model_later_is_silent():
    source = """
        import torch
        from transformers import Trainer
        trainer = Trainer(model=model, args=args)
        model = torch.compile(model)
        trainer.model = model
        trainer.train()
        """
    assert findings(source, "ADV606") == []


def test_alpaca_lora_ordering():
    source = """
        import torch
        import transformers
        trainer = transformers.Trainer(model=model, args=transformers.TrainingArguments("out"))
        model.config.use_cache = False
        if torch.__version__ >= "2":
            model = torch.compile(model)
        trainer.train()
        """
    (finding,) = findings(source, "ADV606")
    assert "the Trainer trains the uncompiled model" in finding.message
    assert finding.fix_applicability is None


def test_discarded_compile_of_a_saved_model_compiles_in_place():
    source = """
        import torch
        from models import Net
        model = Net().cuda()
        torch.compile(model, mode="max-autotune")
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        torch.save(model.state_dict(), "model.pt")
        """
    assert 'model = Net().cuda()\nmodel.compile(mode="max-autotune")\n' in fixed(source, "ADV606")


# -- ADV605: image sizes that vary, and settings left commented out ---------------------------------
LOCAL_CONV_NET = """
import torch
import torch.nn as nn
{transforms}
class {name}(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 64, 3, padding=1)
        self.up = nn.ConvTranspose2d(64, 1, 2)

model = {name}().cuda()
optimizer = torch.optim.Adam(model.parameters())
for imgs, masks in loader:
    loss_fn(model(imgs.cuda()), masks.cuda()).backward()
    optimizer.step()
"""


@pytest.mark.parametrize(
    "name,transforms,expected",
    [
        ("UNet", "", 0),  # the dataset's own image sizes
        ("UNet", "import torchvision.transforms as T\nresize = T.Resize(512)", 0),  # only the shorter side
        ("UNet", "import torchvision.transforms as T\nresize = T.Resize((512, 512))", 1),
        ("SegNet", "import albumentations as A\naugment = A.Compose([A.RandomCrop(256, 256)])", 1),
        ("UNet", "import albumentations as A\naugment = A.Resize(256, 256)", 1),
        ("YOLOv3", "import torchvision.transforms as T\nresize = T.Resize((416, 416))", 0),  # multi-scale training
        ("SequenceEncoder", "", 1),  # "seq" of a sequence is not segmentation... but the layers say conv
        ("Generator", "", 1),
    ],
)
def test_variable_size_models_by_class_name(name, transforms, expected):
    source = LOCAL_CONV_NET.format(name=name, transforms=transforms)
    assert len(findings(source, "ADV605")) == expected


def test_timm_darknet_classifier_is_still_a_conv_net():
    source = script(
        'model = timm.create_model("cspdarknet53").cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)',
        imports="import torch\nimport timm",
    )
    assert len(findings(source, "ADV605")) == 1


@pytest.mark.parametrize(
    "comment",
    [
        "# cudnn.benchmark = True  # faster convolutions, but more memory",
        "# torch.backends.cudnn.deterministic = True",
        "trainer_flags = {}  # benchmark=False: input sizes vary",
    ],
)
def test_a_cudnn_setting_left_commented_out_is_a_choice(comment):
    source = LOCAL_CONV_NET.format(name="Generator", transforms=comment)
    assert findings(source, "ADV605") == []


@pytest.mark.parametrize(
    "comment",
    [
        "# TODO: look at cudnn.benchmark once the input sizes are fixed",
        "# see https://pytorch.org/docs (torch.backends.cudnn.benchmark) for the autotuner",
        "# Trainer(benchmark=...) is not used here",
    ],
)
def test_a_comment_that_only_mentions_the_cudnn_setting_is_not_a_choice(comment):
    source = LOCAL_CONV_NET.format(name="Generator", transforms=comment)
    assert len(findings(source, "ADV605")) == 1


# -- ADV602: step-by-step decoders over the batch's lengths ---------------------------------------
DECODER = """
import torch
from torch import nn

class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(512, 512)

    def forward(self, features, captions, lengths):
        {bound_setup}
        h = c = features
        for t in range({bound}):
            h, c = self.cell(captions[:, t], (h, c))
        return h

decoder = Decoder().cuda()
optimizer = torch.optim.Adam(decoder.parameters())
for feats, caps, lens in loader:
    decoder(feats.cuda(), caps.cuda(), lens.cuda()).sum().backward()
    optimizer.step()
"""


@pytest.mark.parametrize(
    "bound_setup,bound,expected",
    [
        ("decode_lengths = (lengths - 1).tolist()", "max(decode_lengths)", 0),
        ("steps = lengths.max()", "steps.item()", 0),
        ("n = int(lengths.max())", "n", 0),
        ("steps = 20", "steps", 1),  # a fixed number of steps compiles once
        ("width = self.cell.hidden_size", "int(width)", 1),  # a number of the module, not of the batch
    ],
)
def test_forward_loop_over_the_batchs_lengths(bound_setup, bound, expected):
    source = DECODER.format(bound_setup=bound_setup, bound=bound)
    assert len(findings(source, "ADV602")) == expected


# -- a model handed to a trainer of another module of the project ---------------------------------
TRAINER_MODULE = """
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP


    class TrainLoop:
        def __init__(self, *, model, data, lr):
            self.model = model
            self.data = data
            self.model_params = list(self.model.parameters())
            self.master_params = self.model_params
            self.opt = torch.optim.AdamW(self.master_params, lr=lr)

        def run_loop(self):
            for batch, cond in self.data:
                loss = self.model(batch.cuda()).mean()
                loss.backward()
                self.opt.step()
                self.opt.zero_grad()
"""


def _project(tmp_path, files: dict[str, str]) -> None:
    from advisor.project import forget_projects

    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    forget_projects()


# improved-diffusion's layout, but for its model module: `create_model_and_diffusion` returns the
# model `create_model` builds; scripts/image_train.py names no torch and hands the model to
# `TrainLoop`.
_IMPROVED_DIFFUSION = {
    "pkg/script_util.py": """
        from .unet import UNetModel

        def create_model(channels):
            return UNetModel(channels)

        def create_model_and_diffusion(channels):
            model = create_model(channels)
            diffusion = object()
            return model, diffusion
    """,
    "pkg/train_util.py": TRAINER_MODULE,
    "pkg/dist_util.py": "import torch\n\ndef dev():\n    return torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n",
    "scripts/image_train.py": """
        from pkg import dist_util
        from pkg.script_util import create_model_and_diffusion
        from pkg.train_util import TrainLoop


        def main():
            model, diffusion = create_model_and_diffusion(64)
            model.to(dist_util.dev())
            TrainLoop(model=model, data=load(), lr=1e-4).run_loop()


        if __name__ == "__main__":
            main()
    """,
}


def test_a_model_a_project_factory_builds_and_a_project_trainer_steps(tmp_path):
    # improved-diffusion: scripts/image_train.py names no torch at all; its model comes from
    # `create_model_and_diffusion` (a tuple) of a sibling module and is trained by
    # `TrainLoop(model=model, ...).run_loop()`, whose AdamW steps `self.master_params`.
    _project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/unet.py": "import torch.nn as nn\n\nclass UNetModel(nn.Module):\n    pass\n",
        **_IMPROVED_DIFFUSION,
    })
    script = tmp_path / "scripts/image_train.py"
    found = [d for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code == "ADV602"]
    assert [d.line for d in found] == [8], found
    # The trainer does not step what it is handed: nothing is trained there.
    (tmp_path / "pkg/train_util.py").write_text(textwrap.dedent(TRAINER_MODULE).replace("self.master_params, lr", "[], lr"))
    from advisor.project import forget_projects

    forget_projects()
    assert not [d for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code == "ADV602"]


_DIFFUSION_UNET = """
    import torch as th
    import torch.nn as nn

    from .nn import conv_nd, linear


    class QKVAttention(nn.Module):
        def forward(self, qkv):
            q, k, v = qkv.chunk(3, dim=1)
            return th.einsum("bts,bcs->bct", th.einsum("bct,bcs->bts", q, k).softmax(-1), v)


    class UNetModel(nn.Module):
        def __init__(self, channels, num_classes=None):
            super().__init__()
            self.time_embed = nn.Sequential(linear(channels, 4 * channels), nn.SiLU())
            if num_classes is not None:
                self.label_emb = nn.Embedding(num_classes, 4 * channels)
            self.inp = conv_nd(2, 3, channels, 3, padding=1)
            self.attention = QKVAttention()

        def forward(self, x, timesteps, y=None):
            return self.attention(self.inp(x))
"""


@pytest.mark.parametrize("forward, embedded, expected", [
    ("def forward(self, x, timesteps, y=None):", "num_classes", {"ADV202", "ADV602", "ADV605"}),
    # a segmentation UNet, fed the data set's own image sizes: no single size to tune for
    ("def forward(self, x):", "num_classes", {"ADV202", "ADV602"}),
    # token embeddings: a sequence model, whose input lengths vary
    ("def forward(self, x, timesteps, y=None):", "vocab_size", {"ADV202", "ADV602"}),
])
def test_a_factory_functions_model_is_read_through_the_helpers_of_its_modules(tmp_path, forward, embedded, expected):
    # improved-diffusion: `create_model_and_diffusion` returns the `UNetModel` that
    # `create_model` builds; its layers come from `conv_nd` / `linear` of the package's `nn.py`,
    # its attention is `th.einsum`, and its class-label embedding makes it no sequence model.
    unet = textwrap.dedent(_DIFFUSION_UNET).replace("def forward(self, x, timesteps, y=None):", forward)
    _project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/nn.py": """
            import torch.nn as nn

            def conv_nd(dims, *args, **kwargs):
                if dims == 2:
                    return nn.Conv2d(*args, **kwargs)
                return nn.Conv3d(*args, **kwargs)

            def linear(*args, **kwargs):
                return nn.Linear(*args, **kwargs)
        """,
        "pkg/unet.py": unet.replace("num_classes, 4", f"{embedded}, 4"),
        **_IMPROVED_DIFFUSION,
    })
    script = tmp_path / "scripts/image_train.py"
    found = {d.code for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code in ("ADV202", "ADV602", "ADV605")}
    assert found == expected


def test_a_model_handed_to_a_trainer_class_that_moves_it(tmp_path):
    # minGPT: chargpt.py builds `GPT(config)` and runs `Trainer(config, model, dataset).run()`;
    # the Trainer moves it (`self.model = self.model.to(self.device)`) and steps the optimizer
    # `model.configure_optimizers(...)` returns, with `model, config = self.model, self.config`.
    _project(tmp_path, {
        "mingpt/__init__.py": "",
        "mingpt/model.py": "import torch.nn as nn\n\nclass GPT(nn.Module):\n    pass\n",
        "mingpt/trainer.py": """
            import torch


            class Trainer:
                def __init__(self, config, model, train_dataset):
                    self.config = config
                    self.model = model
                    self.device = 'cuda' if torch.cuda.is_available() else 'cpu'
                    self.model = self.model.to(self.device)

                def run(self):
                    model, config = self.model, self.config
                    self.optimizer = model.configure_optimizers(config)
                    while True:
                        logits, loss = model(self.x, self.y)
                        model.zero_grad(set_to_none=True)
                        loss.backward()
                        self.optimizer.step()
        """,
        "chargpt.py": """
            import torch
            from mingpt.model import GPT
            from mingpt.trainer import Trainer

            if __name__ == '__main__':
                model = GPT(config.model)
                trainer = Trainer(config.trainer, model, train_dataset)
                trainer.run()
        """,
    })
    script = tmp_path / "chargpt.py"
    found = [d for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code == "ADV602"]
    assert [d.line for d in found] == [7], found
    assert "model.compile()" in found[0].message


def test_a_factory_built_conv_net_needs_no_transforms_in_the_file(tmp_path):
    # MSTAR, MonoDepth-PyTorch: the model comes from a factory of another module whose class
    # builds its own convolutions: a conv net, as the same class built in the file is.
    _project(tmp_path, {
        "networks.py": "import torch.nn as nn\n\nclass ConvNet(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.conv = nn.Conv2d(3, 8, 3)\n",
        "utils.py": "from networks import ConvNet\n\ndef get_network(name):\n    return ConvNet()\n",
        "train.py": """
            import torch
            from utils import get_network

            net = get_network("ConvNet").cuda()
            optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
            for x, y in loader:
                net(x.cuda()).sum().backward()
                optimizer.step()
        """,
    })
    script = tmp_path / "train.py"
    assert [d.code for d in lint(script.read_text(), gpu="A100", path=str(script)) if d.code == "ADV605"] == ["ADV605"]
