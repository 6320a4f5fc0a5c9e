"""Structured SG-MCMC (S-SGMCMC, S_d-SGMCMC): limiting cases, fast path = naive path, state.

The statistical target is Bayesian linear regression with strongly correlated covariates
(corr(x1, x2) = 0.8), so the exact posterior has corr(w1, w2) ≈ -0.8 and its mean-field
optimum (independent N(mu_i, 1 / Lambda_ii), the CAVI fixed point of a Gaussian target)
has about 3x smaller variances for w1 and w2: the two are easy to tell apart.
"""
import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

from lit_bayes import SGMCMC, Categorical, Gaussian, GaussianPrior
from lit_bayes.callbacks import PosteriorSamples
from lit_bayes.data import LinearRegression, SyntheticRegression
from lit_bayes.masks import MaskLaw, structured_masks
from lit_bayes.models import MLP
from lit_bayes.sample_buffer import SampleBuffer
from lit_bayes.samplers.structured_sgmcmc import StructuredSGMCMC
from tests.gaussian_targets import assert_matches_gaussian, conjugate_linear_regression


class CorrelatedLinearRegression(LinearRegression):
    """LinearRegression whose first two covariates have correlation 0.8."""

    def _sample(self, n, generator):
        z = torch.randn(n, 3, generator=generator)
        x = torch.stack([z[:, 0], 0.8 * z[:, 0] + 0.6 * z[:, 1], z[:, 2]], dim=1)
        y = x @ self.weights + self.bias + self.noise_std * torch.randn(n, generator=generator)
        return x, y


def trainer(steps, callbacks=(), **extra):
    return L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, limit_val_batches=0, callbacks=list(callbacks), **extra)


def fit_correlated(sampler_cls, steps, burn_in, **options):
    """Chains started at the exact posterior mean (= the MAP, where the paper starts them)."""
    data = CorrelatedLinearRegression(num_train=50, num_val=10, num_test=10, batch_size=None, seed=1)
    data.setup()
    x, y = data.train_data.tensors
    mean, cov = conjugate_linear_regression(x, y, noise_var=1.0, prior_var=1.0)
    model = nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.copy_(mean[:3].unsqueeze(0))
        model.bias.copy_(mean[3:])
    sampler = sampler_cls(model, Gaussian(1.0), GaussianPrior(1.0), step_size=2e-3, num_chains=32,
                          burn_in=burn_in, seed=2, init="template", **options)
    store = PosteriorSamples(max_draws=steps)
    trainer(steps, [store]).fit(sampler, datamodule=data)
    return store.trace(), (mean, cov)


def test_fully_factorised_s_sgld_converges_to_the_mean_field_optimum():
    trace, (mean, cov) = fit_correlated(StructuredSGMCMC, 1_200, 200, mode="structured", partition="fully_factorised")
    mean_field = torch.diag(1.0 / torch.linalg.inv(cov).diagonal())
    assert cov[0, 1] / (cov[0, 0] * cov[1, 1]).sqrt() < -0.75  # the target really is correlated
    assert_matches_gaussian(trace, mean, mean_field)


def test_sd_sgld_with_keep_probability_near_one_matches_the_joint_posterior():
    trace, (mean, cov) = fit_correlated(StructuredSGMCMC, 1_200, 200, mode="dropout", keep_prob=0.99,
                                        num_masks=2, partition="fully_factorised")
    assert_matches_gaussian(trace, mean, cov)


@pytest.mark.parametrize("stepper", ["sgld", "psgld", "sghmc"])
def test_keep_probability_one_is_exactly_sgmcmc(stepper):
    """ρ = 1 masks are all ones, so every composite is θ itself. Masks and buffer indices
    come from the structure generator, the noise from the module's own generator (the one
    SGMCMC uses), so the same seed gives the same noise: the chains must be identical."""
    options = {"stepper": stepper, "step_size": 1e-3, "num_chains": 3, "seed": 4}

    def run(cls, **extra):
        data = SyntheticRegression(num_train=40, num_val=10, num_test=10, batch_size=10, seed=3)
        sampler = cls(MLP([1, 8, 1], "tanh"), Gaussian(1.0), GaussianPrior(1.0), **options, **extra)
        trainer(12).fit(sampler, datamodule=data)
        return sampler.chains.flat()

    plain = run(SGMCMC)
    structured = run(StructuredSGMCMC, mode="dropout", keep_prob=1.0, num_masks=1, partition="modulo", num_groups=5)
    assert torch.equal(structured, plain)
    # K = 3 identical composites: the same update up to the rounding of (3 g) / 3
    three = run(StructuredSGMCMC, mode="dropout", keep_prob=1.0, num_masks=3, partition="fully_factorised")
    torch.testing.assert_close(three, plain, rtol=1e-5, atol=1e-6)


def ready_sampler(**options):
    """A sampler with chains, a buffer holding a few states and its generators, without a Trainer."""
    torch.manual_seed(0)
    sampler = StructuredSGMCMC(MLP([4, 6, 3], "tanh"), Categorical(3), GaussianPrior(1.0), num_data=100,
                               num_chains=2, seed=1, **options)
    sampler.setup("fit")
    sampler.configure_optimizers()
    with torch.no_grad():
        for _ in range(5):
            sampler.sample_buffer.push(sampler.chains.flat() + torch.randn_like(sampler.chains.flat()))
    return sampler


@pytest.mark.parametrize("options", [
    {"mode": "dropout", "num_masks": 3, "mask": "bernoulli", "keep_prob": 0.3, "partition": "modulo", "num_groups": 7},
    {"mode": "dropout", "num_masks": 2, "mask": "uniform", "partition": "fully_factorised"},
    {"mode": "structured", "partition": "node"},
])
def test_batched_composites_equal_a_python_loop_over_composites(options):
    sampler = ready_sampler(**options)
    x, y = torch.randn(8, 4), torch.randint(3, (8,))
    masks, tilde = sampler.draw_composites()
    fast = sampler.structured_energy(x, y, masks, tilde)
    fast_grads = torch.autograd.grad(fast.sum(), list(sampler.chains.parameters()))

    theta = sampler.chains.flat().requires_grad_(True)
    keep = masks[..., sampler.partition.block_ids]
    naive = torch.zeros(sampler.num_chains)
    for c in range(sampler.num_chains):
        for k in range(sampler.num_composites):
            composite = keep[c, k] * theta[c] + (1 - keep[c, k]) * tilde[c, k]
            params = sampler.chains.unflatten(composite.unsqueeze(0))
            naive[c] = naive[c] + sampler.structure.normaliser() * sampler.energy(params, x, y)[0]
    (naive_grad,) = torch.autograd.grad(naive.sum(), theta)
    torch.testing.assert_close(fast, naive, rtol=1e-5, atol=1e-4)
    fast_grad = torch.cat([g.reshape(sampler.num_chains, -1) for g in fast_grads], dim=1)
    torch.testing.assert_close(fast_grad, naive_grad, rtol=1e-5, atol=1e-5)


def test_structured_mode_gives_each_group_the_gradient_of_its_own_term_only():
    sampler = ready_sampler(mode="structured", partition="modulo", num_groups=3)
    x, y = torch.randn(8, 4), torch.randint(3, (8,))
    masks, tilde = sampler.draw_composites()
    assert masks.shape == (2, 3, 3) and tilde.shape == (2, 3, sampler.partition.num_params)
    energy = sampler.structured_energy(x, y, masks, tilde)
    grads = torch.autograd.grad(energy.sum(), list(sampler.chains.parameters()))
    grad = torch.cat([g.reshape(2, -1) for g in grads], dim=1)
    theta = sampler.chains.flat().requires_grad_(True)
    for group in range(3):
        members = sampler.partition.members(group)
        composite = tilde[:, group].clone()
        composite[:, members] = theta[:, members]
        (own,) = torch.autograd.grad(sampler.energy(sampler.chains.unflatten(composite), x, y).sum(), theta)
        torch.testing.assert_close(grad[:, members], own[:, members], rtol=1e-5, atol=1e-5)


def test_mask_laws_and_normalisers():
    gen = torch.Generator().manual_seed(0)
    law = MaskLaw("bernoulli", 0.25)
    draws = law.sample((20_000,), 8, gen)
    assert set(draws.unique().tolist()) == {0.0, 1.0}
    assert abs(draws.mean().item() - 0.25) < 0.01
    assert law.normaliser(8, 4) == pytest.approx(1 / (4 * 0.25))
    assert torch.equal(MaskLaw("bernoulli", 1.0).sample((50,), 6, gen), torch.ones(50, 6))
    uniform = MaskLaw("uniform")
    assert abs(uniform.sample((20_000,), 3, gen).mean().item() - 0.5) < 0.01
    assert uniform.normaliser(100, 4) == pytest.approx(2 / 4)
    one_hot = MaskLaw("one_hot")
    picks = one_hot.sample((20_000,), 5, gen)
    assert torch.equal(picks.sum(-1), torch.ones(20_000))
    assert (picks.mean(0) - 0.2).abs().max() < 0.015
    assert one_hot.normaliser(5, 2) == pytest.approx(5 / 2)
    assert torch.equal(structured_masks(4), torch.eye(4))


def test_buffer_is_a_fifo_of_copies_with_independent_indices_per_group():
    buffer = SampleBuffer(num_chains=2, num_params=6, capacity=3)
    state = torch.zeros(2, 6)
    for t in range(5):
        state.fill_(float(t))
        buffer.push(state)
    state.fill_(99.0)  # stored entries are copies
    assert len(buffer) == 3 and buffer.samples.unique().tolist() == [2.0, 3.0, 4.0]
    group_ids = torch.tensor([0, 0, 1, 1, 2, 2])
    draws = buffer.draw(group_ids, 3, 2_000, torch.Generator().manual_seed(0))
    assert draws.shape == (2, 2_000, 6)
    assert torch.equal(draws[..., 0], draws[..., 1])  # one index per group
    assert set(draws.unique().tolist()) == {2.0, 3.0, 4.0}
    mixed = (draws[..., 0] != draws[..., 2]).float().mean().item()
    assert abs(mixed - 2 / 3) < 0.03  # groups draw independent indices
    # one group per parameter: group_ids=None (the fully factorised shortcut) is the identity map
    shortcut = buffer.draw(None, 6, 50, torch.Generator().manual_seed(1))
    assert torch.equal(shortcut, buffer.draw(torch.arange(6), 6, 50, torch.Generator().manual_seed(1)))
    with pytest.raises(ValueError, match="group_ids=None"):
        buffer.draw(None, 3, 50, torch.Generator())


def test_state_resumes_exactly_and_checkpoints_load_with_weights_only(tmp_path):
    def fit(root, epochs, ckpt_path=None):
        data = SyntheticRegression(num_train=40, num_val=10, num_test=10, batch_size=10, seed=3)
        sampler = StructuredSGMCMC(MLP([1, 8, 1], "tanh"), Gaussian(1.0), GaussianPrior(1.0), stepper="sghmc",
                                   step_size=1e-3, num_chains=2, seed=5, partition="random", num_groups=4,
                                   num_masks=2, buffer_size=6, buffer_start=3, buffer_init="warm_start")
        checkpoint = ModelCheckpoint(dirpath=root, save_last=True, save_on_train_epoch_end=True)
        L.Trainer(max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                  limit_val_batches=0, callbacks=[checkpoint], default_root_dir=root
                  ).fit(sampler, datamodule=data, ckpt_path=ckpt_path)
        return sampler

    full = fit(tmp_path / "full", 4)
    fit(tmp_path / "split", 2)
    last = tmp_path / "split" / "last.ckpt"
    saved = torch.load(last, weights_only=True)
    assert saved["state_dict"]["sample_buffer.count"] == 6  # 8 steps, buffer from step 3 on, capacity 6
    resumed = fit(tmp_path / "split", 4, ckpt_path=str(last))
    assert torch.equal(full.chains.flat(), resumed.chains.flat())
    assert torch.equal(full.sample_buffer.samples, resumed.sample_buffer.samples)


def test_default_buffer_start_is_one_epoch_of_plain_steps_which_psgld_needs():
    """S_d-pSGLD, rho = 0.1, K = 2: a group both masks drop has a zero gradient; with buffer_start=0
    pSGLD's preconditioner of such a group starts at 1 / eps_precond = 1e5, noise of std
    sqrt(1e-3 * 1e5) = 10. The default runs the first epoch (4 batches) plain, so V is warm."""
    def fit(**options):
        data = SyntheticRegression(num_train=40, num_val=10, num_test=10, batch_size=10, seed=3)
        sampler = StructuredSGMCMC(MLP([1, 8, 1], "tanh"), Gaussian(1.0), GaussianPrior(1.0), stepper="psgld",
                                   step_size=1e-3, num_chains=4, seed=5, keep_prob=0.1, num_masks=2, **options)
        trainer(8).fit(sampler, datamodule=data)
        return sampler

    default, unwarmed = fit(), fit(buffer_start=0)
    assert default.buffer_start is None and default.plain_steps == 4
    assert float(default.chains.flat().abs().max()) < 4
    assert float(unwarmed.chains.flat().abs().max()) > 20


@pytest.mark.parametrize("options, message", [
    ({"partition": "rows"}, "partition must be one of"),
    ({"partition": "modulo"}, "needs num_groups"),
    ({"partition": "modulo", "num_groups": 1000}, "num_groups must be an integer in"),
    ({"partition": "layer", "num_groups": 2}, "num_groups is only used"),
    ({"partition": "user"}, "group_ids"),
    ({"partition": "user", "group_ids": [0, 1]}, "block_ids has 2 entries"),
    ({"mode": "gibbs"}, "mode must be"),
    ({"mask": "beta"}, "mask must be one of"),
    ({"keep_prob": 0.0}, "keep_prob"),
    ({"keep_prob": 1.5}, "keep_prob"),
    ({"num_masks": 0}, "num_masks must be an integer >= 1"),
    ({"buffer_size": 0}, "buffer_size must be an integer >= 1"),
    ({"buffer_start": -1}, "buffer_start must be an integer >= 0"),
    ({"buffer_init": "prior"}, "buffer_init must be"),
])
def test_bad_arguments_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        StructuredSGMCMC(MLP([3, 4, 1]), Gaussian(1.0), **options)


def test_layer_and_node_partitions_of_an_mlp():
    layer = StructuredSGMCMC(MLP([3, 4, 2]), Categorical(2), partition="layer")
    node = StructuredSGMCMC(MLP([3, 4, 2]), Categorical(2), partition="node", mode="structured")
    assert layer.num_groups == 2 and node.num_groups == 6 and node.num_composites == 6
    assert layer.structure.normaliser() == pytest.approx(1 / (4 * 0.5)) and node.structure.normaliser() == 1.0
