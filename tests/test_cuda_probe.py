"""lit_bayes.cuda_probe: Lightning's NVML-based CUDA check is switched off only where NVML cannot be loaded."""
import ctypes
import os

import lightning as L
import pytest
import torch
from torch import nn

from lit_bayes import Gaussian, SGMCMC, cuda_probe
from lit_bayes.data import LinearRegression


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


def test_applied_while_a_sampler_runs_on_this_machine(nvml_check, tmp_path):
    """Importing lit_bayes leaves the variable as Lightning set it; while a sampler fits, it is unset
    exactly when this machine's torch is a CUDA build without a loadable NVML, and set again after."""
    try:
        ctypes.CDLL(cuda_probe.NVML_LIBRARY)
        loadable = True
    except OSError:
        loadable = False
    expected_unset = torch.backends.cuda.is_built() and not loadable
    seen = []

    class Record(L.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.append("PYTORCH_NVML_BASED_CUDA_CHECK" not in os.environ)

    sampler = SGMCMC(nn.Linear(3, 1), Gaussian(), stepper="sgld", step_size=1e-3)
    data = LinearRegression(num_train=8, num_val=4, num_test=4, batch_size=4)
    L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, limit_val_batches=0, callbacks=[Record()], default_root_dir=tmp_path).fit(sampler, datamodule=data)
    assert seen == [expected_unset]
    assert os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"
