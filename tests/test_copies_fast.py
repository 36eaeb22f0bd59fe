"""copies() works per distinct op chain and reads the events that hold the copies level by level;
here it is compared with the obvious version it replaced (a parent walk, a joined chain and a
shape lookup per copy, kept below as it was) on every real trace in tests/data and sample_traces:
the same table, row for row."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from dashboard.engine import load_trace
from dashboard.engine.analyses.classes import name_is
from dashboard.engine.analyses.copies import (
    CHAIN_CATEGORIES,
    CHAIN_SEP,
    COPY_COLUMNS,
    HIDDEN,
    REQUESTED,
    UNATTRIBUTED,
    _tensor_bytes,
    classify_chain,
    copies,
)
from dashboard.engine.model.trace import Trace, names_matching
from dashboard.engine.rules import is_kv_cache_write
from dashboard.engine.rules.ops import COPY_OP, STEP_MARK

ROOT = Path(__file__).parent.parent
TRACES = sorted((ROOT / "tests" / "data").glob("*.json.gz")) + sorted((ROOT / "sample_traces").glob("*/*.json.gz"))


@pytest.mark.parametrize("path", TRACES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_copies_are_the_slow_versions_row_for_row(path):
    trace = load_trace(path)
    slow = slow_copies(trace)
    assert_frame_equal(copies.__wrapped__(trace), slow)


def _op(name: str, ts: int, dur: int, **args) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _memcpy(ts: int, correlation: int) -> dict:
    args = {"correlation": correlation, "device": 0, "stream": 7, "bytes": 64}
    return {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy DtoD (Device -> Device)",
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": 3,
        "args": args,
    }


def test_a_chain_reached_at_two_depths_and_a_copy_without_a_launch_read_as_before():
    """The same op chain under an annotation and straight under the step (two depths, one chain),
    a launch in a non-op event, and a memcpy whose launch is missing: as the slow version reads them."""
    shapes = {"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "dur": 2}
    events = [
        _op("ProfilerStep#1", 0, 1000),
        {"ph": "X", "cat": "user_annotation", "name": "region", "pid": 1, "tid": 1, "ts": 5, "dur": 500},
        _op("aten::masked_fill", 10, 400),
        _op("aten::clone", 12, 390),
        _op("aten::copy_", 14, 380, **shapes),
        {**launch, "ts": 100, "args": {"correlation": 1}},
        _op("aten::masked_fill", 600, 300),
        _op("aten::clone", 602, 290),
        _op("aten::copy_", 604, 280, **shapes),
        {**launch, "ts": 700, "args": {"correlation": 2}},
        _op("aten::to", 950, 40),
        {**launch, "ts": 960, "args": {"correlation": 3}},
        _memcpy(200, 1),
        _memcpy(800, 2),
        _memcpy(970, 3),
        _memcpy(990, 9),
    ]
    trace = load_trace(json.dumps({"traceEvents": events}).encode())
    table = copies.__wrapped__(trace)
    assert_frame_equal(table, slow_copies(trace))
    hidden = ["aten::masked_fill", "aten::clone", "aten::copy_"]  # read off the events above
    assert table["op_chain"].to_list() == [hidden, hidden, ["aten::to"], []]
    assert table["copy_class"].to_list() == ["hidden", "hidden", "requested", "unattributed"]


def test_every_trace_is_compared():
    assert len(TRACES) >= 50, [path.name for path in TRACES]


# ---------------------------------------------------------------- the slow version, as it was


def slow_copies(trace: Trace) -> pl.DataFrame:
    """copies() as it was before it worked per distinct chain: a walk and a join per copy."""
    ev = trace.events
    if trace.has_gpu:
        found = ev.filter(
            (pl.col("cat") == "gpu_memcpy")
            | ((pl.col("cat") == "kernel") & name_is(trace, "family", {"copy"}, ("kernel",)))
        ).with_columns(
            pl.when(pl.col("cat") == "gpu_memcpy")
            .then(pl.col("kind").cast(pl.String))
            .otherwise(pl.lit("kernel"))
            .alias("kind"),
            pl.col("launch").alias("anchor"),
        )
    else:
        found = ev.filter((pl.col("cat") == "cpu_op") & (pl.col("name") == COPY_OP)).with_columns(
            pl.lit("cpu").alias("kind"), pl.col("id").alias("anchor")
        )
    if found.height == 0:
        return pl.DataFrame(schema=COPY_COLUMNS)
    paths = _op_paths(trace, found["anchor"].to_list())
    names = _names_of(trace, {node for path in paths for node in path})
    # joined then split in polars: building a list column element by element is slow
    joined = [CHAIN_SEP.join(names[node] for node in path) for path in paths]
    verdicts = {chain: classify_chain(chain.split(CHAIN_SEP) if chain else []) for chain in set(joined)}
    cache_write = [name is not None and is_kv_cache_write(name) for name in found["name"].cast(pl.String).to_list()]
    found = found.with_columns(
        pl.Series("op_chain", joined, dtype=pl.String)
        .str.split(CHAIN_SEP)
        .list.eval(pl.element().filter(pl.element() != "")),
        pl.Series("origin", [verdicts[chain][0] for chain in joined], dtype=pl.String),
        pl.Series(
            "copy_class",
            [
                REQUESTED if kv and verdicts[chain][1] in (HIDDEN, UNATTRIBUTED) else verdicts[chain][1]
                for chain, kv in zip(joined, cache_write)
            ],
            dtype=pl.String,
        ),
    )
    found = _fill_bytes_from_shapes(trace, found, paths, names)
    # Only a 0-dim source converted by aten::to/_to_copy (`scores * 0.125`) is a scalar conversion;
    # a GPU memcpy is always kept, whatever its size.
    converts = pl.col("op_chain").list.eval(pl.element().is_in(["aten::to", "aten::_to_copy"])).list.any()
    found = found.filter(~(pl.col("scalar") & converts & (pl.col("cat") != "gpu_memcpy")))
    return found.select(
        "id",
        "step",
        "kind",
        pl.col("name").cast(pl.String),
        "ts_ns",
        "dur_ns",
        "bytes",
        pl.when(pl.col("dur_ns") > 0).then(pl.col("bytes") / pl.col("dur_ns")).otherwise(None).alias("gbps"),
        "device",
        "stream",
        "op_chain",
        "origin",
        "copy_class",
        (pl.col("copy_class") == HIDDEN).alias("hidden"),
    )


def _op_paths(trace: Trace, anchors: list[int | None]) -> list[list[int]]:
    """For each anchor event id (a launch call or a CPU op), the ids of the cpu_ops that hold it,
    outermost first (the anchor itself included when it is a cpu_op; ProfilerStep left out).
    Walks parent links with numpy arrays only: no per-event Python objects."""
    ev = trace.events
    parent = ev["parent"].fill_null(-1).to_numpy()
    marks = names_matching(ev["name"], lambda name: name.str.starts_with(STEP_MARK))
    is_op = ev.select(pl.col("cat").is_in(CHAIN_CATEGORIES) & ~marks).to_series().to_numpy()
    cache: dict[int, list[int]] = {}
    out: list[list[int]] = []
    for anchor in anchors:
        if anchor is None:
            out.append([])
            continue
        if anchor not in cache:
            path: list[int] = []
            node = int(anchor)
            while node >= 0:
                if is_op[node]:
                    path.append(node)
                node = int(parent[node])
            path.reverse()
            cache[anchor] = path
        out.append(cache[anchor])
    return out


def _names_of(trace: Trace, ids: set[int]) -> dict[int, str]:
    order = sorted(ids)
    return dict(zip(order, trace.events["name"].gather(order).cast(pl.String).to_list()))


def _fill_bytes_from_shapes(
    trace: Trace, found: pl.DataFrame, paths: list[list[int]], names: dict[int, str]
) -> pl.DataFrame:
    """Bytes for copies that carry none (copy kernels, CPU copies), from the innermost
    aten::copy_'s Input Dims and Input type when shapes were recorded; and mark scalar copies."""
    inner = [next((node for node in reversed(path) if names[node] == COPY_OP), None) for path in paths]
    wanted = sorted({node for node in inner if node is not None})
    shapes = trace.events.select("input_dims", "input_types")[wanted] if wanted else None
    recorded = dict(zip(wanted, shapes.iter_rows())) if shapes is not None else {}
    sizes: dict[tuple[str, str | None], tuple[int | None, bool]] = {}
    shape_bytes: list[int | None] = []
    scalar: list[bool] = []
    for node in inner:
        dims, types = recorded.get(node, (None, None)) if node is not None else (None, None)
        if dims is None:
            shape_bytes.append(None)
            scalar.append(False)
            continue
        if (dims, types) not in sizes:
            sizes[(dims, types)] = _tensor_bytes(dims, types)
        size, is_scalar = sizes[(dims, types)]
        shape_bytes.append(size)
        scalar.append(is_scalar)
    return found.with_columns(
        pl.coalesce(pl.col("bytes"), pl.Series(shape_bytes, dtype=pl.Int64)).alias("bytes"),
        pl.Series("scalar", scalar, dtype=pl.Boolean),
    )
