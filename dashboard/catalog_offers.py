"""The runs the picker offers before they are parsed, without streamlit.

The sidebar's labels, sets of runs, execution modes and default selection read little of each
run (catalog_sources.Facts: variant, compiled, CUDA graphs, GPU work, rank), and the first screen
draws a few runs of many (the bundled samples: 7 of 39 files). A collection the collectors wrote
says those facts in its runs.json, entry by entry, as the traces say them in their "attnscope"
block (tests/test_catalog_offers.py checks the bundled ones against their parsed traces), so its
runs are offered from the manifest and parsed when a tab needs them: open_offers, for the runs the
comparison chose. A trace already in memory speaks for itself; what neither describes (uploads,
loose files, runs of the store's catalog, a collection the collectors did not write, a file that
failed before) is parsed to be offered, as catalog.open_all always did. On an empty store that
spares the bundled samples' first screen the parse of 32 files (about 0.5 s on the 2-core machine).
What the picker selects at first (opening_runs: the article's path) and a run's execution mode
(mode_of) read those facts too, and are here for the server's start (dashboard/prepare.py) as for
the page.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Callable

from dashboard.catalog import (
    Collection,
    Facts,
    Failure,
    Parsed,
    Pending,
    Run,
    Source,
    RunSet,
    TraceCache,
    default_label,
    first_look,
    open_all,
)
from dashboard.catalog_sources import group_source
from dashboard.engine import Trace, TraceError
from dashboard.engine.store.ingest import one_job

COLLECTORS_COMMAND = "python -m collectors"  # how runs.json's `command` starts when the collectors wrote it
DEVICES = {"cpu": False, "cuda": True}  # the collectors' `device` -> whether their traces hold GPU work

Progress = Callable[[float, str], None]


@dataclass
class Offer:
    """A run on offer: its Source (a run of several ranks: the group's), default label, the files'
    size, its Facts, each rank's file hash, the files to open (`members`), and the Run once parsed.
    It has the `source`, `label`, `size_bytes` and `digests` of a Run, which the picker reads."""

    source: Source
    label: str
    size_bytes: int
    facts: Facts
    digests: dict[int, str]
    members: list[Pending] = field(default_factory=list)
    run: Run | None = None

    @classmethod
    def of_run(cls, run: Run, members: list[Pending]) -> Offer:
        return cls(run.source, run.label, run.size_bytes, run.facts, dict(run.digests), members, run)


def manifest_facts(collections: list[Collection]) -> dict[str, Facts]:
    """Run id -> Facts, for the runs of the collections the collectors wrote (schema 1, a
    `command` of theirs, a `device` they write), from each run's manifest entry: the variant, compiled
    and cuda_graphs it names (as the trace's "attnscope" block has them: the collectors write both
    from one description), GPU work from the device, the rank and world size of a rank's entry.
    An entry without a variant, or a file two entries name, is left to its trace."""
    found: dict[str, Facts] = {}
    for collection in collections:
        manifest = collection.manifest
        device = manifest.get("device")
        if manifest.get("schema") != 1 or device not in DEVICES:
            continue
        if not str(manifest.get("command") or "").startswith(COLLECTORS_COMMAND):
            continue
        entries: dict[str, list[dict]] = {}
        for entry in manifest.get("runs") or []:
            if isinstance(entry, dict) and entry.get("trace"):
                entries.setdefault(str(entry["trace"]), []).append(entry)
        for source in collection.sources:
            named = entries.get(source.name, [])
            if len(named) == 1 and isinstance(named[0].get("variant"), str) and named[0]["variant"]:
                found[source.id] = entry_facts(named[0], DEVICES[device])
    return found


def entry_facts(entry: dict, has_gpu: bool) -> Facts:
    """The Facts of one collectors' manifest entry (catalog_sources.Facts: the keys it names)."""
    block = {"variant": entry["variant"], "compiled": entry.get("compiled") is True}
    if "cuda_graphs" in entry:
        block["cuda_graphs"] = entry["cuda_graphs"]
    rank, world = entry.get("rank"), entry.get("world_size")
    whole = (int,)
    rank = rank if isinstance(rank, whole) and not isinstance(rank, bool) and rank >= 0 else None
    world = world if isinstance(world, whole) and not isinstance(world, bool) and world > 0 else None
    return Facts(block, has_gpu, rank, world)


def offer_runs(
    pending: list[Pending],
    collections: list[Collection],
    *,
    cache: TraceCache,
    progress: Progress | None = None,
    defer_store: list[Parsed] | None = None,
) -> tuple[list[Offer], list[Failure]]:
    """The runs on offer, in the order open_all gives them (a group's ranks as one run in its
    first file's place), and the files that failed. A file its manifest describes (manifest_facts)
    is offered from those facts unless its trace is in memory; the others are opened now (open_all:
    from memory, from the store, else parsed, with progress), as are the files of a group of ranks
    that are not all described alike."""
    described = manifest_facts(collections)
    facts: dict[str, Facts] = {}
    for item in pending:
        known = item.digest in cache.failures or cache.get(item.digest) is not None  # open_all: at once
        if not known and item.source.id in described:
            facts[item.source.id] = described[item.source.id]
    groups: dict[str, list[Pending]] = {}
    for item in pending:
        if item.source.group is not None:
            groups.setdefault(item.source.group, []).append(item)
    joined: set[str] = set()
    for group, members in groups.items():  # a group opens as a whole: parsed together unless all is described
        known = [facts.get(m.source.id) for m in members]
        if any(f is None for f in known) or len({_shared(f) for f in known if f is not None}) > 1:
            for m in members:
                facts.pop(m.source.id, None)
        elif one_job([f.rank for f in known if f], [f.world for f in known if f]):  # catalog.join_ranks' rule
            joined.add(group)
    todo = [item for item in pending if item.source.id not in facts]
    parsed, failures = open_all(todo, progress, cache=cache, defer_store=defer_store) if todo else ([], [])
    by_id = {run.source.id: run for run in parsed}
    offers: list[Offer] = []
    placed: set[str] = set()
    for item in pending:
        ident, group = item.source.id, item.source.group
        key = group if group in by_id or group in joined else ident
        if key in placed or (key not in by_id and ident not in facts):  # placed, or it failed
            continue
        placed.add(key)
        if key in by_id:
            offers.append(Offer.of_run(by_id[key], groups.get(key, [item])))
        elif key == group:
            offers.append(_group_offer(groups[group], facts))
        else:
            offers.append(_single(item, facts[ident]))
    return offers, failures


def _shared(facts: Facts) -> tuple:
    """What a group's ranks must share to be offered as one run: all their facts but the rank."""
    return tuple(sorted(facts.collector.items())), facts.has_gpu, facts.world


def _group_offer(members: list[Pending], facts: dict[str, Facts]) -> Offer:
    """The run of a group's ranks (one job, as their manifest entries say), as catalog.rank_run
    names it; its facts are its ranks' (which agree)."""
    source = group_source(members[0].source)
    digests = {facts[m.source.id].rank or 0: m.digest for m in members}
    label = f"{source.name} ({len(members)} ranks)"
    first = members[0].source.id
    return Offer(source, label, sum(m.size for m in members), facts[first], dict(sorted(digests.items())), members)


def _single(item: Pending, facts: Facts) -> Offer:
    return Offer(
        item.source, default_label(item.source, facts), item.size, facts, {facts.rank or 0: item.digest}, [item]
    )


def open_offers(
    offers: list[Offer],
    *,
    cache: TraceCache,
    progress: Progress | None = None,
    defer_store: list[Parsed] | None = None,
) -> tuple[dict[str, Run], list[Failure]]:
    """The runs of these offers, by run id, parsed (or reopened from the store) where not yet, and
    what failed: a file that does not parse, or files that, parsed, are not the run their
    manifest said (ranks that are no job after all): a Failure naming the run."""
    opened = {o.source.id: o.run for o in offers if o.run is not None}
    todo = [o for o in offers if o.run is None]
    if not todo:
        return opened, []
    found, failures = open_all([m for o in todo for m in o.members], progress, cache=cache, defer_store=defer_store)
    by_id = {run.source.id: run for run in found}
    for offer in todo:
        run = by_id.get(offer.source.id)
        if run is not None:
            offer.run = opened[offer.source.id] = run
        elif not any(f.source.id in {m.source.id for m in offer.members} for f in failures):
            failures.append(Failure(offer.source, f"{offer.source.name}: its files are not the run its manifest lists"))
    return opened, failures


class LazyRanks(Mapping):
    """Label -> every rank's trace of runs of several ranks, opened when a tab first asks for one
    (the Ranks tab shows one the comparison did not choose): until then the picker's runs of
    several ranks need not be parsed. A run that fails to open raises TraceError with the reason."""

    def __init__(self, offers: dict[str, Offer], cache: TraceCache) -> None:
        self.offers, self.cache = offers, cache

    def __getitem__(self, label: str) -> dict[int, Trace]:
        offer = self.offers[label]
        opened, failures = open_offers([offer], cache=self.cache)
        if offer.source.id not in opened:
            raise TraceError(failures[0].message if failures else f"{offer.source.name}: not loaded")
        return opened[offer.source.id].ranks

    def __iter__(self) -> Iterator[str]:
        return iter(self.offers)

    def __len__(self) -> int:
        return len(self.offers)


MODES = ("eager", "compiled", "CUDA graphs")
# The article's path, in its order: the variants the dashboard opens on (eager), when present.
ARTICLE_VARIANTS = ("naive", "naive_inplace", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "hub")


def mode_of(trace: Trace) -> str | None:
    """How a collectors' run executed: 'CUDA graphs', 'compiled' or 'eager'; None for a trace the
    collectors did not write (nothing says)."""
    meta = trace.collector or {}
    if not meta.get("variant"):
        return None
    return MODES[2] if meta.get("cuda_graphs") else MODES[1] if meta.get("compiled") else MODES[0]


def article_path(ids: list[str], traces: dict[str, Trace], with_modes: bool = False) -> list[str]:
    """Of a set of runs (ids in order), the article's path: the ARTICLE_VARIANTS present, in the
    article's order, eager only unless `with_modes` (then each variant's compiled and CUDA-graph
    runs follow it). Runs that are not the collectors' variants are kept as they are; when no
    article variant is present, `ids` unchanged."""
    variant = {i: (traces[i].collector or {}).get("variant") for i in ids}
    if not any(v in ARTICLE_VARIANTS for v in variant.values()):
        return list(ids)
    order = {v: n for n, v in enumerate(ARTICLE_VARIANTS)}
    mode_rank = {m: n for n, m in enumerate(MODES)}
    chosen = [i for i in ids if variant[i] in order and (with_modes or mode_of(traces[i]) == MODES[0])]
    chosen.sort(key=lambda i: (order[variant[i]], mode_rank.get(mode_of(traces[i]) or "", 0)))
    return chosen


def opening_runs(sets: list[RunSet], loaded: list[Offer]) -> list[str]:
    """What the dashboard selects at first open: catalog.first_look's set, and when that is a
    bundled collection of the collectors' variants, its article path (naive, naive_inplace, sdpa,
    the forced backends, the hub kernel when present), eager; the sidebar's switch adds the
    compiled and CUDA-graph runs."""
    ids = first_look(sets)
    bundled = {i for s in sets if s.bundled for i in s.ids}
    if not ids or not set(ids) <= bundled:
        return ids
    facts = {r.source.id: r.facts for r in loaded}  # what article_path reads of a trace
    return article_path(ids, facts) or ids
