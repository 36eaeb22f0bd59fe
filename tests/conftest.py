"""Shared test setup: tests/ on sys.path so tests can import the json-module oracles."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
