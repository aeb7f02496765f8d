"""What a live page needs that is not drawing: how often its panels look, for how many watchers.

    from stability.live import Audience, paced
    every = paced(1.5, audience.look(token))      # a panel's seconds between looks, for everyone watching
"""
from .audience import AUDIENCE_WINDOW_S, LOOKS_PER_S, Audience, looks_per_s, paced

__all__ = ["AUDIENCE_WINDOW_S", "LOOKS_PER_S", "Audience", "looks_per_s", "paced"]
