"""``UncertaintyMetrics``: accuracy, NLPD, ECE, Brier (classification); NLPD, RMSE (regression)."""
from __future__ import annotations

from typing import Literal

from lightning.pytorch.callbacks import Callback
from torchmetrics import MeanSquaredError, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassCalibrationError

from lit_bayes.metrics import NLPD, BrierScore, PerSampleAccuracy, PerSampleECE, PerSampleRMSE

__all__ = ["UncertaintyMetrics"]


class UncertaintyMetrics(Callback):
    """Scores the posterior predictive handed over by :class:`PredictiveMarginal`.

    Accuracy, NLPD, ECE and Brier score are computed on the *averaged* predictive
    p_bar (ECE: top-label, ``n_bins`` equal-width bins, L1; torchmetrics
    ``MulticlassCalibrationError``). Regression gets NLPD (Gaussian-mixture predictive) and
    RMSE of the predictive mean. ``per_sample=True`` adds pbnn's per-sample metrics (each
    sample scored alone, then averaged over samples; feynman-kac spec §6.0):
    ``ece_per_sample`` and ``accuracy_per_sample``, or ``rmse_per_sample``; it needs
    ``PredictiveMarginal(keep_per_sample=True)``.

    ``rmse_reference="noise_free"`` scores the RMSEs against the DataModule's noise-free
    function (its ``noise_free(x)``, e.g. :class:`lit_bayes.data.SyntheticRegression`)
    instead of the noisy targets; NLPD always uses the targets.
    Values are logged as ``val/<name>`` and ``test/<name>`` at the end of each epoch;
    torchmetrics states sync across processes.
    """

    def __init__(self, n_bins: int = 15, per_sample: bool = False,
                 rmse_reference: Literal["target", "noise_free"] = "target") -> None:
        if rmse_reference not in ("target", "noise_free"):
            raise ValueError(f"rmse_reference must be 'target' or 'noise_free', got {rmse_reference!r}")
        self.n_bins = n_bins
        self.per_sample = per_sample
        self.rmse_reference = rmse_reference
        self.metrics: dict[str, MetricCollection] = {}
        self.per_sample_metrics: dict[str, MetricCollection] = {}

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

    def _per_sample_collection(self, pl_module, stage: str, num_samples: int) -> MetricCollection:
        if stage not in self.per_sample_metrics:
            if pl_module.likelihood.task == "classification":
                metrics = {"ece_per_sample": PerSampleECE(num_samples, self.n_bins),
                           "accuracy_per_sample": PerSampleAccuracy(num_samples)}
            else:
                metrics = {"rmse_per_sample": PerSampleRMSE(num_samples)}
            self.per_sample_metrics[stage] = MetricCollection(metrics).to(pl_module.device)
        return self.per_sample_metrics[stage]

    def _rmse_target(self, trainer, target, inputs):
        if self.rmse_reference == "target":
            return target
        noise_free = getattr(getattr(trainer, "datamodule", None), "noise_free", None)
        if noise_free is None or inputs is None:
            raise ValueError("rmse_reference='noise_free' needs a DataModule with a noise_free(x) method")
        return noise_free(inputs).to(target.dtype)

    def on_predictive(self, trainer, pl_module, stage, predictive, target, inputs=None) -> None:
        metrics = self._collection(pl_module, stage)
        classification = pl_module.likelihood.task == "classification"
        per_sample = predictive.sample_log_probs if classification else predictive.sample_means
        if self.per_sample and per_sample is None:
            raise ValueError("per_sample metrics need PredictiveMarginal(keep_per_sample=True)")
        if classification:
            probs = predictive.probs
            metrics["accuracy"].update(probs, target)
            metrics["ece"].update(probs, target)
            metrics["brier"].update(probs, target)
            if self.per_sample:
                self._per_sample_collection(pl_module, stage, per_sample.shape[0]).update(per_sample.exp(), target)
        else:
            reference = self._rmse_target(trainer, target, inputs)
            metrics["rmse"].update(predictive.mean, reference)
            if self.per_sample:
                self._per_sample_collection(pl_module, stage, per_sample.shape[0]).update(per_sample, reference)
        metrics["nlpd"].update(predictive.log_prob_target)

    def _log(self, pl_module, stage: str) -> None:
        if stage not in self.metrics:
            return
        values = {f"{stage}/{k}": v for k, v in self.metrics[stage].compute().items()}
        if stage in self.per_sample_metrics:
            values.update({f"{stage}/{k}": v for k, v in self.per_sample_metrics.pop(stage).compute().items()})
        for name, value in values.items():
            pl_module.log(name, value.float(), sync_dist=True)  # equal on every process already
        self.metrics[stage].reset()

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self._log(pl_module, "val")

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._log(pl_module, "test")
