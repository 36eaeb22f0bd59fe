"""Attention found by what the device ran, for the libraries people deploy (BACKEND_TABLE's rows with
their sources), and serving frameworks' attention-layer ops read into FLOPs. Oracles: names copied
from the libraries' own sources (each row of NAMES says where), the json module over the real
traces, and work counted by hand from a step annotation."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest

import oracle
from dashboard.engine.analyses.backends import BACKEND_TABLE, attention_backend, detect_backends
from dashboard.engine.analyses.efficiency import (
    ServingBatch,
    attention_calls,
    attention_device_ns,
    efficiency,
    efficiency_block,
)
from dashboard.engine.analyses.kernels import family_of, kernel_table
from dashboard.engine.load import load_trace

DESIGN = Path(__file__).parent.parent / "docs" / "design.md"
H100 = json.loads(
    json.dumps(oracle.raw(oracle.DATA / "tracelens_h100_bert_sdpa_flash.json.gz").get("deviceProperties", []))
)

# (name as a trace shows it, the row a person gives it, where the name comes from)
NAMES = [
    ("sage_fwd", "sage", "ROCm/aiter fav3_sage_attention.py"),
    ("sage_fwd_v3", "sage", "ROCm/aiter fav3_sage_attention_mxfp4.py"),
    ("sage_quant_kernel", "sage", "ROCm/aiter sage attention quant"),
    (
        "void qk_int_sv_f8_attn_kernel<128u, 64u>(signed char*)",
        "sage",
        "thu-ml/SageAttention qk_int_sv_f8_cuda_sm89.cuh",
    ),
    ("qk_int_sv_f16_block_sparse_attn_kernel", "sage", "SpargeAttn on SageAttention"),
    ("quant_key_per_thread_int8_kernel", "sage", "thu-ml/SageAttention sageattention/triton/quant_per_thread.py"),
    ("triton_tem_fused_flex_attention_0", "flex", "torch/_inductor/kernel/flex/flex_attention.py"),
    ("triton_tem_fused_flex_attention_backward_2", "flex", "same, backward template"),
    ("triton_tem_fused__to_copy_flex_attention_4", "flex", "fused names are sorted: an epilogue's op may come first"),
    (
        "void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, 512>, true>(Flash_fwd_mla_params)",
        "flashmla",
        "deepseek-ai/FlashMLA",
    ),
    ("flash::flash_fwd_splitkv_mla_combine_kernel", "flashmla", "deepseek-ai/FlashMLA"),
    ("_flashmla_C::fwd_kvcache_mla", "flashmla", "vllm-project/vllm flashmla.py"),
    ("_fwd_grouped_kernel_stage1", "triton-decode", "sglang decode_attention.py"),
    ("_fwd_kernel_stage2", "triton-decode", "sglang/vllm decode attention"),
    ("void fwd_attend_ker<128, true>(fwd_globals<128>)", "thunderkittens", "HazyResearch/ThunderKittens h100.cu"),
    ("bwd_attend_prep_ker", "thunderkittens", "HazyResearch/ThunderKittens h100.cu"),
    ("vllm::unified_attention_with_output", "vllm", "vllm/attention/layer.py"),
    ("vllm::unified_attention", "vllm", "vllm/attention/layer.py"),
    ("sglang::unified_attention_with_output", "sglang", "sglang radix_attention.py"),
    ("trtllm::attention_inplace", "trtllm", "TensorRT-LLM thop/attentionOp.cpp"),
    ("xformers::efficient_attention_forward_ck", "xformers", "xformers csrc/attention"),
    ("reduce_segments", "triton", "vllm triton_unified_attention.py"),
    ("flash::flash_fwd_splitkv_kernel", "flash-attn", "Dao-AILab/flash-attention (not MLA: stays flash-attn)"),
    # look-alikes: not attention, or not clearly so by name
    ("get_mla_metadata_kernel", None, "FlashMLA's scheduler metadata"),
    ("triton_tem_fused_mm_0", None, "inductor matmul template"),
    ("triton_tem_fused_addmm_1", None, "inductor matmul template"),
    ("_fwd_kernel", None, "too generic (sglang extend/prefill, many tutorials)"),
    ("_fwd_kernel_stage3", None, "no stage of the decode kernel"),
    ("quantize_per_block_fp8_kernel", None, "generic quantization"),
    ("attender_kernel", None, "look-alike of attend_ker"),
    ("void at::native::reduce_segments_kernel<float>(float*)", None, "look-alike of reduce_segments"),
    ("vllm::rocm_unquantized_gemm", None, "a vLLM op that is no attention (tests/data vLLM trace)"),
    ("sglang::store_cache", None, "an SGLang op that is no attention (tests/data SGLang trace)"),
    ("graph_0_kernel", None, "inductor's CPU kernel name: generic, flex or not"),
]


@pytest.mark.parametrize("name, backend, source", NAMES, ids=[n[:50] for n, _, _ in NAMES])
def test_each_library_kernel_is_claimed_by_its_row_and_look_alikes_are_not(name, backend, source):
    row = attention_backend(name)
    assert (row.name if row else None) == backend, source
    if backend is not None and row.fused:
        assert family_of(name) == "fused attention"


def test_every_row_names_where_its_names_come_from_and_the_design_notes_list_it():
    text = DESIGN.read_text()
    section = text[text.index("## Attention kernels") :]
    for row in BACKEND_TABLE:
        assert row.source, row.name
        assert f"`{row.name}`" in section, row.name
        repo = row.source.split()[0]
        assert repo in section, (row.name, repo)


# --- a diffusion transformer on ROCm whose attention is SageAttention replayed from a HIP graph ----


def _event(cat, name, ts, dur, tid=1, **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1 if cat not in ("kernel",) else 0,
        "tid": tid if cat != "kernel" else 7,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _write(tmp_path: Path, events: list[dict], name: str = "t.json", **top) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": H100, "traceEvents": events, **top}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _sage_dit(tmp_path: Path) -> Path:
    """13 text-encoder/VAE SDPA calls with shapes (bf16 [1, 8, 77, 64]) under their ops, then one HIP
    graph launch replaying 6 sage_fwd + 6 sage_quant_kernel under no op."""
    ev, corr, t = [], 1, 0.0
    ev.append(_event("user_annotation", "ProfilerStep#1", 0.0, 100000.0))
    for _ in range(13):
        dims = [[1, 8, 77, 64]] * 3 + [[], [], [], []]
        ev.append(
            _event(
                "cpu_op",
                "aten::_scaled_dot_product_flash_attention",
                t + 10,
                50.0,
                **{
                    "Input Dims": dims,
                    "Input type": ["c10::BFloat16"] * 3 + ["Scalar"] * 4,
                    "Concrete Inputs": ["", "", "", "0.", "False", "False", ""],
                },
            )
        )
        ev.append(_event("cuda_runtime", "cudaLaunchKernel", t + 20, 5.0, correlation=corr))
        ev.append(
            _event(
                "kernel",
                "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t> >(pytorch_flash::Flash_fwd_params)",  # noqa: E501 (a real name, kept whole)
                t + 30,
                20.0,
                correlation=corr,
                device=0,
                stream=7,
            )
        )
        corr += 1
        t += 100
    ev.append(_event("cuda_runtime", "hipGraphLaunch", t + 10, 20.0, correlation=corr))
    for i in range(6):
        ev.append(_event("kernel", "sage_quant_kernel", t + 40 + 2500 * i, 300.0, correlation=corr, device=0, stream=7))
        ev.append(_event("kernel", "sage_fwd", t + 400 + 2500 * i, 2000.0, correlation=corr, device=0, stream=7))
    ev.append(
        _event("kernel", "Cijk_Alik_Bljk_BBS_BH_MT128x128x32", t + 20000, 900.0, correlation=corr, device=0, stream=7)
    )
    return _write(tmp_path, ev)


def test_sage_attention_replayed_from_a_graph_is_found_and_the_measured_share_is_what_json_says(tmp_path):
    path = _sage_dit(tmp_path)
    trace = load_trace(path)
    found = detect_backends(trace)
    assert found.backends == ["flash", "sage"]
    assert set(found.evidence["sage"]) == {"sage_fwd", "sage_quant_kernel"}
    doc = json.loads(path.read_text())
    # oracle: attention device time = the kernels a person lists as attention, by name, from the json
    attention = ("sage_fwd", "sage_quant_kernel", "pytorch_flash::flash_fwd_kernel")
    kernels = [e for e in doc["traceEvents"] if e["cat"] == "kernel"]
    total_ns = sum(round(e["dur"] * 1000) for e in kernels if any(a in e["name"] for a in attention))
    flash_ns = sum(round(e["dur"] * 1000) for e in kernels if "pytorch_flash" in e["name"])
    assert total_ns == 13 * 20000 + 6 * 2300 * 1000
    assert attention_device_ns(trace) == total_ns
    block = efficiency_block(trace)
    # a call is one call: each sage_quant_kernel joins the sage_fwd after it (rules.CALL_PARTS)
    assert block["measured"] == 13 and block["calls"] == 13 + 6
    assert block["attention_device_ns"] == total_ns and block["measured_device_ns"] == flash_ns
    assert block["measured_share"] == pytest.approx(flash_ns / total_ns)
    assert block["unmeasured_without_shapes"] is True
    from dashboard.cli import _efficiency_line

    # 2% of the attention measured: the headline gives the coverage, not a percentage
    line = _efficiency_line(block)
    assert round(100 * flash_ns / total_ns) == 2
    assert block["pct_of_roofline"] is None and block["measured_pct_of_roofline"] is not None
    assert line.startswith("no percentage") and "the measured calls cover 2% of the attention device time" in line
    families = kernel_table(trace).filter(pl.col("family") == "fused attention")["name"].to_list()
    assert {"sage_fwd", "sage_quant_kernel"} <= set(families)


# --- serving frameworks' attention ops -------------------------------------------------------------

STEP = "execute_38_context_2(sq6sk10sqsq20sqsk34)_generation_32(sq32sk55086sqsq32sqsk55086)"


def _serving_trace(tmp_path: Path, op: str, dims: list, annotate: bool = True) -> Path:
    ev = []
    if annotate:
        ev.append(_event("user_annotation", STEP, 0.0, 1000.0))
    ev.append(
        _event("cpu_op", op, 100.0, 200.0, **{"Input Dims": dims, "Input type": ["c10::BFloat16"] * 4 + ["", ""]})
    )
    ev.append(_event("cuda_driver", "cuLaunchKernelEx", 150.0, 5.0, correlation=1))
    ev.append(
        _event(
            "kernel",
            "fmhaSm100aKernel_QBfloat16KvBfloat16OBfloat16H64PagedKvCausalP64VarSeqQ128Kv128PersistentContext",
            300.0,
            40.0,
            correlation=1,
            device=0,
            stream=7,
        )
    )
    return _write(tmp_path, ev, name=op.replace(":", "_") + str(annotate) + ".json")


def test_the_step_annotation_reads_into_request_sums():
    batch = ServingBatch.parse(STEP)
    assert (batch.requests, batch.sq, batch.sk, batch.sqsq, batch.sqsk) == (34, 38, 55096, 52, 55120)
    # by hand: two prefill requests (nq, nkv) = (2, 3) and (4, 7) -- sq 6, sk 10, sqsq 4+16, sqsk 6+28 --
    # with causal pairs 2*3-1 + 4*7-6 = 27, and 32 decode tokens each seeing its keys: 55086 pairs
    assert batch.pairs == 27 + 55086
    assert ServingBatch.parse("execute_context_2(100)_generation_8(8)") is None


@pytest.mark.parametrize(
    "op, q",
    [("vllm::unified_attention_with_output", [40, 16, 64]), ("sglang::unified_attention_with_output", [40, 16 * 64])],
)
def test_a_serving_op_is_the_attention_call_around_its_kernel_with_flops_from_the_step(tmp_path, op, q):
    dims = [q, [40, 2, 64], [40, 2, 64], [40, 16, 64], [], []]
    trace = load_trace(_serving_trace(tmp_path, op, dims))
    found = detect_backends(trace)
    assert found.backends == ["trtllm", op.split("::")[0]]
    assert found.launches["op"].to_list() == [op]
    calls = attention_calls(trace)
    assert calls.height == 1 and calls["op"][0] == op and calls["reason"][0] is None
    pairs = 27 + 55086  # by hand, above
    assert calls["flops"][0] == 2 * 16 * pairs * (64 + 64)
    # bytes: Q and O of the 38 real tokens, K and V of the 55096 keys the requests hold, bf16
    assert calls["bytes"][0] == 2 * (38 * 16 * 128 + 55096 * 2 * 128)
    assert calls["time_ns"][0] == 40000
    row = efficiency(trace).row(0, named=True)
    assert row["pct_of_roofline"] is not None and row["tflops"] == pytest.approx(calls["flops"][0] / 40000 / 1e3)


def test_without_the_step_annotation_the_serving_op_says_what_it_read_and_what_is_missing(tmp_path):
    dims = [[40, 16, 64], [40, 2, 64], [40, 2, 64], [40, 16, 64], [], []]
    trace = load_trace(_serving_trace(tmp_path, "vllm::unified_attention_with_output", dims, annotate=False))
    reason = attention_calls(trace)["reason"][0]
    assert "40 query tokens, Hq=16 Hkv=2 D=64 read as [tokens, heads, head_dim]" in reason
    assert "no step annotation" in reason and "no attention op around" not in reason


def test_the_real_vllm_trace_records_no_attention_op_so_its_kernels_stay_without_shapes():
    path = oracle.DATA / "tracelens_vllm_decode_graph_unified_attention.json.gz"
    doc = oracle.raw(path)
    ops = {e["name"] for e in oracle.complete(doc) if e.get("cat") == "cpu_op"}
    assert not {o for o in ops if "attention" in o}  # the graph replay hides vllm::unified_attention*
    steps = [e["name"] for e in oracle.complete(doc) if e.get("cat") == "user_annotation"]
    assert ServingBatch.parse(steps[0]).pairs == 55086
    trace = load_trace(path)
    att = ("kernel_unified_attention_2d", "kernel_unified_attention_3d", "reduce_segments")
    json_ns = sum(
        round(float(e["dur"]) * 1000) for e in oracle.complete(doc) if e.get("cat") == "kernel" and e["name"] in att
    )
    assert attention_device_ns(trace) == json_ns
    block = efficiency_block(trace)
    assert block["measured_share"] == 0.0 and block["unmeasured_without_shapes"]


# --- FlexAttention on the CPU ---------------------------------------------------------------------


def test_a_collectors_cpu_flex_run_reports_flex(tmp_path):
    pytest.importorskip("torch")
    import subprocess
    import sys

    out = tmp_path / "flexrun"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "collectors",
            "--device",
            "cpu",
            "--variants",
            "flex",
            "--batch",
            "1",
            "--heads",
            "2",
            "--seq",
            "64",
            "--head-dim",
            "16",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=600,
        cwd=Path(__file__).parent.parent,
    )
    doc = json.load(gzip.open(out / "flex.json.gz"))
    ops = {e["name"] for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"}
    assert not any(
        re.search("flex", n, re.I) for n in ops
    )  # no op or kernel names flex (only the collectors' attention::flex span)
    assert "Torch-Compiled Region: 0/0" in ops
    trace = load_trace(out / "flex.json.gz")
    found = detect_backends(trace)
    assert found.backends == ["flex"]
    assert found.evidence["flex"][0].startswith("collector metadata: variant flex")
    # the same trace without its collectors' block is not claimed
    del doc["attnscope"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc))
    assert detect_backends(load_trace(bare)).backends == []
