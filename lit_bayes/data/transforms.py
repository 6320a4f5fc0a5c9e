"""Per-image training-set transforms that a config names by import path, for
``TorchvisionImages(train_transform=...)`` (a ``Callable`` argument takes the dotted path of a function):

    data:
      init_args:
        train_transform: lit_bayes.data.transforms.fnbg_rotation

The FNBG augmentation study (fnbg spec §4 E9, Table 4) transforms every training image once, by
torchvision's ``RandomRotation((-30, 30))``, ``RandomApply([GaussianBlur((9, 9), (1.0, 1.5))], p=0.9)``
or ``RandomInvert(p=0.5)``; the DataModule seeds their randomness from its ``seed``.
"""
from __future__ import annotations

import torchvision.transforms as T
from torch import Tensor

__all__ = ["ROTATION_DEGREES", "fnbg_blur", "fnbg_inversion", "fnbg_rotation"]

ROTATION_DEGREES = (-30.0, 30.0)  # the range of fnbg_rotation's uniform angle
_ROTATION = T.RandomRotation(ROTATION_DEGREES)
_BLUR = T.RandomApply([T.GaussianBlur((9, 9), (1.0, 1.5))], p=0.9)
_INVERSION = T.RandomInvert(p=0.5)


def fnbg_rotation(image: Tensor) -> Tensor:
    """Rotation by an angle drawn uniformly from [-30, 30] degrees."""
    return _ROTATION(image)


def fnbg_blur(image: Tensor) -> Tensor:
    """With probability 0.9, a 9 x 9 Gaussian blur of a standard deviation drawn from [1.0, 1.5]."""
    return _BLUR(image)


def fnbg_inversion(image: Tensor) -> Tensor:
    """With probability 0.5, the image's colours inverted (1 - x for images in [0, 1])."""
    return _INVERSION(image)
