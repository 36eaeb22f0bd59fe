"""Summary speed and memory against the stdlib json.load, each measured in a fresh process.

    python benchmarks/bench_load.py [TRACE ...]

With no arguments: every trace in tests/data plus benchmarks/out/large.json when it exists
(make it with benchmarks/make_large_trace.py). Prints one row per trace: JSON MB (uncompressed),
seconds to a full `summarize`, seconds of `json.load` of the same bytes, their ratio, and each
one's whole-process peak RSS as a multiple of the JSON size (interpreter and libraries included;
the bare interpreter with them imported is printed once, for scale). Targets: time ratio <= 1,
summary peak RSS <= 3x the JSON size.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import gzip, json, resource, sys, time
sys.path.insert(0, {root!r})
mode, path = sys.argv[1], sys.argv[2]
import msgspec, polars, numpy  # libraries loaded before the baseline reading
from dashboard.engine import load_trace, summarize
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0 = time.perf_counter()
if mode == "json":
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    json.loads(data)
elif mode == "summary":
    summarize(load_trace(path))
else:
    pass
elapsed = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"seconds": elapsed, "peak": peak, "base": base}}))
"""


def measure(mode: str, path: Path) -> dict:
    code = CHILD.format(root=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, mode, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def json_size(path: Path) -> int:
    import gzip

    data = path.read_bytes()
    return len(gzip.decompress(data)) if data[:2] == b"\x1f\x8b" else len(data)


def main(argv: list[str]) -> None:
    paths = [Path(p) for p in argv] or sorted((ROOT / "tests" / "data").glob("*.json.gz"))
    large = HERE / "out" / "large.json"
    if not argv and large.exists():
        paths.append(large)
    base = measure("none", paths[0])["base"]
    print(f"interpreter with msgspec, polars, numpy and the engine imported: {base / 1e6:.0f} MB RSS")
    print(f"{'trace':<46} {'JSON MB':>8} {'summary s':>10} {'json.load s':>12} {'time ratio':>11} {'summary RSS/JSON':>17} {'json.load RSS/JSON':>19}")
    for path in paths:
        size = json_size(path)
        s = measure("summary", path)
        j = measure("json", path)
        rss_s = s["peak"] / size
        rss_j = j["peak"] / size
        print(f"{path.name:<46} {size / 1e6:>8.1f} {s['seconds']:>10.2f} {j['seconds']:>12.2f} {s['seconds'] / j['seconds']:>11.2f} {rss_s:>17.2f} {rss_j:>19.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
