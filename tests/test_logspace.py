"""The exp2-based log-space reductions, the class-major label read and the unit-by-unit
likelihood equal torch's own (or the likelihood's forward)."""
from __future__ import annotations

import math

import pytest
import torch

from lit_bayes import Bernoulli, Categorical, Gaussian, logspace

INF = math.inf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logsumexp_equals_torch(dtype):
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 7, 9, generator=gen) * 40).to(dtype)
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            torch.testing.assert_close(logspace.logsumexp(x, dim, keepdim), torch.logsumexp(x, dim, keepdim))
    strided = x.transpose(1, 2)  # the FNBG path's class-major outputs
    torch.testing.assert_close(logspace.logsumexp(strided, -1), torch.logsumexp(strided, -1))


def test_logsumexp_infinities_and_nan_as_torch():
    x = torch.tensor([[-INF, -INF, -INF], [1.0, INF, 2.0], [math.nan, 1.0, 2.0], [1e30, 3e38, -3e38], [-INF, 0.0, 1.0]])
    torch.testing.assert_close(logspace.logsumexp(x, -1), torch.logsumexp(x, -1), equal_nan=True)


def test_logsumexp_overwrite_writes_over_its_input_and_gradient_is_softmax():
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    expected = torch.logsumexp(x, 1)
    scratch = x.clone()
    torch.testing.assert_close(logspace.logsumexp(scratch, 1, overwrite=True), expected)
    assert not torch.equal(scratch, x)
    leaf = x.clone().requires_grad_()
    logspace.logsumexp(leaf, 1).sum().backward()
    torch.testing.assert_close(leaf.grad, torch.softmax(x, 1))


def test_exp2_within_a_few_ulp_of_2_to_the_x_with_its_edges():
    x = torch.cat([torch.linspace(-126.0, 127.0, 200_001), torch.linspace(-1.0, 1.0, 10_001)])
    edges = torch.tensor([INF, -INF, math.nan, 200.0, 127.75, -126.5, -200.0])
    for exp2 in (logspace.exp2, torch.compile(logspace.exp2)):
        relative = (exp2(x).double() / torch.exp2(x.double()) - 1).abs()
        assert relative.max() <= 3e-7  # 2.4e-7 seen on a grid of 4M points: float32's eps is 1.2e-7
        torch.testing.assert_close(exp2(edges), torch.tensor([INF, 0.0, math.nan, INF, INF, 0.0, 0.0]), equal_nan=True)
    doubles = torch.linspace(-5.0, 5.0, 101, dtype=torch.float64)
    assert torch.equal(logspace.exp2(doubles), torch.exp2(doubles))  # float64: torch's own


def test_sigmoid_equals_torch_sigmoid_up_to_the_rounding_of_x_log2e():
    x = torch.linspace(-87.0, 87.0, 2001)  # beyond, both flush to 0 (tested below) or round to 1
    expected = torch.sigmoid(x.double())
    for sigmoid in (logspace.sigmoid, torch.compile(logspace.sigmoid)):
        relative = (sigmoid(x).double() / expected - 1).abs()
        assert (relative <= (x.double().abs() + 4) * 2.0**-23).all()
        edges = torch.tensor([INF, -INF, math.nan, -100.0, 100.0])
        torch.testing.assert_close(sigmoid(edges), torch.tensor([1.0, 0.0, math.nan, 0.0, 1.0]), equal_nan=True)


def test_categorical_reads_class_major_outputs_as_gather_and_sees_new_labels():
    gen = torch.Generator().manual_seed(2)
    likelihood = Categorical(4)
    outputs = torch.randn(3, 4, 50, generator=gen).transpose(1, 2)  # (C, B, k), class-major storage
    labels = torch.randint(4, (50,), generator=gen)
    reference = torch.log_softmax(outputs, -1).gather(-1, labels.expand(3, 50).unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(likelihood(outputs, labels), reference)
    torch.testing.assert_close(likelihood(outputs.contiguous(), labels), reference)
    torch.testing.assert_close(likelihood.log_prob_(outputs.clone(), labels), reference)
    labels.copy_(torch.randint(4, (50,), generator=gen))  # same tensor, new labels: the kept index is stale
    reference = torch.log_softmax(outputs, -1).gather(-1, labels.expand(3, 50).unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(likelihood(outputs, labels), reference)
    with torch.inference_mode():
        torch.testing.assert_close(likelihood(outputs, labels.clone()), reference)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_categorical_cross_entropy_layouts_equal_log_softmax_with_their_gradients(dtype):
    """One network's (B, C) logits and class-major stacked ones go through F.cross_entropy, point-major
    stacked ones through the logsumexp: values and gradients are log_softmax's, in every layout."""
    gen = torch.Generator().manual_seed(5)
    labels = torch.randint(6, (40,), generator=gen)
    storage = (torch.randn(3, 6, 40, generator=gen, dtype=torch.float64) * 5).to(dtype)
    for layout in ("single", "class-major", "point-major"):
        base = (storage[0].T.contiguous() if layout == "single" else
                storage.clone() if layout == "class-major" else storage.transpose(1, 2).contiguous()).requires_grad_()
        outputs = base.transpose(1, 2) if layout == "class-major" else base
        reference_base = base.detach().double().requires_grad_()
        reference_outputs = reference_base.transpose(1, 2) if layout == "class-major" else reference_base
        picked = torch.log_softmax(reference_outputs, -1).gather(
            -1, labels.expand(reference_outputs.shape[:-1]).unsqueeze(-1)).squeeze(-1)
        value = Categorical(6)(outputs, labels)
        weights = torch.linspace(-1, 2, value.numel(), dtype=torch.float64).reshape(value.shape)
        (value * weights.to(dtype)).sum().backward()
        (picked * weights).sum().backward()
        tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
        torch.testing.assert_close(value.double(), picked.detach(), **tolerance)
        torch.testing.assert_close(base.grad.double(), reference_base.grad, **tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cross_entropy_points", [1 << 16, 0])  # Categorical's cross-entropy branch, and not
def test_log_prob_unit_major_equals_forward_on_the_transposed_outputs(dtype, cross_entropy_points, monkeypatch):
    """Unit-major outputs (C, k, B) (the FNBG caches') give ``forward`` of their (C, B, k) view, through
    Categorical's cross-entropy (small C x B) and its logsumexp (above the threshold), and through the
    default for other likelihoods; ``output`` is left as it was unless ``overwrite``."""
    monkeypatch.setattr(Categorical, "CROSS_ENTROPY_MAX_POINTS", cross_entropy_points)
    gen = torch.Generator().manual_seed(4)
    labels = torch.randint(5, (60,), generator=gen)
    for likelihood, units, target in [(Categorical(5), 5, labels), (Gaussian(0.7), 1, torch.randn(60, generator=gen)),
                                      (Bernoulli(), 1, labels.remainder(2))]:
        outputs = (torch.randn(3, units, 60, generator=gen) * 4).to(dtype)
        kept = outputs.clone()
        expected = likelihood(outputs.transpose(1, 2).contiguous(), target)
        torch.testing.assert_close(likelihood.log_prob_unit_major(outputs, target), expected)
        torch.testing.assert_close(outputs, kept, rtol=0, atol=0)
        torch.testing.assert_close(likelihood.log_prob_unit_major(outputs, target, overwrite=True), expected)
    with pytest.raises(ValueError, match="Categorical expects num_classes=5"):
        Categorical(5).log_prob_unit_major(torch.zeros(2, 4, 60), labels)
    with pytest.raises(ValueError, match=r"target has shape \(59,\)"):
        Categorical(5).log_prob_unit_major(torch.zeros(2, 5, 60), labels[:59])


def test_log_prob_units_equals_forward_for_every_likelihood():
    """The unit-by-unit log-likelihood (the FNBG fused path's) equals ``forward`` on the stacked
    outputs: Categorical's own elementwise form, including infinite logits, and the stacking default."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 40, 4, generator=gen) * 20
    logits[0, :3] = torch.tensor([[-INF, 0.0, 1.0, 2.0], [-INF, -INF, -INF, -INF], [1e30, 3e38, -3e38, 0.0]])
    labels = torch.randint(4, (40,), generator=gen)
    labels[:3] = torch.tensor([0, 1, 1])
    categorical = Categorical(4)
    torch.testing.assert_close(categorical.log_prob_units(logits.unbind(-1), labels), categorical(logits, labels),
                               equal_nan=True)
    with pytest.raises(ValueError, match="got 3 output units, Categorical expects num_classes=4"):
        categorical.log_prob_units(logits.unbind(-1)[:3], labels)
    binary, bits = torch.randn(3, 40, 1, generator=gen), torch.randint(2, (40,), generator=gen)
    torch.testing.assert_close(Bernoulli().log_prob_units(binary.unbind(-1), bits), Bernoulli()(binary, bits))
