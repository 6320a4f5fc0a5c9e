"""The MAP estimate of a sampler's own posterior, for every stacked parameter set at once.

:func:`fit_map` minimises U(theta) / N (the energy of :mod:`lit_bayes.posterior`, so the same
likelihood, prior, temperature and scaling) with Adam. It serves both the MAP baseline
(:class:`lit_bayes.callbacks.MAPBaseline`) and ``init="map"``, where each chain starts at its own MAP
fit begun from its own prior draw: chains then begin near modes of the posterior instead of in the
prior's saturated regions, as the members of a deep ensemble (Lakshminarayanan et al. 2017) end.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from lit_bayes.validation import check_int, check_optional_int, check_positive

__all__ = ["MapFit", "fit_map"]


@dataclass(frozen=True)
class MapFit:
    """How :func:`fit_map` optimises: ``steps`` Adam steps at learning rate ``lr``, each on a fresh random
    subset of ``batch_size`` training points, or on the full training set when ``batch_size`` is ``None`` or
    not below the number of points."""

    steps: int = 1000
    lr: float = 1e-2
    batch_size: int | None = 1024

    def __post_init__(self) -> None:
        check_int("steps", self.steps, 1)
        check_positive("lr", self.lr)
        check_optional_int("batch_size", self.batch_size, 1)

    @classmethod
    def of(cls, options: Mapping[str, object] | None, name: str = "init_options") -> MapFit:
        """A :class:`MapFit` from a mapping of its fields; an unknown key is a ``ValueError`` naming ``name``."""
        options = dict(options or {})
        unknown = sorted(set(options) - {"steps", "lr", "batch_size"})
        if unknown:
            raise ValueError(f"{name} takes steps, lr and batch_size, got unknown {unknown}")
        return cls(**options)


def fit_map(module, params: Mapping[str, Tensor], x: Tensor, y: Tensor, fit: MapFit = MapFit(),
            generator: torch.Generator | None = None) -> dict[str, Tensor]:
    """Adam on the mean energy U(theta) / N of ``module`` (a :class:`~lit_bayes.samplers.base.SamplerModule`)
    from the stacked starting points ``params`` ``(S, ...)``, every set optimised independently (their
    losses are summed; Adam's steps are elementwise). ``x``, ``y`` are the training data, on the device the
    fit runs on; minibatch indices come from ``generator`` (on the CPU), so the fit is reproducible. Runs
    with gradients on also inside inference mode; returns detached parameters."""
    num_points = y.shape[0]
    full = fit.batch_size is None or fit.batch_size >= num_points
    dtype = next(iter(params.values())).dtype  # the run's: float64 under precision 64-true
    x, y = (t.to(dtype=dtype) if t.is_floating_point() else t for t in (x, y))
    with torch.inference_mode(False), torch.enable_grad():
        x, y = (t.clone() if t.is_inference() else t for t in (x, y))  # autograd refuses inference tensors
        leaves = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
        optimizer = torch.optim.Adam(leaves.values(), lr=fit.lr)
        for _ in range(fit.steps):
            if full:
                batch_x, batch_y = x, y
            else:
                index = torch.randperm(num_points, generator=generator)[:fit.batch_size].to(y.device)
                batch_x, batch_y = x[index], y[index]
            optimizer.zero_grad()
            energy = module.energy(leaves, batch_x, batch_y)  # minibatch-rescaled: an estimate of U
            (energy.sum() / num_points).backward()
            optimizer.step()
    return {n: p.detach() for n, p in leaves.items()}
