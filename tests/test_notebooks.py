"""Jupyter notebooks (issue 12): check and fix on .ipynb files, their code cells analysed as the
one program they make, each edit written back into its cell and nothing else touched."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import libcst as cst
import pytest

from advisor import engine
from advisor.engine import Settings, check_file, discover
from advisor.fixer import fix_source
from advisor.notebooks import Notebook, NotebookError
from advisor.rule import Applicability, Edit, Rule
from advisor.targets import resolve_target
from test_cli import run

SCHEMAS = Path(__file__).resolve().parent / "data"
A100 = resolve_target("A100", None, detect=False)


def code(source: str, execution_count=None, outputs=None, cell_id=None, as_string=False, metadata=None) -> dict:
    text = textwrap.dedent(source)
    cell = {
        "cell_type": "code",
        "execution_count": execution_count,
        "id": cell_id or f"cell-{zlib.crc32(text.encode()):08x}",
        "metadata": metadata if metadata is not None else {},
        "outputs": outputs if outputs is not None else [],
        "source": text if as_string else text.splitlines(True),
    }
    return cell


def markdown(text: str) -> dict:
    return {"cell_type": "markdown", "id": f"md-{zlib.crc32(text.encode()):08x}", "metadata": {}, "source": text.splitlines(True)}


def notebook(*cells: dict, indent=1, ensure_ascii=False, sort_keys=True, minor=5) -> bytes:
    document = {
        "cells": list(cells),
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python", "version": "3.11.4"},
        },
        "nbformat": 4,
        "nbformat_minor": minor,
    }
    # Jupyter's own writer: json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    return (json.dumps(document, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n").encode()


OUTPUT = [{"name": "stdout", "output_type": "stream", "text": ["epoch 0: loss 2.31\n", "épоch 1 ✓\n"]}]
IMAGE = [{"data": {"image/png": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk", "text/plain": ["<Figure>"]},
          "execution_count": 7, "metadata": {"needs_background": "light"}, "output_type": "execute_result"}]

# A device in the first code cell, the loader in the third, the loop in the fifth: one program.
TRAINING = (
    markdown("# Fine-tuning\n\nSet-up first.\n"),
    code(
        """\
        %matplotlib inline
        !pip install -q torch
        import torch
        from torch.utils.data import DataLoader
        device = torch.device("cuda")""",
        execution_count=1, outputs=OUTPUT, metadata={"scrolled": True, "tags": ["setup"]},
    ),
    code(
        """\
        %%bash
        nvidia-smi
        python -c "from torch.utils.data import DataLoader; DataLoader(ds)"
        """,
        execution_count=2,
    ),
    code(
        """\
        model = Net().to(device)
        loader = DataLoader(dataset, batch_size=32, num_workers=2)  # keep this comment
        files = !ls data
        DataLoader?""",
        execution_count=3, outputs=IMAGE,
    ),
    markdown("## Train"),
    code(
        """\
        %%time
        for x, y in loader:
            %time step = 1
            x = x.to(device)
            loss = model(x).sum()
            loss.backward()""",
        execution_count=4,
    ),
)


def settings(*codes: str) -> Settings:
    return Settings(codes=frozenset(codes or ("ADV101", "ADV103")), target=A100)


def check(data: bytes, *codes: str, path: str = "train.ipynb"):
    result = check_file(path, settings(*codes), data=data)
    assert not result.errors, result.errors
    return result.diagnostics


def fixed(data: bytes, *codes: str, path: str = "train.ipynb") -> bytes:
    result = fix_source(path, data, settings(*codes), unsafe=True)
    assert not result.errors, result.errors
    return result.fixed


def assert_valid_nbformat(data: bytes) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")
    document = json.loads(data)
    minor = min(document["nbformat_minor"], 5)
    schema = json.loads((SCHEMAS / f"nbformat.v4.{minor}.schema.json").read_text())
    errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(document))
    assert not errors, errors[0].message


# -- check ---------------------------------------------------------------------------------
def test_cells_are_one_program_and_findings_name_their_cell():
    diagnostics = check(notebook(*TRAINING))
    assert [(d.code, d.cell, d.cell_line, d.cell_column) for d in diagnostics] == [
        ("ADV101", 4, 2, 10),  # the loader, in the fourth cell (markdown counts, as Jupyter shows)
        ("ADV103", 6, 4, 9),  # the copy in the loop two cells later, fed by that loader
    ]


def test_the_file_position_is_where_the_code_is_stored_in_the_json():
    data = notebook(*TRAINING)
    lines = data.decode().splitlines()
    for d in check(data):
        stored = lines[d.line - 1]
        assert stored[d.column - 1 :].startswith(("DataLoader(", "x.to(device)")), (stored, d.column)


def test_ipython_syntax_is_masked_and_non_python_cells_left_out():
    notebook_bytes = notebook(*TRAINING)
    python = Notebook.from_bytes(notebook_bytes).python
    assert "%matplotlib" not in python and "!pip" not in python and "!ls" not in python and "DataLoader?" not in python
    assert "%%time" not in python and "%time" not in python
    assert "nvidia-smi" not in python  # the %%bash cell is not Python
    assert "for x, y in loader:" in python  # the %%time cell is
    compile(python, "joined", "exec")


@pytest.mark.parametrize("magic", ["%%bash", "%%writefile train_script.py", "%%sh", "%%html", "%%javascript", "%%latex", "%%markdown", "%%script python3", "%%cython"])
def test_a_cell_magic_that_runs_something_else_takes_the_cell_out(magic):
    loader = "import torch\nfrom torch.utils.data import DataLoader\nmodel.cuda()\nloader = DataLoader(ds)\n"
    assert check(notebook(code(magic + "\n" + loader))) == []
    assert [d.code for d in check(notebook(code("%%capture\n" + loader)))] == ["ADV101"]


def test_ipython_lines_inside_strings_and_brackets_are_python():
    cell = code(
        '''\
        import torch
        text = """
        !not a shell command
        %not a magic
        """
        values = [
            1,
        ]
        model.cuda()
        loader = torch.utils.data.DataLoader(ds)'''
    )
    nb = Notebook.from_bytes(notebook(cell))
    assert "!not a shell command" in nb.python and "%not a magic" in nb.python
    assert [d.code for d in check(notebook(cell))] == ["ADV101"]


def test_indented_magics_keep_their_block_and_automagic_is_masked():
    cell = code(
        """\
        pip install transformers
        import torch
        for batch in loader:
            !nvidia-smi
        ls in paths
        """
    )
    python = Notebook.from_bytes(notebook(cell)).python
    assert "pip install" not in python and "!nvidia-smi" not in python
    assert "ls in paths" in python  # Python, whatever IPython's aliases
    compile(python, "joined", "exec")


def test_suppressions_work_inside_cells():
    cells = list(TRAINING)
    cells[3] = code("model = Net().to(device)\nloader = DataLoader(dataset, batch_size=32, num_workers=2)  # noqa: ADV101\n")
    assert [d.code for d in check(notebook(*cells))] == ["ADV103"]
    cells.append(code("# advisor: noqa\n"))
    assert check(notebook(*cells)) == []


def test_notebooks_that_are_not_python_or_have_no_code_give_nothing():
    r_notebook = json.loads(notebook(code("library(torch)\nmodel$cuda()\n")))
    r_notebook["metadata"] = {"kernelspec": {"language": "R", "name": "ir", "display_name": "R"}}
    assert check(json.dumps(r_notebook).encode()) == []
    assert check(notebook()) == []
    assert check(notebook(markdown("torch DataLoader"))) == []
    assert check(notebook(code("%load_ext autoreload\n%autoreload 2\n!pip install torch"), code(""))) == []
    assert check(b"") == []  # an empty file, as editors create them
    assert fix_source("e.ipynb", b"", settings(), unsafe=True).fixed == b""


@pytest.mark.parametrize(
    "data, message",
    [
        (b'{"cells": [', "invalid JSON"),
        (b"\xff\xfe{}", "cannot decode"),
        (json.dumps({"nbformat": 3, "nbformat_minor": 0, "worksheets": [{"cells": []}], "metadata": {}}).encode(), "nbformat 3"),
        (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}}).encode(), "no `cells` list"),
        (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": {}}).encode(), "not a notebook"),
        (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", "source": 3}]}).encode(), "`source` must be"),
        (json.dumps([1, 2]).encode(), "not a notebook"),
        (b"import torch\n", "invalid JSON"),
    ],
)
def test_a_malformed_notebook_is_an_error_never_a_traceback(data, message, tmp_path, capsys):
    result = check_file("bad.ipynb", settings(), data=data)
    assert result.diagnostics == [] and len(result.errors) == 1
    assert message in result.errors[0].message
    fixed_result = fix_source("bad.ipynb", data, settings(), unsafe=True)
    assert fixed_result.fixed == data and message in fixed_result.errors[0].message
    (tmp_path / "bad.ipynb").write_bytes(data)
    code_, out, err = run(["check", "bad.ipynb", "--no-cache"], capsys, tmp_path)
    assert code_ == 2 and "ADV000" in out and message in out and "Traceback" not in out + err


def test_a_syntax_error_is_reported_in_its_cell(tmp_path, capsys):
    (tmp_path / "broken.ipynb").write_bytes(notebook(code("import torch\n"), markdown("x"), code("x = (1,\ny = 2\n")))
    code_, out, _ = run(["check", "broken.ipynb", "--no-cache"], capsys, tmp_path)
    assert code_ == 2 and "broken.ipynb:cell 3:1:5: ADV000 syntax error" in out


def test_a_cell_that_ends_inside_a_string_is_the_one_reported():
    # Joined, the string would close in the next cell and the error surface there; Jupyter runs
    # each cell alone, and the broken one is the first.
    data = notebook(code('import torch\ndef f():\n    """Docs.\n'), code('def g():\n    """More docs."""\n    return 1\n'))
    result = check_file("cut.ipynb", settings(), data=data)
    assert [(e.cell, e.cell_line, e.message.split(" (")[0]) for e in result.errors] == [
        (1, 3, "syntax error: unterminated triple-quoted string literal")
    ]


# -- fix ------------------------------------------------------------------------------------
def expected_after(data: bytes, *replacements: tuple[str, str]) -> bytes:
    """The notebook's text with the given stored (JSON-escaped) strings replaced, once each."""
    text = data.decode()
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text.encode()


@pytest.mark.parametrize(
    "indent, sort_keys, ensure_ascii, crlf",
    [(1, True, False, False), (2, False, False, False), (4, True, True, False), (None, False, True, False), (1, True, False, True)],
)
def test_fix_changes_the_edited_sources_and_nothing_else(indent, sort_keys, ensure_ascii, crlf):
    data = notebook(*TRAINING, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    if crlf:  # written on Windows: the JSON's own line breaks (a source's are escaped, "\n")
        data = data.replace(b"\n", b"\r\n")
    after = fixed(data)
    assert after == expected_after(
        data,
        ('num_workers=2)  # keep this comment', 'num_workers=2, pin_memory=True)  # keep this comment'),
        ("x = x.to(device)", "x = x.to(device, non_blocking=True)"),
    )
    assert fixed(after) == after  # idempotent
    assert_valid_nbformat(after)


def test_a_source_stored_as_one_string_stays_one_string():
    cells = [code(c["source"] if isinstance(c["source"], str) else "".join(c["source"]), as_string=True) if c["cell_type"] == "code" else c for c in TRAINING]
    data = notebook(*cells)
    after = fixed(data)
    assert after == expected_after(
        data,
        ('num_workers=2)  # keep this comment', 'num_workers=2, pin_memory=True)  # keep this comment'),
        ("x = x.to(device)", "x = x.to(device, non_blocking=True)"),
    )
    assert all(isinstance(c["source"], str) for c in json.loads(after)["cells"] if c["cell_type"] == "code")


def test_an_unchanged_notebook_is_written_back_byte_for_byte():
    for data in (notebook(*TRAINING), notebook(*TRAINING, indent=2, sort_keys=False), b"\xef\xbb\xbf" + notebook(*TRAINING)):
        nb = Notebook.from_bytes(data)
        assert nb.with_python(nb.python) == data
    clean = notebook(code("import torch\nmodel.cuda()\nloader = torch.utils.data.DataLoader(ds, pin_memory=True)\n"))
    assert fixed(clean) == clean


def test_ipython_lines_come_back_as_they_were_when_a_fix_reindents_them():
    cell = code(
        """\
        import torch
        model = Net().cuda()
        model.eval()
        for x in val_loader:
            %time warm_up = 1
            out = model(x.cuda())
            !echo done \\
              twice
            print(out.mean())
        """
    )
    data = notebook(cell)
    result = fix_source("eval.ipynb", data, settings("ADV705"), unsafe=True)
    assert not result.errors
    source = "".join(json.loads(result.fixed)["cells"][0]["source"])
    assert "with torch.no_grad():" in source
    assert "        %time warm_up = 1\n" in source and "        !echo done \\\n" in source
    assert "      twice\n" in source  # a continuation line stays as written: it is the shell's text


class InsertsAfterAnchor(Rule):
    """Test rule: `torch.backends.cudnn.benchmark = True` after `model = ...`; needs `import torch`."""

    code = "ADV993"
    name = "test-inserts-a-statement"
    fix_applicability = Applicability.SAFE

    def check(self, ctx):
        for statement in ctx.module.body:
            if isinstance(statement, cst.SimpleStatementLine) and "model = " in ctx.module.code_for_node(statement):
                if "benchmark" in ctx.source:
                    return
                reference, imports = ctx.reference("torch.backends")
                new = cst.parse_statement(f"{ctx.module.code_for_node(reference)}.cudnn.benchmark = True")
                fix = self.fix("enable cudnn.benchmark", Edit(statement, cst.FlattenSentinel([statement, new])), imports=imports)
                yield self.report(statement, "benchmark off", fix)


@pytest.fixture
def inserting_rule(monkeypatch):
    instances = dict(engine.rule_instances())
    instances["ADV993"] = InsertsAfterAnchor()
    monkeypatch.setattr(engine, "_RULE_INSTANCES", instances)


def test_an_inserted_statement_and_its_import_land_in_the_right_cells(inserting_rule):
    data = notebook(
        markdown("# torch"),
        code("!pip install torch\nimport numpy as np\nimport os"),
        code("%%bash\necho"),
        code("model = build()  # a torch model\nprint(model)"),
    )
    cells = json.loads(fixed(data, "ADV993"))["cells"]
    assert "".join(cells[1]["source"]) == "!pip install torch\nimport numpy as np\nimport os\nimport torch"
    assert "".join(cells[2]["source"]) == "%%bash\necho"
    assert "".join(cells[3]["source"]) == "model = build()  # a torch model\ntorch.backends.cudnn.benchmark = True\nprint(model)"


def test_without_imports_an_import_goes_above_the_first_python_statement(inserting_rule):
    # Not above `!pip install torch`: the package would be imported before it is installed.
    data = notebook(markdown("torch"), code("!pip install torch"), code("%%time\nmodel = build()  # torch"))
    cells = json.loads(fixed(data, "ADV993"))["cells"]
    assert "".join(cells[1]["source"]) == "!pip install torch"
    assert "".join(cells[2]["source"]) == "%%time\nimport torch\nmodel = build()  # torch\ntorch.backends.cudnn.benchmark = True"


def test_a_fixed_source_that_moved_a_cell_boundary_is_refused():
    nb = Notebook.from_bytes(notebook(*TRAINING))
    lines = nb.python.splitlines(True)
    marker = next(i for i, line in enumerate(lines) if " cell 1" in line)
    with pytest.raises(NotebookError):
        nb.with_python("".join(lines[:marker] + lines[marker + 1 :]))
    next_marker = next(i for i, line in enumerate(lines) if " cell 2" in line)
    swapped = list(lines)
    swapped[marker], swapped[next_marker] = lines[next_marker], lines[marker]
    with pytest.raises(NotebookError):
        nb.with_python("".join(swapped))
    masked = next(i for i, line in enumerate(lines) if " ipython " in line)
    with pytest.raises(NotebookError):
        nb.with_python("".join(lines[:masked] + lines[masked + 1 :]))


# -- the command line -----------------------------------------------------------------------
@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.advisor]\nselect = ["ADV101", "ADV103"]\ngpu = "A100"\n')
    (tmp_path / "train.ipynb").write_bytes(notebook(*TRAINING))
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "explore.ipynb").write_bytes(notebook(*TRAINING))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_nb.ipynb").write_bytes(notebook(*TRAINING))
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "train-checkpoint.ipynb").write_bytes(notebook(*TRAINING))
    return tmp_path


def test_text_output_names_the_cell(project, capsys):
    code_, out, _ = run(["check", "train.ipynb", "--no-cache"], capsys, project)
    assert code_ == 1
    assert "train.ipynb:cell 4:2:10: ADV101 [*] DataLoader without `pin_memory=True`" in out
    assert "train.ipynb:cell 6:4:9: ADV103 [*]" in out


def test_a_folder_walk_finds_notebooks_and_exclude_applies(project, capsys):
    files, _ = discover([str(project)], ["tests"], str(project))
    assert sorted(Path(f).relative_to(project).as_posix() for f in files) == ["notebooks/explore.ipynb", "train.ipynb"]
    (project / "pyproject.toml").write_text('[tool.advisor]\nselect = ["ADV101"]\ngpu = "A100"\nextend-exclude = ["notebooks"]\n')
    code_, out, _ = run(["check", ".", "--no-cache", "-q"], capsys, project)
    assert code_ == 1 and out.splitlines() == [
        "./train.ipynb:cell 4:2:10: ADV101 [*] DataLoader without `pin_memory=True`: batches are copied to the GPU from pageable memory (guide: Data preloading)"
    ]
    (project / "pyproject.toml").write_text('[tool.advisor]\nselect = ["ADV101"]\nextend-exclude = ["*.ipynb"]\n')
    code_, out, err = run(["check", ".", "--no-cache", "-q"], capsys, project)
    assert code_ == 0 and out == ""


def test_json_gives_the_cell_next_to_the_file_position(project, capsys):
    code_, out, _ = run(["check", "train.ipynb", "--no-cache", "--output-format", "json"], capsys, project)
    finding = json.loads(out)["findings"][0]
    assert {k: finding[k] for k in ("cell", "cell_line", "cell_column", "cell_end_line", "cell_end_column")} == {
        "cell": 4, "cell_line": 2, "cell_column": 10, "cell_end_line": 2, "cell_end_column": 59,
    }
    stored = (project / "train.ipynb").read_text().splitlines()[finding["line"] - 1]
    assert stored[finding["column"] - 1 : finding["end_column"] - 1] == "DataLoader(dataset, batch_size=32, num_workers=2)"
    assert "edits" not in finding["fix"]  # text edits of the joined cells would not apply to the file
    (project / "train.py").write_text("import torch\nmodel.cuda()\nloader = torch.utils.data.DataLoader(ds)\n")
    _, out, _ = run(["check", "train.py", "--no-cache", "--output-format", "json"], capsys, project)
    assert "cell" not in json.loads(out)["findings"][0]  # a script's findings are as they were


def test_sarif_and_github_point_into_the_notebook_file(project, capsys):
    _, out, _ = run(["check", "train.ipynb", "--no-cache", "--output-format", "sarif"], capsys, project)
    result = json.loads(out)["runs"][0]["results"][0]
    region = result["locations"][0]["physicalLocation"]["region"]
    stored = (project / "train.ipynb").read_text().splitlines()[region["startLine"] - 1]
    assert stored[region["startColumn"] - 1 :].startswith("DataLoader(")
    assert result["properties"]["cell"] == {"index": 4, "startLine": 2, "startColumn": 10, "endLine": 2, "endColumn": 59}
    _, out, _ = run(["check", "train.ipynb", "--no-cache", "--output-format", "github"], capsys, project)
    first = out.splitlines()[0]
    assert first.startswith(f"::warning file=train.ipynb,line={region['startLine']},col={region['startColumn']},")
    assert "::cell 4:2:10: ADV101 DataLoader without" in first


def test_sarif_with_notebooks_matches_the_schema(project, capsys):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra")
    schema = json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text())
    (project / "broken.ipynb").write_bytes(b"{")
    _, out, _ = run(["check", ".", "--no-cache", "--output-format", "sarif"], capsys, project)
    errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(json.loads(out)))
    assert not errors, errors[0].message


def test_fix_diff_is_per_cell_and_writes_nothing(project, capsys):
    before = (project / "train.ipynb").read_bytes()
    code_, out, _ = run(["fix", "train.ipynb", "--diff"], capsys, project)
    assert code_ == 1 and (project / "train.ipynb").read_bytes() == before
    assert "--- a/train.ipynb:cell 4\n+++ b/train.ipynb:cell 4\n" in out
    assert "-loader = DataLoader(dataset, batch_size=32, num_workers=2)  # keep this comment\n+loader = DataLoader(dataset, batch_size=32, num_workers=2, pin_memory=True)  # keep this comment\n" in out
    assert "--- a/train.ipynb:cell 6\n" in out and '"cell_type"' not in out


def test_fix_writes_the_notebook_and_a_second_fix_has_nothing_to_do(project, capsys):
    code_, out, _ = run(["fix", "train.ipynb"], capsys, project)
    assert code_ == 0 and "Fixed 2 findings in 1 file; 0 remaining." in out
    after = (project / "train.ipynb").read_bytes()
    assert after == expected_after(
        notebook(*TRAINING),
        ('num_workers=2)  # keep this comment', 'num_workers=2, pin_memory=True)  # keep this comment'),
        ("x = x.to(device)", "x = x.to(device, non_blocking=True)"),
    )
    code_, out, _ = run(["fix", "train.ipynb"], capsys, project)
    assert code_ == 0 and (project / "train.ipynb").read_bytes() == after


def test_check_reads_a_notebook_from_stdin(project, capsys, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(notebook(*TRAINING))))
    code_, out, _ = run(["check", "-", "--stdin-filename", "train.ipynb", "-q"], capsys, project)
    assert code_ == 1 and out.startswith("train.ipynb:cell 4:2:10: ADV101")


def test_add_noqa_writes_into_the_cells(project, capsys):
    code_, out, _ = run(["check", "train.ipynb", "--add-noqa"], capsys, project)
    assert code_ == 0 and "Added 2 noqa directives." in out
    cells = json.loads((project / "train.ipynb").read_text())["cells"]
    assert "loader = DataLoader(dataset, batch_size=32, num_workers=2)  # noqa: ADV101  # keep this comment\n" in cells[3]["source"]
    assert "    x = x.to(device)  # noqa: ADV103\n" in cells[5]["source"]
    assert run(["check", "train.ipynb", "--no-cache"], capsys, project)[0] == 0


def test_the_cache_keeps_the_cells(project, capsys):
    first = run(["check", "train.ipynb", "--output-format", "json"], capsys, project)[1]
    assert (project / ".advisor_cache").is_dir()
    assert run(["check", "train.ipynb", "--output-format", "json"], capsys, project)[1] == first


def test_verify_refuses_a_notebook(project, capsys):
    code_, out, err = run(["fix", "--verify", "train.ipynb"], capsys, project)
    assert code_ == 2 and "is a notebook" in err and "jupyter nbconvert --to script" in err
    assert (project / "train.ipynb").read_bytes() == notebook(*TRAINING)


def test_the_command_runs_on_a_notebook_as_a_process(project):
    completed = subprocess.run(
        [sys.executable, "-m", "advisor", "check", "train.ipynb", "--no-cache", "-q"], cwd=project, capture_output=True, text=True
    )
    assert completed.returncode == 1 and completed.stderr == ""
    assert completed.stdout.startswith("train.ipynb:cell 4:2:10: ADV101")


class BreaksTheCell(Rule):
    """Test rule: a fix whose code does not compile (a `return` outside a function)."""

    code = "ADV994"
    name = "test-breaks-the-cell"
    fix_applicability = Applicability.SAFE

    def check(self, ctx):
        for statement in ctx.module.body:
            if "model = " in ctx.module.code_for_node(statement):
                yield self.report(statement, "breaks", self.fix("insert a bad return", Edit(statement, cst.parse_statement("return 1"))))


def test_a_dropped_fix_is_reported_at_its_cell_and_the_notebook_left_alone(monkeypatch):
    instances = dict(engine.rule_instances())
    instances["ADV994"] = BreaksTheCell()
    monkeypatch.setattr(engine, "_RULE_INSTANCES", instances)
    data = notebook(markdown("x"), code("import torch"), code("%%time\nx = 1\nmodel = build()"))
    result = fix_source("t.ipynb", data, settings("ADV994"), unsafe=True)
    assert result.fixed == data
    assert result.dropped == ["ADV994 at cell 3, line 3: insert a bad return"]
    assert [(d.cell, d.cell_line) for d in result.remaining] == [(3, 3)]


def test_a_notebook_reads_the_device_from_a_sibling_module(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text('[tool.advisor]\nselect = ["ADV101"]\ngpu = "A100"\n')
    (tmp_path / "config.py").write_text('import torch\ndevice = torch.device("cuda")\n')
    (tmp_path / "train.ipynb").write_bytes(notebook(
        code("from config import device\nimport torch\nmodel = Net().to(device)"),
        code("loader = torch.utils.data.DataLoader(ds)\nfor x in loader:\n    model(x.to(device)).sum().backward()"),
    ))
    code_, out, _ = run(["check", "train.ipynb", "--no-cache", "-q"], capsys, tmp_path)
    assert code_ == 1 and out.startswith("train.ipynb:cell 2:1:10: ADV101")
    assert run(["check", "train.ipynb", "--no-cache", "-q", "--no-project"], capsys, tmp_path)[0] == 0


def test_an_empty_cell_that_gets_code_is_laid_out_like_its_neighbours():
    data = notebook(code(""), code("import torch\n"))
    nb = Notebook.from_bytes(data)
    first_marker = nb.python.splitlines(True)[0]
    after = nb.with_python(nb.python.replace(first_marker, first_marker + "x = 1\ny = 2\n", 1))
    assert after == expected_after(data, ('"source": []', '"source": [\n    "x = 1\\n",\n    "y = 2"\n   ]'))
    assert_valid_nbformat(after)


def test_a_colab_notebooks_saved_gpu_is_its_target_where_the_target_is_assumed():
    # nanoVLM's train_nanoVLM.ipynb: `"colab": {"gpuType": "T4"}`, fp16 autocast. A T4 has no
    # bf16, so ADV201 stays silent there unless the user names the GPU.
    from advisor.targets import ASSUMED

    source = (
        "import torch\nmodel = Net().cuda()\n"
        "for x in loader:\n"
        "    with torch.autocast('cuda', dtype=torch.float16):\n"
        "        loss = model(x.cuda())\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    )
    document = json.loads(notebook(code(source)))
    document["metadata"]["colab"] = {"gpuType": "T4", "provenance": []}
    data = json.dumps(document).encode()

    def codes(target):
        result = check_file("train.ipynb", Settings(codes=frozenset({"ADV201"}), target=target), data=data)
        return [d.code for d in result.diagnostics]

    assert codes(ASSUMED) == []
    assert codes(A100) == ["ADV201"]  # a GPU the user named wins
    assert codes(ASSUMED) == [] and "ADV201" in [
        d.code for d in check_file("train.ipynb", Settings(codes=frozenset({"ADV201"}), target=ASSUMED), data=notebook(code(source))).diagnostics
    ]


def test_a_cell_of_many_windows_line_breaks_is_read_at_once():
    # Transformers-Tutorials: a cell's leading lines, read as one regular expression, backtracked
    # exponentially on "\r\n" (one line break or two); line by line, the answer is immediate.
    from advisor.notebooks import _analysed

    assert _analysed("\r\n" * 200 + "model.cuda()\n")
    assert not _analysed("# setup\r\n" * 200 + "%%bash\nnvidia-smi\n")
