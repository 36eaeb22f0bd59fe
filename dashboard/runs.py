"""The dashboard's session layer: one trace cache per server process, the upload limit streamlit
is configured with, and what a user picked (a Selection).

Everything that does not need streamlit (discovery, parsing, hashing, caching, the trace store,
runs of several ranks) is in dashboard.engine.catalog; app.py calls it with the cache made here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from dashboard.engine import Trace
from dashboard.engine import catalog
from dashboard.engine.catalog import ENV_MAX_UPLOAD, ENV_TRACES, Collection, Run, TraceCache

# Run (with .ranks and .trace, the slowest rank's) and Collection are the catalog's; views name them from here.
__all__ = ["ENV_MAX_UPLOAD", "ENV_TRACES", "Collection", "Run", "Selection", "TraceCache", "trace_cache", "upload_limit"]


@st.cache_resource(show_spinner=False)
def trace_cache() -> TraceCache:
    """The process-wide cache shared by every session, backed by the trace store."""
    return catalog.server_cache()


def upload_limit(environ: dict[str, str] | None = None) -> tuple[int, str | None]:
    """The largest upload the dashboard parses, in bytes: $ATTNSCOPE_MAX_UPLOAD_BYTES when set,
    else streamlit's server.maxUploadSize (MiB, as streamlit counts it); and a line when the
    setting is not a whole number of bytes above 0."""
    return catalog.upload_limit(int(st.get_option("server.maxUploadSize")) * 1024 * 1024, environ)


@dataclass
class Selection:
    """What the tabs draw: the selected runs as {label: Trace} in display order (a run of several
    ranks: its slowest rank's trace), the baseline's label, each label's run id (for links), the
    collections on offer, each label's colour (fixed by the run's place among all loaded runs, so
    it does not change with the selection) and each label's ranks (rank -> Trace)."""

    runs: dict[str, Trace]
    baseline: str | None
    ids: dict[str, str]
    collections: list[Collection] = field(default_factory=list)
    colors: dict[str, str] = field(default_factory=dict)
    ranks: dict[str, dict[int, Trace]] = field(default_factory=dict)
