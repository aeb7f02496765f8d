"""A classroom watching one run: N browser tabs on one Train page, against the same run unwatched.

    python benchmarks/live_watchers.py                              # N = 1, 5, 10, 30 tabs, this checkout
    python benchmarks/live_watchers.py --before /tmp/main-code      # and the same with main's pages, side by side
    python benchmarks/live_watchers.py --watchers 1 5 --refresh "" 2  # per ?refresh= setting ('' = Auto)
    python benchmarks/live_watchers.py --clients headless --watchers 1 10 30 60   # watchers without a browser
    python benchmarks/live_watchers.py --clients headless --run long --before /tmp/main-code   # a 20,000-step run

For each checkout (this one, and ``--before``'s, a plain copy of another commit: ``git archive main | tar -x
-C DIR``) a real ``streamlit run app.py`` of that checkout on a temporary store (warm workers off: the runs
are started by this script), and one headless Chromium (Playwright on /usr/bin/chromium). For each N: a real
run (``scheduler.start_run``: rnn 128 on adding T = 100, logging every 10 steps, as long as it takes) is
measured alone for a window, then N tabs open its Train page (``/?run=ID``, one browser context each) and,
after they settle, the same run is measured for a window with them open, and alone again once they have
closed (Note [A run that drifts]). Reported: the run's steps/s with
the tabs over its steps/s alone (the same run, the same worker), the server's CPU (% of one core, from
/proc), Chromium's (all its processes), and the refresh the watchers saw: the seconds between two changes of
each tab's progress line (live_page.SHOWN_STEP_SCRIPT), median over every tab, and the longest. The worker
code is this checkout's in both cases; only the server and its pages differ.

On one 2-core machine the tabs' Chromium shares the cores with the run and the server, which a classroom's
browsers (each on its own laptop) do not: the server's CPU is the figure that carries over to a classroom,
the speed ratio at large N mostly measures Chromium. Thirty tabs did not fit at all (load 50-90, no result in
15 minutes). ``--clients headless`` replaces the tabs by benchmarks/headless_watchers.py: N websocket clients
in one process of their own that ask the server for what a tab asks (the page's run, each fragment's
auto-rerun, the browser's message cache) and draw nothing; "watchers CPU" is then that process's. The
server's work a watcher is the same; the run shares its cores with the server and a few % of client
instead of N renderers, so the ratio is the one a classroom (browsers elsewhere) would see.

``--run long``: the run is the README's default shape at 20,000 steps with the trainer's own cadence (a log
every 100 steps, ~200 points), whose rows come every few seconds: the refresh seen is then the status line's
own rhythm between log steps (pages/ui/status.py, Note [A status that moves]; the step a run writes between
its log steps, stability/training/sinks.py, Note [A moving step]). That step is the worker's doing, so with
``--run long`` each checkout's runs are started by that checkout's code (its queue, hence its worker:
``python -c`` in its folder), not this one's.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig  # noqa: E402
from stability.runs.store import RunStore  # noqa: E402
from stability.workers import scheduler  # noqa: E402

from live_page import (CHROMIUM, CHROMIUM_ARGS, SHOWN_STEP_SCRIPT, SPEED, chromium_pids, cpu_seconds, started_run,  # noqa: E402
                       descendants, fmt_interval, shown_intervals, streamlit_server)

DRIFT = 0.10  # the run's two windows alone differing by more than this: its ratio is flagged (Note [A run that drifts])

# Note [A run that drifts]
# ------------------------
# The ratio compares the run watched with the same run alone, so it assumes the run's own speed holds still.
# It does not always: the classroom run (rnn 128 on adding, T = 100) slows from ~80 to ~10 steps/s on one CPU
# thread near step 6,800 (~90 s in), watched or not, when its backward through time starts carrying float32
# subnormals (x86 handles each in microcode: torch.set_flush_denormal(True) keeps it at ~80; 2026-11-28,
# benchmarks/subnormals.py). Measured once alone and then watched, a 40-s window put 60 watchers at 0.64x and a
# 60-s one at 0.37x of a run that was slowing by itself. So the run is measured alone before the watchers come
# and again after they leave, the ratio is the watched speed over the faster of the two (a run that only slows
# by itself is never faster alone than that, so the ratio errs against the watchers), and a case whose two
# windows alone differ by more than DRIFT is flagged. Keep the windows short (20 s): the slowdown sets in
# gradually from ~70 s.

RUNS = {  # --run: what the watchers watch
    "classroom": RunConfig(cell=CellConfig("rnn", 128), task=TaskConfig("adding", {"seq_len": 100}),
                           train=TrainConfig(steps=1_000_000, log_every=10, eval_every=200, probe_every=200)),
    "long": RunConfig(cell=CellConfig("rnn", 128), task=TaskConfig("adding", {"seq_len": 100}),
                      train=TrainConfig(steps=20_000)),  # the trainer's cadence: a log every 100 steps
}
START_SCRIPT = ("import json, sys\nfrom stability.config import RunConfig\n"
                "try:\n    from stability.workers.scheduler import start_run\n"
                "except ImportError:  # a checkout from before the workers room (issue 34)\n"
                "    from stability.execution.runner import start_run\n"
                "print(start_run(RunConfig.from_dict(json.loads(sys.argv[1])), sys.argv[2], max_concurrent=1))")


def started_run_of(root: Path, store_path: Path, config: RunConfig) -> int:
    """``config`` started by the checkout ``root``'s own queue (so its worker is that checkout's), once it has
    logged its speed, as live_page.started_run does for this checkout."""
    if root.resolve() == ROOT:
        return started_run(store_path, config)
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-c", START_SCRIPT, json.dumps(config.to_dict()), str(store_path)],
                          cwd=root, env=env, capture_output=True, text=True, check=True)
    run_id = int(done.stdout.split()[-1])
    with RunStore(store_path) as store:
        deadline = time.monotonic() + 180
        while store.metrics(run_id, names=[SPEED]).empty:
            if time.monotonic() > deadline:
                raise RuntimeError(f"run {run_id} never logged {SPEED}: {store.record(run_id)}")
            time.sleep(0.2)
    return run_id


def stopped(store_path: Path, run_id: int) -> None:
    """Stop the run; a worker the stop could not prove ours (another checkout's) is killed by its pid."""
    scheduler.stop_run(run_id, store_path)
    with RunStore(store_path) as store:
        record = store.record(run_id)
    if record.status in ("queued", "running") and record.pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGKILL)


def speed(store_path: Path, run_id: int, start: float, end: float) -> float:
    """The run's steps/s between its first and last speed rows inside [start, end]."""
    with RunStore(store_path) as store:
        rows = store.metrics(run_id, names=[SPEED])
    window = rows[(rows["wall_time"] >= start) & (rows["wall_time"] <= end)].sort_values("step")
    if len(window) < 2:
        return float("nan")
    return (window["step"].iloc[-1] - window["step"].iloc[0]) / (window["wall_time"].iloc[-1] - window["wall_time"].iloc[0])


def window(seconds: float, groups: dict, wait) -> tuple[dict, float, float]:
    """CPU share of one core of each group of pids over a window of ``seconds``, and the window's ends."""
    before, start = {name: cpu_seconds(pids()) for name, pids in groups.items()}, time.time()
    wait(seconds)
    end = time.time()
    return {name: (cpu_seconds(pids()) - before[name]) / (end - start) for name, pids in groups.items()}, start, end


def open_tabs(browser, url: str, run_id: int, count: int, query: str, pages: list) -> None:
    """``count`` tabs on the run's Train page, put in ``pages`` (the caller closes them, even when one fails to
    open), each once its progress line is drawn."""
    for _ in range(count):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.add_init_script(SHOWN_STEP_SCRIPT)
        pages.append(page)
        page.goto(f"{url}/?run={run_id}{query}", wait_until="domcontentloaded", timeout=180_000)
    for page in pages:
        with contextlib.suppress(Exception):
            page.locator('[data-testid="stMain"] [data-testid="stProgress"]').first.wait_for(timeout=60_000)


def one_case(args, browser, server, url: str, store_path: Path, count: int, query: str, root: Path = ROOT) -> dict:
    """The run alone, then watched by ``count`` tabs (or headless watchers, ``browser`` None): speeds, CPU
    shares and the refresh seen. ``root``: the checkout whose queue starts the run with ``--run long``."""
    run_id = started_run_of(root if args.run == "long" else ROOT, store_path, RUNS[args.run])
    me = os.getpid()
    groups = {"server": lambda: {server.pid},
              "watchers": lambda: chromium_pids(descendants(me) - {server.pid} - descendants(server.pid))}
    try:
        time.sleep(args.settle)
        alone, start, end = window(args.seconds, groups, time.sleep)
        alone_speed = speed(store_path, run_id, start, end)
        if browser is None:
            watched, start, end, seen, errors = headless_case(args, groups, url, f"run={run_id}{query}", count)
        else:
            errors = []
            pages: list = []
            try:
                open_tabs(browser, url, run_id, count, query, pages)
                pages[0].wait_for_timeout(args.settle * 1000)
                watched, start, end = window(args.seconds, groups, lambda s: pages[0].wait_for_timeout(s * 1000))
                seen = [interval for page in pages for interval in shown_intervals(page, start, end)]
            finally:
                for page in pages:
                    page.close()
        watched_speed = speed(store_path, run_id, start, end)
        time.sleep(args.settle)  # the watchers gone: the run alone again, for its own drift (Note [A run that drifts])
        _, start, end = window(args.seconds, groups, time.sleep)
        after_speed = speed(store_path, run_id, start, end)
    finally:
        stopped(store_path, run_id)
    return {"alone": max(alone_speed, after_speed), "before": alone_speed, "after": after_speed,
            "watched": watched_speed, "server_alone": alone["server"],
            "server": watched["server"], "watchers": watched["watchers"], "seen": seen, "errors": errors}


def headless_case(args, groups: dict, url: str, query: str, count: int):
    """``count`` headless watchers (benchmarks/headless_watchers.py, a process of their own) on the page at
    ``query``; the CPU window over the same seconds as theirs, after they settled."""
    out = Path(tempfile.mkdtemp(prefix="stability-headless-")) / "watchers.json"
    begin = time.time() + args.settle + count * 0.1  # each one's first script run, before the window
    client = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "headless_watchers.py"), url, query,
                               "--watchers", str(count), "--start", str(begin), "--seconds", str(args.seconds),
                               "--out", str(out)])
    groups = {**groups, "watchers": lambda: {client.pid}}
    try:
        time.sleep(max(0.0, begin - time.time()))
        watched, start, end = window(args.seconds, groups, time.sleep)
        client.wait(timeout=args.seconds + 60)
        result = json.loads(out.read_text())
    finally:
        if client.poll() is None:
            client.kill()
        shutil.rmtree(out.parent, ignore_errors=True)
    seen = [later - earlier for w in result["watchers"] for earlier, later in zip(w["changes"], w["changes"][1:])]
    return watched, start, end, seen, result["errors"]


def code_cases(args, root: Path, label: str, folder: Path, rows: list) -> None:
    """Every (refresh, N) case against a server of the checkout ``root``."""
    store_path = folder / label / "runs.db"
    store_path.parent.mkdir(parents=True)
    RunStore(store_path).close()
    with streamlit_server(store_path, {"STABILITY_WARM_WORKERS": "0"}, root=root) as (server, url), \
            contextlib.ExitStack() as stack:
        browser = None
        if args.clients == "chromium":
            from playwright.sync_api import sync_playwright

            playwright = stack.enter_context(sync_playwright())
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            stack.callback(browser.close)
            warm = browser.new_page()
            warm.goto(url, wait_until="domcontentloaded")
            time.sleep(5)
            warm.close()
        else:  # the server's first script run (imports) before anything is timed
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "headless_watchers.py"), url, "",
                            "--settle", "0", "--seconds", "8", "--out", str(folder / "warm.json")], check=False)
        for setting in args.refresh:
            query = f"&refresh={setting}" if setting else ""
            for count in args.watchers:
                result = one_case(args, browser, server, url, store_path, count, query, root)
                rows.append((label, setting or "Auto", count, result))
                print(f"  {label}, refresh {setting or 'Auto'}, {count} {args.clients} watchers: "
                      f"{result['alone']:.3g} -> {result['watched']:.3g} steps/s, server "
                      f"{100 * result['server']:.0f}%, watchers {100 * result['watchers']:.0f}%, seen "
                      f"{fmt_interval(result['seen'])}; load {os.getloadavg()[0]:.1f}"
                      + (f"; errors: {result['errors'][:2]}" if result["errors"] else ""), flush=True)


def report(args, rows: list) -> None:
    print(f"\nthe run: {args.run} ({RUNS[args.run].train.steps:,} steps, a log every "
          f"{RUNS[args.run].train.resolved_log_every()} steps)")
    print(f"{args.seconds:g} s windows after {args.settle:g} s; machine: {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the end.\n")
    watchers = "Chromium tabs" if args.clients == "chromium" else "headless watchers"
    print(f"| pages | refresh | {watchers} | steps/s alone, before / after | steps/s watched | ratio (target ≥ 0.9) | server CPU, "
          f"alone | server CPU, watched (target ≤ 100 % at 30) | watchers' CPU | refresh seen (median, max) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    drifted = False
    for label, setting, count, r in rows:
        drift = bool(abs(r["after"] - r["before"]) / max(r["before"], r["after"]) > DRIFT)
        drifted |= drift
        print(f"| {label} | {setting} | {count} | {r['before']:.3g} / {r['after']:.3g}{' (drifted)' * drift} | "
              f"{r['watched']:.3g} | {r['watched'] / r['alone']:.2f}× | {100 * r['server_alone']:.0f} % | "
              f"{100 * r['server']:.0f} % | {100 * r['watchers']:.0f} % | {fmt_interval(r['seen'])} |")
    print("\n(CPU: % of one core over the window, from utime + stime in /proc; a watcher's refresh seen: seconds "
          "between two changes of its progress line; the ratio: watched over the faster of the two windows alone.)")
    if drifted:
        print(f"\n(drifted: the run's own speed changed by more than {DRIFT:.0%} between its two windows alone, the "
              "watchers gone in between: its ratio, over the faster window, errs against the watchers. Note [A run "
              "that drifts].)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watchers", type=int, nargs="+", default=[1, 5, 10, 30])
    parser.add_argument("--refresh", nargs="*", default=[""], help="?refresh= settings ('' = the page's Auto)")
    parser.add_argument("--before", type=Path, help="another checkout's root, its pages measured first")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--clients", choices=["chromium", "headless"], default="chromium",
                        help="tabs in a real Chromium, or benchmarks/headless_watchers.py's protocol clients")
    parser.add_argument("--run", choices=sorted(RUNS), default="classroom",
                        help="classroom: a log every 10 steps; long: the default run at 20,000 steps (its own cadence)")
    args = parser.parse_args()
    # `timeout` (SIGTERM) ends the benchmark through its cleanups: the runs it started are stopped, its server ended
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.clients == "chromium" and not os.path.exists(CHROMIUM):
        sys.exit(f"needs Chromium at {CHROMIUM}")
    folder = Path(tempfile.mkdtemp(prefix="stability-watchers-"))
    rows: list = []
    try:
        if args.before is not None:
            code_cases(args, args.before.resolve(), "before", folder, rows)
        code_cases(args, ROOT, "after", folder, rows)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report(args, rows)


if __name__ == "__main__":
    main()
