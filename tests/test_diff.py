"""The diff that explains, on HTA's public control/test pair (the same workload, the test run with
torch.compile and CUDA graphs): kernels ranked by time, the op-level diff, base names, launch
order and the readings, each against a json-module reading of the two files."""

from __future__ import annotations

from collections import Counter
from difflib import SequenceMatcher

import polars as pl
import pytest

import oracle
from dashboard.engine.compare.diff import chosen_steps, explained, kernel_diff, op_diff, readings, sequence_diff

CONTROL, TEST = "hta_a100_control.json.gz", "hta_v100_test.json.gz"
SAMPLES = oracle.DATA.parent.parent / "sample_traces" / "cpu"
OP_CATS = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"}


@pytest.fixture(scope="module")
def pair(trace_of):
    return {name: (trace_of(oracle.DATA / name), oracle.raw(oracle.DATA / name)) for name in (CONTROL, TEST)}


def _gpu_in_steps(doc: dict, steps: set[str]) -> list[tuple[dict, dict]]:
    """(GPU event, its launch) for each kernel/memcpy/memset whose launch lies in one of `steps`."""
    events = oracle.complete(doc)
    launches = {}
    for e in events:
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {}):
            launches.setdefault(e["args"]["correlation"], e)
    spans = [(name, start, end) for name, start, end in oracle.step_spans(doc) if name in steps]
    out = []
    for e in events:
        if e.get("cat") not in oracle.GPU_CATS:
            continue
        call = launches.get(e.get("args", {}).get("correlation"))
        if call is not None and any(start <= call["ts"] < end for _, start, end in spans):
            out.append((e, call))
    return out


def _count_per_step(doc: dict, steps: set[str]) -> dict[str, float]:
    """kernel name -> launches per step over `steps`."""
    counts = Counter(e["name"] for e, _ in _gpu_in_steps(doc, steps))
    return {name: n / len(steps) for name, n in counts.items()}


def _time_per_step(doc: dict, steps: set[str]) -> dict[str, float]:
    """kernel name -> total duration in ns per step over `steps`."""
    total: Counter = Counter()
    for e, _ in _gpu_in_steps(doc, steps):
        total[e["name"]] += e.get("dur", 0) * 1000
    return {name: ns / len(steps) for name, ns in total.items()}


def test_kernel_changes_are_ranked_by_their_effect_on_step_time(pair):
    (control, cdoc), (test, tdoc) = pair[CONTROL], pair[TEST]
    step = {"ProfilerStep#1009"}
    before, after = _time_per_step(cdoc, step), _time_per_step(tdoc, step)
    want = sorted(((after.get(n, 0) - before.get(n, 0)), n) for n in set(before) | set(after))
    want.sort(key=lambda d: -abs(d[0]))
    changes = kernel_diff(control, test, 1009, 1009)
    got = list(zip(changes["delta_ns_per_step"].head(5).to_list(), changes["name"].head(5).to_list()))
    assert got == [(pytest.approx(delta), name) for delta, name in want[:5]]
    top = changes["name"].head(3).to_list()
    # the two NCCL kernels keep their counts and gain 10 ms each: ranked by count they were 118-120th
    assert any(n.startswith("ncclKernel_SendRecv") for n in top) and any(
        n.startswith("ncclKernel_AllReduce") for n in top
    )
    nccl = changes.filter(pl.col("name").str.starts_with("ncclKernel_"))
    assert set(nccl.head(2)["change"]) == {"slower"}
    top12, total = explained(changes, 12)
    assert total == pytest.approx(sum(after.values()) - sum(before.values()))
    # the first 12 kernels that changed (a count per step, or a mean time by more than 5%): the rows a report lists
    count_before, count_after = _count_per_step(cdoc, step), _count_per_step(tdoc, step)

    def changed(name: str) -> bool:
        nb, na = count_before.get(name, 0), count_after.get(name, 0)
        return nb != na or not 0.95 <= (after[name] / na) / (before[name] / nb) <= 1.05

    listed = [d for d, name in want if changed(name)][:12]
    assert len(listed) == 12 and len(listed) < len(want)
    assert top12 == pytest.approx(sum(listed))


def test_over_all_steps_each_kernel_is_its_total_time_divided_by_the_steps(pair):
    (control, cdoc), (test, tdoc) = pair[CONTROL], pair[TEST]
    steps = {name for name, _, _ in oracle.step_spans(cdoc)}
    assert len(steps) == 6
    before, after = _time_per_step(cdoc, steps), _time_per_step(tdoc, steps)
    changes = kernel_diff(control, test)
    assert changes.height == len(set(before) | set(after))
    for row in changes.iter_rows(named=True):
        assert row["base_ns_per_step"] == pytest.approx(before.get(row["name"], 0))
        assert row["other_ns_per_step"] == pytest.approx(after.get(row["name"], 0))


def _op_names(doc: dict) -> Counter:
    """Names of CPU ops, annotations and runtime calls that start inside a ProfilerStep, by count."""
    spans = oracle.step_spans(doc)
    names: Counter = Counter()
    for e in oracle.complete(doc):
        if e.get("cat") in OP_CATS and not e["name"].startswith("ProfilerStep#"):
            if any(start <= e["ts"] < end for _, start, end in spans):
                names[e["name"]] += 1
    return names


def test_the_op_diff_shows_what_torch_compile_and_cuda_graphs_changed_on_the_cpu(pair):
    (control, cdoc), (test, tdoc) = pair[CONTROL], pair[TEST]
    before, after = _op_names(cdoc), _op_names(tdoc)
    ops = op_diff(control, test)
    assert set(ops.filter(pl.col("change") == "added")["name"]) == set(after) - set(before)
    assert set(ops.filter(pl.col("change") == "removed")["name"]) == set(before) - set(after)
    assert len(set(before) - set(after)) == 72
    assert {"CompiledFunction", "CompiledFunctionBackward", "cudaGraphLaunch"} <= set(after) - set(before)
    launch = ops.filter(pl.col("name") == "cudaLaunchKernel").row(0, named=True)
    assert (launch["base_per_step"], launch["other_per_step"]) == (
        before["cudaLaunchKernel"] / 6,
        after["cudaLaunchKernel"] / 6,
    )
    assert (launch["base_per_step"], launch["other_per_step"]) == (1428, 811)


def test_the_readings_name_torch_compile_and_cuda_graphs(pair):
    lines = readings(pair[CONTROL][0], pair[TEST][0])
    # first what differs besides the code: the pair is an A100 against a V100 (each file's deviceProperties)
    devices = [doc["deviceProperties"][0]["name"] for _, doc in (pair[CONTROL], pair[TEST])]
    assert lines[0] == f"besides the code: device cuda: {devices[0]} -> cuda: {devices[1]}"
    assert lines[1].startswith(
        "compiled: CompiledFunction, CompiledFunctionBackward appear (torch.compile); 72 op names"
    )
    assert (
        lines[2]
        == "CUDA graphs: 2 graph launches per step replay kernels; kernel launches fell from 1,428 to 811 per step"
    )


def test_the_readings_name_a_backend_change_and_a_new_hidden_copy(trace_of):
    inplace, naive, sdpa = (trace_of(SAMPLES / f"{v}.json.gz") for v in ("naive_inplace", "naive", "sdpa"))
    assert readings(inplace, naive) == ["new copy class: hidden (1 per step, none in the baseline)"]
    # and the other way: the hidden copy of the out-of-place masked_fill disappears (it said 'no copy-class change')
    assert readings(naive, inplace) == ["copy class gone: hidden (1 per step in the baseline, none in the run)"]
    assert readings(naive, sdpa) == [
        "attention backend: eager -> cpu_flash",
        "copy class gone: hidden (1 per step in the baseline, none in the run)",
    ]
    assert readings(naive, naive) == []


def test_template_instances_fold_into_their_base_name(pair):
    (control, cdoc), (test, tdoc) = pair[CONTROL], pair[TEST]
    prefix = "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<"
    base = "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1"
    found = {}
    for name, doc in ((CONTROL, cdoc), (TEST, tdoc)):
        steps = {step for step, _, _ in oracle.step_spans(doc)}
        found[name] = (
            Counter(e["name"] for e, _ in _gpu_in_steps(doc, steps) if e["name"].startswith(prefix)),
            len(steps),
        )
    # one kernel, another template instance in each run (<..., 2ul> against <..., 5ul>)
    assert set(found[CONTROL][0]).isdisjoint(found[TEST][0])
    by_name = kernel_diff(control, test).filter(pl.col("name").str.starts_with(prefix))
    assert sorted(by_name["change"]) == ["added", "removed"]
    by_base = kernel_diff(control, test, by="base")
    row = by_base.filter(pl.col("name").str.ends_with(base))
    assert row.height == 1
    assert row["base_per_step"][0] == pytest.approx(sum(found[CONTROL][0].values()) / found[CONTROL][1])
    assert row["other_per_step"][0] == pytest.approx(sum(found[TEST][0].values()) / found[TEST][1])
    assert row["change"][0] not in ("added", "removed")
    assert by_base.height < kernel_diff(control, test).height


def _launch_ordered(doc: dict, step: str) -> list[str]:
    """The step's kernel, memcpy and memset names ordered by their launch call (ts, then correlation)."""
    found = _gpu_in_steps(doc, {step})
    found.sort(key=lambda pair: (pair[1]["ts"], pair[1]["args"]["correlation"]))
    return [e["name"] for e, _ in found]


def test_kernel_sequences_are_aligned_in_launch_order_across_streams(pair):
    (control, cdoc), (test, tdoc) = pair[CONTROL], pair[TEST]
    a, b = _launch_ordered(cdoc, "ProfilerStep#1009"), _launch_ordered(tdoc, "ProfilerStep#1009")
    equal = sum(
        i2 - i1 for op, i1, i2, _, _ in SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op == "equal"
    )
    aligned = sequence_diff(control, 1009, test, 1009)
    assert aligned.filter(pl.col("op") == "equal").height == equal == 726
    assert aligned.filter(pl.col("a_pos").is_not_null()).sort("a_pos")["a_name"].to_list() == a


def test_a_step_that_does_not_exist_is_named(trace_of):
    trace = trace_of(SAMPLES / "naive.json.gz")
    with pytest.raises(KeyError, match="no step 12345"):
        chosen_steps(trace, 12345)


def _work_sequence_by_joins(trace, step: int) -> pl.DataFrame:
    """The obvious version of diff.work_sequence: the launches' rows joined on id (the gather it
    uses instead reads them by row number)."""
    from dashboard.engine.analyses.kernels import work_events

    ev = trace.events
    work = (
        work_events(trace)
        .filter(pl.col("step") == step)
        .join(ev.select("id", "launch", "correlation"), on="id", how="left")
    )
    return (
        work.join(ev.select(pl.col("id").alias("launch"), pl.col("ts_ns").alias("launch_ts")), on="launch", how="left")
        .with_columns(pl.coalesce("launch_ts", "ts_ns").alias("order_ns"))
        .sort("order_ns", "correlation", "ts_ns", "id", nulls_last=True)
        .select(pl.int_range(pl.len()).alias("pos"), pl.col("name").cast(pl.String), "family", "dur_ns", "stream")
    )


@pytest.mark.parametrize(
    "path",
    sorted(oracle.DATA.glob("*.json.gz")) + sorted((oracle.DATA.parent.parent / "sample_traces").glob("*/*.json.gz")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_the_launch_ordered_sequence_is_the_one_joins_give_on_every_real_trace(trace_of, path):
    from polars.testing import assert_frame_equal

    from dashboard.engine.compare.diff import work_sequence

    trace = trace_of(path)
    steps = trace.steps["step"].to_list()
    for step in steps[:3] + steps[-1:]:
        assert_frame_equal(work_sequence(trace, step), _work_sequence_by_joins(trace, step))


def test_equal_sequences_align_as_one_equal_block_as_difflib_says(trace_of):
    """The shortcut for equal sequences (a run against itself) gives difflib's own answer."""
    from difflib import SequenceMatcher

    from dashboard.engine.compare.diff import aligned_opcodes
    from dashboard.engine.analyses.kernels import work_events

    names = work_events(trace_of(oracle.DATA / "hta_triton_example.json.gz"))["name"].cast(pl.String).to_list()
    for seq in ([], names[:1], names, names * 3):
        assert aligned_opcodes(seq, list(seq)) == SequenceMatcher(a=seq, b=list(seq), autojunk=False).get_opcodes()


def test_a_cuda_graph_run_is_read_in_words_that_agree_with_its_counts(trace_of):
    """sdpa against its CUDA-graph run (H200): one graph launch a step ('launch ... replays', not
    'launches ... replay') and more kernel launches than eager, not fewer ('rose', not 'fell'),
    counted per ProfilerStep with the json module."""
    import json as _json
    import gzip as _gzip
    from pathlib import Path as _Path

    repo = _Path(__file__).resolve().parent.parent / "sample_traces" / "h200"

    def per_step(names: tuple[str, ...], path) -> float:  # calls whose name starts with one of `names`
        events = _json.loads(_gzip.decompress(path.read_bytes()))["traceEvents"]
        steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
        calls = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(names)]
        inside = sum(1 for c in calls for s in steps if s["ts"] <= c["ts"] <= s["ts"] + s["dur"])
        return inside / len(steps)

    eager, graphs = repo / "sdpa.json.gz", repo / "sdpa.graphs.json.gz"
    launches = per_step(("cudaGraphLaunch",), graphs)
    kernel_calls = ("cudaLaunchKernel", "cuLaunchKernel")  # the runtime's and the driver's (cuDNN: cuLaunchKernelEx)
    before, after = per_step(kernel_calls, eager), per_step(kernel_calls, graphs)
    assert launches == 1 and after > before
    said = [line for line in readings(trace_of(eager), trace_of(graphs)) if line.startswith("CUDA graphs")]
    assert said == [
        f"CUDA graphs: 1 graph launch per step replays kernels; kernel launches rose from {before:,.4g} to {after:,.4g} per step"
    ]


def test_the_runs_against_one_baseline_share_its_side_of_the_diffs(pair, monkeypatch):
    """review_changes.changes computes the baseline's side of the kernel and op diffs once for all
    its runs (and each run's op diff once, for its table and its readings); each Change's tables
    equal the pair's own diffs."""
    from dashboard.engine.compare import diff as diff_module
    from dashboard.engine.compare.review_changes import changes

    control, test = pair[CONTROL][0], pair[TEST][0]
    counted: Counter = Counter()
    calls: Counter = Counter()
    for name in ("_kernel_sides", "_op_sides"):  # each asked for the sides it must compute, all at once
        real = getattr(diff_module, name)

        def asked(wanted, *a, _real=real, _name=name):
            calls.update([_name])
            counted.update([_name] * len(wanted))
            return _real(wanted, *a)

        monkeypatch.setattr(diff_module, name, asked)
    found = changes({"control": control, "test": test, "test again": test}, "control")
    # sides: the baseline once, and the one other trace (twice a run) once, per table, in one call
    assert counted == Counter({"_kernel_sides": 2, "_op_sides": 2})
    assert calls == Counter({"_kernel_sides": 1, "_op_sides": 1})
    monkeypatch.undo()
    for change in found:
        assert change.kernels.equals(kernel_diff(control, test, by="base"))
        assert change.ops.equals(op_diff(control, test))
