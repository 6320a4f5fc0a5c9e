"""``ChainStacking``: the stacked predictive of chains that sit in separate modes, beside the equal-weight one."""
from __future__ import annotations

import math

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from lit_bayes.callbacks.posterior_samples import PosteriorSamples
from lit_bayes.callbacks.uncertainty_metrics import UncertaintyMetrics
from lit_bayes.predictive import marginal_predictive, uniform_log_weights
from lit_bayes.stacking import stacked_log_density, stacking_weights

__all__ = ["ChainStacking"]

STAGE = "stacked_test"


class ChainStacking(Callback):
    """Chain stacking (Yao, Vehtari & Gelman 2022; :mod:`lit_bayes.stacking`): before the first test, weights
    per chain that maximise the log predictive density of the **validation** split (each chain's predictive is
    the mean over its kept draws), then, at test, the predictive with those weights scored beside the
    equal-weight one: ``test/stacked/<metric>`` (NLPD, ECE, ... as :class:`UncertaintyMetrics`), the weights
    ``stacking/weight_<k>`` and the validation NLPD of both, ``stacking/val_nlpd_stacked`` and
    ``stacking/val_nlpd_equal``, in the logs and ``summary.json``. Chains that agree get weights near equal
    and change nothing; chains in separate modes are weighted by how well their mode predicts, not by how
    many chains started in it. Needs a :class:`PosteriorSamples` among the callbacks, a DataModule with
    ``val_data`` and one process (it reads the chains this process kept).

    Args:
        n_bins: ECE bins, as :class:`UncertaintyMetrics`.
    """

    def __init__(self, n_bins: int = 15) -> None:
        self.scores = UncertaintyMetrics(n_bins=n_bins)
        self.weights: Tensor | None = None
        self._samples: tuple[dict[str, Tensor], Tensor] | None = None
        self._metrics: dict[str, float] = {}

    def chain_draws(self, trainer, pl_module) -> dict[str, Tensor] | None:
        """The kept draws by chain, named ``(chains, draws, ...)``; None when none were kept."""
        store = next((c for c in trainer.callbacks if isinstance(c, PosteriorSamples)), None)
        trace = None if store is None else store.trace()
        return None if trace is None else pl_module.chains.unflatten(trace.to(pl_module.device))

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self.fit_weights(trainer, pl_module)

    def fit_weights(self, trainer, pl_module) -> Tensor | None:
        """The stacking weights ``(chains,)``, fitted on the validation split once (at the end of fit when
        :class:`RunHealth` asks for them, else before the first test); None when they cannot be fitted."""
        if self._samples is not None:
            return self.weights
        if trainer.world_size > 1:
            rank_zero_warn("ChainStacking reads the chains of one process: it is skipped with several processes")
            return None
        draws, data = self.chain_draws(trainer, pl_module), getattr(trainer.datamodule, "val_data", None)
        if draws is None or data is None or len(data) == 0:
            rank_zero_warn("ChainStacking needs kept draws (PosteriorSamples) and a validation split: skipped")
            return None
        x, y = (t.to(pl_module.device) for t in data.tensors[:2])
        chains, per_chain = next(iter(draws.values())).shape[:2]
        uniform = uniform_log_weights(per_chain, pl_module.device)
        with torch.no_grad():  # each chain's log predictive density of every validation point, (chains, points)
            lpd = torch.stack([marginal_predictive(pl_module, {n: p[k] for n, p in draws.items()}, uniform, x,
                                                   y).log_prob_target for k in range(chains)]).double()
        self.weights = stacking_weights(lpd)
        equal = torch.full_like(self.weights, 1.0 / chains)
        points = lpd.shape[1]
        self._metrics = {f"stacking/weight_{k}": float(w) for k, w in enumerate(self.weights)}
        self._metrics["stacking/val_nlpd_stacked"] = -float(stacked_log_density(self.weights.log(), lpd)) / points
        self._metrics["stacking/val_nlpd_equal"] = -float(stacked_log_density(equal.log(), lpd)) / points
        log_weights = self.weights.log() - math.log(per_chain)  # each chain's weight shared by its draws
        flat = {n: p.reshape(chains * per_chain, *p.shape[2:]) for n, p in draws.items()}
        self._samples = flat, log_weights.repeat_interleave(per_chain).to(pl_module.device, torch.float32)
        return self.weights

    def health_summary(self) -> dict[str, float] | None:
        """What the health verdict's ``separate_modes`` reason cites: the weights and both validation NLPDs."""
        if self.weights is None:
            return None
        return {"weights": self.weights.tolist(), "val_nlpd_equal": self._metrics["stacking/val_nlpd_equal"],
                "val_nlpd_stacked": self._metrics["stacking/val_nlpd_stacked"]}

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self._samples is None:
            return
        x, y = batch
        predictive = marginal_predictive(pl_module, *self._samples, x, y)
        self.scores.on_predictive(trainer, pl_module, STAGE, predictive, y, inputs=x)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        if STAGE not in self.scores.metrics:
            return
        values = self.scores.metrics.pop(STAGE).compute()
        self._metrics.update({f"test/stacked/{name}": float(value) for name, value in values.items()})
        for logger in trainer.loggers:
            logger.log_metrics(self._metrics, step=trainer.global_step)

    def summary_metrics(self) -> dict[str, float]:
        """The weights, the validation NLPDs and the stacked test metrics (empty before a test)."""
        return dict(self._metrics)
