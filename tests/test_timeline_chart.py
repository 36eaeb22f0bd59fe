"""What the Timeline diff tab's canvas draws (charts.timeline_data): every event of the two steps
as one bar, in the lanes and order the browser's hit test relies on; counted against a reading
with the json module. The browser side is tested in test_dashboard_browser.py."""

from __future__ import annotations

import json
from collections import Counter

import polars as pl
import pytest

import oracle
from dashboard import charts
from dashboard.engine.compare.diff import timeline
from dashboard.engine.compare.speed import representative_step

TRACES = sorted(p for p in oracle.DATA.glob("*.json.gz"))


def _bars(panel: dict) -> list[tuple]:
    """(lane, start, dur, family index, name, merged) of each bar, the indices resolved."""
    return [
        (panel["lanes"][lane], start, dur, family, panel["names"][name], merged)
        for lane, start, dur, family, name, merged in zip(
            panel["lane"], panel["start"], panel["dur"], panel["family"], panel["name"], panel["merged"]
        )
    ]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.removesuffix(".json.gz"))
def test_every_event_of_the_step_is_one_bar_in_its_lane_sorted_for_the_hit_test(trace_of, path):
    trace = trace_of(path)
    step = representative_step(trace)
    tl = timeline(trace, step)
    other = timeline(trace, int(trace.steps["step"][0]))
    data = charts.timeline_data(tl, other, "A", "B")
    assert json.dumps(data) == json.dumps(charts.timeline_data(tl, other, "A", "B"))  # deterministic
    families = [f["name"] for f in data["families"]]
    assert families == sorted(
        families, key=lambda f: (charts.FAMILY_ORDER.index(f) if f in charts.FAMILY_ORDER else 99, f)
    )
    assert all(f["color"] == charts.family_color(f["name"]) for f in data["families"])
    for panel, frame, label in zip(data["panels"], (tl, other), "AB"):
        assert panel["title"] == f"{label}: {frame.height:,} events"
        assert panel["lanes"] == charts.lane_order(frame["lane"].to_list())
        assert panel["names"] == sorted(set(frame["name"].to_list()))
        assert "busy" not in panel  # nothing merged below TIMELINE_MAX_EVENTS
        # the same events, bar for bar (times to the ns)
        got = sorted((lane, start, dur, families[f], name) for lane, start, dur, f, name, merged in _bars(panel))
        expect = sorted(
            (
                row["lane"],
                round(row["start_us"], 3),
                round(max(row["end_us"] - row["start_us"], 0.0), 3),
                row["family"],
                row["name"],
            )
            for row in frame.iter_rows(named=True)
        )
        assert len(got) == len(expect)
        for g, e in zip(got, expect):
            assert (
                g[0] == e[0]
                and g[3:] == e[3:]
                and abs(g[1] - e[1]) <= 1e-9 * max(1, abs(e[1]))
                and abs(g[2] - e[2]) <= 2e-3
            )
        # the browser's binary search: lane indices ascend, starts ascend within a lane
        keys = list(zip(panel["lane"], panel["start"]))
        assert keys == sorted(keys)
        assert all(0 <= lane < len(panel["lanes"]) for lane in panel["lane"])
    assert data["span"] == pytest.approx(max(tl["end_us"].max(), other["end_us"].max()), abs=1e-3)


def test_gpu_lanes_hold_the_kernels_launched_in_the_step_as_the_json_module_counts_them(trace_of):
    path = oracle.DATA / "hta_a100_control.json.gz"
    doc = oracle.raw(path)
    trace = trace_of(path)
    spans = oracle.step_spans(doc)
    name, start, end = spans[1]
    step = int(name.removeprefix("ProfilerStep#"))
    launch_ts = {}
    for e in oracle.complete(doc):
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {}):
            launch_ts.setdefault(e["args"]["correlation"], e["ts"])
    expect = Counter()
    for e in oracle.complete(doc):
        if e.get("cat") in oracle.GPU_CATS:
            ts = launch_ts.get(e.get("args", {}).get("correlation"))
            if ts is not None and start <= ts < end:
                expect[f"GPU {e['args'].get('device', 0)} stream {e['args'].get('stream', 0)}"] += 1
    tl = timeline(trace, step)
    panel = charts.timeline_data(tl, tl, "A", "B")["panels"][0]
    got = Counter(panel["lanes"][lane] for lane in panel["lane"] if panel["lanes"][lane].startswith("GPU "))
    assert got == expect and sum(expect.values()) > 1000


def test_a_busy_step_is_merged_into_fewer_bars_that_keep_every_event_and_its_busy_time(trace_of):
    trace = trace_of(oracle.DATA / "hta_a100_control.json.gz")
    step = representative_step(trace)
    tl = timeline(trace, step)
    data = charts.timeline_data(tl, tl.head(10), "A", "B", max_events=1000)
    panel = data["panels"][0]
    assert len(panel["start"]) < tl.height and sum(panel["merged"]) == tl.height
    assert panel["title"] == f"A: {tl.height:,} events, short events merged into {len(panel['start']):,} blocks"
    busy = Counter()
    for lane, value in zip(panel["lane"], panel["busy"]):
        busy[panel["lanes"][lane]] += value
    for lane, total in tl.group_by("lane").agg(pl.col("dur_us").sum()).iter_rows():
        assert busy[lane] == pytest.approx(total, abs=1e-3 * len(panel["start"]))
    assert "busy" not in data["panels"][1]  # 10 events: nothing merged there
    for name, merged in zip(panel["name"], panel["merged"]):
        assert (panel["names"][name] == f"{merged} short events") == (merged > 1)
