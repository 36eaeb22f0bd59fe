"""The one classifier (dashboard/engine/analyses/classes.py) against the patterns each reader held
before it: every name of every real trace (read with the json module) and every example name of
the rules' tables falls in the same reader's set by its op kind as by the old pattern; the
classes table holds each distinct (category, name) once; the analyses ask it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import polars as pl
import pytest

from dashboard.engine import load_trace
from dashboard.engine.analyses import classes
from dashboard.engine.analyses.classes import (
    AUTOGRAD_KINDS,
    BOOKKEEPING_KINDS,
    COMPILED_REGION_KINDS,
    METADATA,
    NOT_MODEL_FINGERPRINT_KINDS,
    OP_KINDS,
    WORKLESS_KINDS,
    WRAPPING_KINDS,
    name_classes,
    op_kind_of,
)
from dashboard.engine.model.trace import LAUNCH_CATEGORIES
from dashboard.engine.rules import GRAPH_LAUNCH, attention_backend
from dashboard.engine.rules.ops import ANNOTATION, METADATA_OPS, not_model_ops
from tests import oracle

ROOT = Path(__file__).resolve().parents[1]
REAL = sorted(p for p in oracle.DATA.glob("*.json.gz"))
SAMPLES = sorted((ROOT / "sample_traces").glob("*/*.json.gz"))

# The readers' patterns as rules/ops.py wrote them before the one classifier (the slow, obvious version).
OLD = {
    "bookkeeping": re.compile(not_model_ops("bookkeeping", "compiled region")),
    "workless": re.compile(not_model_ops("bookkeeping", "compiled region") + "|" + METADATA_OPS),
    "wrapping": re.compile(not_model_ops("bookkeeping", "compiled region", "compiled graph", "wrapper", "autograd")),
    "autograd": re.compile(not_model_ops("autograd")),
    "fingerprint": re.compile(
        not_model_ops("bookkeeping", "compiled region", "autograd", "compiled graph") + "|" + METADATA_OPS
    ),
    "compiled region": re.compile(not_model_ops("compiled region")),
    "metadata": re.compile(METADATA_OPS),
}
NEW = {
    "bookkeeping": BOOKKEEPING_KINDS,
    "workless": WORKLESS_KINDS,
    "wrapping": WRAPPING_KINDS,
    "autograd": AUTOGRAD_KINDS,
    "fingerprint": NOT_MODEL_FINGERPRINT_KINDS,
    "compiled region": COMPILED_REGION_KINDS,
    "metadata": frozenset({METADATA}),
}


def _old(reader: str, name: str) -> bool:
    hit = bool(OLD[reader].search(name))
    if reader == "wrapping":  # copies.is_wrapper also took record_function marks
        hit = hit or bool(ANNOTATION.search(name))
    return hit


def _names_of(path: Path) -> set[tuple[str, str]]:
    """Every (category as written, name) of the file's complete events, read with the json module."""
    return {(str(e.get("cat")), e["name"]) for e in oracle.complete(oracle.raw(path)) if isinstance(e.get("name"), str)}


def _rule_example_names() -> set[str]:
    lines = (oracle.DATA / "kernel_names.tsv").read_text().splitlines()
    names = {line.split("\t")[0] for line in lines if line and not line.startswith("#")}
    # the op names the rules' own rows and docs name as examples
    names |= {
        "CompiledFunctionBackward",
        "## Call CompiledFxGraph fabc123 ##",
        "Torch-Compiled Region: 0/0",
        "ProfilerStep#3",
        "autograd::engine::evaluate_function: MmBackward0",
        "nn.Module: Linear_0",
        "DistributedDataParallel.forward",
        "aten::view",
        "aten::contiguous",
        "aten::copy_",
        "aten::masked_fill",
        "my_region",
        "attention.forward",
    }
    return names


@pytest.mark.parametrize("path", REAL + SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_reader_keeps_its_names(path):
    """Each reader's kinds hold exactly the op names its pattern held, over every name in the file."""
    wrong = []
    for _, name in _names_of(path):
        kind = op_kind_of(name)
        for reader, kinds in NEW.items():
            if (kind in kinds) != _old(reader, name):
                wrong.append((reader, name, kind))
    assert not wrong, wrong[:10]


def test_rule_examples_keep_their_readers():
    wrong = [
        (reader, name, op_kind_of(name))
        for name in _rule_example_names()
        for reader, kinds in NEW.items()
        if (op_kind_of(name) in kinds) != _old(reader, name)
    ]
    assert not wrong, wrong
    assert op_kind_of("CompiledFunctionBackward") == "autograd"  # gradient work, before the compiled graph
    assert op_kind_of("## Call CompiledFxGraph fabc123 ##") == "compiled region"
    assert op_kind_of("aten::masked_fill") is None  # the model's op


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_classes_table_names_each_name_once(path):
    trace = load_trace(path)
    table = name_classes(trace)
    assert list(table.schema.items()) == list(classes.CLASSES_SCHEMA.items())
    assert table.select("cat", "name").is_duplicated().sum() == 0
    # every name of the file's complete events is in the table (categories are normalized by the loader)
    assert {n for _, n in _names_of(path)} == set(table["name"].to_list())
    for cat, name, family, backend, kind, launch in table.iter_rows():
        assert (kind is not None) <= (cat in ("cpu_op", "user_annotation"))
        assert kind is None or kind in OP_KINDS
        if cat in ("cpu_op", "kernel"):
            row = attention_backend(name)
            assert backend == (row.name if row else None), name
        if cat == "gpu_memcpy":
            assert family == "copy"
        if cat == "gpu_memset":
            assert family == "memset"
        graph = bool(re.search(GRAPH_LAUNCH, name)) and cat in LAUNCH_CATEGORIES
        assert (launch == "graph") == graph, name


def test_work_events_family_matches_the_table():
    """work_events' family column comes from the classes table: a kernel's family is its name's row."""
    from dashboard.engine.analyses.kernels import work_events

    trace = load_trace(oracle.DATA / "tracelens_h100_bert_sdpa_flash.json.gz")
    table = name_classes(trace).filter(pl.col("cat") == "kernel")
    family = dict(zip(table["name"].to_list(), table["family"].to_list()))
    work = work_events(trace).filter(pl.col("cat") == "kernel")
    assert work.height > 0
    assert all(family[n] == f for n, f in zip(work["name"].cast(pl.String).to_list(), work["family"].to_list()))


READERS = [
    "dashboard/engine/analyses/kernels.py",
    "dashboard/engine/analyses/copies.py",
    "dashboard/engine/analyses/backends.py",
    "dashboard/engine/analyses/roofline.py",
    "dashboard/engine/analyses/roofline_bytes.py",
    "dashboard/engine/compare/fingerprint.py",
    "dashboard/engine/analyses/graphs.py",
]
PATTERNS = {
    "BOOKKEEPING_OPS",
    "METADATA_OPS",
    "NOT_MODEL_OPS",
    "WRAPPER_OPS",
    "AUTOGRAD_OPS",
    "COMPILED_REGION",
    "ANNOTATION",
}


@pytest.mark.parametrize("module", READERS)
def test_readers_ask_the_classifier_not_a_pattern(module):
    """The analyses that sort ops by kind use no op-kind pattern of rules.ops themselves (a
    re-export for old callers aside)."""
    tree = ast.parse((ROOT / module).read_text())
    used = [
        (node.id, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id in PATTERNS and isinstance(node.ctx, ast.Load)
    ]
    assert not used, f"{module} applies {used}: ask dashboard.engine.analyses.classes instead"
