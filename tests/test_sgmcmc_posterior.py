"""SGMCMC through Trainer.fit recovers the exact posterior of Bayesian linear regression; MAP its mode."""
import lightning as L
import pytest
import torch
from torch import nn

from lit_bayes import MAP, SGMCMC, Gaussian, GaussianPrior
from lit_bayes.callbacks import PosteriorSamples
from lit_bayes.data import LinearRegression
from tests.gaussian_targets import assert_matches_gaussian, conjugate_linear_regression

SETTINGS = {
    "sgld": {"step_size": 2e-3},
    "psgld": {"step_size": 4e-2, "stepper_options": {"alpha": 0.99, "eps_precond": 1e-3, "adapt_steps": 300}},
    "sghmc": {"step_size": 2e-2, "stepper_options": {"friction": 10.0}},
    "scale_adapted_sghmc": {"step_size": None},  # its default step, the mass adapted in the burn-in and frozen
}


def fit_linear_regression(stepper, num_chains, steps, burn_in, tmp_path, **extra):
    data = LinearRegression(num_train=50, num_val=10, num_test=10, batch_size=None, seed=1)
    sampler = SGMCMC(
        nn.Linear(3, 1),
        Gaussian(noise_std=1.0),
        GaussianPrior(1.0),
        stepper=stepper,
        num_chains=num_chains,
        burn_in=burn_in,
        seed=2,
        **SETTINGS[stepper],
        **extra,
    )
    store = PosteriorSamples(max_draws=steps)
    trainer = L.Trainer(
        max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, callbacks=[store], default_root_dir=tmp_path,
    )
    trainer.fit(sampler, datamodule=data)
    x, y = data.train_data.tensors
    return sampler, store, conjugate_linear_regression(x, y, noise_var=1.0, prior_var=1.0)


@pytest.mark.parametrize("stepper", sorted(SETTINGS))
def test_sgmcmc_recovers_conjugate_posterior_with_8_chains(stepper, tmp_path):
    sampler, store, (mean, cov) = fit_linear_regression(stepper, 8, 2_500, 300, tmp_path)
    trace = store.trace()  # (chains, draws, [w1, w2, w3, b])
    assert trace.shape[:2] == (8, 2_200)
    assert_matches_gaussian(trace, mean, cov)


@pytest.mark.parametrize("optimizer, lr", [("adam", 0.05), ("sgd", 0.1), ("rmsprop", 0.002), ("adamw", 0.05)])
def test_map_reaches_the_conjugate_posterior_mode(optimizer, lr, tmp_path):
    """Any torch optimiser by name: full-batch MAP ends at the exact posterior mean (= mode)."""
    data = LinearRegression(num_train=50, num_val=10, num_test=10, batch_size=None, seed=1)
    options = {"weight_decay": 0.0} if optimizer == "adamw" else {}  # decoupled decay would move the optimum
    model = MAP(nn.Linear(3, 1), Gaussian(noise_std=1.0), GaussianPrior(1.0), optimizer=optimizer, lr=lr,
                optimizer_options=options, num_chains=2, seed=2)
    L.Trainer(max_steps=1_500, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path).fit(model, datamodule=data)
    x, y = data.train_data.tensors
    mode, _ = conjugate_linear_regression(x, y, noise_var=1.0, prior_var=1.0)
    torch.testing.assert_close(model.chains.flat().double(), mode.expand(2, -1), atol=2e-3, rtol=0)
