"""The bundled multi-rank collection (sample_traces/ranks-cpu, `python -m collectors ranks`): what
the engine's ranks analysis says of each step against the files read with the json module, the
catalog opening the four files as one run of four ranks without changing the first selection, the
collector run live on two tiny ranks, and the Ranks tab showing the bundled run on first start.

The oracle is written here from scratch: a rank's step time on a CPU-only trace is its
ProfilerStep#N span (the event's `dur`, µs), the slowest rank of a step the one with the longest
span (ties: the lowest rank), the median the median of the ranks' spans."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import statistics
import time
from pathlib import Path

import pytest

from collectors import ranks as collector
from dashboard import catalog
from dashboard.engine import load_trace
from dashboard.engine.compare.ranks import rank_step_times, slowest_of, stragglers
from test_dashboard_apptest import app, table, texts  # noqa: F401 - app is a fixture

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "sample_traces" / "ranks-cpu"
WORLD = 4


def read(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def spans(data: dict) -> dict[int, float]:
    """Step number -> the ProfilerStep#N span in µs, from the complete events of that name."""
    out: dict[int, float] = {}
    for e in data["traceEvents"]:
        name = e.get("name", "")
        if e.get("ph") == "X" and name.startswith("ProfilerStep#"):
            step = int(name.removeprefix("ProfilerStep#"))
            assert step not in out, f"ProfilerStep#{step} twice"
            out[step] = float(e["dur"])
    return out


@pytest.fixture(scope="module")
def bundled() -> dict[int, dict]:
    """Rank -> the parsed JSON of sample_traces/ranks-cpu/rank-<rank>.json.gz."""
    return {r: read(BUNDLED / f"rank-{r}.json.gz") for r in range(WORLD)}


def oracle_steps(files: dict[int, dict]) -> dict[int, tuple[int, float, float]]:
    """Step -> (slowest rank, its span, the median rank's span), every rank's file read as JSON."""
    per_rank = {r: spans(data) for r, data in files.items()}
    steps = sorted(set().union(*per_rank.values()))
    out = {}
    for step in steps:
        times = {r: per_rank[r][step] for r in sorted(per_rank) if step in per_rank[r]}
        top = max(times.values())
        out[step] = (min(r for r, us in times.items() if us == top), top, statistics.median(times.values()))
    return out


def test_every_rank_file_names_its_rank_and_the_same_world_size(bundled) -> None:
    for rank, data in bundled.items():
        info = data["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, WORLD, "gloo")
        meta = data["attnscope"]
        assert (meta["rank"], meta["world_size"], meta["variant"], meta["device"]) == (rank, WORLD, "sdpa", "cpu")
        assert meta["dtype"] == "float32" and meta["torch_version"]
    manifest = json.loads((BUNDLED / "runs.json").read_text())
    assert [(e["rank"], e["world_size"], e["trace"]) for e in manifest["runs"]] == [
        (r, WORLD, f"rank-{r}.json.gz") for r in range(WORLD)
    ]


def test_the_bundled_folder_stays_small() -> None:
    assert sum(p.stat().st_size for p in BUNDLED.iterdir()) < 400_000


def test_the_engine_names_each_steps_slowest_rank_as_the_json_module_reads_it(bundled) -> None:
    want = oracle_steps(bundled)
    assert sorted(want) == [2, 3, 4, 5]  # the schedule: wait 1, warm-up 1, 4 active steps
    traces = {r: load_trace(BUNDLED / f"rank-{r}.json.gz") for r in range(WORLD)}
    times = rank_step_times(traces)
    got = stragglers(times)
    assert got["step"].to_list() == sorted(want)
    for row in got.iter_rows(named=True):
        rank, top, mid = want[row["step"]]
        assert row["ranks"] == WORLD
        assert row["slowest_rank"] == rank
        assert row["slowest_us"] == pytest.approx(top, rel=1e-9)
        assert row["median_us"] == pytest.approx(mid, rel=1e-9)
    # every rank is the straggler of one step: the one slowest in most steps is a tie, broken by the larger median
    medians = {r: statistics.median(spans(d).values()) for r, d in bundled.items()}
    assert slowest_of(times) == max(medians, key=lambda r: (medians[r], -r))


def test_each_steps_straggler_is_the_rank_given_the_longest_sequence(bundled) -> None:
    """What sample_traces/ranks-cpu/README.md says of the bundled run: the rank the plan gave the
    longest sequence in a step is that step's slowest rank (the plan is in every trace's metadata)."""
    plan = bundled[0]["attnscope"]["seq_per_rank"]
    for step, (slowest, _, _) in oracle_steps(bundled).items():
        lengths = {int(r): seqs[step] for r, seqs in plan.items()}
        assert slowest == max(lengths, key=lengths.get), step
        assert sorted(lengths.values()) == [320, 640, 960, 1280]  # base 320 x (1 + place)


def test_the_catalog_opens_the_four_files_as_one_run_of_four_ranks_and_does_not_select_it_first() -> None:
    collections, _, failures = catalog.discover()
    assert not failures
    found = next(c for c in collections if c.name == "ranks-cpu")
    cache = catalog.TraceCache(store=None)
    loaded, bad = catalog.open_all([catalog.pending_file(s, cache) for s in found.sources], cache=cache)
    assert not bad
    [run] = loaded
    assert (run.source.id, run.label, sorted(run.ranks)) == ("ranks-cpu/ranks", "ranks-cpu (4 ranks)", [0, 1, 2, 3])
    [bundled_set] = catalog.run_sets(loaded)
    assert (bundled_set.name, bundled_set.bundled, bundled_set.gpu) == ("ranks-cpu", True, False)
    gpu = catalog.RunSet("h200", ["h200/naive"], bundled=True, gpu=True, collected=True)
    assert catalog.first_look([bundled_set, gpu]) == ["h200/naive"]  # the GPU collection opens first, as before


def test_the_collector_writes_one_trace_per_rank_with_its_rank_and_the_plan(tmp_path: Path) -> None:
    out = tmp_path / "job"
    argv = ["--ranks", "2", "--steps", "2", "--seq", "16", "--heads", "2", "--head-dim", "8", "--lengths", "by-rank"]
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()) as said:
        status = collector.main([*argv, "--out", str(out)])
    took = time.monotonic() - started
    assert status == 0, said.getvalue()
    assert took < 60, f"{took:.1f} s"
    assert sorted(p.name for p in out.iterdir()) == ["rank-0.json.gz", "rank-1.json.gz", "runs.json"]
    for rank in (0, 1):
        data = read(out / f"rank-{rank}.json.gz")
        assert (data["distributedInfo"]["rank"], data["distributedInfo"]["world_size"]) == (rank, 2)
        assert sorted(spans(data)) == [2, 3]
        meta = data["attnscope"]
        assert (meta["rank"], meta["world_size"], meta["variant"], meta["lengths"]) == (rank, 2, "sdpa", "by-rank")
        # by-rank: rank r takes 16 x (1 + r) tokens in every step (2 unprofiled, 2 profiled, 2 tail)
        assert meta["seq_per_rank"] == {"0": [16] * 6, "1": [32] * 6}
        assert [s["seq"] for s in meta["shape_per_step"]] == [16 * (1 + rank)] * 6
        names = {e.get("name") for e in data["traceEvents"]}
        assert "attention::sdpa" in names and "aten::scaled_dot_product_attention" in names
        assert any(str(n).startswith(("c10d::allreduce_", "gloo:all_reduce")) for n in names)
    manifest = json.loads((out / "runs.json").read_text())
    assert manifest["collection"] == "job" and [e["rank"] for e in manifest["runs"]] == [0, 1]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--ranks", "1"], "--ranks"),
        (["--device", "cuda"], "--device cuda"),
        (["--variant", "nope"], "unknown variant nope"),
        (["--variant", "sdpa,naive"], "one variant"),
        (["--lengths", "random"], "--lengths"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(tmp_path: Path, capsys, argv: list[str], words: str) -> None:
    assert collector.main([*argv, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err


def test_the_ranks_tab_shows_the_bundled_run_on_first_start(app, bundled) -> None:  # noqa: F811
    at = app(tab="Ranks")
    assert "ranks-cpu/ranks" not in at.session_state["sel_runs"]  # the first selection is as before
    assert any("ranks-cpu (4 ranks)" in t for t in texts(at.get_by_key("ranks_other").caption))
    rows = table(at, "tbl_ranks_stragglers_other").to_dict("records")
    want = oracle_steps(bundled)
    assert [r["step"] for r in rows] == sorted(want)
    for row in rows:
        rank, top, mid = want[row["step"]]
        assert (row["slowest_rank"], row["slowest_us"], row["median_us"]) == (
            rank,
            pytest.approx(top, rel=1e-9),
            pytest.approx(mid, rel=1e-9),
        )
    matrix = table(at, "tbl_ranks_steps_other")
    assert list(matrix.columns) == ["step", "0", "1", "2", "3"]


@pytest.mark.parametrize("tab", ["Overview", "Kernels", "Copies", "Timeline diff", "Speedups", "Backends", "Ranks"])
def test_every_tab_draws_the_bundled_run_once_it_is_selected(app, bundled, tab: str) -> None:  # noqa: F811
    at = app(tab=tab, params={"run": ["ranks-cpu/ranks"]})  # the fixture fails on a tab that could not be drawn
    assert at.session_state["sel_runs"] == ["ranks-cpu/ranks"]
    if tab == "Ranks":  # selected, it is shown as a selected run is (no info box)
        assert not texts(at.info) and len(table(at, "tbl_ranks_stragglers_0")) == len(oracle_steps(bundled))
