"""What a run is, besides its code: the device and its peak, the dtype, the attention shapes (or,
without them, the model's op signature) and the software versions. Two runs compare as one
workload only when their workloads agree; a speedup between different workloads means nothing,
and one across devices must say so.

HTA's own control/test pair is an A100 against a V100: without this, "added volta_sgemm" reads as
a code change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from dashboard.engine.analyses.efficiency import COLLECTOR_DTYPES, DTYPES, attention_calls
from dashboard.engine.model.trace import Trace, names_in, per_trace
from dashboard.engine.analyses.classes import NOT_MODEL_FINGERPRINT_KINDS, names_where
from dashboard.engine.rules.peaks import device_properties, match_device
from dashboard.engine.analyses.summary import device_info

SAME, CROSS_DEVICE, DIFFERENT = "same workload", "cross-device", "different workload"
"""How a run relates to its baseline (relation())."""
OP_SIMILARITY = 0.6
"""Without attention shapes, two runs are one workload when the Jaccard similarity of their op
signatures (distinct cpu_op names that compute) is at least this: the same model on two devices
shares nearly every op name (HTA's A100/V100 pair: 0.84); a vLLM and an SGLang server share few."""
# Ops that are the engine's or the compiler's, not the model's, are left out of the op signature:
# the op kinds classes.NOT_MODEL_FINGERPRINT_KINDS (bookkeeping, compiled graphs and regions,
# autograd, views and allocations).
VERSION_KEYS = (
    ("torch", None),
    ("cuda runtime", "cuda_runtime_version"),
    ("cuda driver", "cuda_driver_version"),
    ("cupti", "cupti_version"),
    ("hip runtime", "hip_runtime_version"),
    ("roctracer", "roctracer_version"),
)


@dataclass(frozen=True)
class Fingerprint:
    """device: '<type>: <name>' ('cpu' for a CPU-only trace); peak: the peaks table's row name, or
    None; dtype: the collectors' dtype, else the attention calls' (None when unknown); shapes: the
    attention shapes, sorted ('' entries never); ops: the op signature (distinct computing cpu_op
    names); versions: name -> version text, for the ones the trace records."""

    device: str
    peak: str | None
    dtype: str | None
    shapes: tuple[str, ...]
    ops: frozenset[str]
    versions: tuple[tuple[str, str], ...]
    regions: frozenset[str] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (ops as a count and a sorted sample: the full set is long)."""
        return {
            "device": self.device,
            "peak": self.peak,
            "dtype": self.dtype,
            "shapes": list(self.shapes),
            "op_signature": {"ops": len(self.ops), "sample": sorted(self.ops)[:8]},
            "versions": dict(self.versions),
        }


_DIMS = re.compile(r"\bB=(\d+) H=(\d+) Sq=(\d+) Sk=(\d+) D=(\d+)")


def _collector_shape(trace: Trace) -> str | None:
    """The collectors' shape in the attention calls' words ('B=8 H=16 Sq=1024 Sk=1024 D=64'), so
    that a collectors' run and the same run without its metadata compare as one workload."""
    shape = trace.collector.get("shape")
    if not isinstance(shape, dict):
        return None
    dims = [shape.get(k) for k in ("batch", "heads", "seq", "head_dim")]
    if not all(isinstance(d, int) for d in dims):
        return None
    b, h, n, d = dims
    return f"B={b} H={h} Sq={n} Sk={n} D={d}"


def _dims(shape: str) -> str:
    """A shape's dimensions alone ('B=2 H=8 Sq=512 Sk=512 D=64'): the calls' shapes also say the
    dtype and the mask, which the fingerprint compares on their own."""
    m = _DIMS.search(shape)
    return " ".join(f"{k}={v}" for k, v in zip(("B", "H", "Sq", "Sk", "D"), m.groups())) if m else shape


def _dtype_name(dtype: str | None) -> str | None:
    """One name per dtype ('fp32', 'bf16', ...) whether the collectors ('float32') or the recorded
    shapes ('float', 'c10::BFloat16') said it; a name neither knows is kept as written."""
    if not dtype:
        return None
    recorded = COLLECTOR_DTYPES.get(dtype, dtype)
    return DTYPES[recorded][0] if recorded in DTYPES else dtype


@per_trace(returns="Fingerprint (a dataclass: the run's work, to tell same work), never kept")
def fingerprint(trace: Trace) -> Fingerprint:
    """The run's fingerprint (see Fingerprint)."""
    info = device_info(trace)
    device = "cpu" if info["type"] == "cpu" else f"{info['type']}: {info['name'] or 'unnamed device'}"
    match = match_device(device_properties(trace.meta))
    peak = match.peak.name if match.peak is not None else None
    dtype = _dtype_name(trace.collector.get("dtype"))
    shapes: tuple[str, ...] = ()
    own = _collector_shape(trace)
    if own:
        shapes = (own,)
    else:
        calls = attention_calls(trace).filter(pl.col("shape").is_not_null())
        if calls.height:
            shapes = tuple(sorted(set(calls["shape"].to_list())))
            if dtype is None:
                dtypes = sorted({_dtype_name(d) for d in calls["dtype"].drop_nulls().to_list()})
                dtype = ", ".join(dtypes) or None
    ev = trace.events
    ops = frozenset(names_in(trace, "cpu_op")) - frozenset(
        names_where(trace, "op_kind", NOT_MODEL_FINGERPRINT_KINDS, ("cpu_op",))
    )
    marks = ev.filter(pl.col("cat") == "user_annotation")["name"].cast(pl.String).unique().drop_nulls()
    regions = frozenset(marks.filter(~marks.str.starts_with("ProfilerStep#")).to_list())
    versions = []
    for label, key in VERSION_KEYS:
        value = trace.collector.get("torch_version") if key is None else trace.meta.get(key)
        if value is not None and not isinstance(value, (dict, list)):
            versions.append((label, str(value)))
    return Fingerprint(device, peak, str(dtype) if dtype else None, shapes, ops, tuple(versions), regions)


MIN_REGIONS = 3
"""The model's annotations decide the signature when both runs have at least this many."""


def op_similarity(a: Fingerprint, b: Fingerprint) -> float:
    """Jaccard similarity of two signatures: the model's annotations when both runs have at least
    MIN_REGIONS (they survive torch.compile, which replaces a region's ops by one CompiledFunction),
    else the computing op names (1.0 when both are empty)."""
    left, right = (a.regions, b.regions) if min(len(a.regions), len(b.regions)) >= MIN_REGIONS else (a.ops, b.ops)
    if not left and not right:
        return 1.0
    return len(left & right) / len(left | right)


def same_workload(a: Fingerprint, b: Fingerprint) -> tuple[bool, str]:
    """(True, how it was decided) when the two runs do the same work. With attention shapes on
    both sides: equal shapes and dtype (naive and SDPA on one shape are one workload, the article's
    comparison). Otherwise: op signatures at least OP_SIMILARITY alike."""
    if a.shapes and b.shapes:
        if {_dims(x) for x in a.shapes} != {_dims(x) for x in b.shapes}:
            return False, f"attention shapes differ ({'; '.join(a.shapes)} against {'; '.join(b.shapes)})"
        if a.dtype and b.dtype and a.dtype != b.dtype:
            return False, f"dtype differs ({a.dtype} against {b.dtype})"
        return True, "same attention shapes" + (f" and dtype ({a.dtype})" if a.dtype else "")
    similarity = op_similarity(a, b)
    if similarity >= OP_SIMILARITY:
        return True, f"op signatures {similarity:.0%} alike"
    return False, f"op signatures only {similarity:.0%} alike (no attention shapes to compare)"


def relation(base: Trace, other: Trace) -> tuple[str, str]:
    """(SAME | CROSS_DEVICE | DIFFERENT, why) of `other` against `base`."""
    a, b = fingerprint(base), fingerprint(other)
    same, why = same_workload(a, b)
    if not same:
        return DIFFERENT, why
    if a.device != b.device:
        return CROSS_DEVICE, f"{why}; device {a.device} against {b.device}"
    return SAME, why


def differences(base: Trace, other: Trace) -> list[str]:
    """What differs between two runs besides the code, one phrase each: device, peak, dtype,
    attention shapes, versions. [] when nothing does."""
    a, b = fingerprint(base), fingerprint(other)
    out = []
    if a.device != b.device:
        out.append(f"device {a.device} -> {b.device}")
    if a.dtype != b.dtype and a.dtype and b.dtype:
        out.append(f"dtype {a.dtype} -> {b.dtype}")
    if a.shapes and b.shapes and {_dims(x) for x in a.shapes} != {_dims(x) for x in b.shapes}:
        out.append(f"attention shapes {'; '.join(a.shapes)} -> {'; '.join(b.shapes)}")
    va, vb = dict(a.versions), dict(b.versions)
    for key in sorted(set(va) & set(vb)):
        if va[key] != vb[key]:
            out.append(f"{key} {va[key]} -> {vb[key]}")
    return out
