"""Analyses computed ahead of the tabs (dashboard/prepare.py's Ahead) and the engine's lock that
lets a page wait for one the thread is computing instead of computing it twice.

Oracles: a counter of how often an analysis's body ran; the same analyses computed on a second,
independently loaded trace; the thread's own record of whether a page was running when it worked."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dashboard import prepare
from dashboard.engine import load_trace
from dashboard.engine.analyses.summary import summarize
from dashboard.engine.model import trace as model

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
NAIVE = SAMPLES / "h200" / "naive.json.gz"


@pytest.fixture()
def probe(monkeypatch):
    """An analysis whose body counts its runs and waits for `release` (kept out of the registry after)."""
    runs: list[int] = []
    started, release = threading.Event(), threading.Event()

    def body(trace):
        runs.append(1)
        started.set()
        assert release.wait(30)
        return {"events": trace.events.height}

    key = "tests.test_ahead.probe"
    cached = model._cached(key, body)
    yield cached, runs, started, release
    release.set()  # (a thread a failed test left waiting)
    model.ANALYSES.pop(key, None)


def test_a_second_thread_waits_for_the_answer_being_computed_instead_of_computing_it_again(probe):
    cached, runs, started, release = probe
    trace = load_trace(NAIVE)
    answers: list = []
    first = threading.Thread(target=lambda: answers.append(cached(trace)))
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=lambda: answers.append(cached(trace)))
    second.start()
    release.set()
    first.join(30)
    second.join(30)
    assert len(runs) == 1  # the body ran once
    assert len(answers) == 2 and answers[0] is answers[1]
    assert answers[0] == {"events": load_trace(NAIVE).events.height}


def test_the_lock_is_per_trace_and_analysis(probe):
    cached, runs, started, release = probe
    one, other = load_trace(NAIVE), load_trace(SAMPLES / "h200" / "sdpa.json.gz")
    blocked = threading.Thread(target=cached, args=(one,))
    blocked.start()
    assert started.wait(30)
    assert "warnings" in summarize(one)  # another analysis of the same trace is not held by it
    done = threading.Event()
    threading.Thread(target=lambda: (cached(other), done.set())).start()  # the same analysis of another trace
    release.set()
    assert done.wait(30)
    blocked.join(30)
    assert len(runs) == 2


def ahead(monkeypatch, quiet_s: float = 0.05) -> prepare.Ahead:
    monkeypatch.setattr(prepare, "QUIET_S", quiet_s)
    made = prepare.Ahead()
    made.enable()
    return made


def finished(made: prepare.Ahead) -> None:
    thread = made.thread
    assert thread is not None
    thread.join(60)
    assert not thread.is_alive()


def test_every_analysis_of_the_drawn_runs_is_computed_ahead_as_the_tab_would(monkeypatch):
    made = ahead(monkeypatch)
    traces = [load_trace(SAMPLES / "h200" / f"{name}.json.gz") for name in ("naive", "sdpa", "sdpa-math")]
    made.add(traces)
    finished(made)
    for trace in traces:
        assert set(model.ANALYSES) <= set(trace._analyses)
        fresh = load_trace(SAMPLES / "h200" / Path(trace.source).name)
        assert trace._analyses[f"{summarize.__module__}.summarize"] == summarize(fresh)  # what the page computes itself


def test_nothing_is_computed_while_a_page_runs_nor_until_the_server_has_been_quiet(monkeypatch):
    made = ahead(monkeypatch, quiet_s=0.2)
    seen: list[tuple[int, float, float]] = []

    def record(trace):
        seen.append((made.running, time.monotonic(), made.quiet_since))

    monkeypatch.setattr(prepare, "ANALYSES", {"record": record, "again": record})
    trace = load_trace(NAIVE)
    with made.page_run():
        made.add([trace])
        thread = made.thread
        assert thread is not None and thread.is_alive()
        assert seen == []  # (held below until the page's run ends)
    finished(made)
    assert len(seen) == 2
    for running, at, quiet_since in seen:
        assert running == 0 and at >= quiet_since + 0.2


def test_what_is_done_large_or_off_is_not_queued(monkeypatch):
    trace = load_trace(NAIVE)
    off = prepare.Ahead()
    off.add([trace])  # not enabled: AppTest's pages and the tests compute nothing behind their back
    assert off.todo == [] and off.thread is None
    made = ahead(monkeypatch)
    monkeypatch.setattr(prepare, "AHEAD_MAX_BYTES", trace.size_bytes - 1)
    made.add([trace])
    assert made.todo == [] and made.thread is None
    monkeypatch.setattr(prepare, "AHEAD_MAX_BYTES", trace.size_bytes)
    made.add([trace, trace])
    finished(made)
    made.add([trace])  # all tried: not again
    assert made.todo == []


def test_an_analysis_that_fails_ahead_is_left_to_the_tab_that_asks(monkeypatch):
    made = ahead(monkeypatch)

    def broken(trace):
        raise ValueError("no such column")

    calls: list[str] = []
    monkeypatch.setattr(prepare, "ANALYSES", {"broken": broken, "fine": lambda trace: calls.append(trace.source)})
    trace = load_trace(NAIVE)
    made.add([trace])
    finished(made)
    assert calls == [trace.source]  # the one after the failure still ran
    made.add([trace])
    assert made.todo == []  # tried once, not again on every page


def test_two_threads_computing_every_analysis_in_opposite_orders_agree_with_one_thread():
    """No two threads wait on each other (a lock per trace and analysis, taken in the order of the
    analyses' dependencies), and what they compute together is what one thread computes alone."""
    import dashboard.app  # noqa: F401  (every analysis the dashboard's tabs register)

    for name in ("naive", "sdpa-math", "naive.graphs"):
        shared, alone = (
            load_trace(SAMPLES / "h200" / f"{name}.json.gz"),
            load_trace(SAMPLES / "h200" / f"{name}.json.gz"),
        )
        keys = list(model.ANALYSES)
        failed: list[str] = []

        def every(order: list[str], trace=shared) -> None:
            for key in order:
                try:
                    model.ANALYSES[key](trace)
                except Exception as exc:  # noqa: BLE001 - collected: the assertion names it
                    failed.append(f"{key}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=every, args=(order,)) for order in (keys, keys[::-1])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(thread.is_alive() for thread in threads), f"{name}: the threads wait on each other"
        assert failed == [], failed[:3]
        for key in keys:
            mine, theirs = shared._analyses[key], model.ANALYSES[key](alone)
            if hasattr(mine, "equals"):  # a table
                assert mine.equals(theirs), (name, key)
            elif isinstance(
                mine, (dict, list, tuple, str, int, float, bool, type(None))
            ):  # what kept.py writes as JSON
                assert repr(mine) == repr(theirs), (name, key)
            else:  # an object of the engine's own (an op tree): of the same kind
                assert type(mine) is type(theirs), (name, key)
