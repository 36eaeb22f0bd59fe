"""The start of the slice worker processes (load/workers.py runs them, load/slices.py is their
side): fresh interpreters that read slices of a large file. Here, on the model floor, without
polars, so that a command can start them before it imports polars and the engine (`prestart`):
each worker's own start and imports (about 0.3 s) then run beside the command's instead of after
them, while its cores would otherwise wait.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Union

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


def spawn(workers: int) -> list[subprocess.Popen]:
    """Start `workers` worker processes (`python -c`, not forks: see load/workers._Workers)."""
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
    code = f"import sys; sys.path.insert(0, {root!r}); from dashboard.engine.load.slices import _serve; _serve()"
    return [
        subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        for _ in range(workers)
    ]


def prestart(path: Union[str, os.PathLike]) -> bool:
    """Start the workers now when `path` is a plain file the loader will read in slices (at least
    SLICED_MIN_BYTES, not gzip) on two cores or more; the loader takes them (`take`). Whether it
    started them. A file that then takes another path leaves them to `discard`."""
    if _prestarted or count() < 2 or os.environ.get(settings.SLICE_WORKER.name):
        return False
    try:
        if not os.path.isfile(path) or os.path.getsize(path) < SLICED_MIN_BYTES:
            return False
        with open(path, "rb") as fh:
            if fh.read(2) == _GZIP_MAGIC:
                return False
    except OSError:
        return False
    _prestarted.extend(spawn(count()))
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
