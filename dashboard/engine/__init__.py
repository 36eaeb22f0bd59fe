"""The trace engine: load -> Trace -> analyses. No streamlit, no plotting here.

    from dashboard.engine import load_trace, summarize, memory_peaks
    trace = load_trace("run.json.gz")
    summarize(trace)["steps"]
    memory_peaks(trace)  # peak allocated per step and device (profile_memory=True traces)

In a notebook, TraceAnalysis (analysis.py) holds one trace and its analyses (steps, kernels, copies,
backends, efficiency, health, memory, summary), each a method with its parameters documented;
docs/notebook.md shows a session. Comparison (comparison.py) holds several runs against a baseline
and every table the dashboard's tabs, the CLI's compare and check and the reports read, each
computed when first asked for.

The names below are imported when first used (PEP 562), so that importing one light module of the
engine (constants, rules, settings) does not import polars and every analysis: `attnscope --help`
starts in a fraction of the time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "TraceError": "dashboard.engine.load",
    "load_trace": "dashboard.engine.load",
    "memory_peak": "dashboard.engine.analyses.memory",
    "memory_peaks": "dashboard.engine.analyses.memory",
    "Trace": "dashboard.engine.model.trace",
    "summarize": "dashboard.engine.analyses.summary",
    "TraceAnalysis": "dashboard.engine.analysis",
    "Comparison": "dashboard.engine.comparison",
}

__all__ = sorted(_EXPORTS)


# Every module that defines a per_trace analysis (tests/test_catalog_schemas.py finds them in the source)
ANALYSIS_MODULES = (
    "dashboard.engine.model.trace",
    "dashboard.engine.analyses.attention_calls",
    "dashboard.engine.analyses.backends",
    "dashboard.engine.analyses.classes",
    "dashboard.engine.analyses.copies",
    "dashboard.engine.analyses.graphs",
    "dashboard.engine.analyses.health",
    "dashboard.engine.analyses.host",
    "dashboard.engine.analyses.kernels",
    "dashboard.engine.analyses.memory",
    "dashboard.engine.analyses.phases",
    "dashboard.engine.analyses.roofline",
    "dashboard.engine.analyses.roofline_bytes",
    "dashboard.engine.analyses.summary",
    "dashboard.engine.compare.alignment",
    "dashboard.engine.compare.fingerprint",
    "dashboard.engine.compare.review_tables",
)


def analysis_catalog() -> dict[str, Any]:
    """The catalogue of analyses: every per_trace analysis's declaration (model.catalog.Declared:
    its key, docstring and schema, JSON shape or object), by key, every module of ANALYSIS_MODULES
    imported so that none is missing. docs/analyses.md is written from it."""
    for module in ANALYSIS_MODULES:
        importlib.import_module(module)
    from dashboard.engine.model.catalog import CATALOG

    return dict(sorted(CATALOG.items()))


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dashboard.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # for type checkers and editors: the same names, imported eagerly
    from dashboard.engine.analysis import TraceAnalysis  # noqa: F401
    from dashboard.engine.comparison import Comparison  # noqa: F401
    from dashboard.engine.load import TraceError, load_trace  # noqa: F401
    from dashboard.engine.analyses.memory import memory_peak, memory_peaks  # noqa: F401
    from dashboard.engine.model.trace import Trace  # noqa: F401
    from dashboard.engine.analyses.summary import summarize  # noqa: F401
