"""Probes of gradient stability that need no training.

The quantities are the papers' own: the gradient reaching step t from the
last step, ‖∂h_T/∂h_t‖, and its bound through the recurrent matrix,

    ‖∂L/∂h_t‖ <= ‖W‖^(T-t) ‖∂L/∂h_T‖          (KRU paper eq. 3; Arjovsky et al. 2016)

which holds for Elman updates whose nonlinearity has |f'| <= 1 (tanh, relu,
leaky_relu, modReLU's radial part).  Gated cells (LSTM, GRU, FastRNN's
residual) are not bound by it: their gates rescale the flow at every step.
The singular values of W and their distance from 1 (the spectral paper's
margin, max_i |σ_i − 1|, Fig. 4) say which way the product will go.

Every float64 reading here runs on :func:`stability.core.devices.reading_device`:
the model's own device where it has float64 at full rate (the CPU, a data-centre
GPU), else a CPU copy (a Mac's GPU has no float64, a consumer GPU runs it at
1/32).  The definitions are the same on either, and so is the guarantee that
a norm reads 0 only when the gradient is exactly 0 (:func:`stable_norm`).  A
tensor leaves the device in its own dtype and is widened on the host (MPS
cannot copy into a float64 tensor), inside :func:`stability.core.devices.on_host`.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..core import metric_names as names
from ..core.devices import on_host, reading_device


@dataclass
class GradientFlow:
    """What :func:`gradient_flow` measured.

    ``per_step`` has one row per step t = 0..T (t = 0 is h0) with columns
    ``t``, ``steps_back`` (T − t), ``grad_norm`` (estimate of ‖∂h_T/∂h_t‖)
    and ``bound`` (‖W‖₂^(T−t); for a cell whose step is several layers, its
    ``step_gain_bound(‖W‖₂)`` to the T − t).  ``singular_values`` are those of W,
    largest first.
    """

    per_step: pd.DataFrame
    singular_values: np.ndarray
    spectral_radius: float

    @property
    def spectral_norm(self) -> float:
        return float(self.singular_values[0])

    @property
    def margin(self) -> float:
        """max_i |σ_i − 1| (spectral paper Fig. 4)."""
        return float(np.abs(self.singular_values - 1.0).max())


def widened(tensor: torch.Tensor, where: torch.device | None = None) -> torch.Tensor:
    """``tensor`` detached, on ``where`` (default :func:`reading_device` of its device), in float64
    (complex128 if complex): moved in its own dtype, widened there.  Call inside :func:`on_host`."""
    where = reading_device(tensor.device) if where is None else where
    moved = tensor.detach().to(where)
    return moved.to(torch.complex128 if moved.is_complex() else torch.float64)


def singular_values(matrix: torch.Tensor) -> np.ndarray:
    """σ of a real or complex square matrix, largest first, in float64 (on :func:`reading_device`)."""
    with torch.no_grad(), on_host():
        return torch.linalg.svdvals(widened(matrix)).cpu().numpy()


def spectrum_metrics(matrix: torch.Tensor, with_radius: bool = True) -> tuple[dict[str, float], np.ndarray]:
    """``sv/*`` of the recurrent matrix and its singular values (largest first).

    The spectral radius needs a general eigensolver (~4 ms at 128 x 128 on
    CPU, 5x the SVD), so the trainer asks for it only at evaluation steps.
    """
    sigma = singular_values(matrix)
    smallest, largest = float(sigma[-1]), float(sigma[0])
    metrics = {names.SV_MIN: smallest, names.SV_MAX: largest, names.SV_MARGIN: float(np.abs(sigma - 1.0).max()),
               names.SV_CONDITION: largest / smallest if smallest > 0 else math.inf}
    if with_radius:
        with torch.no_grad(), on_host():
            wide = widened(matrix, torch.device("cpu"))
            metrics[names.SPECTRAL_RADIUS] = torch.linalg.eigvals(wide).abs().max().item()
    return metrics, sigma


def stable_norm(tensor: torch.Tensor, dim=None) -> torch.Tensor:
    """The 2-norm (over ``dim``, default all) computed without underflow or overflow.

    ``torch.linalg.vector_norm`` squares every entry first: a gradient whose
    entries are 1e-170 reads exactly 0 in float64 (1e-340 underflows), and
    1e-23 reads 0 in float32.  Dividing by the largest magnitude first keeps
    every square in [0, 1], so the norm is 0 only when every entry is.
    """
    magnitude = tensor.detach().abs()
    if dim is None:
        magnitude = magnitude.reshape(-1)
        dim = 0
    scale = magnitude.amax(dim=dim, keepdim=True)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    norms = (magnitude / safe).pow(2).sum(dim=dim, keepdim=True).sqrt() * scale
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return norms.squeeze(dims) if dims else norms


def state_gradient_norms(loss_of, h0: torch.Tensor, seq_len: int, *, reduce: str = "frobenius") -> np.ndarray:
    """‖∂L/∂h_t‖ for t = 0..T in one backward pass.

    ``loss_of(h0, state_probe)`` runs the model from ``h0`` with the cell's
    state probe (zeros, (B, T, S)) and returns the scalar loss L; the probe's
    gradient at t is then dL/dh_t, and h0's is dL/dh0.  ``reduce``:
    ``"frobenius"``, the norm over the batch and the state of the (B, S)
    gradient (what ‖∂L/∂h0‖ means for a batch loss, spectral paper Fig. 1);
    ``"rms"``, that divided by √B (the root mean square of the examples' norms).
    """
    return state_gradient_norm_tensor(loss_of, h0, seq_len, reduce=reduce).cpu().numpy()


def state_gradient_norm_tensor(loss_of, h0: torch.Tensor, seq_len: int, *, reduce: str = "frobenius") -> torch.Tensor:
    """:func:`state_gradient_norms` as a (T+1,) tensor where ``h0`` is, nothing read from it."""
    h0 = h0.detach().clone().requires_grad_()
    probe = torch.zeros(h0.shape[0], seq_len, h0.shape[1], dtype=h0.dtype, device=h0.device, requires_grad=True)
    loss_of(h0, probe).backward()
    grads = torch.cat([h0.grad[:, None], probe.grad], dim=1)  # (B, T+1, S): dL/dh_t, t = 0..T
    norms = stable_norm(grads, dim=(0, 2))
    if reduce == "rms":
        norms = norms / math.sqrt(h0.shape[0])
    return norms


class ProbeBatch:
    """The gradient readings of a training run, on one fixed batch, in float64.

    Definitions (the same at every step, so curves compare across training):

    * ``h0_norm()`` — ‖∂L/∂h0‖: the 2-norm over the batch and the state of
      the gradient of L = the task loss averaged over the probe batch, with
      respect to the (B, S) initial state, at the cell's evaluation h0 (zero,
      or the learned one; MASO's noisy h0 is zero at evaluation).  Spectral
      paper Figs. 1 and 4.
    * ``through_time()`` — the same norm of ∂L/∂h_t for every t = 0..T (its
      t = 0 entry is ``h0_norm()``), through the cell's state probe.
    * ``through_depth()`` — the same norm of ∂L/∂a_l for every layer l = 0..L inside
      one step of a deep cell (``mlp``), None for other cells.
    * ``output_h0_norm()`` — ‖A_h‖ of the MASO paper (§5.1, Thm. 3, Fig. 4):
      A_h = ∂z/∂h0, the slope of the last step's model output z (C values)
      in the initial state, which for a piecewise-affine cell is the affine
      parameter of h0 in the current region.  Reported as the root mean
      square over the batch of each example's Frobenius norm ‖A_h‖_F, the
      quantity whose square the noisy-h0 regulariser R penalises (eq. 9).

    Everything runs on a float64 copy of the model (``sync()`` refreshes its
    weights), in evaluation mode, on :func:`reading_device` of the model's
    device (a CPU copy where that device has no fast float64), and every norm is
    :func:`stable_norm`; so a vanishing gradient reads its value (1e-170 at
    T = 1000 for a ReLU RNN) where the float32 training batch holds exactly 0.
    It reads 0 only when the gradient is exactly zero (every ReLU of a step
    dead) or below float64's range (< 1e-308).

    ``model(x, h0, state_probe=None) -> (pred, h_last)`` with ``model.cell``
    the recurrent cell; ``loss(pred, y)`` the task loss.
    """

    def __init__(self, model: nn.Module, loss, x: torch.Tensor, y: torch.Tensor,
                 max_output_directions: int = 16):
        self.model = model
        self.loss = loss
        self.device = reading_device(x.device)
        with on_host():
            self.shadow = float64_copy(model, self.device).eval()
            for parameter in self.shadow.parameters():
                parameter.requires_grad_(False)  # only h0 and the state probe need gradients
            self.x = widened(x, self.device)
            self.y = widened(y, self.device) if y.is_floating_point() else y.detach().to(self.device)
        self.max_output_directions = max_output_directions

    def sync(self) -> None:
        """Copy the training model's current weights (and buffers) into the float64 copy."""
        sync_copy(self.shadow, self.model)

    def _initial_state(self) -> torch.Tensor:
        h0 = self.shadow.cell.initial_state(self.x.shape[0], dtype=torch.float64, device=self.device)
        return h0.detach().clone().requires_grad_()

    def h0_norm(self) -> float:
        with on_host():
            return self.h0_norm_tensor().item()

    def through_time(self) -> np.ndarray:
        with on_host():
            return self.through_time_tensor().cpu().numpy()

    def h0_norm_tensor(self) -> torch.Tensor:
        """:meth:`h0_norm` as a 0-d tensor on the reading device, nothing read from it."""
        h0 = self._initial_state()
        pred, _ = self.shadow(self.x, h0)
        (grad,) = torch.autograd.grad(self.loss(pred, self.y), h0)
        return stable_norm(grad)

    def through_time_tensor(self) -> torch.Tensor:
        """:meth:`through_time` as a (T+1,) tensor on the reading device, nothing read from it."""
        def task_loss(h0, state_probe):
            return self.loss(self.shadow(self.x, h0, state_probe=state_probe)[0], self.y)

        return state_gradient_norm_tensor(task_loss, self._initial_state(), self.x.shape[1])

    def through_depth(self) -> np.ndarray | None:
        """‖∂L/∂a_l‖ for l = 0..L, the gradient reaching each layer of a cell whose one step is L layers
        deep (``mlp``: its ``probing_layers``; spectral paper Fig. 5), the same norm as ``h0_norm()``;
        None for a cell without layers inside a step."""
        cell = self.shadow.cell
        if not hasattr(cell, "probing_layers"):
            return None
        with on_host():  # float64 on the reading device, as every probe (a Mac's GPU has none)
            h0 = self._initial_state()
            probe = torch.zeros(cell.layers + 1, *h0.shape, dtype=h0.dtype, device=h0.device, requires_grad=True)
            with cell.probing_layers(probe):
                loss = self.loss(self.shadow(self.x, h0)[0], self.y)
            (grad,) = torch.autograd.grad(loss, probe)
            return stable_norm(grad, dim=(1, 2)).cpu().numpy()

    def output_h0_norm(self, seed: int = 0) -> float:
        """RMS over the batch of ‖∂z/∂h0‖_F (see the class docstring).

        One backward pass per output unit; with more than
        ``max_output_directions`` outputs (a language model's vocabulary),
        that many Gaussian directions g estimate it without bias,
        E‖gᵀ A‖² = ‖A‖_F².
        """
        with on_host():
            return self.output_h0_norm_tensor(seed)[0].item()

    def output_h0_norm_tensor(self, seed: int = 0, directions: torch.Tensor | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`output_h0_norm` as a 0-d tensor on the reading device, nothing read from it, and the directions
        g it took: ``directions`` where given (those of an earlier call: the same for the same outputs and
        ``seed``), else drawn as the class docstring says."""
        h0 = self._initial_state()
        pred, _ = self.shadow(self.x, h0)
        z = pred[:, -1] if pred.dim() == 3 else pred  # (B, C): the last step's output
        z = z.reshape(z.shape[0], -1)
        if directions is None:
            directions = self._output_directions(z.shape[1], seed, z.dtype, z.device)
        rows = []
        for index, direction in enumerate(directions):
            (grad,) = torch.autograd.grad((z @ direction).sum(), h0, retain_graph=index < len(directions) - 1)
            rows.append(grad)  # (B, S): g^T A_h for each example
        per_example = stable_norm(torch.stack(rows), dim=(0, 2))  # (B,)
        return stable_norm(per_example) / math.sqrt(len(per_example)), directions

    def _output_directions(self, outputs: int, seed: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        if outputs <= self.max_output_directions:
            return torch.eye(outputs, dtype=dtype, device=device)
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(self.max_output_directions, outputs, generator=generator,
                           dtype=dtype).to(device) / math.sqrt(self.max_output_directions)


def sync_copy(shadow: nn.Module, model: nn.Module) -> None:
    """Copy ``model``'s current weights and buffers into its float64 copy ``shadow`` (:func:`float64_copy`)."""
    with torch.no_grad(), on_host():
        for mine, theirs in zip(shadow.parameters(), model.parameters()):
            mine.copy_(theirs.detach().to(mine.device))  # across in its own dtype, widened here
        for mine, theirs in zip(shadow.buffers(), model.buffers()):
            mine.copy_(theirs.detach().to(mine.device))


def float64_copy(module: nn.Module, where: torch.device) -> nn.Module:
    """A copy of ``module`` on ``where`` in float64: copied where it is, moved in its own dtype,
    widened on ``where`` (call inside :func:`on_host`)."""
    return copy.deepcopy(module).to(where).double()


def gradient_flow(cell: nn.Module, seq_len: int, batch_size: int = 8, seed: int = 0) -> GradientFlow:
    """‖∂h_T/∂h_t‖ for every t at the cell's current weights, in float64.

    Inputs are x ~ N(0, 1).  For each example a random unit vector g
    defines L = <g, h_T>; the cell's state probe then gives
    ∂L/∂h_t = (∂h_T/∂h_t)ᵀ g for every t in one backward pass.  Since
    E_g ‖Jᵀ g‖² = ‖J‖_F² / H, the root mean square over the batch estimates
    the typical gain ‖J‖_F / √H: exactly 1 for an orthogonal linear cell,
    ≈ 0 where gradients vanish.  Float64 keeps vanishing visible (1e-120)
    where float32 would underflow to 0.

    The cell is copied, to :func:`reading_device` of its device, and the inputs are
    drawn there (from a CPU generator, so every device draws the same); the
    cell's weights and mode are left as they were.
    """
    with on_host():
        where = reading_device(next(cell.parameters()).device)
        probe_cell = float64_copy(cell, where).eval()
        generator = torch.Generator().manual_seed(seed)

        def draw(*shape):
            return torch.randn(*shape, generator=generator, dtype=torch.float64).to(where)

        x = draw(batch_size, seq_len, probe_cell.input_size)
        h0 = probe_cell.initial_state(batch_size, dtype=torch.float64, device=where)
        direction = draw(*h0.shape)  # g, one per example
        if h0.is_complex():
            direction = torch.complex(direction, draw(*h0.shape))
        direction = direction / direction.abs().pow(2).sum(dim=1, keepdim=True).sqrt()

        def along_direction(h0, state_probe):  # L = Re <g, h_T>
            _, h_last = probe_cell(x, h0, state_probe=state_probe)
            return torch.real((h_last * direction.conj()).sum())

        norms = state_gradient_norms(along_direction, h0, seq_len, reduce="rms")
        spectrum, sigma = spectrum_metrics(probe_cell.recurrent_matrix())
    radius = spectrum["sv/spectral_radius"]
    steps_back = np.arange(seq_len, -1, -1)
    gain = float(sigma[0])  # ‖W‖₂; a step of several layers (mlp) bounds itself: its step_gain_bound
    if hasattr(probe_cell, "step_gain_bound"):
        gain = probe_cell.step_gain_bound(gain)
    with np.errstate(over="ignore"):
        bound = np.power(gain, steps_back.astype(np.float64))
    per_step = pd.DataFrame({"t": np.arange(seq_len + 1), "steps_back": steps_back,
                             "grad_norm": norms, "bound": bound})
    return GradientFlow(per_step=per_step, singular_values=sigma, spectral_radius=radius)
