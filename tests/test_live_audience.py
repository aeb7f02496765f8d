"""A class watching (stability/live/audience.py, Note [A class watching]): the server's looks a second stay
within its budget whatever the audience, and a real server's panels slow down as sessions join."""
from __future__ import annotations

import asyncio
import time

import pytest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.live import LOOKS_PER_S, Audience, looks_per_s, paced
from stability.runs.store import RunStore

from browsers import streamlit_server
from statuses import set_status


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("every", [0.1, 1.5, 2.0, 30.0])
@pytest.mark.parametrize("watchers", [1, 10, 60, 61, 120, 1000])
def test_a_panel_is_never_faster_than_asked_and_all_together_stay_within_the_budget(every, watchers):
    period = paced(every, watchers)
    assert period >= every
    assert watchers / period <= LOOKS_PER_S * (1 + 1e-12)  # the server's looks a second, every panel at this pace
    # slowed only as much as the budget needs: either the panel's own pace or exactly the budget's
    assert period == every or watchers / period == pytest.approx(LOOKS_PER_S)


def test_no_polling_stays_no_polling_and_more_watchers_never_look_faster():
    assert paced(None, 500) is None
    periods = [paced(1.5, watchers) for watchers in range(1, 300)]
    assert periods == sorted(periods)
    assert paced(1.5, 60) == 1.5 and paced(1.5, 120) == pytest.approx(3.0)  # 120 / 40 looks a second


@pytest.mark.parametrize("value, budget", [("80", 80.0), ("0.5", 0.5), ("0", LOOKS_PER_S), ("-3", LOOKS_PER_S),
                                           ("nan", LOOKS_PER_S), ("inf", LOOKS_PER_S), ("lots", LOOKS_PER_S)])
def test_the_budget_is_set_by_the_environment_and_a_bad_value_keeps_the_default(value, budget):
    assert looks_per_s({"STABILITY_LOOKS_PER_S": value}) == budget
    assert looks_per_s({}) == LOOKS_PER_S


def test_the_audience_counts_sessions_that_looked_within_the_window_once_each():
    clock = Clock()
    audience = Audience(window_s=10.0, clock=clock)
    assert audience.watchers() == 0
    assert [audience.look(name) for name in "abc"] == [1, 2, 3]
    assert audience.look("a") == 3  # the same session twice is one watcher
    clock.now += 6
    assert audience.look("d") == 4
    clock.now += 5  # b and c looked 11 s ago, a 11 s ago too: gone; d 5 s ago stays
    assert audience.watchers() == 1
    assert audience.look("b") == 2


async def _intervals(url: str, query: str, sessions: int, fragments: int, hold_s: float) -> list[dict[str, list[float]]]:
    """Open ``sessions`` websocket sessions of the page one after another (each as a browser opens it) and
    keep them all for ``hold_s`` seconds (the next opens once the last has its ``fragments`` fragments), each asking for its fragments' reruns when the server says; for
    each session, the intervals the server gave each of its fragments, in order."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    given: list[dict[str, list[float]]] = [{} for _ in range(sessions)]

    async def session(index: int, socket, until: float) -> None:
        page_hash, timers = "", {}

        async def ask(fragment_id: str = "") -> None:
            message = BackMsg()
            message.rerun_script.query_string = query
            message.rerun_script.page_script_hash = page_hash
            message.rerun_script.widget_states.SetInParent()
            if fragment_id:
                message.rerun_script.fragment_id, message.rerun_script.is_auto_rerun = fragment_id, True
            await socket.send(message.SerializeToString())

        async def every(fragment_id: str, interval: float) -> None:
            while True:
                await asyncio.sleep(interval)
                await ask(fragment_id)

        await ask()
        try:
            while time.monotonic() < until:
                try:
                    data = await asyncio.wait_for(socket.recv(), timeout=max(0.01, until - time.monotonic()))
                except asyncio.TimeoutError:
                    break
                message = ForwardMsg()
                message.ParseFromString(data)
                kind = message.WhichOneof("type")
                if kind == "new_session":
                    page_hash = message.new_session.page_script_hash or page_hash
                elif kind == "auto_rerun":
                    given[index].setdefault(message.auto_rerun.fragment_id, []).append(message.auto_rerun.interval)
                    old = timers.pop(message.auto_rerun.fragment_id, None)
                    if old is not None:
                        old.cancel()
                    timers[message.auto_rerun.fragment_id] = asyncio.create_task(
                        every(message.auto_rerun.fragment_id, message.auto_rerun.interval))
        finally:
            for timer in timers.values():
                timer.cancel()

    stream = url.replace("http", "ws") + "/_stcore/stream"
    sockets, tasks = [], []
    until = time.monotonic() + hold_s
    for index in range(sessions):
        socket = await websockets.connect(stream, subprotocols=["streamlit"], max_size=None)
        sockets.append(socket)
        tasks.append(asyncio.create_task(session(index, socket, until)))
        while len(given[index]) < fragments:  # the session's panel has its pace before the next one opens
            await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    for socket in sockets:
        await socket.close()
    return given


def test_a_real_servers_panels_slow_down_as_watchers_join_and_the_first_is_re_paced(tmp_path):
    """Three sessions of a live run's Train page on a server whose budget is one look a second: each joins
    at the pace its audience allows (Auto's 1.5 s, then 2 s, then 3 s), and the first, at its next look,
    finds the audience grown and reruns its page at the pace of three."""
    store_path = tmp_path / "runs.db"
    with RunStore(store_path) as store:
        config = RunConfig(CellConfig("rnn", 8), TaskConfig("adding", {"seq_len": 10}), TrainConfig(steps=1000))
        run_id = store.create_run(config.to_dict())
        set_status(store, run_id, "running")
        now = time.time()
        store.flush(run_id, [(0, now, "train/loss", 0.2), (0, now, "speed/steps_per_s", 100.0)], [], heartbeat_step=0)
    budget = 1.0
    with streamlit_server(store_path, tmp_path / "server.log",
                          {"STABILITY_LOOKS_PER_S": str(budget), "STABILITY_WARM_WORKERS": "0"}) as (url, _):
        given = asyncio.run(_intervals(url, f"run={run_id}", sessions=3, fragments=2, hold_s=12.0))
    # each session's live panel: its fastest fragment (the sidebar's list of runs in progress looks every 10 s)
    panels = [min(fragments.values(), key=lambda intervals: intervals[0]) for fragments in given]
    auto = 1.5  # the Train page's Auto pace for a run logging often (stability/live/pace.py, AUTO_EVERY_S)
    assert [intervals[0] for intervals in panels] == [pytest.approx(max(auto, joined / budget))
                                                     for joined in (1, 2, 3)]
    assert panels[0][-1] == pytest.approx(3 / budget)  # re-paced once the third joined
