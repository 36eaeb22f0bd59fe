"""The engine's floors (docs/design.md): each folder of dashboard/engine is a floor that imports
only the floors below it, counting imports inside functions, so that a module's place says what it
may know. The facade (dashboard/engine/__init__.py, analysis.py, comparison.py) sits on top; the C scanner
(_scan) is a leaf any floor may use."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_layers import import_graph

ENGINE = Path(__file__).resolve().parent.parent / "dashboard" / "engine"
FLOORS = ("model", "rules", "load", "analyses", "compare", "store")
"""Bottom to top."""
TOP = ("dashboard.engine", "dashboard.engine.analysis", "dashboard.engine.comparison")


def floor_of(module: str) -> int | None:
    """A module's floor (0 = model), len(FLOORS) for the facade, None outside the engine."""
    if module in TOP:
        return len(FLOORS)
    parts = module.split(".")
    if parts[:2] != ["dashboard", "engine"] or len(parts) < 3:
        return None
    return FLOORS.index(parts[2]) if parts[2] in FLOORS else None


def test_every_engine_module_lives_on_a_floor():
    stray = sorted(
        str(p.relative_to(ENGINE))
        for p in ENGINE.glob("*.py")
        if p.name not in ("__init__.py", "analysis.py", "comparison.py")
    )
    assert stray == [], f"modules of the engine outside its floors: {stray}"
    assert sorted(p.name for p in ENGINE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(FLOORS)
    assert len(FLOORS) <= 6


def test_no_import_runs_up_a_floor():
    graph = import_graph()
    up = sorted(
        f"{name} ({FLOORS[floor_of(name)] if floor_of(name) < len(FLOORS) else 'facade'}) imports {dep} "
        f"({FLOORS[floor_of(dep)] if floor_of(dep) < len(FLOORS) else 'facade'})"
        for name, deps in graph.items()
        if floor_of(name) is not None
        for dep in deps
        if floor_of(dep) is not None and floor_of(dep) > floor_of(name)
    )
    assert up == []


def test_the_floor_check_sees_an_import_that_runs_up():
    assert floor_of("dashboard.engine.model.trace") < floor_of("dashboard.engine.analyses.kernels")
    graph = import_graph()
    assert any(floor_of(dep) == 0 for dep in graph["dashboard.engine.analyses.kernels"])  # it does see imports down


@pytest.mark.parametrize("path", sorted(ENGINE.rglob("*.py")), ids=lambda p: str(p.relative_to(ENGINE)))
def test_no_module_of_the_engine_is_over_600_lines(path):
    assert len(path.read_text().splitlines()) <= 600


ROOT = ENGINE.parent.parent
CODE = sorted(
    p
    for folder in ("dashboard", "collectors", "benchmarks", "docs")
    for p in (ROOT / folder).rglob("*.py")
    if "__pycache__" not in p.parts
)


@pytest.mark.parametrize("path", CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_600_lines_and_no_function_over_80(path):
    """The house's size rules (docs/design.md), everywhere the project's code lives, not only in the engine."""
    import ast

    text = path.read_text()
    assert len(text.splitlines()) <= 600, f"{path.name}: {len(text.splitlines())} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80
    ]
    assert long == [], f"{path.name}: functions over 80 lines: {long}"
