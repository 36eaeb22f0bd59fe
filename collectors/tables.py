"""The tables `python -m collectors sweep`, `dispatch`, `e2e` and `serve` write, declared once: each
CSV's columns in file order with their polars type and meaning (written into the mode's .json),
the columns a reader may count on, and the values of its status column.

The modes build their frames and their .json from a Table; dashboard.engine.analyses.article reads an
article folder's files by the same Tables (the columns it needs, which of them hold numbers or
booleans); the tests hold what each mode writes to them. Nothing here imports torch: the dashboard
reads these without the collectors' extra installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import polars as pl


@dataclass(frozen=True)
class Table:
    """One mode's table, written as DIR/<name>.csv (and .parquet when `parquet`) beside DIR/<name>.json.

    columns: every column in file order -> (polars type, meaning and unit). read: the columns every
    folder's file has, the ones a reader (dashboard.engine.analyses.article) needs; the rest it keeps when
    present. statuses: the values of the status column, in the order the .json and the closing
    line count them (() for a table without one)."""

    name: str
    columns: dict[str, tuple[pl.DataType, str]]
    read: tuple[str, ...]
    statuses: tuple[str, ...] = ()
    parquet: bool = False

    def __post_init__(self) -> None:
        unknown = [c for c in self.read if c not in self.columns]
        if unknown:
            raise ValueError(f"{self.name}: read names columns the table does not have: {', '.join(unknown)}")

    @property
    def csv(self) -> str:
        """The CSV's file name."""
        return f"{self.name}.csv"

    @property
    def schema(self) -> dict[str, pl.DataType]:
        """Column -> polars type, in file order."""
        return {name: kind for name, (kind, _) in self.columns.items()}

    def numeric(self, columns: Sequence[str]) -> tuple[str, ...]:
        """Those of `columns` that hold numbers."""
        return tuple(c for c in columns if self.columns[c][0].is_numeric())

    def boolean(self) -> tuple[str, ...]:
        """The columns that hold true/false."""
        return tuple(c for c, (kind, _) in self.columns.items() if kind == pl.Boolean)

    def frame(self, rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
        """Rows (dicts keyed by column) as a frame with the columns' order and types."""
        return pl.DataFrame(rows, schema=self.schema, orient="row") if rows else pl.DataFrame(schema=self.schema)

    def described(self) -> dict[str, dict[str, str]]:
        """The .json's "columns": column -> {"type", "meaning"}."""
        return {name: {"type": str(kind), "meaning": text} for name, (kind, text) in self.columns.items()}

    def status_counts(self, frame: pl.DataFrame) -> dict[str, int]:
        """Rows per status, every status named (0 included), in `statuses` order."""
        return {s: int((frame["status"] == s).sum()) for s in self.statuses}


SWEEP = Table(
    name="sweep",
    columns={
        "variant": (pl.String, "attention variant (collectors.variants.VARIANTS)"),
        "backend_ran": (
            pl.String,
            "backend the call really ran, from a profiled call's op/kernel names: cpu_flash, "
            "flash, efficient, cudnn, math, eager, flex, hub or unknown; null when the variant did not run",
        ),
        "device": (pl.String, "cpu or cuda"),
        "dtype": (pl.String, "input dtype: bf16, fp16 or fp32"),
        "batch": (pl.Int64, "batch size"),
        "heads": (pl.Int64, "attention heads"),
        "seq": (pl.Int64, "sequence length, tokens (queries = keys)"),
        "head_dim": (pl.Int64, "head dimension"),
        "causal": (pl.Boolean, "causal (lower-triangular) attention"),
        "status": (
            pl.String,
            "ok, refused (forced backend cannot run), oom, parity_failed, unavailable (a known reason: no backend "
            "for this device or dtype, a package missing) or error (anything else: the variant failed)",
        ),
        "reason": (
            pl.String,
            "why the status is not ok (PyTorch's text for refusals; bytes asked for an oom); null when ok",
        ),
        "time_ms": (pl.Float64, "median forward time, milliseconds"),
        "time_ms_p10": (pl.Float64, "10th percentile forward time, milliseconds"),
        "time_ms_p90": (pl.Float64, "90th percentile forward time, milliseconds"),
        "reps": (pl.Int64, "timed repetitions behind the time columns"),
        "flops": (pl.Int64, "FLOPs of one forward: 4*batch*heads*seq^2*head_dim, half when causal"),
        "tflops": (pl.Float64, "achieved TFLOP/s: flops / (time_ms * 1e-3) / 1e12"),
        "peak_mem_bytes": (pl.Int64, "bytes one call added at its peak over what was allocated before it"),
        "scores_bytes": (pl.Int64, "bytes of the batch*heads*seq*seq scores matrix in the input dtype"),
        "parity_max_abs": (pl.Float64, "max |out - fp32 reference| in output units (inf: non-finite output)"),
        "evidence": (pl.String, "the op or kernel name that proves backend_ran"),
    },
    read=(
        "variant",
        "backend_ran",
        "device",
        "dtype",
        "batch",
        "heads",
        "seq",
        "head_dim",
        "causal",
        "status",
        "reason",
        "time_ms",
        "time_ms_p10",
        "time_ms_p90",
        "tflops",
        "peak_mem_bytes",
    ),
    statuses=("ok", "refused", "oom", "parity_failed", "unavailable", "error"),
    parquet=True,
)
"""`python -m collectors sweep`: one row per grid point and variant."""

DISPATCH = Table(
    name="dispatch",
    columns={
        "dtype": (pl.String, "input dtype: bf16, fp16 or fp32"),
        "head_dim": (pl.Int64, "head dimension"),
        "mask": (pl.String, "causal, none, bool, additive or dropout (module docstring)"),
        "gqa": (pl.Boolean, "k/v with fewer heads than q, enable_gqa=True"),
        "backend_ran": (
            pl.String,
            "backend the default dispatch ran: cpu_flash, flash, efficient, cudnn, math "
            "(dashboard BACKEND_TABLE names) or unknown",
        ),
        "kernel": (pl.String, "the op or kernel name that proves backend_ran (a device kernel when there is one)"),
        "fallback": (
            pl.Boolean,
            "true when the unfused math path ran although this device type has a fused "
            "backend (cpu_flash on CPU; flash, efficient, cuDNN on CUDA): the silent fallback",
        ),
        "refusals": (
            pl.String,
            "'flash: ...; efficient: ...; cudnn: ...': PyTorch's text when that backend, "
            "forced, cannot run; empty after the colon for one that ran",
        ),
        "error": (pl.String, "the default dispatch's own error when it could not run at all; empty otherwise"),
    },
    read=("dtype", "head_dim", "mask", "gqa", "backend_ran", "kernel", "refusals"),
)
"""`python -m collectors dispatch`: one row per dtype x head_dim x mask x GQA cell (meaning of the
mask kinds: collectors/dispatch.py's docstring)."""

E2E = Table(
    name="e2e",
    columns={
        "variant": (pl.String, "attention variant (collectors.variants.VARIANTS)"),
        "phase": (pl.String, "prefill (the prompt batch, causal) or decode (one token per sequence, KV cache)"),
        "status": (
            pl.String,
            "ok, refused (a forced SDPA backend cannot run), unavailable (a known reason: no backend for this "
            "device or dtype, a package missing), oom or error (anything else: the variant failed)",
        ),
        "reason": (pl.String, "why the status is not ok; null when ok"),
        "step_ms": (pl.Float64, "median time of one step (prefill forward, or one decode step), milliseconds"),
        "step_ms_p10": (pl.Float64, "10th percentile of the timed steps behind step_ms, milliseconds"),
        "step_ms_p90": (pl.Float64, "90th percentile of the timed steps behind step_ms, milliseconds"),
        "attention_ms": (pl.Float64, "attention's time in the profiled step, milliseconds (see attention_time_source)"),
        "profiled_step_ms": (pl.Float64, "the profiled step's ProfilerStep span, milliseconds"),
        "attention_share": (pl.Float64, "attention_ms / profiled_step_ms, a fraction"),
        "attention_speedup_vs_naive": (pl.Float64, "naive attention_ms / attention_ms (same phase); > 1: faster"),
        "speedup_vs_naive": (pl.Float64, "naive step_ms / step_ms (same phase); > 1: faster"),
        "amdahl_predicted_speedup": (
            pl.Float64,
            "1 / ((1 - s) + s / a), s = naive's attention_share in the phase, a = attention_speedup_vs_naive",
        ),
        "tokens": (pl.Int64, "tokens one step processes: batch * prompt_len (prefill) or batch (decode)"),
        "tokens_per_s": (pl.Float64, "tokens / (step_ms / 1000)"),
        "parity_max_abs": (pl.Float64, "max |logits - fp32 reference logits| (see the module docstring)"),
        "reps": (pl.Int64, "timed steps behind step_ms"),
        "trace": (pl.String, "the profiled step's trace file in DIR, null when the variant did not run"),
    },
    read=(
        "variant",
        "phase",
        "step_ms",
        "attention_ms",
        "attention_share",
        "speedup_vs_naive",
        "amdahl_predicted_speedup",
    ),
    statuses=("ok", "refused", "unavailable", "oom", "error"),
)
"""`python -m collectors e2e`: one row per phase and variant (how parity_max_abs is measured:
collectors/e2e.py's docstring)."""

SERVE = Table(
    name="serve",
    columns={
        "variant": (pl.String, "batching: padded_sdpa, packed_njt_sdpa, packed_flex or per_request_sdpa"),
        "status": (
            pl.String,
            "ok, parity_failed, unavailable (a known reason: no backend for this device or dtype, no working "
            "compiler, a package missing), oom or error (anything else: the batching failed)",
        ),
        "reason": (pl.String, "why the status is not ok; null when ok"),
        "requests": (pl.Int64, "requests in the mix"),
        "batches": (pl.Int64, "attention calls per pass: batches, or requests for per_request_sdpa"),
        "tokens": (pl.Int64, "real tokens: the sum of the request lengths"),
        "computed_tokens": (
            pl.Int64,
            "token positions computed, padding included (padded: batch size x longest, summed over the batches)",
        ),
        "padding_waste": (pl.Float64, "1 - tokens / computed_tokens, a fraction"),
        "time_s": (pl.Float64, "median time of one pass over every request, seconds"),
        "tokens_per_s": (pl.Float64, "tokens / time_s (real tokens)"),
        "usd_per_gpu_hour": (pl.Float64, "the price of a GPU hour used, US dollars"),
        "usd_per_1m_tokens": (pl.Float64, "usd_per_gpu_hour / 3600 * time_s / tokens * 1e6, US dollars"),
        "parity_max_abs": (
            pl.Float64,
            "max |out - per_request_sdpa out| over every request (per_request_sdpa: "
            "against the fp32 reference), output units",
        ),
        "reps": (pl.Int64, "timed passes behind time_s"),
    },
    read=("variant", "tokens", "padding_waste", "tokens_per_s", "usd_per_1m_tokens"),
    statuses=("ok", "parity_failed", "unavailable", "oom", "error"),
)
"""`python -m collectors serve`: one row per batching."""

TABLES: dict[str, Table] = {t.name: t for t in (SWEEP, DISPATCH, E2E, SERVE)}
"""Every mode's table by name, in the order an article folder lists them."""
