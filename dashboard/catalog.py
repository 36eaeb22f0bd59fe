"""The dashboard's run picker, without streamlit: where runs come from, parsing each file once, the store.

Sources, in display order: every bundled collection (sample_traces/*/runs.json, one run per
manifest entry), extra paths named by `streamlit run dashboard/app.py -- PATH...` or by the
ATTNSCOPE_TRACES environment variable (os.pathsep-separated; a folder with runs.json opens as a
collection, any other folder as its *.json / *.json.gz files, and those files are one run of
several ranks when they carry distinct distributedInfo ranks), runs of the trace store's catalog
a link names (`store/<run id>`), then the user's uploads. What cannot be opened is a Failure
naming it (a runs.json that is not a JSON object, a run its manifest lists but whose file is
gone, an entry or a symbolic link leading out of its folder, an extra path that does not exist,
an upload over the limit).

A TraceCache holds parsed traces by the SHA-256 of the file's bytes (least recently used out
first) and remembers failures by hash, so nothing is parsed twice; behind it the trace store
(dashboard.engine.store.store: Parquet + a SQLite catalog) reopens what any process parsed before.
No streamlit here: dashboard/runs.py makes one TraceCache per server process and keeps what a
user picked; tests and tools use this module directly. It reads the command line, uploads and
run labels: the dashboard's run picker, so it lives beside the dashboard, not in the engine
(tests/test_layers.py keeps the engine from importing it). Finding the sources and labelling
the runs is dashboard/catalog_sources.py's; its names are importable from here as well.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from dashboard.catalog_sources import (
    DASHBOARD as DASHBOARD,
    ENV_TRACES as ENV_TRACES,
    FILES as FILES,
    MANIFEST,
    REPO_ROOT as REPO_ROOT,
    SAMPLE_ROOT,
    TRACE_SUFFIXES as TRACE_SUFFIXES,
    Collection as Collection,
    Facts,
    Failure,
    Source,
    STORED as STORED,
    UPLOADS,
    _folder_sources as _folder_sources,
    _json_kind as _json_kind,
    _manifest_failure as _manifest_failure,
    _path_failure as _path_failure,
    _unique_ids as _unique_ids,
    default_label,
    discover as discover,
    extra_paths as extra_paths,
    file_source as file_source,
    group_source,
    is_trace_name as is_trace_name,
    origin,
    read_collection as read_collection,
    trace_stem as trace_stem,
    unique_labels as unique_labels,
    upload_source,
)
from dashboard.engine import Trace, TraceError, load_trace
from dashboard.engine.store import kept
from dashboard.engine.model.trace import detached
from dashboard.engine.analyses.article import is_article_folder as is_article_folder
from dashboard.engine.store.ingest import one_job, world_of
from dashboard.engine.store.ingest import outside as outside
from dashboard.engine.compare.ranks import rank_of, slowest_rank
from dashboard.engine.compare.review import format_bytes
from dashboard.engine.store.store import Store, StoredTrace
from dashboard.engine.model import settings

if TYPE_CHECKING:
    from dashboard.engine.load.arrival import Arrival

MAX_CACHED_TRACES = 32
ENV_NO_STORE = settings.NO_STORE.name  # set (to anything but '') to keep parsed traces in memory only
ENV_MAX_UPLOAD = settings.MAX_UPLOAD_BYTES.name  # bytes; else the server's own upload limit


@dataclass(frozen=True)
class Run:
    """A parsed run: where it came from, its default label, the trace and the file's hash.

    `ranks` holds every rank's trace (rank -> Trace) and `digests` each rank's file hash; `trace`
    is the slowest rank's (engine ranks.slowest_rank), so tabs that compare runs compare slowest
    rank with slowest rank. A one-trace run has ranks == {rank_of(trace) or 0: trace}.
    `size_bytes` counts every rank's file."""

    source: Source
    label: str
    trace: Trace
    digest: str
    size_bytes: int
    ranks: dict[int, Trace] = field(default_factory=dict)
    digests: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ranks:
            rank = rank_of(self.trace) or 0
            object.__setattr__(self, "ranks", {rank: self.trace})
            object.__setattr__(self, "digests", {rank: self.digest})

    @property
    def facts(self) -> Facts:
        """What the run picker reads of the run (its trace's: the slowest rank's)."""
        return Facts.of(self.trace)


def digest_of(data: bytes) -> str:
    """SHA-256 of a file's bytes, hex."""
    return hashlib.sha256(data).hexdigest()


class TraceCache:
    """Parsed traces by content hash (least recently used out first), and failures by hash."""

    def __init__(self, capacity: int = MAX_CACHED_TRACES, store: Store | None = None) -> None:
        self.capacity = capacity
        self.store = store
        self.store_problem: str | None = None  # why the store could not be used, once
        self.traces: OrderedDict[str, Trace] = OrderedDict()
        self.failures: dict[str, str] = {}
        self.file_digests: dict[tuple[str, int, int], str] = {}
        self.slowest: dict[tuple[tuple[int, str], ...], int] = {}  # (rank, sha)... -> the slowest rank
        self.parses = 0  # how many times a file was actually parsed (tests read this)
        self.lock = threading.Lock()

    def hold_at_least(self, needed: int) -> None:
        """Room for `needed` traces (what one call of open_all needs at once) beside
        MAX_CACHED_TRACES more: a cache smaller than one rerun's set of runs would miss on every
        one of them in every rerun, each reread from the store (the 35 bundled runs against 32
        places: 0.4-1 s added to every tab switch), while those traces are all in memory during
        the run anyway."""
        with self.lock:
            self.capacity = max(self.capacity, needed + MAX_CACHED_TRACES)

    def get(self, digest: str) -> Trace | None:
        with self.lock:
            trace = self.traces.get(digest)
            if trace is not None:
                self.traces.move_to_end(digest)
            return trace

    def put(self, digest: str, trace: Trace) -> None:
        with self.lock:
            self.traces[digest] = trace
            self.traces.move_to_end(digest)
            while len(self.traces) > self.capacity:
                self.traces.popitem(last=False)


def server_cache(environ: dict[str, str] | None = None) -> TraceCache:
    """A TraceCache backed by the trace store ($ATTNSCOPE_STORE, capped by
    $ATTNSCOPE_STORE_MAX_BYTES), or by none when $ATTNSCOPE_NO_STORE is set; a store that cannot
    be opened leaves the cache in memory only, with the reason in store_problem."""
    environ = dict(os.environ) if environ is None else environ
    cache = TraceCache()
    if environ.get(ENV_NO_STORE):
        return cache
    try:
        cache.store = Store()
    except TraceError as exc:
        cache.store_problem = one_line(str(exc))
    return cache


def from_store(cache: TraceCache, digest: str, touch: bool = True) -> Trace | None:
    """The trace from the store, or None (not stored, or the store failed: said once).
    `touch`: mark it opened now (False: the caller marks a batch with touch_stored)."""
    if cache.store is None:
        return None
    try:
        return cache.store.get(digest, touch=touch)
    except Exception as exc:  # a damaged catalog or a full disk must not stop the dashboard
        cache.store_problem = f"trace store {cache.store.root}: {type(exc).__name__}: {one_line(str(exc))}"
        return None


def touch_stored(cache: TraceCache, digests: list[str]) -> None:
    """Mark the traces reopened from the store as opened now, in one write (see from_store)."""
    if cache.store is None or not digests:
        return
    try:
        cache.store.touch(digests)
    except Exception as exc:  # a locked or damaged catalog must not stop the dashboard
        cache.store_problem = f"trace store {cache.store.root}: {type(exc).__name__}: {one_line(str(exc))}"


def into_store(cache: TraceCache, source: "Source", trace: Trace, digest: str) -> list[StoredTrace]:
    """Keep a parsed trace in the store; an upload is also a run of the catalog (for links). The
    store then keeps under its cap: the traces it removed to do so."""
    if cache.store is None:
        return []
    removed: list[StoredTrace] = []
    try:
        removed = cache.store.put(trace, digest)
        with cache.lock:
            held = cache.traces.get(digest)  # the trace the tabs read (`trace` may be its detached copy)
        cache.store.let_go(digest, *(t for t in (trace, held) if t is not None))  # (twice the same: harmless)
        if source.id.startswith("upload/"):
            cache.store.add_run([(rank_of(trace) or 0, digest)], source.name, "upload")
    except Exception as exc:
        cache.store_problem = f"trace store {cache.store.root}: {type(exc).__name__}: {one_line(str(exc))}"
    return removed


def file_digest(cache: TraceCache, path: Path) -> tuple[str, bytes | None]:
    """The hash of a file on disk, remembered by (path, mtime, size) in this process and in the
    trace store's catalog; bytes are returned only when the file had to be read."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    known = cache.file_digests.get(key)
    if known is None and cache.store is not None:
        # the store's catalog remembers files by path, size and mtime across processes: a restarted
        # dashboard does not read a 1 GB trace again only to hash it (about 1.5 s)
        try:
            known = cache.store.known_file(key[0], stat)
        except Exception:  # a damaged catalog: hash the file as without a store
            known = None
    if known is not None:
        cache.file_digests[key] = known
        return known, None
    data = path.read_bytes()
    digest = digest_of(data)
    cache.file_digests[key] = digest
    if cache.store is not None:
        try:
            cache.store.remember_file(key[0], stat, digest)
        except Exception:  # the answer stands; only the shortcut for the next process is lost
            pass
    return digest, data


@dataclass
class Pending:
    """A file to open: its Source, size, hash and a way to get its bytes (or the path of a file
    that holds them: the parser reads a file without holding it in memory)."""

    source: Source
    size: int
    digest: str
    read: Callable[[], bytes | Path]
    arrival: Arrival | None = None  # an upload's reading while it arrived (load_trace takes its trace)


@dataclass
class Parsed:
    """A trace parsed by open_all, for the store (see store_parsed)."""

    source: Source
    trace: Trace
    digest: str


def store_parsed(cache: TraceCache, parsed: list[Parsed], evicted: list[StoredTrace] | None = None) -> None:
    """Write parsed traces to the store; what the store removed to keep under its cap is added to
    `evicted`. Touches no session state: the dashboard runs it in a thread while it draws."""
    for item in parsed:
        removed = into_store(cache, item.source, item.trace, item.digest)
        if evicted is not None:
            evicted.extend(removed)


def open_all(
    pending: list[Pending],
    progress: Callable[[float, str], None] | None = None,
    *,
    cache: TraceCache,
    evicted: list[StoredTrace] | None = None,
    defer_store: list[Parsed] | None = None,
) -> tuple[list[Run], list[Failure]]:
    """Parse what is not cached yet (reporting progress by bytes, with each file's size), and
    return the runs in order plus the files that failed. One bad file never stops the others.
    Each parsed trace goes to the store (what the store removed to keep under its cap is added
    to `evicted`), or, given `defer_store`, is added to it for the caller's store_parsed. The runs
    are built from what this call found or parsed, so a batch larger than the cache's capacity
    loses none of its runs."""
    cache.hold_at_least(len({item.digest for item in pending}))
    got = _known(pending, cache)
    todo: list[Pending] = []
    for item in pending:  # the same bytes twice: parsed once
        if item.digest not in got and item.digest not in cache.failures and all(p.digest != item.digest for p in todo):
            todo.append(item)
    total = sum(p.size for p in todo) or 1
    done = 0
    for i, item in enumerate(todo, start=1):
        if progress:
            progress(done / total, f"Parsing {item.source.name} ({format_bytes(item.size)}), file {i} of {len(todo)}")
        try:
            message = f"Parsing {item.source.name} ({format_bytes(item.size)}), file {i} of {len(todo)}"

            def within(fraction: float, start: int = done, size: int = item.size, text: str = message) -> None:
                if progress:
                    progress(min((start + fraction * size) / total, 1.0), text)

            # a large file's worker processes stay while more files follow
            trace = load_trace(
                item.read(), name=item.source.name, progress=within, keep_workers=i < len(todo), arrival=item.arrival
            )
        except TraceError as exc:
            cache.failures[item.digest] = one_line(str(exc))
        except Exception as exc:  # an engine bug must not take the other runs down
            cache.failures[item.digest] = (
                f"{item.source.name}: could not be read ({type(exc).__name__}: {one_line(str(exc))})"
            )
        else:
            if cache.store is not None:  # its analyses are kept from the first draw on (the tables are stored after it)
                trace._kept = kept.Kept(cache.store.root, item.digest)
            got[item.digest] = trace
            cache.put(item.digest, trace)
            if defer_store is not None:  # for a thread of the caller's: a trace that shares no polars object
                defer_store.append(Parsed(item.source, detached(trace), item.digest))
            else:
                store_parsed(cache, [Parsed(item.source, trace, item.digest)], evicted)
        cache.parses += 1
        done += item.size
    if progress and todo:
        progress(1.0, f"Parsed {len(todo)} file(s), {format_bytes(total)}")
    runs: list[Run] = []
    failures: list[Failure] = []
    for item in pending:
        trace = got.get(item.digest)
        if trace is None:
            failures.append(Failure(item.source, cache.failures.get(item.digest, f"{item.source.name}: not loaded")))
            continue
        runs.append(Run(item.source, default_label(item.source, trace), trace, item.digest, item.size))
    return join_ranks(runs, cache), failures


def _known(pending: list[Pending], cache: TraceCache) -> dict[str, Trace]:
    """The traces of `pending` held in memory, else parsed before by this server or another and
    reopened from the store (marked opened in one catalog transaction), by digest."""
    got: dict[str, Trace] = {}
    reopened: list[str] = []
    for item in pending:
        if item.digest in got or item.digest in cache.failures:
            continue
        trace = cache.get(item.digest)
        if trace is None:
            trace = from_store(cache, item.digest, touch=False)
            if trace is not None:
                cache.put(item.digest, trace)
                reopened.append(item.digest)
        if trace is not None:
            got[item.digest] = trace
    touch_stored(cache, reopened)
    return got


def join_ranks(loaded: list[Run], cache: TraceCache) -> list[Run]:
    """Files of one group become one run of several ranks, in the place of the group's first file.
    A run of the store is always one run (its ranks are the catalog's). A folder's files are one
    run when at least two of them opened and each names a distinct distributedInfo rank of one
    job (ingest.one_job, as `attnscope ingest` groups a folder); otherwise each stays a run of its
    own."""
    members: dict[str, list[Run]] = {}
    for run in loaded:
        if run.source.group is not None:
            members.setdefault(run.source.group, []).append(run)
    joined: dict[str, Run] = {}
    for group, found in members.items():
        if group.startswith("store/"):
            ranks = [r.source.rank if r.source.rank is not None else (rank_of(r.trace) or 0) for r in found]
        else:
            ranks = [rank_of(r.trace) for r in found]
            if not one_job(ranks, [world_of(r.trace) for r in found]):
                continue
        joined[group] = rank_run(found, [int(r) for r in ranks], cache)
    out: list[Run] = []
    for run in loaded:
        group = run.source.group
        if group in joined:
            if joined[group] is not None:
                out.append(joined[group])
                joined[group] = None  # type: ignore[assignment]
            continue
        out.append(run)
    return out


def rank_run(found: list[Run], ranks: list[int], cache: TraceCache) -> Run:
    """One run from its ranks' runs: the slowest rank's trace is the run's trace."""
    traces = {rank: run.trace for rank, run in sorted(zip(ranks, found))}
    digests = {rank: run.digest for rank, run in sorted(zip(ranks, found))}
    key = tuple(digests.items())
    if key not in cache.slowest:
        cache.slowest[key] = slowest_rank(traces) if len(traces) > 1 else next(iter(traces))
    slowest = cache.slowest[key]
    source = group_source(found[0].source)
    label = f"{source.name} ({len(traces)} ranks)" if len(traces) > 1 else source.name
    return Run(source, label, traces[slowest], digests[slowest], sum(r.size_bytes for r in found), traces, digests)


def one_line(text: str) -> str:
    """The first non-empty line of an error message (the sidebar shows one line per file)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "(no message)")


def pending_file(source: Source, cache: TraceCache) -> Pending | Failure:
    """A file on disk to open, or a Failure when it cannot be read."""
    assert source.path is not None
    try:
        digest, data = file_digest(cache, source.path)
    except OSError as exc:
        return _unreadable(source, exc)
    path = source.path
    return Pending(source, path.stat().st_size, digest, (lambda: data) if data is not None else path.read_bytes)


def _unreadable(source: Source, exc: OSError) -> Failure:
    assert source.path is not None
    reason = exc.strerror or str(exc)
    if source.collection is not None:  # a run its manifest lists
        return Failure(source, f"{source.name} (listed in {source.path.parent / MANIFEST}): {reason}")
    return Failure(source, f"{source.name}: {reason}")


def pending_files(sources: list[Source], cache: TraceCache) -> list[Pending | Failure]:
    """pending_file for many files, with the store's catalog asked once for the hashes it knows
    and the new ones remembered in one transaction: file by file, each new file's commit made a
    fresh store's first start 0.6-1.1 s slower (39 bundled files) for hashes that take 1 ms."""
    found: dict[int, tuple[tuple[str, int, int], os.stat_result] | Failure] = {}
    for i, source in enumerate(sources):
        assert source.path is not None
        try:
            stat = source.path.stat()
            found[i] = ((str(source.path.resolve()), stat.st_mtime_ns, stat.st_size), stat)
        except OSError as exc:
            found[i] = _unreadable(source, exc)
    keys = [k for k, _ in (v for v in found.values() if not isinstance(v, Failure)) if k not in cache.file_digests]
    if keys and cache.store is not None:
        try:
            known = cache.store.known_files([(path, size, mtime) for path, mtime, size in keys])
            cache.file_digests.update({(path, mtime, size): sha for (path, size, mtime), sha in known.items()})
        except Exception:  # a damaged catalog: hash the files as without a store
            pass
    out: list[Pending | Failure] = []
    new: list[tuple[str, int, int, str]] = []
    for i, source in enumerate(sources):
        item = found[i]
        if isinstance(item, Failure):
            out.append(item)
            continue
        (key, stat), path, data = item, Path(str(source.path)), None
        if key not in cache.file_digests:
            try:
                data = path.read_bytes()
            except OSError as exc:
                out.append(_unreadable(source, exc))
                continue
            cache.file_digests[key] = digest_of(data)
            new.append((key[0], key[2], key[1], cache.file_digests[key]))
        read = (lambda data=data: data) if data is not None else path.read_bytes
        out.append(Pending(source, stat.st_size, cache.file_digests[key], read))
    if new and cache.store is not None:
        try:
            cache.store.remember_files(new)
        except Exception:  # the answers stand; only the shortcut for the next process is lost
            pass
    return out


def pending_stored(ident: str, digest: str, cache: TraceCache) -> Pending | Failure:
    """A run a shared link names by its store id (an upload made in another session or before a
    restart): reopened from the store, or a Failure saying it is not there."""
    name = ident.removeprefix("upload/").split("#")[0]
    source = Source(id=ident, name=name)
    known = cache.store.trace(digest) if cache.store is not None else None
    if known is None:
        where = f"the trace store ({cache.store.root})" if cache.store is not None else "this server (no trace store)"
        return Failure(source, f"{name}: the link's upload is not in {where}; upload the file to see it")

    def read() -> bytes:
        raise TraceError(f"{name}: the stored copy could not be read; upload the file again")

    return Pending(source, known.size, digest, read)


def pending_store_run(run_id: str, cache: TraceCache) -> tuple[list[Pending], list[Failure]]:
    """The ranks of a run of the trace store's catalog (`attnscope ingest` adds them; a link names
    one as 'store/<run id>'), each to reopen from the store, and a Failure for each rank the store
    no longer holds (or for the run, when the catalog has no such run)."""
    ident = f"store/{run_id}"
    where = f"the trace store ({cache.store.root})" if cache.store is not None else "this server (no trace store)"
    run = None
    if cache.store is not None:
        try:
            run = cache.store.run(run_id)
        except Exception as exc:  # a damaged catalog must not stop the dashboard
            cache.store_problem = f"trace store {cache.store.root}: {type(exc).__name__}: {one_line(str(exc))}"
    if run is None or not run.ranks:
        return [], [Failure(Source(id=ident, name=run_id), f"{ident}: the link's run is not in {where}")]
    pending: list[Pending] = []
    failures: list[Failure] = []
    for rank, sha in run.ranks:
        name = f"{run.label} rank {rank}" if len(run.ranks) > 1 else run.label
        source = Source(id=f"{ident}@{rank}", name=name, group=ident, group_name=run.label, rank=rank)
        item = pending_stored(source.id, sha, cache)
        if isinstance(item, Failure):
            failures.append(Failure(source, f"{name} (run {ident}): no longer in {where}; ingest it again"))
        else:
            pending.append(Pending(source, item.size, sha, item.read))
    return pending, failures


def upload_limit(default: int, environ: dict[str, str] | None = None) -> tuple[int, str | None]:
    """The largest upload to parse, in bytes: $ATTNSCOPE_MAX_UPLOAD_BYTES when set, else `default`
    (the server's own limit). A setting that is not a whole number of bytes above 0 gives the
    default and a line saying so."""
    try:
        limit = settings.MAX_UPLOAD_BYTES.whole_bytes(environ)
    except settings.SettingError as exc:
        return default, f"{exc}; uploads are limited to {format_bytes(default)}, the server's own limit"
    return (default, None) if limit is None else (limit, None)


def refused_upload(name: str, size: int, limit: int) -> Failure | None:
    """A Failure for an upload over the limit (checked on its size, before its bytes are read)."""
    if size <= limit:
        return None
    return Failure(
        Source(id=f"upload/{name}", name=name),
        f"{name}: {format_bytes(size)} ({size:,} bytes) is over the upload limit of {format_bytes(limit)} ({limit:,} bytes); not read",
    )


def pending_upload(
    name: str, path: Path, size: int, digest: str, taken: set[str], arrival: Arrival | None = None
) -> Pending:
    """An uploaded file to open: the file the upload route wrote (its size and hash already known),
    with the reading started while it arrived, if any."""
    source = upload_source(name, digest, taken)
    return Pending(source, size, digest, lambda: path, arrival)


@dataclass(frozen=True)
class RunSet:
    """Runs that belong together and are picked with one click: a collection, the loose files
    named on the command line, or the uploads. `bundled`: a collection under sample_traces/;
    `gpu`: at least one of its runs holds GPU work; `collected`: every run was written by our
    collectors (its trace describes itself: variant, shape, parity)."""

    name: str
    ids: list[str]
    bundled: bool
    gpu: bool
    collected: bool = False


def run_sets(loaded: list, root: Path = SAMPLE_ROOT) -> list[RunSet]:
    """The runs on offer by origin, in order of first appearance: Runs, or catalog_offers.Offers
    (what the picker knows of a run before it is parsed); both have `source` and `facts`."""
    sets: dict[str, list] = {}
    for run in loaded:
        sets.setdefault(origin(run.source), []).append(run)
    root = root.resolve()

    def bundled(members: list) -> bool:
        path = members[0].source.path
        return members[0].source.collection is not None and path is not None and root in path.resolve().parents

    return [
        RunSet(
            name,
            [r.source.id for r in members],
            bundled(members),
            any(r.facts.has_gpu for r in members),
            all(bool(r.facts.collector.get("variant")) for r in members),
        )
        for name, members in sets.items()
    ]


def first_look(sets: list[RunSet]) -> list[str]:
    """What the dashboard selects at first open, one set of runs, never CPU and GPU samples
    mixed: the uploads if any; else what the command line named (loose files and extra
    collections together); else the first bundled collection with GPU runs (what the tool is
    for: kernels, copies, the backends), one our collectors wrote first (the article's variants,
    with parity and a shape); else the first collection."""
    uploads = [s for s in sets if s.name == UPLOADS]
    if uploads:
        return uploads[0].ids
    extra = [i for s in sets if not s.bundled for i in s.ids]
    if extra:
        return extra
    gpu = sorted((s for s in sets if s.gpu), key=lambda s: not s.collected)  # stable: the first of each kind
    chosen = gpu[0] if gpu else (sets[0] if sets else None)
    return chosen.ids if chosen else []
