"""Store write and read throughput, SQLite and PostgreSQL side by side (issue 12), and for SQLite the
raw-sqlite3 store this one replaced, so the cost of going through SQLAlchemy is a ratio.

    python3 benchmarks/store.py                       # all three stores, default sizes
    python3 benchmarks/store.py --flushes 400 --repeats 5 --out benchmarks/store-2026-11-23.md

What is timed (each the median of --repeats rounds, in one process; the stores take turns round by round):
  flush        one log interval of a training run: 25 scalars, 3 series rows of 16 components,
               heartbeat, in one transaction (Trainer.flush's shape); per second
  poll         metrics(run, since_step=last) after each flush, what a live page asks; per second
  latest_many  the latest values of 100 runs (the sidebar, Runs, Race); per second
  records      store.records() over the 100 runs (typed RunRecords, two queries); per second

PostgreSQL is a throwaway cluster from tests/postgres.py (fsync off, as in the tests: this measures
the store's own cost and a local round trip, not a disk). The old SQLite store is
``git show 9faaad4:stability/store.py`` (schema 4 on sqlite3, just before the port) imported as a
module; pass --old-commit to compare with another. ``--also-commit a998cdd`` times the SQLAlchemy
store as it was at that commit too (one module then, before it was split by concern), on both
backends, in the same rounds: on a shared machine a same-process comparison is the fair one.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

CONFIG = {"cell": {"name": "rnn", "hidden_size": 32, "options": {}}, "task": {"name": "adding", "options": {}},
          "train": {"steps": 1000}, "name": "bench"}
SCALARS = [f"metric/{k}" for k in range(25)]
SERIES = [("grad/h_t_norm", 16), ("sv/spectrum", 16), ("gate/values", 16)]


def old_store_module(commit: str, name: str = "old_store"):
    """The store module as it was at ``commit``, loaded as module ``name``: it lived in
    ``stability/store.py`` before the package was grouped into rooms, ``stability/runs/store.py`` since
    (a one-module store: its relative imports are made absolute)."""
    for path in ("stability/runs/store.py", "stability/store.py"):
        shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO, capture_output=True, text=True)
        if shown.returncode == 0:
            break
    else:
        raise SystemExit(f"no store module at commit {commit}: {shown.stderr.strip()}")
    source = shown.stdout
    folder = Path(tempfile.mkdtemp(prefix="old-store-"))
    (folder / f"{name}.py").write_text(source.replace("from .", "from stability.runs."))
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def interval(step: int) -> tuple[list, list]:
    now = time.time()
    scalars = [(step, now, name, 1.0 / (step + k + 1)) for k, name in enumerate(SCALARS)]
    series = [(step, now, name, i, float(i * step)) for name, size in SERIES for i in range(size)]
    return scalars, series


def prepare(store) -> list[int]:
    """100 runs with one interval each: what latest_many and records read."""
    runs = [store.create_run(CONFIG) for _ in range(100)]
    for run_id in runs:
        store.flush(run_id, interval(0)[0])
    return runs


def measure_round(store, runs: list[int], flushes: int) -> dict[str, float]:
    """Operations per second of each kind in one round."""
    rates = {}
    run_id, step = store.create_run(CONFIG), 1
    writing = polling = 0.0
    for _ in range(flushes):  # a run flushes an interval, a live page polls for the new rows
        scalars, series = interval(step)
        started = time.perf_counter()
        store.flush(run_id, scalars, series, heartbeat_step=step)
        polled = time.perf_counter()
        frame = store.metrics(run_id, since_step=step - 1)
        polling += time.perf_counter() - polled
        writing += polled - started
        assert len(frame) == len(SCALARS)  # exactly the new interval: the poll really read it
        step += 1
    rates["flush"], rates["poll"] = flushes / writing, flushes / polling
    started = time.perf_counter()
    for _ in range(flushes // 4):
        assert len(store.latest_many(runs)) == len(runs)
    rates["latest_many"] = flushes // 4 / (time.perf_counter() - started)
    count = max(1, flushes // 40)
    started = time.perf_counter()
    for _ in range(count):
        store.records()
    rates["records"] = count / (time.perf_counter() - started)
    return rates


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flushes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--old-commit", default="9faaad4")
    parser.add_argument("--also-commit", help="also time the SQLAlchemy store module as it was at this commit")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from stability.runs.store import RunStore

    stores: dict[str, object] = {}
    cluster = None
    with tempfile.TemporaryDirectory() as folder:
        try:
            stores["SQLite, raw sqlite3 (before)"] = old_store_module(args.old_commit).RunStore(Path(folder) / "old.db")
            also = old_store_module(args.also_commit, "also_store").RunStore if args.also_commit else None
            if also:
                stores[f"SQLite, SQLAlchemy at {args.also_commit}"] = also(Path(folder) / "also.db")
            stores["SQLite, SQLAlchemy"] = RunStore(Path(folder) / "new.db")
            if not args.no_postgres:
                from postgres import Cluster

                cluster = Cluster.start()
                if also:
                    stores[f"PostgreSQL 127.0.0.1, SQLAlchemy at {args.also_commit}"] = also(cluster.new_database())
                stores["PostgreSQL 127.0.0.1, SQLAlchemy"] = RunStore(cluster.new_database())
            runs = {label: prepare(store) for label, store in stores.items()}
            rounds: dict[str, list[dict[str, float]]] = {label: [] for label in stores}
            for _ in range(args.repeats):  # the stores take turns, so a busy moment hits them alike
                for label, store in stores.items():
                    rounds[label].append(measure_round(store, runs[label], args.flushes))
            results = {label: {kind: statistics.median(r[kind] for r in measured) for kind in measured[0]}
                       for label, measured in rounds.items()}
        finally:
            for store in stores.values():
                store.close()
            if cluster is not None:
                cluster.stop()

    kinds = ["flush", "poll", "latest_many", "records"]
    lines = ["| store | " + " | ".join(f"{kind} /s" for kind in kinds) + " |",
             "|---|" + "---:|" * len(kinds)]
    for label, rates in results.items():
        lines.append(f"| {label} | " + " | ".join(f"{rates[kind]:,.0f}" for kind in kinds) + " |")
    base = results.get("SQLite, raw sqlite3 (before)")
    if base:
        for label, rates in results.items():
            if label != "SQLite, raw sqlite3 (before)":
                lines.append(f"| {label} / before | " + " | ".join(f"{rates[kind] / base[kind]:.2f}x" for kind in kinds)
                             + " |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        header = (f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
                  f"{args.flushes} flushes x {args.repeats} rounds (medians).\n\n")
        args.out.write_text(header + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
