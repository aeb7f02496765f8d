"""Admission: what a run costs, known before it is stored or started.

    preflight.py   can it be built here: option values, memory, the device, room for its checkpoints
    budget.py      will it fit in memory; how many operations a step, an evaluation, a probe are
    shapes.py      a shape's step: its key, its operations, its seconds timed in this process (the
                   rough time's basis, stability.sweeps.rough_time)

Below :mod:`stability.execution` (a claim checks the room for checkpoints) and everything above it.
Import the modules themselves.
"""
