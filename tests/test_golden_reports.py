"""The reports and the CI gate's verdicts, stored: `attnscope compare --markdown/--json` and
`attnscope check --markdown/--json` on fixed pairs of committed traces (the article's comparisons
on the bundled H200 and CPU runs, HTA's cross-device pair, two unrelated serving traces). A change
in any line a reviewer reads shows up as a diff of tests/data/golden/reports/, as the stored
summaries do for `summary --json` (tests/test_golden_summaries.py). To accept a change on purpose:

    ATTNSCOPE_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_reports.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dashboard import cli

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "data" / "golden" / "reports"
UPDATE = os.environ.get("ATTNSCOPE_UPDATE_GOLDEN") == "1"

H200 = "sample_traces/h200"
CPU = "sample_traces/cpu"
DATA = "tests/data"
COMPARES = {
    "h200-article": [f"{H200}/naive.json.gz", f"{H200}/naive_inplace.json.gz", f"{H200}/sdpa.json.gz"],
    "h200-modes": [f"{H200}/sdpa.json.gz", f"{H200}/sdpa.compiled.json.gz", f"{H200}/sdpa.graphs.json.gz"],
    "cpu-article": [f"{CPU}/naive.json.gz", f"{CPU}/naive_inplace.json.gz", f"{CPU}/sdpa-math.json.gz"],
    "hta-cross-device": [f"{DATA}/hta_a100_control.json.gz", f"{DATA}/hta_v100_test.json.gz"],
    "unrelated-serving": [
        f"{DATA}/tracelens_vllm_decode_graph_unified_attention.json.gz",
        f"{DATA}/tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz",
    ],
}
CHECKS = {
    "h200-naive-sdpa": [f"{H200}/naive.json.gz", f"{H200}/sdpa.json.gz"],
    "h200-sdpa-naive": [f"{H200}/sdpa.json.gz", f"{H200}/naive.json.gz"],
    "cpu-naive-inplace": [f"{CPU}/naive.json.gz", f"{CPU}/naive_inplace.json.gz"],
    "hta-cross-device": [f"{DATA}/hta_a100_control.json.gz", f"{DATA}/hta_v100_test.json.gz"],
    "unrelated-serving": [
        f"{DATA}/tracelens_vllm_decode_graph_unified_attention.json.gz",
        f"{DATA}/tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz",
    ],
}
EXITS = {
    # sdpa drops naive's masked_fill copy and kernels, adds none: holds
    "h200-naive-sdpa": cli.EXIT_OK,
    # naive adds the 268 MB DtoD clone of masked_fill (a hidden copy past the alarm) and 5 kernels a step
    "h200-sdpa-naive": cli.EXIT_FAILED,
    # masked_fill_ drops the clone and its copy_ (CPU trace): holds
    "cpu-naive-inplace": cli.EXIT_OK,
    # an A100 against a V100 (deviceProperties): not comparable
    "hta-cross-device": cli.EXIT_BAD_INPUT,
    # a vLLM decode server against an SGLang prefill-decode run on another device: not comparable
    "unrelated-serving": cli.EXIT_BAD_INPUT,
}


def _run(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """The files `argv` writes (--markdown, --json into `out`), its printed text and exit status,
    run from the repository with relative paths (no machine's path in the output)."""
    cwd = Path.cwd()
    os.chdir(REPO)
    try:
        rc = cli.main([*argv, "--no-store", "--markdown", str(out / "report.md"), "--json", str(out / "report.json")])
    finally:
        os.chdir(cwd)
    printed = capsys.readouterr()
    written = {
        suffix: (out / f"report.{suffix}").read_text()
        for suffix in ("md", "json")
        if (out / f"report.{suffix}").exists()  # a pair the gate calls not comparable writes no report
    }
    return {"exit": f"{rc}\n", **written, "txt": printed.out + (printed.err if rc == cli.EXIT_BAD_INPUT else "")}


def _hold(name: str, got: dict[str, str]) -> None:
    for suffix, text in got.items():
        stored = GOLDEN / f"{name}.{suffix}"
        if UPDATE:
            GOLDEN.mkdir(parents=True, exist_ok=True)
            stored.write_text(text)
            continue
        assert stored.exists(), (
            f"nothing stored for {name}: run ATTNSCOPE_UPDATE_GOLDEN=1 python -m pytest {Path(__file__).name}"
        )
        assert text == stored.read_text(), (
            f"{name}.{suffix} changed; if on purpose, run ATTNSCOPE_UPDATE_GOLDEN=1 python -m pytest "
            f"tests/test_golden_reports.py and review the diff of {stored.relative_to(REPO)}"
        )


@pytest.mark.parametrize("name", sorted(COMPARES))
def test_the_comparison_reads_as_stored(name, tmp_path, capsys):
    got = _run(["compare", *COMPARES[name]], tmp_path, capsys)
    assert got["exit"] == f"{cli.EXIT_OK}\n"
    _hold(f"compare-{name}", got)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_gates_verdict_reads_as_stored(name, tmp_path, capsys):
    got = _run(["check", *CHECKS[name]], tmp_path, capsys)
    assert got["exit"] == f"{EXITS[name]}\n", got  # asserted, not only stored
    _hold(f"check-{name}", got)


def test_every_stored_report_is_one_of_these_cases():
    names = {f"compare-{n}" for n in COMPARES} | {f"check-{n}" for n in CHECKS}
    if not UPDATE:
        stale = sorted({p.name.split(".")[0] for p in GOLDEN.iterdir()} - names)
        assert stale == [], f"stored reports of cases no longer run: {stale}"
