"""``OODMetrics``: how well predictive entropy and mutual information tell out-of-distribution
inputs from the test set (AUROC and AUPR), for the sampler's predictive and MAP's."""
from __future__ import annotations

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from lit_bayes.callbacks.map_baseline import MAPBaseline
from lit_bayes.metrics import OODDetection
from lit_bayes.predictive import Predictive, marginal_predictive, posterior_samples
from lit_bayes.validation import check_optional_int

__all__ = ["OODMetrics"]

# score name -> the Predictive field it reads
SCORES = {"entropy": "entropy", "mi": "mutual_information"}
# MAP is one point estimate: its mutual information is 0 at every input, so it has only the entropy
SOURCE_SCORES = {"sampler": ("entropy", "mi"), "map": ("entropy",)}


class OODMetrics(Callback):
    """At test, scores out-of-distribution detection: the positives are the inputs of ``ood``'s
    test split, the negatives the test set's, and each point is scored by

    - ``entropy``: H[p_bar] of the posterior predictive p_bar (nats; total uncertainty);
    - ``mi``: the mutual information H[p_bar] - mean_s H[p_s] over the draws (the epistemic part),

    both from :class:`lit_bayes.predictive.Predictive`. Each score's AUROC and AUPR
    (:class:`lit_bayes.metrics.OODDetection`; the positives' share of the points is the AUPR of a
    blind score) are logged as ``test/ood_<score>_auroc`` and ``test/ood_<score>_aupr`` and land in
    ``summary.json``. A predictive that knows what it has not seen scores far-away inputs as
    uncertain: AUROC near 1.

    With a :class:`MAPBaseline` among the callbacks, its MAP estimate is scored the same way, as
    ``baseline/map/test/ood_entropy_auroc`` and ``..._aupr`` (logged, and in ``summary.json``).
    MAP's mutual information is 0 everywhere (one point estimate has no disagreement between
    draws), so it is not reported.

    The test set's predictive comes from :class:`PredictiveMarginal` (``on_predictive``); the OOD
    inputs are marginalised over the same draws (``posterior_samples``), ``chunk_size`` draws at a
    time (as :class:`PredictiveMarginal`). With several processes each takes its share of the OOD
    points and the scores are gathered.

    Args:
        ood: a DataModule whose test split holds the OOD inputs, of the model's input shape;
            its batches are ``x`` or tuples ``(x, ...)`` (labels are ignored). E.g.
            :class:`lit_bayes.data.FarAwayPoints`, or ``TorchvisionImages`` with a
            ``test_transform`` from :mod:`lit_bayes.data.ood`.
        chunk_size: draws per vectorised chunk (``None``: sized to the batch).
    """

    def __init__(self, ood: LightningDataModule, chunk_size: int | None = None) -> None:
        if not isinstance(ood, LightningDataModule):
            raise ValueError(f"ood must be a LightningDataModule whose test split holds the OOD inputs, got {ood!r}")
        self.ood = ood
        self.chunk_size = check_optional_int("chunk_size", chunk_size, 1)
        self._detection: dict[str, dict[str, OODDetection]] = {}
        self._input_shape: tuple[int, ...] | None = None
        self._metrics: dict[str, float] = {}

    def setup(self, trainer, pl_module, stage: str) -> None:
        if pl_module.likelihood.task != "classification":
            raise ValueError(
                f"OODMetrics scores the entropy of a class predictive; {type(pl_module.likelihood).__name__} "
                f"is a {pl_module.likelihood.task} likelihood"
            )

    def _update(self, pl_module, source: str, predictive: Predictive, out_of_distribution: bool) -> None:
        detection = self._detection.setdefault(
            source, {name: OODDetection().to(pl_module.device) for name in SOURCE_SCORES[source]}
        )
        for name, metric in detection.items():
            metric.update(getattr(predictive, SCORES[name]), out_of_distribution)

    def _predict(self, pl_module, draws: tuple[dict[str, Tensor], Tensor], x: Tensor) -> Predictive:
        samples, log_weights = draws
        return marginal_predictive(pl_module, samples, log_weights, x, chunk_size=self.chunk_size)

    @staticmethod
    def _map_draws(trainer, pl_module) -> tuple[dict[str, Tensor], Tensor] | None:
        params = next((c.params for c in trainer.callbacks if isinstance(c, MAPBaseline) and c.params is not None),
                      None)
        return None if params is None else (params, torch.zeros(1, device=pl_module.device))

    def _ood_batches(self, trainer, pl_module):
        """This process's share of the OOD inputs, batch by batch, on the module's device."""
        self.ood.setup("test")
        for batch in self.ood.test_dataloader():
            x = batch[0] if isinstance(batch, (tuple, list)) else batch
            if self._input_shape is not None and tuple(x.shape[1:]) != self._input_shape:
                raise ValueError(
                    f"ood inputs have point shape {tuple(x.shape[1:])} but the test set's are {self._input_shape}: "
                    f"the ood DataModule must give inputs the model takes"
                )
            x = x[trainer.global_rank::trainer.world_size]
            if len(x):
                yield x.to(pl_module.device)

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._detection = {}

    def on_predictive(self, trainer, pl_module, stage, predictive, target, inputs=None) -> None:
        if stage != "test":
            return
        if inputs is not None:
            self._input_shape = tuple(inputs.shape[1:])
        self._update(pl_module, "sampler", predictive, out_of_distribution=False)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        draws = self._map_draws(trainer, pl_module)
        if draws is not None:
            self._update(pl_module, "map", self._predict(pl_module, draws, batch[0]), out_of_distribution=False)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        if "sampler" not in self._detection:
            raise ValueError(
                "OODMetrics got no test predictive: add lit_bayes.callbacks.PredictiveMarginal to the callbacks"
            )
        sources = {"sampler": posterior_samples(trainer, pl_module)}
        map_draws = self._map_draws(trainer, pl_module)
        if map_draws is not None:
            sources["map"] = map_draws
        for x in self._ood_batches(trainer, pl_module):
            for source, draws in sources.items():
                self._update(pl_module, source, self._predict(pl_module, draws, x), out_of_distribution=True)
        values = {source: {f"ood_{name}_{stat}": value for name, metric in self._detection[source].items()
                           for stat, value in metric.compute().items()} for source in sources}
        for name, value in values["sampler"].items():
            pl_module.log(f"test/{name}", value.float(), sync_dist=True)  # equal on every process already
        if "map" in values:
            self._metrics = {f"baseline/map/test/{name}": float(value) for name, value in values["map"].items()}
            for logger in trainer.loggers:
                logger.log_metrics(self._metrics, step=trainer.global_step)
        self._detection = {}

    def summary_metrics(self) -> dict[str, float]:
        """MAP's OOD metrics (empty before a test, or without a :class:`MAPBaseline`)."""
        return dict(self._metrics)
