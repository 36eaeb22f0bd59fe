"""The report's tables: how each column's numbers are written (FORMATS, _fmt, _cell), the columns
of each table with their headers, and a table as Markdown (escaped: md_text) or plain text."""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from dashboard.engine.model.formatting import plain_decimal, signed

TEXT_CELL = 100  # a plain-text cell's characters at most (kernel names run to 1,000)


def text_table(frame: pl.DataFrame, columns: dict[str, str]) -> str:
    """A plain-text table of `frame` with {column: header}: columns padded to their widest cell,
    numbers right-aligned, columns empty in every row left out, cells cut at TEXT_CELL characters."""
    cells = {c: [_fmt(c, row[c]).replace("\n", " ") for row in frame.iter_rows(named=True)] for c in columns}
    shown = [c for c in columns if any(cells[c])] or list(columns)
    cut = {c: [v if len(v) <= TEXT_CELL else v[: TEXT_CELL - 1] + "…" for v in cells[c]] for c in shown}
    width = {c: max([len(columns[c]), *map(len, cut[c])]) for c in shown}
    numeric = {
        c: frame[c].dtype.is_numeric() and frame[c].dtype != pl.Boolean if c in frame.columns else False for c in shown
    }

    def line(values: dict[str, str]) -> str:
        return "  ".join(values[c].rjust(width[c]) if numeric[c] else values[c].ljust(width[c]) for c in shown).rstrip()

    rows = [line({c: cut[c][i] for c in shown}) for i in range(frame.height)]
    return "\n".join([line(columns), "  ".join("-" * width[c] for c in shown), *rows])


def _cell(value: Any) -> str:
    """A table cell's text: floats with up to 3 decimals (no trailing zeros, no '-0'), booleans as yes/no, lists comma-joined."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        text = f"{value:.3f}".rstrip("0").rstrip(".")  # 7.0 -> "7", 1.250 -> "1.25"
        return "0" if text == "-0" else text
    if isinstance(value, list):
        value = ", ".join(map(str, value))
    return str(value).replace("\n", " ")


# How a column's numbers are written, by column name; others get _cell's default. Times keep
# µs with 3 decimals, so that a reader (or a test) can take them back exactly.
FORMATS: dict[str, Any] = {
    "share": lambda v: f"{v:.1%}",
    "bytes_per_step": lambda v: f"{v:,.0f}",
    "usd_per_mtok": lambda v: plain_decimal(v, 4),
    "usd_per_hour": lambda v: f"{v:.2f}",
    "tokens_per_s": lambda v: f"{v:,.0f}",
    "speedup": lambda v: f"{v:.3f}",
    "parity_max_abs": lambda v: f"{v:.3g}",
    "tflops": lambda v: f"{v:.4g}",
    "pct_of_roofline": lambda v: f"{v:.3g}",
    "delta_us_per_step": lambda v: signed(v, 3).replace(",", ""),
    "delta_per_step": lambda v: f"{v:+.4g}",
    "base_per_step": lambda v: f"{v:.4g}",
    "other_per_step": lambda v: f"{v:.4g}",
}


def _fmt(column: str, value: Any) -> str:
    if isinstance(value, float) and value == value and column in FORMATS:
        return FORMATS[column](value)
    return _cell(value)


# What GitHub-flavoured Markdown would read in a trace string: emphasis (* _ ~), code (`), links
# and images ([ ] ( ) !), HTML (< > &), table cells (|), headings (#), math ($) and escapes (\).
MD_SPECIAL = re.compile(r"([\\`*_~\[\]()!<>&|#$])")


def md_text(value: Any) -> str:
    """A string from a trace (run label, op chain, kernel name, message) for Markdown, shown
    literally: special characters backslash-escaped, on one line."""
    return MD_SPECIAL.sub(r"\\\1", " ".join(str(value).splitlines()))


def _md_table(frame: pl.DataFrame, columns: dict[str, str]) -> str:
    """A Markdown table of `frame` with {column: header}; every cell shown literally."""
    head = "| " + " | ".join(columns.values()) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    rows = ["| " + " | ".join(md_text(_fmt(c, row[c])) for c in columns) + " |" for row in frame.iter_rows(named=True)]
    return "\n".join([head, rule, *rows])


OVERVIEW_COLUMNS = {
    "run": "run",
    "device_label": "device",
    "steps": "steps",
    "median_step_us": "median step (µs)",
    "work_per_step": "work per step",
    "work_unit": "unit",
    "copies_per_step": "copies per step",
    "hidden_copies_per_step": "hidden copies per step",
    "backend_requested": "backend requested",
    "backends": "backend detected",
    "backend_verdict": "backend check",
    "parity_passed": "parity passed",
    "speedup": "speedup vs baseline",
    "relation": "compared as",
    "cut": "file cut off",
}
FAMILY_COLUMNS = {"run": "run", "family": "family", "count_per_step": "count per step", "us_per_step": "µs per step"}
COPY_COLUMNS = {
    "run": "run",
    "kind": "kind",
    "op_chain": "op chain",
    "hidden": "hidden",
    "copy_class": "class",
    "per_step": "per step",
    "bytes_per_step": "bytes per step",
    "us_per_step": "µs per step",
    "share": "share of step",
}
BACKEND_COLUMNS = {
    "run": "run",
    "requested": "requested",
    "detected": "detected",
    "verdict": "check",
    "evidence": "evidence",
}
SPEED_COLUMNS = {
    "run": "run",
    "median_us": "median step (µs)",
    "p10_us": "p10 (µs)",
    "p90_us": "p90 (µs)",
    "steps": "steps",
    "time_source": "time",
    "speedup": "speedup",
    "relation": "compared as",
    "tokens_per_s": "tokens/s",
    "usd_per_hour": "$ per hour",
    "usd_per_mtok": "$ per M tokens",
}
CHANGE_COLUMNS = {
    "change": "what changed",
    "name": "kernel",
    "family": "family",
    "delta_us_per_step": "Δ µs per step",
    "base_us_per_step": "baseline µs per step",
    "other_us_per_step": "run µs per step",
    "delta_per_step": "Δ count per step",
    "base_per_step": "baseline count per step",
    "other_per_step": "run count per step",
}
OP_COLUMNS = {
    "change": "what changed",
    "name": "op or call",
    "cat": "kind",
    "delta_us_per_step": "Δ µs per step",
    "base_us_per_step": "baseline µs per step",
    "other_us_per_step": "run µs per step",
    "delta_per_step": "Δ count per step",
    "base_per_step": "baseline count per step",
    "other_per_step": "run count per step",
}
EFFICIENCY_COLUMNS = {
    "run": "run",
    "measure": "measured over",
    "device": "device",
    "calls": "attention calls",
    "measured": "calls measured",
    "tflops": "achieved TFLOP/s",
    "pct_of_roofline": "% of roofline",
    "reason": "why no number",
}
EFFICIENCY_WHY = (
    "Achieved TFLOP/s of attention (QK^T and PV at 2 FLOP per multiply-add, causal pairs counted exactly) and its share of the "
    "device's roofline, min(peak TFLOP/s, intensity x peak TB/s), from the vendors' dense peaks. 'whole step': the collectors' "
    "shape over each step's device time (every variant, naive ones included); 'attention ops': the recorded attention calls. "
    "No percentage without a peak: a CPU, or a device the peaks table lacks, gives its reason instead."
)
ROOFLINE_WHY = (
    "Each point sits at the bytes its own kernels move, from the recorded shapes (naive attention writes and reads the "
    "scores matrix at each of its kernels; a fused kernel reads Q, K, V once and writes O once), and its hover gives its "
    "share of the roof at that intensity. The table's % of roofline is against the attention's minimum bytes instead."
)
