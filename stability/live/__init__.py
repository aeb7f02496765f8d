"""A live page's engine, without Streamlit: how often its panels look for how many watchers (audience), which
charts a run's panel draws (panels), and the chart specs a page sends, kept and refreshed with new rows only
(specs). pages/ui/live.py draws them.

    from stability.live import Audience, paced
    every = paced(1.5, audience.look(token))      # a panel's seconds between looks, for everyone watching
    charts = run_panels(rows, cell="rnn", metric="mse", height=360)
    specs = shared_specs(memo, slot, charts)      # built once for every session, the same spec while rows stay
"""
from .audience import AUDIENCE_WINDOW_S, LOOKS_PER_S, Audience, looks_per_s, paced
from .panels import heatmaps, run_panels, summary_values
from .specs import (HOVER_POINTS, LIVE_POINTS, SHARED_SLOTS, LiveChart, charts_built_together, session_specs,
                    shared_specs, skeleton_spec)

__all__ = ["AUDIENCE_WINDOW_S", "HOVER_POINTS", "LIVE_POINTS", "LOOKS_PER_S", "SHARED_SLOTS", "Audience", "LiveChart",
           "charts_built_together", "heatmaps", "looks_per_s", "paced", "run_panels", "session_specs",
           "shared_specs", "skeleton_spec", "summary_values"]
