"""Timelines of one step and the difference between two steps' kernel sequences."""

from __future__ import annotations

from difflib import SequenceMatcher

import polars as pl

from dashboard.engine.kernels import family_expr, work_events
from dashboard.engine.model import GPU_CATEGORIES, Trace

TIMELINE_CPU = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
DIFF_WINDOW = 2_000  # kernels aligned at once (see aligned_opcodes)


def timeline(trace: Trace, step: int) -> pl.DataFrame:
    """Events of one step for drawing: lane (e.g. 'CPU 1234 depth 2' or 'GPU 0 stream 7'), lane_kind
    ('cpu' or 'gpu'), name, family, start_us and end_us relative to the step start, dur_us, cat.
    Sorted by lane then start."""
    ev = trace.events
    row = trace.steps.filter(pl.col("step") == step)
    if row.height == 0:
        raise KeyError(f"no step {step} in {trace.source}")
    start = row["start_ns"][0]
    in_step = ev.filter((pl.col("step") == step) & pl.col("cat").is_in(TIMELINE_CPU + GPU_CATEGORIES))
    gpu = pl.col("cat").is_in(GPU_CATEGORIES)
    lane = (
        pl.when(gpu)
        .then(pl.format("GPU {} stream {}", pl.col("device").fill_null(0), pl.col("stream").fill_null(0)))
        .otherwise(pl.format("CPU {} depth {}", pl.col("tid"), pl.col("depth")))
    )
    return (
        in_step.select(
            lane.alias("lane"),
            pl.when(gpu).then(pl.lit("gpu")).otherwise(pl.lit("cpu")).alias("lane_kind"),
            pl.col("name").cast(pl.String),
            family_expr(pl.col("name"), pl.col("cat")).alias("family"),
            ((pl.col("ts_ns") - start) / 1000.0).alias("start_us"),
            ((pl.col("ts_ns") + pl.col("dur_ns") - start) / 1000.0).alias("end_us"),
            (pl.col("dur_ns") / 1000.0).alias("dur_us"),
            pl.col("cat").cast(pl.String),
            "id",
        )
        .sort("lane_kind", "lane", "start_us", descending=[True, False, False])
    )


def work_sequence(trace: Trace, step: int) -> pl.DataFrame:
    """The step's units of device work in launch order: pos, name, family, dur_ns."""
    return (
        work_events(trace)
        .filter(pl.col("step") == step)
        .sort("ts_ns")
        .select(pl.int_range(pl.len()).alias("pos"), pl.col("name").cast(pl.String), "family", "dur_ns")
    )


def sequence_diff(a: Trace, step_a: int, b: Trace, step_b: int) -> pl.DataFrame:
    """The two steps' kernel sequences aligned in order: op ('equal', 'insert', 'delete',
    'replace'), a_pos, a_name, a_family, a_dur_ns, b_pos, b_name, b_family, b_dur_ns.
    'insert' = only in b, 'delete' = only in a, 'replace' = different kernels at that point."""
    sa, sb = work_sequence(a, step_a), work_sequence(b, step_b)
    names_a, names_b = sa["name"].to_list(), sb["name"].to_list()
    rows: list[dict] = []
    for op, i1, i2, j1, j2 in aligned_opcodes(names_a, names_b):
        for k in range(max(i2 - i1, j2 - j1)):
            i, j = i1 + k, j1 + k
            in_a, in_b = i < i2, j < j2
            rows.append({"op": op if in_a and in_b else ("delete" if in_a else "insert"), "a_pos": i if in_a else None, "b_pos": j if in_b else None})
    aligned = pl.DataFrame(rows, schema={"op": pl.String, "a_pos": pl.Int64, "b_pos": pl.Int64})
    return (
        aligned.join(sa.rename({"pos": "a_pos", "name": "a_name", "family": "a_family", "dur_ns": "a_dur_ns"}), on="a_pos", how="left", maintain_order="left")
        .join(sb.rename({"pos": "b_pos", "name": "b_name", "family": "b_family", "dur_ns": "b_dur_ns"}), on="b_pos", how="left", maintain_order="left")
        .select("op", "a_pos", "a_name", "a_family", "a_dur_ns", "b_pos", "b_name", "b_family", "b_dur_ns")
    )


def aligned_opcodes(a: list[str], b: list[str], window: int = DIFF_WINDOW) -> list[tuple[str, int, int, int, int]]:
    """difflib opcodes aligning two kernel sequences. difflib's exact matcher takes time that grows
    with the square of the length when few kernel names repeat a lot (50k kernels: 40 s), so long
    sequences are aligned window by window: each window of `a` against the next stretch of `b`,
    committing up to its last matching block, so an alignment never drifts by more than a window."""
    if len(a) + len(b) <= 2 * window:
        return SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    out: list[tuple[str, int, int, int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        a_end, b_end = min(i + window, len(a)), min(j + window, len(b))
        ops = SequenceMatcher(a=a[i:a_end], b=b[j:b_end], autojunk=False).get_opcodes()
        last = a_end == len(a) and b_end == len(b)
        equal = [k for k, op in enumerate(ops) if op[0] == "equal"]
        keep = ops if last or not equal else ops[: equal[-1] + 1]
        if not equal and not last:  # nothing in common here: one replaced stretch
            keep = [("replace", 0, a_end - i, 0, b_end - j)]
        out.extend((op, i + i1, i + i2, j + j1, j + j2) for op, i1, i2, j1, j2 in keep)
        i, j = i + keep[-1][2], j + keep[-1][4]
    if i < len(a):
        out.append(("delete", i, len(a), j, j))
    if j < len(b):
        out.append(("insert", i, i, j, len(b)))
    return out


def family_time_diff(a: Trace, step_a: int, b: Trace, step_b: int) -> pl.DataFrame:
    """Time by kernel family in the two steps: family, a_count, a_ns, b_count, b_ns, delta_ns."""
    def by_family(t: Trace, step: int, side: str) -> pl.DataFrame:
        return work_sequence(t, step).group_by("family").agg(
            pl.len().alias(f"{side}_count"), pl.col("dur_ns").sum().alias(f"{side}_ns")
        )

    return (
        by_family(a, step_a, "a")
        .join(by_family(b, step_b, "b"), on="family", how="full", coalesce=True)
        .with_columns(pl.col("a_count", "a_ns", "b_count", "b_ns").fill_null(0))
        .with_columns((pl.col("b_ns") - pl.col("a_ns")).alias("delta_ns"))
        .sort("family")
    )
