"""The gate's results in the forms CI systems read: a JSON record (every rule, its measurement
and status), a JUnit XML file (one test case per rule: GitLab, Jenkins and GitHub test reports),
a Markdown pull-request comment (verdict first, the three biggest changes, a link-free table),
and the `[tool.attnscope.check]` table of a repository's pyproject.toml.

Every output is a pure function of the two traces and the rules: no clock, no paths beyond the
traces' names, so the same check writes the same bytes twice."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from dashboard.engine.alignment import OpChange, describe
from dashboard.engine.gate import RuleResult

CONFIG_TABLE = ("tool", "attnscope", "check")
TOP_CHANGES = 3


def _clean(value: Any) -> Any:
    """JSON-ready: non-finite floats become None, floats rounded to 12 significant places (bytes stay exact)."""
    if isinstance(value, float):
        return None if not math.isfinite(value) else float(f"{value:.12g}")
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def exit_status(results: list[RuleResult]) -> str:
    """'fail' when a rule failed, else 'pass'."""
    return "fail" if any(r.status == "fail" for r in results) else "pass"


def report(base: str, candidate: str, results: list[RuleResult], changes: list[OpChange] | None = None) -> dict[str, Any]:
    """The JSON record: verdict ('pass' | 'fail'), base, candidate (trace names), counts by status,
    rules (RuleResult.as_dict each, RULES order), changes (op-aligned step diff, largest first:
    kind, scope, base_ops, candidate_ops, delta_ns per step, work, copies, text)."""
    counts = {status: sum(r.status == status for r in results) for status in ("fail", "warn", "pass", "skip")}
    return _clean({
        "verdict": exit_status(results),
        "base": base,
        "candidate": candidate,
        "counts": counts,
        "rules": [r.as_dict() for r in results],
        "changes": [
            {"kind": c.kind, "scope": c.scope, "base_ops": list(c.base_ops), "candidate_ops": list(c.candidate_ops),
             "delta_ns_per_step": c.delta_ns, "work_per_step": c.work, "base_copy_bytes": c.base_copies,
             "candidate_copy_bytes": c.candidate_copies, "steps": c.steps, "text": describe(c)}
            for c in (changes or [])
        ],
    })


def to_json(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def junit(record: dict[str, Any]) -> str:
    """One <testsuite name="attnscope check"> with one <testcase> per rule: a failed rule holds a
    <failure>, a rule turned off or not applicable a <skipped>, a warning passes with its message
    in <system-out>."""
    rules = record["rules"]
    suite = ET.Element("testsuite", {
        "name": "attnscope check", "tests": str(len(rules)),
        "failures": str(sum(r["status"] == "fail" for r in rules)), "errors": "0",
        "skipped": str(sum(r["status"] == "skip" for r in rules)),
    })
    ET.SubElement(ET.SubElement(suite, "properties"), "property", {"name": "base", "value": record["base"]})
    suite.find("properties").append(ET.Element("property", {"name": "candidate", "value": record["candidate"]}))
    for r in rules:
        case = ET.SubElement(suite, "testcase", {"classname": "attnscope.check", "name": r["rule"]})
        if r["status"] == "fail":
            failure = ET.SubElement(case, "failure", {"message": r["message"], "type": r["rule"]})
            failure.text = json.dumps({"base": r["base"], "candidate": r["candidate"], "threshold": r["threshold"]}, sort_keys=True)
        elif r["status"] == "skip":
            ET.SubElement(case, "skipped", {"message": r["message"]})
        else:
            out = ET.SubElement(case, "system-out")
            out.text = ("warning: " if r["status"] == "warn" else "") + r["message"]
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _measure(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return "; ".join(f"{k} {_measure(v.get('count') if isinstance(v, dict) else v)}" for k, v in value.items()) or "none"
    return str(value)


ICON = {"fail": "FAIL", "warn": "warn", "pass": "pass", "skip": "skip"}


def markdown(record: dict[str, Any]) -> str:
    """A pull-request comment: the verdict line, the failures and warnings, the three biggest
    changes (step time, then the op-aligned changes), and one table row per rule; no links."""
    rules = record["rules"]
    counts = record["counts"]
    verdict = "**attnscope check: FAIL**" if record["verdict"] == "fail" else "**attnscope check: pass**"
    lines = [f"{verdict}: `{record['candidate']}` against `{record['base']}` "
             f"({counts['fail']} failed, {counts['warn']} warnings, {counts['pass']} passed, {counts['skip']} skipped)", ""]
    for r in rules:
        if r["status"] in ("fail", "warn"):
            lines.append(f"- {ICON[r['status']]} `{r['rule']}`: {_cell(r['message'])}")
    time = next((r for r in rules if r["rule"] == "step_time" and r["status"] != "skip"), None)
    biggest = [c["text"] for c in record["changes"][:TOP_CHANGES]]
    if time or biggest:
        lines += ["", "Biggest changes:", ""]
        if time:
            d = time["details"]
            lines.append(f"1. step time {d['outcome']}: x{d['ratio']:.3f} of the baseline (95% interval "
                         f"[{d['low']:.3f}, {d['high']:.3f}], {d['base_steps']} + {d['candidate_steps']} steps)"
                         if d.get("low") is not None and d.get("ratio") is not None else f"1. step time: {d['why']}")
        for i, text in enumerate(biggest, start=2 if time else 1):
            lines.append(f"{i}. {text}")
    lines += ["", "| rule | status | baseline | candidate | detail |", "|---|---|---|---|---|"]
    for r in rules:
        lines.append(f"| {r['rule']} | {ICON[r['status']]} | {_cell(_measure(r['base']))} | {_cell(_measure(r['candidate']))} | "
                     f"{_cell(r['message'])} |")
    return "\n".join(lines) + "\n"


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start` that has a [tool.attnscope.check] table."""
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if path.is_file():
            table = read_config(path)
            if table is not None:
                return path
    return None


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:
        import tomli  # type: ignore[import-not-found]
    except ImportError:
        raise ValueError("reading pyproject.toml needs Python 3.11 or the tomli package (pip install tomli)") from None
    return tomli


def read_config(path: Path) -> dict[str, Any] | None:
    """The [tool.attnscope.check] table of a TOML file (None when it has none). Raises ValueError
    for a file that cannot be read or parsed."""
    toml = _toml()
    try:
        with open(path, "rb") as fh:
            doc = toml.load(fh)
    except (OSError, toml.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    table: Any = doc
    for key in CONFIG_TABLE:
        if not isinstance(table, dict) or key not in table:
            return None
        table = table[key]
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [tool.attnscope.check] is not a table")
    return table
