"""`python -m collectors sweep --out DIR`: every attention variant over a grid of sequence length,
head_dim, dtype and causal/non-causal; forward time, achieved TFLOP/s, the peak memory each call
adds, which backend really ran, refusals, out-of-memory points and parity against fp32.

    python -m collectors sweep --out sweeps/h100                     # the full GPU grid
    python -m collectors sweep --device cpu --seq 64 256 --head-dim 64 --dtype fp32 --out /tmp/s

Writes DIR/sweep.csv and DIR/sweep.parquet (one row per point and variant, fixed column order,
rows sorted by dtype, head_dim, causal, seq, then variant order) and DIR/sweep.json (provenance:
versions, device, host, UTC time, command, grid, reps, FLOP convention, columns and units).
A variant that cannot run at a point (unavailable, refused, out of memory) or fails (error) is a
row with its status and reason (collectors.measure.outcome); the sweep goes on. Exit status: 0 when the sweep ran, 2 for bad input.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import polars as pl
import torch
from torch import Tensor

from collectors import measure, mode
from collectors.collection import make_inputs
from collectors.options import DTYPES, PROG, Parser, at_least, device, out_dir, positive
from collectors.parity import compare, reference
from collectors.tables import SWEEP
from collectors.variants import VARIANTS, Shape, Variant

MODE = f"{PROG} sweep"
GPU_SEQS = tuple(256 << i for i in range(7))  # 256 .. 16384
CPU_SEQS = tuple(64 << i for i in range(5))  # 64 .. 1024
HEAD_DIMS = (64, 128, 256)
GPU_TOKENS, GPU_WIDTH = 16384, 2048
CPU_TOKENS, CPU_WIDTH = 1024, 256
MIN_REPS = 10
REFERENCE_CHUNK_BYTES = 1 << 28
"""Scores bytes the fp32 reference may hold at once; it runs over head slices beyond that."""


@dataclass(frozen=True)
class Config:
    """What to sweep. batch/heads None: chosen per point (see `batch_heads`)."""

    device: torch.device
    seqs: tuple[int, ...]
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    causals: tuple[bool, ...]
    variants: tuple[str, ...]
    batch: int | None
    heads: int | None
    reps: int
    warmup: int
    seed: int
    memory_cap: int | None
    out: Path
    command: str

    @property
    def tokens_width(self) -> tuple[int, int]:
        """(T, W) of the batch x heads rule on this device."""
        return (GPU_TOKENS, GPU_WIDTH) if self.device.type == "cuda" else (CPU_TOKENS, CPU_WIDTH)


def batch_heads(cfg: Config, seq: int, head_dim: int) -> tuple[int, int]:
    """FlashAttention's benchmark convention unless given: batch = max(1, T // seq) and
    heads = max(1, W // head_dim), T=16384 tokens and W=2048 model width on a GPU, T=1024 and
    W=256 on the CPU; --batch / --heads fix either."""
    tokens, width = cfg.tokens_width
    return cfg.batch or max(1, tokens // seq), cfg.heads or max(1, width // head_dim)


# ---------------------------------------------------------------- command line


def parser() -> Parser:
    p = mode.parser(MODE, __doc__)
    p.add_argument(
        "--seq",
        type=positive,
        nargs="+",
        metavar="N",
        help="sequence lengths (default 256..16384 doubling on GPU, 64..1024 on CPU)",
    )
    p.add_argument(
        "--head-dim",
        type=positive,
        nargs="+",
        metavar="D",
        help=f"head dimensions (default {' '.join(map(str, HEAD_DIMS))})",
    )
    p.add_argument("--dtype", choices=tuple(DTYPES), nargs="+", help="dtypes (default all: bf16 fp16 fp32)")
    p.add_argument(
        "--batch",
        type=positive,
        help=f"batch size at every point (default max(1, T // seq): FlashAttention's benchmark "
        f"convention, T={GPU_TOKENS} tokens on GPU, T={CPU_TOKENS} on CPU)",
    )
    p.add_argument(
        "--heads",
        type=positive,
        help=f"heads at every point (default max(1, W // head_dim), W={GPU_WIDTH} on GPU, W={CPU_WIDTH} on CPU)",
    )
    p.add_argument("--causal", action="store_true", help="causal points only (default: causal and non-causal)")
    p.add_argument("--no-causal", action="store_true", help="non-causal points only (default: both)")
    p.add_argument(
        "--variants",
        nargs="+",
        default=list(VARIANTS),
        metavar="NAME",
        help=f"any of: {', '.join(VARIANTS)} (default all; commas also separate; flex compiles "
        "on first use, ~20 s on a CPU)",
    )
    p.add_argument(
        "--reps",
        type=at_least(MIN_REPS),
        default=MIN_REPS,
        help=f"timed repetitions per point and variant (default and minimum {MIN_REPS})",
    )
    p.add_argument("--warmup", type=at_least(0), default=3, help="untimed calls before timing (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random q, k, v (default 0)")
    p.add_argument(
        "--memory-cap",
        type=positive,
        metavar="BYTES",
        help="let each variant's calls at a point allocate at most BYTES more than the process "
        "holds before them (CUDA: per-process memory fraction; CPU: RLIMIT_AS); what fails "
        "is recorded as oom",
    )
    return p


def build_config(argv: list[str]) -> Config:
    """Parse argv and resolve device-dependent defaults; raise UsageError for bad input."""
    args = parser().parse_args(argv)
    dev = device(args.device)
    gpu = dev.type == "cuda"
    names = mode.variant_names(args.variants)
    if args.causal == args.no_causal:
        causals = (False, True)
    else:
        causals = (bool(args.causal),)
    return Config(
        device=dev,
        seqs=tuple(sorted(set(args.seq or (GPU_SEQS if gpu else CPU_SEQS)))),
        head_dims=tuple(sorted(set(args.head_dim or HEAD_DIMS))),
        dtypes=tuple(sorted(set(args.dtype or DTYPES))),
        causals=causals,
        variants=tuple(n for n in VARIANTS if n in names),
        batch=args.batch,
        heads=args.heads,
        reps=args.reps,
        warmup=args.warmup,
        seed=args.seed,
        memory_cap=args.memory_cap,
        out=out_dir(args.out),
        command=shlex.join([*MODE.split(), *argv]),
    )


# ---------------------------------------------------------------- one point


@dataclass(frozen=True)
class Point:
    """One grid point: input shape, dtype name and masking."""

    dtype: str
    head_dim: int
    causal: bool
    seq: int
    batch: int
    heads: int

    @property
    def shape(self) -> Shape:
        return Shape(batch=self.batch, heads=self.heads, seq=self.seq, head_dim=self.head_dim)


def fp32_reference(qkv: tuple[Tensor, Tensor, Tensor], causal: bool) -> Tensor:
    """collectors.parity.reference over slices of heads, so that no slice's fp32 scores exceed
    REFERENCE_CHUNK_BYTES (one head at least); same values as one call."""
    q, k, v = qkv
    b, h, s, d = q.shape
    per_head = s * s * 4
    step = max(1, REFERENCE_CHUNK_BYTES // per_head)
    flat = [t.reshape(1, b * h, s, d) for t in qkv]
    parts = [reference(*(t[:, i : i + step] for t in flat), causal=causal) for i in range(0, b * h, step)]
    return torch.cat(parts, dim=1).reshape(b, h, s, d)


def run_variant(
    cfg: Config,
    variant: Variant,
    point: Point,
    qkv: tuple[Tensor, Tensor, Tensor],
    ref: Tensor | None,
    ref_problem: str | None,
) -> dict[str, object]:
    """Measure one variant at one point; every outcome is a row (SWEEP's columns), never an exception."""
    row = _row(cfg, variant, point)
    dtype = DTYPES[point.dtype]
    try:
        fn = variant.bind(qkv[0], causal=point.causal)
    except Exception as exc:  # noqa: BLE001 - a variant that cannot be set up is a row, not a crash
        return _failed(row, *mode.failed_call(exc, variant))
    caught: list = []
    try:
        with measure.memory_cap(cfg.memory_cap, cfg.device), measure.catching_warnings() as caught:
            with torch.no_grad():
                out = fn(*qkv)
        parity = compare(out, ref, dtype) if ref is not None else None  # uncapped: our work, not the variant's
        del out
        with measure.memory_cap(cfg.memory_cap, cfg.device):
            timing = measure.time_forward(fn, qkv, reps=cfg.reps, warmup=cfg.warmup)
    except Exception as exc:  # noqa: BLE001 - refusals, OOM, unavailability and errors are outcomes
        mode.release(cfg.device)
        return _failed(row, *mode.failed_call(exc, variant, [str(w.message) for w in caught]))
    row.update(
        time_ms=timing.median_ms,
        time_ms_p10=timing.p10_ms,
        time_ms_p90=timing.p90_ms,
        reps=timing.reps,
        tflops=measure.tflops(row["flops"], timing.median_ms),
    )
    try:
        seen = measure.observe(fn, qkv)
        row["backend_ran"], row["evidence"] = measure.backend_ran(seen.names, variant.backend)
        row["peak_mem_bytes"] = seen.peak_mem_bytes
    except Exception as exc:  # noqa: BLE001 - timing stands; say why the rest is missing
        mode.release(cfg.device)
        row["backend_ran"], row["reason"] = "unknown", f"profiled call failed: {measure.one_line(str(exc))}"
    if parity is None:
        row["reason"] = f"parity not checked: {ref_problem}"
    else:
        row["parity_max_abs"] = parity.max_abs
        if not parity.passed:
            row["status"] = "parity_failed"
            row["reason"] = (
                f"max |out - ref| = {parity.max_abs:.3g} exceeds atol {parity.atol:g} + "
                f"rtol {parity.rtol:g} * |ref| ({point.dtype})"
            )
    return row


def _row(cfg: Config, variant: Variant, point: Point) -> dict[str, object]:
    row: dict[str, object] = dict.fromkeys(SWEEP.columns)
    row.update(
        variant=variant.name,
        device=cfg.device.type,
        dtype=point.dtype,
        batch=point.batch,
        heads=point.heads,
        seq=point.seq,
        head_dim=point.head_dim,
        causal=point.causal,
        status="ok",
        flops=measure.attention_flops(point.batch, point.heads, point.seq, point.head_dim, point.causal),
        scores_bytes=measure.scores_bytes(point.batch, point.heads, point.seq, DTYPES[point.dtype]),
    )
    return row


def _failed(row: dict[str, object], status: str, reason: str) -> dict[str, object]:
    row.update(status=status, reason=reason)
    return row


# ---------------------------------------------------------------- the sweep


def points(cfg: Config) -> list[Point]:
    """Every grid point in row order: dtype, head_dim, causal (False first), seq."""
    return [
        Point(dtype, head_dim, causal, seq, *batch_heads(cfg, seq, head_dim))
        for dtype in cfg.dtypes
        for head_dim in cfg.head_dims
        for causal in cfg.causals
        for seq in cfg.seqs
    ]


def sweep(cfg: Config, echo: Callable[[str], None] = print) -> pl.DataFrame:
    """Run every variant at every point; return the rows (SWEEP's columns, in row order). `echo` gets one
    table line per row as it is measured."""
    rows: list[dict[str, object]] = []
    echo(table_header())
    for point in points(cfg):
        try:
            qkv = make_inputs(point.shape, DTYPES[point.dtype], cfg.device, cfg.seed)
        except Exception as exc:  # noqa: BLE001 - inputs too large for the device: every variant is oom
            mode.release(cfg.device)
            status, reason = measure.outcome(exc)
            for name in cfg.variants:
                rows.append(_failed(_row(cfg, VARIANTS[name], point), status, f"inputs: {reason}"))
                echo(table_line(rows[-1]))
            continue
        ref, ref_problem = None, None
        try:
            ref = fp32_reference(qkv, point.causal)
        except Exception as exc:  # noqa: BLE001
            mode.release(cfg.device)
            ref_problem = f"fp32 reference failed: {measure.oom_reason(exc) if measure.is_oom(exc) else exc}"
        for name in cfg.variants:
            rows.append(run_variant(cfg, VARIANTS[name], point, qkv, ref, ref_problem))
            echo(table_line(rows[-1]))
        del qkv, ref
        mode.release(cfg.device)
    return to_frame(rows)


def to_frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    """Rows as a frame with SWEEP's columns and types, sorted by dtype, head_dim, causal, seq, variant order."""
    order = {name: i for i, name in enumerate(VARIANTS)}
    return (
        SWEEP.frame(rows)
        .with_columns(pl.col("variant").replace_strict(order, return_dtype=pl.Int64).alias("_order"))
        .sort("dtype", "head_dim", "causal", "seq", "_order", maintain_order=True)
        .drop("_order")
    )


def write(cfg: Config, frame: pl.DataFrame) -> None:
    """DIR/sweep.csv, DIR/sweep.parquet and DIR/sweep.json."""
    tokens, width = cfg.tokens_width
    fields = {
        "grid": {
            "seq": list(cfg.seqs),
            "head_dim": list(cfg.head_dims),
            "dtype": list(cfg.dtypes),
            "causal": list(cfg.causals),
            "variants": list(cfg.variants),
            "batch": cfg.batch if cfg.batch else f"max(1, {tokens} // seq)",
            "heads": cfg.heads if cfg.heads else f"max(1, {width} // head_dim)",
        },
        "batch_heads_rule": (
            "FlashAttention's benchmark convention: batch = max(1, T // seq), heads = max(1, W // head_dim), "
            f"T={tokens} tokens, W={width} width on this device ({'GPU' if cfg.device.type == 'cuda' else 'CPU'}); "
            "--batch / --heads override"
        ),
        "reps": cfg.reps,
        "warmup": cfg.warmup,
        "seed": cfg.seed,
        "timing": (
            "CUDA events around each call (device time)"
            if cfg.device.type == "cuda"
            else "time.perf_counter_ns around each call"
        )
        + f"; {cfg.warmup} untimed calls first",
        "quantile_method": measure.QUANTILE_METHOD,
        "flop_convention": measure.FLOP_CONVENTION,
        "peak_memory_method": measure.CUDA_PEAK_METHOD if cfg.device.type == "cuda" else measure.CPU_PEAK_METHOD,
        "backend_method": "op and kernel names of one profiled call, classified with "
        "collectors.measure.SDPA_BACKENDS (dashboard BACKEND_TABLE names; + eager, flex, hub)",
        "parity": "collectors.parity: fp32 reference on the same inputs, torch.allclose rule with dtype tolerances",
        "memory_cap_bytes": cfg.memory_cap,
    }
    mode.write(
        SWEEP,
        frame,
        cfg.out,
        measure.provenance(cfg.device, cfg.command),
        fields,
        row_order="dtype, head_dim, causal (false first), seq, then variant order",
        counts={"rows": frame.height, "statuses": SWEEP.status_counts(frame)},
    )


# ---------------------------------------------------------------- text table

_TABLE = (
    "{variant:<15} {dtype:<5} {head_dim:>4} {causal:<6} {seq:>6} {batch:>5} {heads:>5} {status:<13} "
    "{backend:<10} {time:>10} {tflops:>8} {peak:>10}  {reason}"
)


def table_header() -> str:
    return _TABLE.format(
        variant="variant",
        dtype="dtype",
        head_dim="D",
        causal="causal",
        seq="seq",
        batch="B",
        heads="H",
        status="status",
        backend="backend",
        time="ms",
        tflops="TFLOP/s",
        peak="peak MiB",
        reason="reason",
    )


def table_line(row: dict[str, object]) -> str:
    """One row of the stdout table: median ms, TFLOP/s, peak MiB; the reason cut to 60 characters."""

    peak = row["peak_mem_bytes"]
    return _TABLE.format(
        variant=row["variant"],
        dtype=row["dtype"],
        head_dim=row["head_dim"],
        causal=str(row["causal"]).lower(),
        seq=row["seq"],
        batch=row["batch"],
        heads=row["heads"],
        status=row["status"],
        backend=row["backend_ran"] or "-",
        time=mode.number(row["time_ms"], ".4f"),
        tflops=mode.number(row["tflops"], ".4f"),
        peak=mode.number(None if peak is None else peak / 2**20, ".3f"),
        reason=(row["reason"] or "")[:60],
    ).rstrip()


def main(argv: list[str]) -> int:
    """Run the sweep; 0 when it ran, 1 when a row is an error, 2 for bad input (one error line, no traceback)."""
    return mode.main(MODE, argv, build_config, _run)


def _run(cfg: Config) -> int:
    frame = sweep(cfg, echo=lambda line: print(line, flush=True))
    write(cfg, frame)
    print(mode.closing_line(SWEEP, frame, cfg.out, "sweep.parquet", "sweep.json"), flush=True)
    return mode.exit_status(SWEEP, frame, MODE, cfg.out)
