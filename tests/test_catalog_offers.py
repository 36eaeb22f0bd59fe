"""The run picker before parsing (dashboard/catalog_offers.py): what the bundled collections'
manifests say of each run equals what its parsed trace says (the parse is the oracle), so the
picker's runs, labels, sets, modes and default selection are those of parsing every file; runs no
manifest describes are parsed to be offered, as before; the chosen runs are parsed when chosen."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from dashboard import catalog, catalog_offers, runs
from dashboard.catalog import Facts, TraceCache, discover, open_all, pending_files

REPO = Path(__file__).resolve().parent.parent
LOOSE = REPO / "tests" / "data" / "hta_triton_example.json.gz"  # no manifest: a loose file named at start


def bundled_pending(cache: TraceCache, extra: tuple[Path, ...] = ()) -> tuple[list, list]:
    """The bundled collections (and `extra` paths) and their files to open, as the dashboard finds them."""
    collections, loose, failures = discover(extra=extra)
    assert not failures
    items = pending_files([s for c in collections for s in c.sources] + loose, cache)
    assert all(isinstance(i, catalog.Pending) for i in items)
    return collections, items


def picker(items: list, facts_of) -> dict:
    """What the sidebar shows of these runs (Runs or Offers): ids, default labels, origins, the
    sets of runs, the default selection (catalog_offers.opening_runs) and each run's mode."""
    from dashboard.catalog_offers import opening_runs  # noqa: PLC0415

    sets = catalog.run_sets(items)
    return {
        "ids": [r.source.id for r in items],
        "labels": [r.label for r in items],
        "origins": [catalog.origin(r.source) for r in items],
        "sizes": [r.size_bytes for r in items],
        "digests": [r.digests for r in items],
        "sets": sets,
        "opening": opening_runs(sets, items),
        "modes": [runs.mode_of(facts_of(r)) for r in items],
    }


def test_the_collectors_manifests_say_what_each_parsed_trace_says(trace_of) -> None:
    collections, _, _ = discover()
    described = catalog_offers.manifest_facts(collections)
    sources = {s.id: s for c in collections for s in c.sources}
    collected = {c.name for c in collections if str(c.manifest.get("command", "")).startswith("python -m collectors")}
    assert collected == {"cpu", "h200", "ranks-cpu"}  # gpu-public's traces are foreign: parsed to be offered
    assert set(described) == {i for i, s in sources.items() if s.collection in collected}
    for ident, facts in described.items():
        assert facts == Facts.of(trace_of(sources[ident].path)), ident


def test_the_picker_from_manifests_is_the_picker_from_parsing_every_file() -> None:
    oracle_cache = TraceCache(store=None)
    _, items = bundled_pending(oracle_cache)
    parsed, bad = open_all(items, cache=oracle_cache)
    assert not bad and len(parsed) == 36

    cache = TraceCache(store=None)
    collections, items = bundled_pending(cache)
    offers, bad = catalog_offers.offer_runs(items, collections, cache=cache)
    assert not bad
    assert picker(offers, lambda o: o.facts) == picker(parsed, lambda r: r.trace)
    assert cache.parses == 4  # gpu-public's four traces, not the 35 files the manifests describe
    assert [o.source.id for o in offers if o.run is not None] == [
        r.source.id for r in parsed if "gpu-public" in r.source.id
    ]


def test_the_chosen_runs_are_parsed_when_chosen_and_are_the_runs_of_parsing() -> None:
    cache = TraceCache(store=None)
    collections, items = bundled_pending(cache)
    offers, _ = catalog_offers.offer_runs(items, collections, cache=cache)
    offered = {o.source.id: o for o in offers}
    chosen = ["h200/naive", "h200/sdpa", "ranks-cpu/ranks"]
    opened, bad = catalog_offers.open_offers([offered[i] for i in chosen], cache=cache)
    assert not bad and list(opened) == chosen
    assert cache.parses == 4 + 2 + 4  # gpu-public, two H200 runs, the four ranks

    oracle_cache = TraceCache(store=None)
    oracle = {r.source.id: r for r in open_all(bundled_pending(oracle_cache)[1], cache=oracle_cache)[0]}
    for ident in chosen:
        run, truth = opened[ident], oracle[ident]
        assert (run.label, run.digest, run.digests, sorted(run.ranks)) == (
            truth.label,
            truth.digest,
            truth.digests,
            sorted(truth.ranks),
        )
        assert run.trace.events.equals(truth.trace.events)  # the slowest rank, as parsing every file chose it


def test_the_ranks_tab_example_is_parsed_when_asked_for() -> None:
    cache = TraceCache(store=None)
    collections, items = bundled_pending(cache)
    offers, _ = catalog_offers.offer_runs(items, collections, cache=cache)
    group = next(o for o in offers if len(o.digests) > 1)
    lazy = catalog_offers.LazyRanks({"ranks-cpu (4 ranks)": group}, cache)
    before = cache.parses
    assert list(lazy) == ["ranks-cpu (4 ranks)"] and len(lazy) == 1 and cache.parses == before
    ranks = lazy["ranks-cpu (4 ranks)"]
    assert sorted(ranks) == [0, 1, 2, 3] and cache.parses == before + 4
    files = {s.path.name: s.path for c in collections for s in c.sources if c.name == "ranks-cpu"}
    for rank, trace in ranks.items():  # each rank's trace is its own file's (distributedInfo names it)
        meta = json.loads(gzip.decompress(files[f"rank-{rank}.json.gz"].read_bytes()))
        assert meta["distributedInfo"]["rank"] == rank == trace.meta["distributedInfo"]["rank"]


def test_a_run_without_a_manifest_is_parsed_and_offered_beside_the_bundled_ones() -> None:
    cache = TraceCache(store=None)
    collections, items = bundled_pending(cache, extra=(LOOSE,))
    offers, bad = catalog_offers.offer_runs(items, collections, cache=cache)
    assert not bad
    loose = offers[-1]
    assert (loose.source.id, loose.label) == ("file/hta_triton_example.json.gz", "hta_triton_example")
    assert loose.run is not None and loose.facts == Facts.of(loose.run.trace)
    sets = catalog.run_sets(offers)
    assert sets[-1] == catalog.RunSet(catalog.FILES, [loose.source.id], bundled=False, gpu=True, collected=False)
    assert catalog.first_look(sets) == [loose.source.id]  # what the command line named opens first, as before


@pytest.fixture
def small_collection(tmp_path: Path) -> Path:
    """A copy of the bundled CPU collection, with two of its ten runs in the manifest."""
    folder = tmp_path / "mine"
    source = REPO / "sample_traces" / "cpu"
    manifest = json.loads((source / "runs.json").read_text())
    manifest["collection"] = "mine"
    manifest["runs"] = manifest["runs"][:2]
    folder.mkdir()
    for entry in manifest["runs"]:
        shutil.copy(source / entry["trace"], folder / entry["trace"])
    (folder / "runs.json").write_text(json.dumps(manifest))
    return folder


def test_a_chosen_run_that_does_not_parse_then_fails_as_it_did_when_every_file_was_parsed(small_collection) -> None:
    (small_collection / "naive.compiled.json.gz").write_bytes(b"not a trace")
    oracle_cache = TraceCache(store=None)
    _, items = bundled_pending(oracle_cache, extra=(small_collection,))
    oracle, oracle_bad = open_all(items, cache=oracle_cache)

    cache = TraceCache(store=None)
    collections, items = bundled_pending(cache, extra=(small_collection,))
    offers, bad = catalog_offers.offer_runs(items, collections, cache=cache)
    assert not bad and "mine/naive.compiled" in [o.source.id for o in offers]  # the manifest describes it
    offered = {o.source.id: o for o in offers}
    opened, bad = catalog_offers.open_offers([offered["mine/naive"], offered["mine/naive.compiled"]], cache=cache)
    assert list(opened) == ["mine/naive"] and [f.source.id for f in bad] == ["mine/naive.compiled"]

    again, bad = catalog_offers.offer_runs(items, collections, cache=cache)  # the page's next run (app: st.rerun)
    assert [f.message for f in bad] == [f.message for f in oracle_bad]
    assert [o.source.id for o in again] == [r.source.id for r in oracle]


def test_a_manifest_not_written_by_the_collectors_is_not_read_for_facts(small_collection) -> None:
    manifest = json.loads((small_collection / "runs.json").read_text())
    del manifest["command"]
    (small_collection / "runs.json").write_text(json.dumps(manifest))
    cache = TraceCache(store=None)
    collections, items = bundled_pending(cache, extra=(small_collection,))
    offers, _ = catalog_offers.offer_runs(items, collections, cache=cache)
    mine = [o for o in offers if o.source.collection == "mine"]
    assert [o.label for o in mine] == ["naive", "naive (compiled)"] and all(o.run is not None for o in mine)


def test_the_app_opening_on_a_run_that_does_not_parse_shows_what_parsing_every_file_showed(
    small_collection, monkeypatch
) -> None:
    """The default selection of a collection named at start holds a file its manifest describes but
    that does not parse: the page runs again, and then says why in the sidebar and selects what
    the picker of parsed runs selects (the oracle: open_all of every file, catalog_offers.opening_runs)."""
    from streamlit.testing.v1 import AppTest  # noqa: PLC0415

    from dashboard.catalog_offers import opening_runs  # noqa: PLC0415

    (small_collection / "naive.json.gz").write_bytes(b"not a trace either")
    oracle_cache = TraceCache(store=None)
    _, items = bundled_pending(oracle_cache, extra=(small_collection,))
    oracle, oracle_bad = open_all(items, cache=oracle_cache)
    expected = opening_runs(catalog.run_sets(oracle), oracle)
    assert expected == ["mine/naive.compiled"]

    monkeypatch.setenv(catalog.ENV_TRACES, str(small_collection))
    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    [compare] = at.sidebar.multiselect
    assert compare.value == expected
    shown = [re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", e.value) for e in at.sidebar.error]  # Markdown's escapes undone
    assert shown == [f.message for f in oracle_bad]
    assert len(compare.options) == len(oracle) == 37 and "naive (compiled) [mine]" in compare.options
