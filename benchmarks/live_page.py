"""Does watching a run slow it down?  Real workers, side by side in one run.

    python benchmarks/live_page.py                       # a live Train page against no page
    python benchmarks/live_page.py --neighbour busy      # thread policies beside a busy process
    python benchmarks/live_page.py --cost --refresh "" 2 10 off   # what a watched page costs, per setting

``--neighbour page`` (the issue's check): a real ``streamlit run app.py``
server on a temporary store and a real headless Chromium on the Train page
of the run (``/?run=ID``), against the same run with the server up and no
page open.  Target: steps/s with the page open >= 0.8x of without, for the
README's default run (rnn 128, adding T = 100, batch 64, 2000 steps) and for
a tiny one (rnn 16, T = 20, log every step).  The server's CPU (and the
browser's: the Playwright driver and Chromium) is read from /proc over the
same window, and so is the number of websocket messages the page receives
(proof that it is live: a page that stopped redrawing would pass trivially).
CPU is reported as % of one core and as CPU seconds a minute (utime + stime
from /proc/<pid>/stat), which other load on the machine barely changes,
unlike steps/s ratios; Chromium (all its processes) and the Playwright
driver are counted apart.

``--cost``: no worker; a synthetic run written by a thread of this process at
a real run's cadence (the default run's and the tiny run's: rows, evaluations,
probes), watched by one Train page per ``?refresh=`` setting ('' = the page's
default, Auto); the server's and Chromium's CPU seconds a minute over the
window.  What the page itself costs, measured before and after each change of
stability/live/pace.py (Note [Watching cheaply]).

``--neighbour busy``: the page replaced by a Python ``while True`` loop (one
busy core, about what a Streamlit server costs while a live page redraws),
for each worker thread policy: the thread count (``$STABILITY_THREADS``) and
OpenMP's wait policy (``OMP_WAIT_POLICY``; empty = libgomp's default, which
spins before it sleeps; libgomp warns once about the empty value in the run's log).  ``policy`` is what ``stability.workers.threads`` gives
a worker on this machine.

Every run is started by ``stability.workers.scheduler.start_run``, so the worker is the
real one with the real thread policy.  steps/s = (last step - first step) /
(their wall-time difference) over the ``speed/steps_per_s`` rows the worker
wrote inside the window; a window with fewer than two rows gives an upper
bound (``<=``).  Conditions alternate within each round, so both sides of a
ratio see the same machine.  Needs /proc (Linux); ``--neighbour page`` needs
the playwright package and /usr/bin/chromium (never ``playwright install``).
"""
from __future__ import annotations

import argparse
import math
import contextlib
import os
import shutil
import socket
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig  # noqa: E402
from stability.execution import lifecycle  # noqa: E402
from stability.runs.status import TERMINAL  # noqa: E402
from stability.runs.store import RunStore  # noqa: E402
from stability.workers import threads as thread_policy  # noqa: E402
from stability.workers import scheduler

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]
TICKS = os.sysconf("SC_CLK_TCK")
SPEED = "speed/steps_per_s"
MIN_LIVE_MESSAGES_S = 1.0  # a page redrawing every 5 s gets ~25 websocket messages at each redraw

CONFIGS = {
    # the README's default run: every *_every left to the trainer (log every 10 steps at 2000 steps)
    "default (rnn 128, T=100)": RunConfig(cell=CellConfig("rnn", 128), task=TaskConfig("adding", {"seq_len": 100}),
                                          train=TrainConfig(steps=2000)),
    "tiny (rnn 16, T=20, log every step)": RunConfig(
        cell=CellConfig("rnn", 16), task=TaskConfig("adding", {"seq_len": 20}),
        train=TrainConfig(steps=1_000_000, log_every=1, eval_every=100, probe_every=100)),
}


# ----------------------------------------------------------------- /proc
def cpu_seconds(pids) -> float:
    """utime + stime of ``pids`` (those still alive), in seconds."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)
    return total / TICKS


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


# ----------------------------------------------------------------- what the browser shows
# Each time the panel draws a new look at the run, its progress line ("step 1,230 / 2,000 · ETA ...") changes;
# a timer in the page notes when (every 0.1 s), so the interval between two changes is the refresh a watcher sees.
SHOWN_STEP_SCRIPT = """
window.__shown = [];
let shownText = null;
setInterval(() => {
  const node = document.querySelector('[data-testid="stMain"] [data-testid="stProgress"]');
  const text = node ? node.innerText : null;
  if (text !== null && text !== shownText) {
    shownText = text;
    window.__shown.push((performance.timeOrigin + performance.now()) / 1000);
  }
}, 100);
"""


def shown_intervals(page, start: float, end: float) -> list[float]:
    """Seconds between the changes of the page's progress line within [start, end] (epoch seconds)."""
    times = [t for t in page.evaluate("window.__shown || []") if start <= t <= end]
    return [later - earlier for earlier, later in zip(times, times[1:])]


def fmt_interval(intervals: list[float]) -> str:
    """Median interval (and the longest) between two updates a watcher saw; '—' without two updates."""
    if not intervals:
        return "—"
    return f"{statistics.median(intervals):.2g} s (max {max(intervals):.2g})"


# ----------------------------------------------------------------- neighbours
class NoNeighbour:
    label = "alone"
    messages = 0  # websocket messages the page received (0 without a page)

    def begin(self, run_id: int) -> None:
        pass

    def end(self) -> None:
        pass

    def shown(self, start: float, end: float) -> list[float]:
        return []


class BusyLoop(NoNeighbour):
    """A Python ``while True`` loop in its own process, bounded in time."""

    label = "busy loop beside"

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.process = None

    def begin(self, run_id: int) -> None:
        code = f"import time\nend = time.time() + {self.limit_s}\nwhile time.time() < end:\n    pass\n"
        self.process = subprocess.Popen([sys.executable, "-c", code])

    def end(self) -> None:
        self.process.kill()
        self.process.wait()


class LivePage(NoNeighbour):
    """The Train page of the run in a real Chromium, served by the benchmark's Streamlit server."""

    label = "Train page open"

    def __init__(self, browser, url: str):
        self.browser, self.url, self.page = browser, url, None

    def begin(self, run_id: int) -> None:
        self.page = self.browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.add_init_script(SHOWN_STEP_SCRIPT)
        self.messages = 0  # proof that the page is live: the server's websocket messages to it

        def count(websocket):
            websocket.on("framereceived", lambda frame: setattr(self, "messages", self.messages + 1))

        self.page.on("websocket", count)
        self.page.goto(f"{self.url}/?run={run_id}", wait_until="domcontentloaded")
        with contextlib.suppress(Exception):  # whatever the page draws, the window still measures
            self.page.get_by_text("steps/s").first.wait_for(timeout=60_000)

    def shown(self, start: float, end: float) -> list[float]:
        return shown_intervals(self.page, start, end)

    def end(self) -> None:
        self.page.close()


# ----------------------------------------------------------------- one measurement
def started_run(store_path: Path, config: RunConfig) -> int:
    """``config`` started as a background run, once it has logged its speed (at most 180 s)."""
    run_id = scheduler.start_run(config, store_path, max_concurrent=1)
    with RunStore(store_path) as store:
        deadline = time.monotonic() + 180
        while store.metrics(run_id, names=[SPEED]).empty:
            if store.record(run_id).status in TERMINAL or time.monotonic() > deadline:
                raise RuntimeError(f"run {run_id} never logged {SPEED}: {store.record(run_id)}")
            time.sleep(0.2)
    return run_id


def measure(store_path: Path, config: RunConfig, neighbour, seconds: float, settle_s: float,
            watched: dict[str, set[int]]) -> dict:
    """Start ``config`` as a background run, let ``neighbour`` begin, and measure a window of ``seconds``."""
    run_id = started_run(store_path, config)
    with RunStore(store_path) as store:
        worker = store.record(run_id).pid
        device = store.record(run_id).device
        try:
            neighbour.begin(run_id)
            time.sleep(settle_s)
            groups = {"worker": {worker}, **{name: pids() for name, pids in watched.items()}}
            before = {name: cpu_seconds(pids) for name, pids in groups.items()}
            messages, start = neighbour.messages, time.time()
            _wait(neighbour, seconds)
            end = time.time()
            after = {name: cpu_seconds(pids) for name, pids in groups.items()}
            messages = neighbour.messages - messages
            shown = neighbour.shown(start, end)
        finally:
            neighbour.end()
            scheduler.stop_run(run_id, store_path)
        rows = store.metrics(run_id, names=[SPEED])
    window = rows[(rows["wall_time"] >= start) & (rows["wall_time"] <= end)].sort_values("step")
    if len(window) >= 2:
        speed, bound = ((window["step"].iloc[-1] - window["step"].iloc[0])
                        / (window["wall_time"].iloc[-1] - window["wall_time"].iloc[0])), False
    else:  # at most one logged step inside the window: fewer than 2 log intervals fit
        log_every = config.train.resolved_log_every()
        speed, bound = (len(window) + 1) * log_every / (end - start), True
    cpu = {name: (after[name] - before[name]) / (end - start) for name in groups}
    return {"speed": speed, "bound": bound, "cpu": cpu, "device": device, "messages": messages / (end - start),
            "shown": shown}


def _wait(neighbour, seconds: float) -> None:
    """Sleep; with a page open, let Playwright deliver its events (it runs on this thread)."""
    if isinstance(neighbour, LivePage):
        neighbour.page.wait_for_timeout(seconds * 1000)
    else:
        time.sleep(seconds)


def fmt_speed(results: list[dict]) -> str:
    value = statistics.median(r["speed"] for r in results)
    return ("≤ " if any(r["bound"] for r in results) else "") + f"{value:.3g}"


def ratio(with_: list[dict], without: list[dict]) -> str:
    """median steps/s of ``with_`` over that of ``without``; "≤" when only the numerator is a bound."""
    upper, lower = any(r["bound"] for r in with_), any(r["bound"] for r in without)
    if upper and lower:
        return "?"
    value = statistics.median(r["speed"] for r in with_) / statistics.median(r["speed"] for r in without)
    return ("≤ " if upper else "≥ " if lower else "") + f"{value:.3g}×"


def cpu(results: list[dict], name: str) -> str:
    """Median CPU of ``name`` as % of one core and CPU seconds a minute."""
    share = statistics.median(r['cpu'][name] for r in results)
    return f"{100 * share:.0f}% ({60 * share:.1f} s/min)"


# ----------------------------------------------------------------- the two benchmarks
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def streamlit_server(store_path: Path, extra_env: dict[str, str] | None = None, root: Path = ROOT):
    """A real ``streamlit run app.py`` of the checkout ``root`` on ``store_path`` (with ``extra_env``), once
    its health check answers; yields (process, url) and ends it afterwards (benchmarks/first_point.py,
    live_watchers.py and sweep.py too)."""
    port = free_port()
    env = dict(os.environ, STABILITY_STORE=str(store_path), PYTHONUNBUFFERED="1", **(extra_env or {}))
    log = open(store_path.parent / "server.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.read().strip() == b"ok":
                        break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("streamlit did not start:\n" + (store_path.parent / "server.log").read_text()[-2000:])
            time.sleep(0.5)
        yield process, url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def page_benchmark(args, folder: Path) -> None:
    from playwright.sync_api import sync_playwright

    store_path = folder / "runs.db"
    RunStore(store_path).close()
    me = os.getpid()
    with streamlit_server(store_path) as (server, url), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # warm the server up (first script run, imports) before anything is timed
        warm = browser.new_page()
        warm.goto(url, wait_until="domcontentloaded")
        time.sleep(5)
        warm.close()

        def browser_pids():
            return descendants(me) - {server.pid} - descendants(server.pid) - {
                p for p in descendants(me) if b"stability.cli.worker" in _cmdline(p)}

        watched = {"server": lambda: {server.pid}, "chromium": lambda: chromium_pids(browser_pids()),
                   "driver": lambda: browser_pids() - chromium_pids(browser_pids())}
        neighbours = [NoNeighbour(), LivePage(browser, url)]
        results = run_rounds(args, store_path, neighbours, watched)
        browser.close()
    print(f"\nWorker: {results['device']}; {args.rounds} round(s), {args.seconds:g} s windows; "
          f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end.\n")
    print("| run | steps/s, no page | steps/s, Train page open | ratio (target ≥ 0.9) | refresh seen "
          "| server CPU, no page | server CPU, page | Chromium CPU, page | Playwright driver, page "
          "| worker CPU, page | page messages/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in CONFIGS:
        without, with_ = results[name, "alone"], results[name, LivePage.label]
        messages = statistics.median(r["messages"] for r in with_)
        seen = fmt_interval([interval for r in with_ for interval in r["shown"]])
        print(f"| {name} | {fmt_speed(without)} | {fmt_speed(with_)} | {ratio(with_, without)} | {seen} "
              f"| {cpu(without, 'server')} | {cpu(with_, 'server')} | {cpu(with_, 'chromium')} "
              f"| {cpu(with_, 'driver')} | {cpu(with_, 'worker')} | {messages:.1f} |")
    print("\n(CPU: % of one core over the window = CPU seconds a minute ÷ 0.6, from utime + stime in /proc.)")
    for name in CONFIGS:
        messages = statistics.median(r["messages"] for r in results[name, LivePage.label])
        if messages < MIN_LIVE_MESSAGES_S:
            print(f"\nWARNING: the Train page of {name} received {messages:.1f} messages/s: it was not "
                  "redrawing (an error on the page?), so its ratio measures no live page.")


def chromium_pids(pids) -> set[int]:
    """Those of ``pids`` that are Chromium (browser, renderer, GPU and utility processes)."""
    chromium = {pid for pid in pids if b"chrom" in _cmdline(pid).split(b"\0")[0].lower()}
    return chromium


def _cmdline(pid: int) -> bytes:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


POLICIES = {  # name: (STABILITY_THREADS, OMP_WAIT_POLICY); "" = libgomp's default (spin, then sleep)
    "old: cores//runs threads, default wait": (None, ""),
    "cores//runs threads, PASSIVE": (None, "PASSIVE"),
    "1 thread, default wait": ("1", ""),
    "policy: (cores-1)//runs threads, PASSIVE": ("policy", "PASSIVE"),
}


def busy_benchmark(args, folder: Path) -> None:
    old_threads = str(max(1, thread_policy.available_cores() // 1))
    new_threads = str(thread_policy.worker_threads(1))
    table = []
    for policy, (threads, wait) in POLICIES.items():
        threads = old_threads if threads is None else new_threads if threads == "policy" else threads
        saved = {name: os.environ.get(name) for name in (thread_policy.THREADS_ENV, "OMP_WAIT_POLICY")}
        os.environ[thread_policy.THREADS_ENV], os.environ["OMP_WAIT_POLICY"] = threads, wait
        try:
            store_path = folder / f"policy-{len(table)}" / "runs.db"
            store_path.parent.mkdir()
            neighbours = [NoNeighbour(), BusyLoop(args.seconds + args.settle + 30)]
            table.append((policy, threads, run_rounds(args, store_path, neighbours, {})))
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    print(f"\n{args.rounds} round(s), {args.seconds:g} s windows; machine: {os.cpu_count()} cores "
          f"({thread_policy.available_cores()} usable), load average {os.getloadavg()[0]:.1f} at the end.\n")
    print("| run | worker policy | threads | steps/s alone | steps/s, busy loop beside | busy ÷ alone "
          "| busy ÷ the policy's busy |")
    print("|---|---|---|---|---|---|---|")
    for name in CONFIGS:
        reference = table[-1][2][name, BusyLoop.label]  # the last policy is stability.workers.threads' own
        for policy, threads, results in table:
            alone, busy = results[name, "alone"], results[name, BusyLoop.label]
            print(f"| {name} | {policy} | {threads} | {fmt_speed(alone)} | {fmt_speed(busy)} "
                  f"| {ratio(busy, alone)} | {ratio(busy, reference)} |")


# ----------------------------------------------------------------- what a watched page costs
# A synthetic run: rows written by a thread of this process at a real run's cadence, so the server and
# the browser are measured with no worker beside them (CPU time is what they used, whatever else runs).
PROFILES = {  # name: (steps/s, log every, probe every, T of the probe, eval every)
    "default (rnn 128, T=100)": (20.0, 10, 100, 100, 100),
    "tiny (rnn 16, T=20, log every step)": (700.0, 1, 100, 20, 100),
}
LOGGED = ("train/loss", "train/mse", "train/lr", "grad/h0_norm_train", "grad/recurrent_norm", "grad/total_norm",
          "progress/elapsed_s", "progress/eta_s", "progress/examples", "speed/steps_per_s", "sv/condition",
          "sv/margin", "sv/max", "sv/min")
EVALUATED = ("val/loss", "val/mse", "gap/loss", "gap/mse", "grad/h0_norm", "grad/A_h_norm")


class SyntheticRun:
    """A ``running`` run whose rows a thread appends every ``period`` seconds, as a worker would."""

    def __init__(self, store_path: Path, profile: tuple, period: float = 0.1):
        self.store_path, self.profile, self.period = store_path, profile, period
        config = RunConfig(cell=CellConfig("rnn", 16), task=TaskConfig("adding", {"seq_len": profile[3]}),
                           train=TrainConfig(steps=10_000_000))
        with RunStore(store_path) as store:  # claimed and begun as a trainer's run is (the run lifecycle)
            self.claim = lifecycle.create_claimed(store, config)
            self.run_id = self.claim.run_id
            lifecycle.begin_training(store, self.claim, dict(device="cpu (synthetic)", metric="mse", baseline=1 / 6,
                                                             baseline_label="always predict 1", total_steps=10_000_000))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._write, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        with RunStore(self.store_path) as store:
            lifecycle.settle(store, self.claim, "stopped")

    def _rows(self, step: int, now: float) -> tuple[list, list]:
        speed, log_every, probe_every, length, eval_every = self.profile
        value = 0.2 + 0.1 * math.exp(-step / 5000) * (1 + 0.3 * math.sin(step / 37))
        scalars = [(step, now, name, speed if name == SPEED else value * (1 + index))
                   for index, name in enumerate(LOGGED)]  # the run's true speed: what Auto follows
        if step % eval_every == 0:
            scalars += [(step, now, name, value * 1e-3 ** index) for index, name in enumerate(EVALUATED)]
        series = ([(step, now, "grad/h_t_norm", t, 10.0 ** (t - length) * value) for t in range(length)]
                  if step % probe_every == 0 else [])
        return scalars, series

    def _write(self) -> None:
        speed, log_every = self.profile[0], self.profile[1]
        with RunStore(self.store_path) as store:
            started, step = time.monotonic(), 0
            while not self.stop.wait(self.period):
                due = int((time.monotonic() - started) * speed) // log_every * log_every
                scalars, series, now = [], [], time.time()
                while step + log_every <= due:
                    step += log_every
                    more, vectors = self._rows(step, now)
                    scalars += more
                    series += vectors
                if scalars:
                    store.flush(self.run_id, scalars, series, heartbeat_step=step)


def page_cost(browser, url: str, store_path: Path, server_pid: int, profile: tuple, query: str,
              seconds: float, settle_s: float) -> dict:
    """Server and browser CPU seconds per minute while one Train page watches a synthetic run."""
    me = os.getpid()
    with SyntheticRun(store_path, profile) as run:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{url}/?run={run.run_id}{query}", wait_until="domcontentloaded")
            with contextlib.suppress(Exception):
                page.get_by_text("steps/s").first.wait_for(timeout=60_000)
            page.wait_for_timeout(settle_s * 1000)
            browser_pids = chromium_pids(descendants(me) - {server_pid} - descendants(server_pid))
            before = cpu_seconds({server_pid}), cpu_seconds(browser_pids), time.monotonic()
            page.wait_for_timeout(seconds * 1000)
            after = cpu_seconds({server_pid}), cpu_seconds(browser_pids), time.monotonic()
            charts = page.locator('[data-testid="stVegaLiteChart"]').count()
            if not charts:
                problems = page.locator('[data-testid="stAlert"], [data-testid="stException"]').all_inner_texts()
                print(f"WARNING: no chart on the page: {' | '.join(problems)[:500] or 'no message'}")
        finally:
            page.close()
    minutes = (after[2] - before[2]) / 60
    return {"server": (after[0] - before[0]) / minutes, "browser": (after[1] - before[1]) / minutes,
            "charts": charts}


def cost_benchmark(args, folder: Path) -> None:
    from playwright.sync_api import sync_playwright

    store_path = folder / "runs.db"
    RunStore(store_path).close()
    queries = {setting: f"&refresh={setting}" if setting else "" for setting in args.refresh}
    rows = []
    with streamlit_server(store_path) as (server, url), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        warm = browser.new_page()
        warm.goto(url, wait_until="domcontentloaded")
        time.sleep(5)
        warm.close()
        for round_ in range(args.rounds):
            for name, profile in PROFILES.items():
                for setting, query in queries.items():
                    result = page_cost(browser, url, store_path, server.pid, profile, query, args.seconds,
                                       args.settle)
                    rows.append((name, setting or "page default", result))
                    print(f"  round {round_ + 1}, {name}, refresh {setting or 'default'}: server "
                          f"{result['server']:.1f} CPU s/min, browser {result['browser']:.1f} CPU s/min, "
                          f"{result['charts']} charts", flush=True)
        browser.close()
    print(f"\n{args.rounds} round(s), {args.seconds:g} s windows after {args.settle:g} s; machine: "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end.\n")
    print("| synthetic run | refresh | server CPU s/min | Chromium CPU s/min | charts on the page |")
    print("|---|---|---|---|---|")
    for name in PROFILES:
        for setting in [setting or "page default" for setting in queries]:
            results = [r for n, s, r in rows if n == name and s == setting]
            print(f"| {name} | {setting} | {statistics.median(r['server'] for r in results):.1f} "
                  f"| {statistics.median(r['browser'] for r in results):.1f} "
                  f"| {min(r['charts'] for r in results)} |")


def run_rounds(args, store_path: Path, neighbours, watched) -> dict:
    """Every (config, neighbour) pair once per round, the neighbour order flipped every other round."""
    results: dict = {}
    for round_ in range(args.rounds):
        for name, config in CONFIGS.items():
            order = neighbours if round_ % 2 == 0 else neighbours[::-1]
            for neighbour in order:
                result = measure(store_path, config, neighbour, args.seconds, args.settle, watched)
                results.setdefault((name, neighbour.label), []).append(result)
                results["device"] = result["device"]
                print(f"  round {round_ + 1}, {name}, {neighbour.label}: {result['speed']:.3g} steps/s"
                      f"{' (upper bound)' if result['bound'] else ''}, "
                      + ", ".join(f"{k} CPU {100 * v:.0f}%" for k, v in result["cpu"].items())
                      + f", page messages {result['messages']:.1f}/s", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--neighbour", choices=["page", "busy"], default="page")
    parser.add_argument("--cost", action="store_true",
                        help="only what a watched page costs: server and Chromium CPU s/min beside a synthetic run")
    parser.add_argument("--refresh", nargs="*", default=[""],
                        help="with --cost: the page's refresh settings to compare (?refresh=...; '' = its default)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each measured window")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between the neighbour's start and the window")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    # `timeout` (SIGTERM) ends the benchmark through its cleanups: the runs it started are stopped, its server ended
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if (args.cost or args.neighbour == "page") and not (os.path.exists(CHROMIUM) and shutil.which(sys.executable)):
        sys.exit(f"needs Chromium at {CHROMIUM}")
    folder = Path(tempfile.mkdtemp(prefix="stability-live-page-"))
    try:
        if args.cost:
            cost_benchmark(args, folder)
        else:
            (page_benchmark if args.neighbour == "page" else busy_benchmark)(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
