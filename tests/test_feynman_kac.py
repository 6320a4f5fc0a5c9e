"""Partial BNNs and the Feynman-Kac samplers: exact on a linear-Gaussian model, psi's MLE."""
import copy
import itertools
import math

import lightning as L
import pytest
import torch
from torch import nn

from lit_bayes import OHSMC, SGSMC, Bernoulli, Categorical, Gaussian
from lit_bayes.data import LinearRegression, TwoMoons
from lit_bayes.models import MLP, PartialBNN, PartialMLP
from lit_bayes.models.sequential_backprop import stochastic_linear
from lit_bayes.optimizers import DirectFusedAdam, make_optimizer
from lit_bayes.posterior import GaussianPrior, Posterior
from lit_bayes.steppers.feynman_kac import OHSMCStepper


class LinearOffset(nn.Module):
    """y = x . phi + psi: phi ~ N(0, I) stochastic, psi a deterministic offset."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.phi = nn.Parameter(torch.zeros(dim))
        self.psi = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        return (x @ self.phi + self.psi).unsqueeze(-1)


def exact_linear_gaussian(a, y, psi, noise_std):
    """Posterior N(mean, cov) of phi and log p(y; psi) for y = a phi + psi + eps, phi ~ N(0, I)."""
    n, d = a.shape
    cov = torch.linalg.inv(torch.eye(d, dtype=a.dtype) + a.T @ a / noise_std**2)
    mean = cov @ a.T @ (y - psi) / noise_std**2
    marginal = torch.distributions.MultivariateNormal(
        torch.full((n,), psi, dtype=a.dtype), a @ a.T + noise_std**2 * torch.eye(n, dtype=a.dtype)
    )
    return mean, cov, float(marginal.log_prob(y))


def _linear_gaussian_problem(n=10, noise_std=0.5):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, 2, generator=gen, dtype=torch.float64)
    y = a @ torch.tensor([1.0, -0.5], dtype=torch.float64) + 0.3 + noise_std * torch.randn(n, generator=gen, dtype=torch.float64)
    return a, y


def _detached_sgsmc(num_particles, psi, noise_std, seed, steps=10):
    sampler = SGSMC(PartialBNN(LinearOffset(2), ["phi"]), Gaussian(noise_std), num_particles=num_particles,
                    num_data=10, kernel_options={"variance": 0.05, "steps": steps}, seed=seed).double()
    sampler.setup("fit")
    sampler.make_generator()
    with torch.no_grad():
        sampler.model.net.psi.fill_(psi)
    return sampler


def test_partial_bnn_fast_path_equals_the_vmap_path_and_runs_the_trunk_once():
    torch.manual_seed(0)
    fast = PartialMLP([3, 6, 5, 2], stochastic_layer=1)
    general = PartialBNN(fast.net, ["2.weight", "2.bias"])
    general._parts = None  # force the generic vmap(functional_call) path
    phi = {n: torch.randn(7, *p.shape) for n, p in fast.stochastic_parameters().items()}
    x = torch.randn(4, 3)
    calls = []
    fast.net[0].register_forward_hook(lambda *args: calls.append(1))
    out = fast.particle_forward(phi, x)
    assert len(calls) == 1 and out.shape == (7, 4, 2)
    assert torch.allclose(out, general.particle_forward(phi, x), atol=1e-6)
    assert torch.allclose(out, fast.particle_forward_loop(phi, x), atol=1e-6)
    for j in (0, 6):  # and each particle equals the plain network with phi^j plugged in
        net = PartialMLP([3, 6, 5, 2], 1)
        net.load_state_dict(fast.state_dict())
        with torch.no_grad():
            net.net[2].weight.copy_(phi["2.weight"][j])
            net.net[2].bias.copy_(phi["2.bias"][j])
        assert torch.allclose(out[j], net(x), atol=1e-6)


def test_partial_bnn_gradient_reaches_psi_only():
    torch.manual_seed(0)
    model = PartialMLP([2, 4, 3, 1], stochastic_layer=1)
    phi = {n: torch.randn(5, *p.shape, requires_grad=True) for n, p in model.stochastic_parameters().items()}
    model.particle_forward(phi, torch.randn(6, 2)).sum().backward()
    assert all(p.grad is not None for p in model.deterministic_parameters())
    assert all(p.grad is None for p in model.stochastic_parameters().values())


class _ShiftedLinear(nn.Linear):
    """A subclass of ``nn.Linear`` with a forward of its own (a linear layer whose bias is shifted by 0.5): the
    taped forward runs it, not ``F.linear``."""

    def forward(self, x):
        return super().forward(x) + 0.5


def _models_with_known_layers():
    """PartialMLPs of every activation the hand-written backward knows, the stochastic layer first, in the
    middle and last, a plain Sequential with Sigmoid, Identity and a linear layer without bias, and one with
    subclasses of ``nn.Linear`` around the stochastic layer."""
    for activation in ("gelu_tanh", "gelu", "relu", "tanh"):
        for stochastic_layer in (0, 1, 2):
            yield lambda out, k=stochastic_layer, a=activation: PartialMLP([3, 6, 5, out], k, activation=a)
    yield lambda out: PartialBNN(nn.Sequential(nn.Linear(3, 4, bias=False), nn.Sigmoid(), nn.Linear(4, 5),
                                               nn.Identity(), nn.Linear(5, out)), "2")
    yield lambda out: PartialBNN(nn.Sequential(_ShiftedLinear(3, 4), nn.Tanh(), nn.Linear(4, 5), nn.ReLU(),
                                               _ShiftedLinear(5, out)), "2")


@pytest.mark.parametrize("make", list(_models_with_known_layers()))
def test_hand_written_psi_gradient_equals_autograd(make):
    """The taped forward gives particle_forward's outputs to the bit, and psi_gradients with each
    likelihood's output_gradient gives autograd's gradient of a weighted log-likelihood in psi."""
    gen = torch.Generator().manual_seed(0)
    for likelihood, out, target in [(Bernoulli(), 1, torch.randint(2, (9,), generator=gen)),
                                    (Categorical(4), 4, torch.randint(4, (9,), generator=gen)),
                                    (Gaussian(0.7), 1, torch.randn(9, generator=gen, dtype=torch.float64))]:
        torch.manual_seed(1)
        model = make(out).double()
        assert model.hand_backprop
        phi = {n: torch.randn(7, *p.shape, generator=gen, dtype=torch.float64)
               for n, p in model.stochastic_parameters().items()}
        x = torch.randn(9, 3, generator=gen, dtype=torch.float64)
        weights = torch.rand(7, generator=gen, dtype=torch.float64)
        outputs = model.particle_forward(phi, x)
        loss = -(weights[:, None] * likelihood(outputs, target)).sum()
        expected = torch.autograd.grad(loss, model.deterministic_parameters())
        taped, tape = model.taped_particle_forward(phi, x)
        assert torch.equal(taped, outputs.detach())
        grads = model.psi_gradients(tape, likelihood.output_gradient(taped, target).mul_(-weights[:, None, None]))
        assert set(grads) == set(model.deterministic_parameters())
        for p, g in zip(model.deterministic_parameters(), expected):
            torch.testing.assert_close(grads[p], g, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_likelihoods_take_labels_of_any_dtype_as_their_converted_copy(dtype):
    """Bernoulli and Gaussian leave integer and boolean targets to type promotion and convert floating ones of
    another dtype: log-likelihoods and output gradients equal those of the targets converted first, to the bit."""
    gen = torch.Generator().manual_seed(0)
    outputs = torch.randn(3, 7, 1, generator=gen, dtype=dtype).transpose(0, 1).contiguous().transpose(0, 1)
    labels = torch.randint(2, (7,), generator=gen)
    for likelihood in (Bernoulli(), Gaussian(0.5)):
        for target in (labels, labels.bool(), labels.float(), labels.double(), labels.half(), 3 * labels - 1):
            if isinstance(likelihood, Bernoulli) and target.min() < 0:
                continue
            for method in (likelihood.forward, likelihood.output_gradient):
                value = method(outputs, target)
                assert value.dtype == dtype and torch.equal(value, method(outputs, target.to(dtype))), (target.dtype,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stochastic_linear_equals_the_plain_product_to_the_bit(dtype):
    """The particles' layer as ``F.linear`` without a bias gives the values of ``h @ W.T`` plus the bias."""
    gen = torch.Generator().manual_seed(0)
    for points, num, width_out, width_in in [(20, 100, 5, 20), (7, 3, 4, 9), (1, 1, 1, 1)]:
        h = torch.randn(points, width_in, generator=gen, dtype=dtype)
        weight = torch.randn(num, width_out, width_in, generator=gen, dtype=dtype)
        bias = torch.randn(num, width_out, generator=gen, dtype=dtype)
        plain = (h @ weight.reshape(-1, width_in).T).reshape(points, num, width_out)
        assert torch.equal(stochastic_linear(h, weight, None), plain)
        assert torch.equal(stochastic_linear(h, weight, bias), plain + bias)


def test_hand_written_backward_is_refused_for_unknown_layers():
    model = PartialBNN(nn.Sequential(nn.Linear(2, 3), nn.Dropout(0.1), nn.Linear(3, 1)), "2")
    assert not model.hand_backprop and PartialMLP([2, 3, 1], 0).hand_backprop
    with pytest.raises(ValueError, match="hand_backprop=False"):
        model.taped_particle_forward({"2.weight": torch.zeros(4, 1, 3), "2.bias": torch.zeros(4, 1)}, torch.zeros(5, 2))
    sampler = OHSMC(model, Bernoulli(), num_particles=4, num_data=10)
    assert not sampler.hand_backprop_applies(torch.zeros(5, 2))
    with pytest.raises(ValueError, match="hand_backprop must be True or False"):
        OHSMC(PartialMLP([2, 3, 1], 0), Bernoulli(), hand_backprop=1)


def moons_batches(dtype: torch.dtype, count: int = 6) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first ``count`` two-moons training batches of 20, inputs in ``dtype``."""
    data = TwoMoons(batch_size=20, seed=0)
    data.setup("fit")
    return [(x.to(dtype), y) for x, y in itertools.islice(iter(data.train_dataloader()), count)]


def ohsmc_after_steps(widths: list[int], num_particles: int, batches, dtype: torch.dtype, **options):
    """An OHSMC sampler on a PartialMLP of ``widths`` (third layer stochastic) and its optimiser, after one step on
    each of ``batches`` outside a Trainer."""
    torch.manual_seed(0)
    sampler = OHSMC(PartialMLP(widths, 2), Bernoulli(), num_particles=num_particles, num_data=100, seed=0,
                    **options).to(dtype)
    sampler.setup("fit")
    optimizer = sampler.configure_optimizers()
    for x, y in batches:
        sampler.transition(x, y, optimizer)
    return sampler, optimizer


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ohsmc_steps_with_the_hand_written_gradient_equal_autograd_steps(dtype):
    """Outside a Trainer and inside one: the same particles, weights, evidence and psi after several steps."""
    batches = moons_batches(dtype)
    runs = {}
    for hand in (True, False):
        sampler, _ = ohsmc_after_steps([2, 16, 8, 5, 1], 32, batches, dtype, hand_backprop=hand)
        assert sampler.hand_backprop_applies(batches[0][0]) is hand
        runs[hand] = sampler.state_dict()
    tolerance = {"rtol": 1e-9, "atol": 1e-11} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    for name, value in runs[False].items():
        torch.testing.assert_close(runs[True][name], value, **tolerance, msg=name)
    for hand in (True, False):
        torch.manual_seed(0)
        sampler = OHSMC(PartialMLP([2, 16, 8, 5, 1], 2), Bernoulli(), num_particles=32, seed=0, hand_backprop=hand)
        trainer = L.Trainer(max_steps=8, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, limit_val_batches=0)
        trainer.fit(sampler, datamodule=TwoMoons(batch_size=20, seed=0))
        assert sampler.hand_backprop_applies(batches[0][0].float()) is hand and trainer.global_step == 8
        runs[hand] = sampler.state_dict()
    for name, value in runs[False].items():
        torch.testing.assert_close(runs[True][name], value, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("outer", [True, False])
def test_ohsmc_step_by_hand_runs_without_grad_and_the_autograd_step_in_the_callers_mode(outer):
    """The hand-written path's whole step runs with grad mode off, the autograd path's in the caller's grad mode
    (on: it needs autograd); both leave the caller's mode as it was."""
    x, y = torch.randn(6, 2, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 1, 0, 1, 0])
    for hand in (True, False) if outer else (True,):
        torch.manual_seed(0)
        sampler = OHSMC(PartialMLP([2, 8, 3, 1], 1), Bernoulli(), num_particles=5, num_data=40, seed=0,
                        hand_backprop=hand)
        sampler.setup("fit")
        optimizer = sampler.configure_optimizers()
        modes, log_potential = [], sampler.stepper.log_potential
        sampler.stepper.log_potential = lambda *args: modes.append(torch.is_grad_enabled()) or log_potential(*args)
        with torch.set_grad_enabled(outer):
            sampler.transition(x, y, optimizer)
            assert torch.is_grad_enabled() is outer
        assert modes == [outer and not hand]


def test_partial_bnn_rejects_bad_arguments():
    with pytest.raises(ValueError, match="stochastic"):
        PartialBNN(nn.Sequential(nn.Linear(2, 2)), "5")
    with pytest.raises(ValueError, match="not parameters"):
        PartialBNN(nn.Sequential(nn.Linear(2, 2)), ["0.kernel"])
    with pytest.raises(ValueError, match="stochastic_layer"):
        PartialMLP([2, 3, 1], stochastic_layer=2)
    with pytest.raises(ValueError, match="phi must hold"):
        PartialMLP([2, 3, 1], 0).particle_forward({"0.weight": torch.zeros(1, 3, 2)}, torch.zeros(1, 2))


def test_full_batch_smc_matches_the_exact_posterior():
    """SGSMC on one batch holding all the data is Algorithm 1 with an invariant RWMH move:
    its weighted cloud must have the exact posterior mean and covariance."""
    a, y = _linear_gaussian_problem()
    mean, cov, _ = exact_linear_gaussian(a, y, 0.2, 0.5)
    means, covs = [], []
    for seed in range(6):
        sampler = _detached_sgsmc(2000, 0.2, 0.5, seed)
        sampler.filter_batch(a, y)
        flat, w = sampler.chains.flat(), sampler.log_weights.exp()
        m = (w[:, None] * flat).sum(0)
        means.append(m)
        covs.append(((flat - m).T * w) @ (flat - m))
    means, covs = torch.stack(means), torch.stack(covs)
    # tolerance from the spread of independent runs (4 standard errors) plus the O(1/J) bias
    se_mean = means.std(0) / math.sqrt(len(means))
    assert ((means.mean(0) - mean).abs() <= 4 * se_mean + 2e-3).all(), (means.mean(0), mean)
    se_cov = covs.std(0) / math.sqrt(len(covs))
    assert ((covs.mean(0) - cov).abs() <= 4 * se_cov + 0.05 * cov.diagonal().max()).all(), (covs.mean(0), cov)


def test_smc_evidence_estimate_is_unbiased():
    """E[p_hat(y)] = p(y): the ratio p_hat / p averages to 1 within its standard error."""
    a, y = _linear_gaussian_problem(n=8)
    _, _, log_z = exact_linear_gaussian(a, y, 0.2, 0.5)
    sampler = _detached_sgsmc(32, 0.2, 0.5, seed=0, steps=3)
    ratios = []
    for _ in range(300):
        sampler.filter_batch(a, y)
        ratios.append(math.exp(float(sampler.log_evidence) - log_z))
    ratios = torch.tensor(ratios, dtype=torch.float64)
    se = float(ratios.std() / math.sqrt(len(ratios)))
    assert abs(float(ratios.mean()) - 1.0) <= 4 * se, (float(ratios.mean()), se)
    assert 0.0 < se < 0.1  # the test has power: a biased estimator (e.g. log-mean) would be caught


def test_ohsmc_recovers_the_maximum_likelihood_psi():
    data = LinearRegression(num_train=200, num_val=1, num_test=1, weights=(1.0, -0.5), bias=0.3,
                            noise_std=0.5, batch_size=20, seed=1)
    data.setup("fit")
    a, y = (t.double() for t in data.train_data.tensors)
    sigma = a @ a.T + 0.25 * torch.eye(200, dtype=torch.float64)
    s1 = torch.linalg.solve(sigma, torch.ones(200, dtype=torch.float64))
    psi_mle, psi_se = float(s1 @ y / s1.sum()), float(s1.sum() ** -0.5)
    torch.manual_seed(0)
    sampler = OHSMC(PartialBNN(LinearOffset(2), ["phi"]), Gaussian(0.5), num_particles=256,
                    kernel_options={"variance": 1e-3}, lr=0.01, seed=0)
    trainer = L.Trainer(max_epochs=30, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, precision="64-true")
    trainer.fit(sampler, datamodule=data)
    psi = float(sampler.model.net.psi)
    assert abs(psi - 0.0) > 5 * psi_se  # it moved from its initial value 0
    assert abs(psi - psi_mle) < 0.25 * psi_se, (psi, psi_mle, psi_se)
    assert math.isfinite(float(sampler.log_evidence))


def test_feynman_kac_samplers_reject_bad_arguments():
    model = PartialMLP([2, 3, 1], 0)
    with pytest.raises(ValueError, match="PartialBNN"):
        OHSMC(MLP([2, 3, 1]), Bernoulli())
    with pytest.raises(ValueError, match="num_particles"):
        OHSMC(model, Bernoulli(), num_particles=0)
    with pytest.raises(ValueError, match="kernel must be"):
        OHSMC(model, Bernoulli(), kernel="rwmh")
    with pytest.raises(ValueError, match="kernel must be 'random_walk' or 'ou' for OHSMC"):
        OHSMCStepper(Posterior(Bernoulli(), GaussianPrior(), num_data=10), "rwmh")
    with pytest.raises(ValueError, match="lr"):
        SGSMC(model, Bernoulli(), lr=-1.0)
    with pytest.raises(ValueError, match="optimizer"):
        SGSMC(model, Bernoulli(), optimizer="lbfgs")


def test_hmc_over_phi_with_psi_fixed_matches_the_exact_conditional_posterior():
    """MAP-HMC / SGSMC-HMC's second stage: HMC samples p(phi | y; psi) with psi held fixed."""
    from lit_bayes import HMC
    from lit_bayes.callbacks import PosteriorSamples
    from tests.gaussian_targets import assert_matches_gaussian

    data = LinearRegression(num_train=20, num_val=1, num_test=1, weights=(1.0, -0.5), bias=0.3, noise_std=0.5,
                            batch_size=None, seed=2)
    data.setup("fit")
    a, y = (t.double() for t in data.train_data.tensors)
    model = PartialBNN(LinearOffset(2), ["phi"]).fix_deterministic()
    with torch.no_grad():
        model.net.psi.fill_(0.2)
    sampler = HMC(model, Gaussian(0.5), step_size=0.1, num_leapfrog=5, num_chains=8, burn_in=100, init="prior", seed=1)
    samples = PosteriorSamples(max_draws=400)
    trainer = L.Trainer(max_epochs=500, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, callbacks=[samples], precision="64-true")
    trainer.fit(sampler, datamodule=data)
    assert sampler.chains.names == ["net.net.phi"]  # psi is not sampled
    assert float(sampler.model.net.psi) == pytest.approx(0.2)
    mean, cov, _ = exact_linear_gaussian(a, y, 0.2, 0.5)
    assert_matches_gaussian(samples.trace(), mean, cov)


def test_psi_can_be_trained_by_any_torch_optimizer():
    torch.manual_seed(0)
    sampler = OHSMC(PartialMLP([2, 4, 3, 1], 1), Bernoulli(), num_particles=8, num_data=10, optimizer="rmsprop",
                    optimizer_options={"alpha": 0.9})
    sampler.setup("fit")
    optimizer = sampler.configure_optimizers()
    assert isinstance(optimizer, torch.optim.RMSprop) and optimizer.defaults["alpha"] == 0.9
    before = [p.detach().clone() for p in sampler.model.deterministic_parameters()]
    sampler.transition(torch.randn(5, 2), torch.randint(0, 2, (5,)), optimizer)
    assert any(not torch.equal(a, p) for a, p in zip(before, sampler.model.deterministic_parameters()))


@pytest.mark.parametrize("options", [{}, {"weight_decay": 0.1, "maximize": True}, {"decoupled_weight_decay": True,
                                                                                   "weight_decay": 0.1}])
def test_direct_fused_adam_steps_exactly_like_torch_fused_adam(options, monkeypatch):
    """DirectFusedAdam (make_optimizer's default Adam) against torch.optim.Adam(fused=True): the same
    parameters and state bit for bit over steps with a changing learning rate and a parameter left
    without gradient, every other step given its gradients by a closure (as Lightning steps: called once,
    in grad mode, its loss returned); torch's own step runs only for the first step (which creates the
    state), and a state_dict moves between the two. zero_grad sets the gradients to None (zeros with
    set_to_none=False)."""
    torch.manual_seed(0)
    values = [torch.randn(4, 3, dtype=torch.float64), torch.randn(3, dtype=torch.float64), torch.randn(2)]
    runs, torch_steps = {}, []
    step = torch.optim.Adam.step
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, closure=None: (torch_steps.append(type(self)),
                                                                            step(self, closure))[1])
    for direct in (True, False):
        params = [torch.nn.Parameter(v.clone()) for v in values]
        groups = [{"params": params[:2]}, {"params": params[2:], "lr": 0.05}]
        optimizer = (DirectFusedAdam if direct else torch.optim.Adam)(groups, lr=0.1, fused=True, **options)
        generator = torch.Generator().manual_seed(1)
        for i in range(5):
            calls = []

            def closure(i=i):
                calls.append(torch.is_grad_enabled())
                for j, p in enumerate(params):
                    p.grad = None if (i == 3 and j == 1) else torch.randn(p.shape, generator=generator, dtype=p.dtype)
                return torch.tensor(float(i))

            optimizer.param_groups[0]["lr"] = 0.1 / (i + 1)
            if i % 2:
                assert optimizer.step(closure) == i and calls == [True]
            else:
                closure()
                assert optimizer.step() is None
        runs[direct] = params, optimizer
    assert torch_steps.count(DirectFusedAdam) == 1 and torch_steps.count(torch.optim.Adam) == 5
    (direct, direct_optimizer), (plain, plain_optimizer) = runs[True], runs[False]
    assert all(torch.equal(a, b) for a, b in zip(direct, plain))
    for a, b in zip(direct_optimizer.state.values(), plain_optimizer.state.values()):
        assert all(torch.equal(a[key], b[key]) for key in ("step", "exp_avg", "exp_avg_sq"))
    plain_optimizer.load_state_dict(direct_optimizer.state_dict())  # checkpoints are interchangeable
    direct_optimizer.zero_grad(set_to_none=False)
    assert all(p.grad is None or not p.grad.any() for p in direct) and any(p.grad is not None for p in direct)
    direct_optimizer.zero_grad()
    assert all(p.grad is None for p in direct)
    assert isinstance(make_optimizer("adam", direct, 0.1), DirectFusedAdam)
    assert type(make_optimizer("adam", direct, 0.1, {"foreach": True})) is torch.optim.Adam


def test_direct_fused_adam_runs_step_hooks_profiles_and_resumes_like_torch():
    """DirectFusedAdam's step bypasses torch's step wrapper only while it has nothing to do: a registered pre-
    or post-hook (its own or global) runs once a step, a profiler sees the step's range. Its step counters
    are views of one tensor per group, again after a load_state_dict, and every step equals torch's fused
    Adam, bit for bit, before and after the state moves both ways."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    torch.manual_seed(0)
    values = [torch.randn(4, 3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)]
    direct_params, plain_params = ([nn.Parameter(v.clone()) for v in values] for _ in range(2))
    direct = DirectFusedAdam(direct_params, lr=0.1)
    plain = torch.optim.Adam(plain_params, lr=0.1, fused=True)
    generator = torch.Generator().manual_seed(1)

    def step_both():
        grads = [torch.randn(v.shape, generator=generator, dtype=v.dtype) for v in values]
        for params, optimizer in ((direct_params, direct), (plain_params, plain)):
            for p, g in zip(params, grads):
                p.grad = g.clone()
            optimizer.step()
        assert all(torch.equal(a, b) for a, b in zip(direct_params, plain_params))

    def counters_are_views_of_one_tensor():
        steps = [direct.state[p]["step"] for p in direct_params]
        return all(s._base is not None and s._base is steps[0]._base for s in steps)

    calls = []
    step_both()  # torch's own step creates the state
    step_both()
    assert counters_are_views_of_one_tensor()
    pre = direct.register_step_pre_hook(lambda *args: calls.append("pre"))
    post = register_optimizer_step_post_hook(lambda *args: calls.append("global post"))
    step_both()
    assert calls == ["pre", "global post", "global post"]  # the global hook runs for the plain optimiser too
    pre.remove()
    post.remove()
    step_both()
    assert len(calls) == 3
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        step_both()
    assert any(e.name == "Optimizer.step#DirectFusedAdam.step" for e in profiler.events())
    direct.load_state_dict(copy.deepcopy(plain.state_dict()))  # as from a checkpoint: counters, not views of one
    # tensor (made so again at the next step); load_state_dict keeps the given tensors, shared without the copy
    assert not counters_are_views_of_one_tensor()
    step_both()
    assert counters_are_views_of_one_tensor()
    plain.load_state_dict(copy.deepcopy(direct.state_dict()))
    step_both()
    for p, q in zip(direct_params, plain_params):
        assert all(torch.equal(direct.state[p][k], plain.state[q][k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    assert float(direct.state[direct_params[0]]["step"]) == 7  # the steps taken


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd"])
def test_fused_optimizer_is_the_default_and_steps_like_the_plain_one(name):
    torch.manual_seed(0)
    values = [torch.randn(4, 3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)]
    grads = [torch.randn_like(v) for v in values]
    updated = {}
    for options in (None, {"foreach": False}):
        params = [torch.nn.Parameter(v.clone()) for v in values]
        optimizer = make_optimizer(name, params, 0.1, options)
        assert optimizer.defaults["fused"] is (True if options is None else None)
        for _ in range(3):
            for p, g in zip(params, grads):
                p.grad = g.clone()
            optimizer.step()
        updated[options is None] = params
    for fused, plain in zip(updated[True], updated[False]):
        torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        make_optimizer("lbfgs", values, 0.1)


@pytest.mark.parametrize("sampler_type", [OHSMC, SGSMC])
def test_autograd_psi_loss_leaves_out_particles_without_weight_and_non_finite(sampler_type):
    """The psi-loss autograd differentiates (``finite_psi_loss``): a particle whose log-likelihood is NaN and whose
    weight is 0 would turn psi's gradient NaN through its activations (0 x NaN); left out, psi's gradient is that of
    the other particles' loss, and finite."""
    x, y = moons_batches(torch.float64, 1)[0]
    sampler = sampler_type(PartialMLP([2, 16, 8, 1], 1), Bernoulli(), num_particles=6, num_data=100, seed=0).double()
    sampler.setup("fit")
    particles = {name: p.clone() for name, p in sampler.particles().items()}
    particles["net.2.weight"][2, 0, 0] = float("nan")
    weights = torch.tensor([0.3, 0.2, 0.0, 0.1, 0.4, 0.0], dtype=torch.float64)
    stepper, log_lik = sampler.stepper, sampler.point_log_likelihoods
    psi = list(sampler.model.deterministic_parameters())

    def gradient(loss):
        return torch.autograd.grad(loss, psi)

    sums = log_lik(particles, x, y).sum(-1)
    assert sums[2].isnan() and sums.requires_grad
    assert not all(g.isfinite().all() for g in gradient(stepper.psi_loss(sums, y.shape[0], weights)))  # the poison
    loss = stepper.finite_psi_loss(particles, x, y, log_lik, log_lik(particles, x, y).sum(-1), weights)
    others = [0, 1, 3, 4, 5]
    alone = stepper.psi_loss(log_lik({n: p[others] for n, p in particles.items()}, x, y).sum(-1), y.shape[0],
                             weights[others])
    torch.testing.assert_close(loss, alone)
    for got, expected in zip(gradient(loss), gradient(alone)):
        assert got.isfinite().all()
        torch.testing.assert_close(got, expected)
