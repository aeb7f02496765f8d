"""Reading a preset file: every key checked (Note [Preset format] in :mod:`.format`), one line per mistake.

    presets.available()                   # [PresetInfo(name, title, paper, figure, shows, runs, ...)]
    preset = presets.load("spectral-fig1")  # a shipped name, or a path to a .toml/.json file; PresetError
    preset = presets.from_dict(data, path)  # the same checks on an object already read
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from .format import Claim, Preset, PresetInfo
from .layout import read_layout
from .vocabulary import (NAME_SEPARATOR, OPS, PRESETS_DIR, SCALES, STATS, SUFFIXES, Fail, PresetError, check_stat,
                         is_count, is_number, one_line, table, unknown_keys, vary_texts)

_TOP_KEYS = {"name", "title", "paper", "figure", "section", "shows", "notes", "base", "runs", "sweep",
             "scales", "claims", "layout"}
_REQUIRED = ("name", "title", "paper", "figure", "section", "shows", "scales", "claims")
_TEXTS = ("name", "title", "paper", "figure", "section", "shows", "notes")
_SCALE_KEYS = {"note", "override", "runs", "only", "seeds", "vary"}
_SWEEP_KEYS = {"base", "vary", "seeds"}
_CLAIM_KEYS = {"text", "run", "metric", "stat", "last", "op", "than", "factor", "tolerance", "paper", "from_step",
               "needs"}
_THAN_KEYS = {"run", "metric", "stat", "last"}


# ---------------------------------------------------------------------------------- the shipped presets
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


# ---------------------------------------------------------------------------------- reading
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
        raise PresetError(f"cannot read preset {path}: {one_line(error)}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise PresetError(f"preset {path} is not valid {path.suffix[1:].upper()}: {one_line(error)}") from None
    return from_dict(data, path)


def from_dict(data: Any, path: Path | None = None) -> Preset:
    """A checked :class:`Preset` of a file's object; PresetError names the file and the key."""
    where = str(path) if path is not None else "preset"

    def fail(message: str):
        raise PresetError(f"{where}: {message}")

    _check_top(data, fail)
    base = table(data.get("base", {}), "base", fail)
    runs, sweep = (_runs(data["runs"], fail), None) if "runs" in data else ([], _sweep(data, fail))
    scales = _scales(data["scales"], [run["name"] for run in runs], sweep is not None, fail)
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
        preset.layout = read_layout(data["layout"], [c for scale in scales for c in preset.all_configs(scale)], fail)
    return preset


def _check_top(data: Any, fail: Fail) -> None:
    """The file is one object with the known keys, the required ones, texts where texts go, and either
    runs or a sweep."""
    if not isinstance(data, dict):
        fail(f"a preset is one object (table); got {type(data).__name__}")
    unknown_keys(data, _TOP_KEYS, fail)
    for key in _REQUIRED:
        if key not in data:
            fail(f"missing key {key!r}")
    for key in _TEXTS:
        if key in data and (not isinstance(data[key], str) or not data[key].strip()):
            fail(f"{key!r} must be a non-empty text")
    if ("runs" in data) == ("sweep" in data):
        fail("give either 'runs' (a list of runs) or 'sweep' (base, vary, seeds), not both or neither")


def _runs(data: Any, fail: Fail) -> list[dict]:
    """A list preset's runs, each a table with a name of its own."""
    if not isinstance(data, list) or not data:
        fail("'runs' must be a non-empty list of runs, each with a 'name'")
    runs = []
    for index, run in enumerate(data):
        run = table(run, f"runs[{index}]", fail)
        if not isinstance(run.get("name"), str) or not run["name"].strip() or NAME_SEPARATOR in run["name"]:
            fail(f"runs[{index}] needs a 'name' (a text without {NAME_SEPARATOR!r})")
        if "vary" in run:
            vary_texts(run["vary"], f"runs[{index}].vary", fail)
        runs.append(run)
    names = [run["name"] for run in runs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        fail(f"run name(s) {', '.join(twice)} used twice")
    return runs


def _sweep(data: dict, fail: Fail) -> dict:
    """A sweep preset's ``sweep`` table (its base config lives there, not in a top-level base)."""
    sweep = table(data["sweep"], "sweep", fail)
    unknown_keys(sweep, _SWEEP_KEYS, fail, kind="sweep key(s)")
    if "base" in data:
        fail("a sweep preset puts its base config in sweep.base")
    table(sweep.get("base", {}), "sweep.base", fail)
    vary_texts(sweep.get("vary"), "sweep.vary", fail)
    return sweep


def _scales(data: Any, run_names: list[str], is_sweep: bool, fail: Fail) -> dict:
    """Both scales, each a table of overrides (seeds and vary for a sweep only)."""
    scales = table(data, "scales", fail)
    missing = [scale for scale in SCALES if scale not in scales]
    if missing:
        fail(f"missing scale(s) {', '.join(missing)}; a preset has {' and '.join(SCALES)}")
    for scale, chosen in scales.items():
        chosen = table(chosen, f"scales.{scale}", fail)
        unknown_keys(chosen, _SCALE_KEYS, fail, f"scales.{scale}")
        table(chosen.get("override", {}), f"scales.{scale}.override", fail)
        for run, layer in table(chosen.get("runs", {}), f"scales.{scale}.runs", fail).items():
            if run not in run_names:
                fail(f"scales.{scale}.runs names run {run!r}, which the preset does not have")
            if "vary" in table(layer, f"scales.{scale}.runs.{run}", fail):
                vary_texts(layer["vary"], f"scales.{scale}.runs.{run}.vary", fail)
        if not is_sweep and ("seeds" in chosen or "vary" in chosen):
            fail(f"scales.{scale}: seeds and vary are for sweep presets (a run's own grid: runs.NAME.vary)")
        if "vary" in chosen:
            vary_texts(chosen["vary"], f"scales.{scale}.vary", fail)
        if "only" in chosen:
            _only(chosen["only"], run_names, is_sweep, f"scales.{scale}", fail)
    return scales


def _only(only: Any, run_names: list[str], is_sweep: bool, where: str, fail: Fail) -> None:
    """A scale's ``only``: some of a list preset's runs (a sweep's scale gives its own vary instead)."""
    if is_sweep:
        fail(f"{where}: only is for list presets (a sweep's scale gives its own vary)")
    if not isinstance(only, list) or not only or any(name not in run_names for name in only):
        fail(f"{where}.only must be a non-empty list of the preset's run names ({', '.join(run_names)})")


# ---------------------------------------------------------------------------------- claims
def _claim(data: Any, where: str, groups: dict[str, set[str]], fail: Fail) -> Claim:
    """A checked :class:`Claim` (Note [Claims] in :mod:`.judging`); the runs it names are run at every scale."""
    data = table(data, where, fail)
    unknown_keys(data, _CLAIM_KEYS, fail, where)
    for key in ("text", "run", "metric"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            fail(f"{where} needs {key!r} (a text)")
    stat, op, last = data.get("stat", "final"), data.get("op", "<"), data.get("last")
    check_stat(stat, last, where, fail)
    if op not in OPS:
        fail(f"{where}: op must be one of {', '.join(OPS)}; got {op!r}")
    metric = data["metric"]
    if (metric == "status") != (op in ("==", "!=")):
        fail(f"{where}: == and != compare a status (metric 'status') with a text; numbers use <, <=, >, >=, within")
    than = _than(data.get("than"), metric, stat, last, where, fail)
    needs, needs_why = _needs(data.get("needs"), [scale for scale in groups if scale != SCALES[0]], where, fail)
    for name in [data["run"]] + ([than["run"]] if isinstance(than, dict) else []):
        for scale, known in groups.items():
            if name not in known and (needs is None or scale == needs):  # a claim that needs a scale
                fail(f"{where} names {name!r}, which the preset does not run at scale {scale}; "  # may name
                     f"it runs: {', '.join(sorted(known))}")                                       # its runs
    from_step = data.get("from_step", 0)
    if isinstance(from_step, bool) or not isinstance(from_step, int) or from_step < 0:
        fail(f"{where}: from_step must be a step (an integer >= 0)")
    factor = data.get("factor", 1.0)
    if not is_number(factor) or factor <= 0:
        fail(f"{where}: factor must be a positive number")
    tolerance = data.get("tolerance")
    if (op == "within") != (tolerance is not None) or (tolerance is not None and (
            not is_number(tolerance) or tolerance < 0)):
        fail(f"{where}: op within needs tolerance (a relative difference >= 0), and only it takes one")
    paper = table(data.get("paper", {}), f"{where}.paper", fail)
    if set(paper) - {"value", "source"} or not isinstance(paper.get("source", ""), str):
        fail(f"{where}.paper takes value (a number or a text) and source (a text)")
    return Claim(text=data["text"], run=data["run"], metric=metric, stat=stat, last=last, op=op, than=than,
                 factor=float(factor), tolerance=None if tolerance is None else float(tolerance),
                 paper_value=paper.get("value"), paper_source=paper.get("source", ""), from_step=from_step,
                 needs=needs, needs_why=needs_why)


def _needs(data: Any, scales: list[str], where: str, fail: Fail) -> tuple[str | None, str]:
    """A claim's ``needs = { scale = "paper", why = "..." }``: the scale it is expected to hold at (any
    but the first, classroom), and why, with the longest run measured as evidence."""
    if data is None:
        return None, ""
    data = table(data, f"{where}.needs", fail)
    unknown_keys(data, {"scale", "why"}, fail, f"{where}.needs")
    if data.get("scale") not in scales or not isinstance(data.get("why"), str) or not data["why"].strip():
        fail(f"{where}.needs takes scale (one of {', '.join(scales)}) and why (a text: the scale it needs "
             "and why, with the longest run measured)")
    return data["scale"], " ".join(data["why"].split())


def _than(than: Any, metric: str, stat: str, last: Any, where: str, fail: Fail) -> Any:
    """A claim's reference: a text for a status, else a number, "baseline", or another run's table."""
    if than is None:
        fail(f"{where} needs 'than': a number, \"baseline\", or {{ run = NAME }}")
    if metric == "status":
        if not isinstance(than, str):
            fail(f"{where}: a status is compared with a text such as \"diverged\"")
    elif isinstance(than, dict):
        if set(than) - _THAN_KEYS or not isinstance(than.get("run"), str) \
                or not isinstance(than.get("metric", metric), str):
            fail(f"{where}: 'than' as a table takes run (required, a text), metric, stat, last")
        if than.get("stat", stat) not in STATS:
            fail(f"{where}: than.stat must be one of {', '.join(STATS)}")
        if than.get("stat", stat) == "mean_last" and not is_count(than.get("last", last)):
            fail(f"{where}: than.stat mean_last needs last = k (an integer >= 1)")
    elif than != "baseline" and not is_number(than):
        fail(f"{where}: 'than' must be a number, \"baseline\" or {{ run = NAME }}; got {than!r}")
    return than
