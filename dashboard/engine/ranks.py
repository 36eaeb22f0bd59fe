"""Runs of several ranks: one trace per process of a distributed job, step times side by side and
the slowest rank of each step (the straggler every other rank waits for).

A rank's step time is the one speed.step_time uses (device busy time on GPU traces, the CPU step
span on CPU-only ones), in µs. Steps are matched across ranks by their ProfilerStep number.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from dashboard.engine.kernels import per_step
from dashboard.engine.model import Trace
from dashboard.engine.speed import step_time_column


def rank_of(trace: Trace) -> int | None:
    """The trace's rank from its distributedInfo metadata, or None when it names none."""
    info: Any = trace.meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else None


def rank_step_times(ranks: dict[int, Trace]) -> pl.DataFrame:
    """One row per (step, rank): step, rank, step_us. Steps that not every rank recorded are kept."""
    frames = [
        per_step(trace).select(
            "step", pl.lit(rank, dtype=pl.Int64).alias("rank"), (pl.col(step_time_column(trace)) / 1000.0).alias("step_us")
        )
        for rank, trace in sorted(ranks.items())
    ]
    if not frames:
        return pl.DataFrame(schema={"step": pl.Int64, "rank": pl.Int64, "step_us": pl.Float64})
    return pl.concat(frames).sort("step", "rank")


def stragglers(times: pl.DataFrame) -> pl.DataFrame:
    """Per step: step, ranks (how many recorded it), slowest_rank, slowest_us, median_us and
    spread (slowest / median: 1.0 when the ranks keep pace). Ties go to the lowest rank."""
    return (
        times.sort("step", pl.col("step_us"), "rank", descending=[False, True, False])
        .group_by("step", maintain_order=True)
        .agg(
            pl.len().alias("ranks"),
            pl.col("rank").first().alias("slowest_rank"),
            pl.col("step_us").first().alias("slowest_us"),
            pl.col("step_us").median().alias("median_us"),
        )
        .with_columns((pl.col("slowest_us") / pl.col("median_us")).alias("spread"))
    )


def slowest_rank(ranks: dict[int, Trace]) -> int | None:
    """The rank that is slowest in most steps (the one to compare when comparing whole runs);
    ties go to the rank with the larger median step time, then the lower rank."""
    if not ranks:
        return None
    times = rank_step_times(ranks)
    wins = stragglers(times).group_by("slowest_rank").len().rename({"slowest_rank": "rank"})
    medians = times.group_by("rank").agg(pl.col("step_us").median().alias("median_us"))
    ranked = medians.join(wins, on="rank", how="left").with_columns(pl.col("len").fill_null(0))
    return int(ranked.sort(["len", "median_us", "rank"], descending=[True, True, False])["rank"][0])
