"""Exact Gibbs sweeps of the intermediate-noise CNN (noisy-gibbs spec §2.4-2.5, App. G).

A conv layer is a linear map with tied weights, so every conditional is one of the dense ones of
:mod:`lit_bayes.steppers.noisy_gibbs` on a rearranged design:

* conv weights (eqs. 68-69, 82-85): the rows W_alpha (length C_in K) regress the outputs
  Z_{alpha a}^mu (rows indexed by (mu, a)) on the patches X^mu_{beta, nu_a(r)} (:func:`conv_design`,
  :func:`conv_rows`), so Atilde = patches^T patches / Delta_Z + lambda I;
* conv bias (eqs. 100-103): :func:`sample_bias` on those rows, denominator n H_Z W_Z + Delta_Z lambda_b;
* conv inputs X^mu (eqs. 77-80, 86-90): Gaussian over all C H W coordinates with the unrolled conv
  matrix (:func:`conv_matrix`) as design: a dense (C H W)^3 factorisation, shared by the points;
* inputs of an average pooling (App. G.3): :func:`sample_pooled_input`, the closed-form
  identity-minus-rank-one covariance per receptive field;
* conv or pooling outputs feeding an activation: the two-piece laws of eq. 10 (App. E) with
  omega = conv(X, W) + b or the pooled mean.

:class:`NoisyConvGibbsStepper` runs the released code's top-down scan (§2.5) over the layers of a
:class:`lit_bayes.models.noisy_cnn.NoisyCNN`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.optim import Optimizer

from lit_bayes.models.noisy_cnn import NoisyCNN
from lit_bayes.steppers.noisy_gibbs import LinearGaussianConditional, sample_bias
from lit_bayes.steppers.truncated_gaussian import pre_activation_pieces, probit_scores, two_piece_mixture
from lit_bayes.unchanged import DerivedFrom

__all__ = ["NoisyConvGibbsStepper", "conv_design", "conv_input_conditional", "conv_matrix", "conv_rows",
           "pooled_input_mean", "sample_pooled_input"]


def conv_design(inputs: Tensor, kernel: int, stride: int) -> Tensor:
    """The patches X^mu_{beta, nu_a(r)} of inputs ``(..., n, C, H, W)`` as a design ``(..., n A, C K)``:
    row (mu, a), column (beta, r) in the order of ``weight.flatten(1)`` (A = H_Z W_Z output pixels)."""
    lead = inputs.shape[:-3]
    patches = F.unfold(inputs.reshape(-1, *inputs.shape[-3:]), kernel, stride=stride)  # (N, C K, A)
    return patches.reshape(*lead, *patches.shape[-2:]).mT.flatten(-3, -2)


def conv_rows(outputs: Tensor) -> Tensor:
    """Conv outputs ``(..., n, C_out, H_Z, W_Z)`` as regression targets ``(..., n A, C_out)`` (rows as
    :func:`conv_design`)."""
    return outputs.flatten(-2).mT.flatten(-3, -2)


def conv_matrix(weight: Tensor, input_size: tuple[int, int], stride: int) -> Tensor:
    """The conv as a matrix M ``(S, C_out A, C_in H W)`` for filters ``(S, C_out, C_in, K, K)``:
    M_{(alpha a), (beta c)} = sum_r W_{alpha beta r} delta_{c, nu_a(r)} (App. G.2). Pixels no window
    covers have zero columns."""
    height, width = input_size
    kernel = weight.shape[-1]
    basis = torch.eye(height * width, dtype=weight.dtype, device=weight.device).reshape(-1, 1, height, width)
    selector = F.unfold(basis, kernel, stride=stride)  # (H W, K, A): [nu_a(r) == c]
    matrix = torch.einsum("soir,cra->soaic", weight.flatten(-2), selector)
    return matrix.reshape(weight.shape[0], -1, weight.shape[2] * height * width)


def conv_input_conditional(weight: Tensor, input_size: tuple[int, int], stride: int, delta_below: float,
                           delta_above: float) -> LinearGaussianConditional:
    """P(X^mu | sigma(Z^mu), Z'^mu) of the input X ``(C, H, W)`` of a conv layer (eqs. 77-80, 86-90):
    precision I / Delta_X + M^T M / Delta_Z with M = :func:`conv_matrix`. Sample it with targets
    ``(Z' - b)`` as ``(S, C_out A, n)`` and prior means sigma(Z) as ``(S, n, C H W)``."""
    matrix = conv_matrix(weight, input_size, stride)
    precision = torch.full((matrix.shape[-1],), 1.0 / delta_below, dtype=weight.dtype, device=weight.device)
    return LinearGaussianConditional(matrix, precision, delta_above)


def _windows(image: Tensor, size: int, out: tuple[int, int]) -> Tensor:
    """The covered part of ``(..., H, W)`` as ``(..., H', size, W', size)`` pooling windows."""
    rows, cols = out
    return image[..., : rows * size, : cols * size].unflatten(-1, (cols, size)).unflatten(-3, (rows, size))


def pooled_input_mean(prior_mean: Tensor, pooled: Tensor, size: int, delta_below: float,
                      delta_above: float) -> tuple[Tensor, float]:
    """Mean and projector weight of the input X of a ``size`` x ``size`` average pooling (App. G.3).

    With k = size^2, per channel, point and window a: m_b = sigma_b + Delta_X / (Delta_X + k Delta_X')
    (X'_a - mean_{c in a} sigma_c), covariance Delta_X I - Delta_X^2 / (k (k Delta_X' + Delta_X)) 1 1^T,
    which is Delta_X (I - q 1 1^T)^2 for q = (1 - sqrt(k Delta_X' / (k Delta_X' + Delta_X))) / k.
    Pixels outside every window keep N(sigma, Delta_X). ``prior_mean`` sigma ``(..., C, H, W)``,
    ``pooled`` X' ``(..., C, H', W')``; Delta_X = ``delta_below``, Delta_X' = ``delta_above``.
    """
    k = size * size
    windows = _windows(prior_mean, size, pooled.shape[-2:])
    gap = pooled - windows.mean((-3, -1))
    shifted = windows + (delta_below / (delta_below + k * delta_above) * gap)[..., :, None, :, None]
    mean = prior_mean.clone()
    mean[..., : shifted.shape[-4] * size, : shifted.shape[-2] * size] = shifted.flatten(-2).flatten(-3, -2)
    q = (1.0 - math.sqrt(k * delta_above / (k * delta_above + delta_below))) / k
    return mean, q


def sample_pooled_input(prior_mean: Tensor, pooled: Tensor, size: int, delta_below: float, delta_above: float,
                        generator: torch.Generator) -> Tensor:
    """Draw the input of an average pooling from its conditional (App. G.3, :func:`pooled_input_mean`):
    z ~ N(0, Delta_X I), then z - q <z, 1> 1 on each window (spec §8 item 8)."""
    mean, q = pooled_input_mean(prior_mean, pooled, size, delta_below, delta_above)
    noise = math.sqrt(delta_below) * torch.randn(mean.shape, generator=generator, device=mean.device,
                                                 dtype=mean.dtype)
    windows = _windows(noise, size, pooled.shape[-2:])
    windows -= q * windows.sum((-3, -1), keepdim=True)  # a view: updates ``noise`` on the covered pixels
    return mean + noise


class NoisyConvGibbsStepper(Optimizer):
    """One exact Gibbs sweep per ``step`` over the weights, biases and latents of every chain of a
    :class:`NoisyCNN`.

    Top-down scan (spec §2.5, the released CNN order generalised): [probit h_K] and then for
    k = K..1: the parameters of layer k (W then b; layer 1 jointly as [W | b] on [patches | 1],
    App. F, its Cholesky factor computed once for fixed inputs, spec §8 item 10), then the latent
    h_{k-1} below it given h_{k-2} and h_k. Any systematic scan of exact full conditionals leaves
    the posterior (eq. 4) invariant.

    Args:
        model: the :class:`NoisyCNN` (architecture, noise variances, prior precisions).
        parameters: the chains' tensors by parameter name (``layers.{k}.weight``, ``layers.{k}.bias``),
            ``(C, *shape)``, updated in place.
        generator: the only source of randomness.
    """

    def __init__(self, model: NoisyCNN, parameters: Mapping[str, Tensor], generator: torch.Generator) -> None:
        expected = sorted(name for name, _ in model.named_parameters())
        if sorted(parameters) != expected:
            raise ValueError(f"parameters must hold exactly {expected}, got {sorted(parameters)}")
        super().__init__(list(parameters.values()), {})
        self.model = model
        self.params = dict(parameters)
        self.generator = generator
        self._first: DerivedFrom[LinearGaussianConditional] = DerivedFrom(compare_values=True)

    @torch.no_grad()
    def step(self, closure) -> None:
        """``closure()`` returns ``(inputs, targets, latents)`` (see :meth:`sweep`)."""
        self.sweep(*closure())

    def design(self, layer: int, below: Tensor) -> Tensor:
        """The design ``(..., m, d)`` of layer ``layer``'s map as a regression on its input: the conv
        patches, rows (mu, a) (eqs. 68-69), or the flattened dense input, rows mu (eq. 9)."""
        spec = self.model.specs[layer]
        if spec.kind == "conv":
            return conv_design(below, spec.kernel, spec.stride)
        return below.flatten(-len(self.model.shapes[layer]))

    def rows(self, layer: int, above: Tensor) -> Tensor:
        """Layer ``layer``'s outputs as the regression targets ``(C, m, D_out)`` of :meth:`design`."""
        return conv_rows(above) if self.model.specs[layer].kind == "conv" else above

    def first_layer(self, inputs: Tensor) -> LinearGaussianConditional:
        """The (W, b) conditional of layer 0 on the fixed inputs, recomputed only when they change."""
        return self._first(inputs, self._first_layer)

    def _first_layer(self, inputs: Tensor) -> LinearGaussianConditional:
        model = self.model
        design = self.design(0, inputs)
        precision = [model.weight_precision(0)] * design.shape[-1]
        if model.has_bias:
            design = torch.cat([design, torch.ones_like(design[:, :1])], dim=1)
            precision.append(model.bias_prior_precision(0))
        precision = torch.tensor(precision, dtype=inputs.dtype, device=inputs.device)
        return LinearGaussianConditional(design, precision, model.delta[0])

    def layer_mean(self, layer: int, below: Tensor) -> Tensor:
        """f_k(h_{k-1}) of layer ``layer``, ``(C, n, *shape)``; the first layer's conv or dense map is
        taken from the cached design on the fixed inputs (spec §8 item 10) instead of recomputed."""
        model = self.model
        if layer or not model.specs[0].has_parameters:
            return model.apply_layer(layer, self.params, below)
        weight, bias = self.params["layers.0.weight"], self.params.get("layers.0.bias")
        theta = weight.flatten(2)
        if bias is not None:
            theta = torch.cat([theta, bias.unsqueeze(-1)], dim=-1)
        rows = self.first_layer(below).design @ theta.mT  # (C, m, D_out)
        if model.specs[0].kind == "dense":
            return rows
        return rows.unflatten(-2, (below.shape[0], -1)).mT.reshape(*rows.shape[:1], below.shape[0], *model.shapes[1])

    def sample_parameters(self, layer: int, below: Tensor, above: Tensor) -> None:
        """W then b of layer ``layer`` >= 1 given its input and output (eqs. 68-69 / 9, then 100-103 / 52-55)."""
        model, gen = self.model, self.generator
        weight, bias = self.params[f"layers.{layer}.weight"], self.params.get(f"layers.{layer}.bias")
        design, rows = self.design(layer, below), self.rows(layer, above)
        precision = torch.full((design.shape[-1],), model.weight_precision(layer), dtype=design.dtype,
                               device=design.device)
        shifted = rows if bias is None else rows - bias.unsqueeze(-2)
        draw = LinearGaussianConditional(design, precision, model.delta[layer]).sample(shifted, gen)
        weight.copy_(draw.reshape(weight.shape))
        if bias is not None:
            residual = rows - design @ draw.mT
            bias.copy_(sample_bias(residual, model.delta[layer], model.bias_prior_precision(layer), gen))

    def sample_latent(self, layer: int, below: Tensor, above: Tensor) -> Tensor:
        """h_layer (the input of layer ``layer``) given h_{layer-1} ``below`` and h_{layer+1} ``above``."""
        model, gen = self.model, self.generator
        spec = model.specs[layer]
        prior_mean = self.layer_mean(layer - 1, below)
        delta_below, delta_above = model.delta[layer - 1], model.delta[layer]
        if spec.kind == "activation":
            pieces = pre_activation_pieces(spec.activation, prior_mean, above, delta_below, delta_above)
            return two_piece_mixture(*pieces, gen)
        if spec.kind == "pool":
            return sample_pooled_input(prior_mean, above, spec.kernel, delta_below, delta_above, gen)
        weight, bias = self.params[f"layers.{layer}.weight"], self.params.get(f"layers.{layer}.bias")
        if spec.kind == "conv":
            if bias is not None:
                above = above - bias[:, None, :, None, None]
            conditional = conv_input_conditional(weight, model.shapes[layer][1:], spec.stride, delta_below,
                                                 delta_above)
            targets = above.flatten(2).mT
        else:
            if bias is not None:
                above = above - bias.unsqueeze(-2)
            precision = torch.full((weight.shape[-1],), 1.0 / delta_below, dtype=weight.dtype, device=weight.device)
            conditional = LinearGaussianConditional(weight, precision, delta_above)  # eq. 8
            targets = above.mT
        return conditional.sample(targets, gen, prior_mean=prior_mean.flatten(2)).reshape(prior_mean.shape)

    @torch.no_grad()
    def sweep(self, inputs: Tensor, targets: Tensor, latents: Mapping[str, Tensor]) -> None:
        """One sweep, in place. ``inputs`` ``(n, C, H, W)`` or flattened ``(n, C H W)``; ``targets``: the
        regression targets ``(n,)`` or ``(C, n)``, or the probit labels (same shapes, integers);
        ``latents``: :meth:`NoisyCNN.latent_names` to flattened ``(C, n, D_k)`` tensors."""
        model, gen, depth = self.model, self.generator, self.model.depth
        chains, n = self.params[f"layers.{model.parameter_layers[0]}.weight"].shape[0], inputs.shape[0]
        inputs = inputs.reshape(n, *model.input_shape)
        values = [inputs] + [latents[f"h{k}"].view(chains, n, *model.shapes[k]) for k in range(1, depth)]
        if model.output == "probit":
            top = latents[f"h{depth}"]
            omega = model.apply_layer(depth - 1, self.params, values[-1])
            top.copy_(probit_scores(omega, targets, model.delta[-1], top, gen))
        else:
            top = targets.to(inputs.dtype).expand(chains, n).unsqueeze(-1)
        values.append(top)
        for layer in range(depth - 1, -1, -1):
            if model.specs[layer].has_parameters:
                if layer:
                    self.sample_parameters(layer, values[layer], values[layer + 1])
                else:
                    weight, bias = self.params["layers.0.weight"], self.params.get("layers.0.bias")
                    first = self.first_layer(inputs).sample(self.rows(0, values[1]), gen)
                    weight.copy_(first[..., : weight[0].numel() // weight.shape[1]].reshape(weight.shape))
                    if bias is not None:
                        bias.copy_(first[..., -1])
            if layer:
                values[layer].copy_(self.sample_latent(layer, values[layer - 1], values[layer + 1]))
