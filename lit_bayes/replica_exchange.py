"""Replica exchange (parallel tempering) across batched chains: the temperature ladder, the even/odd
swap schedule and the swap rule.

Replica k targets exp(-U / tau_k) on the ladder 1 = tau_0 < tau_1 < ... < tau_{K-1}; the product of
the K targets is the joint target. Exchanging the states of neighbours k and k+1 is a Metropolis
move on that product (Swendsen & Wang 1986; Geyer 1991) with acceptance

    min(1, exp((1/tau_k - 1/tau_{k+1}) (U(theta_k) - U(theta_{k+1})))),

which leaves the joint target, and so replica 0's marginal, exactly invariant. Rounds alternate
between the pairs (0, 1), (2, 3), ... and (1, 2), (3, 4), ... (the deterministic even/odd schedule of
Okabe et al. 2001), which makes the exchange non-reversible and moves states along the ladder in
O(K) rather than O(K^2) rounds (Syed et al. 2022).

When U is only estimated from a minibatch, the plug-in acceptance above is biased upward (Jensen).
Deng et al. (2020) subtract the estimator's variance: with the estimated energy difference D~ normal
around D with variance s^2, exp(c D~ - c^2 s^2 / 2) has mean exp(c D), where c = 1/tau_k - 1/tau_{k+1}.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from lit_bayes.validation import check_float, check_int

__all__ = ["check_ladder", "difference_variance", "geometric_ladder", "swap_log_acceptance", "swap_pairs"]


def geometric_ladder(num_temperatures: int, max_temperature: float) -> list[float]:
    """``num_temperatures`` temperatures from 1 to ``max_temperature``, equally spaced in log temperature
    (constant ratio between neighbours: for a target whose energy variance grows with the temperature like
    a d-dimensional Gaussian's, equal swap rates along the ladder)."""
    check_int("num_temperatures", num_temperatures, 1)
    if num_temperatures == 1:
        return [1.0]
    top = check_float("max_temperature", max_temperature, minimum=1.0)
    if top <= 1.0:
        raise ValueError(f"max_temperature must be above 1 for a ladder of {num_temperatures} temperatures, got {top}")
    return [top ** (k / (num_temperatures - 1)) for k in range(num_temperatures)]


def check_ladder(temperatures: Sequence[float]) -> list[float]:
    """A ladder given by hand: finite, starting at 1 (the posterior's own temperature, whose replicas are the
    kept chains), strictly increasing."""
    values = [check_float(f"temperatures[{k}]", t) for k, t in enumerate(temperatures)]
    if not values or values[0] != 1.0:
        raise ValueError(f"temperatures must start at 1.0 (the replicas kept as posterior draws), "
                         f"got {list(temperatures)}")
    if any(not (b > a) or not math.isfinite(b) for a, b in zip(values, values[1:])):
        raise ValueError(f"temperatures must be finite and strictly increasing, got {list(temperatures)}")
    return values


def swap_pairs(round_index: int, num_temperatures: int) -> list[int]:
    """The lower replicas k of the pairs (k, k+1) that swap round ``round_index`` attempts: the even k in even
    rounds, the odd k in odd rounds (Okabe et al. 2001). No two pairs share a replica."""
    return list(range(round_index % 2, num_temperatures - 1, 2))


def swap_log_acceptance(energies: Tensor, temperatures: Tensor, lower: Sequence[int],
                        variance: Tensor | None = None) -> Tensor:
    """Log acceptance of exchanging replicas k and k+1 for every k in ``lower`` and every chain: ``(pairs, C)``.

    Args:
        energies: ``(K, C)`` energies U(theta) at the base temperature, replica by replica (K temperatures,
            C chains per temperature).
        temperatures: ``(K,)`` the ladder's tau_k (relative to the base temperature).
        lower: the pairs' lower replicas.
        variance: ``(pairs, C)`` the variance of the estimate of U(theta_k) - U(theta_{k+1}) when the
            energies are minibatch estimates (Deng et al. 2020's correction); ``None`` for exact energies.
    The log acceptance may be positive; a swap is accepted when log u is below it, u ~ U(0, 1).
    """
    index = torch.as_tensor(list(lower), dtype=torch.long, device=energies.device)
    inverse = 1.0 / temperatures.to(energies.device, energies.dtype)
    c = (inverse[index] - inverse[index + 1]).unsqueeze(-1)  # (pairs, 1) > 0
    log_accept = c * (energies[index] - energies[index + 1])
    if variance is not None:
        log_accept = log_accept - 0.5 * c.square() * variance
    return log_accept


def difference_variance(terms: Tensor, lower: Sequence[int], num_data: int) -> Tensor:
    """The variance of the minibatch estimate of U(theta_k) - U(theta_{k+1}) for every pair: ``(pairs, C)``.

    ``terms`` ``(K, C, B)`` holds every replica's per-point terms of its energy estimate on one batch of B of
    the ``num_data`` training points (the estimate is their sum plus the exact prior term); with d_i the
    points' differences between the two replicas, the estimate's variance is ``B var(d) (1 - B/N)`` (a simple
    random sample without replacement): zero on the full batch."""
    index = torch.as_tensor(list(lower), dtype=torch.long, device=terms.device)
    batch = terms.shape[-1]
    if batch < 2:
        raise ValueError("a minibatch swap needs batches of at least 2 points to estimate its variance")
    differences = (terms[index] - terms[index + 1]).double()
    return (batch * max(0.0, 1.0 - batch / num_data)) * differences.var(-1)
