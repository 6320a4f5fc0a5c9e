"""Truncated-Gaussian conditionals (noisy-gibbs spec §2.3, App. E, §8 items 1-2): KS tests of many
draws against the exact densities, written here from scratch (scipy special functions and a
numerically integrated density), including tails far beyond 7 sigma."""
import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from lit_bayes.steppers.truncated_gaussian import (
    PLAIN_MIN,
    SAFE_A,
    SAFE_SHARED,
    _broadcast_shape,
    _select,
    exact_negative_choice,
    log_ndtr_bounds,
    log_normal_cdf,
    negative_piece_chosen,
    pre_activation_pieces,
    probit_scores,
    propose_relu,
    propose_two_pieces,
    sample_pre_activations,
    standard_normal_above,
    truncated_normal,
    two_piece_mixture,
)
from tests.gaussian_targets import KS_P_MIN

DRAWS = 20_000


def generator(seed=0):
    return torch.Generator().manual_seed(seed)


def upper_tail_cdf(alpha):
    """CDF of N(0, 1) conditioned on X >= alpha, stable far in the tail."""
    return lambda t: -np.expm1(special.log_ndtr(-np.asarray(t)) - special.log_ndtr(-alpha))


@pytest.mark.parametrize("alpha", [-30.0, -5.0, -1.0, 0.0, 2.5, 6.99, 7.0, 9.0, 40.0, 1e4])
def test_standard_normal_above_matches_truncated_density(alpha):
    draws = standard_normal_above(torch.full((DRAWS,), alpha, dtype=torch.float64), generator()).numpy()
    assert np.isfinite(draws).all() and (draws >= alpha).all()
    assert stats.kstest(draws, upper_tail_cdf(alpha)).pvalue > KS_P_MIN


@pytest.mark.parametrize("normal_dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("columns", [6, 1])
def test_standard_normal_above_with_every_method_in_one_tensor(normal_dtype, columns):
    """Rejection from the plain normal (alpha < PLAIN, its rejects redrawn), inverse CDF (alpha < TAIL) and
    the tail method interleaved in one call: each element keeps the law of its own cut (an index mix-up
    between them would show). With one column of each six, few elements are redrawn (the gather path);
    with six, most are (the all-elements path)."""
    alphas = torch.tensor([-8.0, -1.0, 0.5, 7.5, -2.0, -1.01], dtype=torch.float64)
    grid = alphas.repeat(DRAWS).reshape(DRAWS, len(alphas))
    if columns == 1:  # five plain cuts for each other cut: mostly the rejection path
        grid = torch.cat([grid, grid[:, [0]].expand(DRAWS, 5 * len(alphas))], dim=1)
    draws = standard_normal_above(grid, generator(8), normal_dtype).numpy()
    assert (draws >= grid.numpy()).all()
    for column, alpha in enumerate(alphas.tolist()):
        assert stats.kstest(draws[:, column], upper_tail_cdf(alpha)).pvalue > KS_P_MIN, alpha


def test_few_elements_take_the_inverse_cdf_and_keep_the_law(monkeypatch):
    """Under PLAIN_MIN elements every cut takes the inverse CDF (no untruncated candidates are drawn, counted
    here), plain cuts included; pooled over calls, each element keeps the law of its own cut."""
    import lit_bayes.steppers.truncated_gaussian as module

    alphas = torch.tensor([-8.0, -1.5, 0.5, 7.5], dtype=torch.float64)
    grid = alphas.repeat(500).reshape(500, len(alphas))
    assert grid.numel() < PLAIN_MIN
    gen, calls = generator(9), []
    monkeypatch.setattr(module.torch, "randn", lambda *a, randn=torch.randn, **k: calls.append(1) or randn(*a, **k))
    draws = np.concatenate([standard_normal_above(grid, gen).numpy() for _ in range(DRAWS // 500)])
    assert not calls
    assert (draws >= grid.numpy()[0]).all()
    for column, alpha in enumerate(alphas.tolist()):
        assert stats.kstest(draws[:, column], upper_tail_cdf(alpha)).pvalue > KS_P_MIN, alpha


@pytest.mark.parametrize("mean, std, bound, above", [
    (1.0, 2.0, -0.5, True),
    (1.0, 0.01, 0.9, False),  # 10 sigma into the lower tail
    (-3.0, 0.5, 2.0, True),   # 10 sigma into the upper tail
    (0.0, 1e-3, -1.0, False),  # 1000 sigma
])
def test_truncated_normal_either_side(mean, std, bound, above):
    args = [torch.full((DRAWS,), v, dtype=torch.float32) for v in (mean, std, bound)]
    draws = truncated_normal(*args, above, generator(1)).numpy()
    assert np.isfinite(draws).all()
    assert (draws >= bound).all() if above else (draws <= bound).all()
    standardized = (draws - mean) / std if above else (mean - draws) / std
    alpha = (bound - mean) / std if above else (mean - bound) / std
    assert stats.kstest(standardized, upper_tail_cdf(alpha)).pvalue > KS_P_MIN


def test_truncated_normal_mixed_sides_per_element():
    above = torch.arange(DRAWS) % 2 == 0
    draws = truncated_normal(torch.zeros(DRAWS), torch.ones(DRAWS), torch.full((DRAWS,), 0.5), above, generator(2))
    assert (draws[above] >= 0.5).all() and (draws[~above] <= 0.5).all()
    assert stats.kstest(-draws[~above].numpy(), upper_tail_cdf(-0.5)).pvalue > KS_P_MIN


SIGMA = {"relu": lambda z: np.maximum(z, 0.0), "sign": np.sign, "abs": np.abs, "linear": lambda z: z}


def exact_cdf(activation, omega, post, delta_z, delta_x):
    """CDF of p(z) ∝ exp[-(z - omega)^2 / 2 Delta_Z - (sigma(z) - x)^2 / 2 Delta_X] (eq. 10) by
    trapezoidal integration of the raw density on a fine grid (independent of the piece algebra)."""
    spread = 20.0 * math.sqrt(max(delta_z, delta_x))
    centres = [omega, post, -post, 0.0]
    grid = np.unique(np.concatenate([np.linspace(min(centres) - spread, max(centres) + spread, 400_001),
                                     [-1e-300, 0.0, 1e-300]]))
    log_p = -((grid - omega) ** 2) / (2 * delta_z) - (SIGMA[activation](grid) - post) ** 2 / (2 * delta_x)
    density = np.exp(log_p - log_p.max())
    cumulative = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(grid))])
    cumulative /= cumulative[-1]
    return lambda t: np.interp(t, grid, cumulative)


CASES = [
    ("relu", 0.3, 0.5, 0.5, 0.2),
    ("relu", -0.4, 0.8, 0.1, 0.1),
    ("relu", 0.1, 0.0, 1e-4, 1e-6),     # negative piece is N(0.1, 1e-4) cut at 10 sigma, still ~25% of the mass
    ("relu", -1.0, 1.0, 1e-4, 1e-4),    # positive piece's mean ~0 while omega is -100 sigma
    ("sign", 0.2, 0.3, 0.5, 0.3),
    ("sign", 0.05, -0.9, 1e-4, 0.05),   # the positive side needs z > 0 at 5 sigma
    ("abs", 0.5, 0.4, 0.3, 0.2),
    ("abs", 0.01, 1.0, 1e-4, 1e-4),     # two separated modes near +-1
    ("linear", 1.5, -0.5, 0.2, 0.1),
    ("linear", 1.0, 1.0, 1e-6, 1e-6),   # the whole mass 1400 sigma above the cut at 0
]


@pytest.mark.parametrize("activation, omega, post, delta_z, delta_x", CASES)
def test_pre_activation_conditional_matches_exact_density(activation, omega, post, delta_z, delta_x):
    full = lambda v: torch.full((DRAWS,), v, dtype=torch.float64)  # noqa: E731
    pieces = pre_activation_pieces(activation, full(omega), full(post), delta_z, delta_x)
    draws = two_piece_mixture(*pieces, generator(3)).numpy()
    assert np.isfinite(draws).all()
    assert stats.kstest(draws, exact_cdf(activation, omega, post, delta_z, delta_x)).pvalue > KS_P_MIN


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("activation, omega, post, delta_z, delta_x", CASES)
def test_layer_draw_with_proposals_matches_exact_density(activation, omega, post, delta_z, delta_x, fused):
    """sample_pre_activations on one chunk: a proposal round, then the exact draw for what it rejects (with the
    bracket where 4,096 or more are rejected, without it below), together exact; ``fused`` (relu): the layer drawn
    in C, proposal rounds and the exact draw of what they leave."""
    full = lambda v: torch.full((DRAWS,), v, dtype=torch.float64)  # noqa: E731
    out = sample_pre_activations(activation, full(omega), full(post), delta_z, delta_x, generator(6),
                                 torch.empty(DRAWS, dtype=torch.float64), fused)
    assert np.isfinite(out.numpy()).all()
    assert stats.kstest(out.numpy(), exact_cdf(activation, omega, post, delta_z, delta_x)).pvalue > KS_P_MIN


@pytest.mark.parametrize("activation, omega, post, delta_z, delta_x", CASES)
def test_accepted_proposals_follow_exact_density_at_the_predicted_rate(activation, omega, post, delta_z, delta_x):
    """propose_two_pieces alone: the accepted draws have the law of eq. 10, and the share accepted is
    (M_- + M_+) / (W_- + W_+), each piece's mass on its side over its untruncated mass, computed here with
    scipy (a 4.5-sigma binomial check)."""
    full = lambda v: torch.full((DRAWS,), v, dtype=torch.float64)  # noqa: E731
    pieces = pre_activation_pieces(activation, full(omega), full(post), delta_z, delta_x)
    draws, rejected = propose_two_pieces(*pieces, generator(7))
    (m_n, v_n, k_n), (m_p, v_p, k_p) = ([float(t.reshape(-1)[0]) for t in piece] for piece in pieces)
    log_w = np.array([k_n + 0.5 * math.log(v_n), k_p + 0.5 * math.log(v_p)])
    log_m = log_w + special.log_ndtr([-m_n / math.sqrt(v_n), m_p / math.sqrt(v_p)])
    rate = math.exp(np.logaddexp(*log_m) - np.logaddexp(*log_w))
    accepted = draws[~rejected].numpy()
    assert abs(accepted.size / DRAWS - rate) <= 4.5 * math.sqrt(rate * (1 - rate) / DRAWS) + 1e-12
    if accepted.size >= 500:
        assert stats.kstest(accepted, exact_cdf(activation, omega, post, delta_z, delta_x)).pvalue > KS_P_MIN


@pytest.mark.parametrize("normal_dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("delta_z, delta_x", [(1e-4, 1e-4), (0.3, 0.05), (2.0, 2.0)])
def test_relu_proposal_equals_the_generic_one(normal_dtype, delta_z, delta_x):
    """propose_relu (the fast path) gives propose_two_pieces' draws and rejections on the relu pieces from the same
    generator state, to rounding, over omega and x from -3 to 3 (both sides of 0, on and off units)."""
    grid = torch.linspace(-3.0, 3.0, 101, dtype=torch.float64)
    omega, post = (t.reshape(-1) for t in torch.meshgrid(grid, grid.clamp(min=-0.2), indexing="ij"))
    fast_draws, fast_rejected = propose_relu(omega, post, delta_z, delta_x, generator(17), normal_dtype)
    pieces = pre_activation_pieces("relu", omega, post, delta_z, delta_x)
    draws, rejected = propose_two_pieces(*pieces, generator(17), normal_dtype)
    assert 0 < int(rejected.sum()) < rejected.numel()
    assert torch.equal(fast_rejected, rejected)
    torch.testing.assert_close(fast_draws, draws, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("activation", ["relu", "sign", "abs", "linear"])
def test_pre_activation_extreme_values_stay_finite(activation):
    """|omega|, |x| up to 1e3 with Delta down to 1e-8: naive erfc ratios would give 0/0 or inf/inf."""
    values = torch.tensor([-1e3, -50.0, -1.0, 0.0, 1.0, 50.0, 1e3], dtype=torch.float64)
    omega, post = (t.reshape(-1) for t in torch.meshgrid(values, values, indexing="ij"))
    for delta_z, delta_x in [(1e-8, 1e-8), (1e-8, 1.0), (1.0, 1e-8)]:
        draws = two_piece_mixture(*pre_activation_pieces(activation, omega, post, delta_z, delta_x), generator(4))
        assert torch.isfinite(draws).all(), (delta_z, delta_x)


def exact_log_odds(negative, positive):
    """log M_- - log M_+ of a two-piece mixture, each piece's mass exp(k) sqrt(var) Phi(-+m / sqrt(var))
    (up to the common sqrt(2 pi)), straight from torch's log_ndtr."""
    (m_n, v_n, k_n), (m_p, v_p, k_p) = negative, positive
    return (k_n + 0.5 * torch.log(v_n) + torch.special.log_ndtr(-m_n / v_n.sqrt())
            - k_p - 0.5 * torch.log(v_p) - torch.special.log_ndtr(m_p / v_p.sqrt()))


def test_relu_mixture_weight_equals_paper_closed_form():
    """p_- = 1 / (1 + Z_+ / Z_-) with the masses of App. E.1 (eq. 10), where they are representable."""
    omega = torch.tensor([-0.7, -0.1, 0.0, 0.4, 1.2], dtype=torch.float64)
    post = torch.tensor([0.3, -0.2, 0.5, 0.4, 1.0], dtype=torch.float64)
    delta_z, delta_x = 0.3, 0.2
    v = delta_x * delta_z / (delta_x + delta_z)
    z_minus = np.sqrt(np.pi * delta_z / 2) * np.exp(omega.numpy() ** 2 / (2 * delta_z)) * special.erfc(
        omega.numpy() / np.sqrt(2 * delta_z))
    s = delta_z * post.numpy() + delta_x * omega.numpy()
    scale = 2 * (delta_x + delta_z) * delta_x * delta_z
    z_plus = np.sqrt(np.pi * v / 2) * np.exp(s**2 / scale) * (1 + special.erf(s / np.sqrt(scale)))
    expected = 1 / (1 + z_plus / z_minus)
    (m_n, v_n, k_n), (m_p, v_p, k_p) = pre_activation_pieces("relu", omega, post, delta_z, delta_x)
    p_minus = torch.sigmoid(exact_log_odds((m_n, v_n, k_n), (m_p, v_p, k_p)))
    np.testing.assert_allclose(p_minus.numpy(), expected, rtol=1e-10)
    draws = torch.stack([two_piece_mixture((m_n, v_n, k_n), (m_p, v_p, k_p), generator(s)) for s in range(4000)])
    frequency = (draws <= 0).double().mean(0).numpy()
    assert np.all(np.abs(frequency - expected) < 4.5 * np.sqrt(expected * (1 - expected) / 4000))


def test_probit_step_keeps_labels_and_the_gaussian_scores():
    """Scores Z ~ N(omega, Delta) with y = argmax Z are an exact joint draw; the probit step
    (eqs. 50-51) must keep y = argmax Z and keep each score's marginal N(omega_a, Delta)."""
    gen = generator(5)
    omega = torch.tensor([0.3, -0.5, 0.0, 1.0], dtype=torch.float64).expand(DRAWS, 4)
    delta = 0.7
    scores = omega + math.sqrt(delta) * torch.randn(omega.shape, generator=gen, dtype=torch.float64)
    labels = scores.argmax(-1)
    for _ in range(5):
        scores = probit_scores(omega, labels, delta, scores, gen)
        assert torch.equal(scores.argmax(-1), labels)
    for a in range(4):
        assert stats.kstest(scores[:, a].numpy(), stats.norm(float(omega[0, a]), math.sqrt(delta)).cdf).pvalue > KS_P_MIN


def test_probit_step_far_in_the_tail():
    """Label 0 although omega_1 - omega_0 = 40 sigma: Z_1 <= Z_0 is drawn beyond 7 sigma below its mean."""
    omega = torch.tensor([[0.0, 40.0, -3.0]], dtype=torch.float64).expand(500, 3)
    labels = torch.zeros(500, dtype=torch.long)
    scores = torch.zeros(500, 3, dtype=torch.float64)
    gen = generator(6)
    for _ in range(20):
        scores = probit_scores(omega, labels, 1.0, scores, gen)
        assert torch.isfinite(scores).all() and torch.equal(scores.argmax(-1), labels)
    assert (scores[:, 1] < 40.0 - 7.0).all()


def test_log_ndtr_bounds_bracket_the_exact_value():
    a = torch.cat([-torch.logspace(-3, 5, 4000, dtype=torch.float64), torch.zeros(1, dtype=torch.float64),
                   torch.logspace(-3, 3, 2000, dtype=torch.float64), torch.linspace(-3, 3, 6001, dtype=torch.float64)])
    exact = torch.from_numpy(special.log_ndtr(a.numpy()))
    lower, upper = log_ndtr_bounds(a)
    assert (lower <= exact).all() and (exact <= upper).all()


@pytest.mark.parametrize("activation", ["relu", "sign", "abs", "linear"])
def test_piece_choice_equals_the_exact_log_odds_comparison(activation):
    """The piece choice, with its bracket (the exact product form only where the bounds leave it open) and
    without it (the product form everywhere, the log form where that would leave float64's range), is the
    exact comparison logit(u) < log M_- - log M_+ for every (omega, x, u), from deep tails to the kink at 0."""
    gen = generator(7)
    values = torch.cat([torch.linspace(-2, 2, 81, dtype=torch.float64), torch.tensor([-1e3, -50.0, 50.0, 1e3])])
    omega, post = (t.reshape(-1) for t in torch.meshgrid(values, values, indexing="ij"))
    for delta_z, delta_x in [(1e-4, 1e-4), (1e-2, 1e-6), (2.0, 2.0), (1e-8, 1.0)]:
        negative, positive = pre_activation_pieces(activation, omega, post, delta_z, delta_x)
        for _ in range(5):
            u = torch.rand(omega.shape, generator=gen, dtype=torch.float64)
            logit_u = torch.log(u / (1.0 - u))
            exact = exact_log_odds(negative, positive)
            for bracket in (True, False):
                assert torch.equal(negative_piece_chosen(negative, positive, u, bracket), logit_u < exact)


def test_product_form_choice_equals_the_log_form_across_its_safe_range():
    """exact_negative_choice switches between its product form and the log form at |shared| = SAFE_SHARED and
    a = SAFE_A: on both sides of both limits it equals logit(u) < shared + log Phi(a_-) - log Phi(a_+) (scipy),
    with u drawn near the threshold so that the comparison is close."""
    gen = generator(11)
    shared = torch.linspace(-SAFE_SHARED - 40, SAFE_SHARED + 40, 161, dtype=torch.float64)
    a = torch.cat([torch.linspace(SAFE_A - 10, SAFE_A + 10, 41, dtype=torch.float64),
                   torch.linspace(-5, 8, 27, dtype=torch.float64)])
    s, a_neg, a_pos = (t.reshape(-1) for t in torch.meshgrid(shared, a, a.flip(0), indexing="ij"))
    log_odds = s + torch.from_numpy(special.log_ndtr(a_neg.numpy()) - special.log_ndtr(a_pos.numpy()))
    logit_u = log_odds + torch.randn(log_odds.shape, generator=gen, dtype=torch.float64)  # near the threshold
    u = torch.sigmoid(logit_u)
    inside = (u > 0) & (u < 1)  # where logit(u) is representable through u (u rounds to 1 above ~37 nats)
    chosen, phi_neg, phi_pos = exact_negative_choice(s, a_neg, a_pos, u)
    assert torch.equal(chosen[inside], (torch.log(u / (1 - u)) < log_odds)[inside])
    assert inside.float().mean() > 0.4
    torch.testing.assert_close(phi_neg, torch.from_numpy(2 * special.ndtr(a_neg.numpy())), rtol=1e-13, atol=0)
    torch.testing.assert_close(phi_pos, torch.from_numpy(2 * special.ndtr(a_pos.numpy())), rtol=1e-13, atol=0)


def test_log_normal_cdf_equals_scipy_from_deep_tail_to_one():
    """The one-erfc log Phi (and its log_ndtr fallback below DEEP) against scipy, to float64 accuracy."""
    a = torch.cat([torch.linspace(-60.0, 40.0, 200_001, dtype=torch.float64), torch.tensor([-1e3, 0.0, 1e3],
                                                                                           dtype=torch.float64)])
    exact = torch.from_numpy(special.log_ndtr(a.numpy()))
    torch.testing.assert_close(log_normal_cdf(a), exact, rtol=1e-10, atol=1e-300)
    assert log_normal_cdf(torch.tensor([-1e3], dtype=torch.float64)).isfinite().all()


@pytest.mark.parametrize("fused", [True, False])
def test_chunked_layer_draw_keeps_each_element_law(monkeypatch, fused):
    """sample_pre_activations over (C, n, K) in chunks that cut rows apart (CHUNK = 777): every element keeps
    the law of its own (omega, x), so no chunk reads or writes another's elements; ``fused``: the whole layer drawn
    in C, its (C, n, K) elements flattened."""
    import lit_bayes.steppers.truncated_gaussian as module

    monkeypatch.setattr(module, "CHUNK", 777)
    settings = [(0.3, 0.5, 0.2, 0.3), (-1.0, 1.0, 1e-4, 1e-4), (0.05, 0.0, 0.5, 0.5)]  # (omega, x, Delta_Z, Delta_X)
    omega = torch.tensor([s[0] for s in settings], dtype=torch.float32).repeat(2, DRAWS // 2, 1)
    post = torch.tensor([s[1] for s in settings], dtype=torch.float32).repeat(2, DRAWS // 2, 1)
    for column, (w, x, delta_z, delta_x) in enumerate(settings):
        out = torch.empty_like(omega)
        sample_pre_activations("relu", omega, post, delta_z, delta_x, generator(9 + column), out, fused)
        draws = out[..., column].flatten().double().numpy()
        assert stats.kstest(draws, exact_cdf("relu", float(np.float32(w)), float(np.float32(x)), delta_z,
                                             delta_x)).pvalue > KS_P_MIN, column


@pytest.mark.parametrize("omega, post, delta_x, proposing_chunks", [(0.3, 0.31, 1e-4, 10), (-0.5, 0.01, 1e-4, 10),
                                                                (0.1, 0.0, 1e-6, 1)])
def test_later_chunks_take_proposals_while_they_pay_and_keep_the_law(monkeypatch, omega, post, delta_x,
                                                                     proposing_chunks):
    """A ReLU layer in 10 chunks (Delta_Z = 1e-4): an "on" unit (omega, x ~ 0.3) or an "off" one (omega = -0.5,
    x ~ 0) accepts nearly every proposal, and every chunk takes a round; at omega = 10 sigma above 0 with x = 0
    measured sharply nearly every proposal is rejected, and only the first chunk proposes (calls counted here).
    The law holds either way. (The torch path's policy: ``fused=False``.)"""
    import lit_bayes.steppers.truncated_gaussian as module

    calls = []
    monkeypatch.setattr(module, "CHUNK", DRAWS // 10)
    monkeypatch.setattr(module, "propose_relu", lambda *a, propose=module.propose_relu: calls.append(1) or propose(*a))
    full = lambda v: torch.full((DRAWS,), v)  # noqa: E731
    out = sample_pre_activations("relu", full(omega), full(post), 1e-4, delta_x, generator(11), torch.empty(DRAWS),
                                 fused=False)
    assert len(calls) == proposing_chunks
    cdf = exact_cdf("relu", float(np.float32(omega)), float(np.float32(post)), 1e-4, delta_x)
    assert stats.kstest(out.double().numpy(), cdf).pvalue > KS_P_MIN


def test_branch_free_selection_equals_torch_where():
    """The piece selection of the two-piece draw (0/1 weights instead of a random-mask ``torch.where``) gives
    torch.where's values exactly, for finite values from tiny to huge of either sign."""
    gen = generator(13)
    scale = torch.logspace(-300, 300, 1000, dtype=torch.float64)
    first = scale * torch.randn(1000, generator=gen, dtype=torch.float64)
    second = scale.flip(0) * torch.randn(1000, generator=gen, dtype=torch.float64)
    mask = torch.rand(1000, generator=gen) < 0.5
    on_first = mask.to(torch.float64)
    assert torch.equal(_select(on_first, 1.0 - on_first, first, second), torch.where(mask, first, second))


@pytest.mark.parametrize("shapes", [[(3, 4), (), (3, 4)], [(), ()], [(3, 1), (1, 4), ()], [(4,), (3, 4)], [(1, 4), ()]])
def test_broadcast_shape_equals_torch_broadcast_shapes(shapes):
    """The pipelines' shortcut for the broadcast shape (one shared shape besides 0-dim constants) gives
    torch.broadcast_shapes' answer, also where the shapes differ and it must defer to it."""
    tensors = [torch.zeros(shape) for shape in shapes]
    assert _broadcast_shape(*tensors) == torch.broadcast_shapes(*shapes)
