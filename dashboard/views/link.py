"""What a shared link carries: widget state seeded from st.query_params on a session's first run,
and written back on every run, so a pasted URL restores the same runs, baseline and choices.

(The tab itself is bound with st.tabs(..., bind="query-params").) Values in the URL are stable
run ids, never the editable labels, so renaming a run does not break a link.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import streamlit as st

SEEDED = "_link_seeded"


def seed_list(key: str, param: str, options: Sequence[str], default: Sequence[str]) -> list[str]:
    """Initialise st.session_state[key] (a list) from the repeated URL parameter `param` the first
    time this key is seen in the session, else keep it; drop values no longer offered. Returns
    the URL's values that are not among the options (for a 'not loaded here' note)."""
    seeded: set[str] = st.session_state.setdefault(SEEDED, set())
    missing: list[str] = []
    if key not in seeded:
        wanted = st.query_params.get_all(param)
        missing = [v for v in wanted if v not in options]
        chosen = [v for v in wanted if v in options]
        st.session_state[key] = chosen if chosen else list(default)
        seeded.add(key)
    else:
        st.session_state[key] = [v for v in st.session_state.get(key, []) if v in options]
    return missing


def seed_choice(key: str, param: str, options: Sequence[Any], default: Any, parse: Callable[[str], Any] = str) -> None:
    """Initialise st.session_state[key] (one value) from the URL parameter `param` on first sight,
    and keep it among `options` afterwards (falling back to `default`)."""
    seeded: set[str] = st.session_state.setdefault(SEEDED, set())
    if key not in seeded:
        raw = st.query_params.get(param)
        value = default
        if raw is not None:
            try:
                candidate = parse(raw)
            except (TypeError, ValueError):
                candidate = None
            if candidate in options:
                value = candidate
        st.session_state[key] = value
        seeded.add(key)
    elif st.session_state.get(key) not in options:
        st.session_state[key] = default


def seed_number(key: str, param: str, default: float) -> None:
    """Initialise a number input's state from the URL parameter `param` on first sight."""
    seeded: set[str] = st.session_state.setdefault(SEEDED, set())
    if key in seeded:
        return
    value = default
    raw = st.query_params.get(param)
    if raw is not None:
        try:
            value = float(raw)
        except ValueError:
            value = default
    st.session_state[key] = value
    seeded.add(key)


def publish(param: str, value: Any) -> None:
    """Write one parameter into the URL (a list becomes a repeated parameter; None removes it)."""
    if value is None or value == []:
        if param in st.query_params:
            del st.query_params[param]
        return
    if isinstance(value, (list, tuple)):
        st.query_params[param] = [str(v) for v in value]
    else:
        st.query_params[param] = str(value)
