"""lit_bayes.cuda_probe: Lightning's NVML-based CUDA check is switched off only where NVML cannot be loaded."""
import ctypes

import pytest
import torch

from lit_bayes import cuda_probe


@pytest.fixture
def nvml_check(monkeypatch):
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    monkeypatch.setattr(cuda_probe.sys, "platform", "linux")
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    return monkeypatch


def test_unset_when_nvml_cannot_be_loaded(nvml_check):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    nvml_check.setattr(cuda_probe.ctypes, "CDLL", missing)
    assert cuda_probe.skip_nvml_probe_without_driver() is True
    assert "PYTORCH_NVML_BASED_CUDA_CHECK" not in cuda_probe.os.environ


def test_kept_when_nvml_loads(nvml_check):
    nvml_check.setattr(cuda_probe.ctypes, "CDLL", lambda name: object())
    assert cuda_probe.skip_nvml_probe_without_driver() is False
    assert cuda_probe.os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"


def test_kept_for_a_cpu_build_of_torch(nvml_check):
    nvml_check.setattr(torch.backends.cuda, "is_built", lambda: False)
    assert cuda_probe.skip_nvml_probe_without_driver() is False
    assert cuda_probe.os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"


def test_applied_on_import_on_this_machine():
    """Importing lit_bayes (which imports Lightning, which sets the variable) leaves it unset
    exactly when this machine's torch is a CUDA build without a loadable NVML."""
    try:
        ctypes.CDLL(cuda_probe.NVML_LIBRARY)
        loadable = True
    except OSError:
        loadable = False
    expected_unset = torch.backends.cuda.is_built() and not loadable
    assert ("PYTORCH_NVML_BASED_CUDA_CHECK" not in cuda_probe.os.environ) == expected_unset
