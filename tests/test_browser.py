"""End to end in a real browser: `streamlit run app.py` driven by headless Chromium.

Needs Debian's Chromium at /usr/bin/chromium and the `playwright` package
(never `playwright install`).  Without them the tests skip and say why;
with STABILITY_REQUIRE_BROWSER=1 (set by .ci/run) a missing browser fails.
Screenshots go to artifacts/ (ignored by git).
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"]

pytestmark = pytest.mark.browser


def unavailable(reason):
    if os.environ.get("STABILITY_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser test required but {reason}")
    pytest.skip(reason)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    env = dict(os.environ, STABILITY_STORE=str(log.parent / "runs.db"), PYTHONUNBUFFERED="1")
    with open(log, "w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true",
             "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
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
    yield url
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install -r requirements.txt)")
    if not os.path.exists(CHROMIUM):
        unavailable("no Chromium at /usr/bin/chromium (apt-get install chromium chromium-driver)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def metric_value(page, label):
    metric = page.locator('[data-testid="stMetric"]', has_text=label)
    return metric.locator('[data-testid="stMetricValue"]').inner_text()


def wait_for_charts(page, count):
    page.wait_for_function(
        f"document.querySelectorAll('[data-testid=\"stVegaLiteChart\"] canvas, "
        f"[data-testid=\"stVegaLiteChart\"] svg.marks').length >= {count}", timeout=60_000)


def test_gradient_flow_page_draws_and_redraws_after_a_slider_move(server, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/?cell=rnn&hidden=64&T=200&seed=0")
    page.get_by_text("‖∂h_T/∂h_0‖").first.wait_for(timeout=60_000)
    wait_for_charts(page, 2)
    before = metric_value(page, "‖∂h_T/∂h_0‖")

    # Move the T slider with the keyboard: End jumps to T = 1000.
    slider = page.locator('[data-testid="stSlider"]', has_text="Sequence length T").locator('input[type="range"]')
    slider.focus()
    slider.press("End")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stMetric\"]')].some("
        "m => m.innerText.includes('∂h_0') && !m.innerText.includes(" + repr(before) + "))", timeout=60_000)
    after = metric_value(page, "‖∂h_T/∂h_0‖")
    assert after != before
    assert re.search(r"T=1000", page.url)
    page.screenshot(path=str(ARTIFACTS / "gradient_flow_rnn.png"), full_page=True)

    page.goto(f"{server}/?cell=spectral&hidden=128&T=1000&seed=0")
    page.get_by_text("‖∂h_T/∂h_0‖").first.wait_for(timeout=60_000)
    wait_for_charts(page, 2)
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / "gradient_flow_spectral.png"), full_page=True)
    assert float(metric_value(page, "margin max|σ−1|")) <= 0.01 + 1e-6
