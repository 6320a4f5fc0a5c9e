"""``SGMCMC``: SGLD, pSGLD and SGHMC over several chains through ``Trainer.fit``."""
from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from lit_bayes.posterior import Likelihood, Prior
from lit_bayes.samplers.base import SamplerModule
from lit_bayes.schedules import StepSizeSchedule
from lit_bayes.steppers import PSGLD, SGHMC, SGLD, ScaleAdaptedSGHMC

__all__ = ["SGMCMC"]

STEPPERS = {"sgld": SGLD, "psgld": PSGLD, "sghmc": SGHMC, "scale_adapted_sghmc": ScaleAdaptedSGHMC}
#: the steppers that adapt a preconditioner, frozen by default when the burn-in ends (``adapt_steps``)
ADAPTIVE = ("psgld", "scale_adapted_sghmc")
#: each stepper's step size when none is given: the scale-adapted SGHMC's is in units of its adapted mass
DEFAULT_STEP_SIZES = {"sgld": 1e-4, "psgld": 1e-4, "sghmc": 1e-4, "scale_adapted_sghmc": 1e-2}


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
        stepper: ``"sgld"``, ``"psgld"``, ``"sghmc"`` or ``"scale_adapted_sghmc"`` (Springenberg et al. 2016: the
            mass adapted to the gradients' scale during the burn-in, so its step does not depend on that scale).
        step_size: eps of the update rule (the stepper's ``lr``); ``None``: the stepper's default, 1e-4, or 1e-2 for
            ``"scale_adapted_sghmc"``.
        schedule: ``"constant"``, ``"polynomial"`` or ``"cyclical"`` (:class:`StepSizeSchedule`).
        schedule_options: ``decay_steps``, ``decay_power``, ``cycle_length``, ``exploration``.
        stepper_options: extra stepper arguments (pSGLD ``alpha``, ``eps_precond``, ``adapt_steps``:
            by default the burn-in, so the preconditioner is frozen for the kept draws;
            SGHMC ``friction``, ``noise_estimate``; scale-adapted SGHMC ``friction``, ``eps_precond``,
            ``adapt_steps``, frozen as pSGLD's).
    """

    updates_prior_scales = True
    #: whether a step's gradient is that of the energy the chains target, so that theta . grad E measures their
    #: configurational temperature (:meth:`chain_virial`); not for the structured samplers' surrogate energies
    measures_configurational_temperature = True

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: Prior | None = None,
        stepper: Literal["sgld", "psgld", "sghmc", "scale_adapted_sghmc"] = "sgld",
        step_size: float | None = None,
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
        step_size = DEFAULT_STEP_SIZES[stepper] if step_size is None else step_size
        self.schedule = StepSizeSchedule(step_size, schedule, **(schedule_options or {}))
        STEPPERS[stepper].options(lr=step_size, **self.stepper_options)  # bad options fail now, not at fit
        self.automatic_optimization = False
        self._kept_steps: np.ndarray | None = None  # cyclical with exploration: the steps whose states are kept
        self.virial: torch.Tensor | None = None  # (theta - origin) . grad E of every chain at its last kept state
        self.register_buffer("virial_origin", None)  # (C, P): every chain's first kept state (chain_virial)

    def configure_optimizers(self):
        options = dict(self.stepper_options)
        if self.stepper_name in ADAPTIVE and "adapt_steps" not in options:
            # freeze the preconditioner (pSGLD's, the scale-adapted SGHMC's mass) when the burn-in ends: the kept
            # draws then target the posterior exactly; with no burn-in it adapts throughout
            options["adapt_steps"] = self.resolve_sampling()[0] or None
        return STEPPERS[self.stepper_name](
            self.stepper_parameters(), lr=self.schedule(0), generator=self.make_generator(), **options
        )

    @torch.no_grad()
    def chain_virial(self) -> torch.Tensor:
        """(theta - c) . grad E(theta) of every chain ``(C,)``, from the gradients of the step being taken
        (minibatch estimates of the tempered energy's, unbiased), c the chain's first kept state (a constant:
        :attr:`virial_origin`, checkpointed). For exact draws of exp(-E) its mean is the number of sampled
        parameters for any constant c (integration by parts, and E[grad E] = 0); c near the posterior keeps its
        variance small. The configurational temperature of the health verdict
        (:class:`~lit_bayes.callbacks.ChainDiagnostics`)."""
        if self.virial_origin is None:
            self.virial_origin = self.chains.flat().clone()
        origin = self.chains.unflatten(self.virial_origin)
        total = torch.zeros(self.num_chains, dtype=torch.float64, device=self.virial_origin.device)
        for name, p in self.chains.as_dict().items():
            if p.grad is not None:
                total += ((p.detach() - origin[name]) * p.grad).flatten(1).sum(1).double()
        return total

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        origin = checkpoint.get("state_dict", {}).get("virial_origin")
        # shaped here and filled by the state dict, or unset when the checkpoint precedes the first kept state
        self.virial_origin = None if origin is None else torch.empty_like(origin, device=self.device)

    def stepper_parameters(self) -> Any:
        """What the stepper moves: the chains' parameters (a replica ladder gives one group per temperature)."""
        return self.chains.parameters()

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

    def keeps_state(self, steps: int) -> bool:
        if self._kept_steps is None:
            return super().keeps_state(steps)
        index = int(np.searchsorted(self._kept_steps, steps))
        return index < len(self._kept_steps) and int(self._kept_steps[index]) == steps

    def step_energy(self, x: torch.Tensor, y: torch.Tensor, step: int) -> torch.Tensor:
        """Per-chain energy ``(C,)`` whose gradient drives step ``step`` (subclasses change it)."""
        return self.energy(self.chains.as_dict(), x, y)

    def after_step(self, step: int, x: torch.Tensor, y: torch.Tensor) -> None:
        """Called once every chain has moved at step ``step`` on the batch ``(x, y)`` (subclasses use it)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = self.check_batch(batch)
        step = self.global_step
        stepper = self.optimizers()
        step_size = self.schedule(step)
        noise = not self.schedule.explores(step)
        for group in stepper.param_groups:
            group["lr"] = step_size * group.get("step_scale", 1.0)  # a replica's own scale (ReplicaExchangeSGMCMC)
            group["noise"] = noise
        stepper.zero_grad()
        energy = self.step_energy(x, y, step)
        self.check_energy(energy)
        self.manual_backward(energy.sum())
        if self.measures_configurational_temperature and self.keeps_state(step):  # the state moved from was kept
            self.virial = self.chain_virial()
        stepper.step()
        self.update_prior_scales()
        self.after_step(step, x, y)
        energy = energy.detach()[:self.num_chains]  # the sampled chains' (a replica ladder's hotter rows follow)
        self.log_train({"step_size": step_size, "train/energy": energy.mean()}, prog_bar=("step_size", "train/energy"))
        return energy
