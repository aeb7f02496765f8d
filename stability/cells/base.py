"""What every recurrent cell shares: the whole-sequence forward, the initial
hidden state, and the hooks the diagnostics read.

The cell contract (docs/architecture.md, "Contracts other code relies on")::

    outputs, h_last = cell(x, h0=None)        # x (B, T, input_size), batch-first
    cell.recurrent_matrix()                   # dense current transition matrix (H, H)
    cell.gate_values()                        # {name: float}, empty where there are no gates
    cell.penalty()                            # soft-constraint term for the loss (0 where none)
    cell.recurrent_parameters()               # the parameters W is built from (frozen by freeze_recurrent)
    cell.after_optimizer_step()               # called by the trainer after every optimizer step

and, for the trainer's gradient probes::

    cell(x, h0, state_probe=e)                # e: zeros (B, T, state_size), requires_grad
    e.grad[:, t]  ==  dL/dh_t                 # the total derivative, through all later steps

The probe is added to each state as it is produced (h_t <- h_t + e_t), so its
gradient is exactly dL/dh_t; a probed forward always runs the reference loop.

A subclass writes one step of its update (``_step``) and, where it has one,
a fused whole-sequence path (``_forward_fast``); everything else is here.

Initial hidden state (MASO paper §5.1, Thm. 3): ``h0="zero"`` (default),
``"learned"`` (a trainable vector), or ``"noisy"`` — during training
h0 ~ N(0, sigma^2 I) with sigma = ``h0_noise_std``, zero at evaluation.  The
paper shows the noise acts as an explicit regulariser on dL/dh0 (§5.2).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..core.errors import check_choice

H0_MODES = ("zero", "learned", "noisy")
IMPLS = ("auto", "loop", "scan", "native")


def check_bool(option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{option} must be True or False; got {value!r}")
    return value


def check_positive_int(option: str, value: Any, maximum: int | None = None) -> int:
    """``value`` when it is an int in [1, maximum]; else one ValueError line (checked before anything
    is allocated, so a size no machine holds is refused, not attempted)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{option} must be a positive integer; got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{option} must be at most {maximum}; got {value!r}")
    return value


def check_nonnegative(option: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{option} must be a number >= 0; got {value!r}") from None
    if not number >= 0.0:  # also rejects NaN
        raise ValueError(f"{option} must be a number >= 0; got {value!r}")
    return number


def check_band(r: Any, sigma_star: Any) -> tuple[float, float]:
    """``(r, sigma_star)`` of a singular-value band [σ* − r, σ* + r] (spectral paper §4, eq. 4), both
    numbers >= 0 with r <= σ* so that every singular value stays >= 0; ValueError otherwise."""
    r, sigma_star = check_nonnegative("r", r), check_nonnegative("sigma_star", sigma_star)
    if r > sigma_star:
        raise ValueError(f"r must be <= sigma_star so that the singular values "
                         f"[sigma_star - r, sigma_star + r] stay >= 0; got r={r!r}, sigma_star={sigma_star!r}")
    return r, sigma_star


def project_time_major(x: Tensor, projection: nn.Linear) -> Tensor:
    """``projection`` applied to every step of a batch-first x, time-major (T, B, out).

    One ``addmm`` on (T*B, in) rows with a row-major copy of W^T: autograd
    then forms dL/dW as x^T (dL/du), (in, T*B) x (T*B, out), the fast layout
    for the small input sizes of these tasks (a batched matmul on the
    transposed view, what ``nn.Linear`` does, is several times slower on CPU).
    """
    batch, steps, features = x.shape
    rows = x.transpose(0, 1).reshape(steps * batch, features)  # (T*B, in)
    weight_t = projection.weight.t().contiguous()
    u = rows @ weight_t if projection.bias is None else torch.addmm(projection.bias, rows, weight_t)
    return u.view(steps, batch, -1)


class RecurrentCell(nn.Module):
    """Base class of every cell in :mod:`stability.cells`.

    Subclasses set ``state_size`` (default ``hidden_size``), ``output_size``
    (features per step in ``outputs``; default ``hidden_size``) and the class
    attribute ``complex_state`` (complex hidden state, e.g. KRU) before
    calling :meth:`_init_initial_state`, and implement :meth:`_prepare` and
    :meth:`_step`.
    """

    complex_state = False
    # What describe() shows of every cell's options (subclasses add theirs; merged along the MRO).
    option_help = {
        "h0": "initial hidden state: zero, learned (a trainable vector), or noisy: h0 ~ N(0, sigma^2 I) "
              "while training, zero at evaluation (MASO paper §5.1, Thm. 3)",
        "h0_noise_std": "sigma of the noisy h0; the noise penalises ‖dL/dh0‖ (MASO paper §5.2)",
    }
    option_choices = {"h0": H0_MODES}
    option_ranges = {"h0_noise_std": (0.0, None)}
    # What a device must have to train this cell that not every device has ({dtype or op name: what
    # uses it}; stability.core.devices, Note [Device facts]): preflight refuses a run on a device that
    # lacks one, in one line naming the op.  Float32 arithmetic, and svd/eig/matrix_exp (run on the
    # CPU where a device has no kernel for them: devices.run_with_kernel), are not listed.
    device_needs: dict = {}
    # The trainer gives recurrent_parameters() this multiple of the learning rate (expRNN's authors
    # train the skew-symmetric parameter at lr / 10); cells set it from an option where they have one.
    recurrent_lr_scale = 1.0

    def __init__(self, input_size: int, hidden_size: int, *, h0: str = "zero", h0_noise_std: float = 0.1):
        super().__init__()
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.h0_mode = check_choice("h0", h0, H0_MODES)
        self.h0_noise_std = check_nonnegative("h0_noise_std", h0_noise_std)
        self.impl = "auto"
        self.state_size = self.hidden_size
        self.output_size = self.hidden_size

    def _init_initial_state(self) -> None:
        """Create the learned h0 once ``state_size`` is final. A complex state's is kept as real pairs
        (``(state_size, 2)``, [Re, Im] as ``torch.view_as_real`` lays them out): ``Module.to(dtype)``,
        which the Trainer calls with the run's real dtype, would otherwise cast a complex parameter to a
        real one and drop its imaginary part for good (urnn silently, kru with a warning)."""
        if self.h0_mode == "learned":
            shape = (self.state_size, 2) if self.complex_state else (self.state_size,)
            self.h0_learned = nn.Parameter(torch.zeros(shape))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "h0_learned"  # a checkpoint from before h0 was kept as real pairs: complex (state_size,)
        if self.complex_state and key in state_dict and state_dict[key].is_complex():
            state_dict[key] = torch.view_as_real(state_dict[key]).clone()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # ------------------------------------------------------------------ state
    def initial_state(self, batch_size: int, *, dtype: torch.dtype | None = None,
                      device: torch.device | None = None) -> Tensor:
        """h0 of shape (batch_size, state_size) following the cell's ``h0`` option."""
        reference = next(self.parameters())
        dtype = dtype or reference.dtype
        device = device or reference.device
        if self.complex_state and not dtype.is_complex:
            dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        if self.h0_mode == "learned":
            if self.complex_state:
                real = torch.float64 if dtype == torch.complex128 else torch.float32
                return torch.view_as_complex(self.h0_learned.to(real)).expand(batch_size, -1)
            return self.h0_learned.to(dtype).expand(batch_size, -1)
        if self.h0_mode == "noisy" and self.training and self.h0_noise_std > 0:
            return torch.randn(batch_size, self.state_size, dtype=dtype, device=device) * self.h0_noise_std
        return torch.zeros(batch_size, self.state_size, dtype=dtype, device=device)

    # ---------------------------------------------------------------- forward
    def _keeps_backward(self) -> bool:
        """The ``train`` flag of PyTorch's fused RNN kernels (``torch.lstm``, ``torch.gru``,
        ``torch.rnn_tanh``/``rnn_relu``): whether the kernel keeps what its backward needs.  cuDNN's
        backward refuses to run after a forward with ``train=False`` ("cudnn RNN backward can only
        be called in training mode"), and the float64 probes differentiate a model in eval mode
        (‖∂L/∂h0‖, MASO §5.1), so the flag follows autograd, not ``self.training``; with dropout 0
        it changes nothing else."""
        return self.training or torch.is_grad_enabled()

    def forward(self, x: Tensor, h0: Tensor | None = None, state_probe: Tensor | None = None):
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(
                f"expected input of shape (batch, time, {self.input_size}); got {tuple(x.shape)}")
        if x.shape[1] == 0:
            raise ValueError("expected at least one time step; got a sequence of length 0")
        if h0 is None:
            h0 = self.initial_state(x.shape[0], dtype=x.dtype, device=x.device)
        impl = check_choice("impl", self.impl, IMPLS)
        if state_probe is not None or impl == "loop":
            return self._forward_loop(x, h0, state_probe)
        return self._forward_fast(x, h0, impl)

    def _forward_loop(self, x: Tensor, h0: Tensor, state_probe: Tensor | None):
        """Reference path: one autograd step at a time (probes, tests, exotic cells)."""
        with torch.nn.utils.parametrize.cached():
            context = self._prepare(x)
            steps = context["inputs"].unbind(0)  # time-major
            probes = state_probe.unbind(1) if state_probe is not None else [None] * len(steps)
            h = h0
            outputs = []
            for u_t, e_t in zip(steps, probes):
                h = self._step(u_t, h, context)
                if e_t is not None:
                    h = h + e_t
                outputs.append(self._emit(h))
        return torch.stack(outputs, dim=1), h

    def _forward_fast(self, x: Tensor, h0: Tensor, impl: str):
        """Fused path; cells without one fall back to the loop."""
        return self._forward_loop(x, h0, None)

    def _prepare(self, x: Tensor) -> dict:
        """Everything that does not depend on the recursion, computed once.

        Must contain ``"inputs"``: the projected inputs, time-major (T, B, *).
        """
        raise NotImplementedError

    def _step(self, u_t: Tensor, h: Tensor, context: dict) -> Tensor:
        raise NotImplementedError

    def _emit(self, h: Tensor) -> Tensor:
        """The per-step output features read from the state."""
        return h

    # ------------------------------------------------------------ diagnostics
    def recurrent_matrix(self) -> Tensor:
        raise NotImplementedError

    def gate_values(self) -> dict[str, float]:
        return {}

    def penalty(self) -> Tensor:
        reference = next(self.parameters())
        return torch.zeros((), dtype=reference.real.dtype, device=reference.device)

    def recurrent_parameter_count(self) -> int:
        """Real numbers in the parameters that build the transition matrix."""
        raise NotImplementedError

    def recurrent_parameters(self) -> list[nn.Parameter]:
        """The parameters the transition matrix is built from: ``weight_hh`` itself, or what its
        parametrization stores (``parametrizations.weight_hh.original``).  Cells whose W is
        built from other tensors override this."""
        return [p for name, p in self.named_parameters() if "weight_hh" in name]

    def after_optimizer_step(self) -> None:
        """Called by the trainer, under ``torch.no_grad()``, after every optimizer step.

        A cell whose authors re-project the free parameters after each update
        (e.g. renormalising Householder vectors) does it here; the default does nothing.
        """

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}, h0={self.h0_mode!r}"
