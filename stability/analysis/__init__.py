"""Reading stored runs: findings in words (diagnosis), and runs grouped over seeds (groups)."""

from __future__ import annotations

from ..core.faces import lazy

# The room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py and
# benchmarks/ may import from it, each -> the module here that holds it (None: that module itself), imported
# on first use, so that importing the room imports none of its modules.
_FACE = {
    "Finding": "diagnosis", "diagnose": "diagnosis", "groups": None, "group_curves": "groups",
    "seed_groups": "groups", "setting_table": "groups",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
