"""Row products ``rows @ weight^T`` for many rows (a whole training set), in the orientation the CPU runs faster.

The product of n rows ``(…, n, d)`` with a small weight ``(…, k, d)`` can be computed as ``rows @ weight^T``
or as ``(weight @ rows^T)^T``, the n rows then on the long output axis. Which is faster depends on the BLAS
kernels torch's MKL picks for the processor, measured side by side on one thread (float32):

- AMD EPYC (Zen3, AVX2): the transposed form, several times faster for the noisy-Gibbs first layer (measured
  in an earlier session, when the sampler's products were written that way);
- Intel Xeon (AVX-512): the plain form, 1.9x faster for the MNIST first layer (60,000 x 784 rows, k = 12:
  43 against 81 ms), and faster for every smaller layer measured.

The choice is made from the processor's vendor, not timed at run time, so a run and its resumed
continuation on the same machine compute with the same summation order (the two forms may differ in the last
bits). Other devices and processors use the plain form.

:class:`FixedOperand` holds a large matrix that many products reuse (the training inputs, the first layer's
projector). On an AMD processor in float32 it keeps the matrix in oneDNN's layout, converted once, and
multiplies through oneDNN, whose kernels do not depend on the vendor: on the 2-core AMD EPYC (Zen3, AVX2), one
thread, MKL ran the MNIST first layer's 60,000 x 784 by 12 product in 78-92 ms (~14 GFLOP/s, either
orientation) and oneDNN (``torch._C._nn.mkldnn_linear``, what ``torch.utils.mkldnn``'s linear layer calls) in
47-51 ms; the MNIST-MLP noisy Gibbs sweep took 2.65-3.05 plain forward-equivalents against 3.39-3.53 with the
dense products, interleaved in one run (2026-11-29). For small matrices oneDNN's conversions cost more than they
save (the Exp. A sweep, 2,084 x 50 and 8,000 x 50 inputs: 3-10 % slower), so it is used from
``ONEDNN_MIN_ELEMENTS`` elements on. The oneDNN copy costs the matrix's size again in memory where the caller
keeps the dense matrix too (the training inputs); the first layer's projector is kept in oneDNN's layout only.
"""
from __future__ import annotations

import functools
import platform
from pathlib import Path

import torch
from torch import Tensor

__all__ = ["FixedOperand", "cpu_vendor", "onednn_is_faster", "row_products", "transposed_is_faster"]

VENDORS = ("AuthenticAMD", "GenuineIntel")
ONEDNN_MIN_ELEMENTS = 1 << 22  # 16 MB of float32: far beyond a core's cache share


@functools.cache
def cpu_vendor() -> str:
    """``"AuthenticAMD"``, ``"GenuineIntel"`` or ``""`` (another or unknown processor)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = platform.processor()
    return next((vendor for vendor in VENDORS if vendor in text), "")


def transposed_is_faster(device: torch.device) -> bool:
    """Whether :func:`row_products` on ``device`` takes the transposed form (MKL on an AMD processor)."""
    return device.type == "cpu" and cpu_vendor() == "AuthenticAMD" and torch.backends.mkl.is_available()


def row_products(weight: Tensor, rows: Tensor) -> Tensor:
    """``rows @ weight^T``, shape ``(…, n, k)``, from ``weight`` ``(…, k, d)`` and ``rows`` ``(…, n, d)``."""
    if transposed_is_faster(rows.device):
        return (weight @ rows.mT).mT
    return rows @ weight.mT


def onednn_is_faster(matrix: Tensor) -> bool:
    """Whether :class:`FixedOperand` multiplies ``matrix`` through oneDNN: float32, at least
    ``ONEDNN_MIN_ELEMENTS`` elements, on an AMD processor, with oneDNN."""
    return (matrix.device.type == "cpu" and matrix.dtype == torch.float32 and matrix.numel() >= ONEDNN_MIN_ELEMENTS
            and cpu_vendor() == "AuthenticAMD" and torch.backends.mkldnn.is_available())


class FixedOperand:
    """A matrix M ``(m, d)`` that many products with small matrices reuse, in the layout and library that
    multiply it fastest here (see the module docstring): :meth:`rows_times` gives M W^T, :meth:`times_rows`
    A M^T. Through oneDNN only M's oneDNN copy is kept, so the caller holds the dense M if it needs it."""

    def __init__(self, matrix: Tensor) -> None:
        if matrix.dim() != 2:
            raise ValueError(f"matrix must be 2-D, got shape {tuple(matrix.shape)}")
        self.shape = matrix.shape
        self._onednn = matrix.contiguous().to_mkldnn() if onednn_is_faster(matrix) else None
        self._dense = matrix if self._onednn is None else None

    def rows_times(self, weight: Tensor) -> Tensor:
        """M W^T, shape ``(…, m, k)``, for ``weight`` ``(…, k, d)``."""
        if self._onednn is None:
            return row_products(weight, self._dense)
        flat = weight.reshape(-1, weight.shape[-1]).contiguous().to_mkldnn()
        product = torch._C._nn.mkldnn_linear(self._onednn, flat, None).to_dense()  # (m, … k)
        return product.view(self.shape[0], *weight.shape[:-1]).movedim(0, -2)

    def times_rows(self, rows: Tensor) -> Tensor:
        """A M^T, shape ``(…, k, m)``, for ``rows`` A ``(…, k, d)``."""
        if self._onednn is None:
            return rows @ self._dense.mT
        flat = rows.reshape(-1, rows.shape[-1]).contiguous().to_mkldnn()
        product = torch._C._nn.mkldnn_linear(flat, self._onednn, None).to_dense()  # (… k, m)
        return product.view(*rows.shape[:-1], self.shape[0])
