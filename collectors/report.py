"""The end-of-run table: what each written trace says about itself, read back through the engine.

Per run: variant, the attention backend detected from its own trace, median step time (ms, the
ProfilerStep CPU span; on CUDA each step ends with a device synchronize), units of device work per
step (kernels on a GPU, leaf cpu_ops on a CPU), copies per step (how many hidden), parity.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from collectors.manifest import Manifest, Run

HEADER = ("variant", "backend", "step ms", "work/step", "copies/step", "parity")


def summarize_run(folder: Path, run: Run) -> tuple[str, ...]:
    """Read one run's trace through dashboard.engine and format its row."""
    from dashboard.engine import load_trace, summarize

    summary = summarize(load_trace(folder / run.trace))
    steps = summary["steps"]
    n_steps = max(len(steps), 1)
    step_ms = statistics.median(s["dur_us"] for s in steps) / 1000.0 if steps else float("nan")
    work = statistics.median(s["work"] for s in steps) if steps else 0
    unit = "kernels" if summary["work_unit"] == "kernel" else "leaf ops"
    copies = sum(c["count"] for c in summary["copies"]) / n_steps
    hidden = sum(c["count"] for c in summary["copies"] if c["hidden"]) / n_steps
    backends = "+".join(summary["attention"]["backends"]) or "?"
    parity = run.parity
    verdict = "ok" if parity["passed"] else "FAIL"
    label = f"{run.variant} (compiled)" if run.compiled else run.variant
    return (
        label,
        backends,
        f"{step_ms:.3f}",
        f"{work:g} {unit}",
        f"{copies:g} ({hidden:g} hidden)",
        f"{verdict} (max abs {_num(parity['max_abs'])})",
    )


def render(manifest: Manifest, folder: Path) -> str:
    """The table for every run in the manifest, then one line per skip."""
    rows = [HEADER]
    for run in manifest.runs:
        try:
            rows.append(summarize_run(folder, run))
        except Exception as exc:  # the table must not hide the collection it reports on
            rows.append((run.variant, f"unreadable: {type(exc).__name__}: {exc}", "", "", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for skip in manifest.skipped:
        lines.append(f"skipped {skip.variant}{' (compiled)' if skip.compiled else ''}: {skip.reason}")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2g}"
