"""Links that carry a view: the URL's query parameters read against the widgets' limits, and back.

    query = QueryReader()
    config = config_from_query(RunConfig(), query)      # ?cell=&hidden=&task=&seq_len=&steps=&lr=&seed=
    st.query_params.update(config_to_query(config))
    query.warn()                                        # one line for whatever the link got wrong
"""
from __future__ import annotations

import math
from dataclasses import replace

import streamlit as st

from pages.ui.limits import LIMITS
from stability import cells, tasks
from stability.config import CellConfig, RunConfig, TaskConfig


class QueryReader:
    """Reads the URL's query parameters against the widgets' own :data:`LIMITS`; whatever is malformed or
    out of range is replaced by the default and noted, and :meth:`warn` shows the notes as one line.

        query = QueryReader()
        hidden = query.number("hidden", 128)          # LIMITS["hidden"]: an int in [1, 2048]
        query.warn()                                  # "Ignored in this link: hidden=40000 (...)."
    """

    def __init__(self):
        self.problems: list[str] = []

    def text(self, key: str) -> str | None:
        return st.query_params.get(key)

    def number(self, key: str, default, limit: str | None = None):
        """``?key=`` as the type of ``LIMITS[limit or key]``, within its bounds; else ``default``."""
        low, high = LIMITS[limit or key]
        text = st.query_params.get(key)
        if text is None:
            return default
        value = _parse_number(text, type(low))
        if value is None or not low <= value <= high:
            self.problems.append(f"{key}={_shorten(text)} (expected {_range(low, high)})")
            return default
        return value

    def choice(self, key: str, choices, default):
        text = st.query_params.get(key)
        if text is None:
            return default
        if text not in choices:
            self.problems.append(f"{key}={_shorten(text)} (expected one of {', '.join(map(str, choices))})")
            return default
        return text

    def choices(self, key: str, choices, default: list) -> list:
        text = st.query_params.get(key)
        if text is None:
            return default
        given = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [part for part in given if part not in choices]
        if unknown:
            self.problems.append(f"{key}: {_shorten(', '.join(unknown))} (expected names among "
                                 f"{', '.join(map(str, choices))})")
        return [part for part in given if part in choices] or default

    def ids(self, key: str) -> list[int]:
        """Run ids from ``?key=1,2,3``; anything that is not a run id is left out and noted."""
        text = st.query_params.get(key)
        if not text:
            return []
        ids, bad = [], []
        low, high = LIMITS["run"]
        for part in (part.strip() for part in text.split(",") if part.strip()):
            value = _parse_number(part, int)
            (ids if value is not None and low <= value <= high else bad).append(value if value is not None
                                                                               and low <= value <= high else part)
        if bad:
            self.problems.append(f"{key}: {_shorten(', '.join(map(str, bad)))} (run ids are integers from 1)")
        return list(dict.fromkeys(ids))

    def note(self, problem: str) -> None:
        self.problems.append(problem)

    def warn(self) -> None:
        if self.problems:
            st.warning(f"Ignored in this link: {'; '.join(self.problems)}. Using the defaults instead.")


def _parse_number(text: str, kind: type):
    try:
        value = int(text) if kind is int else float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if kind is int or math.isfinite(value) else None


def _range(low, high) -> str:
    kind = "an integer" if isinstance(low, int) else "a number"
    return f"{kind} from {low:g} to {high:g}" if isinstance(low, float) else f"{kind} from {low} to {high:,}"


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def config_from_query(base: RunConfig, query: QueryReader) -> RunConfig:
    """``base`` with what the URL names: ?cell=, ?hidden=, ?task=, ?seq_len=, ?steps=, ?lr=, ?seed=; every
    number within the widget's :data:`LIMITS`, names among the registered ones (else noted on ``query``)."""
    cell = query.choice("cell", cells.available(), base.cell.name)
    task = query.choice("task", tasks.available(), base.task.name)
    task_options = dict(base.task.options) if task == base.task.name else {}
    task_defaults = tasks.describe(task).defaults()
    if "seq_len" in st.query_params and "seq_len" in task_defaults:
        default_length = task_options.get("seq_len") or task_defaults["seq_len"] or 100
        task_options["seq_len"] = query.number("seq_len", int(default_length))
    train = replace(base.train, steps=query.number("steps", base.train.steps),
                    seed=query.number("seed", base.train.seed), lr=query.number("lr", float(base.train.lr)))
    return RunConfig(cell=CellConfig(cell, query.number("hidden", base.cell.hidden_size),
                                     dict(base.cell.options) if cell == base.cell.name else {}),
                     task=TaskConfig(task, task_options), train=train, name=base.name)


def config_to_query(config: RunConfig) -> dict[str, str]:
    """The query parameters :func:`config_from_query` reads, for ``st.query_params.update``."""
    params = {"cell": config.cell.name, "hidden": str(config.cell.hidden_size), "task": config.task.name,
              "steps": str(config.train.steps), "lr": f"{config.train.lr:g}", "seed": str(config.train.seed)}
    if "seq_len" in config.task.options:
        params["seq_len"] = str(config.task.options["seq_len"])
    return params

