"""End to end in a real browser: `streamlit run app.py` driven by headless Chromium.

Needs Debian's Chromium at /usr/bin/chromium and the `playwright` package
(never `playwright install`).  Without them the tests skip and say why;
with STABILITY_REQUIRE_BROWSER=1 (set by .ci/run) a missing browser fails.
Screenshots go to artifacts/ (ignored by git).
"""
import math
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from browsers import ROOT, STORES, browser, server  # noqa: F401 - the fixtures of tests/browsers.py
from statuses import set_status

ARTIFACTS = ROOT / "artifacts"

pytestmark = pytest.mark.browser


def metric_value(page, label):
    metric = page.locator('[data-testid="stMetric"]', has_text=label)
    return metric.locator('[data-testid="stMetricValue"]').inner_text()


def wait_for_charts(page, count):
    page.wait_for_function(
        f"document.querySelectorAll('[data-testid=\"stVegaLiteChart\"] canvas, "
        f"[data-testid=\"stVegaLiteChart\"] svg.marks').length >= {count}", timeout=60_000)


PAGE_TITLES = ["Train", "Race", "Compare", "Gradient flow", "Runs", "Sweep", "Reproduce"]


def nav_titles(page):
    return [link.inner_text().split("\n")[-1].strip()
            for link in page.locator('[data-testid="stSidebarNavLink"]').all()]


def test_a_page_link_opened_first_on_a_fresh_server_goes_through_the_router(server, browser):
    # Runs first in this module, on the module's fresh server: see Note [Direct links on a fresh server].
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/gradient_flow?cell=spectral&hidden=32&T=100&seed=0")
    page.get_by_text("Device:").first.wait_for(timeout=60_000)  # app.py's sidebar ran
    page.get_by_text("‖∂h_T/∂h_0‖").first.wait_for(timeout=60_000)
    assert nav_titles(page) == PAGE_TITLES
    assert "cell=spectral" in page.url and "hidden=32" in page.url
    page.close()


def test_gradient_flow_page_draws_and_redraws_after_a_slider_move(server, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/gradient_flow?cell=rnn&hidden=64&T=200&seed=0")
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

    page.goto(f"{server}/gradient_flow?cell=spectral&hidden=128&T=1000&seed=0")
    page.get_by_text("‖∂h_T/∂h_0‖").first.wait_for(timeout=60_000)
    wait_for_charts(page, 2)
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / "gradient_flow_spectral.png"), full_page=True)
    assert float(metric_value(page, "margin max|σ−1|")) <= 0.01 + 1e-6


def test_train_page_starts_a_run_and_watches_it_complete(server, browser):
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    page.goto(f"{server}/?cell=rnn&hidden=16&task=adding&seq_len=20&steps=60&seed=0")
    start = page.get_by_role("button", name="Start", exact=True)
    start.wait_for(timeout=60_000)
    start.click()
    page.wait_for_function("() => /[?&]run=\\d+/.test(location.search)", timeout=60_000)
    # the run's end, whichever it is: a run that failed says why at once instead of a two-minute timeout
    ended = page.get_by_text(re.compile(r"^(completed|failed|diverged|interrupted|stopped)$")).first
    ended.wait_for(timeout=120_000)
    assert ended.inner_text() == "completed", page.locator('[data-testid="stMain"]').inner_text()[:2000]
    wait_for_charts(page, 5)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(ARTIFACTS / "train.png"), full_page=True)
    run_id = re.search(r"[?&]run=(\d+)", page.url).group(1)

    for path, name in (("race", "race"), (f"compare?runs={run_id}", "compare"), ("runs", "runs")):
        page.goto(f"{server}/{path}")
        page.get_by_text("Device:").first.wait_for(timeout=60_000)
        page.wait_for_timeout(2500)
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    assert page.get_by_text("completed").count() >= 1  # the Runs table lists the finished run


def progress_moves(page, times=1):
    """Wait until the run's progress line has changed ``times`` times (a redraw with new rows each)."""
    line = '[data-testid="stMain"] [data-testid="stProgress"]'  # the sidebar's bars have no step in them
    for _ in range(times):
        before = page.locator(line).first.inner_text()
        page.wait_for_function(f"before => document.querySelector('{line}').innerText !== before", arg=before,
                               timeout=30_000)


def test_a_live_train_page_redraws_its_charts_in_the_views_it_has(server, browser):
    """New rows reach a chart as new data for the Vega view on the page (the same canvas, never a new
    chart), at the chosen refresh: Notes [Watching cheaply] and [Stable specs] (stability/live/pace.py, specs.py)."""
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    page.goto(f"{server}/?cell=rnn&hidden=16&task=adding&seq_len=20&steps=100000&seed=1&refresh=2")
    page.get_by_role("button", name="Start", exact=True).wait_for(timeout=60_000)
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for(timeout=60_000)
    page.get_by_role("button", name="Start", exact=True).click()
    page.get_by_text("looks for new rows every 2 s").first.wait_for(timeout=60_000)
    charts_drawn = 7  # loss, ‖∂L/∂h0‖, MASO's norms, singular values, gap, gradient flow, spectrum over training
    wait_for_charts(page, charts_drawn)
    progress_moves(page, 2)  # every metric logged at least once: the charts' structure is settled
    marked = page.evaluate("""() => {
        const canvases = [...document.querySelectorAll('[data-testid="stVegaLiteChart"] canvas')];
        canvases.forEach(canvas => { canvas.dataset.kept = "yes"; });
        return canvases.length; }""")
    progress_moves(page, 3)
    kept = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"] canvas')]
        .map(canvas => canvas.dataset.kept === "yes")""")
    # the run's Stop, by its key: Streamlit's toolbar shows a "Stop" of its own while a script runs
    page.locator(".st-key-train_stop").get_by_role("button", name="Stop", exact=True).click()
    page.get_by_text("was stopped at step").first.wait_for(timeout=60_000)
    page.close()
    assert marked == charts_drawn and kept == [True] * charts_drawn


def test_the_sweep_page_of_a_finished_sweep_draws_its_charts_and_table(server, browser):
    """A sweep written through the store (2 cells x 3 learning rates x 2 seeds, one run diverged) opened by
    its link: the four charts render in Vega, the settings table and the runs' links are there."""
    from stability.runs.store import RunStore
    from test_pages_sweep import store_sweep

    with RunStore(STORES[server]) as store:
        sweep_id, _ = store_sweep(store, cells=("rnn", "spectral"), lrs=(1e-3, 1e-2, 1e-1), seeds=2)
    page = browser.new_page(viewport={"width": 1500, "height": 1560})
    page.goto(f"{server}/sweep?sweep={sweep_id}")
    page.get_by_text("12 / 12 runs done").first.wait_for(timeout=60_000)
    wait_for_charts(page, 4)
    page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=60_000)
    page.wait_for_timeout(2000)
    titles = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
        .map(chart => chart.querySelectorAll('canvas, svg.marks').length)""")
    assert len(titles) == 4 and all(count >= 1 for count in titles)
    assert "Sweep" in nav_titles(page)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "sweep.png"))
    page.close()


def test_the_reproduce_page_draws_a_presets_figure_and_its_verdicts(server, browser):
    """The spectral paper's Fig. 1 preset opened on four finished runs written through the store: the
    verdict table and a chart per metric the claims read render in the real browser."""
    from stability.runs.store import RunStore
    from test_pages_reproduce import write_fig1_runs

    with RunStore(STORES[server]) as store:
        ids = write_fig1_runs(store, rnn_loss=0.165, spectral_loss=0.02)
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    page.goto(f"{server}/reproduce?preset=spectral-fig1&runs={','.join(map(str, ids.values()))}")
    page.get_by_text("4 of 4 runs finished").first.wait_for(timeout=60_000)
    wait_for_charts(page, 3)
    page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=60_000)
    page.wait_for_timeout(2000)
    assert "Reproduce" in nav_titles(page)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "reproduce.png"))
    page.close()


# Every text drawn on a canvas, with where it lands and which canvas drew it: recorded from fillText before the
# page loads. A text belongs to a chart by its canvas, looked up when it is read (chartTexts), never by the
# canvas's place among the charts at the moment it was drawn: Vega draws a finished chart's legend once, so a
# text filed under the wrong chart then (a chart not yet embedded above it, one embedded again) stayed there.
RECORD_CANVAS_TEXT = """
(() => {
  const draw = CanvasRenderingContext2D.prototype.fillText;
  const ids = new WeakMap();
  let next = 0;
  const canvasId = canvas => { if (!ids.has(canvas)) ids.set(canvas, next++); return ids.get(canvas); };
  window.drawnTexts = [];
  window.chartCanvases = () => [...document.querySelectorAll('[data-testid="stVegaLiteChart"] canvas')].map(canvasId);
  // the texts drawn on the charts' canvases now on the page, each with its chart's place among them
  window.chartTexts = () => {
    const charts = window.chartCanvases();
    return window.drawnTexts.filter(entry => charts.includes(entry.canvasId))
      .map(entry => ({...entry, chart: charts.indexOf(entry.canvasId)}));
  };
  CanvasRenderingContext2D.prototype.fillText = function (text, x, y, ...rest) {
    const at = this.getTransform().transformPoint(new DOMPoint(x, y));
    const width = this.measureText(String(text)).width * this.getTransform().a;
    const align = this.textAlign;
    const left = align === "center" ? at.x - width / 2 : (align === "right" || align === "end") ? at.x - width : at.x;
    window.drawnTexts.push({canvasId: canvasId(this.canvas), text: String(text), left, right: left + width,
                            canvas: this.canvas.width});
    return draw.call(this, text, x, y, ...rest);
  };
})();
"""


CELLS = {"rnn", "lstm", "spectral", "sgornn"}  # write_race's cells, the names of its charts' legends


def write_race(store):
    """A finished race of the four demo cells, as a worker stores it: the losses start near 2 and settle
    between 0.16 and 0.03, ‖∂L/∂h0‖ of the RNN falls through 35 decades and the LSTM's sits at 2e-16."""
    from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig

    h0 = {"rnn": lambda step: 10.0 ** (-35 * step / 190), "lstm": lambda step: 2e-16,
          "spectral": lambda step: 1e-2, "sgornn": lambda step: 7e-4}
    settle = {"rnn": 0.165, "lstm": 0.16, "spectral": 0.03, "sgornn": 0.15}
    ids = []
    for cell in h0:
        config = RunConfig(CellConfig(cell, 16), TaskConfig("adding", {"seq_len": 200}), TrainConfig(steps=200))
        run_id = store.create_run(config.to_dict())
        store.update_run(run_id, metric="mse", baseline=1 / 6, baseline_label="always predict 1", total_steps=200,
                         step=200)
        for step in range(0, 200, 10):
            loss = 2.0 if step == 0 else settle[cell] + 0.01 * math.exp(-step / 50)
            store.log(run_id, [(step, 1000.0 + step, name, value) for name, value in [
                ("train/loss", loss), ("val/loss", loss), ("grad/h0_norm", h0[cell](step)), ("sv/min", 0.9),
                ("sv/max", 1.1), ("sv/margin", 0.1)]])
        set_status(store, run_id, "completed")
        ids.append(run_id)
    return ids


def test_the_race_at_its_defaults_draws_whole_legends_a_range_the_curves_set_and_every_few_decades(server, browser):
    """pages/race.py opened on a finished race at 1,400 px, read off the canvases as Vega draws them: every
    legend label whole (never "spect…", never past the chart's edge), the validation loss's axis on the
    curves (not on the first reading of 2), and ‖∂L/∂h0‖ labelled at least every third decade."""
    from stability.runs.store import RunStore

    with RunStore(STORES[server]) as store:
        ids = write_race(store)
    # 1,400 px wide, tall enough that every chart (one a row) is on screen: Vega draws one below the fold later
    page = browser.new_page(viewport={"width": 1400, "height": 3000})
    page.add_init_script(RECORD_CANVAS_TEXT)
    page.goto(f"{server}/race?runs={','.join(map(str, ids))}")
    wait_for_charts(page, 4)
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for(timeout=60_000)
    page.locator('[data-testid="stVegaLiteChart"]').nth(3).scroll_into_view_if_needed()
    try:  # every chart on the page has drawn its legend's last name (a loaded machine draws the last later)
        page.wait_for_function("() => { const texts = window.chartTexts(); return [0, 1, 2, 3].every(chart => "
                               "texts.some(entry => entry.chart === chart && entry.text === 'sgornn')); }",
                               timeout=120_000)
    except Exception:  # say which chart lacks which name, and what each canvas drew
        drawn = page.evaluate("() => window.chartTexts()")
        canvases = page.evaluate("() => window.chartCanvases()")
        page.close()
        names = {chart: sorted({entry["text"] for entry in drawn if entry["chart"] == chart} & CELLS)
                 for chart in range(len(canvases))}
        pytest.fail(f"chart canvases {canvases}; the legend names each has drawn: {names}")
    page.wait_for_timeout(1000)
    drawn = page.evaluate("() => window.chartTexts()")
    widths = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"] canvas')]
        .map(canvas => canvas.getBoundingClientRect().width)""")
    page.close()
    texts = {chart: {entry["text"] for entry in drawn if entry["chart"] == chart} for chart in range(4)}
    assert all(CELLS <= texts[chart] for chart in range(4)), texts  # every legend names every cell in full
    assert not [entry for entry in drawn if entry["text"].endswith("…")]
    legend = [entry for entry in drawn if entry["text"] in CELLS]
    assert not [entry for entry in legend if entry["left"] < 0 or entry["right"] > entry["canvas"]], legend
    assert min(widths) > 500  # one chart a row beside the form at 1,400 px, not two of ~300 px
    numbers = [float(text) for text in texts[0] if re.fullmatch(r"[0-9]*\.[0-9]+", text)]  # y labels (x: steps)
    assert numbers and max(numbers) < 0.5  # the first reading of 2 does not set the validation loss's range
    decades = sorted(round(math.log10(float(text))) for text in texts[2] if re.fullmatch(r"1e-?[0-9]+|1|0\.0*1", text))
    assert decades[0] <= -33 and decades[-1] >= -3 and max(np.diff(decades)) <= 3, decades
    assert "1e-15" in texts[2]  # the LSTM's 2e-16 reads off the axis: a labelled decade next to it


# ------------------------------------------------------------------ an external run (stability.watch)
# Logged by this test's own loop into the server's store while the Train page watches it. With
# STABILITY_SCREENSHOT_DIR set, 1600x1000 screenshots of it on Train and Compare go there
# (watch-train.png, watch-compare.png; docs/ holds the ones of the closing note).
def test_an_external_run_shows_live_on_train_and_on_compare(server, browser):  # noqa: F811
    import stability.watch as sw
    from test_pages_watch import Loop
    from pages.ui.status import EXTERNAL
    from stability.runs.store import RunStore

    with RunStore(STORES[server]) as store:
        run = sw.init("my own rnn", store=store, config={"lr": 1e-3})
        loop = Loop(run)
        loop.steps(12)
        time.sleep(1.1)  # rows are written once a second, for the steps the loop has moved past (Note
        loop.steps(1)    # [Whole steps]): twelve quick steps alone may have written none yet
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(f"{server}/?run={run.id}")
        page.get_by_text(EXTERNAL).first.wait_for(timeout=60_000)
        page.wait_for_function("document.querySelectorAll('[data-testid=\"stVegaLiteChart\"] canvas').length >= 3",
                               timeout=60_000)
        assert page.get_by_text("What is happening").first.is_visible()
        assert page.locator("button", has_text="Stop").count() == 0
        loop.steps(59)  # the loop goes on: the panel follows (Note [Whole steps]: step 72's rows are
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
