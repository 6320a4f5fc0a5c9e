"""Temperature of the intermediate-noise samplers (noisy-gibbs spec §1, eq. 4 raised to 1/T): NoisyGibbs and
IntermediateHMC sample the tempered joint, whose Gaussian variances are T times the posterior's, on targets
with exact Gaussian (conditional) laws; the one joint density (lit_bayes.noisy_energy) and bad temperatures."""
import math

import pytest
import torch

from lit_bayes.data import LinearRegression
from lit_bayes.data.teacher_student import TeacherStudent
from lit_bayes.diagnostics import ess_bulk
from lit_bayes.models.noisy_cnn import NoisyCNN
from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.noisy_energy import JointDensity, tempered
from lit_bayes.samplers.noisy_gibbs import NoisyGibbs, canonical_order
from lit_bayes.samplers.noisy_hmc import IntermediateHMC, IntermediateMALA
from lit_bayes.steppers.noisy_gibbs import LinearGaussianConditional
from tests.gaussian_targets import conjugate_linear_regression
from tests.test_noisy_hmc import Recorder, fit

Z = 4.5  # tolerance in standard errors (fixed seeds: a pass is deterministic)


def test_one_layer_gibbs_doubles_the_conjugate_posterior_variance():
    """L = 1, Gaussian label noise: the posterior of [w, b] is the conjugate Gaussian, tempered N(m, T Sigma).
    Each sweep is an exact draw, so the draws are independent (ESS = draws, checked): T = 1 matches Sigma, T = 2
    matches 2 Sigma, and the variance ratio is 2 within its standard error (1 if T were ignored)."""
    data = LinearRegression(num_train=20, num_val=1, num_test=1, noise_std=1.0, seed=1)
    data.setup()
    x, y = data.train_data.tensors
    mean, cov = conjugate_linear_regression(x, y, noise_var=0.8, prior_var=2.0)
    variances = {}
    for temperature in (1.0, 2.0):
        model = NoisyMLP([3, 1], delta_z=0.8, prior_precision=0.5, bias_precision=0.5)
        recorder = Recorder(lambda params, _: torch.cat([params["net.layers.0.weight"][:, 0],
                                                         params["net.layers.0.bias"]], -1))
        sampler = NoisyGibbs(model, num_chains=64, seed=5 + int(temperature), dtype="float64", temperature=temperature)
        fit(sampler, data, 60, [recorder])
        trace = recorder.trace(0)  # (64, 60, 4)
        assert float(ess_bulk(trace).min()) > 0.8 * trace.shape[0] * trace.shape[1]
        flat = trace.reshape(-1, 4)
        count = len(flat)
        assert ((flat.mean(0) - mean).abs() <= Z * (temperature * cov.diagonal() / count).sqrt()).all()
        variances[temperature] = (flat.var(0), count)
        exact = temperature * cov.diagonal()
        assert ((variances[temperature][0] - exact).abs() <= Z * exact * math.sqrt(2 / count)).all(), \
            f"T={temperature}: variances {variances[temperature][0]} vs exact {exact}"
    ratio = variances[2.0][0] / variances[1.0][0]
    se = ratio * math.sqrt(2 / variances[1.0][1] + 2 / variances[2.0][1])
    print(f"NoisyGibbs L=1: variance ratio T=2 / T=1 {ratio.tolist()} (se {se.tolist()})")
    assert ((ratio - 2.0).abs() <= Z * se).all() and ((ratio - 1.0).abs() > 10 * se).all()


LINEAR = dict(widths=[2, 1, 1], activation="linear", delta_z=[0.5, 0.3], delta_x=0.4)


def conditional_chi2(model, inputs, targets):
    """Per chain, the three Gaussian blocks of the linear [2, 1, 1] network's joint (eq. 4) whitened by their
    exact *untempered* conditionals (eqs. 8, 9, App. F): q = |r|^2 / dim with r = L^T (v - m) / sqrt(Delta)
    for v = [W1 | b1] given Z2, X2 given (Z2, w2, b2, y), and [w2 | b2] given (X2, y). Under the joint raised
    to 1/T each block is N(m, T Sigma) given the rest, so E q = T exactly, whatever the other variables."""
    y = targets.double().reshape(1, -1, 1)
    n = inputs.shape[0]

    def chi2(conditional, rows, mean):
        white = conditional.factor.mT @ (rows - mean).mT / math.sqrt(conditional.delta)  # (C, d, k)
        return white.pow(2).sum((-2, -1)) / white[0].numel()

    def functions(params, latents):
        w1, b1 = params["net.layers.0.weight"], params["net.layers.0.bias"]
        w2, b2 = params["net.layers.1.weight"], params["net.layers.1.bias"]
        z2, x2 = latents["z2"], latents["x2"]
        design = torch.cat([inputs, torch.ones(n, 1, dtype=inputs.dtype)], 1)
        first = LinearGaussianConditional(design, torch.tensor([model.prior_precision[0]] * 2
                                                               + [model.bias_precision[0]], dtype=inputs.dtype),
                                          model.delta_z[0])
        theta1 = torch.cat([w1, b1.unsqueeze(-1)], -1)
        post = LinearGaussianConditional(w2, torch.full((1,), 1 / model.delta_x[0], dtype=inputs.dtype),
                                         model.delta_z[1])
        x_mean = post.mean((y - b2.unsqueeze(-2)).mT, prior_mean=z2)
        last = LinearGaussianConditional(torch.cat([x2, torch.ones_like(x2)], -1),
                                         torch.tensor([model.prior_precision[1], model.bias_precision[1]],
                                                      dtype=inputs.dtype), model.delta_z[1])
        theta2 = torch.cat([w2, b2.unsqueeze(-1)], -1)
        return torch.stack([chi2(first, theta1, first.mean(z2)), chi2(post, x2, x_mean),
                            chi2(last, theta2, last.mean(y.expand_as(x2)))], -1)

    return functions


@pytest.mark.parametrize("sampler_cls, kwargs, steps", [
    (IntermediateHMC, dict(step_size=0.2, num_leapfrog=5, init="prior", burn_in=100), 300),
    (NoisyGibbs, dict(), 300),
])
def test_two_layer_conditional_variances_scale_with_temperature(sampler_cls, kwargs, steps):
    """A linear network with a hidden layer (as test_noisy_hmc's exact joint): its posterior is not Gaussian,
    but every block's conditional is, N(m, T Sigma) under the tempered joint. The chains' mean of the whitened
    squared deviations (:func:`conditional_chi2`) is 1 at T = 1 and 2 at T = 2 for each block, within the
    standard error of the independent chains' means (1 at T = 2 if the temperature were ignored)."""
    data = TeacherStudent(**LINEAR, num_train=6, num_test=0, seed=3)
    data.setup()
    x, y = data.train_data.tensors
    order = canonical_order(x, y)  # the samplers' latent rows
    functions = conditional_chi2(NoisyMLP(**LINEAR), x[order].double(), y[order])
    burn, found = 100, {}
    for temperature in (1.0, 2.0):
        recorder = Recorder(functions)
        fit(sampler_cls(NoisyMLP(**LINEAR), num_chains=64, seed=1, dtype="float64", temperature=temperature,
                        **kwargs), data, steps, [recorder])
        chain_means = recorder.trace(burn).mean(1)  # (C, 3): independent chains
        mean, se = chain_means.mean(0), chain_means.std(0) / math.sqrt(len(chain_means))
        found[temperature] = mean
        print(f"{sampler_cls.__name__} T={temperature}: E q (W1|b1, X2, w2|b2) = {mean.tolist()} (se {se.tolist()})")
        assert ((mean - temperature).abs() <= Z * se).all(), f"T={temperature}: {mean} (se {se})"
        assert ((mean - 1.0).abs() > 8 * se).all() if temperature != 1.0 else True
    print(f"{sampler_cls.__name__}: variance ratios T=2 / T=1 {(found[2.0] / found[1.0]).tolist()}")


def test_score_is_the_scaled_gradient_of_the_joint_energy_at_any_temperature():
    """JointDensity.score is Delta_Z / (d_1 d_2) times the sum of -dU/dW^(1) of JointDensity.energy at T = 1,
    and the same number at T = 3 (Delta_Z lambda_W does not change with T); the energy at T = 3 is U / 3 up to
    a constant, and T = 1 leaves every variance exactly as it was."""
    model = NoisyMLP([3, 4, 1], activation="relu", delta_z=[0.3, 0.5], delta_x=0.2)
    gen = torch.Generator().manual_seed(0)
    params = {f"net.{n}": torch.randn(5, *p.shape, generator=gen, dtype=torch.float64)
              for n, p in model.named_parameters()}
    inputs = torch.randn(7, 3, generator=gen, dtype=torch.float64)
    targets = torch.randn(7, generator=gen, dtype=torch.float64)
    latents = {n: torch.randn(5, 7, s, generator=gen, dtype=torch.float64) for n, s in model.latent_sizes().items()}
    cold, hot = JointDensity(model), JointDensity(model, temperature=3.0)
    weight = params["net.layers.0.weight"].clone().requires_grad_()
    energy = cold.energy({**params, "net.layers.0.weight": weight}, latents, inputs, targets)
    (gradient,) = torch.autograd.grad(energy.sum(), weight)
    expected = -0.3 * gradient.sum((-2, -1)) / 12
    torch.testing.assert_close(cold.score(params, latents, inputs, targets), expected)
    torch.testing.assert_close(hot.score(params, latents, inputs, targets), expected)
    shifted = {**params, "net.layers.0.bias": params["net.layers.0.bias"] + 0.1}
    difference = lambda joint: joint.energy(shifted, latents, inputs, targets) - joint.energy(params, latents,  # noqa: E731
                                                                                              inputs, targets)
    torch.testing.assert_close(difference(hot), difference(cold) / 3)
    same = tempered(model, 1.0)
    assert (same.delta_z, same.delta_x, same.prior_precision, same.bias_precision) == \
        (model.delta_z, model.delta_x, model.prior_precision, model.bias_precision)
    cnn = tempered(NoisyCNN((1, 6, 6), ["conv:2:3", "relu", "dense:1"], delta=[0.1, 0.2, 0.3]), 2.0)
    assert cnn.delta == [0.2, 0.4, 0.6] and cnn.prior_precision == [4.5, 16.0]


@pytest.mark.parametrize("temperature", [0.0, -1.0, math.inf, math.nan, "2"])
@pytest.mark.parametrize("sampler_cls", [NoisyGibbs, IntermediateHMC, IntermediateMALA])
def test_bad_temperature_is_refused(sampler_cls, temperature):
    with pytest.raises(ValueError, match="temperature"):
        sampler_cls(NoisyMLP([2, 3, 1]), temperature=temperature)
