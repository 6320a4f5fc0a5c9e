"""Scale-adapted SGHMC (Springenberg, Klein, Falkner & Hutter 2016)."""
from __future__ import annotations

from collections.abc import Iterable

import torch

from lit_bayes.steppers.base import NoisyStepper
from lit_bayes.steppers.psgld import rms_preconditioner
from lit_bayes.validation import check_interval, check_optional_int, check_positive

__all__ = ["ScaleAdaptedSGHMC"]


class ScaleAdaptedSGHMC(NoisyStepper):
    """SGHMC whose diagonal mass is the gradients' own scale, learned while it adapts and then frozen
    (Springenberg et al. 2016, Section 4.2):

        v     <- v - eps M^-1 g - alpha v + N(0, 2 eps alpha M^-1)
        theta <- theta + v,             M^-1 = 1 / (lambda + sqrt(V_hat)),   g = grad U(theta)

    This is SGHMC (Chen et al. 2014) with mass M, step sqrt(eps) and friction alpha M / sqrt(eps), written in
    the velocity v = sqrt(eps) M^-1 p; its stationary law is exp(-U) N(p; 0, M) for any fixed M. With the
    mass the gradient scale, a step moves every coordinate by about eps times its gradient over its typical
    gradient: the step no longer depends on how large the gradients are (the data set's size, a layer's
    fan-in), so one ``lr`` suits many networks and data sets. It is then in units of the parameters, and
    must stay below the narrowest posterior standard deviation for the discretisation to be negligible.

    While adapting, V_hat is an exponential average of g * g with rate ``beta``, divided by 1 - beta^t after t
    updates to remove its bias towards its zero start (Kingma & Ba 2015), as :class:`~lit_bayes.steppers.PSGLD`
    averages; Springenberg et al. use an adaptive window instead, which follows the latest gradient alone
    while the gradient keeps its direction, so a coordinate whose gradient passes zero gets a near-zero V_hat
    and a diverging step. With ``adapt_steps=n`` the mass stops changing after n steps: from then on the
    chain targets the posterior exactly (as eps -> 0); the paper's noise-estimate term (B_hat) is taken as
    zero. :class:`lit_bayes.samplers.SGMCMC` freezes it at the end of the burn-in by default. Velocity,
    V_hat and the step count are stepper state (``state_dict``), so a resumed chain continues exactly.

    Args:
        lr: eps, the squared step.
        friction: alpha, the share of the velocity lost per step, in (0, 1).
        beta: the averaging rate of V_hat, in [0, 1).
        eps_precond: lambda, keeps M^-1 finite where V_hat is zero.
        adapt_steps: steps after which the mass is frozen (``None``: never).
    """

    def __init__(
        self,
        params: Iterable,
        lr: float,
        friction: float = 0.05,
        beta: float = 0.99,
        eps_precond: float = 1e-5,
        adapt_steps: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(params, {"lr": lr, "friction": friction, "beta": beta, "eps_precond": eps_precond,
                                  "adapt_steps": adapt_steps}, generator)

    @staticmethod
    def options(lr: float, friction: float = 0.05, beta: float = 0.99, eps_precond: float = 1e-5,
                adapt_steps: int | None = None) -> dict:
        return {"lr": check_positive("lr", lr), "friction": check_interval("friction", friction, 0.0, 1.0),
                "beta": check_interval("beta", beta, 0.0, 1.0, low_closed=True),
                "eps_precond": check_positive("eps_precond", eps_precond),
                "adapt_steps": check_optional_int("adapt_steps", adapt_steps, 1)}

    def update_group(self, group: dict) -> None:
        eps, alpha = group["lr"], group["friction"]
        for p in self.params_with_grad(group):
            state = self.state[p]
            inverse_mass = rms_preconditioner(state, p.grad, group["beta"], group["eps_precond"], group["adapt_steps"])
            if "velocity" not in state:
                state["velocity"] = torch.zeros_like(p)
            v = state["velocity"]
            v.mul_(1.0 - alpha).addcmul_(inverse_mass, p.grad, value=-eps)
            if self.injects_noise(group):
                v.add_(self.noise_like(p) * (2.0 * eps * alpha * inverse_mass).sqrt())
            p.add_(v)
