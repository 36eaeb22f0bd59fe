"""The dashboard's session layer: one trace cache per server process, the upload limit streamlit
is configured with, and what a user picked (a Selection).

Everything that does not need streamlit (discovery, parsing, hashing, caching, the trace store,
runs of several ranks) is in dashboard.catalog; app.py calls it with the cache made here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import streamlit as st

from dashboard import uploads
from dashboard.engine import Comparison, Trace
from dashboard.catalog import ENV_MAX_UPLOAD, ENV_TRACES, Collection, Run, TraceCache
from dashboard.catalog_offers import ARTICLE_VARIANTS, MODES, article_path, mode_of

# Run (with .ranks and .trace, the slowest rank's) and Collection are the catalog's; views name them from here.
__all__ = [
    "ARTICLE_VARIANTS",
    "ENV_MAX_UPLOAD",
    "ENV_TRACES",
    "Collection",
    "MODES",
    "Run",
    "Selection",
    "Throttled",
    "TraceCache",
    "article_path",
    "comparison_for",
    "drop_closed_uploads",
    "mode_of",
    "trace_cache",
    "upload_limit",
]


PROGRESS_EVERY_S = 0.25
STORE_WRITE_WAIT_S = 10.0  # the longest a new trace's store write waits for the tabs to be drawn (app.pick_runs)


class Throttled:
    """A progress callback that draws at most every PROGRESS_EVERY_S seconds, and at once when the
    text changes (the next file) or the bar is full: a large file's slices report 20 times a
    second, and each drawing costs the browser a layout and a paint (in headless Chromium on the
    2-core machine, 2.2 s of CPU over a 5 s parse, taken from the parse's workers)."""

    def __init__(self, draw: Callable[..., Any]) -> None:
        self.draw, self.last_text, self.last_at = draw, None, float("-inf")

    def __call__(self, fraction: float, text: str) -> None:
        now = time.monotonic()
        if text != self.last_text or fraction >= 1.0 or now - self.last_at >= PROGRESS_EVERY_S:
            self.draw(fraction, text=text)
            self.last_text, self.last_at = text, now


@st.cache_resource(show_spinner=False)
def trace_cache() -> TraceCache:
    """The process-wide cache shared by every session, backed by the trace store: the one the
    server's start opened the first screen's runs into (dashboard/prepare.py), once that is done."""
    from dashboard import prepare

    return prepare.server_cache()


def drop_closed_uploads(registry: uploads.Registry = uploads.REGISTRY) -> int:
    """Delete the uploads of sessions that have ended; the bytes freed on disk. Streamlit 1.67
    keeps a closed tab's session for a reconnect in a cache with a time limit, and when the time
    is up nothing shuts the session down (measured with st.file_uploader: a 187 MB upload stayed
    in the server's memory two minutes after its tab closed, past a 5 s limit). Each script run
    lets expired sessions go, then deletes the spill files of sessions the runtime no longer
    knows. Streamlit's private session manager is read through a guard: where it is not as in
    1.67, nothing is deleted."""
    try:
        from streamlit.runtime import Runtime

        sessions = Runtime.instance()._session_mgr  # no public way to ask which sessions exist
    except Exception:  # not under a server (AppTest, a bare import), or another streamlit
        return 0
    reap_expired_sessions(sessions)
    return registry.sweep(uploads.session_alive)


def reap_expired_sessions(sessions: Any) -> None:
    """Let go of expired disconnected sessions now: streamlit's store of them removes an expired
    one only when it is written to or its length is taken, so a closed tab's session (and its
    uploads) stayed alive until the next tab closed."""
    cache = getattr(getattr(sessions, "_session_storage", None), "_cache", None)
    lock = getattr(sessions, "_storage_lock", None)
    if cache is None or lock is None:
        return
    with lock:  # the store is written to under this lock on the server's event loop
        len(cache)


def upload_limit(environ: dict[str, str] | None = None) -> tuple[int, str | None]:
    """The largest upload the dashboard parses, in bytes: $ATTNSCOPE_MAX_UPLOAD_BYTES when set,
    else streamlit's server.maxUploadSize (MiB, as streamlit counts it); and a line when the
    setting is not a whole number of bytes above 0."""
    return uploads.configured_limit(environ)


@dataclass
class Selection:
    """What the tabs draw: the selected runs as {label: Trace} in display order (a run of several
    ranks: its slowest rank's trace), the baseline's label, each label's run id (for links), the
    collections on offer, each label's colour (fixed by the run's place among all loaded runs, so
    it does not change with the selection), each label's ranks (rank -> Trace) and each label's
    execution mode (mode_of: 'eager', 'compiled', 'CUDA graphs'; absent for traces the collectors
    did not write), by which charts of many runs are drawn in facets; the loaded runs of several
    ranks that are not selected (label -> ranks), which the Ranks tab offers when no selected run
    has several. `comparison`: the runs against the baseline (dashboard.engine.Comparison), every
    table the tabs draw, computed when a tab first asks for it; app.py hands the session's cached
    one (comparison_for), else one at the default options is made."""

    runs: dict[str, Trace]
    baseline: str | None
    ids: dict[str, str]
    collections: list[Collection] = field(default_factory=list)
    colors: dict[str, str] = field(default_factory=dict)
    ranks: dict[str, dict[int, Trace]] = field(default_factory=dict)
    modes: dict[str, str] = field(default_factory=dict)
    other_ranks: dict[str, dict[int, Trace]] = field(default_factory=dict)  # runs of several ranks not selected
    comparison: Comparison = None  # type: ignore[assignment]  # made in __post_init__ when not given

    def __post_init__(self) -> None:
        if self.comparison is None:
            self.comparison = Comparison(self.runs, self.baseline or "", colors=self.colors)


COMPARISON_KEY = "_comparison"  # st.session_state: (the selection and options it was made for, the Comparison)


def comparison_for(
    selection: Selection,
    usd_per_gpu_hour: float | None,
    usd_per_cpu_hour: float | None,
    by: str = "base",
    steps: dict[str, int | None] | None = None,
    state: Any = None,
) -> Comparison:
    """The session's Comparison of `selection` at these options: the one the previous script run
    made when the runs (the very Trace objects), labels, baseline, colours and options are the same,
    so a rerun (a tab switch, a widget) draws the tables that run computed; else a new one, kept for
    the next run. One per session: the last selection's (it holds its traces while kept)."""
    state = st.session_state if state is None else state
    steps = dict(steps or {})
    key = (
        tuple((label, selection.ids.get(label), id(trace)) for label, trace in selection.runs.items()),
        selection.baseline,
        tuple(selection.colors.items()),
        usd_per_gpu_hour,
        usd_per_cpu_hour,
        by,
        tuple(sorted(steps.items())),
    )
    kept = state.get(COMPARISON_KEY)
    if kept is not None and kept[0] == key:
        return kept[1]
    made = Comparison(
        selection.runs,
        selection.baseline or "",
        usd_per_gpu_hour,
        usd_per_cpu_hour,
        colors=selection.colors,
        by=by,
        steps=steps,
    )
    state[COMPARISON_KEY] = (key, made)
    return made
