"""Project scope: the modules of the project a file belongs to, for questions that cross files.

A training script imports its siblings: the device from ``config.py``, the DataLoader from
``data_setup.py``, the model class from ``models/``, the train step from ``engine.py``. A rule
still reports in the file where the code is; what crosses the file boundary is the facts:

- a name the file imports from a project module (``from config import DEVICE``, ``import
  config; config.DEVICE``, ``from models import *``, re-exports through ``__init__.py``)
  resolves to its definition in that module (:meth:`ProjectView.definition`);
- a module that says nothing about where it runs (``engine.py`` moves batches to a ``device``
  parameter) takes the verdict of the project's files that import it
  (:meth:`ProjectView.importer_gpu`).

The project is found from the file: its root is the nearest folder above it holding a
``.git``, ``pyproject.toml``, ``setup.py`` or ``setup.cfg`` (else the file's own folder).
Modules resolve as Python would find them when a script of the project runs: relative imports
from the importing file's package, absolute ones from the script's folder, its parents up to
the root, and ``src/``. Nothing is imported or run: sibling files are parsed like the file
itself, once per process, and every file consulted is recorded (:attr:`ProjectView.consulted`)
so that the result cache can tell when a dependency changed.
"""
from __future__ import annotations

import collections
import os
import re
import sys
import stat as stat_module
import weakref
from collections import OrderedDict
from dataclasses import dataclass
import functools
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Iterator

import libcst as cst

from advisor.names import dotted_name

if TYPE_CHECKING:
    from advisor.context import Binding, FileContext
    from advisor.facts import Answer
    from advisor.facts.devices import DeviceFacts
    from advisor.targets import Target

ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
_SKIPPED = {
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "env", ".env", ".tox", ".nox", "build", "dist",
    "site-packages", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".advisor_cache", ".eggs",
    ".ipynb_checkpoints",
}
# A project larger than this is a library tree, not a training project: scope stays per folder.
MAX_PROJECT_FILES = 5000
# The project texts a process keeps for repeated scans (:meth:`Project._peek`).
_KEPT_TEXT_BYTES = 24 * 1024 * 1024
# How many parsed sibling modules a process keeps, and how much source they may add up to.
_CONTEXTS_KEPT = 16
_BYTES_KEPT = 256 * 1024
# A sibling larger than this is not parsed to answer another file's question.
_SIBLING_BYTES = 192 * 1024
# How far "who imports this module" is followed (``models/resnet.py`` <- ``models/__init__.py`` <- ``main.py``).
_IMPORTER_DEPTH = 3
# How many of a module's importers are asked for their verdict.
_IMPORTERS_ASKED = 6
# The patterns below that match at line starts begin with ``\n`` and are searched in ``b"\n" +
# text`` (``_lines``): with a literal first byte the regex engine jumps from newline to newline,
# where ``^`` under ``re.M`` is tried at every byte (three to ten times slower over a project).
_IMPORT_LINE = re.compile(
    rb"\n(?P<indent>[ \t]*)(?:from[ \t]+(?P<from>\.*[\w.]*)[ \t]+import[ \t]+(?P<names>\(?[^#\n]*)|import[ \t]+(?P<modules>[^#\n]+))"
)
_NAME = re.compile(r"[A-Za-z_]\w*")
# ``parser.add_argument("--use_amp", ...)``, also with a short form first (``"-b", "--batch-size"``).
_DECLARED_OPTION = re.compile(rb"""add_argument\(\s*(?:['"]-\w+['"]\s*,\s*)?['"]--([\w-]+)['"]""")
_TOP_LEVEL_NAME = re.compile(rb"\n(?:(?:async[ \t]+)?def|class)[ \t]+(\w+)|\n(\w+)[ \t]*(?::[^=\n]*)?=(?!=)")


def _lines(text: bytes) -> bytes:
    """``text`` for the line-start patterns: its first line starts after a newline too."""
    return b"\n" + text


# What a module that is run shows (an entry point): a main guard, or a statement at module
# level that does something (a loop, a ``with``, a call: ``main()``, ``trainer.fit(model)``),
# or an assignment that builds what training needs (``args = parser.parse_args()``, ``model =
# Net().cuda()``, ``loader = DataLoader(ds)``: a notebook exported as a script). A library
# module defines things (``logger = logging.getLogger(__name__)``); its module-level calls
# (``logging.basicConfig()``) make it an entry too, which only keeps its fixes.
_ENTRY_TEXT = re.compile(
    rb"\n(?:for|while|with|async[ \t]+(?:for|with))\b|\n[A-Za-z_][\w.]*[ \t]*\("
    rb"|\n[A-Za-z_][\w., \t]*=(?!=)[^\n]*(?:\.cuda\(|\.to\(|DataLoader\(|parse_args\(|\.fit\(|\.train\(|Trainer\(|from_pretrained\()"
)
_ENTRY_FILES = frozenset({"__main__.py", "hubconf.py"})


def _in_triple_quotes(text: bytes, offset: int) -> bool:
    """Whether ``offset`` falls inside a triple-quoted string (a docstring's ``NOTE (Huahuan):``
    at the start of a line is not a call: CAT's ``manager_wo.py``), by the quotes before it."""
    before = text[:offset]
    return (before.count(b'"""') + before.count(b"'''")) % 2 == 1
# Folders where runs leave their outputs, and the copies of the code some scripts save there.
_ARTIFACT_FOLDERS = frozenset({"log", "logs", "runs", "outputs", "output", "checkpoints", "wandb", "lightning_logs", "mlruns"})
# A module that imports others by name, from a string or a config (``importlib.import_module``,
# Hydra's ``instantiate``, latent-diffusion's ``instantiate_from_config``): what it reaches is
# not in its text.
# Each alternative holds one of these words; ``in`` finds them faster than the regex's search.
_DYNAMIC_IMPORT_WORDS = (
    b"import_module(", b"__import__(", b"instantiate", b"get_obj_from_str(", b"_target_", b"locate(", b"iter_modules(",
    b"walk_packages(", b"spec_from_file_location(", b"load_source(", b"runpy.", b"import_string(", b"entry_points(",
)
_DYNAMIC_IMPORT = re.compile(
    rb"import_module\(|__import__\(|\binstantiate(?:_from_config)?\(|get_obj_from_str\(|\b_target_\b|\blocate\("
    rb"|iter_modules\(|walk_packages\(|spec_from_file_location\(|load_source\(|\brunpy\.|import_string\(|entry_points\("
)
# ``name = "package.module:function"`` in ``pyproject.toml``, ``setup.cfg`` or ``setup.py``.
_CONSOLE_SCRIPT = re.compile(rb"=[ \t]*[\"']?[ \t]*([A-Za-z_][\w.]*)[ \t]*:[ \t]*[A-Za-z_]\w*")
# Building a class from its dotted name, given in a config or a string.
_INSTANTIATES = re.compile(rb"\b(?:instantiate_from_config|get_obj_from_str|instantiate|construct_class_by_name|call_func_by_name)\(")
# ``target: ldm.models.diffusion.ddpm.LatentDiffusion`` / ``_target_: src.models.mnist_module.MNISTLitModule``.
_CONFIG_TARGET = re.compile(rb"^[ \t-]*_?target_?[ \t]*:[ \t]*[\"']?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)", re.M)
# A dotted name in a Python string (``class_name='training.networks.EDMPrecond'``).
_DOTTED_STRING = re.compile(rb"[\"']([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)[\"']")
_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
# Looking a class up by a name made at run time (:meth:`Project._builds_by_name`).
_LOOKS_UP_BY_NAME = re.compile(rb"__dict__\[|globals\(\)\s*\[|\bvars\([^)\n]*\)\s*\[|\bgetattr\(")
_LOOKUP_TABLE = re.compile(rb"__dict__\[|globals\(\)\s*\[|\bvars\([^)\n]*\)\s*\[")
_GETATTR_OF_NAME = re.compile(rb"\bgetattr\(\s*([A-Za-z_]\w*)\s*,\s*(?![\"'\s])")
_IMPORTED_MODULE = re.compile(
    rb"^[ \t]*(?:import[ \t]+([\w.]+)|from[ \t]+[\w.]+[ \t]+import[ \t]+(\w+))(?:[ \t]+as[ \t]+(\w+))?", re.M
)
# ``super(DropBlock2d, self)``: the class naming itself in its own methods (Python 2 style).
_OWN_SUPER = re.compile(rb"\bsuper[ \t]*\([ \t]*[A-Za-z_]\w*[ \t]*,[ \t]*self[ \t]*\)")
# A ``def`` or ``class`` statement's name: the name defined, not a use of it (Point-MAE's two
# ``random_dropping``, one in ``utils/misc.py`` and a copy in ``segmentation/misc.py``, neither called).
_DEFINITION = re.compile(rb"\b(?:def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)")
# ``self.get_img_code(...)``: an attribute of an instance or class, which a method of that name
# answers; never a module-level function or class (deep-cross-modal-hashing's ``valid.py``
# functions, namesakes of the methods its trainers call).
_SELF_ATTRIBUTE = re.compile(rb"\b(?:self|cls)[ \t]*\.[ \t]*([A-Za-z_][A-Za-z0-9_]*)")
# ``obj.name``: how a method is used; and ``"name"``, a lookup (``getattr(obj, "name")``).
_ATTRIBUTE = re.compile(rb"\.[ \t]*([A-Za-z_][A-Za-z0-9_]*)")
_WORD_STRING = re.compile(rb"[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']")
# What a name asked about is (:meth:`Project.called`): any name, a module-level function or class,
# or a method.
NAME, MODULE_LEVEL, METHOD = "name", "module", "method"


# Text that names a function without using it: an import (a package's ``__init__.py`` re-exporting
# it), an ``__all__`` list, a line commented out, a type test; in a script or in a notebook's JSON source.
_NAMES_WITHOUT_USE = re.compile(
    rb"^[ \t]*\"?[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]*\([^)]*\)|(?:from[ \t]+[\w.]+[ \t]+)?import[ \t][^\n]*)"
    rb"|^[ \t]*__all__[ \t]*\+?=[ \t]*[\[(][^\])]*[\])]"
    rb"|^[ \t]*\"?[ \t]*#[^\n]*"
    # ``isinstance(m, SpectralNormLinear)`` asks about a class; it builds none (residual-flows'
    # training scripts test for classes nothing instantiates).
    # (A class's own ``super(Cls, self)`` is left to ``Project._without_non_uses``: a use only
    # where the project imports by name.)
    rb"|\b(?:isinstance|issubclass)[ \t]*\([^()\n]*,[ \t]*(?:\([^()\n]*\)|[\w.]+)[ \t]*\)",
    re.M,
)
# Classes a serving framework builds, and whose methods it calls, by name: Triton's Python backend.
CALLED_BY_FRAMEWORKS = frozenset({"TritonPythonModel"})


# Strings and comments, in the order a tokenizer meets them (so that a closing quote never opens
# another string). Of the strings, those no lookup can take for a name are not uses: docstrings
# and other triple-quoted text, and one-line strings with a space in them (``'valid MAP: %3.4f'``
# names nothing); not prefixed ones (an f-string's braces hold code), nor a one-word string
# (``getattr(m, "valid")``).
_STRING_OR_COMMENT = re.compile(
    rb'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|#[^\n]*'
)
_SPACE = re.compile(rb"[ \t]")
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


# The largest document read for the values a project writes: a config, not a data set's JSON.
_DOCUMENT_BYTES = 256 * 1024

# Sources a build turns into extension modules of any name its setup script chooses.
_BUILT_SOURCES = (".pyx", ".pxd", ".c", ".cpp", ".cu", ".so", ".pyd", ".thrift")


def _names_document(name: str) -> bool:
    """Files that may say which options a project is run with: shell scripts, documents,
    JSON configs (a YAML config is one of the project's configs already)."""
    return name.endswith((".sh", ".md", ".rst", ".txt", ".json", ".cfg", ".toml", ".ini"))


def _prose_removed(match: "re.Match[bytes]") -> bytes:
    found = match.group(0)
    start = match.start()
    if found[:1] == b"#" or (start and match.string[start - 1] in _WORD_BYTES):
        return found  # a comment, or a prefixed string (``f"..."``, ``r'...'``)
    if found[:3] in (b'"""', b"\'\'\'") or _SPACE.search(found):
        return b'""'
    return found


def _without_non_uses(text: bytes, keep_imports: bool = False, strings: bool = True) -> bytes:
    """``text`` without what names a function without using it (:data:`_NAMES_WITHOUT_USE`).
    An import that renames (``import NativeScalerWithGradNormCount as NativeScaler``) stays: the
    code uses the new name. ``keep_imports`` keeps every import (a package's ``__init__.py`` in
    an installable project: its re-exports are the interface); ``strings`` drops the strings
    that name nothing (:data:`_STRING_OR_COMMENT`)."""
    def strip(match: "re.Match[bytes]") -> bytes:
        found = match.group(0)
        if b"import" in found and (keep_imports or b" as " in found) and not found.lstrip(b' \t"').startswith(b"#"):
            return found
        return b""

    text = _NAMES_WITHOUT_USE.sub(strip, text)
    return _STRING_OR_COMMENT.sub(_prose_removed, text) if strings else text


@functools.lru_cache(maxsize=16)
def _used_code(code: str) -> bytes:
    """:func:`_without_non_uses` of a file's source, kept: each finding whose code only unused
    functions reach asks it of the same source again."""
    return _without_non_uses(code.encode())


def _count_of(key: bytes, text: bytes) -> int:
    """How often ``text`` names the identifier ``key``."""
    return len(re.findall(rb"\b" + re.escape(key) + rb"\b", text))


# Cog runs ``predict: "predict.py:Predictor"`` (and ``train:``) of its ``cog.yaml``.
_COG_PREDICTOR = re.compile(rb"^[ \t]*(?:predict|train)[ \t]*:[ \t]*[\"']?([\w./-]+\.py):", re.M)
# An import in a notebook's JSON source (``"from models.unet import UNet\n",``).
_NOTEBOOK_IMPORT = re.compile(
    rb"\"([ \t]*)(?:from[ \t]+(\.*[\w.]+)[ \t]+import[ \t]+([\w, \t]*)|import[ \t]+([\w.]+))"
)


def _read_regular(path: str) -> bytes:
    """The bytes of a regular file; nothing for a FIFO or socket named ``*.py`` (reading one
    would block) or a file that cannot be read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return b""
    try:
        if not stat_module.S_ISREG(os.fstat(descriptor).st_mode):
            return b""
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            return handle.read()
    except OSError:
        return b""
    finally:
        os.close(descriptor)


# What a file that says anything about devices names: without any of these, a file's device
# verdict can only come from the files importing it (advisor.facts.devices).
# Searched in the lower-cased text: ``re.IGNORECASE`` over a whole file is several times slower.
_DEVICE_WORDS = (b"cuda", b"device", b"gpu", b".to(", b"accelerat", b"trainer", b"fabric", b"rank", b"nccl", b"deepspeed", b"xla", b"mps", b".fit(", b"setup")
_HALF = re.compile(rb"\bhalf\b")


# What a file that runs shows in its text: a main guard, a training step, a framework's fit or
# train, a loop or a ``main()`` / ``train()`` call at module level. Library modules (whose
# module-level calls register things) show none of these; nor do their autograd functions
# (``def backward(ctx, grad)``) or docstring examples (``>>> loss.backward()``).
_RUNS_TEXT = re.compile(rb"\n(?:for|while)\b|\n(?:main|train\w*|run\w*|fit)\s*\(|\.(?:backward|fit|train)\s*\(")
_EXAMPLE_OR_COMMENT = re.compile(rb"[ \t]*(?:>>>|\.\.\.|#)")


def _runs(text: bytes) -> bool:
    if b"__main__" in text:
        return True
    text = _lines(text)
    for match in _RUNS_TEXT.finditer(text):
        if match.group(0)[:1] != b".":
            return True
        line_start = text.rfind(b"\n", 0, match.start()) + 1
        if not _EXAMPLE_OR_COMMENT.match(text, line_start):
            return True
    return False


# A CUDA placement written out: ``.cuda()``, ``"cuda"``.
_PLACES_TEXT = re.compile(rb"\.cuda\(|[\"']cuda")


def _names_devices(text: bytes) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _DEVICE_WORDS) or _HALF.search(lowered) is not None


def _places_on_cuda_text(text: bytes) -> bool:
    return _PLACES_TEXT.search(text) is not None


def _placed_on_cuda(devices: "DeviceFacts") -> bool:
    """The module itself puts work on a CUDA device (not only names an API or a string)."""
    return any(kind.gpu for kind, _ in devices.placements)


@dataclass(frozen=True)
class _PathOnly:
    """Stands in for a file's context where only its path is needed (its importers' verdict)."""

    path: str


def _file_key(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


def find_root(path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    current = directory
    while True:
        if any(os.path.exists(os.path.join(current, marker)) for marker in ROOT_MARKERS):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return directory
        current = parent


@dataclass(frozen=True)
class _Import:
    module: str  # dotted, without the leading dots
    level: int  # leading dots of a relative import
    names: tuple[str, ...]  # names of ``from ... import a, b``; () for ``import x``
    top: bool = True  # at the module's top level, not indented under a ``def``, ``if`` or ``try``


def _parse_imports(data: bytes) -> list[_Import]:
    """The imports in a module's text (``import a.b``, ``from .c import d, e``)."""
    found = []
    for match in _IMPORT_LINE.finditer(_lines(data)):
        try:
            if match.group("from") is not None:
                spec = match.group("from").decode()
                level = len(spec) - len(spec.lstrip("."))
                names = tuple(_NAME.findall(match.group("names").decode().split(" as ")[0]))
                found.append(_Import(spec.lstrip("."), level, names, not match.group("indent")))
            else:
                for item in match.group("modules").decode().split(","):
                    module = item.split(" as ")[0].strip()
                    if module:
                        found.append(_Import(module, 0, (), not match.group("indent")))
        except UnicodeDecodeError:
            continue
    return found


def _notebook_imports(data: bytes) -> list[_Import]:
    """The imports in a notebook's cells, read from its JSON text."""
    found = []
    for match in _NOTEBOOK_IMPORT.finditer(data):
        try:
            spec = (match.group(2) or match.group(4)).decode()
            names = tuple(_NAME.findall((match.group(3) or b"").decode().split(" as ")[0]))
        except UnicodeDecodeError:
            continue
        level = len(spec) - len(spec.lstrip("."))
        found.append(_Import(spec.lstrip("."), level, names, not match.group(1)))
    return found


def _folders(root: str) -> Iterator[tuple[str, list[str]]]:
    """Each folder of a project under ``root`` with its file names, sorted, leaving out
    environments, caches and build output (``_SKIPPED``)."""
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED and not d.endswith(".egg-info"))
        yield directory, sorted(filenames)


# ``sys.path.append("../models")``, ``sys.path.insert(0, './lib')``: a literal folder a script adds.
_SYS_PATH_ADDITION = re.compile(rb"""sys\.path\.(?:append|insert)\(\s*(?:0\s*,\s*)?[rRbB]?['"]([^'"\n]+)['"]\s*\)""")


class Project:
    """The Python files under one root, their import graph, and their parsed contexts."""

    def __init__(self, root: str, target: "Target", parse: Callable[[str, bytes, "Target"], "FileContext"]) -> None:
        self.root = root
        self.target = target
        self._parse = parse
        self._contexts: OrderedDict[str, tuple[tuple[int, int], "FileContext | None"]] = OrderedDict()
        self._in_progress: set[str] = set()
        self._module_paths: dict[tuple[str, int, str, tuple[str, ...]], str | None] = {}
        self._added_to_path: dict[str, tuple[str, ...]] = {}
        self._launches: dict[str, list[tuple[str, str]]] = {}
        self._texts: dict[str, bytes] = {}
        self._kept_text_bytes = 0  # of the texts :meth:`_peek` keeps
        self._closures: dict[str, list[str]] = {}
        self._file_identifiers: dict[str, "collections.Counter[bytes]"] = {}
        self._file_definitions: dict[str, "collections.Counter[bytes]"] = {}
        self._file_counts: dict[tuple[str, "re.Pattern[bytes]"], "collections.Counter[bytes]"] = {}
        self._used_texts: dict[str, bytes] = {}
        self._summaries: dict[str, tuple[frozenset[str], list[tuple[str, int, tuple[str, ...]]]]] = {}
        self._definers: dict[tuple[str, str], str | None] = {}
        self._resolutions: dict[tuple[str, str, bytes | None], tuple] = {}
        self._gpu_verdicts: dict[str, tuple[tuple[int, int] | None, bool]] = {}
        self._matches: dict[tuple[str, Callable[[bytes], bool]], bool] = {}
        self._imported: dict[tuple[str, bool], list[str]] = {}
        self._kept_bytes = 0
        self._import_lists: dict[str, list[_Import]] = {}
        self._text_matches: dict["re.Pattern[bytes]", list[str]] = {}
        self._values_written: dict[str, int] = {}
        self._used_counts: dict[bytes, int] = {}
        self._definition_counts: dict[bytes, int] = {}
        self._identifier_counts: dict[bytes, int] = {}
        self._holding: dict[bytes, list[str]] = {}
        self._named: dict[Callable[[str], object], list[str]] = {}
        self._dynamic_importers: dict[str, bool] = {}
        self._failing_imports: dict[tuple[str, bool], str | None] = {}
        self._test_code: dict[str, bool] = {}
        self.importer_depth = 0

    @cached_property
    def _walk(self) -> tuple[list[str], list[str], list[str]]:
        """The project's Python files, its notebooks (which import its modules too) and its
        YAML configs (Hydra's and Lightning CLI's, which set what the code leaves open)."""
        found: list[str] = []
        notebooks: list[str] = []
        configs: list[str] = []
        for directory, filenames in _folders(self.root):
            for filename in filenames:
                if filename.endswith(".py"):
                    found.append(os.path.join(directory, filename))
                    if len(found) > MAX_PROJECT_FILES:
                        return [], [], []
                elif filename.endswith(".ipynb"):
                    notebooks.append(os.path.join(directory, filename))
                elif filename.endswith((".yaml", ".yml")):
                    configs.append(os.path.join(directory, filename))
        return found, notebooks, configs

    def files_named(self, select: Callable[[str], object]) -> list[str]:
        """The project's files of any kind whose names ``select`` keeps (requirement files in
        every subtree), walked once per ``select`` and only when asked."""
        found = self._named.get(select)
        if found is None:
            found = self._named[select] = []
            for directory, filenames in _folders(self.root):
                found.extend(os.path.join(directory, name) for name in filenames if select(name))
                if len(found) > MAX_PROJECT_FILES:
                    found.clear()
                    break
        return found

    def scripts_declaring(self, dest: str) -> list[str]:
        """The project's Python files that declare the command-line option stored at ``dest``
        (``parser.add_argument("--use_amp", ...)``, or ``"--use-amp"``)."""
        return self._option_declarations.get(dest, [])

    @cached_property
    def _option_declarations(self) -> dict[str, list[str]]:
        """Every option a Python file of the project declares, by its destination: one pass over
        the files that call ``add_argument``, however many options are asked about."""
        found: dict[str, list[str]] = {}
        for path in self.files:
            text = self._peek(path)
            if b"add_argument(" not in text:
                continue
            for match in _DECLARED_OPTION.finditer(text):
                paths = found.setdefault(match.group(1).decode("ascii", "replace").replace("-", "_"), [])
                if path not in paths:
                    paths.append(path)
        return found

    def texts_matching(self, pattern: "re.Pattern[bytes]", hint: "bytes | tuple[bytes, ...] | None" = None) -> list[str]:
        """The project's Python files and YAML configs whose text has ``pattern`` (once per
        process). ``hint`` is a literal every match contains, or literals one of which every
        match contains: files without it are passed over without running the pattern (a
        pattern that must check each line's start for a ``#`` walks every line of a project; a
        literal is found at memory speed)."""
        found = self._text_matches.get(pattern)
        if found is None:
            hints = (hint,) if isinstance(hint, bytes) else hint
            texts = ((path, self._peek(path)) for path in (*self.files, *self._walk[2]))
            found = self._text_matches[pattern] = [
                path for path, text in texts
                if (hints is None or any(h in text for h in hints)) and pattern.search(text)
            ]
        return found

    @cached_property
    def _documents(self) -> list[str]:
        """The shell scripts, documents and JSON configs that may say how the project is run:
        those of a config's size (a data set's JSON annotations are not read). They are not in
        :attr:`stamp`, which a warm run reads for every file: a cached answer that a README
        edited since would change keeps a fix as advice until the code changes."""
        found = []
        for path in self.files_named(_names_document):
            try:
                if os.stat(path).st_size <= _DOCUMENT_BYTES:
                    found.append(path)
            except OSError:
                continue
        return found

    def value_written(self, value: str) -> int:
        """How often the project writes the string ``value`` where code, a config, a script or
        its documentation could choose it: quoted in its Python files and notebooks (prose
        strings, imports and commented-out lines aside), as a word in its configs, shell
        scripts and documents (``--method sinkhorn_stabilized`` in a README)."""
        found = self._values_written.get(value)
        if found is None:
            word = re.escape(value.encode())
            quoted = re.compile(rb"([\"'])" + word + rb"\1")
            bare = re.compile(rb"(?<![\w.-])" + word + rb"(?![\w-])")
            notebooks = set(self._walk[1])
            found = sum(
                len(quoted.findall(self._peek(path) if path in notebooks else self._used_text(path)))
                for path in self._files_holding(value.encode())
            )
            found += sum(len(bare.findall(_read_regular(path))) for path in (*self._walk[2], *self._documents))
            self._values_written[value] = found
        return found

    def launch_commands(self, path: str) -> list[tuple[str, str]]:
        """The command lines the project's shell scripts and documents run ``path`` with
        (``python train_ranker.py --per_device_train_batch_size 1 ...``, ``torchrun ... \\``
        continued over lines), as (the file holding it, the command's text after the script's
        name). A script named by another script of the same name elsewhere in the tree counts:
        which one a command runs is not told."""
        name = os.path.basename(path)
        found = self._launches.get(name)
        if found is None:
            found = []
            spelled = re.compile(rb"(?<![\w.-])" + re.escape(name.encode()) + rb"(?![\w.-])")
            for document in self._documents:
                text = _read_regular(document)
                if name.encode() not in text:
                    continue
                for match in spelled.finditer(text):
                    end = match.end()
                    while True:  # the command goes on over lines ending in a backslash
                        newline = text.find(b"\n", end)
                        if newline < 0:
                            newline = len(text)
                        if text[end:newline].rstrip().endswith(b"\\"):
                            end = newline + 1
                            continue
                        break
                    line_start = text.rfind(b"\n", 0, match.start()) + 1
                    if re.match(rb"\s*#", text[line_start : match.start()]):
                        continue  # a commented-out command
                    found.append((document, text[match.end() : newline].decode("utf-8", "replace")))
            self._launches[name] = found
        return found

    def configs_matching(self, pattern: "re.Pattern[bytes]") -> list[str]:
        """The project's YAML configs whose text has ``pattern``."""
        return [path for path in self._walk[2] if pattern.search(_read_regular(path))]

    def importers_around(self, path: str, depth: int = 3) -> list[str]:
        """The files that import ``path``, those that import them, and so on ``depth`` levels up
        (``train.py`` imports ``models/__init__.py``, which imports ``models/lit_model.py``)."""
        found: list[str] = []
        level = [path]
        for _ in range(depth):
            level = [i for p in level for i in self.importers.get(p, []) if i != path and i not in found]
            found.extend(dict.fromkeys(level))
        return found

    @property
    def notebooks(self) -> list[str]:
        """The project's notebooks."""
        return self._walk[1]

    @property
    def files(self) -> list[str]:
        return self._walk[0]

    @cached_property
    def _file_set(self) -> set[str]:
        return set(self.files)

    @cached_property
    def _package_bases(self) -> dict[str, list[str]]:
        """Where each top-level package of the project lives (``pkg/llms_from_scratch/__init__.py``
        makes ``llms_from_scratch`` importable from ``pkg/``, as an installed project would)."""
        bases: dict[str, list[str]] = {}
        for path in self.files:
            if os.path.basename(path) != "__init__.py":
                continue
            package = os.path.dirname(path)
            parent = os.path.dirname(package)
            if os.path.join(parent, "__init__.py") not in self._file_set:
                bases.setdefault(os.path.basename(package), []).append(parent)
        return bases

    @cached_property
    def _path_names(self) -> frozenset[str]:
        """Every folder name and module name in the project's paths: an absolute import can
        only resolve to a project file if its first name is one of them."""
        names: set[str] = set()
        for path in self.files:
            relative = os.path.relpath(path, self.root)
            *folders, filename = relative.split(os.sep)
            names.update(folders)
            names.add(filename[:-3] if filename.endswith(".py") else filename)
        return frozenset(names)

    def module_path(self, module: str, level: int, importer: str) -> str | None:
        """The file of ``module`` as ``importer`` imports it (``level`` leading dots), or None when it
        is not a module of the project (a library)."""
        key = (module, level, os.path.dirname(importer), self._folders_added_to_path(importer))
        try:
            return self._module_paths[key]
        except KeyError:
            found = self._module_paths[key] = self._module_path(module, level, importer)
            return found

    def _module_path(self, module: str, level: int, importer: str) -> str | None:
        parts = [p for p in module.split(".") if p]
        if level:
            base = os.path.dirname(importer)
            for _ in range(level - 1):
                base = os.path.dirname(base)
            return self._first(os.path.join(base, *parts) if parts else base)
        if not parts or parts[0] not in self._path_names:
            return None  # ``torch``, ``numpy``: no file or folder of the project has that name
        for base in (*self._script_bases(importer), *self._package_bases.get(parts[0], ())):
            found = self._first(os.path.join(base, *parts))
            if found is not None:
                return found
        return None

    def _first(self, stem: str) -> str | None:
        # A package wins over a module of the same name in one folder, as Python's path finder
        # has it (MemFlow's ``inference/`` beside its ``inference.py``).
        for candidate in (os.path.join(stem, "__init__.py"), stem + ".py"):
            if candidate in self._file_set:
                return candidate
        return None

    def _imports_of(self, path: str) -> list[_Import]:
        """The imports in a project file's text (kept per process: they are small)."""
        found = self._import_lists.get(path)
        if found is None:
            data = self._peek(path)
            found = self._import_lists[path] = _notebook_imports(data) if path.endswith(".ipynb") else _parse_imports(data)
        return found


    def imports(self, path: str, top_level: bool = False) -> list[str]:
        """The project files ``path`` imports (read from its text, not run); with ``top_level``,
        only those its top-level imports name (not an import inside a function, under a
        registry's switch)."""
        found = self._imported.get((path, top_level))
        if found is None:
            found = []
            for imported in self._imports_of(path):
                if top_level and not imported.top:
                    continue
                targets = [self.module_path(imported.module, imported.level, path)]
                for name in imported.names:  # ``from pkg import module``
                    dotted = f"{imported.module}.{name}" if imported.module else name
                    targets.append(self.module_path(dotted, imported.level, path))
                found.extend(t for t in targets if t is not None and t != path and t not in found)
            self._imported[(path, top_level)] = found
        return found

    def import_that_fails(self, path: str, imported: bool = False) -> str | None:
        """Why ``path`` raises ``ImportError`` before anything in it runs, or None: a top-level
        import names a module of a project package that the package does not have, nor its
        ``__init__.py`` names (Face_Pytorch's ``eval_megaface.py`` imports ``self_attention``
        from ``backbone``, which has no such module, compiled or not); a relative import names
        a module its regular package lacks; an import names what the project module never
        spells; or a project module it imports fails so itself. Imports under ``try`` or a
        function are not read, nor those of the standard library or of a package the project
        does not hold, nor names of a package whose ``__init__.py`` imports with ``*``. An
        absolute import that could find different files depending on where Python starts is
        not judged. ``imported``: the file is imported by another (not run as a script), so its
        own folder is not where Python looks."""
        key = (path, imported)
        if key not in self._failing_imports:  # asked once per fix of the file
            self._failing_imports[key] = self._find_import_that_fails(path, imported)
        return self._failing_imports[key]

    def _find_import_that_fails(self, path: str, imported_file: bool) -> str | None:
        self._failing_imports[(path, imported_file)] = None  # an import cycle answers "no" where it closes
        for imported in self._imports_of(path):
            if not imported.top:
                continue
            head = imported.module.split(".")[0]
            if imported.level:
                source = self.module_path(imported.module, imported.level, path) if imported.module else None
            elif head in sys.stdlib_module_names or not self._package_on_path(head, path, beside=not imported_file):
                continue  # ``from io import BytesIO`` inside doctr/io/: the standard library's
            else:
                source = self._absolute_module(imported.module, path, imported_file)
                if source is not None and not imported_file and self._resolves_elsewhere_too(imported.module, path, source):
                    continue  # NeuOpt's ``from utils import ...`` in agent/, beside an agent/utils.py, run from the root
            spelled = "." * imported.level + imported.module
            if source is None and imported.level and imported.module and self._relative_module_missing(imported, path):
                # pytorch-asr's deepspeech_ce/train.py: ``from ..utils.dataset import ...``, and asr/models/ has no utils
                return f"`{spelled}`, which its package in the project does not have"
            if source is not None and source != path:
                missing = self._name_missing(source, imported.names) if not source.endswith("__init__.py") else None
                if missing is not None:
                    # hubert's train.py: ``from hubert.model import Hubert, URLS``, and model.py has no URLS
                    return f"`{missing}` from `{spelled}`, which does not define it"
                if self.import_that_fails(source, imported=True) is not None:
                    return f"`{spelled}`, which cannot be imported itself"
            if imported.level:
                # Imported only as a member of its package (relative imports): the package's
                # ``__init__.py`` runs first (pytorch-asr's convnet/model.py under an
                # ``__init__.py`` importing a train.py that cannot be imported).
                package_init = os.path.join(os.path.dirname(path), "__init__.py")
                if package_init != path and package_init in self._file_set and self.import_that_fails(package_init, imported=True) is not None:
                    return f"its package `{os.path.basename(os.path.dirname(path))}`, which cannot be imported"
                continue
            parts = imported.module.split(".")
            package = self._absolute_module(imported.module, path, imported_file)
            if package is not None and package.endswith("__init__.py") and b"*" not in self._peek(package):
                for name in imported.names:  # ``from backbone import cbam, self_attention``
                    if (
                        self._absolute_module(f"{imported.module}.{name}", path, imported_file) is None
                        and not re.search(rb"\b" + re.escape(name.encode()) + rb"\b", self._peek(package))
                        and not self._beside(package, name)
                    ):
                        return f"`{imported.module}.{name}`, which its package in the project does not have"
            if len(parts) < 2 or package is not None:
                continue
            for end in range(2, len(parts) + 1):
                if self._absolute_module(".".join(parts[:end]), path, imported_file) is not None:
                    continue
                package = self._absolute_module(".".join(parts[: end - 1]), path, imported_file)
                if package is not None and package.endswith("__init__.py") and not self._beside(package, parts[end - 1]):
                    return f"`{imported.module}`, which its package in the project does not have"
                break
        return None

    def _absolute_module(self, module: str, importer: str, imported: bool) -> str | None:
        """The project file of an absolute import: as :meth:`module_path` finds it for a script;
        for a module that is imported, only from the project's root, ``src/`` or where the
        project installs the package (its own folder is not on Python's path then)."""
        if not imported:
            return self.module_path(module, 0, importer)
        parts = [p for p in module.split(".") if p]
        if not parts:
            return None
        for base in (self.root, os.path.join(self.root, "src"), *self._package_bases.get(parts[0], ())):
            found = self._first(os.path.join(base, *parts))
            if found is not None:
                return found
        return None

    def in_package(self, path: str) -> bool:
        """Whether ``path`` is a module of a regular package of the project (its folder has an
        ``__init__.py``), not a script beside others."""
        return os.path.join(os.path.dirname(path), "__init__.py") in self._file_set

    def _resolves_elsewhere_too(self, module: str, importer: str, found: str | None) -> bool:
        """Whether the absolute import of ``module`` could find another project file than
        ``found``, depending on the folder Python starts from (the importer's own, when it runs as
        a script; the project's root or ``src/``, when it is imported from a script there)."""
        parts = [p for p in module.split(".") if p]
        return any(
            (other := self._first(os.path.join(base, *parts))) is not None and other != found
            for base in self._script_bases(importer)
        )

    def _script_bases(self, importer: str) -> list[str]:
        """The folders an absolute import of ``importer`` may be found from: its own and each
        above it up to the project's root (the folder a script runs from), then ``src/``."""
        directory = os.path.dirname(importer)
        bases = [directory]
        while directory != self.root and directory.startswith(self.root):
            directory = os.path.dirname(directory)
            bases.append(directory)
        bases.append(os.path.join(self.root, "src"))
        bases.extend(self._folders_added_to_path(importer))
        return bases

    def _folders_added_to_path(self, importer: str) -> tuple[str, ...]:
        """The project folders ``importer`` puts on Python's path with a literal
        (``sys.path.append('../models')`` before ``from densenet import *``: markov_neural_operator's
        scripts, run from their own folder), taken from the importer's folder."""
        found = self._added_to_path.get(importer)
        if found is None:
            text = self._peek(importer) if importer.endswith(".py") else b""
            folders: list[str] = []
            if b"sys.path" in text:
                for match in _SYS_PATH_ADDITION.finditer(text):
                    folder = os.path.normpath(os.path.join(os.path.dirname(importer), match.group(1).decode("utf-8", "replace")))
                    if folder.startswith(self.root) and folder not in folders:
                        folders.append(folder)
            found = self._added_to_path[importer] = tuple(folders)
        return found

    def _relative_module_missing(self, imported: _Import, importer: str) -> bool:
        """Whether the module a relative import names, in a regular package of the project (one
        with its ``__init__.py``), is neither a file of the project nor anything a build may put
        there (:meth:`_beside`)."""
        base = os.path.dirname(importer)
        for _ in range(imported.level - 1):
            base = os.path.dirname(base)
        if not base.startswith(self.root) or os.path.join(base, "__init__.py") not in self._file_set:
            return False  # not a regular package: a few files copied out of one, whose rest is not here
        parts = imported.module.split(".")
        for index, part in enumerate(parts):
            if self._first(os.path.join(base, *parts[: index + 1])) is None:
                return not self._beside(os.path.join(base, *parts[:index], "__init__.py"), part)
        return False

    def _name_missing(self, module: str, names: tuple[str, ...]) -> str | None:
        """The first of ``names`` that the module's text never spells (so it neither defines nor
        imports it), unless the module makes names no text shows (``import *``, ``__getattr__``,
        ``globals()``)."""
        text = self._peek(module)
        if b"*" in text and re.search(rb"import\s*\*", text) or b"__getattr__" in text or b"globals()" in text:
            return None
        for name in names:
            if name != "*" and not re.search(rb"\b" + re.escape(name.encode()) + rb"\b", text):
                return name
        return None

    def _package_on_path(self, name: str, importer: str, beside: bool = True) -> bool:
        """Whether ``name`` is a package of the project where Python looks for it when the
        project runs: beside ``importer`` (a script's folder; not with ``beside=False``, for a
        module that is imported), at the root or in ``src/``, or where the project installs it.
        Not a folder that only shares a library's name deeper in the tree (voxelmorph's
        ``voxelmorph/torch/``; TinyZero's ``verl/models/transformers/``)."""
        bases = [os.path.dirname(importer)] if beside else []
        bases += [self.root, os.path.join(self.root, "src"), *self._package_bases.get(name, ())]
        return any(os.path.join(base, name, "__init__.py") in self._file_set for base in bases)

    def _beside(self, package_init: str, name: str) -> bool:
        """Whether the package of ``package_init`` may have ``name`` without a Python file of
        the project: something of that name in its folder (a folder without ``__init__.py``,
        a compiled extension), sources a build compiles (``.pyx``, ``.cpp``: a setup script
        names the extension), or a setup script that names it (doctr's writes ``version.py``)."""
        folder = os.path.dirname(package_init)
        try:
            entries = os.listdir(folder)
        except OSError:
            return True
        if any(entry == name or entry.startswith(name + ".") or entry.endswith(_BUILT_SOURCES) for entry in entries):
            return True
        setups = [os.path.join(self.root, "setup.py"), os.path.join(os.path.dirname(folder), "setup.py"), os.path.join(folder, "setup.py")]
        return any(name.encode() in _read_regular(setup) for setup in setups if os.path.isfile(setup))

    def imports_relevant(self, path: str) -> bool:
        """Whether ``path`` imports a project module that names torch or a library on it."""
        from advisor.engine import mentions_torch

        return any(self.matches(imported, mentions_torch) for imported in self.imports(path))

    def neighbourhood(self, path: str) -> list[str]:
        """The files that run together with ``path``: itself, what it imports, and each of its
        importers with what that importer imports (``train.py`` builds the data set of
        ``utils.py`` and hands it to the loader of ``trainer.py``). A package's ``__init__.py``
        that imports the file passes it on: its importers run with the file too (ncsn's
        ``main.py`` does ``from runners import *``, whose ``__init__.py`` imports each runner)."""
        found = [path, *self.imports(path)]
        importers = list(self.importers.get(path, []))
        for importer in importers:
            found.extend(p for p in (importer, *self.imports(importer)) if p not in found)
            if os.path.basename(importer) == "__init__.py":
                importers.extend(p for p in self.importers.get(importer, []) if p not in importers and p != path)
        return found

    @cached_property
    def importers(self) -> dict[str, list[str]]:
        """For each project file, the project files that import it."""
        graph: dict[str, list[str]] = {}
        for path in self.files:
            for target in self.imports(path):  # kept: the same files' imports are asked again
                graph.setdefault(target, []).append(path)
        for target, path in self._instantiated():
            if target != path and path not in graph.setdefault(target, []):
                graph[target].append(path)
        return graph

    def _instantiated(self) -> list[tuple[str, str]]:
        """(module, file) pairs where the file builds a class of the module from its dotted name:
        ``instantiate_from_config(config.model)`` with ``target: taming.models.vqgan.VQModel``
        in a YAML config, Hydra's ``_target_``; in a project whose configs name classes, also
        a dotted string of the file (``class_name='training.networks.EDMPrecond'``). The module
        runs where that file runs."""
        named: set[str] = set()
        for config in self._walk[2]:
            named.update(m.group(1).decode() for m in _CONFIG_TARGET.finditer(_read_regular(config)))
        if not named:
            return []  # no config names a class: nothing to scan the Python files for
        instantiators = [path for path in self.texts_matching(_INSTANTIATES) if path.endswith(".py")]
        if not instantiators:
            return []
        anchor = os.path.join(self.root, "__config__.py")
        pairs: list[tuple[str, str]] = []
        for path in instantiators:
            spelled = set(named)
            spelled.update(m.group(1).decode() for m in _DOTTED_STRING.finditer(self.text(path)))
            for dotted in spelled:
                # From the instantiating script's folder up (LightningDiT's ``vavae/main.py`` names
                # ``ldm.models.autoencoder.AutoencoderKL``, a module of ``vavae/ldm``), then the root.
                module = (
                    self.module_path(dotted, 0, path)
                    or self.module_path(dotted.rpartition(".")[0], 0, path)
                    or self.module_path(dotted, 0, anchor)
                    or self.module_path(dotted.rpartition(".")[0], 0, anchor)
                )
                if module is not None:
                    pairs.append((module, path))
        return pairs

    def reached(self, path: str) -> bool | None:
        """Whether running the project runs this module: it is an entry point (a script, a
        notebook's import, a console script), or one imports it, directly or through others.
        None when that cannot be told from the text: no entry point at all (a library), or a
        module that runs imports others by name (``importlib.import_module(cfg.target)``)."""
        path = os.path.abspath(path)
        if path.endswith(".ipynb"):
            return True  # a notebook is run, as a script is
        if path not in self._file_set:
            return None
        found = self._reached
        if found is None:
            return None
        reached, by_name = found
        if path in reached:
            return True
        if not by_name:
            return False
        # What a module imports by name is not in its text, but it is not a copy of the code
        # that a run saved beside its logs (Pointnet2's ``log/<run>/pointnet2_utils.py``).
        if self._in_artifact_folder(path) and all(self._in_artifact_folder(i) for i in self.importers.get(path, [])):
            return False
        if not any(path.startswith(folder) for folder in self._by_name_reach):
            return False  # beyond every by-name importer's package: another subproject's module
        return None

    @cached_property
    def _by_name_reach(self) -> list[str]:
        """The folders whose modules the reached modules that import by name can name: each
        one's package (the topmost folder of ``__init__.py`` files above it), and the top
        folder of each entry point that reaches it (what its run puts on ``sys.path``: VolSDF's
        ``code/training/volsdf_train.py`` reaches ``utils.get_class``, which imports
        ``model.network`` from ``code/``). research-contributions' auto3dseg templates load
        their algorithms by name; DAE's fine-tuning folders, beside them, are reached by their
        own imports or not at all."""
        found = self._reached
        importers = {path for path in (found[0] if found is not None else ()) if self._imports_by_name(path)}
        folders: set[str] = set()
        for importer in importers:
            folder = os.path.dirname(importer)
            while folder != self.root and os.path.isfile(os.path.join(folder, "__init__.py")):
                parent = os.path.dirname(folder)
                if parent == folder or not parent.startswith(self.root):
                    break
                folder = parent
            folders.add(folder)
        budget = 20000  # modules visited: past it, every folder may be reached
        for entry in self._entries:
            seen = self._run_from([entry], budget)
            if seen is None or len(seen) >= budget:
                return [self.root.rstrip(os.sep) + os.sep]
            budget -= len(seen)
            if seen & importers:
                top = os.path.relpath(entry, self.root).split(os.sep)
                folders.add(self.root if len(top) == 1 else os.path.join(self.root, top[0]))
        return sorted(folder.rstrip(os.sep) + os.sep for folder in folders)

    def _in_artifact_folder(self, path: str) -> bool:
        relative = os.path.relpath(os.path.dirname(path), self.root).split(os.sep)
        return any(part.lower() in _ARTIFACT_FOLDERS for part in relative)

    @cached_property
    def _reached(self) -> tuple[frozenset[str], bool] | None:
        """The modules the entry points reach through their imports, and whether one of them
        imports by name; None without entry points."""
        if not self._entries:
            return None
        reached = self._run_from(self._entries)
        assert reached is not None
        return frozenset(reached), any(self._imports_by_name(path) for path in reached)

    @cached_property
    def _entries(self) -> list[str]:
        """The scripts that run (:meth:`_is_entry`) and the modules the project declares as entries."""
        return [path for path in self.files if self._is_entry(path)] + list(self._declared_entry_set)

    def _run_from(self, starts: list[str], budget: int | None = None) -> set[str] | None:
        """The modules running ``starts`` runs: what they import, directly or through others,
        and the packages around them; None past ``budget`` modules."""
        reached: set[str] = set()
        todo = list(starts)
        while todo:
            path = todo.pop()
            if path in reached:
                continue
            if budget is not None and len(reached) >= budget:
                return None
            reached.add(path)
            todo.extend(self.imports(path))
            todo.extend(self._packages_around(path))
        return reached

    def called(self, name: str, first: str | None = None, kind: str = NAME) -> bool:
        """Whether the project's code names ``name`` beyond its ``def``s (a use), in any Python
        file or notebook: a module-level function or class named only where it is defined is
        code nothing runs (ZoeDepth's unused loss, Latte's spare ``timestep_embedding``), and so
        is one whose copies in other modules are not called either. ``first``, the defining
        module, is where a use is likeliest: it is read alone first. ``kind`` says what the name
        is, and so which mentions cannot use it (:meth:`_non_uses`)."""
        key = name.encode()
        if self._reached is None:
            # A library (no entry point): its re-exports are its interface, and count.
            if first is not None and first in self._file_set and _count_of(key, self._peek(first)) > 1:
                return True
            uses = self._identifier_count(key) - self._definition_count(key)
            return uses - self._non_uses_beside(key, first, kind) > 0
        # With entry points, a name that only imports, ``__all__`` or comments repeat is not
        # called (IDvs.MoRec's ``eval_model_special``, re-exported by its package and run by nothing).
        if first is None or first not in self._file_set:
            uses = self._used_count(key) - self._definition_count(key)
            return uses - self._non_uses_beside(key, first, kind) > 0
        own = self._used_identifiers_of(first).get(key, 0)
        if kind == MODULE_LEVEL:
            own -= self._non_uses(first, key, kind)
        return own > 1 or own + self.mentions_outside(name, first, kind) > 1

    def mentions_outside(self, name: str, path: str, kind: str = NAME) -> int:
        """How often the project's code outside the file ``path`` names ``name`` where it may
        use it: in the files that import it, directly or through others, where what runs is
        known (a project with entry points, none importing by name); else in every file. A
        ``def`` or ``class`` of that name elsewhere defines a namesake and is not counted, nor
        what cannot use a name of this ``kind`` (:meth:`_non_uses`). A method is looked for in
        every file: its objects travel (nice-slam's ``Mapper`` calls ``self.renderer.regulation``
        on a ``Renderer`` it is handed, without importing ``Renderer.py``)."""
        key = name.encode()
        if kind != METHOD and self._reached is not None and not self._reached[1] and path in self._reached[0]:
            found = _count_of(key, self._entry_declarations)
            return found + sum(
                self._used_identifiers_of(p).get(key, 0) - self._definitions_of(p).get(key, 0) - self._non_uses(p, key, kind)
                for p in self._importer_closure(path)
            )
        if kind == METHOD:
            return self._method_uses_beside(key, path)
        used = self._used_count(key) - self._used_identifiers_of(path).get(key, 0)
        used -= self._non_uses_beside(key, path, kind)
        return used - (self._definition_count(key) - self._definitions_of(path).get(key, 0))

    def _method_uses_beside(self, key: bytes, path: str) -> int:
        """:meth:`mentions_outside` for a method: what the general count gives, file by file,
        reading only the files whose text spells ``.key`` or a one-word string ``"key"``, the
        only mentions that can use a method (a fixture corpus's thousand files that name
        ``step`` in prose or as a local need not have their identifiers counted)."""
        spelled = re.compile(rb"\.[ \t]*" + re.escape(key) + rb"(?![A-Za-z0-9_])|[\"']" + re.escape(key) + rb"[\"']")
        total = self._declared_identifiers.get(key, 0)
        for other in self._files_holding(key):
            if other == path or not spelled.search(self._peek(other)):
                continue
            named = self._used_identifiers_of(other).get(key, 0) - self._definitions_of(other).get(key, 0)
            total += named - max(0, named - self._attributes_of(other).get(key, 0) - self._word_strings_of(other).get(key, 0))
        return total

    def _non_uses(self, path: str, key: bytes, kind: str) -> int:
        """How many of the file's mentions of ``key`` cannot use a name of this ``kind``: for a
        module-level function or class, ``self.key`` / ``cls.key`` (a method's namesake:
        deep-cross-modal-hashing's trainers call their own ``self.valid()``, not ``valid.py``'s
        function); for a method, a bare ``key`` (a function's namesake), which only an
        attribute (``obj.key``) or a one-word string (``getattr(obj, "key")``) can be."""
        if kind == MODULE_LEVEL:
            return self._self_attributes_of(path).get(key, 0)
        if kind == METHOD:
            named = self._used_identifiers_of(path).get(key, 0) - self._definitions_of(path).get(key, 0)
            return max(0, named - self._attributes_of(path).get(key, 0) - self._word_strings_of(path).get(key, 0))
        return 0

    def _non_uses_beside(self, key: bytes, path: str | None, kind: str) -> int:
        """:meth:`_non_uses` summed over every file but ``path``, where a use is read whole."""
        if kind == NAME:
            return 0
        return sum(self._non_uses(p, key, kind) for p in self._files_naming(key) if p != path)

    def _files_naming(self, key: bytes) -> list[str]:
        """The files and notebooks that name ``key`` where they may use it."""
        return [p for p in self._files_holding(key) if self._used_identifiers_of(p).get(key, 0)]

    def _files_holding(self, text: bytes) -> list[str]:
        """The Python files and notebooks whose text holds ``text`` at all, found once per text:
        the counts of a name asked about read only these (reading every file's used text to
        count every identifier once cost a second of a 400-file project's run)."""
        found = self._holding.get(text)
        if found is None:
            found = self._holding[text] = [p for p in (*self.files, *self._walk[1]) if text in self._peek(p)]
        return found

    def _definitions_of(self, path: str) -> "collections.Counter[bytes]":
        found = self._file_definitions.get(path)
        if found is None:
            found = self._file_definitions[path] = collections.Counter(
                _DEFINITION.findall(self._used_text(path))
            )
        return found

    def _self_attributes_of(self, path: str) -> "collections.Counter[bytes]":
        return self._counted(path, _SELF_ATTRIBUTE)

    def _attributes_of(self, path: str) -> "collections.Counter[bytes]":
        return self._counted(path, _ATTRIBUTE)

    def _word_strings_of(self, path: str) -> "collections.Counter[bytes]":
        return self._counted(path, _WORD_STRING)

    def _counted(self, path: str, pattern: "re.Pattern[bytes]") -> "collections.Counter[bytes]":
        """What ``pattern``'s group finds in the file's text where it may use names, counted."""
        found = self._file_counts.get((path, pattern))
        if found is None:
            found = self._file_counts[(path, pattern)] = collections.Counter(
                pattern.findall(self._used_text(path))
            )
        return found

    def _definition_count(self, key: bytes) -> int:
        """How many ``def`` / ``class`` statements of the project's files and notebooks define
        ``key``."""
        found = self._definition_counts.get(key)
        if found is None:
            found = self._definition_counts[key] = sum(self._definitions_of(path).get(key, 0) for path in self._files_holding(key))
        return found

    def _importer_closure(self, path: str) -> list[str]:
        """Every project file and notebook that imports ``path``, directly or through others."""
        found = self._closures.get(path)
        if found is None:
            seen = {path}
            todo = [path]
            while todo:
                for importer in self.importers.get(todo.pop(), []):
                    if importer not in seen:
                        seen.add(importer)
                        todo.append(importer)
            notebooks = [n for n in self._walk[1] if any(i in seen for i in self.imports(n))]
            found = self._closures[path] = [p for p in seen if p != path] + notebooks
        return found

    def _used_identifiers_of(self, path: str) -> "collections.Counter[bytes]":
        found = self._file_identifiers.get(path)
        if found is None:
            found = self._file_identifiers[path] = collections.Counter(
                _IDENTIFIER.findall(self._used_text(path))
            )
        return found

    @staticmethod
    def mentions_in(name: str, code: str) -> int:
        """How often ``code`` names ``name`` where it may use it (not in an import, an
        ``__all__`` list or a commented-out line)."""
        return _count_of(name.encode(), _used_code(code))

    def _identifier_count(self, key: bytes) -> int:
        """How often the project's files, notebooks and entry declarations name ``key`` at all
        (imports and comments included: a library's re-exports are its interface)."""
        found = self._identifier_counts.get(key)
        if found is None:
            found = self._identifier_counts[key] = self._declared_identifiers.get(key, 0) + sum(
                _count_of(key, self._peek(path)) for path in self._files_holding(key)
            )
        return found

    @cached_property
    def _declared_identifiers(self) -> "collections.Counter[bytes]":
        return collections.Counter(_IDENTIFIER.findall(self._entry_declarations))

    def _used_count(self, key: bytes) -> int:
        """How often the project's files and notebooks, and its entry declarations, name the
        identifier ``key`` where they may use it."""
        found = self._used_counts.get(key)
        if found is None:
            found = self._used_counts[key] = self._declared_identifiers.get(key, 0) + sum(
                self._used_identifiers_of(path).get(key, 0) for path in self._files_holding(key)
            )
        return found

    def _used_text(self, path: str) -> bytes:
        """The file's text where it may use names (:meth:`_without_non_uses`), made once."""
        found = self._used_texts.get(path)
        if found is None:
            found = self._used_texts[path] = self._without_non_uses(path, self._peek(path))
        return found

    def _without_non_uses(self, path: str, text: bytes) -> bytes:
        keep = os.path.basename(path) == "__init__.py" and self._installable
        text = _without_non_uses(text, keep_imports=keep, strings=not path.endswith(".ipynb"))  # a notebook's code is JSON strings
        if self._reached is not None and not self._reached[1] and not self.may_build_by_name(path):
            # A class's own ``super(Cls, self)`` builds nothing. Where an entry point imports by
            # name, or a file that looks classes up by name reaches this module (RecBole's and
            # mammoth's registries put class names together at run time), it stays a use: no
            # other text may name the class. A lookup elsewhere in the project (TransMorph's
            # MIDIR ``getattr``) builds nothing of this module's.
            text = _OWN_SUPER.sub(b"super()", text)
        return text

    @cached_property
    def _builds_by_name(self) -> bool:
        """A file of the project looks a class up by a name made at run time: DeepCore's
        ``methods.__dict__[args.selection](...)``, ``globals()[name]``, or ``getattr(module,
        name)`` on a module the file imports."""
        return bool(self._looking_up_by_name)

    @cached_property
    def _looking_up_by_name(self) -> list[str]:
        """The files that look classes up by a name made at run time (:meth:`_builds_by_name`)."""
        found = []
        for path in self.texts_matching(_LOOKS_UP_BY_NAME, (b"__dict__[", b"globals()", b"vars(", b"getattr(")):
            text = self._peek(path)
            if _LOOKUP_TABLE.search(text):
                found.append(path)
                continue
            imported = {
                (m.group(3) or m.group(2) or m.group(1).split(b".")[-1]) for m in _IMPORTED_MODULE.finditer(text)
            }
            if any(m.group(1) in imported for m in _GETATTR_OF_NAME.finditer(text)):
                found.append(path)
        return found

    def may_build_by_name(self, path: str) -> bool:
        """Whether a class of the module ``path`` may be built by a run-time name: a file that
        looks classes up so (:meth:`_builds_by_name`) is the module, or imports it, directly or
        through others (DeepCore's ``main.py`` reaches ``gradmatch.py`` through ``methods``'s
        ``__init__``). A table of names sees what its file holds, or the modules it imports; the
        vendored ultralytics' ``globals()[m]`` cannot build Medical-SAM-Adapter's TinyViT."""
        lookers = self._looking_up_by_name
        if not lookers:
            return False
        path = os.path.abspath(path)
        reach = {path, *self._importer_closure(path)}
        return any(looker in reach for looker in lookers)

    @cached_property
    def _installable(self) -> bool:
        """Whether the project is a package others install (``setup.py``, a ``[project]`` table):
        what its packages re-export is used by code advisor cannot see."""
        if os.path.exists(os.path.join(self.root, "setup.py")):
            return True
        return re.search(rb"^\[(project|tool\.poetry)\]", _read_regular(os.path.join(self.root, "pyproject.toml")), re.M) is not None

    @cached_property
    def _entry_declarations(self) -> bytes:
        """The text besides the code that names what runs: a console script's function
        (``zoe-train = "pkg.trainer:main"``), Cog's predictor class, the classes configs build
        (``target: main.DataModuleFromConfig``), the classes frameworks load by name."""
        texts = [_read_regular(os.path.join(self.root, name)) for name in ("setup.cfg", "pyproject.toml", "cog.yaml")]
        for config in self._walk[2]:
            texts.extend(m.group(1) for m in _CONFIG_TARGET.finditer(_read_regular(config)))
        texts.extend(name.encode() for name in sorted(CALLED_BY_FRAMEWORKS))
        return b"\n".join(texts)

    @cached_property
    def stamp(self) -> str:
        """What the project's files are now (names, sizes, modification times), from ``stat``
        alone: an unchanged stamp means the answers about what runs are unchanged too."""
        import hashlib

        digest = hashlib.blake2b(digest_size=16)
        names = [*self.files, *self._walk[1], *self._walk[2]]
        names += [os.path.join(self.root, n) for n in ("pyproject.toml", "setup.py", "setup.cfg", "cog.yaml")]
        for path in names:
            try:
                info = os.stat(path)
            except OSError:
                continue
            digest.update(f"{path}\0{info.st_mtime_ns}\0{info.st_size}\n".encode("utf-8", "surrogateescape"))
        return digest.hexdigest()

    def _is_entry(self, path: str) -> bool:
        """The module runs something when run (read from its text)."""
        if os.path.basename(path) in _ENTRY_FILES:
            return True
        data = self._peek(path)
        if b"__main__" in data:
            return True
        text = _lines(data)
        return any(not _in_triple_quotes(text, match.start()) for match in _ENTRY_TEXT.finditer(text))

    def imports_by_name(self, path: str) -> bool:
        """Whether the module imports others by a name computed at run time (``importlib.import_module``)."""
        return self._imports_by_name(path)

    def is_test_code(self, path: str) -> bool:
        """Whether the file is test code as ``check``'s default exclusions name it (a ``tests``
        folder, ``test_*.py``, ``conftest.py``): its text quotes code, it does not run it."""
        found = self._test_code.get(path)
        if found is None:  # asked of the same few files by every file of the project
            from fnmatch import fnmatch

            from advisor.config import DEFAULT_EXCLUDE

            parts = os.path.relpath(path, self.root).split(os.sep)
            found = self._test_code[path] = any(fnmatch(part, pattern) for part in parts for pattern in DEFAULT_EXCLUDE)
        return found

    def _imports_by_name(self, path: str) -> bool:
        # Kept per file: every file of a project asks it of the files that set TF32.
        found = self._dynamic_importers.get(path)
        if found is None:
            data = self._peek(path)
            found = self._dynamic_importers[path] = (
                any(word in data for word in _DYNAMIC_IMPORT_WORDS) and _DYNAMIC_IMPORT.search(data) is not None
            )
        return found

    def _packages_around(self, path: str) -> list[str]:
        """The ``__init__.py`` files Python runs before the module: its package's and those above."""
        found = []
        directory = os.path.dirname(path)
        while directory.startswith(self.root) and directory != self.root:
            init = os.path.join(directory, "__init__.py")
            if init not in self._file_set:
                break
            if init != path:
                found.append(init)
            directory = os.path.dirname(directory)
        return found

    def declared_entry(self, path: str) -> bool:
        """Whether a console script, Cog or a notebook names the module: what of it runs is
        named outside the Python text."""
        return os.path.abspath(path) in self._declared_entry_set

    @cached_property
    def _declared_entry_set(self) -> frozenset[str]:
        return frozenset(self._declared_entries())

    def _declared_entries(self) -> list[str]:
        """Modules a console script names (``advisor = "advisor.cli:main"`` in ``pyproject.toml``)
        and modules the project's notebooks import."""
        found: list[str] = []
        importer = os.path.join(self.root, "setup.py")
        for name in ("setup.py", "setup.cfg", "pyproject.toml"):
            data = _read_regular(os.path.join(self.root, name))
            for match in _CONSOLE_SCRIPT.finditer(data):
                target = self.module_path(match.group(1).decode(), 0, importer)
                if target is not None:
                    found.append(target)
        for match in _COG_PREDICTOR.finditer(_read_regular(os.path.join(self.root, "cog.yaml"))):
            target = os.path.normpath(os.path.join(self.root, match.group(1).decode()))
            if target in self._file_set:
                found.append(target)
        for notebook in self._walk[1]:
            found.extend(self.imports(notebook))
        return found

    def _summary(self, path: str) -> tuple[frozenset[str], list[tuple[str, int, tuple[str, ...]]]]:
        """From the module's text: the names it defines at top level, and its ``from`` imports
        (module, level, names; ``("*",)`` for a star import)."""
        found = self._summaries.get(path)
        if found is None:
            text = self.text(path)
            defined = frozenset((a or b).decode() for a, b in _TOP_LEVEL_NAME.findall(_lines(text)))
            imports = []
            for match in _IMPORT_LINE.finditer(_lines(text)):
                spec = match.group("from")
                if spec is None:
                    continue
                spec_text = spec.decode(errors="replace")
                names = match.group("names").decode(errors="replace")
                level = len(spec_text) - len(spec_text.lstrip("."))
                listed = ("*",) if names.strip().startswith("*") else tuple(_imported_as(names))
                imports.append((spec_text.lstrip("."), level, listed))
            found = self._summaries[path] = (defined, imports)
        return found

    def defining_path(self, path: str, name: str, depth: int = 0) -> str | None:
        """The project module that defines ``name`` as module ``path`` exports it, following
        re-exports by their text (``from .resnet import ResNet18``, ``from .models import *``);
        None when that cannot be told."""
        key = (path, name)
        if key in self._definers:
            return self._definers[key]
        found = None
        if depth <= 4:
            defined, imports = self._summary(path)
            if name in defined:
                found = path
            else:
                for module, level, names in imports:
                    if name in names or names == ("*",):
                        inner = self.module_path(module, level, path)
                        found = self.defining_path(inner, name, depth + 1) if inner else None
                        if found is not None or name in names:
                            break
        self._definers[key] = found
        return found

    def _peek(self, path: str) -> bytes:
        """The file's bytes, kept while the project's kept texts stay under a budget: every new
        question of :meth:`texts_matching` scans every file again (about eighty per check of
        a large project), and a training project's files fit; a vendored library's do not."""
        found = self._texts.get(path)
        if found is None:
            found = _read_regular(path)
            if self._kept_text_bytes + len(found) <= _KEPT_TEXT_BYTES:
                self._texts[path] = found
                self._kept_text_bytes += len(found)
        return found

    def text(self, path: str) -> bytes:
        """The file's bytes (once per process)."""
        found = self._texts.get(path)
        if found is None:
            found = _read_regular(path)
            self._texts[path] = found
        return found

    def matches(self, path: str, test: Callable[[bytes], bool]) -> bool:
        """``test`` of the file's text, once per process: a library module's importers are
        asked about by each module it imports, and their texts can be large."""
        key = (path, test)
        found = self._matches.get(key)
        if found is None:
            found = self._matches[key] = test(self.text(path))
        return found

    def context(self, path: str) -> "FileContext | None":
        """The parsed file (once per process while it is unchanged), or None when it cannot be
        analyzed or is larger than a training project's module (``_SIBLING_BYTES``)."""
        try:
            stat = os.stat(path)
        except OSError:
            return None
        if stat.st_size > _SIBLING_BYTES:
            return None  # a library's giant module (torch/nn/functional.py), not a training project's
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._contexts.get(path)
        if cached is not None and cached[0] == key:
            self._contexts.move_to_end(path)
            return cached[1]
        ctx = None
        try:
            if not stat_module.S_ISREG(stat.st_mode):
                raise OSError("not a regular file")
            data = self.text(path) if path in self._texts else _read_regular(path)
            ctx = self._parse(path, data, self.target)
        except Exception:  # a sibling that cannot be read or parsed answers nothing
            ctx = None
        if ctx is not None:
            ctx.project = ProjectView(self, ctx)
        self.keep(path, key, ctx)
        return ctx

    def keep(self, path: str, key: tuple[int, int], ctx: "FileContext | None") -> None:
        old = self._contexts.get(path)
        if old is not None and old[1] is not None:
            self._kept_bytes -= len(old[1].source)
        self._contexts[path] = (key, ctx)
        self._contexts.move_to_end(path)
        self._kept_bytes += len(ctx.source) if ctx is not None else 0
        # Bounded by count and by size: every kept tree is walked by each full garbage collection.
        while len(self._contexts) > 1 and (len(self._contexts) > _CONTEXTS_KEPT or self._kept_bytes > _BYTES_KEPT):
            _, (_, dropped) = self._contexts.popitem(last=False)
            if dropped is not None:
                self._kept_bytes -= len(dropped.source)
                dropped.release_caches()  # so that it is freed when the last holder lets go

    def keeps(self, ctx: "FileContext") -> bool:
        """Whether ``ctx`` is among the contexts kept for the project's other files."""
        kept = self._contexts.get(os.path.abspath(ctx.path))
        return kept is not None and kept[1] is ctx

    def cached(self, path: str, data_size: int) -> "FileContext | None":
        """The context already parsed for ``path`` when the file on disk is still what was parsed."""
        cached = self._contexts.get(path)
        if cached is None:
            return None
        try:
            stat = os.stat(path)
        except OSError:
            return None
        if cached[0] == (stat.st_mtime_ns, stat.st_size) and stat.st_size == data_size:
            return cached[1]
        return None


class ProjectView:
    """The project as one file sees it; records every other file it consults."""

    def __init__(self, project: Project, ctx: "FileContext") -> None:
        self.project = project
        # Weak: the context holds its view, and a cycle would keep both for the cycle collector.
        self._ctx = weakref.ref(ctx) if not isinstance(ctx, _PathOnly) else (lambda: ctx)
        self.path = os.path.abspath(ctx.path)
        self.consulted: set[str] = set()
        self.asked_importers = False
        self.asked_reached = False
        self.asked_texts = False  # asked what any project file's text says (the cache then asks the stamp)
        self.asked_called: dict[str, bool] = {}
        self.asked_mentions: dict[str, int] = {}
        self._bound: dict[tuple, tuple["FileContext", "Binding"] | None] = {}

    @property
    def ctx(self) -> "FileContext":
        ctx = self._ctx()
        assert ctx is not None, "a project view outlived its file's context"
        return ctx  # type: ignore[return-value]

    def _context(self, path: str) -> "FileContext | None":
        self.consulted.add(path)
        return self.project.context(path)

    def context_of(self, path: str) -> "FileContext | None":
        """The parsed context of another file of the project (once per process), which joins
        this file's dependencies."""
        return self._context(path)

    def _defining_context(self, path: str, name: str, needle: "re.Pattern[bytes] | None") -> "FileContext | None":
        """The module at ``path`` (which holds or re-exports ``name``), unless the module that
        defines ``name`` (found from the modules' text) lacks ``needle`` (a training function
        without ``backward(``, a model class without ``Module``): then no answer could come
        from it, and nothing is parsed."""
        if needle is not None:
            defining = self.project.defining_path(path, name)
            if defining is not None and not needle.search(self.project.text(defining)):
                self.consulted.add(defining)
                return None
        return self._context(path)

    def _module_of(self, node: cst.Import | cst.ImportFrom) -> tuple[str, int] | None:
        if isinstance(node, cst.ImportFrom):
            module = dotted_name(node.module) if node.module is not None else ""
            return (module or "", len(node.relative))
        return None

    def definition(self, expr: cst.BaseExpression) -> tuple["FileContext", cst.BaseExpression | None] | None:
        """The module-level definition a name or ``module.name`` of the file stands for, in the
        project module it is imported from: the other file's context and the assigned value
        (None for a class or function). None when it is not imported from the project."""
        found = self.binding(expr)
        if found is None:
            return None
        other, binding = found
        return other, binding.value

    @cached_property
    def _imported_names(self) -> frozenset[str]:
        """Local names the file binds by an import (the only ones that can lead to a sibling)."""
        names: set[str] = set()
        for (_, name), bindings in self.ctx.bindings.items():
            if any(isinstance(b.node, (cst.Import, cst.ImportFrom)) for b in bindings):
                names.add(name)
        return frozenset(names)

    @cached_property
    def _star_imports(self) -> bool:
        return any(isinstance(node.names, cst.ImportStar) for node in self.ctx.nodes(cst.ImportFrom))

    def binding(
        self, expr: cst.BaseExpression, needle: "re.Pattern[bytes] | None" = None
    ) -> tuple["FileContext", "Binding"] | None:
        """Like :meth:`definition`, with the binding itself (``binding.node`` is the ``def`` /
        ``class`` / assignment in the other file). With ``needle``, a module defining the name
        whose text does not match it is taken as not giving an answer, without parsing it."""
        ctx = self.ctx
        head = expr
        while isinstance(head, cst.Attribute):
            head = head.value
        if not isinstance(head, cst.Name) or (head.value not in self._imported_names and not self._star_imports):
            return None
        if isinstance(expr, cst.Name):
            bindings = ctx.lookup(expr.value, expr)
            if not bindings:
                return self._from_star_imports(expr.value, needle)
            if len(bindings) != 1 or not isinstance(bindings[0].node, cst.ImportFrom):
                return None
            key = (id(bindings[0].node), expr.value, needle)
            if key not in self._bound:
                self._bound[key] = self._imported_name(bindings[0].node, expr.value, 0, needle)
            return self._bound[key]
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            bindings = ctx.lookup(expr.value.value, expr.value)
            if len(bindings) != 1 or not isinstance(bindings[0].node, (cst.Import, cst.ImportFrom)):
                return None
            # The answer depends on the import statement, the attribute and the question only.
            key = (id(bindings[0].node), f"{expr.value.value}.{expr.attr.value}", needle)
            if key not in self._bound:
                self._bound[key] = self._module_attribute(bindings[0].node, expr.value.value, expr.attr.value, needle)
            return self._bound[key]
        return None

    def _module_attribute(
        self, node: cst.Import | cst.ImportFrom, local: str, attribute: str, needle: "re.Pattern[bytes] | None"
    ) -> tuple["FileContext", "Binding"] | None:
        module = self._module_bound(node, local)
        if module is None:
            return None
        other = self._defining_context(module, attribute, needle)
        return None if other is None else _lookup_in(self, other, attribute, 0, needle)

    def _module_bound(self, node: cst.Import | cst.ImportFrom, local: str) -> str | None:
        """The project file a local name is bound to as a module (``import config``, ``from . import utils``)."""
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted_name(alias.name) or ""
                bound = _bound_name(alias) or full.split(".")[0]
                if bound == local:
                    return self.project.module_path(full if alias.asname is not None else full.split(".")[0], 0, self.path)
            return None
        spec = self._module_of(node)
        if spec is None or isinstance(node.names, cst.ImportStar):
            return None
        module, level = spec
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            if (_bound_name(alias) or name) == local:
                return self.project.module_path(f"{module}.{name}" if module else name, level, self.path)
        return None

    def _imported_name(
        self, node: cst.ImportFrom, local: str, depth: int, needle: "re.Pattern[bytes] | None"
    ) -> tuple["FileContext", "Binding"] | None:
        spec = self._module_of(node)
        if spec is None or isinstance(node.names, cst.ImportStar):
            return None
        module, level = spec
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            if (_bound_name(alias) or name) != local:
                continue
            path = self.project.module_path(module, level, self.path)
            if path is None:
                return None
            return self._resolved(path, name, depth, needle)
        return None

    def _resolved(
        self, path: str, name: str, depth: int, needle: "re.Pattern[bytes] | None"
    ) -> tuple["FileContext", "Binding"] | None:
        """``name`` as module ``path`` exports it; the same for every file of the project, so it
        is resolved once per process, with the files it took."""
        key = (path, name, needle.pattern if needle is not None else None)
        cached = self.project._resolutions.get(key)
        if cached is None:
            before = set(self.consulted)
            other = self._defining_context(path, name, needle)
            found = None if other is None else _lookup_in(self, other, name, depth, needle)
            cached = self.project._resolutions[key] = (found, frozenset(self.consulted - before))
        self.consulted.update(cached[1])
        return cached[0]

    def _from_star_imports(self, name: str, needle: "re.Pattern[bytes] | None") -> tuple["FileContext", "Binding"] | None:
        for node in self.ctx.nodes(cst.ImportFrom):
            if not isinstance(node.names, cst.ImportStar) or self.ctx.scope_of.get(node) is not self.ctx.module:
                continue
            spec = self._module_of(node)
            path = self.project.module_path(*spec, self.path) if spec else None
            other = self._defining_context(path, name, needle) if path else None
            if other is not None:
                found = _lookup_in(self, other, name, 1, needle)
                if found is not None:
                    return found
        return None

    def importer_gpu(self) -> "Answer | None":
        """Yes when a project file that imports this one trains on a GPU (a module that says
        nothing about devices runs where its importer puts it); None when none does."""
        from advisor.facts import Answer, Tri

        project = self.project
        self.asked_importers = True
        if project.importer_depth >= _IMPORTER_DEPTH or self.path in project._in_progress:
            return None
        importers = project.importers.get(self.path, [])
        if not importers:
            return None
        project._in_progress.add(self.path)
        project.importer_depth += 1
        # Scripts first: they decide. A library module imported from dozens of places is asked
        # of its first few importers only (the verdict of a training project's module comes from
        # one or two scripts).
        ordered = sorted(importers, key=lambda path: not project.matches(path, _runs))
        try:
            for path in ordered[:_IMPORTERS_ASKED]:
                if self._runs_on_gpu(path):
                    relative = os.path.relpath(path, os.path.dirname(self.path))
                    return Answer(Tri.YES, None, f"imported by `{relative}`, which trains on a GPU")
        finally:
            project.importer_depth -= 1
            project._in_progress.discard(self.path)
        return None

    def _runs_on_gpu(self, path: str) -> bool:
        """An importer's GPU verdict, kept per process while the file is unchanged (contexts are
        evicted, verdicts are small). A file whose text names no device, framework or rank says
        nothing about devices: its verdict is its own importers', found without parsing it."""
        project = self.project
        self.consulted.add(path)
        key = _file_key(path)
        cached = project._gpu_verdicts.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        verdict = False
        if project.matches(path, _names_devices) and (project.matches(path, _runs) or project.matches(path, _places_on_cuda_text)):
            other = self._context(path)
            # A script, or a module that puts its work on CUDA itself (``self.model.cuda()``),
            # decides where the modules it imports run; a library module's mere mention of CUDA
            # (``torch.cuda.is_available()`` in a utility) does not.
            devices = other.facts.devices if other is not None and other.project is not None else None
            verdict = devices is not None and devices.gpu.yes and (devices.runs or _placed_on_cuda(devices))
        if not verdict:
            other_view = ProjectView(project, _PathOnly(path))  # type: ignore[arg-type]
            verdict = other_view.importer_gpu() is not None
            self.consulted |= other_view.consulted
        if verdict or project.importer_depth <= 1:  # a "no" found deeper may be cut short by the depth limit
            project._gpu_verdicts[path] = (key, verdict)
        return verdict

    def method_calls_from_importers(self, cls: str, name: str) -> list[tuple["FileContext", cst.Call]]:
        """The calls ``obj.name(...)`` in the project files importing this module where ``obj`` is
        an instance of its class ``cls`` (``simclr = SimCLR(...)`` then ``simclr.train(loader)``
        in SimCLR's ``run.py``)."""
        project = self.project
        self.asked_importers = True
        calling = re.compile(rb"\." + re.escape(name.encode()) + rb"\s*\(")
        found: list[tuple[FileContext, cst.Call]] = []
        for path in project.importers.get(self.path, []):
            self.consulted.add(path)
            text = project.text(path)
            if not calling.search(text) or cls.encode() not in text:
                continue
            other = self._context(path)
            if other is None or other.project is None:
                continue
            for call in other.method_calls(name):
                receiver = call.func.value  # type: ignore[attr-defined]
                if not isinstance(receiver, cst.Name):
                    continue
                bindings = other.lookup(receiver.value, receiver)
                if len(bindings) != 1 or not isinstance(bindings[0].value, cst.Call):
                    continue
                built = other.project.binding(bindings[0].value.func)
                if (
                    built is not None
                    and os.path.abspath(built[0].path) == self.path
                    and isinstance(built[1].node, cst.ClassDef)
                    and built[1].node.name.value == cls
                ):
                    found.append((other, call))
        return found

    def calls_from_importers(
        self, name: str, defined_by: tuple[type[cst.CSTNode], ...] = (cst.FunctionDef,)
    ) -> list[tuple["FileContext", cst.Call]]:
        """The calls of this module's function ``name`` in the project files that import it
        (``engine.train(model, train_dataloader, ...)`` in ``train.py``), each with its file's
        context; with ``defined_by=(cst.ClassDef,)``, the constructions of its class ``name``.
        Only files whose text names ``name(`` are parsed."""
        project = self.project
        self.asked_importers = True
        if project.importer_depth >= _IMPORTER_DEPTH or self.path in project._in_progress:
            return []
        calling = re.compile(rb"\b" + re.escape(name.encode()) + rb"\s*\(")
        found: list[tuple[FileContext, cst.Call]] = []
        project._in_progress.add(self.path)
        project.importer_depth += 1
        try:
            for path in project.importers.get(self.path, []):
                self.consulted.add(path)
                if not calling.search(project.text(path)):
                    continue
                other = self._context(path)
                if other is None or other.project is None:
                    continue
                for call in other.nodes(cst.Call):
                    func = call.func
                    spelled = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
                    if spelled != name:
                        continue
                    bound = other.project.binding(func)
                    if bound is not None and os.path.abspath(bound[0].path) == self.path and isinstance(bound[1].node, defined_by):
                        found.append((other, call))
        finally:
            project.importer_depth -= 1
            project._in_progress.discard(self.path)
        return found

    def importer_contexts(self, pattern: "re.Pattern[bytes]") -> list["FileContext"]:
        """The contexts of the project files that import this one and whose text has
        ``pattern`` (``.to(`` for a loader's consumers); the others are not parsed."""
        project = self.project
        self.asked_importers = True
        if project.importer_depth >= _IMPORTER_DEPTH or self.path in project._in_progress:
            return []
        found: list[FileContext] = []
        project._in_progress.add(self.path)
        project.importer_depth += 1
        try:
            for path in project.importers.get(self.path, [])[:_IMPORTERS_ASKED]:
                self.consulted.add(path)
                if not pattern.search(project.text(path)):
                    continue
                other = self._context(path)
                if other is not None and other.project is not None:
                    found.append(other)
        finally:
            project.importer_depth -= 1
            project._in_progress.discard(self.path)
        return found

    def imported(self) -> bool:
        """Whether another file of the project imports this one."""
        self.asked_importers = True
        return bool(self.project.importers.get(self.path))

    def used_by_importers(self, name: str) -> bool:
        """Whether a project file that imports this module uses ``name`` of it: imports it by name
        (or with ``*``), or reads ``<module>.name``."""
        project = self.project
        self.asked_importers = True
        module = os.path.splitext(os.path.basename(self.path))[0]
        for path in project.importers.get(self.path, []):
            self.consulted.add(path)
            _, imports = project._summary(path)
            for spec, level, names in imports:
                if (name in names or names == ("*",)) and project.module_path(spec, level, path) == self.path:
                    return True
            if re.search(rb"\b" + re.escape(module.encode()) + rb"\." + re.escape(name.encode()) + rb"\b", project.text(path)):
                return True
        return False

    @property
    def member(self) -> bool:
        """The file is one of the project's (or its notebook), not text handed in under a made-up name."""
        return self.path in self.project._file_set or self.path.endswith(".ipynb")

    def neighbourhood_matches(self, pattern: "re.Pattern[bytes]") -> bool:
        """Whether the text of a file that runs with this one (:meth:`Project.neighbourhood`) has ``pattern``."""
        return self.neighbour_matching(pattern) is not None

    def neighbour_matching(self, pattern: "re.Pattern[bytes]") -> str | None:
        """The first file that runs with this one (:meth:`Project.neighbourhood`) whose text has ``pattern``."""
        if not self.member:
            return None
        for path in self.project.neighbourhood(self.path)[1:]:
            self.consulted.add(path)
            if pattern.search(self.project.text(path)):
                return path
        self.asked_importers = True
        return None

    def neighbour_contexts(self, test: Callable[[bytes], object]) -> Iterator["FileContext"]:
        """The parsed contexts of the files that run with this one (:meth:`Project.neighbourhood`,
        this file first, as itself) whose text passes ``test``, read before parsing; each joins
        this file's dependencies, and so does the set of importers that made the neighbourhood."""
        if not self.member:
            return
        self.asked_importers = True
        for path in self.project.neighbourhood(self.path):
            if path == self.path:
                if self.project.matches(path, test):
                    yield self.ctx
                continue
            self.consulted.add(path)
            if not self.project.matches(path, test):
                continue
            other = self.project.context(path)
            if other is not None:
                yield other

    def imports_match(self, pattern: "re.Pattern[bytes]", depth: int = 3) -> bool:
        """Whether a project module this file imports, directly or through up to ``depth``
        imports, has ``pattern`` in its text (FEDformer's ``exp_main.py`` imports the model,
        which imports the layer that calls ``torch.fft.rfft``)."""
        if not self.member:
            return False
        project = self.project
        seen = {self.path}
        level = [self.path]
        for _ in range(depth):
            level = [i for p in level for i in project.imports(p) if i not in seen]
            for path in dict.fromkeys(level):
                seen.add(path)
                self.consulted.add(path)
                if pattern.search(project.text(path)):
                    return True
        return False

    def runs_with_match(self, pattern: "re.Pattern[bytes]", hint: "bytes | tuple[bytes, ...] | None" = None) -> bool:
        """Whether a project file with ``pattern`` in its text runs in the same program as this
        one: this file, or a file that shares an importer with it, directly or through others
        (esvit's ``main_esvit.py`` imports ``models``, whose ``cvt_v4_transformer.py`` imports
        ``torch._six``, and the layers in ``layers/``). ``hint``: a literal every match
        contains (:meth:`Project.texts_matching`)."""
        if not self.member:
            return False
        project = self.project
        matched = self.texts_matching(pattern, hint)
        if not matched:
            return False
        self.asked_importers = True

        def runs_with(path: str) -> set[str]:  # a test importing two modules is not their program
            return {path} | {p for p in project._importer_closure(path) if not project.is_test_code(p)}

        mine = runs_with(self.path)
        # A runner that imports modules by a name made at run time (CorrNet's ``main.py``:
        # ``importlib.import_module`` of the config's ``slr_network.SLRModel``) may run any of them.
        by_name = any(project.imports_by_name(p) for p in mine)
        for path in matched:
            if project.is_test_code(path):
                continue
            self.consulted.add(path)
            if path == self.path or by_name or mine & runs_with(path):
                return True
        return False

    def runners_match(self, pattern: "re.Pattern[bytes]") -> bool:
        """Whether a file that imports this one, directly or through others, has ``pattern`` in
        its text: the scripts that run a package module (generative-models' ``sgm`` samplers,
        seeded by ``scripts/sampling/*.py`` three imports away)."""
        if not self.member:
            return False
        project = self.project
        self.asked_importers = True
        seen = {self.path}
        todo = list(project.importers.get(self.path, []))
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            self.consulted.add(path)
            if pattern.search(project.text(path)):
                return True
            todo.extend(project.importers.get(path, []))
        return False

    def methods_named(self, name: str) -> list[tuple["FileContext", cst.FunctionDef]]:
        """The methods called ``name`` of the classes in this file, the project modules it
        imports and the modules those import (``collate_fn=dataset.collate``, whose class a
        factory in ``data/data.py`` picks from ``data/molecules.py`` and its siblings)."""
        project = self.project
        needle = re.compile(rb"\bdef[ \t]+" + re.escape(name.encode()) + rb"[ \t]*\(")
        paths = [self.path]
        for path in list(paths):
            paths.extend(p for p in project.imports(path) if p not in paths)
        for path in list(paths[1:]):
            paths.extend(p for p in project.imports(path) if p not in paths)
        found: list[tuple[FileContext, cst.FunctionDef]] = []
        for path in paths:
            if not needle.search(project.text(path)):
                continue
            other = self.ctx if path == self.path else self._context(path)
            if other is None:
                continue
            for function in other.nodes(cst.FunctionDef):
                if function.name.value == name and isinstance(other.parent.get(other.parent.get(function)), cst.ClassDef):
                    found.append((other, function))
        return found

    def reached(self) -> bool | None:
        """Whether running the project runs this module (:meth:`Project.reached`)."""
        self.asked_reached = True
        return self.project.reached(self.path)

    def called(self, name: str, kind: str = NAME) -> bool:
        """Whether the project names this module's function, class or method ``name`` beyond
        its definition (:meth:`Project.called`); asked only of a file of the project."""
        key = asked_key(name, kind)
        found = self.asked_called.get(key)
        if found is None:  # each fix in the function asks again
            found = self.asked_called[key] = self.project.called(name, self.path, kind)
        return found

    def mentions_outside(self, name: str, kind: str = NAME) -> int:
        """How often the project's code beyond this file names ``name`` (:meth:`Project.mentions_outside`)."""
        key = asked_key(name, kind)
        found = self.asked_mentions.get(key)
        if found is None:
            found = self.asked_mentions[key] = self.project.mentions_outside(name, self.path, kind)
        return found

    def declaring_script(self, dest: str) -> str | None:
        """The script whose command line gives this file the option stored at ``dest``: the one
        Python file of the project that declares it, or, where several sub-projects of one
        repository each declare it (ModernTCN's classification, forecasting...), the one in a
        folder above this file; None where that is not one script. The answer may change with
        any file of the project."""
        self.asked_texts = True
        paths = [path for path in self.project.scripts_declaring(dest) if path.endswith(".py")]
        if len(paths) > 1:
            here = os.path.dirname(os.path.abspath(self.path)) + os.sep
            paths = [path for path in paths if here.startswith(os.path.dirname(os.path.abspath(path)) + os.sep)]
        return paths[0] if len(paths) == 1 else None

    def assigns_attribute(self, name: str) -> bool:
        """Whether a Python file or YAML config of the project assigns an attribute ``name``
        (``args.use_amp = True``), by text; the answer may change with any file of the project."""
        return bool(self.texts_matching(re.compile(rb"\." + re.escape(name.encode()) + rb"[ \t]*=(?!=)"), name.encode()))

    def texts_matching(self, pattern: "re.Pattern[bytes]", hint: "bytes | tuple[bytes, ...] | None" = None) -> list[str]:
        """The project's Python files whose text has ``pattern`` (:meth:`Project.texts_matching`);
        the answer may change with any file of the project."""
        self.asked_texts = True
        return self.project.texts_matching(pattern, hint)

    @property
    def builds_by_name(self) -> bool:
        """Whether a class of this module may be built by a name made at run time
        (:meth:`Project.may_build_by_name`)."""
        self.asked_texts = True
        return self.project.may_build_by_name(self.path)

    def import_that_fails(self) -> str | None:
        """A top-level import of this file that the project's own package cannot satisfy
        (:meth:`Project.import_that_fails`); the answer may change with any file of the project."""
        if not self.member:
            return None
        self.asked_texts = True
        return self.project.import_that_fails(self.path)

    def value_written(self, value: str) -> int:
        """How often the project writes the string ``value`` (:meth:`Project.value_written`); the
        answer may change with any file of the project."""
        self.asked_texts = True
        return self.project.value_written(value)

    def launch_commands(self) -> list[tuple[str, str]]:
        """The command lines the project ships that run this file (:meth:`Project.launch_commands`);
        the answer may change with any file of the project."""
        self.asked_texts = True
        return self.project.launch_commands(self.path)

    def configs_matching(self, pattern: "re.Pattern[bytes]") -> list[str]:
        """The project's YAML configs whose text has ``pattern`` (:meth:`Project.configs_matching`)."""
        self.asked_texts = True
        return self.project.configs_matching(pattern)

    def consulted_files(self) -> Iterator[str]:
        yield from sorted(self.consulted)


def asked_key(name: str, kind: str) -> str:
    """The key under which a view keeps the answer about ``name``, for the cache to ask again."""
    return name if kind == NAME else f"{name}@{kind}"


def asked_name(key: str) -> tuple[str, str]:
    """The name and its kind, from :func:`asked_key`'s key."""
    name, _, kind = key.partition("@")
    return name, kind or NAME


def _lookup_in(
    view: ProjectView, other: "FileContext", name: str, depth: int, needle: "re.Pattern[bytes] | None" = None
) -> tuple["FileContext", "Binding"] | None:
    """``name``'s single module-level binding in ``other``, following re-exports (``from .resnet import ResNet18``
    in a package's ``__init__.py``)."""
    if depth > 4:
        return None
    bindings = other.bindings.get((id(other.module), name), [])
    if len(bindings) != 1:
        if not bindings and other.project is not None:
            found = other.project._from_star_imports(name, needle)
            view.consulted.update(other.project.consulted)
            return found
        return None
    binding = bindings[0]
    if isinstance(binding.node, cst.ImportFrom) and other.project is not None:
        found = other.project._imported_name(binding.node, name, depth + 1, needle)
        view.consulted.update(other.project.consulted)
        return found
    if isinstance(binding.node, cst.Import):
        return None
    return other, binding


def _bound_name(alias: cst.ImportAlias) -> str | None:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return None


def _imported_as(names: str) -> list[str]:
    """The local names of ``a, b as c`` (``(`` and a trailing comment allowed)."""
    found = []
    for item in names.strip().strip("()").split(","):
        parts = item.split()
        if parts:
            found.append(parts[-1] if len(parts) == 3 and parts[1] == "as" else parts[0])
    return [n for n in found if _NAME.fullmatch(n)]


_PROJECTS: OrderedDict[tuple[str, object], Project] = OrderedDict()
_PROJECTS_KEPT = 4
_ROOTS: dict[str, str] = {}


def project_for(path: str, target: "Target", parse: Callable[[str, bytes, "Target"], "FileContext"]) -> Project:
    """The project of ``path``, one per root and target in this process."""
    directory = os.path.dirname(os.path.abspath(path))
    root = _ROOTS.get(directory)
    if root is None:
        root = _ROOTS[directory] = find_root(path)
    key = (root, target)
    project = _PROJECTS.get(key)
    if project is None:
        project = _PROJECTS[key] = Project(root, target, parse)
        while len(_PROJECTS) > _PROJECTS_KEPT:
            _PROJECTS.popitem(last=False)
    else:
        _PROJECTS.move_to_end(key)
    return project


def forget_projects() -> None:
    """Drop every project this process knows (their files may have changed)."""
    _PROJECTS.clear()
    _ROOTS.clear()
