"""Generated tasks: statistics over many samples, exact alignment, seeding."""

import math

import pytest
import torch

from stability.tasks import build

MANY = 20_000


def one_batch(task, split, size):
    return next(iter(task.batches(split, size)))


# ---------------------------------------------------------------- adding
@pytest.mark.parametrize("seq_len", [2, 7, 100])
def test_adding_target_is_the_sum_of_the_two_marked_values(seq_len):
    task = build("adding", seq_len=seq_len)
    x, y = one_batch(task, "train", 512)
    assert x.shape == (512, seq_len, 2) and x.dtype == torch.float32
    assert y.shape == (512, 1) and y.dtype == torch.float32
    values, markers = x[..., 0], x[..., 1]
    assert ((values >= 0) & (values < 1)).all()
    assert set(markers.unique().tolist()) <= {0.0, 1.0}
    half = seq_len // 2
    assert (markers[:, :half].sum(1) == 1).all()  # one marker in the first half
    assert (markers[:, half:].sum(1) == 1).all()  # one in the second
    torch.testing.assert_close(y[:, 0], (values * markers).sum(1))


def test_adding_statistics_and_always_one_baseline():
    task = build("adding", seq_len=50, val_size=MANY)
    x, y = one_batch(task, "val", MANY)
    assert y.mean().item() == pytest.approx(1.0, abs=0.02)  # E[u_i + u_j] = 1
    always_one = torch.ones_like(y)
    mse = task.loss(always_one, y).item()
    assert mse == pytest.approx(1 / 6, abs=0.008)  # Var[u_i + u_j] = 2/12
    assert task.score(always_one, y) == pytest.approx(mse)
    assert task.baseline == pytest.approx(1 / 6) and round(task.baseline, 3) == 0.167
    assert task.baseline_label == "always predict 1"
    # marker positions are uniform within each half: mean index (half - 1) / 2 and (T + half - 1) / 2
    first = x[..., 1][:, :25].argmax(1).float()
    second = x[..., 1][:, 25:].argmax(1).float() + 25
    assert first.mean().item() == pytest.approx(12.0, abs=0.2)
    assert second.mean().item() == pytest.approx(37.0, abs=0.2)


# ------------------------------------------------------------- ternary
def test_ternary_label_is_the_marked_sum():
    task = build("adding_ternary", seq_len=30)
    x, y = one_batch(task, "train", 1000)
    assert x.shape == (1000, 30, 2) and y.shape == (1000,) and y.dtype == torch.int64
    bits, markers = x[..., 0], x[..., 1]
    assert set(bits.unique().tolist()) == {0.0, 1.0}
    assert (markers.sum(1) == 2).all()  # two distinct marked positions
    assert torch.equal(y, (bits * markers).sum(1).long())
    assert task.output_size == 3 and task.metric == "accuracy"


def test_ternary_class_frequencies_and_majority_baseline():
    task = build("adding_ternary", seq_len=20, test_size=MANY)
    x, y = one_batch(task, "test", MANY)
    frequencies = torch.bincount(y, minlength=3).float() / MANY
    torch.testing.assert_close(frequencies, torch.tensor([0.25, 0.5, 0.25]), atol=0.015, rtol=0)
    always_one = torch.zeros(MANY, 3)
    always_one[:, 1] = 1.0
    assert task.score(always_one, y) == pytest.approx(0.5, abs=0.015)
    assert task.baseline == 0.5
    # the marked positions are spread over the whole sequence, not only its halves
    positions = x[..., 1].nonzero()[:, 1]
    assert positions.min() == 0 and positions.max() == 19


# ----------------------------------------------------------------- copy
@pytest.mark.parametrize("lag", [1, 3, 50])
def test_copy_layout_matches_the_documented_alignment(lag):
    task = build("copy", seq_len=lag)
    steps = lag + 20
    assert (task.seq_len, task.lag, task.input_size, task.output_size) == (steps, lag, 10, 9)
    x, y = one_batch(task, "train", 256)
    assert x.shape == (256, steps, 10) and y.shape == (256, steps) and y.dtype == torch.int64
    assert torch.equal(x.sum(-1), torch.ones(256, steps))  # one-hot
    tokens = x.argmax(-1)
    symbols = tokens[:, :10]
    assert ((symbols >= 1) & (symbols <= 8)).all()
    assert (tokens[:, 10 : lag + 9] == 0).all()  # T - 1 blanks
    assert (tokens[:, lag + 9] == 9).all()  # the delimiter
    assert (tokens[:, lag + 10 :] == 0).all()  # blanks while the copy is due
    assert (y[:, : lag + 10] == 0).all()
    assert torch.equal(y[:, lag + 10 :], symbols)  # the symbols come back right after the delimiter


def test_copy_docstring_example_is_what_encode_produces():
    task = build("copy", seq_len=3)
    x, y = task.encode({"symbols": torch.tensor([[3, 1, 4, 1, 5, 2, 6, 5, 3, 5]]).numpy()})
    assert x.argmax(-1)[0].tolist() == [3, 1, 4, 1, 5, 2, 6, 5, 3, 5, 0, 0, 9] + [0] * 10
    assert y[0].tolist() == [0] * 13 + [3, 1, 4, 1, 5, 2, 6, 5, 3, 5]


def memoryless_logits(batch, steps, due_from):
    """Certain blank before ``due_from``, uniform over the 8 symbols from then on."""
    logits = torch.zeros(batch, steps, 9)
    logits[:, :due_from, 1:] = -1e4
    logits[:, due_from:, 0] = -1e4
    return logits


@pytest.mark.parametrize("lag", [10, 100, 1000])
def test_copy_memoryless_predictor_scores_the_baseline(lag):
    task = build("copy", seq_len=lag, val_size=64)
    x, y = one_batch(task, "val", 64)
    expected = 10 * math.log(8) / (lag + 20)
    assert task.baseline == pytest.approx(expected)
    right = memoryless_logits(64, lag + 20, lag + 10)
    assert task.score(right, y) == pytest.approx(expected, rel=1e-4)
    assert task.loss(right, y).item() == pytest.approx(expected, rel=1e-4)
    # the same strategy one step early is far worse: the alignment matters
    early = memoryless_logits(64, lag + 20, lag + 9)
    assert task.loss(early, y).item() > expected + 1.0 / (lag + 20)


# --------------------------------------------------------------- seeding
@pytest.mark.parametrize("name", ["adding", "adding_ternary", "copy"])
def test_same_seed_same_batches_different_seed_different(name):
    def first_batches(seed, split):
        batches = build(name, seed=seed, seq_len=12, val_size=40, test_size=40).batches(split, 16)
        return [next(batches) for _ in range(3)]

    for split in ("train", "val", "test"):
        a, b, c = first_batches(1, split), first_batches(1, split), first_batches(2, split)
        assert all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(a, b))
        assert not torch.equal(a[0][0], c[0][0])
    val, test = first_batches(1, "val"), first_batches(1, "test")
    assert not torch.equal(val[0][0], test[0][0])


def test_a_task_restarts_its_streams_on_every_call():
    task = build("adding", seed=3, seq_len=10)
    first = [next(task.batches("train", 8))[0] for _ in range(2)]
    assert torch.equal(first[0], first[1])
    stream = task.batches("train", 8)
    assert not torch.equal(next(stream)[0], next(stream)[0])  # fresh examples at every step


def test_val_and_test_are_fixed_sets_iterated_once():
    task = build("adding", seq_len=10, val_size=50, test_size=30)
    sizes = [len(y) for _, y in task.batches("val", 16)]
    assert sizes == [16, 16, 16, 2]
    assert sum(len(y) for _, y in task.batches("test", 16)) == 30
    assert task.split_size("val") == 50 and task.split_size("train") is None
    whole = torch.cat([x for x, _ in task.batches("val", 50)])
    in_pieces = torch.cat([x for x, _ in task.batches("val", 7)])
    assert torch.equal(whole, in_pieces)  # the set does not depend on the batch size


def test_train_size_gives_a_fixed_pool_reshuffled_each_epoch():
    task = build("adding", seq_len=10, train_size=32)
    assert task.split_size("train") == 32
    stream = task.batches("train", 8)
    epochs = [torch.cat([next(stream)[1] for _ in range(4)]) for _ in range(2)]
    pool = task.fixed_split("train")
    pool_targets = torch.from_numpy(pool["values"])
    assert sorted(epochs[0].flatten().tolist()) == sorted(epochs[1].flatten().tolist())
    assert not torch.equal(epochs[0], epochs[1])  # reshuffled
    assert len(set(epochs[0].flatten().tolist())) == 32  # every pool example once per epoch
    assert pool_targets.shape == (32, 10)
    val = next(task.batches("val", 1000))[0]
    assert not any(torch.equal(val[0, :, 0], row) for row in pool_targets)  # pool and val differ


# ------------------------------------------------------ loss and metric
def test_loss_rejects_outputs_of_the_wrong_shape():
    task = build("adding", seq_len=10)
    x, y = one_batch(task, "train", 4)
    with pytest.raises(ValueError, match=r"outputs\[:, -1\]"):
        task.loss(torch.zeros(4, 10, 1), y)
    copy = build("copy", seq_len=5)
    _, y = one_batch(copy, "train", 4)
    with pytest.raises(ValueError, match="every step"):
        copy.loss(torch.zeros(4, 9), y)


def test_summarize_weights_batches_by_their_targets():
    task = build("adding_ternary", seq_len=10)
    summary = task.summarize([(1.0, 0.5, 10), (4.0, 1.0, 30)])
    assert summary == {"loss": pytest.approx(3.25), "accuracy": pytest.approx(0.875)}
    with pytest.raises(ValueError):
        task.summarize([])


def test_info_carries_what_the_dashboard_shows():
    info = build("copy", seq_len=100).info()
    assert info["baseline"] == pytest.approx(10 * math.log(8) / 120)
    assert info["metric"] == "cross_entropy" and info["target_mode"] == "every"
    assert "KRU" in info["paper"] and "Fig. 2" in info["description"]
    assert info["stateful"] is False
