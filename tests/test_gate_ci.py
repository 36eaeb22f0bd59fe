"""docs/ci.md's shell steps, end to end on this machine: two CPU collections stand for two
commits (main collects one attention variant, the pull request another); the gate's exit code,
JSON, JUnit, Markdown and HTML report are read back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ci_steps() -> str:
    text = (ROOT / "docs" / "ci.md").read_text()
    return next(block for block in re.findall(r"```bash\n(.*?)```", text, re.S) if "# attnscope-ci-steps" in block)


def run_steps(work: Path, role: str, variant: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ROLE": role, "VARIANT": variant, "STORE": str(work / "store"), "OUT": str(work / "out"),
           "PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-c", ci_steps()], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("main, pr, holds", [("naive", "naive_inplace", True), ("naive_inplace", "naive", False)])
def test_the_documented_ci_steps_gate_a_pull_request_against_mains_stored_trace(tmp_path, main, pr, holds):
    done = run_steps(tmp_path, "main", main)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "main.json.gz" in done.stdout  # `attnscope ls` names the stored run by its label
    gate = run_steps(tmp_path, "pr", pr)
    assert gate.returncode == (0 if holds else 1), gate.stdout + gate.stderr[-2000:]
    out = tmp_path / "out"
    record = json.loads((out / "check.json").read_text())
    assert record["base"] == "store:main.json.gz" and record["verdict"] == ("pass" if holds else "fail")
    rules = {r["rule"]: r for r in record["rules"]}
    assert rules["hidden_copies"]["status"] == ("pass" if holds else "fail")
    assert rules["step_time"]["details"]["base_steps"] == rules["step_time"]["details"]["candidate_steps"] == 10
    cases = ET.parse(out / "check.xml").getroot().find("testsuite").findall("testcase")
    assert {c.get("name") for c in cases if c.find("failure") is not None} == {n for n, r in rules.items() if r["status"] == "fail"}
    md = (out / "check.md").read_text()
    assert md.startswith("**attnscope check: " + ("pass" if holds else "FAIL"))
    assert ("replaced by `aten::masked_fill_`" if holds else "`aten::masked_fill_` replaced by `aten::masked_fill`") in md
    assert (out / "report.html").read_bytes().startswith(b"<!") and (out / "report.html").stat().st_size > 10_000
