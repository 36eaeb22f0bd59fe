"""`python -m collectors article --out DIR`: every measurement of the article into one folder, the
one script to run on a GPU machine (or on the CPU for the bundled sample):

    DIR/sweep.csv .parquet .json      python -m collectors sweep     time, TFLOP/s, memory per point
    DIR/dispatch.csv .json            python -m collectors dispatch  which backend SDPA ran, per cell
    DIR/e2e.csv .json, e2e.*.json.gz  python -m collectors e2e       a small decoder, prefill and decode
    DIR/serve.csv .json               python -m collectors serve     a serving mix, padded and packed

Each mode runs with its own defaults for the device (see each one's --help). `--quick` narrows
the sweep to head_dim 64 and one dtype (bf16 on a GPU, fp32 on the CPU) so that the whole folder
takes minutes: the bundled CPU sample is `--device cpu --quick`. A mode that fails is reported
and the others still run; the exit status is the worst of theirs.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from collectors.options import PROG, Parser, UsageError, device, out_dir

MODES = ("sweep", "dispatch", "e2e", "serve")


def plan(dev: str, out: Path, quick: bool, gpu: bool) -> list[tuple[str, list[str]]]:
    """The (mode, argv) of each run, in order."""
    common = ["--device", dev, "--out", str(out)]
    sweep = [*common]
    if quick:
        sweep += ["--head-dim", "64", "--dtype", "bf16" if gpu else "fp32"]
    return [("sweep", sweep), ("dispatch", [*common]), ("e2e", [*common]), ("serve", [*common])]


def main(argv: list[str]) -> int:
    p = Parser(prog=f"{PROG} article", description=__doc__.split("\n\n")[0].strip())
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when available, else cpu"
    )
    p.add_argument("--out", type=Path, required=True, help="output folder, created if missing")
    p.add_argument("--quick", action="store_true", help="sweep head_dim 64 and one dtype only (minutes, not hours)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="run only these (default all)")
    try:
        args = p.parse_args(argv)
        dev = device(args.device)
        out = out_dir(args.out)
    except UsageError as exc:
        print(f"{PROG} article: error: {exc}", file=sys.stderr)
        return 2
    worst = 0
    for mode, mode_argv in plan(dev.type, out, args.quick, dev.type == "cuda"):
        if mode not in args.modes:
            continue
        print(f"== {PROG} {mode} {' '.join(mode_argv)}", file=sys.stderr, flush=True)
        try:
            status = int(importlib.import_module(f"collectors.{mode}").main(mode_argv))
        except Exception as exc:  # noqa: BLE001 - one mode's failure must not cost the others
            print(f"{PROG} article: {mode} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 1
        worst = max(worst, status)
    return worst
