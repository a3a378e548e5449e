"""The command line a ruff user expects (issue 14): the same flags, the same meanings."""
from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

from test_cli import run

# Two loaders that do not pin (ADV101): one with workers (a safe fix), one without (ADV102, and
# its ADV101, advice only: pinning waits for workers); an unfused AdamW (ADV601, safe fix).
TRAIN = textwrap.dedent(
    """\
    import torch
    from torch.utils.data import DataLoader

    model = model.cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset, batch_size=32)
    eval_loader = DataLoader(dataset, batch_size=32, num_workers=2)
    for x, y in loader:
        loss = model(x.cuda(non_blocking=True)).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(sum(len(x) for x, _ in eval_loader))
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def codes(out: str) -> list[str]:
    return sorted(line.split(": ")[1].split()[0] for line in out.splitlines() if ": ADV" in line)


def test_output_format_is_the_name_and_format_an_alias(project, capsys):
    code, out, _ = run(["check", "train.py", "--output-format", "json"], capsys, project)
    assert code == 1 and json.loads(out)["findings"]
    code, again, _ = run(["check", "train.py", "--format", "json"], capsys, project)
    assert again == out


def test_repeated_select_adds_and_extend_select_extends_the_config(project, capsys):
    code, out, _ = run(["check", "train.py", "--select", "ADV101", "--select", "ADV601"], capsys, project)
    assert set(codes(out)) == {"ADV101", "ADV601"}
    (project / "pyproject.toml").write_text('[tool.advisor]\nselect = ["ADV101"]\nextend-select = ["ADV102"]\n')
    code, out, _ = run(["check", "train.py"], capsys, project)
    assert set(codes(out)) == {"ADV101", "ADV102"}
    code, out, _ = run(["check", "train.py", "--extend-select", "ADV601", "--extend-ignore", "ADV102"], capsys, project)
    assert set(codes(out)) == {"ADV101", "ADV601"}
    (project / "pyproject.toml").write_text('[tool.advisor]\nextend-ignore = ["ADV1"]\n')
    code, out, _ = run(["check", "train.py"], capsys, project)
    assert "ADV601" in codes(out) and not any(c.startswith("ADV1") for c in codes(out))


def test_quiet_prints_the_findings_and_nothing_else(project, capsys):
    code, out, _ = run(["check", "train.py", "-q"], capsys, project)
    assert code == 1
    assert out.splitlines() and all(": ADV" in line for line in out.splitlines())
    code, out, _ = run(["check", "train.py", "--quiet", "--select", "ADV705"], capsys, project)
    assert code == 0 and out == ""


def test_the_target_line_is_short(project, capsys):
    _, out, _ = run(["check", "train.py", "--gpu", "H100"], capsys, project)
    assert out.splitlines()[0] == "target: H100 (sm 9.0, 80 GB, bf16), from --gpu"


def test_statistics_counts_findings_per_rule(project, capsys):
    code, out, _ = run(["check", "train.py", "--statistics"], capsys, project)
    assert code == 1
    rows = {line.split()[1]: line for line in out.splitlines() if "ADV" in line}
    assert rows["ADV101"].split()[0] == "2" and "[*]" not in rows["ADV101"] and "dataloader-pin-memory" in rows["ADV101"]
    assert rows["ADV102"].split()[0] == "1" and "[*]" not in rows["ADV102"]
    assert rows["ADV601"].split()[0] == "1" and "[*]" in rows["ADV601"]  # every finding of the rule fixable
    assert "train.py:" not in out


def test_check_fix_applies_safe_fixes_and_reports_what_remains(project, capsys):
    code, out, _ = run(["check", "train.py", "--fix", "--show-fixes", "--select", "ADV1,ADV6"], capsys, project)
    text = (project / "train.py").read_text()
    assert text.count("pin_memory=True") == 1 and "fused=True" in text
    assert code == 1  # ADV102 and the worker-less loader's ADV101 have no fix: they remain
    assert codes(out) == ["ADV101", "ADV102"]
    assert "Fixed 2 findings" in out
    assert "1 × ADV101 (dataloader-pin-memory)" in out and "1 × ADV601 (adam-not-fused)" in out
    code, out, _ = run(["check", "train.py", "--fix", "--select", "ADV601"], capsys, project)
    assert code == 0


def test_exit_non_zero_on_fix(project, capsys):
    code, _, _ = run(["check", "train.py", "--fix", "--select", "ADV601", "--exit-non-zero-on-fix"], capsys, project)
    assert code == 1  # everything was fixed, but something was
    code, _, _ = run(["check", "train.py", "--fix", "--select", "ADV601", "--exit-non-zero-on-fix"], capsys, project)
    assert code == 0  # nothing left to fix


def test_check_diff_writes_nothing(project, capsys):
    code, out, _ = run(["check", "train.py", "--diff", "--select", "ADV101"], capsys, project)
    assert code == 1
    assert "+eval_loader = DataLoader(dataset, batch_size=32, num_workers=2, pin_memory=True)" in out
    assert (project / "train.py").read_text() == TRAIN


def test_check_unsafe_fixes_with_fix(project, capsys, tmp_path):
    (project / "amp.py").write_text(
        "import torch\nmodel = model.cuda()\nfor x in loader:\n"
        "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x.cuda()).sum()\n"
        "    loss.backward()\n    optimizer.step()\n"
    )
    run(["check", "amp.py", "--fix", "--select", "ADV201"], capsys, project)
    assert "float16" in (project / "amp.py").read_text()
    run(["check", "amp.py", "--fix", "--unsafe-fixes", "--select", "ADV201"], capsys, project)
    assert "bfloat16" in (project / "amp.py").read_text()


def test_force_exclude_applies_exclude_to_named_files(project, capsys):
    (project / "pyproject.toml").write_text('[tool.advisor]\nexclude = ["train.py"]\n')
    code, out, _ = run(["check", "train.py"], capsys, project)
    assert code == 1  # named: checked, as ruff does without --force-exclude
    code, out, err = run(["check", "train.py", "--force-exclude"], capsys, project)
    assert code == 0 and "ADV" not in out


def test_stdin_with_a_filename(project, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(TRAIN.encode())))
    code, out, _ = run(["check", "-", "--stdin-filename", "train.py", "--select", "ADV101"], capsys, project)
    assert code == 1
    assert "train.py:6:10: ADV101" in out


def test_stdin_fix_writes_the_fixed_code_to_stdout(project, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(TRAIN.encode())))
    code, out, err = run(["check", "-", "--fix", "--select", "ADV101"], capsys, project)
    assert code == 1  # the worker-less loader's ADV101 is advice: it remains
    assert out == TRAIN.replace("num_workers=2)", "num_workers=2, pin_memory=True)")


def test_rules_as_json(capsys, tmp_path):
    code, out, _ = run(["rules", "--output-format", "json"], capsys, tmp_path)
    rules = json.loads(out)
    assert code == 0
    first = next(r for r in rules if r["code"] == "ADV101")
    assert first["name"] == "dataloader-pin-memory" and first["fix"] == "safe" and first["summary"]


def test_explain_adv000(capsys, tmp_path):
    code, out, _ = run(["explain", "ADV000"], capsys, tmp_path)
    assert code == 0 and "could not analyze" in out


def test_file_level_suppression(project, capsys):
    (project / "quiet.py").write_text("# advisor: noqa\n" + TRAIN)
    code, out, _ = run(["check", "quiet.py"], capsys, project)
    assert code == 0
    (project / "some.py").write_text(TRAIN.replace("import torch\n", "import torch\n# advisor: noqa: ADV101, ADV102\n", 1))
    code, out, _ = run(["check", "some.py", "--select", "ADV1,ADV6"], capsys, project)
    assert codes(out) == ["ADV601"]
    # Not a file-level directive: a trailing comment, or one inside a string.
    (project / "not.py").write_text(TRAIN.replace("import torch\n", "import torch  # advisor: noqa\n", 1))
    code, out, _ = run(["check", "not.py", "--select", "ADV101"], capsys, project)
    assert codes(out) == ["ADV101", "ADV101"]


@pytest.mark.parametrize("name", ["A6000", "RTX A6000", "A40", "L40S", "L40", "RTX 6000 Ada", "A5000", "A4000",
                                  "RTX3080", "RTX 4080", "RTX5090", "GH200", "B100"])
def test_rented_gpus_are_known(name, project, capsys):
    code, out, err = run(["check", "train.py", "--gpu", name, "-q"], capsys, project)
    assert code == 1, err


def test_a_gpu_described_in_config(project, capsys):
    (project / "pyproject.toml").write_text(
        '[tool.advisor]\ngpu = { name = "Lab card", compute-capability = "8.6", memory-gb = 48 }\n'
    )
    _, out, _ = run(["check", "train.py"], capsys, project)
    assert out.splitlines()[0] == "target: Lab card (sm 8.6, 48 GB, bf16), from [tool.advisor] gpu"


def test_a_syntax_error_is_reported_where_python_reports_it(tmp_path, capsys):
    (tmp_path / "train.py").write_text("import torch\nx = foo(1,\ny = 2\n\n")
    code, out, _ = run(["check", "train.py", "-q"], capsys, tmp_path)
    assert code == 2
    assert out == "train.py:2:8: ADV000 syntax error: '(' was never closed\n"


def test_add_noqa_silences_every_finding_and_keeps_the_code(project, capsys):
    source = TRAIN.replace("\nloader = DataLoader(dataset, batch_size=32)\n", "\nloader = DataLoader(dataset, batch_size=32)  # the train set\n")
    source = source.replace("eval_loader = DataLoader(dataset, batch_size=32, num_workers=2)\n", "eval_loader = DataLoader(dataset, batch_size=32, num_workers=2)  # noqa: E501\n")
    source += 'NOTE = """\nmodel = model.cuda()\n"""\n'
    (project / "train.py").write_text(source)
    code, out, _ = run(["check", "train.py", "--add-noqa", "--select", "ADV1,ADV6"], capsys, project)
    assert code == 0 and out.startswith("Added ")
    text = (project / "train.py").read_text()
    assert "\nloader = DataLoader(dataset, batch_size=32)  # noqa: ADV101, ADV102  # the train set\n" in text
    assert "eval_loader = DataLoader(dataset, batch_size=32, num_workers=2)  # noqa: E501, ADV101\n" in text
    assert "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # noqa: ADV601\n" in text
    assert 'NOTE = """\nmodel = model.cuda()\n"""\n' in text
    compile(text, "train.py", "exec")
    code, out, _ = run(["check", "train.py", "--select", "ADV1,ADV6"], capsys, project)
    assert code == 0, out


def test_json_findings_carry_their_fix_as_text_edits(project, capsys):
    """As ruff's JSON: another tool can apply a fix without advisor."""
    code, out, _ = run(["check", "train.py", "--output-format", "json", "--select", "ADV101,ADV601"], capsys, project)
    findings = json.loads(out)["findings"]
    text = TRAIN
    lines = text.splitlines(keepends=True)

    def offset(location):
        return sum(len(line) for line in lines[: location["row"] - 1]) + location["column"] - 1

    assert [f["code"] for f in findings if f["fix"] is None] == ["ADV101"]  # the worker-less loader: advice
    for finding in (f for f in findings if f["fix"] is not None):
        (edit,) = finding["fix"]["edits"]
        patched = text[: offset(edit["location"])] + edit["content"] + text[offset(edit["end_location"]):]
        compile(patched, "train.py", "exec")
        assert patched != text
    pinned = next(f for f in findings if f["code"] == "ADV101" and f["fix"])["fix"]["edits"][0]
    assert pinned["content"] == ", pin_memory=True" and pinned["location"]["row"] == 7
