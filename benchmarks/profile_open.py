"""Where a first open's time goes: `attnscope summary --json TRACE` into a fresh store, in this
process, each phase timed with time.perf_counter around the engine's own functions.

    python benchmarks/profile_open.py TRACE

Prints one JSON object: seconds per phase (the process's start and imports, the slices read by
the workers, the frames built, the nesting walk, launches and steps, memory and flows, each
analysis's own time within the summary, the wait for the store's writer at the end) and, beside
them, the writer thread's own seconds (hashing the file, the tables written as Parquet), which
overlap the analyses. bench_load.py --profile runs it in a fresh process per trace.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the imports: the process's own start is measured outside

import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

spent: dict[str, float] = {}
marks: dict[str, float] = {}


def add(phase: str, seconds: float) -> None:
    spent[phase] = spent.get(phase, 0.0) + seconds


def timed(module, name: str, phase: str) -> None:
    """Time every call of module.name (as the callers in that module see it) under `phase`."""
    inner = getattr(module, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            add(phase, time.perf_counter() - t0)

    setattr(module, name, wrapper)


_stack: list[list[float]] = []  # [start, seconds spent in nested analyses] per running analysis


def exclusive(key: str, analysis):
    """`analysis` timed by its own time only: the analyses it asks for are counted as theirs."""

    def wrapper(trace):
        _stack.append([time.perf_counter(), 0.0])
        try:
            return analysis(trace)
        finally:
            start, nested = _stack.pop()
            total = time.perf_counter() - start
            add("analysis " + key.removeprefix("dashboard.engine."), total - nested)
            if _stack:
                _stack[-1][1] += total

    return wrapper


def instrument() -> None:
    from dashboard.engine.analyses import summary  # noqa: F401  every analysis the summary asks for
    from dashboard.engine.load import frames, slices
    from dashboard.engine.model.trace import ANALYSES
    from dashboard.engine.store import hashing, store

    for key, cached in ANALYSES.items():  # per_trace's wrapper calls the analysis held in its closure
        for cell in cached.__closure__ or ():
            if callable(cell.cell_contents) and getattr(cell.cell_contents, "__name__", "") == cached.__name__:
                cell.cell_contents = exclusive(key, cell.cell_contents)
    load_sliced = slices._load_sliced

    def sliced(*args, **kwargs):
        marks["load"] = time.perf_counter()
        return load_sliced(*args, **kwargs)

    slices._load_sliced = sliced
    build = frames._build_trace

    def built(*args, **kwargs):
        marks["scanned"] = time.perf_counter()
        t0 = time.perf_counter()
        try:
            return build(*args, **kwargs)
        finally:
            add("tables built (total)", time.perf_counter() - t0)

    frames._build_trace = built
    for name, phase in (
        ("_events_frame", "frames: parts joined, times checked"),
        ("_normalize", "frames: sorted, normalized"),
        ("classify_device_events", "frames: device events classified"),
        ("nesting", "nesting walk"),
        ("_link_launches", "launches linked"),
        ("find_steps", "steps found and assigned"),
        ("assign_steps", "steps found and assigned"),
        ("memory_table", "memory table"),
    ):
        timed(frames, name, phase)
    timed(hashing.Hashing, "_run", "hash thread: file hashed")  # till the file is hashed, by it or the writer
    timed(store.Store, "put", "writer thread: tables stored (Parquet)")
    timed(store.Store, "wait", "store writer waited for")


def main() -> None:
    path = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="attnscope-profile-")
    os.environ["ATTNSCOPE_STORE"] = tmp
    try:
        from dashboard.cli import main as cli
        from dashboard.cli.files import KEEP_FREED_PAGES_BYTES

        if os.path.getsize(path) >= KEEP_FREED_PAGES_BYTES:  # as the CLI does, before instrument() imports polars
            from dashboard import keep_freed_pages

            keep_freed_pages()
        imported = time.perf_counter()
        instrument()
        out = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out):
            try:
                cli(["summary", "--json", path])
            except SystemExit as stop:
                if stop.code:
                    raise
        end = time.perf_counter()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    analyses = sum(v for k, v in spent.items() if k.startswith("analysis "))
    phases = {
        "imports": imported - STARTED,
        "slices read by the workers (scan)": marks.get("scanned", t0) - marks.get("load", t0),
        **spent,
        "analyses (total)": analyses,
        "command": end - t0,
    }
    print(json.dumps(phases))


if __name__ == "__main__":
    main()
