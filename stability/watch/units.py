"""The recurrent matrices of someone's own model: what :func:`stability.watch.Run.watch` reads.

    units = recurrent_units(model)        # every recurrent unit, in the order of model.named_modules()
    units[0].blocks                       # [Block("lstm.l0.i", ...), ..., Block("lstm.l0.g", ..., primary=True), ...]

A *unit* is one layer and direction of a recurrent module; its *blocks* are the square (or, with an
LSTM's ``proj_size``, rectangular) pieces of its recurrent weight that act on the state, one per gate:

* ``nn.RNN``, ``nn.LSTM``, ``nn.GRU`` (and their ``*Cell`` forms): ``weight_hh_l{k}`` of every layer
  k, ``weight_hh_l{k}_reverse`` of a bidirectional one, its rows split in PyTorch's gate order, an
  LSTM's (i, f, g, o), a GRU's (r, z, n) (the ``torch.nn.LSTM``/``GRU`` documentation's
  ``weight_hh_l[k]``); an Elman RNN's whole matrix is one block.
* every cell of :mod:`stability.cells` (the cell contract, ``stability/cells/base.py``):
  ``recurrent_matrix()``, the parameters it is built from (``recurrent_parameters()``) and its
  ``gate_values()``.
* any other module that follows the protocol below.

The *primary* block is the one our own cell of that kind calls its recurrent matrix (an LSTM's g,
a GRU's n: stability/cells/gated.py; an Elman RNN's whole W), so a watched model's ``sv/*`` read
as a run of our cells does; every block is also read under its own place (``block_name``).

Note [The recurrent-matrix protocol]
    A module of your own is watched when it has a method ``recurrent_matrices()`` returning a dict
    ``{block name: matrix}`` (each a tensor built from its parameters, the first the primary one),
    and optionally ``recurrent_parameters()`` (the parameters whose gradient is the recurrent
    gradient; default: the leaves the matrices are, where they are parameters) and
    ``gate_values()`` (a dict of named scalar gate statistics of its last forward pass). Its
    submodules are not searched further.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from ..cells.base import RecurrentCell
from .gates import GateRecorder

GATE_BLOCKS = {"LSTM": ("i", "f", "g", "o"), "GRU": ("r", "z", "n"), "RNN": (None,)}
PRIMARY = {"LSTM": "g", "GRU": "n", "RNN": None}


@dataclass
class Block:
    """One recurrent matrix: where it is (``place``, e.g. ``lstm.l0_reverse.f``), how to read it now
    (``matrix()``: a tensor of the model's current weights) and whether it is its unit's primary one."""

    place: str
    matrix: Callable[[], torch.Tensor]
    primary: bool = False


@dataclass
class Unit:
    """One layer and direction of a recurrent module: its blocks, the parameters its recurrent
    gradient is taken over, and its gate statistics (None where it has no gates)."""

    place: str
    blocks: list[Block]
    parameters: list[torch.Tensor]
    gates: Callable[[], dict[str, float]] | None = field(default=None, repr=False)
    kind: str = ""  # the module's class: LSTM, GRU, SpectralRNN, ...

    @property
    def size(self) -> int:
        """The number of state units its primary block acts on (its columns)."""
        with torch.no_grad():
            return int(self.primary.matrix().shape[-1])

    @property
    def primary(self) -> Block:
        return next((block for block in self.blocks if block.primary), self.blocks[0])


def _kind(module: nn.Module) -> str | None:
    """``LSTM``, ``GRU`` or ``RNN`` for PyTorch's recurrent modules and cells; None for any other."""
    if isinstance(module, (nn.LSTM, nn.LSTMCell)):
        return "LSTM"
    if isinstance(module, (nn.GRU, nn.GRUCell)):
        return "GRU"
    if isinstance(module, (nn.RNN, nn.RNNCell)):
        return "RNN"
    return None


def _rows(weight_of: Callable[[], torch.Tensor], index: int, count: int) -> Callable[[], torch.Tensor]:
    """The ``index``-th of ``count`` equal row blocks of a weight, read when called."""
    def block() -> torch.Tensor:
        weight = weight_of()
        rows = weight.shape[0] // count
        return weight[index * rows:(index + 1) * rows]
    return block


def _torch_units(path: str, module: nn.Module, kind: str, recorder: GateRecorder | None) -> list[Unit]:
    """The units of an ``nn.RNN``/``nn.LSTM``/``nn.GRU`` (each layer, each direction) or of its cell."""
    blocks_of = GATE_BLOCKS[kind]
    if isinstance(module, nn.RNNCellBase):
        layers = [("", "weight_hh")]
    else:
        directions = ["", "_reverse"] if module.bidirectional else [""]
        layers = [(f".l{k}{suffix}", f"weight_hh_l{k}{suffix}")
                  for k in range(module.num_layers) for suffix in directions]
    units = []
    for index, (where, attribute) in enumerate(layers):
        place = f"{path}{where}"
        weight_of = (lambda name=attribute: getattr(module, name))
        blocks = [Block(f"{place}.{gate}" if gate else place, _rows(weight_of, b, len(blocks_of)),
                      primary=gate == PRIMARY[kind]) for b, gate in enumerate(blocks_of)]
        gates = None if recorder is None else (lambda i=index: recorder.gates(i))
        units.append(Unit(place, blocks, [getattr(module, attribute)], gates, type(module).__name__))
    return units


def _cell_unit(path: str, cell: RecurrentCell) -> Unit:
    """A cell of :mod:`stability.cells`: its ``recurrent_matrix()`` (primary), parameters and gates."""
    return Unit(path, [Block(path, cell.recurrent_matrix, primary=True)], list(cell.recurrent_parameters()),
                cell.gate_values, type(cell).__name__)


def _protocol_unit(path: str, module: nn.Module) -> Unit:
    """A module of the protocol (Note [The recurrent-matrix protocol])."""
    names = list(module.recurrent_matrices())
    if not names:
        raise ValueError(f"{type(module).__name__}.recurrent_matrices() returned no matrix; it must return "
                         "{name: matrix} with at least one")
    blocks = [Block(f"{path}.{name}", (lambda name=name: module.recurrent_matrices()[name]), primary=i == 0)
              for i, name in enumerate(names)]
    if hasattr(module, "recurrent_parameters"):
        parameters = list(module.recurrent_parameters())
    else:
        parameters = [m for m in module.recurrent_matrices().values() if isinstance(m, nn.Parameter)]
    return Unit(path, blocks, parameters, getattr(module, "gate_values", None), type(module).__name__)


def recurrent_units(model: nn.Module, recorders: dict[int, GateRecorder] | None = None) -> list[Unit]:
    """Every recurrent unit of ``model`` (module docstring), in the order of ``named_modules()``; the
    modules found are not searched inside. ``recorders``: id(module) -> its gate recorder. A model
    with none is a ValueError naming what is watched."""
    units: list[Unit] = []
    inside: list[str] = []
    for path, module in model.named_modules():
        if any(path.startswith(f"{outer}.") or outer == "" for outer in inside):
            continue
        place = path or type(module).__name__.lower()
        if (kind := _kind(module)) is not None:
            units += _torch_units(place, module, kind, (recorders or {}).get(id(module)))
        elif isinstance(module, RecurrentCell):
            units.append(_cell_unit(place, module))
        elif callable(getattr(module, "recurrent_matrices", None)):
            units.append(_protocol_unit(place, module))
        else:
            continue
        inside.append(path)
    if not units:
        raise ValueError(f"{type(model).__name__} has no recurrent matrix to watch: stability.watch reads "
                         "nn.RNN, nn.LSTM, nn.GRU (and their cells), the cells of stability.cells, and any "
                         "module with a recurrent_matrices() method")
    return units
