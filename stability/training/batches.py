"""A task's batches, moved to where the model trains."""
from __future__ import annotations

from typing import Iterator

import torch


def to_device(x: torch.Tensor, y: torch.Tensor, device: torch.device,
              dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` on ``device``, x in ``dtype``; y too where it holds numbers (regression targets),
    class indices keep their integer type."""
    x = x.to(device=device, dtype=dtype)
    y = y.to(device=device, dtype=dtype) if y.is_floating_point() else y.to(device)
    return x, y


def take(iterator: Iterator, count: int) -> Iterator:
    """The first ``count`` items of ``iterator`` (fewer if it ends first)."""
    for _, item in zip(range(count), iterator):
        yield item
