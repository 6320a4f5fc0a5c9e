"""The "crescent" toy of the Feynman-Kac paper (Sec. 4.1, App. A, Eq. 8; feynman-kac spec §6.1).

Model (Eq. 8), with a two-dimensional latent phi = (phi_1, phi_2) and a scalar deterministic psi:

    phi ~ N(0, diag(2, 1)),
    y_k | phi ~ N(phi_2 / psi + (phi_1^2 + psi^2) / 2, 1),   k = 1..N  (i.i.d.).

For fixed psi the posterior p(phi | y_{1:N}; psi) is a thin, non-Gaussian crescent around the
parabola phi_2 = psi (ybar - (phi_1^2 + psi^2) / 2). Because phi is two-dimensional, the
posterior and the evidence p(y_{1:N}; psi) (spec §1) are computed here by brute-force grid
quadrature: the reference of Fig. 1.

Prior quirk (spec §6.1 and pitfall 12): the authors' code passes ``diag(2, 1)`` as a *standard
deviation* where it evaluates the prior density (MAP, HMC, VB, their true-posterior plot), so
those evaluate N(0, diag(4, 1)) while their samplers draw from N(0, diag(2, 1)). This module
implements the paper's model, N(0, diag(2, 1)), everywhere; ``prior_variances=(4.0, 1.0)``
reproduces the quirk's density.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from lit_bayes.posterior import GaussianPrior
from lit_bayes.validation import check_float, check_positive

__all__ = ["PRIOR_VARIANCES", "Crescent", "grid_log_joint", "grid_posterior", "brute_force_mle"]

PRIOR_VARIANCES = (2.0, 1.0)
"""Prior variances of (phi_1, phi_2) in Eq. 8."""

_LOG_2PI = math.log(2.0 * math.pi)


def check_psi(psi: object) -> float:
    """``psi`` as a float if it is a finite, non-zero real, else ``ValueError``."""
    value = check_float("psi", psi)
    if value == 0:
        raise ValueError(f"psi must be a finite, non-zero real number (Eq. 8 divides by psi), got {psi!r}")
    return value


def _check_variances(prior_variances: Sequence[float]) -> tuple[float, float]:
    if len(prior_variances) != 2:
        raise ValueError(f"prior_variances must be two finite numbers > 0, got {prior_variances!r}")
    first, second = (check_positive(f"prior_variances[{i}]", v) for i, v in enumerate(prior_variances))
    return first, second


class Crescent(nn.Module):
    """The crescent regression function of Eq. 8 as an ``nn.Module`` for a :class:`PartialBNN`.

    Parameters ``phi1``, ``phi2`` (0-d, the stochastic part: ``PartialBNN(Crescent(),
    ["phi1", "phi2"])``, separate names so that ``GaussianPrior(1.0, {"*phi1": 2.0})`` is the
    prior N(0, diag(2, 1))) and ``psi`` (0-d, deterministic). The likelihood is
    ``Gaussian(noise_std=1.0)``.

    Args:
        psi: initial psi (non-zero; the paper starts at 0.1).
        phi: initial ``(phi_1, phi_2)`` (the MAP baseline starts at ``(0, 0)``; SMC particles
            are drawn from the prior instead).
    """

    def __init__(self, psi: float = 0.1, phi: Sequence[float] = (0.0, 0.0)) -> None:
        super().__init__()
        psi = check_psi(psi)
        if isinstance(phi, (str, bytes)) or not isinstance(phi, Sequence) or len(phi) != 2:
            raise ValueError(f"phi must be a pair (phi_1, phi_2) of finite numbers, got {phi!r}")
        phi1, phi2 = (check_float(f"phi[{i}]", v) for i, v in enumerate(phi))
        self.phi1 = nn.Parameter(torch.tensor(phi1))
        self.phi2 = nn.Parameter(torch.tensor(phi2))
        self.psi = nn.Parameter(torch.tensor(psi))

    @staticmethod
    def mean(phi1: Tensor, phi2: Tensor, psi: Tensor | float) -> Tensor:
        """The mean of y in Eq. 8: ``phi_2 / psi + (phi_1^2 + psi^2) / 2`` (broadcasting)."""
        return phi2 / psi + 0.5 * (phi1**2 + psi**2)

    @staticmethod
    def prior(prior_variances: Sequence[float] = PRIOR_VARIANCES) -> GaussianPrior:
        """The prior of Eq. 8 over ``phi1`` and ``phi2`` as a :class:`GaussianPrior`
        (``prior_variances=(4.0, 1.0)``: the authors' code's density quirk)."""
        v1, v2 = _check_variances(prior_variances)
        return GaussianPrior(variance=v2, group_variances={"*phi1": v1})

    def forward(self, x: Tensor) -> Tensor:
        """The mean for every row of ``x`` (only its batch size is used), shape ``(B, 1)``."""
        if not isinstance(x, Tensor) or x.dim() < 1:
            raise ValueError(f"x must be a tensor with a leading batch dimension, got {x!r}")
        return self.mean(self.phi1, self.phi2, self.psi).expand(x.shape[0], 1)


def _check_data(y: Tensor) -> Tensor:
    if not isinstance(y, Tensor) or y.dim() != 1 or y.numel() == 0 or not torch.isfinite(y).all():
        raise ValueError(f"y must be a non-empty 1-d tensor of finite observations, got {y!r}")
    return y.double()


def _check_axis(name: str, axis: Tensor) -> Tensor:
    if not isinstance(axis, Tensor) or axis.dim() != 1 or axis.numel() < 2:
        raise ValueError(f"{name} must be a 1-d tensor of at least 2 evenly spaced points, got {axis!r}")
    axis = axis.double()
    steps = axis.diff()
    if not (steps > 0).all() or not torch.allclose(steps, steps[0].expand_as(steps), rtol=1e-6, atol=0.0):
        raise ValueError(f"{name} must be increasing and evenly spaced")
    return axis


def grid_log_joint(
    y: Tensor, psi: float, phi1: Tensor, phi2: Tensor, prior_variances: Sequence[float] = PRIOR_VARIANCES
) -> Tensor:
    """``log p(y_{1:N} | phi; psi) + log pi(phi)`` of Eq. 8 on the grid ``phi1 x phi2``,
    shape ``(len(phi1), len(phi2))``, float64. Uses the sufficient statistics of the
    Gaussian likelihood: ``sum_k log N(y_k; m, 1) = -N/2 log 2 pi - S/2 - N (m - ybar)^2 / 2``
    with ``S = sum_k (y_k - ybar)^2``."""
    y = _check_data(y)
    psi = check_psi(psi)
    phi1, phi2 = _check_axis("phi1", phi1), _check_axis("phi2", phi2)
    v1, v2 = _check_variances(prior_variances)
    n, ybar = y.numel(), y.mean()
    scatter = ((y - ybar) ** 2).sum()
    m = Crescent.mean(phi1[:, None], phi2[None, :], psi)
    log_lik = -0.5 * n * _LOG_2PI - 0.5 * scatter - 0.5 * n * (m - ybar) ** 2
    log_prior = -0.5 * (phi1[:, None] ** 2 / v1 + phi2[None, :] ** 2 / v2) - _LOG_2PI - 0.5 * math.log(v1 * v2)
    return log_lik + log_prior


def grid_posterior(
    y: Tensor, psi: float, phi1: Tensor, phi2: Tensor, prior_variances: Sequence[float] = PRIOR_VARIANCES
) -> tuple[Tensor, float]:
    """The posterior density ``p(phi | y_{1:N}; psi)`` on the grid (normalised so that its
    Riemann sum ``density.sum() * dphi1 * dphi2`` is 1) and the evidence ``log p(y_{1:N}; psi)``
    by the same quadrature (spec §1). The grid must hold the crescent: its spacing well below
    the crescent's width ``|psi| / sqrt(N + psi^2)`` and its box wide enough for the tails."""
    log_joint = grid_log_joint(y, psi, phi1, phi2, prior_variances)
    log_cell = math.log(float(phi1[1] - phi1[0]) * float(phi2[1] - phi2[0]))
    log_evidence = float(log_joint.logsumexp(dim=(0, 1))) + log_cell
    return (log_joint - log_evidence).exp(), log_evidence


def brute_force_mle(
    y: Tensor, psi_grid: Tensor, phi1: Tensor, phi2: Tensor, prior_variances: Sequence[float] = PRIOR_VARIANCES
) -> tuple[float, Tensor]:
    """The psi of ``psi_grid`` with the largest grid-quadrature evidence ``log p(y; psi)``
    (goal 1 of spec §1) and the evidence at every grid value."""
    if not isinstance(psi_grid, Tensor) or psi_grid.dim() != 1 or psi_grid.numel() == 0:
        raise ValueError(f"psi_grid must be a non-empty 1-d tensor, got {psi_grid!r}")
    evidence = torch.tensor(
        [grid_posterior(y, float(p), phi1, phi2, prior_variances)[1] for p in psi_grid.tolist()], dtype=torch.float64
    )
    return float(psi_grid[evidence.argmax()]), evidence
