"""Speedups tab: median time per step with its spread, speedup against the baseline, tokens per
second where the trace says how many tokens a step processes, and cost per million tokens."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboard import charts
from dashboard.engine.speed import speed_table
from dashboard.runs import Selection
from dashboard.views import link, tables

DEFAULT_USD_PER_GPU_HOUR = 2.0


def render(sel: Selection) -> None:
    link.seed_number("usd_per_hour", "usd", DEFAULT_USD_PER_GPU_HOUR)
    left, right = st.columns([1, 3])
    with left:
        usd = st.number_input(
            "$ per GPU-hour", min_value=0.0, step=0.25, key="usd_per_hour", format="%.2f",
            help="What one device-hour costs you; cost per million tokens = price / 3600 / (tokens per second) × 10⁶.",
        )
    link.publish("usd", f"{usd:g}" if usd != DEFAULT_USD_PER_GPU_HOUR else None)
    speed = speed_table(sel.runs, sel.baseline or "", usd)
    with right:
        st.caption(
            f"Speedup = the baseline's median step time / the run's (above 1 = faster than **{sel.baseline}**). "
            "Spread = 10th to 90th percentile over the profiled steps. Tokens per step come from the collectors' "
            "metadata (batch × sequence length)."
        )
        if speed["time_source"].n_unique() > 1:
            st.warning(
                "These runs measure step time differently (device busy time on GPU traces, the CPU step span on "
                "CPU-only traces): compare GPU runs with GPU runs.",
                icon=":material/warning:",
            )
    tables.show(
        speed,
        "tbl_speed",
        {
            "run": tables.text("run"),
            "median_us": tables.us("median step (µs)"),
            "p10_us": tables.us("p10 (µs)"),
            "p90_us": tables.us("p90 (µs)"),
            "steps": tables.count("steps"),
            "time_source": tables.text("time from"),
            "speedup": tables.ratio("speedup vs baseline"),
            "tokens_per_step": tables.count("tokens / step"),
            "tokens_per_s": st.column_config.NumberColumn("tokens / s", format="%.4g"),
            "usd_per_mtok": st.column_config.NumberColumn("$ / million tokens", format="$%.4g"),
        },
        height=tables.fit(speed.height),
    )
    log = st.toggle("Logarithmic axes (when runs differ by orders of magnitude)", key="speed_log")
    a, b = st.columns(2)
    with a, st.container(key="chart_speed_time"):
        st.plotly_chart(charts.step_time_bars(speed, log=log), key="fig_speed_time")
    with b, st.container(key="chart_speedup"):
        st.plotly_chart(charts.speedup_bars(speed, sel.baseline or "", log=log), key="fig_speedup")
    known = speed.filter(pl.col("tokens_per_s").is_not_null())
    if known.height:
        with st.container(key="chart_throughput"):
            st.plotly_chart(charts.throughput_bars(speed), key="fig_throughput")
    missing = speed.filter(pl.col("tokens_per_step").is_null())["run"].to_list()
    if missing:
        st.info(
            "No tokens per step in " + ", ".join(missing) + " (not written by the attnscope collectors), so no "
            "tokens/s or cost for them.",
            icon=":material/info:",
        )
