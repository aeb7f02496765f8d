"""docs/cli.md is the command line's contract: every command and flag the parser has is written there, and
nothing written there is gone from the parser (issue 34, item 6)."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from stability.cli.main import build_parser

DOC = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
COMMANDS_DOC, _, WORKER_DOC = DOC.partition("## Not a command: the worker")
SYNOPSIS = COMMANDS_DOC.split("```", 2)[1]
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z-]*[a-z])")
OTHER_PROGRAMS = {"--logdir"}  # tensorboard's, in `tensorboard --logdir DIR`


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(action.choices)


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings
            if option.startswith("--")}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """``"train"``, ``"sweeps"``, ``"sweeps show"``, ...: every command and action of the parser."""
    found = {}
    for name, command in _subcommands(build_parser()).items():
        found[name] = command
        if any(isinstance(action, argparse._SubParsersAction) for action in command._actions):
            found.update({f"{name} {action}": sub for action, sub in _subcommands(command).items()})
    return found


def test_every_command_is_in_the_synopsis_and_has_its_section():
    parsers = _parsers()
    names = set(re.findall(r"\| (\w+)(?= )", SYNOPSIS)) | set(re.findall(r"^stability (\w+)", SYNOPSIS, re.M))
    names |= {f"sweeps {action}" for action in re.findall(r"sweeps (\w+) ID", SYNOPSIS)}
    assert names == set(parsers), f"in the parser, not the synopsis: {set(parsers) - names}; " \
                                  f"in the synopsis, not the parser: {names - set(parsers)}"
    for name in parsers:
        command = name.split()[-1]
        assert re.search(rf"^(###|-) `(stability )?({name}|{command})\b", COMMANDS_DOC, re.M), \
            f"no section or entry for `{name}` in docs/cli.md"


def test_every_flag_of_the_parser_is_written_and_every_written_flag_exists():
    parsers = _parsers()
    parser_flags = set().union(*(_flags(parser) for parser in parsers.values()))
    written = set(FLAG.findall(COMMANDS_DOC)) - OTHER_PROGRAMS
    assert parser_flags <= written, f"flags missing from docs/cli.md: {sorted(parser_flags - written)}"
    assert written <= parser_flags, f"flags in docs/cli.md the parser lacks: {sorted(written - parser_flags)}"


def test_each_commands_flags_are_written_in_its_own_section():
    """A command's own flags (not the shared config flags of train and sweep, nor --store) in its section."""
    sections = dict(re.findall(r"^### `([a-z]+)[^\n]*\n(.*?)(?=^##)", COMMANDS_DOC + "\n##", re.M | re.S))
    sweeps_section = COMMANDS_DOC.split("### `sweeps", 1)[1].split("\n## ", 1)[0]
    shared = _flags(_parsers()["train"]) - {"--name", "--background", "--json"}
    for name, parser in _parsers().items():
        text = sweeps_section if name.startswith("sweeps") else sections.get(name, "")
        if name in ("cells", "tasks"):
            continue  # no flags
        own = _flags(parser) - {"--store", "--help"} - (shared if name == "sweep" else set())
        missing = [flag for flag in own if flag not in FLAG.findall(text)]
        assert not missing, f"`{name}`'s section lacks {missing}"


def test_the_worker_entry_points_flags_are_written():
    from stability.cli import worker

    source = Path(worker.__file__).read_text()
    for flag in re.findall(r'add_argument\("(--[a-z-]+)"', source):
        assert flag in FLAG.findall(WORKER_DOC), f"the worker's {flag} is not in docs/cli.md"


def test_the_store_resolution_and_exit_statuses_are_the_codes():
    from stability.cli import main, runs
    from stability.cli.arguments import STORE_HELP
    from stability.runs import location

    assert f"${location.ENV_VAR}" in STORE_HELP and f"`${location.ENV_VAR}`" in DOC
    assert f"`{location.DEFAULT_PATH}`" in DOC and f"`${location.HOME_ENV_VAR}`" in DOC
    assert runs.EXIT_CODES == {"completed": 0, "stopped": 0, "diverged": 1, "failed": 1}
    assert ValueError in main.BAD_INPUT and "exit status 2" in DOC
    assert '`{"run_id": ID, "status": STATUS, "final": {NAME: VALUE}}`' in DOC
