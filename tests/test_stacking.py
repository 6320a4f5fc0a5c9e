"""Chain stacking (Yao, Vehtari & Gelman 2022): the weights maximise the held-out log score; the stacked
predictive of chains in separate modes is scored beside the equal-weight one and cited by the verdict."""
import itertools

import lightning as L
import pytest
import torch

from lit_bayes import SGMCMC, Bernoulli, GaussianPrior
from lit_bayes.callbacks import ChainStacking, PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.data import TwoMoons
from lit_bayes.health import RunRecord, assess
from lit_bayes.models import MLP
from lit_bayes.stacking import stacked_log_density, stacking_weights


def test_weights_favour_the_chain_that_predicts_and_split_between_complementary_chains():
    good, bad = torch.full((50,), -0.1), torch.full((50,), -3.0)
    assert stacking_weights(torch.stack([bad, good]))[1] > 0.999
    # chain 0 explains the first 30 points, chain 1 the last 20: the weights follow the shares
    lpd = torch.full((2, 50), -20.0)
    lpd[0, :30], lpd[1, 30:] = -0.01, -0.01
    assert torch.allclose(stacking_weights(lpd), torch.tensor([0.6, 0.4], dtype=torch.float64), atol=1e-4)


@pytest.mark.parametrize("seed", range(3))
def test_weights_reach_the_best_score_of_a_grid_over_the_simplex(seed):
    lpd = torch.randn(3, 40, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2
    weights = stacking_weights(lpd)
    assert abs(float(weights.sum()) - 1) < 1e-12 and bool((weights >= 0).all())
    best = max(float(stacked_log_density(torch.tensor([a, b, 1 - a - b], dtype=torch.float64).clamp_min(1e-300).log(),
                                         lpd))
               for a, b in itertools.product(torch.linspace(0, 1, 101).tolist(), repeat=2) if a + b <= 1)
    assert float(stacked_log_density(weights.log(), lpd)) >= best - 1e-6


def test_bad_log_densities_are_refused():
    with pytest.raises(ValueError, match="chains, points"):
        stacking_weights(torch.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        stacking_weights(torch.tensor([[0.0, float("nan")]]))


def test_stacked_predictive_of_chains_apart_beats_equal_weights_on_test(tmp_path):
    """Chains still near their prior draws predict very differently; weights fitted on validation only give
    a test NLPD below the equal-weight predictive's, and the weights are reported."""
    data = TwoMoons(num_train=100, num_val=200, num_test=500, noise=0.2, batch_size=None, seed=0)
    sampler = SGMCMC(MLP([2, 16, 1]), Bernoulli(), GaussianPrior(1.0), stepper="sgld", step_size=1e-4,
                     num_chains=8, burn_in=20, init="prior", seed=3)
    stacking = ChainStacking()
    callbacks = [PosteriorSamples(), PredictiveMarginal(), UncertaintyMetrics(), stacking]
    trainer = L.Trainer(max_steps=40, callbacks=callbacks, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(sampler, datamodule=data)
    (equal,) = trainer.test(sampler, datamodule=data, verbose=False)
    metrics = stacking.summary_metrics()
    assert metrics["test/stacked/nlpd"] < equal["test/nlpd"]
    assert metrics["stacking/val_nlpd_stacked"] <= metrics["stacking/val_nlpd_equal"]
    weights = [metrics[f"stacking/weight_{k}"] for k in range(8)]
    assert abs(sum(weights) - 1) < 1e-9 and max(weights) > 0.2


def test_separate_modes_reason_lists_the_chains_apart_and_what_stacking_did():
    trace = torch.randn(6, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.1
    trace[0] -= 5.0
    stacking = {"weights": [0.0, 0.5, 0.5, 0.0, 0.0, 0.0], "val_nlpd_equal": 0.7, "val_nlpd_stacked": 0.2}
    health = assess(RunRecord(steps=100, burn_in=50, thinning=1, chains=6, draws_per_chain=50,
                              traces={"heldout_lpd": trace}, function_space=("heldout_lpd",), stacking=stacking))
    reason = next(r for r in health.reasons if r.code == "separate_modes")
    assert "chain 0: -5" in reason.message
    assert "from 0.7000 (equal weights) to 0.2000" in reason.message and "chain 1: 0.500" in reason.message
    assert "ChainStacking" in reason.advice and "schedule: cyclical" in reason.advice
