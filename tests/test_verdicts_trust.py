"""Verdicts a reviewer can trust on another team's traces (issue 37 items 3 and 4): the gate and
the review's alarms honour whether two runs are the same work, and a copy the code asked for is
never an alarm.

Oracles: the json module's reading of the traces (device names, the computing op names two runs
share, the op that holds each copy's launch), never the engine's fingerprint or copy classes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import oracle
from dashboard import cli
from dashboard.engine import load_trace
from dashboard.engine.compare.review import SEVERITY_ALARM, findings

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
H200 = REPO / "sample_traces" / "h200"
BERT = DATA / "tracelens_h100_bert_sdpa_flash.json.gz"
MI250 = DATA / "hta_mi250_rocm_minitoy.json.gz"
QWEN = DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
A100 = DATA / "hta_a100_control.json.gz"
V100 = DATA / "hta_v100_test.json.gz"
VLLM = DATA / "tracelens_vllm_decode_graph_unified_attention.json.gz"
SGLANG = DATA / "tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz"


def device_name(path: Path) -> str:
    props = oracle.raw(path).get("deviceProperties") or [{}]
    return str(props[0].get("name", ""))


def op_names(path: Path) -> set[str]:
    """The distinct cpu_op names of a trace, less the autograd engine's and the profiler's own."""
    return {
        e["name"]
        for e in oracle.complete(oracle.raw(path))
        if e.get("cat") in ("cpu_op", "Operator")
        and not e["name"].startswith(("autograd::", "torch::autograd::", "ProfilerStep", "[", "cuda"))
    }


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def run_check(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = cli.main(["check", "--no-store", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(
    "base, candidate",
    [(BERT, MI250), (H200 / "naive.json.gz", QWEN), (VLLM, SGLANG)],
    ids=["h100-bert-vs-mi250", "h200-naive-vs-h100-qwen", "vllm-vs-sglang"],
)
def test_the_gate_calls_different_work_not_comparable_and_fails_nothing(base, candidate, capsys, tmp_path):
    # the oracle: other devices, and little of the model's op vocabulary in common
    assert device_name(base) != device_name(candidate)
    assert jaccard(op_names(base), op_names(candidate)) < 0.5
    rc, out, err = run_check([str(base), str(candidate)], capsys)
    assert rc == cli.EXIT_BAD_INPUT
    assert out == ""  # no rule's verdict is printed as if the pair were one change
    assert err.startswith("attnscope: not comparable: ") and "not the same work" in err
    assert candidate.name in err and base.name in err and "--allow-different-workload" in err
    # asked to gate them anyway, the relation is said first, in the text and the Markdown
    md = tmp_path / "gate.md"
    rc, out, err = run_check(["--allow-different-workload", "--markdown", str(md), str(base), str(candidate)], capsys)
    assert rc in (cli.EXIT_OK, cli.EXIT_FAILED)
    assert out.splitlines()[0].startswith(f"{candidate.name}: not the same work (")
    assert "**different workload**" in md.read_text().split("\n\n")[1]


def test_the_same_work_on_another_device_is_not_comparable_either(capsys):
    """HTA's control/test pair: one model (the same op names) on an A100 and a V100."""
    assert "A100" in device_name(A100) and "V100" in device_name(V100)
    assert jaccard(op_names(A100), op_names(V100)) > 0.5  # HTA ships them as one job (tests/data/SOURCES.md)
    rc, out, err = run_check([str(A100), str(V100)], capsys)
    assert rc == cli.EXIT_BAD_INPUT and "the same work on another device" in err


def test_across_devices_a_backend_and_roofline_change_are_described_not_warned(capsys):
    rc, out, err = run_check(["--allow-different-workload", str(A100), str(V100)], capsys)
    assert "backend_change" not in err and "efficiency_drop" not in err


def test_the_same_work_on_one_device_is_gated_as_before(capsys):
    rc, out, err = run_check([str(H200 / "sdpa.json.gz"), str(H200 / "naive.json.gz")], capsys)
    assert rc == cli.EXIT_FAILED  # naive adds the masked_fill copy and more kernels
    assert "new copies: DtoD from aten::masked_fill > aten::clone > aten::copy_" in out
    assert "not comparable" not in err
    rc, out, err = run_check([str(H200 / "naive.json.gz"), str(H200 / "naive_inplace.json.gz")], capsys)
    assert rc == cli.EXIT_OK


def _copy_holders(path: Path) -> dict[str, str]:
    """Each device copy's name -> the name of the innermost cpu_op that holds its launch call (a
    plain search over the ops of the launch's thread)."""
    doc = oracle.raw(path)
    events = oracle.complete(doc)
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    out = {}
    for e in events:
        kind = oracle.GPU_CATS.get(e.get("cat"))
        if kind != "gpu_memcpy" and not (kind == "kernel" and "copy" in e["name"].lower()):
            continue
        launch = launches.get(e.get("args", {}).get("correlation"))
        if launch is None:
            continue
        ops = oracle.enclosing_ops(doc, launch["pid"], launch["tid"], launch["ts"], launch["ts"] + launch.get("dur", 0))
        if ops:
            out[e["name"]] = ops[-1]["name"] if isinstance(ops[-1], dict) else ops[-1]
    return out


def test_copies_the_code_asked_for_are_notes_never_alarms():
    """The CUDA-graph run's static-input copies (aten::_foreach_copy_ > aten::copy_: copies the
    op's job is to make) and the MI250 toy's host-to-device copy are no alarms; naive's hidden
    masked_fill clone still is, and leads."""
    holders = _copy_holders(H200 / "naive.graphs.json.gz")
    assert "aten::copy_" in holders.values()  # the oracle: the graph run's copies are made by copy_
    runs = {
        "naive": load_trace(H200 / "naive.json.gz"),
        "naive (CUDA graphs)": load_trace(H200 / "naive.graphs.json.gz"),
        "naive (compiled)": load_trace(H200 / "naive.compiled.json.gz"),
        "sdpa (CUDA graphs)": load_trace(H200 / "sdpa.graphs.json.gz"),
    }
    found = findings(runs, "naive")
    alarms = found.filter(found["severity"] == SEVERITY_ALARM)
    assert alarms["kind"].to_list() == ["hidden copy"] and alarms["run"].to_list() == ["naive"]
    assert "masked_fill" in alarms["message"][0]
    more = found.filter(found["kind"] == "more copies")
    assert more.height >= 1 and set(more["severity"]) == {"note"}
    assert all("requested" in m for m in more["message"])


def test_an_uploads_requested_host_to_device_copy_is_no_alarm():
    doc = oracle.raw(MI250)
    htod = [
        e for e in oracle.complete(doc) if oracle.GPU_CATS.get(e.get("cat")) == "gpu_memcpy" and "HtoD" in e["name"]
    ]
    assert htod  # the oracle: the toy copies from the host
    runs = {"naive": load_trace(H200 / "naive.json.gz"), "mi250": load_trace(MI250)}
    found = findings(runs, "naive")
    mine = found.filter(found["run"] == "mi250")
    assert "more copies" not in mine["kind"].to_list()  # different work: its copies are not compared
    assert all(k == "hidden copy" for k in mine.filter(mine["severity"] == SEVERITY_ALARM)["kind"].to_list())
