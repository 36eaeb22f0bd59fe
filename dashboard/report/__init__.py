"""Offline reviews: the dashboard's comparison as one self-contained HTML file (plotly.js inside,
no network) and as a Markdown summary for a pull-request comment.

Everything shown comes from dashboard.engine's Comparison (the multi-run facade the dashboard's
tabs read too) and the figures from dashboard.charts, the very builders the dashboard draws with.
The modules: build (build_review, which makes the Comparison, and the words every format shares), tables (columns and how their numbers are written), markdown
(Markdown and plain text), html_page (the HTML page), data (the JSON behind it); their public
names are importable from dashboard.report as before.
"""

from __future__ import annotations

from dashboard.report.build import (
    ANOTHER_DEVICE,
    ANOTHER_DEVICE_WHY,
    DIFFERENCE_WORDS,
    GRAPH_INPUT_COPY_OP,
    KERNEL_CHANGES_SHOWN,
    NAMES_LISTED,
    NOT_SAME_WORK,
    NOT_SAME_WORK_WHY,
    NO_ATTENTION,
    RELATION_FINDINGS,
    Review,
    as_differences,
    backend_check_words,
    build_review,
    graph_input_copies,
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
    FORMATS,
    MD_SPECIAL,
    OP_COLUMNS,
    OVERVIEW_COLUMNS,
    ROOFLINE_WHY,
    SPEED_COLUMNS,
    TEXT_CELL,
    _cell,
    _fmt,
    md_text,
    text_table,
)
from dashboard.report.markdown import MARKS, TEXT_MARKS, markdown_report, render_markdown, render_text
from dashboard.report.html_page import (
    ARTICLE_ONLY_HTML,
    CSS,
    DRAW_FIGURES,
    LONG_CELL,
    html_report,
    render_html,
    with_text_sections,
)
from dashboard.report.data import render_json, review_data

__all__ = [
    "ANOTHER_DEVICE",
    "ANOTHER_DEVICE_WHY",
    "ARTICLE_ONLY_HTML",
    "BACKEND_COLUMNS",
    "CHANGE_COLUMNS",
    "COPY_COLUMNS",
    "CSS",
    "DIFFERENCE_WORDS",
    "DRAW_FIGURES",
    "EFFICIENCY_COLUMNS",
    "EFFICIENCY_WHY",
    "FAMILY_COLUMNS",
    "FORMATS",
    "GRAPH_INPUT_COPY_OP",
    "KERNEL_CHANGES_SHOWN",
    "LONG_CELL",
    "MARKS",
    "MD_SPECIAL",
    "NAMES_LISTED",
    "NOT_SAME_WORK",
    "NOT_SAME_WORK_WHY",
    "NO_ATTENTION",
    "OP_COLUMNS",
    "OVERVIEW_COLUMNS",
    "RELATION_FINDINGS",
    "ROOFLINE_WHY",
    "Review",
    "SPEED_COLUMNS",
    "TEXT_CELL",
    "TEXT_MARKS",
    "_cell",
    "_fmt",
    "as_differences",
    "backend_check_words",
    "build_review",
    "graph_input_copies",
    "html_report",
    "markdown_report",
    "md_text",
    "relations",
    "render_html",
    "with_text_sections",
    "render_json",
    "render_markdown",
    "render_text",
    "review_data",
    "said_findings",
    "text_table",
]
