"""The regression gate behind `attnscope check`: does a candidate run hold against its baseline?

Every rule is named (RULES), has a level ('fail', 'warn' or 'off'; DEFAULT_LEVELS) and gives one
RuleResult: its measurement on both runs, a status ('pass', 'fail', 'warn', 'skip') and one
sentence. The defaults fail on the three regressions this field fears (a new copy, SDPA on the
unfused math path, more kernels per step), on a backend fallback and a recorded parity failure;
time fails only past --max-slowdown, judged on a bootstrap interval over all steps (bootstrap.py);
the other regressions (memory, backend change, efficiency, idle share, new kernel families,
growing copy classes, new health findings) warn unless a level says fail.

The rules themselves are gate_rules.py's, one small function each; what they measure is
gate_measures.py's. This module holds the names, levels, results and the entry points.
"""

from __future__ import annotations

from dataclasses import replace

from dashboard.engine.compare.fingerprint import relation
from dashboard.engine.analyses.kernels import work_unit
from dashboard.engine.model.trace import Trace

from dashboard.engine.compare.gate_policy import (  # noqa: E402  (re-exported: the gate's public names)
    DEFAULT_LEVELS,
    INCONCLUSIVE,
    LEVELS,
    RULES,
    STATUSES,
    IncomparableError,
    RuleResult,
    Rules,
    _skip,
)
from dashboard.engine.compare.gate_rules import RULE_CHECKS, _Pair  # noqa: E402

__all__ = [
    "DEFAULT_LEVELS",
    "INCONCLUSIVE",
    "LEVELS",
    "RULES",
    "STATUSES",
    "IncomparableError",
    "RuleResult",
    "Rules",
    "check",
    "evaluate",
    "with_levels",
]


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
        _skip(rules, rule, "turned off") if rules.level(rule) == "off" else RULE_CHECKS[rule](pair) for rule in RULES
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
