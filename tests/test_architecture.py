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


def import_graph(spawns: bool = True) -> dict[str, set[str]]:
    """module -> the stability modules it imports (``from package import module`` names the module), and,
    with ``spawns``, the declared edges of the modules started by name (:data:`SPAWNS`)."""
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
    if spawns:
        for started, (_, starter) in SPAWNS.items():
            graph[started].add(starter)
    return graph


# ------------------------------------------------------------------ modules started by name
# A module the package starts as ``python -m MODULE`` (stability/workers/processes.py, Note [Started by name])
# is reached by a string, which no import shows. Each is declared here with the constant of processes.py
# that names it and the module that starts it. The edge is drawn as the started module's dependency on its
# starter (it runs under the starter's flags, environment and thread policy: WORKER_FLAGS, CLAIM_ENV,
# TOKEN_ENV), so it points down the house like an import; the starter reaches it by name only, never by an
# import, which the cycle checks below prove (an import of it by its starter would close a cycle).
PROCESSES = "stability.workers.processes"
SPAWNS = {  # started module -> (its constant in stability/workers/processes.py, the module that starts it)
    "stability.cli.worker": ("WORKER_MODULE", PROCESSES),   # a run's, a sweep's or a warm worker
    "stability.workers.timing": ("TIMING_MODULE", PROCESSES),  # the server's shape-timing child
}


def _constants(path: Path) -> dict[str, object]:
    """The module-level ``NAME = <str or tuple of names>`` assignments of ``path``, tuples resolved."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found[node.targets[0].id] = value.value
            elif isinstance(value, ast.Tuple) and all(isinstance(item, ast.Name) for item in value.elts):
                found[node.targets[0].id] = tuple(found.get(item.id) for item in value.elts)
    return found


def test_every_module_started_by_name_is_declared_and_exists_with_its_entry_point():
    modules = _modules()
    constants = _constants(modules[PROCESSES])
    assert set(constants["SPAWNED_MODULES"]) == set(SPAWNS)  # processes.py and this table name the same ones
    for started, (constant, starter) in SPAWNS.items():
        assert constants[constant] == started and starter in modules
        tree = ast.parse(modules[started].read_text())
        assert any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body), started
        guards = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
        assert guards and "main(" in ast.unparse(guards[0]), f"{started} has no `if __name__ == '__main__': main()`"


def test_the_graph_holds_the_spawn_edges_and_no_starter_imports_what_it_starts():
    with_spawns, imports = import_graph(), import_graph(spawns=False)
    for started, (_, starter) in SPAWNS.items():
        assert starter in with_spawns[started]
        assert started not in imports[starter]  # reached by name only
    assert "stability.workers.processes" in imports["stability.cli.worker"]  # the worker reads its starter's names


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_one_way_starts_a_module_of_the_package(path):
    """``python -m stability...`` is built only by processes.start, for a declared module: no command of the
    package names one of its modules in a literal, and only processes.py builds a ``-m`` command of a name."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.List, ast.Tuple)):
            continue
        items = node.elts
        for index, item in enumerate(items[:-1]):
            if isinstance(item, ast.Constant) and item.value == "-m":
                module = items[index + 1]
                literal = isinstance(module, ast.Constant) and isinstance(module.value, str)
                assert not (literal and module.value.startswith("stability")), f"{path.name} starts {module.value}"
                assert literal or _module_name(path) == PROCESSES, f"{path.name} builds a `-m` command of a name"


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
    graph = import_graph(spawns=False)
    # stability.cli.worker imports the sweep worker and the queue inside main(), not at the top
    assert {"stability.sweeps.workers", "stability.workers.scheduler"} <= graph["stability.cli.worker"]


def test_no_module_imports_its_way_back_to_itself():
    """Every import, and every module started by name (SPAWNS) as an edge to its starter."""
    assert cycles(import_graph()) == []


def test_rooms_import_one_way():
    """Between folders, too: no room imports a room that imports it back (the spawn edges counted)."""
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
