"""The watch as a PyTorch Lightning callback (``pip install -e ".[lightning]"``; Lightning is not a
dependency of the base install).

    from stability.watch.lightning import StabilityCallback

    trainer = lightning.Trainer(callbacks=[StabilityCallback(name="my lstm", every=10)])
    trainer.fit(module, loader)

At ``on_fit_start`` it opens an external run (:func:`stability.watch.init`, the same store, config
and name arguments) and watches the LightningModule; before every backward (``on_before_backward``,
which Lightning calls with the loss) it takes one :meth:`~stability.watch.run.Run.step`, with the
initial state and carried states the module left in its attributes ``stability_h0`` and
``stability_states`` during ``training_step`` (optional); ``on_fit_end`` ends the run
``completed``, ``on_exception`` ``failed`` (or ``stopped`` on Ctrl-C) with its rows kept. So the
rows are those the plain API stores for the same model, seed and batches. ``on_store_error`` is
:func:`~stability.watch.init`'s: ``"warn"`` (default: a store that cannot be written is a warning and
``fit`` goes on) or ``"raise"``.
"""
from __future__ import annotations

from collections.abc import Mapping

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    try:
        from pytorch_lightning.callbacks import Callback
    except ImportError:
        raise ImportError("stability.watch.lightning needs PyTorch Lightning: pip install -e \".[lightning]\"") from None

from ..execution.lifecycle import ending
from .readings import Probe
from .run import Run, init


class StabilityCallback(Callback):
    """Log a LightningModule's gradient stability into the run store (module docstring)."""

    def __init__(self, name: str | None = None, *, store=None, config: Mapping | None = None, every: int = 10,
                 probe: Probe | None = None, on_store_error: str = "warn"):
        self.name, self.store, self.config, self.every, self.probe = name, store, config, every, probe
        self.on_store_error = on_store_error
        self.run: Run | None = None

    @property
    def state_key(self) -> str:
        return f"StabilityCallback[{self.name}]"

    def on_fit_start(self, trainer, pl_module) -> None:
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        self.run = init(self.name, store=self.store, config=self.config, total_steps=total,
                        on_store_error=self.on_store_error)
        self.run.watch(pl_module, every=self.every, probe=self.probe)

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if self.run is not None:
            self.run.step(loss, h0=getattr(pl_module, "stability_h0", None),
                          states=getattr(pl_module, "stability_states", None))

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.run is not None:
            self.run.finish("completed")

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if self.run is not None:
            self.run.finish(*ending(exception))  # stopped on Ctrl-C or SIGTERM, else failed
