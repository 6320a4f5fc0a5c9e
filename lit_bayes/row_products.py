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
"""
from __future__ import annotations

import functools
import platform
from pathlib import Path

import torch
from torch import Tensor

__all__ = ["cpu_vendor", "row_products", "transposed_is_faster"]

VENDORS = ("AuthenticAMD", "GenuineIntel")


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
