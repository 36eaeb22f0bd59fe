"""Independent oracles: facts read from trace files with nothing but the json module.

Deliberately naive (plain loops over dicts) and sharing no code with dashboard.engine, so that a
test compares the engine against a second, obviously-correct reading of the same bytes.
"""

from __future__ import annotations

import functools
import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

DATA = Path(__file__).parent / "data"
GPU_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


def raw(path: Path, parse_float=float) -> dict:
    """The whole document; parse_float=decimal.Decimal keeps epoch-µs timestamps exact."""
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = json.loads(data, parse_float=parse_float)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def complete(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def step_spans(doc: dict) -> list[tuple[str, float, float]]:
    """(name, start µs, end µs) of CPU-side ProfilerStep#N events."""
    out = []
    for e in complete(doc):
        name = e.get("name", "")
        if name.startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation":
            out.append((name, e["ts"], e["ts"] + e.get("dur", 0)))
    return sorted(out, key=lambda s: s[1])


def gpu_per_step(doc: dict) -> dict[str, Counter]:
    """step name -> Counter of GPU categories, each GPU event placed by its launch's timestamp."""
    launch_ts = {}
    for e in complete(doc):
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {}):
            launch_ts.setdefault(e["args"]["correlation"], e["ts"])
    spans = step_spans(doc)
    per_step: dict[str, Counter] = {name: Counter() for name, _, _ in spans}
    for e in complete(doc):
        cat = GPU_CATS.get(e.get("cat"))
        if cat is None:
            continue
        ts = launch_ts.get(e.get("args", {}).get("correlation"))
        if ts is None:
            continue
        for name, start, end in spans:
            if start <= ts < end:
                per_step[name][cat] += 1
                break
    return per_step


def memcpy_kinds(doc: dict) -> Counter:
    """Memcpy kind (the word after 'Memcpy' in the name) -> count."""
    return Counter(e["name"].split()[1] for e in complete(doc) if GPU_CATS.get(e.get("cat")) == "gpu_memcpy")


def category_counts(doc: dict) -> Counter:
    return Counter(e.get("cat") for e in complete(doc))


def enclosing_ops(doc: dict, pid, tid, ts: float, end: float) -> list[dict]:
    """CPU ops (cpu_op/Operator) on one thread whose span holds [ts, end], outermost first."""
    ops = [
        e
        for e in complete(doc)
        if e.get("cat") in ("cpu_op", "Operator")
        and str(e["pid"]) == str(pid)
        and str(e["tid"]) == str(tid)
        and float(e["ts"]) <= ts
        and float(e["ts"]) + float(e.get("dur", 0)) >= end
    ]
    return sorted(ops, key=lambda e: (float(e["ts"]), -float(e.get("dur", 0))))


def union_us(intervals: list[tuple]) -> float:
    """Length of the union of [start, end) intervals (any numeric type)."""
    total, cur_start, cur_end = 0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def by_device(events: list[dict]) -> dict:
    out = defaultdict(list)
    for e in events:
        out[e.get("args", {}).get("device", e.get("pid"))].append((e["ts"], e["ts"] + e.get("dur", 0)))
    return out


# ------------------------------------------------------------------ the summary's numbers, read plainly
#
# The definitions below are the ones the summary is held to (issue 37 item 11). Times are int ns,
# read from the µs text as the digits say (three decimals kept, the rest cut), so sums are exact.

STEP_PREFIX = "ProfilerStep#"
IMPLICIT_STEP = "whole trace (no ProfilerStep)"
OVERLAP_TOLERANCE_NS = 1_000  # integer-µs traces round start and duration apart
# Collective kernels, by the function name's start or a collective's verb in it (NCCL/RCCL/MSCCL
# ncclKernel_* / ncclDevKernel_*, c10d, DeepEP, NVSHMEM, custom all-reduce kernels).
COLLECTIVE_STARTS = ("nccl", "rccl", "msccl", "c10d::", "deep_ep::", "nvshmem", "vllm::cross_device_reduce")
COLLECTIVE_VERBS = ("allreduce", "all_reduce", "allgather", "all_gather", "reducescatter", "reduce_scatter")
COLLECTIVE_VERBS += ("alltoall", "all_to_all", "cross_device_reduce")
# Attention kernels, from the kernel names in tests/data and sample_traces (lower case, anywhere in
# the name): PyTorch flash (pytorch_flash::flash_fwd_kernel), efficient (fmha_cutlassF_*), cuDNN
# (cudnn_generated_fort_native_sdpa_*), Composable Kernel (mangled ck_tile FmhaBatchPrefill...),
# vLLM's Triton kernel_unified_attention_2d/3d and reduce_segments (which merges the 3d kernel's KV
# segments: vllm/attention/ops/triton_unified_attention.py), plus the common families' names.
ATTENTION_WORDS = ("flash_fwd", "flash_bwd", "fmha", "attn_fwd", "attn_bwd", "sdpa", "unified_attention")
ATTENTION_WORDS += ("sage_fwd", "batchprefill", "batchdecode", "paged_attention", "flex_attention")
ATTENTION_NAMES = ("reduce_segments",)
NOT_ATTENTION = ("reshape_and_cache", "store_kvcache", "fillfunctor")  # KV-cache writes, fills
# PyTorch's SDPA ops: the device work they launch is attention time whatever its kernels' names.
SDPA_OP_WORDS = ("scaled_dot_product", "_flash_attention_", "_efficient_attention_", "_cudnn_attention_")
# c10/core/DeviceType.h, as the profiler writes "Device Type" in memory events.
DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 9: "xla", 12: "xpu", 13: "mps", 15: "hpu", 19: "mtia"}
CPU_BOOKKEEPING = ("TorchDynamo Cache Lookup", "Torch-Compiled Region", "Pregraph bytecode", "AOTDispatcher")
CPU_BOOKKEEPING += (STEP_PREFIX, "## ")


def ns(value) -> int:
    """A µs number of the file (int, Decimal from raw(..., parse_float=Decimal), or text) -> int ns."""
    return int(Decimal(str(value)) * 1000)  # int() cuts toward zero: the digits past ns dropped


def events_ns(doc: dict) -> list[dict]:
    """The complete events in file order as flat dicts: i (file position), cat, name, pid, tid, ts
    and end (int ns, absolute; a negative duration read as zero), args."""
    out = []
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") != "X" or "ts" not in e:
            continue
        ts = ns(e["ts"])
        dur = max(ns(e.get("dur", 0)), 0)
        out.append(
            {
                "i": i,
                "cat": e.get("cat"),
                "name": str(e.get("name", "")),
                "pid": e.get("pid"),
                "tid": e.get("tid"),
                "ts": ts,
                "end": ts + dur,
                "args": e.get("args") or {},
            }
        )
    return out


def is_device(e: dict) -> bool:
    return e["cat"] in GPU_CATS


def device_of(e: dict):
    return e["args"].get("device", e["pid"])


def stream_of(e: dict):
    return e["args"].get("stream", e["tid"])


def launches(events: list[dict]) -> dict:
    """correlation -> the first launch call (cuda_runtime / cuda_driver / Runtime) with it."""
    out: dict = {}
    for e in events:
        if e["cat"] in LAUNCH_CATS and "correlation" in e["args"]:
            out.setdefault(e["args"]["correlation"], e)
    return out


def step_windows(events: list[dict]) -> list[dict]:
    """The CPU-side ProfilerStep#N spans in start order (the first event of each number), each a dict:
    name, step (N), start, end (as written), held (start + held extent), overflowed, stop (the end
    every number is measured to: held when overflowed, else end), implicit. A trace without
    ProfilerStep has one implicit step over the whole trace (every event in it).

    Held extent: the last end among the other events that start inside [start, end) on any lane and
    the device events whose launch starts inside it, minus start. Overflowed: the step ends after
    every other event of the trace ends and lasts more than twice its held extent."""
    marks: dict[int, dict] = {}
    for e in events:
        rest = e["name"][len(STEP_PREFIX) :]
        if e["name"].startswith(STEP_PREFIX) and rest.isdigit() and e["cat"] != "gpu_user_annotation":
            marks.setdefault(int(rest), e)
    if not marks:
        start = min(e["ts"] for e in events)
        stop = max(e["end"] for e in events)
        return [
            {
                "name": IMPLICIT_STEP,
                "step": 0,
                "start": start,
                "end": stop,
                "held": stop,
                "overflowed": False,
                "stop": stop,
                "implicit": True,
            }
        ]
    launch_of = launches(events)
    out = []
    for number, mark in sorted(marks.items(), key=lambda kv: (kv[1]["ts"], kv[0])):
        start, end = mark["ts"], mark["end"]
        held, last_other = start, None
        for e in events:
            if e is mark:
                continue
            last_other = e["end"] if last_other is None else max(last_other, e["end"])
            inside = start <= e["ts"] < end
            if not inside and is_device(e):
                launch = launch_of.get(e["args"].get("correlation"))
                inside = launch is not None and start <= launch["ts"] < end
            if inside:
                held = max(held, e["end"])
        overflowed = (last_other is None or end > last_other) and end - start > 2 * (held - start)
        out.append(
            {
                "name": mark["name"],
                "step": number,
                "start": start,
                "end": end,
                "held": held,
                "overflowed": overflowed,
                "stop": held if overflowed else end,
                "implicit": False,
            }
        )
    return out


def _window_at(windows: list[dict], ts: int) -> dict | None:
    for w in windows:
        if w["start"] <= ts < w["stop"]:
            return w
    return None


def step_device_work(events: list[dict], windows: list[dict]) -> dict[str, list[dict]]:
    """step name -> its device events (kernel, gpu_memcpy, gpu_memset): those whose launch call starts
    inside the step's measured span [start, stop); in the implicit step, every device event."""
    out: dict[str, list[dict]] = {w["name"]: [] for w in windows}
    launch_of = launches(events)
    for e in events:
        if not is_device(e):
            continue
        if windows[0]["implicit"]:
            out[windows[0]["name"]].append(e)
            continue
        launch = launch_of.get(e["args"].get("correlation"))
        w = _window_at(windows, launch["ts"]) if launch is not None else None
        if w is not None:
            out[w["name"]].append(e)
    return out


def merged(intervals: list[tuple[int, int]]) -> list[list[int]]:
    """Closed intervals [a, b] merged where they touch or overlap, in time order (a zero-length one is
    a point of work: it counts for a device's span and splits a gap)."""
    out: list[list[int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def is_collective(name: str) -> bool:
    """A collective kernel: its function name (no 'void ', template or parameters) starts like one or
    holds a collective's verb; case-insensitive."""
    low = name.lower()
    if low.startswith("void "):
        low = low[5:]
    for stop in ("<", "("):
        if stop in low[1:]:
            low = low[: low.index(stop, 1)]
    return low.startswith(COLLECTIVE_STARTS) or any(verb in low for verb in COLLECTIVE_VERBS)


def is_kv_cache_write(name: str) -> bool:
    low = name.lower()
    return "reshape_and_cache" in low or "store_kvcache" in low


def is_attention_kernel(name: str) -> bool:
    low = name.lower()
    if any(word in low for word in NOT_ATTENTION):
        return False
    return low in ATTENTION_NAMES or any(word in low for word in ATTENTION_WORDS)


def device_times(work: list[dict]) -> dict:
    """device -> {busy, span, gap, comm} (ns) for one step's device work: busy = union of the events'
    [ts, end]; span = first start to last end; gap = the longest stretch between the merged
    intervals (0 if none); comm = union of the collective kernels' intervals."""
    per: dict = defaultdict(list)
    comm: dict = defaultdict(list)
    for e in work:
        per[device_of(e)].append((e["ts"], e["end"]))
        if GPU_CATS[e["cat"]] == "kernel" and is_collective(e["name"]):
            comm[device_of(e)].append((e["ts"], e["end"]))
    out = {}
    for dev, intervals in per.items():
        parts = merged(intervals)
        gaps = [parts[k + 1][0] - parts[k][1] for k in range(len(parts) - 1)]
        out[dev] = {
            "busy": sum(b - a for a, b in parts),
            "span": parts[-1][1] - parts[0][0],
            "gap": max(gaps, default=0),
            "comm": sum(b - a for a, b in merged(comm[dev])),
        }
    return out


def cpu_busy(events: list[dict], window: dict) -> int:
    """A CPU-only trace's busy time in a step: the union of its cpu_ops (not profiler or torch.compile
    bookkeeping) that start inside the step's measured span."""
    spans = [
        (e["ts"], e["end"])
        for e in events
        if e["cat"] in ("cpu_op", "Operator")
        and not e["name"].startswith(CPU_BOOKKEEPING)
        and (window["implicit"] or window["start"] <= e["ts"] < window["stop"])
    ]
    return sum(b - a for a, b in merged(spans))


def overlaps(events: list[dict]) -> int:
    """Device events that start more than OVERLAP_TOLERANCE_NS before the latest end of the earlier
    ones on their (device, stream), each lane sorted by (ts, file order)."""
    lanes: dict = defaultdict(list)
    for e in events:
        if is_device(e):
            lanes[(device_of(e), stream_of(e))].append((e["ts"], e["i"], e["end"]))
    count = 0
    for lane in lanes.values():
        latest = None
        for ts, _, end in sorted(lane):
            if latest is not None and ts < latest - OVERLAP_TOLERANCE_NS:
                count += 1
            latest = end if latest is None else max(latest, end)
    return count


def _is_sdpa_op(e: dict) -> bool:
    return (
        e["cat"] in ("cpu_op", "Operator")
        and e["name"].startswith("aten::")
        and any(w in e["name"] for w in SDPA_OP_WORDS)
    )


def _holds(outer: dict, inner: dict) -> bool:
    """outer and inner on one thread, inner starting inside outer."""
    same = (str(outer["pid"]), str(outer["tid"])) == (str(inner["pid"]), str(inner["tid"]))
    return outer is not inner and same and outer["ts"] <= inner["ts"] < outer["end"]


def attention_time(events: list[dict]) -> int:
    """The trace's attention time (ns). With device events: the summed durations of the attention
    kernels (wherever launched), and of the math path: every device event (but a KV-cache write) of
    an SDPA call that launched no attention kernel. A call is an SDPA op that holds no other SDPA op;
    what it launched: the device events whose launch starts inside it on its thread. What an SDPA call
    launches beside its attention kernel (cuDNN's memset, a fill of the output) is not attention.
    CPU-only: the summed spans of the SDPA calls and of the outermost compiled regions (cpu_op
    "Torch-Compiled Region ...") inside the collectors' "attention::flex" marks: a compiled
    FlexAttention call on the CPU runs a C++ template kernel that records no name of its own; the
    mark also holds the block mask's making, which is not the call."""
    ops = [e for e in events if _is_sdpa_op(e) and e["end"] > e["ts"]]
    calls = [op for op in ops if not any(_holds(op, o) for o in ops)]
    device = [e for e in events if is_device(e)]
    if not device:
        marks = [e for e in events if e["cat"] == "user_annotation" and e["name"] == "attention::flex"]
        cpu = [e for e in events if e["cat"] == "cpu_op" and e["name"].startswith("Torch-Compiled Region")]
        for mark in marks:
            inside = [e for e in cpu if _holds(mark, e)]
            calls += [e for e in inside if not any(_holds(o, e) for o in inside)]
        return sum(op["end"] - op["ts"] for op in calls)
    launch_of = launches(events)
    total = 0
    by_call: dict[int, list[dict]] = defaultdict(list)
    for e in device:
        if GPU_CATS[e["cat"]] == "kernel" and is_attention_kernel(e["name"]):
            total += e["end"] - e["ts"]
            continue
        launch = launch_of.get(e["args"].get("correlation"))
        owner = next((op for op in calls if launch is not None and _holds(op, launch)), None)
        if owner is not None:
            by_call[owner["i"]].append(e)
    launched_attention = set()
    for e in device:
        launch = launch_of.get(e["args"].get("correlation"))
        if launch is not None and GPU_CATS[e["cat"]] == "kernel" and is_attention_kernel(e["name"]):
            launched_attention |= {op["i"] for op in calls if _holds(op, launch)}
    for call, work in by_call.items():
        if call not in launched_attention:
            total += sum(e["end"] - e["ts"] for e in work if not is_kv_cache_write(e["name"]))
    return total


def memory_label(device_type, device_id) -> str:
    kind = DEVICE_TYPES.get(device_type, f"device type {device_type}")
    return kind if device_id is None or device_id < 0 else f"{kind}:{device_id}"


def _innermost_op(ops: list[dict], ts: int) -> str | None:
    """The innermost cpu_op of a lane (sorted by ts, -duration, file order) that holds ts."""
    name = None
    for op in ops:
        if op["ts"] > ts:
            break
        if op["end"] > ts:
            name = op["name"]
    return name


def memory(doc: dict, events: list[dict], windows: list[dict]) -> dict:
    """The summary's memory block read from the "[memory]" instant events: recorded, events, device (the
    accelerator with the highest whole-trace peak of Total Allocated, else the CPU), its peak
    (peak_allocated_bytes, peak_ts_ns from the first complete event's start, peak_op: the innermost
    cpu_op of the same thread holding the first event at the peak, peak_step), added_bytes (the peak
    step's), totals_recorded, per_step (per step and device: peak, start = the first event's Total
    Allocated minus its Bytes, added = peak - start, peak_ts_ns, peak_op, allocations = Bytes > 0)."""
    origin = min(e["ts"] for e in events)
    points = []
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") in ("i", "I") and e.get("name") == "[memory]" and "ts" in e:
            a = e.get("args") or {}
            points.append(
                {
                    "ts": ns(e["ts"]) - origin,
                    "i": i,
                    "lane": (str(e.get("pid")), str(e.get("tid"))),
                    "dev": (a.get("Device Type"), a.get("Device Id")),
                    "bytes": a.get("Bytes"),
                    "total": a.get("Total Allocated"),
                }
            )
    points.sort(key=lambda p: (p["ts"], p["i"]))
    flag = doc.get("profile_memory")
    block = {
        "recorded": bool(points) or (type(flag) in (int, bool) and flag == 1),
        "events": len(points),
        "device": None,
        "peak_allocated_bytes": None,
        "peak_op": None,
        "peak_step": None,
        "peak_ts_ns": None,
        "added_bytes": None,
        "totals_recorded": any(p["total"] is not None for p in points),
        "per_step": [],
    }
    if not points:
        return block
    lanes: dict = defaultdict(list)
    for e in events:
        if e["cat"] in ("cpu_op", "Operator") and e["end"] > e["ts"]:
            lanes[(str(e["pid"]), str(e["tid"]))].append(e)
    for ops in lanes.values():
        ops.sort(key=lambda e: (e["ts"], -(e["end"] - e["ts"]), e["i"]))
    for p in points:
        p["op"] = _innermost_op(lanes.get(p["lane"], []), p["ts"] + origin)
        w = _window_at([w for w in windows if not w["implicit"]], p["ts"] + origin)
        p["step"] = w["step"] if w else None

    def peak_of(group: list[dict]) -> dict:
        totals = [p["total"] for p in group if p["total"] is not None]
        top = max(totals) if totals else None
        first = next((p for p in group if top is not None and p["total"] == top), None)
        return {"peak": top, "at": first}

    devices: dict = defaultdict(list)
    for p in points:
        devices[p["dev"]].append(p)
    peaks = {dev: peak_of(group) for dev, group in devices.items()}
    known = [dev for dev in peaks if peaks[dev]["peak"] is not None]
    accel = [dev for dev in known if dev[0] != 0]
    pool = accel or known or list(peaks)
    head = sorted(pool, key=lambda d: (-(peaks[d]["peak"] or 0), d[0], d[1]))[0]
    at = peaks[head]["at"]
    block.update(
        device=memory_label(*head),
        peak_allocated_bytes=peaks[head]["peak"],
        peak_op=at["op"] if at else None,
        peak_step=at["step"] if at else None,
        peak_ts_ns=at["ts"] if at else None,
    )
    per: dict = defaultdict(list)
    for p in points:
        if p["step"] is not None:
            per[(p["step"], p["dev"])].append(p)
    for (step, dev), group in sorted(per.items(), key=lambda kv: (kv[0][0], kv[0][1][0], kv[0][1][1])):
        found = peak_of(group)
        first = group[0]
        start = first["total"] - first["bytes"] if None not in (first["total"], first["bytes"]) else None
        added = found["peak"] - start if None not in (found["peak"], start) else None
        block["per_step"].append(
            {
                "step": step,
                "device": memory_label(*dev),
                "peak_allocated_bytes": found["peak"],
                "start_allocated_bytes": start,
                "added_bytes": added,
                "peak_ts_ns": found["at"]["ts"] if found["at"] else None,
                "peak_op": found["at"]["op"] if found["at"] else None,
                "allocations": sum(1 for p in group if (p["bytes"] or 0) > 0),
            }
        )
        if at is not None and step == at["step"] and dev == head:
            block["added_bytes"] = added
    return block


@functools.lru_cache(maxsize=None)
def facts(path: Path) -> dict:
    """Everything the summary checks below need from one trace file, read once: gpu (it has device
    events), windows (step_windows), per_step (step name -> counts per device category, work (the
    number of device events), work_ns (their summed durations), comm_ns and attention_ns (of its
    collective and attention kernels), devices (device_times), busy_ns (the busiest device's busy
    time; on a CPU-only trace cpu_busy)), overlaps, memory and attention_ns (attention_time)."""
    doc = raw(path, parse_float=Decimal)
    events = events_ns(doc)
    windows = step_windows(events)
    work = step_device_work(events, windows)
    gpu = any(is_device(e) for e in events)
    per_step = {}
    for w in windows:
        mine = work[w["name"]]
        kernels = [e for e in mine if GPU_CATS[e["cat"]] == "kernel"]
        devices = device_times(mine)
        per_step[w["name"]] = {
            "counts": Counter(GPU_CATS[e["cat"]] for e in mine),
            "work": len(mine),
            "work_ns": sum(e["end"] - e["ts"] for e in mine),
            "comm_ns": sum(e["end"] - e["ts"] for e in kernels if is_collective(e["name"])),
            "attention_ns": sum(e["end"] - e["ts"] for e in kernels if is_attention_kernel(e["name"])),
            "devices": devices,
            "busy_ns": max((t["busy"] for t in devices.values()), default=0) if gpu else cpu_busy(events, w),
        }
    return {
        "gpu": gpu,
        "windows": windows,
        "per_step": per_step,
        "overlaps": overlaps(events),
        "memory": memory(doc, events, windows),
        "attention_ns": attention_time(events),
    }


def _mismatch(field: str, got, want) -> list[str]:
    return [] if got == want else [f"{field}: summary {got!r}, oracle {want!r}"]


def _time_mismatch(field: str, got_us, want_ns: int) -> list[str]:
    """The summary's µs float of an int ns count against the oracle's ns."""
    same = got_us is not None and abs(got_us * 1000 - want_ns) <= 0.5
    return [] if same else [f"{field}: summary {got_us!r}, oracle {want_ns / 1000.0!r}"]


def _finding(summary: dict, check: str) -> dict | None:
    return next((f for f in summary["health"] if f["check"] == check), None)


def idle_gap_steps(found: dict) -> list[int]:
    """Steps where a device's longest idle gap is over half its device span (idle_gap)."""
    return [
        w["step"]
        for w in found["windows"]
        if any(2 * t["gap"] > t["span"] for t in found["per_step"][w["name"]]["devices"].values())
    ]


def comm_dominated_steps(found: dict) -> list[int]:
    """Steps where collectives are over half of a device's busy time (comm_dominated)."""
    return [
        w["step"]
        for w in found["windows"]
        if any(2 * t["comm"] > t["busy"] for t in found["per_step"][w["name"]]["devices"].values())
    ]


def step_disagreements(summary: dict, found: dict) -> list[str]:
    """steps: names in order, dur_us (the measured span), busy_us, and on GPU traces the counts of
    kernel, gpu_memcpy, gpu_memset and work."""
    steps, windows = summary["steps"], found["windows"]
    bad = _mismatch("steps[].name", [s["name"] for s in steps], [w["name"] for w in windows])
    for s, w in zip(steps, windows):
        where, mine = f"steps[{s['name']}]", found["per_step"][w["name"]]
        bad += _time_mismatch(f"{where}.dur_us", s["dur_us"], w["stop"] - w["start"])
        bad += _time_mismatch(f"{where}.busy_us", s["busy_us"], mine["busy_ns"])
        if found["gpu"]:
            for key in ("kernel", "gpu_memcpy", "gpu_memset"):
                bad += _mismatch(f"{where}.{key}", s[key], mine["counts"][key])
            bad += _mismatch(f"{where}.work", s["work"], mine["work"])
    return bad


def health_disagreements(summary: dict, found: dict) -> list[str]:
    """health: the counts of overlapping_kernels, idle_gap and comm_dominated (no finding when the
    oracle counts 0), and a duration_overflow finding for every overflowed step."""
    want = {
        "overlapping_kernels": found["overlaps"],
        "idle_gap": len(idle_gap_steps(found)),
        "comm_dominated": len(comm_dominated_steps(found)),
    }
    bad = []
    for check, count in want.items():
        got = _finding(summary, check)
        bad += _mismatch(f"health[{check}].count", got["count"] if got else 0, count)
    overflowed = [w["name"] for w in found["windows"] if w["overflowed"]]
    got = _finding(summary, "duration_overflow")
    if overflowed and (got is None or got["count"] < len(overflowed)):
        bad.append(f"health[duration_overflow]: summary {got!r}, oracle overflowed steps {overflowed}")
    return bad


def family_disagreements(summary: dict, found: dict) -> list[str]:
    """steps[].top_families: every share in 0..1; on GPU traces each family's us / share is the step's
    summed device-work time (the families' times add up to it), and the communication and fused
    attention families' us are the collective and attention kernels' summed durations (when not
    listed, the listed three each took at least as long)."""
    bad = []
    for s, w in zip(summary["steps"], found["windows"]):
        where, mine = f"steps[{s['name']}].top_families", found["per_step"][w["name"]]
        listed = {f["family"]: f for f in s["top_families"]}
        for f in s["top_families"]:
            if not 0 <= f["share"] <= 1:
                bad.append(f"{where}[{f['family']}].share: summary {f['share']!r}, oracle 0..1")
            total = mine["work_ns"]
            if found["gpu"] and f["share"] > 0 and abs(f["us"] * 1000 / f["share"] - total) > 1e-6 * max(total, 1):
                bad.append(
                    f"{where}[{f['family']}] us/share: summary {f['us'] / f['share']!r}, oracle {total / 1000!r}"
                )
        if not found["gpu"]:
            continue
        for family, ns_ in (("communication", mine["comm_ns"]), ("fused attention", mine["attention_ns"])):
            if family in listed:
                bad += _time_mismatch(f"{where}[{family}].us", listed[family]["us"], ns_)
            elif ns_ and not (len(listed) >= 3 and min(f["us"] for f in listed.values()) * 1000 >= ns_):
                bad.append(f"{where}: summary lists no {family!r}, oracle {ns_ / 1000!r} µs")
    return bad


def memory_disagreements(summary: dict, found: dict) -> list[str]:
    """The whole memory block (see memory)."""
    bad = []
    for key, want in found["memory"].items():
        bad += _mismatch(f"memory.{key}", summary["memory"].get(key), want)
    return bad


def attention_disagreements(summary: dict, found: dict) -> list[str]:
    """efficiency.attention_device_ns (attention_time) and measured_share in 0..1."""
    eff = summary["efficiency"]
    bad = _mismatch("efficiency.attention_device_ns", eff["attention_device_ns"], found["attention_ns"])
    if eff["measured_share"] is not None and not 0 <= eff["measured_share"] <= 1:
        bad.append(f"efficiency.measured_share: summary {eff['measured_share']!r}, oracle 0..1")
    return bad


CHECKS = {
    "steps": step_disagreements,
    "health": health_disagreements,
    "families": family_disagreements,
    "memory": memory_disagreements,
    "attention": attention_disagreements,
}


def summary_disagreements(summary: dict, path: Path) -> list[str]:
    """Every field of one trace's `attnscope summary --json` document (one element of its list) that
    the oracles above cover and that disagrees with them, one line each ('field: summary X, oracle
    Y'); [] when all agree. The golden summaries are held to this before they are written and when
    they are read."""
    found = facts(Path(path).resolve())
    return [line for check in CHECKS.values() for line in check(summary, found)]
