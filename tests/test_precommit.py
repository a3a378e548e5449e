"""The pre-commit hooks, driven through the real pre-commit in throwaway git repositories.

pre-commit installs advisor from a git repository into a virtualenv of its own, so these
tests need `git`, pre-commit, and a package index for advisor's dependencies.

The hook repository is a commit-ed snapshot of this working tree rather than the working
tree itself: `pre-commit try-repo` only carries tracked files into its shadow clone, so
new, not yet added files (a new module, the hook manifest itself) would silently be
missing and the tests would exercise the last commit instead of the code under test.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

if shutil.which("git") is None:
    pytest.skip("git is not installed; pre-commit needs it", allow_module_level=True)
if importlib.util.find_spec("pre_commit") is None:
    pytest.skip("pre-commit is not installed (pip install -e '.[test]')", allow_module_level=True)

PRE_COMMIT = [sys.executable, "-m", "pre_commit"]
# Building a hook environment pip-installs advisor and its dependencies.
TIMEOUT_S = 600

FIXABLE = textwrap.dedent(
    """\
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=32, num_workers=2)  # keep this comment
    model = model.cuda()
    """
)
CLEAN = FIXABLE.replace("num_workers=2)", "num_workers=2, pin_memory=True)")


def notebook_of(source: str) -> str:
    """A notebook as Jupyter writes it, the script's code in one cell after a magic and a markdown cell."""
    import json

    cells = [
        {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Training\n"]},
        {"cell_type": "code", "execution_count": 1, "id": "train", "metadata": {}, "outputs": [],
         "source": ("%matplotlib inline\n" + source).splitlines(True)},
    ]
    document = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
                "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"

# The scripts above trip other rules too (ADV102 wants workers, ...), whose fixes are
# not safe; selecting ADV101 keeps these tests about the hooks, not about the catalogue.
# A fixed GPU keeps the outcome independent of the machine's own GPU.
PROJECT_PYPROJECT = textwrap.dedent(
    """\
    [tool.advisor]
    select = ["ADV101"]
    gpu = "A100"
    """
)


def clean_env(pre_commit_home: Path) -> dict[str, str]:
    """The environment for git and pre-commit, cut loose from any repository around the test run.

    Variables such as GIT_DIR or GIT_INDEX_FILE are set when pytest itself runs from a git
    hook; left in place they would point every git command below at the outer repository.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith(("GIT_", "PRE_COMMIT"))}
    env.update(
        PRE_COMMIT_HOME=str(pre_commit_home),
        GIT_AUTHOR_NAME="advisor tests",
        GIT_AUTHOR_EMAIL="tests@advisor.invalid",
        GIT_COMMITTER_NAME="advisor tests",
        GIT_COMMITTER_EMAIL="tests@advisor.invalid",
        GIT_CONFIG_NOSYSTEM="1",
        # A global config may sign commits or set hooks; none of that belongs here.
        GIT_CONFIG_GLOBAL=os.devnull,
    )
    return env


def git(*args: str, cwd: Path, env: dict[str, str]) -> str:
    completed = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, f"git {' '.join(args)} failed:\n{completed.stdout}{completed.stderr}"
    return completed.stdout


def pre_commit(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PRE_COMMIT, *args, "--color", "never"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory) -> Path:
    """One pre-commit store for the module, so the hook environment is built once."""
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture(scope="module")
def env(pre_commit_home: Path) -> dict[str, str]:
    return clean_env(pre_commit_home)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory, env) -> tuple[Path, str]:
    """A git repository holding this working tree, as committed: (path, revision)."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        capture_output=True,
        check=False,
    )
    if listing.returncode != 0:
        pytest.skip(f"{REPO_ROOT} is not a git checkout; cannot build a hook repository from it")
    snapshot = tmp_path_factory.mktemp("hook-repo")
    for name in listing.stdout.decode().split("\0"):
        source = REPO_ROOT / name
        if name and source.is_file():  # deleted-but-tracked files are skipped
            destination = snapshot / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    assert (snapshot / ".pre-commit-hooks.yaml").is_file(), "the hook manifest is missing"
    git("init", "--quiet", cwd=snapshot, env=env)
    git("add", "--all", cwd=snapshot, env=env)
    git("commit", "--quiet", "--no-verify", "-m", "snapshot of the working tree", cwd=snapshot, env=env)
    revision = git("rev-parse", "HEAD", cwd=snapshot, env=env).strip()
    return snapshot, revision


@pytest.fixture
def project(tmp_path: Path, hook_repo, env) -> Path:
    """A user's repository with a fixable training script and a config using both hooks."""
    repo_path, revision = hook_repo
    git("init", "--quiet", cwd=tmp_path, env=env)
    git("config", "user.name", "advisor tests", cwd=tmp_path, env=env)
    git("config", "user.email", "tests@advisor.invalid", cwd=tmp_path, env=env)
    (tmp_path / "pyproject.toml").write_text(PROJECT_PYPROJECT)
    (tmp_path / "train.py").write_text(FIXABLE)
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "notes.txt").write_text("DataLoader(dataset) and model.cuda(), in prose\n")
    (tmp_path / "train.ipynb").write_text(notebook_of(FIXABLE))
    (tmp_path / ".pre-commit-config.yaml").write_text(
        textwrap.dedent(
            f"""\
            repos:
              - repo: {repo_path.as_posix()}
                rev: {revision}
                hooks:
                  - id: advisor-fix
                  - id: advisor-check
            """
        )
    )
    git("add", "--all", cwd=tmp_path, env=env)
    return tmp_path


def test_try_repo_runs_both_hooks_from_the_manifest(project: Path, hook_repo, env):
    # try-repo keeps a store of its own (PRE_COMMIT_HOME does not apply), so it builds
    # the environment again; once is enough to prove the manifest works through it.
    repo_path, revision = hook_repo
    result = pre_commit("try-repo", str(repo_path), "--ref", revision, "--files", "train.py", cwd=project, env=env)
    output = result.stdout
    assert result.returncode == 1, output
    check_section = output[output.index("advisor check"):output.index("advisor fix")]
    assert "Failed" in check_section, output
    assert "train.py:4:10: ADV101 [*] DataLoader without `pin_memory=True`" in check_section, output
    assert "files were modified by this hook" in output[output.index("advisor fix"):], output
    assert "pin_memory=True" in (project / "train.py").read_text()


def test_check_hook_fails_on_a_finding_and_names_it(project: Path, env):
    result = pre_commit("run", "advisor-check", "--files", "train.py", cwd=project, env=env)
    assert result.returncode == 1, result.stdout
    assert "advisor check" in result.stdout and "Failed" in result.stdout
    assert "train.py:4:10: ADV101 [*] DataLoader without `pin_memory=True`" in result.stdout
    assert (project / "train.py").read_text() == FIXABLE, "the check hook must not write"


def test_check_hook_passes_a_clean_file(project: Path, env):
    result = pre_commit("run", "advisor-check", "--files", "clean.py", cwd=project, env=env)
    assert result.returncode == 0, result.stdout
    assert "Passed" in result.stdout


def test_hooks_skip_files_that_are_not_python(project: Path, env):
    result = pre_commit("run", "--files", "notes.txt", cwd=project, env=env)
    assert result.returncode == 0, result.stdout
    assert "Failed" not in result.stdout
    assert result.stdout.count("(no files to check)Skipped") == 2, result.stdout


def test_fix_hook_rewrites_the_file_then_passes(project: Path, env):
    first = pre_commit("run", "advisor-fix", "--files", "train.py", cwd=project, env=env)
    # pre-commit fails a hook that modified files, so the user reviews and stages the change.
    assert first.returncode == 1, first.stdout
    assert "files were modified by this hook" in first.stdout
    assert (project / "train.py").read_text() == CLEAN, "the fix must keep everything but the one keyword"

    second = pre_commit("run", "advisor-fix", "--files", "train.py", cwd=project, env=env)
    assert second.returncode == 0, second.stdout
    assert "Passed" in second.stdout

    check = pre_commit("run", "advisor-check", "--files", "train.py", cwd=project, env=env)
    assert check.returncode == 0, check.stdout


def test_hooks_run_on_notebooks(project: Path, env):
    # types_or: [python, jupyter]: pre-commit hands the hooks .ipynb files too.
    check = pre_commit("run", "advisor-check", "--files", "train.ipynb", cwd=project, env=env)
    assert check.returncode == 1, check.stdout
    assert "train.ipynb:cell 2:5:10: ADV101 [*] DataLoader without `pin_memory=True`" in check.stdout
    fix = pre_commit("run", "advisor-fix", "--files", "train.ipynb", cwd=project, env=env)
    assert fix.returncode == 1 and "files were modified by this hook" in fix.stdout, fix.stdout
    assert (project / "train.ipynb").read_text() == notebook_of(CLEAN), "only the cell's line changes"
    again = pre_commit("run", "--files", "train.ipynb", cwd=project, env=env)
    assert again.returncode == 0 and again.stdout.count("Passed") == 2, again.stdout
