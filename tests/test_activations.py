"""TanhGELU's logistic form x sigma(2u) against aten's tanh GELU: values, gradients, grad modes, torch.func
and the OHSMC hand-written psi-gradient that reads its saved factor."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from lit_bayes import Bernoulli
from lit_bayes.models import PartialMLP, TanhGELU
from lit_bayes.models import activations


def _inputs(numel, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return 3.0 * torch.randn(numel, generator=gen, dtype=dtype)


def test_the_logistic_form_is_taken_only_for_large_float64_cpu_inputs():
    size = activations.LOGISTIC_MIN_NUMEL
    assert activations.uses_logistic_form(_inputs(size))
    assert not activations.uses_logistic_form(_inputs(size - 1))
    assert not activations.uses_logistic_form(_inputs(size, torch.float32))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_logistic_form_equals_the_tanh_gelu(dtype):
    x = torch.cat([_inputs(4 * activations.LOGISTIC_MIN_NUMEL, dtype), torch.tensor([0.0, -30.0, 30.0], dtype=dtype)])
    y, s = activations.logistic_gelu(x)
    # inputs up to ~12 in size; where aten's 0.5 x (1 + tanh u) cancels (large negative x), x sigma(2u) keeps digits
    tol = {"rtol": 1e-13, "atol": 1e-13} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(y, F.gelu(x, approximate="tanh"), **tol)
    upstream = _inputs(x.numel(), dtype, seed=1)
    torch.testing.assert_close(activations.logistic_gelu_backward(upstream, x, s),
                               torch.ops.aten.gelu_backward(upstream, x, approximate="tanh"), **tol)


def test_tanh_gelu_module_gives_the_same_bits_with_and_without_autograd_and_aten_gradients():
    x = _inputs(2 * activations.LOGISTIC_MIN_NUMEL).requires_grad_()
    module = TanhGELU()
    out = module(x)
    with torch.no_grad():
        assert torch.equal(module(x), out.detach())
    assert not torch.equal(out.detach(), F.gelu(x.detach(), approximate="tanh"))  # the logistic form was taken
    upstream = _inputs(x.numel(), seed=1)
    (got,) = torch.autograd.grad(out, x, upstream)
    torch.testing.assert_close(got, torch.ops.aten.gelu_backward(upstream, x.detach(), approximate="tanh"),
                               rtol=1e-13, atol=1e-13)
    small = _inputs(10, torch.float64)  # below the threshold: aten's kernel itself
    assert torch.equal(module(small), F.gelu(small, approximate="tanh"))


def test_logistic_form_passes_gradcheck_and_works_under_torch_func(monkeypatch):
    monkeypatch.setattr(activations, "LOGISTIC_MIN_NUMEL", 1)
    module = TanhGELU()
    x = _inputs(7).requires_grad_()
    assert torch.autograd.gradcheck(module, (x,))
    net = nn.Sequential(nn.Linear(3, 4), TanhGELU(), nn.Linear(4, 1)).double()
    stacked = {n: torch.stack([p.detach(), 1.5 * p.detach()]) for n, p in net.named_parameters()}
    inputs = _inputs(15).reshape(5, 3)
    batched = vmap(lambda p: functional_call(net, p, (inputs,)))(stacked)
    for j in range(2):
        single = functional_call(net, {n: p[j] for n, p in stacked.items()}, (inputs,))
        torch.testing.assert_close(batched[j], single, rtol=1e-14, atol=1e-14)
    loss = lambda p: functional_call(net, p, (inputs,)).square().sum()  # noqa: E731
    params = {n: p.detach().clone() for n, p in net.named_parameters()}
    expected = torch.autograd.grad(loss({n: p.requires_grad_() for n, p in params.items()}), list(params.values()))
    for got, want in zip(grad(loss)({n: p.detach() for n, p in params.items()}).values(), expected):
        torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-14)


def test_hand_written_psi_gradient_reads_the_saved_logistic_factor():
    """Above the threshold (64 particles x 20 points x 5 units): the taped forward gives particle_forward's
    outputs to the bit, and the hand-written psi-gradient equals autograd's through the logistic form."""
    torch.manual_seed(0)
    model = PartialMLP([2, 6, 5, 1], 1).double()
    gen = torch.Generator().manual_seed(1)
    phi = {n: torch.randn(64, *p.shape, generator=gen, dtype=torch.float64)
           for n, p in model.stochastic_parameters().items()}
    x = torch.randn(20, 2, generator=gen, dtype=torch.float64)
    target = torch.randint(2, (20,), generator=gen)
    weights = torch.rand(64, generator=gen, dtype=torch.float64)
    likelihood = Bernoulli()
    outputs = model.particle_forward(phi, x)
    expected = torch.autograd.grad(-(weights[:, None] * likelihood(outputs, target)).sum(),
                                   model.deterministic_parameters())
    taped, tape = model.taped_particle_forward(phi, x)
    assert [saved is not None for _, _, _, saved in tape.above] == [True, False]  # the GELU above took the form
    assert torch.equal(taped, outputs.detach())
    grads = model.psi_gradients(tape, likelihood.output_gradient(taped, target).mul_(-weights[:, None, None]))
    for p, g in zip(model.deterministic_parameters(), expected):
        torch.testing.assert_close(grads[p], g, rtol=1e-12, atol=1e-13)
