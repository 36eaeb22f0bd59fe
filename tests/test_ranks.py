"""Runs of several ranks: per-rank step times, the slowest rank of each step and how far it is
behind the median rank, and two runs compared rank by rank and slowest rank against slowest rank.

No real set of rank traces of one job is among the public traces we hold (hta_a100_control is
rank 3 of 8 and hta_v100_test rank 1 of 2, but of different jobs on different GPUs), so the jobs
here are DERIVED from one real trace, HTA's rank-0 V100 trace with nanosecond timestamps
(tests/data/hta_v100_ns_resolution.pt.trace.json.gz, 5 ProfilerSteps): each rank's file is that
trace with distributedInfo.rank set, its clock moved by a per-rank offset (timestamps made
relative to the trace's first event, plus rank x CLOCK_SKEW_US) and time inside chosen steps
running slower by a factor on that rank (the straggler: see rank_doc). Expected numbers come from reading the written files
back with the json module (Decimal timestamps, exact to the nanosecond) and taking, per step, the
union of the GPU work launched in it on the busiest device: never from the engine.
"""

from __future__ import annotations

import functools
import gzip
import json
import statistics
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

import oracle
from dashboard.engine import load_trace
from dashboard.engine.compare.ranks import (
    compare_ranks,
    compare_slowest,
    rank_matrix,
    rank_medians,
    rank_step_times,
    slowest_of,
    slowest_rank,
    stragglers,
)

SOURCE = oracle.DATA / "hta_v100_ns_resolution.pt.trace.json.gz"
CLOCK_SKEW_US = Decimal("250.125")  # rank r's clock reads r x this later than rank 0's
# Two jobs of four ranks: step index (0-4, in time order) -> how many times slower that rank ran it.
# Baseline: a different straggler in steps 0-3; in step 4 every rank keeps pace.
BASELINE = {0: {}, 1: {1: "1.15"}, 2: {0: "1.08", 3: "1.25"}, 3: {2: "1.12"}}
# Candidate: rank 2 is 5% slow in every step; the others as fast as the source.
CANDIDATE = {0: {}, 1: {}, 2: {0: "1.05", 1: "1.05", 2: "1.05", 3: "1.05", 4: "1.05"}, 3: {}}


@functools.lru_cache(maxsize=1)
def _source() -> tuple[dict, dict, list[tuple[str, Decimal, Decimal]], Decimal]:
    """The source read once: with JSON floats, with Decimal numbers, each step's device window
    (name, first start and last end in µs of the GPU work launched in the step: the GPU runs
    behind the CPU, so this is mostly inside the next step's CPU span) and its first timestamp."""
    exact = json.loads(gzip.decompress(SOURCE.read_bytes()), parse_float=Decimal)
    events = oracle.complete(exact)
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    gpu = [e for e in events if e.get("cat") in oracle.GPU_CATS]
    windows = []
    for name, start, end in oracle.step_spans(exact):
        work = [e for e in gpu if start <= launch.get(e.get("args", {}).get("correlation"), -1) < end]
        windows.append((name, min(e["ts"] for e in work), max(e["ts"] + e["dur"] for e in work)))
    origin = min(e["ts"] for e in exact["traceEvents"] if "ts" in e)
    return _floats(exact), exact, windows, origin


def _floats(value):
    """A document read with Decimal numbers, as JSON floats (exact at µs magnitudes)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return value


NS = Decimal("0.001")


def rank_doc(rank: int, stretch: dict[int, str], world: int, drop_last_step: bool = False) -> dict:
    """The source trace as rank `rank` of a job of `world` ranks, with JSON floats: its clock
    read rank x CLOCK_SKEW_US later, and while the device runs step i of `stretch` everything (CPU
    and GPU) runs stretch[i] times slower: a time t inside that step's device window maps to
    start + (t - start) x factor, and later times move by the window's added length, so every
    event keeps its order, nesting and step (one monotone map of time). drop_last_step: this
    rank's profiler wrote no ProfilerStep event for the last step."""
    floats, exact, spans, origin = _source()
    windows = [(start, end, Decimal(stretch[i]) - 1) for i, (_, start, end) in enumerate(spans) if i in stretch]
    skew = origin - rank * CLOCK_SKEW_US

    def moved(t: Decimal) -> Decimal:
        return (
            t
            + sum((extra * min(max(t - start, Decimal(0)), end - start) for start, end, extra in windows), Decimal(0))
            - skew
        ).quantize(NS)

    doc = {k: v for k, v in floats.items() if k != "traceEvents"}
    doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    last = spans[-1][0]  # the step's name
    events = []
    for e, x in zip(floats["traceEvents"], exact["traceEvents"]):
        if drop_last_step and x.get("name") == last and x.get("cat") != "gpu_user_annotation":
            continue
        e = dict(e)
        if "ts" in x:
            ts = moved(x["ts"])
            if "dur" in x:
                e["dur"] = float(moved(x["ts"] + x["dur"]) - ts)
            e["ts"] = float(ts)
        events.append(e)
    doc["traceEvents"] = events
    return doc


def write_job(folder: Path, plan: dict[int, dict[int, str]], drop_last_step: tuple[int, ...] = ()) -> Path:
    """One .json.gz per rank of `plan` in `folder` (made), named like torch's rank files."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank, stretch in plan.items():
        doc = rank_doc(rank, stretch, len(plan), rank in drop_last_step)
        (folder / f"rank-{rank}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    return folder


def busy_us(path: Path) -> dict[int, Decimal]:
    """Step number -> the union of GPU work (kernel, memcpy, memset) launched in that step, on the
    busiest device, in µs: read from the file with the json module alone."""
    doc = oracle.raw(path, parse_float=Decimal)
    events = oracle.complete(doc)
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    gpu = [e for e in events if e.get("cat") in oracle.GPU_CATS]
    out = {}
    for name, start, end in oracle.step_spans(doc):
        work = [e for e in gpu if start <= launch.get(e.get("args", {}).get("correlation"), -1) < end]
        out[int(name.split("#")[1])] = max(
            (oracle.union_us(iv) for iv in oracle.by_device(work).values()), default=Decimal(0)
        )
    return out


def expected(folder: Path) -> dict[int, dict[int, Decimal]]:
    """rank -> step -> busy µs, for every rank file in `folder` (its rank from the file name)."""
    return {int(p.name.split("-")[1].split(".")[0]): busy_us(p) for p in sorted(folder.glob("rank-*.json.gz"))}


def median(values) -> float:
    return float(statistics.median(values))


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """(folder, {rank: Trace}, oracle) for the baseline and the candidate job."""
    root = tmp_path_factory.mktemp("jobs")
    out = {}
    for name, plan in (("baseline", BASELINE), ("candidate", CANDIDATE)):
        folder = write_job(root / name, plan)
        out[name] = (folder, {r: load_trace(folder / f"rank-{r}.pt.trace.json.gz") for r in plan}, expected(folder))
    return out


def test_each_ranks_step_times_are_its_own_device_busy_time_per_step(jobs):
    _, traces, want = jobs["baseline"]
    times = rank_step_times(traces)
    assert times.columns == ["step", "rank", "step_us"]
    got = {(r["rank"], r["step"]): r["step_us"] for r in times.iter_rows(named=True)}
    assert got == pytest.approx(
        {(rank, step): float(us) for rank, steps in want.items() for step, us in steps.items()}, rel=1e-12
    )
    assert len(want[0]) == 5 and times["rank"].n_unique() == 4
    matrix = rank_matrix(times)  # step x rank
    assert matrix.columns == ["step", "0", "1", "2", "3"] and matrix["step"].to_list() == sorted(want[0])
    for rank in want:
        assert matrix[str(rank)].to_list() == pytest.approx(
            [float(want[rank][s]) for s in sorted(want[rank])], rel=1e-12
        )


def test_the_slowest_rank_of_each_step_is_the_stretched_one_and_its_lead_over_the_median_rank(jobs):
    _, traces, want = jobs["baseline"]
    table = stragglers(rank_step_times(traces))
    steps = sorted(want[0])
    planned = {steps[i]: rank for rank, stretch in BASELINE.items() for i in stretch}  # by design of BASELINE
    planned[steps[4]] = 0  # every rank keeps pace in the last step: a tie goes to the lowest rank
    assert table["step"].to_list() == steps
    for row in table.iter_rows(named=True):
        per_rank = {rank: want[rank][row["step"]] for rank in want}
        slowest = max(per_rank.values())
        assert row["slowest_rank"] == planned[row["step"]] == min(r for r, us in per_rank.items() if us == slowest)
        mid = median(per_rank.values())  # four ranks: the mean of the middle two
        assert row["ranks"] == 4
        assert row["slowest_us"] == pytest.approx(float(slowest), rel=1e-12)
        assert row["median_us"] == pytest.approx(mid, rel=1e-12)
        assert row["spread"] == pytest.approx(float(slowest) / mid, rel=1e-12)
        assert row["behind_us"] == pytest.approx(float(slowest) - mid, rel=1e-9, abs=1e-6)
    last = table.filter(pl.col("step") == steps[4]).row(0, named=True)
    assert last["spread"] == 1.0 and last["behind_us"] == 0.0  # the same work shifted in time is the same busy time
    assert slowest_rank(traces) == 2  # the straggler of two steps
    # how often each rank was the straggler: a step where every rank kept pace counts for none
    wins = {rank: 0 for rank in want}
    for step in steps:
        per_rank = {rank: want[rank][step] for rank in want}
        if max(per_rank.values()) > median(per_rank.values()):
            wins[min(r for r, us in per_rank.items() if us == max(per_rank.values()))] += 1
    assert (
        dict(rank_medians(rank_step_times(traces)).select("rank", "straggler_steps").iter_rows())
        == wins
        == {0: 0, 1: 1, 2: 2, 3: 1}
    )


def test_a_rank_that_lost_a_step_leaves_a_gap_and_the_step_counts_the_ranks_that_recorded_it(tmp_path):
    plan = {0: {}, 1: {4: "1.5"}, 2: {}}
    folder = write_job(tmp_path / "job", plan, drop_last_step=(1,))
    want = expected(folder)
    traces = {r: load_trace(folder / f"rank-{r}.pt.trace.json.gz") for r in plan}
    times = rank_step_times(traces)
    steps = sorted(want[0])
    assert sorted(want[1]) == steps[:4]  # the oracle agrees rank 1 has no last step
    matrix = rank_matrix(times)
    assert matrix.filter(pl.col("step") == steps[4])["1"].to_list() == [None]
    last = stragglers(times).filter(pl.col("step") == steps[4]).row(0, named=True)
    assert last["ranks"] == 2 and last["slowest_rank"] == 0  # ranks 0 and 2 tie; rank 1's stretched step is gone
    medians = rank_medians(times)
    assert medians["steps"].to_list() == [5, 4, 5]
    assert medians["median_us"].to_list() == pytest.approx([median(want[r].values()) for r in plan], rel=1e-12)


def test_two_runs_compare_rank_by_rank_on_each_ranks_median_step_time(jobs):
    _, base, want_base = jobs["baseline"]
    _, cand, want_cand = jobs["candidate"]
    table = compare_ranks(rank_step_times(base), rank_step_times(cand))
    assert table["rank"].to_list() == [0, 1, 2, 3]
    for row in table.iter_rows(named=True):
        b, c = median(want_base[row["rank"]].values()), median(want_cand[row["rank"]].values())
        assert (row["baseline_us"], row["candidate_us"]) == pytest.approx((b, c), rel=1e-12)
        assert row["speedup"] == pytest.approx(b / c, rel=1e-12)
    by_rank = dict(zip(table["rank"].to_list(), table["speedup"].to_list()))
    # rank 2 is slower in every step; rank 1's one slow step does not move its median
    assert by_rank[0] == by_rank[1] == 1.0 > by_rank[2]


def test_a_rank_only_one_run_has_is_listed_with_no_speedup(jobs):
    _, base, _ = jobs["baseline"]
    table = compare_ranks(rank_step_times(base), rank_step_times({r: t for r, t in base.items() if r != 3}))
    row = table.filter(pl.col("rank") == 3).row(0, named=True)
    assert row["baseline_us"] is not None and row["candidate_us"] is None and row["speedup"] is None


def test_two_runs_compare_slowest_rank_against_slowest_rank(jobs):
    _, base, want_base = jobs["baseline"]
    _, cand, want_cand = jobs["candidate"]
    table = compare_slowest(rank_step_times(base), rank_step_times(cand))
    assert table["measure"].to_list() == ["slowest rank", "slowest of each step"]
    slow, each = table.row(0, named=True), table.row(1, named=True)
    # baseline: rank 2 is the slowest in two steps, every other rank in at most one; candidate: rank 2 in all five
    assert (slow["baseline_rank"], slow["candidate_rank"]) == (2, 2)
    assert slowest_of(rank_step_times(cand)) == 2
    b, c = median(want_base[2].values()), median(want_cand[2].values())
    assert (slow["baseline_us"], slow["candidate_us"], slow["speedup"]) == pytest.approx((b, c, b / c), rel=1e-12)
    steps = sorted(want_base[0])
    b_each = median(max(want_base[r][s] for r in want_base) for s in steps)
    c_each = median(max(want_cand[r][s] for r in want_cand) for s in steps)
    assert (each["baseline_rank"], each["candidate_rank"]) == (None, None)
    assert (each["baseline_us"], each["candidate_us"], each["speedup"]) == pytest.approx(
        (b_each, c_each, b_each / c_each), rel=1e-12
    )
