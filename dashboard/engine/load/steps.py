"""Nesting on each thread, ProfilerStep spans, and which step each event belongs to.

A GPU event (kernel, gpu_memcpy, gpu_memset) belongs to the step whose CPU span holds its launch
(the cuda_runtime/cuda_driver call with the same correlation); a CPU event belongs to the step
that contains its start. A trace without ProfilerStep gets one implicit step over the whole trace.
"""

from __future__ import annotations


import numpy as np
import polars as pl

from dashboard.engine.model.columns import series
from dashboard.engine.model.trace import GPU_CATEGORIES, names_matching
from dashboard.engine.rules.ops import STEP_MARK, STEP_NAME

try:  # the C extension's stack-free walk (see _scan.c: holders); the numpy version below without it
    from dashboard.engine._scan import holders as _c_holders
except ImportError:
    _c_holders = None
try:  # apart: an extension built before depths came still walks in C
    from dashboard.engine._scan import depths as _c_depths
except ImportError:
    _c_depths = None

# Python frames interleave with ops on the same thread in some traces; they nest on a lane of their own.
_OWN_LANE = ("python_function",)
# Integer-µs traces round ts and dur apart: a child may end up to one tick after its parent.
TICK_NS = 1000
_NO_REACH = np.iinfo(np.int64).min


def nesting(frame: pl.DataFrame) -> pl.DataFrame:
    """Add depth (0 = outermost) and parent (id of the innermost enclosing event) per lane.

    The frame must be sorted by (pid, tid, ts_ns, -dur_ns, file order) with id = row number. A
    lane is a thread (pid, tid); python_function events nest on a lane of their own. An event's
    parent is the innermost earlier span of its lane that holds its start (p.ts <= e.ts < p.end)
    and does not end before the event ends by more than one 1 µs tick (integer-µs traces round ts
    and dur apart). A zero-length event holds nothing.
    """
    # The frame is sorted by thread: a thread's rows are contiguous, so a lane number is the count
    # of thread changes so far (not a rank: no sort), doubled, plus one for a Python frame.
    new_thread = pl.col("pid").ne_missing(pl.col("pid").shift(1)) | pl.col("tid").ne_missing(pl.col("tid").shift(1))
    own = pl.col("cat").is_in(_OWN_LANE)
    lane = (
        frame.select((new_thread.cum_sum().cast(pl.Int64) * 2 + own.cast(pl.Int64)).alias("lane"))
        .to_series()
        .to_numpy()
    )
    ts = frame["ts_ns"].to_numpy()
    end = ts + frame["dur_ns"].to_numpy()
    # Python frames sort among the ops of their thread; order rows by lane so lanes are contiguous.
    # Without them the lanes already are (the frame's sort). Within a lane the rows stay sorted by
    # (ts, -dur, file order), as their thread's are: a stable sort by lane alone (a timsort, through
    # the threads' runs) gives the order a lexsort by all four took 0.7 s per 2.3M rows to find.
    if bool(np.all(lane[1:] >= lane[:-1])):
        parent = innermost_holders(lane, ts, end)
        depth = _depths(parent)
    else:
        order = np.argsort(lane, kind="stable")
        parent_o = innermost_holders(lane[order], ts[order], end[order])
        parent = np.full(frame.height, -1, dtype=np.int64)
        has_parent = parent_o >= 0
        parent[order[has_parent]] = order[parent_o[has_parent]]
        depth = np.empty(frame.height, dtype=np.int32)
        depth[order] = _depths(parent_o)
    del lane, ts, end
    return frame.with_columns(series("depth", depth), series("parent", parent, valid=parent >= 0))


def innermost_holders(lane: np.ndarray, ts: np.ndarray, end: np.ndarray, use_c: bool = True) -> np.ndarray:
    """Each event's parent as an index into the same arrays (-1: none), for arrays sorted by
    (lane, ts, -duration, file order); ts and end in ns.

    The parent is the latest earlier span of the lane that reaches far enough: end > e.ts and
    end >= e.end - TICK_NS (an earlier span of the lane starts at or before e.ts). That is what
    a stack walk finds, the innermost open span that holds the event. Through the C extension
    when it is built (the 187 MB trace's 450,000 events: 12 ms with the arrays it needs, against
    54 ms for this numpy version, which is kept as the fallback and the tests' oracle and took
    0.7 s of the 910 MB trace's load), else without a Python loop."""
    n = len(ts)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent
    reach = np.where(end > ts, end, _NO_REACH)  # a zero-length span holds nothing
    need = np.maximum(ts + 1, end - TICK_NS)
    if use_c and _c_holders is not None:
        _c_holders(np.ascontiguousarray(lane, dtype=np.int64), reach, need, parent)
        return parent
    # most events sit right after their parent: settle those in one pass
    prev_holds = np.zeros(n, dtype=bool)
    prev_holds[1:] = (lane[1:] == lane[:-1]) & (reach[:-1] >= need[1:])
    parent[prev_holds] = np.flatnonzero(prev_holds) - 1
    # no earlier span of the lane reaches far enough: no parent (most kernels, top-level ops)
    furthest = (
        pl.DataFrame({"lane": lane, "reach": reach})
        .select(pl.col("reach").shift(1).cum_max().over("lane").fill_null(_NO_REACH))
        .to_series()
        .to_numpy()
    )
    todo = np.flatnonzero(~prev_holds & (furthest >= need))
    if todo.size:
        parent[todo] = _latest_at_least(reach, todo, need[todo])
    return parent


def _latest_at_least(values: np.ndarray, before: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """For each query q: the largest j < before[q] with values[j] >= floor[q] (-1 if none).
    A max segment tree over `values`, climbed and then descended by all queries at once:
    O(log n) numpy passes."""
    n = len(values)
    size = 1 << max(int(n - 1).bit_length(), 0)
    tree = np.full(2 * size, _NO_REACH, dtype=np.int64)
    tree[size : size + n] = values
    level = size
    while level > 1:
        half = level // 2
        tree[half:level] = np.maximum(tree[level : 2 * level : 2], tree[level + 1 : 2 * level : 2])
        level = half
    # climb: a right child's left sibling covers the indices just before the ones seen so far
    node = size + before
    live = np.arange(before.size)
    hit_query, hit_node = [], []
    while live.size:
        x = node[live]
        got = ((x & 1) == 1) & (tree[x - 1] >= floor[live])
        hit_query.append(live[got])
        hit_node.append(x[got] - 1)
        x >>= 1
        keep = ~got & (x > 1)
        node[live[keep]] = x[keep]
        live = live[keep]
    query = np.concatenate(hit_query)
    x = np.concatenate(hit_node)
    # descend: the rightmost leaf under the hit node that reaches the floor
    want = floor[query]
    inner = np.flatnonzero(x < size)
    while inner.size:
        right = 2 * x[inner] + 1
        x[inner] = np.where(tree[right] >= want[inner], right, right - 1)
        inner = inner[x[inner] < size]
    result = np.full(before.size, -1, dtype=np.int64)
    result[query] = x - size
    return result


def _depths(parent: np.ndarray, use_c: bool = True) -> np.ndarray:
    """Number of ancestors of each event (int32: depths are small, and the column holds them so),
    for parent links in which each parent comes before its child (-1: none), as innermost_holders
    gives them. In one pass through the C extension when it is built (0.1 s of the 910 MB trace's
    load went to the numpy version, which is kept as the fallback and the tests' oracle), else by
    pointer doubling."""
    if use_c and _c_depths is not None:
        depth = np.empty(len(parent), dtype=np.int32)
        _c_depths(np.ascontiguousarray(parent, dtype=np.int64), depth)
        return depth
    depth = (parent >= 0).astype(np.int64)  # edges from each event to `jump`
    jump = parent.copy()
    live = np.flatnonzero(jump >= 0)
    while live.size:
        up = jump[live]
        gained, further = depth[up], jump[up]  # read before writing: every event moves in step
        depth[live] += gained
        jump[live] = further
        live = live[further >= 0]
    return depth.astype(np.int32)


def find_steps(frame: pl.DataFrame) -> pl.DataFrame:
    """The ProfilerStep#N spans on the CPU (not their gpu_user_annotation mirrors), in time order."""
    marked, numbered = _step_names(frame.get_column("name"))
    marks = (
        frame.filter(numbered)
        .filter(pl.col("cat") != "gpu_user_annotation")
        .select(
            pl.col("name").cast(pl.String),
            pl.col("name").cast(pl.String).str.extract(r"#(\d+)$", 1).cast(pl.Int64, strict=False).alias("step"),
            pl.col("ts_ns").alias("start_ns"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
            pl.col("dur_ns"),
        )
        .filter(pl.col("step").is_not_null())  # ProfilerStep#<beyond int64> is no step number
        .unique("step", keep="first")
        .sort("start_ns", "step")  # two steps that start together: by number, not as unique left them
        .with_columns(pl.lit(False).alias("implicit"))
    )
    if marks.height:
        return _measured_by_events(marks, frame, marked)
    end = frame.select((pl.col("ts_ns") + pl.col("dur_ns")).max()).item()
    return pl.DataFrame(
        {
            "name": ["whole trace (no ProfilerStep)"],
            "step": [0],
            "start_ns": [0],
            "end_ns": [end],
            "dur_ns": [end],
            "implicit": [True],
        },
        schema={
            "name": pl.String,
            "step": pl.Int64,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "dur_ns": pl.Int64,
            "implicit": pl.Boolean,
        },
    )


def overflowed(span_end: int, extent: int, dur: int, trace_end: int) -> bool:
    """A step span is overflowed when it runs past the end of every other event in the trace and
    lasts more than twice the extent of the events it holds (a garbage duration: HTA's Triton
    example's ProfilerStep#1 lasts 13,336 ms in a trace whose events span 355 ms). Twice, so that a
    last step whose own tail outlasts its ops by a few µs is never one; a step that holds nothing
    cannot be measured by its events and is left as written."""
    return extent > 0 and span_end > trace_end and dur > 2 * extent


def _step_names(names: pl.Series) -> tuple[pl.Expr, pl.Expr]:
    """Which events are named STEP_MARK... and which of them ProfilerStep#<digits> (STEP_NAME), as
    two filters (model.trace.names_matching: each distinct name read once, as text; casting every
    row's name to text took 0.07 s per 2.2M events, twice)."""
    marked = names_matching(names, lambda name: name.str.starts_with(STEP_MARK))
    numbered = names_matching(
        names, lambda name: name.str.starts_with(STEP_MARK) & name.str.contains(STEP_NAME.pattern)
    )
    return marked, numbered


def _measured_by_events(marks: pl.DataFrame, frame: pl.DataFrame, marked: pl.Expr) -> pl.DataFrame:
    """Steps with an overflowed span (see overflowed) end where the events they hold end: the
    last end of the events that start inside the span, on any lane (device work launched in the
    step starts inside it too). Every number downstream reads the measured span; health's
    duration_overflow compares it with the ProfilerStep event as written. `marked`: the events
    named STEP_MARK..., which are no such events."""
    span_end = pl.col("ts_ns") + pl.col("dur_ns")
    trace_end = frame.select(span_end.filter(~marked).max()).item()
    if trace_end is None:  # no other event
        return marks
    if not (marks["end_ns"] > trace_end).any():  # the usual case: no step runs past the trace
        return marks
    others = frame.filter(~marked).select("ts_ns", span_end.alias("end_ns"))
    ends = marks["end_ns"].to_list()
    durs = marks["dur_ns"].to_list()
    for i, (start, end, dur) in enumerate(zip(marks["start_ns"], marks["end_ns"], marks["dur_ns"])):
        if end <= trace_end:
            continue
        held = others.filter((pl.col("ts_ns") >= start) & (pl.col("ts_ns") < end))["end_ns"].max()
        extent = int(held) - start if held is not None else 0
        if overflowed(end, extent, dur, trace_end):
            ends[i], durs[i] = start + extent, extent
    return marks.with_columns(
        pl.Series("end_ns", ends, dtype=marks["end_ns"].dtype), pl.Series("dur_ns", durs, dtype=marks["dur_ns"].dtype)
    )


def assign_steps(frame: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Add `step`: GPU events through their launch (one whose launch is not in the trace belongs
    to no step), CPU events by their own start time. In the implicit step of a trace without
    ProfilerStep every event belongs to the one step, launched or not."""
    # ids are row numbers (load's sort numbers them): a GPU event's launch is looked up by position.
    # Each event's anchor time (its own start, or its launch's) finds its step by a binary search of
    # the step starts (what a backward as-of join does).
    spans = steps.select("start_ns", "end_ns", "step").sort("start_ns", maintain_order=True)
    start, end, number = (spans[c].to_numpy() for c in ("start_ns", "end_ns", "step"))
    at = frame["ts_ns"].to_numpy()
    unlaunched = None
    if not steps["implicit"][0]:
        gpu = frame["cat"].is_in(GPU_CATEGORIES).arg_true()
        launch = frame["launch"].gather(gpu).fill_null(-1).to_numpy()
        gpu = gpu.to_numpy()
        at = at.copy()
        at[gpu] = at[np.maximum(launch, 0)]
        unlaunched = gpu[launch < 0]
    span = np.searchsorted(start, at, side="right") - 1
    inside = (span >= 0) & (at < end[span])  # (a span of -1 reads the last end, and is no step)
    if unlaunched is not None:
        inside[unlaunched] = False
    step = np.where(inside, number[span], 0)
    return frame.with_columns(series("step", step, valid=inside))
