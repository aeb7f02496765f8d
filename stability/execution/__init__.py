"""Claims and statuses: who trains a run, and every change of its status.

    lifecycle.py   every status change, the claim by compare-and-set, ``claimed`` and ``ending``
    signals.py     Ctrl-C and SIGTERM as one stop, held back around a claim
    locks.py       the run queue's scheduling lock, a sweep's claim lock and the students' start lock
                   (a flock; an advisory lock on PostgreSQL)
    pids.py        a claimant's process: alive, and when it started

Below it, :mod:`stability.admission` (can a run be built here, what it costs); above it,
:mod:`stability.workers` (the processes that train the claimed runs). Import the modules themselves.
"""

from __future__ import annotations

from ..core.faces import lazy

# The room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py and
# benchmarks/ may import from it, each -> the module here that holds it (None: that module itself), imported
# on first use, so that importing the room imports none of its modules.
_FACE = {
    "lifecycle": None, "ABANDONED_AFTER_S": "lifecycle", "Claim": "lifecycle", "ClaimedRun": "lifecycle",
    "RESUMABLE": "lifecycle", "SHARED_STALE_S": "lifecycle", "abandoned": "lifecycle", "adopt": "lifecycle",
    "begin_training": "lifecycle", "check_resumable": "lifecycle", "claim_for_worker": "lifecycle",
    "claim_queued": "lifecycle", "claim_resume": "lifecycle", "claimant_gone": "lifecycle", "claimed": "lifecycle",
    "count_resume": "lifecycle", "create_claimed": "lifecycle", "create_external": "lifecycle",
    "create_queued": "lifecycle", "ending": "lifecycle", "execution_switched": "lifecycle", "hand_over": "lifecycle", "heartbeat_age": "lifecycle",
    "mark_abandoned": "lifecycle", "mark_interrupted": "lifecycle", "mark_stopped": "lifecycle",
    "queue_resume": "lifecycle", "release": "lifecycle", "requeue": "lifecycle", "resumable_here": "lifecycle",
    "resume_lock": "lifecycle", "settle": "lifecycle", "start_over": "lifecycle", "stop_unclaimed": "lifecycle",
    "take_over": "lifecycle", "this_host": "lifecycle", "train_run": "lifecycle", "LockBusy": "locks",
    "locks": None, "scheduling_lock": "locks", "students_lock": "locks", "STUDENTS_TIMEOUT_S": "locks",
    "sweep_lock": "locks", "pids": None, "is_alive": "pids", "process_start_time": "pids",
    "Terminated": "signals", "describe_interrupt": "signals", "signals_deferred": "signals",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
