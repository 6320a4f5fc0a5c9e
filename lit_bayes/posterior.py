"""Energy conventions: likelihoods, priors, minibatch scaling and temperature.

This module is the single place where the target of every sampler is defined.

For data D = {(x_i, y_i)}_{i=1..N}, a likelihood p(y | f_theta(x)) and a prior p(theta),
the energy (negative log joint, structured-sgmcmc spec Eq. 1/9) is

    U(theta) = - sum_{i=1..N} log p(y_i | x_i, theta) - log p(theta).

On a minibatch B of size |B| it is estimated by (spec Eq. 2/10)

    U_hat(theta) = - s * sum_{i in B} log p(y_i | x_i, theta) - log p(theta),

with s = N / |B| (``minibatch_scaling="rescaled"``, unbiased) or s = 1
(``minibatch_scaling="sum"``, the raw batch sum used by the FNBG paper, Eq. 3 of seed 000).

Temperature T tempers the whole posterior: the samplers target

    p_T(theta | D) ∝ exp(-U(theta) / T),

so T = 1 is the true Bayesian posterior, T < 1 a "cold" posterior. Every stepper samples
exp(-energy) for the energy returned by :meth:`Posterior.energy`, which already holds 1/T.
"""
from __future__ import annotations

import fnmatch
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lit_bayes.logspace import logsumexp, logsumexp_units
from lit_bayes.unchanged import DerivedFrom
from lit_bayes.validation import check_bool, check_int, check_optional_int, check_positive

__all__ = [
    "Bernoulli",
    "Categorical",
    "Gaussian",
    "FlatPrior",
    "GaussianPrior",
    "Likelihood",
    "Posterior",
    "Prior",
]

_LOG_2PI = math.log(2.0 * math.pi)


def _real_target(target: Tensor, dtype: torch.dtype) -> Tensor:
    """Targets for arithmetic with outputs of ``dtype``: integer labels as they are (type promotion converts them
    inside the operation, to the same values as ``.to(dtype)``, without a converted copy first; issue 26: two such
    copies in an OHSMC step), floating and boolean targets (torch subtracts no booleans) converted to ``dtype``."""
    if target.dtype == dtype or not (target.is_floating_point() or target.dtype == torch.bool):
        return target
    return target.to(dtype)


class Likelihood(nn.Module):
    """Per-point log-likelihood ``log p(y | output)`` of a network's outputs.

    ``forward(output, target)`` accepts outputs with any number of leading dimensions
    (chains, samples) before the batch dimension and returns log-probabilities of shape
    ``output.shape[:-1]`` (one value per point). Subclasses that carry parameters (a
    learned noise scale) have them sampled together with the network's.
    """

    task: Literal["classification", "regression"]

    @staticmethod
    def check_shapes(output: Tensor, target: Tensor) -> None:
        """Targets are one value per point: shape ``(B,)`` for outputs ``(..., B, k)``."""
        if target.shape != output.shape[-2:-1]:
            raise ValueError(
                f"target has shape {tuple(target.shape)}, expected ({output.shape[-2]},): one value per point "
                f"of the output of shape {tuple(output.shape)}"
            )

    def log_prob_(self, output: Tensor, target: Tensor) -> Tensor:
        """``forward(output, target)``, free to overwrite ``output`` (a scratch tensor the caller
        drops), which saves a temporary as large as it where a subclass makes use of that."""
        return self(output, target)

    def output_gradient(self, output: Tensor, target: Tensor) -> Tensor:
        """d log p(y | output) / d output, the shape of ``output``, for a hand-written backward (the
        Feynman-Kac psi-gradient, :mod:`lit_bayes.models.sequential_backprop`). A subclass that gives it
        overrides this; callers use autograd for the others (``FeynmanKacSampler.hand_backprop_applies``)."""
        raise NotImplementedError(f"{type(self).__name__} gives no output_gradient: use autograd")

    def log_prob_unit_major(self, output: Tensor, target: Tensor, overwrite: bool = False) -> Tensor:
        """``forward`` of outputs stored unit-major, ``(..., k, B)`` (the k outputs of a point B apart, as
        the FNBG incremental caches keep them), returning ``(..., B)``; with ``overwrite``, free to
        overwrite ``output``."""
        points = output.transpose(-1, -2)
        return self.log_prob_(points if overwrite else points.clone(), target)

    def unit_major(self, target: Tensor, like: Tensor) -> Callable[[Tensor, bool], Tensor]:
        """:meth:`log_prob_unit_major` bound to the batch's ``target`` for outputs shaped as ``like``
        ``(..., k, B)``, checked here once: a caller that evaluates many outputs of one batch (the
        ~130 proposals of an FNBG sweep) pays for the checks and the target's preparation once."""
        self.check_shapes(like.transpose(-1, -2), target)
        return lambda output, overwrite=False: self.log_prob_unit_major(output, target, overwrite)

    def log_prob_units(self, units: Sequence[Tensor], target: Tensor) -> Tensor:
        """``forward`` of outputs given unit by unit, one ``(..., B)`` tensor per output unit.

        For compiled code that keeps every step elementwise in the points
        (:mod:`lit_bayes.fused_tail`); here the units are stacked into one output."""
        return self(torch.stack(list(units), dim=-1), target)

    def class_log_probs_and_entropy(self, output: Tensor) -> tuple[Tensor, Tensor]:
        """Classification likelihoods: ``class_log_probs(output)`` ``(..., B, C)`` and the entropy
        H = -sum_c p_c log p_c of each point's class distribution, ``(..., B)``."""
        log_probs = self.class_log_probs(output)
        return log_probs, -torch.exp(log_probs).mul_(log_probs).sum(-1)

    def check_target(self, target: Tensor, name: str = "target") -> None:
        """Raise ``ValueError`` naming ``name`` if ``target`` is not valid for this likelihood."""
        if target.dim() != 1:
            raise ValueError(f"{name} must have shape (B,), one value per point, got {tuple(target.shape)}")
        if not torch.is_floating_point(target) and self.task == "regression":
            raise ValueError(f"{name} must be a floating-point tensor for {type(self).__name__}, got {target.dtype}")
        if torch.is_floating_point(target) and not torch.isfinite(target).all():
            raise ValueError(f"{name} contains NaN or infinite values")


class TargetLogits:
    """``output[..., i, target_i]`` for labels ``target`` ``(B,)``, shape ``output.shape[:-1]``.

    Class-major outputs (a transposed ``(..., classes, B)`` tensor, as the FNBG incremental path
    keeps them) are read by flat index, ~3x faster than ``gather`` over their strided last
    dimension; the index of the last target is kept (the FNBG path reads the same batch once
    per block).
    """

    def __init__(self) -> None:
        self._index: DerivedFrom[Tensor] = DerivedFrom()

    @staticmethod
    def flat_index(target: Tensor) -> Tensor:
        """``target_i * B + i``: the flat position of each point's label in a ``(classes, B)`` block."""
        return target.long() * target.shape[0] + torch.arange(target.shape[0], device=target.device)

    def __call__(self, output: Tensor, target: Tensor) -> Tensor:
        if output.transpose(-1, -2).is_contiguous():
            flat = output.transpose(-1, -2).reshape(-1, output.shape[-1] * output.shape[-2])
            return flat.index_select(1, self._index(target, self.flat_index)).view(output.shape[:-1])
        index = target.long().expand(output.shape[:-1]).unsqueeze(-1)
        return output.gather(-1, index).squeeze(-1)


class Categorical(Likelihood):
    """Categorical likelihood over ``num_classes`` logits: ``log softmax(output)[y]``."""

    task = "classification"
    CROSS_ENTROPY_MAX_POINTS = 1 << 16  # unit-major outputs of at most this many points: F.cross_entropy

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.num_classes = check_int("num_classes", num_classes, 2)
        self.target_logits = TargetLogits()

    def check_target(self, target: Tensor, name: str = "target") -> None:
        super().check_target(target, name)
        if torch.is_floating_point(target) or target.dtype == torch.bool:
            raise ValueError(f"{name} must hold integer class labels, got dtype {target.dtype}")
        if target.numel() and (target.min() < 0 or target.max() >= self.num_classes):
            raise ValueError(
                f"{name} has labels in [{int(target.min())}, {int(target.max())}], "
                f"allowed range is [0, {self.num_classes - 1}]"
            )

    def _check_logits(self, output: Tensor) -> None:
        if output.shape[-1] != self.num_classes:
            raise ValueError(f"output has {output.shape[-1]} logits, Categorical expects num_classes={self.num_classes}")

    def class_log_probs(self, output: Tensor) -> Tensor:
        """Log-probabilities of every class, shape ``(..., B, num_classes)``."""
        self._check_logits(output)
        return output - logsumexp(output, -1, keepdim=True)  # = log_softmax, several times faster on CPU

    def class_log_probs_and_entropy(self, output: Tensor) -> tuple[Tensor, Tensor]:
        """Both from one pass of exponentials e_c = exp(z_c - m), m = max_c z_c, S = sum_c e_c:
        log p_c = z_c - m - log S and H = log S - sum_c e_c (z_c - m) / S."""
        self._check_logits(output)
        largest = torch.finfo(output.dtype).max
        shifted = output - output.amax(-1, keepdim=True).clamp(-largest, largest)
        exponentials = torch.exp(shifted)
        total = exponentials.sum(-1, keepdim=True)
        log_total = total.log()
        entropy = log_total - exponentials.mul_(shifted).sum(-1, keepdim=True).div_(total)
        return shifted.sub_(log_total), entropy.squeeze(-1)

    def forward(self, output: Tensor, target: Tensor) -> Tensor:
        return self._log_prob(output, target, overwrite=False)

    def log_prob_(self, output: Tensor, target: Tensor) -> Tensor:
        """``forward``, with the logsumexp's shifted exponentials written over ``output``."""
        return self._log_prob(output, target, overwrite=True)

    def _log_prob(self, output: Tensor, target: Tensor, overwrite: bool) -> Tensor:
        """One network's logits ``(B, C)`` and class-major stacked ones (``(S, B, C)`` views of contiguous
        ``(S, C, B)``, as :meth:`lit_bayes.models.MLP.stacked_forward` gives them) through ``F.cross_entropy``:
        log-softmax and pick in one kernel each way. With its backward, as every SG-MCMC step of a
        classifier takes it (one thread, AMD EPYC Zen3): 4 chains x 500 points 0.40 against 1.07 ms on
        the general path below, (500, 10) 0.49 against 1.45 ms, 32 x 3,000 12.2 against 23.2 ms; without
        gradients as fast or faster. The energy and its backward of a 4-chain softmax regression (MNIST
        batch of 500) took 5.76 against 6.09 ms (medians, interleaved in one process, the other core busy).
        Other layouts: the target's logit minus the logsumexp over classes."""
        self.check_shapes(output, target)
        self._check_logits(output)
        if output.dim() == 2 or (output.dim() == 3 and output.transpose(-1, -2).is_contiguous()):
            labels = target.long().expand(output.shape[:-1])
            return F.cross_entropy(output.movedim(-1, 1), labels, reduction="none").neg_()
        # the target's logit (read first: ``overwrite`` destroys output) minus logsumexp: the
        # class_log_probs entry, without all of them
        picked = self.target_logits(output, target)
        return picked - logsumexp(output, -1, overwrite=overwrite)

    def log_prob_unit_major(self, output: Tensor, target: Tensor, overwrite: bool = False) -> Tensor:
        """``forward`` of unit-major logits ``(C, k, B)`` (see :meth:`Likelihood.log_prob_unit_major`)."""
        return self.unit_major(target, output)(output, overwrite)

    def unit_major(self, target: Tensor, like: Tensor) -> Callable[[Tensor, bool], Tensor]:
        """:meth:`Likelihood.unit_major`: up to ``CROSS_ENTROPY_MAX_POINTS`` points (C x B) one
        ``F.cross_entropy`` over the class dimension, two kernels in place of the logsumexp's dozen small
        operations, 2-2.5x faster at one chain and B = 3,000 on CPU (~75 against ~180 us, AMD EPYC Zen3),
        which is how an FNBG block of one chain evaluates its proposal (a sweep 6-8 % faster). Above it,
        where torch's log-softmax over the strided class dimension falls behind (at B = 3,000 about even at
        4 chains, 1.1-1.5x slower at 8), the logsumexp of :meth:`log_prob_`."""
        if like.dim() != 3 or like.shape[0] * like.shape[2] > self.CROSS_ENTROPY_MAX_POINTS:
            general = super().log_prob_unit_major
            self.check_shapes(like.transpose(-1, -2), target)
            return lambda output, overwrite=False: general(output, target, overwrite)
        points = like.transpose(-1, -2)
        self.check_shapes(points, target)
        self._check_logits(points)
        labels = target.long().expand(like.shape[0], -1)
        return lambda output, overwrite=False: F.cross_entropy(output, labels, reduction="none").neg_()

    def output_gradient(self, output: Tensor, target: Tensor) -> Tensor:
        """onehot(y) - softmax(output): the gradient of log softmax(output)[y]."""
        self.check_shapes(output, target)
        self._check_logits(output)
        grad = torch.softmax(output, -1).neg_()
        grad.scatter_add_(-1, target.long().expand(output.shape[:-1]).unsqueeze(-1),
                          torch.ones((), dtype=grad.dtype, device=grad.device).expand(output.shape[:-1] + (1,)))
        return grad

    def log_prob_units(self, units: Sequence[Tensor], target: Tensor) -> Tensor:
        """``forward`` on the logits given class by class, ``(..., B)`` each: the target's logit
        picked by ``where`` minus the same logsumexp over the units, all elementwise in the points."""
        if len(units) != self.num_classes:
            raise ValueError(f"got {len(units)} output units, Categorical expects num_classes={self.num_classes}")
        picked = functools.reduce(torch.add, [torch.where(target == c, u, 0.0) for c, u in enumerate(units)])
        return picked - logsumexp_units(units)


class Bernoulli(Likelihood):
    """Bernoulli likelihood with one logit f: ``log p(y=1) = log sigmoid(f)``."""

    task = "classification"
    num_classes = 2

    def check_target(self, target: Tensor, name: str = "target") -> None:
        if target.numel() and not ((target == 0) | (target == 1)).all():
            raise ValueError(f"{name} must hold binary labels 0 or 1 for Bernoulli")
        super().check_target(target, name)

    @staticmethod
    def _logit(output: Tensor) -> Tensor:
        if output.shape[-1] != 1:
            raise ValueError(f"Bernoulli expects one output logit per point, got output of shape {tuple(output.shape)}")
        return output.squeeze(-1)

    def class_log_probs(self, output: Tensor) -> Tensor:
        """Log-probabilities of classes 0 and 1, shape ``(..., B, 2)``."""
        f = self._logit(output)
        return torch.stack([F.logsigmoid(-f), F.logsigmoid(f)], dim=-1)

    def forward(self, output: Tensor, target: Tensor) -> Tensor:
        self.check_shapes(output, target)
        f = self._logit(output)
        return _real_target(target, f.dtype) * f - F.softplus(f)

    def output_gradient(self, output: Tensor, target: Tensor) -> Tensor:
        """y - sigmoid(f): the gradient of y f - softplus(f)."""
        self.check_shapes(output, target)
        f = self._logit(output)
        return (_real_target(target, f.dtype) - torch.sigmoid(f)).unsqueeze(-1)


class Gaussian(Likelihood):
    """Gaussian likelihood ``N(y; f(x), sigma^2)`` with a fixed or a learned noise scale.

    With ``learn_noise=True`` the log noise standard deviation is a parameter of the model,
    sampled (or optimised) together with the network's weights under the same prior.
    """

    task = "regression"

    def __init__(self, noise_std: float = 1.0, learn_noise: bool = False) -> None:
        super().__init__()
        log_std = torch.tensor(math.log(check_positive("noise_std", noise_std)))
        if learn_noise:
            self.log_noise_std = nn.Parameter(log_std)
        else:
            self.register_buffer("log_noise_std", log_std)

    def mean_and_variance(self, output: Tensor, log_noise_std: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Mean and noise variance per point, each ``(..., B)``.

        ``log_noise_std`` overrides the module's own (stacked samples of it, one per chain,
        broadcast over that chain's points).
        """
        if output.shape[-1] != 1:
            raise ValueError(f"Gaussian expects one output per point, got output of shape {tuple(output.shape)}")
        mean = output.squeeze(-1)
        var = torch.exp(2.0 * (self.log_noise_std if log_noise_std is None else log_noise_std))
        return mean, var.reshape(var.shape + (1,) * (mean.dim() - var.dim())).expand_as(mean)

    def forward(self, output: Tensor, target: Tensor) -> Tensor:
        self.check_shapes(output, target)
        mean, var = self.mean_and_variance(output)
        return -0.5 * ((_real_target(target, mean.dtype) - mean) ** 2 / var + torch.log(var) + _LOG_2PI)

    def output_gradient(self, output: Tensor, target: Tensor) -> Tensor:
        """(y - f) / sigma^2, at the module's current noise scale."""
        self.check_shapes(output, target)
        mean, var = self.mean_and_variance(output)
        return ((_real_target(target, mean.dtype) - mean) / var).unsqueeze(-1)


class Prior(nn.Module):
    """A prior over the sampled parameters that factorises over them (one density per element).

    A subclass gives :meth:`log_density` (elementwise, for the values of one named parameter)
    and :meth:`sample` (for ``init="prior"`` and the Feynman-Kac samplers); :meth:`forward`, the
    log prior of named, stacked parameters, and :meth:`flat`, the same over a chain's flat
    vector block by block (FNBG's block targets), follow from them.
    """

    #: whether :meth:`bind` must be given the sampled parameters' shapes before the prior is used
    binds_shapes = False

    def bind(self, shapes: Mapping[str, Sequence[int]], num_chains: int) -> None:
        """Learn the shapes of one chain's sampled parameters (by name) and the number of chains: called by
        the sampler that owns the prior when :attr:`binds_shapes` is set (priors whose density depends on a
        parameter's shape, or that keep per-chain state)."""

    def log_density(self, values: Tensor, name: str) -> Tensor:
        """log p of every element of ``values`` (any shape), which belong to parameter ``name``."""
        raise NotImplementedError

    def sample(self, params: Mapping[str, Tensor], generator: torch.Generator | None = None,
               temperature: float = 1.0) -> dict[str, Tensor]:
        """Draw parameters shaped like ``params`` from the prior tempered to pi^(1/T) (T = 1: the prior)."""
        raise NotImplementedError(f"{type(self).__name__} cannot draw samples: use another init than 'prior'")

    def forward(self, params: Mapping[str, Tensor], batch_dims: int = 1) -> Tensor:
        """Log prior of parameters whose first ``batch_dims`` dimensions index chains/samples."""
        if not params:
            raise ValueError("params is empty: the prior needs at least one parameter")
        return sum(self.log_density(p.reshape(*p.shape[:batch_dims], -1), name).sum(-1) for name, p in params.items())

    def flat(self, shapes: Mapping[str, Sequence[int]]) -> FlatPrior:
        """This prior over flat vectors that hold the parameters ``shapes`` in order."""
        return FlatPrior(self, shapes)


class FlatPrior:
    """A :class:`Prior` over every chain's flat parameter vector ``(C, P)`` (parameters in the
    order of ``shapes``, as ``ChainState.flat``): the log prior of whole states and its change
    when one block (a set of flat positions) moves. Sums in float64."""

    def __init__(self, prior: Prior, shapes: Mapping[str, Sequence[int]], device: torch.device | None = None) -> None:
        self.prior, self.shapes, self.device = prior, dict(shapes), device
        bounds, start = [], 0
        for name, shape in self.shapes.items():
            size = math.prod(shape)
            bounds.append((name, start, start + size))
            start += size
        self.bounds = bounds

    def to(self, device: torch.device) -> FlatPrior:
        """This prior with its tables on ``device``."""
        return type(self)(self.prior, self.shapes, device)

    def log_density(self, state: Tensor) -> Tensor:
        """log p(theta) of every chain's state ``(C, P)``, ``(C,)`` float64."""
        return sum(self.prior.log_density(state[:, a:b].double(), name).sum(1) for name, a, b in self.bounds)

    def change(self, members: Tensor | slice, current: Tensor, step: Tensor) -> Tensor:
        """log p(theta*) - log p(theta) ``(C,)`` float64 when the flat positions ``members`` (indices, or a
        slice of a contiguous run) move from ``current`` ``(C, size)`` by ``step`` (the other factors cancel)."""
        if isinstance(members, slice):
            members = torch.arange(members.start, members.stop, device=current.device)
        values = current + step
        total = None
        for name, a, b in self.bounds:
            inside = (members >= a) & (members < b)
            if bool(inside.any()):
                new, old = (self.prior.log_density(v[:, inside].double(), name) for v in (values, current))
                term = (new - old).sum(1)
                total = term if total is None else total + term
        return total

    def changes(self, members: Sequence[Tensor], state: Tensor, steps: Sequence[Tensor]) -> Tensor:
        """:meth:`change` of every block at once, ``(C, M)`` float64: block q (flat positions ``members[q]``)
        moving from its values in ``state`` ``(C, P)`` by ``steps[q]`` ``(C, size_q)``."""
        return torch.stack([self.change(m, state[:, m], s) for m, s in zip(members, steps)], 1)


class GaussianFlatPrior(FlatPrior):
    """:class:`GaussianPrior` over flat vectors, from a table of per-position variances: the
    change of a block is -sum_i step_i (2 theta_i + step_i) / (2 v_i) (= -sum_i (theta*_i^2 - theta_i^2) / (2 v_i)
    with theta* = theta + step), which has no cancellation between two squares."""

    def __init__(self, prior: GaussianPrior, shapes: Mapping[str, Sequence[int]],
                 device: torch.device | None = None) -> None:
        super().__init__(prior, shapes, device)
        variances = torch.cat([torch.full((math.prod(shape),), prior.variance_of(name), dtype=torch.float64)
                               for name, shape in self.shapes.items()]).to(device)
        self.neg_half_inv_var = -0.5 / variances  # -1 / (2 v_i): the weights of both sums, one product each
        self.log_norm = 0.5 * float(torch.log(2 * math.pi * variances).sum())

    def log_density(self, state: Tensor) -> Tensor:
        return state.double().square() @ self.neg_half_inv_var - self.log_norm

    def change(self, members: Tensor | slice, current: Tensor, step: Tensor) -> Tensor:
        return (step * torch.add(step, current, alpha=2)).double() @ self.neg_half_inv_var[members]

    def changes(self, members: Sequence[Tensor], state: Tensor, steps: Sequence[Tensor]) -> Tensor:
        """:meth:`FlatPrior.changes` as one pass over the positions and one sum per block, on CPU; elsewhere
        block by block (``index_add_`` adds with atomics on CUDA, in no fixed order, and a resumed chain must
        repeat its sums exactly)."""
        if state.device.type != "cpu":
            return super().changes(members, state, steps)
        positions, step = torch.cat(list(members)), torch.cat(list(steps), 1)
        terms = (step * torch.add(step, state[:, positions], alpha=2)).double() * self.neg_half_inv_var[positions]
        sizes = torch.tensor([m.numel() for m in members], device=state.device)
        block_of = torch.repeat_interleave(torch.arange(len(members), device=state.device), sizes,
                                           output_size=positions.numel())
        return terms.new_zeros(state.shape[0], len(members)).index_add_(1, block_of, terms)


class GaussianPrior(Prior):
    """Isotropic Gaussian prior ``N(0, variance)`` per parameter, with per-group variances.

    ``group_variances`` maps shell-style patterns on parameter names (``"net.0.*"``,
    ``"*.bias"``) to a variance; the first matching pattern wins, others get ``variance``.
    An infinite variance (``.inf`` in YAML) is a flat, improper prior: that group adds nothing
    to log p(theta) (e.g. the deterministic psi of a partial BNN under MAP) and cannot be sampled.

    ``fan_in_scaled=True`` makes it a layer-scaled prior: every weight's variance (the default or its
    group's, c) is divided by its fan-in, the product of its dimensions after the first (``in_features`` of
    a linear layer, ``in_channels * kh * kw`` of a convolution), so that a unit's pre-activation has prior
    variance c times its inputs' mean square whatever the layer's width (the scaling under which Neal 1996,
    ch. 2, takes networks to their infinitely wide limit, and of LeCun and He initialisations); vectors
    and scalars (biases, a noise scale) keep c. The sampler that
    owns the prior tells it the shapes (:meth:`bind`).
    The log-density includes its normalising constant, so evidence estimates are exact:

        log p(theta) = sum_j [ -theta_j^2 / (2 v_j) - log(2 pi v_j) / 2 ].
    """

    def __init__(self, variance: float = 1.0, group_variances: Mapping[str, float] | None = None,
                 fan_in_scaled: bool = False) -> None:
        super().__init__()
        self.binds_shapes = check_bool("fan_in_scaled", fan_in_scaled)
        self.fan_ins: dict[str, int] = {}
        check_positive("variance", variance)
        for pattern, v in (group_variances or {}).items():
            if not v > 0:
                raise ValueError(f"group_variances[{pattern!r}] must be a number > 0 (inf: flat), got {v!r}")
        self.variance = float(variance)
        self.group_variances = dict(group_variances or {})

    def bind(self, shapes: Mapping[str, Sequence[int]], num_chains: int) -> None:
        """Keep every parameter's fan-in (``fan_in_scaled``): its dimensions after the first multiplied, 1 for
        a vector or a scalar."""
        self.fan_ins = {name: math.prod(shape[1:]) if len(shape) > 1 else 1 for name, shape in shapes.items()}

    def variance_of(self, name: str) -> float:
        """Prior variance of the parameter called ``name``."""
        variance = next((float(v) for pattern, v in self.group_variances.items() if fnmatch.fnmatchcase(name, pattern)),
                        self.variance)
        if not self.binds_shapes:
            return variance
        if name not in self.fan_ins:
            raise ValueError(f"GaussianPrior(fan_in_scaled=True) does not know the shape of {name!r}: it learns the "
                             "shapes from the sampler it is given to (bind)")
        return variance / self.fan_ins[name]

    def log_density(self, values: Tensor, name: str) -> Tensor:
        v = self.variance_of(name)
        if math.isinf(v):
            return torch.zeros_like(values)
        return -0.5 * values**2 / v - 0.5 * (math.log(v) + _LOG_2PI)

    def flat(self, shapes: Mapping[str, Sequence[int]]) -> GaussianFlatPrior:
        flat = [name for name in shapes if math.isinf(self.variance_of(name))]
        if flat:
            raise ValueError(f"{flat[:3]} have a flat (infinite-variance) prior, which block targets cannot sample")
        return GaussianFlatPrior(self, shapes)

    def forward(self, params: Mapping[str, Tensor], batch_dims: int = 1) -> Tensor:
        """Log prior of parameters whose first ``batch_dims`` dimensions index chains/samples."""
        total = None
        for name, p in params.items():
            v = self.variance_of(name)
            if math.isinf(v):
                continue
            flat = p.reshape(*p.shape[:batch_dims], -1)
            term = -0.5 * (flat**2).sum(-1) / v - 0.5 * flat.shape[-1] * (math.log(v) + _LOG_2PI)
            total = term if total is None else total + term
        if total is None:
            if not params:
                raise ValueError("params is empty: the prior needs at least one parameter")
            p = next(iter(params.values()))
            return p.new_zeros(p.shape[:batch_dims])  # every group flat
        return total

    def sample(self, params: Mapping[str, Tensor], generator: torch.Generator | None = None,
               temperature: float = 1.0) -> dict[str, Tensor]:
        """Draw parameters shaped like ``params`` from the prior tempered to pi^(1/T): N(0, T v), on the
        generator's device and then moved to the parameters' (so a CPU generator gives the same draws for
        parameters on any device)."""
        flat = [name for name in params if math.isinf(self.variance_of(name))]
        if flat:
            raise ValueError(f"cannot sample {flat[:3]} from a flat (infinite-variance) prior; use another init")
        return {
            name: torch.randn(p.shape, generator=generator, device=p.device if generator is None else generator.device,
                              dtype=p.dtype).to(p.device)
            * (self.variance_of(name) * temperature) ** 0.5
            for name, p in params.items()
        }


class Posterior:
    """Tempered, minibatch-scaled energy ``U_hat(theta) / T`` (see the module docstring).

    Args:
        likelihood: per-point likelihood of the network outputs.
        prior: prior over the sampled parameters (a :class:`Prior`).
        num_data: N, the number of training points. ``None`` lets the sampler read it
            from the DataModule (``num_train``) when training starts.
        temperature: T > 0; 1 is the Bayesian posterior.
        minibatch_scaling: ``"rescaled"`` (N/|B| times the batch sum, unbiased) or
            ``"sum"`` (the raw batch sum, as in the FNBG paper).
    """

    def __init__(
        self,
        likelihood: Likelihood,
        prior: Prior,
        num_data: int | None = None,
        temperature: float = 1.0,
        minibatch_scaling: Literal["rescaled", "sum"] = "rescaled",
    ) -> None:
        num_data = check_optional_int("num_data", num_data, 1)
        check_positive("temperature", temperature)
        if not isinstance(prior, Prior):
            raise ValueError(f"prior must be a lit_bayes.posterior.Prior (e.g. GaussianPrior), got {type(prior).__name__}")
        if minibatch_scaling not in ("rescaled", "sum"):
            raise ValueError(f"minibatch_scaling must be 'rescaled' or 'sum', got {minibatch_scaling!r}")
        self.likelihood = likelihood
        self.prior = prior
        self.num_data = num_data
        self.temperature = float(temperature)
        self.minibatch_scaling = minibatch_scaling

    def likelihood_scale(self, batch_size: int) -> float:
        """s in U_hat: N/|B| for ``"rescaled"``, 1 for ``"sum"``."""
        if self.minibatch_scaling == "sum":
            return 1.0
        if self.num_data is None:
            raise ValueError("num_data is not set: pass num_data or use a DataModule that exposes num_train")
        return self.num_data / batch_size

    def energy(self, log_lik: Tensor, log_prior: Tensor) -> Tensor:
        """Tempered energy from per-point log-likelihoods ``(..., B)`` and log priors ``(...)``."""
        scale = self.likelihood_scale(log_lik.shape[-1])
        return -(scale * log_lik.sum(-1) + log_prior) / self.temperature

    def likelihood_energy(self, total_log_lik: Tensor, batch_size: int) -> Tensor:
        """The likelihood part of the energy, -s * sum_{i in B} log p(y_i | x_i, theta) / T, from the
        batch's summed log-likelihoods ``total_log_lik`` (any shape)."""
        return total_log_lik * (-self.likelihood_scale(batch_size) / self.temperature)  # one product

    def prior_energy(self, log_prior: Tensor) -> Tensor:
        """The prior part of the energy, -log p(theta) / T."""
        return log_prior * (-1.0 / self.temperature)
