"""Admission: what a run costs, known before it is stored or started.

    preflight.py   can it be built here: option values, memory, the device, room for its checkpoints
    budget.py      will it fit in memory; how many operations a step, an evaluation, a probe are
    shapes.py      a shape's step: its key, its operations, its seconds timed in this process (the
                   rough time's basis, stability.sweeps.rough_time)

Below :mod:`stability.execution` (a claim checks the room for checkpoints) and everything above it.
Import the modules themselves.
"""

from __future__ import annotations

from ..core.faces import lazy

# The room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py and
# benchmarks/ may import from it, each -> the module here that holds it (None: that module itself), imported
# on first use, so that importing the room imports none of its modules.
_FACE = {
    "budget": None, "DEPTH_OPTIONS": "budget", "build_cost": "budget", "checkpoint_bytes": "budget",
    "flow_work": "budget", "footprint": "budget", "format_bytes": "budget", "step_depth": "budget", "work": "budget",
    "cell_checked": "preflight", "check_buildable": "preflight", "check_room": "preflight",
    "check_without_building": "preflight", "OPERATIONS_PER_S": "shapes", "TIMED_STEPS": "shapes",
    "operations_per_step": "shapes", "shape_of": "shapes", "step_seconds": "shapes", "time_steps": "shapes",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
