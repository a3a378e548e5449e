"""Finding the processes a verify run leaves behind, beyond its process group.

Killing the run's process group takes DataLoader workers and plain children with it, but a child
that moved to a session of its own (``start_new_session=True``, ``os.setsid()``, a daemon that
forked twice) has left the group, and once the harness dies it is re-parented to init. Two more
ways find it: every run gets a marker in its environment, which children inherit through fork
and exec wherever they move; and, while the harness still lives, ancestry finds a child started
with an environment of its own. Linux only (``/proc``); elsewhere both find nothing and the
group kill is all there is.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import signal
from collections.abc import Iterable

RUN_MARKER = "ADVISOR_VERIFY_RUN"


def new_marker() -> str:
    return secrets.token_hex(8)


def _pids() -> list[int]:
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []


def marked(marker: str) -> list[int]:
    """The live processes whose environment holds this run's marker (a zombie's reads empty)."""
    entry = f"{RUN_MARKER}={marker}".encode()
    found = []
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:  # ended while we looked, or not ours to read
            continue
        if entry in environ.split(b"\0"):
            found.append(pid)
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``. ``pid`` must not have been reaped yet, or its number
    may already belong to someone else."""
    children: dict[int, list[int]] = {}
    for candidate in _pids():
        try:
            with open(f"/proc/{candidate}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()  # the command name may hold spaces and parentheses
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(candidate)
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def kill_all(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
