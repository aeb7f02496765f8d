"""A room's face, imported on first use (PEP 562): what a room's ``__init__`` declares other rooms may import.

    _FACE = {"RunStore": "store", "TERMINAL": "status", "lifecycle": None}   # name -> its module (None: itself)
    __all__ = sorted(_FACE)
    __getattr__, __dir__ = lazy(__name__, _FACE)

``from stability.runs import RunStore`` then imports ``stability.runs.store`` only when the name is first
asked for, so importing a room imports none of its modules (the command line's start stays light:
``tests/test_cli_startup.py``). The rule the faces keep is ``tests/test_architecture.py``'s and
docs/architecture.md's ("A room's face").
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy(package: str, face: dict[str, str | None]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for the names of ``face`` (name -> the module of the
    package that holds it, None when the name is a module of the package itself)."""

    def __getattr__(name: str) -> Any:
        try:
            module = face[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = importlib.import_module(f"{package}.{module or name}")
        if module is not None:
            value = getattr(value, name)
        setattr(sys.modules[package], name, value)  # once imported, an ordinary attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(face))

    return __getattr__, __dir__
