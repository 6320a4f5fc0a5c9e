"""Weight-space mixing summary of a sampler: median ESS and IAC over parameter coordinates.

The structured SG-MCMC paper (Alexos et al.) reports ESS (TensorFlow Probability) and IAC
(a hand-written FFT estimator) of unstated quantities. Here both are computed per parameter
coordinate on the kept draws of every chain and summarised by their median over a fixed random
subset of the coordinates (all of them when there are fewer):

- ``ess_median``: the rank-normalised bulk ESS of Vehtari et al. (2021)
  (:func:`lit_bayes.diagnostics.ess_bulk`) with the chains pooled. Chains that sit in different
  modes (networks from different starts seldom agree weight by weight) hold it near the number of
  chains whatever the sampler.
- ``ess_within_median``: the mean over chains of each chain's own bulk ESS: how fast a chain
  decorrelates where it is.
- ``iac_median``: Sokal's integrated autocorrelation time with the automatic window
  (:func:`lit_bayes.diagnostics.integrated_autocorrelation_time`, autocorrelations averaged over chains).

Neither matches the paper's scale (its ESS of ~7 from 5,000 draws is another estimator): compare
methods within a run. :class:`lit_bayes.callbacks.CoordinateMixing` records the trace during a
fit and writes this summary into ``summary.json``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from lit_bayes.diagnostics import MIN_DRAWS, ess_bulk, integrated_autocorrelation_time
from lit_bayes.validation import check_int

__all__ = ["coordinate_mixing", "pick_coordinates"]


def pick_coordinates(num_params: int, num_coords: int, seed: int = 0) -> Tensor:
    """Sorted indices of a fixed random subset of ``num_coords`` of ``num_params`` coordinates
    (all of them when there are fewer), drawn from a generator seeded with ``seed``."""
    check_int("num_coords", num_coords, 1)
    order = torch.randperm(num_params, generator=torch.Generator().manual_seed(seed))
    return order[:num_coords].sort().values


def coordinate_mixing(trace: Tensor, num_coords: int = 1000, seed: int = 0) -> dict[str, float]:
    """``ess_median``, ``ess_within_median``, ``iac_median`` (see the module docstring),
    ``draws_per_chain`` and ``coords`` (the coordinates that move, of the subset) of ``trace``,
    ``(chains, draws, P)`` with at least 4 draws."""
    trace = torch.as_tensor(trace)
    if trace.dim() != 3 or trace.shape[1] < MIN_DRAWS:
        raise ValueError(f"trace must have shape (chains, draws >= {MIN_DRAWS}, P), got {tuple(trace.shape)}")
    if trace.shape[-1] > num_coords:
        trace = trace[..., pick_coordinates(trace.shape[-1], num_coords, seed)]
    trace = trace.double()
    trace = trace[..., trace.std(dim=(0, 1)) > 0]
    if trace.shape[-1] == 0:
        raise ValueError("no coordinate of the trace moves: the mixing summary is undefined")
    within = torch.stack([torch.as_tensor(ess_bulk(chain[None])) for chain in trace]).mean(0)
    return {
        "ess_median": float(torch.as_tensor(ess_bulk(trace)).median()),
        "ess_within_median": float(within.median()),
        "iac_median": float(torch.as_tensor(integrated_autocorrelation_time(trace)).median()),
        "draws_per_chain": int(trace.shape[1]),
        "coords": int(trace.shape[-1]),
    }
