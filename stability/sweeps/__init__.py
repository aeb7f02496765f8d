"""A sweep: one base config, some varied fields, N seeds; an Optuna study whose trials are runs.

    spec = build_spec(base, ["lr=1e-4:1e-1:4:log", "cell=rnn,spectral"], seeds=3)  # spec.py
    sweep_id = start_sweep(spec, store, workers=2)                                # workers.py
    frame = results(store, sweep_id)                                              # summary.py

One module a concern: :mod:`.spec` (``--vary`` text, fields, the spec),
:mod:`.study` (Optuna), :mod:`.workers` (workers, claims, stop and resume),
:mod:`.summary`, :mod:`.rough_time` (Note [Rough time]). The sweep's lock is
:func:`stability.execution.locks.sweep_lock`, beside the run queue's. Its rough time reads
:mod:`stability.admission.shapes` and the timing child (:mod:`stability.workers.timing`).
"""
from __future__ import annotations

from .rough_time import estimate_sweep_time
from .summary import results, setting_rows
from .spec import (MAX_RUNS, SAMPLERS, SweepError, SweepSpec, Vary, apply, build_spec, direction, objective_name,
                   parse_varies, resolve_field)
from ..execution.locks import sweep_lock
from .study import create_study, load_study, next_trial, setting_of, storage, tell
from .workers import (Job, check_workers, claim, join_sweep, resume_sweep, start_sweep, stop_sweep, store_sweep,
                      train_trial, work, workers_alive)
from ..core.faces import lazy

__all__ = ["MAX_RUNS", "SAMPLERS", "Job", "SweepError", "SweepSpec", "Vary", "apply", "build_spec", "check_workers",
           "claim", "create_study", "direction", "estimate_sweep_time", "join_sweep", "load_study", "next_trial",
           "objective_name", "parse_varies", "resolve_field", "results", "resume_sweep", "setting_of",
           "setting_rows", "start_sweep", "stop_sweep", "storage", "store_sweep", "sweep_lock", "tell",
           "train_trial", "work", "workers_alive"]

# The rest of the room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py
# and benchmarks/ may import from it beside the ones above, each -> the module here that holds it (None: that
# module itself), imported on first use.
_FACE = {
    "Offered": "spec", "starting": None, "DEFAULT_VARY": "starting", "FIELD_HINTS": "starting",
    "field_choices": "starting", "without_default_options": "starting", "counted_objective": "summary",
    "seed_statistics": "summary", "watching": None, "CURVE_METRICS": "watching", "done_and_total": "watching",
    "halted": "watching", "in_spec_order": "watching", "is_active": "watching", "label": "watching", "listed_values": "watching",
    "objective_version": "watching", "progress": "watching", "results_version": "watching",
    "run_sweep_worker": "workers", "run_trial_worker": "workers", "workers": None,
}
__all__ += sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
