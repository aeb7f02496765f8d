"""A live page's engine, without Streamlit: how often a panel looks at a run (pace) for how many watchers
(audience), which charts a run's panel draws (panels), the chart specs a page sends, kept and refreshed with
new rows only (specs), a run's status line in words (status), and a watched run's tail, read once a refresh for
every session (tail). pages/ui/live.py, status.py and shared.py draw and keep them.

    from stability.live import Audience, paced
    every = paced(1.5, audience.look(token))      # a panel's seconds between looks, for everyone watching
    charts = run_panels(rows, cell="rnn", metric="mse", height=360)
    specs = shared_specs(memo, slot, charts)      # built once for every session, the same spec while rows stay
"""
from .audience import AUDIENCE_WINDOW_S, LOOKS_PER_S, Audience, looks_per_s, paced
from .pace import (AUTO_EVERY_S, DEFAULT_REFRESH, FIRST_POINT_EVERY_S, FIRST_POINT_FOR_S, FIRST_ROWS_WAIT_S,
                   REFRESH_CHOICES, RETIME_EVERY_S, RETIME_FACTOR, awaiting_first_point, describe_refresh, drifted,
                   live_every, log_interval, needs_retime)
from .panels import heatmaps, run_panels, summary_values, sweep_panels
from .specs import (HOVER_POINTS, LIVE_POINTS, SHARED_SLOTS, LiveChart, charts_built_together, session_specs,
                    shared_specs, skeleton_spec)
from .status import EXTERNAL, QUIET_AFTER_S, describe_run, format_duration, progress_line, quiet_for
from .tail import KEPT_MEMOS, LiveRows, Look, SharedMemo, SharedRuns, awaited, not_in_store, session_rows

__all__ = ["AUDIENCE_WINDOW_S", "AUTO_EVERY_S", "Audience", "DEFAULT_REFRESH", "EXTERNAL", "FIRST_POINT_EVERY_S",
           "FIRST_POINT_FOR_S", "FIRST_ROWS_WAIT_S", "HOVER_POINTS", "KEPT_MEMOS", "LIVE_POINTS", "LOOKS_PER_S",
           "LiveChart", "LiveRows", "Look", "QUIET_AFTER_S", "REFRESH_CHOICES", "RETIME_EVERY_S", "RETIME_FACTOR",
           "SHARED_SLOTS", "SharedMemo", "SharedRuns", "awaited", "awaiting_first_point", "charts_built_together",
           "describe_refresh", "describe_run", "drifted", "format_duration", "heatmaps", "live_every", "log_interval",
           "looks_per_s", "needs_retime", "not_in_store", "paced", "progress_line", "quiet_for", "run_panels",
           "session_rows", "session_specs", "shared_specs", "skeleton_spec", "summary_values", "sweep_panels"]
