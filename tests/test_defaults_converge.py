"""Defaults that converge (issue 24, item 6): samplers reach their target with default options."""
import warnings

import lightning as L
import pytest
import torch
from torch import nn

from lit_bayes import HMC, MALA, SGMCMC, Gaussian, GaussianPrior
from lit_bayes.callbacks import PosteriorSamples
from lit_bayes.data import LinearRegression
from lit_bayes.data.base import EpochBatchSampler
from lit_bayes.diagnostics import ess_bulk
from lit_bayes.steppers.hmc import HMCStepper
from tests.gaussian_targets import (assert_matches_gaussian, conjugate_linear_regression, correlated_gaussian,
                                   hmc_chains)


@pytest.mark.slow
def test_psgld_default_options_reach_the_conjugate_posterior_from_prior_draws(tmp_path):
    """pSGLD with default stepper options, chains started at prior draws (~20 posterior sd away).

    Fails when the preconditioner keeps adapting while draws are kept (the former default:
    variances ~10-25% too large) or is frozen while it still holds the transient's gradients.
    """
    data = LinearRegression(num_train=50, num_val=10, num_test=10, batch_size=None, seed=1)
    sampler = SGMCMC(nn.Linear(3, 1), Gaussian(noise_std=1.0), GaussianPrior(1.0), stepper="psgld", step_size=2e-2,
                     num_chains=128, burn_in=500, seed=2, init="prior")
    store = PosteriorSamples(max_draws=1_000)
    trainer = L.Trainer(max_steps=1_500, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[store], default_root_dir=tmp_path)
    trainer.fit(sampler, datamodule=data)
    x, y = data.train_data.tensors
    mean, cov = conjugate_linear_regression(x, y, noise_var=1.0, prior_var=1.0)
    trace = store.trace()
    assert trace.shape[:2] == (128, 1_000)
    assert_matches_gaussian(trace, mean, cov)


def run_hmc(lr, num_leapfrog, steps, num_chains=8, target=None, **jitter):
    """HMC/MALA stepper chains on N(mean, cov) (default: the isotropic 2-D standard normal)."""
    mean, cov = target if target is not None else (torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64))
    start = torch.randn(num_chains, 2, generator=torch.Generator().manual_seed(1))
    trace, _ = hmc_chains(mean, cov, start, steps, lr=lr, num_leapfrog=num_leapfrog, **jitter)
    return trace, mean, cov


def test_hmc_jitter_breaks_a_resonant_path_length_and_keeps_the_target():
    """eps L = 21 x 0.3 is one period of the leapfrog dynamics on N(0, I): every proposal
    returns near its start, so a fixed path barely moves; jittered paths mix."""
    fixed, _, _ = run_hmc(0.3, 21, 600)
    ess_fixed = float(ess_bulk(fixed.double()).min())
    for jitter in ({"step_size_jitter": 0.2}, {"num_leapfrog_jitter": 10}):
        trace, mean, cov = run_hmc(0.3, 21, 600, **jitter)
        ess = float(ess_bulk(trace.double()).min())
        assert ess > 20 * ess_fixed, (jitter, ess, ess_fixed)
        assert_matches_gaussian(trace, mean, cov)


def test_mala_step_size_jitter_keeps_the_target():
    trace, mean, cov = run_hmc(0.8, 1, 3_000, target=correlated_gaussian(), step_size_jitter=0.5)
    assert_matches_gaussian(trace[:, 300:], mean, cov)


def test_jitter_draws_come_from_the_generator_so_a_restored_stepper_continues_exactly():
    theta = torch.zeros(3, 2, requires_grad=True)

    def make(start):
        stepper = HMCStepper([start], lr=0.3, num_leapfrog=5, generator=torch.Generator().manual_seed(0),
                             step_size_jitter=0.3, num_leapfrog_jitter=3)

        def closure():
            stepper.zero_grad()
            energy = 0.5 * (start**2).sum(1)
            energy.sum().backward()
            return energy.detach()
        return stepper, closure

    whole, closure = make(theta)
    for _ in range(6):
        whole.step(closure)
    half, closure = make(torch.zeros(3, 2, requires_grad=True))
    for _ in range(3):
        half.step(closure)
    state, gen_state, position = half.state_dict(), half.generator.get_state(), half.param_groups[0]["params"][0]
    resumed, closure = make(position.detach().clone().requires_grad_())
    resumed.load_state_dict(state)
    resumed.generator.set_state(gen_state)
    for _ in range(3):
        resumed.step(closure)
    assert torch.equal(resumed.param_groups[0]["params"][0], theta)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"step_size_jitter": 1.0}, r"step_size_jitter must be a number in \[0, 1\)"),
        ({"step_size_jitter": -0.1}, r"step_size_jitter must be a number in \[0, 1\)"),
        ({"num_leapfrog_jitter": 5}, r"num_leapfrog_jitter must be < num_leapfrog \(5\)"),
        ({"num_leapfrog_jitter": -1}, "num_leapfrog_jitter must be an integer >= 0"),
    ],
)
def test_bad_jitter_options(options, message):
    with pytest.raises(ValueError, match=message):
        HMC(nn.Linear(3, 1), Gaussian(noise_std=1.0), num_leapfrog=5, **options)


def test_mala_forwards_step_size_jitter():
    sampler = MALA(nn.Linear(3, 1), Gaussian(noise_std=1.0), step_size_jitter=0.3)
    assert sampler.stepper_options["step_size_jitter"] == 0.3 and sampler.stepper_options["num_leapfrog"] == 1


def fit_quietly(sampler, data, steps, root):
    L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_val_batches=0, default_root_dir=root).fit(sampler, datamodule=data)


@pytest.mark.parametrize("sampler_cls", [HMC, MALA])
def test_full_batch_samplers_warn_once_on_minibatches(sampler_cls, tmp_path):
    sampler = sampler_cls(nn.Linear(3, 1), Gaussian(noise_std=1.0), GaussianPrior(1.0), step_size=1e-2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fit_quietly(sampler, LinearRegression(num_train=50, num_val=5, num_test=5, batch_size=20, seed=1), 6, tmp_path)
    ours = [str(w.message) for w in seen if "exact only on the full training set" in str(w.message)]
    assert len(ours) == 1, ours
    assert f"{sampler_cls.__name__} is exact only" in ours[0] and "holds 20 of the 50 training points" in ours[0]
    assert "batch_size: null" in ours[0]


def test_full_batch_samplers_do_not_warn_on_the_full_batch(tmp_path):
    sampler = HMC(nn.Linear(3, 1), Gaussian(noise_std=1.0), GaussianPrior(1.0), num_leapfrog=2, step_size=1e-2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fit_quietly(sampler, LinearRegression(num_train=50, num_val=5, num_test=5, batch_size=None, seed=1), 3, tmp_path)
    assert not [w for w in seen if "exact only on the full training set" in str(w.message)]


class BatchSizes(L.Callback):
    def __init__(self):
        self.sizes = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.sizes.append(len(batch[0]))


@pytest.mark.parametrize("scaling, drop_last, expected", [
    ("sum", None, [3] * 6),  # FNBG's raw batch sum: a 1-point batch would be another target
    ("rescaled", None, [3, 1] * 3),  # N/|B| scaling: every batch estimates the same energy
    ("sum", False, [3, 1] * 3),
    ("rescaled", True, [3] * 6),
])
def test_uneven_last_batch_is_dropped_under_sum_scaling(scaling, drop_last, expected, tmp_path):
    data = LinearRegression(num_train=4, num_val=2, num_test=2, batch_size=3, seed=1, drop_last=drop_last)
    sampler = SGMCMC(nn.Linear(3, 1), Gaussian(noise_std=1.0), GaussianPrior(1.0), step_size=1e-3,
                     minibatch_scaling=scaling)
    sizes = BatchSizes()
    L.Trainer(max_steps=6, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_val_batches=0, callbacks=[sizes],
              default_root_dir=tmp_path).fit(sampler, datamodule=data)
    assert sizes.sizes == expected


def test_epoch_batch_sampler_drop_last_per_shard_and_on_resume():
    def batches(**kwargs):
        return [len(b) for b in EpochBatchSampler(10, 0, 4, **kwargs)]

    assert batches() == [4, 4, 2] and batches(drop_last=True) == [4, 4]
    assert len(EpochBatchSampler(10, 0, 4, drop_last=True)) == 2
    assert batches(num_replicas=2, rank=1, drop_last=True) == [4]  # shard of 5: one batch of 4
    assert batches(num_replicas=4, rank=0, drop_last=True) == [3]  # shard of 3 < 4: kept whole
    whole = [b.tolist() for b in EpochBatchSampler(10, 0, 4, drop_last=True)]
    assert [b.tolist() for b in EpochBatchSampler(10, 0, 4, resume_at=(0, 1), drop_last=True)] == whole[1:]


def test_drop_last_must_be_a_bool_or_none():
    with pytest.raises(ValueError, match="drop_last must be True, False or None"):
        LinearRegression(drop_last="yes")
