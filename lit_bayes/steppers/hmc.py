"""Hamiltonian Monte Carlo and MALA with Metropolis correction, batched over chains.

Every parameter tensor has the chain as its leading dimension; each chain has its own
step size, momentum and accept/reject decision. Leapfrog integration (Neal 2011, Eq. 5.18-5.20):

    p <- p - (eps/2) grad U(theta);  L times: theta <- theta + eps p, p <- p - eps grad U(theta)
    (the last momentum update is a half step), then accept with probability
    min(1, exp(H(theta, p) - H(theta', p'))),  H = U + |p|^2 / 2.

MALA is HMC with one leapfrog step (Roberts & Tweedie 1996). During the first
``adapt_steps`` steps the step size follows dual averaging (Hoffman & Gelman 2014,
Algorithm 5) towards ``target_accept``; afterwards it is frozen at the averaged value, so
the kept chain is a valid MH chain. A NaN or infinite proposal energy is a rejection.

Jitter (Neal 2011, §5.4.2; Bou-Rabee & Sanz-Serna 2017): a fixed path length eps L can be
close to a period of the dynamics (for a Gaussian with sd sigma, eps L near 2 pi sigma brings
the trajectory back to its start, near pi sigma to its mirror image), and the chain then
barely moves or flips back and forth. With ``step_size_jitter=j`` each transition of each
chain uses eps * U(1 - j, 1 + j); with ``num_leapfrog_jitter=k`` it takes L' ~ U{L - k, ..., L + k}
leapfrog steps. Both are drawn independently of the state, so each transition is a mixture of
MH kernels that all keep the target; they come from the stepper's generator (checkpointed with
the sampler), and nothing is drawn for them when they are 0.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from lit_bayes.steppers.base import NoisyStepper
from lit_bayes.validation import check_int, check_interval, check_positive

__all__ = ["HMCStepper"]

# Dual-averaging constants of Hoffman & Gelman (2014), Section 3.2.1.
_GAMMA, _T0, _KAPPA = 0.05, 10.0, 0.75


def _per_chain_sum(tensors: list[Tensor]) -> Tensor:
    return sum(t.reshape(t.shape[0], -1).sum(1) for t in tensors)


def _expand(per_chain: Tensor, like: Tensor) -> Tensor:
    return per_chain.reshape(-1, *([1] * (like.dim() - 1)))


class HMCStepper(NoisyStepper):
    """One HMC transition per ``step(closure)`` for every chain.

    ``closure()`` must zero the gradients, evaluate the per-chain energies ``(C,)`` at the
    current parameters, back-propagate their sum and return them. ``lr`` is the initial
    leapfrog step size eps, ``num_leapfrog`` is L; ``step_size_jitter`` (in [0, 1)) and
    ``num_leapfrog_jitter`` (an integer < L) randomise both per chain and transition (module docstring).
    """

    def __init__(
        self,
        params: Iterable,
        lr: float,
        num_leapfrog: int = 10,
        target_accept: float = 0.65,
        adapt_steps: int = 0,
        generator: torch.Generator | None = None,
        step_size_jitter: float = 0.0,
        num_leapfrog_jitter: int = 0,
    ) -> None:
        defaults = {"lr": lr, "num_leapfrog": num_leapfrog, "target_accept": target_accept, "adapt_steps": adapt_steps,
                    "step_size_jitter": step_size_jitter, "num_leapfrog_jitter": num_leapfrog_jitter}
        super().__init__(params, defaults, generator)
        if len(self.param_groups) != 1:
            raise ValueError("HMCStepper takes one parameter group (all chains move together)")

    @staticmethod
    def options(lr: float, num_leapfrog: int = 10, target_accept: float = 0.65, adapt_steps: int = 0,
                step_size_jitter: float = 0.0, num_leapfrog_jitter: int = 0) -> dict:
        num_leapfrog = check_int("num_leapfrog", num_leapfrog, 1)
        num_leapfrog_jitter = check_int("num_leapfrog_jitter", num_leapfrog_jitter, 0)
        if num_leapfrog_jitter >= num_leapfrog:
            raise ValueError(f"num_leapfrog_jitter must be < num_leapfrog ({num_leapfrog}) so that every path has "
                             f"at least one leapfrog step, got {num_leapfrog_jitter}")
        return {"lr": check_positive("lr", lr), "num_leapfrog": num_leapfrog,
                "target_accept": check_interval("target_accept", target_accept, 0.0, 1.0),
                "adapt_steps": check_int("adapt_steps", adapt_steps, 0),
                "step_size_jitter": check_interval("step_size_jitter", step_size_jitter, 0.0, 1.0, low_closed=True),
                "num_leapfrog_jitter": num_leapfrog_jitter}

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:  # checkpoints written before the jitter options existed
            group.setdefault("step_size_jitter", 0.0)
            group.setdefault("num_leapfrog_jitter", 0)

    def _state(self, params: list[Tensor]) -> dict:
        state = self.state[params[0]]
        if "log_step" not in state:
            chains = params[0].shape[0]
            log_eps = torch.full((chains,), math.log(self.param_groups[0]["lr"]), device=params[0].device)
            state.update(
                log_step=log_eps.clone(), log_step_avg=log_eps.clone(), h_avg=torch.zeros_like(log_eps),
                mu=log_eps + math.log(10.0), step=torch.zeros((), dtype=torch.long),
                accepted=torch.zeros(chains, dtype=torch.long, device=log_eps.device),  # exact counts
                proposed=torch.zeros((), dtype=torch.long),
            )
        return state

    def step_sizes(self) -> Tensor:
        """Current per-chain step sizes."""
        return self._state(self.param_groups[0]["params"])["log_step"].exp()

    def acceptance(self) -> tuple[Tensor, int]:
        """Accepted proposals per chain ``(C,)`` and the number of proposals made."""
        state = self._state(self.param_groups[0]["params"])
        return state["accepted"], int(state["proposed"])

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor]) -> Tensor:  # type: ignore[override]
        group = self.param_groups[0]
        params = group["params"]
        state = self._state(params)
        with torch.enable_grad():
            energy0 = closure().detach()
        start = [p.detach().clone() for p in params]
        eps, leaps = self._jittered_path(state["log_step"].exp(), group)
        momentum = [self.noise_like(p) for p in params]
        kinetic0 = 0.5 * _per_chain_sum([m * m for m in momentum])
        for m, p in zip(momentum, params):
            m.sub_(_expand(eps / 2, p) * torch.nan_to_num(p.grad))
        energy1 = energy0
        for leap in range(int(leaps.max())):
            moving = leap < leaps  # a chain whose path is done stays where it ended
            for m, p in zip(momentum, params):
                p.add_(_expand(eps * moving, p) * m)
            with torch.enable_grad():
                energy = closure().detach()
            energy1 = torch.where(moving, energy, energy1)
            scale = torch.where(leap == leaps - 1, eps / 2, eps) * moving
            for m, p in zip(momentum, params):
                m.sub_(_expand(scale, p) * torch.nan_to_num(p.grad))
        kinetic1 = 0.5 * _per_chain_sum([m * m for m in momentum])
        log_ratio = torch.nan_to_num(energy0 + kinetic0 - energy1 - kinetic1, nan=-math.inf)
        log_u = torch.rand(log_ratio.shape, generator=self.generator, device=log_ratio.device).log()
        accept = log_u < log_ratio
        for p, p0 in zip(params, start):
            p.copy_(torch.where(_expand(accept, p), p, p0))
        state["accepted"] += accept.to(state["accepted"].dtype)
        state["proposed"] += 1
        state["step"] += 1
        if int(state["step"]) <= group["adapt_steps"]:
            self._adapt(state, log_ratio.clamp(max=0.0).exp(), group["target_accept"])
        elif int(state["step"]) == group["adapt_steps"] + 1 and group["adapt_steps"] > 0:
            state["log_step"] = state["log_step_avg"].clone()
        return torch.where(accept, energy1, energy0)

    def _jittered_path(self, eps: Tensor, group: dict) -> tuple[Tensor, Tensor]:
        """This transition's per-chain step sizes and leapfrog counts ``(C,)``."""
        jitter, spread, leaps = group["step_size_jitter"], group["num_leapfrog_jitter"], group["num_leapfrog"]
        if jitter > 0:
            u = torch.rand(eps.shape, generator=self.generator, device=eps.device, dtype=eps.dtype)
            eps = eps * (1 + jitter * (2 * u - 1))
        if spread > 0:
            return eps, torch.randint(leaps - spread, leaps + spread + 1, eps.shape, generator=self.generator,
                                      device=eps.device)
        return eps, torch.full(eps.shape, leaps, device=eps.device)

    @staticmethod
    def _adapt(state: dict, accept_prob: Tensor, target: float) -> None:
        """One dual-averaging update of the per-chain log step sizes (Algorithm 5)."""
        t = float(state["step"])
        w = 1.0 / (t + _T0)
        state["h_avg"] = (1 - w) * state["h_avg"] + w * (target - accept_prob)
        state["log_step"] = state["mu"] - math.sqrt(t) / _GAMMA * state["h_avg"]
        eta = t ** (-_KAPPA)
        state["log_step_avg"] = eta * state["log_step"] + (1 - eta) * state["log_step_avg"]
