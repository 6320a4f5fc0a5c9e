"""Temperature of the Feynman-Kac samplers on linear-Gaussian models, where the tempered law is exact.

For y = a phi + psi + N(0, s^2), phi ~ N(0, I) and psi held fixed, the target raised to 1/T
has the T = 1 mean and T times its covariance: SGSMC's weighted cloud after one batch holding
all the data is the posterior of phi, OHSMC's cloud the filtering law of the open-horizon
model (Eq. 7), a linear-Gaussian state-space model whose law is the Kalman filter's.
"""
import math

import pytest
import torch
from scipy import stats

from lit_bayes import OHSMC, SGSMC, Gaussian
from lit_bayes.models import PartialBNN, PartialMLP
from lit_bayes.posterior import GaussianPrior
from lit_bayes.steppers.kernels import OrnsteinUhlenbeck, RandomWalk
from tests.test_feynman_kac import LinearOffset, exact_linear_gaussian

PSI, NOISE_STD, BATCH = 0.2, 1.0, 5
SEEDS = 12


def _data(n, noise_std):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, 2, generator=gen, dtype=torch.float64)
    noise = noise_std * torch.randn(n, generator=gen, dtype=torch.float64)
    return a, a @ torch.tensor([1.0, -0.5], dtype=torch.float64) + PSI + noise


def _sampler(cls, temperature, seed, num_particles, noise_std, num_data, **options):
    sampler = cls(PartialBNN(LinearOffset(2), ["phi"]), Gaussian(noise_std), num_particles=num_particles,
                  num_data=num_data, seed=seed, temperature=temperature, **options).double()
    sampler.setup("fit")
    sampler.make_generator()
    with torch.no_grad():
        sampler.model.net.psi.fill_(PSI)
    return sampler


def _open_horizon_kalman(a, z, q, iterations):
    """Covariance of the open-horizon model's filtering law at T = 1: phi_0 ~ N(0, I),
    phi_i = z phi_{i-1} + N(0, q I), y_{S^i} = a_{S^i} phi_i + psi + N(0, s^2 I), batches in order."""
    eye = torch.eye(2, dtype=torch.float64)
    cov = eye.clone()
    for i in range(iterations):
        rows = a[(i * BATCH) % len(a):][:BATCH]
        cov = z * z * cov + q * eye
        innovation = rows @ cov @ rows.T + NOISE_STD**2 * torch.eye(BATCH, dtype=torch.float64)
        gain = cov @ rows.T @ torch.linalg.inv(innovation)
        cov = cov - gain @ rows @ cov
    return cov


def _mean_and_standard_error(covs):
    covs = torch.stack(covs)
    return covs.mean(0), covs.std(0) / math.sqrt(len(covs))


def _assert_scaled(clouds, exact, label):
    """Each temperature's cloud covariance is T x the exact T = 1 covariance (4 standard errors of the
    independent runs plus 4% for the O(1/J) bias), and the T = 2 / T = 1 ratio is 2, not 1."""
    for temperature, covs in clouds.items():
        mean, se = _mean_and_standard_error(covs)
        target = temperature * exact
        tolerance = 4 * se + 0.04 * target.diagonal().max()
        assert ((mean - target).abs() <= tolerance).all(), (label, temperature, mean, target)
    ratio = _mean_and_standard_error(clouds[2.0])[0].diagonal() / _mean_and_standard_error(clouds[1.0])[0].diagonal()
    print(f"{label}: variance ratio T=2 / T=1 = {ratio.tolist()}")
    assert ((ratio - 2.0).abs() < 0.1).all(), (label, ratio)


@pytest.mark.parametrize("kernel, options", [("random_walk", {"variance": 0.05}), ("ou", {"delta": 0.1})])
def test_ohsmc_cloud_covariance_is_temperature_times_the_exact_one(kernel, options):
    a, y = _data(40, NOISE_STD)
    iterations = 16
    z = 1.0 if kernel == "random_walk" else math.exp(-options["delta"] / 2)  # OU of the N(0, 1) prior
    q = options["variance"] if kernel == "random_walk" else 1.0 - z * z
    exact = _open_horizon_kalman(a, z, q, iterations)
    clouds = {}
    for temperature in (1.0, 2.0):
        clouds[temperature] = []
        for seed in range(SEEDS):
            sampler = _sampler(OHSMC, temperature, seed, 3000, NOISE_STD, len(a), kernel=kernel,
                               kernel_options=options)
            frozen = torch.optim.SGD(sampler.model.deterministic_parameters(), lr=0.0)  # psi held fixed
            for i in range(iterations):
                rows = slice((i * BATCH) % len(a), (i * BATCH) % len(a) + BATCH)
                sampler.transition(a[rows], y[rows], frozen)
            assert float(sampler.model.net.psi.detach()) == PSI
            clouds[temperature].append(torch.cov(sampler.chains.flat().T))
    _assert_scaled(clouds, exact, f"OHSMC {kernel}")


def test_sgsmc_weighted_cloud_covariance_is_temperature_times_the_exact_posterior_one():
    a, y = _data(10, 0.5)
    _, exact, _ = exact_linear_gaussian(a, y, PSI, 0.5)
    clouds = {}
    for temperature in (1.0, 2.0):
        clouds[temperature] = []
        for seed in range(SEEDS):
            sampler = _sampler(SGSMC, temperature, seed, 2000, 0.5, len(a),
                               kernel_options={"variance": 0.05, "steps": 10})
            sampler.filter_batch(a, y)
            flat, w = sampler.chains.flat(), sampler.log_weights.exp()
            centred = flat - (w[:, None] * flat).sum(0)
            clouds[temperature].append((centred.T * w) @ centred)
    _assert_scaled(clouds, exact, "SGSMC")


def test_moves_are_tempered():
    """Random walk: noise variance T v; OU: stationary law the tempered prior N(0, T v)."""
    gen = torch.Generator().manual_seed(0)
    moved = RandomWalk(0.01, temperature=4.0).move({"p": torch.zeros(50000)}, gen)["p"]
    assert stats.kstest(moved.numpy() / 0.2, "norm").pvalue > 1e-3
    kernel = OrnsteinUhlenbeck(0.1, GaussianPrior(0.5), temperature=2.0)
    particles = {"p": torch.randn(50000, generator=gen)}  # N(0, 1) = N(0, T v)
    for _ in range(5):
        particles = kernel.move(particles, gen)
    assert stats.kstest(particles["p"].numpy(), "norm").pvalue > 1e-3


@pytest.mark.parametrize("cls", [OHSMC, SGSMC])
@pytest.mark.parametrize("temperature", [0.0, -1.0, math.inf, math.nan])
def test_temperature_must_be_positive_and_finite(cls, temperature):
    with pytest.raises(ValueError, match="temperature"):
        cls(PartialMLP([2, 3, 1], 0), Gaussian(), temperature=temperature)
