"""The review as one self-contained HTML page: plotly.js inlined once, the figures as JSON blocks
drawn by DRAW_FIGURES, every trace string HTML-escaped."""

from __future__ import annotations

import html
import os
from datetime import datetime, timezone

import plotly.graph_objects as go
import plotly.offline
import polars as pl

from dashboard import __version__, charts
from dashboard.engine.analyses.kernels import work_unit
from dashboard.engine.compare import review
from dashboard.engine.compare.diff import timeline
from dashboard.engine.compare.speed import (
    DEFAULT_USD_PER_GPU_HOUR,
    representative_step,
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
from dashboard.report.data import _embedded
from dashboard.report.tables import (
    BACKEND_COLUMNS,
    CHANGE_COLUMNS,
    COPY_COLUMNS,
    EFFICIENCY_COLUMNS,
    EFFICIENCY_WHY,
    FAMILY_COLUMNS,
    OP_COLUMNS,
    OVERVIEW_COLUMNS,
    ROOFLINE_WHY,
    SPEED_COLUMNS,
    _fmt,
)

LONG_CELL = 160
LONG_WORD = 40

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px auto; max-width: 1400px; color: #222;
       padding: 0 16px; overflow-wrap: break-word; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 8px 0; max-width: 100%; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
td.long { overflow-wrap: anywhere; min-width: 16em; }
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
            # a word longer than LONG_WORD (a templated kernel's name) may break anywhere, or the table outgrows the page
            long = " class=long" if any(len(word) > LONG_WORD for word in text.split()) else ""
            if len(text) > LONG_CELL:  # C++ kernel names run to 1,000 characters: show the start, hover for all
                cells.append(f'<td{long} title="{html.escape(text)}">{html.escape(text[:LONG_CELL])}…</td>')
            else:
                cells.append(f"<td{' class=num' if num else long}>{html.escape(text)}</td>")
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
    body += _html_findings(rv)
    overview = rv.overview_labelled
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
    body += ["<h2>Attention backend</h2>", _html_table(rv.backends_shown, BACKEND_COLUMNS)]
    if rv.efficiency is not None:
        body += _html_efficiency(rv)
    body += _html_speed(rv)
    body += _html_timelines(rv, others, why_apart)
    page = "\n".join(body)
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>attnscope review: {html.escape(rv.baseline)}</title><style>{CSS}</style>"
        f"<script>{plotly.offline.get_plotlyjs()}</script></head><body>\n{page}\n{_embedded(rv)}\n{DRAW_FIGURES}\n</body></html>\n"
    )


def _html_findings(rv: Review) -> list[str]:
    """The findings, worst first, each in its severity's colour (those the relation block says left out)."""
    body = ["<h2>Findings</h2>"]
    findings = said_findings(rv.findings)
    if findings.height:
        for row in review.by_severity(findings).iter_rows(named=True):
            body.append(
                f'<div class="{row["severity"]}"><b>{html.escape(row["run"])}</b> · {html.escape(row["kind"])}: '
                f"{html.escape(row['message'])}</div>"
            )
    else:
        body.append('<div class="ok">Nothing to flag: no hidden copies, no backend fallback, no parity failure.</div>')
    return body


def _html_efficiency(rv: Review) -> list[str]:
    """The attention efficiency table, the roofline (when any point has one) and the runs left off it, with why."""
    body = [
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
    return body


def _html_speed(rv: Review) -> list[str]:
    """The prices used, then per device group the step-time and speedup figures and the speed table."""
    body = ["<h2>Speed</h2>", f"<p>{html.escape(_price_line(rv))}</p>"]
    for group in rv.groups:
        speed = _group_rows(rv.speed, group)
        if len(rv.groups) > 1:
            body.append(f"<h3>{html.escape(_group_title(group))}</h3>")
        body += [
            _figure(charts.step_time_bars(speed), f"step-time-{group.name}"),
            _figure(charts.speedup_bars(speed, group.baseline), f"speedup-{group.name}"),
            _html_table(speed, SPEED_COLUMNS),
        ]
    return body


def _html_timelines(rv: Review, others: list[str], why_apart: dict[str, str]) -> list[str]:
    """Each run's median step beside its baseline's (the baseline alone when it is the only run)."""
    body = ["<h2>Timelines</h2>"]
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
    return body


def with_text_sections(page: str, sections: list[tuple[str, list[str]]]) -> str:
    """`page` with a section per (title, lines) that has lines, before its end: the lines as the text
    report writes them, escaped, wrapped so a long op chain does not widen the page."""
    body = "".join(
        f'<h2>{html.escape(title)}</h2>\n<pre style="white-space:pre-wrap;overflow-wrap:anywhere">'
        f"{html.escape(chr(10).join(lines))}</pre>\n"
        for title, lines in sections
        if lines
    )
    return page.replace("\n</body></html>", f"\n{body}</body></html>") if body else page
