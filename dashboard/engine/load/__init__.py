"""Bytes or a path -> Trace.

The fast path decodes the trace with msgspec into small typed structs that keep only the fields
the analyses need (no dict per event), then builds polars columns. Categories are normalized
through one table (CATEGORIES: every accelerator's runtime and device categories in the roles
the analyses read; what no analysis reads is named in a warning). A file cut off mid-write
(plain or .json.gz) is closed after its last whole event and read the same way (event by event
only when that fails), and Trace.cut says where; bytes that are not UTF-8 are read as U+FFFD.
Anything else that is not a trace raises TraceError with one line that names the file and the
problem. Besides the complete and flow events, the "[memory]" instant events that
profile_memory=True writes are kept (Trace.memory, built by memory.memory_table), on every path
(the scanner, msgspec, the worker slices, a cut file's salvage) alike.

A trace may hold at most MAX_JSON_BYTES of JSON (4 GiB; $ATTNSCOPE_MAX_JSON_BYTES or
load_trace(max_json_bytes=...) change it): a plain file or an upload over it is refused before it
is read, and a .json.gz is inflated chunk by chunk and refused as soon as it passes it, so a gzip
bomb costs no more memory than a small trace. A .json.gz that inflates to SLICED_MIN_BYTES or more
is inflated into a temporary file and read in slices by worker processes like a large plain file.

The package's parts, in the order a file goes through them:
  limits.py    the most JSON a trace may hold ($ATTNSCOPE_MAX_JSON_BYTES) and the refusals
  inflate.py   bytes or a path -> JSON bytes: gzip inflation chunk by chunk, spilling to a file
  decode.py    JSON -> event structs (msgspec), and the salvage of a file cut off mid-write
  scanner.py   the C scanner's glue (dashboard/engine/_scan.c): JSON -> columns, no struct per event
  frames.py    event structs or scanned columns -> the Trace's polars frames, steps and warnings
  order.py     the events table's order: by thread as text, start, the longer span first
  devices.py   the category table (roles, accelerators) and the device vendor the summary shows
  workers.py   the slice worker processes and their pipe protocol
  slices.py    a large plain file read in slices by the workers
  arrival.py   a file read in slices while it is still being written (an upload, an inflation)
  reading.py   what every part shares: TraceError, the event structs, what one load learns
`load_trace` (here) is the one door.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Union

import msgspec

# columns imports numpy, whose OpenBLAS thread busy-waits for about 0.1 s once started: started
# before polars' import (about 0.1 s), that spin overlaps the import rather than a first load.
import dashboard.engine.model.columns  # noqa: F401  before polars: see above
from dashboard.engine.model.trace import Trace

from dashboard.engine.load import slices
from dashboard.engine.load.arrival import Arrival, take_arrival
from dashboard.engine.load.decode import _decode
from dashboard.engine.load.devices import (  # noqa: F401  re-exported: the category table and device detection
    CATEGORIES,
    CATEGORY_ALIASES,
    DEVICE,
    FLOW,
    GPU_VENDORS,
    HOST,
    LAUNCH,
    QUIET,
    UNREAD,
    accelerator,
    device_names,
    gpu_vendor,
)
from dashboard.engine.load.frames import build_trace
from dashboard.engine.load.inflate import _Early, _json_of, read_source
from dashboard.engine.load.limits import MAX_JSON_BYTES, MAX_JSON_ENV, _too_large, json_limit  # noqa: F401
from dashboard.engine.load.reading import GZIP_MAGIC, TraceError, _label, _without_bom
from dashboard.engine.load.workers import _PARSE_LOCK, _workers

__all__ = [
    "Arrival",
    "CATEGORIES",
    "CATEGORY_ALIASES",
    "DEVICE",
    "FLOW",
    "GPU_VENDORS",
    "HOST",
    "LAUNCH",
    "MAX_JSON_BYTES",
    "MAX_JSON_ENV",
    "QUIET",
    "UNREAD",
    "TraceError",
    "accelerator",
    "build_trace",
    "device_names",
    "gpu_vendor",
    "json_limit",
    "load_trace",
    "read_source",
]


def load_trace(
    source: Union[str, os.PathLike, bytes],
    name: str | None = None,
    progress: Callable[[float], None] | None = None,
    max_json_bytes: int | None = None,
    *,
    keep_workers: bool = False,
    arrival: Arrival | None = None,
) -> Trace:
    """Load a torch.profiler Chrome trace (.json or .json.gz, any file name) into a Trace.
    `progress`, when given, is called with the fraction of events decoded (0..1) as loading goes.
    `max_json_bytes`: the most JSON the trace may hold (its inflated size for gzip), default
    $ATTNSCOPE_MAX_JSON_BYTES, else MAX_JSON_BYTES (4 GiB).
    `keep_workers`: a large file's slice worker processes stay for the next large file (closed
    after WORKERS_IDLE_S without one); by default they are closed as soon as this file's slices
    are read, before the tables are built, so that their memory is not held beside the trace's.
    `arrival`: the reading of `source` started while it was written (arrival.arrival(), an
    upload): its trace is taken instead of parsing the file again, unless it gave up.
    Every failure is a TraceError whose message is one line naming the file."""
    label = _label(source, name)
    limit = json_limit(max_json_bytes, label)
    if arrival is not None and not isinstance(source, (bytes, bytearray, memoryview)):
        early = take_arrival(arrival, source, label, progress)  # read while it arrived (an upload)
        if early is not None:
            if early.size_bytes > limit:
                raise _too_large(label, early.size_bytes, limit)
            return early
    try:
        with _PARSE_LOCK:
            return _load(source, name, progress, limit, keep_workers)
    except RecursionError:  # msgspec and the json module stop at ~1,000 levels of nesting
        raise TraceError(
            f"{label}: JSON nested more than about 1,000 levels deep: not a trace this tool can read"
        ) from None
    except UnicodeDecodeError as exc:  # where a repair was not possible (older msgspec raises this)
        raise TraceError(f"{label}: not valid JSON (a byte that is not UTF-8 at position {exc.start})") from None


def _plain_file_size(path: Path) -> int | None:
    """The size of a regular file that does not start with gzip's magic, else None (a pipe is
    not read here: its first bytes would be lost; reading it later says what is wrong, if anything)."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as fh:
            return None if fh.read(2) == GZIP_MAGIC else os.fstat(fh.fileno()).st_size
    except OSError:
        return None


def _load(
    source: Union[str, os.PathLike, bytes],
    name: str | None,
    progress: Callable[[float], None] | None,
    limit: int,
    keep_workers: bool = False,
) -> Trace:
    label = _label(source, name)
    size = None if isinstance(source, (bytes, bytearray, memoryview)) else _plain_file_size(Path(source))
    if size is not None:
        if size > limit:  # refused before it is read
            raise _too_large(label, size, limit)
        sliced = slices._load_sliced(Path(source), name, progress, keep_workers=keep_workers)
        if sliced is not None:
            return sliced
    # gzip inflating to a size the sliced path reads, or bytes of that size, go to a temporary file for it
    spill_at = slices.SLICED_MIN_BYTES if _workers() >= 2 else None
    with _json_of(source, label, limit, spill_at, _Early(progress, keep_workers)) as got:
        reading = got.reading
        reading.progress = progress
        if got.trace is not None:
            return got.trace  # read in slices while it was inflated
        try:
            if got.path is not None:
                sliced = slices._load_sliced(
                    got.path, label, progress, gzip_cut=reading.gzip_cut, keep_workers=keep_workers
                )
                if sliced is not None:
                    return sliced
                # a cut or odd file is read in one process, as a plain one is
                data = _without_bom(got.path.read_bytes())
                got.path.unlink()
            else:
                data, got.data = got.data, None
            size = len(data)
            meta, batches = _decode(data, reading)
            del data  # the batches keep what they still need
            trace = build_trace(batches, meta, reading)
        except TraceError as exc:
            if reading.gzip_cut is None:
                raise
            problem = str(exc).removeprefix(reading.label + ": ")
            raise TraceError(
                f"{reading.label}: gzip stream is truncated (the file was cut off after {reading.gzip_cut:,} bytes) "
                f"and what it holds cannot be read: {problem}"
            ) from None
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise TraceError(f"{reading.label}: not valid JSON ({exc})") from None
    trace.size_bytes = size
    return trace
