"""The errors that carry a user's mistake back as one line.

Each says what was wrong, what is allowed, and what to do; the CLI prints it
and exits 2, a page shows it under the form. Errors that belong to one room
live there (``StoreError`` in :mod:`stability.runs.errors`, ``SweepError`` in
:mod:`stability.sweeps.spec`); this module holds the ones every room raises.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is wrong; the message says which, and what is allowed."""
