"""A partial BNN's network for J particles of its stochastic linear layer, forward and backward in one C call each
(issue 26: the OHSMC step).

OHSMC's step (Feynman-Kac spec Algorithm 3) evaluates the network for J particles of the stochastic layer on a
batch and then takes psi's gradient of the weighted log-likelihood (Eqs. 5-6). With the hand-written backward of
:mod:`lit_bayes.models.sequential_backprop` that is ~55 small torch operations (at J = 100, B = 20 and the moons
network's widths 100, 20, 5 and 1: ~2,000 rows of five values above the stochastic layer), each costing more in
dispatch than in arithmetic. Here (``particle_kernel.c``) the forward, the outputs ``(J, B, K_L)``, is one C call,
and the backward, the gradients of every psi layer's weight and bias, another; the points go LANES to a vector
(8 float64 or 16 float32 with AVX-512, half that without), the trunk once per point, the layers from the stochastic
one up once per particle and point.

The exponentials are a polynomial of the kernel's own, so the results are not those of torch's kernels to the bit:
they agree to ~1e-15 relative in float64 and ~1e-6 in float32 (tested against the torch path). The C source is
compiled once per shape, dtype and machine (:func:`lit_bayes.native.compiled`); where there is no compiler or the
build fails, :meth:`ParticleNetwork.kernel` returns None (logged once) and the torch path runs.

It applies to an ``nn.Sequential`` of plain ``nn.Linear`` layers (a subclass may change its forward) with at most one
activation between two of them (none: the identity) and none before the first or after the last, the stochastic
layer one of the linear layers; the activations ReLU, Tanh, Sigmoid, Identity and the tanh GELU (``TanhGELU`` or
``nn.GELU(approximate="tanh")``); every width at most ``MAX_WIDTH``; float32 or float64 on the CPU; one thread.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor, nn

from lit_bayes.models.activations import TanhGELU
from lit_bayes.native import FLAGS, load_library

__all__ = ["MAX_WIDTH", "ParticleNetwork", "particle_network_kernel"]

SOURCE = Path(__file__).with_name("particle_kernel.c")
MAX_WIDTH = 128  # widest layer compiled: the kernel keeps a few (layers, width) arrays of vectors on the stack
IDENTITY, RELU, TANH, SIGMOID, GELU_TANH = range(5)  # the C source's ACT_*
CODES = {nn.Identity: IDENTITY, nn.ReLU: RELU, nn.Tanh: TANH, nn.Sigmoid: SIGMOID}


def activation_code(module: nn.Module) -> int | None:
    """The kernel's code of the activation ``module``, None where the kernel has none (the erf GELU among them)."""
    if type(module) in (nn.GELU, TanhGELU):
        return GELU_TANH if module.approximate == "tanh" else None
    return CODES.get(type(module))


@functools.cache
def particle_network_kernel(double: bool, width_in: int, widths: tuple[int, ...], activations: tuple[int, ...],
                            stochastic: int):
    """The C functions ``(particle_network_forward, particle_network_backward)`` for float64 (``double``) or
    float32, inputs of ``width_in``, linear layers of ``widths``, ``activations`` (the code after each but the last)
    and the layer ``stochastic`` the particles', or None where they cannot be built or loaded (logged once)."""
    defines = [f"-DDOUBLE={int(double)}", f"-DINPUT={width_in}", f"-DLAYERS={len(widths)}",
               f"-DWIDTHS={','.join(map(str, widths))}", f"-DACTS={','.join(map(str, (*activations, IDENTITY)))}",
               f"-DSTOCHASTIC={stochastic}", f"-DMAX_WIDTH={max(width_in, *widths)}"]
    library = load_library(SOURCE, [[*FLAGS, *defines]], "the OHSMC step's network runs in torch")
    if library is None:
        return None
    pointer, size = ctypes.c_void_p, ctypes.c_long
    forward, backward = library.particle_network_forward, library.particle_network_backward
    forward.argtypes = [size, size, pointer, pointer, pointer, pointer, pointer]
    backward.argtypes = [size, size, pointer, pointer, pointer, pointer, pointer, pointer]
    forward.restype = backward.restype = ctypes.c_int
    return forward, backward


def _pointers(tensors: list[Tensor | None]) -> ctypes.Array:
    return (ctypes.c_void_p * len(tensors))(*[None if t is None else t.data_ptr() for t in tensors])


class ParticleNetwork:
    """An ``nn.Sequential`` with a stochastic linear layer as the kernel runs it: :meth:`of` says whether its shape
    applies, :meth:`kernel` whether the kernel is built for a dtype, :meth:`forward` and :meth:`backward` run it."""

    def __init__(self, linears: list[nn.Linear], activations: tuple[int, ...], stochastic: int) -> None:
        self.linears = linears  # the network's linear layers, in order
        self.activations = activations  # the kernel's code of the activation after each linear layer but the last
        self.stochastic = stochastic  # the particles' layer, an index into linears (its own parameters are unused)
        self.widths = tuple(m.out_features for m in linears)

    @classmethod
    def of(cls, net: nn.Sequential, stochastic: nn.Module) -> ParticleNetwork | None:
        """``net`` with the particles' layer ``stochastic`` (one of its modules), or None where the kernel does not
        apply to its shape (the module docstring)."""
        linears, activations, pending = [], [], None
        for module in net:
            if type(module) is nn.Linear:
                if linears:
                    activations.append(IDENTITY if pending is None else pending)
                elif pending is not None:  # an activation on the inputs
                    return None
                linears.append(module)
                pending = None
            elif pending is None and activation_code(module) is not None:
                pending = activation_code(module)
            else:  # an unknown module, two activations in a row or a subclass of nn.Linear
                return None
        if pending is not None or not any(m is stochastic for m in linears):  # an activation on the outputs
            return None
        network = cls(linears, tuple(activations), next(i for i, m in enumerate(linears) if m is stochastic))
        return network if max(linears[0].in_features, *network.widths) <= MAX_WIDTH else None

    def parameters(self) -> list[Tensor | None]:
        """W_l, b_l of every linear layer, None for the stochastic layer's and a missing bias, read now (``.to`` may
        have replaced them)."""
        return [None if i == self.stochastic else p for i, m in enumerate(self.linears)
                for p in (m._parameters["weight"], m._parameters["bias"])]

    def kernel(self, x: Tensor, weight: Tensor, bias: Tensor | None):
        """The kernel's functions for the inputs ``x`` ``(B, d)`` and the particles' ``weight`` and ``bias``, or None
        where it does not apply to them (not float32 or float64 on the CPU, dtypes that differ, shapes the layers do
        not take, no points: the torch path then runs, and raises where the shapes are wrong) or is not built."""
        dtype, layer = x.dtype, self.linears[self.stochastic]
        if dtype not in (torch.float32, torch.float64) or not x.is_cpu or weight.dtype != dtype:
            return None
        if x.dim() != 2 or x.shape[0] == 0 or x.shape[1] != self.linears[0].in_features:
            return None
        if weight.dim() != 3 or weight.shape[1:] != (layer.out_features, layer.in_features):
            return None
        if bias is not None and (bias.dtype != dtype or bias.shape != (weight.shape[0], layer.out_features)):
            return None
        if any(p is not None and (p.dtype != dtype or not p.is_cpu or not p.is_contiguous())
               for p in self.parameters()):
            return None
        return particle_network_kernel(dtype == torch.float64, x.shape[1], self.widths, self.activations,
                                       self.stochastic)

    def forward(self, kernel, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """Outputs ``(J, B, K_L)`` of the particles ``weight`` ``(J, K_S, in)``, ``bias`` ``(J, K_S)`` or None on the
        inputs ``x`` ``(B, d)``, with ``kernel`` from :meth:`kernel`."""
        x, weight = x.contiguous(), weight.contiguous()
        bias = None if bias is None else bias.contiguous()
        out = x.new_empty(weight.shape[0], x.shape[0], self.widths[-1])
        status = kernel[0](x.shape[0], weight.shape[0], x.data_ptr(), weight.data_ptr(),
                           None if bias is None else bias.data_ptr(), _pointers(self.parameters()), out.data_ptr())
        if status != 0:
            raise MemoryError("the particle kernel's forward could not allocate its buffers")
        return out

    def backward(self, kernel, x: Tensor, weight: Tensor, bias: Tensor | None,
                 grad_output: Tensor) -> dict[Tensor, Tensor]:
        """The gradients of psi's parameters (by parameter) for the gradient ``grad_output`` ``(J, B, K_L)`` of a
        loss with respect to :meth:`forward`'s outputs."""
        shape = (weight.shape[0], x.shape[0], self.widths[-1])
        if grad_output.shape != shape or grad_output.dtype != x.dtype:
            raise ValueError(f"grad_output must be of the outputs' shape {shape} and dtype {x.dtype}, got "
                             f"{tuple(grad_output.shape)} and {grad_output.dtype}")
        x, weight, grad_output = x.contiguous(), weight.contiguous(), grad_output.contiguous()
        bias = None if bias is None else bias.contiguous()
        params = self.parameters()
        grads = [None if p is None else torch.empty_like(p, memory_format=torch.contiguous_format) for p in params]
        status = kernel[1](x.shape[0], weight.shape[0], x.data_ptr(), weight.data_ptr(),
                           None if bias is None else bias.data_ptr(), _pointers(params), grad_output.data_ptr(),
                           _pointers(grads))
        if status != 0:
            raise MemoryError("the particle kernel's backward could not allocate its buffers")
        return {p: g for p, g in zip(params, grads) if p is not None}
