"""One slot count for runs and sweep workers: who holds this machine's slots, and the sweep workers waiting for one.

    holders = slot_holders(store)                  # pids of this machine's processes that hold a slot
    park(store, sweep_id, environments)            # sweep workers that wait for a slot, one line each
    started = launch_waiting(store, free, limit)   # the scheduler: as many of them as slots are free
    drop_waiting(store, sweep_id)                  # the sweep needs no more (it ended, stopped, drained)

Note [Slots]
    A machine has ``STABILITY_MAX_RUNS`` slots (default 1), set by whoever starts the server or the CLI
    (stability.workers.scheduler.max_concurrent_runs), and they bound every process that trains for
    the queue: a run's worker and a sweep's worker alike. A slot is held by

    - the claimant of an active run of this machine whose claimant is not gone
      (stability.execution.lifecycle.claimant_gone): a run's worker, a warm worker handed a run, a
      foreground CLI run, a preset, a sweep worker training a trial (not an external run: a user's own
      loop logging through stability.watch is not the queue's to count);
    - a live sweep worker of this machine (its identity in ``logs/sweep-<id>.workers``, stability.workers
      .processes, Note [Identity]), from its start, through the gaps between its trials, to its end,
      when it strikes itself off that list and hands its slot on (``scheduler.hand_on_slot``);

    one slot a process, however many of these say so (a sweep worker training a trial is counted once).
    What waits for a slot: the queued runs nobody has claimed (the run queue, in the store) and the sweep
    workers asked for but not started (``logs/sweep-<id>.waiting``, one JSON line a worker: the environment
    it is to be started with). The scheduler (:func:`stability.workers.scheduler._schedule`, under the
    scheduling lock) fills the free slots, queued runs first, oldest first, then waiting sweep workers,
    lowest sweep first; it runs whenever a run is started or resumed, a sweep asks for workers, a page
    reconciles, and a run's or a sweep's worker ends (handing its slot on). A sweep's waiting workers are
    dropped when it is no longer running, when it is stopped, and when one of its workers ends (a sweep
    worker ends when the sweep has nothing left to hand out, so one more would find nothing).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..execution.lifecycle import claimant_gone
from ..execution.pids import is_alive
from .processes import is_identified_worker, launch_sweep_workers, sweep_identities


def slot_holders(store, active_runs, here: str, leaving: int | None = None) -> set:
    """The processes of this machine that hold a slot (Note [Slots]): claimants of ``active_runs`` not gone
    (their pid, or the run where it has none) and live sweep workers; ``leaving``: a process handing its
    slot on (a worker at its end), not counted."""
    holders = set()
    for run in active_runs:
        if run.host in (None, here) and not run.external and not (run.status == "queued" and run.pid is None) \
                and not claimant_gone(run, here):
            holders.add(run.pid if run.pid is not None else f"run {run.id}")
    holders |= sweep_worker_pids(store)
    holders.discard(leaving)
    return holders


def sweep_worker_pids(store, sweep_id: int | None = None) -> set[int]:
    """Pids of this machine's live sweep workers (of ``sweep_id``, else of every sweep), as their identity
    files name them and psutil proves them (Note [Identity])."""
    pids = set()
    for _, identity in sweep_identities(store, sweep_id):
        pid = identity.get("pid")
        if is_alive(pid) and is_identified_worker(pid, identity):
            pids.add(pid)
    return pids


def park(store, sweep_id: int, environments: list[dict]) -> None:
    """Sweep workers of ``sweep_id`` that wait for a slot, each with its environment (its GPU)."""
    path = _waiting_path(store, sweep_id)
    with open(path, "a") as handle:
        for environment in environments:
            handle.write(json.dumps({"env": environment}) + "\n")


def waiting(store, sweep_id: int) -> int:
    """How many workers of ``sweep_id`` wait for a slot on this machine."""
    return len(_read(_waiting_path(store, sweep_id)))


def drop_waiting(store, sweep_id: int) -> None:
    """No more workers of ``sweep_id`` wait (it ended, was stopped, or a worker of it drained it)."""
    try:
        _waiting_path(store, sweep_id).unlink()
    except FileNotFoundError:
        pass


def launch_waiting(store, free: int, limit: int) -> list:
    """Under the scheduling lock: start up to ``free`` waiting sweep workers, lowest sweep first, each in a
    slot of ``limit`` (taken off the waiting list first, then started); a running sweep's only (the others'
    are dropped). Returns the processes started."""
    started = []
    for sweep_id, path in sorted(_waiting_files(store).items()):
        if not _wants_workers(store, sweep_id):
            drop_waiting(store, sweep_id)
            continue
        entries = _read(path)
        count = max(0, free - len(started))
        if entries[count:]:
            path.write_text("".join(json.dumps(entry) + "\n" for entry in entries[count:]))
        else:
            drop_waiting(store, sweep_id)
        for entry in entries[:count]:
            started += launch_sweep_workers(store, sweep_id, 1, limit, environments=[entry.get("env") or {}])
    return started


def _wants_workers(store, sweep_id: int) -> bool:
    from ..runs.store import SweepNotFound

    try:
        sweep = store.sweep(sweep_id)
    except SweepNotFound:
        return False
    return sweep.status == "running" and not sweep.stop_requested


def _waiting_path(store, sweep_id: int) -> Path:
    return store.private_subfolder("logs") / f"sweep-{int(sweep_id)}.waiting"


def _waiting_files(store) -> dict[int, Path]:
    """``{sweep id: its waiting file}`` of this machine."""
    folder = Path(store.home) / "logs"
    files = {}
    for path in folder.glob("sweep-*.waiting") if folder.is_dir() else ():
        number = path.name[len("sweep-"):-len(".waiting")]
        if number.isascii() and number.isdigit():
            files[int(number)] = path
    return files


def _read(path: Path) -> list[dict]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("env", {}), dict):
            entries.append(entry)
    return entries

