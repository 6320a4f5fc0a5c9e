"""Truncated-Gaussian conditionals of the noisy-network Gibbs sampler (noisy-gibbs spec §2.3, App. E).

* :func:`truncated_normal`: N(mean, std^2) restricted to one side of a bound, exact in the
  tails: inverse-CDF sampling up to ``TAIL`` standard deviations inside the cut-off tail,
  Rayleigh-proposal rejection beyond it (spec §8 item 2), always in float64.
* :func:`two_piece_mixture`: a density made of one Gaussian piece on ``z <= 0`` and another on
  ``z > 0`` (the pre-activation conditionals, eq. 10), mixture weights in log space.
* :func:`pre_activation_pieces`: those pieces for relu, sign, abs and linear (App. E.1-E.3).
* :func:`probit_scores`: the multinomial-probit output scores given the labels (App. E.4, eqs. 50-51).

All functions draw from an explicit ``torch.Generator`` and broadcast over leading (chain) dimensions.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.special import log_ndtr, ndtr, ndtri

__all__ = ["TAIL", "pre_activation_pieces", "probit_scores", "truncated_normal", "two_piece_mixture"]

TAIL = 7.0  # beyond this many std inside the cut-off tail, inverse-CDF sampling loses accuracy in float64
_ONE_BELOW = 1.0 - 2.0**-53  # largest float64 below 1


def _uniform(shape: torch.Size, generator: torch.Generator, device) -> Tensor:
    """Uniform draws on (0, 1] in float64."""
    return 1.0 - torch.rand(shape, generator=generator, device=device, dtype=torch.float64)


def standard_normal_above(alpha: Tensor, generator: torch.Generator) -> Tensor:
    """X ~ N(0, 1) conditioned on X >= alpha, elementwise (float64 ``alpha``).

    Below ``TAIL``: X = -ndtri(u Phi(-alpha)) with u ~ U(0, 1]. At or above ``TAIL``: Marsaglia's
    tail method, X = sqrt(alpha^2 - 2 log U1) accepted when U2 X <= alpha (acceptance > 98%).
    """
    u = _uniform(alpha.shape, generator, alpha.device)
    inverse = -ndtri((u * ndtr(-alpha.clamp(max=TAIL))).clamp(max=_ONE_BELOW))
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


def two_piece_mixture(negative: tuple[Tensor, Tensor, Tensor], positive: tuple[Tensor, Tensor, Tensor],
                      generator: torch.Generator) -> Tensor:
    """Draw from p(z) ∝ exp(k_- - (z - m_-)^2 / 2v_-) on z <= 0 plus exp(k_+ - (z - m_+)^2 / 2v_+) on z > 0.

    Each piece is ``(m, v, k)``. Piece masses are compared in log space (spec §8 item 1),
    log M = k + log(v) / 2 + log Phi(+-m / sqrt v), so the Bernoulli weight
    p_- = sigmoid(log M_- - log M_+) never over- or underflows. Returns float64.
    """
    (m_neg, v_neg, k_neg), (m_pos, v_pos, k_pos) = (
        [torch.as_tensor(t, dtype=torch.float64) for t in piece] for piece in (negative, positive))
    log_mass_neg = k_neg + 0.5 * torch.log(v_neg) + log_ndtr(-m_neg / v_neg.sqrt())
    log_mass_pos = k_pos + 0.5 * torch.log(v_pos) + log_ndtr(m_pos / v_pos.sqrt())
    p_neg = torch.sigmoid(log_mass_neg - log_mass_pos)
    go_negative = torch.rand(p_neg.shape, generator=generator, device=p_neg.device, dtype=torch.float64) < p_neg
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
