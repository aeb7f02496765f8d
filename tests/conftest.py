import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh run store, also made the default ($STABILITY_STORE) for pages and workers."""
    from stability.store import RunStore

    path = tmp_path / "runs.db"
    monkeypatch.setenv("STABILITY_STORE", str(path))
    with RunStore(path) as opened:
        yield opened
