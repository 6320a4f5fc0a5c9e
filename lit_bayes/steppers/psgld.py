"""Preconditioned SGLD (Li et al. 2016; structured-sgmcmc spec Eq. 45)."""
from __future__ import annotations

from collections.abc import Iterable

import torch

from lit_bayes.steppers.base import NoisyStepper
from lit_bayes.validation import check_interval, check_optional_int, check_positive

__all__ = ["PSGLD", "rms_preconditioner"]


class PSGLD(NoisyStepper):
    """pSGLD with the RMSprop diagonal preconditioner, Eq. 45 without the Gamma term.

        V      <- alpha V + (1 - alpha) g * g,      V = 0 before the first step, g = grad U(theta)
        G      =  1 / (lambda + sqrt(V / (1 - alpha^t)))
        theta  <- theta - (eps/2) G g + N(0, eps G)

    ``lr`` is eps, ``alpha`` the averaging rate, ``eps_precond`` is lambda. V starts at zero
    (Li et al. 2016, Algorithm 1) and ``1 - alpha^t`` after t updates removes its bias towards
    that start (Kingma & Ba 2015, Algorithm 1): V / (1 - alpha^t) is an average of the recent
    g * g, so the first, large gradients of a chain started far from the posterior (a prior
    draw) weigh ~(1 - alpha) alpha^t after t steps, not alpha^t as when V starts at the
    first g * g (which, frozen after a short burn-in, left a preconditioner tens of times
    too small and chains that never left their prior draws).

    The ``sum_theta grad R`` (Gamma) term of Eq. 45 is dropped, as Li et al. recommend. That
    term is what keeps a *state-dependent* preconditioner exact; without it the chain is
    biased wherever V follows theta's own fluctuations (exact or low-noise gradients: on a
    conjugate regression the posterior variance came out 20-50% too large). With
    ``adapt_steps=n``, V stops changing after n steps: from then on G is constant, the
    Gamma term is exactly zero and the chain targets the posterior. Freeze it at the end of
    the burn-in, once the chains have left their starting points and V has had ~1/(1 - alpha)
    steps to forget them (:class:`lit_bayes.samplers.SGMCMC` does this by default).
    ``adapt_steps=None`` adapts throughout. Temperature is in the energy (see
    :mod:`lit_bayes.posterior`). V and the step count are stepper state (``state_dict``),
    so a resumed chain continues exactly.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float,
        alpha: float = 0.99,
        eps_precond: float = 1e-5,
        adapt_steps: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps_precond": eps_precond, "adapt_steps": adapt_steps},
                         generator)

    @staticmethod
    def options(lr: float, alpha: float = 0.99, eps_precond: float = 1e-5, adapt_steps: int | None = None) -> dict:
        return {"lr": check_positive("lr", lr), "alpha": check_interval("alpha", alpha, 0.0, 1.0, low_closed=True),
                "eps_precond": check_positive("eps_precond", eps_precond),
                "adapt_steps": check_optional_int("adapt_steps", adapt_steps, 1)}

    def update_group(self, group: dict) -> None:
        eps = group["lr"]
        for p in self.params_with_grad(group):
            precond = rms_preconditioner(self.state[p], p.grad, group["alpha"], group["eps_precond"],
                                         group["adapt_steps"])
            p.addcmul_(precond, p.grad, value=-0.5 * eps)
            if self.injects_noise(group):
                p.add_(self.noise_like(p) * (eps * precond).sqrt())


def rms_preconditioner(state: dict, grad: torch.Tensor, alpha: float, lam: float, adapt: int | None) -> torch.Tensor:
    """1 / (lam + sqrt(V / (1 - alpha^t))) after updating the average V of ``grad * grad`` kept in ``state`` (with
    its step count), while fewer than ``adapt`` steps have been taken (``None``: always): the preconditioner of
    :class:`PSGLD` and the inverse mass of :class:`~lit_bayes.steppers.ScaleAdaptedSGHMC`."""
    if "square_avg" not in state:
        state["square_avg"] = torch.zeros_like(grad)
        state["step"] = torch.zeros((), dtype=torch.long)
    v = state["square_avg"]
    if adapt is None or state["step"] < adapt:
        v.mul_(alpha).addcmul_(grad, grad, value=1.0 - alpha)
    state["step"] += 1
    updates = int(state["step"]) if adapt is None else min(int(state["step"]), adapt)
    return 1.0 / (lam + (v / (1.0 - alpha**updates)).sqrt())
