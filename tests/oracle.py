"""Independent oracles: facts read from trace files with nothing but the json module.

Deliberately naive (plain loops over dicts) and sharing no code with dashboard.engine, so that a
test compares the engine against a second, obviously-correct reading of the same bytes.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
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
