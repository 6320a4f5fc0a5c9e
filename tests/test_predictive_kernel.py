"""The fused CPU predictive (lit_bayes.predictive_kernel) equals the eager path; where it cannot apply or cannot
be built, the eager path runs and the results are the same."""
import pytest
import torch
from torch import nn

from lit_bayes import SGMCMC, Categorical, Gaussian, GaussianPrior
from lit_bayes import predictive_kernel
from lit_bayes.models import MLP
from lit_bayes.predictive import marginal_predictive
from lit_bayes.predictive_kernel import FOLDINGS, LOG2E, FusedPredictive, folded_parameters, fused_tile_kernel
from tests.kernel_builds import kernel_built_in, processor_has_avx512

FIELDS = ("log_probs", "entropy", "mutual_information", "log_prob_target")
MAX_PLUS_ONE = predictive_kernel.MAX_WIDTH + 1


@pytest.fixture(autouse=True)
def kernel_available():
    if fused_tile_kernel((6, 3), 0) is None:
        pytest.skip("no C compiler here to build the fused predictive kernel")


def draws(sampler, num, seed=0, variance=2.0, dtype=torch.float32):
    template = {n: p.detach().to(dtype) for n, p in sampler.template_parameters().items()}
    stacked = {n: p.unsqueeze(0).expand(num, *p.shape) for n, p in template.items()}
    return GaussianPrior(variance).sample(stacked, torch.Generator().manual_seed(seed))


def skewed_log_weights(num, seed=1, zero_weights=0):
    """Normalised log-weights far from uniform, the first ``zero_weights`` of them -inf."""
    logits = 3.0 * torch.randn(num, generator=torch.Generator().manual_seed(seed))
    logits[:zero_weights] = -float("inf")
    return torch.log_softmax(logits, dim=0)


def both_paths(sampler, samples, log_weights, x, y, **options):
    fused = marginal_predictive(sampler, samples, log_weights, x, y, fused=True, **options)
    eager = marginal_predictive(sampler, samples, log_weights, x, y, fused=False, **options)
    return fused, eager


def assert_same_predictive(fused, eager, atol=2e-5):
    for field in FIELDS:
        torch.testing.assert_close(getattr(fused, field), getattr(eager, field), rtol=2e-5, atol=atol, msg=field)


@pytest.mark.parametrize("activation", ["sigmoid", "tanh", "relu"])
@pytest.mark.parametrize("widths", [[5, 7, 3], [6, 10, 9, 4], [4, 3], [3, 64, 2]])
def test_fused_predictive_equals_the_eager_path(activation, widths):
    torch.manual_seed(0)
    sampler = SGMCMC(MLP(widths, activation=activation), Categorical(widths[-1]), num_data=50)
    samples = draws(sampler, 29)
    x = 2.0 * torch.randn(45, widths[0])  # 45 points in tiles of 21: partial vectors of lanes on both
    y = torch.randint(0, widths[-1], (45,))
    assert FusedPredictive.of(sampler, samples, x) is not None
    for chunk in (1, 8, 29):
        fused, eager = both_paths(sampler, samples, skewed_log_weights(29, zero_weights=3), x, y, chunk_size=chunk,
                                  tile_points=21)
        assert_same_predictive(fused, eager)


@pytest.mark.parametrize("activation", [nn.Sigmoid, nn.Tanh, nn.ReLU])
def test_folded_parameters_give_the_kernels_scaled_pre_activations(activation):
    """Replayed in float64 as the kernel reads them (t_1 = gamma_1 W_1 x + b'_1, r = 1 / (1 + 2^t) or max(t, 0),
    t_j = W'_j r + b'_j), the folded parameters give gamma_j times the network's pre-activations, log2 e times its
    logits."""
    generator = torch.Generator().manual_seed(0)
    widths, num = [5, 7, 6, 4], 3
    weights = [torch.randn(num, out, inp, generator=generator) for inp, out in zip(widths, widths[1:])]
    biases = [torch.randn(num, out, generator=generator) for out in widths[1:]]
    x = 2.0 * torch.randn(num, widths[0], 1, generator=generator, dtype=torch.float64)
    scale, tail = folded_parameters(weights, biases, activation)
    code, gamma, *_ = FOLDINGS[activation]
    g = weights[0].double() @ x + biases[0].double()[..., None]
    t = scale * (weights[0].double() @ x) + tail[:, : widths[1], None].double()
    offset = widths[1]
    for j, (weight, bias) in enumerate(zip(weights[1:], biases[1:]), start=1):
        torch.testing.assert_close(t, gamma * g, rtol=1e-6, atol=1e-6)
        r = 1.0 / (1.0 + torch.exp2(t)) if code == predictive_kernel.LOGISTIC else t.clamp_min(0.0)
        size = weight.shape[1] * weight.shape[2]
        folded_weight = tail[:, offset: offset + size].double().reshape(weight.shape)
        folded_bias = tail[:, offset + size: offset + size + weight.shape[1], None].double()
        offset += size + weight.shape[1]
        t = folded_weight @ r + folded_bias
        g = weight.double() @ activation()(g) + bias.double()[..., None]
    assert offset == tail.shape[1]
    torch.testing.assert_close(t, LOG2E * g, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("activation", ["sigmoid", "tanh"])
def test_fused_predictive_of_saturated_units(activation):
    """Pre-activations of hundreds either way: the kernel's 2^t beyond its clamps at t = -127 and 128 gives the
    activation's limits."""
    sampler = SGMCMC(MLP([3, 8, 8, 4], activation=activation), Categorical(4), num_data=50)
    samples = draws(sampler, 12, variance=400.0)
    x, y = 5.0 * torch.randn(30, 3), torch.randint(0, 4, (30,))
    net, _ = sampler.split_parameters(samples)
    weight, bias = (net[name] for name in sampler.outputs_stack().names[0])
    first = weight @ x.T + bias[..., None]
    assert first.max() > 128.0 and first.min() < -128.0  # the regime this test is about: |t| > 128 log2 e
    fused, eager = both_paths(sampler, samples, skewed_log_weights(12), x, y, chunk_size=5)
    assert_same_predictive(fused, eager, atol=1e-3)  # float32 logs of magnitude ~1e2


@pytest.mark.skipif(not processor_has_avx512(), reason="the default build is the eight-lane one here")
@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
def test_the_eight_lane_build_equals_the_eager_path(monkeypatch, tmp_path, activation):
    """Where the kernel builds with AVX-512 (16 lanes), the build without it (8 lanes, AVX2's registers) as well."""
    monkeypatch.setattr(predictive_kernel, "FLAGS", (*predictive_kernel.FLAGS, "-mno-avx512f"))
    with kernel_built_in(tmp_path, monkeypatch, fused_tile_kernel):
        sampler = SGMCMC(MLP([6, 10, 9, 4], activation=activation), Categorical(4), num_data=50)
        samples = draws(sampler, 29)
        x, y = 2.0 * torch.randn(45, 6), torch.randint(0, 4, (45,))
        fused, eager = both_paths(sampler, samples, skewed_log_weights(29, zero_weights=3), x, y, chunk_size=8,
                                  tile_points=21)
        assert len(list(tmp_path.glob("predictive_kernel-*.so"))) == 1  # the fused path ran, built here
    assert_same_predictive(fused, eager)


def test_fused_predictive_in_several_threads_equals_one_thread():
    sampler = SGMCMC(MLP([8, 12, 12, 5]), Categorical(5), num_data=50)
    samples = draws(sampler, 40)
    x, y = torch.randn(203, 8), torch.randint(0, 5, (203,))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = marginal_predictive(sampler, samples, skewed_log_weights(40), x, y, chunk_size=16)
        torch.set_num_threads(3)  # 203 points: three ranges of 72, 72 and 59
        several = marginal_predictive(sampler, samples, skewed_log_weights(40), x, y, chunk_size=16)
    finally:
        torch.set_num_threads(threads)
    for field in FIELDS:
        assert torch.equal(getattr(single, field), getattr(several, field)), field


def test_fused_predictive_keeps_tiny_probabilities_in_log_space():
    """Logits hundreds apart: class probabilities far below float32's smallest normal keep their logs."""
    sampler = SGMCMC(MLP([3, 6, 4], activation="relu"), Categorical(4), num_data=50)
    samples = draws(sampler, 12, variance=400.0)
    x, y = 5.0 * torch.randn(30, 3), torch.randint(0, 4, (30,))
    fused, eager = both_paths(sampler, samples, skewed_log_weights(12), x, y, chunk_size=5)
    assert eager.log_probs.min() < -200.0  # the regime this test is about
    *_, underflow = FusedPredictive.of(sampler, samples, x).tile(x, skewed_log_weights(12), 5)
    assert 0 < underflow.sum() < len(underflow)  # those points in log space, the others from the kernel
    assert torch.isfinite(fused.log_probs).all()
    assert_same_predictive(fused, eager, atol=1e-3)  # float32 logs of magnitude ~1e3


def test_fused_predictive_of_a_sequential_stack_with_flattened_images():
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 9), nn.Tanh(), nn.Linear(9, 3))
    sampler = SGMCMC(model, Categorical(3), num_data=50)
    samples = draws(sampler, 10)
    x, y = torch.randn(17, 3, 2, 2), torch.randint(0, 3, (17,))
    assert FusedPredictive.of(sampler, samples, x) is not None
    assert_same_predictive(*both_paths(sampler, samples, skewed_log_weights(10), x, y))


class ScaledOutputs(SGMCMC):
    """A sampler whose outputs are not its network's."""

    def outputs(self, params, x):
        return 2.0 * super().outputs(params, x)


class ShiftedMLP(MLP):
    """A model whose stacked forward is not the MLP's."""

    def stacked_forward(self, params, x):
        return super().stacked_forward(params, x) + 1.0


@pytest.mark.parametrize("case", ["float64", "gelu", "regression", "no bias", "too wide", "mixed activations",
                                  "own outputs", "own stacked forward", "not vectorized"])
def test_fused_predictive_does_not_apply_where_it_cannot(case):
    widths = [4, MAX_PLUS_ONE, 3] if case == "too wide" else [4, 6, 3]
    likelihood = Gaussian(1.0) if case == "regression" else Categorical(widths[-1])
    if case == "no bias":
        model = nn.Sequential(nn.Linear(4, 6, bias=False), nn.Sigmoid(), nn.Linear(6, 3))
    elif case == "mixed activations":
        model = nn.Sequential(nn.Linear(4, 6), nn.Sigmoid(), nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 3))
    elif case == "own stacked forward":
        model = ShiftedMLP(widths)
    else:
        model = MLP(widths, activation="gelu" if case == "gelu" else "sigmoid")
    sampler_class = ScaledOutputs if case == "own outputs" else SGMCMC
    sampler = sampler_class(model, likelihood, num_data=50, vectorize=case != "not vectorized")
    dtype = torch.float64 if case == "float64" else torch.float32
    samples, x = draws(sampler, 6, dtype=dtype), torch.randn(9, 4, dtype=dtype)
    assert FusedPredictive.of(sampler, samples, x) is None


def test_without_a_compiler_the_eager_path_runs(monkeypatch, tmp_path):
    sampler = SGMCMC(MLP([4, 6, 3]), Categorical(3), num_data=50)
    samples, x, y = draws(sampler, 7), torch.randn(11, 4), torch.randint(0, 3, (11,))
    expected = marginal_predictive(sampler, samples, skewed_log_weights(7), x, y, fused=False)
    monkeypatch.setenv("CC", "false")  # a compiler that always fails
    with kernel_built_in(tmp_path, monkeypatch, fused_tile_kernel):
        assert fused_tile_kernel((6, 3), 0) is None
        assert FusedPredictive.of(sampler, samples, x) is None
        got = marginal_predictive(sampler, samples, skewed_log_weights(7), x, y)
        assert not list(tmp_path.iterdir())  # no half-written library left behind
    for field in FIELDS:
        assert torch.equal(getattr(got, field), getattr(expected, field)), field


def test_the_kernel_is_built_once_into_the_cache_folder(monkeypatch, tmp_path):
    with kernel_built_in(tmp_path, monkeypatch, fused_tile_kernel):
        assert fused_tile_kernel((6, 3), 0) is not None
        built = list(tmp_path.glob("predictive_kernel-*.so"))
        assert len(built) == 1 and not list(tmp_path.glob("*.partial"))
        stamp = built[0].stat().st_mtime_ns
        fused_tile_kernel.cache_clear()
        assert fused_tile_kernel((6, 3), 0) is not None
        assert built[0].stat().st_mtime_ns == stamp  # loaded, not compiled again
        assert fused_tile_kernel((6, 3), 1) is not None  # another shape or activation: another library
        assert len(list(tmp_path.glob("predictive_kernel-*.so"))) == 2
