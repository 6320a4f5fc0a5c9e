"""RunCheckpoint: a full-batch run is not checkpointed at every sweep, and its end always is."""
import os

import lightning as L
import pytest
import torch
from torch import nn

from lit_bayes import SGMCMC, Gaussian, GaussianPrior
from lit_bayes.callbacks import RunCheckpoint
from lit_bayes.cli import last_checkpoint
from lit_bayes.data import LinearRegression


def written_steps(tmp_path, steps=50, **options):
    """Fit a full-batch sampler (one step per epoch) and list the steps of the checkpoints written."""
    checkpoint = RunCheckpoint(dirpath=tmp_path, filename="{step}", save_top_k=-1, save_last=True, **options)
    sampler = SGMCMC(nn.Linear(3, 1), Gaussian(noise_std=1.0), GaussianPrior(1.0), step_size=1e-3, num_chains=2)
    L.Trainer(max_epochs=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
              limit_val_batches=0, callbacks=[checkpoint], default_root_dir=tmp_path).fit(
        sampler, datamodule=LinearRegression(num_train=20, num_val=5, num_test=5, batch_size=None, seed=0))
    assert (tmp_path / "last.ckpt").exists()
    assert torch.load(tmp_path / "last.ckpt", weights_only=False)["global_step"] == steps
    return sorted(int(path.stem.split("=")[1]) for path in tmp_path.glob("step=*.ckpt"))


def test_throttled_by_steps_and_the_end_always_written(tmp_path):
    assert written_steps(tmp_path, min_steps=20, min_seconds=None) == [20, 40, 50]


def test_without_triggers_only_the_end_is_written(tmp_path):
    assert written_steps(tmp_path, min_steps=None, min_seconds=None) == [50]


def test_time_trigger_writes_every_epoch_once_due(tmp_path):
    assert written_steps(tmp_path, steps=5, min_steps=None, min_seconds=1e-9) == [1, 2, 3, 4, 5]


def test_lightning_triggers_turn_the_throttle_off(tmp_path):
    assert written_steps(tmp_path, every_n_epochs=10) == [10, 20, 30, 40, 50]


@pytest.mark.parametrize("options, message", [
    ({"min_steps": 0}, "min_steps must be an integer >= 1"),
    ({"min_seconds": -1.0}, "min_seconds must be a finite number > 0"),
])
def test_bad_intervals(options, message):
    with pytest.raises(ValueError, match=message):
        RunCheckpoint(**options)


def test_a_monitor_turns_the_throttle_off():
    assert not RunCheckpoint(monitor="val/nlpd").throttled and RunCheckpoint().throttled


def test_resume_takes_a_numbered_checkpoint_written_after_last_ckpt(tmp_path):
    """A kill between the numbered write and ``last.ckpt``'s leaves ``last.ckpt`` a write behind;
    ``--resume`` continues from the checkpoint with more steps, and from ``last.ckpt`` on equal steps, whatever
    the files' times; an unreadable file comes last."""
    folder = tmp_path / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    last, numbered = folder / "last.ckpt", folder / "epoch=3749-step=75000.ckpt"
    torch.save({"global_step": 70_000}, last)
    torch.save({"global_step": 75_000}, numbered)
    os.utime(numbered, (1000, 1000))  # the older file holds more steps
    assert last_checkpoint(tmp_path) == numbered
    torch.save({"global_step": 75_000}, last)
    os.utime(last, (500, 500))
    assert last_checkpoint(tmp_path) == last
    (folder / "truncated.ckpt").write_bytes(b"PK")
    assert last_checkpoint(tmp_path) == last
    assert last_checkpoint(tmp_path / "version_1") is None
