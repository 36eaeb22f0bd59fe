"""`attnscope`: the dashboard's analysis, headless, for terminals, CI and pull requests.

Exit codes: 0 success, 1 a check failed (`check`), 2 unusable input (one line per file on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from dashboard.engine import TraceError, load_trace, summarize
from dashboard.engine.model import Trace

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _load_all(paths: Sequence[str]) -> tuple[list[Trace], list[str]]:
    """Load every path; a file that cannot be read becomes one error line, the others still load."""
    traces, errors = [], []
    for path in paths:
        try:
            traces.append(load_trace(path))
        except TraceError as exc:
            errors.append(str(exc))
    return traces, errors


def _human(summary: dict[str, Any]) -> str:
    """A compact table for one file."""
    dev = summary["device"]
    unit = summary["work_unit"]
    lines = [
        f"{summary['source']}  ({dev['type']}{', ' + dev['name'] if dev['name'] else ''}; "
        f"{summary['events']:,} events; unit of device work: {unit})",
    ]
    backends = summary["attention"]["backends"]
    lines.append(f"  attention: {', '.join(backends) if backends else 'none detected'}")
    if summary["memcpy"]:
        lines.append("  memcpy: " + ", ".join(f"{k} {v:,}" for k, v in summary["memcpy"].items()))
    header = f"  {'step':<32} {'work':>8} {'kernel':>8} {'memcpy':>8} {'memset':>8} {'span ms':>10} {'busy ms':>10}"
    lines.append(header)
    for step in summary["steps"]:
        lines.append(
            f"  {step['name']:<32} {step['work']:>8,} {step['kernel']:>8,} {step['gpu_memcpy']:>8,} "
            f"{step['gpu_memset']:>8,} {step['dur_us'] / 1000:>10.3f} {step['busy_us'] / 1000:>10.3f}"
        )
    hidden = [c for c in summary["copies"] if c["hidden"]]
    if hidden:
        lines.append("  hidden copies (made inside another op):")
        for copy in hidden[:10]:
            size = f"{copy['bytes']:,} B" if copy["bytes"] is not None else "bytes unknown"
            lines.append(f"    {copy['count']:>6,} x {copy['kind']:<6} {size:>16}  {' > '.join(copy['op_chain'])}")
        if len(hidden) > 10:
            lines.append(f"    ... and {len(hidden) - 10} more op chains")
    for warning in summary["warnings"]:
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)


def cmd_summary(args: argparse.Namespace) -> int:
    traces, errors = _load_all(args.traces)
    summaries = [summarize(t) for t in traces]
    if args.json:
        print(json.dumps(summaries, indent=1, default=str))
    else:
        print("\n\n".join(_human(s) for s in summaries))
    for trace in traces:
        for warning in trace.warnings:
            print(f"attnscope: warning: {warning}", file=sys.stderr)
    for error in errors:
        print(f"attnscope: error: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT if errors else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnscope",
        description="Profile attention from torch.profiler traces: kernels per step, hidden copies, "
        "SDPA backends, timelines and speedups.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    summary = sub.add_parser("summary", help="summarize traces: kernels per step, memcpy, copies, attention backend")
    summary.add_argument("traces", nargs="+", help="torch.profiler traces (.json or .json.gz)")
    summary.add_argument("--json", action="store_true", help="print a JSON array, one object per file")
    summary.set_defaults(run=cmd_summary)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
