"""What a watched model reads at a logged step: the trainer's readings (docs/readings.md), taken on
someone's own model in their own loop, with the trainer's own probe code (stability.training.probes).

    watcher = Watcher(model, every=10, probe=Probe(loss_of, h0=h0, inputs=(x, y)))
    scalars, series = watcher.read(loss, h0=h0, states=None)      # before loss.backward()

At a logged step (:meth:`Watcher.due`):

``grad/h0_norm_train``, ``grad/h_t_norm_train`` (series), ``grad/recurrent_norm``, ``grad/total_norm``
    from one ``torch.autograd.grad`` of the loss the loop is about to backpropagate (its graph kept,
    nothing written into any ``.grad``), with respect to the initial state it hands over (a tensor, or
    an LSTM's ``(h0, c0)``, made with ``requires_grad=True``), the states its loop carried from step
    to step (``states``: h_1 … h_T as the tensors the recurrence went through; an ``nn.LSTM``'s output
    sequence is *not* that: the module carries its state inside), the recurrent parameters of every
    unit and every trained parameter; each a norm that never underflows (``stable_norm``,
    ``stacked_norm``), in the training dtype, as the trainer's ``grad/h0_norm_train``.
``sv/min``, ``sv/max``, ``sv/margin``, ``sv/condition``, ``sv/spectral_radius``, ``sv/spectrum`` (series)
    of every block (stability.watch.units), in float64 (``spectrum_metrics``), each under
    ``block_name(name, place)``, and under the name alone for the first unit's primary block.
``gate/<name>``
    a unit's gate means (first unit: the name alone, others ``gate/<name>/<place>``).
``grad/h0_norm``, ``grad/h_t_norm`` (series)
    with a :class:`Probe`: ‖∂L/∂h0‖ (and ‖∂L/∂h_t‖ where the probe's loss returns the states) on the
    probe's fixed batch, on a float64 copy of the model (``float64_copy``/``sync_copy``, on
    ``reading_device``): the trainer's ``grad/h0_norm``, which reads 1e-60 where float32 holds 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ..core import metric_names as names
from ..core.devices import on_host, reading_device
from ..training.hooks import stacked_norm
from ..training.probes import float64_copy, spectrum_metrics, stable_norm, sync_copy, widened
from ..training.window import read_numbers
from .gates import GateRecorder
from .units import Unit, recurrent_units


@dataclass
class Probe:
    """A fixed batch for the float64 readings: ``loss(model, h0, *inputs)`` runs ``model`` (a float64
    copy of yours) from ``h0`` on ``inputs`` (both widened to float64) and returns the loss, or
    ``(loss, states)`` with the states h_1 … h_T its recurrence carried (for ``grad/h_t_norm``)."""

    loss: Callable[..., Any]
    h0: torch.Tensor | tuple[torch.Tensor, ...]
    inputs: tuple = ()


def _parts(state) -> list[torch.Tensor]:
    """A state as its tensors: a tensor, or a tuple of them (an LSTM's (h, c))."""
    return list(state) if isinstance(state, (tuple, list)) else [state]


def _wide(value, where: torch.device):
    """Floating tensors (in tuples too) widened to float64 on ``where``; anything else moved there as it is."""
    if isinstance(value, (tuple, list)):
        return type(value)(_wide(part, where) for part in value)
    if isinstance(value, torch.Tensor):
        return widened(value, where) if value.is_floating_point() or value.is_complex() else value.to(where)
    return value


class Watcher:
    """The readings of ``model`` every ``every`` steps (and at step 1); see the module docstring."""

    def __init__(self, model: nn.Module, every: int = 10, probe: Probe | None = None):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a whole number of steps >= 1; got {every!r}")
        self.model, self.every, self.probe = model, every, probe
        self.recorders = {id(m): GateRecorder(m) for m in model.modules() if isinstance(m, (nn.LSTM, nn.GRU))}
        self.units: list[Unit] = recurrent_units(model, self.recorders)
        self.recurrent = [p for unit in self.units for p in unit.parameters if p.requires_grad]
        self.shadow = None
        if probe is not None:
            self.where = reading_device(next(model.parameters()).device)
            with on_host():
                self.shadow = float64_copy(model, self.where).eval()
                for parameter in self.shadow.parameters():
                    parameter.requires_grad_(False)  # only h0 and the states need gradients

    def due(self, step: int) -> bool:
        """Whether ``step`` (1, 2, …) is a logged step: the first, and every ``every``-th."""
        return step == 1 or step % self.every == 0

    def close(self) -> None:
        """Remove the forward hooks the gate statistics use."""
        for recorder in self.recorders.values():
            recorder.remove()

    def describe(self) -> dict:
        """What the pages show about the model: parameter counts and its device."""
        parameters = list(self.model.parameters())
        return {"total_params": sum(p.numel() for p in parameters),
                "recurrent_params": sum(p.numel() for unit in self.units for p in unit.parameters),
                "device": str(parameters[0].device) if parameters else "cpu"}

    def read(self, loss: torch.Tensor | None, h0=None, states=None) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """Every reading of this step (module docstring): ``(scalars, series)`` by metric name."""
        scalars, series = {}, {}
        if loss is not None and loss.requires_grad:
            self._gradients(loss, h0, states, scalars, series)
        self._spectra(scalars, series)
        for index, unit in enumerate(self.units):
            for gate, value in (unit.gates() if unit.gates else {}).items():
                name = f"{names.GATE_PREFIX}{gate}"
                scalars[name if index == 0 else names.block_name(name, unit.place)] = float(value)
        if self.probe is not None:
            self._probe(scalars, series)
        return scalars, series

    def _gradients(self, loss, h0, states, scalars: dict, series: dict) -> None:
        """One backward of ``loss`` (its graph kept for the loop's own) for the grad/* of the training batch."""
        h0_parts = [] if h0 is None else _parts(h0)
        state_parts = [_parts(state) for state in (states or [])]
        for part in h0_parts + [p for parts in state_parts for p in parts]:
            if not part.requires_grad:
                raise ValueError("the initial state and the states handed to run.step must be part of the loss's "
                                 "graph: make h0 with requires_grad=True (torch.zeros(..., requires_grad=True))")
        trained = [p for p in self.model.parameters() if p.requires_grad]
        inputs = h0_parts + [p for parts in state_parts for p in parts] + trained
        grads = torch.autograd.grad(loss, inputs, retain_graph=True, allow_unused=True)
        by_tensor = {id(t): g if g is not None else torch.zeros_like(t) for t, g in zip(inputs, grads)}
        norms = {}
        if h0_parts:
            norms[names.H0_NORM_TRAIN] = stacked_norm([by_tensor[id(p)] for p in h0_parts])
        flow = [stacked_norm([by_tensor[id(p)] for p in parts]) for parts in state_parts]
        if self.recurrent:
            norms[names.RECURRENT_NORM] = stacked_norm([by_tensor[id(p)] for p in self.recurrent])
        if trained:
            norms[names.TOTAL_NORM] = stacked_norm([by_tensor[id(p)] for p in trained])
        values = read_numbers(list(norms.values()) + flow)  # one read from the device for all of them
        scalars.update(zip(norms, values[:len(norms)]))
        if flow and h0_parts:
            series[names.H_T_NORM_TRAIN] = np.array([scalars[names.H0_NORM_TRAIN], *values[len(norms):]])
        elif flow:
            series[names.H_T_NORM_TRAIN] = np.array(values[len(norms):])

    def _spectra(self, scalars: dict, series: dict) -> None:
        for index, unit in enumerate(self.units):
            for block in unit.blocks:
                with torch.no_grad():
                    matrix = block.matrix()
                spectrum, sigma = spectrum_metrics(matrix, with_radius=matrix.shape[0] == matrix.shape[1])
                for name, value in spectrum.items():
                    scalars[names.block_name(name, block.place)] = value
                series[names.block_name(names.SPECTRUM, block.place)] = sigma
                if index == 0 and block is unit.primary:
                    scalars.update(spectrum)
                    series[names.SPECTRUM] = sigma

    def _probe(self, scalars: dict, series: dict) -> None:
        """``grad/h0_norm`` (and ``grad/h_t_norm``) on the probe's batch, on the float64 copy."""
        sync_copy(self.shadow, self.model)
        with on_host():
            h0 = [part.requires_grad_() for part in _parts(_wide(self.probe.h0, self.where))]
            state = tuple(h0) if isinstance(self.probe.h0, (tuple, list)) else h0[0]
            out = self.probe.loss(self.shadow, state, *_wide(tuple(self.probe.inputs), self.where))
            loss, states = out if isinstance(out, tuple) else (out, [])
            state_parts = [_parts(s) for s in states]
            grads = torch.autograd.grad(loss, h0 + [p for parts in state_parts for p in parts], allow_unused=True)
            grads = [g if g is not None else torch.zeros_like(t)
                     for g, t in zip(grads, h0 + [p for parts in state_parts for p in parts])]
            scalars[names.H0_NORM] = stable_norm(torch.cat([g.reshape(-1) for g in grads[:len(h0)]])).item()
            if state_parts:
                rest, flow = grads[len(h0):], [scalars[names.H0_NORM]]
                for parts in state_parts:
                    flow.append(stable_norm(torch.cat([g.reshape(-1) for g in rest[:len(parts)]])).item())
                    rest = rest[len(parts):]
                series[names.H_T_NORM] = np.array(flow)
