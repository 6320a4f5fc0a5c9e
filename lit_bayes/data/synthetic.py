"""Synthetic data sets of the papers: noisy XOR, two moons, 1-d regression, linear regression.

Each split is drawn from one ``torch.Generator`` seeded with ``seed``, in the order train, val,
test, so a fixed seed gives identical data.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from .base import BayesDataModule
from lit_bayes.validation import check_float, check_int

__all__ = ["LinearRegression", "NoisyXOR", "SyntheticRegression", "TwoMoons"]


def _check_sizes(num_train: int, num_val: int, num_test: int, min_val: int = 0) -> tuple[int, int, int]:
    return (
        check_int("num_train", num_train, 1),
        check_int("num_val", num_val, min_val),
        check_int("num_test", num_test, 0),
    )


class _SampledSplits(BayesDataModule):
    """A data set drawn split by split (train, val, test) from one generator seeded with ``seed``."""

    sizes: tuple[int, int, int]

    def load(self) -> dict[str, tuple[Tensor, Tensor]]:
        generator = torch.Generator().manual_seed(self.seed)
        return {split: self._sample(n, generator) for split, n in zip(("train", "val", "test"), self.sizes)}

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Draw ``n`` points ``(x, y)`` from ``generator``."""
        raise NotImplementedError(f"{type(self).__name__} must implement _sample()")


class NoisyXOR(_SampledSplits):
    """Noisy XOR of the FNBG paper (fnbg spec §4, Data; its code's ``simulate_xor(n, s=0.55)``).

    Four equally large clusters, one per bit pair ``(b1, b2)`` in ``{0, 1}^2`` (in that order in
    each split). Each coordinate is ``U[0, 1)`` shifted by ``-offset`` for a 0-bit and ``+offset``
    for a 1-bit; the label is ``b1 XOR b2``. Inputs are not standardised. The paper uses 5000
    train and 1200 test points (1250 and 300 per cluster).

    Args:
        num_train, num_val, num_test: split sizes, each divisible by 4 (``num_train`` >= 4).
        offset: the shift ``s`` (>= 0).
        batch_size: training batch size (the paper's minibatch NBG uses 100); ``None`` = full batch.
        eval_batch_size: val/test batch size; ``None`` = one batch.
        seed: seed of the data generator and of the shuffle.
        num_workers: DataLoader workers.
        drop_last: drop a smaller last training batch (default: under sum scaling only; see
            :class:`~lit_bayes.data.base.BayesDataModule`).
    """

    def __init__(
        self,
        num_train: int = 5000,
        num_val: int = 1200,
        num_test: int = 1200,
        offset: float = 0.55,
        batch_size: int | None = 100,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        super().__init__(
            task="classification",
            num_classes=2,
            input_shape=(2,),
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            seed=seed,
            num_workers=num_workers,
            drop_last=drop_last,
        )
        self.sizes = _check_sizes(num_train, num_val, num_test)
        for name, size in zip(("num_train", "num_val", "num_test"), self.sizes):
            if size % 4:
                raise ValueError(f"{name} must be divisible by 4 (four equal XOR clusters), got {size}")
        self.offset = check_float("offset", offset, minimum=0.0)

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        per_cluster = n // 4
        bits = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]]).repeat_interleave(per_cluster, dim=0)
        shift = torch.where(bits == 1, self.offset, -self.offset)
        x = torch.rand(n, 2, generator=generator) + shift
        return x.float(), (bits[:, 0] ^ bits[:, 1]).long()


class TwoMoons(_SampledSplits):
    """Two interleaving half circles (feynman-kac spec §6.2: ``make_moons(noise=0.3)``, 100/100/100).

    The outer moon is ``(cos t, sin t)`` and the inner ``(1 - cos t, 1 - sin t - 0.5)``, with ``t``
    evenly spaced on ``[0, pi]``; the outer moon gets ``ceil(n / 2)`` points, the inner the rest.
    Gaussian noise of std ``noise`` is added to both coordinates and each split is shuffled.
    Labels: 0 outer, 1 inner.

    Args:
        num_train, num_val, num_test: split sizes.
        noise: std of the Gaussian noise (>= 0).
        batch_size: training batch size (the paper uses 20); ``None`` = full batch.
        eval_batch_size: val/test batch size; ``None`` = one batch.
        seed: seed of the data generator and of the shuffle.
        num_workers: DataLoader workers.
        drop_last: drop a smaller last training batch (default: under sum scaling only; see
            :class:`~lit_bayes.data.base.BayesDataModule`).
    """

    def __init__(
        self,
        num_train: int = 100,
        num_val: int = 100,
        num_test: int = 100,
        noise: float = 0.3,
        batch_size: int | None = 20,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        super().__init__(
            task="classification",
            num_classes=2,
            input_shape=(2,),
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            seed=seed,
            num_workers=num_workers,
            drop_last=drop_last,
        )
        self.sizes = _check_sizes(num_train, num_val, num_test)
        self.noise = check_float("noise", noise, minimum=0.0)

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        n_outer = (n + 1) // 2
        t_outer = torch.linspace(0.0, math.pi, n_outer, dtype=torch.float64)
        t_inner = torch.linspace(0.0, math.pi, n - n_outer, dtype=torch.float64)
        outer = torch.stack([t_outer.cos(), t_outer.sin()], dim=1)
        inner = torch.stack([1.0 - t_inner.cos(), 1.0 - t_inner.sin() - 0.5], dim=1)
        x = torch.cat([outer, inner]) + self.noise * torch.randn(n, 2, generator=generator, dtype=torch.float64)
        y = torch.cat([torch.zeros(n_outer, dtype=torch.long), torch.ones(n - n_outer, dtype=torch.long)])
        order = torch.randperm(n, generator=generator)
        return x[order].float(), y[order]


class SyntheticRegression(_SampledSplits):
    """1-d regression of the Feynman-Kac paper (feynman-kac spec §6.2, from its code).

    ``y = f(x) + eps`` with ``f(x) = x sin(x tanh x)``, ``x ~ U(low, high)`` sorted within each
    split, ``eps ~ N(0, noise_std^2)``. ``x`` has shape ``(n, 1)``, ``y`` shape ``(n,)``.

    Args:
        num_train, num_val, num_test: split sizes (the paper: 100 each).
        noise_std: std of the observation noise (>= 0).
        low, high: the input interval, ``low < high``.
        batch_size: training batch size (the paper uses 20); ``None`` = full batch.
        eval_batch_size: val/test batch size; ``None`` = one batch.
        seed: seed of the data generator and of the shuffle.
        num_workers: DataLoader workers.
        drop_last: drop a smaller last training batch (default: under sum scaling only; see
            :class:`~lit_bayes.data.base.BayesDataModule`).
    """

    def __init__(
        self,
        num_train: int = 100,
        num_val: int = 100,
        num_test: int = 100,
        noise_std: float = 1.0,
        low: float = -6.0,
        high: float = 6.0,
        batch_size: int | None = 20,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        super().__init__(
            task="regression",
            num_classes=None,
            input_shape=(1,),
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            seed=seed,
            num_workers=num_workers,
            drop_last=drop_last,
        )
        self.sizes = _check_sizes(num_train, num_val, num_test)
        self.noise_std = check_float("noise_std", noise_std, minimum=0.0)
        self.low = check_float("low", low)
        self.high = check_float("high", high)
        if not self.low < self.high:
            raise ValueError(f"low must be smaller than high, got low={low!r}, high={high!r}")

    @staticmethod
    def f(x: Tensor) -> Tensor:
        """The noise-free function ``x sin(x tanh x)`` (the RMSE reference, spec §6.0)."""
        return x * torch.sin(x * torch.tanh(x))

    def noise_free(self, x: Tensor) -> Tensor:
        """``f`` at inputs ``x`` of shape ``(n, 1)``: the reference of
        ``UncertaintyMetrics(rmse_reference="noise_free")``."""
        return self.f(x[:, 0])

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        x = self.low + (self.high - self.low) * torch.rand(n, 1, generator=generator, dtype=torch.float64)
        x = x.sort(dim=0).values
        y = self.f(x[:, 0]) + self.noise_std * torch.randn(n, generator=generator, dtype=torch.float64)
        return x.float(), y.float()


class LinearRegression(_SampledSplits):
    """Linear-Gaussian toy of structured-sgmcmc spec §6.1 (a conjugate posterior for tests).

    ``y = w . x + b + eps`` with ``x ~ N(0, I_d)`` (``d = len(weights)``; the paper does not state
    how its covariates were drawn) and ``eps ~ N(0, noise_std^2)``.

    Args:
        num_train, num_val, num_test: split sizes (``num_val`` >= 1).
        weights: the true ``w`` (the paper: ``(1.5, -0.8, 1.3)``).
        bias: the true ``b``.
        noise_std: std of the observation noise (>= 0; the paper: 1, known).
        batch_size: training batch size; ``None`` (default) = full batch.
        eval_batch_size: val/test batch size; ``None`` = one batch.
        seed: seed of the data generator and of the shuffle.
        num_workers: DataLoader workers.
        drop_last: drop a smaller last training batch (default: under sum scaling only; see
            :class:`~lit_bayes.data.base.BayesDataModule`).

    Attributes:
        weights (float32 tensor ``(d,)``), bias, noise_std: the generating parameters.
    """

    def __init__(
        self,
        num_train: int = 100,
        num_val: int = 100,
        num_test: int = 100,
        weights: Sequence[float] = (1.5, -0.8, 1.3),
        bias: float = 0.5,
        noise_std: float = 1.0,
        batch_size: int | None = None,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        drop_last: bool | None = None,
    ) -> None:
        if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or len(weights) == 0:
            raise ValueError(f"weights must be a non-empty sequence of finite numbers, got {weights!r}")
        weight_values = [check_float(f"weights[{i}]", w) for i, w in enumerate(weights)]
        super().__init__(
            task="regression",
            num_classes=None,
            input_shape=(len(weight_values),),
            batch_size=batch_size,
            eval_batch_size=eval_batch_size,
            seed=seed,
            num_workers=num_workers,
            drop_last=drop_last,
        )
        self.sizes = _check_sizes(num_train, num_val, num_test, min_val=1)
        self.weights = torch.tensor(weight_values, dtype=torch.float32)
        self.bias = check_float("bias", bias)
        self.noise_std = check_float("noise_std", noise_std, minimum=0.0)

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        x = torch.randn(n, self.weights.numel(), generator=generator)
        y = x @ self.weights + self.bias + self.noise_std * torch.randn(n, generator=generator)
        return x, y
