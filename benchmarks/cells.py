"""Training-step speed and memory of every cell against PyTorch's own kernels.

    python benchmarks/cells.py                 # CPU, T = 100 784 1000
    python benchmarks/cells.py --device cuda   # the same table against cuDNN (full float32 for all:
                                               # stability.core.precision); one line and exit 1 without CUDA
    python benchmarks/cells.py --seq-lens 100 --reps 3 --cells spectral lstm
    python benchmarks/cells.py --device cuda --graphs   # also each step captured once as a CUDA graph

One training step = forward over the whole sequence + a linear readout of
the last step + backward.  Every configuration is timed in the same process,
round-robin (one rep of each in turn), so drift on a busy machine hits all
of them alike; each rep is a model's second consecutive step, so that the
allocator state left by the previous model does not bias it.  The table
shows the median ms per step and the median of the per-round ratios (with
their quartiles) to the reference named in its row: ``nn.RNN(relu)`` of the
same size, or ``nn.LSTM`` for the LSTMs.

Memory: on CUDA the peak allocated during a step; on CPU the bytes autograd
keeps for backward (saved tensors), which is what grows with T.

``--graphs`` (CUDA only) adds a row "NAME graphed" for every cell: the same
forward + backward captured once with ``torch.cuda.graph`` and replayed, so
its kernels are launched by the GPU's graph rather than one by one from
Python.  Its ratio to the plain row measures how much of a step is launch
overhead, the cost of a cell that runs its own loop over time; a cell whose
step cannot be captured (a host sync inside it) is named with the reason.

``spectral-naive`` is the straightforward Spectral-RNN that applies its
m1 + m2 Householder reflectors to the hidden state at every time step
(spectral paper §4.1, Algorithm "Hprod"), written here as the reference the
issue asks the built-matrix implementation to beat by 10x.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stability import cells  # noqa: E402
from stability.core.devices import synchronize  # noqa: E402
from stability.core.precision import apply_fp32_precision, describe_precision  # noqa: E402

INPUT = 2
# name -> (cell options, reference, target ratio at T >= 784, target at T = 100)
CONFIGS = {
    "rnn(leaky_relu)": ("rnn", {"nonlinearity": "leaky_relu"}, "nn.RNN", 1.0, 1.25),
    "spectral": ("spectral", {"m1": 16, "m2": 16}, "nn.RNN", 1.0, 1.25),
    "orthogonal": ("orthogonal", {}, "nn.RNN", 1.0, 1.25),
    "vprnn": ("vprnn", {}, "nn.RNN", 1.0, 1.25),
    "fastrnn": ("fastrnn", {}, "nn.RNN", 1.25, 1.25),
    "sgornn": ("sgornn", {}, "nn.RNN", 1.25, 1.25),
    "lstm": ("lstm", {}, "nn.LSTM", 1.1, 1.1),
    "kru": ("kru", {}, "nn.RNN", 3.0, 3.0),
    "gru": ("gru", {}, None, None, None),
    "irnn": ("irnn", {}, "nn.RNN", None, None),
    "kru_lstm": ("kru_lstm", {}, "nn.LSTM", None, None),
    "urnn": ("urnn", {}, "nn.RNN", None, None),
    "exponential": ("exponential", {}, "nn.RNN", None, None),
}


class TorchRecurrent(nn.Module):
    """nn.RNN / nn.LSTM behind the cell call convention."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        self.output_size = module.hidden_size

    def forward(self, x):
        outputs, _ = self.module(x)
        return outputs, None


class NaiveSpectralRNN(nn.Module):
    """Spectral-RNN applying each reflector to h at every step (no built W)."""

    def __init__(self, input_size: int, hidden_size: int, m1: int = 16, m2: int = 16, r: float = 0.01):
        super().__init__()
        n = hidden_size
        self.input_proj = nn.Linear(input_size, n)
        self.u = nn.ParameterList([nn.Parameter(torch.randn(k)) for k in range(n, n - m1, -1)])
        self.v = nn.ParameterList([nn.Parameter(torch.randn(k)) for k in range(n, n - m2, -1)])
        self.sigma_hat = nn.Parameter(torch.zeros(n))
        self.r = r
        self.output_size = n

    @staticmethod
    def _reflect(h, u):
        # H_k(u) h = h - 2 (u^T h_tail / u^T u) u on the last k coordinates (eq. 1).
        k = u.shape[0]
        tail = h[:, -k:]
        tail = tail - 2 * (tail @ u)[:, None] * u / (u @ u)
        return torch.cat([h[:, :-k], tail], dim=1)

    def forward(self, x):
        sigma = 2 * self.r * (torch.sigmoid(self.sigma_hat) - 0.5) + 1.0
        u_all = self.input_proj(x.transpose(0, 1))
        h = torch.zeros(x.shape[0], self.output_size, dtype=x.dtype, device=x.device)
        outputs = []
        for u_t in u_all.unbind(0):
            # W h = H_n(u_n)..H_k1(u_k1) diag(sigma) H_k2(v_k2)..H_n(v_n) h, rightmost first.
            w_h = h
            for v in self.v:  # lengths n, n-1, ..., k2
                w_h = self._reflect(w_h, v)
            w_h = w_h * sigma
            for u in reversed(self.u):  # lengths k1, ..., n
                w_h = self._reflect(w_h, u)
            h = torch.nn.functional.leaky_relu(u_t + w_h, 0.01)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


def build(name: str, hidden: int, device: torch.device) -> nn.Module:
    if name == "nn.RNN":
        model = TorchRecurrent(nn.RNN(INPUT, hidden, nonlinearity="relu", batch_first=True))
    elif name == "nn.LSTM":
        model = TorchRecurrent(nn.LSTM(INPUT, hidden, batch_first=True))
    elif name == "spectral-naive":
        model = NaiveSpectralRNN(INPUT, hidden)
    else:
        cell_name, options = CONFIGS[name][:2]
        model = cells.build(cell_name, INPUT, hidden, **options)
    return model.to(device)


def training_step(model, readout, x, y):
    outputs, _ = model(x)
    loss = ((readout(outputs[:, -1]) - y) ** 2).mean()
    if hasattr(model, "penalty"):
        loss = loss + model.penalty()
    loss.backward()


def saved_bytes(model, readout, x, y) -> int:
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        outputs, _ = model(x)
        loss = ((readout(outputs[:, -1]) - y) ** 2).mean()
    loss.backward()
    return total


def graphed(model, readout, x, y):
    """The training step captured as one CUDA graph; returns its replay.

    The PyTorch pattern for whole-step capture: a few eager steps on a side
    stream first (cuDNN and cuBLAS pick their algorithms and workspaces), then
    one capture whose gradients live in the graph's own memory pool."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            readout.zero_grad(set_to_none=True)
            training_step(model, readout, x, y)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    model.zero_grad(set_to_none=True)
    readout.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        training_step(model, readout, x, y)
    return graph.replay


def measure(names, seq_len, batch, hidden, reps, device, graphs=False):
    torch.manual_seed(0)
    x = torch.randn(batch, seq_len, INPUT, device=device)
    y = torch.randn(batch, 1, device=device)
    models = {}
    for name in names:
        try:
            model = build(name, hidden, device)
        except (ImportError, AttributeError, KeyError) as error:  # a cell not written yet
            print(f"  skipping {name}: {error}", file=sys.stderr)
            continue
        readout = nn.Linear(model.output_size, 1).to(device)
        models[name] = (model, readout, functools.partial(training_step, model, readout, x, y))
        if graphs and name in CONFIGS:
            twin = build(name, hidden, device)
            twin_readout = nn.Linear(twin.output_size, 1).to(device)
            try:
                models[f"{name} graphed"] = (twin, twin_readout, graphed(twin, twin_readout, x, y))
            except Exception as error:  # noqa: BLE001 - a capture's failure is the finding
                print(f"  {name}: not capturable as a CUDA graph: {str(error).splitlines()[0][:160]}",
                      file=sys.stderr)
    sync = functools.partial(synchronize, device)  # cuda and mps queue their work
    times = {name: [] for name in models}
    for rep in range(reps + 1):  # rep 0 warms up
        for name, (model, readout, step) in models.items():
            # One untimed step first: the allocator is left in whatever state the
            # previous model's step put it (hundreds of MB freed or cached), and a
            # model's own steady state is what a training loop sees.
            for timed in (False, True):
                if not name.endswith(" graphed"):  # a graph's gradients stay where it captured them
                    model.zero_grad(set_to_none=True)
                sync()
                start = time.perf_counter()
                step()
                sync()
                if rep and timed:
                    times[name].append((time.perf_counter() - start) * 1e3)
    memory = {}
    for name, (model, readout, step) in models.items():
        if device.type == "cuda":
            # A graph's memory pool was taken at its capture: a replay allocates nothing, so a
            # "graphed" row's peak reads near 0 and its memory is the plain row's.
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            step()
            memory[name] = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
        else:
            memory[name] = saved_bytes(model, readout, x, y) / 2 ** 20
    return times, memory


def paired_ratio(times: list[float], reference: list[float]) -> tuple[float, float, float]:
    """Median and quartiles of per-round ratios: each rep is divided by the
    reference's rep of the same round, so slow drift of the machine cancels."""
    ratios = sorted(a / b for a, b in zip(times, reference))
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return statistics.median(ratios), quartiles[0], quartiles[2]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[100, 784, 1000])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cells", nargs="+", default=list(CONFIGS))
    parser.add_argument("--no-naive", action="store_true", help="skip the slow spectral-naive reference")
    parser.add_argument("--graphs", action="store_true",
                        help="CUDA: also time each cell's step captured as one CUDA graph")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    unknown = sorted(set(args.cells) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown cells {unknown}; choose from {', '.join(CONFIGS)}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"benchmarks/cells.py: --device cuda, but this torch ({torch.__version__}) sees no CUDA GPU; "
                 "run without --device for the CPU table")
    if args.graphs and device.type != "cuda":
        parser.error("--graphs needs --device cuda (CUDA graphs exist on NVIDIA GPUs only)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        sys.exit(f"benchmarks/cells.py: --device mps, but this torch ({torch.__version__}) sees no Apple GPU; "
                 "run without --device for the CPU table")
    apply_fp32_precision()  # cuDNN's cells and the scan's in the same float32, as the Trainer runs them
    names = ["nn.RNN", "nn.LSTM"] + list(args.cells) + ([] if args.no_naive else ["spectral-naive"])
    kernel = f"cuDNN, {describe_precision()}" if device.type == "cuda" else f"ATen CPU, {args.threads} threads"
    print(f"# forward+backward per training step: hidden {args.hidden}, batch {args.batch}, "
          f"input {INPUT}, {args.reps} reps (median), torch {torch.__version__}, {kernel}")
    memory_label = "peak MiB" if device.type == "cuda" else "saved MiB"
    print(f"| T | model | ms/step | ratio (quartiles) | reference | target | met | {memory_label} |")
    print("|---|---|---|---|---|---|---|---|")
    for seq_len in args.seq_lens:
        times, memory = measure(names, seq_len, args.batch, args.hidden, args.reps, device, args.graphs)
        for name in times:
            if name in CONFIGS:
                reference, long_target, short_target = CONFIGS[name][2:]
            elif name.endswith(" graphed"):  # against cuDNN's kernel, as the plain row
                reference, long_target, short_target = CONFIGS[name.removesuffix(" graphed")][2], None, None
            elif name == "spectral-naive":
                reference, long_target, short_target = "spectral", None, None
            else:
                reference, long_target, short_target = None, None, None
            ratio_text = target_text = met = ""
            if reference in times:
                ratio, low, high = paired_ratio(times[name], times[reference])
                if name == "spectral-naive":
                    ratio_text, target_text = f"{ratio:.1f}x slower", ">= 10x slower"
                    met = "yes" if ratio >= 10 else "NO"
                else:
                    ratio_text = f"{ratio:.2f} ({low:.2f}-{high:.2f})"
                    target = long_target if seq_len >= 784 else short_target
                    if target:
                        target_text, met = f"<= {target:.2f}", "yes" if ratio <= target else "NO"
            print(f"| {seq_len} | {name} | {statistics.median(times[name]):.1f} | {ratio_text} | "
                  f"{reference or ''} | {target_text} | {met} | {memory[name]:.1f} |", flush=True)

if __name__ == "__main__":
    main()
