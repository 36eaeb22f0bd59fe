"""Uploads streamed to disk: the dashboard's own upload route and the files it keeps per session.

Streamlit's st.file_uploader keeps each upload in the server's memory as bytes, about twice its
size while it is parsed (measured: a bare app with one st.file_uploader went from 81 to 1,902 MB
for a 910 MB file, and stayed there). The dashboard's uploader (dashboard/views/uploader.py) PUTs
each file to ROUTE instead. The route streams the body to a spill file, hashing it on the way, so
no upload is ever held in memory; the parser then reads the file as it reads one on disk. A
large plain-JSON upload is parsed while it arrives (dashboard.engine.load.arrival.Arrival): its slices go to
the parser's worker processes as their bytes land, so the trace is ready soon after the last byte.
The upload owns that reading (Upload.arrival): the catalog hands it to load_trace with the file,
and the upload lets go of it when it is removed, cut off or no longer needed (Upload.let_go).

Who may upload: a PUT names a ticket, a random token the app hands to one browser session with
the page (session_ticket). The route accepts it only while that session is alive on this server,
so neither another site (it cannot read the page) nor a client without a session can write
here. Each file is checked against the upload limit twice: on the declared length before a byte
is read, and on the bytes as they arrive. A session's files are deleted when the user removes them
or when the session ends (sweep), and all of them when the server stops (lifespan).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from dashboard.engine.load import arrival as arrivals

ROUTE = "/api/upload"
BUFFER = 4 << 20  # bytes gathered from the request before they are hashed and written, in a worker thread
MAX_NAME = 255  # characters of a file name kept
DISK_RESERVE = 256 << 20  # an upload that would leave less than this free on the uploads' disk is refused unread
SUFFIXES = (".json", ".gz")  # what the old st.file_uploader accepted (type=["json", "gz"])


class Refused(Exception):
    """An upload the route does not take: the HTTP status and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Upload:
    """One uploaded file on disk: its id (random, the browser keeps it), the name the user gave
    it, its size, SHA-256 (hex) and the session it belongs to."""

    id: str
    name: str
    size: int
    sha: str
    path: Path
    session: str
    # the reading started while it arrived (large plain JSON only), for load_trace(arrival=...)
    arrival: arrivals.Arrival | None = field(default=None, compare=False, repr=False)

    def let_go(self) -> None:
        """Drop what the reading while it arrived holds or will hold (the file was read, is gone,
        or was not needed)."""
        if self.arrival is not None:
            self.arrival.abandon()


def clean_name(raw: str) -> str:
    """The file name as the user gave it, without any folder part, control characters or
    surrounding blanks, at most MAX_NAME characters; Refused when nothing is left or it is not a
    .json / .gz file."""
    name = raw.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if c.isprintable()).strip()[:MAX_NAME]
    if not name:
        raise Refused(400, "the upload has no file name")
    if not name.lower().endswith(SUFFIXES):
        raise Refused(415, f"{name}: not a .json or .json.gz file")
    return name


class Receiving:
    """One upload being written: write() its bytes in order, then finish(), or abort()."""

    def __init__(
        self, registry: "Registry", session: str, name: str, limit: int, label: str, declared: int | None = None
    ) -> None:
        self.registry = registry
        self.session = session
        self.name = name
        self.limit = limit
        self.label = label  # how messages name the limit
        self.id = secrets.token_urlsafe(16)
        self.path = registry.folder() / self.id
        self.hash = hashlib.sha256()
        self.size = 0
        self.file = open(self.path, "xb")
        # a large trace is parsed while it arrives (arrivals.Arrival); load_trace on this path takes the result
        self.arrival = arrivals.arrival(self.path, name, declared)

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise Refused(413, f"{self.name}: more than {self.label}, the upload limit; not kept")
        self.hash.update(data)  # hashlib and file writes release the GIL for large buffers
        self.file.write(data)
        if self.arrival is not None:
            self.file.flush()  # on disk before the worker processes read it
            self.arrival.grew(self.size)

    def finish(self) -> Upload:
        self.file.close()
        if self.arrival is not None:
            self.arrival.finished(self.size)
        upload = Upload(self.id, self.name, self.size, self.hash.hexdigest(), self.path, self.session, self.arrival)
        with self.registry.lock:
            self.registry.files[upload.id] = upload
        return upload

    def abort(self) -> None:
        self.file.close()
        if self.arrival is not None:
            self.arrival.abandon()
        self.path.unlink(missing_ok=True)


class Registry:
    """The server's uploads: tickets by session and files by id, in a folder of its own (made on
    the first upload unless one is given; close() deletes it)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self.made = False  # whether folder() made the folder (then close() deletes it)
        self.lock = threading.Lock()
        self.tickets: dict[str, str] = {}  # ticket -> session id
        self.files: dict[str, Upload] = {}  # upload id -> upload

    def folder(self) -> Path:
        with self.lock:
            if self.root is None:
                self.root = Path(tempfile.mkdtemp(prefix="attnscope-uploads-"))
                self.made = True
            self.root.mkdir(parents=True, exist_ok=True)  # a given folder, or one a temp cleaner removed
            return self.root

    def close(self) -> None:
        """Delete every upload, and the folder when this registry made it (the server stops)."""
        with self.lock:
            files, self.files, self.tickets = list(self.files.values()), {}, {}
            root, made = self.root, self.made
        for upload in files:
            upload.let_go()
            upload.path.unlink(missing_ok=True)
        if made and root is not None:
            shutil.rmtree(root, ignore_errors=True)

    def session_ticket(self, session: str, ticket: str | None) -> str:
        """The ticket of a session: `ticket` (the one it was given before) when that is still
        this session's, else a new one."""
        with self.lock:
            if ticket is None or self.tickets.get(ticket) != session:
                ticket = secrets.token_urlsafe(24)
                self.tickets[ticket] = session
            return ticket

    def receive(
        self, ticket: str, raw_name: str, declared: int | None, limit: int, label: str, alive: Callable[[str], bool]
    ) -> Receiving:
        """Start an upload for the session holding `ticket`; Refused when the ticket is unknown,
        its session has ended, the name is not a trace's or the declared length is over `limit`."""
        with self.lock:
            session = self.tickets.get(ticket)
        if session is None or not alive(session):
            raise Refused(403, "this page's session has ended on the server; reload the page and upload again")
        name = clean_name(raw_name)
        if declared is not None and declared > limit:
            raise Refused(413, f"{name}: {declared:,} bytes is over the upload limit of {label}; not read")
        folder = self.folder()
        free = shutil.disk_usage(folder).free
        if declared is not None and declared > free - DISK_RESERVE:
            raise Refused(
                507,
                f"{name}: {declared:,} bytes would leave the server's disk with less than "
                f"{DISK_RESERVE >> 20} MiB free ({free:,} bytes free); not read",
            )
        return Receiving(self, session, name, limit, label, declared)

    def get(self, upload_id: str, session: str) -> Upload | None:
        """The upload with this id, when it belongs to `session`."""
        with self.lock:
            upload = self.files.get(upload_id)
        return upload if upload is not None and upload.session == session else None

    def remove(self, upload_id: str, session: str) -> bool:
        """Delete one of `session`'s uploads; whether there was one."""
        with self.lock:
            upload = self.files.get(upload_id)
            if upload is None or upload.session != session:
                return False
            del self.files[upload_id]
        upload.let_go()
        upload.path.unlink(missing_ok=True)
        return True

    def sweep(self, known: Callable[[str], bool]) -> int:
        """Forget the tickets and delete the files of sessions `known` no longer answers for;
        the bytes freed on disk."""
        with self.lock:
            gone = [u for u in self.files.values() if not known(u.session)]
            for upload in gone:
                del self.files[upload.id]
            for ticket, session in list(self.tickets.items()):
                if not known(session):
                    del self.tickets[ticket]
        for upload in gone:
            upload.let_go()
            upload.path.unlink(missing_ok=True)
        return sum(u.size for u in gone)


REGISTRY = Registry()


@contextlib.asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """st.App's lifespan: the uploads are deleted when the server stops (streamlit's shutdown
    does not run atexit handlers)."""
    try:
        yield None
    finally:
        REGISTRY.close()


def session_alive(session: str) -> bool:
    """Whether streamlit's runtime still knows the session (connected, or closed but within the
    time it waits for a reconnect)."""
    try:
        from streamlit.runtime import Runtime

        return Runtime.instance()._session_mgr.get_session_info(session) is not None
    except Exception:  # no runtime: no session can upload
        return False


def configured_limit(environ: dict[str, str] | None = None) -> tuple[int, str | None]:
    """The largest upload the dashboard parses, in bytes: $ATTNSCOPE_MAX_UPLOAD_BYTES when set,
    else streamlit's server.maxUploadSize (MiB, as streamlit counts it); and a line when the
    setting is not a whole number of bytes above 0. (runs.upload_limit, which the sidebar states,
    is this: kept here so that the upload route does not import the session layer above it.)"""
    from streamlit import config

    from dashboard import catalog

    return catalog.upload_limit(int(config.get_option("server.maxUploadSize")) * 1024 * 1024, environ)


def upload_limit() -> tuple[int, str]:
    """The upload limit in bytes (configured_limit, as the sidebar states it) and how messages
    name it."""
    from dashboard import catalog

    limit, _ = configured_limit()
    return limit, f"{catalog.format_bytes(limit)} ({limit:,} bytes)"


def route_path() -> str:
    """Where the route answers: ROUTE under streamlit's server.baseUrlPath, as the page is."""
    from streamlit import config

    base = str(config.get_option("server.baseUrlPath") or "").strip("/")
    return f"/{base}{ROUTE}" if base else ROUTE


def route(
    registry: Registry = REGISTRY,
    alive: Callable[[str], bool] = session_alive,
    limit: Callable[[], tuple[int, str]] = upload_limit,
) -> Any:
    """The Starlette route at route_path(): `PUT ROUTE?ticket=...&name=...` with the file as the body answers
    {"id", "name", "size"}; `DELETE ROUTE?ticket=...&id=...` removes one. Errors answer
    {"error": one line} with a 4xx status."""
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def put(request: Any) -> Any:
        params = request.query_params
        try:
            declared = int(request.headers["content-length"]) if "content-length" in request.headers else None
        except ValueError:
            return JSONResponse({"error": "the upload's Content-Length is not a number"}, status_code=400)
        most, label = limit()
        try:
            receiving = registry.receive(params.get("ticket", ""), params.get("name", ""), declared, most, label, alive)
        except Refused as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        except OSError as exc:  # the spill folder cannot be made or written
            return JSONResponse({"error": f"the server cannot keep uploads ({exc.strerror or exc})"}, status_code=507)
        gathered: list[bytes] = []
        held = 0
        try:
            async for chunk in request.stream():
                gathered.append(chunk)
                held += len(chunk)
                if held >= BUFFER:
                    await run_in_threadpool(receiving.write, b"".join(gathered))
                    gathered, held = [], 0
            if gathered:
                await run_in_threadpool(receiving.write, b"".join(gathered))
            upload = receiving.finish()
        except Refused as exc:
            receiving.abort()
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        except ClientDisconnect:  # the tab closed or the network dropped: nothing half-written stays
            receiving.abort()
            return JSONResponse(
                {"error": f"{receiving.name}: the upload was cut off after {receiving.size:,} bytes"}, status_code=400
            )
        except OSError as exc:  # the disk is full, or the folder went: said, and nothing half-written stays
            receiving.abort()
            return JSONResponse(
                {"error": f"{receiving.name}: could not be written on the server ({exc.strerror or exc})"},
                status_code=507,
            )
        except BaseException:  # the server stops: nothing half-written stays
            receiving.abort()
            raise
        return JSONResponse({"id": upload.id, "name": upload.name, "size": upload.size})

    async def delete(request: Any) -> Any:
        params = request.query_params
        with registry.lock:
            session = registry.tickets.get(params.get("ticket", ""))
        if session is None:
            return JSONResponse({"error": "unknown session"}, status_code=403)
        registry.remove(params.get("id", ""), session)
        return JSONResponse({"removed": params.get("id", "")})

    async def either(request: Any) -> Any:
        return await (put(request) if request.method == "PUT" else delete(request))

    return Route(route_path(), either, methods=["PUT", "DELETE"])
