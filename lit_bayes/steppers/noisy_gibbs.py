"""Exact Gibbs sweeps of the intermediate-noise network (noisy-gibbs spec §2, Algorithm 1 + App. E-F).

* :class:`LinearGaussianConditional`: the Gaussian conditionals of the weights (eq. 9 / eqs. 18-20)
  and of the post-activations (eq. 8 / eq. 17); one Cholesky factor per layer per sweep, shared
  by every row.
* :func:`sample_bias`: the bias conditional (eqs. 52-55).
* :class:`NoisyGibbsStepper`: one sweep of every chain in the released code's top-down order (§2.5).

Shapes: C chains lead every state tensor; the inputs ``(n, d_1)`` are shared by all chains.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor
from torch.optim import Optimizer

from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.row_products import FixedOperand, row_products, transposed_is_faster
from lit_bayes.steppers.truncated_gaussian import probit_scores, row_chunks, sample_pre_activations
from lit_bayes.unchanged import DerivedFrom

__all__ = ["LinearGaussianConditional", "NoisyGibbsStepper", "sample_bias"]


def _times(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b``, through ``torch.bmm`` when both are 3-D with one batch size: the sweep's products are small, and
    ``matmul``'s broadcasting wrapper costs ~7 µs a call on top of ``bmm`` (2-core AMD EPYC, one thread: a
    (1, 10, 10) by (1, 10, 1) product 9.1 against 2.6 µs)."""
    if a.dim() == b.dim() == 3 and a.shape[0] == b.shape[0]:
        return torch.bmm(a, b)
    return a @ b


class LinearGaussianConditional:
    """Rows r_a of R (k, d) given targets T = D R^T + noise (N(0, delta) entries) and a prior
    N(m0_a, diag(1 / precision)) on each row:

        r_a ~ N(A^{-1} (D^T t_a + delta diag(precision) m0_a), delta A^{-1}),  A = D^T D + delta diag(precision).

    This is Sigma_W = (X^T X / Delta_Z + lambda I)^{-1} of eq. 9 (D = X, m0 = 0) and Sigma_X of
    eq. 8 (D = W, precision 1/Delta_X, m0 = sigma(Z)), rescaled by delta as the released code
    does (spec §2.7). A is factorised once (A = L L^T) and shared by all rows; noise is
    sqrt(delta) L^{-T} eps, through the explicit inverse factor L^{-1} (d x d, one per conditional).

    Args:
        design: D, shape ``(..., m, d)`` (leading chain dimensions, or none when shared).
        precision: the prior precisions, shape ``(d,)``.
        delta: the noise variance of the targets.
        cache_projector: also keep A^{-1} D^T (for a fixed design, the first layer: spec §8 item 10), as a
            :class:`~lit_bayes.row_products.FixedOperand`.
    """

    def __init__(self, design: Tensor, precision: Tensor, delta: float, cache_projector: bool = False) -> None:
        self.design = design
        self.delta = delta
        self.scaled_precision = delta * precision
        gram = _times(design.mT, design)
        gram.diagonal(dim1=-2, dim2=-1).add_(self.scaled_precision)
        self.factor = torch.linalg.cholesky(gram)
        identity = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
        self.inverse_factor = torch.linalg.solve_triangular(self.factor, identity, upper=False)  # L^{-1}, (d, d)
        self.projector = FixedOperand(torch.cholesky_solve(design.mT, self.factor)) if cache_projector else None

    def right_hand_side(self, targets: Tensor, prior_mean: Tensor | None = None) -> Tensor:
        """The rows b_a^T = t_a^T D + delta m0_a^T diag(precision), ``(C, k, d)``."""
        rhs = _times(targets.mT, self.design)
        if prior_mean is not None:
            rhs = rhs + self.scaled_precision * prior_mean
        return rhs

    def mean(self, targets: Tensor, prior_mean: Tensor | None = None) -> Tensor:
        """The conditional means of the rows, ``(C, k, d)``, given targets ``(C, m, k)`` and optionally
        the row prior means ``(C, k, d)``."""
        if self.projector is not None and prior_mean is None:
            return self.projector.times_rows(targets.mT)
        inverse = self.inverse_factor
        return _times(_times(self.right_hand_side(targets, prior_mean), inverse.mT), inverse)

    def covariance(self) -> Tensor:
        """The covariance delta A^{-1} ``(..., d, d)`` shared by every row."""
        return self.delta * torch.cholesky_inverse(self.factor)

    def sample(self, targets: Tensor, generator: torch.Generator, prior_mean: Tensor | None = None) -> Tensor:
        """Draw R ``(C, k, d)`` given targets ``(C, m, k)`` and optionally the row prior means ``(C, k, d)``.

        In row form, R = (B L^{-T} + sqrt(delta) E) L^{-1} with B the rows b_a^T and E standard normal:
        products with the d x d inverse factor on contiguous ``(k, d)`` rows, faster than triangular
        solves against k right-hand sides (k up to the number of training points)."""
        inverse, scale = self.inverse_factor, math.sqrt(self.delta)
        if self.projector is not None and prior_mean is None:
            mean = self.projector.times_rows(targets.mT)  # T^T P^T
            noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
            return mean + _times(scale * noise, inverse)
        if targets.shape[-1] > self.design.shape[-1] and transposed_is_faster(targets.device):  # many rows
            return self._sample_columns(targets, generator, prior_mean)
        white = _times(self.right_hand_side(targets, prior_mean), inverse.mT)
        noise = torch.randn(white.shape, generator=generator, device=white.device, dtype=white.dtype)
        return _times(white.add_(noise, alpha=scale), inverse)

    def _sample_columns(self, targets: Tensor, generator: torch.Generator, prior_mean: Tensor | None) -> Tensor:
        """:meth:`sample` with the k rows on the long axis of every product, R^T = L^{-T} (L^{-1} B^T + sqrt(delta)
        E^T), where the processor multiplies long rows faster (:func:`~lit_bayes.row_products.transposed_is_faster`:
        on the 2-core AMD EPYC, one thread, a 2,084 x 10 by 10 x 10 product took ~70-90 µs row-major and ~25 µs
        transposed). L^{-1} B^T = (L^{-1} D^T) T + (L^{-1} diag(delta precision)) m0^T, so neither B nor its
        transpose is formed; E is drawn ``(C, k, d)`` as in the row form, so both give the same draw to rounding.
        Returns the transposed view of the ``(C, d, k)`` draw."""
        inverse = self.inverse_factor
        white = _times(_times(inverse, self.design.mT), targets)
        if prior_mean is not None:
            white.add_(_times(inverse * self.scaled_precision, prior_mean.mT))
        noise = torch.randn(white.mT.shape, generator=generator, device=white.device, dtype=white.dtype)
        return _times(inverse.mT, white.add_(noise.mT, alpha=math.sqrt(self.delta))).mT


def sample_bias(residual: Tensor, delta_z: float, precision: float, generator: torch.Generator) -> Tensor:
    """b_a ~ N(sum_mu r_a^mu / (n + Delta_Z lambda_b), Delta_Z / (n + Delta_Z lambda_b)) (eqs. 52-55),
    with residuals r = Z^(l+1) - X^(l) W^(l)T of shape ``(C, n, k)``; returns ``(C, k)``."""
    denominator = residual.shape[-2] + delta_z * precision
    noise = torch.randn(residual.shape[:-2] + residual.shape[-1:], generator=generator,
                        device=residual.device, dtype=residual.dtype)
    return residual.sum(-2) / denominator + math.sqrt(delta_z / denominator) * noise


class NoisyGibbsStepper(Optimizer):
    """One exact Gibbs sweep per ``step`` over the weights, biases and latents of every chain.

    The order is the released code's top-down scan (spec §2.5), for l = L..2:
    [probit Z^(L+1)] -> W^(l) -> b^(l) -> X^(l) -> Z^(l) -> ... -> (W^(1), b^(1)) jointly
    (App. F's extended weight matrix [W | b] on inputs [X | 1], whose Cholesky factor and
    A^{-1} X^T are computed once for fixed inputs). Any systematic scan of exact conditionals
    leaves the posterior (eq. 4) invariant.

    Args:
        model: the :class:`NoisyMLP` (architecture, noise variances, prior precisions).
        weights, biases: per layer, the chains' tensors ``(C, d_{l+1}, d_l)`` and ``(C, d_{l+1})``
            (``None`` without biases), updated in place.
        generator: the only source of randomness.
        fused: relu pre-activations drawn in C (:func:`sample_pre_activations`).
    """

    def __init__(self, model: NoisyMLP, weights: list[Tensor], biases: list[Tensor | None],
                 generator: torch.Generator, fused: bool = True) -> None:
        if len(weights) != model.depth or len(biases) != model.depth:
            raise ValueError(f"weights and biases must hold one tensor per layer ({model.depth}), "
                             f"got {len(weights)} and {len(biases)}")
        super().__init__([*weights, *(b for b in biases if b is not None)], {})
        self.model = model
        self.weights = weights
        self.biases = biases
        self.generator = generator
        self.fused = fused
        self._first: DerivedFrom[LinearGaussianConditional] = DerivedFrom(compare_values=True)
        self._inputs: DerivedFrom[FixedOperand] = DerivedFrom(compare_values=True)

    @torch.no_grad()
    def step(self, closure) -> None:
        """``closure()`` returns ``(inputs, targets, latents)`` (see :meth:`sweep`)."""
        self.sweep(*closure())

    def first_layer(self, inputs: Tensor) -> LinearGaussianConditional:
        """The (W^(1), b^(1)) conditional on the fixed inputs, recomputed only when they change."""
        return self._first(inputs, self._first_layer)

    def _first_layer(self, inputs: Tensor) -> LinearGaussianConditional:
        model = self.model
        precision = [model.prior_precision[0]] * inputs.shape[1]
        design = inputs
        if model.has_bias:
            design = torch.cat([inputs, torch.ones_like(inputs[:, :1])], dim=1)
            precision.append(model.bias_precision[0])
        precision = torch.tensor(precision, dtype=inputs.dtype, device=inputs.device)
        return LinearGaussianConditional(design, precision, model.delta_z[0], True)

    def pre_activation(self, layer: int, below: Tensor) -> Tensor:
        """omega = X^(l) W^(l)T + b^(l) for weight layer ``layer`` (0-based) on its input ``below``, the product
        in the orientation this processor runs faster (:func:`lit_bayes.row_products.row_products`); the first
        layer's fixed inputs as a :class:`~lit_bayes.row_products.FixedOperand`, converted once."""
        if layer == 0:
            omega = self._inputs(below, FixedOperand).rows_times(self.weights[0])
        else:
            omega = row_products(self.weights[layer], below)
        bias = self.biases[layer]
        return omega if bias is None else omega + bias.unsqueeze(-2)

    @torch.no_grad()
    def sweep(self, inputs: Tensor, targets: Tensor, latents: Mapping[str, Tensor]) -> None:
        """One sweep, in place. ``inputs`` ``(n, d_1)``; ``targets``: the regression targets ``(n,)``
        or ``(C, n)``, or the probit labels (same shapes, integers); ``latents``: the model's
        :meth:`NoisyMLP.latent_names` to ``(C, n, d_l)`` tensors."""
        model, gen, depth = self.model, self.generator, self.model.depth
        xs = [inputs] + [latents[f"x{j}"] for j in range(2, depth + 1)]  # xs[l] feeds weight layer l
        if model.output == "probit":
            top = latents[f"z{depth + 1}"]
            omega = self.pre_activation(depth - 1, xs[-1])
            for part in row_chunks(top.shape[-2], top.shape[0] * top.shape[-1]):
                top[:, part] = probit_scores(omega[:, part], targets[..., part], model.delta_z[-1], top[:, part], gen,
                                             top.dtype)
        else:
            chains = self.weights[0].shape[0]
            top = targets.to(inputs.dtype).expand(chains, inputs.shape[0]).unsqueeze(-1)
        for layer in range(depth - 1, 0, -1):
            above = top if layer == depth - 1 else latents[f"z{layer + 2}"]
            delta_z = model.delta_z[layer]
            weight, bias = self.weights[layer], self.biases[layer]
            precision = torch.full((weight.shape[-1],), model.prior_precision[layer], dtype=weight.dtype,
                                   device=weight.device)
            shifted = above if bias is None else above - bias.unsqueeze(-2)
            weight.copy_(LinearGaussianConditional(xs[layer], precision, delta_z).sample(shifted, gen))
            if bias is not None:
                bias.copy_(sample_bias(above - _times(xs[layer], weight.mT), delta_z, model.bias_precision[layer], gen))
                shifted = above - bias.unsqueeze(-2)
            z, x = latents[f"z{layer + 1}"], xs[layer]
            post_precision = torch.full_like(precision, 1.0 / model.delta_x[layer - 1])
            post = LinearGaussianConditional(weight, post_precision, delta_z)
            x.copy_(post.sample(shifted.mT, gen, prior_mean=model.sigma(z)))
            sample_pre_activations(model.activation, self.pre_activation(layer - 1, xs[layer - 1]), x,
                                   model.delta_z[layer - 1], model.delta_x[layer - 1], gen, z, self.fused)
        first = self.first_layer(inputs).sample(latents["z2"] if depth > 1 else top, gen)
        self.weights[0].copy_(first[..., : inputs.shape[1]])
        if self.biases[0] is not None:
            self.biases[0].copy_(first[..., -1])
