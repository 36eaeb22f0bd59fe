"""Which attention implementation really ran, with the op and kernel names that prove it.

PyTorch's SDPA picks flash, memory-efficient, cuDNN or the unfused math path without saying so;
only the names in the trace tell. One trace can hold several backends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from dashboard.engine.model import Trace, per_trace

# backend -> regex over cpu_op and kernel names (case-sensitive; first the op names PyTorch
# dispatches to, then the kernels they launch).
BACKEND_PATTERNS: tuple[tuple[str, str], ...] = (
    ("cpu_flash", r"^aten::_scaled_dot_product_flash_attention_for_cpu"),
    ("flash", r"^aten::_scaled_dot_product_flash_attention$|^aten::_flash_attention_forward$|pytorch_flash::flash_fwd|pytorch_flash::flash_bwd"),
    ("efficient", r"^aten::_scaled_dot_product_efficient_attention$|^aten::_efficient_attention_forward$|fmha_cutlassF|fmha_cutlassB"),
    ("cudnn", r"^aten::_scaled_dot_product_cudnn_attention$|cudnn_generated_fort_native_sdpa|cudnn.*sdpa"),
    ("math", r"^aten::_scaled_dot_product_attention_math"),
    ("triton", r"^triton_\w*(attention|attn|flash|sdpa|fmha)"),
    # Kernels-hub ops register under their own namespace (e.g. _flash_attn_<hash>::fwd), and the
    # upstream FlashAttention kernel is flash::flash_fwd_kernel without PyTorch's prefix.
    ("hub", r"^_?flash_attn\w*::|^kernels_community\w*::|^(void )?flash::flash_fwd|^(void )?flash::flash_bwd|(^|[^_])flash::compute_attn"),
)
BACKENDS: tuple[str, ...] = tuple(b for b, _ in BACKEND_PATTERNS) + ("inductor", "eager")
# What the collectors write as backend_requested when no one backend was forced.
NOT_FORCED = ("default", "eager", "none")
SDPA_OP = r"^aten::(scaled_dot_product_attention|_scaled_dot_product_)"
EAGER_MATMUL = r"^aten::(matmul|bmm|baddbmm|einsum)$"
EAGER_SOFTMAX = r"^aten::(_?softmax|_safe_softmax)$"
# torch.compile fuses a hand-written attention's scale, mask and softmax into one generated kernel
# (cpp_fused_* on CPU, triton_*_fused_* on GPU) between two matmuls.
INDUCTOR_SOFTMAX = r"(cpp|triton)_\w*fused\w*softmax"


@dataclass
class Backends:
    """backends: detected names in BACKENDS order; evidence: backend -> distinct names that prove it."""

    backends: list[str] = field(default_factory=list)
    evidence: dict[str, list[str]] = field(default_factory=dict)

    @property
    def all_evidence(self) -> list[str]:
        return [name for b in self.backends for name in self.evidence.get(b, [])]


@per_trace
def detect_backends(trace: Trace) -> Backends:
    """Detect attention backends from cpu_op and kernel names."""
    ev = trace.events.filter(pl.col("cat").is_in(["cpu_op", "kernel"]))
    names = ev.select(pl.col("name").cast(pl.String).unique()).to_series()
    found = Backends()
    for backend, pattern in BACKEND_PATTERNS:
        hits = sorted(names.filter(names.str.contains(pattern)).to_list())
        if hits:
            found.backends.append(backend)
            found.evidence[backend] = hits
    inductor = _inductor_evidence(trace, names, found.backends)
    if inductor:
        found.backends.append("inductor")
        found.evidence["inductor"] = inductor
    eager = _eager_evidence(trace)
    if eager:
        found.backends.append("eager")
        found.evidence["eager"] = eager
    return found


def _inductor_evidence(trace: Trace, names: pl.Series, fused: list[str]) -> list[str]:
    """Generated softmax kernels of a compiled hand-written attention (when no fused SDPA ran)."""
    if fused:
        return []
    hits = sorted(names.filter(names.str.contains(INDUCTOR_SOFTMAX)).to_list())
    return hits if hits and names.str.contains(EAGER_MATMUL).any() else []


def _eager_evidence(trace: Trace) -> list[str]:
    """matmul + softmax ops that sit under no SDPA op: attention written by hand."""
    ops = trace.events.filter(pl.col("cat") == "cpu_op").select("id", "parent", pl.col("name").cast(pl.String))
    softmax = ops.filter(pl.col("name").str.contains(EAGER_SOFTMAX))
    matmul = ops.filter(pl.col("name").str.contains(EAGER_MATMUL))
    if softmax.height == 0 or matmul.height == 0:
        return []
    sdpa_ids = set(ops.filter(pl.col("name").str.contains(SDPA_OP))["id"].to_list())
    if not sdpa_ids:
        return sorted(set(softmax["name"].to_list()) | set(matmul["name"].to_list()))
    parent = trace.events["parent"].fill_null(-1).to_numpy()

    def under_sdpa(node: int) -> bool:
        node = int(parent[node])
        while node >= 0:
            if node in sdpa_ids:
                return True
            node = int(parent[node])
        return False

    free_softmax = [n for i, n in zip(softmax["id"], softmax["name"]) if not under_sdpa(i)]
    free_matmul = [n for i, n in zip(matmul["id"], matmul["name"]) if not under_sdpa(i)]
    if not free_softmax or not free_matmul:
        return []
    return sorted(set(free_softmax) | set(free_matmul))


def requested_backend(trace: Trace) -> str | None:
    """The backend the collectors asked for (from the trace's own metadata), if any."""
    value = trace.collector.get("backend_requested")
    return str(value) if value else None


def fallback(requested: str | None, detected: list[str]) -> bool:
    """True when a specific fused backend was requested and it is not what ran."""
    if not requested or requested in NOT_FORCED:
        return False
    # torch.compile lowers the forced math path into generated kernels (inductor); that is still
    # the math path, compiled, not a fallback.
    aliases = {"flash": {"flash", "cpu_flash"}, "cpu_flash": {"cpu_flash", "flash"}, "math": {"math", "inductor"}}
    wanted = aliases.get(requested, {requested})
    return not (wanted & set(detected))
