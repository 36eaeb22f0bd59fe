"""Issue 28, item 9: the roofline places each variant at the bytes its own kernels move, read from
the recorded shapes, never naive attention at a fused kernel's minimum bytes. Every expected byte
count here is computed by hand from the attention's shape (B, H, S, D and the element size): the
scores matrix (B*H*S*S elements) written by Q·Kᵀ, read and written by the scale, the hidden copy,
masked_fill and softmax, read by ·V; a fused kernel reads Q, K, V once and writes O once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from oracle import complete, raw

from dashboard import charts, report
from dashboard.engine.compare import review
from dashboard.engine.load import load_trace
from dashboard.engine.analyses.roofline import call_bytes, op_bytes, roofline_rows

ROOT = Path(__file__).resolve().parents[1]
H200, CPU = ROOT / "sample_traces" / "h200", ROOT / "sample_traces" / "cpu"


def naive_bytes(b: int, h: int, s: int, d: int, elem: int, inplace: bool = False) -> int:
    """What naive attention's kernels move, by hand. Q·Kᵀ reads Q and K (2·BHSD) and writes the
    scores (N = BHSS); the scale reads and writes N; out-of-place masked_fill's hidden copy reads
    and writes N; masked_fill_ reads and writes N and reads the S×S bool mask (1 byte each); softmax
    reads and writes N; ·V reads N and V (BHSD) and writes O (BHSD)."""
    n, qkvo = b * h * s * s, b * h * s * d
    qk = 2 * qkvo + n
    scale = 2 * n
    copy = 0 if inplace else 2 * n
    fill = 2 * n
    softmax = 2 * n
    pv = n + 2 * qkvo
    return elem * (qk + scale + copy + fill + softmax + pv) + s * s


def fused_bytes(b: int, h: int, s: int, d: int, elem: int, lse: bool = False) -> int:
    """Q, K, V read once, O written once (and the fp32 log-sum-exp, one per query row and head)."""
    return elem * 4 * b * h * s * d + (4 * b * h * s if lse else 0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The collectors' CPU traces at B=1, H=2, S=128, D=64, fp32, profiled here."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("tiny")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "collectors",
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--batch",
            "1",
            "--heads",
            "2",
            "--seq",
            "128",
            "--head-dim",
            "64",
            "--variants",
            "naive,naive_inplace,sdpa,sdpa-math",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def _step(rows) -> dict:
    (row,) = [r for r in rows.iter_rows(named=True) if r["measure"] == "whole step"]
    return row


def test_naive_at_b1_h2_s128_d64_fp32_moves_the_scores_matrix_ten_times(tiny):
    assert naive_bytes(1, 2, 128, 64, 4) == 1_589_248  # 4 * (4*16384 + 10*32768) + 128*128
    naive = _step(roofline_rows(load_trace(tiny / "naive.json.gz")))
    assert naive["bytes"] == naive_bytes(1, 2, 128, 64, 4)
    inplace = _step(roofline_rows(load_trace(tiny / "naive_inplace.json.gz")))
    assert inplace["bytes"] == naive_bytes(1, 2, 128, 64, 4, inplace=True)  # masked_fill_: no hidden copy
    # the CPU flash kernel reads Q, K, V, writes O and its log-sum-exp
    sdpa = roofline_rows(load_trace(tiny / "sdpa.json.gz"))
    assert {r["measure"]: r["bytes"] for r in sdpa.iter_rows(named=True)} == {
        "attention ops": fused_bytes(1, 2, 128, 64, 4, lse=True),
        "whole step": fused_bytes(1, 2, 128, 64, 4, lse=True),
    }
    flops = 2 * 2 * (128 * 129 // 2) * (64 + 64)  # 2 FLOP x H x causal pairs x (D + Dv), B = 1
    assert naive["intensity"] == pytest.approx(flops / naive["bytes"])


def test_the_math_backend_is_placed_at_its_own_kernels_bytes_not_a_fused_kernels(tiny):
    math_rows = roofline_rows(load_trace(tiny / "sdpa-math.json.gz"))
    ops = {r["measure"]: r["bytes"] for r in math_rows.iter_rows(named=True)}
    assert ops["attention ops"] == ops["whole step"]  # the call is the whole step
    assert ops["attention ops"] > 5 * fused_bytes(1, 2, 128, 64, 4)  # it moves the scores matrix, several times


def test_the_bundled_cpu_naive_step_moves_what_its_shape_says(trace_of):
    trace = trace_of(CPU / "naive.json.gz")
    shape = trace.collector["shape"]
    b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    assert _step(roofline_rows(trace))["bytes"] == naive_bytes(b, h, s, d, 4)
    inplace = trace_of(CPU / "naive_inplace.json.gz")
    assert _step(roofline_rows(inplace))["bytes"] == naive_bytes(b, h, s, d, 4, inplace=True)


def test_the_h200_naive_step_moves_its_kernels_bytes_and_is_memory_bound(trace_of):
    """bf16 8x16x1024x64: the kernels' bytes by hand, plus the 4-byte memset cuBLAS launches per
    step (its bytes read from the json)."""
    path = H200 / "naive.json.gz"
    doc = raw(path)
    steps = {e["name"] for e in complete(doc) if str(e.get("name", "")).startswith("ProfilerStep#")}
    memsets = [e["args"]["bytes"] for e in complete(doc) if e.get("cat") == "gpu_memset"]
    row = _step(roofline_rows(trace_of(path)))
    want = naive_bytes(8, 16, 1024, 64, 2) + sum(memsets) / len(steps)
    assert row["bytes"] == want
    flops = 4 * 8 * 16 * 64 * (1024 * 1025 // 2)
    assert row["intensity"] == pytest.approx(flops / want)
    assert row["bound"] == "memory"  # 6.2 FLOP/byte, far left of the H200's ridge (989.5 / 4.8 = 206)
    assert want > 40 * fused_bytes(8, 16, 1024, 64, 2)  # where the chart used to place it


def test_a_fused_kernel_sits_at_q_k_v_read_once_and_o_written_once(trace_of):
    flash = roofline_rows(trace_of(H200 / "sdpa-flash.json.gz"))
    assert set(flash["bytes"].to_list()) == {fused_bytes(8, 16, 1024, 64, 2, lse=True)}  # flash writes its lse
    cudnn = roofline_rows(trace_of(H200 / "sdpa-cudnn.json.gz"))
    memsets = [e for e in complete(raw(H200 / "sdpa-cudnn.json.gz")) if e.get("cat") == "gpu_memset"]
    assert len(memsets) == 3  # one per call, launched beside the attention kernel
    by_measure = dict(zip(cudnn["measure"].to_list(), cudnn["bytes"].to_list()))
    # the call: its kernel only, the memset the op launches beside it is not attention (listed beside, with its
    # time); the whole step: every device event of the step, the memset included
    assert by_measure == {
        "attention ops": fused_bytes(8, 16, 1024, 64, 2),
        "whole step": fused_bytes(8, 16, 1024, 64, 2) + memsets[0]["args"]["bytes"],
    }


def test_a_point_whose_bytes_cannot_be_told_is_left_out_with_its_reason(trace_of):
    runs = {
        "naive": trace_of(H200 / "naive.json.gz"),
        "compiled": trace_of(H200 / "naive.compiled.json.gz"),
        "graphs": trace_of(H200 / "sdpa.graphs.json.gz"),
    }
    points = review.roofline_points(runs)
    left = {(r["run"], r["measure"]): r["reason"] for r in review.roofline_left_out(runs).iter_rows(named=True)}
    assert set(zip(points["run"], points["measure"])) == {("naive", "whole step"), ("graphs", "attention ops")}
    assert "inductor generated" in left["compiled", "whole step"]  # its Triton kernel's buffers are not in the trace
    assert "launches 2 kernels" in left["graphs", "whole step"]  # the graph's input copies (one op, two kernels)


def test_op_rules_by_hand():
    bf16 = "c10::BFloat16"
    assert op_bytes("aten::bmm", "[[128, 1024, 64], [128, 64, 1024]]", json.dumps([bf16, bf16])) == 2 * (
        2 * 128 * 1024 * 64 + 128 * 1024 * 1024
    )
    # out= variant (torch.compile): the third tensor is the product, written
    assert op_bytes("aten::bmm", "[[2, 3, 4], [2, 4, 5], [2, 3, 5]]", '["float", "float", "float"]') == 4 * (
        24 + 40 + 30
    )
    assert op_bytes("aten::mul", "[[2, 3], []]", '["float", "double"]') == 4 * 12  # a Python scale: read and write
    assert op_bytes("aten::masked_fill_", "[[2, 4, 4], [4, 4], []]", '["float", "bool", "Scalar"]') == 4 * 64 + 16
    assert op_bytes("aten::copy_", "[[5, 6], [5, 6], []]", '["float", "c10::BFloat16", "Scalar"]') == 2 * 30 + 4 * 30
    assert op_bytes("aten::fill_", "[[10], []]", '["bool", "Scalar"]') == 10
    assert op_bytes("aten::where", "[[8, 8], [], []]", '["bool", "float", "float"]') == 64 + 4 * 64  # writes float
    assert op_bytes("aten::isneginf", "[[3, 3]]", '["float"]') == 4 * 9 + 9
    assert op_bytes("aten::all", "[[2, 3, 4], [], []]", '["bool", "Scalar", "Scalar"]', '["", "-1", "True"]') == 24 + 6
    assert (
        op_bytes("aten::_softmax", "[[2, 8], [], []]", '["c10::Half", "Scalar", "Scalar"]', '["", "-1", "True"]')
        == 2 * 16 + 4 * 16
    )
    assert op_bytes("aten::view", "[[2, 8], []]", '["float", "ScalarList"]') == 0
    assert "inductor" in op_bytes("triton_poi_fused_mul_0", "[[4], [4]]", '["float", "float"]')
    assert "no rule" in op_bytes("aten::cumsum", "[[4], []]", '["float", "Scalar"]')
    assert "not recorded" in op_bytes("aten::bmm", None, None)


def test_the_chart_says_what_the_bytes_are_and_keeps_its_legend_short(trace_of):
    labels = ["naive", "naive_inplace", "sdpa", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math"]
    many = {label: trace_of(H200 / f"{label}.json.gz") for label in labels}
    fig = charts.roofline(review.roofline_points(many))
    points = [t for t in fig.data if t.mode and "markers" in t.mode and t.x and t.x[0] is not None]
    assert all(charts.OWN_BYTES in t.hovertemplate for t in points)
    assert "its own kernels move" in fig.layout.xaxis.title.text
    legend = [t.name for t in fig.data if t.showlegend is not False]
    # 7 runs: no entry per run and measure, each point named beside it; the roof and the two marker shapes
    assert legend == ["H200 SXM bf16 roof", "attention op or kernel", "whole step (collectors' traces)"]
    # the runs are named beside their points instead, once per cluster of overlapping points: each run once
    labels = [t.text[0] for t in fig.data if t.mode == "text"]
    named = [name for label in labels for name in re.sub(r" \+\d+ more$", "", label).split(", ")]
    more = sum(int(m) for label in labels for m in re.findall(r" \+(\d+) more$", label))
    assert len(named) == len(set(named)) and len(named) + more == len(many)
    assert {"naive", "naive_inplace", "sdpa-math"} <= set(named)  # far apart on the chart: each labelled alone
    # two runs: the same style (one style whatever the count), the runs named beside their points
    few = charts.roofline(review.roofline_points({k: many[k] for k in ("naive", "sdpa")}))
    assert [t.name for t in few.data if t.showlegend is not False] == [
        "H200 SXM bf16 roof",
        "attention op or kernel",
        "whole step (collectors' traces)",
    ]
    assert {"naive", "sdpa"} <= {n for t in few.data if t.mode == "text" for n in t.text[0].split(", ")}


def test_the_html_report_and_compare_json_carry_the_points_and_what_was_left_out(tmp_path):
    page, data = tmp_path / "r.html", tmp_path / "r.json"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dashboard.cli",
            "compare",
            str(H200 / "naive.json.gz"),
            str(H200 / "naive.compiled.json.gz"),
            "--no-store",
            "--html",
            str(page),
            "--json",
            str(data),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    text = page.read_text()
    assert report.ROOFLINE_WHY.split("(")[0].strip() in text and "Not on the roofline" in text
    found = json.loads(data.read_text())
    naive, compiled = found["runs"]  # labels in the order given
    assert [(p["run"], p["bytes"]) for p in found["roofline"]["points"]] == [
        (naive, naive_bytes(8, 16, 1024, 64, 2) + 4)
    ]
    assert [r["run"] for r in found["roofline"]["left_out"]] == [compiled]


def test_call_bytes_sum_what_each_call_launched(trace_of):
    trace = trace_of(H200 / "sdpa-math.json.gz")
    moved = call_bytes(trace)
    assert moved.height == 3 and moved["moved"].null_count() == 0
    assert moved["moved"].n_unique() == 1  # the same work every step


def test_the_roofline_rows_name_their_measures_as_the_review_does():
    from dashboard.engine.analyses import roofline

    assert (roofline.MEASURE_OPS, roofline.MEASURE_STEP) == (review.MEASURE_OPS, review.MEASURE_STEP)
    assert charts.OWN_BYTES == roofline.OWN_BYTES_WORDS
