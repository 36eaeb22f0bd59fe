"""Step times, speedups, throughput and cost.

Speedup is base time / other time, so > 1 means faster than the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from dashboard.engine.kernels import per_step
from dashboard.engine.model import Trace


@dataclass(frozen=True)
class StepTime:
    """Step time statistics in µs over the trace's steps. `source` says which time: 'device busy'
    (union of GPU work per step) on GPU traces, 'step span' (the CPU ProfilerStep span) otherwise."""

    median_us: float
    p10_us: float
    p90_us: float
    steps: int
    source: str


def step_time_column(trace: Trace) -> str:
    """Which per_step column is a step's time: busy_ns (device busy time) on GPU traces, dur_ns
    (the CPU ProfilerStep span) on CPU-only traces."""
    return "busy_ns" if trace.has_gpu else "dur_ns"


def step_time(trace: Trace, which: str = "auto") -> StepTime:
    """Median and spread of the time per step in µs. which: 'auto', 'busy' or 'span'."""
    table = per_step(trace)
    column = {"busy": "busy_ns", "span": "dur_ns"}.get(which) or step_time_column(trace)
    use_busy = column == "busy_ns"
    values = table[column].cast(pl.Float64) / 1000.0
    if values.len() == 0:
        return StepTime(float("nan"), float("nan"), float("nan"), 0, column)
    return StepTime(
        median_us=float(values.median()),
        p10_us=float(values.quantile(0.1, "linear")),
        p90_us=float(values.quantile(0.9, "linear")),
        steps=values.len(),
        source="device busy" if use_busy else "step span",
    )


def tokens_per_step(trace: Trace) -> int | None:
    """Tokens processed per step, from the collectors' metadata (batch x seq) when present."""
    value = trace.collector.get("tokens_per_step")
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def speed_table(traces: dict[str, Trace], baseline: str, usd_per_gpu_hour: float | None = None) -> pl.DataFrame:
    """One row per run: run, median_us, p10_us, p90_us, steps, time_source, speedup (baseline
    median / run median; > 1 is faster), tokens_per_step, tokens_per_s, usd_per_mtok (cost per
    million tokens at the given $/GPU-hour)."""
    rows = []
    times = {label: step_time(t) for label, t in traces.items()}
    base = times.get(baseline)
    for label, trace in traces.items():
        st = times[label]
        tokens = tokens_per_step(trace)
        tok_s = tokens / (st.median_us / 1e6) if tokens and st.median_us > 0 else None
        cost = usd_per_gpu_hour / 3600.0 / tok_s * 1e6 if tok_s and usd_per_gpu_hour else None
        speedup = base.median_us / st.median_us if base and base.median_us > 0 and st.median_us > 0 else None
        rows.append(
            {
                "run": label, "median_us": st.median_us, "p10_us": st.p10_us, "p90_us": st.p90_us, "steps": st.steps,
                "time_source": st.source, "speedup": speedup, "tokens_per_step": tokens, "tokens_per_s": tok_s,
                "usd_per_mtok": cost,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "run": pl.String, "median_us": pl.Float64, "p10_us": pl.Float64, "p90_us": pl.Float64, "steps": pl.Int64,
            "time_source": pl.String, "speedup": pl.Float64, "tokens_per_step": pl.Int64, "tokens_per_s": pl.Float64,
            "usd_per_mtok": pl.Float64,
        },
    )


def representative_step(trace: Trace) -> int:
    """The step whose time (device busy time on GPU traces, the span otherwise) is closest to the
    median: the one to show when only one step of a run is drawn."""
    table = per_step(trace)
    column = step_time_column(trace)
    median = table[column].median()
    return int(table.sort((pl.col(column) - median).abs(), "step")["step"][0])
