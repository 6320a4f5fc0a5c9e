"""``MAPBaseline``: the MAP estimate of the same posterior, scored on the test set beside the sampler."""
from __future__ import annotations

import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from lit_bayes.callbacks.uncertainty_metrics import UncertaintyMetrics
from lit_bayes.predictive import marginal_predictive
from lit_bayes.validation import check_int, check_positive

__all__ = ["MAPBaseline"]

STAGE = "map_test"


def _autograd_copy(tensor: Tensor, device: torch.device) -> Tensor:
    """``tensor`` on ``device`` as a tensor autograd may save: a copy made inside a test's inference mode
    (``.to("cuda")`` of the CPU training data) is an inference tensor, which backward refuses."""
    tensor = tensor.to(device)
    return tensor.clone() if tensor.is_inference() else tensor


class MAPBaseline(Callback):
    """Before the first test, finds the MAP estimate of the sampler's own posterior (same network,
    likelihood, prior, temperature and energy, :mod:`lit_bayes.posterior`) by ``steps``
    full-batch Adam steps on U(theta) / N from the network's initial parameters; at test, scores
    it with the same metrics as the sampler's predictive (:class:`UncertaintyMetrics`) and
    reports them as ``baseline/map/test/<metric>`` (logged, and in ``summary.json``). A
    posterior worth its cost beats this baseline on NLPD and calibration.

    The fit uses the DataModule's ``train_data`` (every lit_bayes DataModule has it).

    Args:
        steps: Adam steps (>= 1).
        lr: Adam's learning rate.
        n_bins: ECE bins, as :class:`UncertaintyMetrics`.
    """

    def __init__(self, steps: int = 2000, lr: float = 1e-2, n_bins: int = 15) -> None:
        self.steps = check_int("steps", steps, 1)
        self.lr = check_positive("lr", lr)
        self.scores = UncertaintyMetrics(n_bins=n_bins)
        self.params: dict[str, Tensor] | None = None
        self._metrics: dict[str, float] = {}

    def fit_map(self, pl_module, x: Tensor, y: Tensor) -> dict[str, Tensor]:
        """The MAP parameters, stacked as one chain ``(1, ...)`` (gradients on, also inside a test), from
        training data on any device."""
        with torch.inference_mode(False), torch.enable_grad():
            x, y = _autograd_copy(x, pl_module.device), _autograd_copy(y, pl_module.device)
            params = {n: p.detach().clone().unsqueeze(0).requires_grad_(True)
                      for n, p in pl_module.template_parameters().items()}
            optimizer = torch.optim.Adam(params.values(), lr=self.lr)
            for _ in range(self.steps):
                optimizer.zero_grad()
                (pl_module.energy(params, x, y).sum() / y.shape[0]).backward()
                optimizer.step()
        return {n: p.detach() for n, p in params.items()}

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        if self.params is not None:
            return
        data = getattr(getattr(trainer, "datamodule", None), "train_data", None)
        if data is None:
            raise ValueError("MAPBaseline needs a DataModule with train_data (a lit_bayes DataModule)")
        self.params = self.fit_map(pl_module, *data.tensors)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self.params is None:
            return
        x, y = batch
        log_weights = torch.zeros(1, device=pl_module.device)
        predictive = marginal_predictive(pl_module, self.params, log_weights, x, y)
        self.scores.on_predictive(trainer, pl_module, STAGE, predictive, y, inputs=x)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        if STAGE not in self.scores.metrics:
            return
        values = self.scores.metrics.pop(STAGE).compute()
        self._metrics = {f"baseline/map/test/{name}": float(value) for name, value in values.items()}
        for logger in trainer.loggers:
            logger.log_metrics(self._metrics, step=trainer.global_step)

    def summary_metrics(self) -> dict[str, float]:
        """The MAP's test metrics (empty before a test)."""
        return dict(self._metrics)
