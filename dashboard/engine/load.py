"""Bytes or a path -> Trace.

The fast path decodes the trace with msgspec into small typed structs that keep only the fields
the analyses need (no dict per event), then builds polars columns. A file cut off mid-write is
closed after its last whole event and read the same way (event by event only when that fails);
anything else that is not a trace raises TraceError with one line that names the file and the
problem.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Union

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

_LEADING_SPACE = re.compile(rb"\s*")
_MEMCPY_KIND = re.compile(r"Memcpy\s+(\w+)")


class TraceError(Exception):
    """A file that cannot be read as a trace. str() is one line naming the file and the problem."""


# Fields take any JSON scalar: writers disagree on ints, floats and numeric strings, and one odd
# value must not cost the event.
_Scalar = Union[int, float, str, None]


class _Args(msgspec.Struct, gc=False):
    correlation: _Scalar = None
    external_id: _Scalar = msgspec.field(default=None, name="External id")
    external_id_legacy: _Scalar = msgspec.field(default=None, name="external id")
    stream: _Scalar = None
    device: _Scalar = None
    bytes: _Scalar = None
    size: _Scalar = None  # ROCm hipMemcpy* calls give the size here, as a string
    kind: Union[str, int, None] = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: _Scalar = None
    pid: _Scalar = None
    tid: _Scalar = None
    # Raw number text: epoch µs with ns fractions (1.6e15) do not survive a trip through float64.
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()
    id: _Scalar = None
    args: Union[_Args, list, None] = None  # a list of args is not ours to read, but keeps the event


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
    if data[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte order mark, as some editors write
        data = data[3:]
    return data, label


def _gunzip(data: bytes, label: str) -> bytes:
    try:
        return gzip.decompress(data)
    except EOFError:
        raise TraceError(f"{label}: gzip stream is truncated (the file was cut off after {len(data):,} bytes)") from None
    except (OSError, zlib.error) as exc:
        raise TraceError(f"{label}: not a valid gzip file ({exc})") from None


def load_trace(
    source: Union[str, os.PathLike, bytes],
    name: str | None = None,
    progress: Callable[[float], None] | None = None,
) -> Trace:
    """Load a torch.profiler Chrome trace (.json or .json.gz, any file name) into a Trace.
    `progress`, when given, is called with the fraction of events decoded (0..1) as loading goes."""
    data, label = read_source(source, name)
    size = len(data)
    warnings: list[str] = []
    meta, batches = _decode(data, label, warnings, progress)
    del data  # the batches keep what they still need
    trace = build_trace(batches, meta, label, warnings)
    trace.size_bytes = size
    return trace


# Events are decoded this many at a time, so that only one batch of Python structs is alive at once.
BATCH = 25000
# traceEvents arrays up to this size are decoded in one go (their structs are a few tens of MB).
ONE_BATCH_BYTES = 48 << 20
_decode_raw_list = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_one = msgspec.json.Decoder(_Event).decode


def _decode(
    data: bytes, label: str, warnings: list[str], progress: Callable[[float], None] | None = None
) -> tuple[dict[str, Any], Iterator[list[_Event]]]:
    """Split the document into top-level metadata and batches of typed events; salvage a cut-off file."""
    start = _LEADING_SPACE.match(data).end()  # no strip(): that would copy a 200 MB buffer
    if start == len(data):
        raise TraceError(f"{label}: the file is empty")
    first = data[start : start + 1]
    if first not in (b"{", b"["):
        raise TraceError(f"{label}: not JSON (it starts with {data[start : start + 16]!r})")
    try:
        if first == b"[":  # the bare "JSON array" flavour of the Chrome trace format
            return {}, _batches(_decode_raw_list(data), label, warnings, progress)
        top = _decode_top(data)
    except msgspec.ValidationError:
        raise TraceError(f"{label}: JSON but not a trace: the top level is neither an object nor an array of events") from None
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            closed = _close_cut_file(data, first)
            if closed is not None:
                lost = len(data) - closed[1]
                warnings.append(_cut_warning(label, "read every complete event before the cut", lost, len(data)))
                return _decode(closed[0], label, warnings, progress)
            meta, events = _salvage(data, label, warnings)
            return meta, iter([events])
        raise TraceError(f"{label}: not valid JSON ({exc})") from None
    raw_events = top.pop("traceEvents", None)
    if raw_events is None:
        keys = ", ".join(list(top)[:5]) or "none"
        raise TraceError(f"{label}: JSON but not a trace: no traceEvents key (top-level keys: {keys})")
    meta = {key: msgspec.json.decode(raw) for key, raw in top.items()}
    if len(raw_events) <= ONE_BATCH_BYTES:  # small enough to decode at once: one pass fewer
        try:
            events = _decode_events(raw_events)
            if progress:
                progress(0.0)
            return meta, iter([events])
        except msgspec.ValidationError:
            pass  # not a list, or odd events: the batched path says which
    try:
        raws = _decode_raw_list(raw_events)
    except msgspec.ValidationError:
        raise TraceError(f"{label}: JSON but not a trace: traceEvents is not a list") from None
    return meta, _batches(raws, label, warnings, progress)


def _batches(
    raws: list[msgspec.Raw], label: str, warnings: list[str], progress: Callable[[float], None] | None = None
) -> Iterator[list[_Event]]:
    """Typed events, BATCH at a time. A batch with a field of an unexpected type is decoded event
    by event, and the events that still cannot be read are skipped with a warning."""
    for start in range(0, len(raws), BATCH):
        if progress:
            progress(start / max(len(raws), 1))
        chunk = raws[start : start + BATCH]
        try:
            yield _decode_events(b"[" + b",".join(chunk) + b"]")
        except msgspec.ValidationError as exc:
            yield _decode_each(chunk, label, warnings, note=str(exc))


def _decode_each(chunk: list[Any], label: str, warnings: list[str], note: str) -> list[_Event]:
    kept: list[_Event] = []
    for raw in chunk:
        try:
            kept.append(_decode_one(raw if isinstance(raw, msgspec.Raw) else msgspec.json.encode(raw)))
        except msgspec.ValidationError:
            pass
    if len(kept) < len(chunk):
        warnings.append(f"{label}: {len(chunk) - len(kept):,} events could not be read and were skipped ({note})")
    return kept


_EVENT_GAP = re.compile(rb"\}\s*,\s*\{")
CUT_SEARCH = 1 << 20  # how far back from a cut to look for the end of the last whole event, bytes
CUT_TRIES = 64


def _close_cut_file(data: bytes, first: bytes) -> tuple[bytes, int] | None:
    """A trace cut off mid-write, closed after its last whole event: (the closed document, bytes
    kept), or None when no cut point near the end closes it. The closed file takes the fast path,
    where the event-by-event salvage would build a dict per event."""
    tail_start = max(len(data) - CUT_SEARCH, 0)
    gaps = [m.start() for m in _EVENT_GAP.finditer(data, tail_start)]
    closing = b"]" if first == b"[" else b"]}"
    for end in reversed(gaps[-CUT_TRIES:]):
        candidate = data[: end + 1] + closing
        try:
            (_decode_raw_list if first == b"[" else _decode_top)(candidate)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        return candidate, end + 1
    return None


def _cut_warning(label: str, what: str, lost: int, size: int) -> str:
    return (
        f"{label}: the file is cut off (the profiler was probably killed mid-write); {what}, "
        f"lost the last {lost:,} bytes ({100.0 * lost / max(size, 1):.1f}% of the file)"
    )


def _salvage(data: bytes, label: str, warnings: list[str]) -> tuple[dict[str, Any], list[_Event]]:
    """A trace cut off mid-write that no cut point near its end closes: keep the metadata before
    traceEvents and every complete event, read one by one."""
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
    events = _decode_each(raw_events, label, warnings, note="while salvaging")
    warnings.append(_cut_warning(label, f"salvaged {len(events):,} complete events", lost, len(data)))
    return meta, events


def _int_or_none(value: Any) -> int | None:
    """Ints as they are; numeric strings ("2560", "0x0") parsed; anything else None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        value = int(value) if value == value and abs(value) < 2**63 else None
    elif not isinstance(value, int):
        try:
            value = int(str(value), 0)
        except ValueError:
            return None
    return value if value is not None and -(2**63) <= value < 2**63 else None


def _ints(values: list[Any]) -> pl.Series:
    """An Int64 column; the per-value parse runs only when the column mixes in strings."""
    try:
        return pl.Series(values, dtype=pl.Int64, strict=True)
    except (TypeError, ValueError, OverflowError):
        return pl.Series([_int_or_none(v) for v in values], dtype=pl.Int64)


def _strs(values: list[Any]) -> pl.Series:
    """A String column from strings, ints (pid/tid) or a mix of both."""
    for dtype in (pl.String, pl.Int64):
        try:
            return pl.Series(values, dtype=dtype, strict=True).cast(pl.String)
        except (TypeError, ValueError, OverflowError):
            continue
    return pl.Series([None if v is None else str(v) for v in values], dtype=pl.String)


def _binary(raws: list[bytes]) -> pl.Series:
    """Raw JSON snippets, kept as bytes until the whole trace is assembled."""
    return pl.Series(raws, dtype=pl.Binary)


def _text(col: pl.Expr) -> pl.Expr:
    """Raw JSON snippet -> String, null where the field was absent."""
    text = col.cast(pl.String)
    return pl.when(text.str.len_bytes() > 0).then(text)


def _ns(col: pl.Expr) -> pl.Expr:
    """JSON number texts in µs (ints, or decimals with ns fractions; quoted numbers too) -> exact
    int64 ns by integer arithmetic on the digits (epoch µs with ns fractions do not survive
    float64). Exponent forms go through float; unreadable values become null."""
    text = col.cast(pl.String).str.strip_chars('" ')
    parts = text.str.split_exact(".", 1)
    whole = parts.struct.field("field_0").cast(pl.Int64, strict=False)
    frac = parts.struct.field("field_1").fill_null("").str.slice(0, 3).str.pad_end(3, "0").cast(pl.Int64, strict=False)
    exact = whole * 1000 + pl.when(text.str.starts_with("-")).then(-frac).otherwise(frac)
    approx = (text.cast(pl.Float64, strict=False) * 1000).round(0).cast(pl.Int64, strict=False)
    return pl.coalesce(exact, approx)


def _category(raw: pl.Expr) -> pl.Expr:
    """Normalized category through CATEGORY_ALIASES (case-insensitive); unknown ones kept as written."""
    mapped = raw.str.to_lowercase().replace_strict(CATEGORY_ALIASES, default=None, return_dtype=pl.String)
    return mapped.fill_null(raw).fill_null("")


def _complete_frame(batch: list[_Event]) -> pl.DataFrame:
    """Columns of one batch of complete events, as read: only Python-to-column copies here; the
    text columns are parsed later, once the file's bytes are freed (see _finish_events)."""
    no_args = _Args()
    args = [e.args if isinstance(e.args, _Args) else no_args for e in batch]
    return pl.DataFrame(
        [
            _strs([e.cat for e in batch]).alias("cat"),
            _strs([e.name for e in batch]).alias("name"),
            _strs([e.pid for e in batch]).alias("pid"),
            _strs([e.tid for e in batch]).alias("tid"),
            _binary([bytes(e.ts) for e in batch]).alias("ts_abs"),
            _binary([bytes(e.dur) for e in batch]).alias("dur_ns"),
            _ints([a.stream for a in args]).alias("stream"),
            _ints([a.device for a in args]).alias("device"),
            _ints([a.correlation for a in args]).alias("correlation"),
            _ints([a.external_id if a.external_id is not None else a.external_id_legacy for a in args]).alias("external_id"),
            _ints([a.bytes if a.bytes is not None else a.size for a in args]).alias("bytes"),
            _strs([a.kind for a in args]).alias("kind_arg"),
            _binary([bytes(a.input_dims) for a in args]).alias("input_dims"),
            _binary([bytes(a.input_types) for a in args]).alias("input_types"),
        ]
    )


def _finish_events(frame: pl.DataFrame) -> pl.DataFrame:
    """Parse the raw columns of one batch in one query."""
    return frame.with_columns(
        _category(pl.col("cat")).alias("cat"),
        pl.col("name").fill_null(""),
        _ns(pl.col("ts_abs")).alias("ts_abs"),
        _ns(pl.col("dur_ns")).fill_null(0).alias("dur_ns"),
        _text(pl.col("input_dims")).alias("input_dims"),
        _text(pl.col("input_types")).alias("input_types"),
    )


def _flow_frame(batch: list[_Event]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            _strs([e.id for e in batch]).alias("id"),
            _strs([e.cat for e in batch]).alias("cat"),
            _strs([e.name for e in batch]).alias("name"),
            pl.Series("ph", [e.ph for e in batch], dtype=pl.String),
            _strs([e.pid for e in batch]).alias("pid"),
            _strs([e.tid for e in batch]).alias("tid"),
            _binary([bytes(e.ts) for e in batch]).alias("ts_abs"),
        ]
    )


def build_trace(batches: Iterable[list[_Event]], meta: dict[str, Any], label: str, warnings: list[str]) -> Trace:
    """Batches of typed events -> the Trace's polars tables (events, flows, steps)."""
    chunks, flow_chunks, seen = [], [], 0
    for batch in batches:
        seen += len(batch)
        complete = [e for e in batch if e.ph == "X" and len(e.ts)]
        if complete:
            chunks.append(_complete_frame(complete))
        flows = [e for e in batch if e.ph in ("s", "f", "t") and len(e.ts)]
        if flows:
            flow_chunks.append(_flow_frame(flows))
        del batch, complete, flows
    if not chunks:
        if warnings:
            raise TraceError(f"{label}: no event could be read ({warnings[-1].removeprefix(label + ': ')})")
        if not seen:
            raise TraceError(f"{label}: JSON but not a trace: traceEvents is empty")
        raise TraceError(f"{label}: the trace has {seen:,} events but no complete (\"X\") events to analyse")
    # Parse batch by batch once the file's bytes are gone: one query each, with small transients
    # (one query over the whole trace holds ~4x the finished frame at once).
    finished = []
    while chunks:
        finished.append(_finish_events(chunks.pop(0)))
    frame = pl.concat(finished, rechunk=False)  # _normalize's sort writes one contiguous copy
    del finished
    unreadable = frame["ts_abs"].null_count()
    if unreadable:
        warnings.append(f"{label}: {unreadable:,} events with an unreadable timestamp were skipped")
        frame = frame.filter(pl.col("ts_abs").is_not_null())
        if frame.height == 0:
            raise TraceError(f"{label}: no complete event has a readable timestamp")
    negative = frame.filter(pl.col("dur_ns") < 0).height
    if negative:
        warnings.append(f"{label}: {negative:,} events with a negative duration were read as zero-length")
        frame = frame.with_columns(pl.col("dur_ns").clip(lower_bound=0))
    origin_ns = int(frame["ts_abs"].min())
    frame = frame.with_columns((pl.col("ts_abs") - origin_ns).alias("ts_ns")).drop("ts_abs")
    frame = _normalize(frame)
    frame = nesting(frame)
    frame = _link_launches(frame)
    steps = find_steps(frame)
    unlinked = frame.filter(pl.col("cat").is_in(GPU_CATEGORIES) & pl.col("launch").is_null()).height
    if unlinked and not steps["implicit"][0]:
        warnings.append(
            f"{label}: {unlinked:,} GPU events have no launch call with their correlation id; "
            "they belong to no step (launched before the profiler started, or their runtime calls were dropped)"
        )
    frame = assign_steps(frame, steps)

    flow_schema = {"id": pl.String, "cat": pl.String, "name": pl.String, "ph": pl.String, "pid": pl.String, "tid": pl.String, "ts_abs": pl.Binary}
    flows = pl.concat(flow_chunks) if flow_chunks else pl.DataFrame(schema=flow_schema)
    flows = flows.select(
        "id", _category(pl.col("cat")).cast(pl.Categorical), "name", "ph", "pid", "tid",
        (_ns(pl.col("ts_abs")).fill_null(origin_ns) - origin_ns).alias("ts_ns"),
    )
    return Trace(source=label, events=frame, flows=flows, steps=steps, meta=dict(meta), warnings=warnings)


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
    # stable: two spans with the same start and length nest in file order, parent first (µs-resolution traces have many)
    frame = frame.sort(["pid", "tid", "ts_ns", "dur_ns"], descending=[False, False, False, True], maintain_order=True)
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
