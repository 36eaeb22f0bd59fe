"""Multi-rank runs in the dashboard: a folder of rank traces named at start, or a run of the store
a link names, is ONE run whose trace is its slowest rank's, so every tab compares slowest rank
with slowest rank; its label says how many ranks it has.

The rank set is derived from a real trace (HTA's MI250 mini toy): each rank's copy carries its own
distributedInfo and kernels scaled by a per-rank factor, so rank 1 is the straggler. Which rank is
slowest and its step times come from a json-module reading (tests/test_ingest._busy_us)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import oracle
from dashboard.engine.store.ingest import ingest
from dashboard.engine.store.store import Store
from dashboard.catalog import ENV_TRACES, TraceCache, discover, file_source, open_all, pending_file
from dashboard.runs import trace_cache
from test_ingest import _busy_us

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
SOURCE = oracle.DATA / "hta_mi250_rocm_minitoy.json.gz"
SLOW = {0: 1.0, 1: 3.0, 2: 1.5}  # kernel durations scaled per rank: rank 1 is the straggler


def rank_doc(rank: int, world: int = len(SLOW)) -> dict:
    doc = oracle.raw(SOURCE)
    doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["dur"] = round(e["dur"] * SLOW[rank])
    return doc


def write(folder: Path, docs: dict[str, dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, doc in docs.items():
        (folder / name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    return folder


@pytest.fixture()
def job(tmp_path) -> Path:
    return write(tmp_path / "job", {f"rank-{r}.json.gz": rank_doc(r) for r in SLOW})


def oracle_slowest() -> tuple[int, float]:
    """The rank slowest in most steps (a json-module reading) and its median step time (µs)."""
    busy = {rank: list(_busy_us(rank_doc(rank)).values()) for rank in SLOW}
    steps = len(next(iter(busy.values())))
    wins = {rank: sum(1 for i in range(steps) if busy[rank][i] == max(b[i] for b in busy.values())) for rank in SLOW}
    slowest = max(SLOW, key=lambda r: (wins[r], statistics.median(busy[r])))
    return slowest, statistics.median(busy[slowest])


@pytest.fixture()
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_STORE", str(tmp_path / "store"))
    monkeypatch.delenv(ENV_TRACES, raising=False)
    trace_cache.clear()
    yield
    trace_cache.clear()


def run_app(params: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120)
    for key, value in (params or {}).items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def as_read(markdown: str) -> str:
    """Text as the reader sees it (the app backslash-escapes names in Markdown bodies)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def overview(at: AppTest):
    return at.get_by_key("tbl_overview").dataframe[0].value.set_index("run")


def test_a_folder_of_ranks_is_one_run_whose_trace_is_the_slowest_rank(job):
    slowest, _ = oracle_slowest()
    assert slowest == 1  # the derivation made rank 1 the straggler; the reading agrees
    _, loose, failures = discover(root=job / "no-bundled", extra=[job])
    assert failures == [] and [s.group for s in loose] == ["ranks/job"] * 3
    cache = TraceCache()
    loaded, bad = open_all([pending_file(s, cache) for s in loose], cache=cache)
    assert bad == []
    [run] = loaded
    assert run.source.id == "ranks/job" and run.label == "job (3 ranks)"
    assert sorted(run.ranks) == [0, 1, 2]
    assert all(t.meta["distributedInfo"]["rank"] == r for r, t in run.ranks.items())
    assert run.trace is run.ranks[slowest]
    assert run.size_bytes == sum(p.stat().st_size for p in job.iterdir())
    single = open_all([pending_file(file_source(SOURCE), cache)], cache=cache)[0][0]
    assert single.ranks == {0: single.trace}  # a one-trace run names no distributedInfo: rank 0


def test_files_whose_ranks_repeat_stay_runs_of_their_own(tmp_path):
    folder = write(tmp_path / "twice", {"a.json.gz": rank_doc(0), "b.json.gz": rank_doc(0)})
    _, loose, _ = discover(root=tmp_path / "no-bundled", extra=[folder])
    cache = TraceCache()
    loaded, bad = open_all([pending_file(s, cache) for s in loose], cache=cache)
    assert bad == [] and [r.source.id for r in loaded] == ["file/a.json.gz", "file/b.json.gz"]
    assert [r.label for r in loaded] == ["a", "b"]


def test_ranks_of_two_jobs_stay_runs_of_their_own(tmp_path):
    # rank 0 of a 2-rank job and rank 1 of a 4-rank job (like HTA's A100 'control', rank 3 of 8,
    # beside its V100 'test', rank 1 of 2): distinct ranks, but not one job
    folder = write(tmp_path / "mixed", {"a.json.gz": rank_doc(0, world=2), "b.json.gz": rank_doc(1, world=4)})
    _, loose, _ = discover(root=tmp_path / "no-bundled", extra=[folder])
    cache = TraceCache()
    loaded, bad = open_all([pending_file(s, cache) for s in loose], cache=cache)
    assert bad == [] and [r.source.id for r in loaded] == ["file/a.json.gz", "file/b.json.gz"]
    same = write(tmp_path / "same", {"a.json.gz": rank_doc(0, world=2), "b.json.gz": rank_doc(1, world=2)})
    _, loose, _ = discover(root=tmp_path / "no-bundled", extra=[same])
    loaded, _ = open_all([pending_file(s, cache) for s in loose], cache=cache)
    assert [(r.source.id, sorted(r.ranks)) for r in loaded] == [("ranks/same", [0, 1])]


def test_the_dashboard_shows_a_folder_of_ranks_as_one_run_at_the_slowest_ranks_step_time(job, server, monkeypatch):
    monkeypatch.setenv(ENV_TRACES, str(job))
    at = run_app()
    assert at.multiselect[0].value == ["ranks/job"]  # what the command line named, as one run
    assert at.multiselect[0].format_func("ranks/job") == "job (3 ranks)"
    shown = overview(at)
    _, median_us = oracle_slowest()
    assert list(shown.index) == ["job (3 ranks)"]
    assert shown.loc["job (3 ranks)", "median_step_us"] == pytest.approx(median_us)
    assert shown.loc["job (3 ranks)", "steps"] == len(oracle.step_spans(rank_doc(1)))


def test_a_link_to_a_stored_run_of_ranks_opens_it_from_the_store_without_parsing(job, server, tmp_path):
    import os

    done = ingest([job], Store(os.environ["ATTNSCOPE_STORE"]))
    [(run_id, label, ranks)] = done.runs
    assert label == "job" and len(ranks) == 3
    shutil.rmtree(job)  # the files are gone: the run can only come from the store's Parquet
    at = run_app({"run": [f"store/{run_id}"]})
    assert at.multiselect[0].value == [f"store/{run_id}"]
    shown = overview(at)
    _, median_us = oracle_slowest()
    assert list(shown.index) == ["job (3 ranks)"]
    assert shown.loc["job (3 ranks)", "median_step_us"] == pytest.approx(median_us)
    gone = run_app({"run": ["store/000000000000"]})
    assert any(
        "store/000000000000: the link's run is not in the trace store" in as_read(e.value) for e in gone.sidebar.error
    )
