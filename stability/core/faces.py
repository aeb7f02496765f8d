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
    return named(package, {name: (f"{package}.{module or name}", None if module is None else name)
                           for name, module in face.items()})


def named(package: str, table: dict[str, tuple[str, str | None]]) -> tuple[Callable[[str], Any],
                                                                           Callable[[], list[str]]]:
    """As :func:`lazy`, for names from anywhere (``stability``'s own face, whose names live in several rooms):
    ``table`` maps each name to ``(module, attribute)``, the attribute None when the name is the module."""

    def __getattr__(name: str) -> Any:
        try:
            module, attribute = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = importlib.import_module(module)
        if attribute is not None:
            value = getattr(value, attribute)
        setattr(sys.modules[package], name, value)  # once imported, an ordinary attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
