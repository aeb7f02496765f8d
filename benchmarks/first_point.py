"""From Start to the first point drawn: a real server, a real Chromium, with and without a warm worker.

    python benchmarks/first_point.py                  # 5 tries of each, Train and Race, warm worker off and on
    python benchmarks/first_point.py --tries 3 --cli  # and `stability train --background` to its first row
    STABILITY_MAX_RUNS=4 python benchmarks/first_point.py --pages race --warm on --before /tmp/main-code
                                                      # the Race's four cells at once, main's server beside this one

For each condition (``STABILITY_WARM_WORKERS=0`` and ``1``) a real ``streamlit run app.py`` server on its
own temporary store, and one headless Chromium (Playwright on /usr/bin/chromium; never ``playwright
install``). A try empties the store (the page then has no chart at all), opens a fresh page, waits until
the page is idle (and, with warm workers, until they have imported torch: their ``ready`` lines in
``logs/warm.log``; one for Train, one a cell for the Race: Note [Warm slots] in stability/workers/warm.py),
clicks Start (Train, at the form's defaults) or Start race (the Race's defaults: four
cells), and times from the click to the first chart canvas in the main area: a panel draws no chart before
a run has rows (pages/train.py, pages/race.py), so the first canvas is the first point drawn. For the Race
it also times until every run of the race has a stored row (read from the store by this script). Then the
runs are stopped and the next try starts. ``--cli``: ``python -m stability train --background`` (which
starts a fresh worker: no warm worker outside the server, stability/workers/warm.py), from the command's
start to the first stored ``train/loss`` row. ``--direct``: no server and no browser (a GPU machine has
neither Streamlit nor Chromium): this process does what the server does at Start (``scheduler.keep_warm``,
then ``scheduler.start_run`` of the default config) and times from ``start_run`` to the run's first stored
``train/loss`` row, warm worker off and on; ``--device cuda`` trains on the GPU, and on a CUDA machine it
says what GPU memory an idle warm worker and a training one hold (``nvidia-smi --query-compute-apps``).
Medians of the tries; the load average is printed with them (the machine may be shared).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stability.runs.status import TERMINAL  # noqa: E402
from stability.runs.store import RunStore  # noqa: E402
from stability.workers import scheduler  # noqa: E402
from stability.workers import warm as warm_workers  # noqa: E402

from live_page import CHROMIUM, CHROMIUM_ARGS, streamlit_server  # noqa: E402  (beside this file)

# a chart canvas in the main area outside the empty chart drawn before a run has rows (pages/ui/live.py, Note
# [Skeleton]) and not stale (an element of the page before the click, faded until the rerun replaces it): a
# panel draws its charts only from a run's rows, so the first such canvas is the first point
FIRST_CANVAS = ("Array.from(document.querySelectorAll('[data-testid=\"stMain\"] [data-testid=\"stVegaLiteChart\"] "
                "canvas')).some(c => !c.closest('[class*=\"st-key-chart_skeleton\"]') "
                "&& !c.closest('[data-stale=\"true\"]'))")
TIMEOUT_S = 120
RACE_CELLS = 4  # the Race's default cells: as many warm workers wait before its Start (Note [Warm slots])


@contextlib.contextmanager
def server(folder: Path, warm: bool, root: Path = ROOT):
    """A `streamlit run app.py` of the checkout ``root`` on ``folder/runs.db`` with warm workers on or off;
    yields (url, store path)."""
    store = folder / "runs.db"
    with streamlit_server(store, {"STABILITY_WARM_WORKERS": "1" if warm else "0"}, root=root) as (_, url):
        yield url, store


def empty_store(store: Path) -> None:
    """Stop every active run (its worker ends) and delete every run: the next page has no chart."""
    with RunStore(store) as opened:
        for run in opened.active_runs():
            scheduler.stop_run(run.id, store, timeout=10)
        deadline = time.monotonic() + 30
        while any(run.status not in TERMINAL for run in opened.records()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for run in opened.records():
            opened.delete_run(run.id)


def wait_warm(store: Path, count: int = 1) -> None:
    """Until ``count`` idle warm workers of this store have imported torch: pids of 'ready' lines in
    ``logs/warm.log`` that are alive and train no run (a used one exits with its run)."""
    import psutil

    log = store.parent / "logs" / "warm.log"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        ready = re.findall(r"warm worker (\d+): ready", log.read_text()) if log.exists() else []
        with RunStore(store) as opened:
            training = {run.pid for run in opened.active_runs()}
        idle = 0
        for pid in map(int, ready):
            with contextlib.suppress(psutil.Error):
                idle += pid not in training and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        if idle >= count:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{count} idle warm workers did not become ready within 180 s")


def runs_with_rows(store: Path) -> tuple[int, int]:
    """(runs that have a stored row, runs) in ``store``."""
    with RunStore(store) as opened:
        runs = opened.records()
        return sum(len(opened.metrics(run.id)) > 0 for run in runs), len(runs)


def every_run_has_rows(store: Path) -> bool:
    with_rows, runs = runs_with_rows(store)
    return runs > 0 and with_rows == runs


def one_try(browser, url: str, store: Path, page_name: str, warm: int) -> tuple[float, float | None]:
    """Seconds from the click to the first canvas; for the Race also to every run's first stored row."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{url}/{'race' if page_name == 'race' else ''}")
        label = "Start race" if page_name == "race" else "Start"
        button = page.get_by_role("button", name=label, exact=True)
        button.wait_for(timeout=TIMEOUT_S * 1000)
        page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for(timeout=TIMEOUT_S * 1000)
        if warm:  # the page's sidebar (app.py) keeps one, the Race page one a cell (Note [Warm slots])
            wait_warm(store, warm)
        time.sleep(1.0)
        clicked = time.monotonic()
        button.click()
        every = None
        if page_name == "race":
            while not every_run_has_rows(store) and time.monotonic() - clicked < TIMEOUT_S:
                time.sleep(0.05)
            every = time.monotonic() - clicked
        page.wait_for_function(FIRST_CANVAS, timeout=TIMEOUT_S * 1000, polling=50)
        drawn = time.monotonic() - clicked
        if not runs_with_rows(store)[0]:  # a canvas without a stored row would be no point drawn
            raise RuntimeError(f"a chart was drawn {drawn:.2f} s after the click, before any row was stored")
        return drawn, every
    finally:
        page.close()


def cli_first_row(folder: Path) -> float:
    """`stability train --background` from the command's start to its first stored train/loss row."""
    store = folder / "cli.db"
    env = dict(os.environ, STABILITY_STORE=str(store))
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "stability", "train", "--background"], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    try:
        while time.monotonic() - started < TIMEOUT_S:
            with RunStore(store) as opened:
                runs = opened.active_runs()
                if runs and len(opened.metrics(runs[-1].id, ["train/loss"])):
                    return time.monotonic() - started
            time.sleep(0.02)
        raise RuntimeError("no train/loss row within the timeout")
    finally:
        empty_store(store)  # the run is stopped: the next try's run is not queued behind it


def gpu_memory_by_pid() -> dict[int, int]:
    """MiB of GPU memory each process holds (``nvidia-smi --query-compute-apps``); {} without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {int(pid): int(mib) for pid, mib in (line.split(",") for line in out.splitlines() if "," in line)}


def direct_first_row(folder: Path, warm: bool, device: str) -> tuple[float, str]:
    """What the server does at Start, without server or browser: ``keep_warm`` (warm on), then
    ``start_run`` of the default config on ``device``; seconds from ``start_run`` to the first stored
    train/loss row, and a line on the GPU memory the warm worker held idle and the run's worker holds."""
    from stability.config.run_config import RunConfig

    store = folder / f"direct-{'warm' if warm else 'cold'}.db"
    os.environ["STABILITY_WARM_WORKERS"] = "1" if warm else "0"
    memory, on_gpu = "", device != "cpu"
    if warm:
        scheduler.keep_warm(store)
        wait_warm(store, 1)
        time.sleep(1.0)
        if on_gpu:
            with RunStore(store) as opened:
                idle = sorted(warm_workers.idle_pids(opened))
            held = gpu_memory_by_pid()
            memory = f"idle warm worker(s) {idle} hold {sum(held.get(pid, 0) for pid in idle)} MiB of GPU memory; "
    config = RunConfig()
    config.train.device = device
    started = time.monotonic()
    run_id = scheduler.start_run(config, store)
    try:
        while time.monotonic() - started < TIMEOUT_S:
            with RunStore(store) as opened:
                if len(opened.metrics(run_id, ["train/loss"])):
                    first = time.monotonic() - started
                    if on_gpu:
                        worker = opened.record(run_id).pid
                        memory += f"the training worker holds {gpu_memory_by_pid().get(worker, 0)} MiB"
                    return first, memory
            time.sleep(0.01)
        raise RuntimeError("no train/loss row within the timeout")
    finally:
        empty_store(store)
        if warm:
            warm_workers.close_warm()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--cli", action="store_true", help="also time `stability train --background`")
    parser.add_argument("--no-pages", action="store_true", help="no server and browser (with --cli: the CLI alone)")
    parser.add_argument("--pages", nargs="+", choices=["train", "race"], default=["train", "race"])
    parser.add_argument("--warm", nargs="+", choices=["off", "on"], default=["off", "on"])
    parser.add_argument("--before", type=Path, help="another checkout's root (`git archive main | tar -x -C DIR`): "
                                                    "its server measured first, with warm workers on")
    parser.add_argument("--direct", action="store_true",
                        help="no server and browser: start_run to the first stored row, warm off and on")
    parser.add_argument("--device", default="cpu", help="the runs' device with --direct (cpu, cuda, mps)")
    args = parser.parse_args()
    # `timeout` (SIGTERM) ends the benchmark through its cleanups: the runs it started are stopped, its server ended
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.direct:
        direct(args)
        return
    from playwright.sync_api import sync_playwright

    results: dict[tuple[str, str], list] = {}
    # the --before checkout's Race waits for a warm worker a cell too (every commit since Note [Warm slots])
    conditions = [] if args.no_pages else [(f"on, {args.before.name}", True, args.before.resolve(), RACE_CELLS)] \
        if args.before else []
    conditions += [] if args.no_pages else [(warm, warm == "on", ROOT, RACE_CELLS) for warm in args.warm]
    with tempfile.TemporaryDirectory() as temporary, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for number, (label, warm, root, race_warm) in enumerate(conditions):
            folder = Path(temporary) / f"condition-{number}"
            folder.mkdir()
            with server(folder, warm, root) as (url, store):
                for attempt in range(args.tries):
                    for page_name in args.pages:
                        empty_store(store)
                        wanted = 0 if not warm else min(race_warm, scheduler.max_concurrent_runs()) \
                            if page_name == "race" else 1  # the Race's warm workers: up to the server's slots
                        first, every = one_try(browser, url, store, page_name, wanted)
                        results.setdefault((page_name, label), []).append((first, every))
                        print(f"warm {label} {page_name:5} try {attempt + 1}: first point "
                              f"{first:.2f} s" + (f", every run's first row {every:.2f} s" if every else "")
                              + f" (load {os.getloadavg()[0]:.1f})", flush=True)
                empty_store(store)
        browser.close()
        cli = [cli_first_row(Path(temporary)) for _ in range(args.tries)] if args.cli else []
    print(f"\nmedian of {args.tries}; load average now {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| page | warm worker | Start -> first point drawn (s) | Start -> every run's first row (s) |")
    print("|---|---|---|---|")
    for (page_name, warm), tries in results.items():
        every = [e for _, e in tries if e is not None]
        print(f"| {page_name} | {warm} | {statistics.median(f for f, _ in tries):.2f} | "
              f"{statistics.median(every):.2f} |" if every else
              f"| {page_name} | {warm} | {statistics.median(f for f, _ in tries):.2f} | |")
    if cli:
        print(f"| `stability train --background` | (none) | first train/loss row {statistics.median(cli):.2f} | |")


def direct(args) -> None:
    """``--direct``: start_run -> first stored train/loss row, warm worker off and on, medians of the tries."""
    rows = []
    with tempfile.TemporaryDirectory() as temporary:
        for warm in args.warm:
            times = []
            for attempt in range(args.tries):
                first, memory = direct_first_row(Path(temporary), warm == "on", args.device)
                times.append(first)
                print(f"direct, warm {warm}, {args.device}, try {attempt + 1}: first train/loss row {first:.2f} s"
                      + (f"; {memory}" if memory else "") + f" (load {os.getloadavg()[0]:.1f})", flush=True)
            rows.append((warm, statistics.median(times)))
    print(f"\nmedian of {args.tries}; load average now {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"| start_run on {args.device} | warm worker | -> first train/loss row stored (s) |")
    print("|---|---|---|")
    for warm, median in rows:
        print(f"| default config | {warm} | {median:.2f} |")


if __name__ == "__main__":
    main()
