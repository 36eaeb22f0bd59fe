"""Noise-aware time verdicts: the ratio of two runs' median step times with a bootstrap
confidence interval, and what it says against an allowed slowdown.

The bootstrap resamples steps (with replacement) of each run on its own, a fixed number of times
from a fixed seed, so one pair of traces always gets the same interval and verdict.

What few steps allow: with n steps the median's bootstrap distribution only takes values among
the n steps, and at 3 steps its 2.5% and 97.5% points are the smallest and the largest step (each
is the resampled median with probability 7/27 > 2.5%). So at 3 steps of each run the 95% interval
of the ratio is [min(candidate) / max(base), max(candidate) / min(base)]: a verdict needs every
step of one run past every step of the other by the threshold, which, were the runs alike, would
happen by chance with probability 1/20 (one arrangement of 3 + 3 steps in C(6, 3) = 20). Below
MIN_STEPS steps a run gives no verdict at all (2 + 2: 1/6)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_STEPS = 3  # per run: complete separation of 3 + 3 steps is a 1-in-20 event under no change
RESAMPLES = 2_000
SEED = 20_240_601
CONFIDENCE = 0.95
OUTCOMES = ("regression", "improvement", "unchanged", "inconclusive")
_MEDIAN_SE = math.sqrt(math.pi / 2)  # standard error of a median = this x sd / sqrt(n), normal data


@dataclass(frozen=True)
class RatioInterval:
    """candidate median / base median with its bootstrap interval (low, high); base_steps and
    candidate_steps: how many steps each median is over; medians in the unit of the input."""

    ratio: float
    low: float
    high: float
    base_median: float
    candidate_median: float
    base_steps: int
    candidate_steps: int


@dataclass(frozen=True)
class TimeVerdict:
    """outcome: 'regression' (the whole interval lies past 1 + max_slowdown), 'improvement' (the
    whole interval lies below 1: faster), 'unchanged' (the interval holds 1 and lies below
    1 + max_slowdown: no slowdown past the threshold), or
    'inconclusive' (the interval straddles the threshold, or a run has fewer than MIN_STEPS
    steps). steps_needed: for an inconclusive verdict, about how many steps of each run would
    settle it at the runs' present spread (None: no number will, the ratio sits on the threshold);
    why: one sentence."""

    interval: RatioInterval
    threshold: float  # 1 + max_slowdown_pct / 100
    outcome: str
    steps_needed: int | None
    why: str


def ratio_interval(
    base: np.ndarray,
    candidate: np.ndarray,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> RatioInterval:
    """Percentile bootstrap interval of median(candidate) / median(base) over per-step times (any
    one unit). Each run's steps are resampled on their own; the same seed gives the same interval."""
    base = np.asarray(base, dtype=np.float64)
    candidate = np.asarray(candidate, dtype=np.float64)
    b_med, c_med = (
        float(np.median(base)) if base.size else math.nan,
        float(np.median(candidate)) if candidate.size else math.nan,
    )
    ratio = c_med / b_med if b_med > 0 else math.nan
    if base.size == 0 or candidate.size == 0 or not b_med > 0:
        return RatioInterval(ratio, math.nan, math.nan, b_med, c_med, int(base.size), int(candidate.size))
    rng = np.random.default_rng(seed)
    b_boot = np.median(base[rng.integers(0, base.size, size=(resamples, base.size))], axis=1)
    c_boot = np.median(candidate[rng.integers(0, candidate.size, size=(resamples, candidate.size))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = c_boot / b_boot
    tail = (1 - confidence) / 2
    # 'lower'/'higher': bootstrap medians are step values, so the interval ends on attainable ratios
    low = float(np.quantile(ratios, tail, method="lower"))
    high = float(np.quantile(ratios, 1 - tail, method="higher"))
    return RatioInterval(ratio, low, high, b_med, c_med, int(base.size), int(candidate.size))


def _relative_spread(values: np.ndarray) -> float:
    """Robust coefficient of variation: 1.4826 x MAD / median (0 for fewer than 2 values)."""
    if values.size < 2:
        return 0.0
    med = float(np.median(values))
    return 1.4826 * float(np.median(np.abs(values - med))) / med if med > 0 else 0.0


def steps_needed(
    base: np.ndarray, candidate: np.ndarray, threshold: float, confidence: float = CONFIDENCE
) -> int | None:
    """About how many steps of each run would put the interval on one side of `threshold` at the
    runs' present spread: n >= (z x 1.2533)^2 (cv_b^2 + cv_c^2) / log(ratio / threshold)^2, at
    least MIN_STEPS. None when the median ratio equals the threshold (no number of steps settles it)."""
    base, candidate = np.asarray(base, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    if base.size == 0 or candidate.size == 0 or not np.median(base) > 0 or not np.median(candidate) > 0:
        return None
    gap = abs(math.log(float(np.median(candidate) / np.median(base))) - math.log(threshold))
    if gap < 1e-9:
        return None
    z = _normal_quantile(0.5 + confidence / 2)
    spread = _relative_spread(base) ** 2 + _relative_spread(candidate) ** 2
    if spread == 0:  # steps alike: the bootstrap settles as soon as there are enough of them
        return MIN_STEPS
    return max(MIN_STEPS, math.ceil((z * _MEDIAN_SE) ** 2 * spread / gap**2))


def _normal_quantile(p: float) -> float:
    """The standard normal's p-quantile (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = (
        -3.969683028665376e01,
        2.209460984245205e02,
        -2.759285104469687e02,
        1.383577518672690e02,
        -3.066479806614716e01,
        2.506628277459239e00,
    )
    b = (
        -5.447609879822406e01,
        1.615858368580409e02,
        -1.556989798598866e02,
        6.680131188771972e01,
        -1.328068155288572e01,
    )
    c = (
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e00,
        -2.549732539343734e00,
        4.374664141464968e00,
        2.938163982698783e00,
    )
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    lo = 0.02425
    if p < lo:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1
        )
    if p > 1 - lo:
        return -_normal_quantile(1 - p)
    q = p - 0.5
    r = q * q
    return (
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
        * q
        / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    )


def time_verdict(
    base: np.ndarray,
    candidate: np.ndarray,
    max_slowdown_pct: float = 0.0,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
    noise_ns: float = 0.0,
) -> TimeVerdict:
    """The verdict on per-step times of two runs against an allowed slowdown in percent (see
    TimeVerdict for the four outcomes). `noise_ns`: medians closer than this (ns a step) are
    'unchanged' where the interval alone would call a regression or an improvement: a sub-µs
    memset's 0.04 µs jitter is neither."""
    iv = ratio_interval(base, candidate, resamples=resamples, seed=seed, confidence=confidence)
    threshold = 1 + max_slowdown_pct / 100.0
    fewest = min(iv.base_steps, iv.candidate_steps)
    pct = f"{confidence:.0%}"
    if fewest < MIN_STEPS:
        need = steps_needed(base, candidate, threshold, confidence) if fewest else None
        return TimeVerdict(
            iv,
            threshold,
            "inconclusive",
            max(need or MIN_STEPS, MIN_STEPS),
            f"{fewest} step{'s' if fewest != 1 else ''} in a run: a verdict needs at least {MIN_STEPS} of each",
        )
    if not math.isfinite(iv.low) or not math.isfinite(iv.high):
        return TimeVerdict(iv, threshold, "inconclusive", None, "the baseline's median step time is zero")
    span = (
        f"{pct} interval of the ratio [{iv.low:.3f}, {iv.high:.3f}] over {iv.base_steps} + {iv.candidate_steps} steps"
    )
    moved = abs(iv.candidate_median - iv.base_median)
    if (iv.low > threshold or iv.high < 1.0) and moved < noise_ns:  # a clear change, too small to matter
        side = f"past {threshold:.3f}" if iv.low > threshold else "below 1"
        return TimeVerdict(
            iv,
            threshold,
            "unchanged",
            None,
            f"{span} lies {side}, but the medians differ by {moved / 1e3:.3f} us a step, under the "
            f"{noise_ns / 1e3:g} us that counts as a change",
        )
    if iv.low > threshold:
        return TimeVerdict(iv, threshold, "regression", None, f"{span} lies past {threshold:.3f}")
    if iv.high < 1.0:
        return TimeVerdict(iv, threshold, "improvement", None, f"{span} lies below 1")
    if iv.high <= threshold:
        return TimeVerdict(iv, threshold, "unchanged", None, f"{span} lies below {threshold:.3f} and holds 1")
    need = steps_needed(base, candidate, threshold, confidence)
    if need is not None and need <= max(iv.base_steps, iv.candidate_steps):
        need = None if math.isclose(iv.ratio, threshold) else max(iv.base_steps, iv.candidate_steps) * 2
    return TimeVerdict(iv, threshold, "inconclusive", need, f"{span} holds {threshold:.3f}")
