"""A preset's measured result as data: what ``reproduce NAME --json`` prints, saved where the gallery and
the README read it.

    python -m stability reproduce spectral-fig1 --json --save  # stability/presets/measured/spectral-fig1.classroom.json
    python -m stability reproduce --table                          # the README's table, from those files
    clock = Clock(); ...; clock.reading()      # CPU and wall seconds, cores, threads, load average
    result = measured.load("spectral-fig1", "classroom")           # the saved object, or None
    measured.paper_cost("kru-fig6")    # what its paper scale's training steps take on a GPU, eager and graphed, or None
    measured.counts(result["verdicts"])        # {"held": 7, "did not hold": 0, ..., "claims": 7}
    measured.result_line("spectral-fig1", "classroom", cores=2)   # the gallery's line of a saved result

Note [Measured results]
    A preset's verdicts and what they cost are measured, never typed: ``reproduce NAME --scale S
    --json`` ends with one JSON object (:func:`result`), and ``--save`` writes that same object to
    ``measured/NAME.S.json`` beside the presets (or to a path). Its keys::

        schema     1
        preset, scale, title, paper, figure
        run_ids, runs                 # each run's id, name (its group), status, step
        verdicts                      # Verdict.to_dict() of each claim, in the preset's order
        counts                        # how many claims had each outcome (judging.OUTCOMES), and "claims"
        measured                      # cpu_seconds (this process and its children: the runs train here),
                                      # wall_seconds, cores (this process may run on), threads (torch's),
                                      # load_average (1-minute, at the start and at the end), machine, when,
                                      # devices (each run's device line as its run row keeps it, e.g.
                                      # "cuda (NVIDIA H200); ... · graphed: ...": where a paper scale trained;
                                      # absent in a file saved before it)
        version                       # stability's version, the git commit (or $STABILITY_COMMIT where the
                                      # code is a copy without its git folder), python, torch

    It says what the machine was like (its processor, cores and load), never which machine it was:
    no store location, no path, no host or user name. A saved result ships in the package, and where its runs were stored was a
    folder of the machine that measured them (``reproduce``'s text output names the store; a file
    saved before this rule with a ``store`` key still reads). ``tests/test_shipped_data.py`` fails on
    an absolute path or a host name in any file that ships under ``stability/``.

    The gallery's counts and its time for a preset are read from the file of its scale
    (:func:`time_here`: the measurement made on a machine with as many cores as this one);
    the README's table is :func:`table`, and a test checks that the README holds it as it is.
"""
from __future__ import annotations

import datetime
import functools
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from .judging import OUTCOMES, Verdict
from .vocabulary import PRESETS_DIR, PresetError, one_line

MEASURED_DIR = PRESETS_DIR / "measured"
SCHEMA = 1
KEYS = ("schema", "preset", "scale", "title", "paper", "figure", "run_ids", "runs", "verdicts", "counts", "measured",
        "version")


class Clock:
    """What running a preset costs: CPU seconds of this process and its children, wall seconds, load."""

    def __init__(self):
        self.started = time.time()
        self.cpu = _cpu_seconds()
        self.load = _load()

    def reading(self) -> dict[str, Any]:
        import torch

        from ..workers.threads import available_cores

        return {"cpu_seconds": round(_cpu_seconds() - self.cpu, 2),
                "wall_seconds": round(time.time() - self.started, 2), "cores": available_cores(),
                "threads": torch.get_num_threads(), "load_average": [self.load, _load()], "machine": _machine(),
                "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def result(preset, scale: str, store, run_ids: list[int], verdicts: list[Verdict], clock: Clock) -> dict[str, Any]:
    """The object ``reproduce --json`` prints and ``--save`` writes (Note [Measured results])."""
    from .judging import group_of

    records = [store.record(run_id) for run_id in run_ids]
    return {"schema": SCHEMA, "preset": preset.name, "scale": scale, "title": preset.title, "paper": preset.paper,
            "figure": preset.figure, "run_ids": list(run_ids),
            "runs": [{"id": r.id, "name": group_of(r, preset), "status": r.status, "step": r.step} for r in records],
            "verdicts": [verdict.to_dict() for verdict in verdicts], "counts": counts(verdicts),
            "measured": {**clock.reading(), "devices": sorted({r.device for r in records if r.device})},
            "version": provenance()}


def counts(verdicts: list[Verdict] | list[dict]) -> dict[str, int]:
    """How many claims had each outcome, and ``"claims"``: every claim."""
    outcomes = [v["outcome"] if isinstance(v, dict) else v.outcome for v in verdicts]
    return {**{outcome: outcomes.count(outcome) for outcome in OUTCOMES}, "claims": len(outcomes)}


def path_for(name: str, scale: str) -> Path:
    return MEASURED_DIR / f"{name}.{scale}.json"


def save(data: dict[str, Any], path: Path | str | None = None) -> Path:
    """Write ``data`` (a :func:`result`) to ``path``, by default the shipped file of its preset and scale."""
    path = Path(path) if path is not None else path_for(data["preset"], data["scale"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    except OSError as error:
        raise PresetError(f"cannot save the measured result to {path}: {one_line(error)}") from None
    return path


def read(path: Path | str) -> dict[str, Any]:
    """A saved result, checked to be one (its keys and its verdicts); PresetError, one line, when not."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PresetError(f"cannot read the measured result {path}: {one_line(error)}") from None
    missing = [key for key in KEYS if not isinstance(data, dict) or key not in data]
    if missing or data["schema"] != SCHEMA:
        raise PresetError(f"{path} is not a measured result of schema {SCHEMA} (missing {', '.join(missing)})")
    try:
        [Verdict.from_dict(verdict) for verdict in data["verdicts"]]
    except (KeyError, TypeError) as error:
        raise PresetError(f"{path}: a verdict lacks {one_line(error)}") from None
    return data


def load(name: str, scale: str) -> dict[str, Any] | None:
    """The saved result of the shipped preset ``name`` at ``scale``, or None where none was saved."""
    path = path_for(name, scale)
    return read(path) if path.is_file() else None


def time_here(data: dict[str, Any] | None, cores: int | None = None) -> str | None:
    """The measured cost in words, e.g. "4.9 CPU min, 5.1 min wall (1 torch thread on 2 cores, load 0.3)";
    None without a measurement, or where it was made on a machine with another number of ``cores``."""
    if data is None:
        return None
    measured = data["measured"]
    if cores is not None and measured["cores"] != cores:
        return None
    return (f"{measured['cpu_seconds'] / 60:.1f} CPU min, {measured['wall_seconds'] / 60:.1f} min wall "
            f"({measured['threads']} torch thread{'s' * (measured['threads'] != 1)} on {measured['cores']} "
            f"core{'s' * (measured['cores'] != 1)}{_load_text(measured)})")


def table(scale: str = "classroom") -> str:
    """The README's table of the shipped presets at ``scale``, from their saved results (Note [Measured results])."""
    from .loading import available

    rows = ["| preset | paper, figure | runs | claims held | needs paper scale | did not hold or could not tell "
            "| CPU min | wall min | measured with |", "|---|---|---|---|---|---|---|---|---|"]
    for info in available():
        data = load(info.name, scale)
        if data is None:
            rows.append(f"| `{info.name}` | {info.paper}, {info.figure} | {info.runs[scale]} | not measured "
                        "| | | | | |")
            continue
        count, measured = data["counts"], data["measured"]
        rows.append(f"| `{info.name}` | {info.paper}, {info.figure} | {len(data['run_ids'])} "
                    f"| {count['held']} of {count['claims']} | {count['needs paper scale']} "
                    f"| {count['did not hold'] + count['could not tell']} | {measured['cpu_seconds'] / 60:.1f} "
                    f"| {measured['wall_seconds'] / 60:.1f} | {measured['threads']} thread, {measured['cores']} "
                    f"core{'s' * (measured['cores'] != 1)}{_load_text(measured)} |")
    return "\n".join(rows)


def _load_text(measured: dict[str, Any]) -> str:
    """", load 0.3 → 0.5": the 1-minute load average at the start and the end, where it was read."""
    loads = [load[0] for load in measured["load_average"] if load]
    return f", load {' → '.join(f'{load:.1f}' for load in loads)}" if loads else ""


def provenance() -> dict[str, Any]:
    """The code that measured: stability's version, the git commit, python's and torch's versions."""
    from importlib import metadata

    import torch

    try:
        version = metadata.version("stability")
    except metadata.PackageNotFoundError:
        version = None
    return {"stability": version, "commit": _commit(), "python": platform.python_version(),
            "torch": torch.__version__}


def _commit() -> str | None:
    if os.environ.get("STABILITY_COMMIT"):
        return os.environ["STABILITY_COMMIT"]
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PRESETS_DIR, capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _load() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def _machine() -> str:
    """The processor's model where Linux says it, else the platform's words."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({platform.machine()}, {os.cpu_count()} CPUs)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs)"


PAPER_COST = MEASURED_DIR / "gpu" / "paper-cost.json"  # benchmarks/paper_scale.py --save: paper scales timed on a GPU
PAPER_COST_SCHEMA = 1  # its graphed_* keys (issue 32) are additions a reader finds absent in an older file


def paper_cost(name: str, path: Path = PAPER_COST) -> dict[str, Any] | None:
    """What preset ``name``'s paper scale costs on the device it was timed on (Note [Paper cost]):
    ``{"device", "torch", "when", "seconds", "runs", "slowest": (run, seconds), "graphed_seconds",
    "graphed_slowest", "graphed_note"}``: ``seconds`` its eager training steps, ``graphed_seconds`` the same
    with each run's step replayed as a CUDA graph where it can be (None where the file has no graphed figure
    for it: timed before issue 32, or off CUDA; ``graphed_note`` says why where the file does), or None
    where it was not timed (no file, a file of another schema, or no row for it)."""
    try:
        data = _paper_costs(path, path.stat().st_mtime_ns)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != PAPER_COST_SCHEMA:
        return None
    for row in data.get("rows", []):
        if row.get("preset") == name and not row.get("failed"):
            graphed = row.get("graphed_seconds")
            return {"device": data["device"], "torch": data["torch"], "when": data["when"], "runs": row["runs"],
                    "seconds": float(row["seconds"]), "slowest": tuple(row["slowest"]),
                    "graphed_seconds": None if graphed is None else float(graphed),
                    "graphed_slowest": tuple(row["graphed_slowest"]) if row.get("graphed_slowest") else None,
                    "graphed_note": row.get("graphed_note")}
    return None


@functools.lru_cache(maxsize=4)
def _paper_costs(path: Path, mtime_ns: int) -> dict:
    """The paper-cost file, parsed once while it is unchanged (the gallery asks for every preset at every rerun)."""
    return json.loads(path.read_text())


def result_line(name: str, scale: str, cores: int | None = None) -> str:
    """The gallery's line of what preset ``name`` measured at ``scale`` (``measured/NAME.SCALE.json``): its verdict
    counts and its time: the classroom's on a machine with ``cores`` cores (:func:`time_here`; else the cores it
    was measured on), the paper's (run on a GPU, Note [Paper cost]) in wall minutes on the devices its runs
    trained on, "graphed" where every run was; "" where none was saved or the file cannot be read."""
    try:
        data = load(name, scale)
    except PresetError:
        return ""
    if data is None:
        return ""
    count = data["counts"]
    if scale == "classroom":
        cost = time_here(data, cores=cores) or f"measured on {data['measured']['cores']} cores: {time_here(data)}"
    else:
        lines = data["measured"].get("devices") or []  # the runs' device lines (absent in an older file)
        where = sorted({line.split(";")[0].split(" · ")[0] for line in lines})
        graphed = " graphed" if lines and all("graphed:" in line for line in lines) else ""
        cost = f"{data['measured']['wall_seconds'] / 60:.1f} min wall" + (f" on {', '.join(where)}{graphed}"
                                                                           if where else "")
    needs = f", {count['needs paper scale']} need the paper scale" if count["needs paper scale"] else ""
    return f"measured at {scale} scale: {count['held']} of {count['claims']} claims held{needs} · {cost}"


def paper_cost_line(name: str, path: Path = PAPER_COST) -> str:
    """One line of :func:`paper_cost` for the gallery and the README: "" where it was not timed. It leads
    with the graphed figure where the file has one ("paper scale: ~X h of training steps on <device> graphed
    (~Y h eager), ..."), and is the eager line alone where it has not."""
    cost = paper_cost(name, path)
    if cost is None:
        return ""
    if cost["graphed_seconds"] is None:
        return (f"paper scale: ~{cost['seconds'] / 3600:.2g} h of training steps on {cost['device']}, its "
                f"{cost['runs']} runs one after another (the longest, {cost['slowest'][0]}, "
                f"{cost['slowest'][1] / 3600:.2g} h)")
    slowest = cost["graphed_slowest"] or cost["slowest"]
    return (f"paper scale: ~{cost['graphed_seconds'] / 3600:.2g} h of training steps on {cost['device']} graphed "
            f"(~{cost['seconds'] / 3600:.2g} h eager), its {cost['runs']} runs one after another (the longest, "
            f"{slowest[0]}, {slowest[1] / 3600:.2g} h graphed)")


# Note [Paper cost]
#     A claim that needs the paper's scale says so (judging, "needs paper scale"), and the classroom scale
#     is measured on a laptop's CPU; what the paper scale itself costs is measured too, on a GPU, by
#     ``benchmarks/paper_scale.py --device cuda --save``: every run's shape built on the device and timed
#     for a few training steps, projected to the preset's steps (a lower bound: evaluations, probes and the
#     store come on top; ``benchmarks/training.py`` measures those). Each shape is timed twice: eager (the
#     figure admission uses, ``seconds``) and, where it can be captured (issue 32), as the Trainer trains it
#     on CUDA, its StaticStep replayed as one CUDA graph (``graphed_seconds``: runs whose shape cannot be
#     captured count eager in it, as the Trainer trains them; null off CUDA or where none can be, and
#     ``graphed_note`` says why). The gallery's line (:func:`paper_cost_line`) leads with the graphed figure
#     where the file has one, the eager one beside it; a file timed before the graphed step (as the one of
#     2026-11-26, benchmarks/gpu-h200-2026-11-26.md) has the eager figure only, and the line is as it was.
#
#     A preset whose projected cost fits in what is left of a GPU session runs to its verdicts there:
#     ``benchmarks/gpu_check.sh`` times the paper scales, ``benchmarks/paper_fit.py`` picks the presets
#     whose graphed (else eager) seconds, twice over for the evaluations, probes and building, fit in the
#     seconds left, smallest first, leaving out those whose task reads a data set the machine does not
#     have (it reaches no network), and each runs as ``reproduce NAME --scale paper --json --save``
#     (Note [Measured results]). Its ``NAME.paper.json``, placed in ``measured/``, is what the gallery shows
#     beside the classroom counts (pages/reproduce.py); the others say what they would take instead.
