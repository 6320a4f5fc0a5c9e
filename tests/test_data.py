"""Tests of lit_bayes.data: generators, CSV parsing, torchvision readers, loaders and errors."""
from __future__ import annotations

import math
import re
import pickle
import struct
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import scipy.io
import torch
import torchvision
from torch import Tensor

from lit_bayes.data import (
    BayesDataModule,
    EpochBatchSampler,
    LinearRegression,
    NoisyXOR,
    SyntheticRegression,
    TabularCSV,
    TorchvisionImages,
    TwoMoons,
)
from lit_bayes.data.base import transform_raw_inputs


def batches(loader) -> list[tuple[Tensor, Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]


class Tiny(BayesDataModule):
    """A DataModule whose splits are given directly, to test the shared validation."""

    def __init__(self, train, val=None, test=None, task="classification", num_classes=3, input_shape=(2,), **kwargs):
        kwargs.setdefault("batch_size", 3)
        kwargs.setdefault("eval_batch_size", None)
        kwargs.setdefault("seed", 0)
        super().__init__(task=task, num_classes=num_classes, input_shape=input_shape, **kwargs)
        empty = (train[0][:0], train[1][:0])
        self.splits = {"train": train, "val": val or empty, "test": test or empty}

    def load(self):
        return self.splits


def tiny_xy(n=10):
    return torch.arange(2 * n, dtype=torch.float32).reshape(n, 2), torch.arange(n) % 3


# ----------------------------------------------------------------------------- base: loaders


def test_train_loader_batches_cover_every_point_once_without_dropping_the_last():
    dm = Tiny(tiny_xy(10))
    dm.setup()
    got = batches(dm.train_dataloader())
    assert [len(y) for _, y in got] == [3, 3, 3, 1]
    rows = torch.cat([x[:, 0] for x, _ in got]) / 2
    assert sorted(rows.tolist()) == list(range(10))
    assert rows.tolist() != list(range(10))  # shuffled


@pytest.mark.parametrize("batch_size", [None, 10, 50])
def test_full_batch_when_batch_size_is_none_or_at_least_num_train(batch_size):
    dm = Tiny(tiny_xy(10), batch_size=batch_size)
    dm.setup()
    assert [len(y) for _, y in dm.train_dataloader()] == [10]


def test_a_full_batch_is_the_stored_training_tensors_every_epoch():
    dm = Tiny(tiny_xy(10), batch_size=None)
    dm.setup()
    stored = dm.train_data.tensors
    for epoch in range(2):
        ((x, y),) = list(dm.train_dataloader())
        assert x is stored[0] and y is stored[1]  # no copy, and full-batch samplers can recognise it


def test_shuffle_depends_only_on_seed_and_epoch():
    def order(seed, epoch):
        dm = Tiny(tiny_xy(10), seed=seed)
        dm.setup()
        dm.trainer = SimpleNamespace(current_epoch=epoch)
        return torch.cat([x[:, 0] for x, _ in dm.train_dataloader()])

    assert torch.equal(order(0, 0), order(0, 0))
    assert torch.equal(order(0, 4), order(0, 4))
    assert not torch.equal(order(0, 0), order(0, 1))
    assert not torch.equal(order(0, 0), order(1, 0))


def index_lists(sampler) -> list[list[int]]:
    """The sampler's batches (int64 tensors) as lists of indices."""
    return [batch.tolist() for batch in sampler]


def test_sampler_order_of_an_epoch_is_the_same_when_recomputed_fresh():
    running = EpochBatchSampler(50, seed=7, batch_size=8)
    history = []
    for epoch in range(4):
        running.set_epoch(epoch)
        history.append(index_lists(running))
    for epoch, seen in enumerate(history):
        assert index_lists(EpochBatchSampler(50, seed=7, batch_size=8, epoch=epoch)) == seen
    assert len({str(h) for h in history}) == 4
    assert [len(b) for b in history[0]] == [8] * 6 + [2] and len(running) == 7
    assert sorted(i for b in history[0] for i in b) == list(range(50))


def test_a_training_batch_is_one_index_select_of_the_sampler_indices_per_tensor():
    dm = Tiny(tiny_xy(10))
    dm.setup()
    loader = dm.train_dataloader()
    indices = list(loader.sampler)
    assert all(i.dtype == torch.int64 and i.dim() == 1 for i in indices)
    x, y = dm.train_data.tensors
    for (bx, by), i in zip(loader, indices, strict=True):
        assert torch.equal(bx, x[i.tolist()]) and torch.equal(by, y[i.tolist()])  # as TensorDataset's list indexing
    assert torch.equal(dm.train_data[torch.tensor([1, 1, 4])][0], x[[1, 1, 4]])
    assert torch.equal(dm.train_data[3][0], x[3]) and torch.equal(dm.train_data[[0, 2]][1], y[[0, 2]])  # other indices


def test_sampler_shards_cover_the_epoch_with_equal_batch_counts_and_resume_skips_done_batches():
    shards = [EpochBatchSampler(10, seed=1, batch_size=2, epoch=3, num_replicas=3, rank=r) for r in range(3)]
    batches = [index_lists(s) for s in shards]
    assert [len(b) for b in batches] == [2, 2, 2] and all(len(s) == 2 for s in shards)  # 10 padded to 12
    flat = [i for b in batches for batch in b for i in batch]
    assert set(flat) == set(range(10)) and len(flat) == 12
    resumed = EpochBatchSampler(10, seed=1, batch_size=2, epoch=3, num_replicas=3, rank=1, resume_at=(3, 1))
    assert index_lists(resumed) == batches[1][1:]
    resumed.set_epoch(4)  # the skip applies to its epoch only
    assert len(list(resumed)) == 2
    with pytest.raises(ValueError, match="rank"):
        EpochBatchSampler(10, seed=1, batch_size=2, num_replicas=2, rank=2)


class Recorder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)
        self.seen: list[list[float]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch[0][:, 0].tolist())
        return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(max_epochs, tmp_path, ckpt_path=None):
    model = Recorder()
    trainer = L.Trainer(
        max_epochs=max_epochs,
        logger=False,
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=NoisyXOR(num_train=24, num_val=4, num_test=4, batch_size=8, seed=3), ckpt_path=ckpt_path)
    return trainer, model


@pytest.mark.filterwarnings("ignore")
def test_resumed_run_sees_the_same_batches_as_an_uninterrupted_one(tmp_path):
    _, full = _fit(3, tmp_path / "full")
    first, _ = _fit(1, tmp_path / "part")
    checkpoint = tmp_path / "one_epoch.ckpt"
    first.save_checkpoint(checkpoint)
    _, resumed = _fit(3, tmp_path / "part", ckpt_path=checkpoint)
    assert len(full.seen) == 9 and full.seen[:3] != full.seen[3:6]
    assert resumed.seen == full.seen[3:]


def test_eval_loaders_are_not_shuffled_and_predict_gives_the_test_split():
    dm = Tiny(tiny_xy(6), val=tiny_xy(5), test=tiny_xy(4), eval_batch_size=2)
    dm.setup()
    val = batches(dm.val_dataloader())
    assert [len(y) for _, y in val] == [2, 2, 1]
    assert torch.equal(torch.cat([x for x, _ in val]), tiny_xy(5)[0])
    for loader in (dm.test_dataloader(), dm.predict_dataloader()):
        x, y = next(iter(loader))
        assert torch.equal(x, tiny_xy(4)[0][:2]) and torch.equal(y, tiny_xy(4)[1][:2])


def test_empty_validation_split_gives_no_batches():
    dm = Tiny(tiny_xy(6))
    dm.setup()
    assert batches(dm.val_dataloader()) == []


def test_num_train_needs_setup():
    dm = Tiny(tiny_xy(6))
    with pytest.raises(RuntimeError, match="setup"):
        dm.num_train
    dm.setup()
    assert dm.num_train == 6


# ----------------------------------------------------------------------------- base: validation


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "batch_size must be a positive integer or None (one batch), got 0"),
        ({"batch_size": 2.5}, "batch_size must be a positive integer or None (one batch), got 2.5"),
        ({"batch_size": True}, "batch_size must be a positive integer or None (one batch), got True"),
        ({"eval_batch_size": -1}, "eval_batch_size must be a positive integer or None (one batch), got -1"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"num_workers": -2}, "num_workers must be an integer >= 0, got -2"),
        ({"task": "ranking"}, "task must be one of 'classification', 'regression'; got 'ranking'"),
        ({"num_classes": 1}, "num_classes must be an integer >= 2, got 1"),
        ({"task": "regression", "num_classes": 3}, "num_classes must be None for task='regression', got 3"),
    ],
)
def test_bad_base_arguments(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Tiny(tiny_xy(4), **kwargs)


def _nan_x():
    x, y = tiny_xy(4)
    x[2, 1] = math.nan
    return x, y


@pytest.mark.parametrize(
    "train, val, message",
    [
        (_nan_x(), None, "train split: x contains NaN or infinite values"),
        (tiny_xy(4), (torch.full((2, 2), math.inf), torch.zeros(2, dtype=torch.long)), "val split: x contains NaN"),
        ((tiny_xy(4)[0], tiny_xy(3)[1]), None, "train split: x has 4 rows but y has 3"),
        ((tiny_xy(4)[0], torch.tensor([0, 1, 3, 2])), None, r"labels in \[0, 3\], allowed are 0..2"),
        ((tiny_xy(4)[0], torch.tensor([0, -1, 1, 2])), None, r"labels in \[-1, 2\], allowed are 0..2"),
        ((tiny_xy(4)[0], tiny_xy(4)[1].float()), None, "y must be a 1-d torch.int64 tensor"),
        ((tiny_xy(4)[0].double(), tiny_xy(4)[1]), None, "x must be a float32 tensor"),
        ((torch.zeros(4, 3), tiny_xy(4)[1]), None, r"point shape \(3,\), expected input_shape \(2,\)"),
        ((torch.zeros(0, 2), torch.zeros(0, dtype=torch.long)), None, "at least one training point"),
    ],
)
def test_bad_splits_are_rejected_naming_the_split(train, val, message):
    with pytest.raises(ValueError, match=message):
        Tiny(train, val=val).setup()


def test_regression_targets_must_be_finite_float_vectors():
    x = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="test split: y contains NaN"):
        Tiny((x, torch.zeros(3)), test=(x, torch.tensor([0.0, math.nan, 1.0])), task="regression", num_classes=None).setup()
    with pytest.raises(ValueError, match="y must be a 1-d torch.float32 tensor"):
        Tiny((x, torch.zeros(3, 1)), task="regression", num_classes=None).setup()


# ----------------------------------------------------------------------------- noisy XOR


def test_noisy_xor_clusters_labels_and_sizes():
    dm = NoisyXOR(num_train=400, num_val=40, num_test=80, offset=0.55)
    dm.setup()
    assert (dm.task, dm.num_classes, dm.input_shape, dm.num_train) == ("classification", 2, (2,), 400)
    for data, n in ((dm.train_data, 400), (dm.val_data, 40), (dm.test_data, 80)):
        x, y = data.tensors
        assert x.shape == (n, 2) and x.dtype == torch.float32 and y.dtype == torch.int64
        bits = (x > 0.5).long()  # a 0-bit lies in [-0.55, 0.45), a 1-bit in [0.55, 1.55)
        assert torch.equal(y, bits[:, 0] ^ bits[:, 1])
        lower = torch.where(bits == 1, 0.55, -0.55)
        assert bool(((x >= lower) & (x < lower + 1)).all())
        cluster = 2 * bits[:, 0] + bits[:, 1]
        assert torch.bincount(cluster, minlength=4).tolist() == [n // 4] * 4
        assert torch.bincount(y).tolist() == [n // 2, n // 2]


def test_noisy_xor_is_reproducible_and_seed_dependent():
    def data(seed):
        dm = NoisyXOR(num_train=40, num_val=8, num_test=8, seed=seed)
        dm.setup()
        return dm.train_data.tensors[0], dm.test_data.tensors[0]

    assert all(torch.equal(a, b) for a, b in zip(data(5), data(5)))
    assert not torch.equal(data(5)[0], data(6)[0])
    assert not torch.equal(data(5)[0][:8], data(5)[1])  # splits are independent draws


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_train": 10}, "num_train must be divisible by 4 (four equal XOR clusters), got 10"),
        ({"num_test": 6}, "num_test must be divisible by 4 (four equal XOR clusters), got 6"),
        ({"num_train": 0}, "num_train must be an integer >= 1, got 0"),
        ({"offset": -0.1}, "offset must be a finite real number >= 0.0, got -0.1"),
        ({"offset": math.nan}, "offset must be a finite real number >= 0.0, got nan"),
    ],
)
def test_noisy_xor_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        NoisyXOR(**kwargs)


# ----------------------------------------------------------------------------- two moons


def test_noise_free_moons_lie_on_their_half_circles():
    dm = TwoMoons(num_train=101, num_val=10, num_test=10, noise=0.0)
    dm.setup()
    x, y = dm.train_data.tensors
    assert x.shape == (101, 2) and y.dtype == torch.int64
    assert torch.bincount(y).tolist() == [51, 50]
    outer, inner = x[y == 0].double(), x[y == 1].double()
    assert torch.allclose(outer.norm(dim=1), torch.ones(51, dtype=torch.float64), atol=1e-6)
    assert bool((outer[:, 1] >= -1e-6).all())
    centre = torch.tensor([1.0, 0.5], dtype=torch.float64)
    assert torch.allclose((inner - centre).norm(dim=1), torch.ones(50, dtype=torch.float64), atol=1e-6)
    assert bool((inner[:, 1] <= 0.5 + 1e-6).all())
    assert y[:51].tolist() != [0] * 51  # shuffled


def test_noisy_moons_are_reproducible_and_spread():
    def train(seed):
        dm = TwoMoons(noise=0.3, seed=seed)
        dm.setup()
        return dm.train_data.tensors

    a, b = train(1), train(1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    radius = a[0][a[1] == 0].norm(dim=1)
    assert 0.1 < float(radius.std()) < 0.6
    with pytest.raises(ValueError, match="noise must be a finite real number >= 0.0, got -1"):
        TwoMoons(noise=-1)


# ----------------------------------------------------------------------------- regression


def test_regression_function_and_noise_free_targets():
    f = SyntheticRegression.f
    x = torch.tensor([0.0, 1.0, -2.0, 5.5])
    expected = [v * math.sin(v * math.tanh(v)) for v in x.tolist()]
    assert torch.allclose(f(x), torch.tensor(expected))
    dm = SyntheticRegression(num_train=50, noise_std=0.0, low=-3.0, high=2.0)
    dm.setup()
    x, y = dm.train_data.tensors
    assert (dm.task, dm.num_classes, dm.input_shape) == ("regression", None, (1,))
    assert x.shape == (50, 1) and y.shape == (50,) and y.dtype == torch.float32
    assert bool(((x >= -3.0) & (x < 2.0)).all())
    assert torch.equal(x[:, 0], x[:, 0].sort().values)
    assert torch.allclose(y, f(x[:, 0]), atol=1e-5)


def test_regression_noise_has_the_requested_std():
    dm = SyntheticRegression(num_train=4000, noise_std=0.5, seed=2)
    dm.setup()
    x, y = dm.train_data.tensors
    assert abs(float((y - SyntheticRegression.f(x[:, 0])).std()) - 0.5) < 0.03
    with pytest.raises(ValueError, match="low must be smaller than high, got low=1.0, high=1.0"):
        SyntheticRegression(low=1.0, high=1.0)


def test_linear_regression_targets_and_conjugate_recovery():
    dm = LinearRegression(num_train=50, noise_std=0.0, weights=(2.0, -1.0), bias=0.25)
    dm.setup()
    x, y = dm.train_data.tensors
    assert dm.input_shape == (2,) and dm.batch_size is None
    assert torch.allclose(y, x @ torch.tensor([2.0, -1.0]) + 0.25, atol=1e-6)
    big = LinearRegression(num_train=5000, seed=1)
    big.setup()
    x, y = big.train_data.tensors
    design = torch.cat([x, torch.ones(len(x), 1)], dim=1).double()
    solution = torch.linalg.lstsq(design, y.double().unsqueeze(1)).solution[:, 0]
    assert torch.allclose(solution.float(), torch.tensor([1.5, -0.8, 1.3, 0.5]), atol=0.06)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_val": 0}, "num_val must be an integer >= 1, got 0"),
        ({"weights": ()}, r"weights must be a non-empty sequence of finite numbers, got \(\)"),
        ({"weights": (1.0, math.inf)}, "weights\\[1\\] must be a finite real number, got inf"),
        ({"noise_std": -0.5}, "noise_std must be a finite real number >= 0.0, got -0.5"),
    ],
)
def test_linear_regression_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LinearRegression(**kwargs)


# ----------------------------------------------------------------------------- tabular CSV


def write_csv(path, header, rows, delimiter=","):
    lines = [delimiter.join(header)] + [delimiter.join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def regression_csv(tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.normal(3.0, 2.0, 100), rng.normal(-1.0, 0.5, 100)
    rows = [(f"{u:.6f}", f"{v:.6f}", f"{10 + 4 * u - v:.6f}") for u, v in zip(a, b)]
    return write_csv(tmp_path / "reg.csv", ["a", "b", "price"], rows)


def test_csv_regression_splits_and_train_only_standardisation(regression_csv):
    dm = TabularCSV(regression_csv, target="price", seed=4)
    dm.setup()
    assert dm.feature_names == ["a", "b"] and dm.input_shape == (2,)
    sizes = [len(d) for d in (dm.train_data, dm.val_data, dm.test_data)]
    assert sizes == [60, 30, 10]
    x, y = dm.train_data.tensors
    assert torch.allclose(x.mean(0), torch.zeros(2), atol=1e-5) and torch.allclose(x.std(0, correction=0), torch.ones(2))
    assert abs(float(y.mean())) < 1e-5 and abs(float(y.std(correction=0)) - 1) < 1e-5
    raw = np.loadtxt(regression_csv, delimiter=",", skiprows=1)
    raw_y = torch.from_numpy(raw[:, 2]).float()
    train_raw = dm.unstandardize_target(y)
    rows = [int(torch.argmin((raw_y - v).abs())) for v in train_raw]
    assert torch.allclose(train_raw, raw_y[rows], atol=1e-4)
    assert dm.target_mean == pytest.approx(float(raw[rows, 2].mean()))
    assert dm.target_std == pytest.approx(float(raw[rows, 2].std()))
    assert torch.allclose(dm.feature_mean.double(), torch.from_numpy(raw[rows, :2].mean(0)), atol=1e-5)
    # the other splits use the training statistics, so they are not exactly standardised
    assert float(dm.test_data.tensors[0].mean(0).abs().max()) > 1e-3


def test_csv_split_is_reproducible_and_unstandardised_mode_keeps_values(regression_csv):
    a, b = TabularCSV(regression_csv, target="price", seed=1), TabularCSV(regression_csv, target="price", seed=1)
    a.setup(), b.setup()
    assert torch.equal(a.test_data.tensors[0], b.test_data.tensors[0])
    raw = TabularCSV(regression_csv, target="price", standardize=False, splits=(0.5, 0.25, 0.25))
    raw.setup()
    assert [len(d) for d in (raw.train_data, raw.val_data, raw.test_data)] == [50, 25, 25]
    assert (raw.target_mean, raw.target_std) == (0.0, 1.0)
    x, y = raw.train_data.tensors
    assert torch.allclose(y, 10 + 4 * x[:, 0] - x[:, 1], atol=1e-4)


def test_csv_classification_with_split_column_and_delimiter(tmp_path):
    rows = [(i, i % 3, ("train", "VAL", "test", "train")[i % 4], 0.5 * i) for i in range(12)]
    path = write_csv(tmp_path / "cls.csv", ["f1", "label", "part", "f2"], rows, delimiter=";")
    dm = TabularCSV(path, target="label", task="classification", split_column="part", delimiter=";", batch_size=4)
    dm.setup()
    assert dm.num_classes == 3 and dm.feature_names == ["f1", "f2"]
    assert [len(d) for d in (dm.train_data, dm.val_data, dm.test_data)] == [6, 3, 3]
    x, y = dm.val_data.tensors
    assert y.dtype == torch.int64 and y.tolist() == [1, 2, 0]
    assert dm.target_mean == 0.0 and dm.target_std == 1.0
    assert TabularCSV(path, "label", "classification", num_classes=5, split_column="part", delimiter=";").num_classes == 5


@pytest.mark.parametrize(
    "header, rows, kwargs, error, message",
    [
        (["a", "b"], [(1, 2)], {"target": "y"}, ValueError, r"target: no column 'y' in .* columns are \['a', 'b'\]"),
        (["a", "y"], [(1, 2), ("nan", 3)], {}, ValueError, "feature column 'a': missing value 'nan' at row 3"),
        (["a", "y"], [(1, 2), (2, "")], {}, ValueError, "target column 'y': missing value '' at row 3"),
        (["a", "city", "y"], [(1, "Oslo", 2)], {}, ValueError, "feature column 'city' is not numeric: row 2 holds 'Oslo'"),
        (["a", "y"], [(1, 2)], {"splits": (0.6, 0.3, 0.2)}, ValueError, r"splits must be three fractions .* \(sum 1.1\)"),
        (["a", "y"], [(1, 2)], {"splits": (0.0, 0.5, 0.5)}, ValueError, "train > 0"),
        (["a", "y"], [(1, 2)], {"splits": (0.5, 0.5)}, ValueError, r"splits must be three fractions"),
        (["a", "y"], [(1, 0), (2, 4)], {"task": "classification", "num_classes": 3}, ValueError,
         "target column 'y': row 3 holds label 4, allowed are 0..2"),
        (["a", "y"], [(1, 0), (2, 1.5)], {"task": "classification"}, ValueError, "row 3 holds 1.5, class labels must be"),
        (["a", "y"], [(1, 0), (2, 0)], {"task": "classification"}, ValueError, "labels span only 1 class"),
        (["a", "y"], [(1, 2)], {"split_column": "fold"}, ValueError, "split_column: no column 'fold'"),
        (["a", "s", "y"], [(1, "dev", 2)], {"split_column": "s"}, ValueError, "split_column 's': row 2 holds 'dev'"),
        (["a", "y"], [(1, 2, 3)], {}, ValueError, "row 2 of .* has 3 fields, the header has 2"),
        (["a", "a", "y"], [(1, 2, 3)], {}, ValueError, r"duplicate column names \['a'\]"),
        (["y"], [(1,)], {}, ValueError, "no feature column besides target 'y'"),
        (["a", "y"], [], {}, ValueError, "has a header but no data rows"),
        (["a", "y"], [(1, 2)], {"delimiter": ";;"}, ValueError, "delimiter must be a single character, got ';;'"),
        (["a", "y"], [(1, 2)], {"task": "regression", "num_classes": 2}, ValueError, "num_classes must be None"),
        (["a", "y"], [(1, 2), (2, 3)], {"splits": (0.2, 0.4, 0.4)}, ValueError, "leave no training row out of 2"),
    ],
)
def test_csv_bad_inputs(tmp_path, header, rows, kwargs, error, message):
    path = write_csv(tmp_path / "bad.csv", header, rows)
    kwargs = {"target": "y", **kwargs}
    with pytest.raises(error, match=message):
        TabularCSV(path, **kwargs).setup()


def test_csv_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="path: no CSV file at .*nowhere.csv"):
        TabularCSV(tmp_path / "nowhere.csv", target="y")


# ----------------------------------------------------------------------------- torchvision images


def _images(n, shape, seed):
    return np.random.default_rng(seed).integers(0, 256, size=(n, *shape), dtype=np.uint8)


def write_mnist(root, folder, n_train=24, n_test=12):
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    for prefix, n, seed in (("train", n_train, 0), ("t10k", n_test, 1)):
        images, labels = _images(n, (28, 28), seed), np.arange(n, dtype=np.uint8) % 10
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())
    return images, labels  # the test split


def write_cifar10(root, per_batch=4, n_test=8):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        n = n_test if name == "test_batch" else per_batch
        entry = {"data": _images(n, (3 * 32 * 32,), i), "labels": [(i + j) % 10 for j in range(n)]}
        (folder / name).write_bytes(pickle.dumps(entry))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [str(c) for c in range(10)]}))
    return entry


def write_svhn(root, n_train=20, n_test=10):
    root.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train_32x32.mat", n_train, 0), ("test_32x32.mat", n_test, 1)):
        labels = (np.arange(n) % 10 + 1).reshape(n, 1).astype(np.uint8)  # 10 means digit 0
        scipy.io.savemat(root / name, {"X": _images(32, (32, 3, n), seed), "y": labels})


@pytest.fixture
def skip_md5(monkeypatch):
    monkeypatch.setattr(torchvision.datasets.CIFAR10, "_check_integrity", lambda self: True)
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda path, md5=None: True)
    monkeypatch.setattr(torchvision.datasets.svhn, "check_integrity", lambda path, md5=None: True)


@pytest.mark.parametrize("name, folder", [("mnist", "MNIST"), ("fashion_mnist", "FashionMNIST")])
def test_mnist_like_reads_idx_files(tmp_path, name, folder):
    images, labels = write_mnist(tmp_path, folder)
    dm = TorchvisionImages(name, root=tmp_path, standardize="none")
    dm.setup()
    assert (dm.num_classes, dm.input_shape, dm.num_train) == (10, (1, 28, 28), 24)
    x, y = dm.test_data.tensors
    assert x.shape == (12, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.allclose(x[:, 0], torch.from_numpy(images).float() / 255)
    assert y.tolist() == labels.tolist()


@pytest.mark.parametrize("standardize, flatten", [("global", True), ("per_channel", False), ("none", True)])
def test_raw_uint8_images_take_the_transform_saved_with_the_run(tmp_path, standardize, flatten):
    """What load_run's predict applies to raw images: the same inputs the DataModule gave its test split."""
    images, _ = write_mnist(tmp_path, "MNIST")
    dm = TorchvisionImages("mnist", root=tmp_path, standardize=standardize, flatten=flatten)
    dm.setup()
    raw = torch.from_numpy(images)  # (12, 28, 28) uint8, as torchvision reads the files
    transformed = transform_raw_inputs(dm.input_transform(), raw)
    torch.testing.assert_close(transformed, dm.test_data.tensors[0])
    torch.testing.assert_close(transform_raw_inputs(dm.input_transform(), raw.float() / 255), transformed)


def test_global_standardisation_from_train_and_own_statistics(tmp_path):
    write_mnist(tmp_path, "MNIST")
    train_stats = TorchvisionImages("mnist", root=tmp_path, standardize="global", flatten=True)
    train_stats.setup()
    x = train_stats.train_data.tensors[0]
    assert x.shape == (24, 784) and train_stats.input_shape == (784,)
    assert abs(float(x.mean())) < 1e-4 and abs(float(x.std(correction=0)) - 1) < 1e-4
    test_x = train_stats.test_data.tensors[0]
    assert abs(float(test_x.mean())) > 1e-4  # test set standardised with the train statistics
    own = TorchvisionImages("mnist", root=tmp_path, standardize="global", stats_from="own", flatten=True)
    own.setup()
    test_x = own.test_data.tensors[0]
    assert abs(float(test_x.mean())) < 1e-4 and abs(float(test_x.std(correction=0)) - 1) < 1e-4
    assert torch.allclose(own.train_data.tensors[0], x)


def test_cifar10_per_channel_standardisation_and_validation_split(tmp_path, skip_md5):
    test_entry = write_cifar10(tmp_path)
    dm = TorchvisionImages("cifar10", root=tmp_path, num_val=0.25, batch_size=5)
    dm.setup()
    assert dm.input_shape == (3, 32, 32) and dm.num_train == 15 and len(dm.val_data) == 5
    x = dm.train_data.tensors[0]
    assert torch.allclose(x.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)
    assert torch.allclose(x.std(dim=(0, 2, 3), correction=0), torch.ones(3), atol=1e-5)
    assert dm.test_data.tensors[1].tolist() == test_entry["labels"]
    raw = TorchvisionImages("cifar10", root=tmp_path, standardize="none")
    raw.setup()
    expected = torch.from_numpy(test_entry["data"]).reshape(-1, 3, 32, 32).float() / 255
    assert torch.allclose(raw.test_data.tensors[0], expected)
    again = TorchvisionImages("cifar10", root=tmp_path, num_val=5)
    again.setup()
    assert torch.equal(again.val_data.tensors[0], dm.val_data.tensors[0])


def test_num_train_keeps_a_seeded_subset_of_the_training_images_and_the_same_validation_split(tmp_path):
    write_mnist(tmp_path, "MNIST")  # 24 training images
    full = TorchvisionImages("mnist", root=tmp_path, standardize="none", flatten=True, num_val=4)
    part = TorchvisionImages("mnist", root=tmp_path, standardize="none", flatten=True, num_val=4, num_train=7)
    for dm in (full, part):
        dm.setup()
    assert (full.num_train, part.num_train) == (20, 7)
    assert torch.equal(part.val_data.tensors[0], full.val_data.tensors[0])
    full_rows = {tuple(row.tolist()) for row in full.train_data.tensors[0]}
    part_x = part.train_data.tensors[0]
    assert all(tuple(row.tolist()) in full_rows for row in part_x)
    again = TorchvisionImages("mnist", root=tmp_path, standardize="none", flatten=True, num_val=4, num_train=7)
    again.setup()
    assert torch.equal(again.train_data.tensors[0], part_x)
    with pytest.raises(ValueError, match="num_train=21 exceeds the 20 training images"):
        TorchvisionImages("mnist", root=tmp_path, num_val=4, num_train=21).setup()
    with pytest.raises(ValueError, match="num_train"):
        TorchvisionImages("mnist", root=tmp_path, num_train=0)


def test_svhn_labels_map_ten_to_zero(tmp_path, skip_md5):
    write_svhn(tmp_path)
    dm = TorchvisionImages("svhn", root=tmp_path, standardize="none", flatten=True)
    dm.setup()
    x, y = dm.train_data.tensors
    assert x.shape == (20, 3 * 32 * 32) and float(x.min()) >= 0 and float(x.max()) <= 1
    assert y.tolist() == [(i + 1) % 10 for i in range(20)]
    assert int(y.min()) == 0 and int(y.max()) == 9


def test_test_transform_changes_test_inputs_only_and_train_transform_the_train_split(tmp_path):
    images, _ = write_mnist(tmp_path, "MNIST")
    invert = torchvision.transforms.RandomInvert(p=1.0)
    plain = TorchvisionImages("mnist", root=tmp_path, standardize="none", num_val=4)
    shifted = TorchvisionImages("mnist", root=tmp_path, standardize="none", num_val=4, test_transform=invert)
    augmented = TorchvisionImages("mnist", root=tmp_path, standardize="none", num_val=4, train_transform=invert)
    for dm in (plain, shifted, augmented):
        dm.setup()
    assert torch.allclose(shifted.test_data.tensors[0], 1 - plain.test_data.tensors[0])
    assert torch.equal(shifted.train_data.tensors[0], plain.train_data.tensors[0])
    assert torch.allclose(augmented.train_data.tensors[0], 1 - plain.train_data.tensors[0])
    assert torch.equal(augmented.val_data.tensors[0], plain.val_data.tensors[0])
    assert torch.equal(augmented.test_data.tensors[0], plain.test_data.tensors[0])


def test_random_transforms_are_seeded_and_leave_the_global_rng_alone(tmp_path):
    write_mnist(tmp_path, "MNIST")
    rotate = torchvision.transforms.RandomRotation((-30, 30))

    def rotated(seed):
        dm = TorchvisionImages("mnist", root=tmp_path, standardize="none", seed=seed, test_transform=rotate)
        dm.setup()
        return dm.test_data.tensors[0]

    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first = rotated(0)
    assert torch.equal(torch.rand(1), before)
    assert torch.equal(first, rotated(0)) and not torch.equal(first, rotated(1))


def test_transform_that_changes_the_shape_is_rejected(tmp_path):
    write_mnist(tmp_path, "MNIST")
    crop = torchvision.transforms.CenterCrop(20)
    with pytest.raises(ValueError, match=r"test_transform must map .* shape \(1, 20, 20\) from shape \(1, 28, 28\)"):
        TorchvisionImages("mnist", root=tmp_path, test_transform=crop).setup()


@pytest.mark.parametrize(
    "name, expected",
    [
        ("mnist", ["MNIST/raw", "train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]),
        ("fashion_mnist", ["FashionMNIST/raw", "train-labels-idx1-ubyte"]),
        ("cifar10", ["cifar-10-batches-py", "data_batch_5", "test_batch", "batches.meta"]),
        ("svhn", ["train_32x32.mat", "test_32x32.mat"]),
    ],
)
def test_missing_files_error_says_what_to_put_where(tmp_path, name, expected):
    dm = TorchvisionImages(name, root=tmp_path / "empty")
    with pytest.raises(FileNotFoundError) as info:
        dm.setup()
    message = str(info.value)
    assert all(part in message for part in expected) and "download=True" in message
    assert str((tmp_path / "empty").resolve()) in message


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "imagenet"}, "name must be one of 'mnist', 'fashion_mnist', 'cifar10', 'svhn'; got 'imagenet'"),
        ({"standardize": "l2"}, "standardize must be one of 'per_channel', 'global', 'none'; got 'l2'"),
        ({"stats_from": "test"}, "stats_from must be one of 'train', 'own'; got 'test'"),
        ({"num_val": 1.0}, r"num_val as a fraction must lie in \[0, 1\), got 1.0"),
        ({"num_val": -3}, "num_val must be an integer >= 0, got -3"),
        ({"flatten": "yes"}, "flatten must be True or False, got 'yes'"),
        ({"test_transform": 3}, "test_transform must be a callable"),
        ({"batch_size": 0}, r"batch_size must be a positive integer or None \(one batch\), got 0"),
    ],
)
def test_images_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TorchvisionImages(**{"name": "mnist", **kwargs})


def test_images_num_val_must_leave_training_images(tmp_path):
    write_mnist(tmp_path, "MNIST")
    with pytest.raises(ValueError, match="num_val=24 leaves no training image out of 24"):
        TorchvisionImages("mnist", root=tmp_path, num_val=24).setup()
