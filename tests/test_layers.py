"""The layer contract (DESIGN.md): the engine computes, never draws; charts draw, never serve."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DASHBOARD = Path(__file__).resolve().parent.parent / "dashboard"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _forbidden(path: Path, prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in imported_modules(path) if m.startswith(prefixes))


@pytest.mark.parametrize("path", sorted((DASHBOARD / "engine").glob("*.py")), ids=lambda p: p.name)
def test_the_engine_imports_no_streamlit_plotly_or_views(path):
    assert _forbidden(path, ("streamlit", "plotly", "dashboard.views", "dashboard.charts", "dashboard.app", "dashboard.runs")) == []


@pytest.mark.parametrize("name", ["charts.py", "report.py", "cli.py"])
def test_charts_reports_and_cli_work_without_streamlit(name):
    assert _forbidden(DASHBOARD / name, ("streamlit", "dashboard.views", "dashboard.app", "dashboard.runs")) == []
