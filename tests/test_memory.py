"""Memory of traces recorded with profile_memory=True: the loader keeps every "[memory]" instant
event (Trace.memory) with its step and the op that holds it, and memory_peaks gives the peak
allocated per step and device and the op whose allocation reached it.

The oracle is written here with the json module only: walk traceEvents, pick ph == "i" and name
== "[memory]", find each ProfilerStep span (cpu_op or user_annotation named ProfilerStep#N; the
2021 traces' Operator), and the enclosing cpu_op by a plain stack walk per thread. Times are read
exactly (Decimal), as the trace writes them."""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import msgspec
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import dashboard.engine.load as load
from dashboard.engine.load import (
    decode as load_decode,
    frames as load_frames,
    reading as load_reading,
    scanner as load_scanner,
    slices as load_slices,
)
from dashboard import charts
from dashboard.cli import _human
from dashboard.engine.analyses.memory import memory_block, memory_by_run, memory_peak, memory_peaks
from dashboard.engine.model.trace import empty_memory
from dashboard.engine.analyses.summary import summarize

DATA = Path(__file__).parent / "data"
NEW = "cpu_naive_profile_memory.json.gz"
STEP = re.compile(r"^ProfilerStep#(\d+)$")
CPU_OP = {"cpu_op", "operator"}  # the 2021 traces write cpu ops as "Operator"
STEP_CATS = CPU_OP | {"user_annotation"}


def _json(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)


def _events(doc) -> list[dict]:
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _has_memory(path: Path) -> bool:
    return any(e.get("ph") == "i" and e.get("name") == "[memory]" for e in _events(_json(path)))


TRACES = sorted(p.name for p in DATA.glob("*.json.gz"))
WITH_MEMORY = [name for name in TRACES if _has_memory(DATA / name)]
WITHOUT_MEMORY = [name for name in TRACES if name not in WITH_MEMORY]


def _ns(value) -> int:
    """µs as the trace writes it -> ns, the first three fraction digits (exact: Decimal)."""
    return int(Decimal(value) * 1000)


def _text(value) -> str | None:
    return None if value is None else str(value)


def oracle(events: list[dict]) -> dict:
    """The memory rows (in time order, ties in file order) and the per-step, per-device peaks,
    from the trace's events by hand."""
    complete = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, Decimal))]
    origin = min(_ns(e["ts"]) for e in complete)
    steps = []
    for e in complete:
        found = STEP.match(str(e.get("name")))
        if found and str(e.get("cat")).lower() in STEP_CATS:
            start = _ns(e["ts"]) - origin
            steps.append((int(found[1]), start, start + _ns(e.get("dur", 0))))
    # ops per thread, in (ts, -dur, file order), zero-length ones holding nothing
    ops: dict[tuple, list] = {}
    for order, e in enumerate(complete):
        if str(e.get("cat")).lower() in CPU_OP and _ns(e.get("dur", 0)) > 0:
            start = _ns(e["ts"]) - origin
            ops.setdefault((_text(e.get("pid")), _text(e.get("tid"))), []).append(
                (start, -_ns(e["dur"]), order, start + _ns(e["dur"]), e["name"])
            )
    rows = []
    for order, e in enumerate(events):
        if e.get("ph") == "i" and e.get("name") == "[memory]":
            args = e.get("args") or {}
            ts = _ns(e["ts"]) - origin
            held = [number for number, start, end in steps if start <= ts < end]
            assert len(held) <= 1
            rows.append(
                {
                    "ts_ns": ts,
                    "pid": _text(e.get("pid")),
                    "tid": _text(e.get("tid")),
                    "device_type": args.get("Device Type"),
                    "device_id": args.get("Device Id"),
                    "bytes": args.get("Bytes"),
                    "total_allocated": args.get("Total Allocated"),
                    "total_reserved": args.get("Total Reserved"),
                    "addr": args.get("Addr"),
                    "step": held[0] if held else None,
                    "op": None,
                    "_order": order,
                }
            )
    rows.sort(key=lambda r: (r["ts_ns"], r["_order"]))
    # the stack walk: each thread's ops and memory events in time order, an op before an event at its start
    for lane, spans in ops.items():
        points = sorted((r["ts_ns"], r["_order"], r) for r in rows if (r["pid"], r["tid"]) == lane)
        items = sorted(
            [(s[0], 0, s[1], s[2], s) for s in spans] + [(p[0], 1, 0, p[1], p[2]) for p in points],
            key=lambda item: item[:4],
        )
        stack: list = []
        for ts, kind, _, _, what in items:
            while stack and stack[-1][3] <= ts:
                stack.pop()
            if kind == 0:
                stack.append(what)
            else:
                what["op"] = stack[-1][4] if stack else None
    peaks: dict[tuple, dict] = {}
    for r in rows:
        if r["step"] is None:
            continue
        key = (r["step"], r["device_type"], r["device_id"])
        if key not in peaks:
            start = None if r["total_allocated"] is None else r["total_allocated"] - r["bytes"]
            peaks[key] = {"peak": None, "start": start, "ts": None, "op": None, "allocations": 0, "events": 0}
        p = peaks[key]
        p["events"] += 1
        p["allocations"] += r["bytes"] > 0
        if r["total_allocated"] is not None and (p["peak"] is None or r["total_allocated"] > p["peak"]):
            p.update(peak=r["total_allocated"], ts=r["ts_ns"], op=r["op"])
    return {"rows": rows, "peaks": peaks}


def _oracle_of(name: str) -> dict:
    return oracle(_events(_json(DATA / name)))


def _frame_rows(trace) -> list[dict]:
    return [
        {**row, "pid": _text(row["pid"]), "tid": _text(row["tid"])}
        for row in trace.memory.with_columns(pl.col("pid", "tid", "op").cast(pl.String)).iter_rows(named=True)
    ]


def test_the_new_trace_was_recorded_with_profile_memory_and_has_memory_in_every_step():
    found = _oracle_of(NEW)
    assert len(found["rows"]) > 0
    assert {r["step"] for r in found["rows"]} == {2, 3, 4}
    assert NEW in WITH_MEMORY and len(WITH_MEMORY) >= 3  # and real GPU traces (Device Type 1), and a 2021 one


@pytest.mark.parametrize("name", WITH_MEMORY)
def test_the_memory_frame_holds_every_memory_event_with_its_step_and_op(name):
    trace = load.load_trace(DATA / name)
    assert trace.memory.schema == empty_memory().schema
    want = [{k: v for k, v in r.items() if k != "_order"} for r in _oracle_of(name)["rows"]]
    got = _frame_rows(trace)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a == b


@pytest.mark.parametrize("name", WITH_MEMORY)
def test_every_step_peak_and_its_op_match_the_oracle(name):
    trace = load.load_trace(DATA / name)
    peaks = _oracle_of(name)["peaks"]
    table = memory_peaks(trace)
    assert table.height == len(peaks)
    for row in table.iter_rows(named=True):
        want = peaks[(row["step"], row["device_type"], row["device_id"])]
        assert row["peak_allocated_bytes"] == want["peak"]
        assert row["start_allocated_bytes"] == want["start"]
        assert row["added_bytes"] == (None if want["peak"] is None else want["peak"] - want["start"])
        assert row["peak_ts_ns"] == want["ts"]
        assert row["peak_op"] == want["op"]
        assert row["allocations"] == want["allocations"] and row["events"] == want["events"]


@pytest.mark.parametrize("name", WITH_MEMORY)
def test_the_trace_wide_peak_is_the_highest_total_allocated_per_device(name):
    rows = _oracle_of(name)["rows"]
    table = memory_peak(load.load_trace(DATA / name))
    for row in table.iter_rows(named=True):
        mine = [r for r in rows if (r["device_type"], r["device_id"]) == (row["device_type"], row["device_id"])]
        known = [r for r in mine if r["total_allocated"] is not None]
        assert row["events"] == len(mine)
        if not known:
            assert row["peak_allocated_bytes"] is None
            continue
        first = max(known, key=lambda r: (r["total_allocated"], -rows.index(r)))
        assert (row["peak_allocated_bytes"], row["peak_ts_ns"], row["peak_op"], row["peak_step"]) == (
            first["total_allocated"],
            first["ts_ns"],
            first["op"],
            first["step"],
        )


@pytest.mark.parametrize("batched", [False, True], ids=["whole", "in batches"])
@pytest.mark.parametrize("name", WITH_MEMORY)
def test_the_scanner_and_msgspec_give_the_same_memory_frame(name, batched, monkeypatch):
    if load_scanner._scan is None:
        pytest.skip("the C scanner is not built here")
    if batched:
        monkeypatch.setattr(load_decode, "ONE_BATCH_BYTES", 0)
        monkeypatch.setattr(load_decode, "BATCH", 500)
    with_scanner = load.load_trace(DATA / name)
    monkeypatch.setattr(load_scanner, "_scan", None)
    without = load.load_trace(DATA / name)
    assert with_scanner.memory.height > 0
    assert_frame_equal(with_scanner.memory, without.memory)
    assert with_scanner.warnings == without.warnings


@pytest.mark.parametrize("name", [NEW, "tracelens_h100_bert_sdpa_flash.json.gz"])
def test_a_file_read_in_slices_by_worker_processes_gives_the_same_memory_frame(name, tmp_path, monkeypatch):
    path = tmp_path / name.removesuffix(".gz")
    path.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 20_000)
    sliced = load_slices._load_sliced(path, None, None)
    assert sliced is not None, "the sliced path was not taken"
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    assert_frame_equal(sliced.memory, load.load_trace(path).memory)
    assert sliced.memory.height == len(_oracle_of(name)["rows"])


def _kept_before(text: str) -> list[dict]:
    """The whole events of a document cut off mid-write, read one by one with the json module."""
    start = re.search(r'"traceEvents"\s*:\s*\[', text).end()
    decoder, kept, pos = json.JSONDecoder(parse_float=Decimal), [], start
    while True:
        pos = re.compile(r"[\s,]*").match(text, pos).end()
        try:
            event, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return kept
        kept.append(event)


@pytest.mark.parametrize("fraction", [0.35, 0.6, 0.85])
def test_a_cut_file_keeps_the_memory_events_before_the_cut_on_every_path(fraction, tmp_path, monkeypatch):
    data = gzip.decompress((DATA / NEW).read_bytes())
    cut = data[: int(len(data) * fraction)]
    path = tmp_path / "cut.json"
    path.write_bytes(cut)
    want = [{k: v for k, v in r.items() if k != "_order"} for r in oracle(_kept_before(cut.decode()))["rows"]]
    closed = load.load_trace(path)  # closed after its last whole event, read on the fast path
    assert closed.cut is not None
    assert _frame_rows(closed) == want
    monkeypatch.setattr(load_decode, "_close_cut_file", lambda data, first: None)  # event by event (the salvage)
    salvaged = load.load_trace(path)
    assert_frame_equal(salvaged.memory, closed.memory)
    monkeypatch.setattr(load_scanner, "_scan", None)
    assert_frame_equal(load.load_trace(path).memory, closed.memory)


def _memory_event(**fields: str) -> str:
    body = {
        "ph": '"i"',
        "cat": '"cpu_instant_event"',
        "s": '"t"',
        "name": '"[memory]"',
        "pid": "1",
        "tid": "1",
        "ts": "12.5",
        **fields,
    }
    return "{" + ", ".join(f'"{key}": {value}' for key, value in body.items()) + "}"


def _arg_text(**args: str) -> str:
    return "{" + ", ".join(f'"{key.replace("_", " ")}": {value}' for key, value in args.items()) + "}"


ODD_MEMORY = [
    _memory_event(
        args=_arg_text(
            Bytes="4096",
            Total_Allocated="8192",
            Total_Reserved="0",
            Addr="94000000000",
            Device_Id="-1",
            Device_Type="0",
        )
    ),
    _memory_event(
        ph='"I"',
        args=_arg_text(Bytes='"-4096"', Total_Allocated="4096.0", Device_Type="1", Device_Id='"0"', Addr='"0x7f00"'),
    ),
    _memory_event(
        name=r'"\u005bmemory]"', args=_arg_text(Bytes="1e3", Total_Allocated="null", Total_Reserved="true", Addr="[1]")
    ),
    _memory_event(args=_arg_text(Bytes="99999999999999999999", Total_Allocated='{"a": 1}', Device_Type="-0")),
    _memory_event(args="null"),
    _memory_event(args="[1, 2]"),
    _memory_event(),
    _memory_event(ts='"13.25"'),
    _memory_event(ts="1.5e1", pid='"p"', tid="7.5"),
    _memory_event(name='"[memory] "'),
    _memory_event(ph='"X"', dur="1"),
    '{"ph": "i", "name": "[memory]"}',
]


def test_odd_memory_values_are_read_the_same_by_the_scanner_and_msgspec():
    if load_scanner._scan is None:
        pytest.skip("the C scanner is not built here")
    raw = ("[" + ", ".join(ODD_MEMORY) + "]").encode()
    got = load_scanner._scanned_part(raw)
    want = load_frames._read_batch(load_reading._decode_events(raw))
    assert got is not None and want.memory is not None
    assert_frame_equal(got.memory, want.memory)
    rows = want.memory.to_dicts()
    assert len(rows) == 9  # no ts, another name, a complete event: not memory events
    assert rows[0] == {
        "pid": "1",
        "tid": "1",
        "ts_abs": 12500,
        "device_type": 0,
        "device_id": -1,
        "bytes": 4096,
        "total_allocated": 8192,
        "total_reserved": 0,
        "addr": 94000000000,
    }
    assert (rows[1]["bytes"], rows[1]["total_allocated"], rows[1]["device_id"], rows[1]["addr"]) == (
        -4096,
        4096,
        0,
        0x7F00,
    )
    assert (rows[2]["bytes"], rows[2]["total_allocated"], rows[2]["total_reserved"], rows[2]["addr"]) == (
        1000,
        None,
        None,
        None,
    )
    assert (rows[3]["bytes"], rows[3]["total_allocated"], rows[3]["device_type"]) == (None, None, 0)
    assert [r["ts_abs"] for r in rows[7:]] == [13250, 15000]


_VALUES = [
    "0",
    "-0",
    "7",
    "-4096",
    "9223372036854775807",
    "9223372036854775808",
    "1.5",
    "1e3",
    "null",
    "true",
    '""',
    '"12"',
    '"0x10"',
    '"x"',
    "[]",
    '{"k": 1}',
]
_ARGS = ["Bytes", "Total Allocated", "Total Reserved", "Addr", "Device Id", "Device Type", "bytes", "stream"]


@st.composite
def memory_events(draw) -> str:
    args = {k: draw(st.sampled_from(_VALUES)) for k in draw(st.lists(st.sampled_from(_ARGS), unique=True))}
    return _memory_event(
        ph=draw(st.sampled_from(['"i"', '"I"', '"X"'])),
        ts=draw(st.sampled_from(["1", "2.5", '"3"', "null", "1e2"])),
        pid=draw(st.sampled_from(["1", '"a"', "null", "2.5"])),
        args=draw(st.sampled_from(["{" + ", ".join(f'"{k}": {v}' for k, v in args.items()) + "}", "null", "[]"])),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(memory_events(), min_size=1, max_size=5))
def test_generated_memory_events_are_read_as_msgspec_reads_them(batch):
    if load_scanner._scan is None:
        pytest.skip("the C scanner is not built here")
    raw = ("[" + ", ".join(batch) + "]").encode()
    got = load_scanner._scanned_part(raw)
    try:
        want = load_frames._read_batch(load_reading._decode_events(raw))
    except msgspec.ValidationError:  # a typed arg of another event kind (bytes, stream) that is not a scalar
        assert got is None  # left to msgspec, which reads the file event by event
        return
    assert got is not None  # a memory arg's value of any type never costs an event
    assert (got.memory is None) == (want.memory is None)
    if want.memory is not None:
        assert_frame_equal(got.memory, want.memory)


@pytest.mark.parametrize("name", WITHOUT_MEMORY)
def test_a_trace_without_memory_events_says_memory_was_not_recorded(name):
    trace = load.load_trace(DATA / name)
    assert trace.memory.height == 0 and trace.memory.schema == empty_memory().schema
    assert memory_peaks(trace).height == 0
    summary = summarize(trace)
    block = summary["memory"]
    assert block["peak_allocated_bytes"] is None and block["per_step"] == [] and block["events"] == 0
    # Kineto writes "profile_memory": 1 at the top level: the vLLM decode trace was recorded with it
    # and its window (a graph replay) allocated nothing
    flagged = _json(DATA / name).get("profile_memory") == 1
    assert block["recorded"] is flagged
    want = (
        "  memory: recorded (profile_memory=True), but the trace holds no allocation or free"
        if flagged
        else "  memory: not recorded (profile_memory=False)"
    )
    assert want in _human(summary | {"health": summary.get("health", [])}).splitlines()


def test_the_summary_memory_block_is_the_oracles_peak_and_deterministic():
    one, two = load.load_trace(DATA / NEW), load.load_trace(DATA / NEW)
    text = json.dumps(summarize(one)["memory"], sort_keys=True)
    assert text == json.dumps(summarize(two)["memory"], sort_keys=True)
    block = json.loads(text)
    rows = _oracle_of(NEW)["rows"]
    first = max(rows, key=lambda r: (r["total_allocated"], -rows.index(r)))
    assert block["recorded"] is True and block["device"] == "cpu" and block["events"] == len(rows)
    assert (block["peak_allocated_bytes"], block["peak_op"], block["peak_step"], block["peak_ts_ns"]) == (
        first["total_allocated"],
        first["op"],
        first["step"],
        first["ts_ns"],
    )
    peaks = _oracle_of(NEW)["peaks"]
    step = peaks[(first["step"], 0, -1)]
    assert block["added_bytes"] == step["peak"] - step["start"]
    assert [(s["step"], s["peak_allocated_bytes"], s["peak_op"]) for s in block["per_step"]] == [
        (k[0], v["peak"], v["op"]) for k, v in sorted(peaks.items())
    ]
    for value in (
        block["peak_allocated_bytes"],
        block["added_bytes"],
        *(s["start_allocated_bytes"] for s in block["per_step"]),
    ):
        assert type(value) is int
    line = next(line for line in _human(summarize(one)).splitlines() if line.startswith("  memory:"))
    assert line == (
        f"  memory: peak {first['total_allocated'] / 1e6:.1f} MB allocated on cpu, at {first['op']} "
        f"(step {first['step']}); {(step['peak'] - step['start']) / 1e6:+.1f} MB over the step"
    )


def test_a_gpu_trace_reports_its_device_memory_and_a_2021_trace_its_events_without_a_peak():
    gpu = memory_block(load.load_trace(DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"))
    rows = [r for r in _oracle_of("tracelens_h100_qwen_chat_sdpa_flash.json.gz")["rows"] if r["device_type"] == 1]
    assert gpu["device"] == "cuda:0" and gpu["peak_allocated_bytes"] == max(r["total_allocated"] for r in rows)
    legacy = memory_block(load.load_trace(DATA / "kineto_legacy_resnet50_v100.pt.trace.json.gz"))
    assert legacy["recorded"] is True and legacy["totals_recorded"] is False and legacy["peak_allocated_bytes"] is None
    assert legacy["events"] == len(_oracle_of("kineto_legacy_resnet50_v100.pt.trace.json.gz")["rows"])


def test_the_store_keeps_the_memory_table(tmp_path):
    from dashboard.engine.store.store import Store

    store = Store(tmp_path)
    parsed, sha = store.open(DATA / NEW)
    reopened = store.get(sha)
    assert reopened is not None
    assert_frame_equal(reopened.memory, parsed.memory)
    assert json.dumps(summarize(reopened)["memory"]) == json.dumps(summarize(parsed)["memory"])


def test_the_chart_draws_each_runs_peak_per_step_with_its_op():
    runs = {
        "naive": load.load_trace(DATA / NEW),
        "qwen": load.load_trace(DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"),
        "no memory": load.load_trace(DATA / "hta_triton_example.json.gz"),
    }
    fig = charts.memory_chart(memory_by_run(runs))
    bars = {bar.name: bar for bar in fig.data}
    assert set(bars) == {"naive (cpu)", "qwen (cuda:0)"}  # a GPU run: its device memory, not the CPU allocator's
    peaks = _oracle_of(NEW)["peaks"]
    naive = bars["naive (cpu)"]
    drawn = {x: (y, c[3]) for x, y, c in zip(naive.x, naive.y, naive.customdata) if y is not None}
    assert drawn == {f"step {k[0]}": (pytest.approx(v["peak"] / 1e6), v["op"]) for k, v in peaks.items()}


def test_the_collectors_record_memory():
    torch = pytest.importorskip("torch")
    from collectors.profile import profile_attention

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        fn = lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v  # noqa: E731
        qkv = tuple(torch.randn(1, 2, 32, 16) for _ in range(3))
        written = profile_attention(
            fn, qkv, label="t", out_dir=Path(tmp), stem="t", active=1, metadata={"variant": "t"}
        )
        assert load.load_trace(written.trace).memory.height > 0


def _speedups(monkeypatch, traces: list[Path], runs: list[str]):
    import os

    from streamlit.testing.v1 import AppTest

    from dashboard.runs import ENV_TRACES

    monkeypatch.setenv(ENV_TRACES, os.pathsep.join(str(p) for p in traces))
    at = AppTest.from_file(str(DATA.parent.parent / "dashboard" / "app.py"), default_timeout=120)
    at.query_params["tab"] = "Speedups"
    at.query_params["run"] = runs
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_speedups_tab_draws_memory_when_a_selected_run_has_memory_events(monkeypatch):
    qwen = DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
    triton = DATA / "hta_triton_example.json.gz"
    at = _speedups(monkeypatch, [DATA / NEW, qwen, triton], ["file/" + NEW, "file/" + qwen.name, "file/" + triton.name])
    (chart,) = list(at.get_by_key("chart_memory").children.values())
    bars = {bar["name"]: bar for bar in json.loads(chart.proto.spec)["data"]}
    # the app names a collectors' trace by its variant ("naive [files]")
    assert (
        len(bars) == 2 and "tracelens_h100_qwen_chat_sdpa_flash [files] (cuda:0)" in bars
    )  # [files]: on every label of the group or none
    (naive,) = [bar for name, bar in bars.items() if name.startswith("naive") and name.endswith(" (cpu)")]
    peaks = _oracle_of(NEW)["peaks"]
    drawn = {x: y for x, y in zip(naive["x"], naive["y"]) if y is not None}  # the steps of both runs on one axis
    assert drawn == {f"step {k[0]}": pytest.approx(v["peak"] / 1e6) for k, v in peaks.items()}
    assert any(
        "hta_triton_example" in c.value.replace("\\", "") and "without profile_memory" in c.value for c in at.caption
    )


def test_the_speedups_tab_has_no_memory_section_without_memory_events(monkeypatch):
    triton = DATA / "hta_triton_example.json.gz"
    at = _speedups(monkeypatch, [triton], ["file/" + triton.name])
    assert not [s for s in at.subheader if s.value == "Memory"]
    with pytest.raises(Exception):
        at.get_by_key("chart_memory")
