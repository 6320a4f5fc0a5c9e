"""The tanh-approximated GELU through the logistic function (issue 26: the OHSMC step in float64).

GELU with the tanh approximation (Hendrycks & Gimpel 2016, §2; Flax's default GELU, the network of the
Feynman-Kac paper's two-moons pBNN) is

    GELU(x) = 0.5 x (1 + tanh u),   u = sqrt(2 / pi) (x + 0.044715 x^3),

and since 0.5 (1 + tanh u) = sigma(2u) it equals x sigma(2u), with derivative

    GELU'(x) = sigma(2u) + x sigma(2u) (1 - sigma(2u)) 2u',   2u' = 2 sqrt(2 / pi) (1 + 3 * 0.044715 x^2).

On CPU the logistic function costs about a third of tanh in float64 (26 against 67 us on 10,000 values, AMD
EPYC Zen3, one thread), so on the (2000, 5) upper layer of the moons pBNN at J = 100 this form takes 45 / 39 us
forward / backward (the backward from the saved sigma(2u)) against 80 / 85 us for aten's kernels, and the whole
OHSMC step (float64, J = 100) 0.955-0.958 of the time in one process, the two forms interleaved. In float32 the
step took 0.98-1.01 of the time (aten's float32 tanh is cheaper), on 2,000 values the two forms cost the same in
float64, and on smaller inputs or on GPUs the half-dozen elementwise calls cost more than aten's one kernel: so the
logistic form is for float64 CPU inputs of at least :data:`LOGISTIC_MIN_NUMEL` values, and every other input keeps
aten's kernels. The two forms agree to rounding (a few ulp).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["LOGISTIC_MIN_NUMEL", "TanhGELU", "logistic_gelu", "logistic_gelu_backward", "uses_logistic_form"]

#: the fewest values of a float64 CPU input that :class:`TanhGELU` evaluates in the logistic form (on 2,000 values
#: the two forms cost the same, on 10,000 the logistic one is ~1.8x faster: the module docstring)
LOGISTIC_MIN_NUMEL = 4096

_TWO_C = 2.0 * math.sqrt(2.0 / math.pi)  # 2u = _TWO_C (x + _KAPPA x^3)
_KAPPA = 0.044715


def uses_logistic_form(x: Tensor) -> bool:
    """Whether :class:`TanhGELU` evaluates ``x`` in the logistic form (a float64 CPU tensor of at least
    :data:`LOGISTIC_MIN_NUMEL` values)."""
    return x.dtype == torch.float64 and x.is_cpu and x.numel() >= LOGISTIC_MIN_NUMEL


def logistic_gelu(x: Tensor) -> tuple[Tensor, Tensor]:
    """``(GELU(x), sigma(2u))``: the tanh GELU as x sigma(2u) (module docstring), and the logistic factor that
    :func:`logistic_gelu_backward` needs."""
    s = x * x
    s.mul_(_TWO_C * _KAPPA).add_(_TWO_C).mul_(x).sigmoid_()  # sigma(2 sqrt(2/pi) x (1 + 0.044715 x^2))
    return x * s, s


def logistic_gelu_backward(grad: Tensor, x: Tensor, s: Tensor) -> Tensor:
    """``grad * GELU'(x)`` from the input ``x`` and the factor ``s`` = sigma(2u) of :func:`logistic_gelu`."""
    slope = x * x
    slope.mul_(3.0 * _TWO_C * _KAPPA).add_(_TWO_C).mul_(x)  # x 2u'
    return slope.mul_(torch.rsub(s, 1.0).mul_(s)).add_(s).mul_(grad)


class _LogisticGELU(torch.autograd.Function):
    """:func:`logistic_gelu` under autograd (and torch.func), its backward :func:`logistic_gelu_backward`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor) -> tuple[Tensor, Tensor]:
        return logistic_gelu(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(inputs[0], output[1])

    @staticmethod
    def backward(ctx, grad: Tensor, _unused: Tensor) -> Tensor:
        x, s = ctx.saved_tensors
        return logistic_gelu_backward(grad, x, s)


class TanhGELU(nn.GELU):
    """``nn.GELU(approximate="tanh")`` evaluated in the logistic form x sigma(2u) on float64 CPU inputs of at least
    :data:`LOGISTIC_MIN_NUMEL` values (the module docstring), with aten's kernels otherwise. The form depends on
    the input's dtype, size and device only, not on grad mode: a forward with autograd and one without give the
    same values to the bit."""

    def __init__(self) -> None:
        super().__init__(approximate="tanh")

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and x.requires_grad and uses_logistic_form(x):
            return _LogisticGELU.apply(x)[0]
        return self.forward_with_factor(x)[0]

    def forward_with_factor(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        """The forward without autograd and what a hand-written backward needs besides ``x`` and the output:
        the logistic factor sigma(2u) in the logistic form, None where aten's kernel ran
        (:func:`logistic_gelu_backward`, :mod:`lit_bayes.models.sequential_backprop`)."""
        if not uses_logistic_form(x):
            return super().forward(x), None
        return logistic_gelu(x)
