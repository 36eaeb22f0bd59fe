"""Upload limits: an upload larger than the limit is refused before a byte of it is read, with
one line naming the file, its size and the limit; the other uploads and runs stay. A gzip
upload that inflates past the JSON limit (the loader's) is one error line too."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import oracle
from uploading import send
from dashboard.engine.store.store import Store, sha256_of
from dashboard.runs import ENV_MAX_UPLOAD, ENV_TRACES, trace_cache, upload_limit

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboard" / "app.py"
H100 = oracle.DATA / "tracelens_h100_bert_sdpa_flash.json.gz"
TRITON = oracle.DATA / "hta_triton_example.json.gz"
QWEN = oracle.DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"


@pytest.fixture()
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_STORE", str(tmp_path / "store"))
    monkeypatch.delenv(ENV_TRACES, raising=False)
    monkeypatch.delenv(ENV_MAX_UPLOAD, raising=False)
    trace_cache.clear()
    yield tmp_path
    trace_cache.clear()


def as_read(markdown: str) -> str:
    return re.sub(r"\\(.)", r"\1", markdown)


def kb(size: int) -> str:
    return f"{size / 1000:.1f} kB"


def test_without_a_setting_the_limit_is_streamlits_max_upload_size():
    mib = int(
        re.search(r"^maxUploadSize\s*=\s*(\d+)", (REPO / ".streamlit" / "config.toml").read_text(), re.M).group(1)
    )
    assert upload_limit({}) == (mib * 1024 * 1024, None)  # streamlit counts megabytes of 1024 * 1024 bytes
    assert upload_limit({ENV_MAX_UPLOAD: "5000"}) == (5000, None)
    limit, problem = upload_limit({ENV_MAX_UPLOAD: "lots"})
    assert limit == mib * 1024 * 1024 and "ATTNSCOPE_MAX_UPLOAD_BYTES='lots'" in problem


def test_an_upload_over_the_limit_is_refused_unread_and_the_others_open(fresh, monkeypatch):
    big = gzip.compress(gzip.decompress(H100.read_bytes()), compresslevel=1)  # new bytes: never parsed before
    small = TRITON.read_bytes()
    limit = 50_000
    assert len(small) < limit < len(big)
    monkeypatch.setenv(ENV_MAX_UPLOAD, str(limit))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    refused = send(at, [("big.json.gz", big, "application/gzip"), (TRITON.name, small, "application/gzip")])
    assert not at.exception
    # the route refuses it on its declared length, before a byte is read; the uploader shows this line
    assert [(r.status, r.message) for r in refused] == [
        (413, f"big.json.gz: {len(big):,} bytes is over the upload limit of {kb(limit)} ({limit:,} bytes); not read")
    ]
    assert [r for r in at.multiselect[0].value if r.startswith("upload/")] == ["upload/" + TRITON.name]  # it joined
    assert at.get_by_key("tbl_overview").dataframe[0].value["run"].tolist()[-1] == TRITON.name.removesuffix(".json.gz")
    big_sha = sha256_of(big)
    cache = trace_cache()
    assert cache.get(big_sha) is None and big_sha not in cache.failures  # never parsed, never tried
    assert big_sha not in {t.sha for t in Store(fresh / "store").traces()}
    assert len(at.multiselect[0].options) > 1  # the bundled runs stay on offer
    assert not at.sidebar.error


def test_an_upload_kept_before_the_limit_was_lowered_is_refused_unread(fresh, monkeypatch):
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert send(at, [(TRITON.name, TRITON.read_bytes())]) == []
    assert [r for r in at.multiselect[0].value if r.startswith("upload/")] == ["upload/" + TRITON.name]
    limit = 1000
    size = TRITON.stat().st_size
    monkeypatch.setenv(ENV_MAX_UPLOAD, str(limit))
    at.run()
    assert [as_read(e.value) for e in at.sidebar.error] == [
        f"{TRITON.name}: {kb(size)} ({size:,} bytes) is over the upload limit of {kb(limit)} ({limit:,} bytes); not read"
    ]


def test_a_gzip_upload_that_inflates_past_the_json_limit_is_one_line_and_the_others_stay(fresh, monkeypatch):
    from dashboard.engine import load
    from dashboard.engine.load import limits as load_limits

    if not hasattr(load, "MAX_JSON_ENV"):
        pytest.skip("the loader has no JSON-size limit yet")
    inflated = gzip.decompress(QWEN.read_bytes())
    bomb = gzip.compress(inflated + b"\n", mtime=0)  # new bytes: parsed here, not found in a cache
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()  # the bundled runs open under the default limit
    monkeypatch.setenv(load_limits.MAX_JSON_ENV, str(len(inflated) - 1))
    send(at, [("bomb.json.gz", bomb, "application/gzip"), (TRITON.name, TRITON.read_bytes(), "application/gzip")])
    assert not at.exception
    errors = [as_read(e.value) for e in at.sidebar.error]
    assert len(errors) == 1 and errors[0].startswith("bomb.json.gz") and "\n" not in errors[0], errors
    assert f"{len(inflated) - 1:,} bytes" in errors[0], errors  # names the limit
    assert [r for r in at.multiselect[0].value if r.startswith("upload/")] == ["upload/" + TRITON.name]
    assert at.get_by_key("tbl_overview").dataframe[0].value["run"].tolist()[-1] == TRITON.name.removesuffix(".json.gz")
    assert len(at.multiselect[0].options) > 1


def test_expired_sessions_are_let_go_so_their_uploads_can_be_freed():
    """Streamlit's store of disconnected sessions keeps an expired one until it is written to;
    reap_expired_sessions lets it go (the real session manager and store of streamlit 1.67)."""
    import gc
    import time
    import weakref

    from streamlit.runtime.memory_session_storage import MemorySessionStorage
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache
    from streamlit.runtime.session_manager import SessionInfo
    from streamlit.runtime.websocket_session_manager import WebsocketSessionManager

    from dashboard.runs import reap_expired_sessions

    class Session:
        def __init__(self, ident: str) -> None:
            self.id = ident

    manager = WebsocketSessionManager(
        MemorySessionStorage(ttl_seconds=0.05), MemoryUploadedFileManager("/u"), ScriptCache(), None
    )
    closed = Session("closed")
    manager._session_storage.save(SessionInfo(client=None, session=closed, script_run_count=1))
    alive = weakref.ref(closed)
    del closed
    time.sleep(0.2)
    assert manager.get_session_info("closed") is None  # expired ...
    gc.collect()
    assert alive() is not None  # ... but still held by the store
    reap_expired_sessions(manager)
    gc.collect()
    assert alive() is None
    reap_expired_sessions(object())  # a manager unlike 1.67's: left alone


def test_parse_progress_is_drawn_at_most_four_times_a_second_but_each_new_file_and_the_end_at_once(monkeypatch):
    from dashboard import runs

    clock = [100.0]
    monkeypatch.setattr(runs.time, "monotonic", lambda: clock[0])
    drawn: list[tuple[float, str]] = []
    progress = runs.Throttled(lambda fraction, text: drawn.append((fraction, text)))
    for at, fraction, text in [
        (0.00, 0.0, "a"),
        (0.10, 0.1, "a"),
        (0.20, 0.2, "a"),  # the first drawn, the next two within 0.25 s
        (0.26, 0.3, "a"),  # 0.26 s after the last drawing
        (0.30, 0.5, "b"),  # the next file: at once
        (0.31, 0.6, "b"),
        (0.32, 1.0, "b"),  # the full bar: at once
    ]:
        clock[0] = 100.0 + at
        progress(fraction, text)
    assert drawn == [(0.0, "a"), (0.3, "a"), (0.5, "b"), (1.0, "b")]
