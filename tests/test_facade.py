"""One multi-run facade (issue #38 item 5): the dashboard's tabs, the CLI and the reports read their
tables from dashboard.engine.comparison.Comparison. The views, reports and CLI run no group_by, agg
or DataFrame join of their own; the views import the engine through the facade only; each table
equals what the direct engine calls gave before; a table is computed once, and only when asked."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import polars as pl
import pytest

import oracle
from dashboard.engine import Comparison
from dashboard.engine.analyses import memory as memory_analysis
from dashboard.engine.analyses.backends import attention_launches
from dashboard.engine.analyses.copies import copies
from dashboard.engine.analyses.host import host_table
from dashboard.engine.analyses.phases import phase_table
from dashboard.engine.compare import alignment, diff, fingerprint, review, shown
from dashboard.engine.compare.speed import DEFAULT_USD_PER_GPU_HOUR, device_groups, speed_table

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "sample_traces" / "h200"
CHECKED = [ROOT / "dashboard" / folder for folder in ("views", "report", "cli")]
JOIN_KEYWORDS = {"on", "how", "left_on", "right_on"}
FACADE_MODULES = ("dashboard.engine", "dashboard.engine.comparison")
# Views that still import the engine past the facade, each with its reason.
IMPORT_EXCEPTIONS = {
    "ranks.py": "the Ranks tab is one run's ranks, not a comparison of runs (engine/compare/ranks.py); "
    "another engineer works on it (issue #38)",
    "sweep.py": "the Sweep tab reads the article's measurements, not traces (engine/analyses/article.py); "
    "another engineer works on it (issue #38)",
}


def _python_files() -> list[Path]:
    return sorted(p for folder in CHECKED for p in folder.glob("*.py"))


def _frame_calls(path: Path, root: Path = ROOT) -> list[str]:
    """Each `.group_by(`, `.agg(` and DataFrame `.join(` (a call with on=, how=, left_on= or
    right_on=: str.join and os.path.join take none) in the file, as 'file:line: call'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        keywords = {k.arg for k in node.keywords}
        if name in ("group_by", "agg") or (name == "join" and keywords & JOIN_KEYWORDS):
            found.append((node.lineno, name))
    return [f"{path.relative_to(root)}:{line}: .{name}(" for line, name in sorted(found)]


def test_views_reports_and_cli_run_no_group_by_agg_or_join():
    found = [call for path in _python_files() for call in _frame_calls(path)]
    assert found == [], "tables computed outside the engine (move them to the Comparison):\n" + "\n".join(found)


def test_the_frame_call_check_sees_each_kind(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "a.group_by('run').agg(x)\n"
        "b.join(c, on='run', how='left')\n"
        "' > '.join(names)\n"  # a string's join: not a table's
        "d.join(e, left_on='a', right_on='b')\n"
    )
    calls = _frame_calls(sample, tmp_path)
    assert calls == ["sample.py:1: .agg(", "sample.py:1: .group_by(", "sample.py:2: .join(", "sample.py:4: .join("]


def _engine_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of dashboard.engine... in the file, inside functions too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dashboard.engine"):
            modules = [node.module]
            if node.module == "dashboard.engine":  # `from dashboard.engine import comparison` names a module
                modules = [f"dashboard.engine.{a.name}" if a.name[:1].islower() else node.module for a in node.names]
            found += [(node.lineno, m) for m in modules]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("dashboard.engine")]
    return found


def test_views_import_the_engine_through_the_facade_only():
    views = sorted((ROOT / "dashboard" / "views").glob("*.py"))
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for path in views
        if path.name not in IMPORT_EXCEPTIONS
        for line, module in _engine_imports(path)
        if module not in FACADE_MODULES
    ]
    assert wrong == [], "views import the engine past dashboard.engine.comparison:\n" + "\n".join(wrong)
    for name in IMPORT_EXCEPTIONS:  # an exception that no longer applies is taken off the list
        imports = _engine_imports(ROOT / "dashboard" / "views" / name)
        assert any(m not in FACADE_MODULES for _, m in imports), f"{name} needs no exception any more"


def _selection(trace_of, paths: dict[str, Path]) -> dict:
    return {label: trace_of(path) for label, path in paths.items()}


SELECTIONS = {
    "h200": {
        "naive": H200 / "naive.json.gz",
        "sdpa": H200 / "sdpa.json.gz",
        "naive (CUDA graphs)": H200 / "naive.graphs.json.gz",
        "naive (compiled)": H200 / "naive.compiled.json.gz",
    },
    "unrelated": {
        "bert": oracle.DATA / "tracelens_h100_bert_sdpa_flash.json.gz",
        "minitoy": oracle.DATA / "hta_mi250_rocm_minitoy.json.gz",
    },
}


@pytest.fixture(scope="module", params=sorted(SELECTIONS))
def pair(request, trace_of):
    runs = _selection(trace_of, SELECTIONS[request.param])
    return runs, next(iter(runs))


def _same(got, want) -> None:
    if isinstance(want, pl.DataFrame):
        assert got.equals(want, null_equal=True), f"{got}\n!=\n{want}"
    else:
        assert got == want


def test_each_review_table_equals_the_direct_calls(pair):
    runs, baseline = pair
    cmp = Comparison(runs, baseline)
    groups = review.copy_groups(runs)
    overview = review.overview(runs, baseline)
    _same(cmp.overview, overview)
    _same(cmp.copies, groups)
    _same(cmp.findings, review.findings(runs, baseline, overview_table=overview, groups=groups))
    _same(cmp.families, review.families(runs))
    _same(cmp.backends, review.backend_table(runs))
    _same(cmp.speed, speed_table(runs, baseline, DEFAULT_USD_PER_GPU_HOUR, None))
    _same(cmp.groups, device_groups(runs, baseline))
    _same(cmp.efficiency, review.attention_efficiency(runs))
    _same(cmp.roofline, review.roofline_points(runs))
    _same(cmp.roofline_left_out, review.roofline_left_out(runs))
    want = review.changes(runs, baseline, steps={}, by="base")
    assert [(c.run, c.baseline, c.readings) for c in cmp.changes] == [(c.run, c.baseline, c.readings) for c in want]
    for got, old in zip(cmp.changes, want):
        _same(got.kernels, old.kernels)
        _same(got.ops, old.ops)
    assert {label: cmp.against(label) for label in runs} == {
        label: g.baseline for g in device_groups(runs, baseline) for label in g.runs
    }
    a, b = list(runs)[:2]
    assert cmp.relation(a, b) == fingerprint.relation(runs[a], runs[b])


def test_each_views_table_equals_what_the_view_computed(pair):
    runs, baseline = pair
    cmp = Comparison(runs, baseline)
    fam, groups = review.families(runs), review.copy_groups(runs)
    # the Overview's table, as views/overview.py made it before
    memsets = (
        fam.filter(pl.col("family") == "memset")
        .group_by("run")
        .agg(pl.col("count_per_step").sum().alias("memsets_per_step"))
    )
    old = shown.backend_check_words(
        review.overview(runs, baseline).join(memsets, on="run", how="left", maintain_order="left"),
        "backend_verdict",
        "backends",
    ).with_columns(
        pl.when(pl.col("work_unit") == "kernel")
        .then(pl.col("memsets_per_step").fill_null(0.0))
        .otherwise(pl.col("memsets_per_step"))
        .alias("memsets_per_step"),
        pl.struct("device", "device_name", "cut")
        .map_elements(lambda r: review.device_label(r["device"], r["device_name"], r["cut"]), return_dtype=pl.String)
        .alias("device_label"),
    )
    _same(cmp.overview_shown, old)
    kernel_runs = cmp.overview_shown.filter(pl.col("work_unit") == "kernel")
    assert kernel_runs["memsets_per_step"].null_count() == 0
    _same(cmp.graph_input_copies, shown.graph_input_copies(groups))
    small = groups.filter(pl.col("hidden") & ~pl.col("alarm"))
    _same(
        cmp.small_copies,
        small.group_by("run", maintain_order=True).agg(pl.col("per_step").sum(), pl.col("bytes_per_step").sum()),
    )
    attention = review.attention_efficiency(runs).unique("run", keep="first", maintain_order=True)
    speed = speed_table(runs, baseline, 3.0, None)
    joined = cmp.speed_with_attention(3.0, None)
    assert joined.select(speed.columns).equals(speed, null_equal=True)
    want_tflops = dict(zip(attention["run"].to_list(), attention["tflops"].to_list()))
    assert dict(zip(joined["run"].to_list(), joined["attn_tflops"].to_list())) == {
        label: want_tflops.get(label) for label in runs
    }
    every = pl.concat(
        [copies(t).select(pl.lit(k).alias("run"), pl.all()) for k, t in runs.items()], how="vertical_relaxed"
    )
    _same(cmp.every_copy.drop("dur_us", "chain"), every)
    _same(cmp.kernels, review.kernels_by_run(runs))
    _same(cmp.host, host_table(runs))
    _same(cmp.phases, phase_table(runs))
    _same(cmp.attention_launches, attention_launches(runs))
    recorded = [k for k, t in runs.items() if memory_analysis.memory_peak(t).height]
    assert cmp.memory_recorded == recorded
    _same(cmp.memory, memory_analysis.memory_by_run({k: runs[k] for k in recorded}))
    a, b = list(runs)[:2]
    assert cmp.step_pairs(a, b) == alignment.step_pairs(runs[a], runs[b])
    step_a, step_b = runs[a].steps["step"][0], runs[b].steps["step"][0]
    _same(cmp.sequence_diff(a, step_a, b, step_b), diff.sequence_diff(runs[a], step_a, runs[b], step_b))
    _same(cmp.family_time_diff(a, step_a, b, step_b), diff.family_time_diff(runs[a], step_a, runs[b], step_b))


def test_memsets_per_step_against_the_json_module(trace_of):
    """The Overview's memsets column, against Memset events counted per ProfilerStep by the json module."""
    paths = SELECTIONS["h200"]
    runs = _selection(trace_of, paths)
    got = dict(Comparison(runs, "naive").overview_shown.select("run", "memsets_per_step").iter_rows())
    for label, path in paths.items():
        per_step = oracle.gpu_per_step(oracle.raw(path))
        want = sum(c["gpu_memset"] for c in per_step.values()) / len(per_step)
        assert got[label] == pytest.approx(want), label


def test_the_reports_review_is_the_comparison(pair):
    from dashboard.report import Review, build_review

    runs, baseline = pair
    rv = build_review(runs, baseline)
    assert isinstance(rv, Comparison) and Review is Comparison
    with pytest.raises(KeyError):
        build_review(runs, "not a run")


TABLES = [name for name, value in vars(Comparison).items() if isinstance(value, functools.cached_property)]
COMPUTERS = [
    (review, "overview"),
    (review, "copy_groups"),
    (review, "families"),
    (review, "backend_table"),
    (review, "changes"),
    (review, "attention_efficiency"),
    (review, "roofline_points"),
    (review, "kernels_by_run"),
]


def test_constructing_computes_nothing_and_a_table_is_computed_once(pair, monkeypatch):
    runs, baseline = pair
    calls: list[str] = []
    for module, name in COMPUTERS:
        real = getattr(module, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    cmp = Comparison(runs, baseline)
    assert calls == []
    assert not set(TABLES) & set(vars(cmp)), "a table was computed on construction"
    first = cmp.overview
    assert calls == ["overview"]
    assert cmp.overview is first and calls == ["overview"]
    found = cmp.findings  # reads the overview and the copies it already holds, or computes them once
    assert cmp.findings is found and calls.count("overview") == 1 and calls.count("copy_groups") == 1
    for name in TABLES:
        assert getattr(cmp, name) is getattr(cmp, name), name
    assert sorted(calls) == sorted(set(calls)), f"a table computed twice: {calls}"
    a, b = list(runs)[:2]
    assert cmp.relation(a, b) is cmp.relation(a, b)
    assert cmp.changes_at({}, "base") is cmp.changes
    assert cmp.changes_at(dict.fromkeys(runs), "base") is cmp.changes  # None: every step, the default
    assert cmp.changes_at({}, "name") is cmp.changes_at({}, "name")
    assert cmp.speed_at(3.0, None) is cmp.speed_at(3.0, None)
    assert cmp.speed_at(DEFAULT_USD_PER_GPU_HOUR, None) is cmp.speed


def test_the_dashboard_keeps_one_comparison_per_selection(pair):
    from dashboard.runs import Selection, comparison_for

    runs, baseline = pair
    state: dict = {}
    sel = Selection(runs=runs, baseline=baseline, ids={k: f"id/{k}" for k in runs})
    first = comparison_for(sel, 2.0, None, state=state)
    again = Selection(runs=dict(runs), baseline=baseline, ids=dict(sel.ids))  # the next rerun's selection
    assert comparison_for(again, 2.0, None, state=state) is first
    assert comparison_for(again, 2.5, None, state=state) is not first  # other prices: another comparison
    other = Selection(runs=runs, baseline=list(runs)[1], ids=dict(sel.ids))
    made = comparison_for(other, 2.5, None, state=state)
    assert made.baseline == list(runs)[1] and made.usd_per_gpu_hour == 2.5
