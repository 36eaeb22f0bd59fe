"""The slice workers a command starts before its imports (model.slice_workers.prestart, called by
the CLI's _load_all): a file the workers will read gets them early and the loader reads it with
those very processes, to the same tables as the one-process path; a .json.gz, a file under the
threshold or one the store answers for starts none; workers that no load took are closed."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

import dashboard.engine.load as load
from dashboard.cli.files import _load_all
from dashboard.engine.load import slices as load_slices, workers as load_workers
from dashboard.engine.model import slice_workers
from dashboard.engine.store.store import Store

DATA = Path(__file__).parent / "data"
pytestmark = pytest.mark.skipif(slice_workers.count() < 2, reason="the slices are read on two cores or more")


@pytest.fixture
def plain(tmp_path) -> Path:
    path = tmp_path / "hta_a100_control.json"
    with gzip.open(DATA / "hta_a100_control.json.gz") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


@pytest.fixture
def spawned(monkeypatch):
    """Every worker process started, in order; the workers are closed before and after."""
    load_workers._discard_workers()
    started = []
    real = slice_workers.spawn

    def spy(workers, frames=True):
        procs = real(workers, frames=frames)
        for proc in procs:
            proc.frames = frames  # whether it imported polars as it started
        started.extend(procs)
        return procs

    monkeypatch.setattr(slice_workers, "spawn", spy)
    monkeypatch.setattr(slice_workers, "SLICED_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 4 << 20)
    yield started
    slice_workers.discard()
    load_workers._discard_workers()


def test_the_workers_started_before_the_imports_read_the_file(plain, spawned, monkeypatch):
    taken = []
    real_take = slice_workers.take
    monkeypatch.setattr(slice_workers, "take", lambda n: taken.append(real_take(n)) or taken[-1])
    (trace,), errors = _load_all([str(plain)], None)
    assert errors == [] and len(spawned) == slice_workers.count()  # started once, by prestart
    assert taken == [spawned]  # the loader's workers are those very processes
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    alone = load.load_trace(plain)
    assert_frame_equal(trace.events, alone.events)
    assert trace.warnings == alone.warnings and trace.meta == alone.meta


@pytest.mark.parametrize("answered_plain", [False, True])
def test_the_workers_of_a_file_answered_plain_start_without_polars(answered_plain, plain, spawned, monkeypatch):
    """A file with PLAIN_FROM_BYTES of events or more gets workers that do not import polars as they
    start (its slices come back as the scanner's bytes); a smaller one, workers that do."""
    if answered_plain:
        monkeypatch.setattr(slice_workers, "PLAIN_FROM_BYTES", 1 << 20)
    (trace,), errors = _load_all([str(plain)], None)
    assert errors == [] and [proc.frames for proc in spawned] == [not answered_plain] * slice_workers.count()
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    alone = load.load_trace(plain)
    assert_frame_equal(trace.events, alone.events)
    assert_frame_equal(trace.flows, alone.flows)
    assert trace.warnings == alone.warnings and trace.meta == alone.meta


def test_a_gzip_file_a_small_one_and_a_missing_one_start_none(tmp_path, plain, spawned, monkeypatch):
    gz = tmp_path / "copy.json.gz"
    with open(plain, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert gz.stat().st_size >= 1 << 20
    assert not slice_workers.prestart(gz)
    assert not slice_workers.prestart(tmp_path / "missing.json")
    monkeypatch.setattr(slice_workers, "SLICED_MIN_BYTES", 1 << 62)
    assert not slice_workers.prestart(plain)
    assert spawned == []


def test_a_file_the_store_answers_for_starts_none(tmp_path, plain, spawned):
    store = Store(tmp_path / "store")
    _load_all([str(plain)], store)
    store.wait()
    first = len(spawned)
    (again,), errors = _load_all([str(plain)], store)
    assert errors == [] and len(spawned) == first  # reopened from the store: no worker started


def test_workers_no_load_took_are_closed(plain, spawned, monkeypatch):
    monkeypatch.setattr(load_slices, "_head", lambda *args: None)  # the file takes the one-process path
    (trace,), errors = _load_all([str(plain)], None)
    assert errors == [] and len(spawned) == slice_workers.count()
    assert all(proc.poll() is not None for proc in spawned)  # closed by _load_all, exited
