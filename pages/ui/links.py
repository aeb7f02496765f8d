"""Links that carry a view: the URL's query parameters read against the widgets' limits, and back.

    query = QueryReader()
    config = config_from_query(RunConfig(), query)      # ?cell=&hidden=&task=&seq_len=&steps=&lr=&seed=
    st.query_params.update(config_to_query(config))
    query.warn()                                        # one line for whatever the link got wrong
"""
from __future__ import annotations

import math
import re
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
            self.problems.append(f"{key}={linked_text(text)} (expected {_range(low, high)})")
            return default
        return value

    def choice(self, key: str, choices, default):
        text = st.query_params.get(key)
        if text is None:
            return default
        if text not in choices:
            self.problems.append(f"{key}={linked_text(text)} (expected one of {', '.join(map(str, choices))})")
            return default
        return text

    def choices(self, key: str, choices, default: list) -> list:
        text = st.query_params.get(key)
        if text is None:
            return default
        given = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [part for part in given if part not in choices]
        if unknown:
            self.problems.append(f"{key}: {linked_text(', '.join(unknown))} (expected names among "
                                 f"{', '.join(map(str, choices))})")
        return [part for part in given if part in choices] or default

    def ids(self, key: str) -> list[int]:
        """Run ids from ``?key=1,2,3``, at most :data:`MAX_LINKED_IDS` (:func:`linked_ids`); anything that is
        not a run id is left out, and what was left out is noted in one phrase."""
        text = st.query_params.get(key)
        if not text:
            return []
        ids, bad, given = linked_ids(text)
        if bad:
            self.problems.append(f"{key}: {linked_text(', '.join(bad))} (run ids are integers from 1)")
        if given > len(ids):
            self.problems.append(f"{key}: the ids after the first {len(ids):,} of {given:,} (a link opens at most "
                                 f"{MAX_LINKED_IDS:,})")
        return ids

    def note(self, problem: str) -> None:
        """Add a phrase to the warning; what in it the link typed must be :func:`linked_text` already."""
        self.problems.append(problem)

    def warn(self) -> None:
        """One warning line for every problem noted (what the link typed in each :func:`linked_text`)."""
        if self.problems:
            st.warning(f"Ignored in this link: {'; '.join(self.problems)}. Using the defaults instead.")


# Note [Linked ids]
# -----------------
# Every page reads the run ids of its link (Race's and Reproduce's ?runs=, Compare's ?runs=, Train's ?run=,
# Sweep's and Reproduce's ?sweep=) with QueryReader.ids, so the one rule is here: the first MAX_LINKED_IDS
# distinct ids, in the link's order, and one phrase for the rest.  ``race?runs=1,...,20000`` used to read
# 20,000 runs and draw a warning for each at every refresh (9 s of the server's CPU a look).
MAX_LINKED_IDS = 100


def linked_ids(text: str, limit: int = MAX_LINKED_IDS) -> tuple[list[int], list[str], int]:
    """``(ids, bad, given)`` of a link's ``1,2,3``: the first ``limit`` distinct run ids (integers within
    ``LIMITS["run"]``), the parts that are not run ids (the first few), and how many distinct ids it gave."""
    low, high = LIMITS["run"]
    ids, bad = {}, []
    for part in (part.strip() for part in text.split(",")):
        if not part:
            continue
        value = _parse_number(part, int)
        if value is not None and low <= value <= high:
            ids[value] = None
        elif len(bad) < 10:
            bad.append(part[:40])
    return list(ids)[:limit], bad, len(ids)


# what markdown, HTML, GFM's autolinks and Streamlit's directives read mid-line (a message's value never starts one)
_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()<>&!:$~|@]|(?<=www)\.)", re.IGNORECASE)


def escaped(text: str) -> str:
    """``text`` shown as typed inside a line of Streamlit's markdown (a warning, a caption): every character
    that markdown, HTML, an autolink or a Streamlit directive reads there (``[``, ``(``, ``<``, ``&``, ``:``,
    ``$``, ``@``, ``www.`` ...) backslash-escaped, so a link's ``?preset=[Log in](http://…)`` is text, not a
    live link, an image, a colour or a formula; newlines become spaces (a line is one line)."""
    return _MARKDOWN_SPECIALS.sub(r"\\\1", " ".join(str(text).split()))


def linked_text(text: str, limit: int = 40) -> str:
    """A value the link typed, for a message: shortened to ``limit`` characters and :func:`escaped`."""
    return escaped(_shorten(str(text), limit))


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

