"""The dashboard's run picker (dashboard.catalog), with no streamlit: discovery,
parsing once by content hash, the trace store behind the cache, the upload limit, and a process
that uses it all without ever importing streamlit."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import oracle
from dashboard import catalog
from dashboard.catalog import TraceCache, discover, file_digest, file_source, open_all, pending_file, server_cache
from dashboard.engine.store.store import Store

REPO = Path(__file__).resolve().parent.parent
H100 = oracle.DATA / "tracelens_h100_bert_sdpa_flash.json.gz"
TRITON = oracle.DATA / "hta_triton_example.json.gz"


def test_a_process_discovers_opens_and_stores_runs_without_importing_streamlit(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(TRITON, folder / "a.json.gz")
    (folder / "runs.json").write_text(
        json.dumps({"collection": "mine", "runs": [{"variant": "tiny", "trace": "a.json.gz"}]})
    )
    script = f"""
import json, sys
from pathlib import Path
from dashboard import catalog
from dashboard.engine.store.store import Store
cache = catalog.TraceCache(store=Store({str(tmp_path / "store")!r}))
collections, loose, failures = catalog.discover(root=Path({str(tmp_path / "none")!r}), extra=[Path({str(folder)!r}), Path({str(H100)!r})])
pending = [catalog.pending_file(s, cache) for c in collections for s in c.sources] + [catalog.pending_file(s, cache) for s in loose]
runs, bad = catalog.open_all(pending, cache=cache)
print(json.dumps({{"runs": [[r.source.id, r.label, r.trace.events.height] for r in runs], "bad": [f.message for f in bad + failures],
                  "streamlit": any(m == "streamlit" or m.startswith("streamlit.") for m in sys.modules)}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["streamlit"] is False
    assert out["bad"] == []
    assert out["runs"] == [
        ["mine/a", "tiny", len(oracle.complete(oracle.raw(TRITON)))],
        ["file/" + H100.name, "tracelens_h100_bert_sdpa_flash", len(oracle.complete(oracle.raw(H100)))],
    ]
    assert {t.source for t in Store(tmp_path / "store").traces()} == {"a.json.gz", H100.name}


def test_a_file_is_hashed_once_per_version_and_parsed_once_per_content(tmp_path):
    path = tmp_path / "run.json.gz"
    shutil.copy(TRITON, path)
    cache = TraceCache()
    digest, data = file_digest(cache, path)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest() and data == path.read_bytes()
    assert file_digest(cache, path) == (digest, None)  # same path, size and mtime: not read again
    copy = tmp_path / "same.json.gz"
    shutil.copy(TRITON, copy)
    runs, _ = open_all([pending_file(file_source(p), cache) for p in (path, copy)], cache=cache)
    assert cache.parses == 1 and runs[0].trace is runs[1].trace  # the same bytes under two names
    shutil.copy(H100, path)
    os.utime(path, ns=(1, 1))
    assert file_digest(cache, path)[0] == hashlib.sha256(H100.read_bytes()).hexdigest()


def test_a_restarted_dashboard_knows_a_files_hash_from_the_store_without_reading_it(tmp_path, monkeypatch):
    path = tmp_path / "run.json.gz"
    shutil.copy(TRITON, path)
    first = TraceCache(store=Store(tmp_path / "store"))
    digest, data = file_digest(first, path)
    assert data == path.read_bytes() and digest == hashlib.sha256(data).hexdigest()
    later = TraceCache(store=Store(tmp_path / "store"))  # another process: nothing in memory

    def refuse(self):
        raise AssertionError("read again only to hash it")

    monkeypatch.setattr(Path, "read_bytes", refuse)
    assert file_digest(later, path) == (digest, None)
    monkeypatch.undo()
    shutil.copy(H100, path)  # changed: its size and mtime tell, and it is hashed again
    os.utime(path, ns=(2, 2))
    assert file_digest(later, path)[0] == hashlib.sha256(H100.read_bytes()).hexdigest()


def test_many_files_are_hashed_with_one_catalog_write_and_known_after_a_restart(tmp_path, monkeypatch):
    files = [tmp_path / "a.json.gz", tmp_path / "b.json.gz", tmp_path / "c.json.gz"]
    for path, original in zip(files, (TRITON, H100, TRITON)):
        shutil.copy(original, path)
    sources = [file_source(p) for p in files] + [file_source(tmp_path / "gone.json.gz")]
    writes: list[int] = []
    remember = Store.remember_files
    monkeypatch.setattr(Store, "remember_files", lambda self, rows: (writes.append(len(rows)), remember(self, rows)))
    first = TraceCache(store=Store(tmp_path / "store"))
    got = catalog.pending_files(sources, first)
    assert writes == [3]  # one transaction for the three new files, not one commit per file
    *ok, gone = got
    assert [p.digest for p in ok] == [hashlib.sha256(p.read_bytes()).hexdigest() for p in files]
    assert [p.size for p in ok] == [os.stat(p).st_size for p in files]
    assert [p.read() for p in ok] == [p.read_bytes() for p in files]
    assert isinstance(gone, catalog.Failure) and gone.message.startswith("gone.json.gz: ")
    later = TraceCache(store=Store(tmp_path / "store"))  # a restart: nothing in memory

    def refuse(self):
        raise AssertionError("read again only to hash it")

    monkeypatch.setattr(Path, "read_bytes", refuse)
    again = catalog.pending_files(sources[:3], later)
    assert [p.digest for p in again] == [p.digest for p in ok] and writes == [3]  # known: nothing written
    monkeypatch.undo()
    assert [p.digest for p in catalog.pending_files(sources[:3], TraceCache())] == [p.digest for p in ok]  # no store


def test_the_cache_keeps_the_most_recently_used_traces_and_the_store_reopens_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_STORE", str(tmp_path / "store"))
    monkeypatch.delenv(catalog.ENV_NO_STORE, raising=False)
    monkeypatch.setattr(catalog, "MAX_CACHED_TRACES", 0)  # room for what one call needs, nothing more
    first = server_cache()
    first.capacity = 1
    pending = [pending_file(file_source(p), first) for p in (TRITON, H100)]
    runs = [open_all([item], cache=first)[0][0] for item in pending]
    assert first.parses == 2 and list(first.traces) == [runs[1].digest]  # one held in memory
    again, _ = open_all(pending[:1], cache=first)
    assert first.parses == 2  # the other came back from the store, not from parsing
    assert again[0].trace.events.equals(runs[0].trace.events)
    restarted = server_cache()  # a new server process: nothing in memory
    reopened, _ = open_all([pending_file(file_source(p), restarted) for p in (TRITON, H100)], cache=restarted)
    assert restarted.parses == 0 and [r.label for r in reopened] == [r.label for r in runs]


def test_a_deferred_store_write_waits_for_store_parsed_and_reports_what_the_cap_removed(tmp_path):
    """The dashboard draws the tabs while the store writes: open_all(defer_store=...) hands the parsed
    traces back instead of writing them, and store_parsed writes them (and what the cap removed)."""
    scratch = Store(tmp_path / "scratch")
    scratch.open(H100)
    second_bytes = scratch.used_bytes()  # its tables and the analyses the store keeps with them
    cache = TraceCache(store=Store(tmp_path / "store", max_bytes=second_bytes))  # room for the second trace alone
    first, _ = open_all([pending_file(file_source(TRITON), cache)], cache=cache)
    assert [t.sha for t in cache.store.traces()] == [first[0].digest]
    deferred: list[catalog.Parsed] = []
    evicted: list = []
    runs, _ = open_all([pending_file(file_source(H100), cache)], cache=cache, evicted=evicted, defer_store=deferred)
    assert [p.digest for p in deferred] == [runs[0].digest] and deferred[0].trace.events.equals(runs[0].trace.events)
    assert [t.sha for t in cache.store.traces()] == [first[0].digest] and evicted == []  # nothing written yet
    catalog.store_parsed(cache, deferred, evicted)
    assert [t.sha for t in cache.store.traces()] == [runs[0].digest]
    assert [t.sha for t in evicted] == [first[0].digest]


def test_a_deferred_trace_can_be_written_in_a_thread_while_the_app_reads_its_own(tmp_path):
    """The store's thread gets a trace of its own polars objects: polars 1.20 (the lower bound) failed
    a read of a frame another thread was writing out ("Already mutably borrowed"), which broke the app."""
    import threading

    cache = TraceCache(store=Store(tmp_path / "store"))
    deferred: list[catalog.Parsed] = []
    runs, _ = open_all([pending_file(file_source(H100), cache)], cache=cache, defer_store=deferred)
    mine, theirs = runs[0].trace, deferred[0].trace
    flows = mine.flows
    for table in ("events", "flows", "steps"):
        assert getattr(theirs, table) is not getattr(mine, table) and getattr(theirs, table).equals(
            getattr(mine, table)
        )
    assert theirs._analyses is not mine._analyses and (theirs.meta, theirs.warnings) == (mine.meta, mine.warnings)
    writer = threading.Thread(target=catalog.store_parsed, args=(cache, deferred))
    writer.start()
    reads = 0
    while writer.is_alive() or reads == 0:
        assert mine.events["cat"].len() == mine.events.height  # raised RuntimeError mid-write before
        reads += 1
    writer.join()
    assert cache.store_problem is None and [t.sha for t in cache.store.traces()] == [runs[0].digest]
    # once stored, the trace the tabs read lets go of its flows (no analysis reads them) and reads
    # them back from the store if asked
    assert "flows" not in mine.__dict__ and flows.height and mine.flows.equals(flows)


def test_a_server_cache_says_why_it_has_no_store(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_STORE", str(tmp_path / "store"))
    assert server_cache({catalog.ENV_NO_STORE: "1"}).store is None
    monkeypatch.setenv("ATTNSCOPE_STORE_MAX_BYTES", "ten")
    broken = server_cache({})
    assert broken.store is None and broken.store_problem.startswith("ATTNSCOPE_STORE_MAX_BYTES='ten'")


def test_the_upload_limit_and_a_refused_upload_need_no_server():
    assert catalog.upload_limit(1 << 20, {}) == (1 << 20, None)
    assert catalog.upload_limit(1 << 20, {catalog.ENV_MAX_UPLOAD: " 2048 "}) == (2048, None)
    limit, problem = catalog.upload_limit(1 << 20, {catalog.ENV_MAX_UPLOAD: "-5"})
    assert limit == 1 << 20 and problem.startswith("ATTNSCOPE_MAX_UPLOAD_BYTES='-5' is not a whole number")
    assert catalog.refused_upload("ok.json", 2048, 2048) is None
    refused = catalog.refused_upload("big.json", 2049, 2048)
    assert refused.source.name == "big.json"
    assert (
        refused.message == "big.json: 2.0 kB (2,049 bytes) is over the upload limit of 2.0 kB (2,048 bytes); not read"
    )


@pytest.mark.parametrize("bad", ["../x.json.gz", "/etc/hostname"])
def test_outside_names_entries_that_leave_the_folder(tmp_path, bad):
    assert catalog.outside(tmp_path, tmp_path / bad, bad) == "outside its folder (an absolute path or '..')"
    assert catalog.outside(tmp_path, tmp_path / "sub" / "a.json.gz", "sub/a.json.gz") is None


def test_discovery_needs_no_bundled_folder(tmp_path):
    collections, loose, failures = discover(root=tmp_path / "none", extra=[])
    assert (collections, loose, failures) == ([], [], [])


def test_one_call_s_runs_all_stay_in_memory_when_they_outnumber_the_cache(tmp_path, monkeypatch):
    """The bundled runs (35) outnumbered the cache's 32 places: every rerun of the app missed on
    every run and reread each from the store. A cache holds at least what one call needs."""
    collections, loose, _ = catalog.discover(extra=[])
    sources = [s for c in collections for s in c.sources] + loose
    cache = TraceCache(capacity=8, store=Store(tmp_path / "store"))
    pending = [pending_file(s, cache) for s in sources]
    assert len({p.digest for p in pending}) > 8
    first, bad = open_all(pending, cache=cache)
    assert not bad and cache.parses == len({p.digest for p in pending})
    reads = []
    real = catalog.from_store
    monkeypatch.setattr(catalog, "from_store", lambda c, d: reads.append(d) or real(c, d))
    again, _ = open_all([pending_file(s, cache) for s in sources], cache=cache)
    assert reads == [] and cache.parses == len({p.digest for p in pending})
    assert len(again) == len(first) and all(a.trace is b.trace for a, b in zip(again, first))  # the same objects, kept
