"""`attnscope check`: the CI gate of a candidate trace against a baseline."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from dashboard.cli.config import _check_settings, _gate_rules
from dashboard.cli.files import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    _analysis_error,
    _load_all,
    _open_store_run,
    _store,
)
from dashboard.engine.model.errors import TraceError

if TYPE_CHECKING:
    from dashboard.engine.comparison import Comparison
    from dashboard.engine.model.trace import Trace


class _Refused(Exception):
    """The check cannot run: `lines` are what stderr says (one per problem), exit 2."""

    def __init__(self, *lines: str) -> None:
        super().__init__(*lines)
        self.lines = lines


def _check_refs(args: argparse.Namespace) -> tuple[str, str]:
    """(base, candidate) as given: BASE CANDIDATE, or --baseline BASE CANDIDATE."""
    base_ref, candidate_ref = args.base, args.candidate
    if args.baseline:
        if candidate_ref is not None:
            raise _Refused("attnscope: error: with --baseline give only the CANDIDATE")
        return args.baseline, args.base
    if candidate_ref is None:
        raise _Refused("attnscope: error: check needs BASE and CANDIDATE (or --baseline BASE and CANDIDATE)")
    return base_ref, candidate_ref


def _check_traces(args: argparse.Namespace, refs: tuple[str, str]) -> list[Trace]:
    """Both traces, from files or the store (`store:` refs); every one that cannot be read refused."""
    store = _store(args)
    traces: list[Trace] = []
    errors: list[str] = []
    for ref in refs:
        try:
            if ref.startswith("store:"):
                traces.append(_open_store_run(ref, store))
            else:
                loaded, failed = _load_all([ref], store)
                traces += loaded
                errors += failed
        except TraceError as exc:
            errors.append(str(exc))
    if errors:
        raise _Refused(*(f"attnscope: error: {error}" for error in errors))
    return traces


BASE, CANDIDATE = "base", "candidate"  # the pair's labels in its Comparison


def _check_relation(pair: Comparison, allowed: bool) -> tuple[str, str]:
    """The pair's fingerprint relation; a pair that is not the same work on one device is refused
    unless `allowed` (--allow-different-workload), and then said first."""
    from dashboard.engine.comparison import DIFFERENT, SAME

    base, candidate = pair.runs[BASE], pair.runs[CANDIDATE]
    try:
        kind, why = pair.relation(BASE, CANDIDATE)
    except Exception as exc:
        raise _Refused(f"attnscope: error: {_analysis_error(candidate, exc)}") from None
    if kind != SAME:
        what = "not the same work" if kind == DIFFERENT else "the same work on another device"
        if not allowed:
            raise _Refused(
                f"attnscope: not comparable: {candidate.source} is {what} as {base.source} ({why}): the gate judges "
                "one code change on one workload and device; pass --allow-different-workload to gate them anyway"
            )
        print(f"{candidate.source}: {what} ({why}), gated as asked (--allow-different-workload)")
    return kind, why


def _write_reports(args: argparse.Namespace, record: dict[str, Any]) -> None:
    """The verdict as --json, --junit and --markdown files, where asked."""
    from dashboard.engine.compare.verdict import junit, markdown, to_json

    for path, text in (
        (args.json, lambda: to_json(record)),
        (args.junit, lambda: junit(record)),
        (args.markdown, lambda: markdown(record)),
    ):
        if path:
            try:
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(text())
            except OSError as exc:
                raise _Refused(f"attnscope: error: {path}: cannot write ({exc.strerror})") from None


def _graph_attribution(args: argparse.Namespace, sides: dict[str, tuple[Trace, str]]) -> dict[str, Any]:
    """Each side whose kernels a CUDA graph replayed, attributed through its source (--graph-source,
    else the source its metadata names), for the JSON and Markdown reports."""
    from dashboard.cli.graphs import Sources, attribute

    sources = Sources(_store(args))
    found = {side: attribute(trace, ref, sources, args.graph_source) for side, (trace, ref) in sides.items()}
    for error in sources.errors:
        print(f"attnscope: warning: {error}", file=sys.stderr)
    return {side: value for side, value in found.items() if value is not None}


def cmd_check(args: argparse.Namespace) -> int:
    from dashboard.engine.compare.gate import IncomparableError
    from dashboard.engine.compare.verdict import report
    from dashboard.engine.comparison import Comparison

    try:
        base_ref, candidate_ref = _check_refs(args)
        try:
            settings, config = _check_settings(args)
        except ValueError as exc:
            raise _Refused(f"attnscope: error: {exc}") from None
        base, candidate = _check_traces(args, (base_ref, candidate_ref))
        try:
            rules = _gate_rules(settings)
        except ValueError as exc:
            raise _Refused(f"attnscope: error: {exc}") from None
        pair = Comparison({BASE: base, CANDIDATE: candidate}, BASE)  # the dashboard's and compare's facade
        kind, why = _check_relation(pair, settings.get("allow_different_workload", False))
        try:
            results = pair.gate(BASE, CANDIDATE, rules)
            changes = pair.op_changes(BASE, CANDIDATE) if (args.json or args.markdown) else []
        except IncomparableError as exc:
            raise _Refused(f"attnscope: error: {exc}") from None
        except Exception as exc:
            raise _Refused(f"attnscope: error: {_analysis_error(candidate, exc)}") from None
        base_name = base_ref if base_ref.startswith("store:") else base.source
        candidate_name = candidate_ref if candidate_ref.startswith("store:") else candidate.source
        record = report(base_name, candidate_name, results, changes, relation=(kind, why))
        if config:
            record["config"] = config
        graphs = _graph_attribution(args, {"base": (base, base_ref), "candidate": (candidate, candidate_ref)})
        if graphs:
            record["graphs"] = graphs
        _write_reports(args, record)
    except _Refused as refused:
        for line in refused.lines:
            print(line, file=sys.stderr)
        return EXIT_BAD_INPUT
    failed = [r for r in results if r.status == "fail"]
    for r in failed:
        print(f"{candidate.source}: {r.message}")
    for r in results:
        if r.status == "warn":
            print(f"attnscope: warning: {candidate.source}: {r.rule}: {r.message}", file=sys.stderr)
    if not failed:
        print(f"{candidate.source}: holds against {base_name}")
    return EXIT_FAILED if failed else EXIT_OK
