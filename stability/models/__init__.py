"""The trainable whole: a cell with its readout, and the optimizers that train it.

The cells themselves and their parametrizations are :mod:`stability.cells` and
:mod:`stability.parametrizations`; this room joins a cell to a task's output.
"""
