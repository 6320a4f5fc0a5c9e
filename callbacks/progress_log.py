"""``ProgressLog``: a plain progress line every few minutes for runs without a progress bar."""
from __future__ import annotations

import math
import sys
import time
from typing import Optional

from lightning.pytorch.callbacks import Callback

from lit_bayes.validation import check_positive

__all__ = ["ProgressLog", "format_duration"]


def format_duration(seconds: float) -> str:
    """``3725.4`` -> ``"1 h 2 min"``, ``125`` -> ``"2 min 5 s"``, ``42.3`` -> ``"42 s"``."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


class ProgressLog(Callback):
    """Every ``every_s`` seconds of training, one line on standard error: the step reached of the run's
    total, the time this process has trained, its rate, from the second line on the rate since the line
    before, and the time left at the latest rate, e.g.

        lit-bayes: step 600 / 3000 (20 %), 10 min 4 s in this process (0.99 steps/s), ~40 min 24 s left
        lit-bayes: step 2100 / 3000 (70 %), 15 min 4 s in this process (2.3 steps/s; 5 in the last 5 min 0 s),
            ~3 min 0 s left                         (printed as one line)

    The estimate follows the latest rate, so a run that was paused, shared its core for a while or spent
    its first minutes loading a checkpoint or compiling is not promised hours it will not take.
    A step is a training batch (one sampler transition). Only while the trainer has no progress bar
    (scripts and recipe grids turn it off, and a log file holds no bar), on the global-zero rank; a
    resumed run counts from the step it resumed at, so the rates and the estimate are this process's.
    ``every_s=None`` turns it off. The check per step is one clock read.
    """

    def __init__(self, every_s: Optional[float] = 300.0) -> None:
        self.every_s = None if every_s is None else check_positive("every_s", every_s)
        self._start_time = self._start_step = self._next = None
        self._last_line: tuple[float, int] | None = None  # (clock, step) of the line before

    def on_train_start(self, trainer, pl_module) -> None:
        self._start_time = time.monotonic()
        self._start_step = self._steps_done(trainer)
        self._last_line = None
        self._next = self._start_time + self.every_s if self.every_s is not None else math.inf

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every_s
        if trainer.progress_bar_callback is None and trainer.is_global_zero:
            step = self._steps_done(trainer)
            recent = None if self._last_line is None else (step - self._last_line[1], now - self._last_line[0])
            print(self.line(step, trainer.estimated_stepping_batches, now - self._start_time, recent),
                  file=sys.stderr, flush=True)
            self._last_line = (now, step)

    def line(self, step: int, total: float, elapsed: float, recent: tuple[int, float] | None = None) -> str:
        """The progress line at ``step`` of ``total`` (``inf``: no end known) after ``elapsed`` seconds, with
        ``recent`` = (steps, seconds) since the line before (``None`` for the first line)."""
        rate = (step - self._start_step) / elapsed if elapsed > 0 else 0.0
        text = f"lit-bayes: step {step}"
        if math.isfinite(total) and total > 0:
            text += f" / {int(total)} ({100 * step / total:.0f} %)"
        text += f", {format_duration(elapsed)} in this process ({rate:.3g} steps/s"
        if recent is not None and recent[1] > 0:
            rate = recent[0] / recent[1]
            text += f"; {rate:.3g} in the last {format_duration(recent[1])}"
        text += ")"
        if math.isfinite(total) and rate > 0:
            text += f", ~{format_duration(max(0.0, total - step) / rate)} left"
        return text

    @staticmethod
    def _steps_done(trainer) -> int:
        """Training batches processed over the whole run (restored with a checkpoint; the batch whose
        ``on_train_batch_end`` runs is counted)."""
        return trainer.fit_loop.epoch_loop.batch_progress.total.processed
