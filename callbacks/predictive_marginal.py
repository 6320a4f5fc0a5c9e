"""``PredictiveMarginal``: the posterior predictive of every validation and test batch."""
from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from lit_bayes.predictive import marginal_predictive, posterior_samples
from lit_bayes.validation import check_optional_int

__all__ = ["PredictiveMarginal"]


class PredictiveMarginal(Callback):
    """Marginalises the predictive over the kept samples (or the current chains when none
    are kept yet) on every validation/test batch, vectorised over samples and points,
    ``chunk_size`` samples at a time (``None``: sized to the batch's tiles of points on CPU,
    :func:`lit_bayes.predictive.default_chunk_size` and ``default_tile_points``), on the trainer's device.

    Each result (:class:`lit_bayes.predictive.Predictive`) is handed to every callback
    that defines ``on_predictive(trainer, pl_module, stage, predictive, target, inputs)``,
    such as :class:`UncertaintyMetrics`. ``keep_per_sample`` also hands over each
    sample's own predictive (needed for the per-sample ECE).
    """

    def __init__(self, chunk_size: int | None = None, keep_per_sample: bool = False) -> None:
        self.chunk_size = check_optional_int("chunk_size", chunk_size, 1)
        self.keep_per_sample = keep_per_sample
        self._samples = None

    def _load(self, trainer, pl_module) -> None:
        self._samples = posterior_samples(trainer, pl_module)

    def _batch(self, trainer, pl_module, stage: str, batch) -> None:
        x, y = batch
        pl_module.likelihood.check_target(y, f"{stage} targets")
        samples, log_weights = self._samples
        predictive = marginal_predictive(
            pl_module, samples, log_weights, x, y, chunk_size=self.chunk_size, keep_per_sample=self.keep_per_sample
        )
        for callback in trainer.callbacks:
            if hasattr(callback, "on_predictive"):
                callback.on_predictive(trainer, pl_module, stage, predictive, y, inputs=x)

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._load(trainer, pl_module)

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._load(trainer, pl_module)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._batch(trainer, pl_module, "val", batch)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._batch(trainer, pl_module, "test", batch)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self._samples = None

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._samples = None
