"""The classroom view in a real browser: `streamlit run app.py` driven by headless Chromium, on a real tiny
run trained into the server's store.

Started as tests/test_browser.py starts its server and browser: Debian's Chromium at /usr/bin/chromium and
the `playwright` package (never `playwright install`); without them the test skips and says why, and with
STABILITY_REQUIRE_BROWSER=1 (set by .ci/run) a missing browser fails.  With STABILITY_SCREENSHOT_DIR set, a
1600x1000 screenshot of the view goes there as classroom.png (docs/classroom.png is one, of a longer run).
"""
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
SCREENSHOT_DIR = "STABILITY_SCREENSHOT_DIR"

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
    STORES[url] = log.parent / "runs.db"
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
        unavailable("the playwright package is not installed (pip install -e \".[test]\")")
    if not os.path.exists(CHROMIUM):
        unavailable("no Chromium at /usr/bin/chromium (apt-get install chromium chromium-driver)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def train_tiny_run(store_path) -> int:
    """A real Spectral-RNN run on the adding task, small enough for a test."""
    from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
    from stability.store import RunStore
    from stability.train import train_run

    config = RunConfig(CellConfig("spectral", 8), TaskConfig("adding", {"seq_len": 12}),
                       TrainConfig(steps=10, batch_size=16, log_every=5, eval_every=5, probe_every=5,
                                   eval_examples=32, probe_examples=8))
    with RunStore(store_path) as store:
        run_id = store.create_run(config.to_dict())
        assert train_run(config, store, run_id) == "completed"
    return run_id


def test_a_real_run_in_classroom_view_shows_what_to_look_at_and_the_cells_equations(server, browser):
    from pages.ui.classroom import EXPLANATIONS, ROOT_FONT_PX
    from stability import cells

    run_id = train_tiny_run(STORES[server])
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.goto(f"{server}/?run={run_id}&classroom=1")
    words = EXPLANATIONS["grad/h0_norm"]
    page.get_by_text(words[:60]).first.wait_for(timeout=60_000)
    page.wait_for_function("document.querySelectorAll('[data-testid=\"stVegaLiteChart\"] canvas').length >= 7",
                           timeout=60_000)
    page.locator('[data-testid="stMain"] .katex-html').first.wait_for(timeout=60_000)  # rendered by KaTeX
    tex = page.locator('[data-testid="stMain"] .katex-mathml annotation').first.text_content()
    assert all(equation in tex for equation in cells.describe("spectral").equations)
    assert page.get_by_text(words[:60]).first.is_visible()
    assert page.get_by_text("Classroom view").first.is_visible()
    assert not page.locator('[data-testid="stSidebar"]').is_visible()
    assert page.get_by_role("button", name="Start", exact=True).count() == 0
    assert page.evaluate("getComputedStyle(document.documentElement).fontSize") == f"{ROOT_FONT_PX}px"
    assert "classroom=1" in page.url and f"run={run_id}" in page.url

    if os.environ.get(SCREENSHOT_DIR):
        show_row(page, words[:60])
        folder = Path(os.environ[SCREENSHOT_DIR])
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / "classroom.png"))
    page.close()


def show_row(page, text: str) -> None:
    """Scroll the chart whose words contain ``text`` to the top of the window, below Streamlit's header."""
    page.evaluate("""text => {
        const words = [...document.querySelectorAll('[data-testid="stMarkdownContainer"]')]
            .find(element => element.innerText.includes(text));
        words.closest('[data-testid="stHorizontalBlock"]').scrollIntoView({block: 'start'});
        let scroller = words.parentElement;  // the page scrolls inside one of Streamlit's containers
        while (scroller && !(scroller.scrollHeight > scroller.clientHeight
                             && /auto|scroll/.test(getComputedStyle(scroller).overflowY))) {
            scroller = scroller.parentElement; }
        (scroller || document.scrollingElement).scrollBy(0, -90); }""", text)
    page.wait_for_timeout(1500)
