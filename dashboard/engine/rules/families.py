"""Kernel families by function name (FAMILY_RULES; kernels.family_of reads them, a user's rows
first: user.family_rules)."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.engine.rules.calls import KV_CACHE_WRITE_KERNELS
from dashboard.engine.rules.collectives import COLLECTIVE_KERNELS


@dataclass(frozen=True)
class FamilyRule:
    """One row of FAMILY_RULES: names whose function name (names.parse(...).qualname: namespace::base,
    without return type, parameters or template arguments) matches `name`, and, when `template` is
    set, whose template arguments match it too, are `family`. Patterns are case-insensitive."""

    family: str
    name: str
    template: str
    reason: str
    source: str = ""


# What a kernel (or, on a CPU-only trace, an op) is, by its own function name. One ordered table
# for GPU kernels and CPU ops alike; the first rule that matches wins. The 'fused attention' family
# is not in it: it is BACKEND_TABLE's fused rows, checked first (see kernels.family_of). A user's
# rows (family_rules) come after the fused rows and before these.
FAMILY_RULES: tuple[FamilyRule, ...] = (
    FamilyRule(
        "communication",
        COLLECTIVE_KERNELS,
        "",
        "collectives (COLLECTIVES' kernel rows): NCCL/RCCL device kernels, c10d ops, custom all-reduce; "
        "before 'reduce' below",
    ),
    FamilyRule(
        "memset",
        r"^memset|(^|_)memset$|^__amd_rocclr_fill|^aten::(zero_|fill_)$",
        "",
        "buffer fills: Memset rows of legacy traces, ROCm's blit fill kernels, zero_/fill_ ops",
    ),
    FamilyRule(
        "copy",
        r"^memcpy|^__amd_rocclr_copy|(^|::)CatArrayBatchedCopy|(^|::)(nchwToNhwc|nhwcToNchw)|"
        r"^aten::(copy_|clone|contiguous|cat)$",
        "",
        "data movement: memcpy rows, ROCm blit copies, torch.cat, layout transposes",
    ),
    FamilyRule(
        "copy",
        KV_CACHE_WRITE_KERNELS,
        "",
        "KV-cache writes (KV_CACHE_WRITES: vLLM's reshape_and_cache*, SGLang's store_kvcache)",
    ),
    FamilyRule(
        "copy",
        r"^at::native::\w*elementwise\w*$",
        r"copy_kernel_cuda|copy_device_to_device",
        "PyTorch's elementwise launcher running a copy functor (direct_copy_kernel_cuda: copy_ and dtype casts)",
    ),
    FamilyRule(
        "copy",
        r"(^|::)multi_tensor_apply_kernel$",
        r"(^|\W)Copy<",
        "torch._foreach_copy_'s launcher running its Copy functor (e.g. a CUDA graph's input copies)",
    ),
    FamilyRule(
        "softmax", r"softmax", "", "softmax kernels and ops (cunn_SoftMaxForward, softmax_warp_forward, _softmax)"
    ),
    FamilyRule(
        "convolution",
        r"convol|conv(?!ert|ers)|winograd|scudnn|im2col|col2im|(^|[_:])(fprop|dgrad|wgrad)|^cask_cudnn|igemm_(fwd|bwd|wrw)",
        "",
        "cuDNN/MIOpen/CUTLASS convolutions and their helpers; before gemm (implicit_convolve_sgemm is a conv)",
    ),
    FamilyRule(
        "reduction",
        r"finalizeMoeRouting|_finalize_matmul|(^|::)moe_sum",
        "",
        "MoE finalize: sums each token's top-k expert outputs; before gemm ('matmul' in the name)",
    ),
    FamilyRule(
        "gemm",
        r"(?<!fb)gemm|gemv|^cutlass_|cublas|nvjet|wgmma|xmma|^cijk_|matmul|^bmm_|^epilogue::impl::|splitkreduce|"
        r"^rocblas_|^hipblaslt|^aten::(mm|bmm|addmm|baddbmm|linear|matmul|addmv|mv|_scaled_mm|_int_mm)$|"
        r"^triton_tem_fused_(mm|bmm|addmm)",
        "",
        "matrix multiplies: cuBLAS/cuBLASLt (sm90_xmma_gemm, ampere_*gemm, nvjet, split-K reduce and epilogue), "
        "CUTLASS, TensorRT-LLM bmm_*, hipBLASLt/Tensile Cijk_*, rocBLAS, Triton matmul, aten mm ops",
    ),
    FamilyRule(
        "embedding",
        r"^fbgemm_gpu::|^fbgemm::|split_embedding|embedding_bag|embedding_(forward|backward|dense)|"
        r"permute_pooled_embs|recat_copy_async|bounds_check_indices|linearize_index|(^|::|_)jagged|"
        r"^aten::(embedding|embedding_bag|_embedding_bag\w*|embedding_dense_backward)$",
        "",
        "embedding lookups and the sparse permutes that feed them (fbgemm TBE, torchrec)",
    ),
    FamilyRule(
        "sort/scan",
        r"^(cub|rocprim|thrust|hipcub)::.*(sort|scan|select|compact|bykey|histogram|partition|unique)|"
        r"radix_?sort|bitonic|(^|::|_)(arg)?sort(_|$)|(^|_)topk(_|$)|searchsorted|"
        r"^aten::(sort|argsort|topk|cumsum|cumprod|unique\w*|searchsorted)$",
        "",
        "device-wide sort, scan, select and top-k (CUB, rocPRIM, Thrust)",
    ),
    FamilyRule(
        "sort/scan",
        r"^rocprim::.*trampoline_kernel$",
        r"sort|scan|select|partition|histogram",
        "rocPRIM's generic launcher: the algorithm is named in its template arguments",
    ),
    FamilyRule(
        "reduction",
        r"reduce|reduction|(layer|batch|group|instance|rms|fused_add_rms|weight)_?norm|(^|[_:])bn_(fw|bw)|"
        r"GammaBetaBackward|ClassNLLCriterion|nll_loss|cross_entropy|logsumexp|(^|_)sum(_|$)|"
        r"(^|[_:])(max|avg|adaptive\w*)_?pool|^cub::|^rocprim::|"
        r"^aten::(sum|mean|max|min|amax|amin|argmax|argmin|prod|var|std|norm|vector_norm|all|any|logsumexp|"
        r"max_pool\w*|avg_pool\w*)$|^triton_(red|per)_",
        "",
        "reductions and normalizations: reduce_kernel, layer/batch/RMS norm, losses, pooling, Triton red/per",
    ),
    FamilyRule(
        "elementwise",
        r"elementwise|multi_tensor_apply|^triton_poi_|(^|::)(index|gather|scatter)\w*|indexSelect|indexFunc|(^|::)triu_tril_kernel$|"
        r"vectorized_gather|act_and_mul|(^|_)(silu|gelu|relu)|rotary|(^|_)rope(_|$)|scalePackedTensor|"
        r"^aten::(add|sub|mul|div|masked_fill|where|exp|log|tanh|relu|gelu|silu|neg|pow|sqrt|rsqrt|tril|triu|"
        r"sigmoid|clamp|clamp_min|ge|le|lt|gt|eq|ne|logical_\w+|threshold|dropout|index\w*|gather|scatter\w*)_?$",
        "",
        "pointwise work: PyTorch's elementwise launchers, foreach/optimizer kernels, indexing, "
        "activations, rotary embeddings, Triton pointwise (triton_poi_*), tril/triu masks",
    ),
)
FAMILIES: tuple[str, ...] = ("fused attention",) + tuple(dict.fromkeys(r.family for r in FAMILY_RULES)) + ("other",)
