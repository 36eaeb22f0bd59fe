"""The loader's side of the device rules (rules/devices.py): device events classified by their
accelerator's device classes, and the stream, device and copy direction filled in per batch. The
tables and the vendor detection are re-exported here for the loader's modules.
"""

from __future__ import annotations

from typing import Iterable

import polars as pl

from dashboard.engine.model.trace import GPU_CATEGORIES
from dashboard.engine.rules.devices import (  # noqa: F401  re-exported: the loader reads its tables here
    accelerator,
    ARG_DIRECTIONS,
    CATEGORIES,
    CATEGORY_ALIASES,
    COPY_DIRECTIONS,
    DEVICE,
    DEVICE_CLASSES,
    device_names,
    DEVICE_SYNC,
    DeviceClass,
    FLOW,
    gpu_vendor,
    GPU_VENDORS,
    HOST,
    LAUNCH,
    MEMCPY_KIND,
    QUIET,
    unlaunched_by_design,
    UNREAD,
)


def _arg_direction(kind_arg: pl.Expr) -> pl.Expr:
    """The memcpy kind that args.direction (the kind_arg column) names through ARG_DIRECTIONS, else null."""
    return (
        kind_arg.cast(pl.String)
        .str.to_uppercase()
        .replace_strict({value: kind for value, kind, _, _ in ARG_DIRECTIONS}, default=None, return_dtype=pl.String)
    )


def classify_device_events(frame: pl.DataFrame, raw_categories: Iterable[str]) -> pl.DataFrame:
    """Apply DEVICE_CLASSES: the device events of an accelerator that are copies or sync events
    by their name get that category, and a copy its direction in `kind`: the one its args.direction
    gave (_fill_device_fields kept it in `kind`), else the one its name says, else null; an event
    that stays no copy keeps no kind. A trace of no such accelerator comes back as it went in."""
    written = {raw.lower() for raw in raw_categories}
    implied = accelerator(written)
    rows = [row for row in DEVICE_CLASSES if row.accelerator == implied and row.category in written]
    if not rows:
        return frame
    cat = pl.col("cat").cast(pl.String)
    name = pl.col("name").cast(pl.String)
    new_cat = cat
    for row in reversed(rows):  # the first row a name matches wins
        new_cat = (
            pl.when((cat == CATEGORY_ALIASES[row.category]) & name.str.contains("(?i)" + row.name))
            .then(pl.lit(row.becomes))
            .otherwise(new_cat)
        )
    frame = frame.with_columns(new_cat.alias("_class"))
    direction = pl.lit(None, dtype=pl.String)
    for pattern, kind in reversed(COPY_DIRECTIONS):
        direction = pl.when(name.str.contains(pattern)).then(pl.lit(kind)).otherwise(direction)
    became_copy = (pl.col("_class") == "gpu_memcpy") & (cat != "gpu_memcpy")
    kind = pl.col("kind").cast(pl.String)
    kind_dtype = frame.schema["kind"]
    return frame.with_columns(
        pl.col("_class").cast(pl.Categorical).alias("cat"),
        pl.when(became_copy)
        .then(pl.coalesce(kind, direction))
        .when(pl.col("_class") == "gpu_memcpy")
        .then(kind)
        .cast(kind_dtype)
        .alias("kind"),
    ).drop("_class")


def _fill_device_fields(frame: pl.DataFrame) -> pl.DataFrame:
    """Fill GPU stream/device from legacy tids ("stream 7") and pids, and the memcpy kind (the
    name's, else args.direction's through ARG_DIRECTIONS, else args.kind as written; on a kernel,
    args.direction's, for classify_device_events to give a copy it makes); cat becomes
    Categorical. Row by row, so done per batch (in the workers, for a sliced file)."""
    gpu = pl.col("cat").is_in(GPU_CATEGORIES)
    stream_from_tid = pl.col("tid").str.extract(r"(\d+)$", 1).cast(pl.Int64, strict=False)
    return frame.with_columns(
        pl.when(gpu & pl.col("stream").is_null()).then(stream_from_tid).otherwise(pl.col("stream")).alias("stream"),
        pl.when(gpu & pl.col("device").is_null())
        .then(pl.col("pid").cast(pl.Int64, strict=False))
        .otherwise(pl.col("device"))
        .alias("device"),
        pl.when(pl.col("cat") == "gpu_memcpy")
        .then(
            pl.coalesce(
                pl.col("name").cast(pl.String).str.extract(MEMCPY_KIND.pattern, 1),
                _arg_direction(pl.col("kind_arg")),
                pl.col("kind_arg"),
            )
        )
        .when(pl.col("cat") == "kernel")
        .then(_arg_direction(pl.col("kind_arg")))
        .otherwise(None)
        .alias("kind"),
        pl.col("cat").cast(pl.Categorical),
    ).drop("kind_arg")
