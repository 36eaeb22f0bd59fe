"""What the commands read and write: the trace store they open, the trace files and folders they
load, the article's folders, the report files they write, and the exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from dashboard.engine.model.errors import TraceError

if TYPE_CHECKING:
    from dashboard.engine.model.trace import Trace
    from dashboard.engine.store.store import Store

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
_OPENED: list[Store] = []  # the stores this command opened: main() waits for their writers


def _store(args: argparse.Namespace) -> Store | None:
    """The trace store the command reads and fills (None with --no-store, or when it cannot be
    opened: then the command parses every file, after one warning)."""
    if getattr(args, "no_store", False):
        return None
    from dashboard.engine.store.store import Store

    try:
        store = Store(args.store) if args.store else Store()
        _OPENED.append(store)
        return store
    except TraceError as exc:
        print(f"attnscope: warning: {exc}; parsing without the store", file=sys.stderr)
        return None


def _load_all(paths: Sequence[str], store: Store | None = None) -> tuple[list[Trace], list[str]]:
    """Load every path (from the store when its bytes were parsed before); a file that cannot be
    read becomes one error line, the others still load. A newly parsed trace is written to the
    store by a thread of its own while the command goes on (Store.wait, in main, joins it)."""
    from dashboard.engine.model import slice_workers

    _prestart(paths, store)  # before the engine's imports, which the workers' own then run beside
    from dashboard.engine.load import load_trace

    traces, errors = [], []
    try:
        for i, path in enumerate(paths):
            more = i + 1 < len(paths)  # a large file's worker processes stay while more files follow
            try:
                traces.append(
                    store.open(path, keep_workers=more, background=True)[0]
                    if store is not None
                    else load_trace(path, keep_workers=more)
                )
            except TraceError as exc:
                errors.append(str(exc))
    finally:
        slice_workers.discard()  # started for a file that was read another way
    return traces, errors


# A first file to parse at least this large has polars' freed pages kept for a second
# (dashboard.keep_freed_pages): measured at 882-910 MB, where the peak stays under the JSON's size.
KEEP_FREED_PAGES_BYTES = 512 << 20


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _prestart(paths: Sequence[str], store: Store | None) -> None:
    """Start the slice workers now when the first file to parse (not one the store answers for:
    Store.open's own test) is one they read (slice_workers.prestart), and keep polars' freed pages
    a while when it is large (KEEP_FREED_PAGES_BYTES); both before polars and the engine are imported."""
    from dashboard import keep_freed_pages
    from dashboard.engine.model import slice_workers

    for path in paths:
        if store is not None:
            try:
                stat = os.stat(path)
            except OSError:
                return
            if store.known_file(str(Path(path).resolve()), stat) is not None:
                continue
        slice_workers.prestart(path)
        if _size(path) >= KEEP_FREED_PAGES_BYTES:
            keep_freed_pages()
        return


def _expand(paths: Sequence[str]) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """Files to read: each file as named, each folder's trace files (sorted, recursive); folder ->
    its files, for the per-rank table; and one error line per folder that holds no trace file."""
    from dashboard.engine.store.ingest import TRACE_SUFFIXES, discover

    files: list[str] = []
    folders: dict[str, list[str]] = {}
    skipped: list[str] = []
    empty: list[str] = []
    for path in paths:
        for folder, members in discover([path], skipped):
            names = [str(m) for m in members]
            files.extend(names)
            if folder is not None:
                folders[path] = names
                if not names:
                    empty.append(f"{path}: no trace files ({', '.join(TRACE_SUFFIXES)}) in this folder")
    for line in skipped:
        print(f"attnscope: warning: {line}", file=sys.stderr)
    return files, folders, empty


def _analysis_error(trace: Trace, exc: Exception) -> str:
    """One line for a trace that loaded but broke an analysis (an engine bug, or a trace stranger
    than any we have seen): the file, and what went wrong."""
    return f"{trace.source}: could not be analysed ({type(exc).__name__}: {exc})".replace("\n", " ")


def _article_folders(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split compare's paths: folders holding the article's tables (sweep.csv, dispatch.csv,
    e2e.csv, serve.csv) and everything else (the traces)."""
    from pathlib import Path

    from dashboard.engine.analyses.article import is_article_folder

    folders = [p for p in paths if is_article_folder(Path(p))]
    return folders, [p for p in paths if p not in folders]


def _read_articles(folders: Sequence[str]) -> tuple[list[Any], list[str]]:
    from pathlib import Path

    from dashboard.engine.analyses.article import ArticleError, read_article

    found, errors = [], []
    for folder in folders:
        try:
            found.append(read_article(Path(folder)))
        except ArticleError as exc:
            errors.append(str(exc))
    return found, errors


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        print(f"attnscope: error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return False
    print(f"attnscope: wrote {path}", file=sys.stderr)
    return True


def _open_store_run(ref: str, store: Store | None) -> Trace:
    """The trace of `store:RUN` (a run id or label, as `attnscope ls` prints them; its lowest rank)."""
    if store is None:
        raise TraceError(f"{ref}: reading a stored run needs the trace store (drop --no-store)")
    name = ref.split(":", 1)[1]
    runs = store.runs()  # newest first: a label added again names its latest run
    run = next((r for r in runs if r.run_id == name), None) or next((r for r in runs if r.label == name), None)
    if run is None or not run.ranks:
        raise TraceError(f"{ref}: no such run in {store.root} (see `attnscope ls`)")
    trace = store.get(min(run.ranks)[1])
    if trace is None:
        raise TraceError(f"{ref}: its trace was evicted from {store.root}; ingest it again")
    return trace
