"""The events table's order: by thread (pid, then tid, as text), start, the longer span first, then
file order, so that each thread's spans come parent before child (steps.nesting walks them so).
frames._normalize gathers the table's columns in this order.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from dashboard.engine.model.columns import series


def lane_order(frame: pl.DataFrame) -> pl.Series:
    """The row numbers (UInt32) in the order of (pid, tid) as text, ts_ns, then the longer first;
    stable: two spans with the same start and length nest in file order, parent first (µs-resolution
    traces have many). ts_ns and dur_ns hold no null. pid and tid become one lane number from the
    ranks of their texts (_text_rank); lane and start are packed into one int64 key wherever both
    fit (a trace spanning less than years), sorted by numpy's stable sort, a timsort, which takes
    each lane's nearly sorted rows in runs: 0.03 s for 2.2M rows, where polars' three-key sort took
    0.16 s. Only the starts that were written shorter span first are then sorted by length."""
    lane = _text_rank(frame.get_column("pid"))
    tid = _text_rank(frame.get_column("tid"))
    lane *= int(tid.max(initial=0)) + 1
    lane += tid
    del tid
    ts = frame.get_column("ts_ns").to_numpy()
    dur = frame.get_column("dur_ns").to_numpy()
    first = int(ts.min(initial=0))
    shift = (int(ts.max(initial=0)) - first).bit_length()
    if int(lane.max(initial=0)).bit_length() + shift > 63:  # no room for both in one int64
        return series("row", np.lexsort((-dur, ts, lane)).astype(np.uint32))
    key = lane  # the key made in place: each full-length array is one more first touch of fresh memory
    key <<= shift
    key += ts - first if first else ts  # (the events' ts_ns start at 0)
    del lane, ts
    return series("row", _longer_first(np.argsort(key, kind="stable"), key, dur).astype(np.uint32))


def _longer_first(order: np.ndarray, key: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """`order` (by key, ties in file order) with the rows of each key by duration, longer first,
    equal ones still in file order. Only the keys whose rows are out of that order are sorted
    again, found by a binary search of the sorted keys: a file writes nearly every parent before
    its children (of the 910 MB trace's 87,000 starts shared by two spans or more, 3,000 are not)."""
    sorted_key = key[order]
    sorted_dur = dur[order]
    shorter_first = np.flatnonzero((sorted_key[1:] == sorted_key[:-1]) & (sorted_dur[1:] > sorted_dur[:-1]))
    del sorted_dur
    if not len(shorter_first):
        return order
    redo = sorted_key[shorter_first]  # ascending, as the positions are
    redo = redo[np.concatenate(([True], redo[1:] != redo[:-1]))]
    begin = np.searchsorted(sorted_key, redo, side="left")
    size = np.searchsorted(sorted_key, redo, side="right") - begin
    # every position of those keys, in key order: their rows sort among themselves
    at = np.repeat(begin - np.cumsum(size) + size, size) + np.arange(int(size.sum()))
    rows = order[at]
    order[at] = rows[np.lexsort((-dur[rows], key[rows]))]  # stable: equal lengths stay in file order
    return order


def _text_rank(column: pl.Series) -> np.ndarray:
    """Each row's rank (int64, from 1; 0 for null, which sorts first as a null text does) of its
    text among the column's distinct texts: the texts sort as these numbers do. Read on the
    Categorical codes, so no row is read as text: each row's code is looked up among the few
    distinct ones by a binary search."""
    if column.dtype != pl.Categorical:
        column = column.cast(pl.Categorical)
    distinct = column.unique().drop_nulls()
    by_code = pl.DataFrame(
        [distinct.to_physical().alias("code"), distinct.cast(pl.String).rank("dense").cast(pl.Int64).alias("rank")]
    ).sort("code")
    keys, ranks = by_code["code"].to_numpy(), by_code["rank"].to_numpy()
    codes = column.to_physical()
    if not len(keys):  # every row null
        return np.zeros(len(codes), dtype=np.int64)
    rank = ranks[np.searchsorted(keys, codes.fill_null(keys[0]).to_numpy())]  # every code is among the keys
    if codes.null_count():
        rank[codes.is_null().to_numpy()] = 0
    return rank
