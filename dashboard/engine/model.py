"""The Trace: one normalized model of a torch.profiler trace that every analysis asks questions of.

Units: every `*_ns` column is an integer number of nanoseconds relative to the trace start
(the earliest complete event); `bytes` are bytes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import polars as pl

# Categories after normalization (see load.CATEGORY_ALIASES).
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


@dataclass
class Trace:
    """A loaded trace.

    events: one row per complete ("X") event, sorted by (pid, tid, ts_ns, -dur_ns); `id` is the
        row number. Columns: id, cat, name, pid, tid, ts_ns, dur_ns, stream, device, correlation,
        external_id, bytes, kind (memcpy kind such as DtoD), input_dims and input_types (the raw
        JSON text of those args, when shapes were recorded), depth (nesting on its thread), parent
        (id of the innermost enclosing event on the same thread), launch (for GPU events: id of
        the cuda_runtime/cuda_driver call with the same correlation), step (ProfilerStep index).
    flows: ac2g / fwdbwd links: id, cat, name, ph, pid, tid, ts_ns.
    steps: name, step (the N of ProfilerStep#N), start_ns, end_ns, dur_ns, implicit.
    meta: the trace's top-level keys except traceEvents (deviceProperties, distributedInfo,
        versions, the collectors' "attnscope" block, ...).
    """

    source: str
    events: pl.DataFrame
    flows: pl.DataFrame
    steps: pl.DataFrame
    meta: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    size_bytes: int = 0
    _analyses: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def has_gpu(self) -> bool:
        """True when the trace holds any kernel, GPU memcpy or GPU memset."""
        return self.events.filter(pl.col("cat").is_in(GPU_CATEGORIES)).height > 0

    @property
    def implicit_step(self) -> bool:
        """True when the trace had no ProfilerStep and holds one step spanning the whole trace."""
        return bool(self.steps.height and self.steps["implicit"][0])

    @property
    def collector(self) -> dict[str, Any]:
        """The collectors' self-description ("attnscope" top-level key), or {} for foreign traces."""
        block = self.meta.get("attnscope")
        return block if isinstance(block, dict) else {}


R = TypeVar("R")


def per_trace(analysis: Callable[[Trace], R]) -> Callable[[Trace], R]:
    """Compute a one-argument analysis once per Trace: the dashboard, the reports and the gate
    ask for the same tables many times. Results are shared, so callers must not mutate them."""

    @functools.wraps(analysis)
    def cached(trace: Trace) -> R:
        key = analysis.__module__ + "." + analysis.__qualname__
        if key not in trace._analyses:
            trace._analyses[key] = analysis(trace)
        return trace._analyses[key]

    return cached
