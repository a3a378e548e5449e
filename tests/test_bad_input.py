"""Bad input gets a clear one-line error naming the file, never a traceback.

`advisor check` and `advisor fix` meet everything a real repository holds: broken and
undecodable files, odd encodings and line endings, huge files, unreadable or looping
paths, read-only files, broken configuration, and expressions nested deeper than any
parser likes. Each gets an exit code and a message; a file is never left half-fixed.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from advisor.cli import main

ROOT = Path(__file__).resolve().parent.parent
PLAIN = (ROOT / "fixtures" / "plain_pytorch.py").read_bytes()
GPU = ["--gpu", "A100"]
LOADER = b"loader = DataLoader(ds, batch_size=32, num_workers=4)\n"
FIXED_LOADER = b"loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True)\n"
HEADER = b"import torch\nfrom torch.utils.data import DataLoader\n"
TAIL = b"model = model.cuda()\n"


def run(args: list[str], capsys, cwd: Path) -> tuple[int, str, str]:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        code = main([*args, *GPU] if args[0] in ("check", "fix") else args)
    finally:
        os.chdir(old)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def run_subprocess(args: list[str], cwd: Path, prefix: tuple[str, ...] = (), timeout: int = 120) -> tuple[int, str, str]:
    completed = subprocess.run(
        [*prefix, sys.executable, "-m", "advisor", *args, *GPU, "--no-color"],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )
    assert "Traceback" not in completed.stdout + completed.stderr, completed.stderr
    assert completed.returncode >= 0, f"killed by signal {-completed.returncode}"  # a segfault is a crash too
    return completed.returncode, completed.stdout, completed.stderr


def error_lines(out: str) -> list[str]:
    """The ADV000 lines, paths relative to the folder walked ("./a.py" read as "a.py")."""
    return [line.removeprefix("./") for line in out.splitlines() if " ADV000 " in line]


# -- files that cannot be analyzed -------------------------------------------------------
UNANALYZABLE = {
    "syntax_error.py": (HEADER + b"x = (\n", "syntax error"),
    "null_byte.py": (HEADER + b"x = 1\x00\n" + LOADER, "null byte"),
    "undecodable.py": (HEADER + b"name = '\xe9t\xe9'\n" + LOADER, "cannot decode: 'utf-8' codec can't decode byte 0xe9"),
    "unknown_cookie.py": (b"# -*- coding: klingon -*-\n" + HEADER + LOADER, "cannot decode: unknown encoding: klingon"),
    "bom_and_cookie.py": (b"\xef\xbb\xbf# coding: latin-1\n" + HEADER + LOADER, "cannot decode: encoding problem"),
    "mixed_indentation.py": (HEADER + b"if True:\n        x = 1\n\ty = 2\n" + LOADER, "inconsistent use of tabs and spaces in indentation"),
}


@pytest.mark.parametrize("command", ["check", "fix"])
def test_unanalyzable_files_get_one_error_line_each_and_stay_untouched(tmp_path, capsys, command):
    for name, (data, _) in UNANALYZABLE.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "good.py").write_bytes(HEADER + LOADER + TAIL)
    code, out, _ = run([command, "."], capsys, tmp_path)
    assert code == 2
    errors = error_lines(out)
    assert len(errors) == len(UNANALYZABLE), out
    for name, (data, message) in UNANALYZABLE.items():
        (line,) = [e for e in errors if e.startswith(f"{name}:")]
        assert message in line, line
        assert (tmp_path / name).read_bytes() == data
    if command == "fix":  # the good file next to them is still fixed
        assert (tmp_path / "good.py").read_bytes() == HEADER + FIXED_LOADER + TAIL
    else:
        assert "good.py:3:10: ADV101" in out


def test_empty_file_is_clean(tmp_path, capsys):
    (tmp_path / "empty.py").write_bytes(b"")
    assert run(["check", "empty.py"], capsys, tmp_path)[0] == 0
    assert run(["fix", "empty.py"], capsys, tmp_path)[0] == 0
    assert (tmp_path / "empty.py").read_bytes() == b""


# -- encodings and line endings: analyzed, and kept byte for byte by fix --------------
def test_coding_cookie_is_honoured_and_kept(tmp_path, capsys):
    source = b"# -*- coding: latin-1 -*-\n" + HEADER + b"name = 'caf\xe9'  # \xe9t\xe9\n" + LOADER + TAIL
    path = tmp_path / "latin.py"
    path.write_bytes(source)
    code, out, _ = run(["check", "latin.py"], capsys, tmp_path)
    assert code == 1 and "latin.py:5:10: ADV101" in out
    assert run(["fix", "latin.py"], capsys, tmp_path)[0] == 0
    assert path.read_bytes() == source.replace(LOADER, FIXED_LOADER)  # still latin-1, cookie and all


def test_encoding_that_does_not_round_trip_is_not_rewritten(tmp_path, capsys):
    """cp932 has two byte sequences for some characters: re-encoding would change bytes no fix touched."""
    source = b"# -*- coding: cp932 -*-\n# \x87\x90\n" + HEADER + LOADER + TAIL
    path = tmp_path / "japanese.py"
    path.write_bytes(source)
    code, out, _ = run(["fix", "japanese.py"], capsys, tmp_path)
    assert code == 2
    assert "japanese.py:1:1: ADV000 cannot fix: its bytes do not survive a round trip through cp932" in out
    assert "japanese.py:5:10: ADV101" in out and "Fixed 0 findings in 0 files; 1 remaining" in out
    assert path.read_bytes() == source


def test_bom_is_kept(tmp_path, capsys):
    source = b"\xef\xbb\xbf" + HEADER + LOADER + TAIL
    path = tmp_path / "bom.py"
    path.write_bytes(source)
    assert run(["fix", "bom.py"], capsys, tmp_path)[0] == 0
    assert path.read_bytes() == b"\xef\xbb\xbf" + HEADER + FIXED_LOADER + TAIL


def test_crlf_tabs_and_mixed_line_endings_are_kept_byte_for_byte(tmp_path, capsys):
    """Unsafe fixes insert and move whole statements: the new lines follow the file's own style."""
    (tmp_path / "lf.py").write_bytes(PLAIN)
    (tmp_path / "crlf.py").write_bytes(PLAIN.replace(b"\n", b"\r\n"))
    (tmp_path / "tabs.py").write_bytes(PLAIN.replace(b"    ", b"\t"))
    mixed = b"import torch\r\nfrom torch.utils.data import DataLoader\n" + LOADER.replace(b"\n", b"\r\n") + b"x = 1\n" + TAIL.replace(b"\n", b"\r\n")
    (tmp_path / "mixed.py").write_bytes(mixed)
    assert run(["fix", "--unsafe-fixes", "."], capsys, tmp_path)[0] in (0, 1)
    fixed = (tmp_path / "lf.py").read_bytes()
    assert fixed != PLAIN
    assert (tmp_path / "crlf.py").read_bytes() == fixed.replace(b"\n", b"\r\n")
    assert (tmp_path / "tabs.py").read_bytes() == fixed.replace(b"    ", b"\t")
    assert (tmp_path / "mixed.py").read_bytes() == mixed.replace(LOADER.replace(b"\n", b"\r\n"), FIXED_LOADER.replace(b"\n", b"\r\n"))


# -- size -------------------------------------------------------------------------------
def test_very_large_file_and_very_long_line(tmp_path, capsys):
    """50,000 lines, and a 1 MB line: analyzed, positions right after them, fixed in place."""
    large = b'"""\n' + b"".join(b"row %d of a long docstring\n" % i for i in range(50_000)) + b'"""\n' + PLAIN
    long_line = b"BLOB = '" + b"x" * 1_000_000 + b"'\n" + HEADER + LOADER + TAIL
    (tmp_path / "large.py").write_bytes(large)
    (tmp_path / "long_line.py").write_bytes(long_line)
    code, out, _ = run(["check", "--no-cache", "."], capsys, tmp_path)
    assert code == 1
    assert "large.py:50069:20: ADV101" in out  # line 67 of plain_pytorch.py, after 50,002 lines
    assert "long_line.py:4:10: ADV101" in out
    # large.py's loader has no workers: its ADV101 is advice and remains (exit 1); ADV601 is fixed there.
    assert run(["fix", "--select", "ADV101,ADV601", "."], capsys, tmp_path)[0] == 1
    assert (tmp_path / "long_line.py").read_bytes() == long_line.replace(LOADER, FIXED_LOADER)
    fixed_large = (tmp_path / "large.py").read_bytes()
    assert fixed_large.startswith(large[: len(large) - len(PLAIN)])
    assert fixed_large.splitlines()[50071].endswith(b"fused=True)")  # line 70 of plain_pytorch.py


# -- paths --------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["check", "fix"])
def test_missing_path_is_an_error_naming_it(tmp_path, capsys, command):
    (tmp_path / "good.py").write_bytes(HEADER + LOADER + TAIL)
    code, out, err = run([command, "nope.py", "good.py"], capsys, tmp_path)
    assert code == 2
    # A usage error (issue 14), not a finding at 1:1 of a file that is not there; the rest is checked.
    assert err == "advisor: error: nope.py: no such file or directory\n"
    assert error_lines(out) == [] and "nope.py" not in out


@pytest.mark.parametrize("command", ["check", "fix"])
def test_folder_without_python_is_clean_with_a_warning(tmp_path, capsys, command):
    """As ruff: exit 0 and a warning on stderr (an empty selection is not an error)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("no code here\n")
    code, out, err = run([command, "docs"], capsys, tmp_path)
    assert code == 0
    assert err.strip() == "advisor: warning: no Python files found under docs"


def test_symlink_loops_are_errors_not_hangs(tmp_path, capsys):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_bytes(HEADER + LOADER + TAIL)
    (tmp_path / "sub" / "up").symlink_to("..")  # a folder loop: not followed
    (tmp_path / "a.py").symlink_to("b.py")
    (tmp_path / "b.py").symlink_to("a.py")
    (tmp_path / "dangling.py").symlink_to("missing.py")
    code, out, _ = run(["check", "."], capsys, tmp_path)
    assert code == 2
    assert sorted(error_lines(out)) == [
        "a.py:1:1: ADV000 cannot read: Too many levels of symbolic links",
        "b.py:1:1: ADV000 cannot read: Too many levels of symbolic links",
        "dangling.py:1:1: ADV000 cannot read: No such file or directory",
    ]
    assert out.count("train.py:3:10: ADV101") == 1
    code, out, err = run(["fix", "a.py"], capsys, tmp_path)
    assert code == 2
    assert err == "advisor: error: a.py: no such file or directory (a broken symbolic link or a loop of them)\n"
    assert (tmp_path / "a.py").is_symlink()


def test_a_file_reached_by_several_names_is_checked_once(tmp_path, capsys):
    (tmp_path / "train.py").write_bytes(HEADER + LOADER + TAIL)
    (tmp_path / "alias.py").symlink_to("train.py")
    os.link(tmp_path / "train.py", tmp_path / "hardlink.py")
    code, out, _ = run(["check", ".", "train.py"], capsys, tmp_path)
    assert code == 1
    assert out.count(":3:10: ADV101") == 1


def test_fifo_named_like_python_is_skipped_not_waited_on(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "train.py").write_bytes(HEADER + LOADER + TAIL)
    code, out, _ = run(["check", "."], capsys, tmp_path)
    assert code == 1 and "train.py:3:10: ADV101" in out and "pipe.py" not in out
    code, out, _ = run(["fix", "pipe.py"], capsys, tmp_path)  # named explicitly: an error, not a wait
    assert code == 2 and error_lines(out) == ["pipe.py:1:1: ADV000 not a regular file or a folder"]


def test_fifo_in_the_project_is_not_read_by_project_scope(tmp_path, capsys):
    """Project scope reads the siblings' imports (who imports this module?): a FIFO named
    ``*.py`` among them must not block it."""
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "engine.py").write_text("import torch\n\ndef step(x, device):\n    return torch.zeros(4).to(device)\n")
    (tmp_path / "train.py").write_text("import pipe\nimport engine\n")
    completed = subprocess.run(
        [sys.executable, "-m", "advisor", "check", "--no-cache", "engine.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode in (0, 1), completed.stderr


def _without_root_privileges() -> tuple[str, ...]:
    """A command prefix under which file modes bind (root reads everything otherwise)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: modes do not bind")
    prefix = (setpriv, "--bounding-set", "-dac_override,-dac_read_search")
    if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot drop root's file-access capabilities here")
    return prefix


def test_unreadable_file_and_folder_are_errors(tmp_path):
    prefix = _without_root_privileges()
    (tmp_path / "secret.py").write_bytes(HEADER + LOADER)
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "train.py").write_bytes(HEADER + LOADER)
    (tmp_path / "good.py").write_bytes(HEADER + LOADER + TAIL)
    os.chmod(tmp_path / "secret.py", 0)
    os.chmod(tmp_path / "locked", 0)
    try:
        code, out, _ = run_subprocess(["check", "--no-cache", "."], tmp_path, prefix)
        assert code == 2
        assert sorted(error_lines(out)) == [
            "locked:1:1: ADV000 cannot read: Permission denied",
            "secret.py:1:1: ADV000 cannot read: Permission denied",
        ]
        assert "good.py:3:10: ADV101" in out
        code, out, _ = run_subprocess(["fix", "secret.py"], tmp_path, prefix)
        assert code == 2 and error_lines(out) == ["secret.py:1:1: ADV000 cannot read: Permission denied"]
    finally:
        os.chmod(tmp_path / "locked", 0o755)
        os.chmod(tmp_path / "secret.py", 0o644)
    assert (tmp_path / "secret.py").read_bytes() == HEADER + LOADER


def test_read_only_file_is_reported_and_untouched(tmp_path, capsys):
    path = tmp_path / "train.py"
    path.write_bytes(HEADER + LOADER + TAIL)
    os.chmod(path, 0o444)
    code, out, _ = run(["fix", "train.py"], capsys, tmp_path)
    assert code == 2
    assert error_lines(out) == ["train.py:1:1: ADV000 cannot write: read-only file"]
    assert "train.py:3:10: ADV101" in out  # not fixed, so still there
    assert "Fixed 0 findings in 0 files; 1 remaining" in out
    assert path.read_bytes() == HEADER + LOADER + TAIL
    assert stat.S_IMODE(path.stat().st_mode) == 0o444


def test_file_that_does_not_compile_is_not_fixed(tmp_path, capsys):
    """LibCST parses `return` at module level; Python does not compile it, so no fix can be checked."""
    source = HEADER + LOADER + TAIL + b"return 5\n"
    (tmp_path / "train.py").write_bytes(source)
    code, out, _ = run(["fix", "train.py"], capsys, tmp_path)
    assert code == 2
    assert error_lines(out) == [
        "train.py:1:1: ADV000 cannot fix: the file does not compile as it is: 'return' outside function (line 5)"
    ]
    assert "would break the code" not in out
    assert (tmp_path / "train.py").read_bytes() == source


# -- configuration ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pyproject, message",
    [
        ('[tool.advisor]\nselect = "ADV1"\n', "[tool.advisor] select must be a list of strings"),
        ("[tool.advisor]\ngpu = 80\n", "[tool.advisor] gpu must be a GPU's name or a table"),
        ('[tool.advisor]\ngpu = { name = "x", compute-capability = 8.6 }\n', "`compute-capability` must be a string like"),
        ('[tool.advisor]\ngpu = { compute-capability = "8.6" }\n', "`name` must be a non-empty string"),
        ('[tool.advisor]\ngpu = { name = "x", compute-capability = "8.6", memory = 4 }\n', "unknown key(s): memory"),
        ('[tool.advisor]\ngpu = { name = "x", compute-capability = "8.6", memory-gb = -1 }\n', "`memory-gb` must be a positive number"),
        ('[tool.advisor]\nextend-select = ["ADV1", "XYZ9"]\n', "unknown rule code(s) in [tool.advisor] extend-select ({path}): XYZ9"),
        ('[tool.advisor]\ntorch-version = 2.1\n', 'torch-version must be a version string like "2.1"'),
        ('[tool.advisor]\nexclude = "build"\n', "[tool.advisor] exclude must be a list of strings"),
        ('[tool.advisor]\nper-file-ignores = {"a.py" = "ADV1"}\n', "per-file-ignores must map globs to lists of codes"),
        ("[tool.advisor]\nselekt = ['ADV1']\n", "unknown key(s) in [tool.advisor]: selekt"),
        ("[tool]\nadvisor = 3\n", "[tool.advisor] must be a table"),
        ("tool = 3\n", "`tool` must be a table"),
        ('tool = "advisor"\n', "`tool` must be a table"),
        ("[tool.advisor\nselect = ['ADV1']\n", "invalid TOML: Expected ']' at the end of a table declaration (at line 1"),
        ("[tool.advisor]\nselect = ['ADV1', 'XYZ9']\n", "unknown rule code(s) in [tool.advisor] select ({path}): XYZ9"),
        ("[tool.advisor]\nignore = ['ADV9999']\n", "unknown rule code(s) in [tool.advisor] ignore ({path}): ADV9999"),
        (
            '[tool.advisor.per-file-ignores]\n"a.py" = ["ADV1", "NOPE"]\n',
            "unknown rule code(s) in [tool.advisor] per-file-ignores['a.py'] ({path}): NOPE",
        ),
        ('[tool.advisor]\ngpu = "Z80"\n', "unknown GPU 'Z80' (from [tool.advisor] gpu)"),
    ],
)
def test_invalid_configuration_is_exit_2_with_a_message_naming_it(tmp_path, capsys, pyproject, message):
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "train.py").write_bytes(HEADER + LOADER + TAIL)
    for command in ("check", "fix"):
        old = os.getcwd()
        os.chdir(tmp_path)
        try:
            code = main([command, "train.py"])  # no --gpu: the configured one is read too
        finally:
            os.chdir(old)
        out, err = capsys.readouterr()
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("advisor: error: ")
        assert message.format(path=tmp_path / "pyproject.toml") in err, err
        if "Z80" not in message:
            assert str(tmp_path / "pyproject.toml") in err
    assert (tmp_path / "train.py").read_bytes() == HEADER + LOADER + TAIL


@pytest.mark.parametrize("option", ["--select", "--ignore"])
def test_unknown_code_on_the_command_line(tmp_path, capsys, option):
    (tmp_path / "train.py").write_bytes(HEADER + LOADER + TAIL)
    for command in ("check", "fix"):
        code, out, err = run([command, option, "ADV101,FOO1", "train.py"], capsys, tmp_path)
        assert code == 2 and out == ""
        assert err == f"advisor: error: unknown rule code(s) in {option}: FOO1\n"
    assert (tmp_path / "train.py").read_bytes() == HEADER + LOADER + TAIL


# -- nesting deeper than the parsers ------------------------------------------------------
DEEP = {
    # Python's tokenizer stops at 200 brackets; LibCST's parser would overflow its stack.
    "parens.py": (b"x = " + b"(" * 5_000 + b"1" + b")" * 5_000 + b"\n", "5:205: ADV000 syntax error: too many nested parentheses"),
    # CPython gives up cleanly; LibCST's parser would run for hours, or overflow on lambdas and elifs.
    "long_sum.py": (b"x = " + b" + ".join([b"a"] * 100_000) + b"\n", "1:1: ADV000 nested too deeply to analyze: Python's own parser fails with RecursionError"),
    "lambdas.py": (b"f = (" + b"lambda:\n" * 5_000 + b"1)\n", "1:1: ADV000 nested too deeply to analyze: Python's own parser fails with MemoryError"),
    "elifs.py": (b"if a == 0:\n    pass\n" + b"".join(b"elif a == %d:\n    pass\n" % i for i in range(1, 20_000)), "1:1: ADV000 nested too deeply to analyze"),
}
# Too deep for LibCST to regenerate the whole file, which only `fix` needs: `check` positions
# a finding by regenerating the statement that holds it, so it reports the DataLoader.
DEEP_FOR_FIX = {
    "sum_1200.py": (b"x = " + b" + ".join([b"a"] * 1_200) + b"\n", "1:1: ADV000 nested too deeply for LibCST to analyze (RecursionError)"),
    # Python compiles this; LibCST parses it but its tree is too deep to walk whole. The
    # DataLoader's statement is found by its own code, without walking the elif chain.
    "elifs_700.py": (b"if a == 0:\n    pass\n" + b"".join(b"elif a == %d:\n    pass\n" % i for i in range(1, 700)), "1:1: ADV000 nested too deeply for LibCST to analyze (RecursionError)"),
}


def test_deeply_nested_expressions_are_file_errors_not_crashes(tmp_path):
    for name, (body, _) in {**DEEP, **DEEP_FOR_FIX}.items():
        (tmp_path / name).write_bytes(HEADER + LOADER + TAIL + body)
    for command in ("check", "fix"):
        code, out, _ = run_subprocess([command, "-j", "1", "."], tmp_path)
        assert code == 2
        errors = error_lines(out)
        expected = DEEP if command == "check" else {**DEEP, **DEEP_FOR_FIX}
        assert len(errors) == len(expected), out
        if command == "check":
            assert "sum_1200.py:3:10: ADV101" in out and "elifs_700.py:3:10: ADV101" in out, out
        for name, (body, message) in {**DEEP, **DEEP_FOR_FIX}.items():
            if name not in expected:
                assert (tmp_path / name).read_bytes() == HEADER + LOADER + TAIL + body
                continue
            assert any(e.startswith(f"{name}:") and message in e for e in errors), (name, errors)
            assert (tmp_path / name).read_bytes() == HEADER + LOADER + TAIL + body


@pytest.mark.parametrize(
    "source, deep",
    [
        (b"x = f(a, [1, 2], {3: 4})\n" * 1_000, False),
        (b"s = '('\n" + b"x = 1\n" * 2_000, False),  # a stray opener does not make the rest look bracketed
        (b"x = 1\n" * 2_000 + b"s = ')'\n", False),
        (b"x = (\n" + b"a +\n" * 400 + b"a)\n", False),
        (b"x = (\n" + b"a +\n" * 600 + b"a)\n", True),
        (b"s = '('\n" + b"x = (\n" + b"a +\n" * 600 + b"a)\n", True),
        (b"s = ')'\n" + b"x = " + b"(\n" * 60 + b"1" + b")" * 60 + b"\n", True),  # a stray closer hides no depth
        (b"s = '('\n" + b"x = " + b"(\n" * 60 + b"1" + b")" * 60 + b"\n", True),
        (b"x = 1 \\\r\n" + b"+ 1 \\\r\n" * 600 + b"+ 1\r\n", True),
        (b"x = '" + b"a" * 3_000 + b"'\n", True),
    ],
)
def test_the_scan_in_front_of_libcst_sees_through_stray_brackets(source, deep):
    """Only files the scan flags are shown to CPython first; strings with unbalanced
    brackets (common in messages and docstrings) neither hide depth nor flag every file."""
    from advisor.limits import might_be_deep

    assert might_be_deep(source) is deep


def test_report_that_cannot_be_written_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "train.py").write_bytes(HEADER + LOADER + TAIL)
    code, out, err = run(["check", "--output", "missing/report.txt", "train.py"], capsys, tmp_path)
    assert code == 2 and out == ""
    assert err == "advisor: error: cannot write the report to missing/report.txt: No such file or directory\n"


def test_the_files_own_compile_warnings_are_not_printed(tmp_path):
    """An invalid escape is the file's business (a DeprecationWarning on 3.11, a SyntaxWarning
    printed by default from 3.12): compiling it to check a fix must not print it, nor fail
    because of it when warnings are errors."""
    for warnings_option in ("always", "error"):
        (tmp_path / "train.py").write_bytes(HEADER + b's = "\\d"\n' + LOADER + TAIL)
        completed = subprocess.run(
            [sys.executable, "-W", warnings_option, "-m", "advisor", "fix", "train.py", *GPU, "--no-color"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )
        assert "Warning" not in completed.stderr and "Traceback" not in completed.stderr, completed.stderr
        assert (tmp_path / "train.py").read_bytes() == HEADER + b's = "\\d"\n' + FIXED_LOADER + TAIL


def test_a_bug_in_a_premise_check_keeps_the_finding_and_withholds_the_fix(monkeypatch):
    """A rule's crash is reported and the run goes on; so is a crash of a check that decides
    whether a fix may apply: the finding stays, its fix becomes advice, and the error is named."""
    import advisor.engine as engine
    import advisor.fix_premises as fix_premises
    from helpers import settings

    def broken(ctx, finding):
        raise ValueError("boom")

    monkeypatch.setattr(fix_premises, "_withhold_where_the_file_cannot_run", broken)
    source = HEADER + LOADER + b"for x in loader:\n    x.cuda()\n"
    result = engine.check_file("snippet.py", settings(["ADV101"], "A100"), data=source)
    (found,) = result.diagnostics
    assert found.code == "ADV101" and found.fix_applicability is None
    assert "premises could not be checked" in found.message
    assert any("internal error checking ADV101's fix: ValueError: boom" in e.message for e in result.errors)
