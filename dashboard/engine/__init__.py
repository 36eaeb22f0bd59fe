"""The trace engine: load -> Trace -> analyses. No streamlit, no plotting here.

    from dashboard.engine import load_trace, summarize
    trace = load_trace("run.json.gz")
    summarize(trace)["steps"]
"""

from dashboard.engine.load import TraceError, load_trace
from dashboard.engine.model import Trace
from dashboard.engine.summary import summarize

__all__ = ["Trace", "TraceError", "load_trace", "summarize"]
