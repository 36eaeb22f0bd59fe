"""Every number the project writes for a reader, formatted in one place: durations, dollars, counts,
signed changes, ratios, bytes and plain decimals. A leaf (it imports nothing of the project) on the engine's
bottom floor, so that the engine's sentences (findings, the explained sentence, the gate), the charts,
the reports and the views all write a number the same way.

Where two callers wrote bytes differently, both ways stay, each a named function, so no output
changes: format_bytes (one decimal, '' for None: the findings, the catalog, the CLI), bytes_words
(three significant digits, 'unknown': the roofline's hover), bytes_cell (one decimal up to GB, '-':
the article's tables) and bytes_rounded (whole MB and kB, two decimals in GB: the op alignment)."""

from __future__ import annotations

import math

import numpy as np


def format_us(value: float | None) -> str:
    """µs as a short label: '16.6 ms' or '2.24 µs'; '' for a missing value."""
    if value is None or value != value:
        return ""
    if value >= 1000:
        return f"{value / 1000:.3g} ms"
    return f"{value:.3g} µs"


def ns_duration(ns: int | float) -> str:
    """ns as µs, thousands separated, one decimal; in ms from 10 ms: '812.4 µs', '95.7 ms' (the health checks' sentences)."""
    return f"{ns / 1000:,.1f} µs" if ns < 10_000_000 else f"{ns / 1e6:,.1f} ms"


def ms_cell(value: float | None) -> str:
    """ms for a table cell, without the unit: three decimals under 10 ms, one from there; '-' for None."""
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def format_usd(value: float | None) -> str:
    """Dollars as people write them: '$1.23', '$0.0721', '$0.000205' (never '$7.225e-05' or '$200µ')."""
    if value is None or value != value:
        return ""
    if value == 0 or abs(value) >= 1:
        return f"${value:,.2f}"
    digits = max(2, 2 - int(np.floor(np.log10(abs(value)))))
    return f"${value:.{digits}f}"


def format_count(value: float) -> str:
    """1575 -> '1,575'; 6.5 -> '6.5'."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def signed(value: float, digits: int) -> str:
    """A change with its sign at `digits` decimals, thousands separated: '+1,234.5', '-0.7'; one
    that rounds to zero reads '+0.0', never '-0.0'."""
    text = f"{value:+,.{digits}f}"
    return "+" + text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def signed_change(value: float) -> str:
    """A change in percent or points at one decimal, without thousands separators: '+5.2', '-0.7',
    '+1736.3'; one that rounds to zero reads '+0.0', never '-0.0'."""
    text = f"{value:+.1f}"
    return "+" + text[1:] if text == "-0.0" else text


def ratio_change(ratio: float) -> str:
    """A ratio (candidate / base) as a signed change in percent: 1.052 -> '+5.2%'; '(no ratio)' when not finite."""
    if not math.isfinite(ratio):
        return "(no ratio)"
    return f"{signed_change((ratio - 1) * 100)}%"


def times_cell(value: float | None) -> str:
    """A factor for a table cell: '2.35x'; '-' for None."""
    return "-" if value is None else f"{value:.2f}x"


def plain_decimal(value: float, significant: int) -> str:
    """A number with `significant` significant digits and never an exponent: 7.225e-05 -> '0.0000723'."""
    if value == 0 or value != value:
        return "0" if value == 0 else ""
    digits = max(0, significant - 1 - int(math.floor(math.log10(abs(value)))))
    return f"{value:,.{digits}f}"


def format_bytes(value: float | None) -> str:
    """Bytes as a short string in decimal units, like bandwidth in GB/s: '16.8 MB'; '' for None."""
    if value is None:
        return ""
    size = float(value)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def bytes_words(value: float | None) -> str:
    """Bytes in decimal units for a hover: '2.75 GB', '67.1 MB', '4 B'; 'unknown' for None."""
    if value is None or value != value:
        return "unknown"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def bytes_cell(value: float | None) -> str:
    """Bytes for a table cell: one decimal in kB, MB or GB (never TB), whole bytes below; '-' for None."""
    if value is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def bytes_rounded(n: float) -> str:
    """Bytes at a glance: '1.25 GB', '68 MB', '4 kB', '12 B'."""
    return (
        f"{n / 1e9:.2f} GB"
        if n >= 1e9
        else f"{n / 1e6:.0f} MB"
        if n >= 1e6
        else f"{n / 1e3:.0f} kB"
        if n >= 1e3
        else f"{n:.0f} B"
    )
