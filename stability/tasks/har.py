"""HAR-2: binary activity recognition from raw smartphone signals (SGORNN paper §3.2).

The UCI "Human Activity Recognition Using Smartphones" data set (Anguita et
al. 2013): windows of 128 steps (2.56 s at 50 Hz) of the 9 raw "Inertial
Signals" channels, in this order::

    body_acc_x  body_acc_y  body_acc_z  body_gyro_x  body_gyro_y  body_gyro_z
    total_acc_x total_acc_y total_acc_z

7352 training and 2947 test windows. The six activities (``y_*.txt``: 1
Walking, 2 Walking_Upstairs, 3 Walking_Downstairs, 4 Sitting, 5 Standing,
6 Laying) are merged into two classes as in HAR-2 (FastGRNN, SGORNN §3.2):

- class 0: Walking, Walking_Downstairs, Standing (labels 1, 3, 5),
- class 1: Walking_Upstairs, Sitting, Laying (labels 2, 4, 6).

A seeded ``val_fraction`` of the training windows is held out for
validation. Each channel is z-scored with the mean and standard deviation of
the remaining training windows (over windows and steps).

``data`` picks what the windows are: ``"real"`` (the default) the files
above; ``"standin"`` a seeded synthetic stand-in with the same 9 channels,
128 steps, two classes merged from six activity-like generators and the same
7,352 + 2,947 windows (:mod:`stability.tasks.standin`), nothing downloaded;
``"auto"`` the real files when they (or the zip) are in the cache, else the
stand-in. The stand-in's channel statistics come from a sample of its
training windows. A run on the stand-in says so in its baseline's label.

``train_size`` keeps only that many of the training windows (a seeded subset,
after the validation windows are held out), on either data: a small training
set is memorised in a few CPU minutes, so the train/held-out gap of SGORNN
Fig. 4 opens at classroom scale. ``test_size`` keeps a seeded subset of the
test windows (a tiny run's final evaluation stays short).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .standin import DATA_CHOICES, DATA_HELP, balanced_labels, har_windows, label as standin_label
from ..core.errors import check_choice
from .base import (Arrays, Batch, StoredTask, check_count, check_fraction, majority_baseline, rng,
                   split_off)
from .download import DatasetUnavailable, Progress, Remote, data_root, fetch, write_atomic, zip_members

SIGNALS = tuple(
    f"{kind}_{axis}" for kind in ("body_acc", "body_gyro", "total_acc") for axis in "xyz"
)
STEPS = 128
TRAIN_COUNT, TEST_COUNT = 7352, 2947
STANDIN_SAMPLE = 128  # stand-in training windows the channel statistics come from
STANDIN_NOTE = (
    "This run uses the SYNTHETIC STAND-IN (data = standin or auto without the files): activity-like "
    "inertial signals with HAR-2's 9 channels, 128 steps, two classes and split sizes, not the real "
    "UCI HAR recordings; its numbers say how the models behave on a task of the same shape, not "
    "what the paper measured."
)
FOLDER = "UCI HAR Dataset"
# The original zip, a copy of it, and the archive's current address (a zip holding that zip).
# No MD5 is published; the loader checks every file's shape instead.
ARCHIVE = Remote(
    "UCI HAR Dataset.zip",
    (
        "https://archive.ics.uci.edu/ml/machine-learning-databases/00240/UCI%20HAR%20Dataset.zip",
        "https://d396qusza40orc.cloudfront.net/getdata%2Fprojectfiles%2FUCI%20HAR%20Dataset.zip",
        "https://archive.ics.uci.edu/static/public/240/human+activity+recognition+using+smartphones.zip",
    ),
    md5=None,
)


def needed_files(split: str) -> list[str]:
    """Paths, relative to ``UCI HAR Dataset/``, of the files one split needs."""
    return [f"{split}/Inertial Signals/{signal}_{split}.txt" for signal in SIGNALS] + [
        f"{split}/y_{split}.txt"
    ]


def ensure_har_files(folder: Path, download: bool, progress: Progress | None) -> Path:
    """The ``UCI HAR Dataset`` folder, extracted from the downloaded zip if not there yet."""
    dataset = folder / FOLDER
    wanted = needed_files("train") + needed_files("test")
    missing = [name for name in wanted if not (dataset / name).exists()]
    if not missing:
        return dataset
    archive = fetch(ARCHIVE, folder, download=download, progress=progress)
    members = zip_members(archive)
    for name in missing:
        found = [member for member in members if member.endswith(f"{FOLDER}/{name}")]
        if not found:
            raise DatasetUnavailable(
                f"{archive} has no '{FOLDER}/{name}': delete it and build again, or put the "
                f"unpacked '{FOLDER}' folder at {dataset}."
            )
        write_atomic(dataset / name, members[found[0]]())
    return dataset


def har_cached(data_dir: str | os.PathLike | None) -> bool:
    """True when the unpacked files or the zip are in the cache (what ``data = "auto"`` asks)."""
    folder = data_root(data_dir) / "har"
    dataset = folder / FOLDER
    unpacked = all((dataset / name).exists() for name in needed_files("train") + needed_files("test"))
    return unpacked or (folder / ARCHIVE.filename).exists()


def standin_split(seed: int, first_id: int, count: int, generator: np.random.Generator) -> Arrays:
    """The stand-in's windows in compact form: ids, their activities (1-6, balanced) and HAR-2 labels.

    The signals are generated from the ids when a batch needs them (:func:`har_windows`).
    """
    activities = balanced_labels(count, 6, generator) + 1
    return {"ids": np.arange(first_id, first_id + count), "activities": activities,
            "labels": (activities % 2 == 0).astype(np.int64)}


def read_table(path: Path, dtype: type) -> np.ndarray:
    return pd.read_csv(path, sep=r"\s+", header=None, dtype=dtype).to_numpy()


def load_split(dataset: Path, split: str) -> Arrays:
    """``{"signals": float32 (N, 128, 9), "labels": int64 (N,) in {0, 1}}``."""
    channels = []
    for name in needed_files(split)[:-1]:
        table = read_table(dataset / name, np.float32)
        if table.ndim != 2 or table.shape[1] != STEPS:
            raise DatasetUnavailable(f"{dataset / name} has shape {table.shape}, not (N, {STEPS}).")
        channels.append(table)
    activities = read_table(dataset / needed_files(split)[-1], np.int64).ravel()
    lengths_agree = all(len(channel) == len(activities) for channel in channels)
    if not lengths_agree or not np.isin(activities, range(1, 7)).all():
        raise DatasetUnavailable(
            f"the HAR {split} files in {dataset} disagree in length or hold unknown activities."
        )
    return {"signals": np.stack(channels, axis=-1), "labels": (activities % 2 == 0).astype(np.int64)}


class Har2Task(StoredTask):
    name = "har2"
    summary = "UCI HAR inertial signals, 128 steps of 9 channels, 2 classes"
    option_help = {
        "val_fraction": "fraction of the training windows held out for validation (between 0 and 1)",
        "data": DATA_HELP,
        "train_size": "keep only this many training windows (a seeded subset); empty: all of them",
        "test_size": "keep only this many test windows (a seeded subset); empty: all of them",
    }
    option_choices = {"data": DATA_CHOICES}
    option_ranges = {"val_fraction": (0.0, 1.0)}
    paper = "SGORNN (ICLR 2022 submission) §3.2, Table 2, Fig. 4"
    metric = "accuracy"
    target_mode = "last"
    description = (
        "HAR-2: 2.56-second windows (128 steps) of nine raw smartphone accelerometer and "
        "gyroscope channels from the UCI Human Activity Recognition data set, classified "
        "into two groups of activities (walking upstairs, sitting, laying versus walking, "
        "walking downstairs, standing). It is a real, noisy, medium-length task where models "
        "reach similar accuracy, so it is mainly a test of stability and overfitting. In the "
        "SGORNN paper (§3.2, Table 2) SGORNN reaches 94.07 ± 0.2% test accuracy over 10 "
        "seeds with about 2.3k parameters, against 93.77% for FastRNN and 93.45% for LSTM, "
        "with the smallest spread; Fig. 4 there shows its train/test accuracy gap settling "
        "at 3-4% while those of VPRNN, FastRNN and LSTM keep growing."
    )

    def __init__(
        self,
        *,
        seed: int = 0,
        val_fraction: float = 0.2,
        data: str = "real",
        train_size: int | None = None,
        test_size: int | None = None,
        data_dir: str | os.PathLike | None = None,
        download: bool = True,
        progress: Progress | None = None,
    ):
        super().__init__(seed=seed, input_size=len(SIGNALS), output_size=2, seq_len=STEPS)
        val_fraction = check_fraction("val_fraction", val_fraction)
        self.data = check_choice("data", data, DATA_CHOICES)
        train_size = None if train_size is None else check_count("train_size", train_size)
        test_size = None if test_size is None else check_count("test_size", test_size)
        self.standin = data == "standin" or (data == "auto" and not har_cached(data_dir))
        if self.standin:
            generator = rng(seed, "pool")
            full_train = standin_split(seed, 0, TRAIN_COUNT, generator)
            test = standin_split(seed, TRAIN_COUNT, TEST_COUNT, generator)
        else:
            dataset = ensure_har_files(data_root(data_dir) / "har", download, progress)
            full_train, test = load_split(dataset, "train"), load_split(dataset, "test")
        val_count = max(1, round(val_fraction * len(full_train["labels"])))
        train, val = split_off(full_train, val_count, rng(seed, "split"))
        if train_size is not None and train_size < len(train["labels"]):
            _, train = split_off(train, train_size, rng(seed, "pool"))
        if test_size is not None and test_size < len(test["labels"]):
            _, test = split_off(test, test_size, rng(seed, "test"))
        self.splits = {"train": train, "val": val, "test": test}
        signals = self._signals(train if not self.standin else
                                {key: value[:STANDIN_SAMPLE] for key, value in train.items()})
        self.channel_mean = signals.mean(axis=(0, 1), dtype=np.float64).astype(np.float32)
        std = signals.std(axis=(0, 1), dtype=np.float64)
        self.channel_std = np.where(std > 0, std, 1.0).astype(np.float32)
        self.baseline = majority_baseline(train["labels"], self.splits["test"]["labels"])
        self.baseline_label = "always predict the more frequent training class"
        if self.standin:
            self.baseline_label = standin_label(self.baseline_label, "HAR-2")
            self.description = f"{self.description} {STANDIN_NOTE}"

    def _signals(self, arrays: Arrays) -> np.ndarray:
        """(B, 128, 9) float32: the stored windows, or the stand-in's generated from their ids."""
        if "signals" in arrays:
            return arrays["signals"]
        return har_windows(self.seed, arrays["ids"], arrays["activities"], STEPS)

    def encode(self, arrays: Arrays) -> Batch:
        x = (self._signals(arrays) - self.channel_mean) / self.channel_std  # (B, 128, 9)
        return torch.from_numpy(x), torch.from_numpy(arrays["labels"])
