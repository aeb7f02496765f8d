"""stability/live/status.py: a run's status in words, without Streamlit or a store."""
import math
from types import SimpleNamespace

from stability.live import status


def record(**fields):
    base = dict(id=1, status="running", step=1200, total_steps=2000, started_at=100.0, finished_at=None,
                heartbeat=160.0, created_at=90.0, device="cpu", external=False, latest={}, raw_config={})
    return SimpleNamespace(**{**base, **fields})


def test_durations_are_words_and_unknown_is_a_dash():
    assert [status.format_duration(s) for s in (45, 185, 3720, None, math.inf, -1)] == [
        "45 s", "3 min 05 s", "1 h 02 min", "—", "—", "—"]


def test_the_eta_logged_at_the_last_log_step_moves_with_the_step_between_log_steps():
    running = record(latest={"progress/eta_s": 100.0, "speed/steps_per_s": 8.0})
    assert status.moving_eta(running, eta_step=1000) == 100.0 * 800 / 1000
    assert status.progress_line(running, 1000) == "step 1,200 / 2,000 · ETA 1 min 20 s · 8.0 steps/s · cpu"
    ended = record(status="completed", step=2000, finished_at=200.0)
    assert status.progress_line(ended) == "step 2,000 / 2,000 · took 1 min 40 s · 20.0 steps/s · cpu"


def test_an_external_run_silent_for_a_while_says_so_and_is_described_as_external():
    silent = record(external=True, raw_config={"cell": {"name": "lstm"}})
    assert status.quiet_for(silent, now=160.0 + status.QUIET_AFTER_S + 60) == "no word for 3 min"
    assert status.quiet_for(silent, now=170.0) is None and status.quiet_for(record(), now=10_000) is None
    assert status.describe_run(silent) == f"{status.EXTERNAL} · lstm"
