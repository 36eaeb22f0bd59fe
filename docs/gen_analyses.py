"""docs/analyses.md, the catalogue of analyses: every per_trace analysis with what it answers (its
docstring's first sentence) and what it returns (a table's columns and dtypes, a JSON shape, or an
object that is never kept), read from the declarations (dashboard.engine.analysis_catalog).
docs/gen_cli.py writes it with the other generated pages and checks it (--check).
"""

from __future__ import annotations

import re
from typing import Any

PREFIX = "dashboard.engine."
KINDS = {
    "table": "a table (polars DataFrame), kept as Arrow: the columns below, in this order and of these dtypes",
    "json": "JSON (dicts, lists, text, numbers), kept as JSON",
    "object": "an object of the engine's own, kept only when it is None",
}
_ABBREVIATIONS = ("e.g.", "i.e.", "vs.")


def first_sentence(doc: str) -> str:
    """The docstring's first sentence (up to the first '.', '!' or '?' before a space or the end;
    'e.g.' and 'i.e.' do not end one), on one line."""
    text = " ".join(doc.split())
    for i, abbr in enumerate(_ABBREVIATIONS):
        text = text.replace(abbr, f"\0{i}\0")
    found = re.match(r"(.*?[.!?])(\s|$)", text)
    sentence = found.group(1) if found else text
    for i, abbr in enumerate(_ABBREVIATIONS):
        sentence = sentence.replace(f"\0{i}\0", abbr)
    return sentence


def _dtype(dtype: Any) -> str:
    """A dtype as the page writes it, the same under every polars the project admits (polars 2
    writes a Categorical as "Categorical(ordering='physical')", 1.20 as "Categorical")."""
    dtype = dtype() if isinstance(dtype, type) else dtype
    inner = getattr(dtype, "inner", None)
    if inner is not None:
        return f"{type(dtype).__name__}({_dtype(inner)})"
    return type(dtype).__name__


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _returns(declared: Any) -> str:
    if declared.kind == "table":
        return f"table, {len(declared.schema)} columns"
    return "JSON" if declared.kind == "json" else "object"


def _section(declared: Any) -> list[str]:
    name = declared.key.removeprefix(PREFIX)
    lines = [f"### `{name}`", "", _cell(first_sentence(declared.doc)), "", f"Returns {KINDS[declared.kind]}"]
    if declared.kind == "table":
        lines[-1] += ".\n\n| column | dtype |\n|---|---|"
        lines += [f"| `{column}` | {_dtype(dtype)} |" for column, dtype in declared.schema.items()]
    else:
        lines[-1] += f": `{declared.json or declared.returns}`."
    return lines + [""]


def render_analyses(header: str) -> str:
    """The page: a header line, what the catalogue is, one row per analysis, then each one's section."""
    from dashboard.engine import analysis_catalog

    catalog = analysis_catalog()
    lines = [
        header + "# The catalogue of analyses",
        "",
        "Every one-argument analysis of a trace (`model.trace.per_trace`: computed once per trace, kept in "
        "the trace store and read back on a later open) declares what it returns, where it is defined: "
        "`@per_trace(schema=COLUMNS)` for a table (column -> polars dtype, in order), "
        '`@per_trace(json="shape")` for a JSON answer, `@per_trace(returns="what")` for an object of the '
        "engine's own. A bare `@per_trace` is refused. The store's writer checks a table against its schema "
        "(a table unlike it is a bug, named with the analysis and the column) and its reader treats a kept "
        "table of another schema as absent, so it is computed again ([design notes](design.md#the-catalogue-"
        "of-analyses)). `tests/test_catalog_schemas.py` holds every table on every committed trace to its "
        "schema.",
        "",
        "| analysis | returns | answers |",
        "|---|---|---|",
    ]
    for key, declared in catalog.items():
        anchor = re.sub(r"[^a-z0-9_-]", "", key.removeprefix(PREFIX).lower())
        answer = _cell(first_sentence(declared.doc))
        lines.append(f"| [`{key.removeprefix(PREFIX)}`](#{anchor}) | {_returns(declared)} | {answer} |")
    lines += ["", "## The analyses", ""]
    for declared in catalog.values():
        lines += _section(declared)
    return "\n".join(lines).rstrip() + "\n"
