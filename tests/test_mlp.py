"""The stacked fast paths (MLP.stacked_forward, StackedLinear for nn.Linear / nn.Sequential models) equal a
vmap of functional_call (the reference), values and gradients."""
import pytest
import torch
from torch import nn

from lit_bayes import SGMCMC, Categorical
from lit_bayes.chains import stacked_call
from lit_bayes.linear_stack import StackedLinear
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


@pytest.mark.parametrize("activation", ["tanh", "sigmoid", "relu"])  # applied in place (linear_stack.IN_PLACE)
def test_stacked_forward_gradients_equal_reference(activation):
    model = MLP([3, 4, 4, 2], activation)
    generator = torch.Generator().manual_seed(1)
    base = {n: torch.randn(5, *p.shape, generator=generator) for n, p in model.named_parameters()}
    x = torch.randn(6, 3, generator=generator)
    grads = []
    for forward in (lambda p: model.stacked_forward(p, x), lambda p: stacked_call(model, p, x)):
        params = {n: p.clone().requires_grad_() for n, p in base.items()}
        forward(params).square().sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in params.values()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-5)


SEQUENTIAL = {
    "linear": (lambda: nn.Linear(3, 2), (6, 3)),
    "sequential": (lambda: nn.Sequential(nn.Linear(3, 5), nn.GELU(), nn.Linear(5, 4, bias=False), nn.Tanh(),
                                         nn.Linear(4, 2)), (6, 3)),
    "flatten": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.ReLU(), nn.Linear(5, 2)), (6, 3, 4)),
}


@pytest.mark.parametrize("name", sorted(SEQUENTIAL))
def test_stacked_linear_equals_vmap_reference_values_and_gradients(name):
    make, shape = SEQUENTIAL[name]
    model = make()
    stacked = StackedLinear.of(model)
    generator = torch.Generator().manual_seed(2)
    base = {n: torch.randn(5, *p.shape, generator=generator) for n, p in model.named_parameters()}
    x = torch.randn(*shape, generator=generator)
    assert stacked is not None and stacked.accepts(x)
    outputs, grads = [], []
    for forward in (lambda p: stacked(p, x), lambda p: stacked_call(model, p, x)):
        params = {n: p.clone().requires_grad_() for n, p in base.items()}
        out = forward(params)
        out.square().sum().backward()
        outputs.append(out.detach())
        grads.append(torch.cat([p.grad.flatten() for p in params.values()]))
    assert outputs[0].shape == outputs[1].shape == (5, shape[0], 2)
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-5)


def test_stacked_linear_leaves_other_models_and_inputs_to_vmap():
    assert StackedLinear.of(nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True), nn.Linear(4, 1))) is None
    assert StackedLinear.of(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))) is None
    assert StackedLinear.of(nn.Conv1d(1, 1, 3)) is None
    assert not StackedLinear.of(nn.Linear(3, 1)).accepts(torch.zeros(2, 5, 3))  # nn.Linear maps the last dim


def test_sampler_outputs_take_the_stacked_path_for_a_linear_model_and_vmap_otherwise():
    sampler = SGMCMC(nn.Linear(3, 2), Categorical(2), num_data=10, num_chains=4)
    generator = torch.Generator().manual_seed(3)
    params = {n: torch.randn(4, *p.shape, generator=generator) for n, p in sampler.template_parameters().items()}
    net, _ = sampler.split_parameters(params)
    for x, stacked in ((torch.randn(7, 3), True), (torch.randn(7, 2, 3), False)):  # nn.Linear on the last dim: vmap
        out = sampler.outputs(params, x)
        torch.testing.assert_close(out, stacked_call(sampler.model, net, x), rtol=1e-6, atol=1e-6)
        assert out.transpose(1, 2).is_contiguous() == stacked  # the stacked path's outputs are feature-major
