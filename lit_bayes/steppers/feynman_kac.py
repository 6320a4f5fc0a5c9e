"""The Feynman-Kac algorithm boxes of partial-BNN training: OHSMC and SGSMC.

Zhao, Mair, Schön, Sjölund, AISTATS 2024; formulas and boxes as reconstructed in the
Feynman-Kac spec (§2-3). A stepper advances a :class:`Cloud` (J particles phi^j of the
network's stochastic part, their normalised log-weights, the log-evidence estimate) in
place by one iteration on a minibatch S = (s_1..s_M), and hands the psi-loss of Fisher's
identity to the caller's ``psi_step``. The sampler module owns that state, the generator,
checkpoints and logging; steppers never log.

Temperature T is the energy layer's (:class:`lit_bayes.posterior.Posterior`): the particles
target the Feynman-Kac path density (Eq. 4; Eq. 7 for OHSMC) raised to 1/T, i.e. for
psi fixed the pBNN posterior over phi tempered in prior and likelihood,
p_T(phi | y; psi) ∝ [pi(phi) prod_s p(y_s | phi; psi)]^{1/T} = exp(-U(phi) / T):

- phi_0 ~ pi^{1/T} (N(0, T v) for a N(0, v) prior);
- the potential of a batch is p(y_S | phi; psi)^{1/T}: its incremental log-weight is the
  unscaled batch log-likelihood divided by T (minus the likelihood part of the unscaled
  energy; the N/M factor never enters the weights, spec pitfall §8.3);
- a Gaussian move's density to the power 1/T: random-walk and OU noise variances times T
  (:mod:`lit_bayes.steppers.kernels`); a Metropolis move targets the tempered prefix posterior;
- psi follows the gradient of the tempered evidence log Z_T(psi), whose Fisher identity is
  E_T[(1/T) grad_psi log p(y | phi; psi)]: the psi-loss is the weighted likelihood part of the
  minibatch energy, (N/M)/T sum_j w^j [-log p(y_S | phi^j; psi)] (Eqs. 5-6 divided by T).

For a linear-Gaussian model the cloud at T has the T = 1 mean and T times its covariance.
T = 1 is the paper's algorithm, operation for operation.

Algorithm 3 (OHSMC, :class:`OHSMCStepper`), iteration i on batch S^i:

1. move (Eq. 3, warm start): phi_i^j ~ M_i(. | phi_{i-1}^j);
2. reweight (Eq. 2 / 7):
   log w_bar_i^j = log w_{i-1}^j + (1/T) sum_{s in S^i} log p(y_s | phi_i^j; psi_{i-1}),
   log L_hat += logsumexp_j log w_bar_i^j (§2.5), log w_i = log w_bar_i - logsumexp_l log w_bar_i^l;
   under DDP the batch log-likelihoods are summed over processes first (the global batch, §8.7);
3. resample (stratified, when ESS <= tau J; tau = 1 every iteration): ancestors a_j;
4. psi step at psi_{i-1} (Eqs. 5-6): loss (N/M)/T sum_j w^j [-log p(y_{S^i} | phi_i^j; psi)] with
   w^j the ancestors' copy shares (the gradient on the resampled cloud with uniform weights);
5. phi_i^j <- phi_i^{a_j}, w_i^j = 1/J.

Algorithm 2 (SGSMC, :class:`SGSMCStepper`), iteration on batch S = (s_1..s_M):

1. cold start: phi_0^j ~ pi^{1/T}, w_0^j = 1/J, log L_hat = 0;
2. for k = 1..M: for k >= 2 move phi^j by ``steps`` random-walk Metropolis steps invariant for
   the tempered prefix posterior exp(-U_{k-1}(phi) / T),
   U_{k-1}(phi) = -log pi(phi) - sum_{l<k} log p(y_{s_l} | phi; psi) (no move at k = 1);
   reweight by p(y_{s_k} | phi; psi)^{1/T} (Eq. 2) and resample;
3. psi step (Eqs. 5-6): loss (N/M)/T sum_j w_M^j [-log p(y_S | phi_M^j; psi)].
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from lit_bayes.grad_mode import without_grad
from lit_bayes.posterior import Posterior
from lit_bayes.steppers.kernels import make_kernel
from lit_bayes.steppers.smc import ParticleStepper, Reweighted

__all__ = ["Cloud", "OHSMCStepper", "SGSMCStepper"]

#: ``log_lik(particles, x, y)``: ``log p(y_b | x_b, phi^j; psi)`` for every particle and point, ``(J, B)``
LogLikelihood = Callable[[Mapping[str, Tensor], Tensor, Tensor], Tensor]
#: ``psi_step(loss, weights)``: one optimiser step of psi on the scalar ``loss``, the psi-loss of the particle
#: ``weights`` ``(J,)`` (for a caller that computes its gradient by hand)
PsiStep = Callable[[Tensor, Tensor], None]


@dataclass
class Cloud:
    """The weighted particle approximation a stepper advances in place: ``particles`` (live
    ``(J, ...)`` tensors by name), normalised ``log_weights`` (J,) and ``log_evidence`` (0-d)."""

    particles: dict[str, Tensor]
    log_weights: Tensor
    log_evidence: Tensor

    @without_grad
    def set_particles(self, particles: Mapping[str, Tensor]) -> None:
        for name, p in self.particles.items():
            p.copy_(particles[name])

    @without_grad
    def restart(self, particles: Mapping[str, Tensor]) -> None:
        """Particles ``particles`` with uniform weights and a zero log-evidence."""
        self.set_particles(particles)
        self.log_weights.fill_(-math.log(self.log_weights.shape[0]))
        self.log_evidence.zero_()

    @without_grad
    def apply(self, result: Reweighted) -> None:
        """Take the reweighting: resample the particles (if it did; ``index_select``, the same rows as indexing at
        about half its cost), new weights, evidence increment."""
        if result.ancestors is not None:
            self.set_particles({n: p.index_select(0, result.ancestors) for n, p in self.particles.items()})
        self.log_weights.copy_(result.log_weights)
        self.log_evidence.add_(result.log_increment)


class FeynmanKacStepper:
    """What both algorithms share: the tempered target, the move, reweighting and the psi-loss.

    Args:
        posterior: the sampler's energy (likelihood, prior, N/M scaling, temperature T); the
            psi-loss uses it as is, the particle weights its unscaled (``"sum"``) version.
        kernel, kernel_options: the move (:func:`~lit_bayes.steppers.kernels.make_kernel`), at T.
        resampling, ess_threshold: the rule of :class:`~lit_bayes.steppers.smc.ParticleStepper`.
    """

    def __init__(self, posterior: Posterior, kernel: str, kernel_options: Mapping[str, float] | None = None,
                 resampling: str = "stratified", ess_threshold: float = 1.0) -> None:
        self.posterior = posterior
        # the SMC target: the same tempered energy with unscaled likelihood sums (spec pitfall §8.3)
        self.target = Posterior(posterior.likelihood, posterior.prior, temperature=posterior.temperature,
                                minibatch_scaling="sum")
        self.kernel = make_kernel(kernel, posterior.prior, kernel_options, temperature=posterior.temperature)
        self.particle_stepper = ParticleStepper(resampling, ess_threshold)

    def draw_prior(self, like: Mapping[str, Tensor], generator: torch.Generator) -> dict[str, Tensor]:
        """phi_0^j ~ pi^{1/T}, shaped like ``like`` (:meth:`lit_bayes.posterior.Prior.sample`)."""
        return self.target.prior.sample(like, generator, temperature=self.target.temperature)

    def log_potential(self, log_lik_sums: Tensor, batch_size: int) -> Tensor:
        """Incremental log-weights (1/T) sum_b log p(y_b | phi^j) ``(J,)`` from the particles' summed
        log-likelihoods ``(J,)`` of a batch of ``batch_size`` points: minus the likelihood part of the
        unscaled tempered energy, which is linear in the sum (one product)."""
        return log_lik_sums * -self.target.likelihood_energy(1.0, batch_size)

    def reweight(self, cloud: Cloud, log_potential: Tensor, generator: torch.Generator) -> Reweighted:
        """Weight the cloud by ``log_potential`` and draw the ancestors (applied by :meth:`Cloud.apply`)."""
        return self.particle_stepper.reweight(cloud.log_weights, log_potential, generator)

    def psi_loss(self, log_lik_sums: Tensor, batch_size: int, weights: Tensor) -> Tensor:
        """(N/M)/T sum_j w_j [-log p(y_S | phi^j; psi)] (Eqs. 5-6) from the particles' summed log-likelihoods
        ``(J,)`` of the M = ``batch_size`` points, the weights held constant. A particle without weight adds 0, not
        0 x inf or 0 x NaN (its likelihood 0 or NaN: the weights give it none)."""
        energies = self.posterior.likelihood_energy(log_lik_sums, batch_size).nan_to_num(0.0, 0.0, 0.0)
        return torch.dot(energies, weights.detach().to(dtype=energies.dtype))

    def finite_psi_loss(self, particles: Mapping[str, Tensor], x: Tensor, y: Tensor, log_lik: LogLikelihood,
                        log_lik_sums: Tensor, weights: Tensor) -> Tensor:
        """:meth:`psi_loss` of the ``particles``' summed log-likelihoods ``log_lik_sums`` on ``(x, y)``. Where one is
        not finite and autograd will take the gradient (a particle without weight, its likelihood 0 or NaN), the loss
        of the particles with weight from a forward of theirs alone: autograd's 0 x NaN through that particle's
        activations would otherwise turn psi's gradient NaN (the hand-written gradient skips it itself)."""
        if not log_lik_sums.requires_grad or bool(log_lik_sums.detach().isfinite().all()):
            return self.psi_loss(log_lik_sums, y.shape[0], weights)
        live = weights > 0
        alone = log_lik({name: p[live] for name, p in particles.items()}, x, y).sum(-1)
        return self.psi_loss(alone, y.shape[0], weights[live])


class OHSMCStepper(FeynmanKacStepper):
    """Algorithm 3 (OHSMC): move, reweight, resample, psi step (see the module docstring). The move is a
    target-free kernel that moves the cloud in place (``"random_walk"`` or ``"ou"``)."""

    def __init__(self, posterior: Posterior, kernel: str, kernel_options: Mapping[str, float] | None = None,
                 resampling: str = "stratified", ess_threshold: float = 1.0) -> None:
        super().__init__(posterior, kernel, kernel_options, resampling, ess_threshold)
        if not hasattr(self.kernel, "move_"):
            raise ValueError(f"kernel must be 'random_walk' or 'ou' for OHSMC, got {kernel!r}")

    def step(self, cloud: Cloud, x: Tensor, y: Tensor, log_lik: LogLikelihood, generator: torch.Generator,
             psi_step: PsiStep, reduce: Callable[[Tensor], Tensor] = lambda t: t) -> tuple[Reweighted, Tensor]:
        """One iteration on the batch ``(x, y)``; ``reduce`` sums a per-particle tensor over
        processes. Returns the reweighting and the (detached) psi-loss."""
        self.kernel.move_(cloud.particles, generator)  # 1. move, in place
        sums = log_lik(cloud.particles, x, y).sum(-1)  # (J,) over the M points, differentiable in psi
        batch_size = y.shape[0]
        result = self.reweight(cloud, reduce(self.log_potential(sums.detach(), batch_size)), generator)  # 2.-3.
        loss = self.finite_psi_loss(cloud.particles, x, y, log_lik, sums, result.gradient_weights)  # 4., before 5.
        psi_step(loss, result.gradient_weights)
        cloud.apply(result)  # 5.
        return result, loss.detach()


class SGSMCStepper(FeynmanKacStepper):
    """Algorithm 2 (SGSMC): SMC from the prior through the batch, then a psi step (see the module docstring).

    Unlike the paper's code (whose padded targets make every move for 2 <= k < M a
    rejection, spec §3), every move here is effective."""

    @torch.no_grad()
    def filter(self, cloud: Cloud, x: Tensor, y: Tensor, log_lik: LogLikelihood,
               generator: torch.Generator) -> Reweighted:
        """Steps 1-2: restart the cloud from pi^{1/T} and run SMC through the points of ``(x, y)``
        in order; returns the last reweighting (the cloud ends with log p_hat_T(y_S))."""
        cloud.restart(self.draw_prior(cloud.particles, generator))
        result = None
        for k in range(y.shape[0]):
            if k > 0:
                def prefix_target(p, k=k):  # -U_{k-1}(phi) / T
                    return -self.target.energy(log_lik(p, x[:k], y[:k]), self.target.prior(p))

                cloud.set_particles(self.kernel.move(cloud.particles, generator, prefix_target))
            point = log_lik(cloud.particles, x[k : k + 1], y[k : k + 1])
            result = self.reweight(cloud, self.log_potential(point.sum(-1), 1), generator)
            cloud.apply(result)
        return result

    def step(self, cloud: Cloud, x: Tensor, y: Tensor, log_lik: LogLikelihood, generator: torch.Generator,
             psi_step: PsiStep) -> tuple[Reweighted, Tensor]:
        """One iteration on the batch ``(x, y)``: the filter, then the psi step on the final cloud."""
        result = self.filter(cloud, x, y, log_lik, generator)
        weights = cloud.log_weights.exp()
        loss = self.finite_psi_loss(cloud.particles, x, y, log_lik, log_lik(cloud.particles, x, y).sum(-1), weights)
        psi_step(loss, weights)
        return result, loss.detach()
