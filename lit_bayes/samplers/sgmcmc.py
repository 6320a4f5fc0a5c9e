"""``SGMCMC``: SGLD, pSGLD and SGHMC over several chains through ``Trainer.fit``."""
from __future__ import annotations

from typing import Any, Literal

import torch
from torch import nn

from lit_bayes.posterior import Likelihood, Prior
from lit_bayes.samplers.base import SamplerModule
from lit_bayes.schedules import StepSizeSchedule
from lit_bayes.steppers import PSGLD, SGHMC, SGLD

__all__ = ["SGMCMC"]

STEPPERS = {"sgld": SGLD, "psgld": PSGLD, "sghmc": SGHMC}


class SGMCMC(SamplerModule):
    """Stochastic-gradient MCMC (structured-sgmcmc spec §3, Eqs. 44-46) with batched chains.

    Each training step draws one minibatch, evaluates the tempered energy of every chain
    in one vectorised call, back-propagates their sum (chains are independent, so each
    receives its own gradient) and lets the stepper move every chain.

    Args (besides :class:`SamplerModule`'s):
        stepper: ``"sgld"``, ``"psgld"`` or ``"sghmc"``.
        step_size: eps of the update rule (the stepper's ``lr``).
        schedule: ``"constant"``, ``"polynomial"`` or ``"cyclical"`` (:class:`StepSizeSchedule`).
        schedule_options: ``decay_steps``, ``decay_power``, ``cycle_length``.
        stepper_options: extra stepper arguments (pSGLD ``alpha``, ``eps_precond``, ``adapt_steps``:
            by default the burn-in, so the preconditioner is frozen for the kept draws;
            SGHMC ``friction``, ``noise_estimate``).
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: Prior | None = None,
        stepper: Literal["sgld", "psgld", "sghmc"] = "sgld",
        step_size: float = 1e-4,
        schedule: Literal["constant", "polynomial", "cyclical"] = "constant",
        schedule_options: dict[str, Any] | None = None,
        stepper_options: dict[str, Any] | None = None,
        num_data: int | None = None,
        temperature: float = 1.0,
        minibatch_scaling: Literal["rescaled", "sum"] = "rescaled",
        num_chains: int = 1,
        burn_in: int | float = 0,
        thinning: int = 1,
        seed: int = 0,
        init: Literal["module", "prior", "template"] = "module",
        vectorize: bool = True,
        num_draws: int | None = None,
    ) -> None:
        super().__init__(
            model=model, likelihood=likelihood, prior=prior, num_data=num_data, temperature=temperature,
            minibatch_scaling=minibatch_scaling, num_chains=num_chains, burn_in=burn_in, thinning=thinning,
            seed=seed, init=init, vectorize=vectorize, num_draws=num_draws,
        )
        if stepper not in STEPPERS:
            raise ValueError(f"stepper must be one of {sorted(STEPPERS)}, got {stepper!r}")
        self.stepper_name = stepper
        self.stepper_options = dict(stepper_options or {})
        self.schedule = StepSizeSchedule(step_size, schedule, **(schedule_options or {}))
        STEPPERS[stepper].options(lr=step_size, **self.stepper_options)  # bad options fail now, not at fit
        self.automatic_optimization = False

    def configure_optimizers(self):
        options = dict(self.stepper_options)
        if self.stepper_name == "psgld" and "adapt_steps" not in options:
            # freeze pSGLD's preconditioner when the burn-in ends: the kept draws then target the
            # posterior exactly (see PSGLD); with no burn-in it adapts throughout
            options["adapt_steps"] = self.resolve_sampling()[0] or None
        return STEPPERS[self.stepper_name](
            self.chains.parameters(), lr=self.schedule(0), generator=self.make_generator(), **options
        )

    def step_energy(self, x: torch.Tensor, y: torch.Tensor, step: int) -> torch.Tensor:
        """Per-chain energy ``(C,)`` whose gradient drives step ``step`` (subclasses change it)."""
        return self.energy(self.chains.as_dict(), x, y)

    def after_step(self, step: int) -> None:
        """Called once every chain has moved at step ``step`` (subclasses use it)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = self.check_batch(batch)
        step = self.global_step
        stepper = self.optimizers()
        step_size = self.schedule(step)
        for group in stepper.param_groups:
            group["lr"] = step_size
        stepper.zero_grad()
        energy = self.step_energy(x, y, step)
        self.check_energy(energy)
        self.manual_backward(energy.sum())
        stepper.step()
        self.after_step(step)
        self.log_train({"step_size": step_size, "train/energy": energy.detach().mean()},
                       prog_bar=("step_size", "train/energy"))
        return energy.detach()
