"""First open against reopen from the trace store, each in a fresh process.

    python benchmarks/bench_store.py [TRACE ...]

With no arguments: benchmarks/out/large1g.json (the ~1 GB trace: make it with
`python benchmarks/make_large_trace.py --target-mb 1000 --out benchmarks/out/large1g.json`), else
benchmarks/out/large.json. For each trace, in a new empty store: seconds and whole-process peak
RSS of the first open (hash, parse, write Parquet) and of a reopen (read Parquet), each to a
loaded Trace and to a full summary; the store's size on disk; and the ratios, measured in this
one run. Target: reopen >= 20x faster than the first open.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
store_dir, path, what = sys.argv[1], sys.argv[2], sys.argv[3]
from dashboard.engine import summarize
from dashboard.engine.store.store import Store
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0 = time.perf_counter()
trace, sha = Store(store_dir).open(path)
opened = time.perf_counter() - t0
if what == "summary":
    summarize(trace)
elapsed = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"open": opened, "seconds": elapsed, "peak": peak, "base": base}}))
"""


def measure(store: Path, path: Path, what: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(root=str(ROOT)), str(store), str(path), what],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> None:
    paths = [Path(p) for p in argv]
    if not paths:
        for name in ("large1g.json", "large.json"):
            if (HERE / "out" / name).exists():
                paths = [HERE / "out" / name]
                break
    if not paths:
        sys.exit("no trace: give one, or make benchmarks/out/large.json with benchmarks/make_large_trace.py")
    print(
        f"{'trace':<24} {'MB':>7} {'first open s':>13} {'reopen s':>9} {'ratio':>7} {'first+summary s':>16} "
        f"{'reopen+summary s':>17} {'ratio':>7} {'store MB':>9} {'first RSS MB':>13} {'reopen RSS MB':>14}"
    )
    for path in paths:
        store = Path(tempfile.mkdtemp(prefix="attnscope-bench-store-"))
        try:
            first = measure(store, path, "open")
            again = measure(store, path, "open")
            shutil.rmtree(store)
            first_s = measure(store, path, "summary")
            again_s = measure(store, path, "summary")
            stored = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
        finally:
            shutil.rmtree(store, ignore_errors=True)
        size = path.stat().st_size
        print(
            f"{path.name:<24} {size / 1e6:>7.1f} {first['open']:>13.2f} {again['open']:>9.2f} {first['open'] / again['open']:>7.1f} "
            f"{first_s['seconds']:>16.2f} {again_s['seconds']:>17.2f} {first_s['seconds'] / again_s['seconds']:>7.1f} "
            f"{stored / 1e6:>9.1f} {first['peak'] / 1e6:>13.0f} {again['peak'] / 1e6:>14.0f}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
