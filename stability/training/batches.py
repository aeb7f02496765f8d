"""A task's batches, moved to where the model trains.

    stream = compact_batches(task, "train", 64)     # what the task yields, as small as it can
    x, y = batch_on(task, next(stream), device, dtype)

A task may keep its batches compact until they reach the device: ``task.compact_batches(split,
batch_size)`` yields what ``task.expand_batch(x, y, device, dtype)`` expands there.  PTB does
(:class:`stability.tasks.ptb.LanguageModelTask`): its batches are token ids, and the one-hot
vectors (64 x 300 x 10,000 floats at word level: 768 MB) are built on the device, instead of on
the host and copied every step.  Any other task's ``batches`` are moved by :func:`to_device`.

To a GPU a batch is copied from page-locked (pinned) memory without waiting
(:func:`stability.core.transfer.host_to`): an ordinary copy from the host waits for every kernel
queued before it, a host-device synchronisation every step.
"""
from __future__ import annotations

from typing import Iterator

import torch

from ..core.transfer import host_to


def compact_batches(task, split: str, batch_size: int) -> Iterator:
    """``task``'s batches of ``split`` in the form it keeps them (its ``compact_batches``, else ``batches``)."""
    own = getattr(task, "compact_batches", None)
    return own(split, batch_size) if own is not None else task.batches(split, batch_size)


def batch_on(task, batch, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of :func:`compact_batches` as model-ready ``(x, y)`` on ``device`` (the task's
    ``expand_batch``, else :func:`to_device`)."""
    expand = getattr(task, "expand_batch", None)
    return expand(*batch, device, dtype) if expand is not None else to_device(*batch, device, dtype)


def to_device(x: torch.Tensor, y: torch.Tensor, device: torch.device,
              dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` on ``device``, x in ``dtype``; y too where it holds numbers (regression targets),
    class indices keep their integer type."""
    x = host_to(x, device, dtype)
    y = host_to(y, device, dtype if y.is_floating_point() else None)
    return x, y


def take(iterator: Iterator, count: int) -> Iterator:
    """The first ``count`` items of ``iterator`` (fewer if it ends first)."""
    for _, item in zip(range(count), iterator):
        yield item
