"""Comparison: several runs against a baseline behind one object, the multi-run facade beside
TraceAnalysis (as HTA's TraceAnalysis is over its analyzers). The dashboard's tabs, the CLI's
`compare` and `check` and the offline reports all read their tables from it, so a number is
computed by the engine once and drawn everywhere the same.

    from dashboard.engine import Comparison, load_trace
    runs = {"naive": load_trace("sample_traces/h200/naive.json.gz"),
            "sdpa": load_trace("sample_traces/h200/sdpa.json.gz")}
    cmp = Comparison(runs, "naive")
    cmp.overview      # one row per run: steps, step time, speedup, work, copies, backend check, parity
    cmp.findings      # what a team must not miss: hidden copies, fallbacks, parity, other work
    cmp.speed         # step time, speedup, tokens and cost per run
    cmp.changes       # each run against its group's baseline: kernel and op diffs, readings
    cmp.relation("naive", "sdpa")   # same work? ('same', 'cross-device' or 'different', why)

Every table is computed when first asked for and kept (functools.cached_property, or a method's
own cache when it takes an argument): constructing a Comparison computes nothing, and asking twice
returns the same object. What one trace knows (its kernels, copies, steps) is kept with the trace
itself, so two Comparisons over the same runs share it. Tables are polars DataFrames.

The module also re-exports the constants and helpers the views word their tables with (verdicts,
severities, the copy alarm's thresholds, the change lists' tables), so the views import the engine
through this one door (tests/test_facade.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import polars as pl

from dashboard.engine.analyses import backends as _backends
from dashboard.engine.analyses import graphs as _graphs
from dashboard.engine.analyses import health as _health
from dashboard.engine.analyses import host as _host
from dashboard.engine.analyses import kernels as _kernels
from dashboard.engine.analyses import memory as _memory
from dashboard.engine.analyses import phases as _phases
from dashboard.engine.analyses.backends import BACKEND_TABLE
from dashboard.engine.analyses.copies import COPY_CLASSES
from dashboard.engine.analyses.health import WAITING_CHECKS
from dashboard.engine.compare import alignment as _alignment
from dashboard.engine.compare import diff as _diff
from dashboard.engine.compare import fingerprint as _fingerprint
from dashboard.engine.compare import gate as _gate
from dashboard.engine.compare import graph_source as _graph_source
from dashboard.engine.compare import review
from dashboard.engine.compare import shown as _shown
from dashboard.engine.compare import speed as _speed
from dashboard.engine.compare.alignment import describe
from dashboard.engine.compare.diff import NOISE_NS
from dashboard.engine.compare.fingerprint import CROSS_DEVICE, DIFFERENT, SAME
from dashboard.engine.compare.review import (
    COPY_ALARM_BYTES,
    COPY_ALARM_SHARE,
    CUT_METADATA_LOST,
    MEAN_CHANGE,
    MIXED_DEVICES_WHY,
    SEVERITY_ALARM,
    SEVERITY_NOTE,
    SEVERITY_WARNING,
    TOP_EXPLAINED,
    VERDICT_FALLBACK,
    VERDICT_NOT_FORCED,
    VERDICT_UNVERIFIED,
    Change,
    diffs_by_run,
    explained_by_run,
    explained_sentence,
    is_compiled_verdict,
    kernel_change_counts,
    sequence_counts,
)
from dashboard.engine.compare.shown import GRAPH_INPUT_COPY_OP, NO_ATTENTION, backend_check_words
from dashboard.engine.compare.speed import DEFAULT_USD_PER_GPU_HOUR, GROUP_CPU, GROUP_GPU, Group
from dashboard.engine.model.constants import UNIT_KERNEL
from dashboard.engine.model.formatting import format_bytes, format_us
from dashboard.engine.model.trace import Trace
from dashboard.engine.rules.names import parse as parse_name

__all__ = [
    "BACKEND_TABLE",
    "COPY_ALARM_BYTES",
    "COPY_ALARM_SHARE",
    "COPY_CLASSES",
    "CROSS_DEVICE",
    "CUT_METADATA_LOST",
    "DEFAULT_USD_PER_GPU_HOUR",
    "DIFFERENT",
    "GRAPH_INPUT_COPY_OP",
    "GROUP_CPU",
    "GROUP_GPU",
    "MEAN_CHANGE",
    "MIXED_DEVICES_WHY",
    "NOISE_NS",
    "NO_ATTENTION",
    "SAME",
    "SEVERITY_ALARM",
    "SEVERITY_NOTE",
    "SEVERITY_WARNING",
    "TOP_EXPLAINED",
    "UNIT_KERNEL",
    "VERDICT_FALLBACK",
    "VERDICT_NOT_FORCED",
    "VERDICT_UNVERIFIED",
    "WAITING_CHECKS",
    "Change",
    "Comparison",
    "Group",
    "backend_check_words",
    "describe",
    "diffs_by_run",
    "explained_by_run",
    "explained_sentence",
    "format_bytes",
    "format_us",
    "is_compiled_verdict",
    "kernel_change_counts",
    "parse_name",
    "sequence_counts",
]

R = TypeVar("R")


class Comparison:
    """Several runs compared against a baseline; every table a view, a report or a CLI command
    needs, each computed when first asked for and kept.

    runs: label -> Trace, in display order (a run of several ranks: its slowest rank's trace).
    baseline: the label the others are measured against; GPU and CPU-only runs are compared within
        their own device group, each against its group's baseline (speed.device_groups).
    usd_per_gpu_hour, usd_per_cpu_hour: the prices of the cost column (None: no cost).
    by: kernel changes by 'base' name (template instances folded) or full 'name'.
    steps: run label -> the one step its changes compare (absent or None: every step).
    copy_alarm_share, copy_alarm_bytes: a hidden copy is an alarm from this share of the step or
        this many bytes a step.
    colors: run label -> colour (the dashboard's; the reports' charts else colour by position).
    """

    def __init__(
        self,
        runs: dict[str, Trace],
        baseline: str,
        usd_per_gpu_hour: float | None = DEFAULT_USD_PER_GPU_HOUR,
        usd_per_cpu_hour: float | None = None,
        colors: dict[str, str] | None = None,
        by: str = "base",
        steps: dict[str, int | None] | None = None,
        copy_alarm_share: float = COPY_ALARM_SHARE,
        copy_alarm_bytes: float = COPY_ALARM_BYTES,
    ) -> None:
        self.runs = dict(runs)
        self.baseline = baseline
        self.usd_per_gpu_hour = usd_per_gpu_hour
        self.usd_per_cpu_hour = usd_per_cpu_hour
        self.colors = dict(colors or {})
        self.by = by
        self.steps = dict(steps or {})
        self.copy_alarm_share = copy_alarm_share
        self.copy_alarm_bytes = copy_alarm_bytes
        self._asked: dict[tuple, Any] = {}  # the methods' tables, by their arguments

    def __repr__(self) -> str:
        return f"Comparison({list(self.runs)!r} against {self.baseline!r})"

    def _kept(self, key: tuple, compute: Callable[[], R]) -> R:
        """The table of a method with arguments `key`, computed once."""
        if key not in self._asked:
            self._asked[key] = compute()
        return self._asked[key]

    # ---------- the review: what every report and the Overview read ----------

    @functools.cached_property
    def overview(self) -> pl.DataFrame:
        """One row per run (review.overview): device, steps, step time and speedup, work, copies,
        backend and its check, parity, the cut state."""
        return review.overview(self.runs, self.baseline)

    @functools.cached_property
    def copies(self) -> pl.DataFrame:
        """The copies grouped by run, kind and op chain, with their class, share and alarm
        (review.copy_groups at the comparison's alarm thresholds)."""
        return review.copy_groups(self.runs, self.copy_alarm_share, self.copy_alarm_bytes)

    @functools.cached_property
    def findings(self) -> pl.DataFrame:
        """What a team must not miss, by severity (review.findings)."""
        return review.findings(
            self.runs,
            self.baseline,
            overview_table=self.overview,
            groups=self.copies,
            alarm_share=self.copy_alarm_share,
            alarm_bytes=self.copy_alarm_bytes,
        )

    @functools.cached_property
    def families(self) -> pl.DataFrame:
        """Work per step by kernel family, per run (review.families)."""
        return review.families(self.runs)

    @functools.cached_property
    def backends(self) -> pl.DataFrame:
        """Per run, the backend requested and detected, the verdict and its evidence (review.backend_table)."""
        return review.backend_table(self.runs)

    @functools.cached_property
    def speed(self) -> pl.DataFrame:
        """Step time, speedup, relation, tokens and cost per run, at the comparison's prices (speed.speed_table)."""
        return _speed.speed_table(self.runs, self.baseline or "", self.usd_per_gpu_hour, self.usd_per_cpu_hour)

    @functools.cached_property
    def changes(self) -> list[Change]:
        """Each run against its group's baseline over the comparison's steps and names (review.changes)."""
        return review.changes(self.runs, self.baseline, steps=self.steps, by=self.by)

    @functools.cached_property
    def groups(self) -> list[Group]:
        """The device groups (GPU, CPU-only), each with its baseline (speed.device_groups)."""
        return _speed.device_groups(self.runs, self.baseline)

    @functools.cached_property
    def efficiency(self) -> pl.DataFrame:
        """Attention against the roofline, per run (review.attention_efficiency)."""
        return review.attention_efficiency(self.runs)

    @functools.cached_property
    def roofline(self) -> pl.DataFrame:
        """The attention calls placed on the roofline (review.roofline_points)."""
        return review.roofline_points(self.runs)

    @functools.cached_property
    def roofline_left_out(self) -> pl.DataFrame:
        """The attention calls that cannot be placed, with why (review.roofline_left_out)."""
        return review.roofline_left_out(self.runs)

    def against(self, label: str) -> str:
        """The baseline `label` is measured against (its device group's)."""
        return next((g.baseline for g in self.groups if label in g.runs), self.baseline)

    def relation(self, a: str, b: str) -> tuple[str, str]:
        """How run `b` relates to run `a`: (SAME, CROSS_DEVICE or DIFFERENT, why) (fingerprint.relation)."""
        return self._kept(("relation", a, b), lambda: _fingerprint.relation(self.runs[a], self.runs[b]))

    # ---------- the tables as the tabs and the reports show them ----------

    @functools.cached_property
    def overview_labelled(self) -> pl.DataFrame:
        """The overview with its backend check in words and the device as one label (the reports')."""
        return _shown.with_device_label(self.overview)

    @functools.cached_property
    def overview_shown(self) -> pl.DataFrame:
        """The Overview tab's table: overview_labelled's columns with the memsets per step."""
        return _shown.overview_shown(self.overview, self.families)

    @functools.cached_property
    def memsets_per_step(self) -> pl.DataFrame:
        """Per run, the Memset (Device) launches per step (runs without one absent)."""
        return _shown.memsets_per_step(self.families)

    @functools.cached_property
    def backends_shown(self) -> pl.DataFrame:
        """The backend table with 'not forced' read as NO_ATTENTION where no backend ran."""
        return backend_check_words(self.backends)

    @functools.cached_property
    def graph_input_copies(self) -> pl.DataFrame:
        """Per run, the CUDA graph's static-input copies (shown.graph_input_copies)."""
        return _shown.graph_input_copies(self.copies)

    @functools.cached_property
    def small_copies(self) -> pl.DataFrame:
        """Per run, the hidden copies under the alarm's threshold, summed (shown.small_copy_sums)."""
        return _shown.small_copy_sums(self.copies)

    @functools.cached_property
    def every_copy(self) -> pl.DataFrame:
        """Every copy of every run, one row each (shown.every_copy)."""
        return _shown.every_copy(self.runs)

    @functools.cached_property
    def kernels(self) -> pl.DataFrame:
        """Every kernel (leaf op on a CPU-only trace) of every run (review.kernels_by_run)."""
        return review.kernels_by_run(self.runs)

    @functools.cached_property
    def health(self) -> dict[str, list[dict[str, Any]]]:
        """Per run, its health findings (health.health)."""
        return {label: _health.health(trace) for label, trace in self.runs.items()}

    @functools.cached_property
    def phases(self) -> pl.DataFrame:
        """The serving runs' prefill, decode and mixed steps (phases.phase_table)."""
        return _phases.phase_table(self.runs)

    @functools.cached_property
    def host(self) -> pl.DataFrame:
        """Each run's host side: an attention call's host time and launches, who waits (host.host_table)."""
        return _host.host_table(self.runs)

    @functools.cached_property
    def attention_launches(self) -> pl.DataFrame:
        """Each attention kernel with the op and call that launched it (backends.attention_launches)."""
        return _backends.attention_launches(self.runs)

    @functools.cached_property
    def memory_recorded(self) -> list[str]:
        """The runs recorded with profile_memory=True (their traces hold memory events)."""
        return [label for label, trace in self.runs.items() if _memory.memory_peak(trace).height]

    @functools.cached_property
    def memory(self) -> pl.DataFrame:
        """Peak memory allocated per step, of the runs in memory_recorded (memory.memory_by_run)."""
        return _memory.memory_by_run({label: self.runs[label] for label in self.memory_recorded})

    @functools.cached_property
    def graphs(self) -> dict[str, dict[str, Any]]:
        """Per run, its CUDA-graph replays (graphs.graph_summary)."""
        return {label: _graphs.graph_summary(trace) for label, trace in self.runs.items()}

    def device_group(self, label: str) -> str:
        """GROUP_GPU or GROUP_CPU for one run (speed.device_group)."""
        return _speed.device_group(self.runs[label])

    def speed_at(self, usd_per_gpu_hour: float | None, usd_per_cpu_hour: float | None) -> pl.DataFrame:
        """The speed table at other prices (the Speedups tab's inputs); `speed` at the comparison's own."""
        if (usd_per_gpu_hour, usd_per_cpu_hour) == (self.usd_per_gpu_hour, self.usd_per_cpu_hour):
            return self.speed
        return self._kept(
            ("speed", usd_per_gpu_hour, usd_per_cpu_hour),
            lambda: _speed.speed_table(self.runs, self.baseline or "", usd_per_gpu_hour, usd_per_cpu_hour),
        )

    def speed_with_attention(self, usd_per_gpu_hour: float | None, usd_per_cpu_hour: float | None) -> pl.DataFrame:
        """speed_at's table with each run's attention TFLOP/s, % of roofline, measure and why none."""
        return self._kept(
            ("speed_attention", usd_per_gpu_hour, usd_per_cpu_hour),
            lambda: _shown.with_attention(self.speed_at(usd_per_gpu_hour, usd_per_cpu_hour), self.efficiency),
        )

    def changes_at(self, steps: dict[str, int | None] | None, by: str) -> list[Change]:
        """The changes over other steps or names (the Kernels tab's choices); `changes` at the comparison's own."""
        steps = dict(steps or {})
        chosen = {label: step for label, step in steps.items() if step is not None}  # None: every step, as absent
        if (chosen, by) == ({k: v for k, v in self.steps.items() if v is not None}, self.by):
            return self.changes
        key = ("changes", by, tuple(sorted(chosen.items())))
        return self._kept(key, lambda: review.changes(self.runs, self.baseline, steps=steps, by=by))

    # ---------- one run, and pairs of runs (the Timeline, the gate) ----------

    def steps_of(self, label: str) -> pl.DataFrame:
        """One run's steps: work, busy and span times (kernels.per_step)."""
        return _kernels.per_step(self.runs[label])

    def work_unit(self, label: str) -> str:
        """What one run's work is counted in: UNIT_KERNEL, or the leaf cpu_op (kernels.work_unit)."""
        return _kernels.work_unit(self.runs[label])

    def representative_step(self, label: str) -> int:
        """The step of one run whose time is its median's (speed.representative_step)."""
        return _speed.representative_step(self.runs[label])

    def step_pairs(self, a: str, b: str) -> list[tuple[int, int]]:
        """Which step of `b` is compared with which of `a` (alignment.step_pairs)."""
        return self._kept(("step_pairs", a, b), lambda: _alignment.step_pairs(self.runs[a], self.runs[b]))

    def op_changes(self, a: str, b: str, pairs: list[tuple[int, int]] | None = None) -> list:
        """What changed op by op from `a` to `b`, over every matched step or `pairs` (alignment.op_changes)."""
        key = ("op_changes", a, b, None if pairs is None else tuple(pairs))
        return self._kept(key, lambda: _alignment.op_changes(self.runs[a], self.runs[b], pairs))

    def gate(self, base: str, candidate: str, rules: _gate.Rules | None = None) -> list[_gate.RuleResult]:
        """`attnscope check`'s rules over run `candidate` against run `base`, each rule's result in
        the rules' order (gate.evaluate; `rules`: the default levels when None)."""
        return _gate.evaluate(self.runs[base], self.runs[candidate], _gate.Rules() if rules is None else rules)

    def timeline(self, label: str, step: int) -> pl.DataFrame:
        """One step of one run, every event on its row (diff.timeline)."""
        return _diff.timeline(self.runs[label], step)

    def sequence_diff(self, a: str, step_a: int, b: str, step_b: int) -> pl.DataFrame:
        """Two steps' work in launch order, aligned like a text diff (diff.sequence_diff)."""
        return _diff.sequence_diff(self.runs[a], step_a, self.runs[b], step_b)

    def family_time_diff(self, a: str, step_a: int, b: str, step_b: int) -> pl.DataFrame:
        """Two steps' time by kernel family (diff.family_time_diff)."""
        return _diff.family_time_diff(self.runs[a], step_a, self.runs[b], step_b)

    def compiled_twin(self, label: str) -> str | None:
        """The compiled run whose ops a CUDA-graph run's replays are attributed to (graph_source.compiled_twin)."""
        return _graph_source.compiled_twin(self.runs[label], self.runs)

    def graph_attribution(self, label: str, twin: str) -> dict[str, Any]:
        """A CUDA-graph run's replayed kernels by the op of `twin` that ran them (graph_source.graph_attribution)."""
        return self._kept(
            ("graph_attribution", label, twin),
            lambda: _graph_source.graph_attribution(self.runs[label], self.runs[twin]),
        )
