"""Optimizers by name, including RMSprop as the papers' frameworks define it.

"RMSprop" (Tieleman & Hinton 2012) names one recurrence, but each framework
starts and scales it differently, and at a large learning rate the first step
decides whether a recurrent net survives.  With a gradient ``g`` (plus
``weight_decay * theta`` where that is set, as torch adds it), square-gradient
accumulator ``v`` and learning rate ``lr``:

``rmsprop`` — ``torch.optim.RMSprop`` defaults::

    v_0 = 0,   v_t = a v_{t-1} + (1 - a) g_t^2,          a = 0.99
    theta_t = theta_{t-1} - lr g_t / (sqrt(v_t) + eps),   eps = 1e-8

``rmsprop_keras`` — Keras 2.x ``keras.optimizers.RMSprop`` (standalone Keras
2.3.x ``keras/optimizers.py``: zero accumulators, ``rho = 0.9``,
``epsilon = K.epsilon() = 1e-7`` added outside the root), which is
``torch.optim.RMSprop(alpha=0.9, eps=1e-7)``::

    v_0 = 0,   v_t = 0.9 v_{t-1} + 0.1 g_t^2
    theta_t = theta_{t-1} - lr g_t / (sqrt(v_t) + 1e-7)

  The SGORNN authors' code trains every model of the paper with it
  (``wtaylor17/sgornn-nn-supplementary``, ``sgornn/experiments/*.py``:
  ``keras.optimizers.RMSprop``, keras 2.3.1 on tensorflow 1.15 per its
  ``requirements.txt``).

``rmsprop_tf`` — TensorFlow 1's ``tf.train.RMSPropOptimizer`` (TF
``tensorflow/python/training/rmsprop.py``: the ``rms`` slot is created with
``ones_initializer``, defaults ``decay = 0.9``, ``momentum = 0``,
``epsilon = 1e-10``; kernel ``ApplyRMSProp`` in
``tensorflow/core/kernels/training_ops.cc``)::

    v_0 = 1,   v_t = v_{t-1} + (1 - rho) (g_t^2 - v_{t-1}),   rho = 0.9
    m_0 = 0,   m_t = mu m_{t-1} + lr g_t / sqrt(v_t + eps),   mu = 0, eps = 1e-10
    theta_t = theta_{t-1} - m_t

  (note ``lr`` sits inside the momentum buffer, unlike torch's.)

``adam``, ``sgd`` — ``torch.optim.Adam`` and ``torch.optim.SGD`` with their
defaults.

Note [the first RMSprop step]
With ``v_0 = 0`` the first step is ``lr g / (sqrt(1 - a) |g| + eps)``: a
sign step of ``lr / sqrt(1 - a)`` on every coordinate whatever the gradient's
size (``10 lr`` for torch, ``3.16 lr`` for Keras), and gradient-norm clipping
cannot shrink it, since it rescales ``g`` and ``|g|`` alike.  On a dense
``n x n`` recurrent matrix whose gradient is nearly rank one, ``n^2`` equal
moves add a matrix of spectral norm of order ``lr n / sqrt(1 - a)``: for
FastRNN at hidden 128, lr 1e-2, ``||U||_2`` jumps from 2.3 to 9.4 and the
adding task at T = 300 overflows at step 2 (``docs/optimizers.md``).
TF1's ``v_0 = 1`` makes the first steps ``lr g / sqrt(0.9 + 0.1 g^2)``,
about ``lr g`` for small gradients, and the accumulator forgets its start at
rate 0.9 per step.

Complex parameters are handled as torch's RMSprop handles them: the real and
imaginary parts are separate real coordinates (``torch.view_as_real``), so a
complex accumulator starts at ``v_0 (1 + 1j)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import Tensor


class RMSpropTF(torch.optim.Optimizer):
    """TensorFlow 1's ``tf.train.RMSPropOptimizer`` (non-centered), as a torch optimizer.

    Args:
        params: parameters or parameter groups.
        lr: learning rate (TF ``learning_rate``).
        decay: the accumulator's discount ``rho`` (TF ``decay``, default 0.9).
        momentum: ``mu`` (default 0, as TF).
        eps: added inside the square root (TF ``epsilon``, default 1e-10).
        initial_accumulator_value: ``v_0`` (1.0 as TF's ``ones_initializer``).
        weight_decay: L2 term added to the gradient, as torch's optimizers do
            (TF's optimizer has none; 0 reproduces TF).

    State per parameter: ``step`` (a float tensor, as torch keeps it),
    ``square_avg`` (``v``) and, when ``momentum > 0``, ``momentum_buffer``
    (``m``, created at zero when first needed).
    """

    def __init__(self, params, lr: float = 1e-3, decay: float = 0.9, momentum: float = 0.0,
                 eps: float = 1e-10, initial_accumulator_value: float = 1.0, weight_decay: float = 0.0):
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"Invalid decay value: {decay}")
        if not momentum >= 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not eps >= 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not initial_accumulator_value >= 0.0:
            raise ValueError(f"Invalid initial_accumulator_value: {initial_accumulator_value}")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, decay=decay, momentum=momentum, eps=eps,
                        initial_accumulator_value=initial_accumulator_value, weight_decay=weight_decay)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError("RMSpropTF does not support sparse gradients")
                self._update(param, group)
        return loss

    def _update(self, param: Tensor, group: dict) -> None:
        state = self.state[param]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["square_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            _real(state["square_avg"]).fill_(group["initial_accumulator_value"])
        state["step"] += 1
        grad = param.grad
        if group["weight_decay"] != 0:
            grad = grad.add(param, alpha=group["weight_decay"])
        square_avg = _real(state["square_avg"])
        grad = _real(grad)
        square_avg.mul_(group["decay"]).addcmul_(grad, grad, value=1 - group["decay"])
        step = grad.mul(group["lr"]).div_(square_avg.add(group["eps"]).sqrt_())  # lr g / sqrt(v + eps)
        if group["momentum"] > 0:
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            buffer = _real(state["momentum_buffer"])
            buffer.mul_(group["momentum"]).add_(step)
            step = buffer
        _real(param).sub_(step)


def _real(tensor: Tensor) -> Tensor:
    """A complex tensor's (..., 2) real view; a real tensor itself."""
    return torch.view_as_real(tensor) if tensor.is_complex() else tensor


@dataclass(frozen=True)
class OptimizerSpec:
    build: Callable[..., torch.optim.Optimizer]  # (parameters, lr, weight_decay) -> optimizer
    summary: str


_REGISTRY: dict[str, OptimizerSpec] = {
    "adam": OptimizerSpec(
        lambda parameters, lr, weight_decay: torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay),
        "Adam, torch defaults (betas 0.9, 0.999; eps 1e-8)"),
    "rmsprop": OptimizerSpec(
        lambda parameters, lr, weight_decay: torch.optim.RMSprop(parameters, lr=lr, weight_decay=weight_decay),
        "RMSprop, torch semantics: accumulator starts at 0, alpha 0.99, eps 1e-8 outside the root "
        "(first step 10 lr per coordinate)"),
    "sgd": OptimizerSpec(
        lambda parameters, lr, weight_decay: torch.optim.SGD(parameters, lr=lr, weight_decay=weight_decay),
        "plain stochastic gradient descent, no momentum"),
    "rmsprop_tf": OptimizerSpec(
        lambda parameters, lr, weight_decay: RMSpropTF(parameters, lr=lr, weight_decay=weight_decay),
        "RMSprop, TensorFlow 1 semantics (tf.train.RMSPropOptimizer): accumulator starts at 1, "
        "decay 0.9, eps 1e-10 inside the root"),
    "rmsprop_keras": OptimizerSpec(
        lambda parameters, lr, weight_decay: torch.optim.RMSprop(parameters, lr=lr, alpha=0.9, eps=1e-7,
                                                                 weight_decay=weight_decay),
        "RMSprop, Keras 2 semantics (the SGORNN authors' code): accumulator starts at 0, rho 0.9, "
        "eps 1e-7 outside the root (first step 3.16 lr per coordinate)"),
}

OPTIMIZERS: tuple[str, ...] = tuple(_REGISTRY)


def _spec(name: str) -> OptimizerSpec:
    if name not in _REGISTRY:
        raise ValueError(f"unknown optimizer {name!r}; expected one of {', '.join(OPTIMIZERS)}")
    return _REGISTRY[name]


def describe(name: str) -> str:
    """One line on what ``name`` does."""
    return _spec(name).summary


def build_optimizer(parameters: Iterable[Tensor] | Iterable[dict], name: str, lr: float,
                    weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """The optimizer ``name`` (one of :data:`OPTIMIZERS`) over ``parameters`` (tensors or param groups)."""
    return _spec(name).build(parameters, lr, weight_decay)
