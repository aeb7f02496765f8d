"""What does the sweep machinery cost?  Side by side in one run, on this machine.

    python benchmarks/sweep.py                    # both parts
    python benchmarks/sweep.py --part wall --rounds 2
    python benchmarks/sweep.py --part page --seconds 30

``--part wall`` (issue 12, "Speed"): 16 tiny runs as one sweep (``python -m stability sweep --vary
lr=16 values --workers 1``, in the foreground, so the sweep's process follows it to the end) against
the same 16 runs started one after another by ``python -m stability train``.  Target: the sweep takes
≤ 1.1× the wall time of the 16 CLI runs.  Both sides train exactly the same configs; their training
time (the runs' own started-to-finished seconds, summed) is reported too, so what is left over is
the machinery: interpreter and import start-up for each CLI run, Optuna's study and claims for the
sweep.  The two sides alternate within each round.

``--part page``: a 16-run sweep trains in the background (1 worker) while a real Streamlit server
serves its Sweep page (``/sweep?sweep=ID``) to a real headless Chromium; the server's CPU over the
window, against the same server with no page open.  Target: under the live-page benchmark's budget
(15 % of one core; benchmarks/live_page.py).  Needs playwright and /usr/bin/chromium.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_page import CHROMIUM, CHROMIUM_ARGS, cpu_seconds, streamlit_server  # noqa: E402

from stability.runs.store import RunStore  # noqa: E402

LRS = [f"{value:.3g}" for value in (1e-3 * 1.5 ** i for i in range(16))]
TINY = ["--cell", "rnn", "--hidden-size", "16", "--seq-len", "20", "--steps", "300", "--batch-size", "32",
        "--eval-examples", "64", "--probe-examples", "8"]


def cli(store: Path, *args: str) -> None:
    env = {**os.environ, "STABILITY_STORE": str(store), "STABILITY_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "stability", *args], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def training_seconds(store: Path) -> float:
    with RunStore(store) as opened:
        return sum(run.finished_at - run.started_at for run in opened.records() if run.finished_at and run.started_at)


def as_sweep(folder: Path) -> tuple[float, float]:
    store = folder / "sweep.db"
    started = time.perf_counter()
    cli(store, "sweep", *TINY, "--vary", "lr=" + ",".join(LRS), "--workers", "1")
    return time.perf_counter() - started, training_seconds(store)


def one_by_one(folder: Path) -> tuple[float, float]:
    store = folder / "cli.db"
    started = time.perf_counter()
    for lr in LRS:
        cli(store, "train", *TINY, "--lr", lr)
    return time.perf_counter() - started, training_seconds(store)


def wall_part(rounds: int) -> None:
    results = {"sweep": [], "cli": []}
    for index in range(rounds):
        order = [("sweep", as_sweep), ("cli", one_by_one)]
        for name, measure in order if index % 2 == 0 else order[::-1]:
            with tempfile.TemporaryDirectory() as folder:
                wall, trained = measure(Path(folder))
            results[name].append((wall, trained))
            print(f"  round {index + 1}, {name}: {wall:.1f} s wall, {trained:.1f} s training", flush=True)
    sweep_wall = statistics.median(w for w, _ in results["sweep"])
    cli_wall = statistics.median(w for w, _ in results["cli"])
    print(f"\n16 tiny runs ({' '.join(TINY)}), {rounds} round(s), median:\n")
    print("| how | wall s | training s (runs' own) | wall − training, per run |")
    print("|---|---|---|---|")
    for name, label in (("sweep", "one sweep, 1 worker"), ("cli", "16 × `train`, one after another")):
        wall = statistics.median(w for w, _ in results[name])
        trained = statistics.median(t for _, t in results[name])
        print(f"| {label} | {wall:.1f} | {trained:.1f} | {(wall - trained) / 16:.2f} s |")
    print(f"\nsweep / CLI wall time: {sweep_wall / cli_wall:.2f}× (target ≤ 1.1×)")


def page_part(seconds: float, settle_s: float) -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "runs.db"
        RunStore(store).close()
        env = {**os.environ, "STABILITY_STORE": str(store)}
        out = subprocess.run([sys.executable, "-m", "stability", "sweep", *TINY[:-6], "--steps", "100000",
                              "--vary", "lr=" + ",".join(LRS), "--workers", "1", "--background"],
                             cwd=ROOT, env=env, check=True, capture_output=True, text=True)
        sweep_id = int(out.stdout)
        try:
            with streamlit_server(store) as (server, url), sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                warm = browser.new_page()
                warm.goto(f"{url}/sweep?sweep={sweep_id}", wait_until="domcontentloaded")
                time.sleep(settle_s)
                warm.close()
                time.sleep(settle_s)
                shares = {}
                for label in ("no page", "Sweep page open"):
                    page = None
                    if label != "no page":
                        page = browser.new_page(viewport={"width": 1400, "height": 1000})
                        page.goto(f"{url}/sweep?sweep={sweep_id}", wait_until="domcontentloaded")
                        page.wait_for_timeout(settle_s * 1000)
                    before, start = cpu_seconds({server.pid}), time.time()
                    if page is not None:
                        page.wait_for_timeout(seconds * 1000)
                    else:
                        time.sleep(seconds)
                    shares[label] = (cpu_seconds({server.pid}) - before) / (time.time() - start)
                    if page is not None:
                        page.close()
                browser.close()
        finally:
            subprocess.run([sys.executable, "-m", "stability", "sweeps", "stop", str(sweep_id)], cwd=ROOT, env=env,
                           capture_output=True)
    print(f"\nA 16-run sweep training in the background; the Sweep page's server over {seconds:g} s:\n")
    print("| server | CPU, % of one core | CPU s/min |")
    print("|---|---|---|")
    for label, share in shares.items():
        print(f"| {label} | {100 * share:.0f}% | {60 * share:.1f} |")
    print("\n(target: the Sweep page open ≤ 15 % of a core, the live-page benchmark's budget)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["wall", "page", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=8.0)
    args = parser.parse_args()
    if args.part in ("wall", "both"):
        wall_part(args.rounds)
    if args.part in ("page", "both"):
        page_part(args.seconds, args.settle)


if __name__ == "__main__":
    main()
