"""`attnscope check --markdown`'s times: the median step time (and each kernel family's) in ms, or
in us when every time is under 1 ms, with the unit in the column headers; every number against
a hand computation from the trace's JSON."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

from dashboard import cli

ROOT = Path(__file__).resolve().parents[1]
H200, CPU = ROOT / "sample_traces" / "h200", ROOT / "sample_traces" / "cpu"
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
# the families of the H200 naive traces' device work, by name (cuBLAS's nvjet kernels are GEMMs)
FAMILY_OF = {
    "nvjet": "gemm",
    "softmax": "softmax",
    "elementwise_kernel": "elementwise",
    "Memset": "memset",
    "Memcpy": "copy",
}


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def _steps(events: list[dict]) -> list[tuple[float, float]]:
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#"))


def _device_by_step(events: list[dict]) -> list[list[dict]]:
    """Each step's device events: those whose launch call (same correlation) starts in the step;
    one without a launch in the trace by its own start."""
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    when = lambda e: launch.get(e["args"].get("correlation"), e["ts"])  # noqa: E731
    return [[e for e in events if e.get("cat") in DEVICE and a <= when(e) < b] for a, b in _steps(events)]


def _busy_us(device: list[dict]) -> float:
    """The union of the events' intervals, µs."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted((e["ts"], e["ts"] + e["dur"]) for e in device):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _tables(md: str) -> list[list[list[str]]]:
    """Every Markdown table: its rows (header first, the |---| line left out) as lists of cells."""
    tables, rows = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            if not set(line) <= set("|-"):
                rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _markdown(base: Path, candidate: Path, out: Path) -> str:
    cli.main(["check", "--no-store", str(base), str(candidate), "--markdown", str(out)])
    return out.read_text()


def test_the_h200_pair_reads_in_ms_busy_time_and_families_by_hand(tmp_path):
    base, cand = H200 / "naive.json.gz", H200 / "naive_inplace.json.gz"
    md = _markdown(base, cand, tmp_path / "check.md")
    [times, rules] = _tables(md)
    assert times[0] == ["median per step", "baseline (ms)", "candidate (ms)", "ratio", "95% interval", "verdict"]
    sides = [_device_by_step(_events(p)) for p in (base, cand)]
    busy = [statistics.median(_busy_us(step) for step in side) for side in sides]
    assert busy[0] > 1000 > busy[1]  # 1.065 ms against 0.937 ms: the table is in ms for both
    rows = {row[0]: row for row in times[1:]}
    assert rows["step time"][1:3] == [f"{busy[0] / 1e3:.3f}", f"{busy[1] / 1e3:.3f}"] == ["1.065", "0.937"]
    assert rows["step time"][3] == f"x{statistics.median(_busy_us(s) for s in sides[1]) / busy[0]:.3f}"

    def family_us(side: list[list[dict]], family: str) -> float:
        return statistics.median(
            sum(e["dur"] for e in step if next(f for k, f in FAMILY_OF.items() if k in e["name"]) == family)
            for step in side
        )

    both = sorted(
        set.intersection(
            *(
                {next(f for k, f in FAMILY_OF.items() if k in e["name"]) for step in side for e in step}
                for side in sides
            )
        )
    )
    assert [row[0] for row in times[2:]] == [f"kernel family: {family}" for family in both]
    for family in both:
        assert rows[f"kernel family: {family}"][1:3] == [f"{family_us(side, family) / 1e3:.3f}" for side in sides], (
            family
        )
    # the rules table's step_time cells: the same numbers, the unit beside them
    step_time = next(row for row in rules if row[0] == "step_time")
    assert step_time[2:4] == ["1.065 ms", "0.937 ms"]
    assert "e+0" not in md  # no ns left in scientific notation


def test_the_cpu_pair_reads_step_spans_in_ms(tmp_path):
    base, cand = CPU / "naive.json.gz", CPU / "naive_inplace.json.gz"
    md = _markdown(base, cand, tmp_path / "check.md")
    [times, rules] = _tables(md)
    spans = [statistics.median(b - a for a, b in _steps(_events(p))) for p in (base, cand)]  # µs
    assert times[0][1:3] == ["baseline (ms)", "candidate (ms)"]
    assert times[1][:3] == ["step time", f"{spans[0] / 1e3:,.3f}", f"{spans[1] / 1e3:,.3f}"]
    assert next(row for row in rules if row[0] == "step_time")[2:4] == [
        f"{spans[0] / 1e3:,.3f} ms",
        f"{spans[1] / 1e3:,.3f} ms",
    ]


def _cpu_trace(path: Path, spans_us: list[int], op_us: int) -> Path:
    """A CPU-only trace of len(spans_us) steps, each holding one aten::mm of op_us."""
    events = []
    for i, span in enumerate(spans_us):
        start = 1000 * i
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i + 2}",
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": span,
            }
        )
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": start + 10, "dur": op_us}
        )
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_steps_under_a_millisecond_read_in_us_and_the_interval_by_hand(tmp_path):
    base = _cpu_trace(tmp_path / "base.json", [400, 420, 410], 300)
    cand = _cpu_trace(tmp_path / "cand.json", [380, 390, 385], 300)
    md = _markdown(base, cand, tmp_path / "check.md")
    [times, rules] = _tables(md)
    assert times[0][1:3] == ["baseline (us)", "candidate (us)"]
    # three steps a run: the 95% interval is [min(c) / max(b), max(c) / min(b)]
    assert times[1] == [
        "step time",
        "410.0",
        "385.0",
        f"x{385 / 410:.3f}",
        f"[{380 / 420:.3f}, {390 / 400:.3f}]",
        "improvement",
    ]
    assert [row[1:3] for row in times[2:]] == [["300.0", "300.0"]]  # the one op's family, its time per step
    assert next(row for row in rules if row[0] == "step_time")[2:4] == ["410.0 us", "385.0 us"]
    assert "\n\n\n" not in md  # one blank line between blocks, also without failures or warnings
