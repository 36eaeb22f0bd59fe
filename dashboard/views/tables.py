"""Showing engine frames as tables: friendly column names, number formats, highlighted rows.

Values stay the engine's numbers (formatting is done by the table, not by rounding the data), so
what a test reads from a table is what the engine computed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import polars as pl
import streamlit as st

from dashboard.engine.comparison import GROUP_GPU, Group
from dashboard.runs import Selection
from dashboard.views import figures, literal
from dashboard.views.font import text_px

ALARM_BG = "background-color: #fde0dc; color: #8b0000; font-weight: 600"
NOTE_BG = "background-color: #fff4ce"
ADDED_BG = "background-color: #e3f4e1"
MISSING = "—"  # what an empty cell shows (Streamlit would write "None")
# Row colours go through a pandas Styler, which costs about 0.4 s per 1,000 rows to build and
# send (2,808 copies of the 187 MB trace: 1.2 s); larger tables are shown without them.
HIGHLIGHT_MAX_ROWS = 1000


def us(label: str, help: str | None = None, digits: int = 1, width: str | None = None) -> Any:
    return st.column_config.NumberColumn(label, help=help, format=f"%.{digits}f", width=width)


def count(label: str, help: str | None = None, width: str | None = None) -> Any:
    return st.column_config.NumberColumn(label, help=help, format="%.4g", width=width)


def ratio(label: str, help: str | None = None, width: str | None = None) -> Any:
    return st.column_config.NumberColumn(label, help=help, format="%.3g×", width=width)


def share(label: str, help: str | None = None) -> Any:
    return st.column_config.NumberColumn(label, help=help, format="percent")


def flag(label: str, help: str | None = None) -> Any:
    return st.column_config.CheckboxColumn(label, help=help)


def text(label: str, help: str | None = None, width: str | None = None) -> Any:
    return st.column_config.TextColumn(label, help=help, width=width)


CELL_PAD_PX = 20  # a grid's cell pads 8 px a side (its text in the grid's 14 px Source Sans: views/font.py)


def text_width(values: Any, label: str = "", least: int = 60, most: int = 460) -> int:
    """The px a text column needs to show its longest value (or its label) whole, within
    [`least`, `most`]."""
    # each distinct value measured once: a run column repeats 21 names over hundreds of rows
    widest = max([text_px(label)] + [text_px(v) for v in {str(v) for v in values if v is not None}])
    return max(least, min(most, round(widest) + CELL_PAD_PX))


RUN_MOST_PX = 460  # a run column no wider than this; a longer name is written in full in its help


def run_column(config: Any, names: Any) -> Any:
    """The run column as every table shows it: pinned (it stays while the table scrolls
    sideways), wide enough for the longest run name (up to RUN_MOST_PX; the names cut there are
    written in full in the column's help)."""
    config = dict(config) if config is not None else {"label": "run"}
    distinct = {str(n) for n in names if n is not None}  # (a table repeats each run's name on its rows)
    config["pinned"] = True
    config["width"] = text_width(distinct, str(config.get("label") or "run"), most=RUN_MOST_PX)
    help = (
        config.get("help") or "The run's label (rename runs in the sidebar); this column stays while the table scrolls"
    )
    cut = sorted(n for n in distinct if text_px(n) + CELL_PAD_PX > RUN_MOST_PX)
    if cut:
        help += ". Names too long for the column, in full: " + "; ".join(literal.md(n) for n in cut)
    config["help"] = help
    return config


def hidden(config: Any) -> Any:
    """`config` hidden by default: the table's column menu (the eye in its toolbar) shows it."""
    return {**config, "hidden": True}


def fit(rows: int, most: int = 600) -> int:
    """A table height in px that shows `rows` rows without scrolling, up to `most`."""
    return min(38 + 35 * max(rows, 1), most)


def show(
    frame: pl.DataFrame,
    key: str,
    columns: dict[str, Any],
    *,
    highlight: Callable[[dict[str, Any]], str] | None = None,
    height: int | str = "auto",
    order: list[str] | None = None,
    paint: tuple[str, ...] | None = None,
    keep: tuple[Selection | None, Hashable] | None = None,
) -> None:
    """Draw `frame` restricted to `columns` (engine name -> column config, whose label is the
    display name; a None config leaves the column out), inside a container keyed `key` so tests can find it. `highlight(row)` returns
    a CSS style for a whole row, or ''; `paint`: the columns that style goes on (None: every
    column). `order`: the columns shown, in order (the rest stay in the data, hidden); None shows
    them all. `keep`: (the selection, every choice beside it that `frame` depends on): the
    coloured table is then built once and drawn as it is on the next reruns (figures.once)."""
    picked = [c for c, cfg in columns.items() if c in frame.columns and cfg is not None]
    if highlight is not None and 0 < frame.height <= HIGHLIGHT_MAX_ROWS:

        def build() -> Any:
            return styled(
                frame.select(picked).to_pandas(), [highlight(row) for row in frame.iter_rows(named=True)], paint, key
            )

        shown: Any = build() if keep is None else figures.once(keep[0], ("table", key, keep[1]), build)
        data = shown.data
    else:
        shown = data = frame.select(picked).to_pandas()
    if "run" in data.columns and columns.get("run") is not None:
        columns = {**columns, "run": run_column(columns["run"], data["run"].tolist())}
    with st.container(key=key):
        if highlight is not None and len(data) > HIGHLIGHT_MAX_ROWS:
            st.caption(
                f"{len(data):,} rows: rows are coloured in tables of up to {HIGHLIGHT_MAX_ROWS:,} rows only "
                "(a pandas Styler takes seconds per few thousand rows); the columns still say everything."
            )
        st.dataframe(
            shown,
            hide_index=True,
            column_config={c: cfg for c, cfg in columns.items() if cfg is not None},
            height=height,
            placeholder=MISSING,
            column_order=[c for c in order if c in data.columns] if order is not None else None,
        )


def styled(data: Any, styles: list[str], paint: tuple[str, ...] | None, uuid: str | None = None) -> Any:
    """A pandas Styler of `data` with `styles[i]` (a CSS style, or '') on row i's `paint` columns
    (None: every column), which renders itself once: Streamlit asks a Styler for its CSS and cell
    texts on every draw (its private _compute and _translate, as
    streamlit.elements.lib.pandas_styler_utils.marshall_styler calls them, 60 ms for 400 rows),
    so a Styler kept across reruns (show's `keep`) answers them from its first render. `uuid`: the
    name its CSS gives the table (show passes the table's key; see same_name)."""
    # Each styled cell is one selector in the CSS the browser's grid searches once per cell it
    # draws: on a table of hundreds of rows, painting two columns instead of twelve is what
    # keeps a tab switch quick.
    subset = [c for c in paint if c in data.columns] if paint is not None else None
    styler = same_name(data.style.apply(lambda d: _row_styles(d, styles), axis=None, subset=subset), uuid)
    compute, translate = styler._compute, styler._translate
    computed: list[Any] = []
    rendered: dict[Hashable, Any] = {}

    def compute_once() -> Any:
        if not computed:  # the styles, worked out from `styles` (the same every time)
            computed.append(compute())
        return styler

    def translate_once(*args: Any, **kwargs: Any) -> Any:
        asked = (args, tuple(sorted(kwargs.items())))
        try:
            hash(asked)
        except TypeError:  # asked with something unhashable (not what Streamlit passes): rendered afresh
            return translate(*args, **kwargs)
        if asked not in rendered:
            rendered[asked] = translate(*args, **kwargs)
        return rendered[asked]

    styler._compute, styler._translate = compute_once, translate_once
    return styler


def same_name(styler: Any, uuid: str | None) -> Any:
    """`styler` with `uuid` (when given) in place of the random one pandas gives each Styler. The
    uuid is in every selector of the CSS Streamlit sends with the table, so with a random one the
    same table drawn again is a new message: sent whole (the Sweep tab's table of refusals, 204 KB)
    where an unchanged message is sent as a reference to the one the browser keeps."""
    if uuid is not None:
        styler.set_uuid(uuid)
    return styler


def _row_styles(data: Any, styles: list[str]) -> Any:
    """Each row's style in every cell of it: the whole table's styles at once (a Styler's
    apply(axis=None)), as apply(axis=1) with one call per row would give them, at 0.2 ms a row less."""
    import pandas as pd  # (pandas is loaded already: `data` is its frame)

    return pd.DataFrame({i: styles for i in range(len(data.columns))}, index=data.index).set_axis(data.columns, axis=1)


def group_key(group: Group | str) -> str:
    """'gpu' or 'cpu': the suffix of a device group's element keys."""
    name = group.name if isinstance(group, Group) else group
    return "gpu" if name == GROUP_GPU else "cpu"


def group_heading(group: Group) -> str:
    """One bold Markdown line naming a device group and its baseline."""
    return f"**{group.name} runs** · baseline **{literal.md(group.baseline)}**"


def show_by_group(
    frame: pl.DataFrame,
    key: str,
    columns: dict[str, Any],
    groups: list[Group],
    *,
    highlight: Callable[[dict[str, Any]], str] | None = None,
    most: int = 600,
    order: list[str] | None = None,
    keep: tuple[Selection | None, Hashable] | None = None,
) -> None:
    """`frame` (with a `run` column) as one table under `key` when the runs form one device
    group; else one table per group (keyed `key`_gpu / `key`_cpu), each under its heading,
    all inside a container keyed `key` (`keep`: show's, for each of them)."""
    if len(groups) <= 1:
        show(frame, key, columns, highlight=highlight, height=fit(frame.height, most), order=order, keep=keep)
        return
    with st.container(key=key):
        for group in groups:
            part = frame.filter(pl.col("run").is_in(group.runs))
            st.markdown(group_heading(group))
            show(
                part,
                f"{key}_{group_key(group)}",
                columns,
                highlight=highlight,
                height=fit(part.height, most),
                order=order,
                keep=keep,
            )
