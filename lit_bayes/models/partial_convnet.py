"""The MNIST convolutional pBNN of the Feynman-Kac paper (Zhao et al., AISTATS 2024, App. D, Table 9).

Feynman-Kac spec §1 and §6.4: Conv32 3x3-ReLU-AvgPool2x2/2 -> Conv64 3x3-ReLU-AvgPool2x2/2 ->
Dense256-ReLU -> Dense10, SAME padding, with the first convolution (kernel and bias, 320
parameters) stochastic and the rest (824,138 parameters for 28x28x1 inputs) deterministic.

Because phi sits in the first layer, the *whole* network runs on J x B images per step (spec
pitfall §8.6). :meth:`PartialConvNet.particle_forward` therefore evaluates the J first-layer
filter banks in one convolution (the J x 32 filters stacked as output channels) and runs the
rest of the network once on all the resulting images, in chunks of particles so that no more
than ``max_images`` images are in flight at once.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from lit_bayes.models.partial_bnn import PartialBNN
from lit_bayes.validation import check_bool, check_int

__all__ = ["PartialConvNet"]

# std of a standard normal truncated to [-2, 2]: Flax's truncated-normal variance scaling divides by it
_TRUNCATED_STD = 0.87962566103423978


def _lecun_normal_(weight: Tensor) -> None:
    """Flax's default kernel init: truncated normal (at 2 std) of variance 1 / fan_in."""
    fan_in = weight[0].numel()
    std = math.sqrt(1.0 / fan_in) / _TRUNCATED_STD
    nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


class PartialConvNet(PartialBNN):
    """Table 9's MNIST network as a pBNN with its first convolution stochastic (spec §1, §6.4).

    Args:
        input_shape: ``(channels, height, width)`` of one image; ``(1, 28, 28)`` for MNIST.
        num_classes: outputs of the last dense layer (logits of a ``Categorical`` likelihood).
        max_images: the most images (particles x batch points) the network processes at once;
            :meth:`particle_forward` cuts the particles into chunks of ``max_images // B``
            (at least one particle per chunk).
        recompute: when gradients are needed and the particles span several chunks, keep only
            each chunk's inputs and recompute its activations in the backward pass
            (``torch.utils.checkpoint``), so training memory is bounded by one chunk too, at
            the cost of a second forward pass; ``False`` keeps every chunk's activations.
        init: ``"lecun_normal"`` kernels with zero biases (Flax's default, the paper's) or
            ``"torch"`` defaults.

    The stochastic parameters are ``"0.weight"`` ``(32, C, 3, 3)`` and ``"0.bias"`` ``(32,)``.
    """

    def __init__(
        self,
        input_shape: Sequence[int] = (1, 28, 28),
        num_classes: int = 10,
        max_images: int = 8192,
        recompute: bool = True,
        init: str = "lecun_normal",
    ) -> None:
        shape = tuple(input_shape) if isinstance(input_shape, Sequence) and not isinstance(input_shape, str) else ()
        if len(shape) != 3 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape):
            raise ValueError(f"input_shape must be three positive integers (channels, height, width), got {input_shape!r}")
        if shape[1] < 4 or shape[2] < 4:
            raise ValueError(f"input_shape must have height and width >= 4 (two 2x2 poolings), got {input_shape!r}")
        check_int("num_classes", num_classes, 2)
        check_int("max_images", max_images, 1)
        check_bool("recompute", recompute)
        if init not in ("lecun_normal", "torch"):
            raise ValueError(f"init must be 'lecun_normal' or 'torch', got {init!r}")
        channels, height, width = shape
        net = nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1),  # SAME padding for a 3x3 kernel
            nn.ReLU(),
            nn.AvgPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.AvgPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * (height // 2 // 2) * (width // 2 // 2), 256),
            nn.ReLU(),
            nn.Linear(256, num_classes),
        )
        if init == "lecun_normal":
            for layer in net:
                if isinstance(layer, (nn.Conv2d, nn.Linear)):
                    _lecun_normal_(layer.weight)
                    nn.init.zeros_(layer.bias)
        super().__init__(net, "0")
        self.input_shape = shape
        self.max_images = max_images
        self.recompute = recompute

    def _chunk_forward(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """Outputs ``(k, B, C)`` of the k particles ``weight`` ``(k, 32, C_in, 3, 3)``, ``bias`` ``(k, 32)``."""
        num, batch = weight.shape[0], x.shape[0]
        first = self.net[0]
        h = F.conv2d(x, weight.flatten(0, 1), bias.flatten(), padding=first.padding)  # (B, k * 32, H, W)
        h = h.reshape(batch * num, first.out_channels, *h.shape[2:])  # a view: row b * k + j is (x_b, phi^j)
        out = self.net[1:](h)  # the deterministic rest, once on all k x B images
        return out.reshape(batch, num, *out.shape[1:]).transpose(0, 1)

    def particle_forward(self, phi: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """Logits ``(J, B, num_classes)`` of the J particles ``phi`` on images ``x`` ``(B, C, H, W)``;
        differentiable in psi. Equal to :meth:`PartialBNN.particle_forward` (vmap over the first
        layer) and :meth:`particle_forward_loop`, but one stacked convolution per chunk."""
        self._check_phi(phi)
        weight, bias = phi["0.weight"], phi["0.bias"]
        per_chunk = max(1, self.max_images // max(1, x.shape[0]))
        recompute = self.recompute and torch.is_grad_enabled() and weight.shape[0] > per_chunk
        chunks = []
        for start in range(0, weight.shape[0], per_chunk):
            w, b = weight[start : start + per_chunk], bias[start : start + per_chunk]
            if recompute:
                chunks.append(checkpoint(self._chunk_forward, x, w, b, use_reentrant=False))
            else:
                chunks.append(self._chunk_forward(x, w, b))
        return torch.cat(chunks)
