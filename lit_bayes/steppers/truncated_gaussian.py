"""Truncated-Gaussian conditionals of the noisy-network Gibbs sampler (noisy-gibbs spec §2.3, App. E).

* :func:`truncated_normal`: N(mean, std^2) restricted to one side of a bound, exact in the
  tails: inverse-CDF sampling up to ``TAIL`` standard deviations inside the cut-off tail,
  Rayleigh-proposal rejection beyond it (spec §8 item 2), always in float64; far from the cut-off,
  rejection from the untruncated normal.
* :func:`two_piece_mixture`: a density made of one Gaussian piece on ``z <= 0`` and another on
  ``z > 0`` (the pre-activation conditionals, eq. 10), mixture weights in log space, the exact
  log Phi evaluated only where cheap bounds leave the choice open; :func:`propose_two_pieces`, a
  rejection sampler of the same density without normal CDFs, exact where it accepts (:func:`propose_relu`, the
  same for the relu pieces in fewer passes).
* :func:`pre_activation_pieces`: those pieces for relu, sign, abs and linear (App. E.1-E.3);
  :func:`sample_pre_activations` draws a whole layer's pre-activations in cache-sized chunks.
* :func:`probit_scores`: the multinomial-probit output scores given the labels (App. E.4, eqs. 50-51).

All functions draw from an explicit ``torch.Generator`` and broadcast over leading (chain) dimensions.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.special import log_ndtr, ndtri

from lit_bayes.steppers.relu_draw import REALS, draw_relu_layer, relu_draw_kernel

__all__ = ["BRACKET_MIN", "CHUNK", "DEEP", "PLAIN", "PLAIN_MIN", "PROPOSALS_REJECT", "SAFE_A", "SAFE_SHARED", "TAIL",
           "exact_negative_choice", "log_ndtr_bounds", "log_normal_cdf", "negative_piece_chosen",
           "pre_activation_pieces", "probit_scores", "propose_relu", "propose_two_pieces", "row_chunks",
           "sample_pre_activations", "truncated_normal", "two_piece_mixture"]

TAIL = 7.0  # beyond this many std inside the cut-off tail, inverse-CDF sampling loses accuracy in float64
DEEP = -37.0  # below this, Phi(a) is under float64's normal range: log Phi through log_ndtr
PLAIN = -1.0  # below this cut-off (in std from the mean), untruncated draws are kept with probability > 84 %
CHUNK = 1 << 15  # elements per chunk of the elementwise pipelines: their temporaries stay in the core's cache
PROPOSALS_REJECT = 0.25  # a layer's later chunks take proposal rounds while they reject at most this share
BRACKET_MIN = 4096  # the exact draw of fewer rejected proposals than this skips the piece-choice bracket
PLAIN_MIN = 4096  # standard_normal_above on fewer elements takes the inverse CDF for all of them
_ONE_BELOW = 1.0 - 2.0**-53  # largest float64 below 1
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SLACK = 1e-9  # relative margin on the log Phi bounds, far above float64 rounding
SAFE_SHARED = 300.0  # |log-odds constant| up to which the product-form piece choice stays in float64's normal range
SAFE_A = -25.0  # and the Phi arguments down to which it does (Phi(-25) ~ 3e-138)


def _broadcast_shape(*tensors: Tensor) -> torch.Size:
    """The shape the tensors broadcast to: when the ones with dimensions share one shape (the elementwise
    pipelines here: full tensors and 0-dim constants), that shape, without the ~0.1 ms of Python that
    ``torch.broadcast_shapes`` spends on every call; otherwise ``torch.broadcast_shapes``."""
    shapes = {t.shape for t in tensors if t.dim()}
    if len(shapes) == 1:
        return shapes.pop()
    return torch.broadcast_shapes(*(t.shape for t in tensors))


def _uniform(shape: torch.Size, generator: torch.Generator, device) -> Tensor:
    """Uniform draws on (0, 1] in float64."""
    return 1.0 - torch.rand(shape, generator=generator, device=device, dtype=torch.float64)


def standard_normal_above(alpha: Tensor, generator: torch.Generator,
                          normal_dtype: torch.dtype = torch.float64, mass: Tensor | None = None) -> Tensor:
    """X ~ N(0, 1) conditioned on X >= alpha, elementwise (float64 ``alpha``), by three exact methods.

    Below ``PLAIN``: rejection from the untruncated normal (acceptance above 84 %), the rejected
    elements redrawn by one of the next two methods (an exact draw from the same law, so the mixture
    is exact). ``PLAIN`` to ``TAIL``: the inverse CDF, X = -ndtri(u Phi(-alpha)) with u ~ U(0, 1]
    (Phi(-alpha) through erfc, which keeps its relative accuracy in the tail where torch's ndtr does
    not). At or above ``TAIL``: Marsaglia's tail method, X = sqrt(alpha^2 - 2 log U1) accepted when
    U2 X <= alpha (acceptance > 98%). ``normal_dtype`` is the dtype of the untruncated candidates:
    the sampler's state dtype, whose own Gaussian draws have the same resolution. Which method
    draws an element depends on the alphas and their number only, so every element keeps its exact law; when
    under half of the elements are below ``PLAIN``, or there are fewer than ``PLAIN_MIN``, all of them take the
    inverse CDF (no wasted candidates; for few elements the rejection's ~10 operations cost more than it saves).
    ``mass``: Phi(-alpha) where the caller has it already (shape of ``alpha``; only read below ``TAIL``).
    """
    if alpha.numel() < PLAIN_MIN:
        return _inverse_cdf_or_tail(alpha, generator, mass)
    plain = alpha < PLAIN
    if 2 * int(plain.sum()) < plain.numel():  # mostly near or inside the cut: the inverse CDF for all
        return _inverse_cdf_or_tail(alpha, generator, mass)
    result = torch.randn(alpha.shape, generator=generator, device=alpha.device, dtype=normal_dtype).double()
    rest = ~(plain & (result >= alpha))
    count = int(rest.sum())
    if 2 * count > rest.numel():  # mostly redrawn: all elements at once, no gather
        return torch.where(rest, _inverse_cdf_or_tail(alpha, generator, mass), result)
    if count:
        where = rest.nonzero(as_tuple=True)
        result[where] = _inverse_cdf_or_tail(alpha[where], generator, None if mass is None else mass[where])
    return result


def _inverse_cdf_or_tail(alpha: Tensor, generator: torch.Generator, mass: Tensor | None) -> Tensor:
    """The inverse-CDF and tail methods of :func:`standard_normal_above`."""
    u = _uniform(alpha.shape, generator, alpha.device)
    if mass is None:
        mass = 0.5 * torch.special.erfc(alpha.clamp(max=TAIL) * math.sqrt(0.5))
    inverse = -ndtri((u * mass).clamp(max=_ONE_BELOW))
    if not bool((alpha >= TAIL).any()):
        return torch.maximum(inverse, alpha)
    tail = (alpha >= TAIL).nonzero(as_tuple=True)
    result = inverse
    pending, a = tail, alpha[tail]
    while a.numel():
        u1 = _uniform(a.shape, generator, a.device)
        u2 = _uniform(a.shape, generator, a.device)
        proposal = torch.sqrt(a * a - 2.0 * torch.log(u1))
        accept = u2 * proposal <= a
        result[tuple(i[accept] for i in pending)] = proposal[accept]
        pending, a = tuple(i[~accept] for i in pending), a[~accept]
    return torch.maximum(result, alpha)


def truncated_normal(mean: Tensor, std: Tensor, bound: Tensor, above: Tensor | bool,
                     generator: torch.Generator, normal_dtype: torch.dtype = torch.float64) -> Tensor:
    """Draw z ~ N(mean, std^2) restricted to z >= bound where ``above`` else z <= bound.

    Arguments broadcast together; the result is float64 (callers cast back). ``normal_dtype``: see
    :func:`standard_normal_above`.
    """
    mean, std, bound = (torch.as_tensor(t, dtype=torch.float64, device=mean.device) for t in (mean, std, bound))
    if isinstance(above, bool):
        sign = torch.tensor(1.0 if above else -1.0, dtype=torch.float64, device=mean.device)
    else:
        sign = torch.where(above.to(mean.device), 1.0, -1.0).to(torch.float64)
    alpha = (sign * (bound - mean) / std).expand(_broadcast_shape(mean, std, bound, sign))
    return mean + sign * std * standard_normal_above(alpha.contiguous(), generator, normal_dtype)


def log_ndtr_bounds(a: Tensor) -> tuple[Tensor, Tensor]:
    """Lower and upper bounds on log Phi(a) from a few elementwise products (no special function).

    Lower: with c = min(a, -1), log phi(c) + c. For a < -1 the Mills-ratio bound
    Phi(a) >= phi(a) |a| / (1 + a^2) and log(|a| + 1 / |a|) <= |a| give it; for a >= -1 it is
    log phi(1) - 1 < log Phi(-1) <= log Phi(a). Upper: -min(a, 0)^2 / 2 (Chernoff, Phi(a) <= exp(-a^2 / 2)
    for a <= 0; 0 above). The bracket is about |a| wide: loose, but at small noise the log-odds of the
    two pieces are hundreds or thousands of nats, far outside it.
    """
    c = a.clamp(max=-1.0)
    d = a.clamp(max=0.0)
    return torch.addcmul(c, c, c, value=-0.5).sub_(_HALF_LOG_2PI), d.square_().mul_(-0.5)


def log_normal_cdf(a: Tensor) -> Tensor:
    """log Phi(a) to float64 accuracy, about twice as fast as torch's ``log_ndtr``: with one erfc,
    Q(t) = erfc(t / sqrt 2) / 2, log Phi(a) = log Q(-a) for a < 0 and log1p(-Q(a)) for a >= 0;
    ``log_ndtr`` where Q would leave the normal float64 range (a < ``DEEP``)."""
    q = 0.5 * torch.special.erfc(a.abs() * math.sqrt(0.5))
    result = torch.where(a < 0, torch.log(q), torch.log1p(-q))
    deep = a < DEEP
    if bool(deep.any()):
        result[deep] = log_ndtr(a[deep])
    return result


def exact_negative_choice(shared: Tensor, a_neg: Tensor, a_pos: Tensor, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Whether u < p_- = sigmoid(shared + log Phi(a_neg) - log Phi(a_pos)), to float64 accuracy, and the
    2 Phi(a_neg), 2 Phi(a_pos) it computed (the truncated draws reuse them).

    In product form, u Phi(a_pos) < (1 - u) e^shared Phi(a_neg), with Phi(a) = erfc(-a / sqrt 2) / 2:
    two erfc and one exp, no logarithm. Every factor stays in float64's normal range while
    |shared| <= ``SAFE_SHARED`` and both a >= ``SAFE_A``; elsewhere the log form
    logit(u) < shared + log Phi(a_neg) - log Phi(a_pos) with :func:`log_normal_cdf`. Arguments broadcast.
    """
    shape = _broadcast_shape(shared, a_neg, a_pos, u)
    shared, a_neg, a_pos, u = (t.expand(shape) for t in (shared, a_neg, a_pos, u))
    phi_neg = torch.special.erfc(a_neg * -math.sqrt(0.5))
    phi_pos = torch.special.erfc(a_pos * -math.sqrt(0.5))
    chosen = (u * phi_pos) < torch.exp(shared.clamp(-SAFE_SHARED, SAFE_SHARED)).mul_(phi_neg).mul_(1.0 - u)
    unsafe = (shared.abs() > SAFE_SHARED) | (torch.minimum(a_neg, a_pos) < SAFE_A)
    if bool(unsafe.any()):
        where = unsafe.nonzero(as_tuple=True)
        v = u[where]
        chosen[where] = torch.log(v / (1.0 - v)) < (shared[where] + log_normal_cdf(a_neg[where])
                                                     - log_normal_cdf(a_pos[where]))
    return chosen, phi_neg, phi_pos


def negative_piece_chosen(negative: tuple[Tensor, Tensor, Tensor], positive: tuple[Tensor, Tensor, Tensor],
                          u: Tensor, bracket: bool = True) -> Tensor:
    """Whether u < p_- = M_- / (M_- + M_+), the piece masses of :func:`two_piece_mixture` (see
    :func:`_choose_pieces`)."""
    return _choose_pieces(negative, positive, u, bracket)[0]


def _choose_pieces(negative: tuple[Tensor, Tensor, Tensor], positive: tuple[Tensor, Tensor, Tensor],
                   u: Tensor, bracket: bool) -> tuple[Tensor, float, tuple[Tensor, Tensor] | None]:
    """Whether u < p_- elementwise, the fraction of elements the bracket left open (1 without it), and
    (2 Phi(a_-), 2 Phi(a_+)) for every element when the exact comparison ran on all of them (else None).

    With ``bracket``, the log-odds are first bracketed with :func:`log_ndtr_bounds` and compared with
    logit(u); :func:`exact_negative_choice` runs only where logit(u) falls inside the bracket (or
    everywhere when that is over a quarter of the elements, as at large noise), so the answer is that of
    the exact comparison wherever it is decided to float64 accuracy (the bracket carries a relative
    slack). Without it, the exact comparison everywhere. Piece tensors broadcast against ``u``
    (constant variances may be 0-dim).
    """
    (m_neg, v_neg, k_neg), (m_pos, v_pos, k_pos) = negative, positive
    a_neg, a_pos = m_neg * -v_neg.rsqrt(), m_pos * v_pos.rsqrt()
    shared = (k_neg - k_pos).add_(0.5 * (torch.log(v_neg) - torch.log(v_pos)))
    if not bracket:
        chosen, phi_neg, phi_pos = exact_negative_choice(shared, a_neg, a_pos, u)
        return chosen, 1.0, (phi_neg, phi_pos)
    logit_u = torch.log(u / (1.0 - u))
    (neg_lo, neg_hi), (pos_lo, pos_hi) = log_ndtr_bounds(a_neg), log_ndtr_bounds(a_pos)
    lower, upper = (shared + neg_lo).sub_(pos_hi), (shared + neg_hi).sub_(pos_lo)
    lower.sub_(lower.abs().mul_(_SLACK).add_(_SLACK))
    upper.add_(upper.abs().mul_(_SLACK).add_(_SLACK))
    undecided = (logit_u >= lower) & (logit_u < upper)
    count = int(undecided.sum())
    if 4 * count > undecided.numel():  # mostly open (large noise): exact everywhere, no gather
        chosen, phi_neg, phi_pos = exact_negative_choice(shared, a_neg, a_pos, u)
        return chosen, count / undecided.numel(), (phi_neg, phi_pos)
    chosen = logit_u < lower
    if count:
        open_ = undecided.nonzero(as_tuple=True)
        shape = undecided.shape
        chosen[open_] = exact_negative_choice(*(t.expand(shape)[open_] for t in (shared, a_neg, a_pos, u)))[0]
    return chosen, count / undecided.numel(), None


def two_piece_mixture(negative: tuple[Tensor, Tensor, Tensor], positive: tuple[Tensor, Tensor, Tensor],
                      generator: torch.Generator, normal_dtype: torch.dtype = torch.float64) -> Tensor:
    """Draw from p(z) ∝ exp(k_- - (z - m_-)^2 / 2v_-) on z <= 0 plus exp(k_+ - (z - m_+)^2 / 2v_+) on z > 0.

    Each piece is ``(m, v, k)``; the six tensors broadcast together (constant variances may be 0-dim).
    Piece masses are M = exp(k) sqrt(v) Phi(+-m / sqrt v) (spec §8 item 1): the negative piece is taken
    when u < p_- = M_- / (M_- + M_+) for u ~ U(0, 1), compared without over- or underflow
    (:func:`negative_piece_chosen`), then the truncated draw. This is the exact draw of every element;
    :func:`sample_pre_activations` puts a round of :func:`propose_two_pieces` before it where that pays. Returns
    float64; ``normal_dtype``: see :func:`standard_normal_above`.
    """
    negative, positive = (tuple(torch.as_tensor(t, dtype=torch.float64) for t in piece) for piece in (negative, positive))
    return _exact_two_pieces(negative, positive, generator, normal_dtype, True)[0]


def propose_two_pieces(negative: tuple[Tensor, Tensor, Tensor], positive: tuple[Tensor, Tensor, Tensor],
                       generator: torch.Generator, normal_dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """One round of a rejection sampler of :func:`two_piece_mixture`'s density that needs no normal CDF
    (:func:`sample_pre_activations` takes it first, the exact draw for what it rejects).

    Each piece untruncated, g(z) = exp(k - (z - m)^2 / 2v), has mass W = exp(k) sqrt(2 pi v). Choose the negative
    piece with probability W_- / (W_- + W_+) = sigmoid(k_- - k_+ + log(v_- / v_+) / 2), draw z from its Gaussian
    N(m, v) and accept z when it lies on that piece's side of 0 (z <= 0 for the negative one). An accepted z has
    density sum_c W_c / (W_- + W_+) N(z; m_c, v_c) 1[z on c's side] ∝ g_-(z) 1[z <= 0] + g_+(z) 1[z > 0], the
    target exactly; the acceptance rate is (M_- + M_+) / (W_- + W_+), the share of the chosen Gaussian on its
    own side (near 1 at small noise, where each piece's mean lies far on its side of 0). Returns the float64
    draws and the rejected elements (a bool mask), which the caller must draw again. The candidates are drawn
    in ``normal_dtype`` (see :func:`standard_normal_above`)."""
    (m_neg, v_neg, k_neg), (m_pos, v_pos, k_pos) = negative, positive
    log_odds = (k_neg - k_pos).add_(0.5 * (torch.log(v_neg) - torch.log(v_pos)))
    shape = _broadcast_shape(m_neg, v_neg, k_neg, m_pos, v_pos, k_pos, log_odds)
    u = torch.rand(shape, generator=generator, device=log_odds.device, dtype=torch.float64)
    go_negative = u < torch.sigmoid(log_odds)
    _, _, mean, std = _chosen_piece(go_negative, negative, positive)
    draws = torch.randn(shape, generator=generator, device=log_odds.device, dtype=normal_dtype).double()
    draws.mul_(std).add_(mean)
    return draws, (draws <= 0.0) != go_negative


def propose_relu(omega: Tensor, post: Tensor, delta_z: float, delta_x: float, generator: torch.Generator,
                 normal_dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """:func:`propose_two_pieces` of the relu pieces (:func:`pre_activation_pieces`, App. E.1) in fewer passes, with
    the same random numbers in the same order (the same draws up to rounding). With d = x - omega and
    Delta = Delta_X + Delta_Z, the log-odds of the untruncated pieces are
    log(Delta / Delta_X) / 2 + d^2 / 2 Delta - x^2 / 2 Delta_X, and the positive piece is N(omega + d Delta_Z / Delta,
    Delta_X Delta_Z / Delta), the negative one N(omega, Delta_Z). ``omega`` and ``post`` share one shape."""
    omega, post = omega.double(), post.double()
    total = delta_x + delta_z
    d = post - omega
    log_odds = d.square().mul_(0.5 / total).addcmul_(post, post, value=-0.5 / delta_x)
    log_odds.add_(0.5 * math.log(total / delta_x))
    u = torch.rand(omega.shape, generator=generator, device=omega.device, dtype=torch.float64)
    go_positive = u >= torch.sigmoid_(log_odds)
    positive = go_positive.to(torch.float64)
    draws = torch.randn(omega.shape, generator=generator, device=omega.device, dtype=normal_dtype).double()
    std_z = math.sqrt(delta_z)
    std = positive * (math.sqrt(delta_x * delta_z / total) - std_z)
    draws = torch.addcmul(omega, draws, std.add_(std_z)).addcmul_(positive, d, value=delta_z / total)
    return draws, (draws > 0.0).ne_(go_positive)


def _draw_chunk(activation: str, omega: Tensor, post: Tensor, delta_z: float, delta_x: float,
                generator: torch.Generator, normal_dtype: torch.dtype, bracket: bool,
                propose: bool) -> tuple[Tensor, float, float | None]:
    """The draw of one chunk of :func:`sample_pre_activations`, with or without the proposal round (for relu
    :func:`propose_relu`, else :func:`propose_two_pieces`) and the piece-choice bracket (never for fewer than
    ``BRACKET_MIN`` rejected proposals). Returns the float64 draws, the fraction of the elements left to the exact
    draw (1 without proposals) and the fraction of those the bracket left open (None where it did not run)."""
    if not propose:
        pieces = pre_activation_pieces(activation, omega, post, delta_z, delta_x)
        draws, open_fraction = _exact_two_pieces(*pieces, generator, normal_dtype, bracket)
        return draws, 1.0, open_fraction
    if activation == "relu":
        draws, rejected = propose_relu(omega, post, delta_z, delta_x, generator, normal_dtype)
    else:
        draws, rejected = propose_two_pieces(*pre_activation_pieces(activation, omega, post, delta_z, delta_x),
                                             generator, normal_dtype)
    count = int(rejected.sum())
    if not count:
        return draws, 0.0, None
    where = rejected.nonzero(as_tuple=True)
    pieces = pre_activation_pieces(activation, omega[where], post[where], delta_z, delta_x)
    small = count < BRACKET_MIN  # a few rejected elements: the bracket's ~20 operations cost more than they save
    draws[where], open_fraction = _exact_two_pieces(*pieces, generator, normal_dtype, bracket and not small)
    return draws, count / rejected.numel(), None if small else open_fraction


def _exact_two_pieces(negative: tuple[Tensor, Tensor, Tensor], positive: tuple[Tensor, Tensor, Tensor],
                      generator: torch.Generator, normal_dtype: torch.dtype, bracket: bool) -> tuple[Tensor, float]:
    """The exact draw of :func:`two_piece_mixture` (float64 pieces): the piece by its mass, then the truncated
    draw; returns it and the fraction of elements the bracket left open."""
    shape = _broadcast_shape(*negative, *positive)
    u = torch.rand(shape, generator=generator, device=negative[0].device, dtype=torch.float64)
    go_negative, open_fraction, phis = _choose_pieces(negative, positive, u, bracket)
    on_negative, on_positive, mean, std = _chosen_piece(go_negative, negative, positive)
    sign = on_positive - on_negative  # the side of 0 the draw lies on
    alpha = (mean * sign).div_(std).neg_()
    mass = None if phis is None else _select(on_negative, on_positive, *phis).mul_(0.5)  # Phi(a) of the piece
    draws = standard_normal_above(alpha, generator, normal_dtype, mass)
    return (sign * std).mul_(draws).add_(mean), open_fraction


def _chosen_piece(go_negative: Tensor, negative: tuple[Tensor, Tensor, Tensor],
                  positive: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The chosen piece per element (``go_negative``: the negative one): its 0/1 weights ``on_negative``,
    ``on_positive`` (float64, for :func:`_select`) and its mean and standard deviation."""
    on_negative = go_negative.to(torch.float64)
    on_positive = 1.0 - on_negative
    mean = _select(on_negative, on_positive, negative[0], positive[0])
    std = _select(on_negative, on_positive, negative[1].sqrt(), positive[1].sqrt())
    return on_negative, on_positive, mean, std


def _select(on_first: Tensor, on_second: Tensor, first: Tensor, second: Tensor) -> Tensor:
    """``torch.where(mask, first, second)`` for finite values, given the mask as float64 ``on_first`` (1 or 0)
    and ``on_second = 1 - on_first``: first * on_first + second * on_second is exact (x * 1 + y * 0 = x).
    On CPU this runs vectorised, where ``torch.where`` branches on a mask that is random here (the piece
    choice) and is several times slower."""
    return torch.addcmul(second * on_second, first, on_first)


def sample_pre_activations(activation: str, omega: Tensor, post: Tensor, delta_z: float, delta_x: float,
                           generator: torch.Generator, out: Tensor, fused: bool = True) -> Tensor:
    """Draw every pre-activation z ~ P(z | omega, x) (eq. 10) into ``out`` (contiguous, the shape of ``omega``),
    ``CHUNK`` elements at a time so that the float64 temporaries stay in cache; the untruncated candidates are drawn
    in ``out``'s dtype (:func:`standard_normal_above`). The first chunk takes a round of :func:`propose_two_pieces`
    (:func:`propose_relu` for relu) and the piece-choice bracket for the exact draws of what it rejects. The chunks
    of a layer are alike, so later chunks keep each shortcut while it pays: the proposals while they reject at most
    ``PROPOSALS_REJECT`` (not at large noise or for the linear activation, whose pieces are one Gaussian), the
    bracket while it leaves at most a quarter of the exact draws open.

    With ``fused`` (the default), a relu layer whose ``omega``, ``post`` and ``out`` share one CPU dtype is drawn in C
    instead (:func:`lit_bayes.steppers.relu_draw.draw_relu_layer`: proposal rounds on every element and again on the
    rejected ones, then the exact draw of what they leave); the same law, other random numbers."""
    kernel = relu_draw_kernel(out.dtype) if fused and _fused_applies(activation, omega, post, out) else None
    if kernel is not None:
        omega, post = omega.contiguous().view(-1), post.expand_as(omega).contiguous().view(-1)
        pending = draw_relu_layer(kernel, omega, post, delta_z, delta_x, generator, out.view(-1))
        if not pending.numel():
            return out
        omega, post = omega[pending], post[pending]  # what the kernel could not draw (NaN inputs): the torch path
        bracket, propose = pending.numel() >= BRACKET_MIN, False
    else:
        omega, post = (t.expand_as(omega).to(torch.float64, memory_format=torch.contiguous_format).reshape(-1)
                       for t in (omega, post))  # one pass each: in float64 and in row order (omega may be transposed)
        pending, bracket, propose = None, True, True
    flat = out.view(-1)
    for start in range(0, omega.numel(), CHUNK):
        part = slice(start, start + CHUNK)
        draws, left, open_fraction = _draw_chunk(activation, omega[part], post[part], delta_z, delta_x, generator,
                                                 out.dtype, bracket, propose)
        if pending is None:
            flat[part] = draws
        else:
            flat[pending[part]] = draws.to(out.dtype)
        propose = left <= PROPOSALS_REJECT
        if open_fraction is not None:
            bracket = open_fraction <= 0.25
    return out


def _fused_applies(activation: str, omega: Tensor, post: Tensor, out: Tensor) -> bool:
    """Whether :func:`sample_pre_activations` draws in C: relu, and ``omega``, ``post`` and ``out`` (contiguous) of
    one CPU dtype, float32 or float64."""
    return (activation == "relu" and out.dtype in REALS and omega.dtype == post.dtype == out.dtype
            and out.is_contiguous() and all(t.device.type == "cpu" for t in (omega, post, out)))


def pre_activation_pieces(activation: str, omega: Tensor, post: Tensor, delta_z: float, delta_x: float):
    """The two pieces of P(z | omega, x) ∝ exp[-(z - omega)^2 / 2 Delta_Z - (sigma(z) - x)^2 / 2 Delta_X] (eq. 10).

    ``omega`` = W^T X + b (the pre-activation mean), ``post`` = x (the post-activation).
    Completing the square on each side of 0, with Delta = Delta_X + Delta_Z and
    v = Delta_X Delta_Z / Delta (App. E; the constants k are exact, common factors dropped):

    * linear: both pieces N((Delta_X omega + Delta_Z x) / Delta, v), k = 0 (a plain Gaussian);
    * relu (E.1): z <= 0: N(omega, Delta_Z), k = -x^2 / 2 Delta_X;
      z > 0: N(m_+, v), k = -(x - omega)^2 / 2 Delta;
    * sign (E.2): N(omega, Delta_Z) on both sides, k_+- = -(x -+ 1)^2 / 2 Delta_X;
    * abs (E.3): z > 0 as relu's positive piece, z <= 0: N((Delta_X omega - Delta_Z x) / Delta, v),
      k = -(x + omega)^2 / 2 Delta.

    The variances are 0-dim float64 tensors (they are constants), the rest float64 like ``omega``.
    """
    omega, post = omega.double(), post.double()
    total = delta_x + delta_z
    v = torch.tensor(delta_x * delta_z / total, dtype=torch.float64, device=omega.device)
    v_z = torch.tensor(delta_z, dtype=torch.float64, device=omega.device)
    m_plus = torch.add(omega * (delta_x / total), post, alpha=delta_z / total)
    if activation == "linear":
        zero = torch.zeros((), dtype=torch.float64, device=omega.device)
        return (m_plus, v, zero), (m_plus, v, zero)
    if activation == "sign":
        return ((omega, v_z, (post + 1.0).square_().mul_(-0.5 / delta_x)),
                (omega, v_z, (post - 1.0).square_().mul_(-0.5 / delta_x)))
    k_plus = (post - omega).square_().mul_(-0.5 / total)
    if activation == "relu":
        return (omega, v_z, post.square().mul_(-0.5 / delta_x)), (m_plus, v, k_plus)
    if activation == "abs":
        m_minus = torch.add(omega * (delta_x / total), post, alpha=-delta_z / total)
        return (m_minus, v, (post + omega).square_().mul_(-0.5 / total)), (m_plus, v, k_plus)
    raise ValueError(f"activation must be one of 'relu', 'sign', 'abs', 'linear', got {activation!r}")


def probit_scores(omega: Tensor, labels: Tensor, delta_z: float, scores: Tensor, generator: torch.Generator,
                  normal_dtype: torch.dtype = torch.float64) -> Tensor:
    """New output scores Z (..., n, K) of the multinomial probit given labels y = argmax Z (App. E.4).

    First Z_y ~ N(omega_y, Delta_Z) truncated to [max_{a != y} Z_a, inf) given the current other
    scores (eq. 50), then every other Z_a ~ N(omega_a, Delta_Z) truncated to (-inf, Z_y] (eq. 51),
    all in parallel: given Z_y they are conditionally independent. Returns float64;
    ``normal_dtype``: see :func:`standard_normal_above`.
    """
    labels = labels.long().expand(omega.shape[:-1]).unsqueeze(-1)
    std = torch.tensor(math.sqrt(delta_z), dtype=torch.float64, device=omega.device)
    others_max = scores.to(torch.float64, copy=True).scatter_(-1, labels, -math.inf).amax(-1, keepdim=True)
    top = truncated_normal(omega.gather(-1, labels), std, others_max, True, generator, normal_dtype)
    others = truncated_normal(omega, std, top, False, generator, normal_dtype)
    return others.scatter_(-1, labels, top)  # the label's score in its place (a scatter: no mask to branch on)


def row_chunks(rows: int, width: int) -> list[slice]:
    """Slices over ``rows`` rows of ``width`` elements each, about ``CHUNK`` elements per slice."""
    step = max(1, CHUNK // max(1, width))
    return [slice(start, start + step) for start in range(0, rows, step)]
