"""Any univariate, equal-length dataset of the UCR time-series archive (spectral paper App. C.1).

Files: ``<data_dir>/ucr/<Name>/<Name>_TRAIN.<ext>`` and ``..._TEST.<ext>``, in
one of the archive's formats:

- ``.tsv`` (UCRArchive_2018): one series per line, the label first, tab separated;
- ``.txt`` (timeseriesclassification.com): the same, whitespace separated;
- ``.ts`` (sktime/aeon): ``@`` header lines, then ``v1,v2,...,vL:label`` per line.

A missing dataset is downloaded from timeseriesclassification.com as
``<Name>.zip`` (no MD5 is published for these; files are checked by parsing).
The 2018 archive's own zip is password protected, so its ``.tsv`` files can
only be put in place by hand.

Labels are mapped to ``0 .. K-1`` in sorted order of the training labels. As in
App. C.1, a seeded 20% of the training set becomes the validation set.

Note [UCR input size]: App. C.1 says "``n_i`` is the maximum divisor of ``L``
that satisfies depth ≤ √L", which read literally always gives ``n_i = L`` and
one step. Table 4's depths follow the rule the other way round: ``n_i`` is the
largest divisor of ``L`` with ``n_i ≤ √L`` (so the depth ``L / n_i ≥ √L`` is the
smallest such), e.g. Adiac L = 176 → n_i = 11, depth 16; ArrowHead L = 251
(prime) → n_i = 1, depth 251; Beef L = 470 → n_i = 10, depth 47. We use the
table's rule, which matches every row of Table 4 but 50words (L = 270: the
rule gives depth 18, the table 27). The ``input_size`` option overrides it.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .base import Arrays, Batch, StoredTask, check_count, check_fraction, majority_baseline, rng, split_off
from .download import DatasetUnavailable, Progress, Remote, data_root, fetch, write_atomic, zip_members

FORMATS = (".tsv", ".txt", ".ts")
NAME = re.compile(r"[A-Za-z0-9_-]+")
MIRRORS = (
    "https://www.timeseriesclassification.com/aeon-toolkit/{name}.zip",
    "https://www.timeseriesclassification.com/ClassificationDownloads/{name}.zip",
)


def paper_input_size(length: int) -> int:
    """The largest divisor ``n_i`` of ``length`` with ``n_i ≤ √length`` (Note [UCR input size])."""
    return max(d for d in range(1, math.isqrt(length) + 1) if length % d == 0)


def find_split_file(folder: Path, name: str, split: str) -> Path | None:
    for extension in FORMATS:
        path = folder / f"{name}_{split}{extension}"
        if path.exists():
            return path
    return None


def ensure_ucr_files(name: str, root: Path, download: bool, progress: Progress | None) -> dict[str, Path]:
    """``{"TRAIN": path, "TEST": path}``, extracting them from ``<Name>.zip`` if needed."""
    folder = root / "ucr" / name
    paths = {split: find_split_file(folder, name, split) for split in ("TRAIN", "TEST")}
    if all(paths.values()):
        return paths  # type: ignore[return-value]
    remote = Remote(f"{name}.zip", tuple(url.format(name=name) for url in MIRRORS), md5=None)
    try:
        archive = fetch(remote, root / "ucr", download=download, progress=progress)
    except DatasetUnavailable as error:
        raise DatasetUnavailable(
            f"{error} Or put {name}_TRAIN.tsv and {name}_TEST.tsv from UCRArchive_2018 in {folder}."
        ) from None
    try:
        members = {Path(member).name: read for member, read in zip_members(archive).items()}
    except DatasetUnavailable:
        archive.unlink()  # an error page rather than a zip: is there a dataset of that name?
        raise DatasetUnavailable(
            f"{remote.urls[0]} did not serve a zip archive: check that {name!r} is a UCR "
            f"dataset name, or put {name}_TRAIN.tsv and {name}_TEST.tsv in {folder}."
        ) from None
    for split in ("TRAIN", "TEST"):
        found = [f"{name}_{split}{ext}" for ext in FORMATS if f"{name}_{split}{ext}" in members]
        if not found:
            raise DatasetUnavailable(
                f"{archive} has no {name}_{split} file in {', '.join(FORMATS)} format: delete it, "
                f"or put {name}_TRAIN.tsv and {name}_TEST.tsv in {folder}."
            )
        write_atomic(folder / found[0], members[found[0]]())
        paths[split] = folder / found[0]
    return paths  # type: ignore[return-value]


def read_series(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(labels as strings (N,), series float32 (N, L))`` from a .tsv, .txt or .ts file."""
    if path.suffix == ".ts":
        labels, rows = [], []
        in_data = False
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("@"):
                in_data = line.lower().startswith("@data")
                continue
            if not in_data:
                continue
            *dimensions, label = line.split(":")
            if len(dimensions) != 1:
                raise DatasetUnavailable(
                f"{path} is multivariate; only univariate UCR datasets are supported."
            )
            labels.append(label.strip())
            rows.append(dimensions[0].split(","))
        if len({len(row) for row in rows}) > 1:
            raise DatasetUnavailable(
                f"{path} holds series of different lengths; only equal-length ones are supported."
            )
        table = pd.DataFrame(rows)
        labels_column = pd.Series(labels)
    else:
        separator = "\t" if path.suffix == ".tsv" else r"\s+"
        frame = pd.read_csv(path, sep=separator, header=None, dtype=str)
        labels_column, table = frame.iloc[:, 0], frame.iloc[:, 1:]
    try:
        series = np.array(table.apply(pd.to_numeric), dtype=np.float32)
    except (ValueError, TypeError):
        raise DatasetUnavailable(f"{path} holds values that are not numbers.") from None
    if series.size == 0 or np.isnan(series).any():
        raise DatasetUnavailable(
            f"{path} is empty, has missing values or series of different lengths; only "
            f"equal-length univariate datasets are supported."
        )
    return labels_column.astype(str).str.strip().to_numpy(), series


def label_key(label: str) -> tuple[int, float, str]:
    """Sort numeric labels by value (``"2" < "10"``, ``"1" == "1.0e+00"``), others as text."""
    try:
        return (0, float(label), "")
    except ValueError:
        return (1, 0.0, label)


def class_ids(train_labels: np.ndarray, test_labels: np.ndarray, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Labels as ids ``0 .. K-1`` in sorted order of the training labels."""
    index = {key: i for i, key in enumerate(sorted({label_key(label) for label in train_labels}))}
    unknown = sorted({label for label in test_labels if label_key(label) not in index})
    if unknown:
        raise DatasetUnavailable(f"{path} has labels {unknown[:3]} that the training set lacks.")
    return tuple(
        np.array([index[label_key(label)] for label in labels], dtype=np.int64)
        for labels in (train_labels, test_labels)
    )  # type: ignore[return-value]


class UcrTask(StoredTask):
    name = "ucr"
    summary = "Any UCR archive time-series dataset, by name"
    option_help = {
        "dataset": "UCR archive dataset name, e.g. ECG200, ArrowHead, FaceAll",
        "input_size": "values read per step (a divisor of the series length); "
                      "default: the largest divisor not above its square root",
        "val_fraction": "fraction of the training series held out for validation (between 0 and 1)",
    }
    option_ranges = {"input_size": (1, None), "val_fraction": (0.0, 1.0)}
    form_hidden_options = ("input_size",)  # derived from the data's length unless given
    paper = "Zhang et al. 2018 (Spectral-RNN) App. C.1, Table 4, Fig. 6"
    metric = "accuracy"
    target_mode = "last"
    description = (
        "Time-series classification on any dataset of the UCR archive, named with the "
        "dataset option: a univariate series of length L is read in chunks of n_i values, "
        "the largest divisor of L not above √L, so the depth L / n_i ranges from a few "
        "steps to hundreds (251 for ArrowHead, whose length is prime), and the class is "
        "read from the last step. Training sets are small (tens to hundreds of series), so "
        "it tests generalisation as much as gradient flow. In the Spectral-RNN paper "
        "(Zhang et al. 2018, App. C.1, Table 4, Fig. 6) plain RNNs overfit (CBF) and fall "
        "behind on deep datasets such as ArrowHead (RNN 0.509, LSTM 0.537, Spectral-RNN "
        "0.800) and FaceAll, which the authors attribute to Spectral-RNN's control of the "
        "spectral norm that bounds generalisation."
    )

    def __init__(
        self,
        *,
        dataset: str,
        seed: int = 0,
        input_size: int | None = None,
        val_fraction: float = 0.2,
        data_dir: str | os.PathLike | None = None,
        download: bool = True,
        progress: Progress | None = None,
    ):
        if not isinstance(dataset, str) or not NAME.fullmatch(dataset):
            raise ValueError(f"dataset must be a UCR dataset name such as 'ECG200', got {dataset!r}")
        val_fraction = check_fraction("val_fraction", val_fraction)
        paths = ensure_ucr_files(dataset, data_root(data_dir), download, progress)
        train_labels, train_series = read_series(paths["TRAIN"])
        test_labels, test_series = read_series(paths["TEST"])
        length = train_series.shape[1]
        if test_series.shape[1] != length:
            raise DatasetUnavailable(
                f"{dataset}: training series have length {length}, test series {test_series.shape[1]}."
            )
        input_size = paper_input_size(length) if input_size is None else check_count("input_size", input_size)
        if length % input_size:
            raise ValueError(f"input_size must divide the series length {length}, got {input_size}")
        train_ids, test_ids = class_ids(train_labels, test_labels, paths["TEST"])
        classes = int(train_ids.max()) + 1
        super().__init__(seed=seed, input_size=input_size, output_size=classes, seq_len=length // input_size)
        self.dataset = dataset
        self.length = length
        full_train = {"series": train_series, "labels": train_ids}
        val_count = min(max(1, round(val_fraction * len(train_ids))), len(train_ids) - 1)
        train, val = split_off(full_train, val_count, rng(seed, "split"))
        self.splits = {"train": train, "val": val, "test": {"series": test_series, "labels": test_ids}}
        self.baseline = majority_baseline(train["labels"], test_ids)
        self.baseline_label = "always predict the most frequent training class"
        self.description = (
            f"{dataset}: {len(train_ids)} training and {len(test_ids)} test series of length "
            f"{length} in {classes} classes, read as {self.seq_len} steps of "
            f"{input_size} values. {type(self).description}"
        )

    def encode(self, arrays: Arrays) -> Batch:
        series = torch.from_numpy(arrays["series"])  # (B, L)
        x = series.reshape(len(series), self.seq_len, self.input_size)  # (B, L / n_i, n_i)
        return x, torch.from_numpy(arrays["labels"])
