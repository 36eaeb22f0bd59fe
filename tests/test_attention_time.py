"""Attention time is attention (issue 37, items 7-9): a call's time sums its attention kernels, not
the KV-cache write or the output fill its op launches beside them; a call is one call, quantize and
attention kernels together; the headline rests on most of the attention or gives the coverage; vLLM's
older step annotation gives the lengths of a prefill step.

The traces are written here with the json module in Kineto's shape (cpu_op and launch on the host,
kernels tied to their launch by args.correlation, user_annotation for a serving step), each
reproducing a pattern of a real trace the project does not hold (B200 vLLM, MI300 Qwen, MI300X Flux
with SageAttention). Expected numbers are worked out by hand from the durations and shapes written
here, never read from the engine."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import oracle
from dashboard.engine.analyses.efficiency import (
    ServingBatch,
    attention_calls,
    attention_device_ns,
    attention_others,
    efficiency,
    efficiency_block,
)
from dashboard.engine.load import load_trace
from dashboard.engine.analyses.roofline import call_bytes
from dashboard.engine.rules import CALL_PARTS, call_part

B200 = [{"id": 0, "name": "NVIDIA B200", "computeMajor": 10, "computeMinor": 0, "totalGlobalMem": 191_000_000_000}]
MI300X = [
    {
        "id": 0,
        "name": "AMD Instinct MI300X",
        "computeMajor": 9,
        "computeMinor": 4,
        "numSms": 304,
        "totalGlobalMem": 206141652992,
    }
]
BF16 = "c10::BFloat16"
FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)"
)
KV_WRITE = (
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"
    "(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, long, "
    "long, long, int, int, int, float const*, float const*)"
)
FMHA = "fmhaSm100aKernel_QBfloat16KvBfloat16OBfloat16H128PagedKvCausalP64VarSeqQ128Kv128PersistentContext"


class Writer:
    """Builds a Kineto-style trace: host events on pid 1 tid 1, kernels on pid 0 tid 7."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 0

    def host(self, cat: str, name: str, ts: float, dur: float, **args) -> None:
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}
        )

    def launch(self, ts: float, kernels: list[tuple[str, float, float]], call: str = "hipModuleLaunchKernel") -> None:
        """One launch call per kernel, 1 us each from ts on; kernels: (name, start, duration in us)."""
        for i, (name, start, dur) in enumerate(kernels):
            self.corr += 1
            self.host("cuda_runtime", call, ts + i, 0.5, correlation=self.corr)
            self.events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": start,
                    "dur": dur,
                    "args": {"correlation": self.corr, "device": 0, "stream": 7},
                }
            )

    def write(self, path: Path, devices: list[dict]) -> Path:
        path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": devices, "traceEvents": self.events}))
        return path


# --- item 7 and 9: vLLM on a B200: the KV-cache write beside the fmha kernel, the older step annotation --

OLDER_STEP = "execute_context_1(888_788544)_generation_0(0)"  # 1 prefill request of 888 tokens: 888^2 = 788544
HQ, HKV, D, TOKENS = 32, 8, 128, 888
# two layers: (KV-cache write, fmha) durations in us; the fmha kernels add up to 485.8, everything to 648.5
LAYERS = [(81.3, 242.9), (81.4, 242.9)]


def _vllm_b200(tmp_path: Path, step: str = OLDER_STEP) -> Path:
    w = Writer()
    w.host("user_annotation", step, 0.0, 5000.0)
    t = 100.0
    for cache, fmha in LAYERS:
        dims = [[TOKENS, HQ, D], [TOKENS, HKV, D], [TOKENS, HKV, D], [TOKENS, HQ, D], [], []]
        w.host(
            "cpu_op",
            "vllm::unified_attention_with_output",
            t,
            50.0,
            **{"Input Dims": dims, "Input type": [BF16] * 4 + ["", ""]},
        )
        w.corr += 1
        w.host("cuda_runtime", "cudaLaunchKernel", t + 10, 2.0, correlation=w.corr)
        w.events.append(
            {"ph": "X", "cat": "kernel", "name": KV_WRITE, "pid": 0, "tid": 7, "ts": t + 1000, "dur": cache,
             "args": {"correlation": w.corr, "device": 0, "stream": 7}}
        )  # fmt: skip
        w.corr += 1
        w.host("cuda_driver", "cuLaunchKernelEx", t + 20, 2.0, correlation=w.corr)
        w.events.append(
            {"ph": "X", "cat": "kernel", "name": FMHA, "pid": 0, "tid": 7, "ts": t + 1100, "dur": fmha,
             "args": {"correlation": w.corr, "device": 0, "stream": 7}}
        )  # fmt: skip
        t += 1000.0
    return w.write(tmp_path / "vllm_b200.json", B200)


def test_the_older_step_annotation_reads_as_a_fresh_prefill():
    batch = ServingBatch.parse(OLDER_STEP)
    # by hand: one request of 888 new tokens over its own 888 keys, causal: 1 + 2 + ... + 888 pairs
    assert (batch.requests, batch.sq, batch.sk, batch.sqsq, batch.sqsk) == (1, 888, 888, 888 * 888, 888 * 888)
    assert batch.pairs == 888 * 889 // 2
    # two requests of 3 and 5 tokens: 8 tokens, 9 + 25 = 34; pairs 6 + 15
    assert ServingBatch.parse("execute_context_2(8_34)_generation_0(0)").pairs == 6 + 15
    # decode requests' keys are their whole context, which the older form does not give
    why = ServingBatch.read("execute_context_1(888_788544)_generation_4(4)")
    assert isinstance(why, str) and "no key count for its 4 generation requests" in why
    # sums that no lengths give: fewer squares than tokens, more than tokens^2
    assert isinstance(ServingBatch.read("execute_context_1(10_5)_generation_0(0)"), str)
    assert isinstance(ServingBatch.read("execute_context_1(10_101)_generation_0(0)"), str)
    assert ServingBatch.read("execute_model") is None
    # the current form still reads as before
    assert ServingBatch.parse("execute_context_1(sq4sk4sqsq16sqsk16)_generation_0(sq0sk0sqsq0sqsk0)").pairs == 10


def test_vllm_attention_time_is_the_fmha_kernels_and_the_kv_cache_write_is_listed_beside(tmp_path):
    trace = load_trace(_vllm_b200(tmp_path))
    calls = attention_calls(trace)
    assert calls.height == 2 and calls["reason"].to_list() == [None, None]
    assert calls["time_ns"].to_list() == [242_900, 242_900]
    assert calls["other_ns"].to_list() == [81_300, 81_400] and calls["others"].to_list() == [1, 1]
    assert calls["kernels"].to_list() == [1, 1] and calls["kernel"].to_list() == [FMHA, FMHA]
    assert attention_device_ns(trace) == 485_800  # fmha alone, not 648.5 us
    others = attention_others(trace).to_dicts()
    assert others == [
        {
            "op": "vllm::unified_attention_with_output",
            "name": KV_WRITE,
            "count": 2,
            "calls": 2,
            "total_us": pytest.approx(162.7),
        }
    ]
    # item 9: FLOPs and bytes from the older annotation's lengths
    pairs = 888 * 889 // 2
    flops = 2 * HQ * pairs * (D + D)  # = 4 * Hq * D * pairs: QK^T and PV over the causal pairs
    moved = 2 * (2 * TOKENS * HQ * D + 2 * TOKENS * HKV * D)  # read Q, K, V, write O, bf16
    assert calls["flops"].to_list() == [flops, flops] and calls["bytes"].to_list() == [moved, moved]
    assert "keys = query tokens" in calls["shape"][0]
    row = efficiency(trace).row(0, named=True)
    assert row["count"] == 2 and row["total_us"] == pytest.approx(485.8) and row["other_us"] == pytest.approx(162.7)
    assert row["tflops"] == pytest.approx(2 * flops / 485.8e-6 / 1e12)
    block = efficiency_block(trace)
    assert block["measured"] == 2 and block["measured_share"] == pytest.approx(1.0)
    assert block["tflops"] == pytest.approx(2 * flops / 485.8e-6 / 1e12)
    assert block["pct_of_roofline"] is not None and block["coverage_reason"] is None
    assert block["other_device_ns"] == 162_700 and block["others"][0]["name"] == KV_WRITE
    # the roofline point's bytes are the fmha's call, not the KV-cache write's as well
    assert call_bytes(trace)["moved"].to_list() == [moved, moved]


def test_an_older_annotation_with_decode_requests_says_what_it_lacks(tmp_path):
    trace = load_trace(_vllm_b200(tmp_path, "execute_context_1(888_788544)_generation_4(4)"))
    reason = attention_calls(trace)["reason"][0]
    assert "older step annotation" in reason and "4 generation requests" in reason
    assert "no step annotation" not in reason


# --- item 7: ROCm SDPA (AOTriton attn_fwd) with a FillFunctor zeroing the output first ---------------

SDPA = "aten::_scaled_dot_product_flash_attention"
B, H, S, DH = 1, 16, 1024, 128


def _rocm_sdpa(tmp_path: Path) -> Path:
    w = Writer()
    w.host("user_annotation", "ProfilerStep#1", 0.0, 10000.0)
    for i in range(3):
        t = 100.0 + 1000 * i
        w.host(
            "cpu_op",
            SDPA,
            t,
            50.0,
            **{
                "Input Dims": [[B, H, S, DH]] * 3 + [[], [], [], []],
                "Input type": [BF16] * 3 + ["Scalar"] * 4,
                "Concrete Inputs": ["", "", "", "0.", "True", "False", ""],
            },
        )
        w.launch(t + 10, [(FILL, t + 500, 10.0), ("attn_fwd", t + 520, 200.0)])
    return w.write(tmp_path / "rocm_sdpa.json", MI300X)


def test_a_fill_before_attn_fwd_is_not_attention_time(tmp_path):
    trace = load_trace(_rocm_sdpa(tmp_path))
    calls = attention_calls(trace)
    assert calls["time_ns"].to_list() == [200_000] * 3 and calls["other_ns"].to_list() == [10_000] * 3
    assert calls["kernel"].to_list() == ["attn_fwd"] * 3 and calls["backend"][0] == "flash"
    assert attention_device_ns(trace) == 600_000
    assert attention_others(trace).select("name", "count", "calls", "total_us").rows() == [(FILL, 3, 3, 30.0)]
    flops = 4 * B * H * DH * (S * (S + 1) // 2)  # causal: the pairs on and below the diagonal
    assert calls["flops"].to_list() == [flops] * 3
    # achieved over attn_fwd alone (the fill would make it 630 us)
    assert efficiency_block(trace)["tflops"] == pytest.approx(3 * flops / 600e-6 / 1e12)


# --- item 8: SageAttention on an MI300X: quantize + attention kernels are one call; coverage -------------

SAGE_OP = "_FAv3SageWrapperFunc"
SB, SS, SH, SD = 1, 4096, 24, 128  # a DiT's image tokens
CB, CS, CH, CD = 1, 77, 12, 64  # the text encoder's
QUANT, SAGE_FWD = 30.0, 400.0  # us per kernel
CLIP_US = 10.0


def _sage_flux(tmp_path: Path, lone_calls: int = 4) -> Path:
    """13 small text-encoder SDPA calls with shapes; 2 Sage calls under aiter's op with shapes (quantize,
    fill the output, sage_fwd); lone_calls Sage calls launched under no op (two quantize kernels, then
    sage_fwd)."""
    w = Writer()
    w.host("user_annotation", "ProfilerStep#1", 0.0, 100000.0)
    t = 100.0
    for _ in range(13):
        w.host(
            "cpu_op",
            SDPA,
            t,
            20.0,
            **{
                "Input Dims": [[CB, CH, CS, CD]] * 3 + [[], [], [], []],
                "Input type": [BF16] * 3 + ["Scalar"] * 4,
                "Concrete Inputs": ["", "", "", "0.", "False", "False", ""],
            },
        )
        w.launch(t + 5, [("attn_fwd", t + 100, CLIP_US)])
        t += 200
    for _ in range(2):
        # newer aiter: q, k, v, softmax_scale (None), causal, window_size, ...
        w.host(
            "cpu_op",
            SAGE_OP,
            t,
            30.0,
            **{
                "Input Dims": [[SB, SS, SH, SD]] * 3 + [[], [], []],
                "Input type": [BF16] * 3 + ["", "Scalar", ""],
                "Concrete Inputs": ["", "", "", "", "False", ""],
            },
        )
        w.launch(t + 5, [("sage_quant_kernel", t + 100, QUANT), (FILL, t + 140, 5.0), ("sage_fwd", t + 150, SAGE_FWD)])
        t += 1000
    for _ in range(lone_calls):
        w.launch(
            t,
            [
                ("sage_quant_kernel", t + 100, QUANT),
                ("sage_quant_kernel", t + 140, QUANT),
                ("sage_fwd", t + 180, SAGE_FWD),
            ],
        )
        t += 1000
    return w.write(tmp_path / f"sage_flux_{lone_calls}.json", MI300X)


def _roofline_us(flops: int, moved: int) -> float:
    """The time (us) at the MI300X's bf16 roofline: 1307.4 TFLOP/s dense, 5.3 TB/s (peaks table)."""
    return flops / min(1307.4e12, flops / moved * 5.3e12) * 1e6


SAGE_FLOPS = 4 * SB * SH * SS * SS * SD  # not causal: every pair
SAGE_BYTES = 2 * 4 * SB * SS * SH * SD  # read Q, K, V, write O, bf16
CLIP_FLOPS = 4 * CB * CH * CS * CS * CD
CLIP_BYTES = 2 * 4 * CB * CS * CH * CD + 4 * CB * CS * CH  # and the flash op's fp32 log-sum-exp


def test_a_sage_call_is_its_quantize_and_attention_kernels_and_is_measured_from_its_shapes(tmp_path):
    trace = load_trace(_sage_flux(tmp_path))
    calls = attention_calls(trace)
    sage = calls.filter(pl.col("backend") == "sage")
    assert sage.height == 2 + 4  # one per call, not one per kernel
    with_op = sage.filter(pl.col("op") == SAGE_OP)
    assert with_op["time_ns"].to_list() == [int((QUANT + SAGE_FWD) * 1000)] * 2  # the fill is beside it
    assert with_op["kernels"].to_list() == [2, 2] and with_op["other_ns"].to_list() == [5000, 5000]
    assert with_op["flops"].to_list() == [SAGE_FLOPS] * 2 and with_op["bytes"].to_list() == [SAGE_BYTES] * 2
    lone = sage.filter(pl.col("op").is_null())
    assert lone["kernel"].to_list() == ["sage_fwd"] * 4 and lone["kernels"].to_list() == [3] * 4
    assert lone["time_ns"].to_list() == [int((2 * QUANT + SAGE_FWD) * 1000)] * 4
    assert calls.height == 13 + 2 + 4


def test_measured_calls_under_half_of_the_attention_give_the_coverage_not_a_percentage(tmp_path):
    trace = load_trace(_sage_flux(tmp_path))
    sage_us, lone_us, clip_us = 2 * (QUANT + SAGE_FWD), 4 * (2 * QUANT + SAGE_FWD), 13 * CLIP_US
    total_us = sage_us + lone_us + clip_us  # 860 + 1840 + 130 = 2830
    assert attention_device_ns(trace) == round(total_us * 1000)
    block = efficiency_block(trace)
    assert block["calls"] == 19 and block["measured"] == 15
    share = (sage_us + clip_us) / total_us  # 990 / 2830: 35%
    assert block["measured_share"] == pytest.approx(share) and round(100 * share) == 35
    assert block["pct_of_roofline"] is None
    assert "cover 35% of the attention device time" in block["coverage_reason"]
    assert block["reasons"][0] == block["coverage_reason"]
    # the measured calls' own number is kept beside it
    ideal = 2 * _roofline_us(SAGE_FLOPS, SAGE_BYTES) + 13 * _roofline_us(CLIP_FLOPS, CLIP_BYTES)
    assert block["measured_pct_of_roofline"] == pytest.approx(100 * ideal / (sage_us + clip_us))
    assert block["tflops"] == pytest.approx((2 * SAGE_FLOPS + 13 * CLIP_FLOPS) / ((sage_us + clip_us) * 1e-6) / 1e12)
    from dashboard.cli import _efficiency_line

    line = _efficiency_line(block)
    assert line.startswith("no percentage") and "35%" in line


def test_with_most_of_the_attention_measured_the_headline_is_the_percentage(tmp_path):
    trace = load_trace(_sage_flux(tmp_path, lone_calls=0))
    block = efficiency_block(trace)
    sage_us, clip_us = 2 * (QUANT + SAGE_FWD), 13 * CLIP_US
    assert block["measured_share"] == pytest.approx(1.0) and block["coverage_reason"] is None
    ideal = 2 * _roofline_us(SAGE_FLOPS, SAGE_BYTES) + 13 * _roofline_us(CLIP_FLOPS, CLIP_BYTES)
    assert block["pct_of_roofline"] == pytest.approx(100 * ideal / (sage_us + clip_us))
    assert block["pct_of_roofline"] == block["measured_pct_of_roofline"]


# --- parts of a call where no op says: the rules, and vLLM's graph-replayed 3d kernel + reduce_segments --


@pytest.mark.parametrize("row", CALL_PARTS, ids=lambda r: r.pattern[:30])
def test_each_call_part_row_takes_its_examples_and_they_are_attention_kernels(row):
    from dashboard.engine.rules import is_fused_attention

    assert row.reason and row.source and row.examples
    for name in row.examples:
        assert call_part(name) is row.before and is_fused_attention(name), name
    assert call_part("sage_fwd") is None and call_part("kernel_unified_attention_3d") is None


def test_the_replayed_vllm_3d_kernel_and_its_reduce_segments_are_one_call():
    path = oracle.DATA / "tracelens_vllm_decode_graph_unified_attention.json.gz"
    kernels = sorted(
        (e for e in oracle.complete(oracle.raw(path)) if e.get("cat") == "kernel"), key=lambda e: float(e["ts"])
    )
    # by hand from the json: each reduce_segments follows a kernel_unified_attention_3d on the same stream
    att = [
        e
        for e in kernels
        if e["name"] in ("kernel_unified_attention_2d", "kernel_unified_attention_3d", "reduce_segments")
    ]
    pairs = [(a, b) for a, b in zip(att, att[1:]) if b["name"] == "reduce_segments"]
    assert len(pairs) == 12 and all(a["name"] == "kernel_unified_attention_3d" for a, _ in pairs)
    want_3d = sorted(round(float(a["dur"]) * 1000) + round(float(b["dur"]) * 1000) for a, b in pairs)
    calls = attention_calls(load_trace(path))
    assert calls.height == 12 + 12
    three_d = calls.filter(pl.col("kernel") == "kernel_unified_attention_3d")
    assert sorted(three_d["time_ns"].to_list()) == want_3d and set(three_d["kernels"].to_list()) == {2}
    assert "reduce_segments" not in calls["kernel"].to_list()
