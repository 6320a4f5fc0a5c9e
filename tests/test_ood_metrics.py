"""Out-of-distribution detection: rank-based AUROC / AUPR, the OOD inputs, the OODMetrics callback
and the recipes/ood configs at a tiny size."""
from __future__ import annotations

import json
import math
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from torchmetrics.functional.classification import binary_auroc, binary_average_precision

from lit_bayes import SGMCMC, Bernoulli, Gaussian, GaussianPrior
from lit_bayes.callbacks import MAPBaseline, OODMetrics, PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.cli import main
from lit_bayes.data import FarAwayPoints, SyntheticRegression, TwoMoons
from lit_bayes.data.ood import invert, rotate_90
from lit_bayes.metrics import OODDetection, auroc, average_precision
from lit_bayes.models import MLP
from lit_bayes.predictive import marginal_predictive
from tests.test_data import write_mnist

RECIPES = Path(__file__).resolve().parents[1] / "recipes" / "ood"
TINY = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3", "--model.init_args.burn_in", "2",
        "--trainer.enable_progress_bar", "false", "--wandb", "false"]
SAMPLER_KEYS = {f"test/ood_{score}_{stat}" for score in ("entropy", "mi") for stat in ("auroc", "aupr")}
MAP_KEYS = {f"baseline/map/test/ood_entropy_{stat}" for stat in ("auroc", "aupr")}
OOD = torch.tensor([False, False, True, True])


# ----------------------------------------------------------------------------- AUROC and AUPR


@pytest.mark.parametrize("scores, roc, pr", [
    ([0.1, 0.2, 0.8, 0.9], 1.0, 1.0),                     # perfect separation
    ([0.9, 0.8, 0.2, 0.1], 0.0, 0.5 * 1 / 3 + 0.5 * 1 / 2),  # reversed: P = 1/3 at R = 1/2, 1/2 at R = 1
    ([0.5, 0.5, 0.5, 0.5], 0.5, 0.5),                     # all tied: a coin, AP = share of positives
    ([0.1, 0.5, 0.5, 0.9], (1 + 0.5 + 1 + 1) / 4, 0.5 * 1 + 0.5 * 2 / 3),  # one tied pair counts 1/2
    ([0.1, 0.4, 0.35, 0.8], 3 / 4, 0.5 * 1 + 0.5 * 2 / 3),
])
def test_auroc_and_average_precision_match_hand_computed_cases(scores, roc, pr):
    scores = torch.tensor(scores)
    assert auroc(scores, OOD).item() == pytest.approx(roc)
    assert average_precision(scores, OOD).item() == pytest.approx(pr)


def test_auroc_and_average_precision_agree_with_torchmetrics_and_ignore_monotone_maps():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 8, (300,), generator=generator).float() / 8  # many ties
    positive = torch.rand(300, generator=generator) < 0.3
    assert auroc(scores, positive).item() == pytest.approx(binary_auroc(scores, positive.long()).item(), abs=1e-6)
    assert average_precision(scores, positive).item() == pytest.approx(
        binary_average_precision(scores, positive.long()).item(), abs=1e-6)
    # scores of any range (entropies above 1 nat), only their order counts
    assert auroc(5 * scores.exp(), positive).item() == pytest.approx(auroc(scores, positive).item())
    assert average_precision(5 * scores.exp(), positive).item() == pytest.approx(
        average_precision(scores, positive).item())


def test_bad_scores_and_labels_are_named():
    with pytest.raises(ValueError, match="positive must mark at least one positive and one negative"):
        auroc(torch.rand(4), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="scores and positive"):
        average_precision(torch.rand(4), OOD[:3])
    with pytest.raises(ValueError, match="scores contain NaN"):
        auroc(torch.tensor([0.1, float("nan"), 0.2, 0.3]), OOD)


def test_ood_detection_metric_pools_its_batches():
    metric = OODDetection()
    metric.update(torch.tensor([0.1, 0.6]), out_of_distribution=False)
    metric.update(torch.tensor([0.5, 0.9, 0.7]), out_of_distribution=True)
    metric.update(torch.tensor([0.2]), out_of_distribution=False)
    scores = torch.tensor([0.1, 0.6, 0.5, 0.9, 0.7, 0.2])
    positive = torch.tensor([False, False, True, True, True, False])
    values = metric.compute()
    assert values["auroc"].item() == pytest.approx(auroc(scores, positive).item())
    assert values["aupr"].item() == pytest.approx(average_precision(scores, positive).item())


# ----------------------------------------------------------------------------- OOD inputs


def test_far_away_points_fill_the_shell_reproducibly():
    data = FarAwayPoints(num_points=2000, center=(0.5, 0.25), radius_min=5.0, radius_max=8.0, eval_batch_size=300,
                         seed=3)
    data.setup()
    (x,) = data.test_data.tensors
    assert x.shape == (2000, 2) and x.dtype == torch.float32 and data.input_shape == (2,)
    radius = (x - torch.tensor([0.5, 0.25])).norm(dim=1)
    assert radius.min() >= 5.0 - 1e-5 and radius.max() <= 8.0 + 1e-5
    # uniform in area: half the points inside the radius that halves the annulus (binomial sd 0.011)
    inner = (radius < math.sqrt((5.0**2 + 8.0**2) / 2)).float().mean().item()
    assert abs(inner - 0.5) < 0.05
    batches = list(data.test_dataloader())
    assert [len(b) for b in batches] == [1] * 7 and [len(b[0]) for b in batches] == [300] * 6 + [200]
    again = FarAwayPoints(num_points=2000, center=(0.5, 0.25), radius_min=5.0, radius_max=8.0, seed=3)
    again.setup()
    assert torch.equal(again.test_data.tensors[0], x)
    shell = FarAwayPoints(num_points=500, center=(0.0, 0.0, 0.0), radius_min=2.0, radius_max=2.0)
    shell.setup()
    assert shell.test_data.tensors[0].shape == (500, 3)
    assert torch.allclose(shell.test_data.tensors[0].norm(dim=1), torch.full((500,), 2.0))


@pytest.mark.parametrize("kwargs, match", [
    ({"num_points": 0}, "num_points"),
    ({"center": ()}, "center"),
    ({"center": "ab"}, "center"),
    ({"center": (0.0, float("inf"))}, r"center\[1\]"),
    ({"radius_min": -1.0}, "radius_min"),
    ({"radius_min": 5.0, "radius_max": 4.0}, "radius_max"),
    ({"radius_min": 0.0, "radius_max": 0.0}, "radius_max"),
    ({"eval_batch_size": 0}, "eval_batch_size"),
    ({"seed": -1}, "seed"),
])
def test_far_away_points_name_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FarAwayPoints(**kwargs)


def test_far_away_points_need_setup_before_loading():
    with pytest.raises(RuntimeError, match="setup"):
        FarAwayPoints().test_dataloader()


def test_image_transforms_rotate_and_invert():
    image = torch.arange(6.0).reshape(1, 2, 3) / 6
    with pytest.raises(ValueError, match="square"):
        rotate_90(image)
    square = torch.tensor([[[0.0, 0.1], [0.2, 0.3]]])
    assert torch.equal(rotate_90(square), torch.tensor([[[0.1, 0.3], [0.0, 0.2]]]))
    assert torch.equal(rotate_90(rotate_90(rotate_90(rotate_90(square)))), square)
    assert torch.allclose(invert(square), torch.tensor([[[1.0, 0.9], [0.8, 0.7]]]))


# ----------------------------------------------------------------------------- the callback


def _fit_and_test(callbacks, data=None, model=None, likelihood=None):
    sampler = SGMCMC(model or MLP([2, 8, 1], "tanh"), likelihood or Bernoulli(), GaussianPrior(1.0),
                     stepper="sgld", step_size=1e-3, num_chains=2, burn_in=10)
    data = data or TwoMoons(num_train=40, num_val=0, num_test=60, batch_size=20)
    trainer = L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=callbacks)
    trainer.fit(sampler, datamodule=data)
    trainer.test(sampler, datamodule=data)
    return trainer, sampler, data


def test_callback_reports_the_scores_of_the_sampler_and_of_map():
    ood = FarAwayPoints(num_points=50, center=(0.5, 0.25), eval_batch_size=20)
    samples = PosteriorSamples()
    baseline = MAPBaseline(steps=100)
    callback = OODMetrics(ood)
    trainer, sampler, data = _fit_and_test([samples, PredictiveMarginal(), UncertaintyMetrics(), baseline, callback])

    assert SAMPLER_KEYS <= set(trainer.callback_metrics)
    assert set(callback.summary_metrics()) == MAP_KEYS
    # the logged figures are those of the predictive over the kept draws, recomputed here
    x_in, x_out = data.test_data.tensors[0], ood.test_data.tensors[0]
    positive = torch.cat([torch.zeros(len(x_in)), torch.ones(len(x_out))]).bool()
    draws = samples.samples(sampler)
    map_draws = (baseline.params, torch.zeros(1))
    for prefix, (params, log_weights), scores in (("test/", draws, ("entropy", "mi")),
                                                  ("baseline/map/test/", map_draws, ("entropy",))):
        predictives = [marginal_predictive(sampler, params, log_weights, x) for x in (x_in, x_out)]
        for score in scores:
            field = "entropy" if score == "entropy" else "mutual_information"
            values = torch.cat([getattr(p, field) for p in predictives])
            logged = {**trainer.callback_metrics, **callback.summary_metrics()}
            assert float(logged[f"{prefix}ood_{score}_auroc"]) == pytest.approx(auroc(values, positive).item(),
                                                                               abs=1e-6)
            assert float(logged[f"{prefix}ood_{score}_aupr"]) == pytest.approx(
                average_precision(values, positive).item(), abs=1e-6)


def test_callback_without_map_reports_the_sampler_only():
    callback = OODMetrics(FarAwayPoints(num_points=30, center=(0.5, 0.25)))
    trainer, _, _ = _fit_and_test([PosteriorSamples(), PredictiveMarginal(), callback])
    assert SAMPLER_KEYS <= set(trainer.callback_metrics)
    assert callback.summary_metrics() == {}


def test_callback_names_its_bad_inputs():
    with pytest.raises(ValueError, match="ood must be a LightningDataModule"):
        OODMetrics(ood=torch.zeros(3, 2))
    with pytest.raises(ValueError, match="chunk_size"):
        OODMetrics(FarAwayPoints(), chunk_size=0)
    with pytest.raises(ValueError, match="ood inputs have point shape"):
        _fit_and_test([PosteriorSamples(), PredictiveMarginal(), OODMetrics(FarAwayPoints(center=(0.0, 0.0, 0.0)))])
    with pytest.raises(ValueError, match="PredictiveMarginal"):
        _fit_and_test([PosteriorSamples(), OODMetrics(FarAwayPoints())])
    with pytest.raises(ValueError, match="regression likelihood"):
        _fit_and_test([OODMetrics(FarAwayPoints(center=(0.0,)))], data=SyntheticRegression(num_train=20),
                      model=MLP([1, 4, 1]), likelihood=Gaussian(1.0))


# ----------------------------------------------------------------------------- the recipes


def _summary(root: Path) -> dict:
    (path,) = root.rglob("summary.json")
    return json.loads(path.read_text())


def _light_config(recipe: str, directory: Path, ood_args: dict) -> Path:
    """The recipe with fewer MAP steps and OOD points (its callbacks cannot be set one by one from the command line)."""
    config = yaml.safe_load((RECIPES / recipe).read_text())
    baseline, ood = config["trainer"]["callbacks"]
    baseline.setdefault("init_args", {})["steps"] = 20
    ood["init_args"]["ood"]["init_args"].update(ood_args)
    path = directory / recipe
    path.write_text(yaml.safe_dump(config))
    return path


def test_two_moons_recipe_runs_at_tiny_size(tmp_path):
    config = _light_config("two_moons_ood.yaml", tmp_path, {"num_points": 100})
    main(["fit", "-c", str(config), "--trainer.default_root_dir", str(tmp_path), *TINY,
          "--data.init_args.num_test", "100"])
    summary = _summary(tmp_path)
    assert SAMPLER_KEYS | MAP_KEYS <= set(summary["metrics"])
    assert summary["dataset"] == "TwoMoons"


def test_mnist_recipe_runs_at_tiny_size(tmp_path, monkeypatch):
    write_mnist(tmp_path / "data", "MNIST", n_train=40, n_test=20)
    monkeypatch.chdir(tmp_path)  # the config's root: data
    config = _light_config("mnist_ood.yaml", tmp_path, {})
    main(["fit", "-c", str(config), "--trainer.default_root_dir", str(tmp_path / "runs"), *TINY,
          "--data.init_args.batch_size", "10"])
    assert SAMPLER_KEYS | MAP_KEYS <= set(_summary(tmp_path / "runs")["metrics"])
