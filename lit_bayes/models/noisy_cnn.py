"""The intermediate-noise convolutional network of "Gibbs Sampling the Posterior of Neural Networks"
(noisy-gibbs spec §1.4-1.5, App. G).

The network is a chain of noisy layers on the fixed inputs h0 = X (one point: ``input_shape``
= (C, H, W)), layers k = 1..K:

    h_k = f_k(h_{k-1}) + eps_k,   eps_k ~ N(0, Delta_k) i.i.d.,

where f_k is one of

* ``conv:C:K[:S]``: C filters of K x K, stride S (default 1), no padding, one bias per output
  channel (eq. 63, App. G.4); output size floor((H - K) / S) + 1;
* ``pool:K``: K x K average pooling with stride K; trailing rows and columns are dropped (App. G.3);
* ``dense:D``: a fully connected layer on the flattened input (eq. 7);
* ``relu``, ``sign``, ``abs``, ``linear``: an elementwise activation (eq. 7, the X^(l+1) step).

So every layer, linear or not, carries its own noise: the paper's MNIST CNN (spec §6.3,
"noise after the conv, after the pooling, after the ReLU and after the FC") is
``["conv:2:4:2", "pool:2", "relu", "dense:10"]`` with input (1, 28, 28). A conv or dense output
is the paper's Z (Delta_Z), an activation or pooling output its X (Delta_X, §1.5). The last layer
is dense: regression (h_K = y, label noise Delta_K) or multinomial probit (y = argmax h_K, App. E.4).
Priors: filters and dense weights N(0, 1/lambda_W), biases N(0, 1/lambda_b) (§1.4, App. F).

The latents h_1..h_{K-1} (and h_K for a probit output) are stored flattened, ``(S, n, prod(shape))``,
in torch's (channel, row, column) order. Predictions use the noiseless network (§3): ``forward``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lit_bayes.models.noisy_mlp import ACTIVATIONS, OUTPUTS, MultinomialProbit, _per_layer
from lit_bayes.posterior import Gaussian, GaussianPrior, Likelihood
from lit_bayes.validation import check_bool

__all__ = ["LayerSpec", "NoisyCNN", "parse_layer"]


@dataclass(frozen=True)
class LayerSpec:
    """One layer of a :class:`NoisyCNN`: ``kind`` is ``"conv"``, ``"pool"``, ``"dense"`` or
    ``"activation"``; ``size`` the output channels (conv) or width (dense); ``kernel`` and ``stride``
    the window (conv, pool); ``activation`` the activation's name."""

    kind: str
    size: int = 0
    kernel: int = 0
    stride: int = 1
    activation: str = ""

    @property
    def has_parameters(self) -> bool:
        return self.kind in ("conv", "dense")


def parse_layer(text: str) -> LayerSpec:
    """Parse ``"conv:C:K[:S]"``, ``"pool:K"``, ``"dense:D"`` or an activation name (see the module docstring)."""
    if not isinstance(text, str):
        raise ValueError(f"layers must hold strings like 'conv:2:4:2', 'pool:2', 'relu', 'dense:10', got {text!r}")
    if text in ACTIVATIONS:
        return LayerSpec("activation", activation=text)
    kind, *fields = text.split(":")
    counts = {"conv": (2, 3), "pool": (1,), "dense": (1,)}
    if kind not in counts or len(fields) not in counts[kind] or not all(f.isdigit() and int(f) > 0 for f in fields):
        raise ValueError(f"layers must hold 'conv:C:K[:S]', 'pool:K', 'dense:D' (positive integers) or one of "
                         f"{sorted(ACTIVATIONS)}, got {text!r}")
    values = [int(f) for f in fields]
    if kind == "conv":
        return LayerSpec("conv", size=values[0], kernel=values[1], stride=values[2] if len(values) == 3 else 1)
    if kind == "pool":
        return LayerSpec("pool", kernel=values[0], stride=values[0])
    return LayerSpec("dense", size=values[0])


class Activation(nn.Module):
    """An elementwise activation of :data:`ACTIVATIONS`, as a module."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def forward(self, h: Tensor) -> Tensor:
        return ACTIVATIONS[self.name](h)


class NoisyCNN(nn.Module):
    """An intermediate-noise convolutional network (eqs. 63 and App. G.3; the module docstring).

    Args:
        input_shape: ``(C, H, W)`` of one input point.
        layers: the layers, e.g. ``["conv:2:4:2", "pool:2", "relu", "dense:10"]``; the last one is
            dense, conv and pooling layers come before the first dense one, and two activations
            never follow each other (the conditional of h between them is not a two-piece law).
        delta: the noise variance Delta_k of every layer's output, one number or one per layer; the
            last one is the label noise (regression) or the probit noise.
        prior_precision: lambda_W per conv or dense layer (in order); default its fan-in
            (C_in K^2 or D_in; spec §8 item 11).
        bias_precision: lambda_b per conv or dense layer; default ``prior_precision``.
        bias: whether conv and dense layers have biases.
        output: ``"regression"`` (last layer ``dense:1``) or ``"probit"`` (``dense:C``, C >= 2).

    Parameters are named ``layers.{k}.weight`` (conv: ``(C_out, C_in, K, K)``; dense ``(D_out, D_in)``)
    and ``layers.{k}.bias`` with k = 0..K-1 the index in ``layers``.
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        layers: Sequence[str],
        delta: float | Sequence[float] = 1.0,
        prior_precision: float | Sequence[float] | None = None,
        bias_precision: float | Sequence[float] | None = None,
        bias: bool = True,
        output: Literal["regression", "probit"] = "regression",
    ) -> None:
        super().__init__()
        shape = tuple(input_shape) if isinstance(input_shape, Sequence) else ()
        if len(shape) != 3 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape):
            raise ValueError(f"input_shape must be three positive integers (C, H, W), got {input_shape!r}")
        if isinstance(layers, str) or not isinstance(layers, Sequence) or not layers:
            raise ValueError(f"layers must be a non-empty list like ['conv:2:4:2', 'pool:2', 'relu', 'dense:10'], "
                             f"got {layers!r}")
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        check_bool("bias", bias)
        specs = [parse_layer(text) for text in layers]
        shapes, modules, fan_in = [shape], [], []
        for index, (text, spec) in enumerate(zip(layers, specs)):
            where = f"layers[{index}] ({text!r})"
            current = shapes[-1]
            if spec.kind == "activation":
                if index and specs[index - 1].kind == "activation":
                    raise ValueError(f"{where} follows another activation; put a conv, pool or dense layer between")
                modules.append(Activation(spec.activation))
                shapes.append(current)
                continue
            if spec.kind == "dense":
                width = math.prod(current)
                modules.append(nn.Linear(width, spec.size, bias=bias))
                fan_in.append(float(width))
                shapes.append((spec.size,))
                continue
            if len(current) != 3:
                raise ValueError(f"{where} comes after a dense layer; conv and pool layers must come first")
            channels, height, width = current
            if spec.kernel > height or spec.kernel > width:
                raise ValueError(f"{where} needs an input of at least {spec.kernel}x{spec.kernel}, "
                                 f"got {height}x{width}")
            out = ((height - spec.kernel) // spec.stride + 1, (width - spec.kernel) // spec.stride + 1)
            if spec.kind == "conv":
                modules.append(nn.Conv2d(channels, spec.size, spec.kernel, spec.stride, bias=bias))
                fan_in.append(float(channels * spec.kernel**2))
                shapes.append((spec.size, *out))
            else:
                modules.append(nn.AvgPool2d(spec.kernel))
                shapes.append((channels, *out))
        if specs[-1].kind != "dense":
            raise ValueError(f"layers must end with a dense layer (the output), got {layers[-1]!r}")
        if output == "regression" and specs[-1].size != 1:
            raise ValueError(f"layers must end in 'dense:1' for output='regression', got {layers[-1]!r}")
        if output == "probit" and specs[-1].size < 2:
            raise ValueError(f"layers must end in 'dense:C' with C >= 2 classes for output='probit', got {layers[-1]!r}")
        self.input_shape = shape
        self.architecture = list(layers)
        self.specs = specs
        self.shapes = shapes
        self.output = output
        self.delta = _per_layer("delta", delta, len(specs))
        self.prior_precision = _per_layer("prior_precision", prior_precision, len(fan_in), fan_in)
        self.bias_precision = _per_layer("bias_precision", bias_precision, len(fan_in), self.prior_precision)
        self.parameter_layers = [k for k, spec in enumerate(specs) if spec.has_parameters]
        self.layers = nn.ModuleList(modules)

    @property
    def depth(self) -> int:
        """K, the number of layers."""
        return len(self.specs)

    @property
    def has_bias(self) -> bool:
        return self.layers[self.parameter_layers[0]].bias is not None

    def weight_precision(self, layer: int) -> float:
        """lambda_W of layer ``layer`` (an index into ``layers``)."""
        return self.prior_precision[self.parameter_layers.index(layer)]

    def bias_prior_precision(self, layer: int) -> float:
        """lambda_b of layer ``layer``."""
        return self.bias_precision[self.parameter_layers.index(layer)]

    def forward(self, x: Tensor) -> Tensor:
        """Noiseless forward pass f(x, W) (§3) on ``(B, C, H, W)`` or flattened ``(B, C H W)`` inputs."""
        h = x.reshape(len(x), *self.input_shape)
        for spec, module in zip(self.specs, self.layers):
            h = module(h.flatten(1) if spec.kind == "dense" else h)
        return h

    def apply_layer(self, layer: int, params: Mapping[str, Tensor], h: Tensor) -> Tensor:
        """f_k of layer ``layer`` (0-based) for S stacked parameter sets: ``h`` is ``(S, n, *shape)`` or a
        shared ``(n, *shape)``; the result is ``(S, n, *next shape)``."""
        spec, out_shape = self.specs[layer], self.shapes[layer + 1]
        point_dims = len(self.shapes[layer])
        chains = params[f"layers.{self.parameter_layers[0]}.weight"].shape[0]
        lead = h.shape[:-point_dims]
        if spec.kind == "activation":
            out = ACTIVATIONS[spec.activation](h)
        elif spec.kind == "pool":
            out = F.avg_pool2d(h.reshape(-1, *h.shape[-3:]), spec.kernel).reshape(*lead, *out_shape)
        elif spec.kind == "dense":
            out = h.flatten(-point_dims) @ params[f"layers.{layer}.weight"].mT
            if f"layers.{layer}.bias" in params:
                out = out + params[f"layers.{layer}.bias"].unsqueeze(-2)
        else:  # conv
            weight = params[f"layers.{layer}.weight"]
            patches = F.unfold(h.reshape(-1, *h.shape[-3:]), spec.kernel, stride=spec.stride)
            patches = patches.reshape(*lead, *patches.shape[-2:])  # (..., n, C_in K^2, A)
            out = weight.flatten(2).unsqueeze(1) @ patches  # (S, n, C_out, A)
            if f"layers.{layer}.bias" in params:
                out = out + params[f"layers.{layer}.bias"][:, None, :, None]
            out = out.reshape(*out.shape[:2], *out_shape)
        return out.expand(chains, h.shape[-point_dims - 1], *out_shape)

    def stacked_forward(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """Noiseless outputs ``(S, B, D_out)`` for S stacked parameter sets (in their dtype)."""
        h = x.reshape(len(x), *self.input_shape).to(params[f"layers.{self.parameter_layers[0]}.weight"].dtype)
        for layer in range(self.depth):
            h = self.apply_layer(layer, params, h)
        return h

    def likelihood(self) -> Likelihood:
        """The output law given the noiseless scores: Gaussian with variance Delta_K, or the probit."""
        if self.output == "regression":
            return Gaussian(math.sqrt(self.delta[-1]))
        return MultinomialProbit(self.shapes[-1][0], self.delta[-1])

    def prior(self) -> GaussianPrior:
        """The Gaussian prior of §1.4 / App. F on the sampler's parameter names (``net.layers.{k}.*``)."""
        variances = {f"net.layers.{k}.weight": 1.0 / lam for k, lam in zip(self.parameter_layers, self.prior_precision)}
        if self.has_bias:
            variances.update({f"net.layers.{k}.bias": 1.0 / lam
                              for k, lam in zip(self.parameter_layers, self.bias_precision)})
        return GaussianPrior(1.0, variances)

    def latent_names(self) -> list[str]:
        """Names of the latent layer outputs: ``h1, ..., h{K-1}`` and ``h{K}`` (the probit scores) for a
        probit output."""
        names = [f"h{k}" for k in range(1, self.depth)]
        return names + ([f"h{self.depth}"] if self.output == "probit" else [])

    def latent_sizes(self) -> dict[str, int]:
        """The flattened size of each latent, by :meth:`latent_names`."""
        return {name: math.prod(self.shapes[int(name[1:])]) for name in self.latent_names()}

    def generate(self, params: Mapping[str, Tensor], x: Tensor, generator: torch.Generator | None,
                 noiseless: bool = False) -> tuple[dict[str, Tensor], Tensor]:
        """Run the generative process (eq. 63, App. G.3 with eq. 7) with stacked parameters ``(S, ...)`` on
        inputs ``(n, C, H, W)`` or ``(n, C H W)``.

        Returns the latents (named as :meth:`latent_names`, each flattened ``(S, n, D_k)``) and the
        outputs h_K ``(S, n, D_out)``, the regression targets or the probit scores (labels: their
        argmax). ``noiseless`` switches every noise off.
        """
        h = x.reshape(len(x), *self.input_shape).to(params[f"layers.{self.parameter_layers[0]}.weight"].dtype)
        latents = {}
        for layer in range(self.depth):
            h = self.apply_layer(layer, params, h)
            if not noiseless:
                noise = torch.randn(h.shape, generator=generator, device=h.device, dtype=h.dtype)
                h = h + math.sqrt(self.delta[layer]) * noise
            if layer < self.depth - 1:
                latents[f"h{layer + 1}"] = h.flatten(2)
        if self.output == "probit":
            latents[f"h{self.depth}"] = h
        return latents, h
