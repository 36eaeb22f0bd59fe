"""The trace engine: load -> Trace -> analyses. No streamlit, no plotting here.

    from dashboard.engine import load_trace, summarize, memory_peaks
    trace = load_trace("run.json.gz")
    summarize(trace)["steps"]
    memory_peaks(trace)  # peak allocated per step and device (profile_memory=True traces)
"""

from dashboard.engine.load import TraceError, load_trace
from dashboard.engine.memory import memory_peak, memory_peaks
from dashboard.engine.model import Trace
from dashboard.engine.summary import summarize

__all__ = ["Trace", "TraceError", "load_trace", "memory_peak", "memory_peaks", "summarize"]
