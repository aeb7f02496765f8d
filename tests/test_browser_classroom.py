"""The classroom view in a real browser: `streamlit run app.py` driven by headless Chromium, on a real tiny
run trained into the server's store.

Started as tests/test_browser.py starts its server and browser: Debian's Chromium at /usr/bin/chromium and
the `playwright` package (never `playwright install`); without them the test skips and says why, and with
STABILITY_REQUIRE_BROWSER=1 (set by .ci/run) a missing browser fails.  With STABILITY_SCREENSHOT_DIR set, a
1600x1000 screenshot of the view goes there as classroom.png (docs/classroom.png is one, of a longer run).
"""
import os
from pathlib import Path

import pytest

from browsers import STORES, browser, server  # noqa: F401 - the fixtures of tests/browsers.py

SCREENSHOT_DIR = "STABILITY_SCREENSHOT_DIR"

pytestmark = pytest.mark.browser


def train_tiny_run(store_path) -> int:
    """A real Spectral-RNN run on the adding task, small enough for a test."""
    from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
    from stability.runs.store import RunStore
    from stability.execution.lifecycle import train_run

    config = RunConfig(CellConfig("spectral", 8), TaskConfig("adding", {"seq_len": 12}),
                       TrainConfig(steps=10, batch_size=16, log_every=5, eval_every=5, probe_every=5,
                                   eval_examples=32, probe_examples=8))
    with RunStore(store_path) as store:
        run_id = store.create_run(config.to_dict())
        assert train_run(config, store, run_id).status == "completed"
    return run_id


def test_a_real_run_in_classroom_view_shows_what_to_look_at_and_the_cells_equations(server, browser):
    from pages.ui.classroom import ROOT_FONT_PX
    from stability.charts.classroom import EXPLANATIONS
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
