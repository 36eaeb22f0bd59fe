"""A file read in slices while it is still being written: an upload on its way (dashboard/uploads.py
starts one with arrival() and hands it to load_trace(arrival=...)) or a .json.gz inflating into a
temporary file. The result is the same trace as reading the finished file.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable, Union

from dashboard.engine.model import slice_workers
from dashboard.engine.model.trace import Trace

from dashboard.engine.load import frames, slices, workers
from dashboard.engine.load.frames import _Part, _drain
from dashboard.engine.load.reading import GZIP_MAGIC, _Reading
from dashboard.engine.load.slices import _EDGE_MAX, _head, _next_cut, _pread, _slices, _tail
from dashboard.engine.load.workers import (
    _PARSE_LOCK,
    _SliceFailed,
    _close_when_idle,
    _discard_workers,
    _release_workers,
    _slice_workers,
    _workers,
)


class _Abandoned(Exception):
    """The file stopped arriving (the upload was cut off or refused) or its reading was given up."""


class Arrival:
    """A plain-JSON file being written in order (an upload on its way), read in slices while it
    grows: the writer calls grew(size) after each write it has flushed, then finished(size) or
    abandon(). Once the last byte is in, the rest of the slices are read and the trace is built
    in this object's thread; load_trace(path, arrival=this) then takes that trace (once) instead
    of parsing. Whenever the early reading cannot go on (a gzip file, a slice that is not a list of
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
        self.taken = False  # load_trace took the trace (take): it is not held here any more
        self.trace: Trace | None = None
        self.read_upto = 0  # bytes of the file read so far, for progress
        self.shown = 0.0  # the largest share of it reported (_share)
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
                    progress(self._share(self.read_upto))
                self.cond.wait(0.1)
            return None if self.abandoned or self.taken else self.trace

    def take(self, progress: Callable[[float], None] | None = None) -> Trace | None:
        """The trace, once (later calls answer None and this object lets go of it); None when the
        early reading gave up. A progress callback that raises (a rerun) leaves it for the next call."""
        trace = self.result(progress)
        with self.cond:
            self.trace, self.taken = None, True
        return trace

    def _share(self, upto: int) -> float:
        """The share of the file read (bytes up to `upto`), never less than one shown before: the
        size declared while it arrives (an inflating .json.gz's guess) gives way to the size it
        ends at, and the bar must not step back then."""
        share = min(upto / max(self.size if self.closed else self.declared, upto, 1), 1.0)
        self.shown = max(self.shown, share)
        return self.shown

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
                if self.used_workers and workers._workers_started is not None:
                    _close_when_idle(workers._workers_started)

    def _run(self) -> None:
        trace = self._outcome()
        with self.cond:
            self.trace = None if self.abandoned else trace
            self.ready = True
            self.cond.notify_all()

    def _read(self) -> Trace | None:
        reading = _Reading(self.label)
        have, complete = self._wait(slices._EDGE_BYTES)
        with open(self.path, "rb") as fh:
            first = _pread(fh, 0, 3)
            if first[:2] == GZIP_MAGIC:
                return None
            bom = first == b"\xef\xbb\xbf"
            want = slices._EDGE_BYTES
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
                have, complete = self._wait(lo + count * (slices.SLICE_BYTES + slices._EDGE_BYTES))
                if complete:
                    break
                bounds = []
                while have - lo >= slices.SLICE_BYTES + slices._EDGE_BYTES:
                    cut = _next_cut(fh, lo, slices.SLICE_BYTES, slices._EDGE_BYTES)
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
            self._read_slices(_slices(fh, lo, end, slices.SLICE_BYTES), parts, reading, last=True)
        meta.update(meta_after)
        with _PARSE_LOCK:
            if self.abandoned:
                return None
            trace = frames._build_trace(_drain(parts), meta, reading)
        trace.size_bytes = size - (3 if bom else 0)
        return trace

    def _read_slices(
        self, bounds: list[tuple[int, int]], parts: list[_Part], reading: _Reading, last: bool = False
    ) -> None:
        with _PARSE_LOCK:
            if self.abandoned:
                raise _Abandoned
            try:
                workers = _slice_workers()
                self.used_workers = True
                plain = self.declared >= slice_workers.PLAIN_FROM_BYTES  # as slices' for a file of that size
                tasks = [(self.path, lo, hi, self.label, plain) for lo, hi in bounds]
                for task, (status, answer) in zip(tasks, workers.run(tasks)):
                    got, learnt = slices.parts_of(status, answer, task)
                    parts.extend(got)
                    if learnt is not None:
                        reading.add(learnt)
                    hi, answer = task[2], None  # (its buffers) not held while the tables are built
                    self.read_upto = hi
                    if self.progress:
                        self.progress(self._share(hi))
            except (_SliceFailed, OSError, EOFError, ValueError, AttributeError, ImportError):
                _discard_workers()
                raise _Abandoned from None
            except BaseException:  # answers left in the pipes must not be read as another file's
                _discard_workers()
                raise
            if last:  # closed before the tables are built, as load_trace does
                if self.progress:
                    self.progress(
                        1.0
                    )  # every slice is in (the last ends where the events do, before the metadata after them)
                if self.keep_workers:
                    _close_when_idle(workers)
                else:
                    _release_workers()
                self.used_workers = False
            else:
                workers.last_used = time.monotonic()


def arrival(path: Union[str, os.PathLike], label: str, declared: int | None) -> Arrival | None:
    """Start reading a file that is being written, when it is large enough for the worker
    processes (see Arrival); None otherwise. A large upload is read while it arrives: its slices go
    to the worker processes as their bytes land on disk, so that the parse overlaps the transfer
    instead of following it (the 910 MB trace's slices take 2.6-2.7 s of its 4.4-4.6 s load, and a
    browser on the same machine sends it in 3-8 s). Whoever starts it owns it: abandon() it when
    the file is not to be read (an upload removed or cut off)."""
    if declared is None or declared < slices.SLICED_MIN_BYTES or _workers() < 2:
        return None
    return Arrival(Path(path), label, declared)


def take_arrival(
    early: Arrival, source: Union[str, os.PathLike], label: str, progress: Callable[[float], None] | None
) -> Trace | None:
    """What `early` read of `source` while it arrived, for load_trace: None (and `early` let go)
    when it read another file or under another name, or gave up."""
    if early.path != str(source) or early.label != label:
        early.abandon()
        return None
    return early.take(progress)
