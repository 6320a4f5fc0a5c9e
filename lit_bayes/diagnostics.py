"""Convergence diagnostics for traces of one or several chains.

A trace is an array of shape ``(chains, draws)`` (one scalar quantity) or
``(chains, draws, k)`` (k quantities), given as a torch tensor or a numpy array.
Diagnostics of a 2-D trace are floats, those of a 3-D trace numpy arrays of shape ``(k,)``.
The R-hat of a single chain compares its two halves (its stationarity, not agreement between chains).

R-hat and ESS are the rank-normalised diagnostics of Vehtari, Gelman, Simpson, Carpenter
and Bürkner (2021), "Rank-normalization, folding, and localization: an improved R-hat for
assessing convergence of MCMC", Bayesian Analysis 16(2), computed by arviz-stats. The
integrated autocorrelation time follows Sokal (1997), "Monte Carlo methods in statistical
mechanics: foundations and new algorithms", as used by Goodman & Weare (2010).

A chain with a constant trace has no defined autocorrelation: its IAT is NaN, and so is the
R-hat of a trace constant across all chains (then propagated into ``rhat_max`` of
:func:`summarize`), while arviz-stats reports the ESS of such a trace as the number of draws.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from arviz_stats.base import array_stats
from torch import Tensor

__all__ = [
    "ess_bulk",
    "ess_tail",
    "integrated_autocorrelation_time",
    "min_draws",
    "projection_directions",
    "random_projections",
    "split_rhat",
    "summarize",
]

Trace = Tensor | np.ndarray
Result = float | np.ndarray

MIN_DRAWS = 4
SOKAL_WINDOW_C = 5.0
TAIL_PROB = 0.05


def min_draws(chains: int) -> int:
    """Draws per chain a trace of ``chains`` chains needs for all of :func:`summarize`'s diagnostics:
    ``MIN_DRAWS``, and twice that for one chain, whose split R-hat takes its two halves as two chains."""
    return MIN_DRAWS if chains > 1 else 2 * MIN_DRAWS


def _check_one_chain(array: np.ndarray, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` if ``array`` is one chain too short for its split R-hat."""
    if array.shape[0] == 1 and array.shape[1] < min_draws(1):
        raise ValueError(f"{name} of one chain needs at least {min_draws(1)} draws for its split R-hat, "
                         f"got {array.shape[1]}")


def _as_array(trace: Trace, name: str = "trace") -> np.ndarray:
    """Validate a trace and return it as a float64 numpy array of shape (chains, draws[, k])."""
    array = trace.detach().cpu().numpy() if isinstance(trace, Tensor) else np.asarray(trace)
    if array.ndim not in (2, 3):
        raise ValueError(
            f"{name} must have shape (chains, draws) or (chains, draws, k), "
            f"got {array.ndim} dimension(s) with shape {tuple(array.shape)}"
        )
    chains, draws = array.shape[:2]
    if chains < 1:
        raise ValueError(f"{name} needs at least one chain, got 0")
    if draws < MIN_DRAWS:
        raise ValueError(f"{name} needs at least {MIN_DRAWS} draws per chain, got {draws}")
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or inf values")
    return array


def _result(values: np.ndarray) -> Result:
    """A float for a scalar result, a float64 array of shape (k,) otherwise."""
    values = np.asarray(values, dtype=np.float64)
    return float(values) if values.ndim == 0 else values


def split_rhat(trace: Trace) -> Result:
    """Rank-normalised split R-hat (Vehtari et al. 2021), via arviz-stats.

    Each chain is split into halves; the draws of all half-chains are replaced by the
    normal scores of their pooled ranks, z = Φ^{-1}((r - 3/8) / (S + 1/4)), and the classic
    potential scale reduction sqrt(((n - 1)/n · W + B/n) / W) is computed from the
    within-chain (W) and between-chain (B) variances of z. The reported value is the
    maximum of that "bulk" R-hat and the same quantity for the folded draws |θ - median θ|
    (the "tail" R-hat). Values below 1.01 indicate mixing. A single chain (at least 8 draws) is
    taken as two, its first and second half, so that its four quarters are compared: a chain still
    drifting has an R-hat well above 1, though one chain cannot show that it is in the only mode.
    """
    array = _as_array(trace)
    if array.shape[0] == 1:
        _check_one_chain(array, "trace")
        half = array.shape[1] // 2  # its first and second half as two chains (an odd last draw left out)
        array = np.concatenate([array[:, :half], array[:, half:2 * half]])
    return _result(array_stats.rhat(array, chain_axis=0, draw_axis=1, method="rank"))


def ess_bulk(trace: Trace) -> Result:
    """Bulk effective sample size (Vehtari et al. 2021), via arviz-stats.

    The effective sample size S / τ of the rank-normalised split chains, where τ is
    estimated from the multi-chain autocorrelations truncated by Geyer's initial
    monotone sequence. It measures the efficiency for the centre of the distribution.
    """
    array = _as_array(trace)
    return _result(array_stats.ess(array, chain_axis=0, draw_axis=1, method="bulk"))


def ess_tail(trace: Trace) -> Result:
    """Tail effective sample size (Vehtari et al. 2021), via arviz-stats.

    The minimum of the effective sample sizes of the indicator functions I(θ ≤ q_0.05)
    and I(θ ≤ q_0.95) over the split chains: the efficiency for the 5% and 95% quantiles.
    """
    array = _as_array(trace)
    return _result(array_stats.ess(array, chain_axis=0, draw_axis=1, method="tail", prob=TAIL_PROB))


def integrated_autocorrelation_time(trace: Trace) -> Result:
    """Integrated autocorrelation time τ with Sokal's automatic window (Sokal 1997).

    For each chain of N draws the autocovariance is estimated by FFT with the standard
    biased normalisation c(t) = 1/N Σ_{s=1}^{N-t} (x_s - x̄)(x_{s+t} - x̄), which Sokal
    recommends over the 1/(N - t) version for its smaller mean squared error, and turned
    into the autocorrelation ρ(t) = c(t) / c(0). The autocorrelation functions are
    averaged over chains (as in Goodman & Weare 2010 / emcee), then summed up to a window M:

        τ(M) = 1 + 2 Σ_{t=1}^{M} ρ(t),

    taking the smallest M with M ≥ c·τ(M), c = 5 (the last lag N - 1 if there is none).
    The effective number of independent draws is then about chains · N / τ.
    """
    array = _as_array(trace)
    x = array if array.ndim == 3 else array[..., None]
    draws = x.shape[1]
    x = x - x.mean(axis=1, keepdims=True)
    spectrum = np.fft.rfft(x, n=2 * draws, axis=1)
    autocov = np.fft.irfft(spectrum * spectrum.conj(), axis=1)[:, :draws] / draws
    if (autocov[:, 0] == 0).any():
        raise ValueError("trace has a chain that never moves (zero variance): its autocorrelation time is undefined")
    rho = (autocov / autocov[:, :1]).mean(axis=0)
    taus = 2.0 * np.cumsum(rho, axis=0) - 1.0
    in_window = np.arange(draws)[:, None] >= SOKAL_WINDOW_C * taus
    window = np.where(in_window.any(axis=0), in_window.argmax(axis=0), draws - 1)
    tau = taus[window, np.arange(taus.shape[1])]
    return _result(tau if array.ndim == 3 else tau[0])


def random_projections(flat_params: Trace, num_projections: int, seed: int = 0) -> Tensor:
    """Project parameter traces onto fixed random unit directions.

    ``flat_params`` has shape ``(chains, draws, num_params)``; the result, of shape
    ``(chains, draws, num_projections)``, holds the scalar traces ⟨θ, u_j⟩ for directions
    u_j drawn uniformly on the unit sphere (normalised standard normals) from a
    ``torch.Generator`` seeded with ``seed``. The directions depend only on ``seed`` and
    ``num_params``, so the same directions are used at every call and on every device,
    which lets high-dimensional chains be monitored with the scalar diagnostics above.
    """
    params = torch.as_tensor(flat_params)
    if params.dim() != 3:
        raise ValueError(
            "flat_params must have shape (chains, draws, num_params), "
            f"got {params.dim()} dimension(s) with shape {tuple(params.shape)}"
        )
    directions = projection_directions(params.shape[-1], num_projections, seed)
    return params @ directions.to(device=params.device, dtype=params.dtype)


def projection_directions(num_params: int, num_projections: int, seed: int = 0) -> Tensor:
    """The directions of :func:`random_projections`: ``(num_params, num_projections)`` float64 unit
    columns, normalised standard normals from a generator seeded with ``seed``. A caller that projects
    at every step computes them once (``num_params x num_projections`` normals a step would cost more
    than the projection itself)."""
    if num_projections < 1:
        raise ValueError(f"num_projections must be at least 1, got {num_projections}")
    generator = torch.Generator().manual_seed(seed)
    directions = torch.randn(num_params, num_projections, generator=generator, dtype=torch.float64)
    return directions / directions.norm(dim=0, keepdim=True)


def summarize(traces: Mapping[str, Trace]) -> dict[str, float]:
    """R-hat, bulk and tail ESS and IAT of every named trace, plus the worst R-hat and ESS.

    A 2-D trace ``name`` gives the keys ``rhat/name``, ``ess_bulk/name``, ``ess_tail/name``
    and ``iat/name``; each column i of a 3-D trace is reported as ``name_i``. ``rhat_max``
    and ``ess_bulk_min`` are the maximum R-hat and minimum bulk ESS over all of them.
    """
    if not traces:
        raise ValueError("traces is empty: pass at least one named trace")
    diagnostics = {
        "rhat": split_rhat,
        "ess_bulk": ess_bulk,
        "ess_tail": ess_tail,
        "iat": integrated_autocorrelation_time,
    }
    summary: dict[str, float] = {}
    for name, trace in traces.items():
        array = _as_array(trace, name=f"traces[{name!r}]")
        _check_one_chain(array, f"traces[{name!r}]")  # before split_rhat, so that the error names the trace
        columns = [name] if array.ndim == 2 else [f"{name}_{i}" for i in range(array.shape[2])]
        for key, diagnostic in diagnostics.items():
            values = np.atleast_1d(diagnostic(array))
            summary.update({f"{key}/{column}": float(v) for column, v in zip(columns, values)})
    summary["rhat_max"] = float(np.max([v for k, v in summary.items() if k.startswith("rhat/")]))
    summary["ess_bulk_min"] = float(np.min([v for k, v in summary.items() if k.startswith("ess_bulk/")]))
    return summary
