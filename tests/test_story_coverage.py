"""The Overview says which of the article's four steps each bundled collection tells, and how to
collect the ones it lacks (issue 40 item 11)."""

from __future__ import annotations

import json
from pathlib import Path

from dashboard.catalog_sources import STORY, story_coverage

ROOT = Path(__file__).resolve().parent.parent


def test_each_step_is_told_by_its_own_variants():
    assert [told for _, told in story_coverage({"naive", "sdpa-flash"})] == [True, False, True, False]
    assert [told for _, told in story_coverage({"naive_inplace", "thirdparty-sage"})] == [False, True, False, True]
    assert [told for _, told in story_coverage({"hub"})] == [False, False, False, True]
    assert [told for _, told in story_coverage({"sdpa_custom"})] == [False] * 4  # a prefix is "sdpa-", not "sdpa"
    assert len(STORY) == 4


def test_the_bundled_h200_collection_lacks_the_fourth_step_and_the_overview_says_how_to_add_it(monkeypatch):
    from streamlit.testing.v1 import AppTest

    manifest = json.loads((ROOT / "sample_traces" / "h200" / "runs.json").read_text())
    variants = {r["variant"] for r in manifest["runs"]}
    assert "hub" not in variants and not any(v.startswith("thirdparty-") for v in variants)  # read independently
    monkeypatch.delenv("ATTNSCOPE_TRACES", raising=False)
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    said = [c.value for c in at.caption if "tells the story's steps" in c.value]
    h200 = [line for line in said if line.startswith("**h200**")]
    assert len(h200) == 1, said
    assert "1. naive attention, 2. masked\\_fill\\_" in h200[0] or "1. naive attention, 2. masked_fill_" in h200[0]
    assert "step 4, fused kernels from the hub or third parties, is not in it" in h200[0]
    assert "`python -m collectors --variants hub` or `python -m collectors gpu-run`" in h200[0]
    assert not [line for line in said if "gpu" in line.split("**")[1]]  # public traces tell no step: no line
