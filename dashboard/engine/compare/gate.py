"""The regression gate behind `attnscope check`: does a candidate run hold against its baseline?

Every rule is named (RULES), has a level ('fail', 'warn' or 'off'; DEFAULT_LEVELS) and gives one
RuleResult: its measurement on both runs, a status ('pass', 'fail', 'warn', 'skip') and one
sentence. The defaults fail on the three regressions this field fears (a new copy, SDPA on the
unfused math path, more kernels per step), on a backend fallback and a recorded parity failure;
time fails only past --max-slowdown, judged on a bootstrap interval over all steps (bootstrap.py);
the other regressions (memory, backend change, efficiency, idle share, new kernel families,
growing copy classes, new health findings) warn unless a level says fail.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import polars as pl

from dashboard.engine.analyses.backends import detect_backends
from dashboard.engine.compare.bootstrap import TimeVerdict, time_verdict
from dashboard.engine.analyses.copies import copies_in_steps
from dashboard.engine.compare.diff import NOISE_NS
from dashboard.engine.analyses.efficiency import efficiency_block
from dashboard.engine.model.constants import COPY_ALARM_BYTES, COPY_ALARM_SHARE, WAITING_CHECKS
from dashboard.engine.compare.fingerprint import CROSS_DEVICE, relation
from dashboard.engine.analyses.health import health, step_device_times
from dashboard.engine.analyses.kernels import family_per_step, per_step, step_count, work_unit
from dashboard.engine.model.trace import Trace
from dashboard.engine.compare.review import backend_check, copy_groups, format_bytes, parity
from dashboard.engine.compare.speed import step_time, step_time_column

LEVELS = ("fail", "warn", "off")
STATUSES = ("pass", "fail", "warn", "skip")
DEFAULT_LEVELS: dict[str, str] = {
    "step_time": "fail",  # fails only with a max_slowdown_pct
    "family_time": "fail",  # fails only with a max_family_slowdown_pct
    "kernel_count": "fail",
    "hidden_copies": "fail",
    "math_fallback": "fail",
    "backend_fallback": "fail",
    "required_backend": "fail",
    "speedup": "fail",
    "parity": "fail",
    "attention_efficiency": "fail",
    "backend_change": "warn",
    "efficiency_drop": "warn",
    "idle_share": "warn",
    "new_families": "warn",
    "copy_growth": "warn",
    "memory_peak": "warn",
    "health": "warn",
}
RULES: tuple[str, ...] = tuple(DEFAULT_LEVELS)
INCONCLUSIVE = ("pass", "fail")


@dataclass(frozen=True)
class Rules:
    """max_kernel_increase_pct: allowed growth of device work per step (median), in percent.
    no_new_copies: fail on more hidden copies per step, or a hidden copy from an op chain the
        baseline lacks (copies the op asked for, autograd's and communication's never fail it).
    require_backend: an attention backend the candidate must show (e.g. 'flash').
    forbid_math: fail when the candidate runs SDPA's math path and the baseline does not.
    min_speedup: baseline median step time / candidate's must be at least this.
    require_parity: the candidate must carry a passing parity record (a recorded failure always fails).
    min_attention_efficiency: the candidate's attention must reach this % of the device's roofline
        (efficiency_block's pct_of_roofline); a trace where it cannot be measured fails, with why.
    max_slowdown_pct: the step time fails when the bootstrap interval of candidate / base median
        lies wholly past 1 + this/100 (None: measured, never fails).
    max_family_slowdown_pct: the same for each kernel family's time per step (None: measured only).
    inconclusive: 'pass' or 'fail': what an inconclusive time verdict does under a threshold.
    confidence, resamples, seed: the bootstrap's (seeded: the same traces give the same verdict).
    max_memory_increase_pct: allowed growth of the peak allocated memory, percent.
    max_efficiency_drop: allowed drop of attention's % of the roofline, in percentage points.
    max_idle_increase: allowed growth of the device's idle share of a step, percentage points.
    copy_alarm_share, copy_alarm_bytes: a hidden copy chain fails hidden_copies only past these (the
        review's alarm: review.copy_groups); a new cheaper one is named in the message.
    levels: rule name -> 'fail' | 'warn' | 'off', over DEFAULT_LEVELS."""

    max_kernel_increase_pct: float = 0.0
    no_new_copies: bool = True
    require_backend: str | None = None
    forbid_math: bool = True
    min_speedup: float | None = None
    require_parity: bool = False
    min_attention_efficiency: float | None = None
    max_slowdown_pct: float | None = None
    max_family_slowdown_pct: float | None = None
    inconclusive: str = "pass"
    confidence: float = 0.95
    resamples: int = 2_000
    seed: int = 20_240_601
    max_memory_increase_pct: float = 10.0
    max_efficiency_drop: float = 5.0
    max_idle_increase: float = 10.0
    copy_alarm_share: float = COPY_ALARM_SHARE
    copy_alarm_bytes: float = COPY_ALARM_BYTES
    levels: dict[str, str] = field(default_factory=dict)

    def level(self, rule: str) -> str:
        if rule == "hidden_copies" and not self.no_new_copies:
            return "off"
        if rule == "math_fallback" and not self.forbid_math:
            return "off"
        return self.levels.get(rule, DEFAULT_LEVELS[rule])


@dataclass
class RuleResult:
    """One rule's outcome: rule (a RULES name), level, status ('pass', 'fail', 'warn', 'skip'),
    message (one sentence), base / candidate (the measurement on each run, JSON-ready), threshold,
    and details (rule-specific: the time verdict's interval, the families' verdicts, ...)."""

    rule: str
    level: str
    status: str
    message: str
    base: Any = None
    candidate: Any = None
    threshold: Any = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "level": self.level,
            "status": self.status,
            "message": self.message,
            "base": self.base,
            "candidate": self.candidate,
            "threshold": self.threshold,
            "details": self.details,
        }


class IncomparableError(ValueError):
    """The two traces cannot be compared (e.g. a CPU-only trace against a GPU trace)."""


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


def _result(rules: Rules, rule: str, failed: bool, message: str, **kw: Any) -> RuleResult:
    level = rules.level(rule)
    status = ("fail" if level == "fail" else "warn") if failed else "pass"
    return RuleResult(rule, level, status, message, **kw)


def _skip(rules: Rules, rule: str, why: str, **kw: Any) -> RuleResult:
    return RuleResult(rule, rules.level(rule), "skip", why, **kw)


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
    gated = rules.max_slowdown_pct is not None
    v = time_verdict(
        step_times_ns(base),
        step_times_ns(candidate),
        rules.max_slowdown_pct or 0.0,
        resamples=rules.resamples,
        seed=rules.seed,
        confidence=rules.confidence,
        noise_ns=NOISE_NS,
    )
    iv = v.interval
    what = "device busy time" if candidate.has_gpu else "step span"
    head = (
        f"step time ({what}) {_pct(iv.ratio)}: median {iv.candidate_median / 1e3:,.1f} us against "
        f"{iv.base_median / 1e3:,.1f} us, {v.outcome}: {v.why}"
    )
    if v.outcome == "inconclusive":
        head += (
            f"; about {v.steps_needed} steps of each run would settle it"
            if v.steps_needed
            else "; the ratio sits on the threshold"
        )
    failed = gated and (v.outcome == "regression" or (v.outcome == "inconclusive" and rules.inconclusive == "fail"))
    result = _result(
        rules,
        "step_time",
        failed,
        head if gated else head + " (not gated: no max slowdown)",
        base=_verdict_dict(v)["base_median_ns"],
        candidate=_verdict_dict(v)["candidate_median_ns"],
        threshold=rules.max_slowdown_pct,
        details=_verdict_dict(v),
    )
    if gated and v.outcome == "inconclusive" and rules.inconclusive == "pass" and result.status == "pass":
        result.status = "warn" if result.level != "off" else "pass"
    return result


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%" if math.isfinite(ratio) else "(no ratio)"


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
    its busiest device (health.step_device_times: busy and span from one set of events), 0..1
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


@dataclass
class _Pair:
    """What the rules read of one (base, candidate) pair, each reading made once: the relation's
    kind (fingerprint.relation), the attention backends of both, the candidate's efficiency."""

    base: Trace
    candidate: Trace
    rules: Rules
    kind: str

    @functools.cached_property
    def base_backends(self) -> list[str]:
        return detect_backends(self.base).backends

    @functools.cached_property
    def detected(self) -> list[str]:
        return detect_backends(self.candidate).backends

    @functools.cached_property
    def cand_block(self) -> dict[str, Any]:
        return efficiency_block(self.candidate)


def _rule_step_time(p: _Pair) -> RuleResult:
    return _time_rule(p.rules, p.base, p.candidate)


def _rule_family_time(p: _Pair) -> RuleResult:
    return _family_rule(p.rules, p.base, p.candidate)


def _rule_kernel_count(p: _Pair) -> RuleResult:
    rules, base, candidate = p.rules, p.base, p.candidate
    unit = "kernels, memcpys and memsets" if work_unit(candidate) == "kernel" else "leaf cpu_ops"
    base_work, cand_work = _work_per_step(base), _work_per_step(candidate)
    allowed = base_work * (1 + rules.max_kernel_increase_pct / 100.0)
    growth = (cand_work / base_work - 1) * 100 if base_work else (0.0 if not cand_work else float("inf"))
    failed = cand_work > allowed + 1e-9
    return _result(
        rules,
        "kernel_count",
        failed,
        f"more device work: {cand_work:g} {unit} per step against {base_work:g} in the baseline "
        f"(+{growth:.1f}%, allowed +{rules.max_kernel_increase_pct:g}%)"
        if failed
        else f"{cand_work:g} {unit} per step against {base_work:g} in the baseline",
        base=base_work,
        candidate=cand_work,
        threshold=rules.max_kernel_increase_pct,
    )


def _rule_hidden_copies(p: _Pair) -> RuleResult:
    rules, base, candidate = p.rules, p.base, p.candidate
    base_copies, cand_copies = _hidden_copies(base, rules), _hidden_copies(candidate, rules)
    base_rate, cand_rate = base_copies.per_step, cand_copies.per_step
    new = sorted(cand_copies.alarm - base_copies.all)
    small = sorted(set(cand_copies.small) - base_copies.all)
    threshold = f"{rules.copy_alarm_share:.0%} of the step or {format_bytes(rules.copy_alarm_bytes)} a step"
    if new:
        shown = "; ".join(f"{kind} from {chain}" for kind, chain in new[:3])
        more = f" and {len(new) - 3} more" if len(new) > 3 else ""
        message, failed = f"new copies: {shown}{more}", True
    elif cand_rate > base_rate + 1e-9:
        message, failed = (
            f"more copies: {cand_rate:g} hidden per step against {base_rate:g} in the baseline (chains past "
            f"the alarm's {threshold})",
            True,
        )
    else:
        message, failed = (
            f"{cand_rate:g} hidden copies per step past the alarm's {threshold}, against {base_rate:g} in the baseline",
            False,
        )
    if small and not failed:
        size = cand_copies.small[small[0]]
        message += (
            f"; new below the alarm: {small[0][0]} from {small[0][1]}"
            + (f" ({format_bytes(size)} a step)" if size else "")
            + (f" and {len(small) - 1} more" if len(small) > 1 else "")
        )
    return _result(
        rules,
        "hidden_copies",
        failed,
        message,
        base=base_rate,
        candidate=cand_rate,
        details={
            "new_chains": [f"{k} from {c}" for k, c in new],
            "new_small_chains": [f"{k} from {c}" for k, c in small],
        },
    )


def _rule_math_fallback(p: _Pair) -> RuleResult:
    rules = p.rules
    base_backends = p.base_backends
    detected = p.detected
    failed = "math" in detected and "math" not in base_backends
    return _result(
        rules,
        "math_fallback",
        failed,
        "SDPA runs on the unfused math path in the candidate (not in the baseline)"
        if failed
        else "SDPA's math path is not new in the candidate",
        base=base_backends,
        candidate=detected,
    )


def _rule_backend_fallback(p: _Pair) -> RuleResult:
    rules, candidate = p.rules, p.candidate
    verdict = backend_check(candidate)
    failed = verdict["verdict"] == "FALLBACK"
    return _result(
        rules,
        "backend_fallback",
        failed,
        f"backend fallback: '{verdict['requested']}' was requested, the trace shows {', '.join(verdict['detected'])}"
        if failed
        else f"backend: {verdict['verdict']}",
        candidate=verdict["verdict"],
    )


def _rule_required_backend(p: _Pair) -> RuleResult:
    rules = p.rules
    detected = p.detected
    if not rules.require_backend:
        return _skip(rules, "required_backend", "no backend required")
    else:
        failed = rules.require_backend not in detected
        return _result(
            rules,
            "required_backend",
            failed,
            f"attention backend '{rules.require_backend}' required, the candidate shows {', '.join(detected) or 'none'}"
            if failed
            else f"attention backend '{rules.require_backend}' present",
            candidate=detected,
            threshold=rules.require_backend,
        )


def _rule_speedup(p: _Pair) -> RuleResult:
    rules, base, candidate = p.rules, p.base, p.candidate
    if rules.min_speedup is None:
        return _skip(rules, "speedup", "no minimum speedup")
    else:
        b, c = step_time(base).median_us, step_time(candidate).median_us
        speedup = b / c if c > 0 else float("nan")
        failed = not speedup >= rules.min_speedup
        return _result(
            rules,
            "speedup",
            failed,
            f"speedup {speedup:.3f}x is below the required {rules.min_speedup:g}x ({c:.1f} us against {b:.1f} us per step)"
            if failed
            else f"speedup {speedup:.3f}x (required {rules.min_speedup:g}x)",
            base=b,
            candidate=c,
            threshold=rules.min_speedup,
            details={"speedup": speedup if math.isfinite(speedup) else None},
        )


def _rule_attention_efficiency(p: _Pair) -> RuleResult:
    rules = p.rules
    cand_block = p.cand_block
    if rules.min_attention_efficiency is None:
        return _skip(rules, "attention_efficiency", "no minimum attention efficiency")
    else:
        block = cand_block
        pct = block["pct_of_roofline"]
        if pct is None:
            why = "; ".join(block["reasons"][:2]) or block["device"]["reason"] or "no attention op with shapes"
            message, failed = (
                f"attention efficiency required, but it cannot be measured on the candidate: {why}",
                True,
            )
        elif pct < rules.min_attention_efficiency:
            message, failed = (
                (
                    f"attention reaches {pct:.1f}% of the roofline ({block['tflops']:.1f} TFLOP/s), "
                    f"below the required {rules.min_attention_efficiency:g}%"
                ),
                True,
            )
        else:
            message, failed = f"attention reaches {pct:.1f}% of the roofline", False
        return _result(
            rules, "attention_efficiency", failed, message, candidate=pct, threshold=rules.min_attention_efficiency
        )


def _rule_parity(p: _Pair) -> RuleResult:
    rules, candidate = p.rules, p.candidate
    record = parity(candidate)
    if record is not None and record.get("passed") is False:
        message, failed = f"parity failure: max abs error {record.get('max_abs')} against the fp32 reference", True
    elif rules.require_parity and record is None:
        message, failed = (
            "parity required, but the candidate trace carries no parity record (not written by the collectors)",
            True,
        )
    else:
        message, failed = (
            ("parity record passes" if record is not None else "no parity record (not required)"),
            False,
        )
    return _result(rules, "parity", failed, message, candidate=None if record is None else record.get("passed"))


def _rule_backend_change(p: _Pair) -> RuleResult:
    rules = p.rules
    kind = p.kind
    base_backends = p.base_backends
    detected = p.detected
    gone, new = sorted(set(base_backends) - set(detected)), sorted(set(detected) - set(base_backends))
    changed = bool(gone or new)
    said = f"{', '.join(base_backends) or 'none'} -> {', '.join(detected) or 'none'}"
    if changed and kind == CROSS_DEVICE:  # another device's SDPA dispatch: a fact of the device, not a change of code
        return _result(
            rules,
            "backend_change",
            False,
            f"attention backends on the two devices: {said} (another device: described, not warned)",
            base=base_backends,
            candidate=detected,
        )
    else:
        return _result(
            rules,
            "backend_change",
            changed,
            f"attention backend changed: {said}"
            if changed
            else f"attention backend unchanged ({', '.join(detected) or 'none'})",
            base=base_backends,
            candidate=detected,
        )


def _rule_efficiency_drop(p: _Pair) -> RuleResult:
    rules, base = p.rules, p.base
    kind = p.kind
    cand_block = p.cand_block
    b_pct, c_pct = efficiency_block(base)["pct_of_roofline"], cand_block["pct_of_roofline"]
    if b_pct is None or c_pct is None:
        return _skip(
            rules,
            "efficiency_drop",
            "attention efficiency not measurable on "
            + (
                "either run"
                if b_pct is None and c_pct is None
                else "the baseline"
                if b_pct is None
                else "the candidate"
            ),
            base=b_pct,
            candidate=c_pct,
        )
    elif kind == CROSS_DEVICE:
        return _skip(
            rules,
            "efficiency_drop",
            f"attention efficiency {c_pct:.1f}% of the candidate device's roofline against {b_pct:.1f}% of the "
            "baseline's: another device, another roofline (described, not judged)",
            base=b_pct,
            candidate=c_pct,
        )
    else:
        failed = b_pct - c_pct > rules.max_efficiency_drop
        return _result(
            rules,
            "efficiency_drop",
            failed,
            f"attention efficiency {c_pct:.1f}% of the roofline against {b_pct:.1f}% ({c_pct - b_pct:+.1f} points, "
            f"allowed -{rules.max_efficiency_drop:g})",
            base=b_pct,
            candidate=c_pct,
            threshold=rules.max_efficiency_drop,
        )


def _rule_idle_share(p: _Pair) -> RuleResult:
    rules, base, candidate = p.rules, p.base, p.candidate
    b_idle, c_idle = _idle_share(base), _idle_share(candidate)
    if b_idle is None or c_idle is None:
        return _skip(rules, "idle_share", "CPU-only traces: no device idle time")
    else:
        grow = (c_idle - b_idle) * 100
        return _result(
            rules,
            "idle_share",
            grow > rules.max_idle_increase,
            f"device idle {c_idle:.0%} of the span of a step's work (median) against {b_idle:.0%} ({grow:+.1f} points, allowed "
            f"+{rules.max_idle_increase:g})",
            base=b_idle,
            candidate=c_idle,
            threshold=rules.max_idle_increase,
        )


def _rule_new_families(p: _Pair) -> RuleResult:
    rules, base, candidate = p.rules, p.base, p.candidate
    a_fam, b_fam = set(family_times_ns(base)), set(family_times_ns(candidate))
    new = sorted(b_fam - a_fam)
    return _result(
        rules,
        "new_families",
        bool(new),
        f"new kernel families: {', '.join(new)}" if new else "no new kernel family",
        base=sorted(a_fam),
        candidate=sorted(b_fam),
        details={"new": new, "gone": sorted(a_fam - b_fam)},
    )


def _rule_copy_growth(p: _Pair) -> RuleResult:
    rules, base, candidate = p.rules, p.base, p.candidate
    a_cls, b_cls = _copy_classes(base), _copy_classes(candidate)
    grown = [
        cls
        for cls, v in b_cls.items()
        if v["count"] > a_cls.get(cls, {}).get("count", 0) + 1e-9
        or v["bytes"] > a_cls.get(cls, {}).get("bytes", 0) + 0.5
    ]
    return _result(
        rules,
        "copy_growth",
        bool(grown),
        (
            "copy classes grew: "
            + ", ".join(
                f"{cls} {a_cls.get(cls, {}).get('count', 0):g} -> {b_cls[cls]['count']:g} per step"
                if b_cls[cls]["count"] > a_cls.get(cls, {}).get("count", 0) + 1e-9
                else f"{cls} {format_bytes(a_cls.get(cls, {}).get('bytes', 0))} -> {format_bytes(b_cls[cls]['bytes'])} "
                f"per step ({b_cls[cls]['count']:g} copies a step in both)"
                for cls in grown
            )
        )
        if grown
        else "no copy class grew",
        base=a_cls,
        candidate=b_cls,
    )


def _rule_memory_peak(p: _Pair) -> RuleResult:
    rules, base, candidate = p.rules, p.base, p.candidate
    b_mem, c_mem = _memory_peak(base), _memory_peak(candidate)
    if b_mem is None or c_mem is None:
        return _skip(
            rules,
            "memory_peak",
            "peak memory not recorded in "
            + (
                "either run"
                if b_mem is None and c_mem is None
                else "the baseline"
                if b_mem is None
                else "the candidate"
            )
            + " (profile_memory=False)",
            base=b_mem,
            candidate=c_mem,
        )
    else:
        growth = (c_mem / b_mem - 1) * 100 if b_mem else (0.0 if not c_mem else float("inf"))
        return _result(
            rules,
            "memory_peak",
            growth > rules.max_memory_increase_pct,
            f"peak memory {c_mem / 1e6:,.1f} MB against {b_mem / 1e6:,.1f} MB ({growth:+.1f}%, allowed "
            f"+{rules.max_memory_increase_pct:g}%)",
            base=b_mem,
            candidate=c_mem,
            threshold=rules.max_memory_increase_pct,
        )


def _rule_health(p: _Pair) -> RuleResult:
    rules, base, candidate = p.rules, p.base, p.candidate
    a_h = {f["check"]: f for f in health(base) if f["check"] not in WAITING_CHECKS}  # facts of the run are no faults
    b_h = {f["check"]: f for f in health(candidate) if f["check"] not in WAITING_CHECKS}
    new = [b_h[c] for c in b_h if c not in a_h]
    return _result(
        rules,
        "health",
        bool(new),
        ("new health findings: " + "; ".join(f"{f['check']} {f['count']:,} ({f['example']})" for f in new))
        if new
        else "no new health finding",
        base=sorted(a_h),
        candidate=sorted(b_h),
    )


_RULE_CHECKS: dict[str, Callable[[_Pair], RuleResult]] = {rule: globals()[f"_rule_{rule}"] for rule in RULES}
"""Each rule's function, by name: a rule is one small function of the pair."""


def evaluate(base: Trace, candidate: Trace, rules: Rules = Rules()) -> list[RuleResult]:
    """Every rule's result, in RULES order (a rule whose level is 'off' is a 'skip'). Across
    devices (fingerprint.relation: CROSS_DEVICE) a changed attention backend and the roofline's
    share are described, not judged: the device chose them, not the code. Whether the pair is the
    same work at all is the caller's question (`attnscope check` exits 2 on a different workload
    or device unless told otherwise)."""
    if work_unit(base) != work_unit(candidate):
        raise IncomparableError(
            f"the baseline, {base.source}, counts {work_unit(base)}s and the candidate, {candidate.source}, counts "
            f"{work_unit(candidate)}s: "
            "compare a GPU trace with a GPU trace, a CPU-only trace with a CPU-only trace"
        )
    pair = _Pair(base, candidate, rules, relation(base, candidate)[0])
    return [
        _skip(rules, rule, "turned off") if rules.level(rule) == "off" else _RULE_CHECKS[rule](pair) for rule in RULES
    ]


def check(base: Trace, candidate: Trace, rules: Rules = Rules()) -> list[str]:
    """One line per failed rule; an empty list when the candidate holds."""
    return [r.message for r in evaluate(base, candidate, rules) if r.status == "fail"]


def with_levels(rules: Rules, levels: dict[str, str]) -> Rules:
    """rules with more rule levels set (unknown rule names or levels raise ValueError)."""
    for rule, level in levels.items():
        if rule not in DEFAULT_LEVELS:
            raise ValueError(f"unknown rule '{rule}': one of {', '.join(RULES)}")
        if level not in LEVELS:
            raise ValueError(f"rule '{rule}': level '{level}' is not one of {', '.join(LEVELS)}")
    return replace(rules, levels={**rules.levels, **levels})
