"""What changed in each run against its device group's baseline (Change: the kernel and op diffs,
the plain readings, how much the top rows explain), the tables that stack them by run, and the
sentence that says how much of the change the top rows account for."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from dashboard.engine.analyses.kernels import KERNEL_TABLE_SCHEMA, kernel_table
from dashboard.engine.compare.host_diff import host_reading
from dashboard.engine.compare.diff import (
    NOISE_NS,
    SLOWER,
    changed_rows,
    explained,
    kernel_diffs,
    op_diffs,
    readings,
)
from dashboard.engine.compare.speed import group_baselines
from dashboard.engine.model.formatting import signed as signed_number
from dashboard.engine.model.trace import Trace

TOP_EXPLAINED = 12  # rows of a kernel diff whose share of the change is stated


@dataclass(frozen=True)
class Change:
    """One run against its device group's baseline over the chosen steps: kernels (diff.kernel_diff,
    ranked by their effect on step time), ops (diff.op_diff), readings (diff.readings: one line per
    plain cause), top (rows counted in `explained`) and explained ((ns per step the top rows
    account for, ns per step of the whole change in summed kernel time); diff.explained)."""

    run: str
    baseline: str
    step_base: int | None
    step_run: int | None
    kernels: pl.DataFrame
    ops: pl.DataFrame
    readings: list[str]
    top: int
    explained: tuple[float, float]


def changes(
    runs: dict[str, Trace],
    baseline: str | None,
    steps: dict[str, int | None] | None = None,
    by: str = "base",
    top: int = TOP_EXPLAINED,
) -> list[Change]:
    """What changed in each run against its device group's baseline (speed.group_baselines), in run
    order, the baselines themselves left out. `steps`: run -> the step compared (None or absent:
    every step, per-step figures being totals / steps); `by`: 'name' (full kernel names) or 'base'
    (template instances folded under their base name)."""
    steps = steps or {}
    against = group_baselines(runs, baseline) if runs else {}
    compared = [label for label in runs if against.get(label) not in (None, label)]
    pairs = [(runs[against[label]], runs[label], steps.get(against[label]), steps.get(label)) for label in compared]
    sides: dict = {}  # each baseline's side of the diffs, computed once for all its runs
    all_kernels = kernel_diffs(pairs, by=by, sides=sides)  # every run's diff ranked in one query
    all_ops = op_diffs(pairs, sides=sides)
    return [
        Change(
            run=label,
            baseline=against[label],
            step_base=sb,
            step_run=so,
            kernels=kernels,
            ops=ops,  # the ops table and the readings both read it
            readings=readings(base, trace, sb, so, ops=ops) + host_reading(base, trace),
            top=top,
            explained=explained(kernels, top),
        )
        for label, (base, trace, sb, so), kernels, ops in zip(compared, pairs, all_kernels, all_ops)
    ]


KERNELS_BY_RUN_SCHEMA: dict[str, pl.DataType] = {  # kernel_table's columns (typed there), with the run and µs
    "run": pl.String,
    **KERNEL_TABLE_SCHEMA,
    "total_us": pl.Float64,
    "mean_us": pl.Float64,
}


def kernels_by_run(runs: dict[str, Trace]) -> pl.DataFrame:
    """Every kernel (leaf op on CPU traces) of every run, over all its steps (KERNELS_BY_RUN_SCHEMA):
    run, then kernels.kernel_table's columns (name, family, count, per_step, total_ns, mean_ns,
    share of the run's device work time, 0..1), then total_us and mean_us (µs, as the tables show
    them). Runs in the given order, each run's kernels in kernel_table's order."""
    frames = [kernel_table(trace).select(pl.lit(label).alias("run"), pl.all()) for label, trace in runs.items()]
    if not frames:
        return pl.DataFrame(schema=KERNELS_BY_RUN_SCHEMA)
    return pl.concat(frames, how="vertical_relaxed").with_columns(
        (pl.col("total_ns") / 1000.0).alias("total_us"),
        (pl.col("mean_ns") / 1000.0).alias("mean_us"),
    )


def diffs_by_run(changes: list[Change], table: str) -> pl.DataFrame:
    """The kernel diff (`table` 'kernels') or op diff ('ops') of every Change, one frame: run and
    baseline, then diff.kernel_diff's (or op_diff's) columns, then the times in µs as the tables
    show them: base_us_per_step, other_us_per_step, delta_us_per_step, base_mean_us, other_mean_us.
    Runs in the given order, each run's rows in its diff's order (largest change of time first)."""
    if table not in ("kernels", "ops"):
        raise ValueError(f"table is 'kernels' or 'ops', not {table!r}")
    if not changes:
        raise ValueError("no changes to stack")
    return pl.concat(
        [
            getattr(c, table).select(pl.lit(c.run).alias("run"), pl.lit(c.baseline).alias("baseline"), pl.all())
            for c in changes
        ],
        how="vertical_relaxed",
    ).with_columns(
        *[(pl.col(f"{side}_ns_per_step") / 1000.0).alias(f"{side}_us_per_step") for side in ("base", "other", "delta")],
        *[(pl.col(f"{side}_mean_ns") / 1000.0).alias(f"{side}_mean_us") for side in ("base", "other")],
    )


EXPLAINED_BY_RUN_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "baseline": pl.String,
    "rows": pl.Int64,  # the top changed rows of the run's kernel diff
    "top_us": pl.Float64,  # what they change of the summed kernel time per step, µs
    "total_us": pl.Float64,  # the change of the summed kernel time per step, µs
}


def explained_by_run(changes: list[Change]) -> pl.DataFrame:
    """How much of each run's change in summed kernel time per step its top changed rows account
    for (Change.explained, in µs), one row per run (EXPLAINED_BY_RUN_SCHEMA): the table form of
    explained_sentence for many runs."""
    return pl.DataFrame(
        {
            "run": [c.run for c in changes],
            "baseline": [c.baseline for c in changes],
            "rows": [changed_rows(c.kernels, c.top) for c in changes],
            "top_us": [c.explained[0] / 1000.0 for c in changes],
            "total_us": [c.explained[1] / 1000.0 for c in changes],
        },
        schema=EXPLAINED_BY_RUN_SCHEMA,
    )


MEAN_CHANGE = f"{SLOWER - 1:.0%}"
"""diff.SLOWER / FASTER as a reader writes them ('5%'): the mean-duration change past which a
kernel is slower or faster, for the sentences and labels that name it."""
EXPLAINED_STYLES = ("report", "tab")


def explained_sentence(change: Change, style: str = "report", lead: str = "") -> str:
    """The sentence saying how much of the change in summed kernel time per step the top changed
    rows of a run's kernel diff account for (Change.explained), its thresholds read from
    diff.SLOWER and diff.NOISE_NS. style 'report' (plain text, amounts in µs): the rows are the
    ones listed right below it, as the reports list them; 'tab' (Markdown, amounts in bold, in ms
    past 10 ms): a table of every row follows, as on the Kernels tab. `lead` goes before it (the
    sentence then starts in lower case: "Over all steps: the top 12 changed rows ...")."""
    if style not in EXPLAINED_STYLES:
        raise ValueError(f"style must be one of {', '.join(EXPLAINED_STYLES)}")
    top_ns, total_ns = change.explained
    rows = changed_rows(change.kernels, change.top)
    tab = style == "tab"

    def amount(ns: float) -> str:
        if not tab:
            return f"{signed_number(ns / 1000, 1)} µs"
        us = ns / 1000.0
        return f"**{signed_number(us, 1)} µs**" if abs(us) < 10_000 else f"**{signed_number(us / 1000, 2)} ms**"

    if not rows:
        text = (
            f"no kernel changed its count, or its mean time by more than {MEAN_CHANGE} and {NOISE_NS / 1000:g} µs a "
            f"step; summed kernel time per step changed by {amount(total_ns)}."
        )
    else:
        plural, verb = ("s", "") if rows > 1 else ("", "s")
        share = f" ({top_ns / total_ns:.0%})" if abs(total_ns) >= 1e3 else ""
        change_words = f"change in summed kernel time per step{share}"
        if tab:
            text = (
                f"the top {rows} changed row{plural} account{verb} for {amount(top_ns)} of the {amount(total_ns)} "
                f"{change_words}; the rest comes from the rows below them and those within {MEAN_CHANGE} ('same'). "
                "Summed kernel time counts overlapping kernels twice, so it is not the step time."
            )
        else:
            text = (
                f"the {rows} changed kernel{plural} below account{verb} for {amount(top_ns)} of the {amount(total_ns)} "
                f"{change_words}; the rest comes from kernels not listed. Overlapping kernels count twice, so this is "
                "not the step time."
            )
    return lead + text if lead else text[0].upper() + text[1:]
