"""Which attention implementation really ran, with the op and kernel names that prove it.

PyTorch's SDPA picks flash, memory-efficient, cuDNN or the unfused math path without saying so;
only the names in the trace tell. One trace can hold several backends.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from dashboard.engine.columns import series
from dashboard.engine.model import Trace, names_in, per_trace
from dashboard.engine.names import parse

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
        "cpu_flash", r"^aten::_scaled_dot_product_flash_attention_for_cpu(_backward)?$", "",
        "PyTorch SDPA, flash attention for CPU", "CPU (any)",
        source="pytorch/pytorch aten/src/ATen/native/native_functions.yaml"),
    AttentionBackend(
        "flash", r"^aten::(_scaled_dot_product_flash_attention(_backward)?|_flash_attention_(forward|backward))$",
        r"^pytorch_flash::",
        "PyTorch SDPA flash backend (PyTorch's copy of FlashAttention-2, pytorch_flash::flash_fwd_kernel)",
        "NVIDIA; on ROCm the same op runs AOTriton or CK kernels",
        source="pytorch/pytorch aten/src/ATen/native/native_functions.yaml; "
               "aten/src/ATen/native/transformers/cuda/flash_attn/ (namespace pytorch_flash); tests/data/tracelens_h100_*"),
    AttentionBackend(
        "efficient", r"^aten::(_scaled_dot_product_efficient_attention(_backward)?|_efficient_attention_(forward|backward))$",
        r"^fmha_cutlass[FB]\w*$|^PyTorchMemEffAttention::",
        "PyTorch SDPA memory-efficient backend (xFormers' CUTLASS kernels, fmha_cutlassF_*)", "NVIDIA",
        source="pytorch/pytorch aten/src/ATen/native/transformers/cuda/mem_eff_attention/kernels/ (fmha_cutlassF_*)"),
    AttentionBackend(
        "cudnn", r"^aten::(_scaled_dot_product_cudnn_attention(_backward)?|_cudnn_attention_(forward|backward))$",
        r"^cudnn\w*_sdpa",
        "PyTorch SDPA cuDNN backend (cudnn_generated_fort_native_sdpa_*, launched by cuLaunchKernelEx)", "NVIDIA",
        source="pytorch/pytorch aten/src/ATen/native/cudnn/MHA.cpp; kernel names as cuDNN's runtime compiler emits them in H100/H200 traces"),
    AttentionBackend(
        "math", r"^aten::_scaled_dot_product_attention_math(_for_mps)?$", "",
        "PyTorch SDPA math path: unfused bmm + softmax kernels", "any", fused=False,
        source="pytorch/pytorch aten/src/ATen/native/native_functions.yaml"),
    AttentionBackend(
        "sage", "",
        r"^sage_fwd\w*$|^sage_quant\w*_kernel$|^qk_int_sv_f(8|16)\w*_attn_kernel$|"
        r"^quant_(per_block|query_per_thread|key_per_thread)_int[48]_kernel$|^sageattn_quant\w*_kernel$",
        "SageAttention (INT8 Q/K, FP8/FP16 P*V) and SpargeAttn: Triton sage_fwd and sage_quant_kernel (ROCm aiter), "
        "CUDA qk_int_sv_f8/f16_*attn_kernel, Triton quant_per_block_int8_kernel; the quantization kernels are part "
        "of the attention's device time", "NVIDIA, AMD",
        source="ROCm/aiter aiter/ops/triton/_triton_kernels/attention/fav3_sage_attention.py (sage_fwd*) and its quant "
               "module (sage_quant_kernel); thu-ml/SageAttention csrc/qattn/qk_int_sv_f8_cuda_sm89.cuh, "
               "csrc/qattn/qk_int_sv_f16_cuda_sm80.cuh, sageattention/triton/quant_per_block.py, quant_per_thread.py"),
    AttentionBackend(
        "flex", "",
        r"^triton_tem_fused_\w*flex_attention\w*$",
        "FlexAttention compiled by inductor: one Triton template kernel per call, triton_tem_fused_flex_attention_<n> "
        "(and ..._flex_attention_backward_<n>; flex decoding uses the same op name). On CPU the C++ template kernel "
        "records no name of its own: a collectors' flex trace is recognised by its metadata (see detect_backends)",
        "any (inductor)",
        source="pytorch/pytorch torch/_inductor/kernel/flex/flex_attention.py (TritonTemplate name='flex_attention'), "
               "torch/_inductor/codegen/triton.py define_kernel (triton_<category>_<fused op names>_<n>, category 'tem')"),
    AttentionBackend(
        "flashmla", r"^_flashmla_C::",
        r"^(flash::)?flash_fwd_\w*mla\w*$",
        "FlashMLA (DeepSeek multi-head latent attention decode): flash_fwd_splitkv_mla_kernel and its combine kernel",
        "NVIDIA, AMD (aiter port)",
        source="deepseek-ai/FlashMLA csrc/flash_fwd_mla_kernel.h (flash::flash_fwd_splitkv_mla_kernel, "
               "flash_fwd_splitkv_mla_combine_kernel); vllm-project/vllm vllm/attention/ops/flashmla.py (_flashmla_C ops)"),
    AttentionBackend(
        "flash-attn", r"^flash_attn(_3)?::|^_vllm_fa\d_C::",
        r"^(flash::)?flash_(fwd|bwd)\w*$|^flash::(FlashAttn\w*|flash_\w+)$|flash_attncute",
        "FlashAttention 2/3/4 (Dao-AILab flash-attn and its vLLM fork): flash::flash_fwd_kernel, "
        "flash::FlashAttnFwdSm90 (under cutlass::device_kernel), CuTe-DSL flash_attncute kernels", "NVIDIA",
        source="Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_launch_template.h, "
               "hopper/flash_fwd_launch_template.h, flash_attn/cute/; vllm-project/flash-attention"),
    AttentionBackend(
        "hub", r"^_flash_attn\w*::|^_?kernels_community\w*::", "",
        "Hugging Face kernels hub (an op namespace per build hash, e.g. _flash_attn_<hash>::fwd; "
        "its kernels are FlashAttention's, reported as flash-attn)", "NVIDIA",
        source="huggingface/kernels (ops registered as _<name>_<build hash>::); kernels-community/flash-attn"),
    AttentionBackend(
        "aotriton", "", r"^attn_fwd$|^attn_bwd\w*$|^bwd_kernel_(dk_dv|dq|fuse)$|^bwd_preprocess(_varlen)?$",
        "AOTriton (ahead-of-time compiled Triton): PyTorch's flash and memory-efficient SDPA on ROCm", "AMD",
        source="ROCm/aotriton tritonsrc/fwd_kernel.py, bwd_kernel_dk_dv.py, bwd_kernel_dq.py, bwd_preprocess.py"),
    AttentionBackend(
        "ck", r"^aiter::(mha|fmha)_\w*$",
        r"^ck_tile::Fmha\w*$|^ck::\w*([Ff]mha|[Mm]ultihead_?[Aa]ttention)\w*$|^fmha_(fwd|bwd)_\w*$",
        "Composable Kernel FMHA (ck_tile::Fmha*Kernel under ck_tile::kentry, often mangled; "
        "also through AMD aiter's mha ops)", "AMD",
        source="ROCm/composable_kernel include/ck_tile/ops/fmha/kernel/; ROCm/aiter csrc/ (mha_* ops); "
               "tests/data/tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz"),
    AttentionBackend(
        "flashinfer", r"^flashinfer::\w*(prefill|decode|attention|mla)\w*$",
        r"^(flashinfer::(\w+::)*)?(Batch|Single)(Prefill|Decode)With\w*KVCache\w*$|"
        r"^flashinfer::(\w+::)*\w*(Attention|MLA|MergeStates)\w*$",
        "FlashInfer (BatchPrefillWithPagedKVCacheKernel, BatchDecodeWithPagedKVCacheKernel, MLA, merge states)", "NVIDIA",
        source="flashinfer-ai/flashinfer include/flashinfer/attention/prefill.cuh, decode.cuh, mla.cuh, cascade.cuh"),
    AttentionBackend(
        "trtllm", r"^trtllm::attention\w*$",
        r"^fmhaSm\d+\w*Kernel|^fmha_v2_\w+$|(^|::)masked_multihead_attention_kernel\w*$|(^|::)xqa_kernel\w*$|^kernel_mha$",
        "TensorRT-LLM attention: trtllm-gen fmhaSm90/Sm100 kernels (also shipped in FlashInfer), fmha_v2, "
        "masked multi-head attention, XQA; its PyTorch path's trtllm::attention / attention_inplace ops", "NVIDIA",
        source="NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/trtllmGenKernels/fmha/, contextFusedMultiHeadAttention/, "
               "decoderMaskedMultiheadAttention/, xqaDispatcher.cpp; cpp/tensorrt_llm/thop/attentionOp.cpp (trtllm:: ops)"),
    AttentionBackend(
        "vllm-paged", r"^_(rocm_)?C::paged_attention\w*$",
        r"^(vllm::)?paged_attention_(v[12]|ll4mi)\w*$",
        "vLLM paged attention (paged_attention_v1/v2_kernel; ll4mi on ROCm)", "NVIDIA, AMD",
        source="vllm-project/vllm csrc/attention/paged_attention_v1.cu, paged_attention_v2.cu, csrc/rocm/attention.cu"),
    AttentionBackend(
        "triton-decode", "",
        r"^_fwd_(grouped_)?kernel_stage[12](_\w+)?$",
        "Triton split-KV decode attention of LightLLM lineage, used by SGLang and vLLM (MLA decode included): "
        "_fwd_kernel_stage1 / _fwd_grouped_kernel_stage1 then the _fwd_kernel_stage2 merge", "any (Triton)",
        source="sgl-project/sglang python/sglang/srt/layers/attention/triton_ops/decode_attention.py; "
               "vllm-project/vllm vllm/attention/ops/triton_decode_attention.py"),
    AttentionBackend(
        "thunderkittens", "",
        r"^(fwd_|bwd_)?attend_(prep_)?ker\w*$",
        "ThunderKittens attention kernels (attend_ker, fwd_attend_ker, bwd_attend_prep_ker, bwd_attend_ker)", "NVIDIA, AMD",
        source="HazyResearch/ThunderKittens kernels/attn/h100/h100.cu, kernels/attn/demo/; HazyResearch/HipKittens"),
    AttentionBackend(
        "xformers", r"^xformers(_flash\d?)?::", "",
        "xFormers ops (its CUTLASS kernels carry the same fmha_cutlassF_* names as PyTorch's and count as efficient)",
        "NVIDIA, AMD",
        source="facebookresearch/xformers xformers/csrc/attention/attention.cpp (efficient_attention_forward_cutlass / _ck), "
               "xformers/ops/fmha/flash.py (xformers_flash::)"),
    AttentionBackend(
        "vllm", r"^vllm::unified(_mla)?_attention(_with_output)?$", "",
        "vLLM's attention layer op (unified_attention / unified_attention_with_output; MLA variants): the op around "
        "whatever backend kernel vLLM picked, which its own row names", "any",
        source="vllm-project/vllm vllm/attention/layer.py (direct_register_custom_op op_name='unified_attention_with_output')"),
    AttentionBackend(
        "sglang", r"^sglang::unified(_sparse)?_attention_with_output(_and_lse)?$", "",
        "SGLang's attention layer op (RadixAttention under piecewise CUDA graphs): the op around the backend's kernel",
        "any",
        source="sgl-project/sglang python/sglang/srt/layers/radix_attention.py (register_custom_op unified_attention_with_output)"),
    AttentionBackend(
        "triton", "",
        r"^triton_\w*(attention|attn|flash|sdpa|fmha)|^kernel_(unified|paged)_attention_[23]d$|^reduce_segments$|^_attn_(fwd|bwd)\w*$",
        "Triton kernels named for attention: vLLM's kernel_unified_attention_2d/3d (with reduce_segments, which merges "
        "the 3d kernel's KV segments), the Triton tutorial's _attn_fwd, generated triton_*attention* kernels", "any (Triton)",
        source="vllm-project/vllm vllm/attention/ops/triton_unified_attention.py; triton-lang/triton "
               "python/tutorials/06-fused-attention.py; tests/data/tracelens_vllm_decode_graph_unified_attention.json.gz"),
)
BACKEND_NAMES: tuple[str, ...] = tuple(b.name for b in BACKEND_TABLE)
BACKENDS: tuple[str, ...] = BACKEND_NAMES + ("inductor", "eager")
# What the collectors write as backend_requested when no one backend was forced.
NOT_FORCED = ("default", "eager", "none")
SDPA_OP = r"^aten::(scaled_dot_product_attention|_scaled_dot_product_)"
EAGER_MATMUL = r"^aten::(matmul|bmm|baddbmm|einsum)$"
EAGER_SOFTMAX = r"^aten::(_?softmax|_safe_softmax)$"
# torch.compile fuses a hand-written attention's scale, mask and softmax into one generated kernel
# (cpp_fused_* on CPU, triton_*_fused_* on GPU) between two matmuls.
INDUCTOR_SOFTMAX = r"(cpp|triton)_\w*fused\w*softmax"


LAUNCH_SCHEMA: dict[str, pl.DataType] = {
    "backend": pl.String, "kernel": pl.String, "op": pl.String, "launch": pl.String, "count": pl.Int64,
}


@functools.lru_cache(maxsize=None)
def _compiled(op: str, kernel: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in (op, kernel) if p) or "(?!)")


@functools.lru_cache(maxsize=1 << 16)
def attention_backend(name: str) -> AttentionBackend | None:
    """The BACKEND_TABLE row an op or kernel name belongs to (first match), or None. The row's
    patterns are matched against the name's function name (names.parse), not the raw text."""
    qualname = parse(name).qualname
    return next((row for row in BACKEND_TABLE if row.pattern.search(qualname)), None)


def is_fused_attention(name: str) -> bool:
    """True for the ops and kernels of a fused attention backend (every row but math)."""
    row = attention_backend(name)
    return row is not None and row.fused


@dataclass
class Backends:
    """backends: detected names in BACKENDS order; evidence: backend -> distinct op and kernel names
    that prove it; launches: one row per (backend, kernel, op, launch) with the number of kernel
    events: op is the innermost cpu_op around the launch call (None when the launch sits under no
    op, e.g. a CUDA/HIP graph replay, or its call is not in the trace), launch the runtime call
    (cudaLaunchKernel, cuLaunchKernelEx, hipGraphLaunch, ...)."""

    backends: list[str] = field(default_factory=list)
    evidence: dict[str, list[str]] = field(default_factory=dict)
    launches: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=LAUNCH_SCHEMA))

    @property
    def all_evidence(self) -> list[str]:
        return [name for b in self.backends for name in self.evidence.get(b, [])]


@per_trace
def detect_backends(trace: Trace) -> Backends:
    """Detect attention backends from cpu_op and kernel names (BACKEND_TABLE), then hand-written
    attention compiled by inductor or run eagerly."""
    names = pl.Series(names_in(trace, "cpu_op", "kernel"), dtype=pl.String)
    by_name = {name: row.name for name in names.to_list() if name and (row := attention_backend(name)) is not None}
    found = Backends()
    for backend in BACKEND_NAMES:
        hits = sorted(name for name, b in by_name.items() if b == backend)
        if hits:
            found.backends.append(backend)
            found.evidence[backend] = hits
    found.launches = _launches(trace, by_name)
    if not found.backends and (flex := _cpu_flex_evidence(trace)):
        found.backends.append("flex")
        found.evidence["flex"] = flex
    inductor = _inductor_evidence(trace, names, found.backends)
    if inductor:
        found.backends.append("inductor")
        found.evidence["inductor"] = inductor
    eager = _eager_evidence(trace)
    if eager:
        found.backends.append("eager")
        found.evidence["eager"] = eager
    return found


COMPILED_REGION = r"^Torch-Compiled Region|^## Call CompiledFxGraph"


def _cpu_flex_evidence(trace: Trace) -> list[str]:
    """FlexAttention compiled for the CPU: inductor's C++ template kernel records no name of its own
    (with cpp.enable_kernel_profile only a generic graph_0_kernel), so no name says flex. A trace
    whose own metadata says it is a collectors' flex run (collectors/variants.py: torch.compile of
    flex_attention), with no GPU work and no other attention name, and whose work runs inside a
    compiled region, is flex: the compiled region's names are the evidence, the metadata says which."""
    if trace.has_gpu or trace.collector.get("variant") != "flex":
        return []
    regions = [n for n in names_in(trace, "cpu_op", "user_annotation") if n and re.search(COMPILED_REGION, n)]
    if not regions:
        return []
    return ["collector metadata: variant flex (FlexAttention under torch.compile)"] + regions[:3]


def _launches(trace: Trace, by_name: dict[str, str]) -> pl.DataFrame:
    """Attention kernels with the op and runtime call that launched them (see Backends)."""
    ev = trace.events
    kernels = ev.select("cat", "name", "launch").filter(
        (pl.col("cat") == "kernel") & pl.col("name").cast(pl.String).is_in(list(by_name))
    )
    if kernels.height == 0:
        return pl.DataFrame(schema=LAUNCH_SCHEMA)
    launch = kernels["launch"].fill_null(-1).to_numpy()
    op = enclosing_cpu_op(trace, launch)
    return (
        kernels.select(pl.col("name").cast(pl.String).alias("kernel"))
        .with_columns(
            pl.col("kernel").replace_strict(by_name, return_dtype=pl.String).alias("backend"),
            _names_of(ev, op).alias("op"),
            _names_of(ev, launch).alias("launch"),
        )
        .group_by("backend", "kernel", "op", "launch")
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .sort("backend", "kernel", "op", "launch", nulls_last=True)
        .select(list(LAUNCH_SCHEMA))
    )


def _names_of(ev: pl.DataFrame, ids: np.ndarray) -> pl.Series:
    """The names of the events with these ids (row numbers; -1: null)."""
    return ev["name"].gather(series("rows", ids.astype(np.int64), valid=ids >= 0)).cast(pl.String)


def enclosing_cpu_op(trace: Trace, ids: np.ndarray) -> np.ndarray:
    """For each event id (-1 = none), the id of the innermost cpu_op that holds it on its thread,
    or -1. Walks the `parent` column one nesting level per pass, for all ids at once."""
    ev = trace.events
    parent = ev["parent"].fill_null(-1).to_numpy()
    is_op = (ev["cat"] == "cpu_op").to_numpy()
    result = np.full(len(ids), -1, dtype=np.int64)
    node = np.where(ids >= 0, parent[np.maximum(ids, 0)], -1)
    while (node >= 0).any():
        hit = (node >= 0) & is_op[np.maximum(node, 0)]
        result[hit] = node[hit]
        node = np.where((node >= 0) & ~hit, parent[np.maximum(node, 0)], -1)
    return result


def attention_launches(runs: dict[str, Trace]) -> pl.DataFrame:
    """Backends.launches of every run with a leading `run` column (label), in run order."""
    frames = [detect_backends(t).launches.select(pl.lit(label).alias("run"), pl.all()) for label, t in runs.items()]
    schema = {"run": pl.String, **LAUNCH_SCHEMA}
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def _inductor_evidence(trace: Trace, names: pl.Series, fused: list[str]) -> list[str]:
    """Generated softmax kernels of a compiled hand-written attention (when no fused SDPA ran),
    beside its matmuls: aten matmul ops, or, when the kernels replay from a CUDA graph and no op
    runs on the CPU, matrix-multiply kernels."""
    if fused:
        return []
    hits = sorted(names.filter(names.str.contains(INDUCTOR_SOFTMAX)).to_list())
    if not hits:
        return []
    if names.str.contains(EAGER_MATMUL).any():
        return hits
    from dashboard.engine.kernels import family_of  # kernels imports this module

    return hits if any(family_of(name) == "gemm" for name in names_in(trace, "kernel")) else []


# Matrix products that can compute attention scores (Q K^T) or apply them to V (P V); aten::mm
# too, which a 2-D attention (one head, no batch) calls.
EAGER_CHAIN_MATMUL = r"^aten::(matmul|bmm|baddbmm|einsum|mm)$"
# What an eager attention chain's evidence caps at: the first chains found, then a count.
EAGER_CHAINS_SHOWN = 2


def _eager_evidence(trace: Trace) -> list[str]:
    """Attention written by hand, run eagerly: on one thread (pid, tid), in time order, a matmul-like
    op (EAGER_CHAIN_MATMUL) whose output is [.., Sq, Sk], then a softmax (EAGER_SOFTMAX) over the
    last dimension of a [.., Sq, Sk] tensor, then a matmul-like op whose inputs are [.., Sq, Sk] and
    [.., Sk, D] (shapes from Input Dims; the softmax's dim from Concrete Inputs when recorded;
    elementwise scale and mask ops may sit between). Ops under an SDPA op (the math path) do not
    count. Without recorded shapes (record_shapes=False) the order alone decides: the nearest matmul
    before and after the softmax on its thread, and the evidence says so. A softmax and a matmul
    somewhere in the trace are not attention. Evidence: the chain's ops with their shapes."""
    names = pl.Series(names_in(trace, "cpu_op"), dtype=pl.String)
    if not (names.str.contains(EAGER_SOFTMAX).any() and names.str.contains(EAGER_CHAIN_MATMUL).any()):
        return []  # decided from the distinct names, without reading the ops
    pattern = f"{EAGER_SOFTMAX}|{EAGER_CHAIN_MATMUL}|{SDPA_OP}"
    ops = (
        trace.events.lazy()
        .filter((pl.col("cat") == "cpu_op") & pl.col("name").cast(pl.String).str.contains(pattern))
        .select("id", "parent", pl.col("pid").cast(pl.String), pl.col("tid").cast(pl.String),
                pl.col("name").cast(pl.String), pl.col("input_dims").cast(pl.String),
                pl.col("concrete_inputs").cast(pl.String))
        .collect()
    )
    parent = trace.events["parent"].fill_null(-1).to_numpy()
    kinds = {i: ("sdpa" if re.search(SDPA_OP, n) else "softmax" if re.search(EAGER_SOFTMAX, n) else "matmul")
             for i, n in zip(ops["id"].to_list(), ops["name"].to_list())}

    def ancestors(node: int):
        node = int(parent[node])
        while node >= 0:
            yield node
            node = int(parent[node])

    chains: list[str] = []
    found = 0
    for _, lane in ops.group_by("pid", "tid", maintain_order=True):
        steps = []  # (kind, id, name, dims, concrete) in time order, outside SDPA, outermost softmax only
        for i, name, dims, concrete in zip(lane["id"].to_list(), lane["name"].to_list(),
                                           lane["input_dims"].to_list(), lane["concrete_inputs"].to_list()):
            kind = kinds[i]
            if kind == "sdpa":
                continue
            up = [kinds.get(a) for a in ancestors(i)]
            if "sdpa" in up or (kind == "softmax" and "softmax" in up):
                continue
            steps.append((kind, i, name, _json_list(dims), _json_list(concrete)))
        for at, (kind, sid, sname, sdims, sconcrete) in enumerate(steps):
            if kind != "softmax":
                continue
            before = []
            for k in range(at - 1, -1, -1):
                if steps[k][0] == "softmax":
                    break
                before.append(steps[k])
            after = []
            for k in range(at + 1, len(steps)):
                if steps[k][0] == "softmax":
                    break
                if sid in ancestors(steps[k][1]):
                    continue  # inside the softmax
                after.append(steps[k])
            # a matmul-like op and the one it calls (aten::matmul > aten::bmm): the outer one is named
            before = [op for op in before if not any(o[1] in set(ancestors(op[1])) for o in before)] + \
                [op for op in before if any(o[1] in set(ancestors(op[1])) for o in before)]
            chain = _chain(sname, sdims, sconcrete, before, after)
            if chain:
                found += 1
                if found <= EAGER_CHAINS_SHOWN:
                    chains.extend(chain)
    if not found:
        return []
    return chains + ([f"{found} matmul -> softmax -> matmul chains in all"] if found > 1 else [])


def _json_list(text: str | None) -> list | None:
    """A raw Input Dims / Concrete Inputs text as a list, or None when absent or unreadable."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) else None


def _shape(value: object) -> list[int] | None:
    """A recorded tensor shape (a list of ints), else None."""
    if isinstance(value, list) and value and all(isinstance(d, int) for d in value):
        return value
    return None


def _prod(dims: list[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def _same_matrix(a: list[int], b: list[int]) -> bool:
    """Equal last two dims and the same number of matrices (bmm flattens matmul's batch dims)."""
    return len(a) >= 2 and len(b) >= 2 and a[-2:] == b[-2:] and _prod(a[:-2]) == _prod(b[:-2])


def _operands(name: str, dims: list | None, concrete: list | None) -> tuple[list[int], list[int]] | None:
    """The two matrix operands of a matmul-like op (aten::baddbmm: batch1 and batch2; aten::einsum:
    its two tensors, the output's letters checked by _einsum_out), from its Input Dims."""
    if dims is None:
        return None
    if name == "aten::einsum":
        tensors = [d for d in dims if isinstance(d, list) and d and all(isinstance(t, list) for t in d)]
        flat = tensors[0] if tensors else [d for d in dims[1:] if _shape(d)]
        pair = [_shape(d) for d in flat[:2]]
    else:
        start = 1 if name == "aten::baddbmm" else 0
        pair = [_shape(d) for d in dims[start:start + 2]]
    if len(pair) != 2 or pair[0] is None or pair[1] is None:
        return None
    return pair[0], pair[1]


def _einsum_equation(concrete: list | None) -> tuple[str, str, str] | None:
    """An einsum's two operand subscripts and its output subscript, without ellipsis."""
    equation = next((c for c in concrete or [] if isinstance(c, str) and "->" in c), None)
    if not equation or "." in equation:
        return None
    ins, out = equation.replace(" ", "").split("->")
    parts = ins.split(",")
    return (parts[0], parts[1], out) if len(parts) == 2 else None


def _product_shape(name: str, dims: list | None, concrete: list | None) -> list[int] | None:
    """The output shape of a matmul-like op from its recorded inputs, or None when unknown."""
    pair = _operands(name, dims, concrete)
    if pair is None:
        return None
    a, b = pair
    if name == "aten::einsum":
        eq = _einsum_equation(concrete)
        if eq is None or len(eq[0]) != len(a) or len(eq[1]) != len(b):
            return None
        size = dict(zip(eq[0], a)) | dict(zip(eq[1], b))
        return [size[c] for c in eq[2]] if all(c in size for c in eq[2]) else None
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch_a, batch_b = a[:-2], b[:-2]
    n = max(len(batch_a), len(batch_b))
    batch_a, batch_b = [1] * (n - len(batch_a)) + batch_a, [1] * (n - len(batch_b)) + batch_b
    if any(x != y and 1 not in (x, y) for x, y in zip(batch_a, batch_b)):
        return None
    return [max(x, y) for x, y in zip(batch_a, batch_b)] + [a[-2], b[-1]]


def _applies(name: str, dims: list | None, concrete: list | None, scores: list[int]) -> bool:
    """True when a matmul-like op multiplies a [.., Sq, Sk] tensor (scores) by a [.., Sk, D] one."""
    pair = _operands(name, dims, concrete)
    if pair is None:
        return False
    a, b = pair
    if name == "aten::einsum":
        eq = _einsum_equation(concrete)
        return (eq is not None and len(eq[0]) == len(a) and _same_matrix(a, scores)
                and eq[0][-1] in eq[1] and eq[0][-1] not in eq[2])
    return _same_matrix(a, scores) and len(b) >= 2 and b[-2] == scores[-1]


def _text(dims: list[int] | None) -> str:
    return str(list(dims)) if dims is not None else "?"


def _chain(softmax: str, sdims: list | None, sconcrete: list | None,
           before: list[tuple], after: list[tuple]) -> list[str]:
    """The evidence of one matmul -> softmax -> matmul chain around a softmax, or [] when none.
    before: the matmul-like ops since the previous softmax, nearest first; after: those up to the
    next softmax, in order (tuples: kind, id, name, dims, concrete)."""
    if not before or not after:
        return []
    scores = _shape(sdims[0]) if sdims else None
    if scores is None:  # shapes not recorded: the order alone
        first, second = before[0], after[0]
        return [f"{first[2]} -> {softmax} -> {second[2]} on one thread (order only: shapes not recorded)"]
    dim = sconcrete[1] if sconcrete and len(sconcrete) > 1 else ""
    if len(scores) < 2 or (dim not in ("", None) and str(dim) not in ("-1", str(len(scores) - 1))):
        return []
    first = next((op for op in before if (out := _product_shape(op[2], op[3], op[4])) is not None
                  and _same_matrix(out, scores)), None)
    second = next((op for op in after if _applies(op[2], op[3], op[4], scores)), None)
    if first is None or second is None:
        return []
    a1, b1 = _operands(first[2], first[3], first[4]) or (None, None)
    a2, b2 = _operands(second[2], second[3], second[4]) or (None, None)
    return [
        f"{first[2]} {_text(a1)} x {_text(b1)} -> {_text(_product_shape(first[2], first[3], first[4]))}",
        f"{softmax} over dim {dim if dim not in ('', None) else '-1 (dim not recorded)'} of {_text(scores)}",
        f"{second[2]} {_text(a2)} x {_text(b2)}",
    ]


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
    # The hub's kernels are FlashAttention's own: a hub run whose op names were lost still shows them.
    aliases = {
        "flash": {"flash", "cpu_flash"}, "cpu_flash": {"cpu_flash", "flash"}, "math": {"math", "inductor"},
        "hub": {"hub", "flash-attn"},
    }
    wanted = aliases.get(requested, {requested})
    return not (wanted & set(detected))
