"""Where a CPU-only trace's op time goes: every op that does work counts by its self time, so the
family shares of a step add up to the step's op time (issue #37 item 10: the leaf ops alone left
out `aten::mul`'s own multiply, which holds the scalar's `aten::to`).

The oracle is a plain stack walk with the json module over each thread's cpu_op events: an op's
parent is the innermost open op that holds it (its start inside, its end at most one 1 µs tick
past: integer-µs traces round ts and dur apart), its self time its duration less its direct
children's. A view's or an allocation's self time belongs to the nearest op that does work and
holds it; ops outside every such op are no work. Which names do work and which family a name has
are the rule tables' (kernels.METADATA_OPS, BOOKKEEPING_OPS, family_of); the walk is the oracle's.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

import oracle
from dashboard.engine import load_trace, summarize
from dashboard.engine.analyses.kernels import (
    BOOKKEEPING_OPS,
    METADATA_OPS,
    family_of,
    family_per_step,
    kernel_table,
    per_step,
    work_events,
)

REPO = Path(__file__).resolve().parent.parent
TRACES = [
    oracle.DATA / "cpu_naive_profile_memory.json.gz",
    REPO / "sample_traces" / "article-cpu" / "e2e.naive.prefill.json.gz",
]
TICK_US = 1.0


def does_work(name: str) -> bool:
    return not re.search(BOOKKEEPING_OPS, name) and not re.search(METADATA_OPS, name)


def walk(doc: dict) -> list[dict]:
    """Each cpu_op as {name, ts, dur, parent (index or None), self} with a stack walk per thread."""
    ops = [
        {"name": e["name"], "ts": float(e["ts"]), "dur": float(e.get("dur", 0)), "thread": (e["pid"], e["tid"])}
        for e in oracle.complete(doc)
        if e.get("cat") == "cpu_op"
    ]
    order = sorted(range(len(ops)), key=lambda i: (str(ops[i]["thread"]), ops[i]["ts"], -ops[i]["dur"], i))
    stack: list[int] = []
    thread = None
    for i in order:
        op = ops[i]
        if op["thread"] != thread:
            stack, thread = [], op["thread"]
        while stack:
            top = ops[stack[-1]]
            if top["dur"] > 0 and top["ts"] <= op["ts"] < top["ts"] + top["dur"]:
                if op["ts"] + op["dur"] <= top["ts"] + top["dur"] + TICK_US:
                    break
            stack.pop()
        op["parent"] = stack[-1] if stack else None
        stack.append(i)
    children = defaultdict(float)
    for op in ops:
        if op["parent"] is not None:
            children[op["parent"]] += op["dur"]
    for i, op in enumerate(ops):
        op["self"] = op["dur"] - children[i]
    return ops


def worker(ops: list[dict], i: int | None) -> int | None:
    """The nearest op that does work at or above op i."""
    while i is not None and not does_work(ops[i]["name"]):
        i = ops[i]["parent"]
    return i


def expected(path: Path) -> dict[str, dict]:
    """Per step name: family -> self µs, the op time (the outermost work ops' summed durations) and
    the aten::mul ops that hold another work op, with their own self µs."""
    doc = oracle.raw(path)
    ops = walk(doc)
    holders = {worker(ops, op["parent"]) for op in ops if does_work(op["name"])}  # the work ops that hold one
    out = {}
    for name, start, end in oracle.step_spans(doc):
        families: dict[str, float] = defaultdict(float)
        op_time = 0.0
        holding_mul = []
        for i, op in enumerate(ops):
            if not start <= op["ts"] < end:
                continue
            owner = worker(ops, i)
            if owner is None:
                continue
            families[family_of(ops[owner]["name"])] += op["self"]
            if owner == i and worker(ops, op["parent"]) is None:
                op_time += op["dur"]
            if op["name"] == "aten::mul" and i in holders:
                holding_mul.append(op["self"])
        out[name] = {"families": dict(families), "op_time": op_time, "holding_mul": holding_mul}
    return out


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_the_family_times_of_a_cpu_step_are_self_times_and_add_up_to_its_op_time(path):
    want = expected(path)
    trace = load_trace(path)
    steps = dict(zip(per_step(trace)["name"].to_list(), per_step(trace)["step"].to_list()))
    fam = family_per_step(trace)
    assert set(steps) == set(want)
    for name, step in steps.items():
        mine = {f: ns / 1000 for f, ns in zip(*fam.filter(fam["step"] == step).select("family", "total_ns"))}
        theirs = want[name]["families"]
        assert set(mine) == {f for f, us in theirs.items() if us > 0 or f in mine}
        for family, us in theirs.items():
            assert mine.get(family, 0.0) == pytest.approx(us, abs=2e-3), (name, family)
        # the shares add up to the op time: the families' sum is the outermost work ops' time
        assert sum(mine.values()) == pytest.approx(want[name]["op_time"], abs=2e-3)
        # aten::mul holding the scalar's aten::to is in, by its own time
        assert want[name]["holding_mul"], "the trace holds `scores * scale` with a Python float"
        leaf_us = work_events(trace).filter(work_events(trace)["step"] == step)["dur_ns"].sum() / 1000
        assert want[name]["op_time"] - leaf_us >= sum(want[name]["holding_mul"]) > 0
    # the summary's top families are these times, their shares of the step's op time
    summary = summarize(trace)
    for s in summary["steps"]:
        total = want[s["name"]]["op_time"]
        for f in s["top_families"]:
            assert f["us"] == pytest.approx(want[s["name"]]["families"][f["family"]], abs=2e-3)
            assert f["share"] == pytest.approx(f["us"] / total, rel=1e-6)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_counts_stay_the_leaf_ops_and_the_kernel_table_holds_every_op_that_took_time(path):
    trace = load_trace(path)
    fam = family_per_step(trace)
    work = per_step(trace)
    # counted units are still the leaf ops: each step's family counts add up to its work
    for step, n in zip(work["step"].to_list(), work["work"].to_list()):
        assert fam.filter(fam["step"] == step)["count"].sum() == n
    table = kernel_table(trace)
    assert table["share"].sum() == pytest.approx(1.0)
    assert table["total_ns"].sum() == fam["total_ns"].sum()
    assert "aten::mul" in table["name"].to_list()
