"""Feynman-Kac training of partial BNNs: ``OHSMC`` and ``SGSMC`` (Zhao et al., AISTATS 2024).

The model is a :class:`lit_bayes.models.PartialBNN`: J particles of its stochastic part phi
(with log-weights) are the sampled state, its deterministic part psi is trained by a torch
optimiser (Adam, lr 0.01, as in the paper) on the gradient of Fisher's identity (spec Eq. 5)
estimated on the minibatch (Eq. 6):

    g = (N / M) sum_j w^j grad_psi log p(y_S | phi^j; psi),

with the particles and weights held constant (no gradient through moves or resampling,
spec pitfall §8.3) and psi updated only after it was used for weighting.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor

from lit_bayes.models.partial_bnn import PartialBNN
from lit_bayes.optimizers import check_optimizer_name, make_optimizer
from lit_bayes.posterior import GaussianPrior, Likelihood
from lit_bayes.samplers.base import SamplerModule
from lit_bayes.steppers.kernels import make_kernel
from lit_bayes.steppers.smc import ParticleStepper, Reweighted
from lit_bayes.validation import check_int, check_positive

__all__ = ["OHSMC", "SGSMC"]


class FeynmanKacSampler(SamplerModule):
    """Shared state and psi-update of the Feynman-Kac samplers.

    The particles are the module's chains (``num_particles`` of them, drawn from the prior),
    with normalised ``log_weights`` and the running ``log_evidence`` estimate as buffers, so
    all of it is in checkpoints. Several processes keep identical particles (one random
    stream) and sum the per-particle batch log-likelihoods over processes before weighting
    (spec pitfall §8.7); each process's psi-gradient uses its own batch, which the DDP
    average turns into the global-batch gradient.

    Args:
        model: the partial BNN; its stochastic part gets ``prior`` (default N(0, I)); at least one
            parameter must stay deterministic (psi), else ``ValueError``.
        likelihood: per-point likelihood (the paper: ``Gaussian(1.0)`` fixed noise, ``Bernoulli``, ``Categorical``).
        num_particles: J (the paper's code: 1000).
        kernel: the move (default: the sampler's first of ``KERNELS``): ``"random_walk"``
            (``variance``, default 0.01) or ``"ou"`` (``delta``, default 0.1) for OHSMC,
            ``"rwmh"`` (``variance`` 0.05, ``steps`` 10) for SGSMC.
        kernel_options: the kernel's arguments.
        resampling: ``"stratified"``, ``"systematic"`` or ``"multinomial"``.
        ess_threshold: resample when ESS <= threshold * J (1: every step).
        optimizer, lr, optimizer_options: the psi optimiser: any ``torch.optim`` class by its
            lower-case name (``"adam"`` at 0.01 in the paper, ``"sgd"``, ``"adamw"``, ...), its
            learning rate and other arguments.
        lr_decay, lr_decay_steps: exponential decay ``lr * lr_decay ** (step / lr_decay_steps)``
            (the crescent's ``0.1 * 0.96 ** (step / 10)``); 1 keeps ``lr`` constant.
        num_data: N of the N/M gradient scale (default: the DataModule's ``num_train``).
        burn_in, thinning, num_draws: which steps' clouds :class:`PosteriorSamples` keeps (as in
            :class:`~lit_bayes.samplers.base.SamplerModule`).
        seed: root seed of the particles' random stream.
        vectorize: evaluate all particles in one batched call (default) or in a reference loop.
    """

    predict_with_current_state = True
    independent_chains = False

    KERNELS: tuple[str, ...] = ()  # the moves a subclass allows; the first is its default

    def __init__(
        self,
        model: PartialBNN,
        likelihood: Likelihood,
        prior: GaussianPrior | None = None,
        num_particles: int = 1000,
        kernel: Literal["random_walk", "ou", "rwmh"] | None = None,
        kernel_options: dict[str, Any] | None = None,
        resampling: Literal["stratified", "systematic", "multinomial"] = "stratified",
        ess_threshold: float = 1.0,
        optimizer: str = "adam",
        lr: float = 0.01,
        lr_decay: float = 1.0,
        lr_decay_steps: int = 1,
        optimizer_options: dict[str, Any] | None = None,
        num_data: int | None = None,
        burn_in: int | float = 0,
        thinning: int = 1,
        seed: int = 0,
        vectorize: bool = True,
        num_draws: int | None = None,
    ) -> None:
        kernel = self.KERNELS[0] if kernel is None else kernel
        if kernel not in self.KERNELS:
            raise ValueError(f"kernel must be one of {self.KERNELS} for {type(self).__name__}, got {kernel!r}")
        if not isinstance(model, PartialBNN):
            raise ValueError(f"model must be a lit_bayes.models.PartialBNN, got {type(model).__name__}")
        if not model.deterministic_names:
            # psi is what these samplers train; without it there is no optimiser step, which is also what
            # advances Lightning's step count (burn-in, thinning, max_steps) under manual optimisation
            raise ValueError(
                f"{type(self).__name__} trains the deterministic parameters psi of the PartialBNN, but its "
                f"stochastic={model.stochastic_names} covers every parameter, leaving psi empty: keep some "
                "parameters deterministic, or sample the whole network with SGMCMC, HMC or BlockGibbs"
            )
        check_int("num_particles", num_particles, 1)
        super().__init__(
            model, likelihood, prior, num_data, 1.0, "rescaled", num_particles, burn_in, thinning, seed, "prior",
            vectorize, num_draws=num_draws,
        )
        check_optimizer_name(optimizer)
        self.lr = check_positive("lr", lr)
        self.lr_decay = check_positive("lr_decay", lr_decay)
        self.lr_decay_steps = check_int("lr_decay_steps", lr_decay_steps, 1)
        self.kernel = make_kernel(kernel, self.prior, kernel_options)
        self.stepper = ParticleStepper(resampling, ess_threshold)
        self.optimizer_name = optimizer
        self.optimizer_options = dict(optimizer_options or {})
        for p in model.deterministic_parameters():
            p.requires_grad_(True)
        self.register_buffer("log_weights", torch.full((num_particles,), -math.log(num_particles)))
        self.register_buffer("log_evidence", torch.zeros(()))
        self.last_reweight: Reweighted | None = None
        self.automatic_optimization = False

    # ---------------------------------------------------------------- state
    @property
    def stream_rank(self) -> int:
        return 0  # identical particles on every process

    @property
    def num_particles(self) -> int:
        return self.num_chains

    def template_parameters(self) -> dict[str, Tensor]:
        """phi only: the particles are draws of the stochastic part."""
        return {f"net.{n}": p for n, p in self.model.stochastic_parameters().items()}

    def setup(self, stage: str) -> None:
        super().setup(stage)
        self.chains.requires_grad_(False)

    def particles(self) -> dict[str, Tensor]:
        return self.chains.as_dict()

    @torch.no_grad()
    def set_particles(self, particles: Mapping[str, Tensor]) -> None:
        for name, p in self.chains.as_dict().items():
            p.copy_(particles[name])

    def current_samples(self) -> tuple[dict[str, Tensor], Tensor]:
        return self.chains.snapshot(), self.log_weights.detach().clone()

    def configure_optimizers(self):
        self.make_generator()
        return make_optimizer(self.optimizer_name, self.model.deterministic_parameters(), self.lr, self.optimizer_options)

    # -------------------------------------------------------------- pieces
    def outputs(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Outputs ``(J, B, ...)`` of the particles ``params`` under the current psi: batched
        (:meth:`PartialBNN.particle_forward`), or with ``vectorize=False`` the reference loop."""
        phi, _ = self.split_parameters(params)
        forward = self.model.particle_forward if self.vectorize else self.model.particle_forward_loop
        return forward(phi, x)

    def point_log_likelihoods(self, particles: Mapping[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        """``log p(y_i | x_i, phi^j; psi)`` for every particle and point, ``(J, B)``."""
        return self.log_likelihood(particles, self.outputs(particles, x), y)

    def global_sum(self, value: Tensor) -> Tensor:
        """Sum of a detached per-particle quantity over processes (the global batch)."""
        if self._trainer is None or self.trainer.world_size == 1:
            return value
        value = value.clone()
        dist.all_reduce(value)
        return value

    def reweight(self, log_potential: Tensor) -> Reweighted:
        """Weight by ``log_potential`` (J,) and draw the ancestors; the particles are replaced
        by :meth:`apply` (after any backward pass that still needs the current ones)."""
        return self.stepper.reweight(self.log_weights, log_potential, self.generator)

    def apply(self, result: Reweighted) -> None:
        """Resample the particles (if ``result`` did) and update weights and evidence; the result
        stays readable as ``last_reweight`` (ChainDiagnostics traces its ESS and resampling)."""
        self.last_reweight = result
        if result.ancestors is not None:
            self.set_particles({n: p[result.ancestors] for n, p in self.particles().items()})
        self.log_weights.copy_(result.log_weights)
        self.log_evidence.add_(result.log_increment.to(self.log_evidence.dtype))

    def learning_rate(self, step: int) -> float:
        """The psi learning rate at training step ``step``."""
        return self.lr * self.lr_decay ** (step / self.lr_decay_steps)

    def optimizer_at_step(self):
        """The psi optimiser, its learning rate set for the current step."""
        optimizer = self.optimizers()
        for group in optimizer.param_groups:
            group["lr"] = self.learning_rate(self.global_step)
        return optimizer

    def update_psi(self, optimizer, batch_log_lik: Tensor, gradient_weights: Tensor, batch_size: int) -> Tensor:
        """One optimiser step on ``-(N / M) sum_j w_j log p(y_S | phi^j; psi)`` (Eqs. 5-6),
        ``M = batch_size``."""
        scale = self.posterior.likelihood_scale(batch_size)
        loss = torch.dot(batch_log_lik, gradient_weights.detach().to(batch_log_lik.dtype)) * -scale
        optimizer.zero_grad()
        if self._trainer is not None:
            self.manual_backward(loss)
        else:  # used outside a Trainer (benchmarks)
            loss.backward()
        optimizer.step()
        return loss.detach()

    def log_step(self, result: Reweighted, loss: Tensor) -> None:
        self.log_train({"train/ess": result.ess, "train/log_evidence": self.log_evidence,
                        "train/loss": loss / self.posterior.num_data, "lr": self.learning_rate(self.global_step)},
                       prog_bar=("train/ess", "train/loss"))


class OHSMC(FeynmanKacSampler):
    """Open-horizon SMC (spec §3, Algorithm 3; the paper's main method).

    One training step on a minibatch S of size M: move every particle with the kernel
    (warm start from the previous cloud), add the whole-batch log-likelihood to the
    log-weights, normalise, resample (stratified, every step by default), then one Adam
    step on psi with the Fisher-identity gradient at the psi used for weighting. The cloud
    targets the open-horizon model (Eq. 7), whose spread the move variance sets; predictions
    use the current cloud and psi. Args: as :class:`FeynmanKacSampler`.
    """

    KERNELS = ("random_walk", "ou")

    def transition(self, x: Tensor, y: Tensor, optimizer) -> tuple[Reweighted, Tensor]:
        """One OHSMC iteration on the batch ``(x, y)``: move, reweight, psi step, resample."""
        with torch.no_grad():
            self.set_particles(self.kernel.move(self.particles(), self.generator))
        batch_log_lik = self.point_log_likelihoods(self.particles(), x, y).sum(-1)  # (J,), differentiable in psi
        result = self.reweight(self.global_sum(batch_log_lik.detach()))
        loss = self.update_psi(optimizer, batch_log_lik, result.gradient_weights, y.shape[0])
        self.apply(result)
        return result, loss

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = self.check_batch(batch)
        result, loss = self.transition(x, y, self.optimizer_at_step())
        self.log_step(result, loss)
        return loss


class SGSMC(FeynmanKacSampler):
    """Stochastic-gradient SMC (spec §3, Algorithm 2), the "closed horizon" variant.

    Every training step restarts the cloud from the prior and runs SMC through the
    minibatch one point at a time: before point k (k >= 2) each particle takes ``steps``
    random-walk Metropolis steps targeting the prior times the likelihood of points 1..k-1
    (no move before the first point), then is weighted by the unscaled likelihood of point k
    and resampled. psi then takes one optimiser step with the Fisher-identity gradient on
    the final cloud. ``train/log_evidence`` is the SMC estimate of log p(y_S; psi) of the
    last batch. Unlike the paper's code (whose padded targets make every move for
    2 <= k < M a rejection, spec §3), every move here is effective.

    Args: as :class:`FeynmanKacSampler`; ``kernel_options`` are those of the random-walk
    Metropolis move (``variance`` 0.05 and ``steps`` 10 by default, the paper's).
    """

    KERNELS = ("rwmh",)

    @torch.no_grad()
    def filter_batch(self, x: Tensor, y: Tensor) -> Reweighted:
        """Run SMC from the prior through the points of ``(x, y)`` in order; leaves the final
        cloud, its weights and log p_hat(y) in the module's state and returns the last
        reweighting."""
        self.set_particles(self.prior.sample(self.particles(), self.generator))
        self.log_weights.fill_(-math.log(self.num_particles))
        self.log_evidence.zero_()
        result = None
        for k in range(y.shape[0]):
            if k > 0:
                def prefix_target(p, k=k):
                    return self.prior(p) + self.point_log_likelihoods(p, x[:k], y[:k]).sum(-1)

                self.set_particles(self.kernel.move(self.particles(), self.generator, prefix_target))
            result = self.reweight(self.point_log_likelihoods(self.particles(), x[k : k + 1], y[k : k + 1])[:, 0])
            self.apply(result)
        return result

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = self.check_batch(batch)
        result = self.filter_batch(x, y)
        batch_log_lik = self.point_log_likelihoods(self.particles(), x, y).sum(-1)
        loss = self.update_psi(self.optimizer_at_step(), batch_log_lik, self.log_weights.exp(), y.shape[0])
        self.log_step(result, loss)
        self.log_train({"train/accept": self.kernel.acceptance})
        return loss
