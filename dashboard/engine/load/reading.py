"""What every part of the loader shares: TraceError, the msgspec structs an event is decoded
into (only the fields the analyses read), and _Reading, what one load learns about its file
besides the events (warnings, a cut, bytes that were not UTF-8).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Union

import msgspec


GZIP_MAGIC = b"\x1f\x8b"

_LEADING_SPACE = re.compile(rb"\s*")


from dashboard.engine.model.errors import TraceError  # noqa: E402,F401  (defined light for the CLI; re-exported)


# Fields take any JSON scalar: writers disagree on ints, floats and numeric strings, and one odd
# value must not cost the event.
_Scalar = Union[int, float, str, None]


class _Args(msgspec.Struct, gc=False):
    correlation: _Scalar = None
    external_id: _Scalar = msgspec.field(default=None, name="External id")
    external_id_legacy: _Scalar = msgspec.field(default=None, name="external id")
    stream: _Scalar = None
    device: _Scalar = None
    bytes: _Scalar = None
    size: _Scalar = None  # ROCm hipMemcpy* calls give the size here, as a string
    kind: Union[str, int, None] = None
    # an MTIA dma_request's "DEVICE_TO_HOST" / "HOST_TO_DEVICE" (devices.ARG_DIRECTIONS); read where
    # kind is absent. Any value: a vendor's event that writes something else here keeps the event.
    direction: Any = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    # scalar arguments as text (is_causal, max lengths, dropout): what attention's work depends on
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")
    # a "[memory]" event's (profile_memory=True): raw, so that no value costs an event (see _memory_ints)
    mem_device_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Device Type")
    mem_device_id: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Device Id")
    mem_bytes: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Bytes")
    mem_total_allocated: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Total Allocated")
    mem_total_reserved: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Total Reserved")
    mem_addr: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Addr")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: _Scalar = None
    pid: _Scalar = None
    tid: _Scalar = None
    # Raw number text: epoch µs with ns fractions (1.6e15) do not survive a trip through float64.
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()
    id: _Scalar = None
    args: Union[_Args, list, None] = None  # a list of args is not ours to read, but keeps the event


_decode_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_decode_events = msgspec.json.Decoder(list[_Event]).decode


class _CutPoint(NamedTuple):
    """Where a cut-off document was closed, before the events are parsed."""

    kept: int  # JSON bytes up to the end of the last whole event
    total: int  # JSON bytes present
    what: str  # what was read, for the warning
    events_whole: bool  # the traceEvents array had ended before the cut


@dataclass
class _Reading:
    """What one load learns about its file besides the events, for the warnings and Trace.cut."""

    label: str
    warnings: list[str] = field(default_factory=list)
    progress: Callable[[float], None] | None = None
    gzip_cut: int | None = None  # compressed bytes in the file when its gzip stream is cut off
    cut: _CutPoint | None = None
    replaced: int = 0  # byte sequences that were not UTF-8, read as U+FFFD
    skipped: int = 0  # events that could not be read
    skip_note: str | None = None  # why the first of them could not

    def add(self, other: "_Reading") -> None:
        """Take in what a worker's reading of one slice learnt."""
        self.warnings.extend(other.warnings)
        self.replaced += other.replaced
        self.skipped += other.skipped
        if self.skip_note is None:
            self.skip_note = other.skip_note


def _without_bom(data: bytes) -> bytes:
    return data[3:] if data[:3] == b"\xef\xbb\xbf" else data  # a UTF-8 byte order mark, as some editors write


def _label(source: Union[str, os.PathLike, bytes], name: str | None) -> str:
    return name or ("<upload>" if isinstance(source, (bytes, bytearray, memoryview)) else Path(source).name)
