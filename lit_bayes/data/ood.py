"""Out-of-distribution inputs for :class:`lit_bayes.callbacks.OODMetrics`.

- :class:`FarAwayPoints`: points spread uniformly over a shell (an annulus in 2-d) around a
  centre, well outside a low-dimensional training set's support (far-away points for two moons).
- :func:`rotate_90` and :func:`invert`: fixed per-image transforms for a shifted copy of an
  image set, as ``TorchvisionImages(test_transform=...)`` (its test split is then the OOD set)::

      ood:
        class_path: lit_bayes.data.TorchvisionImages
        init_args: {name: mnist, test_transform: lit_bayes.data.ood.rotate_90, ...}

Only the inputs matter for OOD detection: a DataModule here yields ``(x,)`` test batches.
"""
from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from .base import check_batch_size
from lit_bayes.validation import check_float, check_int

__all__ = ["FarAwayPoints", "invert", "rotate_90"]


class FarAwayPoints(L.LightningDataModule):
    """``num_points`` points uniform in the shell ``radius_min <= |x - center| <= radius_max``
    (in ``len(center)`` dimensions: a uniform direction, and a radius with density proportional
    to ``r^(d-1)``), drawn from a generator seeded with ``seed``. Its test split (``test_data``,
    ``test_dataloader``) holds them as ``(x,)`` batches; it has no labels and no other split.

    For two moons (``TwoMoons``, noise 0.3) the points lie within about 2.5 of (0.5, 0.25);
    a shell of radii 5 to 8 around that centre is well outside.

    Args:
        num_points: how many points (>= 1).
        center: the shell's centre; its length is the input dimension (>= 1).
        radius_min, radius_max: the shell's radii, ``0 <= radius_min <= radius_max``, ``radius_max > 0``.
        eval_batch_size: test batch size; ``None`` = one batch.
        seed: seed of the generator.
    """

    def __init__(
        self,
        num_points: int = 1000,
        center: Sequence[float] = (0.0, 0.0),
        radius_min: float = 5.0,
        radius_max: float = 8.0,
        eval_batch_size: int | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.num_points = check_int("num_points", num_points, 1)
        if isinstance(center, (str, bytes)) or not isinstance(center, Sequence) or len(center) == 0:
            raise ValueError(f"center must be a non-empty sequence of finite numbers, got {center!r}")
        self.center = torch.tensor([check_float(f"center[{i}]", c) for i, c in enumerate(center)])
        self.radius_min = check_float("radius_min", radius_min, minimum=0.0)
        self.radius_max = check_float("radius_max", radius_max, minimum=self.radius_min)
        if self.radius_max <= 0:
            raise ValueError(f"radius_max must be > 0, got {radius_max!r}")
        self.eval_batch_size = check_batch_size("eval_batch_size", eval_batch_size)
        self.seed = check_int("seed", seed, 0)
        self.input_shape = (self.center.numel(),)
        self.test_data: TensorDataset | None = None

    def setup(self, stage: str | None = None) -> None:
        """Draw the points once; later calls reuse them."""
        if self.test_data is None:
            self.test_data = TensorDataset(self._sample())

    def _sample(self) -> Tensor:
        generator = torch.Generator().manual_seed(self.seed)
        dim = self.center.numel()
        direction = torch.randn(self.num_points, dim, generator=generator, dtype=torch.float64)
        direction = direction / direction.norm(dim=1, keepdim=True)
        u = torch.rand(self.num_points, 1, generator=generator, dtype=torch.float64)
        low, high = self.radius_min**dim, self.radius_max**dim
        radius = (low + u * (high - low)) ** (1.0 / dim)  # inverse CDF of a density proportional to r^(d-1)
        return (self.center.double() + radius * direction).float()

    def test_dataloader(self) -> DataLoader:
        """The points in a fixed order, as ``(x,)`` batches."""
        if self.test_data is None:
            raise RuntimeError("FarAwayPoints.setup() must run before the test split is used")
        size = self.num_points if self.eval_batch_size is None else min(self.eval_batch_size, self.num_points)
        return DataLoader(self.test_data, batch_size=size, shuffle=False)


def rotate_90(image: Tensor) -> Tensor:
    """The ``(C, H, W)`` image rotated by 90 degrees counter-clockwise (square images only)."""
    if image.shape[-1] != image.shape[-2]:
        raise ValueError(f"rotate_90 needs square images, got shape {tuple(image.shape)}")
    return torch.rot90(image, 1, dims=(-2, -1))


def invert(image: Tensor) -> Tensor:
    """The image's colours inverted, ``1 - x`` (images in [0, 1])."""
    return 1.0 - image
