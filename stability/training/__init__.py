"""Training a model, with the papers' readings taken between steps.

    run.py          build_and_train(config, hooks=...): build the task and the model, train, a TrainResult
                    (a run of a store: stability.train_run, in execution/lifecycle, which owns its status)
    trainer.py      Trainer(model, task, config, hooks=...): the loop, for a model built anywhere
    build.py        task, model and optimizer from a RunConfig
    hooks.py        every reading, evaluation and checkpoint as a hook (the hook contract)
    sinks.py        where the rows go: StoreSink (a run store's run), MemorySink; TrainResult
    checkpoints.py  the checkpoint format, save, load, ResumeError
    evaluation.py, schedule.py, batches.py   fixed evaluation sets, learning-rate schedules, batches to device
    probes.py       the gradient probes, which need no training
"""

from __future__ import annotations

from ..core.faces import lazy

# The room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py and
# benchmarks/ may import from it, each -> the module here that holds it (None: that module itself), imported
# on first use, so that importing the room imports none of its modules.
_FACE = {
    "batch_on": "batches", "compact_batches": "batches", "build_model": "build", "build_optimizer": "build",
    "ResumeError": "checkpoints", "read_for_resume": "checkpoints", "remove_checkpoint": "checkpoints",
    "Pruning": "hooks", "stacked_norm": "hooks", "probes": None, "GradientFlow": "probes", "float64_copy": "probes",
    "gradient_flow": "probes", "spectrum_metrics": "probes", "stable_norm": "probes", "sync_copy": "probes",
    "widened": "probes", "run": None, "build_and_train": "run", "sinks": None, "ClaimLost": "sinks",
    "ON_STORE_ERROR": "sinks", "STEP_BEAT_EVERY_S": "sinks", "StoreSink": "sinks", "TrainResult": "sinks",
    "read_numbers": "window",
    "StaticStep": "graphed", "WARMUP_STEPS": "graphed", "capture_problem": "graphed",  # benchmarks/graphed_step.py
    "Trainer": "trainer", "ProbeBatch": "probes", "Evaluation": "hooks", "GradientReadings": "hooks",
    "ProbeThroughTime": "hooks",  # benchmarks/reading_launches.py counts the ops of each part of a run
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
