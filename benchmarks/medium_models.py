"""Medium models (issue 32, item 3): the training step's steps/s at hidden 128 / 512 / 1024 x T 100 / 1000,
eager, graphed, a bare cuDNN loop and one CPU thread, with the memory budget's prediction beside the peak.

    python benchmarks/medium_models.py                    # CUDA, the whole grid in about 80 s; one line and
                                                          # exit 0 without CUDA
    python benchmarks/medium_models.py --device cpu --hidden 16 --seq-lens 10 --cpu-steps 1   # a check
    python benchmarks/medium_models.py --hidden 128,512 --seq-lens 100 --cells spectral,kru --no-cpu

A row is one cell at one (hidden, T): the adding task, batch ``--batch``, Adam, the default Train run otherwise
(``benchmarks/graphed_step.py``'s ``run_config``; its ``Static``, ``Bare`` and ``timed`` are the rows' runners):

* ``eager``: :class:`stability.training.graphed.StaticStep` never captured (Adam in its capturable form), 3 warm-up
  steps, then at least ``--steps`` timed (more while they fit in ``--target-seconds``);
* ``graphed``: the same StaticStep, captured after those eager steps (the trainer's order) and replayed: 2 replays
  of warm-up, then timed alike; "not captured: <why>" where ``capture_problem`` refuses the cell (checked once a
  cell, at its first shape: what it looks for, a read of the device on the host, does not depend on the sizes)
  or the capture raises;
* ``cuDNN``: the bare ``nn.RNN`` (tanh) loop in the rnn row, ``nn.LSTM`` in the lstm row (graphed_step's
  ``Bare``: the layer, a linear readout of the last step, the loss, plain Adam; timed first in its row, being
  the cheapest); ``nn.RNN`` of each shape is timed once before that shape's rows, for the graphed / nn.RNN
  column of every row (an own row "nn.RNN" where ``--cells`` leaves rnn out);
* ``CPU 1 thread``: the eager StaticStep on the CPU, ``torch.set_num_threads(1)``: one untimed step (counted when
  it took over a second: a step of seconds is not an allocation's cost), then up to ``--cpu-steps`` timed.
  Skipped (the row says so) when a step would not fit in what is left of the row's cap, predicted from
  ``budget.work`` at the rate this cell's CPU column ran at a smaller shape.

Memory (CUDA): ``torch.cuda.max_memory_allocated()`` over the eager row, from building the model to its last
timed step (the peak statistics reset, and the bytes still held from before subtracted), beside
``stability.admission.budget.footprint``'s prediction of what that holds: ``parameters`` (weights, the materialised
W and its gradient, Adam's two slots, the input and output layers) + ``step`` (the batch, the hidden states kept
for backward, the outputs). A run's ``peak`` (the column after) adds the float64 probe and the larger of the
evaluation and probe passes, which this step never allocates. The budget is a lower bound: measured / budget
below 1 would mean it is not one.

Limits, so that the table fits a GPU session's few minutes: each row stops starting steps when
``--max-seconds-per-row`` is spent (a step already started finishes), marking what it timed as cut; the table
stops starting rows after ``--max-seconds`` (its remaining rows say so); a row that runs out of memory or raises
says so in its cells. Rows print as they finish, T 100 before T 1000, so a run cut short keeps its cheapest rows.
Not measured here: what a whole run adds around the step (evaluation, the probes, the SVDs: benchmarks/training.py).
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
import types
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphed_step import (GOAL_CPU, GOAL_CUDNN, Bare, Static, build_task, prepared_device, run_config,  # noqa: E402  (beside this file)
                          timed)
from stability.admission import footprint, work  # noqa: E402
from stability.core.devices import synchronize  # noqa: E402
from stability.core.precision import describe_precision  # noqa: E402
from stability.training import build_model, capture_problem  # noqa: E402

CELLS = ["rnn", "lstm", "spectral", "sgornn", "kru"]
HIDDEN, SEQ_LENS = [128, 512, 1024], [100, 1000]
CUDNN = {"rnn": nn.RNN, "lstm": nn.LSTM}
EAGER_WARMUP, REPLAY_WARMUP = 3, 2  # eager: also the capture's warm-up (stability.training.graphed.WARMUP_STEPS)
MIB = 2 ** 20


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.replace(" ", ",").split(",") if part]


def _words(values: list[str]) -> list[str]:
    return [part for value in values for part in value.split(",") if part]


def _error(error: BaseException) -> str:
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return "out of memory"
    first = (str(error).strip().splitlines() or [""])[0][:120]
    return f"failed: {type(error).__name__}: {first}".replace("|", "/")


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class Row:
    """One row's deadline and what it measured: speeds (steps/s, or None) and notes by column."""

    def __init__(self, seconds: float):
        self.deadline = time.perf_counter() + seconds
        self.speed: dict[str, float | None] = {}
        self.note: dict[str, str] = {}

    def left(self) -> float:
        return self.deadline - time.perf_counter()


def warm(runner, steps: int, device: torch.device, row: Row) -> float | None:
    """``steps`` untimed steps, each synchronised; the last one's seconds, or None when the cap stopped them."""
    last = None
    for _ in range(steps):
        if row.left() <= 0:
            return None
        last = 1 / timed(runner, 1, device)
    return last


def measure(runner, device: torch.device, row: Row, column: str, args, warmup: int) -> None:
    """``row.speed[column]``: steps/s of ``runner`` after ``warmup`` steps, at least ``--steps`` timed (fewer only
    where the row's cap cuts them, noted), more while they fit in ``--target-seconds``; timed in chunks that fit
    in what is left of the row's cap, each synchronised on both sides."""
    step_s = warm(runner, warmup, device, row)
    if step_s is None:
        row.speed[column], row.note[column] = None, "the row's time cap, in warm-up"
        return
    wanted = max(args.steps, min(int(args.target_seconds / max(step_s, 1e-6)), 50 * args.steps))
    done, seconds = 0, 0.0
    while done < wanted:
        if done and row.left() <= 0:
            break
        chunk = max(1, min(wanted - done, int(row.left() / max(step_s, 1e-6))))
        spent = chunk / timed(runner, chunk, device)
        done, seconds = done + chunk, seconds + spent
        step_s = seconds / done
    if done < args.steps:
        row.note[column] = f"{done} timed step{'s' if done > 1 else ''}: the row's time cap"
    row.speed[column] = done / seconds


def eager_and_graphed(cell: str, config, device: torch.device, row: Row, args, problem: str | None) -> int | None:
    """The eager and graphed columns, one StaticStep for both; the eager row's peak bytes (CUDA), or None."""
    cuda = device.type == "cuda"
    peak = None
    runner = None
    try:
        if cuda:
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        runner = Static(config, device)
        measure(runner, device, row, "eager", args, EAGER_WARMUP)
        if cuda:
            synchronize(device)
            peak = torch.cuda.max_memory_allocated(device) - base
        if not cuda:
            return peak
        if problem:
            row.note["graphed"] = f"not captured: {problem}"
            return peak
        if runner.static.eager_steps < EAGER_WARMUP:
            row.note["graphed"] = "not captured: the row's time cap (too few eager steps)"
            return peak
        try:
            runner.capture()  # after its eager steps: the warm-up the capture needs
        except Exception as error:  # noqa: BLE001 - a capture's failure is the finding (graphed_step.py alike)
            if isinstance(error, torch.cuda.OutOfMemoryError):
                raise
            row.note["graphed"] = f"not captured: capture failed: {_error(error)[len('failed: '):]}"
            return peak
        measure(runner, device, row, "graphed", args, REPLAY_WARMUP)
    except Exception as error:  # noqa: BLE001 - one row's failure is that row's finding, not the table's end
        column = "graphed" if "eager" in row.speed else "eager"
        row.speed[column], row.note[column] = None, _error(error)
    finally:
        del runner
        _free(device)
    return peak


def cudnn(kind: type, config, device: torch.device, row: Row, column: str, args) -> None:
    runner = None
    try:
        runner = Bare(config, kind, device)
        measure(runner, device, row, column, args, EAGER_WARMUP)
    except Exception as error:  # noqa: BLE001
        row.speed[column], row.note[column] = None, _error(error)
    finally:
        del runner
        _free(device)


def cpu_one_thread(cell: str, shape, row: Row, args, rates: dict[str, float]) -> None:
    """The CPU column (module docstring); ``rates``: operations/s this cell's CPU column has run at, by cell."""
    config = run_config(cell, shape, "cpu")
    operations = work(config, build_task(config)).step
    if cell in rates and operations / rates[cell] > row.left():
        row.note["cpu"] = f"not run: a step ~{operations / rates[cell]:.1f} s predicted, over the row's time cap"
        return
    if row.left() <= 0:
        row.note["cpu"] = "not run: the row's time cap"
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    runner = None
    device = torch.device("cpu")
    try:
        runner = Static(config, device)
        first = 1 / timed(runner, 1, device)
        done, seconds = (1, first) if first > 1.0 else (0, 0.0)
        for _ in range(args.cpu_steps - done):
            if row.left() < (seconds / done if done else first):  # the next step would end past the cap
                break
            seconds += 1 / timed(runner, 1, device)
            done += 1
        if done == 0:  # the cap spent on the untimed step: that step is all there is
            done, seconds = 1, first
            row.note["cpu"] = "its first step only: the row's time cap"
        elif done < args.cpu_steps:
            row.note["cpu"] = f"{done} of {args.cpu_steps} steps: the row's time cap"
        row.speed["cpu"] = done / seconds
        rates[cell] = max(rates.get(cell, 0.0), operations * row.speed["cpu"])
    except Exception as error:  # noqa: BLE001
        row.speed["cpu"], row.note["cpu"] = None, _error(error)
    finally:
        torch.set_num_threads(threads)
        del runner
        gc.collect()


def _speed(row: Row, column: str) -> str:
    value = row.speed.get(column)
    if value is None:
        return row.note.get(column, "")
    text = f"{value:.1f}" if value >= 10 else f"{value:.3g}"
    return f"{text} ({row.note[column]})" if column in row.note else text


def _ratio(a: float | None, b: float | None) -> str:
    return "" if a is None or b is None or b == 0 else f"{a / b:.3g}"


def _mib(count: int) -> str:
    return f"{count / MIB:.1f}" if count >= 10 * MIB else f"{count / MIB:.3g}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (the table); cpu: the eager and CPU columns only")
    parser.add_argument("--hidden", type=_ints, default=HIDDEN, help="comma-separated, e.g. 128,512")
    parser.add_argument("--seq-lens", type=_ints, default=SEQ_LENS, help="comma-separated, e.g. 100,1000")
    parser.add_argument("--cells", nargs="+", default=CELLS, help="names, spaces or commas between")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5, help="timed steps of a column at least (the cap aside)")
    parser.add_argument("--target-seconds", type=float, default=0.3,
                        help="a column times more than --steps while they fit in this (fast rows)")
    parser.add_argument("--cpu-steps", type=int, default=2, help="timed steps of the one-CPU-thread column")
    parser.add_argument("--no-cpu", action="store_true", help="leave the one-CPU-thread column out")
    parser.add_argument("--threads", type=int, default=1, help="--device cpu: torch's threads for the eager column")
    parser.add_argument("--max-seconds-per-row", type=float, default=6.0)
    parser.add_argument("--max-seconds", type=float, default=80.0,
                        help="the table starts no row after this (benchmarks/gpu_check.sh gives it 90 s)")
    args = parser.parse_args(argv)
    args.cells = _words(args.cells)
    device = prepared_device(parser, args, "benchmarks/medium_models.py", "the eager and CPU columns")
    if device is None:
        return 0
    cuda = device.type == "cuda"
    start = time.perf_counter()

    kernel = f"{torch.cuda.get_device_name(device)}, {describe_precision()}" if cuda \
        else f"CPU, {args.threads} thread{'s' if args.threads > 1 else ''} for the eager column"
    bare = "cuDNN" if cuda else "ATen CPU"
    print(f"# medium models: adding, batch {args.batch}, Adam; steps/s (warm-up {EAGER_WARMUP}, >= {args.steps} "
          f"timed); cap {args.max_seconds_per_row:g} s a row; torch {torch.__version__}, {kernel}")
    print(f"| cell | hidden | T | eager | graphed | {bare} nn.RNN/nn.LSTM | CPU 1 thread | graphed / eager | "
          f"graphed / nn.RNN (goal >= {GOAL_CUDNN}) | graphed / CPU (goal >= {GOAL_CPU:g}) | "
          f"budget: params + step MiB | measured peak MiB | measured / budget | budget: run peak MiB |")
    print("|" + "---|" * 14, flush=True)
    problems: dict[str, str | None] = {}
    rates: dict[str, float] = {}
    for seq_len in args.seq_lens:
        for hidden in args.hidden:
            shape = types.SimpleNamespace(hidden=hidden, seq_len=seq_len, batch=args.batch)
            over = time.perf_counter() - start > args.max_seconds
            reference = Row(0 if over else args.max_seconds_per_row)
            if not over:
                cudnn(nn.RNN, run_config("rnn", shape, device.type), device, reference, "nn.RNN", args)
            for cell in args.cells:
                config = run_config(cell, shape, device.type)
                budget = footprint(config, build_task(config))
                predicted = budget.parameters + budget.step
                if time.perf_counter() - start > args.max_seconds:
                    print(f"| {cell} | {hidden} | {seq_len} | not run: the table's {args.max_seconds:g} s spent |"
                          + " |" * 6 + f" {_mib(predicted)} | | | {_mib(budget.peak)} |", flush=True)
                    continue
                row = Row(args.max_seconds_per_row)
                if cuda and cell not in problems:
                    try:  # on a CPU copy, as capture_problem checks it: the model's device changes nothing there
                        torch.manual_seed(config.train.seed)
                        task = build_task(config)
                        problems[cell] = capture_problem(build_model(config, task).float(), config, task)
                    except Exception as error:  # noqa: BLE001
                        problems[cell] = f"its check {_error(error)}"
                if cell == "rnn":  # timed before the shape's rows
                    row.speed["cudnn"] = reference.speed.get("nn.RNN")
                    if "nn.RNN" in reference.note:
                        row.note["cudnn"] = reference.note["nn.RNN"]
                elif cell in CUDNN:  # first: milliseconds, which the slower columns would leave no time for
                    cudnn(CUDNN[cell], config, device, row, "cudnn", args)
                peak = eager_and_graphed(cell, config, device, row, args, problems.get(cell))
                if not args.no_cpu:
                    cpu_one_thread(cell, shape, row, args, rates)
                graphed = row.speed.get("graphed")
                to_cpu = _ratio(graphed, row.speed.get("cpu"))
                if not cuda and row.speed.get("eager") is not None:
                    to_cpu = _ratio(row.speed.get("eager"), row.speed.get("cpu"))
                    to_cpu = f"(eager) {to_cpu}" if to_cpu else ""
                measured = "" if peak is None else _mib(peak)
                columns = [cell, str(hidden), str(seq_len), _speed(row, "eager"),
                           _speed(row, "graphed") if cuda else "—", _speed(row, "cudnn"),
                           "" if args.no_cpu else _speed(row, "cpu"),
                           _ratio(graphed, row.speed.get("eager")), _ratio(graphed, reference.speed.get("nn.RNN")),
                           to_cpu, _mib(predicted), measured,
                           "" if peak is None else _ratio(peak, predicted), _mib(budget.peak)]
                print("| " + " | ".join(columns) + " |", flush=True)
            if "rnn" not in args.cells and not over:  # the graphed / nn.RNN column's reference
                print(f"| nn.RNN | {hidden} | {seq_len} | | | {_speed(reference, 'nn.RNN')} |" + " |" * 8, flush=True)
    print(f"# {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
