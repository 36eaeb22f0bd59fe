"""The review as Markdown (a pull-request comment) or plain text (a terminal): one document,
written by _Markdown or _Text."""

from __future__ import annotations

from typing import Any

import polars as pl

from dashboard import __version__
from dashboard.engine.analyses.kernels import work_unit
from dashboard.engine.compare import review
from dashboard.engine.compare.speed import (
    DEFAULT_USD_PER_GPU_HOUR,
)
from dashboard.engine.model.trace import Trace
from dashboard.report.build import (
    ANOTHER_DEVICE,
    ANOTHER_DEVICE_WHY,
    KERNEL_CHANGES_SHOWN,
    NOT_SAME_WORK,
    NOT_SAME_WORK_WHY,
    Review,
    _group_rows,
    _group_title,
    _only,
    _price_line,
    _shown,
    _steps_words,
    as_differences,
    build_review,
    relations,
    said_findings,
)
from dashboard.report.tables import (
    BACKEND_COLUMNS,
    CHANGE_COLUMNS,
    COPY_COLUMNS,
    EFFICIENCY_COLUMNS,
    EFFICIENCY_WHY,
    FAMILY_COLUMNS,
    OP_COLUMNS,
    OVERVIEW_COLUMNS,
    SPEED_COLUMNS,
    _md_table,
    md_text,
    text_table,
)


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
    overview = rv.overview_labelled
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
    parts += ["", m.heading(3, "Attention backend"), "", m.table(rv.backends_shown, BACKEND_COLUMNS)]
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
