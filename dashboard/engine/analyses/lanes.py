"""Device work swept lane by lane: the rows of a frame of device events grouped into lanes (each
(step, device), say) and put in time order within each, with what every sweep over them reads: the
end of the lane's earlier work before each row. kernels.step_device_times and host.waiting_on_host
sweep a step's work on each device this way; health._overlaps puts the device events of each
(device, stream) in time order with time_order.

The order is one numpy lexsort of the integer keys and the running maximum one polars window over
lane numbers marked sorted: polars' own multi-column sort and a window over two key columns took
5-10 times as long on the 470k kernels of a 2M-event trace. Times are ns.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from dashboard.engine.model.columns import series


def time_order(frame: pl.DataFrame, keys: tuple[str, ...]) -> np.ndarray:
    """The row numbers that put `frame` in the order of frame.sort([*keys, "ts_ns", "id"],
    nulls_last=True): integer key columns (a null after every value), then ts_ns, then id (no
    nulls in those two); one numpy lexsort (its last key sorts first)."""
    columns = []
    for key in keys:
        values = frame[key]
        if values.null_count():  # (a column without nulls needs no flag)
            columns.append(values.is_null().to_numpy())
        columns.append(values.fill_null(0).to_numpy())
    columns += [frame["ts_ns"].to_numpy(), frame["id"].to_numpy()]
    return np.lexsort(columns[::-1])


class Lanes:
    """The rows of `frame` by lane (equal values of the `keys` columns), each lane's rows by
    (ts_ns, id). The keys, ts_ns, dur_ns and id must hold no nulls (the loader's events never have
    a null ts_ns or dur_ns; a caller fills a null key, as a device's -1).

    order: the frame's row numbers in that order; starts: the position (in that order) of each
    lane's first row, lanes in the keys' order; ts, end: each row's start and end in that order;
    covered: the latest end among the lane's earlier rows (meaningless at a lane's first row,
    where `first` is True)."""

    def __init__(self, frame: pl.DataFrame, keys: tuple[str, ...]) -> None:
        key_values = [frame[key].to_numpy() for key in keys]
        self.order = order = time_order(frame, keys)
        same = np.ones(max(len(order) - 1, 0), dtype=bool)  # a row in the lane of the row before it
        for values in key_values:
            ordered = values[order]
            same &= ordered[1:] == ordered[:-1]
        self.first = first = np.concatenate((np.ones(min(len(order), 1), dtype=bool), ~same))
        self.starts = np.flatnonzero(first)
        self.ts = frame["ts_ns"].to_numpy()[order]
        self.end = self.ts + frame["dur_ns"].to_numpy()[order]
        lane = series("lane", np.cumsum(first, dtype=np.int64)).set_sorted()  # a window over sorted keys is fast
        covered = pl.DataFrame([lane, series("end", self.end)]).select(pl.col("end").cum_max().shift(1).over("lane"))
        self.covered = covered.to_series().fill_null(0).to_numpy()

    def keys(self, frame: pl.DataFrame, *names: str) -> list[pl.Series]:
        """The columns `names` of each lane's first row (one value per lane)."""
        rows = series("rows", self.order[self.starts])
        return [frame[name].gather(rows) for name in names]

    def per_lane(self, values: np.ndarray, reduce: np.ufunc) -> np.ndarray:
        """`reduce` (np.add, np.maximum) over each lane's values (`values` in the lanes' order)."""
        return reduce.reduceat(values, self.starts) if len(self.starts) else values[:0]
