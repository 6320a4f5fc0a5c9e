"""The relu pre-activation draw of a whole layer in a few C calls (issue 26: the noisy-network Gibbs sweep).

:func:`lit_bayes.steppers.truncated_gaussian.propose_relu` is one round of a rejection sampler of the relu
pre-activation law (eq. 10, App. E.1) in ~15 torch passes over a layer's float64 temporaries, and the exact draw of
what it rejects another ~40 on the rejected elements: on Exp. A's sweep (2,084 x 10 pre-activations), about half of
the sweep's time. Here (``relu_draw.c``) a round of proposals is one loop over the elements, vectorised; the
rejected ones are proposed again, round after round, from a few more torch draws; and the few that still reject
(units whose proposals seldom land on their own side of 0) take the exact draw, the piece by its mass in log space
and the truncated normal by rejection, one element at a time.

The proposals' random numbers come from the sweep's ``torch.Generator``, the first round's in the order of
``propose_relu`` (the uniforms of every element, then the normals in the output's dtype): its candidates and
rejections are those of ``propose_relu`` to rounding (tested). The exact draw takes as many numbers as its rejection
loops need, from a counter-based generator (SplitMix64's outputs at positions of the element's own) keyed by one
64-bit draw of the torch generator, so a chain stays reproducible from its seed and resumes exactly. Rejection rounds
repeated until acceptance, then the exact draw for what is left, give the exact law whatever the number of rounds
(which depends only on past rejections). The C source is compiled once per dtype and machine
(:func:`lit_bayes.native.compiled`); where there is no compiler or the build fails, :func:`relu_draw_kernel` returns
None (logged once) and the torch path runs.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from lit_bayes.native import FLAGS, load_library

__all__ = ["RETRIES", "draw_relu_layer", "relu_draw_kernel"]

SOURCE = Path(__file__).with_name("relu_draw.c")
RETRIES = 4  # calls of further rounds, each with two normal-uniform pairs per pending element
REALS = {torch.float32: "float", torch.float64: "double"}


@functools.cache
def relu_draw_kernel(dtype: torch.dtype):
    """The C functions ``(relu_first_round, relu_retry, relu_exact)`` for ``dtype`` (float32 or float64), or None
    where they cannot be built or loaded (logged once)."""
    library = load_library(SOURCE, [[*FLAGS, f"-DREAL={REALS[dtype]}"]],
                           "the relu pre-activation draw runs in torch")
    if library is None:
        return None
    pointer, size, real = ctypes.c_void_p, ctypes.c_long, ctypes.c_double
    first, retry, exact = library.relu_first_round, library.relu_retry, library.relu_exact
    first.argtypes = [size, pointer, pointer, real, real, pointer, pointer, pointer, pointer]
    retry.argtypes = [size, pointer, pointer, pointer, real, real, size, pointer, pointer, pointer]
    exact.argtypes = [size, pointer, pointer, pointer, real, real, ctypes.c_uint64, pointer]
    first.restype = retry.restype = exact.restype = size
    return first, retry, exact


def draw_relu_layer(kernel, omega: Tensor, post: Tensor, delta_z: float, delta_x: float, generator: torch.Generator,
                    out: Tensor) -> Tensor:
    """The relu pre-activations with pre-activation means ``omega`` and post-activations ``post`` (contiguous, one
    dimension, ``out``'s dtype) into ``out``: a round of proposals on every element, up to ``RETRIES`` calls of
    further rounds on the rejected ones (stopping early where a call leaves over half of its elements pending), then
    the exact draw of what is left. Returns the indices of the elements it could not draw (int64, in order: NaN
    inputs), which the caller must draw; ``kernel`` from :func:`relu_draw_kernel`."""
    first, retry, exact = kernel
    count = out.numel()
    u = torch.rand(count, generator=generator, dtype=torch.float64)
    normal = torch.randn(count, generator=generator, dtype=out.dtype)
    pending = torch.empty(count, dtype=torch.int64)
    fixed = (omega.data_ptr(), post.data_ptr(), delta_z, delta_x)
    count = first(count, *fixed, u.data_ptr(), normal.data_ptr(), out.data_ptr(), pending.data_ptr())
    for _ in range(RETRIES):
        if not count:
            break
        draws = 2 * count
        u = torch.rand(draws, generator=generator, dtype=torch.float64)
        normal = torch.randn(draws, generator=generator, dtype=out.dtype)
        left = retry(count, pending.data_ptr(), *fixed, draws, u.data_ptr(), normal.data_ptr(), out.data_ptr())
        count, stuck = left, 2 * left > count
        if stuck:
            break
    if count:
        key = int(torch.randint(-(2**63), 2**63 - 1, (), generator=generator, dtype=torch.int64)) % 2**64
        count = exact(count, pending.data_ptr(), *fixed, key, out.data_ptr())
    return pending[:count]
