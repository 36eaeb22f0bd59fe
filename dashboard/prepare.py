"""The first screen's runs, opened at the server's start while the browser loads the page.

`streamlit run dashboard/app.py` with no link shows the same first screen to every first visitor:
the runs the picker offers and the default selection's Overview. The server knows them before any
browser connects, so its start opens them in a thread (the files read and hashed, the runs on offer
described, the default ones parsed and stored, the Overview's analyses of each run computed and
kept) into the cache the sessions share; the page's scripts take 0.7-1.0 s to load on the 2-core
machine before its first script run asks for anything. That run then finds its runs in memory. A
session's first call of runs.trace_cache() waits for the thread (at most WAIT_S), so nothing is
parsed twice.

Only what opens quickly is opened here: when a file the picker would parse to offer, or a chosen
run's files, come to more than MAX_BYTES, nothing is, and the page opens them with its progress
bar as before. Uploads and links are a session's own, and are not known here.

Ahead: once a page has drawn its runs and the server has run no page for QUIET_S, a thread
computes every other per-trace analysis of those runs (what the Kernels, Speedups and Timeline
diff tabs ask for on a first visit), so that a user who reads the Overview first finds them done.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from dashboard import catalog, catalog_offers
from dashboard.catalog import Pending, TraceCache
from dashboard.engine import Comparison, Trace
from dashboard.engine.model.trace import ANALYSES
from dashboard.engine.store import kept

MAX_BYTES = 64 * 1024 * 1024  # the files' bytes on disk the start opens without a progress bar
WAIT_S = 30.0  # the longest a session's first run waits for the start's opening
OVERVIEW_TABLES = ("overview", "overview_shown", "copies", "findings", "groups", "health", "families", "phases")

_LOG = logging.getLogger(__name__)
_STARTED: dict[str, Any] = {}  # "cache": the process's TraceCache, "thread": the thread opening the first screen


def start(environ: dict[str, str] | None = None) -> threading.Thread:
    """Make the process's trace cache and open the first screen's runs into it, in a thread (once
    per process: a second call returns the first's thread)."""
    if "thread" not in _STARTED:
        cache = catalog.server_cache(environ)
        thread = threading.Thread(target=_open_quietly, args=(cache,), name="attnscope-first-screen", daemon=True)
        _STARTED.update(cache=cache, thread=thread)
        thread.start()
    return _STARTED["thread"]


def server_cache() -> TraceCache:
    """The process's trace cache: the one start() made, once its thread is done (or WAIT_S has
    passed: the cache is shared by threads anyway, as it is by sessions), else a new one."""
    thread = _STARTED.get("thread")
    if thread is None:
        return catalog.server_cache()
    thread.join(WAIT_S)
    return _STARTED["cache"]


def _open_quietly(cache: TraceCache) -> None:
    try:
        first_screen(cache)
    except Exception as exc:  # noqa: BLE001 - the page opens what is missing itself, and says what fails
        _LOG.warning(
            "attnscope: opening the first screen's runs at the server's start stopped (%s: %s); "
            "the page opens them itself",
            type(exc).__name__,
            catalog.one_line(str(exc)),
        )


def first_screen(cache: TraceCache) -> list[str]:
    """Open what a first page with no link shows into `cache`: the bundled and given files read
    and hashed, the runs on offer, the default selection parsed (or read back from the store) and
    its Overview's analyses computed. The ids of the runs opened; [] when the files to parse come
    to more than MAX_BYTES (left to the page, with progress) or nothing is on offer."""
    collections, loose, _ = catalog.discover(extra=catalog.extra_paths())
    found = catalog.pending_files([s for c in collections for s in c.sources] + loose, cache)
    pending = [p for p in found if isinstance(p, Pending)]
    described = catalog_offers.manifest_facts(collections)
    if _unopened_bytes([p for p in pending if p.source.id not in described], cache) > MAX_BYTES:
        return []
    offered, _ = catalog_offers.offer_runs(pending, collections, cache=cache)
    by_id = {offer.source.id: offer for offer in offered}
    chosen = catalog_offers.opening_runs(catalog.run_sets(offered), offered)
    if not chosen or _unopened_bytes([m for i in chosen for m in by_id[i].members], cache) > MAX_BYTES:
        return []
    opened, _ = catalog_offers.open_offers([by_id[i] for i in chosen], cache=cache)
    traces = {i: opened[i].trace for i in chosen if i in opened}
    if traces:
        comparison = Comparison(traces, next(iter(traces)))
        for name in OVERVIEW_TABLES:  # each run's share of them is kept on its trace (and in the store)
            getattr(comparison, name)
    return list(traces)


def _unopened_bytes(pending: list[Pending], cache: TraceCache) -> int:
    """The bytes on disk of the files among `pending` that are neither in memory nor failed before
    (a stored one counts: reading it back is not free, but it is no parse either way)."""
    return sum(p.size for p in pending if cache.get(p.digest) is None and p.digest not in cache.failures)


# Ahead of the tabs: the selection's analyses computed while the server is idle.
QUIET_S = 3.0  # how long the server has run no page before it computes ahead: the browser draws a page for up to 2 s after its run
AHEAD_MAX_BYTES = 128 << 20  # a larger trace (its JSON bytes) is left to the tabs that ask: its analyses take seconds


class Ahead:
    """Every per-trace analysis (model.trace.ANALYSES) of the traces a page drew, computed in a
    thread of its own once no page of any session has run for QUIET_S: a first visit to the Kernels
    or Speedups tab with the 21 bundled H200 runs computed 0.7-1.0 s of them (cProfile in AppTest),
    which a user reading the Overview gives the server time for. They are kept in the store as the
    tabs' own would be. A page's run waits for an analysis the thread is computing (the engine's
    per-analysis lock) instead of computing it twice; between analyses the thread waits while any
    page runs. Only the server's start turns it on (enable): AppTest's runs and tests compute
    nothing behind their back."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.running = 0
        self.quiet_since = time.monotonic()
        self.todo: list[Trace] = []
        self.done: dict[int, weakref.ref] = {}  # id -> the trace whose analyses were all tried (some may fail)
        self.enabled = False
        self.working = False  # a thread is taking traces from `todo`
        self.thread: threading.Thread | None = None

    def enable(self) -> None:
        self.enabled = True

    @contextlib.contextmanager
    def page_run(self) -> Iterator[None]:
        """Around a page's script run: the thread computes nothing while it lasts, and what the
        run's analyses answer is written to the store after it (kept.Writer.hold)."""
        with self.changed:
            self.running += 1
        try:
            with kept.WRITER.hold():
                yield
        finally:
            with self.changed:
                self.running -= 1
                self.quiet_since = time.monotonic()
                self.changed.notify_all()

    def add(self, traces: Iterable[Trace]) -> None:
        """Compute these traces' analyses ahead (those not too large, not done, not already waiting)."""
        if not self.enabled:
            return
        with self.changed:
            self.done = {i: ref for i, ref in self.done.items() if ref() is not None}
            for trace in traces:
                tried = (ref := self.done.get(id(trace))) is not None and ref() is trace
                waiting = any(t is trace for t in self.todo)
                if not (tried or waiting) and trace.size_bytes <= AHEAD_MAX_BYTES and _not_done(trace):
                    self.todo.append(trace)
            if self.todo and not self.working:
                self.working = True
                self.thread = threading.Thread(target=self._work, name="attnscope-ahead", daemon=True)
                self.thread.start()

    def _quiet(self) -> None:
        """Wait until no page runs and none has for QUIET_S."""
        with self.changed:
            while True:
                left = self.quiet_since + QUIET_S - time.monotonic()
                if self.running == 0 and left <= 0:
                    return
                self.changed.wait(left if self.running == 0 else None)

    def _work(self) -> None:
        while True:
            with self.changed:
                if not self.todo:
                    self.working = False  # (under the lock: a trace added from now on starts a new thread)
                    return
                trace = self.todo[0]
            for analysis in list(ANALYSES.values()):
                self._quiet()
                try:
                    analysis(trace)
                except Exception:  # noqa: BLE001 - the tab that asks computes it again and says what fails
                    pass
            with self.changed:
                self.todo.pop(0)
                self.done[id(trace)] = weakref.ref(trace)


def _not_done(trace: Trace) -> bool:
    return any(key not in trace._analyses for key in ANALYSES)


AHEAD = Ahead()
