"""Shared machinery of the generated tasks: any length, no download, seeded sets."""

from __future__ import annotations

from .base import Arrays, Task, check_count, check_split, rng


class SyntheticTask(Task):
    """A task whose examples are drawn by :meth:`sample`.

    Options common to all synthetic tasks:

    - ``train_size``: None (default) for an endless stream of fresh training
      batches, or N for a fixed pool of N examples reshuffled every epoch, so
      that a model can overfit and the train/test gap means something.
    - ``val_size``, ``test_size``: sizes of the fixed validation and test sets.
    """

    def __init__(
        self,
        *,
        seed: int,
        seq_len: int,
        input_size: int,
        output_size: int,
        train_size: int | None,
        val_size: int,
        test_size: int,
    ):
        super().__init__(seed=seed, input_size=input_size, output_size=output_size, seq_len=seq_len)
        self.train_size = None if train_size is None else check_count("train_size", train_size)
        self.sizes = {
            "train": self.train_size,
            "val": check_count("val_size", val_size),
            "test": check_count("test_size", test_size),
        }
        self._sets: dict[str, Arrays] = {}

    @property
    def fresh_training_data(self) -> bool:
        return self.train_size is None

    def fixed_split(self, split: str) -> Arrays:
        check_split(split)
        if split == "train" and self.fresh_training_data:
            raise ValueError(f"{self.name}: no fixed training set without train_size")
        if split not in self._sets:
            stream = "pool" if split == "train" else split
            self._sets[split] = self.sample(rng(self.seed, stream), self.sizes[split])
        return self._sets[split]
