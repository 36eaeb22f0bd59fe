"""The published speed numbers are the benchmarks': README's table and docs/speed.md's include are
the file benchmarks/bench_kept.py --write made, docs/speed.md includes every table a benchmark's
--write writes into docs/generated/ (and names no benchmark without its table), and each table
function states each ratio from the measurements it is given."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPEED = REPO / "docs" / "speed.md"
GENERATED = REPO / "docs" / "generated"


def _bench(name: str = "bench_kept"):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cells(text: str, first: str) -> list[str]:
    """The cells of the table row of `text` whose first cell is `first`."""
    line = next(x for x in text.splitlines() if x.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _writes(script: Path) -> set[str]:
    """The docs/generated/ files a benchmark's --write writes (named in its source; bench_load writes
    its table and the first open's phases)."""
    return set(re.findall(r'"(speed-[a-z-]+\.md)"', script.read_text(encoding="utf-8")))


def test_speed_md_includes_every_generated_table_and_names_no_benchmark_without_its_table():
    text = SPEED.read_text(encoding="utf-8")
    included = set(re.findall(r'^--8<-- "docs/generated/(speed-[a-z-]+\.md)"$', text, re.M))
    writers = {p.stem: _writes(p) for p in sorted((REPO / "benchmarks").glob("bench_*.py"))}
    written = set().union(*writers.values())
    assert {"speed-upload.md", "speed-arrival.md", "speed-sessions.md", "speed-ranks.md"} <= written
    # every table a benchmark wrote, and every table a benchmark writes, is included
    existing = {p.name for p in GENERATED.glob("speed-*.md")}
    assert not existing - included, f"docs/generated/ files docs/speed.md does not include: {existing - included}"
    assert not written - included, f"benchmarks' tables docs/speed.md does not include: {written - included}"
    # and what it includes, a benchmark writes (none typed by hand)
    assert included <= written, f"included but written by no benchmark: {included - written}"
    # Past the list of benchmarks in "How they are measured", a benchmark is named only beside its table.
    how = re.search(r"^## How they are measured\n.*?(?=^## )", text, re.M | re.S).group(0)
    named = set(re.findall(r"\b(bench_[a-z0-9_]+?)(?:\.py)?\b", text.replace(how, "")))
    assert {"bench_upload", "bench_arrival", "bench_sessions", "bench_ranks"} <= named
    lacking = sorted(name for name in named if not writers.get(name, set()) & included)
    assert not lacking, f"docs/speed.md quotes benchmarks that write no table it includes: {lacking}"


def test_the_readme_table_is_the_file_the_benchmark_wrote_and_the_docs_include_it():
    bench = _bench()
    generated = (REPO / "docs" / "generated" / "speed-kept.md").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(re.escape(bench.MARKS[0]) + r"\n(.*?)" + re.escape(bench.MARKS[1]), readme, re.S)
    assert block and block.group(1) == generated
    assert '--8<-- "docs/generated/speed-kept.md"' in (REPO / "docs" / "speed.md").read_text(encoding="utf-8")
    # the 1 GB row is there, with its byte-identical outputs
    row = next(line for line in generated.splitlines() if line.startswith("| large1g.json"))
    assert row.rstrip().endswith("| yes |")


def test_the_table_states_each_ratio_from_its_measurements():
    bench = _bench()
    row = {
        "trace": "t.json",
        "mb": 200.0,
        "no_store": 2.0,
        "first": 2.1,
        "second": 0.05,
        "json_load": 5.0,
        "identical": True,
        "peak_ratio": 0.8,
        "mb_s": 100.0,
    }
    text = bench.table([row], {"help": 0.061, "small": 0.349}, "a day")
    line = next(x for x in text.splitlines() if x.startswith("| t.json"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # 2.1 / 2.0 = 1.05; 2.1 / 0.05 = 42
    assert cells == ["t.json", "200", "2.00", "2.10", "1.05", "0.05", "42x", "100", "0.80", "5.0", "yes"]
    assert "`attnscope --help` 0.06 s" in text and "0.35 s [< 0.5]" in text


def test_the_upload_table_states_each_ratio_from_its_measurements():
    bench = _bench("bench_upload")
    rows = [
        {
            "trace": "big.json.gz",
            "gz": True,
            "file_mb": 100.0,
            "json_mb": 1000.0,
            "transfer": 3.0,
            "first_table": 7.3,
            "switches": {"Kernels": 0.5, "Copies": 0.9, "Overview": 0.3},
            "rss_before": 250.0,
            "peak": 900.0,
            "rss_open": 600.0,
            "rss_closed": 300.0,
            "problems": 0,
        },
        {
            "trace": "big.json",
            "gz": False,
            "file_mb": 910.0,
            "json_mb": 910.0,
            "transfer": None,
            "first_table": 9.1,
            "switches": {"Overview": 0.8, "Ranks": 0.6},
            "rss_before": 260.0,
            "peak": 819.0,
            "rss_open": 610.0,
            "rss_closed": 310.0,
            "problems": 2,
        },
    ]
    text = bench.table(rows, "a day", 2, 1.5)
    # median of 0.5, 0.9, 0.3 = 0.5, the slowest Copies 0.9; peak 900 / JSON 1000 = 0.90
    assert _cells(text, "big.json.gz") == [
        *["big.json.gz", "as .json.gz", "100", "1000", "3.0", "7.3", "0.50", "0.90", "Copies"],
        *["250", "900", "0.90", "600", "300", "0"],
    ]
    # no transfer time seen: "?"; median of 0.8, 0.6 = 0.7; 819 / 910 = 0.90
    assert _cells(text, "big.json") == [
        *["big.json", "plain JSON", "910", "910", "?", "9.1", "0.70", "0.80", "Overview"],
        *["260", "819", "0.90", "610", "310", "2"],
    ]
    assert "`benchmarks/bench_upload.py` on a day: 2 cores, load average 1.5" in text
    assert "first table s [< 10]" in text and "slowest tab switch s [< 2]" in text and "peak / JSON [< 2]" in text


def test_the_arrival_table_states_each_ratio_from_its_measurements():
    bench = _bench("bench_arrival")
    row = {
        "trace": "big.json",
        "mb": 910.0,
        "rate": 110.0,
        "transfer": 8.3,
        "early_after": 2.4,
        "after_after": 4.8,
        "early_total": 10.5,
        "after_total": 14.0,
    }
    text = bench.table([row], "a day", 2, 0.5, repeat=3)
    # 2.4 / 4.8 = 0.5; 10.5 / 14 = 0.75
    assert _cells(text, "big.json") == [
        "big.json",
        "910",
        "110",
        "8.30",
        "2.40",
        "4.80",
        "0.50",
        "10.50",
        "14.00",
        "0.75",
    ]
    assert "`benchmarks/bench_arrival.py` on a day: 2 cores, load average 0.5" in text
    assert "the median of 3 fresh processes per mode" in text


def test_the_sessions_table_states_what_each_session_kept_from_its_measurements():
    bench = _bench("bench_sessions")
    rows = [
        {"sessions": 2, "wall": 34.4, "median": 1.68, "max": 5.07, "peak": 270.0, "before": 261.0, "after": 269.0},
        {"sessions": 8, "wall": 76.5, "median": 3.48, "max": 13.9, "peak": 302.0, "before": 280.0, "after": 300.0},
    ]
    rows = [dict(r, problems=0) for r in rows]
    text = bench.table(rows, 261.0, "a day", 2, 4.0, ttl=2)
    # (269 - 261) / 2 = 4.0; (300 - 280) / 8 = 2.5
    assert _cells(text, "2") == ["2", "34.4", "1.68", "5.07", "270", "261", "269", "4.0", "0"]
    assert _cells(text, "8") == ["8", "76.5", "3.48", "13.90", "302", "280", "300", "2.5", "0"]
    assert "warmed by one session (261 MiB RSS after it)" in text and "load average 4.0" in text


def test_the_ranks_table_states_each_ratio_from_its_measurements():
    bench = _bench("bench_ranks")
    common = {"events": 68692, "steps": 5, "gz_mb": 1.49, "open_parses": 4, "reopen_parses": 0}
    rows = [
        dict(common, ranks=4, load=1.2, first=0.05, again=0.002, analyses=0.009, open=2.4, reopen=0.3)
        | {"app_first": 7.3, "app_ranks": 0.52, "app_again": 0.21},
        dict(common, ranks=32, load=9.6, first=0.3, again=0.005, analyses=0.015, open=19.2, reopen=0.8)
        | {"open_parses": 32, "app_first": 19.3, "app_ranks": 2.5, "app_again": 1.1},
    ]
    text = bench.table(rows, "tests/data/v100.json.gz", "a day", 2, 4.5)
    assert "\n| | 4 ranks | 32 ranks |\n|---|---:|---:|\n" in text
    # 0.05 / 0.002 = 25; 0.3 / 0.005 = 60
    assert _cells(text, "engine: per-rank step times, first / again (ratio)")[1:] == [
        "0.050 s / 0.002 s (25x)",
        "0.300 s / 0.005 s (60x)",
    ]
    assert _cells(text, "engine: every rank's file read (`load_trace`), one job")[1:] == ["1.20 s", "9.60 s"]
    # first open / reopen: 2.4 / 0.3 = 8; 19.2 / 0.8 = 24
    assert _cells(text, "store: the job reopened by a fresh process (files parsed; first open / reopen)")[1:] == [
        "0.30 s (0 parsed; 8x)",
        "0.80 s (0 parsed; 24x)",
    ]
    assert _cells(text, "store: first open of one job by a fresh process (hash, parse, store written; files parsed)")[
        1:
    ] == ["2.40 s (4 parsed)", "19.20 s (32 parsed)"]
    # two jobs of each size: 8 and 64 files
    assert _cells(text, "dashboard: first open (both jobs, with the bundled samples; Overview drawn)")[1:] == [
        "7.3 s (8 files)",
        "19.3 s (64 files)",
    ]
    assert _cells(text, "dashboard: Ranks tab drawn again (cached)")[1:] == ["0.21 s", "1.10 s"]
    assert "`tests/data/v100.json.gz`" in text and "68.7k events, 5 steps, 1.5 MB gzip" in text
    assert "load average 4.5" in text
