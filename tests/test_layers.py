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
    assert (
        _forbidden(
            path,
            (
                "streamlit",
                "plotly",
                "dashboard.views",
                "dashboard.charts",
                "dashboard.app",
                "dashboard.runs",
                "dashboard.catalog",
                "dashboard.engine.catalog",
            ),
        )
        == []
    )


def test_the_run_picker_is_the_dashboards_not_the_engines():
    """catalog.py reads the command line, uploads and run labels: it is dashboard/catalog.py, and no
    module of the engine (its loader included) imports it, at module level or inside a function."""
    assert (DASHBOARD / "catalog.py").is_file() and not (DASHBOARD / "engine" / "catalog.py").exists()
    graph = import_graph()
    assert "dashboard.engine.catalog" not in graph
    engine = {name: deps for name, deps in graph.items() if name.startswith("dashboard.engine")}
    assert engine and not [name for name, deps in engine.items() if "dashboard.catalog" in deps]
    assert "dashboard.catalog" in graph["dashboard.runs"]  # the graph does see the dashboard's imports of it


@pytest.mark.parametrize("name", ["charts", "report", "cli"])
def test_charts_reports_and_cli_work_without_streamlit(name):
    """Each a module or a package: every module of a package is held to it."""
    paths = (
        [DASHBOARD / f"{name}.py"] if (DASHBOARD / f"{name}.py").exists() else sorted((DASHBOARD / name).rglob("*.py"))
    )
    assert paths
    for path in paths:
        assert _forbidden(path, ("streamlit", "dashboard.views", "dashboard.app", "dashboard.runs")) == [], path


ROOT = DASHBOARD.parent


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_extension(name: str) -> bool:
    """A C extension of ours (dashboard.engine._scan): a module with no Python source."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".c").exists() or any(path.parent.glob(path.name + ".*.so"))


def import_graph() -> dict[str, set[str]]:
    """The project's modules (dashboard/, collectors/) -> the project modules each imports, counting
    imports inside functions: a circle closed by a function-level import is still a circle."""
    modules = {_module_of(p): p for pkg in ("dashboard", "collectors") for p in (ROOT / pkg).rglob("*.py")}

    def resolve(name: str) -> str | None:
        if _is_extension(name):
            return None
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                deps.update(r for r in (resolve(a.name) for a in node.names) if r)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in modules else (None if _is_extension(full) else resolve(base))
                    if target:
                        deps.add(target)
        deps.discard(name)
        graph[name] = deps
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return circles


def test_no_module_of_the_project_imports_itself_through_others():
    assert import_circles(import_graph()) == []


def test_the_circle_finder_sees_a_circle_closed_inside_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert (
        "dashboard.engine.analyses.classes" in import_graph()["dashboard.engine.analyses.backends"]
    )  # read at module level and in functions


@pytest.mark.parametrize(
    "path", sorted((DASHBOARD / "engine").rglob("*.py")), ids=lambda p: str(p.relative_to(DASHBOARD / "engine"))
)
def test_the_engine_and_its_loader_import_no_streamlit_plotly_or_views(path):
    assert (
        _forbidden(
            path,
            (
                "streamlit",
                "plotly",
                "dashboard.views",
                "dashboard.charts",
                "dashboard.app",
                "dashboard.runs",
                "dashboard.uploads",
                "dashboard.catalog",
                "dashboard.engine.catalog",
            ),
        )
        == []
    )
