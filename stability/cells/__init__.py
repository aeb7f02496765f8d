"""Recurrent cells of the papers, and any cell of your own, behind one registry.

    >>> from stability import cells
    >>> cell = cells.build("spectral", input_size=2, hidden_size=128, m1=16, m2=16)
    >>> outputs, h_last = cell(x)             # x (batch, time, 2)
    >>> cells.describe("spectral").equations  # what the dashboard and the CLI show

Every cell follows the contract in :mod:`stability.cells.base`.  A cell of your
own (best a :class:`RecurrentCell` subclass) joins with ``register("leaky",
LeakyRNN)``, an entry point in the group ``stability.cells``, or simply by its
import path wherever a name is taken: ``build("mylab.cells:LeakyRNN", ...)``,
``--cell mylab.cells:LeakyRNN`` (see :mod:`stability.core.registry`).

What a cell says about itself lives on its class (read by :func:`describe`)::

    summary = "one line"                           # else the docstring's first line
    equations = (r"h_t = ...", ...)                # LaTeX, one row each
    paper = "Zhang et al. 2018 (Spectral-RNN) §4, eq. (4)"
    option_help = {"leak": "..."}                  # merged along the MRO: bases serve subclasses
    option_choices = {"init": ("gaussian", ...)}
    option_ranges = {"leak": (0.0, 1.0)}           # closed bounds, None for an open side

and each option's type and default come from the ``__init__`` signature.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..core.registry import OptionInfo, PluginWarning, Registry, docstring_line, option_infos, own_lines, own_text
from .base import RecurrentCell

# The methods the trainer and the diagnostics call (a RecurrentCell has them all).
CONTRACT = ("forward", "initial_state", "recurrent_matrix", "gate_values", "penalty", "recurrent_parameters",
            "recurrent_parameter_count", "after_optimizer_step")


def check_cell_class(name: str, cls: Any) -> None:
    """ValueError (one line) unless ``cls`` can be built as ``cls(input_size, hidden_size, **options)``
    and keeps the cell contract."""
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(f"cell {name!r} must be a torch.nn.Module class (best a subclass of "
                         f"stability.cells.RecurrentCell); got {cls!r}")
    if not issubclass(cls, RecurrentCell):
        missing = [method for method in CONTRACT if not callable(getattr(cls, method, None))]
        if missing:
            raise ValueError(f"cell {name!r} ({cls.__qualname__}) lacks {', '.join(missing)} of the cell "
                             "contract; derive it from stability.cells.RecurrentCell to inherit them")
    try:
        inspect.signature(cls).bind(1, 1)
    except (TypeError, ValueError):
        raise ValueError(f"cell {name!r} ({cls.__qualname__}) must be built as "
                         "cls(input_size, hidden_size, **options)") from None


registry = Registry("cell", check=check_cell_class, builtins={
    name: f"{__name__}.{path}" for name, path in {
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
        "mlp": "mlp:DeepMLP",
    }.items()})


@dataclass(frozen=True)
class CellInfo:
    """What a cell says about itself (:func:`describe`)."""

    name: str
    summary: str
    equations: tuple[str, ...]
    paper: str
    options: tuple[OptionInfo, ...]

    def option(self, name: str) -> OptionInfo:
        for option in self.options:
            if option.name == name:
                return option
        raise ValueError(f"cell {self.name!r} has no option {name!r}; valid options: "
                         f"{', '.join(option.name for option in self.options)}")

    def defaults(self) -> dict[str, Any]:
        return {option.name: option.default for option in self.options}

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "equations": list(self.equations),
                "paper": self.paper, "options": [option.to_dict() for option in self.options]}


def available() -> list[str]:
    """Names accepted by :func:`build`: the built-ins, then plugins and registered cells."""
    return registry.names()


def get_class(name: str) -> type:
    """The class of cell ``name`` (a ``package.module:Class`` name is imported); ValueError if unknown."""
    return registry.get(name)


def register(name: str, cls: type | None = None, *, replace: bool = False):
    """Register cell class ``cls`` as ``name`` (also usable as ``@register("leaky")``).

    ValueError on a name already taken by another class, unless ``replace=True``, and on a
    class that breaks the contract (:func:`check_cell_class`)."""
    if cls is None:
        return lambda cls: registry.register(name, cls, replace=replace)
    return registry.register(name, cls, replace=replace)


def unregister(name: str) -> None:
    """Forget a registered cell (a built-in that was replaced comes back)."""
    registry.unregister(name)


def describe(name: str) -> CellInfo:
    """Summary, equations (LaTeX), paper and options of cell ``name``, read from its class."""
    return _describe(name, get_class(name))


@functools.lru_cache(maxsize=256)
def _describe(name: str, cls: type) -> CellInfo:
    return CellInfo(name=name, summary=own_text(cls, "summary") or docstring_line(cls),
                    equations=own_lines(cls, "equations"), paper=own_text(cls, "paper"),
                    options=option_infos(cls, positional=2))


def options(name: str) -> dict[str, object]:
    """The options a cell accepts, with their defaults."""
    return describe(name).defaults()


def option_annotations(name: str) -> dict[str, str]:
    """Each option's annotation as written in the cell's signature, e.g. ``{"k": "int | None"}``."""
    return {option.name: option.type for option in describe(name).options}


def build(name: str, input_size: int, hidden_size: int, **cell_options) -> nn.Module:
    """Build cell ``name``; unknown names and options raise ``ValueError`` naming the valid ones."""
    valid = options(name)
    unknown = sorted(set(cell_options) - set(valid))
    if unknown:
        raise ValueError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                         f"for cell {name!r}; valid options: {', '.join(valid)}")
    return get_class(name)(input_size, hidden_size, **cell_options)


__all__ = ["CONTRACT", "CellInfo", "OptionInfo", "PluginWarning", "RecurrentCell", "available", "build",
           "describe", "get_class", "option_annotations", "options", "register", "registry", "unregister"]
