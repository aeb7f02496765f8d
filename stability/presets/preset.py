"""Paper presets: a figure or table of the papers as data, run by the engine and judged from the stored rows.

    from stability.presets import preset as reproduce
    reproduce.available()                       # [PresetInfo(name, title, paper, figure, shows, runs, ...)]
    preset = reproduce.load("spectral-fig1")    # a shipped name, or a path to a .toml/.json file; PresetError
    reproduce.estimate(preset, store, "classroom")   # {"seconds": ..., "basis": ...}: a rough time here
    run_ids = reproduce.run(preset, store, scale="classroom", progress=print)
    for verdict in reproduce.verdicts(preset, store, run_ids):
        verdict.claim, verdict.paper, verdict.ours, verdict.held, verdict.why

A preset's runs are ordinary runs of the store, trained one after another in
this process (``stability.training.trainer.train_run``); a sweep preset is an ordinary
sweep (:mod:`stability.sweeps`) whose one worker is this process. Nothing about
a preset lives in code: the shipped ones are the files of ``stability/presets/``,
and a copy of one, edited, is run by its path.

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

    or, instead of ``runs``, a sweep (:mod:`stability.sweeps`: ``vary`` holds ``--vary`` texts)::

        [sweep]
        base  = { cell = { name = "irnn" }, task = { name = "adding_ternary" } }
        vary  = ["cell.h0_noise_std=0,0.1,1"]
        seeds = 1

    A run is ``base`` deep-merged with the run's own fields; where a run names another cell (task)
    than ``base``, the base's options that its cell (task) does not declare are dropped, as
    :func:`stability.sweeps.apply` does. The stored run's name is ``<preset>/<run>``.

    Two scales, both required, each a table of overrides applied last::

        [scales.classroom]                      # finishes in a few CPU minutes
        note     = "T = 100, hidden 64, 800 steps"
        override = { train = { steps = 800 }, cell = { hidden_size = 64 } }   # every run (a sweep's base)
        runs     = { rnn = { train = { lr = 1e-4 } } }                       # optional, one run's own
        seeds    = 1                            # optional, sweeps only
        vary     = ["cell.h0_noise_std=0,1"]    # optional, sweeps only: replaces sweep.vary
        [scales.paper]                          # the paper's sizes, for a GPU
        ...

    Claims (Note [Claims]) are ``[[claims]]`` tables. Every key is checked when the file is loaded:
    an unknown key, a missing one, a value of the wrong type, a config that does not validate, a
    claim naming a run the preset does not have: :class:`PresetError`, one line naming the file and
    the key.

Note [Layout]
    How the page draws the preset, laid out as the paper lays out the figure (optional; without it, one
    panel per metric the claims read, the runs overlaid). The table is ``layout``, as ``figure`` already
    names the paper's figure::

        [layout]
        columns = "task.seq_len"      # optional: a config field (as --vary names them: cell, cell.OPTION,
                                      # cell.hidden_size, task, task.OPTION, lr, train.FIELD); one column
                                      # of panels per value, as Fig. 1's T = 100 / 200 / 300
        color   = "cell"              # optional: a config field naming each line; default the run's name
                                      # (a sweep's setting, with its seed where there are several)

        [[layout.panels]]             # the rows of the figure, top to bottom, as in the paper
        metric = "val/loss"           # a metric row name
        title  = "Validation MSE"     # optional (default: the metric)
        log    = false                # optional: a log y axis (zeros and infinities marked, never dropped)
        x      = "step"               # optional: "step" (the metric over training) or a config field: each
                                      # run's ``stat`` of the metric against that field (Fig. 5's depth L)
        stat   = "final"              # with a field x only: as a claim's stat (mean_last with last = k)
        marks  = ["baseline", { value = 0.01, label = "r" }]   # optional dashed reference lines: the
                                      # task's memoryless baseline, or a number (the paper's) with a label
        range  = [0, 0.25]            # optional: the y axis the paper's panel shows (what is outside is clipped)

    Fields are checked when the file loads (:func:`stability.sweeps.resolve_field` against the preset's
    cells and tasks) and read from each stored run's config by :func:`field_value`, the cell's or task's
    declared default where the config leaves an option out.

Note [Claims]
    A claim is a check over the stored rows of named runs, data only::

        [[claims]]
        text   = "Spectral-RNN's final validation MSE is below half the 0.167 baseline"
        run    = "spectral"                     # a run's name; for a sweep, a setting ("cell.h0_noise_std=1")
        metric = "val/loss"                     # a metric row name, or total_params, recurrent_params,
                                                # trainable_params, status
        stat   = "final"                        # final, first, min, max, mean, mean_last (with last = k)
        op     = "<"                            # <, <=, >, >=, within (with tolerance), ==, !=
        than   = "baseline"                     # a number, "baseline" (the task's memoryless baseline
                                                # stored with the run), or { run = "rnn" } (optionally
                                                # with its own metric and stat): that run's value
        factor = 0.5                            # optional: the reference times this
        paper  = { value = "≈ 0.0", source = "Fig. 1(c)" }   # the paper's number (or words), and where

    ``stat``: ``final`` is the value at the run's highest step, ``first`` at its lowest, ``min``,
    ``max`` and ``mean`` over every row, ``mean_last`` the mean of the last ``last`` rows ("stays
    below r" is ``stat = "max"``). A claim over a group (a sweep setting's seeds) takes the mean over
    its runs of each run's statistic. ``within`` holds when |ours − ref| ≤ tolerance · |ref|.
    ``total_params``, ``recurrent_params`` and ``status`` are the run's stored fields, not rows
    (``status`` compares with ``==``/``!=`` against a text, e.g. ``"diverged"``); ``trainable_params``
    is what the optimizer updates: ``total_params`` less ``recurrent_params`` where the run's config
    has ``train.freeze_recurrent`` (KRU §4.1's fixed random unitary W), else ``total_params``.

    A verdict is held True/False from the rows, or None ("could not tell") with one line saying
    why: a run that is missing, has no rows of the metric, or a NaN (an infinity is compared: a
    gradient norm that blew up to inf is above any number). Nothing is
    judged from the preset's own numbers: ``paper.value`` is only shown beside ours.
"""
from __future__ import annotations

import copy
import json
import math
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..config import ConfigError, RunConfig
from ..config.fields import setting_label
from ..execution.preflight import check_buildable
from ..sweeps.rough_time import TIMED_STEPS

PRESETS_DIR = Path(__file__).resolve().parent
SCALES = ("classroom", "paper")
SUFFIXES = (".toml", ".json")
STATS = ("final", "first", "min", "max", "mean", "mean_last")
OPS = ("<", "<=", ">", ">=", "within", "==", "!=")
RUN_FIELDS = ("total_params", "recurrent_params", "trainable_params", "status")  # the run's stored fields
_TOP_KEYS = {"name", "title", "paper", "figure", "section", "shows", "notes", "base", "runs", "sweep",
             "scales", "claims", "layout"}
_REQUIRED = ("name", "title", "paper", "figure", "section", "shows", "scales", "claims")
_SCALE_KEYS = {"note", "override", "runs", "seeds", "vary"}
_SWEEP_KEYS = {"base", "vary", "seeds"}
_CLAIM_KEYS = {"text", "run", "metric", "stat", "last", "op", "than", "factor", "tolerance", "paper"}
_LAYOUT_KEYS = {"columns", "color", "panels"}
_PANEL_KEYS = {"metric", "title", "log", "x", "stat", "last", "marks", "range"}
LOG_PREFIXES = ("grad/", "sv/")  # metrics that span decades: drawn on a log axis by default
_NAME_SEPARATOR = "/"


class PresetError(ValueError):
    """A preset cannot be found, read or run as written; the message is one line naming the key."""


# ---------------------------------------------------------------------------------- the preset
@dataclass(frozen=True)
class Claim:
    """One check over stored rows (Note [Claims])."""

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


@dataclass(frozen=True)
class Mark:
    """A dashed reference line of a panel: the task's baseline (``value`` None) or a number."""

    value: float | None
    label: str

    @property
    def baseline(self) -> bool:
        return self.value is None


@dataclass(frozen=True)
class Panel:
    """One row of a preset's layout (Note [Layout])."""

    metric: str
    title: str = ""
    log: bool = False
    x: str = "step"               # "step", or the canonical path of a config field
    stat: str = "final"
    last: int | None = None
    marks: tuple[Mark, ...] = ()
    range: tuple[float, float] | None = None   # the y axis (low, high); None: fitted to the data

    @property
    def over_training(self) -> bool:
        return self.x == "step"


@dataclass(frozen=True)
class Layout:
    """How the page draws a preset (Note [Layout]): rows of panels, a column per value of ``columns``."""

    panels: tuple[Panel, ...]
    columns: str | None = None    # canonical config field paths
    color: str | None = None


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
        return [run["name"] for run in self.runs]

    def configs(self, scale: str = "classroom", override: dict | None = None) -> dict[str, RunConfig]:
        """The run configs of a list preset at ``scale`` (``override``: a partial config applied last,
        e.g. a test's handful of steps), by run name; PresetError for a config that does not validate."""
        if self.is_sweep:
            raise PresetError(f"preset {self.name!r} is a sweep; use sweep_spec()")
        chosen = self.scale(scale)
        configs = {}
        for run in self.runs:
            data = {key: value for key, value in run.items() if key != "name"}
            layers = [data, chosen.get("override", {}), chosen.get("runs", {}).get(run["name"], {}), override or {}]
            config = _config(self.base, layers, f"preset {self.name!r} run {run['name']!r} ({scale})")
            config.name = f"{self.name}{_NAME_SEPARATOR}{run['name']}"
            configs[run["name"]] = config
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
            raise PresetError(f"{where}: {_one_line(error)}") from None

    def drawn(self) -> Layout:
        """The layout the page draws: the preset's own, else a panel per metric the claims read (losses
        with the task's baseline, gradients and singular values on a log axis, as the papers draw them)."""
        if self.layout is not None:
            return self.layout
        panels = []
        for name in claim_metrics(self):
            marks = (Mark(None, "baseline"),) if name.endswith("/loss") else ()
            panels.append(Panel(name, name, name.startswith(LOG_PREFIXES), marks=marks))
        return Layout(tuple(panels))

    def all_configs(self, scale: str) -> list[RunConfig]:
        """Every config the preset runs at ``scale`` (a sweep's settings at its first seed)."""
        if not self.is_sweep:
            return list(self.configs(scale).values())
        spec = self.sweep_spec(scale)
        return [spec.config_for(setting, spec.seed_values()[0]) for setting in spec.settings()]

    def run_count(self, scale: str) -> int:
        return self.sweep_spec(scale).size() if self.is_sweep else len(self.runs)

    def groups(self, scale: str = "classroom") -> list[str]:
        """What claims may name: the runs, or a sweep's setting labels."""
        if not self.is_sweep:
            return self.run_names()
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


@dataclass(frozen=True)
class Verdict:
    """A claim judged from the stored rows: ``held`` True/False, or None with ``why``."""

    claim: str
    paper: Any                    # the paper's value (a number or words), None where it gives none
    source: str
    ours: Any                     # our value (a number, or a status), None when it could not be read
    reference: float | None       # what ours was compared with (baseline, another run, a number, times factor)
    held: bool | None
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"claim": self.claim, "paper": _json_safe(self.paper), "source": self.source,
                "ours": _json_safe(self.ours), "reference": _json_safe(self.reference), "held": self.held,
                "why": self.why}

    @property
    def outcome(self) -> str:
        return {True: "held", False: "did not hold", None: "could not tell"}[self.held]


# ---------------------------------------------------------------------------------- loading
def available() -> list[PresetInfo]:
    """Every shipped preset, by name (a file that does not load is left out of the list, and
    :func:`load` of its name says why)."""
    infos = []
    for path in sorted(_shipped(), key=lambda path: path.stem):  # by name: fig4 before fig4-margin
        try:
            preset = load(path)
        except PresetError:
            continue
        infos.append(info(preset))
    return infos


def info(preset: Preset) -> PresetInfo:
    return PresetInfo(preset.name, preset.title, preset.paper, preset.figure, preset.section, preset.shows,
                      {scale: preset.run_count(scale) for scale in preset.scales}, preset.is_sweep,
                      preset.path, {scale: preset.scales[scale].get("note", "") for scale in preset.scales})


def _shipped() -> list[Path]:
    return [path for path in PRESETS_DIR.iterdir() if path.suffix in SUFFIXES] if PRESETS_DIR.is_dir() else []


def load(name_or_path: str | Path) -> Preset:
    """A shipped preset by name, or a preset file by path (``.toml`` or ``.json``), checked
    (Note [Preset format]); PresetError, one line, when it cannot be."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.suffix not in SUFFIXES and not path.exists():
        shipped = {p.stem: p for p in _shipped()}
        if text not in shipped:
            names = ", ".join(sorted(shipped)) or "none"
            raise PresetError(f"unknown preset {text!r}; available: {names} (or a path to a .toml or .json file)")
        path = shipped[text]
    if not path.is_file():
        raise PresetError(f"no preset file {text!r}")
    try:
        raw = path.read_text(encoding="utf-8")
        data = tomllib.loads(raw) if path.suffix == ".toml" else json.loads(raw)
    except (OSError, UnicodeDecodeError) as error:
        raise PresetError(f"cannot read preset {path}: {_one_line(error)}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise PresetError(f"preset {path} is not valid {path.suffix[1:].upper()}: {_one_line(error)}") from None
    return from_dict(data, path)


def from_dict(data: Any, path: Path | None = None) -> Preset:
    """A checked :class:`Preset` of a file's object; PresetError names the file and the key."""
    where = str(path) if path is not None else "preset"

    def fail(message: str):
        raise PresetError(f"{where}: {message}")

    if not isinstance(data, dict):
        fail(f"a preset is one object (table); got {type(data).__name__}")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        fail(f"unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_TOP_KEYS))}")
    for key in _REQUIRED:
        if key not in data:
            fail(f"missing key {key!r}")
    for key in ("name", "title", "paper", "figure", "section", "shows", "notes"):
        if key in data and (not isinstance(data[key], str) or not data[key].strip()):
            fail(f"{key!r} must be a non-empty text")
    if ("runs" in data) == ("sweep" in data):
        fail("give either 'runs' (a list of runs) or 'sweep' (base, vary, seeds), not both or neither")
    base = _table(data.get("base", {}), "base", fail)
    runs, sweep = [], None
    if "runs" in data:
        if not isinstance(data["runs"], list) or not data["runs"]:
            fail("'runs' must be a non-empty list of runs, each with a 'name'")
        for index, run in enumerate(data["runs"]):
            run = _table(run, f"runs[{index}]", fail)
            if not isinstance(run.get("name"), str) or not run["name"].strip() or _NAME_SEPARATOR in run["name"]:
                fail(f"runs[{index}] needs a 'name' (a text without {_NAME_SEPARATOR!r})")
            runs.append(run)
        names = [run["name"] for run in runs]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            fail(f"run name(s) {', '.join(twice)} used twice")
    else:
        sweep = _table(data["sweep"], "sweep", fail)
        unknown = sorted(set(sweep) - _SWEEP_KEYS)
        if unknown:
            fail(f"unknown sweep key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_SWEEP_KEYS))}")
        if "base" in data:
            fail("a sweep preset puts its base config in sweep.base")
        _vary_texts(sweep.get("vary"), "sweep.vary", fail)
    scales = _table(data["scales"], "scales", fail)
    missing = [scale for scale in SCALES if scale not in scales]
    if missing:
        fail(f"missing scale(s) {', '.join(missing)}; a preset has {' and '.join(SCALES)}")
    for scale, chosen in scales.items():
        chosen = _table(chosen, f"scales.{scale}", fail)
        unknown = sorted(set(chosen) - _SCALE_KEYS)
        if unknown:
            fail(f"unknown key(s) {', '.join(unknown)} in scales.{scale}; valid: {', '.join(sorted(_SCALE_KEYS))}")
        _table(chosen.get("override", {}), f"scales.{scale}.override", fail)
        for run, layer in _table(chosen.get("runs", {}), f"scales.{scale}.runs", fail).items():
            if run not in [r["name"] for r in runs]:
                fail(f"scales.{scale}.runs names run {run!r}, which the preset does not have")
            _table(layer, f"scales.{scale}.runs.{run}", fail)
        if sweep is None and ("seeds" in chosen or "vary" in chosen):
            fail(f"scales.{scale}: seeds and vary are for sweep presets")
        if "vary" in chosen:
            _vary_texts(chosen["vary"], f"scales.{scale}.vary", fail)
    preset = Preset(name=data["name"], title=data["title"], paper=data["paper"], figure=data["figure"],
                    section=data["section"], shows=data["shows"], notes=data.get("notes", ""),
                    claims=[], scales=scales, base=base, runs=runs, sweep=sweep, path=path)
    groups = {}
    for scale in scales:  # every config of every scale validates; ConfigError -> PresetError
        try:
            groups[scale] = set(preset.groups(scale))
            if not preset.is_sweep:
                preset.configs(scale)
        except PresetError as error:
            fail(str(error))
    if not isinstance(data["claims"], list) or not data["claims"]:
        fail("'claims' must be a non-empty list of claims")
    preset.claims = [_claim(claim, f"claims[{i}]", groups, fail) for i, claim in enumerate(data["claims"])]
    if "layout" in data:
        preset.layout = _layout(data["layout"], [c for scale in scales for c in preset.all_configs(scale)], fail)
    return preset


def _layout(data: Any, configs: list[RunConfig], fail) -> Layout:
    """A checked :class:`Layout` (Note [Layout]); fields resolved against every config the preset runs."""
    from .. import sweeps

    data = _table(data, "layout", fail)
    unknown = sorted(set(data) - _LAYOUT_KEYS)
    if unknown:
        fail(f"unknown key(s) {', '.join(unknown)} in layout; valid: {', '.join(sorted(_LAYOUT_KEYS))}")

    def field(value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            fail(f"{where} must be a config field (cell, cell.OPTION, task.OPTION, lr, ...); got {value!r}")
        cells_used = list(dict.fromkeys(config.cell.name for config in configs))
        try:
            return sweeps.resolve_field(value, configs[0], cells_used).path
        except ValueError as error:
            fail(f"{where}: {_one_line(error).removeprefix('vary ')}")

    columns = field(data["columns"], "layout.columns") if "columns" in data else None
    color = field(data["color"], "layout.color") if "color" in data else None
    if not isinstance(data.get("panels"), list) or not data["panels"]:
        fail("layout.panels must be a non-empty list of panels, each with a 'metric'")
    panels = []
    for index, raw in enumerate(data["panels"]):
        where = f"layout.panels[{index}]"
        raw = _table(raw, where, fail)
        unknown = sorted(set(raw) - _PANEL_KEYS)
        if unknown:
            fail(f"unknown key(s) {', '.join(unknown)} in {where}; valid: {', '.join(sorted(_PANEL_KEYS))}")
        metric = raw.get("metric")
        if not isinstance(metric, str) or not metric.strip() or metric in RUN_FIELDS:
            fail(f"{where} needs 'metric' (a metric row name such as val/loss)")
        if not isinstance(raw.get("title", ""), str) or not isinstance(raw.get("log", False), bool):
            fail(f"{where}: title is a text and log is true or false")
        x = raw.get("x", "step")
        x = "step" if x == "step" else field(x, f"{where}.x")
        stat, last = raw.get("stat", "final"), raw.get("last")
        if ("stat" in raw or "last" in raw) and x == "step":
            fail(f"{where}: stat and last go with a config field as x (a value per run); over steps every row is drawn")
        _check_stat(stat, last, where, fail)
        marks = []
        if not isinstance(raw.get("marks", []), list):
            fail(f"{where}.marks must be a list of \"baseline\" or {{ value = NUMBER, label = TEXT }}")
        for mark in raw.get("marks", []):
            if mark == "baseline":
                marks.append(Mark(None, "baseline"))
            elif isinstance(mark, dict) and set(mark) <= {"value", "label"} and _is_number(mark.get("value")) \
                    and isinstance(mark.get("label", ""), str):
                marks.append(Mark(float(mark["value"]), mark.get("label") or _number(mark["value"])))
            else:
                fail(f"{where}.marks: each mark is \"baseline\" or {{ value = NUMBER, label = TEXT }}; got {mark!r}")
        shown = raw.get("range")
        if shown is not None and not (isinstance(shown, list) and len(shown) == 2 and all(map(_is_number, shown))
                                      and shown[0] < shown[1] and (not raw.get("log") or shown[0] > 0)):
            fail(f"{where}.range must be [low, high] with low < high (and low > 0 on a log axis); got {shown!r}")
        panels.append(Panel(metric, raw.get("title", "") or metric, raw.get("log", False), x, stat, last,
                            tuple(marks), None if shown is None else (float(shown[0]), float(shown[1]))))
    return Layout(tuple(panels), columns, color)


def claim_metrics(preset: Preset) -> list[str]:
    """The metric rows the claims read, in the claims' order (not the run fields: status, parameters)."""
    names = []
    for claim in preset.claims:
        for name in (claim.metric, claim.than.get("metric", claim.metric) if isinstance(claim.than, dict) else None):
            if name and name not in RUN_FIELDS and name not in names:
                names.append(name)
    return names


def field_value(config: RunConfig | None, path: str) -> Any:
    """The value of the canonical config field ``path`` (:func:`stability.sweeps.resolve_field`) in
    ``config``: the cell's (task's) declared default where its options leave it out; None when the
    config is missing or its cell (task) has no such option."""
    from .. import cells, tasks

    if config is None:
        return None
    section, _, rest = path.partition(".")
    if not rest:
        return getattr(config, section).name
    if section == "train":
        return getattr(config.train, rest, None)
    if rest == "hidden_size":
        return config.cell.hidden_size
    part, registry = (config.cell, cells) if section == "cell" else (config.task, tasks)
    if rest in part.options:
        return part.options[rest]
    try:
        return registry.describe(part.name).option(rest).default
    except ValueError:
        return None


def _claim(data: Any, where: str, groups: dict[str, set[str]], fail) -> Claim:
    data = _table(data, where, fail)
    unknown = sorted(set(data) - _CLAIM_KEYS)
    if unknown:
        fail(f"unknown key(s) {', '.join(unknown)} in {where}; valid: {', '.join(sorted(_CLAIM_KEYS))}")
    for key in ("text", "run", "metric"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            fail(f"{where} needs {key!r} (a text)")
    stat, op, last = data.get("stat", "final"), data.get("op", "<"), data.get("last")
    _check_stat(stat, last, where, fail)
    if op not in OPS:
        fail(f"{where}: op must be one of {', '.join(OPS)}; got {op!r}")
    metric = data["metric"]
    textual = metric == "status"
    if textual != (op in ("==", "!=")):
        fail(f"{where}: == and != compare a status (metric 'status') with a text; numbers use <, <=, >, >=, within")
    than = data.get("than")
    if than is None:
        fail(f"{where} needs 'than': a number, \"baseline\", or {{ run = NAME }}")
    if textual:
        if not isinstance(than, str):
            fail(f"{where}: a status is compared with a text such as \"diverged\"")
    elif isinstance(than, dict):
        extra = sorted(set(than) - {"run", "metric", "stat", "last"})
        if extra or not isinstance(than.get("run"), str) or not isinstance(than.get("metric", metric), str):
            fail(f"{where}: 'than' as a table takes run (required, a text), metric, stat, last")
        if than.get("stat", stat) not in STATS:
            fail(f"{where}: than.stat must be one of {', '.join(STATS)}")
        if than.get("stat", stat) == "mean_last" and not _is_count(than.get("last", last)):
            fail(f"{where}: than.stat mean_last needs last = k (an integer >= 1)")
    elif than != "baseline" and not _is_number(than):
        fail(f"{where}: 'than' must be a number, \"baseline\" or {{ run = NAME }}; got {than!r}")
    for name in [data["run"]] + ([than["run"]] if isinstance(than, dict) else []):
        for scale, known in groups.items():
            if name not in known:
                fail(f"{where} names {name!r}, which the preset does not run at scale {scale}; "
                     f"it runs: {', '.join(sorted(known))}")
    factor = data.get("factor", 1.0)
    if not _is_number(factor) or factor <= 0:
        fail(f"{where}: factor must be a positive number")
    tolerance = data.get("tolerance")
    if (op == "within") != (tolerance is not None) or (tolerance is not None and (
            not _is_number(tolerance) or tolerance < 0)):
        fail(f"{where}: op within needs tolerance (a relative difference >= 0), and only it takes one")
    paper = data.get("paper", {})
    paper = _table(paper, f"{where}.paper", fail)
    if set(paper) - {"value", "source"} or not isinstance(paper.get("source", ""), str):
        fail(f"{where}.paper takes value (a number or a text) and source (a text)")
    return Claim(text=data["text"], run=data["run"], metric=metric, stat=stat, last=last, op=op, than=than,
                 factor=float(factor), tolerance=None if tolerance is None else float(tolerance),
                 paper_value=paper.get("value"), paper_source=paper.get("source", ""))


def _check_stat(stat: Any, last: Any, where: str, fail) -> None:
    """A claim's or a panel's ``stat`` is one of :data:`STATS`, with ``last = k`` exactly when it is
    ``mean_last``."""
    if stat not in STATS:
        fail(f"{where}: stat must be one of {', '.join(STATS)}; got {stat!r}")
    if (stat == "mean_last") != (last is not None) or (last is not None and not _is_count(last)):
        fail(f"{where}: stat mean_last needs last = k (an integer >= 1), and only it takes 'last'")


def _table(value: Any, where: str, fail) -> dict:
    if not isinstance(value, dict):
        fail(f"{where!r} must be a table (an object); got {type(value).__name__}")
    return value


def _vary_texts(value: Any, where: str, fail) -> None:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        fail(f"{where!r} must be a non-empty list of --vary texts (FIELD=V1,V2,...)")


def _is_count(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 1


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


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
    from .. import cells, tasks

    data = copy.deepcopy(base)
    for layer in layers:
        for section in ("cell", "task", "train"):
            if not isinstance(layer.get(section, {}), dict):
                raise PresetError(f"{where}: '{section}' must be a table (an object) of its fields; "
                                  f"got {layer[section]!r}")
        before = {section: (data.get(section) or {}).get("name") for section in ("cell", "task")}
        data = _merge(data, layer)
        for section, registry in (("cell", cells), ("task", tasks)):
            named = (layer.get(section) or {}) if isinstance(layer.get(section), dict) else {}
            if "name" in named and named["name"] != before[section] and isinstance(data[section].get("options"), dict):
                try:
                    declared = {option.name for option in registry.describe(named["name"]).options}
                except ValueError:
                    continue  # an unknown name: validate() says so
                own = set((named.get("options") or {}))
                data[section]["options"] = {k: v for k, v in data[section]["options"].items()
                                            if k in declared or k in own}
    try:
        if "task" in data and "options" not in data["task"]:
            data["task"]["options"] = {}
        return RunConfig.from_dict(data).validate()
    except (ConfigError, TypeError) as error:
        raise PresetError(f"{where}: {_one_line(error)}") from None


def _one_line(error: BaseException | str) -> str:
    return " ".join(str(error).split())


# ---------------------------------------------------------------------------------- running
def run(preset: Preset, store, scale: str = "classroom", progress: Callable[[str], None] | None = None,
        override: dict | None = None, step_progress: Callable[[RunConfig], Any] | None = None) -> list[int]:
    """Train the preset's runs at ``scale`` one after another in this process; return their ids
    (in the preset's order; a sweep's in trial order). ``progress`` receives one line per run
    started and ended; ``step_progress(config)`` may return the trainer's ``progress`` callback for
    that run (its ``finish()``, if it has one, is called when the run ends; a sweep's runs train
    without one); ``override`` is a partial config laid over every run last (a test's handful of
    steps). A run that diverges or fails keeps its status and rows; the others still run."""
    from ..execution import runner
    from ..training.run import train_run

    say = progress or (lambda line: None)
    if preset.is_sweep:
        return _run_sweep(preset, store, scale, say, override)
    configs = preset.configs(scale, override)
    for name, config in configs.items():
        try:
            check_buildable(config)
        except ConfigError as error:
            raise PresetError(f"preset {preset.name!r} run {name!r} ({scale}): {_one_line(error)}") from None
    run_ids = []
    for index, (name, config) in enumerate(configs.items(), 1):
        run_id = runner.create_attached_run(store, config)
        run_ids.append(run_id)
        say(f"[{index}/{len(configs)}] run {run_id} {name}: {config.cell.name} on {config.task.name}, "
            f"{config.train.steps} steps")
        started = time.time()
        callback = step_progress(config) if step_progress is not None else None
        try:
            status = train_run(config, store, run_id, progress=callback).status
        except KeyboardInterrupt:
            store.set_status(run_id, "stopped", error="interrupted from the keyboard")
            raise
        except Exception as error:  # noqa: BLE001 - the run is marked failed; the preset goes on
            store.set_status(run_id, "failed", error=runner.describe_error(error))
            status = "failed"
        finally:
            if hasattr(callback, "finish"):
                callback.finish()
        say(f"[{index}/{len(configs)}] run {run_id} {name}: {status} in {time.time() - started:.1f} s")
    return run_ids


def _run_sweep(preset: Preset, store, scale: str, say, override: dict | None) -> list[int]:
    """The sweep of a sweep preset, stored as any sweep and trained here by one in-process worker
    (``sweeps.work``), so the Sweep page and ``sweeps show`` see it as they see any other."""
    from .. import sweeps
    from ..runs.status import ACTIVE_STATUSES

    spec = preset.sweep_spec(scale, override, check=True)
    sweep_id = sweeps.store_sweep(store, spec, workers=1, name=preset.name)
    say(f"sweep {sweep_id}: {spec.describe()}")
    for index in range(1, spec.size() + 1):
        started = time.time()
        try:
            if not sweeps.work(store, sweep_id, max_runs=1):
                break
        except KeyboardInterrupt:  # stopped as stop_sweep leaves a sweep: `sweeps resume` continues it
            for record in store.records(ACTIVE_STATUSES, sweep_id=sweep_id):
                store.set_status(record.id, "stopped", error="interrupted from the keyboard")
            store.update_sweep(sweep_id, status="stopped", finished_at=time.time())
            raise
        latest = max(store.records(sweep_id=sweep_id), key=lambda record: record.id)
        say(f"[{index}/{spec.size()}] run {latest.id} {setting_label(dict(latest.params))} "
            f"seed={latest.config.train.seed if latest.config else '?'}: {latest.status} "
            f"in {time.time() - started:.1f} s")
    return sorted(record.id for record in store.records(sweep_id=sweep_id))


def estimate(preset: Preset, store, scale: str = "classroom") -> dict[str, Any] | None:
    """``{"seconds": ..., "basis": one line}``: a rough wall time of the preset's runs at ``scale``
    on this machine, as :func:`stability.sweeps.estimate` times a sweep (Note [Rough time] there:
    completed runs of the same shape in ``store``, else a few timed training steps); None when no
    run could be timed."""
    from .. import sweeps

    if preset.is_sweep:
        return sweeps.estimate(preset.sweep_spec(scale), store)
    seconds, remembered = 0.0, 0
    for config in preset.configs(scale).values():
        one = sweeps.estimate(sweeps.SweepSpec(config), store)
        if one is None:
            return None
        seconds += one["seconds"]
        remembered += "completed runs" in one["basis"]
    timed = len(preset.runs) - remembered
    basis = [f"{remembered} from completed runs in the store"] * bool(remembered) + \
        [f"{timed} timed by {TIMED_STEPS} training steps here"] * bool(timed)
    return {"seconds": seconds, "basis": f"{len(preset.runs)} runs one after another: {', '.join(basis)}"}


# ---------------------------------------------------------------------------------- judging
def group_of(record, preset: Preset) -> str | None:
    """The name a claim uses for a stored run of ``preset``: the run's name, or its sweep setting."""
    if preset.is_sweep:
        return setting_label(dict(record.params)) if record.sweep_id is not None else None
    prefix = f"{preset.name}{_NAME_SEPARATOR}"
    return record.name[len(prefix):] if record.name.startswith(prefix) else None


def verdicts(preset: Preset, store, run_ids: list[int]) -> list[Verdict]:
    """Each claim of ``preset`` judged from the stored rows of ``run_ids`` (Note [Claims])."""
    records = [store.record(run_id) for run_id in run_ids]
    groups: dict[str, list] = {}
    for record in records:
        name = group_of(record, preset)
        if name is not None:
            groups.setdefault(name, []).append(record)
    metrics = {claim.metric for claim in preset.claims} | {
        claim.than.get("metric", claim.metric) for claim in preset.claims if isinstance(claim.than, dict)}
    rows = store.metrics_many(run_ids, names=sorted(metrics - set(RUN_FIELDS))) if run_ids else None
    return [_judge(claim, groups, rows) for claim in preset.claims]


def _judge(claim: Claim, groups: dict[str, list], rows) -> Verdict:
    def verdict(ours=None, reference=None, held=None, why=""):
        return Verdict(claim.text, claim.paper_value, claim.paper_source, ours, reference, held, why)

    ours, why = _value(groups, rows, claim.run, claim.metric, claim.stat, claim.last)
    if why:
        return verdict(ours, why=why)
    if claim.metric == "status":
        held = (ours == claim.than) if claim.op == "==" else (ours != claim.than)
        return verdict(ours, None, held, f"{claim.run}'s status is {ours}")
    if isinstance(claim.than, dict):
        other = claim.than["run"]  # its metric and statistic default to the claim's own
        read = (claim.than.get("metric", claim.metric), claim.than.get("stat", claim.stat),
                claim.than.get("last", claim.last))
        reference, why = _value(groups, rows, other, *read)
        if why:
            return verdict(ours, why=why)
        basis = f"{other}'s {_describe(*read)}"
    elif claim.than == "baseline":
        baselines = [record.baseline for record in groups[claim.run] if record.baseline is not None]
        if not baselines:
            return verdict(ours, why=f"{claim.run}'s task stored no memoryless baseline")
        reference, basis = baselines[0], "the task's baseline"
    else:
        reference, basis = float(claim.than), "the claim's number"
    reference *= claim.factor
    if math.isnan(reference):
        return verdict(ours, why=f"the reference ({basis}) is NaN")
    if claim.op == "within":
        held = abs(ours - reference) <= claim.tolerance * abs(reference)
        return verdict(ours, reference, held, f"{claim.run} {_describe(claim.metric, claim.stat, claim.last)} "
                       f"{_number(ours)} against {_number(reference)} ({basis}), tolerance {claim.tolerance:g}: "
                       f"{'yes' if held else 'no'}")
    held = {"<": ours < reference, "<=": ours <= reference, ">": ours > reference, ">=": ours >= reference}[claim.op]
    factor = f"{claim.factor:g} × " if claim.factor != 1 else ""
    return verdict(ours, reference, held, f"{claim.run} {_describe(claim.metric, claim.stat, claim.last)} "
                   f"{_number(ours)} {claim.op} {factor}{basis} = {_number(reference)}: {'yes' if held else 'no'}")


def _describe(metric: str, stat: str, last: int | None) -> str:
    if metric in RUN_FIELDS:
        return metric
    return f"{stat if stat != 'mean_last' else f'mean of the last {last}'} {metric}"


def _value(groups: dict[str, list], rows, name: str, metric: str, stat: str, last: int | None):
    """``(value, None)``: the statistic of ``name``'s runs (their mean for a group), or ``(None, why)``."""
    records = groups.get(name)
    if not records:
        return None, f"no stored run of {name!r} among these runs"
    if metric == "status":
        statuses = sorted({record.status for record in records})
        return ", ".join(statuses), None
    values = []
    for record in records:
        if metric in RUN_FIELDS:
            value = _run_field(record, metric)
            if value is None:
                return None, f"run {record.id} ({name}) has no stored {metric}"
            values.append(value)  # a count: kept an int where the group is one run
            continue
        own = rows[(rows["run_id"] == record.id) & (rows["name"] == metric)] if rows is not None else []
        if len(own) == 0:
            return None, f"run {record.id} ({name}, {record.status}) has no rows of {metric}"
        value = statistic(own.sort_values("step", kind="stable")["value"], stat, last)
        if math.isnan(value):  # an infinity compares (a gradient that blew up is above any number)
            return None, f"run {record.id} ({name}, {record.status}): {_describe(metric, stat, last)} is NaN"
        values.append(float(value))
    return (values[0] if len(values) == 1 else sum(values) / len(values)), None


def _run_field(record, name: str) -> int | None:
    """A run's stored count ``name`` (Note [Claims]); None when the run has not stored it."""
    if name != "trainable_params":
        return getattr(record, name)
    if record.total_params is None or record.config is None:
        return None
    if not record.config.train.freeze_recurrent:
        return record.total_params
    return None if record.recurrent_params is None else record.total_params - record.recurrent_params


def statistic(series, stat: str, last: int | None = None) -> float:
    """``stat`` (Note [Claims]) of a run's values of one metric in step order (a pandas Series)."""
    return float({"final": lambda s: s.iloc[-1], "first": lambda s: s.iloc[0], "min": lambda s: s.min(),
                  "max": lambda s: s.max(), "mean": lambda s: s.mean(),
                  "mean_last": lambda s: s.iloc[-(last or 1):].mean()}[stat](series))


def _number(value: float) -> str:
    """A value in a verdict's line: a whole number in full (16,899), anything else in 4 digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _json_safe(value: Any) -> Any:
    """NaN as None and an infinity as the text "inf" / "-inf": strict JSON has neither."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, float) and math.isinf(value):
        return str(value)
    return value
