"""The project as a package (pyproject.toml, requirements.txt) and the server's safe defaults
(.streamlit/config.toml).

The wheel is built from a copy of the checkout, so the tree under test gets no build/ or
*.egg-info; it is installed with ``pip install --target`` into a temporary folder, never
into the environment running the tests.
"""

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["pyproject.toml", "requirements.txt", "README.md", "app.py", "stability", "pages", "tests", "benchmarks"]
TORCH_PIN = "torch==2.13.0"


def requirement_lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]


def run(command: list[str], cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(map(str, command))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def pip(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    # no build isolation where setuptools is here already: nothing is fetched from an index
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return run([sys.executable, "-m", "pip", *arguments, *isolation, "-q"], cwd=cwd, env=env)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of the checkout's files, tests/ and pages/ included (the wheel must leave them out)."""
    copy = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, copy / name, ignore=ignore)
        elif (ROOT / name).exists():
            shutil.copy2(ROOT / name, copy / name)
    return copy


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    pip("wheel", str(source), "--no-deps", "-w", str(out), cwd=out)
    (built,) = out.glob("stability-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed (without its dependencies, which this environment has) into a folder of its own."""
    target = tmp_path_factory.mktemp("site")
    pip("install", "--no-deps", "--no-index", "--target", str(target), str(wheel), cwd=target)
    return target


def away_from_the_checkout(installed: Path, tmp_path: Path) -> tuple[Path, dict]:
    """A working directory outside the checkout and an environment that sees the package only where it was installed."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = str(installed)
    env["STABILITY_STORE"] = str(tmp_path / "runs.db")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return elsewhere, env


# --- the package ----------------------------------------------------------------------------


def test_the_wheel_holds_the_engine_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"stability", wheel.name.split("-py3")[0] + ".dist-info"}, top
    engine = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "stability").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert "stability/cli/main.py" in engine and "stability/tasks/download.py" in engine
    assert engine <= set(names), sorted(engine - set(names))  # every module and data file ships


def test_the_dependencies_are_declared_once_with_the_torch_pin(wheel):
    requirements = requirement_lines(ROOT / "requirements.txt")
    assert TORCH_PIN in requirements
    assert not [line for line in requirements if line.startswith("-")], "setuptools reads plain requirement lines only"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["dependencies"]' in pyproject and 'file = ["requirements.txt"]' in pyproject
    with zipfile.ZipFile(wheel) as bundle:
        (name,) = [name for name in bundle.namelist() if name.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(bundle.read(name).decode())
    requires = metadata.get_all("Requires-Dist")
    runtime = [line for line in requires if "extra ==" not in line]
    assert runtime == requirements
    assert {line.split(";")[0].strip() for line in requires if 'extra == "test"' in line} == {
        "pytest>=8", "pytest-xdist>=3.5", "playwright>=1.45", "lightning>=2.1", "Authlib>=1.3.2", "httpx>=0.24.1"}
    assert {line.split(";")[0].strip() for line in requires if 'extra == "lightning"' in line} == {"lightning>=2.1"}
    assert {line.split(";")[0].strip() for line in requires if 'extra == "auth"' in line} == {
        "Authlib>=1.3.2", "httpx>=0.24.1"}  # st.login's (tests/test_browser_login.py signs in through it)
    assert metadata["Name"] == "stability" and metadata["Requires-Python"] == ">=3.10"


def test_the_console_script_and_the_worker_run_from_any_directory(wheel, installed, tmp_path):
    with zipfile.ZipFile(wheel) as bundle:
        (name,) = [name for name in bundle.namelist() if name.endswith(".dist-info/entry_points.txt")]
        assert "stability = stability.cli.main:main" in bundle.read(name).decode().splitlines()
    elsewhere, env = away_from_the_checkout(installed, tmp_path)
    where = run([sys.executable, "-c", "import stability; print(stability.__file__)"], cwd=elsewhere, env=env)
    assert Path(where.stdout.strip()).is_relative_to(installed)  # not the checkout's copy
    script = installed / "bin" / "stability"
    assert script.exists() and os.access(script, os.X_OK)
    assert "train" in run([str(script), "--help"], cwd=elsewhere, env=env).stdout  # = python -m stability --help
    # what stability/workers/processes.py launches for a background run (WORKER_MODULE)
    assert "--worker" in run([sys.executable, "-m", "stability.cli.worker", "--help"], cwd=elsewhere, env=env).stdout


def test_an_editable_install_builds(source, tmp_path):
    """``pip install -e .`` (PEP 660), built without touching this environment."""
    script = (
        "import sys; from setuptools import build_meta; "
        "print(build_meta.build_editable(sys.argv[1]))"
    )
    name = run([sys.executable, "-c", script, str(tmp_path)], cwd=source).stdout.strip().splitlines()[-1]
    files = zipfile.ZipFile(tmp_path / name).namelist()
    assert any(file.endswith(".pth") for file in files), files
    assert any(file.endswith("entry_points.txt") for file in files)


# --- the server -----------------------------------------------------------------------------


def streamlit_config() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())


def test_the_server_config_is_localhost_only_without_usage_statistics():
    config = streamlit_config()
    assert config["server"]["address"] in {"127.0.0.1", "localhost"}
    assert config["browser"]["gatherUsageStats"] is False


def streamlit_env(tmp_path: Path) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith("STREAMLIT_")}
    env.update(STABILITY_STORE=str(tmp_path / "runs.db"), HOME=str(tmp_path))  # no ~/.streamlit of the user's
    return env


def test_the_documented_switch_opens_the_server(tmp_path):
    show = [sys.executable, "-m", "streamlit", "config", "show"]
    opened = run([*show, "--server.address", "0.0.0.0"], cwd=ROOT, env=streamlit_env(tmp_path), timeout=60).stdout
    assert '\naddress = "0.0.0.0"\n' in opened


def listening(port: int) -> list[str]:
    """Local addresses of the TCP sockets listening on ``port``, from /proc/net/tcp and tcp6."""
    addresses = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, _, state = line.split()[1:4]
            address, local_port = local.split(":")
            if state != "0A" or int(local_port, 16) != port:  # 0A: LISTEN
                continue
            # each 32-bit word in host (little-endian) order
            raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, len(address), 8))
            addresses.append(socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw))
    return addresses


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc/net/tcp")
def test_streamlit_run_listens_on_loopback_only(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "server.log"
    with open(log, "wb") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.headless", "true"],  # no --server.address: .streamlit/config.toml decides
            cwd=ROOT, env=streamlit_env(tmp_path), stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not listening(port):
            assert server.poll() is None, f"streamlit exited:\n{log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"streamlit did not listen:\n{log.read_text()[-2000:]}"
            time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=10) as response:
            assert response.read() == b"ok"
        addresses = listening(port)
        assert "127.0.0.1" in addresses and "0.0.0.0" not in addresses and "::" not in addresses, addresses
        assert all(address in {"127.0.0.1", "::1"} for address in addresses), addresses
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
