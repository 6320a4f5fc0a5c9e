"""The real-data pieces: scikit-learn's bundled sets, chains started at MAP fits, layer-scaled priors, the deep
ensemble baseline, the worse_than_map reason, the SmallCNN, the recipes under recipes/real and the suite."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from lit_bayes import SGMCMC, Bernoulli, BlockGibbs, Categorical, Gaussian, GaussianPrior, StructuredSGMCMC
from lit_bayes.callbacks import MAPBaseline, PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.cli import main
from lit_bayes.data import LinearRegression, ScikitLearnData, TwoMoons
from lit_bayes.health import RunRecord, assess
from lit_bayes.map_fit import MapFit
from lit_bayes.models import MLP, SmallCNN
from tests.gaussian_targets import conjugate_linear_regression

ROOT = Path(__file__).resolve().parents[1]
TRAINER = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


def test_scikit_learn_sets_split_by_seed_and_standardise_on_the_training_split():
    data = ScikitLearnData("breast_cancer", val_fraction=0.2, test_fraction=0.3, seed=3)
    data.setup("fit")
    sizes = [len(d) for d in (data.train_data, data.val_data, data.test_data)]
    assert sizes == [569 - 114 - 171, 114, 171]
    x, y = data.train_data.tensors
    assert torch.allclose(x.mean(0), torch.zeros(30), atol=1e-5) and y.dtype == torch.int64
    again = ScikitLearnData("breast_cancer", val_fraction=0.2, test_fraction=0.3, seed=3)
    again.setup("fit")
    assert torch.equal(again.test_data.tensors[0], data.test_data.tensors[0])
    diabetes = ScikitLearnData("diabetes")
    diabetes.setup("fit")
    assert diabetes.task == "regression" and abs(float(diabetes.train_data.tensors[1].mean())) < 1e-5
    with pytest.raises(ValueError, match="name"):
        ScikitLearnData("mnist")


class StartingState(Callback):
    """The chains as the first step finds them."""

    def on_train_start(self, trainer, pl_module) -> None:
        self.chains = pl_module.chains.flat().clone()


def test_init_map_starts_every_chain_at_the_map_of_the_posterior(tmp_path):
    """Bayesian linear regression: the MAP is the posterior mean, which every chain reaches from its prior draw."""
    data = LinearRegression(num_train=50, num_val=10, num_test=10, batch_size=None, seed=1)
    sampler = SGMCMC(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), stepper="sgld", step_size=1e-4,
                     num_chains=4, init="map", init_options={"steps": 1500, "lr": 0.05, "batch_size": None}, seed=0)
    start = StartingState()
    L.Trainer(max_steps=1, callbacks=[start], limit_val_batches=0, default_root_dir=tmp_path, **TRAINER).fit(
        sampler, datamodule=data)
    mean, _ = conjugate_linear_regression(*data.train_data.tensors, noise_var=1.0, prior_var=1.0)
    assert torch.allclose(start.chains.double(), mean.expand(4, -1), atol=1e-3)


def test_init_options_are_checked():
    with pytest.raises(ValueError, match="init_options are the options of init='map'"):
        SGMCMC(MLP([1, 2, 1]), Gaussian(), init="prior", init_options={"steps": 3})
    with pytest.raises(ValueError, match=r"init_options takes steps, lr and batch_size, got unknown \['step'\]"):
        SGMCMC(MLP([1, 2, 1]), Gaussian(), init="map", init_options={"step": 3})
    with pytest.raises(ValueError, match="steps"):
        MapFit(steps=0)


def test_fan_in_scaled_prior_divides_each_weights_variance_by_its_fan_in():
    prior = GaussianPrior(2.0, group_variances={"net.layers.1.*": 8.0}, fan_in_scaled=True)
    SGMCMC(MLP([5, 4, 3]), Categorical(3), prior)
    assert prior.variance_of("net.layers.0.weight") == pytest.approx(2.0 / 5)
    assert prior.variance_of("net.layers.0.bias") == 2.0
    assert prior.variance_of("net.layers.1.weight") == pytest.approx(8.0 / 4)
    conv = GaussianPrior(1.0, fan_in_scaled=True)
    conv.bind({"net.conv.weight": (8, 3, 5, 5)}, 1)
    assert conv.variance_of("net.conv.weight") == pytest.approx(1 / 75)
    with pytest.raises(ValueError, match="does not know the shape of 'net.other'"):
        conv.variance_of("net.other")
    with pytest.raises(ValueError, match="fan_in_scaled"):
        GaussianPrior(1.0, fan_in_scaled="yes")


def test_deep_ensemble_baseline_fits_members_from_their_own_starts(tmp_path):
    data = ScikitLearnData("iris", batch_size=None, seed=0)
    sampler = SGMCMC(MLP([4, 8, 3]), Categorical(3), GaussianPrior(1.0), stepper="sgld", step_size=1e-4,
                     num_chains=2, burn_in=2, seed=0)
    baseline = MAPBaseline(steps=200, ensemble=3)
    callbacks = [PosteriorSamples(), PredictiveMarginal(), UncertaintyMetrics(), baseline]
    trainer = L.Trainer(max_steps=6, callbacks=callbacks, default_root_dir=tmp_path, **TRAINER)
    trainer.fit(sampler, datamodule=data)
    trainer.test(sampler, datamodule=data)
    metrics = baseline.summary_metrics()
    assert {"baseline/map/test/nlpd", "baseline/ensemble/test/nlpd", "baseline/ensemble/test/ece"} <= set(metrics)
    members = baseline.ensemble_params["net.layers.0.weight"]
    assert members.shape[0] == 3 and not torch.allclose(members[0], members[1])
    assert baseline.validation_nlpd(trainer, sampler) > 0


def test_a_posterior_that_predicts_worse_than_map_on_validation_warns():
    plain = dict(steps=10, burn_in=0, thinning=1, chains=1, draws_per_chain=10)
    worse = assess(RunRecord(**plain, heldout_nlpd=0.30, map_heldout_nlpd=0.20))
    reason = next(r for r in worse.reasons if r.code == "worse_than_map")
    assert reason.severity == "warning" and "0.3000" in reason.message and "0.2000" in reason.message
    assert "LearnedScalePrior" in reason.advice and "temperature" in reason.advice
    better = assess(RunRecord(**plain, heldout_nlpd=0.10, map_heldout_nlpd=0.20))
    assert "worse_than_map" not in [r.code for r in better.reasons]
    assert "worse_than_map" not in [r.code for r in assess(RunRecord(**plain, heldout_nlpd=0.3)).reasons]


def test_small_cnn_is_sampled_over_chains():
    net = SmallCNN((1, 16, 16), channels=(2, 3), num_classes=4)
    sampler = SGMCMC(net, Categorical(4), GaussianPrior(1.0), num_chains=3, init="prior")
    chains = sampler.initial_state(torch.Generator().manual_seed(0))
    outputs = sampler.outputs(chains, torch.randn(5, 1, 16, 16))
    assert outputs.shape == (3, 5, 4)
    with pytest.raises(ValueError, match="too small"):
        SmallCNN((1, 8, 8))


@pytest.mark.parametrize("recipe", ["tabular.yaml", "mnist_mlp.yaml", "mnist_cnn.yaml"])
def test_real_data_recipes_run_at_tiny_size(recipe, tmp_path):
    args = ["fit", "-c", str(ROOT / "recipes" / "real" / recipe), "--trainer.default_root_dir", str(tmp_path),
            "--wandb", "false", "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3",
            "--trainer.check_val_every_n_epoch", "1", "--trainer.enable_progress_bar", "false",
            "--model.init_args.init_options", json.dumps({"steps": 5, "batch_size": 32}),
            "--trainer.callbacks.init_args.steps", "5"]
    if recipe.startswith("mnist"):
        mnist = tmp_path / "MNIST" / "raw"
        write_mnist_files(mnist, 300)
        args += ["--data.init_args.root", str(tmp_path), "--data.init_args.num_train", "100",
                 "--data.init_args.num_val", "50"]
    main(args)
    (summary,) = tmp_path.rglob("summary.json")
    metrics = json.loads(summary.read_text())["metrics"]
    assert {"test/nlpd", "baseline/map/test/nlpd", "baseline/ensemble/test/nlpd"} <= set(metrics)


def write_mnist_files(folder: Path, count: int) -> None:
    """MNIST's four IDX files with ``count`` random images each (the format torchvision reads)."""
    folder.mkdir(parents=True)
    generator = torch.Generator().manual_seed(0)
    for prefix in ("train", "t10k"):
        images = torch.randint(0, 256, (count, 28, 28), generator=generator, dtype=torch.uint8)
        labels = torch.arange(count, dtype=torch.uint8) % 10
        header = (2051).to_bytes(4, "big") + count.to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
        (folder / f"{prefix}-images-idx3-ubyte").write_bytes(header + images.numpy().tobytes())
        (folder / f"{prefix}-labels-idx1-ubyte").write_bytes((2049).to_bytes(4, "big") + count.to_bytes(4, "big")
                                                              + labels.numpy().tobytes())


def test_suite_prints_its_table_and_a_json_line(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import real_data

    monkeypatch.setattr(real_data, "MNIST_FILES", tmp_path / "missing")
    result = real_data.main(["--datasets", "breast_cancer,mnist_mlp", "--root", str(tmp_path), "--epochs", "2"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == json.loads(json.dumps(result))
    (row,) = result["rows"]
    assert result["skipped"] == ["mnist_mlp"]
    for key in ("dataset", "nlpd", "map_nlpd", "ensemble_nlpd", "ece", "map_ece", "verdict", "wall_s"):
        assert key in row
    assert row["dataset"] == "breast_cancer" and row["nlpd"] > 0 and row["ensemble_nlpd"] > 0
    sys.modules.pop("real_data", None)


@pytest.mark.parametrize("family", ["block_gibbs", "structured"])
def test_init_map_serves_the_other_samplers_that_take_it(family, tmp_path):
    net, lik = MLP([2, 4, 1]), Bernoulli()
    options = dict(num_chains=2, init="map", init_options={"steps": 300, "lr": 0.05}, seed=1)
    if family == "block_gibbs":
        sampler = BlockGibbs(net, lik, GaussianPrior(1.0), blocks="layer", minibatch_scaling="rescaled", **options)
    else:
        sampler = StructuredSGMCMC(net, lik, GaussianPrior(1.0), step_size=1e-4, **options)
    data = TwoMoons(num_train=64, num_val=16, num_test=16, batch_size=None, seed=0)
    start = StartingState()
    L.Trainer(max_steps=1, callbacks=[start], limit_val_batches=0, default_root_dir=tmp_path, **TRAINER).fit(
        sampler, datamodule=data)
    prior_draws = sampler.initial_state(sampler.stream_generator("init", torch.device("cpu")))
    x, y = data.train_data.tensors
    fitted = sampler.chains.unflatten(start.chains)
    assert (sampler.energy(fitted, x, y) < sampler.energy(prior_draws, x, y)).all()
