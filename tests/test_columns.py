"""Columns handed to polars as Arrow arrays (dashboard/engine/model/columns.py, _scan.arrow) against
the obvious constructions: a Python list of the values, with None where a value is not valid."""

from __future__ import annotations

import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dashboard.engine.model import columns

ROOT = Path(__file__).resolve().parent.parent
needs_c = pytest.mark.skipif(columns._scan is None, reason="the C extension is not built here (no C compiler?)")

LENGTHS = (0, 1, 7, 8, 9, 63, 64, 65, 1000)
TYPES = {np.int64: pl.Int64, np.int32: pl.Int32, np.uint32: pl.UInt32, np.bool_: pl.Boolean}


def _values(rng: random.Random, kind: type, n: int) -> np.ndarray:
    if kind is np.bool_:
        return np.array([rng.random() < 0.5 for _ in range(n)], dtype=np.bool_)
    info = np.iinfo(kind)
    return np.array(
        [rng.choice((info.min, info.max, 0, rng.randint(info.min, info.max))) for _ in range(n)], dtype=kind
    )


@needs_c
@pytest.mark.parametrize("kind", list(TYPES), ids=lambda k: np.dtype(k).name)
def test_a_numpy_array_becomes_the_series_of_its_values(kind):
    rng = random.Random(1)
    for n in LENGTHS:
        values = _values(rng, kind, n)
        valid = np.array([rng.random() < 0.7 for _ in range(n)], dtype=np.bool_)
        plain = columns.series("x", values)
        assert plain.name == "x" and plain.dtype == TYPES[kind]
        assert plain.to_list() == values.tolist()
        masked = columns.series("x", values, valid=valid)
        assert masked.to_list() == [v if ok else None for v, ok in zip(values.tolist(), valid.tolist())]
        assert masked.null_count() == n - int(valid.sum())
        assert columns.series("x", values, valid=np.zeros(n, dtype=np.bool_)).to_list() == [None] * n


@needs_c
def test_strided_and_other_arrays_come_out_as_the_plain_constructor_makes_them():
    values = np.arange(20, dtype=np.int64)
    assert columns.series("s", values[::3]).to_list() == list(range(0, 20, 3))  # not contiguous: copied first
    assert columns.series("d", values, dtype=pl.Int32).dtype == pl.Int32
    for other in (values.astype(np.float64), values.astype(np.int16)):  # no Arrow twin here
        assert columns.series("o", other).to_list() == pl.Series("o", other).to_list()
    masked = columns.series("f", values.astype(np.float64), valid=values % 2 == 0)
    assert masked.to_list() == [float(v) if v % 2 == 0 else None for v in range(20)]


@needs_c
def test_bytes_become_their_values_with_their_validity():
    rng = random.Random(2)
    for n in LENGTHS:
        ints = [rng.randint(-(1 << 63), (1 << 63) - 1) for _ in range(n)]
        valid = bytes(rng.randrange(2) for _ in range(n))
        got = columns.from_arrow("i", columns._scan.arrow(struct.pack(f"={n}q", *ints), "l", valid))
        assert got.dtype == pl.Int64 and got.name == "i"
        assert got.to_list() == [v if ok else None for v, ok in zip(ints, valid)]
        codes = [rng.randrange(1 << 32) for _ in range(n)]
        assert columns.from_arrow("c", columns._scan.arrow(struct.pack(f"={n}I", *codes), "I", None)).to_list() == codes
        assert (
            columns.from_arrow(
                "c", columns._scan.arrow(struct.pack(f"={n}I", *codes), "I", bytes([1]) * n)
            ).null_count()
            == 0
        )


@needs_c
def test_a_column_of_a_megabyte_or_more_reads_the_same():
    """Copies of 1 MiB or more are pages of their own (mmap), returned when polars frees them."""
    values = np.arange(-150_000, 150_000, dtype=np.int64) * 7919  # 2.4 MB
    got = columns.series("big", values, valid=values % 3 != 0)
    assert got.to_list() == [v if v % 3 != 0 else None for v in values.tolist()]
    assert columns.series("big", values).sum() == int(values.sum())
    del got  # released: the pages go back (a double unmap or a use after it would crash here)
    assert columns.series("small", values[:10]).to_list() == values[:10].tolist()


def test_without_the_c_extension_the_plain_constructor_gives_the_same(monkeypatch):
    """A build without a C compiler takes pl.Series and a when/then for the nulls."""
    rng = random.Random(3)
    values = _values(rng, np.int64, 100)
    valid = np.array([rng.random() < 0.5 for _ in range(100)], dtype=np.bool_)
    monkeypatch.setattr(columns, "_scan", None)
    got = columns.series("x", values, valid=valid)
    assert got.name == "x" and got.dtype == pl.Int64
    assert got.to_list() == [v if ok else None for v, ok in zip(values.tolist(), valid.tolist())]
    assert columns.series("d", values.astype(np.int32), dtype=pl.Int64).dtype == pl.Int64


@needs_c
def test_bad_arguments_are_refused_with_a_message():
    for args, says in (
        ((b"1234567", "l", None), "whole number"),
        ((b"12345678", "q", None), "unknown format"),
        ((b"12345678", "l", b"12"), "one byte a value"),
    ):
        with pytest.raises(ValueError, match=says):
            columns._scan.arrow(*args)


@needs_c
def test_a_first_load_and_summary_never_imports_numpy_ma():
    """polars 2 imports numpy.ma (7-15 ms) the first time it builds a Series from a numpy array:
    a process's first trace paid it. Every column now goes through Arrow."""
    code = (
        "import sys; from dashboard.engine import load_trace, summarize\n"
        "for name in sys.argv[1:]: summarize(load_trace(name))\n"
        "print('numpy.ma' in sys.modules)"
    )
    traces = sorted(str(p) for p in (ROOT / "tests" / "data").glob("*.json.gz"))
    done = subprocess.run([sys.executable, "-c", code, *traces], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
