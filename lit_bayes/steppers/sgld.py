"""Stochastic gradient Langevin dynamics (Welling & Teh 2011; structured-sgmcmc spec Eq. 44)."""
from __future__ import annotations

from collections.abc import Iterable

import torch

from lit_bayes.steppers.base import NoisyStepper

__all__ = ["SGLD"]


class SGLD(NoisyStepper):
    """SGLD, Eq. 44: ``theta <- theta - (eps/2) grad U(theta) + N(0, eps I)``.

    ``lr`` is eps. With the energy U/T of :class:`lit_bayes.posterior.Posterior`, the
    stationary law (as eps -> 0) is the tempered posterior; T = 1 is the true posterior.
    """

    def __init__(self, params: Iterable, lr: float, generator: torch.Generator | None = None) -> None:
        super().__init__(params, {"lr": lr}, generator)

    def update_group(self, group: dict) -> None:
        eps = group["lr"]
        for p in self.params_with_grad(group):
            p.add_(p.grad, alpha=-0.5 * eps)
            if self.injects_noise(group):
                p.add_(self.noise_like(p), alpha=eps**0.5)
