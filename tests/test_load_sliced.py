"""Large plain-JSON traces are read in slices by worker processes: the tables, the metadata and
every warning must be what the one-process path gives for the same bytes."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import dashboard.engine.load as load
from dashboard.engine.load import (
    arrival as load_arrival,
    frames as load_frames,
    inflate as load_inflate,
    reading as load_reading,
    slices as load_slices,
    workers as load_workers,
)
from dashboard.engine.analyses.summary import summarize
from dashboard.engine.model import slice_workers

DATA = Path(__file__).parent / "data"


def _both(path: Path, monkeypatch: pytest.MonkeyPatch, slice_bytes: int = 200_000):
    """(sliced, one-process) loads of one file; asserts the sliced path was taken."""
    taken = []
    real = load_frames._build_trace

    def spy(parts, meta, reading):
        taken.append(reading.label)
        return real(parts, meta, reading)

    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", slice_bytes)
    sliced_ok = load_slices._load_sliced(path, None, None, keep_workers=True)  # kept for the next test's file
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    serial = load.load_trace(path)
    return sliced_ok, serial


def _assert_same(a, b) -> None:
    assert_frame_equal(a.events, b.events)
    assert_frame_equal(a.flows, b.flows)
    assert_frame_equal(a.steps, b.steps)
    assert a.meta == b.meta and list(a.meta) == list(b.meta)
    assert a.warnings == b.warnings
    assert a.raw_categories == b.raw_categories
    assert a.size_bytes == b.size_bytes
    assert json.dumps(summarize(a), sort_keys=True) == json.dumps(summarize(b), sort_keys=True)


@pytest.mark.parametrize(
    "name",
    ["hta_a100_control.json.gz", "hta_v100_ns_resolution.pt.trace.json.gz", "tracelens_h100_bert_sdpa_flash.json.gz"],
)
@pytest.mark.parametrize("plain", [False, True], ids=["frames", "plain"])
def test_a_real_trace_read_in_slices_gives_the_same_trace(name, plain, tmp_path, monkeypatch):
    """Frames made in the workers (a file under 512 MB of events) or in the loading process from
    the scanner's plain columns (one above it)."""
    if plain:
        monkeypatch.setattr(slice_workers, "PLAIN_FROM_BYTES", 0)
    path = tmp_path / name.removesuffix(".gz")
    path.write_bytes(gzip.decompress((DATA / name).read_bytes()))  # metadata before and after traceEvents
    sliced, serial = _both(path, monkeypatch, slice_bytes=1 << 20)
    assert sliced is not None, "the sliced path was not taken"
    _assert_same(sliced, serial)


@pytest.mark.parametrize("large", [False, True])
def test_a_file_with_512_mb_of_events_is_cut_into_slices_twice_as_large(large, tmp_path, monkeypatch):
    """From LARGE_SLICES_FROM_BYTES of traceEvents the slices are twice SLICE_BYTES (half the
    per-slice costs on a 1 GB trace), and the trace read is the same; the bound itself, by hand."""
    assert load_slices._slice_bytes((512 << 20) - 1) == 8 << 20
    assert load_slices._slice_bytes(512 << 20) == 16 << 20
    path = tmp_path / "a100.json"
    path.write_bytes(gzip.decompress((DATA / "hta_a100_control.json.gz").read_bytes()))
    asked, real = [], load_slices._slices
    monkeypatch.setattr(load_slices, "_slices", lambda fh, lo, hi, size: asked.append(size) or real(fh, lo, hi, size))
    monkeypatch.setattr(load_slices, "LARGE_SLICES_FROM_BYTES", 0 if large else 1 << 62)
    sliced, serial = _both(path, monkeypatch, slice_bytes=1 << 20)
    assert asked == [(2 << 20) if large else (1 << 20)]
    assert sliced is not None, "the sliced path was not taken"
    _assert_same(sliced, serial)


def _write(path: Path, events: list, before: str = '{"schemaVersion": 1, ', after: str = "}") -> Path:
    path.write_bytes(
        (before + '"traceEvents": [\n' + ",\n".join(events) + "\n]" + after).encode("utf-8", "surrogateescape")
    )
    return path


def _events(n: int) -> list[str]:
    out = [
        '{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1623143089861000.5, "dur": 9000000}'
    ]
    for i in range(n):
        ts = f"{1623143089861100 + i}.{i % 1000:03d}"
        out.append(
            f'{{"ph": "X", "cat": "cpu_op", "name": "aten::op{i % 7}", "pid": 1, "tid": 1, "ts": {ts}, "dur": 1.5}}'
        )
        out.append(
            f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": {ts}, "dur": 0.5, '
            f'"args": {{"correlation": {i + 1}, "External id": {i}}}}}'
        )
        out.append(
            f'{{"ph": "X", "cat": "kernel", "name": "k{i % 5}", "pid": 0, "tid": 7, "ts": {ts}, "dur": 2.25, '
            f'"args": {{"correlation": {i + 1}, "stream": 7, "device": 0}}}}'
        )
        out.append(f'{{"ph": "s", "id": {i + 1}, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": {ts}}}')
    return out


@pytest.mark.parametrize("plain", [False, True], ids=["frames", "plain"])
def test_odd_events_unreadable_bytes_and_metadata_after_the_events_warn_as_in_one_process(plain, tmp_path, monkeypatch):
    if plain:
        monkeypatch.setattr(slice_workers, "PLAIN_FROM_BYTES", 0)
    events = _events(3000)
    events[100] = '{"ph": "X", "cat": "cpu_op", "name": "bad", "pid": [1], "tid": 1, "ts": 1623143089861200, "dur": 1}'
    events[2000] = '{"ph": "X", "cat": "cuda_sync", "name": "sync\udcff", "pid": 1, "tid": 1, "ts": "oops", "dur": -3}'
    events[9000] = events[100].replace("bad", "bad2")
    events[5000] = (
        '{"ph": "X", "cat": "cpu_op", "name": "neg", "pid": "Spans", "tid": "t 1", "ts": 1623143089861300, "dur": -3}'
    )
    path = _write(
        tmp_path / "odd.json",
        events,
        after=', "traceName": "x", "deviceProperties": [{"id": 0, "name": "NVIDIA A100"}]}',
    )
    sliced, serial = _both(path, monkeypatch)
    assert sliced is not None
    _assert_same(sliced, serial)
    assert any("could not be read" in w for w in sliced.warnings)
    assert any("U+FFFD" in w for w in sliced.warnings)
    assert any("negative duration" in w for w in sliced.warnings)


def test_an_odd_value_that_is_not_utf8_is_read_by_msgspec_in_the_loading_process(tmp_path, monkeypatch):
    """The scanner reads the slice (its texts are UTF-8) but leaves a quoted correlation holding a
    byte that is not UTF-8 to Python: the loading process reads that slice through msgspec itself,
    which repairs the byte and says so, as one process does."""
    events = _events(3000)
    at = next(i for i, e in enumerate(events) if '"correlation": 500, "stream"' in e)  # a kernel's
    events[at] = events[at].replace('"correlation": 500', '"correlation": "5\udcff0"')
    path = _write(tmp_path / "odd_utf8.json", events)
    monkeypatch.setattr(slice_workers, "PLAIN_FROM_BYTES", 0)  # answered plain, as a 1 GB file's slices
    here = []
    real = load_slices.decoded_slice
    monkeypatch.setattr(load_slices, "decoded_slice", lambda raw, label: here.append(label) or real(raw, label))
    sliced, serial = _both(path, monkeypatch)
    assert sliced is not None and here == ["odd_utf8.json"]  # one slice, read here
    _assert_same(sliced, serial)
    assert any("U+FFFD" in w for w in sliced.warnings)


def _worker_answers(tasks: list[tuple[str, int, int, str, bool]]) -> tuple[list, bool]:
    """A worker process's answers to `tasks`, and whether it had imported polars when its stdin closed."""
    import pickle
    import subprocess
    import sys

    root = str(Path(load_slices.__file__).resolve().parents[3])
    code = (
        f"import sys; sys.path.insert(0, {root!r}); from dashboard.engine.model.slice_workers import serve; "
        "serve('dashboard.engine.load.slices', frames=False); print('polars' in sys.modules, file=sys.stderr)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    for task in tasks:
        slice_workers.send(proc.stdin, pickle.dumps(task))
    proc.stdin.close()
    answers = []
    while (answer := slice_workers.receive_answer(proc.stdout)) is not None:
        answers.append(answer)
    err = proc.stderr.read().decode()
    assert proc.wait() == 0, err
    return answers, err.strip().splitlines()[-1] == "True"


def test_a_worker_imports_polars_only_for_a_slice_it_answers_with_frames(tmp_path):
    """A worker sends the scanner's columns as bytes for a plain task (the loading process makes the
    frames), so it starts without polars; a slice the scanner refuses is read by msgspec there, into
    frames, and a smaller file's slice comes back as frames, equal to those made from the bytes."""
    good = _write(tmp_path / "good.json", _events(200))
    text = good.read_bytes()
    lo, hi = text.index(b"[") + 1, text.rindex(b"]")
    answers, polars_loaded = _worker_answers([(str(good), lo, hi, "good.json", True)])
    assert [status for status, _ in answers] == ["scanned"] and not polars_loaded
    parts, learnt = load_slices.parts_of(*answers[0], (str(good), lo, hi, "good.json", True))
    assert learnt is None and len(parts) == 1 and parts[0].events.height == 1 + 3 * 200
    answers, polars_loaded = _worker_answers([(str(good), lo, hi, "good.json", False)])  # a smaller file's
    assert [status for status, _ in answers] == ["ok"] and polars_loaded
    (framed,), _ = answers[0][1]
    assert_frame_equal(framed.events, parts[0].events) and assert_frame_equal(framed.flows, parts[0].flows)

    events = _events(200)
    events[50] = '{"ph": "X", "cat": "cpu_op", "name": "bad", "pid": [1], "tid": 1, "ts": 1623143089861200, "dur": 1}'
    odd = _write(tmp_path / "odd.json", events)
    text = odd.read_bytes()
    answers, polars_loaded = _worker_answers([(str(odd), text.index(b"[") + 1, text.rindex(b"]"), "odd.json", True)])
    assert [status for status, _ in answers] == ["ok"] and polars_loaded
    (part,), reading = answers[0][1]
    assert part.events.height == 200 * 3  # the event with a list for its pid is not read
    assert reading.skipped == 1 and "'pid'" in reading.skip_note  # said once the tables are built

    short = (str(good), lo, len(text) + 100, "good.json", True)  # the file is shorter than the slice
    answers, _ = _worker_answers([short])
    assert answers[0][0] == "failed" and "shorter" in answers[0][1]


def test_a_slice_cut_inside_a_nested_list_of_objects_falls_back_to_one_process(tmp_path, monkeypatch):
    events = _events(2000)
    nested = '{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1623143089861400, "dur": 1, "args": {"l": [{"a": 1},\n{"b": 2}]}}'
    events = [nested if i % 3 == 0 else e for i, e in enumerate(events)]
    path = _write(tmp_path / "nested.json", events)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 50_000)
    whole = load.load_trace(path)  # a wrong cut fails its slice: read again in one process
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    _assert_same(whole, load.load_trace(path))


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1},\n{"ph": "X", "name": "b", "ts": 2',  # cut off
        '[{"ph": "X", "name": "a", "ts": 1, "dur": 1}]',  # the bare array flavour
        '{"traceEvents": []}',
    ],
)
def test_files_the_sliced_path_does_not_read_go_to_one_process(text, tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(text)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    assert load_slices._load_sliced(path, None, None) is None


def test_timestamps_stay_exact_nanoseconds_in_slices(tmp_path, monkeypatch):
    path = _write(tmp_path / "ns.json", _events(2000))
    sliced, _ = _both(path, monkeypatch, slice_bytes=30_000)
    ops = sliced.events.filter(pl.col("name").cast(pl.String) == "aten::op3").sort("ts_ns")
    # op i starts at (1623143089861100 + i).{i % 1000:03d} µs; the origin is ProfilerStep#1 at 1623143089861000.5 µs
    assert ops["ts_ns"].to_list()[:3] == [(100 + i) * 1000 + i - 500 for i in (3, 10, 17)]


def test_workers_that_cannot_start_or_die_leave_the_one_process_path(tmp_path, monkeypatch):
    path = _write(tmp_path / "w.json", _events(2000))
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 50_000)
    load_workers._discard_workers()

    def no_python(self, count):
        raise OSError("no interpreter")

    with monkeypatch.context() as m:
        m.setattr(load_workers._Workers, "__init__", no_python)
        assert load_slices._load_sliced(path, None, None) is None
        assert load.load_trace(path).events.height == 1 + 3 * 2000
    workers = load_workers._slice_workers()
    for proc in workers.procs:  # killed between two loads: the next load starts new ones or reads alone
        proc.kill()
        proc.wait()
    assert load.load_trace(path).events.height == 1 + 3 * 2000


def test_workers_read_this_checkout_whatever_the_working_directory(tmp_path, monkeypatch):
    """`python -c` puts the working directory ahead of PYTHONPATH: a `dashboard` package there (another
    checkout, an older release) answered for the workers' imports. They must import the loader's own."""
    path = _write(tmp_path / "w.json", _events(2000))
    other = tmp_path / "elsewhere" / "dashboard"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("raise ImportError('another checkout of dashboard')\n")
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 50_000)
    load_workers._discard_workers()
    monkeypatch.chdir(other.parent)
    try:
        trace = load_slices._load_sliced(path, None, None)
    finally:
        load_workers._discard_workers()  # started in that directory: not for the tests after this one
    assert trace is not None and trace.events.height == 1 + 3 * 2000


def test_a_byte_order_mark_counts_as_in_one_process(tmp_path, monkeypatch):
    path = _write(tmp_path / "bom.json", _events(1000), before='\ufeff{"schemaVersion": 1, ')
    sliced, serial = _both(path, monkeypatch, slice_bytes=20_000)
    assert sliced is not None
    _assert_same(sliced, serial)


def _strs_by_tries(values: list) -> list:
    """The obvious version of load_frames._strs: a String column if polars takes the values as they are,
    else an Int64 one as text, else str() of each value."""
    for dtype in (pl.String, pl.Int64):
        try:
            return pl.Series(values, dtype=dtype, strict=True).cast(pl.String).to_list()
        except (TypeError, ValueError, OverflowError):
            continue
    return [None if v is None else str(v) for v in values]


def test_text_columns_from_mixed_values_match_the_obvious_version():
    """pid/tid/cat/name columns: _strs looks at the value types once instead of trying twice."""
    cases = [
        [1, 2, None],
        [True, False],
        [True, 1],
        [2.0, 1],
        [2.5],
        ["a", None],
        ["a", 1],
        ["a", True],
        [2**70, 1],
        [None, None],
        [],
        [1.0],
        [-3, "x", 2.5, None, True],
        [2**63 - 1],
        [-(2**63)],
        [2**63],
    ]
    for name in sorted(p.name for p in DATA.glob("*.json.gz")):
        events = json.loads(gzip.decompress((DATA / name).read_bytes()))
        events = events["traceEvents"] if isinstance(events, dict) else events
        for key in ("pid", "tid", "name", "cat"):
            cases.append([e.get(key) for e in events if isinstance(e, dict)])
    for values in cases:
        assert load_frames._strs(values).to_list() == _strs_by_tries(values), values[:5]


def test_event_names_match_the_text_column_of_mixed_values():
    """_names tries a plain String column first; whatever it is given, it gives what _strs gives."""
    cases = [["a", None], ["a", 1], [1, "a"], ["a", True], [2**70, "a"], [None, None], [], [2.5, "x"], ["x", -3]]
    for name in sorted(p.name for p in DATA.glob("*.json.gz")):
        events = json.loads(gzip.decompress((DATA / name).read_bytes()))
        events = events["traceEvents"] if isinstance(events, dict) else events
        cases.append([e.get("name") for e in events if isinstance(e, dict)])
    for values in cases:
        assert load_frames._names(values).to_list() == load_frames._strs(values).to_list(), values[:5]


@functools.cache
def _real_structs() -> list[list]:
    """Every real trace's events as the loader's typed structs."""
    out = []
    for path in sorted(DATA.glob("*.json.gz")):
        top = json.loads(gzip.decompress(path.read_bytes()))
        events = top["traceEvents"] if isinstance(top, dict) else top
        out.append(load_reading._decode_events(json.dumps(events).encode()))
    return out


def test_integer_columns_match_a_parse_of_each_value():
    """_ints parses only the values that are not None or an int64 already; the obvious version
    parses each one."""
    cases = [
        [1, "2560", None],
        ["0x10", 3],
        [True, "1"],
        [2**63, "1"],
        [-(2**63), "x"],
        [1.5, "2"],
        [float("nan"), "1"],
    ]
    for structs in _real_structs():
        args = [e.args for e in structs if isinstance(e.args, load_reading._Args)]
        for field in ("stream", "device", "correlation", "external_id", "external_id_legacy", "bytes", "size"):
            values = [getattr(a, field) for a in args]
            cases.append(values)
            cases.append(values + ["0x20"])  # a string in the column: the per-value path
    for values in cases:
        assert load_frames._ints(values).to_list() == [load_frames._int_or_none(v) for v in values], values[:5]


def test_raw_text_columns_match_one_decode_per_value():
    """_raw_texts joins the raw JSON snippets and splits them in polars; the obvious version
    decodes each one (bytes that are not UTF-8 as U+FFFD, an absent field as "")."""
    decode = load_reading.msgspec.json.Decoder(list[load_reading._Event]).decode
    odd = decode(
        b'[{"ph": "X", "ts": 1, "args": {"Input Dims": ["caf\xe9", "\xe2\x82"]}}, {"ph": "X", "ts": "\xff"}, {"ph": "X"},'
        b' {"ph": "X", "ts": 2.5, "dur": 3, "args": {"Input Dims": [[1, 2],\n [3]], "Concrete Inputs": ["", "1"]}}]'
    )
    batches = _real_structs() + [odd, odd[:1], []]
    for structs in batches:
        args = [e.args if isinstance(e.args, load_reading._Args) else load_reading._Args() for e in structs]
        for items, field in [
            (structs, load_frames._TS),
            (structs, load_frames._DUR),
            (args, load_frames._INPUT_DIMS),
            (args, load_frames._INPUT_TYPES),
            (args, load_frames._CONCRETE_INPUTS),
        ]:
            expected = [bytes(field(item)).decode("utf-8", errors="replace") for item in items]
            assert load_frames._raw_texts(items, field).to_list() == expected
    # a NUL inside a value would shift the split: each value is then decoded on its own
    assert load_frames._raw_texts([b"a\x00b", b"c\xff", b""], bytes).to_list() == ["a\x00b", "c\ufffd", ""]


def test_two_sessions_reading_large_files_at_once_each_get_their_own_trace(tmp_path, monkeypatch):
    """The dashboard parses each session's upload in that session's thread, and the worker
    processes are shared: two large files read at once must not trade slices (nor fall back), nor
    mix their categoricals (polars before 1.32)."""
    import threading

    paths = []
    for name in ("hta_a100_control.json.gz", "tracelens_h100_qwen_chat_sdpa_flash.json.gz"):
        path = tmp_path / name.removesuffix(".gz")
        path.write_bytes(gzip.decompress((DATA / name).read_bytes()))
        paths.append(path)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    alone = [load.load_trace(p) for p in paths]
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 100_000)  # tens of slices each: their tasks interleave
    sliced = []
    real = load_slices._load_sliced

    def spy(path, *args, **kwargs):
        trace = real(path, *args, **kwargs)
        if trace is not None:
            sliced.append(path.name)
        return trace

    monkeypatch.setattr(load_slices, "_load_sliced", spy)
    for _ in range(8):  # without a lock, polars 1.20 failed about one round in ten
        got: dict[int, object] = {}
        start = threading.Barrier(2)

        def read(i: int) -> None:
            start.wait()
            got[i] = load.load_trace(paths[i])

        threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(2):
            _assert_same(got[i], alone[i])
    assert sorted(sliced) == sorted([p.name for p in paths] * 8)  # every reading took the sliced path


def test_idle_workers_are_closed_and_the_next_large_file_starts_them_again(tmp_path, monkeypatch):
    import time

    path = tmp_path / "a100.json"
    path.write_bytes(gzip.decompress((DATA / "hta_a100_control.json.gz").read_bytes()))
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    alone = load.load_trace(path)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 200_000)
    monkeypatch.setattr(load_workers, "WORKERS_IDLE_S", 0.5)
    load_workers._discard_workers()  # workers of an earlier test, whose idle timers are still pending, are not these
    first = load_slices._load_sliced(path, None, None, keep_workers=True)
    workers = load_workers._workers_started
    assert first is not None and workers is not None and workers.alive()
    deadline = time.monotonic() + 20
    while load_workers._workers_started is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert load_workers._workers_started is None and all(
        proc.poll() is not None for proc in workers.procs
    )  # closed, exited
    again = load_slices._load_sliced(path, None, None, keep_workers=True)
    assert again is not None and load_workers._workers_started is not workers
    _assert_same(first, alone)
    _assert_same(again, alone)


def test_the_workers_are_used_only_under_the_parse_lock_so_an_idle_timer_cannot_close_them_mid_file(
    tmp_path, monkeypatch
):
    """A direct call (as the tests make) holds the lock too: CI once saw an idle timer left by an
    earlier test close the workers in the middle of a file read outside it."""
    import threading

    path = tmp_path / "a100.json"
    path.write_bytes(gzip.decompress((DATA / "hta_a100_control.json.gz").read_bytes()))
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 200_000)
    free_while_running = []
    real_run = load_workers._Workers.run

    def run(self, tasks):
        def try_lock():
            got = load_workers._PARSE_LOCK.acquire(blocking=False)
            free_while_running.append(got)
            if got:
                load_workers._PARSE_LOCK.release()

        other = threading.Thread(target=try_lock)  # as the idle timer's thread would
        other.start()
        other.join()
        yield from real_run(self, tasks)

    monkeypatch.setattr(load_workers._Workers, "run", run)
    assert load_slices._load_sliced(path, None, None) is not None
    assert free_while_running == [False]


def _workers_used(monkeypatch: pytest.MonkeyPatch) -> list[load_workers._Workers]:
    """The _Workers object each sliced read ran its tasks on, in order."""
    used: list[load_workers._Workers] = []
    real_run = load_workers._Workers.run

    def run(self, tasks):
        used.append(self)
        yield from real_run(self, tasks)

    monkeypatch.setattr(load_workers._Workers, "run", run)
    return used


def _exited(workers: load_workers._Workers, within_s: float = 20.0) -> bool:
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(proc.poll() is None for proc in workers.procs):
        time.sleep(0.05)
    return all(proc.poll() is not None for proc in workers.procs)


def test_the_workers_close_once_a_files_slices_are_read_unless_more_large_files_follow(tmp_path, monkeypatch):
    """Idle workers held 110-130 MB each beside the tables built after them (250 MB of the 910 MB
    upload's peak in the dashboard): one file closes them; a caller with more files keeps them."""
    from dashboard import cli
    from dashboard import catalog

    path = tmp_path / "a100.json"
    path.write_bytes(gzip.decompress((DATA / "hta_a100_control.json.gz").read_bytes()))
    other = tmp_path / "a100-again.json"
    other.write_bytes(path.read_bytes().replace(b'"traceEvents"', b'"traceEvents" ', 1))  # other bytes: parsed again
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 2_000_000)
    load_workers._discard_workers()
    used = _workers_used(monkeypatch)

    assert load.load_trace(path).events.height > 0
    assert load_workers._workers_started is None and _exited(used[0])  # closed at once, not after WORKERS_IDLE_S

    kept = load.load_trace(path, keep_workers=True)
    assert load_workers._workers_started is used[1] and used[1].alive()
    assert kept.events.height > 0
    load_workers._discard_workers()

    traces, errors = cli._load_all([str(path), str(other)])  # `attnscope compare a b`
    assert errors == [] and len(traces) == 2
    assert used[2] is used[3]  # the second file's slices were read by the first file's workers
    assert load_workers._workers_started is None and _exited(used[3])

    cache = catalog.TraceCache()
    pending = [catalog.pending_file(catalog.file_source(p), cache) for p in (path, other)]
    runs, failures = catalog.open_all(pending, cache=cache, defer_store=[])  # the dashboard's batch of files
    assert failures == [] and len(runs) == 2
    assert used[4] is used[5]
    assert load_workers._workers_started is None and _exited(used[5])

    from dashboard.engine.store.ingest import ingest
    from dashboard.engine.store.store import Store

    done = ingest([path, other], Store(tmp_path / "store"))  # `attnscope ingest a b`, in this process
    assert done.errors == [] and len(done.runs) == 2
    assert used[6] is used[7]
    assert load_workers._workers_started is None and _exited(used[7])


# An upload read while it arrives (load_arrival.Arrival): the bytes are written in chunks as the upload route
# writes them, and load_trace on the file afterwards must give what the one-process path gives.


def _arrive(
    src: Path,
    dst: Path,
    monkeypatch: pytest.MonkeyPatch,
    chunk: int,
    stop_after: int | None = None,
    slice_bytes: int = 200_000,
):
    """Write `src` to `dst` in chunks of `chunk` bytes with an Arrival watching (small slices and
    edges, so that a test file makes many); `stop_after`: abandon after that many bytes. The Arrival."""
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", slice_bytes)
    monkeypatch.setattr(load_slices, "_EDGE_BYTES", 1 << 14)
    data = src.read_bytes()
    early = load_arrival.arrival(dst, dst.name, len(data))
    assert early is not None
    with open(dst, "xb") as fh:
        for at in range(0, len(data), chunk):
            if stop_after is not None and at >= stop_after:
                early.abandon()  # the upload route's abort
                return early
            fh.write(data[at : at + chunk])
            fh.flush()
            early.grew(min(at + chunk, len(data)))
    early.finished(len(data))
    return early


def _not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the file was parsed again: the reading while it arrived was not used")

    monkeypatch.setattr(load, "_load", refuse)


@pytest.mark.parametrize(
    "name, chunk",
    [
        ("hta_a100_control.json.gz", 1 << 16),
        ("hta_v100_ns_resolution.pt.trace.json.gz", 100_003),
        ("tracelens_h100_bert_sdpa_flash.json.gz", 4 << 20),
    ],
)
def test_a_trace_read_while_it_arrives_is_the_trace_one_process_reads(name, chunk, tmp_path, monkeypatch):
    src = tmp_path / "src.json"
    src.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    serial = load.load_trace(src, name="up.json")  # one process: under SLICED_MIN_BYTES
    early = _arrive(src, tmp_path / "up.json", monkeypatch, chunk)
    with monkeypatch.context() as patch:
        _not_parsed_again(patch)
        arrived = load.load_trace(tmp_path / "up.json", name="up.json", arrival=early)
    assert early.used_workers is False and early.trace is None and early.take() is None  # taken once, not held
    _assert_same(arrived, serial)


def test_warnings_of_a_trace_read_while_it_arrives_are_those_of_one_process(tmp_path, monkeypatch):
    events = _events(3000)
    events[100] = '{"ph": "X", "cat": "cpu_op", "name": "bad", "pid": [1], "tid": 1, "ts": 1623143089861200, "dur": 1}'
    events[2000] = '{"ph": "X", "cat": "cuda_sync", "name": "sync\udcff", "pid": 1, "tid": 1, "ts": "oops", "dur": -3}'
    src = _write(
        tmp_path / "src.json",
        events,
        before='\ufeff{"schemaVersion": 1, ',
        after=', "traceName": "x", "deviceProperties": [{"id": 0}, {"id": 1}]}',
    )
    serial = load.load_trace(src, name="up.json")
    early = _arrive(src, tmp_path / "up.json", monkeypatch, 70_001, slice_bytes=50_000)
    with monkeypatch.context() as patch:
        _not_parsed_again(patch)
        arrived = load.load_trace(tmp_path / "up.json", name="up.json", arrival=early)
    _assert_same(arrived, serial)
    assert any("could not be read" in w for w in arrived.warnings) and any("U+FFFD" in w for w in arrived.warnings)


@pytest.mark.parametrize("kind", ["gzip", "cut", "nested"])
def test_a_file_the_early_reading_cannot_take_is_read_as_any_other(kind, tmp_path, monkeypatch):
    """A .json.gz upload, a file cut off mid-write and one whose slices cut inside a nested list:
    the early reading gives up and load_trace reads the file itself, with the same result."""
    raw = gzip.decompress((DATA / "hta_a100_control.json.gz").read_bytes())
    src = tmp_path / "src.json"
    if kind == "gzip":
        src.write_bytes((DATA / "hta_a100_control.json.gz").read_bytes())
    elif kind == "cut":
        src.write_bytes(raw[: len(raw) * 2 // 3])
    else:
        nested = '{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1623143089861400, "dur": 1, "args": {"l": [{"a": 1},\n{"b": 2}]}}'
        _write(src, [nested if i % 3 == 0 else e for i, e in enumerate(_events(2000))])
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    serial = load.load_trace(src, name="up.json")
    early = _arrive(src, tmp_path / "up.json", monkeypatch, 1 << 16, slice_bytes=50_000)
    assert early.result() is None  # gave up
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    _assert_same(load.load_trace(tmp_path / "up.json", name="up.json", arrival=early), serial)


def test_an_upload_cut_off_in_transfer_leaves_nothing_behind_and_the_workers_serve_the_next_file(tmp_path, monkeypatch):
    src = tmp_path / "src.json"
    src.write_bytes(gzip.decompress((DATA / "hta_a100_control.json.gz").read_bytes()))
    early = _arrive(src, tmp_path / "up.json", monkeypatch, 1 << 16, stop_after=src.stat().st_size // 2)
    assert early.result() is None and early.trace is None
    early.thread.join(30)
    assert not early.thread.is_alive()  # the reading stopped with the transfer
    sliced, serial = _both(src, monkeypatch, slice_bytes=1 << 20)  # the workers it used read the next file
    assert sliced is not None
    _assert_same(sliced, serial)


class _Rerun(BaseException):
    """What streamlit raises inside a progress callback when the user clicks during a parse."""


def test_a_parse_stopped_by_its_progress_callback_leaves_no_answer_for_the_next_file(tmp_path, monkeypatch):
    """A tab clicked during a large upload's parse raises streamlit's RerunException inside the
    progress callback. The workers' answers still in their pipes were then read as the next file's
    slices: that file came out with the other's events (47,047 events where it has 45,420)."""
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_bytes(gzip.decompress((DATA / "hta_a100_control.json.gz").read_bytes()))
    second.write_bytes(gzip.decompress((DATA / "hta_v100_ns_resolution.pt.trace.json.gz").read_bytes()))
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 0)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 1 << 20)
    calls = []

    def click(fraction: float) -> None:
        calls.append(fraction)
        if len(calls) == 2:
            raise _Rerun

    with pytest.raises(_Rerun):
        load.load_trace(first, progress=click, keep_workers=True)
    sliced = load.load_trace(second, keep_workers=True)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    _assert_same(sliced, load.load_trace(second))


def test_a_wait_for_an_arrival_stopped_by_a_rerun_leaves_it_for_the_next_run(tmp_path, monkeypatch):
    import threading

    src = tmp_path / "src.json"
    src.write_bytes(gzip.decompress((DATA / "hta_a100_control.json.gz").read_bytes()))
    serial = load.load_trace(src, name="up.json")
    go = threading.Event()
    real = load_frames._build_trace
    monkeypatch.setattr(
        load_frames, "_build_trace", lambda *args: go.wait(60) and real(*args)
    )  # not ready before the click
    early = _arrive(src, tmp_path / "up.json", monkeypatch, 1 << 16)

    def click(fraction: float) -> None:
        raise _Rerun

    with pytest.raises(_Rerun):
        load.load_trace(tmp_path / "up.json", name="up.json", progress=click, arrival=early)
    assert not early.ready
    go.set()
    with monkeypatch.context() as patch:
        _not_parsed_again(patch)
        arrived = load.load_trace(tmp_path / "up.json", name="up.json", arrival=early)
    _assert_same(arrived, serial)


# A large .json.gz is read in slices while it inflates (load_inflate._inflate_reading): the inflation runs in
# a thread and writes the temporary file, which this thread hands to the workers slice by slice as
# an Arrival. The trace must be the one-process trace; whatever stops either side leaves no file,
# no thread and no answer behind.


def _small_pieces(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, slice_bytes: int = 200_000) -> Path:
    """Thresholds that make a test file inflate in many pieces, spill early and cut into many
    slices; temporary files go to a folder of the test's own (returned)."""
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 18)
    monkeypatch.setattr(load_inflate, "GZIP_ONE_PIECE_BYTES", 0)
    monkeypatch.setattr(load_inflate, "GZIP_READ_BYTES", 1 << 14)
    monkeypatch.setattr(load_inflate, "GZIP_OUT_BYTES", 1 << 16)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", slice_bytes)
    monkeypatch.setattr(load_slices, "_EDGE_BYTES", 1 << 14)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    return temp


def _early_readings(monkeypatch: pytest.MonkeyPatch) -> list:
    """What each reading of a .json.gz while it inflated (Arrival.read_here) gave: a trace or None."""
    got = []
    real = load_arrival.Arrival.read_here

    def spy(self, progress, keep_workers):
        got.append(real(self, progress, keep_workers))
        return got[-1]

    monkeypatch.setattr(load_arrival.Arrival, "read_here", spy)
    return got


def _inflating() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name == "attnscope-inflate"]


def _serial(source, name: str):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
        return load.load_trace(source, name=name)


@pytest.mark.parametrize(
    "name",
    ["hta_a100_control.json.gz", "hta_v100_ns_resolution.pt.trace.json.gz", "tracelens_h100_bert_sdpa_flash.json.gz"],
)
@pytest.mark.parametrize("given", ["path", "bytes", "members"])
def test_a_gzip_trace_read_while_it_inflates_is_the_trace_one_process_reads(name, given, tmp_path, monkeypatch):
    """From a file, from bytes (an upload), and as three gzip members with zero padding between them."""
    packed = (DATA / name).read_bytes()
    if given == "members":
        raw = gzip.decompress(packed)
        third = len(raw) // 3
        packed = (
            gzip.compress(raw[:third])
            + b"\0" * 7
            + gzip.compress(raw[third : 2 * third])
            + gzip.compress(raw[2 * third :])
        )
    source = packed if given == "bytes" else tmp_path / "t.json.gz"
    if given != "bytes":
        source.write_bytes(packed)
    serial = _serial(source, "t.json.gz")
    temp = _small_pieces(monkeypatch, tmp_path)
    early = _early_readings(monkeypatch)
    grew = []
    real_grew = load_arrival.Arrival.grew
    monkeypatch.setattr(load_arrival.Arrival, "grew", lambda self, size: grew.append(size) or real_grew(self, size))

    def refuse(*args, **kwargs):
        raise AssertionError("read again after the inflation: the reading while it inflated was not used")

    monkeypatch.setattr(load_slices, "_load_sliced", refuse)
    trimmed = []  # the inflation thread gives its freed pages back before the tables are built (bench_upload's peak)
    monkeypatch.setattr(load_inflate, "_give_back_freed_memory", lambda: trimmed.append(len(grew)))
    progress = []
    trace = load.load_trace(source, name="t.json.gz", progress=progress.append)
    assert trimmed == [len(grew)]  # once, after the last piece
    _assert_same(trace, serial)
    assert early == [trace] and len(grew) > 10 and grew == sorted(grew)  # read as it grew, piece by piece
    assert progress and progress == sorted(progress) and progress[-1] == 1.0
    assert list(temp.iterdir()) == [] and _inflating() == []


def test_a_gzip_the_early_reading_gives_up_on_is_read_after_it_inflates(tmp_path, monkeypatch):
    """Slices that cut inside a nested list of objects: the workers cannot read them, so the file is
    read again once it is whole, with the one-process result."""
    nested = '{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1623143089861400, "dur": 1, "args": {"l": [{"a": 1},\n{"b": 2}]}}'
    plain = _write(tmp_path / "t.json", [nested if i % 3 == 0 else e for i, e in enumerate(_events(6000))])
    source = tmp_path / "t.json.gz"
    source.write_bytes(gzip.compress(plain.read_bytes()))
    serial = _serial(source, "t.json.gz")
    temp = _small_pieces(monkeypatch, tmp_path, slice_bytes=50_000)
    early = _early_readings(monkeypatch)
    _assert_same(load.load_trace(source, name="t.json.gz"), serial)
    assert early == [None] and list(temp.iterdir()) == [] and _inflating() == []


@pytest.mark.parametrize("fault", ["limit", "corrupt"])
def test_a_gzip_that_fails_while_it_is_read_says_what_one_process_says_and_leaves_nothing(fault, tmp_path, monkeypatch):
    """Past the size limit, or a corrupt block two thirds in: the error of the one-process path, no
    temporary file, no thread; the workers then read the next file right."""
    packed = bytearray((DATA / "hta_a100_control.json.gz").read_bytes())
    limit = None
    if fault == "limit":
        limit = 20 << 20  # the file inflates to 34.8 MB
    else:
        packed[len(packed) * 2 // 3 : len(packed) * 2 // 3 + 64] = b"\xff" * 64
    source = tmp_path / "t.json.gz"
    source.write_bytes(bytes(packed))
    with pytest.raises(load.TraceError) as serial:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
            load.load_trace(source, max_json_bytes=limit)
    temp = _small_pieces(monkeypatch, tmp_path)
    early = _early_readings(monkeypatch)
    with pytest.raises(load.TraceError) as info:
        load.load_trace(source, max_json_bytes=limit)
    assert str(info.value) == str(serial.value) and early == [None]
    assert list(temp.iterdir()) == [] and _inflating() == []
    other = tmp_path / "other.json.gz"
    other.write_bytes((DATA / "hta_v100_ns_resolution.pt.trace.json.gz").read_bytes())
    _assert_same(load.load_trace(other), _serial(other, "other.json.gz"))


def test_a_gzip_read_stopped_by_its_progress_callback_stops_the_inflation_and_leaves_nothing(tmp_path, monkeypatch):
    """A tab clicked while a large .json.gz upload is read: streamlit's RerunException comes out of
    the progress callback. The inflation stops, its file is removed, and the next file reads right."""
    source = tmp_path / "t.json.gz"
    source.write_bytes((DATA / "hta_a100_control.json.gz").read_bytes())
    serial = _serial(source, "t.json.gz")
    temp = _small_pieces(monkeypatch, tmp_path)
    import threading
    import time

    written = []
    clicked = threading.Event()
    real_write = load_inflate._Sink.write

    def write(self, piece):  # the 50th piece waits for the click and the stop: the rest is never inflated
        if len(written) == 50:
            clicked.wait(30)
            until = time.monotonic() + 30
            while not self.stopped and time.monotonic() < until:
                time.sleep(0.01)
        real_write(self, piece)
        written.append(len(piece))

    monkeypatch.setattr(load_inflate._Sink, "write", write)

    def click(fraction: float) -> None:
        clicked.set()
        raise _Rerun

    with pytest.raises(_Rerun):
        load.load_trace(source, name="t.json.gz", progress=click)
    assert _inflating() == [] and list(temp.iterdir()) == []
    assert len(written) == 50  # stopped: the 51st piece was refused
    # the next reading is the loader's own: without the held 50th piece (which, its file never
    # stopped, would wait out its 30 s bound for a stop no one asks)
    monkeypatch.setattr(load_inflate._Sink, "write", real_write)
    _assert_same(load.load_trace(source, name="t.json.gz"), serial)
