"""CUDA-graph kernels attributed to the ops that launched them, from a source trace.

A replayed graph's kernels all sit under one launch call (cudaGraphLaunch, hipGraphLaunch), so an op
view of a graph run blames every one of them on whatever holds the launch (HTA issue #290, TraceLens
#827). The trace carries no graph node ids. What does carry the ops is a trace of the same compiled
code run without the graph (the collectors' `.compiled` twin of a `.graphs` run, or the warm-up
call profiled in the same trace): its kernels come in the same order, each under the op chain that
launched it. So each graph launch's replayed kernels, in device order, are aligned by name with one
step of the source's device events (difflib's longest matching blocks, deterministic), and a kernel
that aligns takes the op chain of its twin. A kernel that does not align stays unattributed and is
named; nothing is guessed.

Without a source, replay_share says how much of the device time is replayed (and so not attributed
to ops), so that it never reads as idle or as "no ops".
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from dashboard.engine.analyses.copies import _op_paths
from dashboard.engine.analyses.graphs import graph_replays, replay_share  # noqa: F401  replay_share: the no-source answer
from dashboard.engine.model.trace import GPU_CATEGORIES, Trace

CHAIN_SEP = " > "
ATTRIBUTION_SCHEMA: dict[str, Any] = {
    "launch": pl.Int64,  # the graph launch call's event id in the graph run
    "step": pl.Int64,
    "id": pl.Int64,  # the replayed device event's id
    "name": pl.String,
    "dur_ns": pl.Int64,
    "source_step": pl.Int64,  # the source step it was aligned with (null: not aligned)
    "source_id": pl.Int64,  # its twin in the source trace (null: not aligned)
    "chain": pl.String,  # the twin's op chain, outermost first, CHAIN_SEP between (null: not aligned, or no op)
}


def _device_events(trace: Trace) -> pl.DataFrame:
    """The device events of a trace in device order (start, then id): id, step, name, launch, dur_ns."""
    return (
        trace.events.filter(pl.col("cat").is_in(GPU_CATEGORIES))
        .select("id", "step", pl.col("name").cast(pl.String), pl.col("launch").fill_null(-1), "dur_ns", "ts_ns")
        .sort("ts_ns", "id")
    )


def _source_steps(source: Trace) -> list[tuple[int, list[str], list[int], list[str | None]]]:
    """Per step of the source (in step order): (step, device event names in device order, their ids,
    their op chains), the chains read from the ops that hold each event's launch call (None: no op holds
    it, or it has no launch call)."""
    work = _device_events(source).filter(pl.col("step").is_not_null())
    if work.height == 0:
        return []
    launches = work["launch"].to_list()
    paths = _op_paths(source, [a if a >= 0 else None for a in launches])
    names = source.events["name"].cast(pl.String)
    chains = [CHAIN_SEP.join(names[i] for i in path) if path else None for path in paths]
    out = []
    steps = work["step"].to_numpy()
    all_names, all_ids = work["name"].to_list(), work["id"].to_list()
    for step in sorted(set(steps.tolist())):
        rows = np.flatnonzero(steps == step).tolist()
        out.append((int(step), [all_names[r] for r in rows], [all_ids[r] for r in rows], [chains[r] for r in rows]))
    return out


def _align(
    replay: list[str], steps: list[tuple[int, list[str], list[int], list[str | None]]]
) -> tuple[int, dict[int, int]]:
    """(index into steps of the best match, replay position -> source position) for one replay's
    kernel names: the step whose events match the most names (the first such step on a tie)."""
    best: tuple[int, dict[int, int]] = (-1, {})
    for at, (_, names, _, _) in enumerate(steps):
        matcher = difflib.SequenceMatcher(None, replay, names, autojunk=False)
        pairs = {block.a + k: block.b + k for block in matcher.get_matching_blocks() for k in range(block.size)}
        if len(pairs) > len(best[1]):
            best = (at, pairs)
        if len(pairs) == len(replay):
            break
    return best


def replay_chains(graphs: Trace, source: Trace) -> pl.DataFrame:
    """One row per device event a graph launch of `graphs` replayed (ATTRIBUTION_SCHEMA), in launch
    then device order, with the op chain of its aligned twin in `source` (null where none aligned)."""
    launches = graph_replays(graphs)
    if launches.height == 0:
        return pl.DataFrame(schema=ATTRIBUTION_SCHEMA)
    replayed = _device_events(graphs).filter(pl.col("launch").is_in(launches["launch"].to_list()))
    steps = _source_steps(source)
    cache: dict[tuple[str, ...], tuple[int, dict[int, int]]] = {}
    rows: list[dict[str, Any]] = []
    by_launch = replayed.partition_by("launch", as_dict=True, maintain_order=True)  # one pass, not one filter each
    for launch in launches["launch"].to_list():
        mine = by_launch.get((launch,), replayed.clear())
        names = tuple(mine["name"].to_list())
        if names not in cache:
            cache[names] = _align(list(names), steps) if steps else (-1, {})
        at, pairs = cache[names]
        for pos, row in enumerate(mine.iter_rows(named=True)):
            twin = pairs.get(pos)
            step = steps[at] if twin is not None else None
            rows.append(
                {
                    "launch": launch,
                    "step": row["step"],
                    "id": row["id"],
                    "name": row["name"],
                    "dur_ns": row["dur_ns"],
                    "source_step": step[0] if step else None,
                    "source_id": step[2][twin] if step else None,
                    "chain": step[3][twin] if step else None,
                }
            )
    return pl.DataFrame(rows, schema=ATTRIBUTION_SCHEMA)


TWIN_KEYS = ("variant", "backend_requested", "shape", "dtype", "device_name", "torch_version")
"""What a collectors' compiled run must share with a .graphs run to be its twin (the same code, on the
same device and torch, compiled without graphs)."""


def compiled_twin(graphs: Trace, runs: Mapping[str, Trace]) -> str | None:
    """The label of the run among `runs` that is the compiled twin of a collectors' .graphs run (its
    metadata agrees on TWIN_KEYS; compiled, no CUDA graphs), the first in order; None for a trace
    without that metadata or without such a run."""
    mine = graphs.collector or {}
    if mine.get("cuda_graphs") is not True or "variant" not in mine:
        return None
    for label, trace in runs.items():
        other = trace.collector or {}
        if other.get("compiled") is True and other.get("cuda_graphs") is not True:
            if all(other.get(key) == mine.get(key) for key in TWIN_KEYS):
                return label
    return None


def graph_attribution(graphs: Trace, source: Trace) -> dict[str, Any]:
    """For `summary --json` and the reports: the replayed device events of `graphs` attributed through
    `source`: {"source", "kernels", "attributed", "device_us", "attributed_share" (of the replayed
    device time), "ops": [{"op": innermost op, "chain", "kernels", "device_us"}] (by device time, then
    chain), "without_op": events whose twin no op holds, "unaligned": sorted names that found no twin}."""
    table = replay_chains(graphs, source)
    done = table.filter(pl.col("chain").is_not_null())
    twinned = table.filter(pl.col("source_id").is_not_null())
    total = int(table["dur_ns"].sum() or 0)
    by_chain = (
        done.group_by("chain")
        .agg(pl.len().alias("kernels"), pl.col("dur_ns").sum().alias("ns"))
        .sort(["ns", "chain"], descending=[True, False])
    )
    return {
        "source": source.source,
        "kernels": table.height,
        "attributed": done.height,
        "device_us": round(total / 1e3, 3),
        "attributed_share": round(int(done["dur_ns"].sum() or 0) / total, 4) if total else None,
        "ops": [
            {
                "op": chain.split(CHAIN_SEP)[-1],
                "chain": chain,
                "kernels": int(kernels),
                "device_us": round(ns / 1e3, 3),
            }
            for chain, kernels, ns in by_chain.iter_rows()
        ],
        "without_op": twinned.height - done.height,
        "unaligned": sorted(set(table.filter(pl.col("source_id").is_null())["name"].to_list())),
    }
