"""One reading per run pair of the host side (analyses.host): what an attention call costs the CPU
in each run, per backend when the two runs' calls ran different SDPA backends, and how much of a
step the device waits on launches."""

from __future__ import annotations

from typing import Any

from dashboard.engine.analyses.host import host_block
from dashboard.engine.model.trace import Trace


def _backend(block: dict[str, Any]) -> str | None:
    """The one backend of the run's attention calls, or None (no calls, or several backends)."""
    by = block["calls"]["by_backend"]
    return next(iter(by)) if len(by) == 1 else None


def _bound(block: dict[str, Any]) -> str:
    return f"{block['host_bound_steps']} of {len(block['steps'])}"


def host_reading(base: Trace, other: Trace) -> list[str]:
    """[] or one line: the attention call's host time in `other` against `base` (µs a call, median;
    launches a call), named by backend when each run's calls ran one backend and the two differ
    ("cudnn costs 12.3 µs more host time per attention call than flash"), then the share of a step
    the device waits on launches in each. [] when either trace has no launch calls."""
    a, b = host_block(base), host_block(other)
    if not a or not b or not a["steps"] or not b["steps"]:
        return []
    waits = (
        f"the device waits on launches {b['waiting_share'] or 0:.0%} of a step against {a['waiting_share'] or 0:.0%} "
        f"(host-bound steps: {_bound(b)} against {_bound(a)})"
    )
    ca, cb = a["calls"], b["calls"]
    if not ca["count"] or not cb["count"]:
        return [f"host: {waits}"]
    diff = cb["host_us"] - ca["host_us"]
    more = f"{abs(diff):,.1f} µs {'more' if diff >= 0 else 'less'} host time per attention call"
    launches = f"{cb['launches']:g} launch{'' if cb['launches'] == 1 else 'es'} a call against {ca['launches']:g}"
    named_a, named_b = _backend(a), _backend(b)
    if named_a and named_b and named_a != named_b:
        head = f"{named_b} costs {more} than {named_a}"
    else:
        head = f"the attention call costs {more}"
    return [f"host: {head} ({cb['host_us']:,.1f} µs against {ca['host_us']:,.1f}; {launches}); {waits}"]
