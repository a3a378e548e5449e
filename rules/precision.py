"""ADV2xx: precision (guide: "Mixed precision training", fp16 / bf16 / tf32).

ADV201 (fp16 where bf16 is available), ADV204 (the deprecated ``torch.cuda.amp`` API)
and ADV205 (a GradScaler next to bf16 autocast) share two pieces defined here: the
reading of every ``autocast`` in a file (device, dtype, enabled) and the removal of
GradScaler plumbing, so that the three rules agree on what a file does and their
fixes converge in the fixer's rounds instead of undoing each other.

ADV202 (TF32 never enabled) and ADV203 (no mixed precision) share the question "where does
this file train a model on CUDA, and is it certainly in fp32?": :func:`cuda_training` and
:func:`trains_in_fp32` answer it, for other rule families too. ADV206 (float16 weights that
are trained) reads which modules a training loop or an HF trainer trains.
"""
from __future__ import annotations

import builtins
import os
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import libcst as cst

from advisor.apis import ACCELERATOR, DATA_PARALLEL, DISTRIBUTED_DATA_PARALLEL, LIGHTNING_FP16, TRAINING_ARGUMENTS
from advisor.context import MISSING, FileContext
from advisor.edits import combine_edits, lines_removed_with, nested_block, remove_statements, set_keyword, string_like
from advisor.loops import TrainingLoop
from advisor.names import dotted_name
from advisor.rule import Applicability, Edit, Finding, Invalid, Rule, Valid
from advisor.facts.environment import runs_only_below
from advisor.facts.distributed import deepspeed_precision
from advisor.facts.frameworks import ACCELERATE, FABRIC_LOOP, HF_TRAINER, LIGHTNING_FIT, LOOP, TrainingSite
from advisor.facts.models import KNOWN_LIBRARIES, fits_raw_parameters, trained_models
from advisor.facts.precision import (
    autocast_for_sampling,
    runs_fft,
    runs_cudnn_rnn,
    runs_cupy_kernels,
    replicates_in_threads,
    small_dense_network,
    casts_data_to_fp16,
    AMP_SCALER,
    AUTOCAST,
    CUDA_AUTOCAST,
    CUDA_AUTOCAST_PARAMETERS,
    CUDA_SCALER,
    FP16,
    QUANTIZED_LOADING,
    SCALER_ENABLED_POSITION,
    Autocast,
    Dtype,
    autocasts,
    binds,
    calls_module,
    cast_subject,
    file_trains,
    fp16_flag,
    fp32_matmul_model,
    half_weights,
    in_inference_function,
    known_setting,
    precision_left_to_launcher,
    parameter_owners,
    precision_reassigned,
    resolve_dtype,
    same_module,
    scaler_calls,
    small_network_training,
    tf32_configured,
    tf32_turned_off_in_project,
    tf32_set_elsewhere,
    trained_modules,
    trainer_compiles,
    trains_in_fp32,
    under_bf16_choice,
    under_fp16_choice,
)
from advisor.loops import under_no_grad

GUIDE = "Mixed precision training"

LIGHTNING = ("lightning.pytorch.Trainer", "lightning.fabric.Fabric")

# Lightning's half-precision spellings, and their bf16 twin of the same Lightning generation:
# "bf16-mixed" exists only from Lightning 2.0, the legacy "bf16" in every version.
LIGHTNING_BF16 = {16: "bf16", "16": "bf16", "16-mixed": "bf16-mixed"}


def _arguments_may_train(ctx: FileContext, call: cst.Call) -> bool:
    """Whether ``TrainingArguments`` may serve training: False only where they go to Trainers
    of the file that only ``predict`` or ``evaluate`` (GPN's ``run_inference``: ``fp16=True``
    for ``trainer.predict``, where bf16 gains nothing and makes its scores coarser)."""
    bound = ctx.assigned_name(call)
    if bound is None:
        return True
    trainers = [
        other
        for other in ctx.nodes(cst.Call)
        if (dotted_name(other.func) or "").split(".")[-1].endswith("Trainer")
        and isinstance(passed := ctx.argument(other, "args", 1), cst.Name)
        and passed.value == bound
    ]
    if not trainers:
        return True
    for trainer in trainers:
        name = ctx.assigned_name(trainer)
        if name is None:
            return True
        for use in ctx.nodes(cst.Name):
            if use.value != name or not ctx.is_read(use):
                continue
            holder = ctx.parent.get(use)
            if not (
                isinstance(holder, cst.Attribute) and holder.value is use and holder.attr.value in ("predict", "evaluate")
                and isinstance(ctx.parent.get(holder), cst.Call)
            ):
                return True
    return False


def _accelerator_may_train(ctx: FileContext, call: cst.Call) -> bool:
    """Whether the ``Accelerator`` may serve training: the file trains, or it hands the object to
    code it does not show. musubi-tuner's ``cache_text_encoder_outputs.py`` builds one with
    ``mixed_precision="fp16"`` only to run its fp8 text encoder under ``accelerator.autocast()``
    in a function of the file that encodes prompts: no backward, no optimizer anywhere."""
    if file_trains(ctx):
        return True
    name = ctx.assigned_name(call)
    if name is None:
        return True
    reads = [use for use in ctx.nodes(cst.Name) if use.value == name and ctx.is_read(use)]
    if not reads and ctx.enclosing(call, cst.FunctionDef) is None:
        return True  # a module-level object other modules may import and train with
    for use in reads:
        holder = ctx.parent.get(use)
        if isinstance(holder, cst.Attribute) and holder.value is use:
            continue  # ``accelerator.autocast()``, ``accelerator.device``: its own methods
        arg = holder if isinstance(holder, cst.Arg) else None
        passed_to = ctx.parent.get(arg) if arg is not None else None
        if isinstance(passed_to, cst.Call) and ctx.loops.callee(passed_to) is not None:
            continue  # a function of the file, which does not train (the file does not)
        if isinstance(holder, cst.Comparison):
            continue  # ``if accelerator is not None``
        return True
    return False


def _message(text: str) -> str:
    return f"{text} (guide: {GUIDE})"


_HALF_WEIGHTS = "; the model is also loaded or cast in float16: move it to bf16 too"
_FP16_DATA = "; a module it imports casts the data to float16 too: switch that cast with it"


def _resolves_true(ctx: FileContext, call: cst.Call, keyword: str, position: int | None = None) -> bool:
    argument = ctx.argument(call, keyword, position)
    if argument is None or argument is MISSING:
        return False
    return ctx.values.value_of(argument) is True


# A test of the torch version or of a feature: ``torch.__version__``, ``hasattr(torch, "amp")``,
# and the flags libraries define for it (transformers' ``is_torch_greater_or_equal_than_1_10``,
# ``TORCH_1_10``, ``_torch_ge_2``).
_VERSION_TEST = re.compile(r"version|hasattr|greater|less_than|older|newer|(?:^|_)(?:ge|gt|gte)(?:_|$)|\d+_\d+", re.IGNORECASE)


@dataclass
class ScalerUsage:
    """What a file does with one GradScaler."""

    # Edits that drop the scaler and its plumbing, when every use is a standard one.
    removal: list[Edit] | None
    # Whether the scaler may be used where this file cannot see (passed to a function
    # defined elsewhere, stored in a container, created conditionally).
    escapes: bool


def scaler_usage(ctx: FileContext, scaler: cst.Call) -> ScalerUsage:
    """How the GradScaler built by ``scaler`` is used.

    The standard uses can be removed: ``scaler = GradScaler(...)`` goes,
    ``scaler.scale(loss).backward()`` becomes ``loss.backward()``, ``scaler.step(opt)``
    becomes ``opt.step()``, ``scaler.update()`` and ``scaler.unscale_(opt)`` go. Any other
    use (``state_dict()``, ``get_scale()``, passing it on, a second binding) keeps the
    scaler. Only plain names are removed: an attribute such as ``self.scaler`` may be read
    from outside the file.
    """
    assign = ctx.parent.get(scaler)
    if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and assign.value is scaler):
        return ScalerUsage(None, escapes=True)
    target = assign.targets[0].target
    if isinstance(target, cst.Attribute):
        spelling = dotted_name(target)
        for occurrence in ctx.nodes(cst.Attribute):
            if occurrence is target or occurrence.attr.value != target.attr.value:
                continue
            if spelling is None or dotted_name(occurrence) != spelling:
                return ScalerUsage(None, escapes=True)  # ``other.scaler``: cannot tell them apart
            if _method_called_on(ctx, occurrence) is None:
                return ScalerUsage(None, escapes=True)
        return ScalerUsage(None, escapes=False)
    if not isinstance(target, cst.Name):
        return ScalerUsage(None, escapes=True)
    removed: list[cst.BaseSmallStatement] = [assign]
    replaced: list[Edit] = []
    standard = True
    for occurrence in ctx.nodes(cst.Name):
        if occurrence.value != target.value or occurrence is target:
            continue
        parent = ctx.parent.get(occurrence)
        if isinstance(parent, cst.Attribute) and parent.attr is occurrence:
            continue  # ``other.scaler``: a different object
        if isinstance(parent, cst.Arg) and parent.keyword is occurrence:
            continue  # ``f(scaler=...)``: a keyword, not a use
        use = _standard_scaler_use(ctx, occurrence)
        if isinstance(use, Edit):
            replaced.append(use)
            continue
        if use is not None:
            removed.append(use)
            continue
        standard = False
        if not (
            _method_called_on(ctx, occurrence) is not None
            or isinstance(parent, cst.Param)
            or _passed_to_local_function(ctx, occurrence)
        ):
            return ScalerUsage(None, escapes=True)
    if not standard:
        return ScalerUsage(None, escapes=False)
    edits = replaced + remove_statements(ctx, removed)
    import_edit = drop_import_of(ctx, scaler.func, removed_lines=lines_removed_with(ctx, removed))
    if import_edit is not None:
        edits.append(import_edit)
    return ScalerUsage(combine_edits(ctx, edits), escapes=False)


def remove_scaler_plumbing(ctx: FileContext, scaler: cst.Call) -> list[Edit] | None:
    """Edits that drop a GradScaler whose only uses are the standard ones, or None."""
    return scaler_usage(ctx, scaler).removal


def _method_called_on(ctx: FileContext, receiver: cst.BaseExpression) -> cst.Call | None:
    attribute = ctx.parent.get(receiver)
    if isinstance(attribute, cst.Attribute) and attribute.value is receiver:
        call = ctx.parent.get(attribute)
        if isinstance(call, cst.Call) and call.func is attribute:
            return call
    return None


def _passed_to_local_function(ctx: FileContext, name: cst.Name) -> bool:
    """``train(model, scaler)`` where ``train`` is a function of this file: its uses are visible."""
    arg = ctx.parent.get(name)
    call = ctx.parent.get(arg) if isinstance(arg, cst.Arg) and arg.value is name else None
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name):
        return False
    bindings = ctx.lookup(call.func.value, call)
    return bool(bindings) and all(isinstance(b.node, cst.FunctionDef) for b in bindings)


def _standard_scaler_use(ctx: FileContext, name: cst.Name) -> Edit | cst.BaseSmallStatement | None:
    """For ``name`` used as ``name.method(...)`` in a standard way: the edit that replaces
    the call, or the statement to remove. None for any other use."""
    attribute = ctx.parent.get(name)
    if not isinstance(attribute, cst.Attribute) or attribute.value is not name:
        return None
    call = ctx.parent.get(attribute)
    if not isinstance(call, cst.Call) or call.func is not attribute:
        return None
    method = attribute.attr.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    only_one_positional = len(call.args) == 1 and len(positional) == 1
    if method == "scale":
        # scaler.scale(loss).backward(...) -> loss.backward(...)
        outer = ctx.parent.get(call)
        backward = ctx.parent.get(outer) if outer is not None else None
        if not (
            only_one_positional
            and isinstance(outer, cst.Attribute)
            and outer.value is call
            and outer.attr.value == "backward"
            and isinstance(backward, cst.Call)
            and backward.func is outer
        ):
            return None
        return Edit(call, _atom(positional[0].value))
    if method == "step":
        if not only_one_positional:
            return None
        optimizer = _atom(positional[0].value)
        step = cst.Attribute(value=optimizer, attr=cst.Name("step"))
        return Edit(call, call.with_changes(func=step, args=(), whitespace_before_args=cst.SimpleWhitespace("")))
    if method in ("update", "unscale_"):
        expected = 0 if method == "update" else 1
        if len(call.args) != expected or (expected and not only_one_positional):
            return None
        statement = ctx.parent.get(call)
        if not isinstance(statement, cst.Expr) or statement.value is not call:
            return None
        return statement
    return None


_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.Integer, cst.Float)


def _atom(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` parenthesised where it would bind wrongly in front of ``.method()``."""
    if isinstance(expr, _ATOMS) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def drop_import_of(
    ctx: FileContext, func: cst.BaseExpression, removed_lines: set[cst.CSTNode] | frozenset = frozenset()
) -> Edit | None:
    """When ``func`` is a name bound only by ``from m import name`` and used nowhere else,
    the edit that takes it out of that import (the whole import when it is the last name)."""
    if not isinstance(func, cst.Name):
        return None
    bindings = ctx.lookup(func.value, func)
    if len(bindings) != 1 or not isinstance(bindings[0].node, cst.ImportFrom):
        return None
    statement = bindings[0].node
    if isinstance(statement.names, cst.ImportStar):
        return None
    for name in ctx.nodes(cst.Name):
        if name is func or name.value != func.value or ctx.is_descendant(name, statement):
            continue
        parent = ctx.parent.get(name)
        if isinstance(parent, cst.Attribute) and parent.attr is name:
            continue
        if isinstance(parent, cst.Arg) and parent.keyword is name:
            continue
        return None
    aliases = list(statement.names)
    index = next(
        (
            i
            for i, alias in enumerate(aliases)
            if (alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else alias.name.value)
            == func.value
        ),
        None,
    )
    if index is None:
        return None
    if len(aliases) > 1:
        removed = aliases.pop(index)
        if index == len(aliases):
            aliases[-1] = aliases[-1].with_changes(comma=removed.comma)
        return Edit(statement, statement.with_changes(names=aliases))
    line = ctx.parent.get(statement)
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    block = ctx.parent.get(line)
    if isinstance(block, cst.IndentedBlock) and all(s is line or s in removed_lines for s in block.body):
        return None  # the import would leave its block empty (e.g. under ``try:``)
    return Edit(line, cst.RemoveFromParent())


def _scaler_removals(ctx: FileContext) -> tuple[list[Edit], bool]:
    """Edits dropping every GradScaler of the file that can be dropped; and whether all could."""
    edits: list[Edit] = []
    complete = True
    for scaler in scaler_calls(ctx):
        removal = remove_scaler_plumbing(ctx, scaler)
        if removal is None:
            complete = False
        else:
            edits.extend(removal)
    return edits, complete


def _scaling_elsewhere(ctx: FileContext, autocast: cst.Call) -> str | None:
    """Where an fp16 autocast's loss scaling comes from outside the file, what shows it: a
    scaler the step receives (``scaler.scale(loss)`` on a parameter), or an autocast switched
    on by a run-time condition in a file that creates no GradScaler
    (``enabled=isinstance(optimizer, AMPOptimizer)``, whose ``optimizer.backward`` scales)."""
    function = ctx.enclosing(autocast, cst.FunctionDef)
    if function is not None:
        parameters = {p.name.value for p in (*function.params.params, *function.params.kwonly_params)}
        for call in ctx.walk(function, cst.Call):
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value == "scale"
                and isinstance(func.value, cst.Name)
                and func.value.value in parameters
            ):
                return f"`{func.value.value}` is handed to `{function.name.value}`"
    enabled = ctx.keyword_arg(autocast, "enabled")
    if enabled is None or scaler_calls(ctx):
        return None
    value = ctx.values.resolve(enabled.value)
    if value is not None and value.value is True:
        return None
    return f"`enabled={ctx.code(enabled.value)}` and no GradScaler in this file"


def _steps_outside_loops(ctx: FileContext) -> list[str]:
    """The functions of the file that call ``.backward()`` outside every training loop it has:
    training steps a loop's fix would leave in another precision (``ERM.update``, ``CORAL.update``)."""
    loops = [loop.node for loop in ctx.loops.training_loops]
    found: list[str] = []
    for call in ctx.method_calls("backward"):
        if any(ctx.is_descendant(call, loop) for loop in loops):
            continue
        function = ctx.enclosing(call, cst.FunctionDef)
        if function is None:
            continue
        owner = ctx.enclosing(function, cst.ClassDef)
        name = f"{owner.name.value}.{function.name.value}" if isinstance(owner, cst.ClassDef) else function.name.value
        if name not in found:
            found.append(name)
    return found


_FP16_SCALING_TEXT = re.compile(rb"GradScaler\s*\(")


def _fp16_training_beside(ctx: FileContext) -> str | None:
    """Another file of the program (importing this one, or imported by it or by its importers)
    that scales float16 losses itself: the precision is one decision across them."""
    if ctx.project is None:
        return None
    path = ctx.project.neighbour_matching(_FP16_SCALING_TEXT)
    if path is None:
        return None
    return os.path.relpath(path, os.path.dirname(os.path.abspath(ctx.path)))


# -- ADV201 ----------------------------------------------------------------------------------------
def _fp16_kept_elsewhere(ctx: FileContext, fix) -> str | None:
    """Why a bf16 switch of the mixed-precision setting alone would leave float16 running
    elsewhere in the program (the message's addition), or None: the model is loaded or cast in
    float16, or, where there is a fix to withhold, an imported module casts the data to it."""
    if half_weights(ctx):
        return _HALF_WEIGHTS
    if fix is not None and casts_data_to_fp16(ctx):
        return _FP16_DATA
    return None


_FP16_NAMES = frozenset({"fp16", "float16", "half", "16", "16-mixed", "fp16_mixed"})


def _named_fp16_choice(ctx: FileContext, call: cst.Call) -> bool:
    """The autocast is the entry for float16 of a table of precisions keyed by name (the
    value under ``"fp16"`` in a dict literal): the user picks it by that name, next to a bf16
    entry of the same table."""
    element = ctx.parent.get(call)
    if not isinstance(element, cst.DictElement) or element.value is not call:
        return False
    key = ctx.values.value_of(element.key)
    return isinstance(key, str) and key.lower() in _FP16_NAMES


def _no_bf16_fix_where_bf16_fails(ctx: FileContext, findings: Iterable[Finding]) -> Iterator[Finding]:
    """bf16 fixes left as advice where bf16 would raise or not reach the model: a program that
    computes FFTs (cuFFT takes no bf16 input, so the first ``torch.fft.rfft`` of a bf16
    activation raises: FEDformer's Fourier blocks); one that runs cuDNN recurrent layers, which
    autocast runs in fp16 whatever dtype it is given, so bf16 autocast without a GradScaler
    would train them in fp16 unscaled (two readers of held-out 36 and 59: udacity's char-RNN,
    bentrevett's sentiment LSTMs); one that runs CuPy kernels (SpikeGPT's spikingjelly neurons);
    one whose model runs in ``nn.DataParallel`` replicas (cav-mae)."""
    for finding in findings:
        if finding.fix is not None:
            reason = next((why for premise, why in _WHERE_BF16_FAILS if premise(ctx)), None)
            if reason is not None:
                finding.as_advice(reason)
        yield finding


# Checked in this order; the first that holds gives the reason.
_WHERE_BF16_FAILS = (
    (
        runs_fft,
        "the model computes FFTs (`torch.fft`), which raise on bf16 input: cast them to float32 "
        "(`x.float()` in the FFT block) before switching, so the fix is left as advice",
    ),
    (
        runs_cudnn_rnn,
        "the model runs cuDNN recurrent layers (`nn.LSTM`, `nn.GRU`), which autocast runs in float16 "
        "whatever dtype it is given: without a GradScaler they would train in fp16 unscaled, so the fix "
        "is left as advice",
    ),
    (
        runs_cupy_kernels,
        "the model runs CuPy kernels (`backend='cupy'`), hand-written CUDA that takes float32 and float16 "
        "and raises on bf16, so the fix is left as advice",
    ),
    (
        replicates_in_threads,
        "the model is wrapped in `nn.DataParallel`, whose replica threads enter autocast with its default "
        "float16: bf16 would reach the main thread only, and the replicas would train in fp16 without a "
        "GradScaler; move to DistributedDataParallel first, so the fix is left as advice",
    ),
)


class Fp16OnBf16Gpu(Rule):
    code = "ADV201"
    name = "fp16-on-bf16-gpu"
    summary = "fp16 mixed precision on a GPU that supports bf16."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        fp16 has a 5-bit exponent: values above 65504 overflow and small gradients
        underflow, which is why fp16 training needs a `GradScaler` (loss scaling, inf/NaN
        checks, skipped steps). The guide's *Mixed precision training* section: on Ampere
        or newer hardware "you can use bf16 for mixed precision training", which has "a
        much bigger dynamic range" (about fp32's), and the GPU guide adds that bf16 works
        "without adding any loss scaling methods like you would with fp16". Same tensor
        core speed, fewer NaN surprises, less code.
    """
    example = """
        scaler = torch.cuda.amp.GradScaler()
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(x.cuda()), y.cuda())
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

        args = TrainingArguments("out", fp16=True)
    """
    use_instead = """
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

        args = TrainingArguments("out", bf16=True)
    """
    silent_when = """
        - the target GPU has no bf16 (`--gpu V100`, `--gpu T4`): fp16 is the right choice there;
        - (advice, no fix) the autocast is switched on by a flag named for fp16 (`enabled=args.fp16`,
          `self.use_amp = args.fp16`): the fix would make `--fp16` mean bf16;
        - (advice, no fix) the loss scaling that goes with the autocast is set up outside the
          file: the step is handed its `scaler`, or the autocast is switched on at run time
          (`enabled=isinstance(optimizer, AMPOptimizer)`) in a file that creates no
          GradScaler (a library task's `train_step`): the regime is configured elsewhere;
        - fp16 is the other branch of a bf16 choice: `torch.bfloat16 if
          torch.cuda.is_bf16_supported() else torch.float16`, `if args.bf16: ... else: ...`;
        - the file also sets up bf16 the same way elsewhere (`Accelerator(mixed_precision="bf16")`,
          `TrainingArguments(bf16=True)`, Lightning `precision="bf16-mixed"`): a script that
          builds both precisions (a test of each, a choice of runs) uses fp16 on purpose;
        - the dtype, device or value cannot be read (`dtype=ptdtype` chosen at run time,
          `torch.autocast(device_type=device.type)`, `TrainingArguments(**vars(args))`,
          precision set by a launcher or `LightningCLI`);
        - the autocast runs on the CPU or is disabled (`enabled=False`), or the framework is
          told to use the CPU (`use_cpu=True`, `Accelerator(cpu=True)`, `accelerator="cpu"`);
        - the autocast serves inference: the file never trains (no `backward()`, GradScaler or
          optimizer step), or the autocast runs under `torch.no_grad()` /
          `torch.inference_mode()` (a `with` block or a decorated function), or in a function
          named for evaluation or sampling (`log_validation`, `evaluate`, `generate_samples`)
          that runs no backward pass or optimizer step, or its block only samples (`inferer.
          sample(...)`, `generate(...)`, a step of a loop over `scheduler.timesteps`, with no
          backward), or the Lightning `Trainer` only runs
          `test` / `validate` / `predict`, or the `TrainingArguments` go to a Trainer that only
          runs `predict` / `evaluate`: fp16 inference is fine;
        - the autocast is the `"fp16"` entry of a table of precisions keyed by name
          (`{"bf16": autocast(dtype=torch.bfloat16), "fp16": autocast(dtype=torch.float16)}[args.precision]`):
          the user picks fp16 there by its name.

        Where the model itself is loaded or cast in float16 (`torch_dtype=torch.float16`,
        `bnb_4bit_compute_dtype=torch.float16`, `.half()`), the finding comes without a fix:
        switching only the mixed-precision flag would leave the job half done, and so it does
        where a project module the file imports casts the data to float16 itself
        (`batch[key].astype(np.float16)` when AMP is on). So it does, too,
        where the model computes FFTs (`torch.fft.rfft`, `torch.stft`, in the file or a module
        it imports): cuFFT takes no bf16 input, and the first transform of a bf16 activation
        raises (ADV203's bf16 autocast likewise); and where it runs cuDNN recurrent layers
        (`nn.LSTM`, `nn.GRU`, `nn.RNN`), which autocast runs in float16 whatever dtype it is
        given (ATen's `AutocastRNN.cpp`): bf16 without a GradScaler would leave them in fp16,
        unscaled (ADV203 likewise); where it runs CuPy kernels (spikingjelly's `backend='cupy'`
        neurons), which take float32 and float16 and raise on bf16; and where the model is
        wrapped in `nn.DataParallel`, whose replica threads enter autocast with its default
        float16 (`parallel_apply`), so bf16 never reaches them and dropping the GradScaler
        would leave them in fp16 unscaled (ADV203 likewise).

        The fix switches to bf16 and, for `autocast`, removes the GradScaler when its only
        uses are `scale(loss).backward()`, `step(opt)`, `update()` and `unscale_(opt)`; a
        scaler used in any other way (checkpointed, queried, passed on) is kept, and ADV205
        reports it afterwards.
    """
    valid = [
        Valid(
            """
            import torch
            model = DiffusionUNet().cuda()
            optimizer = torch.optim.Adam(model.parameters())
            for images in loader:
                loss = diffusion_loss(model, images.cuda())
                loss.backward()
                optimizer.step()
            noise = torch.randn(1, 1, 64, 64, device="cuda")
            with torch.autocast("cuda", dtype=torch.float16):
                image = inferer.sample(input_noise=noise, diffusion_model=model, scheduler=scheduler)
            """,
            note="an autocast that only samples (no backward): inference, where fp16 is as fast and more precise (MONAI's tutorials)",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                with {
                    "bf16": torch.autocast("cuda", dtype=torch.bfloat16),
                    "fp16": torch.autocast("cuda", dtype=torch.float16),
                }[args.precision]:
                    loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="a table of precisions keyed by name: the user picks fp16 by its name (Lumina-Image-2.0)",
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments

            def run_inference(model, dataset):
                training_args = TrainingArguments(output_dir="out", per_device_eval_batch_size=8, fp16=True)
                trainer = Trainer(model=model, args=training_args)
                return trainer.predict(test_dataset=dataset).predictions
            """,
            note="arguments for a Trainer that only predicts: fp16 inference is as fast and finer (GPN's variant scores)",
        ),
        Valid(
            """
            import torch
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x.cuda())
                loss.backward()
            """,
        ),
        Valid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = model(x.cuda())
                scaler.scale(loss).backward()
            """,
            gpu="V100",
            note="no bf16 on Volta: fp16 is intended",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", fp16=True)
            """,
            gpu="T4",
            note="no bf16 on Turing: fp16 is intended",
        ),
        Valid(
            """
            import torch
            amp_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            for x, y in loader:
                with torch.autocast("cuda", dtype=amp_dtype):
                    loss = model(x.cuda())
                loss.backward()
            """,
            note="fp16 only as the fallback of a bf16 capability check",
        ),
        Valid(
            """
            import torch
            from transformers import TrainingArguments
            if torch.cuda.is_bf16_supported():
                args = TrainingArguments("out", bf16=True)
            else:
                args = TrainingArguments("out", fp16=True)
            """,
            note="fp16 in the else branch of a capability check",
        ),
        Valid(
            """
            import torch
            dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'
            ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
            ctx = torch.amp.autocast(device_type='cuda', dtype=ptdtype)
            scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
            with ctx:
                loss = model(x)
            scaler.scale(loss).backward()
            """,
            note="nanoGPT: dtype chosen at run time",
        ),
        Valid(
            """
            import torch
            device_type = "cuda" if torch.cuda.is_available() else "cpu"
            with torch.autocast(device_type=device_type, dtype=torch.float16):
                loss = model(x)
            loss.backward()
            """,
            note="device unknown",
        ),
        Valid(
            """
            import torch
            with torch.autocast("cpu"):
                loss = model(x)
            loss.backward()
            """,
            note="CPU autocast defaults to bfloat16",
        ),
        Valid(
            """
            import torch
            with torch.autocast("cuda", enabled=False):
                loss = model(x)
            loss.backward()
            """,
            note="autocast disabled",
        ),
        Valid(
            """
            import torch
            model = model.cuda().eval()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
                logits = model(x.cuda())
            """,
            note="inference only: fp16 is as fast and more precise",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments(**vars(cli_args))
            """,
            note="precision from the command line",
        ),
        Valid(
            """
            import argparse
            from transformers import TrainingArguments
            parser = argparse.ArgumentParser()
            parser.add_argument("--fp16", action="store_true")
            args = parser.parse_args()
            training_args = TrainingArguments("out", fp16=args.fp16)
            """,
            note="argparse flag defaults to False",
        ),
        Valid(
            """
            from accelerate import Accelerator
            accelerator = Accelerator(mixed_precision=args.mixed_precision)
            """,
            note="value unknown",
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator
            mixed_precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
            accelerator = Accelerator(mixed_precision=mixed_precision)
            """,
        ),
        Valid(
            """
            import lightning as L
            trainer = L.Trainer(precision="bf16-mixed")
            """,
        ),
        Valid(
            """
            import torch
            if args.precision == "fp16":
                amp = torch.autocast("cuda", dtype=torch.float16)
            elif args.precision == "bf16":
                amp = torch.autocast("cuda", dtype=torch.bfloat16)
            with amp:
                loss = model(x)
            loss.backward()
            """,
            note="the script offers bf16: fp16 is the user's choice",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", fp16=True, use_cpu=True)
            """,
            note="told to run on the CPU",
        ),
        Valid(
            """
            import lightning as L
            trainer = L.Trainer(accelerator="cpu", precision=16)
            """,
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator

            def check_bf16_training():
                accelerator = Accelerator(mixed_precision="bf16")
                train(accelerator)

            def check_fp16_training():
                accelerator = Accelerator(mixed_precision="fp16")
                train(accelerator)
            """,
            note="both precisions set up on purpose, one after the other",
        ),
        Valid(
            """
            from transformers import TrainingArguments
            bf16_args = TrainingArguments("out-bf16", bf16=True)
            fp16_args = TrainingArguments("out-fp16", fp16=True)
            """,
            note="the file builds both precisions",
        ),
        Valid(
            """
            import torch
            from transformers import TrainingArguments
            training_args = TrainingArguments("out", fp16=True)
            if torch.cuda.get_device_capability()[0] >= 8:
                training_args.fp16 = False
                training_args.bf16 = True
            """,
            note="precision changed after construction",
        ),
        Valid(
            """
            import torch

            def log_validation(pipeline, prompts):
                images = []
                for prompt in prompts:
                    with torch.autocast("cuda"):
                        images.append(pipeline(prompt).images[0])
                return images

            for step, batch in enumerate(loader):
                loss = unet(batch.cuda()).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if step % 500 == 0:
                    log_validation(pipeline, prompts)
            """,
            note="the autocast samples images in a validation function that trains nothing",
        ),
        Valid(
            """
            import lightning.pytorch as pl
            trainer = pl.Trainer(accelerator="gpu", precision=16)
            trainer.test(model, dataloaders=test_loader)
            """,
            note="the Trainer only tests: fp16 inference",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch

            class Trainer:
                def __init__(self, model, args):
                    self.model = model.cuda()
                    self.use_amp = args.fp16

                def step(self, x):
                    with torch.autocast("cuda", dtype=torch.float16, enabled=self.use_amp):
                        loss = self.model(x.cuda()).sum()
                    loss.backward()
                    self.optimizer.step()

            trainer = Trainer(Net(), args)
            for x in loader:
                trainer.step(x)
            """,
            fixed=None,
            note="switched on by a flag named for fp16: advice only, `--fp16` must not come to mean bf16",
        ),
        Invalid(
            """
            import torch

            def train_epoch(model, loader, optimizer, scaler, use_amp):
                for samples in loader:
                    with torch.cuda.amp.autocast(enabled=use_amp):
                        loss = model(samples)
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
            """,
            fixed=None,
            note="the scaler is handed in by a runner elsewhere: advice only, the regime is configured there",
        ),
        Invalid(
            """
            import torch
            from fairseq.optim.amp_optimizer import AMPOptimizer

            def train_step(sample, model, criterion, optimizer):
                model.train()
                with torch.cuda.amp.autocast(enabled=isinstance(optimizer, AMPOptimizer)):
                    loss = criterion(model, sample)
                optimizer.backward(loss)
            """,
            fixed=None,
            note="switched on at run time, scaled by an optimizer of another module: advice only",
        ),
        Invalid(
            """
            import torch
            from contextlib import nullcontext
            dtype = "float16"
            device = "cuda" if torch.cuda.is_available() else "cpu"
            device_type = "cuda" if "cuda" in device else "cpu"
            ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
            ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
            with ctx:
                loss = model(x)
            loss.backward()
            """,
            fixed="""
            import torch
            from contextlib import nullcontext
            dtype = "bfloat16"
            device = "cuda" if torch.cuda.is_available() else "cpu"
            device_type = "cuda" if "cuda" in device else "cpu"
            ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
            ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
            with ctx:
                loss = model(x)
            loss.backward()
            """,
            note="nanoGPT: the autocast only runs where the device is not the CPU",
        ),
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = loss_fn(model(x.cuda()), y.cuda())
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
            """,
            fixed="""
            import torch
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = loss_fn(model(x.cuda()), y.cuda())
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch as T
            from torch.cuda.amp import autocast, GradScaler
            scaler = GradScaler()
            for x, y in loader:
                with autocast():
                    loss = model(x.cuda()) / accumulation_steps
                scaler.scale(loss / 2).backward()
                if (step + 1) % accumulation_steps == 0:
                    scaler.step(opt)
                    scaler.update()
            """,
            fixed="""
            import torch as T
            from torch.cuda.amp import autocast
            for x, y in loader:
                with autocast(dtype=T.bfloat16):
                    loss = model(x.cuda()) / accumulation_steps
                (loss / 2).backward()
                if (step + 1) % accumulation_steps == 0:
                    opt.step()
            """,
            note="deprecated autocast without dtype is fp16; ADV204 modernises it in a later round",
        ),
        Invalid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for batch in loader:
                with torch.amp.autocast(device_type="cuda"):
                    loss = model(batch)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                if step % 100 == 0:
                    torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, "ckpt.pt")
            """,
            fixed="""
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for batch in loader:
                with torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16):
                    loss = model(batch)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                if step % 100 == 0:
                    torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, "ckpt.pt")
            """,
            note="the scaler is checkpointed: only the dtype changes",
        ),
        Invalid(
            """
            import torch
            AMP_DTYPE = torch.half
            scaler = torch.cuda.amp.GradScaler()
            for x in loader:
                with torch.autocast("cuda", AMP_DTYPE):
                    loss = model(x)
                scaler.scale(loss).backward()
                scaler.step(opt); scaler.update()
            """,
            fixed="""
            import torch
            AMP_DTYPE = torch.bfloat16
            for x in loader:
                with torch.autocast("cuda", AMP_DTYPE):
                    loss = model(x)
                loss.backward()
                opt.step()
            """,
        ),
        Invalid(
            """
            from transformers import TrainingArguments, Trainer
            args = TrainingArguments(
                output_dir="out",
                per_device_train_batch_size=8,
                fp16=True,
            )
            """,
            fixed="""
            from transformers import TrainingArguments, Trainer
            args = TrainingArguments(
                output_dir="out",
                per_device_train_batch_size=8,
                bf16=True,
            )
            """,
        ),
        Invalid(
            """
            import transformers
            config = dict(output_dir="out", fp16=True, fp16_full_eval=True)
            args = transformers.Seq2SeqTrainingArguments(**config)
            """,
            fixed="""
            import transformers
            config = dict(output_dir="out", bf16=True, fp16_full_eval=True)
            args = transformers.Seq2SeqTrainingArguments(**config)
            """,
        ),
        Invalid(
            """
            from transformers import TrainingArguments
            args = TrainingArguments("out", fp16=True, bf16=False, fp16_full_eval=True)
            """,
            fixed="""
            from transformers import TrainingArguments
            args = TrainingArguments("out", fp16=False, bf16=True, fp16_full_eval=True)
            """,
        ),
        Invalid(
            """
            import argparse
            from accelerate import Accelerator
            parser = argparse.ArgumentParser()
            parser.add_argument("--mixed_precision", type=str, default="fp16", choices=["no", "fp16", "bf16"])
            args = parser.parse_args()
            accelerator = Accelerator(mixed_precision=args.mixed_precision)
            """,
            fixed="""
            import argparse
            from accelerate import Accelerator
            parser = argparse.ArgumentParser()
            parser.add_argument("--mixed_precision", type=str, default="bf16", choices=["no", "fp16", "bf16"])
            args = parser.parse_args()
            accelerator = Accelerator(mixed_precision=args.mixed_precision)
            """,
        ),
        Invalid(
            """
            import pytorch_lightning as pl
            trainer = pl.Trainer(accelerator="gpu", precision=16)
            """,
            fixed="""
            import pytorch_lightning as pl
            trainer = pl.Trainer(accelerator="gpu", precision="bf16")
            """,
        ),
        Invalid(
            """
            import pytorch_lightning as pl
            trainer = pl.Trainer(accelerator="gpu", precision=16)
            trainer.fit(model, train_loader)
            trainer.test(model, test_loader)
            """,
            fixed="""
            import pytorch_lightning as pl
            trainer = pl.Trainer(accelerator="gpu", precision="bf16")
            trainer.fit(model, train_loader)
            trainer.test(model, test_loader)
            """,
            note="fits before it tests: a training run",
        ),
        Invalid(
            """
            import torch

            def train_and_validate(model, loader, optimizer):
                for x, y in loader:
                    with torch.autocast("cuda", dtype=torch.float16):
                        loss = model(x.cuda(), y.cuda())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            import torch

            def train_and_validate(model, loader, optimizer):
                for x, y in loader:
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = model(x.cuda(), y.cuda())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="named for validation too, but it trains",
        ),
        Invalid(
            """
            from lightning.pytorch import Trainer
            trainer = Trainer(devices=1, precision='16-mixed')
            """,
            fixed="""
            from lightning.pytorch import Trainer
            trainer = Trainer(devices=1, precision='bf16-mixed')
            """,
        ),
        Invalid(
            """
            import torch
            dtype = 'float16'
            ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
            ctx = torch.amp.autocast(device_type='cuda', dtype=ptdtype)
            scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
            with ctx:
                loss = model(x)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            """,
            fixed="""
            import torch
            dtype = 'bfloat16'
            ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
            ctx = torch.amp.autocast(device_type='cuda', dtype=ptdtype)
            with ctx:
                loss = model(x)
            loss.backward()
            optimizer.step()
            """,
            note="nanoGPT with the dtype fixed to float16",
        ),
        Invalid(
            """
            import torch
            from transformers import AutoModelForCausalLM, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.float16)
            args = TrainingArguments("out", fp16=True)
            """,
            fixed=None,
            note="weights loaded in float16: advice only",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.target.bf16:
            return
        yield from _no_bf16_fix_where_bf16_fails(ctx, self._autocasts(ctx))
        yield from _no_bf16_fix_where_bf16_fails(ctx, self._training_arguments(ctx))
        yield from self._accelerators(ctx)
        yield from self._lightning(ctx)

    def _gpu(self, ctx: FileContext) -> str:
        return ctx.target.name

    # -- torch.autocast -------------------------------------------------------------------------
    def _autocasts(self, ctx: FileContext) -> Iterator[Finding]:
        if not file_trains(ctx):
            return
        sites = autocasts(ctx)
        for site in sites:
            if not site.fp16 or under_bf16_choice(ctx, site.call) or under_bf16_choice(ctx, site.dtype.node):
                continue
            if under_no_grad(ctx, site.call) or in_inference_function(ctx, site.call) or autocast_for_sampling(ctx, site.call):
                continue  # inference: fp16 is as fast as bf16 and more precise
            if _named_fp16_choice(ctx, site.call):
                continue  # Lumina-Image-2.0's ``{"bf16": autocast(bf16), "fp16": autocast(fp16)}[args.precision]``
            spelling = "torch.cuda.amp.autocast" if site.deprecated else "torch.autocast"
            if site.dtype.node is None:
                message = (
                    f"`{spelling}` without `dtype` runs in float16 on CUDA, and {self._gpu(ctx)} supports bf16: "
                    "pass `dtype=torch.bfloat16` and drop the GradScaler"
                )
            else:
                message = (
                    f"float16 autocast on a bf16-capable GPU ({self._gpu(ctx)}): use `torch.bfloat16`, "
                    "which keeps fp32's range and needs no GradScaler"
                )
            fix = self._autocast_fix(ctx, site, sites)
            kept = _fp16_kept_elsewhere(ctx, fix)
            if kept is not None:
                message, fix = message + kept, None
            elsewhere = _scaling_elsewhere(ctx, site.call)
            if elsewhere is not None and fix is not None:
                # A task's ``train_step`` in a library (fairseq, LAVIS): the fp16 regime's switch
                # and its loss scaling live in another module; bf16 here alone would leave them
                # configuring a scaler for a dtype that no longer runs.
                message += f"; its loss scaling is set up outside this file ({elsewhere}): switch the regime where it is configured"
                fix = None
            sibling = _fp16_training_beside(ctx) if fix is not None else None
            if sibling is not None:
                # pycls: ``benchmark.py`` times the training step of ``trainer.py``; bf16 in one
                # alone times (or trains) a regime the other does not run.
                message += f"; `{sibling}`, which runs with this file, trains in float16 with a GradScaler too: switch them together"
                fix = None
            warp = _warps_images(ctx) if fix is not None else None
            if warp is not None:
                # MONAI's learn2reg tutorial: VoxelMorph's displacement field and ``Warp``'s
                # sampling grid in bfloat16 (8 significant bits) land 0.5-1 voxel off on a
                # 224-voxel axis, erasing the small deformations the network learns.
                message += (
                    f"; the program warps images by a sampling grid (`{warp}`), whose coordinates bfloat16 keeps to "
                    "8 significant bits (under a voxel on large images): check the registration's accuracy first"
                )
                fix = None
            converted = _numpy_of_region(ctx, site.call) if fix is not None else None
            if converted is not None:
                # MONAI's 2d_ldm_tutorial: ``with autocast(...): decoded = sample(...)``, then
                # ``plt.imshow(decoded[0, 0].cpu())``; NumPy has no bfloat16 and raises.
                message += (
                    f"; what the region computes is handed to NumPy afterwards (`{ctx.snippet(converted)}`), "
                    "which has no bfloat16 and raises on it: convert with `.float()` first"
                )
                fix = None
            flag = fp16_flag(ctx, site.call)
            if flag is not None and fix is not None:
                # ``--fp16`` would then mean bf16: the user's switch, not ours to rename.
                message += f"; it is switched on by `{flag}`, named for fp16: offer bf16 as an option of its own"
                fix = None
            yield self.report(site.call, _message(message), fix)

    def _autocast_fix(self, ctx: FileContext, site: Autocast, sites: list[Autocast]):
        assert site.dtype is not None
        imports: tuple[str, ...] = ()
        if site.dtype.node is None:
            bf16, imports = ctx.reference("torch.bfloat16", site.call)
            edit = Edit(site.call, set_keyword(site.call, "dtype", bf16))
        elif site.dtype.bf16_key is None and isinstance(site.dtype.node, (cst.Name, cst.Attribute)):
            bf16, imports = ctx.reference("torch.bfloat16", site.call)
            edit = Edit(site.dtype.node, bf16)
        elif site.dtype.bf16_key is not None and isinstance(site.dtype.node, cst.SimpleString):
            edit = Edit(site.dtype.node, string_like(site.dtype.node, site.dtype.bf16_key))
        else:
            return None
        # The scaler can go only if no other autocast may still run in float16 once this one is bf16.
        others_bf16 = all(
            other is site
            or other.certainly_not_cuda
            or other.bf16
            or (other.dtype is not None and other.dtype.node is not None and other.dtype.node is site.dtype.node)
            or under_no_grad(ctx, other.call)  # no backward runs there: it never needed the scaler
            or autocast_for_sampling(ctx, other.call)
            for other in sites
        )
        scaler_edits, complete = _scaler_removals(ctx) if others_bf16 else ([], False)
        edits = combine_edits(ctx, [edit, *scaler_edits]) if scaler_edits else None
        if edits is None:
            edits = [edit]
            scaler_edits = []
        if scaler_edits and complete:
            description = "Use bf16 autocast and remove the GradScaler"
        elif scaler_edits:
            description = "Use bf16 autocast and remove the GradScalers that have no other use"
        else:
            description = "Use bf16 autocast"
        return self.fix(description, *edits, imports=imports, requires=[("torch", "1.10")])

    # -- TrainingArguments ---------------------------------------------------------------------
    def _training_arguments(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(*TRAINING_ARGUMENTS):
            fp16 = ctx.argument(call, "fp16")
            if fp16 is None or fp16 is MISSING:
                continue
            value = ctx.values.resolve(fp16)
            if value is None or value.value is not True:
                continue
            if under_bf16_choice(ctx, call) or under_bf16_choice(ctx, value.node):
                continue
            if _resolves_true(ctx, call, "use_cpu") or _resolves_true(ctx, call, "no_cuda"):
                continue
            if precision_reassigned(ctx, call) or self._other_call_sets(ctx, TRAINING_ARGUMENTS, "bf16", (True,)):
                continue
            if not _arguments_may_train(ctx, call):
                continue  # inference: fp16 is as fast as bf16 and more precise
            backend = ctx.argument(call, "half_precision_backend")
            if backend is None or (backend is not MISSING and ctx.values.value_of(backend) not in ("auto", "cuda_amp")):
                continue  # apex or an unknown backend: bf16 may not be available through it
            bf16 = ctx.argument(call, "bf16")
            if bf16 is None:
                continue
            if bf16 is not MISSING:
                bf16_value = ctx.values.resolve(bf16)
                if bf16_value is None or bf16_value.value is not False:
                    continue
            message = (
                f"`fp16=True` on a bf16-capable GPU ({self._gpu(ctx)}): use `bf16=True`, "
                "as fast, with fp32's range and no loss scaling"
            )
            fix = self._training_arguments_fix(ctx, call, fp16, bf16)
            kept = _fp16_kept_elsewhere(ctx, fix)
            if kept is not None:
                message, fix = message + kept, None
            configured = deepspeed_precision(ctx, call)
            if configured is not None and configured[0] == "fp16" and fix is not None:
                # trlx's GPT-J reward model: transformers refuses a DeepSpeed config whose
                # fp16 section disagrees with the arguments.
                message += f'; `{configured[1]}` sets `"fp16": {{"enabled": true}}` itself: switch it to bf16 there too'
                fix = None
            elif configured is not None and configured[0] == "unknown" and fix is not None:
                # FinGPT: ``deepspeed=args.ds_config``, and the launch script passes a config
                # with ``"fp16": {"enabled": true}``, which transformers refuses beside bf16=True.
                message += (
                    f"; the DeepSpeed config (`{configured[1]}`) is not one advisor can read, and where it sets "
                    '`"fp16": {"enabled": true}` (not `"auto"`), transformers refuses `bf16=True` beside it: '
                    "switch it there too, so the fix is left as advice"
                )
                fix = None
            yield self.report(self.at_keyword(call, "fp16"), _message(message), fix)

    def _training_arguments_fix(self, ctx: FileContext, call: cst.Call, fp16, bf16):
        if bf16 is MISSING:
            edit = _rename_keyword_of(ctx, fp16, "bf16")
            return None if edit is None else self.fix("Use `bf16=True` instead of `fp16=True`", edit, requires=[_TRAINER_BF16])
        # ``fp16=True, bf16=False`` written out: swap the two literals.
        if _is_literal(fp16, "True") and _is_literal(bf16, "False"):
            return self.fix(
                "Set `bf16=True` and `fp16=False`",
                Edit(fp16, fp16.with_changes(value="False")),
                Edit(bf16, bf16.with_changes(value="True")),
                requires=[_TRAINER_BF16],
            )
        return None

    # -- Accelerate ----------------------------------------------------------------------------
    def _accelerators(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(ACCELERATOR):
            argument = ctx.argument(call, "mixed_precision")
            if argument is None or argument is MISSING:
                continue
            value = ctx.values.resolve(argument)
            if value is None or value.value != "fp16":
                continue
            if under_bf16_choice(ctx, call) or under_bf16_choice(ctx, value.node) or _resolves_true(ctx, call, "cpu"):
                continue
            if self._other_call_sets(ctx, (ACCELERATOR,), "mixed_precision", ("bf16",)):
                continue
            if not _accelerator_may_train(ctx, call):
                continue  # inference: fp16 is as fast as bf16 and more precise
            fix = None
            if isinstance(value.node, cst.SimpleString):
                fix = self.fix('Use `mixed_precision="bf16"`', Edit(value.node, string_like(value.node, "bf16")), requires=_accelerate_precision_requires("bf16"))
            message = f'`mixed_precision="fp16"` on a bf16-capable GPU ({self._gpu(ctx)}): use `"bf16"`'
            kept = _fp16_kept_elsewhere(ctx, fix)
            if kept is not None:
                message, fix = message + kept, None
            yield self.report(self.at_keyword(call, "mixed_precision"), _message(message), fix)

    # -- Lightning -----------------------------------------------------------------------------
    def _lightning(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(*LIGHTNING):
            argument = ctx.argument(call, "precision")
            if argument is None or argument is MISSING:
                continue
            value = ctx.values.resolve(argument)
            if value is None or isinstance(value.value, bool) or value.value not in LIGHTNING_BF16:
                continue
            if under_bf16_choice(ctx, call) or under_bf16_choice(ctx, value.node):
                continue
            if self._other_call_sets(ctx, LIGHTNING, "precision", _LIGHTNING_BF16_SPELLINGS):
                continue
            accelerator = ctx.argument(call, "accelerator")
            if accelerator is None or (accelerator is not MISSING and ctx.values.value_of(accelerator) == "cpu"):
                continue
            if _evaluation_only_trainer(ctx, call):
                continue
            replacement = LIGHTNING_BF16[value.value]
            # ``precision="bf16"`` came with pytorch-lightning 1.5 (1.3.8 raises NotImplementedError:
            # VideoTransformer), "bf16-mixed" with 2.0; ``lightning`` has both from its first release.
            since = "2.0" if replacement == "bf16-mixed" else "1.5"
            if since == "1.5" and _deepspeed_strategy(ctx, call):
                since = "1.7"  # DeepSpeedStrategy took bf16 in 1.7 (#12508); 1.6 silently ran fp32
            requires = [("pytorch-lightning", since), ("pytorch_lightning", since)]
            fix = None
            if isinstance(value.node, cst.SimpleString):
                fix = self.fix(
                    f'Use `precision="{replacement}"`', Edit(value.node, string_like(value.node, replacement)), requires=requires
                )
            elif isinstance(value.node, cst.Integer) and value.origin != "argparse default":
                # An argparse default would go through ``type=int``: a string there breaks the parser.
                fix = self.fix(
                    f'Use `precision="{replacement}"`', Edit(value.node, cst.SimpleString(f'"{replacement}"')), requires=requires
                )
            message = f"`precision={ctx.code(value.node)}` is fp16 on a bf16-capable GPU ({self._gpu(ctx)}): use `\"{replacement}\"`"
            kept = _fp16_kept_elsewhere(ctx, fix)
            if kept is not None:
                message, fix = message + kept, None
            branch = _branches_on_fp16_precision(ctx) if fix is not None else None
            if branch is not None:
                # s2s2net: ``dtype = torch.float16 if self.precision == 16 else torch.float``
                message += (
                    f"; the code branches on the precision being 16 (`{ctx.snippet(branch)}`, line "
                    f"{ctx.position(branch)[0]}), which bf16 would no longer take, so the fix is left as advice"
                )
                fix = None
            yield self.report(self.at_keyword(call, "precision"), _message(message), fix)


    @staticmethod
    def _other_call_sets(ctx: FileContext, qualnames: Sequence[str], keyword: str, bf16_values: tuple) -> bool:
        """Whether the file also builds one of ``qualnames`` in bf16 (``Accelerator(mixed_precision=
        "bf16")`` beside the fp16 one): a script that sets up both precisions, such as a test of
        each or a choice between runs, uses fp16 on purpose where it does."""
        for other in ctx.calls(*qualnames):
            argument = ctx.argument(other, keyword)
            if argument is None or argument is MISSING:
                continue
            value = ctx.values.resolve(argument)
            if value is None:
                continue
            if value.value is True and True in bf16_values:
                return True
            if isinstance(value.value, str) and value.value in bf16_values:
                return True
        return False


_LIGHTNING_BF16_SPELLINGS = ("bf16", "bf16-mixed", "bf16-true")


def _deepspeed_strategy(ctx: FileContext, trainer: cst.Call) -> bool:
    """The Lightning Trainer runs under DeepSpeed: ``strategy="deepspeed_stage_2"`` or
    ``strategy=DeepSpeedStrategy(stage=2)`` (``DeepSpeedPlugin`` before 1.6)."""
    strategy = ctx.argument(trainer, "strategy")
    if strategy is None or strategy is MISSING:
        return False
    value = ctx.values.value_of(strategy)  # type: ignore[arg-type]
    if isinstance(value, str):
        return value.startswith("deepspeed")
    built = ctx.bound_call(strategy) if isinstance(strategy, cst.Name) else strategy  # type: ignore[arg-type]
    name = dotted_name(built.func) if isinstance(built, cst.Call) else None
    return bool(name) and name.rsplit(".", 1)[-1] in ("DeepSpeedStrategy", "DeepSpeedPlugin")


def _branches_on_fp16_precision(ctx: FileContext) -> cst.Comparison | None:
    """A test of the file on the Trainer's precision being 16 (``self.precision == 16``,
    ``trainer.precision == "16-mixed"``): code that takes another path once it is bf16."""
    for comparison in ctx.nodes(cst.Comparison):
        if len(comparison.comparisons) != 1 or not isinstance(comparison.comparisons[0].operator, (cst.Equal, cst.NotEqual)):
            continue
        sides = (comparison.left, comparison.comparisons[0].comparator)
        named = any((dotted_name(side) or "").rsplit(".", 1)[-1] == "precision" for side in sides)
        literal = any(isinstance(side, (cst.Integer, cst.SimpleString)) and ctx.values.value_of(side) in LIGHTNING_FP16 for side in sides)
        if named and literal:
            return comparison
    return None
_LIGHTNING_EVALUATION = ("test", "validate", "predict")


def _evaluation_only_trainer(ctx: FileContext, call: cst.Call) -> bool:
    """``trainer = Trainer(precision=16)`` that the file only runs ``test`` / ``validate`` /
    ``predict`` on, never ``fit``: fp16 serves inference there."""
    assign = ctx.parent.get(call)
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or assign.value is not call:
        return False
    name = dotted_name(assign.targets[0].target)
    if name is None:
        return False
    uses = [
        c
        for c in ctx.method_calls("fit", *_LIGHTNING_EVALUATION)
        if isinstance(c.func, cst.Attribute) and dotted_name(c.func.value) == name
    ]
    return bool(uses) and all(c.func.attr.value in _LIGHTNING_EVALUATION for c in uses)  # type: ignore[union-attr]


def _is_literal(node, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _rename_keyword_of(ctx: FileContext, value: cst.BaseExpression, new: str) -> Edit | None:
    """Rename the keyword or dict key that ``value`` is passed under: ``fp16=v`` in a call or
    ``dict(...)``, or ``"fp16": v`` in a dict literal."""
    holder = ctx.parent.get(value)
    if isinstance(holder, cst.Arg) and holder.keyword is not None and holder.value is value:
        return Edit(holder.keyword, cst.Name(new))
    if isinstance(holder, cst.DictElement) and isinstance(holder.key, cst.SimpleString) and holder.value is value:
        return Edit(holder.key, string_like(holder.key, new))
    return None


# -- ADV204 ----------------------------------------------------------------------------------------

# A test of a scaler's class, by ``isinstance`` or by ``type(...) is``, against the name
# ``GradScaler`` (bare, or under ``torch.cuda.amp``).
_SCALER_CLASS_TEST = re.compile(
    rb"(?:isinstance\([^()\n]*,\s*\(?[^()\n]*|type\([^()\n]*\)\s*(?:is|==)\s*)(?:torch\.cuda\.amp\.|amp\.)?GradScaler\b"
)


def _old_scaler_class_checked(ctx: FileContext) -> str | None:
    """Where the project (this file, or another that imports ``torch.cuda.amp``) tests a
    scaler's class against ``torch.cuda.amp.GradScaler``, the first such file; None otherwise."""
    for path, text in ctx.texts_with(_SCALER_CLASS_TEST, b"GradScaler"):
        if b"cuda.amp" in text:
            return f"`{os.path.basename(path)}`"
    return None

class DeprecatedAmpApi(Rule):
    code = "ADV204"
    name = "deprecated-amp-api"
    summary = "`torch.cuda.amp.autocast` / `torch.cuda.amp.GradScaler` are deprecated."
    guide = GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        Since PyTorch 2.4, `torch.cuda.amp.autocast(...)` and `torch.cuda.amp.GradScaler(...)`
        emit a `FutureWarning`: they are thin wrappers kept for old code, and the
        device-generic `torch.autocast("cuda", ...)` / `torch.amp.GradScaler("cuda", ...)`
        replace them with the same behaviour. Moving now keeps the *Mixed precision
        training* setup working when the wrappers are removed, and makes the device (and
        the dtype choice of ADV201) explicit.
    """
    example = """
        from torch.cuda.amp import autocast, GradScaler
        scaler = GradScaler()
        with autocast(dtype=torch.bfloat16):
            loss = model(x)
    """
    use_instead = """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
    """
    silent_when = """
        - the code already uses `torch.autocast` / `torch.amp.GradScaler`;
        - `torch.cpu.amp` or other device-specific modules (not this rule's API);
        - the old API is a compatibility fallback for old torch: in the `except` of a `try`
          that uses the new one, or under a version or feature test (`hasattr(torch, "amp")`),
          or a name imported from `torch.amp` in a `try` and from `torch.cuda.amp` only in its
          `except`.

        (advice, no fix) the project pins or caps torch below 2.4 (`torch==1.12.1`, a CUDA
        build, a container or a Python whose newest torch is older), where the old API is
        current and emits no warning: the rename gains nothing until the upgrade.

        `torch.amp.GradScaler` needs PyTorch 2.3 or newer, `torch.autocast` 1.10.
        Positional arguments are passed on by name (`torch.cuda.amp.autocast(True)` becomes
        `torch.autocast("cuda", enabled=True)`); an autocast called with `*args` is
        reported without a fix. The `from torch.cuda.amp import ...` line goes once
        nothing else uses the names it binds.
    """
    valid = [
        Valid(
            """
            import torch
            from transformers.pytorch_utils import is_torch_greater_or_equal_than_1_10
            if is_torch_greater_or_equal_than_1_10:
                ctx_manager = torch.autocast("cuda", dtype=amp_dtype)
            else:
                ctx_manager = torch.cuda.amp.autocast()
            """,
            note="the fallback for old torch under a library's version flag (ChatGLM's trainer)",
        ),
        Valid(
            """
            import torch
            try:
                scaler = torch.amp.GradScaler(device="cuda")
            except (AttributeError, TypeError):
                scaler = torch.cuda.amp.GradScaler()
            """,
            note="a fallback for torch releases without the new API",
        ),
        Valid(
            """
            import torch
            try:
                from torch.amp import GradScaler, autocast
            except ImportError:
                from torch.cuda.amp import GradScaler, autocast

            with autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            """,
            note="the new API imported where it exists, the old one only as the fallback (the CryoET winners' train.py)",
        ),
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            """,
        ),
        Valid(
            """
            import torch
            with torch.cpu.amp.autocast():
                loss = model(x)
            """,
            note="CPU autocast is not this rule's API",
        ),
        Valid(
            """
            from torch.amp import autocast, GradScaler
            scaler = GradScaler()
            with autocast("cuda"):
                loss = model(x)
            """,
        ),
    ]
    invalid = [
        Invalid(
            """
            def old_scaler():
                from torch.cuda.amp import GradScaler
                return GradScaler()

            def new_scaler():
                from torch.amp import GradScaler
                return GradScaler("cuda")
            """,
            fixed="""
            import torch
            def old_scaler():
                from torch.cuda.amp import GradScaler
                return torch.amp.GradScaler("cuda")

            def new_scaler():
                from torch.amp import GradScaler
                return GradScaler("cuda")
            """,
            note="`GradScaler` names torch.amp's class only in the other function (tests/test_fuzz.py: the fix used to loop)",
        ),
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler(init_scale=2.0**14)
            with torch.cuda.amp.autocast(dtype=torch.bfloat16):
                loss = model(x)
            """,
            fixed="""
            import torch
            scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            """,
            count=2,
        ),
        Invalid(
            """
            from torch.cuda.amp import autocast, GradScaler
            scaler = GradScaler()
            for x in loader:
                with autocast():
                    loss = model(x)
                scaler.scale(loss).backward()
            """,
            fixed="""
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for x in loader:
                with torch.autocast("cuda"):
                    loss = model(x)
                scaler.scale(loss).backward()
            """,
            count=2,
        ),
        Invalid(
            """
            import torch as T
            from torch.cuda import amp
            with amp.autocast(True, T.float16):
                loss = model(x)
            """,
            fixed="""
            import torch as T
            from torch.cuda import amp
            with T.autocast("cuda", enabled=True, dtype=T.float16):
                loss = model(x)
            """,
        ),
        Invalid(
            """
            import torch
            with torch.cuda.amp.autocast(
                enabled=use_amp,
                dtype=torch.bfloat16,
            ):
                loss = model(x)
            """,
            fixed="""
            import torch
            with torch.autocast(
                "cuda",
                enabled=use_amp,
                dtype=torch.bfloat16,
            ):
                loss = model(x)
            """,
        ),
        Invalid(
            """
            import torch
            with torch.cuda.amp.autocast(*amp_args):
                loss = model(x)
            """,
            fixed=None,
            note="positional arguments unknown: no fix",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.calls(CUDA_AUTOCAST, CUDA_SCALER):
            if self._compatibility_fallback(ctx, call):
                continue
            if ctx.qualname(call.func) == CUDA_AUTOCAST:
                message = "`torch.cuda.amp.autocast(...)` is deprecated: use `torch.autocast(\"cuda\", ...)`"
                fix = self._autocast_fix(ctx, call)
            else:
                message = "`torch.cuda.amp.GradScaler(...)` is deprecated: use `torch.amp.GradScaler(\"cuda\", ...)`"
                fix = self._scaler_fix(ctx, call)
            finding = self.report(call, _message(message), fix)
            checked = _old_scaler_class_checked(ctx) if fix is not None and ctx.qualname(call.func) == CUDA_SCALER else None
            if checked is not None:
                # UPT's trainers test ``self.grad_scaler`` against the ``GradScaler`` they import
                # from ``torch.cuda.amp``: the new scaler is that class's base, and the test fails.
                finding.as_advice(
                    f"{checked} tests for the old class, which a `torch.amp.GradScaler` is not (it is its base "
                    f"class): change those tests to `torch.amp.GradScaler` with it; the fix is left as advice"
                )
                yield finding
                continue
            older = runs_only_below(ctx, "2.4") if fix is not None else None
            if older is not None:
                # Medical-SAM-Adapter's torch==1.12.1: no warning there, and the new names are
                # the same classes; the rename waits for the upgrade that deprecates the old ones.
                finding.as_advice(
                    f"the deprecation comes with torch 2.4 and {older}, where the old API is current, "
                    f"so the rename is left as advice"
                )
            yield finding

    @staticmethod
    def _compatibility_fallback(ctx: FileContext, call: cst.Call) -> bool:
        """The old API kept on purpose for old torch: in the ``except`` of a ``try`` that uses
        the new one (``except (AttributeError, TypeError):``), or under a version or feature
        test (``if hasattr(torch, "amp")``, ``torch.__version__``). Rewriting it would make the
        fallback call the very API whose absence it handles."""
        for ancestor in ctx.ancestors(call):
            if isinstance(ancestor, cst.ExceptHandler):
                return True
            if isinstance(ancestor, (cst.If, cst.IfExp)):
                if _VERSION_TEST.search(ctx.code(ancestor.test)):
                    return True
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                break
        if isinstance(call.func, cst.Name):
            # ``try: from torch.amp import autocast / except: from torch.cuda.amp import autocast``
            # (the CryoET winners' train.py): the name is the new API wherever it exists, and
            # ``autocast('cuda')`` already passes the device.
            imports = [b.node for b in ctx.lookup(call.func.value, call) if isinstance(b.node, cst.ImportFrom)]
            modules = {dotted_name(node.module) for node in imports if node.module is not None}
            if len(imports) > 1 and modules - {"torch.cuda.amp", "torch.cuda.amp.autocast_mode", "torch.cuda.amp.grad_scaler"}:
                return True
        return False

    def _autocast_fix(self, ctx: FileContext, call: cst.Call):
        args = []
        for index, arg in enumerate(call.args):
            if arg.star:
                return None
            if arg.keyword is None:
                if index >= len(CUDA_AUTOCAST_PARAMETERS):
                    return None
                arg = arg.with_changes(
                    keyword=cst.Name(CUDA_AUTOCAST_PARAMETERS[index]),
                    equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
                    ),
                )
            args.append(arg)
        func, imports = ctx.reference(AUTOCAST, call)
        return self._device_first(ctx, call, func, args, imports, 'Use `torch.autocast("cuda", ...)`', "1.10")

    def _scaler_fix(self, ctx: FileContext, call: cst.Call):
        # torch.amp.GradScaler takes ``device`` first and then the same parameters in order.
        func, imports = ctx.reference(AMP_SCALER, call)
        return self._device_first(ctx, call, func, list(call.args), imports, 'Use `torch.amp.GradScaler("cuda", ...)`', "2.3")

    def _device_first(self, ctx, call, func, args, imports, description, since: str):
        if isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
            separator = cst.Comma(whitespace_after=call.whitespace_before_args)  # one argument a line
        else:
            separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        device = cst.Arg(cst.SimpleString('"cuda"'), comma=separator if args else cst.MaybeSentinel.DEFAULT)
        edits = [Edit(call, call.with_changes(func=func, args=[device, *args]))]
        import_edit = drop_import_of(ctx, call.func)
        if import_edit is not None:
            edits.append(import_edit)
        return self.fix(description, *edits, imports=imports, requires=[("torch", since)])


# -- ADV205 ----------------------------------------------------------------------------------------
class GradScalerWithBf16(Rule):
    code = "ADV205"
    name = "gradscaler-with-bf16"
    summary = "A GradScaler in a file whose autocast runs in bf16."
    guide = GUIDE
    fix_applicability = Applicability.SAFE
    why = """
        Loss scaling exists because fp16 gradients underflow. bf16 has fp32's exponent
        range, so the guide's GPU page notes that bf16 needs no "loss scaling methods like
        you would with fp16" (*Mixed precision training*, bf16). A GradScaler next to bf16
        autocast still multiplies the loss, unscales every gradient, checks them all for
        inf/NaN and synchronises with the host each step: pure overhead.
    """
    example = """
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """
    use_instead = """
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
        loss.backward()
        optimizer.step()
    """
    silent_when = """
        - any autocast in the file may run in float16 (dtype unknown, default fp16 on CUDA,
          or a bf16/fp16 choice made at run time);
        - the scaler is disabled or only enabled for fp16: `GradScaler(enabled=False)`,
          `GradScaler(enabled=(dtype == "float16"))` (nanoGPT) is correct code, and so is a
          scaler created under `if args.fp16:`;
        - there is no bf16 autocast at all;
        - the scaler may serve code outside the file: passed to a function imported from
          elsewhere, stored in a container, created conditionally.

        The fix removes the scaler when its only uses are `scale(loss).backward()`,
        `step(opt)`, `update()` and `unscale_(opt)`; a scaler that is checkpointed, queried
        or passed on is reported without a fix.
    """
    valid = [
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x)
            scaler.scale(loss).backward()
            """,
        ),
        Valid(
            """
            import torch
            dtype = 'bfloat16' if torch.cuda.is_bf16_supported() else 'float16'
            ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
            ctx = torch.amp.autocast(device_type='cuda', dtype=ptdtype)
            scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
            with ctx:
                loss = model(x)
            scaler.scale(loss).backward()
            """,
            note="nanoGPT: the scaler only runs for float16",
        ),
        Valid(
            """
            import torch
            dtype = torch.bfloat16
            scaler = torch.cuda.amp.GradScaler(enabled=(dtype == torch.float16))
            with torch.autocast("cuda", dtype=dtype):
                loss = model(x)
            scaler.scale(loss).backward()
            """,
            note="enabled only for float16",
        ),
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda", enabled=False)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            scaler.scale(loss).backward()
            """,
        ),
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            with torch.autocast("cuda"):
                aux = head(x)
            scaler.scale(loss + aux).backward()
            """,
            note="another autocast runs in float16",
        ),
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=amp_dtype):
                loss = model(x)
            scaler.scale(loss).backward()
            """,
            note="dtype unknown",
        ),
        Valid(
            """
            import torch
            scaler = None
            if args.fp16:
                scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            loss.backward()
            """,
            note="a scaler kept for an fp16 path",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x, y)
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            """,
            fixed="""
            import torch
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x, y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            """,
        ),
        Invalid(
            """
            import torch
            from torch.amp import GradScaler
            AMP_DTYPE = torch.bfloat16
            scaler = GradScaler()
            for x in loader:
                with torch.autocast(device_type="cuda", dtype=AMP_DTYPE):
                    loss = model(x)
                scaler.scale(loss).backward()
                if clip:
                    scaler.unscale_(opt)
                scaler.step(opt)
                scaler.update()
            """,
            fixed="""
            import torch
            AMP_DTYPE = torch.bfloat16
            for x in loader:
                with torch.autocast(device_type="cuda", dtype=AMP_DTYPE):
                    loss = model(x)
                loss.backward()
                if clip:
                    pass
                opt.step()
            """,
        ),
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            print(scaler.get_scale())
            """,
            fixed=None,
            note="the scaler is queried: reported without a fix",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        scalers = scaler_calls(ctx)
        if not scalers:
            return
        sites = autocasts(ctx)
        if not any(site.bf16 and not site.certainly_not_cuda for site in sites):
            return
        if not all(site.bf16 or site.certainly_not_cuda for site in sites):
            return
        for scaler in scalers:
            qualname = ctx.qualname(scaler.func) or ""
            enabled = ctx.argument(scaler, "enabled", SCALER_ENABLED_POSITION.get(qualname))
            if enabled is None:
                continue
            if enabled is not MISSING:
                value = ctx.values.resolve(enabled)
                if value is None or value.value is not True:
                    continue
            if under_fp16_choice(ctx, scaler):
                continue  # ``if args.fp16: scaler = GradScaler()``: kept for an fp16 path
            usage = scaler_usage(ctx, scaler)
            if usage.escapes:
                continue  # it may serve float16 code this file cannot see
            fix = self.fix("Remove the GradScaler", *usage.removal) if usage.removal else None
            message = "GradScaler with bf16 autocast: bf16 needs no loss scaling; remove the scaler"
            if fix is None:
                message += " and every use of it"
            yield self.report(scaler, _message(message), fix)


# -- building code in the file's own style --------------------------------------------------------
def _spell(ctx: FileContext, qualname: str, at: cst.CSTNode) -> tuple[cst.BaseExpression, tuple[str, ...]] | None:
    """``qualname`` as the file spells it where ``at`` runs, and the module to import when the
    name the file would use is not bound there (``import torch`` only inside another function).
    None when the module's own name is bound to something else there."""
    local = ctx.imports.local_name_for(qualname)
    if local is not None and ctx.imported_at(local.split(".")[0], at):
        return cst.parse_expression(local), ()
    module = qualname.split(".")[0]
    if ctx.lookup(module, at):
        return None
    return cst.parse_expression(qualname), (module,)


def _import_block_end(ctx: FileContext) -> cst.CSTNode | None:
    """The last statement of the module's leading imports (``try:``/``if`` blocks of imports
    included), before the first definition, loop or ``__main__`` guard."""
    last = None
    for statement in ctx.module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            if all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body):
                last = statement
            continue
        if isinstance(statement, (cst.Try, cst.If)) and statement not in ctx.main_guards:
            if ctx.walk(statement, cst.Import) or ctx.walk(statement, cst.ImportFrom):
                last = statement
            continue
        break
    return last


def _bound_before(ctx: FileContext, head: str, anchor: cst.CSTNode) -> bool:
    """Whether a module-level import at or before ``anchor`` binds ``head``."""
    return any(
        isinstance(binding.node, (cst.Import, cst.ImportFrom)) and ctx.order[binding.node] <= ctx.end_order[anchor]
        for binding in ctx.bindings.get((id(ctx.module), head), ())
    )


# -- ADV202 ----------------------------------------------------------------------------------------
class Tf32Disabled(Rule):
    code = "ADV202"
    name = "tf32-disabled"
    summary = "fp32 matmuls trained on an Ampere-or-newer GPU with TF32 never enabled."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        Since PyTorch 1.12 fp32 matrix multiplications (`nn.Linear`, attention, `@`) run in
        full IEEE fp32 on the CUDA cores unless TF32 is allowed. The guide's *Mixed precision
        training* section (TF32): on Ampere or newer GPUs, TF32 keeps fp32's range with a
        10-bit mantissa and gives "up to 3x throughput improvement" for "the normal fp32
        training" code, with the same convergence in "the majority of machine learning
        training workloads". One line turns it on; cuDNN convolutions already use it by default.
    """
    example = """
        import torch
        model = Transformer().cuda()
        for x, y in loader:
            loss = loss_fn(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    use_instead = """
        import torch
        torch.set_float32_matmul_precision("high")
        model = Transformer().cuda()
        ...

        # Trainer: the same line; `TrainingArguments(tf32=True)` would raise on a
        # machine without an Ampere GPU (CPU CI)
    """
    silent_when = """
        - the file mentions TF32 at all: `torch.backends.cuda.matmul.allow_tf32 = ...`,
          `torch.set_float32_matmul_precision(...)`, `fp32_precision`, `tf32=` for the
          Trainer, a `--tf32` flag: enabled, disabled on purpose, or set from a value that
          cannot be read;
        - the target GPU has no TF32 (`--gpu V100`, `--gpu T4`);
        - the training is not known to run in fp32: any autocast, bf16/fp16 setting, GradScaler,
          `.half()`, half-precision or quantized weights, apex, DeepSpeed, or a precision that
          is decided outside the file (`TrainingArguments(**vars(args))`, `HfArgumentParser`,
          `LightningCLI`, an `Accelerator()` in a script that says it runs under `accelerate
          launch`). Under mixed precision the matmuls already run in bf16/fp16, so TF32 adds
          little (ADV203 is the advice for fp32 training). An `Accelerator()` that does not
          set `mixed_precision` in a script that does not name the launcher trains in fp32
          under plain `python`: it is reported, the message saying that a launcher config
          with mixed precision or a dynamo backend would make the line unnecessary;
        - Accelerate with a dynamo backend set in the file (`Accelerator(dynamo_backend=...)`)
          turns TF32 on itself for fp32 training; the Trainer with `torch_compile=True` too;
        - the model has no fp32 matmuls to speak of: a conv net with a linear head or whose
          only matrix products apply camera geometry (`torch.matmul(intrinsics, extrinsics)`,
          a multi-view stereo net's homography warping: TF32 would round them), a model
          the file does not build (imported from elsewhere), a toy whose layers are at most 64
          wide, reinforcement learning or meta-learning networks (gym, learn2learn, ...);
        - nothing trains on CUDA in the file: CPU-only scripts, inference-only scripts.

        One finding per file for PyTorch code (at the first training loop or Lightning
        `Trainer`); the fix inserts `torch.set_float32_matmul_precision("high")` after the
        imports, for the Trainer too: `TrainingArguments(tf32=True)` raises where no Ampere GPU
        is found, as in CPU CI that runs the same script. Where a Python file of the project
        that loads modules by name sets TF32 (mammoth's `main.py`, under its `-O` switch, for
        the model modules it imports through `importlib`), the finding is advice: a line at
        this module's import would override the project's switch for every run that loads it;
        so it is where a file of the project turns TF32 off on purpose (`allow_tf32 = False`,
        the "highest" precision: edm2's training loop), a numerics choice the authors made.
        It is advice too where the file's networks are small dense ones it builds itself (only
        `Linear` and recurrent layers of sizes it gives, under a million parameters, none wider
        than 1024: an MNIST MLP): their steps wait on kernel launches, not on the matmuls.
    """
    valid = [
        Valid(
            """
            import torch
            torch.backends.cuda.matmul.allow_tf32 = True
            model = torch.nn.Linear(1024, 1024).cuda()
            for x, y in loader:
                loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
        Valid(
            """
            import torch

            def main(args):
                if args.tf32:
                    torch.backends.cuda.matmul.allow_tf32 = True
                model = torch.nn.Linear(1024, 1024).cuda()
                for x, y in loader:
                    loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
                    loss.backward()
                    optimizer.step()
            """,
            note="TF32 behind a flag: the author's choice",
        ),
        Valid(
            """
            import torch
            torch.backends.cuda.matmul.allow_tf32 = False
            model = torch.nn.Linear(1024, 1024).cuda()
            for x, y in loader:
                loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
                loss.backward()
                optimizer.step()
            """,
            note="disabled on purpose (reproducibility)",
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(1024, 1024).cuda()
            for x, y in loader:
                loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
                loss.backward()
                optimizer.step()
            """,
            gpu="V100",
            note="no TF32 on Volta",
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(1024, 1024).cuda()
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
                loss.backward()
                optimizer.step()
            """,
            note="bf16 autocast: the matmuls run in bf16",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            device = torch.device("cpu")
            model = nn.Linear(1024, 1024).to(device)
            for x, y in loader:
                loss = (model(x.to(device)) - y.to(device)).pow(2).mean()
                loss.backward()
                optimizer.step()
            """,
            note="CPU only",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU(), nn.Flatten(), nn.Linear(64 * 30 * 30, 10)).cuda()
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="a conv net: cuDNN convolutions already use TF32",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class DepthNet(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.features = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 1, 3, padding=1))

                def forward(self, images, intrinsics, extrinsics):
                    proj = torch.matmul(intrinsics, extrinsics[:, :3, :4])
                    return warp(self.features(images), proj)

            model = DepthNet().cuda()
            for images, intrinsics, extrinsics, depth in loader:
                loss = (model(images.cuda(), intrinsics.cuda(), extrinsics.cuda()) - depth.cuda()).abs().mean()
                loss.backward()
                optimizer.step()
            """,
            note="a conv net whose only products apply camera geometry: 4x4 matrices, which TF32 would round (PatchmatchNet)",
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(1024, 1024).cuda().eval()
            with torch.no_grad():
                for x in loader:
                    print(model(x.cuda()))
            """,
            note="inference only",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments
            (training_args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            Trainer(model=model, args=training_args, train_dataset=ds).train()
            """,
            note="TrainingArguments from the command line",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            args = TrainingArguments("out", bf16=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            note="bf16 mixed precision",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            args = TrainingArguments("out", torch_compile=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            note="transformers enables TF32 for torch.compile",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2")
            args = TrainingArguments(**vars(cli_args))
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
            note="settings unknown",
        ),
        Valid(
            """
            \"\"\"Run with `accelerate launch train.py` after `accelerate config`.\"\"\"
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator()
            model, optimizer, loader = accelerator.prepare(torch.nn.Linear(1024, 1024), optimizer, loader)
            for x, y in loader:
                loss = (model(x) - y).pow(2).mean()
                accelerator.backward(loss)
                optimizer.step()
            """,
            note="the file says it runs under `accelerate launch`: its config decides the precision",
        ),
        Valid(
            """
            from lightning.pytorch.cli import LightningCLI
            LightningCLI(TransformerModule, DataModule, trainer_defaults={"accelerator": "gpu"})
            """,
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            for x, y in loader:
                loss = loss_fn(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="the model is built elsewhere: its layers are unknown",
        ),
        Valid(
            """
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator(mixed_precision="no", dynamo_backend="inductor")
            model, optimizer, loader = accelerator.prepare(torch.nn.Linear(1024, 1024), optimizer, loader)
            for x, y in loader:
                loss = (model(x) - y).pow(2).mean()
                accelerator.backward(loss)
                optimizer.step()
            """,
            note="Accelerate turns TF32 on itself for fp32 training with a dynamo backend",
        ),
        Valid(
            """
            import gymnasium as gym
            import torch
            import torch.nn as nn
            policy = nn.Sequential(nn.Linear(obs_dim, 256), nn.Tanh(), nn.Linear(256, n_actions)).to("cuda")
            for update in range(num_updates):
                loss = policy(obs.cuda()).mean()
                loss.backward()
                optimizer.step()
            """,
            note="reinforcement learning: small networks, environment-bound steps",
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(20, 1).to("cuda")
            for x, y in loader:
                loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
                loss.backward()
                optimizer.step()
            """,
            note="a toy model: the matmuls are too small to matter",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator()
            model, optimizer, loader = accelerator.prepare(torch.nn.Linear(1024, 1024), optimizer, loader)
            for x, y in loader:
                loss = (model(x) - y).pow(2).mean()
                accelerator.backward(loss)
                optimizer.step()
            """,
            fixed="""
            import torch
            from accelerate import Accelerator

            torch.set_float32_matmul_precision("high")
            accelerator = Accelerator()
            model, optimizer, loader = accelerator.prepare(torch.nn.Linear(1024, 1024), optimizer, loader)
            for x, y in loader:
                loss = (model(x) - y).pow(2).mean()
                accelerator.backward(loss)
                optimizer.step()
            """,
            unsafe=True,
            note="`Accelerator()` without `mixed_precision`: fp32 under plain `python` (harmless under a launcher that sets bf16)",
        ),
        Invalid(
            """
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator(mixed_precision="no")
            model, optimizer, loader = accelerator.prepare(torch.nn.Linear(1024, 1024), optimizer, loader)
            for x, y in loader:
                loss = (model(x) - y).pow(2).mean()
                accelerator.backward(loss)
                optimizer.step()
            """,
            fixed="""
            import torch
            from accelerate import Accelerator

            torch.set_float32_matmul_precision("high")
            accelerator = Accelerator(mixed_precision="no")
            model, optimizer, loader = accelerator.prepare(torch.nn.Linear(1024, 1024), optimizer, loader)
            for x, y in loader:
                loss = (model(x) - y).pow(2).mean()
                accelerator.backward(loss)
                optimizer.step()
            """,
            unsafe=True,
            note="fp32 through Accelerate with no dynamo backend in the file (with one, Accelerate enables TF32 itself)",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
            for x, y in loader:
                loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            fixed="""
            import torch
            import torch.nn as nn

            torch.set_float32_matmul_precision("high")

            model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
            for x, y in loader:
                loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            \"\"\"Train a tiny attention model.\"\"\"
            import torch as T
            from torch.nn import functional as F
            try:
                import wandb
            except ImportError:
                wandb = None


            def train(model, loader, optimizer, device="cuda"):
                for q, k, v, target in loader:
                    out = F.scaled_dot_product_attention(q.to(device), k.to(device), v.to(device))
                    loss = F.mse_loss(model(out), target.to(device))
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            fixed="""
            \"\"\"Train a tiny attention model.\"\"\"
            import torch as T
            from torch.nn import functional as F
            try:
                import wandb
            except ImportError:
                wandb = None

            T.set_float32_matmul_precision("high")


            def train(model, loader, optimizer, device="cuda"):
                for q, k, v, target in loader:
                    out = F.scaled_dot_product_attention(q.to(device), k.to(device), v.to(device))
                    loss = F.mse_loss(model(out), target.to(device))
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
            """,
            note="the file's own alias; after a try/except import block",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4096, 4096)

            def train_a(model, loader, opt):
                for x in loader:
                    model(x.cuda()).sum().backward()
                    opt.step()

            def train_b(model, loader, opt):
                for x in loader:
                    model(x.cuda()).mean().backward()
                    opt.step()
            """,
            fixed="""
            import torch
            import torch.nn as nn

            torch.set_float32_matmul_precision("high")

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4096, 4096)

            def train_a(model, loader, opt):
                for x in loader:
                    model(x.cuda()).sum().backward()
                    opt.step()

            def train_b(model, loader, opt):
                for x in loader:
                    model(x.cuda()).mean().backward()
                    opt.step()
            """,
            note="two training loops: one finding for the file",
        ),
        Invalid(
            """
            from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

            model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased", num_labels=2)
            args = TrainingArguments(
                output_dir="out",
                per_device_train_batch_size=32,
            )
            trainer = Trainer(model=model, args=args, train_dataset=train_ds)
            trainer.train()
            """,
            fixed="""
            from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments
            import torch

            torch.set_float32_matmul_precision("high")

            model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased", num_labels=2)
            args = TrainingArguments(
                output_dir="out",
                per_device_train_batch_size=32,
            )
            trainer = Trainer(model=model, args=args, train_dataset=train_ds)
            trainer.train()
            """,
        ),
        Invalid(
            """
            import lightning as L
            import torch.nn as nn

            class Regressor(L.LightningModule):
                def __init__(self):
                    super().__init__()
                    self.net = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1))

            trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=10)
            trainer.fit(Regressor(), train_loader)
            """,
            fixed="""
            import lightning as L
            import torch.nn as nn
            import torch

            torch.set_float32_matmul_precision("high")

            class Regressor(L.LightningModule):
                def __init__(self):
                    super().__init__()
                    self.net = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1))

            trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=10)
            trainer.fit(Regressor(), train_loader)
            """,
            note="Lightning's default precision is 32-true; torch is imported for the fix",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.target.tf32 or not ctx.facts.frameworks.gpu_sites or tf32_configured(ctx):
            return
        if ctx.facts.devices.library_module and not any(model.builds for model in trained_models(ctx)):
            return  # the model comes from the scripts importing this module: the process-wide setting goes there
        if not fp32_matmul_model(ctx) or small_network_training(ctx):
            return
        reported_torch = False
        for site in ctx.facts.frameworks.gpu_sites:
            launcher = site.kind == ACCELERATE and precision_left_to_launcher(ctx, site)
            if not launcher and not trains_in_fp32(ctx, site):
                continue
            if site.kind == ACCELERATE and _accelerate_compiles(ctx, site):
                continue  # Accelerate turns TF32 on itself for fp32 training with a dynamo backend
            if site.kind == HF_TRAINER:
                assert site.config is not None
                if trainer_compiles(ctx, site.config):
                    continue
                if reported_torch:
                    continue
                reported_torch = True
                # ``TrainingArguments(tf32=True)`` raises where no Ampere GPU is found (CPU CI runs
                # the same script): the process-wide setting gives the same matmuls and never raises.
                message = (
                    f"fp32 training on {ctx.target.name} without TF32: add "
                    '`torch.set_float32_matmul_precision("high")` to let matmuls use the TF32 tensor cores '
                    "(up to 3x faster); unlike `tf32=True`, it does not raise on a machine without an Ampere GPU"
                )
                yield self._with_project_policy(ctx, self.report(site.config, _message(message), self._torch_fix(ctx)))
            elif not reported_torch:
                reported_torch = True
                message = (
                    f"fp32 matmuls trained on {ctx.target.name} with TF32 never enabled: add "
                    '`torch.set_float32_matmul_precision("high")` to use the TF32 tensor cores (up to 3x faster)'
                )
                if site.kind == ACCELERATE:
                    message = (
                        f"fp32 matmuls trained through Accelerate on {ctx.target.name} with TF32 never enabled in "
                        "the file (unless `accelerate launch` is configured for mixed precision or a dynamo backend): "
                        'add `torch.set_float32_matmul_precision("high")` to use the TF32 tensor cores (up to 3x faster)'
                    )
                yield self._with_project_policy(ctx, self.report(site.anchor, _message(message), self._torch_fix(ctx)))

    @staticmethod
    def _with_project_policy(ctx: FileContext, finding: Finding) -> Finding:
        """Advice where another module of the project sets TF32: a setting here at import time
        would override the project's own switch for every run that loads this module."""
        if finding.fix is not None:
            elsewhere = tf32_set_elsewhere(ctx)
            if elsewhere is not None:
                finding.as_advice(f"`{elsewhere}` sets TF32 for the project, so the fix is left as advice")
            else:
                off = tf32_turned_off_in_project(ctx)
                if off is not None:
                    finding.as_advice(f"`{off}` turns TF32 off on purpose, so the fix is left as advice")
        return _unless_small(ctx, finding, "TF32")

    def _torch_fix(self, ctx: FileContext):
        anchor = _import_block_end(ctx)
        if anchor is None:
            return None
        local = ctx.imports.local_name_for("torch.set_float32_matmul_precision")
        imports: tuple[str, ...] = ()
        if local is None or not _bound_before(ctx, local.split(".")[0], anchor):
            local, imports = "torch.set_float32_matmul_precision", ("torch",)
            if (id(ctx.module), "torch") in ctx.bindings:
                return None  # ``torch`` is bound at module level to something we cannot place
        line = cst.parse_statement(f'{local}("high")\n').with_changes(leading_lines=[cst.EmptyLine()])
        return self.fix(
            'Insert `torch.set_float32_matmul_precision("high")` after the imports',
            Edit(anchor, cst.FlattenSentinel([anchor, line])),
            imports=imports,
            requires=[("torch", "1.12")],
        )


_ASSIGNMENTS = (cst.Assign, cst.AnnAssign, cst.AugAssign)
# ``TrainingArguments(bf16=...)``: transformers 4.13 (huggingface/transformers#13207, December 2021).
_TRAINER_BF16 = ("transformers", "4.13")


def _unless_small(ctx: FileContext, finding: Finding, precision: str) -> Finding:
    """Advice where the file trains only a small dense network (:func:`small_dense_network`):
    its steps wait on kernel launches, where the tensor cores would not show."""
    small = small_dense_network(ctx) if finding.fix is not None else None
    if small is not None:
        parameters, widest = small
        finding.as_advice(
            f"the network is small (about {parameters:,} parameters, no layer wider than {widest}): its steps wait on "
            f"kernel launches more than on arithmetic, where {precision} would not show, so the fix is left as advice"
        )
    return finding


def autocast_region(ctx: FileContext, loop: TrainingLoop) -> list[cst.SimpleStatementLine] | None:
    """The statements of ``loop``'s body that run the forward pass and the loss, when they
    can be told for certain: the loop's only backward is ``loss.backward()`` (or
    ``(loss / k).backward()``) written in the loop body itself; the region ends at the last
    assignment of ``loss`` before it and starts at the first statement that calls the model
    the loop trains, every statement in between being a plain assignment line."""
    backwards = loop.of_kind("backward")
    if len(backwards) != 1 or backwards[0].via_helper is not None:
        return None
    call = backwards[0].call
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward" and not call.args):
        return None
    receiver = call.func.value
    if isinstance(receiver, cst.BinaryOperation):
        receiver = receiver.left
    loss = dotted_name(receiver)
    if loss is None:
        return None
    statement = backwards[0].statement
    block = ctx.parent.get(statement)
    if not isinstance(block, cst.IndentedBlock) or ctx.parent.get(block) is not loop.node:
        return None
    body = list(block.body)
    index = body.index(statement)
    end = next((i for i in range(index - 1, -1, -1) if binds(ctx, body[i], loss)), None)
    if end is None or not _plain_assignments(body[end]):
        return None
    modules = trained_modules(ctx, loop)
    start = None
    for i in range(end, -1, -1):
        if not _plain_assignments(body[i]):
            break
        if calls_module(ctx, body[i], modules):
            start = i
    if start is None:
        return None
    region = body[start : end + 1]
    if any(ctx.within(s, [e.call for e in loop.events]) for s in region):
        return None
    return region  # type: ignore[return-value]


def _plain_assignments(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(isinstance(s, _ASSIGNMENTS) for s in statement.body)


def _frozen_forward_before(ctx: FileContext, loop: TrainingLoop, region: list[cst.SimpleStatementLine]) -> cst.CSTNode | None:
    """The ``with torch.no_grad():`` item of the loop body, before the autocast region, that
    assigns a name the region reads: a frozen model's forward making the trained part's inputs
    (a linear probe on a backbone's features)."""
    start = ctx.order[region[0]]
    # What the region feeds to a module of the script as its input: ``linear_classifier(output)``.
    # A loss or a torch function taking the frozen output (a distillation's teacher logits) is
    # not that: there the student's own forward is in the region, and bf16 pays for it.
    fed = set()
    for statement in region:
        for call in ctx.walk(statement, cst.Call):
            first = call.args[0].value if call.args and not call.args[0].keyword and not call.args[0].star else None
            if isinstance(first, cst.Name) and not (ctx.qualname(call.func) or "").startswith("torch."):
                fed.add(first.value)
    if not fed:
        return None
    for block in ctx.walk(loop.node.body, cst.With):
        if ctx.order[block] >= start:
            continue
        managers = [item.item for item in block.items]
        if not any(ctx.qualname(m.func if isinstance(m, cst.Call) else m) in _NO_GRAD_MANAGERS for m in managers):
            continue
        for assign in ctx.walk(block.body, cst.Assign):
            if not isinstance(assign.value, cst.Call):
                continue
            assigned = {t.target.value for t in assign.targets if isinstance(t.target, cst.Name)}
            if assigned & fed:
                return managers[0]
    return None


_NO_GRAD_MANAGERS = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"})


def _wrap_in_autocast(ctx: FileContext, region: list[cst.SimpleStatementLine]) -> tuple[list[Edit], tuple[str, ...]] | None:
    """Edits that put ``region`` under ``with torch.autocast("cuda", dtype=torch.bfloat16):``,
    the comments above its first statement moving above the ``with``."""
    autocast_spelling = _spell(ctx, "torch.autocast", region[0])
    bf16_spelling = _spell(ctx, "torch.bfloat16", region[0])
    if autocast_spelling is None or bf16_spelling is None:
        return None
    (autocast, autocast_import), (bf16, bf16_import) = autocast_spelling, bf16_spelling
    header = cst.parse_statement(f'with {ctx.code(autocast)}("cuda", dtype={ctx.code(bf16)}):\n    pass\n')
    first = region[0]
    body = [first.with_changes(leading_lines=()), *region[1:]]
    wrapped = header.with_changes(body=nested_block(ctx, first, body), leading_lines=first.leading_lines)
    edits = [Edit(first, wrapped)] + [Edit(s, cst.RemoveFromParent()) for s in region[1:]]
    return edits, tuple(dict.fromkeys(autocast_import + bf16_import))


def _lightning_spelling(ctx: FileContext, bf16: bool) -> str:
    """``"bf16-mixed"`` where the file imports Lightning 2 (``lightning``), else the legacy
    spelling that every ``pytorch_lightning`` accepts."""
    modern = any(
        (dotted_name(node.module) if isinstance(node, cst.ImportFrom) and node.module else "") .startswith("lightning")
        or (isinstance(node, cst.Import) and any((dotted_name(a.name) or "").startswith("lightning") for a in node.names))
        for node in ctx.nodes(cst.Import) + ctx.nodes(cst.ImportFrom)
    )
    if bf16:
        return "bf16-mixed" if modern else "bf16"
    return "16-mixed" if modern else "16"


# -- what may run under CUDA autocast (ADV203's fixes) --------------------------------------------
# CUDA autocast registers a kernel for binary_cross_entropy that raises ("unsafe to autocast"),
# whatever the dtype: ``nn.BCELoss`` and ``F.binary_cross_entropy`` must become their
# ``...WithLogits`` twins before autocast can be turned on.
_AUTOCAST_REFUSED = frozenset({"BCELoss", "binary_cross_entropy"})
_AUTOCAST_REFUSED_ADVICE = (
    "; first replace `BCELoss` / `binary_cross_entropy`, which CUDA autocast refuses, with "
    "`BCEWithLogitsLoss` / `binary_cross_entropy_with_logits` on the logits (drop the final sigmoid)"
)
# Published libraries whose models and losses run under autocast (none calls
# binary_cross_entropy); the script's own modules are what may.
_AUTOCAST_SAFE_LIBRARIES = KNOWN_LIBRARIES | {"segmentation_models_pytorch"}
# Library calls that run arbitrary code rather than the library's own.
_FOREIGN_CODE = ("torch.hub.", "torch.jit.load")
# Library wrappers that run the module they are given.
_MODULE_WRAPPERS = (
    *DATA_PARALLEL,
    *DISTRIBUTED_DATA_PARALLEL,
    "torch.compile",
    "peft.get_peft_model",
    "peft.prepare_model_for_kbit_training",
)
_BUILTIN_NAMES = frozenset(dir(builtins)) - {"eval", "exec", "__import__", "getattr"}


def autocast_refused_loss(ctx: FileContext) -> bool:
    """Whether the file names ``BCELoss`` or ``binary_cross_entropy`` anywhere (``nn.BCELoss()``,
    ``F.binary_cross_entropy``, ``from torch.nn import BCELoss``)."""
    return any(name.value in _AUTOCAST_REFUSED for name in ctx.nodes(cst.Name))


def runs_known_code(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """Whether calling ``expr`` (or using the object it evaluates to) certainly runs only code this
    file shows or code of a published library: classes and functions defined here (and what they
    call), torch, torchvision, timm, transformers..., followed through names, ``self.`` attributes,
    function parameters (what the file's callers pass) and wrappers (DataParallel,
    ``torch.compile``, PEFT, ``accelerator.prepare``). A class or function of the script's own
    project (``from models import Darknet``, a star import, a relative import), or a parameter no
    caller in the file fills, is unknown: False."""
    return _KnownCode(ctx).expression(expr, 0, strict=True)


class _KnownCode:
    """One question of :func:`runs_known_code`. ``strict`` follows parameters to the callers;
    inside the body of a class or function of the file, parameters and locals are its data
    (``x.view(...)`` in ``forward``) and only the code it names is judged."""

    _MAX_DEPTH = 24

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.seen: set[tuple[int, bool]] = set()

    def expression(self, expr: cst.BaseExpression, depth: int, strict: bool) -> bool:
        ctx = self.ctx
        if depth > self._MAX_DEPTH:
            return False
        if isinstance(expr, cst.Call):
            return self.call(expr, depth, strict)
        if isinstance(expr, (cst.Name, cst.Attribute)):
            qualname = ctx.qualname(expr)
            if qualname is not None:
                return qualname.split(".")[0] in _AUTOCAST_SAFE_LIBRARIES and not qualname.startswith(_FOREIGN_CODE)
        if isinstance(expr, cst.Name):
            return self.name(expr, depth, strict)
        if isinstance(expr, cst.Attribute):
            spelling = dotted_name(expr) or ""
            if spelling.startswith("self."):
                return self.self_attribute(expr, ".".join(spelling.split(".")[:2]), depth, strict)
            return self.expression(expr.value, depth + 1, strict)  # a method or attribute: judged by its object
        if isinstance(expr, cst.Subscript):
            return self.expression(expr.value, depth + 1, strict)
        if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):  # ``model, config = self.model, self.config``
            return all(self.expression(element.value, depth + 1, strict) for element in expr.elements)
        if isinstance(expr, cst.IfExp):
            return self.expression(expr.body, depth + 1, strict) and self.expression(expr.orelse, depth + 1, strict)
        # Anything else (arithmetic, a lambda): judged by the callees it calls.
        return all(self.expression(call.func, depth + 1, strict) for call in ctx.walk(expr, cst.Call))

    def call(self, call: cst.Call, depth: int, strict: bool) -> bool:
        ctx = self.ctx
        if not self.expression(call.func, depth + 1, strict):
            return False
        if ctx.qualname(call.func) in _MODULE_WRAPPERS:
            wrapped = ctx.argument(call, "module", 0)
            return isinstance(wrapped, cst.BaseExpression) and self.expression(wrapped, depth + 1, strict)
        if _framework_hand_over(ctx, call):
            return all(m is not None and self.expression(m, depth + 1, strict) for m in _handed_models(call))
        if strict and isinstance(call.func, cst.Name) and any(
            isinstance(b.node, cst.FunctionDef) for b in ctx.lookup(call.func.value, call.func)
        ):
            # ``compute_loss(model, batch)``: the helper runs what it is given
            return all(self.expression(arg.value, depth + 1, strict) for arg in call.args)
        return True

    def name(self, name: cst.Name, depth: int, strict: bool) -> bool:
        bindings = self.ctx.lookup(name.value, name)
        if not bindings:
            if name.value == "getattr":  # ``getattr(models, args.arch)``: judged by the namespace
                call = self.ctx.parent.get(name)
                return (
                    isinstance(call, cst.Call) and bool(call.args) and self.expression(call.args[0].value, depth + 1, strict)
                )
            return name.value in _BUILTIN_NAMES
        return all(self.binding(b.node, b.value, depth + 1, strict) for b in bindings)

    def binding(self, node: cst.CSTNode, value: cst.BaseExpression | None, depth: int, strict: bool) -> bool:
        key = (id(node), strict)
        if key in self.seen:
            return True  # ``model = model.to(device)``, recursion: judged by the rest
        self.seen.add(key)
        if isinstance(node, (cst.ClassDef, cst.FunctionDef)):
            # Defined here: known when all the code it names is (``self.backbone = Darknet()`` is not).
            bases = [base.value for base in node.bases if base.keyword is None] if isinstance(node, cst.ClassDef) else []
            return all(self.expression(base, depth + 1, False) for base in bases) and all(
                self.expression(call.func, depth + 1, False) for call in self.ctx.walk(node, cst.Call)
            )
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            return False  # the import table resolves a library: this is a relative import
        if isinstance(node, cst.Param):
            return self.parameter(node, depth, strict) if strict else True
        if value is not None:
            return self.expression(value, depth + 1, strict)
        if isinstance(node, (cst.Assign, cst.AnnAssign, cst.NamedExpr)) and node.value is not None:
            return self.expression(node.value, depth + 1, strict)  # unpacked: judged by the whole value
        return True  # a loop target, ``with ... as``, ``+=``: data, not code

    def parameter(self, param: cst.Param, depth: int, strict: bool) -> bool:
        """What the file's callers pass for ``param``; unknown when nothing in the file calls it."""
        ctx = self.ctx
        function = ctx.scope_of.get(param)
        if not isinstance(function, cst.FunctionDef):
            return False
        positional = list(function.params.params)
        index = next((i for i, p in enumerate(positional) if p is param), None)
        owner = ctx.enclosing(function, cst.ClassDef)
        callee = function.name.value
        if owner is not None:
            if index == 0:
                return False  # ``self``: its attributes are judged by :meth:`self_attribute`
            index = None if index is None else index - 1
            if callee == "__init__":
                callee = owner.name.value  # type: ignore[attr-defined]
        passed: list[cst.BaseExpression] = []
        for call in ctx.nodes(cst.Call):
            func = call.func
            if owner is None or callee != function.name.value:
                called = func.value if isinstance(func, cst.Name) else None  # a function, or a class
            else:
                called = func.attr.value if isinstance(func, cst.Attribute) else None  # ``self.fit(...)``
            if called != callee:
                continue
            argument = ctx.argument(call, param.name.value, index)
            if argument is None:
                return False
            if argument is MISSING:
                if param.default is None:
                    return False
                argument = param.default
            passed.append(argument)
        return bool(passed) and all(self.expression(argument, depth + 1, strict) for argument in passed)

    def self_attribute(self, expr: cst.Attribute, attribute: str, depth: int, strict: bool) -> bool:
        """``self.model(...)``, ``self.criterion.forward``: what ``self.x`` is assigned, else a
        method of the class itself or of a known base class."""
        ctx = self.ctx
        assignments = ctx.attribute_assignments.get(attribute, ())
        if assignments:
            return all(
                isinstance(node, (cst.Assign, cst.AnnAssign)) and self.binding(node, node.value, depth + 1, strict)
                for node in assignments
            )
        cls = ctx.enclosing(expr, cst.ClassDef)
        if not isinstance(cls, cst.ClassDef):
            return False
        method = attribute.split(".")[1]
        if any(isinstance(s, cst.FunctionDef) and s.name.value == method for s in cls.body.body):
            return True
        return all(self.expression(base.value, depth + 1, False) for base in cls.bases if base.keyword is None)


# Spatial warps that sample images at coordinates the network computes (image registration,
# spatial transformers): under bf16 the coordinates lose their fractional part.
_IMAGE_WARPS = (
    "torch.nn.functional.grid_sample", "monai.networks.blocks.Warp", "monai.networks.blocks.warp.Warp",
    "monai.networks.blocks.DVF2DDF", "monai.networks.nets.VoxelMorph", "monai.networks.nets.voxelmorph.VoxelMorph",
)


def _warps_images(ctx: FileContext) -> str | None:
    """The warp the file builds or calls (:data:`_IMAGE_WARPS`), by its spelling."""
    found = ctx.calls(*_IMAGE_WARPS)
    return ctx.snippet(found[0].func) if found else None


def _numpy_of_region(ctx: FileContext, autocast: cst.Call) -> cst.CSTNode | None:
    """A NumPy conversion, after the ``with`` block ``autocast`` opens, of a name assigned in it
    (:func:`_to_numpy_after`)."""
    item = ctx.parent.get(autocast)
    block = ctx.parent.get(item) if isinstance(item, cst.WithItem) else None
    if not isinstance(block, cst.With) or not isinstance(block.body, cst.IndentedBlock):
        return None
    lines = [statement for statement in block.body.body if isinstance(statement, cst.SimpleStatementLine)]
    return _to_numpy_after(ctx, lines)


def _to_numpy_after(ctx: FileContext, region: list[cst.SimpleStatementLine] | None) -> cst.CSTNode | None:
    """A NumPy conversion, after ``region`` in its function (or the module), of a name the region
    assigns: ``y_pred.data.cpu().numpy()``, ``np.array(output)``, ``plt.imshow(output)``."""
    if not region:
        return None
    assigned: set[str] = set()
    for statement in region:
        for small in statement.body:
            if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                for target in targets:
                    assigned.update(n.value for n in ctx.walk(target, cst.Name))
    if not assigned:
        return None
    scope = ctx.enclosing(region[0], cst.FunctionDef) or ctx.module
    end = max(ctx.order[statement] for statement in region)
    for call in ctx.walk(scope, cst.Call):
        if ctx.order[call] <= end:
            continue
        if _numpy_conversion(call):
            roots = [call.func.value]  # type: ignore[attr-defined]
        elif _hands_to_numpy(ctx, call) or _converts_to_numpy(ctx, call):
            roots = [arg.value for arg in call.args]
        else:
            continue
        for root in roots:
            widened = False  # ``decoded.float().cpu()``: fp32 by the time NumPy sees it
            while isinstance(root, (cst.Attribute, cst.Call, cst.Subscript)):
                if isinstance(root, cst.Attribute) and root.attr.value in ("float", "double"):
                    widened = True
                root = root.func if isinstance(root, cst.Call) else root.value
            if isinstance(root, cst.Name) and root.value in assigned and not widened:
                return call
    return None


def _converts_to_numpy(ctx: FileContext, call: cst.Call) -> bool:
    """``call`` runs a function of the file that hands something to NumPy or matplotlib
    (NYU-DLSP20's ``display_images(None, output)``, which calls ``plt.imshow``)."""
    helper = ctx.loops.callee(call)
    if not isinstance(helper, cst.FunctionDef):
        return False
    return any(_numpy_conversion(inner) or _hands_to_numpy(ctx, inner) for inner in ctx.walk(helper.body, cst.Call))


def _numpy_conversion(call: cst.Call) -> bool:
    """``x.numpy()``."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "numpy"


def _hands_to_numpy(ctx: FileContext, call: cst.Call) -> bool:
    """A NumPy or matplotlib call, which converts the tensors it is given."""
    return (ctx.qualname(call.func) or "").split(".")[0] in ("numpy", "matplotlib")


def _autocast_safe_region(ctx: FileContext, region: list[cst.SimpleStatementLine]) -> bool:
    """Whether every callee in ``region`` runs code the file shows or an autocast-safe library's."""
    return all(runs_known_code(ctx, call.func) for statement in region for call in ctx.walk(statement, cst.Call))


# -- ADV203 ----------------------------------------------------------------------------------------
class NoMixedPrecision(Rule):
    code = "ADV203"
    name = "no-mixed-precision"
    summary = "A model trained on CUDA in full fp32: no autocast, bf16 or fp16 anywhere."
    guide = GUIDE
    fix_applicability = Applicability.UNSAFE
    why = """
        The guide's *Mixed precision training* section: lower-precision formats "speed up
        the computations", and "the main advantage of mixed precision training
        comes from saving the activations in half precision". bf16 (Ampere or newer) has a
        range "about the same as fp32", so it needs no loss scaling; on older GPUs fp16 with
        a `GradScaler` does the job. A CUDA training loop or Trainer that never enables
        either runs every matmul and convolution in fp32 and leaves the 16-bit tensor cores
        idle.
    """
    example = """
        model = Net().cuda()
        for x, y in loader:
            optimizer.zero_grad()
            output = model(x.cuda())
            loss = criterion(output, y.cuda())
            loss.backward()
            optimizer.step()

        args = TrainingArguments("out", per_device_train_batch_size=16)
    """
    use_instead = """
        model = Net().cuda()
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                output = model(x.cuda())
                loss = criterion(output, y.cuda())
            loss.backward()
            optimizer.step()

        args = TrainingArguments("out", per_device_train_batch_size=16, bf16=True)
    """
    silent_when = """
        - anything in the file deals with reduced precision: an autocast of any spelling
          (even disabled or on the CPU), a GradScaler, `.half()`, a `torch.float16` /
          `torch.bfloat16` reference, weights loaded in another dtype or quantized, apex,
          DeepSpeed, FSDP `MixedPrecision`, or an `--amp` / `--fp16` / `--bf16` option;
        - the precision is decided outside the file: `TrainingArguments` from
          `HfArgumentParser` or `**vars(args)`, `bf16=args.bf16` (a command-line flag),
          `Accelerator()` with no `mixed_precision` in a script that says it runs under
          `accelerate launch` / `accelerate config` (elsewhere it trains in fp32 under plain
          `python`, and is reported), `LightningCLI`, a DeepSpeed config, TRL configs (recent TRL turns bf16 on
          when neither flag is set), precision set after construction (`args.bf16 = ...`);
        - nothing is trained on CUDA in the file: CPU-only scripts (`device = "cpu"`,
          `use_cpu=True`, `Accelerator(cpu=True)`, Lightning `accelerator="cpu"` or left to
          `"auto"`), inference-only scripts, a `TrainingArguments` without `trainer.train()`,
          a loop whose backward belongs to an engine built elsewhere (`accelerator.backward`
          on an imported `accelerator`, `model_engine.backward`, `self.manual_backward`);
        - the model is trained in float64 on purpose (`torch.set_default_dtype(...)`,
          `.double()` on the trained module);
        - the networks are too small for it to matter: reinforcement learning against
          environments (gym, gymnasium, envpool, ...) and meta-learning (learn2learn, higher),
          or a toy whose every layer is at most 64 wide.

        The loop fix wraps the statements from the model call to the loss in
        `torch.autocast("cuda", dtype=torch.bfloat16)` only where they form one block of
        plain assignments before `loss.backward()`; elsewhere (a helper runs the backward,
        several backward passes, the loss computed inline), on GPUs without bf16 (where
        fp16 also needs a `GradScaler`), and in a file that sets TF32 for its fp32 matmuls
        (a precision the author chose), and where a tensor the wrapped statements make is later
        handed to NumPy or matplotlib (`y_pred.data.cpu().numpy()`, `plt.imshow(output)`, also
        through a function of the file: NumPy has no bfloat16), and where the wrapped statements
        feed a module the output of a forward run under `torch.no_grad()` earlier in the step (a
        linear probe on a frozen backbone's features: the autocast would reach the head alone),
        and where the model trained is a class of the file that holds only raw `nn.Parameter`
        tensors and builds no layer (a curve fit by a matrix product: the fitted values are the
        result, and bf16 would round them), the finding is advice only. `TrainingArguments` get
        `bf16=True` (`fp16=True` without bf16), `Accelerator(mixed_precision="no")` gets
        `"bf16"`, a Lightning `Trainer` / `Fabric` gets `precision="bf16-mixed"`.

        CUDA autocast refuses `nn.BCELoss` / `F.binary_cross_entropy` (a RuntimeError, in any
        dtype): where the file names either, every fix becomes advice to switch to
        `BCEWithLogitsLoss` first. Every fix is also advice only unless the code it puts under
        autocast is known: the model, loss and helpers the wrapped statements call (or the model
        a framework trains) must be defined in the file, or come from torch, torchvision, timm,
        transformers or another published library, followed through names, `self.` attributes
        and the file's callers; a class of the script's own project (`from models import
        Darknet`, a star or relative import) may call binary_cross_entropy where it cannot be seen.
        Where the file's networks are small dense ones it builds itself (only `Linear` and
        recurrent layers of sizes it gives, under a million parameters, none wider than 1024:
        an MNIST MLP, a toy VAE), the fix is advice: their steps wait on kernel launches, where
        16-bit matmuls would not show, and the numbers would change for nothing.
    """
    valid = [
        Valid(
            """
            import torch
            model = Net().cuda()
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            for x, y in loader:
                with torch.autocast("cuda", enabled=args.amp):
                    loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="mixed precision is an option of the script",
        ),
        Valid(
            """
            import torch
            device = torch.device("cpu")
            model = Net().to(device)
            for x, y in loader:
                loss = criterion(model(x.to(device)), y.to(device))
                loss.backward()
                optimizer.step()
            """,
            note="CPU only",
        ),
        Valid(
            """
            import torch
            model = Net()
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            note="nothing places work on a GPU",
        ),
        Valid(
            """
            import torch
            model = Net().cuda().eval()
            with torch.no_grad():
                for x in loader:
                    predictions.append(model(x.cuda()).argmax(-1))
            """,
            note="inference only",
        ),
        Valid(
            """
            # accelerate config  # then: accelerate launch train.py
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator(gradient_accumulation_steps=4)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for x, y in loader:
                loss = criterion(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
            """,
            note="the file says it runs under `accelerate launch`: its config decides",
        ),
        Valid(
            """
            from transformers import HfArgumentParser, Trainer, TrainingArguments
            (training_args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
            Trainer(model=model, args=training_args, train_dataset=ds).train()
            """,
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            training_args = TrainingArguments(report_to="none", **vars(args))
            Trainer(model=model, args=training_args, train_dataset=ds).train()
            """,
        ),
        Valid(
            """
            import argparse
            from transformers import Trainer, TrainingArguments
            parser = argparse.ArgumentParser()
            parser.add_argument("--bf16", action="store_true")
            args = parser.parse_args()
            training_args = TrainingArguments("out", bf16=args.bf16)
            Trainer(model=model, args=training_args, train_dataset=ds).train()
            """,
            note="a command-line flag",
        ),
        Valid(
            """
            import torch
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.bfloat16)
            Trainer(model=model, args=TrainingArguments("out"), train_dataset=ds).train()
            """,
            note="bf16 weights",
        ),
        Valid(
            """
            from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2", quantization_config=BitsAndBytesConfig(load_in_4bit=True))
            Trainer(model=model, args=TrainingArguments("out"), train_dataset=ds).train()
            """,
            note="quantized weights",
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", use_cpu=True)
            Trainer(model=model, args=args, train_dataset=ds).train()
            """,
        ),
        Valid(
            """
            from transformers import Trainer, TrainingArguments
            args = TrainingArguments("out", per_device_eval_batch_size=64)
            print(Trainer(model=model, args=args, eval_dataset=ds).evaluate())
            """,
            note="evaluation only",
        ),
        Valid(
            """
            from trl import SFTConfig, SFTTrainer
            SFTTrainer(model=model, args=SFTConfig("out"), train_dataset=ds).train()
            """,
            note="TRL configs default to bf16",
        ),
        Valid(
            """
            import pytorch_lightning as pl
            trainer = pl.Trainer(max_epochs=10)
            trainer.fit(model, loader)
            """,
            note="Lightning 1 trained on the CPU unless told otherwise; `pytorch_lightning` may be either",
        ),
        Valid(
            """
            import lightning as L
            trainer = L.Trainer(accelerator="cpu", max_epochs=10)
            trainer.fit(model, loader)
            """,
            note="told to use the CPU",
        ),
        Valid(
            """
            import lightning as L
            trainer = L.Trainer(accelerator="gpu", precision="bf16-mixed")
            trainer.fit(model, loader)
            """,
        ),
        Valid(
            """
            from lightning.pytorch.cli import LightningCLI
            LightningCLI(Model, DataModule, trainer_defaults={"accelerator": "gpu"})
            """,
        ),
        Valid(
            """
            import deepspeed
            engine, optimizer, _, _ = deepspeed.initialize(model=model, config="ds_config.json")
            for batch in loader:
                loss = engine(batch.cuda())
                engine.backward(loss)
                engine.step()
            """,
            note="the DeepSpeed config decides",
        ),
        Valid(
            """
            import torch
            from train_utils import accelerator
            model = Net().to(accelerator.device)
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                accelerator.backward(loss)
                optimizer.step()
            """,
            note="an Accelerator built in another module drives the loop",
        ),
        Valid(
            """
            import argparse
            from accelerate import Accelerator
            parser = argparse.ArgumentParser()
            parser.add_argument("--mixed_precision", default="no", choices=["no", "fp16", "bf16"])
            args = parser.parse_args()
            accelerator = Accelerator(mixed_precision=args.mixed_precision)
            for x, y in loader:
                loss = criterion(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
            """,
            note="a command-line choice",
        ),
        Valid(
            """
            import gym
            import torch
            q_network = QNetwork(env).to("cuda")
            for step in range(total_timesteps):
                loss = torch.nn.functional.mse_loss(q_network(obs.cuda()), target.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="reinforcement learning",
        ),
        Valid(
            """
            import torch
            model = Net().cuda().half()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            for x, y in loader:
                loss = criterion(model(x.cuda().half()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="fp16 weights: ADV206's advice, not this rule's",
        ),
        Valid(
            """
            import torch
            model = PINN().cuda().double()
            optimizer = torch.optim.LBFGS(model.parameters())
            for epoch in range(100):
                loss = physics_residual(model, points.cuda().double())
                loss.backward()
                optimizer.step(closure)
            """,
            note="float64 on purpose (scientific code)",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator(gradient_accumulation_steps=4)
            model, optimizer, loader = accelerator.prepare(Net(), optimizer, loader)
            for x, y in loader:
                loss = criterion(model(x), y)
                accelerator.backward(loss)
                optimizer.step()

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
                def forward(self, x):
                    return self.body(x)
            """,
            fixed="""
            import torch
            from accelerate import Accelerator
            accelerator = Accelerator(gradient_accumulation_steps=4, mixed_precision="bf16")
            model, optimizer, loader = accelerator.prepare(Net(), optimizer, loader)
            for x, y in loader:
                loss = criterion(model(x), y)
                accelerator.backward(loss)
                optimizer.step()

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
                def forward(self, x):
                    return self.body(x)
            """,
            unsafe=True,
            note="`Accelerator()` without `mixed_precision`, in a script that does not say it runs under `accelerate launch`",
        ),
        Invalid(
            """
            import lightning as L
            trainer = L.Trainer(max_epochs=10)
            trainer.fit(model, loader)
            """,
            note="Lightning 2 picks the GPU whenever there is one, like `\"cuda\" if torch.cuda.is_available() else \"cpu\"`",
        ),
        Invalid(
            """
            import torch
            import torchvision
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torchvision.models.resnet50().to(device)
            criterion = torch.nn.CrossEntropyLoss()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                model.train()
                for data, target in loader:
                    data, target = data.to(device), target.to(device)
                    optimizer.zero_grad()
                    # forward
                    output = model(data)
                    loss = criterion(output, target)
                    loss.backward()
                    optimizer.step()
            """,
            fixed="""
            import torch
            import torchvision
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = torchvision.models.resnet50().to(device)
            criterion = torch.nn.CrossEntropyLoss()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                model.train()
                for data, target in loader:
                    data, target = data.to(device), target.to(device)
                    optimizer.zero_grad()
                    # forward
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        output = model(data)
                        loss = criterion(output, target)
                    loss.backward()
                    optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch as T
            from transformers import AutoModelForSequenceClassification

            def train(model, loader, opt, accum):
                model.train()
                for step, batch in enumerate(loader):
                    outputs = model(**{k: v.cuda() for k, v in batch.items()})
                    loss = outputs.loss
                    loss = loss / accum
                    (loss / 1).backward()
                    opt.step()
                    opt.zero_grad()

            train(AutoModelForSequenceClassification.from_pretrained("bert-base-uncased").cuda(), loader, opt, 4)
            """,
            fixed="""
            import torch as T
            from transformers import AutoModelForSequenceClassification

            def train(model, loader, opt, accum):
                model.train()
                for step, batch in enumerate(loader):
                    with T.autocast("cuda", dtype=T.bfloat16):
                        outputs = model(**{k: v.cuda() for k, v in batch.items()})
                        loss = outputs.loss
                        loss = loss / accum
                    (loss / 1).backward()
                    opt.step()
                    opt.zero_grad()

            train(AutoModelForSequenceClassification.from_pretrained("bert-base-uncased").cuda(), loader, opt, 4)
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 1), nn.Sigmoid())

                def forward(self, x):
                    return self.body(x)

            model = Net().cuda()
            criterion = nn.BCELoss()
            for x, y in loader:
                output = model(x.cuda())
                loss = criterion(output, y.cuda())
                loss.backward()
                optimizer.step()
            """,
            fixed=None,
            note="CUDA autocast refuses BCELoss: advice only, with BCEWithLogitsLoss",
        ),
        Invalid(
            """
            import torch
            from models import Darknet
            model = Darknet("yolov3.cfg").cuda()
            for imgs, targets in loader:
                loss = model(imgs.cuda(), targets.cuda())
                loss.backward()
                optimizer.step()
            """,
            fixed=None,
            note="the model's code is in the script's own project: it may use BCELoss",
        ),
        Invalid(
            """
            import torch

            def train(model, loader, criterion, optimizer):
                for x, y in loader:
                    output = model(x.cuda())
                    loss = criterion(output, y.cuda())
                    loss.backward()
                    optimizer.step()
            """,
            fixed=None,
            note="model and loss are parameters nothing in the file fills: advice only",
        ),
        Invalid(
            """
            import torch
            model = Net().cuda()
            for x, y in loader:
                criterion(model(x.cuda()), y.cuda()).backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
            fixed=None,
            note="the loss is computed inline: advice only",
        ),
        Invalid(
            """
            import torch
            model = Net().cuda()
            for x, y in loader:
                output = model(x.cuda())
                loss = criterion(output, y.cuda())
                loss.backward()
                optimizer.step()
            """,
            gpu="T4",
            fixed=None,
            note="no bf16 on Turing: fp16 needs a GradScaler, advice only",
        ),
        Invalid(
            """
            from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments
            model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
            args = TrainingArguments(
                output_dir="out",
                per_device_train_batch_size=16,
            )
            trainer = Trainer(model=model, args=args, train_dataset=train_ds)
            trainer.train()
            """,
            fixed="""
            from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments
            model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
            args = TrainingArguments(
                output_dir="out",
                per_device_train_batch_size=16,
                bf16=True,
            )
            trainer = Trainer(model=model, args=args, train_dataset=train_ds)
            trainer.train()
            """,
        ),
        Invalid(
            """
            from transformers import AutoModel, Trainer, TrainingArguments
            args = TrainingArguments("out", fp16=False)
            Trainer(model=AutoModel.from_pretrained("gpt2"), args=args, train_dataset=train_ds).train()
            """,
            gpu="V100",
            fixed="""
            from transformers import AutoModel, Trainer, TrainingArguments
            args = TrainingArguments("out", fp16=True)
            Trainer(model=AutoModel.from_pretrained("gpt2"), args=args, train_dataset=train_ds).train()
            """,
        ),
        Invalid(
            """
            import torch
            from transformers import Trainer, TrainingArguments
            settings = dict(output_dir="out", bf16=False)
            trainer = Trainer(model_init=lambda: Net(), args=TrainingArguments(**settings), train_dataset=train_ds)
            trainer.train()

            class Net(torch.nn.Module):
                pass
            """,
            fixed="""
            import torch
            from transformers import Trainer, TrainingArguments
            settings = dict(output_dir="out", bf16=True)
            trainer = Trainer(model_init=lambda: Net(), args=TrainingArguments(**settings), train_dataset=train_ds)
            trainer.train()

            class Net(torch.nn.Module):
                pass
            """,
        ),
        Invalid(
            """
            import timm
            from accelerate import Accelerator
            accelerator = Accelerator(mixed_precision="no")
            model = timm.create_model("resnet50")
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for x, y in loader:
                loss = criterion(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
            """,
            fixed="""
            import timm
            from accelerate import Accelerator
            accelerator = Accelerator(mixed_precision="bf16")
            model = timm.create_model("resnet50")
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for x, y in loader:
                loss = criterion(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
            """,
        ),
        Invalid(
            """
            import lightning as L
            from my_project.models import LitModel
            trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=10)
            trainer.fit(LitModel(), loader)
            """,
            fixed=None,
            note="the module's training_step is not in the file: it may use BCELoss",
        ),
        Invalid(
            """
            import lightning as L

            class LitModel(L.LightningModule):
                pass

            trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=10)
            trainer.fit(LitModel(), loader)
            """,
            fixed="""
            import lightning as L

            class LitModel(L.LightningModule):
                pass

            trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=10, precision="bf16-mixed")
            trainer.fit(LitModel(), loader)
            """,
        ),
        Invalid(
            """
            import pytorch_lightning as pl
            model = LitModel()
            trainer = pl.Trainer(gpus=1, precision=32)
            trainer.fit(model, loader)

            class LitModel(pl.LightningModule):
                pass
            """,
            fixed="""
            import pytorch_lightning as pl
            model = LitModel()
            trainer = pl.Trainer(gpus=1, precision="bf16")
            trainer.fit(model, loader)

            class LitModel(pl.LightningModule):
                pass
            """,
            note="pytorch_lightning may be 1.x: the legacy spelling",
        ),
        Invalid(
            """
            import torchvision
            from lightning.fabric import Fabric
            fabric = Fabric(accelerator="cuda", devices=1)
            model, optimizer = fabric.setup(torchvision.models.vit_b_16(), optimizer)
            for x, y in fabric.setup_dataloaders(loader):
                loss = criterion(model(x), y)
                fabric.backward(loss)
                optimizer.step()
            """,
            fixed="""
            import torchvision
            from lightning.fabric import Fabric
            fabric = Fabric(accelerator="cuda", devices=1, precision="bf16-mixed")
            model, optimizer = fabric.setup(torchvision.models.vit_b_16(), optimizer)
            for x, y in fabric.setup_dataloaders(loader):
                loss = criterion(model(x), y)
                fabric.backward(loss)
                optimizer.step()
            """,
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        findings = (_unless_small(ctx, finding, "mixed precision") for finding in self._findings(ctx))
        yield from _no_bf16_fix_where_bf16_fails(ctx, findings) if ctx.target.bf16 else findings

    def _findings(self, ctx: FileContext) -> Iterator[Finding]:
        sites = ctx.facts.frameworks.gpu_sites
        if not sites or small_network_training(ctx):
            return
        for site in sites:
            launcher = precision_left_to_launcher(ctx, site)
            if not launcher and not trains_in_fp32(ctx, site):
                continue
            if site.kind == LOOP:
                yield self._loop(ctx, site.loops[0])
                continue
            finding = None
            if site.kind == HF_TRAINER:
                finding = self._trainer(ctx, site.config)
            elif site.kind == ACCELERATE:
                finding = self._accelerator(ctx, site.config, launcher)
            elif site.kind in (LIGHTNING_FIT, FABRIC_LOOP):
                finding = self._lightning(ctx, site.config)
            if finding is not None:
                yield self._unless_refused(ctx, site, finding)

    def _unless_refused(self, ctx: FileContext, site: TrainingSite, finding: Finding) -> Finding:
        """The framework fixes turn autocast on for the whole training step: advice only when the
        file uses a loss autocast refuses, or trains a model whose code it does not show."""
        if autocast_refused_loss(ctx):
            text = finding.message.removesuffix(_message(""))
            return self.report(finding.node, _message(text + _AUTOCAST_REFUSED_ADVICE))
        if finding.fix is not None and not _framework_models_known(ctx, site):
            return self.report(finding.node, finding.message)
        return finding

    def _loop(self, ctx: FileContext, loop: TrainingLoop) -> Finding:
        refused = _AUTOCAST_REFUSED_ADVICE if autocast_refused_loss(ctx) else ""
        if not ctx.target.bf16:
            message = (
                "CUDA training loop in full fp32: no autocast, bf16 or fp16 anywhere; "
                f"{ctx.target.name} has no bf16: run the forward pass and loss under "
                '`torch.autocast("cuda", dtype=torch.float16)` with a `torch.amp.GradScaler`'
            )
            return self.report(loop.node, _message(message + refused))
        message = (
            "CUDA training loop in full fp32: no autocast, bf16 or fp16 anywhere; run the forward "
            'pass and loss under `torch.autocast("cuda", dtype=torch.bfloat16)`'
        )
        if refused:
            return self.report(loop.node, _message(message + refused))
        region = autocast_region(ctx, loop)
        if region is not None and not _autocast_safe_region(ctx, region):
            region = None  # a model or loss whose code is not in the file may call binary_cross_entropy
        wrapped = _wrap_in_autocast(ctx, region) if region is not None else None
        fix = None
        if wrapped is not None and tf32_configured(ctx):
            # The author chose fp32 matmul precision (TF32) in this file: bf16 is a further
            # change of numerics, theirs to make (RWKV-v8's demos: fp32 + TF32 on purpose).
            message += "; the file sets TF32 for its fp32 matmuls, so it is advice: bf16 autocast changes the numerics further"
            wrapped = None
        others = _steps_outside_loops(ctx) if wrapped is not None else []
        if others:
            # DomainBed: MLDG's inner loop is one of many algorithms' `update` steps in the file;
            # bf16 for it alone makes the comparison between them uneven.
            shown = ", ".join(f"`{name}`" for name in others[:3])
            message += f"; the file trains in other steps too ({shown}) that this loop's autocast does not reach: mixed precision is one decision for them all, so it is advice"
            wrapped = None
        frozen = _frozen_forward_before(ctx, loop, region) if wrapped is not None else None
        if frozen is not None:
            # DINO's eval_linear.py: the backbone's forward under `torch.no_grad()` makes the
            # features the linear head trains on; the region autocast would wrap is the head alone.
            message += (
                f"; the features come from a forward under `{ctx.snippet(frozen)}` (line {ctx.position(frozen)[0]}) "
                "that the fix's autocast would not reach, and the head alone gains nothing from bf16, so it is "
                "advice: put that forward under the same autocast"
            )
            wrapped = None
        fitted = fits_raw_parameters(ctx) if wrapped is not None else None
        if fitted is not None:
            # EigenTrajectory's curve_fitting: control points fitted by a matrix product, whose
            # bf16 result the caller then multiplies with fp32 tensors.
            message += (
                f"; the model (`{fitted}`) is raw `nn.Parameter` tensors the loop fits, with no layer: a numerical "
                "fit whose precision is the result, so it is advice"
            )
            wrapped = None
        converted = _to_numpy_after(ctx, region) if wrapped is not None else None
        if converted is not None:
            # NYU-DLSP20's notebooks: `y_pred.data.cpu().numpy()` after the step; NumPy has no
            # bfloat16, so the outputs made under bf16 autocast would raise there.
            message += (
                f"; `{ctx.snippet(converted)}` hands a tensor made in the step to NumPy, which has no "
                "bfloat16, so it is advice: convert it with `.float()` first"
            )
            wrapped = None
        if wrapped is not None:
            edits, imports = wrapped
            fix = self.fix("Run the forward pass and loss under bf16 autocast", *edits, imports=imports, requires=[("torch", "1.10")])
        return self.report(loop.node, _message(message), fix)

    def _trainer(self, ctx: FileContext, call: cst.Call) -> Finding:
        flag = "bf16" if ctx.target.bf16 else "fp16"
        message = f"`TrainingArguments` without `bf16` or `fp16`: training runs in full fp32; pass `{flag}=True`"
        if not ctx.target.bf16:
            message += f" ({ctx.target.name} has no bf16)"
        edit = _set_true(ctx, call, flag)
        requires = [_TRAINER_BF16] if flag == "bf16" else []
        fix = self.fix(f"Pass `{flag}=True`", edit, requires=requires) if edit is not None else None
        return self.report(call, _message(message), fix)

    def _accelerator(self, ctx: FileContext, call: cst.Call, launcher: bool) -> Finding:
        choice = "bf16" if ctx.target.bf16 else "fp16"
        if launcher:
            message = (
                "`Accelerator()` without `mixed_precision` trains in full fp32 under plain `python` and unless "
                f'`accelerate config` chose mixed precision: pass `mixed_precision="{choice}"`'
            )
            fix = self.fix(
                f'Pass `mixed_precision="{choice}"`',
                Edit(call, set_keyword(call, "mixed_precision", f'"{choice}"')),
                requires=_accelerate_precision_requires(choice),
            )
            return self.report(call, _message(message), fix)
        message = f'`Accelerator(mixed_precision="no")` trains in full fp32: use `"{choice}"`'
        value = known_setting(ctx, call, "mixed_precision")
        fix = None
        if value is not None and isinstance(value.node, cst.SimpleString):
            fix = self.fix(
                f'Use `mixed_precision="{choice}"`', Edit(value.node, string_like(value.node, choice)), requires=_accelerate_precision_requires(choice)
            )
        return self.report(call, _message(message), fix)

    def _lightning(self, ctx: FileContext, call: cst.Call) -> Finding:
        choice = _lightning_spelling(ctx, ctx.target.bf16)
        message = f'Lightning on the GPU in full fp32 (`precision` "32-true"): pass `precision="{choice}"`'
        precision = ctx.argument(call, "precision")
        requires = _lightning_precision_requires(choice)
        if precision is MISSING:
            fix = self.fix(f'Pass `precision="{choice}"`', Edit(call, set_keyword(call, "precision", f'"{choice}"')), requires=requires)
        else:
            value = known_setting(ctx, call, "precision")
            fix = None
            if value is not None and value.node is precision and isinstance(value.node, (cst.SimpleString, cst.Integer)):
                replacement = string_like(value.node, choice)
                fix = self.fix(f'Use `precision="{choice}"`', Edit(value.node, replacement), requires=requires)
        return self.report(call, _message(message), fix)


def _accelerate_precision_requires(choice: str) -> list[tuple[str, str]]:
    """What ``Accelerator(mixed_precision=...)`` needs: the argument came with accelerate 0.6
    (0.2's ``Accelerator`` raises TypeError on it: PLM-ICD pins 0.2.1), and bf16 autocast on
    CUDA with torch 1.10."""
    return [("accelerate", "0.6"), ("torch", "1.10")] if choice == "bf16" else [("accelerate", "0.6")]


def _lightning_precision_requires(choice: str) -> list[tuple[str, str]]:
    """The pytorch-lightning a ``precision=`` spelling needs: ``"bf16"`` came with 1.5 (1.3.8
    raises NotImplementedError), ``"bf16-mixed"`` / ``"16-mixed"`` with 2.0; ``16`` is in all."""
    since = "2.0" if choice.endswith("-mixed") else "1.5" if choice.startswith("bf16") else None
    return [("pytorch-lightning", since), ("pytorch_lightning", since)] if since else []


def _accelerate_compiles(ctx: FileContext, site: TrainingSite) -> bool:
    """``Accelerator(dynamo_backend=...)`` set in the file to anything but ``"no"``."""
    if not isinstance(site.config, cst.Call):
        return False
    backend = ctx.argument(site.config, "dynamo_backend")
    if backend is MISSING:
        return False
    value = known_setting(ctx, site.config, "dynamo_backend")
    return value is None or str(value.value).lower() != "no"


_HAND_OVER_METHODS = ("prepare", "prepare_model", "setup", "setup_module")
# What ``accelerator.prepare(...)`` / ``fabric.setup(...)`` also receive besides the models.
_NOT_A_MODEL_NAME = re.compile(r"optim|loader|sched|data|opt$", re.I)


def _framework_models_known(ctx: FileContext, site: TrainingSite) -> bool:
    """Whether the models a framework trains come from this file or an autocast-safe library:
    the HF trainer's ``model`` (or ``model_init``), what ``accelerator.prepare`` /
    ``fabric.setup`` receive, the module a Lightning ``trainer.fit`` gets."""
    handed: list[cst.BaseExpression | None] = []
    if site.kind == HF_TRAINER:
        for call in ctx.facts.frameworks.hf_trainer_calls:
            model = ctx.argument(call, "model", 0)
            handed.append(ctx.argument(call, "model_init") if model is MISSING else model)
    elif site.kind == LIGHTNING_FIT:
        handed.extend(ctx.argument(call, "model", 0) for call in ctx.method_calls("fit"))
    else:
        for call in ctx.method_calls(*_HAND_OVER_METHODS):
            if _framework_hand_over(ctx, call):
                handed.extend(_handed_models(call))
    return bool(handed) and all(
        isinstance(model, cst.BaseExpression) and runs_known_code(ctx, model) for model in handed
    )


def _framework_hand_over(ctx: FileContext, call: cst.Call) -> bool:
    """``accelerator.prepare(...)``, ``fabric.setup(...)``: the framework hands back what it gets."""
    func = call.func
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value in _HAND_OVER_METHODS
        and ctx.loops.is_framework(func.value)
    )


def _handed_models(call: cst.Call) -> list[cst.BaseExpression | None]:
    """What a framework hand-over receives, less its optimizers, loaders and schedulers (by name);
    None for ``*args``."""
    return [
        None if arg.star else arg.value
        for arg in call.args
        if not _NOT_A_MODEL_NAME.search(dotted_name(arg.value) or "")
    ]


def _set_true(ctx: FileContext, call: cst.Call, keyword: str) -> Edit | None:
    """``keyword=True`` for a call: added when absent, or the literal ``False`` written for it
    (in the call or in the dict behind its ``**kwargs``) flipped."""
    argument = ctx.argument(call, keyword)
    if argument is MISSING:
        return Edit(call, set_keyword(call, keyword, "True"))
    if isinstance(argument, cst.Name) and argument.value == "False":
        return Edit(argument, argument.with_changes(value="True"))
    return None


# -- ADV206 ----------------------------------------------------------------------------------------
_HALF_TYPES = ("torch.cuda.HalfTensor", "torch.HalfTensor")
# Functions whose casts serve something other than training: export, saving, conversion.
_EXPORT_FUNCTION = re.compile(r"export|save|convert|onnx|quantiz|deploy", re.I)


def _is_fp16(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    dtype = resolve_dtype(ctx, expr)
    if dtype is not None:
        return dtype.name == FP16
    if ctx.qualname(expr) in _HALF_TYPES:
        return True
    value = ctx.values.value_of(expr)
    return isinstance(value, str) and value in _HALF_TYPES


def half_casts(ctx: FileContext) -> list[tuple[cst.Call, cst.CSTNode]]:
    """Every cast of a module's weights to float16: ``.half()``, ``.to(torch.float16)`` /
    ``.to(device, dtype=torch.half)``, ``.type(torch.cuda.HalfTensor)`` and
    ``from_pretrained(..., torch_dtype=torch.float16)`` (or ``dtype=``); with the node that
    says float16 (the call, or its dtype argument)."""
    found: list[tuple[cst.Call, cst.CSTNode]] = []
    for call in ctx.method_calls("half"):
        if not call.args:
            found.append((call, call))
    for call in ctx.method_calls("to", "type"):
        for arg in call.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in (None, "dtype") and not arg.star and _is_fp16(ctx, arg.value):
                found.append((call, arg))
                break
    for call in ctx.method_calls("from_pretrained", "from_config"):
        for keyword in ("torch_dtype", "dtype"):
            arg = ctx.keyword_arg(call, keyword)
            if arg is not None and _is_fp16(ctx, arg.value):
                found.append((call, arg))
    return sorted(found, key=lambda pair: ctx.order[pair[0]])


def _keeps_master_weights(ctx: FileContext) -> bool:
    """apex, DeepSpeed or an fp16 optimizer wrapper: they keep fp32 master weights themselves."""
    if any(q.startswith(("apex.", "deepspeed.")) for q in ctx.called_qualnames):
        return True
    return any("fp16_optimizer" in name.value.lower() or "fp16optimizer" in name.value.lower() for name in ctx.nodes(cst.Name))


# Calls that put PEFT adapters on a model (in fp32, whatever the base's dtype).
_ADAPTER_WRAPPERS = re.compile(r"^peft\.(get_peft_model|inject_adapter_in_model|\w*PeftModel\w*\.from_pretrained)$")


class PureFp16Weights(Rule):
    code = "ADV206"
    name = "pure-fp16-weights"
    summary = "A model cast to float16 (`.half()`, `torch_dtype=torch.float16`) and then trained."
    guide = GUIDE
    fix_applicability = Applicability.NONE
    why = """
        Mixed precision computes in 16 bits but keeps the weights, and their updates, in fp32.
        The guide's *Mixed precision training* section: "the gradients ... are converted back
        to full precision for the optimization step", and fp16's largest number is about
        65504: "any number above that will result in an overflow". Training the float16
        weights themselves loses both protections: activations and gradients overflow to
        inf/NaN, and an update `lr * grad` smaller than half the spacing between fp16 values
        near a weight (about 0.0005 around 1.0) rounds away, so the weight never moves. There
        is no GradScaler for fp16 parameters (`unscale_` refuses them).
    """
    example = """
        model = Net().cuda().half()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for x, y in loader:
            loss = criterion(model(x.cuda().half()), y.cuda())
            loss.backward()
            optimizer.step()
    """
    use_instead = """
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
    """
    silent_when = """
        - the cast model is not trained here: it is frozen or only evaluated (a VAE, a text
          encoder, a teacher: its parameters go to no optimizer that a training loop steps,
          nor to a `Trainer` that trains), the cast runs under `torch.no_grad()` /
          `torch.inference_mode()`, in an evaluation or export function, or after the
          training loop;
        - PEFT / LoRA adapters go on the float16 base after the cast (QLoRA and LoRA keep the
          base frozen and the adapters in fp32), or the weights are 8-bit / 4-bit quantized;
        - the optimizer gets fp32 copies of the parameters (`p.clone().float()`: master
          weights kept by hand), or apex / DeepSpeed / an `FP16_Optimizer` keeps them;
        - the dtype cannot be read (`torch_dtype=dtype`, chosen at run time) or is bf16 (pure
          bf16 training is a deliberate memory technique, with its own optimizers).

        No fix: removing the cast alone changes the memory use and the numerics, and the
        mixed-precision setup it needs depends on the script.
    """
    valid = [
        Valid(
            """
            import torch
            model = Net().cuda()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
        ),
        Valid(
            """
            import torch
            vae = AutoencoderKL.from_pretrained("vae").cuda().half()
            unet = UNet().cuda()
            optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-4)
            for images in loader:
                with torch.no_grad():
                    latents = vae.encode(images.cuda().half()).latent_dist.sample()
                loss = unet(latents.float()).mean()
                loss.backward()
                optimizer.step()
            """,
            note="a frozen encoder in fp16: only the UNet is trained",
        ),
        Valid(
            """
            import torch
            model = Net().cuda().half().eval()
            with torch.inference_mode():
                for x in loader:
                    print(model(x.cuda().half()))
            """,
            note="inference only",
        ),
        Valid(
            """
            import torch
            from peft import LoraConfig, get_peft_model
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("llama", torch_dtype=torch.float16)
            model = get_peft_model(model, LoraConfig(r=8))
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for batch in loader:
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
            """,
            note="LoRA adapters over a frozen fp16 base",
        ),
        Valid(
            """
            import torch
            from peft import LoraConfig, get_peft_model
            from transformers import AutoModelForCausalLM
            lora_config = LoraConfig(r=8, target_modules=["q_proj", "v_proj"])
            model = AutoModelForCausalLM.from_pretrained("llama", torch_dtype=torch.float16)
            model = get_peft_model(model, lora_config)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for batch in loader:
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
            """,
            note="the LoRA config is built first; the adapters still go on after the cast",
        ),
        Valid(
            """
            import torch
            from peft import LoraConfig
            from mylib import wrap_with_lora
            model = Net().cuda().half()
            model = wrap_with_lora(model, LoraConfig(r=8))
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for x in loader:
                loss = model(x.cuda().half()).mean()
                loss.backward()
                optimizer.step()
            """,
            note="PEFT applied by code this file does not show",
        ),
        Valid(
            """
            import torch
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.float16)
            model = model.float().cuda()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for batch in loader:
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
            """,
            note="loaded in fp16, cast back to fp32 before training",
        ),
        Valid(
            """
            import torch
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("llama", torch_dtype=torch.float16, load_in_8bit=True)
            Trainer(model=model, args=TrainingArguments("out"), train_dataset=ds).train()
            """,
            note="quantized base",
        ),
        Valid(
            """
            import torch
            model = Net().cuda().half()
            master = [p.detach().clone().float() for p in model.parameters()]
            optimizer = torch.optim.SGD(master, lr=0.1)
            for x, y in loader:
                loss = criterion(model(x.cuda().half()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="fp32 master weights kept by hand",
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            model.half()
            torch.save(model.state_dict(), "model_fp16.pt")
            """,
            note="cast after training, to save a smaller checkpoint",
        ),
        Valid(
            """
            import torch
            model = Net().cuda().to(dtype=torch.bfloat16)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="pure bf16 is a deliberate technique with fp32's range",
        ),
        Valid(
            """
            import torch
            model = Net().cuda().to(dtype=weight_dtype)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                loss = criterion(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            note="dtype unknown",
        ),
        Valid(
            """
            import torch
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.float16)
            trainer = Trainer(model=model, args=TrainingArguments("out"), eval_dataset=ds)
            print(trainer.evaluate())
            """,
            note="evaluation only",
        ),
    ]
    invalid = [
        Invalid(
            """
            import torch
            model = Net().cuda().half()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                loss = criterion(model(x.cuda().half()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch

            def main():
                model = build_model()
                model.to(device, dtype=torch.float16)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
                train(model, optimizer)

            def train(model, optimizer):
                for x, y in loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
            """,
            note="the optimizer is built in one function and stepped in another",
        ),
        Invalid(
            """
            import torch
            import torch.optim as optim
            from peft import LoraConfig, get_peft_model
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = get_peft_model(base_model, LoraConfig(r=8))
            model = DDP(model.to("cuda").half(), device_ids=[local_rank])
            optimizer = optim.SGD(model.parameters(), lr=0.01)
            for batch in loader:
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
            """,
            note="cast after the adapters were added: the LoRA weights themselves are fp16",
        ),
        Invalid(
            """
            import torch
            from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
            model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.float16)
            trainer = Trainer(model=model, args=TrainingArguments("out", fp16=True), train_dataset=ds)
            trainer.train()
            """,
        ),
        Invalid(
            """
            import torch
            model = Net().cuda().half()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                loss = criterion(model(x.cuda().half()), y.cuda())
                loss.backward()
                optimizer.step()
            """,
            gpu="T4",
            note="fp16 autocast with a GradScaler on GPUs without bf16",
        ),
    ]

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        casts = half_casts(ctx)
        if not casts or _keeps_master_weights(ctx):
            return
        if any(arg.keyword is not None and arg.keyword.value in QUANTIZED_LOADING for arg in ctx.nodes(cst.Arg)):
            return  # a quantized base: only adapters train
        adapters = [c for q in ctx.called_qualnames if _ADAPTER_WRAPPERS.match(q) for c in ctx.calls(q)]
        adapters += ctx.method_calls("add_adapter", "load_adapter")
        if not adapters and any(target.startswith("peft") for target in ctx.imports.aliases.values()):
            return  # PEFT used through code we cannot see
        for call, evidence in casts:
            if under_no_grad(ctx, call) or in_inference_function(ctx, call):
                continue
            function = ctx.enclosing(call, cst.FunctionDef)
            if isinstance(function, cst.FunctionDef) and _EXPORT_FUNCTION.search(function.name.value):
                continue
            if adapters and not any(ctx.order[a] < ctx.order[call] for a in adapters):
                continue  # adapters added after the cast: fp32 adapters over a frozen fp16 base
            subject = cast_subject(ctx, call)
            if subject is None or self._cast_back(ctx, call, subject):
                continue
            trainer = self._trained_by(ctx, call, subject)
            if trainer is None:
                continue
            yield self.report(call, _message(self._message(ctx, call, evidence, subject, trainer)))

    def _trained_by(self, ctx: FileContext, cast: cst.Call, subject: str) -> str | None:
        """"loop" or "trainer" when ``subject`` is trained after the cast, else None."""
        for loop in ctx.loops.training_loops:
            if self._after(ctx, cast, loop.node):
                continue
            for optimizer in loop.optimizers:
                for constructor in ctx.loops.optimizer_constructors(optimizer):
                    owners, copies = parameter_owners(ctx, constructor)
                    if not copies and any(same_module(owner, subject) for owner in owners):
                        return "loop"
        if ctx.facts.frameworks.hf_trainer_trains:
            for call in ctx.facts.frameworks.hf_trainer_calls:
                model = ctx.argument(call, "model", 0)
                if model is None or model is MISSING or self._after(ctx, cast, call):
                    continue
                spelling = dotted_name(model)
                if spelling is not None and same_module(spelling, subject):
                    return "trainer"
        return None

    @staticmethod
    def _cast_back(ctx: FileContext, cast: cst.Call, subject: str) -> bool:
        """``model.float()`` / ``model.to(torch.float32)`` after the cast: loaded in fp16, trained in fp32."""
        for call in ctx.method_calls("float", "to", "type"):
            if ctx.order[call] <= ctx.order[cast]:
                continue
            method = call.func.attr.value  # type: ignore[attr-defined]
            upcast = (method == "float" and not call.args) or any(
                (arg.keyword is None or arg.keyword.value == "dtype")
                and (resolve_dtype(ctx, arg.value) or Dtype("")).name == "float32"
                for arg in call.args
            )
            spelling = cast_subject(ctx, call)
            if upcast and spelling is not None and same_module(spelling, subject):
                return True
        return False

    @staticmethod
    def _after(ctx: FileContext, cast: cst.CSTNode, training: cst.CSTNode) -> bool:
        """The cast runs after ``training`` in the same function (or at module level)."""
        return ctx.scope_of.get(cast) is ctx.scope_of.get(training) and ctx.order[cast] > ctx.order[training]

    def _message(self, ctx: FileContext, call: cst.Call, evidence: cst.CSTNode, subject: str, trainer: str) -> str:
        if evidence is call:
            spelling = "`.half()`"
        elif isinstance(evidence, cst.Arg) and evidence.keyword is not None:
            spelling = f"`{evidence.keyword.value}={ctx.code(evidence.value)}`"
        else:
            method = call.func.attr.value if isinstance(call.func, cst.Attribute) else "to"
            spelling = f"`.{method}({ctx.code(evidence.value)})`"  # type: ignore[attr-defined]
        text = (
            f"{spelling} makes `{subject}`'s weights float16 and then trains them: activations and gradients "
            "overflow to inf/NaN past 65504 and small updates round away; keep the weights in fp32 and "
        )
        if trainer == "trainer":
            flag = "bf16" if ctx.target.bf16 else "fp16"
            return text + f"set `{flag}=True` in `TrainingArguments` (mixed precision)"
        if ctx.target.bf16:
            return text + 'run the forward pass under `torch.autocast("cuda", dtype=torch.bfloat16)`'
        return text + 'run the forward pass under `torch.autocast("cuda", dtype=torch.float16)` with a `torch.amp.GradScaler`'
