"""Analyses kept with the trace (dashboard/engine/store/kept.py): a reopened trace answers from what its
analyses answered before, byte for byte, and recomputes when the analysis code changes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import oracle
from dashboard import cli
from dashboard.engine.store import kept
from dashboard.engine.store import store as store_module
from dashboard.engine.model.trace import ANALYSES
from dashboard.engine.store.store import Store, sha256_of

# every module with per_trace analyses, so that ANALYSES holds them all
import dashboard.engine.analyses.summary  # noqa: F401
import dashboard.engine.compare.review  # noqa: F401
import dashboard.engine.compare.fingerprint  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
REAL = sorted(p for p in oracle.DATA.glob("*.json.gz")) + [REPO / "sample_traces" / "h200" / "naive.json.gz"]
SUMMARY = "dashboard.engine.analyses.summary.summarize"


def _run_all(trace) -> dict[str, object]:
    """Every per_trace analysis on the trace: its result, or the type of the error it raised."""
    out: dict[str, object] = {}
    for key, analysis in sorted(ANALYSES.items()):
        try:
            out[key] = analysis(trace)
        except Exception as exc:  # noqa: BLE001 - compared, not hidden: the fresh trace must raise the same
            out[key] = type(exc).__name__
    return out


def _same(a, b) -> bool:
    """Equal values, tables compared with their dtypes, through dicts, lists, tuples, dataclasses."""
    if isinstance(a, pl.DataFrame) or isinstance(b, pl.DataFrame):
        return isinstance(a, pl.DataFrame) and isinstance(b, pl.DataFrame) and a.schema == b.schema and a.equals(b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("path", REAL, ids=[p.name.split(".")[0] for p in REAL])
def test_every_kept_analysis_reads_back_equal_to_a_fresh_computation(path, trace_of, tmp_path):
    parsed = trace_of(path)
    sha = sha256_of(path)
    fresh = _run_all(dataclasses.replace(parsed, _analyses={}, _kept=None))
    first = _run_all(dataclasses.replace(parsed, _analyses={}, _kept=kept.Kept(tmp_path, sha)))
    kept.flush()  # (the writes are made by the writer thread, after the answers)
    folder = kept.Kept(tmp_path, sha).folder
    on_disk = {f.name.rsplit(".", 1)[0] for f in folder.iterdir()}
    assert {SUMMARY, "dashboard.engine.analyses.kernels.per_step", "dashboard.engine.analyses.copies.copies"} <= on_disk
    assert not [f for f in folder.iterdir() if f.name.endswith(".tmp")]

    class Served(kept.Kept):
        hits: set[str] = set()

        def get(self, key):
            value = super().get(key)
            if value is not kept.MISSING:
                self.hits.add(key)
            return value

    # a second trace reads every kept result back (and per_trace computes only on a miss)
    box = Served(tmp_path, sha)
    again = _run_all(dataclasses.replace(parsed, _analyses={}, _kept=box))
    assert box.hits == on_disk
    for key in fresh:
        if key not in on_disk:  # not kept (an object of the analyses' own): computed again each time
            continue
        assert _same(again[key], fresh[key]), key
        assert _same(first[key], fresh[key]), key


def test_what_is_not_plain_json_or_a_table_is_not_kept(tmp_path):
    box = kept.Kept(tmp_path, "0" * 64)
    box.put("a.tuple", (1, 2))
    box.put("a.nan", {"x": float("nan")})
    box.put("a.set", {1, 2})
    box.put("a.dict", {"x": [1, 2.5, None, True, "s"], "y": {"z": -0.0}})
    assert box.get("a.tuple") is kept.MISSING and box.get("a.nan") is kept.MISSING and box.get("a.set") is kept.MISSING
    assert json.dumps(box.get("a.dict")) == json.dumps({"x": [1, 2.5, None, True, "s"], "y": {"z": -0.0}})


def test_a_new_analysis_version_recomputes_and_replaces_the_old_one(tmp_path, monkeypatch):
    box = kept.Kept(tmp_path, "a" * 64)
    box.put("m.f", {"answer": 1})
    old = box.folder
    monkeypatch.setattr(kept, "analysis_version", lambda: "ffffffffffffffff")
    newer = kept.Kept(tmp_path, "a" * 64)
    assert newer.get("m.f") is kept.MISSING  # another version's answer is never read
    newer.put("m.f", {"answer": 2})
    assert newer.get("m.f") == {"answer": 2} and not old.exists()


def test_the_version_follows_the_engine_source(tmp_path, monkeypatch):
    """The version is the hash of the engine's files: a copy of the engine with one byte changed
    in one analysis gives another version."""
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "a.py").write_text("X = 1\n")
    (engine / "load").mkdir()
    (engine / "load" / "b.py").write_text("Y = 2\n")
    monkeypatch.setattr(kept, "ENGINE", engine)
    kept._source_digest.cache_clear()
    try:
        first = kept.analysis_version()
        kept._source_digest.cache_clear()
        (engine / "load" / "b.py").write_text("Y = 3\n")
        assert kept.analysis_version() != first
    finally:
        kept._source_digest.cache_clear()


def test_the_version_covers_every_floor_of_the_engine_not_only_the_store():
    """kept.py lives in store/: the version must still hash the analyses (a kept summary would
    otherwise outlive a change to them, and a new summary key never reach a stored trace)."""
    assert kept.ENGINE.name == "engine" and (kept.ENGINE / "analyses" / "summary.py").is_file()


def _files(folder: Path) -> set[str]:
    return {f.name for f in folder.iterdir()} if folder.is_dir() else set()


def _until(done, what: str, seconds: float = 30.0) -> None:
    """Wait for done() (polled): the writer thread's work, read off the disk."""
    import time

    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_what_an_analysis_answers_while_a_page_runs_is_written_after_the_run(tmp_path, trace_of):
    """Under Writer.hold (a dashboard page's run) the analyses' answers are queued, not written; once
    the hold ends the writer thread writes them, the same files a run without the hold writes."""
    path = oracle.DATA / "hta_v100_test.json.gz"
    parsed = trace_of(path)
    plain_box = kept.Kept(tmp_path / "plain", "e" * 64)
    ANALYSES[SUMMARY](dataclasses.replace(parsed, _analyses={}, _kept=plain_box))
    written = _files(plain_box.folder)  # nothing held: written at once, before the answer returns
    assert f"{SUMMARY}.json" in written and len(written) > 5

    box = kept.Kept(tmp_path / "held", "e" * 64)
    with kept.WRITER.hold():
        ANALYSES[SUMMARY](dataclasses.replace(parsed, _analyses={}, _kept=box))
        assert _files(box.folder) == set()  # queued while the run lasts
    _until(lambda: _files(box.folder) == written, "the writer thread wrote what the run left")
    for name in written:
        held, plain = box.folder / name, plain_box.folder / name
        if name.endswith(".arrow"):  # the same frame (Arrow's IPC bytes may differ in padding a reader never reads)
            assert pl.read_ipc(held).equals(pl.read_ipc(plain)), name
        else:
            assert held.read_bytes() == plain.read_bytes(), name


def test_a_kept_answer_waiting_to_be_written_is_read_measured_and_removed_as_if_written(tmp_path):
    """While a page runs: a reader of a waiting answer gets it (written first), sizes() counts it,
    and removing the trace drops the waiting writes so that no folder comes back after."""
    box = kept.Kept(tmp_path, "f" * 64)
    other = kept.Kept(tmp_path, "9" * 64)
    with kept.WRITER.hold():
        box.put("m.j", {"a": 1}, later=True)
        box.put("m.t", pl.DataFrame({"a": [1, 2]}), later=True)
        assert _files(box.folder) == set()
        assert kept.Kept(tmp_path, "f" * 64).get("m.j") == {"a": 1}  # another reader of the same trace
        assert _files(box.folder) == {"m.j.json"}  # that one written, the other still waiting
        assert kept.sizes(tmp_path) == {
            "f" * 64: (box.folder / "m.j.json").stat().st_size + (box.folder / "m.t.arrow").stat().st_size
        }
        other.put("m.j", {"b": 2}, later=True)
        kept.remove(tmp_path, "9" * 64)
    kept.flush()
    assert not other.trace_folder.exists()  # its waiting write was dropped with it
    assert kept.Kept(tmp_path, "f" * 64).get("m.t")["a"].to_list() == [1, 2]


def test_a_tab_first_visit_writes_nothing_while_the_tab_is_drawn(tmp_path, monkeypatch):
    """The dashboard's runs hold the writes (prepare.Ahead.page_run): a first visit to the Kernels
    tab computes analyses of every run, and their files are written after the tab is drawn (by the
    writer thread once the run ends; in a whole page's run, by the sidebar's store box, which
    measures them, after the tabs), never while it draws."""
    from streamlit.testing.v1 import AppTest

    from dashboard.runs import ENV_TRACES, trace_cache
    from dashboard.views import kernels

    monkeypatch.setenv("ATTNSCOPE_STORE", str(tmp_path / "store"))
    monkeypatch.delenv(ENV_TRACES, raising=False)
    trace_cache.clear()  # the bundled runs parsed afresh, their analyses not computed by an earlier test
    drawing = [False]
    during: list[str] = []
    after: list[str] = []
    write, draw = kept.Kept._write, kernels.render  # (AppTest runs app.py afresh; the views' modules are shared)

    def noted(self, key, value):
        (during if drawing[0] else after).append(key)
        write(self, key, value)

    def drawn(*args):
        drawing[0] = True
        try:
            draw(*args)
        finally:
            drawing[0] = False

    monkeypatch.setattr(kept.Kept, "_write", noted)
    monkeypatch.setattr(kernels, "render", drawn)
    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=120)
    at.run()
    kept.flush()
    during.clear()
    after.clear()
    at.query_params["tab"] = "Kernels"
    at.run()
    assert not at.exception
    kept.flush()
    trace_cache.clear()
    assert during == [] and "dashboard.engine.analyses.kernels.kernel_table" in after


def test_a_damaged_kept_file_is_computed_again_without_an_error(tmp_path):
    box = kept.Kept(tmp_path, "b" * 64)
    box.put("m.t", pl.DataFrame({"a": [1, 2]}))
    box.put("m.j", {"a": 1})
    (box.folder / "m.t.arrow").write_bytes(b"not arrow")
    (box.folder / "m.j.json").write_text("{")
    assert box.get("m.t") is kept.MISSING and box.get("m.j") is kept.MISSING


def test_the_second_summary_answers_from_the_kept_summary_without_reading_the_tables(tmp_path, capsys, monkeypatch):
    path = oracle.DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
    store = str(tmp_path / "store")
    assert cli.main(["summary", "--json", "--no-store", str(path)]) == 0
    plain = capsys.readouterr().out
    assert cli.main(["summary", "--json", "--store", store, str(path)]) == 0
    first = capsys.readouterr().out

    def refuse(*args, **kwargs):
        raise AssertionError("the trace's tables were read")

    monkeypatch.setattr(store_module.Store, "get", refuse)
    monkeypatch.setattr(store_module, "load_trace", refuse)
    assert cli.main(["summary", "--json", "--store", store, str(path)]) == 0
    second = capsys.readouterr().out
    assert plain == first == second  # byte-identical with and without the store, first and second time
    # the text output reads the kept summary too, and says the same as a fresh one
    assert cli.main(["summary", "--store", store, str(path)]) == 0
    kept_text = capsys.readouterr().out
    monkeypatch.undo()
    assert cli.main(["summary", "--no-store", str(path)]) == 0
    assert capsys.readouterr().out == kept_text


def test_a_failed_background_write_is_a_warning_and_the_answer_stands(tmp_path, capsys, monkeypatch):
    path = oracle.DATA / "hta_triton_example.json.gz"

    def full_disk(self, trace, sha):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_module.Store, "put", full_disk)
    assert cli.main(["summary", "--json", "--store", str(tmp_path / "store"), str(path)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)[0]["source"] == path.name
    assert "not kept in the trace store" in err and "No space left on device" in err and "Traceback" not in err


def test_eviction_removes_the_kept_analyses_with_the_trace(tmp_path):
    store = Store(tmp_path / "store")
    trace, sha = store.open(oracle.DATA / "hta_triton_example.json.gz")
    dashboard.engine.analyses.summary.summarize(trace)
    assert (tmp_path / "store" / "analyses" / f"trace={sha}").exists() and store.has(sha)
    store.max_bytes = 1  # a cap below the one trace: it goes, and its analyses with it
    assert store.evict() == [sha]
    assert not (tmp_path / "store" / "analyses" / f"trace={sha}").exists()


def test_help_imports_neither_polars_nor_the_analyses():
    """`attnscope --help` builds its parser from light modules (engine/constants.py, errors.py):
    what it imports is checked, not timed (benchmarks/bench_cold_start.py times it)."""
    code = (
        "import sys, contextlib, io\nfrom dashboard import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        cli.main(['--help'])\n    except SystemExit:\n        pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('polars', 'numpy', 'msgspec', 'streamlit')"
        " or m in ('dashboard.engine.load', 'dashboard.engine.analyses.summary', 'dashboard.engine.store.store'))\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


def test_the_light_constants_are_the_ones_the_analyses_use():
    from dashboard.engine import rules
    from dashboard.engine.analyses import backends
    from dashboard.engine.model import constants
    from dashboard.engine.analyses import kernels
    from dashboard.engine.compare import review
    from dashboard.engine.compare import speed

    assert backends.BACKENDS == rules.BACKEND_NAMES + ("inductor", "eager") == rules.BACKENDS
    assert constants.UNIT_KERNEL == "kernel"
    assert review.COPY_ALARM_SHARE == 0.01 and review.COPY_ALARM_BYTES == 1_000_000
    assert kernels.UNIT_KERNEL == "kernel" and speed.DEFAULT_USD_PER_GPU_HOUR == 2.0
    from dashboard.engine.analyses.summary import summarize

    assert cli.SUMMARY_KEY == f"{summarize.__module__}.{summarize.__qualname__}" and cli.SUMMARY_KEY in ANALYSES


def test_the_kept_analyses_count_against_the_size_cap_and_go_with_their_trace(tmp_path):
    """$ATTNSCOPE_STORE_MAX_BYTES holds a trace's kept analyses with its tables: under a cap that
    holds everything but the first trace's analyses (both traces' tables fit), the first goes, and
    its analyses with it."""
    import time

    root = tmp_path / "store"
    store = Store(root)
    shas = []
    for name in ("hta_triton_example.json.gz", "hta_mi250_rocm_minitoy.json.gz"):
        trace, sha = store.open(oracle.DATA / name)
        dashboard.engine.analyses.summary.summarize(trace)  # its analyses kept beside its tables
        shas.append(sha)
        opened = store.trace(sha).last_opened
        while time.time() <= opened:  # the next one is opened later (the clock read past this one's)
            pass
    first, second = shas

    def on_disk(folder: Path) -> int:
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())

    tables = {sha: sum(on_disk(p) for p in root.glob(f"schema=*/trace={sha}")) for sha in shas}
    analyses = {sha: on_disk(root / "analyses" / f"trace={sha}") for sha in shas}
    assert all(tables.values()) and all(analyses.values())
    assert store.used_bytes() == sum(tables.values()) + sum(analyses.values())
    assert {t.sha: t.stored_bytes for t in store.traces()} == {sha: tables[sha] + analyses[sha] for sha in shas}
    store.max_bytes = sum(tables.values()) + analyses[second]  # short of the first's analyses
    assert store.evict() == [first]
    assert not (root / "analyses" / f"trace={first}").exists() and not store.has(first)
    assert (root / "analyses" / f"trace={second}").exists() and store.has(second)
    assert store.used_bytes() == tables[second] + analyses[second] <= store.max_bytes
