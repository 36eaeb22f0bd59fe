"""numpy arrays and the scanner's columns -> polars Series, through the Arrow PyCapsule interface.

polars 2 imports numpy.ma the first time it builds a Series from a numpy array (7-15 ms, paid by
every process's first trace, a large share of a small trace's time). A column handed over as an
Arrow array (the scanner's own buffer, or `_scan.arrow`'s copy of a numpy array) skips numpy's
side of polars altogether, in every supported polars version. Without the C extension, the plain
constructor does the same job.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

try:  # the C extension (setup.py), which also holds the scanner
    from dashboard.engine import _scan
except ImportError:  # pragma: no cover - a build without a C compiler
    _scan = None

_FORMATS = {np.dtype(np.int64): "l", np.dtype(np.int32): "i", np.dtype(np.uint32): "I", np.dtype(np.bool_): "b"}


class _Capsules:
    """What `pl.Series` takes as an Arrow array: an object whose __arrow_c_array__ gives the pair."""

    __slots__ = ("pair",)

    def __init__(self, pair: tuple[Any, Any]) -> None:
        self.pair = pair

    def __arrow_c_array__(self, requested_schema: Any = None) -> tuple[Any, Any]:
        return self.pair


def series(name: str, values: np.ndarray, dtype: Any = None, valid: np.ndarray | None = None) -> pl.Series:
    """pl.Series(name, values, dtype=dtype) for a 1-d numpy array, null where the bool array
    `valid` is False, without numpy.ma where the array's type has an Arrow twin here (int64,
    int32, uint32, bool, in native order)."""
    fmt = _FORMATS.get(values.dtype) if _scan is not None and values.ndim == 1 else None
    if fmt is None:
        out = pl.Series(name, values, dtype=dtype)
        if valid is None:
            return out
        return pl.select(pl.when(pl.Series(valid, dtype=pl.Boolean)).then(out)).to_series().alias(name)
    mask = None if valid is None else np.ascontiguousarray(valid, dtype=np.bool_)
    out = from_arrow(name, _scan.arrow(np.ascontiguousarray(values), fmt, mask))
    return out if dtype is None or out.dtype == dtype else out.cast(dtype)


def from_arrow(name: str, pair: tuple[Any, Any]) -> pl.Series:
    """A column handed over as an Arrow array: the (schema, array) capsule pair that the scanner
    or `_scan.arrow` makes. A pair is taken once (polars moves the array out of it)."""
    return pl.Series(_Capsules(pair)).alias(name)
