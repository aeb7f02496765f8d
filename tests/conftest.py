import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch.set_num_threads(min(2, torch.get_num_threads()))


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
    from stability.store import RunStore

    path = tmp_path / "runs.db"
    monkeypatch.setenv("STABILITY_STORE", str(path))
    with RunStore(path) as opened:
        yield opened
