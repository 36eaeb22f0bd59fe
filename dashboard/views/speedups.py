"""Speedups tab: median time per step with its spread, speedup against the baseline, tokens per
second where the trace says how many tokens a step processes, and cost per billion tokens. GPU
and CPU-only runs are separate groups, each against its own baseline and at its own price."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboard import charts
from dashboard.engine import comparison as facade
from dashboard.engine.comparison import CROSS_DEVICE, DEFAULT_USD_PER_GPU_HOUR, GROUP_CPU, GROUP_GPU
from dashboard.runs import Selection
from dashboard.views import figures, link, literal, relation, tables


def prices(groups: list[facade.Group]) -> tuple[float | None, float | None]:
    """The price inputs for the groups present: $ per GPU-hour (default DEFAULT_USD_PER_GPU_HOUR)
    and $ per CPU-hour (empty by default: a CPU run's cost is not a GPU-hour's). Both live in
    the link ('usd', 'usd_cpu'); the share buttons read them from session state."""
    link.seed_number("usd_per_hour", "usd", DEFAULT_USD_PER_GPU_HOUR)
    link.seed_number("usd_per_cpu_hour", "usd_cpu", None)
    names = {g.name for g in groups}
    gpu = cpu = None
    if GROUP_GPU in names:
        gpu = st.number_input(
            "$ per GPU-hour",
            min_value=0.0,
            step=0.25,
            key="usd_per_hour",
            format="%.2f",
            help="What one GPU-hour costs you; cost per billion tokens = price / 3600 / (tokens per second) × 10⁹. GPU runs only.",
        )
    if GROUP_CPU in names:
        cpu = st.number_input(
            "$ per CPU-hour",
            min_value=0.0,
            step=0.05,
            key="usd_per_cpu_hour",
            format="%.2f",
            value=None,
            placeholder="not set",
            help="What an hour of the CPU machine costs you, for the CPU-only runs (empty: no cost).",
        )
    link.publish("usd", f"{gpu:g}" if gpu is not None and gpu != DEFAULT_USD_PER_GPU_HOUR else None)
    link.publish("usd_cpu", f"{cpu:g}" if cpu is not None else None)
    return gpu, cpu


def render(sel: Selection) -> None:
    cmp = sel.comparison
    split = cmp.groups
    first = st.container()  # the relation goes above the prices, once the table it reads is made
    left, right = st.columns([1, 3])
    with left:
        usd, usd_cpu = prices(split)
    with first:
        apart = relation.say(sel, cmp.speed_at(usd, usd_cpu))
    attention = cmp.efficiency
    speed = cmp.speed_with_attention(usd, usd_cpu)
    with right:
        st.caption(
            f"Speedup = the baseline's median step time / the run's (above 1 = faster than **{literal.md(sel.baseline)}**"
            + (", or than its group's baseline" if len(split) > 1 else "")
            + "). Spread = 10th to 90th percentile over the profiled steps. Tokens per step come from the collectors' "
            "metadata (batch × sequence length)."
        )
        if len(split) > 1:
            st.info(literal.md(facade.MIXED_DEVICES_WHY), icon=":material/call_split:")
    tables.show_by_group(
        speed.with_columns((pl.col("usd_per_mtok") * (charts.COST_TOKENS / 1e6)).alias("usd_per_btok")).drop(
            "usd_per_mtok"
        ),
        "tbl_speed",
        _speed_config(speed, apart),
        split,
    )
    show_efficiency(sel, attention)
    show_memory(sel)
    log = st.toggle("Logarithmic axes (when runs differ by orders of magnitude)", key="speed_log")
    if apart:
        with st.container(key="speed_apart"):
            st.caption(
                "Not the same work as their baseline: "
                + ", ".join(f"**{literal.md(r)}**" for r in speed["run"].to_list() if r in apart)
                + ". Their times below are each run's own, marked 'other work', side by side, not faster or slower; "
                "their speedup slots say why they hold no bar."
            )
    _speed_charts(sel, speed, split, log, (usd, usd_cpu))
    _speed_notes(speed)


def _speed_config(speed: pl.DataFrame, apart: list) -> dict:
    """The speed table's columns (the 'compared as' column only when some run is not the same work
    on the same device as its baseline)."""
    reason = tables.text("why no number", width="medium")
    return {
        "run": tables.text("run"),
        "median_us": tables.us("median step (µs)"),
        "speedup": tables.ratio(
            "speedup",
            "The baseline's median step / this run's (> 1 is faster). Empty between runs that do different work: "
            "see 'compared as' and the note above",
        ),
        "relation": tables.text(
            "compared as",
            "same workload; cross-device: the same work on another device; 'different workload: no speedup'",
            width=tables.text_width(speed["relation"], "compared as"),
        )
        if apart or speed["relation"].is_in([CROSS_DEVICE]).any()
        else None,
        # what a token costs next to the time, before the attention's efficiency
        "tokens_per_step": tables.count("tokens / step", width=90),
        "tokens_per_s": st.column_config.NumberColumn("tokens / s", format="%.4g"),
        "usd_per_btok": st.column_config.NumberColumn(
            charts.COST_UNIT.replace(" per ", " / "),
            format="$%.4g",
            help="The cost chart's unit: per million tokens a GPU's cost reads $0.0000…",
        ),
        "attn_tflops": st.column_config.NumberColumn(
            "attention TFLOP/s",
            format="%.4g",
            help="Achieved by attention: its FLOPs (from the recorded shapes, or the "
            "collectors' shape per step) over its device time (the op's span on CPU-only traces)",
        ),
        "attn_pct": st.column_config.NumberColumn(
            "% of roofline",
            format="%.3g%%",
            help="Achieved / min(peak TFLOP/s, intensity × peak TB/s) of the device, from "
            "the vendors' dense peaks, at the attention's minimum bytes (what a fused kernel needs; the roofline chart below "
            "places each run at the bytes its own kernels move). Empty where there is no peak: the next column says why",
        ),
        # hidden (the column menu shows it) when no run has a reason: the table then fits the page
        "attn_reason": tables.hidden(reason) if speed["attn_reason"].is_null().all() else reason,
        # one click away (the table's column menu): the spread, the price applied, where time comes from
        "p10_us": tables.hidden(tables.us("p10 (µs)")),
        "p90_us": tables.hidden(tables.us("p90 (µs)")),
        "steps": tables.hidden(tables.count("steps")),
        "time_source": tables.hidden(tables.text("time from")),
        "usd_per_hour": tables.hidden(
            st.column_config.NumberColumn(
                "$ / hour", help="The price applied: per GPU-hour or per CPU-hour", format="$%.2f"
            )
        ),
    }


def _speed_charts(sel: Selection, speed: pl.DataFrame, split: list, log: bool, prices: tuple) -> None:
    """Per device group, time per step beside the speedups; then tokens per second where known
    (`prices`: the (GPU, CPU) prices `speed` was made at: the figures are kept per choice)."""
    for group in split:
        suffix = "" if len(split) == 1 else f"_{tables.group_key(group)}"
        mine = speed.filter(pl.col("run").is_in(group.runs))
        title = "" if len(split) == 1 else f"{group.name} runs: median time per step"
        a, b = st.columns(2)
        with a, st.container(key=f"chart_speed_time{suffix}"):
            st.plotly_chart(
                figures.once(
                    sel,
                    ("speed_time", suffix, log, prices),
                    lambda: charts.step_time_bars(mine, log=log, title=title, modes=sel.modes, baseline=group.baseline),
                ),
                key=f"fig_speed_time{suffix}",
            )
        with b, st.container(key=f"chart_speedup{suffix}"):
            st.plotly_chart(
                figures.once(
                    sel,
                    ("speedup", suffix, log, prices),
                    lambda: charts.speedup_bars(mine, group.baseline, log=log, modes=sel.modes),
                ),
                key=f"fig_speedup{suffix}",
            )
    known = speed.filter(pl.col("tokens_per_s").is_not_null())
    if known.height:
        with st.container(key="chart_throughput"):
            st.plotly_chart(
                figures.once(sel, ("throughput", prices), lambda: charts.throughput_bars(speed, modes=sel.modes)),
                key="fig_throughput",
            )


def _speed_notes(speed: pl.DataFrame) -> None:
    """The runs without tokens per step (no tokens/s, no cost), and those without a price."""
    missing = speed.filter(pl.col("tokens_per_step").is_null())["run"].to_list()
    if missing:
        st.info(
            "No tokens per step in "
            + ", ".join(literal.md(m) for m in missing)
            + " (not written by the attnscope collectors), so no "
            "tokens/s or cost for them.",
            icon=":material/info:",
        )
    unpriced = speed.filter(pl.col("tokens_per_s").is_not_null() & pl.col("usd_per_hour").is_null())["run"].to_list()
    if unpriced:
        st.info(
            "No cost for "
            + ", ".join(literal.md(m) for m in unpriced)
            + ": set the $ per CPU-hour to price the CPU-only runs.",
            icon=":material/info:",
        )


def show_efficiency(sel: Selection, attention: pl.DataFrame) -> None:
    """Attention against each device's roofline: the chart, what each run was measured over, and
    every op/kernel group with its shape and numbers."""
    st.subheader("Attention against the roofline", anchor=False)
    st.caption(
        "FLOPs count QK^T and PV at 2 FLOP per multiply-add (causal pairs exactly). The roofline is min(peak TFLOP/s, "
        "intensity × peak TB/s) from the vendors' dense numbers. *whole step*: the collectors' shape over each step's device "
        "time, so naive and fused variants compare; *attention ops*: the recorded attention calls. In the table above, % of "
        "roofline is against the attention's minimum bytes (Q, K, V read once, O written once: what a fused kernel needs). "
        "On the chart each point sits at the bytes its own kernels move, from the recorded shapes: naive attention writes and "
        "reads the scores matrix at every step of its chain, so it sits far left, near the bandwidth roof. "
        "A CPU or a device the peaks table lacks gets no percentage, only its reason."
    )
    missing = attention.filter(pl.col("reason").is_not_null()).unique(
        ["run", "reason"], keep="first", maintain_order=True
    )
    if missing.height:
        with st.container(key="efficiency_reasons"):
            st.markdown(
                "\n".join(
                    f"- **{literal.md(row['run'])}**: "
                    f"{'partly measured' if row['pct_of_roofline'] is not None else 'no percentage' if row['tflops'] is not None else 'no number'}"
                    f": {literal.md(row['reason'])}"
                    for row in missing.iter_rows(named=True)
                )
            )
    points = sel.comparison.roofline
    if points.height == 0:
        st.info(
            "No attention call with a shape and a time in these runs, so nothing to place on the roofline; the table above "
            "says why for each run.",
            icon=":material/info:",
        )
    else:
        with st.container(key="chart_roofline"):
            st.plotly_chart(
                figures.once(sel, "roofline", lambda: charts.roofline(points, sel.colors)), key="fig_roofline"
            )
    left_out = sel.comparison.roofline_left_out
    if left_out.height:
        with st.container(key="roofline_left_out"):
            st.caption(
                f"Not on the chart ({left_out.height}): the bytes their kernels move cannot be told from the trace, and are not guessed."
            )
            st.markdown(
                "\n".join(
                    f"- **{literal.md(row['run'])}** ({row['measure']}): {literal.md(row['reason'])}"
                    for row in left_out.iter_rows(named=True)
                )
            )
    rows = points.with_columns(pl.col("name").str.slice(0, 160))
    tables.show(
        rows,
        "tbl_attention_efficiency",
        {
            "run": tables.text("run"),
            "measure": tables.text("measured over"),
            "name": tables.text("op, kernel or variant", width="medium"),
            "shape": tables.text("shape", width="medium"),
            "device": tables.text("device"),
            "count": tables.count("calls (steps)"),
            "mean_us": tables.us("mean µs", digits=2),
            "bytes": st.column_config.NumberColumn(
                "bytes moved", format="%.4g", help="Per call (per step): the " + charts.OWN_BYTES
            ),
            "intensity": st.column_config.NumberColumn(
                "FLOP/byte", format="%.4g", help="FLOPs over the bytes its own kernels move"
            ),
            "tflops": st.column_config.NumberColumn("TFLOP/s", format="%.4g"),
            "tbps": st.column_config.NumberColumn("TB/s", format="%.3g"),
            "pct_of_roofline": st.column_config.NumberColumn(
                "% of the roof", format="%.3g%%", help="Achieved / the roof at its own intensity (the chart's reading)"
            ),
            "bound": tables.text("bound"),
        },
        height=tables.fit(rows.height, 360),
    )


def show_memory(sel: Selection) -> None:
    """Peak memory allocated per step, drawn when a selected run was recorded with
    profile_memory=True (its trace holds "[memory]" events); nothing otherwise."""
    recorded = sel.comparison.memory_recorded  # kept: no table read
    if not recorded:
        return
    st.subheader("Memory", anchor=False)
    st.caption(
        "Peak allocated per step: the most the allocator held (its Total Allocated) during each ProfilerStep, from the "
        "trace's memory events (torch.profiler's profile_memory=True); hover for the level the step started at, what it "
        "added and the op whose allocation reached the peak. A GPU run shows its device memory."
    )
    peaks = sel.comparison.memory
    if peaks.filter(pl.col("peak_allocated_bytes").is_not_null()).height:
        with st.container(key="chart_memory"):
            st.plotly_chart(
                figures.once(sel, "memory", lambda: charts.memory_chart(peaks, sel.colors)), key="fig_memory"
            )
    else:
        st.info(
            "These runs' memory events carry no Total Allocated (an older profiler), so no peak can be drawn.",
            icon=":material/info:",
        )
    missing = [label for label in sel.runs if label not in recorded]
    if missing:
        st.caption(
            "Recorded without profile_memory (no memory events): " + ", ".join(literal.md(m) for m in missing) + "."
        )
