"""Markov kernels M_k that move SMC particles (Feynman-Kac spec §2 Eq. 3 and §3).

Every kernel moves all J particles at once, each particle independently, drawing from the
sampler's generator. Particles are dicts of stacked tensors ``(J, ...)``.

Temperature T (the samplers' target is the Feynman-Kac path density raised to 1/T, see
:mod:`lit_bayes.steppers.feynman_kac`): a Gaussian move's density to the power 1/T is the
same move with T times the noise variance, so the random walk and the Ornstein-Uhlenbeck
move take ``temperature`` (the OU move's stationary law becomes the tempered prior
pi^{1/T}). The Metropolis move gets its tempered target from the caller.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from lit_bayes.grad_mode import without_grad
from lit_bayes.posterior import GaussianPrior
from lit_bayes.validation import check_int, check_positive

__all__ = ["OrnsteinUhlenbeck", "RandomWalk", "RandomWalkMetropolis", "make_kernel"]

Particles = Mapping[str, Tensor]


def _noise(p: Tensor, generator: torch.Generator) -> Tensor:
    """Standard normal noise shaped like ``p``, in ``p``'s dtype except for float64 particles on CPU, for which it
    is drawn in float32 and the caller widens it: adding it to the float64 ``p`` promotes it exactly, but a product
    with a Python scalar stays float32, so scale it after ``.to(p.dtype)``. torch's float32 normals are vectorised
    (~4x faster than float64 on CPU, where drawing the noise was the largest cost of an OHSMC step at J = 100), and
    a move loses nothing that matters (values on a 2^-24 grid, tails cut near 5.8 sigma, a mass of ~1e-8);
    particles, weights and likelihoods stay float64."""
    dtype = torch.float32 if p.dtype == torch.float64 and p.is_cpu else p.dtype
    return torch.randn(p.shape, generator=generator, device=p.device, dtype=dtype)


class RandomWalk:
    """Gaussian random walk ``phi' = phi + sqrt(T variance) eps`` (the paper's OHSMC move,
    variance 0.01 for pBNNs, at temperature T = 1); not invariant for any posterior, it sets
    the cloud's spread."""

    def __init__(self, variance: float, temperature: float = 1.0) -> None:
        self.std = (check_positive("temperature", temperature) * check_positive("variance", variance)) ** 0.5

    def move(self, particles: Particles, generator: torch.Generator, log_target=None) -> dict[str, Tensor]:
        return {n: torch.add(p, _noise(p, generator), alpha=self.std) for n, p in particles.items()}

    @without_grad
    def move_(self, particles: Particles, generator: torch.Generator) -> None:
        """:meth:`move` in place: the same values from the same draws, without new tensors."""
        for p in particles.values():
            p.add_(_noise(p, generator), alpha=self.std)


class OrnsteinUhlenbeck:
    """Exact Ornstein-Uhlenbeck transition over time ``delta`` whose stationary law is the
    tempered Gaussian prior N(0, T v) of each parameter: ``z = exp(-delta / (2 v))``,
    ``phi' = z phi + sqrt(T v (1 - z^2)) eps`` (spec §3, the UCI move, delta = 0.1, T = 1)."""

    def __init__(self, delta: float, prior: GaussianPrior, temperature: float = 1.0) -> None:
        self.delta = check_positive("delta", delta)
        self.prior = prior
        self.temperature = check_positive("temperature", temperature)

    def _coefficients(self, name: str) -> tuple[float, float]:
        """``z`` and the noise scale ``sqrt(T v (1 - z^2))`` of parameter ``name``."""
        v = self.prior.variance_of(name)
        z = math.exp(-self.delta / (2.0 * v))
        return z, math.sqrt(self.temperature * v * (1.0 - z * z))

    def move(self, particles: Particles, generator: torch.Generator, log_target=None) -> dict[str, Tensor]:
        out = {}
        for name, p in particles.items():
            z, scale = self._coefficients(name)
            out[name] = z * p + scale * _noise(p, generator).to(p.dtype)
        return out

    @without_grad
    def move_(self, particles: Particles, generator: torch.Generator) -> None:
        """:meth:`move` in place: the same values from the same draws, without new tensors."""
        for name, p in particles.items():
            z, scale = self._coefficients(name)
            p.mul_(z).add_(_noise(p, generator).to(p.dtype).mul_(scale))


class RandomWalkMetropolis:
    """``steps`` random-walk Metropolis steps per particle with proposal variance ``variance``,
    invariant for ``log_target`` (SGSMC's move: prior x likelihood of the processed prefix).
    A proposal whose target is NaN is rejected. ``acceptance`` holds the last move's rate
    (a 0-d tensor, so reading it is the caller's choice of when to synchronise)."""

    def __init__(self, variance: float, steps: int = 10) -> None:
        self.std = check_positive("variance", variance) ** 0.5
        self.steps = check_int("steps", steps, 1)
        self.acceptance = torch.tensor(float("nan"))

    def move(
        self, particles: Particles, generator: torch.Generator, log_target: Callable[[Particles], Tensor] | None = None
    ) -> dict[str, Tensor]:
        if log_target is None:
            raise ValueError("RandomWalkMetropolis needs a log_target")
        current = dict(particles)
        current_lt = log_target(current)
        accepted = torch.zeros_like(current_lt)
        for _ in range(self.steps):
            proposal = {n: p + self.std * _noise(p, generator).to(p.dtype) for n, p in current.items()}
            proposal_lt = log_target(proposal)
            log_u = torch.rand(current_lt.shape, generator=generator, device=current_lt.device, dtype=current_lt.dtype).log()
            accept = log_u <= proposal_lt - current_lt  # False for a NaN target
            for name, p in current.items():
                mask = accept.reshape(-1, *([1] * (p.dim() - 1)))
                current[name] = torch.where(mask, proposal[name], p)
            current_lt = torch.where(accept, proposal_lt, current_lt)
            accepted += accept.to(accepted.dtype)
        self.acceptance = accepted.mean() / self.steps
        return current


KERNELS = ("random_walk", "ou", "rwmh")


def make_kernel(name: str, prior: GaussianPrior, options: Mapping[str, float] | None = None, temperature: float = 1.0):
    """Build a kernel by name: ``"random_walk"`` (``variance``), ``"ou"`` (``delta``) or
    ``"rwmh"`` (``variance``, ``steps``); the first two at ``temperature``."""
    options = dict(options or {})
    try:
        if name == "random_walk":
            return RandomWalk(**{"variance": 0.01, **options}, temperature=temperature)
        if name == "ou":
            return OrnsteinUhlenbeck(**{"delta": 0.1, **options}, prior=prior, temperature=temperature)
        if name == "rwmh":
            return RandomWalkMetropolis(**{"variance": 0.05, "steps": 10, **options})
    except TypeError as err:
        raise ValueError(f"kernel_options {options} do not fit kernel {name!r}: {err}") from None
    raise ValueError(f"kernel must be one of {KERNELS}, got {name!r}")
