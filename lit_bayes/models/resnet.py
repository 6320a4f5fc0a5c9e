"""ResNet-20 for 32x32 images, the CIFAR variant of He et al. (2016, §4.2).

Structured-sgmcmc spec §6.3: ResNet-20 on CIFAR-10, SVHN and FashionMNIST. Layout: a 3x3
convolution with 16 channels, three stages of three basic blocks (two 3x3 convolutions
each) with 16, 32 and 64 channels (the first block of stages 2 and 3 strides by 2), global
average pooling and a linear classifier. Shortcuts that change shape are He et al.'s
option A: subsample by 2 and pad the new channels with zeros, so the network has 0.27 M
parameters (269,722 with 3 input channels and 10 classes). Convolutions have no bias.

Normalisation under sampling. The samplers evaluate many parameter sets at once through
``torch.func.vmap`` over ``functional_call`` (chains, and structured SG-MCMC's composites),
with the module's buffers shared by all of them. A standard ``BatchNorm2d`` in training
mode updates its running statistics in place, which is wrong for a stack of parameter
sets and fails under vmap. The paper does not say how it treats BatchNorm; the authors'
code keeps BN (and biases) deterministic at a MAP estimate. Two choices are offered:

- ``norm="frozen"`` (default): :class:`FrozenBatchNorm2d`, an affine normalisation with
  *fixed* statistics (the ``running_mean``/``running_var`` buffers, used in training and
  evaluation alike). Fresh buffers are 0 and 1, so the layer is the affine map γ x + β;
  loading the ``state_dict`` of a network trained with ordinary BatchNorm
  (``norm="batch"``, same names) freezes its statistics, as the authors' code does. γ and
  β stay sampled parameters like every other one (every parameter is sampled in this
  library); outputs do not depend on the other points of a batch.
- ``norm="batch"``: ordinary ``BatchNorm2d``, for pretraining outside the samplers (a
  plain ``torch.optim`` loop). Its running-statistics update fails under vmap, so use it
  with the samplers only through ``vectorize=False`` (or freeze it first, see above).
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from lit_bayes.validation import check_int

__all__ = ["FrozenBatchNorm2d", "ResNet20"]


class FrozenBatchNorm2d(nn.BatchNorm2d):
    """``BatchNorm2d`` that always normalises with its stored statistics (never updates them)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)


NORMS = {"frozen": FrozenBatchNorm2d, "batch": nn.BatchNorm2d}


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with normalisation, ReLU, and a parameter-free shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, norm: type[nn.Module]) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = norm(out_channels)
        self.stride = stride
        self.pad = out_channels - in_channels

    def shortcut(self, x: Tensor) -> Tensor:
        """Option A: stride-2 subsampling and zero channels when the shape changes."""
        if self.stride == 1 and self.pad == 0:
            return x
        x = x[..., :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """ResNet-20 (CIFAR variant) mapping ``(B, in_channels, H, W)`` images to ``num_classes`` logits.

    Args:
        num_classes: output logits (10 for CIFAR-10, SVHN, FashionMNIST).
        in_channels: 3 for colour images, 1 for FashionMNIST (28x28 inputs work too:
            the pooling is global).
        norm: ``"frozen"`` or ``"batch"``, see the module docstring.

    Convolutions start from He et al.'s normal initialisation and the last normalisation
    layer of every block from γ = 0 (Goyal et al. 2017), so each block starts as its
    shortcut and the signal stays bounded even with frozen identity statistics. (A
    sampler with ``init="module"`` re-initialises every chain with PyTorch's defaults;
    ``init="template"`` starts all chains at this network, e.g. a MAP estimate.)
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, norm: str = "frozen") -> None:
        super().__init__()
        for name, value in (("num_classes", num_classes), ("in_channels", in_channels)):
            check_int(name, value, 1)
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {sorted(NORMS)}, got {norm!r}")
        layer = NORMS[norm]
        self.conv = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn = layer(16)
        blocks, channels = [], 16
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                blocks.append(BasicBlock(channels, width, stride if i == 0 else 1, layer))
                channels = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            if isinstance(module, BasicBlock):
                nn.init.zeros_(module.bn2.weight)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 4:
            raise ValueError(f"ResNet20 expects images of shape (B, C, H, W), got shape {tuple(x.shape)}")
        out = F.relu(self.bn(self.conv(x)))
        out = self.blocks(out)
        return self.fc(out.mean(dim=(-2, -1)))
