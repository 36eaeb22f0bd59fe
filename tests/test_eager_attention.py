"""Eager (hand-written) attention is a chain on one thread: a matmul whose [.., Sq, Sk] output feeds
a softmax over its last dimension that feeds a matmul with [.., Sk, D]; a softmax and a matmul
somewhere in the trace are not attention. Also: a GPU job cut before its device events is not a CPU
run. Expected chains are read with the json module from the same files, not from the engine."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import oracle
from dashboard.engine import load_trace
from dashboard.engine.analyses.backends import detect_backends
from dashboard.engine.compare.review import CUT_DEVICE_LOST, cut_state, device_label
from dashboard.engine.analyses.summary import device_info

DATA = oracle.DATA
SAMPLES = DATA.parent.parent / "sample_traces"
# tests/data: which traces hold eager attention (before this change, a softmax and a matmul anywhere
# read eager; the verdicts did not change: only cpu_naive_profile_memory is eager, before and after).
EAGER_IN_DATA = {"cpu_naive_profile_memory.json.gz"}


def raw_events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def raw_chains(path: Path) -> int:
    """Chains read with the json module: on one thread, in ts order, aten::matmul [.., Sq, D] x
    [.., D, Sk], then aten::softmax on [.., Sq, Sk] with dim -1, then aten::matmul [.., Sq, Sk] x
    [.., Sk, D]. Counts the softmaxes so framed."""
    lanes: dict[tuple, list[dict]] = {}
    for e in raw_events(path):
        if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e.get("name") in ("aten::matmul", "aten::softmax"):
            lanes.setdefault((e["pid"], e["tid"]), []).append(e)
    found = 0
    for ops in lanes.values():
        ops.sort(key=lambda e: float(e["ts"]))
        for a, s, b in zip(ops, ops[1:], ops[2:]):
            if (a["name"], s["name"], b["name"]) != ("aten::matmul", "aten::softmax", "aten::matmul"):
                continue
            (q, k), scores, (p, v) = (
                a["args"]["Input Dims"][:2],
                s["args"]["Input Dims"][0],
                b["args"]["Input Dims"][:2],
            )
            if (
                q[:-2] + [q[-2], k[-1]] == scores
                and q[-1] == k[-2]
                and s["args"]["Concrete Inputs"][1] == "-1"
                and p == scores
                and v[-2] == scores[-1]
            ):
                found += 1
    return found


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json.gz")))
def test_the_eager_verdict_of_every_real_trace(name):
    found = detect_backends(load_trace(DATA / name))
    assert ("eager" in found.backends) == (name in EAGER_IN_DATA)
    if name in EAGER_IN_DATA:
        n = raw_chains(DATA / name)
        assert n > 0
        evidence = found.evidence["eager"]
        assert evidence[1].startswith("aten::softmax over dim -1 of [")
        assert evidence[-1] == f"{n} matmul -> softmax -> matmul chains in all" if n > 1 else len(evidence) == 3


@pytest.mark.parametrize("run", ["cpu/naive", "cpu/naive_inplace", "h200/naive", "h200/naive_inplace"])
def test_the_collectors_naive_runs_are_eager_with_the_chain_as_evidence(run):
    path = SAMPLES / f"{run}.json.gz"
    found = detect_backends(load_trace(path))
    assert found.backends == ["eager"]
    events = [e for e in raw_events(path) if e.get("name") == "aten::softmax"]
    scores = events[0]["args"]["Input Dims"][0]
    v_prefix = str(scores[:-2] + [scores[-1]])[:-1] + ", "  # V is [.., Sk, D]
    evidence = found.evidence["eager"]
    assert evidence[0].startswith("aten::matmul [") and evidence[0].endswith(f"-> {scores}")
    assert evidence[1] == f"aten::softmax over dim -1 of {scores}"
    assert evidence[2].startswith(f"aten::matmul {scores} x {v_prefix}")
    assert evidence[-1] == f"{raw_chains(path)} matmul -> softmax -> matmul chains in all"


@pytest.mark.parametrize(
    "run", ["cpu/naive.compiled", "cpu/naive_inplace.compiled", "h200/naive.compiled", "h200/naive_inplace.compiled"]
)
def test_compiled_naive_runs_still_read_as_inductor(run):
    """inductor fuses scale, mask and softmax into one generated kernel between two bmm's: no
    softmax op is left for the eager chain; the inductor rule (INDUCTOR_SOFTMAX) decides, as before."""
    found = detect_backends(load_trace(SAMPLES / f"{run}.json.gz"))
    assert found.backends == ["inductor"]


def profile(tmp_path: Path, model, record_shapes: bool = True):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch.no_grad(), torch_profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes) as prof:
        model(torch)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return load_trace(path)


def not_chained(torch):
    """The issue's rank, small: bmm's whose output is no softmax's input, a softmax on [2, 1]."""
    x, w = torch.randn(4, 16, 8), torch.randn(4, 8, 7)
    torch.bmm(x, w)
    torch.softmax(torch.randn(2, 1), dim=-1)
    torch.bmm(x, w)


def chained(torch):
    q, k, v = torch.randn(4, 16, 8), torch.randn(4, 16, 8), torch.randn(4, 16, 8)
    scores = torch.bmm(q, k.transpose(1, 2)) * 0.5
    torch.bmm(torch.softmax(scores, dim=-1), v)


def test_a_softmax_and_bmms_that_do_not_chain_are_not_attention(tmp_path):
    trace = profile(tmp_path, not_chained)
    names = set(trace.events["name"].cast(str).to_list())
    assert {"aten::bmm", "aten::softmax"} <= names  # what the old rule read as eager
    assert "eager" not in detect_backends(trace).backends


def test_a_real_chain_is_eager_attention_with_its_shapes(tmp_path):
    found = detect_backends(profile(tmp_path, chained))
    assert found.backends == ["eager"]
    assert found.evidence["eager"] == [
        "aten::bmm [4, 16, 8] x [4, 8, 16] -> [4, 16, 16]",
        "aten::softmax over dim -1 of [4, 16, 16]",
        "aten::bmm [4, 16, 16] x [4, 16, 8]",
    ]


def test_without_shapes_the_order_alone_decides_and_says_so(tmp_path):
    trace = profile(tmp_path, chained, record_shapes=False)
    assert trace.events["input_dims"].null_count() == trace.events.height
    found = detect_backends(trace)
    assert found.backends == ["eager"]
    assert found.evidence["eager"] == [
        "aten::bmm -> aten::softmax -> aten::bmm on one thread (order only: shapes not recorded)"
    ]


def test_a_softmax_over_another_dim_is_not_attention(tmp_path):
    def model(torch):
        q, k, v = torch.randn(4, 16, 8), torch.randn(4, 16, 8), torch.randn(4, 16, 8)
        torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)), dim=1), v)

    assert "eager" not in detect_backends(profile(tmp_path, model)).backends


# --- item 8: a GPU job cut before its device events --------------------------------------------

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver")


def cut_before_device(name: str, drop_device_properties: bool = False) -> bytes:
    """The file's JSON cut just after the last whole event before its first device event (as
    test_cut_files cuts). drop_device_properties: the metadata as a writer that records no
    deviceProperties leaves it (the NCCL backend and the collectives must then tell)."""
    text = gzip.decompress((DATA / name).read_bytes()).decode()
    first = min(i for i in (text.find(f'"cat": "{c}"') for c in DEVICE_CATS) if i >= 0)
    cut = text[: text.rindex("},", 0, first) + 1]
    if drop_device_properties:
        at = cut.find('"traceEvents"')
        head = json.loads(cut[:at].rstrip().rstrip(",") + "}")
        head.pop("deviceProperties")
        cut = json.dumps(head)[:-1] + ", " + cut[at:]
    return cut.encode()


@pytest.mark.parametrize("drop", [False, True])
def test_a_gpu_job_cut_before_its_device_events_is_not_a_cpu_run(drop):
    name = "hta_v100_test.json.gz"  # distributedInfo.backend nccl; nccl:* and c10d:: ops
    raw = json.loads(gzip.decompress((DATA / name).read_bytes()))
    assert raw["distributedInfo"]["backend"] == "nccl"
    trace = load_trace(cut_before_device(name, drop), name="early.json")
    assert not trace.has_gpu
    assert not trace.events.filter(trace.events["cat"].cast(str).is_in(DEVICE_CATS)).height
    info = device_info(trace)
    assert info["type"] == "cuda"
    assert cut_state(trace) == CUT_DEVICE_LOST
    assert device_label(info["type"], info["name"], cut_state(trace)).startswith("cuda trace, cut: device events lost")


def test_a_real_cpu_trace_stays_cpu():
    trace = load_trace(DATA / "cpu_naive_profile_memory.json.gz")
    assert device_info(trace)["type"] == "cpu"
