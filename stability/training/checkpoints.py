"""A run's checkpoint: what it holds, how it is written and read back, and when it cannot be resumed.

A checkpoint (a ``torch.save`` dict, written atomically) holds ``format``,
``config`` (the run's config as a dict), ``step``, ``model`` and
``optimizer`` state dicts and, to continue exactly, ``schedule``, ``rng``,
``carried`` (a stateful task's hidden state), ``elapsed``, ``cadence`` (the
next evaluation and probe steps) and ``hooks``: every hook's ``state_dict()``.

Format 3 keys the hook states by each hook's ``state_key`` (its class name,
plus what tells two instances apart), so adding, removing or reordering hooks
does not hand one hook another's state.  Format 2 keyed them by position
(``"<index>:<ClassName>"``); :func:`hook_states` reads those by class name, in
order, so a run checkpointed by the previous version still resumes exactly.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import asdict
from typing import Iterable

from ..config import TrainConfig

CHECKPOINT_FORMAT = 3
RESUMABLE_FORMATS = (2, 3)  # what this version continues exactly (2: hook states keyed by position)
# Train fields that choose how a step is executed, not what it computes beyond float32 round-off: a
# checkpoint written with one value resumes with the other (a graphed run equals the eager one, and its
# checkpoint keeps the plain optimizer state: stability/training/graphed.py). Not device, dtype or
# deterministic: each changes the numbers a run gives.
EXECUTION_ONLY = frozenset({"cuda_graphs"})
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX; elsewhere (Windows) there are no such links to follow


class ResumeError(ValueError):
    """A run cannot be resumed (no checkpoint, or one this version cannot continue); one line."""


def load_checkpoint(path) -> dict:
    """A checkpoint written by :func:`save_checkpoint` (tensors on the CPU); the file is opened without
    following a link (OSError for one: Note [No links])."""
    import torch  # here, not at the top: the lifecycle and the queue import this module (ResumeError) without torch

    with os.fdopen(os.open(path, os.O_RDONLY | _NOFOLLOW), "rb") as file:
        return torch.load(file, map_location="cpu", weights_only=True)


def save_checkpoint(state: dict, path) -> None:
    """Write ``state`` to ``path`` atomically: a reader sees the old checkpoint or the new one, whole.

    Note [No links]
    ---------------
    A store may live in a folder others can write (``--store /tmp/runs.db``), and a link planted where
    a checkpoint goes would have the run write its weights over any file the user can write, or read
    weights from anywhere. So the temporary file is created afresh (a leftover one removed, a link
    refused: ``O_EXCL | O_NOFOLLOW``, mode 0600) and renamed over ``path``, which replaces a link
    rather than writing through it; :func:`load_checkpoint` refuses a link. The folder itself is
    checked by whoever names it (``RunStore.checkpoint_path``: 0700, this user's)."""
    import torch

    temporary = f"{path}.partial"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)  # a crash's leftover, or a planted link: unlink removes the link itself
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        torch.save({"format": CHECKPOINT_FORMAT, **state}, file)
    os.replace(temporary, path)


def remove_checkpoint(path) -> None:
    """Remove the checkpoint at ``path`` and a save's leftover beside it, if there are any: a run that can
    no longer be resumed (completed, diverged, pruned) keeps none, so a classroom's finished runs do not
    fill the disk (stability.execution.lifecycle, Note [Checkpoints kept]). A file that cannot be removed
    is left: the run's status is written already, and deleting the run removes it later."""
    for name in (f"{path}.partial", path):
        with contextlib.suppress(OSError):  # gone already (FileNotFoundError), or not ours to remove
            os.unlink(name)


def is_resumable(state: dict) -> bool:
    """Whether this version continues ``state`` exactly (its format is one of :data:`RESUMABLE_FORMATS`)."""
    return state.get("format") in RESUMABLE_FORMATS


def read_for_resume(path, label: str, config: dict) -> dict:
    """The checkpoint at ``path`` of ``label`` (``"run 7"``), checked to continue a run of ``config``;
    :class:`ResumeError` (one line) when there is none, it cannot be read (a link: Note [No links]), it
    is of an older format or another config (:data:`EXECUTION_ONLY` fields aside).  The one check of a
    checkpoint before a resume: the trainer's, the run queue's and a sweep's (stability.execution.lifecycle)."""
    if not os.path.lexists(path):
        raise ResumeError(f"{label} has no checkpoint to resume from (one is written every 5 minutes and "
                          "when a run ends)")
    try:
        state = load_checkpoint(path)
    except OSError as error:  # a link (Note [No links]) or a file that cannot be opened
        raise ResumeError(f"{label}'s checkpoint {path} cannot be read ({error.strerror or error})") from None
    except Exception as error:  # a truncated or foreign file
        message = str(error).strip().splitlines()
        raise ResumeError(f"{label}'s checkpoint {path} cannot be read ({type(error).__name__}"
                          f"{': ' + message[0] if message else ''})") from None
    if not isinstance(state, dict) or not is_resumable(state):
        raise ResumeError(f"{label}'s checkpoint was written by a version that cannot be "
                          "resumed exactly; start a new run with the same config instead")
    if _compared(state["config"]) != _compared(config):
        raise ResumeError(f"{label}'s checkpoint belongs to a different config")
    return state


def _compared(config: dict) -> dict:
    """What of ``config`` a checkpoint must match: the config with the train fields added since it was
    written (``deterministic``, ``cuda_graphs``) at their defaults, which keep the old behaviour, so a
    checkpoint of an older version still matches its run; and without :data:`EXECUTION_ONLY`, so a run
    continues either way (``stability resume ID --no-cuda-graphs``)."""
    train = config.get("train") if isinstance(config, dict) else None
    if not isinstance(train, dict):
        return config
    train = {**asdict(TrainConfig()), **train}
    return {**config, "train": {name: value for name, value in train.items() if name not in EXECUTION_ONLY}}


def hook_states(state: dict, hooks: Iterable) -> dict[str, dict]:
    """The saved state of each of ``hooks`` present in checkpoint ``state``, by ``hook.state_key``.

    Format 2 keyed states ``"<index>:<ClassName>"``: each hook takes the first unclaimed state saved
    by a hook of its class, in the saved order (the hooks the old version listed but this one does
    not have, such as its ``StopRequests``, held no state).
    """
    saved = state["hooks"]
    if state.get("format") != 2:
        return {hook.state_key: saved[hook.state_key] for hook in hooks if hook.state_key in saved}
    by_class: dict[str, list[dict]] = {}
    for key in sorted(saved, key=lambda key: int(key.split(":", 1)[0])):
        by_class.setdefault(key.split(":", 1)[1], []).append(saved[key])
    states = {}
    for hook in hooks:
        waiting = by_class.get(type(hook).__name__)
        if waiting:
            states[hook.state_key] = waiting.pop(0)
    return states
