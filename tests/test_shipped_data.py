"""What ships carries no developer's machine: every data file the package ships under ``stability/`` (the
``[tool.setuptools.package-data]`` globs of pyproject.toml: presets, measured results, ...) is free of
absolute paths, temporary folders, this checkout's and this user's folders and this machine's name, and
a measured result has no key that names a place (Note [Measured results] in stability/presets/measured.py).
"""
from __future__ import annotations

import json
import re
import socket
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "stability"

# An absolute path of some machine: a POSIX folder that holds users' or temporary files, a Windows drive,
# a file or SQLite URL. "~/.stability" (the documented default, the same on every machine) is not one.
MACHINE_PATH = re.compile(
    r"(?<![\w.~])/(?:tmp|var|private|home|root|Users|mnt|media|opt|srv|scratch|work|data|run|usr|etc)/"
    r"|(?<![\w])[A-Za-z]:\\\\?[\w.-]"
    r"|\bfile://|\bsqlite:///")
# Keys that would say where something was on the machine that wrote the file.
PLACE_KEYS = {"store", "path", "host", "hostname", "node", "user", "username", "cwd", "home", "location", "url"}


def _package_data_globs() -> list[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return pyproject["tool"]["setuptools"]["package-data"]["stability"]


def shipped_data_files() -> list[Path]:
    files = {path for pattern in _package_data_globs() for path in PACKAGE.glob(pattern) if path.is_file()}
    return sorted(path for path in files if "__pycache__" not in path.parts)


def _this_machine() -> list[str]:
    """This checkout's folder, this user's home, the temporary folder and the host's name (where it is long
    enough to mean something: "vm" would match words)."""
    names = [str(ROOT), str(Path.home()), tempfile.gettempdir()]
    host = socket.gethostname()
    names += [name for name in {host, host.split(".")[0]} if len(name) >= 4]
    return [name for name in names if name not in ("/", "")]


def _keys(value, where="") -> list[tuple[str, object]]:
    if isinstance(value, dict):
        found = [(f"{where}.{key}".lstrip("."), inner) for key, inner in value.items()]
        return found + [pair for key, inner in value.items() for pair in _keys(inner, f"{where}.{key}")]
    if isinstance(value, list):
        return [pair for index, inner in enumerate(value) for pair in _keys(inner, f"{where}[{index}]")]
    return []


def test_the_package_ships_data_files_to_check():
    names = {path.relative_to(PACKAGE).as_posix() for path in shipped_data_files()}
    assert "presets/spectral-fig1.toml" in names and "presets/measured/spectral-fig1.classroom.json" in names
    assert "presets/measured/gpu/paper-cost.json" in names


@pytest.mark.parametrize("path", shipped_data_files(), ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_a_shipped_file_names_no_machine(path):
    text = path.read_text(encoding="utf-8")
    found = [match.group(0) for match in MACHINE_PATH.finditer(text)]
    assert not found, f"{path.relative_to(ROOT)} holds an absolute path of some machine: {found[:3]}"
    for name in _this_machine():
        pattern = re.escape(name) if "/" in name or "\\" in name else rf"\b{re.escape(name)}\b"
        assert not re.search(pattern, text), f"{path.relative_to(ROOT)} names this machine: {name!r}"
    if path.suffix == ".json":
        places = [key for key, _ in _keys(json.loads(text)) if key.rsplit(".", 1)[-1].lower() in PLACE_KEYS]
        assert not places, f"{path.relative_to(ROOT)} records where it was measured: {places}"


@pytest.mark.parametrize("text", [
    '"store": "/tmp/claims_q/kru-copy.db"', "/home/ana/lab/runs.db", "saved in /Users/ana/x.json",
    r"C:\Users\ana\runs.db", "sqlite:////srv/lab/runs.db", "/root/.stability/runs.db", "/work/main/stability",
])
def test_the_check_sees_a_machines_paths(text):
    assert MACHINE_PATH.search(text)


@pytest.mark.parametrize("text", [
    "~/.stability/runs.db", "10 log 8 / (T + 20)", "1/6", "lr/10", "T/2", "σ/σ*", "stability/presets/x.toml",
    "Fig. 2(a)(b)/(d)", "benchmarks/paper_scale.py --device cuda --save",
])
def test_the_check_leaves_relative_paths_and_fractions_alone(text):
    assert not MACHINE_PATH.search(text)
