"""What the Train, Race, Compare and Runs pages share: the run configuration form, a run's status
line, the store they read, and incremental reads of a run's rows for live panels.

    config = config_form("train", defaults=RunConfig())   # a validated RunConfig, or None (error shown)
    run_status_panel(open_store(), run_id)                # badge, progress with ETA, steps/s, device, error
    rows = run_rows(store, run_id, status, flow=True)     # this session's cache, topped up with since_step

Streamlit only: every rule about what is valid lives in ``stability.config`` and the registries.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import streamlit as st

from stability import cells, optimizers, runner, tasks
from stability.charts import MAX_SMOOTHING
from stability.config import (
    DEVICES,
    DTYPES,
    LR_SCHEDULES,
    OPTIMIZERS,
    CellConfig,
    ConfigError,
    RunConfig,
    TaskConfig,
    TrainConfig,
)
from stability.registry import OptionInfo
from stability.store import (
    ENV_VAR,
    TERMINAL,
    RunNotFound,
    RunStore,
    StoreError,
    default_path,
)

STATUS_COLOURS = {"queued": "gray", "running": "blue", "completed": "green", "stopped": "orange",
                  "diverged": "red", "failed": "red", "interrupted": "orange"}
FLOW = "grad/h_t_norm"

# Note [Limits]
# -------------
# The bounds of the form's number widgets, and the only values a URL may set: ?hidden=40000 once made the
# server build a 6 GB recurrent matrix just to draw the page.  A 2048-unit LSTM's four recurrent matrices
# take 64 MiB; the papers use at most 512 units and T = 1000 (copy at T = 2000 is the longest task).
LIMITS = {
    "hidden": (1, 2048),
    "seq_len": (1, 100_000),
    "steps": (1, 10_000_000),
    "batch": (1, 4096),
    "lr": (1e-8, 10.0),
    "seed": (0, 2**31 - 1),
    "run": (1, 2**63 - 1),  # SQLite's INTEGER
    "smooth": (0.0, MAX_SMOOTHING),
    "T": (10, 1000),  # the Gradient flow page's sequence length
}
RECONCILE_EVERY_S = 10.0


# ------------------------------------------------------------------------------------------ store
def store_path() -> str:
    """The run store of this server: ``streamlit run app.py -- --store PATH``, else ``$STABILITY_STORE``,
    else ``~/.stability/runs.db``; a file path made absolute (a URL is passed through).

    Note [Store choice]
    -------------------
    Whoever starts the server chooses the store; a URL never does.  A ``?store=`` query parameter
    used to open or create any path the server could write, tell whether a path existed, and keep
    one open connection per path named.  Nothing here reads the query string, so a link carries a
    view of this server's runs and nothing else.
    """
    text = _store_option() or os.environ.get(ENV_VAR) or None
    if text and "://" in text:
        return text
    return str(Path(text).expanduser().absolute() if text else default_path().absolute())


def _store_option() -> str | None:
    """``--store PATH`` among the script's own arguments (those after ``--`` in ``streamlit run``)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--store")
    try:
        return parser.parse_known_args(sys.argv[1:])[0].store
    except SystemExit:  # '--store' without a value
        return None


@st.cache_resource(show_spinner=False, max_entries=8)
def _open_store(path: str) -> RunStore:
    return RunStore(path)  # one connection per store and server process; RunStore is thread-safe


STORE_ERRORS = (StoreError, sqlite3.DatabaseError)


def store_problem(error: Exception) -> str:
    """One line naming the store file and what is wrong with it; the cached connection is dropped so a
    repaired file is opened afresh."""
    _open_store.clear()
    if isinstance(error, StoreError):
        return str(error)
    return (f"The run store {store_path()} cannot be read ({error}). Point STABILITY_STORE at another file "
            "or move this one aside; a new store is created on the next start.")


def require_router(page_file: str) -> None:
    """Make sure ``app.py``'s ``st.navigation`` routes this run; call first on every page
    with the page's ``__file__``.

    Note [Direct links on a fresh server]
    -------------------------------------
    Streamlit decides once per server process, when the first session
    starts, whether the app uses the legacy ``pages/`` folder: it does if a
    folder of that name sits beside the entry script, until some run calls
    ``st.navigation``.  So the first visitor after a restart who opens a page
    link (``/compare?runs=1,2``) gets legacy routing: the page runs without
    ``app.py`` (no sidebar, no layout) and every file in ``pages/`` is listed.
    Our layout must keep ``pages/``, so a page that finds itself in legacy
    mode switches the flag off and switches to itself, query parameters and
    all, which reruns through ``app.py``'s router (tests/test_browser.py opens
    a page link first on a fresh server to check this).  Not under AppTest:
    it resets the flag before every run, so the flag says nothing there, and
    its page-switching harnesses rely on legacy routing.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory and "streamlit.testing.v1.app_test" not in sys.modules:
        PagesManager.uses_pages_directory = False
        st.switch_page(Path(page_file), query_params=st.query_params.to_dict())


def open_store() -> RunStore:
    """The store at :func:`store_path`, opened once per server process; a store that cannot be opened
    stops the page with one error line naming the file."""
    try:
        return _open_store(store_path())
    except STORE_ERRORS as error:
        st.error(store_problem(error))
        st.stop()


def open_store_quietly() -> RunStore:
    """The store at :func:`store_path`, or a :data:`STORE_ERRORS` exception for the caller to show."""
    return _open_store(store_path())


def store_guard(draw):
    """``draw`` (a live panel) with a store that breaks while the page is open shown as one error line."""
    @functools.wraps(draw)
    def guarded(*args, **kwargs):
        try:
            return draw(*args, **kwargs)
        except STORE_ERRORS as error:
            st.error(store_problem(error))
    return guarded


def active_runs(store: RunStore) -> pd.DataFrame:
    """Runs queued or training: id, status, step, total_steps, cell, task; one indexed query, configs of
    these runs only (the sidebar polls this on every page)."""
    rows = store._query("SELECT id, status, step, total_steps, config FROM runs "
                        "WHERE status IN ('queued', 'running') ORDER BY id")
    configs = [json.loads(row[4]) for row in rows]
    return pd.DataFrame({"id": [row[0] for row in rows], "status": [row[1] for row in rows],
                         "step": [row[2] for row in rows], "total_steps": [row[3] for row in rows],
                         "cell": [(config.get("cell") or {}).get("name") for config in configs],
                         "task": [(config.get("task") or {}).get("name") for config in configs]})


_reconciled: dict[str, float] = {}
_reconcile_lock = threading.Lock()


def reconcile_now_and_then(path: str, every_s: float = RECONCILE_EVERY_S) -> None:
    """``runner.reconcile`` (dead workers -> interrupted, queued runs -> free slots) at most once every
    ``every_s`` seconds per store and server process, however many pages poll: a worker that ends
    launches the next queued run itself, so this only catches workers that died."""
    with _reconcile_lock:
        now = time.monotonic()
        if now - _reconciled.get(path, -math.inf) < every_s:
            return
        _reconciled[path] = now
    runner.reconcile(path)


# ------------------------------------------------------------------------------------------- form
def config_form(key_prefix: str, *, defaults: RunConfig | None = None, cells_multi: bool = False,
                cells_default: list[str] | None = None) -> RunConfig | list[RunConfig] | None:
    """Widgets for a whole run configuration, starting from ``defaults``; every key starts with ``key_prefix``.

    Returns the validated :class:`RunConfig` (with ``cells_multi``: one per chosen cell, sharing task and
    training settings; ``cells_default`` preselects cells), or None after showing the problem as one
    ``st.error`` line.
    """
    defaults = defaults or RunConfig()
    names = cells.available()
    st.markdown("**Model**")
    if cells_multi:
        chosen = st.multiselect("Cells", names, default=[n for n in cells_default or [defaults.cell.name]
                                                         if n in names],
                                key=f"{key_prefix}_cells", help=cell_help(names))
    else:
        chosen = [st.selectbox("Cell", names, index=_index(names, defaults.cell.name),
                               key=f"{key_prefix}_cell", help=cell_help(names))]
    hidden = int(limited_input(st, "Hidden size", "hidden", defaults.cell.hidden_size, step=8,
                               key=f"{key_prefix}_hidden",
                                 help="Units in the recurrent state (the spectral paper uses 128)."))
    cell_options = {}
    for name in chosen:
        if cells_multi:
            with st.expander(f"{name}: equation and options"):
                cell_about(name)
                cell_options[name] = _cell_options(key_prefix, name, defaults)
        else:
            cell_about(name)
            with st.expander("Cell options"):
                cell_options[name] = _cell_options(key_prefix, name, defaults)

    st.markdown("**Task**")
    task_names = tasks.available()
    task = st.selectbox("Task", task_names, index=_index(task_names, defaults.task.name), key=f"{key_prefix}_task")
    about = tasks.describe(task)
    task_options = _task_options(key_prefix, about, defaults)
    task_about(about)

    st.markdown("**Training**")
    train = _train_settings(key_prefix, defaults.train)

    configs = [RunConfig(cell=CellConfig(name, hidden, cell_options[name]),
                         task=TaskConfig(task, dict(task_options)), train=train) for name in chosen]
    try:
        if not configs:
            raise ConfigError("pick at least one cell")
        missing = [option for option in about.required_options if not task_options.get(option)]
        if missing:
            raise ConfigError(f"task {task!r} needs the option {', '.join(missing)}")
        for config in configs:
            problem = config_problem(json.dumps(config.to_dict(), sort_keys=True))
            if problem:
                raise ConfigError(problem)
    except ConfigError as error:
        st.error(str(error))
        return None
    return configs if cells_multi else configs[0]


@st.cache_data(show_spinner=False, max_entries=256)
def config_problem(config_json: str) -> str | None:
    """Why the config (``RunConfig.to_dict`` as JSON) cannot run, or None; each config is checked, and its
    cell built, once per server process rather than on every rerun of the form."""
    try:
        config = RunConfig.from_dict(json.loads(config_json))
        config.validate()
        low, high = LIMITS["seq_len"]
        length = config.task.options.get("seq_len")
        if length is not None and not (isinstance(length, int) and low <= length <= high):
            raise ConfigError(f"seq_len must be an integer from {low} to {high:,}; got {length!r}")
        config.check_buildable()
    except ConfigError as error:
        return str(error)
    return None


def limited_input(container, label: str, limit: str, value, **kwargs):
    """A number input bounded by ``LIMITS[limit]`` (Note [Limits]), starting from ``value`` brought into range
    (a stored run's config may come from the command line, which has no such bounds)."""
    low, high = LIMITS[limit]
    return container.number_input(label, min_value=low, max_value=high, value=min(max(value, low), high), **kwargs)


def cell_help(names: list[str]) -> str:
    """One line per cell, ``**name**: summary``, for a cell picker's help."""
    return "\n".join(f"**{name}**: {cells.describe(name).summary}" for name in names)


def _index(options: list, value) -> int:
    return options.index(value) if value in options else 0


def cell_about(name: str, container=st) -> None:
    """The cell's summary, its update equations and where they come from (:func:`stability.cells.describe`)."""
    info = cells.describe(name)
    container.caption(info.summary)
    if info.equations:
        container.latex(r"\small\begin{gathered}" + r" \\ ".join(info.equations) + r"\end{gathered}")
    if info.paper:
        container.caption(f"Source: {info.paper}")


def task_about(about) -> None:
    """A task's summary, and in an expander its description, equations, paper and metric
    (:func:`stability.tasks.describe`)."""
    st.caption(about.summary)
    with st.expander("About this task"):
        st.markdown(about.description)
        if about.equations:
            st.latex(r"\small\begin{gathered}" + r" \\ ".join(about.equations) + r"\end{gathered}")
        st.caption(" · ".join(part for part in (f"Paper: {about.paper}" if about.paper else "",
                                                 f"metric: {about.metric}") if part))


def option_widget(option: OptionInfo, value, key: str, container=st):
    """One widget for a cell or task option, typed from its :class:`~stability.registry.OptionInfo`:
    a select box for choices, a checkbox for a bool, a number field (its range in the help), a
    text field for a string.  An optional number (``int | None``) is a field left empty for the
    class's own rule (e.g. vprnn's k = 2⌈log₂ n⌉), and gives None then, as does any value the form
    cannot edit (a tuple stays as it is: the caller keeps it or leaves the option out)."""
    label, help_text = option.name, _option_help(option)
    if option.choices:
        choices = list(option.choices)
        return container.selectbox(label, choices, index=_index(choices, value), key=key, help=help_text)
    kind = option.base_type
    if kind == "bool" and (value is None or isinstance(value, bool)):
        return container.checkbox(label, value=bool(value), key=key, help=help_text)
    if kind in ("int", "float") and (value is None or isinstance(value, (int, float))):
        return _number_widget(option, kind, value, key, container, help_text)
    if kind == "str" and (value is None or isinstance(value, str)):
        text = container.text_input(label, value=value or "", key=key, help=help_text).strip()
        return text if text or not option.optional else None
    return value


def _number_widget(option: OptionInfo, kind: str, value, key: str, container, help_text: str):
    """A number field; its range is in the help, not a bound, so a value out of it reaches the class's own
    check and comes back as one error line saying what is allowed (a bound would silently clamp it)."""
    cast = int if kind == "int" else float
    if value is None and not option.optional:
        low = (option.range or (None,))[0]
        value = low if low is not None else 0
    extra = {"step": 1} if kind == "int" else {"format": "%.4g"}
    if option.optional:
        extra["placeholder"] = "empty: the default rule"
    number = container.number_input(option.name, value=None if value is None else cast(value), key=key,
                                    help=help_text, **extra)
    return None if number is None else cast(number)


def _option_help(option: OptionInfo) -> str:
    """The option's help, then its type, default and range on a line of their own."""
    facts = [f"`{option.type}`", "required" if option.required else f"default `{option.default!r}`"]
    if option.range:
        low, high = option.range
        facts.append(f"range [{'-∞' if low is None else low}, {'∞' if high is None else high}]")
    return "  \n".join(part for part in (option.help, " · ".join(facts)) if part)


def _cell_options(key_prefix: str, name: str, defaults: RunConfig) -> dict:
    """One widget per option (:func:`option_widget`); an option left empty, or one the form cannot edit
    and the defaults do not give (e.g. kru's factor_sizes), is left out: the cell's default rule."""
    given = defaults.cell.options if defaults.cell.name == name else {}
    chosen = {}
    for option in cells.describe(name).options:
        if not option.in_form:
            continue
        value = option_widget(option, given.get(option.name, option.default), f"{key_prefix}_{name}_{option.name}")
        if value is not None:
            chosen[option.name] = value
    return chosen


def _task_options(key_prefix: str, about, defaults: RunConfig) -> dict:
    """seq_len first (where the task has it), required options next, the rest in an expander;
    options the form does not ask for (folders, callbacks, derived sizes) and empty ones are left out."""
    task = about.name
    given = defaults.task.options if defaults.task.name == task else {}
    shown = {option.name: option for option in about.options if option.in_form}
    chosen = {}
    if "seq_len" in shown:
        option = shown.pop("seq_len")
        chosen["seq_len"] = int(limited_input(
            st, "Sequence length T", "seq_len", int(given.get("seq_len", option.default or 100)), step=10,
            key=f"{key_prefix}_{task}_seq_len", help=option.help))
    for name in [name for name, option in shown.items() if option.required]:
        chosen[name] = option_widget(shown.pop(name), given.get(name), f"{key_prefix}_{task}_{name}")
    if shown:
        with st.expander("Task options"):
            for name, option in shown.items():
                chosen[name] = option_widget(option, given.get(name, option.default), f"{key_prefix}_{task}_{name}")
    return {option: value for option, value in chosen.items() if value is not None}


def _train_settings(key_prefix: str, train: TrainConfig) -> TrainConfig:
    left, right = st.columns(2)
    optimizer = left.selectbox("Optimizer", OPTIMIZERS, index=_index(list(OPTIMIZERS), train.optimizer),
                               key=f"{key_prefix}_optimizer",
                               help="  \n".join(f"**{name}**: {optimizers.describe(name)}" for name in OPTIMIZERS))
    lr = limited_input(right, "Learning rate", "lr", float(train.lr), step=1e-4, format="%.4g",
                            key=f"{key_prefix}_lr", help="Adam at 1e-3 is the papers' usual choice.")
    steps = int(limited_input(left, "Steps", "steps", int(train.steps), step=100, key=f"{key_prefix}_steps",
                                  help="Optimizer steps (batches) to train for."))
    batch = int(limited_input(right, "Batch size", "batch", int(train.batch_size), step=8, key=f"{key_prefix}_batch"))
    seed = int(limited_input(left, "Seed", "seed", int(train.seed), step=1, key=f"{key_prefix}_seed",
                                 help="Same seed, same config: the same run."))
    clip = right.number_input("Clip grad norm (0 = off)", value=float(train.clip_grad_norm or 0.0), step=0.5,
                              key=f"{key_prefix}_clip", help="Off by default: the point is to see explosions.")
    with st.expander("More training settings"):
        schedule = st.selectbox("Learning-rate schedule", LR_SCHEDULES,
                                index=_index(list(LR_SCHEDULES), train.lr_schedule), key=f"{key_prefix}_schedule",
                                help="step: × gamma every N steps; linear: to zero at the end; "
                                     "plateau: × gamma when validation loss stalls.")
        gamma = st.number_input("Schedule gamma", value=float(train.lr_gamma), format="%.3g",
                                key=f"{key_prefix}_gamma")
        step_size = int(st.number_input("Schedule step size", value=int(train.lr_step_size), step=100,
                                        key=f"{key_prefix}_step_size"))
        decay = st.number_input("Weight decay", value=float(train.weight_decay), format="%.2e",
                                key=f"{key_prefix}_weight_decay")
        dtype = st.selectbox("Precision", DTYPES, index=_index(list(DTYPES), train.dtype), key=f"{key_prefix}_dtype")
        device = st.selectbox("Device", DEVICES, index=_index(list(DEVICES), train.device),
                              key=f"{key_prefix}_device", help="auto: CUDA, then MPS, then CPU.")
        freeze = st.checkbox("Freeze the recurrent matrix W", value=bool(train.freeze_recurrent),
                             key=f"{key_prefix}_freeze",
                             help="Keep W at its random initial value and train the rest "
                                  "(KRU paper §4.1: copy is solved with a fixed random unitary W).")
    return TrainConfig(optimizer=optimizer, lr=float(lr), lr_schedule=schedule, lr_step_size=step_size,
                       lr_gamma=float(gamma), batch_size=batch, steps=steps, clip_grad_norm=float(clip) or None,
                       weight_decay=float(decay), seed=seed, device=device, dtype=dtype,
                       log_every=train.log_every, eval_every=train.eval_every, probe_every=train.probe_every,
                       eval_examples=train.eval_examples, probe_examples=train.probe_examples,
                       freeze_recurrent=freeze)


# ------------------------------------------------------------------------------ query parameters
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


# ---------------------------------------------------------------------------------------- status
def format_duration(seconds: float | None) -> str:
    """``"45 s"``, ``"3 min 05 s"``, ``"1 h 02 min"``; an em dash when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "—"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def describe_config(config: dict) -> str:
    """One line: ``spectral (128) on adding T=200 · adam lr 0.001 · 2000 steps · seed 0``."""
    cell, task, train = config.get("cell", {}), config.get("task", {}), config.get("train", {})
    length = task.get("options", {}).get("seq_len")
    return (f"{cell.get('name')} ({cell.get('hidden_size')}) on {task.get('name')}"
            f"{f' T={length}' if length else ''} · {train.get('optimizer')} lr {train.get('lr'):g} · "
            f"{train.get('steps')} steps · seed {train.get('seed')}")


def run_status_panel(store: RunStore, run_id: int, *, run: dict | None = None, rows: RunRows | None = None) -> None:
    """Status badge, a progress bar with ETA and steps/s, the device; a diverged, failed or interrupted
    run's error as a plain message. A live panel that has just read ``run`` (``store.run``) and its
    :func:`run_rows` passes them, so nothing is read twice."""
    if run is None:
        try:
            run = store.run(run_id)
        except RunNotFound:
            st.warning(f"Run {run_id} is not in the store {store.path}.")
            return
    status, step, total = run["status"], run["step"] or 0, run["total_steps"] or run["config"]["train"]["steps"]
    latest = {}
    if status == "running":
        latest = ({name: latest_value(rows.metrics, name) for name in ("speed/steps_per_s", "progress/eta_s")}
                  if rows is not None else store.latest(run_id))
    if status in TERMINAL and run["started_at"] and run["finished_at"]:
        elapsed = run["finished_at"] - run["started_at"]
        speed, timing = (step / elapsed if elapsed > 0 else math.nan), f"took {format_duration(elapsed)}"
    else:
        speed = latest.get("speed/steps_per_s", math.nan)
        timing = f"ETA {format_duration(latest.get('progress/eta_s'))}" if status == "running" else ""
    head = st.container(horizontal=True, vertical_alignment="center")
    head.badge(status, color=STATUS_COLOURS.get(status, "gray"))
    head.markdown(f"**Run {run_id}** · {describe_config(run['config'])}")
    parts = [f"step {step:,} / {total:,}", timing, f"{speed:.1f} steps/s" if math.isfinite(speed) else "",
             run["device"] or ""]
    st.progress(min(1.0, step / total) if total else 0.0, text=" · ".join(part for part in parts if part))
    error = run["error"] or "no error message was recorded"
    if status == "diverged":
        st.error(f"Run {run_id} diverged: {error}. Try a lower learning rate, gradient clipping, "
                 "or a cell that bounds its spectrum.")
    elif status == "failed":
        st.error(f"Run {run_id} failed: {error} (log: {Path(store.path).parent / 'logs' / f'run-{run_id}.log'})")
    elif status == "interrupted":
        st.warning(f"Run {run_id} was interrupted: {error}")
    elif status == "stopped":
        st.info(f"Run {run_id} was stopped at step {step:,}.")
    elif status == "queued":
        st.info(f"Run {run_id} is queued: it starts when a worker slot is free.")


# --------------------------------------------------------------------------------- live reading
@dataclass
class RunRows:
    """A run's rows as read so far in this session: metric rows, and the 'grad/h_t_norm' series if asked.

    ``final``: read in full after the run ended, so never read again. ``just_finished``: the run ended
    since the previous look (a page reruns itself once, to stop polling and update its buttons).
    """

    metrics: pd.DataFrame
    flow: pd.DataFrame | None = None
    final: bool = False
    just_finished: bool = False


def run_rows(store: RunStore, run_id: int, status: str, *, flow: bool = False) -> RunRows:
    """This session's cached rows of ``run_id``, topped up with the rows logged since the last look.

    ``status`` must be read before calling, so a terminal status means every row is already stored: then
    everything is read once more in full (rows a worker added to an already-seen step included) and the
    cache is final.
    """
    cache = st.session_state.setdefault("_run_rows", {})
    key = (str(store.path), int(run_id))
    rows, terminal = cache.get(key), status in TERMINAL
    if rows is None or (terminal and not rows.final):
        was_live = rows is not None
        rows = RunRows(store.metrics(run_id), store.series(run_id, FLOW) if flow else None, final=terminal,
                       just_finished=was_live and terminal)
    elif not rows.final:
        rows.metrics = _appended(rows.metrics, store.metrics(run_id, since_step=_last_step(rows.metrics)))
        if flow and rows.flow is not None:
            rows.flow = _appended(rows.flow, store.series(run_id, FLOW, since_step=_last_step(rows.flow)))
    if flow and rows.flow is None:
        rows.flow = store.series(run_id, FLOW)
    cache[key] = rows
    return rows


def _last_step(frame: pd.DataFrame) -> int | None:
    return int(frame["step"].max()) if len(frame) else None


def _appended(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([old, new], ignore_index=True) if len(new) else old


# Note [Live charts]
# ------------------
# A live panel reruns every second, and a fragment rerun that draws nothing clears what it drew, so every
# chart must be sent again each time.  Building an Altair chart and converting it to a Vega-Lite spec
# with Arrow data (validation included) costs 0.1-1 s of CPU for a Train page's seven charts; a spec
# already converted costs almost nothing to send again.  So a panel keeps the converted specs of its
# charts per slot and rebuilds them only when its controls changed, or when new rows arrived and the
# last build lies at least REBUILD_FACTOR times its own CPU cost in the past: chart building then takes
# at most 1/REBUILD_FACTOR of a core, and a slow machine simply redraws less often.
REBUILD_FACTOR = 10.0


@dataclass
class _ChartSpecs:
    controls: object
    data_version: object
    specs: list
    built_at: float
    cost_s: float


def live_chart_specs(slot: str, controls, data_version, build, *, final: bool = False) -> list:
    """The Vega-Lite specs of the charts ``build()`` returns, kept in this session under ``slot``
    (Note [Live charts]); ``final``: the data will not change again, so it is drawn now."""
    cache = st.session_state.setdefault("_live_charts", {})
    entry, now = cache.get(slot), time.monotonic()
    stale = entry is None or entry.controls != controls or (
        entry.data_version != data_version and (final or now - entry.built_at >= REBUILD_FACTOR * entry.cost_s))
    if stale:
        started = time.thread_time()
        specs = [_vega_lite_spec(chart) for chart in build()]
        entry = cache[slot] = _ChartSpecs(controls, data_version, specs, now, time.thread_time() - started)
    return entry.specs


def show_chart(container, spec: dict) -> None:
    """Draw a spec from :func:`live_chart_specs` (Streamlit copies the spec before it takes the data out)."""
    container.vega_lite_chart(spec=spec, width="stretch")


def _vega_lite_spec(chart) -> dict:
    """The spec ``st.altair_chart`` would send, with its datasets already serialised to Arrow."""
    try:
        from streamlit.elements.vega_charts import _convert_altair_to_vega_lite_spec
    except ImportError:  # another Streamlit version: the public path, data inline (converted on each send)
        import altair as alt

        with alt.data_transformers.disable_max_rows():
            return chart.to_dict()
    return _convert_altair_to_vega_lite_spec(chart)


def latest_value(frame: pd.DataFrame, name: str) -> float:
    """The last logged value of metric ``name`` in long rows, NaN if there is none."""
    values = frame.loc[frame["name"] == name, "value"]
    return float(values.iloc[-1]) if len(values) else math.nan


__all__ = [
    "RunRows",
    "config_form",
    "config_from_query",
    "config_to_query",
    "describe_config",
    "format_duration",
    "latest_value",
    "open_store",
    "QueryReader",
    "LIMITS",
    "live_chart_specs",
    "option_widget",
    "show_chart",
    "store_guard",
    "open_store_quietly",
    "active_runs",
    "cell_about",
    "cell_help",
    "reconcile_now_and_then",
    "run_rows",
    "run_status_panel",
    "store_path",
]
