"""Nesting: which span holds which, checked against a plain stack walk over the json module's
reading of every real trace in tests/data, and over generated lanes (hypothesis).

The rule (DESIGN.md): on each lane (pid, tid; python_function on a lane of its own), sorted by
(ts, -dur, file order), an event's parent is the innermost open span that holds its start and does
not end before the event ends by more than one 1 µs tick. A zero-length event holds nothing.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from decimal import Decimal

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from dashboard.engine import load_trace
from dashboard.engine.load import steps

TICK_NS = 1000
ALL_TRACES = sorted(p.name for p in oracle.DATA.glob("*.json.gz"))


def _ns(value) -> int:
    """µs as written (Decimal, int or numeric string) -> integer ns, the fraction cut at 1 ns."""
    return int(Decimal(str(value)) * 1000)


def stack_walk(events: list[dict]) -> list[int | None]:
    """Parent index of each event (None: none), by the rule, with a plain stack of open spans."""
    lanes: dict[tuple, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        lanes[(str(e["pid"]), str(e["tid"]), e.get("cat") == "python_function")].append(i)
    start = [_ns(e["ts"]) for e in events]
    length = [max(_ns(e.get("dur", 0)), 0) for e in events]
    parent: list[int | None] = [None] * len(events)
    for members in lanes.values():
        members.sort(key=lambda i: (start[i], -length[i], i))
        open_spans: list[int] = []
        for i in members:
            end = start[i] + length[i]
            open_spans = [j for j in open_spans if start[j] + length[j] > start[i]]
            for j in reversed(open_spans):  # innermost first
                if start[j] + length[j] >= end - TICK_NS:
                    parent[i] = j
                    break
            if length[i] > 0:
                open_spans.append(i)
    return parent


def _key(e: dict, origin: int) -> tuple:
    return (str(e["pid"]), str(e["tid"]), str(e.get("name", "")), _ns(e["ts"]) - origin, max(_ns(e.get("dur", 0)), 0))


def oracle_pairs(doc: dict) -> Counter:
    """Counter of (event, parent event) keys from the json reading; a key is (pid, tid, name, ts_ns, dur_ns)."""
    events = [e for e in oracle.complete(doc) if "ts" in e]
    origin = min(_ns(e["ts"]) for e in events)
    parents = stack_walk(events)
    return Counter((_key(e, origin), None if p is None else _key(events[p], origin)) for e, p in zip(events, parents))


def engine_pairs(trace) -> Counter:
    ev = trace.events.select("pid", "tid", pl.col("name").cast(pl.String), "ts_ns", "dur_ns", "parent")
    keys = list(zip(ev["pid"], ev["tid"], ev["name"], ev["ts_ns"], ev["dur_ns"]))
    return Counter((key, None if p is None else keys[p]) for key, p in zip(keys, ev["parent"].to_list()))


@pytest.mark.parametrize("name", ALL_TRACES)
def test_every_event_has_the_parent_a_stack_walk_gives(name):
    path = oracle.DATA / name
    want = oracle_pairs(oracle.raw(path, parse_float=Decimal))
    got = engine_pairs(load_trace(path))
    assert sum(got.values()) == sum(want.values())
    assert got == want


def test_the_depth_is_the_number_of_ancestors():
    trace = load_trace(oracle.DATA / "hta_a100_control.json.gz")
    parent = trace.events["parent"].to_list()
    depth = trace.events["depth"].to_list()
    for i in range(0, len(parent), 7):
        hops, node = 0, parent[i]
        while node is not None:
            hops, node = hops + 1, parent[node]
        assert depth[i] == hops


def _trace(events: list[dict]) -> bytes:
    return json.dumps({"traceEvents": events}).encode()


def _op(name, ts, dur, tid=1, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _parent_names(trace) -> dict[str, str | None]:
    names = trace.events["name"].cast(pl.String).to_list()
    return {names[i]: (None if p is None else names[p]) for i, p in enumerate(trace.events["parent"].to_list())}


def test_zero_length_events_at_one_timestamp_hold_nothing_and_do_not_lift_the_next_op():
    trace = load_trace(
        _trace(
            [
                _op("outer", 0, 100),
                _op("cudaEventQuery#1", 10, 0, cat="cuda_runtime"),
                _op("cudaEventQuery#2", 10, 0, cat="cuda_runtime"),
                _op("cudaPeekAtLastError", 10, 0, cat="cuda_runtime"),
                _op("aten::to", 12, 20),
                _op("aten::_to_copy", 13, 18),
            ]
        )
    )
    parents = _parent_names(trace)
    assert parents["cudaEventQuery#2"] == "outer"
    assert parents["cudaPeekAtLastError"] == "outer"
    assert parents["aten::to"] == "outer"
    assert parents["aten::_to_copy"] == "aten::to"
    depth = dict(zip(trace.events["name"].cast(pl.String), trace.events["depth"]))
    assert (depth["outer"], depth["aten::to"], depth["aten::_to_copy"]) == (0, 1, 2)


def test_an_op_that_ended_before_the_next_one_started_is_not_its_parent():
    # aten::detach_ ends 8 µs before aten::to starts: the copy belongs to the step's op, not to detach_
    trace = load_trace(
        _trace(
            [
                _op("step", 0, 1000),
                _op("aten::detach_", 100, 2),
                _op("aten::to", 110, 30),
                _op("aten::copy_", 112, 20),
            ]
        )
    )
    parents = _parent_names(trace)
    assert parents["aten::to"] == "step"
    assert parents["aten::copy_"] == "aten::to"


def test_kernels_that_overlap_by_a_rounding_tick_do_not_nest():
    stream = dict(cat="kernel", tid=7)
    trace = load_trace(
        _trace(
            [
                _op("k1", 0, 10, **stream),
                _op("k2", 9, 10, **stream),
                _op("k3", 18, 5, **stream),
            ]
        )
    )
    assert set(_parent_names(trace).values()) == {None}


def test_a_child_that_ends_one_tick_after_its_parent_still_nests():
    trace = load_trace(_trace([_op("parent", 0, 10), _op("child", 5, 6)]))
    assert _parent_names(trace)["child"] == "parent"


def test_python_frames_nest_on_a_lane_of_their_own():
    trace = load_trace(
        _trace(
            [
                _op("op", 0, 100),
                _op("frame.py(1): f", 5, 50, cat="python_function"),
                _op("inner", 10, 5),
            ]
        )
    )
    parents = _parent_names(trace)
    assert parents["inner"] == "op"
    assert parents["frame.py(1): f"] is None


# Generated lanes: runs of zero-length events, equal timestamps, overlaps by a tick, long and short spans.
_ts = st.sampled_from([0, 0, 1, 2, 5, 10, 11, 50]) | st.integers(0, 200)
_dur = st.sampled_from([0, 0, 1, 2, 10, 100]) | st.integers(0, 120)
_event = st.tuples(
    st.integers(1, 3), _ts, _dur, st.sampled_from(["cpu_op", "cpu_op", "cuda_runtime", "python_function"])
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_event, min_size=1, max_size=40))
def test_generated_lanes_nest_as_the_stack_walk_says(rows):
    events = [
        {"ph": "X", "cat": cat, "name": f"e{i}", "pid": 1, "tid": tid, "ts": ts, "dur": dur}
        for i, (tid, ts, dur, cat) in enumerate(rows)
    ]
    parents = stack_walk(events)
    want = {f"e{i}": (None if p is None else f"e{p}") for i, p in enumerate(parents)}
    assert _parent_names(load_trace(_trace(events))) == want


@pytest.mark.skipif(steps._c_holders is None, reason="the C extension is not built (CI checks that it is)")
@settings(max_examples=500, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(-5, 300),
            st.sampled_from([0, 0, 1, 999, 1000, 1001, 5000]) | st.integers(0, 3000),
        ),
        max_size=80,
    )
)
def test_the_c_walk_finds_the_holders_the_numpy_version_finds(rows):
    """_scan.c's holders against innermost_holders' numpy version (in ns, so that the one-tick
    allowance and zero-length spans are met), on lanes sorted as nesting sorts them."""
    rows.sort(key=lambda r: (r[0], r[1], -r[2]))
    lane = np.array([r[0] for r in rows], dtype=np.int64)
    ts = np.array([r[1] * 100 for r in rows], dtype=np.int64)
    end = ts + np.array([r[2] for r in rows], dtype=np.int64)
    fast = steps.innermost_holders(lane, ts, end)
    slow = steps.innermost_holders(lane, ts, end, use_c=False)
    assert fast.tolist() == slow.tolist()


@pytest.mark.skipif(steps._c_depths is None, reason="the C extension is not built (CI checks that it is)")
@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.integers(-1, 200), max_size=80))
def test_the_c_depths_are_the_numpy_versions(links):
    """_scan.c's depths against _depths' pointer doubling, on parent links that point back (each
    parent before its child, as innermost_holders gives them)."""
    parent = np.array([link % i if link >= 0 and i else -1 for i, link in enumerate(links)], dtype=np.int64)
    fast = steps._depths(parent)
    assert fast.dtype == np.int32
    assert fast.tolist() == steps._depths(parent, use_c=False).tolist()


@pytest.mark.skipif(steps._c_depths is None, reason="the C extension is not built (CI checks that it is)")
def test_the_c_depths_refuse_a_parent_after_its_child():
    with pytest.raises(ValueError, match="row 1's parent"):
        steps._depths(np.array([-1, 2, -1], dtype=np.int64))


@pytest.mark.parametrize("name", ALL_TRACES)
def test_nesting_without_the_c_extension_is_the_same(name, monkeypatch):
    with_c = load_trace(oracle.DATA / name).events.select("parent", "depth")
    monkeypatch.setattr(steps, "_c_holders", None)
    monkeypatch.setattr(steps, "_c_depths", None)
    without = load_trace(oracle.DATA / name).events.select("parent", "depth")
    assert with_c.equals(without)
