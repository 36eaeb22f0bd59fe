"""The end-of-run table: what each written trace says about itself, read back through the engine.

Per run: variant, the attention backend detected from its own trace, median step time in ms as
the dashboard measures it (dashboard.engine.compare.speed.step_time: device busy time on GPU traces, the
ProfilerStep CPU span on CPU-only ones), units of work per step (kernels + GPU memcpy + memset on
a GPU, leaf cpu_ops on a CPU; the median over steps), copies per step (how many hidden), parity.
"""

from __future__ import annotations

from pathlib import Path

from collectors.manifest import Manifest, Run

HEADER = ("variant", "backend", "step ms", "work/step", "copies/step", "parity")
STEP_COLUMN = 2
TIME_WORDS = {"device busy": "device busy", "step span": "CPU step span"}


def summarize_run(folder: Path, run: Run) -> tuple[tuple[str, ...], str]:
    """Read one run's trace through dashboard.engine and format its row with the numbers the
    dashboard shows for it; also say which time the step column holds ('device busy' or 'CPU
    step span')."""
    import polars as pl

    from dashboard.engine import load_trace
    from dashboard.engine.analyses.backends import detect_backends
    from dashboard.engine.analyses.copies import copies
    from dashboard.engine.analyses.kernels import per_step, work_unit
    from dashboard.engine.compare.speed import step_time

    trace = load_trace(folder / run.trace)
    time = step_time(trace)
    n_steps = trace.steps.height
    steps = per_step(trace)
    work = steps["work"].median() if steps.height else None
    unit = "kernels" if work_unit(trace) == "kernel" else "leaf ops"
    found = copies(trace).filter(pl.col("step").is_not_null())
    per = (lambda count: count / n_steps) if n_steps else (lambda count: float("nan"))
    backends = "+".join(detect_backends(trace).backends) or "?"
    parity = run.parity
    verdict = "ok" if parity["passed"] else "FAIL"
    label = run_label(run.variant, run.compiled, run.cuda_graphs)
    row = (
        label,
        backends,
        f"{time.median_us / 1000.0:.3f}",
        f"{_count(work)} {unit}",
        f"{_count(per(found.height))} ({_count(per(int(found['hidden'].sum())))} hidden)",
        f"{verdict} (max abs {_num(parity['max_abs'])})",
    )
    return row, TIME_WORDS.get(time.source, time.source)


def run_label(variant: str, compiled: bool, cuda_graphs: bool) -> str:
    """How the collector's log names a run: 'naive', 'naive (compiled)', 'naive (CUDA graphs)'."""
    return f"{variant} (CUDA graphs)" if cuda_graphs else f"{variant} (compiled)" if compiled else variant


def render(manifest: Manifest, folder: Path) -> str:
    """The table for every run in the manifest, then one line per skip. The step column says
    which time it holds (median over steps): in its header when every run uses the same, else
    in each cell."""
    rows: list[tuple[str, ...]] = []
    sources: list[str | None] = []
    for run in manifest.runs:
        try:
            row, source = summarize_run(folder, run)
        except Exception as exc:  # the table must not hide the collection it reports on
            row, source = (run.variant, f"unreadable: {type(exc).__name__}: {exc}", "", "", "", ""), None
        rows.append(row)
        sources.append(source)
    known = {s for s in sources if s is not None}
    header = list(HEADER)
    if len(known) == 1:
        header[STEP_COLUMN] = f"step ms (median, {known.pop()})"
    elif known:
        header[STEP_COLUMN] = "step ms (median)"
        rows = [
            r[:STEP_COLUMN] + (f"{r[STEP_COLUMN]} ({s})",) + r[STEP_COLUMN + 1 :] if s else r
            for r, s in zip(rows, sources)
        ]
    rows.insert(0, tuple(header))
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for skip in manifest.skipped:
        lines.append(f"skipped {run_label(skip.variant, skip.compiled, skip.cuda_graphs)}: {skip.reason}")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2g}"


def _count(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{value:g}"
