"""The gate's host_time rule: the attention call's host time per step (analyses.host), judged like
the step time: a bootstrap interval of candidate / base median over the steps (bootstrap.py), with
`attnscope check --max-host-increase PCT` as the allowed growth."""

from __future__ import annotations

from dashboard.engine.analyses.host import call_host_per_step
from dashboard.engine.compare.gate_measures import timed_rule
from dashboard.engine.compare.gate_policy import RuleResult, Rules, _skip
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
    return timed_rule(
        rules, "host_time", (a, b), rules.max_host_increase_pct, "host time per attention call", "max host increase"
    )
