"""HMC and MALA on the *intermediate-noise* posterior (noisy-gibbs spec §5, App. H; the paper's
"HMC (intermediate)" baseline of Fig. 2).

The sampled state of every chain is the one the exact Gibbs sampler
(:class:`lit_bayes.samplers.noisy_gibbs.NoisyGibbs`) moves: the weights and biases of a
:class:`lit_bayes.models.NoisyMLP` *and* the latent pre- and post-activations ``Z^(l), X^(l)``
(l = 2..L) of every training point. The potential is the joint energy of eq. 4 (spec §1.1-1.2),
:meth:`lit_bayes.noisy_energy.JointDensity.energy`, at the sampler's temperature. For a multinomial
probit output (App. E.4) the scores Z^(L+1) are integrated out exactly (the probit likelihood,
:class:`lit_bayes.models.noisy_mlp.MultinomialProbit`): the hard argmax constraint makes their density
discontinuous, which HMC cannot follow, and integrating them out leaves the marginal over every other
variable unchanged. The gradient of U needs sigma'; ``sign`` has none (zero almost everywhere, a jump
at 0), so it is refused. ReLU's kink at 0 is allowed: leapfrog steps stay volume preserving and
reversible with a piecewise gradient, so the Metropolis test keeps the chain exact, at the price of
larger energy errors for trajectories crossing the kink.

Full batch only; HMC (App. H.1, Alg. 3) or MALA (App. H.2, Alg. 4) transitions of all chains at
once by :class:`lit_bayes.steppers.hmc.HMCStepper` (identity mass matrix, as in the paper). The
latents are the parameters of :attr:`IntermediateHMC.latents` (the
:class:`lit_bayes.samplers.noisy_gibbs.LatentChains` store :class:`NoisyGibbs` keeps too, ``(C, n, d_l)``
each) and are saved in checkpoints; the kept samples are the weights and biases
only (the latents are discarded, §1.1), and predictions use the noiseless network (§3).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.noisy_energy import JointDensity
from lit_bayes.samplers.hmc import HMC
from lit_bayes.samplers.noisy_gibbs import (DTYPES, CanonicalBatch, InformedStart, LatentChains, check_full_batch,
                                             check_informed_chains)
from lit_bayes.steppers.hmc import HMCStepper
from lit_bayes.validation import check_positive

__all__ = ["IntermediateHMC", "IntermediateMALA"]

INITS = ("normal", "zeros", "prior", "template")


class IntermediateHMC(HMC):
    """HMC over the weights, biases and latents of a :class:`NoisyMLP` (the joint of eq. 4).

    Args:
        model: the :class:`lit_bayes.models.NoisyMLP` defining the target (noise variances, prior
            precisions, activation ``relu``, ``abs`` or ``linear``, output ``regression`` or ``probit``).
        step_size: leapfrog step (the paper's "learning rate", Tables 1-2); adapted by dual averaging
            during ``adapt_steps`` steps (default: the burn-in; 0 keeps it fixed, as in the paper, §5).
        num_leapfrog: leapfrog steps per transition (1: MALA with eta = step_size^2 / 2).
        target_accept: acceptance rate dual averaging aims at.
        num_data: training-set size n (the number of latent rows); default the DataModule's ``num_train``.
        num_chains, burn_in, thinning, seed, num_draws: as in :class:`lit_bayes.samplers.base.SamplerModule`.
        init: the start of every chain (spec §5, "Initialization of the uninformed baselines"):
            ``"normal"`` (every weight, bias and latent i.i.d. N(0, init_std^2); the paper's std 1e-4 for
            the synthetic runs), ``"zeros"`` (all 0, the Gibbs sampler's start), ``"prior"`` (weights
            from the prior, latents through the generative process eq. 7 with fresh noise) or
            ``"template"`` (``model``'s parameters, latents as for ``"prior"``). Given chains can start
            elsewhere with :meth:`set_initial_parameters` and :meth:`set_initial_latents`.
        informed_chains: the first ``informed_chains`` chains start at the teacher of the run's
            teacher-student DataModule, read at setup (its weights, biases and training latents, spec §4;
            as in :class:`NoisyGibbs`); 0 (default): none.
        init_std: standard deviation of ``init="normal"``.
        dtype: ``"float32"`` or ``"float64"`` for the weights and latents.
        temperature: T > 0 (finite): the target is the joint of eq. 4 raised to 1/T (1: the posterior),
            the potential the joint energy divided by T. Every Gaussian factor's variance is multiplied
            by T (noise variances times T, prior precisions over T); the hard constraint of a probit
            output is unchanged by the power, so the integrated-out probit likelihood is the one with
            noise T Delta_Z^(L+1) (:mod:`lit_bayes.noisy_energy`). The same target as :class:`NoisyGibbs`
            at the same T.
    """

    def __init__(
        self,
        model: NoisyMLP,
        step_size: float = 1e-3,
        num_leapfrog: int = 10,
        target_accept: float = 0.65,
        adapt_steps: int | None = None,
        num_data: int | None = None,
        num_chains: int = 1,
        burn_in: int | float = 0,
        thinning: int = 1,
        seed: int = 0,
        init: Literal["normal", "zeros", "prior", "template"] = "normal",
        init_std: float = 1e-4,
        dtype: Literal["float32", "float64"] = "float32",
        num_draws: int | None = None,
        temperature: float = 1.0,
        informed_chains: int = 0,
    ) -> None:
        if not isinstance(model, NoisyMLP):
            raise ValueError(f"model must be a lit_bayes.models.NoisyMLP, got {type(model).__name__}")
        if model.depth < 2:
            raise ValueError(f"model must have a hidden layer (widths {model.widths} have none): with one weight "
                             "layer the intermediate posterior is the classical one, sample it with HMC or MALA")
        if model.activation == "sign":
            raise ValueError("model.activation 'sign' has no usable derivative (zero almost everywhere, a jump at "
                             "0), so HMC cannot sample the intermediate posterior; use NoisyGibbs, or relu/abs/linear")
        if init not in INITS:
            raise ValueError(f"init must be one of {', '.join(map(repr, INITS))}, got {init!r}")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
        check_positive("step_size", step_size)
        super().__init__(model=model, likelihood=model.likelihood(), prior=model.prior(), step_size=step_size,
                         num_leapfrog=num_leapfrog, target_accept=target_accept, adapt_steps=adapt_steps,
                         num_data=num_data, temperature=temperature, num_chains=num_chains, burn_in=burn_in,
                         thinning=thinning, seed=seed, init="template" if init == "zeros" else init, vectorize=True,
                         init_std=init_std, num_draws=num_draws)
        self.joint = JointDensity(model, temperature)
        self.start = init
        self.dtype_name = dtype
        self.canonical_batch = CanonicalBatch(DTYPES[dtype])
        self.informed_chains = check_informed_chains(informed_chains, num_chains)
        sizes = model.latent_sizes()
        self.latents = LatentChains({name: sizes[name] for name in self.latent_names()}, num_chains, DTYPES[dtype],
                                    requires_grad=True)
        self.informed = InformedStart(num_chains, {n: p.shape for n, p in model.named_parameters()},
                                      self.latent_names(), DTYPES[dtype],
                                      ignored_latents=set(model.latent_names()) - set(self.latent_names()))

    # ------------------------------------------------------------------ state
    def initial_state(self, generator: torch.Generator) -> dict[str, Tensor]:
        state = super().initial_state(generator)
        dtype = DTYPES[self.dtype_name]
        if self.start == "zeros":
            state = {name: torch.zeros_like(p) for name, p in state.items()}
        state = {name: p.to(dtype) for name, p in state.items()}
        return self.informed.apply_parameters(state)

    def set_initial_parameters(self, parameters: Mapping[str, Tensor], chains: Sequence[int] | None = None) -> None:
        """Start the given chains (default all) at ``parameters`` instead of ``init``'s weights (the model's
        parameter names to tensors of their shapes, :meth:`InformedStart.set_parameters`). Call it before ``fit``."""
        if self.chains is not None:
            raise RuntimeError("set_initial_parameters must be called before fit: the chains already exist")
        self.informed.set_parameters(parameters, chains)

    def set_initial_latents(self, inputs: Tensor, targets: Tensor, latents: Mapping[str, Tensor],
                            chains: Sequence[int] | None = None) -> None:
        """Start the given chains (default all) from given latents, e.g. the teacher's with the noise used
        for the labels (spec §8 item 5). ``latents`` map the hidden-layer names ``z2, x2, ..., zL, xL`` to
        ``(n, d_l)`` or ``(C, n, d_l)`` tensors whose rows follow the rows of ``(inputs, targets)``.
        A probit output's scores Z^(L+1) are not part of the state (integrated out) and are ignored.
        Call it before ``fit``."""
        self.informed.set_latents(inputs, targets, latents, chains)

    def latent_names(self) -> list[str]:
        """The sampled latents: ``z2, x2, ..., zL, xL`` (no probit scores: those are integrated out)."""
        return [f"{kind}{j}" for j in range(2, self.model.depth + 1) for kind in ("z", "x")]

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.informed_chains and self.chains is None:
            self.informed.at_teacher(getattr(self._trainer, "datamodule", None), self.model, self.informed_chains,
                                     self.posterior.temperature)
        super().setup(stage)
        if self.latents.allocated:
            return
        num = self.posterior.num_data
        if num is None:
            raise ValueError("IntermediateHMC needs the training-set size for its latents: pass num_data or use a "
                             "DataModule exposing num_train")
        self.latents.allocate(num)

    def initial_latents(self, inputs: Tensor) -> dict[str, Tensor]:
        """Every chain's latents at the first step (see ``init``), rows in the canonical order of ``inputs``."""
        generator = self.stream_generator("latents", inputs.device)
        current = self.latents.as_dict()
        if self.start == "zeros":
            latents = {name: torch.zeros_like(value) for name, value in current.items()}
        elif self.start == "normal":
            latents = {name: self.init_std * torch.randn(value.shape, generator=generator, device=value.device,
                                                         dtype=value.dtype) for name, value in current.items()}
        else:
            net, _ = self.split_parameters(self.chains.snapshot())
            generated, _ = self.model.generate(net, inputs, generator)
            latents = {name: generated[name] for name in self.latent_names()}
        return self.informed.apply_latents(latents)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self.latents.restore(checkpoint.get("state_dict", {}), "latents.", self.device)

    # ------------------------------------------------------------------ steps
    def configure_optimizers(self):
        params = list(self.chains.parameters()) + list(self.latents.parameters())
        return HMCStepper(params, generator=self.make_generator(), **self.run_options())

    def sweep_inputs(self, batch: Any) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """The full training set in canonical order (inputs in the state's dtype), its targets and the
        live latents (drawn on the first call of a fresh run, see ``init``)."""
        x, y = self.check_batch(batch)
        check_full_batch(type(self).__name__, x.shape[0], self.latents.num_rows)
        inputs, targets = self.canonical_batch(x, y)
        if self.latents.fresh:
            self.latents.fill(self.initial_latents(inputs))
        return inputs, targets, self.latents.as_dict()

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        inputs, targets, latents = self.sweep_inputs(batch)
        stepper = self.optimizers()

        def closure() -> Tensor:
            stepper.zero_grad()
            energy = self.joint.energy(self.chains.as_dict(), latents, inputs, targets)
            self.manual_backward(energy.sum())
            return energy

        energy = stepper.step(closure=closure)  # through Lightning, so global_step counts it
        self.check_energy(energy)
        self.log_train({"step_size": stepper.optimizer.step_sizes().mean(), "train/energy": energy.mean()},
                       prog_bar=("step_size", "train/energy"))
        return energy


class IntermediateMALA(IntermediateHMC):
    """MALA on the intermediate posterior (App. H.2, Alg. 4): one leapfrog step, eta = step_size^2 / 2,
    dual averaging towards 0.574. Arguments as :class:`IntermediateHMC`; ``temperature`` T > 0 (finite)
    targets the joint of eq. 4 raised to 1/T (every Gaussian factor's variance times T, a probit output's
    hard constraint unchanged), as there."""

    def __init__(self, model: NoisyMLP, step_size: float = 1e-3, target_accept: float = 0.574,
                 temperature: float = 1.0, **kwargs: Any) -> None:
        super().__init__(model, step_size=step_size, num_leapfrog=1, target_accept=target_accept,
                         temperature=temperature, **kwargs)
