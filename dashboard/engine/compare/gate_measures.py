"""What the gate measures (the rules in gate_rules.py read these): each step's and
each kernel family's time with their bootstrap verdicts (the step_time and family_time rules), and
one trace's readings: device work per step, hidden copies as the review judges them, the memory
peak, the device's idle share, copies by class."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from dashboard.engine.analyses.copies import copies_in_steps
from dashboard.engine.analyses.kernels import step_device_times
from dashboard.engine.analyses.kernels import family_per_step, per_step, step_count
from dashboard.engine.compare.bootstrap import TimeVerdict, time_verdict
from dashboard.engine.model.formatting import ratio_change as _pct
from dashboard.engine.compare.diff import NOISE_NS
from dashboard.engine.compare.gate_policy import RuleResult, Rules, _result
from dashboard.engine.compare.review_tables import copy_groups
from dashboard.engine.compare.speed import step_time_column
from dashboard.engine.model.trace import Trace


def _work_per_step(trace: Trace) -> float:
    table = per_step(trace)
    return float(table["work"].median()) if table.height else 0.0


@dataclass(frozen=True)
class HiddenCopies:
    """A run's hidden copies as the review judges them (review.copy_groups): per_step (hidden
    copies a step in chains past the alarm threshold), alarm (their (kind, op chain) pairs), all
    (every hidden chain's pair), small (chain pair -> bytes a step, or None, for the chains below
    the threshold). Only hidden copies can be alarms: a requested, autograd or communication copy
    is the op's or the engine's job."""

    per_step: float
    alarm: set[tuple[str, str]]
    all: set[tuple[str, str]]
    small: dict[tuple[str, str], float | None]


def _hidden_copies(trace: Trace, rules: Rules) -> HiddenCopies:
    groups = copy_groups({"run": trace}, rules.copy_alarm_share, rules.copy_alarm_bytes).filter(pl.col("hidden"))
    alarm = groups.filter(pl.col("alarm"))
    small = groups.filter(~pl.col("alarm"))
    pairs = lambda frame: set(zip(frame["kind"].to_list(), frame["op_chain"].to_list()))  # noqa: E731
    return HiddenCopies(
        float(alarm["per_step"].sum()),
        pairs(alarm),
        pairs(groups),
        dict(zip(zip(small["kind"].to_list(), small["op_chain"].to_list()), small["bytes_per_step"].to_list())),
    )


def step_times_ns(trace: Trace) -> np.ndarray:
    """Each step's time in ns (device busy time on GPU traces, the step span otherwise)."""
    return per_step(trace)[step_time_column(trace)].cast(pl.Float64).to_numpy()


def family_times_ns(trace: Trace) -> dict[str, np.ndarray]:
    """Each kernel family's device time per step in ns (0 in a step without it), in step order."""
    steps = trace.steps.select("step")
    table = family_per_step(trace)
    out = {}
    for family in sorted(set(table["family"].drop_nulls().to_list())):
        one = steps.join(table.filter(pl.col("family") == family), on="step", how="left", maintain_order="left")
        out[family] = one["total_ns"].fill_null(0).cast(pl.Float64).to_numpy()
    return out


def _verdict_dict(v: TimeVerdict) -> dict[str, Any]:
    iv = v.interval
    clean = lambda x: None if x is None or not math.isfinite(x) else round(float(x), 6)  # noqa: E731
    return {
        "outcome": v.outcome,
        "ratio": clean(iv.ratio),
        "low": clean(iv.low),
        "high": clean(iv.high),
        "threshold": round(v.threshold, 6),
        "base_steps": iv.base_steps,
        "candidate_steps": iv.candidate_steps,
        "base_median_ns": clean(iv.base_median),
        "candidate_median_ns": clean(iv.candidate_median),
        "steps_needed": v.steps_needed,
        "why": v.why,
    }


def _time_rule(rules: Rules, base: Trace, candidate: Trace) -> RuleResult:
    what = "device busy time" if candidate.has_gpu else "step span"
    return timed_rule(
        rules,
        "step_time",
        (step_times_ns(base), step_times_ns(candidate)),
        rules.max_slowdown_pct,
        f"step time ({what})",
        "max slowdown",
        settle=True,
    )


def timed_rule(
    rules: Rules,
    rule: str,
    times: tuple[np.ndarray, np.ndarray],
    max_pct: float | None,
    what: str,
    threshold_words: str,
    settle: bool = False,
) -> RuleResult:
    """A rule over per-step times (ns, base then candidate): the bootstrap interval of the median's
    ratio (bootstrap.time_verdict), failing past 1 + max_pct/100 when max_pct is given (an
    inconclusive verdict does what --inconclusive says, a pass warns), measured only without it.
    settle: an inconclusive verdict says how many steps would settle it."""
    gated = max_pct is not None
    v = time_verdict(
        times[0],
        times[1],
        max_pct or 0.0,
        resamples=rules.resamples,
        seed=rules.seed,
        confidence=rules.confidence,
        noise_ns=NOISE_NS,
    )
    iv = v.interval
    head = (
        f"{what} {_pct(iv.ratio)}: median {iv.candidate_median / 1e3:,.1f} us against "
        f"{iv.base_median / 1e3:,.1f} us, {v.outcome}: {v.why}"
    )
    if settle and v.outcome == "inconclusive":
        head += (
            f"; about {v.steps_needed} steps of each run would settle it"
            if v.steps_needed
            else "; the ratio sits on the threshold"
        )
    failed = gated and (v.outcome == "regression" or (v.outcome == "inconclusive" and rules.inconclusive == "fail"))
    details = _verdict_dict(v)
    result = _result(
        rules,
        rule,
        failed,
        head if gated else f"{head} (not gated: no {threshold_words})",
        base=details["base_median_ns"],
        candidate=details["candidate_median_ns"],
        threshold=max_pct,
        details=details,
    )
    if gated and v.outcome == "inconclusive" and rules.inconclusive == "pass" and result.status == "pass":
        result.status = "warn" if result.level != "off" else "pass"
    return result


def _family_rule(rules: Rules, base: Trace, candidate: Trace) -> RuleResult:
    a, b = family_times_ns(base), family_times_ns(candidate)
    gated = rules.max_family_slowdown_pct is not None
    rows, bad = {}, []
    for family in sorted(set(a) & set(b)):
        v = time_verdict(
            a[family],
            b[family],
            rules.max_family_slowdown_pct or 0.0,
            resamples=rules.resamples,
            seed=rules.seed,
            confidence=rules.confidence,
            noise_ns=NOISE_NS,
        )
        rows[family] = _verdict_dict(v)
        if v.outcome == "regression" or (v.outcome == "inconclusive" and rules.inconclusive == "fail"):
            bad.append(f"{family} {_pct(v.interval.ratio)} ({v.outcome})")
    message = (
        (f"kernel families slower past +{rules.max_family_slowdown_pct:g}%: " + ", ".join(bad))
        if gated and bad
        else (f"{len(rows)} kernel families in both runs" + ("" if gated else " (not gated: no max family slowdown)"))
    )
    return _result(
        rules,
        "family_time",
        gated and bool(bad),
        message,
        threshold=rules.max_family_slowdown_pct,
        details={"families": rows},
    )


def _memory_peak(trace: Trace) -> int | None:
    """The peak allocated bytes on the trace's headline device (memory.memory_block), or None."""
    try:
        from dashboard.engine.analyses.memory import memory_block
    except ImportError:  # the memory analysis is not in this tree
        return None
    return memory_block(trace)["peak_allocated_bytes"]  # type: ignore[return-value]


def _idle_share(trace: Trace) -> float | None:
    """Median over steps of the device's idle share of the span of the step's own device work on
    its busiest device (kernels.step_device_times: busy and span from one set of events), 0..1
    (GPU traces only)."""
    if not trace.has_gpu:
        return None
    times = step_device_times(trace).filter(pl.col("span_ns") > 0)
    if times.height == 0:
        return None
    busiest = times.sort(["step", "busy_ns", "device"], descending=[False, True, False]).group_by("step").first()
    return float((1 - (busiest["busy_ns"] / busiest["span_ns"])).clip(0, 1).median())


def _copy_classes(trace: Trace) -> dict[str, dict[str, float]]:
    """Copies per step by class: {class: {'count': per step, 'bytes': per step}}."""
    table = copies_in_steps(trace)
    n = step_count(trace)
    out = {}
    for (cls,), part in table.group_by(["copy_class"], maintain_order=True):
        out[str(cls)] = {"count": part.height / n, "bytes": float(part["bytes"].fill_null(0).sum()) / n}
    return dict(sorted(out.items()))
