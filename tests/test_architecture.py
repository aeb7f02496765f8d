"""The shape of stability/ (docs/architecture.md): imports point one way, modules and functions stay small.

Every import counts, the ones inside functions and under ``TYPE_CHECKING`` too: a function-level
import that closes a cycle is a cycle. The graph is read from the source with ``ast`` (nothing is
imported), so a test of it cannot be fooled by import order.

Each room has a public face, the ``__all__`` of its ``__init__.py`` (most names in its ``_FACE`` table, imported
on first use: stability/core/faces.py). Every import that crosses rooms, from stability/, pages/, app.py and
benchmarks/, names only names of the target room's face, whichever module path it goes through
(``from stability.runs.store import RunStore`` and ``from stability.runs import RunStore`` alike). A module
imported whole across rooms (``from stability.execution import lifecycle``, ``import stability.workers.scheduler
as s``) is a name of the face like any other, and so is every name read off it (``lifecycle.claimed``,
``s.stop_run``), as every name read off a room imported whole (``from stability import sweeps``:
``sweeps.results``). The tests may import anything. pages/ and app.py sit above the rooms: no room imports them.
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


# ------------------------------------------------------------------ each room's face
# A room's face is the ``__all__`` of its ``__init__.py``: the names other rooms, pages/, app.py and benchmarks/
# may import from it (docs/architecture.md, "A room's face"). Most are declared in a table ``_FACE`` (name ->
# the module of the room that holds it, None for a module itself) and imported on first use
# (stability/core/faces.py), so importing a room imports none of its modules. Every import that crosses rooms
# names only names of the target room's face, whichever module path it goes through:
#   from stability.runs.store import RunStore      RunStore must be in stability.runs' face
#   from ..runs.status import TERMINAL             (relative imports resolved)
#   from stability.execution import lifecycle      a whole module is a name: lifecycle must be in the face,
#   import stability.workers.scheduler as s        and so must every name read off it (lifecycle.claimed, s.stop_run)
#   from stability import sweeps; sweeps.results   a room imported whole: the names read off it (results)
#   from stability import RunStore                 the package's own face (stability/__init__.py's __all__)
# Imports inside a room, and the tests (which may import anything), are not crossings.
ROOT = PACKAGE.parent
ROOMS = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))


def _importer_sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *PAGES.rglob("*.py"), ROOT / "app.py", *(ROOT / "benchmarks").rglob("*.py")])


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def owner(module: str) -> str:
    """The room a module lives in (``stability.runs``), else its top folder (``pages``, ``benchmarks``) or itself."""
    parts = module.split(".")
    if parts[0] == "stability":
        return f"stability.{parts[1]}" if len(parts) > 1 and parts[1] in ROOMS else module
    return parts[0]


def face(init: Path) -> set[str]:
    """The names of ``__all__`` in ``init``, read with ``ast``: a list of strings, ``sorted(TABLE)``, ``[*TABLE]``
    (the keys of a module-level dict), and ``__all__ += ...``."""
    tree = ast.parse(init.read_text())
    tables = {(node.targets[0] if isinstance(node, ast.Assign) else node.target).id:
              {key.value for key in node.value.keys}
              for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
              and isinstance(node.value, ast.Dict)
              and isinstance(node.targets[0] if isinstance(node, ast.Assign) else node.target, ast.Name)}

    def names(value: ast.expr) -> set[str]:
        if isinstance(value, ast.Name):
            return tables[value.id]
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in {"sorted", "list"}:
            return names(value.args[0])
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
            return names(value.left) | names(value.right)
        if isinstance(value, (ast.List, ast.Tuple)):
            return set().union(*[{item.value} if isinstance(item, ast.Constant) else names(item.value)
                                 for item in value.elts])
        raise AssertionError(f"{init}: __all__ = {ast.unparse(value)} is not read without importing it")

    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            found = names(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == "__all__":
            found |= names(node.value)
    return found


def faces() -> dict[str, set[str]]:
    """room -> its face; ``stability`` -> the package's own (``from stability import RunStore``)."""
    found = {f"stability.{name}": face(PACKAGE / name / "__init__.py") for name in ROOMS}
    found["stability"] = face(PACKAGE / "__init__.py")
    return found


def crossings(source: str, module: str, is_package: bool = False) -> list[tuple[int, str, str]]:
    """``(line, room, name)`` for every name ``module`` (its ``source``) takes from a room it is not in: the names
    it imports from the room's modules or the room, the modules it imports (as names), and the names it reads off
    an imported module or room (``lifecycle.claimed``); room ``stability`` for a name of the package itself."""
    modules = set(_modules())
    me = owner(module)
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # a local name bound to a module or a room of another room -> that room
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source_module = node.module or ""
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source_module = ".".join(base + ([node.module] if node.module else []))
            if source_module.partition(".")[0] != "stability":
                continue
            for alias in node.names:
                if source_module == "stability" and alias.name in ROOMS:  # a room imported whole
                    if f"stability.{alias.name}" != me:
                        aliases[alias.asname or alias.name] = f"stability.{alias.name}"
                elif source_module == "stability":
                    found.append((node.lineno, "stability", alias.name))
                elif owner(source_module) != me:
                    found.append((node.lineno, owner(source_module), alias.name))
                    if f"{source_module}.{alias.name}" in modules:
                        aliases[alias.asname or alias.name] = owner(source_module)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = owner(alias.name)
                if not alias.name.startswith("stability.") or target == me or target == "stability":
                    continue
                if alias.name != target:  # import stability.runs.store [as s]: the module is a name
                    found.append((node.lineno, target, alias.name.rpartition(".")[2]))
                if alias.asname:
                    aliases[alias.asname] = target
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            found.append((node.lineno, aliases[node.value.id], node.attr))
    return sorted(set(found))


def _not_in_faces(path: Path, known: dict[str, set[str]]) -> list[str]:
    module = _dotted(path)
    return [f"{path.relative_to(ROOT)}:{line} {name} (not in {room}'s face)"
            for line, room, name in crossings(path.read_text(), module, path.name == "__init__.py")
            if name not in known.get(room, set())]


def test_every_import_across_rooms_names_only_the_target_rooms_face():
    """stability/, pages/, app.py and benchmarks/: a name a room does not export is not imported from it."""
    known = faces()
    outside = [problem for path in _importer_sources() for problem in _not_in_faces(path, known)]
    assert outside == [], "imports of names no face declares (add them to the room's _FACE, or import what is):\n" \
        + "\n".join(outside)


def test_a_page_importing_a_name_no_face_declares_fails():
    """The check can fail: a page that reaches past a room's face, by any path, is caught."""
    page = ("from stability.runs.store import RunStore, _connect\n"       # a name past the face
            "from stability.execution import lifecycle, signals\n"        # a module past the face
            "import stability.workers.scheduler as scheduler\n"
            "from stability import sweeps, RunStore as Store, _PUBLIC\n"
            "def f():\n"
            "    from ..runs.status import TERMINAL\n"                      # a room's name, in a function
            "    lifecycle.claimed; lifecycle._private; scheduler.stop_run; sweeps.results; sweeps._helper\n")
    known = faces()
    taken = crossings(page, "pages.planted")
    assert {(1, "stability.runs", "_connect"), (2, "stability.execution", "signals"),
            (7, "stability.execution", "_private"), (7, "stability.sweeps", "_helper"),
            (4, "stability", "_PUBLIC")} <= set(taken)
    outside = {(room, name) for _, room, name in taken if name not in known[room]}
    assert outside == {("stability.runs", "_connect"), ("stability.execution", "signals"),
                       ("stability.execution", "_private"), ("stability.sweeps", "_helper"), ("stability", "_PUBLIC")}
    assert crossings("from .store import RunStore\nfrom . import status\n", "stability.runs.table") == []  # inside


def test_every_name_of_a_face_is_held_where_its_table_says():
    """A face names no ghost: each ``_FACE`` entry's module exists in the room and binds the name at its top
    (None: the name is that module), and every other name of ``__all__`` is bound in the ``__init__`` itself."""
    ghosts = []
    for name in ROOMS:
        init = PACKAGE / name / "__init__.py"
        tree = ast.parse(init.read_text())
        table = next((ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                      and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "_FACE"), {})
        for entry, holder in table.items():
            path = PACKAGE / name / f"{holder or entry}.py"
            if not path.exists() or holder and entry not in _bound(ast.parse(path.read_text())):
                ghosts.append(f"stability.{name}: {entry} -> {holder}")
        ghosts += [f"stability.{name}: {entry} (not bound in __init__)"
                   for entry in face(init) - set(table) - _bound(tree)]
    assert ghosts == []


def _bound(tree: ast.Module) -> set[str]:
    """The names a module binds at its top: definitions, assignments, imports."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).partition(".")[0] for alias in node.names}
    return names


def test_pages_and_the_app_sit_above_the_rooms_with_no_cycle():
    """pages/ and app.py import rooms; no room imports them back (the graph of rooms with both, no cycle)."""
    graph: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        graph.setdefault(room(module), set()).update(room(t) for t in targets if room(t) != room(module))
    for path in [*PAGES.rglob("*.py"), ROOT / "app.py"]:
        node = owner(_dotted(path))  # pages, or app
        graph.setdefault(node, set()).update(f"stability.{name}" for name in _imported_rooms(path))
    assert not any({"pages", "app"} & targets for node, targets in graph.items() if node.startswith("stability"))
    assert graph["pages"] and graph["app"]
    assert cycles(graph) == []


def _imported_rooms(path: Path) -> set[str]:
    """The rooms a module of pages/ or app.py imports (``from stability import charts`` included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found |= {name.split(".")[1] for name in names
                  if name.startswith("stability.") and name.split(".")[1] in ROOMS}
    return found


def test_a_room_with_a_lazy_face_imports_none_of_its_modules_until_a_name_is_asked_for():
    """``import stability.runs`` costs nothing; ``from stability.runs import TERMINAL`` imports status.py alone."""
    import subprocess
    import sys
    script = ("import sys, stability.runs, stability.execution, stability.workers, stability.training\n"
              "before = sorted(m for m in sys.modules if m.startswith('stability.'))\n"
              "from stability.runs import TERMINAL\n"
              "print(before, 'stability.runs.status' in sys.modules, 'stability.runs.store' in sys.modules)\n"
              "from stability.execution import lifecycle\n"
              "print(lifecycle.__name__)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["['stability.core',", "'stability.core.faces',", "'stability.execution',",
                           "'stability.runs',", "'stability.training',", "'stability.workers']", "True", "False",
                           "stability.execution.lifecycle"]


def test_a_face_table_names_only_what_another_room_imports():
    """No stale face: every name of a room's ``_FACE`` table is imported from outside the room (by stability/,
    pages/, app.py or benchmarks/; not the tests). The names a user-facing room imports eagerly (cells, tasks,
    watch, charts, ... : its documented API) are not in the table and stay."""
    taken: dict[str, set[str]] = {}
    for path in _importer_sources():
        for _, target, name in crossings(path.read_text(), _dotted(path), path.name == "__init__.py"):
            taken.setdefault(target, set()).add(name)
    stale = []
    for name in ROOMS:
        tree = ast.parse((PACKAGE / name / "__init__.py").read_text())
        table = next((ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                      and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "_FACE"), {})
        stale += [f"stability.{name}: {entry}" for entry in sorted(set(table) - taken.get(f"stability.{name}", set()))]
    assert stale == [], f"face entries nobody outside the room imports (remove them): {stale}"
