"""The server's audience: how many sessions are watching, and the pace that keeps their cost bounded.

Note [A class watching]
-----------------------
Every live panel reruns on its own timer (pages/ui/live.py), and each rerun is a script run in the server:
the page's fragment, ~20 elements built, hashed and sent by Streamlit, whatever the work the sessions share
(stability/live/tail.py, Note [Many watchers]). So the server's work grows with its watchers, and a class is
as many watchers as it has students. Measured with headless watchers of the default classroom run
(benchmarks/live_watchers.py --clients headless, 2 cores, 2026-11-28;
benchmarks/live-watchers-cpu-2026-11-28.md): with Streamlit's garbage collection after every script run
switched off (.streamlit/config.toml, runner.postScriptGC), sixty watchers at Auto's 1.5 s, about 40 looks
a second, took 39-42 % of the server's core (98 % before), the run keeping 0.92-0.96x of its speed.

That rate is the server's budget for all live panels together, :data:`LOOKS_PER_S`: a panel looks no more
often than the number of sessions that looked at any live panel within :data:`AUDIENCE_WINDOW_S` over the
budget allows (:func:`paced`). Up to sixty watchers nothing changes (Auto's 1.5 s is slower than the
budget's pace); ninety look every 2.25 s, a hundred and twenty every 3 s, and the server's core stays at
about half whatever the audience, beside the run it shows (120 watchers: 48 %, a point every 2.4 s, median;
before, 98 % and up to 12 s without one). A visitor can ask for a faster pace; the server
does not give it. A lecturer whose server has cores to spare raises the budget with
``STABILITY_LOOKS_PER_S`` (a positive number of looks a second).
"""
from __future__ import annotations

import math
import os
import threading
import time

LOOKS_PER_S = 40.0         # the server's looks a second, all live panels of all sessions together
AUDIENCE_WINDOW_S = 10.0   # a session that looked within this long is watching


def looks_per_s(env=os.environ) -> float:
    """The server's budget of looks a second: ``STABILITY_LOOKS_PER_S`` if it is a positive finite number,
    else :data:`LOOKS_PER_S` (a bad value is ignored: the budget is a bound, not a switch to break)."""
    try:
        budget = float(env.get("STABILITY_LOOKS_PER_S", LOOKS_PER_S))
    except ValueError:
        return LOOKS_PER_S
    return budget if math.isfinite(budget) and budget > 0 else LOOKS_PER_S


def paced(every: float | None, watchers: int, budget: float | None = None) -> float | None:
    """``every`` (seconds between a panel's looks; None: no polling) slowed so that ``watchers`` sessions
    together look at most ``budget`` (:func:`looks_per_s`) times a second (Note [A class watching])."""
    if every is None:
        return None
    return max(every, watchers / (looks_per_s() if budget is None else budget))


class Audience:
    """The sessions that looked at a live panel within the last :data:`AUDIENCE_WINDOW_S`; thread-safe.

    A session is named by a token of its own (any hashable); one that stops looking (a closed tab) leaves
    the count a window later. The memory is one entry a session that looked within the window."""

    def __init__(self, window_s: float = AUDIENCE_WINDOW_S, clock=time.monotonic):
        self.window_s = window_s
        self._clock = clock
        self._last: dict = {}  # token -> when it last looked
        self._lock = threading.Lock()

    def look(self, token) -> int:
        """``token``'s session looks now; the number of sessions watching, itself included."""
        with self._lock:
            now = self._clock()
            self._last[token] = now
            self._forget(now)
            return len(self._last)

    def watchers(self) -> int:
        """The number of sessions that looked within the window."""
        with self._lock:
            self._forget(self._clock())
            return len(self._last)

    def _forget(self, now: float) -> None:
        gone = [token for token, when in self._last.items() if now - when > self.window_s]
        for token in gone:
            del self._last[token]
