"""Timeline diff tab: two runs and a step of each, drawn on one time axis from each step's
start; then what changed op by op (alignment.op_changes: the steps matched and the ops aligned as
`attnscope check` reports them, in its words), the two kernel sequences aligned in launch order
(with the stream each kernel ran on when the runs use more than one), and time by kernel family."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboard import charts
from dashboard.engine.comparison import DIFFERENT, UNIT_KERNEL, Comparison, describe, format_us, sequence_counts
from dashboard.runs import Selection
from dashboard.views import figures, link, literal, relation, tables, timeline_chart
from dashboard.views.folded import folded

OP_WORDS = {"equal": "same", "insert": "only in B", "delete": "only in A", "replace": "changed"}
OP_STYLE = {"insert": tables.ALARM_BG, "delete": tables.ADDED_BG, "replace": tables.NOTE_BG}
# Between different work the sequences are two programs side by side: where they differ, in words that call nothing a change
APART_WORDS = {"equal": "same", "insert": "only in B", "delete": "only in A", "replace": "different kernels"}


ARTICLE_B = "sdpa"  # the article's comparison: naive against the fused SDPA call
OPS_EVERY, OPS_SHOWN = "every matched step", "the two steps shown"  # what the op-aligned changes cover
OPS_LISTED = 10  # changes listed before the rest fold into an expander


def default_b(sel: Selection, first: str, group_of: dict[str, str]) -> str:
    """Run B at first sight: a run of A's kind (a GPU step beside a CPU-only step compares
    nothing), preferring the article's comparison (sdpa, in A's mode), then another variant in
    A's mode, then any other run; A itself when it is the only run."""
    label_of = {ident: label for label, ident in sel.ids.items()}
    ids = list(label_of)
    others = [i for i in ids if i != first and group_of[i] == group_of[first]] or [i for i in ids if i != first]
    if not others:
        return first

    def variant(i: str) -> str | None:
        return (sel.runs[label_of[i]].collector or {}).get("variant")

    mode = sel.modes.get(label_of[first])
    same_mode = [i for i in others if sel.modes.get(label_of[i]) == mode]
    for pool in (
        [i for i in same_mode if variant(i) == ARTICLE_B and variant(first) != ARTICLE_B],
        [i for i in same_mode if variant(i) != variant(first)],
        same_mode,
        others,
    ):
        if pool:
            return pool[0]
    return others[0]


def render(sel: Selection) -> None:
    runs = sel.runs
    labels = list(runs)
    ids = [sel.ids[label] for label in labels]
    cmp = sel.comparison
    group_of = {sel.ids[label]: cmp.device_group(label) for label in runs}
    first = sel.ids.get(sel.baseline or "", ids[0])
    # B defaults to another run of A's kind: a GPU step beside a CPU-only step compares nothing
    second = default_b(sel, first, group_of)
    link.seed_choice("tl_a", "a", ids, first)
    link.seed_choice("tl_b", "b", ids, second)
    name = {sel.ids[label]: label for label in labels}
    c1, c2, c3, c4 = st.columns(4)
    with c1:
        id_a = st.selectbox("Run A (top)", ids, key="tl_a", format_func=name.get)
    with c3:
        id_b = st.selectbox("Run B (bottom)", ids, key="tl_b", format_func=name.get)
    a, b = name[id_a], name[id_b]
    step_a = _step_picker(c2, "Step of A", cmp, a, "tl_step_a", "step_a")
    # B's step at first sight: the one `attnscope check` matches with A's (the i-th with the i-th)
    pairs = cmp.step_pairs(a, b)
    step_b = _step_picker(c4, "Step of B", cmp, b, "tl_step_b", "step_b", default=dict(pairs).get(step_a))
    for param, value in (("a", id_a), ("b", id_b), ("step_a", step_a), ("step_b", step_b)):
        link.publish(param, value)

    label_a, label_b = f"A: {name[id_a]} step {step_a}", f"B: {name[id_b]} step {step_b}"
    other_work = id_a != id_b and relation.say_pair(sel, a, b) == DIFFERENT  # said first: two programs, not a change
    if group_of[id_a] != group_of[id_b]:
        st.warning(
            f"A is a {group_of[id_a]} run and B a {group_of[id_b]} run: their times are measured differently (device busy "
            "time against the CPU step span), so read the two timelines for their shape, not their lengths.",
            icon=":material/call_split:",
        )
    st.caption(
        "Both steps start at 0 µs. One row per GPU stream, then one row per CPU thread and nesting depth "
        "(depth 0 = outermost op). Colour = kernel family (click one in the legend to hide it). Hover a bar for its name "
        "and times; drag across the chart or turn the wheel over it to zoom, double-click to see the whole step. Very busy "
        "steps merge sub-pixel events into blocks."
    )
    tl_a, tl_b = cmp.timeline(a, step_a), cmp.timeline(b, step_b)
    with st.container(key="chart_timeline"):
        timeline_chart.timeline_chart(charts.timeline_data(tl_a, tl_b, label_a, label_b), key="fig_timeline")

    _op_changes(cmp, (a, step_a), (b, step_b), pairs, group_of[id_a] == group_of[id_b], other_work)

    _show_sequence(cmp, a, step_a, b, step_b, other_work)

    _show_family_time(sel, a, step_a, b, step_b, label_a, label_b)


def _show_sequence(cmp: Comparison, a: str, step_a: int, b: str, step_b: int, other_work: bool) -> None:
    """Each step's kernels in launch order, aligned like a text diff: the counts, then the rows."""
    st.subheader("Kernel sequence, in launch order")
    seq = cmp.sequence_diff(a, step_a, b, step_b)
    streams = max(seq["a_stream"].drop_nulls().n_unique(), seq["b_stream"].drop_nulls().n_unique())
    st.caption(
        "Each step's kernels (leaf ops on CPU-only traces) in the order the CPU launched them (the launch call's time, then "
        "its correlation id), whatever stream each ran on, aligned like a text diff."
        + (" Kernels ran on more than one stream: the stream columns say where each one ran." if streams > 1 else "")
    )
    count = sequence_counts(seq)
    words = APART_WORDS if other_work else OP_WORDS
    with st.container(key="timeline_counts", horizontal=True):
        st.metric("same in both", count["equal"])
        st.metric("only in A" if other_work else "only in A (removed in B)", count["delete"])
        st.metric("only in B" if other_work else "only in B (added in B)", count["insert"])
        st.metric("different kernels at that point" if other_work else "changed at that point", count["replace"])
    only_diff = st.toggle("Show only the differences", value=True, key="tl_only_diff")
    shown = seq.filter(pl.col("op") != "equal") if only_diff else seq
    shown = shown.with_columns(
        pl.col("op").replace_strict(words, default=pl.col("op")).alias("change"),
        (pl.col("a_dur_ns") / 1000.0).alias("a_us"),
        (pl.col("b_dur_ns") / 1000.0).alias("b_us"),
    )
    tables.show(
        shown,
        "tbl_sequence",
        {
            "change": tables.text("change"),
            "a_pos": tables.count("A #"),
            "a_name": tables.text("A: kernel (or leaf op)", width="medium" if streams > 1 else "large"),
            "a_stream": st.column_config.NumberColumn("A stream", format="%d", width="small") if streams > 1 else None,
            "a_us": tables.us("A µs", digits=2),
            "b_pos": tables.count("B #"),
            "b_name": tables.text("B: kernel (or leaf op)", width="medium" if streams > 1 else "large"),
            "b_stream": st.column_config.NumberColumn("B stream", format="%d", width="small") if streams > 1 else None,
            "b_us": tables.us("B µs", digits=2),
        },
        highlight=None if other_work else lambda row: OP_STYLE.get(row["op"], ""),  # other work: no better or worse
        height=tables.fit(shown.height, 420),
    )


def _show_family_time(sel: Selection, a: str, step_a: int, b: str, step_b: int, label_a: str, label_b: str) -> None:
    """Time by kernel family in the two steps: the bars beside the table."""
    st.subheader("Time by kernel family")
    fam_ns = sel.comparison.family_time_diff(a, step_a, b, step_b)
    fam = fam_ns.with_columns(
        (pl.col("a_ns") / 1000.0).alias("a_us"),
        (pl.col("b_ns") / 1000.0).alias("b_us"),
        (pl.col("delta_ns") / 1000.0).alias("delta_us"),
    )
    left, right = st.columns([3, 2])
    with left, st.container(key="chart_timeline_family"):
        st.plotly_chart(
            figures.once(
                sel,
                ("timeline_family", a, step_a, b, step_b, label_a, label_b),
                lambda: charts.family_diff_bars(fam_ns, label_a, label_b),
            ),
            key="fig_timeline_family",
        )
    with right:
        tables.show(
            fam,
            "tbl_family_diff",
            {
                "family": tables.text("family"),
                "a_count": tables.count("A count"),
                "a_us": tables.us("A µs"),
                "b_count": tables.count("B count"),
                "b_us": tables.us("B µs"),
                "delta_us": st.column_config.NumberColumn("B − A µs", format="%+.1f"),
            },
        )


def _op_changes(
    cmp: Comparison,
    side_a: tuple[str, int],
    side_b: tuple[str, int],
    pairs: list[tuple[int, int]],
    comparable: bool,
    other_work: bool = False,
) -> None:
    """What changed op by op: alignment.op_changes over every matched step (the lines `attnscope
    check --markdown` and `--json` give for the pair) or over the two steps shown, each worded by
    alignment.describe; names shown as written. Not between different work (`other_work`): one
    program's ops are no replacement of the other's."""
    st.subheader("Op by op" if other_work else "What changed, op by op")
    if not comparable:
        st.caption(
            "Not compared: a GPU run's device time and a CPU-only run's op time are not one measure "
            "(`attnscope check` refuses the pair too)."
        )
        return
    if other_work:
        with st.container(key="timeline_op_changes"):
            st.caption(
                "Not compared: A and B do different work (the note above says why), so their ops are not aligned. "
                "Matched op by op, one program's ops would read as replacements of the other's, and its kernels and "
                "time as a change."
            )
        return
    scope = st.radio("Changes over", (OPS_EVERY, OPS_SHOWN), key="tl_ops_scope", horizontal=True)
    every = scope == OPS_EVERY
    (a, step_a), (b, step_b) = side_a, side_b
    changes = cmp.op_changes(a, b) if every else cmp.op_changes(a, b, [(step_a, step_b)])
    if every:
        extra = abs(cmp.runs[a].steps.height - cmp.runs[b].steps.height)
        shown = ", ".join(f"{x} with {y}" for x, y in pairs[:3]) + (", ..." if len(pairs) > 3 else "")
        where = (
            f"The runs' steps matched in order, as `attnscope check` matches them: {len(pairs):,} "
            f"pair{'s' if len(pairs) != 1 else ''} (A's step with B's: {shown})"
            + (f"; the longer run's {extra:,} extra step{'s' if extra != 1 else ''} left out" if extra else "")
            + ". Device work, copies and time are means per matched step; these are the lines `attnscope check` "
            "writes to `--markdown` (the first three) and `--json`."
        )
    else:
        matched = dict(pairs).get(step_a)
        where = (
            f"A's step {step_a} against B's step {step_b} alone"
            + (
                f" (`attnscope check` matches A's step {step_a} with B's step {matched})"
                if matched not in (None, step_b)
                else ""
            )
            + "."
        )
    st.caption(
        where + " Inside a step pair the top-level ops (the outermost op the code called, under its module or "
        'record_function scope) are aligned by name; an op in both whose device work changed "launches other work".'
    )
    with st.container(key="timeline_op_changes"):
        if not changes:
            st.markdown(
                "No op changed: the top-level ops and the work they launch are the same"
                + (" in every matched step." if every else " in the two steps.")
            )
            return
        lines = [f"- {describe(c, code=literal.code, plain=literal.md)}" for c in changes]
        st.markdown("\n".join(lines[:OPS_LISTED]))
        if len(lines) > OPS_LISTED:
            more = len(lines) - OPS_LISTED
            folded(
                f"{more:,} more change{'s' if more != 1 else ''}",
                "fold_timeline_changes",
                lambda: st.markdown("\n".join(lines[OPS_LISTED:])),
            )


def _step_picker(
    column, label: str, cmp: Comparison, run: str, key: str, param: str, default: int | None = None
) -> int:
    """A step of `run` (default: `default` when given, else the one closest to the median step
    time), kept in the link."""
    steps = cmp.runs[run].steps
    options = steps["step"].to_list()
    busy = dict(cmp.steps_of(run).select("step", "busy_ns").iter_rows())
    what = "device busy" if cmp.work_unit(run) == UNIT_KERNEL else "ops busy"
    names = {
        row["step"]: f"{row['name']} (span {row['dur_ns'] / 1e6:.3g} ms"
        + (f", {what} {format_us(busy[row['step']] / 1e3)})" if busy.get(row["step"]) is not None else ")")
        for row in steps.iter_rows(named=True)
    }
    link.seed_choice(key, param, options, default if default in options else cmp.representative_step(run), parse=int)
    with column:
        return st.selectbox(label, options, key=key, format_func=names.get)
