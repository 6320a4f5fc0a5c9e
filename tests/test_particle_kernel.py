"""The particle kernel (lit_bayes.models.particle_kernel): a partial BNN's outputs for J particles and psi's
gradient in one C call each equal the torch path (the taped forward and the hand-written backward, themselves
tested against autograd in test_feynman_kac.py), where it applies; elsewhere the torch path runs."""
from __future__ import annotations


import pytest
import torch
from torch import nn

from lit_bayes import OHSMC, Bernoulli
from lit_bayes.models import PartialBNN, PartialMLP
from lit_bayes.models import particle_kernel
from lit_bayes.models.activations import TanhGELU
from lit_bayes.models.particle_kernel import MAX_WIDTH, ParticleNetwork, particle_network_kernel
from tests.test_feynman_kac import moons_batches, ohsmc_after_steps
from tests.kernel_builds import kernel_built_in, processor_has_avx512

RELATIVE = {torch.float64: 1e-12, torch.float32: 2e-5}


def assert_close_to_scale(actual, expected, msg=None):
    """Equal within RELATIVE of the dtype, absolute errors counted against the largest magnitude (sums of many terms
    of both signs, in another order than the torch path's)."""
    tolerance = RELATIVE[expected.dtype]
    torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance * max(expected.abs().max().item(), 1.0),
                               msg=msg)


def _networks():
    """PartialBNNs of every activation the kernel knows, the stochastic layer first, in the middle and last, layers
    without a bias, an identity and two linear layers in a row, a width of MAX_WIDTH, and the moons network."""
    for activation in ("gelu_tanh", "relu", "tanh"):
        for stochastic_layer in (0, 1, 3):
            yield f"{activation}-{stochastic_layer}", lambda a=activation, k=stochastic_layer: PartialMLP(
                [3, 9, 6, 5, 2], k, activation=a)
    yield "sigmoid-no-bias", lambda: PartialBNN(nn.Sequential(
        nn.Linear(3, 4, bias=False), nn.Sigmoid(), nn.Linear(4, 5, bias=False), nn.Identity(), nn.Linear(5, 2),
        nn.GELU(approximate="tanh"), nn.Linear(2, 3, bias=False)), "2")
    yield "linear-linear", lambda: PartialBNN(nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 5), TanhGELU(),
                                                            nn.Linear(5, 1)), "1")
    yield "widest", lambda: PartialMLP([MAX_WIDTH, MAX_WIDTH, 3, 1], 1)
    yield "moons", lambda: PartialMLP([2, 100, 20, 5, 1], 2)


def _phi(model: PartialBNN, num: int, gen: torch.Generator, dtype: torch.dtype, scale: float = 1.0):
    return {n: scale * torch.randn(num, *p.shape, generator=gen, dtype=dtype)
            for n, p in model.stochastic_parameters().items()}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name, make", list(_networks()))
def test_kernel_equals_the_torch_path(name, make, dtype):
    """Outputs and psi's gradients of the kernel equal the torch path's for batches of 1, of fewer points than a
    vector holds and of several vectors with a partial last one, and 1 to 37 particles."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(1)
    model = make().to(dtype)
    assert model.particle_network is not None
    width_in = model.particle_network.linears[0].in_features
    for points, num in [(1, 1), (5, 3), (37, 37)]:
        phi = _phi(model, num, gen, dtype)
        x = 2.0 * torch.randn(points, width_in, generator=gen, dtype=dtype)
        plain, plain_tape = model.taped_particle_forward(phi, x)
        fused, fused_tape = model.taped_particle_forward(phi, x, fused=True)
        assert plain_tape.fused is None and fused_tape.fused is not None
        assert_close_to_scale(fused, plain)
        grad = torch.randn(plain.shape, generator=gen, dtype=dtype)
        expected = model.psi_gradients(plain_tape, grad)
        grads = model.psi_gradients(fused_tape, grad)
        assert set(grads) == set(expected) == set(model.deterministic_parameters())
        for p, g in expected.items():
            assert grads[p].shape == g.shape and grads[p].dtype == dtype
            assert_close_to_scale(grads[p], g, msg=f"{name}, {points} points, {num} particles")


@pytest.mark.parametrize("activation", ["gelu_tanh", "tanh", "relu"])
def test_saturated_and_nan_units_equal_the_torch_path(activation):
    """Pre-activations far beyond the exponential's range (|a| ~ 1e3 to 1e5) give the torch path's values, and a
    particle with a NaN weight NaN outputs where torch has them, the other particles' outputs unchanged, and NaN
    gradients where torch has them."""
    gen = torch.Generator().manual_seed(0)
    model = PartialMLP([2, 6, 4, 1], 1, activation=activation).double()
    phi = _phi(model, 6, gen, torch.float64, scale=300.0)
    x = 50.0 * torch.randn(9, 2, generator=gen, dtype=torch.float64)
    plain, plain_tape = model.taped_particle_forward(phi, x)
    assert plain_tape.above[0][1].abs().max() > 700.0  # the regime this test is about: the activation's inputs
    fused, fused_tape = model.taped_particle_forward(phi, x, fused=True)
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-9)
    phi["2.weight"][2, 1, 0] = float("nan")
    plain, plain_tape = model.taped_particle_forward(phi, x)
    fused, fused_tape = model.taped_particle_forward(phi, x, fused=True)
    assert plain[2].isnan().all()
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-9, equal_nan=True)
    grad = torch.randn(plain.shape, generator=gen, dtype=torch.float64)
    expected = model.psi_gradients(plain_tape, grad)
    # below a ReLU's zero derivative the kernel's 0 * NaN is NaN, as elementwise IEEE arithmetic has it, where the
    # torch path's products (MKL) may give a number: there only the output layer's gradients compare
    compared = model.net[-1].parameters() if activation == "relu" else model.deterministic_parameters()
    grads = model.psi_gradients(fused_tape, grad)
    for p in compared:
        torch.testing.assert_close(grads[p], expected[p], rtol=1e-12, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("activation", [nn.GELU(approximate="tanh"), nn.Sigmoid(), nn.Tanh()])
def test_units_saturated_past_the_exponentials_range_give_torchs_values_exactly(activation, dtype):
    """Pre-activations of -800 to -750: the GELU's logistic factor and the sigmoid are far below the smallest normal
    number, and the kernel's exponential gives 0 there, as torch's does, not a subnormal number (whose arithmetic
    takes the processor's slow path): outputs equal to the bit (0 for the GELU and the sigmoid, -3 for tanh)."""
    model = PartialBNN(nn.Sequential(nn.Linear(2, 3), activation, nn.Linear(3, 1)), "0").to(dtype)
    nn.init.ones_(model.net[2].weight)
    nn.init.zeros_(model.net[2].bias)
    bias = torch.linspace(-800, -750, 12, dtype=dtype).view(4, 3)
    phi = {"0.weight": torch.zeros(4, 3, 2, dtype=dtype), "0.bias": bias}
    x = torch.randn(9, 2, dtype=dtype)
    plain, _ = model.taped_particle_forward(phi, x)
    fused, tape = model.taped_particle_forward(phi, x, fused=True)
    assert tape.fused is not None and torch.equal(fused, plain)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("fused", [True, False])
def test_particles_with_zero_output_gradients_add_nothing_even_when_nan(dtype, fused):
    """A particle whose output gradients are all 0 (no weight) adds nothing to psi's gradient, even with NaN or
    infinite parameters (not 0 x NaN): the gradient equals that of the other particles alone, in the kernel and on
    the torch path."""
    gen = torch.Generator().manual_seed(0)
    model = PartialMLP([3, 9, 6, 5, 2], 2).to(dtype)
    phi, x = _phi(model, 7, gen, dtype), torch.randn(11, 3, generator=gen, dtype=dtype)
    grad = torch.randn(7, 11, 2, generator=gen, dtype=dtype)
    grad[[1, 4]] = 0.0
    phi["4.weight"][1, 0, 0], phi["4.bias"][4, 2] = float("nan"), float("inf")
    _, tape = model.taped_particle_forward(phi, x, fused=fused)
    others = [0, 2, 3, 5, 6]
    _, plain_tape = model.taped_particle_forward({n: p[others] for n, p in phi.items()}, x)
    expected = model.psi_gradients(plain_tape, grad[others])
    for p, g in model.psi_gradients(tape, grad).items():
        assert_close_to_scale(g, expected[p])


@pytest.mark.parametrize("options", [{}, {"fused": False}, {"hand_backprop": False}])
def test_ohsmc_step_with_a_nan_particle_keeps_psi_and_its_loss_finite(options):
    """A particle whose outputs are NaN gets no weight (the reweighting's rule), no share in psi's gradient and no
    part of the logged loss: psi and the loss stay finite, and the NaN particle is resampled away (the hand-written
    psi-gradient in the kernel and on the torch path, and autograd's)."""
    x, y = moons_batches(torch.float64, 2)[0]
    torch.manual_seed(0)
    sampler = OHSMC(PartialMLP([2, 100, 20, 5, 1], 2), Bernoulli(), num_particles=30, num_data=100, seed=0,
                    **options).double()
    sampler.setup("fit")
    optimizer = sampler.configure_optimizers()
    sampler.particles()["net.4.weight"][3, 0, 0] = float("nan")
    result, loss = sampler.transition(x, y, optimizer)
    assert torch.isfinite(loss) and result.gradient_weights[3] == 0
    assert all(torch.isfinite(p).all() for p in sampler.model.deterministic_parameters())
    assert all(torch.isfinite(p).all() for p in sampler.particles().values())


def test_networks_outside_the_kernel_are_refused():
    """:meth:`ParticleNetwork.of` returns None for modules and orders the kernel does not have, and a PartialBNN
    then has no particle network."""
    refused = [
        nn.Sequential(nn.Linear(2, 3), nn.GELU(), nn.Linear(3, 1)),  # the erf GELU
        nn.Sequential(nn.Linear(2, 3), nn.Dropout(0.1), nn.Linear(3, 1)),
        nn.Sequential(nn.Tanh(), nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)),  # an activation on the inputs
        nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1), nn.Sigmoid()),  # one on the outputs
        nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.ReLU(), nn.Linear(3, 1)),  # two in a row
        nn.Sequential(nn.Linear(2, MAX_WIDTH + 1), nn.Tanh(), nn.Linear(MAX_WIDTH + 1, 1)),
    ]
    for net in refused:
        assert ParticleNetwork.of(net, net[-1]) is None, net
    subclass = type("ShiftedLinear", (nn.Linear,), {})
    net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), subclass(3, 1))
    assert ParticleNetwork.of(net, net[0]) is None
    net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    assert ParticleNetwork.of(net, nn.Linear(3, 1)) is None  # not one of its layers
    assert PartialBNN(nn.Sequential(nn.Linear(2, 3), nn.GELU(), nn.Linear(3, 1)), "2").particle_network is None
    network = ParticleNetwork.of(net, net[2])
    assert network.stochastic == 1 and network.activations == (particle_kernel.TANH,) and network.widths == (3, 1)


def test_kernel_is_refused_for_other_dtypes_devices_and_layouts():
    model = PartialMLP([2, 4, 3, 1], 1)
    network, weight = model.particle_network, torch.zeros(5, 3, 4)
    assert network.kernel(torch.zeros(6, 2), weight, None) is not None
    assert network.kernel(torch.zeros(6, 2, dtype=torch.float16), weight.half(), None) is None
    assert network.kernel(torch.zeros(6, 2, dtype=torch.float64), weight, None) is None  # the particles in float32
    assert network.kernel(torch.zeros(6, 2, device="meta"), weight.to("meta"), None) is None
    assert network.kernel(torch.zeros(3, 6, 2), weight, None) is None  # inputs of more than two dimensions
    assert network.kernel(torch.zeros(0, 2), weight, None) is None  # no points
    assert network.kernel(torch.zeros(6, 3), weight, None) is None  # inputs wider than the first layer takes
    assert network.kernel(torch.zeros(6, 2), torch.zeros(5, 4, 4), None) is None  # particles of another shape
    assert network.kernel(torch.zeros(6, 2), weight, torch.zeros(5, 3)) is not None
    assert network.kernel(torch.zeros(6, 2), weight, torch.zeros(4, 3)) is None  # a bias for 4 particles
    assert network.kernel(torch.zeros(6, 2), weight, torch.zeros(5, 3, dtype=torch.float64)) is None
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):  # the torch path's error
        model.taped_particle_forward({"2.weight": weight, "2.bias": torch.zeros(5, 3)}, torch.zeros(6, 3), fused=True)
    kernel, x = network.kernel(torch.zeros(6, 2), weight, None), torch.zeros(6, 2)
    with pytest.raises(ValueError, match="grad_output must be of the outputs' shape"):
        network.backward(kernel, x, weight, None, torch.zeros(5, 7, 1))
    model.net[0].weight = nn.Parameter(torch.zeros(2, 4).T)  # a transposed (non-contiguous) parameter
    assert network.kernel(x, weight, None) is None


def test_without_a_compiler_the_torch_path_runs(monkeypatch, tmp_path):
    """Where the kernel cannot be built, the fused forward is the torch path's, to the bit."""
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    with kernel_built_in(tmp_path, monkeypatch, particle_network_kernel):
        model = PartialMLP([2, 7, 3, 1], 1)
        phi = _phi(model, 4, torch.Generator().manual_seed(0), torch.float32)
        x = torch.randn(5, 2)
        assert model.particle_network.kernel(x, phi["2.weight"], phi["2.bias"]) is None
        fused, tape = model.taped_particle_forward(phi, x, fused=True)
        assert tape.fused is None and torch.equal(fused, model.taped_particle_forward(phi, x)[0])


@pytest.mark.skipif(not processor_has_avx512(), reason="the default build is the four- and eight-lane one here")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_avx2_build_equals_the_torch_path(monkeypatch, tmp_path, dtype):
    """Where the kernel builds with AVX-512, the build without it (AVX2's 32-byte vectors) as well."""
    monkeypatch.setattr(particle_kernel, "FLAGS", (*particle_kernel.FLAGS, "-mno-avx512f"))
    with kernel_built_in(tmp_path, monkeypatch, particle_network_kernel):
        gen = torch.Generator().manual_seed(0)
        model = PartialMLP([3, 9, 6, 5, 2], 1).to(dtype)
        phi, x = _phi(model, 11, gen, dtype), torch.randn(13, 3, generator=gen, dtype=dtype)
        plain, plain_tape = model.taped_particle_forward(phi, x)
        fused, fused_tape = model.taped_particle_forward(phi, x, fused=True)
        assert len(list(tmp_path.glob("particle_kernel-*.so"))) == 1  # the kernel ran, built here
        grad = torch.randn(plain.shape, generator=gen, dtype=dtype)
        expected, grads = model.psi_gradients(plain_tape, grad), model.psi_gradients(fused_tape, grad)
    assert_close_to_scale(fused, plain)
    for p, g in expected.items():
        assert_close_to_scale(grads[p], g)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ohsmc_steps_with_the_kernel_equal_the_torch_steps(dtype):
    """OHSMC on the moons network: the same particles, weights, evidence, psi and Adam state after several steps
    with ``fused`` and without, and the fused steps ran the kernel."""
    batches = moons_batches(dtype)
    runs = {}
    for fused in (True, False):
        sampler, optimizer = ohsmc_after_steps([2, 100, 20, 5, 1], 40, batches, dtype, fused=fused)
        runs[fused] = (sampler.state_dict(), optimizer.state_dict()["state"])
        sampler.taped_point_log_likelihoods(sampler.particles(), *batches[0])
        assert (sampler._taped["last"][0].fused is not None) is fused
    tolerance = {"rtol": 1e-9, "atol": 1e-11} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    for name, value in runs[False][0].items():
        torch.testing.assert_close(runs[True][0][name], value, **tolerance, msg=name)
    for key, state in runs[False][1].items():
        for name, value in state.items():
            torch.testing.assert_close(runs[True][1][key][name], value, **tolerance, msg=name)


def test_fused_must_be_a_bool():
    with pytest.raises(ValueError, match="fused must be True or False"):
        OHSMC(PartialMLP([2, 3, 1], 0), Bernoulli(), fused=1)
