"""The crescent toy (Feynman-Kac paper Eq. 8, spec §6.1): model, data, brute-force reference, recipe."""
import json
import math
from pathlib import Path

import pytest
import torch

from lit_bayes.cli import main
from lit_bayes.data.crescent import CrescentData
from lit_bayes.models import PartialBNN
from lit_bayes.models.crescent import Crescent, brute_force_mle, grid_log_joint, grid_posterior

RECIPES = Path(__file__).resolve().parents[1] / "recipes" / "feynman_kac"
PHI1 = torch.linspace(-6.0, 6.0, 481, dtype=torch.float64)
PHI2 = torch.linspace(-8.0, 4.0, 601, dtype=torch.float64)


def _data(seed=0):
    data = CrescentData(seed=seed)
    data.setup()
    return data.train_data.tensors[1].double()


def _conditional_phi2(y, psi, phi1):
    """Closed form: given phi_1, the likelihood is Gaussian in phi_2 (mean linear in phi_2), so
    with the N(0, 1) prior p(phi_2 | phi_1, y; psi) = N(mu, s^2), 1/s^2 = 1 + N/psi^2,
    mu = s^2 (N/psi) (ybar - (phi_1^2 + psi^2)/2); and integrating phi_2 out,
    p(y | phi_1; psi) = (2 pi)^(-N/2) e^(-S/2) sqrt(2 pi psi^2/N) N(a; 0, 1 + psi^2/N),
    a = psi (ybar - (phi_1^2 + psi^2)/2), S = sum (y - ybar)^2."""
    n, ybar = y.numel(), y.mean()
    c = 0.5 * (phi1**2 + psi**2)
    var = 1.0 / (1.0 + n / psi**2)
    mu = var * (n / psi) * (ybar - c)
    a = psi * (ybar - c)
    scatter = ((y - ybar) ** 2).sum()
    log_marginal = (-0.5 * n * math.log(2 * math.pi) - 0.5 * scatter + 0.5 * math.log(2 * math.pi * psi**2 / n)
                    - 0.5 * a**2 / (1 + psi**2 / n) - 0.5 * math.log(2 * math.pi * (1 + psi**2 / n)))
    return mu, var, log_marginal


def _semi_analytic_log_evidence(y, psi, prior_var1=2.0):
    """log p(y; psi) by 1-d quadrature over phi_1 of the closed-form phi_2 integral."""
    phi1 = torch.linspace(-10.0, 10.0, 20001, dtype=torch.float64)
    _, _, log_marginal = _conditional_phi2(y, psi, phi1)
    log_prior = -0.5 * phi1**2 / prior_var1 - 0.5 * math.log(2 * math.pi * prior_var1)
    return float((log_marginal + log_prior).logsumexp(0)) + math.log(float(phi1[1] - phi1[0]))


def test_model_mean_and_particle_forward():
    net = Crescent(psi=0.5, phi=(1.0, -0.25))
    out = net(torch.zeros(4, 1))
    assert out.shape == (4, 1) and torch.allclose(out, torch.full((4, 1), -0.25 / 0.5 + 0.5 * (1.0 + 0.25)))
    pbnn = PartialBNN(net, ["phi1", "phi2"])
    phi = {"phi1": torch.tensor([0.0, 2.0]), "phi2": torch.tensor([1.0, 0.0])}
    out = pbnn.particle_forward(phi, torch.zeros(3, 1))
    assert out.shape == (2, 3, 1)
    assert torch.allclose(out[:, 0, 0], torch.tensor([1.0 / 0.5 + 0.125, 2.0 + 0.125]))


def test_data_are_half_plus_noise_and_reproducible():
    data = CrescentData(num_train=2000, num_test=5, seed=3)
    data.setup()
    x, y = data.train_data.tensors
    assert x.shape == (2000, 1) and (x == 0).all() and len(data.val_data) == 0 and len(data.test_data) == 5
    assert abs(float(y.mean()) - 0.5) < 4 / math.sqrt(2000) and abs(float(y.std()) - 1.0) < 0.1
    again = CrescentData(num_train=2000, num_test=5, seed=3)
    again.setup()
    assert torch.equal(again.train_data.tensors[1], y)


def test_grid_density_integrates_to_one_and_matches_the_closed_form():
    y = _data()
    psi = 1.1
    density, log_evidence = grid_posterior(y, psi, PHI1, PHI2)
    d1, d2 = float(PHI1[1] - PHI1[0]), float(PHI2[1] - PHI2[0])
    assert abs(float(density.sum()) * d1 * d2 - 1.0) < 1e-12
    # the grid evidence equals the semi-analytic one
    assert abs(log_evidence - _semi_analytic_log_evidence(y, psi)) < 1e-8
    # each phi_2-slice, normalised, is the Gaussian conditional p(phi_2 | phi_1, y; psi)
    for i in (180, 240, 300):
        row = density[i] / (density[i].sum() * d2)
        mu, var, _ = _conditional_phi2(y, psi, PHI1[i])
        exact = torch.exp(-0.5 * (PHI2 - mu) ** 2 / var) / math.sqrt(2 * math.pi * var)
        assert float((row - exact).abs().max()) < 1e-8 * float(exact.max()), i
    # and the phi_1-marginal is prior x closed-form p(y | phi_1; psi), normalised
    _, _, log_marginal = _conditional_phi2(y, psi, PHI1)
    log_m1 = log_marginal - 0.25 * PHI1**2 - 0.5 * math.log(4 * math.pi) - log_evidence
    assert torch.allclose(density.sum(1) * d2, log_m1.exp(), atol=1e-10)


def test_brute_force_mle_maximises_the_evidence():
    y = _data()
    grid = torch.arange(0.9, 1.3, 0.02, dtype=torch.float64)
    psi, evidence = brute_force_mle(y, grid, PHI1, PHI2)
    semi = torch.tensor([_semi_analytic_log_evidence(y, float(p)) for p in grid], dtype=torch.float64)
    assert torch.allclose(evidence, semi, atol=1e-8)
    assert 0.9 < psi < 1.28  # an interior maximum
    # the evidence is even in psi (phi_2 -> -phi_2 under a symmetric prior; a symmetric grid)
    phi2 = torch.linspace(-8.0, 8.0, 801, dtype=torch.float64)
    assert abs(grid_posterior(y, -psi, PHI1, phi2)[1] - grid_posterior(y, psi, PHI1, phi2)[1]) < 1e-9


def test_prior_is_the_papers_and_the_quirk_differs():
    prior = Crescent.prior()
    assert prior.variance_of("net.phi1") == 2.0 and prior.variance_of("net.phi2") == 1.0
    y = _data()
    paper = grid_log_joint(y, 1.0, PHI1, PHI2)
    quirk = grid_log_joint(y, 1.0, PHI1, PHI2, prior_variances=(4.0, 1.0))
    diff = quirk - paper  # log N(phi_1; 0, 4) - log N(phi_1; 0, 2)
    expected = 0.5 * PHI1**2 * (1 / 2 - 1 / 4) - 0.5 * math.log(2.0)
    assert torch.allclose(diff, expected[:, None].expand_as(diff), atol=1e-10)


@pytest.mark.parametrize("make, name", [
    (lambda: Crescent(psi=0.0), "psi"),
    (lambda: Crescent(psi=float("nan")), "psi"),
    (lambda: Crescent(phi=(1.0,)), "phi"),
    (lambda: Crescent(phi=(0.0, float("inf"))), r"phi\[1\]"),
    (lambda: Crescent()(torch.tensor(1.0)), "x"),
    (lambda: Crescent.prior((2.0, -1.0)), "prior_variances"),
    (lambda: CrescentData(psi=0.0), "psi"),
    (lambda: CrescentData(phi=(0.0, 0.0, 0.0)), "phi"),
    (lambda: CrescentData(noise_std=0.0), "noise_std"),
    (lambda: CrescentData(num_train=0), "num_train"),
    (lambda: CrescentData(batch_size=0), "batch_size"),
    (lambda: grid_posterior(torch.tensor([float("nan")]), 1.0, PHI1, PHI2), "y"),
    (lambda: grid_posterior(torch.zeros(3), 0.0, PHI1, PHI2), "psi"),
    (lambda: grid_posterior(torch.zeros(3), 1.0, PHI1.flip(0), PHI2), "phi1"),
    (lambda: grid_posterior(torch.zeros(3), 1.0, PHI1, PHI2[[0, 1, 5]]), "phi2"),
    (lambda: brute_force_mle(torch.zeros(3), torch.zeros(0), PHI1, PHI2), "psi_grid"),
])
def test_bad_inputs_raise_value_errors_naming_the_argument(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_ohsmc_recipe_runs_at_tiny_size(tmp_path):
    main(["fit", "-c", str(RECIPES / "crescent_ohsmc.yaml"), "--trainer.default_root_dir", str(tmp_path),
          "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3", "--model.init_args.num_particles", "50",
          "--trainer.enable_progress_bar", "false", "--wandb", "false"])
    (path,) = tmp_path.rglob("summary.json")
    summary = json.loads(path.read_text())
    assert summary["sampler"] == "OHSMC" and summary["dataset"] == "CrescentData" and summary["steps"] == 6
    assert math.isfinite(summary["metrics"]["train/log_evidence"]) and 0.9 < summary["metrics"]["test/nlpd"] < 5.0
    # the learning rate decays as 0.1 * 0.96^(step / 10) (the last step is 5 or, counted after
    # its optimiser update, 6)
    assert min(abs(summary["metrics"]["lr"] - 0.1 * 0.96 ** (k / 10)) for k in (5, 6)) < 1e-12
