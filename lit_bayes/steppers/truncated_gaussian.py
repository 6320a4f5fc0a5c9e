"""Truncated-Gaussian conditionals of the noisy-network Gibbs sampler (noisy-gibbs spec §2.3, App. E).

* :func:`truncated_normal`: N(mean, std^2) restricted to one side of a bound, exact in the
  tails: inverse-CDF sampling up to ``TAIL`` standard deviations inside the cut-off tail,
  Rayleigh-proposal rejection beyond it (spec §8 item 2), always in float64.
* :func:`two_piece_mixture`: a density made of one Gaussian piece on ``z <= 0`` and another on
  ``z > 0`` (the pre-activation conditionals, eq. 10), mixture weights in log space, the exact
  log Phi evaluated only where cheap bounds leave the choice open.
* :func:`pre_activation_pieces`: those pieces for relu, sign, abs and linear (App. E.1-E.3).
* :func:`probit_scores`: the multinomial-probit output scores given the labels (App. E.4, eqs. 50-51).

All functions draw from an explicit ``torch.Generator`` and broadcast over leading (chain) dimensions.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.special import log_ndtr, ndtri

__all__ = ["TAIL", "log_ndtr_bounds", "negative_piece_chosen", "pre_activation_pieces", "probit_scores",
           "truncated_normal", "two_piece_mixture"]

TAIL = 7.0  # beyond this many std inside the cut-off tail, inverse-CDF sampling loses accuracy in float64
_ONE_BELOW = 1.0 - 2.0**-53  # largest float64 below 1
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SLACK = 1e-9  # relative margin on the log Phi bounds, far above float64 rounding


def _uniform(shape: torch.Size, generator: torch.Generator, device) -> Tensor:
    """Uniform draws on (0, 1] in float64."""
    return 1.0 - torch.rand(shape, generator=generator, device=device, dtype=torch.float64)


def standard_normal_above(alpha: Tensor, generator: torch.Generator) -> Tensor:
    """X ~ N(0, 1) conditioned on X >= alpha, elementwise (float64 ``alpha``).

    Below ``TAIL``: X = -ndtri(u Phi(-alpha)) with u ~ U(0, 1] (Phi(-alpha) through erfc, which keeps its
    relative accuracy in the tail where torch's ndtr does not). At or above ``TAIL``: Marsaglia's tail
    method, X = sqrt(alpha^2 - 2 log U1) accepted when U2 X <= alpha (acceptance > 98%).
    """
    u = _uniform(alpha.shape, generator, alpha.device)
    mass = 0.5 * torch.special.erfc(alpha.clamp(max=TAIL) * math.sqrt(0.5))
    inverse = -ndtri((u * mass).clamp(max=_ONE_BELOW))
    tail = (alpha >= TAIL).nonzero(as_tuple=True)
    if tail[0].numel() == 0:
        return torch.maximum(inverse, alpha)
    result = inverse.clone()
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
                     generator: torch.Generator) -> Tensor:
    """Draw z ~ N(mean, std^2) restricted to z >= bound where ``above`` else z <= bound.

    Arguments broadcast together; the result is float64 (callers cast back).
    """
    mean, std, bound = (torch.as_tensor(t, dtype=torch.float64, device=mean.device) for t in (mean, std, bound))
    sign = torch.where(torch.as_tensor(above, device=mean.device), 1.0, -1.0).to(torch.float64)
    mean, std, bound, sign = torch.broadcast_tensors(mean, std, bound, sign)
    return mean + sign * std * standard_normal_above(sign * (bound - mean) / std, generator)


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
    return c - 0.5 * c * c - _HALF_LOG_2PI, -0.5 * d * d


def negative_piece_chosen(negative: tuple[Tensor, Tensor, Tensor], positive: tuple[Tensor, Tensor, Tensor],
                          logit_u: Tensor) -> Tensor:
    """Whether logit(u) < log M_- - log M_+ (i.e. u < p_-), the piece masses of :func:`two_piece_mixture`.

    The log-odds are first bracketed with :func:`log_ndtr_bounds`; ``log_ndtr`` (a slow scalar loop)
    is evaluated only where logit(u) falls inside the bracket (or everywhere when that is over a quarter
    of the elements, as at large noise), so the answer is that of the exact comparison wherever it is
    decided to float64 accuracy (the bracket carries a relative slack).
    """
    (m_neg, v_neg, k_neg), (m_pos, v_pos, k_pos) = negative, positive
    a_neg, a_pos = -m_neg / v_neg.sqrt(), m_pos / v_pos.sqrt()
    shared = k_neg - k_pos + 0.5 * (torch.log(v_neg) - torch.log(v_pos))
    (neg_lo, neg_hi), (pos_lo, pos_hi) = log_ndtr_bounds(a_neg), log_ndtr_bounds(a_pos)
    lower, upper = shared + neg_lo - pos_hi, shared + neg_hi - pos_lo
    lower = lower - _SLACK * (1.0 + lower.abs())
    upper = upper + _SLACK * (1.0 + upper.abs())
    undecided = (logit_u >= lower) & (logit_u < upper)
    open_ = undecided.nonzero(as_tuple=True)
    if 4 * open_[0].numel() > undecided.numel():  # mostly open (large noise): exact everywhere, no gather
        return logit_u < shared + log_ndtr(a_neg) - log_ndtr(a_pos)
    chosen = logit_u < lower
    if open_[0].numel():
        exact = shared[open_] + log_ndtr(a_neg[open_]) - log_ndtr(a_pos[open_])
        chosen[open_] = logit_u[open_] < exact
    return chosen


def two_piece_mixture(negative: tuple[Tensor, Tensor, Tensor], positive: tuple[Tensor, Tensor, Tensor],
                      generator: torch.Generator) -> Tensor:
    """Draw from p(z) ∝ exp(k_- - (z - m_-)^2 / 2v_-) on z <= 0 plus exp(k_+ - (z - m_+)^2 / 2v_+) on z > 0.

    Each piece is ``(m, v, k)``. Piece masses are compared in log space (spec §8 item 1),
    log M = k + log(v) / 2 + log Phi(+-m / sqrt v): the negative piece is taken when
    logit(u) < log M_- - log M_+ for u ~ U(0, 1), i.e. with probability p_- = sigmoid(log M_- - log M_+),
    which never over- or underflows (:func:`negative_piece_chosen`). Returns float64.
    """
    m_neg, v_neg, k_neg, m_pos, v_pos, k_pos = torch.broadcast_tensors(
        *[torch.as_tensor(t, dtype=torch.float64) for t in (*negative, *positive)])
    u = torch.rand(m_neg.shape, generator=generator, device=m_neg.device, dtype=torch.float64)
    go_negative = negative_piece_chosen((m_neg, v_neg, k_neg), (m_pos, v_pos, k_pos), torch.log(u / (1.0 - u)))
    mean = torch.where(go_negative, m_neg, m_pos)
    std = torch.where(go_negative, v_neg, v_pos).sqrt()
    return truncated_normal(mean, std, torch.zeros((), dtype=torch.float64, device=mean.device), ~go_negative,
                            generator)


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
    """
    omega, post = omega.double(), post.double()
    total = delta_x + delta_z
    v = torch.full_like(omega, delta_x * delta_z / total)
    v_z = torch.full_like(omega, delta_z)
    m_plus = (delta_x * omega + delta_z * post) / total
    k_plus = -((post - omega) ** 2) / (2.0 * total)
    if activation == "linear":
        zero = torch.zeros_like(omega)
        return (m_plus, v, zero), (m_plus, v, zero)
    if activation == "relu":
        return (omega, v_z, -(post**2) / (2.0 * delta_x)), (m_plus, v, k_plus)
    if activation == "sign":
        return (omega, v_z, -((post + 1.0) ** 2) / (2.0 * delta_x)), (omega, v_z, -((post - 1.0) ** 2) / (2.0 * delta_x))
    if activation == "abs":
        m_minus = (delta_x * omega - delta_z * post) / total
        return (m_minus, v, -((post + omega) ** 2) / (2.0 * total)), (m_plus, v, k_plus)
    raise ValueError(f"activation must be one of 'relu', 'sign', 'abs', 'linear', got {activation!r}")


def probit_scores(omega: Tensor, labels: Tensor, delta_z: float, scores: Tensor, generator: torch.Generator) -> Tensor:
    """New output scores Z (..., n, K) of the multinomial probit given labels y = argmax Z (App. E.4).

    First Z_y ~ N(omega_y, Delta_Z) truncated to [max_{a != y} Z_a, inf) given the current other
    scores (eq. 50), then every other Z_a ~ N(omega_a, Delta_Z) truncated to (-inf, Z_y] (eq. 51),
    all in parallel: given Z_y they are conditionally independent. Returns float64.
    """
    labels = labels.long().expand(omega.shape[:-1]).unsqueeze(-1)
    is_label = torch.zeros(omega.shape, dtype=torch.bool, device=omega.device).scatter_(-1, labels, True)
    std = torch.tensor(math.sqrt(delta_z), dtype=torch.float64, device=omega.device)
    others_max = scores.double().masked_fill(is_label, -math.inf).amax(-1, keepdim=True)
    top = truncated_normal(omega.gather(-1, labels), std, others_max, True, generator)
    others = truncated_normal(omega, std, top, False, generator)
    return torch.where(is_label, top, others)
