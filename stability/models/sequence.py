"""A recurrent cell with its readout: the model every run trains.

    model = SequenceModel(cell, output_size=1, target_mode="last")
    pred, h_last = model(x, h0)                          # x (B, T, input_size)
    optimizer = build_optimizer(parameter_groups(model, lr), "adam", lr)

The readout is linear, per step (``target_mode="every"``: language models,
copy) or from the last step (``"last"``: adding, MNIST), as in every paper's
experiments.
"""
from __future__ import annotations

from torch import nn


class SequenceModel(nn.Module):
    """A cell and a linear readout: per step ("every") or from the last step ("last")."""

    def __init__(self, cell: nn.Module, output_size: int, target_mode: str):
        super().__init__()
        self.cell = cell
        self.readout = nn.Linear(cell.output_size, output_size)
        self.target_mode = target_mode

    def forward(self, x, h0=None, state_probe=None):
        outputs, h_last = self.cell(x, h0, state_probe)  # (B, T, F)
        if self.target_mode == "last":
            outputs = outputs[:, -1]
        return self.readout(outputs), h_last


def parameter_groups(model: SequenceModel, lr: float) -> list[dict]:
    """The trainable parameters in optimizer groups: the cell's ``recurrent_parameters()`` at
    ``lr * cell.recurrent_lr_scale``, everything else at ``lr``; each group keeps its ``lr_scale``."""
    recurrent = {id(p) for p in model.cell.recurrent_parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    scale = float(getattr(model.cell, "recurrent_lr_scale", 1.0))
    groups = [{"params": [p for p in trainable if id(p) not in recurrent], "lr_scale": 1.0},
              {"params": [p for p in trainable if id(p) in recurrent], "lr_scale": scale}]
    return [{**group, "lr": lr * group["lr_scale"]} for group in groups if group["params"]]
