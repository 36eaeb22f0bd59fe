"""Bytes or a path -> the trace's JSON bytes: gzip inflated chunk by chunk (ISA-L for a whole
member, zlib otherwise) and refused as soon as it passes the limit; JSON of SLICED_MIN_BYTES or
more spilled into a temporary file for the slice workers, read while it is written (arrival.py).
"""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Union

from dashboard.engine.load import slices
from dashboard.engine.load.arrival import Arrival
from dashboard.engine.load.limits import _inflates_too_far, _too_large, json_limit
from dashboard.engine.load.reading import GZIP_MAGIC, TraceError, _Reading, _label, _without_bom
from dashboard.engine.load.slices import _Stopped

if TYPE_CHECKING:
    from dashboard.engine.model.trace import Trace


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
    source: Union[str, os.PathLike, bytes],
    label: str,
    limit: int,
    spill_at: int | None,
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
    if size <= hint < slices.SLICED_MIN_BYTES:
        return None
    return hint if hint >= size else 0


def _inflate_reading(
    source: Union[str, os.PathLike, bytes], reading: _Reading, limit: int, sink: "_Sink", early: _Early
) -> _Json:
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
    """The trace's JSON from bytes in memory or a file, gzip or not, through `sink`."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _read_bytes(source, reading, limit, sink)
    return _read_file(source, reading, limit, sink)


def _read_bytes(source: Union[bytes, bytearray, memoryview], reading: _Reading, limit: int, sink: _Sink) -> _Json:
    label = reading.label
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


def _read_file(source: Union[str, os.PathLike], reading: _Reading, limit: int, sink: _Sink) -> _Json:
    label = reading.label
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
                    _gunzip(
                        itertools.chain((whole,), _file_chunks(fh, b"", label, read)), reading, limit, sink, out
                    )  # and any more
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
        return TraceError(
            f"{self.label}: cannot inflate into a temporary file in {tempfile.gettempdir()} "
            f"({exc.strerror or exc}; set TMPDIR to a folder with more room)"
        )


def _inflate_chunk(
    member: Any, data: bytes, out: int, limit: int, out_bytes: int, sink: _Sink, label: str
) -> tuple[bytes, bool, int]:
    """Inflate what `data` gives of one gzip member into `sink`, a zlib call at most out_bytes at a
    time whatever the ratio: (the bytes after the member's end, or b"" when the chunk is used up;
    True when the member ended; the bytes inflated so far). TraceError past `limit`."""
    while True:
        room = min(out_bytes, limit + 1 - out)
        piece = member.decompress(data, room)
        out += len(piece)
        if out > limit:
            raise _inflates_too_far(label, limit)
        if piece:
            sink.write(piece)
        if member.eof:
            return member.unused_data, True, out
        data = member.unconsumed_tail
        if not data and len(piece) < room:
            return b"", False, out  # this chunk is used up: read the next


def _gunzip(
    chunks: Iterable[bytes], reading: _Reading, limit: int, sink: _Sink, out_bytes: int = GZIP_OUT_BYTES
) -> None:
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
                data, done, out = _inflate_chunk(member, data, out, limit, out_bytes, sink, label)
                if done:
                    member, ended = None, True
    except zlib.error as exc:
        raise TraceError(f"{label}: not a valid gzip file ({exc})") from None
    if member is not None:  # cut off mid-member
        reading.gzip_cut = taken
        if padded_at is not None:
            sink.truncate(padded_at)
    elif between:
        raise TraceError(f"{label}: not a valid gzip file (Not a gzipped file ({between[:2]!r}))")
