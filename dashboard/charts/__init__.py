"""Plotly figure builders: engine frames in, figures out. No streamlit here, so the offline HTML
reports draw the very same figures as the dashboard.

Every builder takes polars frames exactly as dashboard.engine returns them (or review's frames)
plus display labels; units follow the frame (µs for `*_us`, ns for `*_ns`, shown as µs).

One module per tab or family of figures: kernels (work by family), speed (time per step, speedup,
throughput), copies, roofline, memory, timeline; style holds the palette, the colours, the escaping
of text (plain) and the layout every figure ends with; facets the flat charts of many runs. Numbers
are written by dashboard.engine.model.formatting (format_us, format_usd, signed are re-exported here).
"""

from __future__ import annotations

from dashboard.charts.copies import copy_time_bars
from dashboard.charts.facets import FACET_PX, FEW_RUNS, MODE_ORDER, ROW_PX, Modes
from dashboard.charts.kernels import family_grouped, work_by_family_stacked
from dashboard.charts.memory import memory_chart
from dashboard.charts.roofline import LABEL_CLUSTER, LABEL_NAMES, MEASURE_KEYS, MEASURE_SYMBOLS, OWN_BYTES, roofline
from dashboard.charts.speed import (
    COST_TOKENS,
    COST_UNIT,
    OTHER_WORK,
    OTHER_WORK_KEY,
    speedup_bars,
    step_time_bars,
    throughput_bars,
)
from dashboard.charts.style import (
    BASELINE_COLOR,
    COPY_CLASS_COLORS,
    FAMILY_COLORS,
    FAMILY_ORDER,
    FASTER_COLOR,
    FLAT_COLOR,
    HIDDEN_COLOR,
    NAME_CHARS,
    NO_BAR_COLOR,
    REQUESTED_COLOR,
    ROOF_COLORS,
    RUN_COLORS,
    SLOWER_COLOR,
    Colors,
    family_color,
    plain,
    plain_expr,
    run_color,
    run_colors,
)
from dashboard.charts.timeline import (
    CPU_LANE,
    GPU_LANE,
    LABEL_PX,
    LANE_PX,
    TIMELINE_MAX_EVENTS,
    TIMELINE_MAX_HEIGHT,
    TIMELINE_PIXELS,
    family_diff_bars,
    lane_order,
    merge_small_events,
    timeline_data,
    timeline_pair,
)
from dashboard.engine.model.formatting import format_us, format_usd, signed

__all__ = [
    "BASELINE_COLOR",
    "COPY_CLASS_COLORS",
    "COST_TOKENS",
    "COST_UNIT",
    "CPU_LANE",
    "Colors",
    "FACET_PX",
    "FAMILY_COLORS",
    "FAMILY_ORDER",
    "FASTER_COLOR",
    "FEW_RUNS",
    "FLAT_COLOR",
    "GPU_LANE",
    "HIDDEN_COLOR",
    "LABEL_CLUSTER",
    "LABEL_NAMES",
    "LABEL_PX",
    "LANE_PX",
    "MEASURE_KEYS",
    "MEASURE_SYMBOLS",
    "MODE_ORDER",
    "Modes",
    "NAME_CHARS",
    "NO_BAR_COLOR",
    "OTHER_WORK",
    "OTHER_WORK_KEY",
    "OWN_BYTES",
    "REQUESTED_COLOR",
    "ROOF_COLORS",
    "ROW_PX",
    "RUN_COLORS",
    "SLOWER_COLOR",
    "TIMELINE_MAX_EVENTS",
    "TIMELINE_MAX_HEIGHT",
    "TIMELINE_PIXELS",
    "copy_time_bars",
    "family_color",
    "family_diff_bars",
    "family_grouped",
    "format_us",
    "format_usd",
    "lane_order",
    "memory_chart",
    "merge_small_events",
    "plain",
    "plain_expr",
    "roofline",
    "run_color",
    "run_colors",
    "signed",
    "speedup_bars",
    "step_time_bars",
    "throughput_bars",
    "timeline_data",
    "timeline_pair",
    "work_by_family_stacked",
]
