"""SWAG: its moments and deviations against the snapshots, its draws against its Gaussian, bad arguments."""
import pytest
import torch

from lit_bayes import SWAG, Gaussian
from lit_bayes.models import MLP


def _swag(**options):
    torch.manual_seed(0)
    swag = SWAG(MLP([2, 3, 1]), Gaussian(1.0), num_data=10, **options).double()  # 13 parameters
    swag.setup("fit")
    return swag


def _snapshots(count, size, seed=0):
    """Correlated snapshots: a random walk, as an optimiser's iterates are."""
    gen = torch.Generator().manual_seed(seed)
    return torch.cumsum(0.1 * torch.randn(count, size, generator=gen, dtype=torch.float64), dim=0) + 1.0


def test_moments_and_low_rank_deviations_follow_the_snapshots():
    swag = _swag(max_rank=5)
    thetas = _snapshots(12, 13)
    for theta in thetas:
        swag.add_snapshot(theta)
    mean = thetas.mean(0)
    assert int(swag.snapshots) == 12
    torch.testing.assert_close(swag.mean, mean)
    torch.testing.assert_close(swag.square_mean, thetas.square().mean(0))
    # the deviation of snapshot i is taken from the running mean after it; the ring keeps the last 5
    running = torch.cumsum(thetas, 0) / torch.arange(1, 13, dtype=torch.float64)[:, None]
    last = (thetas - running)[-5:]
    assert torch.allclose(torch.sort(swag.deviations, 0).values, torch.sort(last, 0).values)
    diagonal = torch.diag((thetas.square().mean(0) - mean.square()))
    torch.testing.assert_close(swag.covariance(), diagonal / 2 + last.T @ last / (2 * 4))
    swag.variant = "diagonal"
    torch.testing.assert_close(swag.covariance(), diagonal)


@pytest.mark.parametrize("variant", ["low_rank", "diagonal"])
def test_draws_follow_the_swag_gaussian_and_repeat(variant):
    swag = _swag(max_rank=4, num_samples=40_000, variant=variant)
    for theta in _snapshots(9, 13, seed=1):
        swag.add_snapshot(theta)
    draws, log_weights = swag.current_samples()
    again, _ = swag.current_samples()
    flat = torch.cat([d.flatten(1) for d in draws.values()], dim=1)  # (S, 13) in the chains' order
    assert flat.shape == (40_000, 13) and log_weights.shape == (40_000,)
    for name, value in draws.items():
        assert torch.equal(value, again[name])  # the same Gaussian gives the same predictive
    cov = swag.covariance()
    se_mean = (torch.diagonal(cov) / 40_000).sqrt()
    assert ((flat.mean(0) - swag.mean).abs() < 4.5 * se_mean).all()
    se_cov = ((torch.diagonal(cov)[:, None] * torch.diagonal(cov)[None, :] + cov**2) / 40_000).sqrt()
    assert ((torch.cov(flat.T) - cov).abs() < 4.5 * se_cov + 1e-12).all()


def test_before_two_snapshots_predictions_use_the_current_parameters():
    swag = _swag()
    draws, _ = swag.current_samples()
    assert all(value.shape[0] == 1 for value in draws.values())
    swag.add_snapshot(_snapshots(1, 13)[0])
    draws, _ = swag.current_samples()
    assert all(value.shape[0] == 1 for value in draws.values())


def test_swag_rejects_bad_arguments():
    for name, value in (("max_rank", 1), ("num_samples", 0), ("variant", "full"), ("lr", 0.0)):
        with pytest.raises(ValueError, match=name):
            SWAG(MLP([2, 3, 1]), Gaussian(1.0), **{name: value})
