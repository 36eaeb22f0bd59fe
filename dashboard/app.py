"""attnscope dashboard: `streamlit run dashboard/app.py [-- TRACE_OR_FOLDER ...]`.

Wiring only: page config, the run picker in the sidebar, and the tabs. Each tab is a module in
dashboard/views that draws what dashboard.engine computes.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # `streamlit run dashboard/app.py` runs this file as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typing import Callable

import streamlit as st

from dashboard import report, runs
from dashboard.views import backends, copies, kernels, link, overview, speedups, timeline

TABS = {
    "Overview": overview.render,
    "Kernels": kernels.render,
    "Copies": copies.render,
    "Timeline diff": timeline.render,
    "Speedups": speedups.render,
    "Backends": backends.render,
}
TAB_FAILED = "The {tab} tab could not be drawn for the selected runs:"


def main() -> None:
    st.set_page_config(page_title="attnscope: attention profiles side by side", page_icon=":material/bolt:", layout="wide")
    st.title("attnscope", anchor=False)
    st.caption(
        "Attention profiles side by side: kernels per step, hidden copies, timelines, which SDPA backend really ran, "
        "parity and speed. Pick runs in the sidebar; the URL keeps your choice, so you can share it."
    )
    selection = pick_runs()
    if selection is None:
        return
    tabs = st.tabs(list(TABS), key="tab", bind="query-params")
    for tab, (name, render) in zip(tabs, TABS.items()):
        if tab.open:
            with tab:
                draw_tab(name, render, selection)


def draw_tab(name: str, render: Callable[[runs.Selection], None], selection: runs.Selection) -> None:
    """Draw one tab; an unexpected error in the engine or the view becomes one red line in that
    tab (its type and message, no traceback) instead of taking the whole app down."""
    try:
        render(selection)
    except Exception as exc:  # noqa: BLE001 - one bad run must not take the dashboard down
        st.error(
            f"{TAB_FAILED.format(tab=name)} {type(exc).__name__}: {runs.one_line(str(exc))}. "
            "The other tabs are unaffected; deselecting the run that causes it brings this one back.",
            icon=":material/error:",
        )


def pick_runs() -> runs.Selection | None:
    """The sidebar: uploads, parsing with progress, labels, which runs to compare and the baseline."""
    cache = runs.trace_cache()
    collections, loose, failures = runs.discover(extra=runs.extra_paths())
    pending: list[runs.Pending] = []
    for source in [s for c in collections for s in c.sources] + loose:
        item = runs.pending_file(source, cache)
        (pending if isinstance(item, runs.Pending) else failures).append(item)

    sidebar = st.sidebar
    sidebar.header("Runs")
    uploads = sidebar.file_uploader(
        "Add torch.profiler traces (.json or .json.gz)", type=["json", "gz"], accept_multiple_files=True, key="uploads",
        help="Any Chrome-trace JSON written by torch.profiler / Kineto, up to 1 GB each. Parsed once, then cached.",
    )
    digests: dict[str, str] = st.session_state.setdefault("upload_digests", {})
    taken = {p.source.id for p in pending}
    for upload in uploads or []:
        data = upload.getvalue()
        digest = digests.get(upload.file_id) or digests.setdefault(upload.file_id, runs.digest_of(data))
        item = runs.pending_upload(upload.name, data, digest, taken)
        taken.add(item.source.id)
        pending.append(item)

    slot = st.empty()
    loaded, bad = runs.open_all(pending, progress=lambda frac, text: slot.progress(frac, text=text), cache=cache)
    slot.empty()
    for failure in failures + bad:
        sidebar.error(failure.message, icon=":material/error:")

    if not loaded:
        st.info(
            "No runs yet. Upload a torch.profiler trace in the sidebar, or make a collection with "
            "`python -m collectors --out sample_traces/mine`.",
            icon=":material/upload_file:",
        )
        return None

    labels = run_labels(loaded)
    ids = [r.source.id for r in loaded]
    bundled = [r.source.id for r in loaded if r.source.collection is not None or r.source.path is not None]
    missing = link.seed_list("sel_runs", "run", ids, bundled or ids)
    known: set[str] = st.session_state.setdefault("known_runs", set())
    fresh = [i for i in ids if i not in known and i.startswith("upload/")]
    if fresh and "sel_runs" in st.session_state:
        st.session_state["sel_runs"] = st.session_state["sel_runs"] + [i for i in fresh if i not in st.session_state["sel_runs"]]
    known.update(ids)
    if missing:
        st.session_state["link_missing"] = missing
    still_missing = [m for m in st.session_state.get("link_missing", []) if m not in ids]
    if still_missing:
        sidebar.info("This link names runs that are not loaded here: " + ", ".join(still_missing) + ". Upload them to see them.")

    chosen = sidebar.multiselect(
        "Compare", ids, key="sel_runs", format_func=labels.get, placeholder="Choose runs to compare",
        help="The runs every tab shows side by side, in this order.",
    )
    link.publish("run", chosen)
    if not chosen:
        st.info("Choose at least one run in the sidebar.", icon=":material/checklist:")
        return None
    link.seed_choice("baseline", "baseline", chosen, chosen[0])
    baseline = sidebar.selectbox(
        "Baseline", chosen, key="baseline", format_func=labels.get,
        help="Speedups, kernel differences and 'more copies' notes are measured against this run.",
    )
    link.publish("baseline", baseline)
    edit_labels(sidebar, loaded, labels)
    by_id = {r.source.id: r for r in loaded}
    selection = runs.Selection(
        runs={labels[i]: by_id[i].trace for i in chosen},
        baseline=labels[baseline],
        ids={labels[i]: i for i in chosen},
        collections=collections,
    )
    offer_downloads(sidebar, selection)
    return selection


def run_labels(loaded: list[runs.Run]) -> dict[str, str]:
    """Run id -> label shown everywhere: the user's own label, else the default, made unique."""
    defaults = runs.unique_labels([r.label for r in loaded], [r.source.collection or ("upload" if r.source.id.startswith("upload/") else "file") for r in loaded])
    own: dict[str, str] = st.session_state.setdefault("label_overrides", {})
    wanted = [own.get(r.source.id) or d for r, d in zip(loaded, defaults)]
    final = runs.unique_labels(wanted, [None] * len(wanted))
    return {r.source.id: label for r, label in zip(loaded, final)}


def edit_labels(sidebar, loaded: list[runs.Run], labels: dict[str, str]) -> None:
    """A small table to rename runs. Edits are folded into session state, then the table is drawn
    afresh (a new key), so the next edit is never lost."""
    version = st.session_state.setdefault("label_editor_version", 0)
    key = f"label_editor_{version}"
    with sidebar.expander("Rename runs"):
        st.data_editor(
            {"label": [labels[r.source.id] for r in loaded], "file": [r.source.name for r in loaded],
             "from": [r.source.collection or ("upload" if r.source.id.startswith("upload/") else "file") for r in loaded],
             "size": [runs.format_bytes(r.size_bytes) for r in loaded]},
            key=key, disabled=["file", "from", "size"], hide_index=True,
            column_config={"label": st.column_config.TextColumn("label", help="Double-click to rename", required=True)},
        )
    state = st.session_state.get(key) or {}
    changes = state.get("edited_rows") or {}
    if changes:
        own: dict[str, str] = st.session_state.setdefault("label_overrides", {})
        for row, change in changes.items():
            if "label" in change and 0 <= int(row) < len(loaded):
                text = str(change["label"] or "").strip()
                ident = loaded[int(row)].source.id
                if text:
                    own[ident] = text
                else:
                    own.pop(ident, None)
        st.session_state["label_editor_version"] = version + 1
        st.rerun()


def offer_downloads(sidebar, selection: runs.Selection) -> None:
    """HTML report and Markdown summary of the selected runs, made when the button is pressed."""
    sidebar.subheader("Share")
    chosen, baseline = dict(selection.runs), selection.baseline or ""
    sidebar.download_button(
        "HTML report (works offline)", data=lambda: report.html_report(chosen, baseline),
        file_name="attnscope-report.html", mime="text/html", icon=":material/download:", key="dl_html",
    )
    sidebar.download_button(
        "Markdown summary (for a PR comment)", data=lambda: report.markdown_report(chosen, baseline),
        file_name="attnscope-summary.md", mime="text/markdown", icon=":material/download:", key="dl_md",
    )


main()
