"""What stability.watch costs a training loop: a bare loop against the same loop watched.

    python benchmarks/watch.py                               # nn.LSTM, hidden 64, adding T = 50, 400 steps
    python benchmarks/watch.py --hidden 128 --every 10 50 --reps 3

``bare``: your loop (nn.LSTM + a linear head on the adding task, forward, backward, Adam step), nothing
else. ``run.step``: the same with ``run.step(loss, h0=(h0, c0))`` each step into an external run of a
fresh SQLite store (train/loss at logged steps, the rows written once a second) but no model watched.
``watch every N``: also ``run.watch(model, every=N)``: at each logged step one extra backward of the
loss (the gradient norms), the SVD and eigenvalues of every gate block in float64, and the gates
replayed; ``+ probe``: also the float64 probe on a fixed batch. The variants alternate ``--reps``
times in one process; the table gives the median wall time, its ratio to the bare loop, and the
cost of one logged step ((watched − bare) / logged steps), which bounds the cost: it is paid
every N steps only.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import stability.watch as sw  # noqa: E402
from stability import tasks  # noqa: E402
from stability.runs.store import RunStore  # noqa: E402


def loop(args, variant: str, every: int | None) -> float:
    torch.manual_seed(0)
    task = tasks.build("adding", seed=0, seq_len=args.seq_len)
    lstm, head = nn.LSTM(task.input_size, args.hidden, batch_first=True), nn.Linear(args.hidden, 1)
    model = nn.ModuleDict({"lstm": lstm, "head": head})
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    stream = task.batches("train", args.batch)
    data = [next(stream) for _ in range(args.steps)]
    with tempfile.TemporaryDirectory() as folder, RunStore(Path(folder) / "runs.db") as store:
        run = None if variant == "bare" else sw.init("benchmark", store=store)
        if variant.startswith("watch"):
            probe = None
            if variant.endswith("probe"):
                x, y = data[0]

                def loss_of(m, h0, x, y):
                    return task.loss(m["head"](m["lstm"](x, h0)[0][:, -1]), y)

                zeros = torch.zeros(1, args.batch, args.hidden)
                probe = sw.Probe(loss_of, h0=(zeros, zeros), inputs=(x, y))
            run.watch(model, every=every, probe=probe)
        start = time.perf_counter()
        for x, y in data:
            h0 = torch.zeros(1, args.batch, args.hidden, requires_grad=run is not None)
            c0 = torch.zeros(1, args.batch, args.hidden, requires_grad=run is not None)
            loss = task.loss(head(lstm(x, (h0, c0))[0][:, -1]), y)
            if run is not None:
                run.step(loss, h0=(h0, c0))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        if run is not None:
            run.finish()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=50)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--every", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = [("bare", None), ("run.step", None)]
    variants += [(f"watch every {n}", n) for n in args.every] + [(f"watch every {args.every[-1]} + probe", args.every[-1])]
    times: dict[str, list[float]] = {name: [] for name, _ in variants}
    for _ in range(args.reps):
        for name, every in variants:
            kind = "bare" if name == "bare" else "step" if name == "run.step" else \
                ("watch probe" if name.endswith("probe") else "watch")
            times[name].append(loop(args, kind, every))
    bare = statistics.median(times["bare"])
    print(f"nn.LSTM hidden {args.hidden}, adding T = {args.seq_len}, batch {args.batch}, {args.steps} steps, "
          f"torch {torch.__version__}, 1 thread, median of {args.reps}\n")
    print("| loop | wall s | × bare | per logged step, ms |")
    print("|---|---|---|---|")
    for name, every in variants:
        median = statistics.median(times[name])
        logged = (1 + args.steps // every) if every else args.steps
        extra = f"{1000 * (median - bare) / logged:.2f}" if name != "bare" else "—"
        print(f"| {name} | {median:.2f} | {median / bare:.2f} | {extra} |")


if __name__ == "__main__":
    main()
