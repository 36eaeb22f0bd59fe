"""Several people on one dashboard server at once: N browser sessions (Playwright contexts in one
Chromium) each upload a different small trace at the same time and switch through every tab.

    python benchmarks/bench_sessions.py [--write] [--sessions 2 4 8] [--ttl 2]

Prints, for each N: the wall time of the round, the time per tab switch over all sessions
(median, max), the server's peak RSS while they ran and its RSS after they closed (after the
disconnected-session TTL). One server for every round, warmed by one session first; each round
uploads traces no earlier round used. Needs chromium and playwright, as tests/test_browser_load.py.

`--write` also puts the rounds as a Markdown table in docs/generated/speed-sessions.md, which
docs/speed.md includes (with what each session's upload left in the server's memory: the RSS
after the round less the RSS before it, per session): the published numbers are the
benchmark's, never typed.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from browser_server import Server, rss_bytes, run_sessions, session_traces, settled_rss  # noqa: E402
from test_dashboard_browser import TABS, _browser_or_reason  # noqa: E402

MB = 1024 * 1024
GENERATED = Path(__file__).resolve().parent.parent / "docs" / "generated" / "speed-sessions.md"


def table(rows: list[dict], warm: float, when: str, cores: int | None, load: float | None = None, ttl: int = 2) -> str:
    """The Markdown of docs/generated/speed-sessions.md: one row per round (sessions, wall s, the
    tab switches' median and max s, the server's peak RSS and its RSS before the round and after
    it closed, in MiB, problems); what each session left in memory is computed here."""
    busy = f", load average {load:.1f} before the run" if load is not None else ""
    lines = [
        f"Measured by `benchmarks/bench_sessions.py` on {when}: {cores} cores{busy}. One server "
        f"(disconnected-session TTL {ttl} s) warmed by one session ({warm:.0f} MiB RSS after it); each round "
        "N browser sessions (one headless Chromium on the same machine, a context each) upload a different "
        "small trace at once and switch through every tab. RSS in MiB, settled after the sessions closed.",
        "",
        "| sessions | wall s | tab switch median s | tab switch max s | server peak RSS MiB | RSS before MiB | "
        "RSS after close MiB | kept per session MiB | problems |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['sessions']} | {r['wall']:.1f} | {r['median']:.2f} | {r['max']:.2f} | {r['peak']:.0f} | "
            f"{r['before']:.0f} | {r['after']:.0f} | {(r['after'] - r['before']) / r['sessions']:.1f} | {r['problems']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--ttl", type=int, default=2, help="server.disconnectedSessionTTL, seconds")
    parser.add_argument(
        "--write", action="store_true", help="also write docs/generated/speed-sessions.md (docs/speed.md includes it)"
    )
    args = parser.parse_args(argv)
    reason = _browser_or_reason()
    if reason:
        sys.exit(f"bench_sessions: {reason}")
    load = os.getloadavg()[0]
    when = datetime.now(timezone.utc).strftime("%d %B %Y, %H:%M UTC")
    rows = []
    print(
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory(prefix="attnscope-bench-sessions-") as tmp:
        folder = Path(tmp)
        traces = session_traces(folder, 1 + sum(args.sessions))
        options = ["--server.disconnectedSessionTTL", str(args.ttl)]
        with Server(folder / "store", folder / "streamlit.log", options=options) as server:
            warm = run_sessions(server.url, traces[:1], TABS)
            problems = warm["sessions"][0]["problems"]
            start_rss = settled_rss(server.pid, args.ttl + 4)
            print(
                f"server RSS after one warm-up session: {start_rss / MB:.0f} MB"
                + (f" (warm-up problems: {problems})" if problems else "")
            )
            print(
                f"{'sessions':>8} {'wall s':>7} {'switch median s':>16} {'switch max s':>13} {'peak RSS MB':>12} {'RSS after MB':>13} {'problems':>9}"
            )
            used = 1
            before = start_rss
            for n in args.sessions:
                uploads = traces[used : used + n]
                used += n
                result = run_sessions(server.url, uploads, TABS, rss_of=lambda: rss_bytes(server.pid))
                after = settled_rss(server.pid, args.ttl + 4)
                switches = [s for session in result["sessions"] for s in session["switches"].values()]
                problems = [p for session in result["sessions"] for p in session["problems"]]
                foreign = [
                    s["runs"]
                    for s, u in zip(result["sessions"], uploads)
                    if s["runs"] != [u.name.removesuffix(".json.gz")]
                ]
                print(
                    f"{n:>8} {result['wall_s']:>7.1f} {statistics.median(switches):>16.2f} {max(switches):>13.2f} "
                    f"{result['peak_rss'] / MB:>12.0f} {after / MB:>13.0f} {len(problems) + len(foreign):>9}"
                )
                for p in problems + [f"runs shown: {f}" for f in foreign]:
                    print(f"         problem: {p}")
                rows.append(
                    {
                        "sessions": n,
                        "wall": result["wall_s"],
                        "median": statistics.median(switches),
                        "max": max(switches),
                        "peak": result["peak_rss"] / MB,
                        "before": before / MB,
                        "after": after / MB,
                        "problems": len(problems) + len(foreign),
                    }
                )
                before = after
    if args.write:
        GENERATED.parent.mkdir(parents=True, exist_ok=True)
        GENERATED.write_text(table(rows, start_rss / MB, when, os.cpu_count(), load, args.ttl), encoding="utf-8")
        print(f"wrote {GENERATED}")


if __name__ == "__main__":
    main(sys.argv[1:])
