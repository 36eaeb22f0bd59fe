"""The trace store: a trace parsed once reopens from Parquet with the same tables and summary;
entries appear atomically; another schema version is parsed again; a size cap evicts the least
recently opened unpinned traces; runs and saved views keep their labels and ids."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import shutil

import pytest

import oracle
from dashboard.engine import load_trace, summarize
from dashboard.engine.store import store as store_module
from dashboard.engine.store.store import SCHEMA_VERSION, Store, sha256_of

TRACES = sorted(p.name for p in oracle.DATA.glob("*.json.gz"))
SAMPLES = oracle.DATA.parent.parent / "sample_traces" / "cpu"


def _summary(trace) -> str:
    return json.dumps(summarize(trace), sort_keys=True)


@pytest.mark.parametrize("name", TRACES)
def test_a_stored_trace_reopens_with_the_same_tables_and_summary(tmp_path, name):
    path = oracle.DATA / name
    store = Store(tmp_path / "store")
    first, sha = store.open(path)
    again, sha_again = Store(tmp_path / "store").open(path)  # a new process would see the same
    assert sha == sha_again == sha256_of(path)
    fresh = load_trace(path)
    for table in ("events", "flows", "steps"):
        assert getattr(again, table).equals(getattr(fresh, table)), table
    assert (again.source, again.meta, again.warnings, again.size_bytes) == (
        fresh.source,
        fresh.meta,
        fresh.warnings,
        fresh.size_bytes,
    )
    assert _summary(again) == _summary(fresh)


def test_a_trace_in_the_store_is_not_parsed_again(tmp_path, monkeypatch):
    store = Store(tmp_path)
    path = SAMPLES / "naive.json.gz"
    store.open(path)
    copy = tmp_path / "renamed.json.gz"
    shutil.copy(path, copy)  # same bytes under another name: found by content

    def refuse(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setattr(store_module, "load_trace", refuse)
    trace, sha = store.open(copy)
    assert sha == sha256_of(path)
    assert trace.events.height == len(oracle.complete(oracle.raw(path)))


def test_a_changed_file_is_hashed_and_parsed_again(tmp_path):
    store = Store(tmp_path / "store")
    path = tmp_path / "run.json.gz"
    shutil.copy(SAMPLES / "naive.json.gz", path)
    _, first = store.open(path)
    shutil.copy(SAMPLES / "sdpa.json.gz", path)
    os.utime(path, ns=(1, 1))
    trace, second = store.open(path)
    assert first != second == sha256_of(SAMPLES / "sdpa.json.gz")
    assert trace.events.height == len(oracle.complete(oracle.raw(SAMPLES / "sdpa.json.gz")))


def test_half_written_and_other_schema_entries_are_never_read(tmp_path):
    store = Store(tmp_path)
    data = (SAMPLES / "naive.json.gz").read_bytes()
    sha = sha256_of(data)
    # a folder left in tmp/ by a crash, and a folder under an older schema with a catalog row
    (tmp_path / "tmp" / "crashed").mkdir()
    (tmp_path / "tmp" / "crashed" / "events.parquet").write_bytes(b"half")
    old = tmp_path / f"schema={SCHEMA_VERSION - 1}" / f"trace={sha}"
    old.mkdir(parents=True)
    (old / "trace.json").write_text("{}")
    with store._connect() as db:
        db.execute(
            "INSERT INTO traces VALUES (?,?,?,?,?,?,?,?,?,?,0)",
            (sha, SCHEMA_VERSION - 1, "old", 1, None, None, 1, 1, 0, 0),
        )
    assert store.get(sha) is None
    trace, got = store.open_bytes(data, "naive.json.gz")
    assert got == sha and trace.events.height == len(oracle.complete(oracle.raw(SAMPLES / "naive.json.gz")))
    # a folder damaged on disk is parsed again, not misread
    (tmp_path / f"schema={SCHEMA_VERSION}" / f"trace={sha}" / "events.parquet").write_bytes(b"damaged")
    assert store.get(sha) is None
    assert store.open_bytes(data, "naive.json.gz")[0].events.height == trace.events.height


def test_the_size_cap_evicts_the_least_recently_opened_unpinned_traces(tmp_path):
    names = ["naive", "naive_inplace", "sdpa"]
    store = Store(tmp_path)
    shas = {name: store.open(SAMPLES / f"{name}.json.gz")[1] for name in names}
    sizes = {t.sha: t.stored_bytes for t in store.traces()}
    store.pin(shas["naive"])
    store.get(shas["naive_inplace"])  # opened after sdpa: sdpa is the least recently opened unpinned
    store.max_bytes = sum(sizes.values()) - 1
    assert store.evict() == [shas["sdpa"]]
    assert {t.sha for t in store.traces()} == {shas["naive"], shas["naive_inplace"]}
    store.max_bytes = 1
    assert store.evict() == [shas["naive_inplace"]]  # the pinned run stays whatever the cap
    assert [t.sha for t in store.traces()] == [shas["naive"]]


def test_a_reopened_trace_reads_each_table_only_when_asked_and_its_kept_answers_none(tmp_path):
    """Store.get reads the fields; a table is read from Parquet the first time it is asked for,
    and a trace whose analyses are kept (has_gpu from the kept category names) reads none."""
    from dashboard.engine.model.trace import ReopenedTrace, names_by_category

    path = oracle.DATA / "hta_triton_example.json.gz"
    doc = oracle.raw(path)
    store = Store(tmp_path)
    parsed, sha = store.open(path)
    names_by_category(parsed)  # kept under the store from now on
    again = Store(tmp_path).get(sha)
    assert isinstance(again, ReopenedTrace) and again.tables_read() == []
    assert again.source == parsed.source and again.meta == parsed.meta
    gpu = {"kernel", "gpu_memcpy", "gpu_memset"}
    assert again.has_gpu == any(cat in gpu for cat in oracle.category_counts(doc)) and again.tables_read() == []
    assert again.steps.height == (len(oracle.step_spans(doc)) or 1)  # one implicit step when none
    assert again.tables_read() == ["steps"]
    assert again.events.height == len(oracle.complete(doc)) and again.tables_read() == ["events", "steps"]
    assert again.events is again.events  # read once


def test_a_stored_table_damaged_inside_says_so_when_it_is_read(tmp_path):
    from dashboard.engine.model.errors import TraceError

    store = Store(tmp_path)
    _, sha = store.open(SAMPLES / "naive.json.gz")
    events = tmp_path / f"schema={SCHEMA_VERSION}" / f"trace={sha}" / "events.parquet"
    data = bytearray(events.read_bytes())
    data[8 : len(data) - 8] = b"\0" * (len(data) - 16)  # the magic kept, the body gone
    events.write_bytes(bytes(data))
    trace = store.get(sha)
    with pytest.raises(TraceError) as err:
        trace.events
    assert str(err.value).startswith("naive.json.gz: its stored copy in ") and "--no-store" in str(err.value)
    assert "\n" not in str(err.value)


def test_touch_marks_a_batch_opened_at_once(tmp_path):
    store = Store(tmp_path)
    shas = [store.open(SAMPLES / f"{name}.json.gz")[1] for name in ("naive", "naive_inplace", "sdpa")]
    before = {t.sha: t.last_opened for t in store.traces()}
    store.touch(shas[:2] + shas[:1])
    after = {t.sha: t.last_opened for t in store.traces()}
    assert after[shas[0]] == after[shas[1]] > before[shas[2]] == after[shas[2]]
    store.touch([])
    assert store.get(shas[2], touch=False) is not None
    assert {t.sha: t.last_opened for t in store.traces()}[shas[2]] == after[shas[2]]


def test_runs_and_saved_views_keep_labels_and_ids(tmp_path):
    store = Store(tmp_path)
    _, sha = store.open(SAMPLES / "naive.json.gz")
    run_id = store.add_run([(0, sha)], "naive, before", "cli")
    assert store.add_run([(0, sha)], "again", "upload") == run_id  # the same files make the same run
    store.set_label(run_id, "naive (out-of-place masked_fill)")
    reopened = Store(tmp_path).run(run_id)
    assert (reopened.label, reopened.added_by, reopened.ranks) == (
        "naive (out-of-place masked_fill)",
        "cli",
        ((0, sha),),
    )
    view = {"runs": [run_id], "labels": {run_id: "naive"}, "baseline": run_id, "tab": "Copies", "note": "PR 12"}
    view_id = store.save_view(view)
    assert len(view_id) == 10 and Store(tmp_path).view(view_id) == view
    assert store.save_view(dict(reversed(view.items()))) == view_id
    assert store.view("nope") is None
    with pytest.raises(ValueError):
        store.add_run([(0, sha)], "x", "somebody")


def _store_one(root: str) -> str:
    return Store(root).open(SAMPLES / "sdpa.json.gz")[1]


def test_two_processes_storing_the_same_trace_leave_one_entry(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        shas = pool.map(_store_one, [str(tmp_path)] * 4)
    assert len(set(shas)) == 1
    store = Store(tmp_path)
    assert [t.sha for t in store.traces()] == shas[:1]
    assert list((tmp_path / "tmp").iterdir()) == []
    assert store.get(shas[0]).events.height == len(oracle.complete(oracle.raw(SAMPLES / "sdpa.json.gz")))


def _open_fresh_stores(roots, barrier, results):
    for root in roots:
        barrier.wait()  # every process opens the same fresh store at the same moment
        try:
            Store(root)
            results.put("ok")
        except Exception as exc:  # noqa: BLE001 - the test reports what went wrong
            results.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_a_fresh_store_at_the_same_moment_all_succeed(tmp_path):
    # Before the catalog was created under retry and BEGIN IMMEDIATE, about one round in six
    # failed with "database is locked" (SQLite skips the busy handler on a lock-upgrade deadlock).
    ctx = multiprocessing.get_context("spawn")
    roots = [str(tmp_path / f"store{i}") for i in range(40)]
    barrier, results = ctx.Barrier(6), ctx.Queue()
    workers = [ctx.Process(target=_open_fresh_stores, args=(roots, barrier, results)) for _ in range(6)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=120) for _ in range(len(roots) * len(workers))]
    for worker in workers:
        worker.join(timeout=60)
    assert [o for o in outcomes if o != "ok"] == []


def test_an_unusable_store_folder_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(store_module.TraceError, match="trace store .*cannot open"):
        Store(blocker / "store")


def test_the_cap_comes_from_the_environment_and_storing_past_it_says_what_went(tmp_path, monkeypatch):
    monkeypatch.setenv(store_module.ENV_MAX_BYTES, "not-a-size")
    with pytest.raises(store_module.TraceError, match="ATTNSCOPE_STORE_MAX_BYTES='not-a-size' is not a whole number"):
        Store(tmp_path)
    monkeypatch.delenv(store_module.ENV_MAX_BYTES)
    assert Store(tmp_path).max_bytes is None
    first = Store(tmp_path)
    trace = load_trace(SAMPLES / "naive.json.gz")
    assert first.put(trace, sha256_of(SAMPLES / "naive.json.gz")) == []
    held = sum(  # its tables and its kept analyses (put keeps the device's: the catalog's row)
        f.stat().st_size
        for folder in (f"schema={SCHEMA_VERSION}", "analyses")
        for f in (tmp_path / folder).rglob("*")
        if f.is_file()
    )
    monkeypatch.setenv(store_module.ENV_MAX_BYTES, str(held))
    capped = Store(tmp_path)
    assert capped.max_bytes == held and capped.used_bytes() == held
    removed = capped.put(load_trace(SAMPLES / "sdpa.json.gz"), sha256_of(SAMPLES / "sdpa.json.gz"))
    assert [(t.sha, t.source) for t in removed] == [(sha256_of(SAMPLES / "naive.json.gz"), "naive.json.gz")]
    assert [t.source for t in capped.traces()] == ["sdpa.json.gz"]


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (5 << 20) + 12345])
def test_a_file_hashes_as_hashlib_hashes_its_bytes(tmp_path, size):
    """sha256_of reads a file through one reused buffer: around and across its size the digest is
    hashlib's of the whole bytes at once."""
    data = random.Random(size).randbytes(size)
    path = tmp_path / "bytes.bin"
    path.write_bytes(data)
    assert sha256_of(path) == hashlib.sha256(data).hexdigest() == sha256_of(data)


def test_a_files_hash_taken_beside_the_load_is_its_sha256(tmp_path):
    """hashing.Hashing (the store's hash of a file it parses, begun before the load): hashlib's
    digest of the file's bytes read whole, and a file that cannot be read raises its OSError."""
    import hashlib

    from dashboard.engine.store.hashing import Hashing

    path = tmp_path / "t.json"
    path.write_bytes(bytes(range(256)) * 5000)  # more than one chunk
    assert Hashing(path).result() == hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(OSError):
        Hashing(tmp_path / "gone.json").result()


def test_a_starved_hash_thread_leaves_the_rest_of_the_file_to_the_caller(tmp_path, monkeypatch):
    """On a busy machine the nice-19 thread may not run at all: result() hashes the file itself.
    And when both read, in chunks small enough that they take turns thousands of times, the digest
    is still the file's: each chunk is read and hashed in order under one lock."""
    import hashlib
    import threading

    from dashboard.engine.store import hashing

    path = tmp_path / "t.json"
    data = bytes(range(251)) * 400  # 100 KB
    path.write_bytes(data)
    release = threading.Event()
    started = threading.Event()

    def starved(*_args):  # the thread stops here until released: it never got a core
        started.set()
        release.wait(10)

    monkeypatch.setattr(hashing.os, "setpriority", starved)
    stalled = hashing.Hashing(path)
    assert started.wait(30)
    assert stalled.result() == hashlib.sha256(data).hexdigest()
    assert stalled._thread.is_alive()  # answered while the thread still waits for a core
    release.set()
    stalled._thread.join(30)
    assert not stalled._thread.is_alive() and stalled._fh is None

    monkeypatch.undo()
    monkeypatch.setattr(hashing, "_CHUNK", 7)
    for _ in range(3):
        assert hashing.Hashing(path).result() == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("background", [False, True])
def test_a_stored_trace_lets_go_of_its_flows_and_reads_them_back_when_asked(tmp_path, background):
    """No analysis reads the flows: once the trace is stored they are not held in memory, and
    asking for them reads the stored table, the same frame as a parse without the store."""
    path = oracle.DATA / "hta_v100_test.json.gz"
    doc = oracle.raw(path)
    flow_events = sum(1 for e in doc["traceEvents"] if e.get("ph") in ("s", "f", "t") and "ts" in e)
    assert flow_events > 1000  # (a trace with many flows, or this would prove nothing)
    store = Store(tmp_path)
    trace, _ = store.open(path, background=background)
    summary = _summary(trace)  # (in the background case, the writer runs meanwhile)
    assert store.wait() == []
    assert "flows" not in trace.__dict__ and "events" in trace.__dict__
    assert trace.flows.height == flow_events
    assert trace.flows.equals(load_trace(path).flows)
    assert _summary(trace) == summary


def test_a_trace_the_cap_removes_at_once_keeps_its_flows(tmp_path):
    path = oracle.DATA / "hta_v100_test.json.gz"
    store = Store(tmp_path, max_bytes=1)  # smaller than any trace: evicted as soon as it is written
    trace, sha = store.open(path)
    assert not store.has(sha)
    assert "flows" in trace.__dict__ and trace.flows.height > 1000
