"""The synthetic stand-ins for MNIST and HAR-2 (``data = "standin" | "auto"``); nothing is downloaded."""

import dataclasses
import gzip

import numpy as np
import pytest
import torch

from stability.cli.main import main
from stability.config import CellConfig, RunConfig, TaskConfig, TrainConfig
from stability.tasks import DatasetUnavailable, build, check, describe, har, mnist, standin
from stability.execution.lifecycle import train_run
from stability.tasks.download import md5sum

MNIST_FAMILY = ("mnist", "permuted_mnist", "mnist_rows")


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("STABILITY_OFFLINE", "1")
    monkeypatch.setenv("STABILITY_DATA", str(tmp_path / "empty"))


def first(task, split, size):
    return next(task.batches(split, size))


# ------------------------------------------------------------------------- shapes, splits, classes
@pytest.mark.parametrize("name, shape", [("mnist", (784, 1)), ("permuted_mnist", (784, 1)), ("mnist_rows", (28, 28))])
def test_mnist_standin_has_the_real_shapes_splits_and_classes(name, shape):
    task = build(name, seed=0, data="standin")
    assert (task.seq_len, task.input_size, task.output_size) == (*shape, 10)
    assert [task.split_size(split) for split in ("train", "val", "test")] == [55_000, 5_000, 10_000]
    x, y = first(task, "test", 64)
    assert x.shape == (64, *shape) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert 0.0 <= x.min() and x.max() <= 1.0
    # like MNIST: most pixels are exactly zero, a digit's ink covers roughly a tenth to a quarter
    assert 0.5 < (x == 0).float().mean() < 0.92
    assert 0.04 < x.mean() < 0.25
    for split in ("train", "test"):
        labels = task.splits[split]["labels"]
        counts = np.bincount(labels, minlength=10)
        assert counts.min() >= 0.9 * counts.max()  # balanced (the val draw shifts train by a little)
    assert np.bincount(mnist.standin_mnist(0)["train_labels"]).tolist() == [6000] * 10
    assert "SYNTHETIC STAND-IN" in task.baseline_label and "MNIST" in task.baseline_label
    assert "SYNTHETIC STAND-IN" in task.description


def test_har2_standin_has_the_real_shapes_splits_and_classes():
    task = build("har2", seed=0, data="standin")
    assert (task.seq_len, task.input_size, task.output_size) == (128, 9, 2)
    assert [task.split_size(split) for split in ("train", "val", "test")] == [5882, 1470, 2947]
    x, y = first(task, "test", 100)
    assert x.shape == (100, 128, 9) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert set(y.tolist()) == {0, 1}
    for split in ("train", "val", "test"):
        counts = np.bincount(task.splits[split]["labels"], minlength=2)
        assert abs(counts[0] - counts[1]) <= 0.05 * counts.sum()
    # the six activities merge into HAR-2's classes as the real files do: even activity ids are class 1
    arrays = task.splits["train"]
    assert np.array_equal(arrays["labels"], np.isin(arrays["activities"], [2, 4, 6]))
    full = har.standin_split(0, 0, 7352, np.random.default_rng(0))["activities"]
    assert np.bincount(full)[1:].max() - np.bincount(full)[1:].min() <= 1
    # z-scored by training statistics (from a sample): the training windows are near mean 0, std 1
    train_x, _ = first(task, "train", 512)
    assert train_x.mean(dim=(0, 1)).abs().max() < 0.15
    assert ((train_x.std(dim=(0, 1)) - 1).abs() < 0.2).all()
    assert "SYNTHETIC STAND-IN" in task.baseline_label and "HAR-2" in task.baseline_label


def test_the_har_standin_is_physical_total_acceleration_is_body_plus_gravity():
    activities = np.array([1, 4, 5, 6])
    raw = standin.har_windows(3, np.arange(4), activities)
    total, body = raw[..., 6:9], raw[..., 0:3]
    gravity = np.linalg.norm((total - body).mean(axis=1), axis=-1)
    np.testing.assert_allclose(gravity, 1.0, atol=0.02)  # |g| = 1 in the phone's frame, in units of g
    still = np.abs(body[1:]).mean()
    assert np.abs(body[0]).mean() > 3 * still  # walking shakes the phone, sitting hardly


# ------------------------------------------------------------------------- determinism and seeds
@pytest.mark.parametrize("name", [*MNIST_FAMILY, "har2"])
def test_a_standin_is_the_same_for_a_seed_and_differs_between_seeds(name):
    a, b = build(name, seed=4, data="standin"), build(name, seed=4, data="standin")
    other = build(name, seed=5, data="standin")
    for split in ("train", "val", "test"):
        xa, ya = first(a, split, 16)
        xb, yb = first(b, split, 16)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    xo, _ = first(other, "test", 16)
    assert not torch.equal(first(a, "test", 16)[0], xo)


def test_an_image_does_not_depend_on_the_batch_it_is_rendered_in():
    ids, labels = np.arange(100, 140), np.arange(40) % 10
    together = standin.render_digits(2, ids, labels)
    alone = np.concatenate([standin.render_digits(2, ids[i : i + 1], labels[i : i + 1]) for i in range(40)])
    assert np.array_equal(together, alone)
    assert not np.array_equal(together, standin.render_digits(3, ids, labels))


def test_uniforms_are_uniform_and_independent_of_the_other_ids():
    u = standin.uniforms(0, 1, np.arange(2000), 50)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.06
    np.testing.assert_array_equal(standin.uniforms(0, 1, np.array([1999, 7]), 50), u[[1999, 7]])


def test_permuted_standin_permutes_the_plain_standin():
    plain = first(build("mnist", seed=1, data="standin"), "test", 8)[0][..., 0]
    task = build("permuted_mnist", seed=1, data="standin")
    assert torch.equal(first(task, "test", 8)[0][..., 0], plain[:, task.permutation])


# ------------------------------------------------------------------------------------ "auto"
def write_idx(folder, train=30, test=10):
    generator = np.random.default_rng(0)
    arrays = {"train_images": generator.integers(0, 256, (train, 28, 28)),
              "train_labels": generator.integers(0, 10, train),
              "test_images": generator.integers(0, 256, (test, 28, 28)),
              "test_labels": generator.integers(0, 10, test)}
    folder.mkdir(parents=True)
    for key, (filename, _) in mnist.FILES.items():
        array = arrays[key].astype(np.uint8)
        header = bytes([0, 0, 0x08, array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape)
        (folder / filename).write_bytes(gzip.compress(header + array.tobytes()))
    return arrays


def test_auto_reads_the_real_mnist_files_when_they_are_cached(tmp_path, monkeypatch):
    arrays = write_idx(tmp_path / "mnist")
    trusted = {key: dataclasses.replace(remote, md5=md5sum(tmp_path / "mnist" / remote.filename))
               for key, remote in mnist.REMOTES.items()}  # the small files' MD5s: the check still runs
    monkeypatch.setattr(mnist, "REMOTES", trusted)
    task = build("mnist_rows", data_dir=tmp_path, data="auto", val_size=5)
    assert not task.standin and task.split_size("test") == 10 and "STAND-IN" not in task.baseline_label
    x, _ = first(task, "test", 10)
    torch.testing.assert_close(x, torch.from_numpy(arrays["test_images"] / 255.0).float())
    # train_size and test_size keep seeded subsets, on the real files as on the stand-in
    small = build("mnist_rows", data_dir=tmp_path, data="real", val_size=5, train_size=7, test_size=4)
    assert [small.split_size(split) for split in ("train", "val", "test")] == [7, 5, 4]
    test_rows = {bytes(row) for row in arrays["test_images"].reshape(10, 784).astype(np.uint8)}
    assert {bytes(row) for row in small.splits["test"]["images"]} < test_rows
    assert np.array_equal(small.splits["val"]["images"], task.splits["val"]["images"])
    tiny = build("mnist", data="standin", val_size=32, test_size=32)
    assert [tiny.split_size(split) for split in ("train", "val", "test")] == [59_968, 32, 32]
    # the same cache without the files: auto falls back to the stand-in, real refuses in one line
    empty = tmp_path / "nothing"
    assert build("mnist_rows", data_dir=empty, data="auto").standin
    with pytest.raises(DatasetUnavailable) as error:
        build("mnist_rows", data_dir=empty, data="real")
    assert "\n" not in str(error.value)


def test_auto_reads_the_real_har_files_when_they_are_cached(tmp_path):
    generator = np.random.default_rng(0)
    for split, count in (("train", 20), ("test", 8)):
        signals = generator.normal(size=(count, 128, 9))
        for channel, name in enumerate(har.needed_files(split)[:-1]):
            path = tmp_path / "har" / har.FOLDER / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(" ".join(f"{v:.7e}" for v in row) for row in signals[..., channel]) + "\n")
        (tmp_path / "har" / har.FOLDER / f"{split}/y_{split}.txt").write_text(
            "\n".join(map(str, generator.integers(1, 7, count))) + "\n")
    task = build("har2", data_dir=tmp_path, data="auto", val_fraction=0.25)
    assert not task.standin and task.split_size("test") == 8 and task.split_size("train") == 15
    fallback = build("har2", data_dir=tmp_path / "nothing", data="auto")
    assert fallback.standin and fallback.split_size("test") == 2947
    # train_size keeps a seeded subset of the training windows, on the real files as on the stand-in
    small = build("har2", data_dir=tmp_path, data="real", val_fraction=0.25, train_size=5)
    kept = small.splits["train"]["signals"]
    assert len(kept) == 5 and all(any(np.array_equal(w, v) for v in task.splits["train"]["signals"]) for w in kept)
    assert np.array_equal(small.splits["val"]["signals"], task.splits["val"]["signals"])


def test_har_train_size_is_a_seeded_subset_of_the_standin_training_windows():
    full, small = build("har2", seed=2, data="standin"), build("har2", seed=2, data="standin", train_size=300)
    assert small.split_size("train") == 300 and small.split_size("val") == full.split_size("val")
    assert set(small.splits["train"]["ids"]) < set(full.splits["train"]["ids"])
    again = build("har2", seed=2, data="standin", train_size=300)
    assert np.array_equal(again.splits["train"]["ids"], small.splits["train"]["ids"])
    with pytest.raises(ValueError, match="train_size must be an integer >= 1, got 0"):
        build("har2", data="standin", train_size=0)
    assert build("har2", seed=2, data="standin", test_size=40).split_size("test") == 40


def test_the_data_option_is_described_checked_and_refused_in_one_line():
    for name in (*MNIST_FAMILY, "har2"):
        option = describe(name).option("data")
        assert option.default == "real" and tuple(option.choices) == ("real", "standin", "auto")
        assert check(name, data="standin") is not None  # a stand-in builds for free: the check builds it
        with pytest.raises(ValueError, match="data must be one of 'real', 'standin', 'auto', got 'fake'"):
            build(name, data="fake")


# ------------------------------------------------------------------------------- a run says so
def test_a_run_on_the_standin_says_so_in_the_store_and_in_show(store, capsys):
    config = RunConfig(cell=CellConfig("rnn", 8),
                       task=TaskConfig("har2", {"data": "auto", "train_size": 40, "test_size": 16}),
                       train=TrainConfig(steps=2, batch_size=8, eval_examples=16, probe_examples=4))
    run_id = store.create_run(config.to_dict())
    assert train_run(config, store, run_id).status == "completed"
    assert "SYNTHETIC STAND-IN data, not the real HAR-2" in store.record(run_id).baseline_label
    assert main(["show", str(run_id), "--store", str(store.path)]) == 0
    shown = capsys.readouterr().out
    assert "SYNTHETIC STAND-IN" in shown and '"data": "auto"' in shown


# ------------------------------------------------------------------------------------ learnable
def learn(task, hidden, steps, batch=32, lr=1e-2):
    """Validation accuracy of a small GRU after ``steps`` Adam steps on ``task``'s training stream."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a GRU this small is many times slower on two threads of a shared machine
    try:
        return _learn(task, hidden, steps, batch, lr)
    finally:
        torch.set_num_threads(threads)


def _learn(task, hidden, steps, batch, lr):
    torch.manual_seed(0)
    gru, head = torch.nn.GRU(task.input_size, hidden, batch_first=True), torch.nn.Linear(hidden, task.output_size)
    optimizer = torch.optim.Adam([*gru.parameters(), *head.parameters()], lr=lr)
    for _, (x, y) in zip(range(steps), task.batches("train", batch)):
        loss = task.loss(head(gru(x)[0][:, -1]), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        x, y = first(task, "val", 500)
        return task.score(head(gru(x)[0][:, -1]), y)


def test_a_small_gru_learns_the_mnist_standin_above_chance():
    assert learn(build("mnist_rows", seed=0, data="standin"), hidden=32, steps=60) > 0.3  # chance: 0.1


def test_a_small_gru_learns_the_har_standin_above_chance():
    assert learn(build("har2", seed=0, data="standin"), hidden=16, steps=40) > 0.65  # chance: 0.5
