"""The normalizing sort's order (order.lane_order: pid and tid as the ranks of their texts among
their distinct values, one lane number) against the obvious sort it replaced, every row's pid and
tid read as text: the same row order on every real trace in tests/data, its events shuffled and
split in chunks as the slices' parts are, and on a table made to catch the edge cases (null texts,
numbers that sort as text, ties kept in their order, the longer span first)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from dashboard.engine import load_trace
from dashboard.engine.load.frames import _concat
from dashboard.engine.load.order import lane_order

DATA = Path(__file__).parent / "data"
REAL = sorted(DATA.glob("*.json.gz"))


def text_order(frame: pl.DataFrame) -> list[int]:
    """The order as first written: pid and tid as text, then ts_ns, then the longer first, stable."""
    return (
        frame.select(pl.col("pid", "tid").cast(pl.String), "ts_ns", "dur_ns")
        .with_row_index("row")
        .sort(["pid", "tid", "ts_ns", "dur_ns"], descending=[False, False, False, True], maintain_order=True)
        .get_column("row")
        .to_list()
    )


@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_the_lane_order_is_the_text_order_on_every_real_trace(path):
    events = load_trace(path).events.select("pid", "tid", "ts_ns", "dur_ns")
    shuffled = events.sample(fraction=1.0, shuffle=True, seed=7)
    size = max(1, shuffled.height // 5)
    parts = _concat([shuffled.slice(start, size) for start in range(0, shuffled.height, size)])
    assert parts.n_chunks() > 1 or shuffled.height <= size
    for frame in (events, shuffled, parts):
        assert lane_order(frame).to_list() == text_order(frame)


def test_the_edge_cases_sort_as_their_texts():
    frame = pl.DataFrame(
        {
            "pid": ["9", "10", None, "9", "10", "b", "a", "9", "9", None],
            "tid": ["x", "x", "x", None, "y", "1", "1", "x", "x", None],
            "ts_ns": [5, 4, 3, 2, 1, 0, 0, 5, 5, 0],
            "dur_ns": [1, 1, 1, 1, 1, 1, 2, 1, 3, 0],
        }
    )
    # by hand: null pid first (its null tid before "x"), then "10" < "9" < "a" < "b" as texts; within
    # a lane by start, the longer first, equal rows in file order (rows 0 and 7)
    expected = [9, 2, 1, 4, 3, 8, 0, 7, 6, 5]
    assert text_order(frame) == expected
    for dtype in (pl.Categorical, pl.String):
        assert lane_order(frame.with_columns(pl.col("pid", "tid").cast(dtype))).to_list() == expected
    # starts spread over 2^62 ns leave no room for the lane beside the start in one int64 key: the
    # order is the same by the other sort
    spread = frame.with_columns(pl.col("ts_ns") * (1 << 60))
    assert text_order(spread) == expected
    assert lane_order(spread.with_columns(pl.col("pid", "tid").cast(pl.Categorical))).to_list() == expected
