"""Name rules: the tables that say what an op or kernel name means, each row with its reason and source.

Moved here from the modules that read them, so that a rule is written once and no analysis
imports another only for its table (kernels.family_of reads the attention-backend table; the
backends analysis reads kernels.family_of: kept in one module, the two formed an import circle).

    BACKEND_TABLE     attention backends by op and kernel name (backends.py, kernels.family_of)
    FAMILY_RULES      kernel families by function name (kernels.family_of); its 'communication'
                      row is COLLECTIVES' kernel rows, its KV-cache part KV_CACHE_WRITES
    COLLECTIVES       collectives: kernels (the 'communication' family) and the CPU ops of a
                      copy's op chain (copies.py's 'communication' class)
    KV_CACHE_WRITES   copy kernels that write a KV cache (copies.py: requested, not hidden)
    CALL_PARTS        attention kernels that are one part of a call whose main kernel is another
                      (quantization before it, a split-KV merge after it: efficiency.attention_calls)
    LAUNCH_CALLS      host calls that launch a CUDA/HIP graph or one kernel (graphs.py, diff.readings)
    HOST_CATEGORIES   the host-side categories the timeline draws and op_diff compares, besides
                      the launch calls (diff.py)

A user adds rows to BACKEND_TABLE, FAMILY_RULES and COLLECTIVES from files named by
ATTNSCOPE_RULES (settings.RULES; TOML or JSON, read once, tried before the built-in rows):
see read_rules and docs/design.md, section "Name rules". tests/test_rules.py checks that the
tables agree with each other.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from dataclasses import dataclass

from dashboard.engine.model import settings
from dashboard.engine.rules.names import parse


@dataclass(frozen=True)
class AttentionBackend:
    """One row of BACKEND_TABLE. op / kernel: regular expressions (case-sensitive) over the
    function name of a cpu_op or a kernel (names.parse(...).qualname: no return type, parameters or
    template arguments; a generic launcher's kernel argument for cutlass::device_kernel and
    ck_tile::kentry); '' when the backend shows no such name. fused: one kernel does the whole
    attention (false for the unfused math path). source: where the names were read (repository and
    path of the library's own sources, or the trace they were seen in); docs/design.md, section
    "Attention kernels", lists the same."""

    name: str
    op: str
    kernel: str
    library: str
    vendor: str
    fused: bool = True
    source: str = ""
    reason: str = ""  # a user's row (ATTNSCOPE_RULES): why; the built-in rows say it in `library`

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compiled(self.op, self.kernel)


# Every attention implementation the engine recognises, in the order they are reported. A name
# belongs to the first row it matches (so a row whose names another row's broader pattern would
# also take comes before it: flashmla before flash-attn, sage and flex before triton). The
# kernels.family_of 'fused attention' family is exactly the names of the fused rows, so the
# Kernels tab and the Backends tab cannot disagree.
BACKEND_TABLE: tuple[AttentionBackend, ...] = (
    AttentionBackend(
        "cpu_flash",
        r"^aten::_scaled_dot_product_flash_attention_for_cpu(_backward)?$",
        "",
        "PyTorch SDPA, flash attention for CPU",
        "CPU (any)",
        source="pytorch/pytorch aten/src/ATen/native/native_functions.yaml",
    ),
    AttentionBackend(
        "flash",
        r"^aten::(_scaled_dot_product_flash_attention(_backward)?|_flash_attention_(forward|backward))$",
        r"^pytorch_flash::",
        "PyTorch SDPA flash backend (PyTorch's copy of FlashAttention-2, pytorch_flash::flash_fwd_kernel)",
        "NVIDIA; on ROCm the same op runs AOTriton or CK kernels",
        source="pytorch/pytorch aten/src/ATen/native/native_functions.yaml; "
        "aten/src/ATen/native/transformers/cuda/flash_attn/ (namespace pytorch_flash); tests/data/tracelens_h100_*",
    ),
    AttentionBackend(
        "efficient",
        r"^aten::(_scaled_dot_product_efficient_attention(_backward)?|_efficient_attention_(forward|backward))$",
        r"^fmha_cutlass[FB]\w*$|^PyTorchMemEffAttention::",
        "PyTorch SDPA memory-efficient backend (xFormers' CUTLASS kernels, fmha_cutlassF_*)",
        "NVIDIA",
        source="pytorch/pytorch aten/src/ATen/native/transformers/cuda/mem_eff_attention/kernels/ (fmha_cutlassF_*)",
    ),
    AttentionBackend(
        "cudnn",
        r"^aten::(_scaled_dot_product_cudnn_attention(_backward)?|_cudnn_attention_(forward|backward))$",
        r"^cudnn\w*_sdpa",
        "PyTorch SDPA cuDNN backend (cudnn_generated_fort_native_sdpa_*, launched by cuLaunchKernelEx)",
        "NVIDIA",
        source="pytorch/pytorch aten/src/ATen/native/cudnn/MHA.cpp; kernel names as cuDNN's runtime compiler emits them in H100/H200 traces",
    ),
    AttentionBackend(
        "math",
        r"^aten::_scaled_dot_product_attention_math(_for_mps)?$",
        "",
        "PyTorch SDPA math path: unfused bmm + softmax kernels",
        "any",
        fused=False,
        source="pytorch/pytorch aten/src/ATen/native/native_functions.yaml",
    ),
    AttentionBackend(
        "sage",
        r"^_FAv3SageWrapperFunc$",
        r"^sage_fwd\w*$|^sage_quant\w*_kernel$|^qk_int_sv_f(8|16)\w*_attn_kernel$|"
        r"^quant_(per_block|query_per_thread|key_per_thread)_int[48]_kernel$|^sageattn_quant\w*_kernel$",
        "SageAttention (INT8 Q/K, FP8/FP16 P*V) and SpargeAttn: Triton sage_fwd and sage_quant_kernel (ROCm aiter), "
        "CUDA qk_int_sv_f8/f16_*attn_kernel, Triton quant_per_block_int8_kernel; the quantization kernels are part "
        "of the attention's device time (CALL_PARTS: one call with them); aiter's wrapper is an autograd.Function, "
        "whose apply the profiler records as a cpu_op of the class's name with the tensors' shapes",
        "NVIDIA, AMD",
        source="ROCm/aiter aiter/ops/triton/_triton_kernels/attention/fav3_sage_attention.py (sage_fwd*) and its quant "
        "module (sage_quant_kernel), aiter/ops/triton/attention/fav3_sage.py (_FAv3SageWrapperFunc); "
        "thu-ml/SageAttention csrc/qattn/qk_int_sv_f8_cuda_sm89.cuh, "
        "csrc/qattn/qk_int_sv_f16_cuda_sm80.cuh, sageattention/triton/quant_per_block.py, quant_per_thread.py",
    ),
    AttentionBackend(
        "flex",
        "",
        r"^triton_tem_fused_\w*flex_attention\w*$",
        "FlexAttention compiled by inductor: one Triton template kernel per call, triton_tem_fused_flex_attention_<n> "
        "(and ..._flex_attention_backward_<n>; flex decoding uses the same op name). On CPU the C++ template kernel "
        "records no name of its own: a collectors' flex trace is recognised by its metadata (see detect_backends)",
        "any (inductor)",
        source="pytorch/pytorch torch/_inductor/kernel/flex/flex_attention.py (TritonTemplate name='flex_attention'), "
        "torch/_inductor/codegen/triton.py define_kernel (triton_<category>_<fused op names>_<n>, category 'tem')",
    ),
    AttentionBackend(
        "flashmla",
        r"^_flashmla_C::",
        r"^(flash::)?flash_fwd_\w*mla\w*$",
        "FlashMLA (DeepSeek multi-head latent attention decode): flash_fwd_splitkv_mla_kernel and its combine kernel",
        "NVIDIA, AMD (aiter port)",
        source="deepseek-ai/FlashMLA csrc/flash_fwd_mla_kernel.h (flash::flash_fwd_splitkv_mla_kernel, "
        "flash_fwd_splitkv_mla_combine_kernel); vllm-project/vllm vllm/attention/ops/flashmla.py (_flashmla_C ops)",
    ),
    AttentionBackend(
        "flash-attn",
        r"^flash_attn(_3)?::|^_vllm_fa\d_C::",
        r"^(flash::)?flash_(fwd|bwd)\w*$|^flash::(FlashAttn\w*|flash_\w+)$|flash_attncute",
        "FlashAttention 2/3/4 (Dao-AILab flash-attn and its vLLM fork): flash::flash_fwd_kernel, "
        "flash::FlashAttnFwdSm90 (under cutlass::device_kernel), CuTe-DSL flash_attncute kernels",
        "NVIDIA",
        source="Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_launch_template.h, "
        "hopper/flash_fwd_launch_template.h, flash_attn/cute/; vllm-project/flash-attention",
    ),
    AttentionBackend(
        "hub",
        r"^_flash_attn\w*::|^_?kernels_community\w*::",
        "",
        "Hugging Face kernels hub (an op namespace per build hash, e.g. _flash_attn_<hash>::fwd; "
        "its kernels are FlashAttention's, reported as flash-attn)",
        "NVIDIA",
        source="huggingface/kernels (ops registered as _<name>_<build hash>::); kernels-community/flash-attn",
    ),
    AttentionBackend(
        "aotriton",
        "",
        r"^attn_fwd$|^attn_bwd\w*$|^bwd_kernel_(dk_dv|dq|fuse)$|^bwd_preprocess(_varlen)?$",
        "AOTriton (ahead-of-time compiled Triton): PyTorch's flash and memory-efficient SDPA on ROCm",
        "AMD",
        source="ROCm/aotriton tritonsrc/fwd_kernel.py, bwd_kernel_dk_dv.py, bwd_kernel_dq.py, bwd_preprocess.py",
    ),
    AttentionBackend(
        "ck",
        r"^aiter::(mha|fmha)_\w*$",
        r"^ck_tile::Fmha\w*$|^ck::\w*([Ff]mha|[Mm]ultihead_?[Aa]ttention)\w*$|^fmha_(fwd|bwd)_\w*$",
        "Composable Kernel FMHA (ck_tile::Fmha*Kernel under ck_tile::kentry, often mangled; "
        "also through AMD aiter's mha ops)",
        "AMD",
        source="ROCm/composable_kernel include/ck_tile/ops/fmha/kernel/; ROCm/aiter csrc/ (mha_* ops); "
        "tests/data/tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz",
    ),
    AttentionBackend(
        "flashinfer",
        r"^flashinfer::\w*(prefill|decode|attention|mla)\w*$",
        r"^(flashinfer::(\w+::)*)?(Batch|Single)(Prefill|Decode)With\w*KVCache\w*$|"
        r"^flashinfer::(\w+::)*\w*(Attention|MLA|MergeStates)\w*$",
        "FlashInfer (BatchPrefillWithPagedKVCacheKernel, BatchDecodeWithPagedKVCacheKernel, MLA, merge states)",
        "NVIDIA",
        source="flashinfer-ai/flashinfer include/flashinfer/attention/prefill.cuh, decode.cuh, mla.cuh, cascade.cuh",
    ),
    AttentionBackend(
        "trtllm",
        r"^trtllm::attention\w*$",
        r"^fmhaSm\d+\w*Kernel|^fmha_v2_\w+$|(^|::)masked_multihead_attention_kernel\w*$|(^|::)xqa_kernel\w*$|^kernel_mha$",
        "TensorRT-LLM attention: trtllm-gen fmhaSm90/Sm100 kernels (also shipped in FlashInfer), fmha_v2, "
        "masked multi-head attention, XQA; its PyTorch path's trtllm::attention / attention_inplace ops",
        "NVIDIA",
        source="NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/trtllmGenKernels/fmha/, contextFusedMultiHeadAttention/, "
        "decoderMaskedMultiheadAttention/, xqaDispatcher.cpp; cpp/tensorrt_llm/thop/attentionOp.cpp (trtllm:: ops)",
    ),
    AttentionBackend(
        "vllm-paged",
        r"^_(rocm_)?C::paged_attention\w*$",
        r"^(vllm::)?paged_attention_(v[12]|ll4mi)\w*$",
        "vLLM paged attention (paged_attention_v1/v2_kernel; ll4mi on ROCm)",
        "NVIDIA, AMD",
        source="vllm-project/vllm csrc/attention/paged_attention_v1.cu, paged_attention_v2.cu, csrc/rocm/attention.cu",
    ),
    AttentionBackend(
        "triton-decode",
        "",
        r"^_fwd_(grouped_)?kernel_stage[12](_\w+)?$",
        "Triton split-KV decode attention of LightLLM lineage, used by SGLang and vLLM (MLA decode included): "
        "_fwd_kernel_stage1 / _fwd_grouped_kernel_stage1 then the _fwd_kernel_stage2 merge",
        "any (Triton)",
        source="sgl-project/sglang python/sglang/srt/layers/attention/triton_ops/decode_attention.py; "
        "vllm-project/vllm vllm/attention/ops/triton_decode_attention.py",
    ),
    AttentionBackend(
        "thunderkittens",
        "",
        r"^(fwd_|bwd_)?attend_(prep_)?ker\w*$",
        "ThunderKittens attention kernels (attend_ker, fwd_attend_ker, bwd_attend_prep_ker, bwd_attend_ker)",
        "NVIDIA, AMD",
        source="HazyResearch/ThunderKittens kernels/attn/h100/h100.cu, kernels/attn/demo/; HazyResearch/HipKittens",
    ),
    AttentionBackend(
        "xformers",
        r"^xformers(_flash\d?)?::",
        "",
        "xFormers ops (its CUTLASS kernels carry the same fmha_cutlassF_* names as PyTorch's and count as efficient)",
        "NVIDIA, AMD",
        source="facebookresearch/xformers xformers/csrc/attention/attention.cpp (efficient_attention_forward_cutlass / _ck), "
        "xformers/ops/fmha/flash.py (xformers_flash::)",
    ),
    AttentionBackend(
        "vllm",
        r"^vllm::unified(_mla)?_attention(_with_output)?$",
        "",
        "vLLM's attention layer op (unified_attention / unified_attention_with_output; MLA variants): the op around "
        "whatever backend kernel vLLM picked, which its own row names",
        "any",
        source="vllm-project/vllm vllm/attention/layer.py (direct_register_custom_op op_name='unified_attention_with_output')",
    ),
    AttentionBackend(
        "sglang",
        r"^sglang::unified(_sparse)?_attention_with_output(_and_lse)?$",
        "",
        "SGLang's attention layer op (RadixAttention under piecewise CUDA graphs): the op around the backend's kernel",
        "any",
        source="sgl-project/sglang python/sglang/srt/layers/radix_attention.py (register_custom_op unified_attention_with_output)",
    ),
    AttentionBackend(
        "triton",
        "",
        r"^triton_\w*(attention|attn|flash|sdpa|fmha)|^kernel_(unified|paged)_attention_[23]d$|^reduce_segments$|^_attn_(fwd|bwd)\w*$",
        "Triton kernels named for attention: vLLM's kernel_unified_attention_2d/3d (with reduce_segments, which merges "
        "the 3d kernel's KV segments), the Triton tutorial's _attn_fwd, generated triton_*attention* kernels",
        "any (Triton)",
        source="vllm-project/vllm vllm/attention/ops/triton_unified_attention.py; triton-lang/triton "
        "python/tutorials/06-fused-attention.py; tests/data/tracelens_vllm_decode_graph_unified_attention.json.gz",
    ),
)
BACKEND_NAMES: tuple[str, ...] = tuple(b.name for b in BACKEND_TABLE)
BACKENDS: tuple[str, ...] = BACKEND_NAMES + ("inductor", "eager")
"""Every attention backend a run can show: the fused and math backends of the table, then
"inductor" (a compiled graph's own attention) and "eager" (matmul -> softmax -> matmul)."""


@functools.lru_cache(maxsize=None)
def _compiled(op: str, kernel: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in (op, kernel) if p) or "(?!)")


@functools.lru_cache(maxsize=1 << 16)
def attention_backend(name: str) -> AttentionBackend | None:
    """The backend_table() row an op or kernel name belongs to (first match: a user's rows, then
    BACKEND_TABLE), or None. The row's patterns are matched against the name's function name
    (names.parse), not the raw text."""
    qualname = parse(name).qualname
    return next((row for row in backend_table() if row.pattern.search(qualname)), None)


def is_fused_attention(name: str) -> bool:
    """True for the ops and kernels of a fused attention backend (every row but math)."""
    row = attention_backend(name)
    return row is not None and row.fused


# ---------------------------------------------------------------- collectives


@dataclass(frozen=True)
class Collective:
    """One row of COLLECTIVES: a regular expression (case-insensitive) for a collective or its
    staging. kernel: matched against a kernel's (or, on a CPU-only trace, a leaf op's) function
    name (names.parse(...).qualname), giving the 'communication' kernel family; op: matched against
    the raw name of each CPU op of a copy's op chain, giving the copy's 'communication' class.
    examples: names the row must take (tests/test_rules.py checks them against both tables)."""

    pattern: str
    kernel: bool
    op: bool
    reason: str
    source: str
    examples: tuple[str, ...] = ()


COLLECTIVES: tuple[Collective, ...] = (
    Collective(
        r"^(nccl|rccl|msccl)",
        True,
        False,
        "NCCL, RCCL and MSCCL device kernels (ncclDevKernel_*, ncclKernel_*)",
        "NVIDIA/nccl src/device/generate.py (ncclDevKernel_<coll>_<op>_<type>_<algo>_<proto>); ROCm/rccl; "
        "microsoft/msccl",
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
        ),
    ),
    Collective(
        r"^c10d::",
        True,
        True,
        "PyTorch's c10d dispatcher ops (c10d::allreduce_, c10d::broadcast_, ...)",
        "pytorch/pytorch torch/csrc/distributed/c10d/Ops.cpp",
        ("c10d::allreduce_", "c10d::broadcast_"),
    ),
    Collective(
        r"^_?c10d_functional::",
        False,
        True,
        "functional collectives (torch.distributed._functional_collectives, compiled graphs' collectives)",
        "pytorch/pytorch torch/csrc/distributed/c10d/Functional.cpp",
        ("_c10d_functional::all_gather_into_tensor", "c10d_functional::wait_tensor"),
    ),
    Collective(
        r"^nccl:",
        False,
        True,
        "ProcessGroupNCCL's record_function ranges (nccl:all_reduce, nccl:_all_gather_base, ...)",
        "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
        ("nccl:all_reduce", "nccl:broadcast"),
    ),
    Collective(
        r"^gloo:",
        False,
        True,
        "ProcessGroupGloo's record_function ranges (gloo:all_reduce, ...)",
        "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupGloo.cpp",
        ("gloo:all_reduce",),
    ),
    Collective(
        r"^record_param_comms$",
        False,
        True,
        "the profiler's record of a collective's parameters (RECORD_PARAM_COMMS), around its launch",
        "pytorch/pytorch torch/csrc/distributed/c10d/ParamCommsUtils.hpp",
        ("record_param_comms",),
    ),
    Collective(
        r"torch\.distributed|ddp\.reducer",
        False,
        True,
        "torch.distributed's Python calls and DDP's reducer, which copies gradient buckets for the all-reduce",
        "pytorch/pytorch torch/nn/parallel/distributed.py, torch/csrc/distributed/c10d/reducer.cpp",
        ("torch.distributed.ddp.reducer::copy_bucket_to_grad",),
    ),
    Collective(
        r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all",
        True,
        True,
        "a collective's verb anywhere in the name: custom all-reduce kernels, vLLM/SGLang all-gather ops",
        "the collectives' names in NCCL, torch.distributed and the serving frameworks",
        ("vllm::all_reduce", "_C_custom_ar::all_reduce"),
    ),
    Collective(
        r"^All2All",
        False,
        True,
        "TorchRec's all-to-all autograd functions (All2All_Pooled_Req, All2All_Seq_Req_Wait, ...)",
        "pytorch/torchrec torchrec/distributed/comm_ops.py",
        ("All2All_Pooled_Req",),
    ),
    Collective(
        r"^(vllm::)?cross_device_reduce",
        True,
        False,
        "vLLM's custom all-reduce kernels (cross_device_reduce_1stage / _2stage)",
        "vllm-project/vllm csrc/custom_all_reduce.cuh",
        (
            "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
            "vllm::Signal*, __nv_bfloat16*, int, int)",
        ),
    ),
    Collective(
        r"^deep_ep::",
        True,
        False,
        "DeepEP's expert-parallel dispatch and combine kernels",
        "deepseek-ai/DeepEP csrc/kernels/",
        ("deep_ep::intranode::dispatch",),
    ),
    Collective(
        r"^nvshmem",
        True,
        False,
        "NVSHMEM's device-side communication kernels",
        "NVIDIA NVSHMEM (nvshmem* / nvshmemi_* kernels)",
    ),
)


def _joined(patterns: list[str]) -> str:
    """One regular expression that matches where any of `patterns` does."""
    return "|".join(f"(?:{p})" for p in patterns) or "(?!)"


COLLECTIVE_KERNELS = _joined([c.pattern for c in COLLECTIVES if c.kernel])
"""COLLECTIVES' kernel rows as one pattern: FAMILY_RULES' 'communication' row."""
COLLECTIVE_OPS = _joined([c.pattern for c in COLLECTIVES if c.op])
"""COLLECTIVES' op rows as one pattern (case-insensitive; is_collective_op adds a user's rows)."""


# ---------------------------------------------------------------- KV-cache writes


@dataclass(frozen=True)
class NameRule:
    """A row of a table of one kind of name: pattern (a regular expression over the function name,
    names.parse(...).qualname, case-insensitive), reason, source, and examples it must take."""

    pattern: str
    reason: str
    source: str
    examples: tuple[str, ...] = ()


# Kernels that write keys and values into a KV cache: the serving framework's attention op doing
# what it exists for, so copies.py counts them as requested, never hidden. They are copy kernels:
# FAMILY_RULES' copy rows include this table, so a name taken here is always in the copy family.
KV_CACHE_WRITES: tuple[NameRule, ...] = (
    NameRule(
        r"(^|::)reshape_and_cache",
        "vLLM's KV-cache write (reshape_and_cache_kernel, reshape_and_cache_flash_kernel)",
        "vllm-project/vllm csrc/cache_kernels.cu; tests/data/tracelens_vllm_decode_graph_unified_attention.json.gz",
        (
            "void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0>"
            "(__hip_bfloat16 const*, long const*, int)",
        ),
    ),
    NameRule(
        r"(^|::)store_kvcache",
        "SGLang's KV-cache write (store_kvcache, its jit_kernel kvcache.store_cache)",
        "sgl-project/sglang python/sglang/jit_kernel/kvcache.py; "
        "tests/data/tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz",
        (
            "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)",
        ),
    ),
)
KV_CACHE_WRITE_KERNELS = _joined([r.pattern for r in KV_CACHE_WRITES])


@functools.lru_cache(maxsize=1 << 16)
def is_kv_cache_write(name: str) -> bool:
    """True for a kernel that writes a KV cache (KV_CACHE_WRITES, over its function name)."""
    return _KV_CACHE_WRITE.search(parse(name).qualname) is not None


_KV_CACHE_WRITE = re.compile(KV_CACHE_WRITE_KERNELS, re.IGNORECASE)


# ---------------------------------------------------------------- parts of one attention call


@dataclass(frozen=True)
class CallPart:
    """One row of CALL_PARTS: attention kernels (BACKEND_TABLE's fused rows) whose function name
    (names.parse(...).qualname, case-sensitive) matches `pattern` are a part of the call of another
    kernel: `before` (True) the next attention kernel on their device and stream, else the one
    before it. examples: names the row must take."""

    pattern: str
    before: bool
    reason: str
    source: str
    examples: tuple[str, ...] = ()


# An attention call is one call, however many kernels it launches. Under an attention op the op
# says which kernels are one call; these rows say it where no op does (a graph replay, a library
# that records no op), so that a quantization kernel is not counted as a call of its own.
CALL_PARTS: tuple[CallPart, ...] = (
    CallPart(
        r"^sage_quant\w*_kernel$|^quant_(per_block|query_per_thread|key_per_thread)_int[48]_kernel$|"
        r"^sageattn_quant\w*_kernel$",
        True,
        "SageAttention quantizes Q and K (INT8) and V (FP8) in kernels of their own, then runs the attention "
        "kernel on them: one call, quantize and attention kernels together",
        "ROCm/aiter aiter/ops/triton/attention/fav3_sage.py (sage_quant, then sage_fwd); thu-ml/SageAttention "
        "sageattention/triton/quant_per_block.py, quant_per_thread.py",
        ("sage_quant_kernel", "quant_per_block_int8_kernel", "quant_key_per_thread_int8_kernel"),
    ),
    CallPart(
        r"^reduce_segments$",
        False,
        "vLLM's Triton unified attention: the 3d kernel splits the keys into segments, reduce_segments merges them",
        "vllm-project/vllm vllm/attention/ops/triton_unified_attention.py; "
        "tests/data/tracelens_vllm_decode_graph_unified_attention.json.gz",
        ("reduce_segments",),
    ),
    CallPart(
        r"^_fwd_kernel_stage2(_\w+)?$",
        False,
        "Triton split-KV decode (SGLang, vLLM): stage 1 computes each split, stage 2 merges them",
        "sgl-project/sglang python/sglang/srt/layers/attention/triton_ops/decode_attention.py",
        ("_fwd_kernel_stage2",),
    ),
    CallPart(
        r"(^|::)flash_fwd_splitkv(_mla)?_combine_kernel$",
        False,
        "FlashAttention's and FlashMLA's split-KV forward: the combine kernel merges the splits' partial outputs",
        "Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_kernel.h (combine_attn_seqk_parallel); "
        "deepseek-ai/FlashMLA csrc/flash_fwd_mla_kernel.h",
        (
            "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
            "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, 4, 1, true>"
            "(flash::Flash_fwd_params)",
            "void flash::flash_fwd_splitkv_mla_combine_kernel<cutlass::bfloat16_t, 512, 64>(Flash_fwd_mla_params)",
        ),
    ),
)


@functools.lru_cache(maxsize=1 << 16)
def call_part(name: str) -> bool | None:
    """For a kernel that is a part of another kernel's attention call (CALL_PARTS): True when it
    comes before that kernel, False when after; None for any other name."""
    qualname = parse(name).qualname
    return next((row.before for row in CALL_PARTS if re.search(row.pattern, qualname)), None)


# ---------------------------------------------------------------- kernel families


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


# ---------------------------------------------------------------- launch calls


@dataclass(frozen=True)
class LaunchCall:
    """One row of LAUNCH_CALLS: a host runtime call that queues device work, as the profiler names
    it (matched as a prefix: cuLaunchKernelEx is cuLaunchKernel's). kind: 'graph' (one call replays
    a captured graph: many kernels under one correlation id) or 'kernel' (one kernel)."""

    name: str
    kind: str
    vendor: str
    reason: str
    source: str


LAUNCH_CALLS: tuple[LaunchCall, ...] = (
    LaunchCall(
        "cudaGraphLaunch",
        "graph",
        "NVIDIA",
        "the CUDA runtime's graph replay (torch.cuda.CUDAGraph.replay)",
        "CUDA runtime API; Kineto cat cuda_runtime",
    ),
    LaunchCall(
        "cuGraphLaunch", "graph", "NVIDIA", "the CUDA driver's graph replay", "CUDA driver API; Kineto cat cuda_driver"
    ),
    LaunchCall(
        "hipGraphLaunch",
        "graph",
        "AMD",
        "HIP's graph replay (PyTorch's CUDA graphs on ROCm)",
        "ROCm HIP runtime API; roctracer through Kineto",
    ),
    LaunchCall(
        "cudaLaunchKernel",
        "kernel",
        "NVIDIA",
        "the CUDA runtime's kernel launch (and cudaLaunchKernelExC)",
        "CUDA runtime API",
    ),
    LaunchCall(
        "cuLaunchKernel",
        "kernel",
        "NVIDIA",
        "the CUDA driver's kernel launch (and cuLaunchKernelEx: cuDNN, Triton)",
        "CUDA driver API",
    ),
    LaunchCall("hipLaunchKernel", "kernel", "AMD", "HIP's kernel launch", "ROCm HIP runtime API"),
    LaunchCall(
        "hipExtModuleLaunchKernel",
        "kernel",
        "AMD",
        "HIP's module launch with extra arguments (hipBLASLt, Tensile)",
        "ROCm HIP runtime API",
    ),
    LaunchCall("hipModuleLaunchKernel", "kernel", "AMD", "HIP's module launch (Triton, CK)", "ROCm HIP runtime API"),
)
LAUNCH_KINDS = ("graph", "kernel")


def launch_pattern(kind: str) -> str:
    """The names of LAUNCH_CALLS of one kind as a regular expression over a call's name (a prefix match)."""
    if kind not in LAUNCH_KINDS:
        raise ValueError(f"kind must be one of {', '.join(LAUNCH_KINDS)}")
    return "^(" + "|".join(re.escape(c.name) for c in LAUNCH_CALLS if c.kind == kind) + ")"


GRAPH_LAUNCH = launch_pattern("graph")  # graphs.py, diff.readings
KERNEL_LAUNCH = launch_pattern("kernel")  # diff.readings


# ---------------------------------------------------------------- host categories


@dataclass(frozen=True)
class HostCategory:
    """One row of HOST_CATEGORIES: an event category (after normalization) of the host side."""

    category: str
    reason: str
    source: str


# The host side of a step as the timeline draws it and op_diff compares it, besides the launch
# calls (model.LAUNCH_CATEGORIES, every vendor's, which diff.py adds): ops and annotations.
# python_function spans (with_stack) are left out: one per Python frame, they would outnumber the ops.
HOST_CATEGORIES: tuple[HostCategory, ...] = (
    HostCategory(
        "cpu_op",
        "the operators the profiler records: aten:: ops, custom ops, compiled regions",
        "torch.profiler (Kineto) category cpu_op; 'Operator' in legacy traces (load.CATEGORIES)",
    ),
    HostCategory(
        "user_annotation",
        "record_function ranges: ProfilerStep#N, module and user annotations",
        "torch.profiler.record_function (Kineto category user_annotation)",
    ),
)
HOST_SPANS: tuple[str, ...] = tuple(c.category for c in HOST_CATEGORIES)


# ---------------------------------------------------------------- a user's rows (ATTNSCOPE_RULES)


class RulesError(ValueError):
    """A rules file that cannot be used; its text is one line naming the variable, the file and the problem."""


@dataclass(frozen=True)
class UserRules:
    """The rows of a user's rules files (read_rules): each table's rows in file order."""

    files: tuple[str, ...] = ()
    backends: tuple[AttentionBackend, ...] = ()
    families: tuple[FamilyRule, ...] = ()
    collectives: tuple[Collective, ...] = ()


# Each section of a rules file: its keys (required ones first) and what a row becomes.
SECTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "backend": (("backend", "reason"), ("op", "kernel", "source")),
    "family": (("family", "name", "reason"), ("template", "source")),
    "collective": (("pattern", "reason"), ("kernel", "op", "source")),
}


def read_rules(paths: list[str]) -> UserRules:
    """The rows of the rules files `paths` (TOML or JSON by suffix), in order. A file holds lists
    of rows under the section names of SECTIONS:

        [[backend]]     backend (a BACKEND_TABLE name), op and/or kernel (regular expressions over
                        the function name, case-sensitive), reason, source
        [[family]]      family (a FAMILIES name but 'fused attention': that is a backend row's),
                        name (regular expression over the function name, case-insensitive),
                        template (over the template arguments; optional), reason, source
        [[collective]]  pattern (case-insensitive), kernel / op (true by default: the kernel
                        family, the copies' op chains), reason, source

    source defaults to the file's path. Raises RulesError (one line) for a file that cannot be read,
    is not TOML/JSON, or holds a section, key or value these tables do not take."""
    rows: dict[str, list] = {"backend": [], "family": [], "collective": []}
    for path in paths:
        doc = _read_document(path)
        for section, entries in doc.items():
            if section not in SECTIONS:
                _fail(path, f"unknown section {section!r} (known: {', '.join(SECTIONS)})")
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                _fail(
                    path,
                    f"{section!r} must be a list of rows ([[{section}]] tables in TOML, a list of objects in JSON)",
                )
            for i, entry in enumerate(entries, start=1):
                rows[section].append(_row(path, section, i, entry))
    return UserRules(tuple(paths), tuple(rows["backend"]), tuple(rows["family"]), tuple(rows["collective"]))


def _fail(path: str, problem: str) -> None:
    raise RulesError(" ".join(f"{settings.RULES.name}: {path}: {problem}".split()))


def _read_document(path: str) -> dict:
    if not path.endswith((".toml", ".json")):
        _fail(path, "a rules file must be .toml or .json")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        _fail(path, f"cannot be read ({exc.strerror or exc})")
    try:
        if path.endswith(".json"):
            doc = json.loads(data)
        else:
            doc = _toml().loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        _fail(path, "is not UTF-8 text")
    except RulesError:
        raise
    except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        _fail(path, f"is not valid {'JSON' if path.endswith('.json') else 'TOML'} ({exc})")
    if not isinstance(doc, dict):
        _fail(path, "must hold sections of rows (a JSON object, or [[family]] ... tables in TOML)")
    return doc


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:
        import tomli  # type: ignore[import-not-found]
    except ImportError:
        raise RulesError(
            f"{settings.RULES.name}: reading a .toml rules file needs Python 3.11 or the tomli package "
            "(pip install tomli); or write the rules as .json"
        ) from None
    return tomli


def _row(path: str, section: str, i: int, entry: dict):
    required, optional = SECTIONS[section]
    where = f"{section} row {i}"
    for key in entry:
        if key not in required + optional:
            _fail(path, f"{where}: unknown key {key!r} (known: {', '.join(required + optional)})")
    for key in required:
        if key not in entry:
            _fail(path, f"{where}: {key!r} is missing")

    def text(key: str, default: str = "") -> str:
        value = entry.get(key, default)
        if not isinstance(value, str):
            _fail(path, f"{where}: {key!r} must be text")
        return value

    def pattern(key: str, flags: int) -> str:
        value = text(key)
        try:
            re.compile(value, flags)
        except re.error as exc:
            _fail(path, f"{where}: {key!r} is not a regular expression ({exc})")
        return value

    def flag(key: str) -> bool:
        value = entry.get(key, True)
        if not isinstance(value, bool):
            _fail(path, f"{where}: {key!r} must be true or false")
        return value

    reason, source = text("reason").strip(), text("source", path)
    if not reason:
        _fail(path, f"{where}: 'reason' is empty (say why the row is right)")
    if section == "backend":
        name = text("backend")
        builtin = next((b for b in BACKEND_TABLE if b.name == name), None)
        if builtin is None:
            _fail(path, f"{where}: {name!r} is not a backend (one of: {', '.join(BACKEND_NAMES)})")
        op, kernel = pattern("op", 0), pattern("kernel", 0)
        if not op and not kernel:
            _fail(path, f"{where}: give 'op' or 'kernel' (or both)")
        return AttentionBackend(name, op, kernel, builtin.library, builtin.vendor, builtin.fused, source, reason)
    if section == "family":
        family = text("family")
        if family not in FAMILIES or family == "fused attention":
            _fail(
                path,
                f"{where}: {family!r} is not a family (one of: {', '.join(f for f in FAMILIES if f != 'fused attention')}; "
                "attention kernels take a [[backend]] row)",
            )
        name = pattern("name", re.IGNORECASE)
        if not name:
            _fail(path, f"{where}: 'name' is empty")
        return FamilyRule(family, name, pattern("template", re.IGNORECASE), reason, source)
    kernel, op = flag("kernel"), flag("op")
    if not kernel and not op:
        _fail(path, f"{where}: 'kernel' and 'op' are both false: the row would match nothing")
    value = pattern("pattern", re.IGNORECASE)
    if not value:
        _fail(path, f"{where}: 'pattern' is empty")
    return Collective(value, kernel, op, reason, source)


def rule_files(environ: dict[str, str] | None = None) -> list[str]:
    """The files ATTNSCOPE_RULES names (os.pathsep-separated), in order; [] when unset."""
    return settings.RULES.paths(environ)


@functools.lru_cache(maxsize=1)
def user_rules() -> UserRules:
    """The rows of the files ATTNSCOPE_RULES names, read once per process (the first analysis that
    classifies a name reads them; the CLI and the dashboard read them at start, so a bad file is
    one line there). Raises RulesError."""
    paths = rule_files()
    return read_rules(paths) if paths else UserRules()


def backend_table() -> tuple[AttentionBackend, ...]:
    """BACKEND_TABLE with a user's rows first."""
    return user_rules().backends + BACKEND_TABLE


def family_rules() -> tuple[FamilyRule, ...]:
    """FAMILY_RULES with a user's rows first: their [[family]] rows, then their [[collective]]
    kernel rows as one 'communication' row."""
    mine = user_rules()
    kernels = [c.pattern for c in mine.collectives if c.kernel]
    collective = (FamilyRule("communication", _joined(kernels), "", "a user's [[collective]] rows", "ATTNSCOPE_RULES"),)
    return mine.families + (collective if kernels else ()) + FAMILY_RULES


@functools.lru_cache(maxsize=1)
def _collective_ops() -> re.Pattern[str]:
    mine = [c.pattern for c in user_rules().collectives if c.op]
    return re.compile(_joined(mine + [COLLECTIVE_OPS]), re.IGNORECASE)


def is_collective_op(name: str) -> bool:
    """True for a CPU op that is a collective or its staging (COLLECTIVES' op rows, a user's first)."""
    return _collective_ops().search(name) is not None
