"""The dashboard's upload route (dashboard/uploads.py), driven over ASGI as uvicorn drives it:
the body is streamed to a file on disk and hashed on the way, never held whole; only a live
session's ticket may upload; the limit is checked on the declared length before a byte is read
and on the bytes as they arrive; nothing half-written stays. Expected sizes and hashes come from
hashlib on the test's own bytes."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest
from starlette.applications import Starlette

from dashboard import uploads


class Client:
    """Calls an ASGI app the way uvicorn does, with the body in the given chunks."""

    def __init__(self, registry: uploads.Registry, alive=lambda session: True, limit: int = 10_000) -> None:
        self.app = Starlette(routes=[uploads.route(registry, alive, lambda: (limit, f"{limit:,} bytes"))])
        assert self.app.routes[0].path == uploads.ROUTE
        self.received = 0  # body messages the route asked for

    def call(self, method: str, query: str, chunks: list[bytes] = (), length: int | None = None, cut: bool = False):
        chunks = list(chunks)
        headers = [] if length is None else [(b"content-length", str(length).encode())]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": uploads.ROUTE,
            "raw_path": uploads.ROUTE.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": headers,
            "server": ("test", 80),
            "client": ("test", 1),
        }
        sent: list[dict] = []

        async def receive():
            self.received += 1
            if chunks:
                return {"type": "http.request", "body": chunks.pop(0), "more_body": bool(chunks) or cut}
            return {"type": "http.disconnect"} if cut else {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        asyncio.run(self.app(scope, receive, send))
        status = next(m["status"] for m in sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return status, json.loads(body)


@pytest.fixture()
def registry(tmp_path):
    return uploads.Registry(tmp_path / "spill")


def files_in(registry: uploads.Registry) -> list[str]:
    return sorted(p.name for p in registry.folder().iterdir())


def test_a_body_in_many_chunks_lands_on_disk_with_its_hash_and_size(registry, monkeypatch):
    monkeypatch.setattr(uploads, "BUFFER", 1000)  # several writes, and a remainder
    ticket = registry.session_ticket("s1", None)
    chunks = [bytes([i]) * 333 for i in range(10)]
    data = b"".join(chunks)
    status, body = Client(registry).call("PUT", f"ticket={ticket}&name=run.json.gz", chunks, len(data))
    assert status == 200
    assert body["name"] == "run.json.gz" and body["size"] == len(data) == 3330
    upload = registry.get(body["id"], "s1")
    assert upload.sha == hashlib.sha256(data).hexdigest() and upload.path.read_bytes() == data
    assert registry.get(body["id"], "s2") is None  # another session cannot open it
    assert files_in(registry) == [body["id"]]


def test_a_ticket_the_server_did_not_give_or_of_an_ended_session_is_refused_unread(registry):
    client = Client(registry)
    status, body = client.call("PUT", "ticket=made-up&name=a.json", [b"{}"], 2)
    assert status == 403 and "reload the page" in body["error"]
    ticket = registry.session_ticket("s1", None)
    status, body = Client(registry, alive=lambda session: False).call("PUT", f"ticket={ticket}&name=a.json", [b"{}"], 2)
    assert status == 403
    assert files_in(registry) == [] and registry.files == {}


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(registry):
    ticket = registry.session_ticket("s1", None)
    client = Client(registry, limit=100)
    status, body = client.call("PUT", f"ticket={ticket}&name=big.json", [b"x" * 101], 101)
    assert (status, body["error"]) == (413, "big.json: 101 bytes is over the upload limit of 100 bytes; not read")
    assert client.received == 0 and files_in(registry) == []


def test_a_body_longer_than_the_limit_without_a_length_stops_and_leaves_nothing(registry, monkeypatch):
    monkeypatch.setattr(uploads, "BUFFER", 10)
    ticket = registry.session_ticket("s1", None)
    status, body = Client(registry, limit=100).call(
        "PUT", f"ticket={ticket}&name=big.json", [b"x" * 60, b"x" * 60, b"x" * 60]
    )
    assert (status, body["error"]) == (413, "big.json: more than 100 bytes, the upload limit; not kept")
    assert files_in(registry) == [] and registry.files == {}


def test_a_client_that_goes_away_mid_upload_leaves_nothing(registry, monkeypatch):
    monkeypatch.setattr(uploads, "BUFFER", 10)
    ticket = registry.session_ticket("s1", None)
    status, body = Client(registry).call("PUT", f"ticket={ticket}&name=a.json", [b"x" * 40, b"y" * 40], 1000, cut=True)
    assert (status, body["error"]) == (400, "a.json: the upload was cut off after 80 bytes")
    assert files_in(registry) == [] and registry.files == {}


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("../../etc/run.json", "run.json"),
        ("C:\\Users\\me\\t.json.gz", "t.json.gz"),
        ("a\x00b\n.json", "ab.json"),
        ("x" * 300 + ".json", ("x" * 300)[:255]),
    ],
)
def test_names_lose_folders_and_control_characters(raw, kept):
    if kept.endswith((".json", ".gz")):
        assert uploads.clean_name(raw) == kept
    else:  # cut to 255 characters, it no longer ends in .json
        with pytest.raises(uploads.Refused):
            uploads.clean_name(raw)


def test_a_file_that_is_not_json_or_gzip_or_has_no_name_is_refused(registry):
    ticket = registry.session_ticket("s1", None)
    client = Client(registry)
    assert client.call("PUT", f"ticket={ticket}&name=notes.txt", [b"hi"], 2) == (
        415,
        {"error": "notes.txt: not a .json or .json.gz file"},
    )
    assert client.call("PUT", f"ticket={ticket}&name=%2F", [b"hi"], 2) == (
        400,
        {"error": "the upload has no file name"},
    )
    assert files_in(registry) == []


def test_only_the_owner_removes_an_upload(registry):
    mine, theirs = registry.session_ticket("s1", None), registry.session_ticket("s2", None)
    client = Client(registry)
    _, body = client.call("PUT", f"ticket={mine}&name=a.json", [b"{}"], 2)
    assert client.call("DELETE", f"ticket={theirs}&id={body['id']}")[0] == 200
    assert registry.get(body["id"], "s1") is not None  # still there
    assert client.call("DELETE", f"ticket=made-up&id={body['id']}")[0] == 403
    assert client.call("DELETE", f"ticket={mine}&id={body['id']}")[0] == 200
    assert registry.get(body["id"], "s1") is None and files_in(registry) == []


def test_a_session_keeps_its_ticket_and_cannot_take_anothers(registry):
    first = registry.session_ticket("s1", None)
    assert registry.session_ticket("s1", first) == first
    assert registry.session_ticket("s2", first) != first  # a ticket copied from another session is not reused
    assert registry.tickets[first] == "s1"


def test_the_sweep_deletes_the_files_and_tickets_of_ended_sessions_only(registry):
    client = Client(registry)
    ids = {}
    for session, size in (("gone", 300), ("gone", 20), ("open", 7)):
        ticket = registry.session_ticket(session, None)
        ids.setdefault(session, []).append(
            client.call("PUT", f"ticket={ticket}&name=a.json", [b"x" * size], size)[1]["id"]
        )
    assert registry.sweep(lambda session: session == "open") == 320
    assert files_in(registry) == ids["open"]
    assert set(registry.tickets.values()) == {"open"}
    assert registry.sweep(lambda session: session == "open") == 0


def test_the_route_answers_under_the_servers_base_url_path():
    from streamlit import config

    before = config.get_option("server.baseUrlPath")
    try:
        config.set_option("server.baseUrlPath", "/team/attn/")
        assert uploads.route().path == "/team/attn/api/upload" == uploads.route_path()
    finally:
        config.set_option("server.baseUrlPath", before)


def test_a_disk_that_fails_mid_upload_is_one_line_and_leaves_nothing(registry, monkeypatch):
    monkeypatch.setattr(uploads, "BUFFER", 10)
    ticket = registry.session_ticket("s1", None)
    real = uploads.Receiving.write

    def full(self, data):
        if self.size >= 20:
            raise OSError(28, "No space left on device")
        real(self, data)

    monkeypatch.setattr(uploads.Receiving, "write", full)
    status, body = Client(registry).call("PUT", f"ticket={ticket}&name=a.json", [b"x" * 20, b"y" * 20], 40)
    assert (status, body["error"]) == (507, "a.json: could not be written on the server (No space left on device)")
    assert files_in(registry) == [] and registry.files == {}


def test_a_spill_folder_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "taken").write_text("a file where the folder should be")
    registry = uploads.Registry(tmp_path / "taken" / "spill")
    ticket = registry.session_ticket("s1", None)
    status, body = Client(registry).call("PUT", f"ticket={ticket}&name=a.json", [b"{}"], 2)
    assert status == 507 and body["error"].startswith("the server cannot keep uploads (")


def test_when_the_server_stops_every_upload_and_the_folder_it_made_go(tmp_path, monkeypatch):
    monkeypatch.setattr(uploads.tempfile, "tempdir", str(tmp_path))
    made = uploads.Registry()  # makes its own folder under the temp dir
    given = uploads.Registry(tmp_path / "given")
    for registry in (made, given):
        ticket = registry.session_ticket("s1", None)
        assert Client(registry).call("PUT", f"ticket={ticket}&name=a.json", [b"{}"], 2)[0] == 200
    folder = made.folder()
    assert folder.parent == tmp_path and len(list(folder.iterdir())) == 1

    async def serve_and_stop():
        async with uploads.lifespan(None):
            pass

    monkeypatch.setattr(uploads, "REGISTRY", made)
    asyncio.run(serve_and_stop())
    assert not folder.exists() and made.files == {} and made.tickets == {}
    given.close()
    assert (tmp_path / "given").is_dir() and list((tmp_path / "given").iterdir()) == []  # a given folder stays, emptied


def test_an_upload_that_would_fill_the_disk_is_refused_unread(registry, monkeypatch):
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(
        uploads.shutil,
        "disk_usage",
        lambda path: usage(10**12, 10**12 - (uploads.DISK_RESERVE + 1000), uploads.DISK_RESERVE + 1000),
    )
    ticket = registry.session_ticket("s1", None)
    client = Client(registry, limit=10**9)
    assert client.call("PUT", f"ticket={ticket}&name=fits.json", [b"x" * 1000], 1000)[0] == 200
    status, body = client.call("PUT", f"ticket={ticket}&name=big.json", [b"x" * 1001], 1001)
    free = uploads.DISK_RESERVE + 1000
    assert (status, body["error"]) == (
        507,
        f"big.json: 1,001 bytes would leave the server's disk with less than 256 MiB free "
        f"({free:,} bytes free); not read",
    )
    assert client.received == 1  # only the first upload's body was read


def _big_enough_to_read_while_arriving(monkeypatch) -> bytes:
    import gzip

    from dashboard.engine.load import slices as load_slices

    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 1 << 20)
    monkeypatch.setattr(load_slices, "_EDGE_BYTES", 1 << 14)
    monkeypatch.setattr(uploads, "BUFFER", 1 << 18)
    data = gzip.decompress((Path(__file__).parent / "data" / "hta_a100_control.json.gz").read_bytes())
    assert len(data) > 8 << 20
    return data


def test_a_large_upload_is_parsed_as_it_arrives_and_load_trace_takes_that_trace(registry, monkeypatch):
    from polars.testing import assert_frame_equal

    from dashboard.engine import load
    from dashboard.engine.load import slices as load_slices

    data = _big_enough_to_read_while_arriving(monkeypatch)
    ticket = registry.session_ticket("s1", None)
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    status, body = Client(registry, limit=len(data)).call("PUT", f"ticket={ticket}&name=run.json", chunks, len(data))
    assert status == 200
    upload = registry.get(body["id"], "s1")
    assert upload.arrival is not None  # the upload owns its reading while it arrived
    real = load._load
    monkeypatch.setattr(load, "_load", lambda *a, **k: pytest.fail("parsed again after it arrived"))
    arrived = load.load_trace(upload.path, name="run.json", arrival=upload.arrival)
    assert upload.arrival.trace is None  # taken, not held twice
    monkeypatch.setattr(load, "_load", real)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    serial = load.load_trace(upload.path, name="run.json")
    assert_frame_equal(arrived.events, serial.events)
    assert arrived.meta == serial.meta and arrived.warnings == serial.warnings and arrived.size_bytes == len(data)


def test_the_catalog_hands_an_uploads_early_parse_to_load_trace(registry, monkeypatch, tmp_path):
    """The dashboard's path: the upload carries its reading (Upload.arrival) into the run picker's
    Pending, and open_all's load_trace takes that trace instead of parsing the file again."""
    from dashboard import catalog
    from dashboard.engine import load

    data = _big_enough_to_read_while_arriving(monkeypatch)
    ticket = registry.session_ticket("s1", None)
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    status, body = Client(registry, limit=len(data)).call("PUT", f"ticket={ticket}&name=run.json", chunks, len(data))
    upload = registry.get(body["id"], "s1")
    item = catalog.pending_upload(upload.name, upload.path, upload.size, upload.sha, set(), upload.arrival)
    monkeypatch.setattr(load, "_load", lambda *a, **k: pytest.fail("parsed again after it arrived"))
    runs, failures = catalog.open_all([item], cache=catalog.TraceCache(store=None))
    assert failures == [] and [r.trace.size_bytes for r in runs] == [len(data)]
    assert upload.arrival.trace is None  # the trace lives in the cache only


def test_an_upload_removed_or_cut_off_lets_go_of_its_early_parse(registry, monkeypatch):
    import threading

    data = _big_enough_to_read_while_arriving(monkeypatch)
    ticket = registry.session_ticket("s1", None)
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    status, body = Client(registry, limit=len(data)).call("PUT", f"ticket={ticket}&name=run.json", chunks, len(data))
    upload = registry.get(body["id"], "s1")
    early = upload.arrival
    assert registry.remove(upload.id, "s1")
    assert early.result() is None and early.trace is None  # nothing kept for a file that is gone
    status, body = Client(registry, limit=len(data)).call(
        "PUT", f"ticket={ticket}&name=run.json", chunks[:50], len(data), cut=True
    )
    assert status == 400 and files_in(registry) == []
    for thread in threading.enumerate():  # the cut upload's reading stopped with it
        if thread.name == "attnscope-arrival":
            thread.join(30)
            assert not thread.is_alive()
