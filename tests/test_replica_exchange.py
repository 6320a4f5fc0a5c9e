"""Replica exchange: the swap rule keeps the joint target (a discrete check), its minibatch correction is
unbiased, and on a posterior with two separated modes of unequal mass (known by quadrature) chains from prior
draws misweight the modes without exchange and recover the masses with it."""
import itertools
import math

import lightning as L
import pytest
import torch
from torch import nn

from lit_bayes import SGMCMC, Gaussian, GaussianPrior, LearnedScalePrior, ReplicaExchangeSGMCMC
from lit_bayes.callbacks import PosteriorSamples
from lit_bayes.data import ArrayDataModule
from lit_bayes.replica_exchange import (
    check_ladder, difference_variance, geometric_ladder, swap_log_acceptance, swap_pairs,
)

Z = 4.0  # tolerance in standard errors (fixed seeds: a pass is deterministic)


# ------------------------------------------------------------------ the rule
def test_ladders_and_the_even_odd_schedule():
    assert geometric_ladder(1, 10.0) == [1.0]
    ladder = geometric_ladder(4, 8.0)
    assert ladder == pytest.approx([1.0, 2.0, 4.0, 8.0])
    assert check_ladder([1.0, 1.5, 4.0]) == [1.0, 1.5, 4.0]
    for bad in ([2.0, 3.0], [1.0, 1.0], [1.0, 3.0, 2.0], [1.0, math.inf], []):
        with pytest.raises(ValueError, match="temperatures"):
            check_ladder(bad)
    with pytest.raises(ValueError, match="max_temperature"):
        geometric_ladder(3, 1.0)
    assert swap_pairs(0, 5) == [0, 2] and swap_pairs(1, 5) == [1, 3] and swap_pairs(2, 5) == [0, 2]
    assert swap_pairs(1, 2) == []


def _swap_transition(energy: torch.Tensor, ladder: torch.Tensor, round_index: int):
    """The joint states of K replicas on a discrete space, their target and the transition matrix of one swap
    round built from :func:`swap_log_acceptance`."""
    num_temperatures, size = len(ladder), len(energy)
    states = list(itertools.product(range(size), repeat=num_temperatures))
    index = {s: i for i, s in enumerate(states)}
    energies = energy[torch.tensor(states).T]  # (K, joint states)
    log_target = -(energies / ladder[:, None]).sum(0)
    target = (log_target - log_target.logsumexp(0)).exp()
    lower = swap_pairs(round_index, num_temperatures)
    accept = swap_log_acceptance(energies, ladder, lower).clamp(max=0).exp()  # (pairs, joint states)
    transition = torch.zeros(len(states), len(states), dtype=torch.float64)
    for i, state in enumerate(states):  # the pairs of a round are disjoint: they swap independently
        for decisions in itertools.product((False, True), repeat=len(lower)):
            new, probability = list(state), 1.0
            for row, (k, swap) in enumerate(zip(lower, decisions)):
                probability *= float(accept[row, i]) if swap else 1.0 - float(accept[row, i])
                if swap:
                    new[k], new[k + 1] = new[k + 1], new[k]
            transition[i, index[tuple(new)]] += probability
    return target, transition


def test_swap_rounds_satisfy_detailed_balance_on_a_discrete_target():
    energy = torch.tensor([0.0, 2.5, 0.7, 4.0], dtype=torch.float64)
    ladder = torch.tensor([1.0, 1.8, 3.5, 7.0], dtype=torch.float64)
    rounds = []
    for round_index in (0, 1):
        target, transition = _swap_transition(energy, ladder, round_index)
        flow = target[:, None] * transition
        assert torch.allclose(flow, flow.T, atol=1e-15), "pi(a) P(a, b) != pi(b) P(b, a)"
        assert torch.allclose(transition.sum(1), torch.ones_like(target))
        assert (transition.diagonal() < 1).any(), "the round never swaps"
        rounds.append(transition)
    both = rounds[0] @ rounds[1]
    assert torch.allclose(target @ both, target, atol=1e-15)  # the even/odd sweep keeps the target
    flow = target[:, None] * both
    assert not torch.allclose(flow, flow.T, atol=1e-6)  # and is not reversible (Okabe et al.'s schedule)


def test_the_minibatch_correction_is_unbiased():
    """exp(c D~ - c^2 s^2 / 2) has mean exp(c D) when D~ ~ N(D, s^2); the plug-in exp(c D~) does not."""
    gen = torch.Generator().manual_seed(0)
    ladder = torch.tensor([1.0, 2.0], dtype=torch.float64)  # c = 1 - 1/2
    difference, sd, draws = -3.0, 1.5, 400_000
    noisy = difference + sd * torch.randn(draws, generator=gen, dtype=torch.float64)
    energies = torch.stack([noisy, torch.zeros_like(noisy)])  # U(theta_0) - U(theta_1) = D~
    variance = torch.full((1, draws), sd**2, dtype=torch.float64)
    exact = math.exp(0.5 * difference)
    corrected = swap_log_acceptance(energies, ladder, [0], variance).exp()
    plug_in = swap_log_acceptance(energies, ladder, [0]).exp()
    se = float(corrected.std()) / math.sqrt(draws)
    assert abs(float(corrected.mean()) - exact) < Z * se
    assert float(plug_in.mean()) > exact * math.exp(0.5 * 0.25 * sd**2) * 0.99


def test_difference_variance_is_the_variance_of_the_minibatch_estimate():
    """Batches of 10 of 50 points drawn without replacement: the estimate sum_B d_i of the energy difference
    (d_i the points' differences of their energy terms, N/B times the negative log-likelihood) has the variance
    the function gives, on average over batches, and none on the full batch."""
    gen = torch.Generator().manual_seed(1)
    num, batch = 50, 10
    log_lik = torch.randn(2, 1, num, generator=gen, dtype=torch.float64) * torch.tensor([1.0, 0.5])[:, None, None]
    terms = -(num / batch) * log_lik
    population = terms[0, 0] - terms[1, 0]
    exact = batch * float(population.var()) * (1 - batch / num)
    picks = torch.stack([torch.randperm(num, generator=gen)[:batch] for _ in range(20_000)])
    estimates = population[picks].sum(1)
    assert float(estimates.var()) == pytest.approx(exact, rel=0.04)
    predicted = torch.stack([difference_variance(terms[..., p], [0], num)[0, 0] for p in picks[:4000]])
    assert float(predicted.mean()) == pytest.approx(exact, rel=0.04)
    assert float(difference_variance(terms, [0], num)) == 0.0


# ------------------------------------------------------------- the sampler
class Quadratic(nn.Module):
    """f(x) = (theta^2 + theta) x: with targets near 6 the posterior of theta has modes near 2 and -3, whose
    masses the prior N(0, 1) makes unequal (about 0.92 and 0.08), apart by a barrier of ~50 nats."""

    def __init__(self) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return (self.theta**2 + self.theta) * x


NOISE_SD = 2.0


def _targets() -> torch.Tensor:
    return 6.0 + torch.randn(10, generator=torch.Generator().manual_seed(0))


def _exact_mass_of_the_right_mode() -> float:
    """P(theta > -0.5) under the posterior, by quadrature on a fine grid."""
    theta = torch.linspace(-8, 8, 200_001, dtype=torch.float64)
    fitted = theta**2 + theta
    log_post = -((_targets().double()[:, None] - fitted) ** 2).sum(0) / (2 * NOISE_SD**2) - theta**2 / 2
    weights = (log_post - log_post.max()).exp()
    return float(weights[theta > -0.5].sum() / weights.sum())


def _run(sampler_cls, tmp_path, batch_size=None, steps=2_000, **options):
    x, y = torch.ones(10, 1), _targets()
    data = ArrayDataModule(task="regression", x_train=x, y_train=y, x_val=x[:2], y_val=y[:2], x_test=x[:2],
                           y_test=y[:2], standardize="none", batch_size=batch_size)
    sampler = sampler_cls(Quadratic(), Gaussian(noise_std=NOISE_SD), GaussianPrior(1.0), stepper="sgld",
                          step_size=2e-3, num_chains=200, burn_in=0.5, init="prior", seed=1, **options)
    store = PosteriorSamples(max_draws=steps)
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[store], default_root_dir=tmp_path)
    trainer.fit(sampler, datamodule=data)
    right = (store.trace()[..., 0] > -0.5).double().mean(1)  # each chain's share of draws in the right mode
    return sampler, trainer, right.mean(), right.std() / math.sqrt(len(right))  # chains are independent


EXCHANGE = dict(num_temperatures=6, max_temperature=30.0, swap_every=5)


@pytest.mark.slow
@pytest.mark.parametrize("swap_energy, batch_size", [("full_batch", None), ("minibatch", 5)])
def test_exchange_recovers_the_masses_of_separated_modes_that_plain_chains_misweigh(swap_energy, batch_size, tmp_path):
    exact = _exact_mass_of_the_right_mode()
    assert 0.85 < exact < 0.95
    _, _, plain, plain_se = _run(SGMCMC, tmp_path / "plain", batch_size)
    assert abs(plain - exact) > Z * plain_se, "without exchange the chains keep the masses of their starts"
    sampler, trainer, mass, se = _run(ReplicaExchangeSGMCMC, tmp_path / "exchange", batch_size,
                                      swap_energy=swap_energy, **EXCHANGE)
    assert abs(mass - exact) < Z * se, f"mass {float(mass):.4f} vs exact {exact:.4f} (se {float(se):.4f})"
    rates = sampler.swap_accepts / sampler.swap_attempts
    assert ((rates > 0.3) & (rates < 0.95)).all(), rates
    for k, rate in enumerate(rates):  # the rates are logged, hence in summary.json
        assert float(trainer.callback_metrics[f"exchange/rate_{k}"]) == pytest.approx(float(rate))


def test_only_the_cold_replicas_are_kept_and_the_hot_ones_move(tmp_path):
    sampler, _, _, _ = _run(ReplicaExchangeSGMCMC, tmp_path, steps=200, **EXCHANGE)
    assert sampler.chains.num_chains == 200 and len(sampler.replicas) == 5
    assert all(state.num_chains == 200 for state in sampler.replicas)
    with torch.no_grad():  # each replica samples its own tempered target: mean energy rises with the temperature
        energies = sampler.full_batch_energies(sampler.replica_parameters()).view(6, 200).mean(1)
    assert (energies.diff() > 0).all(), energies
    assert [group["step_scale"] for group in sampler.optimizers().optimizer.param_groups] == pytest.approx(
        geometric_ladder(6, 30.0))  # SGLD: eps tau_k
    (note,) = sampler.health_notes()
    assert note.startswith("replica exchange: swap rates between neighbouring temperatures")
    assert "num_temperatures" not in note  # every rate above the limit


def test_a_cut_ladder_is_named_in_the_health_notes():
    sampler = ReplicaExchangeSGMCMC(Quadratic(), Gaussian(1.0), GaussianPrior(1.0), num_temperatures=3)
    assert sampler.health_notes() == []  # no swap attempted
    sampler.swap_attempts.fill_(100.0)
    sampler.swap_accepts.copy_(torch.tensor([2.0, 40.0], dtype=torch.float64))
    (note,) = sampler.health_notes()
    assert "0.020 (1-3.16)" in note and "0.400 (3.16-10)" in note and "model.init_args.num_temperatures" in note


def test_minibatch_swaps_on_the_full_batch_are_the_exact_swaps(tmp_path):
    """With the batch the whole training set, Deng et al.'s variance is zero: the same run, bit for bit."""
    exact, _, _, _ = _run(ReplicaExchangeSGMCMC, tmp_path / "a", steps=100, swap_energy="full_batch", **EXCHANGE)
    estimated, _, _, _ = _run(ReplicaExchangeSGMCMC, tmp_path / "b", steps=100, swap_energy="minibatch", **EXCHANGE)
    assert exact.swap_accepts.sum() > 0
    assert torch.equal(exact.swap_accepts, estimated.swap_accepts)
    for a, b in zip(exact.chain_states(), estimated.chain_states()):
        assert torch.equal(a.flat(), b.flat())


@pytest.mark.parametrize("options, match", [
    ({"prior": LearnedScalePrior()}, "LearnedScalePrior"),
    ({"minibatch_scaling": "sum"}, "minibatch_scaling"),
    ({"temperatures": [1.0, 0.5]}, "temperatures"),
    ({"swap_every": 0}, "swap_every"),
    ({"swap_energy": "half"}, "swap_energy"),
    ({"stepper": "sghmc", "step_size": 0.3, "max_temperature": 100.0}, "max_temperature"),
])
def test_bad_settings_are_refused_when_built(options, match):
    options = {"prior": GaussianPrior(1.0), **options}
    with pytest.raises(ValueError, match=match):
        ReplicaExchangeSGMCMC(Quadratic(), Gaussian(1.0), **options)
