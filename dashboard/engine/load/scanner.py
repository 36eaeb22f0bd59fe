"""The C scanner's glue (dashboard/engine/_scan.c, built by setup.py): JSON -> columns without a
Python object per event. Optional: without it every file is read through msgspec, alike.
"""

from __future__ import annotations

from typing import Any

import msgspec

from dashboard.engine.model.columns import from_arrow  # numpy before polars: see load/__init__.py
import polars as pl

from dashboard.engine.load.frames import _Part, _finished, _flows_finished, _int_or_none, _memory_finished, _ns

try:  # the C scanner (setup.py); without it every file is read through msgspec, with the same results
    from dashboard.engine import _scan
except ImportError:  # pragma: no cover - a build without a C compiler
    _scan = None


# The scanner's columns (the X_* and F_* of _scan.c, in order), each with its table (T_*, None
# for int64 columns) and the loader's name and kind for it: "text" (str() of the value msgspec
# decodes), "int" (_int_or_none of it), "time" (_ns of the raw text), "raw" (the raw text).
_SCAN_COLUMNS = (
    ("cat", 0, "text"),
    ("name", 1, "text"),
    ("pid", 2, "text"),
    ("tid", 3, "text"),
    ("ts_abs", None, "time"),
    ("dur_ns", None, "time"),
    ("stream", None, "int"),
    ("device", None, "int"),
    ("correlation", None, "int"),
    ("external_id", None, "int"),
    ("bytes", None, "int"),
    ("kind_arg", 4, "text"),
    ("input_dims", 5, "raw"),
    ("input_types", 6, "raw"),
    ("concrete_inputs", 7, "raw"),
    ("id", 8, "text"),
    ("cat", 0, "text"),
    ("name", 1, "text"),
    ("ph", 9, "text"),
    ("pid", 2, "text"),
    ("tid", 3, "text"),
    ("ts_abs", None, "time"),
    ("pid", 2, "text"),
    ("tid", 3, "text"),
    ("ts_abs", None, "time"),
    ("device_type", None, "int"),
    ("device_id", None, "int"),
    ("bytes", None, "int"),
    ("total_allocated", None, "int"),
    ("total_reserved", None, "int"),
    ("addr", None, "int"),
)
_SCAN_COMPLETE = range(0, 15)
_SCAN_FLOWS = range(15, 22)
_SCAN_MEMORY = range(22, 31)


def _scanned_part(raw: Any) -> _Part | None:
    """A JSON array of events -> a _Part through the C scanner, equal to _read_batch's from
    msgspec's structs; None when there is no scanner or it leaves the array to msgspec (see
    _scan.c for what it refuses). The values it returns as odd (a numeric string in an int field,
    a float, a quoted timestamp...) are read here by the same functions as on the msgspec path."""
    if _scan is None:
        return None
    got = _scan.scan(raw)
    return None if got is None else _part_of(got)


def _scanned_document(data: bytes) -> tuple[list[tuple[str, bytes]], _Part] | None:
    """A whole trace document `{..., "traceEvents": [...], ...}` through the C scanner: the other
    members as (key, raw JSON) in file order, and the events' _Part; None as for _scanned_part
    (or when the document is not such an object: the msgspec path then says what it is)."""
    if _scan is None:
        return None
    got = _scan.scan_document(data)
    if got is None:
        return None
    members, events = got
    part = _part_of(events)
    return None if part is None else (members, part)


def _part_of(got: tuple) -> _Part | None:
    """The scanner's answer -> a _Part (None when an odd value is not UTF-8: msgspec's path repairs it)."""
    seen, n_complete, n_flows, tables, scanned, odd, last, n_memory = (
        got  # tables: lists of this call's own; scanned: Arrow pairs
    )
    fixed: dict[int, dict[int, int]] = {}  # column -> row -> the value read here for an odd entry

    def put(col: int, row: int, value: int) -> None:
        fixed.setdefault(col, {})[row] = value

    times: list[tuple[int, int, str]] = []
    for col, row, text in odd:
        kind = _SCAN_COLUMNS[col][2]
        if kind == "time":
            times.append((col, row, text.decode("utf-8", errors="replace")))  # as _raw_texts reads it
            continue
        try:
            value = msgspec.json.decode(text)
        except msgspec.DecodeError:  # not UTF-8: the msgspec path repairs it and says so
            return None
        if kind == "text":
            table = tables[_SCAN_COLUMNS[col][1]]
            table.append(str(value))
            put(col, row, len(table) - 1)
        elif (number := _int_or_none(value)) is not None:
            put(col, row, number)
    if times:
        parsed = pl.select(_ns(pl.Series([t for _, _, t in times], dtype=pl.String))).to_series().to_list()
        for (col, row, _), ns in zip(times, parsed):
            if ns is not None:
                put(col, row, ns)
    texts = [pl.Series(t, dtype=pl.String) for t in tables]

    def column(col: int) -> pl.Series:
        name, table, _ = _SCAN_COLUMNS[col]
        values = from_arrow(name, scanned[col])  # codes (UInt32) for a text column, else Int64 with its nulls
        if col in fixed:  # scatter sets a value and makes it valid, as the odd entry's reading says
            rows = fixed[col]
            values = values.scatter(
                pl.Series(list(rows), dtype=pl.Int64), pl.Series(list(rows.values()), dtype=values.dtype)
            )
        return values if table is None else texts[table].gather(values).alias(name)

    events = counts = flows = memory = None
    if n_complete:
        events, counts = _finished(pl.DataFrame([column(col) for col in _SCAN_COMPLETE]), times_parsed=True)
    if n_flows:
        flows = _flows_finished(pl.DataFrame([column(col) for col in _SCAN_FLOWS]))
    if n_memory:
        memory = _memory_finished(pl.DataFrame([column(col) for col in _SCAN_MEMORY]))
    return _Part(events, flows, counts, seen, last, memory)
