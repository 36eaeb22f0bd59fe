"""Runs of several ranks: the engine's rank analyses, the trace store's reopen and the dashboard,
on jobs of 4 and 32 ranks.

    python benchmarks/bench_ranks.py [--write] [--ranks 4 32] [--source TRACE]

No public set of rank traces of one job is at hand, so the jobs are derived as tests/test_ranks.py
derives its own (write_job): from HTA's rank-0 V100 trace (TRACE, by default
tests/data/hta_v100_ns_resolution.pt.trace.json.gz: 68.7k events, 5 ProfilerSteps), one .json.gz
per rank, each the trace with distributedInfo rank and world_size set, its clock moved by a
per-rank offset and chosen steps running slower on chosen ranks. Two jobs of each size, written
to a temporary folder: "baseline" and "candidate", with test_ranks.BASELINE's and CANDIDATE's
stragglers on ranks 0-3 and every other rank keeping pace. Each measurement is a fresh process:

- engine: every rank file of the two jobs read (load_trace; seconds for the baseline's), then
  rank_step_times of the baseline twice (first: each rank's per-step table computed; again: kept
  on its Trace), and the rest of what the Ranks tab computes: stragglers, rank_matrix,
  rank_medians, slowest_of, and the two jobs compared (compare_ranks, compare_slowest);
- store: the baseline opened through the dashboard's catalog (discover, hash, parse, the store
  written, the slowest rank found) by a fresh process's cache, then reopened by another fresh
  process's cache: seconds, and how many files each parsed;
- dashboard: the app's script run under Streamlit's AppTest (no browser: what the server does,
  not the drawing in the page), both jobs named at start ($ATTNSCOPE_TRACES) beside the bundled
  samples, an empty store: the first open (every file parsed, Overview drawn), then the Ranks tab
  drawn (its analyses computed), then drawn again (all cached in the process).

Prints the Markdown table; `--write` also puts it in docs/generated/speed-ranks.md, which
docs/speed.md includes: the published numbers are the benchmark's, never typed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

import test_ranks  # noqa: E402 - the jobs are derived as the tests derive theirs

GENERATED = ROOT / "docs" / "generated" / "speed-ranks.md"
APP = ROOT / "dashboard" / "app.py"

ENGINE = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from dashboard.engine import load_trace
from dashboard.engine.compare.ranks import (
    compare_ranks, compare_slowest, rank_matrix, rank_medians, rank_of, rank_step_times, slowest_of, stragglers,
)
def job(folder):
    traces = {{}}
    for path in sorted(Path(folder).glob("*.json.gz")):
        trace = load_trace(path)
        traces[rank_of(trace)] = trace
    return traces
t0 = time.perf_counter()
base = job(sys.argv[1])
load = time.perf_counter() - t0
cand = job(sys.argv[2])
t0 = time.perf_counter()
times = rank_step_times(base)
first = time.perf_counter() - t0
t0 = time.perf_counter()
rank_step_times(base)
again = time.perf_counter() - t0
cand_times = rank_step_times(cand)
t0 = time.perf_counter()
stragglers(times), rank_matrix(times), rank_medians(times), slowest_of(times)
compare_ranks(times, cand_times), compare_slowest(times, cand_times)
analyses = time.perf_counter() - t0
print(json.dumps({{"ranks": len(base), "events": base[min(base)].events.height, "steps": times["step"].n_unique(),
                  "load": load, "first": first, "again": again, "analyses": analyses}}))
"""

CATALOG = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from dashboard.catalog import TraceCache, discover, open_all, pending_file
from dashboard.engine.store.store import Store
store, folder, nothing = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
t0 = time.perf_counter()
cache = TraceCache(store=Store(store))
_, loose, failures = discover(root=nothing, extra=[folder])
runs, bad = open_all([pending_file(s, cache) for s in loose], cache=cache)
cache.store.wait()
seconds = time.perf_counter() - t0
problems = [str(f) for f in failures + bad] + ([cache.store_problem] if cache.store_problem else [])
print(json.dumps({{"seconds": seconds, "parses": cache.parses, "runs": len(runs),
                  "ranks": len(runs[0].ranks) if runs else 0, "problems": problems}}))
"""

DASHBOARD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from streamlit.testing.v1 import AppTest
import dashboard.app, dashboard.views  # imports: not timed
def draw(tab):
    at = AppTest.from_file({app!r}, default_timeout=1800)
    if tab != "Overview":
        at.query_params["tab"] = tab
    t0 = time.perf_counter()
    at.run()
    seconds = time.perf_counter() - t0
    errors = [e.value for e in at.exception] + [e.value for e in at.error if "could not be drawn" in e.value]
    return seconds, errors, at
first, errors, at = draw("Overview")
shown = list(at.multiselect[0].value) if len(at.multiselect) else []
ranks, more, _ = draw("Ranks")
again, still, at = draw("Ranks")
try:  # the tab drew both jobs' tables
    drawn = [bool(at.get_by_key(f"tbl_ranks_stragglers_{{i}}").dataframe) for i in (0, 1)] == [True, True]
except (KeyError, IndexError):
    drawn = False
print(json.dumps({{"first": first, "ranks": ranks, "again": again, "shown": shown, "drawn": drawn,
                  "errors": errors + more + still}}))
"""


def child(code: str, args: list[str], env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code.format(root=str(ROOT), app=str(APP)), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise SystemExit(f"bench_ranks: a measurement failed (exit {out.returncode})\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def plans(n: int) -> dict[str, dict[int, dict[int, str]]]:
    """The two jobs of `n` ranks: tests/test_ranks.py's stragglers on ranks 0-3, the others keeping pace."""
    return {
        name: {rank: dict(plan.get(rank, {})) for rank in range(n)}
        for name, plan in (("baseline", test_ranks.BASELINE), ("candidate", test_ranks.CANDIDATE))
    }


def measure(n: int, root: Path) -> dict:
    """Every row of the table for jobs of `n` ranks, written under `root`."""
    folders = {name: test_ranks.write_job(root / name, plan) for name, plan in plans(n).items()}
    files = sorted(folders["baseline"].glob("*.json.gz"))
    engine = child(ENGINE, [str(folders["baseline"]), str(folders["candidate"])])
    store, nothing = root / "store", root / "no-bundled-runs"
    first = child(CATALOG, [str(store), str(folders["baseline"]), str(nothing)])
    reopen = child(CATALOG, [str(store), str(folders["baseline"]), str(nothing)])
    for what, got in (("first open", first), ("reopen", reopen)):
        if got["problems"] or got["runs"] != 1 or got["ranks"] != n:
            raise SystemExit(f"bench_ranks: {n} ranks, {what}: {got}")
    env = {k: v for k, v in os.environ.items() if k != "ATTNSCOPE_NO_STORE"}
    env["ATTNSCOPE_TRACES"] = os.pathsep.join(str(folders[name]) for name in ("baseline", "candidate"))
    env["ATTNSCOPE_STORE"] = str(root / "app-store")
    app = child(DASHBOARD, [], env)
    if app["errors"] or not app["drawn"] or not {"ranks/baseline", "ranks/candidate"} <= set(app["shown"]):
        raise SystemExit(f"bench_ranks: {n} ranks, dashboard: {app}")
    return {
        "ranks": n,
        "events": engine["events"],
        "steps": engine["steps"],
        "gz_mb": sum(p.stat().st_size for p in files) / len(files) / 1e6,
        "load": engine["load"],
        "first": engine["first"],
        "again": engine["again"],
        "analyses": engine["analyses"],
        "open": first["seconds"],
        "open_parses": first["parses"],
        "reopen": reopen["seconds"],
        "reopen_parses": reopen["parses"],
        "app_first": app["first"],
        "app_ranks": app["ranks"],
        "app_again": app["again"],
    }


def table(rows: list[dict], source: str, when: str, cores: int | None, load: float | None = None) -> str:
    """The Markdown of docs/generated/speed-ranks.md: one column per job size (measure()'s rows),
    each ratio computed here."""
    busy = f", load average {load:.1f} before the run" if load is not None else ""
    one = rows[0]
    lines = [
        f"Measured by `benchmarks/bench_ranks.py` on {when}: {cores} cores{busy}. Jobs derived from "
        f"`{source}` as tests/test_ranks.py derives them (each rank {one['events'] / 1000:.1f}k events, "
        f"{one['steps']} steps, {one['gz_mb']:.1f} MB gzip); two jobs of each size (baseline and candidate); "
        "each measurement a fresh process. The dashboard rows are the app's script runs under Streamlit's "
        "AppTest (the server's work, without a browser).",
        "",
        "| | " + " | ".join(f"{r['ranks']} ranks" for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]

    def line(label: str, cell) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(r) for r in rows) + " |")

    line("engine: every rank's file read (`load_trace`), one job", lambda r: f"{r['load']:.2f} s")
    line(
        "engine: per-rank step times, first / again (ratio)",
        lambda r: f"{r['first']:.3f} s / {r['again']:.3f} s ({r['first'] / r['again']:.0f}x)",
    )
    line(
        "engine: stragglers, step x rank, medians, slowest rank, the two jobs compared",
        lambda r: f"{r['analyses']:.3f} s",
    )
    line(
        "store: first open of one job by a fresh process (hash, parse, store written; files parsed)",
        lambda r: f"{r['open']:.2f} s ({r['open_parses']} parsed)",
    )
    line(
        "store: the job reopened by a fresh process (files parsed; first open / reopen)",
        lambda r: f"{r['reopen']:.2f} s ({r['reopen_parses']} parsed; {r['open'] / r['reopen']:.0f}x)",
    )
    line(
        "dashboard: first open (both jobs, with the bundled samples; Overview drawn)",
        lambda r: f"{r['app_first']:.1f} s ({2 * r['ranks']} files)",
    )
    line("dashboard: Ranks tab, first draw", lambda r: f"{r['app_ranks']:.2f} s")
    line("dashboard: Ranks tab drawn again (cached)", lambda r: f"{r['app_again']:.2f} s")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 32], help="job sizes (ranks per job)")
    parser.add_argument("--source", type=Path, default=test_ranks.SOURCE, help="the trace each rank is derived from")
    parser.add_argument(
        "--write", action="store_true", help="also write docs/generated/speed-ranks.md (docs/speed.md includes it)"
    )
    args = parser.parse_args(argv)
    test_ranks.SOURCE = args.source.resolve()  # read by test_ranks._source on its first call
    load = os.getloadavg()[0]
    when = dt.datetime.now(dt.timezone.utc).strftime("%d %B %Y, %H:%M UTC")
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnscope-bench-ranks-") as tmp:
        for n in args.ranks:
            rows.append(measure(n, Path(tmp) / f"{n}-ranks"))
            print(f"{n} ranks: " + ", ".join(f"{k} {v:.3g}" for k, v in rows[-1].items()), flush=True)
    try:
        source = args.source.resolve().relative_to(ROOT)
    except ValueError:
        source = args.source.name
    text = table(rows, str(source), when, os.cpu_count(), load)
    print(text)
    if args.write:
        GENERATED.parent.mkdir(parents=True, exist_ok=True)
        GENERATED.write_text(text, encoding="utf-8")
        print(f"wrote {GENERATED}")


if __name__ == "__main__":
    main(sys.argv[1:])
