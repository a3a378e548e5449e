"""Property-based robustness tests, in the way ruff fuzzes its fixes.

Inputs:

- random valid programs from hypothesmith (``from_grammar`` and ``from_node``), behind an
  ``import torch`` so that the engine analyzes them instead of skipping them;
- random combinations of the rules' own valid/invalid examples, each optionally nested in a
  function, a loop or an ``if``: every rule meets every other rule's code;
- mutations of the realistic scripts in ``fixtures/`` and ``fixtures/lookalikes/``, made with
  LibCST: import aliases renamed (``import torch as T``, every use renamed with it), keyword
  arguments reordered, comments and blank lines added, the body wrapped in ``def main():`` or
  nested in ``if True:`` / ``with contextlib.nullcontext():`` / ``try:``.

Properties, for every input: ``check`` raises nothing and reports no error for a program that
compiles; ``fix --unsafe-fixes`` raises nothing, drops no fix as broken, leaves no fix pending
at the round limit, writes code that compiles and uses no name the original did not define;
fixing the fixed code changes nothing. Renames, reorders and comments preserve semantics, so
on those mutations the set of codes found must also be the one found on the original.

CI runs a modest, derandomized number of examples. ``ADVISOR_FUZZ_EXAMPLES=2000`` runs that
many per test, with fresh randomness.
"""
from __future__ import annotations

import functools
import os
import textwrap
import warnings
from pathlib import Path

import hypothesmith
import libcst as cst
from helpers import settings as advisor_settings
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from libcst.metadata import MetadataWrapper, ScopeProvider
from libcst.metadata.scope_provider import ImportAssignment
from test_corpus_smoke import runner  # bench/robustness/run.py: the corpus run's checks

from advisor.engine import check_file
from advisor.fixer import fix_source

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_PATHS = sorted(list(FIXTURES.glob("*.py")) + list(FIXTURES.glob("lookalikes/*.py")))
ALL_RULES = advisor_settings()
LOCAL_EXAMPLES = int(os.environ.get("ADVISOR_FUZZ_EXAMPLES", "0"))


def fuzz_settings(ci_examples: int):
    """Few derandomized examples in CI; ``ADVISOR_FUZZ_EXAMPLES`` fresh random ones locally."""
    return settings(
        max_examples=LOCAL_EXAMPLES or ci_examples,
        deadline=None,
        derandomize=not LOCAL_EXAMPLES,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


# -- the properties -----------------------------------------------------------------------
def assert_robust(source: str, path: str = "fuzzed.py", unsafe: bool = True) -> set[str]:
    """The robustness properties on one program; returns the set of codes ``check`` found."""
    data = source.encode()
    checked = check_file(path, ALL_RULES, data=data)
    assert not checked.errors, [e.message for e in checked.errors]
    result = fix_source(path, data, ALL_RULES, unsafe)
    assert not result.errors, [e.message for e in result.errors]
    assert not result.dropped, f"fixes that would not compile: {result.dropped}"
    assert result.converged, "fixes still pending when the fix loop hit its round limit"
    fixed = result.fixed.decode()
    assert compiles(fixed), fixed
    if result.changed:
        introduced = runner.undefined_names(fixed) - runner.undefined_names(source)
        assert not introduced, f"the fix uses names nothing defines: {sorted(introduced)}"
        again = fix_source(path, result.fixed, ALL_RULES, unsafe)
        assert not again.changed, f"fixing twice changes the code again: {[(a.code, a.description) for a in again.applied]}"
    return {d.code for d in checked.diagnostics}


def compiles(source: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            compile(source, "fuzzed.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def parses_with_libcst(source: str) -> bool:
    try:
        cst.parse_module(source)
    except cst.ParserSyntaxError:
        return False
    return True


# -- random programs ----------------------------------------------------------------------
def _behind_torch_import(source: str) -> str:
    program = "import torch\n" + source
    assume(compiles(program))  # e.g. a ``from __future__`` import must stay first
    # Programs that CPython accepts and LibCST's parser does not are LibCST's limits, which
    # the engine reports as ADV000 errors; not what is fuzzed here.
    assume(parses_with_libcst(program))
    return program


@fuzz_settings(ci_examples=20)
@given(hypothesmith.from_grammar())
def test_random_programs_from_the_grammar(source):
    assert_robust(_behind_torch_import(source))


@fuzz_settings(ci_examples=15)
@given(hypothesmith.from_node())
def test_random_programs_from_libcst_nodes(source):
    assert_robust(_behind_torch_import(source))


# -- the rules' examples, combined --------------------------------------------------------
def _rule_examples() -> list[str]:
    from advisor.registry import all_rules

    return [
        textwrap.dedent(example.code).strip("\n") + "\n"
        for rule in all_rules()
        for example in [*rule.valid, *rule.invalid]
    ]


RULE_EXAMPLES = _rule_examples()
WRAPPERS = {
    "none": lambda body: body,
    "function": lambda body: "def main():\n" + textwrap.indent(body, "    ") + "\nmain()\n",
    "loop": lambda body: "for epoch in range(3):\n" + textwrap.indent(body, "    "),
    "if": lambda body: "if __name__ == '__main__':\n" + textwrap.indent(body, "    "),
}


@st.composite
def rule_example_mixes(draw) -> str:
    parts = draw(st.lists(st.sampled_from(RULE_EXAMPLES), min_size=1, max_size=4))
    wrapped = [WRAPPERS[draw(st.sampled_from(sorted(WRAPPERS)))](part) for part in parts]
    program = "\n".join(wrapped)
    assume(compiles(program))  # ``from __future__`` or ``import *`` that no longer sits at the top
    return program


@fuzz_settings(ci_examples=80)
@given(rule_example_mixes(), st.booleans())
def test_rule_examples_combined_and_nested(program, unsafe):
    assert_robust(program, unsafe=unsafe)


# -- fixture mutations --------------------------------------------------------------------
class _Replace(cst.CSTTransformer):
    """Replace nodes of the original tree by identity."""

    def __init__(self, replacements: dict[cst.CSTNode, cst.CSTNode]) -> None:
        self.replacements = replacements

    def on_leave(self, original_node, updated_node):
        return self.replacements.get(original_node, updated_node)


def _names_in(module: cst.Module) -> set[str]:
    names: set[str] = set()

    class Collect(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            names.add(node.value)

    module.visit(Collect())
    return names


def _renameable_imports(module: cst.Module):
    """(alias node, bound name, uses) for imports whose binding can be renamed safely.

    The binding must be the name's only one in its scope, not a bare dotted import
    (``import a.b`` binds ``a``), not declared ``global``/``nonlocal`` anywhere, and read
    only through plain names (not from a string annotation)."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    scopes = set(wrapper.resolve(ScopeProvider).values())
    declared = set()

    class Declared(cst.CSTVisitor):
        def visit_Global(self, node: cst.Global) -> None:
            declared.update(item.name.value for item in node.names)

        def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
            declared.update(item.name.value for item in node.names)

    module.visit(Declared())
    order: dict[cst.CSTNode, int] = {}

    class Order(cst.CSTVisitor):
        def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
            order[node] = len(order)

    module.visit(Order())
    found = []
    for scope in scopes:
        if scope is None:
            continue
        for assignment in scope.assignments:
            if not isinstance(assignment, ImportAssignment) or assignment.name in declared:
                continue
            if len(scope.assignments[assignment.name]) != 1 or isinstance(assignment.node.names, cst.ImportStar):
                continue
            alias = next(
                (a for a in assignment.node.names if (a.evaluated_alias or a.evaluated_name) == assignment.name),
                None,
            )
            if alias is None:
                continue
            uses = [access.node for access in assignment.references]
            if not all(isinstance(use, cst.Name) and use.value == assignment.name for use in uses):
                continue
            found.append((alias, assignment.name, uses))
    found.sort(key=lambda item: (item[1], order[item[0]]))  # scopes come from a set: fix the order
    return found


class Choices:
    """The mutations' random choices, drawn by hypothesis (so that failures shrink)."""

    def __init__(self, draw) -> None:
        self.draw = draw

    def flag(self) -> bool:
        return self.draw(st.booleans())

    def pick(self, options: list):
        return self.draw(st.sampled_from(options))

    def permutation(self, size: int) -> list[int]:
        return self.draw(st.permutations(range(size)))


class Everything(Choices):
    """Every mutation taken, the last option, the reversed order: for exact tests."""

    def __init__(self) -> None:
        pass

    def flag(self) -> bool:
        return True

    def pick(self, options: list):
        return options[-1]

    def permutation(self, size: int) -> list[int]:
        return list(reversed(range(size)))


def rename_import_aliases(module: cst.Module, choices: Choices) -> cst.Module:
    """``import torch`` -> ``import torch as T``: the binding and every read of it renamed."""
    taken = _names_in(module)
    replacements: dict[cst.CSTNode, cst.CSTNode] = {}
    for index, (alias, name, uses) in enumerate(_renameable_imports(module)):
        if not choices.flag():
            continue
        new = choices.pick([f"{name}_{index}", f"_{name.upper()}", f"M{index}"])
        if new in taken:
            continue
        taken.add(new)
        replacements[alias] = alias.with_changes(asname=cst.AsName(name=cst.Name(new)))
        for use in uses:
            replacements[use] = cst.Name(new)
    return module.visit(_Replace(replacements))


class _ReorderKeywords(cst.CSTTransformer):
    """Permute each run of consecutive ``name=value`` arguments of every call."""

    def __init__(self, choices: Choices) -> None:
        self.choices = choices

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        args = list(updated_node.args)
        start = 0
        while start < len(args):
            end = start
            while end < len(args) and args[end].keyword is not None and not args[end].star:
                end += 1
            if end - start >= 2:
                run = args[start:end]
                order = self.choices.permutation(len(run))
                # Commas and spacing belong to the position, not to the argument.
                args[start:end] = [
                    run[new].with_changes(comma=run[old].comma, whitespace_after_arg=run[old].whitespace_after_arg)
                    for old, new in enumerate(order)
                ]
            start = max(end, start + 1)
        return updated_node.with_changes(args=args)


def reorder_keyword_arguments(module: cst.Module, choices: Choices) -> cst.Module:
    return module.visit(_ReorderKeywords(choices))


class _AddComments(cst.CSTTransformer):
    def __init__(self, choices: Choices) -> None:
        self.choices = choices

    def on_leave(self, original_node, updated_node):
        if isinstance(updated_node, cst.BaseStatement) and not isinstance(updated_node, cst.Module):
            extra = self.choices.pick(["", "blank", "comment", "both"])
            lines = []
            if extra in ("blank", "both"):
                lines.append(cst.EmptyLine(indent=False))
            if extra in ("comment", "both"):
                lines.append(cst.EmptyLine(comment=cst.Comment("# added by the fuzzer")))
            if lines:
                return updated_node.with_changes(leading_lines=[*updated_node.leading_lines, *lines])
        return updated_node


def add_comments_and_blank_lines(module: cst.Module, choices: Choices) -> cst.Module:
    return module.visit(_AddComments(choices))


def _split_header(module: cst.Module) -> tuple[list, list]:
    """Statements that must stay at module level (``from __future__``, ``import *``), and the rest."""
    header, body = [], []
    for statement in module.body:
        smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else []
        if any(
            isinstance(s, cst.ImportFrom)
            and (isinstance(s.names, cst.ImportStar) or (isinstance(s.module, cst.Name) and s.module.value == "__future__"))
            for s in smalls
        ):
            header.append(statement)
        else:
            body.append(statement)
    return header, body


def _nest(module: cst.Module, opening: str, closing: str = "", imports: str = "") -> cst.Module:
    header, body = _split_header(module)
    inner = cst.Module(body=body).code
    wrapped = opening + textwrap.indent(inner, "    ", lambda line: True) + closing
    prefix = cst.Module(body=header).code + imports
    return cst.parse_module(prefix + wrapped)


STRUCTURAL = {
    "def main": lambda m: _nest(m, "def main():\n", "\n\nmain()\n"),
    "if True": lambda m: _nest(m, "if True:\n"),
    "with nullcontext": lambda m: _nest(m, "with contextlib.nullcontext():\n", imports="import contextlib\n"),
    "try/finally": lambda m: _nest(m, "try:\n", "finally:\n    pass\n"),
}


@functools.cache
def fixture_source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@functools.cache
def codes_on_original(path: Path) -> frozenset[str]:
    return frozenset(d.code for d in check_file(path.name, ALL_RULES, data=path.read_bytes()).diagnostics)


fixtures = st.sampled_from(FIXTURE_PATHS)


class _DeviceRespelling(cst.CSTTransformer):
    """Writes a device another way that means the same: ``torch.device("cuda" if
    torch.cuda.is_available() else "cpu")`` as recent PyTorch examples pick it (``torch.accelerator``),
    ``torch.device("cuda")`` as ``torch.device("cuda:0")`` and ``torch.device("cuda:0")`` as an index."""

    def __init__(self, choices: Choices) -> None:
        self.choices = choices

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not (
            isinstance(updated_node.func, cst.Attribute)
            and isinstance(updated_node.func.value, cst.Name)
            and updated_node.func.value.value == "torch"
            and updated_node.func.attr.value == "device"
            and len(updated_node.args) == 1
            and updated_node.args[0].keyword is None
        ):
            return updated_node
        argument = updated_node.args[0].value
        if (
            isinstance(argument, cst.IfExp)
            and isinstance(argument.orelse, cst.SimpleString)
            and argument.orelse.value.strip("'\"") == "cpu"
            and "is_available" in cst.Module([]).code_for_node(argument.test)
            and self.choices.flag()
        ):
            return cst.parse_expression(
                'torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")'
            )
        if isinstance(argument, cst.SimpleString) and self.choices.flag():
            text = argument.value.strip("'\"")
            replacement = {"cuda": '"cuda:0"', "cuda:0": "0"}.get(text)
            if replacement is not None:
                return updated_node.with_changes(args=[updated_node.args[0].with_changes(value=cst.parse_expression(replacement))])
        return updated_node


def respell_devices(module: cst.Module, choices: Choices) -> cst.Module:
    return module.visit(_DeviceRespelling(choices))


def renamed_and_reordered(path: Path, data, comments: bool) -> cst.Module:
    """The fixture with, each drawn or not, its devices spelled another way, its import
    aliases renamed, its keyword arguments reordered and (with ``comments``) comments and
    blank lines added."""
    module = cst.parse_module(fixture_source(path))
    choices = Choices(data.draw)
    if data.draw(st.booleans(), label="respell devices"):
        module = respell_devices(module, choices)
    if data.draw(st.booleans(), label="rename aliases"):
        module = rename_import_aliases(module, choices)
    if data.draw(st.booleans(), label="reorder keywords"):
        module = reorder_keyword_arguments(module, choices)
    if comments and data.draw(st.booleans(), label="comments"):
        module = add_comments_and_blank_lines(module, choices)
    return module


@fuzz_settings(ci_examples=20)
@given(fixtures, st.data())
def test_semantics_preserving_mutations_keep_the_codes(path, data):
    mutated = renamed_and_reordered(path, data, comments=True).code
    note(mutated)
    assert compiles(mutated), mutated
    codes = assert_robust(mutated, path=path.name, unsafe=data.draw(st.booleans(), label="unsafe"))
    assert codes == codes_on_original(path), f"{path.name}: only on the original {sorted(codes_on_original(path) - codes)}, only on the mutation {sorted(codes - codes_on_original(path))}"


@fuzz_settings(ci_examples=12)
@given(fixtures, st.sampled_from(sorted(STRUCTURAL)), st.data())
def test_structural_mutations_stay_robust(path, wrapping, data):
    mutated = STRUCTURAL[wrapping](renamed_and_reordered(path, data, comments=False)).code
    note(mutated)
    assume(compiles(mutated))  # a module-level ``global`` inside ``def main`` may not be
    assert_robust(mutated, path=path.name, unsafe=data.draw(st.booleans(), label="unsafe"))


# -- the mutations themselves, so that a no-op mutation cannot pass for robustness -------
MUTATED = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader


    def build(data: "torch.Tensor"):
        return DataLoader(data, batch_size=8, shuffle=True, num_workers=2)


    model = nn.Linear(4, 4).to("cuda")
    """
)


def test_alias_renaming_renames_the_binding_and_every_use():
    renamed = rename_import_aliases(cst.parse_module(MUTATED), Everything()).code
    assert "import torch.nn as M1" in renamed and "model = M1.Linear(4, 4)" in renamed
    assert "from torch.utils.data import DataLoader as M0" in renamed and "return M0(data" in renamed
    # ``torch`` is also read inside a string annotation, which a rename would miss: kept.
    assert "import torch\n" in renamed
    compile(renamed, "renamed.py", "exec")


def test_device_respelling_changes_the_spelling_only():
    source = textwrap.dedent(
        """\
        import torch
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        other = torch.device("cuda")
        first = torch.device("cuda:0")
        """
    )
    respelled = respell_devices(cst.parse_module(source), Everything()).code
    assert "torch.accelerator.current_accelerator() if torch.accelerator.is_available()" in respelled
    assert 'other = torch.device("cuda:0")' in respelled and "first = torch.device(0)" in respelled
    compile(respelled, "respelled.py", "exec")


def test_keyword_reordering_keeps_commas_in_place():
    reordered = reorder_keyword_arguments(cst.parse_module(MUTATED), Everything()).code
    assert "DataLoader(data, num_workers=2, shuffle=True, batch_size=8)" in reordered


def test_structural_wrappings_compile():
    for name, wrap in STRUCTURAL.items():
        wrapped = wrap(cst.parse_module("from __future__ import annotations\n" + MUTATED)).code
        assert wrapped.startswith("from __future__ import annotations\n"), name
        compile(wrapped, name, "exec")


def test_a_fix_loop_cut_short_is_reported_as_not_converged(monkeypatch):
    """``converged`` is what the properties above and bench/robustness rely on: it must see a cut."""
    from advisor import fixer

    data = (FIXTURES / "plain_pytorch.py").read_bytes()
    assert fixer.fix_source("plain_pytorch.py", data, ALL_RULES, unsafe=True).converged
    monkeypatch.setattr(fixer, "MAX_ROUNDS", 1)
    assert not fixer.fix_source("plain_pytorch.py", data, ALL_RULES, unsafe=True).converged
