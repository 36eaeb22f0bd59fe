"""Each dashboard tab on a reopened trace: seconds to draw, in a fresh process per tab.

    python benchmarks/bench_tabs.py [TRACE]

With no TRACE: benchmarks/out/large1g.json. The dashboard is given the trace at start
($ATTNSCOPE_TRACES) and an empty store ($ATTNSCOPE_STORE). A first process draws the Overview (it
parses the trace, stores its tables and keeps its analyses); then, for each tab, a fresh process
imports the dashboard (not timed: the same for every trace) and draws that tab with Streamlit's
AppTest, timed: the reopen from the store and the tab's analyses (kept from the first draw, so
read back) and charts. Goal (issue #31): each
tab under 1 s on the reopened 1 GB trace. Printed as a table of seconds and the ratio to the goal.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GOAL_S = 1.0

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
tab = sys.argv[1]
from streamlit.testing.v1 import AppTest
import dashboard.app, dashboard.views  # imports: not timed
from dashboard.app import TABS
at = AppTest.from_file({app!r}, default_timeout=600)
at.query_params["tab"] = tab
t0 = time.perf_counter()
at.run()
seconds = time.perf_counter() - t0
errors = [e.value for e in at.exception] + [e.value for e in at.error if "could not be drawn" in e.value]
print(json.dumps({{"tab": tab, "seconds": seconds, "errors": errors, "tabs": list(TABS)}}))
"""


def draw(tab: str, env: dict[str, str]) -> dict:
    code = CHILD.format(root=str(ROOT), app=str(ROOT / "dashboard" / "app.py"))
    out = subprocess.run([sys.executable, "-c", code, tab], capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"tab {tab}: exit {out.returncode}\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> None:
    path = Path(argv[0]) if argv else HERE / "out" / "large1g.json"
    if not path.exists():
        sys.exit(f"{path}: no such trace (make it with benchmarks/make_large_trace.py)")
    store = Path(tempfile.mkdtemp(prefix="attnscope-bench-tabs-"))
    env = {**os.environ, "ATTNSCOPE_TRACES": str(path), "ATTNSCOPE_STORE": str(store)}
    try:
        first = draw("Overview", env)
        print(f"{path.name} ({path.stat().st_size / 1e6:.0f} MB): first open, Overview: {first['seconds']:.2f} s")
        print(f"{'tab':<16} {'reopened s':>10} {'/ goal':>7}  errors")
        for tab in first["tabs"]:
            row = draw(tab, env)
            print(f"{tab:<16} {row['seconds']:>10.2f} {row['seconds'] / GOAL_S:>7.2f}  {'; '.join(row['errors'])[:120]}")
    finally:
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
