"""JSON bytes -> batches of event structs (msgspec) or scanned parts: decoding in batches, bytes
that are not UTF-8 read as U+FFFD, and a file cut off mid-write closed after its last whole
event (or, when that fails, salvaged event by event); Trace.cut says where.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterator, TypeVar

import msgspec

from dashboard.engine.load.frames import _Part
from dashboard.engine.load.reading import (
    TraceError,
    _CutPoint,
    _Event,
    _LEADING_SPACE,
    _Reading,
    _decode_events,
    _decode_top,
)
from dashboard.engine.load.scanner import _scanned_document, _scanned_part


# Events are decoded this many at a time, so that only one batch of Python structs is alive at once.
BATCH = 25000
# traceEvents arrays up to this size are decoded in one go (their structs are a few tens of MB).
ONE_BATCH_BYTES = 48 << 20
_decode_raw_list = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_one = msgspec.json.Decoder(_Event).decode
T = TypeVar("T")


def _utf8_safe(decode: Callable[[bytes], T], raw: bytes, reading: _Reading) -> T:
    """decode(raw); bytes that are not UTF-8 inside a string are read as U+FFFD (and counted for
    one warning) instead of failing the file. The error path alone pays for the re-encode."""
    try:
        return decode(raw)
    except UnicodeDecodeError:  # how msgspec before 0.19 reports it
        pass
    except msgspec.DecodeError as exc:
        if "utf-8" not in str(exc).lower():
            raise
    raw = bytes(raw)
    text = raw.decode("utf-8", errors="replace")
    reading.replaced += text.count("\ufffd") - raw.decode("utf-8", errors="ignore").count("\ufffd")
    return decode(text.encode("utf-8"))


def _decode(data: bytes, reading: _Reading) -> tuple[dict[str, Any], Iterator[list[_Event] | _Part]]:
    """Split the document into top-level metadata and batches of typed events; salvage a cut-off file."""
    label = reading.label
    start = _LEADING_SPACE.match(data).end()  # no strip(): that would copy a 200 MB buffer
    if start == len(data):
        raise TraceError(f"{label}: the file is empty")
    first = data[start : start + 1]
    if first not in (b"{", b"["):
        raise TraceError(f"{label}: not JSON (it starts with {data[start : start + 16]!r})")
    try:
        if first == b"[":  # the bare "JSON array" flavour of the Chrome trace format
            return {}, _batches(_decode_raw_list(data), reading)
        # the C scanner reads a whole document (or leaves it to msgspec); a larger one is read in
        # batches below, for the progress bar
        scanned = _scanned_document(data) if len(data) <= ONE_BATCH_BYTES else None
        if scanned is not None:
            members, part = scanned
            meta = {key: _utf8_safe(msgspec.json.decode, raw, reading) for key, raw in members}
            if reading.progress:
                reading.progress(0.0)
            return meta, iter([part])
        top = _decode_top(data)
    except msgspec.ValidationError:
        raise TraceError(
            f"{label}: JSON but not a trace: the top level is neither an object nor an array of events"
        ) from None
    except msgspec.DecodeError as exc:
        if _ends_mid_value(exc, len(data)):
            return _decode_cut(data, first, reading)
        raise TraceError(f"{label}: not valid JSON ({exc})") from None
    raw_events = top.pop("traceEvents", None)
    if raw_events is None:
        keys = ", ".join(list(top)[:5]) or "none"
        raise TraceError(f"{label}: JSON but not a trace: no traceEvents key (top-level keys: {keys})")
    meta = {key: _utf8_safe(msgspec.json.decode, raw, reading) for key, raw in top.items()}
    if len(raw_events) <= ONE_BATCH_BYTES:  # small enough to decode at once: one pass fewer
        try:
            part = _scanned_part(raw_events)  # the C scanner's columns, or msgspec's structs
            events = part if part is not None else _utf8_safe(_decode_events, raw_events, reading)
            if reading.progress:
                reading.progress(0.0)
            return meta, iter([events])
        except msgspec.ValidationError:
            pass  # not a list, or odd events: the batched path says which
    try:
        raws = _decode_raw_list(raw_events)
    except msgspec.ValidationError:
        raise TraceError(f"{label}: JSON but not a trace: traceEvents is not a list") from None
    return meta, _batches(raws, reading)


_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")


def _ends_mid_value(exc: msgspec.DecodeError, size: int) -> bool:
    """True when msgspec's error means the input ends mid-document: "truncated", or a number or
    literal cut short, which it reports as malformed at the last byte."""
    found = _ERROR_BYTE.search(str(exc))
    return "truncated" in str(exc) or (found is not None and int(found.group(1)) >= size - 1)


def _decode_cut(data: bytes, first: bytes, reading: _Reading) -> tuple[dict[str, Any], Iterator[list[_Event] | _Part]]:
    """A document that ends mid-write: closed after its last whole event and read on the fast
    path, or, when no cut point near the end closes it, salvaged event by event."""
    closed = _close_cut_file(data, first)
    if closed is not None:
        try:
            decoded = _decode(closed[0], reading)
        except TraceError:
            pass  # closed inside the metadata before traceEvents: the salvage says so
        else:
            reading.cut = _CutPoint(closed[1], len(data), "read every complete event before the cut", closed[2])
            return decoded
    meta, events, kept, whole = _salvage(data, reading)
    reading.cut = _CutPoint(kept, len(data), f"salvaged {len(events):,} complete events", whole)
    return meta, iter([events])


def _batches(raws: list[msgspec.Raw], reading: _Reading) -> Iterator[list[_Event] | _Part]:
    """Events, BATCH at a time: the scanner's parts, or typed structs where it leaves a batch to
    msgspec. A batch with a field of an unexpected type is decoded event by event, and the events
    that still cannot be read are skipped with a warning."""
    for start in range(0, len(raws), BATCH):
        if reading.progress:
            reading.progress(start / max(len(raws), 1))
        chunk = raws[start : start + BATCH]
        joined = b"[" + b",".join(chunk) + b"]"
        part = _scanned_part(joined)
        if part is not None:
            yield part
            continue
        try:
            yield _utf8_safe(_decode_events, joined, reading)
        except msgspec.ValidationError as exc:
            yield _decode_each(chunk, reading, note=str(exc))


_BATCH_INDEX = re.compile(r"`\$\[\d+\]\.?")


def _decode_each(chunk: list[Any], reading: _Reading, note: str) -> list[_Event]:
    kept: list[_Event] = []
    for raw in chunk:
        try:
            kept.append(
                _utf8_safe(_decode_one, raw if isinstance(raw, msgspec.Raw) else msgspec.json.encode(raw), reading)
            )
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
    if len(kept) < len(chunk):  # one warning for the file, whichever batches or slices they were in
        reading.skipped += len(chunk) - len(kept)
        if reading.skip_note is None:
            reading.skip_note = _plain_note(note)
    return kept


_EXPECTED = re.compile(r"Expected `([^`]+)`, got `([^`]+)`(?: - at `\$(?:\[\d+\])?\.?([^`]*)`)?")


def _plain_note(note: str) -> str:
    """msgspec's 'Expected `object`, got `int` - at `$[2]`' in the reader's words: 'an event is a
    JSON integer, not an object'; 'at `$[0].ph`' names the field. A position in a batch means
    nothing to the reader and is dropped."""
    found = _EXPECTED.fullmatch(note)
    if found is None:
        return _BATCH_INDEX.sub("`", note)
    want, got, where = (found[1], found[2], found[3])
    words = {
        "str": "string",
        "int": "integer",
        "float": "number",
        "bool": "boolean",
        "object": "object",
        "array": "array",
        "null": "null",
    }
    wanted = " or ".join(words.get(part, part) for part in want.split(" | "))
    return (
        f"{f'the field {where!r} of an event' if where else 'an event'} is a JSON {words.get(got, got)}, "
        f"not {'an' if wanted[0] in 'aeiou' else 'a'} {wanted}"
    )


_EVENT_GAP = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]\s*,")  # the end of an array of objects (traceEvents) with more keys after it
CUT_SEARCH = 1 << 20  # how far back from a cut to look for the end of the last whole event, bytes
CUT_TRIES = 64
_SPACE = b" \t\r\n"


def _close_cut_file(data: bytes, first: bytes) -> tuple[bytes, int, bool] | None:
    """A trace cut off mid-write, closed after its last whole event: (the closed document, bytes
    kept, whether the traceEvents array had already ended, so that only metadata after it was
    lost), or None when no cut point near the end closes it. The closed file takes the fast path,
    where the event-by-event salvage would build a dict per event."""
    tail_start = max(len(data) - CUT_SEARCH, 0)
    ends = [m.start() for m in _EVENT_GAP.finditer(data, tail_start)][-CUT_TRIES:]
    ends += [m.start() for m in _ARRAY_END.finditer(data, tail_start)][-CUT_TRIES:]
    last = _last_brace(data)
    if last is not None:  # cut just after an event's closing brace (and its comma): that event is whole
        ends.append(last)
    closing = b"]" if first == b"[" else b"]}"
    for end in sorted(set(ends), reverse=True)[:CUT_TRIES]:
        candidate = data[: end + 1] + closing
        try:
            top = (_decode_raw_list if first == b"[" else _decode_top)(candidate)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        return candidate, end + 1, _array_ended(data, end + 1) or _keys_after_events(top)
    return None


def _array_ended(data: bytes, pos: int) -> bool:
    """True when the next character at or after pos, spaces aside, closes an array."""
    while pos < len(data) and data[pos] in _SPACE:
        pos += 1
    return data[pos : pos + 1] == b"]"


def _keys_after_events(top: Any) -> bool:
    """True when a closed document has top-level keys after traceEvents (so that array ended)."""
    keys = list(top) if isinstance(top, dict) else []
    return "traceEvents" in keys and keys[-1] != "traceEvents"


_TAIL_BRACE = re.compile(rb"\}\s*,?\s*\Z")


def _last_brace(data: bytes) -> int | None:
    """Position of a closing brace that only whitespace and one comma follow, or None."""
    match = _TAIL_BRACE.search(data, max(len(data) - 4096, 0))
    return match.start() if match else None


def _salvage(data: bytes, reading: _Reading) -> tuple[dict[str, Any], list[_Event], int, bool]:
    """A trace cut off mid-write that no cut point near its end closes: keep the metadata before
    traceEvents and every complete event, read one by one; also return the JSON bytes kept and
    whether the traceEvents array had ended before the cut."""
    label = reading.label
    text = data.decode("utf-8", errors="replace")
    meta: dict[str, Any] = {}
    if text.lstrip().startswith("["):
        start = text.index("[") + 1
    else:
        match = re.search(r'"traceEvents"\s*:\s*\[', text)
        if match is None:
            raise TraceError(f"{label}: not a trace: the JSON is cut off before any traceEvents array")
        start = match.end()
        head = text[: match.start()].strip().rstrip(",")
        if head.startswith("{") and head != "{":
            try:
                meta = json.loads(head + "}")
            except json.JSONDecodeError:
                meta = {}
    decoder = json.JSONDecoder()
    pos, end = start, len(text)
    raw_events: list[Any] = []
    ws = re.compile(r"[\s,]*")
    while True:
        pos = ws.match(text, pos).end()
        if pos >= end or text[pos] == "]":
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        raw_events.append(obj)
    if not any(isinstance(e, dict) for e in raw_events):
        raise TraceError(f"{label}: not a trace: the JSON is cut off and holds no complete trace event")
    kept = len(text[:pos].encode("utf-8", errors="replace"))
    whole = pos < end and text[pos] == "]"
    return meta, _decode_each(raw_events, reading, note="while salvaging"), kept, whole
