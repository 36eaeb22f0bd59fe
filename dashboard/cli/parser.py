"""The argument parser of `attnscope`: one function per command's arguments."""

from __future__ import annotations

import argparse

# Light modules only at the top: `attnscope --help` must not pay for polars and the analyses
# (benchmarks/bench_cold_start.py). Each command imports what it needs when it runs.
from dashboard.cli.check import cmd_check
from dashboard.cli.commands import cmd_compare, cmd_ingest, cmd_ls, cmd_summary, cmd_sweep
from dashboard.engine.model.constants import COPY_ALARM_BYTES, COPY_ALARM_SHARE, DEFAULT_USD_PER_GPU_HOUR
from dashboard.cli.graphs import add_option as graph_source
from dashboard.engine.rules import BACKENDS


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
    for add_command in (_summary, _compare, _check, _ingest, _sweep, _ls):
        add_command(sub)
    return parser


def _summary(sub: argparse._SubParsersAction) -> None:
    summary = sub.add_parser("summary", help="summarize traces: kernels per step, memcpy, copies, attention backend")
    summary.add_argument(
        "traces",
        nargs="+",
        help="torch.profiler traces (.json or .json.gz), or folders of them (a folder of rank traces "
        "also gets the slowest rank of each step)",
    )
    summary.add_argument("--json", action="store_true", help="print a JSON array, one object per file")
    graph_source(summary)
    _store_options(summary)
    summary.set_defaults(run=cmd_summary)


def _compare(sub: argparse._SubParsersAction) -> None:
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
    graph_source(compare)
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


def _check(sub: argparse._SubParsersAction) -> None:
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
    _check_rules(gate)
    _check_timing(gate)
    _check_others(gate)
    _check_outputs(gate)
    _store_options(gate)
    gate.set_defaults(run=cmd_check)


def _check_rules(gate: argparse.ArgumentParser) -> None:
    """The rules that fail by default, their flags."""
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


def _check_timing(gate: argparse.ArgumentParser) -> None:
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


def _check_others(gate: argparse.ArgumentParser) -> None:
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


def _check_outputs(gate: argparse.ArgumentParser) -> None:
    outputs = gate.add_argument_group("outputs for CI")
    outputs.add_argument(
        "--json", metavar="FILE", help="write every rule, its measurements and verdict, and the op-aligned changes"
    )
    outputs.add_argument("--junit", metavar="FILE", help="write JUnit XML: one test case per rule")
    graph_source(outputs)  # the JSON and Markdown reports attribute CUDA-graph replays through it
    outputs.add_argument(
        "--markdown", metavar="FILE", help="write a pull-request comment: verdict, the three biggest changes, a table"
    )
    outputs.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML file with a [tool.attnscope.check] table (default: the nearest pyproject.toml at or above "
        "the current folder that has one)",
    )


def _ingest(sub: argparse._SubParsersAction) -> None:
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


def _sweep(sub: argparse._SubParsersAction) -> None:
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


def _ls(sub: argparse._SubParsersAction) -> None:
    listing = sub.add_parser("ls", help="list the runs in the trace store")
    _store_options(listing, ingest=True)
    listing.set_defaults(run=cmd_ls)
