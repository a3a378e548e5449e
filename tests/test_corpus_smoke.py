"""The CI slice of bench/robustness/run.py: real library code, through the real command line.

A fixed selection of files from the installed torch, transformers and accelerate (the test
extra installs them), chosen because advisor's rules have something to say there (training
scripts, trainers, optimizers, data loaders, attention, mixed precision), is copied to a
temporary folder and put through ``advisor check``, ``advisor fix --unsafe-fixes`` and a
second ``advisor fix --unsafe-fixes --diff``, with the full run's assertions: no crash, errors
only for files Python cannot compile, every fixed file compiles and reads no undefined name,
no fix dropped, the second fix changes nothing, every fix loop converged.
The full corpus (about 5,200 files) is ``python bench/robustness/run.py`` (docs/robustness.md).
"""
from __future__ import annotations

import gc
import importlib.util
import sys
import weakref
from pathlib import Path

import pytest
from helpers import settings

from advisor.engine import done_with, parse, run_rules

ROBUSTNESS = Path(__file__).resolve().parent.parent / "bench" / "robustness" / "run.py"


def _load_runner():
    spec = importlib.util.spec_from_file_location("robustness_run", ROBUSTNESS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


runner = _load_runner()

# Relative to each package. Files a future release moves are skipped; most must be there.
SELECTION = {
    "accelerate": [
        "accelerator.py",
        "data_loader.py",
        "optimizer.py",
        "test_utils/scripts/test_script.py",
        "test_utils/scripts/test_sync.py",
        "test_utils/scripts/test_distributed_data_loop.py",
        "test_utils/scripts/external_deps/test_metrics.py",
        "test_utils/scripts/external_deps/test_performance.py",
        "test_utils/scripts/external_deps/test_checkpointing.py",
        "test_utils/scripts/external_deps/test_zero3_integration.py",
        "utils/modeling.py",
        "utils/operations.py",
    ],
    "transformers": [
        "training_args.py",
        "trainer_pt_utils.py",
        "optimization.py",
        "data/data_collator.py",
        "modeling_rope_utils.py",
        "pytorch_utils.py",
        "pipelines/base.py",
        "models/gpt2/modeling_gpt2.py",
        "models/llama/modeling_llama.py",
        "models/levit/modeling_levit.py",
        "models/mobilevit/modeling_mobilevit.py",
        "models/clvp/modeling_clvp.py",
    ],
    "torch": [
        "optim/adamw.py",
        "optim/optimizer.py",
        "optim/lr_scheduler.py",
        "amp/grad_scaler.py",
        "amp/autocast_mode.py",
        "cuda/amp/grad_scaler.py",
        "utils/data/dataloader.py",
        "utils/data/dataset.py",
        "utils/checkpoint.py",
        "nn/utils/clip_grad.py",
        "nn/modules/activation.py",
        "nn/parallel/distributed.py",
        "testing/_internal/common_quantization.py",
        "testing/_internal/distributed/fake_pg.py",
    ],
}


def _smoke_corpus():
    sources = {}
    for package, files in SELECTION.items():
        root = runner.package_root(package)
        present = [f for f in files if (root / f).is_file()]
        assert len(present) >= len(files) // 2, f"{package} moved most of the smoke files: {sorted(set(files) - set(present))}"
        sources.update({f"{package}/{f}": root / f for f in present})
    return runner.Corpus("packages", sources)


def test_real_library_files_check_and_fix_cleanly(tmp_path):
    figures = runner.run_corpus(_smoke_corpus(), tmp_path, log=lambda message: None)
    assert figures.violations() == []
    # The selection must keep exercising the rules and the fixer, or it proves nothing. (Three
    # files: the compile and worker fixes, which changed a fifth, are measured fixes that only
    # ``fix --verify`` applies; a fourth's loader has no workers, so pinning it is advice.)
    assert figures.findings >= 20 and figures.fixes_applied >= 10 and figures.files_changed >= 3, runner.tables([figures])
    assert len(figures.findings_by_code) >= 5, figures.findings_by_code


def test_a_file_python_cannot_compile_is_the_only_error_allowed(tmp_path):
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / "broken.py").write_text("import torch\ndef f(:\n    pass\n")
    (sources / "train.py").write_text("import torch\n\nscaler = torch.cuda.amp.GradScaler()\n")
    corpus = runner.Corpus("tree", {p.name: p for p in sources.iterdir()})
    figures = runner.run_corpus(corpus, tmp_path / "work", log=lambda message: None)
    assert figures.uncompilable == ["broken.py"]
    assert len(figures.errors) == 1 and "broken.py" in figures.errors[0]
    assert figures.violations() == []
    assert figures.fixes_applied >= 1 and figures.files_changed == 1


def test_undefined_names_sees_a_name_a_fix_would_need_to_import():
    before = "import torch\nx = torch.zeros(3)\n"
    after = "import torch\nx = torch.zeros(3)\ny = np.ones(3)\n"
    assert runner.undefined_names(after) - runner.undefined_names(before) == {"np"}
    nested = "def f():\n    global g\n    g = 1\n\nclass C:\n    def m(self):\n        return g, len, __name__, helper\n"
    assert runner.undefined_names(nested) == {"helper"}


@pytest.mark.parametrize("path", [
    Path(__file__).resolve().parent.parent / "fixtures" / "plain_pytorch.py",
    Path(__file__).resolve().parent.parent / "fixtures" / "hf_no_trainer.py",
])
def test_no_file_context_outlives_its_check(path):
    """At scale a worker checks thousands of files: one file's tree must not stay in memory.

    Rules used to cache per-file facts in module-level WeakKeyDictionaries whose values held
    the context, so no context was ever freed (about 3 MB per transformers file)."""
    ctx = parse(path.name, path.read_bytes(), settings().target)
    findings, errors = run_rules(ctx, settings().codes)
    assert findings and not errors
    alive = weakref.ref(ctx)
    del ctx, findings
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("path", [
    Path(__file__).resolve().parent.parent / "fixtures" / "plain_pytorch.py",
    Path(__file__).resolve().parent.parent / "fixtures" / "hf_no_trainer.py",
])
def test_a_checked_context_is_freed_without_the_cycle_collector(path):
    """Facts derived from a tree point back at its context: left to the cycle collector, every
    collection until then walks the whole tree again (a sixth of a cold check of library
    code). Once the engine is done with a context, dropping the last reference frees it."""
    ctx = parse(path.name, path.read_bytes(), settings().target)
    findings, errors = run_rules(ctx, settings().codes)
    assert findings and not errors
    done_with(ctx)
    alive = weakref.ref(ctx)
    gc.disable()
    try:
        del ctx, findings
        assert alive() is None
    finally:
        gc.enable()
