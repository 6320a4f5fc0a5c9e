"""ArrayDataModule: in-memory arrays, .npz/.npy files, seeded splits, train-only standardisation, bad input."""
import json

import lightning as L
import numpy as np
import pytest
import torch

from lit_bayes import SGMCMC, Categorical, GaussianPrior, load_run
from lit_bayes.callbacks import PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.cli import main
from lit_bayes.data import ArrayDataModule
from lit_bayes.models import MLP


def blobs(n=120, d=3, seed=0):
    """Features on different scales and offsets; the label is a linear threshold."""
    rng = np.random.default_rng(seed)
    x = rng.normal(loc=[5.0, -2.0, 0.0][:d], scale=[3.0, 0.5, 10.0][:d], size=(n, d))
    y = ((x[:, 0] - 5.0) / 3.0 + (x[:, 1] + 2.0) / 0.5 > 0).astype(np.int64)
    return x, y


@pytest.mark.filterwarnings("ignore")
def test_sgld_fits_and_tests_on_numpy_arrays(tmp_path):
    x, y = blobs()
    data = ArrayDataModule(x=x, y=y, task="classification", val_fraction=0.2, test_fraction=0.2, batch_size=24)
    sampler = SGMCMC(MLP([3, 8, 2]), Categorical(2), GaussianPrior(variance=1.0), stepper="sgld", step_size=1e-3,
                     num_chains=2, burn_in=2, thinning=1, seed=0)
    callbacks = [PosteriorSamples(max_draws=20), PredictiveMarginal(), UncertaintyMetrics()]
    trainer = L.Trainer(max_epochs=2, callbacks=callbacks, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, accelerator="cpu", devices=1,
                        default_root_dir=tmp_path)
    trainer.fit(sampler, datamodule=data)
    (metrics,) = trainer.test(sampler, datamodule=data)
    assert data.num_train == 72 and data.num_classes == 2 and data.input_shape == (3,)
    assert trainer.global_step == 6  # 72 points in batches of 24, two epochs
    assert 0.0 <= metrics["test/accuracy"] <= 1.0 and np.isfinite(metrics["test/nlpd"])


def test_cli_fit_from_a_yaml_naming_an_npz_file(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, 2)) * [2.0, 0.1] + [10.0, 0.0]
    y = x[:, 0] * 0.5 - 3 * x[:, 1] + 0.1 * rng.normal(size=60)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    config = tmp_path / "arrays.yaml"
    config.write_text(f"""\
seed_everything: 0
trainer:
  max_epochs: 2
  default_root_dir: {tmp_path / "runs"}
model:
  class_path: lit_bayes.SGMCMC
  init_args:
    model:
      class_path: lit_bayes.models.MLP
      init_args:
        widths: [2, 8, 1]
    likelihood:
      class_path: lit_bayes.Gaussian
      init_args:
        noise_std: 1.0
    stepper: sgld
    step_size: 1.0e-3
    num_chains: 2
    burn_in: 2
data:
  class_path: lit_bayes.data.ArrayDataModule
  init_args:
    path: {tmp_path / "data.npz"}
    task: regression
    batch_size: 16
""")
    main(["fit", "-c", str(config), "--wandb", "false", "--trainer.enable_progress_bar", "false",
          "--trainer.limit_train_batches", "3"])
    (summary_file,) = (tmp_path / "runs").rglob("summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["dataset"] == "ArrayDataModule" and summary["steps"] == 6
    assert "test/nlpd" in summary["metrics"]


def test_a_reloaded_run_standardises_raw_inputs_as_its_datamodule_did(tmp_path):
    """Features far from 0 and 1 in scale: load_run(...).predict on the raw test inputs gives the run's own
    test predictive (the DataModule's standardisation is saved with the run); transformed=True skips it."""
    x, y = blobs(n=200)
    x = x * [30.0, 0.2, 5.0] + [500.0, -3.0, 40.0]
    np.savez(tmp_path / "data.npz", x=x, y=y)
    config = tmp_path / "arrays.yaml"
    config.write_text(f"""\
seed_everything: 0
trainer: {{max_epochs: 3, default_root_dir: {tmp_path / "runs"}}}
model:
  class_path: lit_bayes.SGMCMC
  init_args:
    model: {{class_path: lit_bayes.models.MLP, init_args: {{widths: [3, 8, 3]}}}}
    likelihood: {{class_path: lit_bayes.Categorical, init_args: {{num_classes: 3}}}}
    stepper: sgld
    step_size: 1.0e-3
    num_chains: 2
    burn_in: 2
data:
  class_path: lit_bayes.data.ArrayDataModule
  init_args: {{path: {tmp_path / "data.npz"}, task: classification, val_fraction: 0.2, test_fraction: 0.2}}
""")
    main(["fit", "-c", str(config), "--wandb", "false", "--trainer.enable_progress_bar", "false"])
    (summary_file,) = (tmp_path / "runs").rglob("summary.json")
    run = load_run(summary_file.parent)
    raw_x, raw_y = run.datamodule()._split_arrays()["test"]
    own = run.predict_test()
    raw = run.predict(torch.as_tensor(raw_x), torch.as_tensor(raw_y))
    torch.testing.assert_close(raw.log_probs, own.log_probs)
    assert torch.allclose(raw.log_prob_target, own.log_prob_target)
    unscaled = run.predict(torch.as_tensor(raw_x), transformed=True)  # what raw inputs gave before
    assert not torch.allclose(unscaled.log_probs, own.log_probs, atol=1e-2)
    torch.testing.assert_close(run.predict(raw_x).log_probs, own.log_probs)  # a numpy array
    bad = raw_x.copy()
    bad[3, 1] = np.nan
    for x, match in ((raw_x[:, :2], r"points of shape \(2,\).*points of shape \(3,\)"),
                     (raw_x[:0], "n >= 1"), (raw_x[0], r"x\[None\] for one point"), (bad, r"NaN .* rows \[3\]")):
        with pytest.raises(ValueError, match=match):
            run.predict(x)


def test_standardisation_uses_training_statistics_for_every_split():
    x, y = blobs(n=200)
    data = ArrayDataModule(x=x, y=y, task="classification", val_fraction=0.25, test_fraction=0.25, seed=3)
    data.setup()
    train, val, test = (split.tensors[0].double() for split in (data.train_data, data.val_data, data.test_data))
    assert torch.allclose(train.mean(0), torch.zeros(3, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(train.std(0, unbiased=False), torch.ones(3, dtype=torch.float64), atol=1e-5)
    raw = data._split_arrays()  # the same seeded split, before standardisation
    mean, std = raw["train"][0].mean(0), raw["train"][0].std(0)
    for split, transformed in (("val", val), ("test", test)):
        expected = torch.from_numpy((raw[split][0] - mean) / std)
        assert torch.allclose(transformed, expected, atol=1e-5), split
        own = torch.from_numpy((raw[split][0] - raw[split][0].mean(0)) / raw[split][0].std(0))
        assert not torch.allclose(transformed, own, atol=1e-3), split  # not its own statistics
    assert torch.allclose(data.feature_mean.double(), torch.from_numpy(mean), atol=1e-4)


def test_global_and_no_standardisation_and_regression_targets():
    rng = np.random.default_rng(2)
    x_train, x_test = rng.normal(3.0, 2.0, size=(50, 2, 2)), rng.normal(size=(10, 2, 2))
    y_train, y_test = rng.normal(4.0, 3.0, size=50), rng.normal(size=10)
    data = ArrayDataModule(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, task="regression",
                           standardize="global")
    data.setup()
    train = data.train_data.tensors[0].double()
    assert data.input_shape == (2, 2) and len(data.val_data) == 0
    assert abs(train.mean().item()) < 1e-5 and abs(train.std(unbiased=False).item() - 1) < 1e-5
    expected = (x_test - x_train.mean()) / x_train.std()
    assert np.allclose(data.test_data.tensors[0].numpy(), expected, atol=1e-5)
    y_std = data.train_data.tensors[1].double()
    assert abs(y_std.mean().item()) < 1e-5 and abs(y_std.std(unbiased=False).item() - 1) < 1e-5
    assert np.allclose(data.unstandardize_target(data.test_data.tensors[1]).numpy(), y_test, atol=1e-4)

    raw = ArrayDataModule(x_train=torch.from_numpy(x_train), y_train=torch.from_numpy(y_train), task="regression",
                          standardize="none")
    raw.setup()
    assert np.allclose(raw.train_data.tensors[0].numpy(), x_train, atol=1e-5)
    assert np.allclose(raw.train_data.tensors[1].numpy(), y_train, atol=1e-5) and raw.target_std == 1.0


def test_split_fractions_are_seeded_and_disjoint():
    n = 101
    x = np.arange(n, dtype=np.float64)[:, None]  # each point's value is its row: splits are readable
    y = np.arange(n) % 3

    def rows(seed):
        data = ArrayDataModule(x=x, y=y, task="classification", val_fraction=0.2, test_fraction=0.3,
                               standardize="none", seed=seed)
        data.setup()
        return [set(s.tensors[0][:, 0].long().tolist()) for s in (data.train_data, data.val_data, data.test_data)]

    train, val, test = rows(5)
    assert (len(train), len(val), len(test)) == (n - 20 - 30, 20, 30)
    assert not (train & val or train & test or val & test) and train | val | test == set(range(n))
    assert rows(5) == [train, val, test]
    assert rows(6) != [train, val, test]


def test_npz_with_ready_splits_and_npy_paths(tmp_path):
    x, y = blobs(n=40)
    np.savez(tmp_path / "splits.npz", x_train=x[:30], y_train=y[:30], x_val=x[30:], y_val=y[30:])
    from_npz = ArrayDataModule(path=tmp_path / "splits.npz", task="classification", num_classes=3)
    from_npz.setup()
    assert (from_npz.num_train, len(from_npz.val_data), len(from_npz.test_data)) == (30, 10, 0)
    assert from_npz.num_classes == 3
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    from_npy = ArrayDataModule(x_train=str(tmp_path / "x.npy"), y_train=tmp_path / "y.npy", task="classification")
    from_npy.setup()
    assert from_npy.num_train == 40 and torch.equal(from_npy.train_data.tensors[1], torch.from_numpy(y))


def bad_inputs(tmp_path):
    x, y = blobs(n=20)
    np.savez(tmp_path / "no_y.npz", x_train=x)
    return [
        (dict(x_train=x, y_train=y[:-1], task="classification"), "x_train has 20 points but y_train has 19"),
        (dict(x=x, y=np.where(np.arange(20) == 3, np.nan, y.astype(float)), task="regression"), "y contains NaN"),
        (dict(x_train=np.where(x > 6, np.inf, x), y_train=y, task="classification"), "x_train contains NaN or inf"),
        (dict(x_train=x, y_train=y.astype(float), task="classification"), "y_train must hold integer class labels"),
        (dict(x_train=x.astype(str), y_train=y, task="classification"), "x_train must hold real numbers"),
        (dict(x_train=x, y_train=y, x_test=x[:, :2], y_test=y, task="classification"), "x_test has point shape"),
        (dict(x_train=x, y_train=y, num_classes=1, task="classification"), "num_classes must be"),
        (dict(x_train=x, y_train=y + 5, num_classes=3, task="classification"), "y_train holds labels in"),
        (dict(x=x, y=y, val_fraction=1.2, task="classification"), "val_fraction must be a number in"),
        (dict(x=x, y=y, test_fraction=-0.1, task="classification"), "test_fraction must be a number in"),
        (dict(x=x, y=y, val_fraction=0.5, test_fraction=0.5, task="classification"), r"val_fraction \+ test_fraction"),
        (dict(x_train=x, y_train=y, val_fraction=0.2, task="classification"), "val_fraction is only used"),
        (dict(x_train=x, y_train=y, x_val=x, task="classification"), "y_val: missing"),
        (dict(x=x, y=y, x_train=x, y_train=y, task="classification"), "exclude each other"),
        (dict(path=tmp_path / "no_y.npz", task="classification"), "path: .* has no key 'y_train'"),
        (dict(path=tmp_path / "no_y.npz", x=x, y=y, task="classification"), "path: give either path or arrays"),
        (dict(x_train="nothing.npy", y_train=y, task="classification"), "x_train: a path must name"),
        (dict(task="classification"), "x_train: no data given"),
        (dict(x_train=x, y_train=y, task="ranking"), "task must be one of"),
        (dict(x_train=x, y_train=y, task="classification", standardize="per_pixel"), "standardize must be one of"),
        (dict(x_train=x, y_train=y, task="classification", standardize_target=True), "standardize_target"),
    ]


def test_bad_inputs_raise_value_errors_naming_the_argument(tmp_path):
    for kwargs, message in bad_inputs(tmp_path):
        with pytest.raises(ValueError, match=message):
            ArrayDataModule(**kwargs)
