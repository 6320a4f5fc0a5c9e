"""``SWAG``: the stochastic weight averaging Gaussian of Maddox et al. (2019), the Feynman-Kac paper's SWAG
baseline (feynman-kac spec §5).

From a MAP estimate (``init="template"`` on a model that holds it, e.g.
:class:`lit_bayes.models.PartialFromRun` with psi fixed), the same objective is optimised further (Adam at 0.01
in the paper's code; SGD at 1e-3 on the crescent) and the parameters theta are snapshotted once per epoch. With
the running moments of the snapshots, theta_bar and theta2_bar, and the deviations D = [theta_i - theta_bar_i] of
the last K snapshots (Maddox et al., Sec. 3), the Gaussian is

    N(theta_bar, Sigma),  Sigma = diag(theta2_bar - theta_bar^2) / 2 + D D^T / (2 (K - 1)),

drawn as theta_bar + sqrt(diag / 2) z_1 + D z_2 / sqrt(2 (K - 1)) with z_1, z_2 standard normal (their
eq. 1 and the sampling rule after it: the same law as a Cholesky draw, without forming Sigma). The spec quotes
the paper's code dividing D D^T by K + 1; with K = 100 the two differ by 2 % of the low-rank part.
``variant="diagonal"`` is SWAG-diagonal, N(theta_bar, diag(theta2_bar - theta_bar^2)).
"""
from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from lit_bayes.posterior import Likelihood, Prior
from lit_bayes.predictive import uniform_log_weights
from lit_bayes.samplers.map import MAP
from lit_bayes.validation import check_int

__all__ = ["SWAG"]


class SWAG(MAP):
    """The SWAG Gaussian over the model's sampled parameters, from snapshots taken once per epoch.

    Training is :class:`~lit_bayes.samplers.map.MAP`'s with one chain (U(theta) / N minimised by a torch
    optimiser); at the end of every epoch the parameters are added to the running moments and the last
    ``max_rank`` deviations. The moments and deviations are buffers, so checkpoints hold them and a resumed run
    continues them exactly.
    Predictions and the predictive callbacks use ``num_samples`` draws of the Gaussian made with one fixed set
    of standard-normal draws (its own random stream); before two snapshots exist they use the current
    parameters alone.

    Args:
        model, likelihood, prior: as :class:`~lit_bayes.samplers.base.SamplerModule`; start from a MAP estimate
            with ``init="template"``.
        max_rank: K, the number of last deviations kept (the paper's code: 100; 20 on the crescent).
        num_samples: draws of the Gaussian for predictions (the paper: 1000).
        variant: ``"low_rank"`` (diagonal plus low rank, the paper's tables) or ``"diagonal"``.
        optimizer, lr, optimizer_options: any ``torch.optim`` class by its lower-case name, its learning rate and
            other arguments.
        num_data, temperature, seed, init: as :class:`~lit_bayes.samplers.base.SamplerModule`.
    """

    predict_with_current_state = True  # predictions draw from the current Gaussian
    independent_chains = False  # one Gaussian: nothing to compare across chains
    VARIANTS = ("low_rank", "diagonal")

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        prior: Prior | None = None,
        max_rank: int = 100,
        num_samples: int = 1000,
        variant: Literal["low_rank", "diagonal"] = "low_rank",
        optimizer: str = "adam",
        lr: float = 0.01,
        optimizer_options: dict[str, Any] | None = None,
        num_data: int | None = None,
        temperature: float = 1.0,
        seed: int = 0,
        init: Literal["module", "prior", "template"] = "template",
    ) -> None:
        super().__init__(model, likelihood, prior, optimizer=optimizer, lr=lr, optimizer_options=optimizer_options,
                         num_data=num_data, temperature=temperature, minibatch_scaling="rescaled", num_chains=1,
                         seed=seed, init=init)
        self.max_rank = check_int("max_rank", max_rank, 2)
        self.num_samples = check_int("num_samples", num_samples, 1)
        if variant not in self.VARIANTS:
            raise ValueError(f"variant must be one of {self.VARIANTS}, got {variant!r}")
        self.variant = variant
        size = sum(p.numel() for p in self.template_parameters().values())
        self.register_buffer("snapshots", torch.zeros((), dtype=torch.long))
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("square_mean", torch.zeros(size))
        self.register_buffer("deviations", torch.zeros(self.max_rank, size))  # a ring, row snapshots % max_rank

    @property
    def stream_rank(self) -> int:
        return 0  # one Gaussian, the same on every process

    # ------------------------------------------------------------ snapshots
    def on_train_epoch_end(self) -> None:
        self.add_snapshot(self.chains.flat()[0])

    @torch.no_grad()
    def add_snapshot(self, theta: Tensor) -> None:
        """Add one snapshot ``theta`` ``(P,)`` to the running moments and the deviation ring (Maddox et al.,
        Algorithm 1: the deviation from the running mean after the update)."""
        n = int(self.snapshots)
        theta = theta.to(self.mean.dtype)
        self.mean.mul_(n / (n + 1)).add_(theta / (n + 1))
        self.square_mean.mul_(n / (n + 1)).add_(theta.square() / (n + 1))
        self.deviations[n % self.max_rank] = theta - self.mean
        self.snapshots += 1

    def diagonal_variance(self) -> Tensor:
        """diag(theta2_bar - theta_bar^2), clamped at 0 (a parameter that never moved is exactly 0 up to
        rounding)."""
        return (self.square_mean - self.mean.square()).clamp_(min=0.0)

    def covariance(self) -> Tensor:
        """Sigma ``(P, P)`` of the current variant (for checks; sampling never forms it)."""
        diagonal = torch.diag(self.diagonal_variance())
        if self.variant == "diagonal":
            return diagonal
        rank = min(int(self.snapshots), self.max_rank)
        deviations = self.deviations[:rank]
        return diagonal / 2 + deviations.T @ deviations / (2 * (rank - 1))

    def current_samples(self) -> tuple[dict[str, Tensor], Tensor]:
        """``num_samples`` draws of the SWAG Gaussian (the same standard-normal draws every call), uniform
        log-weights; the current parameters alone before two snapshots."""
        if int(self.snapshots) < 2:
            return super().current_samples()
        noise = self.fixed_standard_normals({"white": (self.num_samples, self.mean.numel()),
                                             "low_rank": (self.num_samples, self.max_rank)}, self.mean)
        white, low_rank = noise["white"], noise["low_rank"]
        with torch.no_grad():
            if self.variant == "diagonal":
                draws = self.mean + self.diagonal_variance().sqrt() * white
            else:
                rank = min(int(self.snapshots), self.max_rank)
                draws = (self.mean + (self.diagonal_variance() / 2).sqrt() * white
                         + low_rank[:, :rank] @ self.deviations[:rank] / math.sqrt(2 * (rank - 1)))
        dtype = next(iter(self.chains.as_dict().values())).dtype
        return self.chains.unflatten(draws.to(dtype)), uniform_log_weights(self.num_samples, self.mean.device)
