"""The peak memory allocated per step (profile_memory)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from dashboard.charts.style import Colors, _base_layout, plain, run_colors


def memory_chart(peaks: pl.DataFrame, colors: Colors | None = None) -> go.Figure:
    """Peak memory allocated per step, one bar per run and step, in MB (10^6 bytes): a run's
    accelerators when it has memory events on one, else its CPU (a bar per device where a run has
    several); hover: the level the step started at, what
    it added, and the op whose allocation reached the peak. `peaks`: memory.memory_by_run (bytes;
    rows without a peak, from traces without Total Allocated, are left out). `colors`: run -> colour."""
    known = peaks.filter(pl.col("peak_allocated_bytes").is_not_null())
    # a run's accelerator when it has one (the CPU allocator's few bytes beside it would be noise)
    known = known.filter((pl.col("device_type") != 0) | ((pl.col("device_type") != 0).any().over("run")).not_())
    runs = list(dict.fromkeys(peaks["run"].to_list()))
    palette = dict(zip(runs, run_colors(runs, colors)))
    steps = sorted(set(known["step"].to_list()))
    labels = [f"step {s}" for s in steps]
    several = known.select(pl.struct("device_type", "device_id").n_unique()).item() > 1 if known.height else False
    fig = go.Figure()
    for (run, device), part in known.group_by("run", "device", maintain_order=True):
        by_step = {row["step"]: row for row in part.iter_rows(named=True)}
        rows = [by_step.get(s) for s in steps]
        mb = [None if r is None else r["peak_allocated_bytes"] / 1e6 for r in rows]
        fig.add_trace(
            go.Bar(
                name=f"{run} ({device})" if several else run,
                x=labels,
                y=mb,
                marker_color=palette.get(run),
                customdata=[
                    ("", "", "", "")
                    if r is None
                    else (
                        device,
                        (r["start_allocated_bytes"] or 0) / 1e6,
                        (r["added_bytes"] or 0) / 1e6,
                        r["peak_op"] or "no op",
                    )
                    for r in rows
                ],
                text=["" if v is None else f"{v:.3g}" for v in mb],
                textposition="outside",
                cliponaxis=False,
                hovertemplate=plain(run)
                + " on %{customdata[0]}, %{x}<br>peak %{y:.4g} MB allocated, at %{customdata[3]}"
                "<br>started at %{customdata[1]:.4g} MB, %{customdata[2]:+.4g} MB over the step<extra></extra>",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="peak allocated, MB", rangemode="tozero")
    return _base_layout(fig, "Peak memory allocated per step (profile_memory)")
