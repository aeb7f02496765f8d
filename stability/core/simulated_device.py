"""A CPU that behaves as a device without float64 does (an Apple GPU under MPS), so that a machine
without a Mac proves a Mac's path.

    with simulated_device():                      # the CPU, as MPS on macOS 14 or newer
        train_run(config)                         # with train.device = "cpu" (or auto)
    with simulated_device(complex64=False): ...   # as MPS on macOS 13

While it runs, :func:`stability.core.devices.device_facts` says of the CPU what it says of MPS
(no float64, no complex128, no kernel for svd, eig or matrix_exp; complex64 as asked), and every
torch operation is checked as MPS would refuse it:

* an op that produces a float64 or complex128 tensor (complex64 too, as on macOS 13) raises the
  TypeError MPS raises ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't
  support float64"): on MPS such a tensor can only come into being so, so refusing every such
  output refuses every use;
* an op the device has no kernel for (``linalg_matrix_exp``, ``_linalg_svd``, ``linalg_eig``,
  ``_fft_*`` without complex64) raises NotImplementedError as MPS does without its CPU fallback;
  only in the forward pass: a backward op belongs to the forward op's device, and one that ran on
  the host has its backward there too.

Work marked :func:`stability.core.devices.on_host` (Note [On the host]: the float64 readings' copy,
a kernel routed to the CPU) is not checked: on a Mac it runs on the CPU.  What the simulation
cannot see: a copy between the device and the host is a CPU-to-CPU copy here, so the rule that a
device tensor crosses to the host in its own dtype and is widened there (MPS cannot copy into a
float64 tensor) is kept by the code (``ProbeBatch.sync``), not checked.
"""
from __future__ import annotations

import contextlib
from dataclasses import replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import devices

NO_FLOAT64_ERROR = ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
                    "Please use float32 instead.")
COMPLEX64_ERROR = "Trying to convert ComplexFloat to the MPS backend but it does not have support for that dtype."
CHECKED = (torch.float64, torch.complex128, torch.complex64)
KERNELS = {  # the aten ops of each of devices.OPS
    "svd": ("_linalg_svd", "linalg_svd"),
    "eig": ("linalg_eig", "_linalg_eigvals", "linalg_eigvals"),
    "matrix_exp": ("linalg_matrix_exp",),
    "fft": ("_fft_c2c", "_fft_r2c", "_fft_c2r"),
}


def simulated_facts(complex64: bool = True) -> devices.DeviceFacts:
    """The facts of MPS (Note [Device facts]), as the simulated CPU's."""
    return replace(devices.mps_facts(complex64), name="cpu (simulated without float64)", simulated=True)


class _AsMPS(TorchDispatchMode):
    """Raises as MPS would (see the module docstring), outside :func:`devices.on_host`."""

    def __init__(self, facts: devices.DeviceFacts):
        super().__init__()
        self.missing = {aten: op for op, names in KERNELS.items() if not facts.has(op) for aten in names}
        self.refused = tuple(dtype for dtype in CHECKED if not facts.has(dtype))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if devices.is_on_host():
            return func(*args, **(kwargs or {}))
        name = func._schema.name.split("::")[-1]
        if name in self.missing and torch._C._current_autograd_node() is None:
            raise NotImplementedError(f"The operator 'aten::{name}' is not currently implemented for the MPS "
                                      f"device (simulated: {self.missing[name]} has no kernel)")
        result = func(*args, **(kwargs or {}))
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        for output in outputs:
            if isinstance(output, torch.Tensor) and output.dtype in self.refused:
                error = COMPLEX64_ERROR if output.dtype == torch.complex64 else NO_FLOAT64_ERROR
                raise TypeError(f"{error} (simulated: aten::{name} made a {output.dtype} tensor)")
        return result


@contextlib.contextmanager
def simulated_device(complex64: bool = True):
    """The CPU as a device without float64 (as MPS: module docstring) until the block ends."""
    facts = simulated_facts(complex64)
    devices.simulate("cpu", facts)
    try:
        with _AsMPS(facts):
            yield facts
    finally:
        devices.simulate("cpu", None)
