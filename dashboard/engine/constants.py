"""The thresholds and names the CLI's flags default to, in a module that imports nothing heavy:
`attnscope --help` builds its parser from these without importing polars or the analyses. The
analyses import them from here (review.py, speed.py, backends.py re-export them)."""

from __future__ import annotations

from dashboard.engine.rules import BACKEND_NAMES

BACKENDS: tuple[str, ...] = BACKEND_NAMES + ("inductor", "eager")
"""Every attention backend a run can show: the fused and math backends of the rules table, then
"inductor" (a compiled graph's own attention) and "eager" (matmul -> softmax -> matmul)."""

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

WAITING_CHECKS: tuple[str, ...] = ("idle_gap", "comm_dominated", "dependent_launch_overlap")
"""The health checks (health.py) about how the device ran (where it waits, overlaps the hardware
allows), not faults of the trace: its numbers stand (a small launch-bound workload's device is idle most of its step), so the Overview and the
text summary show them apart from the integrity checks, as information, after the review's alarms."""

# The Trace's tables (model.Trace's polars fields), which the store writes one Parquet file each.
TRACE_TABLES = ("events", "flows", "steps", "memory")
