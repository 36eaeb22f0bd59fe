"""The commands but the gate (check.py): summary, compare, sweep, ingest and ls."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from dashboard.cli.files import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    _analysis_error,
    _article_folders,
    _expand,
    _load_all,
    _read_articles,
    _store,
    _write,
)
from dashboard.cli.text import _human, _rank_lines
from dashboard.engine.model.errors import TraceError

if TYPE_CHECKING:
    from dashboard.engine.model.trace import Trace

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
        loaded, failed = _load_all([path], store)  # first: it may start the slice workers before the imports
        from dashboard.engine.analyses.summary import summarize

        errors += failed
        for trace in loaded:
            by_path[path] = trace
            try:
                summaries.append(summarize(trace))
                warned += summaries[-1]["warnings"]
            except Exception as exc:  # one strange file must not cost the others their summary
                errors.append(_analysis_error(trace, exc))
                warned += trace.warnings
    summaries, failed = _attributed(summaries, files, by_path, store, args.graph_source)
    errors += failed
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


def _attributed(
    summaries: list[dict], files: list[str], by_path: dict[str, Trace], store, given: str | None
) -> tuple[list[dict], list[str]]:
    """The summaries with their graph replays attributed (--graph-source, else the source a .graphs
    run's metadata names), and one error line per source that could not be read."""
    from dashboard.cli.graphs import Sources, attribute, source_path, with_attribution

    sources = Sources(store)
    out = []
    for path, summary in zip(files, summaries):
        if not summary["graphs"]["launches"] or not source_path(path, summary.get("collector"), given):
            out.append(summary)
            continue
        trace = by_path.get(path)
        if trace is None:  # answered from the store: the trace itself reopens from it
            loaded = sources.get(path)
            trace = loaded
        out.append(with_attribution(summary, attribute(trace, path, sources, given) if trace is not None else None))
    return out, sources.errors


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


def cmd_compare(args: argparse.Namespace) -> int:
    from dashboard import article_report
    from dashboard.engine.comparison import Comparison
    from dashboard.report import (
        ARTICLE_ONLY_HTML,
        render_html,
        render_json,
        render_markdown,
        render_text,
    )  # plotly loads only when asked for
    from dashboard.phase_lines import with_phases

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
            review = Comparison(  # the dashboard's facade: the same tables, computed as the formats ask
                runs,
                baseline,
                args.usd_per_gpu_hour,
                args.usd_per_cpu_hour,
                copy_alarm_share=args.copy_alarm_share / 100,
                copy_alarm_bytes=args.copy_alarm_bytes,
            )
            markdown = render_markdown(review)
            text = render_text(review)  # what the terminal gets: plain text, Markdown only where asked for
            markdown, text = with_phases(runs, markdown, text)  # serving runs: a line per phase
            markdown, text, graphs = _with_graph_lines(
                runs, dict(zip(runs, paths)), _store(args), args.graph_source, markdown, text
            )
            html = _with_sections(render_html(review), runs, graphs) if args.html else ""
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


def _with_sections(html: str, runs: dict[str, Trace], graphs: list[str]) -> str:
    """The HTML report with the serving phases' and the CUDA graph replays' lines, as the text has them."""
    from dashboard.engine.analyses.summary import summarize
    from dashboard.phase_lines import compare_lines as phase_lines
    from dashboard.report import with_text_sections

    phases = phase_lines({label: summarize(trace) for label, trace in runs.items()})
    return with_text_sections(html, [("Serving phases", phases[2:]), ("CUDA graph replays", graphs)])


def _with_graph_lines(
    runs: dict[str, Trace], paths: dict[str, str], store, given: str | None, markdown: str, text: str
) -> tuple[str, str, list[str]]:
    """compare's text and Markdown with a section on the runs whose kernels a CUDA graph replayed,
    and that section's lines."""
    from dashboard.cli.graphs import Sources, compare_lines

    sources = Sources(store)
    lines = compare_lines(runs, paths, sources, given)
    for error in sources.errors:
        print(f"attnscope: warning: {error}", file=sys.stderr)
    if not lines:
        return markdown, text, lines
    from dashboard.phase_lines import _before_footer

    md = ["", "### CUDA graph replays", "", "```", *lines, "```"]
    plain = ["", "CUDA graph replays", *lines]
    return (
        _before_footer(markdown, [""] + md, "<sub>attnscope "),
        _before_footer(text, [""] + plain, "attnscope "),
        lines,
    )


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
