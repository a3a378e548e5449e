"""Positions are LibCST's ``PositionProvider``'s, node for node, however they are computed.

advisor regenerates only the statement that holds a node, at the line Python's parser gives
it, and checks the regenerated code against the source; anything that does not line up falls
back to regenerating the whole file. These tests compare every indexed node with
``PositionProvider`` on the fixtures, on real library files and on code written to trip the
statement walk, and check that the cheap path is the one taken where it should be.
"""
from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import libcst as cst
import pytest
from helpers import target_for
from libcst.metadata import MetadataWrapper, PositionProvider

from advisor.context import FileContext
from advisor.engine import parse
from advisor.positions import Positions

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures").glob("*.py")) + sorted((ROOT / "fixtures" / "lookalikes").glob("*.py"))
LIBRARY_FILES = [
    ("torch", "optim/adamw.py"),
    ("torch", "utils/data/dataloader.py"),
    ("torch", "nn/modules/module.py"),
    ("transformers", "trainer_pt_utils.py"),
    ("transformers", "models/llama/modeling_llama.py"),
    ("accelerate", "accelerator.py"),
    ("accelerate", "utils/operations.py"),
]

TRICKY = {
    "decorators with comments": """\
import torch

# a comment above
@decorator  # trailing

# between decorators
@other(
    1,
)
def f(x):
    # leading comment
    return x
""",
    "semicolons and one-line suites": "import torch\nx = 1; y = 2\nif x: y = 3; z = 4\nfor i in range(3): pass\nwhile False: break\nprint(x)\n",
    "elif chains and else": """\
import torch
if a:
    x = 1
elif b:
    x = 2
elif c:
    pass
else:
    if d:
        x = 3
    else:
        x = 4
""",
    "try in all its forms": """\
import torch
try:
    a()
except ValueError as e:
    b()
except (KeyError, TypeError):
    c()
else:
    d()
finally:
    e()
for i in x:
    continue
else:
    done()
while y:
    break
else:
    other()
""",
    "match": """\
import torch
match command:
    case "go":
        go()
    case [x, y]:
        move(x, y)
    case _:
        pass
""",
    "async and with": """\
import torch
async def main():
    async with lock:
        await thing()
    async for item in stream():
        print(item)
    with open(f) as a, open(g) as b:
        pass
""",
    "comments at odd indentation and a block footer": """\
import torch
def f():
    x = 1
# dedented comment inside the function
        # over-indented comment
    y = 2
    # trailing comment of the block

z = 3
""",
    "line continuations": """\
import torch
x = \\
    1
if x and \\
        y:
    z = (
        1,
        2,
    )
""",
    "parenthesized statement starts": "import torch\n(a) = 1\n(\n    b\n)\n[c, d] = 1, 2\n",
    "tabs and CRLF": "import torch\r\nif x:\r\n\ty = 1\r\n\tif y:\r\n\t\tz = 2\r\n",
    "lone CR": "import torch\rx = 1\rif x:\r    y = 2\r",
    "no trailing newline": "import torch\nif x:\n    y = 1",
    "form feed between functions": "import torch\n\x0c\ndef f():\n    pass\n\x0c\ndef g():\n    return 1\n",
    "nested classes and functions": """\
import torch
class A:
    '''doc'''
    x: int = 1

    class B:
        def m(self):
            def inner():
                return [
                    i for i in range(3)
                ]
            return inner
""",
    "global, nonlocal, del, assert, raise": "import torch\ndef f():\n    global g\n    del g\n    assert x, 'm'\n    raise E from None\n",
    "a decorator continued with a backslash": "import torch\n@\\\ndecorator\ndef f():\n    pass\n",
    "statements ast cannot parse on every Python": "import torch\ntype Alias = list[int]\nx = 1\n",
    "comments above the first statement and below the last": "#!/usr/bin/env python\n# Copyright\n\nimport torch\nx = 1\n\n# the end\n",
    "a last comment without a newline": "# header\nimport torch\nx = 1\n# the end",
    "only comments": "# torch\n\n# nothing else\n",
    "comments inside statements": "import torch  # noqa: ADV101\ndef f(\n    x,  # the input\n):\n    # inside\n    return x  # out\n    # after\n",
}


def provider_positions(source: str) -> dict[cst.CSTNode, tuple[int, int, int, int]]:
    wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    return wrapper.module, {
        node: (p.start.line, p.start.column + 1, p.end.line, p.end.column + 1) for node, p in positions.items()
    }


def assert_positions_match(source: str, seed: int = 0) -> Positions:
    module, expected = provider_positions(source)
    ctx = FileContext("positions.py", source, module, target_for("A100"))  # the provider's tree
    ctx.nodes(cst.Comment)  # comments join the index with their statement as parent (``# noqa``)
    nodes = [node for node in ctx.parent if not isinstance(node, cst.Module)]
    random.Random(seed).shuffle(nodes)  # whichever statement is asked for first
    positions = Positions(source, module, ctx.parent)
    for node in nodes:
        assert positions.of(node) == expected[node], (type(node).__name__, ctx.code(node)[:80])
    return positions


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixture_positions_are_the_providers_without_regenerating_the_file(path):
    positions = assert_positions_match(path.read_text())
    assert not positions._whole_file_done


@pytest.mark.parametrize("package,relative", LIBRARY_FILES, ids=lambda v: str(v))
def test_library_file_positions_are_the_providers(package, relative):
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.exists():
        pytest.skip(f"{relative} moved in this {package} release")
    positions = assert_positions_match(path.read_text(encoding="utf-8"))
    assert not positions._whole_file_done


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_tricky_code_positions_are_the_providers(name):
    for seed in range(3):
        assert_positions_match(TRICKY[name], seed)


def test_statements_ast_cannot_parse_fall_back_to_the_whole_file():
    # Twice, so that finding the statement's code in the source cannot place it either.
    source = TRICKY["statements ast cannot parse on every Python"] + "type Alias = list[int]\n"
    positions = assert_positions_match(source)
    if not hasattr(__import__("ast"), "TypeAlias"):
        assert positions._whole_file_done


def test_a_decorator_continued_with_a_backslash_is_caught_by_the_source_check():
    source = TRICKY["a decorator continued with a backslash"] * 2  # twice: the search cannot place it
    positions = assert_positions_match(source)
    assert positions._whole_file_done  # ast says line 3 for the decorator; the code starts on 2


def test_a_statement_whose_code_occurs_once_is_placed_without_asking_pythons_parser():
    source = "import torch\nloss.backward()\nx = DataLoader(ds, batch_size=8)\nloss.backward()\n"
    module, expected = provider_positions(source)
    ctx = FileContext("positions.py", source, module, target_for("A100"))
    positions = Positions(source, module, ctx.parent)
    call = next(node for node in ctx.nodes(cst.Call) if ctx.code(node.func) == "DataLoader")
    assert positions.of(call) == expected[call]
    assert positions._anchors is None  # found by its code alone
    twice = next(node for node in ctx.nodes(cst.Call) if ctx.code(node.func) == "loss.backward")
    assert positions.of(twice) == expected[twice]  # the code occurs twice: Python's parser says which line
    assert positions._anchors is not None and not positions._whole_file_done


def test_the_module_node_is_positioned_too():
    source = "import torch\nx = 1\n"
    ctx = parse("m.py", source.encode(), target_for("A100"))
    assert ctx.position(ctx.module) == (1, 1, 3, 1)


def test_a_licence_header_is_positioned_without_regenerating_the_file():
    source = TRICKY["comments above the first statement and below the last"]
    module, expected = provider_positions(source)
    ctx = FileContext("positions.py", source, module, target_for("A100"))
    positions = Positions(source, module, ctx.parent)
    for line in (*module.header, *module.footer):
        if line.comment is not None:
            assert positions.of(line.comment) == expected[line.comment]
    assert not positions._whole_file_done
