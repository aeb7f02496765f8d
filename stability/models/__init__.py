"""The trainable whole: a cell with its readout, and the optimizers that train it.

The cells themselves and their parametrizations are :mod:`stability.cells` and
:mod:`stability.parametrizations`; this room joins a cell to a task's output.
"""

from __future__ import annotations

from ..core.faces import lazy

# The room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py and
# benchmarks/ may import from it, each -> the module here that holds it (None: that module itself), imported
# on first use, so that importing the room imports none of its modules.
_FACE = {
    "optimizers": None, "build_optimizer": "optimizers", "describe": "optimizers", "SequenceModel": "sequence",
    "parameter_groups": "sequence",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
