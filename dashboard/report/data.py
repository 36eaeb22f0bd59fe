"""The numbers behind the report as JSON: embedded in the HTML page, and `attnscope compare --json`."""

from __future__ import annotations

import json
from typing import Any

from dashboard.engine.compare import review
from dashboard.report.build import Review, _shown


def review_data(rv: Review, full: bool = False) -> dict[str, Any]:
    """The numbers behind the report: runs, fingerprints, findings, overview, families, copies,
    backends, speed (speedup or, between different workloads, the reason for none), efficiency and
    each run's changes (readings, the kernels ranked by time; with `full`, every kernel and op row)."""
    from dashboard.engine.compare.fingerprint import fingerprint

    def kernels(c: review.Change) -> list[dict[str, Any]]:
        frame = (
            c.kernels if full else _shown(c.kernels).drop("base_us_per_step", "other_us_per_step", "delta_us_per_step")
        )
        return frame.to_dicts()

    return {
        "baseline": rv.baseline,
        "runs": {label: t.source for label, t in rv.runs.items()},
        "fingerprints": {label: fingerprint(t).as_dict() for label, t in rv.runs.items()},
        "overview": rv.overview.to_dicts(),
        "findings": rv.findings.to_dicts(),
        "families": rv.families.to_dicts(),
        "copies": rv.copies.to_dicts(),
        "backends": rv.backends.to_dicts(),
        "speed": rv.speed.to_dicts(),
        "efficiency": rv.efficiency.to_dicts() if rv.efficiency is not None else [],
        "roofline": {
            "points": rv.roofline.to_dicts() if rv.roofline is not None else [],
            "left_out": rv.roofline_left_out.to_dicts() if rv.roofline_left_out is not None else [],
        },
        "changes": [
            {
                "run": c.run,
                "baseline": c.baseline,
                "readings": c.readings,
                "explained_ns_per_step": list(c.explained),
                "top": c.top,
                "kernels": kernels(c),
                **({"ops": c.ops.to_dicts()} if full else {}),
            }
            for c in rv.changes
        ],
        "groups": [{"name": g.name, "runs": g.runs, "baseline": g.baseline} for g in rv.groups],
        "prices": {"usd_per_gpu_hour": rv.usd_per_gpu_hour, "usd_per_cpu_hour": rv.usd_per_cpu_hour},
    }


def render_json(rv: Review) -> str:
    """`attnscope compare --json`: review_data with every kernel and op row, strict JSON (NaN and
    infinities as null), keys in a fixed order, so the same traces give byte-identical files."""
    return json.dumps(_finite(review_data(rv, full=True)), default=str, indent=1, ensure_ascii=False) + "\n"


def _embedded(rv: Review) -> str:
    """The numbers behind the report as JSON, for tools (and tests) that read the HTML back."""
    text = json.dumps(_finite(review_data(rv)), default=str).replace("</", "<\\/")
    return f'<script type="application/json" id="attnscope-data">{text}</script>'


def _finite(value: Any) -> Any:
    """NaN and infinities become null: the embedded block must be strict JSON."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
