"""The server's start opens the first screen's runs (dashboard/prepare.py): the page's first run then
parses nothing and draws what it drew without it; too much to open quietly is left to the page.

The oracle for "what the first screen shows" is the page itself: a first run on its own store,
with no start before it (its selection and its Overview table)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import catalog, prepare
from dashboard.engine.store.store import Store
from dashboard.runs import ENV_TRACES, trace_cache

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
SAMPLES = ROOT / "sample_traces"


@pytest.fixture()
def fresh(tmp_path, monkeypatch):
    """A process with no cache yet and an empty store; what a start made is forgotten after."""
    monkeypatch.setenv("ATTNSCOPE_STORE", str(tmp_path / "store"))
    monkeypatch.delenv(ENV_TRACES, raising=False)
    monkeypatch.setattr(prepare, "_STARTED", {})
    trace_cache.clear()
    yield tmp_path
    trace_cache.clear()


def first_page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def overview(at: AppTest):
    return at.get_by_key("tbl_overview").dataframe[0].value


def test_the_first_page_finds_its_runs_opened_and_draws_what_it_drew_without(fresh, monkeypatch):
    unprepared = first_page()
    parsed_by_the_page = trace_cache().parses
    chosen = list(unprepared.session_state["sel_runs"])
    assert parsed_by_the_page >= len(chosen) > 1  # the page parsed them itself

    monkeypatch.setenv("ATTNSCOPE_STORE", str(fresh / "another-store"))  # a new server on an empty store
    trace_cache.clear()
    thread = prepare.start()
    thread.join(120)
    assert not thread.is_alive()
    cache = prepare._STARTED["cache"]
    assert cache.parses == parsed_by_the_page  # the start parsed what the page would have
    prepared = first_page()
    assert trace_cache() is cache
    assert cache.parses == parsed_by_the_page  # and the page parsed nothing more
    assert list(prepared.session_state["sel_runs"]) == chosen
    assert overview(prepared).equals(overview(unprepared))
    stored = Store(fresh / "another-store").traces()
    assert len(stored) == parsed_by_the_page  # written to the store as the page writes them


def test_the_start_returns_the_page_selection_and_keeps_each_runs_analyses(fresh):
    cache = catalog.server_cache()
    opened = prepare.first_screen(cache)
    kept = {}  # each opened run's kept analyses, looked at before the page runs (which keeps its own)
    for ident in opened:
        sha = hashlib.sha256((SAMPLES / f"{ident}.json.gz").read_bytes()).hexdigest()
        kept[ident] = {p.name for p in (fresh / "store" / "analyses" / f"trace={sha}").rglob("*.arrow")}
    assert opened == list(first_page().session_state["sel_runs"])
    for ident, names in kept.items():  # the Overview's analyses of each run, kept for the next start
        assert "dashboard.engine.analyses.copies.copies.arrow" in names, (ident, sorted(names))
        assert any(".kernels." in name for name in names), (ident, sorted(names))


def test_files_too_large_to_open_quietly_are_left_to_the_page_and_its_progress_bar(fresh, monkeypatch):
    monkeypatch.setattr(prepare, "MAX_BYTES", 1000)  # below any bundled collection's chosen runs
    cache = catalog.server_cache()
    assert prepare.first_screen(cache) == []
    assert cache.parses == 0 and cache.traces == {}


def test_a_failing_start_leaves_the_page_to_open_everything_itself(fresh, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise OSError("the disk went away")

    with monkeypatch.context() as m:
        m.setattr(catalog, "discover", broken)
        thread = prepare.start()
        thread.join(60)
    assert "opening the first screen's runs" in caplog.text and "the disk went away" in caplog.text
    at = first_page()  # the page discovers as usual, into the start's cache
    assert trace_cache() is prepare._STARTED["cache"]
    assert len(overview(at)) == len(at.session_state["sel_runs"]) > 1


def test_a_given_file_is_opened_at_the_start_too(fresh, monkeypatch):
    trace = fresh / "mine.json"
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(5)
    ]
    trace.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setenv(ENV_TRACES, str(trace))
    cache = catalog.server_cache()
    prepare.first_screen(cache)
    digest = catalog.digest_of(trace.read_bytes())
    assert cache.get(digest) is not None  # a loose file is parsed to be offered, here as on the page


def test_the_server_opens_the_first_screen_before_any_browser_asks(tmp_path):
    """The real `streamlit run`: with no browser connected, the bundled H200 collection's eager runs
    (the first screen's: no compiled or CUDA-graph run, read from its runs.json) reach the store."""
    from browser_server import Server

    manifest = json.loads((SAMPLES / "h200" / "runs.json").read_text())
    eager = [r["trace"] for r in manifest["runs"] if not r.get("compiled") and not r.get("cuda_graphs")]
    wanted = {hashlib.sha256((SAMPLES / "h200" / name).read_bytes()).hexdigest() for name in eager}
    assert len(wanted) == 7
    store = tmp_path / "store"
    with Server(store, tmp_path / "log") as server:
        deadline, stored = time.monotonic() + 90, set()
        while time.monotonic() < deadline and not wanted <= stored:
            stored = {t.sha for t in Store(store).traces()} if (store / "catalog.sqlite3").exists() else set()
            time.sleep(0.05)  # (between looks at the store: the server writes it)
        log = server.log()
    assert wanted <= stored, f"{len(wanted - stored)} of the 7 not stored; the server said: {log[-2000:]}"
