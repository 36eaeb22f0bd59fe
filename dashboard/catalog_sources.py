"""Where the dashboard's runs come from, without streamlit: the bundled collections
(sample_traces/*/runs.json), the extra paths named at start or by $ATTNSCOPE_TRACES (a folder of
rank traces as one group), loose files and uploads, each a Source with a stable id, what cannot be
opened a Failure naming it, the runs' origins and default labels, and the Facts the run picker
reads of a run (from its trace, or from its collection's manifest: dashboard/catalog_offers.py).
dashboard/catalog.py opens them (and re-exports these names)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from dashboard.engine.analyses.article import is_article_folder
from dashboard.engine.compare.ranks import rank_of
from dashboard.engine.store.ingest import outside, world_of
from dashboard.engine.model import settings

if TYPE_CHECKING:
    from dashboard.engine import Trace

DASHBOARD = Path(__file__).resolve().parent
REPO_ROOT = DASHBOARD.parent
SAMPLE_ROOT = REPO_ROOT / "sample_traces"
MANIFEST = "runs.json"
ENV_TRACES = settings.TRACES.name
TRACE_SUFFIXES = (".json", ".json.gz")
RANKS_RUN = "ranks"
"""The run id's second part ('<collection>/ranks') of a collection's ranks of one job: its runs.json
entries that name a `rank` (collectors/ranks.py writes them) open as one run of several ranks."""


@dataclass(frozen=True)
class Source:
    """One trace the dashboard can open. `id` is stable across sessions for files on disk
    ('cpu/naive' for a collection run, 'file/<name>' for a loose file) so it can live in a link;
    uploads get 'upload/<name>'. A file that may be one rank of a run of several ranks names that
    run in `group` ('ranks/<folder>' for a folder named at start, 'store/<run id>' for a run of the
    trace store) and its name in `group_name`; `rank` is the rank the store's catalog gives it."""

    id: str
    name: str
    path: Path | None = None
    collection: str | None = None
    variant: str | None = None
    compiled: bool = False
    group: str | None = None
    group_name: str | None = None
    rank: int | None = None


def group_source(first: Source) -> Source:
    """The Source of a run of several ranks, from its first rank's: the group's id and name, the
    ranks' folder, and their collection (a collection's ranks stay in its set of runs)."""
    return Source(
        id=first.group or first.id,
        name=first.group_name or first.group or first.name,
        path=first.path.parent if first.path is not None else None,
        collection=first.collection,
    )


@dataclass
class Collection:
    """A bundled collection: its folder, the parsed runs.json and one Source per run."""

    name: str
    folder: Path
    manifest: dict[str, Any]
    sources: list[Source] = field(default_factory=list)
    refused: list["Failure"] = field(default_factory=list)  # entries naming a file outside the folder

    @property
    def skipped(self) -> list[dict[str, Any]]:
        value = self.manifest.get("skipped")
        return [s for s in value if isinstance(s, dict)] if isinstance(value, list) else []


@dataclass(frozen=True)
class Failure:
    """A file that could not be opened, with the one-line reason."""

    source: Source
    message: str


@dataclass(frozen=True)
class Facts:
    """What the run picker reads of a run's trace: the collectors' self-description as far as
    labels, sets and modes read it (variant, compiled, cuda_graphs: the keys the trace's
    "attnscope" block has of these; {} for a trace the collectors did not write), whether it holds
    GPU work, and its distributedInfo rank and world size (None where it names none). It answers
    `.collector` and `.has_gpu` as a Trace does, which is all that default_label, runs.mode_of and
    runs.article_path read, so the picker can be drawn before a run is parsed."""

    collector: dict[str, Any]
    has_gpu: bool
    rank: int | None = None
    world: int | None = None

    @classmethod
    def of(cls, trace: Trace) -> Facts:
        """The facts of a parsed trace (the oracle the manifest's facts are tested against)."""
        block = trace.collector
        picked = {key: block[key] for key in FACT_KEYS if key in block}
        return cls(picked, trace.has_gpu, rank_of(trace), world_of(trace))


FACT_KEYS = ("variant", "compiled", "cuda_graphs")


def discover(
    root: Path = SAMPLE_ROOT, extra: Iterable[Path] = ()
) -> tuple[list[Collection], list[Source], list[Failure]]:
    """Bundled collections under `root` (sorted by name), then the extra paths: collections
    among them are returned with the others, loose trace files as Sources; a folder of the
    article's measurements (engine.article, without a runs.json) is left to the Sweep tab. A runs.json that
    cannot be read, or an extra path that does not exist, is a Failure naming the file."""
    collections: list[Collection] = []
    loose: list[Source] = []
    failures: list[Failure] = []

    def add_collection(folder: Path) -> None:
        found = read_collection(folder, taken={c.name for c in collections})
        if isinstance(found, Failure):
            failures.append(found)
        else:
            collections.append(found)
            failures.extend(found.refused)

    if root.is_dir():
        for manifest in sorted(root.glob(f"*/{MANIFEST}")):
            add_collection(manifest.parent)
    groups: set[str] = set()
    seen = {c.folder.resolve() for c in collections} | {
        f.source.path.parent.resolve() for f in failures if f.source.path
    }
    for path in extra:
        path = Path(path)
        if path.is_dir() and (path / MANIFEST).is_file():
            if path.resolve() not in seen:
                add_collection(path)
                seen.add(path.resolve())
        elif is_article_folder(path):
            continue  # the article's measurements: the Sweep tab reads them (its e2e traces are no ranks of one job)
        elif path.is_dir():
            loose.extend(_folder_sources(path, groups, failures))
        elif path.is_file():
            loose.append(file_source(path))
        else:
            failures.append(_path_failure(path, "no such file or folder"))
    unique = list({f.message: f for f in failures}.values())  # a path named twice fails once
    return collections, _unique_ids(loose), unique


def _folder_sources(path: Path, groups: set[str], failures: list[Failure]) -> list[Source]:
    """The trace files of a folder given at start, as the ranks of one group ('ranks/<name>', a
    counter where two folders share a name: `groups` holds the names taken); a file outside the
    folder or a folder without traces is a Failure."""
    try:
        names = [p for p in sorted(path.iterdir()) if p.is_file() and is_trace_name(p.name)]
    except OSError as exc:
        failures.append(_path_failure(path, exc.strerror or str(exc)))
        return []
    found = []
    for file in names:
        why = outside(path, file)
        if why:
            failures.append(_path_failure(file, why))
        else:
            found.append(file_source(file))
    if not found:
        failures.append(_path_failure(path, f"no trace files ({', '.join(TRACE_SUFFIXES)}) in this folder"))
    name = path.resolve().name or str(path)
    group = base = f"ranks/{name}"
    n = 2
    while group in groups:
        group = f"{base}#{n}"
        n += 1
    groups.add(group)
    return [dataclasses.replace(s, group=group, group_name=name) for s in found]


def read_collection(folder: Path, taken: Iterable[str] = frozenset()) -> Collection | Failure:
    """A collection from its runs.json (entries without a trace file name are ignored; entries that
    name a `rank` are the ranks of one job, grouped as '<collection>/ranks'), or a
    Failure naming the manifest when it is not a readable JSON object. A name already `taken`
    by another collection gets a counter, so run ids stay unique; so does a run whose id another
    run of the same collection already has (a.json next to a.json.gz)."""
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return _manifest_failure(path, str(exc))
    if not isinstance(manifest, dict):
        return _manifest_failure(path, f"expected a JSON object, found {_json_kind(manifest)}")
    entries = manifest.get("runs")
    if entries is not None and not isinstance(entries, list):
        return _manifest_failure(path, f"'runs' should be a list, found {_json_kind(entries)}")
    taken = set(taken)
    name = base = str(manifest.get("collection") or folder.name)
    n = 2
    while name in taken:
        name = f"{base}-{n}"
        n += 1
    collection = Collection(name=name, folder=folder, manifest=manifest)
    ids: set[str] = set()
    for entry in entries or []:
        if not isinstance(entry, dict) or not entry.get("trace"):
            continue
        trace_name = str(entry["trace"])
        ident = f"{name}/{trace_stem(trace_name)}"
        if ident in ids:
            ident = base_id = f"{name}/{trace_name}"
            k = 2
            while ident in ids:
                ident = f"{base_id}#{k}"
                k += 1
        why = outside(folder, folder / trace_name, trace_name)
        if why:
            collection.refused.append(
                Failure(
                    Source(id=f"outside/{ident}", name=trace_name, path=folder / trace_name, collection=name),
                    f"{trace_name} (listed in {path}): {why}; not read",
                )
            )
            continue
        ids.add(ident)
        variant = entry.get("variant")
        ranked = isinstance(entry.get("rank"), int) and not isinstance(entry.get("rank"), bool)
        collection.sources.append(
            Source(
                id=ident,
                name=trace_name,
                path=folder / trace_name,
                collection=name,
                variant=str(variant) if variant else None,
                compiled=bool(entry.get("compiled")),
                group=f"{name}/{RANKS_RUN}" if ranked else None,  # `python -m collectors ranks`: one job's ranks
                group_name=name if ranked else None,
            )
        )
    return collection


def _path_failure(path: Path, reason: str) -> Failure:
    return Failure(Source(id=f"path/{path}", name=str(path), path=path), f"{path}: {reason}")


def _manifest_failure(path: Path, reason: str) -> Failure:
    return Failure(Source(id=f"manifest/{path}", name=str(path), path=path), f"{path}: {reason}")


def _json_kind(value: Any) -> str:
    """'a list', 'a string', ... for a message about a JSON value of the wrong type."""
    kinds = ((dict, "an object"), (list, "a list"), (str, "a string"), (bool, "a boolean"), ((int, float), "a number"))
    return next((word for types, word in kinds if isinstance(value, types)), "null")


def file_source(path: Path) -> Source:
    return Source(id=f"file/{path.name}", name=path.name, path=path)


def upload_source(name: str, digest: str, taken: set[str]) -> Source:
    """A Source for an uploaded file; the id gets a hash suffix when the name is already taken."""
    ident = f"upload/{name}"
    if ident in taken:
        ident = f"upload/{name}#{digest[:8]}"
    return Source(id=ident, name=name)


def extra_paths(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> list[Path]:
    """Paths from `streamlit run dashboard/app.py -- PATH...` and from $ATTNSCOPE_TRACES.
    Script arguments count only when this process runs the dashboard's app.py as its script
    (under AppTest or pytest, sys.argv belongs to someone else)."""
    argv = sys.argv if argv is None else argv
    environ = dict(os.environ) if environ is None else environ
    paths: list[Path] = []
    if argv and Path(argv[0]).name == "app.py" and Path(argv[0]).resolve().parent == DASHBOARD:
        paths.extend(Path(a) for a in argv[1:] if not a.startswith("-"))
    paths.extend(Path(part) for part in settings.TRACES.paths(environ))
    return paths


def _unique_ids(sources: list[Source]) -> list[Source]:
    """Loose files: the same file named twice is opened once; files with the same name in
    different folders get the folder in their id (and a counter if that is taken too)."""
    seen: set[str] = set()
    paths: set[Path] = set()
    out: list[Source] = []
    for source in sources:
        if source.path is not None:
            where = source.path.resolve()
            if where in paths:
                continue
            paths.add(where)
        if source.id in seen and source.path is not None:
            ident = base = f"file/{source.path.parent.name}/{source.name}"
            n = 2
            while ident in seen:
                ident = f"{base}#{n}"
                n += 1
            source = dataclasses.replace(source, id=ident)
        seen.add(source.id)
        out.append(source)
    return out


def is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES)


def trace_stem(name: str) -> str:
    """'naive.json.gz' -> 'naive'; 'rank0.pt.trace.json' -> 'rank0.pt.trace'."""
    for suffix in (".json.gz", ".json", ".gz"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


UPLOADS = "uploads"
FILES = "files"
STORED = "store"


def origin(source: Source) -> str:
    """Where a run comes from: its collection's name, UPLOADS, STORED (a run of the store's
    catalog) or FILES (a loose file or a folder of ranks)."""
    if source.collection is not None:
        return source.collection
    if source.id.startswith("store/"):
        return STORED
    return UPLOADS if source.id.startswith("upload/") else FILES


def default_label(source: Source, trace: Trace | Facts | None) -> str:
    """The variant from the trace's own metadata (or its manifest entry), '(CUDA graphs)' added for
    runs the collectors compiled with mode="reduce-overhead" (`cuda_graphs: true`), '(compiled)'
    for other torch.compile runs; else the file name without its extension."""
    meta = trace.collector if trace is not None else {}
    variant = meta.get("variant") or source.variant
    if variant:
        if meta.get("cuda_graphs") is True:
            return f"{variant} (CUDA graphs)"
        compiled = bool(meta.get("compiled", source.compiled))
        return f"{variant} (compiled)" if compiled else str(variant)
    return trace_stem(source.name)


def unique_labels(labels: list[str], hints: list[str | None]) -> list[str]:
    """Make labels unique: a repeated label gets its hint (e.g. the collection) in brackets, and
    if still repeated, a counter."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    out: list[str] = []
    used: set[str] = set()
    for label, hint in zip(labels, hints):
        candidate = f"{label} [{hint}]" if counts[label] > 1 and hint else label
        base, n = candidate, 2
        while candidate in used:
            candidate = f"{base} #{n}"
            n += 1
        used.add(candidate)
        out.append(candidate)
    return out


# The article's story, step by step (the Overview says which steps a collection tells): the collectors' variants that tell each step (a name, or a prefix
# ending in "-"), and the commands that collect it, with when each applies.
STORY: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
    ("naive attention", ("naive",), ("python -m collectors --variants naive",), ""),
    ("masked_fill_ (the copy disappears)", ("naive_inplace",), ("python -m collectors --variants naive_inplace",), ""),
    ("fused scaled_dot_product_attention", ("sdpa", "sdpa-"), ("python -m collectors --variants sdpa sdpa-flash",), ""),
    (
        "fused kernels from the hub or third parties",
        ("hub", "thirdparty-"),
        ("python -m collectors --variants hub", "python -m collectors gpu-run"),
        "the first on a machine that reaches the Hugging Face hub; the second on a GPU, with SageAttention carried "
        "in the repository (FlashAttention-4 and FlashInfer where installed)",
    ),
)


def story_coverage(variants: set[str]) -> list[tuple[str, bool]]:
    """(step, whether a run of `variants` tells it) for each step of STORY."""
    return [
        (step, any(v == n or (n.endswith("-") and v.startswith(n)) for v in variants for n in names))
        for step, names, _, _ in STORY
    ]
