"""--graph-source: the kernels a CUDA graph replayed, attributed to the ops that launched them through
a source trace (compare/graph_source.py), for `summary` and `compare`. The source is the one given
on the command line, else the one a collectors' `.graphs` trace names in its metadata
(`graph_source`, a file beside it)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from dashboard.cli.files import _load_all

if TYPE_CHECKING:
    from dashboard.engine.model.trace import Trace
    from dashboard.engine.store.store import Store

HELP = (
    "a trace of the same compiled code run without CUDA graphs (the collectors' .compiled twin): the kernels a "
    "graph replayed are matched to its kernels in order and take the op chains that launched them (default: the "
    "trace the .graphs run's metadata names, graph_source)"
)


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph-source", metavar="TRACE", help=HELP)


def source_path(path: str, collector: dict[str, Any] | None, given: str | None) -> str | None:
    """The source trace for the graph run at `path`: the one given, else its metadata's, beside it."""
    if given:
        return given
    named = (collector or {}).get("graph_source")
    return os.path.join(os.path.dirname(path), named) if isinstance(named, str) and named else None


class Sources:
    """Source traces loaded once each; a file that cannot be read is one error line."""

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self.loaded: dict[str, Trace | None] = {}
        self.errors: list[str] = []

    def get(self, path: str) -> Trace | None:
        if path not in self.loaded:
            traces, errors = _load_all([path], self.store)
            self.loaded[path] = traces[0] if traces else None
            self.errors += [f"--graph-source: {e}" for e in errors]
        return self.loaded[path]


def attribute(
    graphs: Trace, path: str, sources: Sources, given: str | None, twin: Trace | None = None
) -> dict[str, Any] | None:
    """The attribution of a trace's graph replays through its source (the one given, else its
    metadata's, else `twin`: its compiled twin among the runs compared), or None (no replays, no
    source, or a source that could not be read: then sources.errors says why)."""
    from dashboard.engine.analyses.graphs import graph_replays
    from dashboard.engine.compare.graph_source import graph_attribution

    if graph_replays(graphs).height == 0:
        return None
    where = source_path(path, graphs.collector, given)
    source = sources.get(where) if where else twin
    return graph_attribution(graphs, source) if source is not None else None


def with_attribution(summary: dict[str, Any], attribution: dict[str, Any] | None) -> dict[str, Any]:
    """The summary with its graphs block's attribution (a new dict; a kept summary stays as kept)."""
    if attribution is None:
        return summary
    return {**summary, "graphs": {**summary["graphs"], "attribution": attribution}}


def compare_lines(runs: dict[str, Trace], paths: dict[str, str], sources: Sources, given: str | None) -> list[str]:
    """For `compare`: the lines of each run whose device work a graph replayed, attributed through its
    source (--graph-source, its metadata's, or its compiled twin among the runs compared)."""
    from dashboard.cli.text import graph_lines
    from dashboard.engine.analyses.graphs import graph_summary
    from dashboard.engine.compare.graph_source import compiled_twin

    lines: list[str] = []
    for label, trace in runs.items():
        block = graph_summary(trace)
        if not block["launches"]:
            continue
        twin = compiled_twin(trace, runs)
        found = attribute(trace, paths.get(label, trace.source), sources, given, runs[twin] if twin else None)
        lines += [f"{label}:"] + graph_lines(with_attribution({"graphs": block}, found)["graphs"])
    return lines
