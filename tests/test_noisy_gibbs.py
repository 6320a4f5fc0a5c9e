"""NoisyGibbs (noisy-gibbs spec §1-§3): Gaussian conditionals against their closed forms, exact
sweeps preserving the joint law, the conjugate one-layer posterior through ``Trainer.fit``,
exact resume, informed starts, the probit likelihood and bad inputs."""
import copy
import math
import os

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from scipy import stats
from torch import nn

from lit_bayes.callbacks import PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.data import LinearRegression
from lit_bayes.data.teacher_student import TeacherStudent
from lit_bayes.models.noisy_mlp import MultinomialProbit, NoisyMLP, _log_normal_cdf
from lit_bayes.samplers.noisy_gibbs import CanonicalBatch, NoisyGibbs, canonical_order
from lit_bayes.steppers.noisy_gibbs import LinearGaussianConditional, NoisyGibbsStepper, sample_bias
from tests.gaussian_targets import KS_P_MIN, assert_gaussian_draws, assert_matches_gaussian, conjugate_linear_regression

DRAWS = 20_000


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("cached", [False, True])
def test_weight_conditional_matches_eq_9(cached):
    """Sigma_W = (X^T X / Delta_Z + lambda I)^-1, m_a = Sigma_W X^T Z_a / Delta_Z (eqs. 9, 18-20)."""
    g = gen(1)
    n, d, k, delta, lam = 12, 3, 2, 0.3, 2.0
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    z = torch.randn(1, n, k, generator=g, dtype=torch.float64)
    conditional = LinearGaussianConditional(x, torch.full((d,), lam, dtype=torch.float64), delta, cached)
    draws = conditional.sample(z.expand(DRAWS, n, k), g)  # (S, k, d)
    cov = torch.linalg.inv(x.T @ x / delta + lam * torch.eye(d, dtype=torch.float64))
    for a in range(k):
        assert_gaussian_draws(draws[:, a], cov @ x.T @ z[0, :, a] / delta, cov)


@pytest.mark.parametrize("n, columns", [(2, False), (6, False), (6, True)])
def test_post_activation_conditional_matches_eq_8(monkeypatch, n, columns):
    """Sigma_X = (W^T W / Delta_Z + I / Delta_X)^-1, m^mu = Sigma_X (sigma(Z^mu) / Delta_X + W^T Z'^mu / Delta_Z) (eq. 8).
    With more rows n than units d, on a processor that multiplies long rows faster (``columns``), the draw runs
    with the rows on the long axis of its products (LinearGaussianConditional._sample_columns)."""
    import lit_bayes.steppers.noisy_gibbs as module

    monkeypatch.setattr(module, "transposed_is_faster", lambda device: columns)
    g = gen(2)
    d, k, delta_z, delta_x = 4, 3, 0.2, 0.5
    w = torch.randn(1, k, d, generator=g, dtype=torch.float64)
    above = torch.randn(1, n, k, generator=g, dtype=torch.float64)
    activated = torch.randn(1, n, d, generator=g, dtype=torch.float64).relu()
    conditional = LinearGaussianConditional(w.expand(DRAWS, k, d), torch.full((d,), 1 / delta_x, dtype=torch.float64),
                                            delta_z)
    draws = conditional.sample(above.mT.expand(DRAWS, k, n), g, prior_mean=activated.expand(DRAWS, n, d))
    cov = torch.linalg.inv(w[0].T @ w[0] / delta_z + torch.eye(d, dtype=torch.float64) / delta_x)
    for mu in range(n):
        mean = cov @ (activated[0, mu] / delta_x + w[0].T @ above[0, mu] / delta_z)
        assert_gaussian_draws(draws[:, mu], mean, cov)


def test_bias_conditional_matches_eqs_52_55():
    residual = torch.randn(1, 7, 2, generator=gen(3), dtype=torch.float64)
    delta, lam = 0.4, 3.0
    draws = sample_bias(residual.expand(DRAWS, 7, 2), delta, lam, gen(4))
    denominator = 7 + delta * lam
    for a in range(2):
        law = stats.norm(float(residual[0, :, a].sum()) / denominator, math.sqrt(delta / denominator))
        assert stats.kstest(draws[:, a].numpy(), law.cdf).pvalue > KS_P_MIN


JOINT_CASES = [(a, o, True) for a in ("relu", "sign", "abs", "linear") for o in ("regression", "probit")]


@pytest.mark.parametrize("activation, output, bias", JOINT_CASES + [("relu", "probit", False)])
def test_sweeps_preserve_the_joint_law_of_weights_latents_and_labels(activation, output, bias):
    """Each of 4000 independent chains starts from an exact draw of the joint (eq. 4 x evidence):
    weights from the prior, latents and labels from the generative process (eq. 7), its own labels.
    Exact conditionals keep every chain an exact joint draw, so after 30 sweeps every weight and
    bias must still follow its prior and every latent its generative law (4.5-sigma z-tests on
    means and second moments). A 30% error in one piece constant of eq. 10 fails this by far."""
    torch.manual_seed(0)
    g, chains = gen(5), 4000
    model = NoisyMLP([2, 3, 2, 1 if output == "regression" else 3], activation, delta_z=[0.5, 0.3, 0.2],
                     delta_x=[0.2, 0.4], prior_precision=[1.0, 2.0, 1.5], bias_precision=[3.0, 1.0, 2.0], bias=bias, output=output)
    prior = model.prior()
    named = {f"net.{n}": torch.zeros(chains, *p.shape, dtype=torch.float64) for n, p in model.named_parameters()}
    params = {n[4:]: p for n, p in prior.sample(named, g).items()}
    x = torch.randn(3, 2, generator=g, dtype=torch.float64)
    latents, top = model.generate(params, x, g)
    start = {name: v.clone() for name, v in latents.items()}
    labels = top[..., 0] if output == "regression" else top.argmax(-1)
    weights = [params[f"layers.{j}.weight"] for j in range(3)]
    stepper = NoisyGibbsStepper(model, weights, [params.get(f"layers.{j}.bias") for j in range(3)], g)
    for _ in range(30):
        stepper.sweep(x, labels, latents)
    for name, p in params.items():
        flat, var = p.reshape(chains, -1), prior.variance_of(f"net.{name}")
        assert (flat.mean(0).abs() / math.sqrt(var / chains)).max() < 4.5, name
        assert ((flat.pow(2).mean(0) - var).abs() / (var * math.sqrt(2 / chains))).max() < 4.5, name
    for name, value in latents.items():
        for power in (1, 2):
            new, old = value.reshape(chains, -1) ** power, start[name].reshape(chains, -1) ** power
            z = (new.mean(0) - old.mean(0)) / ((new.var(0) + old.var(0)) / chains).sqrt()
            assert z.abs().max() < 4.5, name
    assert (weights[0] - named["net.layers.0.weight"]).abs().mean() > 0  # the chains moved


def test_first_layer_factor_is_cached_for_fixed_inputs():
    """Spec §8 item 10: the (W^(1), b^(1)) factor is built once and rebuilt only for new inputs."""
    model = NoisyMLP([3, 4, 1])
    weights = [torch.zeros(2, 4, 3), torch.zeros(2, 1, 4)]
    stepper = NoisyGibbsStepper(model, weights, [torch.zeros(2, 4), torch.zeros(2, 1)], gen())
    x = torch.randn(10, 3, generator=gen(1))
    first = stepper.first_layer(x)
    assert stepper.first_layer(x.clone()) is first and first.projector.shape == (4, 10)
    assert stepper.first_layer(x + 1.0) is not first


def test_stacked_forward_equals_noiseless_forward_of_each_chain():
    model = NoisyMLP([3, 5, 4, 2], "abs", output="probit")
    params = {n: torch.randn(3, *p.shape, generator=gen(2)) for n, p in model.named_parameters()}
    x = torch.randn(7, 3, generator=gen(3))
    stacked = model.stacked_forward(params, x)
    for c in range(3):
        reference = torch.func.functional_call(model, {n: p[c] for n, p in params.items()}, (x,))
        torch.testing.assert_close(stacked[c], reference)
    _, noiseless = model.generate(params, x, None, noiseless=True)
    torch.testing.assert_close(noiseless, stacked)


def trainer(callbacks, root, **kwargs):
    checkpointing = any(isinstance(c, ModelCheckpoint) for c in callbacks)
    return L.Trainer(logger=False, enable_checkpointing=checkpointing, enable_progress_bar=False,
                     enable_model_summary=False, callbacks=callbacks, default_root_dir=root, **kwargs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_one_layer_linear_network_recovers_the_conjugate_posterior(dtype, tmp_path):
    """L = 1, Gaussian label noise: the weight step is the exact conjugate posterior of [w, b]
    (eqs. 9 and App. F). Through Trainer.fit on a shuffled full-batch DataModule; the kept draws
    match the closed form within ESS tolerances and PredictiveMarginal scores the test split."""
    data = LinearRegression(num_train=40, num_val=10, num_test=10, noise_std=1.0, seed=1)
    model = NoisyMLP([3, 1], delta_z=0.8, prior_precision=0.5, bias_precision=0.5)
    sampler = NoisyGibbs(model, num_chains=4, burn_in=5, seed=3, dtype=dtype)
    store = PosteriorSamples(max_draws=1000)
    fit = trainer([store, PredictiveMarginal(), UncertaintyMetrics()], tmp_path, max_steps=505, limit_val_batches=0)
    fit.fit(sampler, datamodule=data)
    x, y = data.train_data.tensors
    mean, cov = conjugate_linear_regression(x, y, noise_var=0.8, prior_var=2.0)
    trace = store.trace()
    assert trace.dtype == getattr(torch, dtype) and trace.shape == (4, 500, 4)
    assert_matches_gaussian(trace, mean, cov)
    metrics = fit.test(sampler, datamodule=data, verbose=False)[0]
    assert math.isfinite(metrics["test/nlpd"]) and metrics["test/rmse"] < 2.0


def fit_probit(root, epochs, ckpt_path=None):
    torch.set_num_threads(1)
    data = TeacherStudent(widths=(3, 4, 3), delta_z=0.1, delta_x=0.1, output="probit", num_train=30, num_val=0,
                          num_test=10, seed=2)
    sampler = NoisyGibbs(NoisyMLP([3, 4, 3], delta_z=0.1, delta_x=0.1, output="probit"), num_chains=3, burn_in=2,
                         thinning=2, seed=5, init="prior")
    samples = PosteriorSamples(max_draws=100)
    checkpoint = ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), save_last=True, save_on_train_epoch_end=True,
                                 every_n_epochs=1)
    trainer([samples, checkpoint], root, max_epochs=epochs, limit_val_batches=0).fit(
        sampler, datamodule=data, ckpt_path=ckpt_path)
    return sampler, samples


def test_resumed_chain_equals_uninterrupted_chain(tmp_path):
    """6 sweeps == 3 sweeps + checkpoint + 3: weights, every latent (saved in the checkpoint),
    the generator and the kept draws bit for bit (probit output, so the scores are latent too)."""
    full, full_samples = fit_probit(str(tmp_path / "full"), 6)
    fit_probit(str(tmp_path / "split"), 3)
    resumed, resumed_samples = fit_probit(str(tmp_path / "split"), 6, str(tmp_path / "split" / "ckpt" / "last.ckpt"))
    assert full.global_step == resumed.global_step == 6
    assert torch.equal(full.chains.flat(), resumed.chains.flat())
    full_latents, resumed_latents = full.latents.as_dict(), resumed.latents.as_dict()
    assert sorted(full_latents) == ["x2", "z2", "z3"]
    for name, value in full_latents.items():
        assert torch.equal(value, resumed_latents[name]), name
    assert torch.equal(full_samples.trace(), resumed_samples.trace()) and full_samples.trace().shape[1] == 2


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_informed_start_uses_the_teacher_and_its_latents(dtype, tmp_path):
    """init='template' with the teacher's weights and set_initial_latents: the first sweep starts
    from the teacher's exact joint sample (spec §8 item 5), whatever order the batch comes in."""
    data = TeacherStudent(widths=(4, 5, 1), delta_z=1e-3, delta_x=1e-3, num_train=50, num_test=200, seed=4)
    data.setup()
    sampler = NoisyGibbs(copy.deepcopy(data.teacher), num_chains=2, init="template", seed=1, dtype=dtype)
    x, y = data.train_data.tensors
    sampler.set_initial_latents(x, y, data.train_latents)
    sampler.setup("fit")
    sampler.configure_optimizers()
    shuffled = torch.randperm(len(x), generator=gen(0))
    inputs, targets, latents = sampler.sweep_inputs((x[shuffled], y[shuffled]))
    order = canonical_order(x, y)
    assert torch.equal(inputs, x[order].to(inputs.dtype)) and torch.equal(targets, y[order])
    for name, value in data.train_latents.items():
        assert latents[name].dtype == getattr(torch, dtype)
        assert torch.equal(latents[name], value[order].to(latents[name].dtype).expand(2, -1, -1)), name
    store = PosteriorSamples(max_draws=100)
    trainer([store], tmp_path, max_steps=40, limit_val_batches=0).fit(sampler, datamodule=data)
    x_test, y_test = data.test_data.tensors
    errors = (sampler.outputs(sampler.chains.as_dict(), x_test)[..., 0] - y_test).pow(2).mean(-1)
    assert (errors < 0.05).all(), errors  # equilibrium test MSE is of order Delta, not of the prior's O(1)


def test_multinomial_probit_likelihood():
    """Two classes: P(y = 1) = Phi((omega_1 - omega_0) / sqrt(2 Delta)); four: Monte Carlo frequencies."""
    omega = torch.tensor([[0.3, -0.4], [2.0, -1.0], [0.0, 0.0]], dtype=torch.float64)
    two = MultinomialProbit(2, 0.5).class_log_probs(omega)
    expected = torch.special.log_ndtr((omega[:, 1] - omega[:, 0]) / 1.0)
    torch.testing.assert_close(two[:, 1], expected, rtol=1e-8, atol=1e-10)
    scores = torch.tensor([0.5, -0.2, 0.1, 0.9], dtype=torch.float64)
    noisy = scores + math.sqrt(0.3) * torch.randn(200_000, 4, generator=gen(7), dtype=torch.float64)
    frequency = torch.bincount(noisy.argmax(-1), minlength=4) / 200_000
    probs = MultinomialProbit(4, 0.3).class_log_probs(scores[None]).exp()[0]
    assert (probs - frequency).abs().max() < 4.5 * math.sqrt(0.25 / 200_000)


def test_multinomial_probit_log_likelihood_is_the_probit():
    """The per-point log-likelihood (``forward``, ``log_prob_``, ``log_prob_units``: what HMC's energy and the
    NLPD read) is log P(argmax(omega + eps) = y), the probit's, not the softmax of the scores (Categorical's):
    Monte Carlo frequencies of each point's label."""
    scores = torch.tensor([[0.5, -0.2, 0.1, 0.9], [1.5, 0.0, -1.0, 0.2], [0.0, 0.1, 0.0, -0.3]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 3])
    likelihood = MultinomialProbit(4, 0.3)
    noisy = scores + math.sqrt(0.3) * torch.randn(200_000, 3, 4, generator=gen(7), dtype=torch.float64)
    frequency = (noisy.argmax(-1) == labels).double().mean(0)
    log_lik = likelihood(scores, labels)
    assert (log_lik.exp() - frequency).abs().max() < 4.5 * math.sqrt(0.25 / 200_000), (log_lik.exp(), frequency)
    torch.testing.assert_close(log_lik, likelihood.class_log_probs(scores)[torch.arange(3), labels])
    torch.testing.assert_close(likelihood.log_prob_(scores.clone(), labels), log_lik)
    torch.testing.assert_close(likelihood.log_prob_units(scores.unbind(-1), labels), log_lik)


def test_probit_log_normal_cdf_matches_log_ndtr_with_finite_gradients():
    """The quadrature's log Phi (erfc and log, log_ndtr below DEEP) against torch's log_ndtr on both sides of
    DEEP and far into both tails, values and gradients."""
    a = torch.linspace(-60.0, 40.0, 20_001, dtype=torch.float64, requires_grad=True)
    ours, reference = _log_normal_cdf(a), torch.special.log_ndtr(a)
    torch.testing.assert_close(ours, reference, rtol=1e-13, atol=1e-15)
    (grad,), (expected,) = torch.autograd.grad(ours.sum(), a), torch.autograd.grad(reference.sum(), a)
    torch.testing.assert_close(grad, expected, rtol=1e-10, atol=1e-15)


def test_canonical_order_is_invariant_to_permutations():
    x, y = torch.randn(20, 3, generator=gen(8)), torch.randn(20, generator=gen(9))
    perm = torch.randperm(20, generator=gen(10))
    assert torch.equal(x[canonical_order(x, y)], x[perm][canonical_order(x[perm], y[perm])])


def test_canonical_batch_orders_a_batch_once_while_the_same_tensors_come_back():
    x, y = torch.randn(20, 2, 3, generator=gen(8)), torch.randn(20, generator=gen(9))
    batch = CanonicalBatch(torch.float64)
    inputs, targets = batch(x, y)
    assert inputs.dtype == torch.float64 and inputs.shape == (20, 6)
    order = canonical_order(x, y)
    assert torch.equal(inputs, x[order].flatten(1).double()) and torch.equal(targets, y[order])
    again = batch(x, y)
    assert again[0] is inputs and again[1] is targets  # recognised: not ordered again
    perm = torch.randperm(20, generator=gen(10))
    shuffled = batch(x[perm], y[perm])
    assert shuffled[0] is not inputs and torch.equal(shuffled[0], inputs) and torch.equal(shuffled[1], targets)
    x2 = x.clone()
    assert batch(x2, y)[0] is not inputs
    x2[0] += 1.0  # modified in place: ordered again, with the new values
    assert torch.equal(batch(x2, y)[0], x2[canonical_order(x2, y)].flatten(1).double())


@pytest.mark.parametrize("kwargs, message", [
    (dict(widths=[3]), "widths must list at least two"),
    (dict(activation="tanh"), "activation must be one of"),
    (dict(output="softmax"), "output must be one of"),
    (dict(widths=[3, 2], output="regression"), "widths must end in 1"),
    (dict(widths=[3, 1], output="probit"), "widths must end in >= 2"),
    (dict(delta_z=-1.0), "delta_z must be a finite number > 0"),
    (dict(delta_z=[0.1]), r"delta_z must be a positive number or a list of 2"),
    (dict(delta_x=[0.1, 0.2]), r"delta_x must be a positive number or a list of 1"),
    (dict(prior_precision=[1.0, "big"]), r"prior_precision\[1\] must be a finite number > 0, got 'big'"),
    (dict(bias_precision="big"), "bias_precision must be a positive number or a list of 2"),
    (dict(bias="yes"), "bias must be True or False"),
])
def test_noisy_mlp_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NoisyMLP(**{"widths": [3, 4, 1], **kwargs})


def test_noisy_gibbs_bad_arguments():
    with pytest.raises(ValueError, match="model must be a lit_bayes.models.NoisyMLP"):
        NoisyGibbs(nn.Linear(2, 1))
    with pytest.raises(ValueError, match="init must be one of"):
        NoisyGibbs(NoisyMLP([2, 1]), init="module")
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64'"):
        NoisyGibbs(NoisyMLP([2, 1]), dtype="half")
    with pytest.raises(ValueError, match="noise_var must be a finite number > 0"):
        MultinomialProbit(3, 0.0)
    sampler = NoisyGibbs(NoisyMLP([2, 3, 1]))
    with pytest.raises(ValueError, match=r"latents must hold exactly \['z2', 'x2'\]"):
        sampler.set_initial_latents(torch.zeros(4, 2), torch.zeros(4), {"z2": torch.zeros(4, 3)})
    with pytest.raises(ValueError, match=r"latents\['x2'\] must have shape \(n, d\)"):
        sampler.set_initial_latents(torch.zeros(4, 2), torch.zeros(4), {"z2": torch.zeros(4, 3), "x2": torch.zeros(5, 3)})


def test_minibatches_are_rejected(tmp_path):
    data = LinearRegression(num_train=40, num_val=1, num_test=1, batch_size=10)
    with pytest.raises(ValueError, match="NoisyGibbs is full batch: the training batch has 10 points"):
        trainer([], tmp_path, max_steps=1, limit_val_batches=0).fit(NoisyGibbs(NoisyMLP([3, 1])), datamodule=data)
