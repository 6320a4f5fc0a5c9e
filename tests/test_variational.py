"""MeanFieldVB: the mean-field optimum of a linear-Gaussian model, its fixed predictive draws, bad arguments."""
import math

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lit_bayes import Gaussian, MeanFieldVB
from lit_bayes.models import MLP, PartialBNN, PartialMLP
from tests.test_feynman_kac import LinearOffset


def _correlated_problem(n=40, noise_std=0.5):
    """Inputs whose two features correlate ~0.9, so the mean-field variances 1 / Lambda_ii lie far below the
    posterior's marginal variances."""
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(n, 2, generator=gen, dtype=torch.float64)
    a = torch.stack([z[:, 0], 0.9 * z[:, 0] + 0.44 * z[:, 1]], dim=1)
    y = a @ torch.tensor([1.0, -0.5], dtype=torch.float64) + 0.3 + noise_std * torch.randn(n, generator=gen,
                                                                                            dtype=torch.float64)
    return a, y


def _mean_field_optimum(a, y, noise_var):
    """The mean-field Gaussian optimum of y = a phi + psi + N(0, noise_var), phi ~ N(0, I), psi fitted: the means
    and psi solve the joint normal equations (a Gaussian posterior's mean-field means are its means), each
    variance is 1 / Lambda_ii (Lambda the posterior precision of phi); also the exact marginal variances."""
    n, d = a.shape
    precision = torch.eye(d, dtype=a.dtype) + a.T @ a / noise_var
    system = torch.zeros(d + 1, d + 1, dtype=a.dtype)
    system[:d, :d], system[d, d] = precision, n / noise_var
    system[:d, d] = system[d, :d] = a.sum(0) / noise_var
    solution = torch.linalg.solve(system, torch.cat([a.T @ y, y.sum().view(1)]) / noise_var)
    return solution[:d], solution[d], 1 / torch.diagonal(precision), torch.diagonal(torch.linalg.inv(precision))


def test_mean_field_vb_finds_the_mean_field_optimum_of_a_linear_gaussian_model():
    a, y = _correlated_problem()
    mean, psi, mean_field_var, marginal_var = _mean_field_optimum(a, y, 0.25)
    assert (marginal_var.log() - mean_field_var.log()).min() > 1.0  # the two answers are far apart here
    torch.manual_seed(0)
    vb = MeanFieldVB(PartialBNN(LinearOffset(2), ["phi"]), Gaussian(0.5), num_train_samples=100,
                     init_log_variance=0.0, lr=0.05, num_data=len(y), seed=1)
    trainer = L.Trainer(max_epochs=1000, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, precision="64-true")
    trainer.fit(vb, train_dataloaders=DataLoader(TensorDataset(a, y), batch_size=len(y)))
    m = vb.chains.as_dict()["net.phi"][0].detach()
    log_v = vb.log_variances.as_dict()["net.phi"][0].detach()
    # from m = 0, log v = 0: the means within a tenth of a posterior std, the log-variances within 0.3
    assert ((m - mean).abs() / mean_field_var.sqrt()).max() < 0.1, (m, mean)
    fitted_psi = float(vb.model.net.psi.detach())
    assert abs(fitted_psi - float(psi)) < 0.1 * float(mean_field_var.sqrt().min()), (fitted_psi, psi)
    assert (log_v - mean_field_var.log()).abs().max() < 0.3, (log_v, mean_field_var.log())


def test_predictive_draws_are_num_samples_fixed_draws_of_q():
    torch.manual_seed(0)
    vb = MeanFieldVB(PartialMLP([2, 8, 3, 1], 1), Gaussian(1.0), num_samples=4000, init_log_variance=-1.0, seed=3)
    with torch.no_grad():
        vb.chains.as_dict()["net.2.weight"].add_(0.5)
    draws, log_weights = vb.current_samples()
    again, _ = vb.current_samples()
    assert set(draws) == {"net.2.weight", "net.2.bias"}
    assert draws["net.2.weight"].shape == (4000, 3, 8)
    assert torch.allclose(log_weights.exp().sum(), torch.tensor(1.0)) and (log_weights == log_weights[0]).all()
    for name, value in draws.items():
        assert torch.equal(value, again[name])  # the same q gives the same predictive
        mean = vb.chains.as_dict()[name][0]
        assert (value.mean(0) - mean).abs().max() < 4.5 * math.exp(-0.5) / 4000**0.5  # std e^-1/2
        assert (value.var(0).log() + 1.0).abs().max() < 0.1  # log var within 4.5 standard errors (0.022)
    assert len(vb.chains.as_dict()) == 2 and vb.chains.num_chains == 1


def test_mean_field_vb_rejects_bad_arguments():
    with pytest.raises(ValueError, match="PartialBNN"):
        MeanFieldVB(MLP([2, 3, 1]), Gaussian(1.0))
    with pytest.raises(ValueError, match="psi empty"):
        MeanFieldVB(PartialBNN(nn.Linear(2, 1), ""), Gaussian(1.0))
    for name, value in (("num_train_samples", 0), ("num_samples", 0), ("init_log_variance", float("nan")),
                        ("lr", -1.0)):
        with pytest.raises(ValueError, match=name):
            MeanFieldVB(PartialMLP([2, 4, 3, 1], 1), Gaussian(1.0), **{name: value})
