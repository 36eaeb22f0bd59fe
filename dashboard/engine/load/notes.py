"""What the loader tells the reader about a trace it built: what the file holds that no analysis
counts (categories the engine does not read, steps without work, bytes that were not UTF-8) and
where a file cut off mid-write ends (Trace.cut and its warning line). Each is one line in
Trace.warnings; the tables themselves are load/frames.py's."""

from __future__ import annotations

import polars as pl

from dashboard.engine.load.devices import CATEGORIES, UNREAD, accelerator, gpu_vendor
from dashboard.engine.load.reading import _Reading
from dashboard.engine.model.trace import GPU_CATEGORIES, Cut, Trace
from dashboard.engine.rules.ops import STEP_MARK


def note_cut(trace: Trace, reading: _Reading, last_ts_ns: int | None) -> None:
    """Set trace.cut and put its warning first when the file was cut off mid-write (`last_ts_ns`:
    the last readable event's time from the trace start); say so when only the gzip stream was
    cut, after the trace's JSON had ended."""
    if reading.cut is not None:
        trace.cut = _cut(reading, last_ts_ns)
        reading.warnings.insert(0, _cut_warning(trace, reading))
    elif reading.gzip_cut is not None:
        reading.warnings.insert(
            0,
            f"{reading.label}: the gzip stream is cut off after {reading.gzip_cut:,} bytes, but only after the "
            "trace's JSON had ended: nothing of the trace is missing",
        )


def note_unread(trace: Trace, reading: _Reading) -> None:
    """Warn about what the file holds that no analysis will count: events in categories the engine
    does not analyse, steps without any op or device work, and bytes that were not UTF-8."""
    label = reading.label
    unread = {
        cat or "(no category)": n
        for cat, n in trace.raw_categories.items()
        if CATEGORIES.get(cat.lower(), ("", UNREAD, None))[1] == UNREAD
    }
    if unread:
        listed = "; ".join(f"{cat} {n:,}" for cat, n in unread.items())
        reading.warnings.append(
            f"{label}: {sum(unread.values()):,} events in categories the engine does not analyse "
            f"(kept in the events table, counted in no step's work): {listed}"
        )
    empty = _empty_steps_warning(trace)
    if empty:
        reading.warnings.append(f"{label}: {empty}")
    if reading.replaced:
        reading.warnings.append(
            f"{label}: {reading.replaced:,} byte sequences that are not valid UTF-8 were read as U+FFFD (\ufffd)"
        )


def _empty_steps_warning(trace: Trace) -> str | None:
    """Why every step's work is 0 when the steps hold no cpu_op and the trace no device event
    (a CPU trace of gloo collectives holds only annotations, say), or None when they hold work."""
    ev = trace.events
    if ev["cat"].is_in(GPU_CATEGORIES).any():
        return None  # device work outside any step is reported with its launches
    inside = ev.select("step", "cat", "name").filter(
        pl.col("step").is_not_null() & ~(pl.col("name").cast(pl.String).str.starts_with(STEP_MARK))
    )
    if (inside["cat"].cast(pl.String) == "cpu_op").any():
        return None
    held = inside.group_by(pl.col("cat").cast(pl.String)).len().sort(["len", "cat"], descending=[True, False])
    what = (
        ", ".join(f"{cat or '(no category)'} {n:,}" for cat, n in held.iter_rows())
        or "nothing besides their ProfilerStep marks"
    )
    n = trace.steps.height
    where = (
        "the trace (one implicit step) holds"
        if trace.implicit_step
        else ("the one step holds" if n == 1 else f"the {n:,} steps hold")
    )
    return (
        f"{where} no cpu_op and no device event, only {what}, so every step's work is 0 "
        "(the profiler recorded annotations without ops, as a CPU trace of gloo collectives can)"
    )


def _cut(reading: _Reading, last_ts_ns: int | None) -> Cut:
    point = reading.cut
    return Cut(
        bytes_kept=point.kept,
        bytes_total=point.total,
        last_ts_ns=last_ts_ns,
        gzip_bytes=reading.gzip_cut,
        events_whole=point.events_whole,
    )


def _cut_warning(trace: Trace, reading: _Reading) -> str:
    """One line: where the file was cut, what was read, and what that means for device activity."""
    cut, what = trace.cut, reading.cut.what
    stream = f"its gzip stream ends after {cut.gzip_bytes:,} bytes; " if cut.gzip_bytes is not None else ""
    if cut.events_whole:
        return (
            f"{reading.label}: the file is cut off after its traceEvents array had ended (the profiler was probably "
            f"killed mid-write): {stream}every event was read, {cut.bytes_kept:,} of the {cut.bytes_total:,} JSON "
            "bytes present; only metadata written after the events is lost"
        )
    at = (
        "at an unreadable timestamp"
        if cut.last_ts_ns is None
        else f"at ts {_readable_ns(cut.last_ts_ns)} after the trace start"
    )
    if trace.has_gpu:
        device = "the device events written after the cut are missing"
    else:
        kind = accelerator(trace.raw_categories) or gpu_vendor(trace.meta)
        device = f"none survived, so this {kind} trace reads as CPU-only" if kind else "any device activity is missing"
    return (
        f"{reading.label}: the file is cut off {at} (the profiler was probably killed mid-write): {stream}{what}, "
        f"{cut.bytes_kept:,} of the {cut.bytes_total:,} JSON bytes present ({100.0 * cut.kept_share:.1f}%); "
        f"whatever was written after that point is lost. Kineto writes device activity after the host ops: {device}"
    )


def _readable_ns(ns: int) -> str:
    """ns as µs, ms or s, whichever reads best."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.3g} {unit}" if abs(ns) < 1000 * scale else f"{ns / scale:,.0f} {unit}"
    return f"{ns} ns"
