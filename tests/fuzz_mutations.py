"""Small slices of the real traces in tests/data and the mutations the fuzz suite applies to them.

A fuzz case is plain data (a Case: which slice, which mutations, what happens to the bytes, gzip
or not), so that a failure hypothesis finds can be kept in tests/test_fuzz.py as an explicit
@example that reads like the input it describes. `build(case)` turns it into file bytes.

The slices keep what the analyses join together: a window of host events from a ProfilerStep (or
an attention op), the ProfilerStep spans around it, the device events their launch calls
correlate with, the flow events of those correlations and a few metadata events, in file order,
with the trace's top-level metadata. Each is a few dozen to ~150 events, so a case loads in
milliseconds. Only the json module reads the files here (no engine code).
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from oracle import DATA

# Traces the slices come from (tests/data/SOURCES.md says where each was recorded).
TRACES = (
    "hta_a100_control.json.gz",
    "hta_mi250_rocm_minitoy.json.gz",
    "hta_triton_example.json.gz",
    "hta_v100_ns_resolution.pt.trace.json.gz",
    "kineto_legacy_resnet50_v100.pt.trace.json.gz",
    "tracelens_h100_bert_sdpa_flash.json.gz",
    "tracelens_h100_qwen_chat_sdpa_flash.json.gz",
    "tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz",
    "tracelens_vllm_decode_graph_unified_attention.json.gz",
)
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
HOST_WINDOW = 45  # host events per slice, from the anchor on
DEVICE_CAP = 45
FLOW_CAP = 40


@dataclass(frozen=True)
class Raw:
    """JSON text written verbatim (NaN, 1e400, a number with 30 digits, invalid UTF-8, deep nesting)."""

    text: bytes

    def __repr__(self) -> str:
        return f"Raw({self.text!r})"


@dataclass(frozen=True)
class Deep:
    """An array nested `depth` levels deep (written as text: no recursion to build or encode it)."""

    depth: int
    open: bytes = b"["
    close: bytes = b"]"


class Pairs(list):
    """An object written from (key, value) pairs, so that a key can repeat."""


@dataclass(frozen=True)
class Case:
    """One fuzz input.

    seed: a key of seeds() ("<trace file>@<anchor>").
    mutations: tuples applied in order to the slice's document (see MUTATORS).
    damage: what happens to the encoded bytes: None, ("cut", fraction), ("flip", ((fraction, byte), ...)),
        ("insert", fraction, bytes), ("empty",), ("text", bytes) (the whole file replaced).
    gz: 0 plain JSON, 1 gzip around it, 2 gzip around it cut at `gz_cut` of the compressed bytes.
    """

    seed: str
    mutations: tuple = ()
    damage: tuple | None = None
    gz: int = 0
    gz_cut: float = 0.5


# ---------------------------------------------------------------------------------------- seeds


def _ts(e: dict) -> float | None:
    ts = e.get("ts")
    return float(ts) if isinstance(ts, (int, float, Decimal)) else None


def _end(e: dict) -> float:
    dur = e.get("dur", 0)
    return _ts(e) + (float(dur) if isinstance(dur, (int, float, Decimal)) else 0.0)


def _slice(doc: dict, anchor: float) -> dict:
    """The events of one window from `anchor` on (see the module docstring), in file order."""
    events = doc["traceEvents"]
    complete = [
        (i, e) for i, e in enumerate(events) if isinstance(e, dict) and e.get("ph") == "X" and _ts(e) is not None
    ]
    host = [(i, e) for i, e in complete if e.get("cat") not in DEVICE_CATS]
    ops = [p for p in host if p[1].get("cat") != "python_function"]
    later = sorted((p for p in ops if _ts(p[1]) >= anchor), key=lambda p: _ts(p[1]))[:HOST_WINDOW]
    window_end = _ts(later[-1][1]) if later else anchor
    python = [p for p in host if p[1].get("cat") == "python_function" and anchor <= _ts(p[1]) <= window_end][:10]
    holding = sorted((p for p in host if _ts(p[1]) < anchor < _end(p[1])), key=lambda p: _ts(p[1]))[-8:]
    steps = [
        p
        for p in host
        if str(p[1].get("name", "")).startswith("ProfilerStep#") and _ts(p[1]) <= window_end and _end(p[1]) >= anchor
    ][:3]
    kept = {i for i, _ in later + python + holding + steps}
    corr = {
        (e.get("args") or {}).get("correlation") for i, e in complete if i in kept and isinstance(e.get("args"), dict)
    } - {None}
    device = [
        i for i, e in complete if e.get("cat") in DEVICE_CATS and (e.get("args") or {}).get("correlation") in corr
    ]
    kept.update(device[:DEVICE_CAP])
    flows = [
        i
        for i, e in enumerate(events)
        if isinstance(e, dict) and e.get("ph") in ("s", "f", "t") and e.get("id") in corr
    ]
    kept.update(flows[:FLOW_CAP])
    kept.update([i for i, e in enumerate(events) if isinstance(e, dict) and e.get("ph") == "M"][:6])
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = [events[i] for i in sorted(kept)]
    return out


LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


@lru_cache(maxsize=1)
def seeds() -> dict[str, dict]:
    """Slices of every trace in TRACES: "<trace>@step" from the first ProfilerStep's start,
    "<trace>@launch" from the first launch call (after that) whose device event is in the file,
    "<trace>@graph" from the first CUDA/HIP graph launch and "<trace>@attention" from the first
    cpu_op whose name says attention (where the trace has them)."""
    out = {}
    for name in TRACES:
        data = gzip.decompress((DATA / name).read_bytes())
        doc = json.loads(data, parse_float=Decimal)
        if isinstance(doc, list):
            doc = {"traceEvents": doc}
        complete = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X" and _ts(e) is not None]
        host = sorted((e for e in complete if e.get("cat") not in DEVICE_CATS), key=_ts)
        steps = [e for e in host if str(e.get("name", "")).startswith("ProfilerStep#")]
        first = _ts(steps[0]) if steps else _ts(host[0])
        out[f"{name}@step"] = _slice(doc, first)
        device_corr = {(e.get("args") or {}).get("correlation") for e in complete if e.get("cat") in DEVICE_CATS}
        launches = [
            e
            for e in host
            if e.get("cat") in LAUNCH_CATS
            and _ts(e) >= first
            and isinstance(e.get("args"), dict)
            and e["args"].get("correlation") in device_corr
        ]
        if launches:
            out[f"{name}@launch"] = _slice(doc, _ts(launches[0]) - 0.5)
        graphs = [e for e in host if e.get("cat") in LAUNCH_CATS and "GraphLaunch" in str(e.get("name", ""))]
        if graphs:
            out[f"{name}@graph"] = _slice(doc, _ts(graphs[0]) - 0.5)
        attention = [e for e in host if "attention" in str(e.get("name", "")).lower() and e.get("cat") == "cpu_op"]
        if attention:
            out[f"{name}@attention"] = _slice(doc, _ts(attention[0]))
    return out


def seed_names() -> tuple[str, ...]:
    return tuple(seeds())


_ENCODED: dict[int, bytes] = {}  # id of an event of a seed -> its JSON bytes (seeds() keeps the events alive)


@lru_cache(maxsize=1)
def _originals() -> frozenset[int]:
    return frozenset(id(e) for doc in seeds().values() for e in doc["traceEvents"])


# ------------------------------------------------------------------------------------ encoding


def encode(value: Any) -> bytes:
    out: list[bytes] = []
    _enc(value, out)
    return b"".join(out)


def _scalar(v: Any) -> bytes | None:
    """A scalar's (or a Raw or Deep stand-in's) bytes; None for a container."""
    if v is None:
        return b"null"
    if v is True:
        return b"true"
    if v is False:
        return b"false"
    if isinstance(v, (int, Decimal)):
        return str(v).encode()
    if isinstance(v, float):
        return json.dumps(v).encode()  # NaN, Infinity, -Infinity as Python writes them
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, Deep):
        return v.open * v.depth + v.close * v.depth
    return None


def _enc(v: Any, out: list[bytes]) -> None:
    if type(v) is dict and id(v) in _originals():  # an event no mutation touched: encoded once per run
        if id(v) not in _ENCODED:
            part: list[bytes] = []
            _enc(Pairs(v.items()), part)
            _ENCODED[id(v)] = b"".join(part)
        out.append(_ENCODED[id(v)])
    elif (scalar := _scalar(v)) is not None:
        out.append(scalar)
    elif isinstance(v, Pairs):
        out.append(b"{")
        for n, (k, item) in enumerate(v):
            if n:
                out.append(b",")
            _enc(k, out)
            out.append(b":")
            _enc(item, out)
        out.append(b"}")
    elif isinstance(v, dict):
        _enc(Pairs(v.items()), out)
    elif isinstance(v, (list, tuple)):
        out.append(b"[")
        for n, item in enumerate(v):
            if n:
                out.append(b",")
            _enc(item, out)
        out.append(b"]")
    else:
        raise TypeError(f"cannot encode {type(v)}")


# ------------------------------------------------------------------------------------ mutations

# The fields of an event the loader reads, and those of its args.
EVENT_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args")
ARG_FIELDS = (
    "correlation",
    "External id",
    "external id",
    "stream",
    "device",
    "bytes",
    "size",
    "kind",
    "Input Dims",
    "Input type",
    "Concrete Inputs",
)
FIELDS = EVENT_FIELDS + tuple(f"args.{a}" for a in ARG_FIELDS)


def _picked(events: list, picks: Any) -> list[int]:
    """Indices of the events a mutation touches: "all", ("cat", c), ("ph", p), ("name", prefix) or a tuple of ints (mod len)."""
    n = len(events)
    if n == 0:
        return []
    if picks == "all":
        return list(range(n))
    if isinstance(picks, tuple) and len(picks) == 2 and isinstance(picks[0], str):
        key, want = picks
        out = []
        for i, e in enumerate(events):
            if not isinstance(e, dict):
                continue
            got = e.get(key)
            if (key == "name" and isinstance(got, str) and got.startswith(want)) or got == want:
                out.append(i)
        return out
    return sorted({int(p) % n for p in picks})


def _holder(e: dict, path: str, create: bool) -> tuple[dict | None, str]:
    """The dict that holds `path` ("ts" or "args.correlation") and the key in it."""
    if path.startswith("args."):
        args = e.get("args")
        if not isinstance(args, dict):
            if not create:
                return None, path[5:]
            args = e["args"] = {}
        return args, path[5:]
    return e, path


def _copy_event(e: Any) -> Any:
    if isinstance(e, dict):
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in e.items()}
    return e


def _writable(events: list, i: int) -> Any:
    """Event i, copied first when it is still a seed's own event (documents share unmutated events)."""
    e = events[i]
    if type(e) is dict and id(e) in _originals():
        e = events[i] = _copy_event(e)
    return e


def m_set(doc: dict, path: str, picks: Any, value: Any) -> None:
    """Set a field (created when absent) of the picked events to `value`."""
    events = doc["traceEvents"]
    for i in _picked(events, picks):
        if isinstance(events[i], dict):
            holder, key = _holder(_writable(events, i), path, create=True)
            holder[key] = value


def m_drop(doc: dict, path: str, picks: Any) -> None:
    """Remove a field of the picked events."""
    events = doc["traceEvents"]
    for i in _picked(events, picks):
        if isinstance(events[i], dict):
            holder, key = _holder(_writable(events, i), path, create=False)
            if holder is not None:
                holder.pop(key, None)


def m_dupkey(doc: dict, path: str, picks: Any, value: Any, first: bool) -> None:
    """Write the field twice in the picked events: `value` first or last, the real value beside it."""
    events = doc["traceEvents"]
    for i in _picked(events, picks):
        if not isinstance(events[i], dict):
            continue
        e = _writable(events, i)
        holder, key = _holder(e, path, create=True)
        pairs = Pairs(holder.items())
        pairs.insert(0 if first else len(pairs), (key, value))
        if holder is e:
            events[i] = pairs
        else:
            e["args"] = pairs


def m_shuffle(doc: dict, seed: int) -> None:
    random.Random(seed).shuffle(doc["traceEvents"])


def m_duplicate(doc: dict, picks: Any) -> None:
    """Append copies of the picked events ("all": the whole list twice)."""
    events = doc["traceEvents"]
    events.extend([events[i] for i in _picked(events, picks)])


def m_remove(doc: dict, picks: Any) -> None:
    events = doc["traceEvents"]
    gone = set(_picked(events, picks))
    doc["traceEvents"] = [e for i, e in enumerate(events) if i not in gone]


def m_dangling(doc: dict, path: str, picks: Any) -> None:
    """Ids that point nowhere: correlation, External id or a flow id set to values no other event has."""
    events = doc["traceEvents"]
    for n, i in enumerate(_picked(events, picks)):
        if isinstance(events[i], dict):
            holder, key = _holder(_writable(events, i), path, create=True)
            holder[key] = 900_000_000 + n


def m_zero(doc: dict, picks: Any, same_ts: bool) -> None:
    """Zero-length spans; with same_ts, every picked event also starts at the first one's ts."""
    events = doc["traceEvents"]
    idx = [i for i in _picked(events, picks) if isinstance(events[i], dict)]
    ts = next((events[i].get("ts") for i in idx if "ts" in events[i]), 0)
    for i in idx:
        e = _writable(events, i)
        e["dur"] = 0
        if same_ts:
            e["ts"] = ts


def m_shift(doc: dict, picks: Any, by: Any) -> None:
    """Move the picked events' ts by `by` µs (huge, negative: before the trace's start)."""
    events = doc["traceEvents"]
    for i in _picked(events, picks):
        if isinstance(events[i], dict) and isinstance(events[i].get("ts"), (int, float, Decimal)):
            e = _writable(events, i)
            e["ts"] = Decimal(str(e["ts"])) + Decimal(by)


def m_meta(doc: dict, key: str, value: Any) -> None:
    """Set (or, with value Ellipsis-like "<drop>", remove) a top-level key such as deviceProperties."""
    if value == "<drop>":
        doc.pop(key, None)
    else:
        doc[key] = value


def m_top(doc: dict, kind: str) -> None:
    """The document's shape changes: doc["__top__"] replaces the whole document when encoded."""
    events = doc["traceEvents"]
    tops = {
        "array": events,  # the bare-array flavour of the Chrome trace format
        "number": 42,
        "string": "traceEvents",
        "null": None,
        "true": True,
        "array_of_numbers": [1, 2, 3],
        "array_of_arrays": [[e] for e in events[:5]],
        "events_dict": {**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": {"0": events[:1]}},
        "events_string": {"traceEvents": "[]"},
        "events_null": {"traceEvents": None},
        "events_number": {"traceEvents": 7},
        "events_scalars": {"traceEvents": [1, "x", None, True, 2.5]},
        "events_lists": {"traceEvents": [[1, 2], [], events[:1]]},
        "events_mixed": {"traceEvents": [*events[:20], 1, "x", None, [], *events[20:]]},
        "events_empty": {"traceEvents": []},
        "no_events": {k: v for k, v in doc.items() if k != "traceEvents"},
        "events_last": {**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": events},
        "events_first_meta_after": {"traceEvents": events, **{k: v for k, v in doc.items() if k != "traceEvents"}},
        "two_traceevents": Pairs([("traceEvents", events[:3]), ("traceEvents", events)]),
    }
    doc["__top__"] = tops[kind]


MUTATORS = {
    "set": m_set,
    "drop": m_drop,
    "dupkey": m_dupkey,
    "shuffle": m_shuffle,
    "duplicate": m_duplicate,
    "remove": m_remove,
    "dangling": m_dangling,
    "zero": m_zero,
    "shift": m_shift,
    "meta": m_meta,
    "top": m_top,
}


def document(case: Case) -> Any:
    """The mutated document (a fresh copy of the slice)."""
    base = seeds()[case.seed]
    doc = {k: v for k, v in base.items() if k != "traceEvents"}
    doc["traceEvents"] = list(base["traceEvents"])  # events are copied when a mutation writes to them
    for kind, *params in case.mutations:
        MUTATORS[kind](doc, *params)
        if "__top__" in doc:
            return doc["__top__"]
    return doc


def build(case: Case) -> bytes:
    """The file bytes of a case."""
    data = encode(document(case))
    damage = case.damage
    if damage is not None:
        what = damage[0]
        if what == "cut":
            data = data[: int(len(data) * damage[1])]
        elif what == "flip":
            buf = bytearray(data)
            for frac, byte in damage[1]:
                if buf:
                    buf[min(int(len(buf) * frac), len(buf) - 1)] = byte
            data = bytes(buf)
        elif what == "insert":
            at = int(len(data) * damage[1])
            data = data[:at] + damage[2] + data[at:]
        elif what == "empty":
            data = b""
        elif what == "text":
            data = damage[1]
    if case.gz:
        data = gzip.compress(data, mtime=0)
        if case.gz == 2:
            data = data[: int(len(data) * case.gz_cut)]
    return data
