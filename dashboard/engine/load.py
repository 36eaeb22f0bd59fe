"""Bytes or a path -> Trace.

The fast path decodes the trace with msgspec into small typed structs that keep only the fields
the analyses need (no dict per event), then builds polars columns. Files cut off mid-write are
salvaged event by event; anything else that is not a trace raises TraceError with one line that
names the file and the problem.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np
import polars as pl

from dashboard.engine.model import GPU_CATEGORIES, LAUNCH_CATEGORIES, Trace
from dashboard.engine.steps import assign_steps, find_steps, nesting

GZIP_MAGIC = b"\x1f\x8b"

# Lower-cased category as written -> normalized category. Unknown categories are kept as written.
CATEGORY_ALIASES: dict[str, str] = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "python_function": "python_function",
    "kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy",
    "memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset",
    "memset": "gpu_memset",
    "cuda_runtime": "cuda_runtime",
    "runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver",
    "driver": "cuda_driver",
    "ac2g": "ac2g",
    "async_cpu_to_gpu": "ac2g",
    "async": "ac2g",
    "fwdbwd": "fwdbwd",
    "trace": "Trace",
    "overhead": "overhead",
    "cpu_instant_event": "cpu_instant_event",
    "cuda_sync": "cuda_sync",
}

_MEMCPY_KIND = re.compile(r"Memcpy\s+(\w+)")


class TraceError(Exception):
    """A file that cannot be read as a trace. str() is one line naming the file and the problem."""


class _Args(msgspec.Struct, gc=False):
    correlation: Union[int, str, None] = None
    external_id: Union[int, str, None] = msgspec.field(default=None, name="External id")
    external_id_legacy: Union[int, str, None] = msgspec.field(default=None, name="external id")
    stream: Union[int, str, None] = None
    device: Union[int, str, None] = None
    bytes: Union[int, str, None] = None
    size: Union[int, str, None] = None  # ROCm hipMemcpy* calls give the size here, as a string
    kind: Union[str, int, None] = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: Union[str, int, float, None] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    # Raw number text: epoch µs with ns fractions (1.6e15) do not survive a trip through float64.
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()
    id: Union[int, str, None] = None
    args: Union[_Args, None] = None


_decode_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_events = msgspec.json.Decoder(list[_Event]).decode


def read_source(source: Union[str, os.PathLike, bytes], name: str | None = None) -> tuple[bytes, str]:
    """Return the JSON bytes of a trace (gunzipped when the content starts with gzip's magic) and
    a display name. A path or raw bytes (an upload) are both accepted."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, label = bytes(source), name or "<upload>"
    else:
        path = Path(source)
        label = name or path.name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise TraceError(f"{label}: no such file") from None
        except IsADirectoryError:
            raise TraceError(f"{label}: is a directory, not a trace file") from None
        except OSError as exc:
            raise TraceError(f"{label}: cannot read ({exc.strerror or exc})") from None
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data, label)
    return data, label


def _gunzip(data: bytes, label: str) -> bytes:
    try:
        return gzip.decompress(data)
    except EOFError:
        raise TraceError(f"{label}: gzip stream is truncated (the file was cut off after {len(data):,} bytes)") from None
    except (OSError, zlib.error) as exc:
        raise TraceError(f"{label}: not a valid gzip file ({exc})") from None


def load_trace(source: Union[str, os.PathLike, bytes], name: str | None = None) -> Trace:
    """Load a torch.profiler Chrome trace (.json or .json.gz, any file name) into a Trace."""
    data, label = read_source(source, name)
    if not data.strip():
        raise TraceError(f"{label}: the file is empty")
    warnings: list[str] = []
    meta, events = _decode(data, label, warnings)
    trace = build_trace(events, meta, label, warnings)
    trace.size_bytes = len(data)
    return trace


def _decode(data: bytes, label: str, warnings: list[str]) -> tuple[dict[str, Any], list[_Event]]:
    """Split the document into top-level metadata and typed events; salvage a cut-off file."""
    first = data.lstrip()[:1]
    if first not in (b"{", b"["):
        raise TraceError(f"{label}: not JSON (it starts with {data.lstrip()[:16]!r})")
    try:
        if first == b"[":  # the bare "JSON array" flavour of the Chrome trace format
            return {}, _decode_events(data)
        top = _decode_top(data)
    except msgspec.ValidationError as exc:
        return _decode_lenient(data, label, warnings, exc)
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            return _salvage(data, label, warnings)
        raise TraceError(f"{label}: not valid JSON ({exc})") from None
    raw_events = top.pop("traceEvents", None)
    if raw_events is None:
        keys = ", ".join(list(top)[:5]) or "none"
        raise TraceError(f"{label}: JSON but not a trace: no traceEvents key (top-level keys: {keys})")
    try:
        events = _decode_events(raw_events)
    except msgspec.ValidationError as exc:
        return _decode_lenient(data, label, warnings, exc)
    meta = {key: _decode_meta(raw) for key, raw in top.items()}
    return meta, events


def _decode_meta(raw: msgspec.Raw) -> Any:
    return msgspec.json.decode(raw)


def _decode_lenient(data: bytes, label: str, warnings: list[str], exc: Exception) -> tuple[dict[str, Any], list[_Event]]:
    """Slow path for traces whose fields have unexpected types: decode generically, coerce the
    fields we use, and drop what still cannot be read (with a warning)."""
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as err:
        if "truncated" in str(err):
            return _salvage(data, label, warnings)
        raise TraceError(f"{label}: not valid JSON ({err})") from None
    if isinstance(doc, list):
        raw_events, meta = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        raw_events = doc.pop("traceEvents")
        meta = doc
    else:
        raise TraceError(f"{label}: JSON but not a trace: traceEvents is not a list")
    return meta, _coerce_events(raw_events, label, warnings, note=f"unexpected field types ({exc})")


def _coerce_events(raw_events: list[Any], label: str, warnings: list[str], note: str = "") -> list[_Event]:
    decode_one = msgspec.json.Decoder(_Event).decode
    kept: list[_Event] = []
    dropped = 0
    for raw in raw_events:
        if not isinstance(raw, dict):
            dropped += 1
            continue
        try:
            kept.append(decode_one(msgspec.json.encode(raw)))
        except msgspec.ValidationError:
            dropped += 1
    if dropped:
        warnings.append(f"{label}: {dropped:,} events could not be read and were skipped ({note})")
    return kept


def _salvage(data: bytes, label: str, warnings: list[str]) -> tuple[dict[str, Any], list[_Event]]:
    """A trace cut off mid-write: keep the metadata before traceEvents and every complete event."""
    text = data.decode("utf-8", errors="replace")
    meta: dict[str, Any] = {}
    if text.lstrip().startswith("["):
        start = text.index("[") + 1
    else:
        match = re.search(r'"traceEvents"\s*:\s*\[', text)
        if match is None:
            raise TraceError(f"{label}: not a trace: the JSON is cut off before any traceEvents array")
        start = match.end()
        head = text[: match.start()].strip().rstrip(",")
        if head.startswith("{") and head != "{":
            try:
                meta = json.loads(head + "}")
            except json.JSONDecodeError:
                meta = {}
    decoder = json.JSONDecoder()
    pos, end = start, len(text)
    raw_events: list[Any] = []
    ws = re.compile(r"[\s,]*")
    while True:
        pos = ws.match(text, pos).end()
        if pos >= end or text[pos] == "]":
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        raw_events.append(obj)
    if not any(isinstance(e, dict) for e in raw_events):
        raise TraceError(f"{label}: not a trace: the JSON is cut off and holds no complete trace event")
    lost = len(data) - len(text[:pos].encode("utf-8", errors="replace"))
    events = _coerce_events(raw_events, label, warnings, note="while salvaging")
    warnings.append(
        f"{label}: the file is cut off (the profiler was probably killed mid-write); "
        f"salvaged {len(events):,} complete events, lost the last {lost:,} bytes "
        f"({100.0 * lost / max(len(data), 1):.1f}% of the file)"
    )
    return meta, events


def _int_or_none(value: Any) -> int | None:
    """Ints as they are; numeric strings ("2560", "0x0") parsed; anything else None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    try:
        return int(str(value), 0)
    except ValueError:
        return None


def _raw_text(raw: msgspec.Raw) -> str | None:
    return bytes(raw).decode() if len(raw) else None


def _us_text_to_ns(texts: list[bytes]) -> pl.Series:
    """JSON number texts in µs (ints, or decimals with ns fractions; quoted numbers too) -> exact
    int64 ns. Unreadable values become null."""
    col = pl.Series("t", texts, dtype=pl.Binary).cast(pl.String).str.strip_chars('" ')
    plain = col.str.contains(r"^-?\d+(\.\d*)?$")
    parts = col.str.split_exact(".", 1)
    whole = parts.struct.field("field_0").cast(pl.Int64, strict=False)
    frac = parts.struct.field("field_1").fill_null("").str.slice(0, 3).str.pad_end(3, "0").cast(pl.Int64, strict=False)
    sign = pl.Series(np.where(col.str.starts_with("-").to_numpy(), -1, 1))
    exact = whole * 1000 + sign * frac
    # anything else (exponents like 1.5e3) goes through float
    approx = (col.cast(pl.Float64, strict=False) * 1000).round(0).cast(pl.Int64, strict=False)
    return pl.select(pl.when(plain).then(exact).otherwise(approx)).to_series().alias("ns")


def build_trace(events: list[_Event], meta: dict[str, Any], label: str, warnings: list[str]) -> Trace:
    """Typed events -> the Trace's polars tables (events, flows, steps)."""
    complete = [e for e in events if e.ph == "X" and len(e.ts)]
    flows_raw = [e for e in events if e.ph in ("s", "f", "t") and len(e.ts)]
    if not complete:
        if not events:
            raise TraceError(f"{label}: JSON but not a trace: traceEvents is empty")
        raise TraceError(f"{label}: the trace has {len(events):,} events but no complete (\"X\") events to analyse")

    ts_ns = _us_text_to_ns([bytes(e.ts) for e in complete])
    if ts_ns.null_count():
        warnings.append(f"{label}: {ts_ns.null_count():,} events with an unreadable timestamp were skipped")
        keep = ts_ns.is_not_null().to_list()
        complete = [e for e, ok in zip(complete, keep) if ok]
        ts_ns = ts_ns.drop_nulls()
    origin_ns = int(ts_ns.min())
    dur_ns = _us_text_to_ns([bytes(e.dur) for e in complete]).fill_null(0)
    args = [e.args for e in complete]
    no_args = _Args()
    args = [a if a is not None else no_args for a in args]

    cats = [(e.cat or "").lower() for e in complete]
    cat_norm = [CATEGORY_ALIASES.get(c, raw or "") for c, raw in zip(cats, (e.cat for e in complete))]
    names = [e.name if isinstance(e.name, str) else ("" if e.name is None else str(e.name)) for e in complete]

    frame = pl.DataFrame(
        {
            "cat": cat_norm,
            "name": names,
            "pid": [str(e.pid) for e in complete],
            "tid": [str(e.tid) for e in complete],
            "ts_ns": ts_ns - origin_ns,
            "dur_ns": dur_ns,
            "stream": [_int_or_none(a.stream) for a in args],
            "device": [_int_or_none(a.device) for a in args],
            "correlation": [_int_or_none(a.correlation) for a in args],
            "external_id": [
                _int_or_none(a.external_id if a.external_id is not None else a.external_id_legacy) for a in args
            ],
            "bytes": [_int_or_none(a.bytes if a.bytes is not None else a.size) for a in args],
            "kind_arg": [a.kind if isinstance(a.kind, str) else None for a in args],
            "input_dims": [_raw_text(a.input_dims) for a in args],
            "input_types": [_raw_text(a.input_types) for a in args],
        },
        schema_overrides={
            "stream": pl.Int64,
            "device": pl.Int64,
            "correlation": pl.Int64,
            "external_id": pl.Int64,
            "bytes": pl.Int64,
            "kind_arg": pl.String,
            "input_dims": pl.String,
            "input_types": pl.String,
        },
    )
    del complete, args
    frame = _normalize(frame)
    frame = nesting(frame)
    frame = _link_launches(frame)
    steps = find_steps(frame)
    frame = assign_steps(frame, steps)

    flows = pl.DataFrame(
        {
            "id": [str(e.id) for e in flows_raw],
            "cat": [CATEGORY_ALIASES.get((e.cat or "").lower(), e.cat or "") for e in flows_raw],
            "name": [e.name if isinstance(e.name, str) else "" for e in flows_raw],
            "ph": [e.ph for e in flows_raw],
            "pid": [str(e.pid) for e in flows_raw],
            "tid": [str(e.tid) for e in flows_raw],
            "ts_ns": _us_text_to_ns([bytes(e.ts) for e in flows_raw]).fill_null(origin_ns) - origin_ns,
        },
        schema_overrides={"id": pl.String, "cat": pl.Categorical, "name": pl.String, "ph": pl.String, "pid": pl.String, "tid": pl.String},
    )
    meta = dict(meta)
    meta.setdefault("_origin_ns", origin_ns)
    return Trace(source=label, events=frame, flows=flows, steps=steps, meta=meta, warnings=warnings)


def _normalize(frame: pl.DataFrame) -> pl.DataFrame:
    """Fill GPU stream/device from legacy tids ("stream 7") and pids, and the memcpy kind."""
    gpu = pl.col("cat").is_in(GPU_CATEGORIES)
    stream_from_tid = pl.col("tid").str.extract(r"(\d+)$", 1).cast(pl.Int64, strict=False)
    frame = frame.with_columns(
        pl.when(gpu & pl.col("stream").is_null()).then(stream_from_tid).otherwise(pl.col("stream")).alias("stream"),
        pl.when(gpu & pl.col("device").is_null())
        .then(pl.col("pid").cast(pl.Int64, strict=False))
        .otherwise(pl.col("device"))
        .alias("device"),
        pl.when(pl.col("cat") == "gpu_memcpy")
        .then(pl.coalesce(pl.col("name").str.extract(_MEMCPY_KIND.pattern, 1), pl.col("kind_arg")))
        .otherwise(None)
        .alias("kind"),
    ).drop("kind_arg")
    frame = frame.sort(["pid", "tid", "ts_ns", "dur_ns"], descending=[False, False, False, True])
    return frame.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("id"),
        pl.col("cat").cast(pl.Categorical),
        pl.col("name").cast(pl.Categorical),
    ).select(["id", *[c for c in frame.columns if c != "id"]])


def _link_launches(frame: pl.DataFrame) -> pl.DataFrame:
    """launch: for each GPU event, the id of the runtime/driver call with the same correlation.
    ROCm memcpy events carry no byte count; take it from their hipMemcpy* launch."""
    launches = (
        frame.filter(pl.col("cat").is_in(LAUNCH_CATEGORIES) & pl.col("correlation").is_not_null())
        .group_by("correlation")
        .agg(pl.col("id").first().alias("launch"), pl.col("bytes").first().alias("launch_bytes"))
    )
    gpu = pl.col("cat").is_in(GPU_CATEGORIES)
    frame = frame.join(launches, on="correlation", how="left", maintain_order="left")
    return frame.with_columns(
        pl.when(gpu).then(pl.col("launch")).otherwise(None).alias("launch"),
        pl.when(gpu).then(pl.coalesce("bytes", "launch_bytes")).otherwise(pl.col("bytes")).alias("bytes"),
    ).drop("launch_bytes")
