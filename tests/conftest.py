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


def pytest_collection_modifyitems(config, items) -> None:
    """The files that hold `slow` cases (the longest browser and fuzz files, 60-160 s each) first,
    then the others by their number of tests, most first (xdist's own order, turned off in
    pyproject's addopts so that this one holds): `--dist loadfile` hands the files to the two
    workers in this order, and with the long files last one worker ran them alone while the
    other had finished (the two workers' sums of test time 868 and 798 s, 7 December)."""
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
    slow = {name for name, group in by_file.items() if any(i.get_closest_marker("slow") for i in group)}
    order = sorted(by_file, key=lambda name: (name not in slow, -len(by_file[name])))
    items[:] = [item for name in order for item in by_file[name]]


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
