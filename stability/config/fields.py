"""A config field by its path: ``cell``, ``cell.hidden_size``, ``cell.m1``, ``task``, ``task.seq_len``, ``train.lr``.

One definition of a field for every room that names one (a sweep's ``--vary``, a preset's layout, the
seed groups of the Compare page, the charts' axes)::

    spec = resolve_field("lr", config)               # Field("train.lr", "float"); ConfigError: one line
    field_value(config, "cell.m1")                   # the config's value, else the cell's declared default
    apply(config, {"cell": "rnn", "train.lr": 0.1})  # a new RunConfig with the setting applied
    field_label("train.lr")                          # 'lr'   (field_label("cell.m1", short=True): 'm1')
    setting_label({"cell": "rnn", "train.lr": 1e-3}) # 'cell=rnn lr=0.001'

A path is canonical when :func:`resolve_field` returns it: ``cell`` (the cell's name),
``cell.hidden_size``, ``cell.OPTION``, ``task`` (the task's name), ``task.OPTION``, ``train.FIELD``.
:func:`resolve_field` also takes the short forms (``lr``, ``hidden_size``, ``cell.name``, hyphens
for underscores). Types, choices and whether None is allowed come from
:class:`~stability.config.TrainConfig`'s annotations and from ``cells.describe(name).options`` /
``tasks.describe(name).options``. A setting (the values one sweep setting, or one line of a figure,
holds in common) never names the seed: the runs of a setting differ only in it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .. import cells, tasks
from ..core.errors import ConfigError
from ..core.formatting import shown
from .run_config import RunConfig, TrainConfig

SEED = "train.seed"
_REGISTRIES = {"cell": cells, "task": tasks}


@dataclass(frozen=True)
class Field:
    """A resolved field: its canonical path and the type its values take."""

    path: str            # canonical: cell, cell.hidden_size, cell.m1, task, task.seq_len, train.lr
    kind: str            # int, float, bool, str, or the annotation of anything else (parsed as JSON)
    optional: bool = False
    choices: tuple | None = None


# ---------------------------------------------------------------------------------- resolving
def resolve_field(name: str, base: RunConfig, cells_used: list[str] | None = None) -> Field:
    """The field ``name`` names (canonical path, type, choices), a cell or task option looked up on
    ``cells_used`` (default: ``base``'s cell) or ``base``'s task; ConfigError, one line starting with
    ``name``, for an unknown field, an option no such cell (task) declares, or the seed."""
    path = name.strip().replace("-", "_")
    section, dot, rest = path.partition(".")
    if path in ("cell", "cell.name"):
        return Field("cell", "str")
    if path in ("task", "task.name"):
        return Field("task", "str")
    if path in ("hidden_size", "cell.hidden_size"):
        return Field("cell.hidden_size", "int")
    if path in ("seed", SEED):
        raise ConfigError(f"{name}: a setting never names the seed (its runs differ only in their seed)")
    if section in _REGISTRIES and dot and rest:
        return _option_field(section, rest, (cells_used or [base.cell.name]) if section == "cell" else [base.task.name])
    found = _train_field(rest if section == "train" and dot else path)
    if found is None or path == "train":
        trains = ", ".join(f.name for f in fields(TrainConfig) if f.name != "seed")
        raise ConfigError(f"{name}: unknown field; valid: cell, cell.hidden_size, cell.OPTION, task, "
                          f"task.OPTION, or a train field ({trains})")
    return found


def _train_field(name: str) -> Field | None:
    for item in fields(TrainConfig):
        if item.name == name:
            parts = [part.strip() for part in str(item.type).split("|")]
            kind = " | ".join(part for part in parts if part != "None")
            return Field(f"train.{name}", kind, optional="None" in parts)
    return None


def _option_field(section: str, option: str, names: list[str]) -> Field:
    """Option ``option`` of the cells (tasks) ``names``: its type from the first that declares it."""
    registry = _REGISTRIES[section]
    for name in names:
        try:
            info = registry.describe(name).option(option)
        except ValueError:
            continue
        return Field(f"{section}.{option}", info.base_type, info.optional, info.choices)
    valid = list(dict.fromkeys(o.name for name in names for o in _declared(registry, name)))
    raise ConfigError(f"{section}.{option}: {section} {' / '.join(names)} has no option {option!r}; "
                      f"valid options: {', '.join(valid) or 'none'}")


def _declared(registry, name: Any) -> tuple:
    """The option infos cell (task) ``name`` declares; none for an unknown name."""
    try:
        return registry.describe(name).options
    except ValueError:
        return ()


# ---------------------------------------------------------------------------------- reading
def field_value(config: RunConfig | Mapping[str, Any] | None, path: str) -> Any:
    """The value of field ``path`` in ``config``, a RunConfig or a stored config dict: ``cell`` and
    ``task`` their names, ``cell.hidden_size``, ``cell.OPTION`` / ``task.OPTION`` (the cell's or task's
    declared default where the config leaves the option out), ``train.FIELD`` or a bare train field
    (``lr``). None when the config is missing, lacks the field, or its cell (task) has no such option."""
    if config is None:
        return None
    section, _, rest = path.partition(".")
    if section not in ("cell", "task", "train"):
        section, rest = "train", path
    part = _section(config, section)
    if not rest:
        return part.get("name")
    if section == "train" or rest in ("hidden_size", "name"):
        return part.get(rest)
    options = part.get("options")
    if isinstance(options, Mapping) and rest in options:
        return options[rest]
    return next((option.default for option in _declared(_REGISTRIES[section], part.get("name"))
                 if option.name == rest), None)


def _section(config: RunConfig | Mapping[str, Any], section: str) -> Mapping[str, Any]:
    if isinstance(config, RunConfig):
        return vars(getattr(config, section))
    part = config.get(section)
    return part if isinstance(part, Mapping) else {}


def flat_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config dict as ``{field path: value}``, as stored (no declared defaults added): the
    paths of :func:`field_value` (``cell``, ``cell.hidden_size``, ``cell.OPTION``, ``task``, ...,
    ``train.FIELD``); other top-level entries but the name under their own key."""
    flat: dict[str, Any] = {}
    for section, part in config.items():
        if section == "name":
            continue
        if section in _REGISTRIES and isinstance(part, Mapping):
            for key, value in part.items():
                if key == "name":
                    flat[section] = value
                elif key == "options" and isinstance(value, Mapping):
                    flat.update({f"{section}.{option}": v for option, v in value.items()})
                else:
                    flat[f"{section}.{key}"] = value
        elif section == "train" and isinstance(part, Mapping):
            flat.update({f"train.{key}": value for key, value in part.items()})
        else:
            flat[section] = part
    return flat


# ---------------------------------------------------------------------------------- writing
def apply(base: RunConfig, setting: dict[str, Any]) -> RunConfig:
    """A new config: ``base`` with each ``{canonical path: value}`` of ``setting`` set (not validated).

    Where the setting changes the cell, the base cell's options that the new cell does not declare
    are dropped (``--cell spectral --cell-option m1=16 --vary cell=rnn,spectral``: m1 is
    spectral's), as are a changed task's; an option the setting names itself is always kept."""
    data = base.to_dict()
    for path, value in setting.items():
        section, _, rest = path.partition(".")
        if not rest:
            data[section]["name"] = value
        elif section == "train" or rest == "hidden_size":
            data[section][rest] = value
        else:
            data[section]["options"][rest] = value
    for section, before in (("cell", base.cell.name), ("task", base.task.name)):
        named = {path.partition(".")[2] for path in setting if path.startswith(f"{section}.")}
        drop_undeclared(data, section, before, named)
    return RunConfig.from_dict(data)


def drop_undeclared(data: dict[str, Any], section: str, before: Any, keep: set[str]) -> None:
    """In the config dict ``data``, where the cell (task, ``section``) is no longer ``before``, drop
    the options the new one does not declare but those in ``keep``; an unknown name keeps them all
    (validation says what is wrong)."""
    part = data.get(section)
    if not isinstance(part, dict) or part.get("name") == before or not isinstance(part.get("options"), dict):
        return
    try:
        declared = {option.name for option in _REGISTRIES[section].describe(part["name"]).options}
    except ValueError:
        return
    part["options"] = {key: value for key, value in part["options"].items() if key in declared or key in keep}


# ---------------------------------------------------------------------------------- labels
def field_label(path: str | None, short: bool = False) -> str:
    """A field's name where a person reads it. A run's name and an axis title: ``train.lr`` -> ``lr``,
    every other path as it is (``cell``, ``cell.m1``, ``task.seq_len``). ``short`` (a figure's legend,
    whose runs share one cell): the last part only (``cell.h0_noise_std`` -> ``h0_noise_std``)."""
    path = path or ""
    return path.rpartition(".")[2] if short else path.removeprefix("train.")


def setting_label(setting: dict[str, Any]) -> str:
    """``"cell=rnn lr=0.001"``: the varied values as the run names show them."""
    return " ".join(f"{field_label(path)}={shown(value)}" for path, value in setting.items())
