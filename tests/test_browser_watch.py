"""An external run (stability.watch) in a real browser: `streamlit run app.py` and headless Chromium, the
run logged by this test's own loop into the server's store while the Train page watches it. With
STABILITY_SCREENSHOT_DIR set, 1600x1000 screenshots of it on Train and Compare go there
(watch-train.png, watch-compare.png; docs/ holds the ones of the closing note).
"""
import os
import time
from pathlib import Path

import pytest

from browsers import STORES, browser, server  # noqa: F401 - the fixtures of tests/browsers.py
from test_pages_watch import Loop

pytestmark = pytest.mark.browser


def test_an_external_run_shows_live_on_train_and_on_compare(server, browser):  # noqa: F811
    import stability.watch as sw
    from pages.ui.status import EXTERNAL
    from stability.runs.store import RunStore

    with RunStore(STORES[server]) as store:
        run = sw.init("my own rnn", store=store, config={"lr": 1e-3})
        loop = Loop(run)
        loop.steps(12)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(f"{server}/?run={run.id}")
        page.get_by_text(EXTERNAL).first.wait_for(timeout=60_000)
        page.wait_for_function("document.querySelectorAll('[data-testid=\"stVegaLiteChart\"] canvas').length >= 3",
                               timeout=60_000)
        assert page.get_by_text("What is happening").first.is_visible()
        assert page.locator("button", has_text="Stop").count() == 0
        loop.steps(60)  # the loop goes on: the panel follows (Note [Whole steps]: step 72's rows are
        time.sleep(1.1)  # written once a second has passed and the loop has moved on to step 73)
        loop.steps(1)
        page.get_by_text("step 72").first.wait_for(timeout=60_000)
        if os.environ.get("STABILITY_SCREENSHOT_DIR"):
            page.screenshot(path=str(Path(os.environ["STABILITY_SCREENSHOT_DIR"]) / "watch-train.png"), full_page=True)
        run.finish()
        page.goto(f"{server}/compare?runs={run.id}")
        page.get_by_text(EXTERNAL).first.wait_for(timeout=60_000)
        page.wait_for_function("document.querySelectorAll('[data-testid=\"stVegaLiteChart\"] canvas').length >= 1",
                               timeout=60_000)
        if os.environ.get("STABILITY_SCREENSHOT_DIR"):
            page.screenshot(path=str(Path(os.environ["STABILITY_SCREENSHOT_DIR"]) / "watch-compare.png"), full_page=True)
        page.close()
