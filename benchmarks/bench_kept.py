"""A trace seen once answers at once: the goals of issue #31, each printed as a ratio of one run.

    python benchmarks/bench_kept.py [--write] [--repeat N] [TRACE ...]

With no TRACE: benchmarks/out/large.json and benchmarks/out/large1g.json (make them with
`python benchmarks/make_large_trace.py --target-mb 190` and `--target-mb 1000 --out
benchmarks/out/large1g.json`). Each measurement is a fresh process of the installed `attnscope`
(wall seconds, peak RSS from wait4), the best of --repeat (default 3):

- `summary --json --no-store`, the first `summary --json` into an empty store, the second from it
  (its kept summary), their outputs byte-identical; goals: first <= 1.10x no-store, second < 1 s
  and >= 20x faster than the first;
- the first open's MB/s (JSON bytes / the no-store seconds; goal 150) and peak RSS / JSON (goal
  <= 1.0);
- `json.load` of the same bytes in a fresh process, for scale;
- cold start: `attnscope --help` (goal < 0.3 s) and the summary of a 2 KB trace (goal < 0.5 s).

`--write` puts the table in docs/generated/speed-kept.md (docs/speed.md includes it) and between
the speed markers of README.md: the published numbers are the benchmark's, never typed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SMALL = ROOT / "tests" / "data" / "hta_triton_example.json.gz"
GENERATED = ROOT / "docs" / "generated" / "speed-kept.md"
README = ROOT / "README.md"
MARKS = ("<!-- speed:start (benchmarks/bench_kept.py --write) -->", "<!-- speed:end -->")
PERFETTO_MB_S = 177  # Perfetto's JSON importer, published (google/perfetto#1641)
HTA_1G_S = 281  # HTA 0.6.1 on the 910 MB trace, as measured here when the project started (docs/speed.md)


def attnscope() -> list[str]:
    found = shutil.which("attnscope", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "dashboard.cli"]


def run(cmd: list[str]) -> tuple[float, int, bytes]:
    """(wall s, peak RSS bytes, stdout) of one fresh process."""
    import time

    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}")
        out.seek(0)
        return wall, usage.ru_maxrss * 1024, out.read()


def best(cmd: list[str], repeat: int, before=None) -> tuple[float, int, bytes]:
    runs = []
    for _ in range(repeat):
        if before:
            before()
        runs.append(run(cmd))
    return min(runs, key=lambda r: r[0])


def measure(path: Path, repeat: int) -> dict:
    cli = attnscope()
    store = Path(tempfile.mkdtemp(prefix="attnscope-bench-kept-"))
    try:
        plain = best([*cli, "summary", "--json", "--no-store", str(path)], repeat)
        first = best(
            [*cli, "summary", "--json", "--store", str(store), str(path)],
            repeat,
            before=lambda: (shutil.rmtree(store, ignore_errors=True), store.mkdir()),
        )
        second = best([*cli, "summary", "--json", "--store", str(store), str(path)], repeat)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    load = best([sys.executable, "-c", f"import json; json.load(open({str(path)!r}, 'rb'))"], 1)
    size = path.stat().st_size
    return {
        "trace": path.name,
        "mb": size / 1e6,
        "no_store": plain[0],
        "first": first[0],
        "second": second[0],
        "json_load": load[0],
        "identical": plain[2] == first[2] == second[2],
        "peak_ratio": plain[1] / size,
        "mb_s": size / 1e6 / plain[0],
    }


def cold(repeat: int) -> dict:
    cli = attnscope()
    return {
        "help": best([*cli, "--help"], max(repeat, 5))[0],
        "small": best([*cli, "summary", "--json", "--no-store", str(SMALL)], max(repeat, 5))[0],
    }


def table(rows: list[dict], start: dict, when: str, load: float | None = None) -> str:
    busy = (
        f", load average {load:.1f} before the run (other work on the machine slows the first opens)"
        if load is not None
        else ""
    )
    lines = [
        f"Measured by `benchmarks/bench_kept.py` on {when}: {os.cpu_count()} cores{busy}, Python "
        f"{platform.python_version()}; each a fresh `attnscope` process, the best of its runs. "
        f"Goals (issue #31) in brackets.",
        "",
        "| trace | JSON MB | `--no-store` s | first open s (store written) | first / no-store [<= 1.10] | "
        "second s [< 1] | first / second [>= 20] | MB/s [150] | peak RSS / JSON [<= 1.0] | json.load s | same bytes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['trace']} | {r['mb']:.0f} | {r['no_store']:.2f} | {r['first']:.2f} | {r['first'] / r['no_store']:.2f} | "
            f"{r['second']:.2f} | {r['first'] / r['second']:.0f}x | {r['mb_s']:.0f} | {r['peak_ratio']:.2f} | "
            f"{r['json_load']:.1f} | {'yes' if r['identical'] else 'NO'} |"
        )
    lines += [
        "",
        f"Cold start: `attnscope --help` {start['help']:.2f} s [< 0.3]; `attnscope summary --json --no-store` of the "
        f"2 KB `{SMALL.name}` {start['small']:.2f} s [< 0.5]. For scale: Perfetto's JSON importer {PERFETTO_MB_S} MB/s "
        f"(published, google/perfetto#1641); HTA 0.6.1 {HTA_1G_S} s on the 910 MB trace.",
    ]
    return "\n".join(lines) + "\n"


def write(text: str) -> None:
    GENERATED.parent.mkdir(parents=True, exist_ok=True)
    GENERATED.write_text(text, encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(MARKS[0]) + r".*?" + re.escape(MARKS[1]), re.S)
    if not pattern.search(readme):
        raise SystemExit(f"{README}: no speed markers ({MARKS[0]} ... {MARKS[1]})")
    README.write_text(pattern.sub(lambda m: f"{MARKS[0]}\n{text}{MARKS[1]}", readme), encoding="utf-8")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="write docs/generated/speed-kept.md and README's table")
    args = parser.parse_args(argv)
    paths = args.traces or [p for p in (HERE / "out" / "large.json", HERE / "out" / "large1g.json") if p.exists()]
    if not paths:
        sys.exit("no trace: make benchmarks/out/large.json with benchmarks/make_large_trace.py")
    load = os.getloadavg()[0]
    rows = [measure(p, args.repeat) for p in paths]
    start = cold(args.repeat)
    text = table(rows, start, dt.datetime.now(dt.timezone.utc).strftime("%d %B %Y, %H:%M UTC"), load)
    print(text)
    if args.write:
        write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
