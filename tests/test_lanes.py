"""analyses/lanes.py against the obvious versions: time_order against polars' own sort, and each
Lanes row's running end and each lane's reductions against a plain Python sweep of the rows, on
random frames (keys with nulls, ties in time broken by id, lanes of one row, no rows at all)."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.engine.analyses.lanes import Lanes, time_order

rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-2, 3)),  # device: a null sorts after every value
        st.integers(0, 3),  # step
        st.integers(0, 50),  # ts_ns: ties are common
        st.integers(0, 30),  # dur_ns
    ),
    max_size=40,
)


def frame_of(values: list[tuple[int | None, int, int, int]]) -> pl.DataFrame:
    ids = list(range(len(values)))[::-1]  # ids that do not follow the rows' order
    return pl.DataFrame(
        {
            "id": ids,
            "device": [v[0] for v in values],
            "step": [v[1] for v in values],
            "ts_ns": [v[2] for v in values],
            "dur_ns": [v[3] for v in values],
        },
        schema={"id": pl.Int64, "device": pl.Int64, "step": pl.Int64, "ts_ns": pl.Int64, "dur_ns": pl.Int64},
    )


@settings(max_examples=300, deadline=None)
@given(rows)
def test_time_order_is_polars_sort_with_nulls_last(values):
    frame = frame_of(values)
    expected = frame.with_row_index("row").sort(["device", "step", "ts_ns", "id"], nulls_last=True)["row"]
    assert time_order(frame, ("device", "step")).tolist() == expected.to_list()


@settings(max_examples=300, deadline=None)
@given(rows)
def test_lanes_sweep_as_a_python_loop_does(values):
    frame = frame_of(values).with_columns(pl.col("device").fill_null(-1))
    lanes = Lanes(frame, ("step", "device"))
    records = sorted(frame.iter_rows(named=True), key=lambda r: (r["step"], r["device"], r["ts_ns"], r["id"]))
    covered, first, per_lane = [], [], {}
    seen: dict[tuple[int, int], int] = {}  # lane -> latest end so far
    for r in records:
        lane, end = (r["step"], r["device"]), r["ts_ns"] + r["dur_ns"]
        first.append(lane not in seen)
        covered.append(seen.get(lane))
        seen[lane] = max(seen.get(lane, end), end)
        per_lane.setdefault(lane, []).append(end)
    assert [r["id"] for r in records] == frame["id"].gather(lanes.order).to_list()
    assert lanes.first.tolist() == first
    assert [c for c, f in zip(lanes.covered.tolist(), first) if not f] == [c for c in covered if c is not None]
    step, device = lanes.keys(frame, "step", "device")
    assert list(zip(step.to_list(), device.to_list())) == list(per_lane)
    assert lanes.per_lane(lanes.end, np.maximum).tolist() == [max(ends) for ends in per_lane.values()]
    assert lanes.per_lane(lanes.end, np.add).tolist() == [sum(ends) for ends in per_lane.values()]
