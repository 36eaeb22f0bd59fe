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
"""

from __future__ import annotations

import itertools
import json
import os
import re
import tempfile
import threading
import time
import warnings as _warnings
import zlib

from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, TypeVar, Union

import msgspec

# columns imports numpy, whose OpenBLAS thread busy-waits for about 0.1 s once started: started
# before polars' import (about 0.1 s), that spin overlaps the import rather than a first load.
from dashboard.engine.columns import from_arrow  # before polars: see above
import polars as pl

from dashboard.engine.memory import memory_table
from dashboard.engine.model import GPU_CATEGORIES, LAUNCH_CATEGORIES, Cut, Trace
from dashboard.engine.steps import assign_steps, find_steps, nesting

try:  # the C scanner (setup.py); without it every file is read through msgspec, with the same results
    from dashboard.engine import _scan
except ImportError:  # pragma: no cover - a build without a C compiler
    _scan = None

GZIP_MAGIC = b"\x1f\x8b"

# Every category the loader knows, lower-cased as written (Kineto's ActivityType names, the 2021
# legacy names, older flow names) -> (the normalized category the analyses read, its role, the
# accelerator it implies). One table: the aliases, the launch and device roles, the vendor shown
# by summary.device_info and the "not analysed" warning all come from it.
# Roles: device (work on the accelerator; normalized to model.GPU_CATEGORIES), launch (the host
# call that queued it, tied by args.correlation; model.LAUNCH_CATEGORIES), host (CPU spans the
# analyses read), flow (ac2g/fwdbwd links), quiet (profiler bookkeeping: nothing to analyse, no
# warning), unread (known, kept in the events table, not analysed: named in a warning).
# Categories missing here are kept as written and warned about like unread ones.
DEVICE, LAUNCH, HOST, FLOW, QUIET, UNREAD = "device", "launch", "host", "flow", "quiet", "unread"
CATEGORIES: dict[str, tuple[str, str, str | None]] = {
    "cpu_op": ("cpu_op", HOST, None),
    "operator": ("cpu_op", HOST, None),
    "user_annotation": ("user_annotation", HOST, None),
    "gpu_user_annotation": ("gpu_user_annotation", HOST, None),
    "python_function": ("python_function", HOST, None),
    "kernel": ("kernel", DEVICE, None),
    "gpu_memcpy": ("gpu_memcpy", DEVICE, None),
    "memcpy": ("gpu_memcpy", DEVICE, None),
    "gpu_memset": ("gpu_memset", DEVICE, None),
    "memset": ("gpu_memset", DEVICE, None),
    "mtia_ccp_events": ("kernel", DEVICE, "mtia"),
    "cuda_runtime": ("cuda_runtime", LAUNCH, None),  # ROCm writes its hip* calls here too
    "runtime": ("cuda_runtime", LAUNCH, None),
    "cuda_driver": ("cuda_driver", LAUNCH, None),
    "driver": ("cuda_driver", LAUNCH, None),
    "mtia_runtime": ("mtia_runtime", LAUNCH, "mtia"),
    "glow_runtime": ("glow_runtime", LAUNCH, None),
    "xpu_runtime": ("xpu_runtime", LAUNCH, "xpu"),
    "xpu_driver": ("xpu_driver", LAUNCH, "xpu"),
    "hpu_op": ("hpu_op", LAUNCH, "hpu"),
    "privateuse1_runtime": ("privateuse1_runtime", LAUNCH, "privateuse1"),
    "privateuse1_driver": ("privateuse1_driver", LAUNCH, "privateuse1"),
    "ac2g": ("ac2g", FLOW, None),
    "async_cpu_to_gpu": ("ac2g", FLOW, None),
    "async": ("ac2g", FLOW, None),
    "fwdbwd": ("fwdbwd", FLOW, None),
    "trace": ("Trace", QUIET, None),
    "overhead": ("overhead", QUIET, None),
    "cpu_instant_event": ("cpu_instant_event", QUIET, None),
    "external_correlation": ("external_correlation", QUIET, None),
    "cuda_sync": ("cuda_sync", UNREAD, None),
    "cuda_event": ("cuda_event", UNREAD, None),
    "cuda_profiler_range": ("cuda_profiler_range", UNREAD, None),
    "gpu_pm_counter": ("gpu_pm_counter", UNREAD, None),
    "collective_comm": ("collective_comm", UNREAD, None),
    "mtia_insight": ("mtia_insight", UNREAD, "mtia"),
    "mtia_counters": ("mtia_counters", UNREAD, "mtia"),
    "xpu_scope_profiler": ("xpu_scope_profiler", UNREAD, "xpu"),
    "xpu_sync": ("xpu_sync", UNREAD, "xpu"),
}
# Lower-cased category as written -> normalized category. Unknown categories are kept as written.
CATEGORY_ALIASES: dict[str, str] = {raw: row[0] for raw, row in CATEGORIES.items()}

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
    # scalar arguments as text (is_causal, max lengths, dropout): what attention's work depends on
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")
    # a "[memory]" event's (profile_memory=True): raw, so that no value costs an event (see _memory_ints)
    mem_device_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Device Type")
    mem_device_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Device Id")
    mem_bytes: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Bytes")
    mem_total_allocated: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Total Allocated")
    mem_total_reserved: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Total Reserved")
    mem_addr: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Addr")


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


class _CutPoint(NamedTuple):
    """Where a cut-off document was closed, before the events are parsed."""

    kept: int  # JSON bytes up to the end of the last whole event
    total: int  # JSON bytes present
    what: str  # what was read, for the warning
    events_whole: bool  # the traceEvents array had ended before the cut


@dataclass
class _Reading:
    """What one load learns about its file besides the events, for the warnings and Trace.cut."""

    label: str
    warnings: list[str] = field(default_factory=list)
    progress: Callable[[float], None] | None = None
    gzip_cut: int | None = None  # compressed bytes in the file when its gzip stream is cut off
    cut: _CutPoint | None = None
    replaced: int = 0  # byte sequences that were not UTF-8, read as U+FFFD
    skipped: int = 0  # events that could not be read
    skip_note: str | None = None  # why the first of them could not

    def add(self, other: "_Reading") -> None:
        """Take in what a worker's reading of one slice learnt."""
        self.warnings.extend(other.warnings)
        self.replaced += other.replaced
        self.skipped += other.skipped
        if self.skip_note is None:
            self.skip_note = other.skip_note


# The most JSON one trace may hold, bytes: the size of a plain file or upload, or what a .json.gz
# inflates to. 4 GiB is four times the largest real traces seen (about 1 GB of JSON), and a
# trace that large still opens in the memory of a 16 GB machine (a first open peaks at about
# 1-2x the JSON); past it a file is far more likely a gzip bomb (4 MB of .gz inflating to 4 GiB
# of whitespace) or a mistake than a trace, and is refused with one line instead of exhausting a
# shared server's memory. $ATTNSCOPE_MAX_JSON_BYTES (bytes) or load_trace(max_json_bytes=...)
# raise or lower it.
MAX_JSON_BYTES = 4 << 30
MAX_JSON_ENV = "ATTNSCOPE_MAX_JSON_BYTES"
# A .json.gz is read this many compressed bytes at a time, and one zlib call gives at most this
# many inflated bytes: what the inflation holds at once, whatever the stream's ratio.
GZIP_READ_BYTES = 1 << 20
GZIP_OUT_BYTES = 8 << 20
# A stream whose trailer says it inflates to less than this is read and inflated in one piece:
# no piece joined to the next (a copy of the whole, on fresh pages; an 8.6 MB trace's inflation
# took 17 ms with it, 6-14 ms without). The trailer's size is a hint (mod 2**32, of the last
# member only): a stream that inflates further, is cut or has several members is read on in
# pieces as before, and no zlib call gives more than the hint allowed.
GZIP_ONE_PIECE_BYTES = 48 << 20


def json_limit(value: int | None = None, label: str = "") -> int:
    """The limit on a trace's JSON bytes: `value` when given, else $ATTNSCOPE_MAX_JSON_BYTES,
    else MAX_JSON_BYTES. A bad setting is a TraceError (one line; `label` first when given)."""
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"max_json_bytes must be a whole number of bytes above 0, not {value!r}")
        return value
    raw = os.environ.get(MAX_JSON_ENV)
    if raw is None or not raw.strip():
        return MAX_JSON_BYTES
    try:
        limit = int(raw.strip())
    except ValueError:
        limit = 0
    if limit <= 0:
        where = f"{label}: not read: " if label else ""
        raise TraceError(
            f"{where}{MAX_JSON_ENV}={raw!r} is not a whole number of bytes above 0 "
            f"(e.g. {8 << 30} for 8 GiB; unset it for the default, {_amount(MAX_JSON_BYTES)})"
        )
    return limit


def _amount(size: int) -> str:
    """A byte count as people read it: '4.0 GiB (4,294,967,296 bytes)', or '1,000 bytes'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit} ({size:,} bytes)"
    return f"{size:,} bytes"


def _too_large(label: str, size: int, limit: int) -> TraceError:
    return TraceError(f"{label}: {_amount(size)} of JSON is more than the limit of {_amount(limit)} "
                      f"(set {MAX_JSON_ENV} to raise it)")


def _inflates_too_far(label: str, limit: int) -> TraceError:
    return TraceError(f"{label}: inflates to more than {_amount(limit)} of JSON "
                      f"(the limit; set {MAX_JSON_ENV} to raise it)")


def read_source(
    source: Union[str, os.PathLike, bytes], name: str | None = None, max_json_bytes: int | None = None
) -> tuple[bytes, str]:
    """Return the JSON bytes of a trace (gunzipped when the content starts with gzip's magic; a
    cut-off gzip stream gives what it holds) and a display name. A path or raw bytes (an upload)
    are both accepted; JSON over the limit (see MAX_JSON_BYTES) is a TraceError."""
    label = _label(source, name)
    with _json_of(source, label, json_limit(max_json_bytes, label), spill_at=None) as got:
        return got.data, label


@dataclass
class _Json:
    """A trace's JSON bytes: in memory (data, without a byte order mark), or, for a .json.gz that
    inflated to SLICED_MIN_BYTES or more or bytes (an upload) of that size, in a temporary file
    (path, as inflated or given)."""

    reading: _Reading
    data: bytes | None = None
    path: Path | None = None
    trace: "Trace | None" = None  # the trace, read in slices while the file was inflated (_inflate_reading)


@contextmanager
def _json_of(
    source: Union[str, os.PathLike, bytes], label: str, limit: int, spill_at: int | None,
    early: "_Early | None" = None,
) -> Iterator[_Json]:
    """The JSON of a path or of bytes, gunzipped when the content starts with gzip's magic (a
    cut-off gzip stream gives what its whole blocks hold), at most `limit` bytes of it. A gzip
    stream that inflates to `spill_at` bytes or more, or bytes of that size, go to a temporary
    file, removed on exit. `early`: a large gzip stream is inflated in a thread while the worker
    processes read the file's slices (see _inflate_reading); the trace comes back as `trace`."""
    sink = _Sink(spill_at, label)
    try:
        expected = _inflates_large(source) if early is not None and spill_at is not None else None
        if expected is not None:
            sink.watched, sink.expected = True, expected
            yield _inflate_reading(source, _Reading(label), limit, sink, early)
        else:
            yield _read_json(source, _Reading(label), limit, sink)
    finally:
        sink.remove()


@dataclass
class _Early:
    """How a load that reads a .json.gz while inflating it reports and leaves its workers."""

    progress: Callable[[float], None] | None
    keep_workers: bool


def _inflates_large(source: Union[str, os.PathLike, bytes]) -> int | None:
    """For a gzip stream that may inflate to SLICED_MIN_BYTES or more, the size its trailer gives
    (0 when that size is not plausible), else None. The trailer is a hint (mod 2**32, of the last
    member only): only a plausible one rules the overlap out, and the result is the same either way."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source).cast("B")
        if view[:2] != GZIP_MAGIC:
            return None
        size, tail = len(view), bytes(view[-4:])
    else:
        try:
            if not Path(source).is_file():
                return None  # a pipe is not read here: its first bytes would be lost
            with open(source, "rb") as fh:
                if fh.read(2) != GZIP_MAGIC:
                    return None
                size, tail = _gzip_tail(fh)
        except OSError:
            return None  # reading it again says what is wrong
    hint = int.from_bytes(tail, "little") if len(tail) == 4 else -1
    if size <= hint < SLICED_MIN_BYTES:
        return None
    return hint if hint >= size else 0


def _inflate_reading(source: Union[str, os.PathLike, bytes], reading: _Reading, limit: int, sink: "_Sink", early: _Early) -> _Json:
    """_read_json in a thread (zlib inflates without the GIL), while this thread hands the slices
    of the temporary file, once the inflated JSON has spilled there, to the worker processes as
    they land (an Arrival read here: this thread holds _PARSE_LOCK). The 910 MB trace as .json.gz
    opens in 5.3 s where inflating first, then reading, took 5.9-6.1 s. The early trace is kept
    only when the stream inflated whole: a cut, failed or refused stream, or a file the early
    reading gave up on, is then read as before, from the file or with the error."""
    outcome: dict[str, Any] = {}

    def inflate() -> None:
        clean = False
        try:
            outcome["json"] = _read_json(source, reading, limit, sink)
            clean = reading.gzip_cut is None
        except BaseException as exc:  # noqa: BLE001 - raised again in the loading thread
            outcome["error"] = exc
        finally:
            _give_back_freed_memory()  # before the tables are built
            sink.ended(clean)

    thread = threading.Thread(target=inflate, name="attnscope-inflate", daemon=True)
    thread.start()
    trace = None
    try:
        sink.spilled.wait()  # the temporary file exists, or the inflation ended before it did
        if sink.early is not None:
            trace = sink.early.read_here(early.progress, early.keep_workers)
    except BaseException:
        sink.stopped = True  # stopped here (a rerun, Ctrl-C): the inflation stops at its next piece
        raise
    finally:
        thread.join()
    if "error" in outcome:
        raise outcome["error"]
    got: _Json = outcome["json"]
    if trace is not None and sink.whole:
        got.trace = trace
    return got


def _give_back_freed_memory() -> None:
    """Hand the pages a thread freed back to the system (glibc's malloc_trim; elsewhere nothing).
    glibc keeps what a thread frees in that thread's own arena: the inflation's pieces stayed
    resident beside the tables built next, and the dashboard's upload of the 910 MB trace as
    .json.gz peaked at 0.96-1.07x the JSON where inflating in the loading thread had peaked at
    0.89-0.92x. Measured cost: a few ms."""
    global _malloc_trim
    if _malloc_trim is None:
        import ctypes

        _malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", False)
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None  # glibc's malloc_trim once looked up; False where there is none


def _read_json(source: Union[str, os.PathLike, bytes], reading: _Reading, limit: int, sink: _Sink) -> _Json:
    label = reading.label
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source).cast("B")
        if view[:2] == GZIP_MAGIC:
            read, out = _gzip_pieces(len(view), bytes(view[-4:]))
            if read >= len(view):  # one piece: the whole stream in one call
                whole = bytes(view)
                if not _inflate_whole(whole, out, reading, limit, sink):
                    _gunzip((whole,), reading, limit, sink, out)
                return sink.finish(reading)
            _gunzip((bytes(view[at : at + read]) for at in range(0, len(view), read)), reading, limit, sink, out)
            return sink.finish(reading)
        if len(view) > limit:
            raise _too_large(label, len(view), limit)
        if sink.spill_at is not None and len(view) >= sink.spill_at:
            sink.spill(view)  # a large upload: read in slices from a file, as a large file is
            return sink.finish(reading)
        return _Json(reading, _without_bom(bytes(source)))
    try:
        fh = open(source, "rb")
    except FileNotFoundError:
        raise TraceError(f"{label}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{label}: is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceError(f"{label}: cannot read ({exc.strerror or exc})") from None
    with fh:
        try:
            first = fh.read(2)
            if first != GZIP_MAGIC:
                size = os.fstat(fh.fileno()).st_size
                if size > limit:  # refused before it is read
                    raise _too_large(label, size, limit)
                data = first + fh.read(limit + 1 - len(first))  # a pipe or a growing file tells no size
        except IsADirectoryError:
            raise TraceError(f"{label}: is a directory, not a trace file") from None
        except OSError as exc:
            raise TraceError(f"{label}: cannot read ({exc.strerror or exc})") from None
        if first == GZIP_MAGIC:
            size, tail = _gzip_tail(fh)
            read, out = _gzip_pieces(size, tail)
            if size and read >= size:  # one piece: the whole stream in one call
                try:
                    whole = first + fh.read(size)
                except OSError as exc:
                    raise TraceError(f"{label}: cannot read ({exc.strerror or exc})") from None
                if not _inflate_whole(whole, out, reading, limit, sink):
                    _gunzip(itertools.chain((whole,), _file_chunks(fh, b"", label, read)), reading, limit, sink, out)  # and any more
                return sink.finish(reading)
            _gunzip(_file_chunks(fh, first, label, read), reading, limit, sink, out)
            return sink.finish(reading)
    if len(data) > limit:
        raise _too_large(label, len(data), limit)
    return _Json(reading, _without_bom(data))


try:  # ISA-L's inflate (python-isal): 2.4-2.9x zlib's speed; without it zlib does the whole job
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover - a platform without its wheel
    _isal_zlib = None


def _inflate_whole(data: bytes, out_bytes: int, reading: _Reading, limit: int, sink: "_Sink") -> bool:
    """Inflate `data` with ISA-L when it is one whole gzip member that gives fewer than `out_bytes`
    bytes (its checksum and length verified), into `sink`; True when done. Anything else (several
    members, padding, a cut or corrupt stream, a trailer that under-states the size) returns False
    having written nothing, and zlib reads it (_gunzip): ISA-L withholds the last bytes of a cut
    stream that zlib gives (5 of 40 random cuts of an 8.6 MB trace came out a byte shorter), and
    what a cut file holds must not depend on which library read it. The 8.6 MB trace inflates in
    5.4 ms where zlib takes 13.5."""
    if _isal_zlib is None:
        return False
    member = _isal_zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        piece = member.decompress(data, min(out_bytes, limit + 1))
    except _isal_zlib.error:
        return False
    if not member.eof or member.unused_data or member.unconsumed_tail:
        return False
    if len(piece) > limit:  # pragma: no cover - the trailer's size is under the limit whenever the one-piece path runs
        raise _inflates_too_far(reading.label, limit)
    if piece:
        sink.write(piece)
    return True


def _gzip_tail(fh: Any) -> tuple[int, bytes]:
    """A gzip file's size and last four bytes (b"" when it cannot seek: a pipe), read back to
    where it was."""
    try:
        at = fh.tell()
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(size - 4, 0))
        tail = fh.read(4)
        fh.seek(at)
    except (OSError, ValueError):  # not seekable: read as it comes
        return 0, b""
    return size, tail


def _gzip_pieces(size: int, tail: bytes) -> tuple[int, int]:
    """(compressed bytes a read, inflated bytes a zlib call at most) for a gzip stream of `size`
    bytes ending in `tail`: whole when its trailer says it inflates to less than
    GZIP_ONE_PIECE_BYTES (and to no less than its own size), else GZIP_READ_BYTES and GZIP_OUT_BYTES."""
    hint = int.from_bytes(tail, "little") if len(tail) == 4 else -1
    if size <= hint < GZIP_ONE_PIECE_BYTES:
        return max(size, 1), hint + 1
    return GZIP_READ_BYTES, GZIP_OUT_BYTES


def _file_chunks(fh: Any, first: bytes, label: str, read: int = GZIP_READ_BYTES) -> Iterator[bytes]:
    yield first
    while True:
        try:
            chunk = fh.read(read)
        except OSError as exc:
            raise TraceError(f"{label}: cannot read ({exc.strerror or exc})") from None
        if not chunk:
            return
        yield chunk


def _without_bom(data: bytes) -> bytes:
    return data[3:] if data[:3] == b"\xef\xbb\xbf" else data  # a UTF-8 byte order mark, as some editors write


class _Sink:
    """Where inflated JSON goes: kept in memory, and once it reaches `spill_at` bytes, moved to a
    temporary file in the system's temporary folder ($TMPDIR) that the rest is written to. A
    plain upload of `spill_at` bytes or more is written there whole (`spill`)."""

    def __init__(self, spill_at: int | None, label: str) -> None:
        self.spill_at, self.label = spill_at, label
        self.parts: list[bytes] = []
        self.held = 0
        self.file: Any = None
        self.path: Path | None = None
        # Read while it is written (_inflate_reading): the Arrival made when the file is, the event
        # set then (or when the writing ends without one), a stop asked by the reader, and whether
        # the writing ended whole (not cut, failed or truncated).
        self.watched = False
        self.expected = 0
        self.early: Arrival | None = None
        self.spilled = threading.Event()
        self.stopped = False
        self.whole = False
        self.written = 0

    def write(self, piece: bytes) -> None:
        if self.stopped:
            raise _Stopped
        try:
            if self.file is not None:
                self.file.write(piece)
                self._grew(len(piece))
                return
            self.parts.append(piece)
            self.held += len(piece)
            if self.spill_at is not None and self.held >= self.spill_at:
                self._open()
                for part in self.parts:
                    self.file.write(part)
                self.parts = []
                self._grew(self.held)
                self.spilled.set()
        except OSError as exc:
            raise self._failed(exc) from None

    def _grew(self, size: int) -> None:
        self.written += size
        if self.early is not None:
            self.file.flush()  # the workers read what the file holds
            self.early.grew(self.written)

    def ended(self, whole: bool) -> None:
        """The writing is over: `whole` when the stream inflated whole and `finish` closed the file."""
        self.whole = whole
        if self.early is not None:
            if whole:
                self.early.finished(self.written)
            else:
                self.early.abandon()
        self.spilled.set()

    def spill(self, view: memoryview) -> None:
        """Write JSON that is already in memory (a large plain upload) to the temporary file."""
        try:
            self._open()
            self.file.write(view)
        except OSError as exc:
            raise self._failed(exc) from None

    def _open(self) -> None:
        fd, name = tempfile.mkstemp(prefix="attnscope-json-", suffix=".json")
        self.path = Path(name)
        self.file = os.fdopen(fd, "wb")
        if self.watched:  # read while it is written (_inflate_reading)
            self.early = Arrival(self.path, self.label, self.expected, start=False)

    def truncate(self, size: int) -> None:
        """Keep only the first `size` bytes written."""
        if self.file is not None:
            try:
                self.file.flush()
                self.file.truncate(size)
                self.file.seek(size)
            except OSError as exc:
                raise self._failed(exc) from None
        else:
            self.parts = [b"".join(self.parts)[:size]]

    def finish(self, reading: _Reading) -> _Json:
        """The JSON: its bytes when they stayed in memory, else the temporary file."""
        if self.file is None:
            data, self.parts = b"".join(self.parts), []
            return _Json(reading, _without_bom(data))
        try:
            self.file.close()
        except OSError as exc:
            raise self._failed(exc) from None
        self.file = None
        return _Json(reading, path=self.path)

    def remove(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
        if self.path is not None:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            self.path = None
        self.parts = []

    def _failed(self, exc: OSError) -> TraceError:
        return TraceError(f"{self.label}: cannot inflate into a temporary file in {tempfile.gettempdir()} "
                          f"({exc.strerror or exc}; set TMPDIR to a folder with more room)")


def _gunzip(chunks: Iterable[bytes], reading: _Reading, limit: int, sink: _Sink, out_bytes: int = GZIP_OUT_BYTES) -> None:
    """Inflate a gzip stream into `sink` chunk by chunk: member after member, with zero padding
    between them, as gzip.decompress reads them; TraceError as soon as it passes `limit` bytes.
    A stream cut off mid-write gives all that its whole blocks hold (up to the first zero padding,
    as before), and reading.gzip_cut says how many compressed bytes there were."""
    label = reading.label
    member: Any = None  # the decompressor of the member being read
    between = b""  # bytes after a member's end, not yet enough to say what follows
    padded_at: int | None = None  # inflated bytes before the first zero padding between members
    ended = False  # a member has ended (zero padding may follow it)
    taken = out = 0
    try:
        for chunk in chunks:
            taken += len(chunk)
            data = chunk
            while data:
                if member is None:
                    data = between + data if between else data
                    between = b""
                    if ended:  # after a member: zeros may pad it
                        rest = data.lstrip(b"\0")
                        if len(rest) < len(data) and padded_at is None:
                            padded_at = out
                        data = rest
                    if len(data) < 2:
                        between = data
                        break
                    if data[:2] != GZIP_MAGIC:
                        raise TraceError(f"{label}: not a valid gzip file (Not a gzipped file ({data[:2]!r}))")
                    member = zlib.decompressobj(16 + zlib.MAX_WBITS)
                while True:  # a zlib call gives at most out_bytes, whatever the ratio
                    room = min(out_bytes, limit + 1 - out)
                    piece = member.decompress(data, room)
                    out += len(piece)
                    if out > limit:
                        raise _inflates_too_far(label, limit)
                    if piece:
                        sink.write(piece)
                    if member.eof:
                        data, member, ended = member.unused_data, None, True
                        break
                    data = member.unconsumed_tail
                    if not data and len(piece) < room:
                        break  # this chunk is used up: read the next
    except zlib.error as exc:
        raise TraceError(f"{label}: not a valid gzip file ({exc})") from None
    if member is not None:  # cut off mid-member
        reading.gzip_cut = taken
        if padded_at is not None:
            sink.truncate(padded_at)
    elif between:
        raise TraceError(f"{label}: not a valid gzip file (Not a gzipped file ({between[:2]!r}))")


def load_trace(
    source: Union[str, os.PathLike, bytes],
    name: str | None = None,
    progress: Callable[[float], None] | None = None,
    max_json_bytes: int | None = None,
    *,
    keep_workers: bool = False,
) -> Trace:
    """Load a torch.profiler Chrome trace (.json or .json.gz, any file name) into a Trace.
    `progress`, when given, is called with the fraction of events decoded (0..1) as loading goes.
    `max_json_bytes`: the most JSON the trace may hold (its inflated size for gzip), default
    $ATTNSCOPE_MAX_JSON_BYTES, else MAX_JSON_BYTES (4 GiB).
    `keep_workers`: a large file's slice worker processes stay for the next large file (closed
    after WORKERS_IDLE_S without one); by default they are closed as soon as this file's slices
    are read, before the tables are built, so that their memory is not held beside the trace's.
    Every failure is a TraceError whose message is one line naming the file."""
    label = _label(source, name)
    limit = json_limit(max_json_bytes, label)
    if not isinstance(source, (bytes, bytearray, memoryview)):
        early = _take_arrival(source, label, progress)  # read while it arrived (an upload)
        if early is not None:
            if early.size_bytes > limit:
                raise _too_large(label, early.size_bytes, limit)
            return early
    try:
        with _PARSE_LOCK:
            return _load(source, name, progress, limit, keep_workers)
    except RecursionError:  # msgspec and the json module stop at ~1,000 levels of nesting
        raise TraceError(f"{label}: JSON nested more than about 1,000 levels deep: not a trace this tool can read") from None
    except UnicodeDecodeError as exc:  # where a repair was not possible (older msgspec raises this)
        raise TraceError(f"{label}: not valid JSON (a byte that is not UTF-8 at position {exc.start})") from None


def _label(source: Union[str, os.PathLike, bytes], name: str | None) -> str:
    return name or ("<upload>" if isinstance(source, (bytes, bytearray, memoryview)) else Path(source).name)


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
    source: Union[str, os.PathLike, bytes], name: str | None, progress: Callable[[float], None] | None, limit: int,
    keep_workers: bool = False,
) -> Trace:
    label = _label(source, name)
    size = None if isinstance(source, (bytes, bytearray, memoryview)) else _plain_file_size(Path(source))
    if size is not None:
        if size > limit:  # refused before it is read
            raise _too_large(label, size, limit)
        sliced = _load_sliced(Path(source), name, progress, keep_workers=keep_workers)
        if sliced is not None:
            return sliced
    # gzip inflating to a size the sliced path reads, or bytes of that size, go to a temporary file for it
    spill_at = SLICED_MIN_BYTES if _workers() >= 2 else None
    with _json_of(source, label, limit, spill_at, _Early(progress, keep_workers)) as got:
        reading = got.reading
        reading.progress = progress
        if got.trace is not None:
            return got.trace  # read in slices while it was inflated
        try:
            if got.path is not None:
                sliced = _load_sliced(got.path, label, progress, gzip_cut=reading.gzip_cut, keep_workers=keep_workers)
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


# Events are decoded this many at a time, so that only one batch of Python structs is alive at once.
BATCH = 25000
# Bounds on times, ns: later than 2116 or earlier than 1933 (epoch µs) a timestamp is unreadable,
# and a duration over 36 years is read as zero-length, so that ts + dur and the difference of two
# times stay within int64 ns.
MAX_TS_NS, MIN_TS_NS, MAX_DUR_NS = 1 << 62, -(1 << 60), 1 << 60
# traceEvents arrays up to this size are decoded in one go (their structs are a few tens of MB).
ONE_BATCH_BYTES = 48 << 20
_decode_raw_list = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_one = msgspec.json.Decoder(_Event).decode
T = TypeVar("T")


def _utf8_safe(decode: Callable[[bytes], T], raw: bytes, reading: _Reading) -> T:
    """decode(raw); bytes that are not UTF-8 inside a string are read as U+FFFD (and counted for
    one warning) instead of failing the file. The error path alone pays for the re-encode."""
    try:
        return decode(raw)
    except UnicodeDecodeError:  # how msgspec before 0.19 reports it
        pass
    except msgspec.DecodeError as exc:
        if "utf-8" not in str(exc).lower():
            raise
    raw = bytes(raw)
    text = raw.decode("utf-8", errors="replace")
    reading.replaced += text.count("\ufffd") - raw.decode("utf-8", errors="ignore").count("\ufffd")
    return decode(text.encode("utf-8"))


def _decode(data: bytes, reading: _Reading) -> tuple[dict[str, Any], Iterator[list[_Event] | _Part]]:
    """Split the document into top-level metadata and batches of typed events; salvage a cut-off file."""
    label = reading.label
    start = _LEADING_SPACE.match(data).end()  # no strip(): that would copy a 200 MB buffer
    if start == len(data):
        raise TraceError(f"{label}: the file is empty")
    first = data[start : start + 1]
    if first not in (b"{", b"["):
        raise TraceError(f"{label}: not JSON (it starts with {data[start : start + 16]!r})")
    try:
        if first == b"[":  # the bare "JSON array" flavour of the Chrome trace format
            return {}, _batches(_decode_raw_list(data), reading)
        # the C scanner reads a whole document (or leaves it to msgspec); a larger one is read in
        # batches below, for the progress bar
        scanned = _scanned_document(data) if len(data) <= ONE_BATCH_BYTES else None
        if scanned is not None:
            members, part = scanned
            meta = {key: _utf8_safe(msgspec.json.decode, raw, reading) for key, raw in members}
            if reading.progress:
                reading.progress(0.0)
            return meta, iter([part])
        top = _decode_top(data)
    except msgspec.ValidationError:
        raise TraceError(f"{label}: JSON but not a trace: the top level is neither an object nor an array of events") from None
    except msgspec.DecodeError as exc:
        if _ends_mid_value(exc, len(data)):
            return _decode_cut(data, first, reading)
        raise TraceError(f"{label}: not valid JSON ({exc})") from None
    raw_events = top.pop("traceEvents", None)
    if raw_events is None:
        keys = ", ".join(list(top)[:5]) or "none"
        raise TraceError(f"{label}: JSON but not a trace: no traceEvents key (top-level keys: {keys})")
    meta = {key: _utf8_safe(msgspec.json.decode, raw, reading) for key, raw in top.items()}
    if len(raw_events) <= ONE_BATCH_BYTES:  # small enough to decode at once: one pass fewer
        try:
            part = _scanned_part(raw_events)  # the C scanner's columns, or msgspec's structs
            events = part if part is not None else _utf8_safe(_decode_events, raw_events, reading)
            if reading.progress:
                reading.progress(0.0)
            return meta, iter([events])
        except msgspec.ValidationError:
            pass  # not a list, or odd events: the batched path says which
    try:
        raws = _decode_raw_list(raw_events)
    except msgspec.ValidationError:
        raise TraceError(f"{label}: JSON but not a trace: traceEvents is not a list") from None
    return meta, _batches(raws, reading)


_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")


def _ends_mid_value(exc: msgspec.DecodeError, size: int) -> bool:
    """True when msgspec's error means the input ends mid-document: "truncated", or a number or
    literal cut short, which it reports as malformed at the last byte."""
    found = _ERROR_BYTE.search(str(exc))
    return "truncated" in str(exc) or (found is not None and int(found.group(1)) >= size - 1)


def _decode_cut(data: bytes, first: bytes, reading: _Reading) -> tuple[dict[str, Any], Iterator[list[_Event] | _Part]]:
    """A document that ends mid-write: closed after its last whole event and read on the fast
    path, or, when no cut point near the end closes it, salvaged event by event."""
    closed = _close_cut_file(data, first)
    if closed is not None:
        try:
            decoded = _decode(closed[0], reading)
        except TraceError:
            pass  # closed inside the metadata before traceEvents: the salvage says so
        else:
            reading.cut = _CutPoint(closed[1], len(data), "read every complete event before the cut", closed[2])
            return decoded
    meta, events, kept, whole = _salvage(data, reading)
    reading.cut = _CutPoint(kept, len(data), f"salvaged {len(events):,} complete events", whole)
    return meta, iter([events])


def _batches(raws: list[msgspec.Raw], reading: _Reading) -> Iterator[list[_Event] | _Part]:
    """Events, BATCH at a time: the scanner's parts, or typed structs where it leaves a batch to
    msgspec. A batch with a field of an unexpected type is decoded event by event, and the events
    that still cannot be read are skipped with a warning."""
    for start in range(0, len(raws), BATCH):
        if reading.progress:
            reading.progress(start / max(len(raws), 1))
        chunk = raws[start : start + BATCH]
        joined = b"[" + b",".join(chunk) + b"]"
        part = _scanned_part(joined)
        if part is not None:
            yield part
            continue
        try:
            yield _utf8_safe(_decode_events, joined, reading)
        except msgspec.ValidationError as exc:
            yield _decode_each(chunk, reading, note=str(exc))


_BATCH_INDEX = re.compile(r"`\$\[\d+\]\.?")


def _decode_each(chunk: list[Any], reading: _Reading, note: str) -> list[_Event]:
    kept: list[_Event] = []
    for raw in chunk:
        try:
            kept.append(_utf8_safe(_decode_one, raw if isinstance(raw, msgspec.Raw) else msgspec.json.encode(raw), reading))
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
    if len(kept) < len(chunk):  # one warning for the file, whichever batches or slices they were in
        reading.skipped += len(chunk) - len(kept)
        if reading.skip_note is None:
            reading.skip_note = _plain_note(note)
    return kept


_EXPECTED = re.compile(r"Expected `([^`]+)`, got `([^`]+)`(?: - at `\$(?:\[\d+\])?\.?([^`]*)`)?")


def _plain_note(note: str) -> str:
    """msgspec's 'Expected `object`, got `int` - at `$[2]`' in the reader's words: 'an event is a
    JSON integer, not an object'; 'at `$[0].ph`' names the field. A position in a batch means
    nothing to the reader and is dropped."""
    found = _EXPECTED.fullmatch(note)
    if found is None:
        return _BATCH_INDEX.sub("`", note)
    want, got, where = (found[1], found[2], found[3])
    words = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "object": "object", "array": "array", "null": "null"}
    wanted = " or ".join(words.get(part, part) for part in want.split(" | "))
    return (f"{f'the field {where!r} of an event' if where else 'an event'} is a JSON {words.get(got, got)}, "
            f"not {'an' if wanted[0] in 'aeiou' else 'a'} {wanted}")


_EVENT_GAP = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]\s*,")  # the end of an array of objects (traceEvents) with more keys after it
CUT_SEARCH = 1 << 20  # how far back from a cut to look for the end of the last whole event, bytes
CUT_TRIES = 64
_SPACE = b" \t\r\n"


def _close_cut_file(data: bytes, first: bytes) -> tuple[bytes, int, bool] | None:
    """A trace cut off mid-write, closed after its last whole event: (the closed document, bytes
    kept, whether the traceEvents array had already ended, so that only metadata after it was
    lost), or None when no cut point near the end closes it. The closed file takes the fast path,
    where the event-by-event salvage would build a dict per event."""
    tail_start = max(len(data) - CUT_SEARCH, 0)
    ends = [m.start() for m in _EVENT_GAP.finditer(data, tail_start)][-CUT_TRIES:]
    ends += [m.start() for m in _ARRAY_END.finditer(data, tail_start)][-CUT_TRIES:]
    last = _last_brace(data)
    if last is not None:  # cut just after an event's closing brace (and its comma): that event is whole
        ends.append(last)
    closing = b"]" if first == b"[" else b"]}"
    for end in sorted(set(ends), reverse=True)[:CUT_TRIES]:
        candidate = data[: end + 1] + closing
        try:
            top = (_decode_raw_list if first == b"[" else _decode_top)(candidate)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        return candidate, end + 1, _array_ended(data, end + 1) or _keys_after_events(top)
    return None


def _array_ended(data: bytes, pos: int) -> bool:
    """True when the next character at or after pos, spaces aside, closes an array."""
    while pos < len(data) and data[pos] in _SPACE:
        pos += 1
    return data[pos : pos + 1] == b"]"


def _keys_after_events(top: Any) -> bool:
    """True when a closed document has top-level keys after traceEvents (so that array ended)."""
    keys = list(top) if isinstance(top, dict) else []
    return "traceEvents" in keys and keys[-1] != "traceEvents"


_TAIL_BRACE = re.compile(rb"\}\s*,?\s*\Z")


def _last_brace(data: bytes) -> int | None:
    """Position of a closing brace that only whitespace and one comma follow, or None."""
    match = _TAIL_BRACE.search(data, max(len(data) - 4096, 0))
    return match.start() if match else None


def _salvage(data: bytes, reading: _Reading) -> tuple[dict[str, Any], list[_Event], int, bool]:
    """A trace cut off mid-write that no cut point near its end closes: keep the metadata before
    traceEvents and every complete event, read one by one; also return the JSON bytes kept and
    whether the traceEvents array had ended before the cut."""
    label = reading.label
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
    kept = len(text[:pos].encode("utf-8", errors="replace"))
    whole = pos < end and text[pos] == "]"
    return meta, _decode_each(raw_events, reading, note="while salvaging"), kept, whole


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
_INPUT_DIMS, _INPUT_TYPES, _CONCRETE_INPUTS = attrgetter("input_dims"), attrgetter("input_types"), attrgetter("concrete_inputs")


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
            _ints([a.external_id if a.external_id is not None else a.external_id_legacy for a in args]).alias("external_id"),
            _ints([a.bytes if a.bytes is not None else a.size for a in args]).alias("bytes"),
            _strs([a.kind for a in args]).alias("kind_arg"),
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
        raise TraceError(f"{label}: the trace has {seen:,} events but no complete (\"X\") events to analyse")
    origin_ns = int(frame["ts_abs"].min())
    held = [frame.with_columns((pl.col("ts_abs") - origin_ns).alias("ts_ns")).drop("ts_abs")]
    del frame  # _normalize takes the only reference: it frees each unsorted column as it sorts it
    frame = _normalize(held)
    frame = nesting(frame)
    frame = _link_launches(frame)
    steps = find_steps(frame)
    unlinked = frame.filter(pl.col("cat").is_in(GPU_CATEGORIES) & pl.col("launch").is_null()).height
    if unlinked and not steps["implicit"][0]:
        why = ("their launch calls may come after the cut" if reading.cut is not None and not reading.cut.events_whole
               else "launched before the profiler started, or their runtime calls were dropped")
        warnings.append(
            f"{label}: {unlinked:,} GPU events have no launch call with their correlation id; they belong to no step ({why})"
        )
    frame = assign_steps(frame, steps)

    flow_schema = {"id": pl.String, "cat": pl.String, "name": pl.String, "ph": pl.String, "pid": pl.String, "tid": pl.String, "ts_abs": pl.Int64}
    flows = _concat(flow_chunks) if flow_chunks else pl.DataFrame(schema=flow_schema)
    flows = flows.select(
        "id", _category(pl.col("cat")).cast(pl.Categorical), *(pl.col(c).cast(pl.Categorical) for c in ("name", "ph", "pid", "tid")),
        (pl.col("ts_abs").fill_null(origin_ns) - origin_ns).alias("ts_ns"),
    )
    memory = memory_table(_memory_events(memory_chunks, origin_ns, reading), frame, steps)
    del memory_chunks
    trace = Trace(source=label, events=frame, flows=flows, steps=steps, meta=dict(meta), warnings=warnings,
                  raw_categories=raw_categories, memory=memory)
    _note_unread(trace, reading)
    if reading.cut is not None:
        trace.cut = _cut(reading, None if last_ts is None else last_ts - origin_ns)
        warnings.insert(0, _cut_warning(trace, reading))
    elif reading.gzip_cut is not None:
        warnings.insert(0, f"{label}: the gzip stream is cut off after {reading.gzip_cut:,} bytes, but only after the "
                           "trace's JSON had ended: nothing of the trace is missing")
    return trace


# Plain JSON files at least this large are read in slices by worker processes, one per core, and
# so is a .json.gz or gzip upload that inflates to this much (into a temporary file); smaller ones
# (and plain uploads, cut or odd files) take the one-process path.
SLICED_MIN_BYTES = 64 << 20
# Bytes of traceEvents per slice: what one worker holds at once is about 4x this.
SLICE_BYTES = 8 << 20
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_ARRAY_CLOSE = re.compile(rb"[\}\[]\s*\]")  # the end of an array of objects (or of an empty one)
_EDGE_BYTES = 1 << 20  # how much of the head and the tail is read at first to find traceEvents
_EDGE_MAX = 64 << 20


def _workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Workers:
    """Worker processes that read slices: fresh interpreters (`python -c`), not forks, since
    polars' thread pool does not survive a fork of a process that used it, and multiprocessing's
    spawn and forkserver re-run the caller's main script. Tasks and results are length-prefixed
    pickles over each worker's stdin and stdout; a worker exits when its stdin closes."""

    def __init__(self, count: int) -> None:
        import subprocess
        import sys

        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        # Workers keep polars' own allocator setting (see dashboard/__init__.py): returning every freed
        # page at once cost them 0.5-0.7 s on the 910 MB trace for 18 MB less peak each.
        env.pop("_RJEM_MALLOC_CONF", None)
        env["_ATTNSCOPE_SLICE_WORKER"] = "1"
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # root first: `python -c` puts the working directory ahead of PYTHONPATH, and a `dashboard`
        # there (another checkout) would otherwise answer for this one
        code = f"import sys; sys.path.insert(0, {root!r}); from dashboard.engine.load import _serve; _serve()"
        self.last_used = time.monotonic()
        self.procs = [
            subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            for _ in range(count)
        ]

    def alive(self) -> bool:
        return all(proc.poll() is None for proc in self.procs)

    def close(self) -> None:
        for proc in self.procs:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                proc.kill()

    def run(self, tasks: list[tuple[Any, ...]]) -> Iterator[Any]:
        """Results in task order; task i goes to worker i mod count (slices are of one size)."""
        import pickle

        count = len(self.procs)
        sent = 0

        def send_upto(limit: int) -> None:
            nonlocal sent
            while sent < min(limit, len(tasks)):
                _send(self.procs[sent % count].stdin, pickle.dumps(tasks[sent]))
                sent += 1

        send_upto(2 * count)  # two in flight per worker: it starts the next while the last is read
        for i in range(len(tasks)):
            payload = _receive(self.procs[i % count].stdout)
            if payload is None:
                raise _SliceFailed("a worker process ended")
            send_upto(i + 1 + 2 * count)
            yield pickle.loads(payload)


def _send(stream: Any, payload: bytes) -> None:
    stream.write(len(payload).to_bytes(8, "little"))
    stream.write(payload)
    stream.flush()


def _receive(stream: Any) -> bytes | None:
    size = stream.read(8)
    if len(size) < 8:
        return None
    payload = stream.read(int.from_bytes(size, "little"))
    return payload if len(payload) == int.from_bytes(size, "little") else None


def _serve() -> None:
    """A worker's loop: read a task from stdin, answer ("ok", result) or ("failed", why)."""
    import pickle
    import sys

    stdin = sys.stdin.buffer
    stdout = os.fdopen(os.dup(1), "wb")  # the answers' own pipe: anything else printed goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    while True:
        payload = _receive(stdin)
        if payload is None:
            return
        try:
            answer = ("ok", _read_slice(*pickle.loads(payload)))
        except _SliceFailed as exc:
            answer = ("failed", str(exc))
        except Exception as exc:  # noqa: BLE001 - the parent falls back to the one-process path
            answer = ("failed", f"{type(exc).__name__}: {exc}")
        _send(stdout, pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))


_workers_started: _Workers | None = None
# One parse at a time per process, and the worker processes are used or closed only under it. The
# dashboard parses each session's upload in that session's thread: without it, two large files
# read at once sent their tasks down the same pipes and read each other's answers (a wrong trace,
# or a garbage length read as a size), and under polars before 1.32, which keeps categoricals
# local to a string cache, two traces built at once mixed their sources (StringCacheMismatchError
# in pl.concat, found with polars 1.20). On two cores a second parse gains little from running
# beside the first: its workers are the same. Reentrant: load_trace holds it, and _load_sliced
# takes it again, so that no caller can use the workers without it.
_PARSE_LOCK = threading.RLock()


def _slice_workers() -> _Workers:
    """The worker processes, started once per process and kept for the next large file."""
    global _workers_started
    if _workers_started is None or not _workers_started.alive():
        import atexit

        _workers_started = _Workers(_workers())
        atexit.register(_workers_started.close)
    _workers_started.last_used = time.monotonic()  # in use: an idle timer that fires now leaves them
    return _workers_started


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


class _SliceFailed(Exception):
    """A slice that is not a list of events: the whole file takes the one-process path."""


def _read_slice(path: str, lo: int, hi: int, label: str) -> tuple[list[_Part], _Reading]:
    """Worker: the events in bytes [lo, hi) of a file, read into parts, and what the reading
    learnt (warnings, bytes that were not UTF-8, events skipped)."""
    reading = _Reading(label)
    with open(path, "rb") as fh:
        raw = b"[" + _pread(fh, lo, hi - lo) + b"]"
    part = _scanned_part(raw)
    if part is not None:
        return [part], reading
    try:
        batch = _utf8_safe(_decode_events, raw, reading)
    except msgspec.ValidationError as exc:
        try:
            raws = _utf8_safe(_decode_raw_list, raw, reading)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise _SliceFailed from None
        batch = _decode_each(raws, reading, note=str(exc))
    except msgspec.DecodeError:
        raise _SliceFailed from None
    del raw
    return [_read_batch(batch)], reading


def _load_sliced(
    path: Path, name: str | None, progress: Callable[[float], None] | None, gzip_cut: int | None = None,
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
        bounds = _slices(fh, start, end, SLICE_BYTES)
    meta.update(meta_after)
    parts: list[_Part] = []
    # Under _PARSE_LOCK: the workers' pipes carry one file's tasks and answers in order, and the idle
    # timer cannot close them mid-file.
    with _PARSE_LOCK:
        try:
            workers = _slice_workers()
            tasks = [(str(path), lo, hi, reading.label) for lo, hi in bounds]
            for done, (status, answer) in enumerate(workers.run(tasks)):
                if status != "ok":
                    raise _SliceFailed(answer)
                got, learnt = answer
                parts.extend(got)
                reading.add(learnt)
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
    trace = _build_trace(_drain(parts), meta, reading)
    trace.size_bytes = size - (3 if bom else 0)  # the JSON bytes, as the one-process path counts them
    return trace


# A large upload is read while it arrives: its slices go to the worker processes as their bytes land
# on disk, so that the parse overlaps the transfer instead of following it (the 910 MB trace's
# slices take 2.6-2.7 s of its 4.4-4.6 s load, and a browser on the same machine sends it in 3-8 s).
_ARRIVALS: dict[str, "Arrival"] = {}
_ARRIVALS_LOCK = threading.Lock()


class _Abandoned(Exception):
    """The file stopped arriving (the upload was cut off or refused) or its reading was given up."""


class Arrival:
    """A plain-JSON file being written in order (an upload on its way), read in slices while it
    grows: the writer calls grew(size) after each write it has flushed, then finished(size) or
    abandon(). Once the last byte is in, the rest of the slices are read and the trace is built
    in this object's thread; load_trace on the same path then takes that trace instead of
    parsing. Whenever the early reading cannot go on (a gzip file, a slice that is not a list of
    events, a cut file, no traceEvents near the start), it stops and load_trace reads the file
    as it reads any other: the result is the same trace either way.

    The worker processes are taken under _PARSE_LOCK one batch of slices at a time, never while
    waiting for bytes, so a slow transfer does not hold up other parses."""

    def __init__(self, path: Path, label: str, declared: int, start: bool = True) -> None:
        self.path = str(path)
        self.label = label
        self.declared = declared
        self.cond = threading.Condition()
        self.size = 0
        self.closed = False  # the writer finished
        self.abandoned = False
        self.ready = False  # the thread is done: `trace` is the trace, or None
        self.trace: Trace | None = None
        self.read_upto = 0  # bytes of the file read so far, for progress
        self.used_workers = False
        self.progress: Callable[[float], None] | None = None  # called as slices are read (read_here)
        self.keep_workers = False  # see load_trace
        if start:
            self.thread = threading.Thread(target=self._run, name="attnscope-arrival", daemon=True)
            self.thread.start()

    def grew(self, size: int) -> None:
        with self.cond:
            self.size = size
            self.cond.notify_all()

    def finished(self, size: int) -> None:
        with self.cond:
            self.size, self.closed = size, True
            self.cond.notify_all()

    def abandon(self) -> None:
        with self.cond:
            self.abandoned = True
            self.trace = None
            self.cond.notify_all()

    def result(self, progress: Callable[[float], None] | None = None) -> Trace | None:
        """Wait for the trace (None: the early reading gave up), reporting its progress."""
        with self.cond:
            while not self.ready:
                if progress:
                    progress(min(self.read_upto / max(self.size if self.closed else self.declared, 1), 1.0))
                self.cond.wait(0.1)
            return None if self.abandoned else self.trace

    def _wait(self, need: int) -> tuple[int, bool]:
        """Until `need` bytes are in or the file is complete: (bytes in, complete)."""
        with self.cond:
            while not self.abandoned and not self.closed and self.size < need:
                self.cond.wait()
            if self.abandoned:
                raise _Abandoned
            return self.size, self.closed

    def read_here(self, progress: Callable[[float], None] | None, keep_workers: bool) -> Trace | None:
        """The trace, read in this thread while another writes the file (the loading thread, which
        holds _PARSE_LOCK); None when the reading gave up or the writer abandoned it."""
        self.progress, self.keep_workers = progress, keep_workers
        return self._outcome()

    def _outcome(self) -> Trace | None:
        try:
            return self._read()
        except Exception:  # noqa: BLE001 - whatever stopped it, load_trace reads the file itself
            return None
        finally:
            with _PARSE_LOCK:  # workers left open by a reading that stopped close once idle, as after any file
                if self.used_workers and _workers_started is not None:
                    _close_when_idle(_workers_started)

    def _run(self) -> None:
        trace = self._outcome()
        with self.cond:
            self.trace = None if self.abandoned else trace
            self.ready = True
            self.cond.notify_all()

    def _read(self) -> Trace | None:
        reading = _Reading(self.label)
        have, complete = self._wait(_EDGE_BYTES)
        with open(self.path, "rb") as fh:
            first = _pread(fh, 0, 3)
            if first[:2] == GZIP_MAGIC:
                return None
            bom = first == b"\xef\xbb\xbf"
            want = _EDGE_BYTES
            while True:  # the metadata before traceEvents, as _head finds it in the bytes in so far
                head = _head(fh, have, reading)
                if head is not None or complete or have >= _EDGE_MAX:
                    break
                want *= 4
                have, complete = self._wait(want)
            if head is None:
                return None
            meta, start = head
            parts: list[_Part] = []
            lo = start
            count = _workers()
            while not complete:  # whole slices of the bytes in, `count` or more at a time
                have, complete = self._wait(lo + count * (SLICE_BYTES + _EDGE_BYTES))
                if complete:
                    break
                bounds = []
                while have - lo >= SLICE_BYTES + _EDGE_BYTES:
                    cut = _next_cut(fh, lo, SLICE_BYTES, _EDGE_BYTES)
                    if cut is None:
                        return None
                    bounds.append((lo, cut[0]))
                    lo = cut[1]
                self._read_slices(bounds, parts, reading)
            size = have
            tail = _tail(fh, size, start, reading)
            if tail is None:
                return None
            meta_after, end = tail
            if end < lo or not _pread(fh, start, min(end - start, 4096)).strip():
                return None  # the events ended inside a slice already read (it failed), or there are none
            self._read_slices(_slices(fh, lo, end, SLICE_BYTES), parts, reading, last=True)
        meta.update(meta_after)
        with _PARSE_LOCK:
            if self.abandoned:
                return None
            trace = _build_trace(_drain(parts), meta, reading)
        trace.size_bytes = size - (3 if bom else 0)
        return trace

    def _read_slices(self, bounds: list[tuple[int, int]], parts: list[_Part], reading: _Reading, last: bool = False) -> None:
        with _PARSE_LOCK:
            if self.abandoned:
                raise _Abandoned
            try:
                workers = _slice_workers()
                self.used_workers = True
                tasks = [(self.path, lo, hi, self.label) for lo, hi in bounds]
                for (_, _, hi, _), (status, answer) in zip(tasks, workers.run(tasks)):
                    if status != "ok":
                        raise _SliceFailed(answer)
                    got, learnt = answer
                    parts.extend(got)
                    reading.add(learnt)
                    self.read_upto = hi
                    if self.progress:
                        self.progress(min(hi / max(self.size if self.closed else self.declared, hi, 1), 1.0))
            except (_SliceFailed, OSError, EOFError, ValueError, AttributeError, ImportError):
                _discard_workers()
                raise _Abandoned from None
            except BaseException:  # answers left in the pipes must not be read as another file's
                _discard_workers()
                raise
            if last:  # closed before the tables are built, as load_trace does
                if self.progress:
                    self.progress(1.0)  # every slice is in (the last ends where the events do, before the metadata after them)
                if self.keep_workers:
                    _close_when_idle(workers)
                else:
                    _release_workers()
                self.used_workers = False
            else:
                workers.last_used = time.monotonic()


def arrival(path: Union[str, os.PathLike], label: str, declared: int | None) -> Arrival | None:
    """Start reading a file that is being written, when it is large enough for the worker
    processes (see Arrival); None otherwise."""
    if declared is None or declared < SLICED_MIN_BYTES or _workers() < 2:
        return None
    early = Arrival(Path(path), label, declared)
    with _ARRIVALS_LOCK:
        _ARRIVALS[early.path] = early
    return early


def forget_arrival(path: Union[str, os.PathLike]) -> None:
    """Drop what an early reading of `path` holds or will hold (the file is gone, or was not parsed)."""
    with _ARRIVALS_LOCK:
        early = _ARRIVALS.pop(str(path), None)
    if early is not None:
        early.abandon()


def _take_arrival(source: Union[str, os.PathLike], label: str, progress: Callable[[float], None] | None) -> Trace | None:
    with _ARRIVALS_LOCK:
        early = _ARRIVALS.pop(str(source), None)
    if early is None:
        return None
    if early.label != label:
        early.abandon()
        return None
    try:
        return early.result(progress)
    except BaseException:  # the progress callback stopped the wait (a rerun): the next call takes it
        with _ARRIVALS_LOCK:
            if not early.abandoned:
                _ARRIVALS.setdefault(early.path, early)
        raise


# Workers idle this long after a file are closed: each holds 110-125 MB (measured after the
# 187 MB trace), which a dashboard server would otherwise keep between uploads. Starting them
# again costs the next large file about 0.3 s.
WORKERS_IDLE_S = 30.0


def _close_when_idle(workers: _Workers) -> None:
    """Close `workers` once WORKERS_IDLE_S pass without another file for them."""
    workers.last_used = time.monotonic()

    def close_if_idle() -> None:
        global _workers_started
        with _PARSE_LOCK:  # never while a file is with them
            if _workers_started is workers and time.monotonic() - workers.last_used >= WORKERS_IDLE_S:
                workers.close()
                _workers_started = None

    timer = threading.Timer(WORKERS_IDLE_S, close_if_idle)
    timer.daemon = True  # never keeps a finished command waiting
    timer.start()


def _release_workers() -> None:
    """Close the workers now without waiting for them to exit (a daemon thread reaps them). Each
    holds 110-130 MB after a large file, which the loading process would otherwise hold beside the
    tables it is about to build (the 910 MB trace's dashboard upload: 250 MB of the peak)."""
    global _workers_started
    workers, _workers_started = _workers_started, None
    if workers is not None:
        import atexit

        atexit.unregister(workers.close)
        threading.Thread(target=workers.close, daemon=True).start()


def _discard_workers() -> None:
    global _workers_started
    if _workers_started is not None:
        for proc in _workers_started.procs:
            proc.kill()
            proc.wait()
        _workers_started = None


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
    events = _fill_device_fields(_finish_events(raw, times_parsed)).with_columns(pl.col("name", *REPEATED_TEXT).cast(pl.Categorical))
    return events, counts


# A memory event as profile_memory=True writes it: {"ph": "i", "name": "[memory]", "args": {"Device Type",
# "Device Id", "Bytes", "Total Allocated", "Total Reserved", "Addr"}}; its columns as a part holds them.
MEMORY_NAME = "[memory]"
_MEMORY_ARGS = (
    ("device_type", attrgetter("mem_device_type")), ("device_id", attrgetter("mem_device_id")),
    ("bytes", attrgetter("mem_bytes")), ("total_allocated", attrgetter("mem_total_allocated")),
    ("total_reserved", attrgetter("mem_total_reserved")), ("addr", attrgetter("mem_addr")),
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


def _memory_finished(memory: pl.DataFrame) -> pl.DataFrame:
    """A batch's memory events with pid and tid Categorical, as the events hold them."""
    return memory.with_columns(pl.col("pid", "tid").cast(pl.Categorical))


def _flows_finished(flows: pl.DataFrame) -> pl.DataFrame:
    """A batch's flow events with their repeated texts Categorical (the ids stay text: nearly each is
    another, and a Categorical's texts are kept by polars for the life of the process)."""
    return flows.with_columns(pl.col("name", "ph", "pid", "tid").cast(pl.Categorical))


# The scanner's columns (the X_* and F_* of _scan.c, in order), each with its table (T_*, None
# for int64 columns) and the loader's name and kind for it: "text" (str() of the value msgspec
# decodes), "int" (_int_or_none of it), "time" (_ns of the raw text), "raw" (the raw text).
_SCAN_COLUMNS = (
    ("cat", 0, "text"), ("name", 1, "text"), ("pid", 2, "text"), ("tid", 3, "text"), ("ts_abs", None, "time"),
    ("dur_ns", None, "time"), ("stream", None, "int"), ("device", None, "int"), ("correlation", None, "int"),
    ("external_id", None, "int"), ("bytes", None, "int"), ("kind_arg", 4, "text"), ("input_dims", 5, "raw"),
    ("input_types", 6, "raw"), ("concrete_inputs", 7, "raw"),
    ("id", 8, "text"), ("cat", 0, "text"), ("name", 1, "text"), ("ph", 9, "text"), ("pid", 2, "text"),
    ("tid", 3, "text"), ("ts_abs", None, "time"),
    ("pid", 2, "text"), ("tid", 3, "text"), ("ts_abs", None, "time"), ("device_type", None, "int"),
    ("device_id", None, "int"), ("bytes", None, "int"), ("total_allocated", None, "int"),
    ("total_reserved", None, "int"), ("addr", None, "int"),
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
    seen, n_complete, n_flows, tables, scanned, odd, last, n_memory = got  # tables: lists of this call's own; scanned: Arrow pairs
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
            values = values.scatter(pl.Series(list(rows), dtype=pl.Int64), pl.Series(list(rows.values()), dtype=values.dtype))
        return values if table is None else texts[table].gather(values).alias(name)

    events = counts = flows = memory = None
    if n_complete:
        events, counts = _finished(pl.DataFrame([column(col) for col in _SCAN_COMPLETE]), times_parsed=True)
    if n_flows:
        flows = _flows_finished(pl.DataFrame([column(col) for col in _SCAN_FLOWS]))
    if n_memory:
        memory = _memory_finished(pl.DataFrame([column(col) for col in _SCAN_MEMORY]))
    return _Part(events, flows, counts, seen, last, memory)


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
    parts: Iterable[_Part], reading: _Reading, memory_chunks: list[pl.DataFrame] | None = None,
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
        warnings.append(f"{label}: {reading.skipped:,} events could not be read and were skipped; the first: {reading.skip_note}")
    if not finished:
        return None, flow_chunks, seen, None, {}
    last_ts = pl.select(_ns(pl.lit(last.decode("utf-8", errors="replace"), dtype=pl.String))).item()
    frame = _concat(finished)  # not rechunked: _normalize's sort writes one contiguous copy
    del finished
    per_cat = pl.concat(counts).group_by("cat").agg(pl.col("len").sum()).sort(["len", "cat"], descending=[True, False], nulls_last=True)
    raw_categories = {cat if cat is not None else "": int(n) for cat, n in per_cat.iter_rows()}
    ts, dur = pl.col("ts_abs"), pl.col("dur_ns")
    readable = ts.is_between(MIN_TS_NS, MAX_TS_NS).fill_null(False)
    unreadable, negative, endless = frame.select(  # one query for the three checks (durations of the events kept)
        (~readable).sum().alias("unreadable"), (readable & (dur < 0)).sum().alias("negative"),
        (readable & (dur > MAX_DUR_NS)).sum().alias("endless")).row(0)
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
        frame = frame.with_columns(pl.when(pl.col("dur_ns") > MAX_DUR_NS).then(0).otherwise(pl.col("dur_ns")).alias("dur_ns"))
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
        reading.warnings.append(f"{reading.label}: {unreadable:,} memory events with an unreadable timestamp were skipped")
        raw = raw.filter(readable)
    return raw.with_columns((pl.col("ts_abs") - origin_ns).alias("ts_ns")).drop("ts_abs")


def _note_unread(trace: Trace, reading: _Reading) -> None:
    """Warn about what the file holds that no analysis will count: events in categories the engine
    does not analyse, steps without any op or device work, and bytes that were not UTF-8."""
    label = reading.label
    unread = {
        cat or "(no category)": n for cat, n in trace.raw_categories.items()
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
        pl.col("step").is_not_null() & ~(pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#")))
    if (inside["cat"].cast(pl.String) == "cpu_op").any():
        return None
    held = inside.group_by(pl.col("cat").cast(pl.String)).len().sort(["len", "cat"], descending=[True, False])
    what = ", ".join(f"{cat or '(no category)'} {n:,}" for cat, n in held.iter_rows()) or "nothing besides their ProfilerStep marks"
    n = trace.steps.height
    where = "the trace (one implicit step) holds" if trace.implicit_step else ("the one step holds" if n == 1 else f"the {n:,} steps hold")
    return (
        f"{where} no cpu_op and no device event, only {what}, so every step's work is 0 "
        "(the profiler recorded annotations without ops, as a CPU trace of gloo collectives can)"
    )


def _cut(reading: _Reading, last_ts_ns: int | None) -> Cut:
    point = reading.cut
    return Cut(bytes_kept=point.kept, bytes_total=point.total, last_ts_ns=last_ts_ns, gzip_bytes=reading.gzip_cut,
               events_whole=point.events_whole)


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
    at = "at an unreadable timestamp" if cut.last_ts_ns is None else f"at ts {_readable_ns(cut.last_ts_ns)} after the trace start"
    if trace.has_gpu:
        device = "the device events written after the cut are missing"
    else:
        kind = accelerator(trace.raw_categories) or gpu_vendor(trace.meta)
        device = (f"none survived, so this {kind} trace reads as CPU-only" if kind
                  else "any device activity is missing")
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


def accelerator(raw_categories: Iterable[str]) -> str | None:
    """The accelerator that categories as written imply ("mtia", "xpu", "hpu", "privateuse1";
    see CATEGORIES), or None for CUDA, ROCm and CPU traces, which share their categories."""
    for raw in raw_categories:
        implied = CATEGORIES.get(raw.lower(), ("", "", None))[2]
        if implied:
            return implied
    return None


# What a trace's metadata says about its GPU's vendor: version keys that Kineto writes before
# traceEvents, and words in deviceProperties names. ROCm first: its traces can say "cuda" nowhere.
GPU_VENDORS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("rocm", ("roctracer_version", "hip_runtime_version", "hip_driver_version"), ("AMD", "Radeon", "Instinct", "MI2", "MI3")),
    ("cuda", ("cupti_version", "cuda_runtime_version", "cuda_driver_version"), ("NVIDIA", "Tesla", "GeForce", "Quadro", "TITAN")),
)


def device_names(meta: dict[str, Any]) -> list[str]:
    """The non-empty device names in the trace's deviceProperties, in order."""
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return []
    return [p["name"] for p in props if isinstance(p, dict) and isinstance(p.get("name"), str) and p["name"]]


def gpu_vendor(meta: dict[str, Any]) -> str | None:
    """'rocm' or 'cuda' as the metadata tells (it comes before traceEvents, so a cut file keeps
    it), or None when it does not say."""
    names = device_names(meta)
    for vendor, keys, words in GPU_VENDORS:
        if any(key in meta for key in keys) or any(word in name for name in names for word in words):
            return vendor
    return None


def _fill_device_fields(frame: pl.DataFrame) -> pl.DataFrame:
    """Fill GPU stream/device from legacy tids ("stream 7") and pids, and the memcpy kind; cat
    becomes Categorical. Row by row, so done per batch (in the workers, for a sliced file)."""
    gpu = pl.col("cat").is_in(GPU_CATEGORIES)
    stream_from_tid = pl.col("tid").str.extract(r"(\d+)$", 1).cast(pl.Int64, strict=False)
    return frame.with_columns(
        pl.when(gpu & pl.col("stream").is_null()).then(stream_from_tid).otherwise(pl.col("stream")).alias("stream"),
        pl.when(gpu & pl.col("device").is_null())
        .then(pl.col("pid").cast(pl.Int64, strict=False))
        .otherwise(pl.col("device"))
        .alias("device"),
        pl.when(pl.col("cat") == "gpu_memcpy")
        .then(pl.coalesce(pl.col("name").cast(pl.String).str.extract(_MEMCPY_KIND.pattern, 1), pl.col("kind_arg")))
        .otherwise(None)
        .alias("kind"),
        pl.col("cat").cast(pl.Categorical),
    ).drop("kind_arg")


# Below this many events _normalize gathers the whole table in one query: a copy of at most a few
# tens of MB held for a moment, where the column-by-column gather costs two queries a column
# (about 2 ms of a small trace's 30).
NORMALIZE_WHOLE_ROWS = 100_000


def _normalize(held: list[pl.DataFrame]) -> pl.DataFrame:
    """Sort by lane and time and number the rows. `held` holds the only reference to the frame
    (emptied here), so that its columns are freed one by one as their sorted copies are made."""
    frame = held.pop()
    # stable: two spans with the same start and length nest in file order, parent first (µs-resolution traces have many)
    keys = ["pid", "tid", "ts_ns", "dur_ns"]
    order = (  # the keys sorted with their row numbers: 0.26 s for 2.2M rows where pl.arg_sort_by took 1.5 s
        frame.select(pl.col("pid", "tid").cast(pl.String), "ts_ns", "dur_ns").with_row_index("row")
        .sort(keys, descending=[False, False, False, True], maintain_order=True)
        .get_column("row")
    )
    names = [c for c in frame.columns if c != "kind"] + ["kind"]  # kind last, after ts_ns, as before
    if frame.height < NORMALIZE_WHOLE_ROWS:  # one query, where the loop below made two per column
        return frame.select(pl.int_range(0, pl.len(), dtype=pl.Int64).alias("id"), pl.col(names).gather(order))
    # One column at a time, each unsorted one dropped once its sorted copy exists: a first open
    # holds the table once plus one column, not twice (DataFrame.sort gathers every column at once).
    columns = [pl.int_range(0, frame.height, dtype=pl.Int64, eager=True).alias("id")]
    for name in names:
        column = frame.get_column(name)
        frame = frame.drop(name)
        column = column.rechunk().gather(order)  # a gather from one chunk is 3-4x faster than from the slices' chunks
        columns.append(column)
        del column
    return pl.DataFrame(columns)


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
