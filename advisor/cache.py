"""The results cache of ``advisor check``, in the spirit of ruff's ``.ruff_cache``.

A run's results depend on the file's bytes and on everything that decides what the rules
report: advisor's version, the rules' own source (edited during development without a
version bump), the enabled codes, per-file ignores and the target GPU's attributes (not
where the target came from: the report prints that separately). Everything but the file
goes into one settings fingerprint; each fingerprint owns one JSON file under
``<root>/.advisor_cache/<version>/``, mapping a file's absolute path to the digest of the
bytes it was analyzed from and what came out.

The cache is an optimisation only: an entry that is missing, stale or malformed is a miss,
and a cache that cannot be read or written never fails the run.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from advisor import __version__

if TYPE_CHECKING:
    from advisor.engine import FileResult, Settings

CACHE_DIR_NAME = ".advisor_cache"
# https://bford.info/cachedir/ : backup tools skip folders holding this tag.
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by advisor.\n"
    "# For information about cache directory tags, see https://bford.info/cachedir/\n"
)
_DIAGNOSTIC_FIELDS = (
    "line", "column", "end_line", "end_column", "code", "name", "message", "fix_applicability", "fix_description",
    "fix_edits", "cell", "cell_line", "cell_column", "cell_end_line", "cell_end_column",
)
_ERROR_FIELDS = ("message", "code", "line", "column", "cell", "cell_line", "cell_column")


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@lru_cache(maxsize=1)
def rules_fingerprint() -> str:
    """A digest of advisor's own sources, rules included: editing a rule invalidates the cache."""
    import advisor
    import advisor.rules

    hasher = hashlib.blake2b(digest_size=16)
    roots = sorted({os.path.realpath(p) for p in (*advisor.__path__, *advisor.rules.__path__)})
    for root in roots:
        for directory, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for filename in sorted(filenames):
                if not filename.endswith(".py"):
                    continue
                path = os.path.join(directory, filename)
                try:
                    with open(path, "rb") as handle:
                        content = handle.read()
                except OSError:
                    content = b"<unreadable>"
                hasher.update(os.path.relpath(path, root).encode() + b"\0" + digest(content).encode())
    return hasher.hexdigest()


def settings_fingerprint(settings: "Settings") -> str:
    target = dataclasses.asdict(settings.target)
    target.pop("source", None)
    target.pop("gpus_source", None)
    payload = {
        "version": __version__,
        "rules": rules_fingerprint(),
        "python": list(sys.version_info[:2]),
        "libcst": _libcst_version(),
        "codes": sorted(settings.codes),
        "per_file_ignores": sorted([pattern, sorted(codes)] for pattern, codes in settings.per_file_ignores),
        "root": os.path.abspath(settings.root),
        "project_scope": settings.project_scope,
        "fix_edits": settings.fix_edits,
        "target": target,
    }
    return digest(json.dumps(payload, sort_keys=True, default=repr).encode())


def _libcst_version() -> str:
    try:
        from importlib.metadata import version

        return version("libcst")
    except Exception:  # pragma: no cover - metadata missing in odd installs
        return "unknown"


def cache_dir(root: str | os.PathLike) -> Path:
    return Path(root) / CACHE_DIR_NAME


class Cache:
    """Results of one settings fingerprint; counts its hits so callers can tell what was reused."""

    def __init__(self, root: str | os.PathLike, settings: "Settings") -> None:
        self.directory = cache_dir(root)
        self.file = self.directory / __version__ / f"{settings_fingerprint(settings)}.json"
        self.hits = 0
        self.misses = 0
        self._entries: dict[str, dict] = {}
        self._updates: dict[str, dict] = {}
        self._loaded_stat: tuple[int, int] | None = None
        self._digests: dict[str, str] = {}
        self._target = settings.target
        self._entries = self._read()

    def _read(self) -> dict[str, dict]:
        try:
            with open(self.file, "rb") as handle:
                stat = os.fstat(handle.fileno())
                payload = json.loads(handle.read())
            self._loaded_stat = (stat.st_mtime_ns, stat.st_size)
        except (OSError, ValueError, RecursionError):
            return {}
        entries = payload.get("entries") if isinstance(payload, dict) else None
        return entries if isinstance(entries, dict) else {}

    def get(self, path: str, content_digest: str) -> "FileResult | None":
        entry = self._entries.get(os.path.abspath(path))
        result = _decode(entry, path, content_digest) if entry is not None else None
        if result is not None and not self._dependencies_hold(path, result):
            result = None
        if result is None:
            self.misses += 1
        else:
            self.hits += 1
        return result

    def _dependencies_hold(self, path: str, result: "FileResult") -> bool:
        """The project files the cached result was computed with are unchanged, and so is the
        list of files importing it where their verdict was asked."""
        for dependency, expected in result.dependencies.items():
            if self._digest_of(dependency) != expected:
                return False
        if result.importers is not None:
            from advisor.project import project_for
            from advisor.engine import parse

            project = project_for(path, self._target, parse)
            if sorted(project.importers.get(os.path.abspath(path), [])) != result.importers:
                return False
        if result.reached is not None or result.called or result.mentions or result.asked_texts:
            from advisor.project import project_for
            from advisor.engine import parse, reach_word

            project = project_for(path, self._target, parse)
            if result.project_stamp is not None and result.project_stamp == project.stamp:
                return True  # no project file changed: what runs is what it was
            if result.asked_texts:
                return False  # what the project's text says anywhere may have changed
            # A new script that imports the module makes its fixes fixes again.
            if result.reached is not None and reach_word(project.reached(path)) != result.reached:
                return False
            own = os.path.abspath(path)
            if any(project.called(*_named(key, own)) != used for key, used in (result.called or {}).items()):
                return False
            if any(project.mentions_outside(*_named(key, own)) != count for key, count in (result.mentions or {}).items()):
                return False
        return True

    def _digest_of(self, path: str) -> str:
        known = self._digests.get(path)
        if known is None:
            try:
                with open(path, "rb") as handle:
                    known = digest(handle.read())
            except OSError:
                known = ""
            self._digests[path] = known
        return known

    def put(self, result: "FileResult", content_digest: str) -> None:
        entry = {
            "digest": content_digest,
            "dependencies": result.dependencies,
            "importers": result.importers,
            "reached": result.reached,
            "called": result.called,
            "mentions": result.mentions,
            "project_stamp": result.project_stamp,
            "asked_texts": result.asked_texts,
            "path": result.path,
            "diagnostics": [[getattr(d, name) for name in _DIAGNOSTIC_FIELDS] for d in result.diagnostics],
            "errors": [[getattr(e, name) for name in _ERROR_FIELDS] for e in result.errors],
        }
        key = os.path.abspath(result.path)
        self._entries[key] = entry
        self._updates[key] = entry

    def save(self) -> None:
        """Write this run's new entries atomically, merged over what another run may have written since."""
        if not self._updates:
            return
        try:
            self._ensure_directory()
            entries = self._entries
            try:
                stat = os.stat(self.file)
                if (stat.st_mtime_ns, stat.st_size) != self._loaded_stat:
                    entries = {**self._read(), **self._updates}
            except OSError:
                pass
            handle, temporary = tempfile.mkstemp(dir=self.file.parent, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as stream:
                    json.dump({"entries": entries}, stream, separators=(",", ":"))
                os.replace(temporary, self.file)
            except BaseException:
                _unlink_quietly(temporary)
                raise
        except OSError:
            return  # a read-only checkout or a full disk: the run's results stand without the cache
        self._updates = {}

    def _ensure_directory(self) -> None:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        for name, text in (("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", "# Automatically created by advisor.\n*\n")):
            marker = self.directory / name
            if not marker.exists():
                marker.write_text(text, encoding="utf-8")


def _decode(entry: object, path: str, content_digest: str) -> "FileResult | None":
    """The cached result for ``path``, or None when the entry is stale or malformed."""
    from advisor.engine import Diagnostic, FileError, FileResult

    if not isinstance(entry, dict) or entry.get("digest") != content_digest:
        return None
    diagnostics, errors = entry.get("diagnostics"), entry.get("errors")
    if not isinstance(diagnostics, list) or not isinstance(errors, list):
        return None
    dependencies, importers = entry.get("dependencies", {}), entry.get("importers")
    if not isinstance(dependencies, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in dependencies.items()
    ):
        return None
    if importers is not None and not (isinstance(importers, list) and all(isinstance(i, str) for i in importers)):
        return None
    reached = entry.get("reached")
    if reached not in (None, "yes", "no", "unknown"):
        return None
    called = entry.get("called")
    if called is not None and not (isinstance(called, dict) and all(isinstance(v, bool) for v in called.values())):
        return None
    mentions = entry.get("mentions")
    if mentions is not None and not (isinstance(mentions, dict) and all(type(v) is int for v in mentions.values())):
        return None
    project_stamp = entry.get("project_stamp")
    if project_stamp is not None and not isinstance(project_stamp, str):
        return None
    asked_texts = entry.get("asked_texts", False)
    if not isinstance(asked_texts, bool):
        return None
    try:
        result = FileResult(
            path,
            diagnostics=[Diagnostic(path, *_checked(row, _DIAGNOSTIC_FIELDS)) for row in diagnostics],
            errors=[FileError(path, *_checked(row, _ERROR_FIELDS)) for row in errors],
            dependencies=dependencies,
            importers=importers,
            reached=reached,
            called=called,
            mentions=mentions,
            project_stamp=project_stamp,
            asked_texts=asked_texts,
        )
    except (TypeError, ValueError):
        return None
    stored_path = entry.get("path")
    if stored_path != path and isinstance(stored_path, str) and stored_path:
        # Same file named differently ("./t.py" vs "t.py"): reuse it unless a message spelled the old name.
        texts = [d.message for d in result.diagnostics] + [e.message for e in result.errors]
        if any(stored_path in text for text in texts):
            return None
    return result


_TYPES = {
    "line": int, "column": int, "end_line": int, "end_column": int, "code": str, "name": str, "message": str,
    "fix_applicability": (str, type(None)), "fix_description": (str, type(None)), "fix_edits": (list, type(None)),
    # a notebook's cell and the position in it (advisor/notebooks.py); None for a .py file
    "cell": (int, type(None)), "cell_line": (int, type(None)), "cell_column": (int, type(None)),
    "cell_end_line": (int, type(None)), "cell_end_column": (int, type(None)),
}


# The exact types each field may hold, as JSON decodes them (a bool is not an int here): a
# warm run checks every field of every cached finding, 30,000 findings on 10,000 files.
_EXACT_TYPES = {
    name: frozenset(allowed if isinstance(allowed, tuple) else (allowed,)) for name, allowed in _TYPES.items()
}
_ROW_TYPES = {fields: tuple(_EXACT_TYPES[name] for name in fields) for fields in (_DIAGNOSTIC_FIELDS, _ERROR_FIELDS)}


def _checked(row: object, fields: tuple[str, ...]) -> list:
    types = _ROW_TYPES[fields]
    if row.__class__ is not list or len(row) != len(types):  # type: ignore[arg-type]
        raise ValueError("malformed cache row")
    for value, allowed in zip(row, types):  # type: ignore[call-overload]
        if value.__class__ not in allowed:
            raise ValueError("malformed cache row")
    return row  # type: ignore[return-value]


def clean(root: str | os.PathLike) -> bool:
    """Remove the cache folder under ``root``; True when there was one."""
    import shutil

    directory = cache_dir(root)
    if not directory.is_dir():
        return False
    shutil.rmtree(directory)
    return True


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _named(key: str, own: str) -> tuple[str, str, bool]:
    """The arguments to ask the project again what a view was asked under ``key``."""
    from advisor.project import asked_name

    name, kind = asked_name(key)
    return name, own, kind
