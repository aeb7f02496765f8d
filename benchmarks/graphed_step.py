"""Steps per second of the training step captured as one CUDA graph (issue 32) against the same step eager and
a bare cuDNN loop of the same shape.

    python benchmarks/graphed_step.py                  # CUDA: the default Train run's shape (adding T 100,
                                                       # hidden 128, batch 64, Adam); one line, exit 0, without CUDA
    python benchmarks/graphed_step.py --device cpu --steps 3 --reps 1   # the eager rows on the CPU: a check
    python benchmarks/graphed_step.py --cells spectral kru --steps 100 --reps 5

Rows, each timed in the same process, round-robin (one rep of each in turn, so that drift on the machine hits
all of them alike), ``--steps`` steps a rep after a warm-up, ``torch.cuda.synchronize()`` on each side of a
timed rep:

* ``eager``: :class:`stability.training.graphed.StaticStep` never captured: the trainer's computation (forward,
  loss, penalty, backward, the gradient norms, the optimizer step, the cell's after-step, the window's row)
  launched kernel by kernel, with Adam in its capturable form (the form the graph needs, so that the two rows
  differ by the capture only);
* ``graphed``: the same StaticStep captured after its warm-up steps and replayed;
* ``nn.RNN (cuDNN)``, ``nn.LSTM (cuDNN)``: a bare PyTorch loop of the same shape: ``nn.RNN`` (tanh) or ``nn.LSTM``
  with a linear readout of the last step, the task's loss, backward, a plain ``torch.optim.Adam`` step;
* ``CPU, 1 thread`` (``--cpu-steps``): the eager StaticStep on the CPU with one thread, the issue's reference.

Every step copies its batch from the host (pinned, without waiting: ``batch_on``), the loops alike; the StaticStep
rows read their window once every ``log_every`` steps (one read per log step, as the trainer), the bare loops read
nothing. Not measured here: what a whole run adds around the step (evaluation, the probes, the SVDs, the store:
benchmarks/training.py; the whole default run graphed and eager through the Trainer, beside the same bare loop and
one CPU thread, is benchmarks/graphed_run.py's table). The goal (issue 32): graphed >= 0.8x the bare cuDNN nn.RNN loop and >= 5x one CPU thread.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stability import tasks  # noqa: E402
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig  # noqa: E402
from stability.core.devices import synchronize  # noqa: E402
from stability.core.precision import apply_fp32_precision, describe_precision  # noqa: E402
from stability.training import (WARMUP_STEPS, StaticStep, batch_on, build_model, capture_problem,  # noqa: E402
                                compact_batches)

CELLS = ["rnn", "lstm", "spectral", "sgornn", "kru"]
REFERENCES = {"nn.RNN (cuDNN)": nn.RNN, "nn.LSTM (cuDNN)": nn.LSTM}
GOAL_CUDNN, GOAL_CPU = 0.8, 5.0  # issue 32: graphed / bare nn.RNN loop, graphed / one CPU thread
BATCHES = 16  # drawn once and cycled: the host's cost of drawing examples is not the step's


def run_config(cell: str, args, device: str) -> RunConfig:
    """The default Train run (stability.config's defaults) at the sizes asked for."""
    return RunConfig(cell=CellConfig(cell, args.hidden), task=TaskConfig("adding", {"seq_len": args.seq_len}),
                     train=TrainConfig(batch_size=args.batch, device=device))


def build_task(config: RunConfig):
    """``config``'s task, seeded by its seed (as stability.training.build builds it)."""
    return tasks.build(config.task.name, seed=config.train.seed, **config.task.options)


class Static:
    """A StaticStep over cycled batches; ``run(n)`` trains n steps, reading its window at every log step."""

    def __init__(self, config: RunConfig, device: torch.device):
        torch.manual_seed(config.train.seed)
        self.task = build_task(config)
        self.model = build_model(config, self.task).to(device=device, dtype=torch.float32)
        self.static = StaticStep(self.model, self.task, config.train)
        stream = compact_batches(self.task, "train", config.train.batch_size)
        self.batches = itertools.cycle([next(stream) for _ in range(BATCHES)])
        self.log_every = config.train.resolved_log_every()
        self.step = 0

    def run(self, count: int) -> None:
        for _ in range(count):
            self.step += 1
            self.static.step(self.step, next(self.batches))
            if self.step % self.log_every == 0:  # the trainer's one read per log step
                self.static.window.read({"total_norm": self.static.total_norm})
                self.static.window.reset()

    def capture(self) -> None:
        self.run(WARMUP_STEPS - self.static.eager_steps)
        self.static.capture()


class Bare:
    """nn.RNN (tanh) or nn.LSTM, a linear readout of the last step, the task's loss, a plain Adam."""

    def __init__(self, config: RunConfig, kind: type, device: torch.device):
        torch.manual_seed(config.train.seed)
        self.task, self.device = build_task(config), device
        self.rnn = kind(self.task.input_size, config.cell.hidden_size, batch_first=True).to(device)
        self.readout = nn.Linear(config.cell.hidden_size, self.task.output_size).to(device)
        self.optimizer = torch.optim.Adam([*self.rnn.parameters(), *self.readout.parameters()], lr=config.train.lr)
        stream = compact_batches(self.task, "train", config.train.batch_size)
        self.batches = itertools.cycle([next(stream) for _ in range(BATCHES)])

    def run(self, count: int) -> None:
        for _ in range(count):
            x, y = batch_on(self.task, next(self.batches), self.device, torch.float32)
            outputs, _ = self.rnn(x)
            loss = self.task.loss(self.readout(outputs[:, -1]), y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()


def timed(runner, steps: int, device: torch.device) -> float:
    """Steps per second of ``steps`` steps of ``runner``, the device drained on each side."""
    synchronize(device)
    start = time.perf_counter()
    runner.run(steps)
    synchronize(device)
    return steps / (time.perf_counter() - start)


def paired(values: list[float], reference: list[float]) -> float:
    """The median of the per-round ratios (each rep against the reference's rep of the same round)."""
    return statistics.median(a / b for a, b in zip(values, reference))


def cpu_one_thread(cells: list[str], args) -> dict[str, float]:
    """Steps/s of each cell's eager StaticStep on the CPU with one thread (2 warm-up steps, then --cpu-steps)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        speeds = {}
        for cell in cells:
            runner = Static(run_config(cell, args, "cpu"), torch.device("cpu"))
            runner.run(2)
            speeds[cell] = timed(runner, args.cpu_steps, torch.device("cpu"))
        return speeds
    finally:
        torch.set_num_threads(threads)



def prepared_device(parser, args, script: str, cpu_rows: str) -> torch.device | None:
    """``args.device`` made ready for a table of captured steps: None (after one line saying so) where CUDA
    is asked for and absent; torch's CPU threads set on the CPU; every row in the Trainer's float32."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"{script}: no CUDA GPU (torch {torch.__version__}): nothing to capture; --device cpu times {cpu_rows}")
        return None
    if device.type not in ("cuda", "cpu"):
        parser.error("--device is cuda or cpu (CUDA graphs exist on NVIDIA GPUs only)")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="This instance was constructed with capturable=True")
    apply_fp32_precision()  # every row in the Trainer's float32
    return device


def main(argv=None) -> int:
    defaults = RunConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (the table); cpu: the eager rows only")
    parser.add_argument("--cells", nargs="+", default=CELLS)
    parser.add_argument("--seq-len", type=int, default=defaults.task.options["seq_len"])
    parser.add_argument("--hidden", type=int, default=defaults.cell.hidden_size)
    parser.add_argument("--batch", type=int, default=defaults.train.batch_size)
    parser.add_argument("--steps", type=int, default=60, help="timed steps of each row in a rep")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps of each row before the first rep")
    parser.add_argument("--cpu-steps", type=int, default=20,
                        help="CUDA: steps of the one-CPU-thread column (0: leave it out)")
    parser.add_argument("--threads", type=int, default=1, help="--device cpu: torch's CPU threads")
    args = parser.parse_args(argv)
    device = prepared_device(parser, args, "benchmarks/graphed_step.py", "the eager rows")
    if device is None:
        return 0
    cuda = device.type == "cuda"

    runners, skipped = {}, {}
    for name, kind in REFERENCES.items():
        runners[name] = Bare(run_config("rnn", args, device.type), kind, device)
    for cell in args.cells:
        config = run_config(cell, args, device.type)
        runners[f"{cell} eager"] = Static(config, device)
        if not cuda:
            continue
        graphed = Static(config, device)
        problem = capture_problem(graphed.model, config, graphed.task)
        if problem:
            skipped[cell] = problem
            continue
        try:
            graphed.capture()
        except Exception as error:  # noqa: BLE001 - a capture's failure is the finding (cells.py --graphs alike)
            skipped[cell] = f"capture failed: {type(error).__name__}: {(str(error).splitlines() or [''])[0][:160]}"
            continue
        runners[f"{cell} graphed"] = graphed
    for runner in runners.values():
        runner.run(args.warmup)
    speeds = {name: [] for name in runners}
    for rep in range(args.reps):
        for name, runner in runners.items():
            speeds[name].append(timed(runner, args.steps, device))
        print(f"  rep {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
    cpu = cpu_one_thread(args.cells, args) if cuda and args.cpu_steps > 0 else {}

    kernel = f"{torch.cuda.get_device_name(device)}, {describe_precision()}" if cuda \
        else f"CPU, {args.threads} thread{'s' if args.threads > 1 else ''}"
    print(f"# training steps/s: adding T {args.seq_len}, hidden {args.hidden}, batch {args.batch}, Adam; "
          f"{args.steps} steps x {args.reps} reps (median), torch {torch.__version__}, {kernel}")
    rnn = speeds["nn.RNN (cuDNN)"]
    print(f"| cell | eager steps/s | graphed steps/s | graphed / eager | graphed / nn.RNN (goal >= {GOAL_CUDNN}) | "
          f"CPU 1 thread steps/s | graphed / CPU (goal >= {GOAL_CPU:g}) | goal met |")
    print("|---|---|---|---|---|---|---|---|")
    for name in REFERENCES:
        label = name if cuda else name.replace("cuDNN", "ATen CPU")
        print(f"| {label} | {statistics.median(speeds[name]):.1f} | | | | | | |")
    for cell in args.cells:
        eager = speeds[f"{cell} eager"]
        graphed = speeds.get(f"{cell} graphed")
        columns = [cell, f"{statistics.median(eager):.1f}", "", "", "", f"{cpu[cell]:.1f}" if cell in cpu else "",
                   "", ""]
        if graphed is None:  # the CPU (then the ratio column holds eager's), or a cell capture_problem refuses
            columns[2] = f"not captured: {skipped[cell]}" if cell in skipped else "—"
            columns[4] = "" if cuda else f"(eager) {paired(eager, rnn):.2f}"
        else:
            to_cudnn = paired(graphed, rnn)
            to_cpu = statistics.median(graphed) / cpu[cell] if cell in cpu else None
            columns[2:5] = [f"{statistics.median(graphed):.1f}", f"{paired(graphed, eager):.2f}", f"{to_cudnn:.2f}"]
            columns[6] = "" if to_cpu is None else f"{to_cpu:.1f}"
            columns[7] = "yes" if to_cudnn >= GOAL_CUDNN and (to_cpu is None or to_cpu >= GOAL_CPU) else "NO"
        print("| " + " | ".join(columns) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
