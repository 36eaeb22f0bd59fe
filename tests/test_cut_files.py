"""Files cut off mid-write, bytes that are not UTF-8, and steps that hold no work: what the loader
reads from them and what it says. Expected numbers come from the json module reading the same
bytes (or from the events the test wrote), never from the engine's own output."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections import Counter
from decimal import Decimal
from functools import lru_cache

import polars as pl
import pytest

import oracle
from dashboard.engine import TraceError, load_trace
from dashboard.engine.load import decode as load_decode
from dashboard.engine.analyses.kernels import per_step
from dashboard.engine.analyses.summary import device_info

DATA = oracle.DATA
# The committed real traces (tests/data/SOURCES.md) and the vendor their GPU column names.
REAL = {
    "hta_a100_control.json.gz": "cuda",
    "hta_v100_test.json.gz": "cuda",
    "hta_v100_ns_resolution.pt.trace.json.gz": "cuda",
    "kineto_legacy_resnet50_v100.pt.trace.json.gz": "cuda",
    "tracelens_h100_bert_sdpa_flash.json.gz": "cuda",
    "hta_mi250_rocm_minitoy.json.gz": "rocm",
    "hta_triton_example.json.gz": "cuda",
}
PLAIN_CUTS = (0.05, 0.17, 0.6)
GZIP_CUTS = (0.1, 0.5, 0.95)


@lru_cache(maxsize=1)  # tests run name by name; a big trace's scan holds ~150 MB
def scanned(name: str) -> tuple[bytes, list[tuple[int, dict]]]:
    """The whole JSON bytes of a real trace and, in file order, each event with the byte offset
    just past its closing brace (read with json.JSONDecoder.raw_decode, one event at a time)."""
    full = gzip.decompress((DATA / name).read_bytes())
    text = full.decode("utf-8")
    assert text.isascii(), "offsets below are byte offsets only for ASCII files"
    match = re.search(r'"traceEvents"\s*:\s*\[', text)
    decoder, pos, out = json.JSONDecoder(parse_float=Decimal), match.end(), []
    while True:
        while text[pos] in " \n\r\t,":
            pos += 1
        if text[pos] == "]":
            return full, out
        event, pos = decoder.raw_decode(text, pos)
        out.append((pos, event))


def before(name: str, size: int) -> list[dict]:
    """The events that are whole in the first `size` bytes of the file's JSON."""
    return [event for end, event in scanned(name)[1] if end <= size]


def ns(value) -> int:
    return int(Decimal(value) * 1000)


def check_salvage(trace, name: str, size: int) -> None:
    """The trace read from the first `size` JSON bytes holds exactly the complete events that are
    whole there: per category as written, per step on the device, and the cut where it is."""
    kept = before(name, size)
    complete = [e for e in kept if e.get("ph") == "X"]
    assert trace.events.height == len(complete)
    assert trace.raw_categories == dict(Counter(e.get("cat") for e in complete))
    doc = {"traceEvents": kept}
    if oracle.step_spans(doc):
        want = oracle.gpu_per_step(doc)
        table = per_step(trace)
        assert table["name"].to_list() == [n for n, _, _ in oracle.step_spans(doc)]
        for row in table.iter_rows(named=True):
            assert (row["kernel"], row["gpu_memcpy"], row["gpu_memset"]) == tuple(
                want[row["name"]][c] for c in ("kernel", "gpu_memcpy", "gpu_memset")
            ), row["name"]
    last_end = max(end for end, _ in scanned(name)[1] if end <= size)
    origin = min(ns(e["ts"]) for e in complete)
    assert trace.cut is not None
    assert (trace.cut.bytes_kept, trace.cut.bytes_total) == (last_end, size)
    assert trace.cut.last_ts_ns == ns(complete[-1]["ts"]) - origin
    assert f"{last_end:,} of the {size:,} JSON bytes" in trace.warnings[0]
    whole = len(kept) == len(scanned(name)[1]) and scanned(name)[0][last_end:size].strip().startswith(b"]")
    assert trace.cut.events_whole == whole
    if whole:  # cut in the metadata after the events
        assert (
            "cut off after its traceEvents array had ended" in trace.warnings[0]
            and "every event was read" in trace.warnings[0]
        )
    else:
        assert "cut off at ts " in trace.warnings[0] and "after the trace start" in trace.warnings[0]


def device_props_come_first(name: str) -> bool:
    full = scanned(name)[0]
    return 0 <= full.find(b'"deviceProperties"') < full.find(b'"traceEvents"')


@pytest.mark.parametrize("how, fraction", [("plain", f) for f in PLAIN_CUTS] + [("gzip", f) for f in GZIP_CUTS])
@pytest.mark.parametrize("name", REAL)
def test_a_cut_file_keeps_every_complete_event_before_the_cut(tmp_path, name, how, fraction):
    """Plain JSON cut at a share of its bytes, or a .json.gz cut at a share of its compressed
    bytes (then the JSON is what zlib still decompresses from the cut stream)."""
    full, _ = scanned(name)
    if how == "plain":
        path, size = tmp_path / "killed.json", int(len(full) * fraction)
        path.write_bytes(full[:size])
    else:
        packed = (DATA / name).read_bytes()
        cut = packed[: int(len(packed) * fraction)]
        part = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut)
        assert full.startswith(part)
        path, size = tmp_path / "killed.json.gz", len(part)
        path.write_bytes(cut)
    if not before(name, size):  # cut inside the metadata, before the first event
        pattern = "gzip stream is truncated .* before" if how == "gzip" else "not a trace: the JSON is cut off before"
        with pytest.raises(TraceError, match=rf"^{re.escape(path.name)}: {pattern} any traceEvents array$"):
            load_trace(path)
        return
    trace = load_trace(path)
    check_salvage(trace, name, size)
    if how == "gzip":
        assert trace.cut.gzip_bytes == len(cut)
        assert f"gzip stream ends after {len(cut):,} bytes" in trace.warnings[0]
    if device_props_come_first(name):  # the device is known from the metadata, kernels or not
        props = oracle.raw(DATA / name)["deviceProperties"]
        assert device_info(trace) == {"type": REAL[name], "name": props[0]["name"]}


@pytest.mark.parametrize("name", ["hta_mi250_rocm_minitoy.json.gz", "hta_triton_example.json.gz"])
def test_a_cut_anywhere_in_a_small_trace_keeps_exactly_the_whole_events(name):
    """About 150 cut points an odd number of bytes apart, wherever they fall: inside a number, a
    string, a key, the metadata, between events."""
    full, _ = scanned(name)
    step = len(full) // 150 | 1
    for size in range(step, len(full), step):
        kept = [e for e in before(name, size) if e.get("ph") == "X"]
        if not before(name, size):
            with pytest.raises(TraceError):
                load_trace(full[:size], name="cut.json")
            continue
        trace = load_trace(full[:size], name="cut.json")
        assert trace.events.height == len(kept), size
        assert trace.cut.bytes_total == size and len(trace.warnings) >= 1


def test_a_cut_gpu_trace_says_no_device_event_survived_and_keeps_the_device():
    full, events = scanned("hta_a100_control.json.gz")
    first_device = next(
        end for end, e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime")
    )
    trace = load_trace(full[: first_device // 2], name="early.json")
    assert trace.events.filter(pl.col("cat").is_in(["kernel", "gpu_memcpy", "gpu_memset"])).height == 0
    assert device_info(trace) == {"type": "cuda", "name": "NVIDIA A100-PG509-200"}
    assert "none survived, so this cuda trace reads as CPU-only" in trace.warnings[0]
    assert len(trace.warnings) == 1


def test_a_cut_right_after_an_event_keeps_that_event():
    full, events = scanned("hta_triton_example.json.gz")
    end = events[20][0]
    for tail in (b"", b",", b",\n  "):
        trace = load_trace(full[:end] + tail, name="edge.json")
        assert trace.events.height == sum(1 for e in before("hta_triton_example.json.gz", end) if e.get("ph") == "X")
        assert trace.cut.bytes_kept == end


def test_a_gzip_stream_cut_only_in_its_trailer_loses_nothing():
    packed = (DATA / "hta_triton_example.json.gz").read_bytes()
    trace = load_trace(packed[:-4], name="no_trailer.json.gz")  # the trailer is 8 bytes: CRC32, size
    assert trace.events.height == len(oracle.complete(oracle.raw(DATA / "hta_triton_example.json.gz")))
    assert trace.cut is None
    assert len(trace.warnings) == 1 and "nothing of the trace is missing" in trace.warnings[0]


def test_a_gzip_stream_cut_before_any_event_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "stub.json.gz"
    path.write_bytes((DATA / "hta_a100_control.json.gz").read_bytes()[:300])
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith("stub.json.gz: gzip stream is truncated") and "\n" not in message


def inject_bad_byte(name: str) -> tuple[bytes, str]:
    """The trace's JSON with byte 0xFF put into the first kernel's name, and that name as the
    json module reads the bytes with errors="replace"."""
    full = gzip.decompress((DATA / name).read_bytes())
    doc = json.loads(full)
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    quoted = json.dumps(kernel["name"]).encode()
    at = full.index(quoted) + 1  # just inside the name's opening quote
    bad = full[:at] + b"\xff" + full[at:]
    return bad, "\ufffd" + kernel["name"]


@pytest.mark.parametrize("batched", [False, True])
def test_a_byte_that_is_not_utf8_in_a_kernel_name_is_read_as_a_replacement_character(monkeypatch, batched):
    if batched:
        monkeypatch.setattr(load_decode, "ONE_BATCH_BYTES", 0)
    bad, name = inject_bad_byte("tracelens_h100_bert_sdpa_flash.json.gz")
    doc = json.loads(bad.decode("utf-8", errors="replace"))
    trace = load_trace(bad, name="bad.json")
    assert trace.events.height == len(oracle.complete(doc))
    kernels = trace.events.filter(pl.col("cat") == "kernel")["name"].cast(pl.String).to_list()
    assert kernels.count(name) == sum(1 for e in oracle.complete(doc) if e.get("name") == name) == 1
    assert trace.warnings == ["bad.json: 1 byte sequences that are not valid UTF-8 were read as U+FFFD (\ufffd)"]


def test_a_byte_that_is_not_utf8_in_a_cut_gzip_file_is_replaced_too(tmp_path):
    bad, name = inject_bad_byte("hta_triton_example.json.gz")
    packed = gzip.compress(bad)
    path = tmp_path / "bad_cut.json.gz"
    path.write_bytes(packed[: len(packed) * 9 // 10])
    trace = load_trace(path)
    assert name in trace.events["name"].cast(pl.String).to_list()
    assert trace.cut is not None and any("not valid UTF-8" in w for w in trace.warnings)


@pytest.mark.parametrize(
    "content",
    [b'{"traceEvents": [{"ph": "X", "name": "a\xff", "ts": 1', b"\xff\xfe{}", b'{"traceEvents": [1, "\xff"]}'],
)
def test_broken_bytes_are_a_trace_error_or_a_replacement_never_a_decode_error(tmp_path, content):
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    try:
        trace = load_trace(path)
    except TraceError as exc:
        assert str(exc).startswith("broken.json: ") and "\n" not in str(exc)
    else:
        assert all(w.startswith("broken.json: ") for w in trace.warnings)


def test_steps_that_hold_only_annotations_say_why_their_work_is_0(tmp_path):
    """A CPU trace of gloo collectives: ProfilerSteps holding gloo annotations and no cpu_op."""
    events = []
    for step in range(3):
        start = 1000 * step
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": 900,
            }
        )
        for k, op in enumerate(("gloo:all_reduce", "gloo:broadcast")):
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": op,
                    "pid": 1,
                    "tid": 1,
                    "ts": start + 10 + 100 * k,
                    "dur": 50,
                }
            )
    path = tmp_path / "gloo.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    assert per_step(trace)["work"].to_list() == [0, 0, 0]
    assert trace.warnings == [
        "gloo.json: the 3 steps hold no cpu_op and no device event, only user_annotation 6, so every step's work is 0 "
        "(the profiler recorded annotations without ops, as a CPU trace of gloo collectives can)"
    ]


def test_steps_with_cpu_ops_get_no_such_warning(tmp_path):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 900},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
    ]
    path = tmp_path / "ops.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    assert per_step(trace)["work"].to_list() == [1] and trace.warnings == []


def test_steps_that_hold_events_of_no_category_name_them(tmp_path):
    """Events without a cat are named "(no category)" in the warning, and equal counts are
    listed by name, so the warning reads the same on every run."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 900},
        {"ph": "X", "name": "odd", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "zeta", "name": "z", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
        {"ph": "X", "cat": "alpha", "name": "a", "pid": 1, "tid": 1, "ts": 30, "dur": 5},
        {"ph": "X", "cat": "alpha", "name": "b", "pid": 1, "tid": 1, "ts": 40, "dur": 5},
    ]
    path = tmp_path / "nocat.json"
    path.write_text(json.dumps({"traceEvents": events}))
    warned = [w for w in load_trace(path).warnings if "so every step's work is 0" in w]
    assert warned == [
        "nocat.json: the one step holds no cpu_op and no device event, only alpha 2, (no category) 1, zeta 1, "
        "so every step's work is 0 (the profiler recorded annotations without ops, as a CPU trace of gloo "
        "collectives can)"
    ]


@pytest.mark.parametrize("variant", ["sdpa", "naive"])
def test_a_gpu_trace_cut_before_its_device_events_gets_no_attention_rate(variant):
    """The H200 collection's runs cut before their first device event: the attention:: spans and op
    spans left time the launches (the naive run read 36.8 TFLOP/s 'achieved' over them). No rate,
    no percentage, and the reason says why, in the block that summary, check and compare read."""
    from dashboard.engine.analyses.efficiency import LOST_REASON, efficiency_block

    full = gzip.decompress((oracle.DATA.parent.parent / "sample_traces" / "h200" / f"{variant}.json.gz").read_bytes())
    doc = json.loads(full)
    assert any(
        e.get("cat") == "user_annotation" and e.get("name", "").startswith("attention::") for e in doc["traceEvents"]
    )
    first_device = min(
        full.find(f'"cat": "{cat}"'.encode()) % (len(full) + 1)  # absent: past the end
        for cat in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver")
    )
    trace = load_trace(full[: full.rindex(b"},", 0, first_device) + 1], name="early.json")
    assert not trace.has_gpu and device_info(trace)["type"] == "cuda"
    block = efficiency_block(trace)
    assert block["pct_of_roofline"] is None and block["tflops"] is None
    assert all(row["tflops"] is None and row["reason"] == LOST_REASON for row in block["rows"])
    (step,) = block["per_step"]
    assert step["tflops"] is None and step["pct_of_roofline"] is None and step["reason"] == LOST_REASON
    # the whole file keeps its rates
    whole = efficiency_block(load_trace(full, name="whole.json"))
    assert whole["per_step"][0]["tflops"] > 0


def test_a_step_still_running_at_the_cut_is_marked_partial(tmp_path):
    """The H200 naive run cut inside ProfilerStep#4's host ops (the profiler killed mid-write): its
    counts were shown as an ordinary step's (work 3 where the others have 6). summary marks each step
    whose span ends after the start of the last complete event read, from the json module's reading."""
    import subprocess
    import sys

    doc = json.loads(
        gzip.decompress((oracle.DATA.parent.parent / "sample_traces" / "h200" / "naive.json.gz").read_bytes())
    )
    events = doc.pop("traceEvents")
    spans = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")}
    start4, end4 = spans["ProfilerStep#4"]
    k = (
        next(
            i
            for i, e in enumerate(events)
            if e.get("ph") == "X" and start4 < e["ts"] < end4 and e.get("cat") == "cpu_op"
        )
        + 3
    )
    head = json.dumps(doc)[:-1] + ', "traceEvents": [\n' + ",\n".join(json.dumps(e) for e in events[:k]) + ",\n"
    path = tmp_path / "killed.json"
    path.write_text(head + json.dumps(events[k])[:25])  # cut inside the next event
    last_ts = [e["ts"] for e in events[:k] if e.get("ph") == "X"][-1]
    kept = {
        e["name"]: e["ts"] + e["dur"]
        for e in events[:k]
        if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")
    }
    want = {name: end > last_ts for name, end in kept.items()}
    assert want["ProfilerStep#4"] and not all(want.values())
    run = lambda *args: subprocess.run(
        [sys.executable, "-m", "dashboard", "summary", str(path), "--no-store", *args],  # noqa: E731
        capture_output=True,
        text=True,
        timeout=300,
    )
    (record,) = json.loads(run("--json").stdout)
    assert {s["name"]: s["past_cut"] for s in record["steps"]} == want
    text = run().stdout
    assert "ProfilerStep#4 (past the cut)" in text and "ProfilerStep#2 (past the cut)" not in text
    assert "ProfilerStep#4 was still running at the last event read before the cut" in text
    whole = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "dashboard",
                "summary",
                "--json",
                "--no-store",
                str(oracle.DATA / "hta_triton_example.json.gz"),
            ],
            capture_output=True,
            text=True,
        ).stdout
    )
    assert all(s["past_cut"] is False for s in whole[0]["steps"])
