"""Views draw what the engine hands them (issue #33, item 3): the Kernels tab's table of every run's
kernels, the 'explained' sentence the reports and the tab share (its thresholds read from the
engine's constants, not typed in), and the straggler threshold of engine/ranks.py, whose `straggler`
column the Ranks tab shades and `attnscope summary` prints."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import polars as pl
import pytest

import oracle
from dashboard import cli, report
from dashboard.engine.compare import diff
from dashboard.engine.compare import review, review_changes
from dashboard.engine.analyses.kernels import kernel_table
from dashboard.engine.compare.ranks import STRAGGLER_SPREAD, rank_step_times, stragglers

ROOT = Path(__file__).resolve().parent.parent
CPU = ROOT / "sample_traces" / "cpu"
SOURCE = oracle.DATA / "hta_mi250_rocm_minitoy.json.gz"


@pytest.fixture(scope="module")
def runs(trace_of):
    return {path.name: trace_of(path) for path in sorted(CPU.glob("*.json.gz"))[:3]}


def test_every_runs_kernels_in_one_table_with_display_units(runs):
    table = review.kernels_by_run(runs)
    assert table.columns == list(review.KERNELS_BY_RUN_SCHEMA)
    assert table["run"].unique(maintain_order=True).to_list() == list(runs)
    for label, trace in runs.items():
        mine = table.filter(pl.col("run") == label)
        assert mine.drop("run", "total_us", "mean_us").equals(kernel_table(trace))
        assert mine["total_us"].to_list() == pytest.approx((mine["total_ns"] / 1000).to_list())
        assert mine["mean_us"].to_list() == pytest.approx((mine["mean_ns"] / 1000).to_list())
    empty = review.kernels_by_run({})
    assert empty.height == 0 and dict(empty.schema) == review.KERNELS_BY_RUN_SCHEMA


def test_every_runs_diff_in_one_table_and_the_kernels_view_only_draws_it(runs):
    """review.diffs_by_run stacks each Change's kernel (or op) diff with its run and baseline and
    the µs columns the tab shows; the tab itself joins and converts nothing."""
    base = next(iter(runs))
    changes = review.changes(runs, base)
    for table in ("kernels", "ops"):
        stacked = review.diffs_by_run(changes, table)
        assert stacked["run"].unique(maintain_order=True).to_list() == [c.run for c in changes]
        for change in changes:
            mine = stacked.filter(pl.col("run") == change.run)
            own = getattr(change, table)
            assert mine["baseline"].unique().to_list() == [base]
            assert mine.select(own.columns).equals(own)
            for side in ("base", "other", "delta"):  # ns -> µs, row by row
                want = [v / 1000 for v in own[f"{side}_ns_per_step"].to_list()]
                assert mine[f"{side}_us_per_step"].to_list() == pytest.approx(want)
            for side in ("base", "other"):
                want = [None if v is None else v / 1000 for v in own[f"{side}_mean_ns"].to_list()]
                assert mine[f"{side}_mean_us"].to_list() == pytest.approx(want, nan_ok=True)
    explained = review.explained_by_run(changes)
    assert dict(explained.schema) == review.EXPLAINED_BY_RUN_SCHEMA
    assert explained.rows() == [
        (c.run, c.baseline, diff.changed_rows(c.kernels, c.top), c.explained[0] / 1000, c.explained[1] / 1000)
        for c in changes
    ]
    view = (ROOT / "dashboard/views/kernels.py").read_text()
    assert "pl.concat" not in view and "_ns" not in view and "changed_rows" not in view
    with pytest.raises(ValueError):
        review.diffs_by_run(changes, "steps")


def test_the_explained_sentence_takes_its_thresholds_from_the_engine(runs, monkeypatch):
    change = review.changes(runs, next(iter(runs)))[0]
    assert review.MEAN_CHANGE == f"{diff.SLOWER - 1:.0%}" == f"{1 - diff.FASTER:.0%}" == "5%"
    none = dataclasses.replace(change, kernels=change.kernels.head(0))
    assert f"by more than 5% and {diff.NOISE_NS / 1000:g} µs a step" in review.explained_sentence(none)
    monkeypatch.setattr(review_changes, "MEAN_CHANGE", "7%")  # explained_sentence reads its own module's
    assert "by more than 7% and" in review.explained_sentence(none)
    assert "those within 7% ('same')" in review.explained_sentence(change, "tab")
    report_modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "dashboard/report").glob("*.py"))
    assert report_modules
    for path in (*report_modules, "dashboard/views/kernels.py"):  # no threshold typed into the text
        assert "5%" not in (ROOT / path).read_text(), path
    with pytest.raises(ValueError):
        review.explained_sentence(change, "html")


def test_the_report_and_the_tab_say_the_sentence_review_builds(runs):
    from dashboard.views import kernels as kernels_view

    changes = review.changes(runs, next(iter(runs)))
    text = report.markdown_report(runs, next(iter(runs)))
    for change in changes:
        sentence = review.explained_sentence(change)
        assert sentence.startswith(("The ", "No kernel")) and report.md_text(sentence) in text
        assert kernels_view.explained_line(change, False) == review.explained_sentence(
            change, "tab", lead="Over all steps: "
        )
        assert kernels_view.explained_line(change, True).endswith(review.explained_sentence(change, "tab", lead=": "))
    big = dataclasses.replace(changes[0], explained=(12_345_678.0, 23_456_789.0))
    assert "**+12.35 ms** of the **+23.46 ms** change" in review.explained_sentence(big, "tab", lead="x: ")
    assert "+12,345.7 µs of the +23,456.8 µs change" in review.explained_sentence(big)


def test_a_straggler_is_a_step_whose_slowest_rank_passes_the_threshold():
    times = pl.DataFrame(
        {
            "step": [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4],
            "rank": [0, 1, 2] * 4,
            "step_us": [100.0, 100.0, 101.0, 100.0, 100.0, 110.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0],
        }
    )
    table = stragglers(times)
    # 1.01 keeps pace; 1.10 is a straggler; no work (0 / 0 = NaN) is none; work beside none (x / 0) is one
    assert table["straggler"].to_list() == [False, True, False, True]
    assert STRAGGLER_SPREAD == 1.02
    assert stragglers(times, threshold=1.005)["straggler"].to_list() == [True, True, False, True]
    assert stragglers(times, threshold=1.2)["straggler"].to_list() == [False, False, False, True]
    assert stragglers(times.head(0))["straggler"].to_list() == []


@pytest.fixture()
def job(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, factor in {0: 1, 1: 1, 2: 3}.items():
        doc = oracle.raw(SOURCE)
        doc["distributedInfo"] = {"rank": rank, "world_size": 3}
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel":
                e["dur"] = e["dur"] * factor
        (folder / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return folder


def test_the_cli_prints_the_engines_straggler_column(job, capsys):
    from dashboard.engine import load_trace

    assert cli.main(["summary", "--no-store", str(job)]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if "the slowest rank of each step:" in line)
    assert f"spread {STRAGGLER_SPREAD:g} or more" in lines[head]
    assert lines[head + 1].split() == ["step", "slowest", "rank", "its", "ms", "median", "ms", "spread", "straggler"]
    rows = []
    for line in lines[head + 2 :]:
        if not line.startswith("  "):
            break
        rows.append(line.split())
    traces = {rank: load_trace(job / f"rank{rank}.json.gz") for rank in range(3)}
    want = stragglers(rank_step_times(traces))
    assert [r[0] for r in rows] == [str(s) for s in want["step"].to_list()]
    assert [r[-1] for r in rows] == ["yes" if s else "no" for s in want["straggler"].to_list()]
    assert "yes" in [r[-1] for r in rows] and "no" in [r[-1] for r in rows]  # rank 2's steps, and the idle ones
