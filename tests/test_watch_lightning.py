"""stability/watch/lightning.py with a real Lightning Trainer on the CPU: the callback stores the readings
the plain API stores for the same model, seed and batches, and a crash in training_step leaves the run
failed with its rows."""
import pytest
import torch
from torch import nn

import stability.watch as sw
from stability import tasks
from stability.core import metric_names as names

lightning = pytest.importorskip("lightning")
from stability.watch.lightning import StabilityCallback  # noqa: E402

HIDDEN, T, BATCH, STEPS = 5, 6, 4, 5
TIMING = (names.ELAPSED_S, names.STEPS_PER_S, names.ETA_S)


def batches():
    task = tasks.build("adding", seed=0, seq_len=T)
    stream = task.batches("train", BATCH)
    return task, [next(stream) for _ in range(STEPS)]


def network(seed):
    torch.manual_seed(seed)
    return nn.LSTM(2, HIDDEN, batch_first=True), nn.Linear(HIDDEN, 1)


class AddingLSTM(lightning.LightningModule):
    def __init__(self, task, fail_at=None):
        super().__init__()
        self.lstm, self.head = network(0)
        self.task, self.fail_at = task, fail_at

    def training_step(self, batch, index):
        if index == self.fail_at:
            raise RuntimeError("broken batch")
        x, y = batch
        h0 = torch.zeros(1, len(x), HIDDEN, requires_grad=True)
        c0 = torch.zeros(1, len(x), HIDDEN, requires_grad=True)
        self.stability_h0 = (h0, c0)
        out, _ = self.lstm(x, (h0, c0))
        return self.task.loss(self.head(out[:, -1]), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(module, data, callback, tmp_path):
    x, y = (torch.cat(part) for part in zip(*data))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)
    trainer = lightning.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=tmp_path, callbacks=[callback])
    trainer.fit(module, loader)


def readings(store, run_id):
    frame = store.metrics(run_id)
    frame = frame[~frame["name"].isin(TIMING)]
    return frame.set_index(["name", "step"])["value"].sort_index()


def test_the_callback_logs_what_the_api_logs_for_the_same_model_and_seed(store, tmp_path):
    task, data = batches()
    callback = StabilityCallback("lightning", store=store, every=2)
    fit(AddingLSTM(task), data, callback, tmp_path)

    lstm, head = network(0)
    model = nn.ModuleDict({"lstm": lstm, "head": head})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with sw.init("plain", store=store) as run:
        run.watch(model, every=2)
        for x, y in data:
            h0 = torch.zeros(1, len(x), HIDDEN, requires_grad=True)
            c0 = torch.zeros(1, len(x), HIDDEN, requires_grad=True)
            loss = task.loss(head(lstm(x, (h0, c0))[0][:, -1]), y)
            run.step(loss, h0=(h0, c0))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    with_lightning, plain = readings(store, callback.run.id), readings(store, run.id)
    assert store.record(callback.run.id).status == "completed" and store.record(callback.run.id).external
    assert list(with_lightning.index) == list(plain.index) and len(plain) > 50
    torch.testing.assert_close(torch.tensor(with_lightning.values), torch.tensor(plain.values), rtol=1e-6, atol=0)


def test_a_crash_in_training_step_leaves_the_run_failed_with_its_rows(store, tmp_path):
    task, data = batches()
    callback = StabilityCallback(store=store, every=1)
    with pytest.raises(RuntimeError, match="broken batch"):
        fit(AddingLSTM(task, fail_at=3), data, callback, tmp_path)
    record = store.record(callback.run.id)
    assert (record.status, record.error) == ("failed", "RuntimeError: broken batch")
    assert sorted(store.metrics(callback.run.id, names=[names.TRAIN_LOSS])["step"]) == [1, 2, 3]
