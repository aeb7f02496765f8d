"""The shape of stability/ (docs/architecture.md): imports point one way, modules and functions stay small.

Every import counts, the ones inside functions and under ``TYPE_CHECKING`` too: a function-level
import that closes a cycle is a cycle. The graph is read from the source with ``ast`` (nothing is
imported), so a test of it cannot be fooled by import order.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "stability"
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def import_graph() -> dict[str, set[str]]:
    """module -> the stability modules it imports (``from package import module`` names the module)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                           for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # `import stability.runs.store` names the module
                    target = target.rpartition(".")[0]
                if target.startswith("stability") and target != name and target != "stability":
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def room(module: str) -> str:
    """The folder a module lives in: ``stability.runs.store`` -> ``stability.runs``."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    # stability.cli.worker imports the sweep worker and the runner inside main(), not at the top
    assert {"stability.sweeps.workers", "stability.execution.runner"} <= graph["stability.cli.worker"]


def test_no_module_imports_its_way_back_to_itself():
    assert cycles(import_graph()) == []


def test_rooms_import_one_way():
    """Between folders, too: no room imports a room that imports it back."""
    rooms: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        rooms.setdefault(room(module), set()).update(room(t) for t in targets if room(t) != room(module))
    assert cycles(rooms) == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_and_functions_stay_small(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{path.name} has {len(text.splitlines())} lines"
    long = [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines: {long}"


PAGES = PACKAGE.parent / "pages"
MAX_PAGE_MODULE_LINES = 500  # a page is a storyboard; what it computes lives in stability/ (issue 34)


def _imported_tops(path: Path) -> set[str]:
    """The top-level packages a module imports (``streamlit`` for ``from streamlit.x import y``), every import."""
    tops = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            tops |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            tops.add(node.module.partition(".")[0])
    return tops


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_package_never_imports_streamlit_or_the_pages(path):
    """stability/ runs and is tested without Streamlit: the pages draw it, it never draws (docs/architecture.md)."""
    assert not _imported_tops(path) & {"streamlit", "pages"}, f"{path.name} imports streamlit or pages"


@pytest.mark.parametrize("path", sorted(PAGES.rglob("*.py")), ids=lambda p: str(p.relative_to(PAGES)))
def test_page_modules_stay_small(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_PAGE_MODULE_LINES, f"pages/{path.relative_to(PAGES)} has {lines} lines"
