"""Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014; structured-sgmcmc spec Eq. 46)."""
from __future__ import annotations

from collections.abc import Iterable

import torch

from lit_bayes.steppers.base import NoisyStepper
from lit_bayes.validation import check_float, check_positive

__all__ = ["SGHMC"]


class SGHMC(NoisyStepper):
    """SGHMC with identity mass, Eq. 46 with the noise scale of Chen et al. (2014, Eq. 15):

        m     <- (1 - gamma eps) m - eps grad U(theta) + N(0, 2 (gamma - eps V_hat / 2) eps)
        theta <- theta + eps m

    The momentum is updated first and theta moves with the new momentum. ``lr`` is eps,
    ``friction`` is gamma (``friction * lr`` must stay below 1), ``noise_estimate`` is
    V_hat (0 by default). Eq. 46 as printed omits the eps in the noise variance; the
    version here is the one whose stationary law is exp(-U) N(m; 0, I) as eps -> 0.
    Momenta are stepper state (``state_dict``) and start at zero.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float,
        friction: float = 1.0,
        noise_estimate: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(params, {"lr": lr, "friction": friction, "noise_estimate": noise_estimate}, generator)

    @staticmethod
    def options(lr: float, friction: float = 1.0, noise_estimate: float = 0.0) -> dict:
        return {"lr": check_positive("lr", lr), "friction": check_positive("friction", friction),
                "noise_estimate": check_float("noise_estimate", noise_estimate, minimum=0.0)}

    def update_group(self, group: dict) -> None:
        eps, gamma, v_hat = group["lr"], group["friction"], group["noise_estimate"]
        if not gamma * eps < 1:
            raise ValueError(f"friction * lr must be < 1 for SGHMC, got {gamma} * {eps:g} = {gamma * eps:g}")
        if not gamma - 0.5 * eps * v_hat > 0:
            raise ValueError(f"noise_estimate * lr / 2 must be < friction, got {v_hat:g} * {eps:g} / 2 >= {gamma:g}")
        noise_std = (2.0 * (gamma - 0.5 * eps * v_hat) * eps) ** 0.5
        for p in self.params_with_grad(group):
            state = self.state[p]
            if "momentum" not in state:
                state["momentum"] = torch.zeros_like(p)
            m = state["momentum"]
            m.mul_(1.0 - gamma * eps).add_(p.grad, alpha=-eps)
            if self.injects_noise(group):
                m.add_(self.noise_like(p), alpha=noise_std)
            p.add_(m, alpha=eps)
