"""The fixer's guarantees, independent of any one rule: broken edits are dropped, rounds converge,
imports are added in the file's style."""
from __future__ import annotations

import libcst as cst
import pytest

from advisor import engine
from advisor.engine import Settings
from advisor.fixer import add_imports, fix_source
from advisor.rule import Applicability, Edit, Rule
from advisor.targets import ASSUMED

SOURCE = "import torch\n\nx = torch.zeros(1)\ny = 2\n"


class BreaksTheFile(Rule):
    code = "ADV990"
    name = "test-breaks-the-file"
    fix_applicability = Applicability.SAFE

    def check(self, ctx):
        for statement in ctx.module.body[1:2]:
            bad = cst.parse_statement("return 1")  # `return` outside a function: does not compile
            yield self.report(statement, "breaks", self.fix("insert a bad return", Edit(statement, bad)))


class AddsTorchCall(Rule):
    code = "ADV991"
    name = "test-adds-a-call"
    fix_applicability = Applicability.UNSAFE

    def check(self, ctx):
        for assign in ctx.nodes(cst.Assign):
            target = assign.targets[0].target
            if isinstance(target, cst.Name) and target.value == "y" and isinstance(assign.value, cst.Integer):
                expr, imports = ctx.reference("torch.float16")
                yield self.report(assign, "wants a dtype", self.fix("use a dtype", Edit(assign.value, expr), imports=imports))


@pytest.fixture
def extra_rules(monkeypatch):
    instances = dict(engine.rule_instances())
    instances["ADV990"] = BreaksTheFile()
    instances["ADV991"] = AddsTorchCall()
    monkeypatch.setattr(engine, "_RULE_INSTANCES", instances)


def settings(*codes):
    return Settings(codes=frozenset(codes), target=ASSUMED)


def test_a_fix_that_breaks_the_code_is_dropped_and_reported(extra_rules):
    result = fix_source("t.py", SOURCE.encode(), settings("ADV990"), unsafe=True)
    assert result.fixed == SOURCE.encode()
    assert result.dropped and "ADV990" in result.dropped[0]
    assert [d.code for d in result.remaining] == ["ADV990"]


def test_good_fixes_survive_next_to_a_broken_one(extra_rules):
    result = fix_source("t.py", SOURCE.encode(), settings("ADV990", "ADV991"), unsafe=True)
    assert b"y = torch.float16" in result.fixed
    assert result.dropped


def test_unsafe_fixes_need_the_flag(extra_rules):
    assert fix_source("t.py", SOURCE.encode(), settings("ADV991"), unsafe=False).fixed == SOURCE.encode()


def test_imports_added_in_the_files_style():
    module = cst.parse_module('"""Doc."""\nfrom __future__ import annotations\nimport os\n\nx = 1\n')
    assert add_imports(module, ["torch"]).code == '"""Doc."""\nfrom __future__ import annotations\nimport os\nimport torch\n\nx = 1\n'
    aliased = cst.parse_module("import torch as T\nx = 1\n")
    assert add_imports(aliased, ["torch"]).code == "import torch as T\nimport torch\nx = 1\n"
    already = cst.parse_module("import torch\nx = 1\n")
    assert add_imports(already, ["torch"]) is already


def test_reference_needs_no_import_when_an_alias_exists(extra_rules):
    source = "import torch as T\n\ny = 2\n"
    result = fix_source("t.py", source.encode(), settings("ADV991"), unsafe=True)
    assert result.fixed.decode() == "import torch as T\n\ny = T.float16\n"


def test_a_fix_that_leaves_a_name_unbound_is_not_written():
    """Compiling is not enough: dropping an import still read below raises NameError at run time."""
    from advisor.fixer import _compiles, unbound_names

    original = "import torch\n\ndef step(scaler):\n    from torch.cuda.amp import autocast\n    with autocast():\n        scaler.step()\n"
    broken = original.replace("    from torch.cuda.amp import autocast\n", "")
    before = unbound_names(original)
    assert before == frozenset()
    assert _compiles(broken, "t.py") and not _compiles(broken, "t.py", before)
    assert _compiles(original.replace("with autocast():", 'with torch.autocast("cuda"):'), "t.py", before)
    assert unbound_names("from torch import *\nx = y\n") is None  # a star import binds what it binds


def test_a_comment_above_a_removed_import_does_not_undo_the_fix_below_it():
    # zero_nlp's copy of the HF Trainer: the deprecated autocast imported inside the branch.
    source = """
        import torch

        class T:
            def step(self):
                if self.do_grad_scaling:
                    # AMP: gradients need unscaling
                    from torch.cuda.amp import autocast as autocast
                    with autocast():
                        self.scaler.unscale_(self.optimizer)
    """
    from helpers import fix

    fixed = fix(source, codes=["ADV204"], gpu="A100").fixed.decode()
    assert "# AMP: gradients need unscaling\n            with torch.autocast(\"cuda\"):" in fixed
    assert "import autocast" not in fixed


def test_a_keyword_added_to_a_call_whose_closing_paren_has_its_own_line_keeps_the_layout():
    """simpletransformers: ``.to(\\n    device\\n)``; the keyword goes on the argument's line, and
    the closing parenthesis stays where it was (not ``device, \\n    non_blocking=True)``)."""
    import libcst as cst

    from advisor.edits import set_keyword

    source = 'x = batch["e"].to(\n    device\n)\ny = g(a,\n      b\n)\n'
    module = cst.parse_module(source)

    class AddKeyword(cst.CSTTransformer):
        def leave_Call(self, original, updated):
            return set_keyword(updated, "non_blocking", "True")

    fixed = module.visit(AddKeyword()).code
    assert fixed.startswith('x = batch["e"].to(\n    device, non_blocking=True\n)\n')
    compile(fixed, "fixed.py", "exec")
