"""Resampling of weighted particles from their log-weights.

Feynman-Kac spec §3 (Algorithm 3, "resample") and pitfalls §8.1-8.2: each scheme maps
normalised log-weights ``log w`` (J,) to J ancestor indices whose expected copy counts are
``J w_j``. Cumulative sums are taken in float64 and indices clipped to J - 1 so rounding
can never select a particle past the end.
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

__all__ = ["RESAMPLERS", "resample"]


@functools.lru_cache(maxsize=16)
def _indices(num: int, device: torch.device) -> Tensor:
    """``arange(num)`` in float64 on ``device``, made once (an OHSMC step resamples every step, issue 26); read, never
    written. Float64 like the uniforms it is added to (the same sums as the integers', without a converting loop)."""
    return torch.arange(num, device=device, dtype=torch.float64)


def _inverse_cdf(log_weights: Tensor, uniforms: Tensor) -> Tensor:
    """Indices ``i`` with ``cumsum(w)[i-1] <= u < cumsum(w)[i]`` for sorted float64 ``u`` in [0, 1)."""
    cdf = torch.softmax(log_weights, dim=-1, dtype=torch.float64).cumsum_(dim=-1)
    index = torch.searchsorted(cdf, uniforms, right=True)
    return index.clamp_(max=log_weights.shape[-1] - 1)


def _multinomial(log_weights: Tensor, generator: torch.Generator) -> Tensor:
    """J independent draws from Categorical(w)."""
    num = log_weights.shape[-1]
    uniforms = torch.rand(num, generator=generator, device=log_weights.device, dtype=torch.float64)
    return _inverse_cdf(log_weights, uniforms.sort().values)


def _stratified(log_weights: Tensor, generator: torch.Generator) -> Tensor:
    """One uniform in each stratum [(j)/J, (j+1)/J): u_j = (j + U_j) / J (the paper's choice)."""
    num = log_weights.shape[-1]
    offsets = torch.rand(num, generator=generator, device=log_weights.device, dtype=torch.float64)
    return _inverse_cdf(log_weights, offsets.add_(_indices(num, log_weights.device)).div_(num))


def _systematic(log_weights: Tensor, generator: torch.Generator) -> Tensor:
    """One shared offset: u_j = (j + U) / J."""
    num = log_weights.shape[-1]
    offset = torch.rand(1, generator=generator, device=log_weights.device, dtype=torch.float64)
    return _inverse_cdf(log_weights, (_indices(num, log_weights.device) + offset) / num)


RESAMPLERS = {"multinomial": _multinomial, "stratified": _stratified, "systematic": _systematic}


def resample(log_weights: Tensor, scheme: str, generator: torch.Generator) -> Tensor:
    """Ancestor indices ``(J,)`` drawn with ``scheme`` (one of :data:`RESAMPLERS`)."""
    if scheme not in RESAMPLERS:
        raise ValueError(f"resampling must be one of {sorted(RESAMPLERS)}, got {scheme!r}")
    return RESAMPLERS[scheme](log_weights, generator)
