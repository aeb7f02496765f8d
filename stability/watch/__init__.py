"""Watch your own model: a run logged from your own PyTorch loop into the store the dashboard reads.

    import stability.watch as sw

    with sw.init(name="my lstm", config={"lr": 1e-3}) as run:
        run.watch(model, every=10)
        for step, (x, y) in enumerate(batches):
            h0 = torch.zeros(1, len(x), 64, requires_grad=True)
            loss = loss_fn(model(x, h0)[0], y)
            run.step(loss, h0=h0)          # before backward: the step's readings
            loss.backward(); optimizer.step(); optimizer.zero_grad()

``run.py``: :func:`init` and :class:`Run` (the run, its rows, its end); ``units.py``: which matrices
of a model are watched (nn.RNN/LSTM/GRU, our cells, the ``recurrent_matrices()`` protocol);
``gates.py``: an nn.LSTM's or nn.GRU's gate statistics; ``readings.py``: the readings of a logged
step and the float64 :class:`Probe`; ``lightning.py``: the same as a PyTorch Lightning callback
(``pip install -e ".[lightning]"``).
"""
from __future__ import annotations

from .readings import Probe, Watcher
from .run import Run, StoreWarning, init
from .units import recurrent_units

__all__ = ["init", "Run", "Probe", "Watcher", "StoreWarning", "recurrent_units"]
