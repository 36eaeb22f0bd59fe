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
    `result()` waits for it, and raises its OSError."""

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        self._sha: str | None = None
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, args=(path,), name="attnscope-hash", daemon=True)
        self._thread.start()

    def _run(self, path: Union[str, os.PathLike]) -> None:
        try:  # this thread only: on Linux a thread's own id names it to setpriority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):  # another system: the hash runs at the process's priority
            pass
        try:
            self._sha = sha256_of(path)
        except OSError as exc:
            self._error = exc

    def result(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._sha is not None
        return self._sha
