"""``cells [NAME]`` and ``tasks [NAME]``: every cell or task in a line, or one in full.

    python -m stability cells                 # name  summary
    python -m stability tasks adding          # summary, paper, metric, equations, options
    python -m stability cells mylab.cells:LeakyRNN

Each command imports the catalogue it reads (:mod:`stability.cells`, :mod:`stability.tasks`) when it runs.
"""
from __future__ import annotations


def add_commands(commands) -> None:
    """``cells [NAME]`` and ``tasks [NAME]``: every one in a line, or one in full."""
    for name, handler, text in (("cells", cmd_cells, "the recurrent cells"),
                                ("tasks", cmd_tasks, "the sequence tasks")):
        command = commands.add_parser(name, help=f"{text}; with a NAME, one {name[:-1]} in full")
        command.add_argument("name", nargs="?", metavar="NAME",
                             help=f"a {name[:-1]} name or package.module:Class: its equations, paper and options")
        command.set_defaults(handler=handler)


def cmd_cells(args) -> int:
    from .. import cells

    if args.name is not None:
        print("\n".join(describe_lines(cells.describe(args.name))))
        return 0
    described = [cells.describe(name) for name in cells.available()]
    width = max(len(info.name) for info in described)
    for info in described:
        print(f"{info.name.ljust(width)}  {info.summary}")
    return 0


def cmd_tasks(args) -> int:
    from .. import tasks

    if args.name is not None:
        print("\n".join(describe_lines(tasks.describe(args.name))))
        return 0
    described = [tasks.describe(name) for name in tasks.available()]
    width = max(len(info.name) for info in described)
    metric_width = max(len(info.metric) for info in described)
    for info in described:
        print(f"{info.name.ljust(width)}  {info.metric.ljust(metric_width)}  {info.paper}")
    return 0


def describe_lines(info) -> list[str]:
    """A cell's or task's :func:`describe` as text: summary, paper, metric, equations, one line per option."""
    lines = [f"{info.name}: {info.summary}"]
    if info.paper:
        lines.append(f"paper: {info.paper}")
    if getattr(info, "metric", None):
        steps = "every step" if info.target_mode == "every" else "the last step"
        lines.append(f"metric: {info.metric} (targets at {steps})")
    if info.equations:
        lines += ["equations (LaTeX):", *(f"  {equation}" for equation in info.equations)]
    if info.options:
        lines.append("options:")
        rows = [(option.name, option.type, "required" if option.required else f"= {option.default!r}",
                 _option_limits(option), option.help) for option in info.options]
        widths = [max(len(row[column]) for row in rows) for column in range(4)]
        lines += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, [*widths, 0])).rstrip()
                  for row in rows]
    return lines


def _option_limits(option) -> str:
    """An option's allowed values: ``one of a, b`` or ``in [low, high]`` (an open end as ``inf``); else empty."""
    if option.choices:
        return "one of " + ", ".join(map(str, option.choices))
    if option.range:
        low, high = option.range
        return f"in [{'-inf' if low is None else low}, {'inf' if high is None else high}]"
    return ""
