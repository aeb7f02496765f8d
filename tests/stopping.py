"""A hook the tests share: a run stopped at a known step, as a stop request would stop it."""
from stability.training import hooks


class StopAt(hooks.Hook):
    """Ends the run as 'stopped' after ``step``, as a stop request would, but at a known step."""

    def __init__(self, step):
        self.step = step

    def on_step(self, trainer, result):
        if result.step == self.step:
            trainer.stop("stopped")
