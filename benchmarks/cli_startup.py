"""How long the command line takes to answer, and what it imports (Note [A command line without torch]
in stability/cli/main.py).

    python benchmarks/cli_startup.py [--repeat 3] [--tree PATH]

Makes a store with one tiny completed run in a temporary folder, then times ``python -m stability``
with ``show abc`` (an argument error), ``--help``, ``runs`` and ``show ID`` (wall and user CPU seconds
of the child, each ``--repeat`` times) and says whether each imported torch or pandas. ``--tree`` runs
another checkout's CLI (an older commit, say: ``git worktree add /tmp/old <commit>``) over the same
store.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHAT = "import sys; from stability.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n" \
       "print('imported:', ' '.join(m for m in ('torch', 'pandas') if m in sys.modules) or 'neither', file=sys.stderr)"


def _store(folder: Path) -> tuple[Path, int]:
    sys.path.insert(0, str(REPO))
    from stability import RunConfig, train_run
    from stability.config import CellConfig, TaskConfig, TrainConfig
    from stability.runs.store import RunStore

    config = RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig("adding", {"seq_len": 10}),
                       train=TrainConfig(steps=6, log_every=3, batch_size=8, eval_examples=16, probe_examples=4,
                                         device="cpu"))
    path = folder / "runs.db"
    with RunStore(path) as store:
        return path, train_run(config, store=store).run_id


def _timed(tree: Path, store: Path, argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "stability", *argv], cwd=tree, capture_output=True,
                   env={**os.environ, "STABILITY_STORE": str(store)})
    return time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose CLI is timed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store, run_id = _store(Path(folder))
        print(f"| command | wall s (each run) | user CPU s (each run) | imported |\n|---|---|---|---|")
        for argv in (["show", "abc"], ["--help"], ["runs"], ["show", str(run_id)]):
            times = [_timed(args.tree, store, argv) for _ in range(args.repeat)]
            probe = subprocess.run([sys.executable, "-c", WHAT, *argv], cwd=args.tree, capture_output=True, text=True,
                                   env={**os.environ, "STABILITY_STORE": str(store)})
            imported = probe.stderr.strip().splitlines()[-1].removeprefix("imported: ")
            print(f"| `stability {' '.join(argv)}` | {' / '.join(f'{wall:.2f}' for wall, _ in times)} | "
                  f"{' / '.join(f'{cpu:.2f}' for _, cpu in times)} | {imported} |")


if __name__ == "__main__":
    main()
