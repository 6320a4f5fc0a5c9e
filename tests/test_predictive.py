"""The vectorised posterior predictive equals a plain loop over samples; metrics equal hand values.

Reference paths here are deliberately naive: one ``functional_call`` per sample, probabilities
averaged in linear space (float32 for the probabilities, float64 for densities, entropies
and mixture moments), and metric values written out by hand.
"""
import math

import lightning as L
import pytest
import torch
from torch import nn
from torch.func import functional_call

from lit_bayes import SGMCMC, Bernoulli, Categorical, Gaussian, GaussianPrior
from lit_bayes.callbacks import PosteriorSamples, PredictiveMarginal, UncertaintyMetrics
from lit_bayes.data import TwoMoons
from lit_bayes.metrics import NLPD, BrierScore, PerSampleECE, PerSampleRMSE
from lit_bayes.models import MLP, MultinomialProbit
from lit_bayes.predictive import (Predictive, default_chunk_size, default_tile_points, marginal_predictive,
                                  uniform_log_weights)

NUM_SAMPLES = 23  # not a multiple of the chunk sizes below


# ------------------------------------------------------------------ helpers
def make_sampler(likelihood, widths, vectorize=True) -> SGMCMC:
    return SGMCMC(MLP(widths), likelihood, num_data=100, vectorize=vectorize)


def prior_draws(sampler, num, seed=0, variance=2.0) -> dict[str, torch.Tensor]:
    """``num`` stacked parameter sets (net.* and likelihood.*) drawn from N(0, variance)."""
    template = {n: p.detach() for n, p in sampler.template_parameters().items()}
    stacked = {n: p.unsqueeze(0).expand(num, *p.shape) for n, p in template.items()}
    return GaussianPrior(variance).sample(stacked, torch.Generator().manual_seed(seed))


def random_log_weights(num, seed=1) -> torch.Tensor:
    return torch.log_softmax(2.0 * torch.randn(num, generator=torch.Generator().manual_seed(seed)), dim=0)


def loop_outputs(sampler, samples, x) -> list[torch.Tensor]:
    """One plain forward per sample."""
    net, _ = sampler.split_parameters(samples)
    num = next(iter(net.values())).shape[0]
    return [functional_call(sampler.model, {n: p[s] for n, p in net.items()}, (x,)) for s in range(num)]


def class_probs(likelihood, output) -> torch.Tensor:
    if isinstance(likelihood, Bernoulli):
        p1 = torch.sigmoid(output[..., 0])
        return torch.stack([1.0 - p1, p1], dim=-1)
    return torch.softmax(output, dim=-1)


def loop_classification(sampler, samples, log_weights, x, y):
    """p_bar in float32 (sum_s w_s p_s), and float64 log p_bar(y), H[p_bar], MI."""
    weights = log_weights.exp()
    outputs = loop_outputs(sampler, samples, x)
    probs32 = torch.zeros(x.shape[0], 2 if isinstance(sampler.likelihood, Bernoulli) else outputs[0].shape[-1])
    probs64 = torch.zeros(probs32.shape, dtype=torch.float64)
    mean_entropy = torch.zeros(x.shape[0], dtype=torch.float64)
    for w, out in zip(weights, outputs):
        probs32 += w * class_probs(sampler.likelihood, out)
        p = class_probs(sampler.likelihood, out.double())
        probs64 += w.double() * p
        mean_entropy += w.double() * -(p * p.log()).sum(-1)
    entropy = -(probs64 * probs64.log()).sum(-1)
    log_prob_target = probs64.gather(1, y.long()[:, None]).squeeze(1).log()
    return probs32, log_prob_target, entropy, entropy - mean_entropy


def loop_regression(sampler, samples, log_weights, x, y):
    """Gaussian mixture mean, variance and log density in float64."""
    weights = log_weights.double().exp()
    outputs = loop_outputs(sampler, samples, x)
    log_std = samples.get("likelihood.log_noise_std")
    means = torch.stack([out.double()[:, 0] for out in outputs])  # (S, B)
    if log_std is None:
        var = torch.full_like(means, math.exp(2.0 * float(sampler.likelihood.log_noise_std)))
    else:
        var = torch.exp(2.0 * log_std.double())[:, None].expand_as(means)
    mean = (weights[:, None] * means).sum(0)
    variance = (weights[:, None] * (var + (means - mean) ** 2)).sum(0)
    density = (weights[:, None] * torch.exp(-0.5 * (y.double() - means) ** 2 / var) / torch.sqrt(2 * math.pi * var)).sum(0)
    return mean, variance, density.log()


CLASSIFIERS = {
    "categorical": (lambda: Categorical(4), [3, 6, 4]),
    "bernoulli": (lambda: Bernoulli(), [3, 6, 1]),
}


def classification_problem(name, seed=0):
    make, widths = CLASSIFIERS[name]
    sampler = make_sampler(make(), widths)
    samples = prior_draws(sampler, NUM_SAMPLES, seed)
    g = torch.Generator().manual_seed(seed + 10)
    x = torch.randn(17, 3, generator=g)
    y = torch.randint(widths[-1] if widths[-1] > 1 else 2, (17,), generator=g)
    return sampler, samples, x, y


# ------------------------------------------------------------------ vectorised == loop
@pytest.mark.parametrize("vectorize", [True, False], ids=["class_major", "point_major"])
@pytest.mark.parametrize("weighting", ["uniform", "weighted"])
@pytest.mark.parametrize("chunk_size", [1, 7, NUM_SAMPLES, None])
@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_classification_marginal_equals_loop(name, chunk_size, weighting, vectorize):
    """MLP.stacked_forward's outputs are class-major (a transposed view), the reference loop's point-major."""
    sampler, samples, x, y = classification_problem(name)
    sampler.vectorize = vectorize
    log_weights = uniform_log_weights(NUM_SAMPLES) if weighting == "uniform" else random_log_weights(NUM_SAMPLES)
    got = marginal_predictive(sampler, samples, log_weights, x, y, chunk_size=chunk_size)
    probs, log_prob_target, entropy, mutual_information = loop_classification(sampler, samples, log_weights, x, y)
    assert got.log_probs.shape == probs.shape
    torch.testing.assert_close(got.probs, probs, rtol=0, atol=1e-6)
    torch.testing.assert_close(got.log_prob_target.double(), log_prob_target, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.entropy.double(), entropy, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.mutual_information.double(), mutual_information, rtol=0, atol=1e-5)
    assert (got.mutual_information >= 0).all()
    assert (mutual_information > 1e-3).all()  # the samples disagree: the test would see a wrong MI


@pytest.mark.parametrize("make, outputs", [(lambda: Categorical(4), 4), (Bernoulli, 1),
                                           (lambda: MultinomialProbit(4, 0.5), 4)], ids=["categorical", "bernoulli", "probit"])
def test_classifiers_log_likelihood_is_their_class_log_probability_of_the_label(make, outputs):
    """The contract the predictive reads targets by: forward, log_prob_ and log_prob_units equal the label's
    entry of class_log_probs, and class_log_probs_and_entropy gives those and -sum p log p."""
    likelihood, g = make(), torch.Generator().manual_seed(5)
    out = 3.0 * torch.randn(2, 9, outputs, generator=g, dtype=torch.float64)
    y = torch.randint(2 if outputs == 1 else outputs, (9,), generator=g)
    log_probs = likelihood.class_log_probs(out)
    expected = log_probs.gather(-1, y.expand(2, 9).unsqueeze(-1)).squeeze(-1)
    for got in (likelihood(out, y), likelihood.log_prob_(out.clone(), y), likelihood.log_prob_units(out.unbind(-1), y)):
        torch.testing.assert_close(got, expected)
    both, entropy = likelihood.class_log_probs_and_entropy(out)
    torch.testing.assert_close(both, log_probs)
    torch.testing.assert_close(entropy, -(log_probs.exp() * log_probs).sum(-1))


def test_default_chunk_size_keeps_about_2e5_sample_points_per_chunk_on_cpu():
    assert default_tile_points(10_000, torch.device("cpu")) == 2_000 and default_tile_points(10_000, "cuda") == 10_000
    assert default_chunk_size(10_000, torch.device("cpu")) == 20
    assert default_chunk_size(1_000, "cpu") == 200
    assert default_chunk_size(10**7, "cpu") == 1
    assert default_chunk_size(10_000, "cuda") == 256


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_results_do_not_depend_on_chunk_size(name):
    sampler, samples, x, y = classification_problem(name, seed=3)
    log_weights = random_log_weights(NUM_SAMPLES, seed=4)
    results = [marginal_predictive(sampler, samples, log_weights, x, y, chunk_size=c) for c in (1, 7, NUM_SAMPLES, 1000)]
    for other in results[1:]:
        for field in ("log_probs", "log_prob_target", "entropy", "mutual_information"):
            torch.testing.assert_close(getattr(other, field), getattr(results[0], field), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_point_tiles_give_the_one_pass_predictive(name):
    """Tiles of points (on CPU by default; here 5, 5, 5 and 2 of 17 points) give the values of one pass over
    all points, the per-sample log-probabilities (points on their second dimension) included."""
    sampler, samples, x, y = classification_problem(name, seed=3)
    log_weights = random_log_weights(NUM_SAMPLES, seed=4)
    whole, tiled = (marginal_predictive(sampler, samples, log_weights, x, y, chunk_size=7, keep_per_sample=True,
                                        tile_points=tile) for tile in (17, 5))
    for field in ("log_probs", "log_prob_target", "entropy", "mutual_information", "sample_log_probs"):
        assert getattr(tiled, field).shape == getattr(whole, field).shape, field
        torch.testing.assert_close(getattr(tiled, field), getattr(whole, field), rtol=1e-6, atol=1e-6)  # float32 products


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_identical_samples_have_zero_mutual_information(name):
    sampler, samples, x, y = classification_problem(name)
    same = {n: p[:1].expand(NUM_SAMPLES, *p.shape[1:]).clone() for n, p in samples.items()}
    got = marginal_predictive(sampler, same, uniform_log_weights(NUM_SAMPLES), x, y, chunk_size=7)
    single = class_probs(sampler.likelihood, loop_outputs(sampler, {n: p[:1] for n, p in same.items()}, x)[0])
    torch.testing.assert_close(got.probs, single, rtol=0, atol=1e-6)
    torch.testing.assert_close(got.mutual_information, torch.zeros(x.shape[0]), rtol=0, atol=1e-6)
    torch.testing.assert_close(got.entropy, -(single * single.log()).sum(-1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_per_sample_log_probs_and_reference_loop_path(name):
    sampler, samples, x, y = classification_problem(name)
    log_weights = uniform_log_weights(NUM_SAMPLES)
    got = marginal_predictive(sampler, samples, log_weights, x, y, chunk_size=7, keep_per_sample=True)
    expected = torch.stack([class_probs(sampler.likelihood, out) for out in loop_outputs(sampler, samples, x)])
    torch.testing.assert_close(got.sample_log_probs.exp(), expected, rtol=0, atol=1e-6)
    sampler.vectorize = False  # stacked_call's reference loop gives the same predictive
    looped = marginal_predictive(sampler, samples, log_weights, x, y, chunk_size=7)
    torch.testing.assert_close(looped.log_probs, got.log_probs, rtol=0, atol=1e-6)


@pytest.mark.parametrize("learn_noise", [False, True], ids=["fixed_noise", "learned_noise"])
@pytest.mark.parametrize("weighting", ["uniform", "weighted"])
@pytest.mark.parametrize("chunk_size, tile_points", [(1, None), (7, None), (NUM_SAMPLES, None), (7, 4)])
def test_regression_mixture_equals_loop(chunk_size, tile_points, weighting, learn_noise):
    sampler = make_sampler(Gaussian(noise_std=0.7, learn_noise=learn_noise), [2, 8, 1])
    samples = prior_draws(sampler, NUM_SAMPLES, seed=5, variance=1.0)
    assert ("likelihood.log_noise_std" in samples) == learn_noise
    g = torch.Generator().manual_seed(6)
    x, y = torch.randn(13, 2, generator=g), 2.0 * torch.randn(13, generator=g)
    log_weights = uniform_log_weights(NUM_SAMPLES) if weighting == "uniform" else random_log_weights(NUM_SAMPLES)
    got = marginal_predictive(sampler, samples, log_weights, x, y, chunk_size=chunk_size, keep_per_sample=True,
                              tile_points=tile_points)
    mean, variance, log_density = loop_regression(sampler, samples, log_weights, x, y)
    torch.testing.assert_close(got.mean.double(), mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.variance.double(), variance, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.log_prob_target.double(), log_density, rtol=0, atol=1e-5)
    outputs = torch.stack([out[:, 0] for out in loop_outputs(sampler, samples, x)])
    torch.testing.assert_close(got.sample_means, outputs, rtol=0, atol=1e-6)


def test_regression_mixture_variance_is_stable_for_large_means():
    sampler = SGMCMC(nn.Linear(1, 1), Gaussian(noise_std=0.1), num_data=10)
    g = torch.Generator().manual_seed(0)
    samples = {"net.weight": 0.1 * torch.randn(20, 1, 1, generator=g), "net.bias": 1000 + 0.1 * torch.randn(20, 1, generator=g)}
    x, y = torch.randn(6, 1, generator=g), 1000 + torch.randn(6, generator=g)
    got = marginal_predictive(sampler, samples, uniform_log_weights(20), x, y)
    _, variance, _ = loop_regression(sampler, samples, uniform_log_weights(20), x, y)
    torch.testing.assert_close(got.variance.double(), variance, rtol=1e-3, atol=0)


def test_issue_mlp_784_vectorised_equals_loop():
    """The issue's MLP(784, 10, 10, 10, 10) at reduced size: 200 samples x 2,000 points."""
    sampler = make_sampler(Categorical(10), [784, 10, 10, 10, 10])
    samples = prior_draws(sampler, 200, seed=7, variance=1.0)
    x = torch.rand(2_000, 784, generator=torch.Generator().manual_seed(8))
    got = marginal_predictive(sampler, samples, uniform_log_weights(200), x, chunk_size=64)
    reference = torch.zeros(2_000, 10)
    for out in loop_outputs(sampler, samples, x):
        reference += torch.softmax(out, dim=-1)
    reference /= 200
    assert (got.probs - reference).abs().max() <= 1e-6


# ------------------------------------------------------------------ metrics by hand
class StubModule:
    """What UncertaintyMetrics needs of a sampler: its likelihood, device and ``log``."""

    def __init__(self, likelihood):
        self.likelihood = likelihood
        self.device = torch.device("cpu")
        self.logged: dict[str, float] = {}

    def log(self, name, value, **kwargs):
        self.logged[name] = float(value)


def score(predictive, target, likelihood=None, **options):
    module = StubModule(likelihood or Categorical(predictive.log_probs.shape[-1]))
    metrics = UncertaintyMetrics(**options)
    metrics.on_predictive(None, module, "test", predictive, target)
    metrics.on_test_epoch_end(None, module)
    return module.logged


# Five points, three classes. Top-label confidence, predicted class, correct?, bin (15 bins of width 1/15):
#   0: [0.82, 0.13, 0.05] y=0 -> 0.82, class 0, correct; 0.82 * 15 = 12.30 -> bin 12
#   1: [0.10, 0.85, 0.05] y=0 -> 0.85, class 1, wrong;   0.85 * 15 = 12.75 -> bin 12
#   2: [0.50, 0.30, 0.20] y=1 -> 0.50, class 0, wrong;   0.50 * 15 =  7.50 -> bin 7
#   3: [0.26, 0.33, 0.41] y=2 -> 0.41, class 2, correct; 0.41 * 15 =  6.15 -> bin 6
#   4: [0.05, 0.03, 0.92] y=2 -> 0.92, class 2, correct; 0.92 * 15 = 13.80 -> bin 13
HAND_PROBS = torch.tensor(
    [[0.82, 0.13, 0.05], [0.10, 0.85, 0.05], [0.50, 0.30, 0.20], [0.26, 0.33, 0.41], [0.05, 0.03, 0.92]]
)
HAND_TARGET = torch.tensor([0, 0, 1, 2, 2])
# bin 12: mean confidence (0.82 + 0.85) / 2 = 0.835, accuracy 1/2, weight 2/5 -> 0.4 * 0.335 = 0.134
# bin 7: 0.50 vs 0, bin 6: 0.41 vs 1, bin 13: 0.92 vs 1, each weight 1/5 -> 0.2 * (0.50 + 0.59 + 0.08) = 0.234
HAND_ECE = 0.4 * abs(0.835 - 0.5) + 0.2 * (abs(0.50 - 0.0) + abs(0.41 - 1.0) + abs(0.92 - 1.0))  # = 0.368
# Brier: ||p - onehot(y)||^2 per point
HAND_BRIER = (
    (0.18**2 + 0.13**2 + 0.05**2)  # 0.0518
    + (0.90**2 + 0.85**2 + 0.05**2)  # 1.5350
    + (0.50**2 + 0.70**2 + 0.20**2)  # 0.7800
    + (0.26**2 + 0.33**2 + 0.59**2)  # 0.5246
    + (0.05**2 + 0.03**2 + 0.08**2)  # 0.0098
) / 5  # = 0.58024
HAND_NLPD = -(math.log(0.82) + math.log(0.10) + math.log(0.30) + math.log(0.41) + math.log(0.92)) / 5
HAND_ACCURACY = 3 / 5


def test_hand_values_are_what_the_comments_say():
    assert HAND_ECE == pytest.approx(0.368, abs=1e-12)
    assert HAND_BRIER == pytest.approx(0.58024, abs=1e-12)


def test_uncertainty_metrics_match_hand_values():
    log_probs = HAND_PROBS.log()
    predictive = Predictive(log_probs=log_probs, log_prob_target=log_probs.gather(1, HAND_TARGET[:, None]).squeeze(1))
    logged = score(predictive, HAND_TARGET, n_bins=15)
    assert logged["test/accuracy"] == pytest.approx(HAND_ACCURACY, abs=1e-6)
    assert logged["test/nlpd"] == pytest.approx(HAND_NLPD, abs=1e-6)
    assert logged["test/ece"] == pytest.approx(HAND_ECE, abs=1e-6)
    assert logged["test/brier"] == pytest.approx(HAND_BRIER, abs=1e-6)


def test_nlpd_and_brier_metrics_directly():
    nlpd = NLPD()
    nlpd.update(torch.tensor([math.log(0.9), math.log(0.5)]))
    nlpd.update(torch.tensor([math.log(0.2), math.log(0.7)]))
    assert float(nlpd.compute()) == pytest.approx(-(math.log(0.9) + math.log(0.5) + math.log(0.2) + math.log(0.7)) / 4)
    brier = BrierScore()
    brier.update(HAND_PROBS[:2], HAND_TARGET[:2])
    brier.update(HAND_PROBS[2:], HAND_TARGET[2:])
    assert float(brier.compute()) == pytest.approx(HAND_BRIER, abs=1e-6)


def test_nlpd_of_a_confident_wrong_prediction_is_finite():
    nlpd = NLPD()
    nlpd.update(torch.tensor([-200.0]))
    assert float(nlpd.compute()) == 200.0
    # Through the predictive: logits (0, 200) and label 0 give log p_bar(y) = -200 in log space, not log(0).
    for likelihood, model, bias in ((Categorical(2), nn.Linear(1, 2), [0.0, 200.0]), (Bernoulli(), nn.Linear(1, 1), [200.0])):
        sampler = SGMCMC(model, likelihood, num_data=10)
        samples = {"net.weight": torch.zeros(1, *model.weight.shape), "net.bias": torch.tensor([bias])}
        got = marginal_predictive(sampler, samples, uniform_log_weights(1), torch.randn(3, 1), torch.zeros(3, dtype=torch.long))
        assert torch.equal(got.log_prob_target, torch.full((3,), -200.0))
        assert score(got, torch.zeros(3, dtype=torch.long), likelihood)["test/nlpd"] == 200.0


# Per-sample ECE, two samples of three two-class points, 15 bins:
#   sample A: [0.90, 0.10] y=0 -> 0.90 correct (bin 13); [0.30, 0.70] y=0 -> 0.70 wrong (bin 10);
#             [0.62, 0.38] y=1 -> 0.62 wrong (bin 9): ECE_A = (0.10 + 0.70 + 0.62) / 3
#   sample B: [0.55, 0.45] y=0 -> 0.55 correct (bin 8); [0.18, 0.82] y=0 -> 0.82 wrong (bin 12);
#             [0.45, 0.55] y=1 -> 0.55 correct (bin 8): ECE_B = 2/3 * |0.55 - 1| + 1/3 * |0.82 - 0|
PER_SAMPLE_PROBS = torch.tensor(
    [[[0.90, 0.10], [0.30, 0.70], [0.62, 0.38]], [[0.55, 0.45], [0.18, 0.82], [0.45, 0.55]]]
)
PER_SAMPLE_TARGET = torch.tensor([0, 0, 1])
HAND_PER_SAMPLE_ECE = ((0.10 + 0.70 + 0.62) / 3 + (2 / 3 * 0.45 + 1 / 3 * 0.82)) / 2  # = 0.52333...


def test_per_sample_ece_by_hand():
    metric = PerSampleECE(num_samples=2, n_bins=15)
    metric.update(PER_SAMPLE_PROBS[:, :2], PER_SAMPLE_TARGET[:2])  # two updates: states accumulate
    metric.update(PER_SAMPLE_PROBS[:, 2:], PER_SAMPLE_TARGET[2:])
    assert float(metric.compute()) == pytest.approx(HAND_PER_SAMPLE_ECE, abs=1e-6)
    # The same through UncertaintyMetrics, fed a Predictive that keeps per-sample predictives.
    mean = PER_SAMPLE_PROBS.mean(0)
    predictive = Predictive(
        log_probs=mean.log(),
        log_prob_target=mean.log().gather(1, PER_SAMPLE_TARGET[:, None]).squeeze(1),
        sample_log_probs=PER_SAMPLE_PROBS.log(),
    )
    logged = score(predictive, PER_SAMPLE_TARGET, n_bins=15, per_sample=True)
    assert logged["test/ece_per_sample"] == pytest.approx(HAND_PER_SAMPLE_ECE, abs=1e-6)
    # per-sample accuracy: A gets 1 of 3 right, B 2 of 3
    assert logged["test/accuracy_per_sample"] == pytest.approx((1 / 3 + 2 / 3) / 2, abs=1e-6)


def test_per_sample_rmse_by_hand_and_against_the_noise_free_function():
    """Two samples predicting means (0, 1) and (2, 2) for targets (0, 0):
    RMSEs sqrt(1/2) and 2, mean (sqrt(0.5) + 2) / 2."""
    metric = PerSampleRMSE(num_samples=2)
    metric.update(torch.tensor([[0.0, 1.0], [2.0, 2.0]]), torch.zeros(2))
    assert float(metric.compute()) == pytest.approx((0.5**0.5 + 2) / 2)
    with pytest.raises(ValueError, match="rmse_reference"):
        UncertaintyMetrics(rmse_reference="truth")


def test_confident_predictions_keep_probabilities_at_most_one_and_ece_zero():
    sampler = SGMCMC(nn.Linear(1, 2), Categorical(2), num_data=10)
    samples = {"net.weight": torch.zeros(7, 2, 1), "net.bias": torch.tensor([[30.0, 0.0]]).repeat(7, 1)}
    target = torch.zeros(4, dtype=torch.long)
    got = marginal_predictive(sampler, samples, uniform_log_weights(7), torch.randn(4, 1), target)
    ece = score(got, target)["test/ece"]
    assert ece == pytest.approx(0.0, abs=1e-6)
    assert (got.probs <= 1).all()


# ------------------------------------------------------------------ end to end
def top_label_ece(probs, target, n_bins=15) -> float:
    confidence, predicted = probs.max(-1)
    correct = (predicted == target).double()
    bins = (confidence * n_bins).long().clamp(max=n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        members = bins == b
        if members.any():
            total += members.double().mean() * (confidence[members].double().mean() - correct[members].mean()).abs()
    return float(total)


@pytest.fixture(scope="module")
def fitted_moons(tmp_path_factory):
    data = TwoMoons(num_train=40, num_val=20, num_test=30, batch_size=20, eval_batch_size=16, seed=0)
    sampler = SGMCMC(MLP([2, 8, 2]), Categorical(2), step_size=1e-2, num_chains=2, burn_in=5, thinning=2, seed=0)
    store = PosteriorSamples(max_draws=100)
    trainer = L.Trainer(
        max_steps=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu", devices=1, default_root_dir=tmp_path_factory.mktemp("moons"),
        callbacks=[store, PredictiveMarginal(chunk_size=3), UncertaintyMetrics(n_bins=15)],
    )
    trainer.fit(sampler, datamodule=data)
    return trainer, sampler, store, data


def hand_predictive(sampler, store, x):
    """Plain loop over the kept samples: average of softmax probabilities in float64."""
    samples, log_weights = store.samples(sampler)
    assert torch.allclose(log_weights.exp(), torch.full_like(log_weights, 1 / log_weights.shape[0]))
    outputs = loop_outputs(sampler, samples, x)
    return sum(torch.softmax(out.double(), -1) for out in outputs) / len(outputs)


def test_fit_then_test_logs_metrics_equal_to_hand_computation(fitted_moons):
    trainer, sampler, store, data = fitted_moons
    # steps 1..20, burn-in 5, thinning 2: kept after steps 6, 8, ..., 20 -> 8 draws x 2 chains
    assert store.num_draws == 8
    assert "val/nlpd" in trainer.callback_metrics
    logged = trainer.test(sampler, datamodule=data, verbose=False)[0]
    x, y = data.test_data.tensors
    probs = hand_predictive(sampler, store, x)
    assert logged["test/accuracy"] == pytest.approx(float((probs.argmax(-1) == y).double().mean()), abs=1e-6)
    assert logged["test/nlpd"] == pytest.approx(float(-probs.gather(1, y[:, None]).log().mean()), abs=1e-5)
    onehot = torch.nn.functional.one_hot(y, 2).double()
    assert logged["test/brier"] == pytest.approx(float(((probs - onehot) ** 2).sum(-1).mean()), abs=1e-5)
    assert logged["test/ece"] == pytest.approx(top_label_ece(probs, y), abs=1e-5)
    assert logged["test/ece"] > 0 and logged["test/nlpd"] > 0  # not trivially zero


def test_trainer_predict_returns_the_marginal_of_the_kept_samples(fitted_moons):
    trainer, sampler, store, data = fitted_moons
    batches = trainer.predict(sampler, datamodule=data)
    assert all(isinstance(b, Predictive) for b in batches)
    log_probs = torch.cat([b.log_probs for b in batches])
    x, _ = data.test_data.tensors
    assert log_probs.shape == (x.shape[0], 2)
    torch.testing.assert_close(log_probs.double(), hand_predictive(sampler, store, x).log(), rtol=0, atol=1e-5)


def test_memory_store_ring_keeps_the_last_draws_in_order_across_a_checkpoint():
    from lit_bayes.callbacks.sample_store import MemoryStore

    full, split = MemoryStore(3, "last"), MemoryStore(3, "last")
    for i in range(7):
        full.append(torch.full((2,), float(i)))
    for i in range(5):
        split.append(torch.full((2,), float(i)))
    resumed = MemoryStore(3, "last")
    resumed.load_state_dict(split.state_dict())
    for i in range(5, 7):
        resumed.append(torch.full((2,), float(i)))
    assert full.draws()[:, 0].tolist() == [4.0, 5.0, 6.0]
    assert torch.equal(resumed.draws(), full.draws())
    reservoir = MemoryStore(3, "reservoir", seed=1)
    for i in range(50):
        reservoir.append(torch.tensor([float(i)]))
    kept = reservoir.draws()[:, 0].tolist()
    assert len(kept) == 3 and len(set(kept)) == 3 and all(0 <= k < 50 for k in kept)



def test_memory_store_resumed_with_another_max_draws():
    """A checkpoint read by a store of another size: a ring keeps the newest draws that fit (with a warning) or
    grows and fills on; a reservoir keeps a uniform subset, and refuses to grow once it was full."""
    from lit_bayes.callbacks.sample_store import MemoryStore

    ring = MemoryStore(4, "last")
    for i in range(6):
        ring.append(torch.full((2,), float(i)))  # keeps 2, 3, 4, 5
    smaller = MemoryStore(3, "last")
    with pytest.warns(UserWarning, match="holds 4 kept draws, more than max_draws=3: keeping the newest 3"):
        smaller.load_state_dict(ring.state_dict())
    smaller.append(torch.full((2,), 6.0))
    assert smaller.draws()[:, 0].tolist() == [4.0, 5.0, 6.0] and smaller.seen == 7
    larger = MemoryStore(6, "last")
    larger.load_state_dict(ring.state_dict())
    for i in range(6, 9):
        larger.append(torch.full((2,), float(i)))
    assert larger.draws()[:, 0].tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]

    reservoir = MemoryStore(5, "reservoir", seed=1)
    for i in range(40):
        reservoir.append(torch.tensor([float(i)]))
    saved = reservoir.draws()[:, 0].tolist()
    subset = MemoryStore(2, "reservoir", seed=1)
    with pytest.warns(UserWarning, match="keeping a uniform subset of 2"):
        subset.load_state_dict(reservoir.state_dict())
    kept = subset.draws()[:, 0].tolist()
    assert len(kept) == 2 and set(kept) <= set(saved) and subset.seen == 40
    counts = torch.zeros(5)  # over many runs, every slot of the saved reservoir is kept with probability 2 / 5
    for seed in range(1000):
        run = MemoryStore(5, "reservoir", seed=seed)
        for i in range(40):
            run.append(torch.tensor([float(i)]))
        slots = {value: slot for slot, value in enumerate(run.draws()[:, 0].tolist())}
        shrunk = MemoryStore(2, "reservoir")
        with pytest.warns(UserWarning):
            shrunk.load_state_dict(run.state_dict())
        counts[[slots[value] for value in shrunk.draws()[:, 0].tolist()]] += 1
    assert torch.allclose(counts / 1000, torch.full((5,), 0.4), atol=0.07)  # 4.5 binomial std
    with pytest.raises(ValueError, match="max_draws=8 is larger than the full reservoir of 5 draws"):
        MemoryStore(8, "reservoir").load_state_dict(reservoir.state_dict())
    unfilled = MemoryStore(5, "reservoir")
    for i in range(3):
        unfilled.append(torch.tensor([float(i)]))
    grown = MemoryStore(8, "reservoir")
    grown.load_state_dict(unfilled.state_dict())  # every draw seen is kept: it may grow
    assert grown.draws()[:, 0].tolist() == [0.0, 1.0, 2.0]