"""Shared test setup: tests/ on sys.path so tests can import the json-module oracles."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# Every test (and every server or CLI process a test starts) keeps parsed traces in a store of its
# own, never in the user's cache dir.
import os  # noqa: E402
import tempfile  # noqa: E402

os.environ.setdefault("ATTNSCOPE_STORE", tempfile.mkdtemp(prefix="attnscope-test-store-"))
