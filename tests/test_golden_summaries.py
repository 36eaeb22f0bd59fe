"""Every committed trace's `attnscope summary --json`, stored: a change in any reading shows up in
review as a diff of tests/data/golden/, even where no oracle covers that reading.

Where an oracle does cover a field (tests/oracle.py: step spans, busy time, device work per step,
idle gaps, collectives, overlaps, family times, memory, attention time), the oracle is the truth,
not the stored summary: a summary that disagrees with it is never written, and a stored one that
disagrees with it fails when read (agrees_with_the_oracles, in both places).

To accept a change on purpose, rewrite the stored summaries and review their diff:

    ATTNSCOPE_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_summaries.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import oracle
from dashboard import cli

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
BUNDLED = REPO / "sample_traces"
GOLDEN = DATA / "golden"
UPDATE = os.environ.get("ATTNSCOPE_UPDATE_GOLDEN") == "1"

TRACES = sorted(DATA.glob("*.json.gz")) + sorted(BUNDLED.glob("*/*.json.gz"))


def golden_name(trace: Path) -> str:
    """tests/data/NAME.json.gz -> NAME.json; sample_traces/COLLECTION/NAME.json.gz ->
    COLLECTION__NAME.json (bundled collections share file names)."""
    stem = trace.name.removesuffix(".json.gz")
    if trace.parent == DATA:
        return f"{stem}.json"
    return f"{trace.parent.name}__{stem}.json"


def summary_json(trace: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """What `attnscope summary --json --no-store PATH` prints, PATH relative to the repository."""
    cwd = Path.cwd()
    os.chdir(REPO)
    try:
        rc = cli.main(["summary", "--json", "--no-store", str(trace.relative_to(REPO))])
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert rc == cli.EXIT_OK, f"summary of {trace.name} exited {rc}"
    return out


def agrees_with_the_oracles(trace: Path, text: str, what: str) -> None:
    """Every field of a `summary --json` text that the json-module oracles cover equals the oracle's
    reading of `trace` (oracle.summary_disagreements); `what` names the text in the failure."""
    (summary,) = json.loads(text)
    bad = oracle.summary_disagreements(summary, trace)
    assert bad == [], f"{what} of {trace.relative_to(REPO)} disagrees with tests/oracle.py:\n  " + "\n  ".join(bad)


def test_every_committed_trace_has_a_stored_summary():
    names = [golden_name(t) for t in TRACES]
    assert len(set(names)) == len(names)
    if not UPDATE:
        stale = sorted({p.name for p in GOLDEN.glob("*.json")} - set(names))
        assert stale == [], f"stored summaries of traces no longer committed: {stale}"


@pytest.mark.parametrize("trace", TRACES, ids=golden_name)
def test_the_summary_reads_as_stored(trace, capsys):
    got = summary_json(trace, capsys)
    json.loads(got)  # the CLI printed one JSON document
    stored = GOLDEN / golden_name(trace)
    if UPDATE:
        agrees_with_the_oracles(trace, got, "the summary to be stored")  # a wrong number never becomes the golden
        GOLDEN.mkdir(exist_ok=True)
        stored.write_text(got)
        return
    assert stored.exists(), (
        f"no stored summary for {trace.name}: run ATTNSCOPE_UPDATE_GOLDEN=1 python -m pytest {Path(__file__).name}"
    )
    agrees_with_the_oracles(trace, stored.read_text(), "the stored summary")
    assert got == stored.read_text(), (
        f"{trace.relative_to(REPO)}'s summary changed; if on purpose, run "
        f"ATTNSCOPE_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_summaries.py and review the diff of {stored.relative_to(REPO)}"
    )
