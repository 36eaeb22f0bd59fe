"""Device work: what ran on the device per step, by kernel and by kernel family.

On a GPU trace the unit of device work is a kernel, GPU memcpy or GPU memset. In a CPU-only trace
(no GPU events at all) it is the leaf cpu_op: an op that does work (not a view, an allocation or
bookkeeping) and holds no other such op.
Times are in ns unless a column name says otherwise.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from dashboard.engine.rules import is_fused_attention
from dashboard.engine.columns import series
from dashboard.engine.model import GPU_CATEGORIES, Trace, names_matching, per_trace
from dashboard.engine.names import parse
from dashboard.engine.constants import UNIT_KERNEL  # noqa: F401  (defined light for the CLI; re-exported)

UNIT_LEAF_OP = "leaf cpu_op"

@dataclass(frozen=True)
class FamilyRule:
    """One row of FAMILY_RULES: names whose function name (names.parse(...).qualname: namespace::base,
    without return type, parameters or template arguments) matches `name`, and, when `template` is
    set, whose template arguments match it too, are `family`. Patterns are case-insensitive."""

    family: str
    name: str
    template: str
    reason: str


# What a kernel (or, on a CPU-only trace, an op) is, by its own function name. One ordered table
# for GPU kernels and CPU ops alike; the first rule that matches wins. The 'fused attention' family
# is not in it: it is rules.BACKEND_TABLE's fused rows, checked first (see family_of).
FAMILY_RULES: tuple[FamilyRule, ...] = (
    FamilyRule("communication",
               r"^(nccl|rccl|msccl)|^c10d::|^(vllm::)?cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|^deep_ep::|^nvshmem",
               "", "collectives: NCCL/RCCL device kernels, c10d ops, custom all-reduce; before 'reduce' below"),
    FamilyRule("memset", r"^memset|(^|_)memset$|^__amd_rocclr_fill|^aten::(zero_|fill_)$", "",
               "buffer fills: Memset rows of legacy traces, ROCm's blit fill kernels, zero_/fill_ ops"),
    FamilyRule("copy", r"^memcpy|^__amd_rocclr_copy|(^|::)CatArrayBatchedCopy|(^|::)(nchwToNhwc|nhwcToNchw)|"
               r"(^|::)reshape_and_cache|(^|::)store_kvcache|^aten::(copy_|clone|contiguous|cat)$", "",
               "data movement: memcpy rows, ROCm blit copies, torch.cat, layout transposes, KV-cache writes"),
    FamilyRule("copy", r"^at::native::\w*elementwise\w*$", r"copy_kernel_cuda|copy_device_to_device",
               "PyTorch's elementwise launcher running a copy functor (direct_copy_kernel_cuda: copy_ and dtype casts)"),
    FamilyRule("copy", r"(^|::)multi_tensor_apply_kernel$", r"(^|\W)Copy<",
               "torch._foreach_copy_'s launcher running its Copy functor (e.g. a CUDA graph's input copies)"),
    FamilyRule("softmax", r"softmax", "", "softmax kernels and ops (cunn_SoftMaxForward, softmax_warp_forward, _softmax)"),
    FamilyRule("convolution",
               r"convol|conv(?!ert|ers)|winograd|scudnn|im2col|col2im|(^|[_:])(fprop|dgrad|wgrad)|^cask_cudnn|igemm_(fwd|bwd|wrw)",
               "", "cuDNN/MIOpen/CUTLASS convolutions and their helpers; before gemm (implicit_convolve_sgemm is a conv)"),
    FamilyRule("reduction", r"finalizeMoeRouting|_finalize_matmul|(^|::)moe_sum", "",
               "MoE finalize: sums each token's top-k expert outputs; before gemm ('matmul' in the name)"),
    FamilyRule("gemm",
               r"(?<!fb)gemm|gemv|^cutlass_|cublas|nvjet|wgmma|xmma|^cijk_|matmul|^bmm_|^epilogue::impl::|splitkreduce|"
               r"^rocblas_|^hipblaslt|^aten::(mm|bmm|addmm|baddbmm|linear|matmul|addmv|mv|_scaled_mm|_int_mm)$|"
               r"^triton_tem_fused_(mm|bmm|addmm)", "",
               "matrix multiplies: cuBLAS/cuBLASLt (sm90_xmma_gemm, ampere_*gemm, nvjet, split-K reduce and epilogue), "
               "CUTLASS, TensorRT-LLM bmm_*, hipBLASLt/Tensile Cijk_*, rocBLAS, Triton matmul, aten mm ops"),
    FamilyRule("embedding",
               r"^fbgemm_gpu::|^fbgemm::|split_embedding|embedding_bag|embedding_(forward|backward|dense)|"
               r"permute_pooled_embs|recat_copy_async|bounds_check_indices|linearize_index|(^|::|_)jagged|"
               r"^aten::(embedding|embedding_bag|_embedding_bag\w*|embedding_dense_backward)$", "",
               "embedding lookups and the sparse permutes that feed them (fbgemm TBE, torchrec)"),
    FamilyRule("sort/scan",
               r"^(cub|rocprim|thrust|hipcub)::.*(sort|scan|select|compact|bykey|histogram|partition|unique)|"
               r"radix_?sort|bitonic|(^|::|_)(arg)?sort(_|$)|(^|_)topk(_|$)|searchsorted|"
               r"^aten::(sort|argsort|topk|cumsum|cumprod|unique\w*|searchsorted)$", "",
               "device-wide sort, scan, select and top-k (CUB, rocPRIM, Thrust)"),
    FamilyRule("sort/scan", r"^rocprim::.*trampoline_kernel$", r"sort|scan|select|partition|histogram",
               "rocPRIM's generic launcher: the algorithm is named in its template arguments"),
    FamilyRule("reduction",
               r"reduce|reduction|(layer|batch|group|instance|rms|fused_add_rms|weight)_?norm|(^|[_:])bn_(fw|bw)|"
               r"GammaBetaBackward|ClassNLLCriterion|nll_loss|cross_entropy|logsumexp|(^|_)sum(_|$)|"
               r"(^|[_:])(max|avg|adaptive\w*)_?pool|^cub::|^rocprim::|"
               r"^aten::(sum|mean|max|min|amax|amin|argmax|argmin|prod|var|std|norm|vector_norm|all|any|logsumexp|"
               r"max_pool\w*|avg_pool\w*)$|^triton_(red|per)_", "",
               "reductions and normalizations: reduce_kernel, layer/batch/RMS norm, losses, pooling, Triton red/per"),
    FamilyRule("elementwise",
               r"elementwise|multi_tensor_apply|^triton_poi_|(^|::)(index|gather|scatter)\w*|indexSelect|indexFunc|(^|::)triu_tril_kernel$|"
               r"vectorized_gather|act_and_mul|(^|_)(silu|gelu|relu)|rotary|(^|_)rope(_|$)|scalePackedTensor|"
               r"^aten::(add|sub|mul|div|masked_fill|where|exp|log|tanh|relu|gelu|silu|neg|pow|sqrt|rsqrt|tril|triu|"
               r"sigmoid|clamp|clamp_min|ge|le|lt|gt|eq|ne|logical_\w+|threshold|dropout|index\w*|gather|scatter\w*)_?$",
               "", "pointwise work: PyTorch's elementwise launchers, foreach/optimizer kernels, indexing, "
               "activations, rotary embeddings, Triton pointwise (triton_poi_*), tril/triu masks"),
)
_FAMILY_REGEX: tuple[tuple[str, re.Pattern[str], re.Pattern[str] | None], ...] = tuple(
    (r.family, re.compile(r.name, re.IGNORECASE), re.compile(r.template, re.IGNORECASE) if r.template else None)
    for r in FAMILY_RULES
)
FAMILIES: tuple[str, ...] = ("fused attention",) + tuple(dict.fromkeys(r.family for r in FAMILY_RULES)) + ("other",)


@functools.lru_cache(maxsize=1 << 16)
def family_of(name: str) -> str:
    """The family of one kernel or op name: 'fused attention' when a fused row of
    backends.BACKEND_TABLE claims it, else the first FAMILY_RULES row that matches, else 'other'."""
    if is_fused_attention(name):
        return "fused attention"
    parsed = parse(name)
    qualname, template = parsed.qualname, parsed.template_text
    for family, name_re, template_re in _FAMILY_REGEX:
        if name_re.search(qualname) and (template_re is None or template_re.search(template)):
            return family
    return "other"


def _families(names: pl.Series) -> pl.Series:
    """family_of over a column: each distinct name classified once, then mapped back."""
    names = names.cast(pl.String)
    distinct = names.drop_nulls().unique().to_list()
    return names.replace_strict({n: family_of(n) for n in distinct}, default="other", return_dtype=pl.String)


# cpu_ops that do no work of their own, never counted as device work on CPU-only traces:
# profiler and torch.compile bookkeeping, and ops that only make a new view or allocate.
BOOKKEEPING_OPS = r"^(TorchDynamo Cache Lookup|Torch-Compiled Region|Pregraph bytecode|AOTDispatcher|ProfilerStep#|## )"
METADATA_OPS = (
    r"^aten::(view|_unsafe_view|_reshape_alias|reshape|view_as|as_strided|transpose|t|permute|expand|expand_as|"
    r"unsqueeze|squeeze|slice|select|narrow|split|split_with_sizes|chunk|unbind|detach|alias|resolve_conj|"
    r"resolve_neg|empty|empty_like|empty_strided|lift_fresh|contiguous|flatten|unflatten|numpy_T|"
    r"broadcast_tensors|result_type|size|stride|dim|is_same_size|lift)$"
)


def family_expr(name: pl.Expr, cat: pl.Expr | None = None) -> pl.Expr:
    """A polars expression that maps event names to a kernel family (see family_of). GPU memcpy
    events are 'copy' and GPU memset events are 'memset' whatever their name."""
    by_name = name.map_batches(_families, return_dtype=pl.String, is_elementwise=True)
    if cat is None:
        return by_name
    return pl.when(cat == "gpu_memcpy").then(pl.lit("copy")).when(cat == "gpu_memset").then(pl.lit("memset")).otherwise(by_name)


def step_count(trace: Trace) -> int:
    """Number of steps (1 for a trace without ProfilerStep, which is one implicit step)."""
    return max(trace.steps.height, 1)


def work_unit(trace: Trace) -> str:
    """'kernel' when the trace has GPU events, else 'leaf cpu_op'."""
    return UNIT_KERNEL if trace.has_gpu else UNIT_LEAF_OP


@per_trace
def work_events(trace: Trace) -> pl.DataFrame:
    """The units of device work with their family: id, step, cat, name, family, ts_ns, dur_ns,
    device, stream. Kernels/memcpy/memset on a GPU trace; leaf cpu_ops on a CPU-only trace."""
    ev = trace.events
    if trace.has_gpu:
        work = ev.lazy().filter(pl.col("cat").is_in(GPU_CATEGORIES))  # lazy: only the columns selected are filtered
    else:
        work = leaf_work_ops(trace).lazy()
    return work.select(
        "id", "step", "cat", "name", family_expr(pl.col("name"), pl.col("cat")).alias("family"),
        "ts_ns", "dur_ns", "device", "stream",
    ).collect()


def cpu_ops(trace: Trace) -> pl.DataFrame:
    """All cpu_ops except profiler and torch.compile bookkeeping."""
    return trace.events.filter(
        (pl.col("cat") == "cpu_op") & ~names_matching(trace.events["name"], lambda name: name.str.contains(BOOKKEEPING_OPS))
    )


@per_trace
def leaf_work_ops(trace: Trace) -> pl.DataFrame:
    """The units of work of a CPU-only trace: ops that do work (not views, allocations or
    bookkeeping) and hold no other such op. aten::matmul is not one (its aten::bmm is);
    aten::_scaled_dot_product_flash_attention_for_cpu is (its children only allocate and view)."""
    ops = cpu_ops(trace)
    ops = ops.filter(~names_matching(ops["name"], lambda name: name.str.contains(METADATA_OPS)))
    parent = trace.events["parent"].fill_null(-1).to_numpy()
    holds_work = np.zeros(trace.events.height, dtype=bool)
    frontier = parent[ops["id"].to_numpy()]
    while True:
        frontier = frontier[frontier >= 0]
        frontier = frontier[~holds_work[frontier]]  # (np.unique would import numpy.ma: setting a flag twice is harmless)
        if frontier.size == 0:
            break
        holds_work[frontier] = True
        frontier = parent[frontier]
    return ops.filter(~series("holds_work", holds_work[ops["id"].to_numpy()]))


@per_trace
def per_step(trace: Trace) -> pl.DataFrame:
    """One row per step: name, step, kernel, gpu_memcpy, gpu_memset, work (units of device work),
    busy_ns (union of device work intervals on the busiest device; on a CPU-only trace the union
    of all op intervals, since a fused op's own time is not in its leaves), dur_ns (the step's
    CPU span)."""
    work = work_events(trace)
    counts = work.group_by("step").agg(
        (pl.col("cat") == "kernel").sum().alias("kernel"),
        (pl.col("cat") == "gpu_memcpy").sum().alias("gpu_memcpy"),
        (pl.col("cat") == "gpu_memset").sum().alias("gpu_memset"),
        pl.len().alias("work"),
    )
    busy = busy_time(work if trace.has_gpu else cpu_ops(trace))
    table = (
        trace.steps.select("name", "step", "dur_ns")
        .join(counts, on="step", how="left", maintain_order="left")  # the steps' order, not one a join happens to keep
        .join(busy, on="step", how="left", maintain_order="left")
        .with_columns(pl.col("kernel", "gpu_memcpy", "gpu_memset", "work", "busy_ns").fill_null(0))
    )
    return table.select("name", "step", "kernel", "gpu_memcpy", "gpu_memset", "work", "busy_ns", "dur_ns")


def busy_time(work: pl.DataFrame) -> pl.DataFrame:
    """Per step: the length of the union of work intervals on each device (ns), and of those the
    busiest device's: overlapping kernels on two streams count once, and N GPUs working side by
    side take the time of one, not N times it."""
    device = pl.col("device").fill_null(-1)
    return (
        work.filter(pl.col("step").is_not_null())
        .with_columns(device.alias("dev"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"))
        .sort("step", "dev", "ts_ns")
        .with_columns(pl.col("end_ns").cum_max().shift(1).over("step", "dev").alias("covered"))
        .with_columns(
            (pl.col("end_ns") - pl.max_horizontal("ts_ns", pl.col("covered").fill_null(0))).clip(lower_bound=0).alias("new_ns")
        )
        .group_by("step", "dev")
        .agg(pl.col("new_ns").sum())
        .group_by("step")
        .agg(pl.col("new_ns").max().alias("busy_ns"))
    )


@per_trace
def family_per_step(trace: Trace) -> pl.DataFrame:
    """Per step and family: count and total_ns of device work."""
    return (
        work_events(trace)
        .filter(pl.col("step").is_not_null())
        .group_by("step", "family")
        .agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total_ns"))
        .sort("step", "family")
    )


@per_trace
def kernel_table(trace: Trace) -> pl.DataFrame:
    """One row per kernel name (leaf op name on CPU traces) over all steps: name, family, count,
    per_step (count / steps), total_ns, mean_ns, share (of all device work time, 0..1)."""
    work = work_events(trace).filter(pl.col("step").is_not_null())
    steps = step_count(trace)
    total = work["dur_ns"].sum() or 1
    return (
        work.group_by("name", "family")
        .agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total_ns"))
        .with_columns(
            pl.col("name").cast(pl.String),
            (pl.col("count") / steps).alias("per_step"),
            (pl.col("total_ns") / pl.col("count")).alias("mean_ns"),
            (pl.col("total_ns") / total).alias("share"),
        )
        .sort(["total_ns", "name", "family"], descending=[True, False, False], nulls_last=True)  # ties in a fixed order
        .select("name", "family", "count", "per_step", "total_ns", "mean_ns", "share")
    )
