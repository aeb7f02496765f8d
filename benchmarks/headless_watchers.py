"""Watchers without a browser: websocket clients that speak Streamlit's own protocol to a real server.

    python benchmarks/headless_watchers.py http://127.0.0.1:8501 "run=3" --watchers 30 --seconds 20 --out w.json

Thirty Chromium tabs do not fit beside a run on a 2-core machine (benchmarks/live-page-cpu-2026-11-26.md):
the tabs' drawing, not the server, took the cores. A classroom's browsers each run on their own laptop, so
what the server pays for thirty watchers is the figure that carries over, and these clients ask the server
for exactly what a tab asks for, without drawing anything:

* each opens ``/_stcore/stream`` (subprotocol ``streamlit``) and asks for the page's script run with the
  page's query string, as the browser does on load (BackMsg ``rerun_script``);
* an ``auto_rerun`` ForwardMsg (an ``st.fragment(run_every=...)``) starts a timer for that fragment that
  asks for its rerun every ``interval`` seconds (``is_auto_rerun``, the fragment's id), as the browser's
  ``setInterval`` does; a new one for the same fragment replaces it, ``stop_auto_rerun`` ends it, and a
  full script run (a ``new_session`` whose run names no fragment) ends them all;
* every rerun it asks for names the hashes of the cacheable messages it has received
  (``cached_message_hashes``), as the browser's message cache does, so the server sends a reference
  (``ref_hash``) where it would to a tab, and the same full messages otherwise;
* what it records is what a watcher sees: the times at which the page's progress line (the Train page's
  "step N of M") changed, and the number of messages and bytes received.

It writes one JSON object to ``--out``: per watcher, its progress-line change times and message counts,
for the window [start, start + seconds] (``--start``, or ``--settle`` seconds from now). Run as its own process by
``live_watchers.py --clients headless`` so that its CPU is measured apart from the server's.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from urllib.parse import urlsplit

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg


class Watcher:
    """One headless watcher of the page at ``url``'s ``/_stcore/stream`` with ``query`` (no leading '?')."""

    def __init__(self, url: str, query: str):
        parts = urlsplit(url)
        self.stream = f"ws://{parts.netloc}/_stcore/stream"
        self.query = query
        self.page_hash = ""
        self.cached: set[str] = set()
        self.timers: dict[str, asyncio.Task] = {}
        self.progress_text: str | None = None
        self.changes: list[float] = []  # epoch seconds at which the progress line changed
        self.messages = self.bytes = self.reruns_asked = 0

    async def watch(self, until: float) -> None:
        async with websockets.connect(self.stream, subprotocols=["streamlit"], max_size=None,
                                      compression=None) as socket:
            self.socket = socket
            await self._ask()
            try:
                while time.time() < until:
                    try:
                        data = await asyncio.wait_for(socket.recv(), timeout=max(0.01, until - time.time()))
                    except asyncio.TimeoutError:
                        break
                    await self._take(data)
            finally:
                for timer in self.timers.values():
                    timer.cancel()

    async def _ask(self, fragment_id: str = "") -> None:
        message = BackMsg()
        state = message.rerun_script
        state.query_string = self.query
        state.page_script_hash = self.page_hash
        state.widget_states.SetInParent()
        state.cached_message_hashes.extend(sorted(self.cached))
        if fragment_id:
            state.fragment_id, state.is_auto_rerun = fragment_id, True
        self.reruns_asked += 1
        await self.socket.send(message.SerializeToString())

    async def _every(self, fragment_id: str, interval: float) -> None:
        while True:  # the browser's setInterval: a rerun every interval, whether the last one ended or not
            await asyncio.sleep(interval)
            await self._ask(fragment_id)

    def _stop(self, fragment_ids) -> None:
        for fragment_id in list(fragment_ids):
            timer = self.timers.pop(fragment_id, None)
            if timer is not None:
                timer.cancel()

    async def _take(self, data: bytes) -> None:
        self.messages += 1
        self.bytes += len(data)
        message = ForwardMsg()
        message.ParseFromString(data)
        if message.hash and message.metadata.cacheable:
            self.cached.add(message.hash)
        kind = message.WhichOneof("type")
        if kind == "new_session":
            self.page_hash = message.new_session.page_script_hash or self.page_hash
            if not message.metadata.run.fragment_ids:  # a full script run: its fragments announce themselves again
                self._stop(self.timers)
        elif kind == "auto_rerun":
            fragment_id = message.auto_rerun.fragment_id
            self._stop([fragment_id])
            self.timers[fragment_id] = asyncio.create_task(self._every(fragment_id, message.auto_rerun.interval))
        elif kind == "stop_auto_rerun":
            self._stop(message.stop_auto_rerun.fragment_ids)
        elif kind == "delta" and message.delta.WhichOneof("type") == "new_element":
            element = message.delta.new_element
            if element.WhichOneof("type") == "progress" and element.progress.text != self.progress_text:
                self.progress_text = element.progress.text
                self.changes.append(time.time())


async def watch_all(url: str, query: str, count: int, start: float, seconds: float) -> dict:
    """``count`` watchers from now until ``start + seconds`` (epoch seconds); what they saw in the window."""
    watchers = [Watcher(url, query) for _ in range(count)]
    until = start + seconds
    results = await asyncio.gather(*(watcher.watch(until) for watcher in watchers), return_exceptions=True)
    errors = [f"{type(result).__name__}: {result}" for result in results if isinstance(result, BaseException)]
    return {"start": start, "end": until, "errors": errors,
            "watchers": [{"changes": [t for t in w.changes if start <= t <= until], "messages": w.messages,
                          "bytes": w.bytes, "reruns_asked": w.reruns_asked} for w in watchers]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("query", help="the page's query string, e.g. run=3")
    parser.add_argument("--watchers", type=int, default=1)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds from now to the window's start")
    parser.add_argument("--start", type=float, help="the window's start, epoch seconds (instead of --settle)")
    parser.add_argument("--seconds", type=float, default=20.0, help="the window's length")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    start = args.start if args.start is not None else time.time() + args.settle
    result = asyncio.run(watch_all(args.url, args.query, args.watchers, start, args.seconds))
    with open(args.out, "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
