"""MNIST read as a sequence: pixel by pixel, permuted, or row by row.

The four IDX files (LeCun et al.) with their well-known MD5s. The standard
60k/10k split; ``val_size`` training images (5000, as the KRU paper §4.3)
are held out as a seeded validation set. Pixels are read in row-major order,
``pixels_per_step`` at a time: 1 gives the 784-step pixel MNIST of the
spectral paper §7.2 (Table 2) and KRU §4.3, 2 the 392 steps of the spectral
paper's Fig. 3(a), 7 and 28 the 112 and 28 layers of the ICLR 2018 review
version's Fig. 2. ``permuted_mnist`` applies one fixed pixel permutation,
drawn from ``permutation_seed`` (not the run seed, so that every run sees the
same task), before reading. ``pixels_per_step = 784`` gives the flattened
image as one step, what the deep ``mlp`` cell reads (spectral paper §5, §7.2,
Fig. 5).

``data`` picks what the images are: ``"real"`` (the default) the IDX files
below; ``"standin"`` a seeded synthetic stand-in with MNIST's shapes, classes
and split sizes (digits drawn as random pen strokes,
:mod:`stability.tasks.standin`), nothing downloaded; ``"auto"`` the real
files when all four are in the cache, else the stand-in. A run on the
stand-in says so in its baseline's label. ``train_size`` and ``test_size``
keep a seeded subset of the training (after the validation images are held
out) and test images, on either data: a small test set keeps a tiny run's
final evaluation short.

IDX layout: a big-endian header ``00 00 <dtype> <ndim>``, ``ndim``
big-endian uint32 sizes, then the data; images are ``0x08`` (uint8) with
3 dimensions (N, 28, 28), labels uint8 with 1 dimension (N,).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import torch

from .standin import DATA_CHOICES, DATA_HELP, LazyImages, balanced_labels, label as standin_label
from ..core.errors import check_choice
from .base import Arrays, Batch, StoredTask, check_count, majority_baseline, rng, split_off
from .download import DatasetUnavailable, Progress, data_root, fetch, mirrored

PIXELS = 28 * 28
TRAIN_COUNT, TEST_COUNT = 60_000, 10_000
STANDIN_SAMPLE = 512  # stand-in training images the pixel statistics of normalize="standard" come from
MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)  # https only (download.check_secure): yann.lecun.com, the original, serves plain http and is left out
FILES = {
    "train_images": ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
    "train_labels": ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
    "test_images": ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
    "test_labels": ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"),
}
REMOTES = mirrored(FILES, MIRRORS)
STANDIN_NOTE = (
    "This run uses the SYNTHETIC STAND-IN (data = standin or auto without the files): digits drawn "
    "as random pen strokes with MNIST's shapes, classes and split sizes, not the real MNIST; its "
    "numbers say how the models behave on a task of the same shape, not what the papers measured."
)


def read_idx(path: Path) -> np.ndarray:
    """The array stored in a gzipped IDX file (uint8 data only, as MNIST has)."""
    with gzip.open(path, "rb") as stream:
        data = stream.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DatasetUnavailable(f"{path} is not a uint8 IDX file: delete it and build again.")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    offset = 4 + 4 * ndim
    if len(data) - offset != int(np.prod(shape)):
        raise DatasetUnavailable(f"{path} holds {len(data) - offset} bytes of data, not {shape}.")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(shape).copy()


def load_mnist(
    data_dir: str | os.PathLike | None, download: bool, progress: Progress | None
) -> dict[str, np.ndarray]:
    """``{"train_images": (60000, 784) uint8, "train_labels": (60000,) int64, "test_...": ...}``."""
    folder = data_root(data_dir) / "mnist"
    arrays = {
        key: read_idx(fetch(remote, folder, download=download, progress=progress))
        for key, remote in REMOTES.items()
    }
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or images.shape[1:] != (28, 28) or labels.shape != images.shape[:1]:
            raise DatasetUnavailable(
                f"MNIST {split} files disagree: images {images.shape}, labels {labels.shape}."
            )
        arrays[f"{split}_images"] = images.reshape(len(images), PIXELS)
        arrays[f"{split}_labels"] = labels.astype(np.int64)
    return arrays


def mnist_cached(data_dir: str | os.PathLike | None) -> bool:
    """True when all four MNIST files are in the cache (what ``data = "auto"`` asks before loading)."""
    folder = data_root(data_dir) / "mnist"
    return all((folder / remote.filename).exists() for remote in REMOTES.values())


def standin_mnist(seed: int) -> dict[str, np.ndarray]:
    """The stand-in's splits in compact form: example ids and balanced labels, 60,000 + 10,000.

    The images are rendered from the ids only when a batch needs them (:class:`LazyImages`).
    """
    generator = rng(seed, "pool")
    return {
        "train_ids": np.arange(TRAIN_COUNT),
        "train_labels": balanced_labels(TRAIN_COUNT, 10, generator),
        "test_ids": np.arange(TRAIN_COUNT, TRAIN_COUNT + TEST_COUNT),
        "test_labels": balanced_labels(TEST_COUNT, 10, generator),
    }


def pixel_statistics(images: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of the pixels scaled to [0, 1], from a histogram (no float copy).

    On the full 60k training set these are the familiar 0.1307 and 0.3081.
    """
    counts = np.bincount(images.ravel(), minlength=256).astype(np.float64)
    levels = np.arange(256) / 255.0
    mean = counts @ levels / counts.sum()
    variance = counts @ (levels - mean) ** 2 / counts.sum()
    return float(mean), float(np.sqrt(variance))


def _splits(arrays: dict[str, np.ndarray], kind: str, val_size: int, sizes: dict[str, int | None],
            seed: int) -> dict[str, Arrays]:
    """train, val (``val_size`` held out of the training set) and test, each of ``kind`` ("images" or
    the stand-in's "ids") and labels; ``sizes``: a seeded subset of train (test) where it is smaller."""
    train, val = split_off(
        {kind: arrays[f"train_{kind}"], "labels": arrays["train_labels"]},
        val_size,
        rng(seed, "split"),
    )
    splits = {
        "train": train,
        "val": val,
        "test": {kind: arrays[f"test_{kind}"], "labels": arrays["test_labels"]},
    }
    for split, size in sizes.items():
        if size is not None and size < len(splits[split]["labels"]):
            _, splits[split] = split_off(splits[split], size, rng(seed, split))
    return splits


class MnistTask(StoredTask):
    name = "mnist"
    summary = "Pixel-by-pixel MNIST: 784 steps of one pixel"
    paper = "Zhang et al. 2018 (Spectral-RNN) §7.2, Table 2; KRU §4.3, Table 2"
    option_help = {
        "pixels_per_step": "pixels read per step (a divisor of 784): T = 784 / pixels_per_step",
        "normalize": "unit: pixels in [0, 1]; standard: zero mean, unit variance over the training pixels",
        "val_size": "training images held out for validation",
        "data": DATA_HELP,
        "train_size": "keep only this many training images (a seeded subset); empty: all of them",
        "test_size": "keep only this many test images (a seeded subset); empty: all 10,000",
    }
    option_choices = {"normalize": ("unit", "standard"), "data": DATA_CHOICES}
    option_ranges = {"pixels_per_step": (1, PIXELS)}
    metric = "accuracy"
    target_mode = "last"
    description = (
        "Pixel-by-pixel MNIST: each handwritten digit is shown to the network one pixel at a "
        "time, 784 steps in row-major order, and the digit is read from the last step. The "
        "stroke that identifies a digit can lie hundreds of steps before the end, so the "
        "task tests long-range memory on real data. The Spectral-RNN paper (Zhang et al. "
        "2018, §7.2, Table 2, Fig. 3(b)) reaches 97.7% test accuracy with 128 hidden units "
        "and about 6k parameters, against 94.1% for a plain RNN and 97.3% for LSTM; Fig. 4 "
        "there shows the RNN's first-layer gradient vanishing in the first epochs and LSTM's "
        "exploding later while oRNN and Spectral-RNN stay stable. The KRU paper (§4.3, "
        "Table 2) reports 96.4% for KRU and 97.8% for LSTM."
    )

    def __init__(
        self,
        *,
        seed: int = 0,
        pixels_per_step: int = 1,
        normalize: str = "unit",
        val_size: int = 5000,
        data: str = "real",
        train_size: int | None = None,
        test_size: int | None = None,
        data_dir: str | os.PathLike | None = None,
        download: bool = True,
        progress: Progress | None = None,
    ):
        pixels_per_step = check_count("pixels_per_step", pixels_per_step)
        if PIXELS % pixels_per_step:
            divisors = [d for d in range(1, PIXELS + 1) if PIXELS % d == 0]
            raise ValueError(
                f"pixels_per_step must divide 784; valid values: {', '.join(map(str, divisors))}"
            )
        super().__init__(
            seed=seed,
            input_size=pixels_per_step,
            output_size=10,
            seq_len=PIXELS // pixels_per_step,
        )
        self.normalize = check_choice("normalize", normalize, ("unit", "standard"))
        val_size = check_count("val_size", val_size)
        self.data = check_choice("data", data, DATA_CHOICES)
        sizes = {split: None if size is None else check_count(f"{split}_size", size)
                 for split, size in (("train", train_size), ("test", test_size))}
        self.standin = data == "standin" or (data == "auto" and not mnist_cached(data_dir))
        if self.standin:  # ids stand for the images, rendered when a batch needs them
            arrays = standin_mnist(seed)
            kind = "ids"
            self._render = LazyImages(seed, TRAIN_COUNT + TEST_COUNT)
        else:
            arrays = load_mnist(data_dir, download, progress)
            kind = "images"
        self.splits = _splits(arrays, kind, val_size, sizes, seed)
        train = self.splits["train"]
        self.pixel_mean, self.pixel_std = self._pixel_statistics(train)
        self.permutation = self._permutation()
        self.baseline = majority_baseline(train["labels"], self.splits["test"]["labels"])
        self.baseline_label = "always predict the most frequent training digit"
        if self.standin:
            self.baseline_label = standin_label(self.baseline_label, "MNIST")
            self.description = f"{self.description} {STANDIN_NOTE}"

    def _pixel_statistics(self, train: Arrays) -> tuple[float | None, float | None]:
        """The training pixels' mean and standard deviation: of the real images, of a sample of the
        stand-in's where normalize="standard" needs them, else None (normalize="unit")."""
        if not self.standin:
            return pixel_statistics(train["images"])
        if self.normalize == "standard":  # from a sample: rendering all 55,000 would take seconds
            return pixel_statistics(self._images({key: value[:STANDIN_SAMPLE] for key, value in train.items()}))
        return None, None

    def _images(self, arrays: Arrays) -> np.ndarray:
        """(B, 784) uint8: the stored images, or the stand-in's rendered from their ids."""
        if "images" in arrays:
            return arrays["images"]
        return self._render(arrays["ids"], arrays["labels"])

    def _permutation(self) -> torch.Tensor | None:
        return None

    def encode(self, arrays: Arrays) -> Batch:
        x = torch.from_numpy(self._images(arrays)).float().div_(255.0)  # (B, 784)
        if self.normalize == "standard":
            x = (x - self.pixel_mean) / self.pixel_std
        if self.permutation is not None:
            x = x[:, self.permutation]
        return x.reshape(len(x), self.seq_len, self.input_size), torch.from_numpy(arrays["labels"])


class PermutedMnistTask(MnistTask):
    name = "permuted_mnist"
    summary = "Pixel MNIST with the 784 pixels in one fixed random order"
    option_help = {"permutation_seed": "seed of the fixed pixel permutation (the same for every run seed)"}
    option_ranges = {"permutation_seed": (0, None)}
    paper = "Zhang et al. 2018 (Spectral-RNN) §7.2, Fig. 3(c); KRU §4.3, Table 2"
    description = (
        "Permuted pixel MNIST: like pixel-by-pixel MNIST, but the 784 pixels are shuffled by "
        "one fixed random permutation before being read. Neighbouring pixels end up far "
        "apart in time, which destroys the local structure a network can lean on and makes "
        "the dependencies genuinely long, so it is the harder test of gradient flow. The "
        "Spectral-RNN paper (Zhang et al. 2018, §7.2, Fig. 3(c)) shows Spectral-RNN with the "
        "highest test accuracy; in the KRU paper (§4.3, Table 2) KRU reaches 94.5% with about "
        "12k parameters, above LSTM's 91.3%, and close to the 94.7% of a 41k-parameter "
        "low-rank-plus-diagonal GRU."
    )

    def __init__(
        self,
        *,
        seed: int = 0,
        permutation_seed: int = 0,
        pixels_per_step: int = 1,
        normalize: str = "unit",
        val_size: int = 5000,
        data: str = "real",
        train_size: int | None = None,
        test_size: int | None = None,
        data_dir: str | os.PathLike | None = None,
        download: bool = True,
        progress: Progress | None = None,
    ):
        self.permutation_seed = check_count("permutation_seed", permutation_seed, minimum=0)
        super().__init__(
            seed=seed,
            pixels_per_step=pixels_per_step,
            normalize=normalize,
            val_size=val_size,
            data=data,
            train_size=train_size,
            test_size=test_size,
            data_dir=data_dir,
            download=download,
            progress=progress,
        )

    def _permutation(self) -> torch.Tensor:
        return torch.from_numpy(rng(self.permutation_seed, "permutation").permutation(PIXELS))


class MnistRowsTask(MnistTask):
    name = "mnist_rows"
    summary = "Row-by-row MNIST: 28 steps of 28 pixels"
    paper = "Zhang et al., ICLR 2018 review version (svdRNN) §7.2, Fig. 2(a)"
    description = (
        "Row-by-row MNIST: each digit is read as 28 steps of 28 pixels, one image row per "
        "step. With only 28 steps it is the short-memory control for pixel MNIST: any "
        "reasonable recurrent network learns it, so differences between cells show up as "
        "speed and stability rather than success or failure. The ICLR 2018 review version "
        "of the Spectral-RNN paper (§7.2, Fig. 2(a)) trains 28-layer networks with 20 hidden "
        "units on it; svdRNN performs best and the choice of the singular-value margin r "
        "hardly changes the final accuracy."
    )

    def __init__(
        self,
        *,
        seed: int = 0,
        normalize: str = "unit",
        val_size: int = 5000,
        data: str = "real",
        train_size: int | None = None,
        test_size: int | None = None,
        data_dir: str | os.PathLike | None = None,
        download: bool = True,
        progress: Progress | None = None,
    ):
        super().__init__(
            seed=seed,
            pixels_per_step=28,
            normalize=normalize,
            val_size=val_size,
            data=data,
            train_size=train_size,
            test_size=test_size,
            data_dir=data_dir,
            download=download,
            progress=progress,
        )
