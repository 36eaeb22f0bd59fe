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

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import polars as pl
import torch
from torch import Tensor

from collectors import measure
from collectors.collection import make_inputs
from collectors.options import DTYPES, PROG, Parser, UsageError, device, out_dir, positive
from collectors.parity import compare, reference
from collectors.variants import VARIANTS, Shape, Variant

MODE = f"{PROG} sweep"
GPU_SEQS = tuple(256 << i for i in range(7))  # 256 .. 16384
CPU_SEQS = tuple(64 << i for i in range(5))  # 64 .. 1024
HEAD_DIMS = (64, 128, 256)
GPU_TOKENS, GPU_WIDTH = 16384, 2048
CPU_TOKENS, CPU_WIDTH = 1024, 256
MIN_REPS = 10
FORCED = ("math", "flash", "efficient", "cudnn")
"""Variant backends that force one SDPA backend: a RuntimeError on their first call is a refusal."""
STATUSES = ("ok", "refused", "oom", "parity_failed", "unavailable", "error")
REFERENCE_CHUNK_BYTES = 1 << 28
"""Scores bytes the fp32 reference may hold at once; it runs over head slices beyond that."""

COLUMNS: dict[str, tuple[pl.DataType, str]] = {
    "variant": (pl.String, "attention variant (collectors.variants.VARIANTS)"),
    "backend_ran": (
        pl.String,
        "backend the call really ran, from a profiled call's op/kernel names: cpu_flash, "
        "flash, efficient, cudnn, math, eager, flex, hub or unknown; null when the variant did not run",
    ),
    "device": (pl.String, "cpu or cuda"),
    "dtype": (pl.String, "input dtype: bf16, fp16 or fp32"),
    "batch": (pl.Int64, "batch size"),
    "heads": (pl.Int64, "attention heads"),
    "seq": (pl.Int64, "sequence length, tokens (queries = keys)"),
    "head_dim": (pl.Int64, "head dimension"),
    "causal": (pl.Boolean, "causal (lower-triangular) attention"),
    "status": (
        pl.String,
        "ok, refused (forced backend cannot run), oom, parity_failed, unavailable (a known reason: no backend "
        "for this device or dtype, a package missing) or error (anything else: the variant failed)",
    ),
    "reason": (
        pl.String,
        "why the status is not ok (PyTorch's text for refusals; bytes asked for an oom); null when ok",
    ),
    "time_ms": (pl.Float64, "median forward time, milliseconds"),
    "time_ms_p10": (pl.Float64, "10th percentile forward time, milliseconds"),
    "time_ms_p90": (pl.Float64, "90th percentile forward time, milliseconds"),
    "reps": (pl.Int64, "timed repetitions behind the time columns"),
    "flops": (pl.Int64, "FLOPs of one forward: 4*batch*heads*seq^2*head_dim, half when causal"),
    "tflops": (pl.Float64, "achieved TFLOP/s: flops / (time_ms * 1e-3) / 1e12"),
    "peak_mem_bytes": (pl.Int64, "bytes one call added at its peak over what was allocated before it"),
    "scores_bytes": (pl.Int64, "bytes of the batch*heads*seq*seq scores matrix in the input dtype"),
    "parity_max_abs": (pl.Float64, "max |out - fp32 reference| in output units (inf: non-finite output)"),
    "evidence": (pl.String, "the op or kernel name that proves backend_ran"),
}
"""Every column of sweep.csv / sweep.parquet, in file order: (polars type, meaning and unit)."""


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


def _at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: an integer of at least `minimum`."""

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}: {value}")
        return value

    return check


def parser() -> Parser:
    p = Parser(prog=MODE, description=__doc__.split("\n\n")[0].strip())
    p.add_argument("--out", type=Path, required=True, help="output folder, created if missing")
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when available, else cpu"
    )
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
        type=_at_least(MIN_REPS),
        default=MIN_REPS,
        help=f"timed repetitions per point and variant (default and minimum {MIN_REPS})",
    )
    p.add_argument("--warmup", type=_at_least(0), default=3, help="untimed calls before timing (default 3)")
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
    names = [n for item in args.variants for n in item.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise UsageError(f"unknown variant {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    if not names:
        raise UsageError("--variants: no variant named")
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
    """Measure one variant at one point; every outcome is a row (see COLUMNS), never an exception."""
    row = _row(cfg, variant, point)
    dtype = DTYPES[point.dtype]
    try:
        fn = variant.bind(qkv[0], causal=point.causal)
    except Exception as exc:  # noqa: BLE001 - a variant that cannot be set up is a row, not a crash
        return _failed(row, *_classify(exc, variant, ()))
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
        _release(cfg.device)
        return _failed(row, *_classify(exc, variant, caught))
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
        _release(cfg.device)
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
    row: dict[str, object] = dict.fromkeys(COLUMNS)
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


def _classify(exc: BaseException, variant: Variant, caught: list) -> tuple[str, str]:
    """(status, reason) of a call that raised (collectors.measure.outcome)."""
    return measure.outcome(exc, forced=variant.backend in FORCED, said=[str(w.message) for w in caught])


def _failed(row: dict[str, object], status: str, reason: str) -> dict[str, object]:
    row.update(status=status, reason=reason)
    return row


def _release(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


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
    """Run every variant at every point; return the rows (COLUMNS, in row order). `echo` gets one
    table line per row as it is measured."""
    rows: list[dict[str, object]] = []
    echo(table_header())
    for point in points(cfg):
        try:
            qkv = make_inputs(point.shape, DTYPES[point.dtype], cfg.device, cfg.seed)
        except Exception as exc:  # noqa: BLE001 - inputs too large for the device: every variant is oom
            _release(cfg.device)
            status, reason = measure.outcome(exc)
            for name in cfg.variants:
                rows.append(_failed(_row(cfg, VARIANTS[name], point), status, f"inputs: {reason}"))
                echo(table_line(rows[-1]))
            continue
        ref, ref_problem = None, None
        try:
            ref = fp32_reference(qkv, point.causal)
        except Exception as exc:  # noqa: BLE001
            _release(cfg.device)
            ref_problem = f"fp32 reference failed: {measure.oom_reason(exc) if measure.is_oom(exc) else exc}"
        for name in cfg.variants:
            rows.append(run_variant(cfg, VARIANTS[name], point, qkv, ref, ref_problem))
            echo(table_line(rows[-1]))
        del qkv, ref
        _release(cfg.device)
    return to_frame(rows)


def to_frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    """Rows as a frame with COLUMNS' order and types, sorted by dtype, head_dim, causal, seq, variant order."""
    schema = {name: kind for name, (kind, _) in COLUMNS.items()}
    order = {name: i for i, name in enumerate(VARIANTS)}
    frame = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    return (
        frame.with_columns(pl.col("variant").replace_strict(order, return_dtype=pl.Int64).alias("_order"))
        .sort("dtype", "head_dim", "causal", "seq", "_order", maintain_order=True)
        .drop("_order")
    )


def write(cfg: Config, frame: pl.DataFrame) -> None:
    """DIR/sweep.csv, DIR/sweep.parquet and DIR/sweep.json."""
    frame.write_csv(cfg.out / "sweep.csv")
    frame.write_parquet(cfg.out / "sweep.parquet")
    tokens, width = cfg.tokens_width
    meta = {
        "mode": "sweep",
        **measure.provenance(cfg.device, cfg.command),
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
        "row_order": "dtype, head_dim, causal (false first), seq, then variant order",
        "columns": {name: {"type": str(kind), "meaning": text} for name, (kind, text) in COLUMNS.items()},
        "rows": frame.height,
        "statuses": {s: int((frame["status"] == s).sum()) for s in STATUSES},
    }
    (cfg.out / "sweep.json").write_text(json.dumps(meta, indent=2) + "\n")


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

    def num(value: object, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

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
        time=num(row["time_ms"], ".4f"),
        tflops=num(row["tflops"], ".4f"),
        peak=num(None if peak is None else peak / 2**20, ".3f"),
        reason=(row["reason"] or "")[:60],
    ).rstrip()


def main(argv: list[str]) -> int:
    """Run the sweep; 0 when it ran, 1 when a row is an error, 2 for bad input (one error line, no traceback)."""
    try:
        cfg = build_config(argv)
    except UsageError as exc:
        print(f"{MODE}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    frame = sweep(cfg, echo=lambda line: print(line, flush=True))
    write(cfg, frame)
    counts = ", ".join(f"{s} {n}" for s in STATUSES if (n := int((frame["status"] == s).sum())))
    print(f"{frame.height} rows ({counts}) -> {cfg.out / 'sweep.csv'}, sweep.parquet, sweep.json", flush=True)
    return measure.exit_status(frame, MODE, cfg.out / "sweep.csv")
