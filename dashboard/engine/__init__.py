"""The trace engine: load -> Trace -> analyses. No streamlit, no plotting here.

    from dashboard.engine import load_trace, summarize, memory_peaks
    trace = load_trace("run.json.gz")
    summarize(trace)["steps"]
    memory_peaks(trace)  # peak allocated per step and device (profile_memory=True traces)

In a notebook, TraceAnalysis (dashboard/engine/analysis.py) holds one trace and its analyses, each
with its parameters documented: steps(), step_time(), kernels(), copies(), backends(), fallback(),
efficiency(), health(), memory(), summary() (docs/notebook.md shows a session):

    from dashboard.engine import TraceAnalysis
    ta = TraceAnalysis("sample_traces/h200/naive.json.gz")
    ta.kernels()  # one row per kernel: family, count, per step, time, share

The functions behind it are exported too where their name is not also a module's (copies, health
and efficiency are modules of this package: import those functions from their modules):
kernel_table, family_per_step, per_step, step_time, copy_summary, detect_backends, summarize.

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
    "memory_peak": "dashboard.engine.memory",
    "memory_peaks": "dashboard.engine.memory",
    "Trace": "dashboard.engine.model",
    "summarize": "dashboard.engine.summary",
    # the notebook's facade and the per-trace analyses behind it
    "TraceAnalysis": "dashboard.engine.analysis",
    "kernel_table": "dashboard.engine.kernels",
    "family_per_step": "dashboard.engine.kernels",
    "per_step": "dashboard.engine.kernels",
    "step_time": "dashboard.engine.speed",
    "copy_summary": "dashboard.engine.copies",
    "detect_backends": "dashboard.engine.backends",
}

__all__ = sorted(_EXPORTS)


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
    from dashboard.engine.load import TraceError, load_trace
    from dashboard.engine.memory import memory_peak, memory_peaks
    from dashboard.engine.model import Trace
    from dashboard.engine.summary import summarize
    from dashboard.engine.analysis import TraceAnalysis
    from dashboard.engine.backends import detect_backends
    from dashboard.engine.copies import copy_summary
    from dashboard.engine.kernels import family_per_step, kernel_table, per_step
    from dashboard.engine.speed import step_time
