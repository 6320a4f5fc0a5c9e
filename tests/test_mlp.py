"""MLP.stacked_forward (the fast path) equals a vmap of functional_call (the reference)."""
import pytest
import torch

from lit_bayes.chains import stacked_call
from lit_bayes.models import MLP


@pytest.mark.parametrize("widths, activation, shape", [
    ([784, 10, 10, 10, 10], "sigmoid", (32, 784)),
    ([2, 2, 1], "tanh", (7, 2)),
    ([12, 5, 3], "relu", (4, 3, 2, 2)),  # image-like inputs are flattened
])
def test_stacked_forward_equals_vmap_reference(widths, activation, shape):
    model = MLP(widths, activation)
    generator = torch.Generator().manual_seed(0)
    params = {n: torch.randn(9, *p.shape, generator=generator) for n, p in model.named_parameters()}
    x = torch.randn(*shape, generator=generator)
    fast = model.stacked_forward(params, x)
    reference = stacked_call(model, params, x, vectorize=True)
    assert fast.shape == reference.shape == (9, shape[0], widths[-1])
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)


def test_stacked_forward_gradients_equal_reference():
    model = MLP([3, 4, 2], "tanh")
    generator = torch.Generator().manual_seed(1)
    base = {n: torch.randn(5, *p.shape, generator=generator) for n, p in model.named_parameters()}
    x = torch.randn(6, 3, generator=generator)
    grads = []
    for forward in (lambda p: model.stacked_forward(p, x), lambda p: stacked_call(model, p, x)):
        params = {n: p.clone().requires_grad_() for n, p in base.items()}
        forward(params).square().sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in params.values()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-5)
