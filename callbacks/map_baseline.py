"""``MAPBaseline``: the MAP estimate of the same posterior, scored on the test set beside the sampler."""
from __future__ import annotations

import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from lit_bayes.callbacks.uncertainty_metrics import UncertaintyMetrics
from lit_bayes.map_fit import MapFit, fit_map
from lit_bayes.predictive import marginal_predictive, uniform_log_weights
from lit_bayes.samplers.base import module_draws
from lit_bayes.validation import check_int

__all__ = ["MAPBaseline"]

MAP_STAGE, ENSEMBLE_STAGE = "map_test", "ensemble_test"


class MAPBaseline(Callback):
    """The baselines a posterior must beat, fitted on the sampler's own posterior (same network, likelihood,
    prior, temperature and energy, :mod:`lit_bayes.posterior`) by ``steps`` Adam steps on U(theta) / N
    (:func:`lit_bayes.map_fit.fit_map`; full-batch, or on random minibatches of ``batch_size``):

    - the MAP estimate, begun at the network's initial parameters, reported as ``baseline/map/test/<metric>``;
    - with ``ensemble=K``, a deep ensemble (Lakshminarayanan et al. 2017) of K MAP fits, each begun at its
      own re-initialisation of the network (its layers' ``reset_parameters``, seeded from the sampler's
      seed), their predictives averaged, reported as ``baseline/ensemble/test/<metric>``.

    Both are scored at test with the same metrics as the sampler's predictive (:class:`UncertaintyMetrics`),
    logged and written to ``summary.json``. The MAP's NLPD on the validation split
    (:meth:`validation_nlpd`) is what :class:`RunHealth` compares the posterior's with (``worse_than_map``).
    The fits run once, when first needed, on the DataModule's ``train_data`` (every lit_bayes DataModule has
    it).

    Args:
        steps: Adam steps (>= 1).
        lr: Adam's learning rate.
        n_bins: ECE bins, as :class:`UncertaintyMetrics`.
        ensemble: members of the deep ensemble; 0 (default) fits none.
        batch_size: points per Adam step, drawn at random from the sampler's ``"baselines"`` stream; ``None``
            (default): the full training set every step.
    """

    def __init__(self, steps: int = 2000, lr: float = 1e-2, n_bins: int = 15, ensemble: int = 0,
                 batch_size: int | None = None) -> None:
        self.fit_options = MapFit(steps, lr, batch_size)
        self.ensemble = check_int("ensemble", ensemble, 0)
        self.scores = UncertaintyMetrics(n_bins=n_bins)
        self.params: dict[str, Tensor] | None = None
        self.ensemble_params: dict[str, Tensor] | None = None
        self._validation_nlpd: float | None = None
        self._metrics: dict[str, float] = {}

    def fit_map(self, pl_module, x: Tensor, y: Tensor, start: dict[str, Tensor] | None = None,
                generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """MAP parameters stacked ``(S, ...)`` from ``start`` (default: the network's initial parameters as one
        set), from training data on any device, minibatches drawn from ``generator``; gradients on, also inside
        a test."""
        if start is None:
            start = {n: p.detach().unsqueeze(0) for n, p in pl_module.template_parameters().items()}
        return fit_map(pl_module, start, x.to(pl_module.device), y.to(pl_module.device), self.fit_options, generator)

    def fit(self, trainer, pl_module) -> None:
        """Fit the MAP estimate (and the ensemble) once."""
        if self.params is not None:
            return
        data = getattr(getattr(trainer, "datamodule", None), "train_data", None)
        if data is None:
            raise ValueError("MAPBaseline needs a DataModule with train_data (a lit_bayes DataModule)")
        x, y = data.tensors[:2]
        generator = pl_module.stream_generator("baselines", torch.device("cpu"))
        self.params = self.fit_map(pl_module, x, y, generator=generator)
        if self.ensemble:
            starts = module_draws(pl_module.model, self.ensemble, generator)
            starts = {f"net.{n}": p for n, p in starts.items()}
            starts.update({n: p.detach().unsqueeze(0).repeat(self.ensemble, *([1] * p.dim()))
                           for n, p in pl_module.template_parameters().items() if n not in starts})
            starts = {n: starts[n].to(pl_module.device) for n in self.params}
            self.ensemble_params = self.fit_map(pl_module, x, y, starts, generator)

    def validation_nlpd(self, trainer, pl_module) -> float | None:
        """The MAP estimate's NLPD on the DataModule's validation split (fitting it first if needed); None
        without a validation split."""
        data = getattr(getattr(trainer, "datamodule", None), "val_data", None)
        if data is None or len(data) == 0:
            return None
        if self._validation_nlpd is None:
            self.fit(trainer, pl_module)
            x, y = (t.to(pl_module.device) for t in data.tensors[:2])
            with torch.no_grad():
                predictive = marginal_predictive(pl_module, self.params, torch.zeros(1, device=pl_module.device), x, y)
            self._validation_nlpd = float(-predictive.log_prob_target.mean())
        return self._validation_nlpd

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self.fit(trainer, pl_module)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self.params is None:
            return
        x, y = batch
        for stage, params in ((MAP_STAGE, self.params), (ENSEMBLE_STAGE, self.ensemble_params)):
            if params is not None:
                log_weights = uniform_log_weights(next(iter(params.values())).shape[0], pl_module.device)
                predictive = marginal_predictive(pl_module, params, log_weights, x, y)
                self.scores.on_predictive(trainer, pl_module, stage, predictive, y, inputs=x)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        for stage, name in ((MAP_STAGE, "map"), (ENSEMBLE_STAGE, "ensemble")):
            if stage in self.scores.metrics:
                values = self.scores.metrics.pop(stage).compute()
                self._metrics.update({f"baseline/{name}/test/{metric}": float(v) for metric, v in values.items()})
        if self._metrics:
            for logger in trainer.loggers:
                logger.log_metrics(self._metrics, step=trainer.global_step)

    def summary_metrics(self) -> dict[str, float]:
        """The baselines' test metrics (empty before a test)."""
        return dict(self._metrics)
