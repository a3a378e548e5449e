"""What the project says it runs with: the versions its requirements admit.

Some fixes depend on a library's version (``fused=True`` on an optimizer built while the
parameters are still on the CPU needs torch 2.4). The project's own declaration is read as
text, never installed or imported: ``pyproject.toml`` (PEP 621 ``dependencies`` and Poetry),
``requirements*.txt``, ``setup.cfg`` and ``setup.py`` string literals, ``environment.yml``,
and, where none of them names the package, the install instructions of a README or INSTALL
file, from the file's folder up to the project root; where nothing there names it at all,
the requirement files of the project's other subtrees (:func:`_pinned_elsewhere`).
"""
from __future__ import annotations

import codecs
import functools
import os
import re
from typing import TYPE_CHECKING, Callable, TypeVar

import libcst as cst

from advisor.apis import LIGHTNING_TRAINER

if TYPE_CHECKING:
    from advisor.context import FileContext

T = TypeVar("T")


# ``cog.yaml`` lists ``python_packages: - "torch==1.8.0"`` (pixel2style2pixel).
# nbdev's ``settings.ini``: ``requirements = fastprogress torch>=1.7,<1.14`` (fastai's course22p2).
_FILES = (
    "pyproject.toml", "setup.cfg", "setup.py", "environment.yml", "environment.yaml", "cog.yaml", "settings.ini",
    "poetry.lock", "uv.lock",
)
# What ``poetry install`` / ``uv sync`` install: AudioLDM's pyproject.toml names no torch, its
# poetry.lock resolves torch 1.13.1 (no fused AdamW, no ``torch.amp.GradScaler``).
_LOCK_FILES = ("poetry.lock", "uv.lock")
_LOCKED_PACKAGE = re.compile(r'^\[\[package\]\]\s*\nname\s*=\s*"([^"]+)"\s*\nversion\s*=\s*"([^"]+)"', re.M)
# A requirements file written as ``pip list`` / ``conda list`` prints it, a name and a version
# a line (DeepAR's TimeSeries: ``torch 0.4.1``): read as ``torch==0.4.1``.
_LISTED_PACKAGE = re.compile(r"^([A-Za-z][\w.-]*)[ \t]+v?([0-9]+\.[0-9]+(?:\.[0-9]+)*)[ \t]*$", re.M)
# Other conda environment files: decision-transformer's ``atari/conda_env.yml`` (``pytorch=1.2``).
# facenet-pytorch-glint360k's ``requirements.yml`` is one too (``- pytorch=1.8.1=py3.7_cuda10.2...``).
_CONDA_ENVIRONMENT = re.compile(r"^(?:conda[\w.-]*|[\w.-]*_env|env[\w.-]*|requirements?[\w.-]*)\.ya?ml$", re.I)
# ``requirements.lock`` too: muzero-general's README installs with ``pip install -r requirements.lock``.
# OpenP5's ``src/src_llama/environment_llama.txt``: a ``pip freeze`` of the environment it ran.
_REQUIREMENTS = re.compile(r"^(?:requirements?[\w.-]*\.(txt|in|lock)|environment[\w.-]*\.txt)$")
# ``conda list --explicit > spec-file.txt`` (BRIO: ``.../pytorch-1.8.0-py3.8_cuda11.1_cudnn8.0.5_0.tar.bz2``)
# and ``conda list --export`` (``pytorch=1.8.0=py3.8_0``): the environment the authors ran.
_CONDA_SPEC = re.compile(r"^(?:spec|[\w.-]*[-_]spec|spec[-_][\w.-]*|conda[\w.-]*)\.txt$", re.I)
_CONDA_PACKAGE = re.compile(
    r"^(?:\S*/)?(?P<name>[A-Za-z0-9_.-]+?)-(?P<version>[0-9][\w.+!]*)-[^-/\s]+\.(?:tar\.bz2|conda)$"
    r"|^(?P<exported>[A-Za-z0-9_.-]+)=(?P<pinned>[0-9][\w.+!]*)=\S+$"
)
# Install instructions (a README's, a Dockerfile's ``RUN pip install lightning==2.1.2``): read
# only where no requirement file names the package.
# An install script counts too (VQ-Diffusion's ``install_req.sh``: ``pip install torch==1.9.0``;
# MP-Neural-PDE-Solvers' ``environment.sh``: ``conda install pytorch=1.9``).
_DOCUMENT = re.compile(
    # DESED's ``conda_create_environment.sh`` (``pytorch-cuda=11.7``), RawNet's ``launch_ngc.sh``.
    r"^(?:(readme|install|installation|get_started|getting_started)[\w.-]*\.(md|rst|txt)|dockerfile[\w.-]*"
    r"|[\w.-]*(?:install|setup|env|environment|conda|docker|ngc)[\w.-]*\.sh)$",
    re.I,
)
_CLAUSE = re.compile(r"(~=|==|>=|<=|!=|>|<)\s*v?([0-9][0-9a-zA-Z.*+!-]*)")
MAX_PROJECT_FILE_BYTES = 1_000_000


def _kept_for_this_check(ctx: "FileContext", key: object, compute: "Callable[[], T]") -> "T":
    """``compute()``, kept for the rest of this check (:meth:`FileContext.memo_for_this_check`):
    a file's fixes ask the same version questions again and again; the next check reads the
    project's files anew. Computed each time for an object that is not a file's context."""
    memo = getattr(ctx, "memo_for_this_check", None)
    return compute() if memo is None else memo(key, compute)


def _kept_for_the_file(ctx: "FileContext", key: object, compute: "Callable[[], T]") -> "T":
    """``compute()`` of the file's own text, kept as long as the context (:meth:`FileContext.memo`)."""
    memo = getattr(ctx, "memo", None)
    return compute() if memo is None else memo(key, compute)


def declared(ctx: "FileContext", package: str) -> str | None:
    """The version specifier the project declares for ``package`` (``">=2.1,<3"``), ``""``
    for a bare name, None where no requirement file names it."""
    # Asked up to nine times by a file's fixes: every cap asks about torch.
    return _kept_for_this_check(ctx, ("declared", package), lambda: _declared(ctx, package))


def _requirement(package: str) -> "re.Pattern[str]":
    """A requirement of ``package`` in a requirements file, ``pyproject.toml``, ``setup.py`` or a
    conda environment, with its specifier (:func:`_spec_in`)."""
    name = re.escape(package)
    # ``torch>=2.1``, ``"torch >= 2.1, < 3"``, ``torch = "^2.1"`` and ``torch = ">=1.10.1, <1.13"``
    # (Poetry), ``- pytorch=2.1`` and ``- pytorch::pytorch=1.13.1`` (conda, with its channel: tabular-dl-tabr)
    return re.compile(
        rf"""(?:^[ \t]*(?:-[ \t]*)?(?:[\w.-]+::)?|["']|git\+https?://github\.com/[\w.-]+/)(?:py)?{name}(?:\.git)?(?:\[[^\]]*\])?[ \t]*"""
        rf"""(?P<spec>@[ \t]*[^"'\s;#]+|=[ \t]*["'](?P<quoted>(?:[<>=!~]=?[ \t]*)?v?[0-9][^"']*)["']|=[ \t]*["']?[\^~]?[0-9][^"'\s#]*"""
        rf"""|(?:[<>=!~]=?[ \t]*v?[0-9][^"',;\s#]*[ \t]*,?[ \t]*)*)"""
        rf"""(?=["'\s;#\]]|$)""",
        re.M | re.I,
    )


def _declared(ctx: "FileContext", package: str) -> str | None:
    pattern = _requirement(package)
    documents: list[str] = []  # nearest first
    bare = False
    # Requirement files of one folder may disagree (VL-T5: requirements.txt pins torch 1.6.0 for
    # training, cog.yaml 1.10.0 for its demo): the oldest floor among them speaks for the folder.
    found: list[str] = []
    found_in: str | None = None
    document_folders: list[str] = []
    primary = False  # a requirements file, pyproject.toml, setup.cfg or setup.py named the package
    for path in _candidates(ctx):
        if found_in is not None and os.path.dirname(path) != found_in:
            break
        text = _notebook_installs(ctx) if path == ctx.path else read_project_file(ctx, path)
        if text is None:
            continue
        if _DOCUMENT.match(os.path.basename(path)):
            documents.append(text + _scripts_run_by(ctx, path, text))
            document_folders.append(os.path.dirname(path))
            continue
        if _CONDA_SPEC.match(os.path.basename(path)):
            text = _conda_spec_requirements(text)
        elif os.path.basename(path) in _LOCK_FILES:
            text = "\n".join(f"{name}=={version}" for name, version in _LOCKED_PACKAGE.findall(text))
        elif _REQUIREMENTS.match(os.path.basename(path)):
            text = _LISTED_PACKAGE.sub(r"\1==\2", text)
        elif os.path.basename(path) == "settings.ini":
            text = _nbdev_requirements(text)
        bundled = _bundled_version(text, package) if os.path.basename(path) in _PACKAGE_METADATA else None
        # DNABERT's root ``setup.py`` is its copy of transformers 2.5.0 (``pip install
        # --editable .``): the project's scripts run the package it is.
        spec = f"=={bundled}" if bundled else _spec_in(pattern, text)
        if spec == "":
            bare = True
        elif spec is not None:
            found.append(spec)
            found_in = os.path.dirname(path)
            primary = primary or _PRIMARY.match(os.path.basename(path)) is not None
    own = _file_pin(ctx, package)
    if found:
        pinned = [spec for spec in found if not spec.startswith("@")]
        if len(pinned) < len(found) or not pinned:
            return next(spec for spec in found if spec.startswith("@"))
        # Where only a deployment's file names it (VGen: cog.yaml pins torch 2.0.1 for the demo
        # image), an install command in a README of the same folder or nearer is one more
        # declaration (its install section: ``pip install torch==1.12.0+cu113``), and the oldest
        # floor speaks, as among files. A requirements file or the package metadata is what the
        # README's ``pip install -r`` installs after such a command: it wins.
        if not primary:
            pinned += [f"=={version}" for text in documents for version in _install_pins(text, package)]
        # A README in a folder nearer the file than the requirement file describes that folder's
        # own project (PatchTST vendors FEDformer, whose README says "PyTorch 1.9.0", under a
        # requirements.txt of torch 1.11.0): its floor joins, the oldest speaks.
        near = (_document_spec(text, package) for text, folder in zip(documents, document_folders) if folder != found_in)
        pinned += [spec for spec in near if spec is not None and spec.startswith(">=")]
        pinned += [own] if own else []
        return min(pinned, key=lambda spec: _floor(spec) or (999,))
    # No requirement file names it, or only by its bare name: the install instructions may
    # (``pip install torch==1.8.0``, ``Install PyTorch>=1.8.0``, ``PyTorch 1.7.1`` in a README's
    # requirements). The nearest such document speaks for this folder: RWKV-v7's "torch 2.5+"
    # for its folder, the root README's "torch==1.13.1" for the older versions it describes.
    for text in documents:
        spec = _document_spec(text, package, own)
        if spec is not None:
            return spec
    if own:
        return own
    tested = _ci_tested(ctx, package)
    if tested is not None:
        return tested
    return "" if bare else None


# A version in backquotes, as Markdown shows code (STCN's "- PyTorch `1.8.1`").
_QUOTED_VERSION = re.compile(r"`v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)`")


@functools.lru_cache(maxsize=128)
def _document_spec(text: str, package: str, own: str | None = None) -> str | None:
    """The version of ``package`` a README or install document gives (``Install PyTorch>=1.8.0``,
    ``PyTorch 1.7.1``, ``at least 1.7``): ``>=X`` for the oldest it names, ``<X`` for a ceiling
    ("before 0.4"), None where it names none. ``own`` (the file's own pin) joins the oldest.
    Kept per text: every file of a folder, and every fix that depends on a version, asks the
    same README again (nine regular expressions over it, a tenth of a small project's run)."""
    name = re.escape(package)
    mentioned = re.compile(
        rf"(?<![\w-])(?:py)?{name}(?:\]\([^)\s]*\))?(?:\s*\(?\s*(?:==|>=|≥|~=|=|>)\s*v?|\s*\(\s*v?(?=[0-9]+\.[0-9]+(?:\.[0-9]+)?[\w.]*\+?\))|\s+(?:install(?:ed)?\s+)?(?:version\s+)?v?|,\s*version\s+v?|,\s*v\.?(?=[0-9])|-v?|v?)([0-9]+\.[0-9]+(?:\.[0-9]+)?)", re.I
    )
    # MagFace: "Use **Pytorch > 1.7** for this feature" (newer than 1.7: 1.7 is a safe floor);
    # EmpatheticDialogues: "[PyTorch](https://pytorch.org/) (1.0.1.post2)".
    # pytorch-maml: "the latest version of PyTorch, v.0.2.0". msn: "PyTorch install 1.11.0".
    # GCC's README: "[PyTorch ≥ 1.4.0](https://pytorch.org/)". glow-tts: "* pytorch1.2.0", no space; sentiment-discovery: "pytorch (>= 0.4.1)"; FEAT:
    # "[PyTorch-1.4 and torchvision](https://pytorch.org)". FADNet: "[PyTorch(1.6.0+)](http://pytorch.org)".
    # BERT-NER-Pytorch: "1.1.0 =< PyTorch < 1.5.0".
    bounded = re.compile(rf"([0-9]+\.[0-9]+(?:\.[0-9]+)?)\s*(?:<=|=<)\s*(?:py)?{name}\b", re.I)
    # FiD: "[PyTorch](http://pytorch.org/) (currently tested on version 1.6.0)"; PEN-Net:
    # "Install [pytorch](https://pytorch.org/) (tested on Release 1.1.0)"; DAVS, in a
    # full-width parenthesis: "[PyTorch](https://pytorch.org/)（We use version 0.2.0)"; CRIS:
    # "[PyTorch](www.pytorch.org) (e.g. 1.10.0)"; pytorch_stacked_hourglass: "PyTorch (code tested with 1.5)".
    aside = re.compile(
        rf"(?<![\w-])(?:py)?{name}(?:\]\([^)\s]*\))?\s*[(（][^()（）]*?(?:\b(?:versions?|releases?)\s+|\be\.g\.,?\s*|\btested\s+(?:on|with)\s+)v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)", re.I
    )
    # FedRepo: "  * `torch`: 1.9.0", a list of packages and versions (a line of its own, or the
    # name in backquotes: not a Docker image's ``nvcr.io/nvidia/pytorch:21.11``).
    listed = re.compile(
        rf"(?:^[ \t]*[-*]?[ \t]*(?:py)?{name}|`(?:py)?{name}`)[ \t]*:[ \t]*v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)\b", re.I | re.M
    )
    # deepcluster: "a PyTorch install version 0.1.8"; stat453's README shows its script's output,
    # "PyTorch version: 1.7.0"; EditNTS: "requires PyTorch version >= 0.4.1"; COSNet: "Install
    # pytorch (version:1.0.1)", no space. SimKD: "The PyTorch version is 1.0."
    worded = re.compile(
        rf"(?<![\w-])(?:py)?{name}\b[^\n.]{{0,30}}?\bversion(?:\s+(?:is|was))?(?:\s*:\s*|\s+|\s*(?:>=|≥|==)\s*)v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)", re.I
    )
    # WaveRNN: "[Pytorch 1 with CUDA](https://pytorch.org/)": any 1.x, so 1.0 is the floor.
    major_only = re.compile(rf"(?<![\w-])(?:py)?{name}\s+v?([0-9])(?:\.x)?(?![\w.])", re.I)
    # StudioGAN: "install PyTorch meeting your environment (at least 1.7)".
    at_least = re.compile(
        rf"(?<![\w-])(?:py)?{name}\b[^\n]{{0,60}}?\b(?:at least|minimum)\s*(?:version\s*)?v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)", re.I
    )
    # CloserLookFewShot: "[Pytorch](http://pytorch.org/) before 0.4": a ceiling, not a floor.
    ceiling = re.compile(
        rf"(?<![\w-])(?:py)?{name}(?:\]\([^)\s]*\))?\s*(?:before|below|older than|earlier than|<)\s*v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)", re.I
    )
    # A line that sends readers of another version elsewhere ("PyTorch 0.3 compatible version is
    # here" linking a branch: NCRF++; "looking for pytorch 0.3, please switch to tag v0.3":
    # lemniscate) names code this checkout is not.
    text = "\n".join(line for line in _expand_docker_args(text).splitlines() if not _OTHER_RELEASE_LINE.search(line))
    text = _QUOTED_VERSION.sub(r"\1", text)  # STCN: "- PyTorch `1.8.1`"
    below = ceiling.search(text)
    if below is not None:
        return f"<{below.group(1)}"
    versions = [
        m.group(1)
        for m in (*mentioned.finditer(text), *bounded.finditer(text), *aside.finditer(text), *at_least.finditer(text), *worded.finditer(text), *listed.finditer(text))
    ]
    versions += [f"{m.group(1)}.0" for m in major_only.finditer(text)]
    if package == "torch":  # pydreamer's Dockerfile: ``FROM pytorch/pytorch:1.11.0-cuda11.3-cudnn8-devel``
        versions += [m.group(1) for m in _PYTORCH_IMAGE.finditer(text)]
    if package == "torch":  # PyCIL's "torch 1.81": no torch 1.x went past 1.13, so it is 1.8.1
        versions = [re.sub(r"^1\.([1-9])([0-9])$", r"1.\1.\2", v) if _version(v) > _version("1.13.9") and _version(v) < _version("2") else v for v in versions]
    if versions:
        return ">=" + min(versions + ([own[2:]] if own else []), key=_version)
    return None


# A CI matrix of the versions a project is tested on (neural_sp's ``.travis.yml``:
# ``PYTORCH_VERSION=1.0.0`` ... ``1.8.1``): the oldest is the floor it keeps working on.
def _ci_texts(ctx: "FileContext") -> list[str]:
    """The CI configurations at the project's root: Travis, GitLab, GitHub's workflows, Azure's
    pipelines (lightning-bolts' ``.azure/gpu-tests.yml``), CircleCI."""
    project = getattr(ctx, "project", None)
    if project is None:
        return []
    root = project.project.root
    texts = [read_project_file(ctx, os.path.join(root, name)) or "" for name in (".travis.yml", "azure-pipelines.yml", ".gitlab-ci.yml")]
    for folder in (os.path.join(root, ".github", "workflows"), os.path.join(root, ".azure"), os.path.join(root, ".circleci")):
        if os.path.isdir(folder):
            names = [name for name in sorted(os.listdir(folder)) if name.endswith((".yml", ".yaml"))]
            texts += [read_project_file(ctx, os.path.join(folder, name)) or "" for name in names[:16]]
    return texts


def _ci_tested(ctx: "FileContext", package: str) -> str | None:
    """``>=X``, X the oldest version of ``package`` a CI configuration at the project's root
    tests (``PYTORCH_VERSION=1.0.0``, ``torch==1.6.0``, ``torch-version: [1.8, 1.9]``)."""
    if package != "torch":
        return None
    text = "\n".join(_ci_texts(ctx))
    versions = re.findall(r"(?:PYTORCH|TORCH)_VERSION\s*[=:]\s*[\"']?v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)", text, re.I)
    versions += re.findall(r"(?<![\w-])torch\s*==\s*([0-9]+\.[0-9]+(?:\.[0-9]+)?)", text)
    return ">=" + min(versions, key=_version) if versions else None


_PRIMARY = re.compile(r"^(?:requirements?[\w.-]*\.(?:txt|in|lock)|environment[\w.-]*\.txt|pyproject\.toml|setup\.cfg|setup\.py|settings\.ini|poetry\.lock|uv\.lock)$")


def _install_pins(text: str, package: str) -> list[str]:
    """The versions ``pip install`` / ``conda install`` commands in ``text`` pin ``package`` to
    (``pip install torch==1.12.0+cu113`` -> 1.12.0; ``conda install pytorch=1.9``)."""
    name = re.escape(package)
    command = re.compile(
        rf"\b(?:pip3?|conda|mamba)\s+install\b[^\n]*?(?<![\w-])(?:py)?{name}\s*={{1,2}}\s*v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)", re.I
    )
    return [m.group(1) for m in command.finditer(text)]


# A module docstring's dependency list (MorvanZhou's tutorials: "Dependencies:\ntorch: 0.4").
_DOCSTRING_PIN = r"^[ \t]*[-*]?[ \t]*(?:py)?{name}[ \t]*(?::|==|>=|=)[ \t]*v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)\b"


# A version check the file runs on itself: rasbt's machine-learning-book opens each chapter with
# ``check_packages({'torch': '1.9.0', ...})``, the versions it was written for.
_CHECKED_VERSION = r"""["']{name}["'][ \t]*:[ \t]*["']v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)["']"""


_ANY_CHECKED_VERSION = re.compile(_CHECKED_VERSION.format(name=r"[\w.-]+"))


def _file_pin(ctx: "FileContext", package: str) -> str | None:
    """``>=X`` where the file's own module docstring lists ``package: X`` (or ``package==X``),
    or its code maps the package's name to a version (``{'torch': '1.9.0'}``, a minimum the
    file checks)."""
    source = getattr(ctx, "source", "") or ""
    checked = re.search(_CHECKED_VERSION.format(name=re.escape(package)), source) if package in source else None
    if checked is not None:
        return f">={checked.group(1)}"
    if _checks_versions(ctx):
        sibling = _sibling_check(ctx, package)
        if sibling is not None:
            return sibling
    docstring = _module_docstring(ctx)
    if not docstring or package.lower() not in docstring.lower():
        return None
    match = re.search(_DOCSTRING_PIN.format(name=re.escape(package)), docstring, re.M | re.I)
    return f">={match.group(1)}" if match else None


def _checks_versions(ctx: "FileContext") -> bool:
    """The file maps some package's name to a version (``{'ignite': '0.4.3'}``)."""
    source = getattr(ctx, "source", "") or ""  # asked for every package
    return _kept_for_the_file(ctx, _checks_versions, lambda: _ANY_CHECKED_VERSION.search(source) is not None)


def _module_docstring(ctx: "FileContext") -> str | None:
    module = getattr(ctx, "module", None)
    if module is None:
        return None

    def read() -> str | None:
        try:
            return module.get_docstring()
        except Exception:  # noqa: BLE001 - a docstring libcst cannot evaluate (bytes, f-string): none
            return None

    return _kept_for_the_file(ctx, _module_docstring, read)


def _sibling_check(ctx: "FileContext", package: str) -> str | None:
    """``>=X``, X the oldest version of ``package`` that the version checks of the scripts beside
    this one name, for a script whose own check leaves the package out (machine-learning-book's
    Ignite chapter checks only ``ignite``; its sibling chapters' checks say ``'torch': '1.8'``)."""
    path = getattr(ctx, "path", "") or ""
    if not os.path.isfile(path):
        return None  # an editor buffer or a snippet: no folder of siblings
    folder = os.path.dirname(os.path.abspath(path))
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))[:32]
    except OSError:
        return None
    pattern = re.compile(_CHECKED_VERSION.format(name=re.escape(package)))
    versions = []
    for name in names:
        path = os.path.join(folder, name)
        if os.path.abspath(path) != os.path.abspath(ctx.path):
            versions += pattern.findall(read_project_file(ctx, path) or "")
    return ">=" + min(versions, key=_version) if versions else None


def _spec_in(pattern: "re.Pattern[str]", text: str) -> str | None:
    """The version specifier the first requirement of ``text`` that names the package gives,
    ``""`` where it names the package bare only, None where it does not name it."""
    bare = False
    for match in pattern.finditer(text):
        quoted = match.group("quoted")
        if quoted is not None and re.match(r"\s*(?:\^|~(?!=))", quoted):
            return ">=" + quoted.strip().lstrip("^~").strip()  # Poetry's ``"~4.40.2"`` / ``"^2.1"``
        if quoted is not None and re.match(r"\s*[<>=!~]", quoted):
            return quoted.strip()  # Poetry's ``">=1.10.1, < 1.13.0"`` is PEP 440 already
        spec = match.group("spec").strip().rstrip(",")
        if spec.startswith("@"):
            return spec  # ``peft @ git+https://...@3714aa2``: a commit, of whatever age
        if spec:
            return _poetry(spec)  # Latte's environment.yml: ``- pytorch`` first, ``- pytorch > 2.0.0`` below
        # ``torch`` alone (or a mention that is no requirement: ``known-third-party =
        # ["torch"]`` in a ``pyproject.toml``): the current release, unless a requirement
        # file names it with a version, or the project's install instructions say which
        # torch it supports (s4: "Pytorch 1.10+")
        bare = True
    return "" if bare else None


def _floor(spec: str) -> tuple[int, ...] | None:
    """The oldest version ``spec`` admits, where a clause bounds it from below."""
    floors = [_version(text) for operator, text in _CLAUSE.findall(spec) if operator in (">=", ">", "==", "~=")]
    return min(floors) if floors else None


def _expand_docker_args(text: str) -> str:
    """A Dockerfile's ``${NAME}`` / ``$NAME`` replaced by its ``ARG NAME="value"`` default
    (dfdc_deepfake_challenge: ``ARG PYTORCH="1.10.0"``, then ``FROM pytorch/pytorch:${PYTORCH}-cuda...``)."""
    defaults = {m.group(1): m.group(2) for m in _DOCKER_ARG.finditer(text)}
    if not defaults:
        return text
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: defaults.get(m.group(1) or m.group(2), m.group(0)), text)


_DOCKER_ARG = re.compile(r"""^[ \t]*ARG[ \t]+(\w+)[ \t]*=[ \t]*["']?([^"'\s]+)["']?""", re.M)

# The official PyTorch Docker images are tagged with the torch release they hold.
_PYTORCH_IMAGE = re.compile(r"\bpytorch/pytorch:v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)")

_OTHER_RELEASE_LINE = re.compile(
    r"/tree/|/tags?/|\b(?:switch|checkout|check out) to\b|\bswitch to (?:the )?(?:tag|branch)\b|looking for|version is here"
    # pytorch-maml's to-do list: "- [ ] port to pytorch 0.4 from 0.2": work not done.
    r"|^\s*[-*]\s*\[ \]|\bport(?:ed|ing)? to\b",
    re.I,
)


def _nbdev_requirements(text: str) -> str:
    """An nbdev ``settings.ini``'s ``requirements`` / ``pip_requirements`` / ``dev_requirements``
    values, one requirement per line (they are space-separated there)."""
    found = []
    for match in re.finditer(r"^[ \t]*(?:pip_|conda_|dev_)?requirements[ \t]*=[ \t]*(.*)$", text, re.M):
        found.extend(match.group(1).split())
    return "\n".join(found)


def _conda_spec_requirements(text: str) -> str:
    """A conda spec file's packages as ``name==version`` lines (nothing for any other ``.txt``)."""
    if "@EXPLICIT" not in text and "# platform:" not in text:
        return ""
    found = []
    for line in text.splitlines():
        match = _CONDA_PACKAGE.match(line.strip())
        if match is not None:
            name = match.group("name") or match.group("exported")
            found.append(f"{name}=={match.group('version') or match.group('pinned')}")
    return "\n".join(found)


def named_json(ctx: "FileContext", name: str) -> tuple[object, str] | None:
    """A JSON file the code names (a DeepSpeed config), parsed, with its text: looked up next to
    the file, then as given; the first that exists decides. None when absent, unreadable, over
    ``MAX_PROJECT_FILE_BYTES`` or not JSON. Read as text, never run."""
    import json

    folder = os.path.dirname(os.path.abspath(ctx.path))
    for candidate in (os.path.join(folder, name), name):
        if not os.path.exists(candidate):
            continue
        text = read_project_file(ctx, candidate)
        if text is None:
            return None
        try:
            return json.loads(text), text
        except ValueError:
            return None
    return None


def read_project_file(ctx: "FileContext", path: str) -> str | None:
    """A project file a finding depends on (requirements, a DeepSpeed config), as text: read
    once per process while it is unchanged, recorded for the results cache; None when absent,
    unreadable or over ``MAX_PROJECT_FILE_BYTES``."""
    if getattr(ctx, "project", None) is not None:
        ctx.project.consulted.add(os.path.abspath(path))  # a cached result depends on it
    try:
        info = os.stat(path)
    except OSError:
        return None
    if info.st_size > MAX_PROJECT_FILE_BYTES:
        return None
    key = (path, info.st_mtime_ns, info.st_size)
    if key not in _TEXTS:
        try:
            with open(path, "rb") as handle:
                text: str | None = _decoded(handle.read())
        except OSError:
            text = None
        if len(_TEXTS) > 256:
            _TEXTS.clear()
        _TEXTS[key] = text
    return _TEXTS[key]


def _decoded(data: bytes) -> str:
    """A text file's bytes as text: UTF-16 where a byte-order mark says so (clip-gpt-captioning's
    ``requirements.txt``, written by PowerShell's ``pip freeze > requirements.txt``), else UTF-8."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


# Per process, keyed by what would show a change (a folder's mtime: a file added or removed;
# a file's mtime and size): a folder of a thousand scripts is listed once, not per fix.
_TEXTS: dict[tuple[str, int, int], str | None] = {}
_LISTINGS: dict[tuple[str, int, str], list[str]] = {}
_NESTED: dict[tuple[str, int], list[str]] = {}
_REPOSITORY_TOPS: dict[tuple[str, int], bool] = {}


def _names(folder: str) -> list[str]:
    return folder_listing(folder, "requirements", _declares_requirements)


def _declares_requirements(name: str) -> bool:
    return bool(
        name in _FILES or _REQUIREMENTS.match(name) or _DOCUMENT.match(name) or _CONDA_ENVIRONMENT.match(name)
        or _CONDA_SPEC.match(name)
    )


def folder_listing(folder: str, kind: str, select: Callable[[str], object]) -> list[str]:
    """The names in ``folder`` that ``select`` keeps, sorted; listed once per process while the
    folder is unchanged (a file added or removed changes its mtime). ``kind`` names the
    selection, which is cached apart from the others of the same folder."""
    try:
        stamp = os.stat(folder).st_mtime_ns
    except OSError:
        return []
    key = (folder, stamp, kind)
    if key not in _LISTINGS:
        try:
            names = sorted(n for n in os.listdir(folder) if select(n))
        except OSError:
            names = []
        if len(_LISTINGS) > 256:
            _LISTINGS.clear()
        _LISTINGS[key] = names
    return _LISTINGS[key]


def _poetry(spec: str) -> str:
    """Poetry's ``= "^2.1"`` / conda's ``=2.1`` as a PEP 440 lower bound."""
    spec = spec.strip()
    if spec.startswith("=") and not spec.startswith("=="):
        version = spec.lstrip("=").strip().strip("\"'").lstrip("^~")
        return f">={version.split('=')[0]}"  # conda's ``=1.10.2=py3.8_cuda11.3_0``: the build string goes
    return spec


def _repository_top(folder: str) -> bool:
    try:
        stamp = os.stat(folder).st_mtime_ns
    except OSError:
        return False
    key = (folder, stamp)  # adding ``.git`` changes the folder's mtime
    found = _REPOSITORY_TOPS.get(key)
    if found is None:
        found = any(os.path.exists(os.path.join(folder, marker)) for marker in (".git", ".hg"))
        if len(_REPOSITORY_TOPS) > 256:
            _REPOSITORY_TOPS.clear()
        _REPOSITORY_TOPS[key] = found
    return found


def _in_repository(folder: str) -> bool:
    """Some folder at or above ``folder`` is a repository's top."""
    while True:
        if _repository_top(folder):
            return True
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent


# Folders beside a project's files that hold its requirements or install notes, and which of
# their files count: CenterNet's ``readme/INSTALL.md``, mmdet's ``docs/get_started.md``, CORL's
# ``requirements/requirements.txt``, pixel2style2pixel's ``environment/psp_env.yaml``.
_NESTED_FOLDERS = {
    "readme": _DOCUMENT.match,
    "docs": _DOCUMENT.match,
    "doc": _DOCUMENT.match,
    "requirements": lambda n: _REQUIREMENTS.match(n) or n.endswith((".txt", ".in")),
    "environment": lambda n: _CONDA_ENVIRONMENT.match(n) or n.startswith("environment."),
    "envs": lambda n: _CONDA_ENVIRONMENT.match(n) or n.startswith("environment."),
    # equiformer's ``env/env_equiformer.yml`` (``pytorch=1.10.2``)
    "env": lambda n: _CONDA_ENVIRONMENT.match(n) or n.startswith("environment.") or n.endswith((".yml", ".yaml")),
    # FourCastNet's ``docker/Dockerfile`` (``FROM nvcr.io/nvidia/pytorch:21.11-py3``)
    "docker": lambda n: n.lower().startswith("dockerfile") or _REQUIREMENTS.match(n) is not None,
}


def _folder_candidates(folder: str) -> list[str]:
    """The files of one folder that may declare requirements, with those of its
    ``_NESTED_FOLDERS``."""
    try:
        stamp = os.stat(folder).st_mtime_ns
    except OSError:
        return []
    key = (folder, stamp)
    nested = _NESTED.get(key)
    if nested is None:  # which of them exist changes the folder's mtime
        nested = _NESTED[key] = [n for n in _NESTED_FOLDERS if os.path.isdir(os.path.join(folder, n))]
        if len(_NESTED) > 256:
            _NESTED.clear()
    found = [os.path.join(folder, n) for n in _names(folder)]
    found += [path for path in _conda_environments_named_otherwise(folder) if path not in found]
    for name in nested:
        inner = os.path.join(folder, name)
        wanted = _NESTED_FOLDERS[name]
        found += [os.path.join(inner, n) for n in _names(inner) if wanted(n)]
    found += [path for path in _installed_by_path(folder, found) if path not in found]
    return found


def _conda_environments_named_otherwise(folder: str) -> list[str]:
    """Conda environment files whose names say nothing (MINet's ``code/minet.yaml``: ``name:``,
    ``channels:``, ``dependencies:`` pinning pytorch 1.5.1), told by their first lines; once per
    file while it is unchanged."""
    found: list[str] = []
    for name in folder_listing(folder, "yaml files", lambda n: n.endswith((".yml", ".yaml")) and not _CONDA_ENVIRONMENT.match(n)):
        path = os.path.join(folder, name)
        try:
            info = os.stat(path)
        except OSError:
            continue
        key = (path, info.st_mtime_ns, info.st_size)
        if key not in _CONDA_HEADS:
            head = ""
            if info.st_size <= MAX_PROJECT_FILE_BYTES:
                try:
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        head = handle.read(4096)
                except OSError:
                    pass
            if len(_CONDA_HEADS) > 1024:
                _CONDA_HEADS.clear()
            _CONDA_HEADS[key] = bool(_CONDA_HEAD.search(head) and re.search(r"^dependencies:[ \t]*$", head, re.M))
        if _CONDA_HEADS[key]:
            found.append(path)
    return found


_CONDA_HEAD = re.compile(r"^channels:[ \t]*$", re.M)
_CONDA_HEADS: dict[tuple[str, int, int], bool] = {}


# ``pip install -r images/requirements.txt`` in a README, or in a script the README runs
# (the-algorithm-ml: "`./images/init_venv.sh`", which installs ``images/requirements.txt``).
_INSTALLS_FILE = re.compile(r"-r\s+[\"']?([\w./-]+\.(?:txt|in))")
# SGFormer: "the environment with package versions indicated in `./large/requirement.txt`":
# a requirement file named by its path in prose, not through ``-r``.
_NAMES_FILE = re.compile(r"(?<![\w/.-])(?:\./)?((?:[\w.-]+/)+requirements?[\w.-]*\.(?:txt|in))\b")
_RUNS_SCRIPT = re.compile(r"(?<![\w/.-])(?:\./)?([\w-]+(?:/[\w.-]+)*\.sh)\b")


def _scripts_run_by(ctx: "FileContext", document: str, text: str) -> str:
    """The install scripts a README runs (VIBE's ``source scripts/install_pip.sh``, which
    installs ``torch==1.4.0``): their commands are its install instructions too."""
    if ".sh" not in text or not os.path.basename(document).lower().startswith("readme"):
        return ""
    folder = os.path.dirname(document)
    scripts = [_run_script(ctx, folder, script) for script in _RUNS_SCRIPT.findall(text)[:8]]
    return "".join("\n" + script for script in scripts if script)


def _run_script(ctx: "FileContext", folder: str, script: str) -> str | None:
    """The text of a script the README in ``folder`` runs: beside it, or, for a bare name
    that is not, the one subfolder holding it (IGEV's top README says ``bash env.sh`` for
    ``IGEV-Stereo/env.sh``, which pins ``torch==1.12.1`` for both of its projects)."""
    found = read_project_file(ctx, os.path.join(folder, script))
    if found is not None or "/" in script:
        return found
    try:
        holders = [e.path for e in os.scandir(folder) if e.is_dir() and os.path.isfile(os.path.join(e.path, script))]
    except OSError:
        return None
    return read_project_file(ctx, os.path.join(holders[0], script)) if len(holders) == 1 else None


def _installed_by_path(folder: str, found: list[str]) -> list[str]:
    """Requirement files elsewhere in the project that the folder's install instructions name."""
    documents = [
        path for path in found
        if _DOCUMENT.match(os.path.basename(path)) and not os.path.basename(path).lower().startswith("dockerfile")
    ]
    if not documents:
        return []
    try:
        key = (folder, tuple((path, os.stat(path).st_mtime_ns) for path in documents))
    except OSError:
        return []
    if key not in _INSTALLED:
        if len(_INSTALLED) > 256:
            _INSTALLED.clear()
        _INSTALLED[key] = _named_requirement_files(folder, documents)
    return _INSTALLED[key]


_INSTALLED: dict[tuple, list[str]] = {}


def _named_requirement_files(folder: str, documents: list[str]) -> list[str]:
    named: list[str] = []
    for path in documents:
        text = _read_small(path)
        if text is None or ("-r " not in text and ".sh" not in text and "requirement" not in text):
            continue
        named += _installed_after_cd(text) + _NAMES_FILE.findall(text)
        for script in _RUNS_SCRIPT.findall(text)[:8]:
            script_text = _read_small(os.path.join(folder, script))
            if script_text is not None:
                named += _INSTALLS_FILE.findall(script_text)
    paths = []
    for relative in named:
        if _SIDE_APPLICATION.search(relative):
            continue  # co-tracker's "`pip install -r gradio_demo/requirements.txt`" is the demo's, not the trainer's
        path = os.path.normpath(os.path.join(folder, relative))
        if not os.path.isfile(path) and os.path.basename(path).startswith("requirement."):
            path = os.path.join(os.path.dirname(path), "requirements." + path.rsplit(".", 1)[1])  # the README's slip
        if path.startswith(folder.rstrip(os.sep) + os.sep) and os.path.isfile(path) and path not in paths:
            paths.append(path)
    return paths


_CD = re.compile(r"^\s*(?:\$\s*)?cd\s+[\"']?([\w./-]+)[\"']?\s*(?:&&|;|$)")


def _installed_after_cd(text: str) -> list[str]:
    """The ``-r`` files an install text names, each relative to the folder a ``cd`` before it
    entered (LLaMA-Adapter's imagebind_LLM: ``cd ImageBind`` then ``pip install -r
    requirements.txt``, torch==1.13.0, then ``cd ../`` for the folder's own file)."""
    if "cd " not in text:
        return _INSTALLS_FILE.findall(text)
    named: list[str] = []
    folder = ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            folder = ""  # a new code block starts where the README is
        entered = _CD.match(line)
        if entered is not None:
            folder = os.path.normpath(os.path.join(folder, entered.group(1)))
            folder = "" if folder == "." else folder
        named += [os.path.join(folder, found) if folder else found for found in _INSTALLS_FILE.findall(line)]
    return named


# Folders of a project's side applications, whose requirements speak for them (their own files
# read them as their folder's requirement files).
_SIDE_APPLICATION = re.compile(
    r"(?:^|/)(?:[\w.]*[_-])?(?:demos?|gradio|streamlit|apps?|web|ui|docs?|examples?|notebooks?)(?:[_-][\w.-]*)?/", re.I
)


def _read_small(path: str) -> str | None:
    try:
        if os.path.getsize(path) > MAX_PROJECT_FILE_BYTES:
            return None
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _notebook_installs(ctx: "FileContext") -> str | None:
    """A notebook's ``!pip install "peft==0.4.0" ...`` lines, one requirement per line: the
    versions its author ran it with (philschmid's QLoRA notebook pins peft 0.4.0). Read from
    the notebook whatever its size: saved outputs make megabytes of a notebook whose install
    cell pins ``torch==1.8.0+cu101`` (Transformers-Tutorials' LayoutLMv2 notebooks)."""
    found: list[str] = []
    cells = _notebook(ctx).get("cells")
    for cell in cells if isinstance(cells, list) else ():
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        for line in _cell_text(cell.get("source")).splitlines():
            command = _PIP_INSTALL.match(line)
            if command is not None:
                found += [word.strip("\"'") for word in command.group(1).split() if not word.startswith("-")]
    return "\n".join(found) or None


# ``!pip install -q "transformers==4.34.0" peft``, ``%pip install``, ``!python -m pip install``.
_PIP_INSTALL = re.compile(r"^\s*[!%](?:python3?\s+-m\s+)?pip3?\s+install\s+(.*)$")


def _candidates(ctx: "FileContext") -> list[str]:
    if not os.path.isfile(ctx.path):
        return []  # code with no file behind it (an editor buffer, a test snippet): nothing to read
    if ctx.path.endswith(".ipynb"):  # its own install lines first (``_notebook_installs``)
        return [ctx.path, *_candidates_around(ctx)]
    return _candidates_around(ctx)


def _candidates_around(ctx: "FileContext") -> list[str]:
    return _kept_for_this_check(ctx, _candidates_around, lambda: _find_candidates_around(ctx))


def _find_candidates_around(ctx: "FileContext") -> list[str]:
    folder = os.path.dirname(os.path.abspath(ctx.path))
    root = None
    project = getattr(ctx, "project", None)
    if project is not None:
        root = os.path.abspath(project.project.root)
    # Within a known project, up to its root however deep the file sits (a vendored
    # ``lavis/common/annotator/uniformer/mmseg/models/backbones/`` module still runs with the
    # root's requirements); outside one, a few folders up, stopping at a repository's top.
    inside = root is not None and (folder == root or folder.startswith(root.rstrip(os.sep) + os.sep))
    found: list[str] = []
    for _ in range(64 if inside else 6):
        found += _folder_candidates(folder)
        if root is not None and folder == root:
            # A project root that is not the repository's top (ogb's nested ``python/setup.py``)
            # reads on up to that top; one outside any repository ends the project.
            if _repository_top(folder) or (_declares_project(folder) and not _in_repository(folder)):
                break
        parent = os.path.dirname(folder)
        if parent == folder or _repository_top(folder):
            break
        folder = parent
    return found


def _declares_project(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, name)) for name in ("pyproject.toml", "setup.py", "setup.cfg"))


def _release(text: str) -> tuple[int, ...]:
    """The release numbers as written (``~=2.1.0`` and ``~=2.1`` admit different releases)."""
    parts = []
    for piece in text.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def _version(text: str) -> tuple[int, ...]:
    """The release numbers to compare, trailing zeros dropped: ``>=5`` and ``5.0`` are one version."""
    parts = list(_release(text))
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def older_allowed(ctx: "FileContext", package: str, version: str) -> str | None:
    """Why the project may run a ``package`` older than ``version`` (``[tool.advisor]
    torch-version``, else its declared requirement's lower bound), or None: nothing says so,
    and advisor assumes a current release."""
    return _kept_for_this_check(ctx, ("older_allowed", package, version), lambda: _older_allowed(ctx, package, version))


def _older_allowed(ctx: "FileContext", package: str, version: str) -> str | None:
    if package == "torch" and getattr(ctx.target, "torch_version", None):
        floor = ctx.target.torch_version
        return f"[tool.advisor] torch-version is {floor}" if _version(floor) < _version(version) else None
    spec = declared(ctx, package)
    if spec is not None and spec.startswith("@"):
        return f"the project pins {package} to `{spec[1:].strip()[:60]}`, whose version advisor cannot read"
    if admits_below(spec, version):
        return f"the project's requirements allow {package}{spec}"
    if package != "torch" and not spec:
        shown = notebook_watermark(ctx, package)
        if shown is not None and _version(shown) < _version(version):
            # stat453's L19 notebooks: ``%watermark -p torch,transformers`` printed transformers 4.6.0.
            return f"the notebook's saved output shows {package} {shown}"
    if package in _LIGHTNING_PACKAGES and not spec:
        gone = _removed_lightning_module(ctx.source)
        if gone is not None and _version(gone[1]) <= _version(version):
            return f"the file imports `{gone[0]}`, which pytorch-lightning {gone[1]} removed: it runs an older one"
    if package == "torch" and not spec:
        cap = _cuda_cap(ctx)
        if cap is not None and _version(cap[1]) < _version(version):
            return f"the project installs torch for CUDA {cap[0]}, whose newest torch is {cap[1]}"
        container = _ngc_cap(ctx)
        if container is not None and _version(container[1]) < _version(version):
            return f"the project builds on NVIDIA's PyTorch container {container[0]}, which has torch {container[1]}"
    if package == "torch":
        ran = notebook_torch(ctx)
        if ran is not None and _version(ran[0]) < _version(version):
            return ran[1]
        python = _python_cap(ctx)
        if python is not None and _version(python[1]) < _version(version):
            return f"the project's environment pins Python {python[0]}, whose newest torch is {python[1]}"
        tested = _ci_python_cap(ctx)
        if tested is not None and _version(tested[1]) < _version(version):
            return f"the project's CI tests on Python {tested[0]}, whose newest torch is {tested[1]}"
        companion = _companion_cap(ctx)
        if companion is not None and _version(companion[2]) < _version(version):
            package_name, pinned, newest = companion
            if spec:
                # EasyOCR's trainer, self-label, pyHGT: a bot bumped the torch line alone; pip
                # cannot install the pair, so which torch runs is the project's guess, not ours.
                return (
                    f"the project pins {package_name} {pinned}, which is built for torch {newest} and cannot "
                    f"install beside its torch{spec}"
                )
            return f"the project pins {package_name} {pinned}, which is built for torch {newest}"
        lightning = _lightning_cap(ctx)
        if lightning is not None and _version(lightning[1]) < _version(version):
            return (
                f"the project pins pytorch-lightning {lightning[0]}, which rejects torch 2's learning-rate "
                f"schedulers: it runs torch {lightning[1]} or older"
            )
        major = _asserted_torch_major(ctx.source)
        if major is not None and major < _version(version)[0]:
            return f"the file asserts torch {major}.x"
        legacy = scalar_loss_indexed(ctx.source)
        if legacy is not None and _version(version) > _version("0.3.1"):
            return f"the file reads its loss as `{legacy}`, which raises from torch 0.4 on: it runs torch 0.3"
        drawn = iterator_next_called(ctx.source)
        if drawn is not None and _version(version) > _version("1.12"):
            return f"the file draws batches with `{drawn}`, which DataLoader iterators lost in torch 1.13: it runs torch 1.12 or older"
        project = getattr(ctx, "project", None)
        if _version(version) > _version("0.3.1") and project is not None and project.runs_with_match(_LOSS_INDEXED_LINE, b".data[0]"):
            # AttnGAN's pretrain_DAMSM.py imports miscc/losses.py, which logs ``g_loss.data[0]``.
            return "a module that runs with the file reads a loss as `loss.data[0]`, which raises from torch 0.4 on: it runs torch 0.3"
        removed = _removed_import(ctx)
        if removed is not None:
            name, newest, why, oldest, where = removed
            if _version(newest) < _version(version):
                return f"{where} `{name}`, which {why}: it runs torch {newest} or older"
            if oldest is not None and _version(oldest) < _version(version):
                return f"{where} `{name}`, which {why}: it runs torch {oldest} to {newest}"
        if _version(version) > _version("2.3") and declared(ctx, "torchtext") is not None:
            return "the project requires torchtext, whose last release (0.18) is built for torch 2.3"
    if spec is None:
        elsewhere = _pinned_elsewhere(ctx, package)
        if elsewhere and all(admits_below(pin, version) for _, pin in elsewhere):
            where, pin = elsewhere[0]
            if len(elsewhere) == 1:
                return f"the repository's only {package} requirement, `{package}{pin}` in `{where}`, allows an older one"
            return (
                f"the repository's {package} requirements (`{package}{pin}` in `{where}` and "
                f"{len(elsewhere) - 1} more) allow older ones"
            )
        printed = _printed_by_other_notebooks(ctx) if not elsewhere and package == "torch" else None
        if printed is not None and _version(printed[0]) < _version(version):
            return f"the torch the repository's notebooks printed is {printed[0]} (`{printed[1]}`)"
    return None


# A package's own metadata: where it sits above a file, that package is the file's project.
_PACKAGE_METADATA = ("pyproject.toml", "setup.py", "setup.cfg")


def _printed_by_other_notebooks(ctx: "FileContext") -> tuple[str, str] | None:
    """The newest torch the project's other notebooks show they ran (a printed
    ``torch.__version__``, ``%watermark``, PyG's wheels; not the kernel's Python), and one that
    shows it, where some do; asked only where no requirement file of the project names torch:
    a course's first homework printed 2.3.1, and every homework runs in that environment."""
    view = getattr(ctx, "project", None)
    if view is None:
        return None
    project = view.project
    shown: list[tuple[str, str]] = []
    for path in project.notebooks:
        if os.path.abspath(path) == os.path.abspath(ctx.path):
            continue
        ran = _printed_torch(path)
        if ran is not None:
            shown.append((ran, os.path.relpath(path, project.root)))
    return max(shown, key=lambda item: _version(item[0])) if shown else None


def _printed_torch(path: str) -> str | None:
    """The torch a notebook file's saved output shows (once per process while unchanged)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if info.st_size > 4 * MAX_PROJECT_FILE_BYTES:
        return None
    key = (path, info.st_mtime_ns, info.st_size)
    if key not in _PRINTED:
        found = _notebook_torch(_notebook_json(path), kernel_python=False)
        if len(_PRINTED) > 1024:
            _PRINTED.clear()
        _PRINTED[key] = found[0] if found else None
    return _PRINTED[key]


_PRINTED: dict[tuple[str, int, int], str | None] = {}


def _names_requirements(name: str) -> bool:
    return bool(
        _REQUIREMENTS.match(name) or _CONDA_ENVIRONMENT.match(name)
        or name in (*_PACKAGE_METADATA, "environment.yml", "environment.yaml")
    )


def _pinned_elsewhere(ctx: "FileContext", package: str) -> list[tuple[str, str]]:
    """The specifiers of ``package`` in the requirement files of the project's other subtrees,
    with their paths from the root, where the file's own folders declare nothing: a course
    repository keeps ``torch==0.4.1`` in ``assignments/mp3/requirements.txt`` and runs every
    assignment with it (share020/dl's ``mp7``). A copy of the package itself counts as
    ``==`` its version (PrefixTuning installs its bundled transformers 3.2.0 with ``pip install
    -e .``). Empty where a requirements file or environment names it bare (a name in
    ``setup.cfg`` or ``pyproject.toml`` may be a tool's setting: isort's known packages)."""
    view = getattr(ctx, "project", None)
    if view is None:
        return []
    project = view.project
    if any(os.path.basename(path) in _PACKAGE_METADATA for path in _candidates_around(ctx)):
        # A package's own metadata that names no torch (co-tracker's, setfit's): its demo's or a
        # baseline script's pin is not what the package runs with.
        return []
    pattern = _requirement(package)
    found: list[tuple[str, str]] = []
    for path in project.files_named(_names_requirements):
        if _SIDE_APPLICATION.search(os.path.relpath(path, project.root).replace(os.sep, "/")):
            continue  # a demo's or the docs' own environment (co-tracker's ``gradio_demo``)
        text = read_project_file(ctx, path)
        if text is None:
            continue
        metadata = os.path.basename(path) in _PACKAGE_METADATA
        bundled = _bundled_version(text, package) if metadata else None
        spec = f"=={bundled}" if bundled else _spec_in(pattern, text)
        if spec == "" and metadata:
            continue
        if spec == "" or spec is not None and spec.startswith("@"):
            return []  # the current release, or a commit of whatever age
        if spec is not None:
            found.append((os.path.relpath(path, project.root), spec))
    return found


def _bundled_version(text: str, package: str) -> str | None:
    """The version of a copy of ``package`` whose own ``setup.py`` / ``pyproject.toml`` this is
    (``name="transformers", version="3.2.0"``)."""
    name = re.search(r"""\bname\s*=\s*["']([\w.-]+)["']""", text)
    if name is None or name.group(1).lower().replace("_", "-") != package.lower().replace("_", "-"):
        return None
    version = re.search(r"""\bversion\s*=\s*["']v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)""", text)
    return version.group(1) if version else None


# PyTorch 0.3's way to read a scalar loss. From 0.4 a loss is a 0-dim tensor and indexing it
# raises ("invalid index of a 0-dim tensor. Use tensor.item()"): pytorch-beginner's scripts.
# The loss by any common name: ``loss``, ``totalLoss``, and DCGAN's ``errD`` / ``errG`` (not ``error``).
_SCALAR_LOSS_INDEXED = re.compile(r"\b(\w*[lL]oss\w*|\w*LOSS\w*|err(?:[A-Z_]\w*)?)\.data\[0\]")
# The same on a line of code (not a comment), in a project file's bytes.
_LOSS_INDEXED_LINE = re.compile(rb"^[^#\n]*\b(?:\w*[lL]oss\w*|\w*LOSS\w*|err(?:[A-Z_]\w*)?)\.data\[0\]", re.M)


# ``it = iter(loader)`` then ``it.next()``: DataLoader iterators kept a Python 2 ``next`` method
# until torch 1.13 (UGATIT's ``trainA_iter.next()``); ``next(it)`` is the spelling that lasted.
_ITERATOR_BOUND = re.compile(r"^[ \t]*(?:self\.)?(\w+)[ \t]*=[ \t]*iter\(", re.M)


def iterator_next_called(source: str) -> str | None:
    """``it.next()`` (or ``iter(loader).next()``) on an iterator the file binds with ``iter(...)``,
    the way code written for torch 1.12 or older drew a batch; None where none is seen."""
    if ".next()" not in source:
        return None
    inline = re.search(r"\biter\([^()\n]*\)\.next\(\)", source)
    if inline is not None:
        return inline.group(0)
    for name in dict.fromkeys(_ITERATOR_BOUND.findall(source)):
        match = re.search(r"(?<![\w.])(?:self\.)?" + re.escape(name) + r"\.next\(\)", source)
        if match is not None:
            return match.group(0)
    return None


def scalar_loss_indexed(source: str) -> str | None:
    """``loss.data[0]`` where the file reads a loss so: it was written for torch 0.3."""
    if ".data[0]" not in source:
        return None
    match = _SCALAR_LOSS_INDEXED.search(source)
    return None if match is None else match.group(0)


# transformers 4.0 moved each model's modules into ``transformers.models.<name>``: a file that
# imports the old flat module (Relphormer's QA script: ``transformers.tokenization_bert``) runs
# the transformers 3 of another project's environment. The shared modules (``modeling_utils``,
# ``tokenization_utils``, ``configuration_utils``, ``modeling_outputs``) stayed, so only
# model names are read.
_FLAT_TRANSFORMERS_MODULE = re.compile(
    r"^[ \t]*(?:from|import)[ \t]+(transformers\.(?:modeling|tokenization|configuration)_(?:bert|bart|gpt2|roberta|t5|xlnet|albert"
    r"|distilbert|electra|longformer|auto|openai|ctrl|xlm|xlm_roberta|transfo_xl|camembert|flaubert|marian|mbart"
    r"|pegasus|reformer|encoder_decoder|lxmert|funnel|dpr|mobilebert|blenderbot|prophetnet|layoutlm))\b",
    re.M,
)


_LIGHTNING_PACKAGES = ("pytorch-lightning", "pytorch_lightning")
# Lightning modules a release removed (torchdyn's tutorials: ``pytorch_lightning.metrics``,
# gone in 1.5, the release that brought ``precision="bf16"``). (pattern, module, removed in)
_REMOVED_LIGHTNING_MODULES = (
    (re.compile(r"^[ \t]*(?:from|import)[ \t]+pytorch_lightning\.metrics\b", re.M), "pytorch_lightning.metrics", "1.5"),
    (re.compile(r"^[ \t]*(?:from|import)[ \t]+pytorch_lightning\.core\.lightning\b", re.M), "pytorch_lightning.core.lightning", "1.9"),
)


def _removed_lightning_module(source: str) -> tuple[str, str] | None:
    """(module, the pytorch-lightning release that removed it) for the first such import of the file."""
    if "pytorch_lightning." not in source:
        return None
    for pattern, module, removed in _REMOVED_LIGHTNING_MODULES:
        if pattern.search(source):
            return module, removed
    return None


def cannot_run_as_declared(ctx: "FileContext") -> str | None:
    """Why the file cannot run in the environment its project declares, or None: it reads a
    loss as torch 0.3 did while the project asks for 0.4 or later (pytorch-beginner: "pytorch
    1.0.0+"), or imports a transformers 3 module while the project asks for transformers 4."""
    return _kept_for_this_check(ctx, cannot_run_as_declared, lambda: _cannot_run_as_declared(ctx))


def _cannot_run_as_declared(ctx: "FileContext") -> str | None:
    flat = _FLAT_TRANSFORMERS_MODULE.search(ctx.source)
    if flat is not None:
        spec = declared(ctx, "transformers")
        if spec and not spec.startswith("@") and admits_below(spec, "4.0") is False:
            return f"the file imports `{flat.group(1)}`, which transformers 4.0 removed, and the project asks for transformers{spec}"
    removed = _removed_trainer_argument(ctx) or _removed_trainer_attribute(ctx)
    if removed is not None:
        return removed
    legacy = scalar_loss_indexed(ctx.source)
    if legacy is None:
        return None
    spec = declared(ctx, "torch")
    if not spec or spec.startswith("@") or admits_below(spec, "0.4") is not False:
        return None
    return f"the file reads its loss as `{legacy}`, which raises from torch 0.4 on, and the project asks for torch{spec}"


# ``Trainer`` arguments Lightning 2.0 no longer takes (removed in 1.7 to 2.0): a project that asks
# for Lightning 2 and passes one cannot build its Trainer (asteroid's Multi-Decoder-DPRNN recipe:
# ``resume_from_checkpoint=``; its FilterbankDesign recipe: ``checkpoint_callback=``).
_REMOVED_TRAINER_ARGUMENTS = frozenset({
    "gpus", "tpu_cores", "ipus", "num_processes", "resume_from_checkpoint", "auto_select_gpus",
    "track_grad_norm", "replace_sampler_ddp", "auto_lr_find", "auto_scale_batch_size", "amp_backend",
    "amp_level", "move_metrics_to_cpu", "multiple_trainloader_mode", "checkpoint_callback",
    "progress_bar_refresh_rate", "flush_logs_every_n_steps", "terminate_on_nan", "stochastic_weight_avg",
    "weights_summary", "process_position", "weights_save_path", "prepare_data_per_node",
})


def _removed_trainer_argument(ctx: "FileContext") -> str | None:
    """A Lightning ``Trainer(...)`` of the file passes an argument Lightning 2.0 removed, in a
    project that asks for Lightning 2.0 or later: the Trainer raises ``TypeError``."""
    if "Trainer" not in ctx.source:
        return None
    for call in ctx.calls(LIGHTNING_TRAINER):  # every spelling of Lightning's Trainer resolves to it
        passed = [arg.keyword.value for arg in call.args if arg.keyword is not None and arg.keyword.value in _REMOVED_TRAINER_ARGUMENTS]
        if not passed:
            continue
        for package in ("pytorch-lightning", "lightning"):
            spec = declared(ctx, package)
            if spec and not spec.startswith("@") and admits_below(spec, "2.0") is False:
                return f"its `Trainer({passed[0]}=...)` is an argument Lightning 2.0 removed, and the project asks for {package}{spec}"
    return None


def _removed_trainer_attribute(ctx: "FileContext") -> str | None:
    """A subclass of transformers' ``Trainer`` reads ``self.use_amp``, which transformers 4.20
    replaced with ``use_cuda_amp`` (the wav2vec2 fine-tuning blog's ``CTCTrainer``, copied into
    soxan), in a project that installs transformers 4.20 or later (or its git main): the
    training step raises ``AttributeError``."""
    if "use_amp" not in ctx.source:
        return None
    for cls in ctx.nodes(cst.ClassDef):
        if not any((ctx.qualname(base.value) or "").startswith("transformers.") and "Trainer" in (ctx.qualname(base.value) or "") for base in cls.bases):
            continue
        reads = assigns = False
        for node in ctx.walk(cls, cst.Attribute):
            if node.attr.value == "use_amp" and isinstance(node.value, cst.Name) and node.value.value == "self":
                target = ctx.parent.get(node)
                if isinstance(target, cst.AssignTarget) or (isinstance(target, (cst.AnnAssign, cst.AugAssign)) and target.target is node):
                    assigns = True
                else:
                    reads = True
        if not reads or assigns:
            continue
        spec = declared(ctx, "transformers")
        if spec is None or spec.startswith("@") or admits_below(spec, "4.20") is not False:
            return None
        asked = f"asks for transformers{spec}" if spec else "installs the current transformers"
        return f"its `{cls.name.value}` reads `self.use_amp`, which transformers 4.20 removed from the Trainer, and the project {asked}"
    return None


# Imports of modules a later release removed, at the top of a file (not under ``try``): the
# program runs the old release. pytorch/examples' ``legacy/snli``: ``from torchtext.legacy
# import data``, gone in torchtext 0.12, whose torch is 1.11; it came with torchtext 0.9 (torch
# 1.8), so the program runs torch 1.8 to 1.10 (bentrevett's sentiment notebooks).
# (pattern, name, newest torch, why[, oldest torch where the module came late[, verb]])
_REMOVED_IMPORTS = (
    (
        re.compile(r"^(?:from|import)\s+torchtext\.legacy\b", re.M), "torchtext.legacy", "1.10",
        "torchtext 0.12 (torch 1.11) removed", "1.8",
    ),
    # NYU-DLSP20: `from torchtext.legacy import data` or `from torchtext import data` by version,
    # then `data.Field(...)`: the Field API either way, which torchtext 0.12 (torch 1.11) removed.
    (
        re.compile(r"^[ \t]*(?:from\s+torchtext(?:\.legacy)?\s+import\s+[^\n]*\bdata\b)[\s\S]*?\bdata\.(?:Field|LabelField|BucketIterator|TabularDataset)\(", re.M),
        "torchtext.data.Field",
        "1.10",
        "torchtext 0.12 (torch 1.11) removed",
    ),
    (
        re.compile(r"^from\s+torchtext\.data\s+import\s+[^\n]*\b(?:Field|BucketIterator|TabularDataset|LabelField)\b", re.M),
        "torchtext.data.Field",
        "1.7",
        "torchtext 0.9 (torch 1.8) moved to torchtext.legacy",
    ),
    # esvit's ``from torch._six import container_abcs``: gone in torch 1.9.
    (
        re.compile(r"^from\s+torch\._six\s+import\s+[^\n]*\b(?:container_abcs|int_classes)\b", re.M),
        "torch._six.container_abcs", "1.8", "torch 1.9 removed",
    ),
    (re.compile(r"^(?:from\s+torch\._six\s+import|import\s+torch\._six\b)", re.M), "torch._six", "1.13", "torch 2.0 removed"),
    # Graph Transformer Networks: ``from torch_geometric.utils import f1_score``, metrics PyG 2.1
    # removed (its issue #41); the last PyG with them, 2.0.4, is built for torch 1.8 to 1.11.
    (
        re.compile(
            r"^from\s+torch_geometric\.utils\s+import\s+[^\n]*\b(?:accuracy|true_positive|true_negative|false_positive"
            r"|false_negative|precision|recall|f1_score|intersection_and_union|mean_iou)\b",
            re.M,
        ),
        "torch_geometric.utils.f1_score", "1.11", "PyG 2.1 (torch 1.12) removed",
    ),
    # minimal-llama's FSDP scripts: ``from torch.distributed.tensor.parallel.fsdp import
    # enable_2d_with_fsdp``, which torch 2.2 removed (pytorch#112473); it came with 2-D
    # parallelism in torch 1.13.
    (
        re.compile(r"^from\s+torch\.distributed\.tensor\.parallel\.fsdp\s+import\s+[^\n]*\benable_2d_with_fsdp\b", re.M),
        "torch.distributed.tensor.parallel.fsdp.enable_2d_with_fsdp", "2.1", "torch 2.2 removed", "1.13",
    ),
    # torchtext's last release, 0.18 (2024), is built for torch 2.3 and fails to load on later ones.
    (re.compile(r"^(?:from|import)\s+torchtext\b", re.M), "torchtext", "2.3", "stopped at 0.18, built for torch 2.3"),
    # stat453's helper.py: ``torch.set_deterministic(True)``, in torch 1.9.0's ``__init__.py``
    # and gone from 1.10.0's (both wheels read); not where the file also knows the new spelling.
    (
        re.compile(r"\A(?![\s\S]*\buse_deterministic_algorithms\b)[\s\S]*?^[^#\n]*\btorch\.set_deterministic\(", re.M),
        "torch.set_deterministic", "1.9", "torch 1.10 removed", None, "calls",
    ),
)


# Each entry in full: what the code does with the API is "imports" unless the entry says.
_REMOVED_ENTRIES = [
    (pattern, name, newest, why, rest[0] if rest else None, rest[1] if len(rest) > 1 else "imports")
    for pattern, name, newest, why, *rest in _REMOVED_IMPORTS
]


def _removed_import(ctx: "FileContext") -> tuple[str, str, str, str | None, str] | None:
    """(module, newest torch, why, oldest torch or None, where) for the first removed module the
    file imports, or else a file of the project that runs in the same program (esvit's
    ``main_esvit.py`` imports ``models``, whose ``cvt_v4_transformer.py`` imports ``torch._six``)."""
    return _kept_for_this_check(ctx, _removed_import, lambda: _find_removed_import(ctx))


def _find_removed_import(ctx: "FileContext") -> tuple[str, str, str, str | None, str] | None:
    project = getattr(ctx, "project", None)
    for pattern, name, newest, why, oldest, verb in _REMOVED_ENTRIES:
        if _hint_of(name).decode() in ctx.source and pattern.search(ctx.source):
            return name, newest, why, oldest, f"the file {verb}"
    for pattern, name, newest, why, oldest, verb in _REMOVED_ENTRIES:
        if project is not None and project.runs_with_match(_TEXT_PATTERNS[pattern], _hint_of(name)):
            return name, newest, why, oldest, f"a module that runs with the file {verb}"
    return None


# The byte patterns a project's texts are searched with, made once.
_TEXT_PATTERNS = {pattern: re.compile(pattern.pattern.encode(), re.M) for pattern, *_ in _REMOVED_IMPORTS}


def _hint_of(name: str) -> bytes:
    """A literal every use of the removed API ``name`` spells: its package (``torchtext``,
    ``torch_geometric``), or for torch's own the name under ``torch`` (``_six``)."""
    parts = name.split(".")
    return (parts[1] if parts[0] == "torch" else parts[0]).encode()


# pytorch-retinanet's ``assert torch.__version__.split('.')[0] == '1'``: the script refuses any other major.
_ASSERTED_MAJOR = re.compile(
    r"^\s*assert\s+(?:torch\.__version__\.split\(\s*['\"]\.['\"]\s*\)\[0\]\s*==\s*['\"](\d+)['\"]"
    r"|torch\.__version__\.startswith\(\s*['\"](\d+)\.?['\"]\s*\))",
    re.M,
)


def _asserted_torch_major(source: str) -> int | None:
    if "__version__" not in source:
        return None
    match = _ASSERTED_MAJOR.search(source)
    return None if match is None else int(match.group(1) or match.group(2))


# The newest torch built for each CUDA toolkit a project may name (``cudatoolkit=11.3``,
# ``+cu113``, ``whl/cu113``, ``pytorch-cuda=11.6``); from 11.8 on, current releases still ship.
_NEWEST_TORCH_FOR_CUDA = {
    "9.2": "1.7.1", "10.0": "1.4.0", "10.1": "1.8.1", "10.2": "1.12.1", "11.0": "1.7.1", "11.1": "1.10.2",
    "11.3": "1.12.1", "11.5": "1.11.0", "11.6": "1.13.1", "11.7": "2.0.1",
}
_CUDA_NAMED = re.compile(r"(?:cudatoolkit|pytorch-cuda|cuda-toolkit)\s*[=\s]\s*(\d+\.\d+)|[+/]cu(\d{2,3})\b", re.I)


# NVIDIA's NGC PyTorch containers (``nvcr.io/nvidia/pytorch:21.11-py3``): the newest torch release
# each one contains, up to the release month given (a container's ``2.2.0a0`` build counts as 2.1).
_NGC_TORCH = (
    ((20, 12), "1.7"), ((21, 5), "1.8"), ((21, 10), "1.9"), ((22, 1), "1.10"), ((22, 4), "1.11"),
    ((22, 11), "1.12"), ((23, 4), "1.13"), ((23, 10), "2.0"), ((24, 1), "2.1"), ((24, 4), "2.2"),
    ((24, 7), "2.3"), ((24, 10), "2.4"), ((25, 3), "2.5"),
)
_NGC_IMAGE = re.compile(r"nvcr\.io/nvidia/pytorch:(\d{2})\.(\d{2})")


def _ngc_cap(ctx: "FileContext") -> tuple[str, str] | None:
    """The NGC container a Dockerfile (or install instructions) builds on, and the newest torch
    release in it, when that is an old one."""
    for path in _candidates(ctx):
        text = read_project_file(ctx, path)
        if text is None or "nvcr.io" not in text:
            continue
        match = _NGC_IMAGE.search(text)
        if match is None:
            continue
        release = (int(match.group(1)), int(match.group(2)))
        for until, torch in _NGC_TORCH:
            if release <= until:
                return f"{match.group(1)}.{match.group(2)}", torch
        return None
    return None


def _cuda_cap(ctx: "FileContext") -> tuple[str, str] | None:
    """The CUDA toolkit the nearest requirement file or install instructions install torch
    for, when that toolkit's newest torch is an old one: SimMIM's ``conda install pytorch
    torchvision cudatoolkit=11.3`` gives at most torch 1.12.1."""
    for path in _candidates(ctx):
        text = read_project_file(ctx, path)
        if text is None:
            continue
        for match in _CUDA_NAMED.finditer(text):
            if match.group(1):
                cuda = match.group(1)
            else:
                digits = match.group(2)
                cuda = f"{digits[:-1]}.{digits[-1]}"
            if cuda in _NEWEST_TORCH_FOR_CUDA:
                return cuda, _NEWEST_TORCH_FOR_CUDA[cuda]
    return None


def declares_at_least(ctx: "FileContext", package: str, version: str) -> bool:
    """Whether the project itself keeps ``package`` at ``version`` or newer: a declared floor
    (``torch>=2.10``) or ``[tool.advisor] torch-version``. Unlike :func:`older_allowed`, a bare
    or missing requirement does not count: it installs the current release only in a fresh
    environment, and for a fix that would raise on an older one that is not enough."""
    if package == "torch" and getattr(ctx.target, "torch_version", None):
        return _version(ctx.target.torch_version) >= _version(version)
    spec = declared(ctx, package)
    return bool(spec and spec.strip()) and admits_below(spec, version) is False


def admits_from(spec: str | None, version: str) -> bool | None:
    """Whether a project declaring ``spec`` may run ``version`` or a newer one: None when
    nothing is declared; False under a pin or a ceiling below it (``torch==1.12.1``,
    ``torch<2``, ``~=1.13``)."""
    if spec is None:
        return None
    wanted = _version(version)
    for operator, text in _CLAUSE.findall(spec):
        value = _version(text.replace("*", "0"))
        if operator == "==" and "*" not in text and value < wanted:
            return False
        if operator == "<" and value <= wanted or operator == "<=" and value < wanted:
            return False
        written = _release(text)
        if operator == "~=" and len(written) >= 2:
            ceiling = (written[0] + 1,) if len(written) == 2 else (written[0], written[1] + 1)
            if ceiling <= wanted:
                return False
    return True


def runs_only_below(ctx: "FileContext", version: str) -> str | None:
    """Why the project runs a torch older than ``version`` and never ``version`` itself, or
    None: its requirement pins or caps torch below it (``torch==1.12.1``), or what caps the
    torch it can install does (a CUDA build, an NVIDIA container, a Python, a companion
    package, an old Lightning, a notebook's recorded run). A floor alone (``torch>=1.8``)
    admits a current release, and does not count."""
    if getattr(ctx.target, "torch_version", None):
        floor = ctx.target.torch_version
        return f"[tool.advisor] torch-version is {floor}" if _version(floor) < _version(version) else None
    spec = declared(ctx, "torch")
    if spec and spec.strip() and admits_from(spec, version) is False:
        return f"the project's requirements hold torch{spec.strip()}"
    if spec and spec.strip():
        return None  # the requirement admits it: what it installs speaks before any guess
    caps = [
        (_cuda_cap(ctx), "the project installs torch for CUDA {}, whose newest torch is {}"),
        (_ngc_cap(ctx), "the project builds on NVIDIA's PyTorch container {}, which has torch {}"),
        (_python_cap(ctx), "the project's environment pins Python {}, whose newest torch is {}"),
        (_lightning_cap(ctx), "the project pins pytorch-lightning {}, which runs torch {} or older"),
    ]
    for cap, reason in caps:
        if cap is not None and _version(cap[1]) < _version(version):
            return reason.format(*cap)
    ran = notebook_torch(ctx)
    if ran is not None and _version(ran[0]) < _version(version):
        return ran[1]
    return None


def admits_below(spec: str | None, version: str) -> bool | None:
    """Whether a project declaring ``spec`` may run a version older than ``version``: None
    when nothing is declared; a bare name (``torch``) installs the current release: False."""
    if spec is None:
        return None
    if not spec.strip():
        return False
    floor: tuple[int, ...] | None = None
    wanted = _version(version)
    for operator, text in _CLAUSE.findall(spec):
        value = _version(text.replace("*", "0"))
        if operator in (">=", ">", "==", "~="):
            floor = value if floor is None or value > floor else floor
        elif operator == "<" and value <= wanted or operator == "<=" and value < wanted:
            return True  # a ceiling below it ("PyTorch before 0.4"): only older releases
    return floor is not None and floor < wanted


# -- what a notebook's saved state says about where it ran ------------------------------------
# A notebook keeps the evidence of its last run: the cells' outputs (``print(torch.__version__)``
# gave ``1.6.0``), the wheels it installed (PyG's index for ``torch-1.6.0``), the kernel's
# Python (3.7.6), and on Colab the GPU it ran on (``"gpuType": "T4"``).
def _watermark_line(package: str) -> "re.Pattern[str]":
    """``torch: 1.9.0a0+d819a21``, a line ``%watermark -p torch,...`` prints (rasbt's notebooks)."""
    return re.compile(rf"^{re.escape(package)}\s*:\s*([0-9]+\.[0-9]+(?:\.[0-9]+)?)", re.M)


_WATERMARK_OUTPUT = _watermark_line("torch")
# ``1.6.0``, ``'2.3.1+cu121'``, or worded: ``PyTorch Version: 1.6.0+cu101`` (the MoA solution's notebooks).
_VERSION_OUTPUT = re.compile(
    r"^\s*(?:(?:py)?torch(?:[ \t]+version)?[ \t]*[:=]?[ \t]*)?'?v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)(?:[+a-z][\w.+]*)?'?\s*$",
    re.M | re.I,
)
_PYG_WHEELS = re.compile(r"(?:pytorch-geometric\.com|data\.pyg\.org)/whl/torch-([0-9]+\.[0-9]+(?:\.[0-9]+)?)")
# The newest torch for a Python: 1.10 was the last for 3.6, 1.13 the last for 3.7.
_NEWEST_TORCH_FOR_PYTHON = {(3, 5): "1.4.0", (3, 6): "1.10.2", (3, 7): "1.13.1"}
# GPUs without bf16 and TF32 (before Ampere), as Colab and Kaggle name them.
_PRE_AMPERE = re.compile(r"^(?:nvidia)?(?:tesla)?[-_ ]?(?:gpu)?[-_ ]?(K80|P4|P100|T4|V100)(?:x2)?$", re.I)


def notebook_torch(ctx: "FileContext") -> tuple[str, str] | None:
    """The torch a notebook last ran with, as its saved state shows it, and how it shows it:
    None for a script, or a notebook that shows nothing."""
    if not ctx.path.endswith(".ipynb"):
        return None
    return ctx.memo(notebook_torch, lambda: _notebook_torch(_notebook(ctx)))


def notebook_watermark(ctx: "FileContext", package: str) -> str | None:
    """The version of ``package`` a notebook's ``%watermark -p ...`` output shows; None for a
    script, or a notebook that shows none."""
    if not ctx.path.endswith(".ipynb"):
        return None
    pattern = _watermark_line(package)
    cells = _notebook(ctx).get("cells")
    for cell in cells if isinstance(cells, list) else ():
        if not isinstance(cell, dict) or "%watermark" not in _cell_text(cell.get("source")):
            continue
        for output in cell.get("outputs") or ():
            text = _cell_text(output.get("text")) if isinstance(output, dict) else ""
            found = pattern.search(text)
            if found is not None:
                return found.group(1)
    return None


# GPUs as READMEs and printed output name them (nvidia-smi's ``Tesla P100-PCIE-16GB``, "two
# Nvidia 2080-Ti GPUs", "Kaggle GPU notebooks"): before Ampere, without bf16 and TF32 ...
_OLDER_GPU = re.compile(
    r"\b(?:Tesla[\s-]*)?(?:K20X?|K40|K80|M40|M60|P40|P100|V100S?)\b"
    r"|\b(?:Tesla|NVIDIA)[\s-]*(?:T4|P4)\b|\b(?:T4|P4)[\s-]*GPUs?\b"
    r"|\b(?:GTX|RTX|GeForce)[\s-]*(?:9[5-8]0|10[5-8]0|16[5-6]0|20[6-8]0)(?:[\s-]*(?:Ti|Super))?\b"
    r"|\b(?:10[5-8]0|20[6-8]0)[\s-]*Ti\b|\bTitan[\s-]*(?:X|Xp|V|RTX|Black)\b"
    r"|\bQuadro[\s-]*(?:RTX[\s-]*[4-8]000|P\d{3,4}|GV100)\b",
    re.I,
)
# Where a README sends its readers to run the code, rather than what the authors trained on
# ("We use 4*V100-16G to fine-tune" is history; a user may well have an A100): Kaggle's GPUs
# are P100s and T4s.
_OLDER_PLATFORM = re.compile(r"\bKaggle(?:'s)?[\s-]+(?:GPU[\s-]+)?(?:notebook|kernel|GPU)s?\b", re.I)
# ... and Ampere or newer, or bf16 itself: a project naming one of these runs where the fixes work.
_NEWER_GPU = re.compile(
    r"\b(?:A100|A800|H100|H800|H200|GH200|B100|B200|GB200|A6000|A5000|A4000|A40|A30|A10G?|L4|L40S?|L20)\b"
    r"|\b(?:RTX|GeForce)[\s-]*(?:30[5-9]0|40[6-9]0|50[6-9]0)\b|\b(?:30[6-9]0|40[6-9]0|50[7-9]0)[\s-]*Ti\b"
    r"|\bRTX[\s-]*(?:A[2-6]000|6000[\s-]*Ada)\b|\b(?:Ampere|Hopper|Blackwell|bf16|bfloat16|tf32)\b",
    re.I,
)
_PROSE = re.compile(r"\.(?:md|rst|txt)$", re.I)


def recorded_gpu(ctx: "FileContext") -> tuple[str, str] | None:
    """The pre-Ampere GPU the project records running on, and where it says so: a notebook's
    saved output (nvidia-smi's ``Tesla P100-PCIE-16GB``, ``torch.cuda.get_device_name()``), or
    a README or install document from the file's folder up to the project root that sends its
    readers to Kaggle's GPUs (the MoA solution: "Kaggle Notebook instances with GPU"). None
    where none does, or where one names an Ampere-or-newer GPU, or bf16, too."""
    return ctx.memo(recorded_gpu, lambda: _recorded_gpu(ctx))


def _recorded_gpu(ctx: "FileContext") -> tuple[str, str] | None:
    # (where, text, whether it is what a run printed): a run names its GPU; prose only counts
    # where it sends readers to a platform.
    texts: list[tuple[str, str, bool]] = []
    if ctx.path.endswith(".ipynb"):
        texts.append(("the notebook's saved output", notebook_outputs(ctx), True))
    root = os.path.dirname(os.path.abspath(ctx.path))
    view = getattr(ctx, "project", None)
    if view is not None:
        root = os.path.abspath(view.project.root)
    for path in _candidates_around(ctx) if os.path.isfile(ctx.path) else ():
        if _DOCUMENT.match(os.path.basename(path)) and _PROSE.search(path):
            text = read_project_file(ctx, path)
            if text:
                texts.append((f"`{os.path.relpath(path, root)}`", text, False))
    older: tuple[str, str] | None = None
    for where, text, output in texts:
        if _NEWER_GPU.search(text):
            return None
        found = (_OLDER_GPU if output else _OLDER_PLATFORM).search(text)
        if found is not None and older is None:
            older = (" ".join(found.group(0).split()) if output else "Kaggle's GPUs (P100, T4)", where)
    return older


def notebook_outputs(ctx: "FileContext") -> str:
    """The text of a notebook's saved outputs; empty for a script."""
    if not ctx.path.endswith(".ipynb"):
        return ""
    return ctx.memo(notebook_outputs, lambda: _notebook_outputs(_notebook(ctx)))


def _notebook_outputs(notebook: dict) -> str:
    """The text of a notebook's saved outputs."""
    pieces: list[str] = []
    cells = notebook.get("cells")
    for cell in cells if isinstance(cells, list) else ():
        for output in (cell.get("outputs") or ()) if isinstance(cell, dict) else ():
            if not isinstance(output, dict):
                continue
            data = output.get("data")
            pieces.append(_cell_text(output.get("text")) or (_cell_text(data.get("text/plain")) if isinstance(data, dict) else ""))
    return "\n".join(pieces)


def notebook_gpu(ctx: "FileContext") -> str | None:
    """The pre-Ampere GPU (no bf16, no TF32) a notebook's metadata says it runs on: Colab's
    ``gpuType`` (``"T4"``), ``"a Colab GPU"`` where a Colab notebook asks for a GPU without
    naming one (the free tier's have been K80, P100 and T4), ``"a TPU"`` where it asks for
    a TPU; None otherwise."""
    if not ctx.path.endswith(".ipynb"):
        return None
    return ctx.memo(notebook_gpu, lambda: _notebook_gpu(_notebook(ctx)))


# ``conda create -n deep-learning python=3.6`` (udacity's course), ``- python=3.7`` in an
# environment file, ``FROM python:3.6``: an exact Python, which caps the torch it can install.
_PYTHON_PIN = re.compile(
    r"(?<![\w-])python\s*(?:==?|:)\s*3\.([0-9]+)(?![0-9]|\.?[0-9]*\s*[,<>|*+])"
    # BertSum's README: "**Python version**: This code is in Python3.6" (a statement, not a floor).
    r"|\b(?:code|it) is (?:written )?in python\s?3\.([0-9]+)\b(?![.0-9]*\s*(?:\+|or\b|and\b|[<>]))"
    # PEN-Net's README: "* Install python3.6".
    r"|\binstall\s+python\s?3\.([0-9]+)\b(?![.0-9]*\s*(?:\+|or\b|and\b|[<>]))"
    # TextSnake's README: "highly recommanded with: - **Python3.6**", a list item of its own.
    r"|^[ \t]*[-*+][ \t]+(?:\*\*|__)?[ \t]*python[ \t]?3\.([0-9]+)[ \t]*(?:\*\*|__)?[ \t]*$",
    re.I | re.M,
)


def _companion_cap(ctx: "FileContext") -> tuple[str, str, str] | None:
    """The torchvision or torchaudio the project holds at an old release, with that release and
    the torch it is built for: each release of them requires one torch release, so a pin of
    ``torchvision==0.4.1`` beside ``torch==1.13.1`` (a bot's bump of the one line, pyHGT) is an
    environment whose torch is 1.3 or one that does not install. ``torchvision<0.2.x`` (pure
    Python, for any torch of its time) says nothing."""
    for package in ("torchvision", "torchaudio"):
        spec = declared(ctx, package)
        if not spec or spec.startswith("@"):
            continue
        ceiling = _ceiling(spec)
        if ceiling is None or len(ceiling) < 2:
            continue
        newest = _companion_torch(package, ceiling)
        if newest is not None:
            return package, ".".join(str(part) for part in ceiling), newest
    return None


def _companion_torch(package: str, release: tuple[int, ...]) -> str | None:
    """The torch a torchvision or torchaudio release is built for (their release notes' tables)."""
    major, minor = release[0], release[1]
    if package == "torchvision" and major == 0:
        if minor == 3:
            return "1.1"
        if minor == 4:
            return "1.2" if release[2:3] == (0,) else "1.3"  # 0.4.0 for torch 1.2, 0.4.1 and 0.4.2 for 1.3
        if 5 <= minor <= 14:
            return f"1.{minor - 1}"
        if minor >= 15:
            return f"2.{minor - 15}"
        return None
    if package == "torchaudio" and major == 0 and 3 <= minor <= 13:
        return f"1.{minor}"
    if package == "torchaudio" and major == 2:
        return f"2.{minor}"
    return None


def _lightning_cap(ctx: "FileContext") -> tuple[str, str] | None:
    """The pytorch-lightning the project holds below 1.9, and the newest torch it runs (1.13):
    before 1.9 Lightning checks schedulers against ``_LRScheduler``, which torch 2's schedulers
    no longer derive from, and ``configure_optimizers`` returning one raises (VideoTransformer
    pins ``pytorch-lightning==1.3.8``)."""
    for package in ("pytorch-lightning", "pytorch_lightning"):
        spec = declared(ctx, package)
        if not spec or spec.startswith("@"):
            continue
        ceiling = _ceiling(spec)
        if ceiling is not None and ceiling < _version("1.9"):
            return ".".join(str(part) for part in ceiling), "1.13"
    return None


def _ceiling(spec: str) -> tuple[int, ...] | None:
    """The newest version a specifier admits, where it says (``==1.3.8``, ``<1.6``, ``<=1.5.10``)."""
    found: tuple[int, ...] | None = None
    for operator, text in _CLAUSE.findall(spec):
        if operator in ("==", "<=", "<", "~=") and "*" not in text:
            value = _version(text)
            found = value if found is None or value < found else found
    return found


def _python_cap(ctx: "FileContext") -> tuple[str, str] | None:
    """The Python the project's install instructions or environment file pin, and the newest
    torch for it, when that is an old one (the nearest file that pins one speaks)."""
    for path in _candidates_around(ctx):
        text = read_project_file(ctx, path)
        if text is None or "python" not in text.lower():
            continue
        for match in _PYTHON_PIN.finditer(text):
            minor = int(next(group for group in match.groups() if group))
            newest = _NEWEST_TORCH_FOR_PYTHON.get((3, minor))
            if newest is not None:
                return f"3.{minor}", newest
    return None


# GitHub Actions' ``python-version: 3.7`` / ``python-version: ['3.7', '3.8']`` (also in a
# ``matrix:``), Travis's ``python: - "3.6"``.
_CI_PYTHON = re.compile(r"^\s*(?:-\s*)?python(?:-version)?\s*:\s*(\[[^\]\n]*\]|[\"']?3\.[0-9]+[\"']?)", re.M)
_CI_PYTHON_LIST_ITEM = re.compile(r"^\s*-\s*[\"']?3\.([0-9]+)[\"']?\s*$", re.M)
_CI_PYTHON_LIST = re.compile(r"^(\s*)python\s*:\s*$((?:\n\1\s+-[^\n]*)+)", re.M)  # Travis's list
_PYTHON_3_MINOR = re.compile(r"3\.([0-9]+)")


def _ci_python_cap(ctx: "FileContext") -> tuple[str, str] | None:
    """The oldest Python the project's CI runs on, and the newest torch for it, when that is an
    old one (ICON's GPU workflow: ``python-version: 3.7``, so torch 1.13.1 at most, beside CPU
    jobs on 3.9 to 3.12): a fix that needs a newer torch breaks that job."""
    def find() -> tuple[str, str] | None:
        minors = [int(m) for text in _ci_texts(ctx) for m in _ci_python_minors(text)]
        oldest = min(minors, default=None)
        newest = _NEWEST_TORCH_FOR_PYTHON.get((3, oldest)) if oldest is not None else None
        return (f"3.{oldest}", newest) if newest is not None else None

    return ctx.memo(_ci_python_cap, find)


def _ci_python_minors(text: str) -> list[str]:
    """The Python 3 minor versions a CI configuration names."""
    found: list[str] = []
    for match in _CI_PYTHON.finditer(text):
        found += _PYTHON_3_MINOR.findall(match.group(1))
    for block in _CI_PYTHON_LIST.finditer(text):
        found += [m.group(1) for m in _CI_PYTHON_LIST_ITEM.finditer(block.group(2))]
    return found


def _notebook(ctx: "FileContext") -> dict:
    """The notebook's JSON, read once per context (recorded for the results cache)."""
    if getattr(ctx, "project", None) is not None:
        ctx.project.consulted.add(os.path.abspath(ctx.path))
    return ctx.memo(_notebook, lambda: _notebook_json(ctx.path))


def _notebook_json(path: str) -> dict:
    import json

    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _cell_text(value: object) -> str:
    return "".join(value) if isinstance(value, list) else value if isinstance(value, str) else ""


def _notebook_torch(notebook: dict, kernel_python: bool = True) -> tuple[str, str] | None:
    found: list[tuple[str, str]] = []
    cells = notebook.get("cells")
    for cell in cells if isinstance(cells, list) else ():
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = _cell_text(cell.get("source"))
        wheels = _PYG_WHEELS.search(source)
        if wheels is not None:
            found.append((wheels.group(1), f"the notebook installs PyTorch Geometric's wheels for torch {wheels.group(1)}"))
        watermark = "%watermark" in source and "torch" in source
        if "torch.__version__" not in source and not watermark:
            continue
        for output in cell.get("outputs") or ():
            if not isinstance(output, dict):
                continue
            data = output.get("data")
            text = _cell_text(output.get("text")) or (_cell_text(data.get("text/plain")) if isinstance(data, dict) else "")
            # ``%watermark -p torch`` prints ``torch: 1.9.0a0+d819a21`` (rasbt's course notebooks).
            printed = _WATERMARK_OUTPUT.search(text) if watermark else _VERSION_OUTPUT.search(text)
            if printed is not None:
                found.append((printed.group(1), f"the notebook's saved output shows torch {printed.group(1)}"))
                break
    metadata = notebook.get("metadata")
    language = metadata.get("language_info") if isinstance(metadata, dict) and kernel_python else None
    python = language.get("version") if isinstance(language, dict) else None
    if isinstance(python, str) and re.match(r"3\.[0-9]+", python):
        newest = _NEWEST_TORCH_FOR_PYTHON.get(tuple(int(p) for p in python.split(".")[:2]))  # type: ignore[arg-type]
        if newest is not None:
            found.append((newest, f"the notebook was saved from Python {python}, whose newest torch is {newest}"))
    return min(found, key=lambda item: _version(item[0])) if found else None


def _notebook_gpu(notebook: dict) -> str | None:
    metadata = notebook.get("metadata")
    if not isinstance(metadata, dict):
        return None
    colab = metadata.get("colab")
    named = metadata.get("gpuType") or (colab.get("gpuType") if isinstance(colab, dict) else None)
    kaggle = metadata.get("kaggle")
    if isinstance(kaggle, dict) and isinstance(kaggle.get("accelerator"), str):
        named = named or kaggle["accelerator"]
    if isinstance(named, str):
        match = _PRE_AMPERE.match(named.strip())
        return match.group(1).upper() if match else None
    accelerator = str(metadata.get("accelerator", "")).upper()
    if isinstance(colab, dict) and accelerator == "GPU":
        return "a Colab GPU"
    if accelerator == "TPU":
        return "a TPU"
    return None
