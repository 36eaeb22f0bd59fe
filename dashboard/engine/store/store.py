"""The trace store: parse a trace once, reopen it from Parquet, share it by id.

A folder (default: the user's cache dir, `~/.cache/attnscope`, or $ATTNSCOPE_STORE; a team
server names its own) holding:

    catalog.sqlite3                          the catalog (SQLite in WAL mode): traces, runs, files, views
    schema=<N>/trace=<sha256>/events.parquet one folder per parsed trace, keyed by the SHA-256 of the
                             flows.parquet   file's bytes and the engine's schema version; hive-style,
                             steps.parquet   so polars, DuckDB or Spark can scan a fleet without attnscope
                             memory.parquet  (memory events: no rows without profile_memory)
                             trace.json      (the Trace's other fields: source, meta, warnings, ...)
    tmp/                                     folders being written; renamed into place when complete

Writes are atomic: a trace's folder is written under tmp/ and renamed into place, and its catalog
row is added after the rename, so a half-written entry is never read. A folder of another schema
version is never read: its trace is parsed again. Runs name traces (one per rank); a run's label,
who added it (upload, cli, collector) and its notes live in the catalog; saved views (runs,
labels, baseline, tab, note) get short ids for a link in a review.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sqlite3
import threading
import time
import uuid
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Union

from dashboard.engine.store import kept
from dashboard.engine.store.hashing import Hashing, sha256_of  # noqa: F401  sha256_of: the store's key, named here too
from dashboard.engine.model import settings
from dashboard.engine.model.constants import TRACE_TABLES
from dashboard.engine.model.errors import TraceError

if TYPE_CHECKING:
    from dashboard.engine.model.trace import Trace

# polars, the model and the loader are imported when a trace is read or parsed: answering from
# kept analyses (Store.kept, `attnscope summary` of a file seen before) needs none of them.


def load_trace(*args: Any, **kwargs: Any) -> "Trace":
    """dashboard.engine.load.load_trace, imported on first use."""
    from dashboard.engine.load import load_trace as load

    return load(*args, **kwargs)


# Bump when the Trace's tables or fields change meaning: older entries are then parsed again.
# 2: events gained concrete_inputs; 3: their repeated text columns are Categorical (load.REPEATED_TEXT);
# 4: trace.json keeps the metadata's key order; 5: the memory table (profile_memory's events)
SCHEMA_VERSION = 5
TABLES = TRACE_TABLES
# What a freshly parsed trace lets go of once stored (read back if asked): no analysis reads flows.
LEFT_ON_DISK = ("flows",)
ADDED_BY = ("upload", "cli", "collector", "dashboard")
# The file is hashed through one buffer of this size, read into again and again: a new bytes
# object per 8 MB chunk grew the writer thread's own malloc arena by 17 MB, held for the process's
# life (glibc serves a size it has just freed from the arena, not from mapped pages).
_TRACE_COLUMNS = "sha, source, size, device_type, device_name, events, stored_bytes, created_at, last_opened, pinned"

_CATALOG = """
CREATE TABLE IF NOT EXISTS traces (
    sha TEXT NOT NULL, schema INTEGER NOT NULL, source TEXT NOT NULL, size INTEGER NOT NULL,
    device_type TEXT, device_name TEXT, events INTEGER NOT NULL, stored_bytes INTEGER NOT NULL,
    created_at REAL NOT NULL, last_opened REAL NOT NULL, pinned INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (sha, schema));
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, label TEXT NOT NULL, added_by TEXT NOT NULL, created_at REAL NOT NULL,
    notes TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS run_ranks (
    run_id TEXT NOT NULL, rank INTEGER NOT NULL, sha TEXT NOT NULL, PRIMARY KEY (run_id, rank));
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS views (
    view_id TEXT PRIMARY KEY, payload TEXT NOT NULL, created_at REAL NOT NULL);
"""


def default_root() -> Path:
    """$ATTNSCOPE_STORE, else $XDG_CACHE_HOME/attnscope, else ~/.cache/attnscope."""
    given = settings.STORE.value()
    if given:
        return Path(given)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "attnscope"


ENV_MAX_BYTES = settings.STORE_MAX_BYTES.name


def default_max_bytes(environ: dict[str, str] | None = None) -> int | None:
    """The store's size cap in bytes from $ATTNSCOPE_STORE_MAX_BYTES, or None (no cap) when unset.
    A value that is not a whole number of bytes above 0 is a TraceError (one line)."""
    try:
        return settings.STORE_MAX_BYTES.whole_bytes(environ)
    except settings.SettingError as exc:
        raise TraceError(f"{exc} (e.g. {50 << 30} for 50 GiB; unset it for no cap)") from None


@dataclass(frozen=True)
class StoredTrace:
    """A catalog row: the trace's id (sha), what it was called, its size in bytes (as uploaded),
    the device, complete events, bytes on disk in the store, and when it was last opened (epoch s)."""

    sha: str
    source: str
    size: int
    device_type: str | None
    device_name: str | None
    events: int
    stored_bytes: int
    created_at: float
    last_opened: float
    pinned: bool


@dataclass(frozen=True)
class Run:
    """A run: one trace per rank (rank 0 for a single-process trace), a label, who added it."""

    run_id: str
    label: str
    added_by: str
    created_at: float
    notes: str
    ranks: tuple[tuple[int, str], ...]  # (rank, sha)


class Store:
    """A folder of parsed traces with its catalog. Safe for several processes at once: SQLite in
    WAL mode serializes catalog writes, and trace folders appear by atomic rename."""

    def __init__(self, root: Union[str, os.PathLike, None] = None, max_bytes: int | None = None) -> None:
        """`max_bytes`: the size cap (bytes on disk of its traces' tables and kept analyses), else
        $ATTNSCOPE_STORE_MAX_BYTES, else none. Over it, storing a trace removes the least recently
        opened unpinned ones. A trace's analyses are kept after it is stored (as they are
        computed), so they count from the next store on."""
        self.root = Path(root) if root is not None else default_root()
        self._writers: list[threading.Thread] = []
        self.write_errors: list[str] = []
        self.max_bytes = max_bytes if max_bytes is not None else default_max_bytes()
        try:
            (self.root / "tmp").mkdir(parents=True, exist_ok=True)
            self._create_catalog()
        except (OSError, sqlite3.Error) as exc:
            raise TraceError(f"trace store {self.root}: cannot open ({exc})") from None

    def _create_catalog(self) -> None:
        """Switch a new catalog to WAL (persistent in the file) and create its tables. Processes
        that open a fresh store at the same moment race for the rollback-journal locks, where
        SQLite answers "database is locked" at once rather than calling the busy handler (the
        deadlock it avoids); so the first steps are retried for up to 30 s, and the tables are
        created in one IMMEDIATE transaction, which waits for the write lock up front."""
        deadline = time.monotonic() + 30
        delay = 0.005
        while True:
            try:
                with closing(self._connect()) as db:
                    if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                        db.execute("PRAGMA journal_mode=WAL")
                    db.execute("BEGIN IMMEDIATE")
                    for statement in _CATALOG.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute("COMMIT")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.root / "catalog.sqlite3", timeout=30, isolation_level=None)

    def _folder(self, sha: str) -> Path:
        return self.root / f"schema={SCHEMA_VERSION}" / f"trace={sha}"

    # -- traces -------------------------------------------------------------------------------

    def has(self, sha: str) -> bool:
        """True when the trace is stored under this schema version (catalog row and folder)."""
        with closing(self._connect()) as db:
            row = db.execute("SELECT 1 FROM traces WHERE sha=? AND schema=?", (sha, SCHEMA_VERSION)).fetchone()
        return row is not None and (self._folder(sha) / "trace.json").is_file()

    def get(self, sha: str, *, touch: bool = True) -> Trace | None:
        """The stored trace, or None when it is not stored (or only under another schema version,
        or damaged). Its fields are read now and each table from Parquet when first asked for
        (model.ReopenedTrace): a trace whose analyses are all kept never reads its tables. Marks
        it as opened now (for eviction), unless `touch` is False: a caller opening many traces
        marks them all at once with touch() (one write to the catalog instead of one each)."""
        if not self.has(sha):
            return None
        folder = self._folder(sha)
        from dashboard.engine.model.trace import Cut, ReopenedTrace

        try:
            fields = json.loads((folder / "trace.json").read_text(encoding="utf-8"))
            if not all(_looks_like_parquet(folder / f"{name}.parquet") for name in TABLES):
                return None  # damaged on disk: the caller parses the file again
        except (OSError, ValueError):
            return None
        cut = fields.pop("cut", None)
        if cut:
            fields["cut"] = Cut(**cut)
        trace = ReopenedTrace.stored(lambda name: self._table(folder, name, fields.get("source", sha)), fields)
        trace._kept = kept.Kept(self.root, sha)
        if touch:
            self.touch([sha])
        return trace

    def touch(self, shas: Iterable[str]) -> None:
        """Mark these stored traces as opened now (the eviction order), in one transaction."""
        now = time.time()
        rows = [(now, sha, SCHEMA_VERSION) for sha in dict.fromkeys(shas)]
        if not rows:
            return
        with closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("UPDATE traces SET last_opened=? WHERE sha=? AND schema=?", rows)
            db.execute("COMMIT")

    def _table(self, folder: Path, name: str, source: str):
        """One table of a stored trace, read when first asked for (ReopenedTrace)."""
        import polars as pl

        try:
            return pl.read_parquet(folder / f"{name}.parquet", memory_map=True)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise TraceError(
                f"{source}: its stored copy in {self.root} could not be read ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); open it again with --no-store"
            ) from None

    def put(self, trace: Trace, sha: str) -> list[StoredTrace]:
        """Store a parsed trace under its file's SHA-256 (atomically; a no-op when present), then
        keep the store under its cap: the catalog rows of the traces removed to do so. The
        trace's analyses are kept from then on too (kept.py), those computed after this call."""
        if trace._kept is None:
            trace._kept = kept.Kept(self.root, sha)
        if self.has(sha):
            return []
        from dashboard.engine.analyses.summary import device_info

        tmp = self.root / "tmp" / uuid.uuid4().hex
        tmp.mkdir(parents=True)
        try:
            for name in TABLES:
                getattr(trace, name).write_parquet(tmp / f"{name}.parquet", compression="lz4")
            (tmp / "trace.json").write_text(
                json.dumps(_fields(trace)), encoding="utf-8"
            )  # dict order kept: a reopen reads as a parse
            final = self._folder(sha)
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(tmp, final)
            except OSError:  # another process stored it first (or a stale folder from a crash)
                if not (final / "trace.json").is_file():
                    shutil.rmtree(final, ignore_errors=True)
                    os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        stored = sum(f.stat().st_size for f in self._folder(sha).iterdir())
        device = device_info(trace)
        now = time.time()
        with closing(self._connect()) as db:
            db.execute(
                "INSERT OR REPLACE INTO traces VALUES (?,?,?,?,?,?,?,?,?,?,"
                "COALESCE((SELECT pinned FROM traces WHERE sha=? AND schema=?), 0))",
                (
                    sha,
                    SCHEMA_VERSION,
                    trace.source,
                    trace.size_bytes,
                    device["type"],
                    device["name"],
                    trace.events.height,
                    stored,
                    now,
                    now,
                    sha,
                    SCHEMA_VERSION,
                ),
            )
        return self.evict_rows()

    def let_go(self, sha: str, *traces: Trace) -> None:
        """Stored under `sha` (not evicted at once), `traces` let go of LEFT_ON_DISK (Trace.leave_on_disk)."""
        if self.has(sha):
            folder = self._folder(sha)
            for trace in traces:
                trace.leave_on_disk(lambda name, t=trace: self._table(folder, name, t.source), LEFT_ON_DISK)

    def open(
        self,
        path: Union[str, os.PathLike],
        name: str | None = None,
        *,
        keep_workers: bool = False,
        background: bool = False,
    ) -> tuple[Trace, str]:
        """(trace, sha) for a trace file: from the store when its bytes were parsed before, else
        parsed and stored. A file seen before with the same size and mtime is not hashed again.
        `keep_workers`: as load_trace's (more large files follow). `background`: a file not seen
        at this path is parsed at once, and hashed and written to the store by a thread of its own
        while the caller goes on (its analyses, its answer); its sha is then "" (not known yet).
        `wait()` joins the writers (the process also waits for them)."""
        path = Path(path)
        try:
            stat = path.stat()
        except OSError:
            stat = None
        if stat is None or not path.is_file():
            return load_trace(path, name=name), ""  # load_trace names the problem
        key = str(path.resolve())
        sha = self._known(key, stat)
        if sha is not None:
            stored = self.get(sha)
            if stored is not None:
                return stored, sha
        if background:
            # A file not seen at this path: parse at once and hash it meanwhile, on a core the load
            # leaves idle (hashing.Hashing; the hash of 1 GB is 0.7-0.8 s: on the critical path it
            # cost a first open 9%). Bytes stored before under another path are parsed again here:
            # the price of a renamed copy, where --no-store would have parsed it too.
            hashing = Hashing(path)
            trace = load_trace(path, name=name, keep_workers=keep_workers)
            trace._kept = kept.Kept(self.root, None)
            self._write_later(trace, hashing, (key, stat.st_size, stat.st_mtime_ns))
            return trace, ""
        try:
            sha = sha256_of(path)  # streamed: the loader reads the file itself, in its own way
        except OSError as exc:
            raise TraceError(f"{name or path.name}: cannot read ({exc.strerror or exc})") from None
        trace = self.get(sha)
        if trace is None:
            trace = load_trace(path, name=name, keep_workers=keep_workers)
            trace._kept = kept.Kept(self.root, sha)
            self.put(trace, sha)
            self.let_go(sha, trace)
        self._remember(key, stat.st_size, stat.st_mtime_ns, sha)
        return trace, sha

    def known_file(self, key: str, stat: os.stat_result) -> str | None:
        """The SHA-256 of the file seen before at this resolved path with this size and mtime,
        or None (not seen, or changed since)."""
        return self._known(key, stat)

    def known_files(self, keys: list[tuple[str, int, int]]) -> dict[tuple[str, int, int], str]:
        """known_file for many (resolved path, size, mtime_ns) at once, over one connection."""
        query = "SELECT sha FROM files WHERE path=? AND size=? AND mtime_ns=?"
        with closing(self._connect()) as db:
            rows = [(k, db.execute(query, k).fetchone()) for k in keys]
        return {k: row[0] for k, row in rows if row is not None}

    def remember_file(self, key: str, stat: os.stat_result, sha: str) -> None:
        """Remember the SHA-256 of the file at this resolved path, with its size and mtime."""
        self._remember(key, stat.st_size, stat.st_mtime_ns, sha)

    def remember_files(self, rows: list[tuple[str, int, int, str]]) -> None:
        """remember_file for many (resolved path, size, mtime_ns, sha) in one transaction: one
        commit, not one per file (39 bundled files: 0.6-1.1 s of commits on a fresh store)."""
        with closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT OR REPLACE INTO files VALUES (?,?,?,?)", rows)
            db.execute("COMMIT")

    def _known(self, key: str, stat: os.stat_result) -> str | None:
        """The SHA-256 of a file seen before at this path with this size and mtime, or None."""
        with closing(self._connect()) as db:
            row = db.execute(
                "SELECT sha FROM files WHERE path=? AND size=? AND mtime_ns=?", (key, stat.st_size, stat.st_mtime_ns)
            ).fetchone()
        return row[0] if row is not None else None

    def _remember(self, key: str, size: int, mtime_ns: int, sha: str) -> None:
        with closing(self._connect()) as db:
            db.execute("INSERT OR REPLACE INTO files VALUES (?,?,?,?)", (key, size, mtime_ns, sha))

    def _write_later(self, trace: Trace, source: Union[Hashing, bytes], file_row: tuple[str, int, int] | None) -> None:
        """In a thread of its own: hash the bytes (or wait for the file's Hashing), store the trace under that hash
        (put), remember the file (its catalog row), and let the trace's kept analyses be written
        (they wait for the hash). polars writes Parquet and hashlib hashes without the GIL, so on
        two cores this overlaps the caller's analyses instead of adding to them. A failure (a full
        disk, a file changed meanwhile) costs only the keeping: its message waits in `write_errors`."""
        import polars as pl

        from dashboard.engine.model.trace import detached

        mine = detached(trace)  # the caller's analyses read the trace while this thread writes it out

        def write() -> None:
            sha = None
            try:
                sha = source.result() if isinstance(source, Hashing) else sha256_of(source)
                self.put(mine, sha)
                if file_row is not None:
                    self._remember(*file_row, sha)
                self.let_go(sha, trace)
            except (OSError, sqlite3.Error, pl.exceptions.PolarsError) as exc:
                self.write_errors.append(f"{trace.source}: not kept in the trace store {self.root} ({exc})")
            finally:
                trace._kept.resolve(sha)

        thread = threading.Thread(target=write, name="attnscope-store-writer")
        thread.start()
        self._writers.append(thread)

    def wait(self) -> list[str]:
        """Wait for the background writers (the traces' and the kept analyses'); the messages of the
        writes that failed."""
        while self._writers:
            self._writers.pop().join()
        kept.flush()
        return list(self.write_errors)

    def kept(self, path: Union[str, os.PathLike], key: str) -> Any:
        """The kept result of analysis `key` (a per_trace analysis's module.function) for a file
        seen before at this path with this size and mtime, without reading the trace's tables;
        kept.MISSING when there is none (not seen, evicted, another analysis version)."""
        path = Path(path)
        try:
            stat = path.stat()
        except OSError:
            return kept.MISSING
        sha = self._known(str(path.resolve()), stat)
        if sha is None or not self.has(sha):
            return kept.MISSING
        value = kept.Kept(self.root, sha).get(key)
        if value is not kept.MISSING:
            with closing(self._connect()) as db:
                db.execute(
                    "UPDATE traces SET last_opened=? WHERE sha=? AND schema=?", (time.time(), sha, SCHEMA_VERSION)
                )
        return value

    def open_bytes(self, data: bytes, name: str, *, background: bool = False) -> tuple[Trace, str]:
        """(trace, sha) for an upload's bytes: from the store, else parsed and stored (by a
        thread of its own with `background`, as open's)."""
        sha = sha256_of(data)
        trace = self.get(sha)
        if trace is None:
            trace = load_trace(data, name=name)
            trace._kept = kept.Kept(self.root, None if background else sha)
            if background:
                self._write_later(trace, data, None)
            else:
                self.put(trace, sha)
                self.let_go(sha, trace)
        return trace, sha

    def traces(self) -> list[StoredTrace]:
        """Every stored trace of this schema version, most recently opened first."""
        with closing(self._connect()) as db:
            rows = db.execute(
                f"SELECT {_TRACE_COLUMNS} FROM traces WHERE schema=? ORDER BY last_opened DESC, sha",
                (SCHEMA_VERSION,),
            ).fetchall()
        held = kept.sizes(self.root)
        return [self._row(row, held) for row in rows]

    def trace(self, sha: str) -> StoredTrace | None:
        """The catalog row of one stored trace (this schema version), or None."""
        with closing(self._connect()) as db:
            row = db.execute(
                f"SELECT {_TRACE_COLUMNS} FROM traces WHERE sha=? AND schema=?", (sha, SCHEMA_VERSION)
            ).fetchone()
        return self._row(row, {sha: kept.size(self.root, sha)}) if row else None  # its own folder only

    @staticmethod
    def _row(row: tuple, held: dict[str, int]) -> StoredTrace:
        """A catalog row whose stored_bytes count the trace's kept analyses with its tables: its bytes
        on disk in the store, as the cap counts them."""
        found = StoredTrace(*row[:-1], pinned=bool(row[-1]))
        return dataclasses.replace(found, stored_bytes=found.stored_bytes + held.get(found.sha, 0))

    def pin(self, sha: str, pinned: bool = True) -> None:
        """Keep a trace whatever the size cap (a run the team keeps); pinned=False lets it go again."""
        with closing(self._connect()) as db:
            db.execute("UPDATE traces SET pinned=? WHERE sha=?", (int(pinned), sha))

    def used_bytes(self) -> int:
        """Bytes on disk of the stored traces (this schema version) and of their kept analyses
        (kept.py): what the cap is measured on."""
        with closing(self._connect()) as db:
            rows = db.execute("SELECT sha, stored_bytes FROM traces WHERE schema=?", (SCHEMA_VERSION,)).fetchall()
        held = kept.sizes(self.root)
        return sum(int(stored) + held.get(sha, 0) for sha, stored in rows)

    def evict(self) -> list[str]:
        """Under a size cap, remove the least recently opened unpinned traces until the store fits;
        the ids removed. Runs that named them lose those ranks."""
        return [t.sha for t in self.evict_rows()]

    def evict_rows(self) -> list[StoredTrace]:
        """evict(), giving the catalog rows of the traces removed (what they were called, sizes; their
        stored_bytes count the kept analyses removed with them: what the removal freed)."""
        if self.max_bytes is None:
            return []
        removed: list[StoredTrace] = []
        stored = self.traces()  # stored_bytes: each trace's tables and its kept analyses
        total = sum(t.stored_bytes for t in stored)
        for trace in sorted(stored, key=lambda t: (t.last_opened, t.sha)):
            if total <= self.max_bytes:
                break
            if trace.pinned:
                continue
            with closing(self._connect()) as db:
                db.execute("DELETE FROM traces WHERE sha=? AND schema=?", (trace.sha, SCHEMA_VERSION))
            shutil.rmtree(self._folder(trace.sha), ignore_errors=True)
            kept.remove(self.root, trace.sha)
            total -= trace.stored_bytes
            removed.append(trace)
        return removed

    # -- runs and views -------------------------------------------------------------------------

    def add_run(
        self, ranks: Iterable[tuple[int, str]], label: str, added_by: str, notes: str = "", run_id: str | None = None
    ) -> str:
        """Name stored traces as one run (rank, sha pairs); returns the run id (by default the
        first 12 hex digits of the SHA-256 of its traces' ids, so the same files make the same run)."""
        if added_by not in ADDED_BY:
            raise ValueError(f"added_by must be one of {', '.join(ADDED_BY)}")
        ranks = tuple(sorted(ranks))
        run_id = run_id or hashlib.sha256(" ".join(f"{r}:{s}" for r, s in ranks).encode()).hexdigest()[:12]
        with closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            exists = db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if not exists:
                db.execute("INSERT INTO runs VALUES (?,?,?,?,?)", (run_id, label, added_by, time.time(), notes))
                db.executemany("INSERT OR REPLACE INTO run_ranks VALUES (?,?,?)", [(run_id, r, s) for r, s in ranks])
            db.execute("COMMIT")
        return run_id

    def runs(self) -> list[Run]:
        """Every run, newest first."""
        with closing(self._connect()) as db:
            rows = db.execute(
                "SELECT run_id, label, added_by, created_at, notes FROM runs ORDER BY created_at DESC, run_id"
            ).fetchall()
            ranks = db.execute("SELECT run_id, rank, sha FROM run_ranks ORDER BY run_id, rank").fetchall()
        by_run: dict[str, list[tuple[int, str]]] = {}
        for run_id, rank, sha in ranks:
            by_run.setdefault(run_id, []).append((rank, sha))
        return [Run(*row, ranks=tuple(by_run.get(row[0], ()))) for row in rows]

    def run(self, run_id: str) -> Run | None:
        return next((r for r in self.runs() if r.run_id == run_id), None)

    def set_label(self, run_id: str, label: str) -> None:
        with closing(self._connect()) as db:
            db.execute("UPDATE runs SET label=? WHERE run_id=?", (label, run_id))

    def save_view(self, payload: dict[str, Any]) -> str:
        """Store a view (runs, labels, baseline, tab, note) and return its short id (the first 10
        hex digits of the SHA-256 of its canonical JSON: the same view gets the same id)."""
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        view_id = hashlib.sha256(text.encode()).hexdigest()[:10]
        with closing(self._connect()) as db:
            db.execute("INSERT OR IGNORE INTO views VALUES (?,?,?)", (view_id, text, time.time()))
        return view_id

    def view(self, view_id: str) -> dict[str, Any] | None:
        with closing(self._connect()) as db:
            row = db.execute("SELECT payload FROM views WHERE view_id=?", (view_id,)).fetchone()
        return json.loads(row[0]) if row else None


def _looks_like_parquet(path: Path) -> bool:
    """Whether the file starts and ends with Parquet's magic (a cheap check at reopen; the tables
    themselves are read when first asked for)."""
    with open(path, "rb") as fh:
        if fh.read(4) != b"PAR1":
            return False
        fh.seek(-4, os.SEEK_END)
        return fh.read(4) == b"PAR1"


def _fields(trace: Trace) -> dict[str, Any]:
    """The Trace's fields besides its tables, as JSON (the cut as a dict)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(trace):
        if f.name in TABLES or f.name.startswith("_"):
            continue
        value = getattr(trace, f.name)
        out[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return out
