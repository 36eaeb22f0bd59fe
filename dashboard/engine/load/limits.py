"""The most JSON one trace may hold (MAX_JSON_BYTES, $ATTNSCOPE_MAX_JSON_BYTES,
load_trace(max_json_bytes=...)) and the one-line refusals of a file over it, in bytes.
"""

from __future__ import annotations


from dashboard.engine.load.reading import TraceError
from dashboard.engine.model import settings


# The most JSON one trace may hold, bytes: the size of a plain file or upload, or what a .json.gz
# inflates to. 4 GiB is four times the largest real traces seen (about 1 GB of JSON), and a
# trace that large still opens in the memory of a 16 GB machine (a first open peaks at about
# 1-2x the JSON); past it a file is far more likely a gzip bomb (4 MB of .gz inflating to 4 GiB
# of whitespace) or a mistake than a trace, and is refused with one line instead of exhausting a
# shared server's memory. $ATTNSCOPE_MAX_JSON_BYTES (bytes) or load_trace(max_json_bytes=...)
# raise or lower it.
MAX_JSON_BYTES = 4 << 30
MAX_JSON_ENV = settings.MAX_JSON_BYTES.name


def json_limit(value: int | None = None, label: str = "") -> int:
    """The limit on a trace's JSON bytes: `value` when given, else $ATTNSCOPE_MAX_JSON_BYTES,
    else MAX_JSON_BYTES. A bad setting is a TraceError (one line; `label` first when given)."""
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"max_json_bytes must be a whole number of bytes above 0, not {value!r}")
        return value
    try:
        limit = settings.MAX_JSON_BYTES.whole_bytes()
    except settings.SettingError as exc:
        where = f"{label}: not read: " if label else ""
        raise TraceError(
            f"{where}{exc} (e.g. {8 << 30} for 8 GiB; unset it for the default, {_amount(MAX_JSON_BYTES)})"
        ) from None
    return MAX_JSON_BYTES if limit is None else limit


def _amount(size: int) -> str:
    """A byte count as people read it: '4.0 GiB (4,294,967,296 bytes)', or '1,000 bytes'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit} ({size:,} bytes)"
    return f"{size:,} bytes"


def _too_large(label: str, size: int, limit: int) -> TraceError:
    return TraceError(
        f"{label}: {_amount(size)} of JSON is more than the limit of {_amount(limit)} (set {MAX_JSON_ENV} to raise it)"
    )


def _inflates_too_far(label: str, limit: int) -> TraceError:
    return TraceError(
        f"{label}: inflates to more than {_amount(limit)} of JSON (the limit; set {MAX_JSON_ENV} to raise it)"
    )
