"""A hand-written psi-gradient for partial BNNs over an ``nn.Sequential`` (issue 26: the OHSMC step).

:meth:`lit_bayes.models.PartialBNN.particle_forward` evaluates the deterministic trunk once, the
stochastic linear layer as one product over the J particles and the layers above on all J x B rows.
Fisher's identity (Feynman-Kac spec Eqs. 5-6) needs the gradient of the weighted log-likelihood in psi
only, the particles held constant. Autograd records ~30 small nodes for it, and its engine costs about
as much as the operations (on CPU at J = 100 the forward and backward take ~1.9 ms through autograd, ~0.9
ms written out; the whole OHSMC step becomes ~0.85x as long).
:func:`taped_particle_forward` runs the same modules and products in the same order (the same outputs,
to the bit) and keeps every module's input and output; :func:`psi_gradients` then goes back down with
the linear layers' products and the derivative kernels autograd itself uses (``gelu_backward``,
``threshold_backward``, ``tanh_backward``, ``sigmoid_backward``; for :class:`~lit_bayes.models.activations.TanhGELU`
in its logistic form, its own backward from the logistic factor the forward saved):

    dL/dW_l = G_l^T h_{l-1},   dL/db_l = sum_rows G_l,   G_{l-1} = (G_l W_l) * sigma'_{l-1},

the stochastic layer's input gradient summed over particles, dL/dh = sum_j G^j W^j (one product of the
(B, J out) gradients with the (J out, in) stacked particle weights).

Given the network as :mod:`lit_bayes.models.particle_kernel` runs it, the same forward and backward are one C call
each instead (the tape then holds no records), where the kernel applies.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lit_bayes.grad_mode import without_grad
from lit_bayes.models.activations import TanhGELU, logistic_gelu_backward
from lit_bayes.models.particle_kernel import ParticleNetwork

__all__ = ["ACTIVATION_BACKWARD", "Tape", "psi_gradients", "stochastic_linear", "supports", "taped_particle_forward"]

_ATEN_GELU_BACKWARD = torch.ops.aten.gelu_backward.default  # the overload itself: no overload resolution per call


def _gelu_backward(module: nn.GELU, grad: Tensor, x: Tensor, y: Tensor, saved: Tensor | None) -> Tensor:
    if saved is not None:  # a TanhGELU in its logistic form
        return logistic_gelu_backward(grad, x, saved)
    return _ATEN_GELU_BACKWARD(grad, x, approximate=module.approximate)


#: d activation / d input applied to an upstream gradient, from the module, its input, its output and what its
#: taped forward saved (:func:`_taped_forward`; None for every module but a TanhGELU in its logistic form)
ACTIVATION_BACKWARD: dict[type, Callable[[nn.Module, Tensor, Tensor, Tensor, Tensor | None], Tensor]] = {
    nn.GELU: _gelu_backward,
    TanhGELU: _gelu_backward,
    nn.ReLU: lambda m, grad, x, y, saved: torch.ops.aten.threshold_backward(grad, y, 0),
    nn.Tanh: lambda m, grad, x, y, saved: torch.ops.aten.tanh_backward(grad, y),
    nn.Sigmoid: lambda m, grad, x, y, saved: torch.ops.aten.sigmoid_backward(grad, y),
    nn.Identity: lambda m, grad, x, y, saved: grad,
}

#: (module, its input, its output, what its backward needs besides them or None), in forward order
Records = list[tuple[nn.Module, Tensor, Tensor, Tensor | None]]


@dataclass
class Tape:
    """What :func:`psi_gradients` needs of one :func:`taped_particle_forward`: the records of the trunk and
    of the layers above, the stacked particle weights ``(J, out, in)``, and where the network ran in the particle
    kernel, ``fused``: the network, its kernel, the inputs and the particles' bias (there are no records then)."""

    trunk: Records
    above: Records
    weight: Tensor
    fused: tuple[ParticleNetwork, Any, Tensor, Tensor | None] | None = None


def supports(layers: nn.Sequential) -> bool:
    """Whether every module of ``layers`` is an ``nn.Linear`` or an activation of :data:`ACTIVATION_BACKWARD`."""
    return all(isinstance(m, nn.Linear) or type(m) in ACTIVATION_BACKWARD for m in layers)


def stochastic_linear(h: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """J particles ``weight`` ``(J, out, in)``, ``bias`` ``(J, out)`` of a linear layer on the trunk's output
    ``h`` ``(B, in)``: ``(B, J, out)``. One (B, in) x (in, J out) product, the rows kept point-major, so that
    ``(B, J, out)`` flattens to the rows of the layers above without a copy. The product is ``F.linear`` without a
    bias (``h @ W.T``, the same values; the transpose taken in C++)."""
    out = F.linear(h, weight.reshape(-1, weight.shape[-1])).reshape(h.shape[0], weight.shape[0], -1)
    return out if bias is None else out + bias


def _linear_parameters(module: nn.Linear) -> tuple[Tensor, Tensor | None]:
    """``module``'s weight and bias: read from its parameter table for a plain ``nn.Linear`` (``nn.Module.__getattr__``
    costs ~0.5 us a read, four reads a layer a step), as attributes for a subclass (which may define them otherwise)."""
    if type(module) is nn.Linear:
        params = module._parameters
        return params["weight"], params["bias"]
    return module.weight, module.bias


def _taped_forward(module: nn.Module, h: Tensor) -> tuple[Tensor, Tensor | None]:
    """``module(h)`` (its ``forward`` called directly, without its hooks: ``nn.Module.__call__`` costs ~8 us a
    module; a plain ``nn.Linear`` as ``F.linear``, its ``forward``) and what its backward needs besides its input and
    output: a TanhGELU's logistic factor when it takes its logistic form (:meth:`TanhGELU.forward_with_factor`, the
    same values as its ``forward``), else None."""
    if type(module) is TanhGELU:
        return module.forward_with_factor(h)
    if type(module) is nn.Linear:
        return F.linear(h, *_linear_parameters(module)), None
    return module.forward(h), None


def _run(layers: nn.Sequential, h: Tensor, records: Records) -> Tensor:
    """``layers(h)``, module by module, each module's record (:data:`Records`) appended to ``records``."""
    for module in layers:
        out, saved = _taped_forward(module, h)
        records.append((module, h, out, saved))
        h = out
    return h


@without_grad
def taped_particle_forward(parts: tuple[nn.Sequential, nn.Linear, nn.Sequential], weight: Tensor,
                           bias: Tensor | None, x: Tensor, network: ParticleNetwork | None = None
                           ) -> tuple[Tensor, Tape]:
    """Outputs ``(J, B, ...)`` of the network ``trunk -> stochastic layer -> above`` (``parts``) for the J
    particles ``weight``, ``bias`` on the inputs ``x`` ``(B, d)``, and the tape of :func:`psi_gradients`. Given the
    whole network as the particle kernel runs it (:class:`~lit_bayes.models.particle_kernel.ParticleNetwork`), in its
    kernel where that applies to ``x``; else as torch operations (the same values to the bit as
    :meth:`PartialBNN.particle_forward`)."""
    kernel = None if network is None else network.kernel(x, weight, bias)
    if kernel is not None:
        return network.forward(kernel, x, weight, bias), Tape([], [], weight, (network, kernel, x, bias))
    trunk, _, above = parts
    tape = Tape([], [], weight)
    h = _run(trunk, x, tape.trunk)  # once per batch
    top = _run(above, stochastic_linear(h, weight, bias).flatten(0, 1), tape.above)
    return top.reshape(h.shape[0], weight.shape[0], *top.shape[1:]).transpose(0, 1), tape


def _back(records: Records, grad: Tensor, grads: dict[Tensor, Tensor], input_grad: bool) -> Tensor | None:
    """Back through ``records`` from the gradient ``grad`` of the last output: the linear layers' parameter
    gradients into ``grads``, and the gradient of the first input when ``input_grad``."""
    for i, (module, x, y, saved) in enumerate(reversed(records)):
        if isinstance(module, nn.Linear):
            weight, bias = _linear_parameters(module)
            grads[weight] = grad.mT @ x
            if bias is not None:
                grads[bias] = grad.sum(0)
            if i == len(records) - 1 and not input_grad:
                return None
            grad = grad @ weight
        else:
            grad = ACTIVATION_BACKWARD[type(module)](module, grad, x, y, saved)
    return grad if input_grad else None


def _particles_of(tape: Tape, keep: Tensor) -> Tape:
    """``tape`` restricted to the particles ``keep`` (a (J,) mask): their rows of the upper layers' records
    (point-major, ``(B J, ...)``) and their weights."""
    num = tape.weight.shape[0]
    rows = lambda t: None if t is None else t.unflatten(0, (-1, num))[:, keep].flatten(0, 1)  # noqa: E731
    return Tape(tape.trunk, [(m, rows(x), rows(y), rows(saved)) for m, x, y, saved in tape.above], tape.weight[keep])


@without_grad
def psi_gradients(tape: Tape, grad_output: Tensor) -> dict[Tensor, Tensor]:
    """The gradients of the trunk's and the upper layers' linear parameters (psi), by parameter, given the
    gradient ``grad_output`` ``(J, B, ...)`` of a loss with respect to the outputs of the taped forward. A particle
    whose output gradients are all 0 (no weight in the loss) adds nothing, even where its activations or parameters
    are NaN or infinite (not 0 x NaN): the particle kernel skips it, and here, where a gradient comes out non-finite,
    it is computed again without the rows of such particles (a check of ~5 us a step, the second pass only then)."""
    if tape.fused is not None:
        network, kernel, x, bias = tape.fused
        return network.backward(kernel, x, tape.weight, bias, grad_output)
    grads = _torch_psi_gradients(tape, grad_output)
    if bool(torch.cat([g.flatten() for g in grads.values()]).isfinite().all()):
        return grads
    live = grad_output.flatten(1).ne(0).any(1)
    return grads if bool(live.all()) else _torch_psi_gradients(_particles_of(tape, live), grad_output[live])


def _torch_psi_gradients(tape: Tape, grad_output: Tensor) -> dict[Tensor, Tensor]:
    """:func:`psi_gradients` on the torch path, every particle's rows included."""
    num, points = grad_output.shape[:2]
    grads: dict[Tensor, Tensor] = {}
    grad = grad_output.transpose(0, 1).reshape(num * points, -1)  # the point-major rows of the layers above
    if tape.above:
        grad = _back(tape.above, grad, grads, True)
    if tape.trunk:
        grad_h = grad.reshape(points, -1) @ tape.weight.reshape(-1, tape.weight.shape[-1])  # sum_j G^j W^j
        _back(tape.trunk, grad_h, grads, False)
    return grads
