"""Cyclical SG-MCMC (Zhang et al. 2020, Alg. 1): exploration stages without noise that keep no draws."""
import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from lit_bayes import SGMCMC, Gaussian, GaussianPrior
from lit_bayes.data import LinearRegression
from lit_bayes.schedules import StepSizeSchedule
from lit_bayes.steppers import PSGLD, SGHMC, SGLD


@pytest.mark.parametrize("stepper", [SGLD, PSGLD, SGHMC])
def test_a_step_without_noise_is_the_stepper_s_optimiser_step(stepper):
    """The same step with noise off draws nothing and equals the noisy step minus its noise."""
    def step(noise: bool) -> tuple[torch.Tensor, torch.Tensor]:
        p = torch.nn.Parameter(torch.linspace(-1, 1, 6))
        generator = torch.Generator().manual_seed(3)
        opt = stepper([p], lr=1e-2, generator=generator)
        opt.param_groups[0]["noise"] = noise
        p.grad = 2 * p.detach()
        opt.step()
        return p.detach(), generator.get_state()

    quiet, untouched = step(False)
    noisy, _ = step(True)
    assert torch.equal(untouched, torch.Generator().manual_seed(3).get_state())  # no draw
    assert not torch.equal(quiet, noisy)
    p0 = torch.linspace(-1, 1, 6)
    if stepper is SGLD:
        assert torch.allclose(quiet, p0 - 0.5e-2 * 2 * p0)


class KeptSteps(Callback):
    def __init__(self) -> None:
        self.steps = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if pl_module.is_sample_step():
            self.steps.append(trainer.global_step)


@pytest.mark.parametrize("draws", [{"num_draws": 8}, {"thinning": 2}])
def test_cyclical_schedule_keeps_draws_of_sampling_stages_only(draws, tmp_path):
    data = LinearRegression(num_train=20, num_val=4, num_test=4, batch_size=None, seed=1)
    sampler = SGMCMC(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), stepper="sgld", step_size=1e-2,
                     schedule="cyclical", schedule_options={"cycle_length": 10, "exploration": 0.5},
                     burn_in=0.25, seed=0, **draws)
    kept = KeptSteps()
    L.Trainer(max_steps=40, callbacks=[kept], logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path).fit(sampler, datamodule=data)
    phases = [(s - 1) % 10 for s in kept.steps]
    assert all(phase >= 5 for phase in phases) and all(s > 10 for s in kept.steps)
    assert kept.steps[-1] == 40
    assert len(kept.steps) == 8  # num_draws; or every 2nd of the 15 sampling-stage steps after the burn-in


def test_exploration_is_a_share_of_a_cyclical_schedule():
    schedule = StepSizeSchedule(0.1, "cyclical", cycle_length=4, exploration=0.5)
    assert [schedule.explores(t) for t in range(8)] == [True, True, False, False] * 2
    with pytest.raises(ValueError, match="exploration"):
        StepSizeSchedule(0.1, "constant", exploration=0.5)
    with pytest.raises(ValueError, match="exploration"):
        StepSizeSchedule(0.1, "cyclical", exploration=1.0)
