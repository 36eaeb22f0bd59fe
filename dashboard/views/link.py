"""What a shared link carries: widget state seeded from st.query_params on a session's first run,
and written back on every run, so a pasted URL restores the same runs, baseline and choices.

(The open tab is written to the link by views/tab_set.py.) Runs are named in the URL by
their stable ids, never by the editable labels, so renaming a run does not break a link; the
labels travel beside them as `label=<run id>=<label>` (repeated), so a reload or a shared link
shows the author's names.
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
    else:
        # Assigned again so the widget sends its current label to the browser: a keyed selectbox
        # answers with the label it shows, and after a rename the browser's old label would match
        # no option and the choice would fall back to the default (seed_list does the same).
        st.session_state[key] = st.session_state[key]


def seed_number(key: str, param: str, default: float | None) -> None:
    """Initialise a number input's state from the URL parameter `param` on first sight (None:
    an empty input)."""
    seeded: set[str] = st.session_state.setdefault(SEEDED, set())
    if key in seeded and key in st.session_state:
        return  # (a widget's state is dropped while its tab is closed: then the URL still has its value)
    value = default
    raw = st.query_params.get(param)
    if raw is not None:
        try:
            value = float(raw)
        except ValueError:
            value = default
    st.session_state[key] = value if value is None or value == value else default
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


LABELS = "label_overrides"  # session state: run id -> the user's label
PENDING_LABELS = "label_pending"  # session state: 'id=label' values of the URL whose run is not loaded (yet)


def seed_labels(param: str, ids: Sequence[str]) -> dict[str, str]:
    """The user's labels, run id -> label: on a session's first run taken from the repeated URL
    parameter `param` ('<run id>=<label>'); a value naming a run that is not loaded waits until
    it is (an upload named by a shared link). Ids may hold '=', so each value is matched against
    the loaded ids (the longest that fits), not split blindly."""
    own: dict[str, str] = st.session_state.setdefault(LABELS, {})
    seeded: set[str] = st.session_state.setdefault(SEEDED, set())
    if LABELS not in seeded:
        st.session_state[PENDING_LABELS] = list(st.query_params.get_all(param))
        seeded.add(LABELS)
    waiting: list[str] = []
    for raw in st.session_state.get(PENDING_LABELS, []):
        match = max((i for i in ids if raw.startswith(i + "=")), key=len, default=None)
        if match is None:
            waiting.append(raw)
        elif raw[len(match) + 1 :].strip():
            own.setdefault(match, raw[len(match) + 1 :].strip())
    st.session_state[PENDING_LABELS] = waiting
    return own


def publish_labels(param: str) -> None:
    """Write the user's labels (and those still waiting for their run) into the URL."""
    own: dict[str, str] = st.session_state.get(LABELS, {})
    publish(
        param, [f"{ident}={label}" for ident, label in own.items()] + list(st.session_state.get(PENDING_LABELS, []))
    )


def seed_keyed(
    key: str, param: str, name: str, options: Sequence[Any], default: Any, parse: Callable[[str], Any] = str
) -> None:
    """Initialise one of several choices that share the repeated URL parameter `param`, whose values
    read '<name>=<value>' (e.g. kstep=cpu/naive=3: the step of run cpu/naive), whenever the widget
    keyed `key` has no state (a session's first run, or after its tab was closed, which drops
    widget state): taken from the URL when it names a valid option, else `default`. Ids may hold
    '=', so the value is whatever follows '<name>='."""
    if key in st.session_state and st.session_state[key] in options:
        return
    value = default
    for raw in st.query_params.get_all(param):
        if raw.startswith(name + "="):
            try:
                candidate = parse(raw[len(name) + 1 :])
            except (TypeError, ValueError):
                continue
            if candidate in options:
                value = candidate
    st.session_state[key] = value


def publish_keyed(param: str, values: dict[str, Any], default: Any) -> None:
    """Write '<name>=<value>' for every choice in `values` (name -> value) that is not `default`
    into the repeated URL parameter `param` (removed when none is)."""
    publish(param, [f"{name}={value}" for name, value in values.items() if value != default])
