"""Chain stacking (Yao, Vehtari & Gelman 2022): weights for chains that sit in separate modes.

Chains that do not mix are, each, an approximation of the posterior restricted to the region it explored;
averaging them equally weighs the regions by how many chains started near each. Stacking instead chooses
the convex combination of the chains' predictive distributions that predicts held-out data best:

    w = argmax_{w in simplex} sum_i log sum_k w_k p_k(y_i | x_i),

with p_k chain k's posterior predictive (the mean of p(y | x, theta) over its draws). The objective is
concave in w; :func:`stacking_weights` maximises it by the fixed-point (EM) iteration of mixture weights,
w_k <- w_k mean_i [p_k(y_i | x_i) / sum_j w_j p_j(y_i | x_i)], in log space.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["stacking_weights", "stacked_log_density"]


def stacked_log_density(log_weights: Tensor, chain_log_densities: Tensor) -> Tensor:
    """sum_i log sum_k w_k p_k(y_i | x_i) from log w ``(K,)`` and log p_k(y_i | x_i) ``(K, N)``."""
    return torch.logsumexp(log_weights[:, None] + chain_log_densities, 0).sum()


def stacking_weights(chain_log_densities: Tensor, iterations: int = 2000, tolerance: float = 1e-10) -> Tensor:
    """Stacking weights ``(K,)`` of K chains from their held-out log predictive densities ``(K, N)``
    (log p_k(y_i | x_i) of point i under chain k's predictive), starting from equal weights and stopping when
    the log score gains less than ``tolerance`` per point in an iteration. Float64; each iteration never lowers
    the objective (EM for mixture weights)."""
    if chain_log_densities.dim() != 2 or chain_log_densities.shape[1] == 0:
        raise ValueError("chain_log_densities must be (chains, points) with points > 0, got "
                         f"{tuple(chain_log_densities.shape)}")
    if not bool(torch.isfinite(chain_log_densities).all()):
        raise ValueError("chain_log_densities holds NaN or infinite values")
    lpd = chain_log_densities.double()
    chains, points = lpd.shape
    log_w = torch.full((chains,), -math.log(chains), dtype=torch.float64, device=lpd.device)
    score = float(stacked_log_density(log_w, lpd))
    for _ in range(iterations):
        mixture = torch.logsumexp(log_w[:, None] + lpd, 0)  # log sum_j w_j p_j(y_i), (N,)
        log_w = log_w + torch.logsumexp(lpd - mixture, 1) - math.log(points)
        log_w = log_w - torch.logsumexp(log_w, 0)  # stays on the simplex up to rounding
        new = float(stacked_log_density(log_w, lpd))
        if new - score < tolerance * points:
            break
        score = new
    return log_w.exp()
