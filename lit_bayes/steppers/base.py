"""Common base of the stochastic-gradient MCMC steppers."""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor
from torch.optim import Optimizer

from lit_bayes.validation import check_positive

__all__ = ["NoisyStepper"]


class NoisyStepper(Optimizer):
    """An optimizer whose ``step`` adds Gaussian noise drawn from its own generator.

    The gradient in ``p.grad`` must be the gradient of the energy U (negative log target
    density, tempered as in :mod:`lit_bayes.posterior`); ``lr`` is the step size epsilon.
    A ``generator`` makes the chain reproducible and is required for exact resume; it must
    live on the parameters' device.
    """

    def __init__(self, params: Iterable, defaults: dict, generator: torch.Generator | None = None) -> None:
        super().__init__(params, self.options(**defaults))
        self.generator = generator

    @staticmethod
    def options(lr: float) -> dict:
        """The stepper's checked options (its ``defaults``) from its keyword arguments; a sampler
        calls it to reject bad options when it is built, without building a stepper. A subclass
        with more options overrides it."""
        return {"lr": check_positive("lr", lr)}

    @torch.no_grad()
    def step(self, closure=None):
        """One transition of every parameter group (``update_group``); ``closure``, if
        given, re-evaluates the energy with gradients and its value is returned."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            self.update_group(group)
        return loss

    def update_group(self, group: dict) -> None:
        """Move the parameters of ``group`` given their gradients (the update rule)."""
        raise NotImplementedError

    @staticmethod
    def injects_noise(group: dict) -> bool:
        """Whether a step of ``group`` adds its noise: not while ``group["noise"]`` is False, the exploration
        stage of cyclical SG-MCMC (Zhang et al. 2020, Alg. 1), where the step is the optimiser's alone."""
        return group.get("noise", True)

    def noise_like(self, p: Tensor) -> Tensor:
        """Standard normal noise shaped like ``p``, from this stepper's generator."""
        return torch.randn(p.shape, generator=self.generator, device=p.device, dtype=p.dtype)

    def params_with_grad(self, group: dict) -> list[Tensor]:
        """Parameters of ``group`` that received a gradient; a non-finite one is an error."""
        out = []
        for p in group["params"]:
            if p.grad is None:
                continue
            if not torch.isfinite(p.grad).all():
                raise FloatingPointError(
                    f"{type(self).__name__}: the energy gradient is NaN or infinite "
                    f"(lr={group['lr']:g}); the step size is likely too large or the data holds extreme values"
                )
            out.append(p)
        return out
