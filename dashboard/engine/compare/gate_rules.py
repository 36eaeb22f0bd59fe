"""The gate's rules, one small function of the (base, candidate) pair each: `_rule_<name>(pair)`
for every name in gate.RULES, gathered in RULE_CHECKS (gate.evaluate runs them in RULES order).
A rule reads what gate_measures.py measures and gives one gate.RuleResult."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

from dashboard.engine.analyses.backends import detect_backends
from dashboard.engine.analyses.efficiency import efficiency_block
from dashboard.engine.analyses.health import health
from dashboard.engine.analyses.kernels import work_unit
from dashboard.engine.compare.fingerprint import CROSS_DEVICE
from dashboard.engine.compare.gate_host import host_time_rule
from dashboard.engine.compare.gate_policy import RULES, RuleResult, Rules, _result, _skip
from dashboard.engine.compare.findings import format_bytes
from dashboard.engine.compare.overview import backend_check, parity
from dashboard.engine.compare.speed import step_time
from dashboard.engine.model.constants import WAITING_CHECKS
from dashboard.engine.model.formatting import signed_change
from dashboard.engine.model.trace import Trace
from dashboard.engine.compare.gate_measures import (
    _copy_classes,
    _family_rule,
    _hidden_copies,
    _idle_share,
    _memory_peak,
    _time_rule,
    _work_per_step,
    family_times_ns,
)


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


def _rule_host_time(p: _Pair) -> RuleResult:
    return host_time_rule(p.rules, p.base, p.candidate)


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
        message = (
            f"attention efficiency {c_pct:.1f}% of the roofline against {b_pct:.1f}% ({signed_change(c_pct - b_pct)} points, "
            f"allowed -{rules.max_efficiency_drop:g})"
        )
        return _past_allowed(rules, "efficiency_drop", b_pct - c_pct, rules.max_efficiency_drop, message, b_pct, c_pct)


def _past_allowed(
    rules: Rules, rule: str, change: float, allowed: float, message: str, base: Any, candidate: Any
) -> RuleResult:
    """A rule that fails where a change (points or percent: a growth, a drop) passes what is
    allowed; both readings and the allowance go with the verdict."""
    return _result(rules, rule, change > allowed, message, base=base, candidate=candidate, threshold=allowed)


def _rule_idle_share(p: _Pair) -> RuleResult:
    rules, base, candidate = p.rules, p.base, p.candidate
    b_idle, c_idle = _idle_share(base), _idle_share(candidate)
    if b_idle is None or c_idle is None:
        return _skip(rules, "idle_share", "CPU-only traces: no device idle time")
    else:
        grow = (c_idle - b_idle) * 100
        message = (
            f"device idle {c_idle:.0%} of the span of a step's work (median) against {b_idle:.0%} ({signed_change(grow)} points, allowed "
            f"+{rules.max_idle_increase:g})"
        )
        return _past_allowed(rules, "idle_share", grow, rules.max_idle_increase, message, b_idle, c_idle)


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
        message = (
            f"peak memory {c_mem / 1e6:,.1f} MB against {b_mem / 1e6:,.1f} MB ({signed_change(growth)}%, allowed "
            f"+{rules.max_memory_increase_pct:g}%)"
        )
        return _past_allowed(rules, "memory_peak", growth, rules.max_memory_increase_pct, message, b_mem, c_mem)


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


RULE_CHECKS: dict[str, Callable[[_Pair], RuleResult]] = {rule: globals()[f"_rule_{rule}"] for rule in RULES}
"""Each rule's function, by name: a rule is one small function of the pair."""
