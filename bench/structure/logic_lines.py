"""Lines of logic in rule modules and in the shared layers, without docs, examples and comments.

    python bench/structure/logic_lines.py [--rev GIT_REVISION]

A *logic line* is a line of a Python file that holds code: docstrings, the rules' documentation
and example strings (``why``, ``valid``, ``invalid``...), comments and blank lines do not count.
With ``--rev`` the files are read from that git revision instead of the working tree, so two
states of the code can be compared.
"""
from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = ("advisor/facts/", "advisor/loops.py", "advisor/values.py", "advisor/project.py", "advisor/context.py")


def logic_lines(source: str) -> int:
    """Lines holding a token other than a string, a comment or layout."""
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.STRING, tokenize.ENDMARKER):
            continue
        code_lines.update(range(token.start[0], token.end[0] + 1))
    return len(code_lines)


def files(rev: str | None) -> dict[str, str]:
    if rev is None:
        return {str(p.relative_to(REPO)): p.read_text() for p in [*REPO.glob("rules/*.py"), *REPO.glob("advisor/**/*.py")]}
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    found = {}
    for name in names:
        if name.endswith(".py") and (name.startswith("rules/") or name.startswith("advisor/")):
            found[name] = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", help="a git revision (default: the working tree)")
    args = parser.parse_args(argv)
    counts = {"rules": 0, "shared premises (facts, loops, values, project, context)": 0}
    per_file: dict[str, int] = {}
    for name, source in sorted(files(args.rev).items()):
        if "/verify/" in name:
            continue
        lines = logic_lines(source)
        per_file[name] = lines
        if name.startswith("rules/"):
            counts["rules"] += lines
        elif name.startswith(SHARED):
            counts["shared premises (facts, loops, values, project, context)"] += lines
    for name, lines in per_file.items():
        print(f"{lines:6d}  {name}")
    for group, lines in counts.items():
        print(f"{lines:6d}  {group}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
