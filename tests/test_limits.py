"""The limit on a trace's JSON (MAX_JSON_BYTES, $ATTNSCOPE_MAX_JSON_BYTES, max_json_bytes=) and
the streamed .json.gz: a gzip bomb is refused while it inflates, in bounded memory (peak RSS of a
CLI subprocess, from os.wait4); a plain file or upload over the limit is refused before it is
read; a large .json.gz is inflated into a temporary file and read in slices, giving the tables
that its plain JSON gives. Expected sizes are hand computations on bytes the tests write."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

import oracle
from test_load_sliced import _assert_same, _early_readings as spy_early
from dashboard.engine import TraceError, load_trace
from dashboard.engine.load import (
    inflate as load_inflate,
    limits as load_limits,
    reading as load_reading,
    slices as load_slices,
    workers as load_workers,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = oracle.DATA
ENV = "ATTNSCOPE_MAX_JSON_BYTES"
GIB, MIB = 1 << 30, 1 << 20
HEAD, TAIL = b'{"traceEvents": [', b"]}"  # the bombs: whitespace between these two tokens


def write_bomb(path: Path, inflated: int, one_member: bool = False) -> Path:
    """A .json.gz whose JSON is `inflated` bytes: HEAD, spaces, TAIL. Written as it is made (the
    test never holds more than 16 MiB of it): gzip members of 16 MiB of spaces one after another
    (as `cat a.gz b.gz` makes; fast to write), or one member compressed block by block."""
    spaces = inflated - len(HEAD) - len(TAIL)
    block = 16 * MIB
    with open(path, "wb") as fh:
        if one_member:
            packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            fh.write(packer.compress(HEAD))
            for size in [block] * (spaces // block) + [spaces % block]:
                fh.write(packer.compress(b" " * size))
            fh.write(packer.compress(TAIL) + packer.flush())
            return path
        fh.write(gzip.compress(HEAD, mtime=0))
        member = gzip.compress(b" " * block, compresslevel=9, mtime=0)
        for _ in range(spaces // block):
            fh.write(member)
        fh.write(gzip.compress(b" " * (spaces % block) + TAIL, mtime=0))
    return path


def cli(path: Path, tmpdir: Path, limit: str | None) -> tuple[int, str, int]:
    """(exit status, stderr, peak RSS in bytes) of `attnscope summary` on one file, in a fresh
    process whose temporary files go to tmpdir. The peak is the child's own rusage (os.wait4):
    the largest RSS of it or of any process it waited for."""
    env = dict(os.environ, TMPDIR=str(tmpdir))
    env.pop(ENV, None)
    if limit is not None:
        env[ENV] = limit
    tmpdir.mkdir(exist_ok=True)
    with open(tmpdir.parent / "stderr.txt", "w+b") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dashboard.cli", "summary", "--no-store", str(path)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode()
    return proc.returncode, stderr, usage.ru_maxrss * 1024  # Linux reports KiB


@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory) -> int:
    """Peak RSS of the CLI on a tiny real trace: what any run costs before inflating anything."""
    tmp = tmp_path_factory.mktemp("baseline")
    status, stderr, rss = cli(DATA / "hta_triton_example.json.gz", tmp / "tmp", None)
    assert status == 0, stderr
    return rss


def assert_refused_while_inflating(
    tmp_path: Path, bomb: Path, limit: str | None, limit_text: str, baseline: int
) -> None:
    status, stderr, rss = cli(bomb, tmp_path / "tmp", limit)
    assert status == 2, stderr
    assert stderr.splitlines() == [
        f"attnscope: error: {bomb.name}: inflates to more than {limit_text} of JSON "
        "(the limit; set ATTNSCOPE_MAX_JSON_BYTES to raise it)"
    ]
    assert "Traceback" not in stderr
    # inflating holds at most the 64 MiB kept before a temporary file takes over, and 8 MiB at a time
    assert rss < baseline + 128 * MIB, (rss / MIB, baseline / MIB)
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary file is gone


def test_a_gzip_bomb_over_a_small_limit_stops_inflating_at_the_limit(tmp_path, baseline_rss):
    """300 MiB of whitespace in one gzip member against a 256 MiB limit: had the loader held what
    it inflated, the peak would be 256 MiB over the baseline."""
    bomb = write_bomb(tmp_path / "bomb.json.gz", 300 * MIB, one_member=True)
    assert bomb.stat().st_size < 1 * MIB
    assert_refused_while_inflating(tmp_path, bomb, str(256 * MIB), "256.0 MiB (268,435,456 bytes)", baseline_rss)


def test_the_default_limit_is_4_gib_and_a_gzip_meets_it_while_inflating(monkeypatch):
    """The default in force when neither the argument nor the environment sets one; a gzip bomb
    past the default is refused like one past a set limit (shown here with the default lowered:
    inflating 4 GiB takes 20-40 s on two cores, see the opt-in test below)."""
    monkeypatch.delenv(ENV, raising=False)
    assert load_limits.MAX_JSON_BYTES == 4 * GIB and load_limits.json_limit() == 4 * GIB
    monkeypatch.setattr(load_limits, "MAX_JSON_BYTES", MIB)
    bomb = HEAD + b" " * MIB + TAIL
    with pytest.raises(
        TraceError, match=r"^<upload>: inflates to more than 1\.0 MiB \(1,048,576 bytes\) of JSON \(the limit;"
    ):
        load_trace(gzip.compress(bomb))
    with pytest.raises(
        TraceError, match=r"^<upload>: 1\.0 MiB \(1,048,595 bytes\) of JSON is more than the limit of 1\.0 MiB"
    ):
        load_trace(bomb)
    with pytest.raises(TraceError, match="traceEvents is empty"):  # past the limit check: parsed
        load_trace(gzip.compress(bomb), max_json_bytes=len(bomb))


def test_a_gzip_trailer_that_lies_about_its_size_changes_only_the_pieces(tmp_path, baseline_rss):
    """The trailer's size (under GZIP_ONE_PIECE_BYTES: the stream is read whole and a zlib call
    gives up to that size) is a hint: a one-member bomb whose trailer claims 40 MiB still stops
    at the limit, in bounded memory."""
    bomb = write_bomb(tmp_path / "liar.json.gz", 300 * MIB, one_member=True)
    with open(bomb, "r+b") as fh:
        fh.seek(-4, os.SEEK_END)
        fh.write((40 * MIB).to_bytes(4, "little"))
    assert load_inflate._gzip_pieces(bomb.stat().st_size, (40 * MIB).to_bytes(4, "little")) == (
        bomb.stat().st_size,
        40 * MIB + 1,
    )
    assert_refused_while_inflating(tmp_path, bomb, str(256 * MIB), "256.0 MiB (268,435,456 bytes)", baseline_rss)


def test_how_a_gzip_stream_is_cut_into_pieces():
    """(compressed bytes a read, inflated bytes a zlib call), by hand: whole when the trailer says
    the stream inflates to less than 48 MiB and to at least its own size, else 1 MiB and 8 MiB."""
    pieces = load_inflate._gzip_pieces
    assert load_inflate.GZIP_ONE_PIECE_BYTES == 48 * MIB
    assert pieces(1_174_357, (8_647_330).to_bytes(4, "little")) == (1_174_357, 8_647_331)
    assert pieces(100, (100).to_bytes(4, "little")) == (100, 101)
    assert pieces(100, (99).to_bytes(4, "little")) == (MIB, 8 * MIB)  # inflates to less than it is: no hint
    assert pieces(100, bytes(4)) == (MIB, 8 * MIB)  # zero padding after the last member
    assert pieces(100, (48 * MIB).to_bytes(4, "little")) == (MIB, 8 * MIB)
    assert pieces(100, (48 * MIB - 1).to_bytes(4, "little")) == (100, 48 * MIB)
    assert pieces(0, b"") == (MIB, 8 * MIB)  # a pipe: no size, no trailer


def _members(data: bytes, cuts: list[int]) -> bytes:
    """data as gzip members, one per slice between the cuts (as `cat a.gz b.gz` makes)."""
    edges = [0, *cuts, len(data)]
    return b"".join(gzip.compress(data[a:b], mtime=0) for a, b in zip(edges, edges[1:]))


@pytest.mark.parametrize(
    "layout",
    ["one member", "two members, the last large", "two members, the last small", "zero padding after", "from bytes"],
)
def test_a_gzip_reads_the_same_whatever_its_trailer_says(tmp_path, monkeypatch, layout):
    """An 8.6 MB trace: one member is inflated in one piece (one write; it took two before, and
    a join); streams whose trailer does not give the whole size read the same, in more pieces."""
    plain = gzip.decompress((DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz").read_bytes())
    packed = {
        "one member": _members(plain, []),
        "from bytes": _members(plain, []),
        "two members, the last large": _members(plain, [len(plain) // 3]),
        "two members, the last small": _members(plain, [len(plain) - 1000]),
        "zero padding after": _members(plain, []) + bytes(512),
    }[layout]
    path = tmp_path / "t.json.gz"
    path.write_bytes(packed)
    writes = []
    write = load_inflate._Sink.write
    monkeypatch.setattr(
        load_inflate._Sink, "write", lambda self, piece: (writes.append(len(piece)), write(self, piece))[1]
    )
    got = load_trace(packed if layout == "from bytes" else path, name="t.json.gz")
    assert sum(writes) == len(plain)
    if layout in ("one member", "from bytes"):
        assert writes == [len(plain)]
    else:
        assert len(writes) > 1
    _assert_same(got, load_trace(plain, name="t.json.gz"))


@pytest.mark.skipif(
    not os.environ.get("ATTNSCOPE_SLOW_TESTS"), reason="inflates 4 GiB (20-40 s); set ATTNSCOPE_SLOW_TESTS=1"
)
def test_a_gzip_bomb_past_the_default_limit_is_refused_in_bounded_memory(tmp_path, baseline_rss):
    """About 4 MB of .json.gz that inflates to 4 GiB + 1 MiB of JSON whitespace, at the default
    limit (4 GiB): before the limit, `summary` on it peaked at 8.5 GB RSS. Opt-in: it writes 4 GiB
    to the temporary folder and takes 20-40 s here."""
    bomb = write_bomb(tmp_path / "bomb4g.json.gz", 4 * GIB + MIB)
    assert bomb.stat().st_size < 6 * MIB
    assert load_limits.MAX_JSON_BYTES == 4 * GIB
    assert_refused_while_inflating(tmp_path, bomb, None, "4.0 GiB (4,294,967,296 bytes)", baseline_rss)


def test_a_plain_file_over_the_limit_is_refused_before_it_is_read(tmp_path):
    """A sparse 64 GiB file: reading it would take minutes and all the memory there is."""
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.write(HEAD)
        fh.truncate(64 * GIB)
    with pytest.raises(TraceError) as info:
        load_trace(huge)
    assert str(info.value) == (
        "huge.json: 64.0 GiB (68,719,476,736 bytes) of JSON is more than the limit of "
        "4.0 GiB (4,294,967,296 bytes) (set ATTNSCOPE_MAX_JSON_BYTES to raise it)"
    )


def test_bytes_over_the_limit_are_refused():
    data = b'{"traceEvents": [' + b" " * 981 + b"]}"  # 1,000 bytes
    with pytest.raises(
        TraceError,
        match=r"^<upload>: 1,000 bytes of JSON is more than the limit of 999 bytes \(set ATTNSCOPE_MAX_JSON_BYTES",
    ):
        load_trace(data, max_json_bytes=999)
    with pytest.raises(TraceError, match=r"^up\.json\.gz: inflates to more than 999 bytes of JSON \(the limit"):
        load_trace(gzip.compress(data), name="up.json.gz", max_json_bytes=999)


def sources(name: str, tmp_path: Path) -> tuple[int, dict[str, object]]:
    """A real trace's JSON size and the four forms it comes in: plain or gzip, path or bytes."""
    packed = (DATA / name).read_bytes()
    plain = gzip.decompress(packed)
    (tmp_path / "t.json").write_bytes(plain)
    (tmp_path / "t.json.gz").write_bytes(packed)
    return len(plain), {
        "plain path": tmp_path / "t.json",
        "gzip path": tmp_path / "t.json.gz",
        "plain bytes": plain,
        "gzip bytes": packed,
    }


@pytest.mark.parametrize("name", ["hta_triton_example.json.gz", "tracelens_h100_bert_sdpa_flash.json.gz"])
def test_a_trace_of_exactly_the_limit_loads_and_one_byte_less_is_refused(tmp_path, monkeypatch, name):
    size, forms = sources(name, tmp_path)
    expected = len(oracle.complete(oracle.raw(DATA / name)))
    for form, source in forms.items():
        assert load_trace(source, max_json_bytes=size).events.height == expected, form
        with pytest.raises(TraceError, match=re.escape(f"{size - 1:,} bytes")):
            load_trace(source, max_json_bytes=size - 1)
        monkeypatch.setenv(ENV, str(size))
        assert load_trace(source).events.height == expected, form
        monkeypatch.setenv(ENV, str(size - 1))
        with pytest.raises(TraceError, match="ATTNSCOPE_MAX_JSON_BYTES to raise it"):
            load_trace(source)
        monkeypatch.delenv(ENV)
    for size in (size, size - 1):  # the argument wins over the environment
        monkeypatch.setenv(ENV, "1")
        assert load_trace(forms["gzip path"], max_json_bytes=size + 1).events.height == expected


@pytest.mark.parametrize("value", ["abc", "0", "-5", "4GB", "1.5e9"])
def test_a_bad_limit_in_the_environment_is_one_clear_line(monkeypatch, tmp_path, value):
    monkeypatch.setenv(ENV, value)
    with pytest.raises(TraceError) as info:
        load_trace(DATA / "hta_triton_example.json.gz")
    message = str(info.value)
    assert message.startswith(
        f"hta_triton_example.json.gz: not read: ATTNSCOPE_MAX_JSON_BYTES={value!r} is not a whole number"
    )
    assert "\n" not in message
    status, stderr, _ = cli(DATA / "hta_triton_example.json.gz", tmp_path / "tmp", value)
    assert status == 2 and stderr.splitlines() == [f"attnscope: error: {message}"]


@pytest.mark.parametrize("value", [0, -1, 1.5, "100", True])
def test_a_bad_limit_argument_is_a_value_error(value):
    with pytest.raises(ValueError, match="max_json_bytes"):
        load_trace(DATA / "hta_triton_example.json.gz", max_json_bytes=value)


def assert_same(a, b) -> None:
    _assert_same(a, b)  # tables, metadata, warnings, sizes and summary, as the sliced loader's tests compare them
    assert a.cut == b.cut


def spy_sliced(monkeypatch) -> list[tuple[Path, int | None, bool]]:
    """Calls of the sliced loader: (path, gzip_cut, whether it read the file)."""
    calls = []
    real = load_slices._load_sliced

    def spy(path, name, progress, gzip_cut=None, keep_workers=False):
        trace = real(path, name, progress, gzip_cut=gzip_cut, keep_workers=keep_workers)
        calls.append((Path(path), gzip_cut, trace is not None))
        return trace

    monkeypatch.setattr(load_slices, "_load_sliced", spy)
    return calls


@pytest.mark.parametrize("cut", [None, "trailer", 0.9])
@pytest.mark.parametrize(
    "name", ["tracelens_h100_bert_sdpa_flash.json.gz", "tracelens_vllm_decode_graph_unified_attention.json.gz"]
)
def test_a_gzip_inflated_into_a_temporary_file_reads_as_in_memory(tmp_path, monkeypatch, name, cut):
    """With the thresholds lowered, a real .json.gz (whole, cut in its trailer, or cut mid-stream)
    goes through the temporary file and the slices, read while it inflates (or, cut, after it:
    the sliced or one-process path), and gives the trace that inflating it in memory gives."""
    packed = (DATA / name).read_bytes()
    packed = packed if cut is None else packed[:-4] if cut == "trailer" else packed[: int(len(packed) * cut)]
    path = tmp_path / "t.json.gz"
    path.write_bytes(packed)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    in_memory = load_trace(path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1)
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 1 << 18)
    calls, early = spy_sliced(monkeypatch), spy_early(monkeypatch)
    streamed = load_trace(path)
    assert_same(streamed, in_memory)
    assert list(temp.iterdir()) == []
    if cut is None:  # read while it inflated, and not again
        assert [c for c in calls if c[0] != path] == [] and early == [streamed]
        return
    assert all(trace is None for trace in early)  # a cut stream is read once it is all inflated
    ((inflated, gzip_cut, read),) = [c for c in calls if c[0] != path]
    assert inflated.parent == temp and not inflated.exists()
    assert gzip_cut == len(packed)
    assert read == (cut != 0.9)  # a JSON cut mid-event is closed by the one-process path
    if cut is not None:
        assert (
            f"gzip stream is cut off after {len(packed):,} bytes" in streamed.warnings[0]
            or f"gzip stream ends after {len(packed):,} bytes" in streamed.warnings[0]
        )


def test_a_large_gzip_is_read_in_slices_and_gives_the_tables_of_its_plain_json(tmp_path, monkeypatch):
    """About 90 MB of JSON (three copies of hta_a100_control, shifted in time, from the benchmark
    generator) loaded as .json.gz takes the temporary file and the sliced path at the default
    thresholds and gives what the plain file gives."""
    plain = tmp_path / "large.json"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "make_large_trace.py"), "--target-mb", "90", "--out", str(plain)],
        check=True,
        capture_output=True,
    )
    size = plain.stat().st_size
    assert size >= load_slices.SLICED_MIN_BYTES
    packed = tmp_path / "large.json.gz"
    with open(plain, "rb") as src, open(packed, "wb") as dst:
        packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        while chunk := src.read(8 * MIB):
            dst.write(packer.compress(chunk))
        dst.write(packer.flush())
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    calls, early = spy_sliced(monkeypatch), spy_early(monkeypatch)
    from_plain = load_trace(plain, name="large")
    from_gzip = load_trace(packed, name="large")
    assert_same(from_gzip, from_plain)
    assert from_gzip.size_bytes == size
    assert [(p == plain, cut, read) for p, cut, read in calls] == [(True, None, True)]  # the .gz: while it inflated
    assert early == [from_gzip] and list(temp.iterdir()) == []


@pytest.mark.parametrize("bom", [False, True])
@pytest.mark.parametrize("cut", [False, True])
def test_a_large_plain_upload_is_written_to_a_temporary_file_and_read_in_slices(tmp_path, monkeypatch, bom, cut):
    """Bytes (an upload) of SLICED_MIN_BYTES or more are not decoded in one process: they go to a
    temporary file that the workers read in slices, and give the trace the one-process path gives
    for the same bytes (a cut upload: the one-process path closes it; the file is removed)."""
    data = gzip.decompress((DATA / "tracelens_h100_bert_sdpa_flash.json.gz").read_bytes())
    data = (b"\xef\xbb\xbf" if bom else b"") + (data[: data.rindex(b"},", 0, len(data) * 9 // 10) + 1] if cut else data)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1 << 62)
    in_memory = load_trace(data, name="up.json")
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", len(data))
    monkeypatch.setattr(load_slices, "SLICE_BYTES", 1 << 18)
    calls = spy_sliced(monkeypatch)
    spilled = load_trace(data, name="up.json")
    assert_same(spilled, in_memory)
    ((written, gzip_cut, read),) = calls
    assert written.parent == temp and not written.exists() and list(temp.iterdir()) == []
    assert gzip_cut is None and read == (not cut)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", len(data) + 1)  # one byte short: kept in memory
    calls.clear()
    assert_same(load_trace(data, name="up.json"), in_memory)
    assert calls == []


def test_a_cut_file_large_enough_for_slices_is_not_searched_for_minutes(tmp_path):
    """A large cut file (a cut .json.gz now inflates into one) makes the sliced path look for the
    end of traceEvents in its last 64 MB, where every `"Input Dims": [],` is a candidate: each try
    copied the rest of the tail, and 28 MB of a real trace took 15 minutes. Now a few seconds.
    (A file whose last byte is not a closing brace is now refused without a search.)"""
    full = gzip.decompress((DATA / "hta_a100_control.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(full[: full.rindex(b"}", 0, len(full) * 9 // 10) + 1])  # cut just after a brace: it may close
    code = (
        "import sys; from pathlib import Path; import dashboard.engine.load.slices as load_slices; load_slices.SLICED_MIN_BYTES = 0; "
        "print(load_slices._load_sliced(Path(sys.argv[1]), None, None))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr  # the one-process path reads it


def test_a_temporary_folder_without_room_is_one_line_and_leaves_no_file(tmp_path, monkeypatch):
    """The temporary file's writes go to /dev/full (every write: ENOSPC)."""
    made = []

    def full_mkstemp(prefix="", suffix=""):
        path = tmp_path / f"{prefix}x{suffix}"
        path.touch()
        made.append(path)
        return os.open("/dev/full", os.O_WRONLY), str(path)

    monkeypatch.setattr(load_inflate.tempfile, "mkstemp", full_mkstemp)
    monkeypatch.setattr(load_slices, "SLICED_MIN_BYTES", 1)
    with pytest.raises(TraceError) as info:
        load_trace(DATA / "tracelens_h100_bert_sdpa_flash.json.gz")
    assert str(info.value).startswith(
        "tracelens_h100_bert_sdpa_flash.json.gz: cannot inflate into a temporary file in "
    )
    assert str(info.value).endswith("(No space left on device; set TMPDIR to a folder with more room)")
    assert len(made) == 1 and not made[0].exists()


@pytest.mark.parametrize("packed", [True, False])
def test_a_trace_read_from_a_pipe_loses_no_byte_to_the_checks(tmp_path, packed):
    """A named pipe has no size to check and cannot be read twice: plain or gzip, it loads whole."""
    import threading

    data = (DATA / "hta_triton_example.json.gz").read_bytes()
    data = data if packed else gzip.decompress(data)
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)

    def feed():
        with open(pipe, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    trace = load_trace(pipe, max_json_bytes=1 << 20)
    writer.join()
    assert trace.events.height == len(oracle.complete(oracle.raw(DATA / "hta_triton_example.json.gz")))


def _setting_after(code: str, given: str | None, name: str = "_RJEM_MALLOC_CONF") -> str:
    """What `code`, run in a fresh interpreter with the environment's `name` set to `given` (unset
    for None), prints: by default the allocator setting it ends with."""
    env = {k: v for k, v in os.environ.items() if k != name}
    if given is not None:
        env[name] = given
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _decays(conf: str) -> tuple[str | None, str | None]:
    """The dirty and muzzy decay a jemalloc option string sets (the last of each key wins)."""
    options = dict(part.partition(":")[::2] for part in conf.split(",") if part)
    return options.get("dirty_decay_ms"), options.get("muzzy_decay_ms")


@pytest.mark.parametrize(
    "given",
    [
        None,
        "dirty_decay_ms:500,muzzy_decay_ms:1000",  # polars' default, from a parent process that imported polars
        "thp:always",  # another option of the user's: kept
        "dirty_decay_ms:2000",  # the user's own decay: kept, ours not added
    ],
)
@pytest.mark.parametrize(
    # the CLI imports polars when a command runs (its --help imports none of it): its summary's first import
    "first",
    [
        "import dashboard.cli; import dashboard.engine.analyses.summary",
        "import streamlit; from dashboard import charts, report, runs",
    ],
)
def test_polars_returns_freed_memory_at_once_in_the_cli_and_the_dashboard(first, given):
    """The allocator setting (see dashboard/__init__.py) must be in the environment before polars
    is imported, in the CLI and in the dashboard, whose charts import polars before the engine.
    Polars' default inherited from a parent process does not stop it; a user's own decay setting
    does. Read as jemalloc reads it (the last value of each key wins): polars 2 puts its own
    default before what it finds, polars 1.20 leaves a set value alone."""
    code = f"{first}; import os, sys; assert 'polars' in sys.modules; print(os.environ.get('_RJEM_MALLOC_CONF'))"
    got = _setting_after(code, given)
    dirty, muzzy = _decays(got)
    if given == "dirty_decay_ms:2000":
        assert dirty == "2000" and muzzy != "0", got
    else:
        assert (dirty, muzzy) == ("0", "0"), got
    if given == "thp:always":
        assert "thp:always" in got.split(","), got


@pytest.mark.parametrize(
    "given, size, expected",
    [
        (None, 512 << 20, ("1000", "0")),  # a large first file: freed pages kept a second
        (None, (512 << 20) - 1, ("0", "0")),  # below the bound: returned at once
        ("thp:always", 600 << 20, ("1000", "0")),  # another option of the user's: kept beside ours
        ("dirty_decay_ms:2000", 600 << 20, ("2000", None)),  # the user's own decay: left alone
    ],
)
def test_the_cli_keeps_freed_pages_a_second_for_a_large_first_file(tmp_path, given, size, expected):
    """cli/files._prestart, before polars is imported, with a (sparse) file of `size` bytes as the
    first to parse: the allocator setting polars then reads (see dashboard.keep_freed_pages)."""
    path = tmp_path / "big.json"
    with open(path, "wb") as fh:
        fh.truncate(size)
    code = (
        "import sys; from dashboard.cli import files; from dashboard.engine.model import slice_workers; "
        "assert 'polars' not in sys.modules; "
        f"files._prestart([{str(path)!r}], None); slice_workers.discard(); "
        "import os, polars; print(os.environ.get('_RJEM_MALLOC_CONF'))"
    )
    got = _setting_after(code, given)
    dirty, muzzy = _decays(got)
    assert dirty == expected[0], got
    if expected[1] is not None:
        assert muzzy == expected[1], got
    if given == "thp:always":
        assert "thp:always" in got.split(","), got


def test_freed_pages_are_not_kept_once_polars_is_imported():
    """Too late once polars is loaded (jemalloc has read its setting): the setting stays as it was."""
    code = (
        "import dashboard, polars, os; before = os.environ['_RJEM_MALLOC_CONF']; "
        "dashboard.keep_freed_pages(); assert os.environ['_RJEM_MALLOC_CONF'] == before; print(before)"
    )
    got = _setting_after(code, None)
    assert _decays(got) == ("0", "0"), got


def test_slice_workers_keep_polars_own_allocator_setting():
    """The workers (started with _ATTNSCOPE_SLICE_WORKER) are left polars' default: returning
    every page at once cost them 0.5-0.7 s on the 910 MB trace for 18 MB less peak each. And they
    start no OpenBLAS threads (they never call BLAS; the threads spun while the loader imported)."""
    code = "import dashboard.engine.load, os; print(os.environ.get('_RJEM_MALLOC_CONF'))"
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    env["_ATTNSCOPE_SLICE_WORKER"] = "1"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "decay_ms:0" not in done.stdout, (done.stdout, done.stderr)
    if not Path("/proc/self/environ").exists():
        pytest.skip("no /proc to read a worker's environment from")
    started = load_workers._Workers(1)
    try:
        deadline = time.monotonic() + 10
        while True:  # empty until the kernel has set up the new program (Popen may return before that)
            environ = Path(f"/proc/{started.procs[0].pid}/environ").read_bytes().split(b"\0")
            if environ != [b""] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        started.close()
    assert b"_ATTNSCOPE_SLICE_WORKER=1" in environ
    assert not [e for e in environ if e.startswith(b"_RJEM_MALLOC_CONF=") and b"decay_ms:0" in e]
    assert b"OPENBLAS_NUM_THREADS=1" in environ


def _threads_after(code: str, given: str | None) -> tuple[str, int]:
    """What `code`, run in a fresh interpreter with OPENBLAS_NUM_THREADS set to `given` (unset for
    None), ends with: that setting and the process's thread count (Linux's /proc/self/task)."""
    code += "\nimport os; print(os.environ.get('OPENBLAS_NUM_THREADS'), len(os.listdir('/proc/self/task')))"
    setting, threads = _setting_after(code, given, "OPENBLAS_NUM_THREADS").split()
    return setting, int(threads)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="no /proc to count a process's threads")
def test_the_cli_starts_no_openblas_threads_and_a_callers_setting_wins():
    """The command never calls BLAS: its main() asks numpy's OpenBLAS for one thread (none of its
    own) before numpy is imported, as the slice workers do; a caller's setting is kept, and once
    numpy is imported the setting is left alone (OpenBLAS read it already)."""
    cli = "from dashboard import cli; cli.main(['--help'])"
    guarded = f"import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit): {cli}\nimport numpy"
    setting, threads = _threads_after(guarded, None)
    _, plain = _threads_after("import numpy", None)
    _, one = _threads_after("import numpy", "1")
    assert setting == "1" and threads == one <= plain, (setting, threads, one, plain)
    assert _threads_after(guarded, "2")[0] == "2"
    late = f"import numpy, contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit): {cli}"
    assert _threads_after(late, None)[0] == "None"


# A whole one-member stream is inflated by ISA-L (python-isal), anything else by zlib: what a file
# holds must not depend on which library read it.

GZ = sorted(p.name for p in DATA.glob("*.json.gz"))


@pytest.mark.parametrize("name", GZ)
def test_a_whole_stream_is_inflated_by_isal_to_the_bytes_gzip_gives(name, monkeypatch):
    packed = (DATA / name).read_bytes()
    taken = []
    real = load_inflate._inflate_whole
    monkeypatch.setattr(load_inflate, "_inflate_whole", lambda *args: taken.append(real(*args)) or taken[-1])
    data, _ = load_inflate.read_source(DATA / name)
    assert data == gzip.decompress(packed) and taken == [True]
    assert load_inflate.read_source(packed)[0] == data and taken == [True, True]  # an upload's bytes too


def test_a_cut_stream_gives_what_zlib_gives_whichever_library_is_there(monkeypatch):
    """40 cuts of the 8.6 MB trace's stream: ISA-L alone gave a byte fewer than zlib on 5 of them.
    A cut stream is read by zlib, with or without ISA-L installed."""
    import random

    packed = (DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz").read_bytes()
    cuts = sorted(random.Random(7).sample(range(1000, len(packed) - 1), 40)) + [len(packed) - 4, len(packed) - 1]
    for with_isal in (True, False):
        if not with_isal:
            monkeypatch.setattr(load_inflate, "_isal_zlib", None)
        for cut in cuts:
            want = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(packed[:cut])
            assert load_inflate.read_source(packed[:cut])[0] == load_reading._without_bom(want), (cut, with_isal)


@pytest.mark.parametrize("fault", ["crc", "length", "two members", "padding"])
def test_a_stream_isal_does_not_take_whole_is_read_by_zlib_as_before(fault, monkeypatch):
    """A bad checksum or length gives zlib's one-line error; several members or zero padding give
    gzip.decompress's bytes."""
    packed = bytearray((DATA / "hta_triton_example.json.gz").read_bytes())
    raw = gzip.decompress(bytes(packed))
    if fault == "crc":
        packed[-8] ^= 1
    elif fault == "length":
        packed[-4] ^= 1
    elif fault == "two members":
        packed = bytearray(gzip.compress(raw[:900]) + gzip.compress(raw[900:]))
    else:
        packed += b"\0" * 16
    results = []
    for isal in (load_inflate._isal_zlib, None):
        monkeypatch.setattr(load_inflate, "_isal_zlib", isal)
        try:
            results.append(load_inflate.read_source(bytes(packed), name="t.json.gz")[0])
        except TraceError as exc:
            results.append(str(exc))
    assert results[0] == results[1]
    if fault in ("crc", "length"):
        check = "data" if fault == "crc" else "length"
        assert (
            results[0]
            == f"t.json.gz: not a valid gzip file (Error -3 while decompressing data: incorrect {check} check)"
        )
    else:
        assert results[0] == raw
