"""Ingest: a folder of rank traces becomes one run with ranks, the same on a 2-worker Dask
LocalCluster as in one process; per-rank step times and the straggler of each step against a
json-module reading."""

from __future__ import annotations

import gzip
import json

import pytest

import oracle
from dashboard.engine.store.ingest import discover, ingest
from dashboard.engine.compare.ranks import rank_step_times, slowest_rank, stragglers
from dashboard.engine.store.store import Store

SOURCE = oracle.DATA / "hta_mi250_rocm_minitoy.json.gz"
SLOW = {0: 1.0, 1: 1.5, 2: 3.0}  # kernel durations scaled per rank: rank 2 is the straggler


def _rank_doc(rank: int) -> dict:
    doc = oracle.raw(SOURCE)
    doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": len(SLOW)}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["dur"] = round(e["dur"] * SLOW[rank])  # whole µs, as the source writes them
    return doc


@pytest.fixture()
def job(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in SLOW:
        (folder / f"rank-{rank}.json.gz").write_bytes(gzip.compress(json.dumps(_rank_doc(rank)).encode()))
    return folder


def _busy_us(doc: dict) -> dict[str, float]:
    """step name -> union of kernel/memcpy/memset intervals launched in it (µs), busiest device."""
    events = oracle.complete(doc)
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    out = {}
    for name, start, end in oracle.step_spans(doc):
        work = [
            e
            for e in events
            if e.get("cat") in oracle.GPU_CATS and start <= launch.get(e["args"].get("correlation"), -1) < end
        ]
        out[name] = max((oracle.union_us(iv) for iv in oracle.by_device(work).values()), default=0)
    return out


def test_a_folder_of_ranks_is_one_run_and_the_straggler_is_named(job, tmp_path):
    store = Store(tmp_path / "store")
    result = ingest([job], store)
    assert result.errors == []
    [(run_id, label, ranks)] = result.runs
    assert label == "job" and [r for r, _ in ranks] == [0, 1, 2]
    traces = {rank: store.get(sha) for rank, sha in ranks}
    times = rank_step_times(traces)
    for rank in SLOW:
        want = _busy_us(_rank_doc(rank))
        got = times.filter(times["rank"] == rank)
        assert got["step_us"].to_list() == pytest.approx(list(want.values()))
    table = stragglers(times)
    busy = {rank: list(_busy_us(_rank_doc(rank)).values()) for rank in SLOW}
    for i, row in enumerate(table.iter_rows(named=True)):
        per_rank = {rank: busy[rank][i] for rank in SLOW}
        if max(per_rank.values()) == 0:
            continue  # a step without device work has no straggler to name
        assert row["slowest_rank"] == max(per_rank, key=per_rank.get) == 2
        assert row["spread"] == pytest.approx(per_rank[2] / sorted(per_rank.values())[1])
    assert slowest_rank(traces) == 2
    assert Store(tmp_path / "store").run(run_id).ranks == ranks


def test_ingest_on_a_two_worker_dask_cluster_matches_one_process(job, tmp_path):
    (job / "notes.json").write_text('{"not": "a trace"}')
    serial, parallel = Store(tmp_path / "serial"), Store(tmp_path / "parallel")
    one = ingest([job], serial)
    two = ingest([job], parallel, workers=2)
    assert one.runs == two.runs
    assert [(p.rsplit("/", 1)[-1], e) for p, e in one.errors] == [(p.rsplit("/", 1)[-1], e) for p, e in two.errors]
    assert len(one.errors) == 1 and "notes.json" in one.errors[0][1] and "traceEvents" in one.errors[0][1]
    assert [t.sha for t in serial.traces()] != [] and sorted(t.sha for t in serial.traces()) == sorted(
        t.sha for t in parallel.traces()
    )
    for trace in serial.traces():
        a, b = serial.get(trace.sha), parallel.get(trace.sha)
        assert a.events.equals(b.events) and a.steps.equals(b.steps) and a.flows.equals(b.flows)


def test_files_named_directly_are_one_run_each(tmp_path):
    files = [oracle.DATA / "tracelens_h100_bert_sdpa_flash.json.gz", oracle.DATA / "hta_triton_example.json.gz"]
    assert discover(files) == [(None, [files[0]]), (None, [files[1]])]
    result = ingest(files, Store(tmp_path))
    assert [label for _, label, _ in result.runs] == [f.name for f in files]


def test_ranks_of_two_jobs_in_one_folder_are_runs_of_their_own(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for rank, world in ((0, 2), (1, 4)):  # distinct ranks, but of a 2-rank and a 4-rank job
        doc = _rank_doc(rank)
        doc["distributedInfo"]["world_size"] = world
        (folder / f"rank-{rank}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    result = ingest([folder], Store(tmp_path / "store"))
    assert result.errors == [] and [(label, [r for r, _ in ranks]) for _, label, ranks in result.runs] == [
        ("rank-0.json.gz", [0]),
        ("rank-1.json.gz", [1]),
    ]
