"""What changed between two runs: kernels ranked by their effect on step time, the CPU ops beside
them, a one-line reading of the big changes, and the two steps' kernel sequences aligned in
launch order.

"Per step" means over the steps a user picked: one step of each run, or (the default) every step,
where a per-step figure is the total over all steps divided by their number (so that rows add up
to the step's total). Times are ns unless a column name says otherwise."""

from __future__ import annotations

from collections.abc import Callable
from difflib import SequenceMatcher

import polars as pl

from dashboard.engine.analyses.kernels import family_expr, work_events
from dashboard.engine.model.trace import GPU_CATEGORIES, LAUNCH_CATEGORIES, Trace
from dashboard.engine.rules import GRAPH_LAUNCH, HOST_SPANS, KERNEL_LAUNCH

TIMELINE_CPU = HOST_SPANS + LAUNCH_CATEGORIES  # rules.HOST_CATEGORIES, then every vendor's launch calls
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
    return in_step.select(
        lane.alias("lane"),
        pl.when(gpu).then(pl.lit("gpu")).otherwise(pl.lit("cpu")).alias("lane_kind"),
        pl.col("name").cast(pl.String),
        family_expr(pl.col("name"), pl.col("cat")).alias("family"),
        ((pl.col("ts_ns") - start) / 1000.0).alias("start_us"),
        ((pl.col("ts_ns") + pl.col("dur_ns") - start) / 1000.0).alias("end_us"),
        (pl.col("dur_ns") / 1000.0).alias("dur_us"),
        pl.col("cat").cast(pl.String),
        "id",
    ).sort("lane_kind", "lane", "start_us", descending=[True, False, False])


def work_sequence(trace: Trace, step: int) -> pl.DataFrame:
    """The step's units of device work in launch order: pos, name, family, dur_ns, stream.

    Launch order is the order of the CPU calls that launched them (the launch's ts, then its
    correlation id), whatever stream each ran on; work whose launch is not in the trace, and the
    leaf ops of a CPU-only trace, take their own start time."""
    ev = trace.events
    work = work_events(trace).filter(pl.col("step") == step)
    # `id` is the row number: the step's rows and their launches' times are gathered, not joined
    # against every event (two joins over the 910 MB trace's 2.2 million events took 0.16 s a step)
    launch = ev["launch"].gather(work["id"])
    work = work.with_columns(
        launch.alias("launch"),
        ev["correlation"].gather(work["id"]).alias("correlation"),
        ev["ts_ns"].gather(launch).alias("launch_ts"),
    )
    return (
        work.with_columns(pl.coalesce("launch_ts", "ts_ns").alias("order_ns"))
        .sort("order_ns", "correlation", "ts_ns", "id", nulls_last=True)
        .select(pl.int_range(pl.len()).alias("pos"), pl.col("name").cast(pl.String), "family", "dur_ns", "stream")
    )


def sequence_diff(a: Trace, step_a: int, b: Trace, step_b: int) -> pl.DataFrame:
    """The two steps' kernel sequences aligned in launch order: op ('equal', 'insert', 'delete',
    'replace'), a_pos, a_name, a_family, a_dur_ns, a_stream, b_pos, b_name, b_family, b_dur_ns, b_stream.
    'insert' = only in b, 'delete' = only in a, 'replace' = different kernels at that point."""
    sa, sb = work_sequence(a, step_a), work_sequence(b, step_b)
    names_a, names_b = sa["name"].to_list(), sb["name"].to_list()
    rows: list[dict] = []
    for op, i1, i2, j1, j2 in aligned_opcodes(names_a, names_b):
        for k in range(max(i2 - i1, j2 - j1)):
            i, j = i1 + k, j1 + k
            in_a, in_b = i < i2, j < j2
            rows.append(
                {
                    "op": op if in_a and in_b else ("delete" if in_a else "insert"),
                    "a_pos": i if in_a else None,
                    "b_pos": j if in_b else None,
                }
            )
    aligned = pl.DataFrame(rows, schema={"op": pl.String, "a_pos": pl.Int64, "b_pos": pl.Int64})
    return (
        aligned.join(
            sa.rename(
                {"pos": "a_pos", "name": "a_name", "family": "a_family", "dur_ns": "a_dur_ns", "stream": "a_stream"}
            ),
            on="a_pos",
            how="left",
            maintain_order="left",
        )
        .join(
            sb.rename(
                {"pos": "b_pos", "name": "b_name", "family": "b_family", "dur_ns": "b_dur_ns", "stream": "b_stream"}
            ),
            on="b_pos",
            how="left",
            maintain_order="left",
        )
        .select(
            "op",
            "a_pos",
            "a_name",
            "a_family",
            "a_dur_ns",
            "a_stream",
            "b_pos",
            "b_name",
            "b_family",
            "b_dur_ns",
            "b_stream",
        )
    )


def aligned_opcodes(a: list[str], b: list[str], window: int = DIFF_WINDOW) -> list[tuple[str, int, int, int, int]]:
    """difflib opcodes aligning two kernel sequences. difflib's exact matcher takes time that grows
    with the square of the length when few kernel names repeat a lot (50k kernels: 40 s), so long
    sequences are aligned window by window: each window of `a` against the next stretch of `b`,
    committing up to its last matching block, so an alignment never drifts by more than a window.
    Their common head and tail are taken as equal first, in linear time: two steps of one run
    usually differ in a few places or none (two 90,000-kernel steps took 14-21 s before)."""
    if a == b:  # two steps of one run, or a run against itself: equal, in linear time
        return [("equal", 0, len(a), 0, len(b))] if a else []
    if len(a) + len(b) <= 2 * window:
        return SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    short = min(len(a), len(b))
    head = 0
    while head < short and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < short - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    out: list[tuple[str, int, int, int, int]] = [("equal", 0, head, 0, head)] if head else []
    for op, i1, i2, j1, j2 in _windowed_opcodes(a[head : len(a) - tail], b[head : len(b) - tail], window):
        if op == "equal" and out and out[-1][0] == "equal" and (out[-1][2], out[-1][4]) == (head + i1, head + j1):
            out[-1] = ("equal", out[-1][1], head + i2, out[-1][3], head + j2)
        else:
            out.append((op, head + i1, head + i2, head + j1, head + j2))
    if tail:
        end = ("equal", len(a) - tail, len(a), len(b) - tail, len(b))
        if out and out[-1][0] == "equal" and (out[-1][2], out[-1][4]) == (end[1], end[3]):
            end = ("equal", out[-1][1], len(a), out[-1][3], len(b))
            out.pop()
        out.append(end)
    return out


PROBE = 128  # kernels tried first after a difference: most differences resync within it
RESYNC = 32  # an equal block at least this long, ending at the probe's end, counts as back in step


def _windowed_opcodes(a: list[str], b: list[str], window: int) -> list[tuple[str, int, int, int, int]]:
    if len(a) + len(b) <= 2 * window:
        return SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if a or b else []
    out: list[tuple[str, int, int, int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        same = i
        while same < len(a) and same - i + j < len(b) and a[same] == b[same - i + j]:
            same += 1
        if same > i:  # in step: linear, no matcher
            out.append(("equal", i, same, j, j + same - i))
            i, j = same, j + same - i
            continue
        keep = None
        probe = min(PROBE, window)
        if probe < window:  # a small window first; the full one when it does not get back in step
            ops = SequenceMatcher(a=a[i : i + probe], b=b[j : j + probe], autojunk=False).get_opcodes()
            op, _, i2, _, j2 = ops[-1]
            if (
                op == "equal"
                and i2 - ops[-1][1] >= RESYNC
                and (i + i2 == min(i + probe, len(a)) or j + j2 == min(j + probe, len(b)))
            ):
                keep = ops
        if keep is None:
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
        return (
            work_sequence(t, step)
            .group_by("family")
            .agg(pl.len().alias(f"{side}_count"), pl.col("dur_ns").sum().alias(f"{side}_ns"))
        )

    return (
        by_family(a, step_a, "a")
        .join(by_family(b, step_b, "b"), on="family", how="full", coalesce=True)
        .with_columns(pl.col("a_count", "a_ns", "b_count", "b_ns").fill_null(0))
        .with_columns((pl.col("b_ns") - pl.col("a_ns")).alias("delta_ns"))
        .sort("family")
    )


# Changes of a name between two runs, in the order they are decided: 'added' (only in the run),
# 'removed' (only in the baseline), 'more' / 'fewer' (launched or called more or less often per
# step), 'slower' / 'faster' (same count, mean duration beyond SLOWER / FASTER and time per step
# moved by at least NOISE_NS), 'same' (everything else).
CHANGES: tuple[str, ...] = ("added", "removed", "more", "fewer", "slower", "faster", "same")
SLOWER, FASTER = 1.05, 0.95  # mean-duration ratios beyond which a name is 'slower' / 'faster'
NOISE_NS = 100.0
"""A name whose mean moved past SLOWER / FASTER is 'slower' / 'faster' only when its time per step
moved by at least this many ns (0.1 µs); below it, 'same'. Sub-µs work jitters by tens of ns
between runs: naive's 0.74 µs memset reads 0.78 µs beside sdpa (+0.043 µs, +6%), which is noise,
not a slower kernel."""
GROUP_BY = ("name", "base")  # kernels by full name, or by base name (templates and namespaces folded)


def chosen_steps(trace: Trace, step: int | None) -> list[int]:
    """The steps a per-step figure covers: [step], or every step of the trace when step is None."""
    if step is None:
        return trace.steps["step"].to_list()
    if step not in trace.steps["step"].to_list():
        raise KeyError(f"no step {step} in {trace.source}")
    return [step]


PAIR = "__pair"  # (which part of a batch a row belongs to, beside the keys; no key is named so)


def _per_step_of(
    parts: list[tuple[pl.DataFrame | pl.LazyFrame, list[int], str]],
    keys: list[str],
    names: Callable[[pl.Series], pl.Series] | None = None,
) -> list[pl.DataFrame]:
    """For each (frame, steps, side): count and total time per step of each key over the steps
    ({side}_per_step, {side}_ns_per_step, {side}_mean_ns), in order, worked out in one query (a
    diff of 21 runs asks for 42 of these). `names`: what the `name` column is replaced by first."""
    if not parts:
        return []
    stacked = pl.concat(
        [
            frame.lazy().filter(pl.col("step").is_in(steps)).select(pl.lit(i, pl.UInt32).alias(PAIR), *keys, "dur_ns")
            for i, (frame, steps, _) in enumerate(parts)
        ]
    )
    if names is not None:  # (every part's names at once: each distinct one parsed once)
        eager = stacked.collect()
        stacked = eager.with_columns(names(eager["name"]).alias("name")).lazy()
    totals = stacked.group_by(PAIR, *keys).agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total")).collect()
    split = totals.partition_by(PAIR, as_dict=True, include_key=False)
    none = totals.clear().drop(PAIR)  # a part with no rows in its steps
    out = []
    for i, (_, steps, side) in enumerate(parts):
        n = max(len(steps), 1)
        # divided part by part, by the number n: polars divides a column of one row by n, and a
        # longer one by multiplying it by 1 / n, so the figures are those a query per part gives
        out.append(
            split.get((i,), none).select(
                *keys,
                (pl.col("count") / n).alias(f"{side}_per_step"),
                (pl.col("total") / n).alias(f"{side}_ns_per_step"),
                (pl.col("total") / pl.col("count")).alias(f"{side}_mean_ns"),
            )
        )
    return out


def _changes_of(pairs: list[tuple[pl.DataFrame, pl.DataFrame]], keys: list[str]) -> list[pl.DataFrame]:
    """For each (base, other) pair of _per_step_of frames, in order: the two joined, each key's
    change named, ranked by the change of its time per step (largest first, either sign), then of
    its count, then by key. One query for every pair: their rows stacked, each with its pair's
    number beside its keys, so that a key joins only within its pair."""
    if not pairs:
        return []

    def stacked(side: int) -> pl.LazyFrame:
        return pl.concat(
            [pair[side].lazy().with_columns(pl.lit(i, pl.UInt32).alias(PAIR)) for i, pair in enumerate(pairs)]
        )

    joined = stacked(0).join(stacked(1), on=[PAIR, *keys], how="full", coalesce=True)
    joined = joined.with_columns(
        pl.col("base_per_step", "other_per_step", "base_ns_per_step", "other_ns_per_step").fill_null(0.0)
    )
    ratio = pl.col("other_mean_ns") / pl.col("base_mean_ns")
    moved = (pl.col("other_ns_per_step") - pl.col("base_ns_per_step")).abs() >= NOISE_NS
    change = (
        pl.when(pl.col("base_per_step") == 0)
        .then(pl.lit("added"))
        .when(pl.col("other_per_step") == 0)
        .then(pl.lit("removed"))
        .when(pl.col("other_per_step") > pl.col("base_per_step"))
        .then(pl.lit("more"))
        .when(pl.col("other_per_step") < pl.col("base_per_step"))
        .then(pl.lit("fewer"))
        .when((ratio > SLOWER) & moved)
        .then(pl.lit("slower"))
        .when((ratio < FASTER) & moved)
        .then(pl.lit("faster"))
        .otherwise(pl.lit("same"))
    )
    ranked = (
        joined.with_columns(
            (pl.col("other_per_step") - pl.col("base_per_step")).alias("delta_per_step"),
            (pl.col("other_ns_per_step") - pl.col("base_ns_per_step")).alias("delta_ns_per_step"),
            change.alias("change"),
        )
        .sort(
            [pl.col(PAIR), pl.col("delta_ns_per_step").abs(), pl.col("delta_per_step").abs(), *keys],
            descending=[False, True, True] + [False] * len(keys),
        )
        .select(
            PAIR,
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
        .collect()
    )
    parts = ranked.partition_by(PAIR, maintain_order=True, include_key=False, as_dict=True)
    none = ranked.clear().drop(PAIR)  # a pair with no rows on either side
    return [parts.get((i,), none) for i in range(len(pairs))]


def _base_names(names: pl.Series) -> pl.Series:
    """Each kernel name's base name (namespace::function, template arguments and signature
    dropped: split_embedding_*<2ul> and <5ul> fold into one), parsed once per distinct name."""
    from dashboard.engine.rules.names import parse

    distinct = names.unique().drop_nulls().to_list()
    mapping = {name: parse(name).qualname or name for name in distinct}
    return names.replace_strict(mapping, default=None, return_dtype=pl.String)


Sides = dict[tuple, pl.DataFrame]  # one side of a diff (_per_step_of) by (table, id(trace), step, by, side)


def _kernel_sides(wanted: list[tuple[Trace, int | None, str]], by: str) -> list[pl.DataFrame]:
    parts = [
        (
            work_events(trace).select("step", pl.col("name").cast(pl.String), "family", "dur_ns"),
            chosen_steps(trace, step),
            side,
        )
        for trace, step, side in wanted
    ]
    return _per_step_of(parts, ["name", "family"], _base_names if by == "base" else None)


def kernel_diff(
    base: Trace,
    other: Trace,
    step_base: int | None = None,
    step_other: int | None = None,
    by: str = "name",
    sides: Sides | None = None,
) -> pl.DataFrame:
    """Units of device work of `other` against `base`, ranked by their effect on step time:
    name, family, change (see CHANGES: 'slower' / 'faster' need the mean off by more than 5% and
    the time per step by at least NOISE_NS; the views, reports and `compare` read this column), base_per_step, other_per_step, delta_per_step,
    base_ns_per_step, other_ns_per_step, delta_ns_per_step (total time per step), base_mean_ns,
    other_mean_ns. by='base' groups template instances of one kernel under its base name. `sides`:
    a dict the calls of one batch share, so a trace's side is computed once (the traces must stay
    alive while it is used: it is keyed by their id)."""
    return kernel_diffs([(base, other, step_base, step_other)], by, sides)[0]


Pair = tuple[Trace, Trace, int | None, int | None]  # (base, other, step_base, step_other) of a diff


def _sides_of(pairs: list[Pair], sides: Sides | None, table: str, by: str | None, compute) -> list[tuple]:
    """Each pair's (base side, other side): the frames `sides` keeps (the diffs of several runs
    against one baseline share the baseline's side: review_changes.changes hands them one dict),
    the others computed at once by compute([(trace, step, side), ...]) and kept there."""
    sides = {} if sides is None else sides

    def key(trace: Trace, step: int | None, side: str) -> tuple:
        return (table, id(trace), step, by, side)

    asked = [
        (trace, step, side)
        for base, other, sb, so in pairs
        for trace, step, side in ((base, sb, "base"), (other, so, "other"))
    ]
    wanted = {key(*one): one for one in asked if key(*one) not in sides}  # (each once, in the order asked)
    sides.update(zip(wanted, compute(list(wanted.values()))))
    return [(sides[key(base, sb, "base")], sides[key(other, so, "other")]) for base, other, sb, so in pairs]


def kernel_diffs(pairs: list[Pair], by: str = "name", sides: Sides | None = None) -> list[pl.DataFrame]:
    """kernel_diff of each (base, other, step_base, step_other), in order, ranked in one query
    (_changes_of): a tab diffing 21 runs against their baseline asks for them all at once."""
    if by not in GROUP_BY:
        raise ValueError(f"by must be one of {', '.join(GROUP_BY)}")
    found = _sides_of(pairs, sides, "kernels", by, lambda wanted: _kernel_sides(wanted, by))
    return _changes_of(found, ["name", "family"])


def explained(changes: pl.DataFrame, top: int) -> tuple[float, float]:
    """(change of the summed work time per step that the first `top` changed rows of a kernel_diff
    or op_diff frame account for: the rows a report lists, 'same' ones left out; the change over
    all rows, 'same' ones included), both ns per step. Rows of both signs count with their sign,
    so the share can pass 100% when other rows pull the other way."""
    total = float(changes["delta_ns_per_step"].sum() or 0.0)
    shown = changes.filter(pl.col("change") != "same").head(top)
    return float(shown["delta_ns_per_step"].sum() or 0.0), total


def changed_rows(changes: pl.DataFrame, top: int) -> int:
    """How many rows `explained` counts: the first `top` that are not 'same'."""
    return min(top, int((changes["change"] != "same").sum()))


OP_CATEGORIES = TIMELINE_CPU  # the host side op_diff compares: the timeline's (rules.HOST_CATEGORIES, launch calls)


def _op_sides(wanted: list[tuple[Trace, int | None, str]]) -> list[pl.DataFrame]:
    ops = [
        trace.events.lazy()
        .filter(pl.col("cat").is_in(OP_CATEGORIES) & ~pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#"))
        .select("step", pl.col("name").cast(pl.String), pl.col("cat").cast(pl.String), "dur_ns")
        for trace, _, _ in wanted
    ]
    return _per_step_of(
        [(frame, chosen_steps(t, step), side) for frame, (t, step, side) in zip(ops, wanted)], ["name", "cat"]
    )


def op_diff(
    base: Trace,
    other: Trace,
    step_base: int | None = None,
    step_other: int | None = None,
    sides: Sides | None = None,
) -> pl.DataFrame:
    """CPU ops, annotations and runtime calls (cudaLaunchKernel, cudaGraphLaunch, ...) of `other`
    against `base`, per step, ranked like kernel_diff: name, cat, change, base_per_step,
    other_per_step, delta_per_step, base_ns_per_step, other_ns_per_step, delta_ns_per_step,
    base_mean_ns, other_mean_ns. ProfilerStep spans themselves are left out. `sides`: as kernel_diff's."""
    return op_diffs([(base, other, step_base, step_other)], sides)[0]


def op_diffs(pairs: list[Pair], sides: Sides | None = None) -> list[pl.DataFrame]:
    """op_diff of each (base, other, step_base, step_other), in order, ranked in one query (as kernel_diffs)."""
    return _changes_of(_sides_of(pairs, sides, "ops", None, _op_sides), ["name", "cat"])


COMPILED_OPS = r"^(CompiledFunction|CompiledFunctionBackward|Torch-Compiled Region|TorchDynamo Cache Lookup)\b"
GRAPH_LAUNCHES, KERNEL_LAUNCHES = GRAPH_LAUNCH, KERNEL_LAUNCH  # rules.LAUNCH_CALLS, by kind


def _moved(before: float, after: float) -> str:
    """'fell from 1,428 to 811', 'rose from 1 to 2', 'stayed at 3': the verb follows the numbers."""
    if before == after:
        return f"stayed at {before:,.4g}"
    return f"{'fell' if after < before else 'rose'} from {before:,.4g} to {after:,.4g}"


OP_PATTERNS = {"compiled": COMPILED_OPS, "graphs": GRAPH_LAUNCHES, "launches": KERNEL_LAUNCHES}  # (readings')


def _op_readings(ops: pl.DataFrame) -> dict:
    """What readings reads off an op_diff frame, in one query (it is asked for every run of a
    comparison): the compiled-region ops added and the ones removed (names, unsorted), how many op
    names are removed, and per_step[(what, side)]: the calls per step of each OP_PATTERNS kind."""
    matches = {what: pl.col("name").str.contains(pattern) for what, pattern in OP_PATTERNS.items()}
    change = pl.col("change")
    row = ops.select(
        pl.col("name").filter(matches["compiled"] & (change == "added")).implode().alias("compiled_in"),
        pl.col("name").filter(matches["compiled"] & (change == "removed")).implode().alias("compiled_out"),
        (change == "removed").sum().alias("removed"),
        *(
            pl.col(f"{side}_per_step").filter(match).sum().alias(f"{what} {side}")
            for what, match in matches.items()
            for side in ("base", "other")
        ),
    ).row(0, named=True)
    per_step = {(what, side): float(row[f"{what} {side}"]) for what in OP_PATTERNS for side in ("base", "other")}
    return {
        "compiled_in": row["compiled_in"],
        "compiled_out": row["compiled_out"],
        "removed": row["removed"],
        "per_step": per_step,
    }


def readings(
    base: Trace,
    other: Trace,
    step_base: int | None = None,
    step_other: int | None = None,
    ops: pl.DataFrame | None = None,
) -> list[str]:
    """One line for each big change whose cause the trace shows plainly, first what differs besides
    the code (device, dtype, attention shapes, versions; a different workload says so), then
    torch.compile switched on or off, CUDA graphs, an attention backend change, a copy class one
    side has and the other lacks. `ops`: op_diff of the same runs and steps when the caller has it
    (review_changes.changes does), else computed here."""
    from dashboard.engine.analyses.backends import detect_backends
    from dashboard.engine.analyses.copies import copies

    from dashboard.engine.compare.fingerprint import DIFFERENT, differences, relation

    if ops is None:
        ops = op_diff(base, other, step_base, step_other)
    lines: list[str] = []
    kind, why = relation(base, other)
    besides = differences(base, other)
    if kind == DIFFERENT:
        lines.append(
            f"different workload ({why}): these are not one code change, and no speedup is set"
            + (f"; besides the code: {'; '.join(besides)}" if besides else "")
        )
    elif besides:
        lines.append(f"besides the code: {'; '.join(besides)}")

    read = _op_readings(ops)
    per_step = read["per_step"]
    compiled_in, compiled_out = sorted(read["compiled_in"]), sorted(read["compiled_out"])
    removed = read["removed"]
    if compiled_in and not per_step["compiled", "base"]:
        gone = f"{removed:,} op names of the baseline are gone" if removed != 1 else "1 op name of the baseline is gone"
        lines.append(f"compiled: {', '.join(compiled_in)} appear (torch.compile); {gone}")
    elif compiled_out and not per_step["compiled", "other"]:
        lines.append(f"no longer compiled: {', '.join(compiled_out)} are gone")
    graphs_base, graphs_other = per_step["graphs", "base"], per_step["graphs", "other"]
    if graphs_other and not graphs_base:
        lines.append(
            f"CUDA graphs: {graphs_other:.4g} graph launch{' per step replays' if graphs_other == 1 else 'es per step replay'} kernels; "
            f"kernel launches {_moved(per_step['launches', 'base'], per_step['launches', 'other'])} per step"
        )
    elif graphs_base and not graphs_other:
        lines.append(
            f"no CUDA graphs: the baseline's {graphs_base:.4g} graph launch{'' if graphs_base == 1 else 'es'} per step "
            f"{'is' if graphs_base == 1 else 'are'} gone"
        )
    before, after = detect_backends(base).backends, detect_backends(other).backends
    if before != after:
        lines.append(f"attention backend: {', '.join(before) or 'none'} -> {', '.join(after) or 'none'}")
    steps = {side: set(chosen_steps(t, s)) for side, t, s in (("base", base, step_base), ("other", other, step_other))}
    classes = {
        side: set(copies(t).filter(pl.col("step").is_in(list(steps[side])))["copy_class"].to_list())
        for side, t in (("base", base), ("other", other))
    }
    for copy_class in sorted(classes["other"] - classes["base"]):
        count = (
            copies(other)
            .filter(pl.col("step").is_in(list(steps["other"])) & (pl.col("copy_class") == copy_class))
            .height
        )
        lines.append(
            f"new copy class: {copy_class} ({count / max(len(steps['other']), 1):.4g} per step, none in the baseline)"
        )
    for copy_class in sorted(classes["base"] - classes["other"]):
        count = (
            copies(base).filter(pl.col("step").is_in(list(steps["base"])) & (pl.col("copy_class") == copy_class)).height
        )
        lines.append(
            f"copy class gone: {copy_class} ({count / max(len(steps['base']), 1):.4g} per step in the baseline, none in the run)"
        )
    return lines
