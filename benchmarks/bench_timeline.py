"""Timeline-diff cost for a busy step: building the figures the Timeline tab draws.

    python benchmarks/bench_timeline.py [--kernels 33400]

Makes a one-step trace with N kernels (each with its cpu_op and launch: 3N timeline events),
then times, in this one process: loading it, diff.timeline, charts.timeline_pair with the
level-of-detail merge (what the tab draws) and without it (every event drawn), and
diff.sequence_diff of the step against a copy with 10% of its kernels renamed, and
charts.timeline_data (what the dashboard's canvas timeline is sent). Prints seconds and the ratio
of drawing with the merge to drawing every event, the size of both figures, and the JSON bytes
the dashboard sends for the step pair (canvas data) against the plotly figure's.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dashboard import charts  # noqa: E402
from dashboard.engine import load_trace  # noqa: E402
from dashboard.engine.compare.diff import sequence_diff, timeline  # noqa: E402


def busy_trace(path: Path, kernels: int, renamed: float = 0.0, seed: int = 0) -> None:
    rng = random.Random(seed)
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": kernels * 10 + 10,
        }
    ]
    for i in range(kernels):
        ts = 5 + i * 10
        name = f"elementwise_kernel_{i % 40}" if rng.random() >= renamed else f"other_kernel_{i % 7}"
        events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}", "pid": 1, "tid": 1, "ts": ts, "dur": 8})
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 1,
                "dur": 2,
                "args": {"correlation": i + 1},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": ts + 4,
                "dur": 3,
                "args": {"correlation": i + 1, "stream": 7, "device": 0},
            }
        )
    path.write_text(json.dumps({"traceEvents": events}))


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=33_400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        a_path, b_path = Path(tmp) / "a.json", Path(tmp) / "b.json"
        busy_trace(a_path, args.kernels)
        busy_trace(b_path, args.kernels, renamed=0.1, seed=1)
        a, t_load = timed(lambda: load_trace(a_path))
        b = load_trace(b_path)
    tl_a, t_tl = timed(lambda: timeline(a, 1))
    tl_b = timeline(b, 1)
    merged, t_merged = timed(lambda: charts.timeline_pair(tl_a, tl_b, "a", "b"))
    full, t_full = timed(lambda: charts.timeline_pair(tl_a, tl_b, "a", "b", max_events=10**9))
    diff, t_diff = timed(lambda: sequence_diff(a, 1, b, 1))
    canvas, t_canvas = timed(lambda: charts.timeline_data(tl_a, tl_b, "a", "b"))
    canvas_bytes, figure_bytes = len(json.dumps(canvas)), len(merged.to_json())
    points = lambda fig: sum(len(t.x) for t in fig.data if t.x is not None)  # noqa: E731
    print(f"step events: {tl_a.height:,} per run; kernels: {args.kernels:,}")
    print(f"load {t_load:.2f} s | timeline {t_tl:.2f} s | sequence diff {t_diff:.2f} s ({diff.height:,} rows)")
    print(
        f"figure with merge {t_merged:.2f} s, {points(merged):,} points | every event {t_full:.2f} s, {points(full):,} points"
    )
    print(f"ratio merged/full: time {t_merged / t_full:.2f}, points {points(merged) / points(full):.3f}")
    print(
        f"canvas data {t_canvas:.2f} s, {canvas_bytes / 1e6:.2f} MB JSON | plotly figure {figure_bytes / 1e6:.2f} MB JSON "
        f"(ratio time {t_canvas / t_merged:.2f}, bytes {canvas_bytes / figure_bytes:.2f})"
    )


if __name__ == "__main__":
    main()
