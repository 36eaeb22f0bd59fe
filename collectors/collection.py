"""Run a collection: every requested variant, checked for parity, profiled, listed in runs.json.

For each variant: bind it (a missing kernel or package is a skip), run it once on the shared
inputs (a RuntimeError from PyTorch, e.g. a forced SDPA backend this device cannot run, is a skip
whose reason is PyTorch's text plus any warnings it raised), compare with the fp32 reference,
then profile it. A variant that fails parity is still profiled, and flagged. With `compile`, each
variant that ran eagerly is also run under torch.compile as a separate trace; a compile failure
(e.g. no C++ compiler) is a skip with its reason. A variant skipped eagerly is listed once.
"""

from __future__ import annotations

import contextlib
import datetime
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from collectors.manifest import Manifest, Run, Skip
from collectors.parity import Parity, compare, reference
from collectors.profile import describe, device_name, profile_attention
from collectors.report import run_label
from collectors.variants import VARIANTS, Attention, Shape, Unavailable, Variant

QKV = tuple[Tensor, Tensor, Tensor]


@dataclass(frozen=True)
class Config:
    """What to collect and where."""

    variants: list[str]
    device: torch.device
    dtype: torch.dtype
    shape: Shape
    active: int
    compile: bool
    out: Path
    seed: int
    command: str
    cuda_graphs: bool = False


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device, seed: int) -> QKV:
    """q, k, v ~ N(0, 1), drawn in fp32 on the CPU from `seed` (same values on any device)."""
    gen = torch.Generator().manual_seed(seed)
    dims = (shape.batch, shape.heads, shape.seq, shape.head_dim)
    q, k, v = (torch.randn(dims, generator=gen).to(device=device, dtype=dtype) for _ in range(3))
    return q, k, v


def collect(cfg: Config, log: Callable[[str], None] | None = None) -> Manifest:
    """Collect every variant in cfg into cfg.out; write and return the manifest."""
    log = log or _stderr
    qkv = make_inputs(cfg.shape, cfg.dtype, cfg.device, cfg.seed)
    ref = reference(*qkv)
    manifest = _new_manifest(cfg)
    for name in cfg.variants:
        variant = VARIANTS[name]
        ran = _collect_one(cfg, variant, qkv, ref, manifest, compiled=False, log=log)
        if ran and cfg.compile:
            _collect_one(cfg, variant, qkv, ref, manifest, compiled=True, log=log)
        if ran and cfg.cuda_graphs:
            _collect_one(cfg, variant, qkv, ref, manifest, compiled=True, graphs=True, log=log)
        manifest.write(cfg.out)
    manifest.write(cfg.out)
    return manifest


def _collect_one(
    cfg: Config,
    variant: Variant,
    qkv: QKV,
    ref: Tensor,
    manifest: Manifest,
    *,
    compiled: bool,
    graphs: bool = False,
    log: Callable[[str], None],
) -> bool:
    """Check and profile one (variant, compiled) pair; record a Run or a Skip. True if it ran.
    graphs: compile with mode="reduce-overhead", so that the kernels replay from a CUDA graph."""
    label = run_label(variant.name, compiled, graphs)
    try:
        fn = variant.bind(qkv[0])
        if compiled:
            fn = torch.compile(fn, mode="reduce-overhead") if graphs else torch.compile(fn)
        with _kernel_names(compiled):
            out = _first_call(fn, qkv, compiled)
    except Unavailable as exc:
        manifest.skipped.append(Skip(variant.name, variant.backend, compiled, str(exc), cuda_graphs=graphs))
        log(f"{label}: skipped: {exc}")
        return False
    parity = compare(out, ref, cfg.dtype)
    del out
    stem = f"{variant.name}.graphs" if graphs else f"{variant.name}.compiled" if compiled else variant.name
    meta = describe(
        variant=variant.name,
        backend=variant.backend,
        shape=cfg.shape,
        q=qkv[0],
        compiled=compiled,
        seed=cfg.seed,
        parity=parity,
    )
    meta["cuda_graphs"] = graphs
    if graphs:
        # what the graph captured, for attributing its replayed kernels to ops (attnscope --graph-source):
        # the compiled twin of the same variant, profiled into this collection just before (no graph node
        # ids are in a trace; the twin's kernels come in the same order, each under its op chain)
        twin = next(
            (r.trace for r in manifest.runs if r.variant == variant.name and r.compiled and not r.cuda_graphs), None
        )
        if twin is not None:
            meta["graph_source"] = twin
    written = profile_attention(
        fn, qkv, label=variant.name, out_dir=cfg.out, stem=stem, active=cfg.active, metadata=meta
    )
    manifest.runs.append(
        Run(
            variant.name,
            variant.backend,
            compiled,
            written.trace.name,
            written.table.name,
            parity.as_dict(),
            cuda_graphs=graphs,
        )
    )
    log(f"{label}: {_parity_line(parity)} -> {written.trace.name}")
    return True


def _first_call(fn: Attention, qkv: QKV, compiled: bool) -> Tensor:
    """Run fn once; turn "this cannot run here" into Unavailable with PyTorch's own words."""
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        try:
            return fn(*qkv)
        except Unavailable:
            raise
        except Exception as exc:
            if compiled:  # dynamo/inductor errors come in many types; all mean "no compiled run"
                raise Unavailable(f"torch.compile failed: {_first_lines(exc)}") from None
            if not isinstance(exc, RuntimeError):
                raise
            said = [str(w.message).strip() for w in caught]
            raise Unavailable("; ".join([str(exc).strip(), *said])) from None


def _kernel_names(compiled: bool) -> contextlib.AbstractContextManager[object]:
    """While compiling: have inductor wrap each generated C++ kernel in a record_function, so CPU
    traces name the fused kernels (e.g. graph_0_cpp_fused__softmax_masked_fill_mul_view_0)."""
    if not compiled:
        return contextlib.nullcontext()
    import torch._inductor.config as inductor_config

    return inductor_config.patch({"cpp.enable_kernel_profile": True})


def _first_lines(exc: BaseException, lines: int = 2, chars: int = 500) -> str:
    """Type and the first non-empty lines of a (often very long) compiler error."""
    text = " / ".join([line.strip() for line in str(exc).splitlines() if line.strip()][:lines])
    return f"{type(exc).__name__}: {text}"[:chars]


def _parity_line(parity: Parity) -> str:
    verdict = "parity ok" if parity.passed else "PARITY FAILED"
    return f"{verdict} (max abs {parity.max_abs:.3g}, max rel {parity.max_rel:.3g})"


def _new_manifest(cfg: Config) -> Manifest:
    return Manifest(
        collection=cfg.out.resolve().name,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        command=cfg.command,
        device=cfg.device.type,
        device_name=device_name(cfg.device),
        dtype=str(cfg.dtype).removeprefix("torch."),
        shape=cfg.shape.as_dict(),
        active_steps=cfg.active,
        seed=cfg.seed,
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
    )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
