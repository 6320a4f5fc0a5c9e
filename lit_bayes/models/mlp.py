"""Multilayer perceptrons ``MLP(k_0, ..., k_rho)`` (FNBG spec §1, Eqs. 3.1-3.2)."""
from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

__all__ = ["MLP"]

ACTIVATIONS = {"sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


class MLP(nn.Module):
    """``g_j = w_j h_{j-1} + b_j``, ``h_j = phi(g_j)``, ``h_0 = x``; the output layer is linear.

    ``widths = [k_0, ..., k_rho]`` lists the input, hidden and output sizes, so
    ``MLP([2, 2, 1])`` is the paper's MLP(2, 2, 1). Inputs of more than two dimensions
    (images) are flattened. The ``nn.Linear`` layers are ``self.layers``, in order.
    """

    def __init__(self, widths: Sequence[int], activation: str = "sigmoid") -> None:
        super().__init__()
        widths = list(widths)
        if len(widths) < 2 or any(not isinstance(w, int) or w < 1 for w in widths):
            raise ValueError(f"widths must list at least two positive integers (input, ..., output), got {widths!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.widths = widths
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.activation = ACTIVATIONS[activation]()

    def forward(self, x: Tensor) -> Tensor:
        h = x.flatten(1) if x.dim() > 2 else x
        for layer in self.layers[:-1]:
            h = self.activation(layer(h))
        return self.layers[-1](h)
