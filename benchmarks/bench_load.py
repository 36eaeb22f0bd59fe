"""A trace's first open against the stdlib json.load, each measured in a fresh process.

    python benchmarks/bench_load.py [--repeat N] [--write] [TRACE ...]
    python benchmarks/bench_load.py --profile [--write] [TRACE ...]

With no traces: every trace in tests/data plus the generated ones in benchmarks/out that exist
(make_large_trace.py): large.json and large1g.json (the A100 shape, the default source) and
dense.json and dense1g.json (the dense shape, many small collective and copy events:
`--source tests/data/hta_v100_test.json.gz`). Prints the machine's facts (cores, RAM, load
average, versions, date), then one row per trace: JSON MB (uncompressed), the number of events in
its traceEvents, the first open (a fresh `attnscope summary --json` process into a fresh, empty
store: the tables and kept analyses written) against `json.load` of the same bytes (the median of N
fresh processes each, the kinds of run taken in turn), their ratio, the first open's MB/s and
events/s and its peak RSS over the JSON size (wait4: the largest of the process and its slice
workers), json.load's own peak; then the in-process load + `summarize` (seconds, CPU/wall with
the workers, the loading process's peak alone and that plus each worker's peak, an upper bound on
what the load held at once). The bare
interpreter with the libraries imported is printed once, for scale. The machine is shared:
compare the ratios of one run, not seconds across runs.

The last column is target 3 as the project holds it: a summary no slower than json.load, or
within SMALL_BOUND_S (0.1 s, a response people read as instant) where json.load takes less than
that. Below a few MB json.load takes under a millisecond to a few, and every polars query costs
0.1-0.2 ms on its own (README, "Where the targets stand ... a .json.gz read while it inflates").

--profile times each phase of the first open instead (profile_open.py: scan, frames, nesting,
launches and steps, each analysis, the store's writer) and writes docs/generated/speed-phases.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = ROOT / "docs" / "generated" / "speed-load.md"
PHASES = ROOT / "docs" / "generated" / "speed-phases.md"
PROFILES = HERE / "out" / "profiles.json"  # each trace's last profile (--profile --write), by file name

CHILD = r"""
import gzip, json, resource, sys, time
sys.path.insert(0, {root!r})
mode, path = sys.argv[1], sys.argv[2]
from dashboard.engine import load_trace, summarize  # first, as the CLI and the dashboard import it
import msgspec, polars, numpy  # libraries loaded before the baseline reading
import dashboard.engine.load.workers as load_workers
made = []  # every set of slice workers this load starts (closed by the loader before its tables are built)
if hasattr(load_workers, "_Workers"):
    _init = load_workers._Workers.__init__
    def _noted(self, *args, **kwargs):
        _init(self, *args, **kwargs)
        made.append(self)
    load_workers._Workers.__init__ = _noted
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
def cpu():
    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
c0, t0 = cpu(), time.perf_counter()
if mode == "json":
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = json.loads(data)
    events = len(doc["traceEvents"]) if isinstance(doc, dict) else len(doc)
elif mode == "summary":
    summarize(load_trace(path))
elapsed = time.perf_counter() - t0
workers = [proc for started in made for proc in started.procs]
for started in made:
    started.close()  # waited for (again): their CPU time and peak RSS show in RUSAGE_CHILDREN
busy = cpu() - c0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 if workers else 0
print(json.dumps({{"seconds": elapsed, "events": events if mode == "json" else None,
                   "cpu": busy, "peak": peak, "workers": len(workers), "child_peak": child, "base": base}}))
"""


FIXED = r"""
import json, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
import msgspec, numpy, polars
t1 = time.perf_counter()
from dashboard.engine import load_trace, summarize
t2 = time.perf_counter()
queries = [0]
try:  # polars' engine entry point, to count the queries (private: absent in some versions)
    from polars.lazyframe import engine as _engine
    _collect = _engine._LocalEngine.collect
    def _counted(self, *args, **kwargs):
        queries[0] += 1
        return _collect(self, *args, **kwargs)
    _engine._LocalEngine.collect = _counted
except (ImportError, AttributeError):
    queries[0] = None
path = sys.argv[1]
t3 = time.perf_counter()
summarize(load_trace(path))
first = time.perf_counter() - t3
asked = queries[0]
later = []
for _ in range(5):
    t = time.perf_counter()
    summarize(load_trace(path))
    later.append(time.perf_counter() - t)
print(json.dumps({{"libraries": t1 - t0, "engine": t2 - t1, "first": first, "later": min(later), "queries": asked}}))
"""


def fixed_costs(path: Path) -> str:
    """What a summary costs whatever the trace's size, in a fresh process: importing the libraries
    and the engine, the first load and summary against the later ones (polars' and numpy's
    first-call set-up), and the number of polars queries one load and summary runs."""
    code = FIXED.format(root=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    f = json.loads(out.stdout.strip().splitlines()[-1])
    queries = "?" if f["queries"] is None else f"{f['queries']}"
    return (
        f"fixed costs on {path.name}: import msgspec+numpy+polars {f['libraries'] * 1e3:.0f} ms, the engine "
        f"{f['engine'] * 1e3:.0f} ms; first load+summary {f['first'] * 1e3:.1f} ms, later ones {f['later'] * 1e3:.1f} ms "
        f"(first-call set-up {max(f['first'] - f['later'], 0) * 1e3:.1f} ms); {queries} polars queries per load+summary"
    )


def measure(mode: str, path: Path) -> dict:
    code = CHILD.format(root=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, mode, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(runs: list[dict]) -> dict:
    """The run of median seconds."""
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


def json_size(path: Path) -> int:
    """Without reading the file into this process: its children's peak RSS starts from this
    process's (Linux carries ru_maxrss across fork and exec), so a 910 MB read here made every
    later row's peak read 966 MB."""
    import gzip

    with open(path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            return path.stat().st_size
    size = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            size += len(chunk)
    return size


def facts() -> str:
    import msgspec
    import numpy
    import polars

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    ram = (
        next((int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
        if Path("/proc/meminfo").exists()
        else 0
    )
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"{datetime.date.today()} | {cores} cores, {ram / 2**30:.0f} GiB RAM, load average {load} | "
        f"{platform.python_implementation()} {platform.python_version()}, polars {polars.__version__}, "
        f"msgspec {msgspec.__version__}, numpy {numpy.__version__} | {platform.platform()}"
    )


def first_open(path: Path) -> dict:
    """The whole `attnscope summary --json` process into a fresh, empty store (the first open, its
    tables and kept analyses written): wall seconds and peak RSS (wait4: the largest of the process
    and its slice workers)."""
    store = Path(tempfile.mkdtemp(prefix="attnscope-bench-load-"))
    env = {**os.environ, "ATTNSCOPE_STORE": str(store), "PYTHONPATH": str(ROOT)}
    env.pop("ATTNSCOPE_NO_STORE", None)
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "dashboard.cli", "summary", "--json", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"attnscope summary --json {path}: exit {os.waitstatus_to_exitcode(status)}")
        return {"seconds": wall, "peak": usage.ru_maxrss * 1024}
    finally:
        shutil.rmtree(store, ignore_errors=True)


HEADER = (
    "trace",
    "JSON MB",
    "events",
    "first open s",
    "json.load s",
    "time ratio",
    "MB/s",
    "events/s",
    "peak RSS / JSON",
    "json.load peak / JSON",
    "in-process summary s",
    "CPU/wall",
    "loader peak / JSON",
    "+ workers",
    "target 3",
)


def row(path: Path, repeat: int) -> list[str]:
    """One trace's cells (HEADER): the first open (a fresh `attnscope summary --json` process, a
    fresh store) against json.load of the same bytes, then the in-process load + summarize."""
    size = json_size(path)
    opens, summaries, loads = [], [], []
    for _ in range(repeat):  # in rounds: no kind of run gets a quicker or slower stretch of a shared machine to itself
        opens.append(first_open(path))
        summaries.append(measure("summary", path))
        loads.append(measure("json", path))
    opened, s, j = median(opens), median(summaries), median(loads)
    with_workers = (s["peak"] + s["workers"] * s["child_peak"]) / size
    return [
        path.name,
        f"{size / 1e6:.1f}",
        f"{j['events']:,}",
        f"{opened['seconds']:.3f}",
        f"{j['seconds']:.4f}",
        f"{opened['seconds'] / j['seconds']:.2f}",
        f"{size / 1e6 / opened['seconds']:.0f}",
        f"{j['events'] / opened['seconds'] / 1e3:.0f}k",
        f"{opened['peak'] / size:.2f}",
        f"{j['peak'] / size:.2f}",
        f"{s['seconds']:.3f}",
        f"{s['cpu'] / s['seconds']:.2f}",
        f"{s['peak'] / size:.2f}",
        f"{with_workers:.2f}",
        target_3(s["seconds"], j["seconds"]),
    ]


def default_traces() -> list[Path]:
    """tests/data's traces, then the generated ones that exist (make_large_trace.py): the A100
    shape (large.json, large1g.json) and the dense one of many small events (dense.json,
    dense1g.json, from tests/data/hta_v100_test.json.gz)."""
    paths = sorted((ROOT / "tests" / "data").glob("*.json.gz"))
    names = ("large.json", "large1g.json", "dense.json", "dense1g.json")
    return paths + [HERE / "out" / n for n in names if (HERE / "out" / n).exists()]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="fresh processes per measurement (the median is shown)")
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument(
        "--write",
        action="store_true",
        help=f"also write the table to {OUT.relative_to(ROOT)} (docs/speed.md includes it)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help=f"instead, time each phase of the first open of each trace (profile_open.py); with --write, into {PHASES.relative_to(ROOT)}",
    )
    args = parser.parse_args(argv)
    paths = args.traces or default_traces()
    machine = facts()
    print(machine)
    if args.profile:
        return profile(paths, machine, args.write)
    base = measure("none", paths[0])["base"]
    print(f"interpreter with msgspec, polars, numpy and the engine imported: {base / 1e6:.0f} MB RSS")
    smallest = min(paths, key=json_size)
    fixed = fixed_costs(smallest)
    print(fixed)
    md = [
        f"Measured by `benchmarks/bench_load.py{' --repeat ' + str(args.repeat) if args.repeat > 1 else ''}`: {machine}. "
        f"The interpreter with the libraries and the engine imported holds {base / 1e6:.0f} MB before the first byte.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|---|" + "---:|" * (len(HEADER) - 2) + "---|",
    ]
    print(" | ".join(HEADER))
    for path in paths:
        cells = row(path, args.repeat)
        print(" | ".join(cells), flush=True)
        md.append("| " + " | ".join(cells) + " |")
    md += ["", f"Fixed costs on the smallest trace: {fixed}"]
    if args.write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text("\n".join(md) + "\n", encoding="utf-8")


def profile(paths: list[Path], machine: str, write: bool) -> None:
    """Each trace's first open, phase by phase (profile_open.py in a fresh process, a fresh store),
    printed and, with `write`, saved in PROFILES beside the traces profiled before (a 1 GB trace
    profiled, removed, the next made) and put in PHASES as one table of them all: seconds and
    share of the command."""
    saved = json.loads(PROFILES.read_text()) if write and PROFILES.exists() else {}
    for path in paths:
        out = subprocess.run(
            [sys.executable, str(HERE / "profile_open.py"), str(path)], capture_output=True, text=True, check=True
        )
        phases = json.loads(out.stdout.strip().splitlines()[-1])
        print(path.name, json.dumps(phases, indent=1))
        saved[path.name] = {"mb": json_size(path) / 1e6, "phases": phases}
    if write:  # the 1 GB traces are profiled one at a time (one on disk at once): the table holds each
        PROFILES.parent.mkdir(parents=True, exist_ok=True)
        PROFILES.write_text(json.dumps(saved), encoding="utf-8")
    got = {f"{name} ({v['mb']:.0f} MB)": v["phases"] for name, v in sorted(saved.items(), key=lambda kv: kv[1]["mb"])}
    phases = list(dict.fromkeys(k for g in got.values() for k in g if k != "command"))
    analyses = [k for k in phases if k.startswith("analysis ")]
    order = [k for k in phases if not k.startswith("analysis ") and not k.startswith("writer")]
    top = sorted(analyses, key=lambda k: -max(g.get(k, 0) for g in got.values()))[:PROFILE_ANALYSES]
    rows = [k for k in order if k != "analyses (total)"] + ["analyses (total)"] + top
    rows += [k for k in phases if k.startswith("writer")]
    md = [
        f"Measured by `benchmarks/bench_load.py --profile`: {machine}. Seconds of each phase of one first open "
        "(`attnscope summary --json` into a fresh store, profile_open.py), and its share of the command; "
        f"the {PROFILE_ANALYSES} analyses that take longest by their own time (the analyses they ask for "
        "counted as theirs); the writer thread's work overlaps the analyses.",
        "",
        "| phase | " + " | ".join(f"{name} s | share" for name in got) + " |",
        "|---|" + "---:|---:|" * len(got),
    ]
    for key in rows + ["command"]:
        cells = [f"{g.get(key, 0):.3f} | {g.get(key, 0) / g['command']:.0%}" for g in got.values()]
        md.append(f"| {key} | " + " | ".join(cells) + " |")
    print("\n".join(md))
    if write:
        PHASES.write_text("\n".join(md) + "\n", encoding="utf-8")


PROFILE_ANALYSES = 8


SMALL_BOUND_S = 0.1


def target_3(summary_s: float, json_s: float) -> str:
    """'met' when the summary is no slower than json.load, or within SMALL_BOUND_S of a fresh
    process's start (imports done) where json.load is faster than that; else 'missed'."""
    return "met" if summary_s <= max(json_s, SMALL_BOUND_S) else "missed"


if __name__ == "__main__":
    main(sys.argv[1:])
