"""``SGMCMC``: SGLD, pSGLD and SGHMC over several chains through ``Trainer.fit``."""
from __future__ import annotations

from typing import Any, Literal

import numpy as np
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
    receives its own gradient) and lets the stepper move every chain; under a
    :class:`~lit_bayes.prior_scales.LearnedScalePrior` a Gibbs draw of the prior's precisions follows.

    Cyclical SG-MCMC (Zhang et al. 2020, Alg. 1): ``schedule="cyclical"`` with
    ``schedule_options: {cycle_length: L, exploration: beta}`` runs cosine cycles of L steps whose first
    beta share is an exploration stage (the stepper's update without its noise: SGD, preconditioned SGD or
    SGD with momentum, moving fast to a new mode) and whose rest is a sampling stage, the only steps whose
    states are kept: after the burn-in, every ``thinning``-th sampling-stage step, or ``num_draws`` of them
    evenly spaced, the last at the final step when it samples.

    Args (besides :class:`SamplerModule`'s):
        stepper: ``"sgld"``, ``"psgld"`` or ``"sghmc"``.
        step_size: eps of the update rule (the stepper's ``lr``).
        schedule: ``"constant"``, ``"polynomial"`` or ``"cyclical"`` (:class:`StepSizeSchedule`).
        schedule_options: ``decay_steps``, ``decay_power``, ``cycle_length``, ``exploration``.
        stepper_options: extra stepper arguments (pSGLD ``alpha``, ``eps_precond``, ``adapt_steps``:
            by default the burn-in, so the preconditioner is frozen for the kept draws;
            SGHMC ``friction``, ``noise_estimate``).
    """

    updates_prior_scales = True

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
        init: Literal["module", "prior", "template", "map"] = "module",
        vectorize: bool = True,
        num_draws: int | None = None,
        init_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            model=model, likelihood=likelihood, prior=prior, num_data=num_data, temperature=temperature,
            minibatch_scaling=minibatch_scaling, num_chains=num_chains, burn_in=burn_in, thinning=thinning,
            seed=seed, init=init, vectorize=vectorize, num_draws=num_draws, init_options=init_options,
        )
        if stepper not in STEPPERS:
            raise ValueError(f"stepper must be one of {sorted(STEPPERS)}, got {stepper!r}")
        self.stepper_name = stepper
        self.stepper_options = dict(stepper_options or {})
        self.schedule = StepSizeSchedule(step_size, schedule, **(schedule_options or {}))
        STEPPERS[stepper].options(lr=step_size, **self.stepper_options)  # bad options fail now, not at fit
        self.automatic_optimization = False
        self._kept_steps: np.ndarray | None = None  # cyclical with exploration: the steps whose states are kept

    def configure_optimizers(self):
        options = dict(self.stepper_options)
        if self.stepper_name == "psgld" and "adapt_steps" not in options:
            # freeze pSGLD's preconditioner when the burn-in ends: the kept draws then target the
            # posterior exactly (see PSGLD); with no burn-in it adapts throughout
            options["adapt_steps"] = self.resolve_sampling()[0] or None
        return STEPPERS[self.stepper_name](
            self.chains.parameters(), lr=self.schedule(0), generator=self.make_generator(), **options
        )

    def resolve_sampling(self) -> tuple[int, int]:
        """The base class's burn-in and thinning; with an exploration stage, also the kept steps
        (:meth:`sampling_stage_steps`)."""
        first = not self._sampling_resolved and self._trainer is not None
        burn_in, thinning = super().resolve_sampling()
        if first and self.schedule.exploration:
            self._kept_steps = self.sampling_stage_steps()
            self.burn_in = int(self._kept_steps[0]) - 1 if len(self._kept_steps) else self._total_steps
            burn_in = self.burn_in
        return burn_in, thinning

    def sampling_stage_steps(self) -> np.ndarray:
        """The step counts after which the state is kept under a cyclical schedule with exploration: those
        after the burn-in whose step lay in a sampling stage, every ``thinning``-th, or ``num_draws`` evenly
        spaced ones."""
        total = self._total_steps
        if total >= 2**62:
            raise ValueError("a cyclical schedule with exploration needs a run of known length: set the Trainer's "
                             "max_epochs or max_steps")
        setting = self.burn_in_setting
        burn_in = int(setting * total) if isinstance(setting, float) else int(setting)
        steps = np.arange(burn_in + 1, total + 1)
        phase = ((steps - 1) % self.schedule.cycle_length) / self.schedule.cycle_length
        steps = steps[phase >= self.schedule.exploration]
        if self.num_draws is None:
            return steps[::-1][::self.thinning][::-1]  # every thinning-th, counted back from the last
        if len(steps) <= self.num_draws:
            return steps
        return steps[np.linspace(0, len(steps) - 1, self.num_draws).round().astype(np.int64)]

    def is_sample_step(self) -> bool:
        if self._kept_steps is None:
            return super().is_sample_step()
        index = int(np.searchsorted(self._kept_steps, self.global_step))
        return index < len(self._kept_steps) and int(self._kept_steps[index]) == self.global_step

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
        noise = not self.schedule.explores(step)
        for group in stepper.param_groups:
            group["lr"] = step_size
            group["noise"] = noise
        stepper.zero_grad()
        energy = self.step_energy(x, y, step)
        self.check_energy(energy)
        self.manual_backward(energy.sum())
        stepper.step()
        self.update_prior_scales()
        self.after_step(step)
        self.log_train({"step_size": step_size, "train/energy": energy.detach().mean()},
                       prog_bar=("step_size", "train/energy"))
        return energy.detach()
