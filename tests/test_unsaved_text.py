"""``check_file(path, settings, data=...)`` and ``fix_source`` analyse the bytes they are given,
not the file on disk at ``path``: an editor's unsaved text (advisor server) has the path of a
file that holds something else, often of the same size."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from helpers import settings

from advisor.engine import check_file
from advisor.fixer import fix_source
from advisor.project import forget_projects

ON_DISK = (
    "import torch\n"
    "from torch.utils.data import DataLoader\n"
    "model = model.cuda()\n"
    "loader = DataLoader(ds, batch_size=8, pin_memory=False)\n"
    "for x in loader:\n"
    "    model(x.cuda(non_blocking=True)).sum().backward()\n"
)
# `False` -> `True `: the same size, so the same (mtime, size) as the file on disk.
IN_THE_EDITOR = ON_DISK.replace("pin_memory=False)", "pin_memory=True )")


def test_text_of_the_same_size_as_the_file_is_analysed_as_given(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.advisor]\n")
    path = tmp_path / "train.py"
    path.write_text(ON_DISK)
    assert len(IN_THE_EDITOR) == len(ON_DISK)
    project = replace(settings(["ADV101"]), root=str(tmp_path), project_scope=True)
    forget_projects()
    # The file as it is on disk: parsed, and kept for its siblings.
    assert [d.code for d in check_file(str(path), project).diagnostics] == ["ADV101"]
    assert check_file(str(path), project, data=IN_THE_EDITOR.encode()).diagnostics == []
    unchanged = fix_source(str(path), IN_THE_EDITOR.encode(), project, unsafe=True)
    assert not unchanged.changed and unchanged.remaining == []
    # And back: the text on disk again is analysed as such.
    assert [d.code for d in check_file(str(path), project, data=ON_DISK.encode()).diagnostics] == ["ADV101"]
