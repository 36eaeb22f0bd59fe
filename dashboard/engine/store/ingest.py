"""Adding trace files and folders to a store: discovery, parsing fanned out over Dask, runs.

Files named directly are one run each. A folder's traces (searched recursively) that carry
distinct distributedInfo ranks of one job (no two name different world sizes) are one run of
several ranks, labelled by the folder's name; otherwise each file in it is a run of its own. A folder is read only under its root: a symbolic link in it
that leads out of it is skipped with a warning. Parsing fans out over Dask distributed: a LocalCluster of
worker processes by default, or an existing cluster at `scheduler` (dask-jobqueue and
dask-kubernetes deployments work the same: workers must see the store's folder and the files).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Union

from dashboard.engine.model.errors import TraceError
from dashboard.engine.store.store import Store

if TYPE_CHECKING:  # light at the top: `attnscope summary` finds its files here before deciding to parse
    from dashboard.engine.model.trace import Trace

TRACE_SUFFIXES = (".json", ".json.gz")
NOT_TRACES = ("runs.json",)  # a collection's manifest (collectors/manifest.py) sits beside its traces


@dataclass
class Ingested:
    """What one ingest did: runs added (run_id, label, ranks as (rank, sha)), and the files that
    could not be read, each with its one-line reason."""

    runs: list[tuple[str, str, tuple[tuple[int, str], ...]]] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # files skipped (symbolic links out of their folder)


def world_of(trace: Trace) -> int | None:
    """The job's world size from the trace's distributedInfo, or None when it names none."""
    info: Any = trace.meta.get("distributedInfo")
    size = info.get("world_size") if isinstance(info, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def one_job(ranks: list[int | None], worlds: list[int | None]) -> bool:
    """True when files are the ranks of one job: at least two, each naming a rank, no rank
    twice, and no two naming different world sizes (rank 3 of 8 and rank 1 of 2 are two jobs)."""
    known = {w for w in worlds if w is not None}
    return len(ranks) > 1 and None not in ranks and len(set(ranks)) == len(ranks) and len(known) <= 1


def outside(folder: Path, path: Path, named: str | None = None) -> str | None:
    """Why `path` may not be read as part of `folder` (a server reads a folder named at start only
    under its root): None when it lies inside; else 'outside its folder' and how (a name with
    '..' or an absolute path, or a symbolic link out of the folder)."""
    if named is not None and (Path(named).is_absolute() or ".." in Path(named).parts):
        return "outside its folder (an absolute path or '..')"
    try:
        root = folder.resolve()
        where = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return "outside its folder (a symbolic link that cannot be followed)"
    if where != root and root not in where.parents:
        return "outside its folder (a symbolic link out of it)"
    return None


def discover(
    paths: Iterable[Union[str, os.PathLike]], skipped: list[str] | None = None
) -> list[tuple[str | None, list[Path]]]:
    """Groups of trace files: (folder label, its trace files sorted) for each folder given, and
    (None, [file]) for each file given. A path that does not exist is its own group, so that
    parsing names the problem. A file in a folder that resolves outside it (a symbolic link out,
    or inside a linked folder that leads out) is skipped, and its line added to `skipped` for
    the caller to show."""
    groups: list[tuple[str | None, list[Path]]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            root = path.resolve()
            files = []
            for p in sorted(path.rglob("*")):
                if not (p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.name not in NOT_TRACES):
                    continue
                if outside(path, p) is not None:
                    line = f"{p}: outside {path} (a symbolic link out of it); skipped"
                    if skipped is not None:
                        skipped.append(line)
                    continue
                files.append(p)
            groups.append((root.name, files))
        else:
            groups.append((None, [path]))
    return groups


def parse_into(
    root: str, path: str, keep_workers: bool = False
) -> tuple[str, str | None, int | None, str | None, int | None]:
    """Parse one file into the store at `root` (a worker's task): (path, sha, rank, error, world size).
    `keep_workers`: as load_trace's (more files follow in this process)."""
    try:
        trace, sha = Store(root).open(path, keep_workers=keep_workers)
    except TraceError as exc:
        return path, None, None, str(exc), None
    from dashboard.engine.compare.ranks import rank_of

    return path, sha, rank_of(trace), None, world_of(trace)


def ingest(
    paths: Iterable[Union[str, os.PathLike]],
    store: Store,
    workers: int = 1,
    scheduler: str | None = None,
    added_by: str = "cli",
) -> Ingested:
    """Parse every trace under `paths` into `store` and add its runs. workers > 1 or a scheduler
    address fan the parsing out over Dask; workers == 1 parses in this process."""
    skipped: list[str] = []
    groups = discover(paths, skipped)
    files = [str(p) for _, members in groups for p in members]
    root = str(store.root)
    if scheduler or workers > 1:
        results = _map_on_dask(root, files, workers, scheduler)
    else:
        results = [parse_into(root, f, keep_workers=i + 1 < len(files)) for i, f in enumerate(files)]
    parsed = dict(zip(files, results))
    out = Ingested(warnings=skipped)
    for folder, members in groups:
        good = [parsed[str(p)] for p in members if parsed[str(p)][1] is not None]
        out.errors += [(path, error) for path, _, _, error, _ in (parsed[str(p)] for p in members) if error]
        if folder is not None and one_job([g[2] for g in good], [g[4] for g in good]):
            run = [(rank, sha) for _, sha, rank, _, _ in good]
            out.runs.append(_add(store, run, folder, added_by))
            continue
        for path, sha, rank, _, _ in good:
            out.runs.append(_add(store, [(rank or 0, sha)], Path(path).name, added_by))
    return out


def _add(
    store: Store, ranks: list[tuple[int, str]], label: str, added_by: str
) -> tuple[str, str, tuple[tuple[int, str], ...]]:
    run_id = store.add_run(ranks, label, added_by)
    return run_id, label, tuple(sorted(ranks))


def _map_on_dask(root: str, files: list[str], workers: int, scheduler: str | None) -> list[tuple]:
    """parse_into over `files` on Dask: a LocalCluster of `workers` processes, or `scheduler`."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise TraceError("parsing on several workers needs Dask: pip install 'attnscope[cluster]'") from None
    if scheduler:
        with Client(scheduler) as client:
            return client.gather(client.map(parse_into, [root] * len(files), files, pure=False))
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        return client.gather(client.map(parse_into, [root] * len(files), files, pure=False))
