"""The gate's vocabulary: its rules' names and default levels, the thresholds (Rules), one rule's
outcome (RuleResult) and how a measurement becomes a status. gate.py evaluates a pair with them,
gate_rules.py holds each rule's function."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dashboard.engine.model.constants import COPY_ALARM_BYTES, COPY_ALARM_SHARE


LEVELS = ("fail", "warn", "off")
STATUSES = ("pass", "fail", "warn", "skip")
DEFAULT_LEVELS: dict[str, str] = {
    "step_time": "fail",  # fails only with a max_slowdown_pct
    "family_time": "fail",  # fails only with a max_family_slowdown_pct
    "host_time": "fail",  # fails only with a max_host_increase_pct
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
    max_host_increase_pct: the same for the host time per attention call (analyses.host; None: measured only).
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
    max_host_increase_pct: float | None = None
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


def _result(rules: Rules, rule: str, failed: bool, message: str, **kw: Any) -> RuleResult:
    level = rules.level(rule)
    status = ("fail" if level == "fail" else "warn") if failed else "pass"
    return RuleResult(rule, level, status, message, **kw)


def _skip(rules: Rules, rule: str, why: str, **kw: Any) -> RuleResult:
    return RuleResult(rule, rules.level(rule), "skip", why, **kw)
