"""Fix premises: where the project shows that a rule's fix would not run or not pay, the
finding stays and its fix becomes advice that says why.

Each check reads the project around the file (its declared library versions, what imports or
runs the code, the commands it ships, the hardware a notebook recorded); rules never ask
these themselves. They come from the causes a reader found behind doubtful or wrong edits in
the held-out fix audits (docs/fix_audit.md).
"""
from __future__ import annotations

import os
import re

import libcst as cst

from advisor.context import FileContext
from advisor.names import MODULE_NAMES, dotted_name
from advisor.project import METHOD, MODULE_LEVEL
from advisor.rule import Finding


def withhold_where_premises_fail(ctx: FileContext, finding: Finding) -> None:
    """Leave the fix as advice where the project shows it would not pay or not run (each
    check below says which premise), the first that fails speaking."""
    if finding.fix is not None and finding.fix.requires:
        _withhold_if_too_new(ctx, finding)
    if finding.fix is not None:
        _withhold_where_the_file_cannot_run(ctx, finding)
    if finding.fix is not None and ctx.project is not None:
        _withhold_in_code_nothing_runs(ctx, finding)
    if finding.fix is not None and ctx.project is not None:
        _withhold_where_every_launch_sets_it(ctx, finding)
    if finding.fix is not None:
        _withhold_in_older_version_branch(ctx, finding)
    if finding.fix is not None and ctx.path.endswith(".ipynb"):
        shown = _notebook_ran_without_gpu(ctx)
        if shown is not None:
            finding.as_advice(_RAN_WITHOUT_GPU.format(shown))
    if finding.fix is not None and ctx.path.endswith(".ipynb"):
        _withhold_on_the_notebooks_own_hardware(ctx, finding)
    if finding.fix is not None:
        _withhold_on_the_recorded_hardware(ctx, finding)
    if finding.fix is not None and ctx.project is not None and ctx.project.member:
        _withhold_where_top_level_code_raises(ctx, finding)


def _withhold_if_too_new(ctx: FileContext, finding: Finding) -> None:
    """A fix whose code needs a newer library than the project admits is withheld: the
    finding stays, as advice that says what the fix would need."""
    from advisor.facts.environment import older_allowed

    assert finding.fix is not None
    for package, version in finding.fix.requires:
        reason = older_allowed(ctx, package, version)
        if reason is not None:
            finding.as_advice(f"the fix needs {package} >= {version}, and {reason}")
            return


def _withhold_where_the_file_cannot_run(ctx: FileContext, finding: Finding) -> None:
    """A fix in a file that cannot run in the environment its project declares (torch 0.3 code
    in a project that asks for 1.0, a transformers 3 import in a transformers 4 project)
    becomes advice: nothing it speeds up runs as written."""
    from advisor.facts.environment import cannot_run_as_declared

    reason = cannot_run_as_declared(ctx)
    if reason is not None:
        finding.as_advice(f"{reason}: the code does not run as written, so the fix is left as advice")


def _withhold_where_top_level_code_raises(ctx: FileContext, finding: Finding) -> None:
    """A fix in a file of a checkout whose top-level code reads a name nothing binds becomes
    advice: the run stops with a ``NameError`` before the code the fix speeds up matters.
    Only for files on disk: an editor's unsaved buffer, or a snippet, may be half written."""
    if not os.path.isfile(ctx.path):
        return
    unbound = ctx.memo(_name_bound_nowhere, lambda: _name_bound_nowhere(ctx))  # one answer a file, every fix asks
    if unbound is not None:
        name, line = unbound
        finding.as_advice(
            f"the file's top-level code reads `{name}` (line {line}), which nothing in it binds: it stops with a "
            f"`NameError` there, so the fix is left as advice"
        )
        return
    missing = ctx.memo(_module_attribute_missing, lambda: _module_attribute_missing(ctx))
    if missing is not None:
        called, line, module = missing
        finding.as_advice(
            f"the file's top-level code calls `{called}` (line {line}), which the project's `{module}` does not "
            f"define: it stops with an `AttributeError` there, so the fix is left as advice"
        )


def _name_bound_nowhere(ctx: FileContext) -> tuple[str, int] | None:
    """A name that the file's top-level code (run whenever the file runs or is imported: not a
    ``def`` or ``class`` body, nor a branch other than the main guard, nor a ``try``) reads and
    that nothing in the file binds, with its line, where the name is a module's:
    metriclearningbench's ``train.py`` builds its data set with ``transforms.Compose`` after
    ``import torchvision.transforms as T``; gru_ode_bayes' ``mimic_classif.py`` calls
    ``torch.device`` without importing torch.
    None where names may come from elsewhere (a star import, ``globals()``, ``exec``, a notebook)."""
    import builtins

    if ctx.path.endswith(".ipynb") or ctx.imports.star_modules:
        return None
    if any(isinstance(call.func, cst.Name) and call.func.value in ("globals", "locals", "vars", "exec", "eval", "setattr")
           for call in ctx.nodes(cst.Call)):
        return None
    bound = {name for _, name in ctx.bindings} | set(dir(builtins)) | MODULE_NAMES
    # Binders the index does not record: ``except ... as e``, ``(x := ...)``, ``global x``.
    bound.update(
        handler.name.name.value for handler in ctx.nodes(cst.ExceptHandler)
        if handler.name is not None and isinstance(handler.name.name, cst.Name)
    )
    bound.update(walrus.target.value for walrus in ctx.nodes(cst.NamedExpr) if isinstance(walrus.target, cst.Name))
    bound.update(item.name.value for declared in ctx.nodes(cst.Global) for item in declared.names)
    statements = _top_level_statements(ctx)
    # Only the names of modules: the file imports them under another name (``import
    # torchvision.transforms as T``, then ``transforms.Compose``) or never (``torch.device``
    # without ``import torch``). Any other unbound name may be a snippet's placeholder.
    modules = set(_COMMON_MODULES)
    for node in ctx.nodes(cst.ImportAlias):
        if node.asname is not None:
            modules.update((dotted_name(node.name) or "").split("."))
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine) and any(
            isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
        ):
            continue  # the dotted module names of an import are read by the import system
        for name in ctx.walk(statement, cst.Name):
            if name.value in bound or name.value not in modules or not ctx.is_read(name):
                continue
            if ctx.enclosing(name, cst.FunctionDef, cst.Lambda, cst.ClassDef) is not None:
                continue  # runs when called, not when the file runs
            return name.value, ctx.position(name)[0]
    return None


def _top_level_statements(ctx: FileContext) -> list[cst.CSTNode]:
    """The statements that run whenever the file runs: the module's body and its main guard's
    (unless the project imports the file), less ``def``, ``class``, branches, ``try`` and loops."""
    statements: list[cst.CSTNode] = []
    imported = ctx.project is not None and bool(ctx.project.project.importers.get(ctx.project.path))
    for statement in ctx.module.body:
        if statement in ctx.main_guards:
            if not imported:  # a module the project imports runs its functions, not its main guard
                statements.extend(
                    s for s in statement.body.body  # type: ignore[attr-defined]
                    if not isinstance(s, (cst.FunctionDef, cst.ClassDef, cst.If, cst.Try))
                )
        elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef, cst.If, cst.Try, cst.While)):
            statements.append(statement)
    return statements


def _module_attribute_missing(ctx: FileContext) -> tuple[str, int, str] | None:
    """A call ``module.name(...)`` in the file's top-level code where ``module`` is a project
    module the file imports (absolutely) and that module's text never spells ``name`` (so it
    neither defines nor imports it), with the line and the module's file: quickvision's
    examples call ``cnn.create_vision_cnn``, which the package renamed ``create_cnn``. None
    where the module makes names no text shows (``import *``, ``__getattr__``), or a file or
    extension of that name sits in its package."""
    view = ctx.project
    if view is None or not view.member or ctx.path.endswith(".ipynb"):
        return None
    project = view.project
    for statement in _top_level_statements(ctx):
        for call in ctx.walk(statement, cst.Call):
            func = call.func
            if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
                continue
            if ctx.enclosing(call, cst.FunctionDef, cst.Lambda, cst.ClassDef) is not None:
                continue
            bindings = ctx.lookup(func.value.value, func.value)
            if len(bindings) != 1 or not isinstance(bindings[0].node, (cst.Import, cst.ImportFrom)):
                continue
            module = ctx.imports.qualname(func.value)
            if not module or module.startswith("."):
                continue
            source = project.module_path(module, 0, ctx.path)
            if source is None or os.path.abspath(source) == os.path.abspath(ctx.path):
                continue
            name = func.attr.value
            if source.endswith("__init__.py") and project._beside(source, name):
                continue
            if project._name_missing(source, (name,)) is not None:
                view.asked_texts = True
                return f"{func.value.value}.{name}", ctx.position(call)[0], os.path.relpath(source, project.root)
    return None


# Modules scripts read at their top level by these names.
_COMMON_MODULES = frozenset({
    "torch", "torchvision", "transforms", "nn", "F", "np", "numpy", "os", "sys", "math", "random", "time",
    "json", "argparse", "logging", "datetime", "pickle", "pd", "plt", "cv2", "tqdm", "transformers",
})




def _withhold_where_every_launch_sets_it(ctx: FileContext, finding: Finding) -> None:
    """A fix that only changes the defaults of command-line options becomes advice where every
    command the project ships to run the file passes those options itself (LLM-Blender's
    ``train_ranker.sh`` passes ``--per_device_train_batch_size`` and
    ``--gradient_accumulation_steps`` on each of its runs): the new defaults would not apply."""
    assert finding.fix is not None and ctx.project is not None
    options: list[tuple[str, ...]] = []
    for edit in finding.fix.edits:
        spellings = _option_defaulted_at(ctx, edit.node)
        if spellings is None:
            return  # the fix changes more than an option's default
        options.append(spellings)
    launches = ctx.project.launch_commands() if options else []
    if not launches:
        return
    for _, command in launches:
        for spellings in options:
            if not any(re.search(r"(?<![\w-])" + re.escape(option) + r"(?![\w-])", command) for option in spellings):
                return
    where = sorted({os.path.relpath(path, os.path.dirname(os.path.abspath(ctx.path))) for path, _ in launches})
    passed = ", ".join(f"`{spellings[0]}`" for spellings in options)
    finding.as_advice(
        f"every command the project ships to run this file ({', '.join(f'`{w}`' for w in where[:3])}) passes {passed} "
        f"itself, so the new default would not apply; the fix is left as advice"
    )


def _option_defaulted_at(ctx: FileContext, node: cst.CSTNode) -> tuple[str, ...] | None:
    """The command-line spellings of the option whose default ``node`` is (or is part of):
    ``parser.add_argument("--batch_size", "-b", default=1)``, or a dataclass field that
    ``HfArgumentParser`` turns into ``--batch_size``."""
    for ancestor in (node, *ctx.ancestors(node)):
        if isinstance(ancestor, cst.Arg) and ancestor.keyword is not None and ancestor.keyword.value == "default":
            call = ctx.parent.get(ancestor)
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument":
                from advisor.facts.branches import option_spellings

                return option_spellings(ctx, call) or None
            if isinstance(call, cst.Call) and dotted_name(call.func) in ("field", "dataclasses.field"):
                ancestor = ctx.parent.get(call)
        if isinstance(ancestor, cst.AnnAssign) and isinstance(ancestor.target, cst.Name):
            cls = ctx.enclosing(ancestor, cst.ClassDef, cst.FunctionDef)
            if isinstance(cls, cst.ClassDef) and any(
                (dotted_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "").endswith("dataclass")
                for d in cls.decorators
            ):
                return (f"--{ancestor.target.value}",)
            return None
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return None
    return None


# Edits in code that never runs (a vendored trainer nothing imports, an abandoned module) are
# the largest doubtful group of every held-out fix audit (docs/fix_audit.md): advice there.
_UNREACHED = "no script, notebook or console entry point of the project imports this module, so the fix is left as advice"


_GRADIENT_CHECKS = (
    "torch.autograd.gradcheck", "torch.autograd.gradgradcheck", "torch.autograd.gradcheck.gradcheck",
    "torch.autograd.gradcheck.gradgradcheck",
)


def _withhold_in_code_nothing_runs(ctx: FileContext, finding: Finding) -> None:
    """A fix in test code that checks gradients, in a module no entry point imports, in a
    branch of a flag nothing turns on, or in a module-level function or class the project never
    names beyond its definition, becomes advice."""
    view = ctx.project
    assert view is not None and finding.fix is not None
    if ctx.calls(*_GRADIENT_CHECKS):
        # A numerical test of an operator (CenterNet's DCNv2/test.py): its tensors are inputs to
        # compare, not a training step to speed up, as in the test code folder walks leave out.
        finding.as_advice("the file checks gradients (`gradcheck`): test code, so the fix is left as advice")
        return
    if view.reached() is False:
        finding.as_advice(_UNREACHED)
        return
    if not view.member:
        return
    failing = view.import_that_fails()
    if failing is not None:
        # Face_Pytorch's eval_megaface.py imports backbone.self_attention, which backbone/ lacks.
        finding.as_advice(f"the file imports {failing}, so it raises before this code runs; the fix is left as advice")
        return
    if (
        any(ctx.is_descendant(finding.node, guard) for guard in ctx.main_guards)
        and view.project.importers.get(view.path)
        and not view.launch_commands()  # DINO's eval_knn.py: imported, and run as its README says
    ):
        # Show-o's wan21_vae.py: the model module the project imports ends with a smoke test.
        view.asked_importers = True
        finding.as_advice("the code is the `__main__` self-test of a module the project imports, so the fix is left as advice")
        return
    from advisor.facts.branches import dormant_flag

    dormant = dormant_flag(ctx, finding.node)
    if dormant is not None:
        finding.as_advice(f"{dormant}, so the fix is left as advice")
        return
    outermost = ctx.outermost_definition(finding.node)
    if outermost is None or _called_by_its_decorator_or_protocol(ctx, outermost):
        return  # module-level code, or registered / called by a framework through its decorator
    if ctx.parent.get(outermost) is not ctx.module:
        return
    if any(not call.args for call in ctx.calls("fire.Fire")):
        return  # ``fire.Fire()`` makes every function of the module a command (pytorch-book's ``main.py train``)
    kind = "class" if isinstance(outermost, cst.ClassDef) else "function"
    if kind == "class" and view.builds_by_name:
        return  # DeepCore's ``methods.__dict__[args.selection]``: any class may be looked up by its name
    if not view.called(outermost.name.value, kind=MODULE_LEVEL):
        finding.as_advice(f"nothing in the project uses the {kind} `{outermost.name.value}`, so the fix is left as advice")
        return
    users = _only_unused_users(ctx, view, outermost)
    if users:
        named = ", ".join(users)
        finding.as_advice(
            f"the {kind} `{outermost.name.value}` is used only by {named}, which nothing in the project uses, "
            f"so the fix is left as advice"
        )
        return
    dormant = _called_only_in_dormant_branches(ctx, view, outermost)
    if dormant is not None:
        # CVPR19_Incremental_Learning's ``incremental_train_and_eval_AMR_LF``: the script calls
        # it only under ``if args.amr_loss:``, and no command of ``run.sh`` passes ``--amr_loss``.
        finding.as_advice(f"the {kind} `{outermost.name.value}` is called only in code that {dormant}, so the fix is left as advice")
        return
    if kind == "function" and _runs_only_in_own_self_test(ctx, view, outermost):
        # MiniASR's model_utils.py: ``check_extractor_attributes`` runs from its ``__main__`` only.
        view.asked_importers = True
        finding.as_advice(
            f"the function `{outermost.name.value}` runs only in the `__main__` self-test of a module the project "
            f"imports, so the fix is left as advice"
        )
        return
    uncalled = _uncalled_method(ctx, view, finding.node, outermost)
    if uncalled is not None:
        finding.as_advice(f"{uncalled}, so the fix is left as advice")
        return
    hook = _lightning_hook_nothing_runs(ctx, view, finding.node, outermost)
    if hook is not None:
        finding.as_advice(hook)


def _called_only_in_dormant_branches(ctx: FileContext, view, definition: cst.CSTNode) -> str | None:
    """Why every use of a module-level function or class of this module never runs, where its
    every use is a call in another file of the project, inside a branch that
    :func:`~advisor.facts.branches.dormant_flag` finds never taken; None otherwise."""
    from advisor.facts.branches import dormant_flag

    name = definition.name.value  # type: ignore[attr-defined]
    if any(n.value == name and n is not definition.name for n in ctx.nodes(cst.Name)):  # type: ignore[attr-defined]
        return None  # used in its own file
    defined_by = (cst.ClassDef,) if isinstance(definition, cst.ClassDef) else (cst.FunctionDef,)
    callers = view.calls_from_importers(name, defined_by=defined_by)
    if not callers:
        return None
    calling_files = {os.path.abspath(other.path) for other, _ in callers}
    for path in view.project.importers.get(view.path, []):
        if os.path.abspath(path) not in calling_files and re.search(rb"\b" + re.escape(name.encode()) + rb"\b", view.project.text(path)):
            return None  # named in a file that does not call it: passed on, registered
    reasons = []
    for other, call in callers:
        called = {id(call.func), id(getattr(call.func, "attr", None))}
        for use in other.nodes(cst.Name):
            if use.value == name and id(use) not in called and other.enclosing(use, cst.Import, cst.ImportFrom) is None:
                return None  # a use that is not one of the calls
        why = dormant_flag(other, call)
        if why is None:
            return None
        reasons.append(why.removeprefix("the code "))
    return reasons[0]


def _runs_only_in_own_self_test(ctx: FileContext, view, function: cst.CSTNode) -> bool:
    """A module-level function of a package's module the project imports, named only in the
    module's own ``__main__`` block, which no command the project ships runs: a diagnostic run by
    hand (MiniASR's ``python model_utils.py <model>``), not training."""
    if not ctx.main_guards or not view.project.importers.get(view.path) or view.launch_commands():
        return False  # a script the project's documents run (DINO's eval_knn.py) is an entry point
    if not view.project.in_package(view.path):
        return False  # a script beside others, not a package's module (Face_Pytorch's eval_lfw.py)
    name = function.name.value  # type: ignore[attr-defined]
    uses = [n for n in ctx.nodes(cst.Name) if n.value == name and n is not function.name]  # type: ignore[attr-defined]
    if not uses or not all(any(ctx.is_descendant(use, guard) for guard in ctx.main_guards) for use in uses):
        return False
    return view.mentions_outside(name, kind=MODULE_LEVEL) == 0


# Lightning hooks that only ``trainer.predict(...)`` / ``trainer.test(...)`` run, and those calls.
_HOOKS_RUN_BY = {
    "predict_dataloader": "predict", "predict_step": "predict", "on_predict_start": "predict",
    "test_dataloader": "test", "test_step": "test", "on_test_start": "test",
}
_TRAINER_CALLS = {name: re.compile(rb"\." + name.encode() + rb"\s*\(") for name in ("predict", "test")}


def _lightning_hook_nothing_runs(ctx: FileContext, view, node: cst.CSTNode, cls: cst.CSTNode) -> str | None:
    """A ``predict_dataloader`` (``test_dataloader``...) of a LightningModule or DataModule in a
    project where no file calls ``.predict(`` (``.test(``): earth-forecasting-transformer's
    scripts fit and test, and never predict."""
    from advisor.facts.frameworks import LIGHTNING_MODULES

    if not isinstance(cls, cst.ClassDef):
        return None
    method = _method_around(ctx, node, cls)
    run_by = _HOOKS_RUN_BY.get(method.name.value) if method is not None else None
    if run_by is None or not any(base in LIGHTNING_MODULES for base in ctx.base_qualnames(cls)):
        return None
    pattern = _TRAINER_CALLS[run_by]
    project = view.project
    if view.texts_matching(pattern) or any(pattern.search(project.text(path)) for path in project.notebooks):
        return None
    return f"`{method.name.value}` runs only under `trainer.{run_by}(...)`, which nothing in the project calls, so the fix is left as advice"


def _method_around(ctx: FileContext, node: cst.CSTNode, cls: cst.ClassDef) -> cst.FunctionDef | None:
    """The method of ``cls``'s body that holds ``node``."""
    return next(
        (a for a in ctx.ancestors(node) if isinstance(a, cst.FunctionDef) and ctx.parent.get(ctx.parent.get(a)) is cls), None
    )


def _called_by_its_decorator_or_protocol(ctx: FileContext, definition: "cst.FunctionDef | cst.ClassDef") -> bool:
    """Decorated (registered, or called through its decorator) or a dunder a protocol calls. A
    decorator that only wraps the function for its callers (GeoTransformer's
    ``@torch.no_grad()`` over ``point_to_node_partition_bug``, which nothing calls) registers
    nothing: the function still runs only where its name is called."""
    if definition.name.value.startswith("__"):
        return True
    for decorator in definition.decorators:
        target = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
        if (ctx.qualname(target) or "") not in _WRAPPING_DECORATORS:
            return True
    return False


# Decorators that wrap a function for whoever calls it by name, and register it nowhere.
_WRAPPING_DECORATORS = frozenset({
    "torch.no_grad", "torch.inference_mode", "torch.enable_grad", "torch.set_grad_enabled",
    "torch.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast",
    "functools.lru_cache", "functools.cache", "functools.wraps", "staticmethod", "classmethod",
})


def _only_unused_users(ctx: FileContext, view, definition: cst.CSTNode, depth: int = 0) -> list[str]:
    """The module-level functions and classes of this file that use ``definition``, where they
    are all its uses in the project and nothing uses them (IDvs.MoRec's ``metrics_topK``, called
    only by the ``eval_model_special`` nothing calls) or they use it only in a branch that never
    runs (:func:`~advisor.facts.branches.dormant_flag`), as the message names them; empty where
    one use may run."""
    # Asked again by each fix inside the same function.
    return ctx.memo_for_this_check(
        (_only_unused_users, definition, depth), lambda: _find_only_unused_users(ctx, view, definition, depth)
    )


def _find_only_unused_users(ctx: FileContext, view, definition: cst.CSTNode, depth: int) -> list[str]:
    name = definition.name.value  # type: ignore[attr-defined]
    if depth > 1 or ctx.path.endswith(".ipynb") or view.reached() is not True or view.project.declared_entry(ctx.path):
        return []  # a library's functions are its interface; what an entry declaration runs is named outside the code
    if view.mentions_outside(name, kind=MODULE_LEVEL):
        return []  # used in another file too
    named = [n for n in ctx.nodes(cst.Name) if n.value == name and n is not definition.name]  # type: ignore[attr-defined]
    uses = [n for n in named if not _self_attribute(ctx, n)]  # ``self.name`` is a method's namesake
    if len(named) + 1 + _compared_strings(ctx, name) < view.project.mentions_in(name, ctx.source):
        return []  # named in a string too (a registry, ``getattr``)
    from advisor.facts.branches import dormant_flag

    users: dict[str, None] = {}
    for use in uses:
        user = ctx.outermost_definition(use)
        if user is None:
            return []  # module-level code runs
        if user is definition:
            continue  # its own recursion
        if ctx.parent.get(user) is not ctx.module or _called_by_its_decorator_or_protocol(ctx, user):
            return []
        if dormant_flag(ctx, use) is not None:
            # DM-Count's ``sinkhorn`` calls ``sinkhorn_stabilized`` only under a method nothing chooses.
            users[f"`{user.name.value}` (in a branch that never runs)"] = None
            continue
        if view.called(user.name.value, kind=MODULE_LEVEL) and not _only_unused_users(ctx, view, user, depth + 1):
            return []
        users[f"`{user.name.value}`"] = None
    return list(users)


def _compared_strings(ctx: FileContext, name: str) -> int:
    """The strings ``"name"`` that a test compares with (``method == "sinkhorn_stabilized"``): a
    choice of behaviour that shares the function's name, not a look-up of it."""
    return sum(
        1 for node in ctx.nodes(cst.SimpleString)
        if isinstance(ctx.parent.get(node), cst.ComparisonTarget) and node.evaluated_value == name
    )


def _self_attribute(ctx: FileContext, name: cst.Name) -> bool:
    """``name`` is the attribute of ``self.name`` / ``cls.name``."""
    attribute = ctx.parent.get(name)
    return (
        isinstance(attribute, cst.Attribute)
        and attribute.attr is name
        and isinstance(attribute.value, cst.Name)
        and attribute.value.value in ("self", "cls")
    )


# Methods a framework calls by name: nn.Module's own, which an override replaces.
_MODULE_METHODS = frozenset({
    "forward", "extra_repr", "train", "eval", "state_dict", "load_state_dict", "parameters", "named_parameters",
    "buffers", "named_buffers", "children", "modules", "named_modules", "apply", "cuda", "cpu", "to", "half",
    "float", "double", "zero_grad", "reset_parameters", "requires_grad_", "register_buffer", "register_parameter",
})
# Bases whose subclasses' other methods only the project's own code calls.
_PLAIN_BASES = frozenset({"object", "torch.nn.Module", "torch.nn.modules.module.Module", "torch.utils.data.Dataset"})


def _plain_class(ctx: FileContext, cls: cst.ClassDef, depth: int = 0) -> bool:
    """A class of :data:`_PLAIN_BASES`, or of project classes that are plain in turn
    (ZZWaang's ``DisentangleVAE(PytorchModel)``, whose base is an ``nn.Module`` of its
    ``amc_dl`` package): the project's own code is what calls their methods."""
    if cls.keywords:
        return False
    for base in cls.bases:
        if ctx.qualname(base.value) in _PLAIN_BASES:
            continue
        if isinstance(base.value, cst.Name) and base.value.value == "object" and not ctx.lookup("object", base.value):
            continue  # the builtin (LLMRec's ``class Trainer(object)``), which has no qualified name
        if depth >= 3 or ctx.project is None or not isinstance(base.value, (cst.Name, cst.Attribute)):
            return False
        found = ctx.project.binding(base.value)
        if found is None or not isinstance(found[1].node, cst.ClassDef) or not _plain_class(found[0], found[1].node, depth + 1):
            return False
    return True


def _uncalled_method(ctx: FileContext, view, node: cst.CSTNode, cls: cst.CSTNode) -> str | None:
    """Why the method of a module-level class around ``node`` never runs, or None: nothing in
    the project names it beyond its ``def`` (stable-dreamfusion's never-called ``log_images``
    paths, DiffDock's ``compute_affinity``), or only methods of the file that nothing calls do
    (deep-cross-modal-hashing's ``get_img_code``, called by the ``get_train_hash`` whose one call
    is commented out). The class is a plain one or an ``nn.Module`` / ``Dataset``, whose other
    methods only the project's own code calls, and the method not one nn.Module calls itself
    (``forward``)."""
    method = _plain_method_around(ctx, node, cls)
    if method is None or method.name.value in _MODULE_METHODS:
        return None
    name = method.name.value
    if not view.called(name, METHOD):
        return f"nothing in the project calls the method `{name}`"
    callers = _only_uncalled_callers(ctx, view, method)
    if callers:
        named = ", ".join(f"`{caller}`" for caller in callers)
        return f"the method `{name}` is called only by {named}, which nothing in the project calls"
    return None


def _plain_method_around(ctx: FileContext, node: cst.CSTNode, cls: cst.CSTNode) -> cst.FunctionDef | None:
    """The method around ``node`` of ``cls``, a module-level class whose methods only the
    project's own code calls (:func:`_plain_class`), where a call in the project's text is what
    runs it: not decorated (``@staticmethod`` and ``@classmethod`` aside) nor a dunder."""
    if not isinstance(cls, cst.ClassDef) or not _plain_class(ctx, cls):
        return None  # a framework's subclass (Lightning, HF Trainer) may have its hooks called by name
    from advisor.project import CALLED_BY_FRAMEWORKS

    if cls.name.value in CALLED_BY_FRAMEWORKS:
        return None
    method = _method_around(ctx, node, cls)
    if method is None or method.name.value.startswith("__"):
        return None
    if any(not (isinstance(d.decorator, cst.Name) and d.decorator.value in _PLAIN_DECORATORS) for d in method.decorators):
        return None
    return method


# Decorators that make a method no less the project's own to call.
_PLAIN_DECORATORS = frozenset({"staticmethod", "classmethod"})


def _only_uncalled_callers(ctx: FileContext, view, method: cst.FunctionDef) -> list[str]:
    """The methods of this file's plain classes that call ``method``, where they are all its
    uses in the project and nothing calls them; empty where one use may run."""
    name = method.name.value
    if view.reached() is not True or view.mentions_outside(name, METHOD):
        return []
    named = [n for n in ctx.nodes(cst.Name) if n.value == name and n is not method.name]
    if len(named) + 1 < view.project.mentions_in(name, ctx.source):
        return []  # named in a string too (``getattr(self, "name")``)
    callers: dict[str, None] = {}
    for use in named:
        caller = next((a for a in ctx.ancestors(use) if isinstance(a, cst.FunctionDef)), None)
        if caller is method:
            continue  # its own recursion
        outer = ctx.outermost_definition(use)
        if caller is None or not isinstance(outer, cst.ClassDef) or ctx.parent.get(outer) is not ctx.module:
            return []
        if _plain_method_around(ctx, use, outer) is not caller or caller.name.value in _MODULE_METHODS:
            return []
        if view.called(caller.name.value, METHOD):
            return []
        callers[caller.name.value] = None
    return list(callers)


# Lightning's banner in a cell's saved output: the notebook was last run on a machine without
# one (chemprop's tutorials, executed on CPU by its documentation build).
_NO_GPU_OUTPUT = re.compile(rb"GPU available: False")
# The script's own word for it, in what a cell printed (not its source, which prints it only in
# the branch without a GPU): a course's "No GPU found, using CPU instead".
_NO_GPU_PRINTED = re.compile(r"\bNo GPU (?:found|available)\b", re.I)
_RAN_WITHOUT_GPU = "the notebook's saved outputs show it ran without a GPU (`{}`), so the fix is left as advice"


def _notebook_ran_without_gpu(ctx: FileContext) -> str | None:
    """What a notebook's saved outputs say of running without a GPU, or None."""

    def read() -> str | None:
        try:
            with open(ctx.path, "rb") as handle:
                if _NO_GPU_OUTPUT.search(handle.read()) is not None:
                    return "GPU available: False"
        except OSError:
            return None
        from advisor.facts.environment import notebook_outputs

        printed = _NO_GPU_PRINTED.search(notebook_outputs(ctx))
        return printed.group(0) if printed else None

    return ctx.memo(_notebook_ran_without_gpu, read)


# A fix that turns on bf16 or TF32 needs an Ampere-or-newer GPU, whatever the target says.
_NEEDS_AMPERE = re.compile(r"bf16|bfloat16|tf32|matmul_precision", re.I)


def _withhold_on_the_notebooks_own_hardware(ctx: FileContext, finding: Finding) -> None:
    """A notebook's metadata says where it runs (Colab's ``"gpuType": "T4"``, a TPU runtime):
    a bf16 or TF32 fix there needs a GPU the notebook does not ask for, and on a TPU no CUDA
    fix applies. Advice, saying so."""
    from advisor.facts.environment import notebook_gpu

    assert finding.fix is not None
    hardware = notebook_gpu(ctx)
    if hardware == "a TPU":
        finding.as_advice("the notebook's metadata asks for a TPU runtime, so the fix is left as advice")
    elif hardware is not None and _NEEDS_AMPERE.search(finding.fix.description):
        shown = hardware if hardware.startswith("a ") else f"a {hardware}"
        finding.as_advice(
            f"the notebook's metadata says it runs on {shown}, which may have no bf16 or TF32 (Ampere or newer), "
            f"so the fix is left as advice"
        )


def _withhold_on_the_recorded_hardware(ctx: FileContext, finding: Finding) -> None:
    """A bf16 or TF32 fix where the project records running on an older GPU only (a notebook's
    nvidia-smi output, a README sending its readers to Kaggle's GPUs) becomes advice: whatever
    GPU the target names, the code is shared with those who run it where the project says."""
    from advisor.facts.environment import recorded_gpu

    assert finding.fix is not None
    if not _NEEDS_AMPERE.search(finding.fix.description):
        return
    recorded = recorded_gpu(ctx)
    if recorded is not None:
        gpu, where = recorded
        finding.as_advice(
            f"{where} runs the code on {gpu}, without bf16 or TF32 (Ampere or newer), so the fix is left as advice"
        )


def _withhold_in_older_version_branch(ctx: FileContext, finding: Finding) -> None:
    """A fix in the branch the authors keep for older library versions becomes advice: the
    newer branch is where the current code lives, and the older one may not take the fix
    (``use_reentrant=False`` in diffusers' ``else:`` after ``is_torch_version(">=", "1.11.0")``)."""
    from advisor.facts.branches import in_older_version_branch

    guard = in_older_version_branch(ctx, finding.node)
    if guard is not None:
        test = " ".join(ctx.code(guard.test).split())
        finding.as_advice(f"the code is in the branch `if {test[:60]}` keeps for other library versions, so the fix is left as advice")
