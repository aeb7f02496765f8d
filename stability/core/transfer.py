"""Host-to-device copies that do not make the host wait for the device.

    x = host_to(x, device, dtype)     # a batch from the host onto the device that trains

An ordinary copy from pageable host memory to a GPU is synchronous: the host waits for every
kernel queued before it, at every step (a host-device synchronisation; Note [One read per log
step] in :mod:`stability.training.window`).  From page-locked (pinned) memory the copy is queued
like a kernel and the host goes on: ``tensor.pin_memory().to(device, non_blocking=True)``.  The
copy runs on the stream the step's kernels run on, so they see it whole, and torch's pinned-memory
allocator does not reuse the pinned buffer before the copy is done.  Any other copy (to the CPU,
to MPS, from a device) is the ordinary ``tensor.to``.
"""
from __future__ import annotations

import torch


def host_to(tensor: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``tensor`` on ``device`` (in ``dtype`` where given); from the host to a GPU through pinned
    memory, without waiting."""
    if device.type == "cuda" and tensor.device.type == "cpu":
        tensor = tensor.pin_memory().to(device=device, non_blocking=True)
    return tensor.to(device=device, dtype=dtype) if dtype is not None else tensor.to(device)
