"""Event structs or scanned columns -> the Trace's polars frames: events (times in ns from the
trace's start, normalized categories, device fields), flows, memory, steps and nesting, and the
loader's warnings (unread categories, empty steps, a cut file).
"""

from __future__ import annotations

import warnings as _warnings
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, Iterable, Iterator

import msgspec
import numpy as np
import polars as pl

from dashboard.engine.load.memory import memory_table
from dashboard.engine.model.columns import series
from dashboard.engine.model.trace import GPU_CATEGORIES, LAUNCH_CATEGORIES, Trace
from dashboard.engine.load.steps import assign_steps, find_steps, nesting

from dashboard.engine.load.devices import (
    CATEGORY_ALIASES,
    _fill_device_fields,
    classify_device_events,
)
from dashboard.engine.load.notes import note_cut, note_unread
from dashboard.engine.load.order import lane_order
from dashboard.engine.load.reading import TraceError, _Args, _Event, _Reading


# Bounds on times, ns: later than 2116 or earlier than 1933 (epoch µs) a timestamp is unreadable,
# and a duration over 36 years is read as zero-length, so that ts + dur and the difference of two
# times stay within int64 ns.
MAX_TS_NS, MIN_TS_NS, MAX_DUR_NS = 1 << 62, -(1 << 60), 1 << 60


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


_INT64_MIN, _INT64_END = -(1 << 63), 1 << 63


def _ints(values: list[Any]) -> pl.Series:
    """An Int64 column; the per-value parse runs only when the column mixes in strings, and then
    only for the values that are not None or an int64 already."""
    try:
        return pl.Series(values, dtype=pl.Int64, strict=True)
    except (TypeError, ValueError, OverflowError):
        return pl.Series(
            [v if v is None or (type(v) is int and _INT64_MIN <= v < _INT64_END) else _int_or_none(v) for v in values],
            dtype=pl.Int64,
        )


_NONE = type(None)
_TS, _DUR = attrgetter("ts"), attrgetter("dur")
_INPUT_DIMS, _INPUT_TYPES, _CONCRETE_INPUTS = (
    attrgetter("input_dims"),
    attrgetter("input_types"),
    attrgetter("concrete_inputs"),
)


def _names(values: list[Any]) -> pl.Series:
    """_strs for a column that is nearly always all strings (event names): polars checks them as
    it builds the column, so the usual case skips the look at every value's type."""
    try:
        return pl.Series(values, dtype=pl.String, strict=True)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return _strs(values)


def _strs(values: list[Any]) -> pl.Series:
    """A String column from strings, ints (pid/tid) or a mix of both. The value types are looked
    at once (a C-level pass), so a mixed column costs one conversion, not two failed ones first."""
    kinds = set(map(type, values)) - {_NONE}
    if kinds <= {str}:
        return pl.Series(values, dtype=pl.String)
    if kinds and kinds <= {int, bool}:  # (polars reads a bool as 1 or 0 here, as before)
        try:
            return pl.Series(values, dtype=pl.Int64, strict=True).cast(pl.String)
        except (TypeError, ValueError, OverflowError):  # beyond int64
            pass
    return pl.Series([None if v is None else str(v) for v in values], dtype=pl.String)


def _raw_texts(items: list[Any], field: Callable[[Any], msgspec.Raw]) -> pl.Series:
    """The raw JSON text of one field of each item as a String column ("" where it was absent):
    the snippets are joined into one buffer with NUL between them and split in polars, a third
    less time than one bytes object per snippet. No JSON text holds a raw NUL (msgspec refuses
    one), so the split gives one value per item; bytes that are not UTF-8 read as U+FFFD."""
    if not items:
        return pl.Series([], dtype=pl.String)
    joined = b"\x00".join(map(field, items))
    if joined.count(0) != len(items) - 1:  # a NUL inside a value (not from msgspec): one value each
        return pl.Series([bytes(field(item)).decode("utf-8", errors="replace") for item in items], dtype=pl.String)
    try:
        text = joined.decode("utf-8")
    except UnicodeDecodeError:  # a stray byte in Input Dims must not fail a file
        text = joined.decode("utf-8", errors="replace")
    del joined
    return pl.Series([text], dtype=pl.String).str.split("\x00").explode()


def _text(col: pl.Expr) -> pl.Expr:
    """Raw JSON snippet -> String, null where the field was absent."""
    return pl.when(col.str.len_bytes() > 0).then(col)


def _ns(col: pl.Expr) -> pl.Expr:
    """JSON number texts in µs (ints, or decimals with ns fractions; quoted numbers too) -> exact
    int64 ns by integer arithmetic on the digits (epoch µs with ns fractions do not survive
    float64). Exponent forms go through float; unreadable values become null."""
    text = col.str.strip_chars('" ')
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
    text columns are parsed in one query after (see _finish_events)."""
    no_args = _Args()
    args = [e.args if isinstance(e.args, _Args) else no_args for e in batch]
    return pl.DataFrame(
        [
            pl.Series("cat", [e.cat for e in batch], dtype=pl.String),  # typed: a string or None
            _names([e.name for e in batch]).alias("name"),
            _strs([e.pid for e in batch]).alias("pid"),
            _strs([e.tid for e in batch]).alias("tid"),
            _raw_texts(batch, _TS).alias("ts_abs"),
            _raw_texts(batch, _DUR).alias("dur_ns"),
            _ints([a.stream for a in args]).alias("stream"),
            _ints([a.device for a in args]).alias("device"),
            _ints([a.correlation for a in args]).alias("correlation"),
            _ints([a.external_id if a.external_id is not None else a.external_id_legacy for a in args]).alias(
                "external_id"
            ),
            _ints([a.bytes if a.bytes is not None else a.size for a in args]).alias("bytes"),
            _strs([a.kind if a.kind is not None else a.direction for a in args]).alias("kind_arg"),
            _raw_texts(args, _INPUT_DIMS).alias("input_dims"),
            _raw_texts(args, _INPUT_TYPES).alias("input_types"),
            _raw_texts(args, _CONCRETE_INPUTS).alias("concrete_inputs"),
        ]
    )


def _finish_events(frame: pl.DataFrame, times_parsed: bool = False) -> pl.DataFrame:
    """Parse the raw columns of one batch in one query (ts_abs and dur_ns are ns already when
    times_parsed: the scanner's)."""
    ts, dur = pl.col("ts_abs"), pl.col("dur_ns")
    return frame.with_columns(
        _category(pl.col("cat")).alias("cat"),
        pl.col("name").fill_null(""),
        (ts if times_parsed else _ns(ts)).alias("ts_abs"),
        (dur if times_parsed else _ns(dur)).fill_null(0).alias("dur_ns"),
        _text(pl.col("input_dims")).alias("input_dims"),
        _text(pl.col("input_types")).alias("input_types"),
        _text(pl.col("concrete_inputs")).alias("concrete_inputs"),
    )


def _flow_frame(batch: list[_Event]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            _strs([e.id for e in batch]).alias("id"),
            pl.Series("cat", [e.cat for e in batch], dtype=pl.String),
            _names([e.name for e in batch]).alias("name"),
            pl.Series("ph", [e.ph for e in batch], dtype=pl.String),
            _strs([e.pid for e in batch]).alias("pid"),
            _strs([e.tid for e in batch]).alias("tid"),
            _raw_texts(batch, _TS).alias("ts_abs"),
        ]
    )


def build_trace(batches: Iterable[list[_Event] | _Part], meta: dict[str, Any], reading: _Reading) -> Trace:
    """Batches of typed events (or parts the scanner read) -> the Trace's polars tables (events,
    flows, steps), with a warning for everything the file holds that the analyses will not count."""
    return _build_trace((_read_batch(batch) for batch in batches), meta, reading)


# The events' text columns whose values repeat (a few threads, a few hundred shapes), besides the
# names: Categorical, each distinct text kept once and a 4-byte code per row, where a String column
# holds a 16-byte view per row even for a null (35 MB a column for the 910 MB trace's 2.2 million
# events). Cast per batch (in the workers, for a sliced file), once the device fields are read from
# pid and tid: the parts, and what the loading process holds while it builds the tables, are smaller.
# Sorted as text where the order matters (polars before 1.32 sorts a Categorical by its codes).
REPEATED_TEXT = ("pid", "tid", "kind", "input_dims", "input_types", "concrete_inputs")


def _build_trace(parts: Iterable[_Part], meta: dict[str, Any], reading: _Reading) -> Trace:
    label, warnings = reading.label, reading.warnings
    memory_chunks: list[pl.DataFrame] = []
    frame, flow_chunks, seen, last_ts, raw_categories = _events_frame(parts, reading, memory_chunks)
    if frame is None:
        if warnings:
            raise TraceError(f"{label}: no event could be read: {warnings[-1].removeprefix(label + ': ')}")
        if not seen:
            raise TraceError(f"{label}: JSON but not a trace: traceEvents is empty")
        raise TraceError(f'{label}: the trace has {seen:,} events but no complete ("X") events to analyse')
    origin_ns = int(frame["ts_abs"].min())
    held = [frame.with_columns((pl.col("ts_abs") - origin_ns).alias("ts_ns")).drop("ts_abs")]
    del frame  # _normalize takes the only reference: it frees each unsorted column as it sorts it
    frame = _normalize(held)
    frame = classify_device_events(frame, raw_categories)  # an MTIA trace's DMA copies and sync events are no kernels
    frame = nesting(frame)
    frame = _link_launches(frame)
    steps = find_steps(frame)
    unlinked = frame.filter(pl.col("cat").is_in(GPU_CATEGORIES) & pl.col("launch").is_null()).height
    if unlinked and not steps["implicit"][0]:
        why = (
            "their launch calls may come after the cut"
            if reading.cut is not None and not reading.cut.events_whole
            else "launched before the profiler started, or their runtime calls were dropped"
        )
        warnings.append(
            f"{label}: {unlinked:,} GPU events have no launch call with their correlation id; they belong to no step ({why})"
        )
    frame = assign_steps(frame, steps)

    flow_schema = {
        "id": pl.String,
        "cat": pl.String,
        "name": pl.String,
        "ph": pl.String,
        "pid": pl.String,
        "tid": pl.String,
        "ts_abs": pl.Int64,
    }
    flows = _concat(flow_chunks) if flow_chunks else pl.DataFrame(schema=flow_schema)
    flows = flows.select(
        "id",
        _category(pl.col("cat")).cast(pl.Categorical),
        *(pl.col(c).cast(pl.Categorical) for c in ("name", "ph", "pid", "tid")),
        (pl.col("ts_abs").fill_null(origin_ns) - origin_ns).alias("ts_ns"),
    )
    memory = memory_table(_memory_events(memory_chunks, origin_ns, reading), frame, steps)
    del memory_chunks
    trace = Trace(
        source=label,
        events=frame,
        flows=flows,
        steps=steps,
        meta=dict(meta),
        warnings=warnings,
        raw_categories=raw_categories,
        memory=memory,
    )
    note_unread(trace, reading)
    note_cut(trace, reading, None if last_ts is None else last_ts - origin_ns)
    return trace


def _drain(parts: list[_Part]) -> Iterator[_Part]:
    """The parts in order, each dropped from the list once it is handed on."""
    parts.reverse()
    while parts:
        yield parts.pop()


@dataclass
class _Part:
    """One batch of events read into columns: the complete events (text columns parsed, ts_abs
    in absolute ns), the flow events (ts_abs likewise), the complete events per category as
    written, the number of events seen, the ts text of the last complete event in file order
    (where a cut file ends), and the memory events. Built in a worker process for a slice of a large file."""

    events: pl.DataFrame | None
    flows: pl.DataFrame | None
    counts: pl.DataFrame | None
    seen: int
    last_ts: bytes
    memory: pl.DataFrame | None = None  # the "[memory]" events (pid, tid, ts_abs in absolute ns, _MEMORY_ARGS' columns)


def _read_batch(batch: list[_Event] | _Part) -> _Part:
    """Typed events -> a _Part (the Python structs can be freed once it returns); a _Part (the
    scanner's) as it is."""
    if isinstance(batch, _Part):
        return batch
    complete = [e for e in batch if e.ph == "X"]  # one without ts is counted as unreadable later
    events = counts = flows = None
    last = b""
    if complete:
        events, counts = _finished(_complete_frame(complete))
        last = bytes(complete[-1].ts)
    flow_events = [e for e in batch if e.ph in ("s", "f", "t") and len(e.ts)]
    if flow_events:
        flows = _flows_finished(_flow_frame(flow_events).with_columns(_ns(pl.col("ts_abs")).alias("ts_abs")))
    memory_events = [e for e in batch if e.ph in ("i", "I") and e.name == MEMORY_NAME and len(e.ts)]
    memory = _memory_finished(_memory_frame(memory_events)) if memory_events else None
    return _Part(events, flows, counts, len(batch), last, memory)


def _finished(raw: pl.DataFrame, times_parsed: bool = False) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A batch's complete events as read -> (its finished events, its count per category as written)."""
    counts = raw.group_by("cat").len()
    events = _fill_device_fields(_finish_events(raw, times_parsed)).with_columns(
        pl.col("name", *REPEATED_TEXT).cast(pl.Categorical)
    )
    return events, counts


# A memory event as profile_memory=True writes it: {"ph": "i", "name": "[memory]", "args": {"Device Type",
# "Device Id", "Bytes", "Total Allocated", "Total Reserved", "Addr"}}; its columns as a part holds them.
MEMORY_NAME = "[memory]"
_MEMORY_ARGS = (
    ("device_type", attrgetter("mem_device_type")),
    ("device_id", attrgetter("mem_device_id")),
    ("bytes", attrgetter("mem_bytes")),
    ("total_allocated", attrgetter("mem_total_allocated")),
    ("total_reserved", attrgetter("mem_total_reserved")),
    ("addr", attrgetter("mem_addr")),
)


def _memory_ints(items: list[_Args], field: Callable[[_Args], msgspec.Raw]) -> pl.Series:
    """An Int64 column from one raw arg of each memory event, read as the scanner reads it: an
    integer as it is, null or absent as null, anything else as _int_or_none of its JSON value
    (a numeric string parsed, a float truncated, a bool or container null)."""
    texts = _raw_texts(items, field)
    values = texts.cast(pl.Int64, strict=False)
    odd = (values.is_null() & (texts.str.len_bytes() > 0) & (texts != "null")).arg_true()
    if odd.len():
        fixed = []
        for row in odd.to_list():
            try:
                fixed.append(_int_or_none(msgspec.json.decode(texts[row])))
            except msgspec.DecodeError:
                fixed.append(None)
        values = values.scatter(odd, pl.Series(fixed, dtype=pl.Int64))
    return values


def _memory_frame(batch: list[_Event]) -> pl.DataFrame:
    """Columns of one batch's memory events, as read (ts_abs raw text)."""
    no_args = _Args()
    args = [e.args if isinstance(e.args, _Args) else no_args for e in batch]
    return pl.DataFrame(
        [
            _strs([e.pid for e in batch]).alias("pid"),
            _strs([e.tid for e in batch]).alias("tid"),
            _raw_texts(batch, _TS).alias("ts_abs"),
            *(_memory_ints(args, field).alias(name) for name, field in _MEMORY_ARGS),
        ]
    ).with_columns(_ns(pl.col("ts_abs")).alias("ts_abs"))


# The memory and flow events' text columns held as Categorical (the scanner's glue makes them so too).
MEMORY_CATEGORICAL = ("pid", "tid")  # as the events hold them
# The flows' repeated texts: the ids stay text (nearly each is another, and a Categorical's texts are
# kept by polars for the life of the process).
FLOW_CATEGORICAL = ("name", "ph", "pid", "tid")


def _memory_finished(memory: pl.DataFrame) -> pl.DataFrame:
    """A batch's memory events with MEMORY_CATEGORICAL Categorical."""
    return memory.with_columns(pl.col(*MEMORY_CATEGORICAL).cast(pl.Categorical))


def _flows_finished(flows: pl.DataFrame) -> pl.DataFrame:
    """A batch's flow events with FLOW_CATEGORICAL Categorical."""
    return flows.with_columns(pl.col(*FLOW_CATEGORICAL).cast(pl.Categorical))


# polars before 1.32 keeps a Categorical's texts local to the frame that made it, and warns on stderr
# each time it re-encodes the parts' texts into one set when they are joined: expected here.
_REMAPPING = getattr(pl.exceptions, "CategoricalRemappingWarning", None)


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The parts' frames as one, in order, not rechunked."""
    if _REMAPPING is None:
        return pl.concat(frames, rechunk=False)
    with _warnings.catch_warnings():  # (`warnings` names the trace's own list in this module)
        _warnings.simplefilter("ignore", _REMAPPING)
        return pl.concat(frames, rechunk=False)


def _events_frame(
    parts: Iterable[_Part],
    reading: _Reading,
    memory_chunks: list[pl.DataFrame] | None = None,
) -> tuple[pl.DataFrame | None, list[pl.DataFrame], int, int | None, dict[str, int]]:
    """The parts joined: one frame of complete events with readable timestamps (still absolute,
    ts_abs in ns; None when there is none), the flow frames, the number of events seen, the start
    (absolute ns) of the last complete event in file order, and the number of complete events per
    category as written. The parts' memory frames are appended to `memory_chunks`, in order."""
    label, warnings = reading.label, reading.warnings
    finished, flow_chunks, counts, seen, last = [], [], [], 0, b""
    for part in parts:
        if part.memory is not None and memory_chunks is not None:
            memory_chunks.append(part.memory)
        seen += part.seen
        if part.events is not None:
            finished.append(part.events)
            counts.append(part.counts)
            last = part.last_ts
        if part.flows is not None:
            flow_chunks.append(part.flows)
    if reading.skipped:
        warnings.append(
            f"{label}: {reading.skipped:,} events could not be read and were skipped; the first: {reading.skip_note}"
        )
    if not finished:
        return None, flow_chunks, seen, None, {}
    last_ts = pl.select(_ns(pl.lit(last.decode("utf-8", errors="replace"), dtype=pl.String))).item()
    frame = _concat(finished)  # not rechunked: _normalize's sort writes one contiguous copy
    del finished
    per_cat = (
        pl.concat(counts)
        .group_by("cat")
        .agg(pl.col("len").sum())
        .sort(["len", "cat"], descending=[True, False], nulls_last=True)
    )
    raw_categories = {cat if cat is not None else "": int(n) for cat, n in per_cat.iter_rows()}
    ts, dur = pl.col("ts_abs"), pl.col("dur_ns")
    readable = ts.is_between(MIN_TS_NS, MAX_TS_NS).fill_null(False)
    unreadable, negative, endless = frame.select(  # one query for the three checks (durations of the events kept)
        (~readable).sum().alias("unreadable"),
        (readable & (dur < 0)).sum().alias("negative"),
        (readable & (dur > MAX_DUR_NS)).sum().alias("endless"),
    ).row(0)
    if unreadable:
        warnings.append(f"{label}: {unreadable:,} events with a missing or unreadable timestamp were skipped")
        frame = frame.filter(readable)
        if frame.height == 0:
            raise TraceError(f"{label}: no complete event has a readable timestamp")
    if negative:
        warnings.append(f"{label}: {negative:,} events with a negative duration were read as zero-length")
        frame = frame.with_columns(pl.col("dur_ns").clip(lower_bound=0))
    if endless:  # so that ts + dur and every difference of two times stay within int64
        warnings.append(f"{label}: {endless:,} events with a duration over 36 years were read as zero-length")
        frame = frame.with_columns(
            pl.when(pl.col("dur_ns") > MAX_DUR_NS).then(0).otherwise(pl.col("dur_ns")).alias("dur_ns")
        )
    return frame, flow_chunks, seen, last_ts, raw_categories


def _memory_events(chunks: list[pl.DataFrame], origin_ns: int, reading: _Reading) -> pl.DataFrame | None:
    """The parts' memory events in file order, ts_ns relative to `origin_ns` (the events' origin);
    those without a readable timestamp are dropped with a warning. None when there are none."""
    if not chunks:
        return None
    raw = _concat(chunks)
    chunks.clear()
    readable = pl.col("ts_abs").is_between(MIN_TS_NS, MAX_TS_NS).fill_null(False)
    unreadable = raw.select((~readable).sum()).item()
    if unreadable:
        reading.warnings.append(
            f"{reading.label}: {unreadable:,} memory events with an unreadable timestamp were skipped"
        )
        raw = raw.filter(readable)
    return raw.with_columns((pl.col("ts_abs") - origin_ns).alias("ts_ns")).drop("ts_abs")


# Below this many events _normalize gathers the whole table in one query: a copy of at most a few
# tens of MB held for a moment, where the column-by-column gather costs two queries a column
# (about 2 ms of a small trace's 30).
NORMALIZE_WHOLE_ROWS = 100_000


def _normalize(held: list[pl.DataFrame]) -> pl.DataFrame:
    """Sort by lane and time and number the rows. `held` holds the only reference to the frame
    (emptied here), so that its columns are freed one by one as their sorted copies are made."""
    frame = held.pop()
    order = lane_order(frame)
    names = [c for c in frame.columns if c != "kind"] + ["kind"]  # kind last, after ts_ns, as before
    if frame.height < NORMALIZE_WHOLE_ROWS:  # one query, where the loop below made two per column
        return frame.select(pl.int_range(0, pl.len(), dtype=pl.Int64).alias("id"), pl.col(names).gather(order))
    # Two columns at a time, each pair's unsorted columns dropped once their sorted copies exist: a
    # first open holds the table once plus two columns, not twice (DataFrame.sort gathers every column
    # at once). A pair's two gathers run side by side on polars' threads: 0.7x the time of one column
    # at a time on two cores, for one column more held.
    columns = [pl.int_range(0, frame.height, dtype=pl.Int64, eager=True).alias("id")]
    for at in range(0, len(names), 2):
        pair = names[at : at + 2]
        part = frame.select(pair).rechunk()  # a gather from one chunk is 3-4x faster than from the slices' chunks
        frame = frame.drop(pair)
        columns.extend(part.select(pl.all().gather(order)).get_columns())
        del part
    return pl.DataFrame(columns)


def _link_launches(frame: pl.DataFrame) -> pl.DataFrame:
    """launch: for each GPU event, the id of the runtime/driver call with the same correlation (the
    first such call in the table's order). ROCm memcpy events carry no byte count; take it from
    their hipMemcpy* launch. Only the GPU events are looked up, by a binary search of the calls'
    correlations sorted once (nearly sorted already: each thread's calls are numbered in time
    order), where a join of the whole table took 2-3x the time."""
    cat, correlation = frame.get_column("cat"), frame.get_column("correlation")
    calls = (cat.is_in(LAUNCH_CATEGORIES) & correlation.is_not_null()).arg_true().to_numpy()
    gpu = (cat.is_in(GPU_CATEGORIES) & correlation.is_not_null()).arg_true().to_numpy()
    keys = correlation.gather(series("calls", calls)).to_numpy()
    by_key = np.argsort(keys, kind="stable")  # a correlation's calls in table order: its first one leads
    keys = keys[by_key]
    leads = np.concatenate(([True], keys[1:] != keys[:-1])) if len(keys) else np.zeros(0, dtype=bool)
    keys, holders = keys[leads], calls[by_key[leads]]
    wanted = correlation.gather(series("gpu", gpu)).to_numpy()
    at = np.searchsorted(keys, wanted).clip(max=max(len(keys) - 1, 0))
    found = keys[at] == wanted if len(keys) else np.zeros(len(wanted), dtype=bool)
    linked, holder = gpu[found], holders[at[found]]  # row numbers: each linked GPU event and its call
    launch = np.full(frame.height, -1, dtype=np.int64)
    launch[linked] = frame.get_column("id").to_numpy()[holder]
    frame = frame.with_columns(series("launch", launch, valid=launch >= 0))
    sizes = frame.get_column("bytes")
    theirs = sizes.gather(series("holder", holder))
    taken = (sizes.gather(series("linked", linked)).is_null() & theirs.is_not_null()).to_numpy()
    if taken.any():  # a ROCm memcpy (none in a CUDA trace)
        frame = frame.with_columns(sizes.scatter(series("at", linked[taken]), theirs.filter(series("taken", taken))))
    return frame
