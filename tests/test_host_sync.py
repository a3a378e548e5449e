"""ADV701-ADV706 beyond their own examples: what runs every step, which tensors are on the
GPU, and the shapes of their fixes."""
from __future__ import annotations

import textwrap

import pytest

from helpers import fix, lint


def findings(source: str, code: str):
    return [d for d in lint(source, codes=[code]) if d.code == code]


def fixed(source: str, code: str, unsafe: bool = False) -> str:
    return fix(source, codes=[code], unsafe=unsafe).fixed.decode()


# -- ADV701 -----------------------------------------------------------------------------------
LOOP = """
    import torch
    model = Net().to("cuda")
    for step, (x, y) in enumerate(loader):
        x, y = x.to("cuda"), y.to("cuda")
        outputs = model(x)
        loss = criterion(outputs, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        {line}
"""


@pytest.mark.parametrize(
    "line",
    [
        "total += loss.item()",
        "history.append(loss.detach().cpu())",
        "print(loss)",
        "print(f'{loss:.4f}')",
        "print('%.4f' % loss)",
        "print('{:.4f}'.format(loss))",
        "value = float(loss)",
        "preds = outputs.argmax(1).tolist()",
        "correct += (outputs.argmax(1) == y).sum().item()",
        "if torch.isnan(loss): print('NaN loss')",  # warns, and goes on: a read for a message
        "if loss.item() > 1e4: break",  # not a finiteness check
        "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()",
        "if rank == 0: print(loss.item())",
        "log = {'loss': loss.to('cpu')}",
        # a model's loss breakdown, read part by part
        "for k, v in outputs.items(): logs[k] = v.item()",
        "logs = {k: v.item() for k, v in outputs._asdict().items()}",
        "logs = [v.item() for v in outputs.values()]",
    ],
)
def test_read_backs_every_step_are_reported(line):
    (finding,) = findings(LOOP.format(line=line), "ADV701")
    assert "every training step" in finding.message
    assert finding.message.endswith("(guide: Avoid unnecessary CPU-GPU synchronization)")


@pytest.mark.parametrize(
    "line",
    [
        "total += loss.detach()",
        "if step % 100 == 0: print(loss.item())",
        "if args.verbose: print(loss.item())",
        "value = 0.0 if skip else loss.item()",
        "sizes.append(x.size(0))",
        "print(x.shape, loss.dtype, model)",
        "lr = scheduler.get_last_lr()[0]",
        "count = torch.tensor(3).item()",
        "stats = summarize(outputs).item()",
        # Guards that stop on a NaN / infinite loss: the read is their purpose.
        "if torch.isnan(loss): break",
        "assert not torch.isnan(loss)",
        "if not torch.isfinite(loss).all(): raise RuntimeError('diverged')",
        "if loss.detach().isnan(): continue",
        "if not math.isfinite(loss.item()): sys.exit(1)",
        "for k, v in config.items(): print(v)",
        "for k, v in outputs.items(): names.append(k)",
    ],
)
def test_no_read_back_or_not_every_step_is_silent(line):
    assert findings(LOOP.format(line=line), "ADV701") == []


def test_one_finding_per_statement():
    source = LOOP.format(line="print(loss.item(), outputs.mean().item())")
    (finding,) = findings(source, "ADV701")
    assert finding.message.startswith("`loss.item()`")


def test_accumulation_gets_the_accumulate_on_device_advice():
    (finding,) = findings(LOOP.format(line="running += loss.item()"), "ADV701")
    assert "accumulate on the device (`total += loss.detach()`)" in finding.message
    (finding,) = findings(LOOP.format(line="print(loss.item())"), "ADV701")
    assert "every N steps" in finding.message


def test_read_back_before_the_loss_is_rescaled():
    source = """
        import torch
        model = Net().cuda()
        for step, batch in enumerate(loader):
            loss = model(**{k: v.cuda() for k, v in batch.items()}).loss
            loss_value = loss.item()
            loss = loss / accumulation_steps
            loss.backward()
            if (step + 1) % accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        """
    (finding,) = findings(source, "ADV701")
    assert finding.message.startswith("`loss.item()`")


def test_helper_called_every_step_and_returned_loss():
    source = """
        import torch

        def train_step(model, batch, optimizer):
            loss = model(batch.cuda()).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            return loss

        def log_loss(loss):
            print(loss.item())

        model = Net().cuda()
        for batch in loader:
            loss = train_step(model, batch, optimizer)
            total += loss.item()
            log_loss(loss)
        """
    (finding,) = findings(source, "ADV701")  # ``log_loss``'s parameter is not known to be a CUDA tensor
    assert finding.message.startswith("`loss.item()`") and "accumulate on the device" in finding.message


def test_timm_loss_scaler_loop_is_a_training_step():
    source = """
        import torch

        def train_one_epoch(model, criterion, data_loader, optimizer, device, loss_scaler):
            for samples, targets in data_loader:
                samples = samples.to(device, non_blocking=True)
                with torch.cuda.amp.autocast():
                    loss = criterion(model(samples), targets.to(device))
                loss_value = loss.item()
                optimizer.zero_grad()
                loss_scaler(loss, optimizer, parameters=model.parameters())
        """
    (finding,) = findings(source, "ADV701")
    assert finding.message.startswith("`loss.item()`")


def test_epoch_level_and_evaluation_code_is_silent():
    source = """
        import torch
        model = Net().cuda()

        def validate(model):
            model.eval()
            for x, y in val_loader:
                loss = criterion(model(x.cuda()), y.cuda())
                print(loss.item())

        for epoch in range(3):
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                validate(model)
            print(loss.item())
        """
    assert findings(source, "ADV701") == []


def test_fabric_loop_and_lightning_hook():
    fabric = """
        import lightning as L
        fabric = L.Fabric(accelerator="cuda")
        model, optimizer = fabric.setup(model, optimizer)
        for batch in loader:
            loss = model(batch)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        """
    assert len(findings(fabric, "ADV701")) == 1


def test_no_fix_is_offered():
    source = LOOP.format(line="total += loss.item()")
    assert fixed(source, "ADV701", unsafe=True) == textwrap.dedent(source)


def test_one_finding_per_step_lists_the_other_reads():
    source = """
        import torch

        def clip():
            print(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())

        model = Net().cuda()
        for x, y in loader:
            outputs = model(x.cuda())
            loss = criterion(outputs, y.cuda())
            total += loss.item()
            print(f"{loss.item():.3f}")
            loss.backward()
            clip()
            optimizer.step()
            optimizer.zero_grad()
        """
    (finding,) = findings(source, "ADV701")
    assert finding.line == 11 and finding.message.startswith("`loss.item()`")
    assert "(and 2 more reads in this step: lines 12, 5);" in finding.message  # in the order they run
    assert "accumulate on the device" in finding.message  # the advice of the first read
    single = LOOP.format(line="print(loss.item(), outputs.mean().item())")
    assert "more read" not in findings(single, "ADV701")[0].message  # one statement, one read


def test_each_training_loop_gets_its_own_finding():
    source = """
        import torch
        model = Net().cuda()
        for x, y in loader:
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            total += loss.item()
        for x, y in other_loader:
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            total += loss.item()
        """
    assert [f.line for f in findings(source, "ADV701")] == [9, 15]


NAN_GUARD = """
    import math
    import sys
    import torch
    model = Net().cuda()
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        {read}
        if not math.isfinite(loss_value):
            {stop}
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


@pytest.mark.parametrize("stop", ["sys.exit(1)", "raise ValueError(loss_value)", "break", "continue", "exit(1)"])
def test_guard_that_stops_on_a_nan_loss_is_silent(stop):
    source = NAN_GUARD.format(read="loss_value = loss.item()", stop=stop)
    assert findings(source, "ADV701") == []


@pytest.mark.parametrize(
    "read, stop",
    [
        ("loss_value = loss.item()", "print('NaN')"),  # goes on: the read only feeds a message
        ("loss_value = loss.item() + 0 * loss.mean().item()", "print('NaN')"),
        ("loss_value = 0.0\n        total += loss.item()", "sys.exit(1)"),  # the guard checks something else
    ],
)
def test_reads_that_do_not_feed_a_stopping_guard_are_reported(read, stop):
    source = NAN_GUARD.format(read=read, stop=stop)
    assert len(findings(source, "ADV701")) == 1


def test_nan_guard_is_left_out_of_the_reads_listed():
    source = NAN_GUARD.format(read="loss_value = loss.item()", stop="sys.exit(1)").replace(
        "optimizer.zero_grad()", "optimizer.zero_grad()\n        log(loss.item())"
    )
    (finding,) = findings(source, "ADV701")
    assert finding.line == 14 and "more read" not in finding.message


ACCUMULATION = """
    import torch
    model = Net().cuda()
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda()), y.cuda()) / accum_steps
        loss.backward()
        if {guard}:
            {line}
            optimizer.step()
            optimizer.zero_grad()
        else:
            {other}
"""


@pytest.mark.parametrize(
    "line, other",
    [
        ("norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()", "pass"),
        ("print(loss.item())", "pass"),
        ("pass", "print(loss.item())"),  # not on the optimizer step's branch
        ("if i % 100 == 0: print(loss.item())", "pass"),  # a logging interval inside the boundary
    ],
)
def test_reads_on_the_optimizer_step_branch_run_every_step(line, other):
    source = ACCUMULATION.format(guard="(i + 1) % accum_steps == 0", line=line, other=other)
    expected = 1 if other == "pass" and not line.startswith(("if", "pass")) else 0
    assert len(findings(source, "ADV701")) == expected


def test_step_in_both_branches_makes_both_every_step():
    source = """
        import torch
        model = Net().cuda()
        for x, y in loader:
            loss = criterion(model(x.cuda()), y.cuda())
            if scaler is None:
                loss.backward()
                optimizer.step()
                print(loss.item())
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                print(loss.item())
        """
    (finding,) = findings(source, "ADV701")
    assert "(and 1 more read in this step: line 14)" in finding.message


def test_branch_stepping_one_of_two_optimizers_is_not_every_step():
    source = """
        import torch
        netG, netD = G().cuda(), D().cuda()
        for i, (real, _) in enumerate(loader):
            loss_d = criterion(netD(real.cuda()), ones)
            loss_d.backward()
            optimizer_d.step()
            optimizer_d.zero_grad()
            if i % n_critic == 0:
                loss_g = criterion(netD(netG(noise)), ones)
                loss_g.backward()
                optimizer_g.step()
                optimizer_g.zero_grad()
                print(loss_g.item())
        """
    assert findings(source, "ADV701") == []


@pytest.mark.parametrize(
    "loop",
    [
        "for p in model.parameters():\n        norms.append(p.grad.norm().item())",
        "for name, p in model.named_parameters():\n        norms[name] = p.grad.norm().item()",
        (
            "for p in list(filter(lambda p: p.grad is not None, model.parameters())):\n"
            "        norms.append(p.grad.data.norm(2).item())"
        ),
    ],
)
def test_parameters_of_a_gpu_model_are_cuda_tensors(loop):
    source = f"""
import torch
model = Net().cuda()
for x, y in loader:
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    {loop}
    optimizer.step()
    optimizer.zero_grad()
"""
    assert len(findings(source, "ADV701")) == 1
    cpu_model = source.replace("Net().cuda()", "Net()").replace("x.cuda()", "x").replace("y.cuda()", "y")
    assert findings(cpu_model, "ADV701") == []


def test_elements_unpacked_from_model_outputs():
    source = LOOP.format(line="loss2, logits = outputs[:2]\n        preds = logits.detach().cpu().numpy()")
    assert len(findings(source, "ADV701")) == 1
    source = LOOP.format(line="first, second = outputs\n        keep = second.cpu()")
    assert len(findings(source, "ADV701")) == 1
    source = LOOP.format(line="h, w = x.shape\n        print(h.item())")  # sizes are host values
    assert findings(source, "ADV701") == []


@pytest.mark.parametrize("backend, reported", [('"nccl"', True), ('backend="nccl"', True), ('"gloo"', False)])
def test_nccl_process_group_shows_the_gpu(backend, reported):
    source = f"""
        import os
        import torch
        import torch.distributed as dist

        def train(model, loader, optimizer):
            dist.init_process_group({backend})
            dev = launcher.current_device()
            for batch in loader:
                batch = {{k: v.to(dev) for k, v in batch.items()}}
                loss = model(**batch)["loss"]
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                totals[0] += loss.item()
        """
    assert len(findings(source, "ADV701")) == int(reported)


@pytest.mark.parametrize("backend", ['"nccl"', '"gloo"'])
def test_a_local_rank_index_is_a_cuda_device_whatever_the_backend(backend):
    # ``.to(int(os.environ["LOCAL_RANK"]))`` moves to ``cuda:<rank>``; the backend does not change that.
    source = f"""
        import os
        import torch
        import torch.distributed as dist

        def train(model, loader, optimizer):
            dist.init_process_group({backend})
            local_rank = int(os.environ["LOCAL_RANK"])
            for batch in loader:
                batch = {{k: v.to(local_rank) for k, v in batch.items()}}
                loss = model(**batch)["loss"]
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                totals[0] += loss.item()
        """
    assert len(findings(source, "ADV701")) == 1


# -- ADV706 -----------------------------------------------------------------------------------
def test_synchronize_spellings():
    source = """
        import torch
        from torch.cuda import synchronize
        for x in loader:
            model(x.cuda()).sum().backward()
            optimizer.step()
            synchronize()
            torch.cuda.current_stream().synchronize()
            if args.profile:
                torch.cuda.synchronize()
        """
    assert len(findings(source, "ADV706")) == 2


def test_synchronize_message_mentions_timing_only_when_timing():
    timed = """
        import time, torch
        for x in loader:
            model(x.cuda()).sum().backward()
            optimizer.step()
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
        """
    (finding,) = findings(timed, "ADV706")
    assert "torch.cuda.Event(enable_timing=True)" in finding.message


def test_synchronize_on_the_optimizer_step_branch_runs_every_step():
    source = ACCUMULATION.format(
        guard="(i + 1) % accum_steps == 0", line="torch.cuda.synchronize()", other="torch.cuda.synchronize()"
    )
    (finding,) = findings(source, "ADV706")
    assert finding.line == 8  # the ``else`` branch does not step


# -- ADV702 -----------------------------------------------------------------------------------
TRAINS = """
    loss.backward()
    optimizer.step()
"""


def test_anomaly_switch_removed_keeps_the_block_valid():
    source = "import torch\n\ndef main():\n    torch.autograd.set_detect_anomaly(True)\n" + textwrap.dedent(TRAINS)
    result = fixed(source, "ADV702")
    assert "set_detect_anomaly" not in result
    assert "def main():\n    pass\n" in result
    compile(result, "fixed.py", "exec")


def test_anomaly_with_on_one_line():
    source = "import torch\nwith torch.autograd.detect_anomaly(): train(model)\n" + textwrap.dedent(TRAINS)
    assert fixed(source, "ADV702").startswith("import torch\ntrain(model)\n")


def test_anomaly_with_header_comment_is_kept():
    source = (
        "import torch\n"
        "with torch.autograd.detect_anomaly():  # hunting NaNs\n"
        "    train(model)\n" + textwrap.dedent(TRAINS)
    )
    assert fixed(source, "ADV702").startswith("import torch\n# hunting NaNs\ntrain(model)\n")


@pytest.mark.parametrize(
    "switch",
    [
        "torch.autograd.set_detect_anomaly(True) if args.debug else None",
        "torch.autograd.set_detect_anomaly(mode=False)",
        "torch.autograd.set_detect_anomaly(args.detect_anomaly)",
    ],
)
def test_anomaly_switches_that_are_silent(switch):
    assert findings(f"import torch\n{switch}\n" + textwrap.dedent(TRAINS), "ADV702") == []


def test_anomaly_from_argparse_default_true_is_advice_only():
    source = """
        import argparse
        import torch
        parser = argparse.ArgumentParser()
        parser.add_argument("--detect-anomaly", type=bool, default=True)
        args = parser.parse_args()
        torch.autograd.set_detect_anomaly(args.detect_anomaly)
        loss.backward()
        optimizer.step()
        """
    (finding,) = findings(source, "ADV702")
    assert "(`args.detect_anomaly` is true)" in finding.message
    assert fixed(source, "ADV702", unsafe=True) == textwrap.dedent(source)


# -- ADV704 -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "before,after",
    [
        ("torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")'),
        ("torch.zeros(3).cuda(device=GPU)", "torch.zeros(3, device=GPU)"),
        ("torch.ones(3, dtype=torch.long).to(device)", "torch.ones(3, dtype=torch.long, device=device)"),
        ("torch.arange(n).to(x.device, non_blocking=True)", "torch.arange(n, device=x.device)"),
        ("torch.zeros(3).to(device=device, dtype=torch.half)", "torch.zeros(3, device=device, dtype=torch.half)"),
        (
            "torch.full((3,), 0.1, dtype=torch.float32).to(device, torch.half)",
            "torch.full((3,), 0.1, dtype=torch.float32, device=device).to(torch.half)",
        ),
    ],
)
def test_host_alloc_safe_fixes(before, after):
    source = f"import torch\nGPU = 1\ndevice = torch.device('cuda')\nfor x in batches:\n    t = {before}\n"
    (finding,) = findings(source, "ADV704")
    assert finding.message.endswith("(guide: Create tensors directly on the target device)")
    assert f"    t = {after}\n" in fixed(source, "ADV704")


def test_exact_factories_made_once_are_advice():
    """A module's ``__init__`` (LLaMA's KV cache), a script's top level outside any loop: one
    copy saved would not show in a run. A function that may run every step keeps the fix,
    loop or not: a model's helper is called from a ``forward`` that may live in another file."""
    init = (
        "import torch\n\nclass Attention(torch.nn.Module):\n    def __init__(self, n, d):\n"
        "        super().__init__()\n        self.cache_k = torch.zeros(n, d).cuda()\n"
    )
    (finding,) = findings(init, "ADV704")
    assert finding.fix_applicability is None and "it runs once" in finding.message
    top = "import torch\ndummy = torch.ones(1, 3, 224, 224).cuda()\nmodel(dummy)\n"
    (finding,) = findings(top, "ADV704")
    assert finding.fix_applicability is None
    helper = (
        "import torch\n\nclass RNN(torch.nn.Module):\n    def init_state(self, batch, device):\n"
        "        return torch.zeros(1, batch, self.hidden).to(device)\n"
    )
    assert "torch.zeros(1, batch, self.hidden, device=device)" in fixed(helper, "ADV704")
    plain = "import torch\n\nclass ProbMask:\n    def __init__(self, L, device):\n        self.mask = torch.ones(L, L).to(device)\n"
    assert "torch.ones(L, L, device=device)" in fixed(plain, "ADV704")


def test_exact_factories_under_a_lazy_initialisation_are_advice():
    """An optimizer's ``if len(state) == 0:`` (Novograd), a flag a method sets (H2GCN's
    ``if not self.initialized:`` in ``forward``), a cache filled under ``if key not in
    self.cache:``: each runs once however often its function does."""
    optimizer = (
        "import torch\n\nclass Novograd(torch.optim.Optimizer):\n    def step(self):\n"
        "        for p in self.params:\n            state = self.state[p]\n            if len(state) == 0:\n"
        "                state['exp_avg_sq'] = torch.zeros([]).to(p.device)\n"
        "            state['exp_avg_sq'].add_(p.grad.norm())\n"
    )
    (finding,) = findings(optimizer, "ADV704")
    assert finding.fix_applicability is None
    flag = (
        "import torch\n\nclass H2GCN(torch.nn.Module):\n"
        "    def _prepare(self, n, device):\n        self.initialized = True\n"
        "        self.eye = torch.eye(n).to(device)\n"
        "    def forward(self, x):\n        if not self.initialized:\n            self._prepare(x.size(0), x.device)\n"
        "        return x @ self.eye\n\nH2GCN().cuda()\n"
    )
    (finding,) = findings(flag, "ADV704")
    assert finding.fix_applicability is None
    cache = (
        "import torch\n\nclass Rope(torch.nn.Module):\n    def forward(self, x, device):\n"
        "        if x.size(1) not in self.cache:\n"
        "            self.cache[x.size(1)] = torch.arange(x.size(1)).to(device)\n"
        "        return self.cache[x.size(1)]\n"
    )
    (finding,) = findings(cache, "ADV704")
    assert finding.fix_applicability is None
    every_call = cache.replace("        if x.size(1) not in self.cache:\n    ", "")
    assert "torch.arange(x.size(1), device=device)" in fixed(every_call, "ADV704")


def test_host_alloc_to_an_unknown_gpu_index_has_no_fix():
    source = "import torch\nt = torch.zeros(3).cuda(args.gpu)\n"
    assert len(findings(source, "ADV704")) == 1
    assert fixed(source, "ADV704", unsafe=True) == source


def test_host_alloc_silent_in_cpu_only_script():
    source = """
        import torch
        device = "cpu"
        if __name__ == "__main__":
            t = torch.zeros(3).to(device)
            u = torch.zeros(3).to(dev)
        """
    assert findings(source, "ADV704") == []


def test_host_alloc_to_the_local_rank_of_an_nccl_script():
    source = """
        import os
        import torch
        import torch.distributed as dist

        def train(model, loader, optimizer):
            local_rank = int(os.environ["LOCAL_RANK"])
            for batch in loader:
                totals = torch.zeros(2).to(local_rank)
                loss = model(batch.to(local_rank))
                loss.backward()
                optimizer.step()

        if __name__ == "__main__":
            dist.init_process_group("nccl")
            train(model, loader, optimizer)
        """
    assert "totals = torch.zeros(2, device=local_rank)" in fixed(source, "ADV704")
    # Before the loop, in a function the script calls once: one copy per run, advice.
    once = source.replace("            for batch in loader:\n                totals = torch.zeros(2).to(local_rank)\n",
                          "            totals = torch.zeros(2).to(local_rank)\n            for batch in loader:\n")
    (finding,) = findings(once, "ADV704")
    assert finding.fix_applicability is None and "it runs once" in finding.message
    # A device read at run time is a GPU only when NCCL vouches for it; ``int(os.environ["LOCAL_RANK"])``
    # is a CUDA index whatever the backend.
    unknown_rank = source.replace('int(os.environ["LOCAL_RANK"])', "launcher.current_device()").replace("local_rank", "dev")
    assert findings(unknown_rank, "ADV704") != []
    assert findings(unknown_rank.replace('"nccl"', '"gloo"'), "ADV704") == []


def test_dummy_input_of_a_flops_counter_is_advice():
    # thop's ``profile`` (vendored by RLNAS and proxylessnas): hooks on every layer, one input.
    source = """
        import torch

        def profile(model, input_size, device="cuda"):
            def add_hooks(m):
                m.register_forward_hook(count_ops)
            model.eval().to(device)
            model.apply(add_hooks)
            x = torch.zeros(input_size).to(device)
            with torch.no_grad():
                model(x)
            return sum(m.total_ops for m in model.modules())

        model = Net().cuda()
        for x, y in loader:
            loss = criterion(model(x.cuda()), y.cuda())
        """
    (finding,) = findings(source, "ADV704")
    assert finding.fix_applicability is None
    assert fix(source.replace("m.register_forward_hook(count_ops)", "pass"), ["ADV704"]).applied


# -- ADV705 -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "wrapper",
    [
        "with torch.inference_mode():",
        "with torch.set_grad_enabled(False):",
        "with torch.autocast('cuda'), torch.no_grad():",
    ],
)
def test_eval_loop_under_other_grad_switches_is_silent(wrapper):
    source = f"""
        import torch
        model.eval()
        {wrapper}
            for x in loader:
                model(x)
        """
    assert findings(source, "ADV705") == []


def test_eval_method_called_under_no_grad_is_silent():
    source = """
        import torch

        class Runner:
            def evaluate(self):
                self.model.eval()
                for x in self.loader:
                    self.model(x)

            def fit(self):
                with torch.no_grad():
                    self.evaluate()
        """
    assert findings(source, "ADV705") == []


def test_eval_loop_that_calls_a_function_it_is_given_is_silent():
    # Torch-Pruning's measure_latency: `run_fn(model, inputs)` may run a backward (its own test does).
    source = """
        import torch

        from transformers import AutoModelForSequenceClassification

        class Trainer:
            def validate(self, run_fn):
                self.model.eval()
                for batch in self.val_loader:
                    outputs = self.model(**batch)
                    run_fn(self.model, batch)
        """
    assert findings(source, "ADV705") == []
    assert findings(source.replace("run_fn(self.model, batch)", "pass"), "ADV705") != []


def test_eval_silent_when_grad_globally_off_or_only_generate():
    off = """
        import torch
        torch.set_grad_enabled(False)
        model.eval()
        for x in loader:
            model(x)
        """
    generate = """
        import torch
        model.eval()
        for batch in loader:
            outputs = model.generate(**batch)
        """
    assert findings(off, "ADV705") == []
    assert findings(generate, "ADV705") == []


def test_eval_loop_with_a_backward_after_it_is_reported_without_a_fix():
    source = """
        import torch
        model.eval()
        outputs = []
        for x in loader:
            outputs.append(model(x))
        torch.stack(outputs).sum().backward()
        """
    (finding,) = findings(source, "ADV705")
    assert fixed(source, "ADV705") == textwrap.dedent(source)


def test_eval_fix_wraps_a_loop_at_module_level():
    source = "import torch\nmodel.eval()\n# score\nfor x in loader:\n    scores.append(model(x))\n"
    assert fixed(source, "ADV705") == (
        "import torch\nmodel.eval()\n# score\n"
        "with torch.no_grad():\n    for x in loader:\n        scores.append(model(x))\n"
    )


@pytest.mark.parametrize("volatile, reported", [("True", False), ("evaluation", False), ("False", True)])
def test_eval_with_pre_0_4_volatile_variables(volatile, reported):
    source = f"""
        import torch
        from torch.autograd import Variable

        def get_batch(x, evaluation=False):
            return Variable(x, volatile={volatile})

        model.eval()
        for x in loader:
            scores.append(model(get_batch(x, evaluation=True)))
        """
    assert len(findings(source, "ADV705")) == int(reported)


# -- ADV703 -----------------------------------------------------------------------------------
def test_tensor_copy_of_torch_results_in_a_loop():
    source = """
        import torch
        for chunk in chunks:
            t = torch.stack(chunk).float()
            u = torch.tensor(t)
            v = torch.tensor(t, requires_grad=True)
        """
    found = findings(source, "ADV703")
    assert len(found) == 2
    result = fixed(source, "ADV703")
    assert "u = t.detach().clone()\n" in result
    assert "v = torch.tensor(t, requires_grad=True)\n" in result  # no fix: the flag must stay


def test_tensor_copy_silent_for_unknown_batches():
    source = """
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(dataset, batch_size=4)
        for x, y in loader:
            y = torch.tensor(y)
        for batch in DataLoader(TensorDataset(a, b)):
            batch = torch.tensor(batch)
        """
    assert findings(source, "ADV703") == []


@pytest.mark.parametrize(
    "guard,reported",
    [
        ("if torch.cuda.is_available():", True),
        ("if device.type == 'cuda':", True),
        ("if accelerator.is_main_process:", True),
        ("if rank == 0 and step % 10 == 0:", False),
        ("if args.timing:", False),
    ],
)
def test_guards_that_hold_every_step_on_a_gpu(guard, reported):
    source = f"""
        import torch
        for step, x in enumerate(loader):
            model(x.cuda()).sum().backward()
            optimizer.step()
            {guard}
                torch.cuda.synchronize()
        """
    assert len(findings(source, "ADV706")) == int(reported)


def test_else_branch_of_a_main_process_test_is_not_every_step():
    source = """
        import torch
        for step, x in enumerate(loader):
            model(x.cuda()).sum().backward()
            optimizer.step()
            if rank == 0:
                pass
            else:
                torch.cuda.synchronize()
        """
    assert findings(source, "ADV706") == []


def test_batches_of_a_fabric_prepared_loader_drawn_with_next_are_on_the_gpu():
    """litgpt's finetune loop: the loaders come prepared from a helper, the batch is drawn with
    ``next()`` from a ``CycleIterator`` over a parameter, and its token counts are read back."""
    source = textwrap.dedent(
        """
        import torch
        import lightning as L
        from litgpt.utils import CycleIterator

        def main(devices):
            fabric = L.Fabric(devices=devices, precision="bf16-true")
            model = fabric.setup(GPT(config))
            optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), fused=True))
            train_dataloader, val_dataloader = get_dataloaders(fabric, data)
            fit(fabric, model, optimizer, train_dataloader=train_dataloader)

        def fit(fabric, model, optimizer, train_dataloader):
            train_iterator = CycleIterator(train_dataloader)
            tokens = 0
            for step in range(1000):
                batch = next(train_iterator)
                loss = model(batch["input_ids"]).mean()
                fabric.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                tokens += batch["token_counts"].sum().item()

        def get_dataloaders(fabric, data):
            train_dataloader = data.train_dataloader()
            val_dataloader = data.val_dataloader()
            train_dataloader, val_dataloader = fabric.setup_dataloaders(train_dataloader, val_dataloader)
            return train_dataloader, val_dataloader
        """
    )
    assert [(d.code, d.line) for d in lint(source, codes=["ADV701"])] == [("ADV701", 22)]
    unprepared = source.replace(
        "train_dataloader, val_dataloader = fabric.setup_dataloaders(train_dataloader, val_dataloader)", "pass"
    )
    assert lint(unprepared, codes=["ADV701"]) == []


def test_a_device_every_caller_leaves_none_moves_nothing():
    """GaLore's LlamaRotaryEmbedding(dim, ..., device=None), built by the attention layer of the
    same file without a device: `.to(device)` is `.to(None)`. A caller that passes one, or a
    subclass that may, keeps the finding."""
    source = (
        "import torch\nfrom torch import nn\n\nclass Rotary(nn.Module):\n"
        "    def __init__(self, dim, base=10000, device=None):\n        super().__init__()\n"
        "        self.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float().to(device) / dim))\n\n"
        "class Attention(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        "        self.rotary = Rotary(dim)\n\nmodel = Attention(64).cuda()\n"
    )
    assert findings(source, "ADV704") == []
    assert len(findings(source.replace("Rotary(dim)", "Rotary(dim, device='cuda')"), "ADV704")) == 1
    subclassed = source + "\nclass Scaled(Rotary):\n    def __init__(self, dim, device=None):\n        super().__init__(dim, device=device)\n"
    assert len(findings(subclassed, "ADV704")) == 1


def test_an_eval_switch_inside_a_function_every_training_step_calls_is_no_evaluation_loop():
    # Text-To-Video-Finetuning's train.py: finetune_unet switches to eval() under an option and
    # returns the loss the step backpropagates; no_grad around its loop would train nothing.
    source = """
    import torch

    def main():
        def finetune_unet(batch, **kwargs):
            if kwargs.get("eval_train", False):
                unet.eval()
            losses = []
            for i in range(2):
                losses.append(unet(batch).mean())
            return losses[0] + losses[1]

        for step, batch in enumerate(loader):
            loss = finetune_unet(batch.cuda())
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    """
    assert "ADV705" not in [d.code for d in lint(source, gpu="A100")]


def test_a_no_grad_the_author_turns_on_by_condition_is_their_choice():
    # StudioGAN's worker.py: gradients stay on where latent optimisation or Langevin sampling needs them.
    source = """
    import torch

    def run_k_nearest_neighbor(self, dataset):
        requires_grad = self.LOSS.apply_lo or self.RUN.langevin_sampling
        with torch.no_grad() if not requires_grad else dummy_context_mgr() as ctx:
            self.Gen.eval()
            for batch_idx in range(10):
                fake = self.Gen(torch.randn(8, 128, device="cuda"))
                embed = resnet(fake)
    """
    assert "ADV705" not in [d.code for d in lint(source, gpu="A100")]


def test_an_evaluation_loop_whose_helper_in_another_module_takes_gradients_keeps_autograd(tmp_path):
    # StudioGAN: validate_classifier calls sample.generate_images, which calls
    # losses.latent_optimise (torch.autograd.grad) when the config turns latent optimisation on.
    from advisor.project import forget_projects

    (tmp_path / ".git").mkdir()
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("")
    (tmp_path / "utils" / "losses.py").write_text(
        "from torch import autograd\n\ndef latent_optimise(zs, generator):\n"
        "    return autograd.grad(generator(zs).sum(), zs)[0]\n"
    )
    (tmp_path / "utils" / "sample.py").write_text(
        "import utils.losses as losses\n\ndef generate_images(zs, generator, apply_lo):\n"
        "    if apply_lo:\n        zs = losses.latent_optimise(zs, generator)\n    return generator(zs)\n"
    )
    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent("""
        import torch
        import utils.sample as sample

        def validate_classifier(model, generator, loader, apply_lo):
            model.eval()
            for images, labels in loader:
                images = sample.generate_images(torch.randn(8, 128, device="cuda"), generator, apply_lo)
                output = model(images)

        if __name__ == "__main__":
            validate_classifier(model, generator, loader, True)
    """))
    forget_projects()
    assert "ADV705" not in [d.code for d in lint(worker.read_text(), gpu="A100", path=str(worker))]
    (tmp_path / "utils" / "losses.py").write_text("def latent_optimise(zs, generator):\n    return zs\n")
    forget_projects()
    assert "ADV705" in [d.code for d in lint(worker.read_text(), gpu="A100", path=str(worker))]


def test_an_evaluation_function_every_importer_calls_under_no_grad_is_silent(tmp_path):
    # res-loglikelihood-regression: rlepose/trainer.py's validate(), which scripts/train.py
    # calls only inside `with torch.no_grad():`.
    from advisor.project import forget_projects

    (tmp_path / ".git").mkdir()
    (tmp_path / "rlepose").mkdir()
    (tmp_path / "rlepose" / "__init__.py").write_text("")
    trainer = tmp_path / "rlepose" / "trainer.py"
    trainer.write_text(textwrap.dedent("""
        import torch

        def validate(model, loader):
            model.eval()
            errors = []
            for images, labels in loader:
                output = model(images.cuda())
                errors.append((output - labels.cuda()).abs().mean().item())
            return sum(errors) / len(errors)
    """))
    script = tmp_path / "train.py"

    def codes(call: str) -> list[str]:
        script.write_text(f"import torch\nfrom rlepose.trainer import validate\n\nmodel = Net().cuda()\n{call}\n")
        forget_projects()
        return [d.code for d in lint(trainer.read_text(), gpu="A100", path=str(trainer))]

    assert "ADV705" not in codes("with torch.no_grad():\n    err = validate(model, loader)")
    assert "ADV705" in codes("err = validate(model, loader)")


def test_a_no_grad_decorator_imports_torch_where_the_def_is():
    # pytorch-playground's utee/misc.py imports torch only inside eval_model: the decorator is
    # evaluated at module level, where that import does not reach (NameError at import).
    source = textwrap.dedent("""
        import os


        def eval_model(model, ds):
            import torch
            model = model.eval()
            model = torch.nn.DataParallel(model).cuda()
            correct = 0
            for data, target in ds:
                output = model(torch.FloatTensor(data).cuda())
                correct += output.argmax(1).cpu().eq(target).sum()
            return correct
    """)
    fixed = fix(source, codes=["ADV705"], gpu="A100").fixed.decode()
    assert "@torch.no_grad()" in fixed
    namespace: dict = {}
    exec(compile(fixed, "misc.py", "exec"), namespace)  # importing the module must not raise NameError
    assert callable(namespace["eval_model"])


def test_an_evaluation_loop_that_calls_an_attack_object_of_the_project_keeps_autograd(tmp_path):
    # DM-Improves-AT: Trainer.eval runs ``self.eval_attack.perturb(x, y)`` when ``adversarial``;
    # the attack classes' ``perturb`` runs PGD, whose loop calls ``loss.backward()``.
    from advisor.project import forget_projects

    (tmp_path / ".git").mkdir()
    (tmp_path / "attacks.py").write_text(
        "def perturb_iterative(x, y, predict, loss_fn):\n"
        "    loss = loss_fn(predict(x), y)\n    loss.backward()\n    return x + x.grad.sign()\n\n"
        "class PGD:\n    def __init__(self, predict, loss_fn):\n        self.predict, self.loss_fn = predict, loss_fn\n"
        "    def perturb(self, x, y):\n        return perturb_iterative(x, y, self.predict, self.loss_fn)\n"
    )
    trainer = tmp_path / "trainer.py"
    trainer.write_text(textwrap.dedent("""
        import torch
        from attacks import PGD

        class Trainer:
            def __init__(self, model, criterion):
                self.model = model.cuda()
                self.eval_attack = PGD(self.model, criterion)

            def eval(self, loader, adversarial=False):
                self.model.eval()
                acc = 0.0
                for x, y in loader:
                    x, y = x.cuda(), y.cuda()
                    if adversarial:
                        x = self.eval_attack.perturb(x, y)
                    acc += (self.model(x).argmax(1) == y).float().mean()
                return acc

        if __name__ == "__main__":
            Trainer(Net(), torch.nn.CrossEntropyLoss()).eval(loader, adversarial=True)
    """))
    forget_projects()
    assert "ADV705" not in [d.code for d in lint(trainer.read_text(), gpu="A100", path=str(trainer))]
    (tmp_path / "attacks.py").write_text(
        "class PGD:\n    def __init__(self, predict, loss_fn):\n        self.predict = predict\n"
        "    def perturb(self, x, y):\n        return x + 0.01 * x.sign()\n"
    )
    forget_projects()
    assert "ADV705" in [d.code for d in lint(trainer.read_text(), gpu="A100", path=str(trainer))]
