"""The review's tables as the dashboard's tabs and the reports show them: the overview with its
device label, the memsets per step and the backend check in words; the CUDA graphs' static-input
copies; the small hidden copies' sums; the speed table with each run's attention efficiency; every
copy of every run. Each was computed by a view or a report before; the multi-run facade
(dashboard/engine/comparison.py) asks them here, so the views and the reports run no group_by,
join or agg of their own."""

from __future__ import annotations

import polars as pl

from dashboard.engine.analyses.copies import copies
from dashboard.engine.compare.overview import VERDICT_NOT_FORCED, device_label
from dashboard.engine.model.trace import Trace

NO_ATTENTION = "no attention found"
GRAPH_INPUT_COPY_OP = "aten::_foreach_copy_"  # where torch.compile's CUDA graphs copy inputs into their static buffers


def backend_check_words(frame: pl.DataFrame, verdict: str = "verdict", detected: str = "detected") -> pl.DataFrame:
    """`frame` (review.backend_table, or the overview with verdict='backend_verdict' and
    detected='backends') with 'not forced' read as NO_ATTENTION where no backend was detected: a
    trace without attention was not 'not forced', there is nothing to force."""
    empty = pl.col(detected).is_null() | (pl.col(detected) == "")
    return frame.with_columns(
        pl.when(empty & (pl.col(verdict) == VERDICT_NOT_FORCED))
        .then(pl.lit(NO_ATTENTION))
        .otherwise(pl.col(verdict))
        .alias(verdict)
    )


def _device_label_column() -> pl.Expr:
    return (
        pl.struct("device", "device_name", "cut")
        .map_elements(lambda r: device_label(r["device"], r["device_name"], r["cut"]), return_dtype=pl.String)
        .alias("device_label")
    )


def with_device_label(overview: pl.DataFrame) -> pl.DataFrame:
    """The overview with a `device_label` column: 'cuda · NVIDIA H100 80GB HBM3', 'cpu · AMD EPYC', 'cpu';
    a cut accelerator trace whose device events were lost: 'cuda trace, cut: device events lost · <name>'.
    Its backend check in words (backend_check_words). The reports' overview."""
    return backend_check_words(overview, "backend_verdict", "backends").with_columns(_device_label_column())


def memsets_per_step(families: pl.DataFrame) -> pl.DataFrame:
    """Per run, the Memset (Device) launches per step (review.families' memset rows summed): run,
    memsets_per_step; runs without a memset are absent."""
    return (
        families.filter(pl.col("family") == "memset")
        .group_by("run")
        .agg(pl.col("count_per_step").sum().alias("memsets_per_step"))
    )


def overview_shown(overview: pl.DataFrame, families: pl.DataFrame) -> pl.DataFrame:
    """The overview as the Overview tab shows it: the memsets per step beside it (0 on a run that
    counts kernels and launched none), the backend check in words and the device as one label."""
    joined = overview.join(memsets_per_step(families), on="run", how="left", maintain_order="left")
    return backend_check_words(joined, "backend_verdict", "backends").with_columns(
        # a run that counts kernels and launched no memset launched 0, not an unknown number
        pl.when(pl.col("work_unit") == "kernel")
        .then(pl.col("memsets_per_step").fill_null(0.0))
        .otherwise(pl.col("memsets_per_step"))
        .alias("memsets_per_step"),
        _device_label_column(),
    )


def graph_input_copies(groups: pl.DataFrame) -> pl.DataFrame:
    """Per run, the CUDA graph's static-input copies: the requested copies made under
    GRAPH_INPUT_COPY_OP (torch.compile's mode='reduce-overhead' copies every input into the graph's
    fixed buffers before each replay). `groups`: review.copy_groups. Columns: run, per_step
    (copies), us_per_step (µs), bytes_per_step; runs without such copies are absent."""
    if groups.height == 0:
        return pl.DataFrame(
            schema={"run": pl.String, "per_step": pl.Float64, "us_per_step": pl.Float64, "bytes_per_step": pl.Float64}
        )
    return (
        groups.filter(
            (pl.col("copy_class") == "requested") & pl.col("op_chain").str.contains(GRAPH_INPUT_COPY_OP, literal=True)
        )
        .group_by("run", maintain_order=True)
        .agg(pl.col("per_step").sum(), pl.col("us_per_step").sum(), pl.col("bytes_per_step").sum())
    )


def small_copy_sums(groups: pl.DataFrame) -> pl.DataFrame:
    """Per run (in order), the hidden copies under the alarm's threshold (review.copy_groups' hidden
    rows that are no alarm), summed: run, per_step, bytes_per_step; runs without one are absent."""
    return (
        groups.filter(pl.col("hidden") & ~pl.col("alarm"))
        .group_by("run", maintain_order=True)
        .agg(pl.col("per_step").sum(), pl.col("bytes_per_step").sum())
    )


def with_attention(speed: pl.DataFrame, attention: pl.DataFrame) -> pl.DataFrame:
    """The speed table (speed.speed_table) with each run's attention TFLOP/s, % of roofline, its
    measure and why none, from review.attention_efficiency's first row of the run (the whole step
    on collectors' traces, where variants compare)."""
    first = attention.unique("run", keep="first", maintain_order=True)
    return speed.join(
        first.select(
            "run",
            pl.col("tflops").alias("attn_tflops"),
            pl.col("pct_of_roofline").alias("attn_pct"),
            pl.col("measure").alias("attn_measure"),
            pl.col("reason").alias("attn_reason"),
        ),
        on="run",
        how="left",
        maintain_order="left",
    )


def every_copy(runs: dict[str, Trace]) -> pl.DataFrame:
    """Every copy of every run (copies.copies, a run column first), in run order, with dur_us and
    the op chain as one string (chain, outermost first, joined by ' > ')."""
    every = pl.concat(
        [copies(t).select(pl.lit(label).alias("run"), pl.all()) for label, t in runs.items()], how="vertical_relaxed"
    )
    if every.height == 0:
        return every
    return every.with_columns(
        (pl.col("dur_ns") / 1000.0).alias("dur_us"),
        pl.col("op_chain").list.join(" > ").alias("chain"),
    )
