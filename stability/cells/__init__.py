"""Recurrent cells of the papers, behind one registry.

    >>> from stability import cells
    >>> cell = cells.build("spectral", input_size=2, hidden_size=128, m1=16, m2=16)
    >>> outputs, h_last = cell(x)             # x (batch, time, 2)

Every cell follows the contract in :mod:`stability.cells.base`.
"""
from __future__ import annotations

import importlib
import inspect

from torch import nn

from .base import RecurrentCell

# name -> "module:Class"; modules are imported on first use.
_CELLS = {
    "rnn": "rnn:ElmanRNN",
    "irnn": "rnn:IRNN",
    "lstm": "gated:LSTM",
    "gru": "gated:GRU",
    "spectral": "spectral:SpectralRNN",
    "orthogonal": "spectral:OrthogonalRNN",
    "vprnn": "vprnn:VPRNN",
    "fastrnn": "fastrnn:FastRNN",
    "sgornn": "fastrnn:SGORNN",
    "kru": "kru:KRU",
    "kru_lstm": "kru:KRULSTM",
    "urnn": "unitary:URNN",
    "exponential": "unitary:ExponentialRNN",
}

# Shown with the "what is this" of each cell in the CLI and dashboard.
DESCRIPTIONS = {
    "rnn": "Elman RNN, tanh/relu/leaky_relu; gaussian, orthogonal or identity init",
    "irnn": "ReLU RNN with identity init (Le et al. 2015)",
    "lstm": "Long short-term memory",
    "gru": "Gated recurrent unit",
    "spectral": "Spectral-RNN: W = U diag(sigma) V^T by Householder reflectors (spectral paper §3-4)",
    "orthogonal": "oRNN: W a product of m Householder reflectors (Mhammedi et al. 2017)",
    "vprnn": "VPRNN: W = R1 Q1 ... Rk Qk, plane rotations and permutations (SGORNN paper eq. 2)",
    "fastrnn": "FastRNN: h = alpha f(Wx + Uh + b) + beta h (SGORNN paper eq. 1)",
    "sgornn": "SGORNN: FastRNN with orthogonal U and beta <= 1 - 2 alpha (SGORNN paper eq. 3)",
    "kru": "Kronecker Recurrent Unit: complex W = W_0 (x) ... (x) W_F-1, soft unitary penalty (KRU paper §3)",
    "kru_lstm": "LSTM with Kronecker-factored recurrent matrices (KRU paper §4.4)",
    "urnn": "Unitary RNN, restricted capacity (Arjovsky et al. 2016)",
    "exponential": "expRNN: W = exp(A - A^T), orthogonal (Lezcano-Casado & Martinez-Rubio 2019)",
}


def _cell_class(name: str) -> type[RecurrentCell]:
    module_name, class_name = _CELLS[name].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module_name}"), class_name)


def available() -> list[str]:
    """Names accepted by :func:`build`."""
    return list(_CELLS)


def options(name: str) -> dict[str, object]:
    """The options a cell accepts, with their defaults."""
    if name not in _CELLS:
        raise ValueError(f"unknown cell {name!r}; valid cells: {', '.join(_CELLS)}")
    signature = inspect.signature(_cell_class(name).__init__)
    return {p.name: p.default for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY}


def option_annotations(name: str) -> dict[str, str]:
    """Each option's annotation as written in the cell's signature, e.g. ``{"k": "int | None"}``."""
    options(name)  # a one-line ValueError for an unknown name
    signature = inspect.signature(_cell_class(name).__init__)
    return {p.name: str(p.annotation) for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY}


def build(name: str, input_size: int, hidden_size: int, **cell_options) -> nn.Module:
    """Build cell ``name``; unknown names and options raise ``ValueError`` naming the valid ones."""
    valid = options(name)
    unknown = sorted(set(cell_options) - set(valid))
    if unknown:
        raise ValueError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                         f"for cell {name!r}; valid options: {', '.join(valid)}")
    return _cell_class(name)(input_size, hidden_size, **cell_options)


__all__ = ["available", "build", "options", "option_annotations", "DESCRIPTIONS", "RecurrentCell"]
