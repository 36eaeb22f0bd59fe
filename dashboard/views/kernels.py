"""Kernels tab: counts and time per step by kernel family (grouped bars), every kernel of every
run with count, total, mean and share of device time, and what changed against the baseline: the
plain readings first (compiled, CUDA graphs, backend, copy class), then the kernels ranked by their
effect on step time and the CPU-side ops beside them, over the steps the user picks."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboard import charts
from dashboard.engine import review
from dashboard.engine.diff import changed_rows
from dashboard.engine.kernels import kernel_table, work_unit
from dashboard.runs import Selection
from dashboard.views import link, literal, tables

CHANGE_WORDS = {
    "added": "only in this run", "removed": "only in the baseline", "more": "launched more often",
    "fewer": "launched less often", "slower": "slower (mean > +5%)", "faster": "faster (mean < -5%)",
}
OP_CHANGE_WORDS = {**CHANGE_WORDS, "more": "called more often", "fewer": "called less often"}
# red = slower, yellow = more launches, green = fewer launches or faster (the 'better' direction)
CHANGE_STYLE = {"slower": tables.ALARM_BG, "added": tables.NOTE_BG, "more": tables.NOTE_BG, "removed": tables.ADDED_BG, "fewer": tables.ADDED_BG, "faster": tables.ADDED_BG}


def render(sel: Selection) -> None:
    runs = sel.runs
    units = {label: work_unit(t) for label, t in runs.items()}
    if "leaf cpu_op" in units.values():
        st.info(
            "CPU-only traces have no kernels: their unit of work is the leaf CPU op (an op that does work — not a view, an allocation or torch.compile bookkeeping — and holds no other such op). "
            "Runs counted that way: " + ", ".join(literal.md(label) for label, u in units.items() if u == "leaf cpu_op") + ".",
            icon=":material/memory:",
        )
    split = review.device_groups(runs, sel.baseline)
    if len(split) > 1:
        st.info(literal.md(review.MIXED_DEVICES_WHY), icon=":material/call_split:")
    fam = review.families(runs)
    for group in split:
        suffix = "" if len(split) == 1 else f"_{tables.group_key(group)}"
        mine = fam.filter(pl.col("run").is_in(group.runs))
        if len(split) > 1:
            st.markdown(tables.group_heading(group))
        with st.container(key=f"chart_kernels_count{suffix}"):
            st.plotly_chart(charts.family_grouped(mine, group.runs, "count", sel.colors), key=f"fig_kernels_count{suffix}")
        with st.container(key=f"chart_kernels_time{suffix}"):
            st.plotly_chart(charts.family_grouped(mine, group.runs, "time", sel.colors), key=f"fig_kernels_time{suffix}")

    st.subheader("Every kernel, per run")
    st.caption("Over all profiled steps. Share is the kernel's part of the run's total device work time. Sort by any column; "
               "type in the table's search to filter.")
    all_kernels = pl.concat(
        [kernel_table(t).select(pl.lit(label).alias("run"), pl.all()) for label, t in runs.items()], how="vertical_relaxed"
    ).with_columns((pl.col("total_ns") / 1000.0).alias("total_us"), (pl.col("mean_ns") / 1000.0).alias("mean_us"))
    tables.show(
        all_kernels,
        "tbl_kernels",
        {
            "run": tables.text("run"),
            "name": tables.text("kernel (or leaf op)", width="large"),
            "family": tables.text("family"),
            "count": tables.count("count"),
            "per_step": tables.count("per step"),
            "total_us": tables.us("total (µs)"),
            "mean_us": tables.us("mean (µs)", digits=2),
            "share": tables.share("share of device time"),
        },
        height=420,
    )

    show_changes(sel, split)


ALL_STEPS = "all"  # the step choice that means every step (per-step figures = totals / steps); a selectbox shows None as empty
STEPS_PER_ROW = 4


def show_changes(sel: Selection, split: list[review.Group]) -> None:
    """Each run against its group's baseline: the readings, how much the top kernels explain,
    the kernel diff ranked by time, and the CPU-side op diff, over the steps the user picks."""
    runs = sel.runs
    against = {label: g.baseline for g in split for label in g.runs}
    others = [label for label in runs if label != against[label]]
    heading = f"Against the baseline: {sel.baseline}" if len(split) == 1 else "Against each group's baseline: " + ", ".join(
        f"{g.baseline} ({g.name})" for g in split
    )
    st.subheader(heading, anchor=False)
    if sel.baseline is None or not others:
        st.info("Select at least two runs of the same kind (GPU or CPU-only) to compare kernels against the baseline.")
        return
    if "kd_base" not in st.session_state:  # seeded from the link whenever the widget has no state
        st.session_state["kd_base"] = st.query_params.get("names") != "full"
    left, right = st.columns(2)
    with left:
        by_base = st.toggle(
            "Group template instances by base name", key="kd_base",
            help="On: one row per kernel (namespace::function), its template instances and signatures folded together, so "
            "a kernel whose template arguments changed is one row that got slower or faster, not a 'removed' and an 'added' "
            "row that cancel. Off: every full kernel name, as the rest of the dashboard shows them.",
        )
    with right:
        only_changes = st.toggle("Show only kernels and ops that changed", value=True, key="kernels_only_changes")
    link.publish("names", None if by_base else "full")
    steps = pick_steps(sel, [label for label in runs if label in others or label in against.values()])
    changes = review.changes(runs, sel.baseline, steps, by="base" if by_base else "name")

    with st.container(key="kernels_readings"):
        for change in changes:
            show_readings(change, len(changes) > 1)

    kernels = stacked(changes, "kernels")
    summary = review.kernel_change_counts(kernels, others)
    present = [c for c in summary.columns if c != "run"]
    st.caption(
        "How many distinct kernels changed, by kind of change ('more'/'fewer': launches per step; 'slower'/'faster': mean "
        "duration off by more than 5%). Below, each kernel ranked by its effect on step time: the change of its total time "
        "per step, largest first, either sign. Red = slower, yellow = more or new, green = fewer, gone or faster."
    )
    tables.show(
        summary, "tbl_kernels_change_summary", {"run": tables.text("run"), **{c: tables.count(CHANGE_WORDS.get(c, c)) for c in present}},
        height=tables.fit(summary.height),
    )
    with st.container(key="kernels_explained"):
        for change in changes:
            st.markdown(explained_line(change, len(changes) > 1))
    shown = kernels.filter(pl.col("change") != "same") if only_changes else kernels
    tables.show(
        shown,
        "tbl_kernels_delta",
        {
            "run": tables.text("run") if len(changes) > 1 else None,
            "baseline": tables.text("against") if len(split) > 1 else None,
            "change": tables.text("change"),
            "name": tables.text("kernel (or leaf op)", width="large"),
            "family": tables.text("family", width="small"),
            "delta_us_per_step": st.column_config.NumberColumn(
                "Δ µs / step", format="%+.1f", help="Change of the kernel's total time per step: run − baseline"),
            "base_us_per_step": tables.us("baseline µs / step"),
            "other_us_per_step": tables.us("run µs / step"),
            "delta_per_step": st.column_config.NumberColumn("Δ count / step", format="%+.4g"),
            "base_per_step": tables.count("baseline count / step"),
            "other_per_step": tables.count("run count / step"),
            "base_mean_us": tables.us("baseline mean (µs)", digits=2),
            "other_mean_us": tables.us("run mean (µs)", digits=2),
        },
        highlight=lambda row: CHANGE_STYLE.get(row["change"], ""),
        height=tables.fit(shown.height, 420),
    )
    show_ops(changes, others, only_changes, len(split) > 1)


def pick_steps(sel: Selection, labels: list[str]) -> dict[str, int | None]:
    """One step picker per run (every step by default), each kept in the link as kstep=<run id>=<step>."""
    st.caption("Steps compared: one step of each run, or every step (then each figure is its total over the steps / their number).")
    chosen: dict[str, int | str] = {}
    for start in range(0, len(labels), STEPS_PER_ROW):
        row = labels[start:start + STEPS_PER_ROW]
        for column, label in zip(st.columns(STEPS_PER_ROW), row):
            trace = sel.runs[label]
            options: list[int | str] = [ALL_STEPS] + trace.steps["step"].to_list()
            names = {r["step"]: f"{r['name']} ({r['dur_ns'] / 1e6:.3g} ms)" for r in trace.steps.iter_rows(named=True)}
            names[ALL_STEPS] = f"all {trace.steps.height} steps (per-step mean)"
            ident = sel.ids.get(label, label)
            key = f"kd_step_{ident}"
            link.seed_keyed(key, "kstep", ident, options, ALL_STEPS, parse=int)
            with column:
                chosen[label] = st.selectbox(f"Steps of {literal.md(label)}", options, key=key, format_func=names.get)
    link.publish_keyed("kstep", {sel.ids.get(label, label): step for label, step in chosen.items()}, ALL_STEPS)
    return {label: None if step == ALL_STEPS else step for label, step in chosen.items()}


def _steps_words(step: int | None) -> str:
    return "all steps" if step is None else f"step {step}"


def show_readings(change: review.Change, named: bool) -> None:
    """The one-line readings of a run against its baseline (compiled, CUDA graphs, backend, copy class)."""
    who = f"**{literal.md(change.run)}** against **{literal.md(change.baseline)}**: " if named else ""
    if not change.readings:
        st.markdown(f"{who}no compile, CUDA-graph, attention-backend or copy-class change.")
        return
    lines = "\n".join(f"- {literal.md(line)}" for line in change.readings)
    st.info(f"{who}what the trace shows plainly\n\n{lines}", icon=":material/lightbulb:")


def explained_line(change: review.Change, named: bool) -> str:
    """How much of the change in summed kernel time per step the top rows account for."""
    top_ns, total_ns = change.explained
    rows = changed_rows(change.kernels, change.top)
    steps = (
        "over all steps" if change.step_run is None and change.step_base is None
        else f"{_steps_words(change.step_run)} against the baseline's {_steps_words(change.step_base)}"
    )
    who = f"**{literal.md(change.run)}** against **{literal.md(change.baseline)}**, {steps}: " if named else f"{steps.capitalize()}: "
    share = f" ({top_ns / total_ns:.0%})" if abs(total_ns) >= 1e3 else ""
    if not rows:
        return (f"{who}no kernel changed its count or its mean time by more than 5%; summed kernel time per step changed by "
                f"**{_signed_us(total_ns)}**.")
    return (
        f"{who}the top {rows} changed row{'s' if rows > 1 else ''} account{'' if rows > 1 else 's'} for **{_signed_us(top_ns)}** "
        f"of the **{_signed_us(total_ns)}** change in summed kernel time per step{share}; the rest comes from the rows below "
        "them and those within 5% ('same'). Summed kernel time counts overlapping kernels twice, so it is not the step time."
    )


def _signed_us(ns: float) -> str:
    us = ns / 1000.0
    return f"{us:+,.1f} µs" if abs(us) < 10_000 else f"{us / 1000:+,.2f} ms"


OP_CATEGORY_WORDS = {"cpu_op": "op", "user_annotation": "annotation"}


def show_ops(changes: list[review.Change], others: list[str], only_changes: bool, grouped: bool) -> None:
    """The CPU side: ops, annotations and runtime calls per step, ranked like the kernels."""
    st.subheader("CPU side: ops, annotations and launch calls", anchor=False)
    st.caption(
        "The same comparison for what runs on the host: CPU ops, record_function annotations and runtime calls "
        "(cudaLaunchKernel, cudaGraphLaunch, ...), ranked by the change of their time per step. Ops nest, so their times add up "
        "to more than the step."
    )
    ops = stacked(changes, "ops")
    summary = review.kernel_change_counts(ops, others)
    present = [c for c in summary.columns if c != "run"]
    tables.show(
        summary, "tbl_ops_change_summary", {"run": tables.text("run"), **{c: tables.count(OP_CHANGE_WORDS.get(c, c)) for c in present}},
        height=tables.fit(summary.height),
    )
    shown = ops.filter(pl.col("change") != "same") if only_changes else ops
    tables.show(
        shown,
        "tbl_ops_delta",
        {
            "run": tables.text("run") if len(changes) > 1 else None,
            "baseline": tables.text("against") if grouped else None,
            "change": tables.text("change"),
            "name": tables.text("op or call", width="large"),
            "cat": tables.text("kind"),
            "delta_us_per_step": st.column_config.NumberColumn("Δ µs / step", format="%+.1f"),
            "base_us_per_step": tables.us("baseline µs / step"),
            "other_us_per_step": tables.us("run µs / step"),
            "delta_per_step": st.column_config.NumberColumn("Δ count / step", format="%+.4g"),
            "base_per_step": tables.count("baseline count / step"),
            "other_per_step": tables.count("run count / step"),
        },
        highlight=lambda row: CHANGE_STYLE.get(row["change"], ""),
        height=tables.fit(shown.height, 420),
    )


def stacked(changes: list, table: str) -> pl.DataFrame:
    """The kernels or ops diff of every run, one frame with run and baseline columns, times in µs
    for display."""
    return pl.concat(
        [getattr(c, table).select(pl.lit(c.run).alias("run"), pl.lit(c.baseline).alias("baseline"), pl.all()) for c in changes],
        how="vertical_relaxed",
    ).with_columns(
        *[(pl.col(f"{side}_ns_per_step") / 1000.0).alias(f"{side}_us_per_step") for side in ("base", "other", "delta")],
        (pl.col("base_mean_ns") / 1000.0).alias("base_mean_us"), (pl.col("other_mean_ns") / 1000.0).alias("other_mean_us"),
    )
