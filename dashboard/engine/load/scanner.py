"""The C scanner's glue (dashboard/engine/_scan.c, built by setup.py): JSON -> columns without a
Python object per event. Optional: without it every file is read through msgspec, alike.
"""

from __future__ import annotations

from typing import Any, Callable

import msgspec

from dashboard.engine.model.columns import from_arrow  # numpy before polars: see load/__init__.py
import polars as pl

from dashboard.engine.load.devices import MEMCPY_KIND, _arg_direction
from dashboard.engine.load.frames import (
    GPU_CATEGORIES,
    _category,
    FLOW_CATEGORICAL,
    _int_or_none,
    MEMORY_CATEGORICAL,
    _ns,
    _Part,
    _text,
)

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
    fixed = _odd_values(odd, tables)
    if fixed is None:
        return None
    texts = [pl.Series(t, dtype=pl.String) for t in tables]

    def codes(col: int) -> pl.Series:
        """Column col as the scanner wrote it: codes (UInt32) into its table for a text column, else
        Int64, with its nulls, and each odd entry's value read above."""
        values = from_arrow(_SCAN_COLUMNS[col][0], scanned[col])
        if col in fixed:  # scatter sets a value and makes it valid, as the odd entry's reading says
            rows = fixed[col]
            values = values.scatter(
                pl.Series(list(rows), dtype=pl.Int64), pl.Series(list(rows.values()), dtype=values.dtype)
            )
        return values

    def column(col: int, categorical: tuple[str, ...]) -> pl.Series:
        """Column col with its texts, Categorical for the names in `categorical` (each distinct text
        cast once, not each row's)."""
        name, table, _ = _SCAN_COLUMNS[col]
        if table is None:
            return codes(col)
        return (_categorical if name in categorical else pl.Series.gather)(texts[table], codes(col)).alias(name)

    events = counts = flows = memory = None
    if n_complete:
        events, counts = _complete_events(texts, codes)
    if n_flows:
        flows = pl.DataFrame([column(col, FLOW_CATEGORICAL) for col in _SCAN_FLOWS])
    if n_memory:
        memory = pl.DataFrame([column(col, MEMORY_CATEGORICAL) for col in _SCAN_MEMORY])
    return _Part(events, flows, counts, seen, last, memory)


def _odd_values(odd: list[tuple[int, int, bytes]], tables: list[list[str]]) -> dict[int, dict[int, int]] | None:
    """The values the scanner left to Python (a numeric string in an int field, a float, a quoted
    timestamp...), read by the msgspec path's functions: column -> row -> value (for a text
    column, the code of its text, appended to the column's table); None when one is not UTF-8
    (msgspec's path repairs it and says so)."""
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
        except (msgspec.DecodeError, UnicodeDecodeError):  # not UTF-8 (msgspec before 0.19 raises the
            return None  # latter): the msgspec path repairs it and says so
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
    return fixed


def _complete_events(texts: list[pl.Series], codes: Callable[[int], pl.Series]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The scanned complete events -> (their finished events, their count per category as written):
    what frames._finished makes of the columns read as text, with each text's reading (category,
    stream from tid, device from pid, copy direction from the name or args, Categorical) done once
    per distinct text of the scan's tables and handed to the rows by their codes (a slice's 20-30k
    events hold a few hundred distinct texts)."""
    cat_codes = codes(0)
    by_code = cat_codes.alias("code").to_frame().group_by("code").len()
    counts = (
        pl.DataFrame([texts[0].gather(by_code["code"]).alias("cat"), by_code["len"]])
        .group_by("cat")
        .agg(pl.col("len").sum().cast(pl.UInt32))
    )
    cat_table, cat_rows = _with_empty(texts[0].to_frame("cat").select(_category(pl.col("cat"))).to_series(), cat_codes)
    name_table, name_rows = _with_empty(texts[1], codes(1))
    pid_rows, tid_rows = codes(2), codes(3)
    frame = pl.DataFrame(
        [
            _categorical(cat_table, cat_rows).alias("cat"),
            _categorical(name_table, name_rows).alias("name"),
            _categorical(texts[2], pid_rows).alias("pid"),
            _categorical(texts[3], tid_rows).alias("tid"),
            *(codes(col) for col in range(4, 11)),
        ]
    )
    kind_rows = codes(11)
    raw_texts = [texts[table].to_frame("raw").select(_text(pl.col("raw"))).to_series() for table in (5, 6, 7)]
    # Each row's readings of its texts, as columns (named _*, dropped at the end) that the rows' own
    # conditions pick from: the category as text, the stream its tid names, the device its pid
    # names, the direction its args give and the one its name gives.
    readings = [
        cat_table.gather(cat_rows).alias("_cat"),
        texts[3].str.extract(r"(\d+)$", 1).cast(pl.Int64, strict=False).gather(tid_rows).alias("_tid_stream"),
        texts[2].cast(pl.Int64, strict=False).gather(pid_rows).alias("_pid_device"),
        texts[4].to_frame("k").select(_arg_direction(pl.col("k"))).to_series().gather(kind_rows).alias("_arg"),
        texts[4].gather(kind_rows).alias("_kind_arg"),
        name_table.str.extract(MEMCPY_KIND.pattern, 1).gather(name_rows).alias("_name_kind"),
    ]
    cat, gpu = pl.col("_cat"), pl.col("_cat").is_in(GPU_CATEGORIES)
    return frame.with_columns(readings).with_columns(
        pl.when(gpu & pl.col("stream").is_null())
        .then(pl.col("_tid_stream"))
        .otherwise(pl.col("stream"))
        .alias("stream"),
        pl.when(gpu & pl.col("device").is_null())
        .then(pl.col("_pid_device"))
        .otherwise(pl.col("device"))
        .alias("device"),
        pl.col("dur_ns").fill_null(0),
        *(
            _categorical(raw, codes(col)).alias(raw_name)
            for col, raw, raw_name in zip((12, 13, 14), raw_texts, ("input_dims", "input_types", "concrete_inputs"))
        ),
        pl.when(cat == "gpu_memcpy")
        .then(pl.coalesce("_name_kind", "_arg", "_kind_arg"))
        .when(cat == "kernel")
        .then(pl.col("_arg"))
        .otherwise(None)
        .cast(pl.Categorical)
        .alias("kind"),
    ).drop([reading.name for reading in readings]), counts


# polars before 1.32 keeps a Categorical's texts with the column, and compares two columns by their
# lists of texts; later ones hold every text in one mapping for the process.
_LOCAL_CATEGORIES = tuple(int(part) for part in pl.__version__.split(".")[:2]) < (1, 32)


def _categorical(table: pl.Series, rows: pl.Series) -> pl.Series:
    """table[rows] as a Categorical with the table's texts cast once, not each row's. Under polars
    before 1.32, only the texts the rows use, in the order they first use them: the categories a
    cast of the rows' own texts makes, which those versions compare. Later versions have no such
    list: the whole table is cast (two polars calls instead of six, about ten times a slice)."""
    if not _LOCAL_CATEGORIES:
        return table.cast(pl.Categorical).gather(rows)
    used = rows.unique(maintain_order=True).drop_nulls()
    position = pl.Series([0] * table.len(), dtype=pl.UInt32).scatter(
        used, pl.Series(range(used.len()), dtype=pl.UInt32)
    )
    return table.gather(used).cast(pl.Categorical).gather(position.gather(rows))


def _with_empty(table: pl.Series, rows: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(table, rows) where a row with no text takes the empty one, as the loader fills a missing
    category or name: the scanner's code for an absent text is its table's null entry, and a row
    with no code at all takes an entry appended for it."""
    table = table.fill_null("")
    if not rows.null_count():
        return table, rows
    return pl.concat([table, pl.Series([""], dtype=pl.String)]), rows.fill_null(table.len())
