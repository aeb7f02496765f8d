"""TensorBoard export (stability/runs/export.py), read back with a TFRecord reader of our own and the event
protocol buffers: every stored scalar row comes back at its step and wall time, in float64 (a 1e-164
gradient is not a 0), and the spectrum as one histogram per probe step."""
import math
import struct

import numpy as np
import pytest

from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.runs.export import to_tensorboard
from stability.runs.store import RunNotFound, RunStore
from stability.execution.lifecycle import train_run

pytest.importorskip("tensorboardX")
from tensorboardX.proto.event_pb2 import Event  # noqa: E402


def events(folder):
    """Every Event of the event files under ``folder``: TFRecord framing (length, its CRC, data, its CRC)."""
    found = []
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            payload = data[at + 12: at + 12 + length]
            found.append(Event.FromString(payload))
            at += 12 + length + 4
    return found


def scalars(found):
    rows = []
    for event in found:
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name == "scalars":
                rows.append((event.step, event.wall_time, value.tag, value.tensor.double_val[0]))
    return rows


def test_scalars_are_float64_at_their_steps_and_the_spectrum_is_a_histogram_per_probe(tmp_path):
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run({"cell": {"name": "rnn"}, "task": {"name": "adding"}})
        written = [(0, 100.0, "grad/h0_norm", 1e-164), (0, 100.0, "train/loss", 0.5),
                   (10, 101.5, "grad/h0_norm", 0.0), (10, 101.5, "train/loss", math.nan),
                   (20, 102.0, "sv/max", math.inf)]
        spectrum = {0: [3.0, 1.0, 1e-3], 10: [2.5, 1.2, 1e-5]}
        series = [(step, 100.0 + step, "sv/spectrum", i, value) for step, values in spectrum.items()
                  for i, value in enumerate(values)]
        store.flush(run_id, written, series)
        (folder,) = to_tensorboard(store, [run_id], tmp_path / "tb")
    assert folder == tmp_path / "tb" / f"run-{run_id}"
    found = events(folder)
    read = scalars(found)
    assert len(read) == len(written)
    for (step, wall, tag, value), (r_step, r_wall, r_tag, r_value) in zip(sorted(written, key=str), sorted(read, key=str)):
        assert (r_step, r_tag) == (step, tag) and r_wall == pytest.approx(wall)
        assert (math.isnan(r_value) and math.isnan(value)) or r_value == value  # 1e-164 exactly, not 0
    histograms = {event.step: value.histo for event in found for value in event.summary.value
                  if value.tag == "sv/spectrum" and value.HasField("histo")}
    assert sorted(histograms) == [0, 10]
    for step, values in spectrum.items():
        histo = histograms[step]
        assert (histo.num, histo.min, histo.max) == (len(values), min(values), max(values))
        assert histo.sum == pytest.approx(sum(values))
    assert any(value.tag.startswith("config") for event in found for value in event.summary.value)


def test_a_real_run_exports_every_stored_scalar_row_once(tmp_path):
    config = RunConfig(cell=CellConfig("rnn", 8), task=TaskConfig("adding", {"seq_len": 10}),
                       train=TrainConfig(steps=6, batch_size=8, eval_examples=16, probe_examples=4, log_every=2,
                                         probe_every=2))
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.create_run(config.to_dict())
        train_run(config, store, run_id)
        stored = store.metrics(run_id)
        probes = store.series(run_id, "sv/spectrum")["step"].nunique()
        to_tensorboard(store, [run_id], tmp_path / "tb")
        with pytest.raises(RunNotFound):
            to_tensorboard(store, [run_id + 1], tmp_path / "other")
    assert not (tmp_path / "other").exists()
    found = events(tmp_path / "tb")
    read = sorted((step, tag, value) for step, _, tag, value in scalars(found))
    expected = sorted(zip(stored["step"], stored["name"], stored["value"]))
    assert [r[:2] for r in read] == [e[:2] for e in expected]
    np.testing.assert_array_equal([r[2] for r in read], [e[2] for e in expected])
    assert sum(value.tag == "sv/spectrum" for event in found for value in event.summary.value) == probes > 0
