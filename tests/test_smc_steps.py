"""Resampling, the particle stepper (weights, evidence, effective sample size) and the Markov kernels."""
import math

import pytest
import torch
from scipy import stats

from lit_bayes import GaussianPrior
from lit_bayes.steppers.kernels import OrnsteinUhlenbeck, RandomWalk, RandomWalkMetropolis, make_kernel
from lit_bayes.steppers.resampling import RESAMPLERS, resample
from lit_bayes.steppers.smc import ParticleStepper


def _log_weights(values):
    w = torch.tensor(values, dtype=torch.float64)
    return (w / w.sum()).log()


@pytest.mark.parametrize("scheme", sorted(RESAMPLERS))
def test_resampling_copy_counts_have_expectation_J_w(scheme):
    log_w = _log_weights([0.5, 0.05, 0.2, 0.0, 0.25, 1e-9, 0.0, 0.0])
    gen = torch.Generator().manual_seed(0)
    draws = 4000
    counts = torch.stack([torch.bincount(resample(log_w, scheme, gen), minlength=8) for _ in range(draws)]).double()
    expected = 8 * log_w.exp()
    # standard error of the mean count is at most sqrt(J w (1 - w) / draws) (multinomial)
    se = (expected * (1 - log_w.exp()) / draws).sqrt().clamp_min(1e-3)
    assert ((counts.mean(0) - expected).abs() <= 5 * se).all(), (counts.mean(0), expected)
    assert counts[:, 3].max() == 0 and counts[:, 6].max() == 0  # zero weight: never an ancestor
    if scheme in ("stratified", "systematic"):  # low-variance schemes: |count - J w| < 2
        assert ((counts - expected).abs() < 2).all()


def test_resampling_indices_stay_in_range_when_cumsum_rounds_below_one():
    log_w = torch.full((1000,), -math.log(1000.0), dtype=torch.float32) + 1e-7  # sums to slightly over 1
    gen = torch.Generator().manual_seed(1)
    for scheme in RESAMPLERS:
        idx = resample(log_w, scheme, gen)
        assert idx.min() >= 0 and idx.max() <= 999


def test_resample_rejects_unknown_scheme():
    with pytest.raises(ValueError, match="resampling"):
        resample(torch.zeros(3), "residual", torch.Generator())


@pytest.mark.parametrize("weights, ess", [([1, 1, 1, 1], 4.0), ([1, 0, 0, 0], 1.0), ([3, 1], 1 / (0.75**2 + 0.25**2))])
def test_reweight_effective_sample_size(weights, ess):
    """ESS = 1 / sum_j w_j^2 of the reweighted cloud, whatever the offset of the potentials (the logsumexp
    by hand is shifted by the largest)."""
    for offset in (0.0, -800.0, 800.0):
        potential = torch.full((len(weights),), offset, dtype=torch.float64)
        result = ParticleStepper("stratified", 0.0).reweight(_log_weights([1] * len(weights)), potential +
                                                              _log_weights(weights), torch.Generator())
        assert float(result.ess) == pytest.approx(ess)
        assert float(result.log_increment) == pytest.approx(offset - math.log(len(weights)))


def test_reweight_evidence_increment_and_gradient_weights():
    gen = torch.Generator().manual_seed(0)
    prev = _log_weights([0.1, 0.2, 0.3, 0.4])
    pot = torch.tensor([-700.0, -701.0, -699.5, -702.0], dtype=torch.float64)  # exp underflows: log space only
    result = ParticleStepper("systematic", 1.0).reweight(prev, pot, gen)
    assert float(result.log_increment) == pytest.approx(float(torch.logsumexp(prev + pot, 0)))
    assert torch.equal(result.gradient_weights, torch.bincount(result.ancestors, minlength=4).double() / 4)
    assert torch.allclose(result.log_weights, torch.full((4,), -math.log(4.0), dtype=torch.float64))
    kept = ParticleStepper("systematic", 0.0).reweight(prev, pot, gen)  # never resample
    assert kept.ancestors is None
    assert torch.allclose(kept.log_weights, prev + pot - torch.logsumexp(prev + pot, 0))
    assert torch.allclose(kept.gradient_weights.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_reweight_resamples_only_below_the_ess_threshold():
    gen = torch.Generator().manual_seed(0)
    stepper = ParticleStepper("stratified", 0.5)
    flat = torch.full((4,), -math.log(4.0), dtype=torch.float64)
    assert stepper.reweight(flat, torch.tensor([0.0, 0.1, 0.0, 0.1], dtype=torch.float64), gen).ancestors is None
    assert stepper.reweight(flat, torch.tensor([0.0, -9.0, -9.0, -9.0], dtype=torch.float64), gen).ancestors is not None


def test_reweight_nan_potential_gets_zero_weight_and_all_zero_is_an_error():
    gen = torch.Generator().manual_seed(0)
    flat = torch.full((3,), -math.log(3.0))
    result = ParticleStepper("stratified", 0.0).reweight(flat, torch.tensor([0.0, float("nan"), 0.0]), gen)
    assert result.log_weights[1] == -math.inf
    with pytest.raises(FloatingPointError, match="degenerated"):
        ParticleStepper().reweight(flat, torch.full((3,), -math.inf), gen)


@pytest.mark.parametrize("kwargs, match", [
    (dict(resampling="residual"), "resampling"), (dict(ess_threshold=1.5), "ess_threshold"),
])
def test_particle_stepper_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ParticleStepper(**kwargs)


def test_ou_kernel_keeps_the_gaussian_prior_invariant():
    prior = GaussianPrior(1.0, {"net.a": 4.0})
    gen = torch.Generator().manual_seed(0)
    particles = prior.sample({"net.a": torch.zeros(20000), "net.b": torch.zeros(20000)}, gen)
    kernel = OrnsteinUhlenbeck(0.1, prior)
    for _ in range(5):
        particles = kernel.move(particles, gen)
    assert stats.kstest(particles["net.a"].numpy() / 2.0, "norm").pvalue > 1e-3
    assert stats.kstest(particles["net.b"].numpy(), "norm").pvalue > 1e-3
    # and it moves: correlation e^{-delta/(2v)} per step
    start = prior.sample({"net.b": torch.zeros(20000)}, gen)
    moved = kernel.move(start, gen)
    corr = float(torch.corrcoef(torch.stack([start["net.b"], moved["net.b"]]))[0, 1])
    assert corr == pytest.approx(math.exp(-0.05), abs=0.01)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_random_walk_adds_noise_of_the_given_variance(dtype):
    gen = torch.Generator().manual_seed(0)
    moved = RandomWalk(0.01).move({"p": torch.zeros(50000, dtype=dtype)}, gen)["p"]
    assert moved.dtype == dtype
    assert stats.kstest(moved.numpy() / 0.1, "norm").pvalue > 1e-3


def test_float64_particles_on_cpu_move_by_float32_normals_widened():
    """The kernels' float64 CPU noise is float32's draw from the same generator state, widened."""
    start = {"p": torch.zeros(1000, dtype=torch.float64)}
    moved = RandomWalk(1.0).move(start, torch.Generator().manual_seed(3))["p"]
    expected = torch.randn(1000, generator=torch.Generator().manual_seed(3), dtype=torch.float32).double()
    assert moved.dtype == torch.float64 and torch.equal(moved, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kernel", [RandomWalk(0.01, temperature=2.0),
                                    OrnsteinUhlenbeck(0.1, GaussianPrior(2.0, {"w": 0.5}), temperature=1.5)],
                         ids=["random_walk", "ou"])
def test_in_place_moves_equal_the_moves_to_the_bit(kernel, dtype):
    """OHSMC's in-place move_ gives move's values from the same generator state, in the particles' dtype."""
    gen = torch.Generator().manual_seed(0)
    start = {"w": torch.randn(7, 3, 4, generator=gen, dtype=dtype), "b": torch.randn(7, 3, generator=gen, dtype=dtype)}
    expected = kernel.move(start, torch.Generator().manual_seed(5))
    moved = {n: p.clone() for n, p in start.items()}
    kernel.move_(moved, torch.Generator().manual_seed(5))
    for name, value in expected.items():
        assert moved[name].dtype == dtype and torch.equal(moved[name], value), name


def test_random_walk_metropolis_leaves_its_target_invariant():
    """Start at exact draws of N((1, -2), diag(0.25, 4)); after moves they are still its draws."""
    gen = torch.Generator().manual_seed(0)
    mean, std = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 2.0])

    def log_target(p):
        return (-0.5 * ((p["x"] - mean) / std) ** 2).sum(-1)

    particles = {"x": mean + std * torch.randn(20000, 2, generator=gen)}
    kernel = RandomWalkMetropolis(0.5, steps=10)
    moved = kernel.move(particles, gen, log_target)["x"]
    assert 0.2 < float(kernel.acceptance) < 0.9
    assert (moved != particles["x"]).any(1).float().mean() > 0.5
    for i in range(2):
        assert stats.kstest(((moved[:, i] - mean[i]) / std[i]).numpy(), "norm").pvalue > 1e-3


def test_random_walk_metropolis_rejects_nan_targets_and_needs_a_target():
    gen = torch.Generator().manual_seed(0)
    start = {"x": torch.zeros(100, 1)}
    moved = RandomWalkMetropolis(1.0, 3).move(start, gen, lambda p: torch.where(p["x"][:, 0] == 0, 0.0, float("nan")))
    assert torch.equal(moved["x"], start["x"])
    with pytest.raises(ValueError, match="log_target"):
        RandomWalkMetropolis(1.0).move(start, gen)


@pytest.mark.parametrize("name, options, match", [
    ("langevin", {}, "kernel must be"), ("random_walk", {"variance": -1.0}, "variance"),
    ("ou", {"delta": 0.0}, "delta"), ("rwmh", {"steps": 0}, "steps"), ("rwmh", {"size": 1}, "kernel_options"),
])
def test_make_kernel_rejects_bad_arguments(name, options, match):
    with pytest.raises(ValueError, match=match):
        make_kernel(name, GaussianPrior(1.0), options)


@pytest.mark.parametrize("scheme", ["stratified", "systematic"])
def test_grid_resamplers_equal_their_formula_with_a_fresh_arange(scheme):
    """The resamplers keep one ``arange(J)`` per size and device: the same uniforms and ancestors as the formulas
    u_j = (j + U_j) / J and (j + U) / J with ``arange`` made on each call, to the bit."""
    log_w = _log_weights([0.3, 0.1, 0.0, 0.25, 0.35])
    for seed in range(3):
        gen, ref = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        for _ in range(2):  # the second call takes the kept arange
            offsets = torch.rand(5 if scheme == "stratified" else 1, generator=ref, dtype=torch.float64)
            uniforms = (torch.arange(5) + offsets) / 5
            cdf = torch.softmax(log_w, dim=-1, dtype=torch.float64).cumsum(-1)
            expected = torch.searchsorted(cdf, uniforms, right=True).clamp(max=4)
            assert torch.equal(resample(log_w, scheme, gen), expected)


def test_cloud_apply_copies_the_ancestors_rows_weights_and_evidence():
    """Cloud.apply (by ``index_select``) leaves every particle ``p[ancestors]``, the new weights and the evidence
    plus its increment, in the live tensors."""
    from lit_bayes.steppers.feynman_kac import Cloud
    from lit_bayes.steppers.smc import Reweighted

    gen = torch.Generator().manual_seed(0)
    particles = {"w": torch.randn(6, 2, 3, generator=gen, dtype=torch.float64), "b": torch.randn(6, 2, generator=gen)}
    start = {n: p.clone() for n, p in particles.items()}
    cloud = Cloud(particles, torch.zeros(6, dtype=torch.float64), torch.tensor(1.5, dtype=torch.float64))
    ancestors = torch.tensor([5, 0, 0, 3, 2, 5])
    new_weights = torch.randn(6, dtype=torch.float64)
    cloud.apply(Reweighted(new_weights, ancestors, torch.full((6,), 1 / 6), torch.tensor(0.25, dtype=torch.float64),
                           torch.tensor(3.0)))
    for name, p in particles.items():
        assert p is cloud.particles[name] and torch.equal(p, start[name][ancestors]), name
    assert torch.equal(cloud.log_weights, new_weights) and float(cloud.log_evidence) == 1.75
