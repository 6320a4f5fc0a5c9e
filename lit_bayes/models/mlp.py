"""Multilayer perceptrons ``MLP(k_0, ..., k_rho)`` (FNBG spec §1, Eqs. 3.1-3.2)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import Tensor, nn

from lit_bayes.linear_stack import StackedLinear
from lit_bayes.validation import check_widths

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
        widths = check_widths("widths", widths)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.widths = widths
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.activation = ACTIVATIONS[activation]()
        self.stacked = StackedLinear.of(self)

    def linear_stack_modules(self) -> tuple[list[nn.Linear], list[nn.Module], bool]:
        """The layers, the activations between them, and that inputs are flattened
        (:func:`lit_bayes.linear_stack.linear_stack`)."""
        return list(self.layers), [self.activation] * (len(self.layers) - 1), True

    def forward(self, x: Tensor) -> Tensor:
        h = x.flatten(1) if x.dim() > 2 else x
        for layer in self.layers[:-1]:
            h = self.activation(layer(h))
        return self.layers[-1](h)

    def stacked_forward(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """Outputs ``(S, B, k_rho)`` for S stacked parameter sets (named as in
        ``named_parameters``, each with a leading S dimension) on shared inputs ``x``.

        The first layer of all S sets is one matrix product ``x @ [W_1; ...; W_S]^T``
        (the inputs are read once), the others batched products; the result equals S
        separate forward passes (up to float rounding of the summation order).
        """
        return self.stacked(params, x)
