"""The relu pre-activation draw in C (lit_bayes.steppers.relu_draw): the first round of proposals equals
``propose_relu``'s from the same generator state, later rounds follow their order and budget, what they accept and
the exact draw of what they leave have the law of eq. 10, and where the kernel cannot be built the torch path runs.
The laws of whole layer draws with the kernel are tested in tests/test_truncated_gaussian.py (``fused``)."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.samplers.noisy_gibbs import NoisyGibbs
from lit_bayes.steppers import relu_draw, truncated_gaussian
from lit_bayes.steppers.relu_draw import draw_relu_layer, relu_draw_kernel
from lit_bayes.steppers.truncated_gaussian import _fused_applies, propose_relu, sample_pre_activations
from tests.gaussian_targets import KS_P_MIN
from tests.kernel_builds import kernel_built_in, processor_has_avx512
from tests.test_truncated_gaussian import CASES, DRAWS, exact_cdf

NOISES = [(1e-4, 1e-4), (0.3, 0.05), (2.0, 2.0)]


def generator(seed):
    return torch.Generator().manual_seed(seed)


def grid(dtype):
    """omega and x from -3 to 3 (x from -0.2): on and off units, both sides of 0; 10,201 elements (not a multiple
    of a vector's lanes)."""
    values = torch.linspace(-3.0, 3.0, 101, dtype=torch.float64)
    return tuple(t.reshape(-1).to(dtype).contiguous()
                 for t in torch.meshgrid(values, values.clamp(min=-0.2), indexing="ij"))


def first_round(omega, post, delta_z, delta_x, gen):
    """The kernel's first round with the random numbers draw_relu_layer draws for it: (candidates, rejected mask)."""
    first, _, _ = relu_draw_kernel(omega.dtype)
    count = omega.numel()
    u = torch.rand(count, generator=gen, dtype=torch.float64)
    normal = torch.randn(count, generator=gen, dtype=omega.dtype)
    out, pending = torch.empty_like(omega), torch.empty(count, dtype=torch.int64)
    rejected = first(count, omega.data_ptr(), post.data_ptr(), delta_z, delta_x, u.data_ptr(), normal.data_ptr(),
                     out.data_ptr(), pending.data_ptr())
    mask = torch.zeros(count, dtype=torch.bool)
    mask[pending[:rejected]] = True
    assert torch.equal(pending[:rejected], mask.nonzero().flatten())  # in order
    return out, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("delta_z, delta_x", NOISES)
def test_first_round_equals_propose_relu(dtype, delta_z, delta_x):
    """The same candidates (to float64 rounding, then the dtype's) and the same rejections as propose_relu from one
    generator state."""
    omega, post = grid(dtype)
    draws, rejected = propose_relu(omega, post, delta_z, delta_x, generator(17), dtype)
    out, mask = first_round(omega, post, delta_z, delta_x, generator(17))
    assert 0 < int(rejected.sum()) < rejected.numel()
    assert torch.equal(mask, rejected)
    torch.testing.assert_close(out, draws.to(dtype), rtol=1e-15, atol=1e-15)


def reference_trial(omega, x, u, n, delta_z, delta_x):
    """One proposal in Python floats (propose_relu's formulas): the candidate and whether it is accepted."""
    total, d = delta_x + delta_z, x - omega
    log_odds = d * d * 0.5 / total - x * x * 0.5 / delta_x + 0.5 * math.log(total / delta_x)
    positive = u >= 1.0 / (1.0 + math.exp(min(-log_odds, 709.0)))
    z = omega + d * delta_z / total + n * math.sqrt(delta_x * delta_z / total) if positive else \
        omega + n * math.sqrt(delta_z)
    return z, (z > 0.0) == positive


@pytest.mark.parametrize("draws", [5, 37, 200])
def test_later_rounds_take_the_pairs_in_order_until_they_run_out(draws):
    """relu_retry against a Python loop of trials: round after round over the pending elements in order, one
    (u, normal) pair a trial; the elements left untried when the pairs run out stay pending, after the rejected."""
    gen = generator(3)
    omega = torch.randn(40, generator=gen, dtype=torch.float64) * 0.3
    post = (omega + 0.2 * torch.randn(40, generator=gen, dtype=torch.float64)).clamp(min=-0.05)
    pending = torch.arange(3, 40, 2, dtype=torch.int64)  # 19 pending elements, every other one
    u = torch.rand(draws, generator=gen, dtype=torch.float64)
    normal = torch.randn(draws, generator=gen, dtype=torch.float64)
    out = torch.zeros(40, dtype=torch.float64)
    expected_out, queue, next_pair = out.clone(), pending.tolist(), 0
    while queue and next_pair < draws:
        kept = []
        for position, i in enumerate(queue):
            if next_pair == draws:
                kept += queue[position:]
                break
            z, accepted = reference_trial(float(omega[i]), float(post[i]), float(u[next_pair]),
                                          float(normal[next_pair]), 0.3, 0.05)
            expected_out[i] = z
            next_pair += 1
            if not accepted:
                kept.append(i)
        queue = kept
    _, retry, _ = relu_draw_kernel(torch.float64)
    left = retry(pending.numel(), pending.data_ptr(), omega.data_ptr(), post.data_ptr(), 0.3, 0.05, draws,
                 u.data_ptr(), normal.data_ptr(), out.data_ptr())
    assert pending[:left].tolist() == queue
    torch.testing.assert_close(out, expected_out, rtol=1e-14, atol=1e-15)


def test_elements_the_first_round_rejects_follow_the_exact_law():
    """At an acceptance near one half (omega = x = 0.05, Delta_Z = Delta_X = 0.3), the elements the first round
    rejects (drawn again by later rounds, the few they leave by the exact draw) have the law of eq. 10 (KS against
    the numerically integrated density)."""
    count, omega_value, post_value = 20_000, 0.05, 0.05
    omega = torch.full((count,), omega_value, dtype=torch.float64)
    post = torch.full((count,), post_value, dtype=torch.float64)
    _, first_rejected = first_round(omega, post, 0.3, 0.3, generator(8))
    out = torch.empty(count, dtype=torch.float64)
    pending = draw_relu_layer(relu_draw_kernel(torch.float64), omega, post, 0.3, 0.3, generator(8), out)
    later = first_rejected.clone()
    later[pending] = False
    assert int(later.sum()) > 5_000
    assert stats.kstest(out[later].numpy(), exact_cdf("relu", omega_value, post_value, 0.3, 0.3)).pvalue > KS_P_MIN


def test_later_calls_stop_where_the_proposals_seldom_land_on_their_side():
    """omega 10 sigma above 0 with x = 0 measured sharply: nearly every proposal is rejected, so draw_relu_layer gives
    those elements the exact draw after one further call rather than all RETRIES, and they have the law of eq. 10;
    on and off units (omega, x ~ 0.3 and omega = -0.5, x ~ 0) need no exact draw."""
    calls = []
    first, retry, exact = relu_draw_kernel(torch.float64)
    counting = lambda name, function: lambda *args: calls.append(name) or function(*args)  # noqa: E731
    kernel = (first, counting("retry", retry), counting("exact", exact))
    omega, post = torch.full((DRAWS,), 0.1, dtype=torch.float64), torch.zeros(DRAWS, dtype=torch.float64)
    out = torch.empty(DRAWS, dtype=torch.float64)
    assert draw_relu_layer(kernel, omega, post, 1e-4, 1e-6, generator(4), out).numel() == 0
    assert calls == ["retry", "exact"]
    assert stats.kstest(out.numpy(), exact_cdf("relu", 0.1, 0.0, 1e-4, 1e-6)).pvalue > KS_P_MIN
    for omega_value, post_value in [(0.3, 0.31), (-0.5, 0.005)]:
        calls.clear()
        easy = (torch.full((5_000,), value, dtype=torch.float64) for value in (omega_value, post_value))
        out = torch.empty(5_000, dtype=torch.float64)
        assert draw_relu_layer(kernel, *easy, 1e-4, 1e-4, generator(5), out).numel() == 0
        assert "exact" not in calls


def exact_draw(omega, post, delta_z, delta_x, key, pending=None):
    """The kernel's exact draw of the elements ``pending`` (default all): (out, the indices left)."""
    _, _, exact = relu_draw_kernel(omega.dtype)
    pending = torch.arange(omega.numel()) if pending is None else pending.clone()
    out = torch.zeros_like(omega)
    left = exact(pending.numel(), pending.data_ptr(), omega.data_ptr(), post.data_ptr(), delta_z, delta_x, key,
                 out.data_ptr())
    return out, pending[:left]


RELU_CASES = [case[1:] for case in CASES if case[0] == "relu"] + [
    (-0.05, 0.0, 1e-4, 1e-4),  # an off unit 5 sigma below 0
    (3.0, 0.0, 1e-4, 1e-4),  # omega 300 sigma above 0 with x = 0: the negative piece's cut 300 sigma out
    (0.0, 0.0, 0.3, 0.3),  # both pieces straddle 0
    (-0.5, 2.0, 2.0, 2.0),  # large noise
    (0.0, 0.0, 1.0, 1e-4),  # ~99 % a half-normal (the negative piece cut at its mean: Robert's proposal at alpha 0)
    (0.5, 0.0, 1.0, 1e-4),  # the negative piece cut half a sigma above its mean
]


@pytest.mark.parametrize("omega, post, delta_z, delta_x", RELU_CASES)
def test_exact_draw_matches_exact_density(omega, post, delta_z, delta_x):
    """The kernel's exact draw alone (the piece by its log-space mass, the truncated normal by rejection, deep tails
    included) against the numerically integrated density of eq. 10."""
    full = lambda v: torch.full((DRAWS,), v, dtype=torch.float64)  # noqa: E731
    out, left = exact_draw(full(omega), full(post), delta_z, delta_x, 12345)
    assert left.numel() == 0 and np.isfinite(out.numpy()).all()
    assert stats.kstest(out.numpy(), exact_cdf("relu", omega, post, delta_z, delta_x)).pvalue > KS_P_MIN


def test_exact_draw_of_an_element_depends_on_the_key_and_its_index_only():
    """Each element draws from its own stream: the same key gives the same values whichever other elements are
    drawn with it; another key other values."""
    omega, post = grid(torch.float64)
    everything, _ = exact_draw(omega, post, 0.3, 0.05, 7)
    some = torch.arange(5, omega.numel(), 3)
    subset, _ = exact_draw(omega, post, 0.3, 0.05, 7, some)
    assert torch.equal(subset[some], everything[some])
    other, _ = exact_draw(omega, post, 0.3, 0.05, 8)
    assert not torch.isclose(other, everything).any()


def test_elements_with_nan_inputs_are_left_to_the_torch_path():
    """An element whose omega or x is NaN is not drawn by the kernel (its rejection loops never accept): draw_relu_layer
    returns it, and sample_pre_activations gives it the torch path's NaN while the others are drawn."""
    omega, post = torch.zeros(6, dtype=torch.float64), torch.full((6,), 0.1, dtype=torch.float64)
    omega[2], post[4] = math.nan, math.nan
    _, left = exact_draw(omega, post, 0.3, 0.3, 3)
    assert left.tolist() == [2, 4]
    out = sample_pre_activations("relu", omega, post, 0.3, 0.3, generator(1), torch.empty(6, dtype=torch.float64))
    assert out[[2, 4]].isnan().all() and out[[0, 1, 3, 5]].isfinite().all()


def test_the_kernel_applies_to_relu_layers_of_one_cpu_dtype():
    omega = torch.zeros(3, 4)
    assert _fused_applies("relu", omega, omega, torch.empty(3, 4))
    assert _fused_applies("relu", omega.T, omega.T, torch.empty(4, 3))  # a transposed omega is made contiguous
    assert not _fused_applies("sign", omega, omega, torch.empty(3, 4))
    assert not _fused_applies("relu", omega.double(), omega, torch.empty(3, 4))
    assert not _fused_applies("relu", omega, omega, torch.empty(3, 4, dtype=torch.float64))
    assert not _fused_applies("relu", omega, omega, torch.empty(4, 3).T)
    assert not _fused_applies("relu", omega.half(), omega.half(), torch.empty(3, 4, dtype=torch.half))


def test_without_a_compiler_the_torch_path_runs(monkeypatch, tmp_path):
    """Where the kernel cannot be built, sample_pre_activations with ``fused`` draws the torch path's values, to the
    bit."""
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    with kernel_built_in(tmp_path, monkeypatch, relu_draw_kernel):
        assert relu_draw_kernel(torch.float32) is None
        omega, post = grid(torch.float32)
        fused = sample_pre_activations("relu", omega, post, 1e-2, 1e-2, generator(2), torch.empty_like(omega))
    plain = sample_pre_activations("relu", omega, post, 1e-2, 1e-2, generator(2), torch.empty_like(omega), False)
    assert torch.equal(fused, plain)


@pytest.mark.skipif(not processor_has_avx512(), reason="the default build is the four-lane one here")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_avx2_build_equals_propose_relu(monkeypatch, tmp_path, dtype):
    """Where the kernel builds with AVX-512, the build without it (four lanes) as well."""
    monkeypatch.setattr(relu_draw, "FLAGS", (*relu_draw.FLAGS, "-mno-avx512f"))
    with kernel_built_in(tmp_path, monkeypatch, relu_draw_kernel):
        omega, post = grid(dtype)
        out, mask = first_round(omega, post, 0.3, 0.05, generator(19))
        assert len(list(tmp_path.glob("relu_draw-*.so"))) == 1  # built here
    draws, rejected = propose_relu(omega, post, 0.3, 0.05, generator(19), dtype)
    assert torch.equal(mask, rejected)
    torch.testing.assert_close(out, draws.to(dtype), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("fused", [True, False])
def test_noisy_gibbs_sweeps_take_the_kernel_with_fused(monkeypatch, fused):
    """NoisyGibbs(fused=...) reaches the stepper's pre-activation draws: the kernel's rounds run with it, not
    without it."""
    calls = []
    monkeypatch.setattr(truncated_gaussian, "draw_relu_layer", lambda *a: calls.append(1) or draw_relu_layer(*a))
    sampler = NoisyGibbs(NoisyMLP([3, 4, 1], "relu", 1e-2, 1e-2), num_chains=2, fused=fused)
    sampler.setup("fit")
    stepper = sampler.configure_optimizers()
    gen = generator(0)
    x, y = torch.randn(30, 3, generator=gen), torch.randn(30, generator=gen)
    inputs, targets, latents = sampler.sweep_inputs((x, y))
    stepper.sweep(inputs, targets, latents)
    assert stepper.fused is fused and bool(calls) is fused
    assert all(torch.isfinite(t).all() for t in latents.values())


def test_fused_must_be_a_bool():
    with pytest.raises(ValueError, match="fused must be True or False"):
        NoisyGibbs(NoisyMLP([3, 4, 1], "relu", 1e-2, 1e-2), fused="yes")


def test_extreme_inputs_give_finite_candidates_on_the_torch_proposals_sides():
    """|omega|, |x| up to 1e3 with Delta down to 1e-8 (log-odds of +-1e14, e^x past its range): finite candidates
    and the pieces' sides as the torch proposal gives them."""
    values = torch.tensor([-1e3, -50.0, -1.0, 0.0, 1.0, 50.0, 1e3], dtype=torch.float64)
    omega, post = (t.reshape(-1).contiguous() for t in torch.meshgrid(values, values, indexing="ij"))
    for delta_z, delta_x in [(1e-8, 1e-8), (1e-8, 1.0), (1.0, 1e-8)]:
        out, mask = first_round(omega, post, delta_z, delta_x, generator(4))
        draws, rejected = propose_relu(omega, post, delta_z, delta_x, generator(4), torch.float64)
        assert np.isfinite(out.numpy()).all()
        assert torch.equal(mask, rejected), (delta_z, delta_x)
