"""Analyses kept with the trace: what a trace's analyses answered, stored beside its tables and
read back instead of computed again.

The store (store.py) keeps a parsed trace's tables; every analysis then ran again on each reopen,
so a reopened 1 GB trace took seconds to summarize and each dashboard tab recomputed. Each
one-argument analysis (model.per_trace: the kernel, family and step tables, copies, efficiency
rows, memory peaks, health, the summary) now asks the trace's `Kept` first:

    <store>/analyses/trace=<sha256>/version=<analysis version>/<module.function>.arrow | .json

- A table (polars DataFrame) is kept as Arrow IPC (read back memory-mapped, dtypes exact); a
  result made only of dicts with text keys, lists, text, whole and real numbers, booleans and
  None is kept as JSON (which gives back the same values in the same order); anything else
  (dataclasses, numpy arrays, tuples) is computed again each time.
- Each analysis declares what it returns (model.catalog, docs/analyses.md): a table unlike its
  declared schema is a bug of the analysis and put raises SchemaError naming it and the column;
  get treats a kept table of another schema (or a file of the other kind) as absent, so an old
  store never hands back a drifted table: it is computed again and replaced.
- The analysis version is the SHA-256 of the engine's source files (every .py and .c under
  dashboard/engine) and of the user's rule files (settings.RULES): any change to any
  analysis, or to the rules it reads, gives a new version, under which everything is computed
  again; a trace's folders of other versions are removed when the new one is first written.
- Writes are atomic (a temporary file renamed into place), so a reader never sees half a file;
  a file that cannot be written or read is computed again, never an error (a table unlike its
  schema is the one error: a bug, not a disk's state, raised by put at once). The folder lives
  apart from the trace's own (written by another thread while the analyses run), counts against
  the store's size cap with it, and goes with it when the store evicts the trace.
- The analyses' answers are written after the page's run that asked for them: the dashboard's
  page runs hold the writes (Writer.hold), put(later=True) checks the value at once and queues it,
  and a thread writes the queue once no page runs (the Kernels tab's first visit with the 21
  bundled H200 runs wrote 126 files, 0.1 s of its run). A read of a file still waiting is written
  first; removing a trace's files drops its waiting writes; what measures them (sizes, size: the
  sidebar's store box, the cap's eviction), Store.wait and the CLI's end write whatever waits
  first. Nothing held (the CLI, the computing ahead): written at once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import shutil
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# the whole engine (kept.py sits in store/, one floor down): a change to any analysis is a new version
ENGINE = Path(__file__).resolve().parent.parent
from dashboard.engine.model.constants import MISSING  # noqa: E402,F401  (re-exported: the model's sentinel)
from dashboard.engine.model.catalog import CATALOG, schema_problem  # noqa: E402


class SchemaError(ValueError):
    """An analysis returned a table unlike the schema it declares (per_trace(schema=...)): a bug."""


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    """SHA-256 over the engine's source files (path and bytes), read once per process (~2 ms)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in ENGINE.rglob("*") if p.suffix in (".py", ".c") and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(ENGINE)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def analysis_version() -> str:
    """The version of the analysis code and the rules it reads: 16 hex digits."""
    digest = hashlib.sha256(_source_digest().encode())
    for path in _rule_files():
        digest.update(str(path).encode())
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()[:16]


def _rule_files() -> list[Path]:
    """The user's rule files (rules.rule_files, settings.RULES): part of the version."""
    from dashboard.engine.rules import rule_files

    return [Path(p) for p in rule_files()]


def plain(value: Any) -> bool:
    """True when JSON gives the value back unchanged: dicts with text keys, lists, text, whole
    numbers, finite reals, booleans and None."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    return False


class Kept:
    """One stored trace's kept analyses, for this process's analysis version. `sha` may come later
    (resolve): a file parsed before its hash is known (Store.open's background) queues what its
    analyses answer until then, and writes it when the hash arrives."""

    def __init__(self, root: Path, sha: str | None) -> None:
        self.root = Path(root)
        self.version = analysis_version()
        self._lock = threading.Lock()
        self._queued: list[tuple[str, Any]] = []
        self._cleaned = False
        self.sha: str | None = None
        if sha is not None:
            self._name(sha)

    def _name(self, sha: str) -> None:
        self.trace_folder = self.root / "analyses" / f"trace={sha}"
        self.folder = self.trace_folder / f"version={self.version}"
        self.sha = sha

    def resolve(self, sha: str | None) -> None:
        """The trace's hash is known (None: it never will be; what was queued is dropped): write
        what was queued."""
        with self._lock:
            queued, self._queued = self._queued, []
            if sha is None:
                return
            self._name(sha)
            for key, value in queued:
                self._write(key, value)

    def get(self, key: str) -> Any:
        """The kept result of analysis `key`, or MISSING. A kept file that is not what the analysis
        declares (model.CATALOG: a table of other columns or dtypes, a table where JSON is declared,
        or JSON where a table is) is MISSING too: computed again and replaced, never handed back."""
        if self.sha is None:
            return MISSING  # a trace just parsed: nothing kept yet
        WRITER.wait_for(self.folder, key)  # (put in this process and not written yet: rare, a trace opened twice)
        declared = CATALOG.get(key)  # None: not imported here (the CLI's kept summary), or not an analysis
        if declared is None or declared.kind != "table":
            text = self.folder / f"{key}.json"
            try:
                return json.loads(text.read_text(encoding="utf-8"))  # (no polars for a kept summary)
            except FileNotFoundError:
                pass
            except (OSError, ValueError):
                return MISSING  # damaged or half-removed: computed again
            if declared is not None:
                return MISSING
        table = self.folder / f"{key}.arrow"
        if not table.is_file():
            return MISSING
        import polars as pl

        try:
            frame = pl.read_ipc(table)  # memory-mapped by default
        except (OSError, ValueError, TypeError, pl.exceptions.PolarsError):
            return MISSING
        if declared is not None and schema_problem(frame.schema, declared.schema) is not None:
            return MISSING  # kept by code that typed the table otherwise: computed again
        return frame

    def put(self, key: str, value: Any, later: bool = False) -> None:
        """Keep `value` when it is a table or plain JSON; anything else is not kept. A table for an
        analysis that declares its columns (model.CATALOG) must have exactly them: a frame of other
        columns or dtypes, or a table where the analysis declares JSON, is a bug of the analysis
        and raises SchemaError naming the analysis and the column. `later`: written by the
        process's writer thread (WRITER), not before this returns (the analyses' cache keeps what
        it computes this way)."""
        import polars as pl

        declared = CATALOG.get(key)
        if declared is not None and declared.kind == "table":
            if not isinstance(value, pl.DataFrame):
                raise SchemaError(f"analysis {key} returned {type(value).__name__}, not the table it declares")
            problem = schema_problem(value.schema, declared.schema)
            if problem is not None:
                raise SchemaError(f"analysis {key} returned a table unlike its declared schema: {problem}")
        elif declared is not None and isinstance(value, pl.DataFrame):
            raise SchemaError(
                f"analysis {key} returned a table, but declares {declared.kind} ({declared.json or declared.returns})"
            )
        if not isinstance(value, pl.DataFrame) and not plain(value):
            return
        with self._lock:
            if self.sha is None:
                self._queued.append((key, value))
            elif later:
                WRITER.add(self, key, value)
            else:
                self._write(key, value)

    def _write(self, key: str, value: Any) -> None:
        import polars as pl

        suffix = ".arrow" if isinstance(value, pl.DataFrame) else ".json"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if not self._cleaned:
                self._cleaned = True
                for old in self.trace_folder.iterdir():
                    if old.name != self.folder.name:
                        shutil.rmtree(old, ignore_errors=True)  # another version's: replaced
            tmp = self.folder / f".{key}.{uuid.uuid4().hex}.tmp"
            try:
                if suffix == ".arrow":
                    # a clone (columns shared): polars before 2.0 refuses to read a frame another
                    # thread is writing out, and resolve() writes from the store's writer thread
                    value.clone().write_ipc(tmp, compression="uncompressed")
                else:
                    tmp.write_text(json.dumps(value, separators=(",", ":")), encoding="utf-8")
                os.replace(tmp, self.folder / f"{key}{suffix}")
            finally:
                tmp.unlink(missing_ok=True)
        except (OSError, pl.exceptions.PolarsError, TypeError, ValueError):
            return  # a full disk or an odd column: the answer stands, only the keeping failed


class Writer:
    """The analyses' kept answers put while a page runs (hold), written once no page runs: by a
    thread of its own, one file at a time, in the order put, stopping while a page runs again.
    Written at once by the thread that puts them when nothing holds the writes (the CLI, the
    dashboard's computing ahead): a second Python thread writing beside the analyses made a first
    visit slower, not faster (the two take turns with the interpreter's lock)."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.holds = 0  # page runs in progress
        self.waiting: deque[tuple[Kept, str, Any]] = deque()
        self.writing: tuple[Path, str] | None = None  # (folder, key) of the write in progress
        self.thread: threading.Thread | None = None

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Around a page's run: what the analyses answer is written after it."""
        with self.changed:
            self.holds += 1
        try:
            yield
        finally:
            with self.changed:
                self.holds -= 1
                if self.holds == 0 and self.waiting and self.thread is None:
                    self.thread = threading.Thread(target=self._work, name="attnscope-kept-writer")
                    self.thread.start()

    def add(self, kept: Kept, key: str, value: Any) -> None:
        with self.changed:
            if self.holds:
                self.waiting.append((kept, key, value))
                return
        kept._write(key, value)

    def _work(self) -> None:
        while self._write_next(unheld=True):
            pass
        with self.changed:
            self.thread = None  # (a hold that ends from now on starts a new thread)
            if self.holds == 0 and self.waiting:  # (put between the last write and here)
                self.thread = threading.Thread(target=self._work, name="attnscope-kept-writer")
                self.thread.start()

    def _write_next(self, unheld: bool = False, match: Callable[[Path, str], bool] | None = None) -> bool:
        """Write the first waiting write (the first for which match(folder, key) holds; `unheld`:
        only while no page runs); False when there was none to write."""
        with self.changed:
            self.changed.wait_for(lambda: self.writing is None)  # one write at a time, taken and marked at once:
            if unheld and self.holds:  # (forget() sees a write either waiting or in progress, never between)
                return False
            found = next((w for w in self.waiting if match is None or match(w[0].folder, w[1])), None)
            if found is None:
                return False
            self.waiting.remove(found)
            kept, key, value = found
            self.writing = (kept.folder, key)
        try:
            kept._write(key, value)
        finally:
            with self.changed:
                self.writing = None
                self.changed.notify_all()
        return True

    def wait_for(self, folder: Path, key: str) -> None:
        """The write of `key` into `folder` made, if one waits (in this thread) or is in progress."""
        mine = lambda f, k: f == folder and k == key  # noqa: E731
        while self._write_next(match=mine):
            pass
        with self.changed:
            self.changed.wait_for(lambda: self.writing is None or not mine(*self.writing))

    def flush(self) -> None:
        """Every write put so far made (those waiting, in this thread)."""
        while self._write_next():
            pass
        with self.changed:
            self.changed.wait_for(lambda: self.writing is None)

    def forget(self, trace_folder: Path) -> None:
        """Drop the waiting writes of one trace's kept analyses (every version) and wait for the one
        in progress there: its folder is about to be removed."""
        with self.changed:
            self.waiting = deque(w for w in self.waiting if w[0].folder.parent != trace_folder)
            self.changed.wait_for(lambda: self.writing is None or self.writing[0].parent != trace_folder)


WRITER = Writer()


def flush() -> None:
    """Wait until every kept write this process put so far is on disk."""
    WRITER.flush()


def remove(root: Path, sha: str) -> None:
    """Remove a trace's kept analyses (every version): the store evicted the trace."""
    WRITER.forget(Path(root) / "analyses" / f"trace={sha}")
    shutil.rmtree(Path(root) / "analyses" / f"trace={sha}", ignore_errors=True)


def sizes(root: Path) -> dict[str, int]:
    """Bytes on disk of each trace's kept analyses (every version), by the trace's SHA-256: what
    they add to the store's size under its cap (store.py's eviction), once the writes waiting for a
    page's run to end (Writer) are made."""
    WRITER.flush()
    found: dict[str, int] = {}
    try:
        folders = list((Path(root) / "analyses").iterdir())
    except OSError:
        return found
    for folder in folders:
        if folder.name.startswith("trace="):
            found[folder.name.removeprefix("trace=")] = _bytes_under(folder)
    return found


def size(root: Path, sha: str) -> int:
    """Bytes on disk of one trace's kept analyses (every version), the waiting writes made first;
    0 when it has none."""
    WRITER.flush()
    return _bytes_under(Path(root) / "analyses" / f"trace={sha}")


def _bytes_under(folder: Path) -> int:
    """The sizes of the files under `folder`; one removed meanwhile (a writer's temporary file, a
    version replaced) counts as nothing."""
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_size
            except OSError:
                pass
    return total
