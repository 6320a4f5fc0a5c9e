"""``RunCheckpoint``: Lightning's ``ModelCheckpoint`` that does not write at every epoch of a
full-batch run.

With one batch per epoch (full-batch HMC, NoisyGibbs, FNBG), "every epoch" is every sweep: a
run of thousands of sweeps writes thousands of checkpoints of all chains (13 MB each for FNBG on
4,000 MNIST images). By default this callback writes at the end of an epoch only when at least
``min_steps`` optimiser steps or ``min_seconds`` seconds have passed since its last write,
whichever comes first, and always at the end of fit, so the last state of every run is on disk.
A checkpoint is always at an epoch end, where a resumed run continues exactly
(:mod:`lit_bayes.data.base`). Giving ``every_n_epochs``, ``every_n_train_steps`` or
``train_time_interval``, or a ``monitor`` (model selection must see every validation score),
turns the throttle off: those follow Lightning's rules.

A run stopped by SIGTERM (what a batch scheduler sends before it kills a job) writes ``last.ckpt`` at the
step it reached, so ``--ckpt_path`` continues it from there; Lightning's loops raise ``SIGTERMException``
after the step, which the ``lit-bayes`` command turns into exit code 143 (128 + SIGTERM).
"""
from __future__ import annotations

import time
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_bayes.validation import check_optional_int, check_positive

__all__ = ["RunCheckpoint"]


class RunCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` writing at epoch ends at most every ``min_steps`` steps or ``min_seconds``
    seconds (module docstring) and once more when fit ends.

    Args:
        min_steps: steps since the last write after which an epoch end writes; ``None``: no step trigger.
        min_seconds: seconds since the last write after which an epoch end writes; ``None``: no time
            trigger (with both ``None`` only the end of fit writes).
        *args, **kwargs: those of ``ModelCheckpoint``; ``enable_version_counter`` is False by default, so
            ``last.ckpt`` is overwritten however the resumed run spells its directory.
    """

    def __init__(self, *args: Any, min_steps: int | None = 1000, min_seconds: float | None = 600.0,
                 **kwargs: Any) -> None:
        self.min_steps = check_optional_int("min_steps", min_steps, 1)
        self.min_seconds = None if min_seconds is None else check_positive("min_seconds", min_seconds)
        kwargs.setdefault("enable_version_counter", False)  # last.ckpt is overwritten, never last-v1.ckpt beside it
        triggers = ("every_n_epochs", "every_n_train_steps", "train_time_interval")
        self.throttled = kwargs.get("monitor") is None and all(kwargs.get(name) in (None, 0) for name in triggers)
        super().__init__(*args, **kwargs)
        self._last_write = (0, time.monotonic())  # (global step, monotonic time) of the last write

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        self._last_write = (trainer.global_step, time.monotonic())

    def due(self, trainer) -> bool:
        """Whether an epoch end at this step writes (the same answer on every process)."""
        if not self.throttled:
            return True
        step, when = self._last_write
        by_steps = self.min_steps is not None and trainer.global_step - step >= self.min_steps
        by_time = self.min_seconds is not None and time.monotonic() - when >= self.min_seconds
        return bool(trainer.strategy.broadcast(by_steps or by_time))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.due(trainer):
            self._write_if_saved(trainer, lambda: super(RunCheckpoint, self).on_train_epoch_end(trainer, pl_module))

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or self.due(trainer):
            self._write_if_saved(trainer, lambda: super(RunCheckpoint, self).on_validation_end(trainer, pl_module))

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """On SIGTERM, the checkpoint of the step reached (``last.ckpt``), named in a warning."""
        if not isinstance(exception, SIGTERMException) or not self.save_last:
            return
        if not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        rank_zero_warn(f"stopped by SIGTERM after step {trainer.global_step}: {self.last_model_path} continues the "
                       f"run (--ckpt_path {self.last_model_path})")

    def on_train_end(self, trainer, pl_module) -> None:
        """The final checkpoint, unless the last epoch end wrote this very step. With a ``monitor``
        only ``last.ckpt``: the final state has no fresh score to rank it among the best."""
        if self._should_skip_saving_checkpoint(trainer):
            return
        candidates = self._monitor_candidates(trainer)
        if self.monitor is None:
            self._save_topk_checkpoint(trainer, candidates)
        self._save_last_checkpoint(trainer, candidates)
        self._last_write = (trainer.global_step, time.monotonic())

    def _write_if_saved(self, trainer, save) -> None:
        """Run ModelCheckpoint's ``save`` hook; restart the throttle's clock if it wrote."""
        before = self._last_global_step_saved
        save()
        if self._last_global_step_saved != before:
            self._last_write = (trainer.global_step, time.monotonic())
