"""Feynman-Kac training of partial BNNs: ``OHSMC`` and ``SGSMC`` (Zhao et al., AISTATS 2024).

The model is a :class:`lit_bayes.models.PartialBNN`: J particles of its stochastic part phi
(with log-weights) are the sampled state, its deterministic part psi is trained by a torch
optimiser (Adam, lr 0.01, as in the paper) on the gradient of Fisher's identity (spec Eq. 5)
estimated on the minibatch (Eq. 6):

    g = (N / M) / T sum_j w^j grad_psi log p(y_S | phi^j; psi),

with the particles and weights held constant (no gradient through moves or resampling,
spec pitfall §8.3) and psi updated only after it was used for weighting. The algorithms
(Algorithms 2 and 3, and what temperature T changes in them) are the steppers of
:mod:`lit_bayes.steppers.feynman_kac`; these modules keep the state (particles, log-weights,
evidence, psi), the random stream, checkpoints and logging.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor

from lit_bayes.grad_mode import without_grad
from lit_bayes.models.partial_bnn import PartialBNN
from lit_bayes.models.sequential_backprop import Tape
from lit_bayes.optimizers import check_optimizer_arguments, make_optimizer
from lit_bayes.posterior import Likelihood, Prior
from lit_bayes.samplers.partial_bnn_sampler import PartialBNNSampler
from lit_bayes.schedules import exponential_decay
from lit_bayes.steppers.feynman_kac import Cloud, FeynmanKacStepper, OHSMCStepper, SGSMCStepper
from lit_bayes.steppers.smc import Reweighted
from lit_bayes.validation import check_bool, check_int, check_positive

__all__ = ["OHSMC", "SGSMC"]


class FeynmanKacSampler(PartialBNNSampler):
    """Shared state and psi-update of the Feynman-Kac samplers.

    The particles are the module's chains (``num_particles`` of them, drawn from the tempered
    prior), with normalised ``log_weights`` and the running ``log_evidence`` estimate as
    buffers, so all of it is in checkpoints. Several processes keep identical particles (one
    random stream) and sum the per-particle batch log-likelihoods over processes before
    weighting (spec pitfall §8.7); each process's psi-gradient uses its own batch, which the
    DDP average turns into the global-batch gradient.

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
        temperature: T > 0 (finite). The particles target the partial-BNN posterior over phi
            raised to 1/T, prior and likelihood both tempered as :class:`~lit_bayes.posterior.Posterior`
            defines it: they start from pi^{1/T} (``Prior.sample`` at T; N(0, T v) for a Gaussian), each
            batch's incremental log-weight is its unscaled log-likelihood divided by T, the random-walk
            and OU noise variances are multiplied by T (the move's density raised to 1/T; OU then keeps
            pi^{1/T} invariant) and SGSMC's Metropolis moves target the tempered prefix posterior. The
            psi-gradient is that of the tempered evidence, (N/M)/T sum_j w^j grad log p(y_S | phi^j; psi).
            1 (default) is the paper's algorithm; for a linear-Gaussian model T scales the cloud's
            covariance by T.
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
        hand_backprop: OHSMC's psi-gradient by the hand-written backward of
            :mod:`lit_bayes.models.sequential_backprop` (the same gradient without autograd's engine: the
            step at J = 100 ~0.85x as long on CPU) wherever it applies: a ``PartialBNN`` whose linear
            stochastic layer sits between ``nn.Linear`` layers and GELU / ReLU / Tanh / Sigmoid activations,
            a likelihood with ``output_gradient`` (Bernoulli, Categorical, Gaussian), ``vectorize``, one
            process and 32- or 64-bit precision. It bypasses ``manual_backward``, so Lightning's backward
            hooks do not run for it. ``False``: autograd always (SGSMC always uses autograd).
        fused: with the hand-written psi-gradient, the network's outputs for the J particles and psi's gradient in
            one C call each (:mod:`lit_bayes.models.particle_kernel`: an ``nn.Sequential`` of linear layers with
            ReLU, Tanh, Sigmoid or tanh-GELU activations, such as a ``PartialMLP``'s, on the CPU in float32 or
            float64; the OHSMC step at J = 100 ~0.77x as long, at J = 1,000 ~0.43x) where it applies; the same values
            to ~1e-15 relative in float64 and ~1e-6 in float32, not to the bit. ``False``: torch operations.
    """

    predict_with_current_state = True

    KERNELS: tuple[str, ...] = ()  # the moves a subclass allows; the first is its default
    STEPPER: type[FeynmanKacStepper]  # the algorithm box

    def __init__(
        self,
        model: PartialBNN,
        likelihood: Likelihood,
        prior: Prior | None = None,
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
        temperature: float = 1.0,
        hand_backprop: bool = True,
        fused: bool = True,
    ) -> None:
        kernel = self.KERNELS[0] if kernel is None else kernel
        if kernel not in self.KERNELS:
            raise ValueError(f"kernel must be one of {self.KERNELS} for {type(self).__name__}, got {kernel!r}")
        check_int("num_particles", num_particles, 1)
        super().__init__(
            model=model, likelihood=likelihood, prior=prior, num_data=num_data, temperature=temperature,
            minibatch_scaling="rescaled", num_chains=num_particles, burn_in=burn_in, thinning=thinning, seed=seed,
            init="template",  # initial_state draws phi_0 from the tempered prior
            vectorize=vectorize, num_draws=num_draws,
        )
        self.optimizer_name, self.lr, self.optimizer_options = check_optimizer_arguments(optimizer, lr,
                                                                                          optimizer_options)
        self.lr_decay = check_positive("lr_decay", lr_decay)
        self.lr_decay_steps = check_int("lr_decay_steps", lr_decay_steps, 1)
        self.stepper = self.STEPPER(self.posterior, kernel, kernel_options, resampling, ess_threshold)
        self.hand_backprop = check_bool("hand_backprop", hand_backprop)
        self.fused = check_bool("fused", fused)
        # the last taped forward ("tape", outputs, targets), in a dict: nn.Module.__setattr__ costs ~25 us a step
        self._taped: dict[str, tuple[Tape, Tensor, Tensor]] = {}
        self.register_buffer("log_weights", torch.full((num_particles,), -math.log(num_particles)))
        self.register_buffer("log_evidence", torch.zeros(()))
        self.last_reweight: Reweighted | None = None
        self.automatic_optimization = False

    # ---------------------------------------------------------------- state
    @property
    def num_particles(self) -> int:
        return self.num_chains

    @property
    def kernel(self):
        """The move of the stepper."""
        return self.stepper.kernel

    def initial_state(self, generator: torch.Generator) -> dict[str, Tensor]:
        """phi_0^j ~ pi^{1/T} (Algorithms 2-3, line 1)."""
        return self.stepper.draw_prior(super().initial_state(generator), generator)

    def setup(self, stage: str) -> None:
        super().setup(stage)
        self.chains.requires_grad_(False)

    def particles(self) -> dict[str, Tensor]:
        return self.chains.as_dict()

    def cloud(self) -> Cloud:
        """The particles, log-weights and evidence, live: what the stepper advances in place."""
        return Cloud(self.particles(), self.log_weights, self.log_evidence)

    def current_samples(self) -> tuple[dict[str, Tensor], Tensor]:
        return self.chains.snapshot(), self.log_weights.detach().clone()

    def configure_optimizers(self):
        self.make_generator()
        return make_optimizer(self.optimizer_name, self.model.deterministic_parameters(), self.lr, self.optimizer_options)

    # -------------------------------------------------------------- pieces
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

    def learning_rate(self, step: int) -> float:
        """The psi learning rate at training step ``step``."""
        return exponential_decay(self.lr, self.lr_decay, step, self.lr_decay_steps)

    def optimizer_at_step(self):
        """The psi optimiser, its learning rate set for the current step."""
        optimizer = self.optimizers()
        for group in optimizer.param_groups:
            group["lr"] = self.learning_rate(self.global_step)
        return optimizer

    def psi_step(self, optimizer, loss: Tensor, weights: Tensor) -> None:
        """One ``optimizer`` step on the stepper's psi-loss (its particle ``weights`` are in its graph)."""
        optimizer.zero_grad()
        if self._trainer is not None:
            self.manual_backward(loss)
        else:  # used outside a Trainer (benchmarks)
            loss.backward()
        optimizer.step()

    def hand_backprop_applies(self, x: Tensor) -> bool:
        """Whether this step's psi-gradient is the hand-written one (see ``hand_backprop``)."""
        if not (self.hand_backprop and self.vectorize and self.model.hand_backprop and x.dim() == 2
                and type(self.likelihood).output_gradient is not Likelihood.output_gradient):
            return False
        if self._trainer is None:
            return True
        return self.trainer.world_size == 1 and self.trainer.precision in ("32-true", "64-true")

    @without_grad
    def taped_point_log_likelihoods(self, particles: Mapping[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        """:meth:`point_log_likelihoods` without autograd, its forward kept for :meth:`psi_step_by_hand`."""
        phi, _ = self.split_parameters(particles)
        outputs, tape = self.model.taped_particle_forward(phi, x, fused=self.fused)
        self._taped["last"] = (tape, outputs, y)
        return self.log_likelihood(particles, outputs, y)

    def psi_step_by_hand(self, optimizer, loss: Tensor, weights: Tensor) -> None:
        """:meth:`psi_step` with the gradient of the loss (N/M)/T sum_j w_j [-log p(y | phi^j; psi)] from the
        last taped forward: d loss / d outputs = c w_j d log p / d outputs with c the energy per unit of
        summed log-likelihood (-(N/M)/T), then :meth:`PartialBNN.psi_gradients`. A particle without weight (not
        resampled; its likelihood NaN or 0) has a zero output gradient, not 0 x NaN = NaN: it then adds nothing to
        psi's gradient (:func:`lit_bayes.models.sequential_backprop.psi_gradients`, in the kernel and in torch)."""
        tape, outputs, y = self._taped.pop("last")
        per_unit = self.posterior.likelihood_energy(1.0, y.shape[0])  # the energy is linear in the sum
        scale = weights.mul(per_unit).view(-1, *([1] * (outputs.dim() - 1)))
        grad_output = self.likelihood.output_gradient(outputs, y).mul_(scale).nan_to_num_(0.0, math.inf, -math.inf)
        grads = self.model.psi_gradients(tape, grad_output)
        optimizer.zero_grad()
        for p, grad in grads.items():  # every parameter of psi
            if p.requires_grad:
                p.grad = grad
        optimizer.step()

    def transition(self, x: Tensor, y: Tensor, optimizer) -> tuple[Reweighted, Tensor]:
        """One iteration of the stepper's algorithm on the batch ``(x, y)``, psi stepped by
        ``optimizer``: the reweighting (the last one, for SGSMC) and the detached psi-loss."""
        raise NotImplementedError

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = self.check_batch(batch)
        result, loss = self.transition(x, y, self.optimizer_at_step())
        self.last_reweight = result  # ChainDiagnostics traces its ESS and resampling
        self.log_step(result, loss)
        return loss

    def log_step(self, result: Reweighted, loss: Tensor) -> None:
        self.log_train({"train/ess": result.ess, "train/log_evidence": self.log_evidence,
                        "train/loss": loss / self.posterior.num_data, "lr": self.learning_rate(self.global_step)},
                       prog_bar=("train/ess", "train/loss"))


class OHSMC(FeynmanKacSampler):
    """Open-horizon SMC (spec §3, Algorithm 3; the paper's main method).

    One training step on a minibatch S of size M: move every particle with the kernel
    (warm start from the previous cloud), add the whole-batch log-likelihood (divided by T)
    to the log-weights, normalise, resample (stratified, every step by default), then one
    Adam step on psi with the Fisher-identity gradient at the psi used for weighting
    (:class:`~lit_bayes.steppers.feynman_kac.OHSMCStepper`). The cloud targets the
    open-horizon model (Eq. 7), whose spread the move variance sets; predictions use the
    current cloud and psi. Args: as :class:`FeynmanKacSampler`.
    """

    KERNELS = ("random_walk", "ou")
    STEPPER = OHSMCStepper

    def transition(self, x: Tensor, y: Tensor, optimizer) -> tuple[Reweighted, Tensor]:
        """:meth:`FeynmanKacSampler.transition`; with the hand-written psi-gradient the whole step runs with grad mode
        off (nothing in it needs autograd, and its ~100 operations then skip autograd's checks: J = 100 steps ~0.99x
        as long), else in the caller's grad mode."""
        by_hand = self.hand_backprop_applies(x)
        if by_hand:
            log_lik, psi_step = self.taped_point_log_likelihoods, self.psi_step_by_hand
        else:
            log_lik, psi_step = self.point_log_likelihoods, self.psi_step
        with torch.set_grad_enabled(torch.is_grad_enabled() and not by_hand):
            return self.stepper.step(self.cloud(), x, y, log_lik, self.generator,
                                     functools.partial(psi_step, optimizer), self.global_sum)


class SGSMC(FeynmanKacSampler):
    """Stochastic-gradient SMC (spec §3, Algorithm 2), the "closed horizon" variant.

    Every training step restarts the cloud from the (tempered) prior and runs SMC through the
    minibatch one point at a time: before point k (k >= 2) each particle takes ``steps``
    random-walk Metropolis steps targeting the prior times the likelihood of points 1..k-1
    (tempered), no move before the first point, then is weighted by the unscaled likelihood
    of point k (to the power 1/T) and resampled. psi then takes one optimiser step with the
    Fisher-identity gradient on the final cloud
    (:class:`~lit_bayes.steppers.feynman_kac.SGSMCStepper`). ``train/log_evidence`` is the
    SMC estimate of log p_T(y_S; psi) of the last batch.

    Args: as :class:`FeynmanKacSampler`; ``kernel_options`` are those of the random-walk
    Metropolis move (``variance`` 0.05 and ``steps`` 10 by default, the paper's).
    """

    KERNELS = ("rwmh",)
    STEPPER = SGSMCStepper

    def filter_batch(self, x: Tensor, y: Tensor) -> Reweighted:
        """Run SMC from the tempered prior through the points of ``(x, y)`` in order; leaves the
        final cloud, its weights and log p_hat(y) in the module's state and returns the last
        reweighting."""
        return self.stepper.filter(self.cloud(), x, y, self.point_log_likelihoods, self.generator)

    def transition(self, x: Tensor, y: Tensor, optimizer) -> tuple[Reweighted, Tensor]:
        return self.stepper.step(self.cloud(), x, y, self.point_log_likelihoods, self.generator,
                                 functools.partial(self.psi_step, optimizer))

    def log_step(self, result: Reweighted, loss: Tensor) -> None:
        super().log_step(result, loss)
        self.log_train({"train/accept": self.kernel.acceptance})
