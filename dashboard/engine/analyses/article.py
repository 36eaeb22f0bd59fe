"""The article's measurements, read back: a folder written by `python -m collectors sweep`,
`dispatch`, `e2e` and `serve` (or `article`, which runs all four), turned into the answers the
article asks for.

- sweep.csv: time, TFLOP/s and peak memory per (variant, dtype, head_dim, causal, seq) point.
  Answered here: where each fused variant overtakes naive as sequences grow (`crossovers`), how
  each variant's peak memory grows with the sequence (`memory_growth`: naive's scores matrix makes
  it ~S^2, the fused paths ~S), and how much memory the fused path saves at the longest sequence
  both ran.
- dispatch.csv: which backend SDPA's default dispatch ran per dtype x head_dim x mask x GQA; the
  cells where math ran are the silent fallback (`fallback_cells`).
- e2e.csv: a small decoder's prefill and decode step per variant, the measured gain against the
  Amdahl prediction from attention's share.
- serve.csv: a mix of request lengths batched padded, packed and per request: tokens/s, padding
  waste and $ per 1M tokens.

Every file is optional; a folder holding any of them is an article folder. Units: times in ms
(time_ms, step_ms, attention_ms) or s (time_s), memory in bytes, rates in TFLOP/s and tokens/s.
A file that cannot be read is an ArticleError naming the file and the problem.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from collectors.tables import TABLES

FILES = tuple(table.csv for table in TABLES.values())
"""The tables an article folder may hold (each with a .json of its provenance beside it)."""

BASELINE = "naive"
"""The variant every other one is measured against (the article's starting point)."""

# The collectors' column contract (collectors.tables): the columns each file must have to be read
# (more are kept), which of them hold numbers, and which hold true/false.
REQUIRED: dict[str, tuple[str, ...]] = {table.csv: table.read for table in TABLES.values()}
_NUMERIC = {table.csv: table.numeric(table.read) for table in TABLES.values()}
_BOOLEAN = {table.csv: table.boolean() for table in TABLES.values()}
_DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}
STATUS_OK = "ok"


class ArticleError(Exception):
    """A file of an article folder that cannot be read; str() names the file and the problem."""


@dataclass
class Article:
    """One folder's tables (None where the file is absent) and each file's provenance (.json)."""

    folder: Path
    sweep: pl.DataFrame | None = None
    dispatch: pl.DataFrame | None = None
    e2e: pl.DataFrame | None = None
    serve: pl.DataFrame | None = None
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def device_name(self) -> str | None:
        """The device the measurements ran on, as the provenance names it."""
        for info in self.provenance.values():
            for key in ("device_name", "device"):
                if isinstance(info.get(key), str) and info[key]:
                    return info[key]
        return None


def is_article_folder(folder: Path) -> bool:
    """True when the folder holds any of FILES."""
    return folder.is_dir() and any((folder / name).is_file() for name in FILES)


def find_folders(roots: list[Path]) -> list[Path]:
    """Article folders among `roots` and their direct subfolders, sorted, each once."""
    found: dict[Path, None] = {}
    for root in roots:
        root = Path(root)
        if is_article_folder(root):
            found[root.resolve()] = None
        elif root.is_dir():
            try:
                children = sorted(p for p in root.iterdir() if p.is_dir())
            except OSError:
                continue
            for child in children:
                if is_article_folder(child):
                    found[child.resolve()] = None
    return sorted(found, key=lambda p: (p.name, str(p)))


def read_article(folder: Path) -> Article:
    """Read every table the folder holds; raise ArticleError naming the first unreadable file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ArticleError(f"{folder}: no such folder")
    article = Article(folder=folder)
    for name in FILES:
        path = folder / name
        if not path.is_file():
            continue
        setattr(article, name.removesuffix(".csv"), _read_table(path, name))
        info = path.with_suffix(".json")
        if info.is_file():
            article.provenance[name.removesuffix(".csv")] = _read_provenance(info)
    if all(getattr(article, n.removesuffix(".csv")) is None for n in FILES):
        raise ArticleError(f"{folder}: none of {', '.join(FILES)} in this folder")
    return article


def _read_table(path: Path, name: str) -> pl.DataFrame:
    try:
        frame = pl.read_csv(path, infer_schema_length=None)
    except Exception as exc:  # noqa: BLE001 - polars raises several types for a bad CSV
        raise ArticleError(f"{path}: not a readable CSV ({type(exc).__name__}: {_first_line(exc)})") from None
    missing = [c for c in REQUIRED[name] if c not in frame.columns]
    if missing:
        raise ArticleError(f"{path}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    casts = []
    for column in _NUMERIC[name]:
        if frame.schema[column] == pl.String:
            casts.append(pl.col(column).cast(pl.Float64, strict=False))
        elif not frame.schema[column].is_numeric():
            raise ArticleError(f"{path}: column {column} holds {frame.schema[column]}, not numbers")
    if casts:
        frame = frame.with_columns(casts)
    if "dtype" in frame.columns:
        frame = frame.with_columns(pl.col("dtype").cast(pl.String).replace(_DTYPE_NAMES))
    for column in _BOOLEAN[name]:
        if column in frame.columns and frame.schema[column] != pl.Boolean:
            frame = frame.with_columns(
                pl.col(column).cast(pl.String).str.to_lowercase().is_in(["true", "1", "yes"]).alias(column)
            )
    return frame


def _read_provenance(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ArticleError(f"{path}: not readable JSON ({_first_line(exc)})") from None
    if not isinstance(value, dict):
        raise ArticleError(f"{path}: a JSON {type(value).__name__}, not an object")
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


GROUP = ("device", "dtype", "head_dim", "causal")
"""A sweep's curves: one per variant within each of these groups."""
CURVE_COLUMNS = {
    "device": pl.String,
    "dtype": pl.String,
    "head_dim": pl.Int64,
    "causal": pl.Boolean,
    "variant": pl.String,
    "points": pl.Int64,
}
"""The first columns of a table with a row per curve (crossovers, memory_growth): the group, the
variant and how many points its curve has."""


def groups(sweep: pl.DataFrame) -> pl.DataFrame:
    """The sweep's (device, dtype, head_dim, causal) groups, sorted, with their point counts."""
    return sweep.group_by(GROUP).agg(pl.len().alias("rows")).sort(GROUP)


def crossovers(sweep: pl.DataFrame) -> pl.DataFrame:
    """Where each variant overtakes naive as the sequence grows, per (device, dtype, head_dim, causal).

    Compared at each seq both ran (status ok): speedup = naive time_ms / variant time_ms (> 1:
    faster than naive). faster_from_seq: the smallest measured seq from which the variant is
    faster at every longer measured seq (null when it is not faster at the longest).
    crossover_seq: where the speedup crosses 1, interpolated linearly in log(seq) vs log(speedup)
    between the last slower and the first faster point (null when it was faster from the first
    point measured, or never). speedup_at_max_seq: at the longest seq both ran. noise_seqs: the seqs
    where the two runs' p10-p90 bands overlap (the difference there is inside the noise).
    """
    ok = _with_band(sweep.filter(pl.col("status") == STATUS_OK, pl.col("time_ms") > 0))
    base = ok.filter(pl.col("variant") == BASELINE).select(
        *GROUP,
        "seq",
        pl.col("time_ms").alias("naive_ms"),
        pl.col("p10").alias("naive_p10"),
        pl.col("p90").alias("naive_p90"),
    )
    paired = (
        ok.filter(pl.col("variant") != BASELINE)
        .join(base, on=[*GROUP, "seq"], how="inner")
        .with_columns(
            (pl.col("naive_ms") / pl.col("time_ms")).alias("speedup"),
            # the two runs' p10-p90 bands overlap: at this seq the difference is inside the noise
            ((pl.col("p10") <= pl.col("naive_p90")) & (pl.col("naive_p10") <= pl.col("p90"))).alias("in_noise"),
        )
        .sort([*GROUP, "variant", "seq"])
    )
    rows: list[dict[str, Any]] = []
    for key, part in paired.group_by([*GROUP, "variant"], maintain_order=True):
        seqs = part["seq"].to_list()
        speed = part["speedup"].to_list()
        faster_from, crossing = _crossing(seqs, speed)
        rows.append(
            {
                **dict(zip([*GROUP, "variant"], key)),
                "points": len(seqs),
                "faster_from_seq": faster_from,
                "crossover_seq": crossing,
                "speedup_at_min_seq": speed[0],
                "speedup_at_max_seq": speed[-1],
                "max_seq": seqs[-1],
                "noise_seqs": [q for q, inside in zip(seqs, part["in_noise"].to_list()) if inside],
            }
        )
    schema = {
        **CURVE_COLUMNS,
        "faster_from_seq": pl.Int64,
        "crossover_seq": pl.Float64,
        "speedup_at_min_seq": pl.Float64,
        "speedup_at_max_seq": pl.Float64,
        "max_seq": pl.Int64,
        "noise_seqs": pl.List(pl.Int64),
    }
    if not rows:
        return pl.DataFrame(schema=schema)
    frame = pl.DataFrame(rows, schema_overrides=schema, infer_schema_length=None)
    return frame.select(list(schema)).sort([*GROUP, "variant"])


def _with_band(sweep: pl.DataFrame) -> pl.DataFrame:
    """The sweep with p10 and p90 (its time_ms_p10/_p90; the median itself where a table has none,
    which makes a band of one point: a difference is then never called noise)."""
    return sweep.with_columns(
        pl.col("time_ms_p10" if "time_ms_p10" in sweep.columns else "time_ms").alias("p10"),
        pl.col("time_ms_p90" if "time_ms_p90" in sweep.columns else "time_ms").alias("p90"),
    )


def _crossing(seqs: list[int], speedups: list[float]) -> tuple[int | None, float | None]:
    """(faster_from_seq, crossover_seq) of one curve; see crossovers()."""
    if speedups[-1] <= 1.0:
        return None, None
    first = len(speedups) - 1
    while first > 0 and speedups[first - 1] > 1.0:
        first -= 1
    if first == 0:
        return int(seqs[0]), None
    s0, s1 = math.log(seqs[first - 1]), math.log(seqs[first])
    r0, r1 = math.log(speedups[first - 1]), math.log(speedups[first])
    at = s0 + (0.0 - r0) * (s1 - s0) / (r1 - r0) if r1 != r0 else s1
    return int(seqs[first]), math.exp(at)


def memory_growth(sweep: pl.DataFrame) -> pl.DataFrame:
    """How each variant's peak memory grows with the sequence, per (device, dtype, head_dim, causal).

    exponent: the least-squares slope of log(peak per sequence) against log(seq) over the points
    that ran, the peak per sequence being peak_mem_bytes / batch (the sweep's default batch shrinks
    as seq grows, to keep tokens constant): about 2 where the H*S*S scores matrix dominates, about 1
    for the fused paths; null with fewer than two points or any point without a positive peak. peak_at_max_seq: bytes at the
    longest seq the variant ran; naive_ratio: naive's peak over this variant's at the longest seq
    both ran (how many times less memory the variant needs). oom_from_seq: the smallest seq where
    the variant ran out of memory (null when it never did).
    """
    schema = {
        **CURVE_COLUMNS,
        "exponent": pl.Float64,
        "max_seq": pl.Int64,
        "peak_at_max_seq": pl.Float64,
        "naive_ratio": pl.Float64,
        "oom_from_seq": pl.Int64,
    }
    ok = sweep.filter(pl.col("status") == STATUS_OK, pl.col("peak_mem_bytes").is_not_null())
    base = {
        key: dict(zip(part["seq"].to_list(), part["peak_mem_bytes"].to_list()))
        for key, part in ok.filter(pl.col("variant") == BASELINE).group_by(GROUP, maintain_order=True)
    }
    ooms = {
        key: int(part["seq"].min())
        for key, part in sweep.filter(pl.col("status") == "oom").group_by([*GROUP, "variant"], maintain_order=True)
    }
    rows: list[dict[str, Any]] = []
    for key, part in ok.sort([*GROUP, "variant", "seq"]).group_by([*GROUP, "variant"], maintain_order=True):
        seqs = part["seq"].to_list()
        peaks = part["peak_mem_bytes"].to_list()
        per_sequence = [p / b if p is not None and b else None for p, b in zip(peaks, part["batch"].to_list())]
        naive = base.get(tuple(key[:4]), {})
        common = [s for s in seqs if naive.get(s)]
        ratio = None
        if common:
            at = max(common)
            mine = peaks[seqs.index(at)]
            ratio = naive[at] / mine if mine else None
        rows.append(
            {
                **dict(zip([*GROUP, "variant"], key)),
                "points": len(seqs),
                "exponent": _slope(seqs, per_sequence),
                "max_seq": seqs[-1],
                "peak_at_max_seq": float(peaks[-1]),
                "naive_ratio": ratio,
                "oom_from_seq": ooms.get(tuple(key)),
            }
        )
    if not rows:
        return pl.DataFrame(schema=schema)
    return (
        pl.DataFrame(rows, schema_overrides=schema, infer_schema_length=None)
        .select(list(schema))
        .sort([*GROUP, "variant"])
    )


def _slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) on log(x); None with fewer than two points or a y <= 0."""
    if len(xs) < 2 or any(y is None or y <= 0 for y in ys):
        return None
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    var = sum((x - mx) ** 2 for x in lx)
    if var == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / var


def fallback_cells(dispatch: pl.DataFrame) -> pl.DataFrame:
    """The dispatch map's cells where the unfused math path ran (the article's silent fallback),
    sorted by dtype, head_dim, mask and GQA."""
    return dispatch.filter(pl.col("backend_ran") == "math").sort(["dtype", "head_dim", "mask", "gqa"])


def dispatch_matrix(dispatch: pl.DataFrame) -> pl.DataFrame:
    """The dispatch map as a table: one row per (dtype, mask, gqa), one column per head_dim, each
    cell the backend that ran; columns in head_dim order, rows sorted."""
    head_dims = sorted({int(h) for h in dispatch["head_dim"].to_list()})
    rows: dict[tuple[str, str, bool], dict[str, Any]] = {}
    for row in dispatch.sort(["dtype", "mask", "gqa", "head_dim"]).iter_rows(named=True):
        key = (row["dtype"], row["mask"], bool(row["gqa"]))
        cell = rows.setdefault(key, {"dtype": key[0], "mask": key[1], "gqa": key[2]})
        cell[f"d={int(row['head_dim'])}"] = row["backend_ran"]
    schema = {"dtype": pl.String, "mask": pl.String, "gqa": pl.Boolean, **{f"d={h}": pl.String for h in head_dims}}
    return pl.DataFrame(list(rows.values()), schema=schema)


def e2e_table(e2e: pl.DataFrame) -> pl.DataFrame:
    """The end-to-end rows with the measured gain beside the Amdahl prediction: gain_pct =
    (speedup_vs_naive - 1) * 100, predicted_pct likewise, gap_pct = gain - predicted (points), and
    in_noise: the row's p10-p90 step times overlap naive's in the same phase, so the measured gain
    is inside the noise (null where either band is missing: an e2e.csv written before the bands,
    or a run that failed; naive's own row is null)."""
    table = e2e.with_columns(
        ((pl.col("speedup_vs_naive") - 1) * 100).alias("gain_pct"),
        ((pl.col("amdahl_predicted_speedup") - 1) * 100).alias("predicted_pct"),
    ).with_columns((pl.col("gain_pct") - pl.col("predicted_pct")).alias("gap_pct"))
    if not {"step_ms_p10", "step_ms_p90"} <= set(e2e.columns):
        return table.with_columns(pl.lit(None, dtype=pl.Boolean).alias("in_noise"))
    base = e2e.filter(pl.col("variant") == BASELINE).select(
        "phase", pl.col("step_ms_p10").alias("naive_p10"), pl.col("step_ms_p90").alias("naive_p90")
    )
    overlap = (pl.col("step_ms_p10") <= pl.col("naive_p90")) & (pl.col("naive_p10") <= pl.col("step_ms_p90"))
    return (
        table.join(base, on="phase", how="left", maintain_order="left")
        .with_columns(pl.when(pl.col("variant") != BASELINE).then(overlap).alias("in_noise"))
        .drop("naive_p10", "naive_p90")
    )


def device_peak_tflops(a: Article, dtype: str) -> float | None:
    """The dense peak TFLOP/s of the article's device for `dtype` (bf16, fp16, fp32) from the peaks
    table, matched by the device name its provenance gives; None for a CPU or an unknown device."""
    from dashboard.engine.rules.peaks import match_device

    name = a.device_name
    devices = set(a.sweep["device"].to_list()) if a.sweep is not None and "device" in a.sweep.columns else set()
    if not name or devices == {"cpu"}:
        return None
    match = match_device({"name": name})
    return getattr(match.peak, dtype, None) if match.peak is not None else None
