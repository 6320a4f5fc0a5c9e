"""``HMC`` and ``MALA``: full-batch Metropolis-corrected baselines over batched chains."""
from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from lit_bayes.posterior import GaussianPrior, Likelihood
from lit_bayes.samplers.base import SamplerModule
from lit_bayes.steppers.hmc import HMCStepper

__all__ = ["HMC", "MALA"]


class HMC(SamplerModule):
    """Hamiltonian Monte Carlo (:class:`lit_bayes.steppers.hmc.HMCStepper`) as a sampler module.

    Exact (Metropolis-corrected) only when every step sees the same energy: use a
    full-batch DataModule (``batch_size=None``). ``step_size`` is the initial leapfrog
    step, adapted by dual averaging towards ``target_accept`` during the first
    ``adapt_steps`` steps (default: the burn-in) and frozen afterwards. The acceptance
    counts (one block: all parameters) are read by ``AcceptanceMonitor``.
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: GaussianPrior | None = None,
        step_size: float = 1e-2,
        num_leapfrog: int = 10,
        target_accept: float = 0.65,
        adapt_steps: int | None = None,
        num_data: int | None = None,
        temperature: float = 1.0,
        num_chains: int = 1,
        burn_in: int = 0,
        thinning: int = 1,
        seed: int = 0,
        init: Literal["module", "prior", "template"] = "module",
        vectorize: bool = True,
    ) -> None:
        super().__init__(
            model, likelihood, prior, num_data, temperature, "rescaled",
            num_chains, burn_in, thinning, seed, init, vectorize,
        )
        self.stepper_options = {
            "lr": step_size, "num_leapfrog": num_leapfrog, "target_accept": target_accept,
            "adapt_steps": burn_in if adapt_steps is None else adapt_steps,
        }
        HMCStepper([torch.zeros(1, 1, requires_grad=True)], **self.stepper_options)  # validate now
        self.automatic_optimization = False

    def configure_optimizers(self):
        return HMCStepper(list(self.chains.parameters()), generator=self.make_generator(), **self.stepper_options)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = self.check_batch(batch)
        stepper = self.optimizers()

        def closure() -> Tensor:
            stepper.zero_grad()
            energy = self.energy(self.chains.as_dict(), x, y)
            self.manual_backward(energy.sum())
            return energy

        energy = stepper.step(closure=closure)  # through Lightning, so global_step counts it
        self.check_energy(energy)
        self.log("step_size", stepper.optimizer.step_sizes().mean(), prog_bar=True, on_step=True, on_epoch=False)
        self.log("train/energy", energy.mean(), prog_bar=True, on_step=True, on_epoch=False)
        return energy

    def acceptance_counts(self) -> dict[str, Any]:
        """Accepted proposals per chain and block ``(C, 1)``, proposals made, block labels."""
        accepted, proposed = self.optimizers().optimizer.acceptance()
        return {"accepted": accepted.unsqueeze(1), "proposed": proposed, "layers": ["all"], "nodes": ["all"]}


class MALA(HMC):
    """Metropolis-adjusted Langevin algorithm: HMC with one leapfrog step (target 0.574)."""

    def __init__(self, model: nn.Module, likelihood: Likelihood, prior: GaussianPrior | None = None,
                 step_size: float = 1e-2, target_accept: float = 0.574, **kwargs: Any) -> None:
        super().__init__(model, likelihood, prior, step_size=step_size, num_leapfrog=1,
                         target_accept=target_accept, **kwargs)
