"""Make a large real-shaped trace by repeating the steps of a real one.

    python benchmarks/make_large_trace.py [--target-mb 200] [--out benchmarks/out/large.json]

Each copy of the source's events is shifted past the previous copy in time, and its step numbers,
correlation ids, external ids and flow ids are offset so that every link stays unique.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "tests" / "data" / "hta_a100_control.json.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--target-mb", type=float, default=200.0)
    parser.add_argument("--out", type=Path, default=HERE / "out" / "large.json")
    args = parser.parse_args()

    raw = gzip.decompress(args.source.read_bytes())
    doc = json.loads(raw)
    events = doc.pop("traceEvents")
    copies = max(1, round(args.target_mb * 1e6 / len(raw)))
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    steps = [int(m.group(1)) for e in events if (m := re.match(r"ProfilerStep#(\d+)$", str(e.get("name", ""))))]
    step_stride = max(steps) - min(steps) + 1 if steps else 0
    id_stride = 10 ** (len(str(max((e.get("args", {}).get("correlation", 0) for e in events), default=0))) + 1)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        first = True
        for n in range(copies):
            for e in events:
                e2 = dict(e)
                if "ts" in e2 and n:
                    e2["ts"] = e["ts"] + n * span
                if n and "args" in e:
                    a = dict(e["args"])
                    for key in ("correlation", "External id", "external id"):
                        if isinstance(a.get(key), int):
                            a[key] += n * id_stride
                    e2["args"] = a
                if n and isinstance(e.get("id"), int):
                    e2["id"] = e["id"] + n * id_stride
                m = re.match(r"ProfilerStep#(\d+)$", str(e.get("name", "")))
                if n and m:
                    e2["name"] = f"ProfilerStep#{int(m.group(1)) + n * step_stride}"
                fh.write(("" if first else ",\n") + json.dumps(e2))
                first = False
        fh.write("\n]}\n")
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.0f} MB, {copies} copies of {args.source.name}")


if __name__ == "__main__":
    main()
