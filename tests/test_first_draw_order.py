"""The first page's sidebar sends its rename table before the run picker above it (app.pick_runs:
the browser loads the grid's code early) without moving anything: the sidebar reads top to bottom
as the docs describe it (docs/dashboard.md). And the server maps its modules for inspect at its
start (the `else` branch of dashboard/app.py), so the first element of its first script run does
not walk every loaded module.

Oracles: the layout as written by hand here, the runs each bundled manifest lists, and the number
of files os.path.realpath is asked about (inspect's walk resolves one per module it maps).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboard" / "app.py"
SAMPLES = REPO / "sample_traces"


def walk(node) -> list:
    """Every element under `node`, in the order the page shows them (depth first)."""
    found = []
    for child in getattr(node, "children", {}).values():
        found.append(child)
        found.extend(walk(child))
    return found


def marker(element) -> str | None:
    """What a reader of the sidebar sees of the elements this test follows, else None."""
    kind = element.type
    if kind in ("multiselect", "selectbox", "toggle", "button", "download_button"):
        return f"{kind}: {element.label}"
    if kind == "expander":
        return f"expander: {element.label}"
    if kind == "dataframe":
        return "table"
    if kind in ("header", "subheader"):
        return f"{kind}: {element.value}"
    return None


def test_the_sidebar_reads_as_before_with_the_rename_table_under_the_picker(monkeypatch):
    monkeypatch.delenv("ATTNSCOPE_TRACES", raising=False)
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception
    seen = [m for m in map(marker, walk(at.sidebar)) if m is not None]
    sets = [json.loads(p.read_text())["collection"] for p in sorted(SAMPLES.glob("*/runs.json"))]
    buttons = [m for m in seen if m.startswith("button: ") and any(m.startswith(f"button: {s} · ") for s in sets)]
    assert len(buttons) >= 4  # cpu, gpu-public, h200, ranks-cpu
    top = seen[: seen.index("download_button: Markdown summary (for a PR comment)") + 1]
    assert top == [
        "header: Runs",
        *buttons,
        "toggle: Compiled and CUDA-graph runs too",
        "multiselect: Compare",
        "selectbox: Baseline",
        "expander: Rename runs",
        "table",
        "subheader: Share",
        "download_button: HTML report (works offline)",
        "download_button: Markdown summary (for a PR comment)",
    ]
    editor = at.get_by_key("label_editor_0")  # the rename table: one row per run on offer
    assert len(editor.value) == len(at.multiselect(key="sel_runs").options)


def test_the_server_start_maps_the_modules_for_inspect():
    """Imported as `streamlit run` imports it (a module, not the page's script), app.py leaves
    inspect's module map whole: inspect.stack() from a new thread then resolves next to no files,
    where without that import it resolves one per loaded module."""
    probe = textwrap.dedent(
        """
        import importlib.util, inspect, os.path, sys, threading
        if sys.argv[1] == "app":
            spec = importlib.util.spec_from_file_location("attnscope_app", sys.argv[2])
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        else:
            import dashboard.views.overview, streamlit  # most of what the app loads, without its start
        resolved, real = [], os.path.realpath
        os.path.realpath = lambda path, *a, **k: resolved.append(path) or real(path, *a, **k)
        thread = threading.Thread(target=inspect.stack)
        thread.start(); thread.join()
        print(len(resolved), len(sys.modules))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(mode: str) -> tuple[int, int]:
        out = subprocess.run(
            [sys.executable, "-c", probe, mode, str(APP)], env=env, cwd=REPO, capture_output=True, text=True, check=True
        )
        resolved, modules = out.stdout.split()
        return int(resolved), int(modules)

    cold, cold_modules = run("views")
    warm, warm_modules = run("app")
    assert cold > cold_modules // 2  # the walk without the start's mapping: a file per module
    assert warm < 50 < warm_modules  # after it: only what the thread's frames name anew
