"""The published speed numbers are the benchmark's: README's table and docs/speed.md's include are
the file benchmarks/bench_kept.py --write made, and its table says what its rows measured."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _bench():
    spec = importlib.util.spec_from_file_location("bench_kept", REPO / "benchmarks" / "bench_kept.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
