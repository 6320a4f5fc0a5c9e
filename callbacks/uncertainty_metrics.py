"""``UncertaintyMetrics``: accuracy, NLPD, ECE, Brier (classification); NLPD, RMSE (regression)."""
from __future__ import annotations

from lightning.pytorch.callbacks import Callback
from torchmetrics import MeanSquaredError, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassCalibrationError

from lit_bayes.metrics import NLPD, BrierScore, PerSampleECE

__all__ = ["UncertaintyMetrics"]


class UncertaintyMetrics(Callback):
    """Scores the posterior predictive handed over by :class:`PredictiveMarginal`.

    Accuracy, NLPD, ECE and Brier score are computed on the *averaged* predictive
    p_bar (ECE: top-label, ``n_bins`` equal-width bins, L1; torchmetrics
    ``MulticlassCalibrationError``). ``per_sample_ece=True`` adds ``ece_per_sample``, the
    mean of each sample's own ECE (pbnn's tables; needs ``PredictiveMarginal(keep_per_sample=True)``).
    Regression gets NLPD (Gaussian-mixture predictive) and RMSE of the predictive mean.
    Values are logged as ``val/<name>`` and ``test/<name>`` at the end of each epoch;
    torchmetrics states sync across processes.
    """

    def __init__(self, n_bins: int = 15, per_sample_ece: bool = False) -> None:
        self.n_bins = n_bins
        self.per_sample_ece = per_sample_ece
        self.metrics: dict[str, MetricCollection] = {}
        self.per_sample: dict[str, PerSampleECE] = {}

    def _collection(self, pl_module, stage: str) -> MetricCollection:
        if stage not in self.metrics:
            if pl_module.likelihood.task == "classification":
                c = pl_module.likelihood.num_classes
                metrics = {
                    "accuracy": MulticlassAccuracy(c, average="micro"),
                    "nlpd": NLPD(),
                    "ece": MulticlassCalibrationError(c, n_bins=self.n_bins, norm="l1"),
                    "brier": BrierScore(),
                }
            else:
                metrics = {"nlpd": NLPD(), "rmse": MeanSquaredError(squared=False)}
            self.metrics[stage] = MetricCollection(metrics).to(pl_module.device)
        return self.metrics[stage]

    def on_predictive(self, trainer, pl_module, stage, predictive, target) -> None:
        metrics = self._collection(pl_module, stage)
        if pl_module.likelihood.task == "classification":
            probs = predictive.probs
            metrics["accuracy"].update(probs, target)
            metrics["ece"].update(probs, target)
            metrics["brier"].update(probs, target)
            if self.per_sample_ece:
                if predictive.sample_log_probs is None:
                    raise ValueError("per_sample_ece needs PredictiveMarginal(keep_per_sample=True)")
                if stage not in self.per_sample:
                    num = predictive.sample_log_probs.shape[0]
                    self.per_sample[stage] = PerSampleECE(num, self.n_bins).to(pl_module.device)
                self.per_sample[stage].update(predictive.sample_log_probs.exp(), target)
        else:
            metrics["rmse"].update(predictive.mean, target)
        metrics["nlpd"].update(predictive.log_prob_target)

    def _log(self, pl_module, stage: str) -> None:
        if stage not in self.metrics:
            return
        values = {f"{stage}/{k}": v for k, v in self.metrics[stage].compute().items()}
        if stage in self.per_sample:
            values[f"{stage}/ece_per_sample"] = self.per_sample.pop(stage).compute()
        for name, value in values.items():
            pl_module.log(name, value.float(), sync_dist=True)  # equal on every process already
        self.metrics[stage].reset()

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self._log(pl_module, "val")

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._log(pl_module, "test")
