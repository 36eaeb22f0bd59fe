"""The C scanner (dashboard/engine/_scan.c) reads a JSON array of trace events into the columns
the msgspec path builds from its typed structs, or refuses the array (returns None) so that the
msgspec path reads it. The msgspec path is the oracle: on every real trace, on events written to
give each field its odd values, and on generated events, the scanner's part must equal it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gzip

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal, assert_series_equal

import dashboard.engine.load as load
from dashboard.engine.load import (
    decode as load_decode,
    frames as load_frames,
    reading as load_reading,
    scanner as load_scanner,
)
from dashboard.engine.analyses.summary import summarize

DATA = Path(__file__).parent / "data"
TRACES = sorted(p.name for p in DATA.glob("*.json.gz"))
_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode

needs_scanner = pytest.mark.skipif(
    load_scanner._scan is None, reason="the C scanner is not built here (no C compiler?)"
)


def test_the_scanner_is_built_in_ci():
    """CI installs from nothing: this proves setup.py built the extension there."""
    if not os.environ.get("CI"):
        pytest.skip("checked in CI, where CI is set")
    assert load_scanner._scan is not None


@needs_scanner
@pytest.mark.parametrize("name", TRACES)
def test_scan_plain_hands_over_what_scan_makes_as_bytes(name):
    """A slice worker sends scan_plain's tuple (it pickles; the loading process makes each column
    with arrow()): the same tables, counts and odd values as scan's, and the same columns, each
    checked against its bytes read with int.from_bytes."""
    from dashboard.engine.model.columns import from_arrow

    raw = events_of(name)
    made, plain = load_scanner._scan.scan(raw), load_scanner._scan.scan_plain(raw)
    assert made[:4] == plain[:4] and made[5:] == plain[5:]
    assert len(made[4]) == len(plain[4])
    for k, (pair, (values, fmt, valid)) in enumerate(zip(made[4], plain[4])):
        width = 4 if fmt == "I" else 8
        assert fmt in ("I", "l") and len(values) % width == 0
        rows = [
            int.from_bytes(values[i : i + width], "little", signed=fmt == "l") for i in range(0, len(values), width)
        ]
        if valid is not None:
            assert len(valid) == len(rows) and 0 in valid
            rows = [r if ok else None for r, ok in zip(rows, valid)]
        column = from_arrow("c", pair)
        assert column.to_list() == rows, k
        assert_series_equal(from_arrow("c", load_scanner._scan.arrow(values, fmt, valid)), column)


def events_of(name: str) -> bytes:
    """The traceEvents array of a trace in tests/data, as the file writes it."""
    return bytes(_top(gzip.decompress((DATA / name).read_bytes()))["traceEvents"])


def reference(raw: bytes) -> load_frames._Part:
    """The msgspec path: typed structs, then columns (raises where msgspec refuses the events)."""
    return load_frames._read_batch(load_reading._decode_events(raw))


def assert_same_part(got: load_frames._Part, want: load_frames._Part) -> None:
    for field in ("events", "flows"):
        a, b = getattr(got, field), getattr(want, field)
        assert (a is None) == (b is None), field
        if a is not None:
            assert_frame_equal(a, b)
    if want.counts is None:
        assert got.counts is None
    else:
        assert_frame_equal(got.counts.sort("cat", nulls_last=True), want.counts.sort("cat", nulls_last=True))
    assert got.seen == want.seen
    assert bytes(got.last_ts) == bytes(want.last_ts)


@needs_scanner
@pytest.mark.parametrize("name", TRACES)
def test_every_real_trace_is_scanned_into_the_msgspec_columns(name):
    raw = events_of(name)
    got = load_scanner._scanned_part(raw)
    assert got is not None, "the scanner refused a real trace"
    assert_same_part(got, reference(raw))
    assert got.seen == len(json.loads(raw))  # and the count from the json module


@needs_scanner
@pytest.mark.parametrize("batched", [False, True], ids=["whole", "in batches"])
@pytest.mark.parametrize("name", TRACES)
def test_a_trace_loads_the_same_with_and_without_the_scanner(name, batched, monkeypatch):
    if batched:  # as a document over 48 MB is read in the loading process: 25,000 events at a time
        monkeypatch.setattr(load_decode, "ONE_BATCH_BYTES", 0)
        monkeypatch.setattr(load_decode, "BATCH", 2_000)
    with_scanner = load.load_trace(DATA / name)
    monkeypatch.setattr(load_scanner, "_scan", None)
    without = load.load_trace(DATA / name)
    for table in ("events", "flows", "steps"):
        assert_frame_equal(getattr(with_scanner, table), getattr(without, table))
    assert with_scanner.warnings == without.warnings
    assert with_scanner.meta == without.meta
    assert with_scanner.raw_categories == without.raw_categories
    assert json.dumps(summarize(with_scanner), sort_keys=True) == json.dumps(summarize(without), sort_keys=True)


def _x(**fields: str) -> str:
    """A complete event with the given fields, each written as the raw JSON text given."""
    body = {"ph": '"X"', "name": '"k"', "pid": "1", "tid": "2", "ts": "10", "dur": "5", **fields}
    return "{" + ", ".join(f'"{key}": {value}' for key, value in body.items()) + "}"


# Each is read by the scanner (nothing in it fails msgspec's validation) and must equal msgspec's reading.
ACCEPTED = {
    "numeric strings in int fields (ROCm)": [
        _x(args='{"size": "2560", "stream": "0x7", "device": " 3 ", "correlation": "x"}')
    ],
    "floats and big ints in int fields": [
        _x(
            args='{"stream": 7.0, "device": 2.5, "correlation": 99999999999999999999, '
            '"External id": -9223372036854775808, "bytes": 1e3}'
        )
    ],
    "external id: the legacy key when the new one is null": [
        _x(args='{"External id": null, "external id": 12}'),
        _x(args='{"External id": "n", "external id": 12}'),
    ],
    "bytes over size": [_x(args='{"bytes": 8, "size": 9}'), _x(args='{"bytes": null, "size": 9}')],
    "kind over direction (an MTIA dma_request's), whatever the direction where there is a kind": [
        _x(args='{"direction": "DEVICE_TO_HOST"}'),
        _x(args='{"kind": null, "direction": "HOST_TO_DEVICE"}'),
        _x(args='{"kind": "k", "direction": "HOST_TO_DEVICE"}'),
        _x(args='{"direction": 3}'),
        _x(args='{"direction": 1.5}'),
        _x(args='{"direction": null}'),
        _x(args='{"kind": 2, "direction": {"a": [true]}}'),
    ],
    "text fields given numbers": [
        _x(name="7", pid="-0", tid="1.5", args='{"kind": 3}'),
        _x(name="1e2", pid="123456789012345678901234"),
        '{"ph": "s", "id": 4.0, "pid": 1, "tid": 1, "ts": 1, "name": null, "cat": "ac2g"}',
        '{"ph": "f", "id": "e", "pid": "p", "tid": 1, "ts": 2, "bp": "e"}',
    ],
    "timestamps: fractions, signs, quotes, exponents, 16 to 20 digits": [
        _x(ts="1623143089861123.456", dur="0.5"),
        _x(ts="-0.25", dur="-3"),
        _x(ts='"12.5"', dur='" 7 "'),
        _x(ts="1.5e3", dur="2E-1"),
        _x(ts="9223372036854775.807"),
        _x(ts="9223372036854776"),
        _x(ts="12345678901234567890"),
        _x(ts="null", dur="[1]"),
        _x(ts="1.123456789"),
    ],
    "no ts or dur": ['{"ph": "X", "name": "a", "pid": 1, "tid": 1}', _x(ts="1"), '{"ph": "X", "ts": 3}'],
    "escapes and unicode": [
        _x(name=r'"a\"b\\c\/d\n\t\u00e9\ud83d\ude00"', cat=r'"Ker\u006eel"', pid='"é"'),
        r'{"ph": "\u0058", "name": "x", "ts": 1}',
        _x(name='"日本"', args='{"Input Dims": ["é", "\\n"]}'),
    ],
    "raw argument texts kept as written": [
        _x(args='{"Input Dims": [[1, 2], [ ]], "Input type": ["float", ""], "Concrete Inputs": ["", "0.1", null]}'),
        _x(args='{"Input Dims": null, "Input type": {"a": [1, {"b": 2}]}}'),
    ],
    "args as a list or null; unknown keys of every kind": [
        _x(args="[1, 2]"),
        _x(args="null"),
        _x(other='{"a": [true, false, null, -1.5e-3, "s"]}', more="true"),
    ],
    "other phases, cat null, empty objects": [
        '{"ph": "i", "name": "m", "s": "g", "ts": 1}',
        _x(cat="null"),
        "{}",
        '{"ph": "M", "name": "process_name", "args": {"name": "x"}}',
    ],
    "whitespace between everything": [' \n{ "ph" :"X" ,\t"name":"a","ts" : 1 , "args" : { "stream" : 7 } } \r\n'],
}


@needs_scanner
@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_odd_values_are_read_as_the_msgspec_path_reads_them(case):
    raw = ("[" + ", ".join(ACCEPTED[case]) + "]").encode()
    got = load_scanner._scanned_part(raw)
    assert got is not None, f"refused: {case}"
    assert_same_part(got, reference(raw))


@needs_scanner
def test_timestamps_are_exact_nanoseconds():
    """By hand: µs text -> ns, the first three fraction digits kept (as the loader always read them)."""
    raw = (
        "["
        + ", ".join([_x(ts="1623143089861123.456", dur="0.5"), _x(ts="-0.25", dur="7"), _x(ts="3.1239", dur="1e1")])
        + "]"
    ).encode()
    events = load_scanner._scanned_part(raw).events
    assert events["ts_abs"].to_list() == [1623143089861123456, -250, 3123]
    assert events["dur_ns"].to_list() == [500, 7000, 10000]


# Each would fail msgspec's validation or decoding (or is not read the same way): the scanner leaves it to msgspec.
REFUSED = {
    "a boolean pid": [_x(pid="true")],
    "a boolean in an int field": [_x(args='{"stream": false}')],
    "an object where a scalar is typed": [_x(tid='{"a": 1}')],
    "cat not a string": [_x(cat="3")],
    "ph null": ['{"ph": null, "ts": 1}'],
    "kind a float": [_x(args='{"kind": 1.5}')],
    # msgspec keeps these (direction takes any value) and reads str() of what it decodes
    "direction a boolean where there is no kind": [_x(args='{"direction": true}')],
    "direction an object where kind is null": [_x(args='{"kind": null, "direction": {"to": "host"}}')],
    "direction an array where there is no kind": [_x(args='{"direction": []}')],
    "args a string": [_x(args='"x"')],
    "a key twice": ['{"ph": "X", "ts": 1, "ts": 2}'],
    "an escaped key": ['{"ph": "X", "t\\u0073": 1}'],
    "a lone surrogate": [_x(name=r'"\ud800"')],
    "an element that is not an object": ["[1, 2]", _x()],
    "a trailing comma": [_x() + ","],
    "a leading zero": [_x(ts="01")],
    "a control character in a string": [_x(name='"a\tb"')],
    "nesting deeper than 64": [_x(args='{"Input Dims": ' + "[" * 70 + "]" * 70 + "}")],
}


@needs_scanner
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_msgspec_refuses_the_scanner_leaves_to_it(case):
    raw = ("[" + ", ".join(REFUSED[case]) + "]").encode()
    assert load_scanner._scanned_part(raw) is None


@needs_scanner
def test_text_that_is_not_utf8_is_left_to_msgspec_which_repairs_it():
    raw = b"[" + _x(name='"a\xffb"').encode("latin-1") + b"]"
    assert load_scanner._scanned_part(raw) is None
    assert load_scanner._scanned_part(raw.replace(b"\xff", b"\xc3\xa9")) is not None


# Generated events: each field a JSON text drawn from values that are read, odd and refused.
VALUE_TEXTS = [
    "0",
    "-0",
    "7",
    "-12",
    "2560",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "1.5",
    "-0.001",
    "1623143089861123.456",
    "1e3",
    "2.5E-2",
    "null",
    "true",
    '""',
    '"a"',
    '"2560"',
    '"0x10"',
    '" 9 "',
    '"1.5"',
    '"-3"',
    r'"\u00e9\n"',
    '"é"',
    "[]",
    "[1, [2]]",
    "{}",
    '{"k": "v"}',
]
_TEXTS = st.sampled_from(VALUE_TEXTS)
_EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "s", "bp"]
_ARG_KEYS = [
    "correlation",
    "External id",
    "external id",
    "stream",
    "device",
    "bytes",
    "size",
    "kind",
    "direction",
    "Input Dims",
    "Input type",
    "Concrete Inputs",
    "Sequence number",
]


@st.composite
def events(draw) -> str:
    fields = {"ph": draw(st.sampled_from(['"X"', '"X"', '"s"', '"f"', '"t"', '"i"', '"M"', "null"]))}
    for key in draw(st.lists(st.sampled_from(_EVENT_KEYS[1:]), unique=True)):
        if key == "args":
            members = {k: draw(_TEXTS) for k in draw(st.lists(st.sampled_from(_ARG_KEYS), unique=True))}
            fields[key] = draw(
                st.sampled_from(["{" + ", ".join(f'"{k}": {v}' for k, v in members.items()) + "}", "[]", "null"])
            )
        else:
            fields[key] = draw(_TEXTS)
    items = list(fields.items())
    order = draw(st.permutations(range(len(items))))
    return "{" + ", ".join(f'"{items[i][0]}": {items[i][1]}' for i in order) + "}"


@needs_scanner
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events(), min_size=1, max_size=6))
def test_generated_events_are_read_as_msgspec_reads_them_or_left_to_it(batch):
    raw = ("[" + ", ".join(batch) + "]").encode()
    got = load_scanner._scanned_part(raw)
    try:
        want = reference(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        assert got is None  # msgspec refuses them: the loader reads them event by event, as before
        return
    if got is not None:
        assert_same_part(got, want)


def decoded(data: bytes, monkeypatch, scanner: bool) -> tuple[dict, list[load_frames._Part], load_reading._Reading]:
    """load_decode._decode of a whole document, with or without the scanner: (meta, parts, reading)."""
    with monkeypatch.context() as m:
        if not scanner:
            m.setattr(load_scanner, "_scan", None)
        reading = load_reading._Reading("doc.json")
        meta, batches = load_decode._decode(data, reading)
        return meta, [load_frames._read_batch(b) for b in batches], reading


DOCUMENTS = {
    "metadata before and after, a key twice (the last value, in the first's place)": '{"a": [1, {"x": 2}], "traceEvents": ['
    + _x()
    + '], "b": "\\u00e9", "a": 3, "deviceProperties": [{"id": 0}]}',
    "whitespace around everything": ' \n { "traceEvents" : [ ' + _x() + " , " + _x(ts="11") + ' ] , "c" : null } \n',
    "events only": '{"traceEvents": [' + _x(name='"only"') + "]}",
    "metadata not UTF-8 (repaired and counted, as msgspec's path does)": '{"m": "caf\xe9", "traceEvents": ['
    + _x()
    + "]}",
}


@needs_scanner
@pytest.mark.parametrize("case", sorted(DOCUMENTS))
def test_a_whole_document_is_read_as_the_msgspec_path_reads_it(case, monkeypatch):
    data = DOCUMENTS[case].encode("latin-1" if "UTF-8" in case else "utf-8")
    assert load_scanner._scanned_document(data) is not None
    meta, parts, reading = decoded(data, monkeypatch, scanner=True)
    want_meta, want_parts, want_reading = decoded(data, monkeypatch, scanner=False)
    assert list(meta.items()) == list(want_meta.items())
    assert len(parts) == len(want_parts) == 1
    assert_same_part(parts[0], want_parts[0])
    assert reading.replaced == want_reading.replaced


@needs_scanner
def test_metadata_keeps_the_json_modules_reading():
    data = DOCUMENTS["metadata before and after, a key twice (the last value, in the first's place)"].encode()
    meta = {key: msgspec.json.decode(raw) for key, raw in load_scanner._scanned_document(data)[0]}
    want = json.loads(data)
    del want["traceEvents"]
    assert list(meta.items()) == list(want.items())  # {"a": 3, "b": "é", "deviceProperties": [...]} in that order


@needs_scanner
@pytest.mark.parametrize(
    "text",
    [
        '{"displayTimeUnit": "ns"}',  # no traceEvents: the msgspec path says so
        '{"traceEvents": [], "traceEvents": [{}]}',  # twice: msgspec keeps the last
        '{"traceEvents": {}}',
        '{"traceEvents": []} trailing',
        '{"trace\\u0045vents": []}',
        '[{"ph": "X", "ts": 1}]',  # the bare array flavour is read by its own path
        '{"traceEvents": [{"ph": "X", "ts": 1}]',  # cut off: salvaged by the msgspec path
    ],
)
def test_documents_the_scanner_leaves_to_msgspec(text):
    assert load_scanner._scanned_document(text.encode()) is None


SANITIZED = r"""
import gzip, importlib.util, json, random, sys
import msgspec
spec = importlib.util.spec_from_file_location("_scan", sys.argv[1])
scan = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scan)
cases = json.loads(sys.stdin.read())
top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
rng = random.Random(0)
for path in cases["traces"]:
    data = gzip.decompress(open(path, "rb").read())
    scan.scan(bytes(top(data)["traceEvents"]))
    scan.scan_document(data)
    small = data[:200_000]  # cut, flipped and shuffled bytes: each must be read or refused, never crash
    for _ in range(300):
        at = rng.randrange(len(small))
        mutated = bytearray(small[: rng.randrange(len(small))] if rng.random() < 0.3 else small)
        if at < len(mutated):
            mutated[at] = rng.randrange(256)
        scan.scan_document(bytes(mutated))
        scan.scan(bytes(mutated[mutated.find(b"[") :]))
for text in cases["texts"]:
    scan.scan(text.encode("utf-8", "surrogatepass"))
    scan.scan_document(text.encode("utf-8", "surrogatepass"))
import array  # holders (the nesting walk): any int64 values, lanes sorted or not, each row's holder before it
for n in (0, 1, 2, 3, 50, 5000):
    for sort in (True, False):
        lanes = [rng.randrange(3) for _ in range(n)]
        lane = array.array("q", sorted(lanes) if sort else lanes)
        reach = array.array("q", [rng.choice((-(1 << 63), rng.randrange(-10, 10**6))) for _ in range(n)])
        need = array.array("q", [rng.randrange(-10, 10**6) for _ in range(n)])
        out = array.array("q", [7]) * n
        scan.holders(lane, reach, need, out)
        assert all(-1 <= j < i for i, j in enumerate(out))
try:
    scan.holders(array.array("q", [1]), array.array("q", [1, 2]), array.array("q", [1]), array.array("q", [0]))
except ValueError:
    pass
for n in (0, 1, 7, 8, 9, 63, 64, 65, 1000, 140_000):  # arrow (a column for polars): bitmaps across byte ends, mapped pages
    for fmt, width in (("l", 8), ("i", 4), ("I", 4), ("b", 1)):
        values = bytes(rng.randrange(256) for _ in range(n * width))
        for valid in (None, bytes(rng.randrange(2) for _ in range(n)), bytes(n)):
            pair = scan.arrow(values, fmt, valid)  # dropped unconsumed: the capsules release it
            assert len(pair) == 2
            del pair
for args in ((b"1234567", "l", None), (b"12345678", "q", None), (b"12345678", "l", b"12"), (b"", "", None)):
    try:
        scan.arrow(*args)
    except ValueError:
        pass
print("clean")
"""


SANITIZED_LOADS = r"""
import gc, importlib.util, sys
spec = importlib.util.spec_from_file_location("dashboard.engine._scan", sys.argv[1])
scan = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scan)
sys.modules["dashboard.engine._scan"] = scan  # the engine imports this build: its columns, polars' releases
import numpy as np
from dashboard.engine import load_trace, summarize
from dashboard.engine.model import columns
from dashboard.engine import load
from dashboard.engine.load import decode as load_decode, frames as load_frames, reading as load_reading, scanner as load_scanner
assert columns._scan is scan and load_scanner._scan is scan
for n in (0, 1, 9, 1000, 300_000):
    values = np.arange(n, dtype=np.int64)
    assert columns.series("x", values, valid=values % 2 == 0).null_count() == n // 2
    assert columns.series("b", values % 3 == 0).sum() == (n + 2) // 3
for path in sys.argv[2:]:
    summarize(load_trace(path))
    gc.collect()
print("clean")
"""


@needs_scanner
def test_the_scanner_is_clean_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    """_scan.c built with -fsanitize=address,undefined reads every real trace, the cases above and
    3,000 mutated documents, walks generated lanes for holders (the nesting) and makes Arrow
    columns of every format, length and validity (columns.py); then the engine, with that build
    in place, loads and summarizes every real trace (polars consumes and frees its columns): no out-of-bounds
    access, no use after free, no undefined behaviour."""
    import shutil
    import subprocess
    import sys
    import sysconfig

    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc")
    libs = [
        subprocess.run([gcc, f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
        for lib in ("libasan.so", "libubsan.so")
    ]
    if not all(Path(lib).is_file() for lib in libs):
        pytest.skip("gcc has no sanitizer runtimes here")
    built = tmp_path / "_scan.so"
    source = Path(load.__file__).parent.with_name("_scan.c")
    subprocess.run(
        [
            gcc,
            "-O1",
            "-g",
            "-std=c99",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
            "-fno-omit-frame-pointer",
            "-fPIC",
            "-shared",
            f"-I{sysconfig.get_paths()['include']}",
            str(source),
            "-o",
            str(built),
        ],
        check=True,
    )
    texts = [c for group in (ACCEPTED, REFUSED) for case in group.values() for c in case] + list(DOCUMENTS.values())
    texts += [
        _x(**{field: value, "args": f'{{"{key}": {value}}}'})
        for value in VALUE_TEXTS
        for field, key in (("name", "kind"), ("ts", "Input Dims"), ("pid", "stream"))
    ]
    env = {**os.environ, "LD_PRELOAD": ":".join(libs), "ASAN_OPTIONS": "detect_leaks=0"}
    done = subprocess.run(
        [sys.executable, "-c", SANITIZED, str(built)],
        input=json.dumps({"traces": [str(DATA / name) for name in TRACES], "texts": texts}),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0 and "runtime error" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip() == "clean"
    # the same build inside the engine: polars takes its Arrow columns and releases them, from any thread
    done = subprocess.run(
        [sys.executable, "-c", SANITIZED_LOADS, str(built), *(str(DATA / name) for name in TRACES)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0 and "runtime error" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip() == "clean"
