"""A preset as loaded: its runs' configs (or its sweep) at a scale, its claims and its layout.

    preset = presets.load("spectral-fig1")      # a Preset (stability.presets.loading)
    preset.configs("classroom")                 # {"spectral": RunConfig, ...}: base, run, scale laid over
    preset.sweep_spec("classroom")              # a sweep preset's SweepSpec
    preset.drawn()                              # the Layout the Reproduce page draws

Note [Preset format]
    One file per preset, TOML (``.toml``) or JSON (``.json``), one object::

        name     = "spectral-fig1"             # the file's stem for a shipped preset
        title    = "Adding at long T: ..."      # one line
        paper    = "Zhang et al. 2018, Spectral-RNN"
        figure   = "Fig. 1(c)(f)"               # the figure or table
        section  = "§7.1"
        shows    = "RNN and LSTM stay at the 0.167 baseline; Spectral-RNN goes below it"
        notes    = "..."                        # optional: where our settings differ, and why

        [base]                                  # optional: a partial RunConfig dict every run starts from
        cell  = { hidden_size = 128 }
        task  = { name = "adding", options = { seq_len = 300 } }
        train = { lr = 1e-3 }

        [[runs]]                                # the runs: a name, and a partial RunConfig dict over base
        name = "spectral"
        cell = { name = "spectral", options = { m1 = 16, m2 = 16 } }

        [[runs]]                                # optional: vary (--vary texts) makes a run a grid of runs,
        name  = "optimizer=sgd"                 # one per combination, each named "<name> <setting>"
        train = { optimizer = "sgd" }           # ("optimizer=sgd lr=1e-06 cell.h0_noise_std=5"): the grid
        vary  = ["lr=1e-7,1e-6", "cell.h0_noise_std=0,5"]   # of one optimizer, not every optimizer's

    or, instead of ``runs``, a sweep (:mod:`stability.sweeps`: ``vary`` holds ``--vary`` texts)::

        [sweep]
        base  = { cell = { name = "irnn" }, task = { name = "adding_ternary" } }
        vary  = ["cell.h0_noise_std=0,0.1,1"]
        seeds = 1

    A run is ``base`` deep-merged with the run's own fields; where a run names another cell (task)
    than ``base``, the base's options that its cell (task) does not declare are dropped,
    as :func:`stability.config.fields.apply` does. The stored run's name is ``<preset>/<run>``.

    Two scales, both required, each a table of overrides applied last::

        [scales.classroom]                      # finishes in a few CPU minutes
        note     = "T = 100, hidden 64, 800 steps"
        override = { train = { steps = 800 }, cell = { hidden_size = 64 } }   # every run (a sweep's base)
        runs     = { rnn = { train = { lr = 1e-4 } } }                       # optional, one run's own
                                                # (with vary = [...]: that run's grid at this scale)
        only     = ["rnn", "spectral"]          # optional, list presets only: the runs this scale trains
        seeds    = 1                            # optional, sweeps only
        vary     = ["cell.h0_noise_std=0,1"]    # optional, sweeps only: replaces sweep.vary
        [scales.paper]                          # the paper's sizes, for a GPU
        ...

    Claims (Note [Claims] in :mod:`.judging`) are ``[[claims]]`` tables; a layout (Note [Layout] in
    :mod:`.layout`) is the optional ``[layout]`` table. Every key is checked when the file is loaded:
    an unknown key, a missing one, a value of the wrong type, a config that does not validate, a
    claim naming a run the preset does not have: :class:`PresetError`, one line naming the file and
    the key.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ConfigError, RunConfig
from ..config.fields import drop_undeclared, setting_label
from .layout import Layout, default_layout
from .vocabulary import NAME_SEPARATOR, RUN_FIELDS, PresetError, one_line


@dataclass(frozen=True)
class Claim:
    """One check over stored rows (Note [Claims] in :mod:`.judging`)."""

    text: str
    run: str
    metric: str
    stat: str = "final"
    last: int | None = None
    op: str = "<"
    than: Any = None              # a number, "baseline", or {"run": ..., "metric": ..., "stat": ...}
    factor: float = 1.0
    tolerance: float | None = None
    paper_value: Any = None
    paper_source: str = ""
    from_step: int = 0            # read only the rows at steps >= this (1: what happens during training)
    needs: str | None = None      # the scale the claim is expected to hold at, where it needs more than others
    needs_why: str = ""           # why, with the longest run measured as evidence


@dataclass
class Preset:
    """A loaded, checked preset (Note [Preset format])."""

    name: str
    title: str
    paper: str
    figure: str
    section: str
    shows: str
    claims: list[Claim]
    scales: dict[str, dict[str, Any]]
    base: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)   # each {"name": ..., partial config}
    sweep: dict[str, Any] | None = None
    notes: str = ""
    path: Path | None = None
    layout: Layout | None = None  # None: drawn() gives a panel per claim metric

    @property
    def is_sweep(self) -> bool:
        return self.sweep is not None

    def scale(self, scale: str) -> dict[str, Any]:
        if scale not in self.scales:
            raise PresetError(f"preset {self.name!r} has no scale {scale!r}; it has {', '.join(self.scales)}")
        return self.scales[scale]

    def run_names(self) -> list[str]:
        """The names of the ``[[runs]]`` entries (a grid run's name before its settings)."""
        return [run["name"] for run in self.runs]

    def configs(self, scale: str = "classroom", override: dict | None = None) -> dict[str, RunConfig]:
        """The run configs of a list preset at ``scale`` (``override``: a partial config applied last,
        e.g. a test's handful of steps), by run name (a grid run's one per setting, Note [Preset format]);
        PresetError for a config that does not validate."""
        if self.is_sweep:
            raise PresetError(f"preset {self.name!r} is a sweep; use sweep_spec()")
        chosen = self.scale(scale)
        configs = {}
        for run in self.runs:
            if run["name"] not in chosen.get("only", self.run_names()):
                continue
            layer = dict(chosen.get("runs", {}).get(run["name"], {}))
            vary = layer.pop("vary", run.get("vary"))
            data = {key: value for key, value in run.items() if key not in ("name", "vary")}
            where = f"preset {self.name!r} run {run['name']!r} ({scale})"
            config = _config(self.base, [data, chosen.get("override", {}), layer, override or {}], where)
            for name, one in _grid(run["name"], config, vary, where).items():
                one.name = f"{self.name}{NAME_SEPARATOR}{name}"
                configs[name] = one
        return configs

    def sweep_spec(self, scale: str = "classroom", override: dict | None = None, check: bool = False):
        """The :class:`stability.sweeps.SweepSpec` of a sweep preset at ``scale``; ``check`` also builds
        every config (``SweepSpec.check``), else only the shape is validated."""
        from .. import sweeps

        if not self.is_sweep:
            raise PresetError(f"preset {self.name!r} is not a sweep; use configs()")
        chosen = self.scale(scale)
        where = f"preset {self.name!r} sweep ({scale})"
        base = _config({}, [self.sweep.get("base", {}), chosen.get("override", {}), override or {}], where)
        base.name = self.name
        try:
            spec = sweeps.SweepSpec(base, sweeps.parse_varies(chosen.get("vary", self.sweep["vary"]), base),
                                    seeds=chosen.get("seeds", self.sweep.get("seeds", 1)))
            return spec.check() if check else spec.validate()
        except ValueError as error:
            raise PresetError(f"{where}: {one_line(error)}") from None

    def drawn(self) -> Layout:
        """The layout the page draws: the preset's own, else a panel per metric the claims read
        (:func:`~.layout.default_layout`)."""
        return self.layout if self.layout is not None else default_layout(claim_metrics(self))

    def all_configs(self, scale: str) -> list[RunConfig]:
        """Every config the preset runs at ``scale`` (a sweep's settings at its first seed)."""
        if not self.is_sweep:
            return list(self.configs(scale).values())
        spec = self.sweep_spec(scale)
        return [spec.config_for(setting, spec.seed_values()[0]) for setting in spec.settings()]

    def run_count(self, scale: str) -> int:
        return self.sweep_spec(scale).size() if self.is_sweep else len(self.configs(scale))

    def groups(self, scale: str = "classroom") -> list[str]:
        """What claims may name: the runs at ``scale`` (a grid run's one per setting), or a sweep's setting labels."""
        if not self.is_sweep:
            return list(self.configs(scale))
        return [setting_label(setting) for setting in self.sweep_spec(scale).settings()]


@dataclass(frozen=True)
class PresetInfo:
    """What the gallery and ``reproduce --list`` show about a preset."""

    name: str
    title: str
    paper: str
    figure: str
    section: str
    shows: str
    runs: dict[str, int]          # scale -> number of runs
    sweep: bool
    path: Path
    notes: dict[str, str] = field(default_factory=dict)   # scale -> its note (sizes, and the time measured here)


def claim_metrics(preset: Preset) -> list[str]:
    """The metric rows the claims read, in the claims' order (not the run fields: status, parameters)."""
    names = []
    for claim in preset.claims:
        for name in (claim.metric, claim.than.get("metric", claim.metric) if isinstance(claim.than, dict) else None):
            if name and name not in RUN_FIELDS and name not in names:
                names.append(name)
    return names


def _grid(name: str, config: RunConfig, vary: list[str] | None, where: str) -> dict[str, RunConfig]:
    """A run's configs: itself, or with ``vary`` one per combination of the values, named
    ``"<name> <setting label>"`` (the labels :func:`~stability.config.fields.setting_label` gives a sweep's runs)."""
    from .. import sweeps

    if not vary:
        return {name: config}
    try:
        spec = sweeps.SweepSpec(config, sweeps.parse_varies(vary, config)).validate()
    except ValueError as error:
        raise PresetError(f"{where}: {one_line(error)}") from None
    return {f"{name} {setting_label(setting)}": spec.config_for(setting, config.train.seed)
            for setting in spec.settings()}


def _merge(base: dict, layer: dict) -> dict:
    """``base`` with ``layer`` laid over it, tables merged key by key."""
    merged = copy.deepcopy(base)
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _config(base: dict, layers: list[dict], where: str) -> RunConfig:
    """``base`` with each layer merged over it, a checked RunConfig; a layer naming another cell
    (task) than the one before it drops the options that cell (task) does not declare."""
    data: dict[str, Any] = {}
    for layer in [base, *layers]:
        for section in ("cell", "task", "train"):
            if not isinstance(layer.get(section, {}), dict):
                raise PresetError(f"{where}: '{section}' must be a table (an object) of its fields; "
                                  f"got {layer[section]!r}")
        before = {section: (data.get(section) or {}).get("name") for section in ("cell", "task")}
        data = _merge(data, layer)
        for section in ("cell", "task"):
            own = (layer.get(section) or {}).get("options")
            drop_undeclared(data, section, before[section], set(own) if isinstance(own, dict) else set())
    try:
        if "task" in data and "options" not in data["task"]:
            data["task"]["options"] = {}
        return RunConfig.from_dict(data).validate()
    except (ConfigError, TypeError) as error:
        raise PresetError(f"{where}: {one_line(error)}") from None
