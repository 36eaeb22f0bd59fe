"""The one place numbers are written for a reader (dashboard/engine/model/formatting.py): each
function pinned on the values its callers meet, so that merging the copies changed no output."""

from __future__ import annotations

from dashboard.engine.model import formatting as f


def test_durations_dollars_and_counts():
    assert (f.format_us(16_600.0), f.format_us(2.24), f.format_us(None), f.format_us(float("nan"))) == (
        "16.6 ms",
        "2.24 µs",
        "",
        "",
    )
    assert (f.ns_duration(812_400), f.ns_duration(95_700_000)) == ("812.4 µs", "95.7 ms")
    assert (f.ms_cell(None), f.ms_cell(1.23456), f.ms_cell(12.345)) == ("-", "1.235", "12.3")
    assert (f.format_usd(1.234), f.format_usd(0.0721), f.format_usd(7.225e-05), f.format_usd(None)) == (
        "$1.23",
        "$0.0721",
        "$0.0000722",
        "",
    )
    assert (f.format_count(1575), f.format_count(6.5)) == ("1,575", "6.5")
    assert (f.times_cell(2.345), f.times_cell(None)) == ("2.35x", "-")


def test_signed_changes_and_ratios():
    assert (f.signed(1234.54, 1), f.signed(-0.7, 1), f.signed(-0.01, 1)) == ("+1,234.5", "-0.7", "+0.0")
    assert (f.ratio_change(1.052), f.ratio_change(float("inf"))) == ("+5.2%", "(no ratio)")
    assert (f.plain_decimal(7.225e-05, 4), f.plain_decimal(0.0, 4), f.plain_decimal(1234.5, 4)) == (
        "0.00007225",
        "0",
        "1,234",
    )


def test_the_four_ways_of_writing_bytes_stay_apart():
    """Each caller's own way, kept as it was: none of their outputs changed in the merge."""
    assert [f.format_bytes(v) for v in (None, 4, 16_800_000, 2.5e15)] == ["", "4 B", "16.8 MB", "2500.0 TB"]
    assert [f.bytes_words(v) for v in (None, 4, 67_100_000, 2.75e9)] == ["unknown", "4 B", "67.1 MB", "2.75 GB"]
    assert [f.bytes_cell(v) for v in (None, 4, 16_800_000, 2.5e12)] == ["-", "4 B", "16.8 MB", "2500.0 GB"]
    assert [f.bytes_rounded(v) for v in (12, 4_000, 68_000_000, 1.25e9)] == ["12 B", "4 kB", "68 MB", "1.25 GB"]


def test_a_change_that_rounds_to_zero_reads_plus_zero_never_minus_zero():
    from dashboard.engine.model.formatting import ratio_change, signed_change

    assert signed_change(-0.04) == "+0.0" and signed_change(0.04) == "+0.0"
    assert signed_change(-0.05001) == "-0.1" and signed_change(1736.34) == "+1736.3"  # no thousands separator
    assert ratio_change(0.99999) == "+0.0%" and ratio_change(1.052) == "+5.2%" and ratio_change(0.9) == "-10.0%"
    assert ratio_change(float("nan")) == "(no ratio)"
