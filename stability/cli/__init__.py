"""The command line (``python -m stability``) and the worker processes' entry point."""

from __future__ import annotations

from ..core.faces import lazy

# The room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py and
# benchmarks/ may import from it, each -> the module here that holds it (None: that module itself), imported
# on first use, so that importing the room imports none of its modules.
_FACE = {
    "main": "main",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
