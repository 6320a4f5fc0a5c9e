"""``ExponentialLRDecay``: an exponentially decaying learning rate for a sampler's torch optimiser."""
from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from lit_bayes.schedules import exponential_decay
from lit_bayes.validation import check_int, check_positive

__all__ = ["ExponentialLRDecay"]


class ExponentialLRDecay(Callback):
    """Set every optimiser's learning rate to ``lr_0 * decay ** (step / decay_steps)`` before each
    training step, ``lr_0`` being the rate it was built with (kept in its param groups as
    ``initial_lr``, so a resumed run continues the schedule). For ``MAP`` (the Feynman-Kac
    crescent's MAP baseline: ``0.1 * 0.96 ** (step / 10)``, the schedule that ``OHSMC``/``SGSMC``
    take as ``lr_decay``/``lr_decay_steps``); ``decay=1`` leaves the rate alone."""

    def __init__(self, decay: float, decay_steps: int = 1) -> None:
        self.decay = check_positive("decay", decay)
        self.decay_steps = check_int("decay_steps", decay_steps, 1)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
                group["lr"] = exponential_decay(group["initial_lr"], self.decay, trainer.global_step, self.decay_steps)
