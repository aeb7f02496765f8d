"""Which device a run trains on, and how it is described.

    resolve_device("auto")            # cuda, then mps, then cpu
    describe_device(device)           # "cuda (NVIDIA H100)", "cpu (4 threads)"

The worker's thread policy (how many cores a background run may use) is
:mod:`stability.execution.threads`.
"""
from __future__ import annotations

import torch

from .errors import ConfigError


def resolve_device(choice: str) -> torch.device:
    """``auto``: cuda, then mps, then cpu; a forced device that is missing is a ConfigError."""
    has_mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if has_mps else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for but no CUDA GPU is available; use auto or cpu")
    if choice == "mps" and not has_mps:
        raise ConfigError("device 'mps' was asked for but MPS is not available; use auto or cpu")
    return torch.device(choice)


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        return f"cpu ({torch.get_num_threads()} threads)"
    return device.type
