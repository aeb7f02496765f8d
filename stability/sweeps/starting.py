"""What a form offers before a sweep starts: the fields most often varied, each with an example of its values,
and the base config without the cell options a form filled in at their defaults.

    field_choices("spectral")            # ["lr", "cell", ..., "cell.r", ...]
    FIELD_HINTS["lr"]                    # "1e-4:1e-1:4:log", in the --vary syntax (stability/sweeps/spec.py)
    base = without_default_options(config)
"""
from __future__ import annotations

from ..config import RunConfig

DEFAULT_VARY = [("lr", "1e-4:1e-1:4:log"), ("cell", "rnn,spectral")]
FIELD_HINTS = {                    # field -> an example of its values, in the --vary syntax
    "lr": "1e-4:1e-1:4:log", "cell": "rnn,lstm,spectral", "cell.hidden_size": "32,64,128",
    "task.seq_len": "50,100,200", "optimizer": "adam,sgd,rmsprop", "clip_grad_norm": "none,1.0",
    "cell.h0": "zero,learned,noisy", "cell.h0_noise_std": "0.1,0.5", "steps": "500,1000",
    "batch_size": "32,64", "weight_decay": "0,1e-4",
}


def field_choices(cell: str) -> list[str]:
    """The fields a user most often varies (:data:`FIELD_HINTS`), then the cell's own options a form shows."""
    from .. import cells

    options = [f"cell.{option.name}" for option in cells.describe(cell).options if option.in_form]
    return list(dict.fromkeys([*FIELD_HINTS, *options]))


def without_default_options(config: RunConfig) -> RunConfig:
    """``config`` without the cell options a form filled in at their defaults: they say nothing the cell
    would not do anyway, and a sweep that varies ``cell`` would otherwise hand one cell's options to the
    others (``m1`` to an rnn)."""
    from .. import cells

    defaults = {option.name: option.default for option in cells.describe(config.cell.name).options}
    options = {name: value for name, value in config.cell.options.items()
               if name not in defaults or value != defaults[name]}
    return RunConfig.from_dict({**config.to_dict(), "cell": {**config.to_dict()["cell"], "options": options}})


__all__ = ["DEFAULT_VARY", "FIELD_HINTS", "field_choices", "without_default_options"]
