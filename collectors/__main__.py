"""`python -m collectors`: profile the attention variants and write a collection.

    python -m collectors --out traces/h100                # every variant, article shape, bf16
    python -m collectors --device cpu --out sample_traces/cpu
    python -m collectors --variants naive sdpa-flash --compile --out traces/x
    python -m collectors sweep|dispatch|e2e|serve|article --help    # the article's other measurements
    python -m collectors ranks --out DIR                 # a data-parallel job on CPU ranks, one trace each
    python -m collectors gpu-run                         # the prepared GPU run: every part, budgeted

Exit status: 0 when every profiled variant passed parity, 1 when one failed (unless
--allow-parity-failures), 2 for bad input (one error line, no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from pathlib import Path

from collectors import hub
from collectors.collection import Config, collect
from collectors.options import DTYPES, PROG, Parser, UsageError, device, out_dir, positive
from collectors.report import render
from collectors.variants import VARIANTS, Shape

GPU_SHAPE = Shape(batch=8, heads=16, seq=1024, head_dim=64)
CPU_SHAPE = Shape(batch=2, heads=8, seq=512, head_dim=64)
SUBCOMMANDS = {
    "sweep": "collectors.sweep",
    "dispatch": "collectors.dispatch",
    "e2e": "collectors.e2e",
    "serve": "collectors.serve",
    "article": "collectors.article",
    "gpu-run": "collectors.gpu_run",
    "ranks": "collectors.ranks",
}
"""`python -m collectors NAME ...`: the article's measurements, each a module with main(argv) -> int."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = Parser(
        prog=PROG,
        description="Profile attention variants under torch.profiler. "
        f"Other modes: {PROG} {{{','.join(SUBCOMMANDS)}}} --help.",
    )
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when available, else cpu"
    )
    p.add_argument("--dtype", choices=tuple(DTYPES), help="default bf16 on CUDA, fp32 on CPU")
    for field in ("batch", "heads", "seq", "head_dim"):
        gpu, cpu = getattr(GPU_SHAPE, field), getattr(CPU_SHAPE, field)
        p.add_argument("--" + field.replace("_", "-"), type=positive, help=f"default {gpu} on GPU, {cpu} on CPU")
    p.add_argument(
        "--variants",
        nargs="+",
        default=list(VARIANTS),
        metavar="NAME",
        help=f"any of: {', '.join(VARIANTS)} (default all; commas also separate)",
    )
    p.add_argument("--active", type=positive, default=3, help="profiled steps per trace (default 3)")
    p.add_argument("--compile", action="store_true", help="also profile each variant under torch.compile")
    p.add_argument(
        "--cuda-graphs",
        action="store_true",
        help='also profile each variant compiled with mode="reduce-overhead", its kernels replayed '
        "from a CUDA graph (CUDA only)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random q, k, v (default 0)")
    p.add_argument("--out", type=Path, help="output folder, created if missing (default traces/<device>)")
    p.add_argument(
        "--hub-kernel",
        metavar="REPO_OR_PATH",
        help="where the hub variant's FlashAttention comes from: a kernels-hub repo id "
        "(org/name[@VERSION_OR_REVISION], default kernels-community/flash-attn2 v2) or a kernel "
        "folder on disk (see collectors/hub.py)",
    )
    p.add_argument(
        "--allow-parity-failures",
        action="store_true",
        help="exit 0 even when a variant's output disagrees with the fp32 reference",
    )
    return p.parse_args(argv)


def build_config(args: argparse.Namespace, argv: list[str]) -> Config:
    """Resolve defaults that depend on the device; raise UsageError for impossible requests."""
    dev = device(args.device)
    gpu = dev.type == "cuda"
    if args.cuda_graphs and not gpu:
        raise UsageError("--cuda-graphs: CUDA graphs need a CUDA device (this run is on the CPU)")
    base = GPU_SHAPE if gpu else CPU_SHAPE
    shape = Shape(
        batch=args.batch or base.batch,
        heads=args.heads or base.heads,
        seq=args.seq or base.seq,
        head_dim=args.head_dim or base.head_dim,
    )
    dtype = DTYPES[args.dtype or ("bf16" if gpu else "fp32")]
    return Config(
        variants=_variants(args.variants),
        device=dev,
        dtype=dtype,
        shape=shape,
        active=args.active,
        compile=args.compile,
        cuda_graphs=args.cuda_graphs,
        out=out_dir(args.out or Path("traces") / dev.type),
        seed=args.seed,
        command=shlex.join([*PROG.split(), *argv]),
    )


def _variants(given: list[str]) -> list[str]:
    names = [name for item in given for name in item.split(",") if name]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise UsageError(f"unknown variant {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    return list(dict.fromkeys(names))


def main(argv: list[str] | None = None) -> int:
    """Run the collector; return the exit status (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        return int(importlib.import_module(SUBCOMMANDS[argv[0]]).main(argv[1:]))
    try:
        args = parse_args(argv)
        cfg = build_config(args, argv)
        if args.hub_kernel is not None and not args.hub_kernel.strip():
            raise UsageError("--hub-kernel: empty; give a repo id or a folder")
        hub.select(args.hub_kernel)  # None: the default repo (also undoes an earlier call's choice)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    manifest = collect(cfg)
    print(render(manifest, cfg.out))
    failed = [run.variant for run in manifest.runs if not run.parity["passed"]]
    if failed and not args.allow_parity_failures:
        print(f"parity failed: {', '.join(failed)} (--allow-parity-failures to exit 0)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
