"""Probes of gradient stability that need no training.

The quantities are the papers' own: the gradient reaching step t from the
last step, ‖∂h_T/∂h_t‖, and its bound through the recurrent matrix,

    ‖∂L/∂h_t‖ <= ‖W‖^(T-t) ‖∂L/∂h_T‖          (KRU paper eq. 3; Arjovsky et al. 2016)

which holds for Elman updates whose nonlinearity has |f'| <= 1 (tanh, relu,
leaky_relu, modReLU's radial part).  Gated cells (LSTM, GRU, FastRNN's
residual) are not bound by it: their gates rescale the flow at every step.
The singular values of W and their distance from 1 (the spectral paper's
margin, max_i |σ_i − 1|, Fig. 4) say which way the product will go.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn


@dataclass
class GradientFlow:
    """What :func:`gradient_flow` measured.

    ``per_step`` has one row per step t = 0..T (t = 0 is h0) with columns
    ``t``, ``steps_back`` (T − t), ``grad_norm`` (estimate of ‖∂h_T/∂h_t‖)
    and ``bound`` (‖W‖₂^(T−t)).  ``singular_values`` are those of W,
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


def singular_values(matrix: torch.Tensor) -> np.ndarray:
    """σ of a real or complex square matrix, largest first, in float64."""
    with torch.no_grad():
        wide = matrix.detach().to(torch.complex128 if matrix.is_complex() else torch.float64)
        return torch.linalg.svdvals(wide).cpu().numpy()


def spectrum_metrics(matrix: torch.Tensor, with_radius: bool = True) -> tuple[dict[str, float], np.ndarray]:
    """``sv/*`` of the recurrent matrix and its singular values (largest first).

    The spectral radius needs a general eigensolver (~4 ms at 128 x 128 on
    CPU, 5x the SVD), so the trainer asks for it only at evaluation steps.
    """
    sigma = singular_values(matrix)
    smallest, largest = float(sigma[-1]), float(sigma[0])
    metrics = {"sv/min": smallest, "sv/max": largest, "sv/margin": float(np.abs(sigma - 1.0).max()),
               "sv/condition": largest / smallest if smallest > 0 else math.inf}
    if with_radius:
        with torch.no_grad():
            wide = matrix.detach().cpu()
            wide = wide.to(torch.complex128) if wide.is_complex() else wide.double()
            metrics["sv/spectral_radius"] = torch.linalg.eigvals(wide).abs().max().item()
    return metrics, sigma


def state_gradient_norms(loss_of, h0: torch.Tensor, seq_len: int) -> np.ndarray:
    """‖∂L/∂h_t‖ for t = 0..T in one backward pass, root mean square over the batch.

    ``loss_of(h0, state_probe)`` runs the model from ``h0`` with the cell's
    state probe (zeros, (B, T, S)) and returns the scalar loss L; the probe's
    gradient at t is then dL/dh_t, and h0's is dL/dh0.
    """
    h0 = h0.detach().clone().requires_grad_()
    probe = torch.zeros(h0.shape[0], seq_len, h0.shape[1], dtype=h0.dtype, device=h0.device, requires_grad=True)
    loss_of(h0, probe).backward()
    grads = torch.cat([h0.grad[:, None], probe.grad], dim=1)  # (B, T+1, S): dL/dh_t, t = 0..T
    return grads.abs().pow(2).sum(dim=2).mean(dim=0).sqrt().cpu().numpy()


def gradient_flow(cell: nn.Module, seq_len: int, batch_size: int = 8, seed: int = 0) -> GradientFlow:
    """‖∂h_T/∂h_t‖ for every t at the cell's current weights, in float64.

    Inputs are x ~ N(0, 1).  For each example a random unit vector g
    defines L = <g, h_T>; the cell's state probe then gives
    ∂L/∂h_t = (∂h_T/∂h_t)ᵀ g for every t in one backward pass.  Since
    E_g ‖Jᵀ g‖² = ‖J‖_F² / H, the root mean square over the batch estimates
    the typical gain ‖J‖_F / √H: exactly 1 for an orthogonal linear cell,
    ≈ 0 where gradients vanish.  Float64 keeps vanishing visible (1e-120)
    where float32 would underflow to 0.

    The cell is copied; its weights and mode are left as they were.
    """
    probe_cell = copy.deepcopy(cell).double().eval()
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, seq_len, probe_cell.input_size, generator=generator, dtype=torch.float64)
    h0 = probe_cell.initial_state(batch_size, dtype=torch.float64)
    direction = torch.randn(h0.shape, generator=generator, dtype=torch.float64)  # g, one per example
    if h0.is_complex():
        direction = torch.complex(direction, torch.randn(h0.shape, generator=generator, dtype=torch.float64))
    direction = direction / direction.abs().pow(2).sum(dim=1, keepdim=True).sqrt()

    def along_direction(h0, state_probe):  # L = Re <g, h_T>
        _, h_last = probe_cell(x, h0, state_probe=state_probe)
        return torch.real((h_last * direction.conj()).sum())

    norms = state_gradient_norms(along_direction, h0, seq_len)
    spectrum, sigma = spectrum_metrics(probe_cell.recurrent_matrix())
    radius = spectrum["sv/spectral_radius"]
    steps_back = np.arange(seq_len, -1, -1)
    with np.errstate(over="ignore"):
        bound = np.power(float(sigma[0]), steps_back.astype(np.float64))
    per_step = pd.DataFrame({"t": np.arange(seq_len + 1), "steps_back": steps_back,
                             "grad_norm": norms, "bound": bound})
    return GradientFlow(per_step=per_step, singular_values=sigma, spectral_radius=radius)
