"""Judging a preset's claims from the stored rows of its runs: each a verdict, held, not held, or could not tell.

    for verdict in presets.verdicts(preset, store, run_ids, scale="classroom"):
        verdict.claim, verdict.paper, verdict.ours, verdict.held, verdict.why, verdict.outcome
    presets.statistic(rows["value"], "mean_last", 5)   # a claim's or a panel's statistic of one run's rows

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
        from_step = 1                           # optional: read only the rows at steps >= 1 (during
                                                # training: not the reading at initialisation, step 0)
        needs  = { scale = "paper", why = "..." }   # optional: the claim is expected to hold only at
                                                # that scale; why, with the longest run measured

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

    Four outcomes: "held", "did not hold", "could not tell", and "needs paper scale": a claim with
    ``needs = { scale = "paper", ... }`` judged at another scale (``verdicts(..., scale=...)``) that
    did not hold there, or whose runs that scale does not train. Its text stays the paper's; the
    verdict keeps our value and says why the claim needs that scale (the preset's ``why``). A claim
    that holds at a smaller scale than it needs is "held"; judged at the scale it needs, it is held
    or not as any other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..config.fields import setting_label
from .format import Claim, Preset
from .vocabulary import NAME_SEPARATOR, RUN_FIELDS, number


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
    needs: str | None = None      # "paper": not held at this scale, expected at that one (Note [Claims])

    def to_dict(self) -> dict[str, Any]:
        return {"claim": self.claim, "paper": _json_safe(self.paper), "source": self.source,
                "ours": _json_safe(self.ours), "reference": _json_safe(self.reference), "held": self.held,
                "outcome": self.outcome, "needs": self.needs, "why": self.why}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Verdict":
        """The verdict :meth:`to_dict` wrote (a stored measurement's, :mod:`.measured`)."""
        return cls(data["claim"], data["paper"], data["source"], _from_json(data["ours"]),
                   _from_json(data["reference"]), data["held"], data["why"], data.get("needs"))

    @property
    def outcome(self) -> str:
        if self.needs is not None:
            return f"needs {self.needs} scale"
        return {True: "held", False: "did not hold", None: "could not tell"}[self.held]


OUTCOMES = ("held", "did not hold", "could not tell", "needs paper scale")  # what a verdict's outcome may be


def verdict_value(value) -> str:
    """The paper's value or ours as a verdict table writes it (the CLI's ``reproduce`` and the Reproduce page):
    4 significant figures, a whole number of 100 or more (a parameter count, a step) in full, a text as it is,
    and ``-`` for a claim with no value. Not :func:`stability.core.formatting.shown` (``%g``, six figures, as run
    names write a setting)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() and abs(value) >= 100 else f"{value:.4g}"
    return str(value)


def group_of(record, preset: Preset) -> str | None:
    """The name a claim uses for a stored run of ``preset``: the run's name, or its sweep setting."""
    if preset.is_sweep:
        return setting_label(dict(record.params)) if record.sweep_id is not None else None
    prefix = f"{preset.name}{NAME_SEPARATOR}"
    return record.name[len(prefix):] if record.name.startswith(prefix) else None


def verdicts(preset: Preset, store, run_ids: list[int], scale: str | None = None) -> list[Verdict]:
    """Each claim of ``preset`` judged from the stored rows of ``run_ids`` (Note [Claims]), trained at
    ``scale``: a claim that needs another scale and did not hold is "needs paper scale" (None: every
    claim is judged as if at the scale it needs)."""
    records = [store.record(run_id) for run_id in run_ids]
    groups: dict[str, list] = {}
    for record in records:
        name = group_of(record, preset)
        if name is not None:
            groups.setdefault(name, []).append(record)
    metrics = {claim.metric for claim in preset.claims} | {
        claim.than.get("metric", claim.metric) for claim in preset.claims if isinstance(claim.than, dict)}
    rows = store.metrics_many(run_ids, names=sorted(metrics - set(RUN_FIELDS))) if run_ids else None
    return [_placed(_judge(claim, groups, rows), claim, scale, groups) for claim in preset.claims]


def _placed(verdict: Verdict, claim: Claim, scale: str | None, groups: dict[str, list]) -> Verdict:
    """``verdict`` as "needs paper scale" where ``claim`` needs another scale than ``scale`` and did not
    hold (or its runs are not trained at this scale)."""
    if claim.needs is None or scale is None or scale == claim.needs or verdict.held is True:
        return verdict
    missing = [name for name in _names(claim) if name not in groups]
    ours = f"not trained at {scale} scale" if missing else f"at {scale} scale: {verdict.why}"
    return Verdict(verdict.claim, verdict.paper, verdict.source, verdict.ours, verdict.reference, None,
                   f"{claim.needs_why} ({ours})", claim.needs)


def _names(claim: Claim) -> list[str]:
    return [claim.run] + ([claim.than["run"]] if isinstance(claim.than, dict) else [])


def _judge(claim: Claim, groups: dict[str, list], rows) -> Verdict:
    def verdict(ours=None, reference=None, held=None, why=""):
        return Verdict(claim.text, claim.paper_value, claim.paper_source, ours, reference, held, why)

    ours, why = _value(groups, rows, claim.run, claim.metric, claim.stat, claim.last, claim.from_step)
    if why:
        return verdict(ours, why=why)
    if claim.metric == "status":
        held = (ours == claim.than) if claim.op == "==" else (ours != claim.than)
        return verdict(ours, None, held, f"{claim.run}'s status is {ours}")
    if isinstance(claim.than, dict):
        other = claim.than["run"]  # its metric and statistic default to the claim's own
        read = (claim.than.get("metric", claim.metric), claim.than.get("stat", claim.stat),
                claim.than.get("last", claim.last))
        reference, why = _value(groups, rows, other, *read, claim.from_step)
        if why:
            return verdict(ours, why=why)
        basis = f"{other}'s {_describe(*read, claim.from_step)}"
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
    read = f"{claim.run} {_describe(claim.metric, claim.stat, claim.last, claim.from_step)}"
    if claim.op == "within":
        held = abs(ours - reference) <= claim.tolerance * abs(reference)
        return verdict(ours, reference, held, f"{read} {number(ours)} against {number(reference)} ({basis}), "
                       f"tolerance {claim.tolerance:g}: {'yes' if held else 'no'}")
    held = {"<": ours < reference, "<=": ours <= reference, ">": ours > reference, ">=": ours >= reference}[claim.op]
    factor = f"{claim.factor:g} × " if claim.factor != 1 else ""
    return verdict(ours, reference, held,
                   f"{read} {number(ours)} {claim.op} {factor}{basis} = {number(reference)}: {'yes' if held else 'no'}")


def _describe(metric: str, stat: str, last: int | None, from_step: int = 0) -> str:
    if metric in RUN_FIELDS:
        return metric
    since = f" from step {from_step}" if from_step else ""
    return f"{stat if stat != 'mean_last' else f'mean of the last {last}'} {metric}{since}"


def _value(groups: dict[str, list], rows, name: str, metric: str, stat: str, last: int | None, from_step: int = 0):
    """``(value, None)``: the statistic of ``name``'s runs (their mean for a group) over the rows at steps
    ``>= from_step``, or ``(None, why)``."""
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
        own = rows[(rows["run_id"] == record.id) & (rows["name"] == metric) & (rows["step"] >= from_step)] \
            if rows is not None else []
        if len(own) == 0:
            since = f" at step {from_step} or later" if from_step else ""
            return None, f"run {record.id} ({name}, {record.status}) has no rows of {metric}{since}"
        value = statistic(own.sort_values("step", kind="stable")["value"], stat, last)
        if math.isnan(value):  # an infinity compares (a gradient that blew up is above any number)
            return None, (f"run {record.id} ({name}, {record.status}): {_describe(metric, stat, last, from_step)} "
                          "is NaN")
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


def _from_json(value: Any) -> Any:
    """A value :func:`_json_safe` wrote, read back ("inf" as an infinity)."""
    return float(value) if value in ("inf", "-inf") else value


def _json_safe(value: Any) -> Any:
    """NaN as None and an infinity as the text "inf" / "-inf": strict JSON has neither."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, float) and math.isinf(value):
        return str(value)
    return value
