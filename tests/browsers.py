"""A real Streamlit server and a real headless Chromium for the browser tests (tests/test_browser*.py).

Debian's Chromium at /usr/bin/chromium driven by the `playwright` package (never `playwright install`).
Without them a test skips and says why; with STABILITY_REQUIRE_BROWSER=1 (set by .ci/run) a missing
browser fails.  Each module gets its own server (`streamlit run app.py` on 127.0.0.1 and a free port)
over its own store: ``STORES[url]`` is the store file a server serves.
"""
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STORES = {}  # server URL -> the store file it serves
LOGS = {}  # server URL -> the file holding its output
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"]


def unavailable(reason):
    if os.environ.get("STABILITY_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser test required but {reason}")
    pytest.skip(reason)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def streamlit_server(store, log: Path, env: dict | None = None):
    """``streamlit run app.py`` serving ``store`` (a path or URL, through $STABILITY_STORE) on 127.0.0.1
    and a free port, its output in ``log``; yields ``(url, process)`` once it answers its health check."""
    port = free_port()
    env = dict(os.environ, **(env or {}), STABILITY_STORE=str(store), PYTHONUNBUFFERED="1")
    with open(log, "w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true",
             "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    STORES[url], LOGS[url] = store, log
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"streamlit did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("streamlit")
    with streamlit_server(folder / "runs.db", folder / "server.log") as (url, _process):
        yield url


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install -e \".[test]\")")
    if not os.path.exists(CHROMIUM):
        unavailable("no Chromium at /usr/bin/chromium (apt-get install chromium chromium-driver)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def what_the_server_saw(url: str, tail: int = 4000) -> str:
    """For a failed browser test's report (tests/conftest.py): the end of the server's log, the runs of its
    store with their status and error, and the end of each worker's log; a flake in CI is then read off the
    report instead of guessed at."""
    parts = []
    log = LOGS.get(url)
    if log is not None and Path(log).exists():
        parts.append(f"--- server log ({log}), last {tail} characters ---\n{Path(log).read_text(errors='replace')[-tail:]}")
    store = STORES.get(url)
    if store is not None:
        try:
            from stability.runs.store import RunStore

            with RunStore(store) as opened:
                lines = [f"run {r.id}: {r.status} pid={r.pid} step={r.step} error={r.error!r}"
                         for r in opened.records(latest=True, limit=50)]
                parts.append("--- runs in the store ---\n" + "\n".join(lines or ["(none)"]))
                logs = opened.home / "logs"
                for worker_log in sorted(logs.glob("*.log")) if logs.is_dir() else []:
                    text = worker_log.read_text(errors="replace")[-tail // 2:]
                    parts.append(f"--- {worker_log.name} ---\n{text}")
        except Exception as error:  # a report, not a test: say what could not be read
            parts.append(f"--- the store could not be read: {error!r}")
    return "\n".join(parts)
