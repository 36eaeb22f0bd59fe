"""`python -m collectors dispatch --out DIR`: which backend F.scaled_dot_product_attention's default
dispatch really runs, per dtype x head_dim x mask kind x GQA, and why each forced backend refuses.

    python -m collectors dispatch --out dispatch/h100
    python -m collectors dispatch --device cpu --dtype fp32 --head-dim 64 128 --out /tmp/d

Each cell profiles one default-dispatch call on a small fixed shape (batch 1, heads 4, kv heads 2
with GQA, seq 128; flags change it) and classifies its op and kernel names (collectors.measure.SDPA_BACKENDS, the
dashboard's BACKEND_TABLE names); then it forces flash, efficient and cuDNN in turn (torch.nn.attention.sdpa_kernel)
and records PyTorch's words for each one that cannot run. Mask kinds: causal (is_causal=True),
none, bool (a [seq, seq] lower-triangular bool attn_mask, True = attend), additive (a float
attn_mask in the input dtype, 0 on and below the diagonal, -inf above), dropout (dropout_p=0.1, no
mask). GQA: k and v carry fewer heads and the call passes enable_gqa=True.

Writes DIR/dispatch.csv (rows sorted by dtype, head_dim, mask in the order above, gqa false first)
and DIR/dispatch.json (provenance). Exit status: 0 when the map was written, 2 for bad input.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import polars as pl
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from collectors import measure, mode
from collectors.options import DTYPES, PROG, Parser, UsageError, device, out_dir, positive
from collectors.tables import DISPATCH

MODE = f"{PROG} dispatch"
HEAD_DIMS = (64, 72, 96, 128, 160, 256, 512)
MASKS = ("causal", "none", "bool", "additive", "dropout")
DROPOUT_P = 0.1
FORCED: tuple[tuple[str, SDPBackend], ...] = (
    ("flash", SDPBackend.FLASH_ATTENTION),
    ("efficient", SDPBackend.EFFICIENT_ATTENTION),
    ("cudnn", SDPBackend.CUDNN_ATTENTION),
)
"""The fused backends forced one at a time, in the order of the refusals column."""


@dataclass(frozen=True)
class Config:
    """What to map: the cells' axes and the fixed shape (kv_heads used only with GQA)."""

    device: torch.device
    dtypes: tuple[str, ...]
    head_dims: tuple[int, ...]
    masks: tuple[str, ...]
    gqas: tuple[bool, ...]
    batch: int
    heads: int
    kv_heads: int
    seq: int
    seed: int
    out: Path
    command: str


@dataclass(frozen=True)
class Cell:
    dtype: str
    head_dim: int
    mask: str
    gqa: bool


def parser() -> Parser:
    p = mode.parser(MODE, __doc__)
    p.add_argument("--dtype", choices=tuple(DTYPES), nargs="+", help="dtypes (default all: bf16 fp16 fp32)")
    p.add_argument(
        "--head-dim",
        type=positive,
        nargs="+",
        metavar="D",
        help=f"head dimensions (default {' '.join(map(str, HEAD_DIMS))})",
    )
    p.add_argument("--mask", choices=MASKS, nargs="+", help=f"mask kinds (default all: {' '.join(MASKS)})")
    p.add_argument(
        "--gqa",
        choices=("both", "false", "true"),
        default="both",
        help="GQA cells: both (default), only without, only with",
    )
    p.add_argument("--batch", type=positive, default=1, help="batch size (default 1)")
    p.add_argument("--heads", type=positive, default=4, help="query heads (default 4)")
    p.add_argument(
        "--kv-heads", type=positive, default=2, help="k/v heads in the GQA cells (default 2; must divide --heads)"
    )
    p.add_argument("--seq", type=positive, default=128, help="sequence length (default 128)")
    p.add_argument("--seed", type=int, default=0, help="seed of q, k, v and of the dropout cells (default 0)")
    return p


def build_config(argv: list[str]) -> Config:
    """Parse argv; raise UsageError for bad input."""
    args = parser().parse_args(argv)
    if args.heads % args.kv_heads:
        raise UsageError(f"--kv-heads {args.kv_heads} must divide --heads {args.heads}")
    dev = device(args.device)
    gqas = {"both": (False, True), "false": (False,), "true": (True,)}[args.gqa]
    masks = args.mask or MASKS
    return Config(
        device=dev,
        dtypes=tuple(sorted(set(args.dtype or DTYPES))),
        head_dims=tuple(sorted(set(args.head_dim or HEAD_DIMS))),
        masks=tuple(m for m in MASKS if m in masks),
        gqas=gqas,
        batch=args.batch,
        heads=args.heads,
        kv_heads=args.kv_heads,
        seq=args.seq,
        seed=args.seed,
        out=out_dir(args.out),
        command=shlex.join([*MODE.split(), *argv]),
    )


def cells(cfg: Config) -> list[Cell]:
    """Every cell in row order: dtype, head_dim, mask (MASKS order), gqa (false first)."""
    return [Cell(d, h, m, g) for d in cfg.dtypes for h in cfg.head_dims for m in cfg.masks for g in cfg.gqas]


def inputs(cfg: Config, cell: Cell) -> tuple[tuple[Tensor, Tensor, Tensor], dict[str, object]]:
    """(q, k, v) ~ N(0, 1) from the seed ([batch, heads, seq, head_dim]; k, v with kv_heads under
    GQA) and the SDPA keyword arguments of the cell's mask kind."""
    gen = torch.Generator().manual_seed(cfg.seed)
    dtype = DTYPES[cell.dtype]
    kv_heads = cfg.kv_heads if cell.gqa else cfg.heads
    q, k, v = (
        torch.randn(cfg.batch, heads, cfg.seq, cell.head_dim, generator=gen).to(cfg.device, dtype)
        for heads in (cfg.heads, kv_heads, kv_heads)
    )
    kwargs: dict[str, object] = {"enable_gqa": True} if cell.gqa else {}
    keep = torch.ones(cfg.seq, cfg.seq, dtype=torch.bool, device=cfg.device).tril()
    if cell.mask == "causal":
        kwargs["is_causal"] = True
    elif cell.mask == "bool":
        kwargs["attn_mask"] = keep
    elif cell.mask == "additive":
        zeros = torch.zeros(cfg.seq, cfg.seq, dtype=dtype, device=cfg.device)
        kwargs["attn_mask"] = zeros.masked_fill(~keep, float("-inf"))
    elif cell.mask == "dropout":
        kwargs["dropout_p"] = DROPOUT_P
    return (q, k, v), kwargs


def _sdpa(**kwargs: object) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs)


def map_cell(cfg: Config, cell: Cell) -> dict[str, object]:
    """One row of the map (DISPATCH's columns): the default dispatch's backend and each forced refusal."""
    qkv, kwargs = inputs(cfg, cell)
    call = _sdpa(**kwargs)
    row: dict[str, object] = {
        "dtype": cell.dtype,
        "head_dim": cell.head_dim,
        "mask": cell.mask,
        "gqa": cell.gqa,
        "backend_ran": "unknown",
        "kernel": "",
        "fallback": False,
        "error": "",
    }
    torch.manual_seed(cfg.seed)
    try:
        with measure.catching_warnings() as caught:
            names = measure.profiled_names(call, qkv)
        row["backend_ran"], row["kernel"] = measure.backend_ran(names, "default")
        row["fallback"] = row["backend_ran"] == "math"
    except Exception as exc:  # noqa: BLE001 - a cell the default dispatch cannot run is a row
        row["error"] = measure.refusal_reason(exc, caught)
    parts = []
    for name, backend in FORCED:
        torch.manual_seed(cfg.seed)
        with measure.catching_warnings() as caught:
            try:
                with torch.no_grad(), sdpa_kernel(backend):
                    call(*qkv)
                if cfg.device.type == "cuda":
                    torch.cuda.synchronize()
                reason = ""
            except RuntimeError as exc:
                reason = measure.refusal_reason(exc, caught)
        parts.append(f"{name}: {reason}")
    row["refusals"] = "; ".join(parts)
    return row


def dispatch_map(cfg: Config, echo: Callable[[str], None] = print) -> pl.DataFrame:
    """Every cell's row (DISPATCH's columns, in row order); `echo` gets one table line per cell."""
    echo(
        _LINE.format(
            dtype="dtype", head_dim="D", mask="mask", gqa="gqa", backend="backend", fallback="fallback", kernel="kernel"
        )
    )
    rows = []
    for cell in cells(cfg):
        rows.append(map_cell(cfg, cell))
        r = rows[-1]
        echo(
            _LINE.format(
                dtype=r["dtype"],
                head_dim=r["head_dim"],
                mask=r["mask"],
                gqa=str(r["gqa"]).lower(),
                backend=r["backend_ran"],
                fallback="FALLBACK" if r["fallback"] else "",
                kernel=r["kernel"] or r["error"][:60],
            ).rstrip()
        )
    return DISPATCH.frame(rows)


_LINE = "{dtype:<5} {head_dim:>4} {mask:<8} {gqa:<5} {backend:<10} {fallback:<8}  {kernel}"


def write(cfg: Config, frame: pl.DataFrame) -> None:
    """DIR/dispatch.csv and DIR/dispatch.json."""
    fields = {
        "shape": {"batch": cfg.batch, "heads": cfg.heads, "kv_heads_gqa": cfg.kv_heads, "seq": cfg.seq},
        "grid": {
            "dtype": list(cfg.dtypes),
            "head_dim": list(cfg.head_dims),
            "mask": list(cfg.masks),
            "gqa": list(cfg.gqas),
        },
        "masks": {
            "causal": "is_causal=True",
            "none": "no mask",
            "bool": "attn_mask: bool [seq, seq], True on and below the diagonal (attend)",
            "additive": "attn_mask: input dtype [seq, seq], 0 on and below the diagonal, -inf above",
            "dropout": f"dropout_p={DROPOUT_P}, no mask",
        },
        "forced_order": [name for name, _ in FORCED],
        "backend_method": "op and kernel names of one profiled default-dispatch call, classified with "
        "collectors.measure.SDPA_BACKENDS (dashboard BACKEND_TABLE names)",
        "seed": cfg.seed,
    }
    mode.write(
        DISPATCH,
        frame,
        cfg.out,
        measure.provenance(cfg.device, cfg.command),
        fields,
        row_order="dtype, head_dim, mask (order above), gqa (false first)",
        counts={"rows": frame.height, "fallbacks": int(frame["fallback"].sum())},
    )


def main(argv: list[str]) -> int:
    """Write the dispatch map; 0 when written, 2 for bad input (one error line, no traceback)."""
    return mode.main(MODE, argv, build_config, _run)


def _run(cfg: Config) -> int:
    frame = dispatch_map(cfg, echo=lambda line: print(line, flush=True))
    write(cfg, frame)
    print(
        f"{frame.height} cells, {int(frame['fallback'].sum())} silent fallbacks to math -> "
        f"{cfg.out / DISPATCH.csv}, dispatch.json",
        flush=True,
    )
    return 0
