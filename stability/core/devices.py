"""Which device a run trains on, what that device can do, and how it is described.

    resolve_device("auto")              # $STABILITY_DEVICE if set, else cuda, then mps, then cpu
    describe_device(device)             # "cuda (NVIDIA H100)", "mps (Apple GPU)", "cpu (4 threads)"
    device_facts(device)                # its dtypes, kernels, RNG and float64 speed: Note [Device facts]
    reading_device(device)              # where the float64 readings run: the device, or the CPU
    kernel_device("matrix_exp", device) # where an op runs: the device where it has a kernel, else the CPU
    run_with_kernel("svd", torch.linalg.svdvals, w)   # there
    dtype_problem("mps", "float64")     # one line saying why a run cannot train in that dtype there
    rng_state(device), set_rng_state(device, state), synchronize(device)
    worker_environment()                # what a background worker's environment needs for the devices here

The worker's thread policy (how many cores a background run may use) is
:mod:`stability.workers.threads`.

Choosing the device
-------------------
``train.device = "auto"`` takes the operator's choice ``$STABILITY_DEVICE``
(``cpu``, ``cuda`` or ``mps``) when it is set, else the best device present
(cuda, then mps, then cpu).  A forced device in a config always wins.  The test
suite sets ``STABILITY_DEVICE=cpu`` for the whole session (``tests/conftest.py``),
subprocesses included, so a GPU machine or a Mac runs the suite on the CPU; the
device smoke tests name their devices.

Note [Device facts]
-------------------
What the installed torch (2.13) can do on each device type, read from its own
sources: the dispatch keys in ``torchgen/packaged/ATen/native/native_functions.yaml``
(an op with no ``MPS`` key and no composite implementation has no MPS kernel),
``aten/src/ATen/mps/MPSFallback.mm`` (the CPU fallback) and the MPS checks of
complex support (``supportsComplex()``: macOS 14 or newer).

==============  ==============================  ==========================================
                cpu, cuda                       mps (Apple GPU)
==============  ==============================  ==========================================
float64         yes; on cuda at full rate only  none: "Cannot convert a MPS Tensor to float64
                on compute capability 6.0, 7.0,  dtype as the MPS framework doesn't support
                8.0, 9.0, 10.0 (data-centre      float64"
                cards), 1/32-1/64 elsewhere
complex64       yes                             macOS 14 or newer (polar, view_as_complex,
                                                complex products, fft)
complex128      yes                             none
svd             yes                             no kernel (``_linalg_svd``): ``linalg_svd``
                                                always falls back to the CPU; ``svdvals`` only
                                                with PYTORCH_ENABLE_MPS_FALLBACK=1
eig             yes                             no kernel (``linalg_eig``, ``_linalg_eigvals``)
matrix_exp      yes                             no kernel (``linalg_matrix_exp``)
fft             yes                             yes (``_fft_c2c``/``r2c``/``c2r``), complex64
RNG state       torch / torch.cuda              torch.mps.get_rng_state / set_rng_state
                get/set_rng_state
==============  ==============================  ==========================================

``PYTORCH_ENABLE_MPS_FALLBACK=1``, read once when torch loads, makes every aten op
without an MPS kernel run on the CPU (its tensors copied there and back, with a
warning) instead of raising NotImplementedError: of what the cells and readings
use, ``linalg_matrix_exp``, ``_linalg_svd`` (``svdvals``), ``linalg_eig`` and
``_linalg_eigvals``, and whatever a plug-in cell uses that MPS lacks.  It cannot
help with a dtype MPS lacks (float64, complex128; complex64 before macOS 14), and
it must be set before torch loads, so :func:`worker_environment` sets it for
background workers on a machine with MPS; a CLI run in the foreground or the
Streamlit server has whatever the operator set.  The library does not rely on
it: the float64 readings run on a CPU copy (:func:`reading_device`; the
stable norms of every log step cross to the host in their own dtype where the
device has no float64 at all, and stay on a GPU that is merely slow at it, as
the step window's rows do: ``stability.training.window``),
``matrix_exp`` (expRNN) and ``svdvals`` (mlp's dense layers) run on the CPU where
the device has no kernel (:func:`run_with_kernel`), the plane rotations of
VPRNN/SGORNN use real arithmetic where there is no complex64
(``stability.parametrizations.rotations``), and every other op a training step
of a registered cell runs has an MPS kernel (``tests/test_devices_simulated.py``
checks this against the dispatch table).  A cell that still needs what a device
lacks (complex64 for KRU and uRNN on macOS 13) is refused before its run is
stored, in one line naming the op (:func:`missing_needs`, the cell's
``device_needs``, ``stability.admission.preflight``).

Note [On the host]
------------------
``with on_host():`` marks work that a device without float64 does on the host
(the CPU) rather than on itself: the float64 readings' copy, a kernel routed to
the CPU.  In a real run it does nothing.  The simulated device of
:mod:`stability.core.simulated_device`, a CPU that behaves as MPS does, refuses
float64 everywhere except inside it; that is how the test suite proves on the CPU
that a Mac's training step never makes a float64 tensor on the device.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
from dataclasses import dataclass, field, replace

import torch

from .errors import ConfigError

DEVICE_ENV = "STABILITY_DEVICE"
DEVICE_CHOICES = ("cpu", "cuda", "mps")
# Compute capabilities whose float64 runs at full rate (half the float32 rate): P100, V100, A100, H100, B200.
FULL_RATE_FLOAT64 = ((6, 0), (7, 0), (8, 0), (9, 0), (10, 0))
OPS = ("svd", "eig", "matrix_exp", "fft")
MPS_FALLBACK_ENV = "PYTORCH_ENABLE_MPS_FALLBACK"
NO_FLOAT64 = "the MPS framework has no float64 (Apple GPUs have no double precision)"


@dataclass(frozen=True)
class DeviceFacts:
    """What one device can do (Note [Device facts]).

    ``dtypes``: the floating and complex dtypes its tensors can hold; ``kernels``: those of
    :data:`OPS` it runs itself; ``float64_slow``: float64 runs at a small fraction of float32's
    rate; ``lacking``: why, for a dtype or op it lacks (one phrase).
    """

    name: str
    dtypes: frozenset
    kernels: frozenset
    float64_slow: bool = False
    lacking: dict = field(default_factory=dict)
    simulated: bool = False

    def has(self, need) -> bool:
        """Whether the device has ``need``: a dtype, or the name of a dtype or of an op in :data:`OPS`."""
        if isinstance(need, torch.dtype):
            return need in self.dtypes
        if need in OPS:
            return need in self.kernels
        return getattr(torch, need) in self.dtypes

    @property
    def float64_fast(self) -> bool:
        """float64 here, and at full rate."""
        return torch.float64 in self.dtypes and not self.float64_slow

    def why_not(self, need) -> str:
        """One phrase: why the device lacks ``need``."""
        key = str(need).removeprefix("torch.")
        return self.lacking.get(key, f"{self.name} has no {key}")


ALL_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64,
                        torch.complex64, torch.complex128})


def _cpu_facts() -> DeviceFacts:
    return DeviceFacts("cpu", ALL_DTYPES, frozenset(OPS))


def _cuda_facts(device: torch.device) -> DeviceFacts:
    """Also where this machine has no CUDA (a config naming cuda is judged by these).  The float64
    speed is known once this process uses CUDA (asking for the card's compute capability earlier
    would start CUDA here: a context held for good, :mod:`stability.core.gpus` says why not);
    until then it is taken as fast, which only the readings' placement asks about, in a process
    that trains on the GPU already."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return DeviceFacts("cuda", ALL_DTYPES, frozenset(OPS))
    index = device.index if device.index is not None else torch.cuda.current_device()
    return DeviceFacts("cuda", ALL_DTYPES, frozenset(OPS), float64_slow=_cuda_float64_slow(index))


@functools.lru_cache(maxsize=None)
def _cuda_float64_slow(index: int) -> bool:
    return not float64_full_rate(torch.cuda.get_device_capability(index))


def float64_full_rate(capability: tuple[int, int]) -> bool:
    """Whether a CUDA card of this compute capability runs float64 at full rate (half float32's):
    the data-centre chips (:data:`FULL_RATE_FLOAT64`); the others run it at 1/32 to 1/64."""
    return tuple(capability) in FULL_RATE_FLOAT64


def mps_facts(complex64: bool) -> DeviceFacts:
    """MPS's facts (Note [Device facts]); ``complex64``: macOS 14 or newer."""
    dtypes = {torch.float16, torch.bfloat16, torch.float32} | ({torch.complex64} if complex64 else set())
    lacking = {"float64": NO_FLOAT64, "complex128": "MPS has no complex128",
               "svd": "MPS has no SVD kernel", "eig": "MPS has no eigenvalue kernel",
               "matrix_exp": "MPS has no matrix exponential kernel"}
    if not complex64:
        lacking["complex64"] = lacking["fft"] = "MPS has complex numbers from macOS 14 only"
    return DeviceFacts("mps", frozenset(dtypes), frozenset({"fft"} if complex64 else ()), lacking=lacking)


_simulated: dict[str, DeviceFacts] = {}  # device type -> facts, while a simulation runs
_host = threading.local()  # .depth: how many on_host() blocks this thread is inside


def _real_facts(device: torch.device) -> DeviceFacts:
    if device.type == "cuda":
        return _cuda_facts(device)
    return _other_facts(device)


@functools.lru_cache(maxsize=None)
def _other_facts(device: torch.device) -> DeviceFacts:
    if device.type == "mps":  # also where this machine has none (a config naming mps is judged by these)
        return mps_facts(complex64=_has_mps() and torch.backends.mps.is_macos_or_newer(14, 0))
    return replace(_cpu_facts(), name=device.type)


def device_facts(device: torch.device | str) -> DeviceFacts:
    """What ``device`` can do (Note [Device facts]); a simulated device's facts while it runs."""
    device = torch.device(device)
    if device.type in _simulated:
        return _simulated[device.type]
    return _real_facts(device)


def simulate(device_type: str, facts: DeviceFacts | None) -> None:
    """Make :func:`device_facts` report ``facts`` for ``device_type`` (None: the real facts again).
    For :mod:`stability.core.simulated_device` only."""
    if facts is None:
        _simulated.pop(device_type, None)
    else:
        _simulated[device_type] = facts


@contextlib.contextmanager
def on_host():
    """Work a device without float64 does on the host (Note [On the host]); nothing in a real run."""
    _host.depth = getattr(_host, "depth", 0) + 1
    try:
        yield
    finally:
        _host.depth -= 1


def is_on_host() -> bool:
    """Whether the code running now, in this thread, is inside :func:`on_host`."""
    return getattr(_host, "depth", 0) > 0


def reading_device(device: torch.device) -> torch.device:
    """Where the float64 readings of a run on ``device`` run: the device itself where it has
    float64 at full rate, else the CPU (a Mac's GPU has none; a consumer card runs it at 1/32)."""
    return device if device_facts(device).float64_fast else torch.device("cpu")


def kernel_device(op: str, device: torch.device) -> torch.device:
    """Where ``op`` (one of :data:`OPS`) runs for a tensor on ``device``: there if it has a kernel,
    else the CPU (the caller moves the tensor, and its result back, inside :func:`on_host`)."""
    return device if device_facts(device).has(op) else torch.device("cpu")


def run_with_kernel(op: str, function, tensor: torch.Tensor) -> torch.Tensor:
    """``function(tensor)`` (one of :data:`OPS`, e.g. ``torch.linalg.matrix_exp`` for ``"matrix_exp"``)
    where it has a kernel: on ``tensor``'s device, else on a CPU copy whose result comes back to
    that device (autograd follows both moves)."""
    if device_facts(tensor.device).has(op):
        return function(tensor)
    with on_host():
        return function(tensor.to(kernel_device(op, tensor.device))).to(tensor.device)


def dtype_problem(device: torch.device | str, dtype: str) -> str | None:
    """One line saying why a run cannot train in ``dtype`` (a name) on ``device``; None if it can.
    ``device`` may be a name: ``"mps"`` never has float64, whether or not this machine has MPS."""
    facts = device_facts(device)
    if facts.has(dtype):
        return None
    return f"dtype {dtype} cannot train on {facts.name}: {facts.why_not(dtype)}; use dtype float32 or device cpu"


def check_dtype(device: torch.device | str, dtype: str) -> None:
    """:func:`dtype_problem` as a ConfigError."""
    problem = dtype_problem(device, dtype)
    if problem:
        raise ConfigError(problem)


def missing_needs(device: torch.device, needs) -> list[tuple[str, str]]:
    """``(need, why)`` for each of ``needs`` (dtype or op names) that ``device`` lacks."""
    facts = device_facts(device)
    return [(need, facts.why_not(need)) for need in needs if not facts.has(need)]


def rng_state(device: torch.device) -> torch.Tensor | None:
    """The random state of ``device``'s own generator (None for the CPU: ``torch.get_rng_state()``)."""
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    if device.type == "mps":
        return torch.mps.get_rng_state()
    return None


def set_rng_state(device: torch.device, state: torch.Tensor) -> None:
    """Restore what :func:`rng_state` returned."""
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    elif device.type == "mps":
        torch.mps.set_rng_state(state)


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a GPU runs asynchronously: time a step only after this)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _has_mps() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def worker_environment() -> dict[str, str]:
    """Variables a background worker needs for the devices of this machine: with MPS,
    ``PYTORCH_ENABLE_MPS_FALLBACK=1`` (Note [Device facts]; it must be set before torch loads)."""
    return {MPS_FALLBACK_ENV: "1"} if _has_mps() else {}


def resolve_device(choice: str) -> torch.device:
    """``auto``: ``$STABILITY_DEVICE`` when set, else cuda, then mps, then cpu; a device that is
    missing is a ConfigError (one line)."""
    source = "device"
    if choice == "auto" and os.environ.get(DEVICE_ENV):
        choice, source = os.environ[DEVICE_ENV].strip().lower(), DEVICE_ENV
        if choice not in (*DEVICE_CHOICES, "auto"):
            raise ConfigError(f"{DEVICE_ENV} must be one of {', '.join(DEVICE_CHOICES)} or auto; "
                              f"got {os.environ[DEVICE_ENV]!r}")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if _has_mps() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{source} 'cuda' was asked for but no CUDA GPU is available; use auto or cpu")
    if choice == "mps" and not _has_mps():
        raise ConfigError(f"{source} 'mps' was asked for but MPS is not available; use auto or cpu")
    return torch.device(choice)


def describe_device(device: torch.device) -> str:
    """``"cuda (NVIDIA H100)"``, ``"mps (Apple GPU)"``, ``"cpu (4 threads)"``."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "mps":
        return "mps (Apple GPU)"
    if device.type == "cpu":
        described = f"cpu ({torch.get_num_threads()} threads)"
        return f"{described}, simulated without float64" if device_facts(device).simulated else described
    return device.type
