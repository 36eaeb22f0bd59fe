"""`attnscope`: the dashboard's analysis, headless, for terminals, CI and pull requests.

Exit codes: 0 success, 1 a check failed (`check`), 2 unusable input (one line per file on stderr).

The package: parser.py (the arguments), commands.py (summary, compare, sweep, ingest, ls),
check.py (the gate) and config.py (its settings), text.py (the summary's text), files.py (the
store, the files read and written, the exit codes). Its names stay importable from here.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from dashboard.cli.check import _check_refs, _check_relation, _check_traces, _Refused, _write_reports, cmd_check
from dashboard.cli.commands import (
    SUMMARY_KEY,
    _labels,
    _mixed_devices,
    cmd_compare,
    cmd_ingest,
    cmd_ls,
    cmd_summary,
    cmd_sweep,
)
from dashboard.cli.config import CHECK_OPTIONS, _check_settings, _gate_rules
from dashboard.cli.files import (
    _OPENED,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    _analysis_error,
    _article_folders,
    _expand,
    _load_all,
    _open_store_run,
    _read_articles,
    _store,
    _write,
)
from dashboard.cli.parser import _store_options, build_parser
from dashboard.cli.text import (
    MAX_STEP_LINES,
    _copy_lines,
    _efficiency_line,
    _efficiency_lines,
    _head_lines,
    _health_lines,
    _human,
    _memory_lines,
    _ms,
    _rank_lines,
    _spread,
    _step_efficiency_line,
    _step_lines,
)

__all__ = [
    "CHECK_OPTIONS",
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_OK",
    "MAX_STEP_LINES",
    "SUMMARY_KEY",
    "_OPENED",
    "_Refused",
    "_analysis_error",
    "_article_folders",
    "_check_refs",
    "_check_relation",
    "_check_settings",
    "_check_traces",
    "_copy_lines",
    "_efficiency_line",
    "_efficiency_lines",
    "_expand",
    "_gate_rules",
    "_head_lines",
    "_health_lines",
    "_human",
    "_labels",
    "_load_all",
    "_memory_lines",
    "_mixed_devices",
    "_ms",
    "_open_store_run",
    "_rank_lines",
    "_read_articles",
    "_spread",
    "_step_efficiency_line",
    "_step_lines",
    "_store",
    "_store_options",
    "_write",
    "_write_reports",
    "build_parser",
    "cmd_check",
    "cmd_compare",
    "cmd_ingest",
    "cmd_ls",
    "cmd_summary",
    "cmd_sweep",
    "main",
]


def main(argv: Sequence[str] | None = None) -> int:
    _one_blas_thread()
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


def _one_blas_thread() -> None:
    """The command never calls BLAS, but numpy's OpenBLAS starts a thread per core at import that
    spins a while, beside the slice workers' start: with one thread (as the workers have) a first
    open of a 1 GB trace takes about 0.15 s less CPU and 2-4% less time (docs/speed.md). Only
    before numpy is imported (OpenBLAS reads it then); a caller's own setting wins."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
