"""The CPU predictive of an MLP classifier fused above its first layer's products (FNBG Eq. 3.5).

In eager torch, :func:`lit_bayes.predictive.marginal_predictive` spends about as long on the small layers above an
MLP's first product, the softmax and the average over samples as on the product itself: every one of them is a
pass over a (chunk, width, tile) tensor. Here the first layer stays one torch product of the chunk's stacked weights
with the tile's inputs; everything above it, up to the chunk's sums sum_s w_s p_s(c) and sum_s w_s H_s, is one C
loop (``predictive_kernel.c``) that keeps a point's activations in registers, 16 points per vector with AVX-512 and
8 without. The sums are in probability space, float32 within the chunk and float64 across chunks; the points where
a class's predictive falls below ``UNDERFLOW`` (probabilities that float32 flushes to 0 would count) are
recomputed by the eager path in log space.

The kernel runs on scaled pre-activations t = gamma g with the activation's constants folded into the samples'
weights (:func:`folded_parameters`), so that a sigmoid or tanh unit costs one base-2 exponential, one add and one
division, r = 1 / (1 + 2^t): sigma(g) with gamma = -log2 e, and tanh(g) = 1 - 2 r with gamma = 2 log2 e, the
1 - 2 r going into the next layer's weights and biases; a ReLU unit is max(t, 0) with gamma = log2 e. The logits
come scaled by log2 e, and the softmax is in base 2.

The C source is compiled once per network shape and machine (:func:`lit_bayes.native.compiled`: the system's C
compiler, a cache folder keyed on the source, the flags and the processor; about a second). It runs in
``torch.get_num_threads()`` OpenMP threads: built with ``-fopenmp``, the library takes the OpenMP runtime torch has
already loaded (the same ``libgomp.so.1``), whose threads are still awake from the first layer's product (threads
of its own would wait for those to stop spinning: with two threads, no faster than one). Where there is no
compiler or the build fails, :func:`fused_tile_kernel` returns None (logged once) and the predictive takes its eager
path: the two agree to float32 rounding (tested).

It applies to float32 CPU inputs and samples of a linear stack with biases and one kind of activation (sigmoid,
tanh or ReLU), every layer at most ``MAX_WIDTH`` wide, and a ``Categorical`` likelihood without parameters.
"""
from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import torch
from torch import Tensor, nn

from lit_bayes.native import FLAGS, load_library
from lit_bayes.posterior import Categorical

__all__ = ["FusedPredictive", "folded_parameters", "fused_tile_kernel"]

SOURCE = Path(__file__).with_name("predictive_kernel.c")
MAX_WIDTH = 64  # widest layer compiled: the kernel keeps a (width, 2 vectors of 8 or 16 points) buffer on the stack
LOG2E = 1.0 / math.log(2.0)
LOGISTIC, RELU = 0, 1  # the C source's ACT_LOGISTIC, ACT_RELU
# activation -> (kernel code, gamma: t = gamma g, alpha and beta: the activation is alpha + beta r of the kernel's r)
FOLDINGS = {nn.Sigmoid: (LOGISTIC, -LOG2E, 0.0, 1.0), nn.Tanh: (LOGISTIC, 2.0 * LOG2E, 1.0, -2.0),
            nn.ReLU: (RELU, LOG2E, 0.0, 1.0 / LOG2E)}
# the kernel sums probabilities in float32, class probabilities below 2^-126 flushed to 0: sum_s w_s p_s(c) is off
# by at most ~2^-126 absolute, so a point with a class below 2^-100 (relative error up to 1.5e-8) is recomputed
UNDERFLOW = 2.0**-100


def folded_parameters(weights: list[Tensor], biases: list[Tensor], activation: type[nn.Module]) -> tuple[float, Tensor]:
    """The kernel's parameters of the samples' layers ``weights`` ``(S, K_j, K_{j-1})`` and ``biases`` ``(S, K_j)``
    with ``activation`` (a key of ``FOLDINGS``) between them: gamma_1, the scale of the first layer's products, and
    per sample the row of gamma_1 b_1, then W'_j = gamma_j beta W_j (row-major) and
    b'_j = gamma_j (b_j + alpha W_j 1) for j = 2..L (gamma_j = gamma of the activation below the logits, log2 e for
    them), so that t_j = W'_j r_{j-1} + b'_j = gamma_j g_j. Folded in float64, rounded to float32 once."""
    _, gamma, alpha, beta = FOLDINGS[activation]
    scales = [gamma] * (len(weights) - 1) + [LOG2E]
    parts = [scales[0] * biases[0].double()]
    for scale, weight, bias in zip(scales[1:], weights[1:], biases[1:]):
        weight = weight.double()
        parts += [(scale * beta * weight).flatten(1), scale * (bias.double() + alpha * weight.sum(-1))]
    return scales[0], torch.cat(parts, dim=1).float().contiguous()


@functools.cache
def fused_tile_kernel(widths: tuple[int, ...], activation: int):
    """The C function ``predictive_chunk`` for layers of ``widths`` (K_1..K_L) with ``activation`` (``LOGISTIC``
    or ``RELU``) between them, or None where it cannot be built or loaded (logged once). Built with OpenMP
    (``-fopenmp``), else without (one thread) where the compiler has none."""
    defines = [f"-DLAYERS={len(widths)}", f"-DWIDTHS={','.join(map(str, widths))}", f"-DMAX_WIDTH={max(widths)}",
               f"-DACTIVATION={activation}"]
    library = load_library(SOURCE, [[*FLAGS, "-fopenmp", *defines], [*FLAGS, *defines]],
                           "the posterior predictive runs in eager torch")
    if library is None:
        return None
    function = library.predictive_chunk
    pointer, size = ctypes.c_void_p, ctypes.c_long
    function.argtypes = [pointer, ctypes.c_float, pointer, size, size, size, pointer, pointer, pointer, ctypes.c_int]
    function.restype = None
    return function


class FusedPredictive:
    """The fused predictive of one sampler's samples: :meth:`of` says whether it applies, :meth:`tile` gives a
    tile's ``log sum_s w_s p_s(c)`` ``(B, C)`` and ``sum_s w_s H_s`` ``(B,)``, what the eager path accumulates
    chunk by chunk in log space, and the points to recompute there (``UNDERFLOW``)."""

    def __init__(self, kernel, first: Tensor, scale: float, tail: Tensor, widths: tuple[int, ...]) -> None:
        self.kernel = kernel  # fused_tile_kernel of the network's shape
        self.first = first  # (S, K_1, K_0): the first layer's weights
        self.scale = scale  # gamma_1: the kernel's t_1 = scale * W_1 x + b'_1
        self.tail = tail  # (S, tail size): b'_1, then W'_j and b'_j of every later layer, per sample (folded)
        self.widths = widths  # K_1..K_L

    @classmethod
    def of(cls, sampler, samples: dict[str, Tensor], x: Tensor) -> FusedPredictive | None:
        """The fused path for ``sampler``'s ``samples`` on inputs like ``x``, or None where it does not apply
        (see the module docstring) or the kernel is not available."""
        likelihood = sampler.likelihood
        if type(likelihood) is not Categorical or any(True for _ in likelihood.parameters()):
            return None
        if x.device.type != "cpu" or x.dtype != torch.float32:
            return None
        stack = sampler.outputs_stack()
        if stack is None or not stack.accepts(x):
            return None
        kinds = {type(a) for a in stack.activations}
        if len(kinds) > 1 or not kinds <= FOLDINGS.keys():
            return None
        net, _ = sampler.split_parameters(samples)
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in net.values()):
            return None
        weights = [net[w] for w, _ in stack.names]
        widths = tuple(w.shape[1] for w in weights)
        if max(widths) > MAX_WIDTH or widths[-1] != likelihood.num_classes:
            return None
        if any(b is None for _, b in stack.names):
            return None
        activation = kinds.pop() if kinds else nn.Sigmoid  # one layer: no activation, only the logits' scale
        kernel = fused_tile_kernel(widths, FOLDINGS[activation][0])
        if kernel is None:
            return None
        scale, tail = folded_parameters(weights, [net[b] for _, b in stack.names], activation)
        return cls(kernel, weights[0], scale, tail, widths)

    def tile(self, x: Tensor, log_weights: Tensor, chunk_size: int) -> tuple[Tensor, Tensor, Tensor]:
        """``(log sum_s w_s p_s, sum_s w_s H_s, underflow)`` of the points ``x`` ``(B, K_0)``, ``chunk_size`` samples
        at a time (one product of the chunk's first-layer weights with ``x``, then the kernel in
        ``torch.get_num_threads()`` threads); ``underflow`` (B,) marks the points with a class
        probability below ``UNDERFLOW``, whose sums are not exact in float32's normal range."""
        x = x.flatten(1) if x.dim() > 2 else x
        points, classes, num = x.shape[0], self.widths[-1], self.first.shape[0]
        inputs_t = x.T
        weights = log_weights.to(x.device, torch.float64).exp().float()  # normalised, as the eager path's
        probs = torch.zeros(classes, points, dtype=torch.float64)
        entropy = torch.zeros(points, dtype=torch.float64)
        chunk_probs, chunk_entropy = torch.empty(classes, points), torch.empty(points)
        products = torch.empty(min(chunk_size, num) * self.widths[0], points)  # one buffer: no page faults a chunk
        for start in range(0, num, chunk_size):
            stop = min(start + chunk_size, num)
            first = products[: (stop - start) * self.widths[0]]
            torch.mm(self.first[start:stop].reshape((stop - start) * self.widths[0], -1), inputs_t, out=first)
            self.kernel(first.data_ptr(), self.scale, self.tail[start:stop].data_ptr(), stop - start, points,
                        self.tail.shape[1], weights[start:].data_ptr(), chunk_probs.data_ptr(),
                        chunk_entropy.data_ptr(), torch.get_num_threads())
            probs += chunk_probs
            entropy += chunk_entropy
        underflow = (probs < UNDERFLOW).any(0)
        return probs.log().float().T, entropy.float(), underflow
