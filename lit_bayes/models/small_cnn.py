"""``SmallCNN``: a LeNet-style convolutional network (LeCun et al. 1998) small enough to sample on a CPU."""
from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from lit_bayes.validation import check_int

__all__ = ["SmallCNN"]


class SmallCNN(nn.Module):
    """Two 5x5 convolutions with ReLU units, each followed by 2x2 max pooling, then one linear layer to
    ``num_classes`` logits: LeNet-5's feature extractor without its hidden fully connected layers.

    Args:
        input_shape: ``(channels, height, width)`` of an image, e.g. ``(1, 28, 28)`` for MNIST.
        channels: the two convolutions' output channels.
        num_classes: outputs.
    """

    def __init__(self, input_shape: Sequence[int] = (1, 28, 28), channels: Sequence[int] = (8, 16),
                 num_classes: int = 10) -> None:
        super().__init__()
        if len(input_shape) != 3 or len(channels) != 2:
            raise ValueError(f"input_shape is (C, H, W) and channels two counts, got {input_shape!r}, {channels!r}")
        c, h, w = (check_int("input_shape", v, 1) for v in input_shape)
        c1, c2 = (check_int("channels", v, 1) for v in channels)
        side_h, side_w = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
        if side_h < 1 or side_w < 1:
            raise ValueError(f"input_shape {tuple(input_shape)} is too small for two 5x5 convolutions and poolings")
        self.input_shape = (c, h, w)
        self.features = nn.Sequential(
            nn.Conv2d(c, c1, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.head = nn.Linear(c2 * side_h * side_w, check_int("num_classes", num_classes, 2))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))
