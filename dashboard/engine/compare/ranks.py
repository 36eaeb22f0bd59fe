"""Runs of several ranks: one trace per process of a distributed job, step times side by side and
the slowest rank of each step (the straggler every other rank waits for).

A rank's step time is the one speed.step_time uses (device busy time on GPU traces, the CPU step
span on CPU-only ones), in µs. Steps are matched across ranks by their ProfilerStep number.
Two runs are compared rank by rank (the same rank's median step time in each) and slowest rank
against slowest rank; a median here is over the rank's own steps, as speed.step_time takes it, so
the slowest rank's median is what the other tabs show for a run whose trace is that rank's.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from dashboard.engine.analyses.kernels import per_step
from dashboard.engine.model.trace import Trace
from dashboard.engine.compare.speed import step_time_column


def rank_of(trace: Trace) -> int | None:
    """The trace's rank from its distributedInfo metadata, or None when it names none."""
    info: Any = trace.meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else None


def rank_step_times(ranks: dict[int, Trace]) -> pl.DataFrame:
    """One row per (step, rank): step, rank, step_us. Steps that not every rank recorded are kept."""
    frames = [
        per_step(trace).select(
            "step",
            pl.lit(rank, dtype=pl.Int64).alias("rank"),
            (pl.col(step_time_column(trace)) / 1000.0).alias("step_us"),
        )
        for rank, trace in sorted(ranks.items())
    ]
    if not frames:
        return pl.DataFrame(schema={"step": pl.Int64, "rank": pl.Int64, "step_us": pl.Float64})
    return pl.concat(frames).sort("step", "rank")


def rank_matrix(times: pl.DataFrame) -> pl.DataFrame:
    """`times` (rank_step_times) as step x rank: one row per step (ascending), then one column
    per rank named by its number ('0', '1', ... ascending), the step time in µs, null where that
    rank did not record the step."""
    ranks = sorted(set(times["rank"].to_list()))
    steps = times.select("step").unique().sort("step")
    for rank in ranks:
        mine = times.filter(pl.col("rank") == rank).select("step", pl.col("step_us").alias(str(rank)))
        steps = steps.join(mine, on="step", how="left", maintain_order="left")
    return steps


STRAGGLER_SPREAD = 1.02
"""A step's slowest rank is a straggler when it takes at least this many times the median rank's
time (2% longer or more): the Ranks tab shades those steps and `attnscope summary` marks them."""


def stragglers(times: pl.DataFrame, threshold: float = STRAGGLER_SPREAD) -> pl.DataFrame:
    """Per step: step, ranks (how many recorded it), slowest_rank, slowest_us, median_us, spread
    (slowest / median: 1.0 when the ranks keep pace; NaN when no rank did any work), behind_us
    (slowest - median: how long the median rank waits for the straggler) and straggler (spread
    >= threshold: the slowest rank holds the others up; false where no rank did any work). Ties
    go to the lowest rank."""
    return (
        times.sort("step", pl.col("step_us"), "rank", descending=[False, True, False])
        .group_by("step", maintain_order=True)
        .agg(
            pl.len().alias("ranks"),
            pl.col("rank").first().alias("slowest_rank"),
            pl.col("step_us").first().alias("slowest_us"),
            pl.col("step_us").median().alias("median_us"),
        )
        .with_columns(
            (pl.col("slowest_us") / pl.col("median_us")).alias("spread"),
            (pl.col("slowest_us") - pl.col("median_us")).alias("behind_us"),
        )
        .with_columns(
            # polars orders NaN above every number: a step without work (0 / 0) must not pass the threshold
            (pl.col("spread").is_not_nan() & (pl.col("spread") >= threshold)).fill_null(False).alias("straggler"),
        )
    )


def slowest_rank(ranks: dict[int, Trace]) -> int | None:
    """The rank that is slowest in most steps (the one to compare when comparing whole runs),
    counting the steps where the slowest rank is behind the median rank; ties go to the rank with
    the larger median step time, then the lower rank."""
    if not ranks:
        return None
    return slowest_of(rank_step_times(ranks))


def slowest_of(times: pl.DataFrame) -> int | None:
    """slowest_rank from the step times (rank_step_times) already computed."""
    if times.height == 0:
        return None
    # a step where every rank took the same time (or none did any work) has no straggler
    wins = (
        stragglers(times)
        .filter(pl.col("behind_us") > 0)
        .group_by("slowest_rank")
        .len()
        .rename({"slowest_rank": "rank"})
    )
    medians = times.group_by("rank").agg(pl.col("step_us").median().alias("median_us"))
    ranked = medians.join(wins, on="rank", how="left").with_columns(pl.col("len").fill_null(0))
    return int(ranked.sort(["len", "median_us", "rank"], descending=[True, True, False])["rank"][0])


def rank_medians(times: pl.DataFrame) -> pl.DataFrame:
    """Per rank (ascending): rank, steps (how many it recorded), median_us (its median step time)
    and straggler_steps (in how many steps it was the slowest rank and behind the median rank:
    a step where every rank kept pace, or none did any work, has no straggler)."""
    wins = (
        stragglers(times)
        .filter(pl.col("behind_us") > 0)
        .group_by("slowest_rank")
        .agg(pl.len().cast(pl.Int64).alias("straggler_steps"))
        .rename({"slowest_rank": "rank"})
    )
    return (
        times.group_by("rank")
        .agg(pl.len().cast(pl.Int64).alias("steps"), pl.col("step_us").median().alias("median_us"))
        .join(wins, on="rank", how="left")
        .with_columns(pl.col("straggler_steps").fill_null(0))
        .sort("rank")
    )


def compare_ranks(baseline: pl.DataFrame, candidate: pl.DataFrame) -> pl.DataFrame:
    """Two runs' step times (rank_step_times each) rank by rank: rank, baseline_us, candidate_us
    (each rank's median step time in µs; null where the run has no such rank) and speedup
    (baseline / candidate: above 1 the candidate's rank is faster). Every rank of either run, in
    ascending order."""
    base = rank_medians(baseline).select("rank", pl.col("median_us").alias("baseline_us"))
    cand = rank_medians(candidate).select("rank", pl.col("median_us").alias("candidate_us"))
    return (
        base.join(cand, on="rank", how="full", coalesce=True)
        .with_columns(_speedup("baseline_us", "candidate_us"))
        .sort("rank")
    )


def compare_slowest(baseline: pl.DataFrame, candidate: pl.DataFrame) -> pl.DataFrame:
    """Two runs' step times (rank_step_times each) compared on what the job waits for. Two rows,
    measure, baseline_rank, baseline_us, candidate_rank, candidate_us, speedup (baseline /
    candidate; above 1 faster):
    'slowest rank': each run's slowest rank (slowest_of) and its median step time, the pair the
    other tabs compare; 'slowest of each step': the median over steps of the step's slowest time,
    whichever rank it was (rank null)."""
    rows = []
    for times in (baseline, candidate):
        rank = slowest_of(times)
        mine = times.filter(pl.col("rank") == rank)["step_us"] if rank is not None else pl.Series([], dtype=pl.Float64)
        rows.append(
            (
                rank,
                mine.median() if mine.len() else None,
                stragglers(times)["slowest_us"].median() if times.height else None,
            )
        )
    (b_rank, b_slowest, b_each), (c_rank, c_slowest, c_each) = rows
    return pl.DataFrame(
        {
            "measure": ["slowest rank", "slowest of each step"],
            "baseline_rank": [b_rank, None],
            "baseline_us": [b_slowest, b_each],
            "candidate_rank": [c_rank, None],
            "candidate_us": [c_slowest, c_each],
        },
        schema={
            "measure": pl.String,
            "baseline_rank": pl.Int64,
            "baseline_us": pl.Float64,
            "candidate_rank": pl.Int64,
            "candidate_us": pl.Float64,
        },
    ).with_columns(_speedup("baseline_us", "candidate_us"))


def _speedup(baseline: str, candidate: str) -> pl.Expr:
    """baseline / candidate, null where either is missing or the candidate took no time."""
    return pl.when(pl.col(candidate) > 0).then(pl.col(baseline) / pl.col(candidate)).otherwise(None).alias("speedup")
