"""The gate's results in the forms CI systems read: a JSON record (every rule, its measurement
and status), a JUnit XML file (one test case per rule: GitLab, Jenkins and GitHub test reports),
a Markdown pull-request comment (verdict first, the three biggest changes, a link-free table),
and the `[tool.attnscope.check]` table of a repository's pyproject.toml.

Every output is a pure function of the two traces and the rules: no clock, no paths beyond the
traces' names, so the same check writes the same bytes twice."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from dashboard.engine.compare.alignment import OpChange, describe
from dashboard.engine.compare.gate import RuleResult

CONFIG_TABLE = ("tool", "attnscope", "check")
# Without a TOML reader: a line that may open the table ([tool.attnscope...], tool.attnscope... =,
# or under [tool] attnscope.check = / attnscope = {...}); `name = "attnscope"` or a script named
# attnscope is none of these.
MAY_HOLD_TABLE = re.compile(r'^\s*(\[\s*)?"?tool"?\s*\.\s*"?attnscope\b|^\s*"?attnscope"?\s*(\.|=\s*\{)', re.M)
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


def report(
    base: str,
    candidate: str,
    results: list[RuleResult],
    changes: list[OpChange] | None = None,
    relation: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON record: verdict ('pass' | 'fail'), base, candidate (trace names), relation (the
    pair's fingerprint.relation: {"kind", "why"}, when given), counts by status,
    rules (RuleResult.as_dict each, RULES order), changes (op-aligned step diff, largest first:
    kind, scope, base_ops, candidate_ops, delta_ns per step, work, copies, text)."""
    counts = {status: sum(r.status == status for r in results) for status in ("fail", "warn", "pass", "skip")}
    return _clean(
        {
            "verdict": exit_status(results),
            "base": base,
            "candidate": candidate,
            **({"relation": {"kind": relation[0], "why": relation[1]}} if relation is not None else {}),
            "counts": counts,
            "rules": [r.as_dict() for r in results],
            "changes": [
                {
                    "kind": c.kind,
                    "scope": c.scope,
                    "base_ops": list(c.base_ops),
                    "candidate_ops": list(c.candidate_ops),
                    "delta_ns_per_step": c.delta_ns,
                    "work_per_step": c.work,
                    "base_copy_bytes": c.base_copies,
                    "candidate_copy_bytes": c.candidate_copies,
                    "steps": c.steps,
                    "text": describe(c),
                }
                for c in (changes or [])
            ],
        }
    )


def to_json(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def junit(record: dict[str, Any]) -> str:
    """One <testsuite name="attnscope check"> with one <testcase> per rule: a failed rule holds a
    <failure>, a rule turned off or not applicable a <skipped>, a warning passes with its message
    in <system-out>."""
    rules = record["rules"]
    suite = ET.Element(
        "testsuite",
        {
            "name": "attnscope check",
            "tests": str(len(rules)),
            "failures": str(sum(r["status"] == "fail" for r in rules)),
            "errors": "0",
            "skipped": str(sum(r["status"] == "skip" for r in rules)),
        },
    )
    ET.SubElement(ET.SubElement(suite, "properties"), "property", {"name": "base", "value": record["base"]})
    suite.find("properties").append(ET.Element("property", {"name": "candidate", "value": record["candidate"]}))
    for r in rules:
        case = ET.SubElement(suite, "testcase", {"classname": "attnscope.check", "name": r["rule"]})
        if r["status"] == "fail":
            failure = ET.SubElement(case, "failure", {"message": r["message"], "type": r["rule"]})
            failure.text = json.dumps(
                {"base": r["base"], "candidate": r["candidate"], "threshold": r["threshold"]}, sort_keys=True
            )
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
        return (
            "; ".join(f"{k} {_measure(v.get('count') if isinstance(v, dict) else v)}" for k, v in value.items())
            or "none"
        )
    return str(value)


ICON = {"fail": "FAIL", "warn": "warn", "pass": "pass", "skip": "skip"}
MS = 1e6  # at or above 1 ms, a time table is in ms (3 decimals: to the µs), below it in us (1 decimal)


def time_unit(values_ns: list[float | None]) -> tuple[str, float]:
    """('ms', 1e6) when the largest of the times (ns) is at least 1 ms, else ('us', 1e3)."""
    largest = max((abs(v) for v in values_ns if v is not None), default=0.0)
    return ("ms", 1e6) if largest >= MS else ("us", 1e3)


def _time(ns: float | None, unit: tuple[str, float]) -> str:
    """A time in the unit: 1,065,431 ns in ms is '1.065', in us '1,065.4'; '—' when unknown."""
    if ns is None:
        return "—"
    return f"{ns / unit[1]:,.3f}" if unit[0] == "ms" else f"{ns / unit[1]:,.1f}"


def _interval(d: dict[str, Any]) -> tuple[str, str]:
    ratio = f"x{d['ratio']:.3f}" if d.get("ratio") is not None else "—"
    span = f"[{d['low']:.3f}, {d['high']:.3f}]" if d.get("low") is not None and d.get("high") is not None else "—"
    return ratio, span


def _time_table(rules: list[dict[str, Any]]) -> list[str]:
    """The median time per step of both runs, step time first, then each kernel family in both
    runs (family_time's verdicts) and the attention call's host time (host_time's), one unit for the
    table, named in its header."""
    rows: list[tuple[str, dict[str, Any]]] = []
    for r in rules:
        if r["rule"] == "step_time" and r["status"] != "skip":
            rows.append(("step time", r["details"]))
        elif r["rule"] == "family_time" and r["status"] != "skip":
            rows += [(f"kernel family: {family}", d) for family, d in r["details"].get("families", {}).items()]
        elif r["rule"] == "host_time" and r["status"] != "skip":
            rows.append(("host time per attention call", r["details"]))
    if not rows:
        return []
    unit = time_unit([v for _, d in rows for v in (d.get("base_median_ns"), d.get("candidate_median_ns"))])
    lines = [
        f"| median per step | baseline ({unit[0]}) | candidate ({unit[0]}) | ratio | 95% interval | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in rows:
        ratio, span = _interval(d)
        lines.append(
            f"| {_cell(name)} | {_time(d.get('base_median_ns'), unit)} | {_time(d.get('candidate_median_ns'), unit)} | "
            f"{ratio} | {span} | {d.get('outcome', '—')} |"
        )
    return lines


def markdown(record: dict[str, Any]) -> str:
    """A pull-request comment: the verdict line, the failures and warnings, the three biggest
    changes (step time, then the op-aligned changes), the median step time (and each kernel
    family's) in ms or us, named in the column headers, and one table row per rule; no links."""
    rules = record["rules"]
    counts = record["counts"]
    verdict = "**attnscope check: FAIL**" if record["verdict"] == "fail" else "**attnscope check: pass**"
    lines = [
        f"{verdict}: `{record['candidate']}` against `{record['base']}` "
        f"({counts['fail']} failed, {counts['warn']} warnings, {counts['pass']} passed, {counts['skip']} skipped)"
    ]
    relation = record.get("relation")
    if relation and relation["kind"] != "same workload":
        lines += ["", f"**{relation['kind']}**: {_cell(relation['why'])} (gated as asked: --allow-different-workload)"]
    alarms = [
        f"- {ICON[r['status']]} `{r['rule']}`: {_cell(r['message'])}" for r in rules if r["status"] in ("fail", "warn")
    ]
    if alarms:
        lines += ["", *alarms]
    time = next((r for r in rules if r["rule"] == "step_time" and r["status"] != "skip"), None)
    biggest = [c["text"] for c in record["changes"][:TOP_CHANGES]]
    if time or biggest:
        lines += ["", "Biggest changes:", ""]
        if time:
            d = time["details"]
            lines.append(
                f"1. step time {d['outcome']}: x{d['ratio']:.3f} of the baseline (95% interval "
                f"[{d['low']:.3f}, {d['high']:.3f}], {d['base_steps']} + {d['candidate_steps']} steps)"
                if d.get("low") is not None and d.get("ratio") is not None
                else f"1. step time: {d['why']}"
            )
        for i, text in enumerate(biggest, start=2 if time else 1):
            lines.append(f"{i}. {text}")
    times = _time_table(rules)
    if times:
        lines += ["", *times]
    lines += ["", "| rule | status | baseline | candidate | detail |", "|---|---|---|---|---|"]
    for r in rules:
        base, candidate = _measure(r["base"]), _measure(r["candidate"])
        if r["rule"] == "step_time" and r["status"] != "skip":  # its medians are ns: in the time table's unit, named
            unit = time_unit([r["base"], r["candidate"]])
            base, candidate = (
                f"{_time(v, unit)} {unit[0]}" if v is not None else "—" for v in (r["base"], r["candidate"])
            )
        lines.append(
            f"| {r['rule']} | {ICON[r['status']]} | {_cell(base)} | {_cell(candidate)} | {_cell(r['message'])} |"
        )
    return "\n".join(lines + _graph_lines(record.get("graphs"))) + "\n"


def _graph_lines(graphs: dict[str, Any] | None) -> list[str]:
    """The replayed kernels of each side attributed to ops (check --graph-source): a table by op chain."""
    if not graphs:
        return []
    lines = [
        "",
        "CUDA graph replays by op (through their source):",
        "",
        "| run | op chain | device events | device µs |",
    ]
    lines.append("|---|---|---|---|")
    for side, found in graphs.items():
        for op in found["ops"]:
            lines.append(f"| {side} | {_cell(op['chain'])} | {op['kernels']:,} | {op['device_us']:,.1f} |")
        if found["unaligned"]:
            lines.append(f"| {side} | not in the source: {_cell(', '.join(found['unaligned']))} | | |")
    return lines


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
    """The TOML reader: the standard library's tomllib (Python 3.11+), else the tomli package
    (the same API, for Python 3.10), else None."""
    try:
        import tomllib
    except ImportError:
        try:
            import tomli as tomllib  # type: ignore[import-not-found, no-redef]
        except ImportError:
            return None
    return tomllib


def read_config(path: Path) -> dict[str, Any] | None:
    """The [tool.attnscope.check] table of a TOML file (None when it has none). Raises ValueError
    for a file that cannot be read or parsed, and, without a TOML reader (Python 3.10 without
    tomli), for a file with a line that may open the table (MAY_HOLD_TABLE); one without such a
    line has none."""
    toml = _toml()
    if toml is None:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ValueError(f"{path}: {exc.strerror or exc}") from None
        if not MAY_HOLD_TABLE.search(text):
            return None
        raise ValueError(
            f"{path}: reading its [tool.attnscope.check] table needs Python 3.11 or the tomli package "
            "(pip install tomli)"
        )
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
