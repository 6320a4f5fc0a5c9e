"""The intermediate-noise MLP of "Gibbs Sampling the Posterior of Neural Networks" (noisy-gibbs spec §1).

Generative process (eq. 7), layers l = 1..L, X^(1) = inputs:

    Z^(l+1) = X^(l) W^(l)T + b^(l) + eps_Z,   eps_Z ~ N(0, Delta_Z^(l+1))
    X^(l+1) = sigma(Z^(l+1)) + eps_X,          eps_X ~ N(0, Delta_X^(l+1))    (hidden layers only)

with priors W^(l) ~ N(0, 1/lambda_W^(l)), b^(l) ~ N(0, 1/lambda_b^(l)) (§1.1-1.2). The output is
regression (Z^(L+1) = y, label noise Delta_Z^(L+1)) or multinomial probit (y = argmax Z^(L+1),
App. E.4). Predictions use the noiseless forward pass (§3), which is ``forward``.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn
from torch.special import log_ndtr

from lit_bayes.posterior import Categorical, Gaussian, GaussianPrior, Likelihood
from lit_bayes.validation import check_bool, check_positive, check_widths

__all__ = ["ACTIVATIONS", "MultinomialProbit", "NoisyMLP"]

ACTIVATIONS = {"relu": torch.relu, "sign": torch.sign, "abs": torch.abs, "linear": lambda z: z}
OUTPUTS = ("regression", "probit")


def _per_layer(name: str, value: float | Sequence[float] | None, count: int,
               default: list[float] | None = None) -> list[float]:
    """One positive finite number per layer from a scalar, a sequence of ``count`` numbers, or ``None`` (default)."""
    if value is None and default is not None:
        return default
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return [check_positive(name, value)] * count
    try:
        values = list(value)
    except TypeError:
        raise ValueError(f"{name} must be a positive number or a list of {count}, got {value!r}") from None
    if len(values) != count:
        raise ValueError(f"{name} must be a positive number or a list of {count} (one per layer), got {value!r}")
    return [check_positive(f"{name}[{i}]", v) for i, v in enumerate(values)]


# below this, Phi(a) leaves float64's normal range: the value of lit_bayes.steppers.truncated_gaussian.DEEP,
# not imported from there (lit_bayes.steppers imports this module through its noisy-Gibbs stepper)
DEEP = -37.0


def _log_normal_cdf(a: Tensor) -> Tensor:
    """log Phi(a) = log(erfc(-a / sqrt 2) / 2), within ~1e-16 absolute (relative for a < 0), differentiable;
    ``log_ndtr`` below ``DEEP``, where erfc underflows. Two vectorised calls: torch's ``log_ndtr`` took
    ~7x longer on CPU (float64, 737k values: 27 against 4 ms). The clamp, past DEEP, keeps erfc positive
    (and the gradient finite) where log_ndtr's value replaces it. Not the truncated draws'
    ``log_normal_cdf``: that one keeps relative accuracy for a >= 0 through a ``where`` (slower here: 34 ms
    on the same values), and its unused log(0) branches give NaN gradients for |a| > 37 (checked)."""
    result = torch.log(torch.special.erfc((a * -math.sqrt(0.5)).clamp(max=26.5)) * 0.5)
    if bool(a.detach().min() < DEEP):
        deep = (a < DEEP).nonzero(as_tuple=True)
        result = result.index_put(deep, log_ndtr(a[deep]))
    return result


class MultinomialProbit(Categorical):
    """p(y = k | omega) = P(argmax_a (omega_a + eps_a) = k), eps ~ N(0, noise_var I) (App. E.4).

    Computed as the 1-d integral E_t[prod_{j != k} Phi(t + (omega_k - omega_j) / sqrt(noise_var))],
    t ~ N(0, 1), by ``num_nodes``-point Gauss-Hermite quadrature in log space (exact for two
    classes up to quadrature error; relative accuracy degrades only for log-probabilities below
    about -50).
    """

    def __init__(self, num_classes: int, noise_var: float, num_nodes: int = 32) -> None:
        super().__init__(num_classes)
        self.noise_var = check_positive("noise_var", noise_var)
        nodes, weights = np.polynomial.hermite.hermgauss(num_nodes)
        self.register_buffer("nodes", torch.tensor(nodes * math.sqrt(2.0)), persistent=False)
        self.register_buffer("log_weights", torch.tensor(np.log(weights) - 0.5 * math.log(math.pi)), persistent=False)

    def class_log_probs(self, output: Tensor) -> Tensor:
        if output.shape[-1] != self.num_classes:
            raise ValueError(f"output has {output.shape[-1]} scores, MultinomialProbit expects {self.num_classes}")
        scaled = output.double() / math.sqrt(self.noise_var)
        gaps = scaled.unsqueeze(-1) - scaled.unsqueeze(-2)  # (..., k, j): omega_k - omega_j
        shifts = self.log_weights - log_ndtr(self.nodes)  # the j = k term is log Phi(node), removed again
        total = None
        for node, shift in zip(self.nodes, shifts):
            term = _log_normal_cdf(gaps + node).sum(-1) + shift
            total = term if total is None else torch.logaddexp(total, term)
        return (total - total.logsumexp(-1, keepdim=True)).to(output.dtype)

    def _log_prob(self, output: Tensor, target: Tensor, overwrite: bool) -> Tensor:
        """log p(y | omega), the label's entry of :meth:`class_log_probs` (``forward`` and ``log_prob_``; nothing
        to overwrite). Categorical's own would be the softmax of the scores, not the probit."""
        self.check_shapes(output, target)
        return self.target_logits(self.class_log_probs(output), target)

    log_prob_units = Likelihood.log_prob_units  # the units stacked into one output, then ``forward``
    class_log_probs_and_entropy = Likelihood.class_log_probs_and_entropy  # from class_log_probs, not the softmax's


class NoisyMLP(nn.Module):
    """A fully connected intermediate-noise network (eqs. 4-7, App. F biases).

    Args:
        widths: ``[d_1, ..., d_{L+1}]``, input, hidden and output sizes (L >= 1 weight layers).
        activation: sigma of the hidden layers: ``"relu"``, ``"sign"``, ``"abs"`` or ``"linear"``.
        delta_z: pre-activation noise variances Delta_Z^(2..L+1), one number or one per layer;
            the last one is the label noise (regression) or the probit noise.
        delta_x: post-activation noise variances Delta_X^(2..L), one number or one per hidden layer.
        prior_precision: lambda_W per layer (prior variance 1/lambda); default the fan-in d_l (spec §8 item 11).
        bias_precision: lambda_b per layer; default ``prior_precision``.
        bias: whether the layers have biases.
        output: ``"regression"`` (one output, y = Z^(L+1)) or ``"probit"`` (y = argmax Z^(L+1)).

    The linear maps are ``self.layers`` (``nn.Linear``), so the parameters are named
    ``layers.{l}.weight`` and ``layers.{l}.bias`` with l = 0..L-1 (the paper's W^(l+1)).
    """

    def __init__(
        self,
        widths: Sequence[int],
        activation: Literal["relu", "sign", "abs", "linear"] = "relu",
        delta_z: float | Sequence[float] = 1.0,
        delta_x: float | Sequence[float] = 1.0,
        prior_precision: float | Sequence[float] | None = None,
        bias_precision: float | Sequence[float] | None = None,
        bias: bool = True,
        output: Literal["regression", "probit"] = "regression",
    ) -> None:
        super().__init__()
        widths = check_widths("widths", widths)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        if output == "regression" and widths[-1] != 1:
            raise ValueError(f"widths must end in 1 for output='regression' (one target per point), got {widths!r}")
        if output == "probit" and widths[-1] < 2:
            raise ValueError(f"widths must end in >= 2 classes for output='probit', got {widths!r}")
        check_bool("bias", bias)
        depth = len(widths) - 1
        self.widths = widths
        self.activation = activation
        self.output = output
        self.delta_z = _per_layer("delta_z", delta_z, depth)
        self.delta_x = _per_layer("delta_x", delta_x, depth - 1) if depth > 1 else []
        self.prior_precision = _per_layer("prior_precision", prior_precision, depth, [float(w) for w in widths[:-1]])
        self.bias_precision = _per_layer("bias_precision", bias_precision, depth, self.prior_precision)
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(widths[:-1], widths[1:]))

    @property
    def depth(self) -> int:
        """L, the number of weight layers."""
        return len(self.layers)

    @property
    def has_bias(self) -> bool:
        return self.layers[0].bias is not None

    def sigma(self, z: Tensor) -> Tensor:
        """The hidden activation."""
        return ACTIVATIONS[self.activation](z)

    def forward(self, x: Tensor) -> Tensor:
        """Noiseless forward pass f(x, W) (§3), flattening image inputs."""
        h = x.flatten(1) if x.dim() > 2 else x
        for layer in self.layers[:-1]:
            h = self.sigma(layer(h))
        return self.layers[-1](h)

    def stacked_forward(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """Noiseless outputs ``(S, B, d_{L+1})`` for S stacked parameter sets (in their dtype)."""
        h = (x.flatten(1) if x.dim() > 2 else x).to(params["layers.0.weight"].dtype)
        for j in range(self.depth):
            h = h @ params[f"layers.{j}.weight"].mT
            if self.has_bias:
                h = h + params[f"layers.{j}.bias"].unsqueeze(-2)
            if j < self.depth - 1:
                h = self.sigma(h)
        return h

    def likelihood(self) -> Likelihood:
        """The output law given the noiseless scores: Gaussian with variance Delta_Z^(L+1), or the probit."""
        if self.output == "regression":
            return Gaussian(math.sqrt(self.delta_z[-1]))
        return MultinomialProbit(self.widths[-1], self.delta_z[-1])

    def prior(self) -> GaussianPrior:
        """The Gaussian prior of §1.1-1.2 on the sampler's parameter names (``net.layers.{l}.*``)."""
        variances = {f"net.layers.{j}.weight": 1.0 / lam for j, lam in enumerate(self.prior_precision)}
        if self.has_bias:
            variances.update({f"net.layers.{j}.bias": 1.0 / lam for j, lam in enumerate(self.bias_precision)})
        return GaussianPrior(1.0, variances)

    def latent_names(self) -> list[str]:
        """Names of the latent variables, in the paper's layer indices: ``z2, x2, ..., zL, xL`` and
        ``z{L+1}`` (the probit scores) for a probit output."""
        names = [f"{kind}{j}" for j in range(2, self.depth + 1) for kind in ("z", "x")]
        return names + ([f"z{self.depth + 1}"] if self.output == "probit" else [])

    def latent_sizes(self) -> dict[str, int]:
        """The width d_l of each latent, by :meth:`latent_names`."""
        return {name: self.widths[int(name[1:]) - 1] for name in self.latent_names()}

    def generate(self, params: Mapping[str, Tensor], x: Tensor, generator: torch.Generator | None,
                 noiseless: bool = False) -> tuple[dict[str, Tensor], Tensor]:
        """Run the generative process (eq. 7) with stacked parameters ``(S, ...)`` on inputs ``(n, d_1)``.

        Returns the latents (named as :meth:`latent_names`, each ``(S, n, d_l)``) and the outputs
        Z^(L+1) ``(S, n, d_{L+1})``, the regression targets or the probit scores (labels: their
        argmax). ``noiseless`` switches every noise off (the latents are then sigma(Z) and Z).
        """
        h = x.flatten(1).to(params["layers.0.weight"].dtype)
        latents = {}

        def noisy(value: Tensor, variance: float) -> Tensor:
            if noiseless:
                return value
            noise = torch.randn(value.shape, generator=generator, device=value.device, dtype=value.dtype)
            return value + math.sqrt(variance) * noise

        for j in range(self.depth):
            z = h @ params[f"layers.{j}.weight"].mT
            if self.has_bias:
                z = z + params[f"layers.{j}.bias"].unsqueeze(-2)
            z = noisy(z, self.delta_z[j])
            if j == self.depth - 1:
                break
            h = noisy(self.sigma(z), self.delta_x[j])
            latents[f"z{j + 2}"], latents[f"x{j + 2}"] = z, h
        if self.output == "probit":
            latents[f"z{self.depth + 1}"] = z
        return latents, z
