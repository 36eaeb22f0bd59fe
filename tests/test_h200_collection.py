"""The bundled H200 collection (sample_traces/h200: every variant eager, compiled and replayed from
CUDA graphs, bf16, 8x16x1024x64, made on a real NVIDIA H200) read by the engine, checked against
the json module and against sizes computed by hand from the collection's shape."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import polars as pl
import pytest

import oracle
from dashboard.engine import load_trace
from dashboard.engine.analyses.backends import detect_backends, fallback, requested_backend
from dashboard.engine.analyses.copies import copies

H200 = Path(__file__).resolve().parent.parent / "sample_traces" / "h200"
MANIFEST = json.loads((H200 / "runs.json").read_text())
RUNS = MANIFEST["runs"]
IDS = [r["trace"].removesuffix(".json.gz") for r in RUNS]

B, H, N, D = 8, 16, 1024, 64  # the article's shape, as runs.json says (checked below)
BF16, FP32, BOOL = 2, 4, 1
QKV_BYTES = B * H * N * D * BF16  # one of q, k, v
SCORES = B * H * N * N  # elements of Q·Kᵀ


def test_the_collection_is_the_articles_shape_in_bf16_on_an_h200():
    assert MANIFEST["shape"] == {"batch": B, "heads": H, "seq": N, "head_dim": D}
    assert (MANIFEST["dtype"], MANIFEST["device_name"]) == ("bfloat16", "NVIDIA H200")
    assert len(RUNS) == 21 and all(r["parity"]["passed"] for r in RUNS)
    assert [s["variant"] for s in MANIFEST["skipped"]] == ["hub"]


def _is_copy_kernel(name: str) -> bool:
    """A person's reading of the H200's kernel names: PyTorch's copy functors, and
    _foreach_copy_'s multi-tensor launcher running its Copy functor."""
    return "copy_kernel_cuda" in name or ("multi_tensor_apply_kernel<" in name and "::Copy<" in name)


def _copies_by_json(path: Path) -> Counter:
    """(kind, chain of cpu_ops holding the launch, outermost first) -> count, for every memcpy and
    copy kernel: launches found by correlation id, ops by plain containment on the launch's thread."""
    events = oracle.complete(oracle.raw(path))
    ops = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            ops[(e["pid"], e["tid"])].append(e)
    launch = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    found = Counter()
    for e in events:
        if e.get("cat") == "gpu_memcpy":
            kind = e["name"].split()[1]
        elif e.get("cat") == "kernel" and _is_copy_kernel(e["name"]):
            kind = "kernel"
        else:
            continue
        call = launch[e["args"]["correlation"]]
        holders = [
            o
            for o in ops[(call["pid"], call["tid"])]
            if o["ts"] <= call["ts"] and call["ts"] + call["dur"] <= o["ts"] + o["dur"]
        ]
        holders.sort(key=lambda o: (o["ts"], -o["dur"]))
        found[(kind, tuple(o["name"] for o in holders))] += 1
    return found


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_every_copy_is_found_with_the_op_chain_the_json_gives(trace_of, run):
    path = H200 / run["trace"]
    got = Counter((kind, tuple(chain)) for kind, chain in copies(trace_of(path)).select("kind", "op_chain").iter_rows())
    assert got == _copies_by_json(path)


def _per_step(run_stem: str) -> pl.DataFrame:
    table = copies(load_trace(H200 / f"{run_stem}.json.gz"))
    return (
        table.group_by("step")
        .agg(
            pl.len().alias("count"),
            pl.col("bytes").sum().alias("bytes"),
            pl.col("hidden").sum().alias("hidden"),
            pl.col("origin").unique().sort().alias("origins"),
            pl.col("copy_class").unique().sort().alias("classes"),
        )
        .sort("step")
    )


def test_the_out_of_place_masked_fill_copies_the_scores_once_per_step_and_masked_fill__does_not(trace_of):
    steps = _per_step("naive")
    assert steps.height == 3
    assert steps["count"].to_list() == [1, 1, 1] and steps["hidden"].to_list() == [1, 1, 1]
    assert steps["bytes"].to_list() == [SCORES * BF16] * 3  # 268,435,456 B: the bf16 scores
    assert steps["origins"].to_list() == [["aten::masked_fill"]] * 3
    for stem in ("naive_inplace", "naive_inplace.compiled", "naive.compiled"):
        assert copies(trace_of(H200 / f"{stem}.json.gz")).height == 0, stem


def test_forced_math_sdpa_hides_its_fp32_casts_inside_the_sdpa_op():
    # the math path casts q, k, v up to fp32, the fp32 attention weights down to bf16 and the
    # fp32 output down: five copies a step, none asked for by the caller of SDPA
    steps = _per_step("sdpa-math")
    assert steps["count"].to_list() == [5, 5, 5] and steps["hidden"].to_list() == [5, 5, 5]
    assert steps["bytes"].to_list() == [3 * QKV_BYTES + SCORES * FP32 + B * H * N * D * FP32] * 3
    assert steps["origins"].to_list() == [["aten::scaled_dot_product_attention"]] * 3


@pytest.mark.parametrize(
    "variant", ["naive", "naive_inplace", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"]
)
def test_cuda_graphs_copy_the_inputs_into_static_buffers_each_call_as_requested_copies(variant):
    steps = _per_step(f"{variant}.graphs")
    assert steps.height == 3
    assert steps["hidden"].to_list() == [0, 0, 0]
    assert steps["origins"].to_list() == [["aten::_foreach_copy_"]] * 3
    assert steps["classes"].to_list() == [["requested"]] * 3
    if variant.startswith("naive"):  # q, k, v and the bool mask, one DtoD memcpy each
        assert steps["count"].to_list() == [4, 4, 4]
        assert steps["bytes"].to_list() == [3 * QKV_BYTES + N * N * BOOL] * 3
    else:  # q, k, v through _foreach_copy_'s Copy kernels, whose bytes no event records
        assert steps["count"].to_list() == [2, 2, 2]


EXPECTED_BACKEND = {  # read off each trace's kernel names by a person
    "naive": "eager",
    "naive_inplace": "eager",
    "sdpa": "cudnn",
    "sdpa-math": "math",
    "sdpa-flash": "flash",
    "sdpa-efficient": "efficient",
    "sdpa-cudnn": "cudnn",
}


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_each_run_shows_the_backend_its_kernels_name_and_no_false_fallback(trace_of, run):
    trace = trace_of(H200 / run["trace"])
    found = detect_backends(trace).backends
    want = EXPECTED_BACKEND[run["variant"]]
    if run["compiled"] and want in ("eager", "math"):  # inductor generates the softmax
        want = "inductor"
    assert found == [want]
    assert not fallback(requested_backend(trace), found)


def test_default_sdpa_on_this_h200_runs_cudnn_and_the_json_agrees():
    names = {e["name"] for e in oracle.complete(oracle.raw(H200 / "sdpa.json.gz")) if e.get("cat") == "kernel"}
    assert any(name.startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") for name in names)
    assert not any("flash_fwd_kernel" in name or "fmha_cutlass" in name for name in names)


ATTENTION_KERNELS = ("pytorch_flash::flash_fwd_kernel", "fmha_cutlassF_", "cudnn_generated_fort_native_sdpa")


@pytest.mark.parametrize("variant", ["sdpa", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"])
@pytest.mark.parametrize("kind", ["", ".graphs"])
def test_fused_attention_rates_come_from_the_shape_even_when_a_cuda_graph_replays_the_kernel(trace_of, variant, kind):
    from dashboard.engine.analyses.efficiency import efficiency_block

    events = oracle.complete(oracle.raw(H200 / f"{variant}{kind}.json.gz"))
    kernels = [e for e in events if e.get("cat") == "kernel" and any(k in e["name"] for k in ATTENTION_KERNELS)]
    assert len(kernels) == 3  # one per step
    if kind:  # replayed: no op of the attention was recorded, only the graph's launch
        assert not any(e.get("cat") == "cpu_op" and "attention" in e["name"] for e in events)
        assert any(e.get("name") == "cudaGraphLaunch" for e in events)
    useful = 4 * B * H * D * (N * (N + 1) // 2)  # causal: the score pairs on and below the diagonal
    # a call's time is its attention kernel's: the memset cuDNN's op launches beside it is not attention
    achieved = useful * len(kernels) / (sum(e["dur"] for e in kernels) * 1e-6) / 1e12
    block = efficiency_block(trace_of(H200 / f"{variant}{kind}.json.gz"))
    assert block["measured"] == 3
    assert block["tflops"] == pytest.approx(achieved, rel=1e-6)
    assert block["pct_of_roofline"] == pytest.approx(
        100 * achieved / 989.5, rel=1e-6
    )  # H200 SXM dense bf16, compute-bound here


def test_a_graph_replay_without_the_collectors_metadata_still_gives_no_percentage(trace_of):
    from dashboard.engine.analyses.efficiency import efficiency_block

    block = efficiency_block(trace_of(oracle.DATA / "tracelens_vllm_decode_graph_unified_attention.json.gz"))
    assert block["pct_of_roofline"] is None and block["measured"] == 0
