"""`python -m collectors serve --out DIR`: a serving mix. N requests of different prompt lengths,
their (causal) attention forward batched three ways; what each costs per token, and how much of
the padded batch is padding.

    python -m collectors serve --out serve/h100                        # 64 lognormal requests
    python -m collectors serve --device cpu --lengths-csv lengths.csv --out /tmp/serve

Lengths: lognormal with mean --mean-len and shape --sigma (mu = ln(mean) - sigma^2 / 2), drawn
from --seed, rounded and clipped to [--min-len, --max-len]; or --lengths-csv FILE (one length per
line, or a CSV with a `length` column). Requests are taken in order, --batch at a time.
Batchings (the rows, in this order):
- padded_sdpa: each batch padded to its longest request; SDPA with a boolean mask, causal AND the
  key is a real token (True = attend).
- packed_njt_sdpa: each batch as nested jagged tensors (torch.nested, layout=torch.jagged), SDPA
  with is_causal=True, no padding. PyTorch runs it only with a fused backend (CUDA, fp16/bf16 for
  flash); elsewhere the row says why not.
- packed_flex: each batch packed into one sequence; FlexAttention with a document mask (causal
  within each request) under torch.compile (static shapes on the CPU, where inductor's dynamic
  flex kernel does not compile). Needs a working compiler.
- per_request_sdpa: one SDPA call (is_causal=True) per request: the parity reference.
Inputs, masks, nested tensors and block masks are built before timing: time_s is the attention
forward over all requests, the median of --reps timed passes after --warmup untimed ones (CUDA
events around each pass; the CPU: time.perf_counter_ns).
Parity: every request's output against per_request_sdpa's, max |diff|; a row fails (status
parity_failed) when any element exceeds collectors.parity.TOLERANCES for the dtype
(|diff| <= atol + rtol * |ref|); per_request_sdpa itself is compared with the fp32 reference.
A batching that cannot run here is an unavailable (or oom) row with PyTorch's words; one that fails
for any other reason is an error row (collectors.measure.outcome).

Writes DIR/serve.csv (collectors.tables.SERVE) and DIR/serve.json (provenance, the lengths and their summary).
Exit status: 0 when the run finished, 2 for bad input (one error line, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import logging
import math
import random
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import polars as pl
import torch
from torch import Tensor

from collectors import measure, mode
from collectors.batchings import (  # noqa: F401  re-exported: the tests and callers read them from here
    PREPARE,
    QKV,
    Prepared,
    batches_of,
    computed_tokens,
    prepare_flex,
    prepare_njt,
    prepare_padded,
    prepare_per_request,
)
from collectors.options import DTYPE_NAMES, DTYPES, PROG, Parser, UsageError, at_least, device, out_dir, positive
from collectors.parity import TOLERANCES, compare, reference
from collectors.tables import SERVE

MODE = f"{PROG} serve"
BATCHINGS = ("padded_sdpa", "packed_njt_sdpa", "packed_flex", "per_request_sdpa")
REFERENCE = "per_request_sdpa"
DEFAULT_USD_PER_GPU_HOUR = 2.0
"""The same price of a GPU hour as the dashboard's (dashboard/engine/compare/speed.py DEFAULT_USD_PER_GPU_HOUR)."""
MIN_REPS = 3
LENGTHS_IN_JSON = 4096
"""serve.json lists every length up to this many requests (always their summary)."""


@dataclass(frozen=True)
class Scale:
    """Default request mix and attention shape on one kind of device."""

    mean_len: int
    min_len: int
    max_len: int
    heads: int
    head_dim: int


GPU_SCALE = Scale(mean_len=512, min_len=16, max_len=4096, heads=16, head_dim=64)
CPU_SCALE = Scale(mean_len=64, min_len=8, max_len=256, heads=4, head_dim=64)


@dataclass(frozen=True)
class Config:
    """What to run and where."""

    device: torch.device
    dtype: torch.dtype
    lengths: tuple[int, ...]
    lengths_source: dict[str, Any]
    batch: int
    heads: int
    head_dim: int
    reps: int
    warmup: int
    seed: int
    usd_per_gpu_hour: float
    out: Path
    command: str


# ---------------------------------------------------------------- lengths


def lognormal_lengths(n: int, mean: float, sigma: float, lo: int, hi: int, seed: int) -> list[int]:
    """n lengths ~ lognormal with the given mean (mu = ln(mean) - sigma^2/2), rounded to the
    nearest integer and clipped to [lo, hi]; random.Random(seed) makes them reproducible."""
    rng = random.Random(seed)
    mu = math.log(mean) - sigma * sigma / 2
    return [min(hi, max(lo, round(rng.lognormvariate(mu, sigma)))) for _ in range(n)]


def read_lengths(path: Path) -> list[int]:
    """Lengths from a file: one integer per line, or a CSV whose header has a `length` column.
    UsageError naming the file and line for anything else."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--lengths-csv {path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    rows = [r for r in csv.reader(text.splitlines()) if any(cell.strip() for cell in r)]
    if not rows:
        raise UsageError(f"--lengths-csv {path}: no lengths")
    column, start = 0, 0
    if not rows[0][0].strip().lstrip("+-").isdigit():
        header = [cell.strip().lower() for cell in rows[0]]
        if "length" not in header:
            raise UsageError(f"--lengths-csv {path}: the header has no `length` column ({', '.join(header)})")
        column, start = header.index("length"), 1
    lengths = []
    for number, row in enumerate(rows[start:], start=start + 1):
        cell = row[column].strip() if column < len(row) else ""
        try:
            value = int(cell)
        except ValueError:
            raise UsageError(f"--lengths-csv {path}: row {number}: not an integer length: {cell!r}") from None
        if value < 1:
            raise UsageError(f"--lengths-csv {path}: row {number}: a length must be at least 1: {value}")
        lengths.append(value)
    if not lengths:
        raise UsageError(f"--lengths-csv {path}: no lengths")
    return lengths


def summary(lengths: list[int] | tuple[int, ...]) -> dict[str, float]:
    """count, tokens, min, max, mean, median and p90 (linear interpolation) of the lengths."""
    return {
        "count": len(lengths),
        "tokens": sum(lengths),
        "min": min(lengths),
        "max": max(lengths),
        "mean": statistics.fmean(lengths),
        "median": statistics.median(lengths),
        "p90": measure.quantile(lengths, 0.9),
    }


# ---------------------------------------------------------------- command line


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text}")
    return value


def parser() -> Parser:
    p = mode.parser(MODE, __doc__)
    p.add_argument("--dtype", choices=tuple(DTYPES), help="default bf16 on CUDA, fp32 on CPU")
    p.add_argument("--requests", type=positive, help="requests drawn from the distribution (default 64)")
    p.add_argument(
        "--mean-len",
        type=_positive_float,
        help=f"mean prompt length, tokens (default {GPU_SCALE.mean_len} on GPU, {CPU_SCALE.mean_len} on CPU)",
    )
    p.add_argument("--sigma", type=_positive_float, default=0.8, help="lognormal shape (default 0.8)")
    p.add_argument(
        "--min-len",
        type=positive,
        help=f"shortest length, tokens (default {GPU_SCALE.min_len} on GPU, {CPU_SCALE.min_len} on CPU)",
    )
    p.add_argument(
        "--max-len",
        type=positive,
        help=f"longest length, tokens (default {GPU_SCALE.max_len} on GPU, {CPU_SCALE.max_len} on CPU)",
    )
    p.add_argument(
        "--lengths-csv",
        type=Path,
        metavar="FILE",
        help="the request lengths instead: one per line, or a CSV with a `length` column",
    )
    p.add_argument("--batch", type=positive, default=8, help="requests per batch (default 8)")
    p.add_argument(
        "--heads", type=positive, help=f"attention heads (default {GPU_SCALE.heads} on GPU, {CPU_SCALE.heads} on CPU)"
    )
    p.add_argument("--head-dim", type=positive, help=f"head dimension (default {GPU_SCALE.head_dim})")
    p.add_argument(
        "--reps",
        type=at_least(MIN_REPS),
        default=5,
        help=f"timed passes over every request (default 5, minimum {MIN_REPS})",
    )
    p.add_argument("--warmup", type=at_least(1), default=1, help="untimed passes before timing (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the lengths and of q, k, v (default 0)")
    p.add_argument(
        "--usd-per-gpu-hour",
        type=_positive_float,
        default=DEFAULT_USD_PER_GPU_HOUR,
        help=f"price of a GPU hour in US dollars (default {DEFAULT_USD_PER_GPU_HOUR}, the dashboard's)",
    )
    return p


def build_config(argv: list[str]) -> Config:
    """Parse argv and resolve device-dependent defaults; raise UsageError for bad input."""
    args = parser().parse_args(argv)
    dev = device(args.device)
    base = GPU_SCALE if dev.type == "cuda" else CPU_SCALE
    if args.lengths_csv is not None:
        drawn = [name for name in ("requests", "mean_len", "min_len", "max_len") if getattr(args, name) is not None]
        if drawn:
            raise UsageError(f"--lengths-csv gives the lengths; drop --{drawn[0].replace('_', '-')}")
        lengths = read_lengths(args.lengths_csv)
        source: dict[str, Any] = {"kind": "csv", "file": str(args.lengths_csv)}
    else:
        lo, hi = args.min_len or base.min_len, args.max_len or base.max_len
        if lo > hi:
            raise UsageError(f"--min-len {lo} is above --max-len {hi}")
        mean = args.mean_len or base.mean_len
        n = args.requests or 64
        lengths = lognormal_lengths(n, mean, args.sigma, lo, hi, args.seed)
        source = {
            "kind": "lognormal",
            "requests": n,
            "mean_len": mean,
            "sigma": args.sigma,
            "min_len": lo,
            "max_len": hi,
            "mu": math.log(mean) - args.sigma**2 / 2,
            "seed": args.seed,
            "rule": "random.Random(seed).lognormvariate(mu, sigma), rounded, clipped to [min_len, max_len]",
        }
    return Config(
        device=dev,
        dtype=DTYPES[args.dtype or ("bf16" if dev.type == "cuda" else "fp32")],
        lengths=tuple(lengths),
        lengths_source=source,
        batch=args.batch,
        heads=args.heads or base.heads,
        head_dim=args.head_dim or base.head_dim,
        reps=args.reps,
        warmup=args.warmup,
        seed=args.seed,
        usd_per_gpu_hour=args.usd_per_gpu_hour,
        out=out_dir(args.out),
        command=shlex.join([*MODE.split(), *argv]),
    )


# ---------------------------------------------------------------- batchings


def make_requests(cfg: Config) -> list[QKV]:
    """Per request q, k, v, each [heads, length, head_dim] ~ N(0, 1), drawn in fp32 on the CPU from
    cfg.seed (same values on any device), then moved to the device and dtype."""
    gen = torch.Generator().manual_seed(cfg.seed)
    out = []
    for n in cfg.lengths:
        q, k, v = (torch.randn(cfg.heads, n, cfg.head_dim, generator=gen).to(cfg.device, cfg.dtype) for _ in range(3))
        out.append((q, k, v))
    return out


# ---------------------------------------------------------------- measuring


@contextlib.contextmanager
def _pytorch_says() -> Iterator[list[str]]:
    """Collect what PyTorch says while the block runs: warnings, and the log lines of its nested
    SDPA dispatch (torch.nested._internal.sdpa logs why each backend declined)."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage().strip())

    logger = logging.getLogger("torch.nested._internal.sdpa")
    handler, propagate = Keep(level=logging.WARNING), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with measure.catching_warnings() as caught:
            try:
                yield said
            finally:
                said.extend(measure.one_line(str(w.message)) for w in caught)
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def parity(outs: list[Tensor], refs: list[Tensor], dtype: torch.dtype) -> tuple[float, bool]:
    """(max |out - ref| over every request, every request within the dtype's tolerance)."""
    results = [compare(o, r.float(), dtype) for o, r in zip(outs, refs)]
    return max(p.max_abs for p in results), all(p.passed for p in results)


def _row(cfg: Config, variant: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(SERVE.columns)
    tokens = sum(cfg.lengths)
    computed = computed_tokens(variant, cfg.lengths, cfg.batch)
    row.update(
        variant=variant,
        status="ok",
        requests=len(cfg.lengths),
        tokens=tokens,
        computed_tokens=computed,
        padding_waste=1 - tokens / computed,
        usd_per_gpu_hour=cfg.usd_per_gpu_hour,
        batches=len(cfg.lengths) if variant == REFERENCE else len(batches_of(len(cfg.lengths), cfg.batch)),
    )
    return row


def run_batching(
    cfg: Config, variant: str, reqs: list[QKV], refs: list[Tensor] | None
) -> tuple[dict[str, Any], list[Tensor] | None]:
    """One batching: its row (SERVE's columns) and its per-request outputs (None when it did not run).
    refs: per_request_sdpa's outputs (None: compare with the fp32 reference instead)."""
    row = _row(cfg, variant)
    cuda = cfg.device.type == "cuda"
    said: list[str] = []
    try:
        with _pytorch_says() as said, torch.no_grad():
            prepared = PREPARE[variant](reqs, cfg.lengths, cfg.batch)
            outs = prepared.split(prepared.run())
        samples = measure.time_calls(lambda _: prepared.run(), cuda, reps=cfg.reps, warmup=cfg.warmup)
    except Exception as exc:  # noqa: BLE001 - a batching that cannot run is a row, not a crash
        mode.release(cfg.device)
        status, reason = measure.outcome(exc, said=said)
        row.update(status=status, reason=reason)
        return row, None
    time_s = measure.summarize_times(samples).median_ms / 1e3
    tokens = row["tokens"]
    row.update(
        time_s=time_s,
        reps=len(samples),
        tokens_per_s=tokens / time_s,
        usd_per_1m_tokens=cfg.usd_per_gpu_hour / 3600 * time_s / tokens * 1e6,
    )
    if refs is None:
        refs = [reference(q, k, v, causal=True) for q, k, v in reqs]
    row["parity_max_abs"], passed = parity(outs, refs, cfg.dtype)
    if not passed:
        tol = TOLERANCES.get(cfg.dtype, TOLERANCES[torch.float32])
        against = "per_request_sdpa" if variant != REFERENCE else "the fp32 reference"
        row.update(
            status="parity_failed",
            reason=f"max |out - {against}| = {row['parity_max_abs']:.3g} exceeds "
            f"atol {tol.atol:g} + rtol {tol.rtol:g} * |ref| ({DTYPE_NAMES[cfg.dtype]})",
        )
    return row, outs


def run(cfg: Config, echo: Callable[[str], None] = print) -> pl.DataFrame:
    """Every batching; the table (SERVE's columns, rows in BATCHINGS order). per_request_sdpa runs first:
    its outputs are the others' parity reference."""
    reqs = make_requests(cfg)
    rows: dict[str, dict[str, Any]] = {}
    rows[REFERENCE], refs = run_batching(cfg, REFERENCE, reqs, None)
    if refs is not None:
        refs = [r.detach() for r in refs]
    for variant in BATCHINGS:
        if variant != REFERENCE:
            rows[variant], _ = run_batching(cfg, variant, reqs, refs)
            if refs is None and rows[variant]["status"] == "ok":
                rows[variant]["reason"] = "parity against the fp32 reference: per_request_sdpa did not run"
    ordered = [rows[v] for v in BATCHINGS]
    for row in ordered:
        echo(table_line(row))
    return SERVE.frame(ordered)


def write(cfg: Config, frame: pl.DataFrame) -> None:
    """DIR/serve.csv and DIR/serve.json."""
    lengths = list(cfg.lengths)
    cuda = cfg.device.type == "cuda"
    fields = {
        "dtype": DTYPE_NAMES[cfg.dtype],
        "heads": cfg.heads,
        "head_dim": cfg.head_dim,
        "batch": cfg.batch,
        "causal": True,
        "lengths_source": cfg.lengths_source,
        "lengths_summary": summary(lengths),
        "lengths": lengths if len(lengths) <= LENGTHS_IN_JSON else None,
        "reps": cfg.reps,
        "warmup": cfg.warmup,
        "seed": cfg.seed,
        "usd_per_gpu_hour": cfg.usd_per_gpu_hour,
        "timing": ("CUDA events around each pass (device time)" if cuda else "time.perf_counter_ns around each pass")
        + "; median; inputs, masks, nested tensors and block masks built before timing",
        "parity": "every request's output against per_request_sdpa's (per_request_sdpa: against the fp32 "
        "reference, collectors.parity.reference); torch.allclose rule with collectors.parity.TOLERANCES",
        "quantile_method": measure.QUANTILE_METHOD,
    }
    mode.write(
        SERVE,
        frame,
        cfg.out,
        measure.provenance(cfg.device, cfg.command),
        fields,
        row_order=", ".join(BATCHINGS),
        counts={"statuses": SERVE.status_counts(frame)},
    )


_TABLE = (
    "{variant:<17} {status:<13} {batches:>7} {tokens:>8} {computed:>9} {waste:>6} {time:>10} {tps:>12} "
    "{usd:>10} {parity:>9}  {reason}"
)


def table_header() -> str:
    return _TABLE.format(
        variant="variant",
        status="status",
        batches="calls",
        tokens="tokens",
        computed="computed",
        waste="waste",
        time="time ms",
        tps="tokens/s",
        usd="$/1M tok",
        parity="parity",
        reason="reason",
    )


def table_line(row: dict[str, Any]) -> str:
    return _TABLE.format(
        variant=row["variant"],
        status=row["status"],
        batches=row["batches"],
        tokens=row["tokens"],
        computed=row["computed_tokens"],
        waste=mode.number(row["padding_waste"], ".1%"),
        time=mode.number(row["time_s"], ".3f", 1e3),
        tps=mode.number(row["tokens_per_s"], ",.0f"),
        usd=mode.number(row["usd_per_1m_tokens"], ".4f"),
        parity=mode.number(row["parity_max_abs"], ".2e"),
        reason=(row["reason"] or "")[:70],
    ).rstrip()


def main(argv: list[str]) -> int:
    """Run the serving mix; 0 when it ran, 1 when a row is an error, 2 for bad input (one error line)."""
    return mode.main(MODE, argv, build_config, _run)


def _run(cfg: Config) -> int:
    s = summary(cfg.lengths)
    print(
        f"{s['count']} requests, {s['tokens']} tokens (lengths {s['min']}..{s['max']}, mean {s['mean']:.1f}), "
        f"batch {cfg.batch}, {cfg.heads} heads x {cfg.head_dim}, {DTYPE_NAMES[cfg.dtype]} on {cfg.device.type}",
        flush=True,
    )
    frame = run(cfg, echo=lambda line: None)
    write(cfg, frame)
    print(table_header())
    for row in frame.iter_rows(named=True):
        print(table_line(row))
    print(mode.closing_line(SERVE, frame, cfg.out, "serve.json"), flush=True)
    return mode.exit_status(SERVE, frame, MODE, cfg.out)
