"""Offline reviews: the dashboard's comparison as one self-contained HTML file (plotly.js inside,
no network) and as a Markdown summary for a pull-request comment.

Everything shown comes from dashboard.engine (review, speed, kernels, diff) and the figures from
dashboard.charts, the very builders the dashboard draws with.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import plotly.graph_objects as go
import plotly.offline
import polars as pl

from dashboard import __version__, charts
from dashboard.engine.compare import review
from dashboard.engine.compare.diff import timeline
from dashboard.engine.analyses.kernels import work_unit
from dashboard.engine.model.formatting import plain_decimal, signed
from dashboard.engine.model.trace import Trace
from dashboard.engine.compare.speed import (
    DEFAULT_USD_PER_GPU_HOUR,
    GROUP_CPU,
    GROUP_GPU,
    Group,
    NO_SPEEDUP,
    device_groups,
    representative_step,
    speed_table,
)
from dashboard.engine.compare.fingerprint import CROSS_DEVICE

KERNEL_CHANGES_SHOWN = review.TOP_EXPLAINED  # rows of each kernel and op diff shown (the rows 'explained' counts)
NAMES_LISTED = 60  # op names listed as only in one run, at most (then 'and N more')
LONG_CELL = 160


@dataclass
class Review:
    """The frames of one comparison, computed once for both report formats."""

    runs: dict[str, Trace]
    baseline: str
    overview: pl.DataFrame
    findings: pl.DataFrame
    families: pl.DataFrame
    copies: pl.DataFrame
    backends: pl.DataFrame
    speed: pl.DataFrame
    changes: list[review.Change]  # each run against its group's baseline (kernels ranked by time, ops, readings)
    groups: list[Group] = field(default_factory=list)  # device groups, each with its baseline
    efficiency: pl.DataFrame | None = None  # review.attention_efficiency
    roofline: pl.DataFrame | None = None  # review.roofline_points
    roofline_left_out: pl.DataFrame | None = None  # review.roofline_left_out
    by: str = "base"  # kernels by full 'name' or by 'base' name
    usd_per_gpu_hour: float | None = None
    usd_per_cpu_hour: float | None = None
    colors: dict[str, str] = field(default_factory=dict)  # run -> colour (the dashboard's), else by position

    def against(self, label: str) -> str:
        """The baseline `label` is measured against (its device group's)."""
        return next((g.baseline for g in self.groups if label in g.runs), self.baseline)


def build_review(
    runs: dict[str, Trace],
    baseline: str,
    usd_per_gpu_hour: float | None = DEFAULT_USD_PER_GPU_HOUR,
    usd_per_cpu_hour: float | None = None,
    colors: dict[str, str] | None = None,
    by: str = "base",
    steps: dict[str, int | None] | None = None,
    copy_alarm_share: float = review.COPY_ALARM_SHARE,
    copy_alarm_bytes: float = review.COPY_ALARM_BYTES,
) -> Review:
    """Compute every table of the comparison of `runs` (label -> Trace) against `baseline`; GPU
    and CPU-only runs are compared within their own group (speed.device_groups). Cost uses
    `usd_per_gpu_hour` for GPU runs and `usd_per_cpu_hour` for CPU-only runs (None: no cost).
    Kernel changes are over all steps (`steps`: run label -> one step instead), by base name
    (template instances folded; by='name' for full names), as the dashboard shows them by default.
    A hidden copy is an alarm from `copy_alarm_share` of the step or `copy_alarm_bytes` a step."""
    if baseline not in runs:
        raise KeyError(f"baseline {baseline!r} is not among the runs")
    overview = review.overview(runs, baseline)
    groups = review.copy_groups(runs, copy_alarm_share, copy_alarm_bytes)
    split = device_groups(runs, baseline)
    return Review(
        runs=runs,
        baseline=baseline,
        overview=overview,
        findings=review.findings(
            runs,
            baseline,
            overview_table=overview,
            groups=groups,
            alarm_share=copy_alarm_share,
            alarm_bytes=copy_alarm_bytes,
        ),
        families=review.families(runs),
        copies=groups,
        backends=review.backend_table(runs),
        speed=speed_table(runs, baseline, usd_per_gpu_hour, usd_per_cpu_hour),
        changes=review.changes(runs, baseline, steps=steps, by=by),
        groups=split,
        efficiency=review.attention_efficiency(runs),
        roofline=review.roofline_points(runs),
        roofline_left_out=review.roofline_left_out(runs),
        by=by,
        usd_per_gpu_hour=usd_per_gpu_hour,
        usd_per_cpu_hour=usd_per_cpu_hour,
        colors=dict(colors or {}),
    )


def _price_line(rv: Review) -> str:
    """Which prices the cost column uses, in words (plain text)."""
    names = {g.name for g in rv.groups}
    parts = []
    if GROUP_GPU in names:
        parts.append(
            f"${rv.usd_per_gpu_hour:.2f} per GPU-hour for GPU runs"
            if rv.usd_per_gpu_hour
            else "no GPU-hour price given"
        )
    if GROUP_CPU in names:
        parts.append(
            f"${rv.usd_per_cpu_hour:.2f} per CPU-hour for CPU-only runs"
            if rv.usd_per_cpu_hour
            else "no CPU-hour price given, so no cost for CPU-only runs"
        )
    return "Cost per million tokens at " + "; ".join(parts) + "."


def _group_rows(frame: pl.DataFrame, group: Group) -> pl.DataFrame:
    return frame.filter(pl.col("run").is_in(group.runs))


def _group_title(group: Group) -> str:
    return f"{group.name} runs, against {group.baseline}"


def _shown(frame: pl.DataFrame) -> pl.DataFrame:
    """The first KERNEL_CHANGES_SHOWN changed rows of a kernel_diff or op_diff frame (ranked by
    time), with µs columns for the report."""
    return (
        frame.filter(pl.col("change") != "same")
        .head(KERNEL_CHANGES_SHOWN)
        .with_columns(
            *[
                (pl.col(f"{side}_ns_per_step") / 1000.0).alias(f"{side}_us_per_step")
                for side in ("base", "other", "delta")
            ]
        )
    )


def _only(ops: pl.DataFrame, change: str) -> tuple[list[str], int]:
    """The op names of one change ('added' or 'removed'), sorted, at most NAMES_LISTED; and how many in all."""
    names = sorted(ops.filter(pl.col("change") == change)["name"].to_list())
    return names[:NAMES_LISTED], len(names)


def _steps_words(change: review.Change) -> str:
    if change.step_run is None and change.step_base is None:
        return "Over all steps (per-step figures are totals / steps)"
    word = lambda step: "all steps" if step is None else f"step {step}"  # noqa: E731
    return f"The run's {word(change.step_run)} against the baseline's {word(change.step_base)}"


# ---------- How each run relates to its baseline: said before anything else ----------

NOT_SAME_WORK = "Not the same work as its baseline"
NOT_SAME_WORK_WHY = (
    "no speedup is set between different work, and what differs between them is a difference, not a change"
)
ANOTHER_DEVICE = "The same work on another device"
ANOTHER_DEVICE_WHY = "its speedup and its differences compare the devices as well as the code"
RELATION_FINDINGS = ("different workload", "cross-device")
"""review.findings' kinds that the relation block states first: not repeated among the findings."""
# A kernel or op diff between different work is no change: each kind of row in words that say how the two differ.
DIFFERENCE_WORDS = {
    "added": "only in the run",
    "removed": "only in the baseline",
    "more": "more per step",
    "fewer": "fewer per step",
    "slower": "longer mean",
    "faster": "shorter mean",
    "same": "alike",
}


def relations(speed: pl.DataFrame) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The runs of a speed.speed_table that do other work than their baseline, and those that do
    the same work on another device: each {run, baseline, why}, in run order."""

    def rows(kind: str) -> list[dict[str, str]]:
        found = speed.filter(pl.col("relation") == kind)
        return [
            {"run": r["run"], "baseline": r["baseline"], "why": r["relation_why"] or ""}
            for r in found.iter_rows(named=True)
        ]

    return rows(NO_SPEEDUP), rows(CROSS_DEVICE)


NO_ATTENTION = "no attention found"


def backend_check_words(frame: pl.DataFrame, verdict: str = "verdict", detected: str = "detected") -> pl.DataFrame:
    """`frame` (review.backend_table, or the overview with verdict='backend_verdict' and
    detected='backends') with 'not forced' read as NO_ATTENTION where no backend was detected: a
    trace without attention was not 'not forced', there is nothing to force."""
    empty = pl.col(detected).is_null() | (pl.col(detected) == "")
    return frame.with_columns(
        pl.when(empty & (pl.col(verdict) == review.VERDICT_NOT_FORCED))
        .then(pl.lit(NO_ATTENTION))
        .otherwise(pl.col(verdict))
        .alias(verdict)
    )


def said_findings(findings: pl.DataFrame) -> pl.DataFrame:
    """The findings less those the relation block already says (RELATION_FINDINGS)."""
    return findings.filter(~pl.col("kind").is_in(RELATION_FINDINGS))


def as_differences(frame: pl.DataFrame) -> pl.DataFrame:
    """A kernel or op diff between different work, its change column in DIFFERENCE_WORDS."""
    return frame.with_columns(pl.col("change").replace(DIFFERENCE_WORDS))


# ---------- Markdown and plain text ----------


class _Markdown:
    """How render_markdown writes each part: GitHub-flavoured Markdown, trace strings escaped."""

    def lit(self, value: Any) -> str:
        return md_text(value)

    def strong(self, text: str) -> str:
        return f"**{text}**"

    def title(self, text: str) -> list[str]:
        return [f"## {text}", ""]

    def heading(self, level: int, text: str) -> str:
        return f"{'#' * level} {text}"

    def table(self, frame: pl.DataFrame, columns: dict[str, str]) -> str:
        return _md_table(frame, columns)

    def quote(self, lines: list[str]) -> list[str]:
        return [f"> {line}" for line in lines]

    def details(self, summary: str, body: str) -> list[str]:
        return ["", f"<details><summary>{summary}</summary>", "", body, "", "</details>"]

    def footer(self, text: str) -> str:
        return f"<sub>{text}</sub>"

    def mark(self, severity: str) -> str:
        return MARKS.get(severity, "note")


class _Text(_Markdown):
    """How render_text writes each part: plain text for a terminal, strings as they are."""

    def lit(self, value: Any) -> str:
        return " ".join(str(value).splitlines())

    def strong(self, text: str) -> str:
        return text

    def title(self, text: str) -> list[str]:
        return [text, "=" * min(len(text), 100), ""]

    def heading(self, level: int, text: str) -> str:
        return f"{text}\n{('-' if level <= 3 else '~') * min(len(text), 100)}"

    def table(self, frame: pl.DataFrame, columns: dict[str, str]) -> str:
        return text_table(frame, columns)

    def quote(self, lines: list[str]) -> list[str]:
        return lines

    def details(self, summary: str, body: str) -> list[str]:
        return ["", f"{summary}: {body}"]

    def footer(self, text: str) -> str:
        return text

    def mark(self, severity: str) -> str:
        return TEXT_MARKS.get(severity, "note")


TEXT_MARKS = {review.SEVERITY_ALARM: "ALARM", review.SEVERITY_WARNING: "WARNING", review.SEVERITY_NOTE: "note"}
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


GRAPH_INPUT_COPY_OP = "aten::_foreach_copy_"  # where torch.compile's CUDA graphs copy inputs into their static buffers


def graph_input_copies(groups: pl.DataFrame) -> pl.DataFrame:
    """Per run, the CUDA graph's static-input copies: the requested copies made under
    GRAPH_INPUT_COPY_OP (torch.compile's mode='reduce-overhead' copies every input into the graph's
    fixed buffers before each replay). `groups`: review.copy_groups. Columns: run, per_step
    (copies), us_per_step (µs), bytes_per_step; runs without such copies are absent."""
    if groups.height == 0:
        return pl.DataFrame(
            schema={"run": pl.String, "per_step": pl.Float64, "us_per_step": pl.Float64, "bytes_per_step": pl.Float64}
        )
    return (
        groups.filter(
            (pl.col("copy_class") == "requested") & pl.col("op_chain").str.contains(GRAPH_INPUT_COPY_OP, literal=True)
        )
        .group_by("run", maintain_order=True)
        .agg(pl.col("per_step").sum(), pl.col("us_per_step").sum(), pl.col("bytes_per_step").sum())
    )


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


def markdown_report(
    runs: dict[str, Trace],
    baseline: str,
    usd_per_gpu_hour: float | None = DEFAULT_USD_PER_GPU_HOUR,
    usd_per_cpu_hour: float | None = None,
    by: str = "base",
    steps: dict[str, int | None] | None = None,
) -> str:
    """A Markdown summary fit for a pull-request comment: findings first, then the tables."""
    return render_markdown(build_review(runs, baseline, usd_per_gpu_hour, usd_per_cpu_hour, by=by, steps=steps))


def _with_device_label(frame: pl.DataFrame) -> pl.DataFrame:
    """The overview with a `device_label` column: 'cuda · NVIDIA H100 80GB HBM3', 'cpu · AMD EPYC', 'cpu';
    a cut accelerator trace whose device events were lost: 'cuda trace, cut: device events lost · <name>'.
    Its backend check in words (backend_check_words)."""
    return backend_check_words(frame, "backend_verdict", "backends").with_columns(
        pl.struct("device", "device_name", "cut")
        .map_elements(lambda r: review.device_label(r["device"], r["device_name"], r["cut"]), return_dtype=pl.String)
        .alias("device_label")
    )


MARKS = {review.SEVERITY_ALARM: "**ALARM**", review.SEVERITY_WARNING: "**WARNING**", review.SEVERITY_NOTE: "note"}


def _md_changes(change: review.Change, by: str, m: _Markdown | None = None, different: str | None = None) -> list[str]:
    """One run against its baseline: readings, the explained line, the kernel and op diffs. Between
    different work (`different`: why they differ) the diffs say how the two differ, not what changed."""
    m = m or _Markdown()
    steps = m.lit(
        f"{_steps_words(change)}; kernels {'by base name (template instances folded)' if by == 'base' else 'by full name'}."
    )
    kernels, ops = _shown(change.kernels), _shown(change.ops)
    if different is not None:
        head = f"Different work, side by side: {m.lit(change.run)} against {m.lit(change.baseline)}"
        columns = {**CHANGE_COLUMNS, "change": "how they differ"}
        op_columns = {**OP_COLUMNS, "change": "how they differ"}
        parts = [
            "",
            m.heading(4, head),
            "",
            steps,
            "",
            m.lit(
                f"Not the same work ({different}): the rows below are how the two differ, the largest difference of "
                "time per step first; none of them is a change."
            ),
            "",
        ]
        kernels, ops = as_differences(kernels), as_differences(ops)
    else:
        columns, op_columns = CHANGE_COLUMNS, OP_COLUMNS
        parts = ["", m.heading(4, f"What changed: {m.lit(change.run)} against {m.lit(change.baseline)}"), "", steps, ""]
        if change.readings:
            parts += ["Readings:", *[f"- {m.lit(line)}" for line in change.readings], ""]
        else:
            parts += ["Readings: no compile, CUDA-graph, attention-backend or copy-class change.", ""]
        parts += [m.lit(review.explained_sentence(change)), ""]
    parts.append(
        m.table(kernels.with_columns(pl.col("name").str.slice(0, 100)), columns)
        if kernels.height
        else ("No kernel differs." if different is not None else "No kernel changed.")
    )
    parts += ["", f"CPU side: ops, annotations and launch calls (top {KERNEL_CHANGES_SHOWN} by time):", ""]
    parts.append(
        m.table(ops.with_columns(pl.col("name").str.slice(0, 100)), op_columns)
        if ops.height
        else ("No op differs." if different is not None else "No op changed.")
    )
    for change_kind, words in (("added", "only in the run"), ("removed", "only in the baseline")):
        names, total = _only(change.ops, change_kind)
        if total:
            more = f", and {total - len(names)} more" if total > len(names) else ""
            parts += m.details(
                f"{total} op {'name' if total == 1 else 'names'} {words}", ", ".join(m.lit(n) for n in names) + more
            )
    return parts


def _relation_block(rv: Review, m: _Markdown) -> list[str]:
    """The runs that are not the same work as their baseline, and those on another device, each
    with why: the first thing a reader meets after the title (nothing when every run is the same work)."""
    different, cross = relations(rv.speed)
    parts: list[str] = []
    for rows, title, why in (
        (different, NOT_SAME_WORK, NOT_SAME_WORK_WHY),
        (cross, ANOTHER_DEVICE, ANOTHER_DEVICE_WHY),
    ):
        if rows:
            lines = [f"{m.strong(title + ':')} {m.lit(why)}."] + [
                f"- {m.strong(m.lit(r['run']))} against {m.lit(r['baseline'])}: {m.lit(r['why'])}" for r in rows
            ]
            parts += [*m.quote(lines), ""]
    return parts


def _document(rv: Review, m: _Markdown) -> str:
    """The summary of a computed review, in Markdown (_Markdown) or plain text (_Text)."""
    others = [label for label in rv.runs if label != rv.baseline]
    parts = m.title(
        f"attnscope review: {m.lit(', '.join(others) or rv.baseline)} against baseline {m.strong(m.lit(rv.baseline))}"
    )
    split = len(rv.groups) > 1
    if split:
        parts += [
            *m.quote(
                [
                    f"{m.lit(review.MIXED_DEVICES_WHY)} "
                    + "; ".join(f"{g.name} runs against {m.strong(m.lit(g.baseline))}" for g in rv.groups)
                    + "."
                ]
            ),
            "",
        ]
    parts += _relation_block(rv, m)
    parts.append(m.heading(3, "Findings"))
    findings = said_findings(rv.findings)
    if findings.height:
        for row in review.by_severity(findings).iter_rows(named=True):
            parts.append(
                f"- {m.mark(row['severity'])} {m.strong(m.lit(row['run']))} {row['kind']}: {m.lit(row['message'])}"
            )
    else:
        parts.append("- nothing to flag: no hidden copies, no backend fallback, no parity failure")
    units = sorted({work_unit(t) for t in rv.runs.values()})
    overview = _with_device_label(rv.overview)
    parts += [
        "",
        m.heading(3, "Overview"),
        f"Work is counted in {m.lit(' and '.join(u + 's' for u in units))}; speedup > 1 means faster than the baseline.",
        "",
    ]
    for group in rv.groups:
        if split:
            parts += [m.heading(4, m.lit(_group_title(group))), ""]
        parts += [m.table(_group_rows(overview, group), OVERVIEW_COLUMNS), ""]
    parts += [m.heading(3, "Device work per step by kernel family"), "", m.table(rv.families, FAMILY_COLUMNS)]
    why_apart = {r["run"]: r["why"] for r in relations(rv.speed)[0]}
    if rv.changes:
        title = (
            "How each run differs from its baseline (not the same work), ranked by time per step"
            if all(c.run in why_apart for c in rv.changes)
            else "What changed, ranked by time per step"
        )
        parts += ["", m.heading(3, title)]
    for change in rv.changes:
        parts += _md_changes(change, rv.by, m, why_apart.get(change.run))
    parts += [
        "",
        m.heading(3, "Copies"),
        "",
        m.table(rv.copies, COPY_COLUMNS) if rv.copies.height else "No copies in any run.",
    ]
    parts += ["", m.heading(3, "Attention backend"), "", m.table(backend_check_words(rv.backends), BACKEND_COLUMNS)]
    if rv.efficiency is not None:
        parts += [
            "",
            m.heading(3, "Attention efficiency"),
            "",
            m.lit(EFFICIENCY_WHY),
            "",
            m.table(rv.efficiency, EFFICIENCY_COLUMNS),
        ]
    parts += ["", m.heading(3, "Speed"), "", m.lit(_price_line(rv)), ""]
    for group in rv.groups:
        if split:
            parts += [m.heading(4, m.lit(_group_title(group))), ""]
        parts += [m.table(_group_rows(rv.speed, group), SPEED_COLUMNS), ""]
    parts += [
        m.footer(f"attnscope {__version__}; traces: " + ", ".join(m.lit(t.source) for t in rv.runs.values())),
        "",
    ]
    return "\n".join(parts)


def render_markdown(rv: Review) -> str:
    """The Markdown summary of a computed review. Trace strings are escaped (md_text)."""
    return _document(rv, _Markdown())


def render_text(rv: Review) -> str:
    """The same summary as plain text, for a terminal: no Markdown marks, no escapes, tables padded."""
    return _document(rv, _Text())


# ---------- HTML ----------

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px auto; max-width: 1400px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.alarm { background: #fde8e8; border-left: 4px solid #d62728; padding: 6px 10px; margin: 4px 0; }
.warning { background: #fff4ce; border-left: 4px solid #e6a700; padding: 6px 10px; margin: 4px 0; }
.note { background: #f1f5fb; border-left: 4px solid #4c78a8; padding: 6px 10px; margin: 4px 0; }
.ok { background: #eaf6ea; border-left: 4px solid #2ca02c; padding: 6px 10px; }
tr.hidden-copy td { background: #fde8e8; }
td.math { background: #fde8e8; font-weight: 600; }
.muted { color: #777; font-size: 0.85em; }
"""


def _html_table(frame: pl.DataFrame, columns: dict[str, str], row_class: str | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in columns.values())
    body = []
    for row in frame.iter_rows(named=True):
        cls = f' class="{row_class}"' if row_class and row.get("hidden") else ""
        cells = []
        for c in columns:
            value = row[c]
            num = isinstance(value, (int, float)) and not isinstance(value, bool)
            text = _fmt(c, value)
            if len(text) > LONG_CELL:  # C++ kernel names run to 1,000 characters: show the start, hover for all
                cells.append(f'<td title="{html.escape(text)}">{html.escape(text[:LONG_CELL])}…</td>')
            else:
                cells.append(f"<td{' class=num' if num else ''}>{html.escape(text)}</td>")
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figure(fig: go.Figure, name: str) -> str:
    """A figure as data: its plotly JSON in a <script type="application/json"
    class="attnscope-figure" data-name=...> block (tools and tests read it with a JSON parser),
    drawn into the <div> before it by DRAW_FIGURES."""
    text = fig.to_json().replace("</", "<\\/")
    return (
        f'<div class="figure"></div><script type="application/json" class="attnscope-figure" '
        f'data-name="{html.escape(name)}">{text}</script>'
    )


# Draws every figure block into the <div> just before it (plotly.js is inlined in the <head>).
ARTICLE_ONLY_HTML = (
    "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>attnscope: the article's measurements</title>"
    "<style>" + CSS.replace("{", "{{").replace("}", "}}") + "</style></head><body>\n{body}</body></html>\n"
)
"""The HTML page of a report holding only the article's measurements (no trace): str.format(body=...)."""

DRAW_FIGURES = """<script>
document.querySelectorAll('script.attnscope-figure').forEach(function (block) {
  var fig = JSON.parse(block.textContent);
  Plotly.newPlot(block.previousElementSibling, fig.data, fig.layout, {displaylogo: false, responsive: true});
});
</script>"""


def review_data(rv: Review, full: bool = False) -> dict[str, Any]:
    """The numbers behind the report: runs, fingerprints, findings, overview, families, copies,
    backends, speed (speedup or, between different workloads, the reason for none), efficiency and
    each run's changes (readings, the kernels ranked by time; with `full`, every kernel and op row)."""
    from dashboard.engine.compare.fingerprint import fingerprint

    def kernels(c: review.Change) -> list[dict[str, Any]]:
        frame = (
            c.kernels if full else _shown(c.kernels).drop("base_us_per_step", "other_us_per_step", "delta_us_per_step")
        )
        return frame.to_dicts()

    return {
        "baseline": rv.baseline,
        "runs": {label: t.source for label, t in rv.runs.items()},
        "fingerprints": {label: fingerprint(t).as_dict() for label, t in rv.runs.items()},
        "overview": rv.overview.to_dicts(),
        "findings": rv.findings.to_dicts(),
        "families": rv.families.to_dicts(),
        "copies": rv.copies.to_dicts(),
        "backends": rv.backends.to_dicts(),
        "speed": rv.speed.to_dicts(),
        "efficiency": rv.efficiency.to_dicts() if rv.efficiency is not None else [],
        "roofline": {
            "points": rv.roofline.to_dicts() if rv.roofline is not None else [],
            "left_out": rv.roofline_left_out.to_dicts() if rv.roofline_left_out is not None else [],
        },
        "changes": [
            {
                "run": c.run,
                "baseline": c.baseline,
                "readings": c.readings,
                "explained_ns_per_step": list(c.explained),
                "top": c.top,
                "kernels": kernels(c),
                **({"ops": c.ops.to_dicts()} if full else {}),
            }
            for c in rv.changes
        ],
        "groups": [{"name": g.name, "runs": g.runs, "baseline": g.baseline} for g in rv.groups],
        "prices": {"usd_per_gpu_hour": rv.usd_per_gpu_hour, "usd_per_cpu_hour": rv.usd_per_cpu_hour},
    }


def render_json(rv: Review) -> str:
    """`attnscope compare --json`: review_data with every kernel and op row, strict JSON (NaN and
    infinities as null), keys in a fixed order, so the same traces give byte-identical files."""
    return json.dumps(_finite(review_data(rv, full=True)), default=str, indent=1, ensure_ascii=False) + "\n"


def _embedded(rv: Review) -> str:
    """The numbers behind the report as JSON, for tools (and tests) that read the HTML back."""
    text = json.dumps(_finite(review_data(rv)), default=str).replace("</", "<\\/")
    return f'<script type="application/json" id="attnscope-data">{text}</script>'


def _finite(value: Any) -> Any:
    """NaN and infinities become null: the embedded block must be strict JSON."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def html_report(
    runs: dict[str, Trace],
    baseline: str,
    usd_per_gpu_hour: float | None = DEFAULT_USD_PER_GPU_HOUR,
    usd_per_cpu_hour: float | None = None,
    colors: dict[str, str] | None = None,
    by: str = "base",
    steps: dict[str, int | None] | None = None,
) -> str:
    """One self-contained HTML page (plotly.js inlined once; no external script, style or font)."""
    return render_html(build_review(runs, baseline, usd_per_gpu_hour, usd_per_cpu_hour, colors, by=by, steps=steps))


def _html_changes(change: review.Change, by: str, different: str | None = None) -> list[str]:
    """The HTML of one run against its baseline: readings, the explained line, the kernel and op
    diffs; between different work (`different`: why) how the two differ, not what changed."""
    steps = (
        f'<p class="muted">{html.escape(_steps_words(change))}; kernels '
        f"{'by base name (template instances folded)' if by == 'base' else 'by full name'}.</p>"
    )
    kernels, ops = _shown(change.kernels), _shown(change.ops)
    if different is not None:
        out = [
            f"<h3>Different work, side by side: {html.escape(change.run)} against {html.escape(change.baseline)}</h3>",
            steps,
            f'<div class="warning">Not the same work ({html.escape(different)}): the rows below are how the two differ, '
            "the largest difference of time per step first; none of them is a change.</div>",
        ]
        columns, op_columns = (
            {**CHANGE_COLUMNS, "change": "how they differ"},
            {**OP_COLUMNS, "change": "how they differ"},
        )
        kernels, ops = as_differences(kernels), as_differences(ops)
    else:
        out = [f"<h3>What changed: {html.escape(change.run)} against {html.escape(change.baseline)}</h3>", steps]
        if change.readings:
            out.append(
                '<div class="note readings"><ul>'
                + "".join(f"<li>{html.escape(line)}</li>" for line in change.readings)
                + "</ul></div>"
            )
        else:
            out.append("<p>Readings: no compile, CUDA-graph, attention-backend or copy-class change.</p>")
        out.append(f"<p>{html.escape(review.explained_sentence(change))}</p>")
        columns, op_columns = CHANGE_COLUMNS, OP_COLUMNS
    none = "differs" if different is not None else "changed"
    out.append(_html_table(kernels, columns) if kernels.height else f"<p>No kernel {none}.</p>")
    out.append(f"<h4>CPU side: ops, annotations and launch calls (top {KERNEL_CHANGES_SHOWN} by time)</h4>")
    out.append(_html_table(ops, op_columns) if ops.height else f"<p>No op {none}.</p>")
    for change_kind, words in (("added", "only in the run"), ("removed", "only in the baseline")):
        names, total = _only(change.ops, change_kind)
        if total:
            more = f", and {total - len(names)} more" if total > len(names) else ""
            out.append(
                f"<details><summary>{total} op {'name' if total == 1 else 'names'} {words}</summary>"
                f"<p>{html.escape(', '.join(names) + more)}</p></details>"
            )
    return out


def _html_relations(rv: Review) -> list[str]:
    """_relation_block in HTML: the runs not the same work as their baseline (a warning) and those
    on another device (a note), each with why."""
    different, cross = relations(rv.speed)
    out = []
    for rows, title, why, cls in (
        (different, NOT_SAME_WORK, NOT_SAME_WORK_WHY, "warning"),
        (cross, ANOTHER_DEVICE, ANOTHER_DEVICE_WHY, "note"),
    ):
        if rows:
            out.append(
                f'<div class="{cls} relation"><b>{html.escape(title)}:</b> {html.escape(why)}.<ul>'
                + "".join(
                    f"<li><b>{html.escape(r['run'])}</b> against {html.escape(r['baseline'])}: {html.escape(r['why'])}</li>"
                    for r in rows
                )
                + "</ul></div>"
            )
    return out


def _written_by() -> str:
    """Who wrote the page; the date only from $SOURCE_DATE_EPOCH (the reproducible-builds
    convention), never from the clock, so the same traces give a byte-identical page."""
    stamp = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if stamp.isdigit() and int(stamp) < 253402300800:  # before the year 10000
        return f"Generated {datetime.fromtimestamp(int(stamp), timezone.utc):%Y-%m-%d %H:%M} UTC by attnscope {__version__}"
    return f"Generated by attnscope {__version__}"


def render_html(rv: Review) -> str:
    """The self-contained HTML page of a computed review. Every trace string is HTML-escaped."""
    labels = list(rv.runs)
    others = [label for label in labels if label != rv.baseline]
    units = sorted({work_unit(t) for t in rv.runs.values()})
    split = len(rv.groups) > 1
    body: list[str] = [
        f"<h1>attnscope review: {html.escape(', '.join(others) or rv.baseline)} against baseline "
        f"<code>{html.escape(rv.baseline)}</code></h1>"
    ]
    body.append(f'<p class="muted">{_written_by()}. Speedup &gt; 1 means faster than the baseline.</p>')
    if split:
        body.append(
            f'<div class="note" id="device-groups">{html.escape(review.MIXED_DEVICES_WHY)} '
            + "; ".join(f"{html.escape(g.name)} runs against <b>{html.escape(g.baseline)}</b>" for g in rv.groups)
            + ".</div>"
        )
    body += _html_relations(rv)
    body.append("<h2>Findings</h2>")
    findings = said_findings(rv.findings)
    if findings.height:
        for row in review.by_severity(findings).iter_rows(named=True):
            body.append(
                f'<div class="{row["severity"]}"><b>{html.escape(row["run"])}</b> · {html.escape(row["kind"])}: '
                f"{html.escape(row['message'])}</div>"
            )
    else:
        body.append('<div class="ok">Nothing to flag: no hidden copies, no backend fallback, no parity failure.</div>')
    overview = _with_device_label(rv.overview)
    body += ["<h2>Overview</h2>", f"<p>Work is counted in {html.escape(' and '.join(u + 's' for u in units))}.</p>"]
    for group in rv.groups:
        if split:
            body.append(f"<h3>{html.escape(_group_title(group))}</h3>")
        body.append(_html_table(_group_rows(overview, group), OVERVIEW_COLUMNS))
    body.append("<h2>Kernels per step</h2>")
    for group in rv.groups:
        fam = _group_rows(rv.families, group)
        group_units = sorted({work_unit(rv.runs[r]) for r in group.runs})
        body.append(
            _figure(charts.work_by_family_stacked(fam, group.runs, " / ".join(group_units)), f"work-{group.name}")
        )
    body.append(_html_table(rv.families, FAMILY_COLUMNS))
    why_apart = {r["run"]: r["why"] for r in relations(rv.speed)[0]}
    if rv.changes:
        body.append(
            "<h2>How each run differs from its baseline (not the same work), ranked by time per step</h2>"
            if all(c.run in why_apart for c in rv.changes)
            else "<h2>What changed, ranked by time per step</h2>"
        )
    for change in rv.changes:
        body += _html_changes(change, rv.by, why_apart.get(change.run))
    body += [
        "<h2>Copies</h2>",
        _figure(charts.copy_time_bars(rv.copies, labels), "copies") if rv.copies.height else "",
        _html_table(rv.copies, COPY_COLUMNS, row_class="hidden-copy")
        if rv.copies.height
        else "<p>No copies in any run.</p>",
    ]
    body += ["<h2>Attention backend</h2>", _html_table(backend_check_words(rv.backends), BACKEND_COLUMNS)]
    if rv.efficiency is not None:
        body += [
            "<h2>Attention efficiency</h2>",
            f"<p>{html.escape(EFFICIENCY_WHY)}</p>",
            _html_table(rv.efficiency, EFFICIENCY_COLUMNS),
        ]
        if rv.roofline is not None and rv.roofline.height:
            body.append(_figure(charts.roofline(rv.roofline, rv.colors or None), "roofline"))
            body.append(f"<p>{html.escape(ROOFLINE_WHY)}</p>")
        if rv.roofline_left_out is not None and rv.roofline_left_out.height:
            body.append(
                '<p class="muted">Not on the roofline (the bytes their kernels move cannot be told from the trace, '
                "and are not guessed):</p><ul>"
                + "".join(
                    f"<li>{html.escape(r['run'])} ({html.escape(r['measure'])}): {html.escape(r['reason'] or '')}</li>"
                    for r in rv.roofline_left_out.iter_rows(named=True)
                )
                + "</ul>"
            )
    body += ["<h2>Speed</h2>", f"<p>{html.escape(_price_line(rv))}</p>"]
    for group in rv.groups:
        speed = _group_rows(rv.speed, group)
        if split:
            body.append(f"<h3>{html.escape(_group_title(group))}</h3>")
        body += [
            _figure(charts.step_time_bars(speed, colors=rv.colors), f"step-time-{group.name}"),
            _figure(charts.speedup_bars(speed, group.baseline), f"speedup-{group.name}"),
            _html_table(speed, SPEED_COLUMNS),
        ]
    body.append("<h2>Timelines</h2>")
    pairs = [(rv.against(label), label) for label in others if label != rv.against(label)] or [
        (rv.baseline, rv.baseline)
    ]
    for base_label, label in pairs:
        base, trace = rv.runs[base_label], rv.runs[label]
        base_step, step = representative_step(base), representative_step(trace)
        body.append(
            f"<p class=muted>Median step of each run: {html.escape(base_label)} step {base_step}, "
            f"{html.escape(label)} step {step}."
            + (" Not the same work: two programs side by side, not a change." if label in why_apart else "")
            + "</p>"
        )
        body.append(
            _figure(
                charts.timeline_pair(timeline(base, base_step), timeline(trace, step), base_label, label),
                f"timeline-{label}",
            )
        )
    page = "\n".join(body)
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>attnscope review: {html.escape(rv.baseline)}</title><style>{CSS}</style>"
        f"<script>{plotly.offline.get_plotlyjs()}</script></head><body>\n{page}\n{_embedded(rv)}\n{DRAW_FIGURES}\n</body></html>\n"
    )
