"""Attention backends by op and kernel name (BACKEND_TABLE), each row with the library's sources.

kernels.family_of's 'fused attention' family is the fused rows; the backends analysis reports the
rows a trace shows. A user's rows come first (user.backend_table, user.attention_backend).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass


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
        "flash::FlashAttnFwdSm90 (under cutlass::device_kernel), FlashAttention-4's CuTe-DSL kernels, named "
        "from their module and class (kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_..., "
        "newer builds prefixed flash_fwd_sm100_bf16_head_dim128_...)",
        "NVIDIA",
        source="Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_launch_template.h, "
        "hopper/flash_fwd_launch_template.h, flash_attn/cute/ (flash_fwd_sm90.py FlashAttentionForwardSm90, "
        "flash_fwd_sm100.py; kernel names as pull request 2564 shows them); vllm-project/flash-attention",
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
        r"^flashinfer::(\w+::)*\w*(Attention|MLA|MergeStates)\w*$|^flashinfer::(\w+::)*PrefillWithKVCacheKernel$",
        "FlashInfer (SinglePrefillWithKVCacheKernel, BatchPrefillWithRagged/PagedKVCacheKernel, "
        "BatchDecodeWithPagedKVCacheKernel, MLA, merge states; on sm90 its FA3 backend's "
        "flashinfer::PrefillWithKVCacheKernel, single and batch alike)",
        "NVIDIA",
        source="flashinfer-ai/flashinfer include/flashinfer/attention/prefill.cuh, decode.cuh, mla.cuh, cascade.cuh, "
        "hopper/prefill_sm90.cuh (PrefillWithKVCacheKernel)",
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


# What proves that a collectors' variant's own attention ran, where BACKEND_TABLE has no row of its
# own for it (the collectors' measure.backend_ran reads them; a sweep row without such a name is
# 'unknown', never assumed).
FLEX_EVIDENCE = r"Torch-Compiled Region|CompiledFxGraph|flex_attention|triton_tem_fused"
"""FlexAttention runs only under torch.compile: its compiled region and graph
(torch/_dynamo, torch/_inductor: 'Torch-Compiled Region', '## Call CompiledFxGraph'), the
flex_attention higher-order op, and Inductor's template kernels (triton_tem_fused_*,
torch/_inductor/kernel/flex_attention.py)."""
HUB_EVIDENCE = r"^_flash_attn\w*::|^_?kernels_community\w*::|flash_attn|(^|\W)flash::|flash_fwd"
"""The kernels hub's FlashAttention: its ops are registered under _flash_attn_<hash>:: (or the
kernels-community namespace), its kernels are FlashAttention's flash::flash_fwd_* (the
huggingface/kernels loader; Dao-AILab/flash-attention csrc/flash_attn)."""
