"""Where the time goes, in one line per step: the summary's top kernel families by device time,
against a hand classification of the H200 naive run's six kernel names and a json-module sum."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

import oracle
from dashboard.cli import main as cli
from dashboard.engine import load_trace, summarize

NAIVE = Path(__file__).parent.parent / "sample_traces" / "h200" / "naive.json.gz"


def hand_family(name: str, cat: str) -> str:
    """A person's reading of the names this trace holds."""
    if cat == "gpu_memcpy":
        return "copy"
    if cat == "gpu_memset":
        return "memset"
    if name.startswith("nvjet_"):
        return "gemm"
    if "softmax_warp_forward" in name:
        return "softmax"
    if "elementwise_kernel" in name:
        return "elementwise"
    raise AssertionError(f"unexpected kernel {name}")


@pytest.mark.skipif(not NAIVE.is_file(), reason="the bundled H200 collection is missing")
def test_each_step_names_its_top_three_families_with_their_share_of_device_time(capsys):
    doc = oracle.raw(NAIVE)
    launches = {
        e["args"]["correlation"]: float(e["ts"])
        for e in oracle.complete(doc)
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    steps = oracle.step_spans(doc)
    expected = []
    for name, start, end in steps:
        time = defaultdict(float)
        for e in oracle.complete(doc):
            if (
                e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                and start <= launches[e["args"]["correlation"]] <= end
            ):
                time[hand_family(e["name"], e["cat"])] += float(e["dur"])
        total = sum(time.values())
        top = sorted(time.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        expected.append([(f, t / total) for f, t in top])
    summary = summarize(load_trace(NAIVE))
    got = [[(f["family"], f["share"]) for f in step["top_families"]] for step in summary["steps"]]
    assert [[f for f, _ in step] for step in got] == [[f for f, _ in step] for step in expected]
    for mine, theirs in zip(got, expected):
        for (_, a), (_, b) in zip(mine, theirs):
            assert a == pytest.approx(b, abs=1e-6)
    assert cli(["summary", "--no-store", str(NAIVE)]) == 0
    text = capsys.readouterr().out
    first = expected[0]
    assert (
        f"{steps[0][0]}: " + ", ".join(f"{f} {s:.1%}" for f, s in first) + " of the device time; device busy"
    ) in text
