"""The sidebar's trace store sections: saving the view on screen under a short link, and what the
store holds (its size and cap, a pin per run in view, the stored traces of the loaded runs, what
it removed to keep under its cap)."""

from __future__ import annotations

import streamlit as st

from dashboard import catalog, runs
from dashboard.views import literal

SHOWN_EVICTED = 5  # traces the store removed that the sidebar names; the rest are counted


def offer_saved_view(sidebar, cache: runs.TraceCache) -> None:
    """Save what is on screen (runs, labels, baseline, tab, prices) with a note under a short id:
    `?view=<id>` on this server shows it to a reviewer, uploads included."""
    if cache.store is None:
        return
    note = sidebar.text_input("Note for a saved view", key="view_note", placeholder="e.g. PR 1234: flash vs naive")
    if sidebar.button("Save view (short link)", key="save_view", icon=":material/bookmark_add:"):
        query = {key: st.query_params.get_all(key) for key in st.query_params if key != "view"}
        view_id = cache.store.save_view({"query": query, "note": note})
        st.session_state["saved_view_id"] = view_id
    if st.session_state.get("saved_view_id"):
        sidebar.code(saved_view_link(st.session_state["saved_view_id"]), language=None, wrap_lines=True)
        sidebar.caption(
            "The link to copy (the button beside it): it opens this view on this server, with its runs (uploads come "
            "from the trace store), labels, baseline, tab and note."
        )


def saved_view_link(view_id: str) -> str:
    """The whole link of a saved view: the page's address as the user's browser has it (scheme,
    host, port and path; st.context.url, without the query), then `?view=<id>`. Without a browser
    (a script run by AppTest) the address is unknown: the query alone."""
    from urllib.parse import urlsplit, urlunsplit

    page = st.context.url
    if not page:
        return f"?view={view_id}"
    parts = urlsplit(page)
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", f"view={view_id}", ""))


def show_store(
    sidebar, cache: runs.TraceCache, in_view: list[tuple[str, catalog.Run]], loaded: list[tuple[str, catalog.Run]]
) -> None:
    """How much the trace store holds and its cap (uploads survive a restart and are shared by
    link through it), a pin per run in view (pinned runs are never removed to keep under the cap),
    the stored traces of the runs loaded in this session (other sessions' uploads are counted, not
    named), and what the store removed after this session's uploads to keep under its cap."""
    if cache.store_problem:
        sidebar.warning(literal.md(cache.store_problem), icon=":material/database:")
    if cache.store is None:
        return
    store = cache.store
    cap = store.max_bytes
    removed = st.session_state.get("store_evicted") or []
    if removed:
        sidebar.warning(
            evicted_line(removed, cap, {sha for _, run in loaded for sha in run.digests.values()}),
            icon=":material/auto_delete:",
        )
    stored = store.traces()
    by_sha = {t.sha: t for t in stored}
    used = sum(t.stored_bytes for t in stored)
    of = f" of {catalog.format_bytes(cap)}" if cap is not None else " (no cap)"
    with sidebar.expander(f"Trace store: {len(stored)} traces, {catalog.format_bytes(used)}{of}"):
        st.caption(
            f"At {literal.md(str(store.root))}. Parsed traces reopen from here without parsing; links name uploads by their content hash. "
            + (
                f"Over {catalog.format_bytes(cap)} (ATTNSCOPE_STORE_MAX_BYTES), the least recently opened unpinned traces are "
                "removed after each trace is stored. "
                if cap is not None
                else ""
            )
            + "Pin a run to keep it whatever the cap."
        )
        for label, run in in_view:
            shas = list(run.digests.values())
            rows = [by_sha.get(sha) for sha in shas]
            if any(r is None for r in rows):
                st.caption(f"{literal.md(label)}: not in the store")
                continue
            key = f"pin_{run.source.id}"
            st.session_state[key] = all(r.pinned for r in rows)
            st.checkbox(
                f"Pin {literal.label(label)} ({catalog.format_bytes(sum(r.stored_bytes for r in rows))})",
                key=key,
                on_change=pin_run,
                args=(store, shas, key),
                help="A pinned run is never removed from the store to keep it under its cap.",
            )
        here = [
            (label, rank, by_sha[sha]) for label, run in loaded for rank, sha in run.digests.items() if sha in by_sha
        ]
        shown = list({t.sha: (label, rank, t) for label, rank, t in here}.values())  # a trace two runs share: once
        st.dataframe(
            {
                "run": [label for label, _, _ in shown],
                "rank": [rank for _, rank, _ in shown],
                "pinned": [t.pinned for _, _, t in shown],
                "stored": [catalog.format_bytes(t.stored_bytes) for _, _, t in shown],
                "file": [t.source for _, _, t in shown],
            },
            hide_index=True,
            width="stretch",
        )
        others = [t for t in stored if t.sha not in {t.sha for _, _, t in shown}]
        if others:
            st.caption(
                f"And {len(others)} other stored trace{'s' if len(others) != 1 else ''} "
                f"({catalog.format_bytes(sum(t.stored_bytes for t in others))}): "
                "other sessions' uploads and runs not loaded here."
            )


def evicted_line(removed: list, cap: int | None, known: set[str]) -> str:
    """What the store removed to keep under its cap: the traces of runs this session has loaded by
    name (five, then a count), other sessions' uploads only counted."""
    mine = [t for t in removed if t.sha in known]
    theirs = [t for t in removed if t.sha not in known]
    parts = [f"{literal.md(t.source)} ({catalog.format_bytes(t.stored_bytes)})" for t in mine[:SHOWN_EVICTED]]
    rest = mine[SHOWN_EVICTED:] + theirs
    if rest:
        what = "more" if parts else f"trace{'s' if len(rest) != 1 else ''} not loaded here"
        parts.append(f"{len(rest)} {what} ({catalog.format_bytes(sum(t.stored_bytes for t in rest))})")
    return (
        f"Trace store over its cap of {catalog.format_bytes(cap)}: removed the least recently opened unpinned "
        f"trace{'s' if len(removed) != 1 else ''}: {' and '.join(parts) if len(parts) <= 2 else ', '.join(parts[:-1]) + ' and ' + parts[-1]}. "
        f"Links to {'them' if len(removed) != 1 else 'it'} no longer open; pinned runs stay."
    )


def pin_run(store, shas: list[str], key: str) -> None:
    """Pin or unpin every trace (rank) of a run, as its checkbox now says."""
    for sha in shas:
        store.pin(sha, bool(st.session_state.get(key)))
