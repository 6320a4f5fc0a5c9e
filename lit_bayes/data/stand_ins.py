"""Generated stand-ins of the right shape for data sets whose files are missing: a recipe runs its
whole pipeline on them (and says so in its output) where the real files are absent.

- :class:`CorrelatedLinearRegression`: the linear-regression toy of structured-sgmcmc spec §6.1
  with correlated covariates, so that its exact posterior has correlations to keep or lose.
- :class:`ClassPrototypes`: inputs of any shape scattered around one random prototype per class.
- :class:`RandomFeatureRegression`: standard-normal features and a smooth random target.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lit_bayes.validation import check_float, check_int

from .synthetic import LinearRegression, _check_sizes, _SampledSplits

__all__ = ["ClassPrototypes", "CorrelatedLinearRegression", "RandomFeatureRegression"]


class CorrelatedLinearRegression(LinearRegression):
    """:class:`LinearRegression` with three covariates correlated through a shared factor.

    ``x1 = z1``, ``x2 = c z1 + s z2``, ``x3 = c z1 + s z3`` with ``c = covariate_corr``,
    ``s = sqrt(1 - c^2)`` and ``z ~ N(0, I_3)``: the exact posterior of ``(w, b)`` then correlates
    ``(w1, w2)`` and ``(w1, w3)`` (independent covariates, ``covariate_corr=0``, give an almost
    uncorrelated posterior). The paper (Fig. 2) does not say how its covariates were drawn.
    Other arguments as :class:`LinearRegression`; ``weights`` must have 3 entries.
    """

    def __init__(self, covariate_corr: float = 0.8, num_train: int = 100, num_val: int = 100, num_test: int = 100,
                 weights: Sequence[float] = (1.5, -0.8, 1.3), bias: float = 0.5, noise_std: float = 1.0,
                 batch_size: int | None = None, eval_batch_size: int | None = None, seed: int = 0) -> None:
        super().__init__(num_train=num_train, num_val=num_val, num_test=num_test, weights=weights, bias=bias,
                         noise_std=noise_std, batch_size=batch_size, eval_batch_size=eval_batch_size, seed=seed)
        if self.weights.numel() != 3:
            raise ValueError(f"weights must have 3 entries (x1, x2, x3), got {len(weights)}")
        self.covariate_corr = check_float("covariate_corr", covariate_corr)
        if not 0.0 <= self.covariate_corr < 1.0:
            raise ValueError(f"covariate_corr must lie in [0, 1), got {covariate_corr!r}")

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        z = torch.randn(n, 3, generator=generator)
        c, s = self.covariate_corr, (1.0 - self.covariate_corr**2) ** 0.5
        x = torch.stack([z[:, 0], c * z[:, 0] + s * z[:, 1], c * z[:, 0] + s * z[:, 2]], dim=1)
        y = x @ self.weights + self.bias + self.noise_std * torch.randn(n, generator=generator)
        return x, y


class ClassPrototypes(_SampledSplits):
    """Classification inputs of shape ``input_shape`` around one random prototype per class:
    ``x = mu_y + N(0, I)``, ``mu ~ N(0, separation^2 I)`` (drawn once), uniform labels.

    Args:
        input_shape: shape of one input, e.g. ``(1, 28, 28)`` (MNIST) or ``(3, 32, 32)``.
        num_classes: classes (>= 2).
        num_train, num_val, num_test: split sizes.
        separation: std of the prototypes (larger: easier).
        batch_size, eval_batch_size, seed: as :class:`~lit_bayes.data.base.BayesDataModule`.
    """

    def __init__(self, input_shape: Sequence[int] = (1, 28, 28), num_classes: int = 10, num_train: int = 2000,
                 num_val: int = 0, num_test: int = 500, separation: float = 0.2, batch_size: int | None = 500,
                 eval_batch_size: int | None = None, seed: int = 0) -> None:
        super().__init__(task="classification", num_classes=check_int("num_classes", num_classes, 2),
                         input_shape=tuple(check_int("input_shape", d, 1) for d in input_shape),
                         batch_size=batch_size, eval_batch_size=eval_batch_size, seed=seed)
        self.sizes = _check_sizes(num_train, num_val, num_test)
        self.separation = check_float("separation", separation, minimum=0.0)
        self._prototypes: Tensor | None = None

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        generator = torch.Generator().manual_seed(self.seed)
        self._prototypes = self.separation * torch.randn(self.num_classes, *self.input_shape, generator=generator)
        return {split: self._sample(n, generator) for split, n in zip(("train", "val", "test"), self.sizes)}

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        y = torch.randint(self.num_classes, (n,), generator=generator)
        return self._prototypes[y] + torch.randn(n, *self.input_shape, generator=generator), y


class RandomFeatureRegression(_SampledSplits):
    """Tabular regression stand-in: ``x ~ N(0, I_d)``, ``y = tanh(w . x / 2) + 0.2 eps`` with
    ``w ~ N(0, I_d)`` drawn once and ``eps ~ N(0, 1)``.

    Args:
        num_features: d.
        num_train, num_val, num_test: split sizes.
        batch_size, eval_batch_size, seed: as :class:`~lit_bayes.data.base.BayesDataModule`.
    """

    def __init__(self, num_features: int = 8, num_train: int = 300, num_val: int = 40, num_test: int = 60,
                 batch_size: int | None = 32, eval_batch_size: int | None = None, seed: int = 0) -> None:
        super().__init__(task="regression", num_classes=None, input_shape=(check_int("num_features", num_features, 1),),
                         batch_size=batch_size, eval_batch_size=eval_batch_size, seed=seed)
        self.sizes = _check_sizes(num_train, num_val, num_test)
        self._weights: Tensor | None = None

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        generator = torch.Generator().manual_seed(self.seed)
        self._weights = torch.randn(self.input_shape[0], generator=generator)
        return {split: self._sample(n, generator) for split, n in zip(("train", "val", "test"), self.sizes)}

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        x = torch.randn(n, self.input_shape[0], generator=generator)
        return x, torch.tanh(x @ self._weights / 2) + 0.2 * torch.randn(n, generator=generator)
