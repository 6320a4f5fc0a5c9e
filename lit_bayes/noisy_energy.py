"""The joint density of the intermediate-noise network (noisy-gibbs spec §1.1-1.3, eq. 4), defined once.

Every sampler of the intermediate posterior reads its target here: :class:`IntermediateHMC` its
potential (:meth:`JointDensity.energy`), :class:`ThermalizationCheck` the score statistic of App. B.3
(:meth:`JointDensity.score`), and :class:`NoisyGibbs` the variances of its exact conditionals
(:func:`tempered`, eqs. 8-10, 17-20, 50-55 and App. G on the tempered model).

**Temperature.** The target at temperature T is the joint raised to 1/T. Eq. 4 is a product of
Gaussian factors (the priors of W and b, eqs. 5-6 for every Z and X, the regression labels) and, for
a probit output, the hard indicator y = argmax Z^(L+1) (App. E.4). A Gaussian factor to the power
1/T is, up to a constant, the same Gaussian with its variance multiplied by T; an indicator is
unchanged by any power. So the tempered joint is the joint of the same network with every noise
variance Delta_Z, Delta_X multiplied by T and every prior precision lambda_W, lambda_b divided by T
(:func:`tempered`), and every Gaussian conditional keeps its mean with its variance multiplied by T
(the two-piece laws of eq. 10 and the truncated probit Gaussians included: their pieces are Gaussian
factors, their truncations indicators). Integrating the probit scores out of the tempered joint
gives the probit likelihood with noise T Delta_Z^(L+1), not the untempered likelihood to the power
1/T: that is the output factor of :meth:`JointDensity.energy` when the scores are not sampled.

This module, not the models, holds the density because it is the one thing the samplers and the
callback share; the models keep the generative process (eq. 7) and the noiseless predictions.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TypeVar

from torch import Tensor

from lit_bayes.models.noisy_mlp import NoisyMLP
from lit_bayes.validation import check_positive

__all__ = ["JointDensity", "tempered"]

_VARIANCES = ("delta_z", "delta_x", "delta")  # NoisyMLP: delta_z, delta_x; NoisyCNN: delta
_PRECISIONS = ("prior_precision", "bias_precision")
Model = TypeVar("Model")


def tempered(model: Model, temperature: float) -> Model:
    """A copy of a :class:`NoisyMLP` or :class:`NoisyCNN` whose joint (eq. 4) is ``model``'s raised to
    1/``temperature``, up to a constant: every noise variance times T, every prior precision over T
    (module docstring). At T = 1 the copy's numbers equal ``model``'s exactly."""
    temperature = check_positive("temperature", temperature)
    result = copy.deepcopy(model)
    for name in _VARIANCES:
        if hasattr(model, name):
            setattr(result, name, [value * temperature for value in getattr(model, name)])
    for name in _PRECISIONS:
        setattr(result, name, [value / temperature for value in getattr(model, name)])
    return result


class JointDensity:
    """-log of eq. 4 (spec §1.1-1.3), raised to 1/``temperature``, for the chains of a :class:`NoisyMLP`.

    With X^(1) the inputs, omega^(l+1) = X^(l) W^(l)T + 1 b^(l)T and every variance and precision those
    of :func:`tempered` (``self.model``):

        U = -log p(W, b)                                                         (priors, §1.1-1.2)
          + sum_{l=1}^{L-1} [ |Z^(l+1) - omega^(l+1)|^2 / (2 Delta_Z^(l+1))           (eq. 5)
                            + |X^(l+1) - sigma(Z^(l+1))|^2 / (2 Delta_X^(l+1)) ]     (eq. 6)
          + output term,

    the output term being |Z^(L+1) - omega^(L+1)|^2 / (2 Delta_Z^(L+1)) when the probit scores Z^(L+1)
    are part of the state (NoisyGibbs; +inf where argmax Z^(L+1) != y, the indicator), else
    -log p(y | omega^(L+1)) of the model's likelihood: the Gaussian N(y | omega, Delta_Z^(L+1)) of a
    regression (Z^(L+1) = y), or the multinomial probit with Z^(L+1) integrated out (App. E.4).
    The Gaussian normalising constants of the likelihood and the prior are included; the others are not.
    """

    def __init__(self, model: NoisyMLP, temperature: float = 1.0) -> None:
        self.model = tempered(model, temperature)
        self.prior = self.model.prior()
        self.likelihood = self.model.likelihood()

    def pre_activation(self, params: Mapping[str, Tensor], layer: int, below: Tensor) -> Tensor:
        """omega = X^(l) W^(l)T + 1 b^(l)T of weight layer ``layer`` (0-based) on its input ``below``."""
        omega = below @ params[f"net.layers.{layer}.weight"].mT
        if self.model.has_bias:
            omega = omega + params[f"net.layers.{layer}.bias"].unsqueeze(-2)
        return omega

    def energy(self, params: Mapping[str, Tensor], latents: Mapping[str, Tensor], inputs: Tensor,
               targets: Tensor) -> Tensor:
        """U of every chain, ``(C,)``. ``params``: ``net.layers.{l}.*`` ``(C, ...)``; ``latents``: ``z2, x2,
        ..., zL, xL`` [and ``z{L+1}``] to ``(C, n, d_l)``; ``inputs`` ``(n, d_1)`` and ``targets`` ``(n,)``
        (regression targets or labels) in the latents' row order."""
        model = self.model
        energy = -self.prior(params)
        below = inputs
        for j in range(model.depth):
            omega = self.pre_activation(params, j, below)
            if j == model.depth - 1:
                break
            z, x = latents[f"z{j + 2}"], latents[f"x{j + 2}"]
            energy = energy + (z - omega).pow(2).sum((-2, -1)) / (2 * model.delta_z[j]) \
                + (x - model.sigma(z)).pow(2).sum((-2, -1)) / (2 * model.delta_x[j])
            below = x
        scores = latents.get(f"z{model.depth + 1}")
        if scores is None:
            return energy - self.likelihood(omega, targets).sum(-1)
        outside = scores.argmax(-1) != targets.long()
        energy = energy + (scores - omega).pow(2).sum((-2, -1)) / (2 * model.delta_z[-1])
        return energy.masked_fill(outside.any(-1), float("inf"))

    def score(self, params: Mapping[str, Tensor], latents: Mapping[str, Tensor], inputs: Tensor,
              targets: Tensor) -> Tensor:
        """The score statistic U = Delta_Z^(2) / (d_1 d_2) sum_{i,a} d log P / d W^(1)_{ai} of every chain,
        ``(C,)`` (spec §4, App. B.3), from the gradient of :meth:`energy`'s first Gaussian factor and
        prior: Delta_Z grad_{W^(1)} log P = (Z^(2) - omega^(2))^T X - Delta_Z lambda_W W^(1) (Z^(2) = y for
        a one-layer regression network). It does not depend on the temperature (Delta_Z lambda_W does not)."""
        model = self.model
        weight = params["net.layers.0.weight"]
        above = latents["z2"] if "z2" in latents else targets.to(weight.dtype).reshape(1, -1, 1)
        residual = above - self.pre_activation(params, 0, inputs)
        gradient = residual.mT @ inputs - model.delta_z[0] * model.prior_precision[0] * weight
        return gradient.sum((-2, -1)) / weight[0].numel()
