"""The thresholds and names the CLI's flags default to, in a module that imports nothing heavy:
`attnscope --help` builds its parser from these without importing polars or the analyses. The
analyses import them from here (review.py, speed.py, backends.py re-export them)."""

from __future__ import annotations


COPY_ALARM_SHARE = 0.01
"""A hidden copy (one op chain) is an alarm when it costs at least this share of the step's time
(device busy time on GPU traces, the step span on CPU ones) ..."""
COPY_ALARM_BYTES = 1_000_000
"""... or moves at least this many bytes a step (1 MB). Below both it is a note: a 128 B index
conversion is worth knowing, not a red banner beside masked_fill's 268 MB clone."""
UNIT_KERNEL = "kernel"
"""The unit of device work on GPU traces (kernels.work_unit; on CPU-only traces it is the leaf op)."""

DEFAULT_USD_PER_GPU_HOUR = 2.0
"""The dashboard's and `attnscope compare`'s price of a GPU hour."""

FAULT, FACT = "fault", "fact"
HEALTH_KINDS: dict[str, str] = {
    "overlapping_kernels": FAULT,
    "dependent_launch_overlap": FACT,
    "duration_overflow": FAULT,
    "device_event_without_launch": FAULT,
    "device_before_launch": FAULT,
    "missing_device_events": FAULT,
    "idle_gap": FACT,
    "comm_dominated": FACT,
}
"""Every health check (health.py registers one function of each name), in the order findings are
listed, with its kind: a fault of the trace (its numbers need care: the Overview's yellow box, the
summary's `health:` line) or a fact of the run (how the device ran: where it waits, overlaps the
hardware allows; its numbers stand, shown folded after the review's alarms). docs/analysis.md
defines each; tests/test_health.py injects each."""
WAITING_CHECKS: tuple[str, ...] = tuple(name for name, kind in HEALTH_KINDS.items() if kind == FACT)
"""The facts of the run among the health checks (HEALTH_KINDS)."""

# The Trace's tables (model.Trace's polars fields), which the store writes one Parquet file each.
TRACE_TABLES = ("events", "flows", "steps", "memory")


MISSING = object()
"""What the store's kept analyses answer for an analysis they do not hold (store.kept); defined
here, light, so that the model's per_trace and the CLI's kept answers need no other floor."""
