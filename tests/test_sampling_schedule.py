"""Burn-in as a fraction of the run and a number of draws instead of a thinning interval."""
from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lit_bayes import SGMCMC, Gaussian, GaussianPrior
from lit_bayes.callbacks import PosteriorSamples
from lit_bayes.data import SyntheticRegression
from lit_bayes.models import MLP
from lit_bayes.samplers.base import sampling_steps


@pytest.mark.parametrize("total, burn_in, thinning, num_draws, expected", [
    (1000, 0.5, 1, None, (500, 1)),
    (1000, 0.5, 7, None, (500, 7)),
    (1000, 0.5, 1, 100, (504, 5)),  # draws at 505, 510, ..., 1000
    (1000, 0, 1, 300, (102, 3)),
    (1000, 400, 1, 7, (489, 85)),
    (100, 90, 1, 50, (90, 1)),  # fewer steps than draws: every step after the burn-in
    (100, 0.999, 1, None, (99, 1)),
])
def test_sampling_steps(total, burn_in, thinning, num_draws, expected):
    assert sampling_steps(total, burn_in, thinning, num_draws) == expected


class SampleSteps(Callback):
    """The steps whose states the sampler keeps."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if pl_module.is_sample_step():
            self.steps.append(trainer.global_step)


def fit(root, epochs, ckpt_path=None, extra=(), **options):
    """SGLD on a 1-d regression, 4 steps an epoch."""
    settings = dict(stepper="sgld", step_size=1e-3, num_chains=2, seed=1, burn_in=0.5, num_draws=5)
    settings.update(options)
    sampler = SGMCMC(MLP([1, 8, 1], "tanh"), Gaussian(1.0), GaussianPrior(1.0), **settings)
    samples, steps = PosteriorSamples(), SampleSteps()
    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, callbacks=[samples, steps, *extra], default_root_dir=root)
    trainer.fit(sampler, datamodule=SyntheticRegression(num_train=40, num_val=10, num_test=10, batch_size=10, seed=3),
                ckpt_path=ckpt_path)
    return sampler, samples, steps.steps


@pytest.mark.parametrize("epochs", [10, 25])
def test_a_fractional_burn_in_and_num_draws_follow_the_run_length(tmp_path, epochs):
    sampler, samples, steps = fit(str(tmp_path), epochs)
    total = 4 * epochs
    assert samples.num_draws == 5 and len(steps) == 5
    assert steps[-1] == total and steps[0] > total // 2  # the second half, ending at the final state
    assert len({b - a for a, b in zip(steps, steps[1:])}) == 1  # evenly spaced
    assert torch.equal(samples.trace()[:, -1], sampler.chains.flat())


def test_a_fractional_burn_in_keeps_thinning(tmp_path):
    sampler, samples, steps = fit(str(tmp_path), 10, burn_in=0.25, num_draws=None, thinning=3)
    assert (sampler.burn_in, sampler.thinning) == (10, 3)
    assert steps == list(range(11, 41, 3))


def test_a_run_resumed_with_a_fractional_burn_in_equals_the_uninterrupted_run(tmp_path):
    every = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=7, save_top_k=-1, filename="{step}")
    full, full_samples, _ = fit(str(tmp_path / "full"), 10, extra=[every])
    resumed, resumed_samples, _ = fit(str(tmp_path / "resumed"), 10, ckpt_path=str(tmp_path / "ckpt" / "step=21.ckpt"))
    assert torch.equal(full.chains.flat(), resumed.chains.flat())
    assert torch.equal(full_samples.trace(), resumed_samples.trace())


@pytest.mark.parametrize("options, match", [
    ({"burn_in": 1.5}, "burn_in"), ({"burn_in": -1}, "burn_in"), ({"burn_in": "half"}, "burn_in"),
    ({"num_draws": 0}, "num_draws"), ({"num_draws": 10, "thinning": 2}, "thinning or num_draws"),
])
def test_bad_schedules_are_named(options, match):
    with pytest.raises(ValueError, match=match):
        SGMCMC(MLP([1, 4, 1]), Gaussian(1.0), **options)


def test_a_fraction_of_an_endless_run_is_refused(tmp_path):
    with pytest.raises(ValueError, match="max_epochs or max_steps"):
        sampler = SGMCMC(MLP([1, 4, 1]), Gaussian(1.0), burn_in=0.5)
        L.Trainer(max_epochs=-1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                  limit_val_batches=0, default_root_dir=tmp_path).fit(
            sampler, datamodule=SyntheticRegression(num_train=40, num_val=10, num_test=10, batch_size=10))


def test_more_draws_than_steps_after_the_burn_in_are_named(tmp_path):
    """num_draws=30 after a burn-in of half of 40 steps: the 20 steps left are all kept, and a warning says so."""
    with pytest.warns(UserWarning, match="num_draws=30 asks for more draws per chain than the 20 steps"):
        _, samples, _ = fit(str(tmp_path), 10, num_draws=30)
    assert samples.num_draws == 20


def test_a_store_smaller_than_num_draws_is_refused_before_the_first_step(tmp_path):
    sampler = SGMCMC(MLP([1, 8, 1], "tanh"), Gaussian(1.0), GaussianPrior(1.0), step_size=1e-3, burn_in=0.5,
                     num_draws=20)
    trainer = L.Trainer(max_epochs=10, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, callbacks=[PosteriorSamples(max_draws=10)], default_root_dir=tmp_path)
    with pytest.raises(ValueError, match=r"max_draws=10 draws per chain, but the sampler asks for num_draws=20"):
        trainer.fit(sampler, datamodule=SyntheticRegression(num_train=40, num_val=10, num_test=10, batch_size=10))
    assert sampler.global_step == 0
