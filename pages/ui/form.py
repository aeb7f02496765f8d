"""The run configuration form: widgets drawn from what the registries say about each cell and task.

    config = config_form("train", defaults=RunConfig())   # a validated RunConfig, or None (error shown)

Everything a widget shows about a cell or a task comes from ``cells.describe`` / ``tasks.describe``; every
rule about what is valid lives in ``stability.config`` and the classes.  A config is checked (and its
cell built) once per server process, not on every rerun (:func:`config_problem`).
"""
from __future__ import annotations

import logging

import streamlit as st

from pages.ui.limits import LIMITS, limited_input
from stability import cells, tasks
from stability.models import optimizers
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
from stability.admission.preflight import check_buildable
from stability.core.errors import one_line
from stability.core.registry import OptionInfo

log = logging.getLogger(__name__)


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
            problem = config_problem(config.to_json())
            if problem:
                raise ConfigError(problem)
    except ConfigError as error:
        st.error(str(error))
        return None
    return configs if cells_multi else configs[0]


@st.cache_data(show_spinner=False, max_entries=256)
def config_problem(config_json: str) -> str | None:
    """Why the config (``RunConfig.to_json``) cannot run, or None, in one line whatever the check raised
    (its traceback in the server's log); each config is checked once per server process rather than on every
    rerun of the form, and its cell built once for what changes a build, not again for another seed, lr or
    steps (stability/admission/preflight.py, Note [Checks that build])."""
    try:
        config = RunConfig.from_json(config_json)
        config.validate()
        low, high = LIMITS["seq_len"]
        length = config.task.options.get("seq_len")
        if length is not None and not (isinstance(length, int) and low <= length <= high):
            raise ConfigError(f"seq_len must be an integer from {low} to {high:,}; got {length!r}")
        check_buildable(config)
    except ConfigError as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 - one line for the visitor, the traceback in the server's log
        log.exception("checking a run configuration")
        return one_line(error, named=True)
    return None


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
    """One widget for a cell or task option, typed from its :class:`~stability.core.registry.OptionInfo`:
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
    if option.bounds:
        low, high = option.bounds  # a float option's open side closed (Note [Finite options])
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
        deterministic = st.checkbox("Deterministic GPU algorithms", value=bool(train.deterministic),
                                    key=f"{key_prefix}_deterministic",
                                    help="The same numbers every run on a GPU too (cuDNN, cuBLAS and "
                                         "index_select's backward without atomics), so a resumed run "
                                         "continues exactly; slower. A CPU run is deterministic already.")
        graphs = st.checkbox("CUDA graphs", value=bool(train.cuda_graphs), key=f"{key_prefix}_cuda_graphs",
                             help="On a CUDA GPU, each training step replayed as one captured graph: the same "
                                  "numbers, far fewer kernel launches (the run's device line says when a cell "
                                  "trains eagerly and why). A CPU run is never captured.")
    return TrainConfig(optimizer=optimizer, lr=float(lr), lr_schedule=schedule, lr_step_size=step_size,
                       lr_gamma=float(gamma), batch_size=batch, steps=steps, clip_grad_norm=float(clip) or None,
                       weight_decay=float(decay), seed=seed, device=device, dtype=dtype,
                       log_every=train.log_every, eval_every=train.eval_every, probe_every=train.probe_every,
                       eval_examples=train.eval_examples, probe_examples=train.probe_examples,
                       freeze_recurrent=freeze, deterministic=deterministic, cuda_graphs=graphs)

