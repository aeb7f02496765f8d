"""Every public top-level name of ``stability/`` has a caller (issue 34, item 5: no dead code, no names
kept only for the tests).

A name defined at the top of a module of ``stability/`` (a function, a class, a constant; not one with a
leading underscore) is *used* when some code other than its definition reads it: its own module, or a
module of ``stability/``, ``pages/``, ``app.py`` or ``benchmarks/`` that reaches it (imports the module, the
name from it, or the package that re-exports it, or names the module in a string: ``stability/__init__``'s
lazy table, a registry's ``"kru:KRULSTM"``), or ``pyproject.toml`` (entry points, the console script).
Reading means a name or attribute in an expression, a word of a string that is a name or a path rather
than prose, or an entry of an ``__all__`` (a room's declared public face). An import alone is not a use:
a name a module imports and never reads is no caller.

The scan is by name, read with ``ast`` (nothing is imported), so it errs one way only: a name that a
module reaching it happens to spell the same way counts as used. It never calls a used name dead. A name nobody else
reads is either removed or, when the tests need it, written in ``tests/``; :data:`KEPT` lists the few that
stay with no caller in the code, each with its reason.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "stability"

# name -> why it stays although no code of the project reads it
KEPT = {
    # The vocabulary of stored rows (stability.metric_names, public): "test/loss" is written by the
    # evaluation hook as split_name("test", "loss"); its constant is the one definition users read.
    "TEST_LOSS": "a stored row's name, defined for users of stability.metric_names",
    # The timing child is the module's private process; the tests end it between tests through this
    # function rather than reach into the module's private state.
    "stop_children": "ends stability.workers.timing's private timing child (tests clean up with it)",
    # Work in progress (issue 32): the graphed step's pieces are built and tested on the CPU; the Trainer calls
    # capture_problem (the run's device line: why it trains eagerly) once a session with a GPU wires them in.
    "capture_problem": "stability.training.graphed, issue 32: for the Trainer once a GPU session verifies capture",
}

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(ROOT / "pages").rglob("*.py"), ROOT / "app.py",
                   *(ROOT / "benchmarks").rglob("*.py")])


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def read_names(tree: ast.AST) -> dict[str, int]:
    """How many times each name is read in ``tree`` (names, attributes, words of non-docstring strings,
    decorated definitions, which a decorator registers)."""
    counts: dict[str, int] = {}
    skipped = _docstrings(tree)

    def count(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            count(node.id)
        elif isinstance(node, ast.Attribute):
            count(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped \
                and not any(char.isspace() for char in node.value.strip()):  # a name or a path, not prose
            for word in WORD.findall(node.value):
                count(word)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.decorator_list:
            count(node.name)
    return counts


def defined_names(tree: ast.Module) -> list[str]:
    """The public names a module defines at its top."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in names if not name.startswith("_")]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def referenced(path: Path, tree: ast.AST) -> set[str]:
    """What a module reaches: ``stability.x.y`` for ``from stability.x import y`` (a module or a name), the
    modules it imports, and a module a string names (``"stability.cli.worker"``; ``"kru:KRULSTM"`` in a
    package's registry: its module ``kru`` of that package)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skipped, found = _docstrings(tree), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                source = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + [source] * bool(source))
            found |= {f"{source}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            text = node.value.strip()
            if text.startswith("stability.") and not any(char.isspace() for char in text):
                found.add(text.split(":")[0])
            elif re.fullmatch(r"\w+:\w+", text):
                found.add(f"{package}.{text.split(':')[0]}")
    return found


def _reaches(reference: str, module: str) -> bool:
    """``reference`` (of :func:`referenced`) is ``module``, a name of it, or a package above it."""
    return reference == module or reference.startswith(module + ".") or \
        (reference != "stability" and module.startswith(reference + "."))


def unused_names() -> tuple[list[str], list[str]]:
    """``(dead, test_only)``: ``module:name`` of the public top-level names of ``stability/`` no code reads,
    and of those among them that only the tests read."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in _sources()}
    reads = {path: read_names(tree) for path, tree in trees.items()}
    reach = {path: referenced(path, tree) for path, tree in trees.items()}
    configured = set(WORD.findall((ROOT / "pyproject.toml").read_text()))
    tests: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        tests |= set(read_names(ast.parse(path.read_text(), str(path))))
    dead, test_only = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        readers = [other for other in trees if other == path or any(_reaches(ref, module) for ref in reach[other])]
        for name in defined_names(trees[path]):
            if name in KEPT or name in configured or any(reads[other].get(name) for other in readers):
                continue
            where = f"{path.relative_to(ROOT)}:{name}"
            (test_only if name in tests else dead).append(where)
    return dead, test_only


def test_every_public_name_of_the_package_has_a_caller_outside_the_tests():
    dead, test_only = unused_names()
    assert not dead, f"names no code reads (remove them): {dead}"
    assert not test_only, f"names only the tests read (move them into tests/): {test_only}"


def test_kept_names_are_still_defined():
    defined = set()
    for path in PACKAGE.rglob("*.py"):
        defined |= set(defined_names(ast.parse(path.read_text(), str(path))))
    assert set(KEPT) <= defined, f"KEPT names no longer in stability/: {sorted(set(KEPT) - defined)}"


def test_a_name_is_read_only_where_its_module_is_reached():
    tree = ast.parse('from ..admission import budget\nfrom stability import sweeps\nimport stability.cli.main\n'
                     'LAZY = "stability.execution.lifecycle"\nREGISTRY = "kru:KRULSTM"\n')
    refs = referenced(PACKAGE / "cells" / "__init__.py", tree)
    assert {"stability.admission.budget", "stability.sweeps", "stability.cli.main", "stability.execution.lifecycle",
            "stability.cells.kru"} <= refs
    assert _reaches("stability.admission.budget", "stability.admission.budget")
    assert _reaches("stability.sweeps", "stability.sweeps.rough_time")        # the package's face
    assert _reaches("stability.admission.budget.footprint", "stability.admission.budget")
    assert not _reaches("stability.admission.budget", "stability.admission.preflight")
    assert not _reaches("stability.train_run", "stability.training.run")


def test_the_scan_finds_a_dead_name_and_counts_an_import_path_as_a_use():
    tree = ast.parse('"""Docstring naming ghost."""\nimport x\n'
                     'def ghost():\n    """ghost itself."""\n'
                     'SPAWNED = "stability.cli.worker"\n__all__ = ["face"]\n')
    counts = read_names(tree)
    assert "ghost" not in counts and counts["worker"] == 1 and counts["face"] == 1
    assert defined_names(tree) == ["ghost", "SPAWNED"]
