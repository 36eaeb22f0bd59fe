"""Step times, speedups, throughput and cost.

Speedup is base time / other time, so > 1 means faster than the baseline. Runs are compared only
within their device group: a CPU-only trace's step time is its CPU step span and a GPU trace's is
device busy time, so a ratio across the two would mean nothing. Each group has its own baseline
(the chosen one when it is in the group, else the group's first run).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from dashboard.engine.analyses.kernels import per_step
from dashboard.engine.model.trace import Trace


GROUP_GPU = "GPU"
GROUP_CPU = "CPU-only"
from dashboard.engine.model.constants import DEFAULT_USD_PER_GPU_HOUR  # noqa: E402,F401  (re-exported)

MIXED_DEVICES_WHY = (
    "GPU and CPU-only runs are measured differently (device busy time and kernels on GPU traces, the CPU "
    "step span and leaf CPU ops on CPU-only ones), so each group is compared with its own baseline and no "
    "speedup, work ratio or copy count is set across them."
)


def device_group(trace: Trace) -> str:
    """GROUP_GPU for a trace with GPU work (kernels, memcpy, memset), GROUP_CPU otherwise."""
    return GROUP_GPU if trace.has_gpu else GROUP_CPU


@dataclass(frozen=True)
class Group:
    """Runs that may be compared with each other: name (GROUP_GPU or GROUP_CPU), runs (labels in
    display order) and the baseline they are measured against."""

    name: str
    runs: list[str]
    baseline: str


def device_groups(traces: dict[str, Trace], baseline: str | None) -> list[Group]:
    """The runs split by device group, the chosen baseline's group first, then in order of first
    appearance. Each group's baseline is `baseline` when it belongs to the group, else the
    group's first run."""
    members: dict[str, list[str]] = {}
    for label, trace in traces.items():
        members.setdefault(device_group(trace), []).append(label)
    groups = [Group(name, labels, baseline if baseline in labels else labels[0]) for name, labels in members.items()]
    return sorted(groups, key=lambda g: g.baseline != baseline)


def group_baselines(traces: dict[str, Trace], baseline: str | None) -> dict[str, str]:
    """Run label -> the label of the baseline it is measured against (its group's)."""
    return {label: g.baseline for g in device_groups(traces, baseline) for label in g.runs}


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


SPEED_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "group": pl.String,
    "baseline": pl.String,
    "median_us": pl.Float64,
    "p10_us": pl.Float64,
    "p90_us": pl.Float64,
    "steps": pl.Int64,
    "time_source": pl.String,
    "speedup": pl.Float64,
    "tokens_per_step": pl.Int64,
    "tokens_per_s": pl.Float64,
    "usd_per_hour": pl.Float64,
    "usd_per_mtok": pl.Float64,
    "relation": pl.String,
    "relation_why": pl.String,
}
NO_SPEEDUP = "different workload: no speedup"


def speed_table(
    traces: dict[str, Trace],
    baseline: str,
    usd_per_gpu_hour: float | None = None,
    usd_per_cpu_hour: float | None = None,
) -> pl.DataFrame:
    """One row per run: run, group (device_group), baseline (the run it is measured against: its
    group's, see device_groups), median_us, p10_us, p90_us, steps, time_source, speedup (baseline
    median / run median; > 1 is faster; never across device groups, nor between different
    workloads), tokens_per_step, tokens_per_s, usd_per_hour (the price applied: per GPU-hour on GPU
    runs, per CPU-hour on CPU-only runs; None when not given), usd_per_mtok (cost per million
    tokens at that price), relation ('baseline', fingerprint.SAME, CROSS_DEVICE, or NO_SPEEDUP when
    the workloads differ: then speedup is None) and relation_why (how that was decided)."""
    from dashboard.engine.compare.fingerprint import CROSS_DEVICE, DIFFERENT, relation

    rows = []
    times = {label: step_time(t) for label, t in traces.items()}
    against = group_baselines(traces, baseline)
    for label, trace in traces.items():
        st = times[label]
        base = times[against[label]]
        group = device_group(trace)
        price = usd_per_gpu_hour if group == GROUP_GPU else usd_per_cpu_hour
        tokens = tokens_per_step(trace)
        tok_s = tokens / (st.median_us / 1e6) if tokens and st.median_us > 0 else None
        cost = price / 3600.0 / tok_s * 1e6 if tok_s and price else None
        speedup = base.median_us / st.median_us if base.median_us > 0 and st.median_us > 0 else None
        if label == against[label]:
            kind, why = "baseline", ""
        else:
            kind, why = relation(traces[against[label]], trace)
            if kind == DIFFERENT:
                kind, speedup = NO_SPEEDUP, None
            elif kind == CROSS_DEVICE:
                kind = CROSS_DEVICE
        rows.append(
            {
                "run": label,
                "group": group,
                "baseline": against[label],
                "median_us": st.median_us,
                "p10_us": st.p10_us,
                "p90_us": st.p90_us,
                "steps": st.steps,
                "time_source": st.source,
                "speedup": speedup,
                "tokens_per_step": tokens,
                "tokens_per_s": tok_s,
                "usd_per_hour": price,
                "usd_per_mtok": cost,
                "relation": kind,
                "relation_why": why,
            }
        )
    return pl.DataFrame(rows, schema=SPEED_SCHEMA)


def representative_step(trace: Trace) -> int:
    """The step whose time (device busy time on GPU traces, the span otherwise) is closest to the
    median: the one to show when only one step of a run is drawn."""
    table = per_step(trace)
    column = step_time_column(trace)
    median = table[column].median()
    return int(table.sort((pl.col(column) - median).abs(), "step")["step"][0])
