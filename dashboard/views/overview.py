"""Overview tab: what must not be missed (alarms first), then one row per run, then the two
pictures that tell the story: work per step by kernel family, and time per step."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboard import charts
from dashboard.engine import review
from dashboard.runs import Collection, Selection
from dashboard.views import tables

ICONS = {"hidden copy": ":material/content_copy:", "backend fallback": ":material/swap_horiz:", "parity failure": ":material/rule:"}


def render(sel: Selection) -> None:
    runs = sel.runs
    table = review.overview(runs, sel.baseline)
    groups = review.copy_groups(runs)
    found = review.findings(runs, sel.baseline, overview_table=table, groups=groups)
    show_findings(found)

    st.subheader("Runs side by side")
    st.caption(
        "Step time is the median over the profiled steps: device busy time (union of GPU work) on GPU traces, "
        "the CPU ProfilerStep span on CPU-only traces (the Speedups tab has the spread). Work per step counts kernels + GPU memcpy + memset on GPU "
        "traces and leaf CPU ops (ops that do work and hold no other such op; views and allocations do not count) on CPU-only traces; the *counted as* column says which."
    )
    shown = table.with_columns(
        pl.concat_str([pl.col("device"), pl.col("device_name")], separator=" · ", ignore_nulls=True).alias("device_label"),
        pl.col("backend_requested").fill_null("—"),
    )
    tables.show(
        shown,
        "tbl_overview",
        {
            "run": st.column_config.TextColumn("run", width="medium", pinned=True),
            "device_label": tables.text("device", width="small"),
            "steps": tables.count("steps", width="small"),
            "median_step_us": tables.us("median µs", "Median over steps; 'time from' says which time", width="small"),
            "speedup": tables.ratio("speedup", f"Baseline median / run median; > 1 is faster than {sel.baseline}", width="small"),
            "work_per_step": tables.count("work / step", "Median over steps of the units named in 'counted as'", width="small"),
            "work_unit": tables.text("counted as", "kernel: kernels + GPU memcpy + memset; leaf cpu_op: CPU-only trace", width="small"),
            "copies_per_step": tables.count("copies/step", width="small"),
            "hidden_copies_per_step": tables.count("hidden/step", "Copies made inside another op (e.g. masked_fill's clone), per step", width="small"),
            "backends": tables.text("backend", "Attention backend detected from op and kernel names", width="small"),
            "backend_requested": tables.text("requested", width="small"),
            "backend_verdict": tables.text("check", "FALLBACK: another backend ran than the one forced", width="small"),
            "parity_passed": st.column_config.CheckboxColumn("parity ok", help="Against an fp32 reference, from the collector's metadata", width="small"),
        },
        highlight=_row_style,
        height=tables.fit(shown.height),
    )

    left, right = st.columns(2)
    fam = review.families(runs)
    # the overview already holds speed.step_time's numbers: the chart reads them under speed_table's names
    step_times = table.select(
        "run", pl.col("median_step_us").alias("median_us"), pl.col("p10_step_us").alias("p10_us"),
        pl.col("p90_step_us").alias("p90_us"), "time_source",
    )
    units = set(table["work_unit"].to_list())
    unit = "kernels" if units == {"kernel"} else ("leaf CPU ops" if units == {"leaf cpu_op"} else "kernels or leaf CPU ops")
    with left, st.container(key="chart_overview_work"):
        st.plotly_chart(charts.work_by_family_stacked(fam, list(runs), unit), key="fig_overview_work")
    with right, st.container(key="chart_overview_time"):
        st.plotly_chart(charts.step_time_bars(step_times), key="fig_overview_time")

    show_collections(sel.collections)


def show_findings(found: pl.DataFrame) -> None:
    """Alarms as red boxes, notes as yellow; a green line when there is no alarm."""
    alarms = found.filter(pl.col("severity") == review.SEVERITY_ALARM)
    notes = found.filter(pl.col("severity") == review.SEVERITY_NOTE)
    with st.container(key="findings"):
        if alarms.height == 0:
            st.success("No hidden copy, backend fallback or parity failure in the selected runs.", icon=":material/check_circle:")
        for row in alarms.iter_rows(named=True):
            st.error(f"**{row['run']}: {row['kind']}.** {row['message']}", icon=ICONS.get(row["kind"], ":material/error:"))
        if notes.height:
            with st.expander(f"{notes.height} note(s) worth knowing", expanded=notes.height <= 3):
                for row in notes.iter_rows(named=True):
                    st.warning(f"**{row['run']}: {row['kind']}.** {row['message']}", icon=":material/info:")


def _row_style(row: dict) -> str:
    bad = (
        (row.get("hidden_copies_per_step") or 0) > 0
        or row.get("backend_verdict") == review.VERDICT_FALLBACK
        or row.get("parity_passed") is False
    )
    return tables.ALARM_BG if bad else ""


def show_collections(collections: list[Collection]) -> None:
    """What each bundled collection is, and which variants it could not run (and why)."""
    for c in collections:
        m = c.manifest
        shape = m.get("shape") if isinstance(m.get("shape"), dict) else {}
        dims = "×".join(str(shape.get(k, "?")) for k in ("batch", "heads", "seq", "head_dim"))
        with st.expander(f"Collection '{c.name}': {len(c.sources)} runs, {len(c.skipped)} skipped"):
            st.markdown(
                f"- device: **{m.get('device', '?')}** {m.get('device_name') or ''}\n"
                f"- dtype **{m.get('dtype', '?')}**, shape batch×heads×seq×head_dim = **{dims}**\n"
                f"- created {m.get('created', '?')} with torch {m.get('torch_version', '?')}\n"
                f"- folder `{c.folder.name}/`, command `{m.get('command', '?')}`"
            )
            for skip in c.skipped:
                st.markdown(f"- skipped **{skip.get('variant')}**{' (compiled)' if skip.get('compiled') else ''}: {skip.get('reason')}")
