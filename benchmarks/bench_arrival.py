"""An upload parsed while it arrives against one parsed after its last byte, at a network's pace.

    python benchmarks/bench_arrival.py [--write] [--rates 110,270] [--repeat 1] [TRACE ...]

With no traces: benchmarks/out/large1g.json when it exists, else benchmarks/out/large.json (make
them with `python benchmarks/make_large_trace.py [--target-mb 1000 --out benchmarks/out/large1g.json]`).
Each measurement is a fresh process that receives the trace through the dashboard's upload code
(dashboard.uploads: Registry.receive, Receiving.write in BUFFER-sized pieces, finish), paced to
RATE MB/s as bytes from a browser on another machine would arrive (110 MB/s: a 1 Gbit/s link), then
calls load_trace on the upload as the app does. "early" is the dashboard as it is (the upload
read by load_arrival.Arrival while it arrives); "after" turns that off (load_arrival.arrival answers None), so the
file is parsed once its last byte is in. Prints the machine's facts, then per trace and rate: the
transfer's seconds, seconds from the last byte to the loaded trace, and from the first byte to
it, for both, and early/after ratios of this one run.

Here the sender is a paced thread of the same process, which takes little CPU. A browser on the
same 2-core machine takes much more (bench_upload.py: Chromium and the server's receive use
about 1.5 cores for the 3-4 s of the 910 MB trace's transfer), so there an early parse mostly
slows the transfer down by what it gains.

`--write` also puts the rows as a Markdown table in docs/generated/speed-arrival.md, which
docs/speed.md includes: the published numbers are the benchmark's, never typed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_load import facts  # noqa: E402

GENERATED = ROOT / "docs" / "generated" / "speed-arrival.md"

CHILD = r"""
import json, sys, tempfile, time
sys.path.insert(0, {root!r})
from pathlib import Path
from dashboard import uploads
from dashboard.engine import load_trace
from dashboard.engine.load import arrival as load_arrival
path, rate, mode = Path(sys.argv[1]), float(sys.argv[2]) * 1e6, sys.argv[3]
if mode == "after":
    load_arrival.arrival = lambda *args, **kwargs: None
with tempfile.TemporaryDirectory() as tmp:
    registry = uploads.Registry(Path(tmp))
    ticket = registry.session_ticket("bench", None)
    size = path.stat().st_size
    t0 = time.perf_counter()
    receiving = registry.receive(ticket, path.name, size, size, "", alive=lambda session: True)
    sent = 0
    with open(path, "rb") as fh:
        while piece := fh.read(uploads.BUFFER):
            receiving.write(piece)
            sent += len(piece)
            ahead = sent / rate - (time.perf_counter() - t0)
            if ahead > 0:
                time.sleep(ahead)
    upload = receiving.finish()
    t1 = time.perf_counter()
    trace = load_trace(upload.path, name=upload.name, arrival=upload.arrival)  # as the app does (catalog.open_all)
    t2 = time.perf_counter()
    registry.close()
print(json.dumps({{"transfer": t1 - t0, "after_last_byte": t2 - t1, "total": t2 - t0, "events": trace.events.height}}))
"""


def measure(path: Path, rate: float, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(root=str(ROOT)), str(path), str(rate), mode],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[dict], when: str, cores: int | None, load: float | None = None, repeat: int = 1) -> str:
    """The Markdown of docs/generated/speed-arrival.md: one row per trace and rate (the medians of
    main's measurements, in seconds), each ratio computed here."""
    busy = f", load average {load:.1f} before the run" if load is not None else ""
    runs = f"the median of {repeat} fresh processes per mode" if repeat > 1 else "one fresh process per mode"
    lines = [
        f"Measured by `benchmarks/bench_arrival.py` on {when}: {cores} cores{busy}; {runs}. The upload "
        "goes through the dashboard's upload code paced at the rate a browser on another machine would "
        'send it; "while arriving" is the dashboard as it is (the upload parsed while its bytes arrive), '
        '"after" parses it once its last byte is in.',
        "",
        "| trace | MB | arrives at MB/s | transfer s | last byte to ready s, parsed while arriving | "
        "last byte to ready s, parsed after | while / after | first byte to ready s, parsed while arriving | "
        "first byte to ready s, parsed after | while / after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['trace']} | {r['mb']:.0f} | {r['rate']:.0f} | {r['transfer']:.2f} | {r['early_after']:.2f} | "
            f"{r['after_after']:.2f} | {r['early_after'] / r['after_after']:.2f} | {r['early_total']:.2f} | "
            f"{r['after_total']:.2f} | {r['early_total'] / r['after_total']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="110,270", help="MB/s the bytes arrive at, comma-separated")
    parser.add_argument(
        "--repeat", type=int, default=1, help="measurements of each mode, alternating (medians printed)"
    )
    parser.add_argument(
        "--write", action="store_true", help="also write docs/generated/speed-arrival.md (docs/speed.md includes it)"
    )
    parser.add_argument("traces", nargs="*", type=Path)
    args = parser.parse_args(argv)
    traces = args.traces or [p for p in (HERE / "out" / "large1g.json",) if p.exists()] or [HERE / "out" / "large.json"]
    load = os.getloadavg()[0]
    when = dt.datetime.now(dt.timezone.utc).strftime("%d %B %Y, %H:%M UTC")
    print(facts())
    print(
        f"{'trace':24s} {'MB':>6s} {'MB/s':>5s} {'transfer s':>10s} {'after last byte s (early / after)':>34s} "
        f"{'ratio':>6s} {'first byte to trace s (early / after)':>38s} {'ratio':>6s}"
    )
    rows = []
    for path in traces:
        for rate in [float(r) for r in args.rates.split(",")]:
            got: dict[str, list[dict]] = {"early": [], "after": []}
            for _ in range(args.repeat):
                for mode in ("early", "after"):
                    got[mode].append(measure(path, rate, mode))
            assert got["early"][0]["events"] == got["after"][0]["events"]

            def med(mode: str, key: str) -> float:
                return statistics.median(m[key] for m in got[mode])

            rows.append(
                {
                    "trace": path.name,
                    "mb": path.stat().st_size / 1e6,
                    "rate": rate,
                    "transfer": med("early", "transfer"),
                    "early_after": med("early", "after_last_byte"),
                    "after_after": med("after", "after_last_byte"),
                    "early_total": med("early", "total"),
                    "after_total": med("after", "total"),
                }
            )
            print(
                f"{path.name:24s} {path.stat().st_size / 1e6:6.0f} {rate:5.0f} {med('early', 'transfer'):10.2f} "
                f"{med('early', 'after_last_byte'):16.2f} / {med('after', 'after_last_byte'):<15.2f} "
                f"{med('early', 'after_last_byte') / med('after', 'after_last_byte'):6.2f} "
                f"{med('early', 'total'):18.2f} / {med('after', 'total'):<17.2f} "
                f"{med('early', 'total') / med('after', 'total'):6.2f}"
            )
    if args.write:
        GENERATED.parent.mkdir(parents=True, exist_ok=True)
        GENERATED.write_text(table(rows, when, os.cpu_count(), load, args.repeat), encoding="utf-8")
        print(f"wrote {GENERATED}")


if __name__ == "__main__":
    main(sys.argv[1:])
