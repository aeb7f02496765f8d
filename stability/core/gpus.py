"""Which GPUs this machine shows a process, and their memory, without starting CUDA here.

    visible_gpus()       # ["0", "1"]: CUDA_VISIBLE_DEVICES's entries where it is set, else every GPU listed
    gpu_memory()         # [GpuMemory("0", "NVIDIA H100 80GB HBM3", total, free), ...] of the visible GPUs
    list_gpus()          # every GPU of the machine, from ``nvidia-smi`` ([] where there is none)

Why not torch: ``torch.cuda.mem_get_info`` and ``torch.cuda.get_device_properties`` initialise
CUDA in the calling process and create a context on the GPU, a few hundred MB held for the
process's whole life.  The Streamlit server only schedules runs; a context there would be memory
taken from the workers for good.  (``torch.cuda.device_count()`` asks NVML first and creates no
context, but knows nothing of memory.)  ``nvidia-smi --query-gpu=...`` reads NVML in a process of
its own that ends at once, so nothing CUDA stays behind in this one.

Every function takes the facts it would otherwise query (``listed``, ``environ``), so the
scheduling and budget logic runs, and is tested, on a machine without a GPU: a list of
:class:`GpuMemory` stands for the machine's GPUs, ``CUDA_VISIBLE_DEVICES`` for what a process may see.

``CUDA_VISIBLE_DEVICES`` names GPUs by CUDA ordinal or by UUID (``GPU-...``, ``MIG-...``); an
ordinal is matched to ``nvidia-smi``'s index, which is the PCI bus order.  CUDA numbers GPUs
fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so on a machine mixing GPU models set
that, or name GPUs by UUID, for the two to agree (on identical GPUs they always do).
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
NVIDIA_SMI = ("nvidia-smi", "--query-gpu=index,uuid,name,memory.total,memory.free",
              "--format=csv,noheader,nounits")
MIB = 2**20


@dataclass(frozen=True)
class GpuMemory:
    """One GPU: ``id`` as ``CUDA_VISIBLE_DEVICES`` names it (its index, or UUID), its name, and
    its memory in bytes (``free``: what no process holds now)."""

    id: str
    name: str
    total: int
    free: int
    uuid: str = ""


def list_gpus(timeout: float = 10.0) -> list[GpuMemory]:
    """Every GPU ``nvidia-smi`` lists, in its index order; [] when there is no ``nvidia-smi``,
    it fails, or it prints something else than the query asked for."""
    try:
        done = subprocess.run(NVIDIA_SMI, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    gpus = []
    for line in done.stdout.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if not line.strip():
            continue
        try:
            index, uuid, name, total, free = fields
            gpus.append(GpuMemory(index, name, int(float(total) * MIB), int(float(free) * MIB), uuid))
        except ValueError:  # "[N/A]", "[Not Supported]" or another layout: no facts rather than wrong ones
            return []
    return gpus


def visible_gpus(environ=None, listed: list[GpuMemory] | None = None) -> list[str]:
    """The GPUs this process may hand to its workers, as ``CUDA_VISIBLE_DEVICES`` entries.

    Where the variable is set: its entries up to the first that cannot name a GPU (CUDA stops
    there too; ``""`` and ``-1`` hide every GPU).  Otherwise the index of every GPU in ``listed``
    (default: :func:`list_gpus`).
    """
    environ = os.environ if environ is None else environ
    text = environ.get(VISIBLE_ENV)
    if text is None:
        return [gpu.id for gpu in (list_gpus() if listed is None else listed)]
    entries = []
    for entry in (part.strip() for part in text.split(",")):
        if not _names_a_gpu(entry):
            break
        entries.append(entry)
    return entries


def gpu_memory(environ=None, listed: list[GpuMemory] | None = None) -> list[GpuMemory]:
    """The memory facts of the visible GPUs (:func:`visible_gpus`), each with ``id`` the entry that
    names it; a visible GPU ``listed`` does not know is left out (so [] means: unknown)."""
    listed = list_gpus() if listed is None else listed
    found = []
    for entry in visible_gpus(environ, listed):
        match = next((gpu for gpu in listed if entry == gpu.id or (gpu.uuid and gpu.uuid.startswith(entry))), None)
        if match is not None:
            found.append(GpuMemory(entry, match.name, match.total, match.free, match.uuid))
    return found


def parse_gpu_list(text: str) -> list[str]:
    """``"0,1"`` -> ``["0", "1"]``: GPUs as ``CUDA_VISIBLE_DEVICES`` names them (indices or UUIDs);
    ValueError (one line) for an entry that names none, or an empty list."""
    entries = [entry.strip() for entry in str(text).split(",") if entry.strip()]
    wrong = [entry for entry in entries if not _names_a_gpu(entry)]
    if wrong or not entries:
        raise ValueError(f"GPUs are listed as CUDA_VISIBLE_DEVICES names them, comma-separated indices or "
                         f"UUIDs (0,1 or GPU-...); got {text!r}")
    return entries


def _names_a_gpu(entry: str) -> bool:
    if entry.isdigit():
        return True
    return entry.startswith(("GPU-", "MIG-")) and len(entry) > 4
