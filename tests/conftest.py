"""Shared test setup: tests/ on sys.path so tests can import the json-module oracles, and the
session's shared fixtures."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# Every test (and every server or CLI process a test starts) keeps parsed traces in a store of its
# own, never in the user's cache dir.
import atexit  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

if "ATTNSCOPE_STORE" not in os.environ:  # (xdist's workers inherit the session's)
    os.environ["ATTNSCOPE_STORE"] = tempfile.mkdtemp(prefix="attnscope-test-store-")
    atexit.register(shutil.rmtree, os.environ["ATTNSCOPE_STORE"], ignore_errors=True)  # not left in /tmp

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# The committed traces a session may parse once and share: they are read, never written, here.
SHARED_TRACES = (REPO / "tests" / "data", REPO / "sample_traces")


@pytest.fixture(scope="session")
def trace_of():
    """trace_of(path) -> load_trace(path), parsed once per session for a committed trace under
    tests/data/ or sample_traces/ (keyed by the file's path, size and mtime, so a file changed
    meanwhile is read again). For tests that only read the Trace: a test that changes one, or that
    tests the loading itself (patched loaders, limits, progress, workers), calls load_trace."""
    from dashboard.engine import load_trace

    cache: dict[tuple, object] = {}

    def load(path) -> object:
        path = Path(path).resolve()
        if not any(path.is_relative_to(root) for root in SHARED_TRACES):
            raise ValueError(f"trace_of shares committed traces only, not {path}")
        stat = path.stat()
        key = (path, stat.st_size, stat.st_mtime_ns)
        if key not in cache:
            cache[key] = load_trace(path)
        return cache[key]

    return load
