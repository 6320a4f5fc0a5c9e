"""Learned prior scales: Gaussian weights whose per-group precisions carry Gamma hyperpriors.

Neal (1996, *Bayesian Learning for Neural Networks*) gives each group of weights
(a layer's weights, its biases) a common precision lambda_g with a Gamma hyperprior and alternates
updates of the weights with Gibbs draws of the precisions from their conjugate conditional. For the
tempered target exp(-U / T) with

    U(theta, lambda) = -s sum_i log p(y_i | x_i, theta)
                       - sum_g [log N(theta_g; 0, 1/lambda_g) + log Gamma(lambda_g; a, b)],

the conditional of lambda_g given the n_g weights theta_g of its group is

    lambda_g | theta ~ Gamma(shape 1 + (a - 1 + n_g / 2) / T, rate (b + |theta_g|^2 / 2) / T),

which is Gamma(a + n_g / 2, b + |theta_g|^2 / 2) at T = 1. Gamma variates come from the sampler's own
generator by the rejection method of Marsaglia & Tsang (2000), so chains resume exactly.
"""
from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from lit_bayes.posterior import Prior
from lit_bayes.validation import check_bool, check_positive

__all__ = ["LearnedScalePrior", "standard_gamma"]

_LOG_2PI = math.log(2.0 * math.pi)


def standard_gamma(shape: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Gamma(shape, rate 1) variates, one per element of ``shape`` (> 0), drawn from ``generator``:
    Marsaglia & Tsang (2000), d = a - 1/3, c = 1 / sqrt(9 d), x ~ N(0, 1), v = (1 + c x)^3, accept d v when
    log u < x^2 / 2 + d - d v + d log v; for a < 1, Gamma(a + 1) U^(1/a). Every element is proposed in
    each round (one vectorised draw) and keeps its first accepted value, so the result depends only on the
    generator's state and the shapes."""
    if not bool((shape > 0).all()):
        raise ValueError(f"gamma shapes must be > 0, got {shape.min().item():g}")
    device = shape.device if generator is None else generator.device
    a = shape.to(device, torch.float64)
    boosted = a < 1
    d = torch.where(boosted, a + 1, a) - 1.0 / 3.0
    c = 1.0 / torch.sqrt(9.0 * d)
    out = torch.full_like(a, math.nan)
    pending = torch.ones_like(a, dtype=torch.bool)
    while bool(pending.any()):  # each round accepts >= 95 % of the elements still pending
        x = torch.randn(a.shape, generator=generator, device=device, dtype=torch.float64)
        u = torch.rand(a.shape, generator=generator, device=device, dtype=torch.float64)
        v = (1.0 + c * x) ** 3
        accept = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * torch.log(v.clamp_min(1e-300)))
        take = pending & accept
        out = torch.where(take, d * v, out)
        pending = pending & ~accept
    if bool(boosted.any()):
        u = torch.rand(a.shape, generator=generator, device=device, dtype=torch.float64)
        out = torch.where(boosted, out * u ** (1.0 / a), out)
    return out.to(shape.device)


class LearnedScalePrior(Prior):
    """Gaussian prior N(0, 1 / lambda_g) whose precision lambda_g per group has a Gamma(``shape``, ``rate``)
    hyperprior and is sampled with the weights (see the module docstring): every chain holds its own
    precisions, drawn by a conjugate Gibbs step after each weight update of the samplers that take this prior
    (:class:`lit_bayes.SGMCMC`, :class:`lit_bayes.StructuredSGMCMC`); others refuse it.

    Groups: by default each parameter tensor is its own group (each layer's weight and its bias, Neal's
    scheme); ``groups`` maps shell-style patterns on parameter names to group names (the first matching
    pattern wins; ``{"net.*.weight": "weights"}`` puts every weight in one group), and a parameter no pattern
    matches keeps its own group. ``per_element=True`` gives every weight its own precision instead, which
    makes each weight's marginal prior a Student-t with 2a degrees of freedom and scale sqrt(b / a) (a scale
    mixture of Gaussians: most weights shrink, a few stay large). The precisions start at the hyperprior's
    mean, shape / rate, and are a buffer of the prior, ``(chains, groups)`` (``(chains, parameters)``
    per element), saved in checkpoints.

    ``forward`` is the joint log density log p(theta | lambda) + log p(lambda) of each chain, with that chain's
    precisions. Parameter sets are told apart by their number only: a stack of as many sets as chains takes
    the chains' precisions row by row (so a deep ensemble with as many members as chains pairs member k with
    chain k's precisions); any other number of sets (a MAP fit of one set, :class:`MAPBaseline`) takes the
    chains' mean precision per group, an empirical-Bayes plug-in.

    Args:
        shape: a > 0 of the Gamma hyperprior on each precision.
        rate: b > 0 (the hyperprior's mean precision is a / b, its mean variance b / (a - 1) for a > 1).
        groups: optional pattern -> group name map.
        per_element: one precision per weight instead of per group.
    """

    binds_shapes = True

    def __init__(self, shape: float = 1.0, rate: float = 1.0, groups: Mapping[str, str] | None = None,
                 per_element: bool = False) -> None:
        super().__init__()
        self.shape = check_positive("shape", shape)
        self.rate = check_positive("rate", rate)
        self.per_element = check_bool("per_element", per_element)
        if self.per_element and groups:
            raise ValueError("groups and per_element=True exclude each other: every weight is its own group")
        self.groups = dict(groups or {})
        self.group_names: list[str] = []
        self.columns: dict[str, slice] = {}  # each parameter's columns of the precision matrix
        self.register_buffer("precisions", torch.zeros(0, 0))

    # -------------------------------------------------------------- binding
    def bind(self, shapes: Mapping[str, Sequence[int]], num_chains: int) -> None:
        """Fix the groups of the sampled parameters ``shapes`` (one chain's shapes, by name) and give
        ``num_chains`` chains their starting precisions (the hyperprior's mean)."""
        names: list[str] = list(shapes) if self.per_element else []
        columns, sizes, start = {}, [], 0
        for name, shape in shapes.items():
            if self.per_element:
                columns[name] = slice(start, start + math.prod(shape))
                start += math.prod(shape)
                continue
            group = next((g for pattern, g in self.groups.items() if fnmatch.fnmatchcase(name, pattern)), name)
            if group not in names:
                names.append(group)
                sizes.append(0)
            g = names.index(group)
            columns[name] = slice(g, g + 1)
            sizes[g] += math.prod(shape)
        self.group_names, self.columns = names, columns
        self.sizes = torch.ones(start, dtype=torch.float64) if self.per_element else torch.tensor(sizes).double()
        self.precisions = torch.full((num_chains, len(self.sizes)), self.shape / self.rate, dtype=torch.float64)

    def _columns(self, name: str) -> slice:
        if name not in self.columns:
            raise ValueError(f"parameter {name!r} is not among those LearnedScalePrior was bound to "
                             f"({sorted(self.columns)[:5]}...): build it into a sampler first")
        return self.columns[name]

    def _precision(self, name: str, rows: int) -> Tensor:
        """The precisions of ``name``'s elements for ``rows`` parameter sets: per chain when ``rows`` is the
        number of chains, else the chains' mean; ``(rows, 1)`` (its group's) or ``(rows, n)`` (per element)."""
        block = self.precisions[:, self._columns(name)]
        if rows != block.shape[0]:
            block = block.mean(0, keepdim=True).expand(rows, -1)
        return block

    # -------------------------------------------------------------- density
    def log_density(self, values: Tensor, name: str) -> Tensor:
        """log N(values; 0, 1 / lambda) elementwise, ``values`` ``(sets, n)`` with the sets first."""
        precision = self._precision(name, values.shape[0]).to(values.device, values.dtype)
        return -0.5 * precision * values**2 + 0.5 * (torch.log(precision) - _LOG_2PI)

    def hyperprior_log_density(self, rows: int) -> Tensor:
        """log Gamma(lambda_g; shape, rate) summed over the groups, ``(rows,)`` (the chains' own, or the
        mean precision's for another number of sets)."""
        lam = self.precisions if rows == self.precisions.shape[0] else self.precisions.mean(0).expand(rows, -1)
        a, b = self.shape, self.rate
        return (a * math.log(b) - math.lgamma(a) + (a - 1) * torch.log(lam) - b * lam).sum(1)

    def forward(self, params: Mapping[str, Tensor], batch_dims: int = 1) -> Tensor:
        if batch_dims != 1:
            raise ValueError("LearnedScalePrior takes parameters with one leading (chain or sample) dimension")
        total = super().forward(params, batch_dims)
        return total + self.hyperprior_log_density(total.shape[0]).to(total.device, total.dtype)

    def sample(self, params: Mapping[str, Tensor], generator: torch.Generator | None = None,
               temperature: float = 1.0) -> dict[str, Tensor]:
        """Weights from N(0, T / lambda) with each chain's current precisions (the tempered conditional)."""
        out = {}
        for name, p in params.items():
            device = p.device if generator is None else generator.device
            scale = (temperature / self._precision(name, p.shape[0])).sqrt().to(device, p.dtype)
            draw = torch.randn(p.shape, generator=generator, device=device, dtype=p.dtype)
            out[name] = (draw.reshape(p.shape[0], -1) * scale).reshape(p.shape).to(p.device)
        return out

    # ---------------------------------------------------------------- Gibbs
    def conditional(self, params: Mapping[str, Tensor], temperature: float = 1.0) -> tuple[Tensor, Tensor]:
        """The shape and rate ``(chains, groups)`` of each precision's conditional given the chains'
        parameters ``params`` (the module docstring's formula)."""
        squares = torch.zeros_like(self.precisions)
        for name, p in params.items():
            values = p.detach().reshape(p.shape[0], -1).double().square()
            columns = self._columns(name)
            squares[:, columns] += values if self.per_element else values.sum(1, keepdim=True)
        shape = 1.0 + (self.shape - 1.0 + 0.5 * self.sizes.to(squares.device)) / temperature
        if not bool((shape > 0).all()):
            raise ValueError(f"the precisions' conditional has shape <= 0 at temperature {temperature:g}: raise "
                             "the hyperprior's shape")
        return shape.expand_as(squares), (self.rate + 0.5 * squares) / temperature

    @torch.no_grad()
    def gibbs_update(self, params: Mapping[str, Tensor], generator: torch.Generator,
                     temperature: float = 1.0) -> None:
        """Replace every chain's precisions by a draw from their conditional given ``params``."""
        shape, rate = self.conditional(params, temperature)
        self.precisions = standard_gamma(shape, generator).to(rate.device) / rate
