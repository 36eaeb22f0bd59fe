"""Load FlashAttention-2 from the Hugging Face kernels hub, or say exactly why not, fast.

The `hub` variant is optional: without a CUDA device, the `kernels` package, or the hub (offline,
kernel not cached) it raises `Unavailable` with the reason, and the collection goes on.
No retry loops: a kernel already in the local HF cache is loaded offline; HF_HUB_OFFLINE=1 is
honoured; otherwise one short TCP probe of the hub decides before `get_kernel` is called.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import urlparse

import torch

from collectors.variants import Unavailable

HUB_REPO = "kernels-community/flash-attn2"
HUB_VERSION = 2
PROBE_TIMEOUT_S = 3.0


def load_flash_attn_func(device: torch.device, version: int = HUB_VERSION) -> Callable[..., object]:
    """Return the hub kernel's `flash_attn_func`; raise Unavailable with the reason."""
    if device.type != "cuda":
        raise Unavailable(f"{HUB_REPO} ships CUDA builds only; this run is on {device.type}")
    try:
        import kernels
        from huggingface_hub import constants
    except ImportError as exc:
        raise Unavailable(f"the `kernels` package is not installed ({exc}); pip install kernels") from None

    cache = Path(os.environ.get("KERNELS_CACHE") or constants.HF_HUB_CACHE)
    cached = _is_cached(cache, version)
    if not cached and not constants.HF_HUB_OFFLINE:
        _probe_hub(constants.ENDPOINT, cache, version)
    try:
        with _offline(constants, cached):
            module = kernels.get_kernel(HUB_REPO, version=version)
    except Exception as exc:  # any failure of an optional third-party loader is a skip
        call = f"get_kernel({HUB_REPO!r}, version={version})"
        raise Unavailable(f"{call} failed: {type(exc).__name__}: {exc}") from None
    func = getattr(module, "flash_attn_func", None)
    if func is None:
        raise Unavailable(f"{HUB_REPO} v{version} has no flash_attn_func in its build for this machine")
    return func


def _is_cached(cache: Path, version: int) -> bool:
    """True when the HF cache holds a ref for this kernel version (kernel or legacy model layout)."""
    org, name = HUB_REPO.split("/")
    refs = [cache / f"{kind}--{org}--{name}" / "refs" / f"v{version}" for kind in ("kernels", "models")]
    return any(ref.is_file() for ref in refs)


def _probe_hub(endpoint: str, cache: Path, version: int) -> None:
    """One TCP connect to the hub (timeout PROBE_TIMEOUT_S seconds); Unavailable if it fails."""
    if os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy"):
        return  # the proxy decides; a direct probe would be wrong
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise Unavailable(
            f"{host}:{port} unreachable ({exc}) and {HUB_REPO} v{version} is not in the HF cache {cache}; "
            "download it once while online, or set HF_HUB_OFFLINE=1"
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
