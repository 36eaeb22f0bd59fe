"""`attnscope`: the dashboard's analysis, headless, for terminals, CI and pull requests.

Exit codes: 0 success, 1 a check failed (`check`), 2 unusable input (one line per file on stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Any, Sequence

# Light modules only at the top: `attnscope --help` must not pay for polars and the analyses
# (benchmarks/bench_cold_start.py). Each command imports what it needs when it runs.
from dashboard.engine.model.constants import (
    COPY_ALARM_BYTES,
    COPY_ALARM_SHARE,
    DEFAULT_USD_PER_GPU_HOUR,
    UNIT_KERNEL,
    WAITING_CHECKS,
)
from dashboard.engine.rules import BACKENDS
from dashboard.engine.model.errors import TraceError

if TYPE_CHECKING:
    from dashboard.engine.model.trace import Trace
    from dashboard.engine.store.store import Store

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
_OPENED: list[Store] = []  # the stores this command opened: main() waits for their writers
MAX_STEP_LINES = 8  # steps whose top kernel families the text summary names


def _store(args: argparse.Namespace) -> Store | None:
    """The trace store the command reads and fills (None with --no-store, or when it cannot be
    opened: then the command parses every file, after one warning)."""
    if getattr(args, "no_store", False):
        return None
    from dashboard.engine.store.store import Store

    try:
        store = Store(args.store) if args.store else Store()
        _OPENED.append(store)
        return store
    except TraceError as exc:
        print(f"attnscope: warning: {exc}; parsing without the store", file=sys.stderr)
        return None


def _load_all(paths: Sequence[str], store: Store | None = None) -> tuple[list[Trace], list[str]]:
    """Load every path (from the store when its bytes were parsed before); a file that cannot be
    read becomes one error line, the others still load. A newly parsed trace is written to the
    store by a thread of its own while the command goes on (Store.wait, in main, joins it)."""
    from dashboard.engine.load import load_trace

    traces, errors = [], []
    for i, path in enumerate(paths):
        more = i + 1 < len(paths)  # a large file's worker processes stay while more files follow
        try:
            traces.append(
                store.open(path, keep_workers=more, background=True)[0]
                if store is not None
                else load_trace(path, keep_workers=more)
            )
        except TraceError as exc:
            errors.append(str(exc))
    return traces, errors


def _head_lines(summary: dict[str, Any]) -> list[str]:
    """The file, its device, events and unit of work."""
    dev = summary["device"]
    unit = summary["work_unit"]
    lines = [
        f"{summary['source']}  ({dev['type']}{', ' + dev['name'] if dev['name'] else ''}; "
        f"{summary['events']:,} events; "
        + (
            f"unit of device work: {unit})"
            if unit == UNIT_KERNEL
            else f"unit of work: {unit}, an op that computes and holds "
            "no other such op; views, allocations and bookkeeping ops are not counted)"
        ),
    ]
    return lines


def _health_lines(summary: dict[str, Any]) -> list[str]:
    """The health line: the trace's faults, then the facts of the run."""
    lines: list[str] = []
    problems = [h for h in summary["health"] if h["check"] not in WAITING_CHECKS]
    waiting = [h for h in summary["health"] if h["check"] in WAITING_CHECKS]
    lines.append(
        "  health: "
        + (
            "; ".join(f"{h['check']} {h['count']:,} ({h['example']})" for h in problems)
            if problems
            else "no problem found (overlaps, overflowed durations, lost launches or device events, clock skew)"
        )
    )
    if waiting:
        lines.append(
            "  how the device ran (facts of the run, not faults of the trace): "
            + "; ".join(f"{h['check']} {h['count']:,} ({h['example']})" for h in waiting)
        )
    backends = summary["attention"]["backends"]
    lines.append(f"  attention: {', '.join(backends) if backends else 'none detected'}")
    if summary["memcpy"]:
        lines.append("  memcpy: " + ", ".join(f"{k} {v:,}" for k, v in summary["memcpy"].items()))
    return lines


def _step_lines(summary: dict[str, Any]) -> list[str]:
    """Each step's counts, where its time goes, cut and ran-ahead notes."""
    unit = summary["work_unit"]
    lines: list[str] = []
    header = f"  {'step':<32} {'work':>8} {'kernel':>8} {'memcpy':>8} {'memset':>8} {'span ms':>10} {'busy ms':>10}"
    lines.append(header)
    for step in summary["steps"]:
        name = f"{step['name']} (past the cut)" if step["past_cut"] else step["name"]
        lines.append(
            f"  {name:<32} {step['work']:>8,} {step['kernel']:>8,} {step['gpu_memcpy']:>8,} "
            f"{step['gpu_memset']:>8,} {step['dur_us'] / 1000:>10.3f} {step['busy_us'] / 1000:>10.3f}"
        )
    shown = summary["steps"][:MAX_STEP_LINES]
    for step in shown:
        if step["top_families"]:
            busy = ""
            if step.get("device_span_us") and unit == UNIT_KERNEL:
                busy = f"; device busy {step['busy_us'] / step['device_span_us']:.0%} of the {_ms(step['device_span_us'])} its work spans"
                if step["ran_ahead_us"]:
                    busy += f", which ends {_ms(step['ran_ahead_us'])} after the step's CPU span (the CPU ran ahead)"
            lines.append(
                f"  {step['name']}: "
                + ", ".join(f"{f['family']} {f['share']:.1%}" for f in step["top_families"])
                + f" of the {'device' if unit == UNIT_KERNEL else 'op'} time{busy}"
            )
    if len(summary["steps"]) > len(shown):
        lines.append(f"  ... where the time goes in the other {len(summary['steps']) - len(shown):,} steps: see --json")
    past = [step["name"] for step in summary["steps"] if step["past_cut"]]
    if past:
        lines.append(
            f"  {', '.join(past)} {'was' if len(past) == 1 else 'were'} still running at the last event read before "
            "the cut: what came after it is missing, so "
            + ("its counts are" if len(past) == 1 else "their counts are")
            + " partial"
        )
    ahead = sum(1 for step in summary["steps"] if step.get("ran_ahead_us"))
    if ahead and unit == UNIT_KERNEL:
        lines.append(
            f"  the CPU ran ahead in {ahead:,} of {len(summary['steps']):,} steps: the device finished work they launched "
            "after their CPU span ended (a kernel counts in the step that launched it; busy and idle are measured on the "
            "device's own timeline)"
        )
    return lines


def _efficiency_lines(summary: dict[str, Any]) -> list[str]:
    """Attention efficiency and the graph replays."""
    unit = summary["work_unit"]
    lines: list[str] = []
    lines.append(f"  attention efficiency: {_efficiency_line(summary['efficiency'])}")
    for step in summary["efficiency"]["per_step"]:  # collectors' traces: the measure `compare` ranks variants by
        lines.append(f"  attention efficiency over the whole step: {_step_efficiency_line(step, unit == UNIT_KERNEL)}")
    graphs = summary["graphs"]
    if graphs["launches"]:
        one = graphs["launches"] == 1
        ops = (
            ", ".join(f"{n:,} under {op}" for op, n in graphs["ops"].items())
            or f"no op holds {'it' if one else 'them'}"
        )
        launches = "1 launch" if one else f"{graphs['launches']:,} launches"
        lines.append(f"  graph replays: {launches} replayed {graphs['kernels']:,} device events ({ops})")
    return lines


def _host_lines(summary: dict[str, Any]) -> list[str]:
    """Host-bound or device-bound, and the attention call's host side (analyses.host.host_line)."""
    from dashboard.engine.analyses.host import host_line

    line = host_line(summary.get("host"))
    return [f"  {line}"] if line else []


def _memory_lines(summary: dict[str, Any]) -> list[str]:
    """The memory peak, as recorded."""
    lines: list[str] = []
    memory = summary["memory"]  # decimal MB and GB (10^6, 10^9 bytes)
    size = lambda n, sign="": f"{n / 1e9:{sign}.2f} GB" if abs(n) >= 1e9 else f"{n / 1e6:{sign}.1f} MB"  # noqa: E731
    if not memory["recorded"]:
        lines.append("  memory: not recorded (profile_memory=False)")
    elif not memory["events"]:
        lines.append("  memory: recorded (profile_memory=True), but the trace holds no allocation or free")
    elif memory["peak_allocated_bytes"] is None:
        lines.append(
            f"  memory: {memory['events']:,} memory events, but without the allocator's Total Allocated "
            "(an older profiler): no peak"
        )
    else:
        where = f"at {memory['peak_op'] or 'no op'}" + (
            f" (step {memory['peak_step']})" if memory["peak_step"] is not None else " (outside any step)"
        )
        added = f"; {size(memory['added_bytes'], '+')} over the step" if memory["added_bytes"] is not None else ""
        lines.append(
            f"  memory: peak {size(memory['peak_allocated_bytes'])} allocated on {memory['device']}, {where}{added}"
        )
    return lines


def _copy_lines(summary: dict[str, Any]) -> list[str]:
    """Copies by class and the hidden ones by op chain."""
    lines: list[str] = []
    classes: dict[str, int] = {}
    for copy in summary["copies"]:
        classes[copy["class"]] = classes.get(copy["class"], 0) + copy["count"]
    if classes:
        lines.append("  copies by class: " + ", ".join(f"{name} {n:,}" for name, n in sorted(classes.items())))
    hidden = [c for c in summary["copies"] if c["hidden"]]
    if hidden:
        lines.append("  hidden copies (made inside another op):")
        for copy in hidden[:10]:
            size = f"{copy['bytes']:,} B in all" if copy["bytes"] is not None else "bytes unknown"
            lines.append(f"    {copy['count']:>6,} x {copy['kind']:<6} {size:>23}  {' > '.join(copy['op_chain'])}")
        if len(hidden) > 10:
            lines.append(f"    ... and {len(hidden) - 10} more op chains")
    return lines


def _human(summary: dict[str, Any]) -> str:
    """A compact table for one file."""
    lines = []
    for part in (_head_lines, _health_lines, _step_lines, _efficiency_lines, _host_lines, _memory_lines, _copy_lines):
        lines += part(summary)
    return "\n".join(lines)  # (warnings go to stderr once, not here as well)


def _ms(us: float) -> str:
    """µs as text: '95.7 ms' from 1 ms up, else '812.4 µs'."""
    return f"{us / 1000:,.1f} ms" if us >= 1000 else f"{us:,.1f} µs"


def _efficiency_line(block: dict[str, Any]) -> str:
    """'19.4% of the H100 SXM5 80GB roofline (90.4 TFLOP/s, 24 of 34 calls measured, 71% of attention
    device time; the rest has no shapes)', or why not, with the share of the attention time measured."""
    share = block.get("measured_share")
    covered = ""
    if share is not None:
        rest = "the rest has no shapes" if block.get("unmeasured_without_shapes") else "the rest is not measured"
        percent = f"{100 * share:.0f}%" if share == 0 or share >= 0.01 else "<1%"
        covered = f", {percent} of attention device time" + ("" if share >= 1 else f"; {rest}")
    if block["pct_of_roofline"] is not None:
        return (
            f"{block['pct_of_roofline']:.1f}% of the {block['device']['matched']} roofline "
            f"({block['tflops']:.1f} TFLOP/s, {block['measured']:,} of {block['calls']:,} calls measured{covered})"
        )
    if not block["calls"]:
        return "no attention op or kernel to measure"
    why = block["device"]["reason"] or "; ".join(block["reasons"][:2]) or "not measurable"
    achieved = f"{block['tflops']:.3g} TFLOP/s achieved; " if block["tflops"] else ""
    return f"no percentage ({achieved}{why})"  # nothing measured: 0% of the attention time, said by the reason


def _step_efficiency_line(step: dict[str, Any], gpu: bool) -> str:
    """'17.6% of the H200 SXM roofline (174.1 TFLOP/s: the collectors' shape ...)', or why not."""
    what = (
        "the collectors' shape over each step's device time, every kernel, copy and memset of the step included"
        if gpu
        else "the collectors' shape over each step's attention:: span"
    )
    if step["pct_of_roofline"] is not None:
        return f"{step['pct_of_roofline']:.1f}% of the {step['device']} roofline ({step['tflops']:.1f} TFLOP/s: {what})"
    achieved = f"{step['tflops']:.3g} TFLOP/s achieved: {what}; " if step["tflops"] else ""
    return f"no percentage ({achieved}{step['reason'] or 'not measurable'})"


def _rank_lines(folder: str, traces: list[Trace]) -> list[str]:
    """Per-rank step times and the straggler of each step, for a folder of rank traces."""
    from dashboard.engine.store.ingest import one_job, world_of
    from dashboard.engine.compare.ranks import STRAGGLER_SPREAD, rank_of, rank_step_times, stragglers

    if not one_job([rank_of(t) for t in traces], [world_of(t) for t in traces]):
        return []
    ranks = {rank_of(t): t for t in traces}
    table = stragglers(rank_step_times(ranks))
    lines = [
        f"{folder}: {len(ranks)} ranks ({', '.join(str(r) for r in sorted(ranks))}); the slowest rank of each step: "
        f"(straggler: spread {STRAGGLER_SPREAD:g} or more, as the Ranks tab shades it)",
        f"  {'step':>10} {'slowest rank':>13} {'its ms':>10} {'median ms':>10} {'spread':>7} {'straggler':>9}",
    ]
    for row in table.iter_rows(named=True):
        lines.append(
            f"  {row['step']:>10} {row['slowest_rank']:>13} {row['slowest_us'] / 1000:>10.3f} "
            f"{row['median_us'] / 1000:>10.3f} {_spread(row['spread']):>7} {'yes' if row['straggler'] else 'no':>9}"
        )
    return lines


def _spread(value: float | None) -> str:
    """slowest / median as text; '-' for a step no rank did any work in (0 / 0)."""
    return f"{value:.2f}" if value is not None and math.isfinite(value) else "-"


def _expand(paths: Sequence[str]) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """Files to read: each file as named, each folder's trace files (sorted, recursive); folder ->
    its files, for the per-rank table; and one error line per folder that holds no trace file."""
    from dashboard.engine.store.ingest import TRACE_SUFFIXES, discover

    files: list[str] = []
    folders: dict[str, list[str]] = {}
    skipped: list[str] = []
    empty: list[str] = []
    for path in paths:
        for folder, members in discover([path], skipped):
            names = [str(m) for m in members]
            files.extend(names)
            if folder is not None:
                folders[path] = names
                if not names:
                    empty.append(f"{path}: no trace files ({', '.join(TRACE_SUFFIXES)}) in this folder")
    for line in skipped:
        print(f"attnscope: warning: {line}", file=sys.stderr)
    return files, folders, empty


def _analysis_error(trace: Trace, exc: Exception) -> str:
    """One line for a trace that loaded but broke an analysis (an engine bug, or a trace stranger
    than any we have seen): the file, and what went wrong."""
    return f"{trace.source}: could not be analysed ({type(exc).__name__}: {exc})".replace("\n", " ")


SUMMARY_KEY = "dashboard.engine.analyses.summary.summarize"  # its per_trace key (the kept file's name): not imported for a kept answer


def cmd_summary(args: argparse.Namespace) -> int:
    from dashboard.engine.store.kept import MISSING

    files, folders, errors = _expand(args.traces)  # a folder without a trace file is an error, not an empty answer
    store = _store(args)
    in_folders = {m for members in folders.values() for m in members}
    by_path: dict[str, Trace] = {}
    summaries = []
    warned: list[str] = []  # the summary's warnings (the loader's and the analyses'), else the loader's
    for path in files:
        # A file summarized before is answered from the store without reading its tables (kept.py);
        # a folder's ranks need their traces for the rank lines of the text output.
        if store is not None and (args.json or path not in in_folders):
            answer = store.kept(path, SUMMARY_KEY)
            if answer is not MISSING:
                summaries.append(answer)
                warned += answer["warnings"]
                continue
        from dashboard.engine.analyses.summary import summarize

        loaded, failed = _load_all([path], store)
        errors += failed
        for trace in loaded:
            by_path[path] = trace
            try:
                summaries.append(summarize(trace))
                warned += summaries[-1]["warnings"]
            except Exception as exc:  # one strange file must not cost the others their summary
                errors.append(_analysis_error(trace, exc))
                warned += trace.warnings
    if args.json:
        print(json.dumps(summaries, indent=1, default=str))
    else:
        blocks = [_human(s) for s in summaries]
        for folder, members in folders.items():
            lines = _rank_lines(folder, [by_path[m] for m in members if m in by_path])
            if lines:
                blocks.append("\n".join(lines))
        if blocks:
            print("\n\n".join(blocks))
    for warning in warned:
        print(f"attnscope: warning: {warning}", file=sys.stderr)
    for error in errors:
        print(f"attnscope: error: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT if errors else EXIT_OK


def _labels(traces: list[Trace]) -> dict[str, Trace]:
    """Run labels for the reports: the collectors' variant when the trace has one, else the file
    name; made unique with the file name when two runs would share a label."""
    labels: dict[str, Trace] = {}
    for trace in traces:
        label = str(trace.collector.get("variant") or trace.source)
        if trace.collector.get("cuda_graphs") is True:
            label += " (CUDA graphs)"
        elif trace.collector.get("compiled"):
            label += " (compiled)"
        if label in labels:
            label = f"{label} [{trace.source}]"
        while label in labels:
            label += "'"
        labels[label] = trace
    return labels


def _mixed_devices(traces: list[Trace]) -> str | None:
    """Why these traces cannot be compared as one group (GPU and CPU-only runs among them), or None."""
    from dashboard.engine.compare.speed import GROUP_GPU, device_group

    gpu = [t.source for t in traces if device_group(t) == GROUP_GPU]
    cpu = [t.source for t in traces if device_group(t) != GROUP_GPU]
    if not gpu or not cpu:
        return None
    return (
        f"{', '.join(gpu)} {'is a GPU trace' if len(gpu) == 1 else 'are GPU traces'} and {', '.join(cpu)} "
        f"{'is' if len(cpu) == 1 else 'are'} CPU-only: their step times and work are measured differently, so no speedup "
        "or work ratio is set across them; pass --group-by-device to compare each group against its own baseline"
    )


def _article_folders(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split compare's paths: folders holding the article's tables (sweep.csv, dispatch.csv,
    e2e.csv, serve.csv) and everything else (the traces)."""
    from pathlib import Path

    from dashboard.engine.analyses.article import is_article_folder

    folders = [p for p in paths if is_article_folder(Path(p))]
    return folders, [p for p in paths if p not in folders]


def _read_articles(folders: Sequence[str]) -> tuple[list[Any], list[str]]:
    from pathlib import Path

    from dashboard.engine.analyses.article import ArticleError, read_article

    found, errors = [], []
    for folder in folders:
        try:
            found.append(read_article(Path(folder)))
        except ArticleError as exc:
            errors.append(str(exc))
    return found, errors


def cmd_compare(args: argparse.Namespace) -> int:
    from dashboard import article_report
    from dashboard.report import (
        ARTICLE_ONLY_HTML,
        build_review,
        render_html,
        render_json,
        render_markdown,
        render_text,
    )  # plotly loads only when asked for

    folders, paths = _article_folders([args.base, *args.others])
    if len(paths) == 1:
        print(
            f"attnscope: error: {paths[0]}: compare needs a baseline and at least one other trace "
            "(or only folders of the article's measurements)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    articles, errors = _read_articles(folders)
    traces, trace_errors = _load_all(paths, _store(args))
    errors += trace_errors
    for error in errors:
        print(f"attnscope: error: {error}", file=sys.stderr)
    if errors:
        return EXIT_BAD_INPUT
    mixed = _mixed_devices(traces)
    if mixed and not args.group_by_device:
        print(f"attnscope: error: {mixed}", file=sys.stderr)
        return EXIT_BAD_INPUT
    markdown = html = as_json = text = ""
    if traces:
        runs = _labels(traces)  # (loader warnings are in the report's findings, once)
        baseline = next(iter(runs))
        try:
            review = build_review(
                runs,
                baseline,
                args.usd_per_gpu_hour,
                args.usd_per_cpu_hour,
                copy_alarm_share=args.copy_alarm_share / 100,
                copy_alarm_bytes=args.copy_alarm_bytes,
            )
            markdown = render_markdown(review)
            text = render_text(review)  # what the terminal gets: plain text, Markdown only where asked for
            html = render_html(review) if args.html else ""
            as_json = render_json(review) if args.json else ""
        except Exception as exc:
            print(f"attnscope: error: the comparison failed ({type(exc).__name__}: {exc})", file=sys.stderr)
            return EXIT_BAD_INPUT
    if articles:
        markdown = "\n".join(part for part in [markdown, *map(article_report.render_markdown, articles)] if part)
        text = "\n".join(part for part in [text, *map(article_report.render_text, articles)] if part)
        sections = "".join(map(article_report.render_html, articles))
        if args.html:
            html = (
                html.replace("\n</body></html>", f"\n{sections}</body></html>")
                if html
                else (ARTICLE_ONLY_HTML.format(body=sections))
            )
    written = True
    if args.html:
        written = _write(args.html, html) and written
    if args.markdown:
        written = _write(args.markdown, markdown) and written
    if args.json:
        if not traces:
            print("attnscope: error: --json writes a comparison of traces; none were given", file=sys.stderr)
            return EXIT_BAD_INPUT
        written = _write(args.json, as_json) and written
    if not args.html and not args.markdown and not args.json:
        print(text)
    return EXIT_OK if written else EXIT_BAD_INPUT


def cmd_sweep(args: argparse.Namespace) -> int:
    from dashboard import article_report

    articles, errors = _read_articles(args.folders)
    for error in errors:
        print(f"attnscope: error: {error}", file=sys.stderr)
    if errors:
        return EXIT_BAD_INPUT
    render = article_report.render_markdown if args.markdown else article_report.render_text
    print("\n".join(render(a) for a in articles), end="")
    return EXIT_OK


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        print(f"attnscope: error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return False
    print(f"attnscope: wrote {path}", file=sys.stderr)
    return True


def _open_store_run(ref: str, store: Store | None) -> Trace:
    """The trace of `store:RUN` (a run id or label, as `attnscope ls` prints them; its lowest rank)."""
    if store is None:
        raise TraceError(f"{ref}: reading a stored run needs the trace store (drop --no-store)")
    name = ref.split(":", 1)[1]
    runs = store.runs()  # newest first: a label added again names its latest run
    run = next((r for r in runs if r.run_id == name), None) or next((r for r in runs if r.label == name), None)
    if run is None or not run.ranks:
        raise TraceError(f"{ref}: no such run in {store.root} (see `attnscope ls`)")
    trace = store.get(min(run.ranks)[1])
    if trace is None:
        raise TraceError(f"{ref}: its trace was evicted from {store.root}; ingest it again")
    return trace


CHECK_OPTIONS = {  # [tool.attnscope.check] key -> (argparse dest, type)
    "max-slowdown": ("max_slowdown", float),
    "max-family-slowdown": ("max_family_slowdown", float),
    "max-host-increase": ("max_host_increase", float),
    "inconclusive": ("inconclusive", str),
    "max-kernel-increase": ("max_kernel_increase", float),
    "allow-new-copies": ("allow_new_copies", bool),
    "require-backend": ("require_backend", str),
    "allow-math": ("allow_math", bool),
    "allow-different-workload": ("allow_different_workload", bool),
    "min-speedup": ("min_speedup", float),
    "require-parity": ("require_parity", bool),
    "min-attention-efficiency": ("min_attention_efficiency", float),
    "max-memory-increase": ("max_memory_increase", float),
    "max-efficiency-drop": ("max_efficiency_drop", float),
    "max-idle-increase": ("max_idle_increase", float),
    "confidence": ("confidence", float),
    "resamples": ("resamples", int),
    "seed": ("seed", int),
    "rules": ("rule", dict),
}


def _check_settings(args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    """The check's settings: pyproject.toml's [tool.attnscope.check] (--config FILE, else the
    nearest one at or above the current folder), then the command line's flags over it."""
    from pathlib import Path

    from dashboard.engine.compare.verdict import find_config, read_config

    path = Path(args.config) if args.config else find_config(Path.cwd())
    table = (read_config(path) or {}) if path is not None else {}
    if args.config and not table:
        raise ValueError(f"{path}: no [tool.attnscope.check] table")
    settings: dict[str, Any] = {}
    for key, value in table.items():
        known = CHECK_OPTIONS.get(key.replace("_", "-"))
        if known is None:
            raise ValueError(
                f"{path}: [tool.attnscope.check] has an unknown key '{key}' (known: {', '.join(CHECK_OPTIONS)})"
            )
        dest, kind = known
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int) and not isinstance(value, bool))
        if not ok or (kind is not bool and isinstance(value, bool)):
            raise ValueError(f"{path}: [tool.attnscope.check] {key} must be a {kind.__name__}")
        settings[dest] = dict(value) if kind is dict else value
    for dest, _ in CHECK_OPTIONS.values():
        given = getattr(args, dest, None)
        if dest == "rule":
            if given:
                levels = dict(settings.get("rule", {}))
                for item in given:
                    name, _, level = item.partition("=")
                    levels[name.strip()] = level.strip()
                settings["rule"] = levels
        elif given is not None:
            settings[dest] = given
    return settings, str(path) if table else None


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


def _gate_rules(settings: dict[str, Any]) -> Any:
    """The gate's Rules from the merged settings (config file, then flags); ValueError names a bad one."""
    from dashboard.engine.compare.gate import Rules, with_levels

    rules = Rules(
        max_kernel_increase_pct=settings.get("max_kernel_increase", 0.0),
        no_new_copies=not settings.get("allow_new_copies", False),  # --no-new-copies is the default, said out loud
        require_backend=settings.get("require_backend"),
        forbid_math=not settings.get("allow_math", False),
        min_speedup=settings.get("min_speedup"),
        require_parity=settings.get("require_parity", False),
        min_attention_efficiency=settings.get("min_attention_efficiency"),
        max_slowdown_pct=settings.get("max_slowdown"),
        max_family_slowdown_pct=settings.get("max_family_slowdown"),
        max_host_increase_pct=settings.get("max_host_increase"),
        inconclusive=settings.get("inconclusive", "pass"),
        **{
            key: settings[dest]
            for key, dest in (
                ("confidence", "confidence"),
                ("resamples", "resamples"),
                ("seed", "seed"),
                ("max_memory_increase_pct", "max_memory_increase"),
                ("max_efficiency_drop", "max_efficiency_drop"),
                ("max_idle_increase", "max_idle_increase"),
            )
            if dest in settings
        },
    )
    if rules.inconclusive not in ("pass", "fail"):
        raise ValueError(f"inconclusive must be 'pass' or 'fail', not '{rules.inconclusive}'")
    if rules.require_backend is not None and rules.require_backend not in BACKENDS:
        raise ValueError(f"require-backend must be one of {', '.join(BACKENDS)}")
    return with_levels(rules, settings.get("rule", {}))


def _check_relation(base: Trace, candidate: Trace, allowed: bool) -> tuple[str, str]:
    """The pair's fingerprint relation; a pair that is not the same work on one device is refused
    unless `allowed` (--allow-different-workload), and then said first."""
    from dashboard.engine.compare.fingerprint import DIFFERENT, SAME, relation

    try:
        kind, why = relation(base, candidate)
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


def cmd_check(args: argparse.Namespace) -> int:
    from dashboard.engine.compare.alignment import op_changes
    from dashboard.engine.compare.gate import IncomparableError, evaluate
    from dashboard.engine.compare.verdict import report

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
        kind, why = _check_relation(base, candidate, settings.get("allow_different_workload", False))
        try:
            results = evaluate(base, candidate, rules)
            changes = op_changes(base, candidate) if (args.json or args.markdown) else []
        except IncomparableError as exc:
            raise _Refused(f"attnscope: error: {exc}") from None
        except Exception as exc:
            raise _Refused(f"attnscope: error: {_analysis_error(candidate, exc)}") from None
        base_name = base_ref if base_ref.startswith("store:") else base.source
        candidate_name = candidate_ref if candidate_ref.startswith("store:") else candidate.source
        record = report(base_name, candidate_name, results, changes, relation=(kind, why))
        if config:
            record["config"] = config
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


def cmd_ingest(args: argparse.Namespace) -> int:
    from dashboard.engine.store.ingest import ingest

    store = _store(args)
    if store is None:
        print(
            "attnscope: error: ingest needs a trace store (it cannot be opened, or --no-store was given)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        done = ingest(args.paths, store, workers=args.workers, scheduler=args.scheduler, added_by="cli")
    except TraceError as exc:
        print(f"attnscope: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for run_id, label, ranks in done.runs:
        print(f"{run_id}  {label}  ({len(ranks)} rank{'s' if len(ranks) != 1 else ''})")
    for line in done.warnings:
        print(f"attnscope: warning: {line}", file=sys.stderr)
    for path, error in done.errors:
        print(f"attnscope: error: {error}", file=sys.stderr)
    print(f"attnscope: {len(done.runs)} runs in {store.root}", file=sys.stderr)
    return EXIT_BAD_INPUT if done.errors else EXIT_OK


def cmd_ls(args: argparse.Namespace) -> int:
    from dashboard.engine.compare.review import format_bytes

    store = _store(args)
    if store is None:
        print("attnscope: error: no trace store to list", file=sys.stderr)
        return EXIT_BAD_INPUT
    traces = {t.sha: t for t in store.traces()}
    for run in store.runs():
        files = [traces.get(sha) for _, sha in run.ranks]
        size = sum(t.size for t in files if t is not None)
        device = next((t.device_name or t.device_type for t in files if t is not None), None) or "—"
        gone = sum(t is None for t in files)
        note = f"; {gone} evicted" if gone else ""
        print(
            f"{run.run_id}  {run.label}  [{run.added_by}; {len(run.ranks)} rank{'s' if len(run.ranks) != 1 else ''}; "
            f"{device}; {format_bytes(size)}{note}]"
        )
    stored = sum(t.stored_bytes for t in traces.values())
    print(f"attnscope: {len(traces)} traces, {format_bytes(stored)} in {store.root}", file=sys.stderr)
    return EXIT_OK


def _store_options(parser: argparse.ArgumentParser, ingest: bool = False) -> None:
    parser.add_argument(
        "--store",
        metavar="DIR",
        help="the trace store (default $ATTNSCOPE_STORE, else ~/.cache/attnscope): traces parsed "
        "before reopen from it without parsing",
    )
    if not ingest:
        parser.add_argument("--no-store", action="store_true", help="parse every file; read and write no store")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnscope",
        description="Profile attention from torch.profiler traces: kernels per step, hidden copies, "
        "SDPA backends, timelines and speedups.",
    )
    from dashboard import __version__

    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    summary = sub.add_parser("summary", help="summarize traces: kernels per step, memcpy, copies, attention backend")
    summary.add_argument(
        "traces",
        nargs="+",
        help="torch.profiler traces (.json or .json.gz), or folders of them (a folder of rank traces "
        "also gets the slowest rank of each step)",
    )
    summary.add_argument("--json", action="store_true", help="print a JSON array, one object per file")
    _store_options(summary)
    summary.set_defaults(run=cmd_summary)

    compare = sub.add_parser(
        "compare", help="compare runs against a baseline: a Markdown summary, or offline HTML/Markdown files"
    )
    compare.add_argument("base", help="the baseline trace (or a folder of the article's measurements, see `sweep`)")
    compare.add_argument(
        "others",
        nargs="*",
        help="traces to compare against it; a folder holding sweep.csv, dispatch.csv, e2e.csv or "
        "serve.csv adds its Sweep section to the report",
    )
    compare.add_argument("--html", metavar="FILE", help="write a self-contained HTML report (works offline)")
    compare.add_argument("--markdown", metavar="FILE", help="write a Markdown summary for a pull-request comment")
    compare.add_argument(
        "--json",
        metavar="FILE",
        help="write the comparison as JSON: runs and their fingerprints, findings, readings, every kernel "
        "and op change, speedups (or, between different workloads, the reason for none)",
    )
    compare.add_argument(
        "--usd-per-gpu-hour",
        type=float,
        default=DEFAULT_USD_PER_GPU_HOUR,
        metavar="USD",
        help=f"price of a GPU-hour, for the cost per million tokens of GPU runs (default {DEFAULT_USD_PER_GPU_HOUR:g}, "
        "as in the dashboard)",
    )
    compare.add_argument(
        "--usd-per-cpu-hour",
        type=float,
        default=None,
        metavar="USD",
        help="price of a CPU machine-hour, for the cost of CPU-only runs (default: none, no cost shown)",
    )
    compare.add_argument(
        "--copy-alarm-share",
        type=float,
        default=COPY_ALARM_SHARE * 100,
        metavar="PCT",
        help="a hidden copy is an alarm when its op chain costs at least PCT%% of the step's time "
        f"(default {COPY_ALARM_SHARE * 100:g}) ...",
    )
    compare.add_argument(
        "--copy-alarm-bytes",
        type=float,
        default=COPY_ALARM_BYTES,
        metavar="BYTES",
        help=f"... or moves at least BYTES a step (default {COPY_ALARM_BYTES:,}); cheaper ones are notes",
    )
    compare.add_argument(
        "--group-by-device",
        action="store_true",
        help="allow GPU and CPU-only traces in one report: each group is compared with its own baseline "
        "(the first trace of the group); without it such a mix exits 2",
    )
    _store_options(compare)
    compare.set_defaults(run=cmd_compare)

    gate = sub.add_parser(
        "check",
        help="a CI gate: exit 1 with one line per regression of CANDIDATE against BASE",
        description="By default fails on a new hidden copy (one no op asked for), on SDPA running on the math path, on a backend "
        "fallback, on a recorded parity failure and on any increase of kernels per step; step time is judged over all steps "
        "(a seeded bootstrap interval of the ratio of medians) and fails only past --max-slowdown; memory, backend changes, "
        "efficiency, idle share, new kernel families, growing copy classes and new health findings warn (--rule NAME=fail "
        "makes any rule fail). Settings can live in pyproject.toml under [tool.attnscope.check] (keys named as the flags); "
        "flags override them. Exit 0 holds, 1 a rule failed, 2 unusable input.",
    )
    gate.add_argument(
        "base",
        metavar="BASE",
        help="the baseline trace the candidate must hold against (.json or .json.gz, or store:RUN: a run id or "
        "label from `attnscope ls`); with --baseline given, the one trace named here is the one under test",
    )
    gate.add_argument(
        "candidate",
        metavar="CANDIDATE",
        nargs="?",
        help="the trace under test; GPU against GPU, or CPU-only against CPU-only (a mix exits 2)",
    )
    gate.add_argument(
        "--baseline",
        metavar="TRACE",
        help="the baseline, given as an option (e.g. store:RUN); then only CANDIDATE is positional",
    )
    gate.add_argument(
        "--max-kernel-increase",
        type=float,
        default=None,
        metavar="PCT",
        help="allowed growth of kernels (device work) per step, in percent (default 0)",
    )
    copies_rule = gate.add_mutually_exclusive_group()
    copies_rule.add_argument(
        "--no-new-copies",
        action="store_true",
        help="fail on a hidden copy from an op chain the baseline lacks, or more hidden copies per step "
        "(the default; for explicit CI configs). Copies an op asked for (.to, copy_, a CUDA "
        "graph's input copies), autograd's and communication's are not gated",
    )
    copies_rule.add_argument("--allow-new-copies", action="store_true", default=None, help="do not check copies")
    gate.add_argument(
        "--require-backend",
        metavar="NAME",
        choices=BACKENDS,
        help="an attention backend the candidate must show: " + ", ".join(BACKENDS),
    )
    gate.add_argument(
        "--allow-math", action="store_true", default=None, help="do not fail when SDPA runs on the math path"
    )
    gate.add_argument(
        "--allow-different-workload",
        action="store_true",
        default=None,
        help="gate a pair that is not the same work, or the same work on another device (by default such a pair "
        "is not comparable: exit 2)",
    )
    gate.add_argument(
        "--min-speedup",
        type=float,
        metavar="X",
        help="minimum speedup of the candidate (base time / candidate time, one median each)",
    )
    gate.add_argument(
        "--require-parity", action="store_true", default=None, help="the candidate must carry a passing parity record"
    )
    gate.add_argument(
        "--min-attention-efficiency",
        type=float,
        metavar="PCT",
        help="the candidate's attention must reach PCT%% of the device's roofline (achieved FLOP/s "
        "against min(peak, intensity x bandwidth)); a trace where it cannot be measured fails",
    )
    timing = gate.add_argument_group(
        "time verdicts (over all profiled steps, a seeded bootstrap of the ratio of medians)"
    )
    timing.add_argument(
        "--max-slowdown",
        type=float,
        metavar="PCT",
        help="fail when the 95%% interval of candidate / base median step time lies wholly past 1 + PCT/100 "
        "(default: measured, not gated)",
    )
    timing.add_argument(
        "--max-family-slowdown",
        type=float,
        metavar="PCT",
        help="the same for each kernel family's time per step (default: measured, not gated)",
    )
    timing.add_argument(
        "--max-host-increase",
        type=float,
        metavar="PCT",
        help="host_time: the same for the host time per attention call (its op's span on the CPU, each step's mean "
        "over its calls; default: measured, not gated)",
    )
    timing.add_argument(
        "--inconclusive",
        choices=("fail", "pass"),
        help="what a gated time verdict does when the interval holds the threshold or a run has fewer than "
        "3 steps (default pass, with a warning naming the steps needed)",
    )
    timing.add_argument("--confidence", type=float, metavar="P", help="the interval's confidence (default 0.95)")
    timing.add_argument(
        "--seed", type=int, metavar="N", help="the bootstrap's seed (default fixed: the same traces, the same verdict)"
    )
    timing.add_argument("--resamples", type=int, metavar="N", help="bootstrap resamples (default 2000)")
    more = gate.add_argument_group(
        "other regressions (warn by default; --rule NAME=fail|warn|off sets any rule's level)"
    )
    more.add_argument(
        "--max-memory-increase",
        type=float,
        metavar="PCT",
        help="memory_peak: allowed growth of the peak allocated memory (default 10; skipped without profile_memory)",
    )
    more.add_argument(
        "--max-efficiency-drop",
        type=float,
        metavar="POINTS",
        help="efficiency_drop: allowed drop of attention's %% of the roofline, in points (default 5)",
    )
    more.add_argument(
        "--max-idle-increase",
        type=float,
        metavar="POINTS",
        help="idle_share: allowed growth of the device's idle share of a step, in points (default 10)",
    )
    more.add_argument(
        "--rule",
        action="append",
        metavar="NAME=LEVEL",
        help="set a rule's level, fail, warn or off (repeatable). Rules: step_time, family_time, host_time, kernel_count, "
        "hidden_copies, math_fallback, backend_fallback, required_backend, speedup, parity, attention_efficiency "
        "(fail); backend_change, efficiency_drop, idle_share, new_families, copy_growth, memory_peak, health (warn)",
    )
    outputs = gate.add_argument_group("outputs for CI")
    outputs.add_argument(
        "--json", metavar="FILE", help="write every rule, its measurements and verdict, and the op-aligned changes"
    )
    outputs.add_argument("--junit", metavar="FILE", help="write JUnit XML: one test case per rule")
    outputs.add_argument(
        "--markdown", metavar="FILE", help="write a pull-request comment: verdict, the three biggest changes, a table"
    )
    outputs.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML file with a [tool.attnscope.check] table (default: the nearest pyproject.toml at or above "
        "the current folder that has one)",
    )
    _store_options(gate)
    gate.set_defaults(run=cmd_check)

    add = sub.add_parser(
        "ingest", help="add traces or folders of them to the trace store (a folder of rank traces is one run)"
    )
    add.add_argument("paths", nargs="+", help="trace files or folders (searched recursively)")
    add.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="parse on a local Dask cluster of N worker processes (default 1: in this process)",
    )
    add.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="parse on an existing Dask cluster (e.g. tcp://host:8786); its workers must see the store and the files",
    )
    _store_options(add, ingest=True)
    add.set_defaults(run=cmd_ingest)

    sweep = sub.add_parser(
        "sweep",
        help="the article's measurements in a folder written by `python -m collectors sweep|dispatch|e2e|serve`",
        description="Where each fused variant overtakes naive as sequences grow, how peak memory grows, which "
        "backend SDPA's default dispatch ran (math: the silent fallback), the end-to-end gain beside Amdahl's "
        "prediction, and the serving mix, from sweep.csv, dispatch.csv, e2e.csv and serve.csv.",
    )
    sweep.add_argument("folders", nargs="+", metavar="DIR", help="folders holding any of those files")
    sweep.add_argument("--markdown", action="store_true", help="print Markdown instead of text")
    sweep.set_defaults(run=cmd_sweep)

    listing = sub.add_parser("ls", help="list the runs in the trace store")
    _store_options(listing, ingest=True)
    listing.set_defaults(run=cmd_ls)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from dashboard.engine.rules import RulesError, user_rules  # light: re and the names parser

    try:
        user_rules()  # the user's rules files (ATTNSCOPE_RULES), read once: a bad one is one line, before any work
    except RulesError as exc:
        print(f"attnscope: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return args.run(args)
    except BrokenPipeError:
        return EXIT_OK
    finally:
        # The answer is out; the traces parsed on the way are still being written to the store by
        # threads of their own (Store.open's background): wait for them, and say what failed.
        while _OPENED:
            for message in _OPENED.pop().wait():
                print(f"attnscope: warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
