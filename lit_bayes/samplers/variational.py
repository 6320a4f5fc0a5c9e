"""``MeanFieldVB``: stochastic mean-field Gaussian variational inference of a partial BNN (Hoffman et al. 2013),
the Feynman-Kac paper's VB baseline (feynman-kac spec §5).

The stochastic part phi gets q(phi) = N(m, diag(exp(log v))); m, log v and the deterministic part psi are
trained jointly by a torch optimiser (Adam at 0.01 in the paper) on the reparameterised Monte Carlo estimate of
the negative ELBO of the (tempered) posterior, with no analytic KL term:

    -ELBO ~ (1/S) sum_s [U(phi_s) + log q(phi_s)],   phi_s = m + exp(log v / 2) eps_s,  eps_s ~ N(0, I),

with U the energy of :mod:`lit_bayes.posterior` (``-(N/M) log p(y_S | phi; psi) - log pi(phi)``, divided by T),
so its minimiser in q is the mean-field approximation of exp(-U/T). Predictions average ``num_samples`` draws
of q (the paper: 1000).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from lit_bayes.chains import ChainState
from lit_bayes.models.partial_bnn import PartialBNN
from lit_bayes.optimizers import check_optimizer_arguments, make_optimizer
from lit_bayes.posterior import Likelihood, Prior
from lit_bayes.predictive import uniform_log_weights
from lit_bayes.samplers.partial_bnn_sampler import PartialBNNSampler
from lit_bayes.validation import check_int

__all__ = ["MeanFieldVB"]


class MeanFieldVB(PartialBNNSampler):
    """Mean-field Gaussian VB over a partial BNN's phi, psi fitted jointly (feynman-kac spec §5).

    One training step on a minibatch: ``num_train_samples`` reparameterised draws of q, the loss
    ``mean_s [U(phi_s) + log q(phi_s)] / N`` (the negative ELBO per training point, so learning rates do not
    depend on N), one optimiser step on (m, log v, psi). The state is m (the module's ``chains``, one "chain")
    and log v (``log_variances``), both in checkpoints. Predictions and the predictive callbacks use
    ``num_samples`` draws of q made with one fixed set of standard-normal draws (its own random stream), so the
    same q always gives the same predictive: a validation metric that selects the best step compares q's, not
    noise.

    Args:
        model: the partial BNN; its stochastic part phi gets q and ``prior`` (default N(0, I)), its deterministic
            part psi is fitted (at least one parameter must stay deterministic).
        likelihood: per-point likelihood.
        num_train_samples: S, draws of q per training step (the paper: 100).
        num_samples: draws of q for predictions (the paper: 1000).
        init_log_variance: the initial log v of every coordinate (the paper's pBNN runs: 1; the crescent: 0).
            m starts at the model's current phi (the paper: the network's own initialisation).
        optimizer, lr, optimizer_options: any ``torch.optim`` class by its lower-case name (``"adam"`` at 0.01
            in the paper), its learning rate and other arguments.
        num_data: N of the N/M likelihood scale (default: the DataModule's ``num_train``).
        temperature: T; q then approximates exp(-U/T).
        seed: root seed of the training and prediction draws.
    """

    predict_with_current_state = True  # predictions draw from the current q
    keeps_draws = False  # an optimiser of q: no Markov chain, no kept draws

    def __init__(
        self,
        model: PartialBNN,
        likelihood: Likelihood,
        prior: Prior | None = None,
        num_train_samples: int = 100,
        num_samples: int = 1000,
        init_log_variance: float = 1.0,
        optimizer: str = "adam",
        lr: float = 0.01,
        optimizer_options: dict[str, Any] | None = None,
        num_data: int | None = None,
        temperature: float = 1.0,
        seed: int = 0,
    ) -> None:
        super().__init__(
            model=model, likelihood=likelihood, prior=prior, num_data=num_data, temperature=temperature,
            minibatch_scaling="rescaled", num_chains=1, seed=seed, init="template",
        )
        self.num_train_samples = check_int("num_train_samples", num_train_samples, 1)
        self.num_samples = check_int("num_samples", num_samples, 1)
        if not math.isfinite(init_log_variance):
            raise ValueError(f"init_log_variance must be finite, got {init_log_variance!r}")
        self.optimizer_name, self.lr, self.optimizer_options = check_optimizer_arguments(optimizer, lr,
                                                                                          optimizer_options)
        means = self.initial_state(torch.Generator())  # the template: m = the model's phi
        self.chains = ChainState(means)
        self.log_variances = ChainState({name: torch.full_like(m, float(init_log_variance))
                                         for name, m in means.items()})

    def configure_optimizers(self):
        self.make_generator()
        params = [*self.chains.parameters(), *self.log_variances.parameters(), *self.model.deterministic_parameters()]
        return make_optimizer(self.optimizer_name, params, self.lr, self.optimizer_options)

    def is_sample_step(self) -> bool:
        return False

    # ------------------------------------------------------------------ q
    def sample_q(self, noise: dict[str, Tensor]) -> tuple[dict[str, Tensor], Tensor]:
        """phi_s = m + exp(log v / 2) eps_s for standard-normal ``noise`` ``(S, ...)`` by name, and log q(phi_s)
        ``(S,)``; differentiable in m and log v."""
        means, log_vars = self.chains.as_dict(), self.log_variances.as_dict()
        phi, log_q = {}, 0.0
        for name, eps in noise.items():
            log_var = log_vars[name][0]
            phi[name] = means[name][0] + torch.exp(0.5 * log_var) * eps
            density = -0.5 * (math.log(2 * math.pi) + log_var + eps.square())
            log_q = log_q + density.reshape(len(eps), -1).sum(-1)  # 0-dim parameters too
        return phi, log_q

    def standard_normal(self, num: int, generator: torch.Generator) -> dict[str, Tensor]:
        """``num`` standard-normal draws of every phi tensor from ``generator``, on its device."""
        return {name: torch.randn((num, *m.shape[1:]), generator=generator, device=generator.device, dtype=m.dtype)
                for name, m in self.chains.as_dict().items()}

    def current_samples(self) -> tuple[dict[str, Tensor], Tensor]:
        """``num_samples`` draws of the current q (the same standard-normal draws every call) with uniform
        log-weights."""
        means = self.chains.as_dict()
        first = next(iter(means.values()))
        noise = self.fixed_standard_normals({n: (self.num_samples, *m.shape[1:]) for n, m in means.items()}, first)
        with torch.no_grad():
            phi, _ = self.sample_q(noise)
        return phi, uniform_log_weights(self.num_samples, first.device)

    # --------------------------------------------------------------- training
    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = self.check_batch(batch)
        phi, log_q = self.sample_q(self.standard_normal(self.num_train_samples, self.generator))
        energy = self.energy(phi, x, y)
        self.check_energy(energy)
        loss = (energy + log_q).mean() / (self.posterior.num_data or x.shape[0])  # -ELBO per training point
        self.log_train({"train/loss": loss.detach(),
                        "train/q_std": torch.cat([v.flatten() for v in self.log_variances.as_dict().values()])
                        .detach().mul(0.5).exp().mean()}, prog_bar=("train/loss",))
        return loss
