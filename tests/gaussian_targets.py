"""Targets with known posteriors, ESS-derived tolerances and HMC chains on them, for the statistical tests."""
from __future__ import annotations

import math

import torch
from scipy import stats
from torch import Tensor

from lit_bayes.diagnostics import ess_bulk
from lit_bayes.steppers.hmc import HMCStepper

Z = 4.0  # tolerance in standard errors (seeds are fixed, so a pass is deterministic)


def correlated_gaussian(rho: float = 0.8) -> tuple[Tensor, Tensor]:
    """Mean and covariance of the 2-D target N(mu, Sigma) with unit variances."""
    mean = torch.tensor([1.0, -0.5], dtype=torch.float64)
    cov = torch.tensor([[1.0, rho], [rho, 1.0]], dtype=torch.float64)
    return mean, cov


def conjugate_linear_regression(x: Tensor, y: Tensor, noise_var: float, prior_var: float) -> tuple[Tensor, Tensor]:
    """Exact posterior of [w, b] for y = x w + b + N(0, noise_var), prior N(0, prior_var I)."""
    design = torch.cat([x, torch.ones(x.shape[0], 1)], dim=1).double()
    precision = design.T @ design / noise_var + torch.eye(design.shape[1], dtype=torch.float64) / prior_var
    cov = torch.linalg.inv(precision)
    mean = cov @ design.T @ y.double() / noise_var
    return mean, cov


def assert_matches_gaussian(trace: Tensor, mean: Tensor, cov: Tensor) -> None:
    """Check the mean and covariance of ``trace`` (chains, draws, d) against N(mean, cov).

    Each tolerance is Z standard errors computed with the smallest bulk ESS of the
    coordinates and of their pairwise products: se(mean_i) = sqrt(cov_ii / ESS) and
    se(cov_ij) = sqrt((cov_ii cov_jj + cov_ij^2) / ESS) (Gaussian fourth moments).
    """
    trace = trace.double()
    d = trace.shape[-1]
    centred = trace - mean
    products = torch.stack([centred[..., i] * centred[..., j] for i in range(d) for j in range(d)], dim=-1)
    ess = min(float(ess_bulk(trace).min()), float(ess_bulk(products).min()))
    assert ess > 100, f"too few effective samples ({ess:.0f}) for a meaningful test"
    flat = trace.reshape(-1, d)
    est_mean = flat.mean(0)
    est_cov = torch.cov(flat.T)
    se_mean = (torch.diagonal(cov) / ess).sqrt()
    se_cov = ((torch.diagonal(cov)[:, None] * torch.diagonal(cov)[None, :] + cov**2) / ess).sqrt()
    assert (est_mean - mean).abs().le(Z * se_mean).all(), f"mean {est_mean} vs exact {mean} (se {se_mean}, ESS {ess:.0f})"
    assert (est_cov - cov).abs().le(Z * se_cov).all(), f"cov {est_cov} vs exact {cov} (se {se_cov}, ESS {ess:.0f})"


KS_P_MIN = 1e-3  # smallest KS p-value accepted for exact draws (fixed seeds: a pass is deterministic)


def assert_gaussian_draws(draws, mean, cov):
    """Whitened draws (S, d) must be N(0, I): per-coordinate KS and a 4.5-sigma covariance check."""
    white = torch.linalg.solve_triangular(torch.linalg.cholesky(cov), (draws - mean).T, upper=False).T
    for j in range(white.shape[1]):
        assert stats.kstest(white[:, j].numpy(), stats.norm.cdf).pvalue > KS_P_MIN
    emp = white.T @ white / len(white)
    assert (emp - torch.eye(len(cov), dtype=emp.dtype)).abs().max() < 4.5 * math.sqrt(2 / len(white))


def hmc_chains(mean: Tensor, cov: Tensor, start: Tensor, steps: int, energy_fn=None, **options):
    """``HMCStepper(**options)`` chains from ``start`` ``(chains, d)`` on N(mean, cov) (or on
    ``energy_fn(theta)``, per chain), generator seeded 0: the trace ``(chains, steps, d)`` and the stepper."""
    precision = torch.linalg.inv(cov).float()
    theta = start.clone().requires_grad_()
    stepper = HMCStepper([theta], generator=torch.Generator().manual_seed(0), **options)

    def closure():
        stepper.zero_grad()
        centred = theta - mean.float()
        energy = energy_fn(theta) if energy_fn else 0.5 * ((centred @ precision) * centred).sum(1)
        energy.sum().backward()
        return energy.detach()

    draws = []
    for _ in range(steps):
        stepper.step(closure)
        draws.append(theta.detach().clone())
    return torch.stack(draws, 1), stepper
