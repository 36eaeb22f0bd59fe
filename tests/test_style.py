"""The house style, checked: ruff's formatter (120 columns) has nothing to change and its linter
(pyflakes' errors, pycodestyle's, lines of at most 160 characters) nothing to say, on the whole
tree. pyproject.toml's [tool.ruff] holds the settings; `ruff format . && ruff check .` fixes most."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _ruff(*args: str) -> subprocess.CompletedProcess:
    try:
        import ruff  # noqa: F401
    except ImportError:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", "ruff", *args], capture_output=True, text=True, cwd=REPO)


def test_the_formatter_has_nothing_to_change():
    out = _ruff("format", "--check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_linter_has_nothing_to_say():
    out = _ruff("check", "--output-format", "concise", ".")
    assert out.returncode == 0, out.stdout + out.stderr
