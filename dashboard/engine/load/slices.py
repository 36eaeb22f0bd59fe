"""A large plain-JSON trace read in slices (SLICE_BYTES each, twice that from 512 MB of events) by
the worker processes: the metadata at its head and tail, the cuts between whole events, and the
frames made of what the workers read (`parts_of`; their loop is model/slice_workers.serve).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import msgspec

from dashboard.engine.model import slice_workers
from dashboard.engine.model.trace import Trace

from dashboard.engine.load import frames
from dashboard.engine.load.decode import _EVENT_GAP, _decode_each, _decode_raw_list, _utf8_safe
from dashboard.engine.load.frames import _Part, _drain, _read_batch
from dashboard.engine.load.reading import GZIP_MAGIC, _LEADING_SPACE, _Reading, _decode_events, _decode_top
from dashboard.engine.load.scanner import _part_of, _scan, _scanned_part
from dashboard.engine.load.workers import (
    _PARSE_LOCK,
    _SliceFailed,
    _close_when_idle,
    _discard_workers,
    _release_workers,
    _slice_workers,
    _workers,
)


# Plain JSON files at least this large are read in slices by worker processes, one per core, and
# so is a .json.gz or gzip upload that inflates to this much (into a temporary file); smaller ones
# (and plain uploads, cut or odd files) take the one-process path. (slice_workers.prestart, which
# starts the workers before a command's imports, reads it there.)
SLICED_MIN_BYTES = slice_workers.SLICED_MIN_BYTES
# Bytes of traceEvents per slice: what one worker holds at once is about 4x this.
SLICE_BYTES = 8 << 20
# A file's events at least this large are cut into slices of twice SLICE_BYTES: each slice has fixed
# costs (about 33 polars calls, its pickle, the pipe), and the 1 GB traces' first open took 0.25 s
# less CPU and 3-4% less time with half as many slices, its peak the same (the loading process's);
# at 32 MB the workers' fresh pages cost more than that saved. Below it, the ~180 MB traces gained
# nothing and a worker's larger slice set the dense one's peak (1.09x -> 1.13x the JSON).
LARGE_SLICES_FROM_BYTES = slice_workers.PLAIN_FROM_BYTES

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_ARRAY_CLOSE = re.compile(rb"[\}\[]\s*\]")  # the end of an array of objects (or of an empty one)
_EDGE_BYTES = 1 << 20  # how much of the head and the tail is read at first to find traceEvents
_EDGE_MAX = 64 << 20


def _slice_bytes(events_bytes: int) -> int:
    """Bytes per slice for a file whose traceEvents take `events_bytes`."""
    return 2 * SLICE_BYTES if events_bytes >= LARGE_SLICES_FROM_BYTES else SLICE_BYTES


def _pread(fh: Any, offset: int, size: int) -> bytes:
    fh.seek(offset)
    return fh.read(size)


def _head(fh: Any, size: int, reading: _Reading) -> tuple[dict[str, Any], int] | None:
    """The metadata before traceEvents and the offset of the array's first byte, or None when the
    file does not start like {..., "traceEvents": [ within _EDGE_MAX bytes."""
    want = _EDGE_BYTES
    while True:
        head = _pread(fh, 0, min(want, size))
        found = _EVENTS_KEY.search(head)
        if found is not None:
            break
        if want >= min(_EDGE_MAX, size):
            return None
        want *= 4
    before = head[: found.start()]
    start = _LEADING_SPACE.match(before, 3 if before[:3] == b"\xef\xbb\xbf" else 0).end()
    body = before[start:].rstrip()
    if body[:1] != b"{":
        return None
    body = body.rstrip(b",")
    try:
        top = _utf8_safe(_decode_top, body + b"}", reading) if body != b"{" else {}
        meta = {key: _utf8_safe(msgspec.json.decode, raw, reading) for key, raw in top.items()}
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # the key was not at the top level: the one-process path reads the file
    return meta, found.end()


def _tail(fh: Any, size: int, events_start: int, reading: _Reading) -> tuple[dict[str, Any], int] | None:
    """The metadata after traceEvents and the offset of the array's closing bracket, or None
    (a cut file, or more than _EDGE_MAX bytes after the events)."""
    last = _pread(fh, max(size - 4096, events_start), 4096).rstrip()
    if last and last[-1:] != b"}":
        return None  # the object is not closed: a cut file, read in one process (no search needed)
    want = _EDGE_BYTES
    while True:
        offset = max(size - want, events_start)
        tail = bytearray(_pread(fh, offset, size - offset))
        view = memoryview(tail)
        # The first ] after which the rest closes the object. Each try costs only what the decoder
        # reads before it fails: no copy of the rest per candidate, since a cut file has a
        # candidate in every `"Input Dims": [],` of its last 64 MB (a copy each took minutes).
        for found in _ARRAY_CLOSE.finditer(tail):
            after = _LEADING_SPACE.match(tail, found.end()).end()
            if tail[after : after + 1] == b"}":
                if _LEADING_SPACE.match(tail, after + 1).end() == len(tail):
                    return {}, offset + found.end() - 1
                continue
            if tail[after : after + 1] != b",":
                continue
            tail[after] = ord("{")  # `, "key": ...}` read as the object `{ "key": ...}`
            try:
                top = _utf8_safe(_decode_top, view[after:], reading)
            except (msgspec.DecodeError, msgspec.ValidationError):
                tail[after] = ord(",")
                continue
            if "traceEvents" in top:
                return None
            meta = {key: _utf8_safe(msgspec.json.decode, raw, reading) for key, raw in top.items()}
            return meta, offset + found.end() - 1
        if offset == events_start or want >= _EDGE_MAX:
            return None
        want *= 4


def _slices(fh: Any, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """[start, end) cut into slices of about `size` bytes between two events (at a '},{'; a cut
    inside a string or a nested object makes its slices fail to decode, and the file then takes
    the one-process path)."""
    bounds, lo = [], start
    while end - lo > size + size // 2:
        cut = _next_cut(fh, lo, size, min(_EDGE_BYTES, end - lo - size))
        if cut is None:
            break
        bounds.append((lo, cut[0]))
        lo = cut[1]
    bounds.append((lo, end))
    return bounds


def _next_cut(fh: Any, lo: int, size: int, window: int) -> tuple[int, int] | None:
    """Where a slice starting at `lo` ends (after the '}' of the first '},{' found within
    `window` bytes past lo + size) and the next one starts (at its '{'); None when there is none."""
    gap = _EVENT_GAP.search(_pread(fh, lo + size, window))
    if gap is None:
        return None
    return lo + size + gap.start() + 1, lo + size + gap.end() - 1


class _Stopped(Exception):
    """The loading thread stopped reading a file that is still being inflated for it."""


def parts_of(status: str, answer: Any, task: tuple[str, int, int, str, bool]) -> tuple[list[_Part], _Reading | None]:
    """A worker's answer to `task` (path, lo, hi, label, plain) -> the slice's parts and what its reading
    learnt (None: nothing, the scanner's). A "scanned" answer's columns are made into frames here,
    in the loading process (see model/slice_workers.serve); _SliceFailed for a "failed" one."""
    if status == "ok":
        return answer
    if status != "scanned":
        raise _SliceFailed(answer)
    seen, n_complete, n_flows, tables, plain, odd, last, n_memory = answer
    try:
        columns = [_scan.arrow(*column) for column in plain]
        part = _part_of((seen, n_complete, n_flows, tables, columns, odd, last, n_memory))
    except Exception as exc:  # noqa: BLE001 - as a worker's failure: the file takes the one-process path
        raise _SliceFailed(f"{type(exc).__name__}: {exc}") from None
    if part is not None:
        return [part], None
    # an odd value that is not UTF-8: the msgspec path repairs it and says so, here (rare)
    path, lo, hi, label, _ = task
    got = decoded_slice(slice_workers.read_slice(path, lo, hi), label)
    return parts_of(*got, task)


def worker_slice(raw: bytearray, label: str, scan: bool = True) -> tuple[str, Any]:
    """A worker's answer for the events of a slice (between its brackets) as frames: ("ok",
    (parts, what the reading learnt: warnings, bytes that were not UTF-8, events skipped)) from
    the C scanner (unless `scan` is False: it has left them already) or else msgspec, or
    ("failed", why) when they are not a list of events."""
    part = _scanned_part(raw) if scan else None
    if part is not None:
        return ("ok", ([part], _Reading(label)))
    return decoded_slice(raw, label)


def decoded_slice(raw: bytearray, label: str) -> tuple[str, Any]:
    """The events of a slice (between its brackets) that the scanner left, read through msgspec as
    the one-process path reads them: ("ok", (parts, what the reading learnt)), or ("failed", why)."""
    reading = _Reading(label)
    raw = bytes(raw)
    try:
        batch = _utf8_safe(_decode_events, raw, reading)
    except msgspec.ValidationError as exc:
        try:
            raws = _utf8_safe(_decode_raw_list, raw, reading)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return ("failed", "not a list of events")
        batch = _decode_each(raws, reading, note=str(exc))
    except msgspec.DecodeError:
        return ("failed", "not a list of events")
    del raw
    return ("ok", ([_read_batch(batch)], reading))


def _load_sliced(
    path: Path,
    name: str | None,
    progress: Callable[[float], None] | None,
    gzip_cut: int | None = None,
    keep_workers: bool = False,
) -> Trace | None:
    """A large plain-JSON trace read in slices by worker processes (the file's bytes are never
    all in this process), or None when the file is not one that this path reads: the
    one-process path then reads it and says what is wrong, if anything. `gzip_cut`: the file is
    what a .json.gz cut off after that many bytes inflated to (for the warning). `keep_workers`:
    see load_trace."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size < SLICED_MIN_BYTES or _workers() < 2 or not path.is_file():
        return None
    reading = _Reading(name or path.name, progress=progress, gzip_cut=gzip_cut)
    with open(path, "rb") as fh:
        first = _pread(fh, 0, 3)
        if first[:2] == GZIP_MAGIC:
            return None
        bom = first == b"\xef\xbb\xbf"
        head = _head(fh, size, reading)
        if head is None:
            return None
        meta, start = head
        tail = _tail(fh, size, start, reading)
        if tail is None:
            return None
        meta_after, end = tail
        if not _pread(fh, start, min(end - start, 4096)).strip():
            return None  # no events: the one-process path says so
        bounds = _slices(fh, start, end, _slice_bytes(end - start))
    meta.update(meta_after)
    parts: list[_Part] = []
    # Under _PARSE_LOCK: the workers' pipes carry one file's tasks and answers in order, and the idle
    # timer cannot close them mid-file.
    with _PARSE_LOCK:
        try:
            workers = _slice_workers()
            plain = end - start >= slice_workers.PLAIN_FROM_BYTES
            tasks = [(str(path), lo, hi, reading.label, plain) for lo, hi in bounds]
            for done, (task, (status, answer)) in enumerate(zip(tasks, workers.run(tasks))):
                got, learnt = parts_of(status, answer, task)
                parts.extend(got)
                if learnt is not None:
                    reading.add(learnt)
                del answer  # (its buffers) not held while the tables are built
                if progress:
                    progress((done + 1) / len(bounds))
        except (_SliceFailed, OSError, EOFError, ValueError, AttributeError, ImportError):  # pickle's, a worker's
            _discard_workers()  # the rest of their answers are not read: start afresh next time
            return None
        except BaseException:
            # stopped mid-file, e.g. by the progress callback: streamlit raises its RerunException
            # there when a tab is clicked during a parse. The answers still in the pipes would
            # otherwise be read as the next file's (a wrong trace).
            _discard_workers()
            raise
        if keep_workers:
            _close_when_idle(workers)
        else:
            _release_workers()
    trace = frames._build_trace(_drain(parts), meta, reading)
    trace.size_bytes = size - (3 if bom else 0)  # the JSON bytes, as the one-process path counts them
    return trace
