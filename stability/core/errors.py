"""The errors that carry a user's mistake back as one line.

Each says what was wrong, what is allowed, and what to do; the CLI prints it
and exits 2, a page shows it under the form. Errors that belong to one room
live there (``StoreError`` in :mod:`stability.runs.errors`, ``SweepError`` in
:mod:`stability.sweeps.spec`); this module holds the ones every room raises.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is wrong; the message says which, and what is allowed."""


def check_choice(name: str, value, choices):
    """``value`` when it is one of ``choices``, else a ValueError naming them all (a cell's or a task's
    option: ``data must be one of 'real', 'standin', 'auto', got 'fake'``)."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def one_line(error: BaseException | str, *, named: bool = False) -> str:
    """An error's message (or a text) on one line, its whitespace runs made single spaces; ``named``: after
    the error's type, ``"ValueError: ..."`` (where the type says what the message alone does not, as a
    plugin's failed import)."""
    text = f"{type(error).__name__}: {error}" if named and isinstance(error, BaseException) else str(error)
    return " ".join(text.split())
