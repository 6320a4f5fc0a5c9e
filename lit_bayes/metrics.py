"""torchmetrics Metrics for posterior predictives (their states sync across processes)."""
from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric

__all__ = ["NLPD", "BrierScore", "PerSampleAccuracy", "PerSampleECE", "PerSampleRMSE"]


class NLPD(Metric):
    """Negative log predictive density, ``-(1/N) sum_i log p_bar(y_i | x_i)``.

    ``update`` takes log p_bar(y_i | x_i) per point, already marginalised over samples in
    log space (log-mean-exp, :func:`lit_bayes.predictive.marginal_predictive`).
    """

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, log_prob_target: Tensor) -> None:
        self.total -= log_prob_target.double().sum()
        self.count += log_prob_target.numel()

    def compute(self) -> Tensor:
        return self.total / self.count


class BrierScore(Metric):
    """Multiclass Brier score ``(1/N) sum_i ||p_bar(. | x_i) - onehot(y_i)||^2``."""

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, probs: Tensor, target: Tensor) -> None:
        onehot = torch.nn.functional.one_hot(target.long(), probs.shape[-1]).to(probs.dtype)
        self.total += ((probs - onehot) ** 2).sum().double()
        self.count += target.numel()

    def compute(self) -> Tensor:
        return self.total / self.count


class PerSampleECE(Metric):
    """Mean over S samples of each sample's own top-label ECE (``n_bins`` equal-width bins).

    The pbnn convention (feynman-kac spec tables): every sample is scored alone, then the
    S ECEs are averaged. It ignores the calibration gained by averaging predictives.
    """

    full_state_update = False

    def __init__(self, num_samples: int, n_bins: int = 15, **kwargs) -> None:
        super().__init__(**kwargs)
        self.n_bins = n_bins
        for name in ("count", "confidence", "accuracy"):
            self.add_state(name, default=torch.zeros(num_samples, n_bins, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, sample_probs: Tensor, target: Tensor) -> None:
        """``sample_probs`` (S, B, C) class probabilities of each sample."""
        conf, pred = sample_probs.max(-1)
        correct = (pred == target.unsqueeze(0)).double()
        bins = (conf * self.n_bins).long().clamp_(max=self.n_bins - 1)
        self.count.scatter_add_(1, bins, torch.ones_like(correct))
        self.confidence.scatter_add_(1, bins, conf.double())
        self.accuracy.scatter_add_(1, bins, correct)

    def compute(self) -> Tensor:
        total = self.count.sum(1, keepdim=True)
        gap = (self.confidence - self.accuracy).abs() / total
        return gap.sum(1).mean()


class PerSampleAccuracy(Metric):
    """Mean over S samples of each sample's own argmax accuracy (pbnn's convention)."""

    full_state_update = False

    def __init__(self, num_samples: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("correct", default=torch.zeros(num_samples, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, sample_probs: Tensor, target: Tensor) -> None:
        """``sample_probs`` (S, B, C) class probabilities of each sample."""
        self.correct += (sample_probs.argmax(-1) == target.unsqueeze(0)).double().sum(1)
        self.count += target.numel()

    def compute(self) -> Tensor:
        return (self.correct / self.count).mean()


class PerSampleRMSE(Metric):
    """Mean over S samples of each sample's own RMSE, ``(1/S) sum_s sqrt(mean_i (f_s(x_i) - y_i)^2)``
    (feynman-kac spec §6.0: pbnn's RMSE, against the noise-free function for its synthetic data)."""

    full_state_update = False

    def __init__(self, num_samples: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("squared", default=torch.zeros(num_samples, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, sample_means: Tensor, target: Tensor) -> None:
        """``sample_means`` (S, B) each sample's predicted mean."""
        self.squared += ((sample_means.double() - target.double().unsqueeze(0)) ** 2).sum(1)
        self.count += target.numel()

    def compute(self) -> Tensor:
        return (self.squared / self.count).sqrt().mean()
