"""review.changes ranks every run's kernel and op diff in one query (diff._changes_of): each diff
must be the frame the obvious way gives, one pair at a time (the per-pair code the engine had
before, written out here on the traces' own events), on every real trace in tests/data and every
bundled sample collection, by full and by base name, over every step and over one step."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from dashboard.engine.analyses.kernels import work_events
from dashboard.engine.compare import review_changes
from dashboard.engine.compare.diff import (
    FASTER,
    NOISE_NS,
    OP_CATEGORIES,
    SLOWER,
    _base_names,
    COMPILED_OPS,
    GRAPH_LAUNCHES,
    KERNEL_LAUNCHES,
    _changes_of,
    _op_readings,
    kernel_diffs,
)

REPO = Path(__file__).resolve().parent.parent
DATA = sorted((REPO / "tests" / "data").glob("*.json.gz"))
SAMPLES = sorted(p for p in (REPO / "sample_traces").iterdir() if p.is_dir() and list(p.glob("*.json.gz")))


def _per_step(frame: pl.DataFrame, keys: list[str], steps: list[int], side: str) -> pl.DataFrame:
    n = max(len(steps), 1)
    return (
        frame.filter(pl.col("step").is_in(steps))
        .group_by(keys)
        .agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total"))
        .select(
            *keys,
            (pl.col("count") / n).alias(f"{side}_per_step"),
            (pl.col("total") / n).alias(f"{side}_ns_per_step"),
            (pl.col("total") / pl.col("count")).alias(f"{side}_mean_ns"),
        )
    )


def _one_pair(base: pl.DataFrame, other: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The diff of one pair, joined and ranked on its own."""
    joined = base.join(other, on=keys, how="full", coalesce=True).with_columns(
        pl.col("base_per_step", "other_per_step", "base_ns_per_step", "other_ns_per_step").fill_null(0.0)
    )
    b, o = pl.col("base_per_step"), pl.col("other_per_step")
    ratio = pl.col("other_mean_ns") / pl.col("base_mean_ns")
    moved = (pl.col("other_ns_per_step") - pl.col("base_ns_per_step")).abs() >= NOISE_NS
    change = (
        pl.when(b == 0)
        .then(pl.lit("added"))
        .when(o == 0)
        .then(pl.lit("removed"))
        .when(o > b)
        .then(pl.lit("more"))
        .when(o < b)
        .then(pl.lit("fewer"))
        .when((ratio > SLOWER) & moved)
        .then(pl.lit("slower"))
        .when((ratio < FASTER) & moved)
        .then(pl.lit("faster"))
        .otherwise(pl.lit("same"))
    )
    return (
        joined.with_columns(
            (o - b).alias("delta_per_step"),
            (pl.col("other_ns_per_step") - pl.col("base_ns_per_step")).alias("delta_ns_per_step"),
            change.alias("change"),
        )
        .sort(
            [pl.col("delta_ns_per_step").abs(), pl.col("delta_per_step").abs(), *keys],
            descending=[True, True] + [False] * len(keys),
        )
        .select(
            *keys,
            "change",
            "base_per_step",
            "other_per_step",
            "delta_per_step",
            "base_ns_per_step",
            "other_ns_per_step",
            "delta_ns_per_step",
            "base_mean_ns",
            "other_mean_ns",
        )
    )


def _steps(trace, step):
    return trace.steps["step"].to_list() if step is None else [step]


def _kernels(trace, step, by, side):
    work = work_events(trace).select("step", pl.col("name").cast(pl.String), "family", "dur_ns")
    if by == "base":
        work = work.with_columns(_base_names(work["name"]).alias("name"))
    return _per_step(work, ["name", "family"], _steps(trace, step), side)


def _ops(trace, step, side):
    ops = trace.events.filter(
        pl.col("cat").is_in(OP_CATEGORIES) & ~pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#")
    ).select("step", pl.col("name").cast(pl.String), pl.col("cat").cast(pl.String), "dur_ns")
    return _per_step(ops, ["name", "cat"], _steps(trace, step), side)


def _check(runs: dict, baseline: str) -> int:
    """Every Change of `runs` against the per-pair frames; how many diffs were compared."""
    compared = 0
    one_step = {label: (t.steps["step"].to_list() or [None])[-1] for label, t in runs.items()}
    for steps in (None, one_step):
        for by in ("name", "base"):
            for change in review_changes.changes(runs, baseline, steps=steps, by=by):
                base, other = runs[change.baseline], runs[change.run]
                sb, so = change.step_base, change.step_run
                assert (sb, so) == ((None, None) if steps is None else (steps[change.baseline], steps[change.run]))
                kernels = _one_pair(
                    _kernels(base, sb, by, "base"), _kernels(other, so, by, "other"), ["name", "family"]
                )
                ops = _one_pair(_ops(base, sb, "base"), _ops(other, so, "other"), ["name", "cat"])
                assert change.kernels.equals(kernels), (change.run, by, steps)
                assert change.ops.equals(ops), (change.run, by, steps)
                compared += 2
    return compared


def test_every_real_trace_against_the_first_gives_the_per_pair_diffs(trace_of):
    runs = {path.name: trace_of(path) for path in DATA}
    assert _check(runs, DATA[0].name) >= 8 * (len(DATA) - 2)  # (two groups: one baseline each)


@pytest.mark.parametrize("collection", SAMPLES, ids=lambda p: p.name)
def test_every_bundled_collection_gives_the_per_pair_diffs(trace_of, collection):
    paths = sorted(collection.glob("*.json.gz"))
    runs = {path.name: trace_of(path) for path in paths}
    assert _check(runs, paths[0].name) >= 8 * (len(paths) - 1) > 0


def test_a_pair_with_no_rows_is_an_empty_diff_in_its_place(trace_of):
    assert kernel_diffs([]) == []
    trace = trace_of(DATA[0])
    a, b = _kernels(trace, None, "name", "base"), _kernels(trace, None, "name", "other")
    assert a.height > 0
    none_a, none_b = a.clear(), b.clear()
    got = _changes_of([(none_a, none_b), (a, b.head(3)), (none_a, none_b)], ["name", "family"])
    expected = _one_pair(a, b.head(3), ["name", "family"])
    assert got[1].equals(expected) and expected.height == a.height
    assert got[0].equals(expected.clear()) and got[2].equals(expected.clear())


def test_what_the_readings_read_off_an_op_diff_is_what_one_filter_each_gives(trace_of):
    """diff._op_readings (one select) against a filter per figure, on the op diff of every real
    trace and bundled run against its group's baseline."""
    checked = 0
    for collection in [DATA, *(sorted(c.glob("*.json.gz")) for c in SAMPLES)]:
        runs = {path.name: trace_of(path) for path in collection}
        for change in review_changes.changes(runs, collection[0].name):
            ops = change.ops
            read = _op_readings(ops)

            def rows(pattern: str, change: str | None = None):
                match = pl.col("name").str.contains(pattern)
                return ops.filter(match if change is None else match & (pl.col("change") == change))

            assert sorted(read["compiled_in"]) == sorted(rows(COMPILED_OPS, "added")["name"].to_list())
            assert sorted(read["compiled_out"]) == sorted(rows(COMPILED_OPS, "removed")["name"].to_list())
            assert read["removed"] == ops.filter(pl.col("change") == "removed").height
            for what, pattern in (
                ("compiled", COMPILED_OPS),
                ("graphs", GRAPH_LAUNCHES),
                ("launches", KERNEL_LAUNCHES),
            ):
                for side in ("base", "other"):
                    assert read["per_step"][what, side] == float(rows(pattern)[f"{side}_per_step"].sum())
            checked += 1
    assert checked >= 30
