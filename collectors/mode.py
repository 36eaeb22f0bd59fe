"""What the measuring modes of `python -m collectors` (sweep, dispatch, e2e, serve) do the same way:
the parser's --out and --device, the --variants list, main()'s handling of bad input, the status
of a variant's failed call, giving device memory back, the table's files and the closing line.

Each mode keeps what is its own (its grid or workload, its measurements, its .json fields, its
stdout table); its columns are its collectors.tables.Table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import polars as pl
import torch

from collectors import measure
from collectors.options import Parser, UsageError
from collectors.tables import Table
from collectors.variants import VARIANTS, Variant

ConfigT = TypeVar("ConfigT")

FORCED = ("math", "flash", "efficient", "cudnn")
"""Variant backends that force one SDPA backend: a RuntimeError from their call is a refusal."""


def parser(prog: str, doc: str) -> Parser:
    """A mode's parser: its description (the first paragraph of `doc`), --out and --device."""
    p = Parser(prog=prog, description=doc.split("\n\n")[0].strip())
    p.add_argument("--out", type=Path, required=True, help="output folder, created if missing")
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when available, else cpu"
    )
    return p


def variant_names(given: Sequence[str]) -> list[str]:
    """The names --variants gave (commas also separate); UsageError for an unknown name or none."""
    names = [n for item in given for n in item.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise UsageError(f"unknown variant {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    if not names:
        raise UsageError("--variants: no variant named")
    return names


def main(
    prog: str, argv: list[str], build_config: Callable[[list[str]], ConfigT], run: Callable[[ConfigT], int]
) -> int:
    """run(build_config(argv)), its exit status; 2 and one error line (no traceback) for bad input,
    argparse's own status for --help."""
    try:
        cfg = build_config(argv)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    return run(cfg)


def failed_call(exc: BaseException, variant: Variant, said: Sequence[str] = ()) -> tuple[str, str]:
    """(status, reason) of a variant's call that raised (collectors.measure.outcome): a RuntimeError
    is a refusal when the variant forces one SDPA backend; said: what PyTorch said meanwhile."""
    return measure.outcome(exc, forced=variant.backend in FORCED, said=said)


def release(dev: torch.device) -> None:
    """Give the CUDA caching allocator's free blocks back after a point or a failed call (nothing on the CPU)."""
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def write(
    table: Table,
    frame: pl.DataFrame,
    out: Path,
    provenance: dict[str, Any],
    fields: dict[str, Any],
    *,
    row_order: str,
    counts: dict[str, Any],
) -> None:
    """DIR/<name>.csv (and .parquet when the table keeps one) and DIR/<name>.json: the mode, the
    provenance (collectors.measure.provenance), the mode's own fields, the row order, the columns
    (the table's meanings) and `counts` (rows, statuses, ... as the mode reports them)."""
    frame.write_csv(out / table.csv)
    if table.parquet:
        frame.write_parquet(out / f"{table.name}.parquet")
    meta = {
        "mode": table.name,
        **provenance,
        **fields,
        "row_order": row_order,
        "columns": table.described(),
        **counts,
    }
    (out / f"{table.name}.json").write_text(json.dumps(meta, indent=2) + "\n")


def closing_line(table: Table, frame: pl.DataFrame, out: Path, *also: str) -> str:
    """'N rows (ok n, ...) -> DIR/<name>.csv, <also>...': what a mode prints when its table is written."""
    counts = ", ".join(f"{s} {n}" for s, n in table.status_counts(frame).items() if n)
    return f"{frame.height} rows ({counts}) -> {', '.join([str(out / table.csv), *also])}"


def exit_status(table: Table, frame: pl.DataFrame, prog: str, out: Path) -> int:
    """A mode's exit status once its table is written: 1 (and one line on stderr naming the rows)
    when any row is an `error` (a bug in a variant, a collector or PyTorch: it must fail, not read
    as a skip), else 0."""
    errors = int((frame["status"] == "error").sum())
    if not errors:
        return 0
    print(
        f"{prog}: error: {errors} {'row is' if errors == 1 else 'rows are'} `error` "
        f"(see the reason column of {out / table.csv})",
        file=sys.stderr,
    )
    return 1


def number(value: Any, fmt: str, scale: float = 1.0) -> str:
    """A cell of a mode's stdout table: value * scale in `fmt`, '-' for None."""
    return "-" if value is None else format(value * scale, fmt)
