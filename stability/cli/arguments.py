"""The command line's parser and the flags several commands share.

    parser = Parser(prog="stability")        # argparse, its errors one line and exit 2
    add_config_flags(train)                  # --cell, --hidden-size, ..., one flag per TrainConfig field
    config = config_from_args(args)          # the RunConfig those flags describe

``train`` and ``sweep`` take the same config flags; every command that reads the store takes
``--store`` (:func:`store_parent`).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from ..config import DEVICES, DTYPES, LR_SCHEDULES, OPTIMIZERS, CellConfig, RunConfig, TaskConfig, TrainConfig
from .output import print_error

STORE_HELP = "run store (default: $STABILITY_STORE, else ~/.stability/runs.db)"
_CHOICES = {"optimizer": OPTIMIZERS, "lr_schedule": LR_SCHEDULES, "device": DEVICES, "dtype": DTYPES}
_FLAG_TYPES = {"int": int, "float": float, "str": str, "int | None": int, "float | None": float}
_FLAG_NOTES = {"epochs": "passes over a fixed training set, instead of --steps",
               "freeze_recurrent": "keep the parameters that build the recurrent matrix W at their random "
                                   "initial values (KRU paper §4.1)",
               "deterministic": "deterministic GPU algorithms (cuDNN, cuBLAS, index_select's backward): the "
                                "same numbers every run, and a resume continues exactly on a GPU too; slower",
               "cuda_graphs": "on CUDA, train each step eagerly instead of replaying it as one CUDA graph "
                              "(the run's device line says which; a CPU run is eager either way)"}


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``stability: error: ...`` and exit 2, no usage dump."""

    def error(self, message: str):
        print_error(message)
        sys.exit(2)


def store_parent(**default) -> Parser:
    """A parent parser holding ``--store PATH``; ``default=argparse.SUPPRESS`` keeps a value given
    before a sub-command from being overwritten by the sub-command's own default."""
    parent = Parser(add_help=False)
    parent.add_argument("--store", metavar="PATH", help=STORE_HELP, **default)
    return parent


def key_value(text: str) -> tuple[str, object]:
    """``KEY=VALUE``, the value parsed as JSON where it is JSON (``3``, ``0.5``, ``true``), else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per config field: the cell, the task and every TrainConfig field."""
    cell, task = CellConfig(), TaskConfig()
    parser.add_argument("--cell", default=cell.name, metavar="NAME",
                        help=f"cell name, or package.module:Class for a cell of your own (default: {cell.name}; "
                             "see `cells`)")
    parser.add_argument("--hidden-size", type=int, default=cell.hidden_size, metavar="N",
                        help=f"default: {cell.hidden_size}")
    parser.add_argument("--cell-option", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="a cell option, e.g. m1=16 or nonlinearity=relu (repeatable)")
    parser.add_argument("--task", default=task.name, metavar="NAME",
                        help=f"task name, or package.module:Class for a task of your own (default: {task.name}; "
                             "see `tasks`)")
    parser.add_argument("--seq-len", type=int, metavar="T", help="the task's sequence length (its seq_len option)")
    parser.add_argument("--task-option", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="a task option, e.g. dataset=ECG200 (repeatable)")
    parser.add_argument("--data-dir", metavar="PATH", help="dataset cache folder of real-data tasks")
    _add_train_flags(parser)


def _add_train_flags(parser: argparse.ArgumentParser) -> None:
    """``--steps``, ``--lr``, ...: one flag per TrainConfig field, its help the default and the choices."""
    defaults = TrainConfig()
    for field in fields(TrainConfig):
        flag = f"--{field.name.replace('_', '-')}"
        if field.type == "bool":  # a switch that is on by default is turned off: --no-cuda-graphs
            on = getattr(defaults, field.name)
            parser.add_argument(f"--no-{flag[2:]}" if on else flag, dest=field.name, action="store_const",
                                const=not on, default=None, help=_FLAG_NOTES[field.name])
            continue
        kind = _FLAG_TYPES[field.type]
        default = getattr(defaults, field.name)
        if field.name.endswith("_every"):
            default = "from --steps"
        text = f"default: {'off' if default is None else default}"
        if field.name in _FLAG_NOTES:
            text = f"{_FLAG_NOTES[field.name]}; {text}"
        if field.name in _CHOICES:
            text = f"one of {', '.join(_CHOICES[field.name])}; {text}"
        parser.add_argument(flag, dest=field.name, type=kind, metavar={int: "N", float: "X", str: "NAME"}[kind],
                            help=text)


def add_execution_flags(parser: argparse.ArgumentParser) -> None:
    """``--cuda-graphs`` / ``--no-cuda-graphs`` (``args.cuda_graphs``: True, False, or None when neither is
    given): how a resumed run trains from now on. Its other fields are what its checkpoint continues; these
    are execution only (stability.training.checkpoints.EXECUTION_ONLY)."""
    switch = parser.add_mutually_exclusive_group()
    switch.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_const", const=False, default=None,
                        help="continue training each step eagerly on CUDA, not replayed as one CUDA graph "
                             "(the run's stored config says so from now on)")
    switch.add_argument("--cuda-graphs", dest="cuda_graphs", action="store_const", const=True, default=None,
                        help="continue replaying each step as one CUDA graph on CUDA where it can be "
                             "(the run's stored config says so from now on)")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig the ``train`` flags describe; unset flags keep the dataclass defaults."""
    task_options = dict(TaskConfig().options) if args.task == TaskConfig.name else {}
    if args.seq_len is not None:
        task_options["seq_len"] = args.seq_len
    task_options.update(args.task_option)
    if args.data_dir is not None:
        task_options["data_dir"] = args.data_dir
    train = {field.name: getattr(args, field.name) for field in fields(TrainConfig)
             if getattr(args, field.name) is not None}
    return RunConfig(cell=CellConfig(args.cell, args.hidden_size, dict(args.cell_option)),
                     task=TaskConfig(args.task, task_options), train=TrainConfig(**train), name=args.name)
