"""The app's font as the page draws it, estimated without a browser: Source Sans, which Streamlit
writes the tables' grids in (14 px) and, through its plotly theme, the charts' tick labels (12 px).
About 6.4 px a lower-case letter, space or punctuation at 14 px bold, 7.2 a digit, 9 a capital or
m/w: a little over the regular face, so a text given this room is never cut. Checked against the
browser's own measure of the font in tests/test_browser_fit.py (the grids' run names, the charts'
run labels)."""

from __future__ import annotations

NARROW_PX, DIGIT_PX, WIDE_PX = 6.4, 7.2, 9.0  # at 14 px


def text_px(value: str, size_px: float = 14.0) -> float:
    """The px `value` takes in Source Sans at `size_px` (at most)."""
    at_14 = sum(WIDE_PX if c.isupper() or c in "mwMW@%" else DIGIT_PX if c.isdigit() else NARROW_PX for c in value)
    return at_14 * size_px / 14.0
