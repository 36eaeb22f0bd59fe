"""TraceAnalysis: one trace's analyses behind one object, for a notebook or a script (as HTA's
`TraceAnalysis` is for its analyzers).

    from dashboard.engine import TraceAnalysis
    ta = TraceAnalysis("sample_traces/h200/naive.json.gz")
    ta.steps()        # one row per ProfilerStep: work, busy and span times
    ta.kernels()      # one row per kernel: family, count, per step, time, share
    ta.copies()       # every copy with its op chain and class; hidden=True: the alarms' candidates
    ta.backends()     # which attention backend ran, with the names that prove it
    ta.efficiency()   # attention against the roofline
    ta.health()       # the trace's health findings
    ta.summary()      # everything `attnscope summary --json` prints

Each method calls the engine function it names (the same one the dashboard, the CLI and the
reports call: the numbers agree everywhere) and computes nothing of its own. The trace keeps what
each analysis computed, so asking twice costs nothing. Tables are polars DataFrames (`.to_pandas()`
for pandas); times are in ns where a column ends in `_ns`, µs in `_us`, bytes in `bytes`.

The functions themselves are imported from their modules (dashboard.engine.analyses.kernels, .copies,
.backends, .efficiency, .speed, .health, .summary, .memory); the package exports this class, and
imports it (and through it the analyses) only when first asked for, so `import dashboard.engine`
stays cheap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the analyses are imported when a method first needs one
    import polars as pl

    from dashboard.engine.analyses.backends import Backends
    from dashboard.engine.model.trace import Trace
    from dashboard.engine.rules.peaks import DevicePeak
    from dashboard.engine.compare.speed import StepTime


class TraceAnalysis:
    """One trace and its analyses.

    trace: a path to a torch.profiler trace (.json or .json.gz, any file name), its bytes, or a
        Trace already loaded (dashboard.engine.load_trace).
    name: the label a trace given as bytes is called by in messages (default: the file name).
    max_json_bytes: the most JSON the file may hold, inflated (default $ATTNSCOPE_MAX_JSON_BYTES,
        else 4 GiB); a larger one raises TraceError, as does a file that is not a trace.
    """

    def __init__(
        self, trace: str | os.PathLike | bytes | Trace, name: str | None = None, max_json_bytes: int | None = None
    ) -> None:
        from dashboard.engine.model.trace import Trace

        if isinstance(trace, Trace):
            self.trace = trace
        else:
            from dashboard.engine.load import load_trace

            self.trace = load_trace(trace, name=name, max_json_bytes=max_json_bytes)

    def __repr__(self) -> str:
        return (
            f"TraceAnalysis({self.trace.source!r}: {self.trace.steps.height} steps, {self.trace.events.height} events)"
        )

    @property
    def has_gpu(self) -> bool:
        """True when the trace holds device work (kernels, GPU memcpy or memset); a CPU-only
        trace's unit of work is the leaf cpu_op instead of the kernel."""
        return self.trace.has_gpu

    @property
    def collector(self) -> dict[str, Any]:
        """What the collectors wrote about the run (variant, backend requested, shape, dtype,
        parity, ...), or {} for a trace recorded elsewhere."""
        return self.trace.collector

    def steps(self) -> pl.DataFrame:
        """One row per ProfilerStep (one implicit step for a trace without them): name, step,
        kernel, gpu_memcpy, gpu_memset, work (units of device work), busy_ns (the union of device
        work on the busiest device; of all ops on a CPU-only trace), dur_ns (the step's CPU span).
        kernels.per_step."""
        from dashboard.engine.analyses.kernels import per_step

        return per_step(self.trace)

    def step_time(self, which: Literal["auto", "busy", "span"] = "auto") -> StepTime:
        """Median, p10 and p90 of the time per step in µs, as the Overview and Speedups tabs give
        it. which: 'busy' (device busy time), 'span' (the CPU ProfilerStep span), or 'auto' (busy on
        a GPU trace, span on a CPU-only one). speed.step_time."""
        from dashboard.engine.compare.speed import step_time

        return step_time(self.trace, which)

    def kernels(self, per: Literal["kernel", "family"] = "kernel") -> pl.DataFrame:
        """Device work over the profiled steps (leaf ops on a CPU-only trace).
        per='kernel': one row per name, largest total first: name, family, count, per_step,
        total_ns, mean_ns, share (of all device work time, 0..1); kernels.kernel_table.
        per='family': one row per step and family: step, family, count, total_ns;
        kernels.family_per_step."""
        from dashboard.engine.analyses import kernels

        if per == "kernel":
            return kernels.kernel_table(self.trace)
        if per == "family":
            return kernels.family_per_step(self.trace)
        raise ValueError(f"per must be 'kernel' or 'family', not {per!r}")

    def copies(self, hidden: bool | None = None, in_steps: bool = False, grouped: bool = False) -> pl.DataFrame:
        """Every copy (GPU memcpy and copy kernels; tensor aten::copy_ on a CPU-only trace): id,
        step, kind, name, ts_ns, dur_ns, bytes, gbps, device, stream, op_chain (outermost op
        first), origin, copy_class, hidden. copies.copies.
        hidden: True keeps the hidden copies only (made inside an op that did not ask for one),
            False the others, None (default) all.
        in_steps: keep only the copies inside a profiled step (the ones per-step figures count).
        grouped: one row per (kind, op chain, class) instead, hidden first: kind, op_chain,
            copy_class, hidden, count, bytes, dur_ns (copies.copy_summary)."""
        from dashboard.engine.analyses import copies

        table = copies.copies_in_steps(self.trace) if in_steps else copies.copies(self.trace)
        if hidden is not None:
            table = table.filter(table["hidden"] == hidden)
        return copies.copy_summary(table) if grouped else table

    def backends(self) -> Backends:
        """Which attention implementations ran: .backends (names, e.g. ['cudnn']), .evidence
        (backend -> the op and kernel names that prove it), .launches (each attention kernel with
        the op and runtime call that launched it). backends.detect_backends."""
        from dashboard.engine.analyses.backends import detect_backends

        return detect_backends(self.trace)

    def fallback(self) -> bool:
        """True when the collectors forced a backend (the trace's metadata says which) and another
        one ran. backends.fallback."""
        from dashboard.engine.analyses.backends import fallback, requested_backend

        return fallback(requested_backend(self.trace), self.backends().backends)

    def efficiency(
        self, per: Literal["call", "step"] = "call", peak: DevicePeak | Mapping[str, float] | None = None
    ) -> pl.DataFrame:
        """Attention against the device's roofline.
        per='call': one row per (op, kernel, shape, device) group of attention calls: count,
            mean_us, flops, bytes, tflops, tbps, intensity, peak_tflops, roofline_tflops,
            pct_of_roofline (0..100), bound, reason (why a number is missing); efficiency.efficiency.
        per='step': the whole variant per step on a collectors' trace (its shape over the step's
            device time; no rows on other traces); efficiency.step_efficiency.
        peak: the device's peaks when the table lacks it or to replace its row, e.g.
            {"bf16": 989.5, "bandwidth_tbps": 4.8} (dense TFLOP/s per dtype, TB/s)."""
        from dashboard.engine.analyses import efficiency

        if per == "call":
            return efficiency.efficiency(self.trace, peak)
        if per == "step":
            return efficiency.step_efficiency(self.trace, peak)
        raise ValueError(f"per must be 'call' or 'step', not {per!r}")

    def health(self) -> list[dict[str, Any]]:
        """The trace's health findings, [{"check", "count", "example"}, ...] in the checks' order;
        [] for a healthy trace. health.health."""
        from dashboard.engine.analyses.health import health

        return health(self.trace)

    def memory(self) -> pl.DataFrame:
        """Peak memory allocated per step and device (a trace recorded with profile_memory=True;
        no rows otherwise). memory.memory_peaks."""
        from dashboard.engine.analyses.memory import memory_peaks

        return memory_peaks(self.trace)

    def summary(self) -> dict[str, Any]:
        """Everything `attnscope summary --json` prints for the trace, as plain data (do not change
        the dict: it is kept with the trace). summary.summarize."""
        from dashboard.engine.analyses.summary import summarize

        return summarize(self.trace)
