"""The Ranks tab, driven headless with AppTest: two folders of rank traces named at start are two
runs of four ranks each; the tab shows every rank's step times, the slowest rank of each step and
its lead over the median rank, and the two runs rank by rank and slowest rank against slowest
rank. A run of one trace gets one line saying how to open a run of several ranks.

The jobs are derived from one real trace (see tests/test_ranks.py, which writes them); every
expected number is the json-module oracle's reading of the files written, never the app's."""

from __future__ import annotations

import statistics

import pytest

from test_dashboard_apptest import H100, app, figure, table, texts  # noqa: F401 - app is a fixture
from test_ranks import BASELINE, CANDIDATE, expected, write_job


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """{name: (folder, oracle: rank -> step -> busy µs)} for the baseline and candidate jobs."""
    root = tmp_path_factory.mktemp("rank-jobs")
    out = {}
    for name, plan in (("baseline", BASELINE), ("candidate", CANDIDATE)):
        folder = write_job(root / name, plan)
        out[name] = (folder, expected(folder))
    return out


def med(values) -> float:
    return float(statistics.median(values))


def rows(at, key: str) -> list[dict]:
    return table(at, key).to_dict("records")


def test_the_ranks_tab_shows_each_ranks_step_times_and_the_straggler_of_each_step(app, jobs):
    (base_dir, base), (cand_dir, cand) = jobs["baseline"], jobs["candidate"]
    at = app(tab="Ranks", traces=[base_dir, cand_dir])
    headings = texts(at.subheader)
    assert headings[0].startswith("baseline") and headings[1].startswith("candidate")  # the folders, in the order named
    about = texts(at.get_by_key("ranks_about_0").markdown)
    assert about == [
        "4 ranks (0–3), 5 steps. Slowest rank: **rank 2**, the straggler in 2 of 5 steps where a rank worked; "
        "the other tabs show this run as rank 2."
    ]
    for i, want in enumerate((base, cand)):
        steps = sorted(want[0])
        slow = rows(at, f"tbl_ranks_stragglers_{i}")
        assert [r["step"] for r in slow] == steps
        for row in slow:
            per_rank = {rank: float(want[rank][row["step"]]) for rank in want}
            top = max(per_rank.values())
            mid = med(per_rank.values())
            assert row["slowest_rank"] == min(r for r, us in per_rank.items() if us == top)
            assert row["slowest_us"] == pytest.approx(top, rel=1e-12)
            assert row["median_us"] == pytest.approx(mid, rel=1e-12)
            assert row["behind_us"] == pytest.approx(top - mid, rel=1e-9, abs=1e-6)
            assert row["spread"] == pytest.approx(top / mid, rel=1e-12)
        matrix = table(at, f"tbl_ranks_steps_{i}")
        assert list(matrix.columns) == ["step", "0", "1", "2", "3"]
        for rank in want:
            assert matrix[str(rank)].tolist() == pytest.approx([float(want[rank][s]) for s in steps], rel=1e-12)
        medians = rows(at, f"tbl_ranks_medians_{i}")
        assert [(r["rank"], r["steps"]) for r in medians] == [(rank, 5) for rank in sorted(want)]
        assert [r["median_us"] for r in medians] == pytest.approx(
            [med(want[rank].values()) for rank in sorted(want)], rel=1e-12
        )
        wins = [
            sum(1 for s in steps if want[rank][s] == max(want[r][s] for r in want) > med(want[r][s] for r in want))
            for rank in sorted(want)
        ]
        assert [r["straggler_steps"] for r in medians] == wins  # no two ranks tie for the slowest here
        fig = figure(at, f"chart_ranks_{i}")
        assert [t["name"] for t in fig["data"]] == ["rank 0", "rank 1", "rank 2", "rank 3", "slowest rank"]
        behind = [
            (str(s), max(float(want[r][s]) for r in want))
            for s in steps
            if max(want[r][s] for r in want) > med(want[r][s] for r in want)
        ]
        assert fig["data"][-1]["x"] == [step for step, _ in behind]  # each step's straggler circled...
        assert fig["data"][-1]["y"] == pytest.approx([us for _, us in behind], rel=1e-12)  # ...where it is behind
    # by design of the baseline plan: a different straggler in steps 0-3, everyone at pace in step 4
    assert [r["slowest_rank"] for r in rows(at, "tbl_ranks_stragglers_0")] == [2, 1, 3, 2, 0]
    assert rows(at, "tbl_ranks_stragglers_0")[4]["spread"] == 1.0


def test_two_runs_of_several_ranks_compare_rank_by_rank_and_slowest_against_slowest(app, jobs):
    (base_dir, base), (cand_dir, cand) = jobs["baseline"], jobs["candidate"]
    at = app(tab="Ranks", traces=[base_dir, cand_dir])
    by_rank = rows(at, "tbl_ranks_by_rank")
    assert [r["rank"] for r in by_rank] == [0, 1, 2, 3]
    assert len({r["run"] for r in by_rank}) == 1 and by_rank[0]["run"] != by_rank[0]["baseline"]
    for row in by_rank:
        b, c = med(base[row["rank"]].values()), med(cand[row["rank"]].values())
        assert (row["baseline_us"], row["candidate_us"], row["speedup"]) == pytest.approx((b, c, b / c), rel=1e-12)
    slowest = rows(at, "tbl_ranks_slowest")
    assert [r["measure"] for r in slowest] == ["slowest rank", "slowest of each step"]
    assert (slowest[0]["baseline_rank"], slowest[0]["candidate_rank"]) == (2, 2)  # slowest in most steps, in each run
    b, c = med(base[2].values()), med(cand[2].values())
    assert (slowest[0]["baseline_us"], slowest[0]["candidate_us"], slowest[0]["speedup"]) == pytest.approx(
        (b, c, b / c), rel=1e-12
    )
    steps = sorted(base[0])
    b_each = med(max(float(base[r][s]) for r in base) for s in steps)
    c_each = med(max(float(cand[r][s]) for r in cand) for s in steps)
    assert (slowest[1]["baseline_us"], slowest[1]["candidate_us"]) == pytest.approx((b_each, c_each), rel=1e-12)
    assert slowest[1]["speedup"] == pytest.approx(b_each / c_each, rel=1e-12)


def test_a_run_of_one_rank_gets_one_line_saying_how_to_open_a_run_of_several(app):
    at = app(tab="Ranks", params={"run": ["file/" + H100.name]}, traces=[H100])
    [line] = [t for t in texts(at.info) if "Ranks tab" in t]
    assert line.startswith("The Ranks tab needs a run traced on several ranks, and the selected run has only one rank.")
    assert "streamlit run dashboard/app.py -- FOLDER" in line and "attnscope ingest FOLDER" in line
    assert not [k for k in ("tbl_ranks_stragglers_0", "tbl_ranks_by_rank") if _has_key(at, k)]


def _has_key(at, key: str) -> bool:
    try:
        at.get_by_key(key)
    except KeyError:
        return False
    return True


def test_a_run_of_one_rank_next_to_a_run_of_several_is_named_and_one_run_of_several_is_not_compared(app, jobs):
    base_dir, base = jobs["baseline"]
    at = app(tab="Ranks", traces=[base_dir, H100])
    [line] = texts(at.get_by_key("ranks_single").caption)
    assert line == f"Traced on one rank, so not shown here: **{H100.name.removesuffix('.json.gz')}**."
    assert len(table(at, "tbl_ranks_stragglers_0")) == len(base[0])
    assert not _has_key(at, "tbl_ranks_stragglers_1") and not _has_key(at, "tbl_ranks_by_rank")
