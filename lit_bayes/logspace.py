"""Log-space reductions and the logistic sigmoid evaluated through ``exp2``.

On CPU, torch's vectorised ``exp2`` costs about a third of its ``exp`` (float32, AVX-512:
0.27 vs 0.82 ms for 960k values on one thread), so ``exp(x) = 2^(x log2 e)`` is the faster
way to the same values. These reductions dominate the likelihood of every classifier
(the FNBG block energies, the posterior predictive).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["exp", "logsumexp", "logsumexp_units", "sigmoid"]

LOG2E = 1.0 / math.log(2.0)


def logsumexp(x: Tensor, dim: int, keepdim: bool = False, overwrite: bool = False) -> Tensor:
    """``log sum_i exp(x_i)`` along ``dim``, with the maximum m shifted out (clamped to the finite
    range, so all -inf gives -inf and any +inf gives +inf, as ``torch.logsumexp``) and the
    exponentials taken as ``2^((x - m) log2 e)``. Differentiable unless ``overwrite``, which
    writes the exponentials over ``x`` instead of a new tensor."""
    largest = torch.finfo(x.dtype).max
    m = x.amax(dim, keepdim=True).clamp(-largest, largest)
    shifted = x.sub_(m) if overwrite else torch.sub(x, m)
    total = shifted.mul_(LOG2E).exp2_().sum(dim, keepdim=True)
    out = total.log() + m
    return out if keepdim else out.squeeze(dim)


def logsumexp_units(units: Sequence[Tensor]) -> Tensor:
    """:func:`logsumexp` over a list of same-shaped tensors (one per unit) instead of a dimension:
    the same maximum shift and clamp, elementwise throughout (for code compiled into one loop,
    :mod:`lit_bayes.fused_tail`)."""
    largest = torch.finfo(units[0].dtype).max
    m = functools.reduce(torch.maximum, units).clamp(-largest, largest)
    return functools.reduce(torch.add, [exp(u - m) for u in units]).log() + m


def exp(x: Tensor) -> Tensor:
    """``exp(x)`` as ``2^(x log2 e)``, in a new tensor."""
    return (x * LOG2E).exp2_()


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))`` as ``1 / (1 + 2^(-x log2 e))``, in a new tensor (for compiled code, where
    inductor's own sigmoid calls the slower ``exp``; the same values as ``torch.sigmoid`` to float
    rounding, incl. 0 and 1 at -inf/+inf)."""
    return 1.0 / (1.0 + (x * -LOG2E).exp2())
