import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch.set_num_threads(min(2, torch.get_num_threads()))

from stability.core.devices import DEVICE_ENV  # noqa: E402

# Every run whose config says device "auto" trains on the CPU, here and in every subprocess (workers,
# the CLI, Streamlit's app tests), so a GPU machine or a Mac runs the suite as CI does; the tests of a
# device name it (tests/test_devices_smoke.py).
os.environ[DEVICE_ENV] = "cpu"
# No warm worker (stability/workers/warm.py) in a test's server or page unless the test asks for one
# (tests/test_warm_worker.py): an idle one is a process that imports torch beside the tests.
os.environ["STABILITY_WARM_WORKERS"] = "0"


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


def _gradcheck_through_parameters(cell, x, h0):
    """torch.autograd.gradcheck of the cell's outputs w.r.t. x, h0 and every parameter."""
    from torch.func import functional_call

    names = [name for name, _ in cell.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in cell.parameters())

    def outputs(x, h0, *values):
        return functional_call(cell, dict(zip(names, values)), (x, h0))[0]

    return torch.autograd.gradcheck(outputs, (x, h0, *params))


@pytest.fixture
def gradcheck_through_parameters():
    return _gradcheck_through_parameters


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh run store, also made the default ($STABILITY_STORE) for pages and workers."""
    from stability.runs.store import RunStore

    path = tmp_path / "runs.db"
    monkeypatch.setenv("STABILITY_STORE", str(path))
    with RunStore(path) as opened:
        yield opened


# ------------------------------------------------------------------ PostgreSQL (tests/postgres.py)
@pytest.fixture(scope="session")
def postgres_cluster(tmp_path_factory):
    """A throwaway PostgreSQL server for the whole session, started on first use and removed at the
    end; where the binaries are missing the test skips with the reason, a failure when
    STABILITY_REQUIRE_POSTGRES=1 (set by .ci/run)."""
    from postgres import REQUIRE_ENV, Cluster, ClusterUnavailable

    try:
        cluster = Cluster.start()
    except ClusterUnavailable as reason:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"PostgreSQL tests required ({REQUIRE_ENV}=1) but {reason}")
        pytest.skip(str(reason))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster):
    """A fresh, empty PostgreSQL database's URL (postgresql+psycopg://...), dropped after the test."""
    url = postgres_cluster.new_database()
    yield url
    postgres_cluster.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request, tmp_path):
    """Where a store test's store lives: an SQLite file in the test's folder, or a fresh PostgreSQL
    database (the store's whole suite runs against both)."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    return request.getfixturevalue("postgres_url")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that fails carries what its server saw (tests/browsers.py: what_the_server_saw)."""
    outcome = yield
    report = outcome.get_result()
    url = getattr(item, "funcargs", {}).get("server") or getattr(item, "funcargs", {}).get("lab")
    url = url.get("url") if isinstance(url, dict) else url
    if report.when == "call" and report.failed and isinstance(url, str):
        from browsers import what_the_server_saw

        report.sections.append(("what the server saw", what_the_server_saw(url)))
