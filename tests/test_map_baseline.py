"""MAPBaseline: the MAP of the sampler's own posterior, scored on the test set beside it."""
from __future__ import annotations

import lightning as L
import pytest
import torch

from lit_bayes import SGMCMC, Bernoulli, GaussianPrior
from lit_bayes.callbacks import MAPBaseline, PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.data import TwoMoons
from lit_bayes.models import MLP


def test_the_baseline_is_the_posterior_mode_and_its_test_metrics_are_reported(tmp_path):
    baseline = MAPBaseline(steps=1500, lr=2e-2)
    sampler = SGMCMC(MLP([2, 8, 1], "tanh"), Bernoulli(), GaussianPrior(1.0), stepper="sgld", step_size=1e-3,
                     num_chains=2, burn_in=10)
    data = TwoMoons(num_train=60, num_val=0, num_test=200, batch_size=20)
    trainer = L.Trainer(max_steps=30, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=[PosteriorSamples(), PredictiveMarginal(), UncertaintyMetrics(), baseline])
    trainer.fit(sampler, datamodule=data)
    trainer.test(sampler, datamodule=data)

    metrics = baseline.summary_metrics()
    assert set(metrics) == {f"baseline/map/test/{k}" for k in ("accuracy", "nlpd", "ece", "brier")}
    x, y = data.train_data.tensors
    params = {n: p.clone().requires_grad_(True) for n, p in baseline.params.items()}
    energy = sampler.energy(params, x, y).sum()
    gradient = torch.cat([g.flatten() for g in torch.autograd.grad(energy, list(params.values()))])
    assert gradient.abs().max() < 1e-2 * energy.abs()  # a stationary point of the sampler's own energy
    x_test, y_test = data.test_data.tensors
    with torch.no_grad():
        log_lik = sampler.log_likelihood(baseline.params, sampler.outputs(baseline.params, x_test), y_test)
    assert metrics["baseline/map/test/nlpd"] == pytest.approx(-log_lik.mean().item(), rel=1e-5)


def test_the_fit_takes_data_copied_in_inference_mode():
    """On a GPU the test's inference mode made the training data's device copy an inference tensor,
    which backward cannot save; here the data is made so on the CPU."""
    sampler = SGMCMC(MLP([2, 4, 1], "tanh"), Bernoulli(), GaussianPrior(1.0), num_chains=1, num_data=30)
    x, y = TwoMoons(num_train=30, num_val=0, num_test=10).load()["train"]
    with torch.inference_mode():
        x, y = x.clone(), y.clone()
        params = MAPBaseline(steps=5).fit_map(sampler, x, y)
    assert all(torch.isfinite(p).all() for p in params.values())


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="steps"):
        MAPBaseline(steps=0)
    with pytest.raises(ValueError, match="lr"):
        MAPBaseline(lr=-1.0)
