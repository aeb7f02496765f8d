"""Issue 20 in a real browser: what a page or a link asks of the server is bounded, offered by its form,
and a damaged store or a bad id is one line (`streamlit run app.py` driven by headless Chromium).

The Sweep page's Vary refuses sizes before it lists or builds anything (stability/sweeps/spec.py, Note
[Bounded checks]) and names only what its form offers (Note [Offered fields]); a store whose later
pages are damaged, or whose schema_version is not a number, is one line on every page, the sidebar
included; Reproduce links read their ids as every page does, against an SQLite file and the real
PostgreSQL; the Runs page's Resume of a run whose stored config this version refuses is one line.
"""
import os
import sqlite3
import time
from pathlib import Path

import pytest

from browsers import browser, streamlit_server  # noqa: F401 - the fixtures and server of tests/browsers.py
from statuses import set_status

pytestmark = pytest.mark.browser

MARKER_MODULE = "harden_import_marker"  # a module whose import leaves a file: proof it ran in the server


def exception_boxes(page) -> list[str]:
    return [box.inner_text() for box in page.locator('[data-testid="stException"]').all()]


def texts(page, testid: str) -> list[str]:
    return [element.inner_text() for element in page.locator(f'[data-testid="{testid}"]').all()]


def server_memory_peak_kib(pid: int) -> int:
    """The server process's peak resident memory so far (VmHWM, /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc")


# ---------------------------------------------------------------------------------------------- servers
@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A server over a fresh SQLite store whose Python path holds :data:`MARKER_MODULE`."""
    folder = tmp_path_factory.mktemp("lab")
    plugins = folder / "plugins"
    plugins.mkdir()
    marker = folder / "imported.txt"
    (plugins / f"{MARKER_MODULE}.py").write_text(
        "import os, pathlib\npathlib.Path(os.environ['HARDEN_MARKER']).write_text('imported')\n"
        "import torch\n\n\nclass Cell(torch.nn.Module):\n    pass\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")])),
           "HARDEN_MARKER": str(marker), "STABILITY_OFFLINE": "1"}
    with streamlit_server(folder / "runs.db", folder / "server.log", env=env) as (url, process):
        yield {"url": url, "pid": process.pid, "store": folder / "runs.db", "marker": marker, "folder": folder}


def new_page(browser, url):  # noqa: F811 - the fixture's name
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    page.goto(url)
    return page


# ---------------------------------------------------------------------------------------------- Sweep
def open_sweep_form(browser, url):  # noqa: F811
    """The Sweep page with its default Vary rows checked and timed (the form is idle)."""
    page = new_page(browser, f"{url}/sweep")
    page.get_by_role("button", name="Start", exact=True).wait_for(timeout=120_000)
    page.get_by_text(" runs · ").first.wait_for(timeout=120_000)  # the rough time is in: nothing runs
    return page


def set_vary(page, row: int, field: str | None, values: str | None) -> None:
    """Type ``field`` into the Vary row's field box (a new option, as a user types one) and ``values``."""
    suffix = "" if row == 1 else f" {row}"
    if field is not None:
        box = page.locator(f'input[aria-label="Field{suffix}"]')
        box.click()
        box.fill(field)
        page.wait_for_timeout(300)
        box.press("Enter")
        page.wait_for_function(f"document.querySelector('input[aria-label=\"Field{suffix}\"]').value === {field!r}")
    if values is not None:
        entry = page.get_by_role("textbox", name=f"Values{suffix}", exact=True)
        entry.fill(values)
        entry.press("Enter")


def vary_error(page, contains: str, timeout_ms: int = 60_000) -> str:
    """The one error line of the Vary column, once it says ``contains``."""
    page.locator('[data-testid="stAlertContentError"]', has_text=contains).first.wait_for(timeout=timeout_ms)
    errors = texts(page, "stAlertContentError")
    assert len(errors) == 1 and "\n" not in errors[0].strip(), errors
    return errors[0]


def test_a_range_count_of_millions_is_one_line_before_a_value_is_made(lab, browser):  # noqa: F811
    page = open_sweep_form(browser, lab["url"])
    before = server_memory_peak_kib(lab["pid"])
    set_vary(page, 1, None, "1e-4:1e-1:3000000:log")
    error = vary_error(page, "values")
    assert "train.lr: 3,000,000 values, over the 10,000 runs" in error
    # listing 3 million floats takes ~200 MiB; refusing the COUNT takes nothing
    assert server_memory_peak_kib(lab["pid"]) - before < 64 * 1024
    assert not exception_boxes(page)
    page.close()


def test_a_cell_given_by_import_path_is_refused_and_never_imported(lab, browser):  # noqa: F811
    page = open_sweep_form(browser, lab["url"])
    set_vary(page, 2, None, f"rnn,{MARKER_MODULE}:Cell")
    error = vary_error(page, "registered cell")
    assert f"vary cell: '{MARKER_MODULE}:Cell' is not a registered cell" in error
    time.sleep(1.0)
    assert not lab["marker"].exists(), "the page imported a module named in a Vary row"
    assert not exception_boxes(page)
    page.close()


def test_fields_the_form_hides_cannot_be_varied(lab, browser):  # noqa: F811
    """task.data_dir and task.download are no widget of the form (a real-data task's folder and its
    download switch): a Vary row may not set them, so no worker makes folders or downloads anywhere."""
    elsewhere = lab["folder"] / "elsewhere"
    page = open_sweep_form(browser, lab["url"])
    set_vary(page, 1, None, "x")  # an error first: no state on the way is a sweep the page would time
    vary_error(page, "'x' is not a finite number")
    task = page.locator('input[aria-label="Task"]')
    task.click()
    page.get_by_role("option", name="ptb_char", exact=True).click()
    page.wait_for_function("document.querySelector('input[aria-label=\"Task\"]').value === 'ptb_char'")
    set_vary(page, 1, "task.download", "true")
    error = vary_error(page, "task.download: not an option")
    assert "vary task.download: not an option this page offers" in error
    set_vary(page, 1, "task.data_dir", str(elsewhere))
    error = vary_error(page, "task.data_dir: not an option")
    assert "vary task.data_dir: not an option this page offers" in error
    assert not page.get_by_role("button", name="Start", exact=True).count()
    assert not elsewhere.exists()
    assert not exception_boxes(page)
    page.close()


def test_a_train_field_the_form_does_not_show_cannot_be_varied(lab, browser):  # noqa: F811
    page = open_sweep_form(browser, lab["url"])
    set_vary(page, 2, "eval_examples", "16,32")
    error = vary_error(page, "eval_examples: not a field")
    assert "vary train.eval_examples: not a field this page offers" in error
    assert not exception_boxes(page)
    page.close()


# ---------------------------------------------------------------------------------------------- Reproduce
BAD_REPRODUCE_LINKS = {"runs=999": "999 (no such run", "runs=\u00b2": "runs: \u00b2",
                       "sweep=12345678901234567890": "sweep: 12345678901234567890", "sweep=999": "sweep=999 (no such"}


@pytest.fixture(scope="module")
def postgres_lab(postgres_cluster, tmp_path_factory):
    """A server over a fresh database of the real PostgreSQL (tests/postgres.py)."""
    folder = tmp_path_factory.mktemp("postgres-lab")
    url = postgres_cluster.new_database()
    try:
        with streamlit_server(url, folder / "server.log", env={"STABILITY_HOME": str(folder / "home")}) as (address, _):
            yield {"url": address}
    finally:
        postgres_cluster.drop_database(url)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("link", list(BAD_REPRODUCE_LINKS))
def test_a_reproduce_link_with_a_bad_id_is_one_warning_line(request, browser, backend, link):  # noqa: F811
    server = request.getfixturevalue("lab" if backend == "sqlite" else "postgres_lab")
    page = new_page(browser, f"{server['url']}/reproduce?preset=spectral-fig1&{link}")
    page.get_by_role("button", name="Run", exact=True).wait_for(timeout=120_000)
    page.get_by_text("Press Run").first.wait_for(timeout=60_000)  # the page ran to its end
    warnings = texts(page, "stAlertContentWarning")
    assert len(warnings) == 1 and warnings[0].startswith("Ignored in this link:"), warnings
    assert BAD_REPRODUCE_LINKS[link] in warnings[0] and "\n" not in warnings[0].strip()
    assert not exception_boxes(page) and not texts(page, "stAlertContentError")
    page.close()


# ---------------------------------------------------------------------------------------------- Runs: Resume
def test_resume_of_a_run_whose_config_this_version_refuses_is_one_line(lab, browser):  # noqa: F811
    from stability.runs.store import RunStore
    from stability.training.checkpoints import save_checkpoint

    config = {"cell": {"name": "rnn", "hidden_size": 8, "options": {}},
              "task": {"name": "adding", "options": {"seq_len": 10}},
              "train": {"steps": 10, "lr": -1.0}, "name": "refused"}  # lr -1: ConfigError on validate
    with RunStore(lab["store"]) as store:
        run_id = store.create_run(config, "refused")
        set_status(store, run_id, "failed", error="made by the test")
        save_checkpoint({"config": config, "step": 5}, store.checkpoint_path(run_id))
    page = new_page(browser, f"{lab['url']}/runs")
    grid = page.locator('[data-testid="stDataFrame"]').first
    grid.wait_for(timeout=120_000)
    page.wait_for_timeout(1000)
    box = grid.bounding_box()
    rows = len(RunStore(lab["store"]).records())
    row = [record.id for record in RunStore(lab["store"]).records()].index(run_id)  # newest first
    assert rows >= 1
    page.mouse.click(box["x"] + 18, box["y"] + 35 * (row + 1) + 17)  # the row's selection box
    resume = page.get_by_role("button", name="Resume")
    page.wait_for_function("[...document.querySelectorAll('button')].some(b => b.innerText.includes('Resume') "
                           "&& !b.disabled)", timeout=30_000)
    resume.click()
    page.locator('[data-testid="stAlertContentSuccess"]', has_text=f"#{run_id}").wait_for(timeout=60_000)
    [notice] = texts(page, "stAlertContentSuccess")
    assert f"#{run_id} not resumed: lr must be" in notice and "\n" not in notice.strip()
    assert not exception_boxes(page)
    with RunStore(lab["store"]) as store:
        assert store.record(run_id, latest=False).status == "failed"
    page.close()


# ---------------------------------------------------------------------------------------------- damaged stores
def filled_store(path: Path) -> None:
    """30 finished runs, every row in the file itself (none left in the WAL)."""
    from test_pages_common import add_run
    from stability.runs.store import RunStore

    with RunStore(path) as store:
        for _ in range(30):
            add_run(store)
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def damage_table(path: Path, name: str) -> None:
    """Overwrite the root page of table or index ``name`` with garbage: the header and every other page
    stay whole, so the store opens and most reads work; the first read of ``name`` fails."""
    with sqlite3.connect(path) as connection:
        (root,) = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()
        size = connection.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(path.read_bytes())
    data[(root - 1) * size:root * size] = bytes((i * 37 + 11) % 256 for i in range(size))
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module", params=["sweeps table", "sweeps index"])
def damaged_server(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("damaged")
    path = folder / "runs.db"
    filled_store(path)
    damage_table(path, "sweeps" if request.param == "sweeps table" else "runs_sweep")
    with streamlit_server(path, folder / "server.log") as (url, _):
        yield url, path


def script_done(page) -> None:
    """Wait until the page's script has run to its end (Streamlit marks its app ``notRunning``)."""
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for(timeout=60_000)


@pytest.mark.parametrize("where", ["/", "/train?run=1", "/compare?runs=1,2"])
def test_a_store_damaged_after_its_header_is_one_line_on_every_page(damaged_server, browser, where):  # noqa: F811
    url, path = damaged_server
    page = new_page(browser, url + where)
    page.get_by_text("Run store unavailable").first.wait_for(timeout=120_000)
    script_done(page)  # the page's whole run drawn: an exception box would be there by now
    assert not exception_boxes(page)
    sidebar = page.locator('[data-testid="stSidebar"]').inner_text()
    [line] = [text for text in sidebar.splitlines() if "Run store unavailable" in text]
    assert str(path) in line and "not a readable run store" in line and "\n" not in line.strip()
    page.close()


@pytest.fixture(scope="module")
def unnumbered_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("abc")
    path = folder / "runs.db"
    filled_store(path)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE meta SET value = 'abc' WHERE key = 'schema_version'")
    with streamlit_server(path, folder / "server.log") as (url, _):
        yield url, path


@pytest.mark.parametrize("where", ["/", "/train?run=1", "/compare?runs=1,2", "/runs"])
def test_a_store_whose_schema_version_is_not_a_number_is_one_line(unnumbered_server, browser, where):  # noqa: F811
    url, path = unnumbered_server
    page = new_page(browser, url + where)
    page.locator('[data-testid="stAlertContentError"]').first.wait_for(timeout=120_000)
    script_done(page)  # the page's whole run drawn: an exception box would be there by now
    assert not exception_boxes(page)
    [error] = texts(page, "stAlertContentError")
    assert str(path) in error and "not a readable run store" in error and "'abc'" in error
    assert "\n" not in error.strip()
    page.close()


# ---------------------------------------------------------------------------------------------- last: the slowest on old code
def test_a_grid_of_thousands_of_models_is_one_line_before_one_is_built(lab, browser):  # noqa: F811
    """100 hidden sizes x 33 lengths x 3 seeds is 9,900 runs (under the 10,000 a page may start), whose
    check would build 3,434 models in the server (minutes): refused from the counts alone, at once."""
    page = open_sweep_form(browser, lab["url"])
    set_vary(page, 1, None, "x")  # an error first: no state on the way is a sweep the page would check
    vary_error(page, "'x' is not a finite number")
    set_vary(page, 2, "task.seq_len", "10:1000:33")
    set_vary(page, 1, "cell.hidden_size", None)
    vary_error(page, "'x' is not an integer")
    set_vary(page, 1, None, "8:1024:100")
    error = vary_error(page, "models", timeout_ms=45_000)
    assert "would build up to 3,434 models (every combination of cell.hidden_size, task.seq_len)" in error
    assert not exception_boxes(page)
    page.close()
