"""Runs as files other tools read: TensorBoard event files (the CSV export is ``RunStore.export_csv``).

    paths = to_tensorboard(store, [3, 4], "tb")     # tb/run-3/, tb/run-4/: one event file each
    # then: tensorboard --logdir tb

Each run gets a folder ``run-<id>`` (TensorBoard lists it as one run) holding every scalar metric row
(``train/loss``, ``grad/h0_norm``, ``sv/max``, ...) at its step and wall time, the singular-value
spectrum (``sv/spectrum``, logged at probe steps) as a histogram per probe step, and the run's config
as text.  Written with tensorboardX's ``SummaryWriter`` (its event-file writer and protocol buffers).

Note [Scalars in float64]
-------------------------
TensorBoard's classic scalar (``Summary.Value.simple_value``, what ``add_scalar`` writes) is a float32:
every value below ~1e-38 would reach TensorBoard as 0, and ``grad/h0_norm`` of a tanh RNN at T = 1000
is ~1e-164 (docs/readings.md).  So each scalar is written as TensorBoard's newer form, a 0-d tensor
with the scalars plugin's metadata, in float64 (``DT_DOUBLE``): the value in the file is the stored
value, bit for bit, NaN and infinities included.  A histogram's bucket limits are float64 already.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..core.metric_names import SPECTRUM

SCALARS_PLUGIN = "scalars"


def to_tensorboard(store, run_ids, folder) -> list[Path]:
    """Write each run of ``run_ids`` as TensorBoard event files under ``folder/run-<id>``; return
    the folders.  A run id that is not in the store is :class:`stability.runs.store.RunNotFound`
    (before anything is written)."""
    from tensorboardX import SummaryWriter

    run_ids = [int(run_id) for run_id in run_ids]
    records = [store.record(run_id) for run_id in run_ids]  # RunNotFound before any file exists
    folder = Path(folder)
    written = []
    for record in records:
        logdir = folder / f"run-{record.id}"
        metrics = store.metrics(record.id)
        spectrum = store.series(record.id, SPECTRUM)
        with SummaryWriter(str(logdir), flush_secs=3600) as writer:
            writer.add_text("config", "```json\n" + json.dumps(dict(record.raw_config), indent=2) + "\n```", 0,
                            walltime=record.created_at)
            for row in metrics.itertuples(index=False):
                writer.file_writer.add_summary(double_scalar(row.name, row.value), int(row.step), float(row.wall_time))
            for step, rows in spectrum.groupby("step", sort=True):
                values = rows["value"].to_numpy()
                values = values[[math.isfinite(value) for value in values]]
                if len(values):
                    writer.add_histogram(SPECTRUM, values, int(step), walltime=float(rows["wall_time"].iat[0]))
        written.append(logdir)
    return written


def double_scalar(tag: str, value: float):
    """A ``Summary`` holding one float64 scalar for TensorBoard's scalars plugin (Note [Scalars in float64])."""
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboardX.proto.tensor_pb2 import TensorProto
    from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboardX.proto.types_pb2 import DT_DOUBLE

    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=SCALARS_PLUGIN))
    tensor = TensorProto(dtype=DT_DOUBLE, tensor_shape=TensorShapeProto(), double_val=[float(value)])
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata, tensor=tensor)])
