"""Runs as files other tools read: TensorBoard event files (the CSV export is ``RunStore.export_csv``).

    paths = to_tensorboard(store, [3, 4], "tb")     # tb/run-3/, tb/run-4/: one event file each
    # then: tensorboard --logdir tb
    with csv_output("run-3.csv", store) as file:    # FileExistsError: it exists (force=True overwrites)
        store.export_csv(3, file)                   # never the store's own file, whatever the path says

Note [Exporting over files]
---------------------------
An export writes where it is told, so it checks first: ``-o FILE`` refuses a file that exists unless
``--force`` (created with ``O_EXCL``: no race between looking and writing), and never writes over the
store (its file, ``-wal``, ``-shm``), even with ``--force``, whatever path names it: a link, ``..``, a
hard link (compared by device and inode, not by name).  TensorBoard draws every event file of a run's
folder, so a second ``--tensorboard DIR`` of the same run would add a second file and draw every point
twice: an export into a run folder that already holds event files is refused (its files may be someone
else's, a training run's own SummaryWriter), and ``--force`` replaces them (only the
``events.out.tfevents.*`` files of that folder are removed; the stored rows are the whole run).  A run
named twice in one export is written once.

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
import os
from pathlib import Path

from ..core.metric_names import SPECTRUM

SCALARS_PLUGIN = "scalars"


EVENT_FILES = "events.out.tfevents.*"


def csv_output(path, store, force: bool = False):
    """``path`` opened for a CSV export (text, ``newline=""``): FileExistsError (one line) when it exists
    and not ``force``; never one of the store's own files (Note [Exporting over files])."""
    path = Path(path)
    if _is_store_file(path, store):
        raise FileExistsError(f"{path} is the run store {store.location} itself; export to another file")
    try:
        return open(path, "w" if force else "x", newline="")
    except FileExistsError:
        raise FileExistsError(f"{path} exists; pass --force to overwrite it") from None


def _is_store_file(path: Path, store) -> bool:
    """Whether ``path`` (followed through links) is the store's database file, or its WAL or shared memory."""
    if store.path is None:  # a server database: no file here
        return False
    try:
        target = os.stat(path)
    except OSError:
        return False
    for name in (str(store.path), f"{store.path}-wal", f"{store.path}-shm", f"{store.path}-journal"):
        try:
            own = os.stat(name)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def to_tensorboard(store, run_ids, folder, replace: bool = False) -> list[Path]:
    """Write each run of ``run_ids`` as TensorBoard event files under ``folder/run-<id>``; return
    the folders (one per id given; a run named twice is written once).  A run id that is not in the
    store is :class:`stability.runs.store.RunNotFound`, and a run folder holding event files already
    FileExistsError unless ``replace``, which removes them (Note [Exporting over files]): both before
    anything is written."""
    from tensorboardX import SummaryWriter

    run_ids = [int(run_id) for run_id in run_ids]
    records = {run_id: store.record(run_id) for run_id in dict.fromkeys(run_ids)}  # RunNotFound first
    folder = Path(folder)
    earlier = {run_id: sorted((folder / f"run-{run_id}").glob(EVENT_FILES)) for run_id in records}
    taken = [str(folder / f"run-{run_id}") for run_id, files in earlier.items() if files]
    if taken and not replace:
        raise FileExistsError(f"{', '.join(taken)} already hold{'s' * (len(taken) == 1)} TensorBoard event files, "
                              "which TensorBoard would draw beside the new ones (every point twice); "
                              "pass --force to replace them")
    for files in earlier.values():
        for path in files:
            path.unlink()
    for record in records.values():
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
    return [folder / f"run-{run_id}" for run_id in run_ids]


def double_scalar(tag: str, value: float):
    """A ``Summary`` holding one float64 scalar for TensorBoard's scalars plugin (Note [Scalars in float64])."""
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboardX.proto.tensor_pb2 import TensorProto
    from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboardX.proto.types_pb2 import DT_DOUBLE

    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=SCALARS_PLUGIN))
    tensor = TensorProto(dtype=DT_DOUBLE, tensor_shape=TensorShapeProto(), double_val=[float(value)])
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata, tensor=tensor)])
