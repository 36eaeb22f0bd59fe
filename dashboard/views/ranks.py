"""Ranks tab: for each selected run traced on several ranks (one trace per process of a
distributed job), every rank's time per step, the slowest rank of each step and how far it is
behind the median rank (the straggler every other rank waits for); with two or more such runs,
each against the baseline rank by rank and slowest rank against slowest rank. Runs of one rank
get one line saying how to open a run of several; when no selected run has several, a loaded one
that is not selected (the bundled sample_traces/ranks-cpu on first start) is shown instead.

The numbers are dashboard.engine.compare.ranks'; this module only lays them out (and draws the per-rank
chart, here because no other tab needs it)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
import polars as pl
import streamlit as st

from dashboard import charts
from dashboard.engine import Trace
from dashboard.engine.compare.ranks import (
    STRAGGLER_SPREAD,
    compare_ranks,
    compare_slowest,
    rank_matrix,
    rank_medians,
    rank_of,
    rank_step_times,
    slowest_of,
    stragglers,
)
from dashboard.engine.compare.speed import device_groups
from dashboard.runs import Selection
from dashboard.views import literal, tables

NEEDS_RANKS = (
    "The Ranks tab needs a run traced on several ranks, and {which} one rank. To open one, name a folder holding one "
    "trace per rank (each with its distributedInfo.rank, as torch.profiler writes it in a distributed job) when you "
    "start the dashboard: `streamlit run dashboard/app.py -- FOLDER`; or add the folder to the trace store with "
    "`attnscope ingest FOLDER` and open the run it prints with `?run=store/RUN_ID`."
)
STRAGGLER_CELL = "background-color: #fde0dc; color: #8b0000; font-weight: 600"
STRAGGLER_COLOR = "#d62728"
LEGEND_RANKS = 8  # more ranks than this are drawn in grey without a legend entry each
MANY_RANKS_COLOR = "#b8b8b8"


def run_ranks(sel: Selection) -> dict[str, dict[int, Trace]]:
    """Label -> every rank's trace, for each selected run (Selection.ranks; a run it does not list
    is one trace: its own rank, or 0)."""
    return {label: sel.ranks.get(label) or {rank_of(trace) or 0: trace} for label, trace in sel.runs.items()}


def render(sel: Selection) -> None:
    ranked = run_ranks(sel)
    multi = {label: ranks for label, ranks in ranked.items() if len(ranks) > 1}
    single = [label for label in ranked if label not in multi]
    if not multi:
        which = "the selected run has only" if len(single) == 1 else "each selected run has only"
        with st.container(key="ranks_none"):
            st.info(NEEDS_RANKS.format(which=which), icon=":material/lan:")
        show_other(sel)
        return
    st.caption(
        "A rank's step time is the one the other tabs use: device busy time (the union of its GPU work) on GPU traces, the "
        "CPU step span on CPU-only ones; steps are matched across ranks by their ProfilerStep number. The slowest rank "
        "of a step is the straggler the others wait for at the next collective; *behind* is its lead over the median "
        f"rank (steps where that is {STRAGGLER_SPREAD - 1:.0%} or more are shaded). The other tabs show each run as its slowest "
        "rank (the one slowest in most steps)."
    )
    if single:
        with st.container(key="ranks_single"):
            st.caption(
                "Traced on one rank, so not shown here: "
                + ", ".join(f"**{literal.md(label)}**" for label in single)
                + "."
            )
    times = {label: rank_step_times(ranks) for label, ranks in multi.items()}
    for i, (label, run_times) in enumerate(times.items()):
        show_run(i, label, run_times)
    if len(multi) > 1:
        show_comparison(times, {label: sel.runs[label] for label in multi}, sel.baseline)


def show_other(sel: Selection) -> None:
    """When no selected run has several ranks: one that is loaded but not selected (on first start
    the bundled sample_traces/ranks-cpu), shown as a selected one is, so that the tab shows what it
    is for; a choice among them when there are several."""
    if not sel.other_ranks:
        return
    labels = list(sel.other_ranks)
    with st.container(key="ranks_other"):
        label = (
            labels[0]
            if len(labels) == 1
            else st.selectbox("Run of several ranks to show", labels, key="ranks_other_pick")
        )
        st.caption(
            f"Meanwhile, here is **{literal.md(label)}**, loaded but not in the comparison (choose it in the sidebar's "
            "Compare to set it beside other runs of several ranks). The dashboard bundles one such run, "
            "sample_traces/ranks-cpu: a small data-parallel attention job on 4 CPU ranks fed uneven sequence lengths, "
            "made with `python -m collectors ranks` (its README says how)."
        )
    show_run("other", label, rank_step_times(sel.other_ranks[label]), selected=False)


def show_run(i: int | str, label: str, times: pl.DataFrame, selected: bool = True) -> None:
    """One run of several ranks: the slowest rank of each step, a chart of every rank's step
    times, the step x rank table and each rank's median. `selected`: the run is in the comparison."""
    ranks = sorted(set(times["rank"].to_list()))
    st.subheader(literal.md(label), anchor=False, divider="gray")
    if times.height == 0:
        with st.container(key=f"ranks_about_{i}"):
            st.info(
                "No ProfilerStep in these rank traces, so there is no step time to put side by side (profile with a "
                "schedule and call prof.step() each step).",
                icon=":material/info:",
            )
        return
    slow = stragglers(times).with_columns(
        # a step where no rank did any work has no straggler and no spread
        pl.when(pl.col("slowest_us") > 0).then(pl.col("slowest_rank")).otherwise(None).alias("slowest_rank"),
        pl.col("spread").fill_nan(None),
    )
    medians = rank_medians(times)
    overall = slowest_of(times)
    wins = medians.filter(pl.col("rank") == overall)["straggler_steps"].to_list() if overall is not None else []
    working = slow.filter(pl.col("slowest_rank").is_not_null()).height  # steps with device work
    with st.container(key=f"ranks_about_{i}"):
        st.markdown(
            f"{len(ranks)} ranks ({rank_list(ranks)}), {slow.height} step{'' if slow.height == 1 else 's'}. "
            f"Slowest rank: **rank {overall}**, the straggler in {wins[0] if wins else 0} of {working} "
            f"step{'' if working == 1 else 's'} where a rank worked; the other tabs show this run as rank {overall}"
            + ("." if selected else " once it is selected.")
        )
    tables.show(
        slow,
        f"tbl_ranks_stragglers_{i}",
        {
            "step": st.column_config.NumberColumn("step", format="%d"),
            "ranks": tables.count("ranks", "How many ranks recorded this step"),
            "slowest_rank": st.column_config.NumberColumn(
                "slowest rank",
                format="%d",
                help="The rank the others wait for in this step (ties: the lowest rank); empty when no rank did any work",
            ),
            "slowest_us": tables.us("its time (µs)"),
            "median_us": tables.us("median rank (µs)", "The median of every rank's time in this step"),
            "behind_us": tables.us("behind (µs)", "Slowest - median: how long the median rank waits"),
            "spread": tables.ratio("slowest / median", "1× when the ranks keep pace"),
        },
        highlight=lambda row: tables.NOTE_BG if row.get("straggler") else "",  # ranks.stragglers decides
        height=tables.fit(slow.height, 420),
    )
    left, right = st.columns([3, 2])
    with left, st.container(key=f"chart_ranks_{i}"):
        st.plotly_chart(rank_lines(times, slow), key=f"fig_ranks_{i}")
    with right:
        tables.show(
            medians,
            f"tbl_ranks_medians_{i}",
            {
                "rank": st.column_config.NumberColumn("rank", format="%d"),
                "steps": tables.count("steps"),
                "median_us": tables.us(
                    "median step (µs)", "The rank's median over its own steps, as the Speedups tab takes a run's"
                ),
                "straggler_steps": tables.count(
                    "slowest in (steps)", "In how many steps this rank was the slowest and behind the median rank"
                ),
            },
            height=tables.fit(medians.height, 360),
        )
    show_matrix(i, times, slow)


def show_matrix(i: int | str, times: pl.DataFrame, slow: pl.DataFrame) -> None:
    """Step x rank: each rank's time per step, the slowest rank's cell marked."""
    matrix = rank_matrix(times)
    rank_columns = [c for c in matrix.columns if c != "step"]
    data = matrix.to_pandas()
    # a step where every rank took the same time has no straggler to mark
    behind = slow.filter(pl.col("behind_us") > 0)
    slowest = dict(zip(behind["step"].to_list(), behind["slowest_rank"].to_list()))

    def mark(row: pd.Series) -> list[str]:
        rank = slowest.get(int(row["step"]))
        return [STRAGGLER_CELL if rank is not None and column == str(rank) else "" for column in row.index]

    config: dict[str, Any] = {"step": st.column_config.NumberColumn("step", format="%d", width="small", pinned=True)}
    config.update({c: tables.us(f"rank {c} (µs)") for c in rank_columns})
    st.caption(
        "Every rank's time per step (µs); in red, the slowest rank of each step where one is behind the others. Empty: the "
        "rank did not record that step."
    )
    with st.container(key=f"tbl_ranks_steps_{i}"):
        st.dataframe(
            data.style.apply(mark, axis=1) if len(data) else data,
            hide_index=True,
            column_config=config,
            height=tables.fit(len(data), 420),
            placeholder=tables.MISSING,
        )


def rank_lines(times: pl.DataFrame, slow: pl.DataFrame) -> go.Figure:
    """Every rank's step time (µs) per step, one line per rank, each step's straggler circled and
    named (where it is behind the median rank). Up to LEGEND_RANKS ranks get a colour and a
    legend entry each; more are thin grey lines (hover names them), so the stragglers stand out."""
    fig = go.Figure()
    steps = [str(s) for s in sorted(set(times["step"].to_list()))]
    ranks = sorted(set(times["rank"].to_list()))
    few = len(ranks) <= LEGEND_RANKS
    for n, rank in enumerate(ranks):
        mine = times.filter(pl.col("rank") == rank).sort("step")
        fig.add_trace(
            go.Scatter(
                x=[str(s) for s in mine["step"].to_list()],
                y=mine["step_us"].to_list(),
                mode="lines+markers",
                name=f"rank {rank}",
                showlegend=few,
                line={"color": charts.run_color(n) if few else MANY_RANKS_COLOR, "width": 1.5 if few else 1},
                marker={"size": 6 if few else 4},
                hovertemplate=f"rank {rank}<br>step %{{x}}<br>%{{y:,.1f}} µs<extra></extra>",
            )
        )
    marked = slow.filter(pl.col("behind_us") > 0)  # a step where every rank kept pace has no straggler
    fig.add_trace(
        go.Scatter(
            x=[str(s) for s in marked["step"].to_list()],
            y=marked["slowest_us"].to_list(),
            mode="markers+text",
            name="slowest rank",
            marker={"size": 14, "color": "rgba(0,0,0,0)", "line": {"color": STRAGGLER_COLOR, "width": 2}},
            text=[f"rank {r}" for r in marked["slowest_rank"].to_list()],
            textposition="top center",
            textfont={"color": STRAGGLER_COLOR, "size": 11},
            customdata=marked.select("slowest_rank", "spread").rows(),
            hovertemplate="step %{x}: rank %{customdata[0]} is the slowest<br>%{y:,.1f} µs, %{customdata[1]:.3f}× the median<extra></extra>",
        )
    )
    fig.update_layout(
        title={
            "text": "Time per step on each rank" + ("" if few else f" ({len(ranks)} ranks in grey)"),
            "x": 0,
            "xanchor": "left",
        },
        height=360,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        plot_bgcolor="white",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1},
        xaxis={"title": "step", "type": "category", "categoryorder": "array", "categoryarray": steps},
        yaxis={"title": "µs per step (axis not from zero)", "gridcolor": "#eee"},
    )
    return fig


def rank_list(ranks: list[int]) -> str:
    """'0–3, 5, 7–9' for ranks [0, 1, 2, 3, 5, 7, 8, 9] (sorted, distinct)."""
    spans: list[list[int]] = []
    for rank in ranks:
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}–{b}" for a, b in spans)


def show_comparison(times: dict[str, pl.DataFrame], traces: dict[str, Trace], baseline: str | None) -> None:
    """Each run of several ranks against its device group's baseline (the chosen baseline when it
    is such a run, else the group's first): rank by rank, and slowest rank against slowest rank."""
    pairs = [(g.baseline, run) for g in device_groups(traces, baseline) for run in g.runs if run != g.baseline]
    st.subheader("Against the baseline, rank by rank", anchor=False, divider="gray")
    if not pairs:
        st.info(
            "The runs of several ranks are of different device kinds (GPU and CPU-only), so none is compared with another.",
            icon=":material/call_split:",
        )
        return
    st.caption(
        "Speedup = the baseline's median step time / the run's (above 1 = faster), for the same rank in each run, then for "
        "each run's slowest rank (the pair the other tabs compare) and for the median over steps of whichever rank was the "
        "slowest in that step. Only runs traced on several ranks are compared here"
        + (
            ""
            if baseline in traces
            else f"; **{literal.md(baseline)}** is not one, so the first of them is the baseline"
        )
        + "."
    )
    by_rank = pl.concat(
        [
            compare_ranks(times[base], times[run]).select(
                pl.lit(run).alias("run"), pl.lit(base).alias("baseline"), pl.all()
            )
            for base, run in pairs
        ]
    )
    slowest = pl.concat(
        [
            compare_slowest(times[base], times[run]).select(
                pl.lit(run).alias("run"), pl.lit(base).alias("baseline"), pl.all()
            )
            for base, run in pairs
        ]
    )
    tables.show(
        slowest,
        "tbl_ranks_slowest",
        {
            "run": tables.text("run"),
            "baseline": tables.text("baseline"),
            "measure": tables.text("compared", width="medium"),
            "baseline_rank": st.column_config.NumberColumn("baseline's rank", format="%d"),
            "baseline_us": tables.us("baseline (µs)"),
            "candidate_rank": st.column_config.NumberColumn("run's rank", format="%d"),
            "candidate_us": tables.us("run (µs)"),
            "speedup": tables.ratio("speedup", "Baseline / run; above 1 the run is faster"),
        },
        highlight=_speed_style,
    )
    tables.show(
        by_rank,
        "tbl_ranks_by_rank",
        {
            "run": tables.text("run"),
            "baseline": tables.text("baseline"),
            "rank": st.column_config.NumberColumn("rank", format="%d", width="small"),
            "baseline_us": tables.us("baseline median (µs)"),
            "candidate_us": tables.us("run median (µs)"),
            "speedup": tables.ratio("speedup", "Baseline / run for this rank; empty where only one run has the rank"),
        },
        highlight=_speed_style,
        height=tables.fit(by_rank.height, 480),
    )


def _speed_style(row: dict[str, Any]) -> str:
    """Red for a rank (or slowest rank) that got slower by more than 1%."""
    speedup = row.get("speedup")
    return tables.ALARM_BG if speedup is not None and speedup < 0.99 else ""
