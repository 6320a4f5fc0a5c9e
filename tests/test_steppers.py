"""SGLD, pSGLD, SGHMC and scale-adapted SGHMC sample a correlated 2-D Gaussian (used without Lightning)."""
import pytest
import torch

from lit_bayes.diagnostics import ess_bulk
from lit_bayes.steppers import PSGLD, SGHMC, SGLD, ScaleAdaptedSGHMC
from tests.gaussian_targets import assert_matches_gaussian, correlated_gaussian

CASES = {
    "sgld": (SGLD, {"lr": 0.05}),
    "psgld": (PSGLD, {"lr": 0.1, "alpha": 0.99, "eps_precond": 1e-3}),
    "sghmc": (SGHMC, {"lr": 0.1, "friction": 2.0}),
    "scale_adapted_sghmc": (ScaleAdaptedSGHMC, {"lr": 1e-2, "adapt_steps": 1_000}),  # mass frozen after the burn-in
}


def run_chains(stepper_cls, options, num_chains, steps, burn_in, seed=0):
    mean, cov = correlated_gaussian()
    precision = torch.linalg.inv(cov).float()
    theta = torch.zeros(num_chains, 2, requires_grad=True)
    stepper = stepper_cls([theta], generator=torch.Generator().manual_seed(seed), **options)
    draws = []
    for t in range(steps):
        stepper.zero_grad()
        centred = theta - mean.float()
        energy = 0.5 * ((centred @ precision) * centred).sum()  # chains are independent
        energy.backward()
        stepper.step()
        if t >= burn_in:
            draws.append(theta.detach().clone())
    return torch.stack(draws, dim=1), mean, cov


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("num_chains", [1, 8])
def test_stepper_samples_correlated_gaussian(name, num_chains):
    cls, options = CASES[name]
    steps = {1: 20_000, 8: 10_000}[num_chains]
    trace, mean, cov = run_chains(cls, options, num_chains, steps, burn_in=1_000)
    assert_matches_gaussian(trace, mean, cov)


def test_scale_adapted_sghmc_samples_every_scale_with_one_step_size():
    """Coordinates whose posterior sd spans 1 to 0.1, started 3 to 30 sd out: the scale-adapted sampler's
    default step gets every variance right with the mass frozen after the burn-in, where plain SGHMC at a
    step that mixes the widest coordinate well diverges on the narrowest. (Its step is in units of the
    parameter: it must stay below the narrowest posterior sd, or the discretisation shows.)"""
    precision = torch.tensor([1.0, 1e1, 1e2])

    def trace(stepper_cls, **options):
        theta = (3.0 * torch.ones(16, 3)).requires_grad_()
        stepper = stepper_cls([theta], generator=torch.Generator().manual_seed(0), **options)
        draws = []
        for t in range(6_000):
            stepper.zero_grad()
            (0.5 * precision * theta**2).sum().backward()
            stepper.step()
            if t >= 1_000:
                draws.append(theta.detach().clone())
        return torch.stack(draws, dim=1).double()

    draws = trace(ScaleAdaptedSGHMC, lr=1e-2, adapt_steps=1_000)
    cov = torch.diag(1.0 / precision).double()
    assert_matches_gaussian(draws, torch.zeros(3, dtype=torch.float64), cov)
    assert float(ess_bulk(draws).min()) > 1_000
    with pytest.raises(FloatingPointError):
        trace(SGHMC, lr=0.3, friction=2.0)


def test_steppers_catch_wrong_noise_scale():
    """The check is sharp enough to reject SGLD whose noise variance is off by a factor 2."""
    class HalfNoiseSGLD(SGLD):
        def noise_like(self, p):
            return super().noise_like(p) / 2**0.5

    trace, mean, cov = run_chains(HalfNoiseSGLD, CASES["sgld"][1], 8, 10_000, burn_in=1_000)
    with pytest.raises(AssertionError, match="cov"):
        assert_matches_gaussian(trace, mean, cov)


def test_same_seed_same_chain():
    a, _, _ = run_chains(SGHMC, CASES["sghmc"][1], 2, 50, burn_in=0, seed=3)
    b, _, _ = run_chains(SGHMC, CASES["sghmc"][1], 2, 50, burn_in=0, seed=3)
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: SGLD(p, lr=-1.0), "lr must be a finite number > 0"),
        (lambda p: SGLD(p, lr=0.0), "lr must be a finite number > 0"),
        (lambda p: PSGLD(p, lr=1e-3, alpha=1.0), r"alpha must be a number in \[0, 1\)"),
        (lambda p: PSGLD(p, lr=1e-3, eps_precond=0.0), "eps_precond must be a finite number > 0"),
        (lambda p: SGHMC(p, lr=1e-3, friction=0.0), "friction must be a finite number > 0"),
        (lambda p: SGHMC(p, lr=1e-3, noise_estimate=-1.0), "noise_estimate must be a finite real number >= 0.0"),
        (lambda p: ScaleAdaptedSGHMC(p, lr=1e-2, friction=1.0), r"friction must be a number in \(0, 1\)"),
        (lambda p: ScaleAdaptedSGHMC(p, lr=1e-2, beta=1.0), r"beta must be a number in \[0, 1\)"),
        (lambda p: ScaleAdaptedSGHMC(p, lr=1e-2, adapt_steps=0), "adapt_steps"),
    ],
)
def test_bad_stepper_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make([torch.zeros(2, requires_grad=True)])


def test_sghmc_rejects_unstable_friction_times_lr():
    theta = torch.zeros(2, requires_grad=True)
    stepper = SGHMC([theta], lr=0.5, friction=3.0)
    theta.sum().backward()
    with pytest.raises(ValueError, match="friction \\* lr must be < 1"):
        stepper.step()


def test_nan_gradient_is_a_clear_error():
    theta = torch.zeros(2, requires_grad=True)
    stepper = SGLD([theta], lr=1e-2)
    (theta * float("nan")).sum().backward()
    with pytest.raises(FloatingPointError, match="NaN or infinite.*step size"):
        stepper.step()
