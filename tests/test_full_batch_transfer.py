"""A full training batch, which comes back as the same unmodified tensors every step, goes to the
accelerator once and is checked once; anything else is moved and checked every time."""
from __future__ import annotations

import subprocess
import sys

import lightning as L
import pytest
import torch
from torch import nn

from lit_bayes import SGMCMC, Gaussian

META = torch.device("meta")  # an accelerator stand-in: .to("meta") makes a new tensor without copying data


def training_module() -> SGMCMC:
    module = SGMCMC(nn.Linear(3, 1), Gaussian(1.0), stepper="sgld", step_size=1e-3, num_chains=2, seed=0)
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.training = True
    module.trainer = trainer
    return module


def test_the_same_unmodified_training_batch_moves_once():
    module = training_module()
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    first = module.transfer_batch_to_device((x, y), META, 0)
    again = module.transfer_batch_to_device((x, y), META, 0)
    assert isinstance(again, tuple) and all(a is b for a, b in zip(first, again))
    assert first[0].device == META and first[0].shape == x.shape
    x.mul_(2.0)  # modified in place: moved again
    changed = module.transfer_batch_to_device([x, y], META, 0)
    assert isinstance(changed, list) and changed[0] is not first[0]
    other = module.transfer_batch_to_device((x.clone(), y), META, 0)  # another tensor
    assert other[0] is not changed[0]
    module.teardown("fit")  # frees the kept copy
    assert module.transfer_batch_to_device([x, y], META, 0)[0] is not changed[0]


def test_batches_outside_training_move_every_time():
    module = training_module()
    module.trainer.training = False
    module.trainer.validating = True
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    first, again = (module.transfer_batch_to_device((x, y), META, 0) for _ in range(2))
    assert first[0] is not again[0]


def test_an_unchanged_batch_is_checked_once_and_a_modified_one_again(monkeypatch):
    module = SGMCMC(nn.Linear(3, 1), Gaussian(1.0), stepper="sgld", step_size=1e-3, num_chains=2, seed=0)
    checks = []
    monkeypatch.setattr(module.likelihood, "check_target", lambda y, name: checks.append(name))
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    for _ in range(3):
        module.check_batch((x, y))
    assert len(checks) == 1
    x[0, 0] = float("nan")  # in place: the check runs again and catches it
    with pytest.raises(ValueError, match="NaN or infinite"):
        module.check_batch((x, y))
    with pytest.raises(ValueError, match="NaN or infinite"):  # a failed check is not kept
        module.check_batch((x, y))


FIT_WITH_A_DATAMODULE = """
import lightning as L
from torch import nn
from lit_bayes import SGMCMC, Gaussian
from lit_bayes.data import LinearRegression
trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, limit_val_batches=0)
module = SGMCMC(nn.Linear(3, 1), Gaussian(1.0), stepper="sgld", step_size=1e-3, num_chains=2, seed=0)
trainer.fit(module, datamodule=LinearRegression(num_train=16, num_val=4, num_test=4, batch_size=None))
print("fitted")
"""


def test_fitting_with_a_datamodule_does_not_warn_about_the_overridden_hook(tmp_path):
    """Lightning notes that a module overriding ``transfer_batch_to_device`` leaves a DataModule's hook unused;
    the override is the library's own, so the note is not shown (a fresh process, every warning shown)."""
    result = subprocess.run([sys.executable, "-W", "default", "-c", FIT_WITH_A_DATAMODULE], cwd=tmp_path,
                            capture_output=True, text=True, check=True)
    assert "fitted" in result.stdout and "transfer_batch_to_device" not in result.stderr
