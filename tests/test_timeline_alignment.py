"""The Timeline diff tab's op-aligned changes are `attnscope check`'s: the same steps matched, the
same ops aligned, the same lines (alignment.op_changes worded by alignment.describe), driven
headless with Streamlit's AppTest. The masked_fill line's numbers are also worked out by hand
from the trace's JSON."""

from __future__ import annotations

import gzip
import json
import os
import re
import statistics
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import cli
from dashboard.engine.compare.alignment import describe, op_changes
from dashboard.runs import ENV_TRACES

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "dashboard" / "app.py"
H200, CPU, DATA = REPO / "sample_traces" / "h200", REPO / "sample_traces" / "cpu", REPO / "tests" / "data"
A100, V100 = DATA / "hta_a100_control.json.gz", DATA / "hta_v100_test.json.gz"
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def unescaped(body: str) -> str:
    """What a reader sees of a Markdown body: CommonMark's backslash escapes removed."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", body)


@pytest.fixture
def app(monkeypatch):
    def open_app(params: dict, traces: list[Path] = ()) -> AppTest:
        if traces:
            monkeypatch.setenv(ENV_TRACES, os.pathsep.join(str(p) for p in traces))
        else:
            monkeypatch.delenv(ENV_TRACES, raising=False)
        at = AppTest.from_file(str(APP), default_timeout=120)
        at.query_params["tab"] = "Timeline diff"
        for key, value in params.items():
            at.query_params[key] = value
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert not [e.value for e in at.main.error if " tab could not be drawn" in e.value]
        return at

    return open_app


def tab_lines(at: AppTest) -> list[str]:
    """The change lines the tab lists (the expander's included), as a reader sees them."""
    bodies = [m.value for m in at.get_by_key("timeline_op_changes").markdown]
    return [line.removeprefix("- ") for body in bodies for line in unescaped(body).splitlines()]


def check_outputs(base: Path, candidate: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    """(the Markdown comment's numbered op-aligned changes, the JSON's change texts) of `attnscope check`."""
    md, js = tmp_path / "check.md", tmp_path / "check.json"
    cli.main(["check", "--no-store", str(base), str(candidate), "--markdown", str(md), "--json", str(js)])
    listed = re.findall(r"^\d+\. (.*)$", md.read_text(), re.M)
    return [line for line in listed if not line.startswith("step time")], [
        c["text"] for c in json.loads(js.read_text())["changes"]
    ]


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def _op_device(path: Path, op: str) -> list[list[dict]]:
    """Per step (in order), the device events launched inside the step's one `op` call: their
    launch call (same correlation) on the op's thread, within the op's span."""
    ev = _events(path)
    launch = {
        e["args"]["correlation"]: e
        for e in ev
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#"))
    out = []
    for start, end in steps:
        [call] = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] == op and start <= e["ts"] < end]
        out.append(
            [
                d
                for d in ev
                if d.get("cat") in DEVICE
                and (lc := launch.get(d["args"].get("correlation"))) is not None
                and lc["tid"] == call["tid"]
                and call["ts"] <= lc["ts"] <= call["ts"] + call["dur"]
            ]
        )
    return out


def test_the_h200_masked_fill_change_reads_as_check_writes_it_and_as_the_json_says(app, tmp_path):
    base, cand = H200 / "naive.json.gz", H200 / "naive_inplace.json.gz"
    at = app({"run": ["h200/naive", "h200/naive_inplace"], "a": "h200/naive", "b": "h200/naive_inplace"})
    shown = tab_lines(at)
    md_lines, json_texts = check_outputs(base, cand, tmp_path)
    assert shown == json_texts and shown[:3] == md_lines
    # by hand: the out-of-place masked_fill launches a 268 MB DtoD memcpy and a kernel, masked_fill_ the kernel alone
    before, after = _op_device(base, "aten::masked_fill"), _op_device(cand, "aten::masked_fill_")
    memcpys = [[d for d in step if d["cat"] == "gpu_memcpy" and "DtoD" in d["name"]] for step in before]
    assert [len(m) for m in memcpys] == [1, 1, 1] and not any(d["cat"] == "gpu_memcpy" for step in after for d in step)
    size = memcpys[0][0]["args"]["bytes"]
    delta_ms = statistics.mean(sum(d["dur"] for d in b) - sum(d["dur"] for d in a) for a, b in zip(before, after)) / 1e3
    assert shown[0] == (
        f"under `attention::naive_inplace`: `aten::masked_fill` (clone + copy_, {size / 1e6:.0f} MB) replaced by "
        f"`aten::masked_fill_`; -1 DtoD memcpy, {delta_ms:+.3g} ms a step"
    )
    assert shown[0].endswith("-0.128 ms a step")


def test_the_cpu_naive_against_sdpa_lines_and_the_two_steps_alone(app, trace_of, tmp_path):
    base, cand = CPU / "naive.json.gz", CPU / "sdpa.json.gz"
    at = app({"run": ["cpu/naive", "cpu/sdpa"], "a": "cpu/naive", "b": "cpu/sdpa", "step_a": "3", "step_b": "4"})
    md_lines, json_texts = check_outputs(base, cand, tmp_path)
    assert tab_lines(at) == json_texts and json_texts[:3] == md_lines and len(json_texts) >= 1
    assert json_texts[0].startswith("under `attention::sdpa`: `aten::transpose`, `aten::matmul`")
    # the two steps shown: A's step 3 against B's step 4 alone, and the tab says check pairs 3 with 3
    at.radio(key="tl_ops_scope").set_value("the two steps shown").run()
    a, b = trace_of(base), trace_of(cand)
    assert tab_lines(at) == [describe(c) for c in op_changes(a, b, [(3, 4)])]
    assert any(
        "A's step 3 against B's step 4 alone (`attnscope check` matches A's step 3 with B's step 3)" in c.value
        for c in at.caption
    )


def test_b_opens_on_the_step_check_matches_with_as(app, trace_of):
    """Steps are matched in order: the i-th ProfilerStep of A with the i-th of B."""
    from dashboard.engine.compare.speed import representative_step

    a_path, b_path = H200 / "naive.json.gz", H200 / "sdpa.json.gz"
    at = app({"run": ["h200/naive", "h200/sdpa"], "a": "h200/naive", "b": "h200/sdpa"})
    numbers = [
        sorted((e["ts"], int(e["name"].split("#")[1])) for e in _events(p) if e["name"].startswith("ProfilerStep#"))
        for p in (a_path, b_path)
    ]
    step_a = representative_step(trace_of(a_path))  # A's default: the step closest to the median
    index = [n for _, n in numbers[0]].index(step_a)
    assert at.selectbox(key="tl_step_a").value == step_a
    assert at.selectbox(key="tl_step_b").value == numbers[1][index][1]
    pairs = ", ".join(f"{x} with {y}" for (_, x), (_, y) in zip(numbers[0], numbers[1]))
    assert any(f"{len(numbers[0])} pairs (A's step with B's: {pairs})" in c.value for c in at.caption)


def test_a_long_list_folds_after_ten_and_keeps_checks_order(app, trace_of):
    ids = ["file/" + A100.name, "file/" + V100.name]
    at = app({"run": ids, "a": ids[0], "b": ids[1]}, traces=[A100, V100])
    expected = [describe(c) for c in op_changes(trace_of(A100), trace_of(V100))]
    assert len(expected) > 10
    block = at.get_by_key("timeline_op_changes")
    [expander] = block.expander
    assert expander.label == f"{len(expected) - 10:,} more changes"
    assert tab_lines(at) == expected[:10]  # the rest is drawn once the reader opens it (views/folded.py)
    at.session_state["fold_timeline_changes"] = True  # opened
    at.run()
    assert tab_lines(at) == expected


def test_a_gpu_run_against_a_cpu_run_is_not_compared(app):
    at = app({"run": ["h200/naive", "cpu/naive"], "a": "h200/naive", "b": "cpu/naive"})
    assert any(c.value.startswith("Not compared: a GPU run's device time") for c in at.caption)
    with pytest.raises(KeyError):
        at.get_by_key("timeline_op_changes")


def test_a_run_against_itself_has_no_op_change_and_its_steps_match_one_to_one(trace_of):
    from dashboard.engine.compare.alignment import op_changes, step_pairs

    trace = trace_of(A100)
    steps = trace.steps["step"].to_list()
    assert step_pairs(trace, trace) == list(zip(steps, steps))
    assert op_changes(trace, trace) == []
