"""Keep torch's per-step CUDA probe cheap on machines without an NVIDIA driver.

Lightning sets ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` when imported, so that counting GPUs goes
through NVML and never initialises CUDA before DataLoader workers fork. torch's optimisers
ask whether an accelerator is available on every ``step()`` (their CUDA-graph capture check),
and with a CUDA build of torch that question tries to load NVML each time; where the driver's
``libnvidia-ml`` is missing, every step pays a failed ``dlopen`` and its fallback (~0.1 ms on
the 2-core CPU machines, a tenth of an OHSMC step). Without that library there is no NVIDIA
GPU and no CUDA context to poison a fork, so the NVML route is switched off there; machines
with a driver keep Lightning's setting. Samplers switch it off while they are set up
(``SamplerModule.setup``) and back on at ``teardown``; importing lit_bayes changes nothing.
"""
from __future__ import annotations

import ctypes
import os
import sys

import torch

__all__ = ["restore_nvml_probe", "skip_nvml_probe_without_driver"]

NVML_LIBRARY = "libnvidia-ml.so.1"


def skip_nvml_probe_without_driver() -> bool:
    """Unset ``PYTORCH_NVML_BASED_CUDA_CHECK`` when torch is a CUDA build on Linux and NVML
    cannot be loaded. Returns whether it was unset."""
    if (os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") != "1" or not sys.platform.startswith("linux")
            or not torch.backends.cuda.is_built()):
        return False
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        del os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"]
        return True
    return False


def restore_nvml_probe() -> None:
    """Set ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` again, as Lightning left it, after
    :func:`skip_nvml_probe_without_driver` unset it."""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
