"""Serving traces by phase (issue 39 part 3): a user of a vLLM or SGLang trace asks "how much of the
time is prefill and how much decode, how many tokens each, and how close does decode attention come to
the memory bandwidth?"

Every number is checked against an oracle that shares no code with the engine: the json module reading
the step annotations and summing the durations of the device events each step launched (tests/oracle.py
gives the flat events and the launch of each correlation), and hand arithmetic of tokens and KV bytes
written out here. The synthetic traces are written with the json module in Kineto's shape (see
test_attention_time.Writer)."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

import oracle
from dashboard.engine.analyses.phases import phase_steps, phases_block
from dashboard.engine.analyses.serving import read_phases
from dashboard.engine.analyses.summary import summarize
from dashboard.engine.load import load_trace
from dashboard.engine.rules.phases import PHASE_KERNELS, kernel_phase
from test_attention_time import BF16, MI300X, Writer
from test_dashboard_apptest import app, table  # noqa: F401  (the dashboard fixture)

VLLM = oracle.DATA / "tracelens_vllm_decode_graph_unified_attention.json.gz"
SGLANG = oracle.DATA / "tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz"
QWEN_CHAT = oracle.DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
ANNOTATION = re.compile(r"_context_\d+\(|step\[[A-Z_]+ bs=")


def _oracle_steps(path: Path) -> dict[str, dict[str, int]]:
    """By hand from the json: the outermost step annotations (user_annotation with a serving step's
    name) and, per step, the summed durations (ns) of the device events whose launch starts inside it
    on its thread, and of those that are attention kernels."""
    events = oracle.events_ns(oracle.raw(path))
    marks = [e for e in events if e["cat"] == "user_annotation" and ANNOTATION.search(e["name"])]
    outer = [m for m in marks if not any(o is not m and oracle._holds(o, m) for o in marks)]
    launch_of = oracle.launches(events)
    out = {m["name"]: {"device_ns": 0, "attention_ns": 0} for m in outer}
    for e in events:
        if not oracle.is_device(e):
            continue
        launch = launch_of.get(e["args"].get("correlation"))
        step = next((m for m in outer if launch is not None and oracle._holds(m, launch)), None)
        if step is None:
            continue
        out[step["name"]]["device_ns"] += e["end"] - e["ts"]
        if oracle.GPU_CATS[e["cat"]] == "kernel" and oracle.is_attention_kernel(e["name"]):
            out[step["name"]]["attention_ns"] += e["end"] - e["ts"]
    return out


def test_the_vllm_decode_step_is_one_decode_step_of_32_requests_over_55086_keys():
    steps = phase_steps(load_trace(VLLM))
    expected = _oracle_steps(VLLM)
    assert len(expected) == 1 and steps.height == 1
    (name, sums), row = next(iter(expected.items())), steps.row(0, named=True)
    # execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086): no context
    # request, 32 generation requests of one new token each (sq32) reading 55086 keys between them
    assert row["name"] == name and row["phase"] == "decode" and row["found_by"] == "annotation"
    assert (row["requests"], row["tokens"], row["decode_tokens"], row["decode_keys"]) == (32, 32, 32, 55086)
    assert abs(row["device_ns"] - sums["device_ns"]) <= 425  # one ns of rounding per device event at most
    assert abs(row["attention_ns"] - sums["attention_ns"]) <= 36
    assert row["calls"] == 24  # 12 kernel_unified_attention_2d + 12 (3d + its reduce_segments): 24 layers
    # the 24 calls ran in one hipGraphLaunch: no op recorded the KV heads or head dim
    assert row["kv_bytes"] is None and "graph replay" in row["kv_reason"]


def test_the_vllm_decode_trace_says_why_it_has_no_bandwidth_number():
    block = phases_block(load_trace(VLLM))
    (decode,) = block["by_phase"]
    assert decode["phase"] == "decode" and decode["steps"] == 1 and decode["attention_share"] == pytest.approx(1.0)
    assert decode["pct_of_bandwidth"] is None and "KV head count" in decode["kv_reason"]


def test_the_sglang_trace_is_one_prefill_step_of_15_requests_and_15360_tokens():
    steps = phase_steps(load_trace(SGLANG))
    expected = _oracle_steps(SGLANG)
    # two annotations, one inside the other: execute_15360_context_15(...) (522.7 ms) holds
    # step[EXTEND bs=15 toks=15360] (28.9 ms); they are one step, read from the one with the lengths
    assert len(expected) == 1 and steps.height == 1
    (name, sums), row = next(iter(expected.items())), steps.row(0, named=True)
    assert row["name"] == name and name.startswith("execute_15360_context_15(") and row["phase"] == "prefill"
    # context_15(sq15360 sk15360 sqsq15728640 ...): 15 requests, 15360 tokens (15 x 1024: 15 x 1024^2 = 15728640)
    assert 15 * 1024 == 15360 and 15 * 1024**2 == 15728640
    assert (row["requests"], row["tokens"], row["prefill_tokens"], row["decode_tokens"]) == (15, 15360, 15360, 0)
    assert abs(row["device_ns"] - sums["device_ns"]) <= 527
    assert abs(row["attention_ns"] - sums["attention_ns"]) <= 36 and sums["attention_ns"] > 0
    assert row["calls"] == 36  # Qwen3's 36 layers: one mha_batch_prefill each
    # SGLang's own annotation of the same step agrees: step[EXTEND bs=15 toks=15360]
    inner = read_phases("step[EXTEND bs=15 toks=15360]")
    assert (inner.phase, inner.requests, inner.tokens) == ("prefill", 15, 15360)


def test_a_trace_that_is_not_serving_has_no_phases_and_its_summary_no_key():
    trace = load_trace(QWEN_CHAT)  # Hugging Face generate() with SDPA: no step annotation, no serving kernel
    assert phase_steps(trace).height == 0 and phases_block(trace) is None
    assert "phases" not in summarize(trace)
    assert "phases" in summarize(load_trace(SGLANG))


# --- synthetic: vLLM's current form, a prefill, a decode and a mixed step with the op's shapes -------

PAGED = "void vllm::paged_attention_v1_kernel<c10::BFloat16, c10::BFloat16, 128, 16, 128>(c10::BFloat16*)"
UNIFIED = "kernel_unified_attention_2d"
HQ, HKV, D = 32, 8, 128
CURRENT = {
    # 2 prefill requests of 300 and 100 tokens: sq 400, sqsq 300^2 + 100^2 = 100000
    "prefill": "execute_400_context_2(sq400sk400sqsq100000sqsk100000)_generation_0(sq0sk0sqsq0sqsk0)",
    # 4 decode requests with 1000, 1025, 1050 and 1025 keys: sk 4100, sqsk 4100
    "decode": "execute_4_context_0(sq0sk0sqsq0sqsk0)_generation_4(sq4sk4100sqsq4sqsk4100)",
    # 1 prefill request of 100 tokens and 3 decode requests over 3000 keys
    "mixed": "execute_103_context_1(sq100sk100sqsq10000sqsk10000)_generation_3(sq3sk3000sqsq3sqsk3000)",
}
# per step: two layers, each (KV-cache-free) attention kernel of these µs, and one 50 µs GEMM beside
ATTENTION_US = {"prefill": (120.0, 120.0), "decode": (20.0, 20.0), "mixed": (60.0, 60.0)}
GEMM = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256"


def _serving_trace(tmp_path: Path, steps: dict[str, str], kernel: dict[str, str], shapes: bool = True) -> Path:
    w = Writer()
    t = 0.0
    for phase, name in steps.items():
        w.host("user_annotation", name, t, 900.0)
        tokens = {"prefill": 400, "decode": 4, "mixed": 103}[phase]
        dims = [[tokens, HQ, D], [tokens, HKV, D], [tokens, HKV, D], [tokens, HQ, D], [], []] if shapes else []
        for layer, dur in enumerate(ATTENTION_US[phase]):
            start = t + 10 + layer * 200
            w.host("cpu_op", "vllm::unified_attention_with_output", start, 50.0,
                   **{"Input Dims": dims, "Input type": [BF16] * 4 + ["", ""]})  # fmt: skip
            w.launch(start + 5, [(kernel[phase], 10_000 + start, dur)])
            w.launch(start + 100, [(GEMM, 10_100 + start, 50.0)])
        t += 1000.0
    return w.write(tmp_path / "serving.json", MI300X)


KERNELS = {"prefill": UNIFIED, "decode": PAGED, "mixed": UNIFIED}


def test_the_current_form_splits_prefill_decode_and_mixed_steps(tmp_path):
    steps = phase_steps(load_trace(_serving_trace(tmp_path, CURRENT, KERNELS)))
    rows = {row["phase"]: row for row in steps.iter_rows(named=True)}
    assert set(rows) == {"prefill", "decode", "mixed"}
    assert (rows["prefill"]["requests"], rows["prefill"]["tokens"]) == (2, 400)
    assert (rows["decode"]["requests"], rows["decode"]["tokens"], rows["decode"]["decode_keys"]) == (4, 4, 4100)
    mixed = rows["mixed"]
    assert (mixed["requests"], mixed["prefill_tokens"], mixed["decode_tokens"], mixed["decode_keys"]) == (
        4,
        100,
        3,
        3000,
    )
    for phase, row in rows.items():  # two attention kernels and two 50 µs GEMMs a step
        assert row["attention_ns"] == sum(ATTENTION_US[phase]) * 1000
        assert row["device_ns"] == (sum(ATTENTION_US[phase]) + 2 * 50.0) * 1000
        assert row["calls"] == 2
    assert "told apart" in mixed["kv_reason"] and mixed["kv_bytes"] is None


def test_decode_attention_reads_the_kv_cache_against_the_bandwidth_roof(tmp_path):
    block = phases_block(load_trace(_serving_trace(tmp_path, CURRENT, KERNELS)))
    decode = next(p for p in block["by_phase"] if p["phase"] == "decode")
    # K and V per key token and layer: 2 x 8 kv heads x 128 dims x 2 bytes (bf16) = 4096 bytes;
    # 4100 keys x 2 layers x 4096 = 33,587,200 bytes
    assert 2 * 8 * 128 * 2 == 4096 and 4100 * 2 * 4096 == 33_587_200
    assert decode["kv_bytes"] == 33_587_200
    # over 40 µs of decode attention: 33,587,200 B / 40,000 ns = 839.68 B/ns = 0.83968 TB/s; the MI300X
    # data sheet's 5.3 TB/s: 15.84%
    assert decode["kv_tbps"] == pytest.approx(0.83968)
    assert decode["peak_tbps"] == 5.3
    assert decode["pct_of_bandwidth"] == pytest.approx(100 * 0.83968 / 5.3)
    # shares of the 120+120 + 20+20 + 60+60 = 400 µs of attention
    shares = {p["phase"]: p["attention_share"] for p in block["by_phase"]}
    assert shares == pytest.approx({"prefill": 240 / 400, "decode": 40 / 400, "mixed": 120 / 400})
    assert [p["phase"] for p in block["by_phase"]] == ["prefill", "decode", "mixed"]


def test_without_recorded_shapes_the_decode_bytes_say_why(tmp_path):
    path = _serving_trace(tmp_path, {"decode": CURRENT["decode"]}, KERNELS, shapes=False)
    decode = phases_block(load_trace(path))["by_phase"][0]
    assert decode["kv_bytes"] is None and "record_shapes" in decode["kv_reason"]
    assert decode["decode_keys"] == 4100  # the annotation still gives the keys


# --- synthetic: vLLM's older form --------------------------------------------------------------------

OLDER = {
    "prefill": "execute_context_1(888_788544)_generation_0(0)",  # 1 request of 888 tokens: 888^2 = 788544
    "decode": "execute_context_0(0_0)_generation_8(8)",  # 8 requests, one token each, no key count
}


def test_the_older_form_gives_prefill_tokens_and_says_decode_keys_are_missing(tmp_path):
    assert 888 * 888 == 788544
    path = _serving_trace(tmp_path, OLDER, {"prefill": UNIFIED, "decode": PAGED})
    rows = {row["phase"]: row for row in phase_steps(load_trace(path)).iter_rows(named=True)}
    assert (rows["prefill"]["requests"], rows["prefill"]["tokens"]) == (1, 888)
    assert (rows["decode"]["requests"], rows["decode"]["tokens"], rows["decode"]["decode_keys"]) == (8, 8, None)
    block = phases_block(load_trace(path))
    decode = next(p for p in block["by_phase"] if p["phase"] == "decode")
    assert decode["kv_bytes"] is None and "no key count" in decode["kv_reason"]
    assert "no key count" in decode["keys_reason"]


def test_sglang_forward_modes_read_as_phases():
    assert (read_phases("step[DECODE bs=8 toks=8]").phase, read_phases("step[DECODE bs=8 toks=8]").decode_keys) == (
        "decode",
        None,
    )
    assert read_phases("step[MIXED bs=5 toks=900]").phase == "mixed"
    assert read_phases("step[IDLE bs=0 toks=0]") is None
    assert read_phases("ProfilerStep#3") is None


# --- synthetic: kernel evidence only -----------------------------------------------------------------

STAGE1, STAGE2 = "_fwd_kernel_stage1", "_fwd_kernel_stage2"
PREFILL = "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits>(flashinfer::Params)"


def test_without_annotations_each_profiler_step_takes_its_phase_from_its_attention_kernels(tmp_path):
    w = Writer()
    # step 0: Triton split-KV decode (stage 1 then 2: 30 + 5 µs); step 1: FlashInfer prefill 200 µs;
    # step 2: both (mixed); step 3: only a GEMM (no phase)
    plan = [[(STAGE1, 30.0), (STAGE2, 5.0)], [(PREFILL, 200.0)], [(PREFILL, 100.0), (STAGE1, 30.0)], []]
    for step, kernels in enumerate(plan):
        t = step * 1000.0
        w.host("user_annotation", f"ProfilerStep#{step}", t, 900.0)
        w.launch(t + 10, [(name, 10_000 + t + 50 * i, dur) for i, (name, dur) in enumerate(kernels)])
        w.launch(t + 500, [(GEMM, 10_000 + t + 400, 40.0)])
    steps = phase_steps(load_trace(w.write(tmp_path / "kernels.json", MI300X)))
    assert steps["found_by"].to_list() == ["kernels"] * 3
    assert dict(zip(steps["name"], steps["phase"])) == {
        "ProfilerStep#0": "decode",
        "ProfilerStep#1": "prefill",
        "ProfilerStep#2": "mixed",
    }
    assert steps["device_ns"].to_list() == [75_000, 240_000, 170_000]  # the step's kernels + the 40 µs GEMM
    assert steps["attention_ns"].to_list() == [35_000, 200_000, 130_000]
    assert steps["tokens"].null_count() == 3 and steps["kv_bytes"].null_count() == 3
    decode = phases_block(load_trace(tmp_path / "kernels.json"))["by_phase"][1]
    assert decode["phase"] == "decode" and decode["tokens"] is None and "no step annotation" in decode["kv_reason"]


@pytest.mark.parametrize("rule", PHASE_KERNELS, ids=lambda r: r.pattern[:30])
def test_each_phase_rule_takes_its_examples(rule):
    assert rule.reason and rule.source and rule.examples
    assert all(kernel_phase(name) == rule.phase for name in rule.examples)


def test_kernels_that_serve_both_phases_name_none():
    for name in ("kernel_unified_attention_3d", "reduce_segments", "pytorch_flash::flash_fwd_kernel", "_fwd_kernel"):
        assert kernel_phase(name) is None
    assert pl.Series([kernel_phase(PAGED), kernel_phase(PREFILL)]).to_list() == ["decode", "prefill"]


# --- what the user reads: summary text, compare lines, the Overview's table ---------------------------


def test_the_summary_text_gives_a_line_per_phase_and_why_the_kv_reads_are_unknown():
    from dashboard.phase_lines import summary_lines

    lines = summary_lines(summarize(load_trace(VLLM)))
    assert lines[0] == "  serving phases, steps split by the step annotations:"
    assert lines[1].split(",")[0].split() == ["decode", "1", "step"]
    assert "32 requests, 32 tokens, 55,086 decode keys" in lines[1] and "(100% of attention)" in lines[1]
    assert lines[2].strip().startswith("KV-cache reads: unknown (the attention kernels ran from a CUDA/HIP graph")
    assert summary_lines(summarize(load_trace(QWEN_CHAT))) == []


def test_the_summary_text_gives_the_bandwidth_of_a_measured_decode(tmp_path):
    from dashboard.phase_lines import summary_lines

    lines = summary_lines(summarize(load_trace(_serving_trace(tmp_path, CURRENT, KERNELS))))
    # 33,587,200 bytes = 0.034 GB at 0.84 TB/s, 15.8% of 5.3 (see the bandwidth test above)
    assert "KV-cache reads: 0.034 GB at 0.84 TB/s, 15.8% of the 5.3 TB/s peak" in [line.strip() for line in lines]
    mixed = next(line for line in lines if line.strip().startswith("mixed"))
    assert "4 requests, 103 tokens (100 prefill, 3 decode), 3,000 decode keys" in mixed


def test_compare_gives_a_line_per_phase_only_when_every_run_is_serving(tmp_path):
    from dashboard.phase_lines import compare_lines

    vllm, chat = summarize(load_trace(VLLM)), summarize(load_trace(QWEN_CHAT))
    assert compare_lines({"a": vllm, "b": chat}) == []
    text = compare_lines({"a": vllm, "b": vllm})
    # 724.36 µs of attention over 32 tokens: 22.6 µs a token, the same in both runs
    assert text[-1] == (
        "  decode: a: 1 step, attention 0.72 ms, 32 tokens (22.6 µs a token) | "
        "b: 1 step, attention 0.72 ms, 32 tokens (22.6 µs a token, 1.00x the baseline's)"
    )
    markdown = compare_lines({"a": vllm, "b": summarize(load_trace(SGLANG))}, markdown=True)
    assert markdown[3] == "| phase | a | b |" and markdown[5].startswith("| prefill | no such step | 1 step")
    assert markdown[6].startswith("| decode | 1 step, attention 0.72 ms") and markdown[6].endswith("| no such step |")


def test_the_cli_compare_of_two_serving_runs_ends_with_the_phases(capsys):
    from dashboard.cli import main

    assert main(["compare", str(VLLM), str(VLLM)]) == 0
    out = capsys.readouterr().out
    assert "Serving phases (first run is the baseline):" in out and "  decode: " in out


def test_the_overview_table_has_a_row_per_run_and_phase(tmp_path):
    from dashboard.engine.analyses.phases import phase_table

    table = phase_table({"vllm": load_trace(VLLM), "chat": load_trace(QWEN_CHAT), "sglang": load_trace(SGLANG)})
    assert table.select("run", "phase", "steps", "tokens").rows() == [
        ("vllm", "decode", 1, 32),
        ("sglang", "prefill", 1, 15360),
    ]
    assert table["us_per_token"][0] == pytest.approx(724.36 / 32)
    assert "graph replay" in table["note"][0] and table["note"][1] is None


def test_the_overview_draws_the_phase_table():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_string(
        "from dashboard.engine.analyses.phases import phase_table\n"
        "from dashboard.engine.load import load_trace\n"
        "from dashboard.views.overview import show_phases\n"
        f"show_phases(phase_table({{'vllm': load_trace({str(VLLM)!r})}}))\n",
        default_timeout=60,
    )
    at.run()
    assert not at.exception
    assert [s.value for s in at.subheader] == ["Serving steps by phase"]
    assert at.dataframe[0].value["phase"].tolist() == ["decode"]


def test_the_dashboards_overview_of_a_serving_run_shows_its_phases(app):
    run = "gpu-public/tracelens_vllm_decode_graph_unified_attention"  # the bundled sample of the same trace
    shown = table(app(params={"run": [run], "baseline": run}), "tbl_overview_phases")
    assert shown["phase"].tolist() == ["decode"] and shown["tokens"].tolist() == [32]
    assert shown["attention_us"].tolist() == pytest.approx([724.36])
