"""Every accelerator's runtime and device categories, and nothing dropped in silence.

There is no public MTIA (or XPU/HPU) trace, so the tests write small ones the way Kineto's
ChromeTraceLogger does (output_json.cpp: "X" events with cat = toString(ActivityType), device
events with pid = device and tid = stream, ac2g flow start on the launch and flow end, "bp": "e",
on the device event, both with id = correlation) and count what they wrote.
"""

from __future__ import annotations

import json
from collections import Counter

import polars as pl
import pytest

import oracle
from dashboard.engine import load_trace, summarize
from dashboard.engine.analyses.kernels import per_step, work_unit
from dashboard.engine.load import CATEGORIES, DEVICE, LAUNCH
from dashboard.engine.model.trace import GPU_CATEGORIES, LAUNCH_CATEGORIES
from dashboard.engine.analyses.summary import device_info

# Kineto's ActivityType names (libkineto/include/ActivityType.h, _activityTypeNames), the oracle
# for "every category Kineto writes is known".
KINETO_NAMES = (
    "cpu_op",
    "user_annotation",
    "gpu_user_annotation",
    "gpu_memcpy",
    "gpu_memset",
    "kernel",
    "external_correlation",
    "cuda_runtime",
    "cuda_driver",
    "cpu_instant_event",
    "python_function",
    "overhead",
    "mtia_runtime",
    "mtia_ccp_events",
    "mtia_insight",
    "cuda_sync",
    "cuda_event",
    "mtia_counters",
    "glow_runtime",
    "cuda_profiler_range",
    "hpu_op",
    "xpu_runtime",
    "xpu_driver",
    "collective_comm",
    "privateuse1_runtime",
    "privateuse1_driver",
    "xpu_scope_profiler",
    "xpu_sync",
)
REAL = [
    "hta_a100_control.json.gz",
    "hta_v100_test.json.gz",
    "hta_v100_ns_resolution.pt.trace.json.gz",
    "kineto_legacy_resnet50_v100.pt.trace.json.gz",
    "tracelens_h100_bert_sdpa_flash.json.gz",
    "hta_mi250_rocm_minitoy.json.gz",
    "hta_triton_example.json.gz",
]

# ops per step: (op name, device events it launches); the device events take the op's name.
STEP_OPS = [
    [("aten::mm", 1), ("aten::add", 1)],
    [("aten::mm", 1), ("aten::softmax", 2), ("aten::add", 1)],
    [("aten::bmm", 3)],
]


def vendor_trace(launch_cat: str, device_cat: str, extra: list[dict] | None = None) -> dict:
    """A small Kineto-shaped trace: one ProfilerStep per STEP_OPS row on host thread (10, 11),
    each op holding one launch call per device event, the device events on pid 0 / tid 3."""
    events: list[dict] = []
    corr, ts = 100, 1_000.0
    for step, ops in enumerate(STEP_OPS):
        step_start = ts
        for op, launches in ops:
            op_start = ts + 1
            ts = op_start + 1
            for _ in range(launches):
                corr += 1
                events.append(
                    {
                        "ph": "X",
                        "cat": launch_cat,
                        "name": "LaunchKernel",
                        "pid": 10,
                        "tid": 11,
                        "ts": ts,
                        "dur": 2.5,
                        "args": {"correlation": corr, "External id": corr},
                    }
                )
                events.append({"ph": "s", "id": corr, "pid": 10, "tid": 11, "ts": ts, "cat": "ac2g", "name": "ac2g"})
                events.append(
                    {
                        "ph": "X",
                        "cat": device_cat,
                        "name": f"{op}_device",
                        "pid": 0,
                        "tid": 3,
                        "ts": ts + 20,
                        "dur": 7.25,
                        "args": {"correlation": corr, "device": 0, "stream": 3},
                    }
                )
                events.append(
                    {"ph": "f", "id": corr, "pid": 0, "tid": 3, "ts": ts + 20, "cat": "ac2g", "name": "ac2g", "bp": "e"}
                )
                ts += 3
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": op, "pid": 10, "tid": 11, "ts": op_start, "dur": ts - op_start}
            )
        ts += 5
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 10,
                "tid": 11,
                "ts": step_start,
                "dur": ts - step_start,
            }
        )
        ts += 50
    return {"schemaVersion": 1, "traceEvents": events + (extra or [])}


def write(tmp_path, doc: dict, name: str = "vendor.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "launch_cat, device_cat, kind",
    [
        ("mtia_runtime", "mtia_ccp_events", "mtia"),
        ("xpu_runtime", "kernel", "xpu"),
        ("xpu_driver", "kernel", "xpu"),
        ("hpu_op", "kernel", "hpu"),
        ("privateuse1_runtime", "kernel", "privateuse1"),
        ("privateuse1_driver", "kernel", "privateuse1"),
    ],
)
def test_an_accelerator_trace_counts_its_device_work_per_step_and_names_its_device(
    tmp_path, launch_cat, device_cat, kind
):
    trace = load_trace(write(tmp_path, vendor_trace(launch_cat, device_cat)))
    want = [sum(n for _, n in ops) for ops in STEP_OPS]  # device events written per step: 2, 4, 3
    assert per_step(trace)["kernel"].to_list() == want == [2, 4, 3]
    assert per_step(trace)["work"].to_list() == want
    assert work_unit(trace) == "kernel" and trace.has_gpu
    assert device_info(trace) == {"type": kind, "name": None}
    assert trace.warnings == []


def test_an_mtia_trace_links_each_ccp_event_to_its_runtime_call_and_keeps_the_categories_as_written(tmp_path):
    doc = vendor_trace("mtia_runtime", "mtia_ccp_events")
    trace = load_trace(write(tmp_path, doc))
    written = Counter(e["cat"] for e in oracle.complete(doc))
    assert trace.raw_categories == dict(written)
    summary = summarize(trace)
    assert summary["counts"]["kernel"] == written["mtia_ccp_events"] == 9
    assert summary["counts"]["mtia_runtime"] == written["mtia_runtime"] == 9
    assert summary["device"]["type"] == "mtia"
    ev = trace.events
    device = ev.filter(pl.col("cat") == "kernel")
    launches = ev.select(
        pl.col("id").alias("launch"),
        pl.col("cat").cast(pl.String).alias("launch_cat"),
        pl.col("correlation").alias("launch_correlation"),
    )
    linked = device.join(launches, on="launch", how="left")
    assert linked["launch_cat"].to_list() == ["mtia_runtime"] * 9
    assert (linked["correlation"] == linked["launch_correlation"]).all()
    assert sorted(device["stream"].to_list()) == [3] * 9 and set(device["device"].to_list()) == {0}
    flows = trace.flows
    assert (
        flows.filter(pl.col("cat") == "ac2g").height
        == sum(1 for e in doc["traceEvents"] if e.get("cat") == "ac2g")
        == 18
    )


def test_an_mtia_trace_names_the_categories_it_does_not_analyse(tmp_path):
    insight = [
        {"ph": "X", "cat": "mtia_insight", "name": f"insight {k}", "pid": 0, "tid": 9, "ts": 1_000 + 10 * k, "dur": 1}
        for k in range(4)
    ]
    custom = [{"ph": "X", "cat": "my_vendor_thing", "name": "x", "pid": 0, "tid": 9, "ts": 1_500, "dur": 1}]
    trace = load_trace(write(tmp_path, vendor_trace("mtia_runtime", "mtia_ccp_events", insight + custom)))
    assert trace.warnings == [
        "vendor.json: 5 events in categories the engine does not analyse "
        "(kept in the events table, counted in no step's work): mtia_insight 4; my_vendor_thing 1"
    ]
    assert per_step(trace)["kernel"].to_list() == [2, 4, 3]


@pytest.mark.parametrize("name", REAL)
def test_real_traces_raise_no_category_warning(trace_of, name):
    trace = trace_of(oracle.DATA / name)
    assert not [w for w in trace.warnings if "does not analyse" in w]
    assert trace.raw_categories == dict(oracle.category_counts(oracle.raw(oracle.DATA / name)))


def test_every_category_kineto_writes_is_in_the_one_table_and_the_roles_agree_with_the_model():
    assert set(KINETO_NAMES) <= set(CATEGORIES)
    assert {row[0] for row in CATEGORIES.values() if row[1] == LAUNCH} == set(LAUNCH_CATEGORIES)
    assert {row[0] for row in CATEGORIES.values() if row[1] == DEVICE} == set(GPU_CATEGORIES)


def test_cuda_and_rocm_traces_still_say_cuda_and_rocm(trace_of):
    assert device_info(trace_of(oracle.DATA / "hta_mi250_rocm_minitoy.json.gz"))["type"] == "rocm"
    assert device_info(trace_of(oracle.DATA / "hta_v100_test.json.gz")) == {
        "type": "cuda",
        "name": "Tesla V100-SXM2-16GB",
    }


def _mtia_doc() -> dict:
    """vendor_trace's MTIA shape with the ccp events of an MTIA inference named as such traces name
    them: per step, DMA transfers each way, an event record and wait, and the compute."""
    doc = vendor_trace("mtia_runtime", "mtia_ccp_events")
    names = iter(
        [
            "dma_request_h2d",
            "matmul",
            "event_record",
            "event_wait",
            "dma_request_d2h",
            "softmax",
            "dma_request",
            "matmul",
            "event_wait",
        ]
    )
    for e in doc["traceEvents"]:
        if e.get("cat") == "mtia_ccp_events":
            e["name"] = next(names)
    return doc


def test_an_mtia_traces_dma_requests_are_copies_with_their_direction_and_its_events_are_no_work(tmp_path):
    doc = _mtia_doc()
    trace = load_trace(write(tmp_path, doc))
    # the oracle: the json module and the names, step by step (steps are the ProfilerStep spans)
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep")
    )
    launches = {e["args"]["correlation"]: e["ts"] for e in doc["traceEvents"] if e.get("cat") == "mtia_runtime"}
    want = []
    for start, end in steps:
        names = [
            e["name"]
            for e in doc["traceEvents"]
            if e.get("cat") == "mtia_ccp_events" and start <= launches[e["args"]["correlation"]] <= end
        ]
        dma = [n for n in names if n.startswith("dma_request")]
        sync = [n for n in names if n in ("event_record", "event_wait")]
        want.append((len(names) - len(dma) - len(sync), len(dma)))
    got = per_step(trace)
    assert list(zip(got["kernel"].to_list(), got["gpu_memcpy"].to_list())) == want == [(1, 1), (1, 1), (1, 1)]
    summary = summarize(trace)
    assert summary["memcpy"] == {"HtoD": 1, "DtoH": 1, "unknown": 1}
    assert summary["counts"]["kernel"] == 3 and summary["counts"]["device_sync"] == 3
    # a sync event is neither work nor a copy, and no event is lost: 3 + 3 + 3 = the 9 written
    assert sum(summary["counts"].get(c, 0) for c in ("kernel", "gpu_memcpy", "device_sync")) == 9
    assert trace.warnings == []


# The ccp events of _mtia_dma_doc, in launch order: name and args. MTIA's dma_request carries its
# direction in args.direction (issue #37 item 5: 450 DEVICE_TO_HOST, 427 HOST_TO_DEVICE in the trace
# read by hand); its size, where written, in args.bytes or args.size (no public MTIA trace shows which).
MTIA_DMA = [
    ("dma_request", {"direction": "HOST_TO_DEVICE", "bytes": 4096}),
    ("matmul", {}),
    ("dma_request", {"direction": "DEVICE_TO_HOST", "size": "2048"}),
    ("event_record", {}),
    ("dma_request", {"direction": "HOST_TO_DEVICE", "bytes": 1 << 20}),
    ("dma_request", {"direction": "DEVICE_TO_DEVICE"}),
    ("dma_request_d2h", {}),  # no direction arg: the name's
    ("dma_request_h2d", {"direction": "SIDEWAYS"}),  # a value the table does not know: the name's
    ("dma_request", {}),  # neither: unknown
]


def _mtia_dma_doc() -> dict:
    doc = vendor_trace("mtia_runtime", "mtia_ccp_events")
    rows = iter(MTIA_DMA)
    for e in doc["traceEvents"]:
        if e.get("cat") == "mtia_ccp_events":
            e["name"], extra = next(rows)
            e["args"].update(extra)
    return doc


def _json_directions(doc: dict) -> list[tuple[int, str, int | None]]:
    """The oracle, from the json module: each dma_request's (correlation, direction, bytes), the
    direction from args.direction's three values, else from h2d/d2h in the name, else unknown."""
    named = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD"}
    out = []
    for e in doc["traceEvents"]:
        if e.get("cat") == "mtia_ccp_events" and e["name"].startswith("dma_request"):
            args = e["args"]
            by_name = "HtoD" if "h2d" in e["name"] else "DtoH" if "d2h" in e["name"] else "unknown"
            size = args.get("bytes", args.get("size"))
            out.append(
                (args["correlation"], named.get(args.get("direction"), by_name), None if size is None else int(size))
            )
    return out


@pytest.mark.parametrize("scanner", [True, False], ids=["C scanner", "msgspec"])
def test_an_mtia_dma_request_takes_its_direction_and_bytes_from_its_args(tmp_path, monkeypatch, scanner):
    from dashboard.engine.analyses.copies import copies
    from dashboard.engine.load import scanner as load_scanner

    if not scanner:
        monkeypatch.setattr(load_scanner, "_scan", None)
    doc = _mtia_dma_doc()
    trace = load_trace(write(tmp_path, doc))
    want = _json_directions(doc)
    assert summarize(trace)["memcpy"] == dict(Counter(d for _, d, _ in want))
    assert dict(Counter(d for _, d, _ in want)) == {"HtoD": 3, "DtoH": 2, "DtoD": 1, "unknown": 1}
    table = copies(trace).join(
        trace.events.select("id", "correlation"), on="id", how="left"
    )  # each copy's correlation, to meet the oracle's rows
    kinds = table["kind"].fill_null("unknown").to_list()  # the copies table leaves an unknown kind null
    assert sorted(zip(table["correlation"].to_list(), kinds, table["bytes"].to_list())) == sorted(want)
    # a direction is a copy's only: the matmul and the event record keep no kind
    assert trace.events.filter(pl.col("cat") != "gpu_memcpy")["kind"].drop_nulls().len() == 0
    got = per_step(trace)
    assert list(zip(got["kernel"].to_list(), got["gpu_memcpy"].to_list())) == [(1, 1), (0, 3), (0, 3)]


def test_an_mtia_trace_reads_the_same_with_and_without_the_c_scanner(tmp_path, monkeypatch):
    from polars.testing import assert_frame_equal

    from dashboard.engine.load import scanner as load_scanner

    path = write(tmp_path, _mtia_dma_doc())
    with_scanner = load_trace(path)
    monkeypatch.setattr(load_scanner, "_scan", None)
    assert_frame_equal(with_scanner.events, load_trace(path).events)


def test_the_device_class_rows_apply_to_their_accelerator_only(tmp_path):
    """A CUDA trace's kernel named like an MTIA DMA request stays a kernel."""
    doc = vendor_trace("cuda_runtime", "kernel")
    first = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    first["name"] = "dma_request_h2d"
    trace = load_trace(write(tmp_path, doc))
    assert summarize(trace)["counts"]["kernel"] == 9 and "gpu_memcpy" not in summarize(trace)["counts"]


def test_every_device_class_row_says_why_and_where_from():
    from dashboard.engine.rules.devices import CATEGORIES, DEVICE_CLASSES

    for row in DEVICE_CLASSES:
        assert (
            row.reason
            and row.source
            and CATEGORIES[row.category][1] == DEVICE
            and (row.becomes != "kernel" or not row.launched)
        )  # a row that keeps a kernel says it has no launch
