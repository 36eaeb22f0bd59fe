"""The collectors on tiny CPU shapes: what the written traces say, read back two ways.

Structural facts are checked through dashboard.engine and, independently, from the raw trace
JSON with nothing but gzip/json and a ts/dur nesting walk written here.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
import types
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from collectors import hub
from collectors.__main__ import main
from collectors.manifest import Manifest, Run, Skip, read_manifest
from collectors.parity import compare, reference
from collectors.report import render as render_table
from collectors.report import summarize_run as summarize_table_row
from collectors.variants import VARIANTS, Unavailable, Variant, naive
from dashboard.engine import load_trace, summarize
from dashboard.engine.compare import review

TINY = ["--device", "cpu", "--batch", "1", "--heads", "2", "--seq", "32", "--head-dim", "16"]
ACTIVE = 2
MASKED_FILL_CHAIN = ["aten::masked_fill", "aten::clone", "aten::copy_"]


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every variant collected once on CPU into a temporary folder."""
    out = tmp_path_factory.mktemp("cpu")
    assert main([*TINY, "--active", str(ACTIVE), "--out", str(out)]) == 0
    return out


def raw(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def op_chains(doc: dict, leaf: str) -> list[list[str]]:
    """For every cpu_op named `leaf`: the cpu_op names enclosing it on its thread, outermost
    first, ending with the leaf. Nesting from integer-ns [ts, ts + dur) intervals alone."""
    threads: dict[tuple, list[tuple[int, int, str, str]]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            start, dur = round(float(e["ts"]) * 1000), round(float(e["dur"]) * 1000)
            threads.setdefault((e["pid"], e["tid"]), []).append((start, -dur, e["name"], e["cat"]))
    chains = []
    for events in threads.values():
        stack: list[tuple[int, str, str]] = []  # (end ns, name, cat)
        for start, neg_dur, name, cat in sorted(events):
            while stack and stack[-1][0] <= start:
                stack.pop()
            stack.append((start - neg_dur, name, cat))
            if name == leaf and cat == "cpu_op":
                chains.append([n for _, n, c in stack if c == "cpu_op"])
    return chains


def annotations(doc: dict, name: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name") == name]


def ops_inside(doc: dict, span: dict) -> list[str]:
    start, end = float(span["ts"]), float(span["ts"]) + float(span["dur"])
    return [
        e["name"]
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "cpu_op" and start <= float(e["ts"]) <= end
    ]


def forced_backend_error(backend: SDPBackend) -> str | None:
    """PyTorch's own RuntimeError text for this backend on CPU, or None when it runs."""
    q = torch.randn(1, 2, 32, 16)
    try:
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
    except RuntimeError as exc:
        return str(exc).strip()
    return None


def test_the_manifest_lists_every_trace_and_every_skip(collection: Path) -> None:
    manifest = read_manifest(collection)
    listed = [r["variant"] for r in manifest["runs"]] + [s["variant"] for s in manifest["skipped"]]
    assert sorted(listed) == sorted(VARIANTS)
    for run in manifest["runs"]:
        assert (collection / run["trace"]).is_file() and (collection / run["table"]).is_file()
        assert run["compiled"] is False
    on_disk = {p.name for p in collection.glob("*.json.gz")}
    assert on_disk == {r["trace"] for r in manifest["runs"]}
    assert manifest["shape"] == {"batch": 1, "heads": 2, "seq": 32, "head_dim": 16}
    assert manifest["device"] == "cpu" and manifest["dtype"] == "float32"


def test_cpu_runs_the_hand_written_math_and_default_sdpa(collection: Path) -> None:
    ran = {r["variant"] for r in read_manifest(collection)["runs"]}
    assert {"naive", "naive_inplace", "sdpa", "sdpa-math"} <= ran


def test_a_backend_cpu_cannot_run_is_skipped_with_pytorchs_own_reason(collection: Path) -> None:
    manifest = read_manifest(collection)
    skipped = {s["variant"]: s["reason"] for s in manifest["skipped"]}
    ran = {r["variant"] for r in manifest["runs"]}
    forced = {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
    }
    for name, backend in forced.items():
        error = forced_backend_error(backend)
        if error is None:
            assert name in ran
        else:
            assert skipped[name].startswith(error)


def test_the_hub_variant_is_skipped_on_cpu_with_its_reason(collection: Path) -> None:
    reason = {s["variant"]: s["reason"] for s in read_manifest(collection)["skipped"]}["hub"]
    assert "CUDA" in reason and "cpu" in reason


def test_every_trace_describes_itself_under_one_attnscope_key(collection: Path) -> None:
    manifest = read_manifest(collection)
    for run in manifest["runs"]:
        meta = raw(collection / run["trace"])["attnscope"]
        assert meta["variant"] == run["variant"]
        assert meta["backend_requested"] == run["backend_requested"]
        assert meta["parity"] == run["parity"]
        assert meta["shape"] == manifest["shape"]
        assert meta["tokens_per_step"] == 1 * 32
        assert meta["device"] == "cpu" and meta["dtype"] == "float32" and meta["compiled"] is False
        assert meta["torch_version"] == torch.__version__
        for key in ("device_name", "cuda_version", "host", "time", "seed"):
            assert key in meta
        assert load_trace(collection / run["trace"]).meta["attnscope"] == meta


def test_naive_hides_a_clone_inside_masked_fill_once_per_step(collection: Path) -> None:
    doc = raw(collection / "naive.json.gz")
    chains = [c[-3:] for c in op_chains(doc, "aten::copy_")]
    assert chains.count(MASKED_FILL_CHAIN) == ACTIVE
    hidden = [c for c in summarize(load_trace(collection / "naive.json.gz"))["copies"] if c["hidden"]]
    assert [(c["op_chain"], c["count"]) for c in hidden] == [(MASKED_FILL_CHAIN, ACTIVE)]
    assert hidden[0]["bytes"] == ACTIVE * 2 * 32 * 32 * 4  # the [1, 2, 32, 32] fp32 scores


def test_naive_inplace_fills_in_place_without_a_clone(collection: Path) -> None:
    doc = raw(collection / "naive_inplace.json.gz")
    assert op_chains(doc, "aten::clone") == []
    assert len(op_chains(doc, "aten::masked_fill_")) == ACTIVE
    copies = summarize(load_trace(collection / "naive_inplace.json.gz"))["copies"]
    assert not [c for c in copies if c["hidden"]]


def test_the_scale_by_a_python_float_is_a_scalar_conversion_not_a_copy(collection: Path) -> None:
    doc = raw(collection / "naive_inplace.json.gz")
    scalar_chain = ["aten::mul", "aten::to", "aten::_to_copy", "aten::copy_"]
    assert [c[-4:] for c in op_chains(doc, "aten::copy_")] == [scalar_chain] * ACTIVE
    assert summarize(load_trace(collection / "naive_inplace.json.gz"))["copies"] == []


def test_sdpa_runs_one_fused_op_per_forward(collection: Path) -> None:
    doc = raw(collection / "sdpa.json.gz")
    forwards = annotations(doc, "attention::sdpa")
    assert len(forwards) == ACTIVE
    for span in forwards:
        fused = Counter(n for n in ops_inside(doc, span) if n.startswith("aten::_scaled_dot_product_"))
        assert sum(fused.values()) == 1, fused
    found = summarize(load_trace(collection / "sdpa.json.gz"))["attention"]
    assert found["backends"] == ["cpu_flash"]
    assert found["evidence"] == ["aten::_scaled_dot_product_flash_attention_for_cpu"]


def test_forced_math_runs_the_unfused_math_path(collection: Path) -> None:
    doc = raw(collection / "sdpa-math.json.gz")
    for span in annotations(doc, "attention::sdpa-math"):
        ops = ops_inside(doc, span)
        assert ops.count("aten::_scaled_dot_product_attention_math") == 1
        assert "aten::_scaled_dot_product_flash_attention_for_cpu" not in ops
    assert summarize(load_trace(collection / "sdpa-math.json.gz"))["attention"]["backends"] == ["math"]


def test_the_key_averages_table_is_written_beside_each_trace(collection: Path) -> None:
    table = (collection / "naive.txt").read_text()
    assert "aten::masked_fill" in table and "aten::clone" in table and "attention::naive" in table


def as_manifest(folder: Path) -> Manifest:
    """The collection's runs.json as the collector's own Manifest object."""
    data = read_manifest(folder)
    data.pop("schema", None)
    return Manifest(
        **{**data, "runs": [Run(**r) for r in data["runs"]], "skipped": [Skip(**s) for s in data["skipped"]]}
    )


def test_the_end_of_run_table_shows_the_numbers_the_dashboard_shows(collection: Path) -> None:
    manifest = as_manifest(collection)
    lines = render_table(manifest, collection).splitlines()
    assert "step ms (median, CPU step span)" in lines[0]  # a CPU collection: the step span, as the dashboard says
    cells = {}
    for line in lines[2 : 2 + len(manifest.runs)]:
        parts = [c.strip() for c in line.split("  ") if c.strip()]
        cells[parts[0]] = parts
    assert len(cells) == len(manifest.runs)
    traces = {
        (f"{r.variant} (compiled)" if r.compiled else r.variant): load_trace(collection / r.trace)
        for r in manifest.runs
    }
    shown = review.overview(traces, None)  # the dashboard's overview row of each run
    for row in shown.iter_rows(named=True):
        label, backend, step_ms, work, copies_cell, parity = cells[row["run"]]
        assert abs(float(step_ms) - row["median_step_us"] / 1000.0) <= 0.0005
        assert work == f"{row['work_per_step']:g} leaf ops"
        assert copies_cell == f"{row['copies_per_step']:g} ({row['hidden_copies_per_step']:g} hidden)"
        assert backend == (row["backends"].replace(", ", "+") or "?")
    assert cells["naive"][4] == "1 (1 hidden)"  # the clone inside masked_fill, once per step


def test_the_end_of_run_table_of_a_gpu_trace_shows_device_busy_time() -> None:
    from dashboard.engine.analyses.kernels import per_step
    from dashboard.engine.compare.speed import step_time

    data = Path(__file__).resolve().parent / "data"
    name = "tracelens_h100_bert_sdpa_flash.json.gz"
    run = Run("bert", None, False, name, "", {"passed": True, "max_abs": 0.0})
    row, source = summarize_table_row(data, run)
    trace = load_trace(data / name)
    assert source == "device busy" and step_time(trace).source == "device busy"
    assert abs(float(row[2]) - step_time(trace).median_us / 1000.0) <= 0.0005
    assert row[3] == f"{per_step(trace)['work'].median():g} kernels"


def noncausal(q: torch.Tensor) -> object:
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=False)


def test_a_wrong_variant_fails_parity_and_the_exit_status_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(VARIANTS, "noncausal", Variant("noncausal", "default", noncausal))
    args = [*TINY, "--active", "1", "--variants", "noncausal", "--out", str(tmp_path)]
    assert main(args) == 1
    assert main([*args, "--allow-parity-failures"]) == 0
    [run] = read_manifest(tmp_path)["runs"]
    assert run["parity"]["passed"] is False and run["parity"]["max_abs"] > 0.1
    assert raw(tmp_path / run["trace"])["attnscope"]["parity"]["passed"] is False


def test_parity_accepts_bf16_rounding_and_rejects_a_missing_mask() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 16, generator=gen).bfloat16() for _ in range(3))
    ref = reference(q, k, v)
    mask = torch.ones(64, 64, dtype=torch.bool).triu(1)
    assert compare(naive(q, k, v, mask), ref, torch.bfloat16).passed
    unmasked = naive(q, k, v, torch.zeros_like(mask))
    assert not compare(unmasked, ref, torch.bfloat16).passed
    assert not compare(torch.full_like(ref, float("nan")), ref, torch.float32).passed


def test_compile_runs_as_a_separate_trace(tmp_path: Path) -> None:
    assert main([*TINY, "--active", "1", "--variants", "sdpa", "--compile", "--out", str(tmp_path)]) == 0
    runs = read_manifest(tmp_path)["runs"]
    assert [(r["variant"], r["compiled"]) for r in runs] == [("sdpa", False), ("sdpa", True)]
    meta = raw(tmp_path / runs[1]["trace"])["attnscope"]
    assert meta["compiled"] is True and runs[1]["trace"] != runs[0]["trace"]


def test_cuda_graphs_compile_with_reduce_overhead_into_a_trace_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CUDA graphs need a GPU; on the CPU the test checks the wiring: torch.compile is asked for
    # mode="reduce-overhead" and the run is written, described and listed as a CUDA-graphs run.
    from collectors.__main__ import build_config, parse_args
    from collectors.collection import collect

    modes = []

    def compile_(fn, **kwargs):
        modes.append(kwargs.get("mode"))
        return fn

    monkeypatch.setattr(torch, "compile", compile_)
    argv = [*TINY, "--active", "1", "--variants", "naive", "--out", str(tmp_path)]
    cfg = build_config(parse_args(argv), argv)
    manifest = collect(dataclasses.replace(cfg, cuda_graphs=True), log=lambda line: None)
    assert modes == ["reduce-overhead"]
    runs = read_manifest(tmp_path)["runs"]
    assert [(r["variant"], r["compiled"], r["cuda_graphs"], r["trace"]) for r in runs] == [
        ("naive", False, False, "naive.json.gz"),
        ("naive", True, True, "naive.graphs.json.gz"),
    ]
    assert raw(tmp_path / "naive.graphs.json.gz")["attnscope"]["cuda_graphs"] is True
    assert "graph_source" not in raw(tmp_path / "naive.graphs.json.gz")["attnscope"]  # no compiled twin ran
    assert len(manifest.runs) == 2
    table = render_table(manifest, tmp_path).splitlines()
    assert [line.split("  ")[0] for line in table[2:4]] == ["naive", "naive (CUDA graphs)"]


def test_a_cuda_graphs_run_names_its_compiled_twin_as_the_source_of_its_ops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the replayed kernels carry no op: the twin (same code, no graph) is what attributes them
    from collectors.__main__ import build_config, parse_args
    from collectors.collection import collect

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    argv = [*TINY, "--active", "1", "--variants", "naive", "--out", str(tmp_path)]
    cfg = build_config(parse_args(argv), argv)
    collect(dataclasses.replace(cfg, compile=True, cuda_graphs=True), log=lambda line: None)
    runs = read_manifest(tmp_path)["runs"]
    assert [r["trace"] for r in runs] == ["naive.json.gz", "naive.compiled.json.gz", "naive.graphs.json.gz"]
    assert raw(tmp_path / "naive.graphs.json.gz")["attnscope"]["graph_source"] == "naive.compiled.json.gz"
    assert "graph_source" not in raw(tmp_path / "naive.compiled.json.gz")["attnscope"]


def test_a_compile_failure_is_a_skip_with_its_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_compiler(fn: object) -> object:
        def call(*args: object) -> object:
            raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")

        return call

    monkeypatch.setattr(torch, "compile", no_compiler)
    assert main([*TINY, "--active", "1", "--variants", "naive", "--compile", "--out", str(tmp_path)]) == 0
    manifest = read_manifest(tmp_path)
    assert [(r["variant"], r["compiled"]) for r in manifest["runs"]] == [("naive", False)]
    [skip] = manifest["skipped"]
    assert skip["compiled"] is True and "Failed to find C compiler" in skip["reason"]


@pytest.mark.parametrize(
    "args",
    [["--variants", "naive", "bogus"], ["--batch", "0"], ["--dtype", "fp8"], ["--out", "FILE"], ["--cuda-graphs"]],
)
def test_bad_input_is_one_error_line_and_exit_2(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    args = [str(afile) if a == "FILE" else a for a in args]
    assert main(["--device", "cpu", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m collectors: error:")


def fake_hub(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, offline: bool, get_kernel: object
) -> types.SimpleNamespace:
    """Stand-ins for the `kernels` and `huggingface_hub` packages (the tests never need them);
    the hub endpoint is a closed local port, so a probe fails at once."""
    constants = types.SimpleNamespace(HF_HUB_CACHE=str(tmp_path), HF_HUB_OFFLINE=offline, ENDPOINT="http://127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "kernels", types.SimpleNamespace(get_kernel=get_kernel))
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(constants=constants))
    monkeypatch.delenv("KERNELS_CACHE", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    return constants


def test_the_hub_without_the_kernels_package_is_skipped_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "kernels", None)
    with pytest.raises(Unavailable, match="`kernels` package is not installed"):
        hub.load_flash_attn_func(torch.device("cuda"))


def test_the_hub_offline_and_uncached_fails_at_once_with_get_kernels_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []

    def get_kernel(repo: str, version: int) -> object:
        calls.append(repo)
        raise ValueError(f"Version {version} of '{repo}' is not available in the local cache")

    fake_hub(monkeypatch, tmp_path, offline=True, get_kernel=get_kernel)
    with pytest.raises(Unavailable, match="ValueError: Version 2 of 'kernels-community/flash-attn2'"):
        hub.load_flash_attn_func(torch.device("cuda"))
    assert calls == ["kernels-community/flash-attn2"]  # asked once: no retry loop


def test_the_hub_unreachable_and_uncached_is_skipped_without_calling_get_kernel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def get_kernel(repo: str, version: int) -> object:
        raise AssertionError("must not reach the network")

    fake_hub(monkeypatch, tmp_path, offline=False, get_kernel=get_kernel)
    with pytest.raises(Unavailable, match="unreachable"):
        hub.load_flash_attn_func(torch.device("cuda"))


def test_a_cached_hub_kernel_loads_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = {}

    def get_kernel(repo: str, version: int) -> object:
        seen["offline"] = constants.HF_HUB_OFFLINE
        return types.SimpleNamespace(flash_attn_func="the kernel")

    constants = fake_hub(monkeypatch, tmp_path, offline=False, get_kernel=get_kernel)
    refs = tmp_path / "kernels--kernels-community--flash-attn2" / "refs"
    refs.mkdir(parents=True)
    (refs / "v2").write_text("0" * 40)
    assert hub.load_flash_attn_func(torch.device("cuda")) == "the kernel"
    assert seen == {"offline": True} and constants.HF_HUB_OFFLINE is False


SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "cpu"


@pytest.mark.skipif(not (SAMPLE / "runs.json").is_file(), reason="no committed CPU sample collection")
def test_the_committed_cpu_sample_shows_the_clone_the_fill_and_the_fused_op() -> None:
    manifest = read_manifest(SAMPLE)
    assert {p.name for p in SAMPLE.glob("*.json.gz")} == {r["trace"] for r in manifest["runs"]}
    assert sum(p.stat().st_size for p in SAMPLE.iterdir()) < 4 * 2**20
    for run in manifest["runs"]:
        assert raw(SAMPLE / run["trace"])["attnscope"]["variant"] == run["variant"]
    steps = manifest["active_steps"]
    naive_chains = [c[-3:] for c in op_chains(raw(SAMPLE / "naive.json.gz"), "aten::copy_")]
    assert naive_chains.count(MASKED_FILL_CHAIN) == steps
    assert op_chains(raw(SAMPLE / "naive_inplace.json.gz"), "aten::clone") == []
    doc = raw(SAMPLE / "sdpa.json.gz")
    fused = [
        [n for n in ops_inside(doc, s) if n.startswith("aten::_scaled_dot_product_")]
        for s in annotations(doc, "attention::sdpa")
    ]
    assert fused == [["aten::_scaled_dot_product_flash_attention_for_cpu"]] * steps
