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
    STORES[url] = store
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
