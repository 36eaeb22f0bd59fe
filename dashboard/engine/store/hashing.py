"""A file's SHA-256, the store's key for it: read in chunks, and (Hashing) by a thread of its own
that runs at the lowest priority, so that it takes only a core the load leaves idle.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Union

_CHUNK = 1 << 20  # bytes read at a time for hashing


def sha256_of(source: Union[str, os.PathLike, bytes]) -> str:
    """Hex SHA-256 of a file's bytes (read in chunks) or of bytes."""
    digest = hashlib.sha256()
    if isinstance(source, (bytes, bytearray, memoryview)):
        digest.update(source)
    else:
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        with open(source, "rb", buffering=0) as fh:
            while size := fh.readinto(buffer):
                digest.update(view[:size])
    return digest.hexdigest()


class Hashing:
    """sha256_of(path), begun now by a thread of its own at the lowest priority (nice 19, Linux):
    a first open's slice workers keep both cores busy and the hash waits for them; it runs while
    the loading process builds the tables and analyses on one core. Hashed after the load by the
    store's writer, the 910 MB trace's hash (0.8 s) was most of what the command then waited for.
    `result()` hashes what is left itself, in the caller's thread and at its priority, beside the
    low-priority thread: on a busy machine a nice-19 thread gets almost no core, and the command
    waited for it (1.2 s of a 6 s first open of the 882 MB trace at load 4). The chunks are read and
    hashed in file order under one lock, whoever reads them. `result()` raises the OSError of a
    read."""

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        self._digest = hashlib.sha256()
        self._lock = threading.Lock()  # a chunk is read and hashed under it: one reader at a time, in order
        self._buffer = bytearray(_CHUNK)
        self._fh = None  # opened by the first reader
        self._path = path
        self._sha: str | None = None
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="attnscope-hash", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:  # this thread only: on Linux a thread's own id names it to setpriority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):  # another system: the hash runs at the process's priority
            pass
        while self._step():
            pass

    def _step(self) -> bool:
        """Read and hash the next chunk; False once the file is hashed (or could not be read)."""
        with self._lock:
            if self._sha is not None or self._error is not None:
                return False
            try:
                if self._fh is None:
                    self._fh = open(self._path, "rb", buffering=0)
                size = self._fh.readinto(self._buffer)
            except OSError as exc:
                self._error = exc
                self._close()
                return False
            if size:
                self._digest.update(memoryview(self._buffer)[:size])
                return True
            self._sha = self._digest.hexdigest()
            self._close()
            return False

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def result(self) -> str:
        while self._step():
            pass
        if self._error is not None:
            raise self._error
        assert self._sha is not None
        return self._sha
