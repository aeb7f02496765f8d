"""Roles in a real browser (stability/access, Note [Roles]; stability/cli/classroom.py, Note [Two servers]).

``stability classroom`` starts the room's view-only server and the lecturer's loopback one over one store:
a viewer sees every page's runs and no control, and a request forged over the room's websocket (the
lecturer's own Start button, by its widget id) changes nothing, while the same request to the lecturer's
server starts a run (so the forgery is a real one).  A server opened beyond loopback with nothing else set
is view-only; one that names students who may run lets a signed-in student (an authenticating proxy's
header, ``server.trustedUserHeaders``) start a run of their own and stop only their own.  A page served
under a name that is not this machine's (DNS rebinding) gets no websocket.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from browsers import CHROMIUM, CHROMIUM_FLAGS, ROOT, browser, free_port  # noqa: F401 - browser: the fixture
from stability.runs.store import RunStore
from statuses import set_status

pytestmark = pytest.mark.browser

EVE = "eve@school.example"
BOB = "bob@school.example"


def wait_healthy(url: str, process, log: Path, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().strip() == b"ok":
                    return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    pytest.fail(f"the server at {url} did not start:\n{log.read_text()[-3000:]}")


def trained_store(folder: Path) -> Path:
    """A store holding one completed run of 20 steps, trained by the CLI, and a stopped run of Eve's."""
    store = folder / "runs.db"
    done = subprocess.run([sys.executable, "-m", "stability", "train", "--cell", "rnn", "--hidden-size", "8",
                           "--seq-len", "10", "--steps", "20", "--store", str(store)],
                          capture_output=True, text=True, env=dict(os.environ, STABILITY_OFFLINE="1"), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with RunStore(store) as runs:
        first = runs.records()[0]
        eves = runs.create_run(first.config.to_dict(), owner=EVE)
        set_status(runs, eves, "stopped")
    return store


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """``stability classroom`` over a trained store: the room's server (every interface, view-only) and
    the lecturer's (127.0.0.1)."""
    folder = tmp_path_factory.mktemp("classroom")
    store = trained_store(folder)
    own, room = free_port(), free_port()
    log = folder / "classroom.log"
    with open(log, "w") as output:
        process = subprocess.Popen([sys.executable, "-m", "stability", "classroom", "--store", str(store),
                                    "--port", str(own), "--room-port", str(room)],
                                   stdout=output, stderr=subprocess.STDOUT, cwd=folder,
                                   env=dict(os.environ, STABILITY_OFFLINE="1", PYTHONUNBUFFERED="1"))
    try:
        wait_healthy(f"http://127.0.0.1:{own}", process, log)
        wait_healthy(f"http://127.0.0.1:{room}", process, log)
        yield {"lecturer": f"http://127.0.0.1:{own}", "room": f"http://127.0.0.1:{room}", "store": store,
               "log": log}
    finally:
        process.terminate()  # the command ends both servers, its own children
        process.wait(timeout=30)


def open_page(browser, url, headers=None):  # noqa: F811 - the fixture's name
    context = browser.new_context(viewport={"width": 1500, "height": 1200}, extra_http_headers=headers or {})
    page = context.new_page()
    page.goto(url)
    return page


def buttons(page, name) -> int:
    return page.get_by_role("button", name=name, exact=True).count()


def run_count(store) -> int:
    with RunStore(store) as runs:
        return len(runs.records())


# ------------------------------------------------------------------------------ a forged request
async def _button_ids(url: str, query: str = "") -> tuple[dict[str, str], str]:
    """The ids of the buttons a page draws (label -> widget id) and the page's script hash, read from the
    messages the server sends, as the browser receives them."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    found, page_hash = {}, ""
    async with websockets.connect(url.replace("http", "ws") + "/_stcore/stream", subprotocols=["streamlit"],
                                  max_size=None) as socket:
        message = BackMsg()
        message.rerun_script.query_string = query
        message.rerun_script.widget_states.SetInParent()
        await socket.send(message.SerializeToString())
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            forward = ForwardMsg()
            forward.ParseFromString(await asyncio.wait_for(socket.recv(), timeout=90))
            kind = forward.WhichOneof("type")
            if kind == "new_session":
                page_hash = forward.new_session.page_script_hash
            elif kind == "delta" and forward.delta.WhichOneof("type") == "new_element":
                element = forward.delta.new_element
                if element.WhichOneof("type") == "button":
                    found[element.button.label] = element.button.id
            elif kind == "script_finished":
                break
    return found, page_hash


async def _forge(url: str, widget_id: str, page_hash: str) -> None:
    """What a script, not a browser, can send: a rerun whose widget states say ``widget_id`` was clicked."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    async with websockets.connect(url.replace("http", "ws") + "/_stcore/stream", subprotocols=["streamlit"],
                                  max_size=None) as socket:
        message = BackMsg()
        message.rerun_script.query_string = ""
        message.rerun_script.page_script_hash = page_hash
        state = message.rerun_script.widget_states.widgets.add()
        state.id, state.trigger_value = widget_id, True
        await socket.send(message.SerializeToString())
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            forward = ForwardMsg()
            forward.ParseFromString(await asyncio.wait_for(socket.recv(), timeout=90))
            if forward.WhichOneof("type") == "script_finished":
                return


def test_a_forged_start_changes_nothing_on_the_rooms_server_and_starts_a_run_on_the_lecturers(classroom):
    pytest.importorskip("websockets")
    ids, page_hash = asyncio.run(_button_ids(classroom["lecturer"]))
    assert "Start" in ids, ids  # the lecturer's Train page draws its Start button
    room_ids, _ = asyncio.run(_button_ids(classroom["room"]))
    assert "Start" not in room_ids and "Stop" not in room_ids, room_ids
    before = run_count(classroom["store"])
    asyncio.run(_forge(classroom["room"], ids["Start"], page_hash))
    assert run_count(classroom["store"]) == before, "a forged Start on the view-only server stored a run"
    asyncio.run(_forge(classroom["lecturer"], ids["Start"], page_hash))  # the same message, to the operator
    assert run_count(classroom["store"]) == before + 1, "the forged message is not a real click: the test proves nothing"
    with RunStore(classroom["store"]) as runs:  # end the run it started: the rest of the module reads a quiet store
        newest = runs.records()[0]
    subprocess.run([sys.executable, "-m", "stability", "stop", str(newest.id), "--store", str(classroom["store"])],
                   capture_output=True, timeout=120)


# ------------------------------------------------------------------------------ a viewer, an operator
def test_a_viewer_sees_the_runs_and_no_control_on_any_page(classroom, browser):  # noqa: F811
    with RunStore(classroom["store"]) as runs:
        done = [run.id for run in runs.records() if run.status == "completed"][-1]
    page = open_page(browser, f"{classroom['room']}/?run={done}")
    page.get_by_text("View only", exact=False).first.wait_for(timeout=90_000)
    page.locator('[data-testid="stVegaLiteChart"]').first.wait_for(timeout=90_000)  # the run's charts
    assert buttons(page, "Start") == 0 and buttons(page, "Stop") == 0
    assert page.locator('[data-testid="stExpander"]', has_text="Cell").count() == 0
    page.goto(f"{classroom['room']}/runs")
    page.get_by_role("button", name="Export CSV").wait_for(timeout=90_000)
    for name in ("Stop", "Resume", "Delete"):
        assert buttons(page, name) == 0, name
    page.goto(f"{classroom['room']}/sweep")
    page.get_by_text("View only", exact=False).first.wait_for(timeout=90_000)
    page.get_by_text("No sweeps yet").wait_for(timeout=90_000)
    assert page.locator('[data-testid="stExpander"]', has_text="New sweep").count() == 0
    page.goto(f"{classroom['room']}/reproduce?preset=spectral-fig1")
    page.get_by_role("button", name="Gallery").wait_for(timeout=90_000)
    assert buttons(page, "Run") == 0
    page.context.close()


def test_the_lecturers_own_server_controls(classroom, browser):  # noqa: F811
    page = open_page(browser, f"{classroom['lecturer']}/runs")
    page.get_by_role("button", name="Delete").wait_for(timeout=90_000)
    assert page.get_by_text("View only").count() == 0
    page.goto(f"{classroom['lecturer']}/")
    page.get_by_role("button", name="Start", exact=True).wait_for(timeout=90_000)
    page.context.close()


# ------------------------------------------------------------------------------ beyond loopback
@contextlib.contextmanager
def open_server(folder: Path, store: Path, env: dict, *options: str):
    """``streamlit run app.py`` listening on every interface (reached here through 127.0.0.1)."""
    port = free_port()
    log = folder / f"server-{port}.log"
    with open(log, "w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.address", "0.0.0.0", "--server.headless", "true", *options],
            cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
            env=dict(os.environ, **env, STABILITY_STORE=str(store), STABILITY_OFFLINE="1", PYTHONUNBUFFERED="1"))
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_server_open_to_the_network_is_view_only_by_default(tmp_path, browser):  # noqa: F811
    store = tmp_path / "runs.db"
    RunStore(store).close()
    with open_server(tmp_path, store, {"STABILITY_VIEW_ONLY": "", "STABILITY_OPERATORS": ""}) as url:
        page = open_page(browser, url)
        page.get_by_text("View only", exact=False).first.wait_for(timeout=90_000)
        assert buttons(page, "Start") == 0
        page.context.close()


def test_a_signed_in_student_starts_their_own_run_and_stops_only_their_own(tmp_path, browser):  # noqa: F811
    store = trained_store(tmp_path)
    with RunStore(store) as runs:
        eves = next(run.id for run in runs.records() if run.owner == EVE)
    env = {"STABILITY_STUDENTS": "run", "STABILITY_OPERATORS": "lecturer@school.example",
           "STABILITY_STUDENT_STEPS": "50", "STABILITY_VIEW_ONLY": ""}
    headers = json.dumps({"X-Forwarded-Email": "email"})
    with open_server(tmp_path, store, env, "--server.trustedUserHeaders", headers) as url:
        page = open_page(browser, f"{url}/?cell=rnn&hidden=8&task=adding&seq_len=10&steps=20",
                         headers={"X-Forwarded-Email": BOB})
        page.get_by_text(f"{BOB} · student").wait_for(timeout=90_000)
        page.get_by_role("button", name="Start", exact=True).click()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(run.owner == BOB for run in RunStore(store).records()):
            time.sleep(0.3)
        with RunStore(store) as runs:
            assert [run.owner for run in runs.records()][0] == BOB
        page.goto(f"{url}/?run={eves}")
        page.get_by_text("Not your run").wait_for(timeout=90_000)
        assert buttons(page, "Stop") == 0
        page.goto(f"{url}/?cell=rnn&hidden=8&task=adding&seq_len=10&steps=500")
        page.get_by_role("button", name="Start", exact=True).click()
        page.get_by_text("500 steps is more than a student's 50").wait_for(timeout=60_000)
        page.context.close()
        anonymous = open_page(browser, url)  # the same server, nobody signed in: a viewer
        anonymous.get_by_text("View only", exact=False).first.wait_for(timeout=90_000)
        assert buttons(anonymous, "Start") == 0
        anonymous.context.close()


def test_a_signed_in_student_starts_one_sweep_of_their_own_within_limits(tmp_path, browser):  # noqa: F811
    """STABILITY_STUDENTS=sweep: a student's Sweep page offers Start with their limits; the form's default sweep
    (24 runs) is over a student's 20, one line; with one seed (8 runs) it starts, theirs, with its Stop; a
    second is refused in one line while it runs.  Nothing trains: a run claimed by this live process holds the
    server's one slot, so the sweep's worker waits for it."""
    from stability.execution import lifecycle

    store = tmp_path / "runs.db"
    with RunStore(store) as runs:
        runs.create_run({"cell": {"name": "rnn", "hidden_size": 8}}, claimed={
            "status": "running", "pid": os.getpid(), "host": lifecycle.this_host(), "claim": "held"})
    env = {"STABILITY_STUDENTS": "sweep", "STABILITY_OPERATORS": "lecturer@school.example", "STABILITY_VIEW_ONLY": "",
           "STABILITY_MAX_RUNS": "1"}
    headers = json.dumps({"X-Forwarded-Email": "email"})
    with open_server(tmp_path, store, env, "--server.trustedUserHeaders", headers) as url:
        page = open_page(browser, f"{url}/sweep", headers={"X-Forwarded-Email": BOB})
        page.get_by_text("Your limits").wait_for(timeout=90_000)
        start = page.get_by_role("button", name="Start", exact=True)
        start.click()
        page.get_by_text("This sweep is 24 runs, more than a student's 20").wait_for(timeout=60_000)
        assert RunStore(store).sweeps() == []
        seeds = page.get_by_role("spinbutton", name="Seeds")
        seeds.fill("1")
        seeds.press("Enter")
        page.get_by_text("8 runs", exact=True).wait_for(timeout=60_000)
        start.click()
        # their own sweep's Stop, by its key: Streamlit's toolbar shows a "Stop" of its own while a script runs
        page.locator(".st-key-sweep_stop").get_by_role("button", name="Stop", exact=True).wait_for(timeout=90_000)
        with RunStore(store) as runs:
            [sweep] = runs.sweeps()
            assert json.loads(json.dumps(dict(sweep.spec)))["owner"] == BOB
        if not start.is_visible():
            page.locator('[data-testid="stExpander"]', has_text="New sweep").locator("summary").click()
        start.click()
        page.get_by_text(f"Your sweep #{sweep.id} is still running").wait_for(timeout=60_000)
        assert len(RunStore(store).sweeps()) == 1
        page.context.close()


# ------------------------------------------------------------------------------ DNS rebinding
def refused(page, url: str) -> None:
    """Open ``url`` and wait until the server has refused the page's websocket twice (the frontend tries
    again): the app never got a session, so nothing it would draw can be drawn after this."""
    closed = []
    page.on("websocket", lambda socket: socket.on("close", lambda _socket: closed.append(socket.url)))
    page.goto(url)
    deadline = time.monotonic() + 60
    while len(closed) < 2:
        assert time.monotonic() < deadline, f"the websocket of {url} was never refused"
        page.wait_for_timeout(100)


def test_a_page_reached_under_another_sites_name_gets_no_websocket(classroom, browser):  # noqa: F811
    """Chromium told that rebind.example is 127.0.0.1 (what a rebinding DNS server makes it believe): the
    page's HTML comes, but the server refuses its websocket, so no script runs and nothing renders."""
    port = classroom["lecturer"].rsplit(":", 1)[1]
    chromium = browser.browser_type.launch(  # a second Chromium of the same Playwright, with its own resolver
        executable_path=CHROMIUM, args=[*CHROMIUM_FLAGS, "--host-resolver-rules=MAP rebind.example 127.0.0.1"])
    try:
        page = chromium.new_page()
        refused(page, f"http://rebind.example:{port}/")
        assert page.get_by_role("heading", name="Train").count() == 0
        assert buttons(page, "Start") == 0
        page.goto(f"http://127.0.0.1:{port}/")  # the same browser, by the machine's own name: the app
        page.get_by_role("heading", name="Train").wait_for(timeout=90_000)
    finally:
        chromium.close()


def test_no_traceback_reaches_a_visitor_and_the_servers_log_keeps_it(tmp_path, browser):  # noqa: F811
    """The project's .streamlit/config.toml (read from the folder the server starts in) sets
    client.showErrorDetails to none: an unexpected exception in a page shows no message, path or
    traceback in the browser, and the server's log has all of it."""
    script = tmp_path / "boom.py"
    script.write_text("import streamlit as st\nst.title('Boom page')\n"
                      "raise RuntimeError('secret detail at /srv/lab/private')\n")
    port = free_port()
    log = tmp_path / "boom.log"
    with open(log, "w") as output:
        process = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(script), "--server.port", str(port),
                                    "--server.headless", "true"], cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process, log)
        page = open_page(browser, f"http://127.0.0.1:{port}/")
        page.get_by_role("heading", name="Boom page").wait_for(timeout=60_000)
        page.wait_for_timeout(2_000)
        shown = page.locator("body").inner_text()
        assert "secret detail" not in shown and "Traceback" not in shown and "/srv/lab" not in shown
        page.context.close()
        deadline = time.monotonic() + 10
        while "secret detail" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "secret detail at /srv/lab/private" in log.read_text()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_server_started_outside_the_checkout_still_refuses_a_rebound_name(tmp_path, browser):  # noqa: F811
    """Streamlit reads the .streamlit/config.toml beside the app's script too, not only the one of the folder
    it starts in: a server started elsewhere (with no address given) still listens on loopback only and
    refuses the websocket of a name that is not this machine's, and serves the app by its address."""
    store = tmp_path / "runs.db"
    RunStore(store).close()
    port = free_port()
    log = tmp_path / "elsewhere.log"
    with open(log, "w") as output:
        process = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
                                    "--server.port", str(port), "--server.headless", "true"],
                                   cwd=tmp_path, stdout=output, stderr=subprocess.STDOUT,
                                   env=dict(os.environ, STABILITY_STORE=str(store)))
    chromium = browser.browser_type.launch(
        executable_path=CHROMIUM, args=[*CHROMIUM_FLAGS, "--host-resolver-rules=MAP rebind.example 127.0.0.1"])
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process, log)
        assert f"127.0.0.1:{port}" in log.read_text() and "0.0.0.0" not in log.read_text()  # loopback only
        page = chromium.new_page()
        refused(page, f"http://rebind.example:{port}/")
        assert page.get_by_role("heading", name="Train").count() == 0 and buttons(page, "Start") == 0
        page.goto(f"http://127.0.0.1:{port}/")
        page.get_by_role("heading", name="Train").wait_for(timeout=90_000)
        page.get_by_role("button", name="Start", exact=True).wait_for(timeout=90_000)  # loopback: an operator
        assert "Rejecting WebSocket connection" in log.read_text()
    finally:
        chromium.close()
        process.terminate()
        process.wait(timeout=30)
