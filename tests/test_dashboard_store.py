"""The dashboard over the trace store: an upload survives a server restart, a link names it by
its content hash so a reviewer sees it without uploading, and a saved view brings back runs,
labels, baseline and its note under a short id."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import oracle
from uploading import send
from dashboard.engine.store.store import Store, sha256_of
from dashboard.runs import ENV_TRACES, trace_cache

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboard" / "app.py"
H100 = oracle.DATA / "tracelens_h100_bert_sdpa_flash.json.gz"
QWEN = oracle.DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"


@pytest.fixture()
def server(tmp_path, monkeypatch):
    """A dashboard 'server' with its own store; restart() forgets everything held in memory."""
    monkeypatch.setenv("ATTNSCOPE_STORE", str(tmp_path / "store"))
    monkeypatch.delenv(ENV_TRACES, raising=False)

    def restart() -> None:
        trace_cache.clear()

    restart()
    yield restart
    restart()


def run(params: dict | None = None, uploads: list[Path] = ()) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120)
    for key, value in (params or {}).items():
        at.query_params[key] = value
    at.run()
    if uploads:  # into an empty comparison: the uploads alone, the first the baseline
        at.multiselect(key="sel_runs").set_value([]).run()
        send(at, [(p.name, p.read_bytes(), "application/gzip") for p in uploads])
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown(markdown: str) -> str:
    """Text as the reader sees it (the app backslash-escapes trace strings in Markdown bodies)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def params_of(at: AppTest) -> dict[str, list[str]]:
    return {key: (value if isinstance(value, list) else [value]) for key, value in at.query_params.items()}


def overview_runs(at: AppTest) -> list[str]:
    return at.get_by_key("tbl_overview").dataframe[0].value["run"].tolist()


def test_an_upload_reopens_from_its_link_after_a_restart_without_uploading_or_parsing(server):
    author = run(uploads=[H100, QWEN])
    ident = "upload/" + H100.name
    author.query_params["label"] = [f"{ident}=their H100 run"]
    link = params_of(author)
    assert sorted(link["src"]) == sorted(f"upload/{p.name}={sha256_of(p)}" for p in (H100, QWEN))
    server()  # the server restarts: nothing in memory
    reviewer = run(params=link)
    assert trace_cache().parses == 0  # both came from the store
    assert overview_runs(reviewer) == ["their H100 run", QWEN.name.removesuffix(".json.gz")]
    assert reviewer.selectbox(key="baseline").value == ident
    stored = {t.source for t in Store(os.environ["ATTNSCOPE_STORE"]).traces()}
    assert {H100.name, QWEN.name} <= stored


def test_a_link_to_an_upload_the_store_does_not_hold_says_so(server):
    missing = "0" * 64
    at = run(params={"run": ["upload/gone.json.gz"], "src": [f"upload/gone.json.gz={missing}"]})
    assert any("gone.json.gz: the link's upload is not in the trace store" in shown(e.value) for e in at.sidebar.error)


def test_a_saved_view_brings_back_runs_labels_baseline_and_its_note(server):
    author = run(params={"label": [f"upload/{QWEN.name}=qwen chat"]}, uploads=[H100, QWEN])
    author.selectbox(key="baseline").set_value(f"upload/{QWEN.name}")
    author.run()
    author.text_input(key="view_note").set_value("PR 1234: two H100 runs")
    author.run()
    author.button(key="save_view").click()
    author.run()
    code = [c.value for c in author.sidebar.code]
    assert len(code) == 1 and code[0].startswith("?view=")
    view_id = code[0].removeprefix("?view=")
    server()
    reviewer = run(params={"view": view_id})
    assert set(overview_runs(reviewer)) == {"qwen chat", H100.name.removesuffix(".json.gz")}
    assert reviewer.selectbox(key="baseline").value == f"upload/{QWEN.name}"
    assert any("PR 1234: two H100 runs" in shown(i.value) for i in reviewer.info)
    nothing = run(params={"view": "nope"})
    assert any("No saved view nope" in shown(w.value) for w in nothing.warning)


def test_the_downloaded_summary_follows_the_kernels_tabs_names_and_steps(server, monkeypatch):
    from streamlit.runtime.media_file_manager import MediaFileManager

    made: dict[str, tuple] = {}
    register = MediaFileManager.add_deferred

    def record(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        file_id = register(self, data_callable, mimetype, coordinates, file_name, **kwargs)
        made[file_id] = (file_name, data_callable)
        return file_id

    monkeypatch.setattr(MediaFileManager, "add_deferred", record)
    control, test = oracle.DATA / "hta_a100_control.json.gz", oracle.DATA / "hta_v100_test.json.gz"
    monkeypatch.setenv(ENV_TRACES, os.pathsep.join([str(control), str(test)]))
    ids = ["file/" + control.name, "file/" + test.name]
    at = run(params={"run": ids, "names": "full", "kstep": [f"{ids[0]}=1009", f"{ids[1]}=1010"]})
    summary = next(
        call
        for name, call in (made[b.proto.deferred_file_id] for b in at.get("download_button"))
        if name.endswith(".md")
    )
    text = shown(summary())
    assert "The run's step 1010 against the baseline's step 1009; kernels by full name." in text


def _renamed(path: Path) -> bytes:
    """The trace's JSON with one more newline, gzipped: the same run, new bytes (a new store id)."""
    return gzip.compress(gzip.decompress(path.read_bytes()) + b"\n", mtime=0)


def _decimal(n: int) -> str:
    """Bytes as the sidebar writes sizes: one decimal in kB or MB (powers of 1000)."""
    return f"{n / 1e3:.1f} kB" if n < 1e6 else f"{n / 1e6:.1f} MB"


def _on_disk(root: Path) -> dict[str, int]:
    """sha -> bytes on disk of each stored trace's folder and of its kept analyses (analyses/trace=<sha>/,
    every file below it), read from the file system: what the cap counts (once the analyses' answers
    a page's run left waiting are written: kept.Writer)."""
    from dashboard.engine.store import kept as writes

    writes.flush()
    kept = {
        folder.name.removeprefix("trace="): sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        for folder in root.glob("analyses/trace=*")
    }
    return {
        folder.name.removeprefix("trace="): sum(f.stat().st_size for f in folder.iterdir())
        + kept.get(folder.name.removeprefix("trace="), 0)
        for folder in root.glob("schema=*/trace=*")
    }


def test_a_pinned_run_stays_and_the_least_recently_opened_goes_when_an_upload_passes_the_cap(server, monkeypatch):
    root = Path(os.environ["ATTNSCOPE_STORE"])
    keep, old, new = _renamed(H100), _renamed(QWEN), _renamed(oracle.DATA / "hta_triton_example.json.gz")
    author = AppTest.from_file(str(APP), default_timeout=120)
    author.run()
    send(
        author, [("keep.json.gz", keep, "application/gzip"), ("old.json.gz", old, "application/gzip")]
    )  # keep is stored first, then old: keep is the least recently opened
    assert not author.exception
    author.checkbox(key="pin_upload/keep.json.gz").check()
    author.run()
    assert Store(root).trace(sha256_of(keep)).pinned and not Store(root).trace(sha256_of(old)).pinned
    before = _on_disk(root)
    assert {sha256_of(keep), sha256_of(old)} <= set(before)
    cap = sum(before.values())  # full: the next upload must make room

    monkeypatch.setenv("ATTNSCOPE_STORE_MAX_BYTES", str(cap))
    server()  # the server restarts with a cap; this session reopens the bundled runs from the store
    reviewer = run(uploads=[])
    send(reviewer, [("new.json.gz", new, "application/gzip")])
    assert not reviewer.exception
    after = _on_disk(root)
    assert sha256_of(keep) in after  # pinned, though the least recently opened
    assert sha256_of(old) not in after  # the unpinned least recently opened went
    assert sha256_of(new) in after and set(after) == set(before) - {sha256_of(old)} | {sha256_of(new)}
    assert sum(after.values()) <= cap
    warnings = [shown(w.value) for w in reviewer.sidebar.warning]
    gone = before[sha256_of(old)]  # another session's upload: counted, not named
    assert warnings == [
        f"Trace store over its cap of {_decimal(cap)}: removed the least recently opened unpinned trace: "
        f"1 trace not loaded here ({_decimal(gone)}). Links to it no longer open; pinned runs stay."
    ]
    [box] = [e for e in reviewer.sidebar.expander if e.label.startswith("Trace store:")]
    assert box.label == f"Trace store: {len(after)} traces, {_decimal(sum(after.values()))} of {_decimal(cap)}"
    assert reviewer.checkbox(key="pin_upload/new.json.gz").value is False

    # a bigger upload pushes out bundled traces this session has loaded: those are named
    bigger = gzip.compress(gzip.decompress(QWEN.read_bytes()) + b"\n\n", mtime=0)
    send(reviewer, [("new.json.gz", new, "application/gzip"), ("bigger.json.gz", bigger, "application/gzip")])
    assert not reviewer.exception
    final = _on_disk(root)
    assert sha256_of(keep) in final and sha256_of(bigger) in final and sum(final.values()) <= cap
    bundled = {sha256_of(f): f.name for f in (REPO / "sample_traces").glob("*/*.json.gz")}
    pushed = set(after) - set(final)
    assert pushed and pushed <= set(bundled)  # only bundled traces went: keep is pinned, the uploads are newer
    [line] = [shown(w.value) for w in reviewer.sidebar.warning]
    assert line.startswith(
        f"Trace store over its cap of {_decimal(cap)}: removed the least recently opened unpinned traces: "
    )
    named = [sha for sha in pushed if f"{bundled[sha]} ({_decimal(after[sha])})" in line]
    assert len(named) == min(5, len(pushed))  # five by name at most
    rest = len(pushed) - len(named) + 1  # beyond five, and the other session's upload
    assert f"{rest} more (" in line and line.endswith("Links to them no longer open; pinned runs stay.")


def test_the_store_box_names_this_sessions_traces_and_only_counts_other_sessions_uploads(server):
    private = _renamed(QWEN)
    author = AppTest.from_file(str(APP), default_timeout=120)
    author.run()
    send(author, [("private.json.gz", private, "application/gzip")])
    assert not author.exception
    [mine] = [e for e in author.sidebar.expander if e.label.startswith("Trace store:")]
    assert "private.json.gz" in mine.dataframe[0].value["file"].tolist()
    other = run()  # another person's session on the same server
    [box] = [e for e in other.sidebar.expander if e.label.startswith("Trace store:")]
    listed = box.dataframe[0].value
    assert "private.json.gz" not in listed["file"].tolist()
    on_disk = _on_disk(Path(os.environ["ATTNSCOPE_STORE"]))
    assert len(listed) == len(on_disk) - 1  # every bundled trace this session loaded, and not the upload
    hidden = on_disk[sha256_of(private)]
    assert any(
        c.value == f"And 1 other stored trace ({_decimal(hidden)}): other sessions' uploads and runs not loaded here."
        for c in box.caption
    )
    assert not any("private" in shown(c.value) for c in box.caption)


def test_an_upload_reaches_the_store_when_a_rerun_stops_the_run_before_its_tabs_are_drawn(server, monkeypatch):
    """The store write waits for the tabs (so its CPU does not delay the first table); a run that
    stops mid-tab (a tab clicked while it draws) must still let it go, not leave it waiting."""
    import time

    import streamlit as st

    from dashboard import runs
    from dashboard.views import overview

    monkeypatch.setattr(runs, "STORE_WRITE_WAIT_S", 600.0)  # no timeout to fall back on within this test
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    before = trace_cache().parses
    monkeypatch.setattr(overview, "render", lambda sel: st.stop())  # the run ends inside the first tab
    triton = oracle.DATA / "hta_triton_example.json.gz"  # not among the bundled runs: parsed in this run
    send(at, [(triton.name, triton.read_bytes(), "application/gzip")])
    assert trace_cache().parses == before + 1
    store = Store(os.environ["ATTNSCOPE_STORE"])
    deadline = time.monotonic() + 60
    while triton.name not in {t.source for t in store.traces()} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert triton.name in {t.source for t in store.traces()}


def test_an_uploads_analyses_are_kept_from_its_first_draw_and_read_back_after_a_restart(server):
    """The analyses the Overview ran on a just-parsed upload are in the store before its tables are
    (kept.py); after a restart they are read back, not computed again."""
    from dashboard.engine.store import kept

    author = run(uploads=[H100])
    kept.flush()  # (written after the page's run: kept.Writer)
    folder = kept.Kept(Path(os.environ["ATTNSCOPE_STORE"]), sha256_of(H100)).folder
    for key in (
        "dashboard.engine.analyses.health.health",
        "dashboard.engine.analyses.kernels.per_step",
        "dashboard.engine.analyses.copies.copies",
    ):
        assert any(folder.glob(f"{key}.*")), key
    link = params_of(author)
    server()
    served = []
    original = kept.Kept.get

    def get(self, key):  # per_trace computes only when this answers MISSING
        value = original(self, key)
        served.append((key, value is not kept.MISSING))
        return value

    kept.Kept.get = get
    try:
        run(params=link)
    finally:
        kept.Kept.get = original
    assert ("dashboard.engine.analyses.health.health", True) in served
    assert ("dashboard.engine.analyses.health.health", False) not in served
