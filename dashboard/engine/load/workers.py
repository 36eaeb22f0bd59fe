"""The slice worker processes: fresh interpreters that read slices of a large file, their
length-prefixed pickle protocol over stdin/stdout, the one-parse-at-a-time lock, and their
idle timeout (WORKERS_IDLE_S, seconds).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator
from dashboard.engine.model import slice_workers
from dashboard.engine.model.slice_workers import receive_answer_bytes, send as _send, unpickle_answer


def _workers() -> int:
    return slice_workers.count()


class _Workers:
    """Worker processes that read slices: fresh interpreters (`python -c`), not forks, since
    polars' thread pool does not survive a fork of a process that used it, and multiprocessing's
    spawn and forkserver re-run the caller's main script. Tasks and results are length-prefixed
    pickles over each worker's stdin and stdout; a worker exits when its stdin closes."""

    def __init__(self, count: int) -> None:
        self.last_used = time.monotonic()
        # those a command started before its imports (slice_workers.prestart), else new ones
        self.procs = slice_workers.take(count) or slice_workers.spawn(count)

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
        """Results in task order; task i goes to worker i mod count (slices are of one size). A
        thread per worker reads its answers off the pipe as they come: a worker whose answer (a few
        MB) waited for this process to finish making the previous slice's frames stalled in its
        write, mid-pipe, and the workers sat half idle."""
        import pickle
        import queue

        count = len(self.procs)
        sent = 0
        inboxes: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in self.procs]
        for w, proc in enumerate(self.procs):
            threading.Thread(
                target=_read_answers, args=(proc.stdout, len(tasks[w::count]), inboxes[w]), daemon=True
            ).start()

        def send_upto(limit: int) -> None:
            nonlocal sent
            while sent < min(limit, len(tasks)):
                _send(self.procs[sent % count].stdin, pickle.dumps(tasks[sent]))
                sent += 1

        send_upto(IN_FLIGHT * count)
        for i in range(len(tasks)):
            answer = inboxes[i % count].get()
            if answer is None:
                raise _SliceFailed("a worker process ended")
            send_upto(i + 1 + IN_FLIGHT * count)
            yield unpickle_answer(answer)


# Slices sent ahead to each worker: it starts its next slice while its last answer waits here (three
# read the same on the 1 GB traces, and held more answers at once).
IN_FLIGHT = 2


def _read_answers(stream: Any, expected: int, inbox: Any) -> None:
    """A reader thread: put each of a worker's next `expected` answers in `inbox` as it arrives
    (None, and stop, when the pipe closes or ends mid-answer): read here, unpickled by the loading
    thread (polars frames made in a thread of their own took memory that was not given back)."""
    for _ in range(expected):
        try:
            answer = receive_answer_bytes(stream)
        except Exception:  # noqa: BLE001 - as a worker that ended: the file takes the one-process path
            answer = None
        inbox.put(answer)
        if answer is None:
            return


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


class _SliceFailed(Exception):
    """A slice that is not a list of events: the whole file takes the one-process path."""


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
