"""The gate's host_time rule: the attention call's host time per step (analyses.host), judged like
the step time: a bootstrap interval of candidate / base median over the steps (bootstrap.py), with
`attnscope check --max-host-increase PCT` as the allowed growth."""

from __future__ import annotations

from dashboard.engine.analyses.host import call_host_per_step
from dashboard.engine.compare.bootstrap import time_verdict
from dashboard.engine.compare.diff import NOISE_NS
from dashboard.engine.compare.gate_measures import _pct, _verdict_dict
from dashboard.engine.compare.gate_policy import RuleResult, Rules, _result, _skip
from dashboard.engine.model.trace import Trace


def host_times_ns(trace: Trace):  # -> np.ndarray
    """Each step's host time per attention call in ns (the mean over the step's calls made by an
    op: host.call_host_per_step), in step order; steps without such a call are left out."""
    return call_host_per_step(trace)["host_ns"].to_numpy()


def host_time_rule(rules: Rules, base: Trace, candidate: Trace) -> RuleResult:
    """host_time: fails, with --max-host-increase PCT, when the bootstrap interval of the
    candidate's median host time per attention call over the baseline's lies wholly past
    1 + PCT/100 (an inconclusive verdict does what --inconclusive says); measured only without it."""
    a, b = host_times_ns(base), host_times_ns(candidate)
    if len(a) == 0 or len(b) == 0:
        which = " and ".join(t.source for t, x in ((base, a), (candidate, b)) if len(x) == 0)
        return _skip(rules, "host_time", f"no attention op call in a step of {which}: no host time per call")
    gated = rules.max_host_increase_pct is not None
    v = time_verdict(
        a,
        b,
        rules.max_host_increase_pct or 0.0,
        resamples=rules.resamples,
        seed=rules.seed,
        confidence=rules.confidence,
        noise_ns=NOISE_NS,
    )
    iv = v.interval
    head = (
        f"host time per attention call {_pct(iv.ratio)}: median {iv.candidate_median / 1e3:,.1f} us against "
        f"{iv.base_median / 1e3:,.1f} us, {v.outcome}: {v.why}"
    )
    failed = gated and (v.outcome == "regression" or (v.outcome == "inconclusive" and rules.inconclusive == "fail"))
    details = _verdict_dict(v)
    result = _result(
        rules,
        "host_time",
        failed,
        head if gated else head + " (not gated: no max host increase)",
        base=details["base_median_ns"],
        candidate=details["candidate_median_ns"],
        threshold=rules.max_host_increase_pct,
        details=details,
    )
    if gated and v.outcome == "inconclusive" and rules.inconclusive == "pass" and result.status == "pass":
        result.status = "warn" if result.level != "off" else "pass"
    return result
