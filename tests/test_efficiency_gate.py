"""The attention-efficiency gate and the summary's efficiency block, on the H100 traces (whose
flash calls reach 19.4% and 1.9% of the H100's roofline by a json reading: tests/test_efficiency.py)."""

from __future__ import annotations

import json

import oracle
from dashboard.engine import summarize
from dashboard.engine.compare.gate import Rules, check

QWEN = oracle.DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
SAMPLES = oracle.DATA.parent.parent / "sample_traces" / "cpu"


def test_the_gate_holds_above_and_fails_below_the_required_share_of_the_roofline(trace_of):
    qwen = trace_of(QWEN)
    assert check(qwen, qwen, Rules(min_attention_efficiency=10)) == []
    [problem] = check(qwen, qwen, Rules(min_attention_efficiency=30))
    assert problem.startswith("attention reaches 19.4% of the roofline (90.4 TFLOP/s), below the required 30%")


def test_a_trace_whose_efficiency_cannot_be_measured_fails_the_gate_and_says_why(trace_of):
    cpu = trace_of(SAMPLES / "sdpa.json.gz")
    [problem] = check(cpu, cpu, Rules(min_attention_efficiency=1))
    assert problem.startswith("attention efficiency required, but it cannot be measured on the candidate: CPU trace")


def test_the_summary_carries_the_efficiency_block_as_json(trace_of):
    block = json.loads(json.dumps(summarize(trace_of(QWEN))))["efficiency"]
    assert block["device"]["matched"] == "H100 SXM5 80GB"
    assert round(block["pct_of_roofline"], 1) == 19.4
    assert block["measured"] == 24 and block["calls"] == 34
