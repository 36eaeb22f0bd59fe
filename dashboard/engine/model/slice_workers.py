"""The slice worker processes (load/workers.py runs them, load/slices.py asks them and reads their
answers): fresh interpreters that read slices of a large file, their start and their loop. Here, on
the model floor, without polars, so that a command can start them before it imports polars and
the engine (`prestart`).

A slice of a file with PLAIN_FROM_BYTES of events or more is answered "plain": the C scanner's
columns as bytes, made into frames by the loading process, and a worker that reads only such
files never imports polars (it starts in 0.04 s instead of 0.26 s and 0.36 s of CPU, on the cores
the command imports on); the frames are made once instead of made, pickled and unpickled. A
smaller file's slices come back as frames, made in the worker: the loading process then runs less
of polars' code and keeps fewer of its pages (the ~180 MB traces' peak, 1.11x the JSON against
1.16x plain, where the goal is 1.1x), and such a worker imports polars as it starts.
"""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Union

from dashboard.engine.model import settings

# Plain JSON files at least this large are read in slices by worker processes, one per core
# (load/slices.py; it names this SLICED_MIN_BYTES too).
SLICED_MIN_BYTES = 64 << 20
_GZIP_MAGIC = b"\x1f\x8b"

_prestarted: list[subprocess.Popen] = []


def count() -> int:
    """How many workers: one per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# A file with this many bytes of events or more is read in slices answered plain (see above).
PLAIN_FROM_BYTES = 512 << 20


def spawn(workers: int, frames: bool = True) -> list[subprocess.Popen]:
    """Start `workers` worker processes (`python -c`, not forks: see load/workers._Workers);
    `frames`: they import polars and the engine as they start (for a file whose slices come back
    as frames), else at the first such slice."""
    root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ)
    # Workers keep polars' own allocator setting (see dashboard/__init__.py): returning every freed
    # page at once cost them 0.5-0.7 s on the 910 MB trace for 18 MB less peak each.
    env.pop("_RJEM_MALLOC_CONF", None)
    env[settings.SLICE_WORKER.name] = "1"
    # A worker never calls BLAS, but numpy's OpenBLAS starts a thread per core at import that spins
    # a while, on the cores the loading process is importing on: the first open of the 176 MB dense
    # trace took 0.05 s less CPU time without them (four interleaved pairs).
    env["OPENBLAS_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # root first: `python -c` puts the working directory ahead of PYTHONPATH, and a `dashboard`
    # there (another checkout) would otherwise answer for this one
    # (the module named is where a slice the scanner leaves goes: the load floor, above this one)
    code = (
        f"import sys; sys.path.insert(0, {root!r}); from dashboard.engine.model.slice_workers import serve; "
        f"serve('dashboard.engine.load.slices', frames={frames!r})"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        for _ in range(workers)
    ]
    for proc in procs:
        _wide_pipe(proc.stdout)
    return procs


def _wide_pipe(stream: Any) -> None:
    """Let a worker's answers pipe hold up to 1 MiB (64 KiB by default), where the system allows:
    an answer of a few MB then crosses in a few reads instead of one per 64 KiB, each of which the
    loading process's reader thread takes the GIL for."""
    try:
        import fcntl

        fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # not Linux, or above the system's pipe-max-size
        pass


PIPE_BYTES = 1 << 20


def prestart(path: Union[str, os.PathLike]) -> bool:
    """Start the workers now when `path` is a plain file the loader will read in slices (at least
    SLICED_MIN_BYTES, not gzip) on two cores or more; the loader takes them (`take`). Whether it
    started them. A file that then takes another path leaves them to `discard`."""
    if _prestarted or count() < 2 or os.environ.get(settings.SLICE_WORKER.name):
        return False
    try:
        if not os.path.isfile(path) or (size := os.path.getsize(path)) < SLICED_MIN_BYTES:
            return False
        with open(path, "rb") as fh:
            if fh.read(2) == _GZIP_MAGIC:
                return False
    except OSError:
        return False
    _prestarted.extend(spawn(count(), frames=size < PLAIN_FROM_BYTES))
    return True


def take(workers: int) -> list[subprocess.Popen] | None:
    """The prestarted workers for the loader, when there are `workers` of them, all alive; else
    None (any there are closed)."""
    procs = list(_prestarted)
    _prestarted.clear()
    if len(procs) == workers and all(proc.poll() is None for proc in procs):
        return procs
    _close(procs)
    return None


def discard() -> None:
    """Close prestarted workers that no load took (the file was read another way)."""
    procs = list(_prestarted)
    _prestarted.clear()
    _close(procs)


def _close(procs: list[subprocess.Popen]) -> None:
    for proc in procs:  # a worker exits when its stdin closes
        try:
            proc.stdin.close()
            proc.wait(timeout=5)
        except Exception:
            proc.kill()


def serve(engine: str, frames: bool = True) -> None:
    """A worker's loop: read a task (path, lo, hi, label, plain) from stdin and answer on stdout
    (send_answer) for the events in bytes [lo, hi) of the file: when `plain`, ("scanned", the
    scanner's plain tuple); else, or when the scanner leaves them to msgspec, what the module
    `engine`'s `worker_slice` answers (("ok", (parts, reading)) or ("failed", why)); ("failed",
    why) when the slice cannot be read. `frames`: import `engine` (and polars) now."""
    import importlib

    try:
        from dashboard.engine import _scan
    except ImportError:  # pragma: no cover - a build without a C compiler
        _scan = None
    if frames:
        importlib.import_module(engine)
    stdin = sys.stdin.buffer
    stdout = os.fdopen(os.dup(1), "wb")  # the answers' own pipe: anything else printed goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    while True:
        payload = receive(stdin)
        if payload is None:
            return
        try:
            path, lo, hi, label, plain = pickle.loads(payload)
            raw = read_slice(path, lo, hi)
            got = _scan.scan_plain(raw) if plain and _scan is not None else None
            if got is not None:
                # the columns' bytes travel beside the pickle, and arrive in one mapping (receive_answer)
                out = pickle.PickleBuffer
                columns = [(out(values), fmt, None if valid is None else out(valid)) for values, fmt, valid in got[4]]
                answer = ("scanned", (*got[:4], columns, *got[5:]))
            else:
                answer = importlib.import_module(engine).worker_slice(raw, label, scan=not plain)
        except Exception as exc:  # noqa: BLE001 - the parent falls back to the one-process path
            answer = ("failed", f"{type(exc).__name__}: {exc}")
        send_answer(stdout, answer)


def read_slice(path: str, lo: int, hi: int) -> bytearray:
    """Bytes [lo, hi) of a file between the brackets of a JSON array, read in place (b"[" + read +
    b"]" copied the slice once more). OSError when the file is shorter than that."""
    raw = bytearray(hi - lo + 2)
    raw[0], raw[-1] = ord("["), ord("]")
    view, got = memoryview(raw)[1:-1], 0
    with open(path, "rb", buffering=0) as fh:
        fh.seek(lo)
        while got < len(view):  # a read may return less than asked
            done = fh.readinto(view[got:])
            if not done:
                raise OSError(f"{path} is shorter than when it was cut into slices")
            got += done
    del view
    return raw


def send_answer(stream: Any, answer: Any) -> None:
    """An answer down a worker's pipe: the sizes (8 bytes each, little-endian: how many parts, then
    each part's), the pickle (protocol 5), then each of its out-of-band buffers (pickle.PickleBuffer)."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(answer, protocol=5, buffer_callback=buffers.append)
    views = [buffer.raw() for buffer in buffers]
    sizes = [len(head), *(view.nbytes for view in views)]
    stream.write(b"".join(n.to_bytes(8, "little") for n in (len(sizes), *sizes)))
    stream.write(head)
    for view in views:
        stream.write(view)
    stream.flush()


def receive_answer(stream: Any) -> Any:
    """The next answer send_answer wrote, unpickled (None when the pipe closed, or ended mid-answer)."""
    got = receive_answer_bytes(stream)
    return None if got is None else unpickle_answer(got)


def unpickle_answer(got: tuple[memoryview, list[int]]) -> Any:
    """What receive_answer_bytes read, unpickled: its out-of-band buffers are views of it."""
    view, ends = got
    return pickle.loads(view[: ends[0]], buffers=[view[a:b] for a, b in zip(ends, ends[1:])])


def receive_answer_bytes(stream: Any) -> tuple[memoryview, list[int]] | None:
    """The next answer send_answer wrote (None when the pipe closed, or ended mid-answer). Its parts
    are read into one buffer, mapped pages of its own when large, and its out-of-band buffers are
    views of it: no copy per column, and nothing left in the C heap once the answer is let go (the
    heap kept up to 35 MB of the slices' bytes in a first open of a 187 MB trace, past the tables'
    peak)."""
    count = stream.read(8)
    if len(count) < 8:
        return None
    want = 8 * int.from_bytes(count, "little")
    lead = stream.read(want)
    if len(lead) < want or not lead:
        return None
    ends = list(itertools.accumulate(int.from_bytes(lead[i : i + 8], "little") for i in range(0, want, 8)))
    total = ends[-1]
    if total >= MAPPED_ANSWER_BYTES:
        import mmap

        body: Any = mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    else:
        body = bytearray(total)
    view, got = memoryview(body), 0
    while got < total:
        done = stream.readinto(view[got:])
        if not done:
            return None
        got += done
    return view, ends


# An answer at least this large is read into mapped pages of its own (receive_answer).
MAPPED_ANSWER_BYTES = 1 << 16


def send(stream: Any, payload: bytes) -> None:
    """One message down a pipe: its length (8 bytes, little-endian), then its bytes."""
    stream.write(len(payload).to_bytes(8, "little"))
    stream.write(payload)
    stream.flush()


def receive(stream: Any) -> bytes | None:
    """The next message from a pipe, or None when it closed (or ended mid-message)."""
    size = stream.read(8)
    if len(size) < 8:
        return None
    payload = stream.read(int.from_bytes(size, "little"))
    return payload if len(payload) == int.from_bytes(size, "little") else None
