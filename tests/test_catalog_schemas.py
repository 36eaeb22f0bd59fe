"""The catalogue of analyses (model.catalog, issue 38 item 4): every per_trace analysis declares what it
returns, once; each table an analysis hands back on a real trace has exactly its declared columns,
order and dtypes; the kept analyses' writer refuses a table unlike its schema and the reader never
hands back one kept with another."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest

from dashboard.engine import ANALYSIS_MODULES, analysis_catalog
from dashboard.engine.model.catalog import CATALOG
from dashboard.engine.model.trace import ANALYSES, per_trace
from dashboard.engine.store import kept

REPO = Path(__file__).resolve().parent.parent
ENGINE = REPO / "dashboard" / "engine"
TRACES = sorted((REPO / "tests" / "data").glob("*.json.gz")) + sorted((REPO / "sample_traces").glob("*/*.json.gz"))
PER_STEP = "dashboard.engine.analyses.kernels.per_step"
SUMMARY = "dashboard.engine.analyses.summary.summarize"
DECLARES = {"schema", "json", "returns"}


def _decorators() -> dict[str, list[tuple[str, ast.expr]]]:
    """Every function of the engine decorated with per_trace, by module: (name, the decorator)."""
    found: dict[str, list[tuple[str, ast.expr]]] = {}
    for path in sorted(ENGINE.rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                for dec in node.decorator_list:
                    target = dec.func if isinstance(dec, ast.Call) else dec
                    if isinstance(target, ast.Name) and target.id == "per_trace":
                        found.setdefault(module, []).append((node.name, dec))
    return found


def test_every_analysis_in_the_source_declares_exactly_one_kind_of_answer():
    found = _decorators()
    assert sorted(found) == sorted(ANALYSIS_MODULES)  # the catalogue imports every module that has one
    for module, decorated in found.items():
        for name, dec in decorated:
            assert isinstance(dec, ast.Call), f"{module}.{name}: a bare @per_trace declares nothing"
            assert not dec.args and len(dec.keywords) == 1 and dec.keywords[0].arg in DECLARES, f"{module}.{name}"


def test_every_registered_analysis_is_in_the_catalogue_with_a_declaration():
    catalog = analysis_catalog()
    assert set(catalog) == set(ANALYSES) == set(CATALOG)
    assert len(catalog) == sum(len(v) for v in _decorators().values())
    for key, declared in catalog.items():
        assert declared.key == key and declared.doc, key
        assert [declared.schema, declared.json, declared.returns].count(None) == 2, key
        if declared.schema is not None:
            assert declared.schema and all(isinstance(n, str) for n in declared.schema), key
            assert all(isinstance(d, pl.DataType) or issubclass(d, pl.DataType) for d in declared.schema.values())
        else:
            assert (declared.json or declared.returns).strip(), key


def test_a_bare_or_doubly_declared_per_trace_is_refused():
    def analysis(trace):
        """Nothing."""

    with pytest.raises(TypeError, match="exactly one of schema=, json=, returns="):
        per_trace(analysis)
    with pytest.raises(TypeError, match="exactly one of"):
        per_trace(schema={"a": pl.Int64}, json="{}")
    with pytest.raises(TypeError, match="exactly one of"):
        per_trace()
    assert "analysis" not in " ".join(CATALOG)  # nothing was registered


def _spelled(dtype) -> str:
    return str(dtype() if isinstance(dtype, type) else dtype)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_each_table_an_analysis_returns_is_its_declared_schema(path, trace_of):
    catalog = analysis_catalog()
    trace = dataclasses.replace(trace_of(path), _analyses={}, _kept=None)
    ANALYSES[SUMMARY](trace)  # the summary first, as the CLI asks, then every other analysis
    for key, analysis in sorted(ANALYSES.items()):
        value, declared = analysis(trace), catalog[key]
        if declared.schema is not None:
            assert isinstance(value, pl.DataFrame), key
            got = [(name, str(dtype)) for name, dtype in value.schema.items()]
            assert got == [(name, _spelled(dtype)) for name, dtype in declared.schema.items()], key
        elif declared.json is not None:
            assert json.loads(json.dumps(value)) == value, key  # JSON gives it back as it is
        else:
            assert not isinstance(value, pl.DataFrame), key


def test_the_roofline_rows_bytes_are_float_as_the_reports_write_them():
    """The roofline rows' bytes: Float64 in the one schema (rates.ROOFLINE_ROW_SCHEMA) that the
    analysis, the review's points and the catalogue read; the rate columns elsewhere stay Int64."""
    from dashboard.engine.analyses import rates
    from dashboard.engine.compare import review_tables

    catalog = analysis_catalog()
    assert catalog["dashboard.engine.analyses.roofline.own_roofline"].schema["bytes"] == pl.Float64
    assert review_tables.ROOFLINE_SCHEMA["bytes"] == pl.Float64
    assert rates.RATE_SCHEMA["bytes"] == pl.Int64 and rates.EFFICIENCY_SCHEMA["bytes"] == pl.Int64


def _per_step_frame(**retyped) -> pl.DataFrame:
    columns = {"name": pl.String, "step": pl.Int64, "kernel": pl.UInt32, "gpu_memcpy": pl.UInt32}
    columns |= {"gpu_memset": pl.UInt32, "work": pl.UInt32, "busy_ns": pl.Int64, "dur_ns": pl.Int64}
    columns |= retyped
    return pl.DataFrame([["ProfilerStep#1"], [1], [2], [0], [0], [2], [10], [20]], schema=columns, orient="col")


def test_put_of_a_table_unlike_its_schema_raises_naming_the_analysis_and_the_column(tmp_path):
    analysis_catalog()
    box = kept.Kept(tmp_path, "b" * 64)
    box.put(PER_STEP, _per_step_frame())  # as declared: kept
    assert box.get(PER_STEP)["work"].to_list() == [2]
    with pytest.raises(kept.SchemaError, match=rf"{PER_STEP}.*'work' is Int64, declared UInt32"):
        box.put(PER_STEP, _per_step_frame(work=pl.Int64))
    with pytest.raises(kept.SchemaError, match=rf"{PER_STEP}.*'dur_ns' is missing"):
        box.put(PER_STEP, _per_step_frame().drop("dur_ns"))
    with pytest.raises(kept.SchemaError, match=rf"{PER_STEP}.*'extra' is not declared"):
        box.put(PER_STEP, _per_step_frame().with_columns(extra=pl.lit(1)))
    with pytest.raises(kept.SchemaError, match=rf"{PER_STEP}.*'name' is at place 1, declared 0"):
        box.put(PER_STEP, _per_step_frame().select("step", pl.exclude("step")))
    with pytest.raises(kept.SchemaError, match=rf"{PER_STEP} returned dict"):
        box.put(PER_STEP, {"work": 2})
    with pytest.raises(kept.SchemaError, match=rf"{SUMMARY} returned a table"):
        box.put(SUMMARY, _per_step_frame())
    assert box.get(PER_STEP)["work"].dtype == pl.UInt32  # what was kept stays


def test_a_kept_table_of_another_schema_is_computed_again_and_replaced(tmp_path, trace_of):
    """A store written by code that typed per_step's work as Int64: the reader treats the file as
    absent, the analysis runs again and its table replaces the old one."""
    analysis_catalog()
    path = REPO / "tests" / "data" / "hta_v100_test.json.gz"
    box = kept.Kept(tmp_path, "c" * 64)
    drifted = _per_step_frame(work=pl.Int64)
    box._write(PER_STEP, drifted)  # as an older version's writer left it, past put's check
    assert pl.read_ipc(box.folder / f"{PER_STEP}.arrow").schema["work"] == pl.Int64
    assert box.get(PER_STEP) is kept.MISSING
    trace = dataclasses.replace(trace_of(path), _analyses={}, _kept=box)
    fresh = ANALYSES[PER_STEP](trace)
    assert fresh.schema["work"] == pl.UInt32 and fresh.height > 1  # computed, not the one-row file
    kept.flush()  # (the analyses' answers are written by the writer thread)
    again = pl.read_ipc(box.folder / f"{PER_STEP}.arrow")
    assert again.schema["work"] == pl.UInt32 and again.height == fresh.height


def test_a_kept_file_of_the_other_kind_is_not_handed_back(tmp_path):
    analysis_catalog()
    box = kept.Kept(tmp_path, "d" * 64)
    box._write(PER_STEP, {"work": 2})  # JSON where a table is declared
    box._write(SUMMARY, _per_step_frame())  # a table where JSON is declared
    assert box.get(PER_STEP) is kept.MISSING and box.get(SUMMARY) is kept.MISSING
    box.put("not.an.analysis", {"x": 1})  # a key no analysis declares: kept as before
    assert box.get("not.an.analysis") == {"x": 1}


def test_a_trace_reopened_from_the_store_gives_the_same_schemas(tmp_path):
    """A reopened trace reads its tables back from Parquet (model.ReopenedTrace): every table an
    analysis computes from them has its declared schema too, so the store's writer never refuses one."""
    from dashboard.engine.store.store import Store

    catalog = analysis_catalog()
    store = Store(tmp_path)
    for path in sorted((REPO / "tests" / "data").glob("*.json.gz")):
        _, sha = store.open(path)
        store.wait()
        trace = store.get(sha)
        trace.__dict__.update(_kept=None, _analyses={})  # computed from the tables, not read from kept files
        for key, analysis in sorted(ANALYSES.items()):
            if catalog[key].schema is not None:
                got = [(name, str(dtype)) for name, dtype in analysis(trace).schema.items()]
                assert got == [(n, _spelled(d)) for n, d in catalog[key].schema.items()], (path.name, key)
