"""The runs' names: the label each run is shown by everywhere (the user's own, else the default,
made unique), and the sidebar's table to rename runs. The user's labels live in session state and
travel in the link (views/link.py)."""

from __future__ import annotations

import streamlit as st

from dashboard import catalog, catalog_offers
from dashboard.views import link


def run_labels(loaded: list[catalog_offers.Offer]) -> dict[str, str]:
    """Run id -> label shown everywhere: the user's own label, else the default, made unique."""
    origins = [catalog.origin(r.source) for r in loaded]
    first = catalog.unique_labels([r.label for r in loaded], origins)
    # a collection whose labels need its name to be told apart carries it on every label, not on some
    tagged = {o for r, o, d in zip(loaded, origins, first) if d != r.label and o}
    defaults = [f"{r.label} [{o}]" if o in tagged and d == r.label else d for r, o, d in zip(loaded, origins, first)]
    own: dict[str, str] = st.session_state.setdefault(link.LABELS, {})
    wanted = [own.get(r.source.id) or d for r, d in zip(loaded, defaults)]
    final = catalog.unique_labels(wanted, [None] * len(wanted))
    return {r.source.id: label for r, label in zip(loaded, final)}


def edit_labels(sidebar, loaded: list[catalog_offers.Offer], labels: dict[str, str]) -> None:
    """A small table to rename runs. Edits are folded into session state (and so into the link),
    then the table is drawn afresh (a new key), so the next edit is never lost."""
    version = st.session_state.setdefault("label_editor_version", 0)
    key = f"label_editor_{version}"
    with sidebar.expander("Rename runs"):
        st.data_editor(
            {
                "label": [labels[r.source.id] for r in loaded],
                "file": [
                    f"{catalog.origin(r.source)}: {r.source.name} ({catalog.format_bytes(r.size_bytes)})"
                    for r in loaded
                ],
            },
            key=key,
            disabled=["file"],
            hide_index=True,
            width="stretch",
            column_config={
                "label": st.column_config.TextColumn(
                    "label", help="Double-click to rename; the link keeps the name", required=True, width="medium"
                ),
                "file": st.column_config.TextColumn("from", width="medium"),
            },
        )
    state = st.session_state.get(key) or {}
    changes = state.get("edited_rows") or {}
    if changes:
        own: dict[str, str] = st.session_state.setdefault(link.LABELS, {})
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
