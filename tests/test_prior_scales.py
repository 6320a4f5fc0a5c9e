"""Learned prior scales (Neal 1996): Gamma variates, the precisions' conjugate conditional, and chains that
sample the joint posterior of weights and precision of a Bayesian linear regression."""
import math

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from scipy import stats
from torch import nn

from lit_bayes import HMC, SGMCMC, Gaussian, LearnedScalePrior
from lit_bayes.data import LinearRegression
from lit_bayes.diagnostics import ess_bulk
from lit_bayes.models import MLP
from lit_bayes.prior_scales import standard_gamma
from tests.gaussian_targets import KS_P_MIN, Z


@pytest.mark.parametrize("shape", [0.3, 1.0, 2.5, 40.0])
def test_standard_gamma_draws_the_gamma_law(shape):
    draws = standard_gamma(torch.full((20_000,), shape), torch.Generator().manual_seed(1))
    assert stats.kstest(draws.numpy(), stats.gamma(shape).cdf).pvalue > KS_P_MIN


def test_standard_gamma_repeats_from_the_generator_state_and_refuses_bad_shapes():
    shapes = torch.tensor([0.5, 3.0, 100.0])
    first = standard_gamma(shapes, torch.Generator().manual_seed(4))
    assert torch.equal(first, standard_gamma(shapes, torch.Generator().manual_seed(4)))
    with pytest.raises(ValueError, match="gamma shapes must be > 0"):
        standard_gamma(torch.tensor([1.0, 0.0]))


def bound_prior(groups=None, shape=2.0, rate=3.0, chains=2):
    prior = LearnedScalePrior(shape, rate, groups)
    prior.bind({"net.w": (3, 2), "net.b": (3,)}, chains)
    return prior


def test_conditional_is_the_conjugate_gamma_at_any_temperature():
    prior = bound_prior()
    params = {"net.w": torch.arange(12.0).reshape(2, 3, 2), "net.b": torch.ones(2, 3)}
    shape, rate = prior.conditional(params, temperature=1.0)
    squares_w = (torch.arange(12.0).reshape(2, 6) ** 2).sum(1).double()
    assert torch.allclose(shape, torch.tensor([[2.0 + 3.0, 2.0 + 1.5]] * 2, dtype=torch.float64))
    assert torch.allclose(rate[:, 0], 3.0 + squares_w / 2)
    assert torch.allclose(rate[:, 1], torch.full((2,), 3.0 + 1.5, dtype=torch.float64))
    # exp(-U/T): the conditional density lambda^((a - 1 + n/2)/T) exp(-lambda (b + S/2)/T)
    shape, rate = prior.conditional(params, temperature=2.0)
    assert torch.allclose(shape[:, 0], torch.full((2,), 1.0 + (2.0 - 1.0 + 3.0) / 2, dtype=torch.float64))
    assert torch.allclose(rate[:, 0], (3.0 + squares_w / 2) / 2)


def test_conditional_is_the_normalised_product_of_prior_and_hyperprior():
    """The Gibbs conditional equals the joint log density, as a function of lambda, up to a constant."""
    prior = bound_prior(groups={"net.*": "all"}, chains=1)
    params = {"net.w": torch.randn(1, 3, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64),
              "net.b": torch.ones(1, 3, dtype=torch.float64)}
    shape, rate = prior.conditional(params)
    differences = []
    for lam in (0.3, 1.0, 4.0):
        prior.precisions = torch.full((1, 1), lam, dtype=torch.float64)
        joint = float(prior(params))
        conditional = float(stats.gamma(float(shape), scale=1 / float(rate)).logpdf(lam))
        differences.append(joint - conditional)
    assert max(differences) - min(differences) < 1e-9


def test_groups_map_patterns_and_the_mean_precision_serves_other_parameter_sets():
    prior = bound_prior(groups={"net.*": "weights_and_biases"}, chains=3)
    assert prior.group_names == ["weights_and_biases"]
    prior.precisions = torch.tensor([[1.0], [2.0], [6.0]], dtype=torch.float64)
    one_set = {"net.w": torch.zeros(1, 3, 2), "net.b": torch.zeros(1, 3)}
    expected = 9 * 0.5 * (math.log(3.0) - math.log(2 * math.pi))  # the mean precision, 3
    expected += stats.gamma(2.0, scale=1 / 3.0).logpdf(3.0)
    assert float(prior(one_set)) == pytest.approx(expected)
    with pytest.raises(ValueError, match="not among those LearnedScalePrior was bound to"):
        prior.log_density(torch.zeros(3, 2), "net.other")


def test_samplers_without_the_gibbs_step_refuse_learned_scales():
    with pytest.raises(ValueError, match="HMC does not sample learned prior scales"):
        HMC(MLP([1, 4, 1]), Gaussian(1.0), LearnedScalePrior())


class PrecisionTrace(Callback):
    """The precision of every chain after each step past ``burn_in``."""

    def __init__(self, burn_in: int) -> None:
        self.burn_in, self.rows = burn_in, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step > self.burn_in:
            self.rows.append(pl_module.prior.precisions[:, 0].clone())
            self.rows.append(pl_module.chains.flat().double())


def exact_joint(x, y, a, b):
    """E[lambda], E[theta] and Var[theta] of the linear regression y = [x, 1] theta + N(0, 1), theta | lambda ~
    N(0, I / lambda), lambda ~ Gamma(a, b), by quadrature of p(lambda | y) on a log grid."""
    design = torch.cat([x, torch.ones(x.shape[0], 1)], 1).double()
    y = y.double()
    log_lams = torch.linspace(math.log(1e-4), math.log(1e4), 4001, dtype=torch.float64)
    logs, means, covs = [], [], []
    for log_lam in log_lams:
        lam = math.exp(log_lam)
        marginal_cov = torch.eye(len(y), dtype=torch.float64) + design @ design.T / lam
        log_evidence = torch.distributions.MultivariateNormal(torch.zeros(len(y), dtype=torch.float64),
                                                              marginal_cov).log_prob(y)
        logs.append(float(stats.gamma(a, scale=1 / b).logpdf(lam)) + float(log_evidence) + float(log_lam))
        cov = torch.linalg.inv(design.T @ design + lam * torch.eye(design.shape[1], dtype=torch.float64))
        means.append(cov @ design.T @ y)
        covs.append(cov)
    weights = torch.softmax(torch.tensor(logs), 0)
    lam_mean = float((weights * log_lams.exp()).sum())
    mean = sum(w * m for w, m in zip(weights, means))
    second = sum(w * (c + torch.outer(m, m)) for w, m, c in zip(weights, means, covs))
    return lam_mean, mean, second - torch.outer(mean, mean)


def test_sgld_with_gibbs_precisions_samples_the_joint_posterior(tmp_path):
    """A hierarchical Bayesian linear regression on 6 points, where the hyperprior matters: 32 SGLD chains
    alternating with the conjugate Gibbs draw recover E[lambda | y], E[theta | y] and Var[theta | y]
    (computed by quadrature) within Z standard errors of their effective sample size."""
    a, b, burn_in, steps = 2.0, 2.0, 500, 5_000
    data = LinearRegression(num_train=6, num_val=2, num_test=2, batch_size=None, seed=1)
    sampler = SGMCMC(nn.Linear(3, 1), Gaussian(noise_std=1.0), LearnedScalePrior(a, b, {"net.*": "all"}),
                     stepper="sgld", step_size=1e-2, num_chains=32, burn_in=burn_in, seed=2, init="prior")
    trace = PrecisionTrace(burn_in)
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[trace], default_root_dir=tmp_path)
    trainer.fit(sampler, datamodule=data)
    assert "prior/variance/all" in trainer.callback_metrics  # the learned scale is logged on logged steps
    lam_trace = torch.stack(trace.rows[0::2], 1)  # (chains, draws)
    theta_trace = torch.stack(trace.rows[1::2], 1)  # (chains, draws, [w1, w2, w3, b])
    lam_mean, mean, cov = exact_joint(*data.train_data.tensors, a, b)

    ess = float(ess_bulk(lam_trace.unsqueeze(-1)).min())
    assert ess > 100
    se = float(lam_trace.flatten().std()) / math.sqrt(ess)
    assert abs(float(lam_trace.mean()) - lam_mean) < Z * se, (float(lam_trace.mean()), lam_mean, se)

    ess = float(ess_bulk(theta_trace).min())
    assert ess > 100
    flat = theta_trace.reshape(-1, 4)
    se_mean = (torch.diagonal(cov) / ess).sqrt()
    assert (flat.mean(0) - mean).abs().le(Z * se_mean).all(), (flat.mean(0), mean, se_mean)
    se_var = (2 * torch.diagonal(cov) ** 2 / ess).sqrt() * 2  # heavier tails than Gaussian: twice the Gaussian se
    assert (flat.var(0) - torch.diagonal(cov)).abs().le(Z * se_var).all(), (flat.var(0), torch.diagonal(cov))


def test_per_element_precisions_have_one_conjugate_gamma_each():
    prior = LearnedScalePrior(2.0, 3.0, per_element=True)
    prior.bind({"net.w": (3, 2), "net.b": (3,)}, 2)
    assert prior.precisions.shape == (2, 9)
    params = {"net.w": torch.arange(12.0).reshape(2, 3, 2), "net.b": torch.ones(2, 3)}
    shape, rate = prior.conditional(params)
    assert torch.allclose(shape, torch.full((2, 9), 2.5, dtype=torch.float64))
    assert torch.allclose(rate[:, :6], 3.0 + torch.arange(12.0).reshape(2, 6).double() ** 2 / 2)
    prior.precisions[:, 6:] = 4.0
    assert torch.allclose(prior.log_density(torch.zeros(2, 3), "net.b"),
                          torch.full((2, 3), 0.5 * (math.log(4.0) - math.log(2 * math.pi))))
    draws = prior.sample({"net.b": torch.zeros(2, 3)}, torch.Generator().manual_seed(0))["net.b"]
    assert draws.shape == (2, 3)
    with pytest.raises(ValueError, match="exclude each other"):
        LearnedScalePrior(per_element=True, groups={"net.*": "all"})


def test_per_element_scales_give_each_weight_a_student_t_prior(tmp_path):
    """With no data the joint is the prior: the weights' marginal is Student-t with 2a degrees of freedom and
    scale sqrt(b / a), which SGLD plus the Gibbs draws reproduce (KS on thinned draws)."""
    a, b = 3.0, 3.0
    data = LinearRegression(num_train=2, num_val=2, num_test=2, batch_size=None, seed=1)
    sampler = SGMCMC(nn.Linear(3, 1), Gaussian(noise_std=1e3), LearnedScalePrior(a, b, per_element=True),
                     stepper="sgld", step_size=2e-2, num_chains=64, burn_in=200, seed=2, init="prior")
    trace = PrecisionTrace(200)
    trainer = L.Trainer(max_steps=2_200, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[trace], default_root_dir=tmp_path)
    trainer.fit(sampler, datamodule=data)
    weights = torch.stack(trace.rows[1::2], 1)[:, ::20, :3].reshape(-1)  # thinned past the autocorrelation
    assert stats.kstest(weights.numpy(), stats.t(2 * a, scale=math.sqrt(b / a)).cdf).pvalue > KS_P_MIN
