"""Paper presets: a figure or table of the papers as data, one TOML file each, run by the engine and judged
from the stored rows.

    from stability import presets
    presets.available()                         # [PresetInfo(name, title, paper, figure, shows, runs, ...)]
    preset = presets.load("spectral-fig1")      # a shipped name, or a path to a .toml/.json file; PresetError
    presets.estimate_preset_time(preset, store, "classroom")   # {"seconds": ..., "basis": ...}: a rough time here
    run_ids = presets.run(preset, store, scale="classroom", progress=print)
    for verdict in presets.verdicts(preset, store, run_ids):
        verdict.claim, verdict.paper, verdict.ours, verdict.held, verdict.why

One module a concern: :mod:`.vocabulary` (PresetError, the words a file is written in),
:mod:`.format` (Note [Preset format]: Preset, Claim, PresetInfo), :mod:`.layout` (Note [Layout]:
the figure's panels), :mod:`.loading` (reading and checking a file), :mod:`.running` (training its
runs, a rough time), :mod:`.judging` (Note [Claims]: verdicts). The shipped presets are the
``*.toml`` files beside them (:data:`PRESETS_DIR`).
"""
from __future__ import annotations

from .format import Claim, Preset, PresetInfo, claim_metrics
from .judging import Verdict, group_of, statistic, verdict_value, verdicts
from .layout import Layout, Mark, Panel
from .loading import available, from_dict, info, load
from .running import estimate_preset_time, run
from .vocabulary import OPS, PRESETS_DIR, RUN_FIELDS, SCALES, STATS, SUFFIXES, PresetError
from ..core.faces import lazy

__all__ = ["OPS", "PRESETS_DIR", "RUN_FIELDS", "SCALES", "STATS", "SUFFIXES", "Claim", "Layout", "Mark", "Panel",
           "Preset", "PresetError", "PresetInfo", "Verdict", "available", "claim_metrics", "estimate_preset_time", "from_dict",
           "group_of", "info", "load", "run", "statistic", "verdict_value", "verdicts"]

# The rest of the room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py
# and benchmarks/ may import from it beside the ones above, each -> the module here that holds it (None: that
# module itself), imported on first use.
_FACE = {
    "loading": None, "measured": None, "Clock": "measured", "PAPER_COST": "measured", "paper_cost_line": "measured",
    "result": "measured", "result_line": "measured", "save": "measured", "table": "measured",
}
__all__ += sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
