"""Convergence diagnostics on processes with known answers (iid normals, AR(1) chains)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.signal import lfilter

from lit_bayes.diagnostics import (
    ess_bulk,
    ess_tail,
    integrated_autocorrelation_time,
    random_projections,
    split_rhat,
    summarize,
)


def ar1(seed: int, phi: float, chains: int, draws: int, start=None) -> np.ndarray:
    """Chains of x_t = phi x_{t-1} + e_t, e_t ~ N(0, 1), started at ``start`` or stationary."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=(chains, draws))
    x0 = rng.normal(size=chains) / np.sqrt(1 - phi**2) if start is None else np.asarray(start, dtype=float)
    return lfilter([1.0], [1.0, -phi], noise, axis=1, zi=(phi * x0)[:, None])[0]


def iid(seed: int, chains: int = 4, draws: int = 5000) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(chains, draws))


def test_rhat_near_one_for_iid_chains():
    assert 0.99 < split_rhat(iid(0)) < 1.01


def test_single_chain_rhat_compares_its_halves():
    """One chain is split into its first and second half (an odd last draw left out): near 1 for iid
    draws, far above 1 for a random walk that drifts."""
    chain = iid(3, chains=1, draws=5001)
    assert split_rhat(chain) == split_rhat(np.stack([chain[0, :2500], chain[0, 2500:5000]]))
    assert 0.99 < split_rhat(chain) < 1.01
    assert split_rhat(np.cumsum(iid(4, chains=1, draws=5000), axis=1)) > 1.2


def test_rhat_near_one_for_stationary_ar1_chains():
    assert 0.99 < split_rhat(ar1(1, phi=0.9, chains=4, draws=20000)) < 1.01


def test_rhat_flags_chains_started_far_apart_and_stopped_early():
    trace = ar1(2, phi=0.99, chains=4, draws=200, start=[20.0, 20.0, -20.0, -20.0])
    assert split_rhat(trace) > 1.1


def test_ess_of_iid_draws_is_the_number_of_draws():
    trace = iid(3)
    assert ess_bulk(trace) == pytest.approx(trace.size, rel=0.15)
    assert ess_tail(trace) == pytest.approx(trace.size, rel=0.15)
    assert integrated_autocorrelation_time(trace) == pytest.approx(1.0, rel=0.15)


def test_iat_of_ar1_matches_theory():
    phi = 0.9
    trace = ar1(4, phi=phi, chains=8, draws=50000)
    assert integrated_autocorrelation_time(trace) == pytest.approx((1 + phi) / (1 - phi), rel=0.15)


def test_multi_column_and_torch_traces_match_scalar_numpy_results():
    trace = np.stack([iid(5), ar1(6, phi=0.5, chains=4, draws=5000)], axis=-1)
    for diagnostic in (split_rhat, ess_bulk, ess_tail, integrated_autocorrelation_time):
        columns = diagnostic(torch.from_numpy(trace))
        assert isinstance(columns, np.ndarray) and columns.shape == (2,)
        scalars = [diagnostic(trace[..., i]) for i in range(2)]
        assert all(isinstance(s, float) for s in scalars)
        np.testing.assert_allclose(columns, scalars)


def test_random_projections_are_deterministic_unit_directions():
    num_params, num_projections = 50, 6
    basis = torch.eye(num_params).unsqueeze(0)  # one chain whose draws are the unit vectors
    directions = random_projections(basis, num_projections, seed=7)[0]
    assert directions.shape == (num_params, num_projections)
    assert directions.dtype == torch.float32
    torch.testing.assert_close(directions.norm(dim=0), torch.ones(num_projections))
    torch.testing.assert_close(random_projections(basis, num_projections, seed=7)[0], directions)
    assert not torch.allclose(random_projections(basis, num_projections, seed=8)[0], directions)

    params = torch.randn(3, 20, num_params, generator=torch.Generator().manual_seed(0))
    projected = random_projections(params, num_projections, seed=7)
    assert projected.shape == (3, 20, num_projections)
    torch.testing.assert_close(projected, params @ directions)


def test_summarize_reports_every_column_and_the_extremes():
    good = iid(7, draws=200)
    bad = ar1(8, phi=0.99, chains=4, draws=200, start=[20.0, 20.0, -20.0, -20.0])
    summary = summarize({"loglik": torch.from_numpy(good), "proj": np.stack([good, bad], axis=-1)})
    names = ["loglik", "proj_0", "proj_1"]
    assert set(summary) == {f"{d}/{n}" for d in ("rhat", "ess_bulk", "ess_tail", "iat") for n in names} | {
        "rhat_max",
        "ess_bulk_min",
    }
    assert summary["rhat/loglik"] == pytest.approx(split_rhat(good))
    assert summary["iat/proj_1"] == pytest.approx(integrated_autocorrelation_time(bad))
    assert summary["rhat_max"] == summary["rhat/proj_1"] > 1.1
    assert summary["ess_bulk_min"] == summary["ess_bulk/proj_1"] < 100
    assert all(isinstance(v, float) for v in summary.values())


@pytest.mark.parametrize(
    ("function", "trace", "message"),
    [
        (split_rhat, np.zeros((1, 7)), r"trace of one chain needs at least 8 draws for its split R-hat, got 7"),
        (ess_bulk, np.zeros((2, 3)), r"trace needs at least 4 draws per chain, got 3"),
        (ess_tail, np.zeros(100), r"trace must have shape \(chains, draws\) .* got 1 dimension"),
        (integrated_autocorrelation_time, np.zeros((2, 10, 1, 1)), r"got 4 dimension\(s\)"),
        (split_rhat, np.full((2, 10), np.nan), r"trace contains NaN or inf"),
        (integrated_autocorrelation_time, torch.tensor([[0.0, 1.0, float("inf"), 2.0]]), r"contains NaN or inf"),
    ],
)
def test_invalid_traces_raise(function, trace, message):
    with pytest.raises(ValueError, match=message):
        function(trace)


def test_summarize_errors_name_the_trace():
    with pytest.raises(ValueError, match=r"traces is empty"):
        summarize({})
    with pytest.raises(ValueError, match=r"traces\['loglik'\] of one chain needs at least 8 draws"):
        summarize({"loglik": iid(0, chains=1, draws=7)})
    with pytest.raises(ValueError, match=r"traces\['proj'\] contains NaN or inf"):
        summarize({"loglik": iid(0), "proj": np.full((2, 10, 3), np.nan)})


def test_random_projections_reject_bad_arguments():
    with pytest.raises(ValueError, match=r"flat_params must have shape \(chains, draws, num_params\), got 2"):
        random_projections(torch.zeros(2, 10), 3, seed=0)
    with pytest.raises(ValueError, match=r"num_projections must be at least 1, got 0"):
        random_projections(torch.zeros(2, 10, 5), 0, seed=0)
