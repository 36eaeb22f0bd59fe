"""The review every format renders (build_review: the engine's Comparison, each frame computed once
when a format first asks for it; Review is its old name), and the words and rows every format
shares: how each run relates to its baseline, the changed rows shown, the groups."""

from __future__ import annotations

from typing import Any

import polars as pl

from dashboard.engine.compare import review
from dashboard.engine.comparison import Comparison
from dashboard.engine.compare.fingerprint import CROSS_DEVICE
from dashboard.engine.compare.shown import (  # noqa: F401 - the reports' names, kept importable from here
    GRAPH_INPUT_COPY_OP,
    NO_ATTENTION,
    backend_check_words,
    graph_input_copies,
)
from dashboard.engine.compare.speed import (
    GROUP_CPU,
    GROUP_GPU,
    NO_SPEEDUP,
    Group,
)
from dashboard.engine.model.trace import Trace

KERNEL_CHANGES_SHOWN = review.TOP_EXPLAINED  # rows of each kernel and op diff shown (the rows 'explained' counts)
NAMES_LISTED = 60  # op names listed as only in one run, at most (then 'and N more')


Review = Comparison
"""The frames of one comparison, computed when a format first asks for them (the multi-run facade)."""


def build_review(runs: dict[str, Trace], baseline: str, *options: Any, **named: Any) -> Comparison:
    """The Comparison of `runs` (label -> Trace) against `baseline` that the reports render, with
    Comparison's own options (prices, colours, by, steps, the copy alarm's thresholds); its tables
    are computed as the formats ask for them. A baseline that is not among the runs is a KeyError."""
    if baseline not in runs:
        raise KeyError(f"baseline {baseline!r} is not among the runs")
    return Comparison(runs, baseline, *options, **named)


def _price_line(rv: Review) -> str:
    """Which prices the cost column uses, in words (plain text)."""
    names = {g.name for g in rv.groups}
    parts = []
    if GROUP_GPU in names:
        parts.append(
            f"${rv.usd_per_gpu_hour:.2f} per GPU-hour for GPU runs"
            if rv.usd_per_gpu_hour
            else "no GPU-hour price given"
        )
    if GROUP_CPU in names:
        parts.append(
            f"${rv.usd_per_cpu_hour:.2f} per CPU-hour for CPU-only runs"
            if rv.usd_per_cpu_hour
            else "no CPU-hour price given, so no cost for CPU-only runs"
        )
    return "Cost per million tokens at " + "; ".join(parts) + "."


def _group_rows(frame: pl.DataFrame, group: Group) -> pl.DataFrame:
    return frame.filter(pl.col("run").is_in(group.runs))


def _group_title(group: Group) -> str:
    return f"{group.name} runs, against {group.baseline}"


def _shown(frame: pl.DataFrame) -> pl.DataFrame:
    """The first KERNEL_CHANGES_SHOWN changed rows of a kernel_diff or op_diff frame (ranked by
    time), with µs columns for the report."""
    return (
        frame.filter(pl.col("change") != "same")
        .head(KERNEL_CHANGES_SHOWN)
        .with_columns(
            *[
                (pl.col(f"{side}_ns_per_step") / 1000.0).alias(f"{side}_us_per_step")
                for side in ("base", "other", "delta")
            ]
        )
    )


def _only(ops: pl.DataFrame, change: str) -> tuple[list[str], int]:
    """The op names of one change ('added' or 'removed'), sorted, at most NAMES_LISTED; and how many in all."""
    names = sorted(ops.filter(pl.col("change") == change)["name"].to_list())
    return names[:NAMES_LISTED], len(names)


def _steps_words(change: review.Change) -> str:
    if change.step_run is None and change.step_base is None:
        return "Over all steps (per-step figures are totals / steps)"
    word = lambda step: "all steps" if step is None else f"step {step}"  # noqa: E731
    return f"The run's {word(change.step_run)} against the baseline's {word(change.step_base)}"


# ---------- How each run relates to its baseline: said before anything else ----------

NOT_SAME_WORK = "Not the same work as its baseline"
NOT_SAME_WORK_WHY = (
    "no speedup is set between different work, and what differs between them is a difference, not a change"
)
ANOTHER_DEVICE = "The same work on another device"
ANOTHER_DEVICE_WHY = "its speedup and its differences compare the devices as well as the code"
RELATION_FINDINGS = ("different workload", "cross-device")
"""review.findings' kinds that the relation block states first: not repeated among the findings."""
# A kernel or op diff between different work is no change: each kind of row in words that say how the two differ.
DIFFERENCE_WORDS = {
    "added": "only in the run",
    "removed": "only in the baseline",
    "more": "more per step",
    "fewer": "fewer per step",
    "slower": "longer mean",
    "faster": "shorter mean",
    "same": "alike",
}


def relations(speed: pl.DataFrame) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The runs of a speed.speed_table that do other work than their baseline, and those that do
    the same work on another device: each {run, baseline, why}, in run order."""

    def rows(kind: str) -> list[dict[str, str]]:
        found = speed.filter(pl.col("relation") == kind)
        return [
            {"run": r["run"], "baseline": r["baseline"], "why": r["relation_why"] or ""}
            for r in found.iter_rows(named=True)
        ]

    return rows(NO_SPEEDUP), rows(CROSS_DEVICE)


def said_findings(findings: pl.DataFrame) -> pl.DataFrame:
    """The findings less those the relation block already says (RELATION_FINDINGS)."""
    return findings.filter(~pl.col("kind").is_in(RELATION_FINDINGS))


def as_differences(frame: pl.DataFrame) -> pl.DataFrame:
    """A kernel or op diff between different work, its change column in DIFFERENCE_WORDS."""
    return frame.with_columns(pl.col("change").replace(DIFFERENCE_WORDS))
