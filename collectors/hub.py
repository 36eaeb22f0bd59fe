"""Load FlashAttention-2 from the Hugging Face kernels hub or from a kernel folder on disk, or say
exactly why not, fast.

The `hub` variant is optional: without a CUDA device, the `kernels` package, or the hub (offline,
kernel not cached) it raises `Unavailable` with the reason, and the collection goes on.
No retry loops: a kernel already in the local HF cache is loaded offline; HF_HUB_OFFLINE=1 is
honoured; otherwise one short TCP probe of the hub decides before `get_kernel` is called.

Where the kernel comes from (`--hub-kernel REPO_OR_PATH`, see `select`):
- a hub repo id, `org/name` or `org/name@REF` (REF: a version number such as `2`, or a branch, tag
  or commit): `kernels.get_kernel`. The default, kernels-community/flash-attn2 version 2, ships
  CUDA builds only, so on another device it is refused before anything is loaded.
- a local folder (anything that exists on disk, or starts with `/`, `.` or `~`): with the `kernels`
  package, its local loader `kernels.get_local_kernel` (a kernel repository or build folder with
  metadata.json); when that package is missing, or its loader cannot read the folder (a plain
  Python package has no metadata.json), the folder's Python package is imported directly: the
  folder itself when it holds `__init__.py`, else its only package among `*/` and `build/*/*/`.
  A folder is allowed on any device: a local build may be a CPU build (or a torch stand-in), and
  whether it runs on this device is decided by its first call, as for every variant.

`load_kernel` returns a `HubKernel`: the function plus where it came from and which loader found
it (`HubKernel.describe()` is the JSON block the collectors record).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import os
import re
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator
from urllib.parse import urlparse

import torch

from collectors.unavailable import Unavailable

HUB_REPO = "kernels-community/flash-attn2"
HUB_VERSION = 2
PROBE_TIMEOUT_S = 3.0
CUDA_ONLY_REPOS = frozenset({HUB_REPO})
"""Hub repos known to ship CUDA builds only: refused at once on another device."""

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w.\-/]+)?$")
_selected: str | None = None


@dataclass(frozen=True)
class HubKernel:
    """A loaded FlashAttention kernel and where it came from.

    source: the repo id (with @REF) or the folder as given; kind: "repo" or "path"; loader: the
    call that loaded it; module: the imported module's name; module_file: its file (None for a
    compiled or namespace module); note: why a fallback loader was used ('' when none was).
    """

    func: Callable[..., object] = field(repr=False)
    source: str
    kind: str
    loader: str
    module: str
    module_file: str | None
    note: str = ""

    def describe(self) -> dict[str, Any]:
        """JSON-ready description (everything but the function)."""
        return {
            "source": self.source,
            "kind": self.kind,
            "loader": self.loader,
            "module": self.module,
            "module_file": self.module_file,
            "note": self.note,
        }


def select(source: str | None) -> None:
    """Use `source` (a repo id, `repo@REF`, or a folder) for every later hub load; None: the default."""
    global _selected
    _selected = source or None


def selected() -> str:
    """The kernel source the hub variant loads now (HUB_REPO unless `select` chose another)."""
    return _selected or HUB_REPO


def is_path(source: str) -> bool:
    """True when `source` names a folder rather than a hub repo id: it exists on disk, starts with
    '/', '.' or '~', or does not look like `org/name[@REF]`."""
    if source.startswith(("/", ".", "~")) or Path(source).expanduser().exists():
        return True
    return not _REPO_ID.match(source)


def load_flash_attn_func(
    device: torch.device, version: int = HUB_VERSION, source: str | None = None
) -> Callable[..., object]:
    """Return the selected kernel's `flash_attn_func`; raise Unavailable with the reason."""
    return load_kernel(device, version=version, source=source).func


def load_kernel(device: torch.device, version: int = HUB_VERSION, source: str | None = None) -> HubKernel:
    """Load `flash_attn_func` from `source` (default: `selected()`); raise Unavailable with the reason.
    `version` applies to a repo id given without @REF."""
    source = source or selected()
    if is_path(source):
        return load_folder(Path(source).expanduser(), given=source)
    return _load_repo(source, device, version)


# ---------------------------------------------------------------- a hub repo


def _load_repo(source: str, device: torch.device, default_version: int) -> HubKernel:
    repo, _, ref = source.partition("@")
    if not ref:
        ref = str(default_version) if repo == HUB_REPO else "main"
    version = int(ref) if ref.isdigit() else None
    label = f"{repo} v{version}" if version is not None else f"{repo}@{ref}"
    if repo in CUDA_ONLY_REPOS and device.type != "cuda":
        raise Unavailable(f"{repo} ships CUDA builds only; this run is on {device.type}")
    try:
        import kernels
        from huggingface_hub import constants
    except ImportError as exc:
        raise Unavailable(f"the `kernels` package is not installed ({exc}); pip install kernels") from None

    cache = Path(os.environ.get("KERNELS_CACHE") or constants.HF_HUB_CACHE)
    ref_name = f"v{version}" if version is not None else ref
    cached = _is_cached(cache, repo, ref_name)
    if not cached and not constants.HF_HUB_OFFLINE:
        _probe_hub(constants.ENDPOINT, cache, label)
    kwargs: dict[str, Any] = {"version": version} if version is not None else {"revision": ref}
    call = f"get_kernel({repo!r}, {', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
    try:
        with _offline(constants, cached):
            module = kernels.get_kernel(repo, **kwargs)
    except Exception as exc:  # any failure of an optional third-party loader is a skip
        raise Unavailable(f"{call} failed: {type(exc).__name__}: {exc}") from None
    func = getattr(module, "flash_attn_func", None)
    if func is None:
        raise Unavailable(f"{label} has no flash_attn_func in its build for this machine")
    return HubKernel(func, source, "repo", f"kernels.{call}", _module_name(module), _module_file(module))


def _is_cached(cache: Path, repo: str, ref_name: str) -> bool:
    """True when the HF cache holds this ref of the repo (kernel or legacy model layout)."""
    org, name = repo.split("/")
    refs = [cache / f"{kind}--{org}--{name}" / "refs" / ref_name for kind in ("kernels", "models")]
    return any(ref.is_file() for ref in refs)


def _probe_hub(endpoint: str, cache: Path, label: str) -> None:
    """One TCP connect to the hub (timeout PROBE_TIMEOUT_S seconds); Unavailable if it fails."""
    if os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy"):
        return  # the proxy decides; a direct probe would be wrong
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise Unavailable(
            f"{host}:{port} unreachable ({exc}) and {label} is not in the HF cache {cache}; "
            "download it once while online, set HF_HUB_OFFLINE=1, or pass a kernel folder with --hub-kernel PATH"
        ) from None


@contextlib.contextmanager
def _offline(constants: object, offline: bool) -> Iterator[None]:
    """Make huggingface_hub resolve from the local cache only while the block runs."""
    saved = getattr(constants, "HF_HUB_OFFLINE")
    if offline:
        setattr(constants, "HF_HUB_OFFLINE", True)
    try:
        yield
    finally:
        setattr(constants, "HF_HUB_OFFLINE", saved)


# ---------------------------------------------------------------- a folder on disk


def load_folder(folder: Path, given: str | None = None) -> HubKernel:
    """Load `flash_attn_func` from a kernel folder (module docstring); Unavailable naming the folder."""
    given = given or str(folder)
    if not folder.exists():
        raise Unavailable(f"--hub-kernel {given}: no such folder ({folder.resolve()})")
    if not folder.is_dir():
        raise Unavailable(f"--hub-kernel {given}: not a folder ({folder.resolve()})")
    note = ""
    module: ModuleType | None = None
    loader = ""
    local = _kernels_local_loader()
    if local is None:
        note = "the `kernels` package is not installed (or has no get_local_kernel): imported the package directly"
    else:
        try:
            module = _call_local_loader(local, folder)
            loader = "kernels.get_local_kernel"
        except Exception as exc:  # a plain package folder is no kernels build: fall back, say why
            note = (
                f"kernels.get_local_kernel could not load it ({type(exc).__name__}: {_one_line(exc)}): "
                "imported the package directly"
            )
    if module is None:
        package = _find_package(folder, given)
        module = _import_package(package, given)
        loader = f"importlib ({package.resolve()})"
    func = getattr(module, "flash_attn_func", None)
    if not callable(func):
        raise Unavailable(f"--hub-kernel {given}: the package {_module_name(module)!r} has no flash_attn_func")
    return HubKernel(func, given, "path", loader, _module_name(module), _module_file(module), note)


def _kernels_local_loader() -> Callable[..., ModuleType] | None:
    try:
        import kernels
    except ImportError:
        return None
    return getattr(kernels, "get_local_kernel", None)


def _call_local_loader(local: Callable[..., ModuleType], folder: Path) -> ModuleType:
    """kernels.get_local_kernel(repo_path) (newer) or (repo_path, package_name) (older releases)."""
    params = inspect.signature(local).parameters
    if "package_name" in params:
        return local(folder, _find_package(folder, str(folder)).name)
    return local(folder)


def _find_package(folder: Path, given: str) -> Path:
    """The folder itself when it is a package, else its only package among */ and build/*/*/."""
    if (folder / "__init__.py").is_file():
        return folder
    found = sorted(
        {
            p.parent
            for pattern in ("*/__init__.py", "build/*/*/__init__.py")
            for p in folder.glob(pattern)
            if "__pycache__" not in p.parts
        }
    )
    if not found:
        raise Unavailable(
            f"--hub-kernel {given}: no Python package in this folder (no __init__.py in it, "
            "in a subfolder, or in build/<variant>/<package>)"
        )
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in found[:6])
        raise Unavailable(
            f"--hub-kernel {given}: several packages ({names}); name one of them, or install "
            "the `kernels` package to pick the build variant for this machine"
        )
    return found[0]


def _import_package(package: Path, given: str) -> ModuleType:
    """Import the package folder under a name unique to its path (no clash with installed packages)."""
    digest = hashlib.sha256(str(package.resolve()).encode()).hexdigest()[:12]
    name = f"attnscope_hub_{package.name.replace('-', '_')}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if spec is None or spec.loader is None:
        raise Unavailable(f"--hub-kernel {given}: cannot import {package}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the folder's own code failed: a skip, with its words
        del sys.modules[name]
        raise Unavailable(
            f"--hub-kernel {given}: importing {package} failed: {type(exc).__name__}: {_one_line(exc)}"
        ) from None
    return module


def _module_name(module: object) -> str:
    return str(getattr(module, "__name__", type(module).__name__))


def _module_file(module: object) -> str | None:
    found = getattr(module, "__file__", None)
    return str(found) if found else None


def _one_line(exc: BaseException, chars: int = 300) -> str:
    return " / ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:chars]
