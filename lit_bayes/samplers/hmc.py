"""``HMC`` and ``MALA``: full-batch Metropolis-corrected baselines over batched chains.

The informed start of the teacher-student test (noisy-gibbs spec §4) is configuration here too:
``informed_chains: k`` starts the first k chains at the teacher's weights of the run's teacher-student
DataModule (:class:`lit_bayes.samplers.noisy_gibbs.InformedStart`, read at setup), the classical
posterior's baselines of the paper's Exp. B."""
from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from lit_bayes.posterior import Likelihood, Prior
from lit_bayes.samplers.base import SamplerModule
from lit_bayes.samplers.full_batch import FullBatchOnly
from lit_bayes.samplers.noisy_gibbs import InformedStart, check_informed_chains
from lit_bayes.steppers.hmc import HMCStepper
from lit_bayes.validation import check_positive

__all__ = ["HMC", "MALA"]


class HMC(FullBatchOnly, SamplerModule):
    """Hamiltonian Monte Carlo (:class:`lit_bayes.steppers.hmc.HMCStepper`) as a sampler module.

    Exact (Metropolis-corrected) only when every step sees the same energy: use a
    full-batch DataModule (``batch_size=None``); a smaller training batch gets a warning, once.
    ``step_size`` is the initial leapfrog step, adapted by dual averaging towards
    ``target_accept`` during the first ``adapt_steps`` steps (default: the burn-in) and frozen
    afterwards. The acceptance counts (one block: all parameters) are read by ``AcceptanceMonitor``.

    ``step_size_jitter=j`` runs each transition of each chain with step eps * U(1 - j, 1 + j) and
    ``num_leapfrog_jitter=k`` with L' ~ U{L - k, ..., L + k} leapfrog steps, drawn from the
    sampler's generator: both keep the target exactly and break the resonance of a fixed path
    length with the posterior's periods (:mod:`lit_bayes.steppers.hmc`). E.g. 0.2 and L // 2.

    ``init`` takes the values of :class:`lit_bayes.samplers.base.SamplerModule` and ``"normal"``:
    every parameter of every chain i.i.d. N(0, ``init_std``^2), the start of the noisy-gibbs
    paper's uninformed baselines (spec §5: std 1e-4 on synthetic data, 1e-1 for HMC and 1e-4 for
    MALA on MNIST).

    ``informed_chains=k`` (default 0: none) starts the first k chains at the weights and biases of the
    teacher of the run's teacher-student DataModule (:class:`lit_bayes.data.TeacherStudent`, read at
    setup; ``model`` must be the teacher's network, a :class:`lit_bayes.models.NoisyMLP`): the informed
    chains of the teacher-student test (noisy-gibbs spec §4) on the classical posterior; the other chains
    follow ``init``. The component is the intermediate samplers' :class:`InformedStart` (``informed``),
    applied to the chains once they exist.
    """

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: Prior | None = None,
        step_size: float = 1e-2,
        num_leapfrog: int = 10,
        target_accept: float = 0.65,
        adapt_steps: int | None = None,
        num_data: int | None = None,
        temperature: float = 1.0,
        num_chains: int = 1,
        burn_in: int | float = 0,
        thinning: int = 1,
        seed: int = 0,
        init: Literal["module", "prior", "template", "normal"] = "module",
        vectorize: bool = True,
        init_std: float = 1e-4,
        step_size_jitter: float = 0.0,
        num_leapfrog_jitter: int = 0,
        num_draws: int | None = None,
        informed_chains: int = 0,
    ) -> None:
        if init not in ("module", "prior", "template", "normal"):
            raise ValueError(f"init must be 'module', 'prior', 'template' or 'normal', got {init!r}")
        check_positive("init_std", init_std)
        super().__init__(
            model=model, likelihood=likelihood, prior=prior, num_data=num_data, temperature=temperature,
            minibatch_scaling="rescaled", num_chains=num_chains, burn_in=burn_in, thinning=thinning, seed=seed,
            init="template" if init == "normal" else init, vectorize=vectorize, num_draws=num_draws,
        )
        self.init = init
        self.init_std = float(init_std)
        self.informed_chains = check_informed_chains(informed_chains, num_chains)
        self.informed = InformedStart(num_chains, {n: p.shape for n, p in model.named_parameters()}, (),
                                      torch.get_default_dtype())
        self.stepper_options = {
            "lr": step_size, "num_leapfrog": num_leapfrog, "target_accept": target_accept,
            "adapt_steps": adapt_steps,  # None: the burn-in in steps, known once fit starts
            "step_size_jitter": step_size_jitter, "num_leapfrog_jitter": num_leapfrog_jitter,
        }
        validate = {**self.stepper_options, "adapt_steps": adapt_steps or 0}
        HMCStepper.options(**validate)  # bad options fail now, not at fit
        self.automatic_optimization = False

    def initial_state(self, generator: torch.Generator) -> dict[str, Tensor]:
        if self.init != "normal":
            return super().initial_state(generator)
        return {name: self.init_std * torch.randn(self.num_chains, *p.shape, generator=generator, dtype=p.dtype)
                for name, p in self.template_parameters().items()}

    def setup(self, stage: str) -> None:
        fresh = self.chains is None
        if stage == "fit" and fresh and self.informed_chains and not self.informed.pending:
            self.informed.at_teacher(getattr(self._trainer, "datamodule", None), self.model, self.informed_chains,
                                     self.posterior.temperature, latents=False)
        super().setup(stage)
        if fresh and self.informed.pending:  # a subclass's initial_state may have applied it already
            with torch.no_grad():
                self.informed.apply_parameters(self.chains.as_dict())

    def configure_optimizers(self):
        return HMCStepper(list(self.chains.parameters()), generator=self.make_generator(), **self.run_options())

    def run_options(self) -> dict[str, Any]:
        """The stepper options of this fit: ``adapt_steps`` None becomes the burn-in in steps."""
        adapt = self.stepper_options["adapt_steps"]
        return {**self.stepper_options, "adapt_steps": self.resolve_sampling()[0] if adapt is None else adapt}

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = self.check_batch(batch)
        self.warn_if_minibatch(x.shape[0])
        stepper = self.optimizers()

        def closure() -> Tensor:
            stepper.zero_grad()
            energy = self.energy(self.chains.as_dict(), x, y)
            self.manual_backward(energy.sum())
            return energy

        energy = stepper.step(closure=closure)  # through Lightning, so global_step counts it
        self.check_energy(energy)
        self.log_train({"step_size": stepper.optimizer.step_sizes().mean(), "train/energy": energy.mean()},
                       prog_bar=("step_size", "train/energy"))
        return energy

    def acceptance_counts(self) -> dict[str, Any]:
        """Accepted proposals per chain and block ``(C, 1)``, proposals made, block labels."""
        accepted, proposed = self.optimizers().optimizer.acceptance()
        return {"accepted": accepted.unsqueeze(1), "proposed": proposed, "layers": ["all"], "nodes": ["all"]}


class MALA(HMC):
    """Metropolis-adjusted Langevin algorithm: HMC with one leapfrog step (target 0.574).

    Takes :class:`HMC`'s other options, ``step_size_jitter`` included (the path has one step, so
    there is no ``num_leapfrog_jitter``)."""

    def __init__(self, model: nn.Module, likelihood: Likelihood, prior: Prior | None = None,
                 step_size: float = 1e-2, target_accept: float = 0.574, **kwargs: Any) -> None:
        super().__init__(model, likelihood, prior, step_size=step_size, num_leapfrog=1,
                         target_accept=target_accept, **kwargs)
